"""``identify`` on the DAPO ``mean@1`` curves fitted on their first half: default vs ``--priors batch``.

A check on real curves, whose true ceilings are unknown: how many runs each verdict calls
identified, the widths behind the calls (the fit's and, under priors learnt from the batch,
the run's own data's), and whether the mean of each called run's last quarter of held-out
evaluations lies in its 90% interval of ``A`` (a curve still rising or drifting there would
not).

    python benchmarks/dapo_identify.py --data ../shared/data/dapo-metrics \
        --out benchmarks/results/dapo-identify.md
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import pandas as pd

import bayes_scalerl as bs

sys.path.insert(0, str(Path(__file__).resolve().parent))
from environment import header_lines, write_results  # noqa: E402

METRIC = "val-core/*/acc/mean@1"
#: The fits: "default" the fixed priors (the default until 2026-12-07; this table's name),
#: "batch" the priors learnt from the batch (the default since).
VERDICTS = {"default": bs.Priors(from_batch=False), "batch": bs.Priors(from_batch="ceiling")}


def _late_mean(g: pd.DataFrame) -> float:
    g = g.sort_values("compute")
    return float(g["reward"].tail(max(1, len(g) // 4)).mean())


def main(argv=None) -> pd.DataFrame:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="../shared/data/dapo-metrics")
    ap.add_argument("--gpus", type=float, default=4.0)
    ap.add_argument("--fraction", type=float, default=0.5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    table = bs.read_any(args.data, format="verl", metric=[METRIC], gpus=args.gpus).table
    until = table["run"].map(table.groupby("run")["compute"].max() * args.fraction)
    cols = [c for c in ("run", "compute", "reward", "training_run") if c in table]
    cut = bs.Runs.from_frame(table[table["compute"] <= until][cols], source=args.data)
    late = table[table["compute"] > until].groupby("run").apply(_late_mean, include_groups=False)
    out = {}
    for name, priors in VERDICTS.items():
        d = bs.identifiability(bs.fit(cut, seed=args.seed, progress=False, priors=priors)).set_index("run")
        d["late_mean"] = late.reindex(d.index)
        d["late_in_90"] = d["late_mean"].between(d["a_q05"], d["a_q95"])
        out[name] = d
    both = pd.concat(out, axis=1)
    called = both[[(n, "a_identified") for n in VERDICTS]].any(axis=1)
    summary = [
        f"| {n} | {len(d)} | {int(d['a_identified'].sum())} | "
        f"{int((d['a_identified'] & ~d['late_in_90']).sum())} | "
        f"{d['a_width90'].median():.3f} | {d['a_width90_data'].median():.3f} |"
        for n, d in out.items()
    ]
    keep = ["a_width90", "a_width90_data", "a_contraction", "a_q05", "a_q95", "late_mean", "a_identified"]
    detail = both.loc[called, [(n, k) for n in VERDICTS for k in keep]]
    detail.columns = [f"{n} {k}" for n, k in detail.columns]
    lines = [
        *header_lines(
            "`identify` on the DAPO curves, default and `--priors batch`",
            "benchmarks/dapo_identify.py",
            time.perf_counter() - t0,
        ),
        f"Every `{METRIC}` curve fitted on its first {args.fraction:g} of compute (GPU-hours = wall "
        f"hours x {args.gpus:g}). `late outside`: called identified, and the mean of the last quarter "
        "of the held-out evaluations lies outside the 90% interval of `A`.",
        "",
        "| verdict | runs | identified | late outside | median a_width90 | median a_width90_data |",
        "|---|---|---|---|---|---|",
        *summary,
        "",
        "## The runs either verdict calls identified",
        "",
        detail.round(3).to_markdown(),
        "",
    ]
    text = "\n".join(lines)
    write_results(text, args.out)
    return both


if __name__ == "__main__":
    main()
