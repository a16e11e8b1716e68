"""``identify``'s budget sweep on the DAPO curves, checked against their later evaluations.

The issue's own example of a wrong call was the sweep's: a real run declared "A within
+-0.02 from 27k GPU-hours on" whose evaluations kept rising to 89k. This script runs
:func:`bayes_scalerl.analyses.identify.budget_sweep` (the default fit, no simulated
futures) on every ``mean@1`` curve cut at a fraction of its compute, as one batch, as the
package does it (``own``: a curve's cuts belong to its training run, and the verdict's
allowance counts its pseudo-runs of the wide prior per curve) and as it did before
2026-12-07 (``separate``: every cut a run of its own). Each curve's call is read off both
widths the sweep records (``reported``: ``a_width90``, which the sweep read before;
``rule``: ``a_width90_data``, which it reads now) and checked against the mean of the last
quarter of the curve's held-out evaluations (``wrong``: outside the 90% interval of ``A``
reported at the compute of the call; a curve still rising or drifting there would be).

    python benchmarks/dapo_sweep.py --fractions 0.25,0.5 --out benchmarks/results/dapo-sweep.md
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
from dapo_batches import _table  # noqa: E402
from dapo_identify import _late_mean  # noqa: E402
from environment import header_lines, write_results  # noqa: E402
from sweep_copies import run_sweep, summarise, sweep_rows  # noqa: E402

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> pd.DataFrame:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    shared = Path(__file__).resolve().parents[2] / "shared" / "data" / "dapo-metrics"
    p.add_argument("--data", type=Path, default=shared, help="folder of verl logs (read in place)")
    p.add_argument("--fractions", default="0.25,0.5")
    p.add_argument("--copies", default="own,separate")
    p.add_argument("--tolerance", type=float, default=0.02)
    p.add_argument("--gpus", type=float, default=4.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path)
    a = p.parse_args(argv)
    bs.use_all_cpu_cores()
    t0 = time.perf_counter()
    runs = bs.read_any(a.data, format="verl", metric=[METRIC], gpus=a.gpus)
    table = runs.table
    parts = []
    for f in [float(x) for x in a.fractions.split(",") if x]:
        until = table["run"].map(table.groupby("run")["compute"].max() * f)
        cols = [c for c in ("run", "compute", "reward", "training_run") if c in table]
        cut = bs.Runs.from_frame(table[table["compute"] <= until][cols], source=str(a.data))
        late = table[table["compute"] > until].groupby("run").apply(_late_mean, include_groups=False)
        for copies in a.copies.split(","):
            sweep = run_sweep(cut, copies, a.seed, a.tolerance)
            rows = sweep_rows(sweep, late)
            parts.append(rows.assign(fraction=f, copies=copies, late_mean=rows["run"].map(late)))
            print(f"fraction {f:g}, {copies}: {time.perf_counter() - t0:.0f} s", flush=True)
    res = pd.concat(parts, ignore_index=True)
    summary = summarise(res, ["fraction", "copies"])
    summary = summary.rename(columns={"full_inside": "late_inside_full"})
    lines = header_lines(
        "`identify`'s budget sweep on the DAPO curves",
        "benchmarks/dapo_sweep.py",
        time.perf_counter() - t0,
    )
    lines += [
        f"Every `{METRIC}` curve ({runs.n_runs}; GPU-hours = wall hours x {a.gpus:g}) cut at a fraction "
        f"of its compute and swept as one batch (the default fit, fractions 1/8 to 1 of what is seen, "
        f"no simulated futures), tolerance +-{a.tolerance:g}. `own`: the package (a curve's cuts in its "
        "training run; the verdict's allowance per curve); `separate`: every cut a run of its own, as "
        "before 2026-12-07. `called_*`: curves whose width stays within the tolerance from some cut on, "
        "read off `a_width90` (`reported`, the sweep's width before) or `a_width90_data` (`rule`, its "
        "width now); `wrong_*`: of those, the mean of the last quarter of the held-out evaluations lies "
        "outside the 90% interval of `A` reported at the cut of the call. `late_inside_full`: share of "
        "curves whose late mean lies inside the interval from all the data seen.",
        "",
        *_table(summary),
        "",
        "## The curves called",
        "",
    ]
    called = res[res["reached_reported"].notna() | res["reached_rule"].notna()]
    cols = ["fraction", "copies", "run", "reached_reported", "inside_reported", "reached_rule", "inside_rule"]
    lines += [*(_table(called[cols + ["late_mean", "full_width"]]) if len(called) else ["None."]), ""]
    write_results("\n".join(lines), a.out)
    return res


if __name__ == "__main__":
    main()
