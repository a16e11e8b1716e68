"""Batched NUTS: every chain of every run in one compiled call.

The functional core is NumPyro's :func:`numpyro.infer.hmc.hmc` (``init_kernel`` /
``sample_kernel``) with a ``potential_fn_gen`` that takes one run's data, so one
compiled program serves every run: chains and runs are flattened into "lanes" and
``jax.vmap`` runs them side by side, each lane with its own step size and diagonal
mass matrix adapted in its own warm-up. Shapes are bucketed (runs to a power of two
up to ``chunk_size``, points to a multiple of 8) so a new data set of a similar size
reuses the compiled program instead of tracing again.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, PartitionSpec
from numpyro.infer.hmc import hmc

from .model import RunData, constrain, draw_A, log_density, make_run_data, n_dim
from .priors import Priors

__all__ = ["SamplerConfig", "Draws", "sample_window", "trace_count"]

_TRACES = {"sampler": 0}


def trace_count() -> int:
    """How many times the batched sampler has been traced (compiled) in this process."""
    return _TRACES["sampler"]


class SamplerConfig(NamedTuple):
    """Static settings of the sampler (a change compiles a new program).

    Attributes
    ----------
    num_chains, num_warmup, num_samples : int
        Chains per run, warm-up iterations and kept draws per chain.
    target_accept : float
        Target acceptance probability of the step-size adaptation (0.99: the
        ``A <= 1`` wall of weakly identified runs needs small steps).
    max_tree_depth : int
        Cap on NUTS tree depth (2**depth leapfrog steps at most per iteration).
    dense_mass : bool
        Adapt a dense mass matrix per lane.
    group_size : int
        Runs advanced in lock-step by ``jax.vmap``; groups run one after another
        (``jax.lax.map``) inside the same compiled call. Vmapped lanes wait for the
        slowest lane's tree at every iteration, so small groups waste less.
    """

    num_chains: int = 4
    num_warmup: int = 500
    num_samples: int = 500
    target_accept: float = 0.99
    max_tree_depth: int = 8
    dense_mass: bool = True
    group_size: int = 16


class Draws(NamedTuple):
    """Raw sampler output with shape (run, chain, draw[, dim]) in NumPy."""

    z: np.ndarray
    A: np.ndarray
    B: np.ndarray
    C_mid: np.ndarray
    sigma: np.ndarray
    R0: np.ndarray
    diverging: np.ndarray
    num_steps: np.ndarray
    accept_prob: np.ndarray
    energy: np.ndarray
    lp: np.ndarray
    step_size: np.ndarray  # (run, chain)


@functools.lru_cache(maxsize=32)
def _compiled_sampler(priors: Priors, config: SamplerConfig, n_devices: int) -> Callable:
    """One jit-compiled batched sampler per (priors, config, device count).

    It takes arrays with a leading group axis (split over ``n_devices`` devices) and a
    lane axis (runs x chains of one group).
    """

    def potential_gen(data: RunData):
        return lambda z: -log_density(z, data, priors)

    init_kernel, sample_kernel = hmc(potential_fn_gen=potential_gen, algo="NUTS")

    def one_lane(key: jax.Array, z0: jax.Array, data: RunData):
        k_init, k_a = jax.random.split(key)
        state = init_kernel(
            z0,
            config.num_warmup,
            target_accept_prob=config.target_accept,
            max_tree_depth=config.max_tree_depth,
            dense_mass=config.dense_mass,
            model_args=(data,),
            rng_key=k_init,
        )

        def warm(_, s):
            return sample_kernel(s, model_args=(data,))

        state = jax.lax.fori_loop(0, config.num_warmup, warm, state)

        def draw(s, _):
            s = sample_kernel(s, model_args=(data,))
            out = (s.z, s.diverging, s.num_steps, s.accept_prob, s.energy, -s.potential_energy)
            return s, out

        state, (z, div, steps, acc, energy, lp) = jax.lax.scan(draw, state, None, length=config.num_samples)
        A = draw_A(k_a, z, data, priors)
        p = constrain(z, data, priors)
        return (z, A, p.B, p.C_mid, p.sigma, p.R0, div, steps, acc, energy, lp, state.adapt_state.step_size)

    def per_device(keys: jax.Array, z0: jax.Array, lanes: RunData):
        # leading axis: groups on this device; each group is one vmapped batch of lanes
        _TRACES["sampler"] += 1
        return jax.lax.map(lambda a: jax.vmap(one_lane)(*a), (keys, z0, lanes))

    # one code path for any device count (a plain jit compiles to slightly different
    # floating-point code, and chains amplify last-bit differences)
    mesh = Mesh(np.array(jax.local_devices()[:n_devices]), ("device",))
    spec = PartitionSpec("device")
    # numpyro's NUTS mixes device-varying and replicated values in lax.cond branches
    return jax.jit(jax.shard_map(per_device, mesh=mesh, in_specs=spec, out_specs=spec, check_vma=False))


def _layout(n: int, chunk_size: int, group_size: int, n_devices: int) -> tuple[int, int, int]:
    """Bucketed run count, runs per group and devices used for a chunk of ``n`` runs.

    The run count is the smallest power of two >= n (at least 4) capped at
    ``chunk_size``; groups hold ``min(group_size, that)`` runs whatever the device
    count, so every group computes the same thing on any device, and the number of
    groups is padded to a multiple of the devices used (a power of two).
    """
    size = min(chunk_size, max(4, 1 << (n - 1).bit_length()))
    gsize = min(group_size, size)
    n_groups = -(-size // gsize)
    devices = 1
    while devices * 2 <= n_devices:
        devices *= 2
    n_groups = devices * -(-n_groups // devices)
    return n_groups * gsize, gsize, devices


def sample_window(
    key: jax.Array,
    window,
    priors: Priors,
    config: SamplerConfig = SamplerConfig(),
    *,
    chunk_size: int = 512,
    progress: bool | None = None,
    n_devices: int | None = None,
) -> Draws:
    """Sample every run of a :class:`~bayes_scalerl.data.FitWindow`.

    Runs are cut into chunks of at most ``chunk_size``; each chunk is padded (with
    copies of its first run, whose draws are discarded) to a bucketed size so that
    chunks of any size below it reuse one compiled program.

    Parameters
    ----------
    key : jax.Array
        PRNG key; chunk ``i`` uses ``fold_in(key, i)``.
    window : FitWindow
        Padded data from :meth:`Runs.window`.
    priors : Priors
    config : SamplerConfig
    chunk_size : int
        Most runs per compiled call (bounds memory).
    progress : bool, optional
        Show a progress bar over chunks (default: when there is more than one chunk).
    n_devices : int, optional
        Local devices to spread groups over (default: all; on a CPU set
        ``XLA_FLAGS=--xla_force_host_platform_device_count=N`` before importing JAX to
        use N cores). Results do not depend on it.

    Returns
    -------
    Draws
    """
    n_runs, n_points = window.reward.shape
    width = max(8, 8 * math.ceil(n_points / 8))
    pad_p = width - n_points

    def pad_points(a, fill_last=True):
        if pad_p == 0:
            return a
        tail = np.repeat(a[:, -1:], pad_p, axis=1) if fill_last else np.zeros((a.shape[0], pad_p), a.dtype)
        return np.concatenate([a, tail], axis=1)

    compute = pad_points(window.compute)
    reward = pad_points(window.reward)
    mask = pad_points(window.mask, fill_last=False)
    d = n_dim(priors)
    n_dev = len(jax.local_devices()) if n_devices is None else int(n_devices)
    chunks = [(s, min(s + chunk_size, n_runs)) for s in range(0, n_runs, chunk_size)]
    show = (len(chunks) > 1) if progress is None else progress
    bar = None
    if show:
        from tqdm.auto import tqdm

        bar = tqdm(total=n_runs, unit="run", desc="NUTS")
    outs = []
    for i, (lo, hi) in enumerate(chunks):
        size, gsize, devices = _layout(hi - lo, chunk_size, config.group_size, n_dev)
        idx = np.concatenate([np.arange(lo, hi), np.full(size - (hi - lo), lo)])
        data = make_run_data(compute[idx], reward[idx], mask[idx], window.R0[idx], window.c_ref[idx], priors)
        # randomness is drawn per run, before the layout, so it does not depend on the devices
        k_init, k_run = jax.random.split(jax.random.fold_in(key, i))
        c = config.num_chains
        z0 = jax.random.uniform(k_init, (size * c, d), minval=-2.0, maxval=2.0)
        keys = jax.random.split(k_run, size * c)
        lanes = jax.tree_util.tree_map(lambda x, c=c: jnp.repeat(x, c, axis=0), data)

        def grouped(x, gsize=gsize, c=c):  # (run * chain, ...) -> (group, gsize * chain, ...)
            return x.reshape((-1, gsize * c) + x.shape[1:])

        res = _compiled_sampler(priors, config, devices)(
            grouped(keys), grouped(z0), jax.tree_util.tree_map(grouped, lanes)
        )
        n_real = hi - lo
        res = jax.tree_util.tree_map(
            lambda x, n_real=n_real, size=size, c=c: np.asarray(x).reshape((size, c) + x.shape[2:])[:n_real],
            res,
        )
        outs.append(res)
        if bar is not None:
            bar.update(hi - lo)
    if bar is not None:
        bar.close()
    merged = [np.concatenate([o[j] for o in outs], axis=0) for j in range(len(outs[0]))]
    return Draws(*merged)
