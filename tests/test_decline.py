"""Runs whose reward falls during training are named; rising and flat noisy runs are not."""

from __future__ import annotations

import numpy as np
import pytest

import bayes_scalerl as bs
from bayes_scalerl.analyses.decline import MIN_DROP, decline_arrays

COMPUTE = np.arange(0.0, 8001.0, 160.0)  # 51 evaluations, the first sets R0


def _table(curves: np.ndarray):
    n = curves.shape[0]
    c = np.broadcast_to(COMPUTE, curves.shape).copy()
    fitted = np.ones_like(c, bool)
    fitted[:, 0] = False
    return decline_arrays(c, curves, fitted, [f"r{i}" for i in range(n)])


def test_rising_and_flat_noisy_runs_do_not_fall():
    """500 sigmoids (plateaued or not) and 500 flat runs with noise sd 0.006 to 0.02: no fall."""
    rng = np.random.default_rng(0)
    truth = bs.random_truth(rng, 500, C_mid=(1000.0, 20_000.0), sigma=(0.006, 0.02))
    rising = bs.simulate_runs(truth, COMPUTE, rng).pivot(index="run", columns="compute", values="reward")
    flat = 0.5 + rng.uniform(0.006, 0.02, (500, 1)) * rng.standard_normal((500, COMPUTE.size))
    table = _table(np.concatenate([rising.to_numpy(), flat]))
    # a false alarm needs a window mean 4 noise sds (and 0.02) above the last: rarer than 1 in 1,000
    assert table["falls"].sum() == 0
    assert (table["drop"] >= 0).all()


@pytest.mark.parametrize("fall", [0.08, 0.12, 0.2])
def test_a_collapse_is_named_with_its_size_and_peak(fall):
    rng = np.random.default_rng(1)
    up = 0.3 + 0.3 * COMPUTE / (COMPUTE + 1500.0)
    down = np.where(COMPUTE > 5000.0, fall * (COMPUTE - 5000.0) / 3000.0, 0.0)
    curves = up - down + 0.006 * rng.standard_normal((20, COMPUTE.size))
    table = _table(curves)
    assert table["falls"].all()
    # the last window (the last 12 points, 6.2k-8k) holds about 70% of the fall, less the
    # 0.02 the rising part still gains: drops of 0.3-0.6 times the fall
    assert (table["drop"] > 0.3 * fall).all() and (table["drop"] < fall).all()
    assert table["peak_compute"].between(3000.0, 6500.0).all()


def test_short_runs_and_small_drops_are_not_called():
    curves = np.tile(np.r_[0.3, 0.4, 0.5, 0.45, 0.4][None, :], (2, 1))
    c = np.tile(np.arange(5.0)[None, :] * 100, (2, 1))
    fitted = np.ones_like(c, bool)
    table = decline_arrays(c, curves, fitted, ["a", "b"])
    assert not table["falls"].any()  # under 6 fitted points: no call
    assert MIN_DROP == 0.02
