"""Priors of ``B`` and ``C_mid`` learnt from the batch (empirical Bayes on a grid).

A run whose window stops before its midpoint leaves ``B`` and ``C_mid`` to their
priors, and the default priors are wide (``C_mid`` within 1/12 to 12 times the window's
end). When the batch holds other runs whose data do pin their midpoints, they say where
midpoints of such runs lie. ``Priors(from_batch=True)`` learns that population before the
fit, and gives each run the predictive of the others:

1. Each run's marginal likelihood ``p(y | log B, log C_mid)`` on a grid (:func:`grid_loglik`),
   the gain ``A - R0`` integrated in closed form
   (:func:`~bayes_scalerl.models.scalerl.gain_conditional`, ``A`` uniform up to 1) and
   ``sigma`` on a grid of its own, with the batch's AR(1) correlation and smooth
   departures as in the fit. A run whose data cannot tell where its midpoint is gives a
   flat likelihood beyond its data, so it neither pulls the population towards its window
   nor drops out of it (runs are not selected by how well they identify ``C_mid``).
2. The population: ``log B ~ Normal(mu_B, tau_B)`` and ``log C_mid ~ Normal(mu_C, tau_C)``,
   with ``C_mid`` counted either relative to each run's window end or in absolute compute
   (whichever has the larger marginal likelihood, :func:`learn_population`). The
   hyperparameters are integrated on a grid under a hyperprior whose predictive is the
   default prior, so a batch that says little leaves each run with the default.
3. Run ``i``'s prior is the population's predictive given every run but ``i`` (its data
   is not used twice), matched by a normal in ``log B`` and in ``log C_mid``.

The runs are then fitted independently under those priors (a two-stage approximation of
the hierarchical model, Morris 1983; Efron 2010): cheap, and the fit's engine and
diagnostics are unchanged.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from scipy.special import logsumexp, ndtr

from ..engine import runtime
from .priors import Priors
from .scalerl import gain_conditional, log_diff_ndtr, truncnorm_quantile

__all__ = ["GridLik", "Population", "grid_loglik", "learn_population", "training_runs", "fixed_prior_gains"]


class GridLik(NamedTuple):
    """Each run's log marginal likelihood on a grid of ``(log B, log C_mid)``.

    Attributes
    ----------
    log_B : ndarray, shape (b,)
        The grid of ``log B``.
    offset : ndarray, shape (c,)
        The grid of ``log C_mid`` minus each run's ``log_loc``.
    log_loc : ndarray, shape (run,)
        Each run's default prior median of ``log C_mid`` (its window's end).
    loglik : ndarray, shape (run, b, c)
        ``log p(y | B, C_mid)``, up to a constant per run (``A`` uniform on ``(R0, 1)``).
    R0 : ndarray, shape (run,)
        Each run's reward before training.
    gain_loglik, gain_mean, gain_sd : ndarray, shape (run, b, c, k)
        The likelihood of the gain ``g = A - R0`` in each cell at each of ``k`` values of
        ``sigma`` (weighted by its prior), ``exp(gain_loglik) Normal(g; gain_mean, gain_sd)``
        over the whole real line, whose sum over ``k`` integrates ``sigma``: what a
        population of ``A`` needs (``learn_population(ceiling=True)``).
    """

    log_B: np.ndarray
    offset: np.ndarray
    log_loc: np.ndarray
    loglik: np.ndarray
    R0: np.ndarray
    gain_loglik: np.ndarray
    gain_mean: np.ndarray
    gain_sd: np.ndarray

    def take(self, idx) -> GridLik:
        """The grid of the runs ``idx``."""
        return self._replace(**{f: getattr(self, f)[idx] for f in self._fields[2:]})


class Population(NamedTuple):
    """Each run's learnt prior, and what the batch said.

    Attributes
    ----------
    rows : ndarray, shape (run, 4) or (run, 6)
        Each run's prior: median of ``log B``, its sd, median of ``log C_mid`` (absolute
        log compute), its sd (``FitWindow.prior``); with the ceiling pooled, also the
        location and scale of ``A``'s normal (truncated to ``(R0, 1)`` in the fit).
    scale : {"relative", "absolute"}
        How ``C_mid`` is shared: relative to each run's window end, or in compute.
    log_evidence : dict
        The marginal likelihood of each way (``"relative"``, ``"absolute"``).
    B_median, B_log_sd, C_mid_factor, C_mid_log_sd : float
        The population's predictive given every run (``C_mid_factor``: the median of
        ``C_mid`` over the window's end with ``"relative"``; the median of ``C_mid`` in
        compute with ``"absolute"``).
    A_mean, A_sd : float or None
        With the ceiling pooled, the predictive of ``A`` given every run, as the location
        and scale of a normal before its truncation to ``(R0, 1)``.
    """

    rows: np.ndarray
    scale: str
    log_evidence: dict
    B_median: float
    B_log_sd: float
    C_mid_factor: float
    C_mid_log_sd: float
    A_mean: float | None = None
    A_sd: float | None = None

    def describe(self) -> str:
        """One line for the fit's settings."""
        where = (
            f"C_mid median {self.C_mid_factor:.3g} x each run's window end"
            if self.scale == "relative"
            else f"C_mid median {self.C_mid_factor:.4g} compute units"
        )
        what, ceiling = "B and C_mid", ""
        if self.A_mean is not None:
            what = "A, B and C_mid"
            ceiling = f"; A ~ Normal({self.A_mean:.3f}, {self.A_sd:.3f}) truncated to (R0, 1)"
        return (
            f"priors of {what} learnt from the batch ({self.scale} midpoints): B median "
            f"{self.B_median:.3g}, log sd {self.B_log_sd:.2f}; {where}, log sd {self.C_mid_log_sd:.2f}"
            f"{ceiling} (each run's prior from the other runs)"
        )


_SPAN = 3.5  # the run grid covers the default prior's median +- 3.5 sd
_N_SIGMA = 11


@runtime.x64
def grid_loglik(window, priors: Priors, *, n_b: int = 29, n_c: int = 41, chunk: int = 64) -> GridLik:
    """Each run's log marginal likelihood on a grid of ``(log B, log C_mid)``.

    Parameters
    ----------
    window : FitWindow
        The fit's window (with the batch's ``rho`` and ``ou`` where the fit has them).
    priors : Priors
        The fit's priors (the grid spans their ``B`` and ``C_mid`` priors; the noise model
        is theirs, the Student-t likelihood taken as Gaussian).
    n_b, n_c : int
        Grid points in ``log B`` and in ``log C_mid``.
    chunk : int
        Runs per compiled call.

    Returns
    -------
    GridLik
    """
    from ..engine.driver import _with_whitening, padded_inputs

    if priors.likelihood == "student_t":  # taken as Gaussian (its scale mixture has a latent per point)
        priors = dataclasses.replace(priors, likelihood="gaussian", rho=None, shape_noise=None)
        window = window._replace(rho=None, ou=None)
    # the fit's own inputs (points padded to a multiple of 8), with the default C_mid prior's median
    binomial = priors.likelihood == "binomial"
    arrays = _with_whitening(padded_inputs(window._replace(prior=None), n_eval=binomial))
    n_runs = arrays["R0"].shape[0]
    if priors.likelihood == "ar1" and not priors.rho_sampled and "rho" not in arrays:
        # "auto" or "reml" without the fit's estimate: estimated here, as the model would
        from ..data.noise import fixed_rho

        rho = fixed_rho(priors.rho, arrays["compute"], arrays["reward"], arrays["mask"], arrays["R0"])
        arrays["rho"] = np.broadcast_to(np.asarray(rho, dtype=np.float64), arrays["R0"].shape)
    chunk = min(chunk, 1 << max(n_runs - 1, 0).bit_length())  # few shapes: powers of two
    log_B = math.log(priors.B_median) + priors.B_log_sd * np.linspace(-_SPAN, _SPAN, n_b)
    offset = priors.C_mid_log_sd * np.linspace(-_SPAN, _SPAN, n_c)
    n_fit = np.maximum(np.sum(np.asarray(arrays["mask"], bool), axis=1), 1)
    # +- about 4 sd of log sigma's likelihood, plus the coarse grid's step
    half = np.minimum(2.5, 4.0 / np.sqrt(2.0 * n_fit)) + 0.25
    use_rho = priors.likelihood == "ar1"
    out = np.empty((n_runs, n_b, n_c))
    gain = np.empty((3, n_runs, n_b, n_c, _N_SIGMA))
    log_loc = np.empty(n_runs)
    fn = _grid_fn(priors, use_rho)
    for lo in range(0, n_runs, chunk):
        hi = min(lo + chunk, n_runs)
        idx = np.concatenate([np.arange(lo, hi), np.full(chunk - (hi - lo), lo)])
        # the run data are built inside the compiled program (no eager operation per shape)
        part = {k: jnp.asarray(v[idx]) for k, v in arrays.items()}
        ll, g, loc = fn(part, jnp.asarray(log_B), jnp.asarray(offset), jnp.asarray(half[idx]))
        out[lo:hi] = np.asarray(ll)[: hi - lo]
        gain[:, lo:hi] = np.asarray(g)[:, : hi - lo]
        log_loc[lo:hi] = np.asarray(loc)[: hi - lo]
    return GridLik(log_B, offset, log_loc, out, np.asarray(arrays["R0"], dtype=np.float64), *gain)


_GRID_CACHE: dict = {}
_COARSE = np.log(np.geomspace(1e-3, 0.5, 16))  # where each cell's sigma is looked for first


def _grid_fn(priors: Priors, use_rho: bool):
    from .sigmoid import SigmoidModel

    key = (priors, use_rho)
    if key not in _GRID_CACHE:

        def one(data, log_B, offset, half):
            rho = data.rho if use_rho else None

            def at(lb, lc, log_sigma):
                sig = jnp.exp(log_sigma)
                # the half-normal prior of sigma, in log sigma
                lp = log_sigma - 0.5 * (sig / priors.sigma_scale) ** 2
                cond = gain_conditional(lb, lc, sig, data.R0, data, priors, rho=rho)
                # log_free holds the uniform prior's 1/upper: without it, the gain's
                # likelihood integrated over the real line
                free = cond.log_free + jnp.log(cond.upper) + lp
                return cond.log_norm + lp, free, cond.mean, cond.sd

            def cell(lb, off):
                lc = data.log_c_mid_loc + off
                coarse = jax.vmap(lambda t: at(lb, lc, t)[0])(jnp.asarray(_COARSE))
                # then a fine grid of the same spacing in every cell of the run, around the best
                fine = coarse.argmax()
                fine = jnp.asarray(_COARSE)[fine] + half * jnp.linspace(-1.0, 1.0, _N_SIGMA)
                ll, free, mean, sd = jax.vmap(lambda t: at(lb, lc, t))(fine)
                # the gain's likelihood: a mixture of normals over sigma's grid
                return jax.scipy.special.logsumexp(ll), jnp.stack([free, mean, sd])

            return jax.vmap(jax.vmap(cell, (None, 0)), (0, None))(log_B, offset)

        def batched(arrays, log_B, offset, half):
            data = SigmoidModel(priors).data(arrays)
            ll, gain = jax.vmap(one, (0, None, None, 0))(data, log_B, offset, half)
            return ll, jnp.moveaxis(gain, 3, 0), data.log_c_mid_loc  # gain: 3, run, b, c, k

        _GRID_CACHE[key] = jax.jit(batched)
    return _GRID_CACHE[key]


def _cell_weights(points: np.ndarray, mu: np.ndarray, tau: np.ndarray) -> np.ndarray:
    """Mass of Normal(mu, tau) in each grid cell (the end cells run to infinity).

    ``points`` (..., n) sorted and evenly spaced; ``mu``, ``tau`` (h,): returns (..., h, n).
    """
    step = points[..., 1:2] - points[..., 0:1]
    edges = np.concatenate([points - 0.5 * step, points[..., -1:] + 0.5 * step], axis=-1)
    z = (edges[..., None, :] - mu[:, None]) / tau[:, None]
    cdf = ndtr(z)
    cdf[..., 0] = 0.0
    cdf[..., -1] = 1.0
    return np.diff(cdf, axis=-1)


def fixed_prior_gains(grid: GridLik, priors: Priors, rng: np.random.Generator, n: int) -> np.ndarray:
    """Draws of each run's gain ``A - R0`` under the fixed priors, from its grid.

    The posterior a run's own data give under ``priors``' ``B`` and ``C_mid`` priors and
    ``A ~ Uniform(R0, 1)``, whatever priors its fit had: the grid's cells, each ``sigma``
    grid point within them, weighted by prior times likelihood (the gain integrated over
    ``(0, 1 - R0)``), and within a cell the gain's normal truncated to ``(0, 1 - R0)``.
    Exact up to the grid (``(log B, log C_mid)`` steps of 1/4 and 1/6 of their prior
    sds); :func:`~bayes_scalerl.analyses.identify.identifiability` judges a run fitted
    under priors learnt from the batch on it.

    Parameters
    ----------
    grid : GridLik
        The runs' grid (:func:`grid_loglik`, with the priors' ``B`` and ``C_mid`` spans).
    priors : Priors
        The fixed priors (``A`` uniform; ``from_batch`` is ignored).
    rng : numpy.random.Generator
    n : int
        Draws per run.

    Returns
    -------
    ndarray, shape (run, n)
    """
    n_runs = grid.loglik.shape[0]
    upper = (1.0 - grid.R0)[:, None, None, None]
    lo, hi = -grid.gain_mean / grid.gain_sd, (upper - grid.gain_mean) / grid.gain_sd
    with runtime.x64():
        mass = np.asarray(log_diff_ndtr(jnp.asarray(lo), jnp.asarray(hi)))
    b_mu, b_sd = np.array([math.log(priors.B_median)]), np.array([priors.B_log_sd])
    log_b = np.log(_cell_weights(grid.log_B, b_mu, b_sd))[0]
    log_c = np.log(_cell_weights(grid.offset, np.zeros(1), np.array([priors.C_mid_log_sd])))[0]
    logw = grid.gain_loglik + mass + log_b[:, None, None] + log_c[None, :, None]
    logw = logw.reshape(n_runs, -1)
    w = np.exp(logw - logw.max(axis=1, keepdims=True))
    cum = np.cumsum(w, axis=1)
    rows = np.arange(n_runs)[:, None]
    # one sorted array over every run (run r's cumulative mass in (r, r + 1]): one search
    flat = (cum / cum[:, -1:] + rows).ravel()
    at = np.searchsorted(flat, (rng.uniform(size=(n_runs, n)) + rows).ravel()).reshape(n_runs, n)
    cell = np.minimum(at - rows * cum.shape[1], cum.shape[1] - 1)
    m = grid.gain_mean.reshape(n_runs, -1)[rows, cell]
    sd = grid.gain_sd.reshape(n_runs, -1)[rows, cell]
    with runtime.x64():
        u = jnp.asarray(rng.uniform(size=(n_runs, n)))
        g = truncnorm_quantile(u, jnp.asarray(m), jnp.asarray(sd), jnp.asarray(upper[:, :, 0, 0]))
    return np.asarray(g)


class _Axis(NamedTuple):
    """One population's hyperparameters on a grid: ``mu``, ``tau`` (flattened) and log weights."""

    mu: np.ndarray
    tau: np.ndarray
    lw: np.ndarray


def _axis(centre: float, s_mu: float, s_tau: float, mu: np.ndarray, tau: np.ndarray) -> _Axis:
    """The product grid of ``mu`` (evenly spaced) and ``tau`` (geometric), weighted by the
    hyperprior ``mu ~ Normal(centre, s_mu)``, ``tau ~ HalfNormal(s_tau)``."""
    lw_mu = -0.5 * ((mu - centre) / s_mu) ** 2
    # the tau grid is geometric: each point stands for a width proportional to tau
    lw_tau = -0.5 * (tau / s_tau) ** 2 + np.log(tau)
    MU, TAU = np.meshgrid(mu, tau, indexing="ij")
    lw = (lw_mu[:, None] + lw_tau[None, :]).ravel()
    return _Axis(MU.ravel(), TAU.ravel(), lw - logsumexp(lw))


def _hyper_grid(centre: float, sd: float, spread: float, n_mu: int = 25, n_tau: int = 10) -> _Axis:
    """The first grid of a population's ``(mu, tau)``, over its hyperprior.

    ``mu ~ Normal(centre, sqrt(sd^2 / 2 + spread^2))``, ``tau ~ HalfNormal(sd / sqrt(2))``:
    the predictive of a run is the default prior ``Normal(centre, sd)`` when ``spread`` is 0.
    """
    s_mu = math.sqrt(0.5 * sd * sd + spread * spread)
    mu = centre + s_mu * np.linspace(-3.0, 3.0, n_mu)
    tau = sd * np.geomspace(0.04, 2.0, n_tau)
    return _axis(centre, s_mu, sd / math.sqrt(2.0), mu, tau)


def _spans(axis: _Axis, w: np.ndarray) -> np.ndarray:
    """Where posteriors ``w`` (run, point) of an axis have their mass: for each run, ``mu``'s
    and ``log tau``'s mean +- 4 sd, at least one step of the grid either way (a posterior
    narrower than the steps is located by them only to within a step). Shape (run, 4)."""
    out = []
    for x in (axis.mu, np.log(axis.tau)):
        grid = np.unique(x)
        step = float(grid[1] - grid[0]) if grid.size > 1 else 1.0
        m = w @ x
        half = np.maximum(4.0 * np.sqrt(np.maximum(w @ x**2 - m**2, 0.0)), step)
        out += [m - half, m + half]
    return np.stack(out, axis=-1)


def _refine(axis: _Axis, spans: np.ndarray, hyper: tuple, n_mu: int, n_tau: int) -> _Axis:
    """A finer grid over ``spans`` (from :func:`_spans`: their union), weighted by the same hyperprior."""
    m_lo, m_hi = spans[:, 0].min(), spans[:, 1].max()
    lo_tau = math.log(axis.tau.min())  # tau stays above the first grid's least
    t_lo, t_hi = max(spans[:, 2].min(), lo_tau), max(spans[:, 3].max(), lo_tau + 1e-3)
    return _axis(*hyper, np.linspace(m_lo, m_hi, n_mu), np.exp(np.linspace(t_lo, t_hi, n_tau)))


_CACHE_CELLS = 1e8  # at most this many cached cell values (400 MB in float32) in learn_population
_NEGLIGIBLE = 25.0  # cells this far (log units) below a run's best are left out of its population


def _ceiling_terms(grid: GridLik, idx: np.ndarray, axis: _Axis) -> np.ndarray:
    """``log p(y | B, C_mid, mu_A, tau_A)`` of runs ``idx`` in each cell, shape (run, b, c, h).

    ``A ~ Normal(mu_A, tau_A)`` truncated to ``(R0, 1)``: the cell's gain likelihood (a
    mixture of normals over ``sigma``'s grid, :class:`GridLik`) times that prior,
    integrated in closed form. Cells whose likelihood (``A`` uniform on ``(R0, 1)``) is
    more than ``exp(25)`` below the run's best are ``-inf``: no prior of ``A`` lifts
    them back (the densest, ``tau_A`` 0.005, by ``exp(4.4)`` at most). Computed in
    float32 (:func:`~bayes_scalerl.models.scalerl.log_diff_ndtr`'s float32 branch): its
    errors, about 1e-4 in the log of a cell's weight, are far below the grid's own.
    """
    flat = grid.loglik[idx]  # A uniform on (R0, 1): the gain's likelihood where A can be
    best = flat.max(axis=(1, 2), keepdims=True)
    keep = flat >= best - _NEGLIGIBLE
    free = grid.gain_loglik[idx] - best[..., None]  # relative to each run's best (float32's range)
    where = np.nonzero(keep)
    n = where[0].size
    size = max(256, 1 << (n - 1).bit_length())  # few compiled shapes: powers of two
    take = tuple(np.concatenate([w, np.full(size - n, w[0])]) for w in where)
    h = axis.mu.size
    pad = max(_H_PAD, h) - h  # both grids of A in one compiled shape
    f32 = np.float32  # about 3x faster than float64 on a CPU, and ample for a grid's weights
    out = _ceiling_fn(
        jnp.asarray(free[take], f32),
        jnp.asarray(grid.gain_mean[idx][take], f32),
        jnp.asarray(grid.gain_sd[idx][take], f32),
        jnp.asarray(grid.R0[idx][take[0]], f32),
        jnp.asarray(np.pad(axis.mu, (0, pad), mode="edge"), f32),
        jnp.asarray(np.pad(axis.tau, (0, pad), mode="edge"), f32),
    )
    terms = np.full(keep.shape + (h,), -np.inf)
    terms[where] = np.asarray(out, dtype=np.float64)[:n, :h]
    return terms


_H_PAD = 80  # hyper-grid points of A per compiled call (the grids have 60 and 78)


@jax.jit
def _ceiling_fn(free, m, sd, R0, mu, tau):
    """:func:`_ceiling_terms` of cells (cell, k) and hyperparameters (h,): (cell, h)."""
    m, v = m[..., None], sd[..., None] ** 2  # cell, k, h
    R0 = R0[:, None, None]
    upper = 1.0 - R0
    mu0 = mu - R0  # the gain's prior mean
    t2 = tau**2
    log_joint = -0.5 * (m - mu0) ** 2 / (v + t2) - 0.5 * jnp.log(2.0 * jnp.pi * (v + t2))
    prec = 1.0 / v + 1.0 / t2
    mean = (m / v + mu0 / t2) / prec
    s = 1.0 / jnp.sqrt(prec)
    mass = log_diff_ndtr(-mean / s, (upper - mean) / s)
    norm = log_diff_ndtr(-mu0 / tau, (upper - mu0) / tau)[:, 0]
    return jax.scipy.special.logsumexp(free[..., None] + log_joint + mass, axis=1) - norm


def learn_population(
    grid: GridLik,
    priors: Priors,
    *,
    groups: np.ndarray | None = None,
    chunk: int | None = None,
    ceiling: bool = False,
    refine: int = 2,
) -> Population:
    """The population of ``(log B, log C_mid)`` and each run's prior from the other runs.

    Parameters
    ----------
    grid : GridLik
        From :func:`grid_loglik`.
    priors : Priors
        The default priors, whose predictive the hyperprior matches.
    groups : array, shape (run,), optional
        Runs that share a label share data (several metrics of one training run): a group
        counts as one run in the population (each of its runs weighted by one over its
        size), and each run's prior is learnt without its group. Default: each run its own.
    chunk : int, optional
        Runs per block (bounds memory; default 256, or 8 with ``ceiling``).
    ceiling : bool
        Pool the ceiling too: ``A ~ Normal(mu_A, tau_A)`` truncated to each run's
        ``(R0, 1)``, under a hyperprior whose predictive is about as wide as the default's
        uniform ``A``. Where windows end before the midpoints, a shared ceiling pins where
        along its ``(B, C_mid)`` ridge each run sits.
    refine : int
        How many times the hyperparameters are integrated again, each time on a finer grid
        (see Notes). With 0 each run's prior is exactly independent of its own data;
        otherwise up to the quadrature's error.

    Returns
    -------
    Population

    Notes
    -----
    The hyperparameters are integrated on a grid over the hyperprior first, then (twice by
    default) on a finer grid where the last grid's posteriors (given all runs, and given
    all but each run's group) have their mass: a batch of hundreds of runs locates its
    population far more finely than a grid over the hyperprior can.
    """
    n_runs = grid.loglik.shape[0]
    chunk = chunk or (8 if ceiling else 256)
    n_mu, n_tau = (13, 6) if ceiling else (25, 10)
    loc = grid.log_loc
    # a group counts as one run in the population (its curves share a training run's data)
    codes = _codes(groups, n_runs)
    weight = 1.0 / np.bincount(codes)[codes]
    b_centre, b_sd = math.log(priors.B_median), priors.B_log_sd
    hyper_B = (b_centre, b_sd / math.sqrt(2.0), b_sd / math.sqrt(2.0))
    axes = {"B": _hyper_grid(b_centre, b_sd, 0.0, n_mu, n_tau)}
    hyper_C = {
        "relative": (0.0, priors.C_mid_log_sd, 0.0),
        "absolute": (float(loc.mean()), priors.C_mid_log_sd, float(loc.std())),
    }
    hyper = {"B": hyper_B}
    for scale, (centre, sd, spread) in hyper_C.items():
        axes[scale] = _hyper_grid(centre, sd, spread, n_mu, n_tau)
        hyper[scale] = (centre, math.sqrt(0.5 * sd * sd + spread * spread), sd / math.sqrt(2.0))
    if ceiling:  # mu_A ~ N(0.55, 0.25), tau_A ~ HalfNormal(0.25): the predictive spans (0, 1)
        hyper["A"] = (0.55, 0.25, 0.25)
        axes["A"] = _axis(*hyper["A"], np.linspace(-0.2, 1.2, 12), np.geomspace(0.005, 0.6, 5))
    else:  # one point: the uniform prior of A (GridLik.loglik)
        axes["A"] = _Axis(np.zeros(1), np.ones(1), np.zeros(1))

    # each block's cells are kept between the passes over one grid of A (in float32: values
    # in (0, 1] relative to the run's best), where they fit in memory
    keep = ceiling and n_runs * grid.loglik[0].size * max(axes["A"].mu.size, n_mu * n_tau) <= _CACHE_CELLS
    cache: dict = {}

    def cells(idx, ax):
        """Each run's likelihood on (b, c, A's hyper-grid), up to a constant per run."""
        key = idx.tobytes()  # the runs themselves: a block of whole groups need not be a slice
        if cache.get("A") is not ax["A"]:  # a new grid of A: the old cells are stale
            cache.clear()
            cache["A"] = ax["A"]
        if key in cache:
            return cache[key]
        if ceiling:
            ll = _ceiling_terms(grid, idx, ax["A"])
        else:
            ll = grid.loglik[idx][..., None]
        out = np.exp(ll - ll.max(axis=(1, 2, 3), keepdims=True))
        if keep:
            cache[key] = out = out.astype(np.float32)
        return out

    def per_run(idx, P, ax, scale):
        """log p(y_i | hyperparameters) of runs ``idx``, shape (run, hB, hC, hA)."""
        m = np.einsum("hb,rbca->rhac", _cell_weights(grid.log_B, ax["B"].mu, ax["B"].tau), P, optimize=True)
        if scale == "relative":
            WC = _cell_weights(grid.offset, ax[scale].mu, ax[scale].tau)  # hC, c
            out = np.einsum("rhac,kc->rhka", m, WC, optimize=True)
        else:
            WC = _cell_weights(
                loc[idx, None] + grid.offset[None, :], ax[scale].mu, ax[scale].tau
            )  # run, hC, c
            out = np.einsum("rhac,rkc->rhka", m, WC, optimize=True)
        return np.log(np.maximum(out, 1e-300))

    def log_posts(ax, scales):
        totals = {s: 0.0 for s in scales}
        for idx, _ in _group_blocks(groups, n_runs, chunk):  # left_out's blocks: its cells cached
            P = cells(idx, ax)
            for s in scales:
                totals[s] = totals[s] + np.tensordot(weight[idx], per_run(idx, P, ax, s), axes=1)
        return {
            s: totals[s] + ax["B"].lw[:, None, None] + ax[s].lw[None, :, None] + ax["A"].lw[None, None, :]
            for s in scales
        }

    def left_out(ax, scale, log_post):
        """Each block of runs and their posteriors of the hyperparameters without their group."""
        for idx, starts in _group_blocks(groups, n_runs, chunk):
            L = weight[idx, None, None, None] * per_run(idx, cells(idx, ax), ax, scale)
            own = np.add.reduceat(L, starts, axis=0)
            own = np.repeat(own, np.diff(np.append(starts, len(idx))), axis=0)
            lp = log_post[None] - own
            w = np.exp(lp - lp.max(axis=(1, 2, 3), keepdims=True))
            yield idx, w / w.sum(axis=(1, 2, 3), keepdims=True)

    fits = log_posts(axes, ["relative", "absolute"])
    evidence = {s: float(logsumexp(f)) for s, f in fits.items()}
    # relative unless absolute is better (they tie, up to rounding, when every window ends alike)
    scale = "absolute" if evidence["absolute"] > evidence["relative"] + 1e-6 else "relative"
    ax, log_post = {"B": axes["B"], scale: axes[scale], "A": axes["A"]}, fits[scale]
    # finer grids where the posterior given all runs, and given all but each run's group,
    # have their mass (each left-out posterior stays within the grid, so leaving out is
    # exact up to the quadrature); their weights are the hyperprior's density at their points
    names = ("B", scale, "A") if ceiling else ("B", scale)
    for _ in range(int(refine)):
        full = np.exp(log_post - log_post.max())[None]
        posts = itertools.chain([full / full.sum()], (w for _, w in left_out(ax, scale, log_post)))
        spans = {name: [] for name in names}
        for w in posts:
            for k, name in enumerate(names):
                spans[name].append(_spans(ax[name], w.sum(axis=tuple(j for j in (1, 2, 3) if j != k + 1))))
        for name in names:
            ax[name] = _refine(ax[name], np.concatenate(spans[name]), hyper[name], n_mu, n_tau)
        log_post = log_posts(ax, [scale])[scale]
    muB, tauB = ax["B"].mu, ax["B"].tau
    muC, tauC = ax[scale].mu, ax[scale].tau
    muA, tauA = ax["A"].mu, ax["A"].tau
    rows = np.empty((n_runs, 6 if ceiling else 4))

    def moments(w, mu, tau):
        m = w @ mu
        return m, np.sqrt(np.maximum(w @ (tau**2 + mu**2) - m**2, 1e-6))

    for idx, w in left_out(ax, scale, log_post):
        rows[idx, 0], rows[idx, 1] = moments(w.sum(axis=(2, 3)), muB, tauB)
        mC, rows[idx, 3] = moments(w.sum(axis=(1, 3)), muC, tauC)
        rows[idx, 2] = mC + (loc[idx] if scale == "relative" else 0.0)
        if ceiling:
            rows[idx, 4], rows[idx, 5] = moments(w.sum(axis=(1, 2)), muA, tauA)
    w = np.exp(log_post - log_post.max())
    w /= w.sum()
    mB, sB = moments(w.sum(axis=(1, 2)), muB, tauB)
    mC, sC = moments(w.sum(axis=(0, 2)), muC, tauC)
    mA, sA = moments(w.sum(axis=(0, 1)), muA, tauA) if ceiling else (None, None)
    return Population(
        rows=rows,
        scale=scale,
        log_evidence=evidence,
        B_median=math.exp(float(mB)),
        B_log_sd=float(sB),
        C_mid_factor=math.exp(float(mC)),
        C_mid_log_sd=float(sC),
        A_mean=None if mA is None else float(mA),
        A_sd=None if sA is None else float(sA),
    )


def _codes(groups, n_runs: int) -> np.ndarray:
    """Each run's group as an integer (each run its own without ``groups``)."""
    if groups is None:
        return np.arange(n_runs)
    return np.unique(np.asarray(groups), return_inverse=True)[1].ravel()


def _group_blocks(groups, n_runs: int, chunk: int):
    """Blocks of whole groups: (run indices, each group's start within them), about ``chunk`` runs each."""
    codes = _codes(groups, n_runs)
    order = np.argsort(codes, kind="stable")
    bounds = np.flatnonzero(np.diff(codes[order])) + 1
    starts = np.concatenate([[0], bounds])
    ends = np.append(bounds, n_runs)
    i = 0
    while i < len(starts):
        j = i + 1
        while j < len(starts) and ends[j] - starts[i] <= chunk:
            j += 1
        idx = order[starts[i] : ends[j - 1]]
        yield idx, starts[i:j] - starts[i]
        i = j


def training_runs(runs) -> np.ndarray | None:
    """Each curve's training run (``runs.names`` order), or ``None`` without the column.

    Curves of one training run (its several benchmarks) share its data: a run's learnt
    prior leaves them all out (:func:`learn_population`'s ``groups``).
    """
    table = runs.table
    if "training_run" not in table.columns:
        return None
    first = table.drop_duplicates("run").set_index("run")["training_run"]
    return first.reindex(list(runs.names)).astype(str).to_numpy()
