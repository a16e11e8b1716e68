"""Reading a table of runs (CSV or Parquet) from a file into :class:`~bayes_scalerl.data.runs.Runs`."""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd

from .runs import DataError, Runs

__all__ = ["read_runs"]


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
