"""What the sampling engine needs from a model: the :class:`BatchedModel` protocol.

The engine (:mod:`bayes_scalerl.engine`) samples every run of a batch with the lane-queue
NUTS without knowing the model. A model says how to turn a padded batch of runs into
its own data, how many unconstrained coordinates one run has, where chains start, the
potential (minus the log posterior density) of one run, how a chain of draws becomes
named parameters, and the pointwise log-likelihood of the data given those parameters.
Everything the engine calls is a pure JAX function of arrays; the model object itself
is a frozen, hashable value, so it keys the compiled programs and the checkpoint
fingerprint together with the sampler settings.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

import jax
import numpy as np

__all__ = ["BatchedModel", "uniform_init"]


@runtime_checkable
class BatchedModel(Protocol):
    """A model of one run's curve that the engine can sample for many runs at once.

    Attributes
    ----------
    name : str
        Short name (``"sigmoid"``, ``"power"``, ...), stored in the fit's settings.
    var_names : tuple of str
        Posterior variables :meth:`report` returns, in the order summaries list them.
    needs_n_eval : bool
        Whether :meth:`data` reads the ``n_eval`` input.
    """

    name: str

    @property
    def var_names(self) -> tuple[str, ...]: ...

    @property
    def needs_n_eval(self) -> bool: ...

    def spec(self) -> dict:
        """JSON-able description of the model and its priors (settings, fingerprints)."""
        ...

    def data(self, inputs: Mapping[str, jax.Array]) -> Any:
        """The model's data pytree for a batch (leading run axis), inside the program.

        ``inputs`` holds ``compute``, ``reward``, ``mask`` (run, point), ``R0``,
        ``c_ref`` (run,) and ``n_eval`` (run, point) when :attr:`needs_n_eval`.
        """
        ...

    def n_dim(self, n_points: int) -> int:
        """Unconstrained coordinates of one run padded to ``n_points`` points."""
        ...

    def init(self, key: jax.Array, data: Any, n_chains: int, n_dim: int) -> jax.Array:
        """Initial points of one run's chains, shape (chain, n_dim)."""
        ...

    def potential(self, z: jax.Array, data: Any) -> jax.Array:
        """Minus the log posterior density (up to a constant) of one run at ``z``."""
        ...

    def report(self, key: jax.Array, z: jax.Array, data: Any) -> dict[str, jax.Array]:
        """Named draws (each of shape (draw,)) from one chain's NUTS draws ``z`` (draw, n_dim)."""
        ...

    def loglik(self, params: Mapping[str, jax.Array], data: Any) -> jax.Array:
        """Log-likelihood of each of one run's points given one draw of ``params``, (point,)."""
        ...

    def mean(self, compute: np.ndarray, params: Mapping[str, np.ndarray], R0, c_ref) -> np.ndarray:
        """Expected reward at ``compute`` (NumPy, broadcasting), for predictions and plots."""
        ...


def uniform_init(key: jax.Array, n_chains: int, n_dim: int, radius: float = 2.0) -> jax.Array:
    """Initial points drawn uniformly in ``[-radius, radius]^n_dim``, shape (chain, n_dim)."""
    return jax.random.uniform(key, (n_chains, n_dim), minval=-radius, maxval=radius)
