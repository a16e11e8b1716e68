"""The batch's AR(1) noise correlation from least-squares residuals, by restricted likelihood.

``Priors(rho="reml")`` fixes every run's AR(1) correlation at one value for the batch,
estimated before the fit by this module (``rho="auto"``, the default, by a variogram).
The estimate here fits each run by least squares
(:func:`~.least_squares.refined_residuals`) and maximises, over a grid of ``rho``, the
batch's restricted (residual) likelihood (Patterson and Thompson 1971) of the sigmoid
linearised at each run's fit, each run's ``sigma`` profiled out:

    sum over runs of  -1/2 [ (n - p) log(e' K^-1 e / (n - p)) + log det K
                             + log det(J' K^-1 J) ],

``K`` the AR(1) correlation matrix of the run's ``n`` fitted points, ``J`` the ``n x p``
Jacobian of the curve in ``(A - R0, log C_mid, log B)`` and ``e`` the residuals
projected off ``J``'s columns in the metric ``K^-1``. The plain likelihood of the
residuals is pulled towards 0, by about ``(p + 1) / n``, because the fit absorbs part of
the errors' correlated wander; the ``log det(J' K^-1 J)`` term and the ``n - p`` degrees
of freedom take that pull out.

Beside the variogram (:func:`~bayes_scalerl.data.noise.noise_correlation_arrays`, the
default ``rho="auto"``), this is ``Priors(rho="reml")``. Differencing needs no fit, but the
variogram's ratio is flat at high correlation, so a curve's curvature moves it a long way
there: on dense power laws with AR(1) noise of ``rho`` 0.5-0.8 it read its cap 0.9 and
the bands covered 0.99 of the held-out evaluations; this estimate read 0.69-0.76 there
(``benchmarks/results/noise-correlation-estimates.md``). The residuals here are those of
the sigmoid itself, so a misfit that is smooth over many evaluations reads as
correlation (0.1-0.5 on wiggles with independent noise).

It is not the default because the bands were not better calibrated
(``benchmarks/results/rho-reml.md``): on the misspecification benchmark it brought the
power law under AR(1) noise from 0.98-0.99 to 0.85-0.96, and the late-drifting curves down
to 0.72-0.81 (at 48 evaluations a run, under AR(1) noise 0.93 -> 0.77 at 2x, under
independent noise 0.89 -> 0.78 at 4x): the variogram's overestimate there, from the drop's
curvature, had widened their bands for the drift that no fit of the window sees.
Scenarios inside 0.85-0.95 went 10 -> 8 of 21 at 2x and stayed 11 at 4x (48
evaluations), 14 -> 15 and 12 -> 12 (200 evaluations); DAPO 0.918 / 0.947 against 0.916
/ 0.947.

AR(1) whitening is first-order, so every quadratic form above is a function of three
``4 x 4`` cross-product matrices per run (lag 0, lag 1 and the lagged lag 0 of the
residuals and the Jacobian's columns), formed once: the grid costs ``O(grid x run)``
small matrix operations, however dense the logs.
"""

from __future__ import annotations

import numpy as np

from .least_squares import refined_residuals

__all__ = ["residual_correlation_arrays", "restricted_loglik", "RHO_GRID", "MIN_POINTS", "MAX_RUNS"]

#: Grid of the estimate: 0 to 0.9 in steps of 0.005 (the variogram's cap too).
RHO_GRID = np.linspace(0.0, 0.9, 181)
#: Fewest fitted evaluations (compute > 0) a run needs: three above the curve's parameters.
MIN_POINTS = 6
#: At most this many runs enter (the first ones): one value for the batch (each run's
#: least-squares fit takes a few ms from the coarse grid start).
MAX_RUNS = 256
#: A run whose Jacobian is this close to singular (smallest over largest eigenvalue of
#: ``J'J``) has a flat direction (no rise to fit) and is left out.
_MIN_CONDITION = 1e-10


def _cross_products(resid: np.ndarray, jac: np.ndarray, used: np.ndarray):
    """Per run: the first point's outer product and the lag-0, lag-1 and lagged cross products."""
    v = np.concatenate([resid[..., None], jac], axis=-1) * used[..., None]  # run, point, 1 + p
    cur = v[:, 1:] * used[:, 1:, None]  # the fitted points are packed: used[t] implies used[t - 1]
    prev = v[:, :-1] * used[:, 1:, None]
    first = v[:, 0]
    F = first[:, :, None] * first[:, None, :]
    S0 = np.einsum("rti,rtj->rij", cur, cur)
    S1 = np.einsum("rti,rtj->rij", cur, prev)
    S2 = np.einsum("rti,rtj->rij", prev, prev)
    return F, S0, S1 + np.swapaxes(S1, -1, -2), S2


def restricted_loglik(
    resid: np.ndarray, jac: np.ndarray, used: np.ndarray, rho: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Each run's restricted profile log-likelihood at each ``rho`` (see the module docstring).

    Parameters
    ----------
    resid : ndarray, shape (run, point)
        Residuals, each run's fitted points packed to the front of its row.
    jac : ndarray, shape (run, point, p)
        The curve's Jacobian at those points.
    used : ndarray of bool, shape (run, point)
    rho : ndarray, shape (grid,)
        Correlations in ``[0, 1)``.

    Returns
    -------
    loglik : ndarray, shape (grid, run)
        Up to a constant; ``-inf`` where a run has no more points than parameters.
    ok : ndarray of bool, shape (run,)
        The runs whose Jacobian has full rank (the others are ``-inf`` throughout).
    """
    p = jac.shape[-1]
    n = used.sum(axis=1)
    F, S0, S1s, S2 = _cross_products(resid, jac, used)
    r = np.asarray(rho, float)[:, None, None, None]
    M = F + (S0 - r * S1s + r * r * S2) / (1.0 - r * r)  # grid, run, 1 + p, 1 + p
    G, b, ww = M[..., 1:, 1:], M[..., 1:, 0], M[..., 0, 0]
    eig = np.linalg.eigvalsh(S0[:, 1:, 1:] + F[:, 1:, 1:])  # J'J at rho = 0
    ok = (n > p) & (eig[:, 0] > _MIN_CONDITION * np.maximum(eig[:, -1], 1e-300))
    G = np.where(ok[None, :, None, None], G, np.eye(p))
    sign, logdet_g = np.linalg.slogdet(G)
    e2 = ww - np.einsum("gri,gri->gr", b, np.linalg.solve(G, b[..., None])[..., 0])
    dof = np.maximum(n - p, 1)
    s2 = np.maximum(e2 / dof, 1e-300)
    logdet_k = (n - 1)[None, :] * np.log1p(-(r[..., 0, 0] ** 2))
    ll = -0.5 * (dof * np.log(s2) + logdet_k + logdet_g)
    ok = ok & np.all(sign > 0, axis=0)
    return np.where(ok[None, :], ll, -np.inf), ok


def residual_correlation_arrays(compute, reward, mask, R0) -> float:
    """The batch's AR(1) correlation of consecutive evaluations' errors (restricted likelihood).

    Parameters
    ----------
    compute, reward, mask : ndarray, shape (run, point)
        A fit window's points (``mask`` the fitted ones, consecutive, in order of compute).
    R0 : ndarray, shape (run,)
        Each run's first evaluation.

    Returns
    -------
    float
        The grid value of :data:`RHO_GRID` with the largest summed restricted
        log-likelihood; 0 when no run has :data:`MIN_POINTS` points and a rise to fit.

    Examples
    --------
    >>> import numpy as np
    >>> from bayes_scalerl.models.residual_correlation import residual_correlation_arrays
    >>> c = np.tile(np.linspace(0, 8000, 41), (8, 1))
    >>> y = 0.3 + 0.3 / (1 + (3000 / np.maximum(c, 1)) ** 2)
    >>> e = np.random.default_rng(0).normal(0, 0.01, y.shape)
    >>> rho = residual_correlation_arrays(c, y + e, np.ones_like(c, bool), y[:, 0])
    >>> bool(rho < 0.2)
    True
    """
    _, resid, jac, used = refined_residuals(
        compute, reward, mask, R0, min_points=MIN_POINTS, max_runs=MAX_RUNS, coarse=True
    )
    if not used.any():
        return 0.0
    ll, ok = restricted_loglik(resid, jac, used, RHO_GRID)
    if not ok.any():
        return 0.0
    return float(RHO_GRID[np.argmax(ll[:, ok].sum(axis=1))])
