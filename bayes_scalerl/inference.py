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
        Target acceptance probability of the step-size adaptation.
    max_tree_depth : int
        Cap on NUTS tree depth (2**depth leapfrog steps at most per iteration).
    """

    num_chains: int = 4
    num_warmup: int = 500
    num_samples: int = 500
    target_accept: float = 0.8
    max_tree_depth: int = 8
    dense_mass: bool = True


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
def _compiled_sampler(priors: Priors, config: SamplerConfig) -> Callable:
    """One jit-compiled batched sampler per (priors, config)."""

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

    def batched(key: jax.Array, z0: jax.Array, data: RunData):
        _TRACES["sampler"] += 1
        n_runs = data.y.shape[0]
        c = config.num_chains
        keys = jax.random.split(key, n_runs * c)
        lanes = jax.tree_util.tree_map(lambda x: jnp.repeat(x, c, axis=0), data)
        out = jax.vmap(one_lane)(keys, z0.reshape(n_runs * c, -1), lanes)
        return jax.tree_util.tree_map(lambda x: x.reshape((n_runs, c) + x.shape[1:]), out)

    return jax.jit(batched)


def _bucket(n: int, chunk_size: int) -> int:
    """Smallest power of two >= n (at least 4), capped at ``chunk_size``."""
    return min(chunk_size, max(4, 1 << (n - 1).bit_length()))


def sample_window(
    key: jax.Array,
    window,
    priors: Priors,
    config: SamplerConfig = SamplerConfig(),
    *,
    chunk_size: int = 512,
    progress: bool | None = None,
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
    chunks = [(s, min(s + chunk_size, n_runs)) for s in range(0, n_runs, chunk_size)]
    show = (len(chunks) > 1) if progress is None else progress
    bar = None
    if show:
        from tqdm.auto import tqdm

        bar = tqdm(total=n_runs, unit="run", desc="NUTS")
    outs = []
    for i, (lo, hi) in enumerate(chunks):
        size = _bucket(hi - lo, chunk_size)
        idx = np.concatenate([np.arange(lo, hi), np.full(size - (hi - lo), lo)])
        data = make_run_data(compute[idx], reward[idx], mask[idx], window.R0[idx], window.c_ref[idx], priors)
        k_chunk = jax.random.fold_in(key, i)
        k_init, k_run = jax.random.split(k_chunk)
        z0 = jax.random.uniform(k_init, (size, config.num_chains, d), minval=-2.0, maxval=2.0)
        res = _compiled_sampler(priors, config)(k_run, z0, data)
        n_real = hi - lo
        res = jax.tree_util.tree_map(lambda x, n_real=n_real: np.asarray(x)[:n_real], res)
        outs.append(res)
        if bar is not None:
            bar.update(hi - lo)
    if bar is not None:
        bar.close()
    merged = [np.concatenate([o[j] for o in outs], axis=0) for j in range(len(outs[0]))]
    return Draws(*merged)
