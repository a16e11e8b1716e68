"""The runs container: ragged training curves, validated once, padded on demand.

A :class:`Runs` holds a tidy table with one row per evaluation (``run``, ``compute``,
``reward`` and the optional ``recipe``, ``seed``, ``task``, ``n_eval``), sorted by run
and compute. :meth:`Runs.window` turns it into padded arrays with a leading run axis
and a mask, the form every compiled function takes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import pandas as pd

from .packing import pack, packing

__all__ = ["Runs", "FitWindow", "DataError", "in_likelihood", "REQUIRED_COLUMNS", "OPTIONAL_COLUMNS"]

REQUIRED_COLUMNS = ("run", "compute", "reward")
OPTIONAL_COLUMNS = ("recipe", "seed", "task", "n_eval")
#: Fewest points a run needs in the likelihood (A, B, C_mid and sigma are free).
MIN_POINTS = 4


class DataError(ValueError):
    """Invalid input data; the message names the source, run, column and value."""


def _where(source: str, run: object | None = None, column: str | None = None) -> str:
    parts = [source]
    if run is not None:
        parts.append(f"run {run!r}")
    if column is not None:
        parts.append(f"column {column!r}")
    return ", ".join(parts)


def in_likelihood(
    compute: np.ndarray,
    *,
    min_compute: float | None = None,
    fit_until: float | None = None,
    R0_fitted: bool = False,
) -> np.ndarray:
    """Which of one run's sorted evaluations enter the likelihood.

    Points below ``min_compute`` or above ``fit_until`` are left out. The first
    evaluation sets ``R0`` and is left out unless ``R0_fitted``; with ``R0_fitted`` it is
    kept even below ``min_compute``, as the measurement of ``R0`` (``min_compute`` leaves
    the early transient out, not the start). A 2-D ``compute`` holds one run per row
    (NaN-padded: padding is never kept).
    """
    compute = np.asarray(compute, float)
    keep = ~np.isnan(compute)
    first = keep[..., 0].copy()
    if min_compute is not None:
        keep &= compute >= min_compute
    if fit_until is not None:
        keep &= compute <= fit_until
        first &= compute[..., 0] <= fit_until
    keep[..., 0] = first & R0_fitted
    return keep


def _split_tasks(df: pd.DataFrame, source: str) -> tuple[pd.DataFrame, pd.Series]:
    """Name one curve per ``(run, task)``; keep the training run in ``training_run``."""
    n_tasks = df.groupby("run", sort=False)["task"].nunique()
    multi = df["run"].map(n_tasks) > 1
    curve = df["run"].where(~multi, df["run"] + ":" + df["task"])
    clash = set(curve[multi]) & set(df.loc[~multi, "run"])
    if clash:
        name = sorted(clash)[0]
        raise DataError(
            f"{_where(source, name, 'run')}: the curve name {name!r} of a run with several tasks "
            "is also a run's name; rename one of them."
        )
    if "training_run" not in df.columns:
        df["training_run"] = df["run"]
    df["run"] = curve
    return df, curve


class FitWindow(NamedTuple):
    """Padded arrays of the points each run fits, with a leading run axis.

    Attributes
    ----------
    compute : ndarray, shape (run, point)
        Compute of each point (padding repeats the last real point).
    reward : ndarray, shape (run, point)
        Observed reward.
    mask : ndarray of bool, shape (run, point)
        True where the point is in the likelihood.
    R0 : ndarray, shape (run,)
        The run's first evaluation (used when ``R0`` is not fitted).
    c_ref : ndarray, shape (run,)
        The largest compute in each run's likelihood (the default prior median of ``C_mid``).
    n_eval : ndarray, shape (run, point), optional
        Graded generations behind each point (the ``n_eval`` column; NaN without it).
    rho : ndarray, shape (run,), optional
        The fixed AR(1) correlation of each run's errors (``Priors(likelihood="ar1",
        rho=...)``): data of the sampler's program, not part of it, so that fits with other
        values reuse one compiled program.
    ou : ndarray, shape (run, 2), optional
        Each run's smooth departures from the sigmoid, ``(kappa, ell)``
        (``Priors(shape_noise=...)``): data of the program, like ``rho``.
    step : ndarray, shape (run, point), optional
        The training step of each point (the ``step`` column; NaN where unknown), which
        the AR(1) noise's lags count in (:func:`~bayes_scalerl.models.shape_noise.ar1_lags`).
    prior : ndarray, shape (run, 4) or (run, 6), optional
        Each run's own prior of ``log B`` (median, sd) and ``log C_mid`` (median in log
        compute, sd), and with ``Priors(from_batch="ceiling")`` of ``A`` (location and
        scale of a normal truncated to ``(R0, 1)``), learnt from the batch
        (:mod:`~bayes_scalerl.models.population`): data of the program, like ``rho``.
    """

    compute: np.ndarray
    reward: np.ndarray
    mask: np.ndarray
    R0: np.ndarray
    c_ref: np.ndarray
    n_eval: np.ndarray | None = None
    rho: np.ndarray | None = None
    ou: np.ndarray | None = None
    step: np.ndarray | None = None
    prior: np.ndarray | None = None


@dataclass(frozen=True)
class Runs:
    """Validated ragged training curves.

    Build it with :meth:`from_frame` (or :func:`bayes_scalerl.read_runs` for files);
    the constructor does not validate.

    Attributes
    ----------
    table : pandas.DataFrame
        One row per evaluation, sorted by ``run`` then ``compute``; ``run`` is a string.
    source : str
        Where the table came from, for error messages.
    notes : tuple of str
        What the reader skipped or assumed (shown by the CLI), empty for a clean table.

    A curve is one ``run`` (or, with a ``task`` column, one ``(run, task)`` pair): a
    run evaluated on several tasks becomes one curve per task, named ``"run:task"``,
    with the original name kept in the ``training_run`` column.
    """

    table: pd.DataFrame
    source: str = "<DataFrame>"
    notes: tuple[str, ...] = ()

    # ------------------------------------------------------------------ building
    @classmethod
    def from_frame(
        cls, frame: pd.DataFrame, *, source: str = "<DataFrame>", notes: tuple[str, ...] | list[str] = ()
    ) -> Runs:
        """Validate a tidy table and build :class:`Runs`.

        Parameters
        ----------
        frame : pandas.DataFrame
            One row per evaluation with columns ``run``, ``compute``, ``reward`` and
            optionally ``recipe``, ``seed``, ``task``, ``n_eval``. Other columns are kept.
            Rows may be in any order.
        source : str
            Name used in error messages (a file path, say).
        notes : sequence of str
            What a reader skipped or assumed, kept with the runs and shown to the user.

        Raises
        ------
        DataError
            On an empty table, a missing column, a non-numeric, NaN or infinite value,
            reward outside ``[0, 1]``, negative compute, or a duplicate ``(run, compute)``.
        """
        notes = list(notes)
        if not isinstance(frame, pd.DataFrame):
            raise DataError(f"{source}: expected a pandas DataFrame, got {type(frame).__name__}.")
        if len(frame) == 0:
            raise DataError(f"{source}: the table is empty (no evaluations).")
        missing = [c for c in REQUIRED_COLUMNS if c not in frame.columns]
        if missing:
            raise DataError(
                f"{source}: missing required column(s) {', '.join(map(repr, missing))}; "
                f"found {', '.join(map(repr, map(str, frame.columns)))}."
            )
        df = frame.copy()
        if df["run"].isna().any():
            row = int(np.flatnonzero(df["run"].isna().to_numpy())[0])
            raise DataError(f"{_where(source, None, 'run')}: missing run name in row {row}.")
        df["run"] = df["run"].astype(str)
        numeric = ["compute", "reward"] + [c for c in ("n_eval",) if c in df.columns]
        for col in numeric:
            values = pd.to_numeric(df[col], errors="coerce")
            bad = values.isna() & ~df[col].isna()
            if bad.any():
                i = int(np.flatnonzero(bad.to_numpy())[0])
                raise DataError(
                    f"{_where(source, df['run'].iloc[i], col)}: non-numeric value "
                    f"{df[col].iloc[i]!r} (row {i})."
                )
            arr = values.to_numpy(dtype=float)
            nonfinite = ~np.isfinite(arr)
            if nonfinite.any():
                i = int(np.flatnonzero(nonfinite)[0])
                raise DataError(
                    f"{_where(source, df['run'].iloc[i], col)}: value {df[col].iloc[i]!r} "
                    f"(row {i}) is not a finite number."
                )
            df[col] = arr
        reward = df["reward"].to_numpy()
        out = (reward < 0) | (reward > 1)
        if out.any():
            i = int(np.flatnonzero(out)[0])
            raise DataError(
                f"{_where(source, df['run'].iloc[i], 'reward')}: value {reward[i]!r} (row {i}) "
                "is outside [0, 1]."
            )
        compute = df["compute"].to_numpy()
        neg = compute < 0
        if neg.any():
            i = int(np.flatnonzero(neg)[0])
            raise DataError(
                f"{_where(source, df['run'].iloc[i], 'compute')}: value {compute[i]!r} (row {i}) "
                "is negative (compute 0 is the evaluation before training)."
            )
        if "n_eval" in df.columns:
            n_eval = df["n_eval"].to_numpy()
            bad = (n_eval < 1) | (n_eval != np.round(n_eval))
            if bad.any():
                i = int(np.flatnonzero(bad)[0])
                raise DataError(
                    f"{_where(source, df['run'].iloc[i], 'n_eval')}: value {n_eval[i]!r} "
                    f"(row {i}) is not a positive whole number."
                )
        key = ["run", "task", "compute"] if "task" in df.columns else ["run", "compute"]
        if "task" in df.columns:
            df["task"] = df["task"].astype(str)
        dup = df.duplicated(key, keep="first")
        if dup.any():
            i = int(np.flatnonzero(dup.to_numpy())[0])
            raise DataError(
                f"{_where(source, df['run'].iloc[i], 'compute')}: duplicate value "
                f"{compute[i]!r} (row {i}); each ({', '.join(key)}) may appear once."
            )
        frame_runs = df["run"]
        if "task" in df.columns:
            df, frame_runs = _split_tasks(df, source)
        df = df.sort_values(["run", "compute"], kind="stable").reset_index(drop=True)
        # keep runs in order of first appearance, as users listed them
        order = pd.unique(frame_runs)
        df["run"] = pd.Categorical(df["run"], categories=order, ordered=True)
        df = df.sort_values(["run", "compute"], kind="stable").reset_index(drop=True)
        df["run"] = df["run"].astype(str)
        return cls(df, source, tuple(notes))

    # ------------------------------------------------------------------ views
    @property
    def names(self) -> list[str]:
        """Run names, in the order they first appear in the input."""
        return list(pd.unique(self.table["run"]))

    @property
    def n_runs(self) -> int:
        """Number of runs."""
        return len(self.names)

    def run_attribute(self, column: str) -> list | None:
        """The first value of an optional column (``recipe``, ``seed``, ``task``) per run."""
        if column not in self.table.columns:
            return None
        first = self.table.groupby("run", sort=False)[column].first()
        return [first[name] for name in self.names]

    def subset(self, names: list[str]) -> Runs:
        """The runs named, in that order."""
        df = self.table[self.table["run"].isin(names)]
        cat = pd.Categorical(df["run"], categories=list(names), ordered=True)
        df = df.assign(run=cat).sort_values(["run", "compute"], kind="stable")
        return Runs(df.assign(run=df["run"].astype(str)).reset_index(drop=True), self.source, self.notes)

    def _padded_columns(self, *values: np.ndarray) -> list[np.ndarray]:
        """Per-row ``values`` as NaN-padded (run, point) arrays, runs in :attr:`names` order."""
        table = self.table
        names = self.names
        row = pd.Categorical(table["run"], categories=names).codes.astype(np.int64)
        order = np.argsort(row, kind="stable")  # rows of a run keep their order (by compute)
        sizes = np.bincount(row, minlength=len(names))
        starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        row = row[order]
        col = np.arange(len(row)) - starts[row]
        width = int(sizes.max())
        out = []
        for v in values:
            a = np.full((len(names), width), np.nan)
            a[row, col] = np.asarray(v, float)[order]
            out.append(a)
        return out

    def padded(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every evaluation as NaN-padded (run, point) arrays, runs in :attr:`names` order.

        Returns ``compute, reward, n_eval`` (``n_eval`` NaN without the column).
        """
        table = self.table
        n_eval = table["n_eval"].to_numpy(float) if "n_eval" in table.columns else np.full(len(table), np.nan)
        c, r, n = self._padded_columns(
            table["compute"].to_numpy(float), table["reward"].to_numpy(float), n_eval
        )
        return c, r, n

    def padded_step(self) -> np.ndarray | None:
        """The ``step`` column laid out as :meth:`padded` lays out ``compute`` (NaN where
        a step is missing or not a number), or None without the column."""
        if "step" not in self.table.columns:
            return None
        return self._padded_columns(pd.to_numeric(self.table["step"], errors="coerce").to_numpy(float))[0]

    def window(
        self,
        *,
        min_compute: float | None = None,
        fit_until: float | None = None,
        R0_fitted: bool = False,
        min_points: int = MIN_POINTS,
        pad_points: int | None = None,
    ) -> FitWindow:
        """Padded arrays of the points in each run's likelihood.

        Parameters
        ----------
        min_compute : float, optional
            Points with ``compute < min_compute`` leave the likelihood (the paper uses
            1.5k GPU-hours); the first evaluation still sets ``R0`` (or, with
            ``R0_fitted``, stays in the likelihood as its measurement).
        fit_until : float, optional
            Only points with ``compute <= fit_until`` are fitted.
        R0_fitted : bool
            If False the first evaluation sets ``R0`` and leaves the likelihood.
        min_points : int
            Fewest points a run must keep.
        pad_points : int, optional
            Pad the point axis to this length (at least the longest run).

        Raises
        ------
        DataError
            If a run keeps fewer than ``min_points`` points.
        """
        names = self.names
        c_all, r_all, ne_all = self.padded()
        keep = in_likelihood(c_all, min_compute=min_compute, fit_until=fit_until, R0_fitted=R0_fitted)
        n_keep = keep.sum(axis=1)
        short = np.flatnonzero(n_keep < min_points)
        if short.size:
            i = int(short[0])
            why = []
            if not R0_fitted:
                why.append("the first evaluation sets R0")
            if min_compute is not None:
                why.append(f"min_compute={min_compute:g}")
            if fit_until is not None:
                why.append(f"fit_until={fit_until:g}")
            detail = f" ({'; '.join(why)})" if why else ""
            n_all = int((~np.isnan(c_all[i])).sum())
            raise DataError(
                f"{_where(self.source, names[i], 'compute')}: run has {int(n_keep[i])} point(s) to fit "
                f"after the cutoffs{detail}, out of {n_all}; at least {min_points} are needed."
            )
        longest = int(n_keep.max())
        width = longest if pad_points is None else max(pad_points, longest)
        # each run's kept points first, in order; padding repeats its last kept point
        p = packing(keep, width)
        compute, reward, n_eval = pack(c_all, p), pack(r_all, p), pack(ne_all, p)
        s_all = self.padded_step()
        mask = p.keep
        rows = np.arange(len(names))
        return FitWindow(
            compute,
            reward,
            mask,
            r_all[:, 0].copy(),
            compute[rows, n_keep - 1],
            n_eval,
            step=None if s_all is None else pack(s_all, p),
        )
