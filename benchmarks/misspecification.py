"""Predictive bands on curves that are not the fitted sigmoid: coverage when extrapolating 2-8x.

The package's bands are calibrated on simulated sigmoids; real curves are only roughly
sigmoids. This benchmark simulates runs from the misspecified truth-curve families of
:mod:`bayes_scalerl.analyses.misspec` (sigmoid control, creep, two stacked sigmoids, saturating
power law, exponential saturation, smooth wiggle, late downward drift), each with three
evaluation-noise models (iid Gaussian, AR(1), binomial), fits every run on the first
``1 / h`` of its compute for each horizon ``h`` (``bs.backtest(runs, fraction=1 / h)``: all
scenarios of one horizon are one batched fit per method) and scores every held-out
evaluation against the posterior predictive of a new evaluation:

- coverage of the central 50% and 90% intervals (all held-out points, and the last
  evaluation alone, which lies ``h`` times beyond the fitted compute), mean 90% width,
  CRPS, median absolute error and bias (mean of predictive median minus observation) of
  the median, share of runs converged (``FitResult.diagnostics()``);
- seed pairs (two runs with the same truth, independent noise and independent smooth
  discrepancy): the share of pairs for which ``bs.compare`` on ``A`` says one is
  "higher" at ``P > 0.9`` (the truth is equal, so every such verdict is wrong), with
  ``compare``'s seed term (the default) and without it (``seed_sd=0``);
- identify verdicts: among runs whose ``A`` is "identified" (``bs.identifiability``),
  the share whose true ceiling (the limit as compute -> infinity) lies outside the
  reported 90% interval of ``A``.

Methods are a dict, name -> keyword arguments of ``bs.fit`` (:data:`METHODS`), chosen with
``--methods``; ``--method NAME=JSON`` adds one (``"priors"`` may be a dict of
``bs.Priors`` fields). ``ls`` (the paper's least-squares fit, a point forecast) and
``ls_boot`` (its residual bootstrap) come from ``bs.backtest`` alongside the first
Bayesian method.

Usage::

    python benchmarks/misspecification.py --runs-per-scenario 12 --pairs-per-scenario 6 \\
        --methods gaussian,ar1,ls_boot --horizons 2,4,8 --out benchmarks/results/misspecification.md
    python benchmarks/misspecification.py --methods gaussian,mine \\
        --method 'mine={"priors": {"likelihood": "ar1", "rho_scale": 0.5}}'
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shlex
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

import bayes_scalerl as bs
from bayes_scalerl.analyses.misspec import (
    FAMILIES,
    HELD_OUT_FAMILIES,
    HELD_OUT_NOISES,
    NOISES,
    simulate_benchmark,
)

sys.path.insert(0, str(Path(__file__).resolve().parent))
from environment import machine_line, versions_line, write_results  # noqa: E402

__all__ = [
    "METHODS",
    "BASELINES",
    "DEFAULT_METHODS",
    "SCORE_COLUMNS",
    "MisspecResult",
    "parse_method",
    "run_benchmark",
    "split_scenario",
    "clustered_se",
    "summarise",
    "range_check",
    "to_markdown",
    "main",
]

#: Bayesian methods: name -> keyword arguments of ``bs.fit`` (through ``bs.backtest``'s
#: ``fit_kwargs``). Add new predictive models here (or with ``--method NAME=JSON``).
METHODS: dict[str, dict[str, Any]] = {
    # the default: AR(1) noise at the batch's correlation + calibrated discrepancy + priors
    # learnt from the batch (tables before 2026-12-07: the fixed priors, now "fixed")
    "calibrated": {"priors": bs.Priors()},
    # the default until 2026-12-07: the same with the fixed priors
    "fixed": {"priors": bs.Priors(from_batch=False)},
    # the default with R0 a parameter, not the first evaluation
    "r0fit": {"priors": bs.Priors(R0_fitted=True)},
    # an earlier default: independent Gaussian noise + calibrated discrepancy, R0 the first evaluation
    "calibrated_gaussian": {"priors": bs.Priors(likelihood="gaussian", R0_fitted=False, from_batch=False)},
    # version 0.1's exact sigmoid with independent Gaussian noise, R0 the first evaluation
    "gaussian": {
        "priors": bs.Priors(likelihood="gaussian", R0_fitted=False, from_batch=False),
        "discrepancy": False,
    },
    # AR(1) with each run's correlation sampled, exact sigmoid
    "ar1": {"priors": bs.Priors(likelihood="ar1", rho=None, from_batch=False), "discrepancy": False},
    "student_t": {"priors": bs.Priors(likelihood="student_t", from_batch=False), "discrepancy": False},
}
#: Baselines computed by ``bs.backtest`` beside a Bayesian fit: name -> its method label there.
BASELINES = {"ls_boot": "boot", "ls": "ls"}
DEFAULT_METHODS = ("calibrated", "gaussian", "ls_boot")
#: Columns of the score tables (besides the grouping columns).
SCORE_COLUMNS = (
    "n_runs",
    "n_points",
    "coverage50",
    "coverage90",
    "coverage90_se",
    "coverage90_end",
    "width90",
    "crps",
    "median_abs_error",
    "bias",
    "converged",
)
#: Arguments of ``bs.fit`` the benchmark sets through ``bs.backtest``.
_RESERVED = ("min_compute", "fit_until", "seed")


@dataclasses.dataclass
class MisspecResult:
    """Everything one benchmark run measured.

    Attributes
    ----------
    points : pandas.DataFrame
        One row per held-out evaluation of a single run (role ``"run"``), horizon and
        method: ``run, scenario, family, noise, horizon, method, compute, reward, cutoff,
        at_end`` (the run's last evaluation) and ``bs.backtest``'s ``median, q05, q25, q75,
        q95, covered50, covered90, crps, abs_error``.
    runs : pandas.DataFrame
        One row per run, horizon and Bayesian method: ``run, role, pair, scenario, family,
        noise, horizon, method, converged, a_median, a_q05, a_q95, a_identified,
        true_ceiling, ceiling_in_90``.
    scores : pandas.DataFrame
        :func:`summarise` of ``points`` by ``scenario, family, noise, horizon, method``.
    pairs : pandas.DataFrame
        One row per seed pair, horizon and Bayesian method: ``pair, scenario, family,
        noise, horizon, method, p_a_greater, verdict, higher`` (the verdict says one run
        is higher).
    timings : pandas.DataFrame
        ``horizon, method, n_runs, n_skipped, seconds`` of each ``bs.backtest`` call.
    settings : dict
        The arguments.
    """

    points: pd.DataFrame
    runs: pd.DataFrame
    scores: pd.DataFrame
    pairs: pd.DataFrame
    timings: pd.DataFrame
    settings: dict


def parse_method(spec: str) -> tuple[str, dict[str, Any]]:
    """Parse ``NAME=JSON`` into a method: ``JSON`` is an object of ``bs.fit`` arguments.

    A ``"priors"`` entry that is an object becomes ``bs.Priors(**entry)``, a
    ``"discrepancy"`` entry that is an object ``bs.Discrepancy(**entry)``, a ``"retry"``
    entry that is an object ``Retry(**entry)``.

    Parameters
    ----------
    spec : str
        For example ``'robust={"priors": {"likelihood": "student_t", "nu": 3}}'``.

    Returns
    -------
    name, kwargs : str, dict
    """
    name, sep, text = spec.partition("=")
    if not sep or not name:
        raise ValueError(f"a method is NAME=JSON, got {spec!r}")
    kwargs = json.loads(text)
    if not isinstance(kwargs, dict):
        raise ValueError(f"method {name!r}: the JSON must be an object of bs.fit arguments")
    if isinstance(kwargs.get("priors"), dict):
        kwargs["priors"] = bs.Priors(**kwargs["priors"])
    if isinstance(kwargs.get("discrepancy"), dict):
        kwargs["discrepancy"] = bs.Discrepancy(**kwargs["discrepancy"])
    if isinstance(kwargs.get("retry"), dict):
        from bayes_scalerl.engine.retry import Retry

        kwargs["retry"] = Retry(**kwargs["retry"])
    return name, kwargs


def clustered_se(x: pd.Series, cluster: pd.Series) -> float:
    """Monte Carlo standard error of ``x.mean()`` when the rows of one cluster share luck.

    The held-out points of one run share its curve's error, so they are far from
    independent: the ratio estimator's sandwich variance over clusters (runs),
    ``sum_i (k_i - p n_i)^2 / (sum_i n_i)^2 * m / (m - 1)`` with ``k_i`` the sum and
    ``n_i`` the count of cluster ``i`` and ``m`` clusters. NaN with fewer than two.
    """
    g = pd.DataFrame({"x": np.asarray(x, float), "c": np.asarray(cluster)}).groupby("c")["x"]
    k, n = g.sum().to_numpy(), g.size().to_numpy(float)
    m = len(n)
    if m < 2:
        return float("nan")
    p = k.sum() / n.sum()
    return float(np.sqrt(np.sum((k - p * n) ** 2) * m / (m - 1)) / n.sum())


def summarise(points: pd.DataFrame, runs: pd.DataFrame, by: Sequence[str]) -> pd.DataFrame:
    """Scores of held-out points grouped by ``by`` (columns of both tables).

    Parameters
    ----------
    points : pandas.DataFrame
        :attr:`MisspecResult.points`.
    runs : pandas.DataFrame
        :attr:`MisspecResult.runs` (for the converged share; single runs only).
    by : sequence of str
        Grouping columns, e.g. ``("family", "horizon", "method")``.

    Returns
    -------
    pandas.DataFrame
        ``by`` then :data:`SCORE_COLUMNS`: runs and points scored, coverage of the central
        50% / 90% intervals (all held-out points; ``coverage90_se``: its Monte Carlo
        standard error with the points clustered by run, :func:`clustered_se`;
        ``coverage90_end``: the last evaluation of each run only), mean 90% width, mean
        CRPS, median absolute error and mean bias
        (median minus observation) of the predictive median, share of runs converged
        (NaN for the least-squares baselines). Coverages are NaN for the point forecast
        ``ls``.
    """
    by = list(by)
    conv = runs[runs["role"] == "run"].groupby(by)["converged"].mean() if len(runs) else None
    rows = []
    for key, p in points.groupby(by, sort=False):
        key = key if isinstance(key, tuple) else (key,)
        end = p[p["at_end"]]
        point_forecast = p["q05"].isna().all()

        def cov(s: pd.Series, point_forecast: bool = point_forecast) -> float:
            return np.nan if point_forecast else float(s.astype(float).mean())

        def cov_se(s: pd.Series, run: pd.Series = p["run"], point_forecast: bool = point_forecast) -> float:
            return np.nan if point_forecast else clustered_se(s.astype(float), run)

        c = np.nan
        if conv is not None and key in conv.index:
            c = float(conv.loc[key])
        rows.append(
            {
                **dict(zip(by, key, strict=True)),
                "n_runs": p["run"].nunique(),
                "n_points": len(p),
                "coverage50": cov(p["covered50"]),
                "coverage90": cov(p["covered90"]),
                "coverage90_se": cov_se(p["covered90"]),
                "coverage90_end": cov(end["covered90"]),
                "width90": np.nan if point_forecast else float((p["q95"] - p["q05"]).mean()),
                "crps": float(p["crps"].mean()),
                "median_abs_error": float(p["abs_error"].median()),
                "bias": float((p["median"] - p["reward"]).mean()),
                "converged": c,
            }
        )
    return pd.DataFrame(rows, columns=by + list(SCORE_COLUMNS))


def _ordered(points: pd.DataFrame, methods: list[str]) -> pd.DataFrame:
    """Points sorted by family, noise (in the simulator's order), horizon and method (as asked)."""
    key = {
        "family": lambda s: s.map({f: i for i, f in enumerate(FAMILIES + HELD_OUT_FAMILIES)}),
        "noise": lambda s: s.map({n: i for i, n in enumerate(NOISES + HELD_OUT_NOISES)}),
        "method": lambda s: s.map({m: i for i, m in enumerate(methods)}),
    }
    return points.sort_values(
        ["family", "noise", "horizon", "method"], key=lambda s: key.get(s.name, lambda x: x)(s), kind="stable"
    ).reset_index(drop=True)


def _pair_verdicts(res: bs.FitResult, pair_runs: pd.DataFrame) -> list[dict[str, Any]]:
    """``bs.compare`` on ``A`` for every pair whose two seeds are both in the fit."""
    fitted = set(res.run_names)
    rows = []
    for pair, g in pair_runs.groupby("pair", sort=False):
        s = g.sort_values("pair_seed")["run"].tolist()
        if len(s) != 2 or not set(s) <= fitted:
            continue
        r = bs.compare(res, s[0], s[1], params=("A",)).iloc[0]
        r0 = bs.compare(res, s[0], s[1], params=("A",), seed_sd=0.0).iloc[0]  # these seeds only
        rows.append(
            {
                "pair": pair,
                "p_a_greater": float(r["p_a_greater"]),
                "verdict": str(r["verdict"]),
                "higher": str(r["verdict"]).endswith(" higher"),
                "higher_seed_sd0": str(r0["verdict"]).endswith(" higher"),
            }
        )
    return rows


def split_scenario(info: pd.DataFrame, batch_size: int | None) -> list[list[str]]:
    """One scenario's runs in fits of about ``batch_size`` runs (all in one without it).

    ``info`` has one row per run (``run``, ``role``, ``pair``). A seed pair is one unit of
    two runs (so that ``compare`` sees both); units go, largest first, to the fit with the
    fewest runs so far, so the fits differ by at most one run beyond a pair.
    """
    names = info["run"].tolist()
    if batch_size is None or len(names) <= batch_size:
        return [names]
    units = [[r] for r in info.loc[info["role"] != "pair", "run"]]
    units += [g["run"].tolist() for _, g in info[info["role"] == "pair"].groupby("pair", sort=False)]
    n_fits = max(1, round(len(names) / batch_size))
    fits: list[list[str]] = [[] for _ in range(n_fits)]
    for unit in sorted(units, key=len, reverse=True):  # stable: the simulation's order within a size
        min(fits, key=len).extend(unit)
    return fits


def run_benchmark(
    data: pd.DataFrame | None = None,
    *,
    methods: Mapping[str, Mapping[str, Any]] | Sequence[str] = DEFAULT_METHODS,
    horizons: Sequence[float] = (2.0, 4.0, 8.0),
    seed: int = 0,
    runs_per_scenario: int = 24,
    pairs_per_scenario: int = 12,
    families: Sequence[str] = FAMILIES,
    noises: Sequence[str] = NOISES,
    n_evals: int = 48,
    chains: int = 4,
    warmup: int = 500,
    samples: int = 500,
    bootstrap: int = 200,
    batch: str = "all",
    batch_size: int | None = None,
    log: Callable[[str], None] | None = print,
) -> MisspecResult:
    """Run the misspecification benchmark.

    Parameters
    ----------
    data : pandas.DataFrame, optional
        Curves as from :func:`bayes_scalerl.analyses.misspec.simulate_benchmark` (columns ``run,
        compute, reward, role, pair, pair_seed, scenario, family, noise, true_ceiling``,
        ``n_eval``). Default: simulated here from ``seed``, ``families``, ``noises``,
        ``runs_per_scenario``, ``pairs_per_scenario`` and ``n_evals``.
    methods : mapping or sequence of str
        Name -> ``bs.fit`` keyword arguments, or names of :data:`METHODS` and
        :data:`BASELINES` (``ls_boot``, ``ls``: taken from the backtest of the first
        Bayesian method, or of ``gaussian`` if none is asked for).
    horizons : sequence of float
        Extrapolation factors ``h > 1``: each run is fitted on compute ``<= max / h``.
    seed : int
        Seed of the simulation and of the fits.
    runs_per_scenario, pairs_per_scenario, families, noises, n_evals
        Simulation settings (when ``data`` is not given).
    chains, warmup, samples : int
        NUTS settings of every Bayesian method (a method's own arguments win).
    bootstrap : int
        Replicates of the least-squares residual bootstrap (``ls_boot``).
    batch : {"all", "scenario"}
        ``"all"``: every run in one fit (one batch: the calibration pools all scenarios).
        ``"scenario"``: one fit per scenario, as a lab fits the runs of one setup together.
    batch_size : int, optional
        With ``batch="scenario"``: split each scenario's runs into fits of about this many
        runs (a seed pair's two runs in the same fit; see :func:`split_scenario`), as a lab
        with a handful of ablations fits them. Default: the whole scenario in one fit.
    log : callable, optional
        Progress messages (default ``print``; None for silence).

    Returns
    -------
    MisspecResult
    """
    say = log or (lambda _msg: None)
    if not isinstance(methods, Mapping):
        unknown = [m for m in methods if m not in METHODS and m not in BASELINES]
        if unknown:
            raise ValueError(f"unknown method(s) {unknown}; known: {list(METHODS) + list(BASELINES)}")
        methods = {m: METHODS.get(m, {}) for m in methods}
    bayes_methods = {k: dict(v) for k, v in methods.items() if k not in BASELINES}
    baselines = [k for k in methods if k in BASELINES]
    for name, kw in bayes_methods.items():
        clash = [k for k in _RESERVED if k in kw]
        if clash:
            raise ValueError(f"method {name!r} may not set {clash}: the benchmark sets them")
    if batch not in ("all", "scenario"):
        raise ValueError(f"batch must be 'all' or 'scenario', got {batch!r}")
    if batch_size is not None and (batch != "scenario" or batch_size < 2):
        raise ValueError(f"batch_size needs batch='scenario' and at least 2 runs, got {batch_size!r}")
    if not all(h > 1 for h in horizons):
        raise ValueError(f"horizons must be > 1, got {list(horizons)}")
    if data is None:
        data = simulate_benchmark(
            seed,
            families=families,
            noises=noises,
            runs_per_scenario=runs_per_scenario,
            pairs_per_scenario=pairs_per_scenario,
            n_evals=n_evals,
        )
    cols = ["run", "compute", "reward"]
    if "n_eval" in data.columns and data["n_eval"].notna().all():
        cols.append("n_eval")  # only when every run has it (a mixed batch has NaN elsewhere)
    runs = bs.Runs.from_frame(data[cols], source="<misspecification benchmark>")
    info = data.groupby("run", sort=False).agg(
        role=("role", "first"),
        pair=("pair", "first"),
        pair_seed=("pair_seed", "first"),
        scenario=("scenario", "first"),
        family=("family", "first"),
        noise=("noise", "first"),
        true_ceiling=("true_ceiling", "first"),
        max_compute=("compute", "max"),
    )
    info.index.name = "run"
    info = info.reset_index()
    single = set(info.loc[info["role"] == "run", "run"])
    pair_runs = info[info["role"] == "pair"]
    to_run = dict(bayes_methods) if bayes_methods else {"gaussian": dict(METHODS["gaussian"])}
    first = next(iter(to_run))
    sampler = {"chains": chains, "warmup": warmup, "samples": samples, "progress": False}

    points, run_rows, pair_rows, timings = [], [], [], []
    if batch == "all":
        batches = [runs]
    else:
        batches = [
            runs.subset(names)
            for _, part in info.groupby("scenario", sort=False)
            for names in split_scenario(part, batch_size)
        ]
    for h in horizons:
        for name, kw in to_run.items():
            with_baselines = name == first and bool(baselines)
            t0 = time.perf_counter()
            n_scored = n_skipped = 0
            for part in batches:
                bt = bs.backtest(
                    part,
                    fraction=1.0 / h,
                    fit_kwargs={**sampler, **kw},
                    bootstrap=bootstrap if "ls_boot" in baselines and with_baselines else 0,
                    seed=seed,
                    baseline=False,  # version 0.1's model is the method "gaussian" here
                )
                n_scored += int(bt.runs["scored"].sum())
                n_skipped += int((~bt.runs["scored"]).sum())
                labels = {"bayes": name} if name in bayes_methods else {}
                if with_baselines:
                    labels.update({BASELINES[b]: b for b in baselines})
                p = bt.points[bt.points["method"].isin(list(labels)) & bt.points["run"].isin(single)]
                p = p.assign(method=p["method"].map(labels), horizon=h)
                points.append(p)
                if name not in bayes_methods:
                    continue
                # ---- per run: convergence and the identify verdict against the true ceiling
                ident = bs.identifiability(bt.fit)
                r = ident[["run", "converged", "a_median", "a_q05", "a_q95", "a_identified"]].merge(
                    info, on="run"
                )
                r["ceiling_in_90"] = (r["a_q05"] <= r["true_ceiling"]) & (r["true_ceiling"] <= r["a_q95"])
                run_rows.append(r.assign(horizon=h, method=name))
                # ---- seed pairs: does compare call one of two equal truths higher?
                part_pairs = pair_runs[pair_runs["run"].isin(part.names)]
                for row in _pair_verdicts(bt.fit, part_pairs):
                    pair_rows.append({**row, "horizon": h, "method": name})
            took = time.perf_counter() - t0
            timings.append(
                {"horizon": h, "method": name, "n_runs": n_scored, "n_skipped": n_skipped, "seconds": took}
            )
            say(f"horizon {h:g}, {name}: {took:.0f} s, {n_scored} runs, {n_skipped} skipped")

    pts = pd.concat(points, ignore_index=True)
    pts = pts.merge(info[["run", "scenario", "family", "noise", "max_compute"]], on="run")
    pts["at_end"] = pts["compute"] >= pts["max_compute"]
    pts = pts.drop(columns="max_compute")
    run_table = (
        pd.concat(run_rows, ignore_index=True)
        if run_rows
        else pd.DataFrame(
            columns=["run", "role", "horizon", "method", "converged", "family", "noise", "scenario"]
        )
    )
    pairs = pd.DataFrame(
        pair_rows,
        columns=["pair", "p_a_greater", "verdict", "higher", "higher_seed_sd0", "horizon", "method"],
    )
    if len(pairs):
        pinfo = pair_runs.drop_duplicates("pair")[["pair", "scenario", "family", "noise"]]
        pairs = pairs.merge(pinfo, on="pair")
    pts = _ordered(pts, list(methods))
    scores = summarise(pts, run_table, ("scenario", "family", "noise", "horizon", "method"))
    settings = {
        "methods": {k: json.loads(json.dumps(v, default=repr)) for k, v in methods.items()},
        "horizons": list(horizons),
        "seed": seed,
        "runs_per_scenario": runs_per_scenario,
        "pairs_per_scenario": pairs_per_scenario,
        "n_evals": n_evals,
        "chains": chains,
        "warmup": warmup,
        "samples": samples,
        "bootstrap": bootstrap,
        "batch": batch,
        "batch_size": batch_size,
        "n_batches": len(batches),
        "n_runs": runs.n_runs,
    }
    return MisspecResult(
        points=pts,
        runs=run_table,
        scores=scores,
        pairs=pairs,
        timings=pd.DataFrame(timings),
        settings=settings,
    )


# ---------------------------------------------------------------------- report
def _fmt(x: Any, digits: int = 3) -> str:
    if isinstance(x, (bool, np.bool_)):
        return str(bool(x))
    if isinstance(x, (int, np.integer)):
        return str(int(x))
    if isinstance(x, (float, np.floating)):
        return "-" if not np.isfinite(x) else f"{x:.{digits}f}"
    return str(x)


def _table(df: pd.DataFrame, digits: int = 3) -> list[str]:
    if "horizon" in df.columns:
        df = df.assign(horizon=[f"{h:g}x" for h in df["horizon"]])
    head = "| " + " | ".join(map(str, df.columns)) + " |"
    rule = "|" + "---|" * len(df.columns)
    body = ["| " + " | ".join(_fmt(v, digits) for v in row) + " |" for row in df.itertuples(index=False)]
    return [head, rule, *body]


def _col(method: str, h: float) -> str:
    return f"{method} {h:g}x"


def _wide(df: pd.DataFrame, row: str, value: str, methods: list[str], horizons: list[float]) -> pd.DataFrame:
    """``value`` with one row per ``row`` and one column per (method, horizon)."""
    out = pd.DataFrame({row: list(dict.fromkeys(df[row]))})
    for m in methods:
        for h in horizons:
            sub = df[(df["method"] == m) & (df["horizon"] == h)].set_index(row)[value]
            out[_col(m, h)] = out[row].map(sub)
    return out


def _pooled(res: MisspecResult, by: str) -> pd.DataFrame:
    """Scores pooled over the other scenario axis, plus an ``all misspecified`` row."""
    pts = res.points
    per = summarise(pts, res.runs, (by, "horizon", "method"))
    mis = pts[pts["family"] != "sigmoid"].assign(**{by: "all but sigmoid"})
    runs = (
        res.runs[res.runs["family"] != "sigmoid"].assign(**{by: "all but sigmoid"})
        if len(res.runs)
        else res.runs
    )
    return pd.concat([per, summarise(mis, runs, (by, "horizon", "method"))], ignore_index=True)


def _share(df: pd.DataFrame, by: str, flag: str, among: str | None = None) -> pd.DataFrame:
    """Share of rows with ``flag`` among rows with ``among``, per (``by``, horizon, method)."""
    parts = [df, df[df["family"] != "sigmoid"].assign(**{by: "all but sigmoid"})]
    rows = []
    for part in parts:
        for key, g in part.groupby([by, "horizon", "method"], sort=False):
            base = g[among].astype(bool) if among else pd.Series(True, index=g.index)
            n, k = int(base.sum()), int((g[flag].astype(bool) & base).sum())
            cell = f"{k / n:.2f} ({k}/{n})" if n else "- (0/0)"
            rows.append({by: key[0], "horizon": key[1], "method": key[2], "cell": cell})
    return pd.DataFrame(rows, columns=[by, "horizon", "method", "cell"])


def range_check(scores: pd.DataFrame, low: float = 0.85, high: float = 0.95, z: float = 2.0) -> pd.DataFrame:
    """Scenarios inside ``[low, high]`` (90% coverage), and those outside it beyond their Monte Carlo error.

    A cell of 48 runs has a standard error of 0.01-0.05 (``coverage90_se``, clustered by
    run), so even a calibrated band falls outside 0.85-0.95 in some cells by chance. A cell
    is *outside* when its whole ``coverage90 +- z se`` interval is: above ``high`` (too
    wide) or below ``low`` (too narrow).

    Parameters
    ----------
    scores : pandas.DataFrame
        :attr:`MisspecResult.scores` (columns ``scenario, horizon, method, coverage90,
        coverage90_se``).
    low, high : float
    z : float
        Standard errors a cell must lie beyond the range.

    Returns
    -------
    pandas.DataFrame
        One row per method and horizon: ``method, horizon, scenarios, inside``,
        ``too_wide`` and ``too_narrow`` (counts) and ``outside`` (the scenarios, with
        coverage and standard error).
    """
    rows = []
    for (method, h), g in scores.groupby(["method", "horizon"], sort=False):
        cov, se = g["coverage90"].astype(float), g["coverage90_se"].astype(float).fillna(0.0)
        wide, narrow = cov - z * se > high, cov + z * se < low
        out = wide | narrow
        rows.append(
            {
                "method": method,
                "horizon": h,
                "scenarios": len(g),
                "inside": int(cov.between(low, high).sum()),
                "too_wide": int(wide.sum()),
                "too_narrow": int(narrow.sum()),
                "outside": ", ".join(
                    f"{n} {c:.3f} ({e:.3f})"
                    for n, c, e in zip(g["scenario"][out], cov[out], se[out], strict=True)
                ),
            }
        )
    return pd.DataFrame(rows)


def to_markdown(res: MisspecResult, header: Sequence[str] = ()) -> str:
    """The benchmark's tables as Markdown.

    Parameters
    ----------
    res : MisspecResult
    header : sequence of str
        Lines put first (title, command, machine).

    Returns
    -------
    str
    """
    methods = list(res.settings["methods"])
    horizons = [float(h) for h in res.settings["horizons"]]
    bayes = [m for m in methods if m not in BASELINES]
    lines = list(header)
    s = res.settings
    batch = "all in one fit" if s.get("batch", "all") == "all" else "one fit per scenario"
    if s.get("batch_size"):
        batch = f"each scenario in fits of about {s['batch_size']} runs ({s['n_batches']} fits)"
    lines += [
        "",
        f"{s['runs_per_scenario']} runs and {s['pairs_per_scenario']} seed pairs per scenario "
        f"({len(res.scores['scenario'].unique())} scenarios: family x noise), {s['n_evals']} evaluations "
        f"per run evenly spaced in steps, final budgets 8k-64k GPU-hours; {s['n_runs']} runs, {batch}. NUTS: "
        f"{s['chains']} chains x {s['warmup']} warm-up x {s['samples']} draws; least-squares bootstrap "
        f"{s['bootstrap']} replicates. Each run is fitted on compute <= max / h and scored on every later "
        "evaluation (from just beyond the fit window out to h times it). `coverage90_se`: Monte Carlo "
        "standard error of `coverage90`, the points clustered by run (one run's points share its curve's "
        "error, so a cell of 8 runs is uncertain by several points). `coverage90_end`: the 90% band at "
        "the run's last evaluation (h times the fitted compute) only. `bias`: mean of predictive median "
        "minus observation (negative: the forecast is too low). `converged`: share of runs passing the "
        "package's R-hat/ESS/divergence check.",
        "",
        "## Summary: the sigmoid control against the misspecified families (pooled)",
        "",
    ]
    fam = _pooled(res, "family")
    keep = fam["family"].isin(["sigmoid", "all but sigmoid"])
    lines += _table(fam[keep].rename(columns={"family": "curves"}))
    lines += [
        "",
        "## Scenarios inside 0.85-0.95, and outside it by more than two standard errors",
        "",
        "`inside`: 90% coverage in 0.85-0.95 (the issue's target, every scenario). With cell errors "
        "of 0.01-0.05 a calibrated band misses that range in some cells by chance, so `too_wide` and "
        "`too_narrow` count the cells whose `coverage90 +- 2 se` lies wholly above or below it "
        "(`range_check`). The error clusters points by run, not by batch: a scenario's runs share "
        "the width learnt from their batch, and two seeds' cells differed by 1.3 (2x) to 1.65 (4x) "
        "times the error the two reported (`misspecification-seed2.md`), so these verdicts are "
        "too quick to call a cell out of range.",
        "",
    ]
    lines += _table(range_check(res.scores))
    for value, title in (
        ("coverage90", "90% coverage of held-out evaluations (nominal 0.90)"),
        ("coverage50", "50% coverage of held-out evaluations (nominal 0.50)"),
        ("coverage90_end", "90% coverage at the last evaluation, h times the fitted compute"),
        ("width90", "Mean width of the 90% band"),
        ("crps", "CRPS (lower is better)"),
        ("median_abs_error", "Median absolute error of the predictive median"),
        ("bias", "Bias of the predictive median (median - observed)"),
        ("converged", "Share of runs converged"),
    ):
        ms = bayes if value == "converged" else methods
        lines += ["", f"## {title}, by family (pooled over noise models)", ""]
        lines += _table(_wide(fam, "family", value, ms, horizons))
    noise = _pooled(res, "noise")
    lines += ["", "## 90% coverage by noise model (pooled over families)", ""]
    lines += _table(
        _wide(noise[noise["noise"] != "all but sigmoid"], "noise", "coverage90", methods, horizons)
    )
    if len(res.pairs):
        lines += [
            "",
            "## Seed pairs: share of pairs that `bs.compare` on A calls higher either way (P > 0.9)",
            "",
            "Both seeds share the truth (independent noise and independent smooth discrepancy, sd "
            "0.005-0.015, or the family's own for `wiggle`), so every such verdict is wrong; the target is "
            "about 0.10 or less. Cells: share (pairs called / pairs).",
            "",
        ]
        lines += _table(_wide(_share(res.pairs, "family", "higher"), "family", "cell", bayes, horizons))
        if "higher_seed_sd0" in res.pairs.columns:
            lines += [
                "",
                "The same pairs compared without `compare`'s seed term (`seed_sd=0`, version 0.1: these "
                "seeds only):",
                "",
            ]
            lines += _table(
                _wide(_share(res.pairs, "family", "higher_seed_sd0"), "family", "cell", bayes, horizons)
            )
    if len(res.runs):
        single = res.runs[res.runs["role"] == "run"].assign(outside=lambda d: ~d["ceiling_in_90"])
        lines += [
            "",
            "## Identify verdicts: runs whose A is 'identified' (`bs.identifiability`)",
            "",
            "Share of runs with `a_identified` (k/n):",
            "",
        ]
        lines += _table(_wide(_share(single, "family", "a_identified"), "family", "cell", bayes, horizons))
        lines += [
            "",
            "Among them, the share whose true ceiling (the curve's limit as compute -> infinity) lies "
            "outside the reported 90% interval of A (nominal 0.10):",
            "",
        ]
        ident = _share(single, "family", "outside", among="a_identified")
        lines += _table(_wide(ident, "family", "cell", bayes, horizons))
    lines += ["", "## Every scenario", ""]
    lines += _table(res.scores.drop(columns=["family", "noise"]))
    t = res.timings.copy()
    lines += ["", "## Fit times (`bs.backtest`, one batched fit per horizon and method)", ""]
    lines += _table(t, digits=1)
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> MisspecResult:
    """Command line: run the benchmark, print the tables and write them to ``--out``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--runs-per-scenario", type=int, default=24)
    ap.add_argument("--pairs-per-scenario", type=int, default=12)
    ap.add_argument(
        "--methods",
        default=",".join(DEFAULT_METHODS),
        help=f"comma-separated names of {list(METHODS) + list(BASELINES)} and --method additions",
    )
    ap.add_argument("--method", action="append", default=[], metavar="NAME=JSON", help="add a method")
    ap.add_argument("--horizons", default="2,4,8", help="extrapolation factors, fit on compute <= max / h")
    ap.add_argument(
        "--families", default=",".join(FAMILIES), help=f"comma-separated; also held out: {HELD_OUT_FAMILIES}"
    )
    ap.add_argument(
        "--noises", default=",".join(NOISES), help=f"comma-separated; also held out: {HELD_OUT_NOISES}"
    )
    ap.add_argument("--n-evals", type=int, default=48)
    ap.add_argument("--chains", type=int, default=4)
    ap.add_argument("--warmup", type=int, default=500)
    ap.add_argument("--samples", type=int, default=500)
    ap.add_argument("--bootstrap", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--batch",
        choices=("all", "scenario"),
        default="all",
        help="all: every run in one fit; scenario: one fit per scenario (as a lab fits one setup's runs)",
    )
    ap.add_argument(
        "--batch-size",
        type=int,
        default=None,
        help="with --batch scenario: fits of about this many runs each (a lab's handful of ablations)",
    )
    ap.add_argument("--out", default=None, help="Markdown file to write")
    a = ap.parse_args(argv)
    bs.use_all_cpu_cores()
    known = {**METHODS, **{b: {} for b in BASELINES}}
    known.update(parse_method(spec) for spec in a.method)
    names = [m for m in a.methods.split(",") if m]
    missing = [m for m in names if m not in known]
    if missing:
        ap.error(f"unknown method(s) {missing}; known: {list(known)}")
    t0 = time.perf_counter()
    res = run_benchmark(
        methods={m: known[m] for m in names},
        horizons=[float(h) for h in a.horizons.split(",")],
        seed=a.seed,
        runs_per_scenario=a.runs_per_scenario,
        pairs_per_scenario=a.pairs_per_scenario,
        families=a.families.split(","),
        noises=a.noises.split(","),
        n_evals=a.n_evals,
        chains=a.chains,
        warmup=a.warmup,
        samples=a.samples,
        bootstrap=a.bootstrap,
        batch=a.batch,
        batch_size=a.batch_size,
    )
    wall = time.perf_counter() - t0
    header = [
        "# Bands on misspecified curves: coverage when extrapolating 2-8x",
        "",
        "Command: `" + shlex.join(["python", "benchmarks/misspecification.py", *argv]) + "`",
        "",
        machine_line(),
        versions_line(),
        f"Wall time: {wall:.0f} s (simulation, fits, scoring).",
    ]
    text = to_markdown(res, header)
    write_results(text, a.out)
    return res


if __name__ == "__main__":
    main()
