"""Where the chunks of a batched fit run: this process's devices, or Ray tasks.

An executor takes :class:`~bayes_scalerl.engine.driver.ChunkJob` s (one chunk of runs laid
out in groups) and yields each chunk's draws as NumPy arrays. Every executor runs the
same compiled group program (:func:`bayes_scalerl.engine.program.compiled_program`), so the
draws do not depend on which one ran them:

- :class:`LocalExecutor` dispatches the groups of a chunk round-robin to the local
  devices (``jax.device_put`` to device ``d``, then the jitted program; JAX's
  asynchronous dispatch runs the devices side by side) and keeps at most
  ``chunks_in_flight`` chunks on the devices;
- :class:`RayExecutor` hands each chunk to a Ray task (``ray.remote``) that runs it
  with a :class:`LocalExecutor` on the worker's devices.

An object with the same ``map(jobs, model, config, impl)`` method and ``platform`` and
``n_devices`` attributes can stand in for either.
"""

from __future__ import annotations

import functools
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import jax
import numpy as np

from . import runtime
from .mappings import relieve_map_pressure
from .program import compiled_program

__all__ = ["LocalExecutor", "RayExecutor", "resolve_executor", "run_chunk"]


def _signature(inputs: dict) -> tuple:
    return tuple((k, v.shape[1:], v.dtype.str) for k, v in sorted(inputs.items()))


def _group(inputs: dict, g: int) -> dict:
    return {k: v[g] for k, v in inputs.items()}


class LocalExecutor:
    """Run chunks on this process's devices, groups round-robin over them.

    Parameters
    ----------
    n_devices : int, optional
        Use the first ``n_devices`` local devices of the default backend (default: all).
    chunks_in_flight : int
        Chunks dispatched ahead of the one being copied back (2: the devices start on
        the next chunk while the last groups of the previous one finish). Device memory
        holds the draws of at most this many chunks.
    """

    def __init__(self, n_devices: int | None = None, *, chunks_in_flight: int = 2):
        if n_devices is not None and (int(n_devices) != n_devices or n_devices < 1):
            raise ValueError(f"n_devices must be a positive integer, got {n_devices!r}")
        if chunks_in_flight < 1:
            raise ValueError(f"chunks_in_flight must be at least 1, got {chunks_in_flight!r}")
        self._n = None if n_devices is None else int(n_devices)
        self.chunks_in_flight = int(chunks_in_flight)
        self._compiled: set = set()

    @functools.cached_property
    def devices(self) -> list:
        """The devices used (initialises JAX's backend on first access)."""
        devs = jax.local_devices()
        return devs if self._n is None else devs[: self._n]

    @property
    def n_devices(self) -> int:
        return len(self.devices)

    @property
    def platform(self) -> str:
        return self.devices[0].platform

    def _precompile(self, program, job, devices: list) -> None:
        """Compile the program for every device in parallel threads (XLA releases the GIL).

        The program is traced once; JAX compiles one executable per device, and later
        calls with inputs on that device reuse it.
        """
        key = (id(program), _signature(job.inputs))
        todo = [d for d in devices if (key, d) not in self._compiled]
        if not todo:
            return
        if relieve_map_pressure():  # the programs it dropped compile again when called
            self._compiled.clear()
        first = _group(job.inputs, 0)

        def compile_on(dev):
            with runtime.x64():  # x64 is thread-local: each compiling thread sets it
                program.lower(jax.device_put(job.key_data, dev), jax.device_put(first, dev)).compile()
            return dev

        if len(todo) == 1:
            compile_on(todo[0])
        else:
            program.trace(job.key_data, first)  # trace once, before the threads
            with ThreadPoolExecutor(max_workers=len(todo)) as pool:
                list(pool.map(compile_on, todo))
        self._compiled.update((key, d) for d in todo)

    def map(
        self, jobs: Iterable, model: Any, config: Any, impl: str
    ) -> Iterator[tuple[Any, dict[str, np.ndarray]]]:
        """Run every job; yield ``(job, draws)`` in job order, draws as NumPy arrays.

        ``draws`` maps each array the group program returns (the model's variables and
        the sampler statistics) to an array of shape (run, chain, draw) over the chunk's
        real runs.
        """
        program = compiled_program(model, config, impl)
        devices = self.devices
        queue: deque = deque()
        turn = 0
        for job in jobs:
            n_groups = next(iter(job.inputs.values())).shape[0]
            with runtime.phase("load programs"):
                self._precompile(program, job, devices[: min(len(devices), n_groups)])
            pending = []
            for g in range(n_groups):
                dev = devices[turn % len(devices)]
                turn += 1
                args = jax.device_put((job.key_data, _group(job.inputs, g)), dev)
                pending.append(program(*args))
            queue.append((job, pending))
            if len(queue) >= self.chunks_in_flight:
                j, p = queue.popleft()
                with runtime.phase("sample"):
                    out = _collect(p, j.n_real)
                yield j, out
        while queue:
            j, p = queue.popleft()
            with runtime.phase("sample"):
                out = _collect(p, j.n_real)
            yield j, out


def _collect(pending: list[dict], n_real: int) -> dict[str, np.ndarray]:
    """Copy a chunk's group outputs to NumPy, dropping the padding runs."""
    out = {}
    for k in pending[0]:
        parts, have = [], 0
        for p in pending:
            if have >= n_real:
                break
            a = np.asarray(p[k])
            parts.append(a[: n_real - have])
            have += len(parts[-1])
        out[k] = np.concatenate(parts) if len(parts) > 1 else parts[0].copy()
    return out


@runtime.x64
def run_chunk(job, model: Any, config: Any, impl: str, n_devices: int | None = None) -> dict:
    """Run one chunk on this process's devices and return its draws (the Ray task body)."""
    runtime.ensure_compilation_cache()
    ((_, out),) = LocalExecutor(n_devices, chunks_in_flight=1).map([job], model, config, impl)
    return out


class RayExecutor:
    """Hand each chunk to a Ray task; the task runs it with the same compiled program.

    Before the first chunk it uses the Ray instance this process already initialised
    (``ray.init(address=...)`` to join a cluster), or calls ``ray.init()``, which joins
    the cluster named by ``RAY_ADDRESS`` or starts a local one. Workers need
    ``bayes_scalerl`` importable (the same version); each worker process compiles the
    program once (or loads it from the persistent compilation cache when it shares the
    folder) and keeps it for later chunks. Draws equal those of the local path when the
    workers' devices are of the same kind (same CPU instruction set, or same GPU model).

    Parameters
    ----------
    num_cpus, num_gpus : float
        Resources of one chunk task (``ray.remote`` options). With ``num_gpus > 0`` the
        default group size is that of an accelerator (give ``group_size`` to
        :func:`~bayes_scalerl.fit` to choose).
    max_in_flight : int, optional
        Most chunks submitted and not yet collected (bounds the object store's share of
        draws; default: twice the tasks the cluster can run at once, at least 2).
    **remote_options
        Other ``ray.remote`` options (``resources``, ``runtime_env``, ``max_retries``...).
    """

    n_devices = 1  # a chunk is laid out for one device; the worker spreads its groups itself

    def __init__(
        self,
        *,
        num_cpus: float = 1,
        num_gpus: float = 0,
        max_in_flight: int | None = None,
        **remote_options: Any,
    ):
        self.options = {"num_cpus": num_cpus, "num_gpus": num_gpus, **remote_options}
        self.max_in_flight = max_in_flight

    @property
    def platform(self) -> str:
        return "gpu" if self.options.get("num_gpus") else "cpu"

    def map(
        self, jobs: Iterable, model: Any, config: Any, impl: str
    ) -> Iterator[tuple[Any, dict[str, np.ndarray]]]:
        """Submit every job as a Ray task; yield ``(job, draws)`` as tasks finish."""
        try:
            import ray
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise ImportError(
                "executor='ray' needs Ray: pip install 'bayes_scalerl[ray]' (or 'ray>=2.9')"
            ) from exc
        if not ray.is_initialized():
            ray.init()
        task = ray.remote(**self.options)(run_chunk)
        limit = self.max_in_flight
        if limit is None:
            per_task = self.options.get("num_gpus") or self.options.get("num_cpus") or 1
            kind = "GPU" if self.options.get("num_gpus") else "CPU"
            limit = max(2, int(2 * ray.cluster_resources().get(kind, 1) / per_task))
        pending: dict = {}

        def collect_one():
            ready, _ = ray.wait(list(pending), num_returns=1)
            ref = ready[0]
            job = pending.pop(ref)
            # copy out of the object store so the task's memory is released with the ref
            return job, {k: np.array(v) for k, v in ray.get(ref).items()}

        for job in jobs:
            while len(pending) >= limit:
                yield collect_one()
            pending[task.remote(job, model, config, impl)] = job
        while pending:
            yield collect_one()


def resolve_executor(executor: Any, *, n_devices: int | None = None):
    """An executor from a name (``"local"``, ``"ray"``) or an executor object."""
    if isinstance(executor, str):
        if executor == "local":
            return LocalExecutor(n_devices)
        if executor == "ray":
            return RayExecutor()
        raise ValueError(f"executor must be 'local', 'ray' or an executor object, got {executor!r}")
    if not hasattr(executor, "map"):
        raise ValueError(f"executor must be 'local', 'ray' or an executor object, got {executor!r}")
    return executor
