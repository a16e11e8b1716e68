"""Recipe comparisons on simulated studies with known truth: independent vs hierarchical.

Each study: recipes with known (A, B, C_mid), three seeds each (``--seeds``) scattered
around them (seed spread 0.015 on A, the ScaleRL paper's), evaluations every 250 GPU-hours
(``--step``) to 8k (``--budget``), noise 0.01, fitted from 1.5k on. For each model
(independent and hierarchical, each with the default calibrated discrepancy and exact,
``discrepancy=False``) it reports:

- the error of each run's A (posterior median against the run's true A);
- among recipe pairs the package calls "x higher" (P(A_x > A_y) > 0.9), how often the
  truth (the recipes' true A) agrees. Independent fits are compared twice from the same
  fit: by default (with the seed term of ``bs.compare``, its ``tau`` in the table) and
  with ``seed_sd=0`` (these seeds only, version 0.1).

Usage::

    python benchmarks/compare_recipes.py --studies 4 --out benchmarks/results/compare-recipes.md
"""

from __future__ import annotations

import argparse
import sys
import time
from itertools import combinations
from pathlib import Path

import numpy as np

import bayes_scalerl as bs
from bayes_scalerl.analyses.comparisons import compare
from bayes_scalerl.analyses.simulate import random_recipes
from bayes_scalerl.posterior.diagnostics import sampler_diagnostics

sys.path.insert(0, str(Path(__file__).resolve().parent))
from environment import machine_line, versions_line, write_results  # noqa: E402

#: Row label -> ``bs.fit`` arguments.
MODELS = {
    "independent": {"model": "independent"},
    "independent exact": {"model": "independent", "discrepancy": False},
    "hierarchical": {"model": "hierarchical"},
    "hierarchical exact": {"model": "hierarchical", "discrepancy": False},
}


def _calls(t, rec_A) -> tuple[int, int]:
    called = t[(t.p_a_greater > 0.9) | (t.p_a_greater < 0.1)]
    agree = [(rec_A[r.a] > rec_A[r.b]) == (r.p_a_greater > 0.9) for r in called.itertuples(index=False)]
    return len(called), int(np.sum(agree))


def one_study(
    seed: int,
    n_recipes: int,
    seeds: int,
    warmup: int,
    samples: int,
    models=tuple(MODELS),
    step: float = 250.0,
    budget: float = 8000.0,
):
    rng = np.random.default_rng(seed)
    truth = random_recipes(rng, n_recipes, seeds, A=(0.52, 0.64), C_mid=(1500.0, 5000.0))
    grid = np.arange(0.0, budget + 1, step)
    df = bs.simulate_runs(truth, grid, rng, extra_columns=("recipe", "seed"))
    runs = bs.Runs.from_frame(df, source=f"study{seed}")
    out = {}
    for model in models:
        kw = MODELS[model]
        t0 = time.perf_counter()
        res = bs.fit(runs, min_compute=1500, warmup=warmup, samples=samples, seed=seed, **kw)
        took = time.perf_counter() - t0
        a_med = np.median(res.draws("A"), axis=1)
        err = a_med - truth.set_index("run").loc[res.run_names, "A"].to_numpy()
        t = compare(res)
        rec_A = truth.groupby("recipe")["recipe_A"].first()
        called, agree = _calls(t, rec_A)
        if kw["model"] == "hierarchical":
            sd = sampler_diagnostics(res.dt)
            clean = bool(sd.converged.all())
            rhat = float(sd.r_hat_max.max())
            div = int(sd.divergences.iloc[0])
        else:
            d = res.diagnostics()
            clean = bool(d.converged.all())
            rhat = float(d.r_hat_max.max())
            div = int(d.divergences.sum())
        common = dict(
            err=err,
            pairs=len(list(combinations(rec_A.index, 2))),
            seconds=took,
            rhat=rhat,
            div=div,
            clean=clean,
        )
        out[model] = dict(common, called=called, agree=agree, tau=float(t["seed_sd"].iloc[0]))
        if kw["model"] == "independent":
            called, agree = _calls(compare(res, seed_sd=0.0), rec_A)
            out[f"{model}, seed_sd 0"] = dict(common, called=called, agree=agree, tau=0.0)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--studies", type=int, default=4)
    p.add_argument("--recipes", type=int, default=8)
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1000)
    p.add_argument("--samples", type=int, default=1000)
    p.add_argument("--step", type=float, default=250.0, help="GPU-hours between evaluations (default 250)")
    p.add_argument("--budget", type=float, default=8000.0, help="last evaluation's GPU-hours (default 8000)")
    p.add_argument("--models", default=",".join(MODELS), help=f"comma-separated among {','.join(MODELS)}")
    p.add_argument("--out", default=None)
    a = p.parse_args()
    bs.use_all_cpu_cores()
    models = [m.strip() for m in a.models.split(",") if m.strip()]
    unknown = [m for m in models if m not in MODELS]
    if unknown:
        p.error(f"unknown model(s) {unknown}; known: {list(MODELS)}")
    rows: dict[str, list] = {}
    for s in range(a.studies):
        res = one_study(100 + s, a.recipes, a.seeds, a.warmup, a.samples, models, a.step, a.budget)
        for m, r in res.items():
            rows.setdefault(m, []).append(r)
            print(
                f"study {s} {m}: rmse(A) {np.sqrt(np.mean(r['err'] ** 2)):.4f}, called {r['called']}"
                f"/{r['pairs']}, agree {r['agree']}, {r['seconds']:.0f} s, max R-hat {r['rhat']:.4f}, "
                f"divergences {r['div']}",
                flush=True,
            )
    lines = [
        "# Recipe comparisons on simulated studies (known truth)",
        "",
        machine_line(),
        versions_line(),
        f"Command: `python benchmarks/compare_recipes.py --studies {a.studies} --recipes {a.recipes} "
        f"--seeds {a.seeds} --warmup {a.warmup} --samples {a.samples} --models {a.models} "
        f"--step {a.step:g} --budget {a.budget:g}`",
        "",
        f"{a.studies} studies x {a.recipes} recipes x {a.seeds} seeds; recipe A ~ U(0.52, 0.64), seed "
        "spread 0.015 on A and 5% on B, C_mid; C_mid ~ logU(1.5k, 5k); noise 0.01; evaluations every "
        f"{a.step:g} GPU-hours, fit on 1.5k-{a.budget:g}. "
        "`independent`, `hierarchical`: the package's default (calibrated discrepancy; a recipe's "
        "ceiling carries the mean of its runs' offsets); `exact`: `discrepancy=False`. "
        "Fit times: mean over studies, the first study's with compilation.",
        "",
        "| model | RMSE of run A | pairs called (P > 0.9) | truth agrees | share agreeing | seed sd (mean) | "
        "fit time (s, mean) | max R-hat | divergences | all converged |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for m, rs in rows.items():
        err = np.concatenate([r["err"] for r in rs])
        called = sum(r["called"] for r in rs)
        agree = sum(r["agree"] for r in rs)
        pairs = sum(r["pairs"] for r in rs)
        share = agree / called if called else float("nan")
        lines.append(
            f"| {m} | {np.sqrt(np.mean(err**2)):.4f} | {called} / {pairs} | {agree} | {share:.3f} | "
            f"{np.mean([r['tau'] for r in rs]):.4f} | "
            f"{np.mean([r['seconds'] for r in rs]):.0f} | {max(r['rhat'] for r in rs):.4f} | "
            f"{sum(r['div'] for r in rs)} | {sum(r['clean'] for r in rs)} / {len(rs)} studies |"
        )
    if "hierarchical" in models:
        # the notebook's data (02_compare_recipes): the paper's LOO recipes x 3 seeds
        runs = bs.Runs.from_frame(bs.demo_runs(3, A_seed_sd=0.015), source="<LOO study>")
        t0 = time.perf_counter()
        res = bs.fit(
            runs, min_compute=1500, fit_until=8000, model="hierarchical", warmup=a.warmup, samples=a.samples
        )
        sd = sampler_diagnostics(res.dt)
        lines += [
            "",
            f"Notebook data (`bs.demo_runs(3, A_seed_sd=0.015)`, 27 runs, hierarchical, "
            f"{a.warmup} + {a.samples}): max R-hat over every parameter {sd.r_hat_max.max():.4f} "
            f"({sd.sort_values('r_hat_max').variable.iloc[-1]}), "
            f"min bulk ESS {sd.ess_bulk_min.min():.0f}, divergences {int(sd.divergences.iloc[0])}, "
            f"{time.perf_counter() - t0:.0f} s.",
        ]
    text = "\n".join(lines) + "\n"
    write_results(text, a.out)


if __name__ == "__main__":
    main()
