"""Priors learnt from the batch on their own model: known population in, coverage out.

Exact sigmoids whose ``log B`` and ``log(C_mid / window end)`` are drawn from normal
populations, the model ``bs.Priors(from_batch=True)`` assumes, evaluated every 1/48 of each
run's budget with iid noise. Each run is fitted on its first ``1/h`` (``bs.backtest``,
without the discrepancy, so that the band is the posterior's alone) with the default priors,
with the learnt ones and (``--models``) with the hierarchical model, which pools the
midpoints too, and scored on every later evaluation. A learnt prior that is right should be
calibrated here and narrower than the default.

Usage::

    python benchmarks/batch_priors_sbc.py --horizons 2,4 --seeds 0,1 \\
        --out benchmarks/results/batch-priors-sbc.md
"""

from __future__ import annotations

import argparse
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

__all__ = ["MODELS", "main", "simulate"]

#: The fits compared: name -> ``bs.fit`` arguments (all without the discrepancy).
MODELS = {
    # the fixed priors (the default until 2026-12-07, this table's "default")
    "default": {"priors": bs.Priors(from_batch=False)},
    "batch": {"priors": bs.Priors(from_batch=True)},
    # the ceiling A pooled too
    "ceiling": {"priors": bs.Priors(from_batch="ceiling")},
    # every run its own recipe, pooled as one population (the same pooling of midpoints)
    "hierarchical": {"model": "hierarchical"},
}


def simulate(
    rng: np.random.Generator, n_runs: int, sd_b: float, sd_c: float, a_range: tuple = (0.5, 0.7)
) -> tuple:
    """Runs and their truth (``C_mid`` at half the budget at the median: ``h / 2`` window ends)."""
    budget = np.exp(rng.uniform(np.log(4_000.0), np.log(16_000.0), n_runs))
    truth = pd.DataFrame(
        {
            "run": [f"r{i:03d}" for i in range(n_runs)],
            "A": rng.uniform(*a_range, n_runs),
            "B": np.exp(np.log(1.5) + sd_b * rng.standard_normal(n_runs)),
            "C_mid": budget * np.exp(np.log(0.5) + sd_c * rng.standard_normal(n_runs)),
            "R0": np.full(n_runs, 0.3),
            "sigma": np.full(n_runs, 0.01),
        }
    )
    frames = [bs.simulate_runs(truth.iloc[[i]], np.linspace(0.0, budget[i], 49), rng) for i in range(n_runs)]
    return bs.Runs.from_frame(pd.concat(frames, ignore_index=True)), truth


def main(argv: Sequence[str] | None = None) -> pd.DataFrame:
    argv = list(sys.argv[1:] if argv is None else argv)
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=96)
    p.add_argument("--horizons", default="2,4")
    p.add_argument("--seeds", default="0")
    p.add_argument("--sd-b", type=float, default=0.3, help="the population's sd of log B")
    p.add_argument("--sd-c", type=float, default=0.5, help="the population's sd of log C_mid")
    p.add_argument("--a-range", default="0.5,0.7", help="the population of A: uniform on lo,hi")
    p.add_argument("--models", default="default,batch", help=f"comma-separated, of {list(MODELS)}")
    p.add_argument("--out", type=Path)
    a = p.parse_args(argv)
    t0 = time.perf_counter()
    rows = []
    for seed in (int(s) for s in a.seeds.split(",")):
        for h in (float(x) for x in a.horizons.split(",")):
            a_range = tuple(float(x) for x in a.a_range.split(","))
            runs, _ = simulate(np.random.default_rng(seed), a.runs, a.sd_b, a.sd_c, a_range)
            for name in a.models.split(","):
                kw = {"progress": False, "discrepancy": False, **MODELS[name]}
                bt = bs.backtest(
                    runs, fraction=1.0 / h, seed=seed, fit_kwargs=kw, baseline=False, bootstrap=0
                )
                s = bt.scores.iloc[0]
                noise = bt.fit.settings["noise"]
                learnt = (
                    noise.split("learnt from the batch ", 1)[1].split(" (each run", 1)[0]
                    if name in ("batch", "ceiling")
                    else ""
                )
                rows.append(
                    {
                        "seed": seed,
                        "horizon": f"{h:g}x",
                        "model": name,
                        "coverage50": s["coverage50"],
                        "coverage90": s["coverage90"],
                        "width90": s["width90"],
                        "crps": s["crps"],
                        "learnt": learnt,
                    }
                )
                print(rows[-1], flush=True)
    table = pd.DataFrame(rows)
    lines = [
        "# Priors learnt from the batch on their own model",
        "",
        f"Command: `python benchmarks/batch_priors_sbc.py {shlex.join(argv)}`",
        "",
        machine_line(),
        versions_line(),
        f"Wall time {time.perf_counter() - t0:.0f} s.",
        "",
        f"{a.runs} exact sigmoids a fit: `log B ~ Normal(log 1.5, {a.sd_b:g})`, `log(C_mid / budget) ~ "
        f"Normal(log 0.5, {a.sd_c:g})` (so `C_mid` is h/2 times the window's end at the median), budgets "
        "log-uniform on 4k-16k, "
        f"A uniform on {a.a_range.replace(',', '-')}, R0 0.3, iid noise 0.01, "
        "49 evaluations evenly spaced to the budget; "
        "fitted on the first 1/h of the budget without the discrepancy, scored on every later evaluation.",
        "",
        "| seed | horizon | model | coverage50 | coverage90 | width90 | crps | learnt |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in table.itertuples(index=False):
        lines.append(
            f"| {r.seed} | {r.horizon} | {r.model} | {r.coverage50:.3f} | {r.coverage90:.3f} | "
            f"{r.width90:.3f} | {r.crps:.4f} | {r.learnt} |"
        )
    text = "\n".join(lines) + "\n"
    write_results(text, a.out)
    return table


if __name__ == "__main__":
    main()
