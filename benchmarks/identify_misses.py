"""Which runs does ``identify`` call wrongly, and could their data have shown it?

The misspecification benchmark counts the runs whose ``A`` is called identified
(:func:`bayes_scalerl.identifiability`) and, among them, those whose true ceiling lies
outside the reported 90% interval. This script looks at those runs one by one on the same
simulated curves (the generators are seeded as
:func:`bayes_scalerl.analyses.misspec.simulate_benchmark` seeds them, so the single runs are
the benchmark's own): for the families whose departure from the sigmoid has a place in
compute (the late drift's ``drift_C``, the creep's ``creep_C``, the second rise's ``C2``, the
jump's ``jump_C``: where the departure is half done) it says whether that place lies beyond
the fitted window, where no fit of the window can see it. It also refits every run on the
first half of its window (``A`` then, against ``A`` now: has the estimate stopped moving?).

Usage::

    python benchmarks/identify_misses.py --families drift,power --horizons 2,4 --seed 1 \\
        --runs-per-scenario 48 --out benchmarks/results/identify-misses.md
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
from bayes_scalerl.analyses.misspec import FAMILIES, HELD_OUT_FAMILIES, NOISES, draw_params, simulate

sys.path.insert(0, str(Path(__file__).resolve().parent))
from environment import header_lines, write_results  # noqa: E402
from misspecification import parse_method  # noqa: E402

__all__ = ["DEPARTURE", "scenario_runs", "verdicts", "main"]

#: The column holding where each family's departure from the sigmoid is half done.
DEPARTURE = {"drift": "drift_C", "creep": "creep_C", "double": "C2", "jump": "jump_C"}


def scenario_runs(seed: int, family: str, noise: str, n_runs: int, n_evals: int = 48):
    """The benchmark's single runs of one scenario and their true parameters."""
    fi = (FAMILIES + HELD_OUT_FAMILIES).index(family)
    ni = NOISES.index(noise)
    trng = np.random.default_rng([seed, fi, 1])
    params = draw_params(trng, family, n_runs, n_evals=n_evals, prefix=f"{family}/{noise}")
    curves = simulate(params, noise, np.random.default_rng([seed, fi, ni, 2]), truth_rng=trng)
    return curves, params


def _fit_identify(
    curves: pd.DataFrame, until: pd.Series, seed: int, fit_kwargs: dict | None = None
) -> pd.DataFrame:
    cut = curves[curves["compute"] <= curves["run"].map(until)]
    binomial = "n_eval" in cut and cut["n_eval"].notna().all()
    cols = ["run", "compute", "reward"] + (["n_eval"] if binomial else [])
    runs = bs.Runs.from_frame(cut[cols], source="<identify misses>")
    res = bs.fit(runs, seed=seed, progress=False, **(fit_kwargs or {}))
    return bs.identifiability(res).set_index("run")


def verdicts(
    curves: pd.DataFrame, params: pd.DataFrame, h: float, seed: int, fit_kwargs: dict | None = None
) -> pd.DataFrame:
    """One row per run: the verdict at ``1 / h`` of the compute, the truth, and the half-window refit.

    ``fit_kwargs``: more arguments of :func:`bayes_scalerl.fit` (both fits).
    """
    c_max = curves.groupby("run")["compute"].max()
    now = _fit_identify(curves, c_max / h, seed, fit_kwargs)
    before = _fit_identify(curves, now["max_fit_compute"] / 2.0, seed + 1, fit_kwargs)
    out = now[
        ["max_fit_compute", "a_median", "a_q05", "a_q95", "a_width90", "a_identified", "converged"]
    ].copy()
    p = params.set_index("run")
    out["true_ceiling"] = p["true_ceiling"]
    out["ceiling_in_90"] = (out["a_q05"] <= out["true_ceiling"]) & (out["true_ceiling"] <= out["a_q95"])
    out["a_median_half"] = before["a_median"].reindex(out.index)
    out["moved"] = ~out["a_median_half"].between(out["a_q05"], out["a_q95"])
    family = str(p["family"].iloc[0])
    col = DEPARTURE.get(family)
    out["departure_at"] = p[col] if col else np.nan
    out["departure_beyond_window"] = out["departure_at"] > out["max_fit_compute"]
    return out.reset_index()


def _fmt(x) -> str:
    if isinstance(x, (bool, np.bool_)):
        return "yes" if x else "no"
    if isinstance(x, float):
        return "-" if np.isnan(x) else f"{x:.3f}" if abs(x) < 100 else f"{x:,.0f}"
    return str(x)


def _table(df: pd.DataFrame) -> list[str]:
    lines = ["| " + " | ".join(df.columns) + " |", "|" + "---|" * len(df.columns)]
    lines += ["| " + " | ".join(_fmt(v) for v in row) + " |" for row in df.itertuples(index=False)]
    return lines


def main(argv: Sequence[str] | None = None) -> pd.DataFrame:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--families", default="drift,power")
    ap.add_argument("--noises", default=",".join(NOISES))
    ap.add_argument("--horizons", default="2,4")
    ap.add_argument("--runs-per-scenario", type=int, default=48)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument(
        "--fit",
        default="{}",
        metavar="JSON",
        help="more bs.fit arguments (JSON, as in misspecification.py's --method), for example "
        '\'{"discrepancy": {"per_run": false}}\'',
    )
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    fit_kwargs = parse_method(f"fit={args.fit}")[1]
    t0 = time.perf_counter()
    rows = []
    for family in args.families.split(","):
        for noise in args.noises.split(","):
            curves, params = scenario_runs(args.seed, family, noise, args.runs_per_scenario)
            for h in (float(x) for x in args.horizons.split(",")):
                v = verdicts(curves, params, h, args.seed, fit_kwargs)
                rows.append(v.assign(family=family, noise=noise, horizon=f"{h:g}x"))
                print(f"{family}/{noise} {h:g}x: {int(v['a_identified'].sum())} identified", flush=True)
    runs = pd.concat(rows, ignore_index=True)
    called = runs[runs["a_identified"]]
    summary = (
        runs.groupby(["family", "horizon"], sort=False)
        .apply(
            lambda d: pd.Series(
                {
                    "runs": len(d),
                    "identified": int(d["a_identified"].sum()),
                    "wrong": int((d["a_identified"] & ~d["ceiling_in_90"]).sum()),
                    "wrong, departure beyond the window": int(
                        (d["a_identified"] & ~d["ceiling_in_90"] & d["departure_beyond_window"]).sum()
                    ),
                    "identified and moved": int((d["a_identified"] & d["moved"]).sum()),
                    "wrong and moved": int((d["a_identified"] & ~d["ceiling_in_90"] & d["moved"]).sum()),
                }
            ),
            include_groups=False,
        )
        .reset_index()
    )
    cols = ["family", "noise", "horizon", "run", "a_q05", "a_q95", "true_ceiling", "ceiling_in_90"]
    cols += ["a_median_half", "moved", "departure_at", "max_fit_compute"]
    lines = [
        *header_lines(
            "Which runs does `identify` call wrongly? (the misspecification simulator)",
            "benchmarks/identify_misses.py",
            time.perf_counter() - t0,
        ),
        "Default fits, one per scenario, on the first `1 / h` of each run's compute (the single runs "
        "of `misspecification.py` with the same seed). `wrong`: called identified with the true "
        "ceiling outside the 90% interval of `A`. `departure beyond the window`: the family's "
        "departure is half done beyond the last fitted compute. `moved`: the median of `A` from a "
        "refit on the first half of the window lies outside today's 90% interval.",
        "",
        *_table(summary),
        "",
        "## The runs called identified",
        "",
        *_table(called[cols]),
        "",
    ]
    text = "\n".join(lines)
    write_results(text, args.out)
    return runs


if __name__ == "__main__":
    main()
