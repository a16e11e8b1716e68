import jax.numpy as jnp
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from bayes_scalerl.models.curve import compute_to_reach, gain_fraction, linearised, scalerl_curve

params = st.fixed_dictionaries(
    {
        "A": st.floats(0.3, 1.0),
        "R0": st.floats(0.0, 0.29),
        "B": st.floats(0.2, 8.0),
        "C_mid": st.floats(10.0, 1e6),
    }
)


@given(params, st.lists(st.floats(0.0, 1e9), min_size=2, max_size=30))
@settings(max_examples=200, deadline=None)
def test_monotone_and_bounded(p, cs):
    c = np.sort(np.asarray(cs))
    r = scalerl_curve(c, **p)
    assert np.all(np.isfinite(r))
    assert np.all(np.diff(r) >= -1e-12)
    assert np.all(r >= p["R0"] - 1e-12) and np.all(r <= p["A"] + 1e-12)


@given(params, st.floats(1e-3, 1e7))
@settings(max_examples=200, deadline=None)
def test_matches_power_form(p, c):
    power = p["R0"] + (p["A"] - p["R0"]) / (1 + (p["C_mid"] / c) ** p["B"])
    assert np.isclose(scalerl_curve(c, **p), power, rtol=1e-10, atol=1e-12)


@given(params, st.floats(0.01, 0.99))
@settings(max_examples=200, deadline=None)
def test_compute_to_reach_inverts(p, frac):
    target = p["R0"] + frac * (p["A"] - p["R0"])
    c = compute_to_reach(target, **p)
    if np.isfinite(c) and 0 < c < 1e300:
        assert np.isclose(scalerl_curve(c, **p), target, rtol=1e-8, atol=1e-10)


def test_zero_compute_gives_R0_and_never_reached_is_inf():
    assert scalerl_curve(0.0, 0.6, 2.0, 1000.0, 0.2) == 0.2
    assert np.isinf(compute_to_reach(0.7, 0.6, 2.0, 1000.0, 0.2))
    assert compute_to_reach(0.4, 0.6, 2.0, 1000.0, 0.4) == 0.0


@given(params)
@settings(max_examples=100, deadline=None)
def test_linearised_slope_is_B(p):
    c = p["C_mid"] * np.array([0.5, 1.0, 2.0])
    r = scalerl_curve(c, **p)
    x, y = linearised(c, r, p["A"], p["R0"])
    ok = np.isfinite(y)
    if ok.sum() >= 2:
        slope = np.polyfit(x[ok], y[ok], 1)[0]
        assert np.isclose(slope, p["B"], rtol=1e-5)


def test_numpy_and_jax_agree(float64):
    c = np.array([0.0, 10.0, 1e3, 1e5])
    a = gain_fraction(c, 1.7, 2500.0)
    b = np.asarray(gain_fraction(jnp.asarray(c), 1.7, 2500.0))
    assert b.dtype == np.float64
    np.testing.assert_allclose(a, b, rtol=1e-12)
