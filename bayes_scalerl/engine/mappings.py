"""Keep the process below Linux's limit on memory mappings as compiled programs pile up.

Every XLA CPU executable JIT-links its code into its own memory mappings: measured with
jax 0.10 on Linux, one group program of the sampler adds about 1,300 entries to
``/proc/self/maps``, for as long as the program is cached. Linux's default
``vm.max_map_count`` is 65,530, so a process that compiles some fifty distinct programs
(sampler settings, bucketed shapes, devices: a long notebook session, a test suite) has
its next ``mmap`` refused and dies with a segmentation fault inside XLA. Before the
engine compiles, :func:`relieve_map_pressure` checks the count and, past a share of the
limit, drops the compiled programs it holds (and JAX's in-memory caches, which hold their
executables), so that their mappings are freed. The next call of a dropped program
compiles again, from the persistent compilation cache when it is on (under a second).
"""

from __future__ import annotations

import gc
import logging
from pathlib import Path

import jax

__all__ = ["map_count", "relieve_map_pressure"]

logger = logging.getLogger("bayes_scalerl")

#: Drop the compiled programs when the process holds this share of its mapping limit.
SHARE = 0.5


def map_count() -> tuple[int, int] | None:
    """``(mappings of this process, vm.max_map_count)``, or None where ``/proc`` has neither."""
    try:
        limit = int(Path("/proc/sys/vm/max_map_count").read_text().split()[0])
        with open("/proc/self/maps", "rb") as f:
            count = sum(1 for _ in f)
    except (OSError, ValueError, IndexError):
        return None
    return count, limit


def relieve_map_pressure(share: float = SHARE) -> bool:
    """Drop the compiled programs if the process holds over ``share`` of its mapping limit.

    Returns whether it did.
    """
    counts = map_count()
    if counts is None or counts[0] <= share * counts[1]:
        return False
    from .program import compiled_program

    compiled_program.cache_clear()
    jax.clear_caches()
    gc.collect()
    after = map_count()
    logger.info(
        "%d memory mappings of at most %d: compiled programs dropped to free them (%s now)",
        counts[0],
        counts[1],
        after[0] if after else "?",
    )
    return True
