"""Noise models: closed forms against brute force, and small fits of each."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
from conftest import QUICK
from scipy import integrate, stats

import bayes_scalerl as bs
from bayes_scalerl.models.scalerl import (
    binomial_variance,
    constrain,
    gain_conditional,
    log_density,
    make_run_data,
    n_dim,
    z_index,
)
from bayes_scalerl.models.shape_noise import ar1_lags

#: These tests call the model's JAX internals directly: run them in float64 (see conftest).
pytestmark = pytest.mark.usefixtures("float64")

C = np.linspace(1000.0, 8000.0, 15)


def _data(priors, n_eval=None, seed=0):
    rng = np.random.default_rng(seed)
    y = 0.25 + 0.35 / (1 + (3000.0 / C) ** 1.8) + 0.01 * rng.standard_normal(C.size)
    return make_run_data(C, y, np.ones(C.size, bool), 0.25, 8000.0, priors, n_eval), y


def _brute_log_norm(y, s, R0, cov, upper):
    """log of the integral over g in (0, upper) of N(y | R0 + g s, cov) / upper."""
    logs = lambda g: stats.multivariate_normal(R0 + g * s, cov).logpdf(y)  # noqa: E731
    shift = max(logs(g) for g in np.linspace(0, upper, 2001))
    val, _ = integrate.quad(lambda g: np.exp(logs(g) - shift), 0, upper, points=[0.3], limit=200)
    return np.log(val) + shift - np.log(upper)


@pytest.mark.parametrize("rho", [0.0, 0.6, -0.4])
def test_ar1_marginal_likelihood_equals_quadrature_with_the_full_covariance(rho):
    pri = bs.Priors(likelihood="ar1", rho=None)
    d, y = _data(pri)
    lB, lC, sigma, R0 = np.log(1.8), np.log(3000.0), 0.012, 0.25
    got = gain_conditional(lB, lC, sigma, jnp.asarray(R0), d, pri, rho=jnp.asarray(rho))
    s = 1 / (1 + np.exp(-1.8 * (np.log(C) - lC)))
    i = np.arange(C.size)
    cov = sigma**2 * rho ** np.abs(i[:, None] - i[None, :])
    want = _brute_log_norm(y, s, R0, cov, 1 - R0)
    assert float(got.log_norm) == pytest.approx(want, rel=1e-7, abs=1e-7)


def test_ar1_lags_count_median_spacings():
    c = np.array([[0.0, 100.0, 200.0, 300.0, 500.0, 900.0, 1000.0]])
    m = np.array([[True, True, True, True, True, True, False]])
    # fitted gaps beyond compute 0: 100, 100, 200, 400 (median 150): 0.67 -> 1, 1, 1.33 -> 1, 2.67 -> 3
    np.testing.assert_array_equal(ar1_lags(c, m), [[1, 1, 1, 1, 1, 3, 1]])
    # evenly spaced steps, whatever the wall-clock jitter, have every lag 1: no lags at all
    even = np.linspace(100.0, 1500.0, 15)[None] + 20.0 * np.random.default_rng(0).uniform(-1, 1, 15)
    assert ar1_lags(even, np.ones_like(even, bool)) is None
    # evaluations every 50 steps whose steps grow 4x dearer: uneven in compute, lag 1 in steps
    steps = np.arange(1.0, 16.0) * 50
    dear = np.cumsum(np.linspace(1.0, 4.0, 15)) * 10
    assert ar1_lags(dear[None], np.ones((1, 15), bool)) is not None
    assert ar1_lags(dear[None], np.ones((1, 15), bool), steps[None]) is None
    # a skipped evaluation is a lag of 2 in steps; a run with a missing step counts in compute
    gap = np.delete(steps, 7)
    both = np.stack([gap, gap])
    with_nan = both.copy()
    with_nan[1, 3] = np.nan
    lags = ar1_lags(np.stack([np.delete(dear, 7)] * 2), np.ones((2, 14), bool), with_nan)
    assert lags[0].tolist() == [1.0] * 7 + [2.0] + [1.0] * 6
    assert lags[1].tolist() == ar1_lags(np.delete(dear, 7)[None], np.ones((1, 14), bool))[0].tolist()


@pytest.mark.parametrize("rho", [0.6, -0.4])
def test_ar1_on_uneven_spacing_is_the_grid_process_seen_at_the_points(rho):
    # points evenly spaced in log compute: the AR(1) runs on the grid of the median spacing,
    # a gap of k spacings is k of its steps, so the covariance is rho ** (grid distance)
    pri = bs.Priors(likelihood="ar1", rho=None)
    c = np.geomspace(1000.0, 8000.0, 15)
    rng = np.random.default_rng(0)
    y = 0.25 + 0.35 / (1 + (3000.0 / c) ** 1.8) + 0.01 * rng.standard_normal(c.size)
    lag = ar1_lags(c, np.ones(c.size, bool))
    d = make_run_data(c, y, np.ones(c.size, bool), 0.25, 8000.0, pri, ar_lag=lag)
    assert lag[0] == 1 and set(lag[1:]) == {1.0, 2.0, 3.0}  # the spacing grows along the run
    lB, lC, sigma, R0 = np.log(1.8), np.log(3000.0), 0.012, 0.25
    got = gain_conditional(lB, lC, sigma, jnp.asarray(R0), d, pri, rho=jnp.asarray(rho))
    s = 1 / (1 + np.exp(-1.8 * (np.log(c) - lC)))
    t = np.cumsum(lag) - lag[0]
    cov = sigma**2 * rho ** np.abs(t[:, None] - t[None, :])
    want = _brute_log_norm(y, s, R0, cov, 1 - R0)
    assert float(got.log_norm) == pytest.approx(want, rel=1e-7, abs=1e-7)


def test_binomial_marginal_likelihood_equals_quadrature_with_per_point_variances():
    n = np.full(C.size, 300.0)
    pri = bs.Priors(likelihood="binomial")
    d, y = _data(pri, n_eval=n)
    lB, lC, sigma, R0 = np.log(1.8), np.log(3000.0), 0.004, 0.25
    got = gain_conditional(lB, lC, sigma, jnp.asarray(R0), d, pri)
    s = 1 / (1 + np.exp(-1.8 * (np.log(C) - lC)))
    cov = np.diag(sigma**2 + binomial_variance(y, n))
    assert float(got.log_norm) == pytest.approx(_brute_log_norm(y, s, R0, cov, 1 - R0), rel=1e-7, abs=1e-7)
    # the binomial term: p(1 - p)/n with p shrunk towards 1/2
    np.testing.assert_allclose(binomial_variance(0.0, 10.0), (0.5 / 11) * (1 - 0.5 / 11) / 10)


def test_student_t_is_a_scale_mixture_with_gamma_precisions():
    pri = bs.Priors(likelihood="student_t", nu=3.0)
    assert z_index(pri) == {"lam": 4} and n_dim(pri, 15) == 19
    d, y = _data(pri)
    # given the latent precisions the gain integral is Gaussian with variances sigma^2 / lambda
    lam = np.random.default_rng(1).gamma(1.5, 1 / 1.5, C.size)
    lB, lC, sigma, R0 = np.log(1.8), np.log(3000.0), 0.012, 0.25
    got = gain_conditional(lB, lC, sigma, jnp.asarray(R0), d, pri, precision=jnp.asarray(lam))
    s = 1 / (1 + np.exp(-1.8 * (np.log(C) - lC)))
    want = _brute_log_norm(y, s, R0, np.diag(sigma**2 / lam), 1 - R0)
    assert float(got.log_norm) == pytest.approx(want, rel=1e-7, abs=1e-7)
    # the latent precisions' prior: Gamma(nu/2, rate nu/2) in log coordinates (Jacobian lambda)
    u = np.random.default_rng(2).normal(size=C.size)
    z1 = jnp.concatenate([jnp.array([0.1, -0.3, 0.2, 0.4]), jnp.asarray(u)])
    z2 = z1.at[4].set(0.0)
    p = constrain(z1, d, pri)
    s = 1 / (1 + np.exp(-float(p.B) * (np.log(C) - float(p.log_C_mid))))

    def direct(uu):
        # the joint density of y and the sampled gain given the precisions, term by term
        la = np.exp(uu)
        mean = float(p.R0) + float(p.gain) * s
        lik = stats.norm.logpdf(y, mean, float(p.sigma) / np.sqrt(la)).sum()
        prior = stats.gamma.logpdf(la, 1.5, scale=1 / 1.5) + uu
        return lik + prior.sum()

    got = float(log_density(z1, d, pri) - log_density(z2, d, pri))
    u2 = u.copy()
    u2[0] = 0.0
    assert got == pytest.approx(direct(u) - direct(u2), rel=1e-9)


def test_unknown_likelihood_is_refused():
    with pytest.raises(ValueError, match="likelihood"):
        bs.Priors(likelihood="laplace")


def test_binomial_without_n_eval_names_the_column():
    df = bs.demo_runs().query("recipe == 'ScaleRL'")
    with pytest.raises(bs.DataError, match="'n_eval'"):
        bs.fit(df, priors=bs.Priors(likelihood="binomial"), **QUICK)


@pytest.fixture(scope="module")
def ar1_fit():
    rng = np.random.default_rng(3)
    truth = bs.random_truth(rng, 6, C_mid=(1500.0, 4000.0))
    df = bs.simulate_runs(truth, np.arange(0, 16001, 400.0), rng, ar1=0.7)
    return bs.fit(
        df,
        min_compute=1000,
        priors=bs.Priors(likelihood="ar1", rho=None),
        seed=0,
        log_likelihood=True,
        **QUICK,
    )


def test_ar1_fit_recovers_the_correlation(ar1_fit):
    assert ar1_fit.dt["posterior"]["rho"].dims == ("chain", "draw", "run")
    rho = np.median(ar1_fit.draws("rho"), axis=1)
    np.testing.assert_allclose(ar1_fit.diagnostics()["rho"], rho)  # each run's own, in diagnostics.csv
    # 6 runs x 37 points each: the posterior sd of rho is about 0.1 per run; the mean of six about 0.05
    assert abs(rho.mean() - 0.7) < 0.15
    ll = ar1_fit.dt["log_likelihood"]["reward"].values
    fitted = ar1_fit.dt["constant_data"]["in_fit"].values
    assert np.isfinite(ll[..., fitted]).all() and np.isnan(ll[..., ~fitted]).all()
    # computed on demand from the draws and the data: the stored values, exactly
    bare = bs.FitResult(ar1_fit.dt.drop_nodes("log_likelihood"))
    np.testing.assert_array_equal(bare.log_likelihood()["reward"].values, ll)
    assert "rho" in ar1_fit.var_names and "rho" in set(ar1_fit.summary().param)


def test_each_likelihood_fits_and_predicts():
    rng = np.random.default_rng(5)
    truth = bs.random_truth(rng, 3, C_mid=(1500.0, 3000.0))
    df = bs.simulate_runs(truth, np.arange(0, 8001, 400.0), rng).assign(n_eval=400)
    for lik in ("student_t", "binomial"):
        res = bs.fit(df, priors=bs.Priors(likelihood=lik), seed=1, **QUICK)
        assert res.settings["priors"]["likelihood"] == lik
        d = res.diagnostics()
        assert (d["likelihood"] == lik).all() and d["rho"].isna().all()
        err = np.median(res.draws("A"), axis=1) - truth["A"].to_numpy()
        assert np.all(np.abs(err) < 0.05), (lik, err)  # C_mid well inside the data: A is pinned down
        obs = res.predict_draws([16000.0], kind="observation")
        cur = res.predict_draws([16000.0], kind="curve")
        assert obs.std() > cur.std()  # a new evaluation carries noise on top of the curve
