"""Process-wide JAX settings, applied only where ``bayes_scalerl`` needs them.

Importing :mod:`bayes_scalerl` changes nothing in JAX's configuration. Two settings are
applied later, by the package's own entry points:

- **64-bit arithmetic.** The sampler needs float64. :func:`x64` switches JAX's
  ``jax_enable_x64`` on for the duration of a call (a context manager and a decorator,
  thread-local, as JAX's own :func:`jax.enable_x64`), so the user's own JAX code keeps
  the precision it chose: ``jnp.ones(3)`` stays float32 outside the package's calls.
- **The persistent compilation cache.** :func:`ensure_compilation_cache` switches JAX's
  persistent compilation cache on the first time a fit needs it (folder from
  ``BAYES_SCALERL_CACHE_DIR``, see :func:`set_compilation_cache`), so a second process
  loads the compiled sampler from disk instead of compiling it again. It is process-wide:
  once on, JAX caches the user's own programs that compile for more than a second too.
  :func:`set_compilation_cache` sets it explicitly at any time.

(``use_all_cpu_cores``, which must run before JAX starts its backends, is in
:mod:`bayes_scalerl.engine.devices`.)
"""

from __future__ import annotations

import contextvars
import functools
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar, overload

import jax

__all__ = [
    "CACHE_ENV",
    "compilation_cache_dir",
    "ensure_compilation_cache",
    "n_cpus",
    "phase",
    "timings",
    "set_compilation_cache",
    "x64",
]

#: Environment variable naming the persistent compilation cache folder ("" leaves JAX alone).
CACHE_ENV = "BAYES_SCALERL_CACHE_DIR"

F = TypeVar("F", bound=Callable[..., Any])

# jax >= 0.7 exports ``jax.enable_x64``; older versions have it in ``jax.experimental``.
_enable_x64 = getattr(jax, "enable_x64", None)
if _enable_x64 is None:  # pragma: no cover - depends on the installed jax
    from jax.experimental import enable_x64 as _enable_x64


# ---------------------------------------------------------------------------------------------
# 64-bit arithmetic for the package's own calls


@contextmanager
def _x64_context() -> Iterator[None]:
    with _enable_x64(True):
        yield


@overload
def x64(func: F) -> F: ...


@overload
def x64(func: None = None) -> Any: ...


def x64(func: F | None = None):
    """Run a block or a function with JAX's 64-bit mode on, then restore the caller's mode.

    ``with x64(): ...`` runs a block in float64; ``@x64`` (or ``@x64()``) decorates a
    function. The setting is JAX's thread-local ``jax.enable_x64`` context, so it applies to
    the calls inside the block only (jit-compiled functions traced there are traced in
    float64; JAX keys its compilation cache on the mode, so the same function called
    outside compiles its own float32 version). Nested uses are fine.

    Parameters
    ----------
    func : callable, optional
        The function to decorate. Without it, a context manager is returned (which can
        itself decorate a function).

    Returns
    -------
    callable or context manager
        The decorated function, or a context manager.

    Examples
    --------
    >>> import jax.numpy as jnp
    >>> from bayes_scalerl import runtime
    >>> with runtime.x64():
    ...     print(jnp.ones(1).dtype)
    float64
    """
    if func is None:
        return _x64_context()
    if not callable(func):
        raise TypeError(f"x64 decorates a function, got {type(func).__name__}")

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        with _enable_x64(True):
            return func(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


# ---------------------------------------------------------------------------------------------
# persistent compilation cache

_CACHE_LOCK = threading.Lock()
_CACHE_STATE = {"decided": False}


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
    machine), which skips the sampler's compilation (tens of seconds on a CPU). Without a
    call, the first fit of a process calls :func:`ensure_compilation_cache`, which uses
    the ``BAYES_SCALERL_CACHE_DIR`` environment variable or the default folder. A call
    here takes precedence over that: the first fit then leaves the setting alone. It
    does not start JAX's backends, so :func:`~bayes_scalerl.use_all_cpu_cores` still works
    afterwards.

    The cache is trusted code: do not point it at a folder others can write to.

    Parameters
    ----------
    path : str, os.PathLike or None
        Cache folder (created on first write); ``"default"`` for
        ``~/.cache/bayes_scalerl/jax`` (``$XDG_CACHE_HOME`` is honoured), ``None`` or ``""``
        to turn the cache off.

    Returns
    -------
    str or None
        The folder now in use, or ``None``.
    """
    with _CACHE_LOCK:
        _CACHE_STATE["decided"] = True
        return _apply_cache(path)


def _apply_cache(path: str | os.PathLike | None) -> str | None:
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


def ensure_compilation_cache() -> str | None:
    """Switch the persistent compilation cache on, once per process, unless told otherwise.

    The package's fitting entry points call this before they compile the sampler; it
    decides once and does nothing on later calls:

    - ``BAYES_SCALERL_CACHE_DIR`` set to a folder: the cache goes there;
    - ``BAYES_SCALERL_CACHE_DIR`` set to the empty string: JAX's own settings are left alone;
    - unset: JAX's own settings are left alone if the process already set
      ``jax_compilation_cache_dir`` (e.g. through ``JAX_COMPILATION_CACHE_DIR``), else the
      cache goes to ``~/.cache/bayes_scalerl/jax`` (``$XDG_CACHE_HOME`` is honoured);
    - after an explicit :func:`set_compilation_cache`, nothing changes.

    Returns
    -------
    str or None
        The cache folder in use afterwards, or ``None`` when the cache is off.
    """
    with _CACHE_LOCK:
        if not _CACHE_STATE["decided"]:
            _CACHE_STATE["decided"] = True
            env = os.environ.get(CACHE_ENV)
            if env == "":
                pass  # turned off: JAX's own settings stand
            elif env is None and jax.config.jax_compilation_cache_dir:
                pass  # the user configured JAX's cache already
            else:
                _apply_cache(env or "default")
    return compilation_cache_dir()


# ---------------------------------------------------------------------------------------------
# host threads


def n_cpus() -> int:
    """CPU cores this process may run on (its affinity mask where the OS has one)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - macOS and Windows have no affinity call
        return max(1, os.cpu_count() or 1)


# ---------------------------------------------------------------------------------------------
# where a command's time goes

_TIMINGS: contextvars.ContextVar[tuple[dict[str, float], list[float]] | None] = contextvars.ContextVar(
    "bayes_scalerl_timings", default=None
)


@contextmanager
def timings() -> Iterator[dict[str, float]]:
    """Collect the seconds spent in each :func:`phase` inside the block.

    Yields a dict, filled as phases end, of ``name -> seconds``, exclusive of the phases
    nested in it (so the values add up to the time the phases cover). Outside such a
    block :func:`phase` costs nothing.

    Examples
    --------
    >>> with timings() as t:                 # doctest: +SKIP
    ...     res = bs.fit(runs)
    >>> t                                     # doctest: +SKIP
    {'load programs': 1.9, 'sample': 28.1, 'assemble': 0.6}
    """
    out: dict[str, float] = {}
    token = _TIMINGS.set((out, []))
    try:
        yield out
    finally:
        _TIMINGS.reset(token)


@contextmanager
def phase(name: str) -> Iterator[None]:
    """Time the block as ``name`` in the enclosing :func:`timings` (if any)."""
    state = _TIMINGS.get()
    if state is None:
        yield
        return
    out, stack = state
    stack.append(0.0)  # time of the phases nested in this one
    t0 = time.perf_counter()
    try:
        yield
    finally:
        took = time.perf_counter() - t0
        nested = stack.pop()
        out[name] = out.get(name, 0.0) + took - nested
        if stack:
            stack[-1] += took
