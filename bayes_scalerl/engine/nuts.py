"""NUTS for many small posteriors at once, one leapfrog step per lane per tick.

Vmapping NumPyro's NUTS kernel runs every lane's tree in lock-step: each iteration
takes as long as the deepest tree among the lanes, and measured on our runs (64 lanes,
4 chains x 16 runs) that wastes about 4 in 5 leapfrog evaluations. Here the unit of
work is a single leapfrog step instead. Every lane keeps its own place in its own
trajectory, and every tick of the program's loop advances each lane by one leapfrog
step: a lane whose tree is finished makes its transition, adapts and starts the next
tree in the same tick, while its neighbours carry on with theirs. Lanes are workers,
not chains: a lane that finishes a chain takes the next chain of the group's queue,
so a group of slow runs and fast runs costs its total work, not its slowest run's.

The algorithm is NumPyro's NUTS (iterative tree building with multinomial sampling
inside subtrees, biased progressive sampling between them, the generalised no-U-turn
criterion checked on the checkpointed subtrees, divergence at an energy error of
1000) with its Stan-style warm-up (dual averaging of the step size towards
``target_accept``; the dense or diagonal mass matrix estimated by Welford's method in
doubling windows, regularised as Stan does; at each window end dual averaging restarts
from 10x the step size, without NumPyro's new step-size search). NumPyro's own pieces
are reused: ``velocity_verlet``, ``dual_averaging``,
``welford_covariance``, ``build_adaptation_schedule``, ``find_reasonable_step_size``
and ``momentum_generator``. Only the control flow is new, and the tests check the
draws against quadrature of the posterior and against NumPyro's ``MCMC``.

A tick's work is a chain of pure functions of one lane's arrays, each tested on its own
(``tests/test_nuts.py``): :func:`_leaf` (one leapfrog step and the leaf's weight),
:func:`_grow_subtree` (multinomial sampling within a subtree), :func:`_subtree_turning`
(the checkpointed no-U-turn check), :func:`_merge_subtree` (biased progressive
sampling between subtrees), :func:`_adapt` and :func:`_window_end` (the warm-up) and
:func:`_record` (a draw's output row), put together by :func:`_advance`. Given a step
size and an inverse mass matrix and no warm-up, :func:`sample_queue` runs plain NUTS
transitions: the tests start chains from exact draws of a Gaussian and check that the
draws after a few transitions are still exact.

Each chain's randomness is counter-based: the Threefry hash of a key pair drawn from
the chain's own key and of the number of leapfrog steps the chain has taken, so its
draws do not depend on which lane runs it or on the other chains of the group. The
hash is written out here (:func:`_threefry2x32`, bit for bit JAX's): on a CPU JAX
runs its own as a loop of separate small operations, which cost a third of every tick.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from numpyro.distributions.util import cholesky_of_inverse
from numpyro.infer.hmc import momentum_generator
from numpyro.infer.hmc_util import (
    build_adaptation_schedule,
    dual_averaging,
    euclidean_kinetic_energy,
    find_reasonable_step_size,
    velocity_verlet,
    welford_covariance,
)

__all__ = ["NutsSettings", "sample_queue"]

_MAX_DELTA_ENERGY = 1000.0


class NutsSettings(NamedTuple):
    """Static settings of :func:`sample_queue`.

    Attributes
    ----------
    num_warmup, num_samples : int
        Warm-up iterations and kept draws per chain.
    target_accept : float
        Target mean acceptance probability of the step-size adaptation.
    max_tree_depth : int
        At most ``2**max_tree_depth - 1`` leapfrog steps per iteration.
    dense_mass : bool
        Adapt a dense (else diagonal) mass matrix.
    n_lanes : int
        Chains advanced side by side (the width of every vectorised operation).
    """

    num_warmup: int
    num_samples: int
    target_accept: float
    max_tree_depth: int
    dense_mass: bool
    n_lanes: int


class _Tree(NamedTuple):
    # edges, proposal and sums of a (sub)tree; numpyro's TreeInfo without depth
    z_left: jax.Array
    r_left: jax.Array
    g_left: jax.Array
    z_right: jax.Array
    r_right: jax.Array
    g_right: jax.Array
    z_prop: jax.Array
    pe_prop: jax.Array
    g_prop: jax.Array
    energy_prop: jax.Array
    weight: jax.Array
    r_sum: jax.Array
    diverging: jax.Array
    sum_accept: jax.Array
    n_prop: jax.Array


class _Adapt(NamedTuple):
    step_size: jax.Array
    inv_mass: jax.Array
    mass_sqrt: jax.Array
    ss: tuple
    mm: tuple
    window: jax.Array


class _Lane(NamedTuple):
    task: jax.Array  # chain being run (>= n_valid: idle)
    it: jax.Array  # iterations done in this chain
    key: jax.Array  # this chain's threefry key pair (uint32, shape (2,))
    n_step: jax.Array  # leapfrog steps done in this chain: the counter of its randomness
    data: Any  # this chain's data (set when the chain starts)
    z: jax.Array
    pe: jax.Array
    grad: jax.Array
    adapt: _Adapt
    energy0: jax.Array  # energy at the start of the trajectory
    tree: _Tree
    depth: jax.Array
    tree_turning: jax.Array
    sub: _Tree
    r_ckpts: jax.Array
    r_sum_ckpts: jax.Array
    right: jax.Array
    pending_window: jax.Array  # a mass-matrix window ended with this iteration
    fresh: jax.Array  # needs a new trajectory (momentum) before the next step
    start: jax.Array  # needs its chain initialised


_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))


def _threefry2x32(k0, k1, x0, x1):
    """The Threefry-2x32 hash (20 rounds) of the counter pair ``(x0, x1)`` under key ``(k0, k1)``.

    Bit for bit ``jax.extend.random.threefry_2x32`` (tested), written out in full. On
    a CPU JAX lowers its own as a loop over the five groups of rounds, each a handful
    of separate XLA operations, while these additions, shifts and xors fuse into one.
    Measured at 64 lanes (4 runs x 64 chains, ``target_accept`` 0.9), a tick took 68 µs
    with this hash against 96 µs with ``jax.random``.
    """
    ks = (k0, k1, k0 ^ k1 ^ jnp.uint32(0x1BD11BDA))
    x0, x1 = x0 + ks[0], x1 + ks[1]
    for i in range(5):
        for rot in _ROTATIONS[i % 2]:
            x0 = x0 + x1
            x1 = (x1 << jnp.uint32(rot)) | (x1 >> jnp.uint32(32 - rot))
            x1 = x0 ^ x1
        x0 = x0 + ks[(i + 1) % 3]
        x1 = x1 + ks[(i + 2) % 3] + jnp.uint32(i + 1)
    return x0, x1


def _counter_words(key, stream, n_step):
    """Two random 32-bit words per ``stream`` entry for a chain's step ``n_step``."""
    x1 = jnp.broadcast_to(n_step.astype(jnp.uint32), stream.shape)
    return _threefry2x32(key[0], key[1], stream, x1)


def _std_normal(hi, lo, dtype):
    """Standard normals from two 32-bit words each: the normal quantiles of 2**53 cells.

    The 53 bits ``k = (hi >> 5) * 2**26 + (lo >> 6)`` stand for the uniform
    ``u = (k + 0.5) / 2**53``, and the normal is its quantile. In float64 that midpoint
    rounds on [1/2, 1), and for ``k = 2**53 - 1`` it rounds to exactly 1.0 (an infinite
    momentum), so ``u`` is capped at the largest float64 below 1: every ``k`` maps to a
    finite normal (at most 8.21 in magnitude), and every other ``k`` to the same value
    as without the cap. ``dtype`` must be float64.
    """
    k = (hi >> jnp.uint32(5)).astype(dtype) * 2.0**26 + (lo >> jnp.uint32(6)).astype(dtype)
    u = jnp.minimum((k + 0.5) * 2.0**-53, 1.0 - 2.0**-53)
    return jax.scipy.special.ndtri(u)


def _where(mask, new, old):
    return jax.tree.map(lambda a, b: jnp.where(mask, a, b), new, old)


def _leaf_tree(z, r, pe, g, energy, weight, diverging, accept) -> _Tree:
    return _Tree(z, r, g, z, r, g, z, pe, g, energy, weight, r, diverging, accept, jnp.ones((), jnp.int32))


def _times(mass, r):
    """``mass @ r`` for a dense (2-d) matrix, ``mass * r`` for a diagonal (1-d) one."""
    return mass @ r if mass.ndim == 2 else mass * r


def _is_turning(inv_mass, r_left, r_right, r_sum):
    v_left, v_right = _times(inv_mass, r_left), _times(inv_mass, r_right)
    r_sum = r_sum - 0.5 * (r_left + r_right)
    return (jnp.dot(v_left, r_sum) <= 0) | (jnp.dot(v_right, r_sum) <= 0)


def _ckpt_range(n):
    # numpyro's _leaf_idx_to_ckpt_idxs: checkpoints to check after leaf n of a subtree
    idx_max = jax.lax.population_count(n >> 1).astype(jnp.int32)
    num_subtrees = jax.lax.population_count((~n & (n + 1)) - 1).astype(jnp.int32)
    return idx_max - num_subtrees + 1, idx_max


def _kinetic(inv_mass, r):
    """NumPyro's ``euclidean_kinetic_energy``, wrapped so that leapfrog steps differentiate it.

    ``velocity_verlet`` would use the hand-written gradient attached to NumPyro's function;
    the sampler has always used JAX's gradient of the energy, and its draws are kept bit for bit.
    """
    return euclidean_kinetic_energy(inv_mass, r)


_SS_INIT, _SS_UPDATE = dual_averaging()


def _welford(dense: bool):
    """NumPyro's Welford (co)variance ``(init, update, final)`` for a dense or diagonal mass matrix."""
    return welford_covariance(diagonal=not dense)


# ---- the pieces of one leapfrog tick, each a pure function of one lane's arrays


class _Leaf(NamedTuple):
    """The state after one leapfrog step, and the one-leaf tree's log weight and statistics."""

    z: jax.Array
    r: jax.Array
    pe: jax.Array
    grad: jax.Array
    energy: jax.Array
    weight: jax.Array  # log weight: minus the energy error (-inf for a NaN energy)
    diverging: jax.Array  # energy error above _MAX_DELTA_ENERGY
    accept: jax.Array  # min(1, exp(-energy error)), for the step-size adaptation


def _edge(tree: _Tree, sub: _Tree, first: jax.Array, right: jax.Array) -> tuple[jax.Array, ...]:
    """``(z, r, grad)`` to step from: the tree's edge for a subtree's first leaf, else the subtree's.

    The edge is the right one when ``right``, else the left one.
    """
    return tuple(
        jnp.where(first, jnp.where(right, tr, tl), jnp.where(right, sr, sl))
        for tl, tr, sl, sr in (
            (tree.z_left, tree.z_right, sub.z_left, sub.z_right),
            (tree.r_left, tree.r_right, sub.r_left, sub.r_right),
            (tree.g_left, tree.g_right, sub.g_left, sub.g_right),
        )
    )


def _leaf(
    potential: Callable[[jax.Array], jax.Array],
    inv_mass: jax.Array,
    step_size: jax.Array,
    z: jax.Array,
    r: jax.Array,
    pe: jax.Array,
    grad: jax.Array,
    energy0: jax.Array,
) -> _Leaf:
    """One leapfrog step (NumPyro's ``velocity_verlet``) and the new leaf's weight.

    Parameters
    ----------
    potential : callable
        ``potential(z)``: the negative log density.
    inv_mass : jax.Array
        Inverse mass matrix, dense ``(d, d)`` or diagonal ``(d,)``.
    step_size : jax.Array
        Signed step size (negative: a step backwards in time).
    z, r, pe, grad : jax.Array
        Position, momentum, potential energy and its gradient before the step.
    energy0 : jax.Array
        The trajectory's initial energy.

    Returns
    -------
    _Leaf
        The state after the step; its log weight ``-(energy - energy0)`` (``-inf`` if
        the energy is NaN), whether it diverges (energy error above 1000), and its
        acceptance statistic ``min(1, exp(energy0 - energy))``.
    """
    _, vv_update = velocity_verlet(potential, _kinetic)
    z1, r1, pe1, g1 = vv_update(step_size, inv_mass, (z, r, pe, grad))
    energy1 = pe1 + euclidean_kinetic_energy(inv_mass, r1)
    delta = energy1 - energy0
    delta = jnp.where(jnp.isnan(delta), jnp.inf, delta)
    return _Leaf(
        z1, r1, pe1, g1, energy1, -delta, delta > _MAX_DELTA_ENERGY, jnp.minimum(1.0, jnp.exp(-delta))
    )


def _grow_subtree(sub: _Tree, leaf: _Leaf, first: jax.Array, right: jax.Array, u: jax.Array) -> _Tree:
    """Add a leaf to the subtree being built: multinomial sampling within the subtree.

    Parameters
    ----------
    sub : _Tree
        The subtree so far (ignored when ``first``).
    leaf : _Leaf
        The new leaf, one step beyond the subtree's right edge when ``right`` (else
        its left edge).
    first : jax.Array
        The leaf is the subtree's first: the subtree becomes the one-leaf tree.
    right : jax.Array
        The direction the subtree grows in.
    u : jax.Array
        A uniform on [0, 1): the leaf becomes the subtree's proposal when
        ``u < w_leaf / (w_sub + w_leaf)`` (with ``w`` the weights; always when ``first``).

    Returns
    -------
    _Tree
        The grown subtree: new edge, proposal, log weight ``logaddexp``, momentum sum,
        divergence (the leaf's), acceptance sum and leaf count ``n_prop``.
    """
    take = first | (u < jax.nn.sigmoid(leaf.weight - sub.weight))
    keep_l = ~first & right  # the subtree's left edge stays
    keep_r = ~first & ~right  # its right edge stays
    return _Tree(
        jnp.where(keep_l, sub.z_left, leaf.z),
        jnp.where(keep_l, sub.r_left, leaf.r),
        jnp.where(keep_l, sub.g_left, leaf.grad),
        jnp.where(keep_r, sub.z_right, leaf.z),
        jnp.where(keep_r, sub.r_right, leaf.r),
        jnp.where(keep_r, sub.g_right, leaf.grad),
        jnp.where(take, leaf.z, sub.z_prop),
        jnp.where(take, leaf.pe, sub.pe_prop),
        jnp.where(take, leaf.grad, sub.g_prop),
        jnp.where(take, leaf.energy, sub.energy_prop),
        jnp.where(first, leaf.weight, jnp.logaddexp(sub.weight, leaf.weight)),
        jnp.where(first, leaf.r, sub.r_sum + leaf.r),
        leaf.diverging,
        jnp.where(first, leaf.accept, sub.sum_accept + leaf.accept),
        sub.n_prop + 1,
    )


def _subtree_turning(
    inv_mass: jax.Array, sub: _Tree, r: jax.Array, r_ckpts: jax.Array, r_sum_ckpts: jax.Array
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """The iterative generalised no-U-turn check of a subtree after its newest leaf.

    NumPyro's checkpoint scheme: after an even-numbered leaf (counting from 0) its
    momentum and the subtree's momentum sum are stored as checkpoint
    ``popcount(n >> 1)``; after leaf ``n`` the balanced sub-subtrees that it completes
    are checked, each spanning from a checkpoint to the leaf.

    Parameters
    ----------
    inv_mass : jax.Array
        Inverse mass matrix, dense ``(d, d)`` or diagonal ``(d,)``.
    sub : _Tree
        The subtree with the leaf added (``sub.n_prop`` leaves, the newest last).
    r : jax.Array
        The newest leaf's momentum.
    r_ckpts, r_sum_ckpts : jax.Array
        Checkpointed momenta and momentum sums, shape ``(max_tree_depth, d)``.

    Returns
    -------
    turning, r_ckpts, r_sum_ckpts : jax.Array
        Whether one of the checked sub-subtrees makes a U-turn, and the updated
        checkpoints.
    """
    n = sub.n_prop - 1  # index of this leaf in the subtree
    i_min, i_max = _ckpt_range(n)
    even = n % 2 == 0
    r_ckpts = jnp.where(even, r_ckpts.at[i_max].set(r), r_ckpts)
    r_sum_ckpts = jnp.where(even, r_sum_ckpts.at[i_max].set(sub.r_sum), r_sum_ckpts)
    idx = jnp.arange(r_ckpts.shape[0])
    in_range = (idx >= i_min) & (idx <= i_max)
    v1 = _times(inv_mass, r)
    vc = r_ckpts @ inv_mass.T if inv_mass.ndim == 2 else r_ckpts * inv_mass
    rs = sub.r_sum[None, :] - r_sum_ckpts + 0.5 * r_ckpts - 0.5 * r[None, :]
    turns = (jnp.sum(vc * rs, axis=1) <= 0) | (rs @ v1 <= 0)
    return jnp.any(turns & in_range), r_ckpts, r_sum_ckpts


def _merge_subtree(
    tree: _Tree, sub: _Tree, sub_done: jax.Array, sub_turning: jax.Array, right: jax.Array, u: jax.Array
) -> _Tree:
    """Merge a finished subtree into the tree: biased progressive sampling between them.

    Parameters
    ----------
    tree, sub : _Tree
        The tree and the subtree grown beside it (on its right when ``right``).
    sub_done : jax.Array
        The subtree is finished; if not, ``tree`` is returned unchanged (but for its
        ``diverging``, which is then False).
    sub_turning : jax.Array
        The subtree made a U-turn: it extends the tree's edges and sums, but its
        proposal is rejected (as is a diverging subtree's).
    right : jax.Array
        The subtree lies on the tree's right.
    u : jax.Array
        A uniform on [0, 1): the subtree's proposal replaces the tree's when
        ``u < min(1, w_sub / w_tree)``.

    Returns
    -------
    _Tree
        The merged tree (log weight ``logaddexp``; its ``diverging`` is the subtree's).
    """
    r_sum = tree.r_sum + sub.r_sum
    p = jnp.where(sub_turning | sub.diverging, 0.0, jnp.exp(jnp.minimum(0.0, sub.weight - tree.weight)))
    move = sub_done & (u < p)
    ext_r = sub_done & right  # the tree's right edge moves to the subtree's
    ext_l = sub_done & ~right
    return _Tree(
        jnp.where(ext_l, sub.z_left, tree.z_left),
        jnp.where(ext_l, sub.r_left, tree.r_left),
        jnp.where(ext_l, sub.g_left, tree.g_left),
        jnp.where(ext_r, sub.z_right, tree.z_right),
        jnp.where(ext_r, sub.r_right, tree.r_right),
        jnp.where(ext_r, sub.g_right, tree.g_right),
        jnp.where(move, sub.z_prop, tree.z_prop),
        jnp.where(move, sub.pe_prop, tree.pe_prop),
        jnp.where(move, sub.g_prop, tree.g_prop),
        jnp.where(move, sub.energy_prop, tree.energy_prop),
        jnp.where(sub_done, jnp.logaddexp(tree.weight, sub.weight), tree.weight),
        jnp.where(sub_done, r_sum, tree.r_sum),
        sub_done & sub.diverging,
        jnp.where(sub_done, tree.sum_accept + sub.sum_accept, tree.sum_accept),
        jnp.where(sub_done, tree.n_prop + sub.n_prop, tree.n_prop),
    )


def _adapt(
    a: _Adapt,
    accept: jax.Array,
    z: jax.Array,
    done: jax.Array,
    it: jax.Array,
    settings: NutsSettings,
    schedule: jax.Array,
) -> tuple[_Adapt, jax.Array]:
    """The warm-up adaptation after a finished iteration.

    Dual averaging of the log step size towards ``settings.target_accept`` (the
    averaged iterate from the last warm-up iteration on), and Welford's update of the
    mass-matrix estimate with the iteration's draw inside the slow windows of
    ``schedule`` (NumPyro's ``build_adaptation_schedule``).

    Parameters
    ----------
    a : _Adapt
        The adaptation state.
    accept : jax.Array
        The iteration's mean acceptance statistic.
    z : jax.Array
        The iteration's draw.
    done : jax.Array
        The iteration is finished (else ``a`` is returned unchanged).
    it : jax.Array
        Iterations done in the chain before this one.
    settings : NutsSettings
    schedule : jax.Array
        ``(start, end)`` iteration of each adaptation window, shape ``(n_windows, 2)``.

    Returns
    -------
    adapt : _Adapt
    window_ended : jax.Array
        A slow window ended with this iteration: the mass matrix is due (see
        :func:`_window_end`).
    """
    n_windows = schedule.shape[0]
    warm = it < settings.num_warmup
    ss = _SS_UPDATE(settings.target_accept - accept, a.ss)
    log_step, log_step_avg = ss[0], ss[1]
    new_step = jnp.exp(jnp.where(it == settings.num_warmup - 1, log_step_avg, log_step))
    finfo = jnp.finfo(z.dtype)
    new_step = jnp.clip(new_step, finfo.tiny, finfo.max)
    middle = (a.window > 0) & (a.window < n_windows - 1)
    adapting = done & warm
    mm = _where(adapting & middle, _welford(settings.dense_mass)[1](z, a.mm), a.mm)
    at_end = it == schedule[jnp.minimum(a.window, n_windows - 1), 1]
    adapt = _Adapt(
        jnp.where(adapting, new_step, a.step_size),
        a.inv_mass,
        a.mass_sqrt,
        _where(adapting, ss, a.ss),
        mm,
        jnp.where(adapting & at_end, a.window + 1, a.window),
    )
    return adapt, adapting & at_end & middle


def _window_end(a: _Adapt, dense: bool) -> _Adapt:
    """The new mass matrix at the end of a slow window; dual averaging restarts from 10x the step size.

    (NumPyro and Stan also search for a new step size here: measured, it cost more than
    it saved, as dual averaging finds the step size within a few iterations.)
    """
    mm_init, _, mm_final = _welford(dense)
    inv_mass, mass_sqrt, _ = mm_final(a.mm, regularize=True)
    return a._replace(
        inv_mass=inv_mass,
        mass_sqrt=mass_sqrt,
        ss=_SS_INIT(jnp.log(10.0) + jnp.log(a.step_size)),
        mm=mm_init(a.inv_mass.shape[0]),
    )


def _record(tree: _Tree, accept: jax.Array) -> jax.Array:
    """One output row for a draw: ``z``, potential energy, diverging, steps, acceptance, energy."""
    f64 = tree.z_prop.dtype
    return jnp.concatenate(
        [
            tree.z_prop,
            jnp.stack(
                [
                    tree.pe_prop,
                    tree.diverging.astype(f64),
                    tree.n_prop.astype(f64),
                    accept,
                    tree.energy_prop,
                ]
            ),
        ]
    )


def _advance(
    lane: _Lane,
    potential_fn: Callable[[jax.Array, Any], jax.Array],
    settings: NutsSettings,
    schedule: jax.Array,
    n_valid: jax.Array,
) -> tuple[_Lane, jax.Array, jax.Array, jax.Array]:
    """One leapfrog step of a lane's trajectory and its bookkeeping.

    The step extends the subtree being built (its first leaf starts from the tree's
    edge); a finished subtree (full, turning or diverging) is merged into the tree and
    the next one gets a random direction; a finished tree (at the maximum depth,
    turning or diverging) makes the transition, adapts during warm-up, and leaves the
    lane ``fresh`` for a new trajectory.

    Returns
    -------
    lane : _Lane
    record : jax.Array
        The finished iteration's output row (see :func:`_record`).
    write : jax.Array
        ``record`` is a kept draw of a valid chain.
    slot : jax.Array
        Its index among the chain's kept draws.
    """
    a = lane.adapt
    W = settings.num_warmup
    # this step's randomness: two 32-bit words, stream 0 at counter n_step
    word = jnp.stack(_counter_words(lane.key, jnp.zeros((), jnp.uint32), lane.n_step))
    u = (word >> 8).astype(lane.z.dtype) * 2.0**-24  # two uniforms on [0, 1) with 24 bits
    go_right = (word[0] & 1) == 1  # the direction of a new subtree: the word's lowest bit
    sub, tree, right = lane.sub, lane.tree, lane.right
    first = sub.n_prop == 0
    z, r, g = _edge(tree, sub, first, right)
    step = jnp.where(right, a.step_size, -a.step_size)
    leaf = _leaf(lambda x: potential_fn(x, lane.data), a.inv_mass, step, z, r, lane.pe, g, lane.energy0)
    sub = _grow_subtree(sub, leaf, first, right, u[0])
    sub_turning, r_ckpts, r_sum_ckpts = _subtree_turning(
        a.inv_mass, sub, leaf.r, lane.r_ckpts, lane.r_sum_ckpts
    )
    sub_done = (sub.n_prop == (1 << lane.depth)) | sub_turning | sub.diverging
    tree = _merge_subtree(tree, sub, sub_done, sub_turning, right, u[1])
    turning = sub_turning | _is_turning(a.inv_mass, tree.r_left, tree.r_right, tree.r_sum)
    depth = jnp.where(sub_done, lane.depth + 1, lane.depth)
    tree_turning = jnp.where(sub_done, turning, lane.tree_turning)
    done = sub_done & ((depth >= settings.max_tree_depth) | tree_turning | tree.diverging)
    # a finished subtree: the next one starts empty, in a random direction
    sub = sub._replace(n_prop=jnp.where(sub_done, 0, sub.n_prop))
    right = jnp.where(sub_done, go_right, right)

    # the transition, statistics and adaptation of a finished iteration
    accept = tree.sum_accept / jnp.maximum(tree.n_prop, 1)
    adapt, window_ended = _adapt(a, accept, tree.z_prop, done, lane.it, settings, schedule)
    write = done & (lane.it >= W) & (lane.task < n_valid)
    new = lane._replace(
        n_step=lane.n_step + 1,
        it=lane.it + done.astype(jnp.int32),
        z=jnp.where(done, tree.z_prop, lane.z),
        pe=jnp.where(done, tree.pe_prop, lane.pe),
        grad=jnp.where(done, tree.g_prop, lane.grad),
        adapt=adapt,
        tree=tree,
        depth=depth,
        tree_turning=tree_turning,
        sub=sub,
        r_ckpts=r_ckpts,
        r_sum_ckpts=r_sum_ckpts,
        right=right,
        pending_window=window_ended,
        fresh=done,
    )
    return new, _record(tree, accept), write, lane.it - W


def _new_trajectory(lane: _Lane, n_valid: jax.Array) -> _Lane:
    """Start a new trajectory (fresh momentum, one-leaf tree, random direction) if the lane needs one."""
    d = lane.z.shape[0]
    f64 = lane.z.dtype
    # the randomness of a trajectory started after step n_step: streams 1..d+1
    hi, lo = _counter_words(lane.key, jnp.arange(1, d + 2, dtype=jnp.uint32), lane.n_step)
    eps = _std_normal(hi[:d], lo[:d], f64)
    r = _times(lane.adapt.mass_sqrt, eps)  # numpyro's momentum_generator, on these normals
    energy0 = lane.pe + euclidean_kinetic_energy(lane.adapt.inv_mass, r)
    zero = jnp.zeros((), f64)
    tree = _leaf_tree(lane.z, r, lane.pe, lane.grad, energy0, zero, jnp.array(False), zero)
    tree = tree._replace(n_prop=jnp.zeros((), jnp.int32))
    m = lane.fresh & (lane.task < n_valid)
    return lane._replace(
        energy0=jnp.where(m, energy0, lane.energy0),
        tree=_where(m, tree, lane.tree),
        depth=jnp.where(m, 0, lane.depth),
        tree_turning=lane.tree_turning & ~m,
        sub=lane.sub._replace(n_prop=jnp.where(m, 0, lane.sub.n_prop)),
        right=jnp.where(m, (hi[d] & 1) == 1, lane.right),
        fresh=lane.fresh & ~m,
    )


class _Queue(NamedTuple):
    """The chains of a :func:`sample_queue` call (leading axis ``n_tasks``)."""

    key_data: jax.Array  # each chain's key data
    impl: Any  # their PRNG implementation
    z0: jax.Array  # initial points, (n_tasks, d)
    data: Any  # each chain's data
    n_valid: jax.Array  # chains n_valid and later are padding
    step_size: jax.Array | None  # each chain's initial step size, (n_tasks,); None: searched
    inv_mass: jax.Array | None  # each chain's initial inverse mass matrix; None: the identity
    mass_sqrt: jax.Array | None  # its Cholesky factor of the inverse (momentum = mass_sqrt @ N(0, I))


def _init_chain(
    lane: _Lane, potential_fn: Callable[[jax.Array, Any], jax.Array], queue: _Queue, dense: bool
) -> _Lane:
    """Set a lane up for the start of its chain ``lane.task``: data, point, keys and adaptation."""
    n_tasks, d = queue.z0.shape
    f64 = queue.z0.dtype
    t = jnp.minimum(lane.task, n_tasks - 1)
    data = jax.tree.map(lambda x: x[t], queue.data)
    z = queue.z0[t]
    pe, grad = jax.value_and_grad(potential_fn)(z, data)
    k_words, k_ss = jax.random.split(jax.random.wrap_key_data(queue.key_data[t], impl=queue.impl))
    if queue.inv_mass is None:
        inv_mass = mass_sqrt = jnp.eye(d, dtype=f64) if dense else jnp.ones(d, f64)
    else:
        inv_mass, mass_sqrt = queue.inv_mass[t], queue.mass_sqrt[t]
    if queue.step_size is None:
        step = find_reasonable_step_size(
            lambda x: potential_fn(x, data),
            _kinetic,
            momentum_generator,
            jnp.ones((), f64),
            inv_mass,
            (z, None, pe, grad),
            k_ss,
        )
    else:
        step = queue.step_size[t]
    mm_init = _welford(dense)[0]
    ss = _SS_INIT(jnp.log(10.0 * step))
    adapt = _Adapt(step, inv_mass, mass_sqrt, ss, mm_init(d), jnp.zeros((), jnp.int32))
    return lane._replace(
        it=jnp.zeros((), jnp.int32),
        key=jax.random.bits(k_words, (2,), jnp.uint32),
        n_step=jnp.zeros((), jnp.int32),
        data=data,
        z=z,
        pe=pe,
        grad=grad,
        adapt=adapt,
        fresh=jnp.array(True),
        start=jnp.array(False),
        pending_window=jnp.array(False),
    )


def _take_next_chains(
    lanes: _Lane, next_task: jax.Array, n_iter: int, n_tasks: int, n_valid: jax.Array
) -> tuple[_Lane, jax.Array]:
    """Lanes whose chain has done its ``n_iter`` iterations take the next chains of the queue.

    A lane left without a chain gets task ``n_tasks`` (idle); ``start`` marks the lanes
    whose new chain needs initialising.
    """
    free = (lanes.it >= n_iter) & (lanes.task < n_valid)
    rank = jnp.cumsum(free, dtype=jnp.int32) - 1
    new_task = jnp.where(free, next_task + rank, lanes.task)
    new_task = jnp.where(free & (new_task >= n_valid), n_tasks, new_task).astype(jnp.int32)
    lanes = lanes._replace(task=new_task, start=free & (new_task < n_valid))
    return lanes, next_task + jnp.sum(free, dtype=jnp.int32)


def sample_queue(
    potential_fn: Callable[[jax.Array, Any], jax.Array],
    settings: NutsSettings,
    task_keys: jax.Array,
    task_z0: jax.Array,
    task_data: Any,
    n_valid: jax.Array,
    *,
    step_size: jax.Array | float | None = None,
    inverse_mass_matrix: jax.Array | None = None,
) -> dict[str, jax.Array]:
    """Run NUTS on a queue of chains with ``settings.n_lanes`` lanes.

    By default each chain starts from NumPyro's step-size search (``find_reasonable_step_size``)
    and a unit mass matrix, and adapts both during its ``settings.num_warmup`` iterations.
    Given ``step_size`` and ``inverse_mass_matrix`` and ``num_warmup=0``, every iteration
    is a plain NUTS transition with that fixed step size and mass matrix.

    Parameters
    ----------
    potential_fn : callable
        ``potential_fn(z, data)``: the negative log density of one chain's posterior at
        ``z`` (shape ``(d,)``), ``data`` that chain's entry of ``task_data``.
    settings : NutsSettings
    task_keys : jax.Array
        Typed PRNG keys, shape ``(n_tasks,)``: chain ``t`` uses only ``task_keys[t]``.
    task_z0 : jax.Array
        Initial points, shape ``(n_tasks, d)``.
    task_data : pytree
        Each chain's data, leading axis ``n_tasks``.
    n_valid : jax.Array
        Chains ``n_valid`` and later are padding and are not run (their outputs are zero).
    step_size : float or jax.Array, optional
        Each chain's initial step size: a scalar, or shape ``(n_tasks,)``. The search is
        then skipped; during warm-up dual averaging starts from it (as from the searched
        one). ``None`` (default): searched.
    inverse_mass_matrix : jax.Array, optional
        Each chain's initial inverse mass matrix: shape ``(d, d)`` if
        ``settings.dense_mass`` else ``(d,)`` (a diagonal), optionally with a leading
        ``n_tasks`` axis. It is used until the first slow warm-up window ends (for ever
        with ``num_warmup=0``). ``None`` (default): the identity.

    Returns
    -------
    dict
        Arrays with leading axes ``(n_tasks, num_samples)``: ``z``, ``pe`` (potential
        energy), ``diverging``, ``num_steps``, ``accept_prob``, ``energy``; and
        ``step_size``, shape ``(n_tasks,)``, the adapted step size; ``ticks``, the
        number of leapfrog ticks the loop ran (its cost); ``busy``, the lane-ticks
        spent on a chain (``busy / (ticks * n_lanes)`` is the share of the lanes kept
        busy: the rest is the tail, lanes idle while the last chains finish).
    """
    W, S, L = settings.num_warmup, settings.num_samples, settings.n_lanes
    n_tasks, d = task_z0.shape
    f64 = task_z0.dtype
    queue = _Queue(
        jax.random.key_data(task_keys),
        jax.random.key_impl(task_keys),
        task_z0,
        task_data,
        n_valid,
        **_initial_step_and_mass(step_size, inverse_mass_matrix, settings, n_tasks, d, f64),
    )
    schedule = jnp.asarray(build_adaptation_schedule(W) if W > 0 else [(0, 0)], jnp.int32)

    def init_chain(lane: _Lane) -> _Lane:
        return _where(lane.start, _init_chain(lane, potential_fn, queue, settings.dense_mass), lane)

    def window_end(lane: _Lane) -> _Lane:
        adapt = _window_end(lane.adapt, settings.dense_mass)
        return _where(lane.pending_window, lane._replace(adapt=adapt, pending_window=jnp.array(False)), lane)

    def new_trajectories(lanes: _Lane) -> _Lane:
        return jax.vmap(lambda lane: _new_trajectory(lane, n_valid))(lanes)

    def tick(carry):
        lanes, out, next_task, ticks, busy = carry
        busy = busy + jnp.sum(lanes.task < n_valid, dtype=jnp.int32)
        lanes, record, write, slot = jax.vmap(
            lambda x: _advance(x, potential_fn, settings, schedule, n_valid)
        )(lanes)
        row = jnp.where(write, lanes.task, n_tasks)  # out of range: dropped
        out = jax.lax.cond(
            jnp.any(write),
            lambda o: (
                o[0].at[row, slot].set(record, mode="drop"),
                o[1].at[row].set(lanes.adapt.step_size, mode="drop"),
            ),
            lambda o: o,
            out,
        )
        lanes, next_task = _take_next_chains(lanes, next_task, W + S, n_tasks, n_valid)
        # window ends and chain starts are rare: each inside a lax.cond over the whole tick
        lanes = jax.lax.cond(jnp.any(lanes.pending_window), jax.vmap(window_end), lambda ls: ls, lanes)
        lanes = jax.lax.cond(jnp.any(lanes.start), jax.vmap(init_chain), lambda ls: ls, lanes)
        return new_trajectories(lanes), out, next_task, ticks + 1, busy

    def running(carry):
        return jnp.any(carry[0].task < n_valid)

    # lane i starts on chain i (or idles)
    proto = _prototype_lane(d, settings, f64)
    proto = proto._replace(data=jax.tree.map(lambda x: jnp.zeros_like(x[0]), task_data))
    lanes = jax.tree.map(lambda x: jnp.broadcast_to(x, (L,) + x.shape), proto)
    first_tasks = jnp.arange(L, dtype=jnp.int32)
    lanes = lanes._replace(
        task=jnp.where(first_tasks < n_valid, first_tasks, n_tasks).astype(jnp.int32),
        start=first_tasks < n_valid,
    )
    lanes = new_trajectories(jax.vmap(init_chain)(lanes))
    out = (jnp.zeros((n_tasks, S, d + 5), f64), jnp.zeros((n_tasks,), f64))
    next_task = jnp.minimum(jnp.asarray(L, jnp.int32), n_valid.astype(jnp.int32))
    zero = jnp.zeros((), jnp.int32)
    _, (rows, step_size), _, ticks, busy = jax.lax.while_loop(
        running, tick, (lanes, out, next_task, zero, zero)
    )
    return {
        "z": rows[..., :d],
        "pe": rows[..., d],
        "diverging": rows[..., d + 1] > 0.5,
        "num_steps": rows[..., d + 2].astype(jnp.int32),
        "accept_prob": rows[..., d + 3],
        "energy": rows[..., d + 4],
        "step_size": step_size,
        "ticks": ticks,
        "busy": busy,
    }


def _initial_step_and_mass(
    step_size: jax.Array | float | None,
    inverse_mass_matrix: jax.Array | None,
    settings: NutsSettings,
    n_tasks: int,
    d: int,
    f64,
) -> dict[str, jax.Array | None]:
    """The ``step_size``, ``inv_mass`` and ``mass_sqrt`` fields of :class:`_Queue`, one per chain."""
    out: dict[str, jax.Array | None] = {"step_size": None, "inv_mass": None, "mass_sqrt": None}
    if step_size is not None:
        step = jnp.asarray(step_size, f64)
        if step.shape not in ((), (n_tasks,)):
            raise ValueError(f"step_size must be a scalar or have shape ({n_tasks},), not {step.shape}")
        out["step_size"] = jnp.broadcast_to(step, (n_tasks,))
    if inverse_mass_matrix is not None:
        inv = jnp.asarray(inverse_mass_matrix, f64)
        core = (d, d) if settings.dense_mass else (d,)
        if inv.shape not in (core, (n_tasks,) + core):
            kind = "dense" if settings.dense_mass else "diagonal"
            raise ValueError(
                f"inverse_mass_matrix ({kind} mass) must have shape {core} or {(n_tasks,) + core}, "
                f"not {inv.shape}"
            )
        inv = jnp.broadcast_to(inv, (n_tasks,) + core)
        out["inv_mass"] = inv
        # NumPyro's mass_matrix_sqrt for a given inverse mass matrix
        out["mass_sqrt"] = cholesky_of_inverse(inv) if settings.dense_mass else jnp.reciprocal(jnp.sqrt(inv))
    return out


def _prototype_lane(d: int, settings: NutsSettings, f64) -> _Lane:
    """A placeholder lane (every field with its shape and dtype)."""
    zero = jnp.zeros((), f64)
    zd = jnp.zeros(d, f64)
    mass = jnp.eye(d, dtype=f64) if settings.dense_mass else jnp.ones(d, f64)
    tree = _leaf_tree(zd, zd, zero, zd, zero, zero, jnp.array(False), zero)
    return _Lane(
        task=jnp.zeros((), jnp.int32),
        it=jnp.zeros((), jnp.int32),
        key=jnp.zeros((2,), jnp.uint32),
        n_step=jnp.zeros((), jnp.int32),
        data=None,
        z=zd,
        pe=zero,
        grad=zd,
        adapt=_Adapt(
            zero, mass, mass, _SS_INIT(zero), _welford(settings.dense_mass)[0](d), jnp.zeros((), jnp.int32)
        ),
        energy0=zero,
        tree=tree,
        depth=jnp.zeros((), jnp.int32),
        tree_turning=jnp.array(False),
        sub=tree,
        r_ckpts=jnp.zeros((settings.max_tree_depth, d), f64),
        r_sum_ckpts=jnp.zeros((settings.max_tree_depth, d), f64),
        right=jnp.array(False),
        pending_window=jnp.array(False),
        fresh=jnp.array(False),
        start=jnp.array(False),
    )
