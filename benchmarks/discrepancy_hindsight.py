"""The discrepancy's scales on real curves: learnt from the data, or known in hindsight?

The calibrated discrepancy (:mod:`bayes_scalerl.models.discrepancy`) learns its scales from a
leave-future-out refit of each run on its points up to ``c_last / 2``. On real curves the band
beyond ``c_last`` can still be too narrow (the AIME curves fitted on their first half,
``results/dapo-backtest-aime.md``). Is that the rule's fault, or would no scale do better? This
benchmark puts the rule beside scales that no fit can have: those learnt from the fitted
runs' *own future errors*, pooled over the set (``hindsight``), and those learnt from another
set's future errors (``from <set>``: what a reference set of finished runs would give).

For each set of curves (``--set NAME=PATTERN``, metric patterns of the verl logs in ``--data``)
and fraction ``f``, every curve is fitted on its compute up to ``f`` times its largest (the
default model without the discrepancy) and refitted on its points up to half of that, as
:func:`bayes_scalerl.posterior.calibration.calibrate` does. Curves with fewer than
``MIN_POINTS + 2`` points before that half are left out (the package gives them the batch's
scales). Every held-out evaluation is then scored with the main fit's predictive mean and
variance and each rule's scales (the normal approximation of
``benchmarks/discrepancy_transfer.py``; ``none_draws`` checks it against the fit's own draws):

- ``none``: no discrepancy;
- ``lfo``: the package's rule (each run's scales from its refit's errors, the batch's
  distribution as prior);
- ``hindsight``: one distribution for the set, learnt by the same maximum likelihood from the
  main fit's errors at the held-out evaluations themselves (not a method: a reference);
- ``from <set>``: that distribution learnt on another set at the same fraction.

Usage::

    python benchmarks/discrepancy_hindsight.py --data ../shared/data/dapo-metrics \\
        --fractions 0.25,0.5 --out benchmarks/results/discrepancy-hindsight.md
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
from bayes_scalerl.data.runs import MIN_POINTS
from bayes_scalerl.models.discrepancy import SCALE_GRID, Discrepancy

sys.path.insert(0, str(Path(__file__).resolve().parent))
from discrepancy_transfer import _coverage, error_scales, moments  # noqa: E402
from environment import machine_line, versions_line, write_results  # noqa: E402

__all__ = ["SETS", "fit_set", "scales", "main"]

#: The default sets: the issue's 42 ``mean@1`` curves and the 40 AIME curves never tuned on.
SETS = {"mean@1": "val-core/*/acc/mean@1", "AIME": "val-core/AIME*/acc/mean@*"}


def fit_set(table: pd.DataFrame, fraction: float, seed: int) -> tuple[list[str], pd.DataFrame, pd.DataFrame]:
    """Main fit on ``fraction`` of each curve, refit on half of that; their held-out moments.

    Returns ``(names, main, refit)``: the curves kept, and :func:`moments` of the main fit
    at every later evaluation and of the refit at the main fit's later points.
    """
    c_max = table.groupby("run")["compute"].max()
    fitted = table[table["compute"] <= table["run"].map(c_max * fraction)]
    c_last = fitted.groupby("run")["compute"].max()
    n_inner = fitted[fitted["compute"] <= fitted["run"].map(c_last / 2)].groupby("run").size()
    keep = n_inner[n_inner >= MIN_POINTS + 2].index
    runs = bs.Runs.from_frame(table[table["run"].isin(keep)])
    main_runs = bs.Runs.from_frame(fitted[fitted["run"].isin(keep)])
    fit = bs.fit(main_runs, discrepancy=False, seed=seed, progress=False)
    c_last = c_last.loc[keep]
    main = moments(fit, runs, c_last)
    mt = main_runs.table
    inner = bs.Runs.from_frame(mt[mt["compute"] <= mt["run"].map(c_last / 2)])
    refit = bs.fit(inner, discrepancy=False, seed=seed + 1, progress=False)
    ref = moments(refit, main_runs, inner.table.groupby("run")["compute"].max(), c_last)
    return list(fit.run_names), main, ref


def scales(errors: pd.DataFrame, names: list[str], per_run: bool) -> np.ndarray:
    """Posterior weights on the scale grid from the errors of :func:`moments` (run, grid, grid)."""
    return error_scales(errors, {n: i for i, n in enumerate(names)}, Discrepancy(per_run=per_run))


def _cell(v) -> str:
    if isinstance(v, float):
        return "-" if v != v else f"{v:.3f}"
    return str(v)


def main(argv: Sequence[str] | None = None) -> pd.DataFrame:
    argv = list(sys.argv[1:] if argv is None else argv)
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    shared = Path(__file__).resolve().parents[2] / "shared" / "data" / "dapo-metrics"
    p.add_argument("--data", type=Path, default=shared, help="folder of verl logs (read in place)")
    p.add_argument("--set", action="append", default=None, help="NAME=PATTERN, repeatable (default: SETS)")
    p.add_argument("--fractions", default="0.25,0.5")
    p.add_argument("--gpus", type=float, default=4.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path)
    a = p.parse_args(argv)
    sets = dict(s.split("=", 1) for s in a.set) if a.set else dict(SETS)
    fractions = [float(x) for x in a.fractions.split(",") if x]
    t0 = time.perf_counter()
    tables = {
        n: bs.read_any(a.data, format="verl", metric=[pat], gpus=a.gpus).table for n, pat in sets.items()
    }
    fits = {(n, f): fit_set(tables[n], f, a.seed) for n in sets for f in fractions}
    k = SCALE_GRID.size
    rows = []
    for f in fractions:
        pooled = {n: scales(fits[n, f][1], fits[n, f][0], per_run=False)[0] for n in sets}
        for n in sets:
            names, main, ref = fits[n, f]
            none = np.zeros((len(names), k, k))
            none[:, 0, 0] = 1.0
            pit = main["pit_draws"].to_numpy()
            row = {
                "set": n,
                "fraction": f,
                "curves": len(names),
                "points": len(main),
                "none_draws": float(np.mean((pit > 0.05) & (pit < 0.95))),
                "none": _coverage(main, none),
                "lfo": _coverage(main, scales(ref, names, per_run=True)),
                "hindsight": _coverage(main, np.broadcast_to(pooled[n], (len(names), k, k))),
            }
            for other in sets:
                if other != n:
                    row[f"from {other}"] = _coverage(main, np.broadcast_to(pooled[other], (len(names), k, k)))
            rows.append(row)
    df = pd.DataFrame(rows)
    cols = list(df.columns)
    lines = [
        "# The discrepancy's scales on real curves: learnt from the data, or known in hindsight?",
        "",
        f"Command: `python benchmarks/discrepancy_hindsight.py {shlex.join(argv)}`",
        "",
        machine_line(),
        versions_line(),
        f"Wall time {time.perf_counter() - t0:.0f} s.",
        "",
        "Sets: " + ", ".join(f"{n} = `{pat}`" for n, pat in sets.items()) + ". 90% coverage of the held-out "
        "evaluations by rule (see the module docstring; the normal approximation, `none_draws` the "
        "fit's own draws without the discrepancy).",
        "",
        "| " + " | ".join(cols) + " |",
        "|" + "---|" * len(cols),
    ]
    for _, r in df.iterrows():
        lines.append("| " + " | ".join(_cell(r[c]) for c in cols) + " |")
    text = "\n".join(lines) + "\n"
    write_results(text, a.out)
    return df


if __name__ == "__main__":
    main()
