"""Calibration by simulation: known parameters in, coverage out.

64 runs with C_mid in 1.5k-4k GPU-hours are fitted on 1.5k-8k and scored on the
held-out evaluations from 8k to 16k. With n independent runs a correct 90% interval
covers a binomial share with sd sqrt(0.09 / n) = 0.0375 for n = 64; the tolerances
below are three such standard deviations (about 0.11) for A, and for the held-out
points, whose errors are correlated within a run (about 20 per run), an effective
n of about 64 x 3 gives sd 0.022 and three of them 0.065.
"""

import numpy as np
import pytest

import bayes_scalerl as bs
from tests.conftest import QUICK

N_RUNS = 64


@pytest.fixture(scope="module")
def calibration_fit():
    rng = np.random.default_rng(2024)
    truth = bs.random_truth(
        rng, N_RUNS, A=(0.5, 0.7), B=(1.2, 3.0), C_mid=(1500.0, 4000.0), R0=(0.2, 0.35), sigma=(0.01, 0.02)
    )
    grid = np.concatenate([[0.0], np.linspace(1000, 16000, 31)])
    df = bs.simulate_runs(truth, grid, rng)
    res = bs.fit(df, min_compute=1500, fit_until=8000, seed=3, log_likelihood=False, **QUICK)
    return truth, df, res


def test_A_interval_covers_truth(calibration_fit):
    truth, _, res = calibration_fit
    s = res.summary(var_names=["A"]).set_index("run").loc[truth["run"]]
    covered = (s["q05"].to_numpy() <= truth["A"].to_numpy()) & (truth["A"].to_numpy() <= s["q95"].to_numpy())
    cov = covered.mean()
    print(f"A 90% interval coverage: {cov:.3f} over {N_RUNS} runs")
    assert abs(cov - 0.90) <= 0.11


def test_predictive_band_covers_held_out_points(calibration_fit):
    _, _, res = calibration_fit
    p = res.observed_predictions()
    held = p[~p["in_fit"] & (p["compute"] > 8000)]
    inside90 = (held["q05"] <= held["observed"]) & (held["observed"] <= held["q95"])
    inside50 = (held["q25"] <= held["observed"]) & (held["observed"] <= held["q75"])
    print(
        f"held-out coverage: 90% band {inside90.mean():.3f}, 50% band {inside50.mean():.3f} "
        f"over {len(held)} points"
    )
    assert abs(inside90.mean() - 0.90) <= 0.065
    assert abs(inside50.mean() - 0.50) <= 0.10


def test_most_runs_converge(calibration_fit):
    _, _, res = calibration_fit
    d = res.diagnostics()
    print(
        f"converged {d.converged.mean():.3f}, R-hat<=1.01 {(d.r_hat_max <= 1.01).mean():.3f}, "
        f"any divergence {(d.divergences > 0).mean():.3f}"
    )
    # A regression guard, not the target of 0.99, which the sampler does not reach at 300
    # warm-up + 300 draws. Measured over seeds 0-7 of this fit: mean 0.80 (0.75-0.875)
    # with 0.2% of runs with a divergence; this test's seed gives 0.78. (Before the
    # anchor of the coordinates moved, see bayes_scalerl/models/scalerl.py: mean 0.52, 0.34-0.64.)
    # 64 runs give a binomial sd of 0.05, so the guard sits 3.5 sds (0.175) below the mean.
    assert (d.r_hat_max <= 1.01).mean() >= 0.62
    assert (d.divergences > 0).mean() <= 0.05
