"""Benchmark: convergence of the hierarchical fit on small recipe studies.

Usage::

    python benchmarks/hierarchical_small.py --recipes 8 --seeds 3 --studies 0,1,2,3 \
        --out benchmarks/results/hierarchical-small.md

Each study: ``random_recipes`` (recipe A ~ U(0.52, 0.64), C_mid ~ logU(1.5k, 5k)), evaluations
every 250 GPU-hours to 8k, fitted from 1.5k with ``model="hierarchical"`` at the defaults
(4 chains x 500 + 500). Reported: wall time of the fit (the first includes compilation) and
the worst R-hat and smallest bulk ESS at the population level (``*_pop`` and the spreads),
the recipe level (``*_recipe``) and the run level (``A, B, C_mid, sigma``).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

import bayes_scalerl as bs
from bayes_scalerl.analyses.simulate import random_recipes
from bayes_scalerl.posterior.diagnostics import sampler_diagnostics
from bayes_scalerl.posterior.hierarchy import sweeps_per_draw

sys.path.insert(0, str(Path(__file__).resolve().parent))
from environment import machine_line, versions_line, write_results  # noqa: E402


def one_study(seed: int, n_recipes: int, n_seeds: int) -> dict:
    rng = np.random.default_rng(seed)
    truth = random_recipes(rng, n_recipes, n_seeds, A=(0.52, 0.64), C_mid=(1500.0, 5000.0))
    grid = np.arange(0.0, 8000.0 + 1, 250.0)
    frame = bs.simulate_runs(truth, grid, rng, extra_columns=("recipe", "seed"))
    runs = bs.Runs.from_frame(frame, source=f"study{seed}")
    t0 = time.perf_counter()
    res = bs.fit(runs, min_compute=1500, model="hierarchical", seed=seed, progress=False)
    took = time.perf_counter() - t0
    sd = sampler_diagnostics(res.dt).set_index("variable")
    levels = {
        "population": [v for v in sd.index if v.endswith(("_pop", "_sd"))],
        "recipe": [v for v in sd.index if v.endswith("_recipe")],
        "run": ["A", "B", "C_mid", "sigma"],
    }
    out = {"seed": seed, "seconds": took, "divergences": int(sd["divergences"].iloc[0])}
    for level, names in levels.items():
        part = sd.loc[names]
        out[f"{level}_rhat"] = float(part["r_hat_max"].max())
        out[f"{level}_worst"] = str(part["r_hat_max"].idxmax())
        out[f"{level}_ess"] = float(part["ess_bulk_min"].min())
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--recipes", type=int, default=8)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--studies", default="0,1,2,3")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    rows = [one_study(int(s), args.recipes, args.seeds) for s in args.studies.split(",")]
    n_train = args.recipes * args.seeds
    lines = [
        "# Hierarchical fit: convergence on small studies",
        "",
        machine_line(),
        versions_line(),
        f"Command: `python benchmarks/hierarchical_small.py --recipes {args.recipes} --seeds {args.seeds} "
        f"--studies {args.studies}`",
        "",
        f"{args.recipes} recipes x {args.seeds} seeds ({n_train} runs), 4 chains x 500 + 500 kept draws, "
        f"{sweeps_per_draw(n_train)} Gibbs sweeps per kept draw. Worst R-hat (variable) and smallest "
        "bulk ESS per level; the first study's time includes compilation.",
        "",
        "| study | time (s) | population R-hat | pop. ESS | recipe R-hat | recipe ESS | run R-hat | run ESS "
        "| divergences |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['seed']} | {r['seconds']:.1f} | {r['population_rhat']:.4f} ({r['population_worst']}) "
            f"| {r['population_ess']:.0f} | {r['recipe_rhat']:.4f} | {r['recipe_ess']:.0f} "
            f"| {r['run_rhat']:.4f} | {r['run_ess']:.0f} | {r['divergences']} |"
        )
    text = "\n".join(lines) + "\n"
    write_results(text, args.out)


if __name__ == "__main__":
    main()
