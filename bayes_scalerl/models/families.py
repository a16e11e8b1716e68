"""Curve families beside the ScaleRL sigmoid, as :class:`~bayes_scalerl.models.base.BatchedModel` s.

Every family is ``R(C) = R0 + g f(C; theta)`` with ``R0`` the run's first evaluation and
a gain ``g`` in ``(0, 1 - R0)`` (prior uniform there):

``power``
    A power law, ``f = (C / C_ref)^b`` with ``b > 0`` and ``C_ref`` the run's largest
    fitted compute: ``g`` is the gain reached at ``C_ref``, so the curve stays ``<= 1``
    within the fitted range but does not saturate beyond it.
``exponential``
    Weibull-type saturation, ``f = 1 - exp(-(C / C_s)^B)``, with asymptote
    ``A = R0 + g`` in ``(R0, 1)``; ``C_s`` is the compute at which ``1 - 1/e`` (63%) of
    the gain is reached.

Given ``theta`` and the noise ``sigma`` the mean is linear in ``g``, so ``g`` is
integrated out in closed form (:func:`gain_marginal`) and drawn exactly for every
posterior draw afterwards. The exponential family is sampled in data-anchored
coordinates, as the sigmoid is (the gain fraction reached and the log-slope at the
middle of the fit window; see :func:`exp_coords`): in ``(log B, log C_s)`` a curve seen
before its saturation leaves a curved ridge ending at the ``A <= 1`` wall.

Priors (both share the sigmoid's noise prior ``sigma ~ HalfNormal(0.1)`` and the
uniform gain):

- power: ``b ~ LogNormal(log 0.5, 1.0)`` (90% prior interval about 0.1-2.6);
- exponential: ``B ~ LogNormal(log 1.5, 0.7)``, ``C_s ~ LogNormal(log C_ref, 1.5)``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .priors import Priors
from .scalerl import GainConditional, log_diff_ndtr, truncnorm_draw

__all__ = ["FamilyData", "PowerModel", "ExponentialModel", "gain_marginal", "exp_coords"]

_LOG_2PI = math.log(2.0 * math.pi)
_SIGMA_SCALE = Priors().sigma_scale
_POWER_B = (math.log(0.5), 1.0)  # LogNormal(loc, scale) of the power-law exponent b
_EXP_B = (math.log(1.5), 0.7)  # LogNormal(loc, scale) of the Weibull shape B
_EXP_C_LOG_SD = 1.5  # sd of log C_s around log C_ref


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


def family_data(inputs: Mapping[str, jax.Array]) -> FamilyData:
    """:class:`FamilyData` (leading run axis) from the engine's padded inputs."""
    compute = jnp.asarray(inputs["compute"], dtype=jnp.float64)
    positive = compute > 0
    log_c = jnp.log(jnp.where(positive, compute, 1.0))
    mask = jnp.asarray(inputs["mask"], dtype=bool)
    ok = mask & positive
    hi = jnp.max(jnp.where(ok, log_c, -jnp.inf), axis=-1)
    lo = jnp.min(jnp.where(ok, log_c, jnp.inf), axis=-1)
    return FamilyData(
        log_c=log_c,
        positive=positive,
        y=jnp.asarray(inputs["reward"], dtype=jnp.float64),
        mask=mask,
        R0=jnp.asarray(inputs["R0"], dtype=jnp.float64),
        log_c_ref=jnp.log(jnp.asarray(inputs["c_ref"], dtype=jnp.float64)),
        log_c_anchor=0.5 * (lo + hi),
    )


def gain_marginal(s, y, mask, R0, sigma, upper) -> GainConditional:
    """Conditional of the gain and the marginal likelihood it leaves, for given fractions.

    With ``y_i - R0 = g s_i + eps_i``, ``eps_i ~ Normal(0, sigma)`` over the points in
    ``mask`` and ``g ~ Uniform(0, upper)``, the conditional of ``g`` is a normal truncated
    to ``(0, upper)`` and ``log_norm = log p(y | s, sigma, R0)`` (``g`` integrated out).
    The algebra of :func:`bayes_scalerl.models.scalerl.gain_conditional` for a uniform prior, for
    any vector of gain fractions ``s`` (one run, no run axis).
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
    log_mass = log_diff_ndtr(-mean / sd, (upper - mean) / sd)
    log_free = (
        -0.5 * n * (_LOG_2PI + jnp.log(var))
        - 0.5 * rss0 / var
        + 0.5 * h * mean
        + 0.5 * (_LOG_2PI - jnp.log(prec))
        - jnp.log(upper)
    )
    return GainConditional(mean, sd, upper, log_free + log_mass, log_free)


def exp_coords(u: jax.Array, v: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """``(log B, x_a, log |d(log B, log C_s) / d(u, v)|)`` of the exponential's sampled coordinates.

    ``x_a = B (a - log C_s)`` at the anchor ``a``: the gain fraction there is
    ``s_a = 1 - exp(-exp(x_a)) = 1 / (1 + softplus(v))`` and ``u = log S`` with
    ``S = B h(x_a)`` the log-slope ``d log f / d log C`` at the anchor,
    ``h(x) = exp(x - exp(x)) / (1 - exp(-exp(x)))``. As for the sigmoid, the ridge of a
    curve seen before its saturation runs along ``v`` at fixed ``u``. The Jacobian of the
    map is ``|dx_a/dv| / B``.
    """
    sp = jax.nn.softplus(v)
    L = jnp.log1p(1.0 / sp)  # exp(x_a) = -log(1 - s_a)
    x_a = jnp.log(L)
    log_h = x_a - L - jnp.log(-jnp.expm1(-L))
    log_B = u - log_h
    log_dx = jax.nn.log_sigmoid(v) - jnp.log(L) - jnp.log(sp) - jnp.log1p(sp)
    return log_B, x_a, log_dx - log_B


def _log_halfnormal_in_log(t: jax.Array) -> jax.Array:
    """Log density of ``t = log(sigma)`` for ``sigma ~ HalfNormal(scale)`` (Jacobian included)."""
    x = jnp.exp(t) / _SIGMA_SCALE
    return t - 0.5 * x * x + 0.5 * math.log(2.0 / math.pi) - math.log(_SIGMA_SCALE)


def _log_normal(x, loc, scale):
    return -0.5 * ((x - loc) / scale) ** 2 - jnp.log(scale) - 0.5 * _LOG_2PI


class _GainFamily:
    """Shared pieces of the gain-integrated families: data, init, potential, report, loglik."""

    needs_n_eval = False
    _centre: tuple[float, ...] = ()

    def spec(self) -> dict:
        return {"model": self.name}

    def data(self, inputs: Mapping[str, jax.Array]) -> FamilyData:
        return family_data(inputs)

    def n_dim(self, n_points: int) -> int:
        return len(self._centre)

    def init(self, key: jax.Array, data: FamilyData, n_chains: int, n_dim: int) -> jax.Array:
        jitter = jax.random.uniform(key, (n_chains, n_dim), minval=-1.0, maxval=1.0)
        return jnp.asarray(self._centre) + jitter

    def _theta(self, z: jax.Array, data: FamilyData) -> tuple[jax.Array, jax.Array, jax.Array]:
        """(gain fraction at each point, sigma, log prior of z) for one draw."""
        raise NotImplementedError

    def potential(self, z: jax.Array, data: FamilyData) -> jax.Array:
        s, sigma, lp = self._theta(z, data)
        cond = gain_marginal(s, data.y, data.mask, data.R0, sigma, 1.0 - data.R0)
        return -(lp + cond.log_norm)

    def report(self, key: jax.Array, z: jax.Array, data: FamilyData) -> dict[str, jax.Array]:
        s, sigma, _ = jax.vmap(lambda zz: self._theta(zz, data))(z)
        cond = jax.vmap(lambda si, sg: gain_marginal(si, data.y, data.mask, data.R0, sg, 1.0 - data.R0))(
            s, sigma
        )
        g = truncnorm_draw(key, cond.mean, cond.sd, cond.upper)
        return self._outputs(z, g, sigma, data)

    def loglik(self, params: Mapping[str, jax.Array], data: FamilyData) -> jax.Array:
        mu = self._mean_jax(params, data)
        sigma = params["sigma"]
        return -0.5 * ((data.y - mu) / sigma) ** 2 - jnp.log(sigma) - 0.5 * _LOG_2PI


@dataclass(frozen=True)
class PowerModel(_GainFamily):
    """Power law ``R0 + g (C / C_ref)^b``; posterior variables ``g, b, sigma``."""

    name: str = field(default="power", init=False)
    _centre: tuple[float, ...] = field(default=(_POWER_B[0], math.log(0.03)), init=False, repr=False)

    @property
    def var_names(self) -> tuple[str, ...]:
        return ("g", "b", "sigma")

    def _theta(self, z, data):
        log_b, t = z[0], z[1]
        s = jnp.where(
            data.positive, jnp.exp(jnp.minimum(jnp.exp(log_b) * (data.log_c - data.log_c_ref), 50.0)), 0.0
        )
        lp = _log_normal(log_b, *_POWER_B) + _log_halfnormal_in_log(t)
        return s, jnp.exp(t), lp

    def _outputs(self, z, g, sigma, data):
        return {"g": g, "b": jnp.exp(z[..., 0]), "sigma": sigma}

    def _mean_jax(self, params, data):
        x = params["b"] * (data.log_c - data.log_c_ref)
        return data.R0 + params["g"] * jnp.where(data.positive, jnp.exp(jnp.minimum(x, 50.0)), 0.0)

    def mean(self, compute: np.ndarray, params: Mapping[str, np.ndarray], R0, c_ref) -> np.ndarray:
        c = np.asarray(compute, float)
        pos = c > 0
        log_c = np.log(np.where(pos, c, 1.0))
        s = np.exp(np.minimum(params["b"] * (log_c - np.log(c_ref)), 50.0))
        return R0 + params["g"] * np.where(pos, s, 0.0)


@dataclass(frozen=True)
class ExponentialModel(_GainFamily):
    """Weibull saturation ``R0 + (A - R0) (1 - exp(-(C / C_s)^B))``; variables ``A, B, C_s, sigma``."""

    name: str = field(default="exponential", init=False)
    _centre: tuple[float, ...] = field(default=(math.log(0.75), 0.0, math.log(0.03)), init=False, repr=False)

    @property
    def var_names(self) -> tuple[str, ...]:
        return ("A", "B", "C_s", "sigma")

    @staticmethod
    def _params(z, data):
        log_B, x_a, log_jac = exp_coords(z[..., 0], z[..., 1])
        return log_B, data.log_c_anchor - x_a * jnp.exp(-log_B), log_jac

    def _theta(self, z, data):
        log_B, log_C_s, log_jac = self._params(z, data)
        x = jnp.exp(log_B) * (data.log_c - log_C_s)
        s = jnp.where(data.positive, -jnp.expm1(-jnp.exp(jnp.minimum(x, 50.0))), 0.0)
        lp = (
            _log_normal(log_B, *_EXP_B)
            + _log_normal(log_C_s, data.log_c_ref, _EXP_C_LOG_SD)
            + log_jac
            + _log_halfnormal_in_log(z[2])
        )
        return s, jnp.exp(z[2]), lp

    def _outputs(self, z, g, sigma, data):
        log_B, log_C_s, _ = self._params(z, data)
        return {"A": data.R0 + g, "B": jnp.exp(log_B), "C_s": jnp.exp(log_C_s), "sigma": sigma}

    def _mean_jax(self, params, data):
        x = params["B"] * (data.log_c - jnp.log(params["C_s"]))
        s = jnp.where(data.positive, -jnp.expm1(-jnp.exp(jnp.minimum(x, 50.0))), 0.0)
        return data.R0 + (params["A"] - data.R0) * s

    def mean(self, compute: np.ndarray, params: Mapping[str, np.ndarray], R0, c_ref) -> np.ndarray:
        c = np.asarray(compute, float)
        pos = c > 0
        log_c = np.log(np.where(pos, c, 1.0))
        s = -np.expm1(-np.exp(np.minimum(params["B"] * (log_c - np.log(params["C_s"])), 50.0)))
        return R0 + (params["A"] - R0) * np.where(pos, s, 0.0)
