"""The DAPO backtest in small batches: the default's band when a lab fits a handful of curves.

The default learns part of its width from the batch it is given: the discrepancy's scales
from each curve's leave-future-out refit (pooled over the batch), the noise correlation and
the population priors. ``benchmarks/dapo_backtest.py`` fits all 42 curves as one batch; a
lab scoring one recipe's ablations fits a handful. This script fits the same curves both
ways at each fraction: once as one batch, and split into batches of about ``--batch-size``
curves (whole training runs, in file order, so that one run's metrics share a batch, as a
lab's set of variants would), and scores every later evaluation with
:func:`bayes_scalerl.backtest`. It reports the ``bayes`` band (the default) and version
0.1's ``gaussian`` model pooled over all curves, with the standard error of the coverage
clustered by curve, and the spread of the coverage between the small batches.

Usage::

    python benchmarks/dapo_batches.py --batch-size 6 --fractions 0.25,0.5 \\
        --out benchmarks/results/dapo-batches.md
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

import bayes_scalerl as bs

sys.path.insert(0, str(Path(__file__).resolve().parent))
from dapo_backtest import METRIC  # noqa: E402
from environment import header_lines, write_results  # noqa: E402
from misspecification import clustered_se  # noqa: E402

__all__ = ["batches_of", "pooled", "main"]

METHODS = ("bayes", "gaussian")


def batches_of(runs: bs.Runs, size: int) -> list[list[str]]:
    """The curves in batches of at least ``size``: whole training runs, in file order.

    Consecutive training runs (the ``training_run`` column; each curve its own without it)
    join a batch until it holds ``size`` curves; a last batch of fewer than ``size`` joins
    the one before it.
    """
    if size < 2:
        raise ValueError(f"batch size must be at least 2, got {size}")
    table = runs.table
    group = table["training_run"] if "training_run" in table.columns else table["run"]
    by_run = pd.Series(group.to_numpy(), index=table["run"]).groupby(level=0, sort=False).first()
    order = list(dict.fromkeys(by_run.loc[runs.names]))  # training runs in file order
    members = {g: [r for r in runs.names if by_run[r] == g] for g in order}
    out: list[list[str]] = []
    current: list[str] = []
    for g in order:
        current += members[g]
        if len(current) >= size:
            out.append(current)
            current = []
    if current:
        if out:
            out[-1] += current
        else:
            out.append(current)
    return out


def pooled(points: pd.DataFrame) -> pd.DataFrame:
    """Coverage (with its curve-clustered error), width and CRPS of each method over ``points``."""
    rows = []
    for method in METHODS:
        p = points[points["method"] == method]
        cov = p["covered90"].astype(float).to_numpy()
        rows.append(
            {
                "method": method,
                "n_runs": p["run"].nunique(),
                "n_points": len(p),
                "coverage90": float(cov.mean()),
                "coverage90_se": clustered_se(pd.Series(cov), p["run"]),
                "coverage50": float(p["covered50"].astype(float).mean()),
                "width90": float((p["q95"] - p["q05"]).mean()),
                "crps": float(p["crps"].mean()),
            }
        )
    return pd.DataFrame(rows)


def run(
    runs: bs.Runs,
    fractions: Sequence[float],
    size: int,
    seed: int,
    discrepancy: bs.Discrepancy | None = None,
    log=print,
) -> dict:
    """Backtests of ``runs`` as one batch and in batches of about ``size``, at every fraction."""
    groups = batches_of(runs, size)
    kw = {"progress": False} | ({"discrepancy": discrepancy} if discrepancy is not None else {})
    out = {"groups": groups, "pooled": [], "by_batch": [], "seconds": []}
    for f in fractions:
        for label, parts in (("one batch", [runs.names]), (f"batches of ~{size}", groups)):
            t0 = time.perf_counter()
            pts = []
            for i, names in enumerate(parts):
                bt = bs.backtest(runs.subset(names), fraction=f, seed=seed, fit_kwargs=kw)
                p = bt.points[bt.points["method"].isin(METHODS)].assign(batch=i)
                pts.append(p)
                if len(parts) > 1:
                    b = pooled(p).assign(fraction=f, batch=i, curves=len(names))
                    out["by_batch"].append(b[b["method"] == "bayes"])
            took = time.perf_counter() - t0
            out["pooled"].append(pooled(pd.concat(pts, ignore_index=True)).assign(fraction=f, fits=label))
            out["seconds"].append((f, label, took))
            log(f"fraction {f:g}, {label}: {took:.0f} s")
    return out


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.4f}" if abs(v) < 0.1 else f"{v:.3f}"
    return str(v)


def _table(df: pd.DataFrame) -> list[str]:
    cols = list(df.columns)
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(_fmt(v) for v in r) + " |" for r in df.itertuples(index=False)]
    return lines


def main(argv: Sequence[str] | None = None) -> dict:
    argv = list(sys.argv[1:] if argv is None else argv)
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    shared = Path(__file__).resolve().parents[2] / "shared" / "data" / "dapo-metrics"
    p.add_argument("--data", type=Path, default=shared, help="folder of verl logs (read in place)")
    p.add_argument("--fractions", default="0.25,0.5")
    p.add_argument("--batch-size", type=int, default=6, help="curves per small batch (whole training runs)")
    p.add_argument("--gpus", type=float, default=4.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--prior-weight",
        type=float,
        default=None,
        help="the discrepancy's prior as this many pseudo-runs (the rule before 2026-12-07; "
        "default: bs.Discrepancy()'s share)",
    )
    p.add_argument("--out", type=Path)
    a = p.parse_args(argv)
    bs.use_all_cpu_cores()
    t0 = time.perf_counter()
    runs = bs.read_any(a.data, format="verl", metric=[METRIC], gpus=a.gpus)
    disc = None if a.prior_weight is None else bs.Discrepancy(prior_weight=a.prior_weight)
    res = run(runs, [float(x) for x in a.fractions.split(",") if x], a.batch_size, a.seed, disc)
    sizes = [len(g) for g in res["groups"]]
    lines = header_lines(
        "DAPO backtests in small batches: one batch of every curve against a lab's handful",
        "benchmarks/dapo_batches.py",
        time.perf_counter() - t0,
    )
    lines += [
        f"Every `{METRIC}` curve of the verl logs ({runs.n_runs} curves, GPU-hours = wall hours x "
        f"{a.gpus:g}), each fitted on compute <= fraction x its largest compute with the default "
        "(`bayes`) and version 0.1's exact sigmoid (`gaussian`), 4 chains x 500 + 500, every later "
        "evaluation scored (`bs.backtest`). `one batch`: all curves in one fit; `batches of ~N`: "
        f"{len(sizes)} fits of {min(sizes)}-{max(sizes)} curves (whole training runs in file order), "
        "each learning its own discrepancy scales, noise correlation and priors"
        + ("" if disc is None else f" (the discrepancy's prior as {a.prior_weight:g} pseudo-runs)")
        + f"; `bs.Discrepancy().prior_share` is {bs.Discrepancy().prior_share:g}. `coverage90_se`: "
        "the points clustered by curve.",
        "",
        "## Pooled over every curve",
        "",
    ]
    pooled_df = pd.concat(res["pooled"], ignore_index=True)
    cols = ["fraction", "fits", "method", "n_runs", "n_points", "coverage90", "coverage90_se"]
    lines += _table(pooled_df[cols + ["coverage50", "width90", "crps"]])
    by = pd.concat(res["by_batch"], ignore_index=True)
    lines += ["", "## The default's band batch by batch", ""]
    lines += _table(by[["fraction", "batch", "curves", "n_points", "coverage90", "width90", "crps"]])
    spread = by.groupby("fraction")["coverage90"].agg(["min", "median", "max", "std"]).reset_index()
    lines += ["", "Spread of the small batches' coverage:", ""]
    lines += _table(spread)
    lines += ["", "Fit times:", ""]
    lines += [f"- fraction {f:g}, {label}: {s:.0f} s" for f, label, s in res["seconds"]]
    write_results("\n".join(lines) + "\n", a.out)
    return res


if __name__ == "__main__":
    main()
