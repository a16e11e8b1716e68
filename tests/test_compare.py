"""Recipe comparisons on hand-made posteriors, where every answer is known exactly."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import xarray as xr

import bayes_scalerl as bs
from bayes_scalerl.analyses import comparisons as cmp


def _result(params: dict[str, dict], recipes: list[str], *, R0: float = 0.3, n_draws: int = 400, seed=0):
    """A FitResult whose runs have the given draws (arrays of shape (draw,) or scalars)."""
    rng = np.random.default_rng(seed)
    names = list(params)
    post = {}
    for var in ("A", "B", "C_mid", "sigma"):
        cols = []
        for r in names:
            v = params[r].get(var, 0.01 if var == "sigma" else None)
            v = np.broadcast_to(np.asarray(v, float), (2 * n_draws,))
            cols.append(v.reshape(2, n_draws))
        post[var] = (("chain", "draw", "run"), np.stack(cols, axis=-1))
    coords = {"chain": [0, 1], "draw": np.arange(n_draws), "run": names}
    compute = np.tile(np.linspace(0, 8000, 9), (len(names), 1))
    constant = xr.Dataset(
        {
            "compute": (("run", "point"), compute),
            "in_fit": (("run", "point"), np.ones_like(compute, bool)),
            "R0_obs": (("run",), np.full(len(names), R0)),
            "recipe": (("run",), np.array(recipes)),
        },
        coords={"run": names, "point": np.arange(9)},
    )
    stats = xr.Dataset(
        {
            "diverging": (("chain", "draw", "run"), np.zeros((2, n_draws, len(names)), bool)),
            "energy": (("chain", "draw", "run"), rng.standard_normal((2, n_draws, len(names)))),
        },
        coords=coords,
    )
    dt = xr.DataTree.from_dict(
        {"posterior": xr.Dataset(post, coords=coords), "constant_data": constant, "sample_stats": stats}
    )
    dt.attrs["bayes_scalerl_settings"] = json.dumps({"model": "independent"})
    return bs.FitResult(dt)


def _tau_by_quadrature(means, variances):
    """Posterior median of the seed sd by brute force: each recipe's seeds as a multivariate
    normal around a common mean integrated numerically, times the scaled inverse chi-squared
    prior of median ``SEED_SD^2`` (written as an inverse gamma)."""
    from scipy import stats

    nu = cmp.SEED_SD_DF
    s2 = cmp.SEED_SD**2 * stats.chi2.median(nu) / nu
    tau = np.linspace(1e-5, 0.25, 5001)
    post = stats.invgamma(nu / 2, scale=nu * s2 / 2).pdf(tau**2) * 2 * tau
    mu = np.linspace(0.2, 1.0, 1601)
    for m, v in zip(means, variances, strict=True):
        m, v = np.asarray(m), np.asarray(v)
        sd = np.sqrt(tau[:, None, None] ** 2 + v[None, None, :])
        like = np.prod(stats.norm.pdf(m[None, None, :], mu[None, :, None], sd), axis=2)
        post = post * np.trapezoid(like, mu, axis=1)
    cdf = np.cumsum(post) / post.sum()
    return tau[np.searchsorted(cdf, 0.5)]


def test_difference_probability_and_verdicts():
    rng = np.random.default_rng(0)
    d = rng.normal(0.0, 0.01, 800)
    res = _result(
        {
            "x": {"A": 0.60 + d, "B": 2.0, "C_mid": 3000.0},
            "y": {"A": 0.50 + d, "B": 2.0, "C_mid": 3000.0},
            "z": {"A": 0.601 + d, "B": 2.0, "C_mid": 3000.0},
        },
        ["x", "y", "z"],
    )
    t = cmp.compare(res, seed_sd=0.0)  # these seeds only: the runs' own posteriors
    assert list(t.columns[:9]) == [
        "a",
        "b",
        "param",
        "budget",
        "diff_mean",
        "diff_q05",
        "diff_q95",
        "p_a_greater",
        "p_in_rope",
    ]
    row = t.set_index(["a", "b"])
    # the shared noise cancels: differences are exact
    assert row.loc[("x", "y"), "diff_mean"] == pytest.approx(0.10)
    assert row.loc[("x", "y"), "verdict"] == "x higher"
    assert row.loc[("y", "z"), "verdict"] == "z higher"
    assert row.loc[("x", "z"), "verdict"] == "same within margin"
    assert row.loc[("x", "z"), "p_in_rope"] == 1.0
    # a margin below the difference turns "same" into a decided or undecided call
    t2 = cmp.compare(res, "x", "z", rope=0.0005, seed_sd=0.0)
    assert t2.verdict.item() == "z higher" and t2.p_a_greater.item() == 0.0
    # by default each recipe (one seed each, no repeats in the fit) carries the prior seed
    # spread: a gap of 0.001 is no longer decided, while 0.10 still is
    t3 = cmp.compare(res).set_index(["a", "b"])
    assert (t3["seed_sd"] == cmp.SEED_SD).all()
    assert t3.loc[("x", "y"), "verdict"] == "x higher"
    assert t3.loc[("x", "z"), "verdict"] == "undecided"


def test_undecided_when_draws_overlap():
    rng = np.random.default_rng(1)
    res = _result(
        {
            "x": {"A": rng.normal(0.60, 0.03, 800), "B": 2.0, "C_mid": 3000.0},
            "y": {"A": rng.normal(0.59, 0.03, 800), "B": 2.0, "C_mid": 3000.0},
        },
        ["x", "y"],
    )
    row = cmp.compare(res, "x", "y").iloc[0]
    # P(x > y) ~ Phi(0.01 / 0.042) ~ 0.59 (MC sd ~0.02), P(|d| < 0.02) ~ 0.36: neither reaches 0.9
    assert 0.45 < row.p_a_greater < 0.75
    assert row.verdict == "undecided"


def test_seeds_average_into_recipes():
    res = _result(
        {
            "x/s0": {"A": 0.60, "B": 2.0, "C_mid": 3000.0},
            "x/s1": {"A": 0.62, "B": 2.0, "C_mid": 3000.0},
            "y/s0": {"A": 0.50, "B": 1.0, "C_mid": 3000.0},
        },
        ["x", "x", "y"],
    )
    names, d = cmp.recipe_draws(res, "A", seed_sd=0.0)
    assert names == ["x", "y"]
    np.testing.assert_allclose(d[:, 0], [0.61, 0.50])
    # the seed term: x's two seeds (0.60, 0.62, exact) against the prior; x averages two seeds
    tau = cmp.estimate_seed_sd(res)
    assert tau == pytest.approx(
        _tau_by_quadrature([[0.60, 0.62]], [[0.0, 0.0]]), abs=2 * cmp._TAU_MAX / cmp._TAU_GRID
    )
    assert 0.01 < tau < 0.02  # between the prior's 0.01 and the two seeds' own sd 0.0141
    _, d = cmp.recipe_draws(res, "A")
    np.testing.assert_allclose(d.mean(axis=1), [0.61, 0.50], atol=1e-12)  # symmetric scores
    np.testing.assert_allclose(d.std(axis=1), [tau / np.sqrt(2), tau], rtol=0.01)  # quantiles: <1%
    s = cmp.recipe_summary(res)
    assert s.loc[(s.recipe == "x") & (s.param == "A"), "n_runs"].item() == 2


def test_crossover_at_the_known_compute():
    # equal B and R0: x has the higher ceiling but the later midpoint. The curves meet where
    # (A_x - R0) s_x = (A_y - R0) s_y; solve it on a fine grid to compare.
    res = _result(
        {
            "x": {"A": 0.70, "B": 2.0, "C_mid": 8000.0},
            "y": {"A": 0.55, "B": 2.0, "C_mid": 2000.0},
        },
        ["x", "y"],
    )
    grid = np.geomspace(100, 1e6, 4000)
    fx = bs.scalerl_curve(grid, 0.70, 2.0, 8000.0, 0.3)
    fy = bs.scalerl_curve(grid, 0.55, 2.0, 2000.0, 0.3)
    truth = grid[np.argmax(fx > fy)]
    row = cmp.crossover(res, "x", "y", compute=np.geomspace(100, 1e6, 300)).iloc[0]
    assert row.p_crossover == 1.0 and row.p_a_ahead_at_end == 1.0
    assert row.crossover_q50 == pytest.approx(truth, rel=0.01)
    assert "x overtakes y" in row.verdict
    # within a range that ends before the crossover, it never happens
    row = cmp.crossover(res, "x", "y", compute=np.geomspace(100, 0.5 * truth, 50)).iloc[0]
    assert row.p_crossover == 0.0 and np.isnan(row.crossover_q50)
    assert "no crossover within range" in row.verdict and "y ahead" in row.verdict


def test_compute_to_target_and_p_best():
    rng = np.random.default_rng(2)
    res = _result(
        {
            "x": {"A": 0.70, "B": 2.0, "C_mid": 4000.0},
            "y": {"A": rng.uniform(0.55, 0.75, 800), "B": 2.0, "C_mid": 4000.0},
        },
        ["x", "y"],
    )
    t = cmp.compute_to_target(res, 0.6).set_index("recipe")
    # (0.6 - 0.3) / (0.7 - 0.3) = 0.75 of the gain: C = C_mid * 3^(1/B), on a 2000-point grid (0.4% apart)
    assert t.loc["x", "p_reachable"] == 1.0
    assert t.loc["x", "q50"] == pytest.approx(4000 * 3**0.5, rel=0.01)
    # y reaches 0.6 only when A > 0.6: P = 0.75, MC sd 0.015
    assert abs(t.loc["y", "p_reachable"] - 0.75) < 0.05
    assert t.loc["y", "q05"] < t.loc["y", "q50"] and np.isinf(t.loc["y", "q95"])
    pb = cmp.p_best(res, budget=1e7)
    assert pb.p_best.sum() == pytest.approx(1.0)
    # at a huge budget the reward is the ceiling: y is best where A_y > 0.7 (P = 0.25)
    assert abs(pb.set_index("recipe").loc["y", "p_best"] - 0.25) < 0.05


def test_errors_name_the_problem():
    res = _result(
        {"x": {"A": 0.6, "B": 2.0, "C_mid": 3000.0}, "y": {"A": 0.5, "B": 2, "C_mid": 3e3}}, ["x", "y"]
    )
    with pytest.raises(ValueError, match="unknown recipe 'w'"):
        cmp.compare(res, "x", "w")
    with pytest.raises(ValueError, match="budget"):
        cmp.compare(res, params=("reward",))
    with pytest.raises(ValueError, match="param"):
        cmp.compare(res, params=("Q",))
    with pytest.raises(ValueError, match="target"):
        cmp.compute_to_target(res, 1.5)


def test_reward_at_budget_matches_the_curve():
    res = _result(
        {"x": {"A": 0.7, "B": 2.0, "C_mid": 4000.0}, "y": {"A": 0.6, "B": 2.0, "C_mid": 2000.0}}, ["x", "y"]
    )
    row = cmp.compare(res, "x", "y", params=("reward",), budget=4000).iloc[0]
    expect = bs.scalerl_curve(4000, 0.7, 2.0, 4000.0, 0.3) - bs.scalerl_curve(4000, 0.6, 2.0, 2000.0, 0.3)
    assert row.diff_mean == pytest.approx(expect)
    assert isinstance(cmp.compare(res, "x", "y", params=("reward",), budget=4000), pd.DataFrame)
    # with repeat seeds: compare's seed term on the reward is estimate_seed_sd's, from one pass
    res = _result(
        {
            "x/s0": {"A": 0.70, "B": 2.0, "C_mid": 4000.0},
            "x/s1": {"A": 0.74, "B": 2.0, "C_mid": 4000.0},
            "y/s0": {"A": 0.60, "B": 2.0, "C_mid": 2000.0},
        },
        ["x", "x", "y"],
    )
    tau = cmp.estimate_seed_sd(res, "reward", budget=4000)
    assert 0.01 < tau < 0.03  # the seeds' rewards at C_mid are 0.02 apart (sd 0.014)
    row = cmp.compare(res, "x", "y", params=("reward",), budget=4000).iloc[0]
    assert row.seed_sd == tau
    _, d = cmp.recipe_draws(res, "reward", budget=4000)
    # x's term has sd tau / sqrt(2), y's tau: the difference is normal, sd tau sqrt(1.5); its
    # 90% interval's width from 800 draws has a Monte Carlo sd of about 2.6%: 3 sd allowed
    half = 1.6449 * tau * np.sqrt(1.5)
    assert row.diff_q95 - row.diff_q05 == pytest.approx(2 * half, rel=0.08)
    assert row.diff_mean == pytest.approx((d[0] - d[1]).mean(), abs=1e-12)


def test_one_seed_each_is_not_a_verdict_for_a_gap_no_rerun_would_keep():
    """The issue's case: dense logs give each run's A +-0.002; two seeds 0.0036 apart."""
    rng = np.random.default_rng(4)
    res = _result(
        {
            "a": {"A": rng.normal(0.6036, 0.0012, 800), "B": 2.0, "C_mid": 3000.0},
            "b": {"A": rng.normal(0.6000, 0.0012, 800), "B": 2.0, "C_mid": 3000.0},
        },
        ["a", "b"],
    )
    plain = cmp.compare(res, "a", "b", rope=0.0, seed_sd=0.0).iloc[0]
    assert plain.p_a_greater > 0.97 and plain.verdict == "a higher"
    row = cmp.compare(res, "a", "b", rope=0.0).iloc[0]
    # P(a > b) = Phi(0.0036 / sqrt(2 (0.0012^2 + 0.01^2))) = 0.60; the draws' MC sd is 0.017
    assert abs(row.p_a_greater - 0.60) < 0.06 and row.verdict == "undecided"
    assert row.seed_sd == cmp.SEED_SD


def test_seed_spread_is_estimated_from_repeat_seeds():
    """30 recipes x 3 seeds whose ceilings scatter by 0.03: the pooled moment estimate."""
    rng = np.random.default_rng(5)
    params, recipes = {}, []
    for r in range(30):
        for s_ in range(3):
            m = 0.5 + 0.1 * r / 30 + rng.normal(0, 0.03)
            params[f"r{r}/s{s_}"] = {"A": m + rng.normal(0, 0.005, 800), "B": 2.0, "C_mid": 3000.0}
            recipes.append(f"r{r}")
    res = _result(params, recipes)
    tau = cmp.estimate_seed_sd(res)
    # 60 degrees of freedom give tau to about +-9% (sd) around the truth
    assert abs(tau / 0.03 - 1) < 0.25
    A = res.draws("A").reshape(30, 3, -1)[:4]  # against brute force, on four recipes
    sub = _result(
        {f"q{i}": {"A": a, "B": 2.0, "C_mid": 3e3} for i, a in enumerate(A.reshape(12, -1))},
        [f"r{i // 3}" for i in range(12)],
    )
    expect = _tau_by_quadrature(A.mean(axis=2), A.var(axis=2, ddof=1))
    assert cmp.estimate_seed_sd(sub) == pytest.approx(expect, abs=2 * cmp._TAU_MAX / cmp._TAU_GRID)
    with pytest.raises(ValueError, match="seed term"):
        cmp.estimate_seed_sd(res, "B")
    with pytest.raises(ValueError, match="seed_sd"):
        cmp.compare(res, seed_sd=-0.01)
    with pytest.raises(ValueError, match="seed_sd"):  # checked whatever the parameters
        cmp.compare(res, params=("B",), seed_sd=float("nan"))
