"""The analyses layer: what is done with fits, and the simulated curves to check them on.

It owns the backtests against the paper's least-squares fit (:mod:`.backtest`,
:mod:`.baseline`), the identifiability of ``A``, prior sensitivity and budget sweeps
(:mod:`.identify`), recipe comparisons (:mod:`.comparisons`), comparisons of curve families
(:mod:`.families`), the scoring rules they use (:mod:`.scoring`), simulated curves
(:mod:`.simulate`) and the misspecified truth curves of the misspecification benchmark
(:mod:`.misspec`). ``misspec`` is re-exported as a module, not name by name: its
``simulate`` would hide the :mod:`.simulate` module here and its ``FAMILIES`` (truth
curves) would read as the fitted families of :func:`compare_families`. Likewise
``analyses.backtest`` is the function :func:`~.backtest.backtest`, as ``bayes_scalerl.backtest`` is.
"""

from . import misspec
from .backtest import METHODS, Backtest, backtest
from .baseline import PAPER_A_GRID, paper_fit, paper_fit_arrays
from .comparisons import (
    DEFAULT_ROPE,
    PARAMS,
    compare,
    compute_to_target,
    crossover,
    estimate_seed_sd,
    p_best,
    recipe_curve_draws,
    recipe_draws,
    recipe_names,
    recipe_summary,
)
from .families import compare_families
from .identify import (
    ALTERNATIVE_PRIORS,
    DEFAULT_FRACTIONS,
    DEFAULT_HORIZONS,
    MAX_WIDTH90,
    MIN_CONTRACTION,
    SENSITIVITY_SHIFT,
    BudgetSweep,
    a_prior_moments,
    budget_sweep,
    identifiability,
    plot_width_vs_compute,
    prior_sensitivity,
)
from .scoring import central_interval, crps_from_draws, interval_coverage, median_abs_error
from .simulate import random_recipes, random_truth, simulate_runs

__all__ = [
    "ALTERNATIVE_PRIORS",
    "DEFAULT_FRACTIONS",
    "DEFAULT_HORIZONS",
    "DEFAULT_ROPE",
    "MAX_WIDTH90",
    "METHODS",
    "MIN_CONTRACTION",
    "PAPER_A_GRID",
    "PARAMS",
    "SENSITIVITY_SHIFT",
    "Backtest",
    "BudgetSweep",
    "a_prior_moments",
    "backtest",
    "budget_sweep",
    "central_interval",
    "compare",
    "compare_families",
    "compute_to_target",
    "crossover",
    "crps_from_draws",
    "identifiability",
    "interval_coverage",
    "median_abs_error",
    "misspec",
    "p_best",
    "paper_fit",
    "paper_fit_arrays",
    "plot_width_vs_compute",
    "prior_sensitivity",
    "random_recipes",
    "random_truth",
    "recipe_curve_draws",
    "recipe_draws",
    "estimate_seed_sd",
    "recipe_names",
    "recipe_summary",
    "simulate_runs",
]
