"""Models the engine samples: the ScaleRL sigmoid and the other curve families.

Every model implements :class:`~bayes_scalerl.models.base.BatchedModel`.
"""

from .base import BatchedModel, uniform_init
from .families import ExponentialModel, PowerModel
from .sigmoid import SigmoidModel

__all__ = [
    "BatchedModel",
    "ExponentialModel",
    "PowerModel",
    "SigmoidModel",
    "uniform_init",
    "model_from_spec",
]


def model_from_spec(spec: dict) -> BatchedModel:
    """The model a fit's settings describe (``settings["model_spec"]``, see ``BatchedModel.spec``)."""
    from ..priors import Priors

    name = spec.get("model", "sigmoid")
    if name == "sigmoid":
        return SigmoidModel(Priors(**(spec.get("priors") or {})))
    if name == "power":
        return PowerModel()
    if name == "exponential":
        return ExponentialModel()
    raise ValueError(f"unknown model {name!r}")
