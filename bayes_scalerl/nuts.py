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
    """Standard normals from two 32-bit words each (53 random bits, never 0 or 1)."""
    u = (hi >> jnp.uint32(5)).astype(dtype) * 2.0**26 + (lo >> jnp.uint32(6)).astype(dtype)
    return jax.scipy.special.ndtri((u + 0.5) * 2.0**-53)


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


def sample_queue(
    potential_fn: Callable[[jax.Array, Any], jax.Array],
    settings: NutsSettings,
    task_keys: jax.Array,
    task_z0: jax.Array,
    task_data: Any,
    n_valid: jax.Array,
) -> dict[str, jax.Array]:
    """Run NUTS on a queue of chains with ``settings.n_lanes`` lanes.

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
    impl = jax.random.key_impl(task_keys)
    task_kd = jax.random.key_data(task_keys)
    f64 = task_z0.dtype

    schedule = jnp.asarray(build_adaptation_schedule(W) if W > 0 else [(0, 0)], jnp.int32)
    n_windows = schedule.shape[0]
    ss_init, ss_update = dual_averaging()
    mm_init, mm_update, mm_final = welford_covariance(diagonal=not settings.dense_mass)

    def wrap(kd):
        return jax.random.wrap_key_data(kd, impl=impl)

    def kinetic(inv_mass, r):
        return euclidean_kinetic_energy(inv_mass, r)

    def pe_and_grad(z, data):
        return jax.value_and_grad(potential_fn)(z, data)

    def step_search(step_size, adapt_inv_mass, z, pe, grad, data, key):
        return find_reasonable_step_size(
            lambda x: potential_fn(x, data),
            kinetic,
            momentum_generator,
            step_size,
            adapt_inv_mass,
            (z, None, pe, grad),
            key,
        )

    def lane_data(task):
        return jax.tree.map(lambda x: x[jnp.minimum(task, n_tasks - 1)], task_data)

    # ---- chain start (rare: inside a lax.cond over the whole tick)
    def init_chain(lane: _Lane) -> _Lane:
        t = jnp.minimum(lane.task, n_tasks - 1)
        data = lane_data(t)
        z = task_z0[t]
        pe, grad = pe_and_grad(z, data)
        k_words, k_ss = jax.random.split(wrap(task_kd[t]))
        eye = jnp.eye(d, dtype=f64) if settings.dense_mass else jnp.ones(d, f64)
        step = step_search(jnp.ones((), f64), eye, z, pe, grad, data, k_ss)
        adapt = _Adapt(step, eye, eye, ss_init(jnp.log(10.0 * step)), mm_init(d), jnp.zeros((), jnp.int32))
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

    # ---- window end (rare)
    def window_end(lane: _Lane) -> _Lane:
        # the new mass matrix; dual averaging restarts from 10x the current step size
        # (NumPyro and Stan also search for a new step size here: measured, it cost more
        # than it saved, as dual averaging finds the step size within a few iterations)
        a = lane.adapt
        inv_mass, mass_sqrt, _ = mm_final(a.mm, regularize=True)
        adapt = a._replace(
            inv_mass=inv_mass,
            mass_sqrt=mass_sqrt,
            ss=ss_init(jnp.log(10.0) + jnp.log(a.step_size)),
            mm=mm_init(d),
        )
        return lane._replace(adapt=adapt, pending_window=jnp.array(False))

    # ---- new trajectory (every tick, for the lanes that need one)
    def new_trajectory(lane: _Lane) -> _Lane:
        # the randomness of a trajectory started after step n_step: streams 1..d+1
        hi, lo = _counter_words(lane.key, jnp.arange(1, d + 2, dtype=jnp.uint32), lane.n_step)
        eps = _std_normal(hi[:d], lo[:d], f64)
        r = _times(lane.adapt.mass_sqrt, eps)  # numpyro's momentum_generator, on these normals
        energy0 = lane.pe + kinetic(lane.adapt.inv_mass, r)
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

    # ---- one leapfrog step and its bookkeeping (every tick)
    def advance(lane: _Lane):
        a = lane.adapt
        # this step's randomness: two 32-bit words, stream 0 at counter n_step
        word = jnp.stack(_counter_words(lane.key, jnp.zeros((), jnp.uint32), lane.n_step))
        u = (word >> 8).astype(f64) * 2.0**-24  # two uniforms on [0, 1) with 24 bits
        go_right = (word[0] & 1) == 1  # the direction of a new subtree: the word's lowest bit
        sub, tree, right = lane.sub, lane.tree, lane.right
        first = sub.n_prop == 0
        z, r, g = (
            jnp.where(first, jnp.where(right, tr, tl), jnp.where(right, sr, sl))
            for tl, tr, sl, sr in (
                (tree.z_left, tree.z_right, sub.z_left, sub.z_right),
                (tree.r_left, tree.r_right, sub.r_left, sub.r_right),
                (tree.g_left, tree.g_right, sub.g_left, sub.g_right),
            )
        )
        step = jnp.where(right, a.step_size, -a.step_size)
        _, vv_update = velocity_verlet(lambda x: potential_fn(x, lane.data), kinetic)
        z1, r1, pe1, g1 = vv_update(step, a.inv_mass, (z, r, lane.pe, g))
        energy1 = pe1 + kinetic(a.inv_mass, r1)
        delta = energy1 - lane.energy0
        delta = jnp.where(jnp.isnan(delta), jnp.inf, delta)
        w1 = -delta
        div1 = delta > _MAX_DELTA_ENERGY
        acc1 = jnp.minimum(1.0, jnp.exp(-delta))

        # grow the subtree by the leaf (uniform multinomial sampling inside it)
        take = first | (u[0] < jax.nn.sigmoid(w1 - sub.weight))
        keep_l = ~first & right  # the subtree's left edge stays
        keep_r = ~first & ~right  # its right edge stays
        sub = _Tree(
            jnp.where(keep_l, sub.z_left, z1),
            jnp.where(keep_l, sub.r_left, r1),
            jnp.where(keep_l, sub.g_left, g1),
            jnp.where(keep_r, sub.z_right, z1),
            jnp.where(keep_r, sub.r_right, r1),
            jnp.where(keep_r, sub.g_right, g1),
            jnp.where(take, z1, sub.z_prop),
            jnp.where(take, pe1, sub.pe_prop),
            jnp.where(take, g1, sub.g_prop),
            jnp.where(take, energy1, sub.energy_prop),
            jnp.where(first, w1, jnp.logaddexp(sub.weight, w1)),
            jnp.where(first, r1, sub.r_sum + r1),
            div1,
            jnp.where(first, acc1, sub.sum_accept + acc1),
            sub.n_prop + 1,
        )

        # iterative no-U-turn check against the checkpoints
        n = sub.n_prop - 1  # index of this leaf in the subtree
        i_min, i_max = _ckpt_range(n)
        even = n % 2 == 0
        r_ckpts = jnp.where(even, lane.r_ckpts.at[i_max].set(r1), lane.r_ckpts)
        r_sum_ckpts = jnp.where(even, lane.r_sum_ckpts.at[i_max].set(sub.r_sum), lane.r_sum_ckpts)
        idx = jnp.arange(settings.max_tree_depth)
        in_range = (idx >= i_min) & (idx <= i_max)
        v1 = _times(a.inv_mass, r1)
        vc = r_ckpts @ a.inv_mass.T if a.inv_mass.ndim == 2 else r_ckpts * a.inv_mass
        rs = sub.r_sum[None, :] - r_sum_ckpts + 0.5 * r_ckpts - 0.5 * r1[None, :]
        turns = (jnp.sum(vc * rs, axis=1) <= 0) | (rs @ v1 <= 0)
        sub_turning = jnp.any(turns & in_range)
        sub_done = (sub.n_prop == (1 << lane.depth)) | sub_turning | sub.diverging

        # merge a finished subtree into the tree (biased progressive sampling)
        r_sum = tree.r_sum + sub.r_sum
        p = jnp.where(sub_turning | sub.diverging, 0.0, jnp.exp(jnp.minimum(0.0, sub.weight - tree.weight)))
        move = sub_done & (u[1] < p)
        ext_r = sub_done & right  # the tree's right edge moves to the subtree's
        ext_l = sub_done & ~right
        tree = _Tree(
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
        turning = sub_turning | _is_turning(a.inv_mass, tree.r_left, tree.r_right, tree.r_sum)
        depth = jnp.where(sub_done, lane.depth + 1, lane.depth)
        tree_turning = jnp.where(sub_done, turning, lane.tree_turning)
        done = sub_done & ((depth >= settings.max_tree_depth) | tree_turning | tree.diverging)
        # a finished subtree: the next one starts empty, in a random direction
        sub = sub._replace(n_prop=jnp.where(sub_done, 0, sub.n_prop))
        right = jnp.where(sub_done, go_right, right)

        # the transition, statistics and adaptation of a finished iteration
        accept = tree.sum_accept / jnp.maximum(tree.n_prop, 1)
        warm = lane.it < W
        ss = ss_update(settings.target_accept - accept, a.ss)
        log_step, log_step_avg = ss[0], ss[1]
        new_step = jnp.exp(jnp.where(lane.it == W - 1, log_step_avg, log_step))
        finfo = jnp.finfo(f64)
        new_step = jnp.clip(new_step, finfo.tiny, finfo.max)
        middle = (a.window > 0) & (a.window < n_windows - 1)
        adapting = done & warm
        mm = _where(adapting & middle, mm_update(tree.z_prop, a.mm), a.mm)
        at_end = lane.it == schedule[jnp.minimum(a.window, n_windows - 1), 1]
        adapt = _Adapt(
            jnp.where(adapting, new_step, a.step_size),
            a.inv_mass,
            a.mass_sqrt,
            _where(adapting, ss, a.ss),
            mm,
            jnp.where(adapting & at_end, a.window + 1, a.window),
        )
        # one row per draw: z, potential energy, diverging, steps, acceptance, energy
        record = jnp.concatenate(
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
        write = done & ~warm & (lane.task < n_valid)
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
            pending_window=adapting & at_end & middle,
            fresh=done,
        )
        return new, record, write, lane.it - W

    # ---- the loop
    def tick(carry):
        lanes, out, next_task, ticks, busy = carry
        busy = busy + jnp.sum(lanes.task < n_valid, dtype=jnp.int32)
        lanes, record, write, slot = jax.vmap(advance)(lanes)
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

        # lanes whose chain is finished take the next chains of the queue
        free = (lanes.it >= W + S) & (lanes.task < n_valid)
        rank = jnp.cumsum(free, dtype=jnp.int32) - 1
        new_task = jnp.where(free, next_task + rank, lanes.task)
        new_task = jnp.where(free & (new_task >= n_valid), n_tasks, new_task).astype(jnp.int32)
        lanes = lanes._replace(task=new_task, start=free & (new_task < n_valid))
        next_task = next_task + jnp.sum(free, dtype=jnp.int32)
        lanes = jax.lax.cond(
            jnp.any(lanes.pending_window),
            jax.vmap(lambda x: _where(x.pending_window, window_end(x), x)),
            lambda ls: ls,
            lanes,
        )
        lanes = jax.lax.cond(
            jnp.any(lanes.start), jax.vmap(lambda x: _where(x.start, init_chain(x), x)), lambda ls: ls, lanes
        )
        lanes = jax.vmap(new_trajectory)(lanes)
        return lanes, out, next_task, ticks + 1, busy

    def running(carry):
        return jnp.any(carry[0].task < n_valid)

    # lane i starts on chain i (or idles)
    proto = _prototype_lane(task_kd, task_z0, settings, f64, mm_init, ss_init)
    proto = proto._replace(data=jax.tree.map(lambda x: jnp.zeros_like(x[0]), task_data))
    lanes = jax.tree.map(lambda x: jnp.broadcast_to(x, (L,) + x.shape), proto)
    first_tasks = jnp.arange(L, dtype=jnp.int32)
    lanes = lanes._replace(
        task=jnp.where(first_tasks < n_valid, first_tasks, n_tasks).astype(jnp.int32),
        start=first_tasks < n_valid,
    )
    lanes = jax.vmap(new_trajectory)(jax.vmap(lambda x: _where(x.start, init_chain(x), x))(lanes))
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


def _prototype_lane(task_kd, task_z0, settings, f64, mm_init, ss_init) -> _Lane:
    """A placeholder lane (every field with its shape and dtype)."""
    d = task_z0.shape[1]
    zero = jnp.zeros((), f64)
    zd = jnp.zeros(d, f64)
    mass = jnp.eye(d, dtype=f64) if settings.dense_mass else jnp.ones(d, f64)
    tree = _leaf_tree(zd, zd, zero, zd, zero, zero, jnp.array(False), zero)
    ss = ss_init(zero)
    return _Lane(
        task=jnp.zeros((), jnp.int32),
        it=jnp.zeros((), jnp.int32),
        key=jnp.zeros((2,), jnp.uint32),
        n_step=jnp.zeros((), jnp.int32),
        data=None,
        z=zd,
        pe=zero,
        grad=zd,
        adapt=_Adapt(zero, mass, mass, ss, mm_init(d), jnp.zeros((), jnp.int32)),
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
