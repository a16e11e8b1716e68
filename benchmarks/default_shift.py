"""How far the ceiling ``A`` moves between two models on the public DAPO curves.

Fits every ``val-core/*/acc/mean@1`` curve of the verl logs in ``--data`` (read in place,
never copied) on the first ``fraction`` of its own compute, under the default
(``bs.Priors()``: AR(1) noise at the batch's correlation; with ``--base batch`` each run's
priors of ``A``, ``B`` and ``C_mid`` learnt from the batch, ``bs.Priors(from_batch="ceiling")``)
and under ``--against``: a likelihood (default ``gaussian``, the default before AR(1)), or
``fixed``, the default's likelihood with the fixed wide priors
(``bs.Priors(from_batch=False)``); both with the calibrated discrepancy. It prints the
difference of each curve's posterior median of ``A`` (base minus other) and the ratio of
its 90% interval widths (base over other).

Usage::

    python benchmarks/default_shift.py --data ../shared/data/dapo-metrics --fractions 0.5,1
    python benchmarks/default_shift.py --base batch --against fixed --fractions 0.25,0.5,1
"""

from __future__ import annotations

import argparse
import platform
import time
from pathlib import Path

import numpy as np

import bayes_scalerl as bs

METRIC = "val-core/*/acc/mean@1"


def main(argv=None) -> None:
    shared = Path(__file__).resolve().parents[2] / "shared" / "data" / "dapo-metrics"
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=shared)
    ap.add_argument("--fractions", default="0.5,1")
    ap.add_argument("--gpus", type=float, default=4.0)
    ap.add_argument(
        "--against", default="gaussian", help="likelihood of the other model, or 'fixed' for the fixed priors"
    )
    ap.add_argument(
        "--base", choices=("default", "batch"), default="default", help="priors of the first model"
    )
    a = ap.parse_args(argv)
    bs.use_all_cpu_cores()
    import jax

    runs = bs.read_any(a.data, format="verl", metric=[METRIC], gpus=a.gpus)
    print(
        f"machine: {platform.processor() or platform.machine()}, {jax.device_count()} devices "
        f"({jax.devices()[0].platform}); jax {jax.__version__}; bayes_scalerl {bs.__version__}\n"
    )
    print(
        "| fraction | rho (default) | median A shift (median over curves) | mean abs shift | max abs shift "
        "| 90% width ratio, median (range) | seconds default / other |"
    )
    print("|---|---|---|---|---|---|---|")
    for frac in (float(f) for f in a.fractions.split(",")):
        tab = runs.table
        sub = bs.Runs.from_frame(tab[tab["compute"] <= tab.groupby("run")["compute"].transform("max") * frac])
        out, secs, rho = {}, {}, None
        other = bs.Priors(from_batch=False) if a.against == "fixed" else bs.Priors(likelihood=a.against)
        base = bs.Priors(from_batch="ceiling") if a.base == "batch" else bs.Priors()
        for name, priors in (("default", base), ("other", other)):
            t0 = time.perf_counter()
            res = bs.fit(sub, priors=priors, progress=False, seed=0)
            secs[name] = time.perf_counter() - t0
            A = res.draws("A")
            out[name] = (np.median(A, 1), np.quantile(A, 0.95, 1) - np.quantile(A, 0.05, 1))
            if name == "default":
                rho = res.settings["priors"]["rho"]
        d = out["default"][0] - out["other"][0]
        w = out["default"][1] / out["other"][1]
        shift = f"{np.median(d):+.4f} | {np.mean(np.abs(d)):.4f} | {np.max(np.abs(d)):.4f}"
        width = f"{np.median(w):.2f} ({w.min():.2f}-{w.max():.2f})"
        took = f"{secs['default']:.0f} / {secs['other']:.0f}"
        print(f"| {frac:g} | {rho:.2f} | {shift} | {width} | {took} |", flush=True)


if __name__ == "__main__":
    main()
