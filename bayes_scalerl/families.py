"""Curve families beside the ScaleRL sigmoid, compared by PSIS-LOO and by extrapolation.

Every family is ``R(C) = R0 + g f(C; theta)`` with ``R0`` the run's first evaluation and
a gain ``g`` in ``(0, 1 - R0)`` (prior uniform there):

``sigmoid``
    The package's model, ``f = sigmoid(B (log C - log C_mid))``; fitted by
    :func:`bayes_scalerl.fit` (``g = A - R0``).
``power``
    A power law, ``f = (C / C_ref)^b`` with ``b > 0`` and ``C_ref`` the run's largest
    fitted compute: ``g`` is the gain reached at ``C_ref``, so the curve stays ``<= 1``
    within the fitted range but does not saturate beyond it.
``exponential``
    Weibull-type saturation, ``f = 1 - exp(-(C / C_s)^B)``, with asymptote
    ``A = R0 + g`` in ``(R0, 1)``; ``C_s`` is the compute at which ``1 - 1/e`` (63%) of
    the gain is reached.

Given ``theta`` and the noise ``sigma`` the mean is linear in ``g``, so, as for the
sigmoid (:func:`bayes_scalerl.model.gain_conditional`), ``g`` is integrated out in closed
form (:func:`_gain_marginal`, a truncated Gaussian integral entering the NumPyro model as
a ``numpyro.factor``) and drawn exactly for every posterior draw afterwards. NUTS
(NumPyro's :func:`~numpyro.infer.hmc.hmc` with a ``potential_fn_gen`` built from the
NumPyro model by :func:`~numpyro.infer.util.potential_energy`) samples the rest; one
jit-compiled program per family runs every chain of every run side by side
(``jax.vmap`` over run x chain lanes, groups of runs one after another with
``jax.lax.map``). Shapes are bucketed (runs to powers of two, points to multiples of 8),
so a second data set of a similar size does not compile again (:func:`trace_count`).
The exponential family is sampled in data-anchored coordinates, as the sigmoid is (the
gain fraction reached and the log-slope at the middle of the fit window; see
:func:`_exp_coords`): in ``(log B, log C_s)`` a curve seen before its saturation leaves a
curved ridge ending at the ``A <= 1`` wall, on which NUTS mixed poorly.

Priors (all families share the noise prior of :class:`~bayes_scalerl.priors.Priors`,
``sigma ~ HalfNormal(0.1)``, and the uniform gain):

- power: ``b ~ LogNormal(log 0.5, 1.0)`` (90% prior interval about 0.1-2.6);
- exponential: ``B ~ LogNormal(log 1.5, 0.7)``, ``C_s ~ LogNormal(log C_ref, 1.5)``
  (the sigmoid's prior on ``C_mid``).

:func:`compare_families` fits every family to the same runs and tabulates, per run,
PSIS-LOO (ArviZ's :func:`arviz_stats.loo`) of the fitted points and, when a cutoff
leaves later points out, the CRPS and median absolute error of the predictive draws at
those held-out points.
"""

from __future__ import annotations

import functools
import json
import math
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pandas as pd
import xarray as xr
from numpyro.infer.hmc import hmc
from numpyro.infer.util import constrain_fn, potential_energy

from . import __version__
from .data import Runs, in_likelihood
from .diagnostics import run_diagnostics
from .fitting import _observed, fit
from .model import GainConditional, _log_diff_ndtr, _truncnorm_draw
from .priors import Priors
from .results import FitResult
from .scoring import crps_from_draws, median_abs_error

__all__ = [
    "FAMILIES",
    "FamilyData",
    "FamilyFit",
    "compare_families",
    "exponential_numpyro_model",
    "fit_family",
    "power_numpyro_model",
    "trace_count",
]

#: Curve families known to :func:`fit_family` and :func:`compare_families`.
FAMILIES = ("sigmoid", "power", "exponential")

_LOG_2PI = math.log(2.0 * math.pi)
_SIGMA_SCALE = Priors().sigma_scale
_POWER_B = (math.log(0.5), 1.0)  # LogNormal(loc, scale) of the power-law exponent b
_EXP_B = (math.log(1.5), 0.7)  # LogNormal(loc, scale) of the Weibull shape B
_EXP_C_LOG_SD = 1.5  # sd of log C_s around log C_ref

_TRACES = {"families": 0}


def trace_count() -> int:
    """How many times a family sampler has been traced (compiled) in this process."""
    return _TRACES["families"]


# ---------------------------------------------------------------------- model pieces
class FamilyData(NamedTuple):
    """One run's fit inputs (or many, with a leading run axis).

    Attributes
    ----------
    log_c : array, shape (point,)
        Log compute (0 where compute is 0; see ``positive``).
    positive : array of bool, shape (point,)
        Compute > 0 (compute 0 has gain fraction exactly 0).
    y : array, shape (point,)
        Observed reward.
    mask : array of bool, shape (point,)
        Point is in the likelihood.
    R0 : array, shape ()
        The run's first evaluation.
    log_c_ref : array, shape ()
        Log of the run's largest fitted compute.
    log_c_anchor : array, shape ()
        Log-midpoint of the run's fitted compute range (anchor of the exponential
        family's sampled coordinates).
    """

    log_c: jax.Array
    positive: jax.Array
    y: jax.Array
    mask: jax.Array
    R0: jax.Array
    log_c_ref: jax.Array
    log_c_anchor: jax.Array


def _gain_marginal(s, y, mask, R0, sigma, upper) -> GainConditional:
    """Conditional of the gain and the marginal likelihood it leaves, for given fractions.

    With ``y_i - R0 = g s_i + eps_i``, ``eps_i ~ Normal(0, sigma)`` over the points in
    ``mask`` and ``g ~ Uniform(0, upper)``, the conditional of ``g`` is a normal truncated
    to ``(0, upper)`` and ``log_norm = log p(y | s, sigma, R0)`` (``g`` integrated out).
    The algebra of :func:`bayes_scalerl.model.gain_conditional` for a uniform prior, for
    any vector of gain fractions ``s`` (one run, no run axis).

    Parameters
    ----------
    s : array, shape (point,)
        Gain fraction at each point.
    y : array, shape (point,)
        Observed reward.
    mask : array of bool, shape (point,)
        Points in the likelihood.
    R0, sigma, upper : array, shape ()
        Reward before training, noise sd, upper end of the gain.

    Returns
    -------
    GainConditional
        ``mean``, ``sd`` of the untruncated normal, ``upper`` and ``log_norm``.
    """
    m = jnp.asarray(mask).astype(jnp.result_type(s, float))
    r = y - R0
    n = m.sum()
    Ss = jnp.sum(m * s * s)
    Sy = jnp.sum(m * s * r)
    rss0 = jnp.sum(m * r * r)
    var = sigma**2
    prec = jnp.maximum(Ss / var, 1e-300)
    h = Sy / var
    mean = h / prec
    sd = 1.0 / jnp.sqrt(prec)
    log_mass = _log_diff_ndtr(-mean / sd, (upper - mean) / sd)
    log_free = (
        -0.5 * n * (_LOG_2PI + jnp.log(var))
        - 0.5 * rss0 / var
        + 0.5 * h * mean
        + 0.5 * (_LOG_2PI - jnp.log(prec))
        - jnp.log(upper)
    )
    return GainConditional(mean, sd, upper, log_free + log_mass, log_free)


def _power_fraction(params: dict, data: FamilyData) -> jax.Array:
    x = params["b"] * (data.log_c - data.log_c_ref)
    return jnp.where(data.positive, jnp.exp(jnp.minimum(x, 50.0)), 0.0)


def _exp_coords(
    u: jax.Array, v: jax.Array, log_c_anchor: jax.Array
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """``(log B, x_a, log |d(log B, log C_s) / d(u, v)|)`` of the exponential's sampled coordinates.

    ``x_a = B (a - log C_s)`` at the anchor ``a``: the gain fraction there is
    ``s_a = 1 - exp(-exp(x_a)) = 1 / (1 + softplus(v))`` and ``u = log S`` with
    ``S = B h(x_a)`` the log-slope ``d log f / d log C`` at the anchor,
    ``h(x) = exp(x - exp(x)) / (1 - exp(-exp(x)))``. As for the sigmoid
    (:mod:`bayes_scalerl.model`), the ridge of a curve seen before its saturation runs
    along ``v`` at fixed ``u``, and the conditional gain grows linearly in ``v`` at the
    ``A <= 1`` wall. The Jacobian of the map is ``|dx_a/dv| / B``.
    """
    sp = jax.nn.softplus(v)
    L = jnp.log1p(1.0 / sp)  # exp(x_a) = -log(1 - s_a)
    x_a = jnp.log(L)
    e = L
    log_h = x_a - e - jnp.log(-jnp.expm1(-e))
    log_B = u - log_h
    log_dx = jax.nn.log_sigmoid(v) - jnp.log(L) - jnp.log(sp) - jnp.log1p(sp)
    return log_B, x_a, log_dx - log_B


def _exp_params(params: dict, data: FamilyData) -> tuple[jax.Array, jax.Array, jax.Array]:
    """``(log B, log C_s, log-Jacobian)`` from the sampled ``u, v``."""
    log_B, x_a, log_jac = _exp_coords(params["u"], params["v"], data.log_c_anchor)
    return log_B, data.log_c_anchor - x_a * jnp.exp(-log_B), log_jac


def _exponential_fraction(params: dict, data: FamilyData) -> jax.Array:
    log_B, log_C_s, _ = _exp_params(params, data)
    x = jnp.exp(log_B) * (data.log_c - log_C_s)
    return jnp.where(data.positive, -jnp.expm1(-jnp.exp(jnp.minimum(x, 50.0))), 0.0)


def _factor(s: jax.Array, sigma: jax.Array, data: FamilyData) -> None:
    cond = _gain_marginal(s, data.y, data.mask, data.R0, sigma, 1.0 - data.R0)
    numpyro.factor("gain", cond.log_norm)


def power_numpyro_model(data: FamilyData) -> None:
    """Power law ``R0 + g (C / C_ref)^b`` for one run, the gain ``g`` integrated out.

    Samples ``b`` and ``sigma``; ``g ~ Uniform(0, 1 - R0)`` enters as a
    ``numpyro.factor`` holding the marginal likelihood (:func:`_gain_marginal`).
    """
    b = numpyro.sample("b", dist.LogNormal(*_POWER_B))
    sigma = numpyro.sample("sigma", dist.HalfNormal(_SIGMA_SCALE))
    _factor(_power_fraction({"b": b}, data), sigma, data)


def exponential_numpyro_model(data: FamilyData) -> None:
    """Weibull saturation ``R0 + g (1 - exp(-(C / C_s)^B))`` for one run, ``g`` integrated out.

    The priors are ``B ~ LogNormal(log 1.5, 0.7)`` and ``C_s ~ LogNormal(log C_ref, 1.5)``,
    but NUTS samples data-anchored coordinates ``u, v`` (see :func:`_exp_coords`) with
    the Jacobian in a ``numpyro.factor``; ``B`` and ``C_s`` are deterministic sites.
    ``g = A - R0 ~ Uniform(0, 1 - R0)`` enters as a ``numpyro.factor`` holding the
    marginal likelihood (:func:`_gain_marginal`).
    """
    real = dist.ImproperUniform(dist.constraints.real, (), ())
    u = numpyro.sample("u", real)
    v = numpyro.sample("v", real)
    sigma = numpyro.sample("sigma", dist.HalfNormal(_SIGMA_SCALE))
    params = {"u": u, "v": v}
    log_B, log_C_s, log_jac = _exp_params(params, data)
    numpyro.deterministic("B", jnp.exp(log_B))
    numpyro.deterministic("C_s", jnp.exp(log_C_s))
    prior = (
        dist.Normal(*_EXP_B).log_prob(log_B)
        + dist.Normal(data.log_c_ref, _EXP_C_LOG_SD).log_prob(log_C_s)
        + log_jac
    )
    numpyro.factor("prior", prior)
    _factor(_exponential_fraction(params, data), sigma, data)


class _Family(NamedTuple):
    model: Callable
    fraction: Callable  # (sampled constrained params, FamilyData) -> s, JAX
    outputs: Callable  # (sampled constrained params, FamilyData) -> posterior variables but the gain
    init: Callable  # FamilyData -> dict of unconstrained centres
    var_names: tuple[str, ...]  # posterior variables


def _power_init(data: FamilyData) -> dict:
    return {"b": jnp.asarray(_POWER_B[0]), "sigma": jnp.log(0.03)}


def _exponential_init(data: FamilyData) -> dict:
    return {"u": jnp.asarray(math.log(0.75)), "v": jnp.asarray(0.0), "sigma": jnp.log(0.03)}


def _exponential_outputs(params: dict, data: FamilyData) -> dict:
    log_B, log_C_s, _ = _exp_params(params, data)
    return {"B": jnp.exp(log_B), "C_s": jnp.exp(log_C_s), "sigma": params["sigma"]}


_SPECS = {
    "power": _Family(power_numpyro_model, _power_fraction, lambda p, d: p, _power_init, ("g", "b", "sigma")),
    "exponential": _Family(
        exponential_numpyro_model,
        _exponential_fraction,
        _exponential_outputs,
        _exponential_init,
        ("A", "B", "C_s", "sigma"),
    ),
}


def _curve(family: str, compute: np.ndarray, post: Mapping[str, np.ndarray], R0, c_ref) -> np.ndarray:
    """Mean reward of a family (NumPy, broadcasting) at ``compute >= 0``."""
    c = np.asarray(compute, float)
    pos = c > 0
    log_c = np.log(np.where(pos, c, 1.0))
    if family == "power":
        s = np.exp(np.minimum(post["b"] * (log_c - np.log(c_ref)), 50.0))
        return R0 + post["g"] * np.where(pos, s, 0.0)
    if family == "exponential":
        s = -np.expm1(-np.exp(np.minimum(post["B"] * (log_c - np.log(post["C_s"])), 50.0)))
        return R0 + (post["A"] - R0) * np.where(pos, s, 0.0)
    raise ValueError(f"unknown family {family!r}")


# ---------------------------------------------------------------------- sampler
class _Config(NamedTuple):
    num_chains: int
    num_warmup: int
    num_samples: int
    target_accept: float = 0.99
    max_tree_depth: int = 8
    group_size: int = 16


@functools.lru_cache(maxsize=16)
def _compiled_sampler(family: str, config: _Config) -> Callable:
    """One jit-compiled batched sampler per (family, config); lanes are run x chain."""
    spec = _SPECS[family]
    model = spec.model

    def potential_gen(data: FamilyData):
        return lambda z: potential_energy(model, (data,), {}, z)

    init_kernel, sample_kernel = hmc(potential_fn_gen=potential_gen, algo="NUTS")

    def one_lane(key: jax.Array, jitter: jax.Array, data: FamilyData):
        k_init, k_g = jax.random.split(key)
        centre = spec.init(data)
        z0 = {k: v + jitter[i] for i, (k, v) in enumerate(sorted(centre.items()))}
        state = init_kernel(
            z0,
            config.num_warmup,
            target_accept_prob=config.target_accept,
            max_tree_depth=config.max_tree_depth,
            dense_mass=True,
            model_args=(data,),
            rng_key=k_init,
        )
        state = jax.lax.fori_loop(
            0, config.num_warmup, lambda _, s: sample_kernel(s, model_args=(data,)), state
        )

        def draw(s, _):
            s = sample_kernel(s, model_args=(data,))
            return s, (s.z, s.diverging, s.num_steps, s.accept_prob, s.energy, -s.potential_energy)

        state, (z, div, steps, acc, energy, lp) = jax.lax.scan(draw, state, None, length=config.num_samples)
        params = constrain_fn(model, (data,), {}, z, batch_ndims=1)
        s = jax.vmap(lambda p: spec.fraction(p, data))(params)  # (draw, point)
        cond = jax.vmap(lambda si, sg: _gain_marginal(si, data.y, data.mask, data.R0, sg, 1.0 - data.R0))(
            s, params["sigma"]
        )
        g = _truncnorm_draw(k_g, cond.mean, cond.sd, cond.upper)
        params = jax.vmap(lambda p: spec.outputs(p, data))(params)
        stats = (div, steps, acc, energy, lp, state.adapt_state.step_size)
        return params, g, stats

    def run_all(keys: jax.Array, jitter: jax.Array, lanes: FamilyData):
        _TRACES["families"] += 1
        return jax.lax.map(lambda a: jax.vmap(one_lane)(*a), (keys, jitter, lanes))

    return jax.jit(run_all)


def _anchor(compute: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Log-midpoint of each run's fitted positive compute."""
    ok = mask & (compute > 0)
    log_c = np.log(np.where(ok, compute, 1.0))
    hi = np.max(np.where(ok, log_c, -np.inf), axis=-1)
    lo = np.min(np.where(ok, log_c, np.inf), axis=-1)
    return 0.5 * (lo + hi)


def _sample(family: str, window, config: _Config, seed: int) -> tuple[dict, np.ndarray, dict]:
    """Sample every run of a FitWindow; arrays come back with shape (run, chain, draw)."""
    n_runs, n_points = window.reward.shape
    width = max(8, 8 * math.ceil(n_points / 8))
    pad = width - n_points

    def pad_points(a, fill_last=True):
        if pad == 0:
            return a
        tail = np.repeat(a[:, -1:], pad, axis=1) if fill_last else np.zeros((a.shape[0], pad), a.dtype)
        return np.concatenate([a, tail], axis=1)

    size = max(4, 1 << (n_runs - 1).bit_length())
    gsize = min(config.group_size, size)
    idx = np.concatenate([np.arange(n_runs), np.zeros(size - n_runs, int)])
    compute = pad_points(window.compute)[idx]
    positive = compute > 0
    data = FamilyData(
        log_c=jnp.asarray(np.log(np.where(positive, compute, 1.0))),
        positive=jnp.asarray(positive),
        y=jnp.asarray(pad_points(window.reward)[idx]),
        mask=jnp.asarray(pad_points(window.mask, fill_last=False)[idx]),
        R0=jnp.asarray(window.R0[idx], dtype=jnp.float64),
        log_c_ref=jnp.asarray(np.log(window.c_ref[idx]), dtype=jnp.float64),
        log_c_anchor=jnp.asarray(_anchor(compute, pad_points(window.mask, fill_last=False)[idx])),
    )
    c = config.num_chains
    n_par = len(_SPECS[family].init(jax.tree_util.tree_map(lambda x: x[0], data)))
    k_init, k_run = jax.random.split(jax.random.key(seed))
    jitter = jax.random.uniform(k_init, (size * c, n_par), minval=-1.0, maxval=1.0)
    keys = jax.random.split(k_run, size * c)
    lanes = jax.tree_util.tree_map(lambda x: jnp.repeat(x, c, axis=0), data)

    def grouped(x):  # (run * chain, ...) -> (group, gsize * chain, ...)
        return x.reshape((-1, gsize * c) + x.shape[1:])

    params, g, stats = _compiled_sampler(family, config)(
        grouped(keys), grouped(jitter), jax.tree_util.tree_map(grouped, lanes)
    )

    def back(x):
        x = np.asarray(x)
        return x.reshape((size, c) + x.shape[2:])[:n_runs]

    params = {k: back(v) for k, v in params.items()}
    names = ("diverging", "n_steps", "acceptance_rate", "energy", "lp", "step_size")
    stats = {k: back(v) for k, v in zip(names, stats, strict=True)}
    return params, back(g), stats


# ---------------------------------------------------------------------- results
@dataclass
class FamilyFit:
    """Posterior of a power-law or exponential fit of every run.

    The same reading interface as :class:`~bayes_scalerl.results.FitResult`
    (``run_names``, ``settings``, ``var_names``, :meth:`draws`, :meth:`predict_draws`,
    :meth:`diagnostics`).

    Attributes
    ----------
    dt : xarray.DataTree
        Groups ``posterior`` (the family's parameters, dims ``chain, draw, run``; power:
        ``g, b, sigma``, exponential: ``A, B, C_s, sigma``), ``sample_stats``,
        ``observed_data`` (``reward``, dims ``run, point``, NaN-padded),
        ``constant_data`` (``compute``, ``in_fit``, ``R0_obs``, ``C_ref``) and
        ``log_likelihood`` (``reward``, dims ``chain, draw, run, point``, NaN where a
        point is not fitted).
    family : str
        ``"power"`` or ``"exponential"``.
    """

    dt: xr.DataTree
    family: str

    @property
    def run_names(self) -> list[str]:
        """Run names (the ``run`` coordinate)."""
        return [str(r) for r in self.dt["posterior"]["run"].values]

    @property
    def settings(self) -> dict:
        """The settings of the fit."""
        return json.loads(self.dt.attrs["bayes_scalerl_settings"])

    @property
    def var_names(self) -> list[str]:
        """Posterior variables."""
        return list(_SPECS[self.family].var_names)

    def draws(self, name: str) -> np.ndarray:
        """Draws of a posterior variable as an array of shape ``(run, chain * draw)``."""
        x = self.dt["posterior"][name].values
        return np.moveaxis(x, -1, 0).reshape(x.shape[-1], -1)

    def diagnostics(self) -> pd.DataFrame:
        """Per-run R-hat, ESS, divergences, E-BFMI and ``converged`` (see ``run_diagnostics``)."""
        return run_diagnostics(self.dt, self.var_names)

    def predict_draws(
        self, compute, *, kind: str = "observation", seed: int = 0, runs: Sequence[str] | None = None
    ) -> np.ndarray:
        """Posterior (predictive) draws at ``compute``.

        Parameters
        ----------
        compute : array_like, shape (q,) or (run, q)
            Compute values, shared by all runs or one row per run.
        kind : {"observation", "curve"}
            ``"curve"``: the noise-free mean (a power law may pass 1 beyond ``C_ref``).
            ``"observation"``: a new evaluation, mean plus Gaussian noise, clipped to ``[0, 1]``.
        seed : int
            Seed of the observation noise.
        runs : sequence of str, optional
            Restrict to these runs.

        Returns
        -------
        ndarray, shape (run, sample, q)
        """
        if kind not in ("observation", "curve"):
            raise ValueError(f"kind must be 'observation' or 'curve', got {kind!r}")
        idx = np.arange(len(self.run_names))
        if runs is not None:
            lookup = {r: i for i, r in enumerate(self.run_names)}
            missing = [r for r in runs if r not in lookup]
            if missing:
                raise KeyError(f"unknown run(s): {', '.join(map(repr, missing))}")
            idx = np.array([lookup[r] for r in runs], dtype=int)
        c = np.asarray(compute, float)
        c = np.broadcast_to(c, (len(idx), c.shape[-1])) if c.ndim == 1 else c
        post = {n: self.draws(n)[idx][..., None] for n in self.var_names}
        cd = self.dt["constant_data"]
        R0 = cd["R0_obs"].values[idx][:, None, None]
        c_ref = cd["C_ref"].values[idx][:, None, None]
        mu = _curve(self.family, c[:, None, :], post, R0, c_ref)
        if kind == "curve":
            return mu
        rng = np.random.default_rng(seed)
        return np.clip(mu + post["sigma"] * rng.standard_normal(mu.shape), 0.0, 1.0)


def fit_family(
    runs: Runs | pd.DataFrame,
    family: str,
    *,
    min_compute: float | None = None,
    fit_until: float | None = None,
    chains: int = 4,
    warmup: int = 500,
    samples: int = 500,
    seed: int = 0,
) -> FitResult | FamilyFit:
    """Fit one curve family to every run with batched NUTS.

    Parameters
    ----------
    runs : Runs or pandas.DataFrame
        The curves (a DataFrame is validated with :meth:`Runs.from_frame`).
    family : {"sigmoid", "power", "exponential"}
        The curve family (see the module docstring).
    min_compute, fit_until : float, optional
        Likelihood window, as in :func:`bayes_scalerl.fit`; the first evaluation sets ``R0``.
    chains, warmup, samples : int
        Chains per run, warm-up and kept iterations per chain.
    seed : int
        Seed of the PRNG key.

    Returns
    -------
    FitResult or FamilyFit
        ``"sigmoid"`` returns :func:`bayes_scalerl.fit`'s result; the other families a
        :class:`FamilyFit`. Both have ``dt`` (with a ``log_likelihood`` group of dims
        ``chain, draw, run, point``), ``run_names``, ``draws`` and ``predict_draws``.

    Examples
    --------
    >>> import bayes_scalerl as bs
    >>> from bayes_scalerl.families import fit_family
    >>> res = fit_family(bs.demo_runs(), "power", fit_until=8000)  # doctest: +SKIP
    >>> res.predict_draws([16000.0]).shape                         # doctest: +SKIP
    (18, 2000, 1)
    """
    if family not in FAMILIES:
        raise ValueError(f"family must be one of {FAMILIES}, got {family!r}")
    if not isinstance(runs, Runs):
        runs = Runs.from_frame(runs)
    if family == "sigmoid":
        return fit(
            runs,
            min_compute=min_compute,
            fit_until=fit_until,
            chains=chains,
            warmup=warmup,
            samples=samples,
            seed=seed,
        )
    for name, value in (("chains", chains), ("warmup", warmup), ("samples", samples)):
        if int(value) != value or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    if chains < 2:
        raise ValueError("chains must be at least 2 so that R-hat can be computed")
    window = runs.window(min_compute=min_compute, fit_until=fit_until)
    config = _Config(int(chains), int(warmup), int(samples))
    params, g, stats = _sample(family, window, config, int(seed))
    spec = _SPECS[family]

    def cdr(x):  # (run, chain, draw) -> (chain, draw, run)
        return np.moveaxis(x, 0, -1)

    post = {k: cdr(v) for k, v in params.items()}
    post["g" if family == "power" else "A"] = cdr(g if family == "power" else window.R0[:, None, None] + g)
    post = {k: post[k] for k in spec.var_names}
    names = np.array(runs.names, dtype=object).astype(str)
    dims3 = ("chain", "draw", "run")
    coords = {"run": names, "chain": np.arange(chains), "draw": np.arange(samples)}
    posterior = xr.Dataset({k: (dims3, v) for k, v in post.items()}, coords=coords)
    step = np.broadcast_to(stats["step_size"][:, :, None], stats["lp"].shape)
    stats = {**stats, "step_size": step}
    sample_stats = xr.Dataset({k: (dims3, cdr(v)) for k, v in stats.items()}, coords=coords)

    compute, reward, fitted, _ = _observed(
        runs, lambda c: in_likelihood(c, min_compute=min_compute, fit_until=fit_until)
    )
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
    mu = _curve(
        family,
        np.nan_to_num(compute)[None, None],
        {k: v[..., None] for k, v in post.items()},
        window.R0[None, None, :, None],
        window.c_ref[None, None, :, None],
    )
    sd = post["sigma"][..., None]
    z = (reward[None, None] - mu) / sd
    ll = (-0.5 * z**2 - np.log(sd) - 0.5 * _LOG_2PI).astype(np.float32)
    ll = np.where(fitted[None, None], ll, np.nan)
    log_lik = xr.Dataset({"reward": (dims3 + ("point",), ll)}, coords={**coords, "point": point})
    settings = {
        "family": family,
        "min_compute": min_compute,
        "fit_until": fit_until,
        "chains": chains,
        "warmup": warmup,
        "samples": samples,
        "seed": seed,
        "target_accept": config.target_accept,
        "max_tree_depth": config.max_tree_depth,
        "source": runs.source,
        "version": __version__,
    }
    dt = xr.DataTree.from_dict(
        {
            "posterior": posterior,
            "sample_stats": sample_stats,
            "observed_data": observed,
            "constant_data": constant,
            "log_likelihood": log_lik,
        }
    )
    dt.attrs["bayes_scalerl_settings"] = json.dumps(settings)
    dt.attrs["inference_library"] = "numpyro"
    return FamilyFit(dt, family)


# ---------------------------------------------------------------------- comparison
class _Loo(NamedTuple):
    elpd: float
    se: float
    p: float
    k_max: float
    k_bad: int
    elpd_i: np.ndarray


def _loo_per_run(dt: xr.DataTree) -> list[_Loo]:
    """PSIS-LOO of each run's fitted points (ArviZ), Pareto-k warnings silenced."""
    import arviz_stats as azs

    post = dt["posterior"].to_dataset()
    ll = dt["log_likelihood"].to_dataset()["reward"]
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
        loo = _loo_per_run(res.dt)
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
