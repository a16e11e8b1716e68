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

__all__ = ["paper_fit_arrays", "PAPER_A_GRID"]

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
        lo = min(0.45, max(R0, y.max() - 0.1))
        A_grid = np.round(np.arange(np.ceil(lo / 0.005) * 0.005, 0.99501, 0.005), 3)
        A_grid = A_grid[(A_grid > R0) & ((A_grid <= 0.8) | (y.max() > 0.7))]
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
