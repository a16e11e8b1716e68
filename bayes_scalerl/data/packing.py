"""Each run's selected points moved to the front of its row, in order, without a loop over runs.

Curves are stored as ``(run, point)`` arrays with a boolean mask of the points that count
(fitted, kept after the cutoffs, finite). Several steps need the selected points
contiguous: the fit window, the noise estimate's differences, the spacing of evaluations,
the decline's windows. :func:`packing` computes the gather once;
:func:`pack` applies it to any array of the same shape.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

__all__ = ["Packing", "packing", "pack"]


class Packing(NamedTuple):
    """Where each packed position reads from.

    Attributes
    ----------
    take : ndarray of int, shape (run, width)
        Source column of each packed position; beyond a run's count it repeats the
        run's last selected column (its first column when it has none).
    count : ndarray of int, shape (run,)
        Selected points per run.
    keep : ndarray of bool, shape (run, width)
        True at the packed positions that hold a selected point.
    """

    take: np.ndarray
    count: np.ndarray
    keep: np.ndarray


def packing(mask: np.ndarray, width: int | None = None) -> Packing:
    """The gather that moves each row's selected points to its front, in their order.

    Parameters
    ----------
    mask : array_like of bool, shape (run, point)
        The points to keep.
    width : int, optional
        Columns of the packed arrays (default ``point``); may be larger than ``point``.

    Returns
    -------
    Packing
    """
    mask = np.asarray(mask, bool)
    if mask.ndim != 2:
        raise ValueError(f"mask must be (run, point), got shape {mask.shape}")
    width = mask.shape[1] if width is None else int(width)
    count = mask.sum(axis=1)
    order = np.argsort(~mask, axis=1, kind="stable")  # selected columns first, in order
    pos = np.minimum(np.arange(width)[None, :], np.maximum(count[:, None] - 1, 0))
    take = np.take_along_axis(order, pos, axis=1)
    keep = np.arange(width)[None, :] < count[:, None]
    return Packing(take, count, keep)


def pack(a: np.ndarray, p: Packing, fill: float | None = None) -> np.ndarray:
    """``a`` gathered by ``p``: each row's selected values first.

    Parameters
    ----------
    a : array_like, shape (run, point)
    p : Packing
        From :func:`packing` on a mask of ``a``'s shape.
    fill : float, optional
        Value beyond each run's count; default None repeats the run's last selected value.

    Returns
    -------
    ndarray, shape (run, width)
    """
    out = np.take_along_axis(np.asarray(a), p.take, axis=1)
    if fill is None:
        return out
    return np.where(p.keep, out, fill)
