"""The machine and the versions a benchmark ran on: the two lines of every results header.

The benchmarks are scripts, not a package; each one puts this folder on ``sys.path`` and
imports from here::

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from environment import machine_line, versions_line  # noqa: E402

JAX, NumPyro and the package are imported inside the functions, so importing this module
starts no backend (a script may still call :func:`bayes_scalerl.use_all_cpu_cores` after it).
"""

from __future__ import annotations

import os
import platform
import shlex
import sys
from pathlib import Path

__all__ = ["machine_line", "versions_line", "environment_lines", "header_lines", "write_results"]


def _cpu_model() -> str:
    """The CPU's model name from ``/proc/cpuinfo``, else what :mod:`platform` knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _memory_gib() -> float | None:
    """The machine's memory in GiB from ``/proc/meminfo`` (``MemTotal``), or ``None``."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) / 2**20  # kB to GiB
    except (OSError, ValueError, IndexError):
        pass
    return None


def machine_line() -> str:
    """The header's machine line: CPU model, cores, memory and JAX devices.

    The CPU model is ``/proc/cpuinfo``'s ``model name`` where that file is readable, else
    :func:`platform.processor` or :func:`platform.machine`; the memory is ``/proc/meminfo``'s
    ``MemTotal`` and is left out where that file cannot be read.

    Returns
    -------
    str
        ``"Machine: <CPU model>, <n> CPU cores, <m> GiB memory, <k> JAX device(s) (<platform>)."``
    """
    import jax

    devices = jax.devices()
    mem = _memory_gib()
    parts = [_cpu_model(), f"{os.cpu_count()} CPU cores"]
    if mem is not None:
        parts.append(f"{mem:.0f} GiB memory")
    parts.append(f"{len(devices)} JAX device(s) ({devices[0].platform})")
    return f"Machine: {', '.join(parts)}."


def versions_line() -> str:
    """The header's versions line: Python, JAX, NumPyro and the package.

    Returns
    -------
    str
        ``"Versions: python <x>, jax <y>, numpyro <z>, bayes_scalerl <w>."``
    """
    import jax
    import numpyro

    import bayes_scalerl as bs

    return (
        f"Versions: python {platform.python_version()}, jax {jax.__version__}, "
        f"numpyro {numpyro.__version__}, bayes_scalerl {bs.__version__}."
    )


def environment_lines() -> list[str]:
    """Both header lines, the machine's then the versions'.

    Returns
    -------
    list of str
        ``[machine_line(), versions_line()]``.
    """
    return [machine_line(), versions_line()]


def header_lines(title: str, script: str, seconds: float) -> list[str]:
    """A results file's header: title, the command as run, machine, versions and wall time.

    Parameters
    ----------
    title : str
        The Markdown title (without ``#``).
    script : str
        The script's path as the command shows it, for example ``"benchmarks/x.py"``.
    seconds : float
        The wall time.

    Returns
    -------
    list of str
        Lines ending with a blank one.
    """
    command = " ".join(shlex.quote(a) for a in [script, *sys.argv[1:]])
    return [
        f"# {title}",
        "",
        f"Command: `python {command}`",
        "",
        *environment_lines(),
        f"Wall time {seconds:.0f} s.",
        "",
    ]


def write_results(text: str, out: str | os.PathLike | None) -> None:
    """Print a results file's text and, when ``out`` is given, write it there atomically.

    The file is written through :func:`bayes_scalerl.data.files.atomic_file` (a temporary file
    beside it, renamed into place), so a failed write leaves the old file as it was.

    Parameters
    ----------
    text : str
        The whole file, written as it is (in UTF-8): nothing is added.
    out : str, os.PathLike or None
        The file to write; ``None`` only prints.
    """
    from bayes_scalerl.data.files import atomic_file

    print(text)
    if out is not None:
        with atomic_file(out) as tmp:
            tmp.write_text(text, encoding="utf-8")
