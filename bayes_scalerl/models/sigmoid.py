"""The ScaleRL sigmoid as a :class:`~bayes_scalerl.models.base.BatchedModel`.

The density, its data-anchored coordinates and the exact conditional of ``A`` are in
:mod:`bayes_scalerl.models.scalerl`; this class hands them to the engine with the priors bound.
Each chain's reported draws refresh ``sigma`` from its exact conditional and then draw
``A`` exactly given the rest (Rao-Blackwellisation), both steps leaving the posterior
invariant.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.stats import t as student_t

from .base import uniform_init
from .curve import scalerl_curve
from .priors import Priors
from .scalerl import (
    LEVEL_SCALE,
    RunData,
    ar1_phi,
    constrain,
    draw_A,
    level_ref,
    log_density,
    make_run_data,
    n_dim,
    refresh_sigma,
    z_index,
)
from .shape_noise import apply_whitening

__all__ = ["SigmoidModel"]

_LOG_2PI = math.log(2.0 * math.pi)


@dataclass(frozen=True)
class SigmoidModel:
    """``R(C) = R0 + (A - R0) sigmoid(B (log C - log C_mid))`` with the noise model of ``priors``.

    Parameters
    ----------
    priors : Priors
        Priors and likelihood (see :class:`~bayes_scalerl.models.priors.Priors`).
    """

    priors: Priors = field(default_factory=Priors)
    name: str = field(default="sigmoid", init=False)

    @property
    def var_names(self) -> tuple[str, ...]:
        names = ("A", "B", "C_mid", "sigma")
        if self.priors.R0_fitted:
            names += ("R0",)
        if self.priors.rho_sampled:
            names += ("rho",)
        return names

    @property
    def needs_n_eval(self) -> bool:
        return self.priors.likelihood == "binomial"

    def spec(self) -> dict:
        return {"model": self.name, "priors": self.priors.to_dict()}

    def data(self, inputs: Mapping[str, jax.Array]) -> RunData:
        return make_run_data(
            inputs["compute"],
            inputs["reward"],
            inputs["mask"],
            inputs["R0"],
            inputs["c_ref"],
            self.priors,
            inputs.get("n_eval"),
            inputs.get("rho"),
            inputs.get("ou"),
            (inputs["whiten"], inputs["whiten_logdet"]) if "whiten" in inputs else None,
            inputs.get("ar_lag"),
            inputs.get("prior"),
        )

    def n_dim(self, n_points: int) -> int:
        return n_dim(self.priors, n_points)

    def init(self, key: jax.Array, data: RunData, n_chains: int, n_dim: int) -> jax.Array:
        z = uniform_init(key, n_chains, n_dim)
        if not self.priors.R0_fitted:
            return z
        # R0 near the first evaluation (within about +-0.2 on the logit of its share of the
        # anchor's level), and the rise at the anchor spread as when R0 is that evaluation,
        # rather than a uniform start far below or above the data (measured on 200 weakly
        # identified runs: 55 s -> 51 s; LEVEL_SCALE did the rest)
        i = z_index(self.priors)["R0"]
        r0 = jnp.clip(data.R0, 0.01, 0.99)
        level = r0 + (1.0 - r0) * jax.nn.sigmoid(z[:, 1])
        z = z.at[:, i].set(jnp.log(r0) - jnp.log(level - r0) + 0.1 * z[:, i])
        logit_level = jnp.log(level) - jnp.log1p(-level)
        return z.at[:, 1].set((logit_level - level_ref(data)) / LEVEL_SCALE)

    def potential(self, z: jax.Array, data: RunData) -> jax.Array:
        return -log_density(z, data, self.priors)

    def report(self, key: jax.Array, z: jax.Array, data: RunData) -> dict[str, jax.Array]:
        # sigma given B, C_mid and NUTS's gain, then A given B, C_mid and that sigma
        k_sigma, k_a = jax.random.split(key)
        sigma = refresh_sigma(k_sigma, z, data, self.priors)
        A = draw_A(k_a, z, data, self.priors, sigma=sigma)
        p = constrain(z, data, self.priors)
        out = {"A": A, "B": p.B, "C_mid": p.C_mid, "sigma": sigma, "R0": p.R0, "rho": p.rho}
        return {k: out[k] for k in self.var_names}

    def loglik(self, params: Mapping[str, jax.Array], data: RunData) -> jax.Array:
        """Pointwise log-likelihood; AR(1): each point given the previous fitted one; with
        smooth departures, given every earlier fitted one."""
        R0 = params["R0"] if "R0" in params else data.R0
        mu = R0 + (params["A"] - R0) * _fraction(params["B"], params["C_mid"], data)
        sigma = params["sigma"]
        y = data.y
        lik = self.priors.likelihood
        if lik == "student_t":
            return student_t.logpdf(y, self.priors.nu, loc=mu, scale=sigma)
        var = sigma**2 + data.bvar  # bvar is 0 unless binomial
        if data.whiten is not None:  # each point given the earlier fitted ones (the filter's innovations)
            w = apply_whitening(data.whiten, jnp.where(data.mask, y - mu, 0.0)) / sigma
            return -0.5 * w**2 - jnp.log(sigma) + jnp.log(data.whiten[..., -1]) - 0.5 * _LOG_2PI
        if lik == "ar1":
            phi = ar1_phi(params["rho"] if "rho" in params else data.rho, data.ar_lag)
            prev = jnp.concatenate([jnp.zeros((1,), bool), data.mask[:-1]]) & data.mask
            e_prev = jnp.concatenate([jnp.zeros((1,)), (y - mu)[:-1]])
            mu = jnp.where(prev, mu + phi * e_prev, mu)
            var = jnp.where(prev, var * (1.0 - phi**2), var)
        return -0.5 * (y - mu) ** 2 / var - 0.5 * jnp.log(var) - 0.5 * _LOG_2PI

    def mean(self, compute: np.ndarray, params: Mapping[str, np.ndarray], R0, c_ref) -> np.ndarray:
        R0 = params.get("R0", R0)
        return scalerl_curve(compute, params["A"], params["B"], params["C_mid"], R0)


def _fraction(B: jax.Array, C_mid: jax.Array, data: RunData) -> jax.Array:
    return jnp.where(data.positive, jax.nn.sigmoid(B * (data.log_c - jnp.log(C_mid))), 0.0)
