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

# Every public name is loaded on first use (PEP 562), so that ``import bayes_scalerl`` and
# ``bayes-scalerl --help`` do not wait for JAX, SciPy and matplotlib to load.
_WHERE = {
    "Backtest": "analyses.backtest",
    "backtest": "analyses.backtest",
    "paper_fit": "analyses.baseline",
    "compare": "analyses.comparisons",
    "compute_to_target": "analyses.comparisons",
    "crossover": "analyses.comparisons",
    "estimate_seed_sd": "analyses.comparisons",
    "p_best": "analyses.comparisons",
    "recipe_summary": "analyses.comparisons",
    "compare_families": "analyses.families",
    "BudgetSweep": "analyses.identify",
    "budget_sweep": "analyses.identify",
    "identifiability": "analyses.identify",
    "prior_sensitivity": "analyses.identify",
    "random_truth": "analyses.simulate",
    "simulate_runs": "analyses.simulate",
    "demo_runs": "cli.demo",
    "demo_truth": "cli.demo",
    "read_any": "data.readers",
    "read_table": "data.readers",
    "read_tensorboard": "data.readers",
    "read_verl": "data.readers",
    "read_wandb_csv": "data.readers",
    "DataError": "data.runs",
    "Runs": "data.runs",
    "read_runs": "data.tables",
    "noise_correlation": "data.noise",
    "use_all_cpu_cores": "engine.devices",
    "set_compilation_cache": "engine.runtime",
    "Retry": "engine.retry",
    "compute_to_reach": "models.curve",
    "gain_fraction": "models.curve",
    "linearised": "models.curve",
    "scalerl_curve": "models.curve",
    "Discrepancy": "models.discrepancy",
    "HierPriors": "models.hierarchical",
    "Priors": "models.priors",
    "fit_family": "posterior.families",
    "fit": "posterior.fitting",
    "FitResult": "posterior.results",
    "write_fit_folder": "report.outputs",
    "plot_curves": "report.plots",
    "plot_forest": "report.plots",
    "plot_linearised": "report.plots",
    "write_report": "report.report",
}


def __getattr__(name: str):
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'bayes_scalerl' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


__all__ = [
    "__version__",
    "Backtest",
    "BudgetSweep",
    "DataError",
    "Discrepancy",
    "FitResult",
    "HierPriors",
    "Priors",
    "Retry",
    "Runs",
    "backtest",
    "budget_sweep",
    "compare",
    "compare_families",
    "estimate_seed_sd",
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
    "noise_correlation",
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
