"""bayes_scalerl: Bayesian fits of ScaleRL compute-scaling curves.

Fit ``R(C) = R0 + (A - R0) / (1 + (C_mid / C)^B)`` to many RL training curves at
once with NUTS, get posteriors, predictive bands for unseen budgets and per-run
diagnostics.

Importing the package turns on JAX's 64-bit mode (``jax_enable_x64``): the sampler
needs float64.

Main entry points: :func:`read_runs`, :class:`Runs`, :class:`Priors`, :func:`fit`,
:class:`FitResult`, :func:`paper_fit`, :func:`plot_curves`, :func:`scalerl_curve`.
"""

import jax

jax.config.update("jax_enable_x64", True)

__version__ = "0.1.0"

from .baseline import paper_fit  # noqa: E402
from .curve import compute_to_reach, gain_fraction, linearised, scalerl_curve  # noqa: E402
from .data import DataError, Runs  # noqa: E402
from .demo import demo_runs, demo_truth  # noqa: E402
from .devices import use_all_cpu_cores  # noqa: E402
from .fitting import fit  # noqa: E402
from .io import read_runs  # noqa: E402
from .priors import Priors  # noqa: E402
from .results import FitResult  # noqa: E402
from .simulate import random_truth, simulate_runs  # noqa: E402


def plot_curves(*args, **kwargs):
    """Curves with data and bands (see :func:`bayes_scalerl.plots.plot_curves`)."""
    from .plots import plot_curves as _plot

    return _plot(*args, **kwargs)


__all__ = [
    "__version__",
    "DataError",
    "FitResult",
    "Priors",
    "Runs",
    "compute_to_reach",
    "demo_runs",
    "demo_truth",
    "fit",
    "gain_fraction",
    "linearised",
    "paper_fit",
    "plot_curves",
    "random_truth",
    "read_runs",
    "scalerl_curve",
    "simulate_runs",
    "use_all_cpu_cores",
]
