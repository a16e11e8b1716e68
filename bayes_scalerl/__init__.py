"""bayes_scalerl: Bayesian fits of ScaleRL compute-scaling curves.

Fit ``R(C) = R0 + (A - R0) / (1 + (C_mid / C)^B)`` to many RL training curves at
once with NUTS, get posteriors, predictive bands for unseen budgets and per-run
diagnostics.

The sampler needs float64: the package's entry points run in JAX's 64-bit mode
(:func:`bayes_scalerl.engine.runtime.x64`), and the persistent compilation cache is switched on
by the first fit (:func:`bayes_scalerl.engine.runtime.ensure_compilation_cache`); importing the
package leaves JAX's configuration as it was.

Main entry points: :func:`read_runs` / :func:`read_any` (tables and training logs),
:class:`Runs`, :class:`Priors`, :func:`fit` (independent or hierarchical), :class:`FitResult`,
:func:`compare` and friends (recipe comparisons), :func:`paper_fit`, :func:`plot_curves`,
:func:`scalerl_curve`.
"""

__version__ = "0.1.0"

from .analyses.backtest import Backtest, backtest  # noqa: E402
from .analyses.baseline import paper_fit  # noqa: E402
from .analyses.comparisons import compare, compute_to_target, crossover, p_best, recipe_summary  # noqa: E402
from .analyses.families import compare_families  # noqa: E402
from .analyses.identify import BudgetSweep, budget_sweep, identifiability, prior_sensitivity  # noqa: E402
from .analyses.simulate import random_truth, simulate_runs  # noqa: E402
from .cli.demo import demo_runs, demo_truth  # noqa: E402
from .data.readers import read_any, read_table, read_tensorboard, read_verl, read_wandb_csv  # noqa: E402
from .data.runs import DataError, Runs  # noqa: E402
from .data.tables import read_runs  # noqa: E402
from .engine.devices import use_all_cpu_cores  # noqa: E402
from .engine.runtime import set_compilation_cache  # noqa: E402
from .models.curve import compute_to_reach, gain_fraction, linearised, scalerl_curve  # noqa: E402
from .models.hierarchical import HierPriors  # noqa: E402
from .models.priors import Priors  # noqa: E402
from .posterior.families import fit_family  # noqa: E402
from .posterior.fitting import fit  # noqa: E402
from .posterior.results import FitResult  # noqa: E402
from .report.outputs import write_fit_folder  # noqa: E402


# plots and reports import matplotlib: load them on first use
def plot_curves(*args, **kwargs):
    """Curves with data and bands (see :func:`bayes_scalerl.report.plots.plot_curves`)."""
    from .report.plots import plot_curves as _plot

    return _plot(*args, **kwargs)


def plot_forest(*args, **kwargs):
    """Forest plot of run (and recipe) parameters (see :func:`bayes_scalerl.report.plots.plot_forest`)."""
    from .report.plots import plot_forest as _plot

    return _plot(*args, **kwargs)


def plot_linearised(*args, **kwargs):
    """The paper's linearised view, slope B (see :func:`bayes_scalerl.report.plots.plot_linearised`)."""
    from .report.plots import plot_linearised as _plot

    return _plot(*args, **kwargs)


def write_report(*args, **kwargs):
    """HTML and Markdown report of a fit folder (see :func:`bayes_scalerl.report.write_report`)."""
    from .report.report import write_report as _write

    return _write(*args, **kwargs)


__all__ = [
    "__version__",
    "Backtest",
    "BudgetSweep",
    "DataError",
    "FitResult",
    "HierPriors",
    "Priors",
    "Runs",
    "backtest",
    "budget_sweep",
    "compare",
    "compare_families",
    "compute_to_reach",
    "compute_to_target",
    "crossover",
    "demo_runs",
    "demo_truth",
    "fit",
    "fit_family",
    "identifiability",
    "gain_fraction",
    "linearised",
    "p_best",
    "paper_fit",
    "plot_curves",
    "plot_forest",
    "plot_linearised",
    "prior_sensitivity",
    "random_truth",
    "read_any",
    "read_runs",
    "read_table",
    "read_tensorboard",
    "read_verl",
    "read_wandb_csv",
    "recipe_summary",
    "scalerl_curve",
    "set_compilation_cache",
    "simulate_runs",
    "use_all_cpu_cores",
    "write_fit_folder",
    "write_report",
]
