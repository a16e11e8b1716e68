"""AR(1) noise with a fixed correlation: the estimator, the density, sigma's refresh and a fit."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
from conftest import QUICK, refresh_exact_draws, sigma_conditional_cdf
from scipy import stats

import bayes_scalerl as bs
from bayes_scalerl.data.noise import RHO_MAX, estimate_rho, noise_correlation_arrays, variogram_ratio
from bayes_scalerl.models.least_squares import refined_residuals
from bayes_scalerl.models.residual_correlation import residual_correlation_arrays, restricted_loglik
from bayes_scalerl.models.scalerl import constrain, log_density, make_run_data, n_dim, z_index

pytestmark = pytest.mark.usefixtures("float64")


def _ar1_noise(rng, n_runs, n_points, rho, sd=0.01):
    e = rng.standard_normal((n_runs, n_points)) * sd
    for j in range(1, n_points):
        e[:, j] = rho * e[:, j - 1] + np.sqrt(1 - rho**2) * e[:, j]
    return e


def test_variogram_ratio_runs_from_1_to_2():
    assert variogram_ratio(0.0) == pytest.approx(1.0)
    assert variogram_ratio(0.999999) == pytest.approx(2.0, abs=1e-5)
    assert np.all(np.diff(variogram_ratio(np.linspace(-0.9, 0.99, 200))) > 0)
    # against the ratio computed from the AR(1) autocovariance directly
    rho = 0.6
    g = lambda k: rho ** abs(k)  # noqa: E731
    a = np.array([1.0, -2.0, 1.0])
    va = sum(a[i] * a[j] * g(i - j) for i in range(3) for j in range(3))
    vb = sum(a[i] * a[j] * g(2 * (i - j)) for i in range(3) for j in range(3))
    assert variogram_ratio(rho) == pytest.approx(vb / va)


@pytest.mark.parametrize("rho", [0.0, 0.3, 0.6])
def test_estimator_recovers_the_correlation(rho):
    rng = np.random.default_rng(11)
    y = 0.3 + _ar1_noise(rng, 400, 40, rho)
    est = noise_correlation_arrays(y, np.ones_like(y, bool))
    # measured over 100 seeds with 40 runs x 40 points, the sd was 0.03, 0.06 and 0.10 at
    # rho = 0, 0.3, 0.6; with 400 runs about a third of that. 0.1 is over three sds.
    assert est == pytest.approx(rho, abs=0.1)


def test_a_bending_curve_reads_as_more_correlation_not_less():
    # the curve's curvature adds to the lag-2 differences 16 times as much as to lag 1
    rng = np.random.default_rng(12)
    c = np.linspace(500.0, 20000.0, 40)
    noise = _ar1_noise(rng, 400, 40, 0.3)
    flat = noise_correlation_arrays(0.3 + noise, np.ones_like(noise, bool))
    bent = noise_correlation_arrays(
        bs.scalerl_curve(c, 0.6, 2.0, 6000.0, 0.2) + noise, np.ones_like(noise, bool)
    )
    assert bent > flat


def test_estimator_uses_only_masked_points_and_long_enough_runs():
    rng = np.random.default_rng(2)
    y = 0.3 + _ar1_noise(rng, 30, 30, 0.7)
    mask = np.ones_like(y, bool)
    full = noise_correlation_arrays(y, mask)
    # a run whose masked points were wild would move the estimate if it counted
    y_bad = np.vstack([y, rng.uniform(0, 1, (1, 30))])
    mask_bad = np.vstack([mask, np.r_[np.ones(5, bool), np.zeros(25, bool)][None]])  # 5 < 6 points
    assert noise_correlation_arrays(y_bad, mask_bad) == full
    assert noise_correlation_arrays(y[:, :5], mask[:, :5]) == 0.0  # nothing long enough
    assert 0.0 <= noise_correlation_arrays(-y, mask) <= RHO_MAX


def _sigmoid_runs(rng, n_runs, n_points, rho, *, sd=0.01, budget=8000.0):
    """Sigmoids (C_mid in the window or beyond) plus AR(1) noise: compute, reward, R0."""
    c = np.tile(np.linspace(0.0, budget, n_points + 1), (n_runs, 1))
    A = rng.uniform(0.5, 0.7, (n_runs, 1))
    C_mid = budget * np.exp(rng.uniform(-1.0, 0.5, (n_runs, 1)))
    B = rng.uniform(1.2, 3.0, (n_runs, 1))
    mu = bs.scalerl_curve(c, A, B, C_mid, 0.3)
    y = mu + np.c_[np.zeros(n_runs), _ar1_noise(rng, n_runs, n_points, rho, sd)]
    return c, y, np.full(n_runs, 0.3)


def pd_frame(c: np.ndarray, y: np.ndarray):
    """Runs ``r0, r1, ...`` of the rows of ``c`` and ``y`` as a long table."""
    import pandas as pd

    runs = np.repeat([f"r{i}" for i in range(c.shape[0])], c.shape[1])
    return pd.DataFrame({"run": runs, "compute": c.ravel(), "reward": y.ravel()})


def test_restricted_likelihood_against_dense_matrices():
    """The cross-product form against the AR(1) correlation matrix written out."""
    rng = np.random.default_rng(5)
    c, y, R0 = _sigmoid_runs(rng, 4, 25, 0.5)
    mask = np.ones_like(c, bool)
    mask[2, 15:] = False  # a shorter run
    _, resid, jac, used = refined_residuals(c, y, mask, R0, min_points=6, max_runs=10)
    grid = np.array([0.0, 0.4, 0.8])
    ll, ok = restricted_loglik(resid, jac, used, grid)
    assert ok.all()
    for k in range(4):
        n = used[k].sum()
        i = np.arange(n)
        for g, rho in enumerate(grid):
            L = np.linalg.cholesky(rho ** np.abs(i[:, None] - i[None, :]))
            w, jw = np.linalg.solve(L, resid[k, :n]), np.linalg.solve(L, jac[k, :n])
            q, r = np.linalg.qr(jw)
            e = w - q @ (q.T @ w)
            expect = -0.5 * (
                (n - 3) * np.log(e @ e / (n - 3))
                + 2 * np.sum(np.log(np.diag(L)))
                + 2 * np.sum(np.log(np.abs(np.diag(r))))
            )
            assert ll[g, k] == pytest.approx(expect, rel=1e-9, abs=1e-9)


@pytest.mark.parametrize("rho", [0.0, 0.3, 0.65])
def test_residual_estimate_recovers_the_correlation_around_a_fitted_sigmoid(rho):
    """The restricted likelihood takes out the fit's pull towards 0, on short windows too."""
    rng = np.random.default_rng(21)
    for n_points, tol in ((40, 0.06), (12, 0.12)):
        c, y, R0 = _sigmoid_runs(rng, 200, n_points, rho)
        est = residual_correlation_arrays(c, y, np.ones_like(c, bool), R0)
        # measured over 20 seeds of 200 runs at rho = 0, 0.3, 0.65: sd at most 0.013 (40 points)
        # and 0.040 (12 points), mean within 0.017 of rho; the tolerances are three sds or more
        assert est == pytest.approx(rho, abs=tol), (n_points, est)


def test_residual_estimate_is_not_pulled_up_by_a_power_laws_curvature():
    """The variogram's known failure: a saturating power law with AR(1) noise of 0.65."""
    rng = np.random.default_rng(8)
    n_runs, n_points = 100, 100
    c = np.tile(np.linspace(0.0, 8000.0, n_points + 1), (n_runs, 1))
    alpha = rng.uniform(0.3, 1.0, (n_runs, 1))
    C0 = 8000.0 * rng.uniform(0.005, 0.05, (n_runs, 1))
    noise = np.c_[np.zeros(n_runs), _ar1_noise(rng, n_runs, n_points, 0.65)]
    y = 0.7 - 0.4 * (1.0 + c / C0) ** -alpha + noise
    mask = np.ones_like(c, bool)
    est = estimate_rho(c, y, mask, y[:, 0], "reml")
    # over 10 seeds: 0.655 (sd 0.009), where the variogram read its cap 0.90 at every seed
    assert est == pytest.approx(0.65, abs=0.05)
    assert estimate_rho(c, y, mask, y[:, 0]) == noise_correlation_arrays(y, mask)  # "auto"
    assert bs.noise_correlation(pd_frame(c, y), method="reml") == est
    with pytest.raises(ValueError, match="one of"):
        estimate_rho(c, y, mask, y[:, 0], "moments")


def test_residual_estimate_leaves_out_flat_and_short_runs():
    rng = np.random.default_rng(3)
    c, y, R0 = _sigmoid_runs(rng, 30, 30, 0.5)
    mask = np.ones_like(c, bool)
    full = residual_correlation_arrays(c, y, mask, R0)
    # a run with 5 fitted points (under MIN_POINTS = 6) does not count, however wild
    c2 = np.vstack([c, c[:1]])
    y2 = np.vstack([y, rng.uniform(0, 1, (1, c.shape[1]))])
    m2 = np.vstack([mask, np.r_[np.ones(6, bool), np.zeros(c.shape[1] - 6, bool)][None]])  # step 0 + 5
    assert residual_correlation_arrays(c2, y2, m2, np.r_[R0, 0.3]) == full
    assert residual_correlation_arrays(c[:, :6], y[:, :6], mask[:, :6], R0) == 0.0  # nothing long enough
    # runs with no rise to fit (a singular Jacobian) are left out: nothing remains
    assert residual_correlation_arrays(c, 0.3 + 0 * y, mask, R0) == 0.0


def test_priors_validate_rho():
    with pytest.raises(ValueError, match="needs likelihood='ar1'"):
        bs.Priors(likelihood="gaussian", rho=0.5)
    with pytest.raises(ValueError, match=r"\(-1, 1\)"):
        bs.Priors(likelihood="ar1", rho=1.0)
    with pytest.raises(ValueError, match="'auto', 'reml', None or a number"):
        bs.Priors(likelihood="ar1", rho="high")
    assert bs.Priors(rho="reml").rho == "reml" and not bs.Priors(rho="reml").rho_sampled
    p = bs.Priors(likelihood="ar1", rho=0.5)
    assert not p.rho_sampled and bs.Priors(likelihood="ar1", rho=None).rho_sampled
    # the default: AR(1) at the batch's estimate; other likelihoods ignore "auto" and None
    default = bs.Priors()
    assert (default.likelihood, default.rho, default.rho_sampled) == ("ar1", "auto", False)
    for rho in ("auto", None):
        assert not bs.Priors(likelihood="gaussian", rho=rho).rho_sampled
    assert "rho" not in z_index(p) and n_dim(p) == 4


def test_priors_round_trip_and_older_saves_read_as_they_were_meant():
    for p in (
        bs.Priors(),
        bs.Priors(likelihood="gaussian"),
        bs.Priors(rho=0.4),
        bs.Priors(rho=None),
        bs.Priors(rho="reml"),
    ):
        assert bs.Priors.from_dict(p.to_dict()) == p
    # saved before the AR(1) default: no likelihood meant Gaussian, an ar1 without rho sampled it
    assert bs.Priors.from_dict({"B_median": 2.5}).likelihood == "gaussian"
    assert bs.Priors.from_dict({"likelihood": "ar1"}).rho_sampled
    assert bs.Priors.from_dict({"likelihood": "gaussian", "unknown_key": 1}) == bs.Priors(
        likelihood="gaussian", shape_noise=None, from_batch=False
    )
    # saved before smooth departures: without them
    assert bs.Priors.from_dict({"likelihood": "ar1", "rho": 0.3}).shape_noise is None


def test_fixed_rho_density_is_the_sampled_one_at_that_value():
    C = np.linspace(1000.0, 8000.0, 15)
    y = 0.25 + 0.35 / (1 + (3000.0 / C) ** 1.8) + 0.01 * np.random.default_rng(0).standard_normal(C.size)
    fixed, free = bs.Priors(likelihood="ar1", rho=0.6), bs.Priors(likelihood="ar1", rho=None)
    d_fixed = make_run_data(C, y, np.ones(C.size, bool), 0.25, 8000.0, fixed, rho=0.6)
    d_free = make_run_data(C, y, np.ones(C.size, bool), 0.25, 8000.0, free)
    u = np.arctanh(0.6)
    prior_u = -0.5 * (u / free.rho_scale) ** 2  # the sampled rho's prior term, a constant here
    for z in ([0.1, -0.3, 0.2, 0.4], [0.5, 0.2, -0.4, -1.0]):
        zf = jnp.asarray(z)
        got = float(log_density(zf, d_fixed, fixed))
        want = float(log_density(jnp.append(zf, u), d_free, free)) - prior_u
        assert got == pytest.approx(want, rel=1e-12)
        assert float(constrain(zf, d_fixed, fixed).rho) == pytest.approx(0.6)
    # without a rho of the data: the priors' number, or with "auto" ("reml") the variogram's
    # (the residuals') estimate from these points
    m = np.ones(C.size, bool)
    assert float(make_run_data(C, y, m, 0.25, 8000.0, fixed).rho) == 0.6
    auto = make_run_data(C, y, m, 0.25, 8000.0, bs.Priors())
    assert float(auto.rho) == noise_correlation_arrays(y[None], m[None])
    reml = make_run_data(C, y, m, 0.25, 8000.0, bs.Priors(rho="reml"))
    assert float(reml.rho) == residual_correlation_arrays(C[None], y[None], m[None], np.array([0.25]))


def test_sigma_refresh_leaves_the_whitened_conditional_invariant():
    # as test_model's test for independent noise, with the AR(1) likelihood at rho = 0.6
    priors = bs.Priors(likelihood="ar1", rho=0.6, sigma_scale=0.08)
    c = np.linspace(1500, 16000, 30)
    y = 0.2 + 0.4 / (1 + (8000 / c) ** 1.5) + _ar1_noise(np.random.default_rng(0), 1, 30, 0.6, 0.015)[0]
    d = make_run_data(c, y, np.ones(30, bool), 0.2, 16000.0, priors, rho=0.6)
    z = jnp.array([0.1, -0.3, 0.0, 0.2])
    p = constrain(z, d, priors)
    e = y - 0.2 - float(p.gain) / (1 + (float(p.C_mid) / c) ** float(p.B))
    w = np.r_[e[0], (e[1:] - 0.6 * e[:-1]) / np.sqrt(1 - 0.36)]
    grid, cdf = sigma_conditional_cdf(len(c), np.sum(w**2), priors.sigma_scale)
    start, new = refresh_exact_draws(z, d, priors, grid, cdf)
    assert np.mean(new != start) > 0.5  # it moves
    # KS test at a fixed seed; p > 0.001 fails with probability 0.1% for a correct step
    assert stats.kstest(new, lambda x: np.interp(x, grid, cdf)).pvalue > 1e-3
    # the unwhitened residuals give another conditional, which the same test tells apart
    _, cdf_iid = sigma_conditional_cdf(len(c), np.sum(e**2), priors.sigma_scale)
    assert stats.kstest(new, lambda x: np.interp(x, grid, cdf_iid)).pvalue < 1e-3


def test_fit_with_rho_auto_records_the_estimate_and_predicts():
    rng = np.random.default_rng(3)
    truth = bs.random_truth(rng, 4, C_mid=(1500.0, 4000.0))
    df = bs.simulate_runs(truth, np.arange(0, 16001, 400.0), rng, ar1=0.7)
    runs = bs.Runs.from_frame(df)
    res = bs.fit(runs, priors=bs.Priors(likelihood="ar1", rho="auto"), fit_until=8000, seed=0, **QUICK)
    rho = res.settings["priors"]["rho"]
    window = runs.window(fit_until=8000)
    assert rho == noise_correlation_arrays(window.reward, window.mask)  # the fitted points' estimate
    assert rho == bs.noise_correlation(runs, fit_until=8000)
    assert 0.3 < rho <= RHO_MAX  # 4 runs x 19 points of rho = 0.7 noise
    assert "rho" not in res.var_names and "rho" not in res.dt["posterior"].data_vars
    assert res.settings["noise"].startswith(
        f"AR(1), rho {rho:.3f} for every run, estimated from the data; "
        "no smooth departures from the sigmoid found in the data; "
        "priors of A, B and C_mid learnt from the batch"  # the default's priors
    )
    d = res.diagnostics()  # diagnostics.csv says which noise model each run got
    assert (d["likelihood"] == "ar1").all() and (d["rho"] == rho).all()
    obs = res.predict_draws([8400.0, 16000.0], kind="observation")
    assert np.isfinite(obs).all()
    loglik = res.log_likelihood()["reward"].values
    assert np.isfinite(loglik[..., res.dt["constant_data"]["in_fit"].values]).all()
    with pytest.raises(ValueError, match="hierarchical model has"):
        bs.fit(
            runs.table.assign(recipe=runs.table["run"].str[-1]),
            model="hierarchical",
            priors=bs.Priors(likelihood="ar1", rho=None),
        )


def test_fits_with_other_fixed_rhos_reuse_one_program(keep_programs):
    from bayes_scalerl import engine

    rng = np.random.default_rng(4)
    truth = bs.random_truth(rng, 3, C_mid=(1500.0, 4000.0))
    df = bs.simulate_runs(truth, np.arange(0, 8001, 400.0), rng, ar1=0.5)
    # without the second attempt, which would add its own program when only one of the fits retries
    kw = {**QUICK, "discrepancy": False, "seed": 0, "retry": False}
    first = bs.fit(df, priors=bs.Priors(likelihood="ar1", rho=0.3), **kw)
    before = engine.trace_count()
    second = bs.fit(df, priors=bs.Priors(likelihood="ar1", rho=0.6), **kw)
    assert engine.trace_count() == before  # rho is data of the program, not part of it
    assert first.settings["priors"]["rho"] == 0.3 and second.settings["priors"]["rho"] == 0.6
    # and it is used: a stronger correlation leaves less evidence, so a wider posterior of A
    assert np.std(second.draws("A")) > np.std(first.draws("A"))
