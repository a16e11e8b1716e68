"""Identifiability of the ceiling: do my (small-compute) runs pin down ``A``?

A curve seen only below its midpoint ``C_mid`` says little about where it levels off:
a high ceiling reached late and a low one reached early fit the same points (the
``A``-``C_mid`` ridge), and the posterior of ``A`` then follows its prior up to the
``A <= 1`` wall. This module measures that, per run, in three ways:

:func:`identifiability`
    From one fit: the width of ``A``'s 90% interval, how much the data shrank ``A``'s
    prior variance (the posterior *contraction*), the prior-posterior overlap and the
    probability that ``C_mid`` lies beyond the data; a flag names weakly identified runs.
:func:`prior_sensitivity`
    Refits under alternative priors that push along the ridge and reports how far the
    median of ``A`` moves.
:func:`budget_sweep`
    Refits on each run truncated at growing compute (every ``(run, budget)`` a
    pseudo-run of one batched fit) to find the compute at which ``A``'s 90% interval
    first fits within ``+-tolerance``, and, for runs not there yet, predicts it from
    simulated future evaluations drawn from the posterior predictive.

Examples
--------
>>> import bayes_scalerl as bs
>>> from bayes_scalerl.analyses.identify import budget_sweep, identifiability, prior_sensitivity
>>> runs = bs.read_runs("curves.csv")                        # doctest: +SKIP
>>> identifiability(bs.fit(runs))                             # doctest: +SKIP
>>> sweep = budget_sweep(runs, tolerance=0.02)                # doctest: +SKIP
>>> sweep.table                                               # doctest: +SKIP
>>> prior_sensitivity(runs, baseline=sweep.result)            # doctest: +SKIP
>>> sweep.write("identify-out")                               # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pandas as pd
import xarray as xr
from scipy import stats

from ..data.runs import MIN_POINTS, DataError, Runs, in_likelihood
from ..models.discrepancy import Discrepancy
from ..models.priors import Priors
from ..posterior.fitting import fit
from ..posterior.results import FitResult

__all__ = [
    "BudgetSweep",
    "identifiability",
    "prior_sensitivity",
    "budget_sweep",
    "plot_width_vs_compute",
    "a_prior_moments",
    "MIN_CONTRACTION",
    "MAX_WIDTH90",
    "ALLOWANCE_NOTE",
    "own_data_draws",
    "verdict_offsets",
    "ALTERNATIVE_PRIORS",
    "SENSITIVITY_SHIFT",
    "DEFAULT_FRACTIONS",
    "DEFAULT_HORIZONS",
]

#: Smallest posterior contraction of ``A`` (1 - posterior var / prior var) for "identified":
#: the posterior standard deviation is at most about a third of the prior's, so the data,
#: not the prior, set ``A``.
MIN_CONTRACTION = 0.9
#: Widest 90% interval of ``A`` (reward units) for "identified": the ceilings of the
#: ScaleRL paper's recipes differ by 0.02-0.12 (Fig. 2: 0.49-0.61; Fig. 3: 0.52-0.59),
#: so an interval wider than 0.10 (+-0.05) cannot rank typical recipes.
MAX_WIDTH90 = 0.10
#: The words the flag of a weakly identified run starts its note with when the sigmoid's own
#: ``A`` would pass :data:`MAX_WIDTH90` and only the discrepancy's allowance for departures
#: beyond the data keeps it from "identified" (the report's ceilings answer looks for them).
ALLOWANCE_NOTE = "; the sigmoid's own"
#: Alternative priors of :func:`prior_sensitivity`, as changes to the baseline priors
#: (:func:`dataclasses.replace`). Both push along the ``A``-``C_mid`` ridge:
#: ``C_mid_tight`` halves the default spread of ``log C_mid`` (90% prior interval about
#: 1/3.4 to 3.4 times the run's largest fitted compute), so a midpoint near the end of
#: the data gains weight: a lower ceiling for a run still rising, a higher one for a run
#: whose early jump put ``C_mid`` far below the end of its data; ``C_mid_wide`` doubles it
#: (about 1/140 to 140 times), so midpoints far beyond (or before) the data gain weight.
ALTERNATIVE_PRIORS: dict[str, dict[str, Any]] = {
    "C_mid_tight": {"C_mid_log_sd": 0.75},
    "C_mid_wide": {"C_mid_log_sd": 3.0},
}
#: Shift of ``A``'s posterior median (reward units) above which :func:`prior_sensitivity`
#: flags a run: the seed-to-seed spread of ``A`` the paper reports (about +-0.02).
SENSITIVITY_SHIFT = 0.02
#: Default budgets of :func:`budget_sweep`: fractions of each run's largest compute,
#: log-spaced by factors of sqrt(2) from 1/8 to 1.
DEFAULT_FRACTIONS = tuple(float(2.0 ** (-k / 2)) for k in range(6, -1, -1))
#: Default horizons of the predicted part of :func:`budget_sweep`: multiples of each
#: run's largest compute.
DEFAULT_HORIZONS = (2.0, 4.0, 8.0)

#: Grid points in ``log B`` and ``log C_mid`` of :func:`own_data_draws`.
_OWN_GRID = (57, 81)
#: Bins of the histogram estimate of the prior-posterior overlap.
_OVERLAP_BINS = 20
#: Grid over R0 ~ Uniform(0, 1) for the marginal prior of A when R0 is fitted.
_R0_GRID = (np.arange(2000) + 0.5) / 2000
#: Arguments of :func:`fit` that :func:`budget_sweep` and :func:`prior_sensitivity` set.
_RESERVED = ("fit_until", "seed")


# ---------------------------------------------------------------------- the prior of A
def _conditional_prior(priors: Priors, R0: np.ndarray):
    """The prior of ``A`` given ``R0`` as a frozen scipy distribution (vectorised over R0)."""
    R0 = np.asarray(R0, float)
    if priors.A_uniform:
        return stats.uniform(loc=R0, scale=1.0 - R0)
    mu, tau = float(priors.A_loc), float(priors.A_scale)
    return stats.truncnorm((R0 - mu) / tau, (1.0 - mu) / tau, loc=mu, scale=tau)


def a_prior_moments(priors: Priors, R0: float | np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Mean and variance of the prior of ``A``.

    Parameters
    ----------
    priors : Priors
        ``A ~ Uniform(R0, 1)`` (variance ``(1 - R0)**2 / 12``) or, with ``A_loc`` and
        ``A_scale``, a Normal(``A_loc``, ``A_scale``) truncated to ``(R0, 1)``.
    R0 : float or array_like, optional
        Each run's ``R0`` (its first evaluation). Ignored when ``priors.R0_fitted``: ``R0``
        is then a parameter with a Uniform(0, 1) prior and the moments are those of the
        marginal prior of ``A`` (law of total variance over a fine grid of ``R0``).

    Returns
    -------
    mean, var : ndarray
        Shaped like ``R0`` (scalars when ``priors.R0_fitted``).
    """
    if priors.R0_fitted:
        d = _conditional_prior(priors, _R0_GRID)
        m, v = d.mean(), d.var()
        return np.asarray(m.mean()), np.asarray(v.mean() + m.var())
    if R0 is None:
        raise ValueError("R0 is needed when priors.R0_fitted is False")
    d = _conditional_prior(priors, np.asarray(R0, float))
    return np.asarray(d.mean()), np.asarray(d.var())


def _prior_bin_mass(priors: Priors, R0: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Prior probability of each bin of ``A``; ``edges`` has shape (run, bins + 1)."""
    if priors.R0_fitted:
        grid = _R0_GRID[::4, None, None]  # 500 values of R0 are plenty for bin masses
        cdf = np.where(edges[None] > grid, _conditional_prior(priors, grid).cdf(edges[None]), 0.0)
        cdf = cdf.mean(axis=0)
    else:
        cdf = _conditional_prior(priors, R0[:, None]).cdf(edges)
    return np.diff(cdf, axis=1)


def _priors_of(result: FitResult) -> Priors:
    return Priors.from_dict(result.settings["priors"])


def own_data_draws(
    result: FitResult, priors: Priors | None = None, *, seed: int = 0, discrepancy: bool = True
) -> np.ndarray | None:
    """Draws of each run's ceiling from its own data under the fixed priors.

    Under ``Priors(from_batch=...)`` each run's prior of ``B``, ``C_mid`` (and, with
    ``"ceiling"``, ``A``) is learnt from the other runs: the band gains from it, but a
    narrow ``A`` then says as much about the batch as about the run. This is the
    posterior of ``A`` that the run's data give under the fixed priors (``priors`` with
    ``from_batch=False``, ``A`` uniform on ``(R0, 1)``), from the same grid the batch's
    priors were learnt on (:func:`~bayes_scalerl.models.population.fixed_prior_gains`),
    plus the fit's draws of the discrepancy's ceiling offset where it has one. The grid
    is twice as fine as the population's (steps of 1/8 and 1/12 of the ``log B`` and
    ``log C_mid`` prior sds): its quantiles of ``A`` were within 0.008 of 12,000 NUTS
    draws' on runs whose 90% widths were 0.025-0.73 (within 0.02 on the population's grid).

    Parameters
    ----------
    result : FitResult
        An independent fit.
    priors : Priors, optional
        The priors whose fixed version is used (default: those recorded in the fit).
    seed : int
        Seed of the draws from the grid.
    discrepancy : bool
        Add the fit's draws of the discrepancy's ceiling offset (default); ``False`` gives
        the sigmoid's own asymptote.

    Returns
    -------
    ndarray of shape (run, chain * draw), or None
        None when the fit's priors were not learnt from the batch (its own draws are then
        the answer).
    """
    from ..models.population import fixed_prior_gains, grid_loglik
    from ..posterior.assemble import window_from_datatree

    if "batch_prior" not in result.dt["constant_data"]:
        return None
    fixed = dataclasses.replace(priors or _priors_of(result), from_batch=False)
    program = dataclasses.replace(result.model.priors, from_batch=False)  # rho/ou as data, as in the fit
    grid = grid_loglik(window_from_datatree(result.dt), program, n_b=_OWN_GRID[0], n_c=_OWN_GRID[1])
    A = result.draws("A")
    gains = fixed_prior_gains(grid, fixed, np.random.default_rng(seed), A.shape[1])
    ceiling = grid.R0[:, None] + gains
    delta = result._delta(None) if discrepancy else None
    return ceiling if delta is None else np.clip(ceiling + delta, 0.0, 1.0)


def verdict_offsets(result: FitResult, *, seed: int = 0) -> np.ndarray | None:
    """Draws of each run's ceiling offset under the scales the verdict reads.

    The calibrated discrepancy's band draws its offsets from the batch's distribution of
    scales with a share of 0.02 of the wide prior; the verdict of :func:`identifiability`
    reads at least ``Discrepancy.verdict_weight`` pseudo-runs of it (one: a batch of ``n``
    runs leaves about a chance in ``n + 1`` that the next departs from the sigmoid the
    wide way), so that a batch of a handful of runs cannot rule out for one run a departure
    it has not seen. Above about 49 runs the two are one.

    Parameters
    ----------
    result : FitResult
    seed : int
        Seed of the draws.

    Returns
    -------
    ndarray of shape (run, chain * draw), or None
        None for a fit without the calibrated discrepancy; the fit's own offsets where the
        band's share gives the wide prior as many pseudo-runs (then no scales of the
        verdict's own are kept) or for a fit saved before they were.
    """
    from ..models.discrepancy import draw_offsets

    delta = result._delta(None)
    cd = result.dt["constant_data"]
    if delta is None or "discrepancy_verdict" not in cd:
        return delta
    post = cd["discrepancy_verdict"].transpose("run", ...).values.astype(float)
    horizon = float(result.settings["discrepancy"]["horizon"])
    level, dev = draw_offsets(np.random.default_rng(seed), post, delta.shape, horizon)
    return level + dev


# ---------------------------------------------------------------------- identifiability
def identifiability(
    result: FitResult,
    *,
    priors: Priors | None = None,
    min_contraction: float = MIN_CONTRACTION,
    max_width: float = MAX_WIDTH90,
) -> pd.DataFrame:
    """How well each run's data pin down the asymptote ``A``.

    Parameters
    ----------
    result : FitResult
        An independent fit (:func:`~bayes_scalerl.fit`).
    priors : Priors, optional
        The priors the fit used (default: those recorded in ``result.settings``). For a
        hierarchical fit the recorded priors are the independent model's, so the
        contraction is then measured against that prior, not the pooled one.
    min_contraction : float
        Smallest contraction of ``A`` for "identified" (default :data:`MIN_CONTRACTION`).
    max_width : float
        Widest 90% interval of ``A`` for "identified" (default :data:`MAX_WIDTH90`).

    Returns
    -------
    pandas.DataFrame
        One row per run:

        ``run``
        ``max_fit_compute``
            Largest compute in the run's likelihood.
        ``a_median``, ``a_q05``, ``a_q95``, ``a_width90``
            Posterior median and equal-tailed 90% interval of ``A`` and its width.
        ``a_width90_data``
            The width of that interval from the run's own data under the fixed priors,
            plus the verdict's allowance for departures beyond the data: ``a_width90``
            itself unless the fit's priors were learnt from the batch
            (``Priors(from_batch=...)``), when the sigmoid's part is measured on
            :func:`own_data_draws`, or the batch is too small for its share of the wide
            prior to count as ``Discrepancy.verdict_weight`` pseudo-runs, when the
            allowance is drawn from that many (:func:`verdict_offsets`). The rule reads
            this width, and the contraction and overlap below are measured on the same
            posterior (the sigmoid's part of it).
        ``a_width90_sigmoid``
            The same width for the sigmoid's own asymptote, without the calibrated
            discrepancy's offset (equal to ``a_width90_data`` for a fit without it). The
            difference is the allowance for departures from the sigmoid beyond the data
            (:class:`~bayes_scalerl.Discrepancy`): a run whose sigmoid width passes the rule
            but whose ``a_width90_data`` does not has a ceiling its data pin down *if* the
            curve keeps its shape, and the flag says so.
        ``a_contraction``
            ``1 - posterior var / prior var`` of the sigmoid's asymptote (the draws of
            ``a_width90_sigmoid``: the prior is of it, and the discrepancy's offset, no
            part of that prior, has heavy tails that would swamp a variance): near 1 when
            the data set ``A``, near 0 when the posterior is the prior (slightly negative values happen when
            the posterior is as wide as the prior, or piles up at both ends of
            ``(R0, 1)``, plus Monte Carlo error). The prior variance is
            ``(1 - R0)**2 / 12`` for ``A ~ Uniform(R0, 1)`` or the truncated normal's
            (:func:`a_prior_moments`).
        ``a_overlap``
            Overlap ``sum(min(prior, posterior))`` of the prior and posterior of ``A`` (the
            sigmoid's, as for the contraction) over 20 equal bins of ``(R0, 1)``: 1 when
            the posterior is the prior, about the prior mass of one bin (0.05 for a
            uniform prior) when the posterior is narrower than a bin. A histogram
            estimate: with 2,000 draws a posterior equal to the prior scores about 0.95,
            not 1.
        ``p_cmid_beyond_data``
            Posterior probability that ``C_mid`` exceeds ``max_fit_compute``: above 0.5
            the midpoint probably lies beyond the data and ``A`` is an extrapolation.
        ``a_identified``, ``a_flag``
            The rule below and its reason in words.
        ``converged``
            The package's convergence check of the run's fit (R-hat, ESS, divergences;
            :meth:`FitResult.diagnostics`). Not part of the rule, but a width from an
            unconverged fit (often a two-mode posterior) is not to be trusted.

    Notes
    -----
    ``A`` is **identified** when ``a_contraction >= min_contraction`` (0.9: the posterior
    standard deviation is at most about a third of the prior's, so the data and not the
    prior set ``A``) **and** ``a_width90 <= max_width`` (0.10: the paper's recipes have
    ceilings 0.02-0.12 apart, so a wider interval cannot rank them). The first guards
    against an informative prior doing the work (a narrow interval that merely repeats a
    tight ``A_loc``/``A_scale`` prior); the second against a posterior that moved from a
    wide prior but is still too vague to use. Under the default uniform prior a
    near-Gaussian posterior that passes the width test has contraction above 0.93, so
    there the width decides; with an informative prior the contraction does. The flag
    reads ``"A identified"``, ``"A weakly identified: posterior follows the prior
    (contraction ...)"`` or ``"A weakly identified: 90% interval ... wide (> ...)"``.

    Priors learnt from the batch narrow ``A`` by what the *other* runs say: right for the
    band, which is calibrated that way, but no evidence that this run has levelled off (a
    run seen only below its midpoint gets the batch's ceiling, and the run that differs
    from its batch is the one it gets wrong). So the verdict is taken on the posterior the
    run's own data give under the fixed priors (:func:`own_data_draws`); the reported
    interval stays the fit's. Likewise the allowance for departures beyond the data:
    the band's is calibrated on average over the batch, but "identified" claims one run's
    curve keeps its shape, and a batch of a handful of runs cannot rule out for one run a
    departure it has not seen, so the verdict reads at least one pseudo-run of the wide
    prior (:func:`verdict_offsets`).

    Contraction and width see one posterior under one prior. A curve that fits the
    sigmoid poorly (say a fast early jump, then a slow creep) can have two modes, a
    low plateau reached early and a high ceiling reached late, and a narrow interval
    around whichever mode the prior favours; :func:`prior_sensitivity` exposes that.
    """
    priors = priors or _priors_of(result)
    names = result.run_names
    A = result.draws("A")
    cd = result.dt["constant_data"]
    compute = cd["compute"].values
    fitted = cd["in_fit"].values.astype(bool)
    c_fit = np.where(fitted, compute, -np.inf).max(axis=1)
    q05, q50, q95 = np.quantile(A, [0.05, 0.5, 0.95], axis=1)
    width = q95 - q05
    delta = result._delta(None)
    verdict = verdict_offsets(result)
    own_sigmoid = own_data_draws(result, priors, discrepancy=False)
    if own_sigmoid is None:
        sigmoid = A if delta is None else A - delta  # the sampler's own draws
    else:
        sigmoid = own_sigmoid
    if own_sigmoid is None and "discrepancy_verdict" not in cd:
        width_data = width  # the fit's own draws
    else:  # the run's own data, plus the verdict's allowance beyond them
        own = sigmoid if verdict is None else np.clip(sigmoid + verdict, 0.0, 1.0)
        width_data = np.subtract(*np.quantile(own, [0.95, 0.05], axis=1))
    width_sigmoid = np.subtract(*np.quantile(sigmoid, [0.95, 0.05], axis=1))
    # contraction and overlap compare the sigmoid's asymptote with its prior, from the run's
    # own data: the discrepancy's offset is no part of that prior, and its heavy tails (a
    # scale mixture) would swamp a variance
    A = sigmoid
    fixed = dataclasses.replace(priors, from_batch=False)
    if fixed.R0_fitted:
        R0 = np.zeros(len(names))
        _, prior_var = a_prior_moments(fixed)
        prior_var = np.full(len(names), float(prior_var))
    else:
        R0 = cd["R0_obs"].values.astype(float)
        _, prior_var = a_prior_moments(fixed, R0)
    post_var = A.var(axis=1, ddof=1)
    contraction = 1.0 - post_var / prior_var
    edges = R0[:, None] + (1.0 - R0[:, None]) * np.linspace(0.0, 1.0, _OVERLAP_BINS + 1)[None, :]
    prior_mass = _prior_bin_mass(fixed, R0, edges)
    pos = np.clip((A - R0[:, None]) / (1.0 - R0[:, None]), 0.0, 1.0 - 1e-12)
    bins = (pos * _OVERLAP_BINS).astype(int)
    # every run's bin counts from one bincount: run i's bins offset by i * bins
    flat = (bins + _OVERLAP_BINS * np.arange(len(bins))[:, None]).ravel()
    post_mass = np.bincount(flat, minlength=len(bins) * _OVERLAP_BINS).reshape(len(bins), _OVERLAP_BINS)
    post_mass = post_mass / A.shape[1]
    overlap = np.minimum(prior_mass, post_mass).sum(axis=1)
    p_beyond = (result.draws("C_mid") > c_fit[:, None]).mean(axis=1)
    converged = result.diagnostics()["converged"].to_numpy(bool)
    follows = contraction < min_contraction
    too_wide = width_data > max_width
    flags = []
    for i in range(len(names)):
        if follows[i]:
            flags.append(
                f"A weakly identified: posterior follows the prior "
                f"(contraction {contraction[i]:.2f} < {min_contraction:g})"
            )
        elif too_wide[i]:
            flag = f"A weakly identified: 90% interval {width_data[i]:.3f} wide (> {max_width:g})"
            if delta is not None and width_sigmoid[i] <= max_width:
                flag += (
                    f"{ALLOWANCE_NOTE} {width_sigmoid[i]:.3f}, the rest the allowance for "
                    "departures from the sigmoid beyond the data"
                )
            flags.append(flag)
        else:
            flags.append("A identified")
    return pd.DataFrame(
        {
            "run": names,
            "max_fit_compute": c_fit,
            "a_median": q50,
            "a_q05": q05,
            "a_q95": q95,
            "a_width90": width,
            "a_width90_data": width_data,
            "a_width90_sigmoid": width_sigmoid,
            "a_contraction": contraction,
            "a_overlap": overlap,
            "p_cmid_beyond_data": p_beyond,
            "a_identified": ~(follows | too_wide),
            "a_flag": flags,
            "converged": converged,
        }
    )


# ---------------------------------------------------------------------- prior sensitivity
def _fit_kwargs(fit_kwargs: Mapping[str, Any] | None, who: str) -> dict:
    kw = dict(fit_kwargs or {})
    clash = [k for k in _RESERVED if k in kw]
    if clash:
        raise TypeError(f"fit_kwargs may not set {', '.join(clash)}: {who} sets them")
    if kw.get("model", "independent") != "independent":
        raise ValueError(f"{who} needs independent fits (model='independent')")
    kw.setdefault("log_likelihood", False)
    return kw


def prior_sensitivity(
    runs: Runs | pd.DataFrame,
    *,
    fit_kwargs: Mapping[str, Any] | None = None,
    alternatives: Mapping[str, Priors | Mapping[str, Any]] | None = None,
    baseline: FitResult | None = None,
    seed: int = 0,
    shift: float = SENSITIVITY_SHIFT,
) -> pd.DataFrame:
    """How far the posterior median of ``A`` moves when the prior changes.

    Parameters
    ----------
    runs : Runs or pandas.DataFrame
        The curves.
    fit_kwargs : mapping, optional
        Arguments of :func:`~bayes_scalerl.fit` (``priors``, ``min_compute``, ``chains``,
        ``warmup``, ``samples``, ...). ``priors`` is the baseline (default ``Priors()``).
        ``fit_until`` and ``seed`` may not be set here.
    alternatives : mapping, optional
        Name to either a :class:`Priors` (used as is) or a mapping of fields changed in
        the baseline priors. Default :data:`ALTERNATIVE_PRIORS` (``C_mid_tight``,
        ``C_mid_wide``). Each alternative is one more fit (and, being a new prior, one
        more compilation).
    baseline : FitResult, optional
        A fit of these runs under the baseline priors and ``fit_kwargs`` (e.g.
        :attr:`BudgetSweep.result`), to save refitting it.
    seed : int
        Seed of every fit.
    shift : float
        A run is flagged when any alternative moves its median of ``A`` by more than
        this (default 0.02).

    Returns
    -------
    pandas.DataFrame
        One row per run: ``run``, ``a_median`` (baseline), ``a_median_{name}`` and
        ``shift_{name}`` (alternative minus baseline) for each alternative,
        ``max_abs_shift`` and ``prior_sensitive`` (``max_abs_shift > shift``).

    Raises
    ------
    ValueError
        If ``baseline`` lacks some of the runs, or an alternative is not a valid prior.
    """
    if not isinstance(runs, Runs):
        runs = Runs.from_frame(runs)
    kw = _fit_kwargs(fit_kwargs, "prior_sensitivity")
    base_priors = kw.pop("priors", None) or Priors()
    alternatives = ALTERNATIVE_PRIORS if alternatives is None else alternatives
    alt_priors = {}
    for name, alt in alternatives.items():
        alt_priors[name] = alt if isinstance(alt, Priors) else dataclasses.replace(base_priors, **dict(alt))
    names = runs.names
    if baseline is None:
        baseline = fit(runs, priors=base_priors, seed=seed, **kw)
    missing = sorted(set(names) - set(baseline.run_names))
    if missing:
        raise ValueError(f"baseline has no run(s) {', '.join(map(repr, missing))}")

    def medians(res: FitResult) -> np.ndarray:
        idx = {r: i for i, r in enumerate(res.run_names)}
        return np.median(res.draws("A"), axis=1)[[idx[n] for n in names]]

    base = medians(baseline)
    out = pd.DataFrame({"run": names, "a_median": base})
    shifts = []
    for name, p in alt_priors.items():
        m = medians(fit(runs, priors=p, seed=seed, **kw))
        out[f"a_median_{name}"] = m
        out[f"shift_{name}"] = m - base
        shifts.append(np.abs(m - base))
    out["max_abs_shift"] = np.max(shifts, axis=0) if shifts else 0.0
    out["prior_sensitive"] = out["max_abs_shift"] > shift
    return out


# ---------------------------------------------------------------------- budget sweep
@dataclasses.dataclass
class BudgetSweep:
    """Width of ``A``'s 90% interval against compute, observed and predicted.

    Attributes
    ----------
    table : pandas.DataFrame
        One row per input run: ``run``, ``max_compute`` (its largest evaluation), the
        :func:`identifiability` columns of the fit on all its data (``a_median``,
        ``a_width90``, ``a_width90_data``, ``a_contraction``, ``a_overlap``,
        ``p_cmid_beyond_data``, ``a_identified``, ``a_flag``, ``converged``;
        NaN/empty/False for a run that could not be fitted),
        ``reached_at`` (the compute from which ``A``'s 90% interval, as the rule of
        :func:`identifiability` reads it (``a_width90_data``), stays within
        ``+-tolerance``, NaN if not within the observed compute), ``predicted_at``
        (the smallest horizon from which the median over simulated futures stays within it;
        NaN if reached already or not within the horizons) and ``status`` (in words).
    widths : pandas.DataFrame
        Long table ``run, budget, a_width90, a_width90_data, a_median, converged,
        source``: ``budget`` is the largest compute in the data of that fit, ``source`` is
        ``"observed"`` (the run truncated at that compute) or ``"predicted"`` (observed
        data plus simulated future evaluations up to that compute; the widths and
        ``a_median`` are medians over the simulated futures). ``a_width90_data`` is the
        width the sweep reads. ``converged`` is the share of the fits behind the
        row that pass the package's convergence check (0 or 1 when observed).
    tolerance : float
        Half-width asked of ``A``'s 90% interval.
    notes : list of str
        Budgets left out for too few points, runs left out entirely, and the notes
        the runs came with.
    fits : dict
        ``"observed"``: the fit of every ``(run, budget)`` pseudo-run (named
        ``"{run}@{budget:g}"``); ``"predicted"``: the fit of the simulated futures (named
        ``"{run}@{horizon:g}x#{k}"``), or ``None`` when no run needed one.
    settings : dict
        The arguments of :func:`budget_sweep`.
    """

    table: pd.DataFrame
    widths: pd.DataFrame
    tolerance: float
    notes: list[str]
    fits: dict
    settings: dict
    _full: dict = dataclasses.field(default_factory=dict, repr=False)

    @property
    def result(self) -> FitResult:
        """The fit of every fitted run on all its data, with the runs' own names.

        The pseudo-runs of the largest budget, renamed: the posterior a plain
        :func:`~bayes_scalerl.fit` with these settings gives (use it as the ``baseline`` of
        :func:`prior_sensitivity`), up to what the batch shares: priors learnt from the
        batch (the default) are learnt here from every cut of the other runs, and the
        discrepancy's scales from every cut's refit.
        """
        pseudo, real = list(self._full.values()), list(self._full.keys())
        return _rename_runs(self.fits["observed"], pseudo, real)

    def write(self, out_dir: str | os.PathLike, *, sensitivity: pd.DataFrame | None = None) -> Path:
        """Write ``identify.csv`` (:attr:`table`), ``widths.csv`` and ``widths.png`` atomically.

        The files go to a temporary folder first and are moved into ``out_dir`` only
        when all are complete (:func:`bayes_scalerl.data.files.atomic_output_dir`).

        Parameters
        ----------
        out_dir : path
        sensitivity : pandas.DataFrame, optional
            A :func:`prior_sensitivity` table, written as ``sensitivity.csv`` with the rest.

        Returns
        -------
        pathlib.Path
            ``out_dir``.
        """
        from ..data.files import atomic_output_dir

        with atomic_output_dir(out_dir) as tmp:
            self.table.to_csv(tmp / "identify.csv", index=False)
            self.widths.to_csv(tmp / "widths.csv", index=False)
            fig = plot_width_vs_compute(self)
            fig.savefig(tmp / "widths.png", dpi=150, bbox_inches="tight")
            if sensitivity is not None:
                sensitivity.to_csv(tmp / "sensitivity.csv", index=False)
        return Path(out_dir)


def _rename_runs(result: FitResult, old: list[str], new: list[str]) -> FitResult:
    """The runs ``old`` of ``result``, renamed ``new`` (every group with a ``run`` dim)."""

    def pick(ds: xr.Dataset) -> xr.Dataset:
        if "run" not in ds.dims:
            return ds
        return ds.sel(run=old).assign_coords(run=np.array(new, dtype=str))

    return FitResult(result.dt.map_over_datasets(pick))


def _future_grid(c_fit: np.ndarray, c_max: float, horizons: Sequence[float]) -> np.ndarray:
    """Future evaluation computes up to ``max(horizons) * c_max``, log-spaced.

    As many points per decade of compute as the run has over its fitted span; each
    horizon is a grid point.
    """
    c_pos = np.sort(c_fit[c_fit > 0])
    span = math.log10(c_pos[-1] / c_pos[0]) if len(c_pos) > 1 else 0.0
    per_decade = (len(c_pos) - 1) / span if span > 0 else 8.0
    grid, lo = [], 1.0
    for h in horizons:
        n = max(1, math.ceil(per_decade * math.log10(h / lo) - 1e-9))
        grid.append(c_max * np.geomspace(lo, h, n + 1)[1:])
        lo = h
    return np.concatenate(grid)


def _first_within(widths: np.ndarray, target: float) -> int | None:
    """Index from which every width is within ``target`` (``None`` if the last is not)."""
    ok = widths <= target
    if not ok[-1]:
        return None
    k = len(ok) - 1
    while k > 0 and ok[k - 1]:
        k -= 1
    return k


#: Columns of the full-data fit that :attr:`BudgetSweep.table` carries.
_TABLE_COLS = ("a_median", "a_width90", "a_width90_data", "a_contraction", "a_overlap", "p_cmid_beyond_data")


class _Observed(NamedTuple):
    """The observed part of a sweep: every ``(run, budget)`` fitted at once."""

    fit: FitResult
    #: :func:`identifiability` of ``fit``, one row per pseudo-run.
    ident: pd.DataFrame
    #: The observed rows of :attr:`BudgetSweep.widths`.
    widths: pd.DataFrame
    #: Run name to the pseudo-run of its largest budget (all its data).
    full: dict[str, str]
    #: Run name to its largest compute.
    max_compute: dict[str, float]


@dataclasses.dataclass
class _Progress:
    """Where each run stands against the tolerance."""

    #: Budget from which the observed width stays within the target.
    reached: dict[str, float]
    #: Whether that budget is the smallest one tried.
    first_tried: dict[str, bool]
    #: Compute from which the predicted width stays within the target.
    predicted: dict[str, float] = dataclasses.field(default_factory=dict)
    #: Predicted width at each horizon, for the runs that were predicted.
    pred_width: dict[str, dict[float, float]] = dataclasses.field(default_factory=dict)


def _sweep_arguments(
    budgets: Sequence[float] | None,
    fractions: Sequence[float] | None,
    tolerance: float,
    n_future: int,
    horizons: Sequence[float],
) -> tuple[np.ndarray | None, np.ndarray | None, tuple[float, ...]]:
    """Check the arguments of :func:`budget_sweep`.

    Parameters
    ----------
    budgets, fractions, tolerance, n_future, horizons
        As :func:`budget_sweep` takes them.

    Returns
    -------
    cuts : ndarray or None
        The budgets as floats; ``None`` when the runs are cut at fractions.
    fractions : ndarray or None
        The fractions as floats (:data:`DEFAULT_FRACTIONS` when neither is given);
        ``None`` when the runs are cut at budgets.
    horizons : tuple of float

    Raises
    ------
    ValueError
        On arguments out of range.
    """
    if budgets is not None and fractions is not None:
        raise ValueError("give at most one of budgets (computes) and fractions (of each run's compute)")
    if not (math.isfinite(tolerance) and tolerance > 0):
        raise ValueError(f"tolerance must be a positive number, got {tolerance!r}")
    if int(n_future) != n_future or n_future < 0:
        raise ValueError(f"n_future must be a non-negative integer, got {n_future!r}")
    horizons = tuple(float(h) for h in horizons)
    if (
        not horizons
        or any(not (math.isfinite(h) and h > 1) for h in horizons)
        or list(horizons) != sorted(set(horizons))
    ):
        raise ValueError(f"horizons must be increasing numbers > 1, got {horizons!r}")
    if budgets is not None:
        cuts = np.asarray(budgets, float)
        if cuts.size == 0 or not np.all(np.isfinite(cuts) & (cuts > 0)):
            raise ValueError(f"budgets must be positive numbers, got {budgets!r}")
        return cuts, None, horizons
    fr = np.asarray(DEFAULT_FRACTIONS if fractions is None else fractions, float)
    if fr.size == 0 or not np.all(np.isfinite(fr) & (fr > 0) & (fr <= 1)):
        raise ValueError(f"fractions must be in (0, 1], got {fractions!r}")
    return None, fr, horizons


def _in_fit(compute: np.ndarray, kw: Mapping[str, Any]) -> np.ndarray:
    """Which of one run's evaluations enter the likelihood of a fit with arguments ``kw``."""
    R0_fitted = (kw.get("priors") or Priors()).R0_fitted
    return in_likelihood(compute, min_compute=kw.get("min_compute"), R0_fitted=R0_fitted)


class _Piece(NamedTuple):
    """One pseudo-run's data: a run cut at a budget, or continued by a simulated future."""

    compute: np.ndarray
    reward: np.ndarray
    #: The training run it copies: every pseudo-run of one run (or of one training run's
    #: several tasks) shares it, so that the priors learnt from the batch leave all of them out.
    training_run: str
    #: Graded generations behind each point (``None`` when the runs have no ``n_eval``).
    n_eval: np.ndarray | None = None


def _training_run_of(runs: Runs) -> dict[str, str]:
    """Each run's training run: the ``training_run`` column where the runs have one, else the run."""
    from ..models.population import training_runs

    groups = training_runs(runs)
    names = [str(n) for n in runs.names]
    return dict(zip(names, names if groups is None else [str(g) for g in groups], strict=True))


def _runs_from_pieces(names: Sequence[str], pieces: Sequence[_Piece], source: str) -> Runs:
    """One pseudo-run per name, from its :class:`_Piece`.

    Every pseudo-run keeps its training run in ``training_run``: copies of one run cut at
    several budgets (or continued by several simulated futures) are one run's data, and a
    prior learnt from the batch (``Priors(from_batch=...)``) must not let a cut learn its
    ceiling from its own later data.
    """
    sizes = [len(p.compute) for p in pieces]
    frame = pd.DataFrame(
        {
            "run": np.repeat(names, sizes),
            "compute": np.concatenate([p.compute for p in pieces]),
            "reward": np.concatenate([p.reward for p in pieces]),
            "training_run": np.repeat([p.training_run for p in pieces], sizes),
        }
    )
    if all(p.n_eval is not None for p in pieces):
        frame["n_eval"] = np.concatenate([p.n_eval for p in pieces])
    return Runs.from_frame(frame, source=source)


def _per_run_allowance(kw: Mapping[str, Any], n_pseudo: int, n_runs: int) -> dict[str, Any]:
    """``kw`` with the verdict's pseudo-runs of the discrepancy's wide prior counted per run.

    A sweep fits ``n_pseudo`` copies of ``n_runs`` runs. The verdict's allowance for
    departures beyond the data weighs ``Discrepancy.verdict_weight`` pseudo-runs of the wide
    prior against the batch's runs (:func:`verdict_offsets`); counted against the copies, a
    run cut at eight budgets would read an eighth of the allowance its own fit reads. The
    pseudo-runs are multiplied by the copies per run, so that the full-data cut reads what
    :func:`identifiability` of the runs' own fit reads. (The band's share of the prior is a
    share, the same whatever the count.)
    """
    disc = kw.get("discrepancy", True)
    disc = Discrepancy() if disc is True else disc
    if not isinstance(disc, Discrepancy) or n_runs < 1:
        return dict(kw)
    k = n_pseudo / n_runs
    weight = None if disc.prior_weight is None else disc.prior_weight * k
    return {
        **kw,
        "discrepancy": dataclasses.replace(disc, verdict_weight=disc.verdict_weight * k, prior_weight=weight),
    }


def _truncate(
    runs: Runs,
    cuts: np.ndarray | None,
    fractions: np.ndarray | None,
    kw: Mapping[str, Any],
    notes: list[str],
) -> tuple[list[tuple[str, float]], list[_Piece], dict[str, float]]:
    """Every run cut at every budget, and on all its data; too short cuts are noted and left out.

    Parameters
    ----------
    runs : Runs
    cuts, fractions : ndarray or None
        Shared budgets, or fractions of each run's largest compute (one is ``None``).
    kw : mapping
        Arguments of the fit (its ``min_compute`` and ``priors`` decide what is fitted).
    notes : list of str
        Gets a note per left-out cut.

    Returns
    -------
    levels : list of (str, float)
        ``(run, largest compute kept)`` of each kept cut.
    pieces : list of _Piece
        Compute, reward, training run (and ``n_eval``) of each kept cut.
    max_compute : dict
        Run name to its largest compute.

    Raises
    ------
    DataError
        If no cut of any run has enough points to fit.
    """
    levels, pieces = [], []
    max_compute: dict[str, float] = {}
    train = _training_run_of(runs)
    for name, g in runs.table.groupby("run", sort=False):
        c = g["compute"].to_numpy(float)
        r = g["reward"].to_numpy(float)
        n = g["n_eval"].to_numpy(float) if "n_eval" in g.columns else None
        max_compute[name] = float(c.max())
        cut = cuts[cuts < c.max()] if cuts is not None else fractions * c.max()
        kept_sets = sorted({int(np.searchsorted(c, b * (1 + 1e-12), side="right")) for b in cut} | {len(c)})
        for k in kept_sets:
            n_fit = int(_in_fit(c[:k], kw).sum())
            if n_fit < MIN_POINTS:
                if k == len(c):
                    notes.append(
                        f"run {name!r} left out: {n_fit} point(s) to fit, at least {MIN_POINTS} are needed."
                    )
                elif k > 0:
                    notes.append(
                        f"run {name!r} at compute <= {c[k - 1]:g}: {n_fit} point(s) to fit, "
                        f"at least {MIN_POINTS} are needed; budget left out."
                    )
                continue
            levels.append((name, c[k - 1]))
            pieces.append(_Piece(c[:k], r[:k], train[str(name)], None if n is None else n[:k]))
    if not levels:
        raise DataError(f"{runs.source}: no run has enough points to fit. " + " ".join(notes))
    return levels, pieces, max_compute


def _pseudo_names(levels: Sequence[tuple[str, float]]) -> list[str]:
    """``"{run}@{compute:g}"`` per level, with 12 digits when ``:g`` makes two names equal."""
    for fmt in ("{:g}", "{:.12g}"):
        pseudo = [f"{n}@{fmt.format(c)}" for n, c in levels]
        if len(set(pseudo)) == len(pseudo):
            break
    return pseudo


def _width_row(run: str, budget: float, table: pd.DataFrame, key: Any, source: str) -> dict[str, Any]:
    """A row of :attr:`BudgetSweep.widths` from the row ``key`` of an identifiability ``table``."""
    return {
        "run": run,
        "budget": budget,
        "a_width90": float(table.at[key, "a_width90"]),
        "a_width90_data": float(table.at[key, "a_width90_data"]),
        "a_median": float(table.at[key, "a_median"]),
        "converged": float(table.at[key, "converged"]),
        "source": source,
    }


def _fit_observed(
    runs: Runs,
    cuts: np.ndarray | None,
    fractions: np.ndarray | None,
    kw: Mapping[str, Any],
    seed: int,
    notes: list[str],
) -> _Observed:
    """Fit every ``(run, budget)`` as a pseudo-run of one fit and measure ``A``'s width.

    Parameters
    ----------
    runs : Runs
    cuts, fractions : ndarray or None
        As :func:`_truncate` takes them.
    kw : mapping
        Arguments of :func:`~bayes_scalerl.fit`.
    seed : int
        Seed of the fit.
    notes : list of str
        Gets a note per cut left out.

    Returns
    -------
    _Observed
    """
    levels, pieces, max_compute = _truncate(runs, cuts, fractions, kw, notes)
    pseudo = _pseudo_names(levels)
    n_runs = len({name for name, _ in levels})
    observed = fit(
        _runs_from_pieces(pseudo, pieces, runs.source),
        seed=seed,
        **_per_run_allowance(kw, len(pieces), n_runs),
    )
    ident = identifiability(observed)
    by_pseudo = ident.set_index("run")
    rows, full = [], {}
    for (name, c), p in zip(levels, pseudo, strict=True):
        rows.append(_width_row(name, float(c), by_pseudo, p, "observed"))
        if c == max_compute[name]:
            full[name] = p
    return _Observed(observed, ident, pd.DataFrame(rows), full, max_compute)


def _reached(widths: pd.DataFrame, full: Mapping[str, str], target: float) -> _Progress:
    """The budget from which each fitted run's observed width stays within ``target``."""
    reached: dict[str, float] = {}
    first_tried: dict[str, bool] = {}
    for name in full:
        w = widths[widths["run"] == name]
        k = _first_within(w["a_width90_data"].to_numpy(), target)
        if k is not None:
            reached[name] = float(w["budget"].iloc[k])
            first_tried[name] = k == 0
    return _Progress(reached, first_tried)


def _simulate_futures(
    runs: Runs,
    need: Sequence[str],
    observed: _Observed,
    horizons: tuple[float, ...],
    n_future: int,
    kw: Mapping[str, Any],
    seed: int,
) -> tuple[list[str], list[_Piece], list[tuple[str, float]]]:
    """Each run of ``need`` continued by ``n_future`` posterior predictive draws, cut at each horizon.

    Parameters
    ----------
    runs : Runs
    need : sequence of str
        Runs not yet within the tolerance.
    observed : _Observed
        The observed fit, whose full-data pseudo-runs give the predictive draws.
    horizons : tuple of float
    n_future : int
    kw : mapping
        Arguments of the fit (which points it fits sets the density of the future grid).
    seed : int
        Seed of the draws.

    Returns
    -------
    names : list of str
        ``"{run}@{horizon:g}x#{k}"`` of each pseudo-run.
    pieces : list of _Piece
        Its compute and reward (the observed data, then the simulated ones), its training
        run, and ``n_eval`` (a simulated point's is the run's median) where the runs have it.
    keys : list of (str, float)
        Its run and horizon.
    """
    rng = np.random.default_rng([seed, 7_031_011])
    groups = runs.table.groupby("run", sort=False)
    train = _training_run_of(runs)
    pieces, names, keys = [], [], []
    for name in need:
        g = groups.get_group(name)
        c = g["compute"].to_numpy(float)
        r = g["reward"].to_numpy(float)
        n = g["n_eval"].to_numpy(float) if "n_eval" in g.columns else None
        grid = _future_grid(c[_in_fit(c, kw)], c.max(), horizons)
        draws = observed.fit.predict_draws(
            grid, kind="observation", seed=int(rng.integers(2**31)), runs=[observed.full[name]]
        )[0]  # sample, q
        pick = rng.choice(draws.shape[0], size=int(n_future), replace=False)
        for j, s in enumerate(pick):
            for h in horizons:
                upto = grid <= h * c.max() * (1 + 1e-12)
                n_new = (
                    None
                    if n is None
                    else np.concatenate([n, np.full(int(upto.sum()), np.round(np.median(n)))])
                )
                pieces.append(
                    _Piece(
                        np.concatenate([c, grid[upto]]),
                        np.concatenate([r, draws[s, upto]]),
                        train[str(name)],
                        n_new,
                    )
                )
                names.append(f"{name}@{h:g}x#{j}")
                keys.append((name, h))
    return names, pieces, keys


def _predicted_widths(
    predicted_fit: FitResult,
    keys: Sequence[tuple[str, float]],
    need: Sequence[str],
    horizons: tuple[float, ...],
    max_compute: Mapping[str, float],
    target: float,
) -> tuple[pd.DataFrame, dict[str, float], dict[str, dict[float, float]]]:
    """Median width of ``A`` over the simulated futures, per run and horizon.

    Parameters
    ----------
    predicted_fit : FitResult
        The fit of the simulated futures.
    keys : sequence of (str, float)
        Run and horizon of each of its pseudo-runs.
    need : sequence of str
        The runs predicted.
    horizons : tuple of float
    max_compute : mapping
        Run name to its largest compute.
    target : float
        Widest width within the tolerance.

    Returns
    -------
    rows : pandas.DataFrame
        The predicted rows of :attr:`BudgetSweep.widths`.
    predicted : dict
        Run name to the compute from which the predicted width stays within ``target``.
    pred_width : dict
        Run name to its predicted width at each horizon.
    """
    fut = identifiability(predicted_fit).assign(base=[k[0] for k in keys], horizon=[k[1] for k in keys])
    grouped = fut.assign(converged=fut["converged"].astype(float)).groupby(["base", "horizon"], sort=False)
    agg = grouped[["a_width90", "a_width90_data", "a_median"]].median().join(grouped[["converged"]].mean())
    rows = []
    predicted: dict[str, float] = {}
    pred_width: dict[str, dict[float, float]] = {}
    for name in need:
        hw = [float(agg.at[(name, h), "a_width90_data"]) for h in horizons]
        pred_width[name] = dict(zip(horizons, hw, strict=True))
        rows += [_width_row(name, h * max_compute[name], agg, (name, h), "predicted") for h in horizons]
        k = _first_within(np.asarray(hw), target)
        if k is not None:
            predicted[name] = horizons[k] * max_compute[name]
    return pd.DataFrame(rows), predicted, pred_width


def _full_fit_columns(ident: pd.DataFrame, pseudo: str | None) -> dict[str, Any]:
    """The :func:`identifiability` columns of a run's full-data pseudo-run (empty when unfitted)."""
    if pseudo is None:
        return {**{k: np.nan for k in _TABLE_COLS}, "a_identified": False, "a_flag": "", "converged": False}
    f = ident.loc[pseudo]
    return {
        **{k: float(f[k]) for k in _TABLE_COLS},
        "a_identified": bool(f["a_identified"]),
        "a_flag": str(f["a_flag"]),
        "converged": bool(f["converged"]),
    }


def _status(
    name: str, fitted: bool, c_max: float, progress: _Progress, tolerance: float, horizons: tuple[float, ...]
) -> str:
    """Where run ``name`` stands against the tolerance, in words."""
    if not fitted:
        return "not fitted: too few points"
    if name in progress.reached:
        at = "at or before" if progress.first_tried[name] else "at"
        return f"within +-{tolerance:g} {at} {progress.reached[name]:g}"
    if name in progress.predicted:
        ratio = progress.predicted[name] / c_max
        return f"predicted within +-{tolerance:g} at about {progress.predicted[name]:g} ({ratio:g}x the data)"
    if name in progress.pred_width:
        h = horizons[-1]
        return f"beyond {h:g}x the data: predicted width {progress.pred_width[name][h]:.3f} at {h * c_max:g}"
    return "not within the tolerance; no prediction (n_future=0)"


def _sweep_table(
    names: Sequence[str],
    observed: _Observed,
    progress: _Progress,
    tolerance: float,
    horizons: tuple[float, ...],
) -> pd.DataFrame:
    """:attr:`BudgetSweep.table`: one row per input run."""
    full_ident = observed.ident.set_index("run")
    rows = []
    for name in names:
        c_max = observed.max_compute[name]
        row: dict[str, Any] = {"run": name, "max_compute": c_max}
        row.update(_full_fit_columns(full_ident, observed.full.get(name)))
        row["reached_at"] = progress.reached.get(name, np.nan)
        row["predicted_at"] = progress.predicted.get(name, np.nan)
        row["status"] = _status(name, name in observed.full, c_max, progress, tolerance, horizons)
        rows.append(row)
    out = pd.DataFrame(rows)
    out["a_identified"] = out["a_identified"].astype(bool)
    out["converged"] = out["converged"].astype(bool)
    return out


def _sweep_settings(
    cuts: np.ndarray | None,
    fractions: np.ndarray | None,
    tolerance: float,
    n_future: int,
    horizons: tuple[float, ...],
    seed: int,
    kw: Mapping[str, Any],
) -> dict[str, Any]:
    """:attr:`BudgetSweep.settings`: the arguments, as JSON-ready values."""
    return {
        "budgets": None if cuts is None else [float(b) for b in cuts],
        "fractions": None if fractions is None else [float(f) for f in fractions],
        "tolerance": float(tolerance),
        "n_future": int(n_future),
        "horizons": list(horizons),
        "seed": seed,
        "fit_kwargs": json.loads(json.dumps(kw, default=repr)),
    }


def budget_sweep(
    runs: Runs | pd.DataFrame,
    *,
    budgets: Sequence[float] | None = None,
    fractions: Sequence[float] | None = None,
    tolerance: float = 0.02,
    fit_kwargs: Mapping[str, Any] | None = None,
    n_future: int = 5,
    horizons: Sequence[float] = DEFAULT_HORIZONS,
    seed: int = 0,
) -> BudgetSweep:
    """Compute at which each run's ceiling ``A`` is pinned to ``+-tolerance``, seen and predicted.

    Parameters
    ----------
    runs : Runs or pandas.DataFrame
        The curves.
    budgets : sequence of float, optional
        Shared compute cut-offs: each run is refitted on its evaluations with compute
        ``<= budget`` (budgets at or beyond a run's largest compute are skipped for it).
    fractions : sequence of float, optional
        Cut-offs as fractions in ``(0, 1]`` of each run's largest compute. Give at most
        one of ``budgets`` and ``fractions``; default :data:`DEFAULT_FRACTIONS` (1/8 to
        1 by factors of sqrt(2)). Every run is always also fitted on all its data.
    tolerance : float
        Asked half-width of ``A``'s 90% interval (reward units; default 0.02, the
        seed-to-seed spread of ``A`` in the paper): "within" means width ``<= 2 * tolerance``.
    fit_kwargs : mapping, optional
        Arguments of :func:`~bayes_scalerl.fit` (``priors``, ``min_compute``, ``chains``,
        ``warmup``, ``samples``, ...); ``log_likelihood`` defaults to False.
        ``fit_until`` and ``seed`` may not be set here; the model must be independent.
    n_future : int
        Simulated futures per run not yet within the tolerance (0: no prediction).
    horizons : sequence of float
        Multiples (> 1, increasing) of a run's largest compute at which the futures are
        refitted (default 2, 4, 8).
    seed : int
        Seed of both fits and of the simulated futures.

    Returns
    -------
    BudgetSweep

    Raises
    ------
    ValueError
        On arguments out of range.
    TypeError
        If ``fit_kwargs`` sets ``fit_until`` or ``seed``.
    DataError
        If no run has enough points to be fitted.

    Notes
    -----
    **Observed.** Each run truncated at each budget becomes a pseudo-run
    ``"{run}@{c:g}"`` (``c`` the largest compute it keeps) and all of them are fitted in
    **one** batched :func:`~bayes_scalerl.fit` call (runs are independent, so one
    compilation serves the whole sweep). A truncated run with fewer than 4 points in
    the likelihood is left out at that budget, with a note; cut-offs that keep the
    same evaluations are fitted once. ``reached_at`` is the smallest budget from which
    the width stays ``<= 2 * tolerance`` at every larger budget (so a lucky dip of
    the Monte Carlo noise at a small budget does not count, and a run has reached the
    tolerance exactly when its fit on all the data has). When the smallest budget
    tried already qualifies, the status says "at or before". The width is the one
    :func:`identifiability`'s rule reads, ``a_width90_data`` (the run's own data, plus
    the verdict's allowance for departures beyond them), so that "within +-tolerance"
    never says more than "A identified" would; it equals ``a_width90`` under fixed
    priors without the calibrated discrepancy.

    **One run's cuts are one training run.** Every pseudo-run keeps its run's training
    run (the ``training_run`` column where the runs have one, else the run) and its
    ``n_eval``. Under priors learnt from the batch (the default), a pseudo-run's prior is
    the population of the *other* training runs, so a cut does not learn its ceiling from
    the same run cut later (before 2026-12-07 each cut counted as a run of its own: a run
    swept alone learnt its prior from its own copies;
    ``benchmarks/results/sweep-copies.md``). For the same reason the verdict's allowance
    for departures beyond the data counts its pseudo-runs of the wide prior per run, not
    per copy (``Discrepancy.verdict_weight`` times the copies per run).

    **Predicted.** For every run not within the tolerance on all its data,
    ``n_future`` draws of the posterior predictive (a curve draw plus Gaussian noise of
    that draw's ``sigma``, clipped to [0, 1]) continue it beyond its largest compute
    ``c_max``, log-spaced with as many evaluations per decade of compute as the run
    has over its fitted span, up to ``max(horizons) * c_max``. For each future and
    horizon ``h`` the observed data plus the simulated evaluations up to ``h * c_max``
    form one more pseudo-run; all of them go into **one** more fit. ``predicted_at`` is
    the smallest horizon from which the median over futures of the width stays within
    ``2 * tolerance``; otherwise the status says "beyond" the largest horizon. The
    prediction assumes the fitted curve family holds beyond the data and inherits the
    current posterior: a run whose posterior is still prior-dominated gives futures as
    uncertain as that posterior.
    """
    if not isinstance(runs, Runs):
        runs = Runs.from_frame(runs)
    cuts, fr, horizons = _sweep_arguments(budgets, fractions, tolerance, n_future, horizons)
    kw = _fit_kwargs(fit_kwargs, "budget_sweep")
    target = 2.0 * tolerance
    notes: list[str] = []
    observed = _fit_observed(runs, cuts, fr, kw, seed, notes)
    progress = _reached(observed.widths, observed.full, target)
    widths, predicted_fit = observed.widths, None
    need = [n for n in observed.full if n not in progress.reached] if n_future else []
    if need:
        names, pieces, keys = _simulate_futures(runs, need, observed, horizons, n_future, kw, seed)
        predicted_fit = fit(
            _runs_from_pieces(names, pieces, runs.source),
            seed=seed,
            **_per_run_allowance(kw, len(pieces), len(need)),
        )
        rows, progress.predicted, progress.pred_width = _predicted_widths(
            predicted_fit, keys, need, horizons, observed.max_compute, target
        )
        widths = pd.concat([widths, rows], ignore_index=True)
    table = _sweep_table(runs.names, observed, progress, tolerance, horizons)
    notes += list(runs.notes)
    return BudgetSweep(
        table=table,
        widths=widths,
        tolerance=float(tolerance),
        notes=notes,
        fits={"observed": observed.fit, "predicted": predicted_fit},
        settings=_sweep_settings(cuts, fr, tolerance, n_future, horizons, seed, kw),
        _full=observed.full,
    )


# ---------------------------------------------------------------------- the figure
def plot_width_vs_compute(sweep: BudgetSweep, *, runs: Sequence[str] | None = None):
    """Width of ``A``'s 90% interval against compute, one line per run.

    Solid lines and dots: the run refitted on its data up to that compute. Dotted
    lines and open dots: the median over simulated futures. The dashed horizontal
    line is ``2 * tolerance``. Both axes are logarithmic.

    Parameters
    ----------
    sweep : BudgetSweep
    runs : sequence of str, optional
        Runs to draw (default all).

    Returns
    -------
    matplotlib.figure.Figure
        Built without pyplot (no global figure state to close).
    """
    # The package keeps matplotlib in plots.py; this figure belongs to the identify
    # feature, whose module others edit separately, so it imports matplotlib lazily
    # here (and only here) and never touches pyplot's global state.
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter

    def fmt(x, _pos=None):
        if x <= 0 or not math.isfinite(x):
            return ""
        for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
            if x >= scale:
                return f"{x / scale:.3g}{suffix}"
        return f"{x:.3g}"

    w = sweep.widths
    names = list(runs) if runs is not None else list(pd.unique(w["run"]))
    fig = Figure(figsize=(7.5 if len(names) > 8 else 6.5, 4.2), layout="constrained")
    ax = fig.add_subplot()
    if len(names) <= 10:
        colors = [f"C{i}" for i in range(len(names))]
    else:
        from matplotlib import colormaps

        colors = [colormaps["tab20"](i % 20) for i in range(len(names))]
    for name, color in zip(names, colors, strict=True):
        o = w[(w["run"] == name) & (w["source"] == "observed")].sort_values("budget")
        p = w[(w["run"] == name) & (w["source"] == "predicted")].sort_values("budget")
        label = name if len(name) <= 40 else name[:37] + "..."
        ax.plot(o["budget"], o["a_width90_data"], "-o", color=color, ms=3.5, lw=1.4, label=label)
        if len(p) and len(o):
            x = np.concatenate([o["budget"].to_numpy()[-1:], p["budget"].to_numpy()])
            y = np.concatenate([o["a_width90_data"].to_numpy()[-1:], p["a_width90_data"].to_numpy()])
            ax.plot(x, y, ":", color=color, lw=1.4)
            ax.plot(p["budget"], p["a_width90_data"], "o", mfc="white", mec=color, ms=3.5)
    target = 2.0 * sweep.tolerance
    ax.axhline(target, color="0.3", lw=1.0, ls="--", label=f"2 x tolerance ({target:g})")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.xaxis.set_major_formatter(FuncFormatter(fmt))

    def some(y, _pos=None):  # label 1, 2, 3, 5 x 10^k only
        lead = round(y / 10 ** math.floor(math.log10(y))) if y > 0 else 0
        return f"{y:g}" if lead in (1, 2, 3, 5) else ""

    ax.yaxis.set_major_formatter(FuncFormatter(some))
    ax.yaxis.set_minor_formatter(FuncFormatter(some))
    ax.set_xlabel("compute (largest evaluation fitted)")
    ax.set_ylabel("width of A's 90% interval (as identify's rule reads it)")
    ax.set_title("When is the ceiling A pinned down? (dotted: predicted)", fontsize=10)
    ax.grid(True, which="major", color="0.88", lw=0.5)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    if len(names) > 8:
        ax.legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    else:
        ax.legend(fontsize=7, frameon=False)
    return fig
