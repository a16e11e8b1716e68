"""Misspecified truth curves (bayes_scalerl.analyses.misspec) and the misspecification benchmark's core."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from conftest import benchmark_module

import bayes_scalerl as bs
from bayes_scalerl.analyses import misspec as ms

#: Parameters each family uses besides A and the discrepancy's.
USED = {
    "sigmoid": {"B", "C_mid"},
    "wiggle": {"B", "C_mid"},
    "creep": {"B", "C_mid", "creep_D", "creep_b", "creep_C"},
    "drift": {"B", "C_mid", "drift_E", "drift_B", "drift_C"},
    "double": {"A1", "B1", "C1", "B2", "C2"},
    "power": {"alpha", "C0"},
    "exponential": {"k", "tau"},
    "jump": {"B", "C_mid", "jump_J", "jump_b", "jump_C"},
}
#: Every family the simulator knows: the benchmark's and the held-out ones.
ALL_FAMILIES = ms.FAMILIES + ms.HELD_OUT_FAMILIES


def _benchmark_module():
    return benchmark_module("misspecification")


# ---------------------------------------------------------------------- generators
@pytest.mark.parametrize("family", ALL_FAMILIES)
@pytest.mark.parametrize("noise", ms.NOISES + ms.HELD_OUT_NOISES)
def test_scenario_deterministic_columns_and_schedule(family, noise):
    a = ms.simulate_scenario(np.random.default_rng(7), family, noise, 5, n_evals=20)
    b = ms.simulate_scenario(np.random.default_rng(7), family, noise, 5, n_evals=20)
    pd.testing.assert_frame_equal(a, b)
    c = ms.simulate_scenario(np.random.default_rng(8), family, noise, 5, n_evals=20)
    assert not np.array_equal(a["reward"].to_numpy(), c["reward"].to_numpy())

    cols = [
        "run",
        "step",
        "compute",
        "reward",
        "family",
        "noise",
        "scenario",
        "mu",
        "true_ceiling",
        "noise_sd",
    ]
    assert list(a.columns) == cols + (["n_eval"] if noise == "binomial" else [])
    assert len(a) == 5 * 20 and a["run"].nunique() == 5
    assert (a["scenario"] == f"{family}/{noise}").all()
    assert a["reward"].between(0, 1).all() and a["mu"].between(0, 1).all()
    for _, g in a.groupby("run"):
        step, c_ = g["step"].to_numpy(), g["compute"].to_numpy()
        assert step[0] == 0 and c_[0] == 0.0
        assert len(set(np.diff(step))) == 1  # evenly spaced in steps
        assert np.all(np.diff(c_) > 0)
        assert 8_000 <= c_[-1] <= 64_000
        dc = np.diff(c_)
        assert dc[-1] >= dc[0] * (1 - 1e-12)  # GPU-hours per step grow (or stay)
        assert np.isfinite(g["true_ceiling"]).all() and g["true_ceiling"].nunique() == 1
    if noise == "binomial":
        n = a["n_eval"].to_numpy()
        assert n.min() >= 500 and n.max() <= 2000
        # rewards are means of n graded generations
        assert np.allclose(np.round(a["reward"] * n), a["reward"] * n, atol=1e-9)
    runs = bs.Runs.from_frame(a[["run", "compute", "reward"] + (["n_eval"] if noise == "binomial" else [])])
    assert runs.n_runs == 5


def test_parameter_ranges():
    rng = np.random.default_rng(1)
    for family in ALL_FAMILIES:
        p = ms.draw_params(rng, family, 400)
        assert p["R0"].between(0.10, 0.45).all()
        assert p["A"].between(0.45, 0.80).all()
        assert (p["A"] - p["R0"] >= 0.12 - 1e-12).all()
        assert p["budget"].between(8_000, 64_000).all()
        assert p["true_ceiling"].between(0.45 - 0.08, 0.90 + 1e-12).all()  # drift: A - E; creep: A + D
        np.testing.assert_allclose(p["true_ceiling"], ms.true_ceiling(p))
        used = {c for c in ms.PARAM_COLUMNS if p[c].notna().all()}
        assert {c for c in ms.PARAM_COLUMNS if p[c].notna().any()} == used
        assert used == {"A", "wiggle_sd", "wiggle_ls"} | USED[family]
        if family == "wiggle":
            assert p["wiggle_sd"].between(0.01, 0.02).all()
        else:
            assert (p["wiggle_sd"] == 0).all()


def _dense(p: pd.DataFrame, lo: float = 1e-3, hi: float = 1e3) -> np.ndarray:
    frac = np.concatenate([[0.0], np.geomspace(lo, hi, 400)])
    return p["budget"].to_numpy()[:, None] * frac[None, :]


@pytest.mark.parametrize("family", ALL_FAMILIES)
def test_mean_curve_start_limit_and_monotonicity(family):
    p = ms.draw_params(np.random.default_rng(3), family, 300)
    c = _dense(p)
    mu = ms.mean_curve(p, c)
    assert np.isfinite(mu).all()
    np.testing.assert_allclose(mu[:, 0], p["R0"], atol=1e-12)  # R0 at compute 0
    # the ceiling is the limit: at 1e15 x the budget every family is within 1e-3 of it (the slowest,
    # the power law with alpha >= 0.3 from C0 >= budget / 1e5, is ~1e-6 away)
    far = ms.mean_curve(p, p["budget"].to_numpy()[:, None] * 1e15)[:, 0]
    np.testing.assert_allclose(far, p["true_ceiling"], atol=1e-3)
    if family in ms.RISING_FAMILIES:
        assert np.all(np.diff(mu, axis=1) >= -1e-12)
        assert np.all(mu <= p["true_ceiling"].to_numpy()[:, None] + 1e-12)
    else:  # drift: rises to a plateau, then loses drift_E by the end of time
        peak = mu.max(axis=1)
        assert np.all(peak > p["true_ceiling"] + 0.25 * p["drift_E"])  # a hump (>= 0.33 E measured)
        assert np.all(mu[:, -1] < peak)


def test_smooth_discrepancy_size_and_taper():
    rng = np.random.default_rng(4)
    n = 2000
    budget = np.full(n, 10_000.0)
    c = np.array([[0.0, 1e-3, 10.0, 1e3, 1e4, 1e5, 1e12]] * n)
    d = ms.smooth_discrepancy(rng, c, budget, np.full(n, 0.02), np.full(n, 0.5))
    assert np.all(d[:, 0] == 0.0)  # nothing at compute 0
    assert np.abs(d[:, [1, -1]]).max() < 1e-6  # tapered far below and far above the budget
    # inside the window it is a process of sd 0.02: over 2000 runs the sample sd is within
    # 10% (the variance of 32 random features fluctuates from run to run; se of the pooled sd ~2%)
    sd = d[:, 3:6].std()
    assert 0.018 < sd < 0.022
    # smooth: neighbouring points (0.02 e-folds apart) are nearly equal, length scale 0.5
    x = np.log(np.array([[1e4, 1e4 * np.exp(0.02)]] * n))
    e = ms.smooth_discrepancy(rng, np.exp(x), budget, np.full(n, 0.02), np.full(n, 0.5))
    assert np.corrcoef(e[:, 0], e[:, 1])[0, 1] > 0.99


def test_noise_models_moments():
    rng = np.random.default_rng(5)
    n, q = 400, 60
    mu = np.full((n, q), 0.3)
    # binomial: mean of n_eval Bernoulli(0.3) draws, variance 0.3 * 0.7 / n_eval. With 24,000 draws
    # the sample variance has relative se sqrt(2 / 24000) ~ 0.9%; allow 5%.
    y = ms.evaluation_noise(rng, mu, "binomial", n_eval=np.full(n, 1000.0))
    assert abs(y.mean() - 0.3) < 5 * np.sqrt(0.21 / 1000 / y.size)
    assert y.var() / (0.21 / 1000) == pytest.approx(1.0, abs=0.05)
    # iid Gaussian: sd sigma, lag-one correlation 0 (se 1 / sqrt(23600) ~ 0.0065)
    sigma = np.full(n, 0.015)
    e = ms.evaluation_noise(rng, mu, "iid", sigma=sigma) - 0.3
    assert e.std() / 0.015 == pytest.approx(1.0, abs=0.05)
    assert abs(np.corrcoef(e[:, 1:].ravel(), e[:, :-1].ravel())[0, 1]) < 0.03
    # AR(1): stationary sd sigma, lag-one correlation rho (estimate within 0.03 of 0.7)
    e = ms.evaluation_noise(rng, mu, "ar1", sigma=sigma, rho=np.full(n, 0.7)) - 0.3
    assert e.std() / 0.015 == pytest.approx(1.0, abs=0.05)
    assert np.corrcoef(e[:, 1:].ravel(), e[:, :-1].ravel())[0, 1] == pytest.approx(0.7, abs=0.03)
    params = ms.draw_noise_params(rng, "ar1", 100)
    assert params["rho"].between(0.5, 0.8).all() and params["sigma"].between(0.008, 0.02).all()
    # outlier (held out): iid noise, and 3% of the evaluations after the first lose 0.05-0.20.
    # Losses beyond 0.05 are outliers (the Gaussian part reaches 0.05 = 3.3 sd with p ~ 4e-4);
    # their share over 23,600 evaluations has se sqrt(0.03 * 0.97 / 23600) ~ 0.0011: allow 0.005.
    e = ms.evaluation_noise(rng, mu, "outlier", sigma=sigma) - 0.3
    assert np.all(e[:, 0] > -0.05)  # the first evaluation, which sets R0, is spared
    out = e[:, 1:] < -0.05
    assert abs(out.mean() - ms.OUTLIER_RATE) < 0.005
    assert e[:, 1:][out].min() > -0.20 - 5 * 0.015
    assert e[:, 1:][~out].std() / 0.015 == pytest.approx(1.0, abs=0.05)


def test_seed_pairs_share_truth_not_luck():
    df = ms.simulate_seed_pairs(np.random.default_rng(6), "power", "ar1", 3, n_evals=16)
    assert df["pair"].nunique() == 3 and df["run"].nunique() == 6
    for _, g in df.groupby("pair"):
        s0, s1 = (g[g["pair_seed"] == k].reset_index(drop=True) for k in (0, 1))
        np.testing.assert_array_equal(s0["compute"], s1["compute"])
        assert s0["true_ceiling"].iloc[0] == s1["true_ceiling"].iloc[0]
        assert not np.allclose(s0["mu"], s1["mu"])  # independent smooth discrepancy
        assert not np.allclose(s0["reward"], s1["reward"])
        assert s0["mu"].iloc[0] == s1["mu"].iloc[0]  # same R0: no discrepancy at compute 0


def test_benchmark_table_shares_truth_across_noise():
    df = ms.simulate_benchmark(
        0, families=("sigmoid", "wiggle"), runs_per_scenario=3, pairs_per_scenario=1, n_evals=12
    )
    assert set(df["role"]) == {"run", "pair"}
    assert df.groupby("scenario")["run"].nunique().eq(5).all()
    a = df[(df["scenario"] == "wiggle/iid") & (df["role"] == "run")]["mu"].to_numpy()
    b = df[(df["scenario"] == "wiggle/ar1") & (df["role"] == "run")]["mu"].to_numpy()
    np.testing.assert_array_equal(a, b)  # same true curves under every noise model
    # leaving a family out does not change the others
    only = ms.simulate_benchmark(
        0, families=("wiggle",), runs_per_scenario=3, pairs_per_scenario=1, n_evals=12
    )
    pd.testing.assert_frame_equal(
        only.reset_index(drop=True), df[df["family"] == "wiggle"].reset_index(drop=True)
    )
    bs.Runs.from_frame(df[["run", "compute", "reward"]])


def test_jump_is_a_step_inside_the_run_and_held_out_of_the_benchmark():
    p = ms.draw_params(np.random.default_rng(5), "jump", 500)
    assert p["jump_J"].between(0.02, 0.06).all()
    assert (p["jump_C"] / p["budget"]).between(0.1, 1.0).all()
    sig = p.assign(family="sigmoid")
    c_j, b = p["jump_C"].to_numpy(), p["jump_b"].to_numpy()
    # 10% to 90% of the step within a factor exp(2 log 9 / b) <= 1.74 of compute around C_j
    w = np.exp(np.log(9.0) / b)
    step = ms.mean_curve(p, np.c_[c_j / w, c_j * w]) - ms.mean_curve(sig, np.c_[c_j / w, c_j * w])
    np.testing.assert_allclose(step / p["jump_J"].to_numpy()[:, None], [[0.1, 0.9]] * 500, atol=1e-9)
    assert "jump" not in ms.FAMILIES  # the default benchmark leaves it out
    # adding the held-out family changes no scenario of the benchmark's families
    df = ms.simulate_benchmark(0, families=("wiggle", "jump"), runs_per_scenario=3, n_evals=12)
    only = ms.simulate_benchmark(0, families=("wiggle",), runs_per_scenario=3, n_evals=12)
    pd.testing.assert_frame_equal(only, df[df["family"] == "wiggle"].reset_index(drop=True))


def test_bad_arguments():
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="family"):
        ms.draw_params(rng, "logistic", 3)
    with pytest.raises(ValueError, match="noise"):
        ms.draw_noise_params(rng, "poisson", 3)
    assert "outlier" not in ms.NOISES  # held out of the default benchmark
    with pytest.raises(ValueError, match="n_evals"):
        ms.draw_params(rng, "sigmoid", 3, n_evals=4)


# ---------------------------------------------------------------------- the benchmark's core
def test_clustered_se_counts_runs_not_points():
    mod = _benchmark_module()
    # two runs, each all in or all out: p = 0.5 over 2 clusters of 10 points; the sandwich
    # variance is (5^2 + 5^2) * 2 / 20^2 = 0.25, SE 0.5 (iid points would claim 0.11)
    x = pd.Series([1.0] * 10 + [0.0] * 10)
    run = pd.Series(["a"] * 10 + ["b"] * 10)
    assert mod.clustered_se(x, run) == pytest.approx(0.5)
    # within-run mixing with equal run means: no between-run spread, SE 0
    x2 = pd.Series([1.0, 0.0] * 10)
    run2 = pd.Series(["a", "a", "b", "b"] * 5)
    assert mod.clustered_se(x2, run2) == pytest.approx(0.0)
    assert np.isnan(mod.clustered_se(pd.Series([1.0, 0.0]), pd.Series(["a", "a"])))


def test_parse_method():
    mod = _benchmark_module()
    name, kw = mod.parse_method('robust={"priors": {"likelihood": "student_t", "nu": 3}, "warmup": 50}')
    assert name == "robust" and kw["priors"] == bs.Priors(likelihood="student_t", nu=3) and kw["warmup"] == 50
    _, kw = mod.parse_method('two={"discrepancy": {"ratio": [2, 4]}}')
    assert kw["discrepancy"] == bs.Discrepancy(ratio=(2.0, 4.0))
    with pytest.raises(ValueError):
        mod.parse_method("no-json")


def test_split_scenario_keeps_pairs_together_and_balances_the_fits():
    mod = _benchmark_module()
    singles = [f"s{i}" for i in range(13)]
    pairs = [f"p{j}/{k}" for j in range(3) for k in (0, 1)]
    info = pd.DataFrame(
        {
            "run": singles + pairs,
            "role": ["run"] * 13 + ["pair"] * 6,
            "pair": [np.nan] * 13 + [j for j in range(3) for _ in (0, 1)],
        }
    )
    fits = mod.split_scenario(info, 6)
    assert len(fits) == 3  # 19 runs in fits of about 6
    assert sorted(r for f in fits for r in f) == sorted(info["run"])  # every run once
    sizes = sorted(len(f) for f in fits)
    assert sizes[-1] - sizes[0] <= 2  # balanced up to one pair
    for j in range(3):  # a seed pair's two runs share a fit
        assert sum({f"p{j}/0", f"p{j}/1"} <= set(f) for f in fits) == 1
    assert mod.split_scenario(info, None) == [info["run"].tolist()]
    assert mod.split_scenario(info, 50) == [info["run"].tolist()]
    with pytest.raises(ValueError, match="batch_size"):
        mod.run_benchmark(batch="all", batch_size=6, log=None)


def test_run_benchmark_end_to_end():
    mod = _benchmark_module()
    res = mod.run_benchmark(
        methods=("calibrated", "ls_boot"),
        horizons=(2.0,),
        seed=1,
        runs_per_scenario=2,
        pairs_per_scenario=1,
        families=("sigmoid", "creep"),
        noises=("iid", "binomial"),
        n_evals=24,
        chains=2,
        warmup=100,
        samples=100,
        bootstrap=20,
        log=None,
    )
    s = res.scores
    assert list(s.columns) == ["scenario", "family", "noise", "horizon", "method", *mod.SCORE_COLUMNS]
    assert len(s) == 4 * 2  # scenarios x methods
    assert set(s["method"]) == {"calibrated", "ls_boot"}
    for col in ("coverage50", "coverage90", "coverage90_end"):
        assert s[col].between(0, 1).all()
    assert (s["coverage90"] >= s["coverage50"]).all()  # nested central intervals
    assert (s["coverage90_se"] >= 0).all()  # two runs per cell: a standard error exists
    assert (s["width90"] > 0).all() and (s["crps"] > 0).all() and (s["median_abs_error"] >= 0).all()
    assert (s["n_runs"] == 2).all() and (s["n_points"] >= 2 * 11).all()  # 12 of 24 evaluations held out
    g = s[s["method"] == "calibrated"]
    assert g["converged"].between(0, 1).all() and s.loc[s["method"] == "ls_boot", "converged"].isna().all()
    # per-run identify verdicts: every single run of the Bayesian method, flags consistent
    r = res.runs
    assert len(r[r["role"] == "run"]) == 8 and len(r[r["role"] == "pair"]) == 8
    inside = (r["a_q05"] <= r["true_ceiling"]) & (r["true_ceiling"] <= r["a_q95"])
    assert (r["ceiling_in_90"] == inside).all()
    # one compare verdict per seed pair
    assert len(res.pairs) == 4 and res.pairs["p_a_greater"].between(0, 1).all()
    assert res.pairs["higher"].dtype == bool and res.pairs["higher_seed_sd0"].dtype == bool
    text = mod.to_markdown(res, ["# title"])
    for heading in (
        "## Summary",
        "## Scenarios inside",
        "## Seed pairs",
        "## Identify verdicts",
        "## Every scenario",
    ):
        assert heading in text


def test_range_check_counts_cells_outside_the_range_beyond_their_standard_error():
    mod = _benchmark_module()
    scores = pd.DataFrame(
        {
            "scenario": ["a", "b", "c", "d", "e", "f"],
            "horizon": 2.0,
            "method": "m",
            "coverage90": [0.90, 0.97, 0.97, 0.80, 0.84, 1.0],
            "coverage90_se": [0.01, 0.005, 0.02, 0.01, 0.01, np.nan],
        }
    )
    r = mod.range_check(scores)
    assert len(r) == 1
    row = r.iloc[0]
    assert row["scenarios"] == 6 and row["inside"] == 1
    # b: 0.97 - 2 x 0.005 > 0.95; c: 0.97 - 0.04 is not; f: a missing error counts as 0
    assert row["too_wide"] == 2 and row["too_narrow"] == 1  # d: 0.80 + 0.02 < 0.85; e: 0.84 + 0.02 is not
    assert row["outside"] == "b 0.970 (0.005), d 0.800 (0.010), f 1.000 (0.000)"
    r2 = mod.range_check(scores.assign(method=["m", "m", "m", "n", "n", "n"]))
    assert list(r2["method"]) == ["m", "n"] and list(r2["too_wide"]) == [1, 1]
