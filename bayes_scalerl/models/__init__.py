"""The models layer: what is fitted, as mathematics, apart from how it is sampled.

It owns the ScaleRL curve and its inverse (:mod:`.curve`), the priors (:mod:`.priors`),
the sigmoid's log density in the sampler's unconstrained coordinates with the exact
conditional of the gain (:mod:`.scalerl`), the batched models the engine samples, which
implement :class:`~bayes_scalerl.models.base.BatchedModel` (the sigmoid, :mod:`.sigmoid`;
the power and exponential families, :mod:`.families`), the discrepancy beyond the data
(:mod:`.discrepancy`), the hierarchical model of seeds within recipes with its reference
NumPyro sampler (:mod:`.hierarchical`) and the blocked Gibbs sampler the fits use
(:mod:`.pooling`), smooth departures from the sigmoid in the noise model
(:mod:`.shape_noise`) and the paper's least-squares fit of one run (:mod:`.least_squares`).
It imports only :mod:`bayes_scalerl.data` from the package.
"""

from .base import BatchedModel, uniform_init
from .curve import compute_to_reach, gain_fraction, linearised, scalerl_curve
from .discrepancy import (
    SCALE_GRID,
    Discrepancy,
    discrepancy_shape,
    draw_offsets,
    scale_posteriors,
    scale_summary,
)
from .families import ExponentialModel, FamilyData, PowerModel, exp_coords, gain_marginal
from .hierarchical import HierIndex, HierPriors, hierarchical_model, hierarchy_index, sample_hierarchical
from .pooling import PoolData, pool_data, sample_pooled
from .priors import LIKELIHOODS, Priors
from .scalerl import (
    Constrained,
    RunData,
    binomial_variance,
    constrain,
    draw_A,
    gain_conditional,
    log_density,
    log_diff_ndtr,
    make_run_data,
    refresh_sigma,
    scalerl_numpyro_model,
    truncnorm_draw,
    z_index,
)
from .sigmoid import SigmoidModel

__all__ = [
    "BatchedModel",
    "Constrained",
    "Discrepancy",
    "ExponentialModel",
    "FamilyData",
    "HierIndex",
    "HierPriors",
    "LIKELIHOODS",
    "PoolData",
    "PowerModel",
    "Priors",
    "RunData",
    "SCALE_GRID",
    "SigmoidModel",
    "binomial_variance",
    "compute_to_reach",
    "constrain",
    "discrepancy_shape",
    "draw_A",
    "draw_offsets",
    "exp_coords",
    "gain_conditional",
    "gain_fraction",
    "gain_marginal",
    "hierarchical_model",
    "hierarchy_index",
    "linearised",
    "log_density",
    "log_diff_ndtr",
    "make_run_data",
    "model_from_spec",
    "pool_data",
    "refresh_sigma",
    "scalerl_curve",
    "scale_posteriors",
    "scale_summary",
    "sample_hierarchical",
    "sample_pooled",
    "scalerl_numpyro_model",
    "truncnorm_draw",
    "uniform_init",
    "z_index",
]


def model_from_spec(spec: dict) -> BatchedModel:
    """The model a fit's settings describe (``settings["model_spec"]``, see ``BatchedModel.spec``)."""
    from .priors import Priors

    name = spec.get("model", "sigmoid")
    if name == "sigmoid":
        return SigmoidModel(Priors.from_dict(spec.get("priors") or {}))
    if name == "power":
        return PowerModel()
    if name == "exponential":
        return ExponentialModel()
    raise ValueError(f"unknown model {name!r}")
