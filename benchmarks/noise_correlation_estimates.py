"""How well the batch's AR(1) correlation ``rho`` is estimated, and a candidate estimator.

``Priors(rho="auto")`` (the default) fixes every run's ``rho`` at
:func:`bayes_scalerl.noise_correlation`, a variogram of second differences taken before any
fit. Its ratio is flat at high correlation, so the curves' curvature moves it a long way
there: on dense power laws it reads the cap 0.9, and the fit's band is then too wide (see
the module docstring of ``bayes_scalerl/data/noise.py``). This benchmark puts it beside two
estimates from each run's least-squares residuals (the sigmoid fitted by
:func:`~bayes_scalerl.models.least_squares.refined_residuals`), pooled over the batch by
maximising the sum of the runs' profile log-likelihoods over a grid of ``rho`` (each
run's ``sigma`` profiled out):

``ml``
    The Gaussian AR(1) likelihood of the residuals. A fit pulls its residuals' correlation
    towards 0, by about ``(p + 1) / n`` for ``p`` parameters on ``n`` points.
``reml``
    ``Priors(rho="reml")``
    (:func:`~bayes_scalerl.models.residual_correlation.residual_correlation_arrays`): the
    restricted likelihood (Patterson and Thompson 1971) of the sigmoid linearised at the
    least-squares fit, which takes out that pull.

What the estimates do to the bands is in ``benchmarks/results/rho-reml.md`` (``reml`` is not
the default: it is nearer the truth where curves bend, and not better calibrated). The
simulated AR(1) noise has a correlation of 0.5-0.8 per run (uniform), so a pooled estimate
near 0.65 is right; independent and binomial noise have none.

Run: ``python benchmarks/noise_correlation_estimates.py --seeds 2,3 --n-evals 48,200``
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
from bayes_scalerl.analyses.misspec import FAMILIES, NOISES, simulate_benchmark
from bayes_scalerl.data.noise import estimate_rho, noise_correlation_arrays
from bayes_scalerl.models.least_squares import refined_residuals
from bayes_scalerl.models.residual_correlation import RHO_GRID

sys.path.insert(0, str(Path(__file__).resolve().parent))
from environment import machine_line, versions_line, write_results  # noqa: E402

#: Fewest fitted points a run needs to enter the residual estimates.
MIN_POINTS = 6


def ml_estimate(window) -> float:
    """The plain profile likelihood of each run's least-squares residuals, on :data:`RHO_GRID`."""
    _, resid, _, used = refined_residuals(
        window.compute,
        window.reward,
        window.mask,
        window.R0,
        min_points=MIN_POINTS,
        max_runs=256,
        coarse=True,
    )
    n = used.sum(axis=1)
    keep = n >= MIN_POINTS
    resid, used, n = resid[keep], used[keep], n[keep]
    if not keep.any():
        return 0.0
    best, arg = -np.inf, 0.0
    for rho in RHO_GRID:
        # AR(1) whitening: the first point as it is, then (e_t - rho e_(t-1)) / sqrt(1 - rho^2)
        w = (
            np.concatenate(
                [resid[:, :1], (resid[:, 1:] - rho * resid[:, :-1]) / np.sqrt(1.0 - rho**2)], axis=1
            )
            * used
        )
        s2 = np.maximum(np.sum(w * w, axis=1) / n, 1e-300)
        ll = float(np.sum(-0.5 * (n * np.log(s2) + (n - 1) * np.log1p(-(rho**2)))))
        if ll > best:
            best, arg = ll, float(rho)
    return arg


def run_benchmark(
    seeds: Sequence[int],
    n_evals: Sequence[int],
    horizons: Sequence[float],
    families: Sequence[str],
    noises: Sequence[str],
    runs_per_scenario: int,
) -> pd.DataFrame:
    """Every estimate on every scenario, seed, density and fit window (one row each)."""
    rows = []
    for n in n_evals:
        for seed in seeds:
            df = simulate_benchmark(
                seed, families=families, noises=noises, runs_per_scenario=runs_per_scenario, n_evals=n
            )
            for (family, noise), d in df.groupby(["family", "noise"], sort=False):
                for h in horizons:
                    cut = d["compute"] <= d.groupby("run")["compute"].transform("max") / h
                    w = bs.Runs.from_frame(d.loc[cut, ["run", "compute", "reward"]]).window(R0_fitted=False)
                    rows.append(
                        {
                            "n_evals": n,
                            "horizon": f"{h:g}x",
                            "family": family,
                            "noise": noise,
                            "seed": seed,
                            "variogram": noise_correlation_arrays(w.reward, w.mask),
                            "ml": ml_estimate(w),
                            "reml": estimate_rho(w.compute, w.reward, w.mask, w.R0, "reml"),
                        }
                    )
    return pd.DataFrame(rows)


def to_markdown(df: pd.DataFrame, command: str, wall: float) -> str:
    seeds = "/".join(str(s) for s in sorted(df["seed"].unique()))
    lines = [
        "# The batch's AR(1) correlation: the variogram (default) against residual likelihoods",
        "",
        f"Command: `{command}`",
        "",
        machine_line(),
        versions_line(),
        f"Wall time {wall:.0f} s.",
        "",
        "Each cell: the estimate at each simulation seed "
        f"({seeds}), one batch of a scenario's runs fitted up to 1/h of their budget. Truth: 0.5-0.8 a run "
        "(uniform) for `ar1`, 0 for `iid` and `binomial`.",
        "",
    ]
    methods = ["variogram", "ml", "reml"]
    for (n, h), part in df.groupby(["n_evals", "horizon"], sort=False):
        lines += [f"## {n} evaluations a run, fitted to 1/{h[:-1]} of the budget", ""]
        lines.append("| family | noise | " + " | ".join(methods) + " |")
        lines.append("|---|---|" + "---|" * len(methods))
        for (family, noise), g in part.groupby(["family", "noise"], sort=False):
            cells = ["/".join(f"{v:.2f}" for v in g[m]) for m in methods]
            lines.append(f"| {family} | {noise} | " + " | ".join(cells) + " |")
        ar1 = part[part["noise"] == "ar1"]
        other = part[part["noise"] != "ar1"]
        lines += [
            "",
            "Mean absolute error against 0.65 (`ar1`) and 0 (the others): "
            + ", ".join(
                f"{m} {np.mean(np.r_[np.abs(ar1[m] - 0.65), np.abs(other[m])]):.3f}" for m in methods
            ),
            "",
        ]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> pd.DataFrame:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="2,3")
    ap.add_argument("--n-evals", default="48,200")
    ap.add_argument("--horizons", default="2,4")
    ap.add_argument("--families", default=",".join(FAMILIES))
    ap.add_argument("--noises", default=",".join(NOISES))
    ap.add_argument("--runs-per-scenario", type=int, default=16)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    df = run_benchmark(
        [int(s) for s in args.seeds.split(",")],
        [int(n) for n in args.n_evals.split(",")],
        [float(h) for h in args.horizons.split(",")],
        args.families.split(","),
        args.noises.split(","),
        args.runs_per_scenario,
    )
    command = "python benchmarks/noise_correlation_estimates.py " + shlex.join(
        sys.argv[1:] if argv is None else list(argv)
    )
    text = to_markdown(df, command, time.perf_counter() - t0)
    write_results(text, args.out)
    return df


if __name__ == "__main__":
    main()
