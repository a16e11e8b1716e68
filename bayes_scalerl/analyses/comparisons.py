"""Recipe comparisons from a fit: differences, P(x > y), margins, crossovers, P(best).

A recipe's quantity is read from the fit:

- hierarchical fits (posterior has ``A_recipe``): the recipe-level parameters, i.e. what
  a new seed of the recipe is expected to reach; seed-to-seed spread is part of the
  uncertainty. The recipe's curve starts at the mean first evaluation of its runs. With
  the calibrated discrepancy, ``A_recipe`` is the ceiling the recipe approaches (the
  sigmoid's plus the recipe's ``delta_recipe``), and the recipe's expected curve carries
  the discrepancy beyond the last fitted compute of its runs, as a run's curve does.
- independent fits: the mean over the recipe's runs of each run's parameter (draw by
  draw; the runs' posteriors are independent). For ``A`` and ``reward`` a *seed term* is
  added: a recipe's value is what a new seed is expected to reach, and its seeds are a
  sample of them, so each recipe's draws get a normal term of sd ``tau / sqrt(n)`` (``n``
  seeds in the fit; :func:`estimate_seed_sd`). Without it, two seeds of one recipe fitted on dense
  logs have ``A`` intervals of +-0.002 and are called different at ``P = 1`` for a gap no
  rerun would keep. ``tau`` is the posterior median given the recipes with repeat seeds
  in the fit, under a prior from the ScaleRL paper (median :data:`SEED_SD`, two degrees
  of freedom); ``seed_sd=0`` compares *these* seeds only (version 0.1). ``B`` and ``C_mid``
  get no term. The hierarchical model estimates the seed-to-seed spread of every
  parameter and is the full answer for claims about recipes.

Without a ``recipe`` column every run is its own recipe.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import combinations

import numpy as np
import pandas as pd
from scipy.special import ndtri
from scipy.stats import chi2

from ..models.curve import compute_to_reach, scalerl_curve
from ..models.discrepancy import discrepancy_shape
from ..posterior.results import FitResult

__all__ = [
    "recipe_names",
    "recipe_summary",
    "recipe_draws",
    "recipe_curve_draws",
    "compare",
    "crossover",
    "compute_to_target",
    "p_best",
    "estimate_seed_sd",
    "DEFAULT_ROPE",
    "PARAMS",
    "SEED_SD",
    "SEED_SD_DF",
]

#: Parameters :func:`compare` knows; ``reward`` is the expected reward at a budget.
PARAMS = ("A", "B", "C_mid", "reward")
#: Default margins: absolute for ``A`` and ``reward`` (the paper's +-0.02), relative
#: (``|x / y - 1|``) for ``B`` and ``C_mid``.
DEFAULT_ROPE = {"A": 0.02, "reward": 0.02, "B": 0.05, "C_mid": 0.05}
_RELATIVE = {"B", "C_mid"}
#: Prior guess of the seed-to-seed sd of a recipe's fitted ceiling ``A`` (and of its
#: expected reward at a budget), for independent fits: the ScaleRL paper's three repeat
#: runs gave fitted ``A`` within +-0.015 of each other, which three draws from a normal of
#: sd 0.01-0.015 do most often (their largest distance from the mean is about 1.1 sd).
SEED_SD = 0.01
#: Weight of :data:`SEED_SD`, in degrees of freedom (three runs: two), against the repeat
#: seeds of the fit (a recipe with ``n`` well-measured seeds adds about ``n - 1``).
SEED_SD_DF = 2.0
#: Grid of :func:`estimate_seed_sd`: ``tau`` in ``(0, _TAU_MAX]`` in ``_TAU_GRID`` steps.
_TAU_MAX, _TAU_GRID = 0.25, 2000
#: Parameters that get the seed term.
_SEEDED = {"A", "reward"}


def _is_hier(result: FitResult) -> bool:
    return "A_recipe" in result.dt["posterior"].data_vars


def _run_labels(result: FitResult, column: str) -> np.ndarray | None:
    cd = result.dt["constant_data"]
    if column not in cd.data_vars:
        return None
    return np.asarray(cd[column].values).astype(str)


def _tasks(result: FitResult) -> list[str] | None:
    t = _run_labels(result, "task")
    return None if t is None else list(dict.fromkeys(t))


def _check_task(result: FitResult, task: str | None) -> str | None:
    tasks = _tasks(result)
    if tasks is None or len(tasks) == 1:
        return None if tasks is None else tasks[0]
    if task is None:
        raise ValueError(f"the fit has several tasks {tasks}; choose one with task=...")
    if task not in tasks:
        raise ValueError(f"unknown task {task!r}; the fit has {tasks}")
    return task


def recipe_names(result: FitResult) -> list[str]:
    """Recipes in the fit, in order of first appearance (run names without a ``recipe`` column)."""
    if _is_hier(result):
        return [str(r) for r in result.dt["posterior"]["recipe"].values]
    rec = _run_labels(result, "recipe")
    return list(dict.fromkeys(rec if rec is not None else result.run_names))


def _run_groups(result: FitResult, task: str | None) -> dict[str, np.ndarray]:
    rec = _run_labels(result, "recipe")
    rec = rec if rec is not None else np.array(result.run_names)
    keep = np.ones(len(rec), bool)
    tasks = _run_labels(result, "task")
    if task is not None and tasks is not None:
        keep = tasks == task
    return {r: np.flatnonzero((rec == r) & keep) for r in recipe_names(result)}


def _select_task(x, task: str | None):
    if "task" in x.dims:
        x = x.sel(task=task)
    return x


def _recipe_params(result: FitResult, task: str | None) -> dict[str, np.ndarray]:
    """Recipe-level ``A, B, C_mid, R0`` draws of a hierarchical fit, shape (recipe, sample).

    With the calibrated discrepancy also ``delta`` and ``level`` (the recipe's ceiling and
    level offsets) and ``C_ref`` (the largest last fitted compute of its curves, (recipe, 1)).
    """
    post = result.dt["posterior"]
    out = {}
    pairs = [("A", "A_recipe"), ("B", "B_recipe"), ("C_mid", "C_mid_recipe")]
    if "delta_recipe" in post.data_vars:
        pairs += [("delta", "delta_recipe"), ("level", "delta_level_recipe")]
    for name, var in pairs:
        x = _select_task(post[var], task).transpose("recipe", "chain", "draw").values
        out[name] = x.reshape(x.shape[0], -1)
    groups = _run_groups(result, task)
    cd = result.dt["constant_data"]
    r0_runs = cd["R0_obs"].values
    names = [str(r) for r in post["recipe"].values]
    r0 = np.array([r0_runs[groups[n]].mean() if groups[n].size else np.nan for n in names])
    out["R0"] = np.broadcast_to(r0[:, None], out["A"].shape)
    if "delta" in out:
        c_ref = cd["C_ref"].values
        out["C_ref"] = np.array([[c_ref[groups[n]].max() if groups[n].size else np.inf] for n in names])
    return out


def _run_curve_draws(result: FitResult, compute: np.ndarray) -> np.ndarray:
    """Each run's expected reward at ``compute`` (independent fits), shape (run, sample, q)."""
    return result.predict_draws(np.asarray(compute, float), kind="curve")


def _run_draws(result: FitResult, param: str, budget: float | None) -> np.ndarray:
    """Each run's draws of ``param`` (independent fits), shape (run, sample)."""
    if param == "reward":
        return _run_curve_draws(result, np.array([budget], float))[..., 0]
    return result.draws(param)


def _seed_posterior(runs: np.ndarray, groups: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Posterior of the seed-to-seed sd ``tau`` on a grid, from the fit's repeat seeds.

    Each seed's posterior mean ``m_i`` and variance ``v_i`` stand for its value; within a
    recipe ``m_i ~ N(mu, tau^2 + v_i)`` with the recipe's ``mu`` integrated out under a
    flat prior (a random-effects meta-analysis: the seeds' own uncertainty is not taken
    for spread). The prior on ``tau^2`` is scaled inverse chi-squared with
    :data:`SEED_SD_DF` degrees of freedom and median ``SEED_SD^2``. Returns the grid and
    the normalised posterior weights.
    """
    tau = np.linspace(0.0, _TAU_MAX, _TAU_GRID + 1)[1:]
    t2 = tau**2
    nu = SEED_SD_DF
    s2 = SEED_SD**2 * chi2.median(nu) / nu  # the prior median of tau^2 is SEED_SD^2
    logp = -(nu / 2 + 1) * np.log(t2) - nu * s2 / (2 * t2) + np.log(tau)  # density of tau
    for idx in groups.values():
        if idx.size < 2:
            continue
        m, v = runs[idx].mean(axis=1), runs[idx].var(axis=1, ddof=1)
        var = t2[:, None] + v[None, :]
        w = 1.0 / var
        mw = np.sum(w * m, axis=1, keepdims=True) / np.sum(w, axis=1, keepdims=True)
        logp += -0.5 * (
            np.sum(np.log(var), axis=1) + np.log(np.sum(w, axis=1)) + np.sum(w * (m - mw) ** 2, axis=1)
        )
    p = np.exp(logp - logp.max())
    return tau, p / p.sum()


def estimate_seed_sd(
    result: FitResult, param: str = "A", *, budget: float | None = None, task: str | None = None
) -> float:
    """Seed-to-seed sd ``tau`` of a recipe's ``A`` or ``reward`` (independent fits).

    The posterior median of ``tau`` given the fit's repeat seeds (recipes with two or more
    runs), under a prior of median :data:`SEED_SD` worth :data:`SEED_SD_DF` degrees of
    freedom (a scaled inverse chi-squared on ``tau^2``). Each seed counts with its own
    posterior variance, so seeds whose values are uncertain say little about ``tau``.
    Without repeat seeds ``tau`` is :data:`SEED_SD`; with many well-measured ones, the
    fit's own spread.

    Parameters
    ----------
    result : FitResult
        An independent fit (a hierarchical fit's recipe level has its own spread: 0).
    param : {"A", "reward"}
    budget : float, optional
        Compute for ``param="reward"``.
    task : str, optional
        Task, when the fit has several.

    Returns
    -------
    float
    """
    if param not in _SEEDED:
        raise ValueError(f"the seed term is for {sorted(_SEEDED)}, got {param!r}")
    _check_param(param, budget)
    task = _check_task(result, task)
    if _is_hier(result):
        return 0.0
    return _seed_sd_of(_run_draws(result, param, budget), _run_groups(result, task))


def _seed_sd_of(runs: np.ndarray, groups: dict[str, np.ndarray]) -> float:
    """:func:`estimate_seed_sd` from each run's draws, shape (run, sample)."""
    if all(idx.size < 2 for idx in groups.values()):
        return SEED_SD  # the prior's median
    tau, p = _seed_posterior(runs, groups)
    return float(tau[np.searchsorted(np.cumsum(p), 0.5)])


def _check_param(param: str, budget: float | None) -> None:
    if param not in PARAMS:
        raise ValueError(f"param must be one of {PARAMS}, got {param!r}")
    if param == "reward" and (budget is None or not budget > 0):
        raise ValueError(f"param='reward' needs a positive budget, got {budget!r}")


def _check_seed_sd(seed_sd: float | None) -> None:
    if seed_sd is not None and not (np.isfinite(seed_sd) and seed_sd >= 0):
        raise ValueError(f"seed_sd must be a finite number >= 0, got {seed_sd!r}")


def _normal_scores(n: int, n_draws: int) -> np.ndarray:
    """``n`` independent rows of standard normal scores, shape (n, n_draws), deterministic.

    Each row holds the normal quantiles at ``(i + 1/2) / n_draws`` in its own random order
    (fixed seed): the exact marginal with no Monte Carlo error in its spread.
    """
    z = ndtri((np.arange(n_draws) + 0.5) / n_draws)
    rng = np.random.default_rng(20251015)
    return np.stack([rng.permutation(z) for _ in range(n)]) if n else np.empty((0, n_draws))


def recipe_draws(
    result: FitResult,
    param: str,
    *,
    budget: float | None = None,
    task: str | None = None,
    seed_sd: float | None = None,
) -> tuple[list[str], np.ndarray]:
    """Posterior draws of one quantity for every recipe.

    Parameters
    ----------
    result : FitResult
    param : {"A", "B", "C_mid", "reward"}
        ``reward`` is the expected (noise-free) reward at ``budget``.
    budget : float, optional
        Compute for ``param="reward"``.
    task : str, optional
        Task to compare on when the fit has several.
    seed_sd : float, optional
        Independent fits, ``A`` and ``reward``: the seed-to-seed sd ``tau`` (a recipe of
        ``n`` seeds gets a term of sd ``tau / sqrt(n)``, see the module notes). Default
        :func:`estimate_seed_sd`; 0 for the mean of *these* seeds only.

    Returns
    -------
    names : list of str
    draws : ndarray, shape (recipe, sample)
    """
    _check_param(param, budget)
    _check_seed_sd(seed_sd)
    if _is_hier(result):
        if param == "reward":
            names, d = recipe_curve_draws(result, [budget], task=task)
            return names, d[..., 0]
        return recipe_names(result), _recipe_params(result, _check_task(result, task))[param]
    names, d, _ = _seeded_draws(result, param, budget, _check_task(result, task), seed_sd)
    return names, d


def _seeded_draws(
    result: FitResult, param: str, budget: float | None, task: str | None, seed_sd: float | None
) -> tuple[list[str], np.ndarray, float]:
    """:func:`recipe_draws` of an independent fit, with the seed term's ``tau`` it used.

    Each run's draws are computed once, for the recipes' means and for ``tau``.
    """
    names = recipe_names(result)
    runs = _run_draws(result, param, budget)
    groups = _run_groups(result, task)
    d = np.stack([runs[groups[r]].mean(0) for r in names])
    if param not in _SEEDED:
        return names, d, 0.0
    tau = _seed_sd_of(runs, groups) if seed_sd is None else float(seed_sd)
    if tau == 0:
        return names, d, 0.0
    n = np.array([groups[r].size for r in names], float)
    return names, d + tau / np.sqrt(np.maximum(n, 1.0))[:, None] * _normal_scores(len(names), d.shape[1]), tau


def recipe_curve_draws(
    result: FitResult, compute: Sequence[float], *, task: str | None = None
) -> tuple[list[str], np.ndarray]:
    """Draws of each recipe's expected reward at ``compute``, shape (recipe, sample, q)."""
    task = _check_task(result, task)
    c = np.asarray(compute, float)
    names = recipe_names(result)
    if _is_hier(result):
        p = _recipe_params(result, task)
        A = p["A"] - p["delta"] if "delta" in p else p["A"]  # the sigmoid's own asymptote
        mu = scalerl_curve(
            c[None, None, :], A[..., None], p["B"][..., None], p["C_mid"][..., None], p["R0"][..., None]
        )
        if "delta" in p:  # plus the discrepancy, as a run's curve (FitResult.predict_draws)
            horizon = float(result.settings["discrepancy"]["horizon"])
            grow = discrepancy_shape(np.log(np.maximum(c, 1e-300) / p["C_ref"]), horizon)[:, None, :]
            level = p["level"][..., None]
            mu = mu + np.where(c > 0, level + (p["delta"][..., None] - level) * grow, 0.0)
        return names, mu
    runs = _run_curve_draws(result, c)  # run, sample, q
    groups = _run_groups(result, task)
    return names, np.stack([runs[groups[r]].mean(0) for r in names])


def _pairs(names: list[str], a: str | None, b: str | None) -> list[tuple[str, str]]:
    for x in (a, b):
        if x is not None and x not in names:
            raise ValueError(f"unknown recipe {x!r}; the fit has {names}")
    if a is not None and b is not None:
        if a == b:
            raise ValueError(f"compare two different recipes, got {a!r} twice")
        return [(a, b)]
    if a is not None or b is not None:
        x = a if a is not None else b
        return [(x, y) for y in names if y != x]
    return list(combinations(names, 2))


def _verdict(a: str, b: str, p_greater: float, p_rope: float, threshold: float) -> str:
    if p_rope >= threshold:
        return "same within margin"
    if p_greater >= threshold:
        return f"{a} higher"
    if p_greater <= 1.0 - threshold:
        return f"{b} higher"
    return "undecided"


def compare(
    result: FitResult,
    a: str | None = None,
    b: str | None = None,
    *,
    params: Sequence[str] = ("A",),
    rope: float | dict[str, float] | None = None,
    budget: float | None = None,
    task: str | None = None,
    ci_prob: float = 0.9,
    threshold: float = 0.9,
    seed_sd: float | None = None,
) -> pd.DataFrame:
    """Pairwise recipe comparisons with intervals, probabilities and a verdict.

    Parameters
    ----------
    result : FitResult
    a, b : str, optional
        Recipes to compare; one of them compares it with every other; neither compares
        all pairs.
    params : sequence of {"A", "B", "C_mid", "reward"}
        Quantities to compare (``reward`` needs ``budget``).
    rope : float or dict, optional
        Margin of practical equivalence (region of practical equivalence, ROPE). A
        number applies to every parameter; defaults in :data:`DEFAULT_ROPE` (0.02 on
        ``A`` and ``reward``, the paper's margin; 5% relative on ``B`` and ``C_mid``).
    budget : float, optional
        Compute at which ``reward`` is compared.
    task : str, optional
        Task, when the fit has several.
    ci_prob : float
        Probability of the central interval of the difference.
    threshold : float
        Posterior probability a verdict needs (default 0.9).
    seed_sd : float, optional
        Independent fits: the seed-to-seed sd of ``A`` and ``reward`` (see the module
        notes; default :func:`estimate_seed_sd`, 0 to compare these seeds only).

    Returns
    -------
    pandas.DataFrame
        One row per pair and parameter: ``a, b, param, budget, diff_mean, diff_q05,
        diff_q95, p_a_greater, p_in_rope, rope, seed_sd, verdict`` (``seed_sd``: the
        ``tau`` used, 0 for ``B``, ``C_mid`` and hierarchical fits; ``diff = a - b``; the interval
        columns are named for ``ci_prob = 0.9`` whatever its value). The verdict is
        ``"same within margin"`` when ``p_in_rope >= threshold``, else ``"<a> higher"``
        / ``"<b> higher"`` when ``P(a > b)`` is at least ``threshold`` / at most
        ``1 - threshold``, else ``"undecided"``.
    """
    ropes = dict(DEFAULT_ROPE)
    if isinstance(rope, dict):
        ropes.update(rope)
    elif rope is not None:
        if not rope >= 0:
            raise ValueError(f"rope must be non-negative, got {rope!r}")
        ropes = dict.fromkeys(PARAMS, float(rope))
    _check_seed_sd(seed_sd)
    lo, hi = (1 - ci_prob) / 2, 1 - (1 - ci_prob) / 2
    rows = []
    for param in params:
        _check_param(param, budget)
        if _is_hier(result):  # the recipe level has its own spread: no seed term
            tau = 0.0
            names, d = recipe_draws(result, param, budget=budget, task=task)
        else:
            names, d, tau = _seeded_draws(result, param, budget, _check_task(result, task), seed_sd)
        index = {n: i for i, n in enumerate(names)}
        for x, y in _pairs(names, a, b):
            dx, dy = d[index[x]], d[index[y]]
            diff = dx - dy
            m = ropes[param]
            in_rope = np.abs(dx / dy - 1.0) < m if param in _RELATIVE else np.abs(diff) < m
            p_greater = float(np.mean(diff > 0))
            p_rope = float(np.mean(in_rope))
            rows.append(
                {
                    "a": x,
                    "b": y,
                    "param": param,
                    "budget": budget if param == "reward" else np.nan,
                    "diff_mean": float(diff.mean()),
                    "diff_q05": float(np.quantile(diff, lo)),
                    "diff_q95": float(np.quantile(diff, hi)),
                    "p_a_greater": p_greater,
                    "p_in_rope": p_rope,
                    "rope": m,
                    "seed_sd": float(tau),
                    "verdict": _verdict(x, y, p_greater, p_rope, threshold),
                }
            )
    return pd.DataFrame(rows)


def _default_grid(result: FitResult, n: int = 200) -> np.ndarray:
    c = result.dt["constant_data"]["compute"].values
    pos = c[np.isfinite(c) & (c > 0)]
    return np.geomspace(pos.min(), 10.0 * pos.max(), n)


def crossover(
    result: FitResult,
    a: str | None = None,
    b: str | None = None,
    *,
    compute: Sequence[float] | None = None,
    task: str | None = None,
) -> pd.DataFrame:
    """Where one recipe's expected curve overtakes the other's for good.

    For each draw the crossover is the last compute on the grid at which the sign of
    ``R_a - R_b`` changes; a draw without a change has no crossover within range.

    Parameters
    ----------
    compute : sequence of float, optional
        Grid to search (default: 200 log-spaced points from the smallest positive
        observed compute to 10x the largest).

    Returns
    -------
    pandas.DataFrame
        One row per pair: ``a, b, c_min, c_max, p_crossover`` (probability of a
        crossover within range), ``crossover_q05, crossover_q50, crossover_q95``
        (among draws that cross; NaN if none do), ``p_a_ahead_at_end`` and ``verdict``.
    """
    grid = np.asarray(compute, float) if compute is not None else _default_grid(result)
    if grid.ndim != 1 or grid.size < 2 or not np.all(grid > 0):
        raise ValueError("compute must be at least two positive values")
    grid = np.sort(grid)
    names, d = recipe_curve_draws(result, grid, task=task)
    index = {n: i for i, n in enumerate(names)}
    rows = []
    for x, y in _pairs(names, a, b):
        diff = d[index[x]] - d[index[y]]  # sample, q
        sign = np.sign(diff)
        change = sign[:, 1:] != sign[:, :-1]
        crosses = change.any(axis=1)
        last = np.where(crosses, change.shape[1] - 1 - np.argmax(change[:, ::-1], axis=1), 0)
        # interpolate the zero in log compute between grid points last and last + 1
        rows_i = np.arange(diff.shape[0])
        d0, d1 = diff[rows_i, last], diff[rows_i, last + 1]
        lg = np.log(grid)
        w = np.where(d1 != d0, d0 / (d0 - d1), 0.5)
        c_cross = np.exp(lg[last] + np.clip(w, 0, 1) * (lg[last + 1] - lg[last]))
        cc = c_cross[crosses]
        p_cross = float(crosses.mean())
        ahead = float(np.mean(diff[:, -1] > 0))
        q = np.quantile(cc, [0.05, 0.5, 0.95]) if cc.size else np.full(3, np.nan)
        leader = x if ahead >= 0.5 else y
        other = y if leader == x else x
        if p_cross < 0.5:
            verdict = f"no crossover within range (P = {1 - p_cross:.2f}); {leader} ahead at the end"
        else:
            verdict = f"{leader} overtakes {other} at about {q[1]:.4g} (P(crossover) = {p_cross:.2f})"
        rows.append(
            {
                "a": x,
                "b": y,
                "c_min": grid[0],
                "c_max": grid[-1],
                "p_crossover": p_cross,
                "crossover_q05": q[0],
                "crossover_q50": q[1],
                "crossover_q95": q[2],
                "p_a_ahead_at_end": ahead,
                "verdict": verdict,
            }
        )
    return pd.DataFrame(rows)


def compute_to_target(result: FitResult, target: float, *, task: str | None = None) -> pd.DataFrame:
    """Compute each recipe needs for its expected curve to reach ``target``.

    Returns
    -------
    pandas.DataFrame
        One row per recipe: ``recipe, target, p_reachable`` (the asymptote exceeds the
        target), ``q05, q50, q95`` of the compute (``inf`` where the target is not
        reached in that share of draws).
    """
    if not 0 < target < 1:
        raise ValueError(f"target must be a reward in (0, 1), got {target!r}")
    task = _check_task(result, task)
    names = recipe_names(result)
    if _is_hier(result) and "delta_recipe" not in result.dt["posterior"].data_vars:
        p = _recipe_params(result, task)
        c = compute_to_reach(target, p["A"], p["B"], p["C_mid"], p["R0"])
    else:
        # the mean of the seeds' curves (or a curve with its discrepancy) has no
        # closed-form inverse: solve on a fine grid
        grid = np.geomspace(_default_grid(result)[0], 1e4 * _default_grid(result)[-1], 2000)
        _, d = recipe_curve_draws(result, grid, task=task)
        reached = d >= target
        first = np.argmax(reached, axis=-1)
        c = np.where(reached.any(axis=-1), grid[first], np.inf)
    rows = []
    for i, name in enumerate(names):
        q = np.quantile(c[i], [0.05, 0.5, 0.95], method="inverted_cdf")  # inf-safe: no interpolation
        rows.append(
            {
                "recipe": name,
                "target": target,
                "p_reachable": float(np.mean(np.isfinite(c[i]))),
                "q05": q[0],
                "q50": q[1],
                "q95": q[2],
            }
        )
    return pd.DataFrame(rows)


def p_best(
    result: FitResult, *, budget: float, task: str | None = None, seed_sd: float | None = None
) -> pd.DataFrame:
    """Probability that each recipe has the highest expected reward at ``budget``.

    ``seed_sd`` as in :func:`compare` (independent fits: a recipe's expected reward
    carries the seed term).

    Returns
    -------
    pandas.DataFrame
        ``recipe, budget, p_best, reward_q05, reward_q50, reward_q95``, sorted by
        ``p_best`` (highest first).
    """
    names, d = recipe_draws(result, "reward", budget=budget, task=task, seed_sd=seed_sd)
    best = np.argmax(d, axis=0)
    q = np.quantile(d, [0.05, 0.5, 0.95], axis=1)
    df = pd.DataFrame(
        {
            "recipe": names,
            "budget": budget,
            "p_best": np.bincount(best, minlength=len(names)) / d.shape[1],
            "reward_q05": q[0],
            "reward_q50": q[1],
            "reward_q95": q[2],
        }
    )
    return df.sort_values("p_best", ascending=False, kind="stable").reset_index(drop=True)


def recipe_summary(
    result: FitResult, *, task: str | None = None, ci_prob: float = 0.9, seed_sd: float | None = None
) -> pd.DataFrame:
    """Each recipe's ``A``, ``B`` and ``C_mid`` (see the module notes for what a recipe's value is).

    ``seed_sd`` as in :func:`compare` (independent fits: ``A`` carries the seed term).

    Returns
    -------
    pandas.DataFrame
        ``recipe, param, n_runs, mean, sd, q05, q50, q95`` (interval columns named for
        ``ci_prob = 0.9`` whatever its value).
    """
    lo, hi = (1 - ci_prob) / 2, 1 - (1 - ci_prob) / 2
    task = _check_task(result, task)
    groups = _run_groups(result, task)
    rows = []
    for param in ("A", "B", "C_mid"):
        names, d = recipe_draws(result, param, task=task, seed_sd=seed_sd)
        q = np.quantile(d, [lo, 0.5, hi], axis=1)
        for i, name in enumerate(names):
            rows.append(
                {
                    "recipe": name,
                    "param": param,
                    "n_runs": int(groups[name].size),
                    "mean": float(d[i].mean()),
                    "sd": float(d[i].std(ddof=1)),
                    "q05": q[0, i],
                    "q50": q[1, i],
                    "q95": q[2, i],
                }
            )
    return pd.DataFrame(rows)
