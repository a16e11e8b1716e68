"""A fit's report: one self-contained HTML page and a Markdown summary.

:func:`write_report` reads a fit's output folder (written by ``bayes-scalerl fit`` or
:func:`bayes_scalerl.write_fit_folder`: ``posterior.nc``, ``summary.csv``,
``diagnostics.csv``, and when present ``predictions.csv``, ``comparisons.csv`` and a
hierarchical fit's ``recipes.csv`` and ``sampler.csv``) and writes, beside them or into
``out``:

- ``report.html``: first the answers (:mod:`.answers`: the best recipe at the largest
  ``--predict`` budget and how sure, which ceilings are identified, the forecasts, what
  failed its diagnostics), each linking to the section behind it; then settings, a
  per-run table of ``A``, ``B``, ``C_mid`` with 90% intervals and flags, the curves with
  bands, a forest plot, the linearised view, the diagnostics (runs that did not converge
  highlighted, and ArviZ's rank plots of the worst of them) and the comparisons. Figures
  are embedded as base64 PNG, styles are inline: the file needs nothing else and no
  JavaScript.
- ``report.md``: the same answers and tables in Markdown, linking the figures written
  beside it as ``report_curves.png``, ``report_forest.png``, ``report_linearised.png``
  and, when a run did not converge, ``report_rank.png``.

Files are written to a temporary folder and moved into place only when every one of them
was produced, so a failure leaves an earlier report untouched.
"""

from __future__ import annotations

import base64
import datetime as _dt
import html
import math
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from ..data.files import atomic_output_dir
from ..engine import runtime
from ..posterior.results import FitResult
from . import plots as _plots
from .answers import Answer, answers, runs_to_rank
from .answers import truthy as _truthy
from .outputs import IDENTIFIABILITY_COLUMNS, fit_diagnostics

__all__ = ["write_report"]

#: Columns that hold names, read as text (a run called ``1`` or ``NA`` stays a name).
_TEXT_COLUMNS = ("run", "param", "a", "b", "recipe", "seed", "task", "verdict", "group", "variable")
#: Panels in the curve figures and rows in the forest plot of a report, at most.
_MAX_PANELS = 24
_MAX_FOREST_RUNS = 80
_DPI = 150
#: pandas' default missing-value markers, applied to every column except the name columns.
_NA_VALUES = (
    "", "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan", "1.#IND", "1.#QNAN",
    "<NA>", "N/A", "NA", "NULL", "NaN", "None", "n/a", "nan", "null",
)  # fmt: skip
_PARAMS = ("A", "B", "C_mid")


# ---------------------------------------------------------------------- reading
def _read_csv(path: Path) -> pd.DataFrame:
    """A CSV with name columns kept as text and the usual missing values elsewhere."""
    header = pd.read_csv(path, nrows=0).columns
    text = [c for c in header if c in _TEXT_COLUMNS]
    na = {c: list(_NA_VALUES) for c in header if c not in text}
    return pd.read_csv(path, dtype={c: str for c in text}, keep_default_na=False, na_values=na)


@dataclass
class _Fit:
    """Everything a report shows, read from a fit's output folder."""

    result: FitResult
    summary: pd.DataFrame
    diagnostics: pd.DataFrame
    predictions: pd.DataFrame | None
    comparisons: pd.DataFrame | None
    recipes: pd.DataFrame | None
    sampler: pd.DataFrame | None
    source_dir: Path
    notes: list[str] = field(default_factory=list)

    @property
    def group_by(self) -> str | None:
        cd = self.result.dt["constant_data"]
        return "recipe" if "recipe" in cd.data_vars and cd["recipe"].dims == ("run",) else None

    @property
    def not_converged(self) -> list[str]:
        d = self.diagnostics
        if "converged" not in d.columns:
            return []
        return d.loc[~d["converged"].map(_truthy), "run"].astype(str).tolist()


def _load(fitdir: Path) -> _Fit:
    post = fitdir / "posterior.nc"
    if not post.is_file():
        raise FileNotFoundError(f"{fitdir}: no posterior.nc; is this the output folder of a fit?")
    result = FitResult.load(post)
    notes = []
    if (fitdir / "summary.csv").is_file():
        summary = _read_csv(fitdir / "summary.csv")
    else:
        summary = result.summary()
        notes.append("summary.csv missing: the summary was recomputed from posterior.nc")
    if (fitdir / "diagnostics.csv").is_file():
        diagnostics = _read_csv(fitdir / "diagnostics.csv")
        missing = [c for c in IDENTIFIABILITY_COLUMNS if c not in diagnostics.columns]
        if missing and result.settings.get("model", "independent") == "independent" and "run" in diagnostics:
            ident = fit_diagnostics(result)[["run", *missing]]
            diagnostics = diagnostics.merge(ident.astype({"run": str}), on="run", how="left")
            notes.append(
                "diagnostics.csv has no identifiability columns: they were computed from posterior.nc"
            )
    else:
        diagnostics = fit_diagnostics(result)
        notes.append("diagnostics.csv missing: diagnostics were recomputed from posterior.nc")
    optional = {}
    for name in ("predictions", "comparisons", "recipes", "sampler"):
        path = fitdir / f"{name}.csv"
        optional[name] = _read_csv(path) if path.is_file() else None
    return _Fit(result, summary, diagnostics, source_dir=fitdir, notes=notes, **optional)


# ---------------------------------------------------------------------- formatting
def _num(x, *, sig: int = 3) -> str:
    """A number for a table: 3 significant digits, thousands separated, no exponent."""
    if x is None:
        return ""
    try:
        x = float(x)
    except (TypeError, ValueError):
        return str(x)
    if math.isnan(x):
        return ""
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    if x == 0:
        return "0"
    prec = max(0, sig - 1 - math.floor(math.log10(abs(x))))
    return f"{x:,.{prec}f}"


def _cell(column: str, value) -> str:
    """How a value of a given column reads in a table."""
    if isinstance(value, bool | np.bool_):
        return "yes" if value else "no"
    if isinstance(value, str):
        low = value.strip().lower()
        if low in ("true", "false"):
            return "yes" if low == "true" else "no"
        return value
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    col = column.lower()
    if isinstance(value, int | np.integer):
        return f"{int(value):,}" if abs(int(value)) >= 10_000 else str(int(value))
    if col.startswith("r_hat"):
        return f"{float(value):.3f}"
    if col.startswith("ess") or col in ("n_points", "divergences"):
        return f"{float(value):,.0f}"
    if col.startswith("p_") or col.startswith("bfmi"):
        return f"{float(value):.3f}"
    return _num(value)


def _interval(med, lo, hi) -> str:
    return f"{_num(med)} [{_num(lo)}, {_num(hi)}]"


def _settings_rows(settings: dict, result: FitResult) -> list[tuple[str, str]]:
    """(name, value) rows of a fit's settings, the ones users set first."""

    def show(v) -> str:
        if v is None:
            return "not set"
        if isinstance(v, float):
            return f"{v:,.0f}" if v.is_integer() and abs(v) < 1e15 else f"{v:g}"
        return str(v)

    s = dict(settings)
    fit_until, min_compute = s.pop("fit_until", None), s.pop("min_compute", None)
    rows = [
        ("runs", str(len(result.run_names))),
        ("fit_until", "all points" if fit_until is None else show(fit_until)),
        ("min_compute", "none" if min_compute is None else show(min_compute)),
    ]
    priors = s.pop("priors", None)
    if "noise" in s:
        rows.append(("noise", show(s.pop("noise"))))
    for key in ("chains", "warmup", "samples", "seed", "target_accept", "max_tree_depth"):
        if key in s:
            rows.append((key, show(s.pop(key))))
    if isinstance(priors, dict):
        rows.append(("priors", ", ".join(f"{k}={show(v)}" for k, v in priors.items())))
    elif priors is not None:
        rows.append(("priors", show(priors)))
    rows += [(k, show(v)) for k, v in s.items()]
    return rows


def _per_run_table(fit: _Fit) -> pd.DataFrame:
    """One row per run: recipe, fitted points, A/B/C_mid medians with 90% intervals, flags."""
    s = fit.summary
    names = fit.result.run_names
    table = pd.DataFrame({"run": names})
    cd = fit.result.dt["constant_data"]
    if fit.group_by:
        table["recipe"] = [str(v) for v in cd["recipe"].values]
    diag = fit.diagnostics.set_index(fit.diagnostics["run"].astype(str))
    if "n_points" in diag.columns:
        points = diag["n_points"][~diag.index.duplicated()]
        table["points"] = points.reindex(names).to_numpy()
    for p in _PARAMS:
        sub = s[s["param"] == p].set_index("run")
        cells = []
        for r in names:
            if r in sub.index and {"q50", "q05", "q95"} <= set(sub.columns):
                row = sub.loc[r]
                cells.append(_interval(row["q50"], row["q05"], row["q95"]))
            else:
                cells.append("")
        table[f"{p} median [90%]"] = cells
    table["flags"] = ["; ".join(_flags(diag.loc[r] if r in diag.index else None)) for r in names]
    return table


def _flags(row: pd.Series | None) -> list[str]:
    """Warnings about a run from its diagnostics row."""
    if row is None:
        return ["no diagnostics"]
    if isinstance(row, pd.DataFrame):  # duplicated run name
        row = row.iloc[0]
    out = []
    if "converged" in row.index and not _truthy(row["converged"]):
        out.append("not converged")
    if "divergences" in row.index:
        try:
            div = int(float(row["divergences"]))
        except (TypeError, ValueError):
            div = 0
        if div > 0:
            out.append(f"{div} divergence{'s' if div > 1 else ''}")
    if "r_hat_max" in row.index:
        try:
            if float(row["r_hat_max"]) > 1.01:
                out.append(f"R-hat {float(row['r_hat_max']):.3f}")
        except (TypeError, ValueError):
            pass
    for col in row.index:  # identifiability columns, when the fit has them
        low = col.lower()
        if "identif" in low and isinstance(row[col], bool | np.bool_ | str) and not _truthy(row[col]):
            out.append(f"{col}: no")
        elif low in ("flag", "flags", "warning", "warnings") and isinstance(row[col], str) and row[col]:
            out.append(row[col])
    return out


def _group_level_table(fit: _Fit) -> pd.DataFrame | None:
    """Recipe-level medians and 90% intervals of a hierarchical fit.

    From ``recipes.csv`` when the fit folder has it (one row per recipe, its other columns
    kept), else from the posterior's ``A_recipe``, ``B_recipe``, ``C_mid_recipe``.
    """
    rec = fit.recipes
    if rec is not None and {"recipe", "param", "q05", "q50", "q95"} <= set(rec.columns):
        keys = [c for c in ("recipe", "task") if c in rec.columns]
        ids = [c for c in rec.columns if c not in ("param", "mean", "sd", "q05", "q50", "q95")]
        table = rec.drop_duplicates(subset=keys)[ids].reset_index(drop=True)
        for p in _PARAMS:
            sub = rec[rec["param"] == p]
            cells = {
                tuple(row[keys]): _interval(row["q50"], row["q05"], row["q95"]) for _, row in sub.iterrows()
            }
            table[f"{p} median [90%]"] = [cells.get(tuple(row[keys]), "") for _, row in table.iterrows()]
        return table
    level = fit.group_by
    if level is None:
        return None
    draws = {p: _plots.group_level_draws(fit.result, p, level) for p in _PARAMS}
    keys = list(dict.fromkeys(k for d in draws.values() for k in d))
    if not keys:
        return None
    table = pd.DataFrame({level: [g for g, _ in keys]})
    if any(extra for _, extra in keys):
        table["of"] = [extra or "" for _, extra in keys]
    for p in _PARAMS:
        cells = []
        for key in keys:
            d = draws[p].get(key)
            if d is None:  # e.g. B_recipe has no task dimension: the recipe's value
                d = draws[p].get((key[0], None))
            cells.append("" if d is None else _interval(*np.quantile(d, [0.5, 0.05, 0.95])))
        table[f"{p}_{level} median [90%]"] = cells
    return table


def _extra_predictions(pred: pd.DataFrame | None) -> pd.DataFrame | None:
    """Predictions at computes that were asked for but not observed (``--predict``)."""
    if pred is None or not {"run", "compute", "observed", "q05", "q50", "q95"} <= set(pred.columns):
        return None
    extra = pred[pred["observed"].isna()]
    if extra.empty:
        return None
    table = pd.DataFrame({"run": pd.unique(extra["run"].astype(str))})
    for c, grp in extra.groupby("compute", sort=True):
        cells = {
            str(r): _interval(q50, q05, q95) for r, q50, q05, q95 in grp[["run", "q50", "q05", "q95"]].values
        }
        table[f"reward at {_num(c, sig=4)} [90%]"] = table["run"].map(cells).fillna("")
    return table


# ---------------------------------------------------------------------- figures
@dataclass
class _Figure:
    key: str
    filename: str
    title: str
    caption: str
    png: bytes


def _figures(fit: _Fit) -> list[_Figure]:
    res, group_by = fit.result, fit.group_by
    names = res.run_names
    max_compute = None
    if fit.predictions is not None and "compute" in fit.predictions.columns:
        max_compute = float(fit.predictions["compute"].max())
    n_panels = len(set(map(str, res.dt["constant_data"]["recipe"].values))) if group_by else len(names)
    more = f" The first {_MAX_PANELS} of {n_panels} panels are shown." if n_panels > _MAX_PANELS else ""
    unit = "recipe, its runs overlaid" if group_by else "run"
    out = []

    fig = _plots.plot_curves(res, group_by=group_by, max_compute=max_compute, max_panels=_MAX_PANELS)
    out.append(
        _Figure(
            "curves",
            "report_curves.png",
            "Curves",
            f"One panel per {unit}: data (filled: in the likelihood; open: the transient before "
            "min_compute and held-out points after fit_until), posterior median curve (solid in the fit "
            "window, dotted beyond) and the 90% predictive band of a new evaluation." + more,
            _plots.png_bytes(fig, dpi=_DPI),
        )
    )
    forest_runs = names[:_MAX_FOREST_RUNS]
    fmore = (
        f" The first {_MAX_FOREST_RUNS} of {len(names)} runs are shown."
        if len(names) > _MAX_FOREST_RUNS
        else ""
    )
    fig = _plots.plot_forest(
        res, var_names=_PARAMS, group_by=group_by, runs=forest_runs, flag_runs=fit.not_converged
    )
    out.append(
        _Figure(
            "forest",
            "report_forest.png",
            "Forest plot",
            "Posterior median (dot), 50% (thick) and 90% (thin) intervals of A, B and C_mid for each run"
            + (", grouped by recipe" if group_by else "")
            + ". Runs marked † did not converge." * bool(fit.not_converged)
            + fmore,
            _plots.png_bytes(fig, dpi=_DPI),
        )
    )
    fig = _plots.plot_linearised(res, group_by=group_by, max_compute=max_compute, max_panels=_MAX_PANELS)
    out.append(
        _Figure(
            "linearised",
            "report_linearised.png",
            "Linearised view",
            "log((R - R0) / (A - R)) against compute on a log axis, with A at each run's posterior median: "
            "the sigmoid becomes a line of slope B that crosses zero at C_mid. Points curving away from the "
            "line show where the sigmoid does not describe the run." + more,
            _plots.png_bytes(fig, dpi=_DPI),
        )
    )
    ranked = runs_to_rank(fit.diagnostics)
    if ranked:
        more = len(fit.not_converged) - len(ranked)
        fig = _plots.plot_rank(res, ranked)
        out.append(
            _Figure(
                "rank",
                "report_rank.png",
                "Rank plots of the runs that did not converge",
                "ArviZ's rank plots: for each chain (colour), the distance of the empirical CDF of its "
                "draws' fractional ranks (among all chains) from the uniform one; a line leaving the grey "
                "99% envelope is a chain that disagrees with the others about that parameter. One column "
                "per run, highest R-hat first."
                + (f" {more} more runs did not converge (see Diagnostics)." if more > 0 else ""),
                _plots.png_bytes(fig, dpi=_DPI),
            )
        )
    return out


# ---------------------------------------------------------------------- HTML
_CSS = """
:root { color-scheme: light; }
body { margin: 0; background: #fff; color: #1b1b1b;
  font: 15px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; }
main { max-width: 1180px; margin: 0 auto; padding: 1.5rem 1.75rem 4rem; }
h1 { font-size: 1.65rem; margin: 0.6rem 0 0.2rem; }
h2 { font-size: 1.25rem; margin: 2.4rem 0 0.6rem; padding-bottom: 0.25rem; border-bottom: 1px solid #d9d9d9; }
p.meta { color: #555; margin-top: 0; }
p.note { color: #444; font-size: 0.92rem; }
.ok { color: #006b4f; font-weight: 600; }
.warn, .flag { color: #a63c00; font-weight: 600; }
.table-wrap { overflow-x: auto; margin: 0.5rem 0 1rem; }
table { border-collapse: collapse; font-size: 0.88rem; }
th, td { padding: 0.32rem 0.7rem; border-bottom: 1px solid #e4e4e4; text-align: left; vertical-align: top; }
thead th { background: #f1f3f5; border-bottom: 2px solid #cfd4da; white-space: nowrap; }
tbody tr:nth-child(even) td { background: #fafbfc; }
tbody tr.bad td { background: #fdebe5; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td.name { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: 0.85rem; }
table.settings th { background: none; border-bottom: 1px solid #e4e4e4; font-weight: 600; width: 11rem; }
figure { margin: 1rem 0 1.6rem; }
figure img { display: block; max-width: 100%; height: auto; border: 1px solid #eee; }
figure.forest img { max-width: min(100%, 980px); }
figcaption { font-size: 0.9rem; color: #444; margin-top: 0.4rem; max-width: 60rem; }
nav { font-size: 0.9rem; color: #555; }
nav a { color: #0b5cad; margin-right: 0.9rem; }
a { color: #0b5cad; }
ul.answers { list-style: none; padding: 0; margin: 0.4rem 0 0.8rem; max-width: 62rem; }
ul.answers li { margin: 0 0 0.55rem; padding: 0.45rem 0.8rem; border-left: 4px solid #006b4f;
  background: #f3f8f6; }
ul.answers li.warn-item { border-left-color: #a63c00; background: #fdf3ee; }
ul.answers .see { color: #555; font-size: 0.9rem; white-space: nowrap; }
footer { margin-top: 3rem; font-size: 0.8rem; color: #777; }
@media print { main { max-width: none; padding: 0; } h2 { break-after: avoid; }
  figure, tr { break-inside: avoid; } }
"""


def _e(x) -> str:
    return html.escape(str(x), quote=True)


def _is_numeric_column(df: pd.DataFrame, col: str) -> bool:
    return pd.api.types.is_numeric_dtype(df[col]) and not pd.api.types.is_bool_dtype(df[col])


def _html_table(
    df: pd.DataFrame,
    *,
    bad_rows: Sequence[bool] | None = None,
    flag_columns: Sequence[str] = (),
    name_columns: Sequence[str] = ("run", "a", "b", "recipe"),
    css_class: str = "",
) -> str:
    cols = list(df.columns)
    numeric = {c for c in cols if _is_numeric_column(df, c)}
    head = "".join(f"<th>{_e(c)}</th>" for c in cols)
    body = []
    for k, row in enumerate(df.itertuples(index=False, name=None)):
        tr = ' class="bad"' if bad_rows is not None and bad_rows[k] else ""
        cells = []
        for c, v in zip(cols, row, strict=True):
            text = _cell(c, v)
            cls = []
            if c in numeric or c.endswith(_INTERVAL):
                cls.append("num")
            if c in name_columns:
                cls.append("name")
            if c in flag_columns and text and text != "yes":
                cls.append("flag")
            attr = f' class="{" ".join(cls)}"' if cls else ""
            cells.append(f"<td{attr}>{_e(text)}</td>")
        body.append(f"<tr{tr}>{''.join(cells)}</tr>")
    klass = f' class="{_e(css_class)}"' if css_class else ""
    return (
        f'<div class="table-wrap"><table{klass}><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table></div>"
    )


def _bad_diag_rows(diag: pd.DataFrame) -> list[bool]:
    if "converged" not in diag.columns:
        return [False] * len(diag)
    return [not _truthy(v) for v in diag["converged"]]


def _answers_of(fit: _Fit) -> list[Answer]:
    return answers(
        fit.result,
        fit.diagnostics,
        predictions=fit.predictions,
        comparisons=fit.comparisons,
        sampler=fit.sampler,
    )


def _anchors(fit: _Fit, figures: list[_Figure]) -> list[tuple[str, str]]:
    """``(anchor, title)`` of the page's sections, in page order."""
    out = [("answers", "Answers"), ("settings", "Settings"), ("runs", "Runs")]
    if _extra_predictions(fit.predictions) is not None:
        out.append(("forecasts", "Forecasts"))
    out += [(f.key, f.title) for f in figures if f.key != "rank"]
    out.append(("diagnostics", "Diagnostics"))
    out += [(f.key, "Rank plots") for f in figures if f.key == "rank"]
    if fit.comparisons is not None:
        out.append(("comparisons", "Comparisons"))
    return out


def _answers_html(items: list[Answer], present: set[str]) -> list[str]:
    lis = []
    for a in items:
        links = [f'<a href="#{_e(anchor)}">{_e(label)}</a>' for label, anchor in a.links if anchor in present]
        see = f' <span class="see">(see {", ".join(links)})</span>' if links else ""
        cls = "warn-item" if a.warn else "ok-item"
        lis.append(
            f'<li class="{cls}" data-answer="{_e(a.key)}"><strong>{_e(a.lead)}</strong> '
            f"{_e(a.text)}{see}</li>"
        )
    return ['<section id="answers"><h2>Answers</h2>', f'<ul class="answers">{"".join(lis)}</ul></section>']


def _render_html(fit: _Fit, figures: list[_Figure], title: str) -> str:
    res = fit.result
    settings = res.settings
    anchors = _anchors(fit, figures)
    present = {a for a, _ in anchors}
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{_e(title)}</title><style>{_CSS}</style></head><body><main>",
        f"<h1>{_e(title)}</h1>",
        f'<p class="meta">{_e(_meta_line(fit))}</p>',
        "<nav>" + "".join(f'<a href="#{_e(a)}">{_e(t)}</a>' for a, t in anchors) + "</nav>",
    ]
    parts += _answers_html(_answers_of(fit), present)
    parts += [f'<p class="note">{_e(note)}</p>' for note in fit.notes]

    rows = "".join(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in _settings_rows(settings, res))
    parts += [
        '<h2 id="settings">Settings</h2>',
        f'<div class="table-wrap"><table class="settings">{rows}</table></div>',
    ]

    per_run = _per_run_table(fit)
    parts += [
        '<h2 id="runs">Runs</h2>',
        '<p class="note">Posterior median and central 90% interval of each parameter. '
        "A: the asymptote (ceiling); B: the exponent (efficiency); C_mid: the compute at half of "
        "the gain.</p>",
        _html_table(per_run, bad_rows=[bool(f) for f in per_run["flags"]], flag_columns=("flags",)),
    ]
    group_table = _group_level_table(fit)
    if group_table is not None:
        parts += [
            "<h3>Recipe level</h3>",
            '<p class="note">The hierarchical model\'s recipe-level parameters: median and 90% interval.</p>',
            _html_table(group_table, name_columns=("recipe",)),
        ]
    extra = _extra_predictions(fit.predictions)
    if extra is not None:
        parts += [
            f'<h3 id="forecasts">{_FORECASTS}</h3>',
            '<p class="note">Median and 90% predictive interval of a new evaluation.</p>',
            _html_table(extra),
        ]
    parts += [_figure_html(f) for f in figures if f.key != "rank"]
    parts += [
        '<h2 id="diagnostics">Diagnostics</h2>',
        '<p class="note">A run has converged when every parameter has R-hat &le; 1.01 and bulk ESS '
        "&ge; 100 and no transition diverged; rows that did not are highlighted.</p>",
        _html_table(fit.diagnostics, bad_rows=_bad_diag_rows(fit.diagnostics), flag_columns=("converged",)),
    ]
    if fit.sampler is not None:
        parts += [
            "<h3>Sampler diagnostics by variable</h3>",
            _html_table(fit.sampler, bad_rows=_bad_diag_rows(fit.sampler), flag_columns=("converged",)),
        ]
    parts += [_figure_html(f) for f in figures if f.key == "rank"]
    if fit.comparisons is not None:
        parts += [
            '<h2 id="comparisons">Comparisons</h2>',
            '<p class="note">Posterior differences between runs or recipes (a - b): mean and 90% interval, '
            "P(a &gt; b) and the probability that the difference lies within the practical margin.</p>",
            _html_table(fit.comparisons, flag_columns=()),
        ]
    parts.append(f"<footer>{_e(_footer(fit))}</footer></main></body></html>")
    return "\n".join(parts) + "\n"


def _figure_html(f: _Figure) -> str:
    b64 = base64.b64encode(f.png).decode("ascii")
    return (
        f'<h2 id="{_e(f.key)}">{_e(f.title)}</h2>\n'
        f'<figure class="{_e(f.key)}"><img src="data:image/png;base64,{b64}" alt="{_e(f.title)}">'
        f"<figcaption>{_e(f.caption)}</figcaption></figure>"
    )


def _meta_line(fit: _Fit) -> str:
    res = fit.result
    s = res.settings
    n_draws = res.dt["posterior"].sizes.get("chain", 0) * res.dt["posterior"].sizes.get("draw", 0)
    bits = [f"{len(res.run_names)} runs"]
    if fit.group_by:
        bits.append(f"{len(set(map(str, res.dt['constant_data']['recipe'].values)))} recipes")
    bits.append(f"{n_draws:,} posterior draws per run")
    if s.get("source"):
        bits.append(f"data: {s['source']}")
    return " · ".join(bits)


def _footer(fit: _Fit) -> str:
    version = fit.result.settings.get("version", "?")
    when = _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    return f"bayes_scalerl {version} · fit folder {fit.source_dir.name} · report written {when}"


# ---------------------------------------------------------------------- Markdown
_MD_SPECIAL = re.compile(r"[\\`*\[\]<>|#~&$]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])")
_MD_SPECIAL_NO_BRACKETS = re.compile(r"[\\`*<>|#~&$]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])")
_INTERVAL = "[90%]"


_FORECASTS = "Predicted reward at larger budgets"


def _slug(heading: str) -> str:
    """The anchor GitHub and most Markdown viewers give a heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _md(text, *, brackets: bool = True) -> str:
    """Text that Markdown shows verbatim, also inside a table cell.

    Markup characters get a backslash; ``_`` only where it could start or end emphasis
    (``fit_until`` stays readable); ``[`` and ``]`` are left alone when ``brackets`` is
    false (the intervals this module formats).
    """
    pattern = _MD_SPECIAL if brackets else _MD_SPECIAL_NO_BRACKETS
    return pattern.sub(lambda m: "\\" + m.group(0), str(text).replace("\n", " "))


def _md_table(df: pd.DataFrame) -> str:
    cols = list(df.columns)
    numeric = [_is_numeric_column(df, c) or c.endswith(_INTERVAL) for c in cols]
    ours = [c.endswith(_INTERVAL) for c in cols]  # formatted here: numbers and brackets only
    lines = [
        "| " + " | ".join(_md(c, brackets=not o) for c, o in zip(cols, ours, strict=True)) + " |",
        "|" + "|".join("---:" if num else "---" for num in numeric) + "|",
    ]
    for row in df.itertuples(index=False, name=None):
        cells = (_md(_cell(c, v), brackets=not o) for c, v, o in zip(cols, row, ours, strict=True))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _render_md(fit: _Fit, figures: list[_Figure], title: str) -> str:
    res = fit.result
    out = [f"# {_md(title)}", "", _md(_meta_line(fit)), "", "## Answers", ""]
    headings = {f.key: f.title for f in figures}
    headings.update(
        settings="Settings",
        runs="Runs",
        forecasts=_FORECASTS,
        diagnostics="Diagnostics",
        comparisons="Comparisons",
    )
    present = {a for a, _ in _anchors(fit, figures)}
    for a in _answers_of(fit):
        links = [
            f"[{label}](#{_slug(headings[k])})" for label, k in a.links if k in present and k in headings
        ]
        see = f" (see {', '.join(links)})" if links else ""
        out.append(f"- **{_md(a.lead)}** {_md(a.text)}{see}")
    out.append("")
    out += [f"_{_md(note)}_" for note in fit.notes]
    out += ["## Settings", ""]
    out += [f"- **{_md(k)}**: {_md(v)}" for k, v in _settings_rows(res.settings, res)]
    out += [
        "",
        "## Runs",
        "",
        "Posterior median and central 90% interval.",
        "",
        _md_table(_per_run_table(fit)),
        "",
    ]
    group_table = _group_level_table(fit)
    if group_table is not None:
        out += ["### Recipe level", "", _md_table(group_table), ""]
    extra = _extra_predictions(fit.predictions)
    if extra is not None:
        out += [f"### {_FORECASTS}", "", _md_table(extra), ""]
    out += ["## Figures", ""]
    for f in figures:
        out += [f"### {_md(f.title)}", "", f"![{_md(f.title)}]({f.filename})", "", _md(f.caption), ""]
    out += ["## Diagnostics", "", _md_table(fit.diagnostics), ""]
    if fit.sampler is not None:
        out += ["### Sampler diagnostics by variable", "", _md_table(fit.sampler), ""]
    if fit.comparisons is not None:
        out += ["## Comparisons", "", _md_table(fit.comparisons), ""]
    out += [f"_{_md(_footer(fit))}_", ""]
    return "\n".join(out)


# ---------------------------------------------------------------------- entry point
def write_report(fitdir: str | os.PathLike, *, out: str | os.PathLike | None = None) -> dict[str, Path]:
    """Write ``report.html`` and ``report.md`` (with its PNG figures) for a fit's output folder.

    Parameters
    ----------
    fitdir : path
        A folder written by ``bayes-scalerl fit`` or :func:`~bayes_scalerl.write_fit_folder`:
        it needs ``posterior.nc``; ``summary.csv`` and ``diagnostics.csv`` are read when
        present (recomputed otherwise; an independent fit's identifiability columns are
        added when ``diagnostics.csv`` lacks them), ``predictions.csv`` adds predictions at
        unobserved budgets and ``comparisons.csv`` (``a, b, param, diff_mean, diff_q05, diff_q95, p_a_greater,
        p_in_rope, verdict``, ...) a comparisons table; a hierarchical fit's ``recipes.csv``
        and ``sampler.csv`` add recipe-level and per-variable tables. Every column of
        ``diagnostics.csv``, ``comparisons.csv`` and ``sampler.csv`` is shown.
    out : path, optional
        Folder to write into (default ``fitdir``). Other files in it are left alone.

    Returns
    -------
    dict of str to pathlib.Path
        The written files under the keys ``"html"``, ``"markdown"``, ``"curves"``,
        ``"forest"``, ``"linearised"`` and, when a run did not converge, ``"rank"``.

    Raises
    ------
    FileNotFoundError
        If ``fitdir`` has no ``posterior.nc``.

    Notes
    -----
    Every file is first written to a temporary folder beside ``out`` and moved into place
    only when all of them are done: if anything fails, an earlier report stays as it was.

    Examples
    --------
    >>> paths = write_report("fit-out")  # doctest: +SKIP
    >>> paths["html"]                    # doctest: +SKIP
    PosixPath('fit-out/report.html')
    """
    with runtime.x64():
        return _write_report(Path(fitdir), out)


def _write_report(fitdir: Path, out: str | os.PathLike | None) -> dict[str, Path]:
    out = Path(out) if out is not None else fitdir
    fit = _load(fitdir)
    figures = _figures(fit)
    source = fit.result.settings.get("source")
    title = "ScaleRL fit report" + (f": {source}" if source else "")
    page = _render_html(fit, figures, title)
    markdown = _render_md(fit, figures, title)
    paths = {"html": out / "report.html", "markdown": out / "report.md"}
    with atomic_output_dir(out) as tmp:
        (tmp / "report.html").write_text(page, encoding="utf-8")
        (tmp / "report.md").write_text(markdown, encoding="utf-8")
        for f in figures:
            (tmp / f.filename).write_bytes(f.png)
            paths[f.key] = out / f.filename
    return paths
