"""Does ``identify``'s budget sweep let a run's cut learn from its own later data?

:func:`bayes_scalerl.analyses.identify.budget_sweep` fits every run cut at several budgets
as pseudo-runs of one batched fit. Under the default priors learnt from the batch
(``Priors(from_batch="ceiling")``), each pseudo-run's prior of ``A``, ``B`` and ``C_mid`` is
the population of the *other training runs*; until 2026-12-07 every cut was a training run
of its own, so a run cut at an eighth of its compute learnt its ceiling from the same run
cut at a half, and at all of it. This script measures what that did to the sweep's answer,
"A's 90% interval within +-tolerance from compute X" (``reached_at``), on simulated curves
whose true ceiling is known (:func:`bayes_scalerl.analyses.misspec.simulate_benchmark`'s
single runs, which are not sigmoids except the control), seen up to ``--seen`` of their
budget (default half): a
call is wrong when the true ceiling lies outside the 90% interval of ``A`` of the cut at
``reached_at``, or of the fit on all the data seen.

Each family's runs are swept as one batch of ``--runs`` runs (a user's ablations), and the
first ``--alone`` of them alone (one training run, no other run to learn from). ``--copies``
picks how the pseudo-runs are counted: ``own`` (the package: each cut belongs to its run's
training run, and the verdict's allowance counts pseudo-runs of the wide prior per run) or
``separate`` (each cut a run of its own, the behaviour before). Each sweep's call is read
off both widths it records: ``reported`` (``a_width90``, the reported interval, which the
sweep read before) and ``rule`` (``a_width90_data``, the width ``identify``'s rule reads,
which it reads now). ``wrong``: called, with the true ceiling outside the 90% interval of
``A`` reported at the compute of the call.

    python benchmarks/sweep_copies.py --families sigmoid,creep,power,drift --runs 6 \\
        --copies own,separate --out benchmarks/results/sweep-copies.md
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
import bayes_scalerl.analyses.identify as ident
from bayes_scalerl.analyses.misspec import simulate_benchmark

sys.path.insert(0, str(Path(__file__).resolve().parent))
from dapo_batches import _table  # noqa: E402
from environment import header_lines, write_results  # noqa: E402

__all__ = ["main", "run_sweep", "summarise", "sweep_calls", "sweep_rows"]


def run_sweep(runs: bs.Runs, copies: str, seed: int, tolerance: float = 0.02) -> ident.BudgetSweep:
    """The package's sweep of ``runs``, without futures.

    ``copies="separate"`` makes every pseudo-run its own training run and counts the
    verdict's allowance per copy, as the sweep did before 2026-12-07.
    """
    pieces_fn, allowance_fn = ident._runs_from_pieces, ident._per_run_allowance
    if copies == "separate":

        def pieces(names, ps, source):
            ps = [p._replace(training_run=n) for n, p in zip(names, ps, strict=True)]
            return pieces_fn(names, ps, source)

        ident._runs_from_pieces = pieces
        ident._per_run_allowance = lambda kw, n_pseudo, n_runs: dict(kw)
    try:
        return ident.budget_sweep(
            runs, n_future=0, seed=seed, tolerance=tolerance, fit_kwargs={"progress": False}
        )
    finally:
        ident._runs_from_pieces, ident._per_run_allowance = pieces_fn, allowance_fn


def sweep_rows(sweep: ident.BudgetSweep, truth: pd.Series) -> pd.DataFrame:
    """Each run's call under both widths the sweep records, checked against ``truth`` (by run).

    ``inside_*``: ``truth`` lies inside the 90% interval of ``A`` reported at the compute of
    the call (NaN without a call); ``full_inside``: inside the interval of the fit on all
    the data the sweep saw.
    """
    table = ident.identifiability(sweep.fits["observed"]).set_index("run")
    target = 2.0 * sweep.tolerance
    rows = []
    for name in sweep.table["run"]:
        if name not in sweep._full:
            continue
        w = sweep.widths[(sweep.widths["run"] == name) & (sweep.widths["source"] == "observed")]
        w = w.sort_values("budget")
        full = table.loc[sweep._full[name]]
        row = {
            "run": name,
            "full_width": float(full["a_width90"]),
            "full_width_data": float(full["a_width90_data"]),
            "full_inside": bool(full["a_q05"] <= truth[name] <= full["a_q95"]),
            "first_width": float(w["a_width90"].iloc[0]),
        }
        for col, tag in (("a_width90", "reported"), ("a_width90_data", "rule")):
            k = ident._first_within(w[col].to_numpy(), target)
            at = float(w["budget"].iloc[k]) if k is not None else np.nan
            row[f"reached_{tag}"] = at
            inside = np.nan
            if k is not None:
                cut = table.loc[[p for p in table.index if p.startswith(f"{name}@")]]
                cut = cut[
                    np.isclose(cut["max_fit_compute"], at, rtol=1e-9) | (cut.index == sweep._full[name])
                ]
                c = cut.iloc[0] if len(cut) else full
                inside = float(c["a_q05"] <= truth[name] <= c["a_q95"])
            row[f"inside_{tag}"] = inside
        rows.append(row)
    return pd.DataFrame(rows)


def summarise(res: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """Calls, wrong calls and median widths per group of :func:`sweep_rows`' rows."""
    g = res.groupby(by, sort=False)
    return pd.DataFrame(
        {
            "runs": g.size(),
            "called_reported": g["reached_reported"].apply(lambda x: int(x.notna().sum())),
            "wrong_reported": g["inside_reported"].apply(lambda x: int((x == 0).sum())),
            "called_rule": g["reached_rule"].apply(lambda x: int(x.notna().sum())),
            "wrong_rule": g["inside_rule"].apply(lambda x: int((x == 0).sum())),
            "median_width_first_cut": g["first_width"].median(),
            "median_width_full": g["full_width"].median(),
            "median_width_full_data": g["full_width_data"].median(),
            "full_inside": g["full_inside"].mean(),
        }
    ).reset_index()


def sweep_calls(data: pd.DataFrame, copies: str, seed: int, tolerance: float = 0.02) -> pd.DataFrame:
    """One sweep of the simulated runs in ``data``, checked against their true ceilings."""
    runs = bs.Runs.from_frame(data[["run", "compute", "reward"]], source="<sim>")
    sweep = run_sweep(runs, copies, seed, tolerance)
    return sweep_rows(sweep, data.groupby("run")["true_ceiling"].first())


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--families", default="sigmoid,creep,power,drift")
    ap.add_argument("--noise", default="iid")
    ap.add_argument("--runs", type=int, default=6)
    ap.add_argument("--copies", default="own,separate")
    ap.add_argument("--alone", type=int, default=3, help="runs of each family also swept alone")
    ap.add_argument("--seen", type=float, default=0.5, help="share of each run's budget the sweep sees")
    ap.add_argument("--tolerance", type=float, default=0.02)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    bs.use_all_cpu_cores()
    t0 = time.time()
    fams = a.families.split(",")
    sim = simulate_benchmark(a.seed, families=fams, noises=[a.noise], runs_per_scenario=a.runs)
    sim = sim[sim["role"] == "run"]
    seen = sim[sim["compute"] <= sim["run"].map(sim.groupby("run")["compute"].max() * a.seen)]
    parts = []
    for copies in a.copies.split(","):
        for fam in fams:
            d = seen[seen["family"] == fam]
            parts.append(
                sweep_calls(d, copies, a.seed, a.tolerance).assign(copies=copies, family=fam, batch="batch")
            )
            for name in d["run"].unique()[: a.alone]:
                one = sweep_calls(d[d["run"] == name], copies, a.seed, a.tolerance)
                parts.append(one.assign(copies=copies, family=fam, batch="alone"))
            print(f"{copies} {fam} done ({time.time() - t0:.0f} s)", flush=True)
    res = pd.concat(parts, ignore_index=True)
    summary = summarise(res, ["batch", "copies", "family"])
    lines = header_lines(
        "Does the budget sweep let a run's cut learn from its own later data?",
        "benchmarks/sweep_copies.py",
        time.time() - t0,
    )
    lines += ["## Summary", "", *_table(summary), "", "## Every run", "", *_table(res), ""]
    write_results("\n".join(lines) + "\n", a.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
