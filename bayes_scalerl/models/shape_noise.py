"""Smooth departures from the sigmoid: an Ornstein-Uhlenbeck process in log compute.

A dense training log (hundreds of evaluations a run) does not only carry evaluation
noise around a sigmoid: the curve itself departs from any sigmoid in stretches that span
many evaluations (a wiggle, a creep). With independent (or AR(1), neighbour-to-neighbour)
errors every one of those evaluations counts as fresh evidence about the sigmoid, so the
fit is as sure of the curve's shape as the number of evaluations allows, while the error
of the shape does not shrink. ``Priors(shape_noise=...)`` adds the departures to the
noise model: the errors of the fitted points are

    e = AR(1) evaluation noise (sd sigma, correlation rho)
        + f(log C),  f an Ornstein-Uhlenbeck process of sd kappa sigma and length scale ell

so their correlation matrix is ``R(rho) + kappa^2 exp(-|x_i - x_j| / ell)`` (``x = log C``)
times ``sigma^2``. With ``(kappa, ell)`` fixed (one value for the batch, estimated before
the fit by :func:`shape_noise_arrays`), the matrix does not depend on the sampled
parameters. The errors are the sum of two first-order processes, so they are whitened by
a Kalman filter whose gains are computed once per run (:func:`state_space_whitening`,
``point * 9`` numbers) and applied as a parallel prefix scan (:func:`apply_whitening`,
``O(point)`` work): the dense whitening matrix (:func:`whitening`, kept as the reference
the tests check against) took ``point^2`` memory and work at every gradient. A fit of 16
simulated wiggles of 900 evaluations took 973 s with the matrix, 88 s with the filter and
27 s without the term (``benchmarks/dense_logs.py --fit``). The gain ``A - R0`` is
still integrated out in closed form (:func:`~bayes_scalerl.models.scalerl.gain_conditional`).

Beyond the data, a new evaluation's error has the process's conditional mean and variance
given the fitted points' errors (:func:`noise_forecast`): the departure seen at the end of
the data decays over ``ell`` e-folds of compute, and its variance returns to
``kappa^2 sigma^2``.

The estimate (:func:`shape_noise_arrays`) fits each run by least squares
(:func:`~bayes_scalerl.models.least_squares.paper_fit_arrays`, refined by
Levenberg-Marquardt), and maximises the batch's
Gaussian likelihood of the residuals over a grid of ``(kappa, ell)``, each run's ``sigma``
profiled out, with ``rho`` fixed at the batch's evaluation-noise correlation. ``kappa`` is
kept only where the likelihood beats ``kappa = 0`` by :data:`MIN_GAIN` log units (a
likelihood-ratio test of two parameters at about the 5% level), so batches without
departures are fitted exactly as without the term.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ..data.packing import pack, packing
from .least_squares import refined_residuals

__all__ = [
    "KAPPA_GRID",
    "ELL_GRID",
    "RHO_GRID",
    "MIN_GAIN",
    "correlation_matrix",
    "whitening",
    "state_space_whitening",
    "apply_whitening",
    "shape_noise_arrays",
    "noise_forecast",
    "steps_ahead",
    "ar1_lags",
]

#: Grid of the departures' sd, in multiples of the evaluation noise's ``sigma``.
KAPPA_GRID = (0.0, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 4.0)
#: Grid of the departures' length scale, in e-folds of compute.
ELL_GRID = (0.5, 1.0, 2.0, 4.0)
#: Grid of the evaluation noise's AR(1) correlation when it is estimated jointly.
RHO_GRID = (0.0, 0.2, 0.4, 0.6, 0.7, 0.8, 0.9, 0.95)
#: Log-likelihood gain over ``kappa = 0`` below which no departures are kept (half the 95%
#: quantile of a chi-squared with two degrees of freedom, 5.99).
MIN_GAIN = 3.0
#: Fewest fitted evaluations (compute > 0) a run needs to enter the estimate.
MIN_POINTS = 8
#: At most this many runs enter the estimate (the first ones): it is one value for a batch.
MAX_RUNS = 256
#: A run with more fitted evaluations enters the estimate with every ``k``-th of them, ``k``
#: the smallest stride that leaves at most this many (the AR(1) part's correlation then
#: ``rho^k``): the estimate's cost grows with the cube of the points.
MAX_POINTS = 200


def _ar1_lags(mask, xp, lag=None):
    """Lag between fitted points in fitted points, and whether they share a stretch.

    A stretch is a run of consecutive fitted points; a gap breaks the AR(1) chain, as in
    :func:`~bayes_scalerl.models.scalerl.ar1_whiten` (points in different stretches have
    independent AR(1) parts). ``lag`` (:func:`ar1_lags`) counts each step in median
    spacings instead of one. Shapes ``(..., point)`` -> two ``(..., point, point)``.
    """
    m = xp.asarray(mask)
    prev = xp.concatenate([xp.zeros_like(m[..., :1]), m[..., :-1]], axis=-1)
    stretch = xp.cumsum((m & ~prev).astype(xp.int32), axis=-1)
    step = m.astype(xp.int32) if lag is None else xp.where(m, xp.asarray(lag).astype(xp.int32), 0)
    rank = xp.cumsum(step, axis=-1)
    lag = xp.abs(rank[..., :, None] - rank[..., None, :])
    return lag, stretch[..., :, None] == stretch[..., None, :]


def _ar1_correlation(rho, lag, xp):
    """``rho ** lag`` for a ``rho`` of either sign (whole lags)."""
    return xp.where(lag == 0, 1.0, xp.abs(rho) ** lag * xp.sign(rho) ** (lag % 2))


def correlation_matrix(log_c, mask, rho, kappa, ell, xp=jnp, lag=None):
    """Correlation of the fitted points' errors, identity on the others.

    Parameters
    ----------
    log_c : array, shape (..., point)
        Log compute of each point.
    mask : array of bool, shape (..., point)
        Fitted points. The AR(1) part counts the lag between them in evaluations and,
        as :func:`~bayes_scalerl.models.scalerl.ar1_whiten`, breaks at a gap (the fit
        windows the package builds have none); the departures see only ``log C``.
    rho, kappa, ell : array
        Broadcastable to the leading shape.
    xp : module
        ``jax.numpy`` (traced) or ``numpy``.
    lag : array, shape (..., point), optional
        Each fitted point's AR(1) lag from the one before, in median spacings
        (:func:`ar1_lags`); default one evaluation.

    Returns
    -------
    array, shape (..., point, point)
    """
    m = xp.asarray(mask)
    lag, same = _ar1_lags(m, xp, lag)
    rho = xp.asarray(rho, dtype=log_c.dtype)[..., None, None]
    kappa = xp.asarray(kappa, dtype=log_c.dtype)[..., None, None]
    ell = xp.asarray(ell, dtype=log_c.dtype)[..., None, None]
    ar = xp.where(same, _ar1_correlation(rho, lag.astype(log_c.dtype), xp), 0.0)
    ou = kappa**2 * xp.exp(-xp.abs(log_c[..., :, None] - log_c[..., None, :]) / ell)
    both = m[..., :, None] & m[..., None, :]
    eye = xp.eye(log_c.shape[-1], dtype=log_c.dtype)
    return xp.where(both, ar + ou, eye)


def whitening(log_c, mask, rho, kappa, ell, xp=jnp, lag=None):
    """Whitening matrix ``L^-1`` of :func:`correlation_matrix` and ``log det`` of it.

    ``L^-1 e`` has independent unit-variance entries when ``e`` has the correlation
    :func:`correlation_matrix`; rows of points outside the fit are unit vectors. The
    reference for :func:`state_space_whitening`, which the sampler uses. (A Cholesky
    factorisation inside the sampler's program, run on several CPU devices at once, hung
    XLA's CPU runtime: the first chunk never returned.)
    """
    K = correlation_matrix(log_c, mask, rho, kappa, ell, xp=xp, lag=lag)
    L = xp.linalg.cholesky(K)
    eye = xp.broadcast_to(xp.eye(K.shape[-1], dtype=K.dtype), K.shape)
    if xp is jnp:
        W = jax.scipy.linalg.solve_triangular(L, eye, lower=True)
    else:
        W = np.linalg.solve(L, eye)
    logdet = 2.0 * xp.sum(xp.log(xp.diagonal(L, axis1=-2, axis2=-1)), axis=-1)
    return W, logdet


#: Numbers per point of :func:`state_space_whitening`: the filter's transition
#: ``(I - K H) F`` (4, row-major), gain ``K`` (2), ``H F`` (2) and ``1 / sqrt(S)`` (1).
STATE_COLUMNS = 9


def state_space_whitening(log_c, mask, rho, kappa, ell, lag=None) -> tuple[np.ndarray, np.ndarray]:
    """The whitening of :func:`whitening` as a Kalman filter: ``point * 9`` numbers a run.

    The errors are the sum of two first-order processes, the AR(1) evaluation noise
    (correlation ``rho`` from one fitted evaluation to the next, restarted after a gap)
    and the Ornstein-Uhlenbeck departures (correlation ``exp(-dx / ell)`` over ``dx`` of
    log compute), so they are the observations of a two-dimensional linear Gaussian
    state-space model without observation noise. Its Kalman filter turns them into
    independent innovations ``v_i`` of variance ``S_i``; ``v_i / sqrt(S_i)`` is exactly
    ``L^-1 e`` of the Cholesky factor of :func:`correlation_matrix` (points in the same
    order), and ``log det = sum log S_i``. The gains do not depend on the errors, so they
    are computed here once (NumPy, one pass over the points, every run at once), and
    :func:`apply_whitening` whitens any vector in ``O(point)`` work and ``O(log point)``
    depth, where the dense matrix took ``point^2`` memory and work (a sampler's gradient
    multiplies by it at every step).

    Parameters
    ----------
    log_c, mask : ndarray, shape (..., point)
        Log compute and the fitted points; other points are left as they are.
    rho, kappa, ell : float or ndarray
        Broadcastable to the leading shape.
    lag : ndarray, shape (..., point), optional
        Each fitted point's AR(1) lag from the one before, in median spacings
        (:func:`ar1_lags`): the AR(1) part's correlation over that step is
        ``rho ** lag``. Default one evaluation.

    Returns
    -------
    coef : ndarray, shape (..., point, 9)
        Per point: the filter's transition ``(I - K H) F`` (row-major), its gain ``K``,
        ``H F`` and ``1 / sqrt(S)`` (:data:`STATE_COLUMNS`); the identity, 0, 0 and 1 on
        points outside the fit.
    logdet : ndarray, shape (...)
        ``log det`` of the fitted points' correlation matrix.
    """
    x = np.asarray(log_c, float)
    m = np.asarray(mask, bool)
    lead, n = x.shape[:-1], x.shape[-1]
    x, m = x.reshape(-1, n), np.broadcast_to(m, lead + (n,)).reshape(-1, n)
    r = x.shape[0]
    rho, kappa, ell = (np.broadcast_to(np.asarray(v, float), lead).reshape(r) for v in (rho, kappa, ell))
    if lag is not None:
        lag = np.broadcast_to(np.asarray(lag, float), lead + (n,)).reshape(r, n)
    coef, logdet, _ = _kalman_filter(x, m, rho, kappa, ell, lag)
    return coef.reshape(lead + (n, STATE_COLUMNS)), logdet.reshape(lead)


class _FilterEnd(NamedTuple):
    """The filter after each run's last fitted point: state covariance and log compute."""

    p00: np.ndarray
    p01: np.ndarray
    p11: np.ndarray
    x_last: np.ndarray


def _kalman_filter(x, m, rho, kappa, ell, lag=None) -> tuple[np.ndarray, np.ndarray, _FilterEnd]:
    """The covariance recursion of :func:`state_space_whitening` on (run, point) arrays
    (``lag``: each point's AR(1) lag, shape (run, point), or None for one evaluation)."""
    r, n = x.shape
    k2 = kappa**2
    coef = np.zeros((r, n, STATE_COLUMNS))
    coef[..., 0] = coef[..., 3] = coef[..., 8] = 1.0
    p00, p01, p11 = np.zeros(r), np.zeros(r), np.zeros(r)  # the filtered state's covariance
    started, prev_fit = np.zeros(r, bool), np.zeros(r, bool)
    x_last, logdet = np.zeros(r), np.zeros(r)
    for i in range(n):
        fit = m[:, i]
        phi = rho if lag is None else _ar1_correlation(rho, lag[:, i], np)
        f1 = np.where(started & prev_fit, phi, 0.0)  # a gap restarts the AR(1) chain
        f2 = np.where(started, np.exp(-np.abs(x[:, i] - x_last) / ell), 0.0)
        q00 = f1 * f1 * p00 + (1.0 - f1 * f1)  # the predicted covariance F P F^T + Q
        q01 = f1 * f2 * p01
        q11 = f2 * f2 * p11 + k2 * (1.0 - f2 * f2)
        h0, h1 = q00 + q01, q01 + q11  # P H^T, H = (1, 1)
        S = h0 + h1
        k0, k1 = h0 / S, h1 / S
        row = np.stack(
            [(1 - k0) * f1, -k0 * f2, -k1 * f1, (1 - k1) * f2, k0, k1, f1, f2, 1.0 / np.sqrt(S)], axis=1
        )
        coef[:, i] = np.where(fit[:, None], row, coef[:, i])
        p00 = np.where(fit, q00 - k0 * h0, p00)
        p01 = np.where(fit, q01 - k0 * h1, p01)
        p11 = np.where(fit, q11 - k1 * h1, p11)
        logdet = logdet + np.where(fit, np.log(S), 0.0)
        x_last = np.where(fit, x[:, i], x_last)
        started |= fit
        prev_fit = fit
    return coef, logdet, _FilterEnd(p00, p01, p11, x_last)


def _compose(earlier, later):
    """Two affine maps ``m -> M m + b`` of the state, ``earlier`` first (components as arrays)."""
    a00, a01, a10, a11, a0, a1 = earlier
    c00, c01, c10, c11, c0, c1 = later
    return (
        c00 * a00 + c01 * a10,
        c00 * a01 + c01 * a11,
        c10 * a00 + c11 * a10,
        c10 * a01 + c11 * a11,
        c00 * a0 + c01 * a1 + c0,
        c10 * a0 + c11 * a1 + c1,
    )


def apply_whitening(coef: jax.Array, x: jax.Array, parallel: bool | None = None) -> jax.Array:
    """``L^-1 x`` along the last axis, from :func:`state_space_whitening`'s ``coef`` (JAX).

    The filter's states are an affine recursion ``m_i = M_i m_(i-1) + K_i x_i``; each
    point's innovation is ``x_i - (H F)_i m_(i-1)``, divided by ``sqrt(S_i)``.

    Parameters
    ----------
    coef : array, shape (point, 9)
        One run's coefficients (broadcast against ``x``'s leading axes).
    x : array, shape (..., point)
    parallel : bool, optional
        Run the recursion as a parallel prefix (:func:`jax.lax.associative_scan`: depth
        ``log point``, for accelerators) or point by point (:func:`jax.lax.scan`: the least
        work). Default: point by point on CPU. Measured on a 2-core CPU
        (``benchmarks/dense_logs.py``), one gradient of 128 runs x 4 chains of 900
        points: 10.6 ms point by point, 64 ms as a parallel prefix, 158 ms with the dense
        matrix, 1.6 ms without the term.
    """
    if parallel is None:
        parallel = jax.default_backend() != "cpu"
    c = jnp.moveaxis(jnp.broadcast_to(coef, x.shape + (STATE_COLUMNS,)), -1, 0)  # 9, ..., point
    xt = jnp.moveaxis(x, -1, 0)  # point, ...
    parts = tuple(jnp.moveaxis(c[j], -1, 0) for j in range(STATE_COLUMNS))  # each point, ...
    if parallel:
        elems = parts[:4] + (parts[4] * xt, parts[5] * xt)
        state = jax.lax.associative_scan(_compose, elems)
        s0, s1 = state[4], state[5]  # the filtered state after each point
        prev0 = jnp.concatenate([jnp.zeros_like(s0[:1]), s0[:-1]], axis=0)
        prev1 = jnp.concatenate([jnp.zeros_like(s1[:1]), s1[:-1]], axis=0)
        w = (xt - parts[6] * prev0 - parts[7] * prev1) * parts[8]
    else:

        def step(m, inp):
            (m0, m1), (c, xi) = m, inp
            w = (xi - c[6] * m0 - c[7] * m1) * c[8]
            return (c[0] * m0 + c[1] * m1 + c[4] * xi, c[2] * m0 + c[3] * m1 + c[5] * xi), w

        zero = jnp.zeros(xt.shape[1:], xt.dtype)
        _, w = jax.lax.scan(step, (zero, zero), (parts, xt))
    return jnp.moveaxis(w, 0, -1)


def _residuals(compute, reward, mask, R0, stride):
    """Least-squares residuals of each run (rows of ``log_c``, ``resid``, ``mask``), every
    ``stride``-th fitted point (:func:`~.least_squares.refined_residuals`)."""
    log_c, resid, _, m = refined_residuals(
        compute, reward, mask, R0, min_points=MIN_POINTS, max_runs=MAX_RUNS, stride=stride, coarse=True
    )
    return log_c, resid, m


def shape_noise_arrays(
    compute, reward, mask, R0, rho: float, *, rho_free: bool = False
) -> tuple[float, float, float, float]:
    """The batch's smooth departures from the sigmoid, ``(kappa, ell)``, and the evidence.

    Parameters
    ----------
    compute, reward, mask : ndarray, shape (run, point)
        A fit window's points (``mask`` the fitted ones).
    R0 : ndarray, shape (run,)
        Each run's first evaluation.
    rho : float
        The batch's AR(1) correlation of consecutive evaluations' errors.
    rho_free : bool
        Estimate the AR(1) correlation jointly, on :data:`RHO_GRID`, in both the model
        with departures and the one without. With ``rho`` fixed at the variogram's
        estimate (which differencing makes blind to curvature, and which is capped at
        0.9), departures of a short length scale took the place of the evaluation noise's
        own correlation on simulated AR(1) noise (``kappa`` at the top of the grid) and
        made the 4x bands narrower.

    Returns
    -------
    kappa, ell, gain, rho : float
        ``kappa`` is 0 when the best grid point's log-likelihood gain over the best model
        without departures, ``gain``, is below :data:`MIN_GAIN` (or no run has
        :data:`MIN_POINTS` points); ``rho`` is the correlation to fit with (the joint
        estimate where ``kappa > 0`` and ``rho_free``, else the given one).
    """
    n_max = int(np.max(np.sum(np.asarray(mask, bool) & (np.asarray(compute, float) > 0), axis=1), initial=0))
    stride = max(1, math.ceil(n_max / MAX_POINTS))
    rhos = [r**stride for r in RHO_GRID] if rho_free else [float(rho) ** stride]
    log_c, resid, m = _residuals(compute, reward, mask, np.asarray(R0, float), stride)
    if not m.any():
        return 0.0, ELL_GRID[0], 0.0, float(rho)
    n = m.sum(axis=1)
    best = (-np.inf, 0.0, ELL_GRID[0], 0.0)
    base = -np.inf
    for r in rhos:
        for kappa in KAPPA_GRID:
            for ell in ELL_GRID if kappa > 0 else ELL_GRID[:1]:
                K = correlation_matrix(log_c, m, r, kappa, ell, xp=np)
                L = np.linalg.cholesky(K)
                w = np.linalg.solve(L, resid[..., None])[..., 0]
                s2 = np.maximum(np.sum(w * w, axis=1) / np.maximum(n, 1), 1e-300)
                logdet = 2.0 * np.sum(np.log(np.diagonal(L, axis1=1, axis2=2)), axis=1)
                ll = float(np.sum(np.where(n > 0, -0.5 * n * np.log(s2) - 0.5 * logdet, 0.0)))
                if kappa == 0:
                    base = max(base, ll)
                if ll > best[0]:
                    best = (ll, kappa, ell, r)
    gain = best[0] - base
    if gain < MIN_GAIN:
        return 0.0, ELL_GRID[0], float(gain), float(rho)
    rho_out = float(best[3]) ** (1.0 / stride) if rho_free else float(rho)
    return float(best[1]), float(best[2]), float(gain), rho_out


def _filter_weights(coef: np.ndarray) -> np.ndarray:
    """Weights of each fitted error in the filtered state after the last point, (run, point, 2).

    The filtered state is the affine recursion ``m_i = M_i m_(i-1) + K_i e_i`` from
    ``m_0 = 0``, so ``m_n = sum_i (M_n ... M_(i+1)) K_i e_i``: one backward pass over the
    points, the same for every draw.
    """
    r, n, _ = coef.shape
    g = np.broadcast_to(np.eye(2), (r, 2, 2)).copy()  # M_n ... M_(i+1)
    w = np.empty((r, n, 2))
    for i in range(n - 1, -1, -1):
        w[:, i] = np.einsum("rab,rb->ra", g, coef[:, i, 4:6])
        g = g @ coef[:, i, :4].reshape(r, 2, 2)
    return w


def noise_forecast(log_c_fit, mask_fit, resid, log_c_new, steps_ahead, rho, kappa, ell, lag=None):
    """Conditional mean and sd (in units of ``sigma``) of new evaluations' errors (NumPy).

    Every run of a batch at once. The Kalman filter of :func:`state_space_whitening` gives
    the state (AR(1) part, departure) after the last fitted point and its covariance; a new
    point ``k`` evaluations later at log compute ``x`` is that state carried forward by
    ``F = diag(rho^k, exp(-|x - x_last| / ell))`` plus the fresh noise of the two processes.
    This is the joint Gaussian's conditional, in ``O(point)`` work and memory a run (the
    dense solve took ``point^3`` and ``point^2``).

    Parameters
    ----------
    log_c_fit, mask_fit : ndarray, shape (run, point)
        The runs' points and which of them were fitted.
    resid : ndarray, shape (run, draw, point)
        The fitted points' errors under each draw (``y - curve``; other points ignored).
    log_c_new : ndarray, shape (run, q)
        Where to forecast (beyond the data: ``steps_ahead > 0``; other points get the
        stationary sd and no mean).
    steps_ahead : ndarray, shape (run, q)
        Evaluations after the last fitted one (the AR(1) part's lag), 0 where not ahead
        (:func:`steps_ahead`).
    rho, kappa, ell : float or ndarray, shape (run,)
    lag : ndarray, shape (run, point), optional
        The fitted points' AR(1) lags (:func:`ar1_lags`), as the fit counted them.

    Returns
    -------
    mean : ndarray, shape (run, draw, q)
        Conditional mean of the error, in reward units (``resid``'s); 0 where not ahead.
    sd : ndarray, shape (run, q)
        Conditional sd over ``sigma``; ``sqrt(1 + kappa^2)`` where not ahead.
    """
    m = np.asarray(mask_fit, bool)
    x = np.where(m, np.asarray(log_c_fit, float), 0.0)
    n_runs = m.shape[0]
    rho, kappa, ell = (np.broadcast_to(np.asarray(v, float), (n_runs,)) for v in (rho, kappa, ell))
    coef, _, end = _kalman_filter(x, m, rho, kappa, ell, lag)
    w = _filter_weights(coef)
    e = np.where(m[:, None, :], np.asarray(resid, float), 0.0)
    state = np.einsum("rdp,rps->rds", e, w)  # each draw's filtered state after the last point
    k = np.asarray(steps_ahead, float)
    ahead = k > 0
    f1 = np.where(ahead, _ar1_correlation(rho[:, None], k, np), 0.0)  # run, q
    f2 = np.where(
        ahead, np.exp(-np.abs(np.asarray(log_c_new, float) - end.x_last[:, None]) / ell[:, None]), 0.0
    )
    mean = state[..., :1] * f1[:, None, :] + state[..., 1:] * f2[:, None, :]
    k2 = (kappa**2)[:, None]
    var = (
        f1 * f1 * end.p00[:, None]
        + 2.0 * f1 * f2 * end.p01[:, None]
        + f2 * f2 * end.p11[:, None]
        + (1.0 - f1 * f1)
        + k2 * (1.0 - f2 * f2)
    )
    return mean, np.sqrt(np.maximum(var, 0.0))


def _median_spacing(compute, fitted) -> np.ndarray:
    """Each run's median spacing of consecutive fitted evaluations (NaN with fewer than two)."""
    gaps = np.diff(pack(np.asarray(compute, float), packing(fitted), np.nan), axis=1)
    out = np.full(gaps.shape[0], np.nan)
    some = np.isfinite(gaps).any(axis=1)
    out[some] = np.nanmedian(gaps[some], axis=1)
    return out


def steps_ahead(compute_fit, mask_fit, compute_new) -> np.ndarray:
    """Evaluations between each run's last fitted one and each new point (0 where not after it).

    A point's count is its distance from the last fitted evaluation over the run's median
    spacing of fitted evaluations, rounded to a whole number of at least 1 (the AR(1)
    forecast's lag). Shapes: ``(run, point)``, ``(run, point)``, ``(run, q)`` -> ``(run, q)``.
    """
    comp = np.asarray(compute_fit, float)
    fitted = np.asarray(mask_fit, bool)
    new = np.asarray(compute_new, float)
    last = fitted.shape[1] - 1 - np.argmax(fitted[:, ::-1], axis=1)
    c_last = comp[np.arange(comp.shape[0]), last]
    with np.errstate(invalid="ignore"):
        k = (new - c_last[:, None]) / _median_spacing(comp, fitted)[:, None]
    ahead = (k > 0) & np.isfinite(k)
    return np.where(ahead, np.maximum(np.round(k), 1.0), 0.0)


def ar1_lags(compute, mask, step=None) -> np.ndarray | None:
    """Each fitted point's AR(1) lag from the fitted point before it, or None if all are 1.

    The lag is the distance between the two over the run's median spacing of fitted
    evaluations, rounded to a whole number of at least 1; 1 at a run's first fitted
    point, at points after an unfitted one (or one at compute 0) and at unfitted points.
    The distance is counted in training steps where every fitted point of the run has one
    (``step``), since neighbouring checkpoints share luck by steps, and in compute
    otherwise (as :func:`steps_ahead` counts the forecast's lag): a log whose steps grow
    dearer late in training then keeps lag 1 throughout. The AR(1) noise runs on the grid
    of the median spacing, so the correlation over a step of ``k`` spacings is
    ``rho ** k``: an evaluation skipped in a log, or points evenly spaced in log compute (a
    digitised figure: far apart late in a run, close early), are then less correlated
    across wider steps. Logs evaluated every so many steps have every lag 1, and get
    ``None``, so that their fits are exactly those without lags.

    Parameters
    ----------
    compute, mask : ndarray, shape (..., point)
        Compute and the fitted points (NumPy).
    step : ndarray, shape (..., point), optional
        Training step of each point (NaN where unknown).

    Returns
    -------
    ndarray, shape (..., point), or None
    """
    comp = np.asarray(compute, float)
    lead, n = comp.shape[:-1], comp.shape[-1]
    fitted = np.broadcast_to(np.asarray(mask, bool), lead + (n,)).reshape(-1, n)
    comp = comp.reshape(-1, n)
    fitted = fitted & (comp > 0)  # compute 0 (a fitted R0) is not on the grid
    if step is not None:
        st = np.broadcast_to(np.asarray(step, float), lead + (n,)).reshape(-1, n)
        known = np.all(np.isfinite(st) | ~fitted, axis=1, keepdims=True)
        comp = np.where(known, st, comp)
    med = _median_spacing(comp, fitted)[:, None]
    both = fitted[:, 1:] & fitted[:, :-1]
    with np.errstate(invalid="ignore", divide="ignore"):
        k = np.diff(comp, axis=1) / med
    lag = np.where(both & np.isfinite(k) & (k > 0), np.maximum(np.round(k), 1.0), 1.0)
    if np.all(lag == 1.0):
        return None
    return np.concatenate([np.ones((comp.shape[0], 1)), lag], axis=1).reshape(lead + (n,))
