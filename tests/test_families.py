"""Curve families beside the sigmoid: the gain marginal, recovery, LOO comparison, no recompilation.

Every simulated data set has 4 runs on the same 24-point grid, and every fit window pads
to 24 points, so each family's sampler compiles once for the whole file.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest
from conftest import QUICK, run_child

import bayes_scalerl as bs
from bayes_scalerl import engine
from bayes_scalerl.analyses import families as fam
from bayes_scalerl.models import families as fam_models
from bayes_scalerl.models.scalerl import gain_conditional, make_run_data
from bayes_scalerl.posterior import families as fam_fit

#: These tests call the model's JAX internals directly: run them in float64 (see conftest).
pytestmark = pytest.mark.usefixtures("float64")
GRID = np.concatenate([[0.0], np.linspace(250.0, 12_000.0, 23)])
#: Cut-off of the comparison tests: 17 fitted points (pads to 24, as the full grid does), 6 held out.
FIT_UNTIL = 9_000.0
SIGMA = 0.01


def _table(names, mu, rng, sigma=SIGMA) -> pd.DataFrame:
    """Runs with mean ``mu`` (run, point) on GRID plus noise; the first evaluation is exactly R0."""
    y = mu + sigma * rng.standard_normal(mu.shape)
    y[:, 0] = mu[:, 0]
    y = np.clip(y, 0.0, 1.0)
    return pd.DataFrame(
        {"run": np.repeat(names, len(GRID)), "compute": np.tile(GRID, len(names)), "reward": y.ravel()}
    )


def simulate_power(seed: int, n: int = 4) -> tuple[bs.Runs, pd.DataFrame]:
    rng = np.random.default_rng(seed)
    truth = pd.DataFrame(
        {
            "run": [f"pow{i}" for i in range(n)],
            "R0": rng.uniform(0.2, 0.3, n),
            "g": rng.uniform(0.15, 0.25, n),
            "b": rng.uniform(0.3, 0.8, n),
        }
    )
    c_ref = GRID[-1]
    mu = (
        truth["R0"].to_numpy()[:, None]
        + truth["g"].to_numpy()[:, None] * (GRID / c_ref) ** truth["b"].to_numpy()[:, None]
    )
    return bs.Runs.from_frame(_table(truth["run"].to_numpy(), mu, rng)), truth


def simulate_exponential(seed: int, n: int = 4) -> tuple[bs.Runs, pd.DataFrame]:
    rng = np.random.default_rng(seed)
    truth = pd.DataFrame(
        {
            "run": [f"exp{i}" for i in range(n)],
            "R0": rng.uniform(0.2, 0.3, n),
            "A": rng.uniform(0.5, 0.65, n),
            "B": rng.uniform(1.0, 2.0, n),
            "C_s": rng.uniform(1_500.0, 3_000.0, n),
        }
    )
    t = {k: truth[k].to_numpy()[:, None] for k in ("R0", "A", "B", "C_s")}
    mu = t["R0"] + (t["A"] - t["R0"]) * -np.expm1(-((GRID / t["C_s"]) ** t["B"]))
    return bs.Runs.from_frame(_table(truth["run"].to_numpy(), mu, rng)), truth


def simulate_sigmoid(seed: int, n: int = 4) -> bs.Runs:
    """Sigmoids that saturate inside the fit window (C_mid far below FIT_UNTIL)."""
    rng = np.random.default_rng(seed)
    truth = pd.DataFrame(
        {
            "run": [f"sig{i}" for i in range(n)],
            "R0": rng.uniform(0.2, 0.3, n),
            "A": rng.uniform(0.55, 0.65, n),
            "B": rng.uniform(2.0, 3.0, n),
            "C_mid": rng.uniform(1_500.0, 2_500.0, n),
        }
    )
    t = {k: truth[k].to_numpy()[:, None] for k in ("R0", "A", "B", "C_mid")}
    mu = bs.scalerl_curve(GRID[None, :], t["A"], t["B"], t["C_mid"], t["R0"])
    return bs.Runs.from_frame(_table(truth["run"].to_numpy(), mu, rng))


@pytest.fixture(scope="module")
def power_data():
    return simulate_power(1)


@pytest.fixture(scope="module")
def power_fit(power_data):
    return fam_fit.fit_family(power_data[0], "power", seed=0, log_likelihood=True, **QUICK)


# ---------------------------------------------------------------------- pieces
def test_gain_marginal_matches_gain_conditional(rng):
    """For the sigmoid's gain fractions the two closed forms agree to rounding."""
    compute = np.concatenate([[0.0], np.linspace(500, 8000, 15)])
    y = 0.25 + 0.3 * compute / (compute + 3000) + 0.01 * rng.standard_normal(compute.size)
    mask = np.ones(compute.size, bool)
    mask[0] = False
    priors = bs.Priors()
    data = make_run_data(compute, y, mask, y[0], compute[-1], priors)
    for log_B, log_C, sigma in [(0.7, 8.0, 0.01), (0.1, 11.0, 0.02), (1.5, 6.5, 0.005), (-0.5, 14.0, 0.3)]:
        log_B, log_C, sigma = (jnp.asarray(v) for v in (log_B, log_C, sigma))
        ref = gain_conditional(log_B, log_C, sigma, data.R0, data, priors)
        s = jnp.where(data.positive, jax.nn.sigmoid(jnp.exp(log_B) * (data.log_c - log_C)), 0.0)
        got = fam_models.gain_marginal(s, data.y, data.mask, data.R0, sigma, 1.0 - data.R0)
        for a, b in zip(got, ref, strict=True):
            np.testing.assert_allclose(float(a), float(b), rtol=1e-12, atol=1e-10)


def test_exponential_coordinates_jacobian():
    """The closed-form log-Jacobian of the exponential's (u, v) map equals autodiff's."""
    a = 8.0

    def to_user(z):
        log_B, x_a, _ = fam_models.exp_coords(z[0], z[1])
        return jnp.stack([log_B, a - x_a * jnp.exp(-log_B)])

    for z in [(0.1, -3.0), (-0.5, 0.0), (1.0, 5.0), (-1.0, 20.0)]:
        z = jnp.asarray(z)
        want = np.log(abs(np.linalg.det(np.asarray(jax.jacfwd(to_user)(z)))))
        np.testing.assert_allclose(float(fam_models.exp_coords(z[0], z[1])[2]), want, rtol=1e-10)


def test_unknown_family_is_rejected(power_data):
    with pytest.raises(ValueError, match="family"):
        fam_fit.fit_family(power_data[0], "cubic")
    with pytest.raises(ValueError, match="families"):
        fam.compare_families(power_data[0], families=("sigmoid", "cubic"))


# ---------------------------------------------------------------------- recovery
def _check_recovery(res, truth, name, tol_abs, n_sd=4.0):
    """Posterior median within ``max(n_sd posterior sd, tol_abs)`` of the truth, every run.

    With 23 points at noise 0.01 the posteriors are narrow; 4 sd bounds a miss of a
    calibrated posterior at ~6e-5 per check, and ``tol_abs`` covers the Monte Carlo
    error of a median from 1200 draws where the posterior is very narrow.
    """
    d = res.draws(name)
    med, sd = np.median(d, 1), d.std(1)
    err = np.abs(med - truth[name].to_numpy())
    assert np.all(err <= np.maximum(n_sd * sd, tol_abs)), (name, med, truth[name].to_numpy(), sd)


def test_power_recovers_truth(power_data, power_fit):
    _, truth = power_data
    assert isinstance(power_fit, bs.FitResult)
    assert power_fit.run_names == list(truth["run"])
    _check_recovery(power_fit, truth, "g", 0.01)
    _check_recovery(power_fit, truth, "b", 0.03)
    diag = power_fit.diagnostics()
    assert diag["divergences"].sum() == 0
    # 4 x 300 draws: rank R-hat of a well-mixing chain still scatters up to ~1.02
    assert diag["r_hat_max"].max() < 1.05
    ll = power_fit.dt["log_likelihood"]["reward"]
    assert ll.dims == ("chain", "draw", "run", "point")
    in_fit = power_fit.dt["constant_data"]["in_fit"].values
    assert np.isnan(ll.values[..., ~in_fit]).all() and np.isfinite(ll.values[..., in_fit]).all()
    bare = bs.FitResult(power_fit.dt.drop_nodes("log_likelihood"))
    np.testing.assert_array_equal(bare.log_likelihood()["reward"].values, ll.values)
    draws = power_fit.predict_draws([6000.0, 24_000.0])
    assert draws.shape == (4, 1200, 2) and np.all((draws >= 0) & (draws <= 1))


def test_exponential_recovers_truth():
    runs, truth = simulate_exponential(2)
    res = fam_fit.fit_family(runs, "exponential", seed=0, **QUICK)
    _check_recovery(res, truth, "A", 0.01)
    _check_recovery(res, truth, "B", 0.1)
    assert np.all(np.abs(np.log(np.median(res.draws("C_s"), 1) / truth["C_s"].to_numpy())) < 0.2)
    assert res.diagnostics()["divergences"].sum() == 0


def test_same_shape_does_not_recompile(power_fit, keep_programs):
    """A second power data set of the same bucketed shape reuses the compiled sampler."""
    before = engine.trace_count()
    runs, _ = simulate_power(7, n=3)  # 3 runs bucket to 4, like the first data set
    # without the second attempt, whose program compiles only if a run fails the check
    res = fam_fit.fit_family(runs, "power", seed=3, **(QUICK | {"retry": False}))
    assert engine.trace_count() == before
    assert res.dt["posterior"].sizes["run"] == 3


# ---------------------------------------------------------------------- comparison
def test_loo_prefers_sigmoid_when_saturation_is_seen():
    runs = simulate_sigmoid(3)
    df = fam.compare_families(
        runs, families=("sigmoid", "power", "exponential"), fit_until=FIT_UNTIL, fit_kwargs=QUICK
    )
    assert len(df) == 12 and list(df["family"][:3]) == ["sigmoid", "power", "exponential"]
    assert (df["n_points"] == 17).all() and (df["n_heldout"] == 6).all()
    assert (df["elpd_diff"] >= 0).all() and (df.groupby("run")["rank"].min() == 1).all()
    wide = df.pivot(index="run", columns="family", values="elpd_loo")
    # a power law cannot bend over: the sigmoid wins on (at least) 3 runs of 4
    assert (wide["sigmoid"] > wide["power"]).sum() >= 3
    crps = df.pivot(index="run", columns="family", values="crps")
    assert np.isfinite(crps.to_numpy()).all() and (crps["sigmoid"] < crps["power"]).sum() >= 3


def test_power_not_worse_than_sigmoid_on_power_data(power_data):
    runs, _ = power_data
    df = fam.compare_families(runs, families=("sigmoid", "power"), fit_until=FIT_UNTIL, fit_kwargs=QUICK)
    for _, g in df.groupby("run"):
        p = g.set_index("family")
        gap = p.loc["sigmoid", "elpd_loo"] - p.loc["power", "elpd_loo"]
        se = p.loc["power", "diff_se"] if gap > 0 else 0.0
        assert gap <= 2 * se + 1e-12, g
    assert np.isfinite(df[["crps", "median_abs_error", "se", "p_loo", "pareto_k_max"]].to_numpy()).all()


# ---------------------------------------------------------------------- on the shared engine
_FAM_CHILD = """
import sys, numpy as np, bayes_scalerl as bs
res = bs.fit_family(bs.read_runs(sys.argv[1]), "power", seed=0, chains=4, warmup=300, samples=300,
                    chunk_size=2, n_devices=2, log_likelihood=False)
np.savez(sys.argv[2], **{k: v.values for k, v in res.dt["posterior"].data_vars.items()})
"""


def test_power_family_resumes_and_runs_on_two_devices(power_data, tmp_path):
    """The families run on the engine: a resumed fit and a fit on 2 devices draw the same bits."""

    runs = power_data[0]
    kw = dict(QUICK, seed=0, chunk_size=2, log_likelihood=False)
    whole = fam_fit.fit_family(runs, "power", **kw)
    ckpt = tmp_path / "ckpt"
    fam_fit.fit_family(runs, "power", checkpoint_dir=ckpt, **kw)
    (ckpt / "chunk-000001.npz").unlink()  # as if killed before the second chunk was written
    resumed = fam_fit.fit_family(runs, "power", checkpoint_dir=ckpt, **kw)
    path = tmp_path / "power.parquet"
    runs.table.to_parquet(path)
    run_child(_FAM_CHILD, [path, tmp_path / "two.npz"])
    two = np.load(tmp_path / "two.npz")
    for name in ("g", "b", "sigma"):
        want = whole.dt["posterior"][name].values
        np.testing.assert_array_equal(resumed.dt["posterior"][name].values, want, err_msg=name)
        np.testing.assert_array_equal(two[name], want, err_msg=name)
