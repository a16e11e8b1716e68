"""Convergence on the real short windows: how many runs pass the check, by retries.

Fits the four DAPO sets of the backtests (``mean@1``, AIME, AMC ``mean@4`` and best-of-N;
read in place from ``--data``, never copied) on the first quarter and half of each curve's
compute with :func:`bayes_scalerl.backtest`, once per ``--retries`` value
(``bs.Retry(retries=k)``: ``1`` is a single second attempt; ``2``, the default since
2026-12-06, adds a third for the runs that fail it), and prints one row per set, fraction and setting: runs
that pass the check of :meth:`~bayes_scalerl.FitResult.diagnostics` (R-hat <= 1.01, bulk ESS >= 100, no
divergence), which part fails for the rest, the runs sampled again, the ``bayes`` band's
90% coverage and CRPS, and the wall time (compilation included).

The AMC and best-of-N sets read the 18 logs whose AMC metric is ``mean@4`` (the other two
log it as ``mean@1``); the script links them into a temporary folder, since the reader
wants every pattern in every file it reads.

Usage::

    python benchmarks/retry_real.py --data ../shared/data/dapo-metrics --retries 1,2 \\
        --out benchmarks/results/retry-real.md
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

import bayes_scalerl as bs

sys.path.insert(0, str(Path(__file__).resolve().parent))
from environment import machine_line, versions_line, write_results  # noqa: E402
from misspecification import _table  # noqa: E402

__all__ = ["main", "mean4_folder", "run_set"]

AMC4 = '"val-core/AMC-Qwen-instruct/acc/mean@4"'
SETS = {
    "mean@1": ("all", "val-core/*/acc/mean@1"),
    "AIME": ("all", "val-core/AIME*/acc/mean@*"),
    "AMC": ("amc4", "val-core/AMC*/acc/mean@4"),
    "best-of-N": ("amc4", "val-core/A*/acc/best@*/mean"),
}


def mean4_folder(data: Path, into: Path) -> Path:
    """Links, in ``into``, to the logs of ``data`` whose AMC metric is ``mean@4``."""
    for f in sorted(data.glob("*.jsonl")):
        if AMC4 in f.read_text():
            os.symlink(f.resolve(), into / f.name)
    return into


def run_set(data: Path, metric: str, fractions: Sequence[float], retries: Sequence[int], seed: int) -> list:
    """One row per fraction and retries setting for the curves of ``metric`` in ``data``."""
    runs = bs.read_any(data, format="verl", metric=[metric], gpus=4.0)
    rows = []
    for frac in fractions:
        for k in retries:
            t0 = time.perf_counter()
            kw = {"progress": False, "retry": bs.Retry(retries=k)}
            bt = bs.backtest(runs, fraction=frac, seed=seed, fit_kwargs=kw)
            wall = time.perf_counter() - t0
            d = bt.fit.diagnostics()
            s = bt.scores.set_index("method").loc["bayes"]
            rows.append(
                {
                    "fraction": f"{frac:g}",
                    "retries": k,
                    "converged": f"{int(d['converged'].sum())}/{len(d)}",
                    "R-hat > 1.01": int((~(d["r_hat_max"] <= 1.01)).sum()),
                    "ESS < 100": int((~(d["ess_bulk_min"] >= 100)).sum()),
                    "divergent": int((d["divergences"] > 0).sum()),
                    "sampled again": int(d["retried"].sum()),
                    "coverage90": f"{s['coverage90']:.3f}",
                    "CRPS": f"{s['crps']:.4f}",
                    "wall s": f"{wall:.0f}",
                }
            )
            print(metric, rows[-1], flush=True)
    return rows


def main(argv: Sequence[str] | None = None) -> pd.DataFrame:
    argv = list(sys.argv[1:] if argv is None else argv)
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    shared = Path(__file__).resolve().parents[2] / "shared" / "data" / "dapo-metrics"
    p.add_argument("--data", type=Path, default=shared, help="folder of verl logs (read in place)")
    p.add_argument("--sets", default=",".join(SETS), help=f"comma-separated, of {', '.join(SETS)}")
    p.add_argument("--fractions", default="0.25,0.5")
    p.add_argument("--retries", default="1,2", help="Retry(retries=k) settings, comma-separated")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path)
    a = p.parse_args(argv)
    fractions = [float(x) for x in a.fractions.split(",") if x]
    retries = [int(x) for x in a.retries.split(",") if x]
    t0 = time.perf_counter()
    tables = []
    with tempfile.TemporaryDirectory() as tmp:
        folders = {"all": a.data, "amc4": mean4_folder(a.data, Path(tmp))}
        for name in a.sets.split(","):
            where, metric = SETS[name]
            rows = run_set(folders[where], metric, fractions, retries, a.seed)
            tables.append(pd.DataFrame(rows).assign(set=name))
    df = pd.concat(tables, ignore_index=True)
    cols = ["set"] + [c for c in df.columns if c != "set"]
    lines = [
        "# Convergence on the real short windows, by retries",
        "",
        f"Command: `python benchmarks/retry_real.py {shlex.join(argv)}`",
        "",
        machine_line(),
        versions_line(),
        f"Wall time {time.perf_counter() - t0:.0f} s.",
        "",
        "Each set's curves fitted on compute <= fraction x their largest compute (the default "
        "model, 4 chains x 500 + 500), `bs.Retry(retries=k)`; a run converged passes R-hat <= 1.01, "
        "bulk ESS >= 100 and no divergence. Coverage and CRPS: the `bayes` band on every later "
        "evaluation. Wall time includes compilation.",
        "",
        *_table(df[cols]),
    ]
    text = "\n".join(lines) + "\n"
    write_results(text, a.out)
    return df


if __name__ == "__main__":
    main()
