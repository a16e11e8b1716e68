"""Using every CPU core: JAX sees one CPU device unless told otherwise."""

from __future__ import annotations

import os

import jax

__all__ = ["use_all_cpu_cores"]


def use_all_cpu_cores(n: int | None = None) -> int:
    """Expose ``n`` CPU devices (default: every core) so batches are split across cores.

    One XLA CPU device runs the sampler on one core; with N devices the fit spreads
    groups of runs over them (results do not depend on the split). Call it before JAX
    runs anything: afterwards the device count is fixed and this returns the count in
    force. Has no effect when ``XLA_FLAGS`` already sets a host device count.

    Returns
    -------
    int
        Number of CPU devices JAX will use.
    """
    flags = os.environ.get("XLA_FLAGS", "")
    if "xla_force_host_platform_device_count" not in flags:
        try:
            jax.config.update("jax_num_cpu_devices", int(n or os.cpu_count() or 1))
        except RuntimeError:  # the backend is already initialised
            pass
    return len(jax.devices("cpu"))
