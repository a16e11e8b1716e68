import numpy as np
import pytest

import bayes_scalerl as bs
from bayes_scalerl.analyses.baseline import _fit_B, _sigmoid_grid, paper_fit_arrays


def test_datatree_layout(demo_fit):
    dt = demo_fit.dt
    for g in ("posterior", "sample_stats", "observed_data", "constant_data"):
        assert g in dt.children, g
    assert "log_likelihood" not in dt.children  # computed when asked for, not stored by default
    ll = demo_fit.with_log_likelihood().dt["log_likelihood"]["reward"]
    assert ll.dims == ("chain", "draw", "run", "point")
    fitted = dt["constant_data"]["in_fit"].values
    assert np.isfinite(ll.values[..., fitted]).all() and np.isnan(ll.values[..., ~fitted]).all()
    post = dt["posterior"]
    # delta: the calibrated discrepancy's ceiling offset (A includes it); delta_level: its level offset
    assert set(post.data_vars) == {"A", "B", "C_mid", "sigma", "delta", "delta_level"}
    assert post["A"].dims == ("chain", "draw", "run")
    assert list(post["run"].values) == demo_fit.run_names
    assert dt["constant_data"]["recipe"].values[0] == "ScaleRL"


def test_save_load_round_trip(demo_fit, tmp_path):
    path = demo_fit.save(tmp_path / "fit.nc")
    back = bs.FitResult.load(path)
    assert back.run_names == demo_fit.run_names
    np.testing.assert_array_equal(back.dt["posterior"]["A"].values, demo_fit.dt["posterior"]["A"].values)
    assert back.settings["fit_until"] == 8000
    assert [p.name for p in tmp_path.iterdir()] == ["fit.nc"]


def test_predict_curve_and_observation(demo_fit):
    run = demo_fit.run_names[0]
    cur = demo_fit.predict([4000, 16000, 1e6], kind="curve", runs=[run])
    obs = demo_fit.predict([4000, 16000, 1e6], kind="observation", runs=[run])
    w_obs, w_cur = (obs.q95 - obs.q05).to_numpy(), (cur.q95 - cur.q05).to_numpy()
    assert (w_obs[:2] > w_cur[:2]).all()  # noise widens the band where it dominates
    # at 1e6 the band is mostly the discrepancy (sd about 0.05) and the noise (0.01) adds
    # little in quadrature: wider up to Monte Carlo error (each quantile about
    # 1.71 sd / sqrt(n) with n = 1,200 draws; a width holds two, the difference two widths)
    se = 1.71 * (cur.q95.iloc[-1] - cur.q05.iloc[-1]) / 3.29 / np.sqrt(1200) * 2
    assert w_obs[2] > w_cur[2] - 4 * se
    A = demo_fit.draws("A")[0]
    # far beyond C_mid the curve approaches A
    assert cur.q50.iloc[-1] == pytest.approx(np.median(A), abs=0.01)
    with pytest.raises(KeyError):
        demo_fit.predict([1.0], runs=["nope"])


def test_demo_recovers_the_truth_within_intervals(demo_fit):
    truth = bs.demo_truth().set_index("run")
    s = demo_fit.summary(var_names=["A"]).set_index("run")
    covered = ((s.q05 <= truth.A) & (truth.A <= s.q95)).mean()
    # 18 runs: a 90% interval misses on average 1.8 of them; 5 misses or more has
    # probability below 1% (binomial(18, 0.1))
    assert covered >= 13 / 18


def test_paper_baseline_B_step_matches_curve_fit():
    from scipy.optimize import curve_fit

    rng = np.random.default_rng(0)
    c = np.linspace(1500, 8000, 20)
    y = 0.3 + 0.3 / (1 + (2500 / c) ** 1.9) + 0.005 * rng.standard_normal(20)
    A, Cm = 0.6, np.array([2500.0, 3000.0])
    B_grid = np.exp(np.linspace(np.log(0.05), np.log(20), 120))
    S, d = _sigmoid_grid(c, Cm, B_grid)
    z = y - 0.3
    B, _ = _fit_B(z, A - 0.3, d, B_grid, S @ z, np.sum(S * S, axis=-1), z @ z)
    for k in range(2):
        f = lambda cc, b, k=k: 0.3 + (A - 0.3) / (1 + (Cm[k] / cc) ** b)  # noqa: E731
        ref = curve_fit(f, c, y, p0=[1.5])[0][0]
        assert B[k] == pytest.approx(ref, rel=1e-4)


def test_paper_fit_recovers_noiseless_truth():
    c = np.linspace(1500, 8000, 30)
    y = 0.3 + (0.61 - 0.3) / (1 + (2540 / c) ** 1.92)
    res = paper_fit_arrays(c, y, 0.3, C_mid_grid=np.linspace(100, 40000, 400))
    assert res["A"] == pytest.approx(0.61, abs=0.0051)
    assert res["B"] == pytest.approx(1.92, rel=0.1)


def _reference_paper_fit(c, y, R0, A_grid, C_grid, B_grid):
    """The paper's grid fit written out directly: for each ``A``, every ``(C_mid, B)`` grid
    point's residual sum of squares point by point, the best ``B`` per ``C_mid`` refined by
    six Gauss-Newton steps, the best pair kept."""
    lc, lcm = np.log(c)[None, :], np.log(C_grid)[:, None]
    best = (np.inf, None)
    for A in A_grid:
        g = A - R0
        s = 0.5 * (1 + np.tanh(0.5 * B_grid[None, :, None] * (lc - lcm)[:, None, :]))
        B = B_grid[np.argmin(np.sum((y - R0 - g * s) ** 2, axis=-1), axis=1)]
        for _ in range(6):
            s = 0.5 * (1 + np.tanh(0.5 * B[:, None] * (lc - lcm)))
            J = g * s * (1 - s) * (lc - lcm)
            step = np.sum(J * (y - R0 - g * s), axis=1) / np.maximum(np.sum(J * J, axis=1), 1e-300)
            B = np.clip(B + step, B_grid[0], B_grid[-1])
        rss = np.sum((y - R0 - g * 0.5 * (1 + np.tanh(0.5 * B[:, None] * (lc - lcm)))) ** 2, axis=1)
        k = int(np.argmin(rss))
        if rss[k] < best[0]:
            best = (rss[k], (A, B[k], C_grid[k]))
    return best[1]


def test_paper_fit_equals_the_grid_fit_written_out_directly():
    """The fit computes the grid's sigmoids once for every ``A`` (the sum of squares is a
    parabola in ``A``); it must give what the point-by-point reference gives."""
    rng = np.random.default_rng(3)
    B_grid = np.exp(np.linspace(np.log(0.05), np.log(20), 120))
    A_grid, C_grid = np.round(np.arange(0.5, 0.8, 0.01), 3), np.linspace(200, 20_000, 40)
    for _ in range(4):
        c = np.sort(rng.uniform(300, 8000, 40))
        mid, slope = rng.uniform(1500, 6000), rng.uniform(1, 3)
        y = 0.3 + 0.3 / (1 + (mid / c) ** slope) + 0.01 * rng.standard_normal(40)
        res = paper_fit_arrays(c, y, 0.3, A_grid=A_grid, C_mid_grid=C_grid)
        ref = _reference_paper_fit(c, y, 0.3, A_grid, C_grid, B_grid)
        assert res["A"] == ref[0] and res["C_mid"] == ref[2]
        assert res["B"] == pytest.approx(ref[1], rel=1e-9)
