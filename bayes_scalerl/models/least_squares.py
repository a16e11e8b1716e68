"""The ScaleRL paper's least-squares fit (arXiv 2510.13786, Appendix A.5), for one run.

The baseline of :mod:`bayes_scalerl.analyses.baseline`, and the residuals from which
:mod:`.shape_noise` estimates the batch's smooth departures from the sigmoid.

For every pair on a grid of ``A`` and ``C_mid`` the exponent ``B`` is fitted by least
squares, and the pair with the smallest residual sum of squares wins. The paper calls
``scipy.optimize.curve_fit`` for ``B``; here ``B`` is fitted for all pairs at once by a
log-spaced grid search followed by Gauss-Newton refinement, which reaches the same
one-dimensional least-squares optimum (a test checks it against ``curve_fit``).
"""

from __future__ import annotations

import numpy as np

__all__ = ["paper_fit_arrays", "refine_fit", "refined_residuals", "PAPER_A_GRID"]

#: Most points the coarse grid search of :func:`refined_residuals` uses (every k-th).
COARSE_POINTS = 64
#: The paper's grid of asymptotes: 0.450, 0.455, ..., 0.800.
PAPER_A_GRID = np.round(np.arange(0.450, 0.8001, 0.005), 3)


def _sigmoid_grid(c, C_mid, B_grid):
    """``s[i, j, :]``: the sigmoid's gain fraction at ``c`` for ``C_mid[i]`` and ``B_grid[j]``."""
    d = np.log(c)[None, :] - np.log(C_mid)[:, None]  # (n_cmid, n)
    return 0.5 * (1 + np.tanh(0.5 * B_grid[None, :, None] * d[:, None, :])), d


def _fit_B(z, g, d, B_grid, Szs, Sss, zz):
    """Least-squares ``B`` for each ``C_mid`` (vectorised) at gain ``g = A - R0``; returns (B, rss).

    ``z = y - R0``; ``d = log c - log C_mid`` (n_cmid, n). The starting ``B`` of each
    ``C_mid`` is the grid's best, from ``Szs = sum z s`` and ``Sss = sum s^2`` over the grid
    (computed once for every ``A``: the residual sum of squares ``zz - 2 g Szs + g^2 Sss`` is
    a parabola in ``g``), then refined by Gauss-Newton.
    """
    rss = zz - 2.0 * g * Szs + g * g * Sss  # (n_cmid, n_B)
    B = B_grid[np.argmin(rss, axis=1)]
    for _ in range(6):  # Gauss-Newton on B
        s = 0.5 * (1 + np.tanh(0.5 * B[:, None] * d))
        r = z - g * s
        J = g * s * (1 - s) * d
        step = np.sum(J * r, axis=1) / np.maximum(np.sum(J * J, axis=1), 1e-300)
        B = np.clip(B + step, B_grid[0], B_grid[-1])
    s = 0.5 * (1 + np.tanh(0.5 * B[:, None] * d))
    return B, np.sum((z - g * s) ** 2, axis=1)


def _default_A_grid(y: np.ndarray, R0: float) -> np.ndarray:
    """The paper's asymptotes (0.450-0.800 by 0.005), extended to cover the run's rewards."""
    lo = min(0.45, max(R0, y.max() - 0.1))
    A_grid = np.round(np.arange(np.ceil(lo / 0.005) * 0.005, 0.99501, 0.005), 3)
    return A_grid[(A_grid > R0) & ((A_grid <= 0.8) | (y.max() > 0.7))]


def paper_fit_arrays(
    compute: np.ndarray,
    reward: np.ndarray,
    R0: float,
    *,
    A_grid: np.ndarray | None = None,
    C_mid_grid: np.ndarray | None = None,
) -> dict:
    """The paper's grid fit for one run.

    Parameters
    ----------
    compute, reward : ndarray
        Points in the fit window (compute > 0).
    R0 : float
        Starting reward (the run's first evaluation).
    A_grid : ndarray, optional
        Asymptotes to try. Default: the paper's 0.450-0.800 in steps of 0.005, extended
        in the same steps to cover ``(max(R0, max reward - 0.1), 1)`` when the run's
        rewards lie outside the paper's range.
    C_mid_grid : ndarray, optional
        ``C_mid`` values to try. Default: 100 linearly spaced values from
        ``c_max / 80`` to ``5 c_max``, which is the paper's 100-40,000 for its 8k window.

    Returns
    -------
    dict
        ``A, B, C_mid, R0, rss``.
    """
    c = np.asarray(compute, float)
    y = np.asarray(reward, float)
    if A_grid is None:
        A_grid = _default_A_grid(y, R0)
    A_grid = np.asarray(A_grid, float)
    A_grid = A_grid[A_grid > R0]
    if C_mid_grid is None:
        C_mid_grid = np.linspace(c.max() / 80, 5 * c.max(), 100)
    C_mid_grid = np.asarray(C_mid_grid, float)
    B_grid = np.exp(np.linspace(np.log(0.05), np.log(20.0), 120))
    S, d = _sigmoid_grid(c, C_mid_grid, B_grid)
    z = y - R0
    Szs, Sss, zz = S @ z, np.einsum("ijn,ijn->ij", S, S), float(z @ z)
    del S
    best = (np.inf, np.nan, np.nan, np.nan)
    for A in A_grid:
        B, rss = _fit_B(z, A - R0, d, B_grid, Szs, Sss, zz)
        k = int(np.argmin(rss))
        if rss[k] < best[0]:
            best = (rss[k], A, B[k], C_mid_grid[k])
    return {"A": best[1], "B": best[2], "C_mid": best[3], "R0": R0, "rss": best[0]}


def refine_fit(
    x: np.ndarray, y: np.ndarray, R0: float, g: float, log_C: float, log_B: float, steps: int = 40
) -> tuple[np.ndarray, np.ndarray]:
    """The least-squares curve at ``x = log C`` and its Jacobian, refined from the grid fit by
    Levenberg-Marquardt on ``(A - R0, log C_mid, log B)``.

    Returns the curve, shape (point,), and its derivatives in those three coordinates at the
    refined fit, shape (point, 3).

    The paper's grid is coarse (``C_mid`` in 100 linear steps up to five times the largest
    compute, ``A`` in steps of 0.005): its misfit is smooth in ``log C`` and, on an exact
    sigmoid with 14 points, read as departures (``kappa`` 4, a gain of 5.8) before this step.
    """
    theta = np.array([g, log_C, log_B], float)

    def curve_jac(t):
        B = np.exp(np.clip(t[2], -5.0, 5.0))  # the grid's B is in (0.05, 20)
        s = 0.5 * (1.0 + np.tanh(0.5 * B * (x - t[1])))  # the logistic, without overflow
        ds = s * (1.0 - s)
        J = np.stack([s, -t[0] * ds * B, t[0] * ds * B * (x - t[1])], axis=1)
        return R0 + t[0] * s, J

    mu, J = curve_jac(theta)
    rss = np.sum((y - mu) ** 2)
    lam = 1e-3
    for _ in range(steps):
        r = y - mu
        H = J.T @ J
        try:
            step = np.linalg.solve(H + lam * np.diag(np.diag(H) + 1e-12), J.T @ r)
        except np.linalg.LinAlgError:  # a flat run (no rise): the grid fit stands
            break
        new = theta + step
        new[2] = np.clip(new[2], -5.0, 5.0)
        mu_new, J_new = curve_jac(new)
        rss_new = np.sum((y - mu_new) ** 2)
        if np.isfinite(rss_new) and rss_new < rss:
            theta, mu, J, rss, lam = new, mu_new, J_new, rss_new, lam / 3.0
        else:
            lam *= 4.0
    return mu, J


def refined_residuals(
    compute: np.ndarray,
    reward: np.ndarray,
    mask: np.ndarray,
    R0: np.ndarray,
    *,
    min_points: int,
    max_runs: int,
    stride: int = 1,
    coarse: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Each run's least-squares residuals and the curve's Jacobian at its fit, padded.

    Each run with at least ``min_points`` fitted points (``compute > 0``) is fitted by
    :func:`paper_fit_arrays` and refined by :func:`refine_fit` on every ``stride``-th of
    them; the first ``max_runs`` such runs enter. A Python loop over runs (a few ms a
    run), once a batch.

    Parameters
    ----------
    compute, reward, mask : ndarray, shape (run, point)
        A fit window's points (``mask`` the fitted ones, in order of compute).
    R0 : ndarray, shape (run,)
        Each run's first evaluation.
    min_points, max_runs, stride : int
    coarse : bool
        Start the refinement from a coarser grid search (every 4th ``A`` of the paper's
        grid, a third of its ``C_mid`` values, on at most :data:`COARSE_POINTS` of the
        points), about ten times faster; the refinement then fits every point. Where the
        coarse start lies in another basin the fit can differ.

    Returns
    -------
    log_c, resid : ndarray, shape (used run, point)
        The fitted points' log compute and residuals, packed to the front of each row
        (the rest of ``log_c`` repeats the last value, ``resid`` is 0).
    jac : ndarray, shape (used run, point, 3)
        The curve's derivatives in ``(A - R0, log C_mid, log B)`` at the refined fit.
    used : ndarray of bool, shape (used run, point)
        Where a row holds a fitted point.
    """
    compute = np.asarray(compute, float)
    reward = np.asarray(reward, float)
    R0 = np.asarray(R0, float)
    use = np.asarray(mask, bool) & (compute > 0) & np.isfinite(reward)
    rows = np.flatnonzero(use.sum(axis=1) >= min_points)[:max_runs]
    width = max([len(range(0, int(use[i].sum()), stride)) for i in rows] or [1])
    log_c = np.zeros((len(rows), width))
    resid = np.zeros((len(rows), width))
    jac = np.zeros((len(rows), width, 3))
    used = np.zeros((len(rows), width), bool)
    for k, i in enumerate(rows):
        c, y = compute[i][use[i]][::stride], reward[i][use[i]][::stride]
        if coarse:
            every = max(1, -(-len(c) // COARSE_POINTS))
            f = paper_fit_arrays(
                c[::every],
                y[::every],
                float(R0[i]),
                A_grid=_default_A_grid(y, float(R0[i]))[::4],
                C_mid_grid=np.linspace(c.max() / 80, 5 * c.max(), 34),
            )
        else:
            f = paper_fit_arrays(c, y, float(R0[i]))
        if not np.isfinite(f["rss"]):
            continue
        curve, J = refine_fit(np.log(c), y, f["R0"], f["A"] - f["R0"], np.log(f["C_mid"]), np.log(f["B"]))
        n = len(c)
        log_c[k, :n], resid[k, :n], jac[k, :n], used[k, :n] = np.log(c), y - curve, J, True
        log_c[k, n:] = log_c[k, n - 1]
    return log_c, resid, jac, used
