"""A held-out simulator: curves built from problems, not from a curve family.

Every other calibration check in this repository draws curves from a *family* (a sigmoid, a
creep, a power law, ...; :mod:`bayes_scalerl.analyses.misspec`) and adds noise to it. A
second generative story, with no curve family in it at all, checks that the default's bands
do not only fit the families they were measured on (the team scores every claim on
simulators it keeps aside too). Here a run's pass rate is what it is on a real test set: an
average over a finite set of problems, each learnt on its own schedule, evaluated by sampling
answers (item-response style):

- Problem ``i`` of ``n_problems`` is solved with probability
  ``p_i(C) = p0_i + (q_i - p0_i) * sigmoid(b_i (log C + u(C) - log t_i))``: a base rate
  ``p0_i`` (Beta, mean 0.05-0.35), a learnt rate ``q_i`` (near 1, or ``p0_i`` for the share
  ``unlearnable`` of problems that training never cracks), a learning compute ``t_i``
  (log-normal around ``T`` with log-sd ``spread``: a wide spread gives a slow creep, a
  narrow one a sharp rise) and a sharpness ``b_i`` (1.5-4).
- ``u(C)``: the run's luck, shared by all problems and by neighbouring checkpoints: a
  stationary Ornstein-Uhlenbeck process in log compute (sd ``luck_sd``, correlation length
  ``luck_ell``) that moves the run ahead of or behind its schedule.
- An evaluation at compute ``C`` samples ``k`` answers to every problem (``mean@k``):
  ``Binomial(k, p_i(C)) / k`` averaged over the problems.
- Evaluations are evenly spaced in steps, compute growing like ``step ** gamma``
  (``gamma`` 1-1.4), as real logs are; the first is at step 0 (compute 0, the base model).

The run's true ceiling is ``mean_i q_i``: what its evaluations converge to with unlimited
compute on this test set. Nothing here is a sigmoid in compute: the mean of sigmoids with
spread-out ``t_i`` has heavier tails than any one of them, and the shared luck is a smooth
departure of the kind the discrepancy is meant for.

Three scenarios mirror the public DAPO logs' test sets: ``aime`` (30 problems, ``mean@16``),
``amc`` (83, ``mean@4``) and ``math`` (500, ``mean@1``). Each run is fitted with
:func:`bayes_scalerl.backtest` on the first ``1 / h`` of its compute (``h`` 2 and 4) and
every later evaluation is scored, the default (``bayes``) beside version 0.1's model
(``gaussian``) and the paper's least squares with its residual bootstrap (``boot``). The
identify verdict (:func:`bayes_scalerl.identifiability`) is checked against the true ceiling.
No setting of the package was chosen on these curves.

Usage::

    python benchmarks/item_response.py --runs 32 --horizons 2,4 --seed 0 \\
        --out benchmarks/results/item-response.md
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.special import expit

import bayes_scalerl as bs

sys.path.insert(0, str(Path(__file__).resolve().parent))
from environment import machine_line, versions_line, write_results  # noqa: E402
from misspecification import _table, clustered_se  # noqa: E402

__all__ = [
    "SCENARIOS",
    "Scenario",
    "draw_runs",
    "draw_problems",
    "evaluate",
    "simulate",
    "seed_pairs",
    "score",
    "summarise",
    "main",
]


@dataclass(frozen=True)
class Scenario:
    """A test set: how many problems and how many answers sampled per problem."""

    n_problems: int
    k: int


#: Test sets shaped like the public DAPO logs' AIME, AMC and MATH500 metrics.
SCENARIOS = {"aime": Scenario(30, 16), "amc": Scenario(83, 4), "math": Scenario(500, 1)}


def draw_runs(
    rng: np.random.Generator, n_runs: int, budget: tuple[float, float] = (8_000.0, 64_000.0)
) -> pd.DataFrame:
    """Each run's settings (one row per run).

    Columns: ``budget`` (largest compute, log-uniform in ``budget``), ``gamma`` (compute grows
    like ``step ** gamma``), ``T`` (median learning compute, log-uniform from a 30th of the
    budget to its half), ``spread`` (log-sd of the problems' learning computes, 0.4-1.6),
    ``unlearnable`` (share of problems never learnt, 0.1-0.5), ``p0_mean`` (mean base rate,
    0.05-0.35), ``luck_sd`` (0-0.3 in log compute) and ``luck_ell`` (0.1-0.6).
    """
    lo, hi = np.log(budget[0]), np.log(budget[1])
    b = np.exp(rng.uniform(lo, hi, n_runs))
    return pd.DataFrame(
        {
            "run": [f"r{i:03d}" for i in range(n_runs)],
            "budget": b,
            "gamma": rng.uniform(1.0, 1.4, n_runs),
            "T": b * np.exp(rng.uniform(np.log(1 / 30), np.log(1 / 2), n_runs)),
            "spread": rng.uniform(0.4, 1.6, n_runs),
            "unlearnable": rng.uniform(0.1, 0.5, n_runs),
            "p0_mean": rng.uniform(0.05, 0.35, n_runs),
            "luck_sd": rng.uniform(0.0, 0.3, n_runs),
            "luck_ell": rng.uniform(0.1, 0.6, n_runs),
        }
    )


def _ou(rng: np.random.Generator, x: np.ndarray, sd: float, ell: float) -> np.ndarray:
    """A stationary Ornstein-Uhlenbeck path at increasing points ``x`` (exact transitions)."""
    out = np.empty_like(x)
    out[0] = sd * rng.standard_normal()
    for j in range(1, x.size):
        a = np.exp(-(x[j] - x[j - 1]) / ell)
        out[j] = a * out[j - 1] + sd * np.sqrt(1.0 - a * a) * rng.standard_normal()
    return out


def draw_problems(
    rng: np.random.Generator, runs: pd.DataFrame, scenario: Scenario
) -> list[dict[str, np.ndarray]]:
    """Each run's test set as its training sees it: ``p0``, ``q``, ``t``, ``b`` per problem."""
    n = scenario.n_problems
    out = []
    for r in runs.itertuples(index=False):
        p0 = rng.beta(1.0, (1.0 - r.p0_mean) / r.p0_mean, n)
        learnable = rng.random(n) >= r.unlearnable
        q = np.where(learnable, np.maximum(p0, rng.beta(8.0, 1.0, n)), p0)
        t = r.T * np.exp(r.spread * rng.standard_normal(n))
        out.append({"p0": p0, "q": q, "t": t, "b": rng.uniform(1.5, 4.0, n)})
    return out


def evaluate(
    rng: np.random.Generator,
    runs: pd.DataFrame,
    problems: list[dict[str, np.ndarray]],
    scenario: Scenario,
    n_evals: int = 48,
) -> pd.DataFrame:
    """One training of every run (its luck) and its evaluations: ``run, compute, reward, n_eval``.

    ``n_eval`` (problems x answers) lets a binomial noise model see the test set's size.
    """
    rows = []
    k = scenario.k
    steps = np.arange(n_evals) / (n_evals - 1)
    for r, pr in zip(runs.itertuples(index=False), problems, strict=True):
        compute = r.budget * steps**r.gamma
        logc = np.log(np.maximum(compute, 1e-300))
        x = np.log(r.budget) + np.log(steps[1:])  # the luck's clock, in log compute
        luck = np.zeros(n_evals)
        if r.luck_sd > 0:
            luck[1:] = _ou(rng, x, r.luck_sd, r.luck_ell)
        z = pr["b"][None, :] * (logc[:, None] + luck[:, None] - np.log(pr["t"])[None, :])
        p = pr["p0"][None, :] + (pr["q"] - pr["p0"])[None, :] * expit(z)
        p[0] = pr["p0"]  # compute 0: the base model
        reward = rng.binomial(k, p).mean(axis=1) / k
        rows.append(
            pd.DataFrame({"run": r.run, "compute": compute, "reward": reward, "n_eval": p.shape[1] * k})
        )
    return pd.concat(rows, ignore_index=True)


def simulate(
    rng: np.random.Generator, runs: pd.DataFrame, scenario: Scenario, n_evals: int = 48
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Evaluations of every run (long table, see :func:`evaluate`) and each run's truth.

    ``truth``: the run's settings and ``true_ceiling`` (``mean_i q_i``).
    """
    problems = draw_problems(rng, runs, scenario)
    curves = evaluate(rng, runs, problems, scenario, n_evals)
    return curves, runs.assign(true_ceiling=[float(pr["q"].mean()) for pr in problems])


def seed_pairs(
    rng: np.random.Generator, runs: pd.DataFrame, scenario: Scenario, n_evals: int = 48
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Two seeds of every run: the same settings and test set, their own luck and answers.

    The seeds of run ``r`` are ``r/s0`` and ``r/s1``; their true ceilings are equal, so
    ``compare`` calling either "higher" is wrong. Returns ``(curves, truth)`` as
    :func:`simulate` does, ``truth`` with a ``pair`` column.
    """
    problems = draw_problems(rng, runs, scenario)
    curves, truth = [], []
    for s in (0, 1):
        named = runs.assign(run=runs["run"] + f"/s{s}")
        curves.append(evaluate(rng, named, problems, scenario, n_evals))
        truth.append(named.assign(pair=runs["run"], true_ceiling=[float(pr["q"].mean()) for pr in problems]))
    return pd.concat(curves, ignore_index=True), pd.concat(truth, ignore_index=True)


def score(
    curves: pd.DataFrame,
    truth: pd.DataFrame,
    h: float,
    seed: int,
    fit_kwargs: dict | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Backtest every run on its first ``1 / h`` of compute, in one batch.

    ``truth`` has one row per run (``run, true_ceiling``, and ``pair`` for the seeds of a
    pair, empty or missing for single runs). Returns ``(points, per_run, pairs)``: the
    backtest's held-out points of the single runs (every method); per run, the default
    fit's identify verdict beside the true ceiling; per pair, ``compare``'s verdict on ``A``.
    """
    runs = bs.Runs.from_frame(curves, source="<item-response simulator>")
    bt = bs.backtest(
        runs, fraction=1.0 / h, seed=seed, bootstrap=200, fit_kwargs={"progress": False, **(fit_kwargs or {})}
    )
    pair_of = truth.set_index("run")["pair"] if "pair" in truth else pd.Series(dtype=object)
    single = [r for r in truth["run"] if not isinstance(pair_of.get(r), str)]
    ident = bs.identifiability(bt.fit)[["run", "converged", "a_median", "a_q05", "a_q95", "a_identified"]]
    per_run = ident.merge(truth[["run", "true_ceiling"]], on="run")
    per_run = per_run[per_run["run"].isin(single)]
    per_run["ceiling_in_90"] = (per_run["a_q05"] <= per_run["true_ceiling"]) & (
        per_run["true_ceiling"] <= per_run["a_q95"]
    )
    fitted = set(bt.fit.run_names)
    verdicts = []
    for pair, g in truth[truth["run"].map(lambda r: isinstance(pair_of.get(r), str))].groupby(
        "pair", sort=False
    ):
        a, b = g["run"].tolist()
        if not {a, b} <= fitted:
            continue
        r = bs.compare(bt.fit, a, b, params=("A",)).iloc[0]
        verdicts.append(
            {
                "pair": pair,
                "p_a_greater": float(r["p_a_greater"]),
                "higher": str(r["verdict"]).endswith(" higher"),
            }
        )
    points = bt.points[bt.points["run"].isin(single)]
    return points, per_run, pd.DataFrame(verdicts, columns=["pair", "p_a_greater", "higher"])


def summarise(points: pd.DataFrame) -> pd.DataFrame:
    """One row per scenario, horizon and method: coverage (with its run-clustered se), width, CRPS."""
    rows = []
    for (scen, h, method), p in points.groupby(["scenario", "horizon", "method"], sort=False):
        row = {
            "scenario": scen,
            "horizon": h,
            "method": method,
            "runs": p["run"].nunique(),
            "points": len(p),
        }
        if p["covered90"].notna().all():
            row["coverage50"] = float(p["covered50"].astype(float).mean())
            row["coverage90"] = float(p["covered90"].astype(float).mean())
            row["coverage90_se"] = clustered_se(p["covered90"].astype(float), p["run"])
            row["width90"] = float((p["q95"] - p["q05"]).mean())
        row["crps"] = float(p["crps"].mean())
        rows.append(row)
    return pd.DataFrame(rows)


def main(argv: Sequence[str] | None = None) -> pd.DataFrame:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=32, help="single runs per scenario")
    ap.add_argument("--pairs", type=int, default=8, help="seed pairs per scenario")
    ap.add_argument("--horizons", default="2,4")
    ap.add_argument("--scenarios", default=",".join(SCENARIOS))
    ap.add_argument("--n-evals", type=int, default=48)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--model",
        choices=("independent", "hierarchical"),
        default="independent",
        help="model of the default fit (hierarchical: every curve its own recipe, one population)",
    )
    ap.add_argument("--rho", help="AR(1) rho of the default fit: 'auto' (variogram), 'reml' or a number")
    ap.add_argument(
        "--priors",
        choices=("batch", "fixed"),
        default="batch",
        help="priors of the default fit: A, B and C_mid's learnt from the batch (the default, "
        "the CLI's --priors batch), or the fixed ones (--priors fixed; tables before 2026-12-07 "
        "without --priors)",
    )
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    fit_kwargs: dict = {"model": args.model}
    priors: dict = {} if args.priors == "batch" else {"from_batch": False}
    if args.rho is not None:
        priors["rho"] = args.rho if args.rho in ("auto", "reml", "sampled") else float(args.rho)
    if priors:
        fit_kwargs["priors"] = bs.Priors(**priors)
    horizons = [float(h) for h in args.horizons.split(",")]
    t0 = time.perf_counter()
    points, per_run, pairs = [], [], []
    for si, name in enumerate(args.scenarios.split(",")):
        rng = np.random.default_rng([args.seed, si])
        settings = draw_runs(rng, args.runs)
        curves, truth = simulate(rng, settings, SCENARIOS[name], n_evals=args.n_evals)
        if args.pairs:
            pair_settings = draw_runs(rng, args.pairs).assign(run=lambda d: "p" + d["run"].str[1:])
            pc, pt = seed_pairs(rng, pair_settings, SCENARIOS[name], n_evals=args.n_evals)
            curves = pd.concat([curves, pc], ignore_index=True)
            truth = pd.concat([truth, pt], ignore_index=True)
        if args.model == "hierarchical":  # every curve its own recipe, pooled as one population
            curves["recipe"] = curves["run"]
        for h in horizons:
            t1 = time.perf_counter()
            p, r, v = score(curves, truth, h, seed=args.seed, fit_kwargs=fit_kwargs)
            points.append(p.assign(scenario=name, horizon=h))
            per_run.append(r.assign(scenario=name, horizon=h))
            pairs.append(v.assign(scenario=name, horizon=h))
            print(f"{name} {h:g}x: {time.perf_counter() - t1:.0f} s", flush=True)
    pts = pd.concat(points, ignore_index=True)
    pts = pts[pts["method"] != "ls"]
    runs = pd.concat(per_run, ignore_index=True)
    table = summarise(pts)
    ident = (
        runs.groupby(["scenario", "horizon"], sort=False)
        .apply(
            lambda d: pd.Series(
                {
                    "runs": len(d),
                    "converged": float(d["converged"].mean()),
                    "identified": int(d["a_identified"].sum()),
                    "wrong": int((d["a_identified"] & ~d["ceiling_in_90"]).sum()),
                    "ceiling_in_90_all": float(d["ceiling_in_90"].mean()),
                }
            ),
            include_groups=False,
        )
        .reset_index()
    )
    for c in ("runs", "identified", "wrong"):
        ident[c] = ident[c].astype(int)
    verdicts = pd.concat(pairs, ignore_index=True)
    called = (
        verdicts.groupby(["scenario", "horizon"], sort=False)["higher"]
        .agg(["size", "sum"])
        .reset_index()
        .rename(columns={"size": "pairs", "sum": "called_higher"})
    )
    called["share"] = called["called_higher"] / called["pairs"]
    called["called_higher"] = called["called_higher"].astype(int)
    took = time.perf_counter() - t0
    lines = [
        "# A held-out simulator: pass rates averaged over problems (item response)",
        "",
        "Command: `python "
        + " ".join(shlex.quote(a) for a in ["benchmarks/item_response.py", *sys.argv[1:]])
        + "`",
        "",
        machine_line(),
        versions_line(),
        f"Wall time {took:.0f} s.",
        "",
        "The simulator and the columns are described in the docstring of "
        "`benchmarks/item_response.py`. `bayes`: the default; `gaussian`: version 0.1's exact "
        "sigmoid with independent noise; `boot`: the paper's least squares with a residual "
        "bootstrap. `coverage90_se`: Monte Carlo standard error, points clustered by run. "
        f"Model of `bayes`: {args.model}" + (f", AR(1) rho {args.rho}." if args.rho is not None else "."),
        "",
        "## Held-out evaluations",
        "",
        *_table(table),
        "",
        "## The identify verdict against the true ceiling (the default fit)",
        "",
        "`identified`: runs whose `A` was called identified; `wrong`: those of them whose true "
        "ceiling lies outside the 90% interval of `A`; `ceiling_in_90_all`: the share of all runs "
        "whose true ceiling lies inside it.",
        "",
        *_table(ident),
        "",
        "## Seed pairs: `compare` on `A` calls one of two equal truths higher (P > 0.9)",
        "",
        "Two seeds of one run share its settings and test set (so their true ceilings are "
        "equal) and differ in their luck and their sampled answers; every pair is fitted in the "
        "same batch as the single runs. Every 'higher' is wrong.",
        "",
        *_table(called),
        "",
    ]
    text = "\n".join(lines)
    write_results(text, args.out)
    return table


if __name__ == "__main__":
    main()
