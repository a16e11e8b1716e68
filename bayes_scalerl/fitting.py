"""``fit``: from a :class:`~bayes_scalerl.data.Runs` to a :class:`~bayes_scalerl.results.FitResult`."""

from __future__ import annotations

import json
import os

import jax
import numpy as np
import pandas as pd
import xarray as xr

from . import __version__
from .data import DataError, Runs, in_likelihood
from .hierarchical import HierDraws, HierIndex, HierPriors, hierarchy_index, sample_hierarchical
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
    n_eval = np.full((runs.n_runs, width), np.nan)
    for i, name in enumerate(runs.names):
        g = groups.get_group(name)
        c = g["compute"].to_numpy(float)
        compute[i, : len(c)] = c
        reward[i, : len(c)] = g["reward"].to_numpy(float)
        in_fit[i, : len(c)] = window_mask_fn(c)
        if "n_eval" in g.columns:
            n_eval[i, : len(c)] = g["n_eval"].to_numpy(float)
    return compute, reward, in_fit, n_eval


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
    target_accept: float | None = None,
    max_tree_depth: int | None = None,
    chunk_size: int = 512,
    log_likelihood: bool = True,
    progress: bool | None = None,
    model: str = "independent",
    hier_priors: HierPriors | None = None,
    executor: str | object = "local",
    checkpoint_dir: str | os.PathLike | None = None,
    n_devices: int | None = None,
    group_size: int | None = None,
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
    target_accept, max_tree_depth : float, int, optional
        NUTS settings (defaults: 0.9 and 8 for independent fits (``target_accept`` 0.99 with
        the AR(1) likelihood, which diverged in 23% of runs at 0.9), 0.95 and 10 for the
        hierarchical model).
    chunk_size : int
        Most runs per compiled call.
    log_likelihood : bool
        Store pointwise log-likelihoods (needed for LOO; large for many runs).
    progress : bool, optional
        Progress bar over chunks.
    model : {"independent", "hierarchical"}
        ``"independent"``: every run on its own (batched). ``"hierarchical"``: runs of a
        recipe (the ``recipe`` column) are seeds pooled around the recipe's parameters,
        recipes around a population, runs with several tasks share ``B`` and ``C_mid``
        (see :mod:`bayes_scalerl.hierarchical`); one joint NUTS run. ``R0`` is not fitted.
    hier_priors : HierPriors, optional
        Priors of the hierarchical model (default :class:`HierPriors()`).
    executor : {"local", "ray"} or executor object
        Where chunks run (independent model): ``"local"`` (this process's devices) or
        ``"ray"`` (one Ray task per chunk; see :mod:`bayes_scalerl.executors`). Draws
        do not depend on it.
    checkpoint_dir : str or os.PathLike, optional
        Folder where each finished chunk is written (independent model); a fit run again
        with the same inputs and folder skips the finished chunks and gives the same
        result. A folder of a different fit is refused (see
        :func:`bayes_scalerl.inference.sample_window`).
    n_devices : int, optional
        Local devices to spread groups of runs over (default: all). Draws do not depend on it.
    group_size : int, optional
        Runs per compiled call (default: 16 on a CPU, ``chunk_size`` on a GPU). Draws
        do not depend on it (with the default ``"queue"`` kernel).

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
    if model not in ("independent", "hierarchical"):
        raise ValueError(f"model must be 'independent' or 'hierarchical', got {model!r}")
    if model == "hierarchical" and priors.R0_fitted:
        raise ValueError("the hierarchical model takes R0 from each run's first evaluation; R0_fitted=False")
    hierarchical = model == "hierarchical"
    if target_accept is None:
        target_accept = 0.95 if hierarchical else (0.99 if priors.likelihood == "ar1" else 0.9)
    if max_tree_depth is None:
        max_tree_depth = 10 if hierarchical else 8
    if hierarchical and (executor != "local" or checkpoint_dir is not None):
        raise ValueError(
            "the hierarchical model is one joint sampler: executor and checkpoint_dir apply to "
            "independent fits only"
        )
    if hierarchical and priors.likelihood != "gaussian":
        raise ValueError("the hierarchical model has a Gaussian likelihood only")
    if priors.likelihood == "binomial" and "n_eval" not in runs.table.columns:
        raise DataError(
            f"{runs.source}: column 'n_eval' is missing; the binomial likelihood needs the number of "
            "graded generations behind each evaluation."
        )
    window = runs.window(min_compute=min_compute, fit_until=fit_until, R0_fitted=priors.R0_fitted)
    extra_posterior: dict = {}
    extra_coords: dict = {}
    if hierarchical:
        hp = hier_priors or HierPriors()
        idx = hierarchy_index(runs)
        hd = sample_hierarchical(
            jax.random.key(seed),
            window,
            idx,
            hp,
            num_chains=int(chains),
            num_warmup=int(warmup),
            num_samples=int(samples),
            target_accept=float(target_accept),
            max_tree_depth=int(max_tree_depth),
            progress=bool(progress),
        )
        extra_posterior, extra_coords = _hier_posterior(hd, idx)
    else:
        config = SamplerConfig(
            int(chains), int(warmup), int(samples), float(target_accept), int(max_tree_depth)
        )
        draws = sample_window(
            jax.random.key(seed),
            window,
            priors,
            config,
            chunk_size=chunk_size,
            progress=progress,
            n_devices=n_devices,
            group_size=group_size,
            executor=executor,
            checkpoint_dir=checkpoint_dir,
        )

    def in_fit(c):
        return in_likelihood(c, min_compute=min_compute, fit_until=fit_until, R0_fitted=priors.R0_fitted)

    compute, reward, fitted, n_eval = _observed(runs, in_fit)
    names = np.array(runs.names, dtype=object).astype(str)
    dims3 = ("chain", "draw", "run")

    def cdr(x):  # (run, chain, draw) -> (chain, draw, run)
        return np.moveaxis(x, 0, -1)

    coords = {"run": names, "chain": np.arange(chains), "draw": np.arange(samples)}
    if hierarchical:
        post = dict(hd.curve)
        posterior = xr.Dataset({k: (dims3, v) for k, v in post.items()}, coords=coords)
        posterior = posterior.assign(extra_posterior).assign_coords(extra_coords)
        sample_stats = xr.Dataset(
            {k: (("chain", "draw"), v) for k, v in hd.stats.items()},
            coords={"chain": coords["chain"], "draw": coords["draw"]},
        )
    else:
        post = {"A": cdr(draws.A), "B": cdr(draws.B), "C_mid": cdr(draws.C_mid), "sigma": cdr(draws.sigma)}
        if priors.R0_fitted:
            post["R0"] = cdr(draws.R0)
        if priors.likelihood == "ar1":
            post["rho"] = cdr(draws.rho)
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
    if "n_eval" in runs.table.columns:
        constant["n_eval"] = (("run", "point"), n_eval)
    for col in ("recipe", "seed", "task", "training_run"):
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
        groups["log_likelihood"] = _pointwise_loglik(
            post, window.R0, priors, compute, reward, fitted, n_eval, coords
        )
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
        "model": model,
        "hier_priors": (hier_priors or HierPriors()).to_dict() if hierarchical else None,
        "source": runs.source,
        "version": __version__,
    }
    dt = xr.DataTree.from_dict(groups)
    dt.attrs["bayes_scalerl_settings"] = json.dumps(settings)
    dt.attrs["inference_library"] = "numpyro"
    return FitResult(dt)


def _hier_posterior(hd: HierDraws, idx: HierIndex) -> tuple[dict, dict]:
    """Recipe- and population-level posterior variables with their dims and coordinates."""
    one_task = len(idx.tasks) == 1
    cd = ("chain", "draw")
    out = {}
    A_r = hd.recipe["A_recipe"]
    out["A_recipe"] = (cd + ("recipe",), A_r[..., 0]) if one_task else (cd + ("recipe", "task"), A_r)
    out["B_recipe"] = (cd + ("recipe",), hd.recipe["B_recipe"])
    out["C_mid_recipe"] = (cd + ("recipe",), hd.recipe["C_mid_recipe"])
    for k, v in hd.hyper.items():
        if k == "A_pop":
            out[k] = (cd, v[..., 0]) if one_task else (cd + ("task",), v)
        else:
            out[k] = (cd, v)
    coords = {"recipe": np.array(idx.recipes, dtype=str)}
    if not one_task:
        coords["task"] = np.array(idx.tasks, dtype=str)
    return out, coords


def _pointwise_loglik(post, R0_obs, priors, compute, reward, fitted, n_eval, coords) -> xr.Dataset:
    """Log-likelihood of each fitted point under each draw (NaN elsewhere).

    For the AR(1) likelihood it is the conditional density of a point given the
    previous fitted point (the first fitted point: its stationary density).
    """
    from scipy import stats

    from .curve import scalerl_curve
    from .model import binomial_variance

    A, B, C, s = (post[k][..., None] for k in ("A", "B", "C_mid", "sigma"))
    R0 = post["R0"][..., None] if priors.R0_fitted else R0_obs[None, None, :, None]
    c = np.nan_to_num(compute)[None, None]
    y = reward[None, None]
    mu = scalerl_curve(c, A, B, C, R0)
    var = s**2
    if priors.likelihood == "binomial":
        var = (
            var
            + binomial_variance(np.nan_to_num(reward, nan=0.5), np.nan_to_num(n_eval, nan=1.0))[None, None]
        )
    if priors.likelihood == "ar1":
        rho = post["rho"][..., None]
        prev = np.zeros_like(fitted)
        prev[:, 1:] = fitted[:, :-1] & fitted[:, 1:]
        e_prev = np.zeros_like(mu)
        e_prev[..., 1:] = np.nan_to_num(y[..., :-1] - mu[..., :-1])
        mu = np.where(prev[None, None], mu + rho * e_prev, mu)
        var = np.where(prev[None, None], var * (1 - rho**2), var)
    if priors.likelihood == "student_t":
        ll = stats.t.logpdf(y, df=priors.nu, loc=mu, scale=s)
    else:
        ll = -0.5 * (y - mu) ** 2 / var - 0.5 * np.log(var) - 0.5 * np.log(2 * np.pi)
    ll = np.where(fitted[None, None], ll, np.nan).astype(np.float32)
    return xr.Dataset(
        {"reward": (("chain", "draw", "run", "point"), ll)},
        coords={**coords, "point": np.arange(compute.shape[1])},
    )
