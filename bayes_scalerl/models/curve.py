"""The ScaleRL sigmoid and its algebra, in log compute.

The curve is

.. math:: R(C) = R_0 + (A - R_0)\\,\\sigma\\big(B(\\log C - \\log C_{mid})\\big),

which equals ``R0 + (A - R0) / (1 + (C_mid / C) ** B)`` but never forms the power,
so it is finite for every ``C >= 0`` (``C = 0`` gives ``R0``).  Every function here
works on NumPy and JAX arrays alike and broadcasts its arguments.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

__all__ = [
    "gain_fraction",
    "scalerl_curve",
    "compute_to_reach",
    "linearised",
]

ArrayLike = Any


def _xp(*arrays: ArrayLike):
    """Return ``jax.numpy`` if any argument is a JAX array, else ``numpy``."""
    for a in arrays:
        if type(a).__module__.startswith("jax"):
            return jnp
    return np


def gain_fraction(compute: ArrayLike, B: ArrayLike, C_mid: ArrayLike) -> ArrayLike:
    """Fraction of the gain ``A - R0`` reached at ``compute``.

    Parameters
    ----------
    compute : array_like
        Training compute, ``>= 0`` (any unit, the same as ``C_mid``).
    B : array_like
        Scaling exponent, ``> 0``.
    C_mid : array_like
        Compute at half of the gain, ``> 0``.

    Returns
    -------
    array_like
        ``sigmoid(B * (log(compute) - log(C_mid)))`` in ``[0, 1]``; exactly 0 at ``compute == 0``.
    """
    xp = _xp(compute, B, C_mid)
    compute = xp.asarray(compute)
    positive = compute > 0
    log_c = xp.log(xp.where(positive, compute, 1.0))
    if xp is jnp:
        return xp.where(positive, jax.nn.sigmoid(B * (log_c - xp.log(C_mid))), 0.0)
    # 1 / (1 + (C_mid / C)^B); exp overflows to inf far below C_mid, giving exactly 0
    with np.errstate(over="ignore"):
        s = 1.0 / (1.0 + np.exp(B * (np.log(C_mid) - log_c)))
    return np.where(positive, s, 0.0)


def scalerl_curve(
    compute: ArrayLike, A: ArrayLike, B: ArrayLike, C_mid: ArrayLike, R0: ArrayLike
) -> ArrayLike:
    """Expected reward ``R(C)`` of the ScaleRL sigmoid.

    Parameters
    ----------
    compute : array_like
        Training compute, ``>= 0``.
    A : array_like
        Asymptote (ceiling) of the reward.
    B : array_like
        Scaling exponent, ``> 0``.
    C_mid : array_like
        Compute at half of the gain, ``> 0``.
    R0 : array_like
        Reward before training.

    Returns
    -------
    array_like
        ``R0 + (A - R0) * gain_fraction(compute, B, C_mid)``.

    Examples
    --------
    >>> float(scalerl_curve(2500.0, A=0.61, B=1.9, C_mid=2500.0, R0=0.3))
    0.455
    """
    return R0 + (A - R0) * gain_fraction(compute, B, C_mid)


def compute_to_reach(
    reward: ArrayLike, A: ArrayLike, B: ArrayLike, C_mid: ArrayLike, R0: ArrayLike
) -> ArrayLike:
    """Compute at which the curve reaches ``reward`` (inverse of :func:`scalerl_curve`).

    Returns ``inf`` where the curve never reaches ``reward`` (at or beyond ``A``, or
    not above ``R0`` for a rising curve) and 0 where ``reward == R0``.
    """
    xp = _xp(reward, A, B, C_mid, R0)
    f = (xp.asarray(reward) - R0) / (A - R0)
    inside = (f > 0) & (f < 1)
    fs = xp.where(inside, f, 0.5)
    c = C_mid * xp.exp(xp.log(fs / (1.0 - fs)) / B)
    out = xp.where(inside, c, xp.inf)
    return xp.where(f == 0, 0.0, out)


def linearised(
    compute: ArrayLike, reward: ArrayLike, A: ArrayLike, R0: ArrayLike
) -> tuple[ArrayLike, ArrayLike]:
    """The paper's linearised view: ``log C`` against ``log((R - R0) / (A - R))``.

    On this view the sigmoid is the straight line ``B * (log C - log C_mid)``, so
    its slope is ``B`` and it crosses zero at ``log C_mid``.  Points outside
    ``(R0, A)`` map to NaN.

    Returns
    -------
    tuple of array_like
        ``(log(compute), log((reward - R0) / (A - reward)))``.
    """
    xp = _xp(compute, reward, A, R0)
    reward = xp.asarray(reward)
    ok = (reward > R0) & (reward < A)
    ratio = xp.where(ok, (reward - R0) / xp.where(ok, A - reward, 1.0), 1.0)
    y = xp.where(ok, xp.log(ratio), xp.nan)
    x = xp.log(xp.where(xp.asarray(compute) > 0, compute, xp.nan))
    return x, y
