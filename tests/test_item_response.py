"""The held-out item-response simulator of ``benchmarks/item_response.py`` (no fit)."""

from __future__ import annotations

import numpy as np
import pandas as pd
from conftest import benchmark_module


def _module():
    return benchmark_module("item_response")


def test_curves_are_reproducible_and_well_formed():
    mod = _module()
    runs = mod.draw_runs(np.random.default_rng(1), 6)
    a, ta = mod.simulate(np.random.default_rng(2), runs, mod.SCENARIOS["amc"])
    b, tb = mod.simulate(np.random.default_rng(2), runs, mod.SCENARIOS["amc"])
    pd.testing.assert_frame_equal(a, b)
    pd.testing.assert_frame_equal(ta, tb)
    assert a.groupby("run").size().eq(48).all()
    assert (a.groupby("run")["compute"].diff().dropna() > 0).all()
    assert a.groupby("run")["compute"].first().eq(0.0).all()
    assert a["reward"].between(0.0, 1.0).all()
    # rewards are means of 83 problems x 4 answers: multiples of 1/332
    assert np.allclose(a["reward"] * 332, np.round(a["reward"] * 332))
    assert a["n_eval"].eq(332).all()


def test_the_evaluations_converge_to_the_true_ceiling():
    """With the problems learnt long before the budget, late evaluations sit at ``mean(q)``.

    500 problems x 1 answer: one evaluation's sd is at most sqrt(0.25 / 500) = 0.022, the
    mean of the last 10 at most 0.0071; the tolerance is 4 of those sds.
    """
    mod = _module()
    runs = mod.draw_runs(np.random.default_rng(3), 5)
    runs["T"] = runs["budget"] * 1e-6
    runs["luck_sd"] = 0.0
    curves, truth = mod.simulate(np.random.default_rng(4), runs, mod.SCENARIOS["math"])
    late = curves.groupby("run")["reward"].apply(lambda r: r.iloc[-10:].mean())
    gap = late - truth.set_index("run")["true_ceiling"]
    assert np.all(np.abs(gap) < 4 * 0.0071), gap


def test_luck_is_a_stationary_ou_path():
    """Far-apart points are independent draws of sd ``sd``: the sample sd of 4,000 is within 5%.

    The sd of a sample sd of n normal draws is about sd / sqrt(2 n) = 1.1% here.
    """
    mod = _module()
    x = np.arange(4000) * 10.0
    path = mod._ou(np.random.default_rng(5), x, sd=0.2, ell=0.1)
    assert abs(path.std() / 0.2 - 1.0) < 0.05
    # close points move together
    close = mod._ou(np.random.default_rng(6), np.arange(4000) * 0.001, sd=0.2, ell=1.0)
    assert np.corrcoef(close[:-1], close[1:])[0, 1] > 0.99


def test_summary_counts_coverage_by_run():
    mod = _module()
    pts = pd.DataFrame(
        {
            "scenario": "amc",
            "horizon": 2.0,
            "method": "bayes",
            "run": ["a", "a", "b", "b"],
            "covered50": [True, False, True, True],
            "covered90": [True, True, False, True],
            "q05": [0.1, 0.1, 0.2, 0.2],
            "q95": [0.3, 0.3, 0.4, 0.6],
            "crps": [0.01, 0.02, 0.03, 0.04],
        }
    )
    row = mod.summarise(pts).iloc[0]
    assert row["runs"] == 2 and row["points"] == 4
    assert row["coverage90"] == 0.75 and row["coverage50"] == 0.75
    assert np.isclose(row["width90"], 0.25) and np.isclose(row["crps"], 0.025)
    # runs a (2/2) and b (1/2) against p = 0.75: sqrt((0.5^2 + 0.5^2) * 2 / 1) / 4
    assert np.isclose(row["coverage90_se"], np.sqrt(0.5 * 2) / 4)
