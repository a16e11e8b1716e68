"""Does ``A``'s 90% interval cover the curve's limit? By family, and by the discrepancy's horizon.

The misspecification benchmark scores the bands out to ``h`` times the fitted compute;
``identify`` and ``compare`` read ``A``, the ceiling as compute grows without bound. On
curves that are not sigmoids that limit is the sigmoid's ceiling plus a departure the
window may not show at all (a late drift, the slow tail of a power law). The discrepancy
(:mod:`bayes_scalerl.models.discrepancy`) lets that departure grow beyond the data on the
log-compute scale ``lam`` (``Discrepancy(horizon=...)``, default ``log 10``); its size is
learnt from refits inside the window, but ``lam`` is not (a refit that extrapolates 2x
inside the data sees the departure's slope, not how long it keeps growing), so it is an
assumption, and ``A``'s interval rests on it far more than the bands at 2-4x do.

This script fits the misspecification benchmark's single runs (one fit per scenario, as
``misspecification.py --batch scenario`` and ``identify_misses.py`` do) on the first
``1 / h`` of each run's compute, once per discrepancy horizon (given in decades of
compute: ``--decades 1,2`` is ``lam = log 10`` and ``log 100``), and reports, by family
and noise model: the share of runs whose true limit lies inside ``A``'s 90% interval
(below it, above it), the median width of that interval, and the runs ``identify`` calls
"A identified" and how many of those wrongly. The sampler's draws are the same in every
setting (the discrepancy is added after sampling), so only the offsets differ.

Usage::

    python benchmarks/ceiling_coverage.py --horizons 2 --decades 1,2 --runs-per-scenario 24 \\
        --out benchmarks/results/ceiling-coverage.md
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

import bayes_scalerl as bs
from bayes_scalerl.analyses.misspec import FAMILIES, NOISES

sys.path.insert(0, str(Path(__file__).resolve().parent))
from environment import header_lines, write_results  # noqa: E402
from identify_misses import scenario_runs  # noqa: E402

__all__ = ["scenario_rows", "summarise", "main"]


def scenario_rows(
    curves: pd.DataFrame, params: pd.DataFrame, h: float, decades: Sequence[float], seed: int
) -> pd.DataFrame:
    """One row per (run, discrepancy horizon): ``A``'s interval, the verdict and the true limit."""
    c_max = curves.groupby("run")["compute"].max()
    cut = curves[curves["compute"] <= curves["run"].map(c_max / h)]
    binomial = "n_eval" in cut and cut["n_eval"].notna().all()
    cols = ["run", "compute", "reward"] + (["n_eval"] if binomial else [])
    runs = bs.Runs.from_frame(cut[cols], source="<ceiling coverage>")
    truth = params.set_index("run")["true_ceiling"]
    out = []
    for d in decades:
        res = bs.fit(runs, seed=seed, progress=False, discrepancy=bs.Discrepancy(horizon=d * math.log(10.0)))
        ident = bs.identifiability(res)
        t = truth.loc[ident["run"]].to_numpy()
        out.append(
            ident[["run", "a_q05", "a_q95", "a_width90", "a_identified", "converged"]].assign(
                decades=f"{d:g}",
                true_limit=t,
                below=t < ident["a_q05"].to_numpy(),
                above=t > ident["a_q95"].to_numpy(),
            )
        )
    return pd.concat(out, ignore_index=True)


def summarise(rows: pd.DataFrame, by: Sequence[str]) -> pd.DataFrame:
    """Coverage of the true limit, its misses by side, width and verdicts, by ``by``."""

    def one(d: pd.DataFrame) -> pd.Series:
        inside = ~(d["below"] | d["above"])
        called = d["a_identified"].astype(bool)
        return pd.Series(
            {
                "runs": len(d),
                "limit_in_90": inside.mean(),
                "below": d["below"].mean(),
                "above": d["above"].mean(),
                "median_width90": d["a_width90"].median(),
                "identified": int(called.sum()),
                "wrong": int((called & ~inside).sum()),
                "converged": d["converged"].mean(),
            }
        )

    out = rows.groupby(list(by), sort=False).apply(one, include_groups=False).reset_index()
    return out.astype({"runs": int, "identified": int, "wrong": int})


def _table(df: pd.DataFrame) -> list[str]:
    def fmt(v) -> str:
        return f"{v:.3f}" if isinstance(v, float) else str(v)

    lines = ["| " + " | ".join(df.columns) + " |", "|" + "---|" * len(df.columns)]
    return lines + ["| " + " | ".join(fmt(v) for v in row) + " |" for row in df.itertuples(index=False)]


def main(argv: Sequence[str] | None = None) -> pd.DataFrame:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--families", default=",".join(FAMILIES))
    ap.add_argument("--noises", default=",".join(NOISES))
    ap.add_argument("--horizons", default="2", help="fit on compute <= max / h")
    ap.add_argument("--decades", default="1,2", help="discrepancy horizons lam, in decades of compute")
    ap.add_argument("--runs-per-scenario", type=int, default=24)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    decades = [float(x) for x in args.decades.split(",")]
    t0 = time.perf_counter()
    parts = []
    for family in args.families.split(","):
        for noise in args.noises.split(","):
            curves, params = scenario_runs(args.seed, family, noise, args.runs_per_scenario)
            for h in (float(x) for x in args.horizons.split(",")):
                r = scenario_rows(curves, params, h, decades, args.seed)
                parts.append(r.assign(family=family, noise=noise, horizon=f"{h:g}x"))
                print(f"{family}/{noise} {h:g}x: {time.perf_counter() - t0:.0f} s", flush=True)
    rows = pd.concat(parts, ignore_index=True)
    misspecified = rows[rows["family"] != "sigmoid"].assign(family="all but sigmoid")
    pooled = pd.concat([rows, misspecified], ignore_index=True)
    by_family = summarise(pooled, ["horizon", "decades", "family"])
    lines = [
        *header_lines(
            "Does A's 90% interval cover the curve's limit? (the misspecification simulator)",
            "benchmarks/ceiling_coverage.py",
            time.perf_counter() - t0,
        ),
        f"{args.runs_per_scenario} runs per scenario (family x noise), 48 evaluations each, one default "
        "fit per scenario on the first `1 / h` of each run's compute, once per discrepancy horizon "
        "(`decades`: `Discrepancy(horizon=decades * log 10)`; 1 is the default). `limit_in_90`: the "
        "share of runs whose true limit (the curve's value as compute grows without bound) lies "
        "inside `A`'s 90% interval (nominal 0.90); `below`/`above`: the limit lies below/above it. "
        '`identified`: runs `identify` calls "A identified"; `wrong`: those of them whose limit '
        "lies outside the interval. With 72 runs a family, a coverage of 0.90 is uncertain by about "
        "0.035 (more where runs of one scenario share a batch).",
        "",
        "## By family (pooled over noise models)",
        "",
        *_table(by_family),
        "",
        "## By scenario",
        "",
        *_table(summarise(rows, ["horizon", "decades", "family", "noise"])),
        "",
    ]
    text = "\n".join(lines)
    write_results(text, args.out)
    return rows


if __name__ == "__main__":
    main()
