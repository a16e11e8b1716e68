"""The calibrated discrepancy: its scales are recovered from leave-future-out errors, its
draws have the stated spread, and a fit with it keeps the sigmoid's own posterior."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

import bayes_scalerl as bs
from bayes_scalerl.models.discrepancy import (
    SCALE_GRID,
    Discrepancy,
    discrepancy_shape,
    draw_offsets,
    mix_scales,
    prior_pseudo_runs,
    run_likelihoods,
    scale_posteriors,
    scale_summary,
)
from tests.conftest import QUICK

SETTINGS = Discrepancy()


def _errors(rng, n_runs, omega, tau, points=12, v=1e-4):
    """Leave-future-out errors of runs whose deviations have sds omega and tau (one draw per run)."""
    h = np.tile(np.linspace(0.05, math.log(2.0), points), n_runs)
    run = np.repeat(np.arange(n_runs), points)
    s = SETTINGS.horizon * discrepancy_shape(h, SETTINGS.horizon)
    level = omega * rng.standard_normal(n_runs)[run]
    slope = tau * rng.standard_normal(n_runs)[run]
    var = np.full(h.size, v)
    err = level + slope * s + math.sqrt(v) * rng.standard_normal(h.size)
    return err, var, s**2, run


@pytest.mark.parametrize("omega, tau", [(0.0, 0.03), (0.01, 0.0), (0.01, 0.02)])
def test_batch_scales_are_recovered(omega, tau):
    """400 runs: the batch's root mean square scales land near the truth.

    Each run carries one draw of each deviation, so the batch's mean square estimates the
    truth with a relative sd of about sqrt(2 / 400) = 7% (in the square); the tolerance of
    0.006 on each scale (0.3-0.6 of the true values) is several such sds plus the grid's
    spacing (ratios of 1.3 between neighbouring values). The wide prior's share is set to
    0.002 (about one pseudo-run in 400 runs): the default's 0.02 adds its own tail to the root
    mean square (the prior's is 0.067) by design, which
    ``test_the_prior_keeps_its_share_whatever_the_batch_size`` checks.
    """
    rng = np.random.default_rng(11)
    err, var, s2, run = _errors(rng, 400, omega, tau)
    post, own = scale_posteriors(err, var, s2, run, 400, Discrepancy(prior_share=0.002))
    assert own.all() and np.allclose(post.sum(axis=(1, 2)), 1.0)
    w_rms, t_rms = (np.sqrt(np.mean(x**2)) for x in scale_summary(post))
    print(f"omega {w_rms:.4f} (true {omega}), tau {t_rms:.4f} (true {tau})")
    assert abs(w_rms - omega) < 0.006 and abs(t_rms - tau) < 0.006


def test_no_deviation_gives_small_scales_and_short_runs_take_the_batch():
    """Runs without departures: each run's root mean square scales are small (the wide
    prior's share of 0.02 leaves a tail that adds about 0.007 to ``tau``'s and 0.004 to
    ``omega``'s; measured 0.0077 and 0.0042, against 0.031 for runs whose slope has sd
    0.03), and a run without points takes the batch's distribution. Deterministic."""
    rng = np.random.default_rng(12)
    err, var, s2, run = _errors(rng, 200, 0.0, 0.0)
    post, own = scale_posteriors(err, var, s2, run, 201, SETTINGS)  # run 200 has no points
    omega, tau = scale_summary(post)
    assert not own[200] and own[:200].all()
    assert np.median(tau[:200]) < 0.01 and np.median(omega[:200]) < 0.006
    # a run without points of its own takes the batch's distribution
    np.testing.assert_allclose(post[200], post[own].mean(axis=0), atol=0.05)


def test_batch_scales_are_the_mean_of_the_runs_own_posteriors():
    """``per_run=False`` gives every run the batch's distribution: at EM's fixed point the
    mean of the runs' own posteriors, up to the prior's one pseudo-run in 101 (about 1% of
    the largest cell's weight) and EM's slow last steps (it stops after 500): within 2%."""
    rng = np.random.default_rng(14)
    err, var, s2, run = _errors(rng, 100, 0.01, 0.02)
    one = Discrepancy(prior_weight=1.0)  # the prior as one pseudo-run (the default's share: about 2 here)
    own_post, _ = scale_posteriors(err, var, s2, run, 100, one)
    batch, own = scale_posteriors(err, var, s2, run, 100, replace(one, per_run=False))
    assert own.all() and np.array_equal(batch, np.broadcast_to(batch[0], batch.shape))
    assert not np.allclose(own_post[0], own_post[1])  # each run's own errors move its posterior
    np.testing.assert_allclose(batch[0], own_post.mean(axis=0), atol=0.02 * batch[0].max())


def _prior_mass_at_large_tau(n_runs, settings, seed=15):
    """The batch's distribution's mass at ``tau >= 0.05`` when no run shows a departure."""
    rng = np.random.default_rng(seed)
    err, var, s2, run = _errors(rng, n_runs, 0.0, 0.0)
    batch, _ = scale_posteriors(err, var, s2, run, n_runs, replace(settings, per_run=False))
    return batch[0][:, SCALE_GRID >= 0.05].sum()


def test_the_prior_keeps_its_share_whatever_the_batch_size():
    """No run's errors show a departure, so the batch's mass at large slopes is mostly the
    wide prior's: under ``prior_share`` the same for 6 runs as for 60 (at least the share
    0.02 of the prior's mass there, 0.196, and measured 0.0066 for both: a run's errors
    count as one point's worth of evidence and do not rule large slopes out), under
    pseudo-runs (``prior_weight=1``) about ten times smaller for ten times the runs
    (measured 8.5). Deterministic (fixed seeds): the tolerances are for EM's stopping rule."""
    small = _prior_mass_at_large_tau(6, SETTINGS)
    large = _prior_mass_at_large_tau(60, SETTINGS)
    print(f"share: {small:.5f} (6 runs), {large:.5f} (60 runs)")
    assert small > 0.02 * 0.196 and large > 0.02 * 0.196 and abs(small - large) < 0.1 * small
    count = Discrepancy(prior_weight=1.0)
    small, large = _prior_mass_at_large_tau(6, count), _prior_mass_at_large_tau(60, count)
    print(f"one pseudo-run: {small:.5f} (6 runs), {large:.5f} (60 runs)")
    assert 7.0 < small / large < 11.0


def test_prior_share_is_that_many_pseudo_runs():
    """``prior_share=e`` is ``prior_weight = e n / (1 - e)`` pseudo-runs for ``n`` runs with
    points, to rounding; runs without points do not count."""
    rng = np.random.default_rng(16)
    err, var, s2, run = _errors(rng, 30, 0.01, 0.02)
    share, _ = scale_posteriors(err, var, s2, run, 31, Discrepancy(prior_share=0.05))
    count, _ = scale_posteriors(err, var, s2, run, 31, Discrepancy(prior_weight=0.05 * 30 / 0.95))
    np.testing.assert_allclose(share, count, atol=1e-12)
    assert not np.allclose(share, scale_posteriors(err, var, s2, run, 31, SETTINGS)[0], atol=1e-4)


def test_the_verdict_reads_at_least_one_pseudo_run():
    """Six runs that show no departure: the distribution ``identify``'s verdict reads
    (one pseudo-run of the wide prior, a seventh of it) keeps at least a seventh of the
    prior's mass at large slopes (0.196 / 7 = 0.028), several times the band's share
    (0.0066, test above); in 60 runs the band's share is already 1.22 pseudo-runs, and
    the verdict reads the band's. Deterministic (fixed seeds)."""
    rng = np.random.default_rng(15)
    err, var, s2, run = _errors(rng, 6, 0.0, 0.0)
    batch = replace(SETTINGS, per_run=False)
    like, own = run_likelihoods(err, var, s2, run, 6, batch)
    band = mix_scales(like, own, batch)
    np.testing.assert_allclose(band, scale_posteriors(err, var, s2, run, 6, batch)[0])
    verdict = mix_scales(like, own, batch, SETTINGS.verdict_weight)
    large = SCALE_GRID >= 0.05
    v, b = verdict[0][:, large].sum(), band[0][:, large].sum()
    print(f"mass at tau >= 0.05: verdict {v:.4f}, band {b:.4f}")
    assert v > 0.196 / 7 and v > 3 * b
    assert prior_pseudo_runs(SETTINGS, 6) < SETTINGS.verdict_weight < prior_pseudo_runs(SETTINGS, 60)
    assert prior_pseudo_runs(Discrepancy(prior_weight=0.3), 60) == 0.3
    with pytest.raises(ValueError, match="verdict_weight"):
        Discrepancy(verdict_weight=-1.0)


def test_a_batch_without_points_takes_the_prior():
    """No run long enough for a refit: every run draws from the wide prior (no EM to run)."""
    empty = np.zeros(0)
    post, own = scale_posteriors(empty, empty, empty, np.zeros(0, int), 3, SETTINGS)
    assert not own.any() and np.isfinite(post).all()
    np.testing.assert_allclose(post[0], post[2])
    np.testing.assert_allclose(post.sum(axis=(1, 2)), 1.0)


def test_offsets_have_the_stated_spread():
    """Draws of Delta_0 and Delta: sds omega and horizon * tau, within 4% (20,000 draws: 0.5% sd)."""
    k = SCALE_GRID.size
    post = np.zeros((1, k, k))
    i, j = 10, 20
    post[0, i, j] = 1.0
    level, dev = draw_offsets(np.random.default_rng(0), post, (1, 4, 5000), SETTINGS.horizon)
    assert level.shape == dev.shape == (1, 4, 5000)
    np.testing.assert_allclose(level.std(), SCALE_GRID[i], rtol=0.04)
    np.testing.assert_allclose(dev.std(), SETTINGS.horizon * SCALE_GRID[j], rtol=0.04)


def test_shape_is_zero_inside_the_data_and_levels_off():
    h = np.array([-1.0, 0.0, 1e-6, 1.0, 50.0])
    s = discrepancy_shape(h, 2.0)
    assert s[0] == s[1] == 0.0 and 0 < s[2] < 1e-6 and s[-1] == pytest.approx(1.0)


def test_weights_default_to_each_runs_mean_and_split_a_run_between_its_refits():
    """Explicit weights 1 / count give the default; a run's points duplicated as a second
    refit, each copy weighted half, give the same posterior too."""
    rng = np.random.default_rng(13)
    err, var, s2, run = _errors(rng, 50, 0.01, 0.02, points=6)
    counts = np.bincount(run)
    base, _ = scale_posteriors(err, var, s2, run, 50, SETTINGS)
    same, _ = scale_posteriors(err, var, s2, run, 50, SETTINGS, 1.0 / counts[run])
    np.testing.assert_allclose(same, base, rtol=1e-9, atol=1e-15)
    two = [np.concatenate([x, x]) for x in (err, var, s2, run)]
    w = np.concatenate([0.5 / counts[run]] * 2)
    doubled, _ = scale_posteriors(*two, 50, SETTINGS, w)
    np.testing.assert_allclose(doubled, base, rtol=1e-9, atol=1e-15)


def test_ratio_takes_one_number_or_several():
    assert Discrepancy().ratios == (2.0,)
    d = Discrepancy(ratio=[2, 4])
    assert d.ratio == (2.0, 4.0) and d.ratios == (2.0, 4.0) and d.to_dict()["ratio"] == [2.0, 4.0]
    assert Discrepancy(ratio=(3,)).ratio == 3.0
    for bad in ((2.0, 2.0), (), (2.0, 0.5), "x"):
        with pytest.raises(ValueError, match="ratio"):
            Discrepancy(ratio=bad)


def test_two_refits_fit_and_score_every_run():
    """ratio (2, 4): one batched refit of both views; every demo run has its own scales."""
    runs = bs.Runs.from_frame(bs.demo_runs(), source="<demo>")
    res = bs.fit(runs, fit_until=8000, seed=1, discrepancy=Discrepancy(ratio=(2, 4)), **QUICK)
    cd = res.dt["constant_data"]
    assert cd["discrepancy_own"].values.all()
    assert np.isfinite(cd["discrepancy_tau"].values).all()
    assert np.isfinite(res.dt["posterior"]["delta"].values).all()


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="ratio"):
        Discrepancy(ratio=1.0)
    with pytest.raises(ValueError, match="per_run must be True or False"):
        Discrepancy(per_run="no")
    with pytest.raises(ValueError, match="pooled_refit must be True or False"):
        Discrepancy(pooled_refit=1)
    with pytest.raises(ValueError, match="horizon"):
        Discrepancy(horizon=0.0)
    for bad in (0.0, 1.0, float("nan")):
        with pytest.raises(ValueError, match="prior_share must be a number in"):
            Discrepancy(prior_share=bad)
    with pytest.raises(ValueError, match="prior_weight"):
        Discrepancy(prior_weight=0.0)


def test_fit_with_discrepancy_keeps_the_sigmoid_posterior(demo_fit):
    """A = the sigmoid's asymptote + delta; the sigmoid's draws are the exact model's, bit for bit."""
    runs = bs.Runs.from_frame(bs.demo_runs(), source="<demo>")
    plain = bs.fit(runs, min_compute=1500, fit_until=8000, seed=1, discrepancy=False, **QUICK)
    post = demo_fit.dt["posterior"]
    for name in ("B", "C_mid", "sigma"):
        np.testing.assert_array_equal(post[name].values, plain.dt["posterior"][name].values)
    np.testing.assert_allclose(
        (post["A"] - post["delta"]).values, plain.dt["posterior"]["A"].values, rtol=0, atol=1e-12
    )
    cd = demo_fit.dt["constant_data"]
    assert (cd["discrepancy_tau"].values >= 0).all() and (cd["discrepancy_omega"].values >= 0).all()
    # beyond the data the band is at least as wide as the exact sigmoid's, and the
    # discrepancy switched off gives the exact sigmoid's predictive draws
    far = [32_000.0]
    wide = demo_fit.predict_draws(far, seed=0).std(axis=1)
    np.testing.assert_allclose(
        demo_fit.predict_draws(far, seed=0, discrepancy=False), plain.predict_draws(far, seed=0), atol=1e-12
    )
    narrow = demo_fit.predict_draws(far, seed=0, discrepancy=False).std(axis=1)
    assert np.mean(wide >= narrow) > 0.8
    # the convergence diagnostics are the sampler's: the same as the exact fit's (the
    # offsets, fresh for every draw, would otherwise dilute R-hat and inflate the ESS of A)
    ours, theirs = demo_fit.summary(), plain.summary()
    np.testing.assert_allclose(ours["r_hat"], theirs["r_hat"], rtol=1e-9)
    np.testing.assert_allclose(ours["ess_bulk"], theirs["ess_bulk"], rtol=1e-9)
    cols = ["r_hat_max", "ess_bulk_min", "ess_tail_min", "divergences", "converged"]
    d1, d2 = demo_fit.diagnostics()[cols], plain.diagnostics()[cols]
    np.testing.assert_allclose(d1.to_numpy(float), d2.to_numpy(float), rtol=1e-9)


def test_offsets_draw_each_runs_grid_cell_by_its_own_inverse_cdf():
    """The one batched search picks the cell a per-run ``searchsorted`` of the same uniforms picks."""
    rng = np.random.default_rng(4)
    k = SCALE_GRID.size
    post = rng.dirichlet(np.full(k * k, 0.1), size=50).reshape(50, k, k)
    post[3] = 0.0
    post[3, 0, 0] = 1.0  # all mass on one cell: runs whose CDF is flat after it
    level, dev = draw_offsets(np.random.default_rng(9), post, (50, 4, 100), 1.0)
    gen = np.random.default_rng(9)
    u = gen.random((50, 400))
    cdf = np.cumsum(post.reshape(50, k * k), axis=1)
    cell = np.minimum(
        [np.searchsorted(cdf[i] / cdf[i, -1], u[i], side="right") for i in range(50)], k * k - 1
    )
    z = gen.standard_normal((2, 50, 400))
    np.testing.assert_array_equal(level.reshape(50, -1), SCALE_GRID[cell // k] * z[0])
    np.testing.assert_array_equal(dev.reshape(50, -1), SCALE_GRID[cell % k] * z[1])
