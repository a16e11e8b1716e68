"""Benchmark: the hierarchical fit at 100, 500 and 2,000 runs, beside the independent fit.

Usage::

    python benchmarks/hierarchical_scale.py --sizes 100,500,2000 \
        --out benchmarks/results/hierarchical-scale.md

Each size: simulated recipe sweeps (``random_recipes``: recipes of 5 seeds, recipe A ~
U(0.52, 0.64), B ~ U(1.2, 2.5), C_mid ~ logU(1.5k, 5k), seed spread 0.015 on A and 5% on
B and C_mid, noise 0.01, evaluations every 250 GPU-hours to 8k, fitted from 1.5k). In one
process, after a warm-up fit of each model on other data of the same shapes (so neither
timing includes compilation), it times

- the independent fit with the exact sigmoid (``discrepancy=False``, the stage-1 fit of
  the hierarchical model) and with the default calibrated discrepancy;
- the hierarchical fit (``model="hierarchical"``: the independent fit on the engine,
  then the blocked Gibbs sweeps of :mod:`bayes_scalerl.models.pooling`), exact
  (``discrepancy=False``) and with the default calibrated discrepancy (one per recipe);

with 4 chains x 500 warm-up x 500 draws, and reports the hierarchical fit's worst R-hat
and smallest bulk ESS over every parameter at every level (runs, recipes, population)
the number of parameters (array elements) whose R-hat exceeds 1.01, its divergent
transitions (those of the independent fits its proposals come from), and how many passes
the pooled chains ran, exact / default (2: they failed the convergence check after the
first and ran on, every second draw kept; the timings include it).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

import bayes_scalerl as bs
from bayes_scalerl.analyses.simulate import random_recipes
from bayes_scalerl.posterior.diagnostics import _chain_draw_first, convergence, sampler_draws

sys.path.insert(0, str(Path(__file__).resolve().parent))
from environment import machine_line, versions_line  # noqa: E402


def _runs(n_runs: int, seed: int) -> bs.Runs:
    rng = np.random.default_rng(seed)
    truth = random_recipes(rng, n_runs // 5, 5, A=(0.52, 0.64), C_mid=(1500.0, 5000.0))
    df = bs.simulate_runs(truth, np.arange(0.0, 8001.0, 250.0), rng, extra_columns=("recipe", "seed"))
    return bs.Runs.from_frame(df, source=f"<{n_runs} runs>")


def _timed(runs, **kw):
    t0 = time.perf_counter()
    res = bs.fit(runs, min_compute=1500, log_likelihood=False, **kw)
    return res, time.perf_counter() - t0


def _convergence(dt):
    """Worst R-hat, smallest bulk ESS, parameters over 1.01, parameters, worst variable."""
    post = dt["posterior"].to_dataset()
    r_max, ess_min, n_over, n_all, worst = 0.0, np.inf, 0, 0, ""
    for v in post.data_vars:
        c = convergence(_chain_draw_first(sampler_draws(post, v)))
        r, e = np.ravel(c["r_hat"]), np.ravel(c["ess_bulk"])
        n_over += int(np.sum(r > 1.01))
        n_all += r.size
        ess_min = min(ess_min, float(np.nanmin(e)))
        if np.nanmax(r) > r_max:
            r_max, worst = float(np.nanmax(r)), v
    return r_max, ess_min, n_over, n_all, worst


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="100,500,2000")
    p.add_argument(
        "--seed",
        type=int,
        default=0,
        help="another study and sampler seed (0: the study of every table so far)",
    )
    p.add_argument("--out", default=None)
    a = p.parse_args()
    bs.use_all_cpu_cores()
    sizes = [int(s) for s in a.sizes.split(",")]
    lines = [
        "# The hierarchical fit at scale",
        "",
        machine_line(),
        versions_line(),
        f"Command: `python benchmarks/hierarchical_scale.py --sizes {a.sizes}"
        + (f" --seed {a.seed}`" if a.seed else "`"),
        "",
        "Recipes of 5 seeds, 4 chains x 500 + 500, every timing after a warm-up fit of the same "
        "shapes (no compilation). `exact` = `discrepancy=False` (the independent exact fit is "
        "what the hierarchical fit runs first); `default` = with the calibrated discrepancy "
        "(the package's default; one refit of every run on its earlier points). R-hat and ESS "
        "of the default hierarchical fit: worst over every parameter at every level (`A` and "
        "`A_recipe` without their offsets, as the package reports them).",
        "",
        "| runs | recipes | independent exact (s) | independent default (s) | hierarchical exact (s) | "
        "hierarchical default (s) | exact: hier / indep | default: hier / indep | max R-hat | "
        "parameters with R-hat > 1.01 | min bulk ESS | worst variable | divergences | pooled passes |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for n in sizes:
        study = n + 100_000 * a.seed
        warm = _runs(n, 1000 + study)
        _timed(warm, discrepancy=False, seed=a.seed)
        _timed(warm, seed=a.seed)
        _timed(warm, model="hierarchical", seed=a.seed)
        _timed(warm, model="hierarchical", discrepancy=False, seed=a.seed)
        runs = _runs(n, study)
        _, t_exact = _timed(runs, discrepancy=False, seed=a.seed)
        _, t_default = _timed(runs, seed=a.seed)
        res_x, t_hx = _timed(runs, model="hierarchical", discrepancy=False, seed=a.seed)
        res, t_h = _timed(runs, model="hierarchical", seed=a.seed)
        r_max, ess_min, n_over, n_all, worst = _convergence(res.dt)
        div = int(res.dt["sample_stats"]["diverging"].values.sum())
        row = (
            f"| {n} | {n // 5} | {t_exact:.1f} | {t_default:.1f} | {t_hx:.1f} | {t_h:.1f} | "
            f"{t_hx / t_exact:.2f} | {t_h / t_default:.2f} | "
            f"{r_max:.4f} | {n_over} of {n_all} | {ess_min:.0f} | {worst} | {div} | "
            f"{res_x.settings['pool_passes']} / {res.settings['pool_passes']} |"
        )
        print(row, flush=True)
        lines.append(row)
        if a.out:
            tmp = Path(a.out).with_suffix(".tmp")
            tmp.write_text("\n".join(lines) + "\n")
            os.replace(tmp, a.out)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
