"""The HTML and Markdown report of a fit folder."""

from __future__ import annotations

import base64
import html
import io
import re

import matplotlib

matplotlib.use("Agg")
import matplotlib.image as mpimg  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

import bayes_scalerl as bs  # noqa: E402
from bayes_scalerl.report import (
    plots,  # noqa: E402
    write_report,  # noqa: E402
)

IMG = re.compile(r'<img src="data:image/png;base64,([A-Za-z0-9+/=]+)"')
COMPARISONS = pd.DataFrame(
    {
        "a": ["ScaleRL", "ScaleRL"],
        "b": ["LOO-dapo", "LOO-batch"],
        "param": ["A", "A"],
        "diff_mean": [0.012, 0.031],
        "diff_q05": [-0.004, 0.012],
        "diff_q95": [0.029, 0.05],
        "p_a_greater": [0.87, 0.995],
        "p_in_rope": [0.61, 0.08],
        "verdict": ["inconclusive-zq", "a-better-zq"],
    }
)


def subset(result: bs.FitResult, runs, names=None) -> bs.FitResult:
    """The fit restricted to ``runs``, optionally renamed to ``names`` (no new sampling)."""
    idx = [result.run_names.index(r) for r in runs]
    dt = result.dt.isel(run=idx)
    if names is not None:
        dt = dt.map_over_datasets(lambda ds: ds.assign_coords(run=list(names)) if "run" in ds.dims else ds)
    return bs.FitResult(dt)


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


@pytest.fixture(scope="module")
def demo_report(demo_fit, tmp_path_factory):
    """The full demo fit (18 runs, 9 recipes) written by write_fit_folder, with comparisons."""
    fitdir = tmp_path_factory.mktemp("fit") / "demo-out"
    bs.write_fit_folder(demo_fit, fitdir, predict=[32000.0])
    COMPARISONS.to_csv(fitdir / "comparisons.csv", index=False)
    paths = write_report(fitdir)
    return fitdir, paths


@pytest.fixture
def small_fitdir(demo_fit, tmp_path):
    """Four runs, one with a name full of HTML; diagnostics edited to flag one run."""
    runs = ["ScaleRL/s0", "ScaleRL/s1", "LOO-batch/s0", "LOO-batch/s1"]
    names = ["<b>x&y</b>", "ScaleRL/s1", "LOO-batch/s0", "LOO-batch/s1"]
    res = subset(demo_fit, runs, names)
    fitdir = tmp_path / "small"
    bs.write_fit_folder(res, fitdir)
    diag = pd.read_csv(fitdir / "diagnostics.csv")
    diag["converged"] = [True, True, False, True]
    diag["A_identified"] = [True, False, True, True]  # a column the report does not know
    diag.to_csv(fitdir / "diagnostics.csv", index=False)
    return fitdir


def _figure_keys(result: bs.FitResult) -> list[str]:
    """The report's figures: rank plots only when some run did not converge."""
    rank = ["rank"] if not result.diagnostics()["converged"].all() else []
    return ["curves", "forest", "linearised", *rank]


def test_writes_every_file(demo_fit, demo_report):
    fitdir, paths = demo_report
    assert set(paths) == {"html", "markdown", *_figure_keys(demo_fit)}
    for p in paths.values():
        assert p.parent == fitdir and p.is_file() and p.stat().st_size > 0
    # the fit's own outputs are untouched and nothing temporary is left behind
    assert {"summary.csv", "predictions.csv", "diagnostics.csv", "posterior.nc", "curves.png"} <= {
        p.name for p in fitdir.iterdir()
    }
    assert [p.name for p in fitdir.parent.iterdir()] == [fitdir.name]


def test_html_images_are_valid_pngs(demo_fit, demo_report):
    _, paths = demo_report
    text = paths["html"].read_text(encoding="utf-8")
    blobs = IMG.findall(text)
    keys = _figure_keys(demo_fit)
    assert len(blobs) == len(keys) == text.count("<img ")
    for blob, key in zip(blobs, keys, strict=True):
        png = base64.b64decode(blob, validate=True)
        assert png.startswith(b"\x89PNG\r\n\x1a\n")
        assert png == paths[key].read_bytes()  # the same figure as the file beside report.md
        img = mpimg.imread(io.BytesIO(png), format="png")
        h, w = img.shape[:2]
        assert 300 <= w <= 4000 and 300 <= h <= 4000


def test_html_is_self_contained(demo_report):
    _, paths = demo_report
    text = paths["html"].read_text(encoding="utf-8")
    assert text.startswith("<!DOCTYPE html>") and text.rstrip().endswith("</html>")
    low = text.lower()
    for bad in ("<script", "<link", "http://", "https://", "@import", "url("):
        assert bad not in low, bad
    assert re.findall(r'src="(?!data:image/png;base64,)', text) == []


def test_html_contents(demo_fit, demo_report):
    _, paths = demo_report
    text = paths["html"].read_text(encoding="utf-8")
    sections = ("Settings", "Runs", "Curves", "Forest plot", "Linearised view", "Diagnostics", "Comparisons")
    for section in sections:
        assert f">{section}</h2>" in text, section
    for key in ("fit_until", "min_compute", "chains", "warmup", "samples", "priors", "B_median"):
        assert key in text, key
    assert "&lt;demo&gt;" in text and "<demo>" not in text  # the source, escaped
    # the noise model each run got, in words (the default: one AR(1) correlation for the batch)
    # (escaped: the learnt priors' words hold "run's")
    assert f"<th>noise</th><td>{html.escape(demo_fit.settings['noise'])}</td>" in text
    assert demo_fit.settings["noise"].startswith("AR(1), rho ")
    for run in demo_fit.run_names:
        assert run in text
    # A's interval of the first run, as in summary.csv
    s = demo_fit.summary(var_names=["A"]).iloc[0]
    assert f"{s.q50:.3f} [{s.q05:.3f}, {s.q95:.3f}]" in text
    assert "reward at 32,000 [90%]" in text  # predictions at the extra budget
    for verdict in ("inconclusive-zq", "a-better-zq"):
        assert verdict in text
    assert text.count('<tr class="bad">') >= 2 * len(demo_fit.diagnostics().query("~converged"))


def test_markdown(demo_fit, demo_report):
    fitdir, paths = demo_report
    md = paths["markdown"].read_text(encoding="utf-8")
    assert md.startswith("# ScaleRL fit report")
    for run in demo_fit.run_names:
        assert run in md
    links = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", md)
    assert links == [f"report_{k}.png" for k in _figure_keys(demo_fit)]
    for link in links:
        assert (fitdir / link).is_file()
    assert "## Comparisons" in md
    for verdict in ("inconclusive-zq", "a-better-zq"):
        assert verdict in md
    table = [ln for ln in md.splitlines() if ln.startswith("| ScaleRL/s0 ")]
    assert table and table[0].count("|") == 8  # run, recipe, points, A, B, C_mid, flags


def test_escaping_flags_and_extra_columns(small_fitdir):
    comparisons = COMPARISONS.assign(a=["<script>alert(1)</script>", "ScaleRL"])
    comparisons.to_csv(small_fitdir / "comparisons.csv", index=False)
    paths = write_report(small_fitdir)
    text = paths["html"].read_text(encoding="utf-8")
    assert "<b>x&y</b>" not in text and "<script>" not in text
    assert "&lt;b&gt;x&amp;y&lt;/b&gt;" in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    # the run that did not converge is highlighted in the runs and diagnostics tables
    bad_rows = re.findall(r'<tr class="bad">(.*?)</tr>', text)
    assert sum("LOO-batch/s0" in r for r in bad_rows) == 2
    assert "not converged" in text and "1 of 4 runs did not converge" in text
    # an unknown diagnostics column is shown, and a False identifiability flag raised
    assert "<th>A_identified</th>" in text and "A_identified: no" in text
    md = paths["markdown"].read_text(encoding="utf-8")
    assert "<b>" not in md and "<script>" not in md
    assert r"\<b\>x\&y\</b\>" in md


def test_hierarchical_tables(small_fitdir):
    """A hierarchical fit's recipes.csv and sampler.csv appear, with all their columns."""
    recipes = pd.DataFrame(
        {
            "recipe": ["ScaleRL"] * 3 + ["LOO-batch"] * 3,
            "param": ["A", "B", "C_mid"] * 2,
            "n_runs": 2,
            "mean": [0.58, 1.9, 2300.0, 0.57, 2.0, 2200.0],
            "sd": 0.01,
            "q05": [0.571, 1.7, 2100.0, 0.561, 1.8, 2000.0],
            "q50": [0.5811, 1.9, 2300.0, 0.5712, 2.0, 2200.0],
            "q95": [0.592, 2.1, 2500.0, 0.582, 2.2, 2400.0],
        }
    )
    recipes.to_csv(small_fitdir / "recipes.csv", index=False)
    sampler = pd.DataFrame(
        {"variable": ["A", "A_pop"], "size": [4, 1], "r_hat_max": [1.002, 1.03], "converged": [True, False]}
    )
    sampler.to_csv(small_fitdir / "sampler.csv", index=False)
    paths = write_report(small_fitdir)
    text = paths["html"].read_text(encoding="utf-8")
    assert "<h3>Recipe level</h3>" in text and "0.581 [0.571, 0.592]" in text
    assert "2,200 [2,000, 2,400]" in text and "<th>n_runs</th>" in text
    assert "Sampler diagnostics by variable" in text
    assert any("A_pop" in r for r in re.findall(r'<tr class="bad">(.*?)</tr>', text))
    md = paths["markdown"].read_text(encoding="utf-8")
    assert "### Recipe level" in md and "| LOO-batch | 2 | 0.571 [0.561, 0.582] |" in md


def test_recipe_level_from_posterior(demo_fit, tmp_path):
    """Without recipes.csv the recipe-level table comes from ``*_recipe`` in the posterior."""
    import numpy as np
    import xarray as xr

    res = subset(demo_fit, ["ScaleRL/s0", "ScaleRL/s1", "LOO-batch/s0", "LOO-batch/s1"])
    post = res.dt["posterior"].to_dataset()
    recipes = ["ScaleRL", "LOO-batch"]
    A = xr.concat([post["A"].isel(run=[0, 1]).mean("run"), post["A"].isel(run=[2, 3]).mean("run")], "recipe")
    A = A.assign_coords(recipe=recipes)
    post["A_recipe"] = xr.concat([A, A + 0.01], "task").assign_coords(task=["math", "code"])
    post["B_recipe"] = post["B"].isel(run=[0, 2]).rename(run="recipe").assign_coords(recipe=recipes)
    dt = res.dt.copy()
    dt["posterior"] = post
    fitdir = tmp_path / "hier"
    bs.write_fit_folder(bs.FitResult(dt), fitdir)
    text = write_report(fitdir)["html"].read_text(encoding="utf-8")
    assert "<h3>Recipe level</h3>" in text
    assert "<th>A_recipe median [90%]</th>" in text and "<th>B_recipe median [90%]</th>" in text
    q = np.quantile(post["A_recipe"].sel(recipe="LOO-batch", task="code").values, [0.5, 0.05, 0.95])
    assert f"{q[0]:.3f} [{q[1]:.3f}, {q[2]:.3f}]" in text


def test_failed_report_leaves_previous_one(small_fitdir, monkeypatch):
    paths = write_report(small_fitdir)
    before = {p: p.read_bytes() for p in paths.values()}

    def broken(*args, **kwargs):
        raise RuntimeError("plot failed")

    monkeypatch.setattr(plots, "plot_linearised", broken)
    with pytest.raises(RuntimeError, match="plot failed"):
        write_report(small_fitdir)
    assert {p: p.read_bytes() for p in paths.values()} == before
    fresh = small_fitdir.parent / "fresh"
    with pytest.raises(RuntimeError, match="plot failed"):
        write_report(small_fitdir, out=fresh)
    assert not fresh.exists()
    assert sorted(p.name for p in small_fitdir.parent.iterdir()) == ["small"]


def test_failed_write_leaves_previous_one(small_fitdir, monkeypatch):
    """A failure while the files are being written (not only before) changes nothing."""
    paths = write_report(small_fitdir)
    before = paths["html"].read_bytes()
    real = type(paths["html"]).write_bytes

    def fail_on_png(self, data):
        if self.suffix == ".png":
            raise OSError("disk full")
        return real(self, data)

    monkeypatch.setattr(type(paths["html"]), "write_bytes", fail_on_png)
    with pytest.raises(OSError, match="disk full"):
        write_report(small_fitdir)
    assert paths["html"].read_bytes() == before


def test_out_folder_and_missing_posterior(small_fitdir, tmp_path):
    out = tmp_path / "elsewhere"
    paths = write_report(small_fitdir, out=out)
    assert paths["html"] == out / "report.html" and paths["html"].is_file()
    assert not (small_fitdir / "report.html").exists()
    (small_fitdir / "posterior.nc").unlink()
    with pytest.raises(FileNotFoundError, match="posterior.nc"):
        write_report(small_fitdir)


def test_identifiability_columns_without_diagnostics_csv(small_fitdir):
    """A folder without diagnostics.csv, or with one lacking the columns, still gets them."""
    from bayes_scalerl.report.outputs import IDENTIFIABILITY_COLUMNS

    diag = pd.read_csv(small_fitdir / "diagnostics.csv")
    diag.drop(columns=list(IDENTIFIABILITY_COLUMNS)).to_csv(small_fitdir / "diagnostics.csv", index=False)
    text = write_report(small_fitdir)["html"].read_text(encoding="utf-8")
    for col in IDENTIFIABILITY_COLUMNS:
        assert f"<th>{col}</th>" in text
    assert "no identifiability columns" in text
    (small_fitdir / "diagnostics.csv").unlink()
    text = write_report(small_fitdir)["html"].read_text(encoding="utf-8")
    for col in IDENTIFIABILITY_COLUMNS:
        assert f"<th>{col}</th>" in text
    assert "diagnostics.csv missing" in text


# ---- the answers the report leads with
def _answers(text: str) -> dict[str, str]:
    """The answer items of a report page, by their ``data-answer`` key (tags stripped)."""
    items = re.findall(r'<li class="(?:ok|warn)-item" data-answer="(\w+)">(.*?)</li>', text)
    return {k: re.sub(r"<[^>]+>", "", v) for k, v in items}


def test_the_report_opens_with_the_answers(demo_fit, demo_report):
    fitdir, paths = demo_report
    text = paths["html"].read_text(encoding="utf-8")
    assert re.findall(r"<h2[^>]*>([^<]+)</h2>", text)[0] == "Answers"
    answers = _answers(text)
    assert list(answers) == ["best", "ceilings", "forecast", "diagnostics"]
    # the best recipe at the --predict budget is bs.p_best's, with its probability
    best = bs.p_best(demo_fit, budget=32000.0).iloc[0]
    assert f"{best.recipe}, P = {best.p_best:.2f}" in answers["best"] or (
        f"{best.recipe} (P = {best.p_best:.2f})" in answers["best"]
    )
    assert "compute 32,000" in answers["best"]
    # ceilings: the counts of diagnostics.csv's a_identified
    diag = pd.read_csv(fitdir / "diagnostics.csv")
    assert f"Ceilings: {int(diag['a_identified'].sum())} of {len(diag)} identified." in answers["ceilings"]
    # forecasts at the asked budget, the highest median as in predictions.csv
    pred = pd.read_csv(fitdir / "predictions.csv").query("compute == 32000")
    top = pred.loc[pred["q50"].idxmax()]
    assert "Forecasts at 32,000." in answers["forecast"]
    assert (
        f"highest median {top.run} {top.q50:.3f} [90%: {top.q05:.3f}, {top.q95:.3f}]" in answers["forecast"]
    )
    n_bad = int((~diag["converged"]).sum())
    if n_bad:
        assert f"{n_bad} of {len(diag)} runs did not converge" in answers["diagnostics"]
    else:
        assert f"All {len(diag)} runs converged" in answers["diagnostics"]
    # every link of the answers goes to a section of the page
    for anchor in re.findall(r'<li class="[^"]+" data-answer="\w+">.*?</li>', text):
        for target in re.findall(r'href="#([^"]+)"', anchor):
            assert f'id="{target}"' in text, target
    md = paths["markdown"].read_text(encoding="utf-8")
    lines = md.splitlines()
    assert lines[lines.index("## Answers") + 2].startswith("- **Best expected reward at compute 32,000")
    for target in re.findall(r"\]\(#([^)]+)\)", md):  # anchors of headings in the Markdown
        assert any(
            re.sub(r"[^\w\- ]", "", h.lstrip("#").strip().lower()).replace(" ", "-") == target
            for h in lines
            if h.startswith("#")
        ), target


def test_answers_name_failed_runs_and_show_their_rank_plots(small_fitdir):
    diag = pd.read_csv(small_fitdir / "diagnostics.csv")
    diag["falls"] = [False, False, False, True]
    diag.to_csv(small_fitdir / "diagnostics.csv", index=False)
    paths = write_report(small_fitdir)
    assert "rank" in paths and paths["rank"].name == "report_rank.png"
    text = paths["html"].read_text(encoding="utf-8")
    answers = _answers(text)
    assert (
        "1 of 4 runs did not converge" in answers["diagnostics"] and "LOO-batch/s0" in answers["diagnostics"]
    )
    assert "Reward falls during training in LOO-batch/s1" in answers["diagnostics"]
    assert 'data-answer="diagnostics"' in text and 'class="warn-item" data-answer="diagnostics"' in text
    assert 'id="rank"' in text and text.index('id="rank"') > text.index('id="diagnostics"')
    assert "Forecasts: none asked." in answers["forecast"]  # no --predict in this folder
    md = paths["markdown"].read_text(encoding="utf-8")
    assert "report_rank.png" in md


def test_rank_plot_has_a_panel_per_run_and_parameter(demo_fit):
    fig = plots.plot_rank(demo_fit, demo_fit.run_names[:2])
    panels = [ax for ax in fig.axes if ax.get_title()]
    assert len(panels) == 2 * 3  # A, B, C_mid for each run
    assert {ax.get_title().split("\n")[1] for ax in panels} == set(demo_fit.run_names[:2])
    assert all(len(ax.lines) >= 4 for ax in panels)  # one line per chain
    with pytest.raises(ValueError, match="1 to 8 runs"):
        plots.plot_rank(demo_fit, [])


def test_ceilings_answer_names_runs_held_back_by_the_allowance_beyond_the_data():
    """Runs whose flag says the sigmoid's own width passes are named apart from the others."""
    from bayes_scalerl.report.answers import _ceilings

    diag = pd.DataFrame(
        {
            "run": ["a", "b", "c"],
            "a_identified": [True, False, False],
            "a_width90": [0.05, 0.16, 0.40],
            "a_flag": [
                "A identified",
                "A weakly identified: 90% interval 0.160 wide (> 0.1); the sigmoid's own 0.040, the rest "
                "the allowance for departures from the sigmoid beyond the data",
                "A weakly identified: 90% interval 0.400 wide (> 0.1)",
            ],
        }
    )
    ans = _ceilings(diag, 3)
    assert ans.lead == "Ceilings: 1 of 3 identified."
    assert "the data pin the sigmoid's own ceiling within 0.10 for b;" in ans.text
    assert "median 0.280, up to 0.400" in ans.text  # the fit's widths without the rule's
    # without such a flag the sentence is left out
    plain = _ceilings(diag.assign(a_flag=diag["a_flag"].str.split(";").str[0]), 3)
    assert "sigmoid's own" not in plain.text
    # the widths quoted are those the rule read (a_width90_data) where the table has them
    ruled = _ceilings(diag.assign(a_width90=[0.05, 0.06, 0.40], a_width90_data=[0.05, 0.16, 0.40]), 3)
    assert "median 0.280, up to 0.400" in ruled.text
