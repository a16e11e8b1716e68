"""``benchmarks/dapo_backtest.py --digitise``: a curve as a paper's figure shows it (no fit)."""

from __future__ import annotations

import numpy as np
import pandas as pd
from conftest import benchmark_module

import bayes_scalerl as bs


def test_digitised_curves_are_smoothed_log_spaced_and_rounded():
    mod = benchmark_module("dapo_backtest")
    rng = np.random.default_rng(0)
    c = np.arange(0.0, 10_000.0 + 1.0, 50.0)  # compute 0, then every 50 GPU-hours
    frames = [
        pd.DataFrame(
            {"run": name, "compute": c, "reward": 0.3 + 0.2 * c / c[-1] + 0.01 * rng.standard_normal(c.size)}
        )
        for name in ("a", "b")
    ]
    runs = bs.Runs.from_frame(pd.concat(frames, ignore_index=True))
    out = mod.digitised(runs, 12, span=5.0).table
    for name, d in out.groupby("run"):
        src = runs.table[runs.table["run"] == name]
        assert (d["compute"] > 0).all()  # a log axis does not show compute 0
        lc = np.log(d["compute"].to_numpy())
        assert len(d) == 12 and lc[0] == np.log(50.0) and lc[-1] == np.log(10_000.0)
        # evenly spaced in log compute, to within the 50 GPU-hour grid the points are read on
        np.testing.assert_allclose(np.diff(lc), np.diff(lc).mean(), atol=np.log(1.5))
        # the reward is the moving average of the evaluations after compute 0, rounded
        pos = src[src["compute"] > 0]
        ema = pos["reward"].ewm(span=5.0).mean().round(3).to_numpy()
        picked = np.searchsorted(pos["compute"].to_numpy(), d["compute"].to_numpy())
        np.testing.assert_array_equal(d["reward"].to_numpy(), ema[picked])
        assert np.all(np.round(d["reward"].to_numpy(), 3) == d["reward"].to_numpy())
