"""Backtest: can I trust the extrapolation?

Each run is fitted on its early evaluations only (compute up to a cutoff) and the
predictions of its later, held-out evaluations are scored against what was observed.
Three predictors are compared on the same points:

``bayes``
    The package's posterior predictive of a new evaluation (:func:`~bayes_scalerl.fit`,
    :meth:`~bayes_scalerl.FitResult.predict_draws` with ``kind="observation"``).
``ls``
    The paper's least-squares grid fit (:func:`~bayes_scalerl.paper_fit`): a point
    prediction, so only its absolute error is scored (the CRPS of a point is its
    absolute error; it has no intervals).
``boot``
    A residual bootstrap of the least-squares fit: the fitted curve plus resampled
    residuals is refitted ``bootstrap`` times; each predictive draw is one refitted
    curve plus one more resampled residual.

Scores (see :mod:`bayes_scalerl.analyses.scoring`): coverage of the central 50% and 90%
intervals, CRPS and the absolute error of the predictive median.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..data.runs import MIN_POINTS, DataError, Runs, in_likelihood
from ..models.curve import scalerl_curve
from ..models.priors import Priors
from ..posterior.fitting import fit, resolve_retry
from ..posterior.results import FitResult
from .baseline import paper_fit
from .scoring import crps_from_draws

__all__ = ["Backtest", "backtest", "METHODS"]

#: Methods scored by :func:`backtest`, in the order of its tables: ``bayes`` (the fit's
#: predictive: by default AR(1) noise with the batch's correlation, the calibrated
#: discrepancy and each run's priors learnt from the batch), ``gaussian`` (version 0.1's
#: default: the exact sigmoid with independent Gaussian noise and the fixed priors, fitted
#: separately on the same points and settings;
#: left out when the fit is that model already), ``ls`` (the paper's least-squares point fit) and ``boot``
#: (its residual bootstrap).
METHODS = ("bayes", "gaussian", "ls", "boot")

_QUANTILES = (0.05, 0.25, 0.5, 0.75, 0.95)
_QCOLS = ("q05", "q25", "median", "q75", "q95")
_VALUE_COLS = ("median", "q05", "q25", "q75", "q95", "covered50", "covered90", "crps", "abs_error")
#: Per-run columns carried into the tables when the runs have them.
_CARRIED = ("training_run", "task", "recipe", "seed")
#: Arguments of :func:`fit` that the backtest sets itself.
_RESERVED = ("min_compute", "fit_until", "seed")

# The default grids of :func:`bayes_scalerl.analyses.baseline.paper_fit_arrays`.
_A_STEP = 0.005
_A_LATTICE = np.round(np.arange(200) * _A_STEP, 3)  # 0.000, 0.005, ..., 0.995
_B_GRID = np.exp(np.linspace(np.log(0.05), np.log(20.0), 120))
_GAUSS_NEWTON_STEPS = 6
_CANDIDATES = 16  # C_mid values per reward vector whose B is refined
_A_SHIFTS = 3  # lattice neighbours of each candidate's A that are refined too
_DESCENT_STEPS = 200  # most lattice steps of the final descent


# ---------------------------------------------------------------------- least squares, batched
def _refine_B(Z: np.ndarray, g: np.ndarray, B: np.ndarray, d: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Least-squares ``B`` by Gauss-Newton (as :func:`.baseline._fit_B`); returns ``(B, rss)``.

    ``Z`` is ``y - R0`` with shape ``(b, 1, n)``; ``g = A - R0``, ``B`` and ``d = log c - log C_mid``
    broadcast to ``(b, k, n)`` (``g`` and ``B`` with a trailing axis of 1 for ``n``).
    """
    for _ in range(_GAUSS_NEWTON_STEPS):
        s = 0.5 * (1 + np.tanh(0.5 * B * d))
        J = g * s * (1 - s) * d
        step = np.sum(J * (Z - g * s), axis=-1, keepdims=True) / np.maximum(
            np.sum(J * J, axis=-1, keepdims=True), 1e-300
        )
        B = np.clip(B + step, _B_GRID[0], _B_GRID[-1])
    s = 0.5 * (1 + np.tanh(0.5 * B * d))
    return B, np.sum((Z - g * s) ** 2, axis=-1, keepdims=True)


def _grid_fit_batch(compute: np.ndarray, Y: np.ndarray, R0: float, *, chunk: int = 256) -> dict:
    """The paper's grid fit of one run, for many reward vectors at once.

    Same grids as :func:`~bayes_scalerl.analyses.baseline.paper_fit_arrays` (its default ``A``
    lattice, worked out per reward vector; 100 ``C_mid`` values from ``c_max / 80`` to
    ``5 c_max``; 120 log-spaced ``B`` from 0.05 to 20 refined by Gauss-Newton), with the
    search reorganised so that it vectorises over reward vectors:

    1. Given ``(B, C_mid)`` the curve is linear in ``g = A - R0``, so the residual sum of
       squares is a parabola in ``g``, minimised on the lattice by the lattice point
       nearest its vertex; over the whole ``(C_mid, B)`` grid this takes one matrix
       product (``sum z s``) and ``sum s^2``.
    2. The best ``_CANDIDATES`` grid points of each reward vector get their ``B``
       refined by Gauss-Newton with ``(A, C_mid)`` fixed, as the paper's per-pair fit.
    3. From the best of them, a descent over neighbouring ``(A, C_mid)`` lattice pairs
       (one step in ``A`` or in ``C_mid``, ``B`` refined anew) runs while it lowers the
       residual sum of squares.

    The reference fit refines ``B`` for every ``(A, C_mid)`` pair; this one reaches a
    lattice-local optimum from the best grid candidates, which is the same pair for most
    runs and otherwise one with a residual sum of squares within a fraction of a percent
    (a test compares them).

    Parameters
    ----------
    compute : ndarray, shape (n,)
        Compute of the fitted points (all > 0).
    Y : ndarray, shape (m, n)
        Reward vectors (bootstrap replicates).
    R0 : float
        Starting reward.
    chunk : int
        Reward vectors per vectorised block (bounds memory).

    Returns
    -------
    dict
        ``A, B, C_mid, rss``, each of shape ``(m,)``; NaN where the ``A`` lattice is empty.
    """
    c = np.asarray(compute, float)
    Y = np.atleast_2d(np.asarray(Y, float))
    m, n = Y.shape
    C_grid = np.linspace(c.max() / 80, 5 * c.max(), 100)
    d = np.log(c)[None, :] - np.log(C_grid)[:, None]  # (nC, n)
    n_C, n_B = len(C_grid), len(_B_GRID)
    S = (0.5 * (1 + np.tanh(0.5 * _B_GRID[None, :, None] * d[:, None, :]))).reshape(n_C * n_B, n)
    Sss = np.maximum(np.einsum("kn,kn->k", S, S), 1e-300)
    ks = np.arange(len(_A_LATTICE))
    out = {k: np.full(m, np.nan) for k in ("A", "B", "C_mid", "rss")}
    for start in range(0, m, chunk):
        Yc = Y[start : start + chunk]
        b = len(Yc)
        rows = np.arange(b)[:, None]
        ymax = Yc.max(axis=1)
        # paper_fit_arrays' default lattice: A from max(R0, max y - 0.1) (at most 0.45) to 0.8,
        # or to 0.995 when max y > 0.7, and A > R0; contiguous in the lattice index.
        lo = np.minimum(0.45, np.maximum(R0, ymax - 0.1))
        valid = (
            (ks[None, :] >= np.ceil(lo / _A_STEP)[:, None])
            & (_A_LATTICE[None, :] > R0)
            & ((_A_LATTICE <= 0.8)[None, :] | (ymax > 0.7)[:, None])
        )
        ok = valid.any(axis=1)
        k_lo = np.argmax(valid, axis=1)[:, None]
        k_hi = (len(ks) - 1 - np.argmax(valid[:, ::-1], axis=1))[:, None]
        Z = Yc - R0
        # 1. every (C_mid, B) grid point with its best lattice A
        Szs = Z @ S.T  # (b, nC * nB)
        g_star = Szs / Sss
        k = np.clip(np.rint((R0 + g_star) / _A_STEP).astype(np.int64), k_lo, k_hi)
        dg = _A_LATTICE[k] - R0 - g_star
        rss_grid = Sss * dg * dg - Szs * g_star  # the rss minus sum z^2, which is constant in b
        # 2. Gauss-Newton on B for the best grid points
        i_B = np.argmin(rss_grid.reshape(b, n_C, n_B), axis=2)  # best B of each C_mid
        per_C = np.take_along_axis(rss_grid.reshape(b, n_C, n_B), i_B[..., None], axis=2)[..., 0]
        i_C = np.argpartition(per_C, _CANDIDATES - 1, axis=1)[:, :_CANDIDATES]  # (b, K)
        top = i_C * n_B + i_B[rows, i_C]
        shifts = np.arange(-_A_SHIFTS, _A_SHIFTS + 1)
        k_top = np.clip(k[rows, top][..., None] + shifts, k_lo[..., None], k_hi[..., None]).reshape(b, -1)
        i_C = np.repeat(i_C, len(shifts), axis=1)
        B0 = np.repeat(_B_GRID[top % n_B], len(shifts), axis=1)
        B, rss = _refine_B(Z[:, None, :], (_A_LATTICE[k_top] - R0)[..., None], B0[..., None], d[i_C])
        j = np.argmin(rss[..., 0], axis=1)
        cur_k, cur_c = k_top[rows[:, 0], j], i_C[rows[:, 0], j]
        cur_B, cur_rss = B[rows[:, 0], j, 0], rss[rows[:, 0], j, 0]
        # 3. descent over neighbouring (A, C_mid) lattice pairs
        steps = np.array([[i, j] for i in (-1, 0, 1) for j in (-1, 0, 1) if i or j])
        for _ in range(_DESCENT_STEPS):
            nk = np.clip(cur_k[:, None] + steps[:, 0], k_lo, k_hi)
            nc = np.clip(cur_c[:, None] + steps[:, 1], 0, n_C - 1)
            B, rss = _refine_B(
                Z[:, None, :],
                (_A_LATTICE[nk] - R0)[..., None],
                np.broadcast_to(cur_B[:, None, None], nk.shape + (1,)),
                d[nc],
            )
            j = np.argmin(rss[..., 0], axis=1)
            new_rss = rss[rows[:, 0], j, 0]
            move = new_rss < cur_rss * (1 - 1e-12)
            if not move.any():
                break
            cur_k = np.where(move, nk[rows[:, 0], j], cur_k)
            cur_c = np.where(move, nc[rows[:, 0], j], cur_c)
            cur_B = np.where(move, B[rows[:, 0], j, 0], cur_B)
            cur_rss = np.where(move, new_rss, cur_rss)
        sl = slice(start, start + b)
        out["A"][sl] = np.where(ok, _A_LATTICE[cur_k], np.nan)
        out["B"][sl] = np.where(ok, cur_B, np.nan)
        out["C_mid"][sl] = np.where(ok, C_grid[cur_c], np.nan)
        out["rss"][sl] = np.where(ok, cur_rss, np.nan)
    return out


def _residual_bootstrap(
    c_fit: np.ndarray,
    y_fit: np.ndarray,
    R0: float,
    params: Mapping[str, float],
    c_new: np.ndarray,
    n_boot: int,
    rng: np.random.Generator,
) -> np.ndarray:
    """Predictive draws of a residual bootstrap of the least-squares fit, shape ``(len(c_new), n_boot)``.

    Residuals of the least-squares fit are centred and scaled by ``sqrt(n / (n - 3))``
    (for the three fitted parameters; the usual correction for the variance a fit absorbs,
    cf. Davison & Hinkley 1997, ch. 6, here without leverages), added
    back to the fitted curve after resampling with replacement, and each replicate is
    refitted; a predictive draw is a refitted curve plus one more resampled residual.
    """
    n = len(c_fit)
    fitted = scalerl_curve(c_fit, params["A"], params["B"], params["C_mid"], R0)
    resid = y_fit - fitted
    resid = (resid - resid.mean()) * math.sqrt(n / max(n - 3, 1))
    Y = fitted[None, :] + rng.choice(resid, size=(n_boot, n), replace=True)
    reps = _grid_fit_batch(c_fit, Y, R0)
    curves = scalerl_curve(
        c_new[:, None], reps["A"][None], reps["B"][None], reps["C_mid"][None], R0
    )  # (q, n_boot)
    noise = rng.choice(resid, size=curves.shape, replace=True)
    return np.clip(curves + noise, 0.0, 1.0)


# ---------------------------------------------------------------------- scoring draws
def _score_draws(draws: np.ndarray, y: np.ndarray) -> dict[str, np.ndarray]:
    """Quantiles, coverage, CRPS and median error of ``draws`` (point, draw) against ``y`` (point,)."""
    q = np.quantile(draws, _QUANTILES, axis=1)
    out = dict(zip(_QCOLS, q, strict=True))
    out["covered50"] = (out["q25"] <= y) & (y <= out["q75"])
    out["covered90"] = (out["q05"] <= y) & (y <= out["q95"])
    out["crps"] = crps_from_draws(draws, y)
    out["abs_error"] = np.abs(out["median"] - y)
    return out


def _score_point(pred: np.ndarray, y: np.ndarray) -> dict[str, np.ndarray]:
    """A point prediction: median = the prediction, no intervals, CRPS = absolute error."""
    nan = np.full(len(y), np.nan)
    err = np.abs(pred - y)
    return {
        "median": pred,
        "q05": nan,
        "q25": nan,
        "q75": nan,
        "q95": nan,
        "covered50": np.full(len(y), pd.NA),
        "covered90": np.full(len(y), pd.NA),
        "crps": err,
        "abs_error": err,
    }


# ---------------------------------------------------------------------- result
@dataclasses.dataclass
class Backtest:
    """Scores of extrapolations to held-out evaluations, per point and per method.

    Attributes
    ----------
    points : pandas.DataFrame
        One row per held-out evaluation and method: ``run`` (and ``training_run``,
        ``task``, ``recipe``, ``seed`` when the runs have them), ``compute``, ``reward``
        (observed), ``cutoff`` (the run's last fitted compute bound), ``method``,
        ``median, q05, q25, q75, q95`` (of the predictive draws), ``covered50`` and
        ``covered90`` (the central 50% / 90% interval holds ``reward``), ``crps`` and
        ``abs_error`` (of the median). For ``ls`` (a point prediction) ``median`` is the
        prediction, the quantiles are NaN and the coverages are missing (``pd.NA``).
    scores : pandas.DataFrame
        One row per method, ``bayes`` first: ``method, n_points, n_runs, coverage50,
        coverage90, width90`` (mean width of the 90% interval), ``crps, abs_error``
        (means over points) and ``median_abs_error``.
    runs : pandas.DataFrame
        One row per input run: ``run, max_compute, cutoff, n_fit`` (points in the
        least-squares fit window), ``n_held_out, scored`` and ``note`` (why a run was
        skipped; empty when scored).
    notes : list of str
        Runs skipped and why (too few points before the cutoff, nothing after it), and
        the notes the runs came with.
    fit : FitResult
        The Bayesian fit of the scored runs on their pre-cutoff data.
    ls_params : pandas.DataFrame
        The least-squares fit of the scored runs (:func:`~bayes_scalerl.paper_fit`).
    settings : dict
        The arguments of :func:`backtest`.
    """

    points: pd.DataFrame
    scores: pd.DataFrame
    runs: pd.DataFrame
    notes: list[str]
    fit: FitResult
    ls_params: pd.DataFrame
    settings: dict
    _chains: pd.DataFrame | None = dataclasses.field(default=None, init=False, repr=False, compare=False)

    def wide(self) -> pd.DataFrame:
        """The points, one row per held-out evaluation, with one column per method and value.

        Returns
        -------
        pandas.DataFrame
            The per-point columns (``run`` ... ``cutoff``) then ``{method}_{value}``,
            e.g. ``bayes_q05``, ``bayes_crps``, ``ls_median``, ``boot_covered90``. The
            point prediction ``ls`` has only ``ls_median``, ``ls_crps`` and ``ls_abs_error``.
        """
        key = [c for c in self.points.columns if c not in ("method",) + _VALUE_COLS]
        methods = list(pd.unique(self.points["method"]))
        base = self.points[self.points["method"] == methods[0]][key].reset_index(drop=True)
        parts = [base]
        for method in methods:
            sub = self.points[self.points["method"] == method].reset_index(drop=True)
            cols = ("median", "crps", "abs_error") if method == "ls" else _VALUE_COLS
            parts.append(sub[list(cols)].add_prefix(f"{method}_"))
        return pd.concat(parts, axis=1)

    def by_chain(self) -> pd.DataFrame:
        """The ``bayes`` band scored on each chain's draws alone.

        When a fit's chains do not mix (R-hat above 1.01), this tells whether they disagree
        about the forecast or only about something it does not depend on: chains held in
        different regions of a weakly identified posterior (far-apart ceilings of runs
        whose windows end early, say) can give the same bands over the scored horizon.
        Each chain's draws get the observation noise that they get in :attr:`points`
        (the same seed), so the chains' rows are parts of the ``bayes`` band itself.

        Returns
        -------
        pandas.DataFrame
            One row per chain: ``chain, n_points, coverage50, coverage90, width90, crps``
            (as in :attr:`scores`) and ``A_median`` (the median over runs of the chain's
            posterior median of ``A``). Computed once per result; each call returns a copy.
        """
        if self._chains is None:
            self._chains = self._score_chains()
        return self._chains.copy()

    def _score_chains(self) -> pd.DataFrame:
        pts = self.points[self.points["method"] == "bayes"].reset_index(drop=True)
        scored = list(dict.fromkeys(pts["run"]))
        draws = _bayes_draws(self.fit, pts, scored, int(self.settings["seed"]))  # point, chain * draw
        n_chain = int(self.fit.dt["posterior"].sizes["chain"])
        y = pts["reward"].to_numpy(float)
        a_med = self.fit.dt["posterior"]["A"].sel(run=scored).median("draw").median("run").values
        rows = []
        for c, block in enumerate(np.split(draws, n_chain, axis=1)):
            s = _score_draws(block, y)
            rows.append(
                {
                    "chain": c,
                    "n_points": len(y),
                    "coverage50": float(np.mean(s["covered50"])),
                    "coverage90": float(np.mean(s["covered90"])),
                    "width90": float(np.mean(s["q95"] - s["q05"])),
                    "crps": float(np.mean(s["crps"])),
                    "A_median": float(a_med[c]),
                }
            )
        return pd.DataFrame(rows)

    def write(self, out_dir: str | os.PathLike) -> Path:
        """Write ``backtest.csv`` (:meth:`wide`), ``scores.csv`` and ``chains.csv`` (:meth:`by_chain`).

        The files are written to a temporary folder and moved into ``out_dir`` only when
        all are complete (:func:`bayes_scalerl.data.files.atomic_output_dir`).

        Returns
        -------
        pathlib.Path
            ``out_dir``.
        """
        from ..data.files import atomic_output_dir

        with atomic_output_dir(out_dir) as tmp:
            self.wide().to_csv(tmp / "backtest.csv", index=False)
            self.scores.to_csv(tmp / "scores.csv", index=False)
            self.by_chain().to_csv(tmp / "chains.csv", index=False)
        return Path(out_dir)


def _summarise(points: pd.DataFrame, methods: tuple[str, ...]) -> pd.DataFrame:
    rows = []
    for method in methods:
        p = points[points["method"] == method]
        point_forecast = method == "ls"
        rows.append(
            {
                "method": method,
                "n_points": len(p),
                "n_runs": p["run"].nunique(),
                "coverage50": np.nan if point_forecast else p["covered50"].astype(float).mean(),
                "coverage90": np.nan if point_forecast else p["covered90"].astype(float).mean(),
                "width90": np.nan if point_forecast else (p["q95"] - p["q05"]).mean(),
                "crps": p["crps"].mean(),
                "abs_error": p["abs_error"].mean(),
                "median_abs_error": p["abs_error"].median(),
            }
        )
    return pd.DataFrame(rows)


# ---------------------------------------------------------------------- the backtest's steps
def _backtest_arguments(
    fit_until: float | None,
    fraction: float | None,
    bootstrap: int,
    fit_kwargs: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """Check the arguments of :func:`backtest`.

    Parameters
    ----------
    fit_until, fraction, bootstrap, fit_kwargs
        As :func:`backtest` takes them.

    Returns
    -------
    dict
        The keyword arguments of the Bayesian fit (``log_likelihood`` False unless set).

    Raises
    ------
    ValueError, TypeError
        On the arguments :func:`backtest` refuses (see there).
    """
    if (fit_until is None) == (fraction is None):
        raise ValueError("give exactly one of fit_until (a compute) and fraction (of each run's compute)")
    if fraction is not None and not (np.isfinite(fraction) and 0.0 < fraction < 1.0):
        raise ValueError(f"fraction must be in (0, 1), got {fraction!r}")
    if fit_until is not None and not (np.isfinite(fit_until) and fit_until > 0):
        raise ValueError(f"fit_until must be a positive number, got {fit_until!r}")
    if int(bootstrap) != bootstrap or bootstrap < 0:
        raise ValueError(f"bootstrap must be a non-negative integer, got {bootstrap!r}")
    kw = dict(fit_kwargs or {})
    clash = [k for k in _RESERVED if k in kw]
    if clash:
        raise TypeError(f"fit_kwargs may not set {', '.join(clash)}: the backtest sets them")
    kw.setdefault("log_likelihood", False)
    return kw


def _skip_note(
    name: str, c: np.ndarray, cutoff: float, n_fit: int, n_held: int, min_compute: float | None
) -> str:
    """Why run ``name`` cannot be backtested at ``cutoff`` (empty when it can).

    Parameters
    ----------
    name : str
    c : ndarray
        The run's compute.
    cutoff : float
    n_fit : int
        Points before the cutoff in the smaller of the two fits' likelihoods.
    n_held : int
        Evaluations after the cutoff.
    min_compute : float or None
    """
    if n_fit < MIN_POINTS:
        where = f"compute <= {cutoff:g}" + (f" and >= {min_compute:g}" if min_compute is not None else "")
        return (
            f"run {name!r} skipped: {n_fit} point(s) to fit at {where} after the first "
            f"evaluation (which sets R0), out of {len(c)}; at least {MIN_POINTS} are needed."
        )
    if n_held == 0:
        return (
            f"run {name!r} skipped: no evaluation after the cutoff {cutoff:g} (largest compute {c.max():g})."
        )
    return ""


def _cut_runs(
    table: pd.DataFrame,
    fit_until: float | None,
    fraction: float | None,
    min_compute: float | None,
    R0_fitted: bool,
) -> tuple[pd.DataFrame, np.ndarray, list[str]]:
    """Cut every run at its own cutoff.

    Parameters
    ----------
    table : pandas.DataFrame
        The runs' table, with a default index.
    fit_until, fraction, min_compute
        As :func:`backtest` takes them.
    R0_fitted : bool
        Whether the Bayesian fit fits ``R0`` (and so also fits the first evaluation).

    Returns
    -------
    run_table : pandas.DataFrame
        :attr:`Backtest.runs`.
    keep_rows : ndarray of bool
        The rows of ``table`` that both fits see (those before the cutoff of a scored run).
    notes : list of str
        Runs skipped and why.
    """
    status, keep_rows, notes = [], np.zeros(len(table), bool), []
    for name, g in table.groupby("run", sort=False):
        c = g["compute"].to_numpy(float)
        cutoff = float(fit_until) if fit_until is not None else float(fraction) * c.max()
        before = c <= cutoff
        n_ls = int(in_likelihood(c[before], min_compute=min_compute).sum())
        n_bayes = int(in_likelihood(c[before], min_compute=min_compute, R0_fitted=R0_fitted).sum())
        n_held = int((~before).sum())
        note = _skip_note(name, c, cutoff, min(n_ls, n_bayes), n_held, min_compute)
        if note:
            notes.append(note)
        else:
            keep_rows[g.index.to_numpy()[before]] = True
        status.append(
            {
                "run": name,
                "max_compute": c.max(),
                "cutoff": cutoff,
                "n_fit": n_ls,
                "n_held_out": n_held,
                "scored": not note,
                "note": note,
            }
        )
    return pd.DataFrame(status), keep_rows, notes


def _version_01(fit_kwargs: dict) -> dict | None:
    """The fit's arguments with version 0.1's model (independent Gaussian noise around the
    exact sigmoid), or ``None`` when they give that model already.

    The baseline samples failing runs again once at most (``Retry(retries=1)``, the default
    before 2026-12-06): it is scored beside the default, not reported, and its third attempt
    would sample again the runs the default's own third attempt has just sampled.
    """
    priors = fit_kwargs.get("priors") or Priors()
    if (
        priors.likelihood == "gaussian"
        and not priors.R0_fitted
        and priors.shape_noise is None
        and not priors.from_batch
        and fit_kwargs.get("discrepancy", True) in (False, None)
    ):
        return None
    retry = resolve_retry(fit_kwargs.get("retry", True))
    return {
        **fit_kwargs,
        "priors": dataclasses.replace(
            priors, likelihood="gaussian", rho="auto", R0_fitted=False, shape_noise=None, from_batch=False
        ),
        "discrepancy": False,
        "retry": retry if retry is None else retry._replace(retries=min(retry.retries, 1)),
    }


def _bayes_draws(res: FitResult, held: pd.DataFrame, scored: list[str], seed: int) -> np.ndarray:
    """Posterior predictive draws of the held-out evaluations, shape ``(point, sample)``.

    The held-out computes are laid on a ``(run, point)`` grid padded with each run's last
    compute, so that one call predicts them all.
    """
    sizes = held.groupby("run", sort=False).size().reindex(scored).to_numpy()
    grid = np.zeros((len(scored), sizes.max()))
    valid = np.arange(grid.shape[1])[None, :] < sizes[:, None]
    grid[valid] = held["compute"].to_numpy()
    grid[~valid] = np.repeat(grid[np.arange(len(scored)), sizes - 1], grid.shape[1] - sizes)
    draws = res.predict_draws(grid, kind="observation", seed=seed, runs=scored)
    return np.moveaxis(draws, 1, -1)[valid]  # point, sample


def _least_squares(
    fit_runs: Runs,
    held: pd.DataFrame,
    scored: list[str],
    min_compute: float | None,
    bootstrap: int,
    seed: int,
) -> tuple[pd.DataFrame, np.ndarray, np.ndarray]:
    """The least-squares fit, its predictions of the held-out points and its residual bootstrap.

    Parameters
    ----------
    fit_runs : Runs
        The scored runs up to their cutoffs.
    held : pandas.DataFrame
        The held-out evaluations.
    scored : list of str
        The scored runs, in the order of ``fit_runs``.
    min_compute : float or None
    bootstrap : int
        Bootstrap replicates (0: none).
    seed : int
        Seed of the bootstrap.

    Returns
    -------
    ls_params : pandas.DataFrame
        :func:`~bayes_scalerl.paper_fit` of ``fit_runs``.
    ls_pred : ndarray, shape (point,)
        Its prediction of each held-out point.
    boot_draws : ndarray, shape (point, bootstrap)
        The bootstrap's predictive draws.
    """
    ls_params = paper_fit(fit_runs, min_compute=min_compute)
    by_run = ls_params.set_index("run")
    run_of_point = held["run"].to_numpy()
    ls_pred = np.empty(len(held))
    window = fit_runs.window(min_compute=min_compute)
    rng = np.random.default_rng([seed, 20251013])
    boot_draws = np.empty((len(held), bootstrap))
    for i, name in enumerate(scored):
        p = by_run.loc[name]
        at = run_of_point == name
        c_new = held["compute"].to_numpy(float)[at]
        ls_pred[at] = scalerl_curve(c_new, p["A"], p["B"], p["C_mid"], p["R0"])
        if bootstrap:
            m = window.mask[i]
            boot_draws[at] = _residual_bootstrap(
                window.compute[i][m], window.reward[i][m], float(p["R0"]), p, c_new, bootstrap, rng
            )
    return ls_params, ls_pred, boot_draws


def _points_table(
    held: pd.DataFrame, cutoffs: Mapping[str, float], scores_by_method: Mapping[str, dict[str, np.ndarray]]
) -> pd.DataFrame:
    """:attr:`Backtest.points`: the held-out points with each method's scores, method after method."""
    key_cols = ["run"] + [c for c in _CARRIED if c in held.columns] + ["compute", "reward"]
    base = held[key_cols].assign(cutoff=held["run"].map(cutoffs))
    frames = []
    for method, values in scores_by_method.items():
        f = base.assign(method=method, **{k: values[k] for k in _VALUE_COLS})
        for col in ("covered50", "covered90"):
            f[col] = f[col].astype("boolean")
        frames.append(f)
    return pd.concat(frames, ignore_index=True)


def _backtest_settings(
    fit_until: float | None,
    fraction: float | None,
    min_compute: float | None,
    bootstrap: int,
    seed: int,
    fit_kwargs: Mapping[str, Any],
) -> dict[str, Any]:
    """:attr:`Backtest.settings`: the arguments, as JSON-ready values."""
    return {
        "fit_until": fit_until,
        "fraction": fraction,
        "min_compute": min_compute,
        "bootstrap": bootstrap,
        "seed": seed,
        "fit_kwargs": json.loads(json.dumps(fit_kwargs, default=repr)),
    }


# ---------------------------------------------------------------------- the backtest
def backtest(
    runs: Runs | pd.DataFrame,
    *,
    fit_until: float | None = None,
    fraction: float | None = None,
    min_compute: float | None = None,
    fit_kwargs: Mapping[str, Any] | None = None,
    bootstrap: int = 200,
    seed: int = 0,
    baseline: bool = True,
) -> Backtest:
    """Fit every run on its early evaluations and score the predictions of the later ones.

    Parameters
    ----------
    runs : Runs or pandas.DataFrame
        The curves (a DataFrame is validated with :meth:`Runs.from_frame`).
    fit_until : float, optional
        Fit compute ``<= fit_until`` for every run; score the evaluations beyond it.
    fraction : float, optional
        Fit each run on compute ``<= fraction * (its largest compute)``, ``0 < fraction
        < 1``; score the evaluations beyond. Exactly one of ``fit_until`` and
        ``fraction`` must be given.
    min_compute : float, optional
        Leave points below this compute out of both fits (the paper: 1500 GPU-hours).
        It does not restrict the held-out points.
    fit_kwargs : mapping, optional
        More arguments of :func:`~bayes_scalerl.fit` (``priors``, ``chains``,
        ``warmup``, ``samples``, ...); ``log_likelihood`` defaults to False here.
        ``min_compute``, ``fit_until`` and ``seed`` are set by the backtest.
    bootstrap : int
        Replicates of the residual bootstrap of the least-squares fit (and so its
        predictive draws); 0 leaves the ``boot`` method out.
    seed : int
        Seed of the Bayesian fit, its predictive noise and the bootstrap.
    baseline : bool
        Also fit version 0.1's model (the exact sigmoid with independent Gaussian noise)
        with the same settings and score it as ``gaussian`` (default ``True``; skipped
        when ``fit_kwargs`` give that model already). It costs one more fit without the
        discrepancy's refit, about half of the default's; its failing runs are sampled
        again once at most (``Retry(retries=1)``).

    Returns
    -------
    Backtest

    Raises
    ------
    ValueError
        If not exactly one of ``fit_until`` and ``fraction`` is given, or an argument is
        out of range.
    TypeError
        If ``fit_kwargs`` sets an argument the backtest sets itself.
    DataError
        If no run has enough points before its cutoff and at least one after it.

    Notes
    -----
    Each run is cut at its own compute ``cutoff``; the evaluations at or below it form a
    new table that both fits see (so the Bayesian fit never sees a held-out point), and
    every evaluation above it is scored. A run is **skipped, with a note**, rather than
    stopping the whole backtest, when fewer than 4 points (the package's minimum) remain
    in the least-squares fit window (after the first evaluation, which sets ``R0``, and
    ``min_compute``) or when nothing is left to score after the cutoff; the notes are in
    ``Backtest.notes`` and ``Backtest.runs``.

    Examples
    --------
    >>> import bayes_scalerl as bs
    >>> from bayes_scalerl.analyses.backtest import backtest
    >>> bt = backtest(bs.demo_runs(), fraction=0.5, min_compute=1500)  # doctest: +SKIP
    >>> bt.scores                                                     # doctest: +SKIP
    >>> bt.write("backtest-out")                                      # doctest: +SKIP
    """
    if not isinstance(runs, Runs):
        runs = Runs.from_frame(runs)
    fit_kwargs = _backtest_arguments(fit_until, fraction, bootstrap, fit_kwargs)
    R0_fitted = (fit_kwargs.get("priors") or Priors()).R0_fitted
    bootstrap = int(bootstrap)

    # ---- cut every run at its own cutoff
    table = runs.table.reset_index(drop=True)
    run_table, keep_rows, notes = _cut_runs(table, fit_until, fraction, min_compute, R0_fitted)
    scored = run_table.loc[run_table["scored"], "run"].tolist()
    if not scored:
        raise DataError(f"{runs.source}: no run can be backtested. " + " ".join(notes))
    notes += list(getattr(runs, "notes", ()))
    cutoffs = dict(zip(run_table["run"], run_table["cutoff"], strict=True))
    fit_runs = dataclasses.replace(runs, table=table[keep_rows].reset_index(drop=True))
    held = table[table["run"].isin(scored) & (table["compute"] > table["run"].map(cutoffs))]
    held = held.reset_index(drop=True)
    y = held["reward"].to_numpy(float)

    # ---- the predictors
    res = fit(fit_runs, min_compute=min_compute, seed=seed, **fit_kwargs)
    bayes_draws = _bayes_draws(res, held, scored, seed)
    ls_params, ls_pred, boot_draws = _least_squares(fit_runs, held, scored, min_compute, bootstrap, seed)

    # ---- the tables
    scores_by_method = {"bayes": _score_draws(bayes_draws, y)}
    base_kw = _version_01(fit_kwargs) if baseline else None
    if base_kw is not None:  # the fit's model beside version 0.1's
        base = fit(fit_runs, min_compute=min_compute, seed=seed, **base_kw)
        scores_by_method["gaussian"] = _score_draws(_bayes_draws(base, held, scored, seed), y)
        del base
    scores_by_method["ls"] = _score_point(ls_pred, y)
    if bootstrap:
        scores_by_method["boot"] = _score_draws(boot_draws, y)
    points = _points_table(held, cutoffs, scores_by_method)
    return Backtest(
        points=points,
        scores=_summarise(points, tuple(scores_by_method)),
        runs=run_table,
        notes=notes,
        fit=res,
        ls_params=ls_params,
        settings=_backtest_settings(fit_until, fraction, min_compute, bootstrap, seed, fit_kwargs),
    )
