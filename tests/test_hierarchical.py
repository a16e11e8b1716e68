"""The hierarchical model: structure, clean sampling, pooling gains and recipe calls on known truth."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest
from conftest import QUICK

import bayes_scalerl as bs
from bayes_scalerl.analyses.comparisons import compare, recipe_draws
from bayes_scalerl.analyses.simulate import random_recipes
from bayes_scalerl.models.hierarchical import hierarchy_index
from bayes_scalerl.models.scalerl import gain_conditional, make_run_data
from bayes_scalerl.posterior.diagnostics import sampler_diagnostics

#: These tests call the model's JAX internals directly: run them in float64 (see conftest).
pytestmark = pytest.mark.usefixtures("float64")

GRID = np.arange(0.0, 8000.0 + 1, 250.0)


@pytest.fixture(scope="module")
def study():
    rng = np.random.default_rng(7)
    truth = random_recipes(rng, 6, 3, A=(0.50, 0.66), C_mid=(1500.0, 4000.0))
    df = bs.simulate_runs(truth, GRID, rng, extra_columns=("recipe", "seed"))
    return truth, bs.Runs.from_frame(df, source="<study>")


@pytest.fixture(scope="module")
def hier_fit(study):
    return bs.fit(study[1], min_compute=1500, model="hierarchical", seed=3, **QUICK)


@pytest.fixture(scope="module")
def indep_fit(study):
    return bs.fit(study[1], min_compute=1500, seed=3, **QUICK)


def test_index_of_recipes_tasks_and_training_runs():
    df = pd.DataFrame(
        {
            "run": ["a"] * 4 + ["b"] * 4,
            "task": ["math", "math", "code", "code", "math", "math", "code", "code"],
            "recipe": ["r1"] * 4 + ["r2"] * 4,
            "compute": [0, 1, 0, 1] * 2,
            "reward": 0.3,
        }
    )
    idx = hierarchy_index(bs.Runs.from_frame(df))
    assert idx.recipes == ["r1", "r2"] and idx.tasks == ["math", "code"]
    assert idx.training_runs == ["a", "b"]
    np.testing.assert_array_equal(idx.curve_train, [0, 0, 1, 1])
    np.testing.assert_array_equal(idx.curve_task, [0, 1, 0, 1])
    np.testing.assert_array_equal(idx.train_recipe, [0, 1])
    bad = df.assign(recipe=["r1", "r1", "r2", "r2", "r2", "r2", "r2", "r2"])
    with pytest.raises(ValueError, match="run 'a'.*column 'recipe'.*several recipes"):
        hierarchy_index(bs.Runs.from_frame(bad))


def test_recipe_prior_through_gain_conditional_matches_the_priors_form():
    # passing A_loc, A_scale as arrays equals setting them in Priors (same closed form)
    c = jnp.linspace(500.0, 8000.0, 12)
    y = 0.3 + 0.3 / (1 + (3000.0 / c) ** 2)
    d = make_run_data(c, y, jnp.ones(12, bool), jnp.asarray(0.3), jnp.asarray(8000.0), bs.Priors())
    p = bs.Priors(A_loc=0.62, A_scale=0.02)
    a = gain_conditional(jnp.log(2.0), jnp.log(3000.0), 0.01, d.R0, d, p)
    b = gain_conditional(
        jnp.log(2.0), jnp.log(3000.0), 0.01, d.R0, d, bs.Priors(), A_loc=jnp.asarray(0.62), A_scale=0.02
    )
    for x, z in zip(a, b, strict=True):
        np.testing.assert_allclose(x, z, rtol=1e-12)


def test_layout_and_round_trip(hier_fit, tmp_path):
    post = hier_fit.dt["posterior"]
    assert post["A"].dims == ("chain", "draw", "run")
    assert post["A_recipe"].dims == ("chain", "draw", "recipe")
    assert post["A_seed_sd"].dims == ("chain", "draw")
    assert list(post["recipe"].values) == [f"recipe{i:03d}" for i in range(6)]
    assert hier_fit.dt["sample_stats"]["diverging"].dims == ("chain", "draw")
    assert hier_fit.settings["model"] == "hierarchical"
    d = hier_fit.diagnostics()
    assert len(d) == 18 and (d.divergences == d.divergences.iloc[0]).all()
    back = bs.FitResult.load(hier_fit.save(tmp_path / "h.nc"))
    np.testing.assert_array_equal(back.dt["posterior"]["A_recipe"].values, post["A_recipe"].values)
    # A is drawn inside (R0, 1) for every run
    A = hier_fit.draws("A")
    assert np.all(A > hier_fit.dt["constant_data"]["R0_obs"].values[:, None]) and np.all(A < 1)


def test_pooled_fit_is_sampled_cleanly(hier_fit):
    sd = sampler_diagnostics(hier_fit.dt)
    assert set(sd.variable) >= {"A", "A_recipe", "A_seed_sd", "B_seed_sd", "C_mid_recipe_sd"}
    # Measured over seeds 0-15 of this fit: 12-14 of 16 fits have no divergent transition,
    # the others 1-3 of their 1,200 draws (this seed: 3; exactly which seeds depends on
    # the last bits of the arithmetic, see the note on issue 2). A non-centred seed level
    # keeps them that rare; the centred one, the known bad geometry, gave dozens.
    assert sd.divergences.iloc[0] <= 6  # at most 0.5% of the draws
    # CI's short chains (4 x 300 draws) leave R-hat of the slowest hyperparameters (the seed
    # spreads) at 1.01-1.04 run to run; a centred seed level, the known bad geometry, gave 1.10
    # and dozens of divergences on this data. The <= 1.01 target is measured with the defaults
    # in benchmarks/compare_recipes.py.
    assert sd.r_hat_max.max() < 1.05
    assert sd.ess_bulk_min.min() > 100


def test_pooling_lowers_the_error_of_each_runs_asymptote(study, hier_fit, indep_fit):
    truth = study[0].set_index("run")
    true_A = truth.loc[hier_fit.run_names, "A"].to_numpy()
    err_h = np.median(hier_fit.draws("A"), axis=1) - true_A
    err_i = np.median(indep_fit.draws("A"), axis=1) - true_A
    rmse_h, rmse_i = np.sqrt(np.mean(err_h**2)), np.sqrt(np.mean(err_i**2))
    assert rmse_h < rmse_i, (rmse_h, rmse_i)


def test_recipe_intervals_and_calls_agree_with_the_truth(study, hier_fit):
    rec_A = study[0].groupby("recipe")["recipe_A"].first()
    names, d = recipe_draws(hier_fit, "A")
    lo, hi = np.quantile(d, [0.05, 0.95], axis=1)
    covered = (lo <= rec_A[names].to_numpy()) & (rec_A[names].to_numpy() <= hi)
    # 6 recipes at 90%: P(4 or fewer covered) = 0.11, P(3 or fewer) = 0.016
    assert covered.sum() >= 4
    t = compare(hier_fit)
    called = t[(t.p_a_greater > 0.9) | (t.p_a_greater < 0.1)]
    assert len(called) >= 5  # recipe A spread 0.16 vs seed spread 0.015: most pairs are clear
    agree = [(rec_A[r.a] > rec_A[r.b]) == (r.p_a_greater > 0.9) for r in called.itertuples()]
    # calls made at P > 0.9 are wrong at most 10% of the time: allow 1 in 5 here
    assert np.mean(agree) >= 0.8


def test_tasks_share_efficiency_and_keep_their_asymptotes():
    rng = np.random.default_rng(11)
    truth = random_recipes(rng, 3, 2, A=(0.5, 0.6))
    frames = []
    for task, shift in (("math", 0.0), ("code", -0.15)):
        t = truth.assign(A=truth["A"] + shift, task=task)
        frames.append(
            bs.simulate_runs(t, GRID, np.random.default_rng(len(task)), extra_columns=("recipe", "task"))
        )
    runs = bs.Runs.from_frame(pd.concat(frames))
    assert runs.n_runs == 12 and runs.names[0] == "recipe000/s0:math"
    res = bs.fit(runs, min_compute=1500, model="hierarchical", seed=0, **QUICK)
    post = res.dt["posterior"]
    assert post["A_recipe"].dims == ("chain", "draw", "recipe", "task")
    names = res.run_names
    B = res.draws("B")
    i, j = names.index("recipe000/s0:math"), names.index("recipe000/s0:code")
    np.testing.assert_array_equal(B[i], B[j])  # one efficiency per training run
    # every run's math ceiling is its code ceiling + 0.15 by construction; the recipes' mean gap
    # must sit within 3 posterior sd of it
    gap = (post["A_recipe"].sel(task="math") - post["A_recipe"].sel(task="code")).mean("recipe")
    assert abs(float(gap.median()) - 0.15) < 3 * float(gap.std())
    with pytest.raises(ValueError, match="several tasks"):
        compare(res)
    assert len(compare(res, task="code")) == 3


def test_model_argument_is_checked(study):
    with pytest.raises(ValueError, match="model"):
        bs.fit(study[1], model="pooled")
    with pytest.raises(ValueError, match="R0"):
        bs.fit(study[1], model="hierarchical", priors=bs.Priors(R0_fitted=True))
