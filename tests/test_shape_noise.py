"""Smooth departures from the sigmoid (``Priors(shape_noise=...)``): the correlation, the
density, the estimate, the forecast and a fit."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest
from conftest import QUICK
from scipy import integrate, stats

import bayes_scalerl as bs
from bayes_scalerl.engine import padded_inputs
from bayes_scalerl.models.scalerl import ar1_whiten, gain_conditional, make_run_data
from bayes_scalerl.models.shape_noise import (
    apply_whitening,
    ar1_lags,
    correlation_matrix,
    noise_forecast,
    shape_noise_arrays,
    state_space_whitening,
    steps_ahead,
    whitening,
)

pytestmark = pytest.mark.usefixtures("float64")


def _ou(rng, x, sd, ell):
    """A draw of an Ornstein-Uhlenbeck process at increasing ``x`` (exact transitions)."""
    f = np.empty_like(x)
    f[0] = sd * rng.standard_normal()
    for j in range(1, x.size):
        a = np.exp(-(x[j] - x[j - 1]) / ell)
        f[j] = a * f[j - 1] + sd * np.sqrt(1 - a * a) * rng.standard_normal()
    return f


def test_correlation_matrix_is_ar1_plus_ou_on_the_fitted_points_and_identity_elsewhere():
    x = np.log(np.array([1.0, 2.0, 4.0, 8.0, 16.0]))
    mask = np.array([False, True, True, True, False])
    K = correlation_matrix(x[None], mask[None], 0.5, 0.8, 0.7, xp=np)[0]
    fit = np.flatnonzero(mask)
    for a, i in enumerate(fit):
        for b, j in enumerate(fit):
            want = 0.5 ** abs(a - b) + 0.64 * np.exp(-abs(x[i] - x[j]) / 0.7)
            assert K[i, j] == pytest.approx(want)
    assert K[0, 0] == 1 and K[4, 4] == 1 and K[0, 1] == 0 and K[4, 3] == 0
    W, logdet = whitening(jnp.asarray(x), jnp.asarray(mask), 0.5, 0.8, 0.7)
    W = np.asarray(W)
    assert W @ K @ W.T == pytest.approx(np.eye(5), abs=1e-10)
    assert float(logdet) == pytest.approx(np.linalg.slogdet(K)[1])
    assert W[0, 1:] == pytest.approx(np.zeros(4)) and W[1:, 0] == pytest.approx(np.zeros(4))


def test_the_kalman_filter_whitens_as_the_dense_cholesky_factor():
    """Uneven spacing, a gap, padding after the fit, negative rho and kappa 0: the filter's
    innovations are ``L^-1 x`` and its log det the dense one's, to rounding."""
    rng = np.random.default_rng(7)
    n = 40
    x = np.log(np.sort(rng.uniform(1.0, 5000.0, (4, n)), axis=1))
    mask = np.ones((4, n), bool)
    mask[:, 0] = False  # compute 0 is never fitted
    mask[1, 12:15] = False  # a gap
    mask[2, 30:] = False  # padding
    rho, kappa, ell = (
        np.array([0.6, -0.4, 0.0, 0.9]),
        np.array([1.5, 0.3, 0.8, 0.0]),
        np.array([0.5, 2.0, 1.0, 1.0]),
    )
    W, logdet = whitening(x, mask, rho, kappa, ell, xp=np)
    coef, ss_logdet = state_space_whitening(x, mask, rho, kappa, ell)
    assert coef.shape == (4, n, 9) and ss_logdet == pytest.approx(logdet, rel=1e-12, abs=1e-12)
    v = rng.standard_normal((4, 3, n))
    for i in range(4):
        for parallel in (False, True):  # point by point (CPU) and as a parallel prefix
            got = np.asarray(apply_whitening(jnp.asarray(coef[i]), jnp.asarray(v[i]), parallel))
            assert got == pytest.approx(v[i] @ W[i].T, abs=1e-12)
        assert np.log(coef[i, :, 8]) == pytest.approx(np.log(np.diagonal(W[i])), abs=1e-12)


def test_with_lags_the_filter_and_the_forecast_are_the_grid_process_seen_at_the_points():
    """Points evenly spaced in log compute (a digitised figure): the AR(1) part runs on the
    grid of the median spacing, so its correlation is ``rho ** (grid distance)``; the
    filter whitens as the dense factor of that matrix, and the forecast is its Gaussian
    conditional."""
    rng = np.random.default_rng(11)
    c = np.geomspace(100.0, 6400.0, 16)
    mask = np.ones(16, bool)
    lag = ar1_lags(c, mask)
    assert lag is not None and lag[0] == 1 and lag.max() > 2  # late steps span several spacings
    x = np.log(c)
    rho, kappa, ell = 0.7, 0.8, 1.5
    W, logdet = whitening(x, mask, rho, kappa, ell, xp=np, lag=lag)
    t = np.cumsum(lag) - lag[0]
    K = rho ** np.abs(t[:, None] - t[None, :]) + kappa**2 * np.exp(-np.abs(x[:, None] - x[None, :]) / ell)
    assert W @ K @ W.T == pytest.approx(np.eye(16), abs=1e-9)
    coef, ss_logdet = state_space_whitening(x, mask, rho, kappa, ell, lag)
    assert float(ss_logdet) == pytest.approx(float(logdet), rel=1e-10)
    v = rng.standard_normal((3, 16))
    assert np.asarray(apply_whitening(jnp.asarray(coef), jnp.asarray(v))) == pytest.approx(v @ W.T, abs=1e-10)
    # the forecast 1 and 4 median spacings beyond the last point
    fit = c <= 3000.0
    lag_fit = ar1_lags(c, fit)
    new = np.array(
        [[c[fit][-1] + 1.0 * np.median(np.diff(c[fit])), c[fit][-1] + 4.0 * np.median(np.diff(c[fit]))]]
    )
    ahead = steps_ahead(c[None], fit[None], new)
    e = rng.normal(0, 0.01, (1, 2, 16))
    mean, sd = noise_forecast(x[None], fit[None], e, np.log(new), ahead, rho, kappa, ell, lag_fit[None])
    f = np.flatnonzero(fit)
    pos = np.concatenate([(np.cumsum(lag_fit) - 1)[f], (np.cumsum(lag_fit) - 1)[f][-1] + ahead[0]])
    lc = np.concatenate([x[f], np.log(new[0])])
    S = rho ** np.abs(pos[:, None] - pos[None, :]) + kappa**2 * np.exp(
        -np.abs(lc[:, None] - lc[None, :]) / ell
    )
    k = f.size
    for j in range(2):
        w = np.linalg.solve(S[:k, :k], S[:k, k + j])
        assert mean[0, :, j] == pytest.approx(e[0][:, f] @ w, rel=1e-9)
        assert sd[0, j] ** 2 == pytest.approx(S[k + j, k + j] - S[k + j, :k] @ w, rel=1e-9)


def _curves(compute, n_runs=3, seed=0):
    rng = np.random.default_rng(seed)
    rows = [
        pd.DataFrame(
            {
                "run": f"r{i}",
                "compute": compute,
                "reward": 0.3
                + 0.3 / (1 + (2000.0 / np.maximum(compute, 1e-9)) ** 1.5)
                + 0.01 * rng.standard_normal(compute.size),
            }
        )
        for i in range(n_runs)
    ]
    return bs.Runs.from_frame(pd.concat(rows, ignore_index=True))


def test_the_engine_gets_lags_only_where_the_points_are_unevenly_spaced():
    even = _curves(np.arange(0.0, 4001.0, 250.0) + 50.0 * np.sin(np.arange(17)))  # wall-clock jitter
    assert "ar_lag" not in padded_inputs(even.window())  # even steps: the program without lags
    digitised = _curves(np.concatenate([[0.0], np.geomspace(100.0, 6400.0, 16)]))
    arrays = padded_inputs(digitised.window())
    assert arrays["ar_lag"].shape == arrays["reward"].shape and arrays["ar_lag"].max() > 2
    # every 50 steps, each step dearer than the last (4x by the end): lag 1 in steps
    steps = np.arange(17) * 50
    dear = _curves(np.concatenate([[0.0], np.cumsum(np.linspace(1.0, 4.0, 16)) * 25]))
    assert "ar_lag" in padded_inputs(dear.window())
    dear = bs.Runs.from_frame(dear.table.assign(step=np.tile(steps, 3)))
    window = dear.window(min_compute=60.0)  # the window's steps are its fitted points'
    first = int(np.argmax(dear.table["compute"].to_numpy()[:17] >= 60.0))
    assert window.step[0, 0] == steps[first] and "ar_lag" not in padded_inputs(window)


def test_gain_conditional_integrates_the_gain_under_the_correlated_noise():
    """``log_norm`` is log of the integral over the gain of N(y; R0 + g s, sigma^2 K) / (1 - R0)."""
    rng = np.random.default_rng(0)
    c = np.array([0.0, 500, 1000, 1500, 2000, 2500, 3000, 3500])
    mask = c > 0
    R0, logB, logC, sigma = 0.3, np.log(2.0), np.log(2500.0), 0.01
    s = 1 / (1 + (np.exp(logC) / np.where(mask, c, 1.0)) ** np.exp(logB)) * mask
    y = R0 + 0.3 * s + rng.normal(0, sigma, c.size) * mask
    priors = bs.Priors(shape_noise=(0.9, 0.6), rho=0.3)
    data = make_run_data(c, y, mask, R0, 3500.0, priors, rho=0.3, ou=jnp.array([0.9, 0.6]))
    cond = gain_conditional(
        jnp.asarray(logB), jnp.asarray(logC), jnp.asarray(sigma), jnp.asarray(R0), data, priors
    )
    K = correlation_matrix(np.log(np.where(mask, c, 1.0))[None], mask[None], 0.3, 0.9, 0.6, xp=np)[0]
    f = np.flatnonzero(mask)
    cov = sigma**2 * K[np.ix_(f, f)]

    def lik(g):
        return stats.multivariate_normal(R0 + g * s[f], cov).pdf(y[f]) / (1 - R0)

    val, _ = integrate.quad(lik, 0, 1 - R0, points=[0.3], limit=200)
    assert float(cond.log_norm) == pytest.approx(np.log(val), abs=1e-6)


def test_estimate_finds_departures_only_where_there_are_some():
    rng = np.random.default_rng(5)
    n_runs, n = 24, 120
    c = np.linspace(0, 8000, n + 1)
    x = np.log(c[1:])
    R0 = rng.uniform(0.2, 0.4, n_runs)
    A = R0 + rng.uniform(0.2, 0.35, n_runs)
    mean = R0[:, None] + (A - R0)[:, None] / (1 + (3000.0 / c[None, 1:]) ** 2.0)
    noise = 0.01 * rng.standard_normal((n_runs, n))
    wiggle = np.stack([_ou(rng, x, 0.015, 1.0) for _ in range(n_runs)])

    def estimate(y):
        comp = np.broadcast_to(c, (n_runs, n + 1))
        reward = np.concatenate([R0[:, None], y], axis=1)
        mask = np.broadcast_to(c > 0, comp.shape)
        return shape_noise_arrays(comp, reward, mask, R0, 0.3, rho_free=True)

    kappa, _, gain, rho = estimate(mean + noise)
    assert kappa == 0.0 and gain < 3.0 and rho == 0.3  # clean sigmoids: no term, the default's fit
    kappa, ell, gain, rho = estimate(mean + noise + wiggle)
    assert kappa >= 0.75 and 0.5 <= ell <= 4.0 and gain > 20.0 and rho < 0.3
    # AR(1) evaluation noise alone is the AR(1) part's, not departures
    ar = np.empty_like(noise)
    ar[:, 0] = noise[:, 0]
    for j in range(1, n):
        ar[:, j] = 0.7 * ar[:, j - 1] + np.sqrt(1 - 0.49) * noise[:, j]
    kappa, _, gain, _ = estimate(mean + ar)
    assert kappa == 0.0 and gain < 3.0


def test_forecast_is_the_ar1_forecast_without_departures_and_reverts_with_them():
    rng = np.random.default_rng(1)
    c = np.arange(1.0, 21.0) * 100
    x = np.log(c)
    mask = np.ones(20, bool)
    e = rng.normal(0, 0.01, (3, 20))
    new = np.array([2100.0, 2300.0, 1e6])
    ahead = steps_ahead(c[None], mask[None], new[None])[0]
    assert ahead.tolist() == [1.0, 3.0, 9980.0]

    def one(rho, kappa, ell):
        mean, sd = noise_forecast(
            x[None], mask[None], e[None], np.log(new)[None], ahead[None], rho, kappa, ell
        )
        return mean[0], sd[0]

    mean, sd = one(0.6, 0.0, 1.0)
    assert mean == pytest.approx(e[:, -1:] * 0.6**ahead)
    assert sd == pytest.approx(np.sqrt(1 - 0.6 ** (2 * ahead)))
    mean, sd = one(0.0, 1.5, 0.5)
    assert sd[-1] == pytest.approx(np.sqrt(1 + 1.5**2)) and mean[:, -1] == pytest.approx(0.0, abs=1e-6)
    assert sd[0] < sd[1] < sd[2]  # the departure seen at the end of the data fades with distance


def test_forecast_of_a_batch_is_each_runs_gaussian_conditional():
    """Runs of different lengths at once: the joint Gaussian's conditional, run by run."""
    rng = np.random.default_rng(3)
    c = np.arange(0.0, 16.0) * 250
    masks = np.stack([c > 0, (c > 0) & (c <= 2500)])  # the second run has 10 fitted points
    rho, kappa, ell = np.array([0.5, -0.3]), np.array([1.2, 0.7]), np.array([0.8, 2.0])
    new = np.array([[4000.0, 5000.0, 9000.0], [2600.0, 3500.0, 200.0]])
    e = rng.normal(0, 0.01, (2, 4, c.size))
    ahead = steps_ahead(np.broadcast_to(c, (2, c.size)), masks, new)
    assert ahead.tolist() == [[1.0, 5.0, 21.0], [1.0, 4.0, 0.0]]  # at least one step; before: none
    x = np.log(np.maximum(c, 1e-300))
    mean, sd = noise_forecast(np.broadcast_to(x, (2, c.size)), masks, e, np.log(new), ahead, rho, kappa, ell)
    for i in range(2):
        f = np.flatnonzero(masks[i])
        k = len(f)
        # the joint correlation of the fitted points and the new ones, new point j after the last
        # fitted one by ahead[j] evaluations
        pos = np.concatenate([np.arange(k), k - 1 + ahead[i]])
        lc = np.concatenate([x[f], np.log(new[i])])
        lag = np.abs(pos[:, None] - pos[None, :])
        S = rho[i] ** lag + kappa[i] ** 2 * np.exp(-np.abs(lc[:, None] - lc[None, :]) / ell[i])
        for j in range(3):
            if ahead[i, j] == 0:
                assert mean[i, :, j] == pytest.approx(0.0) and sd[i, j] == pytest.approx(
                    np.sqrt(1 + kappa[i] ** 2)
                )
                continue
            w = np.linalg.solve(S[:k, :k], S[:k, k + j])
            assert mean[i, :, j] == pytest.approx(e[i][:, f] @ w, rel=1e-9)
            assert sd[i, j] ** 2 == pytest.approx(S[k + j, k + j] - S[k + j, :k] @ w, rel=1e-9)


def test_correlation_breaks_the_ar1_chain_at_a_gap_as_the_whitening_does():
    x = np.log(np.arange(1.0, 7.0))
    mask = np.array([True, True, False, True, True, True])
    K = correlation_matrix(x[None], mask[None], 0.6, 0.0, 1.0, xp=np)[0]
    f = np.flatnonzero(mask)
    W = np.zeros((6, 6))  # ar1_whiten as a matrix: a gap starts a new chain
    e = np.eye(6)
    for j in range(6):
        W[:, j] = np.asarray(ar1_whiten(jnp.asarray(e[j]), jnp.asarray(mask), 0.6))
    assert (W @ K @ W.T)[np.ix_(f, f)] == pytest.approx(np.eye(5), abs=1e-12)
    assert K[1, 3] == 0.0 and K[0, 1] == pytest.approx(0.6) and K[3, 5] == pytest.approx(0.36)


def test_priors_check_the_setting():
    assert bs.Priors(shape_noise=[1, 0.5]).shape_noise == (1.0, 0.5)
    assert bs.Priors(shape_noise=(0, 0.5)).shape_noise is None  # no departures: the model without them
    for bad in [(-1.0, 0.5), (1.0, 0.0), "yes", (1.0,)]:
        with pytest.raises(ValueError, match="shape_noise"):
            bs.Priors(shape_noise=bad)
    with pytest.raises(ValueError, match="shape_noise needs"):
        bs.Priors(likelihood="student_t", shape_noise=(1.0, 0.5))
    with pytest.raises(ValueError, match="shape_noise needs"):
        bs.Priors(rho=None, shape_noise=(1.0, 0.5))
    assert bs.Priors().shape_noise == "auto"  # the default; with other likelihoods it means none
    assert bs.Priors(likelihood="student_t").shape_noise == "auto"


def test_fit_with_departures_reuses_one_program_and_widens_the_band(keep_programs):
    from bayes_scalerl import engine

    rng = np.random.default_rng(4)
    truth = bs.random_truth(rng, 3, C_mid=(1500.0, 4000.0))
    df = bs.simulate_runs(truth, np.arange(0, 8001, 200.0), rng)
    kw = {**QUICK, "discrepancy": False, "seed": 0, "retry": False, "fit_until": 4000}
    plain = bs.fit(df, priors=bs.Priors(shape_noise=None), **kw)
    first = bs.fit(df, priors=bs.Priors(shape_noise=(0.5, 1.0)), **kw)
    before = engine.trace_count()
    second = bs.fit(df, priors=bs.Priors(shape_noise=(2.0, 1.0)), **kw)
    assert engine.trace_count() == before  # (kappa, ell) is data of the program, not part of it
    assert second.settings["priors"]["shape_noise"] == [2.0, 1.0]
    assert "smooth departures in log compute, sd 2 sigma" in second.settings["noise"]
    widths = []
    for res in (plain, first, second):
        p = res.predict([16000.0], kind="observation")
        widths.append(float((p["q95"] - p["q05"]).mean()))
    assert widths[0] < widths[2]  # more departures, less evidence, a wider band
    # kappa 0.5 moves A's posterior sd by about its Monte Carlo error (2-3% with these draws);
    # kappa 2 by far more
    sd = [np.std(res.draws("A"), axis=1).mean() for res in (plain, first, second)]  # within runs
    print("sd of A", sd)
    assert max(sd[0], sd[1]) * 1.1 < sd[2]
    loglik = second.log_likelihood()["reward"].values
    assert np.isfinite(loglik[..., second.dt["constant_data"]["in_fit"].values]).all()
    with pytest.raises(ValueError, match="hierarchical model has no shape_noise"):
        bs.fit(df.assign(recipe="r"), model="hierarchical", priors=bs.Priors(shape_noise=(1.0, 0.5)))


def test_auto_on_clean_curves_is_the_fit_without_the_term():
    rng = np.random.default_rng(6)
    truth = bs.random_truth(rng, 3, C_mid=(1500.0, 4000.0))
    df = bs.simulate_runs(truth, np.arange(0, 8001, 400.0), rng)
    kw = dict(seed=0, fit_until=6000, **QUICK)
    default = bs.fit(df, priors=bs.Priors(shape_noise=None), **kw)
    auto = bs.fit(df, **kw)  # the default, "auto"
    assert auto.settings["priors"]["shape_noise"] is None
    # (then the default's priors learnt from the batch, in words)
    words = auto.settings["noise"].split("; ")
    assert words[1] == "no smooth departures from the sigmoid found in the data"
    assert words[2].startswith("priors of A, B and C_mid learnt from the batch")
    np.testing.assert_array_equal(auto.draws("A"), default.draws("A"))


def test_pointwise_loglik_sums_to_the_joint_density():
    from bayes_scalerl.models.sigmoid import SigmoidModel

    rng = np.random.default_rng(2)
    c = np.array([0.0, 500, 1000, 1500, 2000, 2500, 3000, 3500])
    mask = c > 0
    y = 0.3 + 0.2 * mask * (c / 3500) + rng.normal(0, 0.01, c.size)
    priors = bs.Priors(shape_noise=(1.2, 0.8), rho=0.4)
    data = make_run_data(c, y, mask, 0.3, 3500.0, priors, rho=0.4, ou=jnp.array([1.2, 0.8]))
    params = {"A": 0.6, "B": 1.5, "C_mid": 2000.0, "sigma": 0.012}
    ll = np.asarray(SigmoidModel(priors).loglik({k: jnp.asarray(v) for k, v in params.items()}, data))
    mu = 0.3 + 0.3 / (1 + (2000.0 / c[mask]) ** 1.5)
    K = correlation_matrix(np.log(np.where(mask, c, 1.0))[None], mask[None], 0.4, 1.2, 0.8, xp=np)[0]
    f = np.flatnonzero(mask)
    joint = stats.multivariate_normal(mu, 0.012**2 * K[np.ix_(f, f)]).logpdf(y[f])
    assert ll[mask].sum() == pytest.approx(joint, abs=1e-8)


@pytest.mark.parametrize("ou", [None, (1.2, 0.8)])
def test_pointwise_loglik_on_uneven_points_sums_to_the_grid_processs_density(ou):
    """Points evenly spaced in log compute: the pointwise log-likelihood (AR(1) alone, and
    with departures) counts each step's lag, as the joint density of the grid process."""
    from bayes_scalerl.models.sigmoid import SigmoidModel

    rng = np.random.default_rng(4)
    c = np.concatenate([[0.0], np.geomspace(100.0, 3500.0, 12)])
    mask = c > 0
    y = 0.3 + 0.2 * mask * (c / 3500) + rng.normal(0, 0.01, c.size)
    priors = bs.Priors(shape_noise=ou, rho=0.6)
    lag = ar1_lags(c, mask)
    assert lag.max() > 2
    data = make_run_data(
        c, y, mask, 0.3, 3500.0, priors, rho=0.6, ou=None if ou is None else jnp.array(ou), ar_lag=lag
    )
    params = {"A": 0.6, "B": 1.5, "C_mid": 2000.0, "sigma": 0.012}
    ll = np.asarray(SigmoidModel(priors).loglik({k: jnp.asarray(v) for k, v in params.items()}, data))
    mu = 0.3 + 0.3 / (1 + (2000.0 / c[mask]) ** 1.5)
    kappa, ell = ou if ou is not None else (0.0, 1.0)
    K = correlation_matrix(np.log(np.where(mask, c, 1.0)), mask, 0.6, kappa, ell, xp=np, lag=lag)
    f = np.flatnonzero(mask)
    joint = stats.multivariate_normal(mu, 0.012**2 * K[np.ix_(f, f)]).logpdf(y[f])
    assert ll[mask].sum() == pytest.approx(joint, abs=1e-8)


def test_a_fit_of_log_spaced_points_says_its_lags_and_keeps_the_steps(keep_programs):
    """Points read off a log-x figure (no steps): the fit counts the lags and says so; the
    same points with their steps every 50 steps have lag 1 (no lags), as a log has."""
    rng = np.random.default_rng(8)
    truth = bs.random_truth(rng, 3, C_mid=(1500.0, 4000.0))
    c = np.concatenate([[0.0], np.geomspace(200.0, 8000.0, 16)])
    df = bs.simulate_runs(truth, c, rng, ar1=0.5)
    res = bs.fit(df, seed=0, fit_until=4000, **QUICK)
    assert "uneven spacing in 3 run(s)" in res.settings["noise"]
    assert np.isfinite(res.predict(np.array([6000.0, 8000.0]))["q95"]).all()
    stepped = df.assign(step=np.tile(np.arange(17) * 50, 3))
    res_steps = bs.fit(stepped, seed=0, fit_until=4000, **QUICK)
    assert "uneven" not in res_steps.settings["noise"]
    assert res_steps.dt["constant_data"]["step"].values[0].tolist() == (np.arange(17) * 50).tolist()
