"""``fit``: from a :class:`~bayes_scalerl.data.Runs` to a :class:`~bayes_scalerl.results.FitResult`."""

from __future__ import annotations

import json

import jax
import numpy as np
import pandas as pd
import xarray as xr

from . import __version__
from .data import Runs, in_likelihood
from .inference import SamplerConfig, sample_window
from .priors import Priors
from .results import FitResult

__all__ = ["fit"]


def _observed(runs: Runs, window_mask_fn):
    """NaN-padded (run, point) arrays of every evaluation and whether it is fitted."""
    groups = runs.table.groupby("run", sort=False)
    sizes = [len(groups.get_group(n)) for n in runs.names]
    width = max(sizes)
    compute = np.full((runs.n_runs, width), np.nan)
    reward = np.full((runs.n_runs, width), np.nan)
    in_fit = np.zeros((runs.n_runs, width), bool)
    for i, name in enumerate(runs.names):
        g = groups.get_group(name)
        c = g["compute"].to_numpy(float)
        compute[i, : len(c)] = c
        reward[i, : len(c)] = g["reward"].to_numpy(float)
        in_fit[i, : len(c)] = window_mask_fn(c)
    return compute, reward, in_fit


def fit(
    runs: Runs | pd.DataFrame,
    *,
    min_compute: float | None = None,
    fit_until: float | None = None,
    priors: Priors | None = None,
    chains: int = 4,
    warmup: int = 500,
    samples: int = 500,
    seed: int = 0,
    target_accept: float = 0.99,
    max_tree_depth: int = 8,
    chunk_size: int = 512,
    log_likelihood: bool = True,
    progress: bool | None = None,
) -> FitResult:
    """Fit the ScaleRL sigmoid to every run with batched NUTS.

    Parameters
    ----------
    runs : Runs or pandas.DataFrame
        The curves (a DataFrame is validated with :meth:`Runs.from_frame`).
    min_compute : float, optional
        Leave points below this compute out of the likelihood (the paper: 1500 GPU-hours).
    fit_until : float, optional
        Fit only points with compute <= this, to extrapolate beyond it.
    priors : Priors, optional
        Priors (default :class:`Priors()`).
    chains, warmup, samples : int
        Chains per run, warm-up and kept iterations per chain.
    seed : int
        Seed of the PRNG key; the same seed and data give the same draws.
    target_accept, max_tree_depth : float, int
        NUTS settings.
    chunk_size : int
        Most runs per compiled call.
    log_likelihood : bool
        Store pointwise log-likelihoods (needed for LOO; large for many runs).
    progress : bool, optional
        Progress bar over chunks.

    Returns
    -------
    FitResult

    Examples
    --------
    >>> import bayes_scalerl as bs
    >>> runs = bs.read_runs("curves.csv")                    # doctest: +SKIP
    >>> res = bs.fit(runs, min_compute=1500, fit_until=8000)  # doctest: +SKIP
    >>> res.summary()                                         # doctest: +SKIP
    """
    if not isinstance(runs, Runs):
        runs = Runs.from_frame(runs)
    priors = priors or Priors()
    for name, value in (("chains", chains), ("warmup", warmup), ("samples", samples)):
        if int(value) != value or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    if chains < 2:
        raise ValueError("chains must be at least 2 so that R-hat can be computed")
    window = runs.window(min_compute=min_compute, fit_until=fit_until, R0_fitted=priors.R0_fitted)
    config = SamplerConfig(int(chains), int(warmup), int(samples), float(target_accept), int(max_tree_depth))
    draws = sample_window(
        jax.random.key(seed), window, priors, config, chunk_size=chunk_size, progress=progress
    )

    def in_fit(c):
        return in_likelihood(c, min_compute=min_compute, fit_until=fit_until, R0_fitted=priors.R0_fitted)

    compute, reward, fitted = _observed(runs, in_fit)
    names = np.array(runs.names, dtype=object).astype(str)
    dims3 = ("chain", "draw", "run")

    def cdr(x):  # (run, chain, draw) -> (chain, draw, run)
        return np.moveaxis(x, 0, -1)

    post = {"A": cdr(draws.A), "B": cdr(draws.B), "C_mid": cdr(draws.C_mid), "sigma": cdr(draws.sigma)}
    if priors.R0_fitted:
        post["R0"] = cdr(draws.R0)
    coords = {"run": names, "chain": np.arange(chains), "draw": np.arange(samples)}
    posterior = xr.Dataset({k: (dims3, v) for k, v in post.items()}, coords=coords)
    step = np.broadcast_to(draws.step_size[:, :, None], draws.lp.shape)
    sample_stats = xr.Dataset(
        {
            "diverging": (dims3, cdr(draws.diverging)),
            "n_steps": (dims3, cdr(draws.num_steps)),
            "acceptance_rate": (dims3, cdr(draws.accept_prob)),
            "energy": (dims3, cdr(draws.energy)),
            "lp": (dims3, cdr(draws.lp)),
            "step_size": (dims3, cdr(step)),
        },
        coords=coords,
    )
    point = np.arange(compute.shape[1])
    observed = xr.Dataset({"reward": (("run", "point"), reward)}, coords={"run": names, "point": point})
    constant = xr.Dataset(
        {
            "compute": (("run", "point"), compute),
            "in_fit": (("run", "point"), fitted),
            "R0_obs": (("run",), window.R0),
        },
        coords={"run": names, "point": point},
    )
    for col in ("recipe", "seed", "task"):
        vals = runs.run_attribute(col)
        if vals is not None:
            constant[col] = (("run",), np.array([str(v) for v in vals]))
    groups = {
        "posterior": posterior,
        "sample_stats": sample_stats,
        "observed_data": observed,
        "constant_data": constant,
    }
    if log_likelihood:
        groups["log_likelihood"] = _pointwise_loglik(post, window.R0, priors, compute, reward, fitted, coords)
    settings = {
        "min_compute": min_compute,
        "fit_until": fit_until,
        "chains": chains,
        "warmup": warmup,
        "samples": samples,
        "seed": seed,
        "target_accept": target_accept,
        "max_tree_depth": max_tree_depth,
        "priors": priors.to_dict(),
        "source": runs.source,
        "version": __version__,
    }
    dt = xr.DataTree.from_dict(groups)
    dt.attrs["bayes_scalerl_settings"] = json.dumps(settings)
    dt.attrs["inference_library"] = "numpyro"
    return FitResult(dt)


def _pointwise_loglik(post, R0_obs, priors, compute, reward, fitted, coords) -> xr.Dataset:
    """Gaussian log-likelihood of each fitted point under each draw (NaN elsewhere)."""
    from .curve import scalerl_curve

    A, B, C, s = (post[k][..., None] for k in ("A", "B", "C_mid", "sigma"))
    R0 = post["R0"][..., None] if priors.R0_fitted else R0_obs[None, None, :, None]
    c = np.nan_to_num(compute)[None, None]
    mu = scalerl_curve(c, A, B, C, R0)
    z = (reward[None, None] - mu) / s
    ll = (-0.5 * z**2 - np.log(s) - 0.5 * np.log(2 * np.pi)).astype(np.float32)
    ll = np.where(fitted[None, None], ll, np.nan)
    return xr.Dataset(
        {"reward": (("chain", "draw", "run", "point"), ll)},
        coords={**coords, "point": np.arange(compute.shape[1])},
    )
