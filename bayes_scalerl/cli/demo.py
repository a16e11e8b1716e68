"""The bundled demo data: simulated leave-one-out recipes with the paper's parameters.

The numbers are the ScaleRL paper's Figure 4 leave-one-out fits (A, B, C_mid, reported
for an 8k GPU-hour fit window). The curves are *simulated* from them: two seeds per
recipe (seed-to-seed spread 0.008 on A, the paper saw +-0.015 across three runs),
evaluations every 400 GPU-hours from 0 to 16k, Gaussian noise of 0.01.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..analyses.simulate import simulate_runs

__all__ = ["demo_truth", "demo_runs", "DEMO_FIT_UNTIL", "DEMO_MIN_COMPUTE"]

#: The demo fits up to 8k GPU-hours and extrapolates to 16k, as the paper does.
DEMO_FIT_UNTIL = 8000.0
#: The paper's cutoff: points before 1.5k GPU-hours are a transient.
DEMO_MIN_COMPUTE = 1500.0

_LOO = [  # recipe, A, B, C_mid (paper Fig. 4)
    ("ScaleRL", 0.610, 1.92, 2542.0),
    ("LOO-prompt-lvl-adv-norm", 0.590, 2.09, 2463.0),
    ("LOO-length-penalty", 0.610, 1.68, 2660.0),
    ("LOO-batch", 0.595, 1.84, 2503.0),
    ("LOO-PPO-off-policy-8", 0.605, 1.89, 3409.0),
    ("LOO-no-fp32-precision-fix", 0.610, 1.88, 2857.0),
    ("LOO-sample-avg", 0.600, 1.93, 2621.0),
    ("LOO-uniform-sampling", 0.605, 1.62, 2621.0),
    ("LOO-dapo", 0.610, 1.77, 3093.0),
]


def demo_truth(
    seeds: int = 2, *, seed: int = 2025, A_seed_sd: float = 0.008, log_seed_sd: float = 0.05
) -> pd.DataFrame:
    """True parameters of the demo runs (``run, recipe, seed, A, B, C_mid, R0, sigma``).

    Each seed's ``A`` is the recipe's plus Normal(0, ``A_seed_sd``) noise; its ``B`` and
    ``C_mid`` are the recipe's times ``exp(Normal(0, log_seed_sd))``.
    """
    rng = np.random.default_rng(seed)
    rows = []
    for recipe, A, B, C in _LOO:
        for s in range(seeds):
            rows.append(
                {
                    "run": f"{recipe}/s{s}",
                    "recipe": recipe,
                    "seed": s,
                    "recipe_A": A,
                    "A": A + A_seed_sd * rng.standard_normal(),
                    "B": B * np.exp(log_seed_sd * rng.standard_normal()),
                    "C_mid": C * np.exp(log_seed_sd * rng.standard_normal()),
                    "R0": 0.30,
                    "sigma": 0.01,
                }
            )
    return pd.DataFrame(rows)


def demo_runs(seeds: int = 2, *, seed: int = 2025, A_seed_sd: float = 0.008) -> pd.DataFrame:
    """The simulated demo table: ``run, compute, reward, recipe, seed``."""
    truth = demo_truth(seeds, seed=seed, A_seed_sd=A_seed_sd)
    grid = np.arange(0.0, 16000.0 + 1, 400.0)
    return simulate_runs(truth, grid, np.random.default_rng(seed + 1), extra_columns=("recipe", "seed"))
