"""The hierarchical fit: every curve's independent fit on the sampling engine, then the pooling.

See :mod:`bayes_scalerl.models.pooling` for the sampler. This module runs it: the
independent fit of every curve through :func:`bayes_scalerl.engine.sample_window`
(chunks, devices, checkpoint and resume, Ray), whose draws start the chains and shape
the proposals, then the blocked Gibbs sweeps in one compiled program (its chains split
over the local devices); and it lays the
draws out as the DataTree builder wants them.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..engine import STATS, SamplerConfig, padded_inputs, runtime
from ..engine.retry import sample_retrying
from ..models.hierarchical import HYPER_VARS, HierIndex, HierPriors
from ..models.pooling import pool_data, sample_pooled
from ..models.sigmoid import SigmoidModel

__all__ = [
    "sample_two_stage",
    "pooled_fails",
    "sweeps_per_draw",
    "pooled_warmup",
    "THIN",
    "SMALL_STUDY",
    "POOL_WARMUP_SHARE",
]

#: Gibbs sweeps per kept draw (at least).
THIN = 4
#: Training runs below which a study gets more sweeps per draw (up to 4x :data:`THIN`).
SMALL_STUDY = 200
#: Share of the configured warm-up draws that the pooled chains of a large study spend warming up.
POOL_WARMUP_SHARE = 0.5


def sweeps_per_draw(n_train: int) -> int:
    """Gibbs sweeps per kept draw for a study of ``n_train`` training runs.

    :data:`THIN`, times ``round(SMALL_STUDY / n_train)`` clipped to 1-4: a small study's
    population level (a handful of recipes) mixes more slowly per sweep, and its sweeps are
    cheap, so it gets up to four times as many (24 runs: 16; 100: 8; 500 and more: 4).
    """
    return THIN * int(np.clip(round(SMALL_STUDY / max(int(n_train), 1)), 1, 4))


def pooled_warmup(warmup: int, n_train: int) -> int:
    """Warm-up draws of the pooled chains, for a configured ``warmup`` and ``n_train`` training runs.

    A large study (one that gets :data:`THIN` sweeps per draw, :func:`sweeps_per_draw`)
    warms up for :data:`POOL_WARMUP_SHARE` of ``warmup``: its chains start from the
    independent fits' draws, already past their own warm-up, and its many recipes pin the
    levels above them, so the warm-up mostly adapts step scales. Measured on the 500-run
    study of ``benchmarks/hierarchical_scale.py`` (pooled stage alone, 3 sampler seeds, 4
    chains x 500 kept draws of 4 sweeps): 250 warm-up draws gave the same worst R-hat
    (1.0070-1.0088 against 1.0067-1.0095), no parameter over 1.01 either way, and the same
    smallest bulk ESS of a run's ``A`` (878-1,077 against 940-1,096), in two thirds of the time.

    A smaller study keeps the whole ``warmup``: its population level (a few dozen runs)
    can take long to settle when the runs are weakly identified, and its sweeps are cheap.
    With half the warm-up, 32 one-seed recipes of creep curves fitted to half their compute
    (``benchmarks/misspecification.py``, sigmoid and creep at 2x) passed the convergence
    checks on 0.72 of the runs, against 0.96-1.00 in earlier runs with the whole warm-up (one
    run each: partly chance, perhaps, but such a study saves little time by it).
    """
    if sweeps_per_draw(n_train) > THIN:
        return int(warmup)
    return max(1, int(round(POOL_WARMUP_SHARE * int(warmup))))


def pooled_fails(rec: dict[str, np.ndarray]) -> bool:
    """Whether the pooled chains fail the convergence check on any parameter at any level.

    The check of :func:`~bayes_scalerl.posterior.run_diagnostics`: R-hat above 1.01 or bulk
    ESS below 100 (NaN, a variable that does not move, passes). ``rec`` is
    :func:`~bayes_scalerl.models.pooling.sample_pooled`'s record, arrays (chain, draw, ...).
    """
    from .diagnostics import ESS_MIN, RHAT_MAX, convergence

    for name, v in rec.items():
        if name in ("moved", "passes"):
            continue
        c = convergence(v)
        if np.any(c["r_hat"] > RHAT_MAX) or np.any(c["ess_bulk"] < ESS_MIN):
            return True
    return False


def _levels(rec: dict, idx: HierIndex) -> tuple[dict, dict]:
    """Recipe- and population-level posterior variables, with their dims and coordinates."""
    one_task = len(idx.tasks) == 1
    cd = ("chain", "draw")
    A_r = rec["A_recipe"]  # chain, draw, recipe, task
    out = {"A_recipe": (cd + ("recipe",), A_r[..., 0]) if one_task else (cd + ("recipe", "task"), A_r)}
    out["B_recipe"] = (cd + ("recipe",), rec["B_recipe"])
    out["C_mid_recipe"] = (cd + ("recipe",), rec["C_mid_recipe"])
    for k in HYPER_VARS:
        v = rec[k]
        if k == "A_pop":
            out[k] = (cd, v[..., 0]) if one_task else (cd + ("task",), v)
        else:
            out[k] = (cd, v)
    coords = {"recipe": np.array(idx.recipes, dtype=str)}
    if not one_task:
        coords["task"] = np.array(idx.tasks, dtype=str)
    return out, coords


def sample_two_stage(
    key: jax.Array,
    window,
    idx: HierIndex,
    hp: HierPriors,
    model: SigmoidModel,
    config: SamplerConfig,
    engine_kw: dict[str, Any],
) -> dict:
    """Independent fits of every curve (the engine), then ``config.chains`` pooled chains.

    The pooled chains run ``(pooled_warmup(config.warmup, n) + config.samples) * k`` sweeps
    each and keep every ``k``-th of the sampling sweeps (``k`` from :func:`sweeps_per_draw`),
    so they have the independent fit's shape. With a retry (``engine_kw["retry"]``, a
    :class:`~bayes_scalerl.engine.retry.Retry`) the pooled chains that fail the convergence
    check (:func:`pooled_fails`) run on, one pass of ``config.samples`` draws at a time, until
    they pass or have run ``retry.max_pool_passes`` passes; after ``p`` passes every
    ``p``-th draw of the whole is kept, as the independent fits' retry thins a failing
    run's longer chains; here the chains are continued, not restarted (their warm-up and
    adaptation stand).

    Returns
    -------
    dict
        ``post`` (curve-level ``A, B, C_mid, sigma``, each (run, chain, draw)),
        ``extra_posterior`` and ``extra_coords`` (recipe and population levels), ``stats``
        (the independent fits' sampler statistics, per run) and ``extra_stats``
        (``pool_moved``: the share of sweeps in which each run's ``B, C_mid`` moved),
        ``retried`` (per run, the independent fits') and ``pool_passes`` (how many passes
        the pooled chains ran: 1 unless they ran on).
    """
    k1, k2 = jax.random.split(key)
    retry = engine_kw.get("retry")
    draws, retried = sample_retrying(k1, window, model, config, **engine_kw)
    n_runs = window.reward.shape[0]

    def flat(name):
        return np.asarray(draws[name]).reshape(n_runs, -1)

    data = model.data({k: jnp.asarray(v) for k, v in padded_inputs(window).items()})
    pd = pool_data(data, idx, np.log(flat("B")), np.log(flat("C_mid")), flat("sigma"), flat("A"), hp)
    with runtime.phase("sample"):
        rec = sample_pooled(
            k2,
            pd,
            hp,
            chains=config.chains,
            warmup=pooled_warmup(config.warmup, len(idx.training_runs)),
            samples=config.samples,
            thin=sweeps_per_draw(len(idx.training_runs)),
            n_devices=engine_kw.get("n_devices"),
            more=None if retry is None else pooled_fails,
            max_passes=1 if retry is None else retry.max_pool_passes,
        )
    post = {k: np.moveaxis(rec[k], -1, 0) for k in ("A", "B", "C_mid", "sigma")}  # run, chain, draw
    extra, coords = _levels(rec, idx)
    moved = rec["moved"][..., idx.curve_train]  # chain, draw, run
    return {
        "post": post,
        "extra_posterior": extra,
        "extra_coords": coords,
        "stats": {k: np.asarray(draws[k]) for k in STATS},
        "extra_stats": {"pool_moved": (("chain", "draw", "run"), moved)},
        "retried": retried,
        "pool_passes": int(rec["passes"]),
    }
