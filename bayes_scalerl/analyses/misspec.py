"""Truth curves that are *not* the fitted sigmoid, for testing the bands under misspecification.

Real RL reward curves are only roughly ScaleRL sigmoids: they keep creeping up after the
"plateau", rise a second time, approach their ceiling like a power law, wiggle in ways that
neighbouring checkpoints share, drift down late. This module simulates such curves with
known truth so that predictive bands extrapolated 2-8x beyond the fitted compute can be
scored (``benchmarks/misspecification.py``).

Families (:data:`FAMILIES`; ``x = log C``, ``s(z) = 1 / (1 + exp(-z))``, every curve equals
``R0`` at ``C = 0``):

``sigmoid``
    The fitted model itself, ``R0 + (A - R0) s(B (x - log C_mid))``: the well-specified control.
``creep``
    The sigmoid plus a slow creep ``D s(b_c (x - log C_c))`` with a small slope ``b_c``
    (0.3-0.6) centred at or beyond the final budget: roughly linear in ``log C`` where the
    run is observed (it adds 0.02-0.05 over the last 8x of compute) and saturating only far
    beyond it, at ``A + D``.
``double``
    Two stacked sigmoids: a first rise to ``A1`` within the data and a second one of
    0.06-0.15 centred near or beyond the final budget, to ``A``.
``power``
    Saturating power law ``A - (A - R0) (1 + C / C0)^(-alpha)``, ``alpha`` 0.3-1.0: a
    long, slow approach to ``A``.
``exponential``
    Exponential (Weibull-type) saturation ``R0 + (A - R0) (1 - exp(-(C / tau)^k))``,
    ``k`` 0.6-1.2: a sharper knee than the sigmoid in ``log C``.
``wiggle``
    The sigmoid plus a smooth random function of ``log C`` (a Gaussian-process draw
    approximated with random Fourier features; sd 0.01-0.02, length scale 0.4-1.0 in
    ``log C``), so neighbouring checkpoints share their departure from the curve.
``drift``
    A sigmoid that reaches its plateau and then drifts down late by 0.03-0.08 (a second,
    falling sigmoid of slope 2-4 centred at 0.3-1 times the final budget, where the rise is
    at least 99% done): a hump, then a decline that continues beyond the budget.

Held-out families (:data:`HELD_OUT_FAMILIES`, not in :data:`FAMILIES`: no setting of the
package was chosen on them, and the default benchmark leaves them out; name them to score
a method on a shape it was not tuned to):

``jump``
    A sigmoid plus a step up of 0.02-0.06 when a setting changes mid-run (a learning-rate
    or length schedule, a data switch): a steep rise ``J s(b_j (x - log C_j))``, ``b_j``
    8-20 (10-90% of the step within a factor 1.25-1.75 of compute), at ``C_j`` log-uniform
    on 0.1-1 times the final budget, so the step falls inside some fit windows and after
    others; the ceiling is ``A + J``.

Evaluation noise (:data:`NOISES`): ``iid`` Gaussian (sd 0.008-0.02), ``ar1`` (the same
marginal sd, lag-one correlation 0.5-0.8 between consecutive evaluations) and ``binomial``
(the mean of ``n_eval`` graded generations, 500-2000, log-uniform; an ``n_eval`` column).
Held out (:data:`HELD_OUT_NOISES`): ``outlier``, ``iid`` noise plus, in 3% of the
evaluations after the first, a further loss of 0.05-0.20 (a failed or truncated
evaluation, a bad checkpoint).

Every run has a final budget of 8k-64k GPU-hours (log-uniform), ``R0`` 0.10-0.45 and a
ceiling of 0.45-0.8 (the creep's far-away limit goes up to 0.9). Evaluations are evenly
spaced in training **steps**, the first at step 0 (compute 0, it sets ``R0``); the
GPU-hours per step grow linearly over the run by a factor of 1-2 (responses get longer),
so the evaluations are uneven in compute and more so in ``log C``. Each run's
:func:`true_ceiling` is its limit as ``C -> inf`` (finite for every family: the creep and
the drift saturate, the smooth discrepancy is tapered off beyond 1000x the budget), so a
reported interval of ``A`` can be checked against it.

Examples
--------
>>> import numpy as np
>>> import bayes_scalerl as bs
>>> from bayes_scalerl.analyses.misspec import simulate_scenario
>>> df = simulate_scenario(np.random.default_rng(0), "creep", "ar1", 4)
>>> runs = bs.Runs.from_frame(df[["run", "compute", "reward"]])
>>> runs.n_runs
4
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
from scipy.special import expit, logit

__all__ = [
    "FAMILIES",
    "HELD_OUT_FAMILIES",
    "RISING_FAMILIES",
    "NOISES",
    "HELD_OUT_NOISES",
    "PARAM_COLUMNS",
    "draw_params",
    "eval_schedule",
    "mean_curve",
    "true_ceiling",
    "smooth_discrepancy",
    "draw_noise_params",
    "evaluation_noise",
    "simulate",
    "simulate_scenario",
    "simulate_seed_pairs",
    "simulate_benchmark",
]

#: Truth-curve families, the well-specified control first.
FAMILIES = ("sigmoid", "creep", "double", "power", "exponential", "wiggle", "drift")
#: Families kept out of :data:`FAMILIES` (and of every choice of a default): shapes to test on.
HELD_OUT_FAMILIES = ("jump",)
#: Families whose noise-free curve (without the smooth discrepancy) never decreases.
RISING_FAMILIES = ("sigmoid", "creep", "double", "power", "exponential", "wiggle", "jump")
#: Evaluation-noise models.
NOISES = ("iid", "ar1", "binomial")
#: Evaluation-noise models kept out of :data:`NOISES` (and of every choice of a default).
HELD_OUT_NOISES = ("outlier",)
#: Share of evaluations (after the first) that an ``outlier`` run loses, and the range of the loss.
OUTLIER_RATE, OUTLIER_DROP = 0.03, (0.05, 0.20)
#: Per-run parameter columns of :func:`draw_params` (NaN where a family does not use one).
PARAM_COLUMNS = (
    "A",
    "B",
    "C_mid",
    "creep_D",
    "creep_b",
    "creep_C",
    "A1",
    "B1",
    "C1",
    "B2",
    "C2",
    "alpha",
    "C0",
    "k",
    "tau",
    "drift_E",
    "drift_B",
    "drift_C",
    "wiggle_sd",
    "wiggle_ls",
    "jump_J",
    "jump_b",
    "jump_C",
)

#: Taper of the smooth discrepancy: fully on from budget / 300 to budget * 1000 (in C).
_TAPER_LO, _TAPER_HI, _TAPER_WIDTH = 1.0 / 300.0, 1000.0, 0.5
#: Steps between evaluations (only the ``step`` column depends on it).
_EVAL_EVERY = np.array([5, 10, 20, 25, 50])


def _loguniform(rng: np.random.Generator, lo: float, hi: float, n: int) -> np.ndarray:
    return np.exp(rng.uniform(np.log(lo), np.log(hi), n))


def _log(c: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore"):
        return np.log(c)


def _rise(c: np.ndarray, slope: np.ndarray, centre: np.ndarray) -> np.ndarray:
    """``s(slope (log c - log centre))``, 0 at ``c = 0``."""
    return expit(slope * (_log(c) - np.log(centre)))


def _check_family(family: str) -> None:
    if family not in FAMILIES + HELD_OUT_FAMILIES:
        raise ValueError(f"family must be one of {FAMILIES + HELD_OUT_FAMILIES}, got {family!r}")


def _check_noise(noise: str) -> None:
    if noise not in NOISES + HELD_OUT_NOISES:
        raise ValueError(f"noise must be one of {NOISES + HELD_OUT_NOISES}, got {noise!r}")


# ---------------------------------------------------------------------- truth
def draw_params(
    rng: np.random.Generator,
    family: str,
    n_runs: int,
    *,
    budget: tuple[float, float] = (8_000.0, 64_000.0),
    n_evals: int = 48,
    prefix: str | None = None,
) -> pd.DataFrame:
    """Draw the true curves of ``n_runs`` runs of one family.

    Parameters
    ----------
    rng : numpy.random.Generator
        Source of randomness (the only one).
    family : str
        One of :data:`FAMILIES` or :data:`HELD_OUT_FAMILIES`.
    n_runs : int
        Number of runs.
    budget : tuple of float
        Range of each run's final compute (GPU-hours), drawn log-uniformly.
    n_evals : int
        Evaluations per run, step 0 included (at least 8).
    prefix : str, optional
        Run names are ``f"{prefix}/r{i:03d}"`` (default: the family).

    Returns
    -------
    pandas.DataFrame
        One row per run: ``run, family, R0, budget, cost_growth`` (the GPU-hours per step
        grow by the factor ``1 + cost_growth`` from the first step to the last),
        ``eval_every`` (steps between evaluations), ``n_evals``, ``f_end`` (share of the
        main rise reached at the final budget), the columns of :data:`PARAM_COLUMNS` (NaN
        where unused) and ``true_ceiling``.

    Notes
    -----
    Common ranges: budget 8k-64k GPU-hours (log-uniform), ``A`` 0.45-0.8, ``R0``
    0.10-0.45 with ``A - R0 >= 0.12``. Midpoints (``C_mid``, ``C0``, ``tau``, ``C1``) are
    set through ``f_end`` so that the main rise is 70-97% complete at the final budget
    (85-99% for ``creep``, 85-98% for ``double``'s first rise, 99-99.9% for ``drift``: their departures
    come after a plateau). ``B`` is 1-3 (1.5-3 for ``drift``).
    """
    _check_family(family)
    if n_runs < 0 or int(n_runs) != n_runs:
        raise ValueError(f"n_runs must be a non-negative integer, got {n_runs!r}")
    if n_evals < 8:
        raise ValueError(f"n_evals must be at least 8, got {n_evals!r}")
    n = int(n_runs)
    prefix = family if prefix is None else prefix
    cmax = _loguniform(rng, budget[0], budget[1], n)
    a_hi = 0.7 if family == "creep" else 0.8
    A = rng.uniform(0.45, a_hi, n)
    R0 = 0.10 + rng.uniform(0.0, 1.0, n) * (np.minimum(0.45, A - 0.12) - 0.10)
    p = {c: np.full(n, np.nan) for c in PARAM_COLUMNS}
    p["A"] = A
    p["wiggle_sd"] = np.zeros(n)
    p["wiggle_ls"] = rng.uniform(0.4, 1.0, n)
    if family == "drift":
        f_end = rng.uniform(0.99, 0.999, n)
    elif family == "creep":
        f_end = rng.uniform(0.85, 0.99, n)
    else:
        f_end = rng.uniform(0.70, 0.97, n)
    ceiling = A.copy()
    if family in ("sigmoid", "creep", "wiggle", "drift", "jump"):
        p["B"] = rng.uniform(1.5, 3.0, n) if family == "drift" else rng.uniform(1.0, 3.0, n)
        p["C_mid"] = cmax * np.exp(-logit(f_end) / p["B"])
    if family == "creep":
        b = rng.uniform(0.3, 0.6, n)
        centre = cmax * _loguniform(rng, 1.0, 4.0, n)
        rise8 = rng.uniform(0.02, 0.05, n)  # creep over the last 8x of compute
        seen = _rise(cmax, b, centre) - _rise(cmax / 8.0, b, centre)
        p["creep_D"] = np.minimum(rise8 / seen, 0.9 - A)
        p["creep_b"], p["creep_C"] = b, centre
        ceiling = A + p["creep_D"]
    elif family == "double":
        gap = np.minimum(rng.uniform(0.06, 0.15, n), A - R0 - 0.08)
        p["A1"] = A - gap
        p["B1"] = rng.uniform(1.5, 3.0, n)
        f1 = rng.uniform(0.85, 0.98, n)
        p["C1"] = cmax * np.exp(-logit(f1) / p["B1"])
        p["B2"] = rng.uniform(1.5, 3.0, n)
        p["C2"] = np.maximum(cmax * _loguniform(rng, 0.25, 2.0, n), 4.0 * p["C1"])
        f_end = f1
    elif family == "power":
        p["alpha"] = rng.uniform(0.3, 1.0, n)
        p["C0"] = cmax / ((1.0 - f_end) ** (-1.0 / p["alpha"]) - 1.0)
    elif family == "exponential":
        p["k"] = rng.uniform(0.6, 1.2, n)
        p["tau"] = cmax / (-np.log1p(-f_end)) ** (1.0 / p["k"])
    elif family == "wiggle":
        p["wiggle_sd"] = rng.uniform(0.01, 0.02, n)
    elif family == "jump":
        p["jump_J"] = rng.uniform(0.02, 0.06, n)
        p["jump_b"] = rng.uniform(8.0, 20.0, n)
        p["jump_C"] = cmax * _loguniform(rng, 0.1, 1.0, n)
        ceiling = A + p["jump_J"]
    elif family == "drift":
        p["drift_E"] = np.minimum(rng.uniform(0.03, 0.08, n), 0.5 * (A - R0))
        p["drift_B"] = rng.uniform(2.0, 4.0, n)
        # the main rise is at least 99% done where the drift is half done, so the curve has a hump
        p["drift_C"] = np.maximum(
            cmax * _loguniform(rng, 0.3, 1.0, n), p["C_mid"] * np.exp(logit(0.99) / p["B"])
        )
        ceiling = A - p["drift_E"]
    out = pd.DataFrame(
        {
            "run": [f"{prefix}/r{i:03d}" for i in range(n)],
            "family": family,
            "R0": R0,
            "budget": cmax,
            "cost_growth": rng.uniform(0.0, 1.0, n),
            "eval_every": rng.choice(_EVAL_EVERY, n),
            "n_evals": int(n_evals),
            "f_end": f_end,
            **p,
        }
    )
    out["true_ceiling"] = ceiling
    return out


def eval_schedule(params: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Steps and compute of every evaluation, evenly spaced in steps.

    Parameters
    ----------
    params : pandas.DataFrame
        Runs of :func:`draw_params` (one common ``n_evals``).

    Returns
    -------
    steps, compute : ndarray, shape (run, n_evals)
        ``steps[:, j] = j * eval_every``; with ``u = j / (n_evals - 1)`` the compute is
        ``budget * (u + g u^2 / 2) / (1 + g / 2)`` for ``g = cost_growth``: the
        GPU-hours per step grow linearly by the factor ``1 + g``. ``compute[:, 0] = 0``
        and ``compute[:, -1] = budget``.
    """
    n_evals = np.unique(params["n_evals"].to_numpy())
    if len(n_evals) != 1:
        raise ValueError(f"runs must share one n_evals, got {sorted(n_evals.tolist())}")
    j = np.arange(int(n_evals[0]))[None, :]
    u = j / (int(n_evals[0]) - 1)
    g = params["cost_growth"].to_numpy(float)[:, None]
    compute = params["budget"].to_numpy(float)[:, None] * (u + 0.5 * g * u**2) / (1.0 + 0.5 * g)
    compute[:, 0] = 0.0
    steps = j * params["eval_every"].to_numpy(int)[:, None]
    return steps, compute


def mean_curve(params: pd.DataFrame, compute: np.ndarray) -> np.ndarray:
    """Noise-free expected reward of every run (without the smooth discrepancy).

    Parameters
    ----------
    params : pandas.DataFrame
        Runs of :func:`draw_params` (any mix of families).
    compute : ndarray, shape (run, q) or (q,)
        Compute, ``>= 0``.

    Returns
    -------
    ndarray, shape (run, q)
        The family's curve (see the module docstring); ``R0`` at ``C = 0``.
    """
    n = len(params)
    c = np.broadcast_to(np.asarray(compute, float), (n, np.shape(compute)[-1]))
    col = {k: params[k].to_numpy(float)[:, None] for k in PARAM_COLUMNS + ("R0",)}
    fam = params["family"].to_numpy()
    out = np.full(c.shape, np.nan)
    R0, A = col["R0"], col["A"]
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        sig = R0 + (A - R0) * _rise(c, col["B"], col["C_mid"])
        creep = col["creep_D"] * _rise(c, col["creep_b"], col["creep_C"])
        double = (
            R0
            + (col["A1"] - R0) * _rise(c, col["B1"], col["C1"])
            + (A - col["A1"]) * _rise(c, col["B2"], col["C2"])
        )
        power = A - (A - R0) * (1.0 + c / col["C0"]) ** (-col["alpha"])
        expo = R0 + (A - R0) * -np.expm1(-((c / col["tau"]) ** col["k"]))
        drift = sig - col["drift_E"] * _rise(c, col["drift_B"], col["drift_C"])
        jump = sig + col["jump_J"] * _rise(c, col["jump_b"], col["jump_C"])
    by_family = {
        "sigmoid": sig,
        "wiggle": sig,
        "creep": sig + creep,
        "double": double,
        "power": power,
        "exponential": expo,
        "drift": drift,
        "jump": jump,
    }
    for name, values in by_family.items():
        m = fam == name
        out[m] = values[m]
    return out


def true_ceiling(params: pd.DataFrame) -> np.ndarray:
    """Each run's limit of the expected reward as compute goes to infinity.

    ``A`` for ``sigmoid``, ``double``, ``power``, ``exponential`` and ``wiggle`` (whose
    discrepancy is tapered off), ``A + creep_D`` for ``creep``, ``A - drift_E`` for
    ``drift`` and ``A + jump_J`` for ``jump``; the ``true_ceiling`` column of
    :func:`draw_params`.

    Parameters
    ----------
    params : pandas.DataFrame
        Runs of :func:`draw_params`.

    Returns
    -------
    ndarray, shape (run,)
    """
    fam = params["family"].to_numpy()
    A = params["A"].to_numpy(float)
    offset = {"creep": 1.0, "drift": -1.0, "jump": 1.0}
    column = {"creep": "creep_D", "drift": "drift_E", "jump": "jump_J"}
    out = A.copy()
    for name, sign in offset.items():
        m = fam == name
        out[m] += sign * params[column[name]].to_numpy(float)[m]
    return out


def smooth_discrepancy(
    rng: np.random.Generator,
    compute: np.ndarray,
    budget: np.ndarray,
    sd: np.ndarray,
    length_scale: np.ndarray,
    *,
    n_features: int = 32,
) -> np.ndarray:
    """A smooth random function of ``log C`` per run (random Fourier features).

    ``d(x) = sd sqrt(2 / J) sum_j w_j cos(omega_j x + phi_j)`` with ``w_j ~ N(0, 1)``,
    ``omega_j ~ N(0, 1 / length_scale^2)``, ``phi_j ~ U(0, 2 pi)`` and ``J = n_features``:
    approximately a draw of a zero-mean Gaussian process in ``x = log C`` with a squared
    exponential kernel of standard deviation ``sd`` (Rahimi & Recht 2007). It is tapered
    to 0 below ``budget / 300`` (so it is 0 at ``C = 0``) and beyond ``1000 * budget`` (so
    it does not change the curve's limit).

    Parameters
    ----------
    rng : numpy.random.Generator
    compute : ndarray, shape (run, q)
        Compute, ``>= 0``.
    budget : ndarray, shape (run,)
        Each run's final compute (sets the taper).
    sd : ndarray, shape (run,)
        Standard deviation of the process (0: no discrepancy).
    length_scale : ndarray, shape (run,)
        Length scale in ``log C`` (e-folds of compute).
    n_features : int
        Random features per run.

    Returns
    -------
    ndarray, shape (run, q)
    """
    c = np.asarray(compute, float)
    n = c.shape[0]
    omega = rng.standard_normal((n, 1, n_features)) / np.asarray(length_scale, float)[:, None, None]
    phase = rng.uniform(0.0, 2.0 * np.pi, (n, 1, n_features))
    w = rng.standard_normal((n, 1, n_features))
    x = _log(c)
    xs = np.where(np.isfinite(x), x, 0.0)[..., None]
    d = np.sqrt(2.0 / n_features) * np.sum(w * np.cos(omega * xs + phase), axis=-1)
    lb = np.log(np.asarray(budget, float))[:, None]
    taper = expit((x - lb - np.log(_TAPER_LO)) / _TAPER_WIDTH) * expit(
        (lb + np.log(_TAPER_HI) - x) / _TAPER_WIDTH
    )
    return np.asarray(sd, float)[:, None] * d * taper


# ---------------------------------------------------------------------- noise
def draw_noise_params(rng: np.random.Generator, noise: str, n_runs: int) -> pd.DataFrame:
    """Draw each run's evaluation-noise parameters.

    Parameters
    ----------
    rng : numpy.random.Generator
    noise : {"iid", "ar1", "binomial", "outlier"}
    n_runs : int

    Returns
    -------
    pandas.DataFrame
        ``noise, sigma, rho, n_eval``: ``sigma`` 0.008-0.02 (``iid``, ``ar1``, ``outlier``), ``rho``
        0.5-0.8 (``ar1``; else 0), ``n_eval`` 500-2000 log-uniform integers (``binomial``;
        else NaN). Unused values are NaN.
    """
    _check_noise(noise)
    n = int(n_runs)
    sigma = rng.uniform(0.008, 0.02, n) if noise != "binomial" else np.full(n, np.nan)
    rho = rng.uniform(0.5, 0.8, n) if noise == "ar1" else np.zeros(n)
    n_eval = np.round(_loguniform(rng, 500.0, 2000.0, n)) if noise == "binomial" else np.full(n, np.nan)
    return pd.DataFrame({"noise": noise, "sigma": sigma, "rho": rho, "n_eval": n_eval})


def evaluation_noise(
    rng: np.random.Generator,
    mu: np.ndarray,
    noise: str,
    *,
    sigma: np.ndarray | None = None,
    rho: np.ndarray | None = None,
    n_eval: np.ndarray | None = None,
) -> np.ndarray:
    """Noisy evaluations of the expected rewards ``mu``.

    Parameters
    ----------
    rng : numpy.random.Generator
    mu : ndarray, shape (run, q)
        Expected reward of each evaluation (consecutive evaluations along the last axis).
    noise : {"iid", "ar1", "binomial", "outlier"}
        ``iid``: ``mu + sigma e``, ``e`` standard normal. ``ar1``: the same with
        ``e_j = rho e_{j-1} + sqrt(1 - rho^2) z_j`` (stationary, marginal sd ``sigma``).
        ``binomial``: ``Binomial(n_eval, mu) / n_eval``, the mean of ``n_eval`` graded
        generations (variance ``mu (1 - mu) / n_eval``). ``outlier`` (held out): ``iid``,
        and each evaluation after the first independently, with probability
        :data:`OUTLIER_RATE`, loses a further 0.05-0.20 (a failed or truncated evaluation,
        a bad checkpoint).
    sigma, rho, n_eval : ndarray, shape (run,), optional
        Per-run noise parameters (as from :func:`draw_noise_params`).

    Returns
    -------
    ndarray, shape (run, q)
        Evaluations, clipped to ``[0, 1]`` (Gaussian noise only).
    """
    _check_noise(noise)
    mu = np.asarray(mu, float)
    n, q = mu.shape
    if noise == "binomial":
        if n_eval is None:
            raise ValueError("binomial noise needs n_eval")
        m = np.asarray(n_eval, float)[:, None]
        return rng.binomial(np.broadcast_to(m, mu.shape).astype(np.int64), np.clip(mu, 0.0, 1.0)) / m
    if sigma is None:
        raise ValueError(f"{noise} noise needs sigma")
    e = rng.standard_normal((n, q))
    if noise == "outlier":
        hit = rng.random((n, q)) < OUTLIER_RATE
        hit[:, 0] = False  # the first evaluation sets R0
        drop = np.where(hit, rng.uniform(*OUTLIER_DROP, (n, q)), 0.0)
        return np.clip(mu + np.asarray(sigma, float)[:, None] * e - drop, 0.0, 1.0)
    if noise == "ar1":
        if rho is None:
            raise ValueError("ar1 noise needs rho")
        r = np.asarray(rho, float)
        for j in range(1, q):
            e[:, j] = r * e[:, j - 1] + np.sqrt(1.0 - r**2) * e[:, j]
    return np.clip(mu + np.asarray(sigma, float)[:, None] * e, 0.0, 1.0)


# ---------------------------------------------------------------------- tidy tables
def simulate(
    params: pd.DataFrame,
    noise: str,
    rng: np.random.Generator,
    *,
    truth_rng: np.random.Generator | None = None,
    noise_params: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """Evaluations of the runs in ``params`` with one noise model, as a tidy table.

    Parameters
    ----------
    params : pandas.DataFrame
        Runs of :func:`draw_params` (one common ``n_evals``).
    noise : {"iid", "ar1", "binomial"}
    rng : numpy.random.Generator
        Source of the noise parameters and the noise.
    truth_rng : numpy.random.Generator, optional
        Source of the smooth discrepancy (default ``rng``). Passing a generator in the
        same state for every noise model gives the same true curves under each.
    noise_params : pandas.DataFrame, optional
        Per-run ``sigma, rho, n_eval`` (default: drawn with :func:`draw_noise_params`).

    Returns
    -------
    pandas.DataFrame
        One row per evaluation, sorted by run and step: ``run, step, compute, reward``,
        ``family, noise, scenario`` (``"family/noise"``), ``mu`` (the expected reward,
        discrepancy included), ``true_ceiling``, ``noise_sd`` (sd of the evaluation noise
        at that point) and, for binomial noise, ``n_eval``. ``run, compute, reward`` (and
        ``n_eval``) are ready for :meth:`bayes_scalerl.Runs.from_frame`.
    """
    _check_noise(noise)
    truth_rng = rng if truth_rng is None else truth_rng
    steps, compute = eval_schedule(params)
    n, q = compute.shape
    mu = mean_curve(params, compute) + smooth_discrepancy(
        truth_rng,
        compute,
        params["budget"].to_numpy(float),
        params["wiggle_sd"].to_numpy(float),
        params["wiggle_ls"].to_numpy(float),
    )
    mu = np.clip(mu, 0.0, 1.0)
    npar = draw_noise_params(rng, noise, n) if noise_params is None else noise_params.reset_index(drop=True)
    y = evaluation_noise(
        rng,
        mu,
        noise,
        sigma=npar["sigma"].to_numpy(float),
        rho=npar["rho"].to_numpy(float),
        n_eval=npar["n_eval"].to_numpy(float),
    )
    if noise == "binomial":
        noise_sd = np.sqrt(mu * (1.0 - mu) / npar["n_eval"].to_numpy(float)[:, None])
    else:
        noise_sd = np.broadcast_to(npar["sigma"].to_numpy(float)[:, None], (n, q))
    rep = lambda col: np.repeat(params[col].to_numpy(), q)  # noqa: E731
    out = pd.DataFrame(
        {
            "run": rep("run"),
            "step": steps.ravel(),
            "compute": compute.ravel(),
            "reward": y.ravel(),
            "family": rep("family"),
            "noise": noise,
            "scenario": [f"{f}/{noise}" for f in rep("family")],
            "mu": mu.ravel(),
            "true_ceiling": rep("true_ceiling"),
            "noise_sd": noise_sd.ravel(),
        }
    )
    if noise == "binomial":
        out["n_eval"] = np.repeat(npar["n_eval"].to_numpy(int), q)
    return out


def simulate_scenario(
    rng: np.random.Generator,
    family: str,
    noise: str,
    n_runs: int,
    *,
    budget: tuple[float, float] = (8_000.0, 64_000.0),
    n_evals: int = 48,
) -> pd.DataFrame:
    """``n_runs`` runs of one family with one noise model (:func:`draw_params` then :func:`simulate`).

    Parameters
    ----------
    rng : numpy.random.Generator
    family : str
        One of :data:`FAMILIES` or :data:`HELD_OUT_FAMILIES`.
    noise : str
        One of :data:`NOISES`.
    n_runs : int
    budget : tuple of float
        Range of the final budgets (GPU-hours).
    n_evals : int
        Evaluations per run (step 0 included).

    Returns
    -------
    pandas.DataFrame
        As :func:`simulate`; runs named ``"family/noise/rNNN"``.
    """
    params = draw_params(rng, family, n_runs, budget=budget, n_evals=n_evals, prefix=f"{family}/{noise}")
    return simulate(params, noise, rng)


def simulate_seed_pairs(
    rng: np.random.Generator,
    family: str,
    noise: str,
    n_pairs: int,
    *,
    discrepancy_sd: tuple[float, float] = (0.005, 0.015),
    budget: tuple[float, float] = (8_000.0, 64_000.0),
    n_evals: int = 48,
    truth_rng: np.random.Generator | None = None,
) -> pd.DataFrame:
    """Pairs of seeds: two runs with the same truth, independent noise and independent discrepancy.

    Each pair shares the family's parameters, evaluation schedule and noise parameters;
    each seed gets its own draw of the smooth discrepancy (:func:`smooth_discrepancy`, of
    sd drawn from ``discrepancy_sd`` per pair, or the family's own 0.01-0.02 for
    ``wiggle``) and its own evaluation noise. Both seeds have the same
    ``true_ceiling``, so a comparison that calls one of them higher is wrong.

    Parameters
    ----------
    rng : numpy.random.Generator
        Source of the noise (and of everything when ``truth_rng`` is not given).
    family, noise : str
        One of :data:`FAMILIES` (or :data:`HELD_OUT_FAMILIES`) and of :data:`NOISES`.
    n_pairs : int
    discrepancy_sd : tuple of float
        Range of the seed-to-seed smooth discrepancy's sd (uniform); ``(0, 0)`` for none.
    budget : tuple of float
        Range of the final budgets (GPU-hours).
    n_evals : int
        Evaluations per run (step 0 included).
    truth_rng : numpy.random.Generator, optional
        Source of the parameters and the discrepancies (default ``rng``).

    Returns
    -------
    pandas.DataFrame
        As :func:`simulate`, plus ``pair`` (``"family/noise/pairNNN"``) and ``pair_seed``
        (0 or 1); runs named ``"family/noise/pairNNN/sK"``.
    """
    truth_rng = rng if truth_rng is None else truth_rng
    params = draw_params(
        truth_rng, family, n_pairs, budget=budget, n_evals=n_evals, prefix=f"{family}/{noise}"
    )
    if family != "wiggle":
        params["wiggle_sd"] = truth_rng.uniform(discrepancy_sd[0], discrepancy_sd[1], len(params))
    pair = [f"{family}/{noise}/pair{i:03d}" for i in range(len(params))]
    npar = draw_noise_params(rng, noise, len(params))
    both = pd.concat([params.assign(run=[f"{p}/s{s}" for p in pair]) for s in (0, 1)], ignore_index=True)
    out = simulate(
        both, noise, rng, truth_rng=truth_rng, noise_params=pd.concat([npar, npar], ignore_index=True)
    )
    q = int(params["n_evals"].iloc[0]) if len(params) else 0
    out["pair"] = np.repeat(pair + pair, q)
    out["pair_seed"] = np.repeat(np.repeat([0, 1], len(params)), q)
    return out


def simulate_benchmark(
    seed: int,
    *,
    families: Sequence[str] = FAMILIES,
    noises: Sequence[str] = NOISES,
    runs_per_scenario: int = 24,
    pairs_per_scenario: int = 0,
    budget: tuple[float, float] = (8_000.0, 64_000.0),
    n_evals: int = 48,
) -> pd.DataFrame:
    """Every scenario (family x noise), plus optional seed pairs, in one tidy table.

    The runs of one family share their true curves (parameters, schedule and smooth
    discrepancy) across the noise models, so differences between noise models are the
    noise's. Each (family, noise) has its own generator seeded from ``(seed, family
    index, noise index)`` (families indexed in :data:`FAMILIES` then
    :data:`HELD_OUT_FAMILIES`, noises in :data:`NOISES` then :data:`HELD_OUT_NOISES`), so
    a scenario's runs do not change when other scenarios are added or left out.

    Parameters
    ----------
    seed : int
    families, noises : sequence of str
        Scenarios to simulate.
    runs_per_scenario : int
        Single runs per scenario (role ``"run"``).
    pairs_per_scenario : int
        Seed pairs per scenario (role ``"pair"``; :func:`simulate_seed_pairs`).
    budget : tuple of float
        Range of the final budgets (GPU-hours).
    n_evals : int
        Evaluations per run (step 0 included).

    Returns
    -------
    pandas.DataFrame
        The columns of :func:`simulate` plus ``role``, ``pair`` and ``pair_seed`` (empty /
        -1 for single runs); ``n_eval`` is NaN outside binomial scenarios.
    """
    for f in families:
        _check_family(f)
    frames = []
    for family in families:
        fi = (FAMILIES + HELD_OUT_FAMILIES).index(family)
        for noise in noises:
            _check_noise(noise)
            ni = (NOISES + HELD_OUT_NOISES).index(noise)
            trng = np.random.default_rng([seed, fi, 1])  # same state for every noise model
            params = draw_params(
                trng, family, runs_per_scenario, budget=budget, n_evals=n_evals, prefix=f"{family}/{noise}"
            )
            df = simulate(params, noise, np.random.default_rng([seed, fi, ni, 2]), truth_rng=trng)
            frames.append(df.assign(role="run", pair="", pair_seed=-1))
            if pairs_per_scenario:
                pairs = simulate_seed_pairs(
                    np.random.default_rng([seed, fi, ni, 4]),
                    family,
                    noise,
                    pairs_per_scenario,
                    budget=budget,
                    n_evals=n_evals,
                    truth_rng=np.random.default_rng([seed, fi, 3]),
                )
                frames.append(pairs.assign(role="pair"))
    out = pd.concat(frames, ignore_index=True)
    if "n_eval" not in out.columns:
        out["n_eval"] = np.nan
    return out
