"""The stacking weights and mixture of ``benchmarks/family_stacking.py`` (numbers only, no fit)."""

from __future__ import annotations

import numpy as np
from conftest import benchmark_module


def _module():
    return benchmark_module("family_stacking")


def test_stack_weights_count_runs_not_points():
    mod = _module()
    # run 0: ten points that only component 0 explains; run 1: one point only component 1 does.
    # Each run counts once, so the log score 0.5 log w0 + 0.5 log w1 peaks at (0.5, 0.5);
    # weighting points instead would give (10/11, 1/11).
    logp = np.array([[0.0, -50.0]] * 10 + [[-50.0, 0.0]])
    run = np.array([0] * 10 + [1])
    np.testing.assert_allclose(mod.stack_weights(logp, run), [0.5, 0.5], atol=1e-6)


def test_stack_weights_recover_the_mixing_share():
    mod = _module()
    # points from a 0.3 / 0.7 mixture of N(0, 1) and N(3, 1), one point per run: the
    # maximum-likelihood weight is within a few standard errors (sqrt(0.21 / n) ~ 0.01) of 0.3
    rng = np.random.default_rng(0)
    n = 4000
    comp = rng.random(n) < 0.3
    y = np.where(comp, 0.0, 3.0) + rng.standard_normal(n)
    logp = np.stack([-0.5 * y**2, -0.5 * (y - 3.0) ** 2], axis=1) - 0.5 * np.log(2 * np.pi)
    w = mod.stack_weights(logp, np.arange(n))
    assert abs(w[0] - 0.3) < 0.04 and abs(w.sum() - 1) < 1e-12
    # a component that explains nothing gets no weight
    w3 = mod.stack_weights(np.c_[logp, np.full(n, -200.0)], np.arange(n))
    assert w3[2] < 1e-6


def test_mixture_takes_each_draw_from_one_component():
    mod = _module()
    draws = {"a": np.zeros((3, 2000, 4)), "b": np.ones((3, 2000, 4))}
    mix = mod._mixture(draws, ("a", "b"), np.array([0.25, 0.75]), np.random.default_rng(1))
    assert mix.shape == (3, 2000, 4)
    # whole draws are taken from one component (every point of a draw agrees)
    assert np.all(mix == mix[:, :, :1])
    # the share of draws from "b" is 0.75 +- 3 se (se = sqrt(0.1875 / 6000) ~ 0.0056)
    assert abs(mix[:, :, 0].mean() - 0.75) < 0.017
