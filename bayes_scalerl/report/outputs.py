"""A fit's output folder: the files ``bayes-scalerl fit`` writes, written from Python.

:func:`write_fit_folder` is the one writer of a fit folder: the command line uses it, and
a fit made in Python and written with it is a folder :func:`~bayes_scalerl.write_report`
and ``bayes-scalerl report`` / ``compare`` read like the command line's own.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from ..analyses.decline import decline
from ..data.files import atomic_output_dir
from ..engine import runtime
from ..posterior.results import FitResult

__all__ = [
    "write_fit_folder",
    "write_fit_folder_tables",
    "fit_diagnostics",
    "IDENTIFIABILITY_COLUMNS",
    "DECLINE_COLUMNS",
    "DISCREPANCY_COLUMNS",
    "PRIOR_COLUMNS",
]

#: Identifiability columns of ``diagnostics.csv`` (independent fits).
IDENTIFIABILITY_COLUMNS = (
    "a_width90",
    "a_width90_data",
    "a_width90_sigmoid",
    "a_contraction",
    "p_cmid_beyond_data",
    "a_identified",
    "a_flag",
)
#: Columns of ``diagnostics.csv`` on a fall of the reward during training (every fit).
DECLINE_COLUMNS = ("reward_drop", "falls")
#: Columns of ``diagnostics.csv`` for a fit with the calibrated discrepancy (after the others).
DISCREPANCY_COLUMNS = ("discrepancy_omega", "discrepancy_tau", "discrepancy_from")
#: Columns of ``diagnostics.csv`` for a fit whose prior of ``A`` was learnt from the batch.
PRIOR_COLUMNS = ("prior_a_loc", "prior_a_scale")


def _model(result: FitResult) -> str:
    return result.settings.get("model", "independent")


def fit_diagnostics(result: FitResult) -> pd.DataFrame:
    """The table of ``diagnostics.csv``: sampler diagnostics, plus A's identifiability.

    Parameters
    ----------
    result : FitResult
        A fit.

    Returns
    -------
    pandas.DataFrame
        :meth:`FitResult.diagnostics` (``run, n_points, r_hat_max, ess_bulk_min,
        ess_tail_min, divergences, bfmi_min, converged``); for an independent fit also
        ``a_width90, a_width90_data, a_width90_sigmoid, a_contraction, p_cmid_beyond_data,
        a_identified, a_flag`` from
        :func:`~bayes_scalerl.identifiability`; then ``reward_drop, falls`` (how far the
        fitted reward falls from its best level, and whether that is beyond noise: see
        :func:`bayes_scalerl.analyses.decline.decline`); for a fit with the calibrated discrepancy
        also ``discrepancy_omega, discrepancy_tau`` (each run's level-offset sd and slope
        of its deviation beyond the data, root mean square under its posterior) and
        ``discrepancy_from`` (``run+batch``: learnt from the run's own leave-future-out
        refit and the batch; ``batch``: too short for a refit, the batch's scales); where
        the prior of ``A`` was learnt from the batch (``Priors(from_batch="ceiling")``, CLI
        ``--priors batch``) also ``prior_a_loc, prior_a_scale``, the location and scale of each run's
        prior of ``A`` (a normal truncated to ``(R0, 1)``, from the batch's other runs).
    """
    with runtime.x64():
        diag = result.diagnostics()
        if _model(result) == "independent":
            from ..analyses.identify import identifiability

            with runtime.phase("identifiability"):
                ident = identifiability(result)
            diag = diag.merge(ident[["run", *IDENTIFIABILITY_COLUMNS]], on="run", how="left")
    falls = decline(result.dt)
    diag["reward_drop"] = falls["drop"].to_numpy()
    diag["falls"] = falls["falls"].to_numpy()
    cd = result.dt["constant_data"]
    if "discrepancy_tau" in cd:
        diag["discrepancy_omega"] = cd["discrepancy_omega"].values
        diag["discrepancy_tau"] = cd["discrepancy_tau"].values
        diag["discrepancy_from"] = np.where(cd["discrepancy_own"].values, "run+batch", "batch")
    if "batch_prior" in cd and "A_loc" in cd["prior_term"].values:
        diag["prior_a_loc"] = cd["batch_prior"].sel(prior_term="A_loc").values
        diag["prior_a_scale"] = cd["batch_prior"].sel(prior_term="A_scale").values
    return diag


def write_fit_folder_tables(
    result: FitResult, out: str | os.PathLike, predict: Sequence[float]
) -> tuple[dict[str, Path], pd.DataFrame, pd.DataFrame]:
    """Write the folder; return the paths and the summary and diagnostics tables."""
    import matplotlib.pyplot as plt

    from .overview import OVERVIEW_MIN_RUNS, plot_overview
    from .plots import plot_curves

    out = Path(out)
    names: dict[str, str] = {
        "summary": "summary.csv",
        "predictions": "predictions.csv",
        "diagnostics": "diagnostics.csv",
        "posterior": "posterior.nc",
        "curves": "curves.png",
    }
    phase = runtime.phase
    with runtime.x64(), atomic_output_dir(out) as tmp:
        with phase("diagnostics"):
            summary = result.summary()
            diag = fit_diagnostics(result)
        with phase("predictions"):
            predictions = result.observed_predictions(list(predict))
        with phase("write"):
            summary.to_csv(tmp / names["summary"], index=False)
            predictions.to_csv(tmp / names["predictions"], index=False)
            del predictions
            diag.to_csv(tmp / names["diagnostics"], index=False)
            result.save(tmp / names["posterior"])
        if _model(result) == "hierarchical":
            from ..analyses.comparisons import recipe_summary
            from ..posterior.diagnostics import sampler_diagnostics

            names["recipes"] = "recipes.csv"
            names["sampler"] = "sampler.csv"
            recipe_summary(result).to_csv(tmp / names["recipes"], index=False)
            sampler_diagnostics(result.dt).to_csv(tmp / names["sampler"], index=False)
        with phase("plot"):
            if len(result.run_names) >= OVERVIEW_MIN_RUNS:
                fig = plot_overview(result, diag, budget=max(predict) if len(predict) else None)
            else:
                fig = plot_curves(result)
            try:
                fig.savefig(tmp / names["curves"], dpi=120)
            finally:
                plt.close(fig)
    return {key: out / name for key, name in names.items()}, summary, diag


def write_fit_folder(
    result: FitResult, out: str | os.PathLike, *, predict: Sequence[float] = ()
) -> dict[str, Path]:
    """Write a fit's output folder, as ``bayes-scalerl fit --out`` does.

    Files (see the docs, *Reading the outputs*):

    - ``summary.csv``: ``run, param, mean, sd, q05, q50, q95, r_hat, ess_bulk``;
    - ``predictions.csv``: the posterior predictive of a new evaluation at every observed
      compute and at ``predict``;
    - ``diagnostics.csv``: :func:`fit_diagnostics` (with the identifiability of ``A`` for an
      independent fit);
    - ``posterior.nc``: the ArviZ DataTree (:meth:`FitResult.save`);
    - ``curves.png``: data, median curve and 90% band of every run; from 25 runs on, the
      overview instead (:func:`~bayes_scalerl.report.overview.plot_overview`: every run's
      ``A`` and forecast at the largest ``predict`` compute, then the curves of the runs
      that most need a look);
    - a hierarchical fit adds ``recipes.csv`` (each recipe's ``A``, ``B``, ``C_mid``) and
      ``sampler.csv`` (R-hat, ESS and divergences of every parameter).

    Parameters
    ----------
    result : FitResult
        The fit (:func:`~bayes_scalerl.fit`).
    out : path
        Output folder, created if needed (with its parents). Other files in it are left
        alone; files of the same names are replaced.
    predict : sequence of float, optional
        Extra computes (positive) to predict at, beside the observed ones.

    Returns
    -------
    dict of str to pathlib.Path
        The written files under the keys ``"summary"``, ``"predictions"``,
        ``"diagnostics"``, ``"posterior"``, ``"curves"`` (and ``"recipes"``, ``"sampler"``).

    Raises
    ------
    FileExistsError
        If ``out`` exists and is not a folder.

    Notes
    -----
    Every file is first written to a temporary folder beside ``out`` and moved into place
    only when all of them are done: if anything fails, ``out`` is left as it was. The files
    get the permissions of any new file (``0o666`` less the umask).

    Examples
    --------
    >>> res = bs.fit(runs, min_compute=1500, fit_until=8000)     # doctest: +SKIP
    >>> bs.write_fit_folder(res, "fit-out", predict=[16000])      # doctest: +SKIP
    >>> bs.write_report("fit-out")                                # doctest: +SKIP
    """
    paths, _, _ = write_fit_folder_tables(result, out, predict)
    return paths
