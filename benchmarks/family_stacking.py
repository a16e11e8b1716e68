"""Stacking curve families by leave-future-out scores: does it calibrate the bands?

The issue "Bands you can bet compute on" names Bayesian stacking (Yao, Vehtari, Simpson and
Gelman 2018) of curve families, weighted by leave-future-out predictive scores (Buerkner,
Gabry and Vehtari 2020), as one way to a predictive that stays calibrated when the curve is
only roughly a sigmoid. This benchmark measures it beside the package's default.

For each batch of runs (one simulated scenario, or a real set) and each fraction ``f``:

1. every run is cut at ``f`` times its last compute (the *main* window) and, for the
   weights, at half of that (the *refit* window, as the default's discrepancy does);
2. every component is fitted on both windows with the package's engine: the sigmoid
   (``bs.fit`` with the default settings; ``sigmoid`` is its predictive without the
   calibrated discrepancy, ``calibrated`` with it, the package's default band), the
   ``power`` law and the ``exponential`` saturation (``fit_family``, independent Gaussian
   noise);
3. the stacking weights of a set of components maximise the batch's mean log predictive
   density of the refit's forecasts at the main window's later points (each component's
   density a normal with its predictive draws' mean and variance; each run's points
   averaged, so every run counts once), by EM on the simplex;
4. the stacked band is the mixture of the main fits' predictive draws with those weights,
   scored, like every component, on the evaluations beyond the main window.

Stacks: ``stack`` = sigmoid + power + exponential (model uncertainty only, no discrepancy);
``stack_cal`` = calibrated + power + exponential.

Usage::

    python benchmarks/family_stacking.py --sim --runs-per-scenario 16 --horizons 2,4
    python benchmarks/family_stacking.py --data ../shared/data/dapo-metrics --fractions 0.25,0.5
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

import bayes_scalerl as bs
from bayes_scalerl.analyses.misspec import FAMILIES, NOISES, simulate_benchmark
from bayes_scalerl.analyses.scoring import crps_from_draws
from bayes_scalerl.data.runs import MIN_POINTS
from bayes_scalerl.posterior.families import fit_family

sys.path.insert(0, str(Path(__file__).resolve().parent))
from environment import machine_line, versions_line, write_results  # noqa: E402

__all__ = ["COMPONENTS", "STACKS", "stack_weights", "stack_batch", "main"]

#: Components fitted on each window.
COMPONENTS = ("calibrated", "sigmoid", "power", "exponential")
#: Stacks scored: name -> components.
STACKS: dict[str, tuple[str, ...]] = {
    "stack": ("sigmoid", "power", "exponential"),
    "stack_cal": ("calibrated", "power", "exponential"),
}
_METRIC = "val-core/*/acc/mean@1"


def stack_weights(logp: np.ndarray, run: np.ndarray, iters: int = 2000) -> np.ndarray:
    """Weights on the simplex maximising the runs' mean log score of the mixture (EM).

    Parameters
    ----------
    logp : ndarray, shape (point, component)
        Log predictive density of each component at each validation point.
    run : ndarray, shape (point,)
        Run of each point; each run's points share one run's weight.

    Returns
    -------
    ndarray, shape (component,)
    """
    _, inv, counts = np.unique(run, return_inverse=True, return_counts=True)
    wt = 1.0 / counts[inv]
    wt = wt / wt.sum()
    p = np.exp(logp - logp.max(axis=1, keepdims=True))
    k = logp.shape[1]
    w = np.full(k, 1.0 / k)
    for _ in range(iters):
        r = p * w
        r /= r.sum(axis=1, keepdims=True)
        new = wt @ r
        if np.max(np.abs(new - w)) < 1e-9:
            return new
        w = new
    return w


def _grid(table: pd.DataFrame, names: Sequence[str], after: Mapping, until: Mapping | None):
    """Each run's evaluations in ``(after, until]`` as a padded grid (run, q) and its mask."""
    keep = table["compute"] > table["run"].map(after)
    if until is not None:
        keep &= table["compute"] <= table["run"].map(until)
    held = table[keep & table["run"].isin(names)]
    sizes = held.groupby("run", sort=False).size().reindex(names).fillna(0).astype(int).to_numpy()
    width = max(int(sizes.max()), 1)
    valid = np.arange(width)[None, :] < sizes[:, None]
    grid = np.ones((len(names), width))
    y = np.zeros((len(names), width))
    held = held.set_index("run").loc[[n for n, s in zip(names, sizes, strict=True) if s]].reset_index()
    grid[valid] = held["compute"].to_numpy(float)
    y[valid] = held["reward"].to_numpy(float)
    grid = np.where(valid, grid, grid[:, :1])
    return grid, y, valid


def _fit_components(runs: bs.Runs, seed: int, fit_kwargs: dict) -> dict[str, bs.FitResult]:
    out: dict[str, bs.FitResult] = {}
    res = bs.fit(runs, seed=seed, **fit_kwargs)
    out["calibrated"] = out["sigmoid"] = res
    for fam in ("power", "exponential"):
        out[fam] = fit_family(
            runs, fam, seed=seed, **{k: v for k, v in fit_kwargs.items() if k != "progress"}
        )
    return out


def _draws(fits: Mapping[str, bs.FitResult], names: Sequence[str], grid: np.ndarray, seed: int):
    """Observation draws of every component at ``grid`` for runs ``names`` (run, sample, q)."""
    out = {}
    for comp in COMPONENTS:
        res = fits[comp]
        out[comp] = res.predict_draws(
            grid, kind="observation", seed=seed, runs=list(names), discrepancy=comp == "calibrated"
        )
    n = min(d.shape[1] for d in out.values())
    return {k: v[:, :n] for k, v in out.items()}


def _mixture(draws: Mapping[str, np.ndarray], comps: Sequence[str], w: np.ndarray, rng) -> np.ndarray:
    stackd = np.stack([draws[c] for c in comps])  # comp, run, sample, q
    _, n_runs, n_s, _ = stackd.shape
    pick = rng.choice(len(comps), size=(n_runs, n_s), p=w)
    return np.take_along_axis(stackd, pick[None, :, :, None], axis=0)[0]


def _scores(draws: np.ndarray, y: np.ndarray, valid: np.ndarray) -> dict[str, float]:
    q = np.quantile(draws, [0.05, 0.25, 0.75, 0.95], axis=1)  # 4, run, q
    in90 = (y >= q[0]) & (y <= q[3])
    in50 = (y >= q[1]) & (y <= q[2])
    crps = crps_from_draws(draws, y, axis=1)
    v = valid
    return {
        "coverage50": float(in50[v].mean()),
        "coverage90": float(in90[v].mean()),
        "width90": float((q[3] - q[0])[v].mean()),
        "crps": float(crps[v].mean()),
    }


def stack_batch(runs: bs.Runs, fraction: float, *, seed: int, fit_kwargs: dict, ratio: float = 2.0):
    """Scores of every component and stack on one batch at one fraction.

    Returns ``(scores, weights)``: a DataFrame with one row per method (``n_runs,
    n_points, coverage50, coverage90, width90, crps``) and a dict stack -> weights.
    """
    t = runs.table
    c_max = t.groupby("run", sort=False)["compute"].max()
    main_t = t[t["compute"] <= t["run"].map(c_max * fraction)]
    counts = main_t.groupby("run", sort=False).size()
    ok_main = counts.index[counts > MIN_POINTS]
    main_t = main_t[main_t["run"].isin(ok_main)]
    c_last = main_t.groupby("run", sort=False)["compute"].max()
    inner_t = main_t[main_t["compute"] <= main_t["run"].map(c_last / ratio)]
    counts = inner_t.groupby("run", sort=False).size()
    ok_inner = counts.index[counts > MIN_POINTS]
    inner_t = inner_t[inner_t["run"].isin(ok_inner)]
    main_runs = bs.Runs.from_frame(main_t.reset_index(drop=True))
    inner_runs = bs.Runs.from_frame(inner_t.reset_index(drop=True))
    fits = _fit_components(main_runs, seed, fit_kwargs)
    refits = _fit_components(inner_runs, seed + 1, fit_kwargs)
    rng = np.random.default_rng(seed)
    # weights from the refits' forecasts at the main window's later points
    names_in = list(refits["sigmoid"].run_names)
    c_in = inner_t.groupby("run", sort=False)["compute"].max()
    grid, y, valid = _grid(main_t, names_in, c_in, None)
    keep_runs = valid.any(axis=1)
    d = _draws(refits, names_in, grid, seed + 2)
    logp = {}
    for comp, dr in d.items():
        m, s2 = dr.mean(axis=1), dr.var(axis=1) + 1e-10
        logp[comp] = (-0.5 * (np.log(2 * np.pi * s2) + (y - m) ** 2 / s2))[valid]
    run_idx = np.broadcast_to(np.arange(len(names_in))[:, None], valid.shape)[valid]
    weights = {}
    for name, comps in STACKS.items():
        lp = np.stack([logp[c] for c in comps], axis=1)
        weights[name] = stack_weights(lp, run_idx)
    # scores of the main fits beyond the main window
    names = list(fits["sigmoid"].run_names)
    grid, y, valid = _grid(t, names, c_last, None)
    d = _draws(fits, names, grid, seed + 3)
    rows = []
    for comp in COMPONENTS:
        rows.append({"method": comp} | _scores(d[comp], y, valid))
    for name, comps in STACKS.items():
        rows.append({"method": name} | _scores(_mixture(d, comps, weights[name], rng), y, valid))
    out = pd.DataFrame(rows)
    out.insert(1, "n_runs", int(valid.any(axis=1).sum()))
    out.insert(2, "n_points", int(valid.sum()))
    out.attrs["refit_runs"] = int(keep_runs.sum())
    return out, weights


def _table(df: pd.DataFrame) -> list[str]:
    cols = list(df.columns)
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for _, r in df.iterrows():
        cells = [f"{v:.3f}" if isinstance(v, float) else str(v) for v in r]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def main(argv: Sequence[str] | None = None) -> pd.DataFrame:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sim", action="store_true", help="The misspecification simulator's scenarios.")
    ap.add_argument("--data", type=Path, help="A folder of verl logs (a real set).")
    ap.add_argument("--metric", action="append", help=f"Metric pattern(s) of a real set (default {_METRIC}).")
    ap.add_argument("--gpus", type=float, default=4.0)
    ap.add_argument("--families", default=",".join(FAMILIES))
    ap.add_argument("--noises", default=",".join(NOISES))
    ap.add_argument("--horizons", default="2,4", help="Simulator: extrapolation factors.")
    ap.add_argument("--fractions", default="0.25,0.5", help="Real set: fractions of each run's compute.")
    ap.add_argument("--runs-per-scenario", type=int, default=16)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--warmup", type=int, default=500)
    ap.add_argument("--samples", type=int, default=500)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    if args.sim == (args.data is not None):
        ap.error("give exactly one of --sim and --data")
    fit_kwargs = {"warmup": args.warmup, "samples": args.samples, "progress": False}
    t0 = time.perf_counter()
    rows, wrows = [], []
    if args.sim:
        horizons = [float(x) for x in args.horizons.split(",")]
        for fam in args.families.split(","):
            for noise in args.noises.split(","):
                data = simulate_benchmark(
                    args.seed,
                    families=[fam],
                    noises=[noise],
                    runs_per_scenario=args.runs_per_scenario,
                    pairs_per_scenario=0,
                )
                cols = ["run", "compute", "reward"] + (["n_eval"] if data["n_eval"].notna().all() else [])
                runs = bs.Runs.from_frame(data[cols], source="<family stacking>")
                for h in horizons:
                    s, w = stack_batch(runs, 1.0 / h, seed=args.seed, fit_kwargs=fit_kwargs)
                    rows.append(s.assign(batch=f"{fam}/{noise}", horizon=f"{h:g}x"))
                    for name, ws in w.items():
                        wrows.append(
                            {"batch": f"{fam}/{noise}", "horizon": f"{h:g}x", "stack": name}
                            | dict(zip(STACKS[name], np.round(ws, 3), strict=True))
                        )
                    print(rows[-1].to_string(), flush=True)
    else:
        metric = args.metric or [_METRIC]
        runs = bs.read_any(args.data, format="verl", metric=list(metric), gpus=args.gpus)
        for f in [float(x) for x in args.fractions.split(",")]:
            s, w = stack_batch(runs, f, seed=args.seed, fit_kwargs=fit_kwargs)
            rows.append(s.assign(batch=",".join(metric), horizon=f"1/{1 / f:g}"))
            for name, ws in w.items():
                wrows.append(
                    {"batch": "real", "horizon": f"1/{1 / f:g}", "stack": name}
                    | dict(zip(STACKS[name], np.round(ws, 3), strict=True))
                )
            print(rows[-1].to_string(), flush=True)
    took = time.perf_counter() - t0
    cmd = sys.argv[1:] if argv is None else list(argv)
    out = pd.concat(rows, ignore_index=True)
    cols = ["batch", "horizon", "method", "n_runs", "n_points", "coverage50", "coverage90", "width90", "crps"]
    out = out[cols]
    wdf = pd.DataFrame(wrows)
    lines = [
        "# Stacking curve families by leave-future-out scores",
        "",
        f"Command: `python benchmarks/family_stacking.py {shlex.join(cmd)}`",
        "",
        machine_line(),
        versions_line(),
        f"Wall time: {took:.0f} s.",
        "",
        *_table(out),
        "",
        "Stacking weights:",
        "",
        *_table(wdf),
        "",
    ]
    text = "\n".join(lines)
    write_results(text, args.out)
    return out


if __name__ == "__main__":
    main()
