"""Priors learnt from the batch (:mod:`bayes_scalerl.models.population`)."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pandas as pd
import pytest
from scipy import integrate, stats

import bayes_scalerl as bs
from bayes_scalerl.analyses.simulate import simulate_runs
from bayes_scalerl.engine import padded_inputs
from bayes_scalerl.models import population
from bayes_scalerl.models.population import grid_loglik, learn_population

GAUSS = bs.Priors(likelihood="gaussian", shape_noise=None)


def _runs(log_B, log_c_mid, ends, seed=0, n_points=12, sigma=0.01, A=None):
    """Exact sigmoids, each evaluated at ``n_points`` evenly spaced points up to its end."""
    rng = np.random.default_rng(seed)
    frames = []
    A = np.full(len(ends), 0.6) if A is None else A
    for i, (lb, lc, end) in enumerate(zip(log_B, log_c_mid, ends, strict=True)):
        truth = pd.DataFrame(
            {
                "run": [f"r{i:03d}"],
                "A": [A[i]],
                "B": [math.exp(lb)],
                "C_mid": [math.exp(lc)],
                "R0": [0.3],
                "sigma": [sigma],
            }
        )
        frames.append(simulate_runs(truth, np.linspace(0.0, end, n_points + 1), rng))
    return bs.Runs.from_frame(pd.concat(frames, ignore_index=True))


def _like_runs(n, seed):
    """``n`` runs of one recipe: midpoints near 500 within windows ending at 1,500."""
    rng = np.random.default_rng(seed)
    log_B = math.log(1.5) + 0.2 * rng.standard_normal(n)
    return _runs(log_B, np.log(500.0) + 0.2 * rng.standard_normal(n), np.full(n, 1500.0))


def _grid(ll, loc):
    """A grid of the default priors' span holding the log-likelihoods ``ll`` (run, 29, 41)."""
    zeros = np.zeros(ll.shape + (1,))
    return bs.models.population.GridLik(
        math.log(2.0) + 0.7 * np.linspace(-3.5, 3.5, 29),
        1.5 * np.linspace(-3.5, 3.5, 41),
        loc,
        ll,
        np.zeros(len(ll)),
        zeros,
        zeros,
        zeros + 1.0,
    )


def test_grid_loglik_matches_quadrature():
    """Differences between cells equal a direct double integral over the gain and sigma.

    The grid integrates sigma on 9 points spanning +-4 sd of its likelihood, whose
    Riemann sum of a near-Gaussian is accurate far below the 0.02 log units allowed.
    """
    runs = _runs([math.log(1.5)], [math.log(400.0)], [1000.0], n_points=10)
    w = runs.window()
    g = grid_loglik(w, GAUSS, n_b=7, n_c=9)
    m = w.mask[0]
    c, y, R0 = w.compute[0][m], w.reward[0][m], float(w.R0[0])

    def direct(lb, lc, A=None):
        s = 1.0 / (1.0 + np.exp(-np.exp(lb) * (np.log(c) - lc)))
        if A is None:  # uniform on (R0, 1)
            gain_prior = lambda gain: 1.0 / (1.0 - R0)  # noqa: E731
        else:  # Normal(mu_A, tau_A) truncated to (R0, 1)
            law = stats.truncnorm((R0 - A[0]) / A[1], (1.0 - A[0]) / A[1], loc=A[0], scale=A[1])
            gain_prior = lambda gain: law.pdf(R0 + gain)  # noqa: E731

        def lik(gain, log_sigma):
            sd = math.exp(log_sigma)
            prior = stats.halfnorm.pdf(sd, scale=GAUSS.sigma_scale) * sd * gain_prior(gain)
            return np.exp(stats.norm.logpdf(y - R0 - gain * s, scale=sd).sum() + 30.0) * prior

        val, _ = integrate.dblquad(lik, math.log(1e-3), math.log(0.2), 0.0, 1.0 - R0, epsabs=0, epsrel=1e-5)
        return math.log(val)

    cells = [(3, 4), (2, 5), (4, 3)]
    ref = [direct(g.log_B[i], g.log_loc[0] + g.offset[j]) for i, j in cells]
    got = [g.loglik[0, i, j] for i, j in cells]
    np.testing.assert_allclose(np.diff(got), np.diff(ref), atol=0.02)
    # with a population of A (learn_population(ceiling=True)): the gain's likelihood,
    # a mixture of normals over sigma's grid, times A's truncated normal
    hyper = [(0.6, 0.05), (0.45, 0.2)]
    axis = population._Axis(np.array([h[0] for h in hyper]), np.array([h[1] for h in hyper]), np.zeros(2))
    terms = population._ceiling_terms(g, np.array([0]), axis)[0]
    ref = [direct(g.log_B[i], g.log_loc[0] + g.offset[j], h) for i, j in cells[:2] for h in hyper]
    got = [terms[i, j, k] for i, j in cells[:2] for k in range(len(hyper))]
    np.testing.assert_allclose(np.diff(got), np.diff(ref), atol=0.02)


def test_population_recovered_and_each_run_left_out():
    """A population of identified midpoints is learnt, and a run's prior ignores its own data.

    120 runs whose midpoints lie well inside their windows (each run's log C_mid known to
    about 0.1): the learnt medians are within 0.1 of the truth's (3 standard errors of a
    mean of 120 draws of sd 0.25 is 0.07, plus the grid's cells of 0.13-0.17).
    """
    rng = np.random.default_rng(3)
    n = 120
    log_B = math.log(1.5) + 0.25 * rng.standard_normal(n)
    ends = np.exp(rng.uniform(np.log(800.0), np.log(1200.0), n))
    log_c = np.log(ends) - 1.0 + 0.25 * rng.standard_normal(n)
    runs = _runs(log_B, log_c, ends, seed=4, n_points=16)
    w = runs.window()
    g = grid_loglik(w, GAUSS)
    pop = learn_population(g, GAUSS)
    assert abs(math.log(pop.B_median) - math.log(1.5)) < 0.1
    assert pop.B_log_sd < 0.45  # the default is 0.7; the truth's 0.25 plus estimation error
    rel = (
        np.log(pop.C_mid_factor)
        if pop.scale == "relative"
        else np.log(pop.C_mid_factor) - np.log(ends).mean()
    )
    assert abs(rel + 1.0) < 0.15
    # run 0's prior does not use run 0's data: replace its curve by another, rows[0] stays
    # (exactly on one grid; the finer grid is placed by the whole batch, here moving
    # rows[0] by about 1e-4), while the other runs' priors move by its weight (here 0.008)
    other = g.loglik.copy()
    other[0] = g.loglik[1]
    for refine, tol in ((0, 1e-9), (2, 1e-3)):
        pop = learn_population(g, GAUSS, refine=refine)
        again = learn_population(g._replace(loglik=other), GAUSS, refine=refine)
        assert again.scale == pop.scale
        np.testing.assert_allclose(again.rows[0], pop.rows[0], rtol=0, atol=tol)
        assert np.abs(again.rows[1:] - pop.rows[1:]).max() > 5e-3


def test_uninformative_batch_keeps_the_default_prior():
    """Runs that say nothing of B or C_mid (a flat likelihood) leave the default prior.

    The hyperprior's predictive is the default by construction; the grid's cells
    (0.17 in log B, 0.26 in log C_mid) and its +-3 sd span bound the error to 0.05.
    """
    flat = np.zeros((5, 29, 41))
    loc = np.log(np.full(5, 1000.0))
    g = _grid(flat, loc)
    pop = learn_population(g, bs.Priors())
    np.testing.assert_allclose(pop.rows[:, 0], math.log(2.0), atol=0.05)
    np.testing.assert_allclose(pop.rows[:, 1], 0.7, atol=0.05)
    np.testing.assert_allclose(pop.rows[:, 2], loc, atol=0.05)
    np.testing.assert_allclose(pop.rows[:, 3], 1.5, atol=0.08)


def test_ceiling_population_recovered():
    """``ceiling=True`` learns a population of A too, each run's prior from the other runs.

    40 runs whose windows reach three times their midpoints (each run's A known to about
    0.01), A drawn from Normal(0.62, 0.03): the learnt mean is within 0.02 of 0.62
    (3 standard errors of a mean of 40 draws of sd 0.03 is 0.014) and the predictive sd,
    the population's 0.03 plus the uncertainty of its mean and of each run's A, between
    0.02 and 0.05 (the default prior, uniform on (0.3, 1), has sd 0.2).
    """
    rng = np.random.default_rng(11)
    n = 40
    A = 0.62 + 0.03 * rng.standard_normal(n)
    log_B = math.log(1.5) + 0.2 * rng.standard_normal(n)
    ends = np.full(n, 1500.0)
    runs = _runs(log_B, np.log(ends / 3.0) + 0.2 * rng.standard_normal(n), ends, seed=12, A=A)
    pop = learn_population(grid_loglik(runs.window(), GAUSS), GAUSS, ceiling=True)
    assert pop.rows.shape == (n, 6)
    assert abs(pop.A_mean - 0.62) < 0.02
    assert 0.02 < pop.A_sd < 0.05
    # each run's prior is its predictive from the others: near the population's
    np.testing.assert_allclose(pop.rows[:, 4], pop.A_mean, atol=0.01)
    assert "A ~ Normal(" in pop.describe()


@pytest.mark.parametrize("shared", ["relative", "absolute"])
def test_scale_chosen_by_the_batch(shared):
    """Midpoints at one multiple of each window's end read as relative; at one compute, absolute.

    Windows end from 300 to 30,000 compute (2 decades), so the two ways differ by far more
    than the population's spread of 0.2.
    """
    rng = np.random.default_rng(5)
    n = 40
    ends = np.exp(rng.uniform(np.log(300.0), np.log(30000.0), n))
    spread = 0.2 * rng.standard_normal(n)
    log_c = np.log(ends) - 0.7 + spread if shared == "relative" else np.log(3000.0) + spread
    log_c = np.minimum(log_c, np.log(ends) + 0.5)
    keep = log_c < np.log(ends) + 0.4
    runs = _runs(np.full(n, math.log(2.0))[keep], log_c[keep], ends[keep], seed=6)
    pop = learn_population(grid_loglik(runs.window(), GAUSS), GAUSS)
    assert pop.scale == shared
    assert pop.log_evidence[shared] > max(pop.log_evidence.values()) - 1e-12


def test_each_runs_prior_reaches_the_program():
    """``FitWindow.prior`` becomes an engine input and moves the log density; none without it."""
    import jax
    import jax.numpy as jnp

    from bayes_scalerl.engine import runtime
    from bayes_scalerl.models.scalerl import constrain, log_density
    from bayes_scalerl.models.sigmoid import SigmoidModel

    runs = _like_runs(3, seed=8)
    w = runs.window()
    assert "prior" not in padded_inputs(w)
    model = SigmoidModel(GAUSS)
    rows = np.tile([math.log(1.5), 0.2, math.log(500.0), 0.3], (3, 1))
    z = jnp.array([0.1, 0.2, -0.5, 0.3])

    def density(window):
        data = model.data({k: jnp.asarray(v) for k, v in padded_inputs(window).items()})
        one = jax.tree_util.tree_map(lambda a: a[0], data)
        return float(log_density(z, one, GAUSS))

    with runtime.x64():
        base, learnt = density(w), density(w._replace(prior=rows))
        far = density(w._replace(prior=rows + np.array([0.0, 0.0, 3.0, 0.0])))
        # with the ceiling's prior too: one far from the run's A (z's) is less likely
        data = model.data({k: jnp.asarray(v) for k, v in padded_inputs(w).items()})
        p = constrain(z, jax.tree_util.tree_map(lambda a: a[0], data), GAUSS)
        A = float(p.R0 + p.gain)
        other = A - 0.2 if A > 0.6 else A + 0.2
        near_A = density(w._replace(prior=np.hstack([rows, np.tile([A, 0.02], (3, 1))])))
        far_A = density(w._replace(prior=np.hstack([rows, np.tile([other, 0.02], (3, 1))])))
    assert np.isfinite([base, learnt, far, near_A, far_A]).all()
    assert learnt != base and far < learnt  # a median 20x away is less likely
    assert far_A < near_A - 10.0  # 10 sd away: about 50 log units


def test_a_group_counts_once_and_is_left_out_whole():
    """Two curves of one training run: each one's prior ignores both, and the pair weighs one run."""
    rng = np.random.default_rng(9)
    ll = rng.normal(0.0, 3.0, (6, 29, 41))
    loc = np.log(np.full(6, 1000.0))
    g = _grid(ll, loc)
    groups = np.array(["a", "a", "b", "c", "d", "e"])
    pop = learn_population(g, bs.Priors(), groups=groups, refine=0)  # one grid: exact
    # run 0's prior is run 1's: both come from runs 2-5 alone
    np.testing.assert_allclose(pop.rows[0], pop.rows[1], rtol=0, atol=1e-12)
    ref = learn_population(g.take([0, 2, 3, 4, 5]), bs.Priors(), refine=0)
    assert ref.scale == pop.scale  # every window ends at one compute: the two ways tie
    np.testing.assert_allclose(pop.rows[0], ref.rows[0], rtol=0, atol=1e-9)
    # a duplicated curve in a group of two weighs what the curve alone weighs
    dup = learn_population(g.take([0, 0, 2, 3, 4, 5]), bs.Priors(), groups=groups, refine=0)
    once = learn_population(g.take([0, 2, 3, 4, 5]), bs.Priors(), refine=0)
    assert dup.scale == once.scale
    np.testing.assert_allclose(dup.rows[2:], once.rows[1:], rtol=0, atol=1e-9)


def test_ceiling_priors_do_not_depend_on_the_order_of_the_groups():
    """Regression: blocks of whole groups follow the groups' sorted labels, not the runs' order.

    The cells cached for a block of runs were keyed by the block's first run and size, so a
    block of groups ``[0, 1, 4, 5, 2, 3]`` read the cells of runs ``[0, ..., 5]``: each run's
    learnt prior was computed from another run's likelihood (on the DAPO curves, a ceiling
    prior of ``Normal(0.95, 0.005)`` for a curve that ends at 0.46). Learning from the same
    runs in the groups' sorted order must give the same priors, run by run.
    """
    rng = np.random.default_rng(21)
    n = 6
    A = np.array([0.80, 0.50, 0.75, 0.45, 0.85, 0.55])
    log_B = math.log(1.5) + 0.2 * rng.standard_normal(n)
    ends = np.full(n, 1500.0)
    runs = _runs(log_B, np.log(ends / 2.0) + 0.2 * rng.standard_normal(n), ends, seed=22, A=A)
    grid = grid_loglik(runs.window(), GAUSS)
    groups = np.array(["a", "a", "c", "c", "b", "b"])  # sorted: runs 0, 1, 4, 5, 2, 3
    pop = learn_population(grid, GAUSS, groups=groups, ceiling=True, refine=0)
    order = np.array([0, 1, 4, 5, 2, 3])
    ref = learn_population(grid.take(order), GAUSS, groups=groups[order], ceiling=True, refine=0)
    np.testing.assert_allclose(pop.rows[order], ref.rows, rtol=0, atol=1e-6)
    # and every run's ceiling prior lies among the others' ceilings, not beyond them
    assert (pop.rows[:, 4] > 0.4).all() and (pop.rows[:, 4] < 0.9).all()


def test_fit_from_batch_and_its_refits(monkeypatch):
    """The fit says what it learnt; the discrepancy's leave-future-out refits learn their priors
    from their own cut windows, not the fit's."""
    from bayes_scalerl.models import population

    seen = []
    real = population.grid_loglik

    def spy(window, priors, **kw):
        seen.append(np.asarray(window.c_ref).copy())
        return real(window, priors, **kw)

    monkeypatch.setattr(population, "grid_loglik", spy)
    runs = _like_runs(4, seed=10)
    # the default priors: learnt from the batch by the independent model
    f = bs.fit(runs, chains=2, warmup=50, samples=50, progress=False)
    assert "A, B and C_mid learnt from the batch" in f.settings["noise"]
    assert f.settings["priors"]["from_batch"] == "ceiling"
    assert np.isfinite(f.dt["posterior"]["A"].values).all()
    assert len(seen) == 2
    assert seen[1].max() < seen[0].min()  # the refits' windows end earlier
    with pytest.raises(ValueError, match="independent model"):
        bs.fit(runs, priors=bs.Priors(from_batch=True), model="hierarchical", chains=2, warmup=10, samples=10)
    # a prior of A given by hand and one learnt from the batch: the user is asked to choose
    with pytest.raises(ValueError, match="A_loc=0.6 gives every run a prior of A"):
        bs.Priors(A_loc=0.6, A_scale=0.05, from_batch="ceiling")
    assert bs.Priors(A_loc=0.6, A_scale=0.05, from_batch=True).from_batch is True
    # the default resolves by model: the hierarchical model pools in its fit, a given prior
    # of A is every run's, and an explicit choice stands
    assert bs.Priors().from_batch == "auto"
    assert bs.Priors().for_model("independent").from_batch == "ceiling"
    assert bs.Priors().for_model("hierarchical").from_batch is False
    assert bs.Priors(A_loc=0.6, A_scale=0.05).for_model("independent").from_batch is False
    assert bs.Priors(from_batch=True).for_model("independent").from_batch is True
    assert bs.Priors(from_batch=False).for_model("independent").from_batch is False
    # fits saved before the learnt priors were the default read back as what they were
    assert bs.Priors.from_dict({"likelihood": "ar1", "rho": "auto"}).from_batch is False


def test_a_batch_of_one_training_run_keeps_the_fixed_priors():
    """Each run's prior is the predictive of the *other* training runs; a batch of one has
    none, so it keeps the fixed priors and the fixed priors' program (and says so); a
    batch of two learns them."""
    from bayes_scalerl.models.sigmoid import SigmoidModel
    from bayes_scalerl.posterior.fitting import batch_priors

    priors = bs.Priors(from_batch="ceiling")
    for n in (1, 2):
        runs = _like_runs(n, seed=11)
        window, model, words = batch_priors(runs, runs.window(), SigmoidModel(priors), priors)
        if n == 1:
            assert window.prior is None and "one training run" in words
            assert model == SigmoidModel(dataclasses.replace(priors, from_batch=False))
        else:
            assert window.prior.shape == (2, 6) and "learnt from the batch" in words
            assert model == SigmoidModel(priors)
    one = _like_runs(1, seed=11).table.assign(training_run="t")
    two_metrics = pd.concat([one, one.assign(run="other")])  # two curves of one training run
    window = batch_priors(bs.Runs.from_frame(two_metrics), None, SigmoidModel(priors), priors)[0]
    assert window is None  # untouched: nothing to learn from
