"""Where the low median at 4x comes from: bias by how far along its rise a run is fitted.

On the misspecification benchmark the predictive median at 4x sits about 0.05 below the
truth, on exact sigmoids too (``benchmarks/results/misspecification.md``, column ``bias``).
This script fits simulated runs of one family on the first ``1/h`` of their compute
(``bs.backtest``, the default fit) and groups the runs by ``f_cut``, the share of the
sigmoid's rise ``(R - R0) / (A - R0)`` the truth has reached at the cutoff. Per group:
runs, the median's mean error against the true mean curve (not the noisy evaluation),
the 90% coverage of the held-out evaluations, and the posterior median of ``A`` beside the
sigmoid's true ``A`` (for ``creep`` the true ``A`` is the sigmoid part's, below the
ceiling).

    python benchmarks/bias_by_progress.py --families sigmoid,creep,wiggle --runs 48 --horizon 4 \\
        --out benchmarks/results/bias-by-progress.md
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

import bayes_scalerl as bs
from bayes_scalerl.analyses import misspec

sys.path.insert(0, str(Path(__file__).resolve().parent))
from environment import machine_line, versions_line, write_results  # noqa: E402

#: Families whose truth has a sigmoid rise with ``B`` and ``C_mid``.
FAMILIES = ("sigmoid", "creep", "wiggle", "drift")
#: Edges of the groups of ``f_cut``.
EDGES = (0.0, 0.1, 0.25, 0.5, 1.0)


def per_run(family: str, noise: str, n_runs: int, horizon: float, seed: int) -> pd.DataFrame:
    """One row per run: ``f_cut``, ``bias`` (median - true mean), ``coverage90``, ``A``, ``A_median``.

    Also ``converged`` (1 or 0: the package's R-hat/ESS/divergence check), since a low
    median could come from unconverged chains.
    """
    rng = np.random.default_rng(seed)
    params = misspec.draw_params(rng, family, n_runs, prefix=f"{family}/{noise}")
    df = misspec.simulate(params, noise, rng)
    cols = ["run", "compute", "reward"] + (["n_eval"] if "n_eval" in df.columns else [])
    bt = bs.backtest(
        bs.Runs.from_frame(df[cols]), fraction=1.0 / horizon, seed=seed, bootstrap=0, baseline=False
    )
    pts = bt.points[bt.points["method"] == "bayes"].merge(df[["run", "compute", "mu"]], on=["run", "compute"])
    pts = pts.assign(err=pts["median"] - pts["mu"])
    out = pts.groupby("run").agg(
        bias=("err", "mean"), coverage90=("covered90", "mean"), cutoff=("cutoff", "first")
    )
    p = params.set_index("run").loc[out.index]
    # the rise's share reached: the sigmoid from R0 = 0 to A = 1
    out["f_cut"] = np.asarray(
        bs.scalerl_curve(out["cutoff"].to_numpy(), 1.0, p["B"].to_numpy(), p["C_mid"].to_numpy(), 0.0)
    )
    out["A"] = p["A"]
    post = bt.fit.dt["posterior"]["A"].median(dim=("chain", "draw")).to_series()
    out["A_median"] = post.reindex(out.index).to_numpy()
    # B and C_mid (log of C_mid over the cutoff) beside their posterior medians: which one moves
    pb = bt.fit.dt["posterior"]
    out["B"] = p["B"].to_numpy()
    out["B_median"] = pb["B"].median(dim=("chain", "draw")).to_series().reindex(out.index).to_numpy()
    cut = out["cutoff"].to_numpy()
    out["lc"] = np.log(p["C_mid"].to_numpy() / cut)
    c_med = pb["C_mid"].median(dim=("chain", "draw")).to_series().reindex(out.index).to_numpy()
    out["lc_median"] = np.log(c_med / cut)
    diag = bt.fit.diagnostics().set_index("run")
    out["converged"] = diag["converged"].reindex(out.index).astype(float).to_numpy()
    return out


def table(runs: pd.DataFrame) -> pd.DataFrame:
    """Groups of ``f_cut``, then all runs: ``runs, bias, coverage90, A, A_median, converged``,
    and ``bias_converged`` / ``bias_unconverged`` (the bias over each kind of run)."""
    groups = pd.cut(runs["f_cut"], list(EDGES))
    runs = runs.assign(
        bias_converged=runs["bias"].where(runs["converged"] == 1.0),
        bias_unconverged=runs["bias"].where(runs["converged"] == 0.0),
    )
    cols = ["bias", "coverage90", "A", "A_median", "B", "B_median", "lc", "lc_median"]
    cols += ["converged", "bias_converged", "bias_unconverged"]
    t = runs.groupby(groups, observed=False)[cols].mean()
    t.insert(0, "runs", runs.groupby(groups, observed=False).size())
    t.index = [f"{iv.left:g}-{iv.right:g}" for iv in t.index]
    t = t.astype(float)
    t.loc["all"] = [len(runs), *runs[cols].mean()]
    return t[t["runs"] > 0]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--families", default="sigmoid", help=f"comma-separated, of {FAMILIES}")
    ap.add_argument("--noise", default="iid", choices=misspec.NOISES)
    ap.add_argument("--runs", type=int, default=48)
    ap.add_argument("--horizon", type=float, default=4.0)
    ap.add_argument("--seed", type=int, default=5)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    bs.use_all_cpu_cores()
    families = args.families.split(",")
    for f in families:
        if f not in FAMILIES:
            ap.error(f"unknown family {f!r}; choose from {FAMILIES}")
    t0 = time.perf_counter()
    tables = {f: table(per_run(f, args.noise, args.runs, args.horizon, args.seed)) for f in families}
    wall = time.perf_counter() - t0
    lines = [
        f"# Bias of the predictive median by the share of the rise fitted ({args.horizon:g}x)",
        "",
        f"Command: `python benchmarks/bias_by_progress.py --families {args.families} --noise {args.noise} "
        f"--runs {args.runs} --horizon {args.horizon:g} --seed {args.seed}`",
        "",
        machine_line(),
        versions_line(),
        f"Wall time {wall:.0f} s.",
        "",
        "`f_cut`: share of the sigmoid's rise reached at the cutoff (largest compute / horizon). `bias`: "
        "mean over a run's held-out points of the predictive median minus the true mean curve, averaged "
        "over runs. `coverage90`: share of a run's held-out evaluations inside the 90% band, averaged over "
        "runs. `A`, `A_median`: mean over runs of the true sigmoid `A` and of its posterior median; "
        "`B`, `B_median` likewise; `lc`, `lc_median`: of `log(C_mid / cutoff)`. "
        "`converged`: share of runs passing the package's convergence check; `bias, converged` and "
        "`bias, not`: the bias over those runs and over the others (a sampling artefact would show as "
        "a gap between them).",
    ]
    for f, t in tables.items():
        head = (
            "| f_cut | runs | bias | coverage90 | A | A_median | B | B_median | lc | lc_median | converged "
            "| bias, converged | bias, not |"
        )
        lines += ["", f"## {f} / {args.noise}", "", head, "|" + "---|" * 13]
        shown = ("bias", "coverage90", "A", "A_median", "B", "B_median", "lc", "lc_median", "converged")
        for name, r in t.iterrows():
            cells = [f"{r[c]:.3f}" for c in shown]
            split = ("bias_converged", "bias_unconverged")
            cells += [f"{r[c]:.3f}" if pd.notna(r[c]) else "-" for c in split]
            lines.append(f"| {name} | {int(r['runs'])} | " + " | ".join(cells) + " |")
    text = "\n".join(lines) + "\n"
    write_results(text, args.out)


if __name__ == "__main__":
    main()
