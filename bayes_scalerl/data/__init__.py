"""The data layer: training curves as validated tables, read from files and logs.

It owns :class:`~.runs.Runs` (a validated table of curves, its fit windows and
:class:`~.runs.DataError`, :mod:`.runs`), the readers that turn CSV/Parquet tables and
training logs (verl, TensorBoard, W&B exports) into runs (:mod:`.readers`, :mod:`.tables`),
and the atomic writing of files and output folders that the layers above use for
checkpoints, fit folders and reports (:mod:`.files`). It is the bottom layer: it imports
nothing else from the package.
"""

from .files import atomic_file, atomic_output_dir, new_file_mode
from .noise import noise_correlation
from .readers import FORMATS, read_any, read_table, read_tensorboard, read_verl, read_wandb_csv
from .runs import OPTIONAL_COLUMNS, REQUIRED_COLUMNS, DataError, FitWindow, Runs, in_likelihood
from .tables import read_runs

__all__ = [
    "DataError",
    "FORMATS",
    "FitWindow",
    "OPTIONAL_COLUMNS",
    "REQUIRED_COLUMNS",
    "Runs",
    "atomic_file",
    "atomic_output_dir",
    "in_likelihood",
    "new_file_mode",
    "noise_correlation",
    "read_any",
    "read_runs",
    "read_table",
    "read_tensorboard",
    "read_verl",
    "read_wandb_csv",
]
