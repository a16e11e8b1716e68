"""``identify``'s verdict on the DAPO curves: the default rule against the band's allowance.

The verdict ``A identified`` reads the run's own data plus an allowance for departures
from the sigmoid beyond the data. The band's allowance keeps a share of 0.02 of the
discrepancy's wide prior, whatever the batch's size; the verdict's keeps at least one
pseudo-run of it (``Discrepancy.verdict_weight``), so that a batch of a handful of runs
cannot vouch for one run's shape beyond its data. Both rules read the same fit (the
band's from the fit's own offsets, as a fit without the verdict's scales would), so the
only difference is the rule. Each ``mean@1`` curve is fitted on its first ``fraction`` of
compute, as one batch and in batches of about ``--batch-size`` curves (whole training
runs, in file order, as ``dapo_batches.py``); a call is checked against the mean of the
last quarter of the curve's held-out evaluations (``late outside``: outside the reported
90% interval of ``A``; a curve still rising or drifting there would be).

    python benchmarks/dapo_verdicts.py --fractions 0.25,0.5 --batch-size 6 \\
        --out benchmarks/results/dapo-verdicts.md
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

import bayes_scalerl as bs
from bayes_scalerl.posterior.results import FitResult

sys.path.insert(0, str(Path(__file__).resolve().parent))
from dapo_backtest import METRIC  # noqa: E402
from dapo_batches import _table, batches_of  # noqa: E402
from dapo_identify import _late_mean  # noqa: E402
from environment import header_lines, write_results  # noqa: E402

__all__ = ["band_rule", "main"]


def band_rule(result: FitResult) -> FitResult:
    """The same fit without the verdict's scales: its verdict reads the band's offsets."""
    dt = result.dt.copy()
    cd = dt["constant_data"].to_dataset()
    if "discrepancy_verdict" in cd:
        dt["constant_data"] = cd.drop_vars("discrepancy_verdict")
    return FitResult(dt)


def verdicts(table: pd.DataFrame, names: list[str], fraction: float, seed: int, source: str) -> pd.DataFrame:
    """Both rules' verdicts on the curves ``names`` fitted on their first ``fraction``."""
    part = table[table["run"].isin(names)]
    until = part["run"].map(part.groupby("run")["compute"].max() * fraction)
    cols = [c for c in ("run", "compute", "reward", "training_run") if c in part]
    cut = bs.Runs.from_frame(part[part["compute"] <= until][cols], source=source)
    late = part[part["compute"] > until].groupby("run").apply(_late_mean, include_groups=False)
    res = bs.fit(cut, seed=seed, progress=False)
    rows = []
    for rule, r in (("default (one pseudo-run)", res), ("band's share", band_rule(res))):
        d = bs.identifiability(r).set_index("run")
        d["late_mean"] = late.reindex(d.index)
        d["late_outside"] = d["a_identified"] & ~d["late_mean"].between(d["a_q05"], d["a_q95"])
        rows.append(d.assign(rule=rule).reset_index())
    return pd.concat(rows, ignore_index=True)


def main(argv: Sequence[str] | None = None) -> pd.DataFrame:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    shared = Path(__file__).resolve().parents[2] / "shared" / "data" / "dapo-metrics"
    p.add_argument("--data", type=Path, default=shared, help="folder of verl logs (read in place)")
    p.add_argument("--fractions", default="0.25,0.5")
    p.add_argument("--batch-size", type=int, default=6)
    p.add_argument("--gpus", type=float, default=4.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path)
    a = p.parse_args(argv)
    bs.use_all_cpu_cores()
    t0 = time.perf_counter()
    runs = bs.read_any(a.data, format="verl", metric=[METRIC], gpus=a.gpus)
    groups = batches_of(runs, a.batch_size)
    parts = []
    for f in [float(x) for x in a.fractions.split(",") if x]:
        for label, batches in (("one batch", [runs.names]), (f"batches of ~{a.batch_size}", groups)):
            for names in batches:
                d = verdicts(runs.table, names, f, a.seed, str(a.data))
                parts.append(d.assign(fraction=f, fits=label))
            print(f"fraction {f:g}, {label}: {time.perf_counter() - t0:.0f} s", flush=True)
    all_ = pd.concat(parts, ignore_index=True)
    summary = (
        all_.groupby(["fraction", "fits", "rule"], sort=False)
        .agg(
            curves=("run", "size"),
            identified=("a_identified", "sum"),
            late_outside=("late_outside", "sum"),
            median_width90=("a_width90", "median"),
            median_width90_rule=("a_width90_data", "median"),
            median_width90_sigmoid=("a_width90_sigmoid", "median"),
        )
        .reset_index()
    )
    sizes = [len(g) for g in groups]
    lines = header_lines(
        "`identify` on the DAPO curves: the verdict's rule against the band's allowance",
        "benchmarks/dapo_verdicts.py",
        time.perf_counter() - t0,
    )
    lines += [
        f"Every `{METRIC}` curve ({runs.n_runs}; GPU-hours = wall hours x {a.gpus:g}), fitted with "
        f"the default on its first fraction of compute, as one batch and in {len(sizes)} batches of "
        f"{min(sizes)}-{max(sizes)} curves. Both rules read each fit: `default` reads at least "
        f"`Discrepancy().verdict_weight` = {bs.Discrepancy().verdict_weight:g} pseudo-run of the "
        "discrepancy's wide prior, `band's share` the fit's own offsets (a share of "
        f"{bs.Discrepancy().prior_share:g}). `late_outside`: called identified, and the mean of the "
        "last quarter of the held-out evaluations lies outside the reported 90% interval of `A`. "
        "`median_width90_rule`: the width the rule reads (`a_width90_data`).",
        "",
        *_table(summary),
        "",
        "## The runs either rule calls identified",
        "",
    ]
    called = all_.groupby(["fraction", "fits", "run"])["a_identified"].transform("any")
    cols = ["fraction", "fits", "rule", "run", "a_q05", "a_q95", "a_width90_data", "a_width90_sigmoid"]
    detail = all_[called][cols + ["late_mean", "a_identified"]]
    lines += [*(_table(detail) if len(detail) else ["None."]), ""]
    write_results("\n".join(lines), a.out)
    return all_


if __name__ == "__main__":
    main()
