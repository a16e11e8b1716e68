"""The hierarchical model: seeds pooled within recipes, recipes within a population.

Structure (all spreads estimated from the data, every level non-centred)::

    population     A_pop[task], log B_pop, log C_pop
    recipe r       A_recipe[r, task] = A_pop[task] + A_recipe_sd * z
                   log B_recipe[r]   = log B_pop + B_recipe_sd * z
                   log C_recipe[r]   = log C_pop + C_mid_recipe_sd * z
    training run t log B[t] = log B_recipe[r(t)] + B_seed_sd * z      (shared by its tasks)
                   log C[t] = log C_recipe[r(t)] + C_mid_seed_sd * z
    curve i        A[i] ~ Normal(A_recipe[r(i), task(i)], A_seed_sd) truncated to (R0[i], 1)
                   reward ~ Normal(R0 + (A - R0) sigmoid(B (log C - log C_mid)), sigma[i])
                   (errors AR(1) at a fixed correlation with Priors(likelihood="ar1"))

The normal levels are restricted to ceilings that are pass rates: ``A_pop`` and every
``A_recipe`` lie in (0, 1) (the joint normal prior of the ``A`` levels conditioned on that
event; it moves nothing where the ceilings lie well inside, and it removes a region that
the unrestricted model has and no data can rule out: recipe and population ceilings far
above 1, with the seeds' ceilings piled up just below 1 by their truncation).

A curve is one run on one task. Runs of one recipe are its seeds; a run evaluated on
several tasks (validation sets) shares its efficiency (``B``, ``C_mid``) across them
while each task keeps its own asymptote. As in the independent model, each curve's
``A`` is integrated out analytically (its prior given the recipe is a truncated
normal) and drawn exactly afterwards, so the seed-level funnel in ``A`` never reaches
the sampler. ``R0`` is each curve's first evaluation.

``fit(model="hierarchical")`` samples this posterior with the blocked Gibbs sampler of
:mod:`bayes_scalerl.models.pooling`, which starts from every curve's independent fit on
the engine and scales with the number of runs. :func:`sample_hierarchical` samples it
with NumPyro's NUTS on the joint density of :func:`hierarchical_model` (one program for
the whole study, recompiled per call): it is the reference the tests compare the pooled
sampler with.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from numpyro.infer import MCMC, NUTS

from ..data.runs import DataError, FitWindow, Runs
from .priors import Priors
from .scalerl import RunData, gain_conditional, make_run_data, truncnorm_draw
from .shape_noise import ar1_lags

__all__ = ["HierPriors", "HierIndex", "hierarchy_index", "hierarchical_model", "sample_hierarchical"]


@dataclass(frozen=True)
class HierPriors:
    """Priors of the hierarchical model, in user units.

    Parameters
    ----------
    A_pop_loc, A_pop_scale : float
        Normal prior on the population mean asymptote of each task (default 0.5, 0.25),
        restricted, like every recipe's, to (0, 1).
    A_recipe_sd_scale : float
        Half-normal scale of the recipe-to-recipe spread of ``A`` (default 0.1).
    A_seed_sd_scale : float
        Half-normal scale of the seed-to-seed spread of ``A`` within a recipe (default
        0.03; the ScaleRL paper saw about +-0.02 across three seeds).
    B_median, B_log_sd : float
        Log-normal prior on the population ``B`` (as in :class:`~bayes_scalerl.Priors`).
    B_recipe_sd_scale, B_seed_sd_scale : float
        Half-normal scales of the recipe and seed spreads of ``log B`` (0.3, 0.1).
    C_mid_median : float or None
        Median of the log-normal prior on the population ``C_mid``; ``None`` uses the
        median over curves of the largest fitted compute.
    C_mid_log_sd : float
        Standard deviation of the population ``log C_mid`` (default 1.5).
    C_mid_recipe_sd_scale, C_mid_seed_sd_scale : float
        Half-normal scales of the recipe and seed spreads of ``log C_mid`` (0.5, 0.1).
    sigma_scale : float
        Half-normal scale of each curve's noise standard deviation (default 0.1).
    """

    A_pop_loc: float = 0.5
    A_pop_scale: float = 0.25
    A_recipe_sd_scale: float = 0.1
    A_seed_sd_scale: float = 0.03
    B_median: float = 2.0
    B_log_sd: float = 0.7
    B_recipe_sd_scale: float = 0.3
    B_seed_sd_scale: float = 0.1
    C_mid_median: float | None = None
    C_mid_log_sd: float = 1.5
    C_mid_recipe_sd_scale: float = 0.5
    C_mid_seed_sd_scale: float = 0.1
    sigma_scale: float = 0.1

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if name == "A_pop_loc" or value is None:
                continue
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"HierPriors: {name} must be a positive finite number, got {value!r}.")

    def to_dict(self) -> dict:
        """The priors as a plain dict."""
        return asdict(self)


class HierIndex(NamedTuple):
    """Integer structure of a hierarchical fit.

    Attributes
    ----------
    recipes, tasks, training_runs : list of str
        Level names, in order of first appearance.
    curve_recipe, curve_task, curve_train : ndarray of int, shape (curve,)
        Each curve's recipe, task and training run.
    train_recipe : ndarray of int, shape (training_run,)
        Each training run's recipe.
    """

    recipes: list[str]
    tasks: list[str]
    training_runs: list[str]
    curve_recipe: np.ndarray
    curve_task: np.ndarray
    curve_train: np.ndarray
    train_recipe: np.ndarray


def _codes(values: list[str]) -> tuple[list[str], np.ndarray]:
    levels = list(dict.fromkeys(values))
    lookup = {v: i for i, v in enumerate(levels)}
    return levels, np.array([lookup[v] for v in values], dtype=np.int32)


def hierarchy_index(runs: Runs) -> HierIndex:
    """The recipe / task / training-run structure of ``runs``.

    Without a ``recipe`` column every run is its own recipe (pooling across runs only);
    without a ``task`` column there is one task.

    Raises
    ------
    ValueError
        If one training run is labelled with two recipes.
    """
    names = runs.names
    recipe = runs.run_attribute("recipe")
    recipe = [str(r) for r in recipe] if recipe is not None else list(names)
    task = runs.run_attribute("task")
    task = [str(t) for t in task] if task is not None else ["all"] * len(names)
    train = runs.run_attribute("training_run")
    train = [str(t) for t in train] if train is not None else list(names)
    recipes, curve_recipe = _codes(recipe)
    tasks, curve_task = _codes(task)
    trains, curve_train = _codes(train)
    train_recipe = np.zeros(len(trains), np.int32)
    for t in range(len(trains)):
        rs = set(curve_recipe[curve_train == t].tolist())
        if len(rs) > 1:
            labels = sorted(recipes[r] for r in rs)
            raise DataError(
                f"{runs.source}: run {trains[t]!r}, column 'recipe': one training run has "
                f"several recipes {labels}."
            )
        train_recipe[t] = rs.pop()
    return HierIndex(recipes, tasks, trains, curve_recipe, curve_task, curve_train, train_recipe)


def _run_level(site: dict, idx: HierIndex) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Each curve's log B, log C_mid and its A prior location from the sampled sites."""
    lB_r = site["log_B_pop"] + site["B_recipe_sd"] * site["z_B_recipe"]
    lC_r = site["log_C_pop"] + site["C_mid_recipe_sd"] * site["z_C_recipe"]
    A_r = site["A_pop"][None, :] + site["A_recipe_sd"] * site["z_A_recipe"]  # recipe, task
    lB_t = lB_r[idx.train_recipe] + site["B_seed_sd"] * site["z_B_seed"]
    lC_t = lC_r[idx.train_recipe] + site["C_mid_seed_sd"] * site["z_C_seed"]
    return lB_t[idx.curve_train], lC_t[idx.curve_train], A_r[idx.curve_recipe, idx.curve_task]


def _conditionals(lB, lC, sigma, A_loc, A_sd, data: RunData, ar1: bool = False):
    """Per-curve gain conditionals (vmapped over curves); ``ar1``: AR(1) errors at ``data.rho``."""
    flat = Priors()  # only its (unused) A fields are read when A_loc is given

    def one(lb, lc, s, loc, d):
        rho = d.rho if ar1 else None
        return gain_conditional(lb, lc, s, d.R0, d, flat, A_loc=loc, A_scale=A_sd, rho=rho)

    return jax.vmap(one)(lB, lC, sigma, A_loc, data)


def hierarchical_model(
    data: RunData, idx: HierIndex, hp: HierPriors, log_c_ref: float, ar1: bool = False
) -> None:
    """NumPyro model of the hierarchy with each curve's ``A`` integrated out.

    Parameters
    ----------
    data : RunData
        Batched over curves (leading axis).
    idx : HierIndex
    hp : HierPriors
    log_c_ref : float
        Prior median of the population ``log C_mid``.
    ar1 : bool
        AR(1) errors between consecutive fitted points of a curve, at the fixed
        correlation ``data.rho`` (default: independent errors).
    """
    n_rec, n_task, n_train = len(idx.recipes), len(idx.tasks), len(idx.training_runs)
    n_curve = len(idx.curve_recipe)
    site = {}
    # the ceilings above the runs are restricted to (0, 1), as each run's is (below)
    site["A_pop"] = numpyro.sample(
        "A_pop",
        dist.TruncatedNormal(hp.A_pop_loc, hp.A_pop_scale, low=0.0, high=1.0).expand([n_task]).to_event(1),
    )
    site["A_recipe_sd"] = numpyro.sample("A_recipe_sd", dist.HalfNormal(hp.A_recipe_sd_scale))
    site["A_seed_sd"] = numpyro.sample("A_seed_sd", dist.HalfNormal(hp.A_seed_sd_scale))
    site["log_B_pop"] = numpyro.sample("log_B_pop", dist.Normal(math.log(hp.B_median), hp.B_log_sd))
    site["B_recipe_sd"] = numpyro.sample("B_recipe_sd", dist.HalfNormal(hp.B_recipe_sd_scale))
    site["B_seed_sd"] = numpyro.sample("B_seed_sd", dist.HalfNormal(hp.B_seed_sd_scale))
    site["log_C_pop"] = numpyro.sample("log_C_pop", dist.Normal(log_c_ref, hp.C_mid_log_sd))
    site["C_mid_recipe_sd"] = numpyro.sample("C_mid_recipe_sd", dist.HalfNormal(hp.C_mid_recipe_sd_scale))
    site["C_mid_seed_sd"] = numpyro.sample("C_mid_seed_sd", dist.HalfNormal(hp.C_mid_seed_sd_scale))
    with numpyro.plate("recipe", n_rec):
        site["z_A_recipe"] = numpyro.sample("z_A_recipe", dist.Normal(0.0, 1.0).expand([n_task]).to_event(1))
        site["z_B_recipe"] = numpyro.sample("z_B_recipe", dist.Normal(0.0, 1.0))
        site["z_C_recipe"] = numpyro.sample("z_C_recipe", dist.Normal(0.0, 1.0))
    with numpyro.plate("training_run", n_train):
        site["z_B_seed"] = numpyro.sample("z_B_seed", dist.Normal(0.0, 1.0))
        site["z_C_seed"] = numpyro.sample("z_C_seed", dist.Normal(0.0, 1.0))
    with numpyro.plate("curve", n_curve):
        sigma = numpyro.sample("sigma", dist.HalfNormal(hp.sigma_scale))
    lB, lC, A_loc = _run_level(site, idx)
    A_r = site["A_pop"][None, :] + site["A_recipe_sd"] * site["z_A_recipe"]
    numpyro.factor("A_recipe_inside", jnp.where(jnp.all((A_r > 0.0) & (A_r < 1.0)), 0.0, -jnp.inf))
    cond = _conditionals(lB, lC, sigma, A_loc, site["A_seed_sd"], data, ar1)
    numpyro.factor("marginal_likelihood", cond.log_norm.sum())


#: Population- and recipe-level variables stored in the posterior (besides run-level A, B, C_mid, sigma).
HYPER_VARS = (
    "A_pop",
    "A_recipe_sd",
    "A_seed_sd",
    "B_pop",
    "B_recipe_sd",
    "B_seed_sd",
    "C_mid_pop",
    "C_mid_recipe_sd",
    "C_mid_seed_sd",
)


class HierDraws(NamedTuple):
    """Draws of a hierarchical fit, every array with leading ``(chain, draw)`` axes.

    Attributes
    ----------
    curve : dict of str to ndarray
        ``A``, ``B``, ``C_mid``, ``sigma``, shape ``(chain, draw, curve)``.
    recipe : dict of str to ndarray
        ``A_recipe`` ``(chain, draw, recipe, task)``, ``B_recipe`` and ``C_mid_recipe``
        ``(chain, draw, recipe)``.
    hyper : dict of str to ndarray
        The population means (``A_pop`` per task) and spreads in user units.
    stats : dict of str to ndarray
        ``diverging``, ``n_steps``, ``acceptance_rate``, ``energy``, ``lp``, ``step_size``;
        shape ``(chain, draw)``.
    """

    curve: dict
    recipe: dict
    hyper: dict
    stats: dict


def sample_hierarchical(
    key: jax.Array,
    window: FitWindow,
    idx: HierIndex,
    hp: HierPriors,
    *,
    num_chains: int = 4,
    num_warmup: int = 1000,
    num_samples: int = 1000,
    target_accept: float = 0.95,
    max_tree_depth: int = 10,
    dense_mass: bool = False,
    progress: bool = False,
) -> HierDraws:
    """Sample the hierarchical posterior with NumPyro's NUTS and draw each curve's ``A``.

    The reference sampler (see the module docstring); fits use
    :mod:`bayes_scalerl.models.pooling`.

    Parameters
    ----------
    key : jax.Array
        PRNG key (split for the sampler and the exact draws of ``A``).
    window : FitWindow
        Padded points of every curve; with ``window.rho`` set, the errors of consecutive
        fitted points of a curve are AR(1) at that correlation.
    idx : HierIndex
        The structure from :func:`hierarchy_index`.
    hp : HierPriors
    num_chains, num_warmup, num_samples : int
    target_accept, max_tree_depth : float, int
        NUTS settings.
    dense_mass : bool
        Adapt a dense mass matrix (default diagonal).
    progress : bool
        NumPyro's progress bar.

    Returns
    -------
    HierDraws
    """
    ar1 = window.rho is not None
    data = make_run_data(
        window.compute,
        window.reward,
        window.mask,
        window.R0,
        window.c_ref,
        Priors(likelihood="ar1", rho=0.0) if ar1 else Priors(),
        rho=window.rho,
        ar_lag=ar1_lags(window.compute, window.mask, window.step) if ar1 else None,
    )
    log_c_ref = float(np.log(hp.C_mid_median if hp.C_mid_median is not None else np.median(window.c_ref)))
    k_mcmc, k_A = jax.random.split(key)
    kernel = NUTS(
        hierarchical_model,
        target_accept_prob=target_accept,
        max_tree_depth=max_tree_depth,
        dense_mass=dense_mass,
    )
    mcmc = MCMC(
        kernel,
        num_warmup=num_warmup,
        num_samples=num_samples,
        num_chains=num_chains,
        chain_method="vectorized",
        progress_bar=progress,
    )
    mcmc.run(
        k_mcmc,
        data,
        idx,
        hp,
        log_c_ref,
        ar1,
        extra_fields=(
            "diverging",
            "num_steps",
            "accept_prob",
            "energy",
            "potential_energy",
            "adapt_state.step_size",
        ),
    )
    s = mcmc.get_samples(group_by_chain=True)
    extra = mcmc.get_extra_fields(group_by_chain=True)
    flat = {k: v.reshape((-1,) + v.shape[2:]) for k, v in s.items()}

    lB, lC, A_loc = jax.vmap(lambda site: _run_level(site, idx))(flat)
    sigma = flat["sigma"]
    cond = jax.vmap(lambda b, c, sg, loc, sd: _conditionals(b, c, sg, loc, sd, data, ar1))(
        lB, lC, sigma, A_loc, flat["A_seed_sd"]
    )
    gain = truncnorm_draw(k_A, cond.mean, cond.sd, cond.upper)
    A = data.R0[None, :] + gain
    shape = (num_chains, num_samples)

    def cd(x):
        x = np.asarray(x)
        return x.reshape(shape + x.shape[1:])

    lB_r = s["log_B_pop"][..., None] + s["B_recipe_sd"][..., None] * s["z_B_recipe"]
    lC_r = s["log_C_pop"][..., None] + s["C_mid_recipe_sd"][..., None] * s["z_C_recipe"]
    A_r = s["A_pop"][..., None, :] + s["A_recipe_sd"][..., None, None] * s["z_A_recipe"]
    curve = {"A": cd(A), "B": cd(jnp.exp(lB)), "C_mid": cd(jnp.exp(lC)), "sigma": cd(sigma)}
    recipe = {"A_recipe": np.asarray(A_r), "B_recipe": np.exp(lB_r), "C_mid_recipe": np.exp(lC_r)}
    hyper = {
        "A_pop": np.asarray(s["A_pop"]),
        "A_recipe_sd": np.asarray(s["A_recipe_sd"]),
        "A_seed_sd": np.asarray(s["A_seed_sd"]),
        "B_pop": np.exp(np.asarray(s["log_B_pop"])),
        "B_recipe_sd": np.asarray(s["B_recipe_sd"]),
        "B_seed_sd": np.asarray(s["B_seed_sd"]),
        "C_mid_pop": np.exp(np.asarray(s["log_C_pop"])),
        "C_mid_recipe_sd": np.asarray(s["C_mid_recipe_sd"]),
        "C_mid_seed_sd": np.asarray(s["C_mid_seed_sd"]),
    }
    step = np.asarray(extra["adapt_state.step_size"])
    stats = {
        "diverging": np.asarray(extra["diverging"]),
        "n_steps": np.asarray(extra["num_steps"]),
        "acceptance_rate": np.asarray(extra["accept_prob"]),
        "energy": np.asarray(extra["energy"]),
        "lp": -np.asarray(extra["potential_energy"]),
        "step_size": step,
    }
    return HierDraws(curve, {k: np.asarray(v) for k, v in recipe.items()}, hyper, stats)
