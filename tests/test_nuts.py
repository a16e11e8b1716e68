"""The lane-queue NUTS engine (:mod:`bayes_scalerl.engine.nuts`) piece by piece, and its exactness.

The exactness test starts 16,384 chains from exact draws of a correlated Gaussian and runs
a few NUTS transitions with a fixed step size and mass matrix: a correct transition kernel
leaves the target invariant, so the draws after them are still exact draws, and their
moments and the distribution of their squared Mahalanobis distance are known. A kernel
that is slightly wrong (a wrong weight in the multinomial or the progressive sampling)
moves the draws away from the target at once; on the draws of a warm-up-adapted fit such a
bias hides among the Monte Carlo errors.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from bayes_scalerl.engine import nuts

# ---- the exactness of the transition kernel

N_CHAINS = 16_384
N_TRANSITIONS = 4
# a 4-d Gaussian: two pairs with correlation 0.9, scales 1, 2, 0.5 and 1.5
SCALES = np.array([1.0, 2.0, 0.5, 1.5])
CORR = np.kron(np.eye(2), np.array([[1.0, 0.9], [0.9, 1.0]]))
COV = CORR * np.outer(SCALES, SCALES)
PREC = np.linalg.inv(COV)
# the fixed mass matrices: the target's variances (what a diagonal adaptation finds), and a
# dense one that is neither diagonal nor the target's covariance (correlations 0.45)
INV_MASS_DIAG = np.diag(COV).copy()
INV_MASS_DENSE = 0.5 * (COV + np.diag(np.diag(COV)))


def _gaussian_potential(z, data):
    return 0.5 * z @ (jnp.asarray(PREC) @ z) + 0.0 * data


def _fixed_kernel_draws(
    inv_mass: np.ndarray, step_size: float | np.ndarray, seed: int = 0, n_chains: int = N_CHAINS
) -> tuple[np.ndarray, float]:
    """Exact draws of the Gaussian, then ``N_TRANSITIONS`` NUTS transitions from each.

    Returns the draws after the last transition, shape ``(n_chains, 4)``, and the mean
    acceptance statistic of all transitions.
    """
    rng = np.random.default_rng(seed)
    z0 = rng.standard_normal((n_chains, 4)) @ np.linalg.cholesky(COV).T
    dense = inv_mass.ndim == 2
    settings = nuts.NutsSettings(0, N_TRANSITIONS, 0.8, 10, dense, n_chains)
    with jax.enable_x64(True):
        keys = jax.random.split(jax.random.key(seed), n_chains)

        @jax.jit
        def run(keys, z0, inv):
            return nuts.sample_queue(
                _gaussian_potential,
                settings,
                keys,
                z0,
                jnp.zeros(n_chains),
                jnp.int32(n_chains),
                step_size=jnp.asarray(step_size),
                inverse_mass_matrix=inv,
            )

        out = run(keys, jnp.asarray(z0), jnp.asarray(inv_mass))
        z = np.asarray(out["z"][:, -1])
        np.testing.assert_array_equal(np.asarray(out["step_size"]), np.broadcast_to(step_size, n_chains))
        return z, float(np.mean(out["accept_prob"]))


def _exactness_stats(z: np.ndarray) -> dict[str, float]:
    """How far draws ``z`` (independent, shape ``(n, 4)``) are from the Gaussian.

    ``mean_z`` and ``moment_z``: the largest error of a mean ``E z_i`` and of a second
    moment ``E z_i z_j``, in units of its Monte Carlo standard error (``sqrt(S_ii / n)``
    and ``sqrt((S_ii S_jj + S_ij^2) / n)`` for exact draws); ``ks_p``: the p-value of the
    Kolmogorov-Smirnov test of the squared Mahalanobis distances against chi-square(4).
    """
    n = z.shape[0]
    mean_z = np.abs(z.mean(axis=0)) / np.sqrt(np.diag(COV) / n)
    second = z.T @ z / n
    se = np.sqrt((np.outer(np.diag(COV), np.diag(COV)) + COV**2) / n)
    moment_z = np.abs(second - COV) / se
    m2 = np.einsum("ni,ij,nj->n", z, PREC, z)
    return {
        "mean_z": float(mean_z.max()),
        "moment_z": float(moment_z[np.triu_indices(4)].max()),
        "ks_p": float(stats.kstest(m2, stats.chi2(4).cdf).pvalue),
    }


# Each chain its own step size, spread evenly over [0.2, 0.5]: every chain's kernel leaves
# the target invariant, and the draws check the whole range at once (measured: the bias of a
# broken kernel changes with the step size; one step size can miss it). Mean acceptance
# 0.85 (diagonal) and 0.93 (dense).
STEP_SIZES = np.linspace(0.2, 0.5, N_CHAINS)


@pytest.mark.parametrize("inv_mass", [INV_MASS_DIAG, INV_MASS_DENSE], ids=["diagonal", "dense"])
def test_fixed_nuts_transitions_leave_a_correlated_gaussian_invariant(inv_mass):
    """Exact draws stay exact after NUTS transitions with a fixed step size and mass matrix.

    Tolerances: 4 means and 10 second moments, each within 4.5 Monte Carlo standard errors
    (for normal errors a false alarm among all 14 has odds of 1 in 10,000: 16,384
    independent chains); the KS test fails at p < 0.001. Measured with kernels broken on
    purpose, the KS test catches each (p below 1e-6): uniform instead of multinomial
    sampling within subtrees, subtree log-weights clipped at 0, leaf log-weights clipped
    at 0 (the moments alone miss them: at most 3.3 standard errors).
    """
    z, accept = _fixed_kernel_draws(inv_mass, STEP_SIZES)
    s = _exactness_stats(z)
    print(f"acceptance {accept:.3f}, {s}")
    assert s["mean_z"] < 4.5, s
    assert s["moment_z"] < 4.5, s
    assert s["ks_p"] > 1e-3, s


def _uniform_within_subtree(grow):
    """A broken ``_grow_subtree``: leaf k taken with probability 1 / k, whatever its weight."""

    def broken(sub, leaf, first, right, u):
        flat = grow(
            sub._replace(weight=jnp.log(jnp.maximum(sub.n_prop, 1).astype(leaf.weight.dtype))),
            leaf._replace(weight=jnp.zeros_like(leaf.weight)),
            first,
            right,
            u,
        )
        return flat._replace(weight=grow(sub, leaf, first, right, u).weight)

    return broken


def _leaf_weight_clipped(leaf_fn):
    """A broken ``_leaf``: log weights clipped at 0 (leaves that gained energy count as if they had not)."""

    def broken(*args, **kwargs):
        out = leaf_fn(*args, **kwargs)
        return out._replace(weight=jnp.minimum(out.weight, 0.0))

    return broken


@pytest.mark.parametrize(
    "name, make", [("_grow_subtree", _uniform_within_subtree), ("_leaf", _leaf_weight_clipped)]
)
def test_the_exactness_check_catches_a_broken_kernel(monkeypatch, name, make):
    """The check above has power: a kernel broken on purpose fails its KS test.

    Measured (diagonal mass, this check's 16,384 chains): uniform choice within subtrees
    p = 6e-115, leaf log-weights clipped at 0 p = 6e-21 (the correct kernel: p = 0.67);
    the moments alone stay under 2.6 standard errors, so only the KS test is asserted.
    """
    monkeypatch.setattr(nuts, name, make(getattr(nuts, name)))
    z, _ = _fixed_kernel_draws(INV_MASS_DIAG, STEP_SIZES)
    assert _exactness_stats(z)["ks_p"] < 1e-6


# ---- the momentum normals


def test_std_normal_is_finite_at_the_extreme_bit_patterns():
    """All-ones words give a finite normal, not +inf; every other pattern is unchanged.

    The 53 bits ``k`` stand for the uniform ``(k + 0.5) / 2**53``, which float64 rounds
    to exactly 1.0 for ``k = 2**53 - 1``. The cap at the largest float64 below 1 changes
    that one pattern only, so the draws stay those of the uncapped map (0.1's).
    """
    from scipy.special import ndtri

    with jax.enable_x64(True):
        words = np.array([0, 0xFFFFFFFF, 0x7FFFFFFF, 0x80000000, 0x12345678, 0xEDCBA987], np.uint32)
        hi, lo = np.meshgrid(words, words, indexing="ij")
        hi, lo = hi.ravel(), lo.ravel()
        z = np.asarray(nuts._std_normal(jnp.asarray(hi), jnp.asarray(lo), jnp.float64))
        k = (hi >> 5).astype(np.float64) * 2.0**26 + (lo >> 6).astype(np.float64)
        uncapped = np.asarray(jax.scipy.special.ndtri((jnp.asarray(k) + 0.5) * 2.0**-53))
    assert np.all(np.isfinite(z))
    ones = (hi == 0xFFFFFFFF) & (lo == 0xFFFFFFFF)
    assert np.isinf(uncapped[ones]).all()  # what the cap prevents
    assert z[ones] == pytest.approx(ndtri(1.0 - 2.0**-53), rel=1e-12)  # 8.21
    assert z[(hi == 0) & (lo == 0)] == pytest.approx(ndtri(2.0**-54), rel=1e-12)  # -8.29
    np.testing.assert_array_equal(z[~ones], uncapped[~ones])  # bit for bit
    # the low 5 bits of hi and 6 of lo are not used
    assert np.all(np.diff(z[np.argsort(k, kind="stable")]) >= 0)  # monotone in k
    # scipy's quantile of the exact midpoint; in the upper half float64 rounds u by up to
    # 2**-53, which moves the quantile by up to 2**-53 / phi(z) (1.7e-8 at z = 5.8)
    from scipy.stats import norm

    exact = np.where(k >= 2.0**52, -ndtri((2.0**53 - k - 0.5) / 2.0**53), ndtri((k + 0.5) / 2.0**53))
    bound = np.where(k >= 2.0**52, 2.0**-53 / norm.pdf(exact), 0.0) + 1e-12 * np.abs(exact) + 1e-15
    assert np.all(np.abs(z - exact)[~ones] <= bound[~ones])


# ---- the pieces of a leapfrog tick, one by one


def _leaf_at(j: int, weight: float, d: int = 2) -> nuts._Leaf:
    """A made-up leaf number ``j`` with log weight ``weight`` (its arrays tell which leaf it is)."""
    f = jnp.float64
    return nuts._Leaf(
        z=jnp.full(d, j, f),
        r=jnp.arange(d, dtype=f) + 10.0 * j,
        pe=jnp.asarray(j, f),
        grad=jnp.full(d, -j, f),
        energy=jnp.asarray(100.0 + j, f),
        weight=jnp.asarray(weight, f),
        diverging=jnp.asarray(False),
        accept=jnp.asarray(0.1 * j, f),
    )


def _empty_tree(d: int = 2) -> nuts._Tree:
    """A subtree before its first leaf (``n_prop == 0``, as the engine starts one)."""
    zero = jnp.zeros(d, jnp.float64)
    tree = nuts._leaf_tree(zero, zero, 0.0, zero, 0.0, 0.0, False, 0.0)
    return tree._replace(n_prop=jnp.asarray(0, jnp.int32))


def _gaussian_leapfrog(z, r, eps, inv_mass):
    """One leapfrog step on the module's Gaussian, in NumPy."""
    r = r - 0.5 * eps * PREC @ z
    z = z + eps * inv_mass * r
    r = r - 0.5 * eps * PREC @ z
    return z, r, 0.5 * z @ PREC @ z + 0.5 * r @ (inv_mass * r)


@pytest.mark.parametrize("eps", [0.3, -0.3])
def test_leaf_is_one_leapfrog_step_weighted_by_its_energy_error(eps):
    rng = np.random.default_rng(1)
    z, r = rng.standard_normal(4), rng.standard_normal(4)
    with jax.enable_x64(True):

        def pot(x):
            return _gaussian_potential(x, 0.0)

        pe, g = jax.value_and_grad(pot)(jnp.asarray(z))
        energy0 = 1.7
        leaf = nuts._leaf(
            pot, jnp.asarray(INV_MASS_DIAG), jnp.asarray(eps), jnp.asarray(z), jnp.asarray(r), pe, g, energy0
        )
        z1, r1, energy1 = _gaussian_leapfrog(z, r, eps, INV_MASS_DIAG)
        np.testing.assert_allclose(leaf.z, z1, rtol=1e-13)
        np.testing.assert_allclose(leaf.r, r1, rtol=1e-13)
        np.testing.assert_allclose(leaf.energy, energy1, rtol=1e-13)
        np.testing.assert_allclose(leaf.weight, energy0 - energy1, rtol=1e-12)
        np.testing.assert_allclose(leaf.accept, min(1.0, np.exp(energy0 - energy1)), rtol=1e-12)
        assert not leaf.diverging
        # an energy error above 1000 diverges; a NaN energy diverges with zero weight
        far = nuts._leaf(
            pot,
            jnp.asarray(INV_MASS_DIAG),
            jnp.asarray(eps),
            jnp.asarray(z),
            jnp.asarray(r),
            pe,
            g,
            energy1 - 1000.5,
        )
        assert far.diverging and far.weight == pytest.approx(-1000.5)

        def nan_pot(x):
            return jnp.sum(x) * jnp.nan

        bad = nuts._leaf(
            nan_pot, jnp.asarray(INV_MASS_DIAG), jnp.asarray(eps), jnp.asarray(z), jnp.asarray(r), pe, g, 0.0
        )
        assert bad.diverging and bad.weight == -np.inf and bad.accept == 0.0


def _take_fraction(fn, n_grid: int = 100_000) -> float:
    """The fraction of a uniform grid on (0, 1) for which ``fn(u)`` is True (exact to 1/n_grid)."""
    u = (jnp.arange(n_grid, dtype=jnp.float64) + 0.5) / n_grid
    return float(jnp.mean(jax.vmap(fn)(u)))


@pytest.mark.parametrize("right", [True, False])
def test_grow_subtree_samples_leaves_in_proportion_to_their_weights(right):
    """Multinomial sampling: after n leaves, leaf k is the proposal with probability w_k / sum(w).

    Leaf j replaces the proposal with probability p_j (measured on a grid of 100,000
    uniforms: exact to 1e-5), so leaf k ends as the proposal with probability
    ``p_k * prod_{j > k} (1 - p_j)``: it must equal the softmax of the log weights.
    """
    log_w = [0.3, -1.2, 0.8, -0.1, 0.5]
    with jax.enable_x64(True):
        sub = _empty_tree()
        p = []
        for j, w in enumerate(log_w):
            first = jnp.asarray(j == 0)
            leaf = _leaf_at(j, w)
            p.append(
                _take_fraction(
                    lambda u, sub=sub, leaf=leaf, first=first: jnp.array_equal(
                        nuts._grow_subtree(sub, leaf, first, jnp.asarray(right), u).z_prop, leaf.z
                    )
                )
            )
            sub = nuts._grow_subtree(sub, leaf, first, jnp.asarray(right), jnp.asarray(0.5))
        assert p[0] == 1.0
        final = [p[k] * np.prod([1 - q for q in p[k + 1 :]]) for k in range(len(log_w))]
        np.testing.assert_allclose(final, np.exp(log_w) / np.sum(np.exp(log_w)), atol=5e-5)
        # the subtree's sums and edges
        n = len(log_w)
        np.testing.assert_allclose(sub.weight, np.log(np.sum(np.exp(log_w))), rtol=1e-13)
        np.testing.assert_allclose(sub.r_sum, sum(np.arange(2) + 10.0 * j for j in range(n)))
        np.testing.assert_allclose(sub.sum_accept, 0.1 * sum(range(n)))
        assert int(sub.n_prop) == n
        inner, outer = (sub.z_left, sub.z_right) if right else (sub.z_right, sub.z_left)
        np.testing.assert_array_equal(inner, [0.0, 0.0])  # the first leaf
        np.testing.assert_array_equal(outer, [n - 1.0, n - 1.0])  # the newest


@pytest.mark.parametrize("w_tree, w_sub", [(1.0, 0.2), (0.2, 1.0)])
def test_merge_subtree_moves_with_probability_min_1_weight_ratio(w_tree, w_sub):
    """Biased progressive sampling: the subtree's proposal wins w.p. ``min(1, w_sub / w_tree)``.

    Never when the subtree turned or diverged (it still extends the tree's edges and sums),
    and nothing changes while the subtree is unfinished.
    """
    with jax.enable_x64(True):
        tree = nuts._leaf_tree(*(jnp.zeros(2),) * 2, 0.0, jnp.zeros(2), 0.0, w_tree, False, 0.4)
        tree = tree._replace(n_prop=jnp.asarray(3, jnp.int32))
        leaf = _leaf_at(1, w_sub)
        sub = nuts._grow_subtree(_empty_tree(), leaf, jnp.asarray(True), jnp.asarray(True), jnp.asarray(0.5))
        yes, no = jnp.asarray(True), jnp.asarray(False)

        def moved(done, turning, sub, right=yes):
            return lambda u: jnp.array_equal(
                nuts._merge_subtree(tree, sub, done, turning, right, u).z_prop, sub.z_prop
            )

        assert _take_fraction(moved(yes, no, sub)) == pytest.approx(
            min(1.0, np.exp(w_sub - w_tree)), abs=1e-5
        )
        assert _take_fraction(moved(yes, yes, sub)) == 0.0
        assert _take_fraction(moved(yes, no, sub._replace(diverging=yes))) == 0.0
        assert _take_fraction(moved(no, no, sub)) == 0.0
        for right in (yes, no):
            merged = nuts._merge_subtree(tree, sub, yes, yes, right, jnp.asarray(0.0))
            np.testing.assert_allclose(merged.weight, np.logaddexp(w_tree, w_sub))
            np.testing.assert_allclose(merged.r_sum, tree.r_sum + sub.r_sum)
            assert int(merged.n_prop) == 4 and float(merged.sum_accept) == pytest.approx(0.5)
            moved_edge, kept_edge = (
                (merged.z_right, merged.z_left) if right else (merged.z_left, merged.z_right)
            )
            np.testing.assert_array_equal(moved_edge, leaf.z)
            np.testing.assert_array_equal(kept_edge, tree.z_left)
        unfinished = nuts._merge_subtree(tree, sub, no, no, yes, jnp.asarray(0.0))
        jax.tree.map(np.testing.assert_array_equal, unfinished, tree)


def test_ckpt_range_is_numpyros():
    from numpyro.infer.hmc_util import _leaf_idx_to_ckpt_idxs

    n = jnp.arange(256, dtype=jnp.int32)
    for ours, theirs in zip(nuts._ckpt_range(n), _leaf_idx_to_ckpt_idxs(n), strict=True):
        np.testing.assert_array_equal(ours, theirs)


def _turning_np(inv_mass, r_block):
    """The generalised no-U-turn criterion of a run of leaves' momenta, in NumPy."""
    rho = r_block.sum(axis=0) - 0.5 * (r_block[0] + r_block[-1])
    v = (lambda r: inv_mass @ r) if inv_mass.ndim == 2 else (lambda r: inv_mass * r)
    return v(r_block[0]) @ rho <= 0 or v(r_block[-1]) @ rho <= 0


@pytest.mark.parametrize("inv_mass", [INV_MASS_DIAG, INV_MASS_DENSE], ids=["diagonal", "dense"])
def test_subtree_turning_checks_every_balanced_subtree_that_a_leaf_completes(inv_mass):
    """The checkpointed iterative check equals the recursive definition.

    After leaf ``n`` (from 0) of a subtree, the balanced sub-subtrees that end with it
    (``2**j`` leaves, ``j >= 1``, ``2**j`` dividing ``n + 1``) are checked, each with the
    generalised criterion on its own momenta; for 32 leaves of 20 random trajectories.
    """
    rng = np.random.default_rng(2)
    seen = set()
    with jax.enable_x64(True):
        check = jax.jit(nuts._subtree_turning)
        for _ in range(20):
            # momenta that mostly point one way: some sub-subtrees turn, others do not
            r = np.array([2.0, 1.0, 0.0, -1.0]) + 1.5 * rng.standard_normal((32, 4))
            r_ckpts = r_sum_ckpts = jnp.zeros((6, 4))
            for n in range(32):
                sub = nuts._leaf_tree(*(jnp.zeros(4),) * 2, 0.0, jnp.zeros(4), 0.0, 0.0, False, 0.0)
                sub = sub._replace(
                    r_sum=jnp.asarray(r[: n + 1].sum(axis=0)), n_prop=jnp.asarray(n + 1, jnp.int32)
                )
                turning, r_ckpts, r_sum_ckpts = check(
                    jnp.asarray(inv_mass), sub, jnp.asarray(r[n]), r_ckpts, r_sum_ckpts
                )
                sizes = [2**j for j in range(1, 6) if (n + 1) % 2**j == 0]
                expected = any(_turning_np(inv_mass, r[n + 1 - s : n + 1]) for s in sizes)
                assert bool(turning) == expected, (n, sizes)
                seen.add(expected)
    assert seen == {True, False}


def test_adapt_estimates_the_mass_matrix_in_the_slow_window_and_stops_after_warmup():
    """Welford's estimate of the slow window's draws becomes the inverse mass matrix.

    NumPyro's schedule for 60 warm-up iterations: a fast window 0-8, the slow window
    9-53, a fast window 54-59. At the end of the slow window the inverse mass matrix is
    Stan's regularised covariance of its 45 draws; an unfinished iteration, and any after
    the warm-up, change nothing.
    """
    from numpyro.infer.hmc_util import build_adaptation_schedule

    settings = nuts.NutsSettings(60, 10, 0.8, 10, True, 1)
    schedule = jnp.asarray(build_adaptation_schedule(60), jnp.int32)
    draws = np.random.default_rng(3).standard_normal((70, 4)) @ np.linalg.cholesky(COV).T
    with jax.enable_x64(True):
        a = nuts._prototype_lane(4, settings, jnp.float64).adapt._replace(step_size=jnp.asarray(0.5))
        adapt = jax.jit(nuts._adapt, static_argnums=5)
        inv_masses = []
        for it in range(70):
            args = (jnp.asarray(0.7), jnp.asarray(draws[it]))
            same, _ = adapt(a, *args, jnp.asarray(False), jnp.asarray(it), settings, schedule)
            jax.tree.map(np.testing.assert_array_equal, same, a)
            new, ended = adapt(a, *args, jnp.asarray(True), jnp.asarray(it), settings, schedule)
            assert bool(ended) == (it == 53)
            if it >= 60:
                jax.tree.map(np.testing.assert_array_equal, new, a)
            else:
                assert float(new.step_size) != float(a.step_size)
            a = nuts._window_end(new, True) if ended else new
            inv_masses.append(np.asarray(a.inv_mass))
    n = 45
    cov = np.cov(draws[9:54].T)
    expected = n / (n + 5) * cov + 1e-3 * 5 / (n + 5) * np.eye(4)
    np.testing.assert_allclose(inv_masses[53], expected, rtol=1e-12)
    np.testing.assert_array_equal(inv_masses[52], np.eye(4))
    np.testing.assert_array_equal(inv_masses[-1], inv_masses[53])


def test_record_layout():
    """A draw's row: ``z``, potential energy, diverging, leapfrog steps, acceptance, energy."""
    with jax.enable_x64(True):
        zero = jnp.zeros(2)
        tree = nuts._leaf_tree(jnp.asarray([1.0, 2.0]), zero, 3.0, zero, 4.0, 0.0, jnp.asarray(True), 0.0)
        row = nuts._record(tree._replace(pe_prop=jnp.asarray(3.0), energy_prop=jnp.asarray(4.0)), 0.25)
    np.testing.assert_array_equal(row, [1.0, 2.0, 3.0, 1.0, 1.0, 0.25, 4.0])


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(step_size=np.ones(3)), "step_size"),
        (dict(inverse_mass_matrix=np.ones(4)), "dense"),
        (dict(inverse_mass_matrix=np.ones((5, 4, 4))), "inverse_mass_matrix"),
    ],
)
def test_sample_queue_rejects_misshapen_step_size_and_mass(kw, match):
    settings = nuts.NutsSettings(0, 2, 0.8, 4, True, 2)
    with jax.enable_x64(True), pytest.raises(ValueError, match=match):
        nuts.sample_queue(
            _gaussian_potential,
            settings,
            jax.random.split(jax.random.key(0), 2),
            jnp.zeros((2, 4)),
            jnp.zeros(2),
            jnp.int32(2),
            **kw,
        )
