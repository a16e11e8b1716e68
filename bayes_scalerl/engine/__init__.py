"""The sampling engine: lane-queue NUTS over any :class:`~bayes_scalerl.models.base.BatchedModel`.

:func:`sample_window` lays a batch of runs out in chunks and groups, runs one compiled
program per group (:mod:`.program`) on every local device or over Ray (:mod:`.executors`),
and writes finished chunks to a checkpoint folder (:mod:`.checkpoint`).
"""

from .checkpoint import CheckpointMismatch, ChunkStore
from .driver import ChunkJob, padded_inputs, sample_window
from .executors import LocalExecutor, RayExecutor, resolve_executor
from .program import STATS, SamplerConfig, compiled_program, trace_count

__all__ = [
    "STATS",
    "CheckpointMismatch",
    "ChunkJob",
    "ChunkStore",
    "LocalExecutor",
    "RayExecutor",
    "SamplerConfig",
    "compiled_program",
    "padded_inputs",
    "resolve_executor",
    "sample_window",
    "trace_count",
]
