"""One builder of the ArviZ DataTree of a fit, for every model.

Groups: ``posterior`` (the model's variables, dims ``chain, draw, run``, plus any
population or recipe levels), ``sample_stats``, ``observed_data`` (``reward``, dims
``run, point``, NaN-padded), ``constant_data`` (``compute``, ``in_fit``, ``R0_obs``,
``C_ref``, ``batch_prior`` where the priors were learnt from the batch, and the run
attributes) and, when asked for, ``log_likelihood`` (the model's
pointwise log-likelihood written once in JAX, NaN where a point is not fitted).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping

import jax
import jax.numpy as jnp
import numpy as np
import xarray as xr

from ..data.packing import pack, packing
from ..data.runs import FitWindow, Runs

__all__ = [
    "observed_arrays",
    "window_from_datatree",
    "pointwise_loglik",
    "loglik_dataset",
    "build_datatree",
    "STAT_NAMES",
    "BATCH_PRIOR_TERMS",
]

#: Names of the sampler statistics in ``sample_stats`` (ArviZ's), from the engine's.
STAT_NAMES = {
    "diverging": "diverging",
    "num_steps": "n_steps",
    "accept_prob": "acceptance_rate",
    "energy": "energy",
    "lp": "lp",
    "step_size": "step_size",
}

#: Names of the columns of ``constant_data["batch_prior"]`` (``FitWindow.prior``): each
#: run's prior learnt from the batch, the last two only with the ceiling pooled.
BATCH_PRIOR_TERMS = ("log_B_median", "log_B_sd", "log_C_mid_median", "log_C_mid_sd", "A_loc", "A_scale")


def observed_arrays(runs: Runs, in_fit: Callable[[np.ndarray], np.ndarray]):
    """NaN-padded (run, point) arrays of every evaluation and whether it is fitted.

    ``in_fit`` is called once on the (run, point) compute array (see
    :func:`~bayes_scalerl.data.runs.in_likelihood`). Returns ``compute, reward, in_fit,
    n_eval`` (``n_eval`` NaN without the column).
    """
    compute, reward, n_eval = runs.padded()
    fitted = np.asarray(in_fit(compute), bool) & ~np.isnan(compute)  # one run per row
    return compute, reward, fitted, n_eval


def window_from_datatree(dt: xr.DataTree) -> FitWindow:
    """The fitted points of a fit's DataTree, laid out as the sampler saw them.

    Each run's fitted points come first, in order, and padding repeats the last one, as in
    :meth:`~bayes_scalerl.data.runs.Runs.window`.
    """
    cd = dt["constant_data"]
    compute = np.asarray(cd["compute"].values, float)
    reward = np.asarray(dt["observed_data"]["reward"].values, float)
    fitted = np.asarray(cd["in_fit"].values, bool)
    n_eval = np.asarray(cd["n_eval"].values, float) if "n_eval" in cd else np.full(compute.shape, np.nan)
    p = packing(fitted, max(int(fitted.sum(axis=1).max()), 1))  # fitted points first, in order

    mask = p.keep
    priors = json.loads(dt.attrs.get("bayes_scalerl_settings", "{}")).get("priors") or {}
    rho = priors.get("rho")
    fixed = priors.get("likelihood") == "ar1" and rho is not None
    ou = priors.get("shape_noise") if isinstance(priors.get("shape_noise"), (list, tuple)) else None
    return FitWindow(
        pack(compute, p),
        pack(reward, p),
        mask,
        np.asarray(cd["R0_obs"].values, float),
        np.asarray(cd["C_ref"].values, float),
        pack(n_eval, p),
        np.full(compute.shape[0], float(rho)) if fixed else None,
        np.tile(np.asarray(ou, float), (compute.shape[0], 1)) if ou is not None else None,
        pack(np.asarray(cd["step"].values, float), p) if "step" in cd else None,
    )


def _loglik_program(model):
    def one_run(params, data):
        return jax.vmap(lambda p: model.loglik(p, data))(params)

    return jax.jit(jax.vmap(one_run))


def pointwise_loglik(model, window, post: Mapping[str, np.ndarray], *, chunk: int = 64) -> np.ndarray:
    """The model's log-likelihood of each fitted point of the window under each draw.

    Parameters
    ----------
    model : BatchedModel
    window : FitWindow
    post : mapping of str to ndarray
        The model's variables, each of shape (run, sample).
    chunk : int
        Runs per compiled call (bounds memory).

    Returns
    -------
    ndarray of float32, shape (run, sample, point)
        In the window's layout (each run's fitted points first); NaN on padding.
    """
    from ..engine.driver import padded_inputs

    arrays = padded_inputs(window, n_eval=model.needs_n_eval)
    n_runs, width = window.reward.shape
    program = _loglik_program(model)
    out = np.empty((n_runs, next(iter(post.values())).shape[1], width), np.float32)
    for lo in range(0, n_runs, chunk):
        hi = min(lo + chunk, n_runs)
        idx = np.concatenate([np.arange(lo, hi), np.full(chunk - (hi - lo), lo)])  # one shape
        data = model.data({k: jnp.asarray(v[idx]) for k, v in arrays.items()})
        params = {k: jnp.asarray(v[idx]) for k, v in post.items()}
        ll = np.asarray(program(params, data))[: hi - lo, :, :width]
        out[lo:hi] = np.where(window.mask[lo:hi, None, :], ll, np.nan)
    return out


def _to_observed_layout(ll: np.ndarray, fitted: np.ndarray) -> np.ndarray:
    """Window layout (fitted points first, in order) to the observed layout (run, ..., point)."""
    pos = np.cumsum(fitted, axis=1) - 1  # index of each fitted point among the run's fitted points
    pos = np.clip(pos, 0, ll.shape[-1] - 1)
    taken = np.take_along_axis(ll, pos[:, None, :], axis=-1)
    return np.where(fitted[:, None, :], taken, np.nan).astype(np.float32)


def loglik_dataset(model, window, params: Mapping[str, np.ndarray], fitted: np.ndarray, names) -> xr.Dataset:
    """The ``log_likelihood`` group: ``reward`` of dims ``(chain, draw, run, point)``.

    Parameters
    ----------
    model : BatchedModel
    window : FitWindow
        The fitted points (as sampled).
    params : mapping of str to ndarray
        The model's variables, each (run, chain, draw).
    fitted : ndarray of bool, shape (run, point)
        Which observed points are fitted (the observed layout of the result).
    names : array_like of str
        Run names.
    """
    first = params[model.var_names[0]]
    n_runs, chains, samples = first.shape
    flat = {k: params[k].reshape(n_runs, -1) for k in model.var_names}
    ll = pointwise_loglik(model, window, flat)  # run, sample, window point
    width = fitted.shape[1]
    if ll.shape[-1] < width:
        ll = np.concatenate([ll, np.full(ll.shape[:-1] + (width - ll.shape[-1],), np.nan, np.float32)], -1)
    ll = _to_observed_layout(ll[..., :width], fitted).reshape(n_runs, chains, samples, width)
    coords = {"run": np.asarray(names), "chain": np.arange(chains), "draw": np.arange(samples)}
    return xr.Dataset(
        {"reward": (("chain", "draw", "run", "point"), np.moveaxis(ll, 0, 2))},
        coords={**coords, "point": np.arange(width)},
    )


def build_datatree(
    runs: Runs,
    window,
    model,
    post: Mapping[str, np.ndarray],
    *,
    in_fit: Callable[[np.ndarray], np.ndarray],
    settings: dict,
    stats: Mapping[str, np.ndarray] | None = None,
    sample_stats: xr.Dataset | None = None,
    extra_posterior: Mapping | None = None,
    extra_coords: Mapping | None = None,
    log_likelihood: bool = True,
    constants: Mapping[str, np.ndarray] | None = None,
    loglik_params: Mapping[str, np.ndarray] | None = None,
) -> xr.DataTree:
    """The fit's DataTree (see the module docstring).

    Parameters
    ----------
    runs : Runs
    window : FitWindow
        The fitted points (as sampled).
    model : BatchedModel
    post : mapping of str to ndarray
        The model's run-level variables, each (run, chain, draw).
    in_fit : callable
        ``in_fit(compute)`` -> bool mask of the points in the likelihood.
    settings : dict
        Stored as JSON in the ``bayes_scalerl_settings`` attribute.
    stats : mapping, optional
        The engine's sampler statistics (run, chain, draw); ``step_size`` (run, chain).
    sample_stats : xarray.Dataset, optional
        A ready ``sample_stats`` group instead (the hierarchical sampler's).
    extra_posterior, extra_coords : mapping, optional
        More posterior variables (``name -> (dims, array)``) and their coordinates.
    log_likelihood : bool
        Add the pointwise log-likelihood.
    constants : mapping, optional
        More ``constant_data`` variables: an array of dims (run,), or ``(dims, array)``.
    loglik_params : mapping, optional
        The model's parameters for the log-likelihood when ``post`` holds others (the
        ceiling with its discrepancy); default ``post``.
    """
    compute, reward, fitted, n_eval = observed_arrays(runs, in_fit)
    names = np.array(runs.names, dtype=object).astype(str)
    first = next(iter(post.values()))
    chains, samples = first.shape[1], first.shape[2]
    dims3 = ("chain", "draw", "run")
    coords = {"run": names, "chain": np.arange(chains), "draw": np.arange(samples)}

    def cdr(x):  # (run, chain, draw) -> (chain, draw, run)
        return np.moveaxis(x, 0, -1)

    posterior = xr.Dataset({k: (dims3, cdr(v)) for k, v in post.items()}, coords=coords)
    if extra_posterior:
        posterior = posterior.assign(dict(extra_posterior)).assign_coords(dict(extra_coords or {}))
    if sample_stats is None:
        ss = {}
        for k, v in (stats or {}).items():
            if k == "step_size":
                v = np.broadcast_to(v[:, :, None], first.shape)
            ss[STAT_NAMES.get(k, k)] = (dims3, cdr(v))
        sample_stats = xr.Dataset(ss, coords=coords)
    point = np.arange(compute.shape[1])
    rp = ("run", "point")
    observed = xr.Dataset({"reward": (rp, reward)}, coords={"run": names, "point": point})
    constant = xr.Dataset(
        {
            "compute": (rp, compute),
            "in_fit": (rp, fitted),
            "R0_obs": (("run",), window.R0),
            "C_ref": (("run",), window.c_ref),
        },
        coords={"run": names, "point": point},
    )
    for k, v in (constants or {}).items():  # an array over runs, or (dims, array)
        constant[k] = v if isinstance(v, tuple) else (("run",), v)
    if getattr(window, "prior", None) is not None:  # each run's prior learnt from the batch
        rows = np.asarray(window.prior, float)
        constant["batch_prior"] = (("run", "prior_term"), rows)
        constant = constant.assign_coords(prior_term=list(BATCH_PRIOR_TERMS[: rows.shape[1]]))
    if "n_eval" in runs.table.columns:
        constant["n_eval"] = (rp, n_eval)
    step = runs.padded_step()
    if step is not None:  # the AR(1) lags count in it (FitWindow.step)
        constant["step"] = (rp, step)
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
        source = post if loglik_params is None else loglik_params
        groups["log_likelihood"] = loglik_dataset(model, window, source, fitted, names)
    dt = xr.DataTree.from_dict(groups)
    dt.attrs["bayes_scalerl_settings"] = json.dumps(settings)
    dt.attrs["inference_library"] = "numpyro"
    return dt
