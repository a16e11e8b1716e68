"""Posterior results: the DataTree builder shared by every model."""

from .assemble import build_datatree, observed_arrays, pointwise_loglik

__all__ = ["build_datatree", "observed_arrays", "pointwise_loglik"]
