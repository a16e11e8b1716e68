"""Writing files and output folders atomically.

Files written atomically (a temporary file or folder, then a rename) get the permissions a
plain ``open(path, "w")`` would give them, ``0o666`` less the process umask: the temporary
files of :mod:`tempfile` are private (``0o600``) and would otherwise keep that mode.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["atomic_output_dir", "atomic_file", "new_file_mode"]


def _umask() -> int:
    """The process umask, read without changing it where the system allows."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)  # elsewhere: set and restore (not atomic with other threads)
    os.umask(mask)
    return mask


def new_file_mode() -> int:
    """Permission bits of a newly created file: ``0o666`` less the process umask."""
    return 0o666 & ~_umask()


def _give_default_mode(path: Path, mode: int) -> None:
    """Give ``path`` (a file, or a folder and everything in it) the permissions of a new file."""
    if path.is_symlink():
        return
    if path.is_dir():
        os.chmod(path, (mode | ((mode & 0o444) >> 2)) & 0o777)  # r -> r-x on folders
        for item in path.iterdir():
            _give_default_mode(item, mode)
    else:
        os.chmod(path, mode)


def _check_folder_target(out: Path) -> None:
    if out.exists() and not out.is_dir():
        raise FileExistsError(f"{out}: exists and is not a folder; choose another output folder.")
    for parent in out.parents:
        if parent.exists():
            if not parent.is_dir():
                raise NotADirectoryError(f"{out}: {parent} is a file, not a folder.")
            break


@contextmanager
def atomic_output_dir(out: str | os.PathLike) -> Iterator[Path]:
    """Write into a temporary folder beside ``out``; move the files in only on success.

    Existing files in ``out`` that the job does not write are left alone; on an
    exception nothing in ``out`` changes and the temporary folder is removed. The files
    moved in get the permissions of a new file (``0o666`` less the umask), whatever mode
    the code that wrote them used for its own temporary files.

    Raises
    ------
    FileExistsError
        If ``out`` exists and is not a folder (checked before anything is written).
    NotADirectoryError
        If a parent of ``out`` is a file.
    """
    out = Path(out)
    _check_folder_target(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent))
    try:
        yield tmp
        mode = new_file_mode()
        out.mkdir(exist_ok=True)
        for item in tmp.iterdir():
            _give_default_mode(item, mode)
            os.replace(item, out / item.name)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@contextmanager
def atomic_file(path: str | os.PathLike) -> Iterator[Path]:
    """Write ``path`` through a temporary file beside it, renamed into place on success.

    Yields the temporary path to write to (it exists, empty). On success it gets the
    permissions of a new file (``0o666`` less the umask) and replaces ``path``; on an
    exception it is removed and ``path`` is unchanged.

    Examples
    --------
    >>> with atomic_file("fit.nc") as tmp:  # doctest: +SKIP
    ...     result.dt.to_netcdf(tmp, engine="h5netcdf")
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        os.chmod(tmp, new_file_mode())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
