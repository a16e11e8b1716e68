"""NUTS against an independent method, and the compiled program is reused."""

import numpy as np
import pandas as pd
import pytest
from scipy.special import logsumexp

import bayes_scalerl as bs
from bayes_scalerl import engine
from bayes_scalerl.engine import driver
from tests.conftest import QUICK


def _three_runs(seed):
    truth = pd.DataFrame(
        {
            "run": ["early", "middle", "late"],
            "A": [0.60, 0.55, 0.65],
            "B": [2.0, 1.5, 2.5],
            "C_mid": [2500.0, 6000.0, 12000.0],
            "R0": [0.25, 0.30, 0.20],
            "sigma": [0.015, 0.015, 0.015],
        }
    )
    grid = np.concatenate([[0.0], np.linspace(1500, 16000, 24)])
    return truth, bs.simulate_runs(truth, grid, np.random.default_rng(seed))


def _grid_posterior(c, y, R0, c_ref, priors):
    """Brute-force posterior on a 4-D grid over (A, log B, log C_mid, sigma), plain NumPy.

    It shares no code with the package: the curve is the power form, A is on the grid (not
    integrated out), and the priors are written out again.
    """
    A = np.linspace(R0 + 1e-4, 1 - 1e-4, 90)
    lB = np.linspace(np.log(0.2), np.log(12.0), 70)
    lC = np.linspace(np.log(c_ref) - 4.5, np.log(c_ref) + 4.5, 90)
    sig = np.linspace(0.004, 0.04, 24)
    frac = 1 / (1 + (np.exp(lC)[None, :, None] / c[None, None, :]) ** np.exp(lB)[:, None, None])  # B, C, n
    mu = R0 + (A[:, None, None, None] - R0) * frac[None]  # A, B, C, n
    rss = np.sum((y - mu) ** 2, axis=-1)  # A, B, C
    n = len(c)
    ll = -0.5 * rss[..., None] / sig**2 - n * np.log(sig)  # A, B, C, S
    lp = (
        -0.5 * ((lB - np.log(priors.B_median)) / priors.B_log_sd) ** 2  # density in log B
    )[None, :, None, None] + (-0.5 * ((lC - np.log(c_ref)) / priors.C_mid_log_sd) ** 2)[None, None, :, None]
    lp = lp + (-0.5 * (sig / priors.sigma_scale) ** 2)[None, None, None, :]
    logp = ll + lp
    w = np.exp(logp - logsumexp(logp))
    pA = w.sum(axis=(1, 2, 3))
    pB = w.sum(axis=(0, 2, 3))
    pS = w.sum(axis=(0, 1, 2))
    return (A, pA), (lB, pB), (sig, pS)  # B on its (uniform) log grid


def _quantiles(x, p, qs):
    """Quantiles of the mass ``p`` of the cells centred on the uniform grid ``x``.

    The CDF after cell ``k`` is the CDF at the cell's upper edge, half a step above
    ``x[k]`` (interpolating it at ``x[k]`` itself shifts every quantile down by half a
    cell, measured 0.004 in ``A``).
    """
    cdf = np.cumsum(p) / p.sum()
    return np.interp(qs, cdf, x + 0.5 * (x[1] - x[0]))


def test_nuts_matches_brute_force_grid():
    truth, df = _three_runs(3)
    runs = bs.Runs.from_frame(df)
    # the sampler alone: the exact sigmoid posterior, without the calibrated discrepancy, under
    # the fixed priors the grid integrates (the default learns each run's from the batch)
    priors = bs.Priors(from_batch=False)
    res = bs.fit(
        runs, min_compute=1500, seed=2, chains=4, warmup=500, samples=1000, discrepancy=False, priors=priors
    )
    w = runs.window(min_compute=1500)
    summ = res.summary()
    diag = res.diagnostics()
    for i, name in enumerate(runs.names):
        m = w.mask[i]
        (A, pA), (B, pB), (S, pS) = _grid_posterior(
            w.compute[i][m], w.reward[i][m], w.R0[i], w.c_ref[i], priors
        )
        for param, grid, p in (("A", A, pA), ("B", B, pB), ("sigma", S, pS)):
            row = summ[(summ.run == name) & (summ.param == param)].iloc[0]
            exact = _quantiles(grid, p, [0.05, 0.5, 0.95])
            if param == "B":
                exact, grid = np.exp(exact), np.exp(grid)
            ess = float(diag.loc[diag.run == name, "ess_bulk_min"].iloc[0])
            # Monte Carlo error of a quantile is about sd / sqrt(ESS) (times ~1.5 in the tails);
            # allow 4 such errors plus half the grid cell there.
            tol = 4 * 1.5 * row["sd"] / np.sqrt(ess) + 0.5 * np.interp(exact, grid[1:], np.diff(grid))
            got = np.array([row["q05"], row["q50"], row["q95"]])
            assert np.all(np.abs(got - exact) < tol), (name, param, got, exact, tol)


def test_second_data_set_of_same_shape_does_not_recompile(keep_programs):
    # without retries: a retry samples longer chains with a program of its own, compiled
    # when a run first fails the convergence check, and whether one does is floating
    # point's call (on an AMD EPYC, 2026-12-07, the second data set's "late" run did)
    quick = QUICK | {"retry": False}
    truth, df1 = _three_runs(10)
    _, df2 = _three_runs(11)
    bs.fit(df1, min_compute=1500, seed=0, **quick)
    before = engine.trace_count()
    res = bs.fit(df2, min_compute=1500, seed=1, **quick)
    assert engine.trace_count() == before
    assert res.dt["posterior"]["A"].shape == (4, 300, 3)


def test_same_seed_same_draws_and_seed_changes_draws():
    _, df = _three_runs(4)
    a = bs.fit(df, min_compute=1500, seed=5, **QUICK)
    b = bs.fit(df, min_compute=1500, seed=5, **QUICK)
    c = bs.fit(df, min_compute=1500, seed=6, **QUICK)
    np.testing.assert_array_equal(a.dt["posterior"]["A"].values, b.dt["posterior"]["A"].values)
    assert not np.array_equal(a.dt["posterior"]["A"].values, c.dt["posterior"]["A"].values)


def test_fitted_R0_is_a_parameter():
    _, df = _three_runs(5)
    res = bs.fit(df, min_compute=None, priors=bs.Priors(R0_fitted=True), seed=0, **QUICK)
    s = res.summary()
    assert set(s.param) == {"A", "B", "C_mid", "sigma", "R0"}
    r0 = s[s.param == "R0"].set_index("run")["q50"]
    # truth R0 is 0.25/0.30/0.20 with noise 0.015 on the first points
    np.testing.assert_allclose(r0.loc[["early", "middle", "late"]], [0.25, 0.30, 0.20], atol=0.05)


@pytest.mark.parametrize("bad", [dict(chains=1), dict(samples=0)])
def test_bad_sampler_settings(bad):
    _, df = _three_runs(4)
    kw = {**QUICK, **bad}
    with pytest.raises(ValueError):
        bs.fit(df, **kw)


@pytest.mark.parametrize("bad, match", [(dict(kernel="vmap"), "kernel"), (dict(lanes=0), "lanes")])
def test_bad_kernel_settings_name_the_setting(bad, match):
    _, df = _three_runs(4)
    w = bs.Runs.from_frame(df).window(min_compute=1500)
    import jax

    with pytest.raises(ValueError, match=match):
        engine.sample_window(jax.random.key(0), w, bs.Priors(), engine.SamplerConfig(**bad))


@pytest.mark.parametrize("n, devices", [(1, 1), (3, 1), (17, 1), (100, 1), (3, 2), (100, 2), (600, 4)])
def test_layout_covers_runs_in_whole_groups(n, devices):
    size, gsize, used = driver._layout(min(n, 512), 512, 16, devices)
    assert size >= min(n, 512)
    assert size % (gsize * used) == 0
    assert used <= devices and gsize == min(16, 1 << max(2, (min(n, 512) - 1).bit_length()))


@pytest.mark.parametrize("R0_fitted", [False, True])
def test_plain_numpyro_model_agrees_with_the_marginalised_sampler(float64, R0_fitted):
    """The textbook NumPyro model (A sampled directly) on a well-identified run.

    With ``R0`` fitted the package samples other coordinates (the level at the anchor
    and ``R0``'s share of it, :data:`~bayes_scalerl.models.scalerl.LEVEL_SCALE`); the
    posterior of ``R0`` must agree too.
    """
    import jax
    from numpyro.infer import MCMC, NUTS

    from bayes_scalerl.models.scalerl import scalerl_numpyro_model

    truth, df = _three_runs(3)
    runs = bs.Runs.from_frame(df).subset(["early"])
    priors = bs.Priors(R0_fitted=R0_fitted, rho=0.0)  # AR(1) with rho 0: the plain model's Gaussian noise
    w = runs.window(min_compute=1500, R0_fitted=R0_fitted)
    c, y = w.compute[0][w.mask[0]], w.reward[0][w.mask[0]]
    mcmc = MCMC(
        NUTS(scalerl_numpyro_model, target_accept_prob=0.95),
        num_warmup=500,
        num_samples=1000,
        num_chains=1,
        progress_bar=False,
    )
    mcmc.run(jax.random.key(0), c, y, R0=float(w.R0[0]), priors=priors, c_ref=float(w.c_ref[0]))
    fit = bs.fit(runs, min_compute=1500, seed=0, discrepancy=False, priors=priors, **QUICK)
    assert fit.diagnostics()["converged"].all()
    for name in ("A", "R0") if R0_fitted else ("A",):
        plain = np.asarray(mcmc.get_samples()[name])
        ours = fit.draws(name)[0]
        # both target the same posterior; the medians differ by Monte Carlo error only
        # (sd / sqrt(ESS) with ESS >= 200 each): allow 4 combined errors
        tol = 4 * np.std(ours) * np.sqrt(1 / 200 + 1 / 200)
        assert abs(np.median(plain) - np.median(ours)) < tol, name
        assert abs(np.std(plain) - np.std(ours)) < 0.35 * np.std(ours), name


def _mcse_quantile(x: np.ndarray, prob: float) -> float:
    """ArviZ's Monte Carlo standard error of a quantile of (chain, draw) draws."""
    import arviz_stats as azs
    import xarray as xr

    return float(azs.mcse(xr.DataArray(x, dims=("chain", "draw")), method="quantile", prob=prob))


def test_lane_queue_matches_numpyros_own_nuts_kernel():
    """The lane-queue sampler and NumPyro's ``sample_kernel`` (vmapped) agree.

    Same posterior, same algorithm, different control flow: the quantiles of every
    parameter agree within Monte Carlo error, neither diverges, and both reach the
    target acceptance rate of the step-size adaptation.
    """
    import jax

    truth, df = _three_runs(4)
    w = bs.Runs.from_frame(df).window(min_compute=1500)
    cfg = engine.SamplerConfig(4, 500, 1000)
    key = jax.random.key(5)
    queue = engine.sample_window(key, w, bs.Priors(), cfg, progress=False)
    lock = engine.sample_window(key, w, bs.Priors(), cfg._replace(kernel="lockstep"), progress=False)
    for d in (queue, lock):
        assert not d["diverging"].any()
        # dual averaging targets the mean acceptance (0.9); the draws use its averaged
        # step size, which is smaller than the last iterates, so they accept a little more
        print(f"mean acceptance {d['accept_prob'].mean():.3f}")
        assert cfg.target_accept - 0.02 < d["accept_prob"].mean() < cfg.target_accept + 0.08
    for i in range(3):
        for name in ("A", "B", "C_mid", "sigma"):
            a, b = queue[name][i], lock[name][i]
            if name == "C_mid":
                a, b = np.log(a), np.log(b)
            for q in (0.05, 0.5, 0.95):
                # 36 comparisons, each within 4.5 combined Monte Carlo errors: a false alarm
                # has odds below 1 in 3,000 for normal errors (ArviZ's tail MCSE is itself
                # rough at these ESS; at 6,000 draws a chain every |z| was below 1.8)
                err = np.hypot(_mcse_quantile(a, q), _mcse_quantile(b, q))
                assert abs(np.quantile(a, q) - np.quantile(b, q)) < 4.5 * err, (i, name, q)


def test_a_runs_draws_do_not_depend_on_its_group_or_the_lanes():
    """Each chain's randomness is its own: the same bits alone, in a group, on fewer lanes.

    (The lane count sets the width of every vectorised operation; widths that are not a
    multiple of the CPU's vector width, such as 3, can change the last bits.)
    """
    import jax

    rng = np.random.default_rng(5)
    truth = bs.random_truth(rng, 6)
    runs = bs.Runs.from_frame(bs.simulate_runs(truth, np.linspace(0.0, 16000.0, 21), rng))
    cfg = engine.SamplerConfig(4, 60, 30)
    key = jax.random.key(3)

    def draws(names, **kw):
        w = runs.subset(names).window(min_compute=1500)
        config = cfg._replace(lanes=kw.pop("lanes", None))
        # a fixed rho: with "auto" each subset would have its own estimate, so its own posterior
        return engine.sample_window(key, w, bs.Priors(rho=0.3), config, progress=False, **kw)

    full = draws(runs.names)
    for other in (
        draws(runs.names[:1]),  # alone: a group of 4 with 3 padding runs
        draws(runs.names, group_size=8),
        draws(runs.names, lanes=8),  # fewer lanes than chains: chains queue for lanes
    ):
        n = other["B"].shape[0]
        np.testing.assert_array_equal(other["B"], full["B"][:n])
        np.testing.assert_array_equal(other["A"], full["A"][:n])
        np.testing.assert_array_equal(other["num_steps"], full["num_steps"][:n])


def test_the_samplers_threefry_is_jaxs_bit_for_bit():
    """The written-out hash of :mod:`bayes_scalerl.engine.nuts` equals ``jax.extend.random``'s."""
    import jax.extend.random as jr
    import jax.numpy as jnp

    from bayes_scalerl.engine.nuts import _threefry2x32

    rng = np.random.default_rng(0)
    words = rng.integers(0, 2**32, size=(4, 500), dtype=np.uint64).astype(np.uint32)
    k0, k1, x0, x1 = (jnp.asarray(w) for w in words)
    ours = np.stack([np.asarray(o) for o in _threefry2x32(k0, k1, x0, x1)])
    for i in range(0, 500, 50):  # jax's takes one key at a time
        theirs = np.asarray(jr.threefry_2x32(jnp.asarray(words[:2, i]), jnp.asarray(words[2:, i])))
        np.testing.assert_array_equal(ours[:, i], theirs)


def test_the_samplers_momentum_normals_are_standard_normal(float64):
    """Normals made from the hash's words: mean, variance and a KS test on 20,000 draws.

    With 20,000 independent N(0, 1) draws the mean has sd 0.0071 and the variance
    sd 0.010; the tolerances are 4 sds, and the KS test fails with probability 0.001.
    """
    import jax.numpy as jnp
    from scipy import stats

    from bayes_scalerl.engine.nuts import _counter_words, _std_normal

    key = jnp.asarray([7, 11], jnp.uint32)
    streams = jnp.arange(1, 21, dtype=jnp.uint32)
    z = np.concatenate(
        [
            np.asarray(_std_normal(*_counter_words(key, streams, jnp.int32(n)), jnp.float64))
            for n in range(1000)
        ]
    )
    assert z.shape == (20000,)
    assert abs(z.mean()) < 4 * 0.0071
    assert abs(z.var() - 1.0) < 4 * 0.010
    assert stats.kstest(z, "norm").pvalue > 0.001
