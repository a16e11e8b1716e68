"""Batched NUTS for any model: every chain of every run, in chunks and groups, on every device.

The sampler is NUTS as NumPyro implements it, run by :mod:`bayes_scalerl.engine.nuts`:
one jit-compiled **group program** (:mod:`bayes_scalerl.engine.program`) works through
the chains of ``group_size`` runs with ``lanes`` chains side by side, one leapfrog step
per lane per tick, each lane at its own place in its own trajectory, so a lane never
waits for another lane's tree. Each chain adapts its own step size and dense mass matrix
in its own warm-up. The model is any :class:`~bayes_scalerl.models.base.BatchedModel`.

How a batch of runs is laid out:

- runs are cut into **chunks** of at most ``chunk_size`` (the unit of memory, of
  checkpointing and of hand-over to an executor); a chunk's draws are copied to NumPy
  as soon as it finishes, so device memory never holds more than a couple of chunks;
- a chunk is cut into **groups** of ``group_size`` runs (padded with copies of its first
  run, which are not sampled); every group runs the *same* compiled program, and
  groups are dispatched round-robin to the local devices;
- shapes are bucketed: the group size is ``min(group_size, 2**k)`` for the smallest
  ``2**k >=`` the chunk's run count (at least 4), points are padded to a multiple of 8,
  so a new data set of a similar size reuses the compiled program
  (:func:`~bayes_scalerl.engine.program.trace_count`).

Each chain's randomness comes from ``fold_in(key, run_index)``, so a run's draws depend
on the seed, its data, the model and the sampler settings only: not on the device it
lands on, the number of devices, the other runs of its group or chunk, the group size,
the lane that runs it, or the executor. (The number of lanes sets the width of every
vectorised operation, so it is part of the program.) On one platform the same
arithmetic gives the same bits, so a fit on 1 or N devices, in one process or over Ray,
resumed from a checkpoint or not, gives the same draws.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from . import runtime
from .program import SamplerConfig

__all__ = ["ChunkJob", "sample_window", "padded_inputs"]

logger = logging.getLogger(__name__)


def _layout(n: int, chunk_size: int, group_size: int, n_devices: int) -> tuple[int, int, int]:
    """Padded run count, runs per group and devices used for a chunk of ``n`` runs.

    Groups hold ``min(group_size, 2**k)`` runs, ``2**k`` the smallest power of two
    >= ``n`` (at least 4), whatever the device count, so every group runs the same
    program on any device. The chunk is padded to whole groups, and the number of
    groups to a multiple of the devices it uses (``min(n_devices, groups)``), so the
    last round of a chunk keeps every device busy.
    """
    n = max(1, min(n, chunk_size))
    gsize = min(group_size, max(4, 1 << (n - 1).bit_length()))
    n_groups = -(-n // gsize)
    used = max(1, min(n_devices, n_groups))
    n_groups = used * -(-n_groups // used)
    return n_groups * gsize, gsize, used


def _default_group_size(platform: str, chunk_size: int) -> int:
    return 64 if platform == "cpu" else int(chunk_size)


def _default_lanes(platform: str, config: SamplerConfig) -> int:
    # a CPU pays per operation and per lane alike; an accelerator wants every chain at once
    return 64 if platform == "cpu" else int(config.group_size) * config.chains


def _one_cpu_device_only(model, executor, n_devices: int | None) -> bool:
    """Whether a local CPU fit must stay on one device although several are visible.

    The Student-t sampler carries one latent precision per point, so its vectors are long
    enough for XLA's CPU backend to split operations into tasks on its shared thread pool;
    two such programs running at once, one per device, stop with every thread waiting
    (measured on jax 0.10, 2 CPU devices). Until that is fixed upstream, Student-t fits on
    a CPU use one device unless ``n_devices`` says otherwise; the draws do not depend on
    the device count.
    """
    priors = getattr(model, "priors", None)
    if priors is None or getattr(priors, "likelihood", None) != "student_t":
        return False
    if n_devices is not None or executor != "local":
        return False
    if jax.default_backend() != "cpu" or jax.local_device_count() < 2:
        return False
    logger.info("Student-t likelihood on a CPU: one device (several deadlock in XLA's CPU runtime)")
    return True


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


def padded_inputs(window, *, n_eval: bool = False) -> dict[str, np.ndarray]:
    """A :class:`~bayes_scalerl.data.runs.FitWindow`'s arrays, points padded to a multiple of 8.

    ``n_eval=True`` adds the ``n_eval`` column (needed by the binomial likelihood); a
    window with a fixed AR(1) correlation adds ``rho`` (one per run); a window whose
    fitted points are not evenly spaced adds ``ar_lag``, each point's AR(1) lag
    (:func:`~bayes_scalerl.models.shape_noise.ar1_lags`; left out when every lag is 1, so
    that evenly spaced logs run the program without lags, exactly as before).
    """
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
    if getattr(window, "rho", None) is not None:
        out["rho"] = np.asarray(window.rho, dtype=np.float64)
    from ..models.shape_noise import ar1_lags

    lag = ar1_lags(window.compute, window.mask, getattr(window, "step", None))
    if lag is not None:
        out["ar_lag"] = np.concatenate([lag, np.ones((lag.shape[0], pad_p))], axis=1)
    if getattr(window, "prior", None) is not None:  # priors learnt from the batch, run by run
        out["prior"] = np.asarray(window.prior, dtype=np.float64)
    if getattr(window, "ou", None) is not None:  # each chunk adds its whitening (_with_whitening)
        out["ou"] = np.asarray(window.ou, dtype=np.float64)
    if n_eval:
        if window.n_eval is None or np.isnan(window.n_eval[window.mask]).any():
            raise ValueError("the binomial likelihood needs an n_eval column (graded generations per point)")
        out["n_eval"] = pad_points(np.asarray(window.n_eval, dtype=np.float64))
    return out


def _with_whitening(arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A chunk's inputs with the whitening of smooth departures (``"ou"`` in them).

    The Kalman filter's gains (:func:`~bayes_scalerl.models.shape_noise.state_space_whitening`,
    ``point * 9`` numbers a run) are computed here, with NumPy, one chunk at a time, and
    given to the sampler as data. (A dense Cholesky factorisation inside the sampler's
    program, run on several CPU devices at once, hung XLA's CPU runtime.)
    """
    if "ou" not in arrays:
        return arrays
    from ..models.shape_noise import state_space_whitening

    ou = arrays["ou"]
    positive = arrays["compute"] > 0
    log_c = np.log(np.where(positive, arrays["compute"], 1.0))
    rho = arrays.get("rho", np.zeros(ou.shape[0]))
    W, logdet = state_space_whitening(
        log_c, arrays["mask"] & positive, rho, ou[:, 0], ou[:, 1], arrays.get("ar_lag")
    )
    return {**arrays, "whiten": W, "whiten_logdet": logdet}


def _chunk_job(index, lo, hi, key_data, arrays, chunk_size, group_size, n_devices) -> ChunkJob:
    size, gsize, _ = _layout(hi - lo, chunk_size, group_size, n_devices)
    idx = np.concatenate([np.arange(lo, hi), np.full(size - (hi - lo), lo)])
    arrays = _with_whitening({k: v[idx] for k, v in arrays.items()})
    inputs = {k: v.reshape((-1, gsize) + v.shape[1:]) for k, v in arrays.items()}
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
    arrays: dict, model, config: SamplerConfig, key_data: np.ndarray, impl: str, chunk_size: int
) -> dict[str, str]:
    """Hashes of everything a chunk's draws depend on, by part (for the checkpoint manifest)."""
    import jaxlib
    import numpyro

    from .. import __version__

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
        "model": h(model.spec()),
        "sampler": h(config._asdict()),
        "seed": h(key_data, impl),
        "chunking": h(int(chunk_size)),
        "versions": h(__version__, jax.__version__, jaxlib.__version__, numpyro.__version__),
    }


def _as_model(model):
    """A model object; a :class:`~bayes_scalerl.models.priors.Priors` means the sigmoid with those priors."""
    from ..models.base import BatchedModel
    from ..models.priors import Priors

    if isinstance(model, Priors):
        from ..models.sigmoid import SigmoidModel

        return SigmoidModel(model)
    if not isinstance(model, BatchedModel):
        raise TypeError(f"expected a model (BatchedModel) or Priors, got {type(model).__name__}")
    return model


def _resolve_config(config: SamplerConfig, platform: str, chunk_size: int, group_size) -> SamplerConfig:
    gs = group_size if group_size is not None else config.group_size
    if gs is None:
        gs = _default_group_size(platform, chunk_size)
    if int(gs) != gs or gs < 1:
        raise ValueError(f"group_size must be a positive integer, got {gs!r}")
    config = config._replace(group_size=int(gs))
    if config.kernel not in ("queue", "lockstep"):
        raise ValueError(f"kernel must be 'queue' or 'lockstep', got {config.kernel!r}")
    if config.lanes is not None and (int(config.lanes) != config.lanes or config.lanes < 1):
        raise ValueError(f"lanes must be a positive integer, got {config.lanes!r}")
    if config.lanes is None:
        config = config._replace(lanes=_default_lanes(platform, config))
    return config


@runtime.x64
def sample_window(
    key: jax.Array,
    window,
    model,
    config: SamplerConfig = SamplerConfig(),
    *,
    chunk_size: int = 512,
    progress: bool | None = None,
    n_devices: int | None = None,
    group_size: int | None = None,
    executor: Any = "local",
    checkpoint_dir: str | os.PathLike | None = None,
    keep: Sequence[str] | None = None,
) -> dict[str, np.ndarray]:
    """Sample every run of a :class:`~bayes_scalerl.data.runs.FitWindow` under ``model``.

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
    model : BatchedModel or Priors
        The model (:class:`~bayes_scalerl.models.base.BatchedModel`); a
        :class:`~bayes_scalerl.models.priors.Priors` means the sigmoid with those priors.
        With the AR(1) likelihood at ``rho="auto"`` and no ``window.rho``, every run's
        ``rho`` is the window's estimate (:func:`~bayes_scalerl.noise_correlation`).
    config : SamplerConfig
    chunk_size : int
        Most runs per chunk (bounds memory: a chunk's draws are moved to NumPy, and
        written to ``checkpoint_dir``, as soon as it is done).
    progress : bool, optional
        Show a progress bar over runs (default: when there is more than one chunk).
    n_devices : int, optional
        Local devices to spread groups over (default: all). Results do not depend on it.
    group_size : int, optional
        Overrides ``config.group_size`` (runs per compiled call). Draws of the
        ``"queue"`` kernel do not depend on it.
    executor : {"local", "ray"} or executor object
        ``"local"``: this process's devices. ``"ray"``: one Ray task per chunk (see
        :class:`~bayes_scalerl.engine.executors.RayExecutor`). Any object with the
        ``map(jobs, model, config, impl)`` method of
        :class:`~bayes_scalerl.engine.executors.LocalExecutor` works too.
    checkpoint_dir : str or os.PathLike, optional
        Folder to write each finished chunk to (``chunk-NNNNNN.npz``, atomically) with a
        ``manifest.json`` fingerprint of the inputs; run again with the same inputs, a
        fit loads the finished chunks and samples only the rest. A folder holding chunks
        of different inputs is refused with
        :class:`~bayes_scalerl.engine.checkpoint.CheckpointMismatch`.
    keep : sequence of str, optional
        Return only these arrays (default all): the others are dropped chunk by chunk,
        so they never take memory for every run at once (checkpoints still hold all).

    Returns
    -------
    dict of numpy.ndarray
        The model's variables and the sampler statistics
        (:data:`~bayes_scalerl.engine.program.STATS`), each of shape (run, chain, draw)
        (``step_size``: (run, chain)).
    """
    from .executors import resolve_executor

    model = _as_model(model)
    priors = getattr(model, "priors", None)
    from ..data.noise import ESTIMATED_RHO, with_window_rho

    if getattr(priors, "rho", None) in ESTIMATED_RHO and priors.likelihood == "ar1" and window.rho is None:
        # the AR(1) correlation at the batch's estimate (fit() resolves it before; this is for
        # direct calls): data of the program, one value for every run
        window, _ = with_window_rho(window, priors.rho)
    if int(chunk_size) != chunk_size or chunk_size < 1:
        raise ValueError(f"chunk_size must be a positive integer, got {chunk_size!r}")
    chunk_size = int(chunk_size)
    arrays = padded_inputs(window, n_eval=model.needs_n_eval)
    n_runs = arrays["reward"].shape[0]
    if n_runs == 0:
        raise ValueError("no runs to fit")
    if _one_cpu_device_only(model, executor, n_devices):
        n_devices = 1
    exe = resolve_executor(executor, n_devices=n_devices)
    config = _resolve_config(config, exe.platform, chunk_size, group_size)
    key_data, impl = _key_parts(key)
    chunks = [(i, lo, min(lo + chunk_size, n_runs)) for i, lo in enumerate(range(0, n_runs, chunk_size))]

    out: dict[str, np.ndarray] = {}

    def put(lo: int, hi: int, chunk: dict) -> None:
        for k, v in chunk.items():
            if keep is not None and k not in keep:
                continue
            if k not in out:
                out[k] = np.empty((n_runs,) + v.shape[1:], v.dtype)
            out[k][lo:hi] = v

    store = None
    if checkpoint_dir is not None:
        from .checkpoint import ChunkStore

        manifest = {
            "parts": _fingerprint(arrays, model, config, key_data, impl, chunk_size),
            "n_runs": n_runs,
            "n_chunks": len(chunks),
            "chunk_size": chunk_size,
            "sampler": config._asdict(),
            "model": model.spec(),
        }
        store = ChunkStore.open(checkpoint_dir, manifest)
    todo = []
    for i, lo, hi in chunks:
        if store is not None and store.has(i):
            put(lo, hi, store.load(i, n_runs=hi - lo))
            logger.info("chunk %d (runs %d-%d) loaded from %s, not sampled again", i, lo, hi - 1, store.path)
        else:
            todo.append((i, lo, hi))
    done_runs = n_runs - sum(hi - lo for _, lo, hi in todo)
    if not todo:
        return out
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
        for job, result in exe.map(jobs, model, config, impl):
            if store is not None:
                store.save(job.index, result)
            put(job.lo, job.hi, result)
            if bar is not None:
                bar.update(job.n_real)
    finally:
        if bar is not None:
            bar.close()
    return out
