"""The ScaleRL model: log densities for NUTS, the exact conditional of ``A``, and a
plain NumPyro model of the same posterior.

The sampler never sees ``A``. Given ``(B, C_mid, sigma, R0)`` the mean reward is
linear in the gain ``g = A - R0``, so with Gaussian noise and a (truncated) uniform or
normal prior on ``A`` the gain integrates out in closed form (a truncated Gaussian
integral) and is drawn exactly afterwards (Rao-Blackwellisation). NUTS then samples a
3-dimensional posterior (4 with a fitted ``R0``) in which the hard ``A < 1`` wall and
the ``A``-``C_mid`` ridge of curves seen only below ``C_mid`` no longer appear as a
funnel, which is what made the textbook model diverge and mix badly.

What remains is a curved ridge in ``(log B, log C_mid)`` when a run is seen only below
``C_mid``. NUTS samples coordinates anchored at the data instead (one vector per run,
``a`` the log-midpoint of the run's fitted compute range)::

    z[0] = log S,   S = B (1 - s_a), the log-slope of the gain at the anchor
    z[1] = v,       s_a = 1 / (1 + softplus(v)), the gain fraction reached at the anchor
    z[2] = log(sigma / sigma_scale)
    z[3] = logit(R0)                     (only when R0 is fitted)

so ``log B = log S + softplus(logit s_a)`` and ``log C_mid = a - logit(s_a) / B``. Along
the ridge ``S`` stays put, and the conditional gain grows linearly in ``v`` where the
``A <= 1`` wall is met, so the wall is a Gaussian fall-off rather than an exponential
one. The priors are still those of :class:`~bayes_scalerl.priors.Priors` on ``B`` and
``C_mid``; the Jacobian of the map is part of the density.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpyro
import numpyro.distributions as dist
from jax.scipy.special import log_ndtr, ndtri

from .curve import gain_fraction
from .priors import Priors

__all__ = [
    "RunData",
    "Constrained",
    "make_run_data",
    "constrain",
    "log_density",
    "gain_conditional",
    "draw_A",
    "scalerl_numpyro_model",
]

_LOG_2PI = math.log(2.0 * math.pi)


class RunData(NamedTuple):
    """One run's fit inputs (or many, with a leading run axis).

    Attributes
    ----------
    log_c : array, shape (point,)
        Log compute of each point (0 where compute is 0; see ``positive``).
    positive : array of bool, shape (point,)
        Compute > 0 (compute 0 has gain fraction exactly 0).
    y : array, shape (point,)
        Observed reward.
    mask : array of bool, shape (point,)
        Point is in the likelihood.
    R0 : array, shape ()
        First evaluation (used when R0 is not fitted).
    log_c_mid_loc : array, shape ()
        Prior median of ``log C_mid``.
    log_c_anchor : array, shape ()
        Log-midpoint of the fitted compute range (anchor of the sampled coordinates).
    """

    log_c: jax.Array
    positive: jax.Array
    y: jax.Array
    mask: jax.Array
    R0: jax.Array
    log_c_mid_loc: jax.Array
    log_c_anchor: jax.Array


class Constrained(NamedTuple):
    """Parameters in user units (any shape, broadcast together)."""

    log_B: jax.Array
    log_C_mid: jax.Array
    sigma: jax.Array
    R0: jax.Array
    log_jac: jax.Array  # log |d(log B, log C_mid) / d(z0, z1)| + log |dB/dlogB| omitted

    @property
    def B(self) -> jax.Array:
        return jnp.exp(self.log_B)

    @property
    def C_mid(self) -> jax.Array:
        return jnp.exp(self.log_C_mid)


def make_run_data(compute, reward, mask, R0, c_ref, priors: Priors) -> RunData:
    """Build :class:`RunData` (batched over a leading run axis) from padded arrays."""
    compute = jnp.asarray(compute, dtype=jnp.float64)
    positive = compute > 0
    log_c = jnp.log(jnp.where(positive, compute, 1.0))
    if priors.C_mid_median is None:
        loc = jnp.log(jnp.asarray(c_ref, dtype=jnp.float64))
    else:
        loc = jnp.full(jnp.shape(R0), jnp.log(priors.C_mid_median))
    mask_ = jnp.asarray(mask, dtype=bool) & positive
    hi = jnp.max(jnp.where(mask_, log_c, -jnp.inf), axis=-1)
    lo = jnp.min(jnp.where(mask_, log_c, jnp.inf), axis=-1)
    return RunData(
        log_c=log_c,
        positive=positive,
        y=jnp.asarray(reward, dtype=jnp.float64),
        mask=jnp.asarray(mask, dtype=bool),
        R0=jnp.asarray(R0, dtype=jnp.float64),
        log_c_mid_loc=loc,
        log_c_anchor=0.5 * (lo + hi),
    )


def n_dim(priors: Priors) -> int:
    """Number of unconstrained coordinates NUTS samples."""
    return 4 if priors.R0_fitted else 3


def constrain(z: jax.Array, data: RunData, priors: Priors) -> Constrained:
    """Map unconstrained ``z`` (last axis) to user units, with the log-Jacobian."""
    log_S = jnp.log(0.5 * priors.B_median) + z[..., 0]
    v = z[..., 1]
    sp = jax.nn.softplus(v)
    x = -jnp.log(sp)  # logit of the gain fraction at the anchor
    log_B = log_S + jax.nn.softplus(x)  # B = S / (1 - s_a)
    log_C = data.log_c_anchor - x * jnp.exp(-log_B)
    sigma = priors.sigma_scale * jnp.exp(z[..., 2])
    if priors.R0_fitted:
        R0 = jax.nn.sigmoid(z[..., 3])
    else:
        R0 = jnp.broadcast_to(data.R0, log_B.shape)
    # |d(B, log C_mid)/d(S, s_a)| = 1/(s_a (1-s_a) S); ds_a/dx = s_a (1 - s_a); dS/dlogS = S;
    # dx/dv = -sigmoid(v)/softplus(v): so |d(B, log C)/dz| = sigmoid(v) / softplus(v).
    log_jac = jax.nn.log_sigmoid(v) - jnp.log(sp)
    return Constrained(log_B, log_C, sigma, R0, log_jac)


def _log_prior(z: jax.Array, p: Constrained, data: RunData, priors: Priors) -> jax.Array:
    """Log prior density of one run's ``z`` (Jacobians included)."""
    # B ~ LogNormal: density in B is N(log B) / B; C_mid ~ LogNormal: density in log C_mid
    lp = -0.5 * ((p.log_B - jnp.log(priors.B_median)) / priors.B_log_sd) ** 2 - p.log_B
    lp += -0.5 * ((p.log_C_mid - data.log_c_mid_loc) / priors.C_mid_log_sd) ** 2
    lp += p.log_jac
    # sigma ~ HalfNormal(scale): density in t = log(sigma/scale) is exp(t) HN(exp(t))
    lp += z[2] - 0.5 * jnp.exp(2.0 * z[2])
    if priors.R0_fitted:  # R0 ~ Uniform(0, 1), R0 = sigmoid(z3)
        lp += jax.nn.log_sigmoid(z[3]) + jax.nn.log_sigmoid(-z[3])
    return lp


def _log_diff_ndtr(a: jax.Array, b: jax.Array) -> jax.Array:
    """``log(Phi(b) - Phi(a))`` for ``a <= b``, stable in both tails and for ``b - a -> 0``."""
    flip = a > 0  # use the symmetric lower tail, where log_ndtr is accurate
    lo = jnp.where(flip, -b, a)
    hi = jnp.where(flip, -a, b)
    lhi = log_ndtr(hi)
    diff = lhi + jnp.log(-jnp.expm1(jnp.minimum(log_ndtr(lo) - lhi, -1e-300)))
    width = hi - lo
    mid = 0.5 * (hi + lo)
    narrow = jnp.log(jnp.maximum(width, 1e-300)) - 0.5 * mid**2 - 0.5 * _LOG_2PI
    return jnp.where(width < 1e-5, narrow, diff)


class GainConditional(NamedTuple):
    """Truncated normal conditional of the gain ``g = A - R0`` on ``(0, upper)``."""

    mean: jax.Array
    sd: jax.Array
    upper: jax.Array
    log_norm: jax.Array  # log of the integral of likelihood x prior over g


def gain_conditional(
    log_B: jax.Array, log_C_mid: jax.Array, sigma: jax.Array, R0: jax.Array, data: RunData, priors: Priors
) -> GainConditional:
    """The gain's conditional posterior and the marginal likelihood it leaves.

    For one run (no run axis), given ``log B`` and ``log C_mid``: with ``s_i`` the gain
    fraction at each point,
    ``y_i - R0 = g s_i + eps_i``, so ``p(g | rest)`` is a normal truncated to
    ``(0, 1 - R0)`` and ``log_norm = log p(y | B, C_mid, sigma, R0)``.
    """
    x = jnp.exp(log_B) * (data.log_c - log_C_mid)
    s = jnp.where(data.positive, jax.nn.sigmoid(x), 0.0)
    m = data.mask.astype(s.dtype)
    r = data.y - R0
    n = m.sum()
    Ss = jnp.sum(m * s * s)
    Sy = jnp.sum(m * s * r)
    rss0 = jnp.sum(m * r * r)
    var = sigma**2
    upper = 1.0 - R0
    if priors.A_uniform:
        prec_prior = 0.0
        h_prior = 0.0
        const = -jnp.log(upper)
    else:
        mu0 = priors.A_loc - R0
        tau = priors.A_scale
        prec_prior = 1.0 / tau**2
        h_prior = mu0 / tau**2
        const = (
            -0.5 * mu0**2 / tau**2
            - jnp.log(tau)
            - 0.5 * _LOG_2PI
            - _log_diff_ndtr(-mu0 / tau, (upper - mu0) / tau)
        )
    prec = jnp.maximum(Ss / var + prec_prior, 1e-300)
    h = Sy / var + h_prior
    mean = h / prec
    sd = 1.0 / jnp.sqrt(prec)
    log_mass = _log_diff_ndtr(-mean / sd, (upper - mean) / sd)
    log_norm = (
        -0.5 * n * (_LOG_2PI + jnp.log(var))
        - 0.5 * rss0 / var
        + 0.5 * h * mean
        + 0.5 * (_LOG_2PI - jnp.log(prec))
        + log_mass
        + const
    )
    return GainConditional(mean, sd, upper, log_norm)


def log_density(z: jax.Array, data: RunData, priors: Priors) -> jax.Array:
    """Log posterior density (up to a constant) of one run's unconstrained ``z``."""
    p = constrain(z, data, priors)
    cond = gain_conditional(p.log_B, p.log_C_mid, p.sigma, p.R0, data, priors)
    return _log_prior(z, p, data, priors) + cond.log_norm


def _truncnorm_draw(key: jax.Array, mean, sd, upper) -> jax.Array:
    """Inverse-CDF draw from Normal(mean, sd) truncated to (0, upper), stable in the tails."""
    a = (0.0 - mean) / sd
    b = (upper - mean) / sd
    u = jax.random.uniform(key, jnp.shape(mean), dtype=jnp.result_type(float))
    flip = a > 0  # work in the lower tail: x -> -x maps (a, b) to (-b, -a)
    lo = jnp.where(flip, -b, a)
    hi = jnp.where(flip, -a, b)
    llo, lhi = log_ndtr(lo), log_ndtr(hi)
    # log(Phi(lo) + u (Phi(hi) - Phi(lo))), in log space
    log_p = jnp.logaddexp(llo + jnp.log1p(-u), lhi + jnp.log(u))
    t = ndtri(jnp.exp(log_p))
    t = jnp.clip(t, lo, hi)
    t = jnp.where(flip, -t, t)
    # a numerically empty interval (width << sd) is uniform on it
    narrow = (hi - lo) < 1e-6
    t = jnp.where(narrow, a + u * (b - a), t)
    return jnp.clip(mean + sd * t, 0.0, upper)


def draw_A(key: jax.Array, z: jax.Array, data: RunData, priors: Priors) -> jax.Array:
    """Exact draw of ``A`` given one run's ``z`` (any leading sample shape)."""
    p = constrain(z, data, priors)
    cond = jax.vmap(lambda lb, lc, s, r0: gain_conditional(lb, lc, s, r0, data, priors), in_axes=0)(
        p.log_B.reshape(-1), p.log_C_mid.reshape(-1), p.sigma.reshape(-1), p.R0.reshape(-1)
    )
    g = _truncnorm_draw(key, cond.mean, cond.sd, cond.upper)
    return (p.R0.reshape(-1) + g).reshape(p.log_B.shape)


def scalerl_numpyro_model(
    compute, reward=None, *, R0: float, priors: Priors = Priors(), c_ref: float | None = None
) -> None:
    """The same posterior as a plain (not marginalised) NumPyro model, for one run.

    It samples ``A`` directly, as a textbook model would. The package's sampler uses the
    marginalised form; this one exists to check it (tests run both on the same data)
    and for users who want to extend the model with NumPyro's own tools.

    Parameters
    ----------
    compute : array
        Compute of the points in the likelihood (``> 0`` unless R0 is fitted).
    reward : array, optional
        Observed reward; ``None`` samples from the prior predictive.
    R0 : float
        Reward before training (ignored when ``priors.R0_fitted``).
    priors : Priors
    c_ref : float, optional
        Prior median of ``C_mid`` when ``priors.C_mid_median`` is None.
    """
    compute = jnp.asarray(compute, dtype=jnp.float64)
    loc = jnp.log(priors.C_mid_median if priors.C_mid_median is not None else c_ref)
    B = numpyro.sample("B", dist.LogNormal(jnp.log(priors.B_median), priors.B_log_sd))
    C_mid = numpyro.sample("C_mid", dist.LogNormal(loc, priors.C_mid_log_sd))
    sigma = numpyro.sample("sigma", dist.HalfNormal(priors.sigma_scale))
    if priors.R0_fitted:
        R0 = numpyro.sample("R0", dist.Uniform(0.0, 1.0))
    if priors.A_uniform:
        A = numpyro.sample("A", dist.Uniform(R0, 1.0))
    else:
        A = numpyro.sample("A", dist.TruncatedNormal(priors.A_loc, priors.A_scale, low=R0, high=1.0))
    s = gain_fraction(compute, B, C_mid)
    with numpyro.plate("point", compute.shape[0]):
        numpyro.sample("reward", dist.Normal(R0 + (A - R0) * s, sigma), obs=reward)
