"""Plots in the paper's style: log compute, fit window solid, extrapolation dotted."""

from __future__ import annotations

import math
from collections.abc import Sequence

import matplotlib

matplotlib.use("Agg", force=False)
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from .results import FitResult  # noqa: E402

__all__ = ["plot_curves"]


def plot_curves(
    result: FitResult,
    *,
    runs: Sequence[str] | None = None,
    max_compute: float | None = None,
    ci_prob: float = 0.9,
    max_panels: int = 24,
    ncols: int = 4,
):
    """One panel per run: data, posterior median curve and predictive band.

    Fitted points are filled, held-out points open; the median is solid inside the
    fit window and dotted beyond it; the band is the central ``ci_prob`` interval of a
    new evaluation. The compute axis is logarithmic.

    Returns
    -------
    matplotlib.figure.Figure
    """
    names = list(runs) if runs is not None else result.run_names[:max_panels]
    cd = result.dt["constant_data"].to_dataset()
    od = result.dt["observed_data"].to_dataset()
    lookup = {r: i for i, r in enumerate(result.run_names)}
    n = len(names)
    ncols = min(ncols, n)
    nrows = math.ceil(n / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(3.4 * ncols, 2.8 * nrows), squeeze=False, sharey=True)
    lo_q, hi_q = (1 - ci_prob) / 2, 1 - (1 - ci_prob) / 2
    for ax, name in zip(axes.ravel(), names, strict=False):
        i = lookup[name]
        c = cd["compute"].values[i]
        ok = ~np.isnan(c)
        c, y, f = c[ok], od["reward"].values[i][ok], cd["in_fit"].values[i][ok]
        pos = c[c > 0]
        c_fit_max = c[f].max()
        c_max = max_compute or max(pos.max(), 2 * c_fit_max)
        grid = np.geomspace(pos.min() if pos.size else 1.0, c_max, 120)
        obs = result.predict_draws(grid, kind="observation", runs=[name])[0]
        cur = result.predict_draws(grid, kind="curve", runs=[name])[0]
        band = np.quantile(obs, [lo_q, hi_q], axis=0)
        med = np.median(cur, axis=0)
        ax.fill_between(
            grid, band[0], band[1], color="C0", alpha=0.2, lw=0, label=f"{int(ci_prob * 100)}% predictive"
        )
        inside = grid <= c_fit_max
        ax.plot(grid[inside], med[inside], "C0-", lw=1.6, label="median (fit window)")
        ax.plot(grid[~inside], med[~inside], "C0:", lw=1.6, label="median (extrapolated)")
        keep = c > 0
        ax.plot(c[keep & f], y[keep & f], "o", ms=3, color="k", label="fitted")
        ax.plot(c[keep & ~f], y[keep & ~f], "o", ms=3, mfc="none", color="k", label="not fitted")
        ax.axvline(c_fit_max, color="0.6", lw=0.8, ls="--")
        ax.set_xscale("log")
        ax.set_title(name, fontsize=8)
        ax.grid(alpha=0.3, which="both", lw=0.5)
    for ax in axes.ravel()[n:]:
        ax.set_visible(False)
    for ax in axes[:, 0]:
        ax.set_ylabel("reward")
    for ax in axes[-1, :]:
        ax.set_xlabel("compute")
    axes.ravel()[0].legend(fontsize=6, loc="lower right")
    fig.tight_layout()
    return fig
