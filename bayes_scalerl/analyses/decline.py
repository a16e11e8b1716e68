"""Runs whose reward falls during training: what the rising ScaleRL curve cannot describe.

The sigmoid only rises (or stays flat). A run that collapses, or drifts down after a
peak, is still fitted, as a curve that has plateaued at the peak's level or not at all,
and only a wide posterior or a convergence warning shows that something is off.
:func:`decline` says it in words: for each run, the drop from the best smoothed level of
its fitted points to the mean of its last fitted points, and whether that drop is larger
than its noise can explain.

The rule (one pass over the padded arrays, no loop over runs): with ``k = max(3, n // 4)``
of a run's ``n`` fitted points, the drop is the highest mean of ``k`` consecutive points
minus the mean of the last ``k``. The noise sd comes from successive differences (their
median absolute value / (0.6745 sqrt 2), robust to the trend). The difference of two
window means has sd ``sd sqrt(2 / k)``, and the best of a run's windows is chosen after the
fact, so a run *falls* when the drop exceeds 4 of those sds **and** 0.02 (two points of pass
rate, the paper's margin): on 1,000 simulated rising or flat runs with noise sd 0.006-0.02,
none was called.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import xarray as xr

from ..data.packing import pack, packing

__all__ = ["decline", "decline_arrays", "MIN_DROP"]

#: Smallest drop (in reward) reported as a fall.
MIN_DROP = 0.02
_NOISE_Z = 4.0


def _packed(c: np.ndarray, y: np.ndarray, fitted: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each run's fitted points first (compute, reward), NaN after; and their count."""
    p = packing(fitted)
    return pack(c, p, np.nan), pack(y, p, np.nan), p.count


def decline(dt: xr.DataTree) -> pd.DataFrame:
    """How far each run's fitted reward falls from its best level (see the module docstring).

    Parameters
    ----------
    dt : xarray.DataTree
        A fit's DataTree (``FitResult.dt``): ``observed_data`` and ``constant_data``.

    Returns
    -------
    pandas.DataFrame
        One row per run: ``run``, ``drop`` (best window mean minus the last window's,
        in reward; 0 when the last window is the best), ``peak_compute`` (compute at the
        middle of the best window), ``noise_sd`` and ``falls`` (the drop is beyond noise
        and at least :data:`MIN_DROP`).
    """
    cd = dt["constant_data"]
    return decline_arrays(
        np.asarray(cd["compute"].values, float),
        np.asarray(dt["observed_data"]["reward"].values, float),
        np.asarray(cd["in_fit"].values, bool),
        [str(r) for r in dt["posterior"]["run"].values],
    )


def decline_arrays(compute: np.ndarray, reward: np.ndarray, fitted: np.ndarray, names) -> pd.DataFrame:
    """:func:`decline` of NaN-padded (run, point) arrays of sorted evaluations.

    ``fitted`` marks the points in the likelihood; ``names`` are the runs' names.
    """
    c, y, n = _packed(np.asarray(compute, float), np.asarray(reward, float), np.asarray(fitted, bool))
    n_runs, width = y.shape
    k = np.maximum(3, n // 4)
    # window means of k consecutive points, every start, from cumulative sums
    cs = np.concatenate([np.zeros((n_runs, 1)), np.cumsum(np.nan_to_num(y), axis=1)], axis=1)
    start = np.arange(width)[None, :]
    end = start + k[:, None]
    ok = end <= n[:, None]
    means = (np.take_along_axis(cs, np.minimum(end, width), axis=1) - cs[:, :width]) / k[:, None]
    means = np.where(ok, means, -np.inf)
    best = means.argmax(axis=1)
    rows = np.arange(n_runs)
    last = (cs[rows, n] - cs[rows, np.maximum(n - k, 0)]) / k
    drop = np.maximum(means[rows, best] - last, 0.0)
    diffs = np.abs(np.diff(y, axis=1))
    noise = np.nanmedian(np.where(np.isfinite(diffs), diffs, np.nan), axis=1) / (0.6745 * np.sqrt(2.0))
    mid = np.minimum(best + k // 2, np.maximum(n - 1, 0))
    enough = n >= 6
    falls = enough & (drop > np.maximum(MIN_DROP, _NOISE_Z * noise * np.sqrt(2.0 / k)))
    return pd.DataFrame(
        {
            "run": [str(r) for r in names],
            "drop": np.where(enough, drop, 0.0),
            "peak_compute": c[rows, mid],
            "noise_sd": noise,
            "falls": falls,
        }
    )
