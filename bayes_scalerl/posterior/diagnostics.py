"""Per-run convergence diagnostics (rank R-hat, bulk/tail ESS, divergences, E-BFMI).

The estimators are those of ArviZ (``arviz_stats`` 0.8, after Vehtari et al. 2021,
https://arxiv.org/abs/1903.08008), written with NumPy for a whole batch of runs at once: an
array shaped ``(chain, draw, *batch)`` gives one value per batch element, with no Python loop
over the batch. ArviZ applies its estimators one run and one variable at a time, which for a
few hundred runs takes longer than the rest of the command together. ``tests/test_diagnostics.py``
checks that the values here equal ArviZ's own.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import numpy as np
import pandas as pd
import xarray as xr
from scipy import stats
from scipy.fftpack import next_fast_len

__all__ = [
    "run_diagnostics",
    "sampler_diagnostics",
    "sampler_draws",
    "OFFSETS",
    "convergence",
    "rhat",
    "ess_bulk",
    "ess_tail",
    "bfmi",
    "RHAT_MAX",
    "ESS_MIN",
    "TAIL_PROB",
]

#: A run with any parameter above this R-hat is not converged.
RHAT_MAX = 1.01
#: A run with any parameter below this bulk ESS (all chains together) is not converged.
ESS_MIN = 100.0
#: Tail ESS is the smaller ESS of the indicators of the ``1 - TAIL_PROB`` and ``TAIL_PROB``
#: quantiles: ArviZ 1.x's default (``rcParams["stats.ci_prob"]``), i.e. the 11% and 89% quantiles.
TAIL_PROB = 0.89

_MIN_DRAWS = 4  # ArviZ's minimum number of draws per chain for R-hat and ESS
_BLOCK_SIZE = 1 << 22  # draws (all chains, all batch elements) handled at once


# ---------------------------------------------------------------------------- helpers
def _batch(ary) -> tuple[np.ndarray, tuple[int, ...]]:
    """``(chain, draw, *batch)`` to a C-contiguous ``(batch, chain, draw)`` array and the batch shape.

    The dtype is kept: ArviZ folds and takes quantiles in the input's precision.
    """
    x = np.asarray(ary)
    if x.ndim < 2:
        raise ValueError(f"expected an array shaped (chain, draw, ...), got shape {x.shape}")
    if x.dtype.kind in "biu":
        x = x.astype(float)
    shape = x.shape[2:]
    x = np.ascontiguousarray(np.moveaxis(x, (0, 1), (-2, -1))).reshape(-1, *x.shape[:2])
    return x, shape


def _invalid(x: np.ndarray) -> np.ndarray:
    """Batch elements ArviZ answers with NaN (a NaN draw); the shape is checked by the callers."""
    return np.isnan(x).any(axis=(1, 2))


def _split(x: np.ndarray) -> np.ndarray:
    """Split each chain in two halves (the middle draw of an odd count is dropped), ArviZ's order."""
    half = x.shape[2] // 2
    return np.concatenate((x[:, :, :half], x[:, :, x.shape[2] - half :]), axis=1)


def _z_scale(x: np.ndarray) -> np.ndarray:
    """Rank-normalise each batch element over its chains and draws together.

    Average ranks ``r`` of the ``S`` values (as :func:`scipy.stats.rankdata`), then the normal
    quantile of ``(r - 3/8) / (S + 1/4)`` (Blom). Average ranks are half-integers, so the
    quantile is looked up in a table of the ``2S - 1`` possible values.
    """
    b, m, n = x.shape
    size = m * n
    flat = x.reshape(b, size)
    order = np.argsort(flat, axis=-1)
    srt = np.take_along_axis(flat, order, axis=-1)
    pos = np.broadcast_to(np.arange(size), (b, size))
    first = np.ones((b, size), dtype=bool)  # the first of a run of equal values
    first[:, 1:] = srt[:, 1:] != srt[:, :-1]
    # a value's average rank is (start + stop) / 2 + 1, with start and stop the first and last
    # sorted positions of its run of ties; the table is indexed by 2 * rank - 2 = start + stop
    if first.all():  # no ties
        index = 2 * pos
    else:
        last = np.ones((b, size), dtype=bool)
        last[:, :-1] = first[:, 1:]
        start = np.maximum.accumulate(np.where(first, pos, 0), axis=1)
        stop = np.minimum.accumulate(np.where(last, pos, size)[:, ::-1], axis=1)[:, ::-1]
        index = start + stop
    c = 3 / 8
    table = stats.norm.ppf((np.arange(2 * size - 1) / 2 + 1 - c) / (size - 2 * c + 1))
    z = np.empty((b, size))
    np.put_along_axis(z, order, table[index], axis=-1)
    return z.reshape(b, m, n)


def _fold(x: np.ndarray) -> np.ndarray:
    """Absolute deviation from each batch element's median, in the input's precision."""
    med = np.median(x.reshape(x.shape[0], -1), axis=-1)
    return abs(x - med[:, None, None])


def _rhat_core(z: np.ndarray) -> np.ndarray:
    """Gelman-Rubin R-hat of ``(batch, chain, draw)`` (the chains as given, no split)."""
    z = np.asarray(z, dtype=float)
    n = z.shape[2]
    chain_mean = np.mean(z, axis=2)
    chain_var = np.var(z, axis=2, ddof=1)
    between = n * np.var(chain_mean, axis=1, ddof=1)
    within = np.mean(chain_var, axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.sqrt((between / within + n - 1) / n)


def _autocov(y: np.ndarray) -> np.ndarray:
    """Autocovariance of every chain at every lag, by FFT (ArviZ's ``autocov`` along the last axis)."""
    n = y.shape[-1]
    m = next_fast_len(2 * n)
    y = y - y.mean(axis=-1, keepdims=True)
    f = np.fft.rfft(y, n=m, axis=-1)
    f *= np.conjugate(f)
    cov = np.fft.irfft(f, n=m, axis=-1)[..., :n]
    cov /= n
    return cov


def _ess_core(y: np.ndarray, relative: bool = False) -> np.ndarray:
    """ESS of ``(batch, chain, draw)`` by Geyer's initial monotone sequence (ArviZ's ``_ess``).

    A batch element whose values span less than ``numpy.finfo(float).resolution`` gets the
    number of draws ``chain * draw`` (also when ``relative``, as ArviZ does).
    """
    y = np.asarray(y, dtype=float)
    b, n_chain, n_draw = y.shape
    size = n_chain * n_draw
    flat = y.reshape(b, -1)
    constant = (flat.max(axis=1) - flat.min(axis=1)) < np.finfo(float).resolution
    acov = _autocov(y)
    chain_mean = y.mean(axis=2)
    # mean over chains at each lag, reduced along a contiguous axis like ArviZ's np.mean(acov[:, t])
    mean_acov = np.ascontiguousarray(np.swapaxes(acov, 1, 2)).mean(axis=-1)  # batch, lag
    mean_var = mean_acov[:, 0] * n_draw / (n_draw - 1.0)
    var_plus = mean_var * (n_draw - 1.0) / n_draw
    if n_chain > 1:
        var_plus = var_plus + np.var(chain_mean, axis=1, ddof=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        rho = 1.0 - (mean_var[:, None] - mean_acov) / var_plus[:, None]
    rho[:, 0] = 1.0

    # Geyer's initial positive sequence over pairs P_k = rho[2k] + rho[2k+1]: ArviZ adds pair
    # k >= 1 while 2k - 1 < n_draw - 3 and the previous pair is positive, keeps the last pair
    # only when it is not negative, and its even term when that is positive.
    k_max = max(0, (n_draw - 3) // 2)
    n_pairs = k_max + 1
    pairs = rho[:, 0 : 2 * n_pairs : 2] + rho[:, 1 : 2 * n_pairs : 2]  # batch, k = 0..k_max
    not_pos = ~(pairs[:, :k_max] > 0.0)
    if k_max:
        k_last = np.where(not_pos.any(axis=1), not_pos.argmax(axis=1), k_max)
    else:
        k_last = np.zeros(b, dtype=int)
    rows = np.arange(b)
    even_last = rho[rows, 2 * k_last]
    keep_last = (pairs[rows, k_last] >= 0.0) | (even_last > 0.0)
    last = np.where(keep_last, even_last, 0.0)
    # Geyer's initial monotone sequence: each pair is at most the one before it
    mono = np.minimum.accumulate(np.where(np.isnan(pairs), np.inf, pairs), axis=1)
    used = np.arange(n_pairs)[None, :] < k_last[:, None]
    tau = -1.0 + 2.0 * np.sum(np.where(used, mono, 0.0), axis=1) + last
    tau = np.maximum(tau, 1 / np.log10(size))
    ess = (1.0 if relative else float(size)) / tau
    ess = np.where(np.isnan(rho[:, 1]), np.nan, ess)
    return np.where(constant, float(size), ess)


def _tail_probs(prob: float | Sequence[float]) -> tuple[float, float]:
    if isinstance(prob, Sequence):
        low, high = prob
        return float(low), float(high)
    low, high = sorted((float(prob), 1 - float(prob)))
    return low, high


def _ess_tail_batch(x: np.ndarray, prob: float | Sequence[float], relative: bool) -> np.ndarray:
    """Tail ESS of a ``(batch, chain, draw)`` array (no validity check)."""
    flat = x.reshape(x.shape[0], -1)
    out = []
    for p in _tail_probs(prob):
        q = np.quantile(flat, p, axis=-1)  # a Python float keeps the input's precision
        out.append(_ess_core(_split(x <= q[:, None, None]), relative=relative))
    low, high = out
    return np.where(high < low, high, low)


def _blockwise(func, x: np.ndarray) -> np.ndarray:
    """``func`` over blocks of the batch axis of ``(batch, chain, draw)`` (bounded memory).

    ``func`` maps a block to an array whose last axis is the block's batch axis.
    """
    per = max(1, _BLOCK_SIZE // max(1, x.shape[1] * x.shape[2]))
    if x.shape[0] <= per:
        return func(x)
    return np.concatenate([func(x[i : i + per]) for i in range(0, x.shape[0], per)], axis=-1)


# ---------------------------------------------------------------------------- public API
def rhat(ary) -> np.ndarray:
    """Rank-normalised split R-hat (ArviZ's default ``method="rank"``).

    Parameters
    ----------
    ary : array_like, shape (chain, draw, *batch)
        Draws; every batch element (a run, a variable element) is diagnosed on its own.

    Returns
    -------
    numpy.ndarray, shape batch
        The larger of the bulk R-hat (split chains, rank-normalised) and the tail R-hat
        (the same of the absolute deviations from the median). NaN for fewer than 2 chains,
        fewer than 4 draws, or any NaN draw.
    """
    return convergence(ary, ess=False)["r_hat"]


def ess_bulk(ary, *, relative: bool = False) -> np.ndarray:
    """Bulk effective sample size: ESS of the rank-normalised split chains.

    Parameters
    ----------
    ary : array_like, shape (chain, draw, *batch)
        Draws.
    relative : bool
        Divide by the number of draws (as ArviZ's ``relative=True``).

    Returns
    -------
    numpy.ndarray, shape batch
        NaN for fewer than 4 draws or any NaN draw.
    """
    x, shape = _batch(ary)
    if x.shape[2] < _MIN_DRAWS:
        return np.full(shape, np.nan)
    out = _blockwise(lambda xb: _ess_core(_z_scale(_split(xb)), relative=relative), x)
    return np.where(_invalid(x), np.nan, out).reshape(shape)


def ess_tail(ary, *, prob: float | Sequence[float] = TAIL_PROB, relative: bool = False) -> np.ndarray:
    """Tail effective sample size: the smaller ESS of two quantile indicators.

    Parameters
    ----------
    ary : array_like, shape (chain, draw, *batch)
        Draws.
    prob : float or (float, float)
        ``p`` for the ``min(p, 1 - p)`` and ``max(p, 1 - p)`` quantiles, or the two quantiles.
        Default :data:`TAIL_PROB` (ArviZ's default).
    relative : bool
        Divide by the number of draws.

    Returns
    -------
    numpy.ndarray, shape batch
        ESS of the split-chain indicators ``draw <= quantile`` (the quantile of all chains
        together), the smaller of the two. NaN for fewer than 4 draws or any NaN draw.
    """
    x, shape = _batch(ary)
    if x.shape[2] < _MIN_DRAWS:
        return np.full(shape, np.nan)
    out = _blockwise(lambda xb: _ess_tail_batch(xb, prob, relative), x)
    return np.where(_invalid(x), np.nan, out).reshape(shape)


def convergence(ary, *, ess: bool = True, tail_prob: float | Sequence[float] = TAIL_PROB) -> dict:
    """R-hat and, if asked, bulk and tail ESS of a batch, sharing the split and the ranks.

    Parameters
    ----------
    ary : array_like, shape (chain, draw, *batch)
        Draws.
    ess : bool
        Also compute ``ess_bulk`` and ``ess_tail``.
    tail_prob : float or (float, float)
        See :func:`ess_tail`.

    Returns
    -------
    dict of str to numpy.ndarray
        ``r_hat`` and, with ``ess``, ``ess_bulk`` and ``ess_tail``, each shaped ``batch``.
    """
    x, shape = _batch(ary)
    keys = ["r_hat", "ess_bulk", "ess_tail"] if ess else ["r_hat"]
    if x.shape[2] < _MIN_DRAWS:
        return {k: np.full(shape, np.nan) for k in keys}

    def one_block(xb: np.ndarray) -> np.ndarray:
        out = np.full((len(keys), xb.shape[0]), np.nan)
        split = _split(xb)
        z = _z_scale(split)
        if xb.shape[1] >= 2:
            bulk = _rhat_core(z)
            tail = _rhat_core(_z_scale(_fold(split)))
            out[0] = np.where(tail > bulk, tail, bulk)  # Python's max(bulk, tail), as ArviZ
        if ess:
            out[1] = _ess_core(z)
            out[2] = _ess_tail_batch(xb, tail_prob, False)
        return out

    values = _blockwise(one_block, x)
    values[:, _invalid(x)] = np.nan
    return {k: values[i].reshape(shape) for i, k in enumerate(keys)}


def bfmi(energy, *, ddof: int = 1) -> np.ndarray:
    """E-BFMI of each chain: mean squared energy change over the energy variance.

    Parameters
    ----------
    energy : array_like, shape (chain, draw, *batch)
        Hamiltonian energy of each draw.
    ddof : int
        Delta degrees of freedom of the variance. ``1`` is ArviZ's :func:`arviz_stats.bfmi`
        (Betancourt's ratio of sums); the per-run table keeps ``0``, its earlier definition.

    Returns
    -------
    numpy.ndarray, shape (chain, *batch)
        NaN where the variance is not positive.
    """
    e = np.asarray(energy)
    num = np.mean(np.diff(e, axis=1) ** 2, axis=1)
    den = np.var(e, axis=1, ddof=ddof)
    return num / np.where(den > 0, den, np.nan)


# ---------------------------------------------------------------------------- tables
def _chain_draw_first(da: xr.DataArray) -> np.ndarray:
    return da.transpose("chain", "draw", ...).values


#: Variables that carry an offset of the calibrated discrepancy, drawn afresh for every
#: draw, and that offset's variable: their convergence diagnostics are those of the
#: sampler's own draws (the variable minus its offset), which the offsets would dilute.
OFFSETS = {"A": "delta", "A_recipe": "delta_recipe"}


def sampler_draws(post: xr.Dataset, name: str) -> xr.DataArray:
    """Variable ``name`` of ``post`` as the sampler drew it (without a discrepancy offset)."""
    x = post[name]
    offset = OFFSETS.get(name)
    if offset is not None and offset in post.data_vars:
        x = x - post[offset]
    return x


def sampler_diagnostics(dt: xr.DataTree, convergence_by_var: dict | None = None) -> pd.DataFrame:
    """One row per posterior variable (every variable, population and recipe levels too).

    ``A`` and ``A_recipe`` are diagnosed without the discrepancy's offsets (:data:`OFFSETS`).

    Parameters
    ----------
    dt : xarray.DataTree
        A fit's DataTree (groups ``posterior``, ``sample_stats``).
    convergence_by_var : dict, optional
        Already computed :func:`convergence` results by variable name; the others are computed.

    Returns
    -------
    pandas.DataFrame
        Columns ``variable, size, r_hat_max, ess_bulk_min, ess_tail_min, converged``,
        and the fit's total ``divergences`` and smallest ``bfmi_min`` on every row.
        NaN elements are left out of the maximum and minima.
    """
    post = dt["posterior"].to_dataset()
    names = list(post.data_vars)
    cache = convergence_by_var or {}
    stats_ = dt["sample_stats"].to_dataset()
    div = int(stats_["diverging"].values.sum())
    energy = _chain_draw_first(stats_["energy"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        bfmi_min = float(np.nanmin(np.min(bfmi(energy, ddof=0), axis=0)))
        rows = []
        for v in names:
            c = cache[v] if v in cache else convergence(_chain_draw_first(sampler_draws(post, v)))
            r = float(np.nanmax(c["r_hat"]))
            b, t = float(np.nanmin(c["ess_bulk"])), float(np.nanmin(c["ess_tail"]))
            rows.append((v, int(post[v].isel(chain=0, draw=0).size), r, b, t, div, bfmi_min))
    df = pd.DataFrame(
        rows,
        columns=["variable", "size", "r_hat_max", "ess_bulk_min", "ess_tail_min", "divergences", "bfmi_min"],
    )
    df["converged"] = (
        (df["r_hat_max"] <= RHAT_MAX) & (df["ess_bulk_min"] >= ESS_MIN) & (df["divergences"] == 0)
    )
    return df


def _noise_model(dt: xr.DataTree, post: xr.Dataset, n_runs: int) -> tuple[str, np.ndarray, float, float]:
    """The fit's likelihood, each run's AR(1) correlation (fixed, or its posterior median),
    and the smooth departures' ``kappa`` and ``ell`` (0 and NaN without them)."""
    import json

    settings = json.loads(dt.attrs.get("bayes_scalerl_settings", "{}"))
    priors = settings.get("priors") or {}
    likelihood = str(priors.get("likelihood", "gaussian"))
    rho = np.full(n_runs, np.nan)
    if likelihood == "ar1":
        if "rho" in post.data_vars:
            rho = post["rho"].median(("chain", "draw")).values.astype(float)
        elif isinstance(priors.get("rho"), (int, float)):
            rho[:] = float(priors["rho"])
    shape = priors.get("shape_noise")
    kappa, ell = (float(v) for v in shape) if shape is not None else (0.0, float("nan"))
    return likelihood, rho, kappa, ell


def run_diagnostics(
    dt: xr.DataTree, var_names: list[str], convergence_by_var: dict | None = None
) -> pd.DataFrame:
    """One row per run: point count, worst R-hat and ESS, divergences, E-BFMI, converged flag.

    Parameters
    ----------
    dt : xarray.DataTree
        A fit's DataTree (groups ``posterior``, ``sample_stats``, ``constant_data``).
    var_names : list of str
        Posterior variables the diagnostics cover (dims ``chain, draw, run``).
    convergence_by_var : dict, optional
        Already computed :func:`convergence` results by variable name; the others are computed.

    Returns
    -------
    pandas.DataFrame
        Columns ``run, n_points, r_hat_max, ess_bulk_min, ess_tail_min, divergences,
        bfmi_min, converged, retried, retries, likelihood, rho, shape_kappa, shape_ell``. ``converged``
        needs R-hat <= 1.01, bulk ESS >= 100 and no divergent transition; ``retried``: the
        run failed that check at first and was sampled again
        (:mod:`bayes_scalerl.engine.retry`; the row describes its last attempt), and
        ``retries`` how many times (0, 1, or 2 for a third attempt, the default ``Retry()``'s
        last). A NaN
        R-hat or ESS of any variable makes the run's NaN.
        ``bfmi_min`` is the smallest E-BFMI over chains, with the population variance
        (``bfmi(..., ddof=0)``). ``likelihood`` is the fit's noise model and ``rho`` the
        AR(1) correlation each run was fitted with (the fixed value; the posterior median
        when sampled; NaN for other likelihoods); ``shape_kappa`` and ``shape_ell`` the
        smooth departures from the sigmoid it was fitted with (``Priors.shape_noise``: their
        sd over ``sigma`` and length scale in e-folds of compute; 0 and NaN without them).
    """
    post = dt["posterior"].to_dataset()
    cache = convergence_by_var or {}
    conv = [
        cache[v] if v in cache else convergence(_chain_draw_first(sampler_draws(post, v))) for v in var_names
    ]
    rhat_ = np.max(np.stack([c["r_hat"] for c in conv]), axis=0)
    ess_b = np.min(np.stack([c["ess_bulk"] for c in conv]), axis=0)
    ess_t = np.min(np.stack([c["ess_tail"] for c in conv]), axis=0)
    stats_ = dt["sample_stats"].to_dataset()
    n_runs = post.sizes["run"]
    # a joint (hierarchical) sampler has one set of statistics for all runs
    div = np.broadcast_to(stats_["diverging"].sum(("chain", "draw")).values.astype(int), (n_runs,))
    bfmi_ = np.broadcast_to(np.min(bfmi(_chain_draw_first(stats_["energy"]), ddof=0), axis=0), (n_runs,))
    n_points = dt["constant_data"]["in_fit"].to_dataset()["in_fit"].sum("point").values.astype(int)
    converged = (rhat_ <= RHAT_MAX) & (ess_b >= ESS_MIN) & (div == 0)
    const = dt["constant_data"].to_dataset()
    retries = const["retried"].values.astype(int) if "retried" in const else np.zeros(n_runs, int)
    likelihood, rho, kappa, ell = _noise_model(dt, post, n_runs)
    return pd.DataFrame(
        {
            "run": post["run"].values.astype(str),
            "n_points": n_points,
            "r_hat_max": rhat_,
            "ess_bulk_min": ess_b,
            "ess_tail_min": ess_t,
            "divergences": div,
            "bfmi_min": bfmi_,
            "converged": converged,
            "retried": retries > 0,
            "retries": retries,
            "likelihood": likelihood,
            "rho": rho,
            "shape_kappa": kappa,
            "shape_ell": ell,
        }
    )
