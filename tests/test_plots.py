"""Plots: one axes per panel or variable, the right data on them, names shown verbatim."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import bayes_scalerl as bs  # noqa: E402
from bayes_scalerl.models.curve import linearised  # noqa: E402
from bayes_scalerl.report.plots import plot_curves, plot_forest, plot_linearised  # noqa: E402

#: Two recipes with two seeds each, taken from the session's demo fit (no new compilation).
RUNS = ["ScaleRL/s0", "ScaleRL/s1", "LOO-batch/s0", "LOO-batch/s1"]


def subset(result: bs.FitResult, runs, names=None) -> bs.FitResult:
    """The fit restricted to ``runs``, optionally renamed to ``names``."""
    idx = [result.run_names.index(r) for r in runs]
    dt = result.dt.isel(run=idx)
    if names is not None:
        dt = dt.map_over_datasets(lambda ds: ds.assign_coords(run=list(names)) if "run" in ds.dims else ds)
    return bs.FitResult(dt)


@pytest.fixture(scope="module")
def small(demo_fit):
    return subset(demo_fit, RUNS)


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _lines(ax, ls):
    return [ln for ln in ax.get_lines() if ln.get_linestyle() == ls and len(ln.get_xdata()) > 1]


def test_plot_curves_one_panel_per_run(small):
    fig = plot_curves(small)
    assert isinstance(fig, matplotlib.figure.Figure)
    assert len(fig.axes) == 4
    for ax, run in zip(fig.axes, RUNS, strict=True):
        assert ax.get_title() == run
        assert ax.get_xscale() == "log"
        assert _lines(ax, "-") and _lines(ax, ":")  # fit window solid, extrapolation dotted
        assert ax.collections  # the band
    fig.canvas.draw()


def test_plot_curves_band_contains_median(small):
    fig = plot_curves(small, runs=["ScaleRL/s0"], max_compute=32000)
    ax = fig.axes[0]
    band = ax.collections[0].get_paths()[0].vertices
    solid = _lines(ax, "-")[0]
    x, y = solid.get_xdata(), solid.get_ydata()
    assert x.max() <= 8000 + 1e-9 < _lines(ax, ":")[0].get_xdata().max() == pytest.approx(32000)
    assert band[:, 1].min() <= y.min() and y.max() <= band[:, 1].max()


def test_plot_curves_group_by_recipe_overlays_runs(small):
    fig = plot_curves(small, group_by="recipe")
    assert [ax.get_title() for ax in fig.axes] == ["ScaleRL", "LOO-batch"]
    for ax in fig.axes:
        labels = [t.get_text() for t in ax.get_legend().get_texts()]
        assert labels == ["s0", "s1"]
        assert len(_lines(ax, "-")) == 2
    fig.canvas.draw()


def test_plot_curves_errors(small):
    with pytest.raises(KeyError, match="nope"):
        plot_curves(small, runs=["nope"])
    with pytest.raises(ValueError, match="task"):
        plot_curves(small, group_by="task")
    with pytest.raises(ValueError, match="ci_prob"):
        plot_curves(small, ci_prob=1.5)
    assert len(plot_curves(small, max_panels=3).axes) == 3


def test_plot_forest_axes_and_rows(small):
    fig = plot_forest(small, var_names=("A", "B", "C_mid"), flag_runs=["ScaleRL/s1"])
    assert len(fig.axes) == 3
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert labels == ["ScaleRL/s0", "ScaleRL/s1 †", "LOO-batch/s0", "LOO-batch/s1"]
    assert fig.axes[2].get_xscale() == "log"
    # the median marker of the first run sits at the posterior median
    med = np.median(small.draws("A")[0])
    xs = [ln.get_xdata()[0] for ln in fig.axes[0].get_lines() if len(ln.get_xdata()) == 1]
    assert xs[0] == pytest.approx(med)
    fig.canvas.draw()


def test_plot_forest_group_by_recipe(small):
    fig = plot_forest(small, group_by="recipe")
    assert len(fig.axes) == 1
    labels = [t.get_text().strip() for t in fig.axes[0].get_yticklabels()]
    assert labels == ["ScaleRL", "s0", "s1", "LOO-batch", "s0", "s1"]


def with_recipe_level(result: bs.FitResult, *, tasks=()) -> bs.FitResult:
    """A stand-in for a hierarchical fit: ``{A,B,C_mid}_recipe`` = the mean of the recipe's runs.

    With ``tasks``, ``A_recipe`` gets a ``task`` dimension (shifted copies), as the
    hierarchical model gives it when runs have several tasks.
    """
    import xarray as xr

    post = result.dt["posterior"].to_dataset()
    recipes = result.dt["constant_data"]["recipe"].values
    names = list(dict.fromkeys(recipes))
    for var in ("A", "B", "C_mid"):
        per = [post[var].isel(run=np.flatnonzero(recipes == r)).mean("run") for r in names]
        da = xr.concat(per, dim="recipe").assign_coords(recipe=names)
        if var == "A" and tasks:
            da = xr.concat([da + 0.01 * k for k in range(len(tasks))], dim="task").assign_coords(
                task=list(tasks)
            )
        post[f"{var}_recipe"] = da.transpose("chain", "draw", "recipe", ...)
    dt = result.dt.copy()
    dt["posterior"] = post
    return bs.FitResult(dt)


def test_plot_forest_recipe_level_variables(small):
    """A hierarchical fit's ``A_recipe`` etc. (dim ``recipe``) get rows of their own."""
    hier = with_recipe_level(small)
    post = hier.dt["posterior"]
    fig = plot_forest(hier, var_names=("A", "B"))
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert labels[:2] == ["ScaleRL (recipe)", "LOO-batch (recipe)"]
    assert len(labels) == 2 + 4
    diamonds = [ln for ln in fig.axes[0].get_lines() if ln.get_marker() == "D"]
    assert len(diamonds) == 2
    med = float(np.median(post["A_recipe"].sel(recipe="LOO-batch").values))
    assert diamonds[1].get_xdata()[0] == pytest.approx(med)
    fig = plot_forest(hier, group_by="recipe")
    labels = [t.get_text().strip() for t in fig.axes[0].get_yticklabels()]
    assert labels == ["ScaleRL", "s0", "s1", "LOO-batch", "s0", "s1"]
    assert len([ln for ln in fig.axes[0].get_lines() if ln.get_marker() == "D"]) == 2


def test_plot_forest_recipe_level_per_task(small):
    """``A_recipe`` with a ``task`` dimension: one row per task under each recipe."""
    hier = with_recipe_level(small, tasks=("math", "code"))
    fig = plot_forest(hier, var_names=("A", "B"), group_by="recipe")
    labels = [t.get_text().strip() for t in fig.axes[0].get_yticklabels()]
    assert labels[:5] == ["ScaleRL", "math (recipe level)", "code (recipe level)", "s0", "s1"]
    # A: one diamond per (recipe, task); B (no task dimension): one per recipe, on its heading
    assert len([ln for ln in fig.axes[0].get_lines() if ln.get_marker() == "D"]) == 4
    assert len([ln for ln in fig.axes[1].get_lines() if ln.get_marker() == "D"]) == 2
    A = hier.dt["posterior"]["A_recipe"].sel(recipe="ScaleRL", task="code").values
    d = [ln for ln in fig.axes[0].get_lines() if ln.get_marker() == "D"][1]
    assert d.get_xdata()[0] == pytest.approx(float(np.median(A)))
    fig = plot_forest(hier, var_names=("A",))
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert labels[:2] == ["ScaleRL · math (recipe)", "ScaleRL · code (recipe)"]


def test_plot_forest_errors(small):
    with pytest.raises(KeyError, match="nope"):
        plot_forest(small, var_names=("nope",))
    with pytest.raises(ValueError):
        plot_forest(small, var_names=())


def test_plot_linearised_points_and_slope(small):
    fig = plot_linearised(small)
    assert len(fig.axes) == 4
    ax = fig.axes[0]
    i = 0
    A = np.median(small.draws("A")[i])
    B = np.median(small.draws("B")[i])
    R0 = float(small.dt["constant_data"]["R0_obs"].values[i])
    c = small.dt["constant_data"]["compute"].values[i]
    y = small.dt["observed_data"]["reward"].values[i]
    f = small.dt["constant_data"]["in_fit"].values[i]
    _, y_lin = linearised(c, y, A, R0)
    filled = [ln for ln in ax.get_lines() if ln.get_marker() == "o" and ln.get_markerfacecolor() != "white"]
    np.testing.assert_allclose(filled[0].get_ydata(), y_lin[f & np.isfinite(y_lin)])
    solid = _lines(ax, "-")[0]
    slope = np.diff(solid.get_ydata()) / np.diff(np.log(solid.get_xdata()))
    np.testing.assert_allclose(slope, B)
    fig.canvas.draw()


def test_plot_linearised_group_by_recipe(small):
    fig = plot_linearised(small, group_by="recipe")
    assert len(fig.axes) == 2
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert [s.split(":")[0] for s in labels] == ["s0", "s1"]


def test_names_are_shown_verbatim(demo_fit):
    """A ``$`` in a run name must not start matplotlib's mathtext."""
    odd = subset(demo_fit, RUNS[:2], names=["cost $5", "<b>x&y</b>"])
    for fig in (plot_curves(odd), plot_forest(odd), plot_linearised(odd)):
        fig.canvas.draw()
        texts = [ax.get_title() for ax in fig.axes] + [t.get_text() for t in fig.axes[0].get_yticklabels()]
        assert any("5" in t for t in texts)


def test_overview_shows_every_run_and_the_ones_that_need_a_look(demo_fit):
    from bayes_scalerl.report.outputs import fit_diagnostics
    from bayes_scalerl.report.overview import plot_overview

    diag = fit_diagnostics(demo_fit)
    fig = plot_overview(demo_fit, diag, budget=32_000, n_look=4)
    strip_a, strip_f, *grid = fig.axes
    n = len(demo_fit.run_names)
    # one interval per run in each strip, whatever its colour
    assert sum(len(c.get_segments()) for c in strip_a.collections) == n
    assert sum(len(c.get_segments()) for c in strip_f.collections) == n
    assert "32,000" in strip_f.get_title()
    assert len(grid) == 4
    assert (
        f"{n} runs" in fig._suptitle.get_text() and "the 4 that most need a look" in fig._suptitle.get_text()
    )
    # the grid shows the runs with the widest intervals of A first (all converge here)
    A = demo_fit.draws("A")
    width = np.quantile(A, 0.95, axis=1) - np.quantile(A, 0.05, axis=1)
    widest = [demo_fit.run_names[i] for i in np.argsort(-width)[:4]]
    if diag["converged"].all():
        assert [ax.get_title() for ax in grid] == widest
    plt.close(fig)


def test_runs_to_look_at_puts_half_not_converged_first():
    import pandas as pd

    from bayes_scalerl.report.overview import runs_to_look_at

    diag = pd.DataFrame(
        {
            "run": list("abcdefgh"),
            "converged": [True, False, True, False, False, True, True, True],
            "r_hat_max": [1.0, 1.05, 1.0, 1.2, 1.02, 1.0, 1.0, 1.0],
        }
    )
    width = np.array([0.1, 0.3, 0.5, 0.2, 0.9, 0.05, 0.4, 0.2])
    runs, why = runs_to_look_at(diag, width, 4)
    assert runs == ["d", "b", "c", "g"] and why == "2 not converged, 2 with the widest intervals of A"
    runs, why = runs_to_look_at(diag.assign(converged=True), width, 3)
    assert runs == ["e", "c", "g"] and why == "3 with the widest intervals of A"
    runs, _ = runs_to_look_at(diag, width, 8)  # every run once
    assert sorted(runs) == list("abcdefgh")
