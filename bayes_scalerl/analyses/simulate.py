"""Simulated training curves with known parameters (for tests, benchmarks and the demo)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..models.curve import scalerl_curve

__all__ = ["simulate_runs", "random_truth", "random_recipes"]


def random_truth(
    rng: np.random.Generator,
    n_runs: int,
    *,
    A: tuple[float, float] = (0.45, 0.75),
    B: tuple[float, float] = (1.0, 3.0),
    C_mid: tuple[float, float] = (2_000.0, 20_000.0),
    R0: tuple[float, float] = (0.15, 0.35),
    sigma: tuple[float, float] = (0.01, 0.02),
) -> pd.DataFrame:
    """Draw true parameters uniformly (``C_mid`` log-uniformly) in the given ranges.

    Returns a table with columns ``run, A, B, C_mid, R0, sigma``.
    """
    return pd.DataFrame(
        {
            "run": [f"run{i:05d}" for i in range(n_runs)],
            "A": rng.uniform(*A, n_runs),
            "B": rng.uniform(*B, n_runs),
            "C_mid": np.exp(rng.uniform(np.log(C_mid[0]), np.log(C_mid[1]), n_runs)),
            "R0": rng.uniform(*R0, n_runs),
            "sigma": rng.uniform(*sigma, n_runs),
        }
    )


def random_recipes(
    rng: np.random.Generator,
    n_recipes: int,
    seeds: int,
    *,
    A: tuple[float, float] = (0.45, 0.70),
    B: tuple[float, float] = (1.2, 2.5),
    C_mid: tuple[float, float] = (2_000.0, 6_000.0),
    R0: float = 0.3,
    sigma: float = 0.01,
    A_seed_sd: float = 0.015,
    log_seed_sd: float = 0.05,
) -> pd.DataFrame:
    """Recipes with known parameters and seeds scattered around them.

    Recipe parameters are drawn as in :func:`random_truth`; each seed's ``A`` is its
    recipe's plus Normal(0, ``A_seed_sd``) (the ScaleRL paper saw about +-0.015 across
    three seeds), its ``B`` and ``C_mid`` are its recipe's times
    ``exp(Normal(0, log_seed_sd))``.

    Returns
    -------
    pandas.DataFrame
        ``run, recipe, seed, recipe_A, recipe_B, recipe_C_mid, A, B, C_mid, R0, sigma``.
    """
    rec = random_truth(rng, n_recipes, A=A, B=B, C_mid=C_mid)
    rows = []
    for i, r in rec.iterrows():
        for s in range(seeds):
            rows.append(
                {
                    "run": f"recipe{i:03d}/s{s}",
                    "recipe": f"recipe{i:03d}",
                    "seed": s,
                    "recipe_A": r["A"],
                    "recipe_B": r["B"],
                    "recipe_C_mid": r["C_mid"],
                    "A": r["A"] + A_seed_sd * rng.standard_normal(),
                    "B": r["B"] * np.exp(log_seed_sd * rng.standard_normal()),
                    "C_mid": r["C_mid"] * np.exp(log_seed_sd * rng.standard_normal()),
                    "R0": R0,
                    "sigma": sigma,
                }
            )
    return pd.DataFrame(rows)


def simulate_runs(
    truth: pd.DataFrame,
    compute: np.ndarray,
    rng: np.random.Generator,
    *,
    ar1: float = 0.0,
    extra_columns: tuple[str, ...] = (),
) -> pd.DataFrame:
    """Simulate evaluations of each run in ``truth`` on a shared compute grid.

    Parameters
    ----------
    truth : pandas.DataFrame
        Columns ``run, A, B, C_mid, R0, sigma`` (and any in ``extra_columns``).
    compute : ndarray
        Compute grid; a leading 0 gives the evaluation before training, whose
        expected reward is ``R0``.
    rng : numpy.random.Generator
    ar1 : float
        Lag-one autocorrelation of consecutive evaluation errors (0: independent).
    extra_columns : tuple of str
        Columns of ``truth`` copied to every row (``recipe``, ``seed``...).

    Returns
    -------
    pandas.DataFrame
        ``run, compute, reward`` (clipped to [0, 1]) plus ``extra_columns``.
    """
    compute = np.asarray(compute, float)
    n, p = len(truth), len(compute)
    mu = scalerl_curve(
        compute[None, :],
        truth["A"].to_numpy()[:, None],
        truth["B"].to_numpy()[:, None],
        truth["C_mid"].to_numpy()[:, None],
        truth["R0"].to_numpy()[:, None],
    )
    e = rng.standard_normal((n, p))
    if ar1:
        for j in range(1, p):
            e[:, j] = ar1 * e[:, j - 1] + np.sqrt(1 - ar1**2) * e[:, j]
    y = np.clip(mu + truth["sigma"].to_numpy()[:, None] * e, 0.0, 1.0)
    out = pd.DataFrame(
        {
            "run": np.repeat(truth["run"].to_numpy(), p),
            "compute": np.tile(compute, n),
            "reward": y.ravel(),
        }
    )
    for col in extra_columns:
        out[col] = np.repeat(truth[col].to_numpy(), p)
    return out
