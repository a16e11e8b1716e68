"""Reading run tables from files and writing output folders atomically."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pandas as pd

from .data import DataError, Runs

__all__ = ["read_runs", "atomic_output_dir"]


def read_runs(path: str | os.PathLike) -> Runs:
    """Read and validate a CSV or Parquet file of runs (``run, compute, reward``, ...).

    Raises
    ------
    DataError
        If the file is missing, unreadable, of an unknown type, or its table is invalid;
        the message names the file.
    """
    path = Path(path)
    if not path.exists():
        raise DataError(f"{path}: no such file.")
    suffix = path.suffix.lower()
    try:
        if suffix in (".csv", ".txt"):
            frame = pd.read_csv(path)
        elif suffix in (".parquet", ".pq"):
            frame = pd.read_parquet(path)
        else:
            raise DataError(f"{path}: unknown file type {suffix!r}; use .csv or .parquet.")
    except DataError:
        raise
    except Exception as exc:  # parser errors of every kind
        raise DataError(f"{path}: could not be read ({type(exc).__name__}: {exc}).") from exc
    return Runs.from_frame(frame, source=str(path))


@contextmanager
def atomic_output_dir(out: str | os.PathLike) -> Iterator[Path]:
    """Write into a temporary folder beside ``out``; move the files in only on success.

    Existing files in ``out`` that the job does not write are left alone; on an
    exception nothing in ``out`` changes and the temporary folder is removed.
    """
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent))
    try:
        yield tmp
        out.mkdir(exist_ok=True)
        for item in tmp.iterdir():
            os.replace(item, out / item.name)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
