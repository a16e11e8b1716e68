"""How much of one scenario's coverage is its batch's luck: the same curves, new noise.

The default's width beyond the data is learnt from the batch itself (each run refitted on
its earlier points and scored on its later ones, :mod:`bayes_scalerl.models.discrepancy`).
A batch of a few dozen runs learns that scale with an error of its own, and every run of
the batch shares it, so one scenario's coverage in ``benchmarks/misspecification.py`` varies
between batches by more than the run-clustered standard error it reports.

This script keeps one scenario's simulated curves (``simulate_benchmark(seed, ...)``: the
same truths, schedules and noise scales) and draws their evaluation noise again
``--redraws`` times, fitting each batch as the misspecification benchmark does
(``bs.backtest`` on the first ``1 / h`` of every run's compute, the package's default). Per
draw it prints the 90% coverage of the held-out evaluations of the single runs (the
benchmark's cell), the band's mean width, and the batch's learnt discrepancy: the median of
the runs' slope ``tau`` and the refit's mean squared standardised error ``z2`` (1 when the
refit's own predictive is calibrated at its later points; the scale ``tau`` grows with it).

Usage::

    python benchmarks/noise_redraws.py --scenario sigmoid/binomial --redraws 4 --horizon 2 --seed 1
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

import bayes_scalerl as bs
import bayes_scalerl.posterior.calibration as calibration
from bayes_scalerl.analyses.misspec import simulate_benchmark

sys.path.insert(0, str(Path(__file__).resolve().parent))
from environment import header_lines, write_results  # noqa: E402


def redraw(data: pd.DataFrame, noise: str, rng: np.random.Generator) -> np.ndarray:
    """New evaluation noise around the simulated truth ``mu`` (iid or binomial only)."""
    mu = data["mu"].to_numpy(float)
    if noise == "binomial":
        n = data["n_eval"].to_numpy(float)
        return rng.binomial(n.astype(np.int64), np.clip(mu, 0.0, 1.0)) / n
    if noise == "iid":
        return mu + data["noise_sd"].to_numpy(float) * rng.standard_normal(len(mu))
    raise ValueError(f"redraws are for iid or binomial noise, got {noise!r}")


def run(
    scenario: str,
    redraws: int,
    horizon: float,
    seed: int,
    runs_per_scenario: int,
    discrepancy: bs.Discrepancy | None = None,
) -> pd.DataFrame:
    """One row per noise draw: ``draw, coverage90, width90, tau, refit_z2`` (draw 0: the benchmark's).

    ``discrepancy`` replaces the default's settings (``None``: the default).
    """
    family, noise = scenario.split("/")
    base = simulate_benchmark(
        seed, families=(family,), noises=(noise,), runs_per_scenario=runs_per_scenario, pairs_per_scenario=4
    )
    single = set(base.loc[base["role"] == "run", "run"])
    captured: dict[str, np.ndarray] = {}
    real = calibration.scale_posteriors

    def spy(err, var, *args, **kwargs):
        captured.update(err=err, var=var)
        return real(err, var, *args, **kwargs)

    rng = np.random.default_rng([seed, 0x2EDA])
    rows = []
    calibration.scale_posteriors = spy
    try:
        for k in range(redraws + 1):
            data = base if k == 0 else base.assign(reward=redraw(base, noise, rng))
            runs = bs.Runs.from_frame(data[["run", "compute", "reward"]], source=f"<{scenario} draw {k}>")
            bt = bs.backtest(
                runs,
                fraction=1.0 / horizon,
                fit_kwargs={
                    "chains": 4,
                    "warmup": 500,
                    "samples": 500,
                    "progress": False,
                    **({} if discrepancy is None else {"discrepancy": discrepancy}),
                },
                seed=seed,
                baseline=False,
            )
            p = bt.points[(bt.points["method"] == "bayes") & bt.points["run"].isin(single)]
            tau = np.asarray(bt.fit.dt["constant_data"]["discrepancy_tau"].values, float)
            e, v = captured["err"], captured["var"]
            rows.append(
                {
                    "draw": k,
                    "coverage90": float(((p["reward"] >= p["q05"]) & (p["reward"] <= p["q95"])).mean()),
                    "width90": float((p["q95"] - p["q05"]).mean()),
                    "tau": float(np.median(tau)),
                    "refit_z2": float(np.mean(e**2 / v)),
                }
            )
            print(rows[-1], flush=True)
    finally:
        calibration.scale_posteriors = real
    return pd.DataFrame(rows)


def main(argv=None) -> pd.DataFrame:
    """Command line: see the module docstring."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenario", action="append", help="family/noise (iid or binomial); repeatable")
    ap.add_argument("--redraws", type=int, default=4)
    ap.add_argument("--horizon", type=float, default=2.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--runs-per-scenario", type=int, default=48)
    ap.add_argument(
        "--ratio",
        default=None,
        help="the discrepancy's refit ratios, comma-separated (default: the package's, 2)",
    )
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    bs.use_all_cpu_cores()
    scenarios = args.scenario or ["sigmoid/binomial", "sigmoid/iid"]
    t0 = time.perf_counter()
    tables = []
    for s in scenarios:
        disc = None
        if args.ratio:
            ratios = tuple(float(r) for r in args.ratio.split(","))
            disc = bs.Discrepancy(ratio=ratios if len(ratios) > 1 else ratios[0])
        df = run(s, args.redraws, args.horizon, args.seed, args.runs_per_scenario, disc)
        tables.append(df.assign(scenario=s))
    res = pd.concat(tables, ignore_index=True)
    lines = header_lines(
        "Same curves, new noise: one scenario's coverage between batches",
        "benchmarks/noise_redraws.py",
        time.perf_counter() - t0,
    )
    lines += [
        "",
        f"{args.runs_per_scenario} runs (plus 4 seed pairs) a scenario from "
        f"`simulate_benchmark(seed={args.seed})`, fitted on 1/{args.horizon:g} of their compute "
        "with the default; draw 0 is the benchmark's own noise.",
        "",
        "| scenario | draw | coverage90 | width90 | tau (median) | refit z2 |",
        "|---|---|---|---|---|---|",
    ]
    for r in res.itertuples():
        lines.append(
            f"| {r.scenario} | {r.draw} | {r.coverage90:.3f} | {r.width90:.3f} "
            f"| {r.tau:.4f} | {r.refit_z2:.2f} |"
        )
    lines += ["", "| scenario | coverage90 mean | sd between draws |", "|---|---|---|"]
    for s, g in res.groupby("scenario", sort=False):
        lines.append(f"| {s} | {g.coverage90.mean():.3f} | {g.coverage90.std(ddof=1):.3f} |")
    write_results("\n".join(lines) + "\n", args.out)
    return res


if __name__ == "__main__":
    main()
