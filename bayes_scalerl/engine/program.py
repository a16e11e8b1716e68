"""The compiled group program: every chain of a group of runs, for any model.

``program(key_data, inputs)`` takes the base PRNG key's data and a dict of arrays with a
leading run axis of the group size (``run_index``, ``valid``, and the model's inputs:
``compute``, ``reward``, ``mask``, ``R0``, ``c_ref``, ``n_eval``). It returns a dict of
arrays of shape (run, chain, draw) holding the model's named draws (its
:meth:`~bayes_scalerl.models.base.BatchedModel.report`) and the sampler statistics
(``diverging``, ``num_steps``, ``accept_prob``, ``energy``, ``lp``; ``step_size`` of
shape (run, chain)).

Each run's randomness is ``fold_in(key, run_index)``: its chains' start points and keys
come from it, and the lane-queue sampler advances each chain's counter only by that
chain's own steps, so a run's draws depend on the seed, its data, the model and the
sampler settings only.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from .nuts import NutsSettings, sample_queue

__all__ = ["SamplerConfig", "STATS", "compiled_program", "trace_count"]

_TRACES = {"program": 0}

#: Sampler statistics every program returns beside the model's draws.
STATS = ("diverging", "num_steps", "accept_prob", "energy", "lp", "step_size")


def trace_count() -> int:
    """How many times a group program has been traced in this process.

    A program is traced once per (model, sampler settings, group size, padded point
    count), whatever the number of devices it then runs on; a second data set of the
    same bucketed shape does not trace again.
    """
    return _TRACES["program"]


class SamplerConfig(NamedTuple):
    """Static settings of the sampler (a change compiles a new program).

    Attributes
    ----------
    chains, warmup, samples : int
        Chains per run, warm-up iterations and kept draws per chain (the names of
        :func:`~bayes_scalerl.fit` and the CLI).
    target_accept : float
        Target acceptance probability of the step-size adaptation.
    max_tree_depth : int
        Cap on NUTS tree depth (2**depth leapfrog steps at most per iteration).
    dense_mass : bool
        Adapt a dense mass matrix per chain.
    group_size : int or None
        Runs whose chains one call of the compiled program works through. ``None``
        (default): 64 on a CPU, ``chunk_size`` on a GPU/TPU.
    kernel : {"queue", "lockstep"}
        ``"queue"`` (default): :func:`~bayes_scalerl.engine.nuts.sample_queue`, lanes
        that each advance their own chain one leapfrog step per tick and take the
        group's next chain when theirs is done. ``"lockstep"``: NumPyro's
        ``sample_kernel`` vmapped over all chains of the group, every iteration as long
        as its deepest tree (a reference; slower).
    lanes : int or None
        Chains advanced side by side by the ``"queue"`` kernel. ``None`` (default): 64
        on a CPU, every chain of the group on a GPU/TPU.
    """

    chains: int = 4
    warmup: int = 500
    samples: int = 500
    target_accept: float = 0.9
    max_tree_depth: int = 8
    dense_mass: bool = True
    group_size: int | None = None
    kernel: str = "queue"
    lanes: int | None = None


def _run_start(model, key: jax.Array, data: Any, c: int, d: int) -> tuple[jax.Array, jax.Array]:
    """One run's chains: their keys and initial points."""
    k_init, k_run = jax.random.split(key)
    return jax.random.split(k_run, c), model.init(k_init, data, c, d)


def _setup(model, config: SamplerConfig, impl: str, key_data: jax.Array, inputs: dict):
    """Per-run keys, the model's data, initial points; lanes laid out run-major."""
    _TRACES["program"] += 1  # runs only while JAX traces
    c = config.chains
    key = jax.random.wrap_key_data(key_data, impl=impl)
    keys = jax.vmap(jax.random.fold_in, in_axes=(None, 0))(key, inputs["run_index"])
    data = model.data(inputs)
    d = model.n_dim(inputs["compute"].shape[-1])  # static at trace time
    lane_keys, z0 = jax.vmap(lambda k, dd: _run_start(model, k, dd, c, d))(keys, data)
    g = z0.shape[0]
    lanes = jax.tree_util.tree_map(lambda x: jnp.repeat(x, c, axis=0), data)
    return lane_keys.reshape(g * c), z0.reshape(g * c, d), lanes, g


@functools.lru_cache(maxsize=32)
def compiled_program(model, config: SamplerConfig, impl: str) -> Callable:
    """The jit-compiled program of one group of runs, per (model, config, key impl)."""
    c = config.chains

    def potential(z, data):
        return model.potential(z, data)

    def finish(out: dict, g: int) -> dict:
        return jax.tree_util.tree_map(lambda x: x.reshape((g, c) + x.shape[1:]), out)

    def group_queue(key_data: jax.Array, inputs: dict) -> dict:
        lane_keys, z0, tasks, g = _setup(model, config, impl, key_data, inputs)
        split = jax.vmap(jax.random.split)(lane_keys)
        k_nuts, k_report = split[:, 0], split[:, 1]
        lanes = config.lanes if config.lanes is not None else g * c
        settings = NutsSettings(
            config.warmup,
            config.samples,
            config.target_accept,
            config.max_tree_depth,
            config.dense_mass,
            int(min(lanes, g * c)),
        )
        n_valid = jnp.sum(inputs["valid"]).astype(jnp.int32) * c  # padding runs are not sampled
        raw = sample_queue(potential, settings, k_nuts, z0, tasks, n_valid)
        out = jax.vmap(model.report)(k_report, raw["z"], tasks)
        out.update(
            diverging=raw["diverging"],
            num_steps=raw["num_steps"],
            accept_prob=raw["accept_prob"],
            energy=raw["energy"],
            lp=-raw["pe"],
            step_size=raw["step_size"],
        )
        return finish(out, g)

    def group_lockstep(key_data: jax.Array, inputs: dict) -> dict:
        from numpyro.infer.hmc import hmc

        lane_keys, z0, tasks, g = _setup(model, config, impl, key_data, inputs)
        init_kernel, sample_kernel = hmc(
            potential_fn_gen=lambda data: lambda z: potential(z, data), algo="NUTS"
        )

        def one_lane(key: jax.Array, z_init: jax.Array, data) -> dict:
            k_init, k_report = jax.random.split(key)
            state = init_kernel(
                z_init,
                config.warmup,
                target_accept_prob=config.target_accept,
                max_tree_depth=config.max_tree_depth,
                dense_mass=config.dense_mass,
                model_args=(data,),
                rng_key=k_init,
            )
            state = jax.lax.fori_loop(
                0, config.warmup, lambda _, s: sample_kernel(s, model_args=(data,)), state
            )

            def draw(s, _):
                s = sample_kernel(s, model_args=(data,))
                return s, (s.z, s.diverging, s.num_steps, s.accept_prob, s.energy, -s.potential_energy)

            state, (z, div, steps, acc, energy, lp) = jax.lax.scan(draw, state, None, length=config.samples)
            out = model.report(k_report, z, data)
            out.update(
                diverging=div,
                num_steps=steps,
                accept_prob=acc,
                energy=energy,
                lp=lp,
                step_size=state.adapt_state.step_size,
            )
            return out

        # one vmap over run x chain lanes (a nested vmap traces twice as slowly)
        return finish(jax.vmap(one_lane)(lane_keys, z0, tasks), g)

    if config.kernel not in ("queue", "lockstep"):
        raise ValueError(f"kernel must be 'queue' or 'lockstep', got {config.kernel!r}")
    return jax.jit(group_queue if config.kernel == "queue" else group_lockstep)
