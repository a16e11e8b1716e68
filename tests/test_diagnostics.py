"""The vectorised diagnostics equal ArviZ's own (one run at a time) to 1e-10."""

from __future__ import annotations

import json
import warnings

import arviz_stats as azs
import numpy as np
import pytest
import xarray as xr

from bayes_scalerl.posterior.diagnostics import (
    TAIL_PROB,
    bfmi,
    convergence,
    ess_bulk,
    ess_tail,
    rhat,
    run_diagnostics,
    sampler_diagnostics,
)

RTOL = 1e-10


def _ar1(rng, n_chain, n_draw, phi, mean=0.0, scale=1.0):
    """AR(1) chains of shape (chain, draw)."""
    eps = rng.standard_normal((n_chain, n_draw))
    x = np.empty_like(eps)
    x[:, 0] = eps[:, 0] / np.sqrt(max(1 - phi**2, 1e-3))
    for t in range(1, n_draw):
        x[:, t] = phi * x[:, t - 1] + eps[:, t]
    return mean + scale * x


def _draws(seed=0, n_chain=4, n_draw=200):
    """(chain, draw, run): AR structure, a stuck chain, shifted chains, ties, a constant run."""
    rng = np.random.default_rng(seed)
    runs = [
        _ar1(rng, n_chain, n_draw, 0.0),
        _ar1(rng, n_chain, n_draw, 0.5, mean=3.0, scale=0.1),
        _ar1(rng, n_chain, n_draw, 0.95),
        _ar1(rng, n_chain, n_draw, -0.7),
        _ar1(rng, n_chain, n_draw, 0.3) + np.arange(n_chain)[:, None] * 0.8,  # different chain means
        np.exp(_ar1(rng, n_chain, n_draw, 0.8)),  # skewed
        np.round(_ar1(rng, n_chain, n_draw, 0.6), 1),  # many ties
        np.full((n_chain, n_draw), 0.25),  # constant
    ]
    stuck = _ar1(rng, n_chain, n_draw, 0.4)
    stuck[1] = stuck[1, 0]  # one chain never moves
    runs.append(stuck)
    alt = rng.standard_normal((n_chain, n_draw)) * 0.1 + np.where(np.arange(n_draw) % 2, 1.0, -1.0)
    runs.append(alt)  # antithetic: negative lag-1 autocorrelation near -1
    return np.stack(runs, axis=-1)


def _arviz(x, func, **kw):
    """ArviZ on a (chain, draw, run) array, the way the package used to call it."""
    ds = xr.Dataset({"x": (("chain", "draw", "run"), x)})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # ArviZ's 0/0 on constant draws
        return func(ds, **kw)["x"].values


def _close(a, b):
    np.testing.assert_allclose(a, b, rtol=RTOL, atol=0, equal_nan=True)


@pytest.mark.parametrize(
    ("seed", "n_chain", "n_draw", "dtype"),
    [(0, 4, 200, float), (1, 4, 201, float), (2, 2, 57, float), (3, 4, 300, np.float32), (4, 3, 9, float)],
)
def test_equal_to_arviz(seed, n_chain, n_draw, dtype):
    x = _draws(seed, n_chain, n_draw).astype(dtype)
    _close(rhat(x), _arviz(x, azs.rhat))
    _close(ess_bulk(x), _arviz(x, azs.ess, method="bulk"))
    _close(ess_tail(x), _arviz(x, azs.ess, method="tail"))
    _close(ess_bulk(x, relative=True), _arviz(x, azs.ess, method="bulk", relative=True))
    _close(ess_tail(x, prob=(0.05, 0.95)), _arviz(x, azs.ess, method="tail", prob=(0.05, 0.95)))
    _close(ess_tail(x, prob=0.9), _arviz(x, azs.ess, method="tail", prob=0.9))
    both = convergence(x)
    _close(both["r_hat"], rhat(x))
    _close(both["ess_bulk"], ess_bulk(x))
    _close(both["ess_tail"], ess_tail(x, prob=TAIL_PROB))


@pytest.mark.parametrize("n_draw", [3, 4, 5, 6, 7, 8, 10, 13])
def test_short_chains_equal_to_arviz(n_draw):
    x = _draws(5, 4, n_draw)
    _close(rhat(x), _arviz(x, azs.rhat))
    _close(ess_bulk(x), _arviz(x, azs.ess, method="bulk"))
    _close(ess_tail(x), _arviz(x, azs.ess, method="tail"))


def test_nan_and_single_chain():
    x = _draws(6, 4, 100)
    x[2, 5, 3] = np.nan
    out = convergence(x)
    assert np.isnan(out["r_hat"][3]) and np.isnan(out["ess_bulk"][3]) and np.isnan(out["ess_tail"][3])
    _close(out["r_hat"], _arviz(x, azs.rhat))
    _close(out["ess_bulk"], _arviz(x, azs.ess, method="bulk"))
    one = x[:1]
    assert np.isnan(rhat(one)).all()
    _close(ess_bulk(one), _arviz(one, azs.ess, method="bulk"))
    _close(ess_tail(one), _arviz(one, azs.ess, method="tail"))


def test_batch_shapes():
    x = _draws(7, 4, 120)
    x4 = np.stack([x, x[..., ::-1]], axis=-1)  # (chain, draw, run, 2)
    out = convergence(x4)
    assert out["r_hat"].shape == (x.shape[-1], 2)
    _close(out["r_hat"][:, 1], rhat(x)[::-1])
    _close(out["ess_tail"][:, 0], ess_tail(x))
    assert np.shape(rhat(x[..., 0])) == ()
    _close(rhat(x[..., 0]), azs.rhat(x[..., 0]))


def test_bfmi_equal_to_arviz():
    rng = np.random.default_rng(8)
    energy = np.stack([_ar1(rng, 4, 300, phi) for phi in (0.0, 0.5, 0.9)], axis=-1)
    per_run = bfmi(energy)
    assert per_run.shape == (4, 3)
    for k in range(3):
        _close(per_run[:, k], azs.bfmi(energy[..., k]))
    # the per-run table keeps the population variance: a factor n / (n - 1)
    _close(bfmi(energy, ddof=0), per_run * 300 / 299)


def _tree(seed=9, n_chain=4, n_draw=150):
    rng = np.random.default_rng(seed)
    a = _draws(seed, n_chain, n_draw)
    n_run = a.shape[-1]
    cdr = ("chain", "draw", "run")
    b = np.stack([_ar1(rng, n_chain, n_draw, 0.2) for _ in range(n_run)], -1)
    post = {"A": (cdr, a), "B": (cdr, b), "mu_A": (("chain", "draw"), _ar1(rng, n_chain, n_draw, 0.5))}
    runs = [f"r{k}" for k in range(n_run)]
    energy = _ar1(rng, n_chain, n_draw, 0.3)[..., None] + rng.standard_normal((n_chain, n_draw, n_run))
    diverging = np.zeros((n_chain, n_draw, n_run), bool)
    diverging[0, 3, 2] = True
    in_fit = rng.random((n_run, 7)) < 0.7
    return xr.DataTree.from_dict(
        {
            "posterior": xr.Dataset(post, coords={"run": runs}),
            "sample_stats": xr.Dataset(
                {"energy": (cdr, energy), "diverging": (cdr, diverging)},
                coords={"run": runs},
            ),
            "constant_data": xr.Dataset({"in_fit": (("run", "point"), in_fit)}, coords={"run": runs}),
        }
    )


def test_run_diagnostics_equal_to_arviz():
    dt = _tree()
    names = ["A", "B"]
    df = run_diagnostics(dt, names)
    post = dt["posterior"].to_dataset()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        rh = azs.rhat(post, var_names=names)
        eb = azs.ess(post, var_names=names, method="bulk")
        et = azs.ess(post, var_names=names, method="tail")
    r = np.max(np.stack([rh[v].values for v in names]), axis=0)
    eb = np.min(np.stack([eb[v].values for v in names]), axis=0)
    et = np.min(np.stack([et[v].values for v in names]), axis=0)
    _close(df["r_hat_max"].to_numpy(), r)
    _close(df["ess_bulk_min"].to_numpy(), eb)
    _close(df["ess_tail_min"].to_numpy(), et)
    energy = dt["sample_stats"]["energy"].values
    e_bfmi = np.stack([azs.bfmi(energy[..., k]) for k in range(energy.shape[-1])], -1)
    _close(df["bfmi_min"].to_numpy(), np.min(e_bfmi * energy.shape[1] / (energy.shape[1] - 1), axis=0))
    assert df["divergences"].tolist() == [0, 0, 1] + [0] * (len(df) - 3)
    assert df["n_points"].tolist() == dt["constant_data"]["in_fit"].values.sum(1).tolist()
    rule = (df["r_hat_max"] <= 1.01) & (df["ess_bulk_min"] >= 100) & (df["divergences"] == 0)
    assert (df["converged"] == rule).all()
    # precomputed values are used as given
    pre = {v: convergence(post[v].values) for v in names}
    cached = run_diagnostics(dt, names, convergence_by_var=pre)
    assert cached.equals(df)


def test_sampler_diagnostics_equal_to_arviz():
    dt = _tree()
    df = sampler_diagnostics(dt).set_index("variable")
    post = dt["posterior"].to_dataset()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        rh = azs.rhat(post)
        eb, et = azs.ess(post, method="bulk"), azs.ess(post, method="tail")
        expected = {v: (float(rh[v].max()), float(eb[v].min()), float(et[v].min())) for v in post.data_vars}
    for v, (r, b, t) in expected.items():
        _close(df.loc[v, ["r_hat_max", "ess_bulk_min", "ess_tail_min"]].to_numpy(float), [r, b, t])
    assert df.loc["A", "size"] == post.sizes["run"] and df.loc["mu_A", "size"] == 1
    assert (df["divergences"] == 1).all()


def test_fit_result_summary_and_cached_diagnostics():
    from bayes_scalerl.posterior.results import FitResult

    dt = _tree(seed=10)
    post = dt["posterior"].to_dataset()
    names = ["A", "B", "C_mid", "sigma"]
    post = post.assign(C_mid=post["A"] * 100.0, sigma=np.abs(post["B"]) + 0.01).drop_vars("mu_A")
    groups = {g: dt[g].to_dataset() for g in ("sample_stats", "constant_data")}
    dt = xr.DataTree.from_dict({"posterior": post, **groups})
    dt.attrs["bayes_scalerl_settings"] = json.dumps({"priors": {}})
    res = FitResult(dt)
    s = res.summary()
    assert list(s.columns) == ["run", "param", "mean", "sd", "q05", "q50", "q95", "r_hat", "ess_bulk"]
    assert s["param"].tolist() == [v for v in names for _ in res.run_names]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        rh, eb = azs.rhat(post, var_names=names), azs.ess(post, var_names=names, method="bulk")
    for v in names:
        rows = s[s["param"] == v]
        _close(rows["r_hat"].to_numpy(), rh[v].values)
        _close(rows["ess_bulk"].to_numpy(), eb[v].values)
        d = res.draws(v)
        _close(rows["mean"].to_numpy(), [r.mean() for r in d])
        _close(rows["sd"].to_numpy(), [r.std(ddof=1) for r in d])
        _close(rows["q05"].to_numpy(), np.quantile(d, 0.05, axis=1))
    first = res.diagnostics()
    assert first.equals(run_diagnostics(dt, names))
    first.loc[0, "r_hat_max"] = -1.0  # a caller's copy: the cached table is unchanged
    assert res.diagnostics().equals(run_diagnostics(dt, names))
    assert (
        res.summary(var_names=["B"])
        .reset_index(drop=True)
        .equals(s[s["param"] == "B"].reset_index(drop=True))
    )


def test_blocks_give_the_same_values(monkeypatch):
    import bayes_scalerl.posterior.diagnostics as diag

    x = _draws(11, 4, 200)
    whole = convergence(x)
    monkeypatch.setattr(diag, "_BLOCK_SIZE", 4 * 200 * 3)  # three runs at a time
    blocks = convergence(x)
    for k in whole:
        np.testing.assert_array_equal(blocks[k], whole[k])
    np.testing.assert_array_equal(ess_tail(x), whole["ess_tail"])
    np.testing.assert_array_equal(ess_bulk(x), whole["ess_bulk"])
