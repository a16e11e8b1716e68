"""Where ``Priors(shape_noise="auto")`` finds smooth departures from the sigmoid.

For every scenario of the misspecification simulator (family x evaluation noise) and every
fit window (the first ``1/h`` of each run's compute), prints the batch's estimate of the
departures (``kappa``, their sd over the evaluation noise's ``sigma``; ``ell``, their length
scale in e-folds of compute), the evidence for them (log-likelihood gain over the best model
without them) and the AR(1) correlation fitted with them; and the same for the DAPO curves
with ``--data``. Where ``kappa`` is 0 a fit with ``shape_noise="auto"`` is, bit for bit, the
fit without the term, so this table says which cells of the misspecification and DAPO
benchmarks the setting can change at all. No sampling: a least-squares fit per run and a
grid of Gaussian likelihoods (:func:`bayes_scalerl.models.shape_noise.shape_noise_arrays`).

Example::

    python benchmarks/shape_noise_estimates.py --runs-per-scenario 48 --n-evals 48 \\
        --data ../shared/data/dapo-metrics
"""

from __future__ import annotations

import argparse
import platform
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

import bayes_scalerl as bs
from bayes_scalerl.analyses.misspec import FAMILIES, NOISES, simulate_scenario
from bayes_scalerl.data.noise import noise_correlation_arrays
from bayes_scalerl.models.shape_noise import shape_noise_arrays

__all__ = ["estimate", "main"]


def estimate(runs: bs.Runs, fraction: float) -> dict:
    """The estimate on each run's first ``fraction`` of its compute (as ``backtest`` cuts)."""
    t = runs.table
    cut = t.groupby("run")["compute"].transform("max") * fraction
    w = bs.Runs.from_frame(t[t["compute"] <= cut]).window()
    rho = noise_correlation_arrays(w.reward, w.mask)
    t0 = time.perf_counter()
    kappa, ell, gain, rho_fit = shape_noise_arrays(w.compute, w.reward, w.mask, w.R0, rho, rho_free=True)
    took = time.perf_counter() - t0
    return {
        "rho_variogram": rho,
        "kappa": kappa,
        "ell": ell if kappa > 0 else np.nan,
        "gain": gain,
        "rho_fit": rho_fit,
        "seconds": took,
    }


def main(argv: Sequence[str] | None = None) -> pd.DataFrame:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs-per-scenario", type=int, default=48)
    ap.add_argument("--n-evals", type=int, default=48)
    ap.add_argument("--horizons", default="2,4,8")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--data", type=Path, default=None, help="the DAPO metric logs (optional)")
    args = ap.parse_args(argv)
    horizons = [float(h) for h in args.horizons.split(",")]
    rows = []
    for fam in FAMILIES:
        for noise in NOISES:
            df = simulate_scenario(
                np.random.default_rng(args.seed), fam, noise, args.runs_per_scenario, n_evals=args.n_evals
            )
            runs = bs.Runs.from_frame(df[["run", "compute", "reward"]])
            for h in horizons:
                rows.append({"data": f"{fam}/{noise}", "horizon": f"{h:g}x", **estimate(runs, 1.0 / h)})
    if args.data is not None:
        runs = bs.read_any(args.data, format="verl", metric=["val-core/*/acc/mean@1"], gpus=4)
        for f in (0.25, 0.5, 1.0):
            rows.append({"data": "DAPO (42 curves)", "horizon": f"fraction {f:g}", **estimate(runs, f)})
    out = pd.DataFrame(rows)
    print(
        f"# {platform.node()}, {platform.processor() or platform.machine()}, bayes_scalerl {bs.__version__}"
    )
    print(f"# {args.runs_per_scenario} runs a scenario, {args.n_evals} evaluations a run, seed {args.seed}\n")
    print(_markdown(out))
    return out


def _markdown(df: pd.DataFrame) -> str:
    """A Markdown table (numbers to three significant digits)."""

    def cell(v) -> str:
        return f"{v:.3g}" if isinstance(v, float) else str(v)

    lines = ["| " + " | ".join(df.columns) + " |", "|" + "---|" * len(df.columns)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
