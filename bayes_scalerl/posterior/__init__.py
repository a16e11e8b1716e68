"""The posterior layer: from runs to a fitted result, and what a result holds.

It owns the fits themselves, :func:`~.fitting.fit` (the ScaleRL sigmoid, independent or
hierarchical) and :func:`~.families.fit_family` (any curve family), which run a model of
:mod:`bayes_scalerl.models` on the engine; the DataTree builder every model shares
(:mod:`.assemble`); the calibration of the discrepancy beyond the data (:mod:`.calibration`);
the convergence diagnostics (:mod:`.diagnostics`); and :class:`~.results.FitResult`
(summaries, predictive draws and bands, saving and loading, :mod:`.results`).
"""

from .assemble import STAT_NAMES, build_datatree, observed_arrays, pointwise_loglik
from .calibration import Calibration, calibrate
from .diagnostics import (
    ESS_MIN,
    RHAT_MAX,
    TAIL_PROB,
    bfmi,
    convergence,
    ess_bulk,
    ess_tail,
    rhat,
    run_diagnostics,
    sampler_diagnostics,
)
from .families import FAMILIES, fit_family
from .fitting import fit
from .results import QUANTILES, FitResult

__all__ = [
    "ESS_MIN",
    "FAMILIES",
    "QUANTILES",
    "RHAT_MAX",
    "STAT_NAMES",
    "TAIL_PROB",
    "Calibration",
    "FitResult",
    "bfmi",
    "build_datatree",
    "calibrate",
    "convergence",
    "ess_bulk",
    "ess_tail",
    "fit",
    "fit_family",
    "observed_arrays",
    "pointwise_loglik",
    "rhat",
    "run_diagnostics",
    "sampler_diagnostics",
]
