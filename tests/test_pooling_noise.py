"""The pooled sampler's random numbers: counted at trace time, drawn in two calls, handed out in order."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bayes_scalerl.models.pooling import Noise
from bayes_scalerl.models.scalerl import truncnorm_draw, truncnorm_quantile


def _moves(noise: Noise, x):
    """A stand-in for a sweep: two normal draws of different shapes and one uniform."""
    a = noise.normal((3,))
    u = noise.uniform((2, 2))
    b = noise.normal()
    return x + a.sum() + u.sum() + b


def test_sizes_count_what_a_function_takes_and_the_draws_are_handed_out_in_order():
    assert Noise.sizes(_moves, jnp.zeros(())) == (4, 4)
    normal, uniform = jnp.arange(4.0), 10.0 + jnp.arange(4.0)
    noise = Noise(normal, uniform)
    assert float(_moves(noise, 0.0)) == pytest.approx(float(normal.sum() + uniform.sum()))
    assert noise.used == {"normal": 4, "uniform": 4}
    with pytest.raises(ValueError, match="normal numbers exhausted"):
        noise.normal()


def test_repeat_gives_each_iteration_its_own_numbers():
    """``repeat`` equals the loop it replaces, each pass taking the next slice of the pool."""
    normal = jax.random.normal(jax.random.key(0), (12,))
    uniform = jax.random.uniform(jax.random.key(1), (12,))

    def step(noise, x):
        return 2.0 * x + noise.normal((2,)).sum() - noise.uniform((2,)).prod()

    scanned = Noise(normal, uniform).repeat(step, jnp.zeros(()), 3)
    looped = 0.0
    for i in range(3):  # repeat lays the pool out iteration by iteration
        looped = 2.0 * looped + normal[2 * i : 2 * i + 2].sum() - uniform[2 * i : 2 * i + 2].prod()
    assert float(scanned) == pytest.approx(float(looped), rel=1e-6)


def test_pools_have_the_right_distributions():
    """Normal and uniform pools: means and sds within 5 Monte Carlo standard errors."""
    n = 40_000
    normal, uniform = Noise.pools(jax.random.key(3), (n, n), 1)
    z, u = np.asarray(normal[0]), np.asarray(uniform[0])
    se = 1.0 / np.sqrt(n)
    assert abs(z.mean()) < 5 * se and abs(z.std() - 1.0) < 5 * se / np.sqrt(2)
    assert u.min() >= 0.0 and u.max() < 1.0
    assert abs(u.mean() - 0.5) < 5 * se * np.sqrt(1 / 12)
    assert abs(u.var() - 1 / 12) < 5 * se * np.sqrt(1 / 180)


def test_the_truncated_normal_quantile_is_the_draw_given_its_uniform():
    key, mean, sd, upper = jax.random.key(5), jnp.array([0.1, 0.3, -0.2]), jnp.array([0.05, 0.2, 0.1]), 0.5
    u = jax.random.uniform(key, (3,), dtype=jnp.result_type(float))
    drawn = truncnorm_draw(key, mean, sd, upper)
    np.testing.assert_array_equal(drawn, truncnorm_quantile(u, mean, sd, upper))
