"""Where the default's width goes on real curves: runs with their own refit against the shortest.

A run whose fitted window is too short for the discrepancy's leave-future-out refit draws
its scales from the batch's distribution; these are the runs with the fewest points. This
script backtests one set of verl curves (:func:`bayes_scalerl.backtest`, as
``dapo_backtest.py`` does) three ways, and scores each on the two groups of runs, split by
the default fit's ``discrepancy_own`` flag:

- ``default``: AR(1) noise at the batch's correlation with the calibrated discrepancy;
- ``ar1``: the same without the discrepancy;
- ``gaussian``: version 0.1's model (independent Gaussian noise, no discrepancy);
- ``batch``: the default with the priors of ``B`` and ``C_mid`` learnt from the batch
  (``bs.Priors(from_batch=True)``).

So it says which part of the model widens the band on which runs.

Usage::

    python benchmarks/short_windows.py --data ../shared/data/dapo-metrics \\
        --metric 'val-core/*/acc/mean@1' --fraction 0.25 --out benchmarks/results/short-windows.md
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

import bayes_scalerl as bs

sys.path.insert(0, str(Path(__file__).resolve().parent))
from dapo_backtest import _split, digitised  # noqa: E402
from environment import machine_line, versions_line, write_results  # noqa: E402

__all__ = ["MODELS", "main", "split_scores"]

#: The three fits: name -> ``bs.fit`` arguments.
MODELS = {
    "default": {},  # priors learnt from the batch from 2026-12-07 ("ceiling"); fixed before
    "fixed": {"priors": bs.Priors(from_batch=False)},
    "ar1": {"discrepancy": False, "priors": bs.Priors(from_batch=False)},
    "gaussian": {"discrepancy": False, "priors": bs.Priors(likelihood="gaussian", from_batch=False)},
    "batch": {"priors": bs.Priors(from_batch=True)},
    "ceiling": {"priors": bs.Priors(from_batch="ceiling")},
}


def split_scores(bt: bs.Backtest, own: pd.Series) -> pd.DataFrame:
    """90% coverage and CRPS of the ``bayes`` band on all runs, the runs with ``own`` true
    (their own refit) and the rest (the batch's scales)."""
    every = pd.Series(True, index=bt.points["run"].unique())
    return pd.concat(
        [_split(bt, every, ("all", "none")).iloc[:1], _split(bt, own, ("own refit", "batch's scales"))],
        ignore_index=True,
    )


def main(argv: Sequence[str] | None = None) -> pd.DataFrame:
    argv = list(sys.argv[1:] if argv is None else argv)
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", type=Path, required=True, help="folder of verl logs (read in place)")
    p.add_argument("--metric", required=True)
    p.add_argument("--fraction", type=float, default=0.25)
    p.add_argument("--gpus", type=float, default=4.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--digitise", type=int, default=None, metavar="N", help="as dapo_backtest.py --digitise")
    p.add_argument("--models", default=",".join(MODELS), help=f"comma-separated, of {list(MODELS)}")
    p.add_argument("--out", type=Path)
    a = p.parse_args(argv)
    t0 = time.perf_counter()
    runs = bs.read_any(a.data, format="verl", metric=[a.metric], gpus=a.gpus)
    if a.digitise:
        runs = digitised(runs, a.digitise)
    own = None
    frames = []
    names = a.models.split(",")
    if names[0] != "default":
        names = ["default"] + names  # its flag splits the others' runs
    for name in names:
        kw = MODELS[name]
        bt = bs.backtest(runs, fraction=a.fraction, fit_kwargs=kw, bootstrap=0, baseline=False, seed=a.seed)
        if own is None:  # the default's flag splits every model's runs
            cd = bt.fit.dt["constant_data"]
            own = pd.Series(cd["discrepancy_own"].values.astype(bool), index=list(bt.fit.run_names))
        frames.append(split_scores(bt, own).assign(model=name))
        print(frames[-1].to_string(index=False), flush=True)
    table = pd.concat(frames, ignore_index=True)
    lines = [
        "# Where the default's width goes: runs with their own refit against the shortest",
        "",
        f"Command: `python benchmarks/short_windows.py {shlex.join(argv)}`",
        "",
        machine_line(),
        versions_line(),
        f"Wall time {time.perf_counter() - t0:.0f} s.",
        "",
        f"Metric `{a.metric}`, each curve fitted on compute <= {a.fraction:g} x its largest compute"
        + (f", read as a figure shows it (`--digitise {a.digitise}`)" if a.digitise else "")
        + ". Runs split by the default fit's `discrepancy_own` (a refit of their own, or too short "
        "for one and on the batch's scales). `ar1`: the default without the discrepancy; "
        "`gaussian`: version 0.1's model; `batch`: the default with priors learnt from the batch.",
        "",
        "| model | runs | n_runs | n_points | coverage90 | crps |",
        "|---|---|---|---|---|---|",
    ]
    for _, r in table.iterrows():
        lines.append(
            f"| {r['model']} | {r['runs']} | {r['n_runs']} | {r['n_points']} | "
            f"{r['coverage90']:.3f} | {r['crps']:.4f} |"
        )
    text = "\n".join(lines) + "\n"
    write_results(text, a.out)
    return table


if __name__ == "__main__":
    main()
