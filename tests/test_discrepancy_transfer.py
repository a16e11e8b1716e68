"""The scoring rules of ``benchmarks/discrepancy_transfer.py`` (numbers only, no fit)."""

from __future__ import annotations

import numpy as np
import pandas as pd
from conftest import benchmark_module

from bayes_scalerl.models.discrepancy import SCALE_GRID


def _module():
    return benchmark_module("discrepancy_transfer")


def _points(rng, n_runs, per_run, scale):
    """Held-out points whose errors are normal with sd ``scale`` times the predictive sd."""
    n = n_runs * per_run
    var = rng.uniform(0.0002, 0.002, n)
    mean = rng.uniform(0.4, 0.6, n)
    reward = mean + scale * np.sqrt(var) * rng.standard_normal(n)
    return pd.DataFrame(
        {
            "run": np.repeat([f"r{i}" for i in range(n_runs)], per_run),
            "i": np.repeat(np.arange(n_runs), per_run),
            "h": np.tile(np.linspace(0.05, 0.7, per_run), n_runs),
            "mean": mean,
            "var": var,
            "reward": reward,
        }
    )


def test_coverage_of_a_right_predictive_is_nominal():
    """No discrepancy on errors drawn from the predictive itself: 90% coverage.

    4,000 independent points: the coverage's Monte Carlo sd is sqrt(0.09 / 4000) = 0.005;
    the tolerance is 4 sd.
    """
    mod = _module()
    main = _points(np.random.default_rng(0), 200, 20, 1.0)
    k = SCALE_GRID.size
    post = np.zeros((200, k, k))
    post[:, 0, 0] = 1.0
    assert abs(mod._coverage(main, post) - 0.90) < 0.02
    # a level offset as wide as the largest grid value covers everything
    post_wide = np.zeros((200, k, k))
    post_wide[:, -1, 0] = 1.0
    assert mod._coverage(main, post_wide) > 0.99


def _one_hot(n_runs, om, ta):
    k = SCALE_GRID.size
    post = np.zeros((n_runs, k, k))
    post[:, int(np.searchsorted(SCALE_GRID, om)), int(np.searchsorted(SCALE_GRID, ta))] = 1.0
    return post


def test_single_scale_rules_keep_a_right_predictive_and_widen_a_narrow_one():
    """Scales chosen on one sample, scored on another from the same predictive.

    2,000 points a sample: the coverage's Monte Carlo sd is about 0.007 (points of a run
    are independent here); the tolerance, 0.03, is 4 sd.
    """
    mod = _module()
    rng = np.random.default_rng(1)
    for scale in (1.0, 3.0):
        fit_on, score_on = _points(rng, 200, 10, scale), _points(rng, 200, 10, scale)
        none = mod._coverage(score_on, _one_hot(200, 0.0, 0.0))
        for how in ("crps", "coverage"):
            covered = mod._coverage(score_on, _one_hot(200, *mod._single_scale(fit_on, how)))
            if scale == 1.0:
                assert abs(covered - 0.90) < 0.03, (how, covered)
            else:  # errors three times the predictive sd: 0.42 covered without a discrepancy
                assert none < 0.5 and covered > 0.8, (how, none, covered)
