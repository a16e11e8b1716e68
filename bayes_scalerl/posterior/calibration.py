"""Leave-future-out refits that calibrate the discrepancy beyond the data.

See :mod:`bayes_scalerl.models.discrepancy` for the model. :func:`calibrate` refits every
run on its points up to ``c_last / r`` for each ratio ``r`` of the settings, with the same
engine and sampler settings (one batched fit of every refit, padded to the main fit's
width so that it reuses the compiled program),
scores the refit's predictive mean at the run's later fitted points, pools the excess
errors into each run's discrepancy scale and draws the ceiling offsets ``Delta``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NamedTuple

import jax
import numpy as np
import pandas as pd

from ..data.runs import MIN_POINTS, Runs, in_likelihood
from ..engine import runtime, sample_window
from ..models.discrepancy import (
    Discrepancy,
    discrepancy_shape,
    draw_offsets,
    mix_scales,
    prior_pseudo_runs,
    run_likelihoods,
    scale_summary,
)
from ..models.shape_noise import ar1_lags, noise_forecast, steps_ahead

__all__ = ["Calibration", "calibrate"]


class Calibration(NamedTuple):
    """The calibrated discrepancy of every run.

    Attributes
    ----------
    omega, tau : ndarray, shape (run,)
        Root mean square of the run's level-offset sd and of its deviation's slope
        (reward per unit of log compute) under its posterior.
    own : ndarray of bool, shape (run,)
        Whether the run had its own leave-future-out estimate (else the batch's scale).
    level, delta : ndarray, shape (run, chain, draw)
        Draws of the level offset ``Delta_0`` and of the whole ceiling offset
        ``Delta_0 + Delta``.
    verdict : ndarray, shape (run, grid, grid), or None
        Each run's posterior over the ``(omega, tau)`` grid under the distribution that
        ``identify``'s verdict reads (``Discrepancy.verdict_weight`` pseudo-runs of the
        wide prior), float32; None where the band's share already gives the prior as
        many (the verdict then reads ``delta``).
    """

    omega: np.ndarray
    tau: np.ndarray
    own: np.ndarray
    level: np.ndarray
    delta: np.ndarray
    verdict: np.ndarray | None


def _inner_split(runs: Runs, c_last: np.ndarray, ratio: float, min_compute, R0_fitted: bool):
    """Table of every run's points up to ``c_last / ratio`` and its later fitted points.

    Returns ``(inner_runs, held, rows)``: the refit's runs, the held-out rows (run,
    compute, reward, n_eval, cut) and the index of each refitted run in ``runs``.
    """
    table = runs.table
    cut = dict(zip(runs.names, c_last / ratio, strict=True))
    last = dict(zip(runs.names, c_last, strict=True))
    c = table["compute"].to_numpy(float)
    cut_col = table["run"].map(cut).to_numpy(float)
    last_col = table["run"].map(last).to_numpy(float)
    fitted = in_likelihood(c, min_compute=min_compute, R0_fitted=R0_fitted) & (c <= last_col)
    before = c <= cut_col
    df = table.assign(_fit=fitted, _before=before, _cut=cut_col)
    # a run is refitted if it keeps enough points before its cut and has fitted points after it
    counts = pd.DataFrame({"run": df["run"], "inner": fitted & before, "later": fitted & ~before})
    counts = counts.groupby("run", sort=False).sum().reindex(runs.names)
    ok_mask = (counts["inner"].to_numpy() >= MIN_POINTS + 1) & (counts["later"].to_numpy() > 0)
    ok = [n for n, k in zip(runs.names, ok_mask, strict=True) if k]
    keep = df["run"].isin(ok)
    inner = df[keep & df["_before"]].drop(columns=["_fit", "_before", "_cut"]).reset_index(drop=True)
    held = df[keep & df["_fit"] & ~df["_before"]].reset_index(drop=True)
    rows = np.flatnonzero(ok_mask)
    return dataclasses.replace(runs, table=inner), held, rows


#: Runs per block of the refit's predictive moments (bounds their memory).
_BLOCK = 64


def _predictive_moments(model, draws: dict, R0_obs: np.ndarray, grid: np.ndarray, window=None):
    """Mean and variance of a new evaluation under each refit's posterior, shape (run, q).

    The curve's mean over the draws, and its variance over the draws plus the mean noise
    variance; in blocks of runs, on every core (NumPy releases the GIL). With smooth
    departures (``window.ou`` set) the noise is forecast from each draw's errors at the
    refit's points (:func:`~bayes_scalerl.models.shape_noise.noise_forecast`).
    """
    n_runs = grid.shape[0]
    mean, var = np.empty_like(grid), np.empty_like(grid)
    ou = None if window is None else window.ou
    ahead = None if ou is None else steps_ahead(window.compute, window.mask, grid)
    lag = None if ou is None else ar1_lags(window.compute, window.mask, window.step)  # as the refit counted

    def block(lo: int) -> None:
        sl = slice(lo, min(lo + _BLOCK, n_runs))
        params = {k: draws[k][sl].reshape(grid[sl].shape[0], -1)[..., None] for k in model.var_names}
        R0 = params.get("R0", R0_obs[sl, None, None])
        mu = model.mean(grid[sl, None, :], params, R0, None)  # run, sample, q
        noise_var = np.mean(params["sigma"] ** 2, axis=1)
        if ou is not None:
            fit_mu = model.mean(window.compute[sl, None, :], params, R0, None)  # run, sample, point
            rho = window.rho[sl] if window.rho is not None else np.zeros(fit_mu.shape[0])
            shift, sd = noise_forecast(
                np.log(np.maximum(window.compute[sl], 1e-300)),
                window.mask[sl] & (window.compute[sl] > 0),
                window.reward[sl, None, :] - fit_mu,
                np.log(np.maximum(grid[sl], 1e-300)),
                ahead[sl],
                rho,
                ou[sl, 0],
                ou[sl, 1],
                None if lag is None else lag[sl],
            )
            mu = mu + shift
            noise_var = noise_var * sd**2
        mean[sl] = mu.mean(axis=1)
        var[sl] = mu.var(axis=1) + noise_var

    starts = range(0, n_runs, _BLOCK)
    with ThreadPoolExecutor(max_workers=max(1, min(len(starts), runtime.n_cpus()))) as pool:
        list(pool.map(block, starts))
    return mean, var


def calibrate(
    runs: Runs,
    window,
    model,
    config,
    *,
    seed: int,
    settings: Discrepancy,
    min_compute: float | None,
    shape: tuple[int, int],
    sample_kwargs: dict[str, Any],
    refit: Callable[[jax.Array, Runs, Any], dict] | None = None,
) -> Calibration:
    """Refit, score and pool (see the module docstring).

    Parameters
    ----------
    runs : Runs
        The runs of the main fit (already cut at ``fit_until``).
    window : FitWindow
        The main fit's window (its ``c_ref`` is each run's last fitted compute).
    model : SigmoidModel
    config : SamplerConfig
        The main fit's sampler settings (the refit uses them too).
    seed : int
        The main fit's seed; the refit and the offsets use streams of their own.
    settings : Discrepancy
    min_compute : float or None
    shape : (int, int)
        (chains, draws) of the main fit.
    sample_kwargs : dict
        Engine options of the main fit (chunk size, devices, executor, ...).
    refit : callable, optional
        ``refit(key, inner_runs, inner_window)``: the refit's draws, ``{name: (run, chain,
        draw)}`` for the model's variables, from the model the discrepancy is added to.
        Default: every refitted run's independent fit on the engine. The hierarchical fit
        passes its pooled sampler, so that the scales measure the errors of the pooled
        predictive (narrower where pooling narrows it), not of the independent one.
    """
    n_runs = window.R0.shape[0]
    priors = model.priors
    # one refit per ratio, batched: the refitted runs get names of their own ("k/i")
    inner_tables, held_tables, row_parts = [], [], []
    for k, ratio in enumerate(settings.ratios):
        inner_k, held_k, rows_k = _inner_split(runs, window.c_ref, ratio, min_compute, priors.R0_fitted)
        if not rows_k.size:
            continue
        rename = {n: f"{k}/{i}" for n, i in zip(inner_k.names, rows_k, strict=True)}
        inner_tables.append(inner_k.table.assign(run=inner_k.table["run"].map(rename)))
        held_tables.append(held_k.assign(run=held_k["run"].map(rename)))
        row_parts.append(rows_k)
    err_all = np.zeros(0)
    var_all = np.zeros(0)
    shape2 = np.zeros(0)
    run_of = np.zeros(0, int)
    weight = np.zeros(0)
    if row_parts:
        inner_runs = dataclasses.replace(runs, table=pd.concat(inner_tables, ignore_index=True))
        held = pd.concat(held_tables, ignore_index=True)
        rows = np.concatenate(row_parts)
        iw = inner_runs.window(
            min_compute=min_compute, R0_fitted=priors.R0_fitted, pad_points=window.reward.shape[1]
        )
        if window.rho is not None:  # the main fit's fixed AR(1) correlation, run by run
            iw = iw._replace(rho=np.asarray(window.rho)[rows])
        if window.ou is not None:  # the main fit's smooth departures
            iw = iw._replace(ou=np.asarray(window.ou)[rows])
        if window.prior is not None:  # priors learnt from the batch: learnt again from each
            # refit's cut windows, as the main fit learnt them from its own (not from later data)
            iw = iw._replace(prior=_inner_priors(iw, inner_runs, priors))
        key = jax.random.fold_in(jax.random.key(seed), 0x5CA1AB1E)
        # the refit's draws only: its sampler statistics would double the memory
        if refit is None:
            draws = sample_window(key, iw, model, config, keep=tuple(model.var_names), **sample_kwargs)
        else:
            draws = refit(key, inner_runs, iw)
        names = inner_runs.names
        sizes = held.groupby("run", sort=False).size().reindex(names).to_numpy()
        width = int(sizes.max())
        valid = np.arange(width)[None, :] < sizes[:, None]
        grid = np.ones((len(names), width))
        grid[valid] = held["compute"].to_numpy(float)
        mean, var = _predictive_moments(model, draws, iw.R0, grid, iw)
        del draws
        if priors.likelihood == "binomial" and "n_eval" in held.columns:
            from ..models.scalerl import binomial_variance

            nv = np.ones_like(grid)
            nv[valid] = held["n_eval"].to_numpy(float)
            var = var + binomial_variance(np.clip(mean, 0, 1), nv)
        err = np.zeros_like(grid)
        err[valid] = held["reward"].to_numpy(float)
        err = err - mean
        h = np.log(grid / held.groupby("run", sort=False)["_cut"].first().reindex(names).to_numpy()[:, None])
        s = (settings.horizon * discrepancy_shape(h, settings.horizon)) ** 2
        err_all, var_all = err[valid], var[valid]
        shape2 = s[valid]
        run_of = np.repeat(rows, sizes)
        # each refit's points averaged, the run's refits averaged: one run's worth in all
        n_views = np.bincount(rows, minlength=n_runs)[rows]
        weight = np.repeat(1.0 / (sizes * n_views), sizes)
    like, own = run_likelihoods(err_all, var_all, shape2, run_of, n_runs, settings, weight)
    post = mix_scales(like, own, settings)
    band_w = prior_pseudo_runs(settings, int(own.sum()))
    verdict = None
    if settings.verdict_weight > band_w:  # else the verdict reads the band's own offsets
        verdict = mix_scales(like, own, settings, settings.verdict_weight).astype(np.float32)
    rng = np.random.default_rng([seed, 0x5CA1AB1E])
    level, dev = draw_offsets(rng, post, (n_runs,) + tuple(shape), settings.horizon)
    omega, tau = scale_summary(post)
    return Calibration(omega, tau, own, level, level + dev, verdict)


def _inner_priors(inner_window, inner_runs, priors) -> np.ndarray:
    """Each refitted run's prior learnt from the runs cut at the same ratio (names ``"k/i"``)."""
    from ..models.population import grid_loglik, learn_population, training_runs

    grid = grid_loglik(inner_window, priors)
    names = inner_runs.names
    groups = training_runs(inner_runs)
    ratio = np.array([str(n).split("/", 1)[0] for n in names])
    ceiling = priors.from_batch == "ceiling"
    rows = np.empty((len(names), 6 if ceiling else 4))
    for k in np.unique(ratio):
        sel = np.flatnonzero(ratio == k)
        part = learn_population(
            grid.take(sel), priors, groups=None if groups is None else groups[sel], ceiling=ceiling
        )
        rows[sel] = part.rows
    return rows
