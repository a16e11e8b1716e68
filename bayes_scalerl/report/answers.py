"""The answers a fit's report leads with, as plain statements with links.

A reader of a fit wants four things before any table: which recipe is best at the budget
they care about and how sure that is, which runs' ceilings ``A`` the data identify and
which are guesses, the forecast at the budgets asked for (``--predict``), and what failed
its diagnostics. :func:`answers` states each from the fit and its output tables; every
statement names the section (table or figure) of the report behind it. The renderers in
:mod:`~bayes_scalerl.report.report` turn them into HTML and Markdown.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..analyses.comparisons import estimate_seed_sd, recipe_draws
from ..analyses.identify import ALLOWANCE_NOTE
from ..posterior.results import FitResult

__all__ = ["Answer", "answers", "forecast_budget", "runs_to_rank", "truthy", "MAX_NAMED", "MAX_RANKED"]

#: Runs named in one statement, at most (the rest are counted).
MAX_NAMED = 8
#: Runs shown in the rank plots, at most (those with the highest R-hat).
MAX_RANKED = 6


@dataclass(frozen=True)
class Answer:
    """One statement of the report's answers.

    Attributes
    ----------
    key : str
        ``"best"``, ``"ceilings"``, ``"forecast"`` or ``"diagnostics"``.
    lead : str
        The answer in a few words (shown in bold).
    text : str
        The details: numbers with their 90% intervals, the runs concerned.
    links : tuple of (str, str)
        ``(label, anchor)`` of the report sections behind the statement.
    warn : bool
        Whether the statement is a warning (something the reader must look at).
    """

    key: str
    lead: str
    text: str
    links: tuple[tuple[str, str], ...]
    warn: bool = False


def _fmt(x: float) -> str:
    """A reward to 3 decimals, a compute with thousands separators."""
    x = float(x)
    if not math.isfinite(x) or abs(x) < 10:
        return f"{x:.3f}"
    return f"{x:,.0f}" if abs(x) >= 1000 else f"{x:.4g}"


def _names(names: Sequence[str]) -> str:
    names = list(names)
    shown = ", ".join(names[:MAX_NAMED])
    return shown + (f" and {len(names) - MAX_NAMED} more" if len(names) > MAX_NAMED else "")


def truthy(v) -> bool:
    """A CSV cell read as a flag: ``True``, ``"true"``, ``"1"``, ``"yes"``; NaN and blanks are false."""
    if isinstance(v, str):
        return v.strip().lower() in ("true", "1", "yes")
    try:
        return bool(v) and not (isinstance(v, float) and math.isnan(v))
    except (TypeError, ValueError):
        return False


def forecast_budget(predictions: pd.DataFrame | None) -> float | None:
    """The largest compute predicted at that no run observed (``--predict``), or None."""
    if predictions is None or not {"compute", "observed"} <= set(predictions.columns):
        return None
    extra = predictions.loc[predictions["observed"].isna(), "compute"]
    return float(extra.max()) if len(extra) else None


def _best(result: FitResult, budget: float | None, has_comparisons: bool) -> Answer | None:
    links = (("comparisons", "comparisons"),) if has_comparisons else ()
    links += (("forecasts", "forecasts"),) if budget is not None else (("forest plot", "forest"),)
    try:
        if budget is not None:
            names, d = recipe_draws(result, "reward", budget=budget)
        else:
            names, d = recipe_draws(result, "A")
    except ValueError as err:  # several tasks: the user picks one
        return Answer(
            "best", "Best recipe: choose a task.", f"{err}; use 'bayes-scalerl compare --task'.", links
        )
    except KeyError as err:  # recipe-level draws that do not match the runs' labels
        return Answer(
            "best", "Best recipe: not ranked.", f"The recipe-level draws cannot be read: {err}.", links
        )
    if len(names) < 2:
        return None
    p = np.bincount(np.argmax(d, axis=0), minlength=len(names)) / d.shape[1]
    order = np.argsort(-p, kind="stable")
    top = int(order[0])
    lo, med, hi = np.quantile(d[top], [0.05, 0.5, 0.95])
    what = f"expected reward at compute {_fmt(budget)}" if budget is not None else "ceiling A"
    runners = ", ".join(f"{names[k]} {p[k]:.2f}" for k in order[1:4])
    if p[top] >= 0.9:
        lead = f"Best {what}: {names[top]} (P = {p[top]:.2f})."
    elif p[top] >= 0.5:
        lead = f"Best {what}: probably {names[top]} (P = {p[top]:.2f})."
    else:
        lead = f"Best {what}: no recipe is clearly best (most likely {names[top]}, P = {p[top]:.2f})."
    text = (
        f"P(best) = {p[top]:.2f} among {len(names)} recipes; its {what} {_fmt(med)} "
        f"[90%: {_fmt(lo)}, {_fmt(hi)}]. Next: {runners}."
    )
    if "A_recipe" not in result.dt["posterior"].data_vars:
        tau = estimate_seed_sd(result, "reward" if budget is not None else "A", budget=budget)
        text += (
            f" An independent fit averages each recipe's runs and adds a seed-to-seed sd of {_fmt(tau)} "
            "(from the fit's repeat seeds and the ScaleRL paper's three runs); the hierarchical model "
            "(--model hierarchical) estimates that spread for every parameter."
        )
    if budget is None:
        text += " No --predict budget was asked, so the recipes are ranked by their ceilings."
    return Answer("best", lead, text, links)


def _ceilings(diagnostics: pd.DataFrame, n_runs: int) -> Answer:
    links = (("runs", "runs"), ("diagnostics", "diagnostics"))
    if "a_identified" not in diagnostics.columns or "run" not in diagnostics.columns:
        return Answer(
            "ceilings",
            "Ceilings: not assessed.",
            "This fit's diagnostics have no identifiability columns "
            "(they are computed for independent fits).",
            links,
        )
    d = diagnostics.drop_duplicates("run")
    ident = d["a_identified"].map(truthy).to_numpy()
    good, weak = d.loc[ident, "run"].astype(str), d.loc[~ident, "run"].astype(str)
    lead = f"Ceilings: {len(good)} of {len(d)} identified."
    parts = []
    if len(good):
        parts.append(
            f"Identified (90% interval of A at most 0.10 wide, and not set by its prior): {_names(good)}."
        )
    if len(weak):
        parts.append(
            f"Guesses at this compute: {_names(weak)}; their 90% interval of A is wider than 0.10 "
            "or follows the prior."
        )
        wcol = "a_width90_data" if "a_width90_data" in d.columns else "a_width90"  # the rule's
        if wcol in d.columns:
            w = pd.to_numeric(d.loc[~ident, wcol], errors="coerce")
            if w.notna().any():
                parts.append(
                    f"Their 90% widths of A: median {_fmt(float(w.median()))}, up to {_fmt(float(w.max()))}."
                )
        if "a_flag" in d.columns:
            shape = d.loc[~ident, "a_flag"].astype(str).str.contains(ALLOWANCE_NOTE, regex=False)
            if shape.any():
                parts.append(
                    "Of these, the data pin the sigmoid's own ceiling within 0.10 for "
                    f"{_names(d.loc[~ident, 'run'].astype(str)[shape.to_numpy()])}; the rest of their width "
                    "is the allowance for the curve departing from the sigmoid beyond the data "
                    "(a_width90_sigmoid; a batch of a few dozen runs or fewer cannot rule out for "
                    "one run a departure none of its runs showed)."
                )
        parts.append("'bayes-scalerl identify' tells from what compute on A would be identified.")
    return Answer("ceilings", lead, " ".join(parts), links, warn=bool(len(weak)))


def _forecast(predictions: pd.DataFrame | None) -> Answer:
    links = (("curves", "curves"),)
    if predictions is None or not {"run", "compute", "observed", "q05", "q50", "q95"} <= set(
        predictions.columns
    ):
        return Answer(
            "forecast",
            "Forecasts: none asked.",
            "Fit with --predict C1,C2 to forecast larger budgets.",
            links,
        )
    extra = predictions[predictions["observed"].isna()]
    if extra.empty:
        return Answer(
            "forecast",
            "Forecasts: none asked.",
            "Every predicted compute was observed; fit with --predict C1,C2 to forecast larger budgets.",
            links,
        )
    parts = []
    for c, grp in extra.groupby("compute", sort=True):
        grp = grp.reset_index(drop=True)
        hi_row = grp.loc[grp["q50"].idxmax()]
        width = grp["q95"] - grp["q05"]
        parts.append(
            f"At compute {_fmt(float(c))}: highest median {hi_row['run']} {_fmt(hi_row['q50'])} "
            f"[90%: {_fmt(hi_row['q05'])}, {_fmt(hi_row['q95'])}]"
            + (
                f"; medians over {len(grp)} runs {_fmt(grp['q50'].min())} to {_fmt(grp['q50'].max())}"
                if len(grp) > 1
                else ""
            )
            + f"; 90% bands {_fmt(float(width.min()))} to {_fmt(float(width.max()))} wide."
        )
    links = (("forecasts", "forecasts"), *links)
    budgets = ", ".join(_fmt(float(c)) for c in sorted(extra["compute"].unique()))
    return Answer(
        "forecast",
        f"Forecasts at {budgets}.",
        " ".join(parts) + " Each band is a new evaluation's 90% predictive interval.",
        links,
    )


def runs_to_rank(diagnostics: pd.DataFrame) -> list[str]:
    """Runs that failed a sampler diagnostic, highest R-hat first, at most :data:`MAX_RANKED`."""
    if "converged" not in diagnostics.columns or "run" not in diagnostics.columns:
        return []
    d = diagnostics.drop_duplicates("run")
    bad = d[~d["converged"].map(truthy)]
    if "r_hat_max" in bad.columns:
        bad = bad.assign(_r=pd.to_numeric(bad["r_hat_max"], errors="coerce").fillna(np.inf))
        bad = bad.sort_values("_r", ascending=False, kind="stable")
    return bad["run"].astype(str).tolist()[:MAX_RANKED]


def _diagnostics(diagnostics: pd.DataFrame, sampler: pd.DataFrame | None, n_runs: int) -> Answer:
    links = [("diagnostics", "diagnostics")]
    parts, warn = [], False
    bad = []
    if "converged" in diagnostics.columns and "run" in diagnostics.columns:
        d = diagnostics.drop_duplicates("run")
        bad = d.loc[~d["converged"].map(truthy), "run"].astype(str).tolist()
    if bad:
        warn = True
        parts.append(
            f"{len(bad)} of {n_runs} runs did not converge (R-hat above 1.01, bulk ESS below 100 "
            f"or divergent transitions): {_names(bad)}. Treat their intervals with care; the rank "
            "plots show the chains that disagree."
        )
        links.append(("rank plots", "rank"))
    else:
        parts.append(
            f"All {n_runs} runs converged (R-hat at most 1.01, bulk ESS at least 100, no divergences)."
        )
    if sampler is not None and {"converged"} <= set(sampler.columns):
        failed = sampler[~sampler["converged"].map(truthy)]
        label = next((c for c in ("variable", "param", "name") if c in sampler.columns), None)
        if len(failed) and label is not None:
            warn = True
            parts.append(
                f"Not converged at the recipe or population level: {_names(failed[label].astype(str))}."
            )
    if "falls" in diagnostics.columns:
        d = diagnostics.drop_duplicates("run")
        falls = d.loc[d["falls"].map(truthy), "run"].astype(str).tolist()
        if falls:
            warn = True
            parts.append(
                f"Reward falls during training in {_names(falls)}: the ScaleRL curve only rises and "
                "cannot describe these runs; look at them, or fit them up to their peak (--fit-until)."
            )
    lead = "Diagnostics: something to look at." if warn else "Diagnostics: all passed."
    return Answer("diagnostics", lead, " ".join(parts), tuple(links), warn=warn)


def answers(
    result: FitResult,
    diagnostics: pd.DataFrame,
    *,
    predictions: pd.DataFrame | None = None,
    comparisons: pd.DataFrame | None = None,
    sampler: pd.DataFrame | None = None,
) -> list[Answer]:
    """The statements a report leads with, in order: best recipe, ceilings, forecasts, diagnostics.

    Parameters
    ----------
    result : FitResult
    diagnostics : pandas.DataFrame
        The fit's ``diagnostics.csv`` (one row per run; ``converged``, ``r_hat_max``,
        ``a_identified``, ``a_width90``, ``falls`` are read when present).
    predictions, comparisons, sampler : pandas.DataFrame, optional
        The fit folder's ``predictions.csv``, ``comparisons.csv`` and ``sampler.csv``.

    Returns
    -------
    list of Answer
        The best-recipe statement is left out when the fit has a single recipe (or run).
    """
    n_runs = len(result.run_names)
    budget = forecast_budget(predictions)
    out = [_best(result, budget, comparisons is not None)]
    out += [
        _ceilings(diagnostics, n_runs),
        _forecast(predictions),
        _diagnostics(diagnostics, sampler, n_runs),
    ]
    return [a for a in out if a is not None]
