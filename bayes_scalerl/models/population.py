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
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from scipy.special import logsumexp, ndtr

from ..engine import runtime
from .priors import Priors
from .scalerl import gain_conditional

__all__ = ["GridLik", "Population", "grid_loglik", "learn_population", "training_runs"]


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
        ``log p(y | B, C_mid)``, up to a constant per run.
    """

    log_B: np.ndarray
    offset: np.ndarray
    log_loc: np.ndarray
    loglik: np.ndarray


class Population(NamedTuple):
    """Each run's learnt prior, and what the batch said.

    Attributes
    ----------
    rows : ndarray, shape (run, 4)
        Each run's prior: median of ``log B``, its sd, median of ``log C_mid`` (absolute
        log compute), its sd (``FitWindow.prior``).
    scale : {"relative", "absolute"}
        How ``C_mid`` is shared: relative to each run's window end, or in compute.
    log_evidence : dict
        The marginal likelihood of each way (``"relative"``, ``"absolute"``).
    B_median, B_log_sd, C_mid_factor, C_mid_log_sd : float
        The population's predictive given every run (``C_mid_factor``: the median of
        ``C_mid`` over the window's end with ``"relative"``; the median of ``C_mid`` in
        compute with ``"absolute"``).
    """

    rows: np.ndarray
    scale: str
    log_evidence: dict
    B_median: float
    B_log_sd: float
    C_mid_factor: float
    C_mid_log_sd: float

    def describe(self) -> str:
        """One line for the fit's settings."""
        where = (
            f"C_mid median {self.C_mid_factor:.3g} x each run's window end"
            if self.scale == "relative"
            else f"C_mid median {self.C_mid_factor:.4g} compute units"
        )
        return (
            f"priors of B and C_mid learnt from the batch ({self.scale} midpoints): B median "
            f"{self.B_median:.3g}, log sd {self.B_log_sd:.2f}; {where}, log sd {self.C_mid_log_sd:.2f} "
            "(each run's prior from the other runs)"
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
    from .sigmoid import SigmoidModel

    if priors.likelihood == "student_t":  # taken as Gaussian (its scale mixture has a latent per point)
        priors = dataclasses.replace(priors, likelihood="gaussian", rho=None, shape_noise=None)
        window = window._replace(rho=None, ou=None)
    # the fit's own inputs (points padded to a multiple of 8), with the default C_mid prior's median
    binomial = priors.likelihood == "binomial"
    arrays = _with_whitening(padded_inputs(window._replace(prior=None), n_eval=binomial))
    n_runs = arrays["R0"].shape[0]
    chunk = min(chunk, 1 << max(n_runs - 1, 0).bit_length())  # few shapes: powers of two
    data = SigmoidModel(priors).data({k: jnp.asarray(v) for k, v in arrays.items()})
    log_B = math.log(priors.B_median) + priors.B_log_sd * np.linspace(-_SPAN, _SPAN, n_b)
    offset = priors.C_mid_log_sd * np.linspace(-_SPAN, _SPAN, n_c)
    n_fit = np.maximum(np.sum(np.asarray(data.mask), axis=1), 1)
    # +- about 4 sd of log sigma's likelihood, plus the coarse grid's step
    half = np.minimum(2.5, 4.0 / np.sqrt(2.0 * n_fit)) + 0.25
    use_rho = priors.likelihood == "ar1"
    out = np.empty((n_runs, n_b, n_c))
    fn = _grid_fn(priors, use_rho)
    for lo in range(0, n_runs, chunk):
        hi = min(lo + chunk, n_runs)
        idx = jnp.asarray(np.concatenate([np.arange(lo, hi), np.full(chunk - (hi - lo), lo)]))
        d = jax.tree_util.tree_map(lambda a, idx=idx: a[idx], data)
        res = fn(d, jnp.asarray(log_B), jnp.asarray(offset), jnp.asarray(half[idx]))
        out[lo:hi] = np.asarray(res)[: hi - lo]
    return GridLik(log_B, offset, np.asarray(data.log_c_mid_loc, dtype=np.float64), out)


_GRID_CACHE: dict = {}
_COARSE = np.log(np.geomspace(1e-3, 0.5, 16))  # where each cell's sigma is looked for first


def _grid_fn(priors: Priors, use_rho: bool):
    key = (priors, use_rho)
    if key not in _GRID_CACHE:

        def one(data, log_B, offset, half):
            rho = data.rho if use_rho else None

            def at(lb, lc, log_sigma):
                sig = jnp.exp(log_sigma)
                # the half-normal prior of sigma, in log sigma
                lp = log_sigma - 0.5 * (sig / priors.sigma_scale) ** 2
                return gain_conditional(lb, lc, sig, data.R0, data, priors, rho=rho).log_norm + lp

            def cell(lb, off):
                lc = data.log_c_mid_loc + off
                coarse = jax.vmap(lambda t: at(lb, lc, t))(jnp.asarray(_COARSE))
                # then a fine grid of the same spacing in every cell of the run, around the best
                fine = coarse.argmax()
                fine = jnp.asarray(_COARSE)[fine] + half * jnp.linspace(-1.0, 1.0, _N_SIGMA)
                return jax.scipy.special.logsumexp(jax.vmap(lambda t: at(lb, lc, t))(fine))

            return jax.vmap(jax.vmap(cell, (None, 0)), (0, None))(log_B, offset)

        _GRID_CACHE[key] = jax.jit(jax.vmap(one, (0, None, None, 0)))
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


def _hyper_grid(centre: float, sd: float, spread: float, n_mu: int = 25, n_tau: int = 10):
    """The grid of a population's ``(mu, tau)`` and its log prior weights.

    ``mu ~ Normal(centre, sqrt(sd^2 / 2 + spread^2))``, ``tau ~ HalfNormal(sd / sqrt(2))``:
    the predictive of a run is the default prior ``Normal(centre, sd)`` when ``spread`` is 0.
    """
    s_mu = math.sqrt(0.5 * sd * sd + spread * spread)
    mu = centre + s_mu * np.linspace(-3.0, 3.0, n_mu)
    tau = sd * np.geomspace(0.04, 2.0, n_tau)
    s_tau = sd / math.sqrt(2.0)
    lw_mu = -0.5 * ((mu - centre) / s_mu) ** 2
    # the tau grid is geometric: each point stands for a width proportional to tau
    lw_tau = -0.5 * (tau / s_tau) ** 2 + np.log(tau)
    MU, TAU = np.meshgrid(mu, tau, indexing="ij")
    lw = (lw_mu[:, None] + lw_tau[None, :]).ravel()
    return MU.ravel(), TAU.ravel(), lw - logsumexp(lw)


def learn_population(
    grid: GridLik, priors: Priors, *, groups: np.ndarray | None = None, chunk: int = 256
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
    chunk : int
        Runs per block (bounds memory).

    Returns
    -------
    Population
    """
    ll = grid.loglik - grid.loglik.max(axis=(1, 2), keepdims=True)
    P = np.exp(ll)  # run, b, c
    n_runs = P.shape[0]
    muB, tauB, lwB = _hyper_grid(math.log(priors.B_median), priors.B_log_sd, 0.0)
    WB = _cell_weights(grid.log_B, muB, tauB)  # hB, b
    loc = grid.log_loc
    # a group counts as one run in the population (its curves share a training run's data)
    codes = _codes(groups, n_runs)
    weight = 1.0 / np.bincount(codes)[codes]
    fits = {}
    for scale in ("relative", "absolute"):
        if scale == "relative":
            muC, tauC, lwC = _hyper_grid(0.0, priors.C_mid_log_sd, 0.0)
        else:
            muC, tauC, lwC = _hyper_grid(float(loc.mean()), priors.C_mid_log_sd, float(loc.std()))

        def per_run(idx, muC=muC, tauC=tauC, scale=scale):
            if scale == "relative":
                WC = _cell_weights(grid.offset, muC, tauC)[None]  # 1, hC, c
            else:
                WC = _cell_weights(loc[idx, None] + grid.offset[None, :], muC, tauC)  # run, hC, c
            m = np.einsum("hb,rbc->rhc", WB, P[idx])
            WC = np.broadcast_to(WC, (len(idx),) + WC.shape[1:])
            return np.log(np.maximum(np.einsum("rhc,rkc->rhk", m, WC), 1e-300))

        total = np.zeros((muB.size, muC.size))
        for lo in range(0, n_runs, chunk):
            idx = np.arange(lo, min(lo + chunk, n_runs))
            total += np.tensordot(weight[idx], per_run(idx), axes=1)
        log_post = total + lwB[:, None] + lwC[None, :]
        fits[scale] = (muC, tauC, lwC, per_run, log_post, float(logsumexp(log_post)))
    # relative unless absolute is better (they tie, up to rounding, when every window ends alike)
    scale = "absolute" if fits["absolute"][5] > fits["relative"][5] + 1e-6 else "relative"
    muC, tauC, lwC, per_run, log_post, _ = fits[scale]
    rows = np.empty((n_runs, 4))
    for idx, starts in _group_blocks(groups, n_runs, chunk):
        L = weight[idx, None, None] * per_run(idx)
        own = np.repeat(np.add.reduceat(L, starts, axis=0), np.diff(np.append(starts, len(idx))), axis=0)
        lp = log_post[None] - own  # leave the run's group out
        w = np.exp(lp - lp.max(axis=(1, 2), keepdims=True))
        w /= w.sum(axis=(1, 2), keepdims=True)
        wB, wC = w.sum(axis=2), w.sum(axis=1)  # run, hB / run, hC
        mB = wB @ muB
        vB = wB @ (tauB**2 + muB**2) - mB**2
        mC = wC @ muC
        vC = wC @ (tauC**2 + muC**2) - mC**2
        rows[idx, 0] = mB
        rows[idx, 1] = np.sqrt(np.maximum(vB, 1e-6))
        rows[idx, 2] = mC + (loc[idx] if scale == "relative" else 0.0)
        rows[idx, 3] = np.sqrt(np.maximum(vC, 1e-6))
    w = np.exp(log_post - log_post.max())
    w /= w.sum()
    wB, wC = w.sum(axis=1), w.sum(axis=0)
    mB, mC = float(wB @ muB), float(wC @ muC)
    sB = math.sqrt(max(float(wB @ (tauB**2 + muB**2)) - mB**2, 1e-6))
    sC = math.sqrt(max(float(wC @ (tauC**2 + muC**2)) - mC**2, 1e-6))
    return Population(
        rows=rows,
        scale=scale,
        log_evidence={s: f[5] for s, f in fits.items()},
        B_median=math.exp(mB),
        B_log_sd=sB,
        C_mid_factor=math.exp(mC),
        C_mid_log_sd=sC,
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
