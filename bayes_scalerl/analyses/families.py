"""Comparing the curve families (:func:`bayes_scalerl.posterior.families.fit_family`) on the same runs.

:func:`compare_families` fits every family to the same runs and tabulates, per run,
PSIS-LOO (ArviZ's :func:`arviz_stats.loo`) of the fitted points and, when a cutoff
leaves later points out, the CRPS and median absolute error of the predictive draws at
those held-out points.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import NamedTuple

import numpy as np
import pandas as pd
import xarray as xr

from ..data.runs import Runs
from ..posterior.families import FAMILIES, fit_family
from ..posterior.results import FitResult
from .scoring import crps_from_draws, median_abs_error

__all__ = ["compare_families"]


class _Loo(NamedTuple):
    elpd: float
    se: float
    p: float
    k_max: float
    k_bad: int
    elpd_i: np.ndarray


def _loo_per_run(result: FitResult) -> list[_Loo]:
    """PSIS-LOO of each run's fitted points (ArviZ), Pareto-k warnings silenced."""
    import arviz_stats as azs

    dt = result.dt
    post = dt["posterior"].to_dataset()
    ll = result.log_likelihood()["reward"]
    in_fit = dt["constant_data"]["in_fit"].values
    out = []
    for i in range(post.sizes["run"]):
        pts = np.flatnonzero(in_fit[i])
        sub = xr.DataTree.from_dict(
            {
                "posterior": post.isel(run=i),
                "log_likelihood": ll.isel(run=i, point=pts).astype(np.float64).to_dataset(name="reward"),
            }
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            res = azs.loo(sub, pointwise=True, var_name="reward")
        k = np.asarray(res.pareto_k.values, float)
        out.append(
            _Loo(
                float(res.elpd),
                float(res.se),
                float(res.p),
                float(np.max(k)),
                int(np.sum(k > res.good_k)),
                np.asarray(res.elpd_i.values, float),
            )
        )
    return out


def _cutoffs(runs: Runs, fit_until) -> np.ndarray | None:
    """Per-run fit cutoff (inf: no cutoff), or None when there is none at all."""
    if fit_until is None:
        return None
    if isinstance(fit_until, Mapping):
        unknown = [r for r in fit_until if r not in set(runs.names)]
        if unknown:
            raise KeyError(f"fit_until names unknown run(s): {', '.join(map(repr, unknown))}")
        return np.array([float(fit_until.get(r, np.inf)) for r in runs.names])
    return np.full(runs.n_runs, float(fit_until))


def compare_families(
    runs: Runs | pd.DataFrame,
    *,
    families: Sequence[str] = FAMILIES,
    min_compute: float | None = None,
    fit_until: float | Mapping[str, float] | None = None,
    fit_kwargs: Mapping | None = None,
) -> pd.DataFrame:
    """Fit several curve families to every run; compare them by PSIS-LOO and extrapolation.

    Parameters
    ----------
    runs : Runs or pandas.DataFrame
        The curves.
    families : sequence of str
        Families to fit (see :data:`FAMILIES`).
    min_compute : float, optional
        Leave earlier points out of the likelihood (the first evaluation still sets ``R0``).
    fit_until : float or mapping of str to float, optional
        Fit only points with compute <= this: one cutoff for all runs, or one per run
        (runs not named are fitted whole). Later points are scored as extrapolations.
    fit_kwargs : mapping, optional
        Passed to :func:`fit_family` (``chains``, ``warmup``, ``samples``, ``seed``).

    Returns
    -------
    pandas.DataFrame
        One row per run and family, runs in input order: ``run, family, n_points`` (points
        in the likelihood), ``elpd_loo, se, p_loo, pareto_k_max, n_pareto_k_bad`` (points
        with k above ArviZ's threshold ``min(1 - 1/log10(S), 0.7)``: the LOO estimate is
        then unreliable), ``rank`` (1: the highest ``elpd_loo`` of the run),
        ``elpd_diff`` (best minus this, >= 0) and ``diff_se`` (standard error of that
        difference from the pointwise values, 0 for the best), ``r_hat_max, converged``;
        with held-out points also ``n_heldout, crps, median_abs_error`` (means over the
        run's held-out points of the CRPS and of the absolute error of the median of the
        posterior predictive draws of a new evaluation; lower is better).

    Notes
    -----
    The sigmoid's pointwise log-likelihood, like the other families', uses the exactly
    drawn gain of each draw. All families share ``R0``, the window and the noise model, so
    their elpd values are on the same points and comparable within a run.
    """
    if not isinstance(runs, Runs):
        runs = Runs.from_frame(runs)
    families = list(families)
    bad = [f for f in families if f not in FAMILIES]
    if bad or not families:
        raise ValueError(f"families must be a non-empty subset of {FAMILIES}, got {families!r}")
    kwargs = dict(fit_kwargs or {})
    reserved = {"min_compute", "fit_until"} & set(kwargs)
    if reserved:
        raise ValueError(f"fit_kwargs may not set {sorted(reserved)}; use the arguments of compare_families")
    cut = _cutoffs(runs, fit_until)
    fit_runs = runs
    held_c = held_y = None
    if cut is not None:
        table = runs.table
        limit = table["run"].map(dict(zip(runs.names, cut, strict=True))).to_numpy(float)
        keep = table["compute"].to_numpy(float) <= limit
        fit_runs = Runs(table[keep].reset_index(drop=True), runs.source, runs.notes)
        held = table[~keep]
        groups = held.groupby("run", sort=False)
        counts = groups.size()
        width = int(counts.max()) if len(counts) else 0
        if width:
            held_c = np.zeros((runs.n_runs, width))
            held_y = np.full((runs.n_runs, width), np.nan)
            for i, name in enumerate(runs.names):
                if name in counts.index:
                    g = groups.get_group(name)
                    held_c[i, : len(g)] = g["compute"].to_numpy(float)
                    held_y[i, : len(g)] = g["reward"].to_numpy(float)
    rows = []
    for family in families:
        res = fit_family(fit_runs, family, min_compute=min_compute, **kwargs)
        loo = _loo_per_run(res)
        diag = res.diagnostics().set_index("run")
        extra: dict[str, np.ndarray] = {}
        if held_c is not None:
            valid = ~np.isnan(held_y)
            draws = res.predict_draws(held_c, kind="observation", seed=int(kwargs.get("seed", 0)))
            y = np.nan_to_num(held_y)
            n = valid.sum(1)
            with np.errstate(invalid="ignore", divide="ignore"):
                extra["n_heldout"] = n
                extra["crps"] = np.where(valid, crps_from_draws(draws, y, axis=1), 0.0).sum(1) / n
                extra["median_abs_error"] = (
                    np.where(valid, median_abs_error(draws, y, axis=1), 0.0).sum(1) / n
                )
        for i, name in enumerate(runs.names):
            row = {
                "run": name,
                "family": family,
                "n_points": len(loo[i].elpd_i),
                "elpd_loo": loo[i].elpd,
                "se": loo[i].se,
                "p_loo": loo[i].p,
                "pareto_k_max": loo[i].k_max,
                "n_pareto_k_bad": loo[i].k_bad,
                "r_hat_max": float(diag.loc[name, "r_hat_max"]),
                "converged": bool(diag.loc[name, "converged"]),
                "_elpd_i": loo[i].elpd_i,
            }
            for k, v in extra.items():
                row[k] = v[i]
            rows.append(row)
    df = pd.DataFrame(rows)
    df["_order"] = df["run"].map({r: i for i, r in enumerate(runs.names)})
    df["_fam"] = df["family"].map({f: i for i, f in enumerate(families)})
    df = df.sort_values(["_order", "_fam"], kind="stable").reset_index(drop=True)
    df["rank"] = df.groupby("run", sort=False)["elpd_loo"].rank(ascending=False, method="min").astype(int)
    best = df.loc[df.groupby("run", sort=False)["elpd_loo"].idxmax()].set_index("run")
    df["elpd_diff"] = df["run"].map(best["elpd_loo"]) - df["elpd_loo"]
    diff_se = []
    for _, r in df.iterrows():
        d = best.loc[r["run"], "_elpd_i"] - r["_elpd_i"]
        diff_se.append(float(np.sqrt(len(d) * np.var(d))) if len(d) else np.nan)
    df["diff_se"] = diff_se
    cols = [
        "run",
        "family",
        "n_points",
        "elpd_loo",
        "se",
        "p_loo",
        "pareto_k_max",
        "n_pareto_k_bad",
        "rank",
        "elpd_diff",
        "diff_se",
        "r_hat_max",
        "converged",
    ]
    if held_c is not None:
        cols += ["n_heldout", "crps", "median_abs_error"]
    return df[cols]
