"""Batched NUTS: every chain of every run, in groups, on every local device.

The sampler is NUTS as NumPyro implements it, run by :mod:`bayes_scalerl.nuts`: one
jit-compiled **group program** works through the chains of ``group_size`` runs with
``lanes`` chains side by side, one leapfrog step per lane per tick, each lane at its own
place in its own trajectory, so a lane never waits for another lane's tree (vmapping
NumPyro's kernel instead made every iteration as long as the deepest tree of the group:
measured, 4 in 5 gradient evaluations were spent waiting). Each chain adapts its own
step size and dense mass matrix in its own warm-up. ``SamplerConfig(kernel="lockstep")``
runs NumPyro's own ``sample_kernel`` vmapped over the chains instead: same algorithm,
slower; the tests use it as a reference.

How a batch of runs is laid out:

- runs are cut into **chunks** of at most ``chunk_size`` (the unit of memory, of
  checkpointing and of hand-over to an executor); a chunk's draws are copied to NumPy
  as soon as it finishes, so device memory never holds more than a couple of chunks;
- a chunk is cut into **groups** of ``group_size`` runs (padded with copies of its first
  run, which are not sampled); every group runs the *same* compiled program, and
  groups are dispatched round-robin to the local devices (``jax.device_put`` to device
  ``d``; JAX's asynchronous dispatch keeps the devices busy at the same time);
- shapes are bucketed: the group size is ``min(group_size, 2**k)`` for the smallest
  ``2**k >= `` the chunk's run count (at least 4), points are padded to a multiple of 8,
  so a new data set of a similar size reuses the compiled program (:func:`trace_count`).

Each chain's randomness comes from ``fold_in(key, run_index)``, drawn inside the
program and advanced only by that chain's own steps, so a run's draws depend on the
seed, its data and the sampler settings only: not on the device it lands on, the number
of devices, the other runs of its group or chunk, the group size, the lane that runs it,
or the executor. (The number of lanes sets the width of every vectorised operation, so
it is part of the program: a width the CPU does not vectorise the same way, such as 3
lanes instead of 8 or 16, can change the last bits.) On one platform the same
arithmetic gives the same bits, so a fit on 1 or N devices, in one process or over Ray,
resumed from a checkpoint or not, gives the same draws (the tests check it bit for bit).

The persistent JAX compilation cache is switched on when this module is imported (see
:func:`set_compilation_cache`), so a second process loads the compiled program from
disk instead of compiling it again.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import math
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from numpyro.infer.hmc import hmc

from .model import RunData, constrain, draw_A, log_density, make_run_data, n_dim, refresh_sigma
from .nuts import NutsSettings, sample_queue
from .priors import Priors

__all__ = [
    "SamplerConfig",
    "Draws",
    "ChunkJob",
    "sample_window",
    "trace_count",
    "set_compilation_cache",
    "compilation_cache_dir",
    "CACHE_ENV",
]

logger = logging.getLogger(__name__)

#: Environment variable naming the persistent compilation cache folder ("" turns it off).
CACHE_ENV = "BAYES_SCALERL_CACHE_DIR"

_TRACES = {"sampler": 0}

#: Fields of :class:`Draws` the group program returns (R0 and rho only when they are parameters).
_FIELDS = (
    "z",
    "A",
    "B",
    "C_mid",
    "sigma",
    "R0",
    "rho",
    "diverging",
    "num_steps",
    "accept_prob",
    "energy",
    "lp",
    "step_size",
)


def trace_count() -> int:
    """How many times the group program has been traced in this process.

    A program is traced once per (priors, sampler settings, group size, padded point
    count), whatever the number of devices it then runs on; a second data set of the
    same bucketed shape does not trace again.
    """
    return _TRACES["sampler"]


# ---------------------------------------------------------------------------------------------
# persistent compilation cache


def _default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "bayes_scalerl" / "jax"


def compilation_cache_dir() -> str | None:
    """The folder of JAX's persistent compilation cache in use, or ``None`` when it is off."""
    if not jax.config.jax_enable_compilation_cache:
        return None
    return jax.config.jax_compilation_cache_dir or None


def set_compilation_cache(path: str | os.PathLike | None = "default") -> str | None:
    """Turn JAX's persistent compilation cache on (in ``path``) or off (``None`` or ``""``).

    Compiled programs that took at least a second to compile are written to ``path``
    (about 0.7 MB each, one per program and device; the folder can be deleted at any
    time) and loaded from there by later processes (and by Ray workers on the same
    machine), which skips the sampler's compilation (tens of seconds on a CPU). Importing
    ``bayes_scalerl`` calls this with the folder in the ``BAYES_SCALERL_CACHE_DIR``
    environment variable, or ``~/.cache/bayes_scalerl/jax`` (``$XDG_CACHE_HOME`` is
    honoured) when it is unset; an empty ``BAYES_SCALERL_CACHE_DIR`` leaves JAX's own
    settings alone, and so does an import in a process that already set
    ``jax_compilation_cache_dir`` itself. It does not start JAX's backends, so
    :func:`~bayes_scalerl.use_all_cpu_cores` still works afterwards.

    The cache is trusted code: do not point it at a folder others can write to.

    Parameters
    ----------
    path : str, os.PathLike or None
        Cache folder (created on first write); ``"default"`` for the default folder,
        ``None`` or ``""`` to turn the cache off.

    Returns
    -------
    str or None
        The folder now in use, or ``None``.
    """
    from jax.experimental.compilation_cache import compilation_cache as cc

    cc.reset_cache()  # takes effect even after something was compiled
    if path is None or os.fspath(path) == "":
        jax.config.update("jax_enable_compilation_cache", False)
        return None
    folder = _default_cache_dir() if os.fspath(path) == "default" else Path(os.fspath(path)).expanduser()
    jax.config.update("jax_enable_compilation_cache", True)
    jax.config.update("jax_compilation_cache_dir", str(folder))
    # only programs worth it (the sampler compiles for seconds; small eager ops do not)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 1.0)
    return str(folder)


def _configure_cache_on_import() -> None:
    env = os.environ.get(CACHE_ENV)
    if env == "":
        return  # turned off: JAX's own settings stand
    if env is None and jax.config.jax_compilation_cache_dir:
        return  # the user configured JAX's cache already
    set_compilation_cache(env or "default")


_configure_cache_on_import()


# ---------------------------------------------------------------------------------------------
# the compiled group program


class SamplerConfig(NamedTuple):
    """Static settings of the sampler (a change compiles a new program).

    Attributes
    ----------
    num_chains, num_warmup, num_samples : int
        Chains per run, warm-up iterations and kept draws per chain.
    target_accept : float
        Target acceptance probability of the step-size adaptation (0.9: with the
        gain sampled, see :mod:`bayes_scalerl.model`, the ``A <= 1`` bound no longer
        needs small steps; measured on 500 simulated runs, 0.8 diverged in 1.6% of runs,
        0.9 in 0.4%, 0.95 in 0.2% with 10% more steps).
    max_tree_depth : int
        Cap on NUTS tree depth (2**depth leapfrog steps at most per iteration).
    dense_mass : bool
        Adapt a dense mass matrix per lane.
    group_size : int or None
        Runs whose chains one call of the compiled program works through. ``None``
        (default): 64 on a CPU, ``chunk_size`` on a GPU/TPU.
    kernel : {"queue", "lockstep"}
        ``"queue"`` (default): :func:`bayes_scalerl.nuts.sample_queue`, lanes that each
        advance their own chain one leapfrog step per tick and take the group's next
        chain when theirs is done. ``"lockstep"``: NumPyro's ``sample_kernel`` vmapped
        over all chains of the group, every iteration as long as its deepest tree (a
        reference; slower).
    lanes : int or None
        Chains advanced side by side by the ``"queue"`` kernel. ``None`` (default): 64
        on a CPU (with groups of 64 runs, each lane works through about four chains;
        measured on 500 runs, 16, 32, 64 and 128 lanes took 20.0, 15.8, 14.7 and 15.0 s,
        as a CPU pays per operation as much as per lane); every chain of the group on
        a GPU/TPU.
    """

    num_chains: int = 4
    num_warmup: int = 500
    num_samples: int = 500
    target_accept: float = 0.9
    max_tree_depth: int = 8
    dense_mass: bool = True
    group_size: int | None = None
    kernel: str = "queue"
    lanes: int | None = None


class Draws(NamedTuple):
    """Raw sampler output with shape (run, chain, draw[, dim]) in NumPy.

    ``R0`` (when not fitted) and ``rho`` (unless the likelihood is ``"ar1"``) are
    read-only broadcast views of the constant values, not stored per draw.
    """

    z: np.ndarray
    A: np.ndarray
    B: np.ndarray
    C_mid: np.ndarray
    sigma: np.ndarray
    R0: np.ndarray
    rho: np.ndarray
    diverging: np.ndarray
    num_steps: np.ndarray
    accept_prob: np.ndarray
    energy: np.ndarray
    lp: np.ndarray
    step_size: np.ndarray  # (run, chain)


def _returned_fields(priors: Priors) -> tuple[str, ...]:
    skip = set()
    if not priors.R0_fitted:
        skip.add("R0")
    if priors.likelihood != "ar1":
        skip.add("rho")
    return tuple(f for f in _FIELDS if f not in skip)


def _report(key: jax.Array, z: jax.Array, data: RunData, priors: Priors):
    """One chain's reported draws from its NUTS draws ``z``: ``A`` and ``sigma`` (see
    :func:`~bayes_scalerl.model.refresh_sigma`) drawn given the rest, and the rest.

    ``sigma`` is drawn given ``B``, ``C_mid`` and NUTS's gain, then ``A`` given ``B``,
    ``C_mid`` and that ``sigma``: each step leaves the posterior invariant.
    """
    k_sigma, k_a = jax.random.split(key)
    sigma = refresh_sigma(k_sigma, z, data, priors)
    return draw_A(k_a, z, data, priors, sigma=sigma), sigma, constrain(z, data, priors)


@functools.lru_cache(maxsize=32)
def _compiled_sampler(priors: Priors, config: SamplerConfig, impl: str) -> Callable:
    """The jit-compiled program of one group of runs, per (priors, config, key impl).

    ``program(key_data, inputs)`` takes the base PRNG key's data (``impl`` names its
    implementation) and a dict of arrays with a leading run axis of the group size:
    ``run_index`` (uint32, the run's position in the whole batch), ``compute``,
    ``reward``, ``mask`` (run, point), ``R0``, ``c_ref`` (run,) and, for the binomial
    likelihood, ``n_eval``. It returns a dict of arrays of shape (run, chain, draw[, dim])
    (``step_size``: (run, chain)). JAX compiles it once per input shape and device.
    """
    fields = _returned_fields(priors)
    c = config.num_chains

    def potential_gen(data: RunData):
        return lambda z: -log_density(z, data, priors)

    init_kernel, sample_kernel = hmc(potential_fn_gen=potential_gen, algo="NUTS")

    def one_lane(key: jax.Array, z0: jax.Array, data: RunData) -> dict:
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
        A, sigma, p = _report(k_a, z, data, priors)
        out = {
            "z": z[..., : n_dim(priors)],  # Student-t: not the per-point latent precisions
            "A": A,
            "B": p.B,
            "C_mid": p.C_mid,
            "sigma": sigma,
            "R0": p.R0,
            "rho": p.rho,
            "diverging": div,
            "num_steps": steps,
            "accept_prob": acc,
            "energy": energy,
            "lp": lp,
            "step_size": state.adapt_state.step_size,
        }
        return {f: out[f] for f in fields}

    def group_queue(key_data: jax.Array, inputs: dict) -> dict:
        _TRACES["sampler"] += 1  # runs only while JAX traces
        key = jax.random.wrap_key_data(key_data, impl=impl)
        keys = jax.vmap(jax.random.fold_in, in_axes=(None, 0))(key, inputs["run_index"])
        data = make_run_data(
            inputs["compute"],
            inputs["reward"],
            inputs["mask"],
            inputs["R0"],
            inputs["c_ref"],
            priors,
            inputs.get("n_eval"),
        )
        d = n_dim(priors, inputs["compute"].shape[-1])
        lane_keys, z0 = jax.vmap(lambda k: run_start(k, d))(keys)
        g = z0.shape[0]
        split = jax.vmap(jax.random.split)(lane_keys.reshape(g * c))
        k_nuts, k_a = split[:, 0], split[:, 1]
        tasks = jax.tree_util.tree_map(lambda x: jnp.repeat(x, c, axis=0), data)
        lanes = config.lanes if config.lanes is not None else g * c
        settings = NutsSettings(
            config.num_warmup,
            config.num_samples,
            config.target_accept,
            config.max_tree_depth,
            config.dense_mass,
            int(min(lanes, g * c)),
        )
        n_valid = jnp.sum(inputs["valid"]).astype(jnp.int32) * c  # padding runs are not sampled
        raw = sample_queue(
            lambda zz, dd: -log_density(zz, dd, priors),
            settings,
            k_nuts,
            z0.reshape(g * c, d),
            tasks,
            n_valid,
        )
        z = raw["z"]

        A, sigma, p = jax.vmap(lambda k, zz, dd: _report(k, zz, dd, priors))(k_a, z, tasks)
        out = {
            "z": z[..., : n_dim(priors)],
            "A": A,
            "B": p.B,
            "C_mid": p.C_mid,
            "sigma": sigma,
            "R0": p.R0,
            "rho": p.rho,
            "diverging": raw["diverging"],
            "num_steps": raw["num_steps"],
            "accept_prob": raw["accept_prob"],
            "energy": raw["energy"],
            "lp": -raw["pe"],
            "step_size": raw["step_size"],
        }
        out = {f: out[f] for f in fields}
        return jax.tree_util.tree_map(lambda x: x.reshape((g, c) + x.shape[1:]), out)

    def run_start(key: jax.Array, d: int) -> tuple[jax.Array, jax.Array]:
        # one run's chains: their keys and initial points
        k_init, k_run = jax.random.split(key)
        return jax.random.split(k_run, c), jax.random.uniform(k_init, (c, d), minval=-2.0, maxval=2.0)

    def group(key_data: jax.Array, inputs: dict) -> dict:
        _TRACES["sampler"] += 1  # runs only while JAX traces
        key = jax.random.wrap_key_data(key_data, impl=impl)
        keys = jax.vmap(jax.random.fold_in, in_axes=(None, 0))(key, inputs["run_index"])
        data = make_run_data(
            inputs["compute"],
            inputs["reward"],
            inputs["mask"],
            inputs["R0"],
            inputs["c_ref"],
            priors,
            inputs.get("n_eval"),
        )
        d = n_dim(priors, inputs["compute"].shape[-1])  # static at trace time
        lane_keys, z0 = jax.vmap(lambda k: run_start(k, d))(keys)
        g = z0.shape[0]
        # one vmap over run x chain lanes (a nested vmap traces twice as slowly)
        lanes = jax.tree_util.tree_map(lambda x: jnp.repeat(x, c, axis=0), data)
        out = jax.vmap(one_lane)(lane_keys.reshape(g * c), z0.reshape(g * c, d), lanes)
        return jax.tree_util.tree_map(lambda x: x.reshape((g, c) + x.shape[1:]), out)

    return jax.jit(group_queue if config.kernel == "queue" else group)


# ---------------------------------------------------------------------------------------------
# layout: chunks and groups


def _layout(n: int, chunk_size: int, group_size: int, n_devices: int) -> tuple[int, int, int]:
    """Padded run count, runs per group and devices used for a chunk of ``n`` runs.

    Groups hold ``min(group_size, 2**k)`` runs, ``2**k`` the smallest power of two
    >= ``n`` (at least 4), whatever the device count, so every group runs the same
    program on any device. The chunk is padded to whole groups, and the number of
    groups to a multiple of the devices it uses (``min(n_devices, groups)``), so the
    last round of a chunk keeps every device busy (full chunks of power-of-two sizes
    need no such padding).
    """
    n = max(1, min(n, chunk_size))
    gsize = min(group_size, max(4, 1 << (n - 1).bit_length()))
    n_groups = -(-n // gsize)
    used = max(1, min(n_devices, n_groups))
    n_groups = used * -(-n_groups // used)
    return n_groups * gsize, gsize, used


def _default_group_size(platform: str, chunk_size: int) -> int:
    return 64 if platform == "cpu" else int(chunk_size)


def _one_cpu_device_only(priors: Priors, executor, n_devices: int | None) -> bool:
    """Whether a local CPU fit must stay on one device although several are visible.

    The Student-t sampler carries one latent precision per point, so its vectors are long
    enough for XLA's CPU backend to split operations into tasks on its shared thread pool.
    Measured on a 2-core machine with 2 CPU devices (jax 0.10), two such programs running
    at once, one per device, stop with every thread waiting (0% CPU, no progress). Until
    that is fixed upstream, Student-t fits on a CPU use one device unless ``n_devices``
    says otherwise; the draws do not depend on the device count.
    """
    if priors.likelihood != "student_t" or n_devices is not None or executor != "local":
        return False
    if jax.default_backend() != "cpu" or jax.local_device_count() < 2:
        return False
    logger.info("Student-t likelihood on a CPU: one device (several deadlock in XLA's CPU runtime)")
    return True


def _default_lanes(platform: str, config: SamplerConfig) -> int:
    # a CPU pays per operation and per lane alike (see SamplerConfig.lanes); an
    # accelerator wants every chain at once
    return 64 if platform == "cpu" else int(config.group_size) * config.num_chains


class ChunkJob(NamedTuple):
    """One chunk of runs, ready to hand to an executor.

    Attributes
    ----------
    index : int
        Chunk number (its checkpoint file).
    lo, hi : int
        The chunk holds runs ``lo`` to ``hi - 1`` of the batch.
    key_data : numpy.ndarray
        Data of the base PRNG key (every run folds its index into it).
    inputs : dict of numpy.ndarray
        Arrays of shape (group, group size, ...) for the group program.
    """

    index: int
    lo: int
    hi: int
    key_data: np.ndarray
    inputs: dict

    @property
    def n_real(self) -> int:
        return self.hi - self.lo


def _padded_inputs(window, priors: Priors) -> dict[str, np.ndarray]:
    """The window's arrays with points padded to a multiple of 8 (the bucketed width)."""
    n_points = window.reward.shape[1]
    width = max(8, 8 * math.ceil(n_points / 8))
    pad_p = width - n_points

    def pad_points(a, fill_last=True):
        a = np.asarray(a)
        if pad_p == 0:
            return a
        tail = np.repeat(a[:, -1:], pad_p, axis=1) if fill_last else np.zeros((a.shape[0], pad_p), a.dtype)
        return np.concatenate([a, tail], axis=1)

    out = {
        "compute": pad_points(np.asarray(window.compute, dtype=np.float64)),
        "reward": pad_points(np.asarray(window.reward, dtype=np.float64)),
        "mask": pad_points(np.asarray(window.mask, dtype=bool), fill_last=False),
        "R0": np.asarray(window.R0, dtype=np.float64),
        "c_ref": np.asarray(window.c_ref, dtype=np.float64),
    }
    if priors.likelihood == "binomial":
        if window.n_eval is None or np.isnan(window.n_eval[window.mask]).any():
            raise ValueError("the binomial likelihood needs an n_eval column (graded generations per point)")
        out["n_eval"] = pad_points(np.asarray(window.n_eval, dtype=np.float64))
    return out


def _chunk_job(index, lo, hi, key_data, arrays, chunk_size, group_size, n_devices) -> ChunkJob:
    size, gsize, _ = _layout(hi - lo, chunk_size, group_size, n_devices)
    idx = np.concatenate([np.arange(lo, hi), np.full(size - (hi - lo), lo)])
    inputs = {k: v[idx].reshape((-1, gsize) + v.shape[1:]) for k, v in arrays.items()}
    inputs["run_index"] = idx.astype(np.uint32).reshape(-1, gsize)
    inputs["valid"] = (np.arange(size) < hi - lo).reshape(-1, gsize)  # padding runs come last
    return ChunkJob(index, lo, hi, key_data, inputs)


def _key_parts(key) -> tuple[np.ndarray, str]:
    """(key data, implementation name) of a typed or raw (uint32) PRNG key."""
    key = jnp.asarray(key) if not isinstance(key, jax.Array) else key
    if not jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
        key = jax.random.wrap_key_data(key)
    if key.shape != ():
        raise ValueError(f"expected a single PRNG key, got shape {key.shape}")
    return np.asarray(jax.random.key_data(key)), str(jax.random.key_impl(key))


def _fingerprint(
    arrays: dict, priors: Priors, config: SamplerConfig, key_data: np.ndarray, impl: str, chunk_size: int
) -> dict[str, str]:
    """Hashes of everything a chunk's draws depend on, by part (for the checkpoint manifest)."""
    import jaxlib
    import numpyro

    from . import __version__

    def h(*items) -> str:
        m = hashlib.sha256()
        for it in items:
            if isinstance(it, np.ndarray):
                m.update(f"{it.dtype.str}{it.shape}".encode())
                m.update(np.ascontiguousarray(it).tobytes())
            else:
                m.update(json.dumps(it, sort_keys=True, default=str).encode())
        return m.hexdigest()[:32]

    return {
        "data": h(*(x for k in sorted(arrays) for x in (k, arrays[k]))),
        "priors": h(priors.to_dict()),
        "sampler": h(config._asdict()),
        "seed": h(key_data, impl),
        "chunking": h(int(chunk_size)),
        "versions": h(__version__, jax.__version__, jaxlib.__version__, numpyro.__version__),
    }


# ---------------------------------------------------------------------------------------------
# the driver


class _Output:
    """Preallocated NumPy arrays of every run's draws, filled chunk by chunk."""

    def __init__(self, n_runs: int, window_R0: np.ndarray, config: SamplerConfig):
        self.n = n_runs
        self.R0 = np.asarray(window_R0, dtype=np.float64)
        self.shape = (n_runs, config.num_chains, config.num_samples)
        self.arrays: dict[str, np.ndarray] = {}

    def put(self, lo: int, hi: int, chunk: dict) -> None:
        for k, v in chunk.items():
            if k not in self.arrays:
                self.arrays[k] = np.empty((self.n,) + v.shape[1:], v.dtype)
            self.arrays[k][lo:hi] = v

    def draws(self) -> Draws:
        a = dict(self.arrays)
        if "R0" not in a:
            a["R0"] = np.broadcast_to(self.R0[:, None, None], self.shape)
        if "rho" not in a:
            a["rho"] = np.broadcast_to(np.zeros((), np.float64), self.shape)
        return Draws(**{f: a[f] for f in _FIELDS})


def sample_window(
    key: jax.Array,
    window,
    priors: Priors,
    config: SamplerConfig = SamplerConfig(),
    *,
    chunk_size: int = 512,
    progress: bool | None = None,
    n_devices: int | None = None,
    group_size: int | None = None,
    executor: Any = "local",
    checkpoint_dir: str | os.PathLike | None = None,
) -> Draws:
    """Sample every run of a :class:`~bayes_scalerl.data.FitWindow`.

    Runs are cut into chunks of at most ``chunk_size`` and chunks into groups that run
    one compiled program each, round-robin over the local devices (see the module
    docstring). Run ``i`` draws its randomness from ``fold_in(key, i)``: the draws do
    not depend on ``n_devices``, ``executor`` or on resuming from ``checkpoint_dir``.

    Parameters
    ----------
    key : jax.Array
        PRNG key (typed, or a raw uint32 key).
    window : FitWindow
        Padded data from :meth:`Runs.window`.
    priors : Priors
    config : SamplerConfig
    chunk_size : int
        Most runs per chunk (bounds memory: a chunk's draws are moved to NumPy, and
        written to ``checkpoint_dir``, as soon as it is done).
    progress : bool, optional
        Show a progress bar over runs (default: when there is more than one chunk).
    n_devices : int, optional
        Local devices to spread groups over (default: all; on a CPU call
        :func:`~bayes_scalerl.use_all_cpu_cores` first, or set
        ``XLA_FLAGS=--xla_force_host_platform_device_count=N`` before importing JAX).
        Results do not depend on it.
    group_size : int, optional
        Overrides ``config.group_size`` (runs per compiled call). Default: 64 on a CPU,
        ``chunk_size`` on an accelerator. Draws of the ``"queue"`` kernel do not depend
        on it; those of the ``"lockstep"`` kernel may.
    executor : {"local", "ray"} or executor object
        ``"local"``: this process's devices. ``"ray"``: one Ray task per chunk (see
        :class:`bayes_scalerl.executors.RayExecutor`; connects to the Ray instance
        already initialised, else starts or joins one with ``ray.init()``). Any object
        with the ``map(jobs, priors, config, impl)`` method of
        :class:`~bayes_scalerl.executors.LocalExecutor` works too.
    checkpoint_dir : str or os.PathLike, optional
        Folder to write each finished chunk to (``chunk-NNNNNN.npz``, atomically) with a
        ``manifest.json`` fingerprint of the inputs. Run again with the same inputs, a
        fit loads the finished chunks instead of sampling them again and samples only the
        rest; the result equals an uninterrupted run's. A folder holding chunks of
        different inputs (data, priors, sampler settings, seed, chunk size, versions) is
        refused with :class:`~bayes_scalerl.checkpoint.CheckpointMismatch`.

    Returns
    -------
    Draws
    """
    from .executors import resolve_executor

    if int(chunk_size) != chunk_size or chunk_size < 1:
        raise ValueError(f"chunk_size must be a positive integer, got {chunk_size!r}")
    chunk_size = int(chunk_size)
    arrays = _padded_inputs(window, priors)
    n_runs = arrays["reward"].shape[0]
    if n_runs == 0:
        raise ValueError("no runs to fit")
    if _one_cpu_device_only(priors, executor, n_devices):
        n_devices = 1
    exe = resolve_executor(executor, n_devices=n_devices)
    gs = group_size if group_size is not None else config.group_size
    if gs is None:
        gs = _default_group_size(exe.platform, chunk_size)
    if int(gs) != gs or gs < 1:
        raise ValueError(f"group_size must be a positive integer, got {gs!r}")
    config = config._replace(group_size=int(gs))
    if config.kernel not in ("queue", "lockstep"):
        raise ValueError(f"kernel must be 'queue' or 'lockstep', got {config.kernel!r}")
    if config.lanes is not None and (int(config.lanes) != config.lanes or config.lanes < 1):
        raise ValueError(f"lanes must be a positive integer, got {config.lanes!r}")
    if config.lanes is None:
        config = config._replace(lanes=_default_lanes(exe.platform, config))
    key_data, impl = _key_parts(key)
    chunks = [(i, lo, min(lo + chunk_size, n_runs)) for i, lo in enumerate(range(0, n_runs, chunk_size))]

    out = _Output(n_runs, window.R0, config)
    store = None
    if checkpoint_dir is not None:
        from .checkpoint import ChunkStore

        manifest = {
            "parts": _fingerprint(arrays, priors, config, key_data, impl, chunk_size),
            "n_runs": n_runs,
            "n_chunks": len(chunks),
            "chunk_size": chunk_size,
            "sampler": config._asdict(),
            "priors": priors.to_dict(),
        }
        store = ChunkStore.open(checkpoint_dir, manifest)
    todo = []
    for i, lo, hi in chunks:
        if store is not None and store.has(i):
            out.put(lo, hi, store.load(i, n_runs=hi - lo))
            logger.info("chunk %d (runs %d-%d) loaded from %s, not sampled again", i, lo, hi - 1, store.path)
        else:
            todo.append((i, lo, hi))
    done_runs = n_runs - sum(hi - lo for _, lo, hi in todo)

    if not todo:
        return out.draws()
    show = (len(chunks) > 1) if progress is None else progress
    bar = None
    if show:
        from tqdm.auto import tqdm

        bar = tqdm(total=n_runs, initial=done_runs, unit="run", desc="NUTS")
    jobs: Iterator[ChunkJob] = (
        _chunk_job(i, lo, hi, key_data, arrays, chunk_size, config.group_size, exe.n_devices)
        for i, lo, hi in todo
    )
    try:
        for job, result in exe.map(jobs, priors, config, impl):
            if store is not None:
                store.save(job.index, result)
            out.put(job.lo, job.hi, result)
            if bar is not None:
                bar.update(job.n_real)
    finally:
        if bar is not None:
            bar.close()
    return out.draws()
