"""The first figure of a fit with many runs: every run at a glance, then the runs that need a look.

:func:`plot_overview` puts two strips on top, one mark per run, sorted by its median:
each run's ceiling ``A`` and its forecast (a new evaluation) at a budget, as 90%
intervals, coloured by what the diagnostics say (identified, weakly identified, not
converged). Below them is a grid of the curves of the few runs that most need a look:
the runs that did not converge first (highest R-hat), then the least identified (widest
interval of ``A``). The title says what is shown, so a reader of 500 runs knows what the
grid leaves out.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from matplotlib import pyplot as plt
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from ..posterior.results import FitResult
from .plots import curves_legend, draw_curves

__all__ = ["plot_overview", "runs_to_look_at", "OVERVIEW_MIN_RUNS"]

#: ``bayes-scalerl fit`` draws the overview instead of one panel per run from this many runs on.
OVERVIEW_MIN_RUNS = 25
#: Widest 90% interval of ``A`` that counts as identified when the table has no ``a_identified``.
_MAX_WIDTH90 = 0.10
_COLOURS = {"identified": "#0072B2", "weak": "#E69F00", "not converged": "#D55E00"}
_LABELS = {
    "identified": "A identified",
    "weak": "A weakly identified",
    "not converged": "not converged",
}
_CHUNK = 1024  # runs per block of forecast draws (bounds memory)


def _status(diag: pd.DataFrame, width: np.ndarray) -> np.ndarray:
    """``"not converged"``, ``"weak"`` or ``"identified"`` for every run."""
    if "a_identified" in diag.columns:
        identified = diag["a_identified"].to_numpy(bool)
    else:
        identified = width <= _MAX_WIDTH90
    status = np.where(identified, "identified", "weak").astype(object)
    status[~diag["converged"].to_numpy(bool)] = "not converged"
    return status


def runs_to_look_at(diag: pd.DataFrame, width: np.ndarray, n: int) -> tuple[list[str], str]:
    """The ``n`` runs that most need a look, and a phrase saying why.

    Half of them (more if there are too few of the other kind) are runs that did not
    converge, highest R-hat first; the rest are converged runs with the widest intervals
    of ``A``.

    Parameters
    ----------
    diag : pandas.DataFrame
        Per-run diagnostics (``run``, ``converged``, ``r_hat_max``; ``a_identified``
        when the fit has it), in the fit's run order.
    width : ndarray, shape (run,)
        Width of each run's 90% interval of ``A``.
    n : int
        How many runs.

    Returns
    -------
    list of str, str
        Run names, and for example ``"3 not converged, 5 with the widest intervals of A"``.
    """
    runs = diag["run"].astype(str).to_numpy()
    bad = ~diag["converged"].to_numpy(bool)
    rhat = np.nan_to_num(diag["r_hat_max"].to_numpy(float), nan=np.inf)
    worst = np.flatnonzero(bad)[np.argsort(-rhat[bad], kind="stable")]
    widest = np.flatnonzero(~bad)[np.argsort(-width[~bad], kind="stable")]
    n_bad = min(len(worst), max(math.ceil(n / 2), n - len(widest)))
    first, rest = worst[:n_bad], widest[: n - n_bad]
    parts = []
    if len(first):
        parts.append(f"{len(first)} not converged")
    if len(rest):
        parts.append(f"{len(rest)} with the widest intervals of A")
    return [str(r) for r in runs[np.concatenate([first, rest])]], ", ".join(parts)


def _forecast_quantiles(result: FitResult, budget: np.ndarray, seed: int) -> np.ndarray:
    """5%, 50% and 95% of a new evaluation at each run's budget, shape (3, run)."""
    rng = np.random.default_rng(seed)
    names = result.run_names
    out = np.empty((3, budget.size))
    for lo in range(0, budget.size, _CHUNK):
        hi = min(lo + _CHUNK, budget.size)
        draws = result.predict_draws(budget[lo:hi, None], runs=names[lo:hi], seed=rng)[..., 0]
        out[:, lo:hi] = np.quantile(draws, [0.05, 0.5, 0.95], axis=1)
    return out


def _strip(ax, q: np.ndarray, status: np.ndarray, ylabel: str) -> None:
    """One vertical 90% interval and median per run, sorted by the median."""
    order = np.argsort(q[1], kind="stable")
    x = np.arange(1, order.size + 1)
    thin = order.size > 200
    for key in ("identified", "weak", "not converged"):  # flagged runs drawn on top
        sel = status[order] == key
        if not sel.any():
            continue
        ax.vlines(x[sel], q[0, order][sel], q[2, order][sel], color=_COLOURS[key], lw=0.6 if thin else 1.4)
        ax.plot(x[sel], q[1, order][sel], "o", ms=1.2 if thin else 2.8, color=_COLOURS[key], mew=0)
    ax.set_xlim(0, order.size + 1)
    ax.set_xlabel("runs, sorted by median", fontsize=9.0)
    ax.set_ylabel(ylabel, fontsize=9.0)
    ax.tick_params(labelsize=8.0)
    ax.grid(True, axis="y", color="0.85", lw=0.5)
    ax.set_axisbelow(True)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)


def plot_overview(
    result: FitResult,
    diagnostics: pd.DataFrame | None = None,
    *,
    budget: float | None = None,
    n_look: int = 8,
    ncols: int = 4,
    seed: int = 0,
) -> Figure:
    """Every run at a glance, then the curves of the runs that most need a look.

    Parameters
    ----------
    result : FitResult
        The fit.
    diagnostics : pandas.DataFrame, optional
        Per-run diagnostics in the fit's run order (default :meth:`FitResult.diagnostics`;
        the table of ``diagnostics.csv`` adds the identifiability flag ``a_identified``,
        otherwise a 90% interval of ``A`` wider than 0.10 counts as weakly identified).
    budget : float, optional
        Compute of the forecast strip (``--predict``'s largest value); default twice each
        run's last fitted compute.
    n_look : int
        Runs in the grid below the strips.
    ncols : int
        Panels per row of the grid.
    seed : int
        Seed of the predictive noise draws.

    Returns
    -------
    matplotlib.figure.Figure

    Examples
    --------
    >>> fig = plot_overview(result, budget=32_000)  # doctest: +SKIP
    >>> fig.savefig("curves.png", dpi=120)           # doctest: +SKIP
    """
    diag = result.diagnostics() if diagnostics is None else diagnostics
    if list(diag["run"].astype(str)) != result.run_names:
        raise ValueError("diagnostics must have one row per run, in the fit's run order")
    n_runs = len(result.run_names)
    A = result.draws("A")
    a_q = np.quantile(A, [0.05, 0.5, 0.95], axis=1)
    width = a_q[2] - a_q[0]
    status = _status(diag, width)
    if budget is None:
        budget_c = 2.0 * np.asarray(result.dt["constant_data"]["C_ref"].values, float)
        budget_text = "at twice each run's last fitted compute"
    else:
        budget_c = np.full(n_runs, float(budget))
        budget_text = f"at {budget:,.0f}"
    f_q = _forecast_quantiles(result, budget_c, seed)
    look, why = runs_to_look_at(diag, width, min(n_look, n_runs))
    ncols = max(1, min(ncols, len(look)))
    nrows = math.ceil(len(look) / ncols)
    fig = plt.figure(figsize=(12.8, 3.4 + 2.55 * nrows + 0.9), layout="constrained")
    top, bottom = fig.subfigures(2, 1, height_ratios=[3.4, 2.55 * nrows + 0.9])
    ax_a, ax_f = top.subplots(1, 2)
    _strip(ax_a, a_q, status, "ceiling A")
    ax_a.set_title("ceiling A of every run (90% interval)", fontsize=9.5)
    _strip(ax_f, f_q, status, "reward")
    ax_f.set_title(f"forecast of a new evaluation {budget_text} (90% interval)", fontsize=9.5)
    counts = {k: int((status == k).sum()) for k in _COLOURS}
    handles = [
        Line2D([], [], color=_COLOURS[k], lw=1.4, marker="o", ms=3, label=f"{_LABELS[k]} ({counts[k]})")
        for k in _COLOURS
        if counts[k]
    ]
    top.legend(handles=handles, loc="outside upper center", ncol=len(handles), fontsize=8.0, frameon=False)
    axes = bottom.subplots(nrows, ncols, squeeze=False, sharey=True).ravel()
    for ax in axes[len(look) :]:
        ax.remove()
    axes = list(axes[: len(look)])
    for k, ax in enumerate(axes):
        if k % ncols:
            ax.tick_params(labelleft=False)
    draw_curves(axes, result, [(r, [r]) for r in look], max_compute=budget, seed=seed, ncols=ncols)
    bottom.legend(handles=curves_legend(), loc="outside lower center", ncol=6, fontsize=8.0, frameon=False)
    fig.suptitle(
        f"{n_runs} runs: every run on top; below, the {len(look)} that most need a look ({why})",
        fontsize=10.5,
    )
    return fig
