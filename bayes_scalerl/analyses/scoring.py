"""Proper scores of predictive draws against held-out observations.

Every function takes an array of draws with the draws along ``axis`` (the last by
default) and observations ``y`` that broadcast against the remaining (leading) axes, so
one call scores every run and held-out point at once.

- :func:`crps_from_draws`: the continuous ranked probability score in its energy form,
  ``E|X - y| - 1/2 E|X - X'|`` (Gneiting & Raftery 2007, eq. 21), lower is better; for
  a single draw (a point forecast) it is the absolute error.
- :func:`central_interval` and :func:`interval_coverage`: central intervals at given
  probabilities and whether they hold the observation.
- :func:`median_abs_error`: absolute error of the predictive median.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike

__all__ = ["crps_from_draws", "central_interval", "interval_coverage", "median_abs_error"]


def _draws_last(draws: ArrayLike, axis: int) -> np.ndarray:
    x = np.asarray(draws, float)
    if x.ndim == 0:
        raise ValueError("draws must have at least one axis (the draws)")
    x = np.moveaxis(x, axis, -1)
    if x.shape[-1] == 0:
        raise ValueError("draws is empty along the draw axis")
    return x


def crps_from_draws(draws: ArrayLike, y: ArrayLike, *, axis: int = -1, fair: bool = False) -> np.ndarray:
    """CRPS of the empirical distribution of ``draws`` at the observation ``y``.

    Uses the energy form ``E|X - y| - 1/2 E|X - X'|``. The second term is computed from
    the sorted draws, ``E|X - X'| = 2 / n^2 * sum_i (2 i - n - 1) x_(i)``, in
    ``O(n log n)`` instead of ``O(n^2)``.

    Parameters
    ----------
    draws : array_like, shape (..., n)
        Predictive draws (along ``axis``).
    y : array_like
        Observations, broadcastable to the draws' shape without the draw axis.
    axis : int
        The draw axis of ``draws``.
    fair : bool
        If False (default) the score is the CRPS of the empirical distribution of the
        draws (pairs averaged over ``n^2``, the ``i = j`` pairs included). If True, the
        "fair" estimate of the CRPS of the distribution the draws come from (pairs
        averaged over ``n (n - 1)``; Ferro 2014), unbiased for any ``n >= 2``.

    Returns
    -------
    ndarray
        The score, shape ``broadcast(draws.shape without axis, y.shape)``; lower is
        better. For ``n = 1`` (a point forecast, ``fair=False``) it is ``|x - y|``.

    Examples
    --------
    >>> round(float(crps_from_draws([0.5], 0.7)), 6)
    0.2
    >>> round(float(crps_from_draws([0.0, 1.0], 0.5)), 6)
    0.25
    """
    x = _draws_last(draws, axis)
    y = np.asarray(y, float)
    n = x.shape[-1]
    if fair and n < 2:
        raise ValueError("the fair CRPS needs at least two draws")
    term1 = np.mean(np.abs(x - y[..., None]), axis=-1)
    xs = np.sort(x, axis=-1)
    weights = 2.0 * np.arange(1, n + 1) - n - 1
    pair_sum = 2.0 * np.sum(weights * xs, axis=-1)  # sum over all ordered pairs of |x_i - x_j|
    term2 = pair_sum / (n * (n - 1) if fair else n * n)
    return term1 - 0.5 * term2


def central_interval(draws: ArrayLike, prob: float, *, axis: int = -1) -> tuple[np.ndarray, np.ndarray]:
    """Central interval holding ``prob`` of the draws.

    Parameters
    ----------
    draws : array_like
        Predictive draws (along ``axis``).
    prob : float
        Probability in ``(0, 1)``; the bounds are the ``(1 - prob) / 2`` and
        ``(1 + prob) / 2`` quantiles (``numpy.quantile``, linear interpolation).
    axis : int
        The draw axis.

    Returns
    -------
    tuple of ndarray
        ``(lower, upper)``, each of the draws' shape without the draw axis.
    """
    if not 0.0 < prob < 1.0:
        raise ValueError(f"prob must be in (0, 1), got {prob!r}")
    x = _draws_last(draws, axis)
    lo, hi = np.quantile(x, [(1.0 - prob) / 2.0, (1.0 + prob) / 2.0], axis=-1)
    return lo, hi


def interval_coverage(
    draws: ArrayLike, y: ArrayLike, probs: Sequence[float] = (0.5, 0.9), *, axis: int = -1
) -> np.ndarray:
    """Whether each central interval holds its observation (bounds included).

    Parameters
    ----------
    draws : array_like
        Predictive draws (along ``axis``).
    y : array_like
        Observations, broadcastable to the draws' shape without the draw axis.
    probs : sequence of float
        Probabilities of the central intervals (see :func:`central_interval`).
    axis : int
        The draw axis.

    Returns
    -------
    ndarray of bool, shape (len(probs), ...)
        ``covered[k]`` is True where ``lower_k <= y <= upper_k``; its mean over the
        observations is the empirical coverage of the ``probs[k]`` interval.
    """
    x = _draws_last(draws, axis)
    y = np.asarray(y, float)
    out = []
    for p in probs:
        lo, hi = central_interval(x, p)
        out.append((lo <= y) & (y <= hi))
    return np.stack(out) if out else np.zeros((0,) + np.broadcast_shapes(x.shape[:-1], y.shape), bool)


def median_abs_error(draws: ArrayLike, y: ArrayLike, *, axis: int = -1) -> np.ndarray:
    """Absolute error ``|median(draws) - y|`` of the predictive median.

    Returns
    -------
    ndarray
        Shape ``broadcast(draws.shape without axis, y.shape)``.
    """
    x = _draws_last(draws, axis)
    return np.abs(np.median(x, axis=-1) - np.asarray(y, float))
