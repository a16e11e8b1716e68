"""Sample again, with a smaller step and longer chains, the few runs that fail their checks.

A batch of weakly identified runs (``C_mid`` beyond the data, a rise of a few noise sds)
always holds a tail of posteriors that are harder than the rest: a long upper tail of
``B`` where the curve turns into a step at the end of the window, a ceiling that reaches
the bound ``A = 1``. At the default settings a few percent of such runs end with a
divergent transition or an R-hat a little above 1.01, and they are a property of the
posterior, not bad luck: sampled again with another seed, a quarter of them fail again.
Stan's advice for them is a larger ``adapt_delta`` (a smaller step) and longer chains.
:func:`sample_retrying` does that for the failing runs only, the way the lane-queue
engine makes cheap: they are sampled once more, with their own key, at
``Retry.target_accept`` and ``Retry.thin`` times the draws, and every ``thin``-th draw
replaces the first attempt's (the thinned chain is a Markov chain of the same posterior,
so the result keeps its shape).

Choosing *which* runs to sample again by the first attempt's diagnostics does not bias
the second attempt: its chains start afresh and do not see the first attempt's draws.

The second attempt acts whatever share of the runs failed. Short fit windows (6-12
evaluations that end before the rise) fail by the dozen, not as a tail: at 4x extrapolation
a quarter of the simulated sigmoids and a third of the wiggling curves failed the first
attempt. For them the second attempt *is* the longer, smaller-step sampling such a batch
needs, spent on the failing runs only; an earlier default stood down above a quarter
failing ("chains too short for the batch") and left them unconverged.

By default (``Retry(retries=2)``) the runs that fail the second attempt too get a third:
four times the draws at ``target_accept`` 0.999, every fourth kept, with its own key. The
real short windows need it, not the simulated regime: fitted on the first quarter of their
compute, the DAPO logs' AMC ``mean@4`` curves passed the check in 11 of 18 runs after one
second attempt (seven with R-hat 1.011-1.027 at a bulk ESS of 220-560: a long tail of ``B``
and ``C_mid``, the ridge between "a step near the data" and "a slow rise to a far ceiling")
and in 18 of 18 after the third; over the four DAPO sets' 154 curves, 114 and 143-145 (two
keys for the third attempt; ``benchmarks/retry_real.py``). A third retry (``retries=3``:
0.9999, eight times the draws) had not finished the best-of-N set's first quarter after
three times the wall time of ``retries=2``. The third attempt costs only the runs that
reach it: up to twice the wall time on a real set whose windows mostly fail (best-of-N at
half its compute, 70 s to 139 s on a 2-core CPU), 4-18 s on the 500 weakly identified runs,
and 15% more for the package's own test suite, whose short chains fail by the dozen (994 s
to 1,144 s on the same machine). ``Retry(retries=1)`` (``--retries 1``), the earlier
default, stops after the second attempt.

Measured on the 500 weakly identified runs of ``benchmarks/weak_identification.py``
(numbers in ``benchmarks/results/weak-identification.md``), on the short windows of
``benchmarks/misspecification.py`` (``benchmarks/results/misspecification-short-windows.md``)
and on the real sets (``benchmarks/results/retry-real.md``).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import numpy as np

from .driver import sample_window
from .program import STATS, SamplerConfig

__all__ = ["Retry", "every_kth", "failing_runs", "sample_retrying", "thin_draws"]

logger = logging.getLogger("bayes_scalerl")

#: Folded into the fit's key for the second attempt (its own stream of randomness).
_RETRY_STREAM = 0x2E7127
#: Folded into the fit's key, then the retry's number, for the third attempt and later.
_LATER_STREAM = 0x5A3C1D


class Retry(NamedTuple):
    """How runs that fail the convergence checks are sampled again.

    Attributes
    ----------
    target_accept : float
        Target acceptance of the second attempt's step-size adaptation (at least the
        first attempt's); each later attempt has a tenth of the one before's rejection
        rate ``1 - target_accept`` (0.99, then 0.999).
    thin : int
        The second attempt draws ``thin`` times as many iterations and keeps every
        ``thin``-th; the ``k``-th retry draws ``thin ** k`` times as many (2x, then 4x).
    max_share : float
        Retry only when at most this share of the runs failed the first attempt (default
        1: whatever share failed). Lower it to cap the cost of retrying: a batch whose runs fail
        by the dozen then reports them as they are, for a longer fit (``warmup``,
        ``samples``) to settle.
    max_pool_passes : int
        The hierarchical model's pooled chains, when any parameter fails the check, run
        on one pass of draws at a time, up to this many passes in all, every ``p``-th draw
        of the ``p`` passes kept (:func:`~bayes_scalerl.models.pooling.sample_pooled`).
    retries : int
        How many times, at most, a failing run is sampled again after the first attempt
        (default 2: a second attempt, and a third for the runs that fail the second too; 1:
        the second alone). The ``k``-th retry draws ``thin ** k`` times as many iterations and keeps
        every ``thin ** k``-th, at a tenth of the previous attempt's rejection rate: 2x at
        0.99, then 4x at 0.999 by default. Each starts afresh with its own key; a run's
        reported draws are its last attempt's.
    """

    target_accept: float = 0.99
    thin: int = 2
    max_share: float = 1.0
    max_pool_passes: int = 4
    retries: int = 2


def failing_runs(draws: dict[str, np.ndarray], var_names) -> np.ndarray:
    """Runs that fail the convergence check of :func:`~bayes_scalerl.posterior.run_diagnostics`.

    Parameters
    ----------
    draws : dict of numpy.ndarray
        :func:`~bayes_scalerl.engine.sample_window`'s output, arrays (run, chain, draw).
    var_names : sequence of str
        The variables the check covers.

    Returns
    -------
    numpy.ndarray of bool, shape (run,)
        R-hat above 1.01 or NaN, bulk ESS below 100, or a divergent transition.
    """
    from ..posterior.diagnostics import ESS_MIN, RHAT_MAX, convergence

    bad = np.asarray(draws["diverging"]).any(axis=(1, 2))
    for name in var_names:
        c = convergence(np.moveaxis(np.asarray(draws[name]), 0, -1))  # chain, draw, run
        bad |= ~(c["r_hat"] <= RHAT_MAX) | ~(c["ess_bulk"] >= ESS_MIN)
    return bad


def every_kth(v: np.ndarray, thin: int, axis: int, reduce: Callable | None = None) -> np.ndarray:
    """Every ``thin``-th entry of ``v`` along ``axis`` (the ``thin``-th, ``2 thin``-th, ...).

    With ``reduce`` (``np.mean``, ``np.sum``, ``np.any``, ...) each kept entry is instead
    ``reduce`` over the block of ``thin`` entries that ends at it. A last, partial block is
    dropped. Shared by the independent fits' retry (:func:`thin_draws`, draws on axis 2) and
    the pooled chains that run on (:func:`~bayes_scalerl.models.pooling.thin_record`, axis 1).
    """
    v = np.moveaxis(np.asarray(v), axis, -1)
    n = v.shape[-1] // int(thin)
    blocks = v[..., : n * int(thin)].reshape(v.shape[:-1] + (n, int(thin)))
    out = blocks[..., -1] if reduce is None else reduce(blocks, axis=-1)
    return np.moveaxis(out, -1, axis)


def thin_draws(draws: dict[str, np.ndarray], thin: int) -> dict[str, np.ndarray]:
    """Every ``thin``-th draw of arrays (run, chain, draw), the sampler statistics summed up.

    ``diverging`` is whether any iteration of the ``thin`` behind a kept draw diverged,
    ``num_steps`` their leapfrog steps, ``accept_prob`` their mean; the variables,
    ``energy`` and ``lp`` are those of the kept draw; ``step_size`` (run, chain) is kept.
    """
    reduce = {"diverging": np.any, "num_steps": np.sum, "accept_prob": np.mean}
    out = {}
    for k, v in draws.items():
        v = np.asarray(v)
        if k == "step_size":
            out[k] = v
        else:
            out[k] = every_kth(v, thin, 2, reduce.get(k)).astype(v.dtype)
    return out


def _subset(window, idx: np.ndarray):
    return type(window)(*(None if a is None else np.asarray(a)[idx] for a in window))


def sample_retrying(
    key: jax.Array,
    window,
    model,
    config: SamplerConfig,
    *,
    retry: Retry | None = Retry(),
    checkpoint_dir: str | os.PathLike | None = None,
    **engine_kw: Any,
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """:func:`~bayes_scalerl.engine.sample_window`, then the failing runs again (``Retry.retries``).

    Parameters
    ----------
    key, window, model, config
        As for :func:`~bayes_scalerl.engine.sample_window`.
    retry : Retry or None
        How failing runs are sampled again; ``None``: not at all.
    checkpoint_dir : str or os.PathLike, optional
        As for ``sample_window``; the second attempt checkpoints to its ``retry``
        subfolder, a third to ``retry-2``, and so on.
    **engine_kw
        The other options of ``sample_window`` (not ``keep``: the check needs the
        statistics).

    Returns
    -------
    (dict of numpy.ndarray, numpy.ndarray of int)
        The draws (each run's last attempt's, thinned, for the runs sampled again) and
        how many times each run was sampled again (0: its first attempt passed).
    """
    draws = sample_window(key, window, model, config, checkpoint_dir=checkpoint_dir, **engine_kw)
    n_runs = window.reward.shape[0]
    retried = np.zeros(n_runs, np.int8)
    if retry is None:
        return draws, retried
    bad = failing_runs(draws, model.var_names)
    n_bad = int(bad.sum())
    if n_bad == 0:
        return draws, retried
    if n_bad > retry.max_share * n_runs:
        logger.info(
            "%d of %d runs failed the convergence checks: more than %.0f%%, not sampled again "
            "(sample longer: warmup, samples)",
            n_bad,
            n_runs,
            100 * retry.max_share,
            extra={"phase": "retry"},
        )
        return draws, retried
    for attempt in range(1, int(retry.retries) + 1):
        idx = np.flatnonzero(bad)
        thin = int(retry.thin) ** attempt
        longer = config._replace(
            target_accept=_attempt_accept(config, retry, attempt), samples=config.samples * thin
        )
        again = sample_window(
            _attempt_key(key, attempt),
            _subset(window, idx),
            model,
            longer,
            checkpoint_dir=_attempt_dir(checkpoint_dir, attempt),
            **_spread(engine_kw, config, len(idx)),
        )
        again = thin_draws(again, thin)
        for k in tuple(model.var_names) + STATS:
            draws[k][idx] = again[k]
        retried[idx] = attempt
        if attempt == retry.retries:
            break
        still = failing_runs(again, model.var_names)
        if not still.any():
            break
        bad = np.zeros(n_runs, bool)
        bad[idx[still]] = True
    return draws, retried


def _attempt_key(key: jax.Array, attempt: int) -> jax.Array:
    """The ``k``-th retry's key: its own stream (the first retry's is that of earlier versions)."""
    if attempt == 1:
        return jax.random.fold_in(key, _RETRY_STREAM)
    return jax.random.fold_in(jax.random.fold_in(key, _LATER_STREAM), attempt)


def _attempt_accept(config: SamplerConfig, retry: Retry, attempt: int) -> float:
    """Attempt ``k``'s target acceptance: the rejection rate a tenth of the attempt before's."""
    first = max(config.target_accept, retry.target_accept)
    return 1.0 - (1.0 - first) / 10.0 ** (attempt - 1)


def _attempt_dir(checkpoint_dir: str | os.PathLike | None, attempt: int) -> str | None:
    """Attempt ``k``'s checkpoint folder: ``retry``, then ``retry-2``, ``retry-3``, ..."""
    if checkpoint_dir is None:
        return None
    return os.path.join(os.fspath(checkpoint_dir), "retry" if attempt == 1 else f"retry-{attempt}")


def _spread(engine_kw: dict, config: SamplerConfig, n: int) -> dict:
    """The engine's options for ``n`` runs sampled again: without a group size of the
    caller's, the few runs would make one group on one device, so they are spread over all."""
    kw = dict(engine_kw)
    if kw.get("group_size") is None and config.group_size is None:
        n_dev = kw.get("n_devices") or jax.local_device_count()
        per_device = -(-n // n_dev)
        kw["group_size"] = max(4, 1 << (per_device - 1).bit_length())  # a power of two: few programs
    return kw
