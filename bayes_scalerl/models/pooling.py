"""A blocked Gibbs sampler of the hierarchical model, with proposals from the independent fits.

The posterior is that of :mod:`bayes_scalerl.models.hierarchical` (the joint NumPyro
model is kept there as the reference; tests check that both agree). Its levels are
updated in turn, each block given the others, every update leaving the posterior
invariant:

1. **each training run's** ``(log B, log C_mid)``, with every one of its curves' ``A``
   integrated out analytically (the likelihood is Gaussian in the gain ``g = A - R0``):
   an independence Metropolis-Hastings step from a Gaussian approximation of the run's
   conditional (its independent fit's posterior, which the engine already computed,
   combined with the seed-level prior), then a random-walk step with that covariance;
2. **each curve's** ``A``: an exact draw from its truncated-normal conditional;
3. **each curve's** ``sigma``: an independence step from its conjugate gamma proposal;
4. **each recipe with its seeds**: a joint translation of the recipe's ``(A, log B,
   log C_mid)`` and of every one of its seeds by the same offset (the seeds' deviations
   unchanged), the move that a centred Gibbs sampler lacks when a recipe's seeds are
   weakly identified and strongly pooled;
5. **the recipe means**: conjugate normal draws (``A`` with an exact correction for each
   curve's truncation to ``(R0, 1)``, and rejected outside ``(0, 1)``, where the model
   restricts the recipe and population ceilings);
6. **the population means**, conjugate, and **the spreads**: an independence step from
   the conjugate gamma proposal and a random-walk step in ``log sd``;
7. **the population with everything below it**: a non-centred rescaling of each recipe
   spread (the recipes' deviations scaled, their seeds carried along) and a joint
   translation of the population means with every recipe and seed;
8. **every run along the ceiling's ridge** (:func:`_ridge_block`): one offset to every
   ``log C_mid`` (then every ``log B``) with the levels above, each curve's gain rescaled to
   keep its level at its last fitted compute;
9. **the split of each spread between seeds and recipes** (:func:`_split_block`): the
   seed spread scaled, the recipe spread set to keep their total variance, and the level
   of every recipe with one seed moved to keep that seed's standardised deviation (no
   curve moves, so no pass over the data: it is repeated :data:`N_SPLIT` times a sweep).

Steps 1, 2 and 4 are repeated twice more for the most weakly identified 35% of the
recipes (:class:`WeakSet`), whose runs mix slowest, on their own data: about a quarter
more time for three times the updates where they are needed. The chains run in pairs, one compiled
program each, on every local device (:func:`chain_layout`).

Every step is a vectorised operation over runs, curves or recipes: a sweep costs a few
passes over the data, no gradient and no tree. Several tasks per training run (one
``B`` and ``C_mid`` shared by several curves, each with its own ``A`` and ``sigma``) are
handled by summing the curves' log-likelihoods per training run. With the AR(1)
likelihood at a fixed correlation (``Priors(likelihood="ar1", rho=...)``, the data's
``rho``) every sum is taken over whitened points (:func:`~bayes_scalerl.models.scalerl.ar1_whiten`),
where the errors are independent; the gain stays linear, so every step above is unchanged.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ..engine import runtime
from ..engine.retry import every_kth
from .hierarchical import HierIndex, HierPriors
from .scalerl import RunData, ar1_whiten, log_diff_ndtr, point_fractions, truncnorm_quantile

__all__ = [
    "PoolData",
    "PoolState",
    "WeakSet",
    "Noise",
    "pool_data",
    "sample_pooled",
    "thin_record",
    "chain_layout",
    "SD_NAMES",
]

_LOG_2PI = math.log(2.0 * math.pi)

#: Translation moves of every recipe per sweep.
N_TRANSLATE = 5
#: Non-centred rescalings of the seed spreads per sweep (:func:`_scale_block`).
N_SCALE = 1
#: Share of the recipes (the most weakly identified) whose runs get extra updates.
WEAK_SHARE = 0.35
#: Extra updates of steps 1, 2 and 4 per sweep for those recipes (:class:`WeakSet`).
WEAK_SWEEPS = 2

#: Moves of the seed/recipe split of each spread per sweep (:func:`_split_block`).
N_SPLIT = 4
#: Names of the six spreads, in the order of :attr:`PoolState.sd`.
SD_NAMES = ("A_recipe_sd", "A_seed_sd", "B_recipe_sd", "B_seed_sd", "C_mid_recipe_sd", "C_mid_seed_sd")


class Noise:
    """The random numbers of one sweep: drawn in two calls, handed out in order.

    A sweep needs about a hundred small draws. On a CPU every ``jax.random`` call is a
    loop of its own (XLA's threefry is rolled there), and with one call per draw those
    loops took about a third of a sweep's time; two calls of a few thousand numbers (for
    several sweeps at once: :meth:`pools`) cost little more than two of one. Each block
    takes what it needs with :meth:`normal` and :meth:`uniform`, in an order fixed at
    trace time; :meth:`repeat` runs a move several times in one ``lax.scan``.

    ``Noise()`` only counts (every draw is zeros): :meth:`sizes` runs a function with one
    to learn how many numbers of each kind it takes.

    Parameters
    ----------
    normal, uniform : jax.Array, optional
        Standard normal and uniform [0, 1) numbers, flat; None: count only.
    """

    def __init__(self, normal: jax.Array | None = None, uniform: jax.Array | None = None):
        self._pools = {"normal": normal, "uniform": uniform}
        self.used = {"normal": 0, "uniform": 0}

    @staticmethod
    def pools(key: jax.Array, sizes: tuple[int, int], n: int) -> tuple[jax.Array, jax.Array]:
        """The numbers of ``n`` sweeps: normal ``(n, sizes[0])`` and uniform ``(n, sizes[1])``."""
        k1, k2 = jax.random.split(key)
        return jax.random.normal(k1, (n, sizes[0])), jax.random.uniform(k2, (n, sizes[1]))

    @staticmethod
    def sizes(fn, *args) -> tuple[int, int]:
        """Normal and uniform numbers that ``fn(noise, *args)`` takes (traced, not run)."""
        counter = Noise()
        jax.eval_shape(lambda *a: fn(counter, *a), *args)
        return counter.used["normal"], counter.used["uniform"]

    def _take(self, kind: str, shape) -> jax.Array:
        shape = tuple(int(d) for d in shape)
        n, start = math.prod(shape), self.used[kind]
        self.used[kind] = start + n
        pool = self._pools[kind]
        if pool is None:
            return jnp.zeros(shape)
        if start + n > pool.shape[0]:
            raise ValueError(f"Noise: {kind} numbers exhausted ({pool.shape[0]} drawn, {start + n} taken)")
        return pool[start : start + n].reshape(shape)

    def repeat(self, fn, carry, n: int):
        """``n`` applications of ``carry = fn(noise, carry)`` in one ``lax.scan``.

        One compiled body instead of ``n`` inlined copies (compilation time), each
        iteration with its own slice of these numbers.
        """
        sizes = Noise.sizes(fn, carry)
        xs = (self.normal((n, sizes[0])), self.uniform((n, sizes[1])))
        return jax.lax.scan(lambda c, x: (fn(Noise(*x), c), None), carry, xs)[0]

    def normal(self, shape=()) -> jax.Array:
        """Standard normal numbers of ``shape``."""
        return self._take("normal", shape)

    def uniform(self, shape=()) -> jax.Array:
        """Uniform [0, 1) numbers of ``shape``."""
        return self._take("uniform", shape)


class PoolData(NamedTuple):
    """Everything stage 2 needs, as arrays (curve = one run on one task).

    Attributes
    ----------
    data : RunData
        The curves' fitted points (leading curve axis).
    train, recipe, task : array of int, shape (curve,)
        Each curve's training run, recipe and task.
    train_recipe : array of int, shape (train,)
    prop_mean, prop_prec, prop_lin : array, shapes (train, 2), (train, 2, 2), (train, 2)
        Gaussian approximation of each training run's likelihood of ``(log B, log C_mid)``
        from its curves' independent fits (mean, precision, precision times mean).
    init_lB, init_lC, init_sigma, init_A : array
        Independent-fit draws to start chains from: (train, k), (train, k), (curve, k), (curve, k).
    step : array, shape (recipe, 3, 3)
        Cholesky factor of the covariance of the recipe translation move in ``(A, log B,
        log C_mid)``: that of the mean of the recipe's curves under their independent fits.
    log_c_ref : array, shape ()
        Prior median of the population ``log C_mid``.
    Syy, n_pts : array, shape (curve,)
        Each curve's ``sum (y - R0)^2`` and number of fitted points.
    weak : WeakSet or None
        The recipes whose runs the sampler updates more often (see :class:`WeakSet`).
    """

    data: RunData
    train: jax.Array
    recipe: jax.Array
    task: jax.Array
    train_recipe: jax.Array
    prop_mean: jax.Array
    prop_prec: jax.Array
    prop_lin: jax.Array
    init_lB: jax.Array
    init_lC: jax.Array
    init_sigma: jax.Array
    init_A: jax.Array
    step: jax.Array
    log_c_ref: jax.Array
    Syy: jax.Array
    n_pts: jax.Array
    weak: WeakSet | None = None


class WeakSet(NamedTuple):
    """The most weakly identified recipes, which get :data:`WEAK_SWEEPS` extra updates a sweep.

    Their runs mix slowest (``C_mid`` beyond the data leaves ``A`` and ``C_mid`` on a
    curved ridge), and every update of steps 1, 2 and 4 factorises over recipes given the
    levels above, so these recipes' blocks can be updated again on their own data at a
    fraction of a sweep's cost; the extra updates leave the posterior invariant like the
    others.

    Attributes
    ----------
    pd : PoolData
        The recipes' own stage-2 inputs (their curves, training runs and recipes only,
        indexed from 0).
    recipe, train, curve : array of int
        Their recipes, training runs and curves in the whole study.
    """

    pd: PoolData
    recipe: jax.Array
    train: jax.Array
    curve: jax.Array


class Sizes(NamedTuple):
    """The static sizes of a pooled fit (they shape the compiled program)."""

    n_train: int
    n_recipe: int
    n_task: int


class PoolState(NamedTuple):
    """One chain's state."""

    lB: jax.Array  # (train,)
    lC: jax.Array  # (train,)
    A: jax.Array  # (curve,)
    sigma: jax.Array  # (curve,)
    A_r: jax.Array  # (recipe, task)
    lB_r: jax.Array  # (recipe,)
    lC_r: jax.Array
    A_pop: jax.Array  # (task,)
    lB_pop: jax.Array  # ()
    lC_pop: jax.Array
    sd: jax.Array  # (6,), SD_NAMES
    log_scale: jax.Array  # (recipe,) translation step scale, adapted in warm-up only
    log_sstep: jax.Array  # (3,) log steps of the A, B, C_mid seed-spread rescalings, adapted in warm-up
    Ss: jax.Array  # (curve,) sum s^2 at the current (log B, log C_mid)
    Sy: jax.Array  # (curve,) sum s (y - R0)
    log_pstep: jax.Array  # (4,) log steps of step 7 (A, B, C_mid recipe spreads; translation)
    trunc: jax.Array  # (curve,) log mass on (R0, 1) of each curve's A prior (_log_trunc): kept current
    log_rstep: jax.Array  # (2,) log steps of the ridge moves in log B and log C_mid, adapted in warm-up
    log_vstep: jax.Array  # (3,) log steps of the seed/recipe split moves of A, B, C_mid, adapted in warm-up


def pool_data(
    data: RunData,
    idx: HierIndex,
    log_B: np.ndarray,
    log_C: np.ndarray,
    sigma: np.ndarray,
    A: np.ndarray,
    hp: HierPriors,
    weak_share: float | None = None,
) -> PoolData:
    """Stage-2 inputs from the curves' independent-fit draws, each of shape (curve, draw).

    Parameters
    ----------
    data : RunData
        The curves' fitted points, batched (the same window the draws were fitted on).
    idx : HierIndex
    log_B, log_C, sigma, A : ndarray, shape (curve, draw)
        The independent fit's draws.
    hp : HierPriors
    weak_share : float, optional
        Share of the recipes that get extra updates (default :data:`WEAK_SHARE`): those
        whose curves' ``log C_mid`` is widest under their independent fits.
    """
    n_train = len(idx.training_runs)
    x = np.stack([log_B, log_C], axis=-1)  # curve, draw, 2
    mean = x.mean(axis=1)
    dev = x - mean[:, None, :]
    cov = np.einsum("cdi,cdj->cij", dev, dev) / max(x.shape[1] - 1, 1)
    cov += np.eye(2) * 1e-8
    prec_c = np.linalg.inv(cov)
    # a training run's curves share log B and log C_mid: combine their Gaussians
    prec = np.zeros((n_train, 2, 2))
    lin = np.zeros((n_train, 2))
    np.add.at(prec, idx.curve_train, prec_c)
    np.add.at(lin, idx.curve_train, np.einsum("cij,cj->ci", prec_c, mean))
    prop_mean = np.linalg.solve(prec, lin[..., None])[..., 0]
    first = np.array([np.flatnonzero(idx.curve_train == t)[0] for t in range(n_train)])
    # the translation of a recipe: the covariance of its curves' mean under their fits
    n_rec = len(idx.recipes)
    seeds = np.bincount(idx.curve_recipe, minlength=n_rec).astype(float)
    y = np.stack([A, log_B, log_C], axis=-1)
    dy = y - y.mean(axis=1, keepdims=True)
    cov3 = np.einsum("cdi,cdj->cij", dy, dy) / max(y.shape[1] - 1, 1)
    rcov = np.zeros((n_rec, 3, 3))
    np.add.at(rcov, idx.curve_recipe, cov3)
    rcov = rcov / seeds[:, None, None] ** 2 + np.eye(3) * 1e-10
    step = np.linalg.cholesky(rcov)
    log_c_ref = (
        math.log(hp.C_mid_median)
        if hp.C_mid_median is not None
        else float(np.log(np.median(np.exp(np.asarray(data.log_c_mid_loc)))))
    )
    m = jnp.asarray(data.mask, dtype=jnp.float64)
    r = ar1_whiten(data.y - data.R0[:, None], data.mask, data.rho[:, None], data.ar_lag)
    f = lambda a: jnp.asarray(a, dtype=jnp.float64)  # noqa: E731
    i = lambda a: jnp.asarray(a, dtype=jnp.int32)  # noqa: E731
    full = PoolData(
        data,
        i(idx.curve_train),
        i(idx.curve_recipe),
        i(idx.curve_task),
        i(idx.train_recipe),
        f(prop_mean),
        f(prec),
        f(lin),
        f(log_B[first]),
        f(log_C[first]),
        f(sigma),
        f(A),
        f(step),
        f(log_c_ref),
        f(jnp.sum(m * r * r, -1)),
        f(jnp.sum(m, -1)),
    )
    share = WEAK_SHARE if weak_share is None else float(weak_share)
    n_weak = int(math.ceil(share * n_rec)) if share > 0 else 0
    if n_weak == 0:
        return full
    width = np.bincount(idx.curve_recipe, weights=log_C.std(axis=1), minlength=n_rec) / seeds
    return full._replace(weak=_weak_set(full, np.sort(np.argsort(-width, kind="stable")[:n_weak])))


def _weak_set(pd: PoolData, recipes: np.ndarray) -> WeakSet:
    """The stage-2 inputs of ``recipes`` alone, re-indexed from 0, with their global indices."""
    rec_c, rec_t = np.asarray(pd.recipe), np.asarray(pd.train_recipe)
    curves = np.flatnonzero(np.isin(rec_c, recipes))
    train = np.flatnonzero(np.isin(rec_t, recipes))
    i = lambda a: jnp.asarray(a, dtype=jnp.int32)  # noqa: E731
    sub = PoolData(
        jax.tree.map(lambda a: a[curves], pd.data),
        i(np.searchsorted(train, np.asarray(pd.train)[curves])),
        i(np.searchsorted(recipes, rec_c[curves])),
        pd.task[curves],
        i(np.searchsorted(recipes, rec_t[train])),
        pd.prop_mean[train],
        pd.prop_prec[train],
        pd.prop_lin[train],
        pd.init_lB[train],
        pd.init_lC[train],
        pd.init_sigma[curves],
        pd.init_A[curves],
        pd.step[recipes],
        pd.log_c_ref,
        pd.Syy[curves],
        pd.n_pts[curves],
    )
    return WeakSet(sub, i(recipes), i(train), i(curves))


def _sd_scales(hp: HierPriors) -> jax.Array:
    return jnp.array(
        [
            hp.A_recipe_sd_scale,
            hp.A_seed_sd_scale,
            hp.B_recipe_sd_scale,
            hp.B_seed_sd_scale,
            hp.C_mid_recipe_sd_scale,
            hp.C_mid_seed_sd_scale,
        ]
    )


# ---------------------------------------------------------------------------- likelihood pieces


def _sums(lB, lC, pd: PoolData):
    """Per curve, at each training run's ``(log B, log C_mid)``: ``sum s^2`` and ``sum s (y - R0)``.

    Both whitened by each curve's fixed AR(1) correlation (``data.rho``; 0, the identity,
    unless the likelihood is ``"ar1"``), so that the errors they stand for are independent.
    """
    data = pd.data
    rho = data.rho[:, None]
    s = ar1_whiten(
        point_fractions(lB[pd.train][:, None], lC[pd.train][:, None], data), data.mask, rho, data.ar_lag
    )
    m = data.mask.astype(s.dtype)
    ms = m * s
    r = ar1_whiten(data.y - data.R0[:, None], data.mask, rho, data.ar_lag)
    return jnp.sum(ms * s, -1), jnp.sum(ms * r, -1)


def _gain_given(Ss, Sy, sigma, mu0, tau, upper):
    """The gain's conditional (mean, sd) and ``log`` of its likelihood integrated against
    Normal(mu0, tau) truncated to (0, upper), less the terms free of ``B`` and ``C_mid``."""
    var = sigma**2
    P = Ss / var + 1.0 / tau**2
    h = Sy / var + mu0 / tau**2
    mean, sd = h / P, 1.0 / jnp.sqrt(P)
    log_mass = log_diff_ndtr(-mean / sd, (upper - mean) / sd)
    return 0.5 * h * mean - 0.5 * jnp.log(P) + log_mass, mean, sd


def _log_trunc(A_loc, sd, R0):
    """``log`` of the mass of Normal(A_loc, sd) on (R0, 1)."""
    return log_diff_ndtr((R0 - A_loc) / sd, (1.0 - A_loc) / sd)


def _level_inside(A_level):
    """Whether recipe or population ceilings lie in (0, 1), where the model restricts them."""
    return (A_level > 0.0) & (A_level < 1.0)


def _loglik_explicit(Ss, Sy, Syy, n, g, sigma):
    """Gaussian log-likelihood of each curve given its gain ``g``."""
    rss = Syy - 2.0 * g * Sy + g * g * Ss
    return -0.5 * rss / sigma**2 - n * jnp.log(sigma)


def _curve_ll(pd: PoolData, sigma, Ss, Sy, A, trunc):
    """Each curve's log-likelihood at its ``A``, less the log truncation mass of its ``A`` prior.

    The part of a curve's density that the moves of ``A``, ``B``, ``C_mid`` and the levels
    above change (``sigma`` held fixed).
    """
    return _loglik_explicit(Ss, Sy, pd.Syy, 0.0, A - pd.data.R0, sigma) - trunc


# ---------------------------------------------------------------------------- the blocks


def _train_block(noise: Noise, s: PoolState, pd: PoolData, hp: HierPriors, z: Sizes):
    """Step 1: each training run's (log B, log C_mid), its curves' A integrated out."""
    d = pd.data
    R0, upper = d.R0, 1.0 - d.R0
    rt = pd.train_recipe
    sA, sB, sC = s.sd[1], s.sd[3], s.sd[5]
    mu0 = s.A_r[pd.recipe, pd.task] - R0
    prior_mean = jnp.stack([s.lB_r[rt], s.lC_r[rt]], -1)
    prior_prec = jnp.stack([1.0 / sB**2, 1.0 / sC**2])
    # Gaussian approximation of the conditional: the fits' likelihoods times the seed prior
    # (2 x 2 algebra written out: batched LAPACK calls cost more than the arithmetic)
    a = pd.prop_prec[:, 0, 0] + prior_prec[0]
    b = pd.prop_prec[:, 0, 1]
    c = pd.prop_prec[:, 1, 1] + prior_prec[1]
    rhs = pd.prop_lin + prior_prec * prior_mean
    det = a * c - b * b
    mean = jnp.stack([c * rhs[:, 0] - b * rhs[:, 1], a * rhs[:, 1] - b * rhs[:, 0]], -1) / det[:, None]
    # the covariance's Cholesky factor [[l00, 0], [l10, l11]] from the precision's entries
    v00, v01, v11 = c / det, -b / det, a / det
    l00 = jnp.sqrt(v00)
    l10 = v01 / l00
    l11 = jnp.sqrt(jnp.maximum(v11 - l10 * l10, 1e-300))

    def chol_mul(e):  # L e
        return jnp.stack([l00 * e[:, 0], l10 * e[:, 0] + l11 * e[:, 1]], -1)

    def chol_solve(x):  # L^-1 x
        e0 = x[:, 0] / l00
        return jnp.stack([e0, (x[:, 1] - l10 * e0) / l11], -1)

    def log_target(x, sums=None):
        Ss, Sy = _sums(x[:, 0], x[:, 1], pd) if sums is None else sums
        lm = _gain_given(Ss, Sy, s.sigma, mu0, sA, upper)[0]
        lp = -0.5 * jnp.sum(prior_prec * (x - prior_mean) ** 2, -1)
        return lp + jax.ops.segment_sum(lm, pd.train, z.n_train), Ss, Sy

    def log_q(x):  # the independence proposal: the approximation widened 1.5 times
        e = chol_solve(x - mean) / 1.5
        return -0.5 * jnp.sum(e * e, -1)

    x = jnp.stack([s.lB, s.lC], -1)
    lt, Ss, Sy = log_target(x, (s.Ss, s.Sy))

    def accept(ok, prop, lt_p, Ss_p, Sy_p, x, lt, Ss, Sy):
        ok_c = ok[pd.train]
        return (
            jnp.where(ok[:, None], prop, x),
            jnp.where(ok, lt_p, lt),
            jnp.where(ok_c, Ss_p, Ss),
            jnp.where(ok_c, Sy_p, Sy),
        )

    prop = mean + 1.5 * chol_mul(noise.normal(x.shape))
    lt_p, Ss_p, Sy_p = log_target(prop)
    ok = jnp.log(noise.uniform(lt.shape)) < (lt_p - log_q(prop)) - (lt - log_q(x))
    moved = ok
    x, lt, Ss, Sy = accept(ok, prop, lt_p, Ss_p, Sy_p, x, lt, Ss, Sy)
    prop = x + 0.9 * chol_mul(noise.normal(x.shape))
    lt_p, Ss_p, Sy_p = log_target(prop)
    ok = jnp.log(noise.uniform(lt.shape)) < lt_p - lt
    x, lt, Ss, Sy = accept(ok, prop, lt_p, Ss_p, Sy_p, x, lt, Ss, Sy)
    return s._replace(lB=x[:, 0], lC=x[:, 1], Ss=Ss, Sy=Sy), (moved | ok).astype(x.dtype)


def _curve_block(noise: Noise, s: PoolState, pd: PoolData, hp: HierPriors):
    """Steps 2 and 3: each curve's A (exact) and sigma (an independence step)."""
    d = pd.data
    R0, upper = d.R0, 1.0 - d.R0
    Ss, Sy, Syy, n = s.Ss, s.Sy, pd.Syy, pd.n_pts
    _, mean, sd = _gain_given(Ss, Sy, s.sigma, s.A_r[pd.recipe, pd.task] - R0, s.sd[1], upper)
    g = truncnorm_quantile(noise.uniform(mean.shape), mean, sd, upper)
    rss = jnp.maximum(Syy - 2.0 * g * Sy + g * g * Ss, 1e-300)
    # sigma^-n exp(-rss / (2 sigma^2)) times its half-normal prior
    sigma = _sd_update(noise, s.sigma, rss, n, hp.sigma_scale, rw_step=0.0)
    return s._replace(A=R0 + g, sigma=sigma)


def _translate_block(noise: Noise, s: PoolState, pd: PoolData, z: Sizes, adapt: bool):
    """Step 4: shift each recipe and all its seeds by one offset in (A, log B, log C_mid)."""
    d = pd.data
    R0 = d.R0
    eps = noise.normal(pd.step.shape[:2])
    delta = jnp.exp(s.log_scale)[:, None] * jnp.einsum("rij,rj->ri", pd.step, eps)  # recipe, 3
    rt = pd.train_recipe
    sA_r, sA, sB_r, sC_r = s.sd[0], s.sd[1], s.sd[2], s.sd[4]
    lB_new, lC_new = s.lB + delta[rt, 1], s.lC + delta[rt, 2]
    A_new = s.A + delta[pd.recipe, 0]
    Ar_new = s.A_r + delta[:, :1]
    inside = (A_new > R0) & (A_new < 1.0)

    curve_ll = functools.partial(_curve_ll, pd, s.sigma)

    Ss_new, Sy_new = _sums(lB_new, lC_new, pd)
    trunc_new = _log_trunc(Ar_new[pd.recipe, pd.task], sA, R0)
    diff = curve_ll(Ss_new, Sy_new, A_new, trunc_new) - curve_ll(s.Ss, s.Sy, s.A, s.trunc)
    log_r = jax.ops.segment_sum(jnp.where(inside, diff, -jnp.inf), pd.recipe, z.n_recipe)

    def prior(A_r, lB_r, lC_r):
        lp = -0.5 * jnp.sum((A_r - s.A_pop[None]) ** 2, -1) / sA_r**2
        lp += -0.5 * (lB_r - s.lB_pop) ** 2 / sB_r**2 - 0.5 * (lC_r - s.lC_pop) ** 2 / sC_r**2
        return lp

    log_r += prior(Ar_new, s.lB_r + delta[:, 1], s.lC_r + delta[:, 2]) - prior(s.A_r, s.lB_r, s.lC_r)
    log_r = jnp.where(jnp.all(_level_inside(Ar_new), -1), log_r, -jnp.inf)
    ok = jnp.log(noise.uniform((z.n_recipe,))) < log_r
    ok_t, ok_c = ok[rt], ok[pd.recipe]
    if adapt:  # warm-up only: aim at a quarter of the moves accepted
        s = s._replace(
            log_scale=jnp.clip(s.log_scale + 0.2 * (jnp.minimum(jnp.exp(log_r), 1.0) - 0.25), -6.0, 2.0)
        )
    return s._replace(
        lB=jnp.where(ok_t, lB_new, s.lB),
        lC=jnp.where(ok_t, lC_new, s.lC),
        A=jnp.where(ok_c, A_new, s.A),
        Ss=jnp.where(ok_c, Ss_new, s.Ss),
        Sy=jnp.where(ok_c, Sy_new, s.Sy),
        trunc=jnp.where(ok_c, trunc_new, s.trunc),
        A_r=jnp.where(ok[:, None], Ar_new, s.A_r),
        lB_r=jnp.where(ok, s.lB_r + delta[:, 1], s.lB_r),
        lC_r=jnp.where(ok, s.lC_r + delta[:, 2], s.lC_r),
    ), ok.astype(jnp.float64)


def _normal_draw(noise: Noise, prior_mean, prior_sd, total, count, like_sd):
    """Normal mean with a Normal prior, given ``count`` values of sum ``total`` and sd ``like_sd``."""
    prec = 1.0 / prior_sd**2 + count / like_sd**2
    mean = (prior_mean / prior_sd**2 + total / like_sd**2) / prec
    return mean + noise.normal(jnp.shape(mean)) / jnp.sqrt(prec)


def _sd_update(noise: Noise, sd, ss, n, scale, extra=None, rw_step=0.3):
    """Scales (any shape): an independence step, then a random-walk step, in ``u = log sd``.

    The target of each is ``sd^-n exp(-ss / (2 sd^2))`` times its half-normal prior of
    scale ``scale`` times ``exp(extra(sd))`` (``extra`` maps the array of scales to an
    array of log factors; None: none). The independence proposal is the normal
    approximation of the first two factors in ``u`` (mode ``log(ss / (n - 1)) / 2``, sd
    ``1 / sqrt(2 (n - 1))``), widened 1.3 times; it is used where ``n >= 2``.
    """
    extra = extra or (lambda x: 0.0)
    u = jnp.log(sd)

    def target(v):
        x = jnp.exp(v)
        return -(n - 1.0) * v - 0.5 * ss * jnp.exp(-2.0 * v) - 0.5 * (x / scale) ** 2 + extra(x)

    nm = jnp.maximum(n - 1.0, 1.0)
    mode = 0.5 * jnp.log(jnp.maximum(ss, 1e-300) / nm)
    width = 1.3 / jnp.sqrt(2.0 * nm)
    prop = mode + width * noise.normal(jnp.shape(u))

    def log_q(v):
        return -0.5 * ((v - mode) / width) ** 2

    log_r = (target(prop) - log_q(prop)) - (target(u) - log_q(u))
    ok = (n >= 2) & (jnp.log(noise.uniform(jnp.shape(u))) < log_r)
    u = jnp.where(ok, prop, u)
    if rw_step:
        prop = u + rw_step * noise.normal(jnp.shape(u))
        ok = jnp.log(noise.uniform(jnp.shape(u))) < target(prop) - target(u)
        u = jnp.where(ok, prop, u)
    return jnp.exp(u)


def _levels_block(noise: Noise, s: PoolState, pd: PoolData, hp: HierPriors, z: Sizes):
    """Steps 5 and 6: recipe means, population means, spreads."""
    R0 = pd.data.R0
    sA_r, sA, sB_r, sB, sC_r, sC = (s.sd[i] for i in range(6))
    rt = pd.train_recipe
    n_per_t = jax.ops.segment_sum(jnp.ones_like(s.lB), rt, z.n_recipe)
    lB_r = _normal_draw(noise, s.lB_pop, sB_r, jax.ops.segment_sum(s.lB, rt, z.n_recipe), n_per_t, sB)
    lC_r = _normal_draw(noise, s.lC_pop, sC_r, jax.ops.segment_sum(s.lC, rt, z.n_recipe), n_per_t, sC)
    # A of each (recipe, task): conjugate proposal, corrected for the curves' truncation
    cell = pd.recipe * z.n_task + pd.task
    n_cell = z.n_recipe * z.n_task
    shape = (z.n_recipe, z.n_task)
    total = jax.ops.segment_sum(s.A, cell, n_cell).reshape(shape)
    count = jax.ops.segment_sum(jnp.ones_like(s.A), cell, n_cell).reshape(shape)
    A_prop = _normal_draw(noise, s.A_pop[None, :], sA_r, total, count, sA)
    trunc_prop = _log_trunc(A_prop[pd.recipe, pd.task], sA, R0)
    log_r = jax.ops.segment_sum(s.trunc - trunc_prop, cell, n_cell).reshape(shape)
    log_r = jnp.where(_level_inside(A_prop), log_r, -jnp.inf)
    A_r = jnp.where(jnp.log(noise.uniform(shape)) < log_r, A_prop, s.A_r)
    # each task's A_pop: its normal conditional, restricted to (0, 1) (rejection: kept if outside)
    A_pop = _normal_draw(noise, hp.A_pop_loc, hp.A_pop_scale, A_r.sum(0), z.n_recipe, sA_r)
    A_pop = jnp.where(_level_inside(A_pop), A_pop, s.A_pop)
    lB_pop = _normal_draw(noise, math.log(hp.B_median), hp.B_log_sd, lB_r.sum(), z.n_recipe, sB_r)
    lC_pop = _normal_draw(noise, pd.log_c_ref, hp.C_mid_log_sd, lC_r.sum(), z.n_recipe, sC_r)
    dA = s.A - A_r[pd.recipe, pd.task]
    ss = jnp.stack(
        [
            jnp.sum((A_r - A_pop[None]) ** 2),
            jnp.sum(dA**2),
            jnp.sum((lB_r - lB_pop) ** 2),
            jnp.sum((s.lB - lB_r[rt]) ** 2),
            jnp.sum((lC_r - lC_pop) ** 2),
            jnp.sum((s.lC - lC_r[rt]) ** 2),
        ]
    )
    n_curve = s.A.shape[0]
    n = jnp.array([z.n_recipe * z.n_task, n_curve, z.n_recipe, z.n_train, z.n_recipe, z.n_train], jnp.float64)
    scales = _sd_scales(hp)
    A_loc = A_r[pd.recipe, pd.task]
    onehot = jnp.zeros(6).at[1].set(1.0)

    def extra(x):  # the A seed spread also sets each curve's truncation mass
        return -onehot * jnp.sum(_log_trunc(A_loc, x[1], R0))

    sd = _sd_update(noise, s.sd, ss, n, scales, extra)
    trunc = _log_trunc(A_loc, sd[1], R0)
    return s._replace(
        A_r=A_r, lB_r=lB_r, lC_r=lC_r, A_pop=A_pop, lB_pop=lB_pop, lC_pop=lC_pop, sd=sd, trunc=trunc
    )


def _accept(ok, s: PoolState, **proposed) -> PoolState:
    """``s`` with each named field replaced by its proposal where ``ok`` holds."""
    return s._replace(**{k: jnp.where(ok, v, getattr(s, k)) for k, v in proposed.items()})


def _hn(x, scale):
    """Half-normal log prior of a spread ``x``, in log-sd coordinates (Jacobian included)."""
    return -0.5 * (x / scale) ** 2 + jnp.log(x)


def _scale_block(noise: Noise, s: PoolState, pd: PoolData, hp: HierPriors, adapt: bool):
    """Rescale each seed spread with every seed's deviation from its recipe (non-centred).

    One move each for ``A``, ``B`` and ``C_mid``; the seeds' prior densities and the
    Jacobian cancel, leaving the likelihood, the spread's prior and (for ``A``) each
    curve's truncation mass. The log step of each is adapted in warm-up only.
    """
    R0 = pd.data.R0
    rt = pd.train_recipe
    scales = _sd_scales(hp)
    A_loc = s.A_r[pd.recipe, pd.task]

    def ll(Ss, Sy, A, trunc):
        return jnp.sum(_curve_ll(pd, s.sigma, Ss, Sy, A, trunc))

    base = ll(s.Ss, s.Sy, s.A, s.trunc)
    steps = s.log_sstep
    rates = []
    for m, (i_sd, which) in enumerate(((3, "B"), (5, "C"))):  # B and C_mid seed spreads
        c = jnp.exp(jnp.exp(steps[m + 1]) * noise.normal())
        lB = s.lB_r[rt] + c * (s.lB - s.lB_r[rt]) if which == "B" else s.lB
        lC = s.lC_r[rt] + c * (s.lC - s.lC_r[rt]) if which == "C" else s.lC
        new_sd = s.sd[i_sd] * c
        Ss, Sy = _sums(lB, lC, pd)
        new = ll(Ss, Sy, s.A, s.trunc)
        log_r = new - base + _hn(new_sd, scales[i_sd]) - _hn(s.sd[i_sd], scales[i_sd])
        ok = jnp.log(noise.uniform()) < log_r
        s = _accept(ok, s, lB=lB, lC=lC, Ss=Ss, Sy=Sy, sd=s.sd.at[i_sd].set(new_sd))
        base = jnp.where(ok, new, base)
        rates.append(jnp.minimum(jnp.exp(log_r), 1.0))
    # A seed spread
    c = jnp.exp(jnp.exp(steps[0]) * noise.normal())
    A = A_loc + c * (s.A - A_loc)
    sA = s.sd[1] * c
    inside = jnp.all((A > R0) & (A < 1.0))
    trunc = _log_trunc(A_loc, sA, R0)
    new = ll(s.Ss, s.Sy, A, trunc)
    log_r = jnp.where(inside, new - base + _hn(sA, scales[1]) - _hn(s.sd[1], scales[1]), -jnp.inf)
    ok = jnp.log(noise.uniform()) < log_r
    s = _accept(ok, s, A=A, sd=s.sd.at[1].set(sA), trunc=trunc)
    if adapt:  # aim at 30% accepted
        rate = jnp.stack([jnp.minimum(jnp.exp(log_r), 1.0), *rates])
        s = s._replace(log_sstep=jnp.clip(steps + 0.1 * (rate - 0.3), -6.0, 1.0))
    return s


def _pop_prior(hp: HierPriors, pd: PoolData, A_pop, lB_pop, lC_pop):
    """Log prior density of the population means (up to a constant)."""
    lp = -0.5 * jnp.sum((A_pop - hp.A_pop_loc) ** 2) / hp.A_pop_scale**2
    lp += -0.5 * (lB_pop - math.log(hp.B_median)) ** 2 / hp.B_log_sd**2
    return lp - 0.5 * (lC_pop - pd.log_c_ref) ** 2 / hp.C_mid_log_sd**2


def _population_block(noise: Noise, s: PoolState, pd: PoolData, hp: HierPriors, z: Sizes, adapt: bool):
    """Step 7: the population level moved together with everything below it.

    - **Recipe spreads**, non-centred: each recipe's deviation from the population mean is
      scaled by ``c`` and the spread with it, every recipe's seeds carried along (their
      deviations from the recipe unchanged). The recipe-level prior densities and the
      Jacobian cancel, leaving the likelihood, each curve's truncation mass and the
      spread's prior. One move each for ``A``, ``B`` and ``C_mid``.
    - **A joint translation** of the population means with every recipe and every seed by
      one offset in ``(A, log B, log C_mid)`` (all deviations unchanged): the likelihood,
      the truncation masses and the population prior change.

    These are the moves the centred updates of step 6 lack when a study has few recipes:
    a population mean then follows its recipes, and the recipes their seeds, one small
    step at a time. Log step sizes are adapted in warm-up only.
    """
    R0 = pd.data.R0
    rt = pd.train_recipe
    scales = _sd_scales(hp)
    steps = s.log_pstep
    sA = s.sd[1]

    def ll(Ss, Sy, A, trunc):
        return jnp.sum(_curve_ll(pd, s.sigma, Ss, Sy, A, trunc))

    def trunc_at(A_r):
        return _log_trunc(A_r[pd.recipe, pd.task], sA, R0)

    def inside(A, A_r, A_pop=None):
        ok = jnp.all((A > R0) & (A < 1.0)) & jnp.all(_level_inside(A_r))
        return ok if A_pop is None else ok & jnp.all(_level_inside(A_pop))

    base = ll(s.Ss, s.Sy, s.A, s.trunc)
    rates = []
    # recipe spread of A: no change of B or C_mid, so no new sums
    c = jnp.exp(jnp.exp(steps[0]) * noise.normal())
    A_r = s.A_pop[None] + c * (s.A_r - s.A_pop[None])
    A = s.A + (A_r - s.A_r)[pd.recipe, pd.task]
    trunc = trunc_at(A_r)
    new = ll(s.Ss, s.Sy, A, trunc)
    log_r = jnp.where(
        inside(A, A_r), new - base + _hn(s.sd[0] * c, scales[0]) - _hn(s.sd[0], scales[0]), -jnp.inf
    )
    ok = jnp.log(noise.uniform()) < log_r
    s = _accept(ok, s, A=A, A_r=A_r, sd=s.sd.at[0].multiply(c), trunc=trunc)
    base = jnp.where(ok, new, base)
    rates.append(jnp.minimum(jnp.exp(log_r), 1.0))
    # recipe spreads of B and C_mid
    for m, i_sd in enumerate((2, 4)):
        c = jnp.exp(jnp.exp(steps[m + 1]) * noise.normal())
        if i_sd == 2:
            new_r = s.lB_pop + c * (s.lB_r - s.lB_pop)
            lB, lC, lB_r, lC_r = s.lB + (new_r - s.lB_r)[rt], s.lC, new_r, s.lC_r
        else:
            new_r = s.lC_pop + c * (s.lC_r - s.lC_pop)
            lB, lC, lB_r, lC_r = s.lB, s.lC + (new_r - s.lC_r)[rt], s.lB_r, new_r
        Ss, Sy = _sums(lB, lC, pd)
        new = ll(Ss, Sy, s.A, s.trunc)
        log_r = new - base + _hn(s.sd[i_sd] * c, scales[i_sd]) - _hn(s.sd[i_sd], scales[i_sd])
        ok = jnp.log(noise.uniform()) < log_r
        s = _accept(ok, s, lB=lB, lC=lC, lB_r=lB_r, lC_r=lC_r, Ss=Ss, Sy=Sy, sd=s.sd.at[i_sd].multiply(c))
        base = jnp.where(ok, new, base)
        rates.append(jnp.minimum(jnp.exp(log_r), 1.0))
    # the population with every recipe and seed: the step is the recipes' mean translation
    # step shrunk by the square root of their number (what a mean of them moves)
    L = jnp.mean(pd.step, 0) / math.sqrt(z.n_recipe)
    delta = jnp.exp(steps[3]) * (L @ noise.normal((3,)))
    A, A_r, A_pop = s.A + delta[0], s.A_r + delta[0], s.A_pop + delta[0]
    lB, lC = s.lB + delta[1], s.lC + delta[2]
    Ss, Sy = _sums(lB, lC, pd)
    trunc = trunc_at(A_r)
    new = ll(Ss, Sy, A, trunc)

    lp_new = _pop_prior(hp, pd, A_pop, s.lB_pop + delta[1], s.lC_pop + delta[2])
    lp_old = _pop_prior(hp, pd, s.A_pop, s.lB_pop, s.lC_pop)
    log_r = jnp.where(inside(A, A_r, A_pop), new - base + lp_new - lp_old, -jnp.inf)
    ok = jnp.log(noise.uniform()) < log_r
    s = _accept(
        ok,
        s,
        A=A,
        A_r=A_r,
        A_pop=A_pop,
        lB=lB,
        lC=lC,
        lB_r=s.lB_r + delta[1],
        lC_r=s.lC_r + delta[2],
        lB_pop=s.lB_pop + delta[1],
        lC_pop=s.lC_pop + delta[2],
        Ss=Ss,
        Sy=Sy,
        trunc=trunc,
    )
    rates.append(jnp.minimum(jnp.exp(log_r), 1.0))
    if adapt:  # aim at 30% accepted
        s = s._replace(log_pstep=jnp.clip(steps + 0.1 * (jnp.stack(rates) - 0.3), -6.0, 2.0))
    return s


def _ridge_block(noise: Noise, s: PoolState, pd: PoolData, hp: HierPriors, z: Sizes, adapt: bool):
    """Step 8: every run along the ceiling's ridge at once, the levels above carried along.

    A short window that ends before the rise fixes each curve near its last fitted compute
    far better than it fixes ``A``: a higher ceiling reached later fits as well. With one
    seed per recipe the pooled chains cross that ridge slowly *in common* (the mean over
    runs of ``A``, ``log B`` and ``log C_mid``), one recipe's step at a time. This move adds
    one offset to every ``log C_mid`` (then, in a second move, to every ``log B``) of the
    runs, recipes and population, and rescales each curve's gain ``g = A - R0`` by
    ``s / s'``, the ratio of its sigmoid's values at its last fitted compute before and
    after, so that every curve keeps its level there; each recipe's ``A`` moves by the mean
    move of its curves and the population's by the mean of its recipes'.

    The map is its own inverse under the opposite offset (the offsets are symmetric), and
    its Jacobian is triangular with diagonal ``s / s'`` (curves) and 1 (levels), so the
    acceptance ratio is the posterior ratio times ``prod s / s'``. Proposals outside the
    model's bounds (a curve's ``A`` outside ``(R0, 1)``, a recipe's or the population's
    outside ``(0, 1)``) are rejected. Log steps are adapted in warm-up only.
    """
    d = pd.data
    R0 = d.R0
    log_c_last = jnp.max(jnp.where(d.mask & d.positive, d.log_c, -jnp.inf), -1)  # (curve,)
    cell = pd.recipe * z.n_task + pd.task
    n_cell = z.n_recipe * z.n_task
    count = jnp.maximum(jax.ops.segment_sum(jnp.ones_like(s.A), cell, n_cell), 1.0)
    sA_r, sA = s.sd[0], s.sd[1]

    def s_last(lB, lC):
        return jax.nn.sigmoid(jnp.exp(lB[pd.train]) * (log_c_last - lC[pd.train]))

    def target(Ss, Sy, A, A_r, A_pop, lB_pop, lC_pop, trunc):
        lp = jnp.sum(_curve_ll(pd, s.sigma, Ss, Sy, A, trunc))
        lp -= 0.5 * jnp.sum((A - A_r[pd.recipe, pd.task]) ** 2) / sA**2
        lp -= 0.5 * jnp.sum((A_r - A_pop[None]) ** 2) / sA_r**2
        return lp + _pop_prior(hp, pd, A_pop, lB_pop, lC_pop)

    base = target(s.Ss, s.Sy, s.A, s.A_r, s.A_pop, s.lB_pop, s.lC_pop, s.trunc)
    rates = []
    for m in range(2):  # 0: log B, 1: log C_mid
        step = jnp.exp(s.log_rstep[m]) * noise.normal()
        dB, dC = (step, 0.0) if m == 0 else (0.0, step)
        lB, lC = s.lB + dB, s.lC + dC
        ratio = s_last(s.lB, s.lC) / s_last(lB, lC)
        A = R0 + ratio * (s.A - R0)
        dA_r = (jax.ops.segment_sum(A - s.A, cell, n_cell) / count).reshape(z.n_recipe, z.n_task)
        A_r, A_pop = s.A_r + dA_r, s.A_pop + dA_r.mean(0)
        Ss, Sy = _sums(lB, lC, pd)
        trunc = _log_trunc(A_r[pd.recipe, pd.task], sA, R0)
        new = target(Ss, Sy, A, A_r, A_pop, s.lB_pop + dB, s.lC_pop + dC, trunc)
        inside = (
            jnp.all((A > R0) & (A < 1.0) & (ratio > 0.0))
            & jnp.all(_level_inside(A_r))
            & jnp.all(_level_inside(A_pop))
        )
        log_r = jnp.where(inside, new - base + jnp.sum(jnp.log(ratio)), -jnp.inf)
        ok = jnp.log(noise.uniform()) < log_r
        s = _accept(
            ok,
            s,
            lB=lB,
            lC=lC,
            lB_r=s.lB_r + dB,
            lC_r=s.lC_r + dC,
            lB_pop=s.lB_pop + dB,
            lC_pop=s.lC_pop + dC,
            A=A,
            A_r=A_r,
            A_pop=A_pop,
            Ss=Ss,
            Sy=Sy,
            trunc=trunc,
        )
        base = jnp.where(ok, new, base)
        rates.append(jnp.minimum(jnp.exp(log_r), 1.0))
    if adapt:  # aim at 30% accepted
        s = s._replace(log_rstep=jnp.clip(s.log_rstep + 0.1 * (jnp.stack(rates) - 0.3), -6.0, 1.0))
    return s


def _split_block(noise: Noise, s: PoolState, pd: PoolData, hp: HierPriors, z: Sizes, adapt: bool):
    """Step 9: how each spread divides between seeds and recipes, no curve moved.

    With one seed per recipe (a common sweep: every variant run once) the data fix each
    run's deviation from the population, not how much of it is the recipe's and how much
    the seed's; the centred updates of steps 5 and 6 then trade the two spreads one small
    step at a time. For ``A``, ``log B`` and ``log C_mid`` in turn this move scales the seed
    spread by ``c = exp(eps)``, sets the recipe spread to keep the sum of their variances,
    and moves the level of each recipe (each ``(recipe, task)`` cell for ``A``) with exactly
    one seed so that the seed's deviation from it scales by ``c`` too (its standardised
    deviation unchanged); recipes with several seeds keep their levels. Runs and curves do
    not move, so the likelihood does not change and the move costs no pass over the data.

    In log-spread coordinates the map is its own inverse under ``-eps``, with a triangular
    Jacobian ``c^m (s_r / s_r')^2`` for ``m`` moved levels. Proposals that leave no
    variance to the recipes or put a recipe's ceiling outside ``(0, 1)`` are rejected. Log
    steps are adapted in warm-up only.
    """
    R0 = pd.data.R0
    rt = pd.train_recipe
    scales = _sd_scales(hp)
    cell = pd.recipe * z.n_task + pd.task
    n_cell = z.n_recipe * z.n_task
    shape = (z.n_recipe, z.n_task)
    n_curve = s.A.shape[0]
    one_cell = (jax.ops.segment_sum(jnp.ones_like(s.A), cell, n_cell) == 1).reshape(shape)
    A_one = jax.ops.segment_sum(s.A, cell, n_cell).reshape(shape)  # the one curve's A, where one
    one_rec = jax.ops.segment_sum(jnp.ones_like(s.lB), rt, z.n_recipe) == 1

    def split(eps, sd_r, sd_s, level, seed_value, one):
        """The proposal: new spreads, new levels, log Jacobian, and whether it is valid."""
        sd_s2 = sd_s * jnp.exp(eps)
        rest = sd_r**2 + sd_s**2 - sd_s2**2
        sd_r2 = jnp.sqrt(jnp.maximum(rest, 1e-300))
        level2 = jnp.where(one, seed_value - jnp.exp(eps) * (seed_value - level), level)
        log_j = jnp.sum(one) * eps + 2.0 * (jnp.log(sd_r) - jnp.log(sd_r2))
        return sd_r2, sd_s2, level2, log_j, rest > 0.0

    def lp_A(A_r, sd_r, sd_s, trunc):
        seeds = -0.5 * jnp.sum((s.A - A_r[pd.recipe, pd.task]) ** 2) / sd_s**2 - n_curve * jnp.log(sd_s)
        recipes = -0.5 * jnp.sum((A_r - s.A_pop[None]) ** 2) / sd_r**2 - n_cell * jnp.log(sd_r)
        return seeds - jnp.sum(trunc) + recipes + _hn(sd_s, scales[1]) + _hn(sd_r, scales[0])

    def lp_log(x, x_r, x_pop, sd_r, sd_s, i_r):
        seeds = -0.5 * jnp.sum((x - x_r[rt]) ** 2) / sd_s**2 - z.n_train * jnp.log(sd_s)
        recipes = -0.5 * jnp.sum((x_r - x_pop) ** 2) / sd_r**2 - z.n_recipe * jnp.log(sd_r)
        return seeds + recipes + _hn(sd_s, scales[i_r + 1]) + _hn(sd_r, scales[i_r])

    rates = []
    # A: the recipe ceilings of one-seed cells, and each curve's truncation mass
    eps = jnp.exp(s.log_vstep[0]) * noise.normal()
    sd_r2, sd_s2, A_r2, log_j, valid = split(eps, s.sd[0], s.sd[1], s.A_r, A_one, one_cell)
    trunc2 = _log_trunc(A_r2[pd.recipe, pd.task], sd_s2, R0)
    log_r = lp_A(A_r2, sd_r2, sd_s2, trunc2) - lp_A(s.A_r, s.sd[0], s.sd[1], s.trunc) + log_j
    log_r = jnp.where(valid & jnp.all(_level_inside(A_r2)), log_r, -jnp.inf)
    ok = jnp.log(noise.uniform()) < log_r
    s = _accept(ok, s, A_r=A_r2, sd=s.sd.at[0].set(sd_r2).at[1].set(sd_s2), trunc=trunc2)
    rates.append(jnp.minimum(jnp.exp(log_r), 1.0))
    # log B, then log C_mid: the recipe levels of one-seed recipes
    for m, i_r in ((1, 2), (2, 4)):
        x, x_r, x_pop = (s.lB, s.lB_r, s.lB_pop) if m == 1 else (s.lC, s.lC_r, s.lC_pop)
        x_one = jax.ops.segment_sum(x, rt, z.n_recipe)
        eps = jnp.exp(s.log_vstep[m]) * noise.normal()
        sd_r2, sd_s2, x_r2, log_j, valid = split(eps, s.sd[i_r], s.sd[i_r + 1], x_r, x_one, one_rec)
        log_r = (
            lp_log(x, x_r2, x_pop, sd_r2, sd_s2, i_r)
            - lp_log(x, x_r, x_pop, s.sd[i_r], s.sd[i_r + 1], i_r)
            + log_j
        )
        log_r = jnp.where(valid, log_r, -jnp.inf)
        ok = jnp.log(noise.uniform()) < log_r
        levels = {"lB_r": x_r2} if m == 1 else {"lC_r": x_r2}
        s = _accept(ok, s, sd=s.sd.at[i_r].set(sd_r2).at[i_r + 1].set(sd_s2), **levels)
        rates.append(jnp.minimum(jnp.exp(log_r), 1.0))
    if adapt:  # aim at 30% accepted
        s = s._replace(log_vstep=jnp.clip(s.log_vstep + 0.1 * (jnp.stack(rates) - 0.3), -6.0, 1.0))
    return s


def _weak_block(noise: Noise, s: PoolState, pd: PoolData, hp: HierPriors, z: Sizes, adapt: bool):
    """Steps 1, 2 and 4 again, :data:`WEAK_SWEEPS` times, for the recipes of ``pd.weak`` only.

    Their state is taken out, updated on their own data (each of these steps factorises
    over recipes given the levels above them) and put back.
    """
    w = pd.weak
    zw = Sizes(int(w.train.shape[0]), int(w.recipe.shape[0]), z.n_task)
    t, c, r = w.train, w.curve, w.recipe
    sub = s._replace(
        lB=s.lB[t],
        lC=s.lC[t],
        A=s.A[c],
        sigma=s.sigma[c],
        Ss=s.Ss[c],
        Sy=s.Sy[c],
        trunc=s.trunc[c],
        A_r=s.A_r[r],
        lB_r=s.lB_r[r],
        lC_r=s.lC_r[r],
        log_scale=s.log_scale[r],
    )

    def weak_sweep(nz, sub):
        sub, _ = _train_block(nz, sub, w.pd, hp, zw)
        sub = _curve_block(nz, sub, w.pd, hp)
        return nz.repeat(lambda n2, c: _translate_block(n2, c, w.pd, zw, adapt)[0], sub, N_TRANSLATE)

    sub = noise.repeat(weak_sweep, sub, WEAK_SWEEPS)
    return s._replace(
        lB=s.lB.at[t].set(sub.lB),
        lC=s.lC.at[t].set(sub.lC),
        A=s.A.at[c].set(sub.A),
        sigma=s.sigma.at[c].set(sub.sigma),
        Ss=s.Ss.at[c].set(sub.Ss),
        Sy=s.Sy.at[c].set(sub.Sy),
        trunc=s.trunc.at[c].set(sub.trunc),
        A_r=s.A_r.at[r].set(sub.A_r),
        lB_r=s.lB_r.at[r].set(sub.lB_r),
        lC_r=s.lC_r.at[r].set(sub.lC_r),
        log_scale=s.log_scale.at[r].set(sub.log_scale),
    )


def _sweep(noise: Noise, s: PoolState, pd: PoolData, hp: HierPriors, z: Sizes, adapt: bool):
    """One sweep of every block, its random numbers from ``noise``."""
    s, moved = _train_block(noise, s, pd, hp, z)
    s = _curve_block(noise, s, pd, hp)
    s = noise.repeat(lambda nz, c: _translate_block(nz, c, pd, z, adapt)[0], s, N_TRANSLATE)
    if pd.weak is not None:
        s = _weak_block(noise, s, pd, hp, z, adapt)
    for _ in range(N_SCALE):
        s = _scale_block(noise, s, pd, hp, adapt)
    s = _population_block(noise, s, pd, hp, z, adapt)
    s = _ridge_block(noise, s, pd, hp, z, adapt)
    s = _levels_block(noise, s, pd, hp, z)
    s = noise.repeat(lambda nz, c: _split_block(nz, c, pd, hp, z, adapt), s, N_SPLIT)
    return s, moved


def _init(key, pd: PoolData, hp: HierPriors, z: Sizes) -> PoolState:
    """A start from one random independent-fit draw per run; levels from their means."""
    n_draws = pd.init_lB.shape[1]
    k1, k2 = jax.random.split(key)
    pick = jax.random.randint(k1, (), 0, n_draws)
    lB, lC = pd.init_lB[:, pick], pd.init_lC[:, pick]
    A, sigma = pd.init_A[:, pick], pd.init_sigma[:, pick]
    rt = pd.train_recipe
    n_t = jax.ops.segment_sum(jnp.ones_like(lB), rt, z.n_recipe)
    lB_r = jax.ops.segment_sum(lB, rt, z.n_recipe) / n_t
    lC_r = jax.ops.segment_sum(lC, rt, z.n_recipe) / n_t
    cell = pd.recipe * z.n_task + pd.task
    n_cell = z.n_recipe * z.n_task
    cnt = jnp.maximum(jax.ops.segment_sum(jnp.ones_like(A), cell, n_cell), 1.0)
    A_r = (jax.ops.segment_sum(A, cell, n_cell) / cnt).reshape(z.n_recipe, z.n_task)
    scales = _sd_scales(hp)
    sd = 0.5 * scales * jnp.exp(jax.random.uniform(k2, (6,), minval=-0.5, maxval=0.5))
    log_scale = jnp.zeros(z.n_recipe)
    Ss, Sy = _sums(lB, lC, pd)
    A_pop = A_r.mean(0)
    return PoolState(
        lB,
        lC,
        A,
        sigma,
        A_r,
        lB_r,
        lC_r,
        A_pop,
        lB_r.mean(),
        lC_r.mean(),
        sd,
        log_scale,
        jnp.full(3, math.log(0.15)),
        Ss,
        Sy,
        jnp.array([math.log(0.15)] * 3 + [0.0]),
        _log_trunc(A_r[pd.recipe, pd.task], sd[1], pd.data.R0),
        jnp.full(2, math.log(0.1)),
        jnp.full(3, math.log(0.2)),
    )


def _record(s: PoolState, pd: PoolData) -> dict:
    return {
        "A": s.A,
        "B": jnp.exp(s.lB[pd.train]),
        "C_mid": jnp.exp(s.lC[pd.train]),
        "sigma": s.sigma,
        "A_recipe": s.A_r,
        "B_recipe": jnp.exp(s.lB_r),
        "C_mid_recipe": jnp.exp(s.lC_r),
        "A_pop": s.A_pop,
        "B_pop": jnp.exp(s.lB_pop),
        "C_mid_pop": jnp.exp(s.lC_pop),
        **{name: s.sd[i] for i, name in enumerate(SD_NAMES)},
    }


def _thinned(s: PoolState, key, pd: PoolData, hp: HierPriors, z: Sizes, thin: int, adapt: bool):
    """``thin`` sweeps from ``s``; the last state, its record and the share of sweeps each run moved."""
    sizes = Noise.sizes(lambda noise, s: _sweep(noise, s, pd, hp, z, False), s)

    def one(c, pools):
        s1, moved = _sweep(Noise(*pools), c[0], pd, hp, z, adapt)
        return (s1, c[1] + moved), None

    (s, moved), _ = jax.lax.scan(one, (s, jnp.zeros(z.n_train)), Noise.pools(key, sizes, thin))
    return s, (_record(s, pd), moved / thin)


@functools.partial(jax.jit, static_argnums=(2, 3, 4, 5))
def _warm_chains(keys, pd, hp, z, warmup, thin):
    """One group of chains (one per key), vmapped: their start and warm-up; the states reached."""

    def warm(k, pd):
        k_init, k_run = jax.random.split(k)
        s0 = _init(k_init, pd, hp, z)
        keys_w = jax.random.split(jax.random.fold_in(k_run, 0), warmup)
        s, _ = jax.lax.scan(lambda c, kk: _thinned(c, kk, pd, hp, z, thin, True), s0, keys_w)
        return s

    return jax.vmap(warm, in_axes=(0, None))(keys, pd)


@functools.partial(jax.jit, static_argnums=(3, 4, 5, 6))
def _draw_chains(keys, states, pd, hp, z, samples, thin, stream):
    """``samples`` kept draws of a group of chains from ``states``; the records and the states reached.

    ``stream`` (traced: every pass is the same program) picks the pass's random numbers:
    1 for the first pass after the warm-up, 2, 3, ... for the passes that extend it.
    """

    def draw(k, s, pd):
        _, k_run = jax.random.split(k)
        keys_s = jax.random.split(jax.random.fold_in(k_run, stream), samples)
        s, (rec, moved) = jax.lax.scan(lambda c, kk: _thinned(c, kk, pd, hp, z, thin, False), s, keys_s)
        return {**rec, "moved": moved}, s

    return jax.vmap(draw, in_axes=(0, 0, None))(keys, states, pd)


def thin_record(passes: list[dict], thin: int) -> dict[str, np.ndarray]:
    """Every ``thin``-th draw of consecutive passes of the same chains (arrays (chain, draw, ...)).

    The passes are joined along the draw axis; ``moved`` (a share of sweeps) is averaged
    over the ``thin`` draws behind each kept one, every other array is the kept draw's.
    """
    out = {}
    for k in passes[0]:
        v = np.concatenate([np.asarray(p[k]) for p in passes], axis=1)
        out[k] = every_kth(v, thin, 1, np.mean if k == "moved" else None)
    return out


def chain_layout(chains: int, n_devices: int | None = None) -> tuple[int, int]:
    """How the pooled chains are laid out: ``(devices, width)``.

    The chains run in groups of ``width``, vmapped within a group, one compiled program
    for every group; the groups are dispatched round-robin to the local devices (at most
    ``n_devices``, default every one).
    On a CPU the width is 2 whatever the device count (1 for an odd number of chains), so
    the draws have the same bits on one core or several; elsewhere (one GPU) all the
    chains are one group.

    Returns
    -------
    tuple of int
        Devices used, and chains per group.
    """
    avail = jax.local_device_count()
    n = avail if n_devices is None else max(1, min(int(n_devices), avail))
    if jax.default_backend() == "cpu":
        width = 2 if chains % 2 == 0 else 1
        groups = chains // width
        return max(d for d in range(1, n + 1) if groups % d == 0), width
    used = max(d for d in range(1, n + 1) if chains % d == 0)
    return used, chains // used


def sample_pooled(
    key: jax.Array,
    pd: PoolData,
    hp: HierPriors,
    *,
    chains: int = 4,
    warmup: int = 500,
    samples: int = 500,
    thin: int = 2,
    n_devices: int | None = None,
    more: Callable[[dict], bool] | None = None,
    max_passes: int = 2,
) -> dict[str, np.ndarray]:
    """``chains`` chains of ``(warmup + samples) * thin`` sweeps, every ``thin``-th kept.

    The chains are split over the local devices (:func:`chain_layout`; ``n_devices`` caps
    them); on a CPU each chain's draws do not depend on the split.

    Parameters
    ----------
    key : jax.Array
        The chains' key.
    pd, hp
        The data (:func:`pool_data`) and the priors.
    chains, warmup, samples, thin : int
        Chains; warm-up and kept draws per chain, ``thin`` sweeps each.
    n_devices : int, optional
        At most this many local devices (default: all).
    more : callable, optional
        Called with the draws; while it returns ``True`` (and fewer than ``max_passes``
        passes have run) the chains run on from where they stopped for one more pass of
        ``samples`` draws, and after ``p`` passes every ``p``-th draw of the whole is kept
        (the same number of draws, each ``p`` times as many sweeps apart: the thinned chain
        is a Markov chain of the same posterior). The fit passes its convergence check. Same
        programs, no new compilation.
    max_passes : int
        See ``more``: at most this many passes in all (1: never run on).

    Returns
    -------
    dict of str to ndarray
        Curve-level ``A, B, C_mid, sigma`` (chain, draw, curve), ``A_recipe`` (chain,
        draw, recipe, task), ``B_recipe, C_mid_recipe`` (chain, draw, recipe), ``A_pop``
        (chain, draw, task), the other population means and the spreads (chain, draw),
        ``moved`` (chain, draw, training run: the share of sweeps since the last kept draw
        in which the run's ``(B, C_mid)`` moved) and ``passes`` (0-d: how many passes of
        ``samples`` draws the chains ran, 1 unless ``more`` asked for more).
    """
    z = Sizes(int(pd.prop_mean.shape[0]), int(pd.step.shape[0]), int(jnp.max(pd.task)) + 1)
    n_dev, width = chain_layout(int(chains), n_devices)
    devices = jax.local_devices()[:n_dev]
    keys = jax.random.split(key, int(chains)).reshape(int(chains) // width, width)
    n_groups = len(keys)

    def one_pass(stream: int, states: list | None) -> tuple[dict, list]:
        def on_device(d: int) -> list[tuple[dict, PoolState]]:  # this device's groups, in turn
            dev = devices[d]
            with runtime.x64():  # x64 is thread-local: each thread sets it
                pd_d = jax.device_put(pd, dev)
                out = []
                for g in range(d, n_groups, n_dev):
                    k_g = jax.device_put(keys[g], dev)
                    if states is None:
                        s = _warm_chains(k_g, pd_d, hp, z, int(warmup), int(thin))
                    else:
                        s = states[g]
                    rec, s = _draw_chains(k_g, s, pd_d, hp, z, int(samples), int(thin), stream)
                    out.append(({k: np.asarray(v) for k, v in rec.items()}, s))
                return out

        if n_dev == 1:
            per_device = [on_device(0)]
        else:  # one host thread per device (XLA releases the GIL while it runs)
            with ThreadPoolExecutor(max_workers=n_dev) as pool:
                per_device = list(pool.map(on_device, range(n_dev)))
        outs = [per_device[g % n_dev][g // n_dev] for g in range(n_groups)]
        rec = {k: np.concatenate([o[0][k] for o in outs]) for k in outs[0][0]}
        return rec, [o[1] for o in outs]

    rec, states = one_pass(1, None)
    passes = [rec]
    while more is not None and len(passes) < int(max_passes) and more(rec):
        r, states = one_pass(len(passes) + 1, states)
        passes.append(r)
        rec = thin_record(passes, len(passes))
    rec["passes"] = np.asarray(len(passes))
    return rec
