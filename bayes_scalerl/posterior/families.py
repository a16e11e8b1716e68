"""Curve families beside the ScaleRL sigmoid, fitted on the shared engine.

The families (:mod:`bayes_scalerl.models.families`) are ``R(C) = R0 + g f(C; theta)``:
the ``sigmoid`` (the package's model, :func:`bayes_scalerl.fit`), a ``power`` law and a
Weibull-type ``exponential`` saturation. :func:`fit_family` samples any of them with the
same engine as the sigmoid (chunks, every local device, checkpoints, Ray) and returns the
same :class:`~bayes_scalerl.posterior.results.FitResult`.
"""

from __future__ import annotations

import os

import jax
import pandas as pd

from ..data.runs import Runs, in_likelihood
from ..engine import STATS, SamplerConfig, runtime
from ..engine.retry import Retry, sample_retrying
from ..models.families import ExponentialModel, PowerModel
from .assemble import build_datatree
from .fitting import fit, fit_settings, resolve_retry
from .results import FitResult

__all__ = ["FAMILIES", "fit_family"]

#: Curve families known to :func:`fit_family` and :func:`compare_families`.
FAMILIES = ("sigmoid", "power", "exponential")

_MODELS = {"power": PowerModel(), "exponential": ExponentialModel()}


@runtime.x64
def fit_family(
    runs: Runs | pd.DataFrame,
    family: str,
    *,
    min_compute: float | None = None,
    fit_until: float | None = None,
    chains: int = 4,
    warmup: int = 500,
    samples: int = 500,
    seed: int = 0,
    target_accept: float = 0.99,
    max_tree_depth: int = 8,
    chunk_size: int = 512,
    log_likelihood: bool = False,
    progress: bool | None = None,
    executor: str | object = "local",
    checkpoint_dir: str | os.PathLike | None = None,
    n_devices: int | None = None,
    group_size: int | None = None,
    retry: Retry | bool | None = True,
) -> FitResult:
    """Fit one curve family to every run with the package's batched NUTS.

    Parameters
    ----------
    runs : Runs or pandas.DataFrame
        The curves (a DataFrame is validated with :meth:`Runs.from_frame`).
    family : {"sigmoid", "power", "exponential"}
        The curve family (see :mod:`bayes_scalerl.models.families`).
    min_compute, fit_until : float, optional
        Likelihood window, as in :func:`bayes_scalerl.fit`; the first evaluation sets ``R0``.
    chains, warmup, samples : int
        Chains per run, warm-up and kept iterations per chain.
    seed : int
        Seed of the PRNG key.
    target_accept, max_tree_depth : float, int
        NUTS settings (0.99: the families' gain is integrated out, which leaves a steep
        fall-off at the ``A <= 1`` bound).
    chunk_size, log_likelihood, progress, executor, checkpoint_dir, n_devices, group_size, retry
        As in :func:`bayes_scalerl.fit`: the families run on the same engine, so they
        are chunked, spread over every local device, resumable and runnable over Ray.

    Returns
    -------
    FitResult
        Posterior variables: power ``g, b, sigma``; exponential ``A, B, C_s, sigma``;
        sigmoid as :func:`bayes_scalerl.fit`.

    Examples
    --------
    >>> import bayes_scalerl as bs
    >>> res = bs.fit_family(bs.demo_runs(), "power", fit_until=8000)  # doctest: +SKIP
    >>> res.predict_draws([16000.0]).shape                             # doctest: +SKIP
    (18, 2000, 1)
    """
    runtime.ensure_compilation_cache()
    if family not in FAMILIES:
        raise ValueError(f"family must be one of {FAMILIES}, got {family!r}")
    if not isinstance(runs, Runs):
        runs = Runs.from_frame(runs)
    common = dict(
        min_compute=min_compute,
        fit_until=fit_until,
        chains=chains,
        warmup=warmup,
        samples=samples,
        seed=seed,
        chunk_size=chunk_size,
        log_likelihood=log_likelihood,
        progress=progress,
        executor=executor,
        checkpoint_dir=checkpoint_dir,
        n_devices=n_devices,
        group_size=group_size,
        retry=retry,
    )
    if family == "sigmoid":
        return fit(runs, **common)
    for name, value in (("chains", chains), ("warmup", warmup), ("samples", samples)):
        if int(value) != value or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    if chains < 2:
        raise ValueError("chains must be at least 2 so that R-hat can be computed")
    model = _MODELS[family]
    window = runs.window(min_compute=min_compute, fit_until=fit_until)
    config = SamplerConfig(int(chains), int(warmup), int(samples), float(target_accept), int(max_tree_depth))
    retry = resolve_retry(retry)
    draws, retried = sample_retrying(
        jax.random.key(seed),
        window,
        model,
        config,
        retry=retry,
        chunk_size=chunk_size,
        progress=progress,
        n_devices=n_devices,
        group_size=group_size,
        executor=executor,
        checkpoint_dir=checkpoint_dir,
    )
    settings = fit_settings(
        runs,
        model,
        min_compute=min_compute,
        fit_until=fit_until,
        config=(chains, warmup, samples, seed, target_accept, max_tree_depth),
        family=family,
        model=family,
        retry=retry._asdict() if retry is not None else None,
    )
    dt = build_datatree(
        runs,
        window,
        model,
        {k: draws[k] for k in model.var_names},
        in_fit=lambda c: in_likelihood(c, min_compute=min_compute, fit_until=fit_until),
        settings=settings,
        stats={k: draws[k] for k in STATS},
        log_likelihood=log_likelihood,
        constants={"retried": retried},
    )
    return FitResult(dt)
