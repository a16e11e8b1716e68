"""What ``identify``'s verdict costs a small batch: runs that levelled off, batch by batch size.

Each batch holds ``n`` exact sigmoids seen to 4-13 times their midpoints (20 evaluations
from 100 to 4,000 GPU-hours, noise sd 0.006): every run's own data pin its sigmoid's ``A``.
The verdict reads at least ``Discrepancy().verdict_weight`` pseudo-runs of the
discrepancy's wide prior (a chance in ``n + 1`` that a run departs the way none of the
batch's has); the band's allowance a share of 0.02. Both rules read each fit (the band's
from the fit's own offsets). The table gives, for each batch size, the share of runs each
rule calls "A identified" and the median width each reads.

    python benchmarks/verdict_batch_size.py --sizes 6,12,24,48 \\
        --out benchmarks/results/verdict-batch-size.md
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

import bayes_scalerl as bs

sys.path.insert(0, str(Path(__file__).resolve().parent))
from dapo_batches import _table  # noqa: E402
from dapo_verdicts import band_rule  # noqa: E402
from environment import header_lines, write_results  # noqa: E402

__all__ = ["plateaus", "main"]


def plateaus(n: int, seed: int) -> bs.Runs:
    """``n`` exact sigmoids seen far past their midpoints (ceilings 0.60-0.65, six kinds)."""
    rng = np.random.default_rng(seed)
    grid = np.concatenate([[0.0], np.geomspace(100.0, 4000.0, 20)])
    k = np.arange(n) % 6
    truth = pd.DataFrame(
        {
            "run": [f"r{i:03d}" for i in range(n)],
            "A": 0.6 + 0.01 * k,
            "B": 2.0,
            "C_mid": 300.0 * (1 + 0.3 * k),
            "R0": 0.2,
            "sigma": 0.006,
        }
    )
    return bs.Runs.from_frame(bs.simulate_runs(truth, grid, rng), source="<sim>")


def main(argv: Sequence[str] | None = None) -> pd.DataFrame:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="6,12,24,48")
    p.add_argument("--seed", type=int, default=3)
    p.add_argument("--out", type=Path)
    a = p.parse_args(argv)
    bs.use_all_cpu_cores()
    t0 = time.perf_counter()
    rows = []
    for n in [int(x) for x in a.sizes.split(",") if x]:
        res = bs.fit(plateaus(n, a.seed), seed=0, progress=False, log_likelihood=False)
        for rule, r in (("default", res), ("band's share", band_rule(res))):
            d = bs.identifiability(r)
            rows.append(
                {
                    "runs": n,
                    "rule": rule,
                    "identified": f"{int(d['a_identified'].sum())}/{n}",
                    "median_width90_rule": float(d["a_width90_data"].median()),
                    "median_width90_sigmoid": float(d["a_width90_sigmoid"].median()),
                    "median_width90": float(d["a_width90"].median()),
                }
            )
        print(f"{n} runs: {time.perf_counter() - t0:.0f} s", flush=True)
    df = pd.DataFrame(rows)
    lines = header_lines(
        "What `identify`'s verdict costs a small batch of runs that levelled off",
        "benchmarks/verdict_batch_size.py",
        time.perf_counter() - t0,
    )
    lines += [
        "Batches of exact sigmoids seen to 4-13 times their midpoints (20 evaluations each, noise "
        "sd 0.006), fitted with the default (4 chains x 500 + 500). `default`: the verdict's rule, "
        f"at least {bs.Discrepancy().verdict_weight:g} pseudo-run of the discrepancy's wide prior; "
        f"`band's share`: the fit's own offsets (a share of {bs.Discrepancy().prior_share:g}). "
        "`median_width90_rule`: the width the rule reads (`a_width90_data`); "
        "`median_width90`: the reported interval's.",
        "",
        *_table(df),
        "",
    ]
    write_results("\n".join(lines), a.out)
    return df


if __name__ == "__main__":
    main()
