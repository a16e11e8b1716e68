"""The sampling engine: lane-queue NUTS over any :class:`~bayes_scalerl.models.base.BatchedModel`.

:func:`sample_window` lays a batch of runs out in chunks and groups, runs one compiled
program per group (:mod:`.program`, built on the lane-queue NUTS kernel of :mod:`.nuts`)
on every local device or over Ray (:mod:`.executors`), and writes finished chunks to a
checkpoint folder (:mod:`.checkpoint`). The engine also owns the process-wide JAX settings
the package's calls run under, 64-bit mode and the persistent compilation cache
(:mod:`.runtime`), and the count of CPU devices (:mod:`.devices`). It knows a model only
through the ``BatchedModel`` protocol; it imports :mod:`bayes_scalerl.data` (atomic files)
and, lazily, the default sigmoid model from :mod:`bayes_scalerl.models`.
"""

from .checkpoint import CheckpointMismatch, ChunkStore
from .devices import use_all_cpu_cores
from .driver import ChunkJob, padded_inputs, sample_window
from .executors import LocalExecutor, RayExecutor, resolve_executor, run_chunk
from .nuts import NutsSettings, sample_queue
from .program import STATS, SamplerConfig, compiled_program, trace_count
from .retry import Retry, sample_retrying
from .runtime import CACHE_ENV, compilation_cache_dir, ensure_compilation_cache, set_compilation_cache, x64

__all__ = [
    "CACHE_ENV",
    "STATS",
    "CheckpointMismatch",
    "ChunkJob",
    "ChunkStore",
    "LocalExecutor",
    "NutsSettings",
    "RayExecutor",
    "Retry",
    "SamplerConfig",
    "compilation_cache_dir",
    "compiled_program",
    "ensure_compilation_cache",
    "padded_inputs",
    "resolve_executor",
    "run_chunk",
    "sample_queue",
    "sample_retrying",
    "sample_window",
    "set_compilation_cache",
    "trace_count",
    "use_all_cpu_cores",
    "x64",
]
