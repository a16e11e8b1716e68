"""Plots in the paper's style: log compute, fit window solid, extrapolation dotted.

Every function takes a :class:`~bayes_scalerl.posterior.results.FitResult` and returns a
:class:`matplotlib.figure.Figure` (close it with ``plt.close(fig)`` when done). Colours
are the Okabe-Ito palette, which stays distinguishable with colour-blindness; runs
overlaid in one panel also differ by marker shape, so figures read in greyscale print.
"""

from __future__ import annotations

import io
import itertools
import math
from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from ..models.curve import linearised
from ..posterior.results import FitResult

__all__ = ["plot_curves", "draw_curves", "curves_legend", "plot_forest", "plot_linearised", "plot_rank"]

#: Okabe-Ito colours, in the order runs get them (yellow last: weak on white paper).
_PALETTE = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#F0E442")
_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<")
#: Font sizes in points.
_FS_TITLE, _FS_LABEL, _FS_TICK, _FS_LEGEND = 9.5, 9.0, 8.0, 8.0
_GRID = dict(color="0.85", lw=0.5)
_FIT_END = dict(color="0.55", lw=0.8, ls=(0, (4, 3)))


# ---------------------------------------------------------------------- helpers
def _text(s: object) -> str:
    """A label matplotlib shows verbatim (``$`` would start mathtext)."""
    return str(s).replace("$", r"\$")


def _panel_title(s: object, width: int = 34) -> str:
    """A panel title on at most two lines (long run names overlap their neighbours).

    A long name is broken after the separator (``-``, ``_``, ``/``, ``:``, space) nearest
    its middle; a second line still too long keeps its end.
    """
    text = str(s)
    if len(text) <= width:
        return _text(text)
    cuts = [i + 1 for i, ch in enumerate(text) if ch in "-_/: "]
    mid = len(text) / 2
    cut = min(cuts, key=lambda i: abs(i - mid)) if cuts else width
    first, second = text[:cut], text[cut:]
    if len(first) > width:
        first = first[: width - 3] + "..."
    if len(second) > width:
        second = "..." + second[-(width - 3) :]
    return _text(first + "\n" + second)


def _fmt_compute(x: float, _pos=None) -> str:
    """``1500 -> '1.5k'``, ``2e6 -> '2M'``: compact tick labels for compute."""
    if x <= 0 or not math.isfinite(x):
        return ""
    for scale, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if x >= scale:
            return f"{x / scale:.3g}{suffix}"
    return f"{x:.3g}"


def _log_compute_axis(ax, *, label: str = "compute") -> None:
    ax.set_xscale("log")
    ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.xaxis.set_major_formatter(FuncFormatter(_fmt_compute))
    ax.xaxis.set_minor_locator(LogLocator(base=10, subs=np.arange(1, 10)))
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel(label, fontsize=_FS_LABEL)


def _style_axes(ax) -> None:
    ax.tick_params(labelsize=_FS_TICK, which="both")
    ax.grid(True, which="major", **_GRID)
    ax.set_axisbelow(True)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)


def _index(result: FitResult) -> dict[str, int]:
    return {r: i for i, r in enumerate(result.run_names)}


def _check_runs(result: FitResult, runs: Sequence[str] | None) -> list[str]:
    if runs is None:
        return result.run_names
    names = [str(r) for r in runs]
    lookup = _index(result)
    missing = [r for r in names if r not in lookup]
    if missing:
        raise KeyError(f"unknown run(s): {', '.join(map(repr, missing))}")
    return names


def _run_points(result: FitResult, i: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Compute, reward and in-fit flag of run ``i``, without the NaN padding."""
    c = result.dt["constant_data"]["compute"].values[i]
    y = result.dt["observed_data"]["reward"].values[i]
    f = result.dt["constant_data"]["in_fit"].values[i].astype(bool)
    ok = ~np.isnan(c)
    return c[ok], y[ok], f[ok]


def _R0_median(result: FitResult, i: int) -> float:
    if "R0" in result.dt["posterior"].data_vars:
        return float(np.median(result.draws("R0")[i]))
    return float(result.dt["constant_data"]["R0_obs"].values[i])


def _groups(result: FitResult, group_by: str | None) -> np.ndarray | None:
    """The group label of every run (``None`` when not grouping)."""
    if group_by is None:
        return None
    cd = result.dt["constant_data"]
    if group_by not in cd.data_vars or cd[group_by].dims != ("run",):
        have = sorted(k for k, v in cd.data_vars.items() if v.dims == ("run",) and k != "R0_obs")
        raise ValueError(
            f"group_by={group_by!r}: the fit has no per-run {group_by!r} column "
            f"(per-run columns: {', '.join(have) or 'none'}); fit with a {group_by!r} column in the data"
        )
    return np.array([str(v) for v in cd[group_by].values])


def _panels(result: FitResult, names: list[str], group_by: str | None) -> list[tuple[str, list[str]]]:
    """``(title, runs)`` of each panel: one run each, or the runs of each group."""
    if group_by is None:
        return [(n, [n]) for n in names]
    labels = _groups(result, group_by)
    lookup = _index(result)
    panels: dict[str, list[str]] = {}
    for n in names:
        panels.setdefault(labels[lookup[n]], []).append(n)
    return list(panels.items())


def _short_label(run: str, group: str) -> str:
    """The run's name without its group's name in front (``'ScaleRL/s0'`` in ``ScaleRL`` -> ``'s0'``)."""
    if run.startswith(group):
        rest = run[len(group) :].lstrip("/_-: .")
        if rest:
            return rest
    return run


#: Width (inches) added to a figure of one or two columns for the legend on its right.
_SIDE_LEGEND_WIDTH = 2.3


def _panel_grid(n: int, ncols: int, size: tuple[float, float], *, sharey: bool):
    """A grid of ``n`` panels (unused cells removed); narrow grids get room for a side legend."""
    ncols = max(1, min(ncols, n))
    nrows = math.ceil(n / ncols)
    extra = _SIDE_LEGEND_WIDTH if ncols < 3 else 0.0
    fig, axes = plt.subplots(
        nrows,
        ncols,
        figsize=(size[0] * ncols + extra, size[1] * nrows + (0.3 if extra else 0.5)),
        squeeze=False,
        sharey=sharey,
        layout="constrained",
    )
    flat = list(axes.ravel())
    for ax in flat[n:]:
        ax.remove()
    for k, ax in enumerate(flat[:n]):
        if sharey and k % ncols != 0:
            ax.tick_params(labelleft=False)
    return fig, flat[:n], ncols


def _fit_end(f: np.ndarray, c: np.ndarray) -> float:
    return float(c[f].max()) if f.any() else float(np.nanmax(c))


def _style_legend(band_label: str | None) -> list:
    """Legend entries explaining the line styles and markers of the curve panels."""
    ink = "0.15"
    items = [
        Line2D([], [], color=ink, lw=1.8, label="median, fit window"),
        Line2D([], [], color=ink, lw=1.8, ls=":", label="median, extrapolated"),
    ]
    if band_label is not None:
        items.append(Patch(color=ink, alpha=0.2, lw=0, label=band_label))
    items += [
        Line2D([], [], color=ink, marker="o", ls="none", ms=4.5, label="fitted point"),
        Line2D([], [], color=ink, marker="o", mfc="white", ls="none", ms=4.5, label="not fitted"),
        Line2D([], [], **_FIT_END, label="end of fit window"),
    ]
    return items


def _figure_legend(fig, items: list, ncol: int | None = None, *, narrow: bool = False) -> None:
    """One legend for the whole figure: above the panels, or right of them when ``narrow``."""
    fig.legend(
        handles=items,
        loc="outside right upper" if narrow else "outside upper center",
        ncol=1 if narrow else (ncol or len(items)),
        fontsize=_FS_LEGEND,
        frameon=False,
        handlelength=2.2,
        columnspacing=1.4,
    )


# ---------------------------------------------------------------------- curves
def plot_curves(
    result: FitResult,
    *,
    runs: Sequence[str] | None = None,
    max_compute: float | None = None,
    ci_prob: float = 0.9,
    max_panels: int = 24,
    ncols: int = 4,
    group_by: str | None = None,
    kind: str = "observation",
    seed: int = 0,
) -> Figure:
    """Data, posterior median curve and band against compute, one panel per run or per group.

    Fitted points are filled, points outside the likelihood (the transient before
    ``min_compute``, held-out points after ``fit_until``) open; the median curve is solid
    inside the fit window and dotted beyond it (the dashed grey line marks the end of the
    window); the shaded band is the central ``ci_prob`` interval. The compute axis is
    logarithmic and all panels share the reward axis.

    Parameters
    ----------
    result : FitResult
        The fit.
    runs : sequence of str, optional
        Runs to show (default all, in fit order).
    max_compute : float, optional
        Right end of the predicted curve (default: the larger of the last evaluation and
        twice the end of the fit window). Points beyond it are still drawn.
    ci_prob : float
        Probability mass of the band.
    max_panels : int
        At most this many panels; further runs or groups are left out.
    ncols : int
        Panels per row.
    group_by : str, optional
        A per-run column of the data (``"recipe"``, ``"task"``, ...): one panel per group
        with its runs overlaid in different colours and markers. ``None``: one panel per run.
    kind : {"observation", "curve"}
        Band of a new evaluation (curve plus noise, default) or of the noise-free curve.
    seed : int
        Seed of the predictive noise draws.

    Returns
    -------
    matplotlib.figure.Figure
        One axes per panel.

    Examples
    --------
    >>> fig = plot_curves(result, group_by="recipe")  # doctest: +SKIP
    >>> fig.savefig("curves.png", dpi=150)            # doctest: +SKIP
    """
    if not 0 < ci_prob < 1:
        raise ValueError(f"ci_prob must be in (0, 1), got {ci_prob!r}")
    if kind not in ("observation", "curve"):
        raise ValueError(f"kind must be 'observation' or 'curve', got {kind!r}")
    names = _check_runs(result, runs)
    panels = _panels(result, names, group_by)[:max_panels]
    if not panels:
        raise ValueError("no runs to plot")
    fig, axes, ncols = _panel_grid(len(panels), ncols, (3.2, 2.55), sharey=True)
    draw_curves(
        axes,
        result,
        panels,
        overlay=group_by is not None,
        max_compute=max_compute,
        ci_prob=ci_prob,
        kind=kind,
        seed=seed,
        ncols=ncols,
    )
    _figure_legend(fig, curves_legend(ci_prob, kind), narrow=ncols < 3)
    return fig


def curves_legend(ci_prob: float = 0.9, kind: str = "observation") -> list:
    """Legend entries of the curve panels of :func:`draw_curves`."""
    what = "new evaluation" if kind == "observation" else "curve"
    return _style_legend(f"{round(ci_prob * 100):d}% interval ({what})")


def draw_curves(
    axes: Sequence,
    result: FitResult,
    panels: Sequence[tuple[str, Sequence[str]]],
    *,
    overlay: bool = False,
    max_compute: float | None = None,
    ci_prob: float = 0.9,
    kind: str = "observation",
    seed: int = 0,
    ncols: int = 4,
) -> None:
    """Draw the curve panels of :func:`plot_curves` into ``axes``, one per ``(title, runs)``.

    ``overlay``: several runs per panel in different colours and markers, with a legend;
    the first axes of every row of ``ncols`` gets the reward label.
    """
    lookup = _index(result)
    lo_q, hi_q = (1 - ci_prob) / 2, 1 - (1 - ci_prob) / 2
    rng = np.random.default_rng(seed)
    for ax, (title, members) in zip(axes, panels, strict=True):
        data = {n: _run_points(result, lookup[n]) for n in members}
        pos = np.concatenate([c[c > 0] for c, _, _ in data.values()])
        c_lo = pos.min() if pos.size else 1.0
        fit_ends = set()
        for k, name in enumerate(members):
            c, y, f = data[name]
            colour = _PALETTE[k % len(_PALETTE)] if overlay else _PALETTE[0]
            point_colour = colour if overlay else "0.1"
            marker = _MARKERS[k % len(_MARKERS)] if overlay else "o"
            c_fit = _fit_end(f, c)
            fit_ends.add(c_fit)
            c_max = max(np.nanmax(c), max_compute if max_compute else 2 * c_fit)
            grid = np.geomspace(c_lo, c_max, 160)
            cur = result.predict_draws(grid, kind="curve", runs=[name])[0]  # sample, grid
            band_draws = cur
            if kind == "observation":
                # one standard normal per draw, shared along the grid: each grid point still
                # gets exact predictive draws, and the band's edges come out smooth
                z = rng.standard_normal(cur.shape[0])[:, None]
                sigma = result.draws("sigma")[lookup[name]][:, None]
                band_draws = np.clip(cur + sigma * z, 0.0, 1.0)
            band = np.quantile(band_draws, [lo_q, hi_q], axis=0)
            med = np.median(cur, axis=0)
            ax.fill_between(grid, band[0], band[1], color=colour, alpha=0.14 if overlay else 0.22, lw=0)
            inside = grid <= c_fit
            label = _text(_short_label(name, title)) if overlay else None
            ax.plot(grid[inside], med[inside], "-", color=colour, lw=1.8, label=label)
            ax.plot(grid[~inside], med[~inside], ":", color=colour, lw=1.8)
            keep = c > 0
            ms = 3.6 if overlay else 3.2
            ax.plot(c[keep & f], y[keep & f], marker, ls="none", ms=ms, color=point_colour, mew=0.8, zorder=3)
            ax.plot(
                c[keep & ~f],
                y[keep & ~f],
                marker,
                ls="none",
                ms=ms,
                mfc="white",
                mec=point_colour,
                mew=0.8,
                zorder=3,
            )
        for c_fit in fit_ends:
            ax.axvline(c_fit, **_FIT_END, zorder=1)
        _log_compute_axis(ax)
        _style_axes(ax)
        ax.set_title(_panel_title(title), fontsize=_FS_TITLE)
        if overlay and len(members) > 1:
            ax.legend(fontsize=_FS_LEGEND - 0.5, loc="lower right", frameon=False, handlelength=1.6)
    for k, ax in enumerate(axes):
        if k % ncols == 0:
            ax.set_ylabel("reward", fontsize=_FS_LABEL)


# ---------------------------------------------------------------------- forest
def group_level_draws(result: FitResult, var: str, level: str) -> dict[tuple[str, str | None], np.ndarray]:
    """Draws of ``{var}_{level}`` (a hierarchical fit's group-level variable), if the posterior has it.

    Parameters
    ----------
    result : FitResult
        The fit.
    var : str
        The per-run variable (``"A"``, ``"B"``, ``"C_mid"``).
    level : str
        The group level (``"recipe"``).

    Returns
    -------
    dict
        ``(group, None)``, or ``(group, "math")`` etc. when the variable has further
        dimensions (``A_recipe`` has a ``task`` dimension when the runs have several tasks),
        to the draws (chains pooled); empty when the posterior has no such variable.
    """
    post = result.dt["posterior"]
    name = f"{var}_{level}"
    if name not in post.data_vars or level not in post[name].dims:
        return {}
    da = post[name]
    extra = [d for d in da.dims if d not in ("chain", "draw", level)]
    da = da.transpose(level, *extra, "chain", "draw")
    x = da.values.reshape(da.shape[0], -1, da.sizes["chain"] * da.sizes["draw"])  # group, combo, sample
    groups = [str(g) for g in da[level].values]
    if not extra:
        return {(g, None): x[i, 0] for i, g in enumerate(groups)}
    combos = [", ".join(c) for c in itertools.product(*[[str(v) for v in da[d].values] for d in extra])]
    return {(g, c): x[i, j] for i, g in enumerate(groups) for j, c in enumerate(combos)}


#: A row of the forest plot: ``(label, kind, key)``. ``kind`` ``"run"``: ``key`` is the run's
#: index; ``"group"``: a group's heading, ``key`` ``(group, None)``; ``"sub"``: a group-level
#: variable's row, ``key`` ``(group, extra)``.
_ForestRow = tuple[str, str, object]
_RUN_COLOUR, _GROUP_COLOUR = _PALETTE[0], _PALETTE[1]


def _forest_variables(result: FitResult, var_names: Sequence[str], ci_prob: float) -> list[str]:
    """Check the arguments of :func:`plot_forest`; returns the variables as a list.

    Raises
    ------
    ValueError
        If ``ci_prob`` is not in ``(0.5, 1)`` or ``var_names`` is empty.
    KeyError
        If a variable is not a per-run posterior variable.
    """
    if not 0.5 < ci_prob < 1:
        raise ValueError(f"ci_prob must be in (0.5, 1), got {ci_prob!r}")
    var_names = list(var_names)
    if not var_names:
        raise ValueError("var_names is empty")
    post = result.dt["posterior"]
    for var in var_names:
        if var not in post.data_vars or "run" not in post[var].dims:
            raise KeyError(f"no per-run posterior variable {var!r}; have {', '.join(result.var_names)}")
    return var_names


def _forest_rows(
    result: FitResult,
    names: list[str],
    group_by: str | None,
    level: str,
    keys: Sequence[tuple[str, str | None]],
) -> list[_ForestRow]:
    """The rows of the forest plot, top to bottom.

    Parameters
    ----------
    result : FitResult
    names : list of str
        The runs shown.
    group_by : str or None
        Group the runs by this per-run column, each group under its heading.
    level : str
        Name of the group level.
    keys : sequence of (str, str or None)
        The keys of the group-level variables' draws (:func:`group_level_draws`).

    Returns
    -------
    list of (label, kind, key)
        Without ``group_by`` the group-level rows come first, then the runs.
    """
    lookup = _index(result)
    rows: list[_ForestRow] = []
    if group_by is not None:
        for group, members in _panels(result, names, group_by):
            rows.append((group, "group", (group, None)))
            rows += [(f"   {k[1]} ({level} level)", "sub", k) for k in keys if k[0] == group and k[1]]
            rows += [("   " + _short_label(n, group), "run", lookup[n]) for n in members]
    else:
        for g, extra in keys:
            rows.append((f"{g} · {extra} ({level})" if extra else f"{g} ({level})", "sub", (g, extra)))
        rows += [(n, "run", lookup[n]) for n in names]
    return rows


def _forest_figure(rows: Sequence[_ForestRow], n_vars: int) -> tuple[Figure, list]:
    """A figure of one axes per variable, sharing the row axis, sized to the rows and labels."""
    label_width = 0.5 + 0.075 * max(len(label) + 2 for label, _, _ in rows)  # inches, at 8 pt
    width = min(label_width, 4.0) + 2.7 * max(n_vars, 1.5)
    fig, axes = plt.subplots(
        1,
        n_vars,
        figsize=(width, 1.1 + 0.2 * len(rows)),
        sharey=True,
        squeeze=False,
        layout="constrained",
    )
    return fig, list(axes.ravel())


def _draw_interval(
    ax, d: np.ndarray, y: float, qs: Sequence[float], colour: str, marker: str, hollow: bool
) -> None:
    """One row of the forest: outer interval, 50% interval and median of the draws ``d``."""
    lo, q25, med, q75, hi = np.quantile(d, qs)
    ax.plot([lo, hi], [y, y], color=colour, lw=1.0, solid_capstyle="butt")
    ax.plot([q25, q75], [y, y], color=colour, lw=3.2, solid_capstyle="butt")
    ax.plot(
        [med],
        [y],
        marker,
        color=colour,
        mfc="white" if hollow else colour,
        mec=colour,
        ms=5 if marker == "o" else 5.5,
        mew=1.0,
        zorder=3,
    )


def _forest_column(
    ax,
    var: str,
    draws: np.ndarray,
    group_draws: dict[tuple[str, str | None], np.ndarray],
    rows: Sequence[_ForestRow],
    ys: np.ndarray,
    qs: Sequence[float],
    flagged: set[int],
) -> None:
    """Draw variable ``var`` on ``ax``: its runs' rows, its group-level rows, and the x axis.

    Parameters
    ----------
    ax : matplotlib.axes.Axes
    var : str
    draws : ndarray, shape (run, sample)
        The runs' draws of ``var``.
    group_draws : dict
        The draws of its group-level variable (:func:`group_level_draws`).
    rows : sequence of (label, kind, key)
    ys : ndarray
        The y position of each row.
    qs : sequence of float
        The quantiles drawn: outer low, 25%, median, 75%, outer high.
    flagged : set of int
        Indices of the runs drawn with an open marker.
    """
    for y, (_label, kind, key) in zip(ys, rows, strict=True):
        if kind == "run":
            _draw_interval(ax, draws[key], y, qs, _RUN_COLOUR, "o", key in flagged)
        elif key in group_draws:
            _draw_interval(ax, group_draws[key], y, qs, _GROUP_COLOUR, "D", False)
    if var == "C_mid":
        _log_compute_axis(ax, label="C_mid")
    else:
        ax.set_xlabel(var, fontsize=_FS_LABEL)
    _style_axes(ax)
    ax.grid(False, axis="y")
    ax.set_title(_text(var), fontsize=_FS_TITLE)


def _forest_row_axis(
    axes: list, rows: Sequence[_ForestRow], ys: np.ndarray, group_by: str | None, flagged: set[int]
) -> None:
    """Separators above each group, and the row labels (groups bold, flagged runs with a dagger)."""
    for k, (y, (_label, kind, _key)) in enumerate(zip(ys, rows, strict=True)):
        heading = kind == "group" or (
            group_by is None and kind == "run" and k > 0 and rows[k - 1][1] == "sub"
        )
        if heading:
            for ax in axes:
                ax.axhline(y + 0.5, color="0.8", lw=0.6, zorder=0)
    labels = [_text(label) + (" †" if kind == "run" and key in flagged else "") for label, kind, key in rows]
    axes[0].set_yticks(ys, labels)
    axes[0].set_ylim(ys[-1] - 0.7, 0.7)
    for ax in axes:
        ax.tick_params(axis="y", length=0)
    for tick, (_label, kind, _key) in zip(axes[0].get_yticklabels(), rows, strict=True):
        if kind == "group":
            tick.set_fontweight("bold")


def _forest_legend(
    ci_prob: float, level: str, group_rows: bool, flag_rows: bool, flag_label: str
) -> list[Line2D]:
    """Legend entries of the forest plot: median, intervals, and group level and flag when drawn."""
    items = [
        Line2D([], [], color=_RUN_COLOUR, marker="o", ls="none", ms=5, label="median"),
        Line2D([], [], color=_RUN_COLOUR, lw=3.2, label="50% interval"),
        Line2D([], [], color=_RUN_COLOUR, lw=1.0, label=f"{round(ci_prob * 100):d}% interval"),
    ]
    if group_rows:
        items.append(
            Line2D([], [], color=_GROUP_COLOUR, marker="D", ms=5, lw=1.0, label=f"{_text(level)} level")
        )
    if flag_rows:
        items.append(
            Line2D(
                [], [], color=_RUN_COLOUR, marker="o", mfc="white", ls="none", ms=5, label=f"† {flag_label}"
            )
        )
    return items


def plot_forest(
    result: FitResult,
    *,
    var_names: Sequence[str] = ("A",),
    group_by: str | None = None,
    ci_prob: float = 0.9,
    runs: Sequence[str] | None = None,
    flag_runs: Sequence[str] = (),
    flag_label: str = "not converged",
) -> Figure:
    """Posterior median with 50% and ``ci_prob`` intervals, one row per run.

    If the posterior has group-level variables (``A_recipe``, ``B_recipe``, ``C_mid_recipe``
    with dimension ``recipe``, from a hierarchical fit) they are drawn too, as diamonds in
    a second colour: on each group's heading when ``group_by="recipe"``, otherwise as rows
    above the runs. A group-level variable with a further dimension (``A_recipe`` per
    ``task``) gets one row per value.

    Parameters
    ----------
    result : FitResult
        The fit.
    var_names : sequence of str
        Variables, one column each (``"A"``, ``"B"``, ``"C_mid"``, ``"sigma"``, ``"R0"``).
        ``C_mid`` is drawn on a log axis.
    group_by : str, optional
        A per-run column of the data (usually ``"recipe"``): runs are listed under their
        group, with the group-level posterior on the group's row when the fit has one.
    ci_prob : float
        Probability mass of the outer interval (the inner one is 50%).
    runs : sequence of str, optional
        Runs to show (default all).
    flag_runs : sequence of str
        Runs to mark (a dagger after the name, open marker), e.g. the runs that did not
        converge; ``flag_label`` explains the mark below the plot.
    flag_label : str
        What a flag means.

    Returns
    -------
    matplotlib.figure.Figure
        One axes per variable, sharing the run axis.
    """
    var_names = _forest_variables(result, var_names, ci_prob)
    names = _check_runs(result, runs)
    flag_names = {str(r) for r in flag_runs}
    flagged = {i for i, name in enumerate(result.run_names) if name in flag_names}
    level = group_by or "recipe"
    group_level = {var: group_level_draws(result, var, level) for var in var_names}
    keys = list(dict.fromkeys(k for d in group_level.values() for k in d))
    rows = _forest_rows(result, names, group_by, level, keys)
    fig, axes = _forest_figure(rows, len(var_names))
    qs = [(1 - ci_prob) / 2, 0.25, 0.5, 0.75, 1 - (1 - ci_prob) / 2]
    ys = -np.arange(len(rows), dtype=float)
    for ax, var in zip(axes, var_names, strict=True):
        _forest_column(ax, var, result.draws(var), group_level[var], rows, ys, qs, flagged)
    _forest_row_axis(axes, rows, ys, group_by, flagged)
    group_rows = any(key in group_level[var] for var in var_names for _, kind, key in rows if kind != "run")
    flag_rows = any(key in flagged for _, kind, key in rows if kind == "run")
    items = _forest_legend(ci_prob, level, group_rows, flag_rows, flag_label)
    _figure_legend(fig, items, ncol=len(items) if len(var_names) > 1 else 3)
    return fig


# ---------------------------------------------------------------------- linearised
def plot_linearised(
    result: FitResult,
    *,
    runs: Sequence[str] | None = None,
    group_by: str | None = None,
    max_compute: float | None = None,
    max_panels: int = 24,
    ncols: int = 4,
) -> Figure:
    """The paper's linearised view, on which the sigmoid is a line of slope ``B``.

    Each point is drawn at ``(C, log((R - R0) / (A - R)))`` (see
    :func:`bayes_scalerl.models.curve.linearised`) with ``A`` (and ``R0`` when fitted) the run's
    posterior median; the line is ``B (log C - log C_mid)`` at the posterior medians of
    ``B`` and ``C_mid``, solid in the fit window and dotted beyond, crossing zero at
    ``C_mid``. The compute axis is logarithmic, so the x position is ``log C``. Points
    outside ``(R0, A)`` have no place on this view and are counted in the panel.

    Parameters
    ----------
    result : FitResult
        The fit.
    runs : sequence of str, optional
        Runs to show (default all).
    group_by : str, optional
        A per-run column of the data (``"recipe"``): one panel per group, runs overlaid.
    max_compute : float, optional
        Right end of the line (default: the larger of the last evaluation and twice the
        end of the fit window).
    max_panels, ncols : int
        At most this many panels, this many per row.

    Returns
    -------
    matplotlib.figure.Figure
        One axes per panel.
    """
    names = _check_runs(result, runs)
    panels = _panels(result, names, group_by)[:max_panels]
    if not panels:
        raise ValueError("no runs to plot")
    overlay = group_by is not None
    lookup = _index(result)
    A_med = np.median(result.draws("A"), axis=1)
    B_med = np.median(result.draws("B"), axis=1)
    C_med = np.median(result.draws("C_mid"), axis=1)
    fig, axes, ncols = _panel_grid(len(panels), ncols, (3.2, 2.55), sharey=True)
    for ax, (title, members) in zip(axes, panels, strict=True):
        fit_ends = set()
        hidden = 0
        for k, name in enumerate(members):
            i = lookup[name]
            c, y, f = _run_points(result, i)
            colour = _PALETTE[k % len(_PALETTE)] if overlay else _PALETTE[0]
            point_colour = colour if overlay else "0.1"
            marker = _MARKERS[k % len(_MARKERS)] if overlay else "o"
            x_log, y_lin = linearised(c, y, A_med[i], _R0_median(result, i))
            shown = np.isfinite(x_log) & np.isfinite(y_lin)
            hidden += int(np.sum((c > 0) & ~shown))
            c_fit = _fit_end(f, c)
            fit_ends.add(c_fit)
            pos = c[c > 0]
            c_max = max(np.nanmax(c), max_compute if max_compute else 2 * c_fit)
            grid = np.geomspace(pos.min() if pos.size else C_med[i] / 10, c_max, 100)
            line = B_med[i] * (np.log(grid) - np.log(C_med[i]))
            inside = grid <= c_fit
            b_text = f"B = {B_med[i]:.2f}"
            label = f"{_text(_short_label(name, title))}: {b_text}" if overlay else None
            ax.plot(grid[inside], line[inside], "-", color=colour, lw=1.8, label=label)
            ax.plot(grid[~inside], line[~inside], ":", color=colour, lw=1.8)
            ms = 3.6 if overlay else 3.2
            sel = shown & f
            ax.plot(c[sel], y_lin[sel], marker, ls="none", ms=ms, color=point_colour, mew=0.8, zorder=3)
            sel = shown & ~f
            ax.plot(
                c[sel], y_lin[sel], marker, ls="none", ms=ms, mfc="white", mec=point_colour, mew=0.8, zorder=3
            )
            if not overlay:
                ax.text(0.03, 0.96, b_text, transform=ax.transAxes, va="top", ha="left", fontsize=_FS_LEGEND)
        for c_fit in fit_ends:
            ax.axvline(c_fit, **_FIT_END, zorder=1)
        ax.axhline(0.0, color="0.55", lw=0.6, zorder=1)
        if hidden:
            ax.text(
                0.97,
                0.04,
                f"{hidden} point{'s' if hidden > 1 else ''} outside (R0, A)",
                transform=ax.transAxes,
                va="bottom",
                ha="right",
                fontsize=_FS_LEGEND - 1,
                color="0.35",
                bbox=dict(facecolor="white", edgecolor="none", alpha=0.85, pad=1.5),
                zorder=4,
            )
        _log_compute_axis(ax, label="compute (log scale)")
        _style_axes(ax)
        ax.set_title(_panel_title(title), fontsize=_FS_TITLE)
        if overlay:
            ax.legend(fontsize=_FS_LEGEND - 0.5, loc="upper left", frameon=False, handlelength=1.6)
    for k, ax in enumerate(axes):
        if k % ncols == 0:
            ax.set_ylabel(r"$\log\,\frac{R - R_0}{A - R}$", fontsize=_FS_LABEL + 1)
    items = _style_legend(None)
    _figure_legend(fig, items, narrow=ncols < 3)
    return fig


# ---------------------------------------------------------------------- export
def _arviz_plots():
    """``arviz_plots``, imported so that it loads beside Matplotlib 3.11.

    arviz-plots 0.8 registers its styles through ``matplotlib.style.core``, which Matplotlib
    3.11 deprecates and no longer imports with ``matplotlib.style``; importing it first
    lets arviz-plots load. Its Matplotlib backend is imported here too, with the
    deprecation warnings of both silenced.
    """
    import importlib
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        importlib.import_module("matplotlib.style.core")
        importlib.import_module("arviz_plots.backend.matplotlib")  # registers a scale 3.11 warns about
        return importlib.import_module("arviz_plots")


def plot_rank(
    result: FitResult,
    runs: Sequence[str],
    *,
    var_names: Sequence[str] | None = None,
    ci_prob: float = 0.99,
) -> Figure:
    """ArviZ's rank plots (fractional-rank ECDF minus uniform, one line per chain) of some runs.

    A chain whose line leaves the grey envelope ranks its draws higher or lower than the
    others: the chains disagree about that parameter (what a high R-hat summarises). One
    column per run, one row per parameter; ``arviz_plots.plot_rank`` draws the panels.

    Parameters
    ----------
    result : FitResult
    runs : sequence of str
        The runs to show (for instance those that failed a diagnostic), at most 8.
    var_names : sequence of str, optional
        Per-run parameters to show (default: the model's, without ``sigma``).
    ci_prob : float
        Probability of the simultaneous envelope (ArviZ's default 0.99).
    """
    runs = _check_runs(result, list(runs))
    if not 1 <= len(runs) <= 8:
        raise ValueError(f"plot_rank shows 1 to 8 runs, got {len(runs)}")
    post = result.dt["posterior"]
    if var_names is None:
        var_names = [v for v in result.var_names if v != "sigma" and post[v].dims[-1:] == ("run",)]
    azp = _arviz_plots()
    colours = [_PALETTE[k % len(_PALETTE)] for k in range(post.sizes["chain"])]
    pc = azp.plot_rank(
        result.dt,
        var_names=list(var_names),
        coords={"run": runs},
        ci_prob=ci_prob,
        backend="matplotlib",
        color=colours,
        cols=["__variable__", "run"],
        col_wrap=len(runs),
        figure_kwargs={"figsize": (2.9 * len(runs) + 0.6, 2.1 * len(var_names)), "layout": "constrained"},
    )
    fig = pc.viz["figure"].item()
    for ax in fig.axes:
        ax.title.set_fontsize(_FS_TITLE)
        ax.xaxis.label.set_fontsize(_FS_LABEL)
        ax.tick_params(labelsize=_FS_TICK)
    fig.legend(
        [Line2D([], [], color=c, lw=1.5) for c in colours],
        [f"chain {k}" for k in range(len(colours))],
        loc="outside lower center",
        ncol=len(colours),
        frameon=False,
        fontsize=_FS_LEGEND,
    )
    return fig


def png_bytes(fig: Figure, *, dpi: int = 150, close: bool = True) -> bytes:
    """The figure as PNG bytes (for reports); closes it unless ``close=False``.

    Parameters
    ----------
    fig : matplotlib.figure.Figure
    dpi : int
        Resolution.
    close : bool
        Close the figure (with pyplot) once saved, even if saving fails.

    Returns
    -------
    bytes
    """
    buf = io.BytesIO()
    try:
        fig.savefig(buf, format="png", dpi=dpi, facecolor="white")
    finally:
        if close:
            plt.close(fig)
    return buf.getvalue()
