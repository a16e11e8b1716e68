"""How strongly neighbouring evaluations share their errors, estimated from the data alone.

Real training curves are evaluated every few hundred steps, and neighbouring checkpoints
share luck: their evaluation errors are correlated. A model that counts every evaluation
as independent evidence is then too sure of the curve. :func:`noise_correlation` gives the
AR(1) correlation ``rho`` of consecutive evaluations' errors, pooled over a batch of
runs, before the Bayesian fit, so that ``Priors(likelihood="ar1", rho="auto")`` can fix it
for every run instead of sampling it (which converges poorly on short windows).

Two estimators (:func:`estimate_rho`). The default (``"auto"``) is the variogram of second
differences described here, :func:`noise_correlation_arrays`. ``Priors(rho="reml")`` uses
the restricted likelihood of each run's least-squares residuals instead
(:mod:`bayes_scalerl.models.residual_correlation`): closer to the truth where the curve
bends, but measured, not better calibrated (below).

The variogram estimator. For errors ``e`` with AR(1)
correlation ``rho`` and a mean curve that is close to a straight line over five
consecutive evaluations, the second differences at lag 1 and lag 2,

    a_t = y_(t+1) - 2 y_t + y_(t-1),    b_t = y_(t+2) - 2 y_t + y_(t-2),

have ``E b^2 / E a^2 = R(rho) = (1 + rho) (3 - rho^2) / (3 - rho)``: 1 for independent
errors, rising to 2 as ``rho -> 1``. The batch's ratio of pooled mean squares is inverted
for ``rho``. Differencing removes the curve's level and slope, so (unlike the
autocorrelation of a fit's residuals, which the fit itself pulls towards 0) the estimate
needs no fit. The curve's curvature is what remains: it adds 16 times as much to ``b^2``
as to ``a^2``, so a curve that bends sharply within a few evaluations (relative to its
noise) reads as correlated noise, the safe direction.

Measured on the misspecification simulator (48 runs a batch, 12-48 evaluations a run;
``rho`` 0.5-0.8 when correlated), the pooled estimate was 0.00-0.07 for independent and
binomial noise on sigmoid, creep, wiggle, power-law and exponential curves, and
0.62-0.98 for AR(1) noise (the inversion saturates near 1: ``R`` is flat there); curves
that drift down sharply late read 0.15-0.30 with independent noise.

Where it errs, and what it costs. The ratio is flat at high correlation (``R`` is 1.81 at
``rho = 0.65`` and 1.98 at 0.9), so the curve's curvature moves the estimate a long way
there. On dense saturating power laws with AR(1) noise of ``rho`` 0.5-0.8 (the
misspecification simulator, 200 evaluations a run, 16 runs, fitted up to half the budget)
it read the cap, 0.90, at one simulation seed and 0.70 at another, where the sigmoid,
creep, double, drift, exponential and wiggle families read 0.51-0.71; the default's 90%
band then covered 0.994 of the held-out evaluations, and 0.907 (CRPS 0.0113 against
0.0126) with ``rho`` fixed at 0.65. The other way round, the sigmoid control, which reads
0.54, covered 0.905, and 0.993 with ``rho`` fixed at 0.9. Dropping each run's first 10-50%
of points did not move the power law's estimate (its curvature is not only early);
curvature-robust variants (products of neighbouring second differences) read 0.5-0.9
there and were too noisy on windows of a dozen points. ``rho="reml"`` reads 0.69-0.76 there,
and its bands are not better calibrated overall
(:mod:`bayes_scalerl.models.residual_correlation`). A too-high ``rho`` errs on the wide
side.
"""

from __future__ import annotations

import numpy as np

from .packing import pack, packing

__all__ = [
    "ESTIMATED_RHO",
    "estimate_rho",
    "fixed_rho",
    "noise_correlation",
    "noise_correlation_arrays",
    "variogram_ratio",
    "with_window_rho",
]

#: Values of ``Priors.rho`` that are estimated from the batch before the fit: ``"auto"``
#: (the default: the variogram, :func:`noise_correlation_arrays`) and ``"reml"`` (the
#: restricted likelihood of the least-squares residuals,
#: :func:`~bayes_scalerl.models.residual_correlation.residual_correlation_arrays`).
ESTIMATED_RHO = ("auto", "reml")

#: Fewest fitted evaluations a run needs to enter the estimate (two lag-2 differences).
MIN_EVALUATIONS = 6
#: The estimate is clipped to ``[0, RHO_MAX]`` (see :func:`noise_correlation_arrays`).
RHO_MAX = 0.9


def variogram_ratio(rho: np.ndarray | float) -> np.ndarray:
    """``E b^2 / E a^2`` for AR(1) errors with correlation ``rho`` (see the module docstring)."""
    rho = np.asarray(rho, float)
    return (1.0 + rho) * (3.0 - rho**2) / (3.0 - rho)


def noise_correlation_arrays(reward: np.ndarray, mask: np.ndarray) -> float:
    """Pooled AR(1) correlation of the evaluations ``reward[i, mask[i]]`` of each run ``i``.

    Parameters
    ----------
    reward : ndarray, shape (run, point)
        Evaluations in order of compute.
    mask : ndarray of bool, shape (run, point)
        The evaluations to use (each run's fitted points; they are taken as consecutive).

    Returns
    -------
    float
        The estimate, clipped to ``[0, RHO_MAX]``: a negative estimate would make the
        fit surer than independent errors do, the riskier error when the estimate is
        itself uncertain; near 1 the ratio is too flat to tell values apart. 0 when no
        run has :data:`MIN_EVALUATIONS` evaluations.

    Notes
    -----
    Each run adds ``(n - 4)`` times its mean squares of ``a`` and of ``b`` to the pooled
    sums (``n`` its evaluations), so runs weigh by their length and their noise variance.
    """
    reward = np.asarray(reward, float)
    mask = np.asarray(mask, bool) & np.isfinite(reward)
    # each run's used evaluations moved to the front of its row, in order (no loop over runs)
    p = packing(mask)
    y, n = pack(reward, p, fill=0.0), p.count
    pos = np.arange(y.shape[1])[None, :]
    a = y[:, 2:] - 2.0 * y[:, 1:-1] + y[:, :-2]
    b = y[:, 4:] - 2.0 * y[:, 2:-2] + y[:, :-4]
    a2 = np.where(pos[:, : a.shape[1]] + 2 < n[:, None], a * a, 0.0).sum(axis=1) / np.maximum(n - 2, 1)
    b2 = np.where(pos[:, : b.shape[1]] + 4 < n[:, None], b * b, 0.0).sum(axis=1) / np.maximum(n - 4, 1)
    weight = np.where(n >= MIN_EVALUATIONS, n - 4, 0)
    sum_a, sum_b = float(np.sum(weight * a2)), float(np.sum(weight * b2))
    if not sum_a > 0:
        return 0.0
    ratio = sum_b / sum_a
    grid = np.linspace(0.0, RHO_MAX, 901)
    return float(np.interp(ratio, variogram_ratio(grid), grid))  # clipped at both ends


def estimate_rho(compute, reward, mask, R0, method: str = "auto") -> float:
    """The batch's AR(1) correlation by ``method`` (one of :data:`ESTIMATED_RHO`).

    Parameters
    ----------
    compute, reward, mask : ndarray, shape (run, point)
        A fit window's points (``mask`` the fitted ones).
    R0 : ndarray, shape (run,)
        Each run's first evaluation.
    method : {"auto", "reml"}
        ``"auto"``: the variogram, :func:`noise_correlation_arrays` (no fit); ``"reml"``:
        the restricted likelihood of each run's least-squares residuals
        (:func:`~bayes_scalerl.models.residual_correlation.residual_correlation_arrays`).

    Returns
    -------
    float
    """
    if method == "auto":
        return noise_correlation_arrays(reward, mask)
    if method != "reml":
        raise ValueError(f"the correlation's estimate is one of {ESTIMATED_RHO}, got {method!r}")
    from ..models.residual_correlation import residual_correlation_arrays  # models import this module

    return residual_correlation_arrays(compute, reward, mask, R0)


def noise_correlation(
    runs,
    *,
    min_compute: float | None = None,
    fit_until: float | None = None,
    method: str = "auto",
) -> float:
    """Pooled AR(1) correlation of consecutive evaluations' errors in a batch of runs.

    The value ``Priors(rho="auto")`` fixes for every run (``method="reml"``: the one
    ``Priors(rho="reml")`` fixes).

    Parameters
    ----------
    runs : Runs or pandas.DataFrame
        The runs (``run, compute, reward`` columns at least).
    min_compute, fit_until : float, optional
        Use only the evaluations a fit with these settings would fit.
    method : {"auto", "reml"}
        See :func:`estimate_rho`.

    Returns
    -------
    float
        In ``[0, 0.9]``.

    Examples
    --------
    >>> import bayes_scalerl as bs
    >>> rho = bs.noise_correlation(bs.demo_runs())  # doctest: +SKIP
    """
    from .runs import Runs

    if not isinstance(runs, Runs):
        runs = Runs.from_frame(runs)
    window = runs.window(min_compute=min_compute, fit_until=fit_until, R0_fitted=False)
    return estimate_rho(window.compute, window.reward, window.mask, window.R0, method)


def fixed_rho(rho: float | str, compute, reward, mask, R0) -> float:
    """The fixed AR(1) correlation that ``Priors(rho=rho)`` gives these points.

    Parameters
    ----------
    rho : float or {"auto", "reml"}
        A number is the correlation itself; one of :data:`ESTIMATED_RHO` is estimated
        from the points (:func:`estimate_rho`).
    compute, reward, mask, R0 : ndarray
        A fit window's points, as :func:`estimate_rho` takes them.

    Returns
    -------
    float
    """
    if isinstance(rho, str):
        return estimate_rho(
            np.atleast_2d(np.asarray(compute)),
            np.atleast_2d(np.asarray(reward)),
            np.atleast_2d(np.asarray(mask)),
            np.atleast_1d(np.asarray(R0)),
            rho,
        )
    return float(rho)


def with_window_rho(window, rho):
    """``window`` with every run's fixed AR(1) correlation set: ``rho`` itself, or with one of
    :data:`ESTIMATED_RHO` the window's own estimate (:func:`fixed_rho` of its fitted
    points). Returns the new window and the value."""
    value = fixed_rho(rho, window.compute, window.reward, window.mask, window.R0)
    return window._replace(rho=np.full(np.shape(window.R0), value)), value
