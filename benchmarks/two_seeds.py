"""Two runs of the misspecification benchmark on different seeds, scenario by scenario.

Each scenario of ``benchmarks/misspecification.py`` is one batch, fitted together, and its
``coverage90_se`` clusters the held-out points by run. That error leaves out what the runs
of a batch share: the width the default learns from the batch itself (the discrepancy's
scales, the noise correlation, the population priors). Two seeds give two independent
batches of every scenario, so ``z = (c1 - c2) / sqrt(se1^2 + se2^2)`` over the scenarios
has sd 1 if the reported errors hold, and more if the batches differ by more. The script
prints each scenario's two coverages, their mean with its error (the two reported ones
combined) and range verdict, and the sd of ``z`` per horizon.

Usage::

    python benchmarks/two_seeds.py benchmarks/results/misspecification-decades2.md \\
        benchmarks/results/misspecification-decades2-4x.md \\
        --against benchmarks/results/misspecification-seed2.md
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd


def scenario_rows(path: str) -> pd.DataFrame:
    """The ``## Every scenario`` table of a misspecification results file."""
    text = Path(path).read_text(encoding="utf-8")
    if "## Every scenario" not in text:
        raise ValueError(f"{path}: no '## Every scenario' table")
    section = text.split("## Every scenario", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) > 10 and "/" in cells[0] and cells[1].endswith("x"):
            rows.append(
                {
                    "scenario": cells[0],
                    "horizon": cells[1],
                    "coverage90": float(cells[6]),
                    "se": float(cells[7]),
                }
            )
    return pd.DataFrame(rows)


def compare(first: pd.DataFrame, second: pd.DataFrame, low: float = 0.85, high: float = 0.95) -> pd.DataFrame:
    """One row per scenario and horizon in both: the two coverages, their mean, ``z`` and a verdict."""
    m = first.merge(second, on=["scenario", "horizon"], suffixes=("_1", "_2"))
    m["both"] = 0.5 * (m["coverage90_1"] + m["coverage90_2"])
    m["both_se"] = 0.5 * np.hypot(m["se_1"], m["se_2"])
    m["z"] = (m["coverage90_1"] - m["coverage90_2"]) / np.hypot(m["se_1"], m["se_2"])
    inside = m["both"].between(low, high)
    wide = m["both"] - 2 * m["both_se"] > high
    narrow = m["both"] + 2 * m["both_se"] < low
    m["verdict"] = np.select(
        [inside, wide, narrow], ["inside", "too wide", "too narrow"], "outside, within 2 se"
    )
    return m.sort_values(["horizon", "scenario"]).reset_index(drop=True)


def main(argv: Sequence[str] | None = None) -> pd.DataFrame:
    """Command line: see the module docstring."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("first", nargs="+", help="results files of the first seed (their tables are joined)")
    ap.add_argument("--against", required=True, help="results file of the second seed")
    args = ap.parse_args(argv)
    first = pd.concat([scenario_rows(p) for p in args.first], ignore_index=True)
    m = compare(first, scenario_rows(args.against))
    print("| scenario | horizon | seed A | seed B | mean (se) | verdict | z |")
    print("|---|---|---|---|---|---|---|")
    for r in m.itertuples():
        print(
            f"| {r.scenario} | {r.horizon} | {r.coverage90_1:.3f} ({r.se_1:.3f}) | {r.coverage90_2:.3f} "
            f"({r.se_2:.3f}) | {r.both:.3f} ({r.both_se:.3f}) | {r.verdict} | {r.z:+.2f} |"
        )
    print()
    print("| horizon | scenarios | inside (mean of the two) | too wide | too narrow | sd of z | abs(z) > 2 |")
    print("|---|---|---|---|---|---|---|")
    for h, g in m.groupby("horizon", sort=False):
        print(
            f"| {h} | {len(g)} | {(g.verdict == 'inside').sum()} | {(g.verdict == 'too wide').sum()} "
            f"| {(g.verdict == 'too narrow').sum()} | {g.z.std(ddof=1):.2f} | {(g.z.abs() > 2).sum()} |"
        )
    return m


if __name__ == "__main__":
    main()
