"""Backtests on the public DAPO runs: the default beside version 0.1's exact sigmoid.

Reads every ``val-core/*/acc/mean@1`` metric of the verl logs in ``--data`` (the shared
``dapo-metrics`` folder, read in place: never copied into this repository; 42 curves of 20
runs, GPU-hours = wall hours x ``--gpus``), fits each curve on the first ``fraction`` of its
own compute with :func:`bayes_scalerl.backtest` and scores every later evaluation:
``bayes`` (the fit's predictive; by default AR(1) noise at the batch's correlation with the
calibrated discrepancy), ``gaussian`` (version 0.1's default, the exact sigmoid with
independent Gaussian noise, fitted beside it), the paper's least-squares fit (``ls``) and its
residual bootstrap (``boot``).

Usage::

    python benchmarks/dapo_backtest.py --data ../shared/data/dapo-metrics \\
        --fractions 0.25,0.5 --out benchmarks/results/dapo-backtest.md
"""

from __future__ import annotations

import argparse
import os
import platform
import shlex
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

import bayes_scalerl as bs

__all__ = ["main", "run"]

METRIC = "val-core/*/acc/mean@1"
COLUMNS = ["method", "n_runs", "n_points", "coverage50", "coverage90", "width90", "crps", "median_abs_error"]


def run(
    data: Path,
    fractions: Sequence[float],
    gpus: float,
    seed: int,
    priors: bs.Priors | None = None,
    discrepancy: bs.Discrepancy | None = None,
) -> pd.DataFrame:
    """Scores of every method at every fraction (one row per fraction and method)."""
    runs = bs.read_any(data, format="verl", metric=[METRIC], gpus=gpus)
    rows = []
    kw = {"progress": False} | ({"priors": priors} if priors is not None else {})
    if discrepancy is not None:
        kw["discrepancy"] = discrepancy
    for f in fractions:
        t0 = time.perf_counter()
        bt = bs.backtest(runs, fraction=f, seed=seed, fit_kwargs=kw)
        took = time.perf_counter() - t0
        s = bt.scores.assign(fraction=f, seconds=took)
        rows.append(s)
    return pd.concat(rows, ignore_index=True)


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
        "--per-run",
        choices=("yes", "no"),
        default=None,
        help="draw each run's discrepancy scales from its own refit's errors (default: bs.Discrepancy()'s)",
    )
    p.add_argument("--out", type=Path)
    a = p.parse_args(argv)
    fractions = [float(x) for x in a.fractions.split(",") if x]
    rho = {"auto": "auto", "sampled": None}.get(a.rho, a.rho)
    priors = bs.Priors(
        likelihood=a.likelihood,
        rho=rho if rho in ("auto", "reml", None) else float(rho),
        R0_fitted=a.r0 == "fitted",
    )
    t0 = time.perf_counter()
    disc = None
    if a.ratio or a.per_run:
        kw = {} if a.per_run is None else {"per_run": a.per_run == "yes"}
        if a.ratio:
            r = tuple(float(x) for x in a.ratio.split(","))
            kw["ratio"] = r[0] if len(r) == 1 else r
        disc = bs.Discrepancy(**kw)
    scores = run(a.data, fractions, a.gpus, a.seed, priors, disc)
    import jax
    import numpyro

    header = [
        "# DAPO backtests: the default beside version 0.1's exact sigmoid",
        "",
        f"Command: `python benchmarks/dapo_backtest.py {shlex.join(argv)}`",
        "",
        f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPU cores, "
        f"{len(jax.devices())} JAX device(s) ({jax.devices()[0].platform}).",
        f"Versions: python {platform.python_version()}, jax {jax.__version__}, "
        f"numpyro {numpyro.__version__}, bayes_scalerl {bs.__version__}. "
        f"Wall time {time.perf_counter() - t0:.0f} s.",
        "",
        f"Metric `{METRIC}` of every verl log (GPU-hours = wall hours x {a.gpus:g}); each curve fitted on "
        "compute <= fraction x its largest compute (4 chains x 500 + 500), every later evaluation scored. "
        f"`bayes`: the fit's predictive (likelihood {a.likelihood}"
        + (f", rho {a.rho}" if a.likelihood == "ar1" else "")
        + f", R0 {'fitted' if a.r0 == 'fitted' else 'the first evaluation'}"
        + ", calibrated discrepancy"
        + (f", refit ratio {a.ratio}" if a.ratio else "")
        + ({"yes": ", each run's own scales", "no": ", the batch's scales"}.get(a.per_run or "", ""))
        + "); `gaussian`: version 0.1's default (exact sigmoid, independent "
        "Gaussian noise), fitted beside it; `ls`: the paper's least-squares point fit; "
        "`boot`: its residual bootstrap.",
        "",
    ]
    text = "\n".join([*header, *_table(scores), ""])
    print(text)
    if a.out is not None:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(text)
    return scores


if __name__ == "__main__":
    main()
