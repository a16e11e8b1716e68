"""Backtests on the public DAPO runs: the default beside version 0.1's exact sigmoid.

Reads every ``val-core/*/acc/mean@1`` metric of the verl logs in ``--data`` (the shared
``dapo-metrics`` folder, read in place: never copied into this repository; 42 curves of 20
runs, GPU-hours = wall hours x ``--gpus``), fits each curve on the first ``fraction`` of its
own compute with :func:`bayes_scalerl.backtest` and scores every later evaluation:
``bayes`` (the fit's predictive; by default AR(1) noise at the batch's correlation with the
calibrated discrepancy), ``gaussian`` (version 0.1's default, the exact sigmoid with
independent Gaussian noise, fitted beside it), the paper's least-squares fit (``ls``) and its
residual bootstrap (``boot``).

``--digitise N`` scores the curves as a paper's figure shows them instead, a stand-in for
the digitised figures among the team's held-out sets: each curve smoothed (an exponential
moving average over ``--smooth`` evaluations, as W&B's plots smooth), read at the
evaluations nearest to ``N`` computes evenly spaced in log compute (a log-x axis, so
compute 0 is not on it) and rounded to 0.001.

Usage::

    python benchmarks/dapo_backtest.py --data ../shared/data/dapo-metrics \\
        --fractions 0.25,0.5 --out benchmarks/results/dapo-backtest.md
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import shlex
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

import bayes_scalerl as bs

sys.path.insert(0, str(Path(__file__).resolve().parent))
from environment import machine_line, versions_line, write_results  # noqa: E402

__all__ = ["digitised", "main", "run"]

METRIC = "val-core/*/acc/mean@1"
COLUMNS = ["method", "n_runs", "n_points", "coverage50", "coverage90", "width90", "crps", "median_abs_error"]


def digitised(runs: bs.Runs, points: int, span: float = 5.0) -> bs.Runs:
    """Each curve as a figure shows it: smoothed, read at ``points`` log-spaced computes, rounded.

    The reward is an exponential moving average over ``span`` evaluations (in their order),
    kept at the evaluations nearest to ``points`` computes evenly spaced in log compute
    between the first evaluation after compute 0 and the last (duplicates once), rounded to
    0.001. Evaluations at compute 0 are dropped: a log axis does not show them.
    """
    parts = []
    for _, d in runs.table.groupby("run", sort=False):
        d = d[d["compute"] > 0].sort_values("compute")
        if d.empty:
            continue
        c = d["compute"].to_numpy(float)
        grid = np.geomspace(c[0], c[-1], int(points))
        near = np.abs(np.log(c)[None, :] - np.log(grid)[:, None]).argmin(axis=1)
        smooth = d["reward"].ewm(span=span).mean().round(3)
        parts.append(d.assign(reward=smooth).iloc[np.unique(near)])
    return dataclasses.replace(runs, table=pd.concat(parts, ignore_index=True))


def run(
    data: Path,
    fractions: Sequence[float],
    gpus: float,
    seed: int,
    priors: bs.Priors | None = None,
    discrepancy: bs.Discrepancy | None = None,
    metric: Sequence[str] = (METRIC,),
    model: str = "independent",
    digitise: int | None = None,
    smooth: float = 5.0,
) -> pd.DataFrame:
    """Scores of every method at every fraction (one row per fraction and method).

    ``model="hierarchical"`` pools every curve as its own recipe (one population: the
    verl reader's recipe is the curve, but one training run's several metrics share it).
    ``digitise``: score the curves as :func:`digitised` reads them (``smooth`` its span).
    """
    runs = bs.read_any(data, format="verl", metric=list(metric), gpus=gpus)
    if digitise is not None:
        runs = digitised(runs, digitise, smooth)
    if model == "hierarchical":
        table = runs.table.drop(columns=[c for c in ("training_run",) if c in runs.table.columns])
        runs = dataclasses.replace(runs, table=table.assign(recipe=table["run"]))
    rows, by_task, identified, refitted, converged, chains = [], [], [], [], [], []
    kw = {"progress": False, "model": model} | ({"priors": priors} if priors is not None else {})
    if discrepancy is not None:
        kw["discrepancy"] = discrepancy
    for f in fractions:
        t0 = time.perf_counter()
        bt = bs.backtest(runs, fraction=f, seed=seed, fit_kwargs=kw)
        took = time.perf_counter() - t0
        s = bt.scores.assign(fraction=f, seconds=took)
        rows.append(s)
        by_task.append(_by_task(bt.points).assign(fraction=f))
        identified.append(_identified(bt).assign(fraction=f))
        refitted.append(_refitted(bt).assign(fraction=f))
        diag = bt.fit.diagnostics()
        converged.append((f, int(diag["converged"].sum()), len(diag)))
        chains.append(bt.by_chain().assign(fraction=f))
    out = pd.concat(rows, ignore_index=True)
    out.attrs["by_task"] = pd.concat(by_task, ignore_index=True)
    out.attrs["identified"] = pd.concat(identified, ignore_index=True)
    out.attrs["refitted"] = pd.concat(refitted, ignore_index=True)
    out.attrs["converged"] = converged
    out.attrs["by_chain"] = pd.concat(chains, ignore_index=True)
    return out


def _identified(bt: bs.Backtest) -> pd.DataFrame:
    """The ``bayes`` band's coverage on runs whose ``A`` was called identified at the cut, and on the rest.

    The issue's real run was called identified while its later evaluations still rose
    beyond the interval: an identified ceiling should be as well calibrated as any other.
    """
    ident = bs.identifiability(bt.fit).set_index("run")["a_identified"]
    return _split(bt, ident, ("A identified", "not identified"))


def _refitted(bt: bs.Backtest) -> pd.DataFrame:
    """The ``bayes`` band on runs with a leave-future-out refit of their own, and on the rest.

    A run whose window is too short for the discrepancy's refit draws its scales from the
    batch's distribution; these are also the runs with the fewest points.
    """
    cd = bt.fit.dt["constant_data"]
    if "discrepancy_own" not in cd:
        return pd.DataFrame(columns=["runs", "n_runs", "n_points", "coverage90", "crps"])
    own = pd.Series(cd["discrepancy_own"].values.astype(bool), index=list(bt.fit.run_names))
    return _split(bt, own, ("own refit", "batch's scales"))


def _split(bt: bs.Backtest, flag: pd.Series, labels: tuple[str, str]) -> pd.DataFrame:
    """Coverage and CRPS of the ``bayes`` band on the runs with ``flag`` true, then false."""
    pts = bt.points[bt.points["method"] == "bayes"]
    called = pts["run"].map(flag).fillna(False).astype(bool)
    rows = []
    for label, sel in ((labels[0], called), (labels[1], ~called)):
        p = pts[sel]
        rows.append(
            {
                "runs": label,
                "n_runs": p["run"].nunique(),
                "n_points": len(p),
                "coverage90": float(p["covered90"].astype(float).mean()) if len(p) else float("nan"),
                "crps": float(p["crps"].mean()) if len(p) else float("nan"),
            }
        )
    return pd.DataFrame(rows)


def _by_task(points: pd.DataFrame) -> pd.DataFrame:
    """90% coverage and CRPS of ``bayes`` and ``gaussian`` per benchmark (a metric's second part)."""
    pts = points[points["method"].isin(["bayes", "gaussian"])]
    task = pts["task"].str.split("/").str[1] if "task" in pts.columns else pd.Series("all", index=pts.index)
    pts = pts.assign(task=task.fillna("all"), covered90=pts["covered90"].astype(float))
    g = pts.groupby(["task", "method"]).agg(
        n_runs=("run", "nunique"),
        n_points=("run", "size"),
        coverage90=("covered90", "mean"),
        crps=("crps", "mean"),
    )
    g = g.unstack("method")
    g.columns = [f"{stat}_{method}" for stat, method in g.columns]
    return g.reset_index()


def _split_section(title: str, df: pd.DataFrame) -> list[str]:
    """A table of :func:`_split`'s rows (all fractions) under ``title``."""
    lines = ["", title, "", "| fraction | runs | curves | points | coverage90 | CRPS |", "|---" * 6 + "|"]
    for _, r in df.iterrows():
        lines.append(
            f"| {r['fraction']:g} | {r['runs']} | {r['n_runs']} | {r['n_points']} | "
            + ("- | - |" if r["n_points"] == 0 else f"{r['coverage90']:.3f} | {r['crps']:.4f} |")
        )
    return lines


def _table(df: pd.DataFrame) -> list[str]:
    cols = ["fraction", *COLUMNS]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for _, r in df.iterrows():
        cells = []
        for c in cols:
            v = r[c]
            cells.append(
                "-"
                if isinstance(v, float) and v != v
                else (f"{v:.4f}" if isinstance(v, float) and c not in ("fraction",) else f"{v}")
            )
        lines.append("| " + " | ".join(cells) + " |")
    return lines


_FROM_BATCH = {"yes": True, "no": False, "ceiling": "ceiling"}


def main(argv: Sequence[str] | None = None) -> pd.DataFrame:
    argv = list(sys.argv[1:] if argv is None else argv)
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    shared = Path(__file__).resolve().parents[2] / "shared" / "data" / "dapo-metrics"
    p.add_argument("--data", type=Path, default=shared, help="folder of verl logs (read in place)")
    p.add_argument("--fractions", default="0.25,0.5")
    p.add_argument("--gpus", type=float, default=4.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--likelihood", default="ar1", help="noise model of the `bayes` fit (default ar1)")
    p.add_argument(
        "--rho",
        default="auto",
        help="with --likelihood ar1: rho fixed at this value, 'auto' (default), 'reml' or 'sampled'",
    )
    p.add_argument(
        "--r0",
        choices=("first", "fitted"),
        default="first",
        help="R0 of the `bayes` fit: the first evaluation (default) or a parameter",
    )
    p.add_argument(
        "--ratio",
        default=None,
        help="the discrepancy's refit ratio(s), comma-separated (default: bs.Discrepancy()'s)",
    )
    p.add_argument(
        "--decades",
        type=float,
        default=None,
        help="the discrepancy's horizon lam in decades of compute (default: bs.Discrepancy()'s, 2)",
    )
    p.add_argument(
        "--per-run",
        choices=("yes", "no"),
        default=None,
        help="draw each run's discrepancy scales from its own refit's errors (default: bs.Discrepancy()'s)",
    )
    p.add_argument(
        "--pooled-refit",
        choices=("yes", "no"),
        default=None,
        help="with --model hierarchical, the discrepancy's refit pooled too (default: bs.Discrepancy()'s)",
    )
    p.add_argument(
        "--metric",
        action="append",
        default=None,
        help=f"metric pattern(s) to read, repeatable (default {METRIC!r}, the issue's 42 curves)",
    )
    p.add_argument(
        "--model",
        choices=("independent", "hierarchical"),
        default="independent",
        help="the `bayes` fit's model (hierarchical: every curve its own recipe, pooled as one population)",
    )
    p.add_argument(
        "--digitise",
        type=int,
        default=None,
        metavar="N",
        help="score each curve as a paper's figure shows it: smoothed, read at N log-spaced computes",
    )
    p.add_argument("--smooth", type=float, default=5.0, help="with --digitise: the moving average's span (5)")
    p.add_argument(
        "--from-batch",
        choices=("yes", "no", "ceiling"),
        default=None,
        help="priors of B and C_mid (ceiling: and A) learnt from the batch (bs.Priors(from_batch=...)); "
        "no: the fixed priors; default bs.Priors()'s (ceiling from 2026-12-07, the fixed ones before)",
    )
    p.add_argument("--out", type=Path)
    a = p.parse_args(argv)
    fractions = [float(x) for x in a.fractions.split(",") if x]
    rho = {"auto": "auto", "sampled": None}.get(a.rho, a.rho)
    priors = bs.Priors(
        likelihood=a.likelihood,
        rho=rho if rho in ("auto", "reml", None) else float(rho),
        R0_fitted=a.r0 == "fitted",
        **({} if a.from_batch is None else {"from_batch": _FROM_BATCH[a.from_batch]}),
    )
    t0 = time.perf_counter()
    disc = None
    if a.ratio or a.per_run or a.pooled_refit or a.decades:
        kw = {} if a.per_run is None else {"per_run": a.per_run == "yes"}
        if a.decades:
            kw["horizon"] = a.decades * math.log(10.0)
        if a.pooled_refit is not None:
            kw["pooled_refit"] = a.pooled_refit == "yes"
        if a.ratio:
            r = tuple(float(x) for x in a.ratio.split(","))
            kw["ratio"] = r[0] if len(r) == 1 else r
        disc = bs.Discrepancy(**kw)
    scores = run(
        a.data, fractions, a.gpus, a.seed, priors, disc, a.metric or (METRIC,), a.model, a.digitise, a.smooth
    )
    header = [
        "# DAPO backtests: the default beside version 0.1's exact sigmoid",
        "",
        f"Command: `python benchmarks/dapo_backtest.py {shlex.join(argv)}`",
        "",
        machine_line(),
        versions_line(),
        f"Wall time {time.perf_counter() - t0:.0f} s.",
        "",
        f"Metric(s) {', '.join(f'`{m}`' for m in (a.metric or (METRIC,)))} of every verl log "
        f"(GPU-hours = wall hours x {a.gpus:g})"
        + (
            f", each curve as a figure shows it (smoothed over {a.smooth:g} evaluations, read at "
            f"{a.digitise} computes evenly spaced in log compute, rounded to 0.001; `--digitise`)"
            if a.digitise
            else ""
        )
        + "; each curve fitted on "
        "compute <= fraction x its largest compute (4 chains x 500 + 500), every later evaluation scored. "
        f"`bayes`: the fit's predictive ({'hierarchical model, ' if a.model == 'hierarchical' else ''}"
        f"likelihood {a.likelihood}"
        + (f", rho {a.rho}" if a.likelihood == "ar1" else "")
        + f", R0 {'fitted' if a.r0 == 'fitted' else 'the first evaluation'}"
        + ", calibrated discrepancy"
        + (f", refit ratio {a.ratio}" if a.ratio else "")
        + (f", horizon {a.decades:g} decades" if a.decades else "")
        + ({"yes": ", each run's own scales", "no": ", the batch's scales"}.get(a.per_run or "", ""))
        + ({"yes": ", its refit pooled", "no": ", its refit independent"}.get(a.pooled_refit or "", ""))
        + "); `gaussian`: version 0.1's default (exact sigmoid, independent "
        "Gaussian noise"
        + (", with the same hierarchical pooling" if a.model == "hierarchical" else "")
        + "), fitted beside it; `ls`: the paper's least-squares point fit; "
        "`boot`: its residual bootstrap.",
        "",
    ]
    by = scores.attrs["by_task"]
    task_lines = [
        "Set by set (each metric's curves; the issue's held-out real sets were scored this way):",
        "",
        "| fraction | benchmark | curves | points | coverage90 bayes | coverage90 gaussian "
        "| CRPS bayes | CRPS gaussian |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for _, r in by.iterrows():
        task_lines.append(
            f"| {r['fraction']:g} | `{r['task']}` | {int(r['n_runs_bayes'])} | {int(r['n_points_bayes'])} | "
            f"{r['coverage90_bayes']:.3f} | {r['coverage90_gaussian']:.3f} | "
            f"{r['crps_bayes']:.4f} | {r['crps_gaussian']:.4f} |"
        )
    ident_lines = _split_section(
        "The `bayes` band on runs whose `A` was called identified at the cut "
        "(`bs.identifiability`) and on the rest:",
        scores.attrs["identified"],
    ) + _split_section(
        "The `bayes` band on runs long enough for the discrepancy's own leave-future-out refit, "
        "and on the runs that draw the batch's scales (the shortest windows):",
        scores.attrs["refitted"],
    )
    conv = ", ".join(f"{k} of {n} at {f:g}" for f, k, n in scores.attrs["converged"])
    conv_line = f"Runs of the `bayes` fit that passed the package's convergence check: {conv}."
    chain_lines = [
        "",
        "The `bayes` band chain by chain (`Backtest.by_chain`): where the chains fail the "
        "convergence check, whether they disagree about the forecast or only about the ceiling:",
        "",
        "| fraction | chain | coverage90 | width90 | CRPS | median A |",
        "|---|---|---|---|---|---|",
    ] + [
        f"| {r['fraction']:g} | {int(r['chain'])} | {r['coverage90']:.3f} | {r['width90']:.3f} | "
        f"{r['crps']:.4f} | {r['A_median']:.3f} |"
        for _, r in scores.attrs["by_chain"].iterrows()
    ]
    text = "\n".join(
        [*header, *_table(scores), "", conv_line, "", *task_lines, *ident_lines, *chain_lines, ""]
    )
    write_results(text, a.out)
    return scores


if __name__ == "__main__":
    main()
