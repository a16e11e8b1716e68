"""Per-run convergence diagnostics from ArviZ (rank R-hat, bulk/tail ESS, divergences)."""

from __future__ import annotations

import arviz_stats as azs
import numpy as np
import pandas as pd
import xarray as xr

__all__ = ["run_diagnostics", "sampler_diagnostics", "RHAT_MAX", "ESS_MIN"]

#: A run with any parameter above this R-hat is not converged.
RHAT_MAX = 1.01
#: A run with any parameter below this bulk ESS (all chains together) is not converged.
ESS_MIN = 100.0


def _max_over_vars(ds, var_names) -> np.ndarray:
    return np.max(np.stack([ds[v].values for v in var_names]), axis=0)


def _min_over_vars(ds, var_names) -> np.ndarray:
    return np.min(np.stack([ds[v].values for v in var_names]), axis=0)


def _bfmi(energy: np.ndarray) -> np.ndarray:
    """Smallest E-BFMI over chains; ``energy`` has leading ``(chain, draw)`` axes."""
    num = np.mean(np.diff(energy, axis=1) ** 2, axis=1)
    den = np.var(energy, axis=1)
    return np.min(num / np.where(den > 0, den, np.nan), axis=0)


def sampler_diagnostics(dt: xr.DataTree) -> pd.DataFrame:
    """One row per posterior variable (every variable, population and recipe levels too).

    Returns
    -------
    pandas.DataFrame
        Columns ``variable, size, r_hat_max, ess_bulk_min, ess_tail_min, converged``,
        and the fit's total ``divergences`` and smallest ``bfmi_min`` on every row.
    """
    post = dt["posterior"].to_dataset()
    names = list(post.data_vars)
    rhat = azs.rhat(post, var_names=names)
    ess_b = azs.ess(post, var_names=names, method="bulk")
    ess_t = azs.ess(post, var_names=names, method="tail")
    stats = dt["sample_stats"].to_dataset()
    div = int(stats["diverging"].values.sum())
    bfmi = float(np.nanmin(_bfmi(stats["energy"].values)))
    rows = []
    for v in names:
        r, b, t = float(rhat[v].max()), float(ess_b[v].min()), float(ess_t[v].min())
        rows.append((v, int(post[v].isel(chain=0, draw=0).size), r, b, t, div, bfmi))
    df = pd.DataFrame(
        rows,
        columns=["variable", "size", "r_hat_max", "ess_bulk_min", "ess_tail_min", "divergences", "bfmi_min"],
    )
    df["converged"] = (
        (df["r_hat_max"] <= RHAT_MAX) & (df["ess_bulk_min"] >= ESS_MIN) & (df["divergences"] == 0)
    )
    return df


def run_diagnostics(dt: xr.DataTree, var_names: list[str]) -> pd.DataFrame:
    """One row per run: point count, worst R-hat and ESS, divergences, E-BFMI, converged flag.

    Parameters
    ----------
    dt : xarray.DataTree
        A fit's DataTree (groups ``posterior``, ``sample_stats``, ``constant_data``).
    var_names : list of str
        Posterior variables the diagnostics cover.

    Returns
    -------
    pandas.DataFrame
        Columns ``run, n_points, r_hat_max, ess_bulk_min, ess_tail_min, divergences,
        bfmi_min, converged``. ``converged`` needs R-hat <= 1.01, bulk ESS >= 100 and no
        divergent transition.
    """
    post = dt["posterior"].to_dataset()
    rhat = _max_over_vars(azs.rhat(post, var_names=var_names), var_names)
    ess_b = _min_over_vars(azs.ess(post, var_names=var_names, method="bulk"), var_names)
    ess_t = _min_over_vars(azs.ess(post, var_names=var_names, method="tail"), var_names)
    stats = dt["sample_stats"].to_dataset()
    n_runs = post.sizes["run"]
    # a joint (hierarchical) sampler has one set of statistics for all runs
    div = np.broadcast_to(stats["diverging"].sum(("chain", "draw")).values.astype(int), (n_runs,))
    bfmi = np.broadcast_to(_bfmi(stats["energy"].values), (n_runs,))
    n_points = dt["constant_data"]["in_fit"].to_dataset()["in_fit"].sum("point").values.astype(int)
    converged = (rhat <= RHAT_MAX) & (ess_b >= ESS_MIN) & (div == 0)
    return pd.DataFrame(
        {
            "run": post["run"].values.astype(str),
            "n_points": n_points,
            "r_hat_max": rhat,
            "ess_bulk_min": ess_b,
            "ess_tail_min": ess_t,
            "divergences": div,
            "bfmi_min": bfmi,
            "converged": converged,
        }
    )
