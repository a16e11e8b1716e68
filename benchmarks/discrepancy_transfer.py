"""Does the leave-future-out refit's error transfer to the main fit's extrapolation?

The calibrated discrepancy (:mod:`bayes_scalerl.models.discrepancy`) learns its scales from a
refit of every run on its points up to ``c_last / 2``, scored on the run's later fitted points,
and adds them to the main fit's band beyond ``c_last``. That is right only if the refit's errors,
measured against the refit's own predictive variance, say how far the main fit's errors exceed
*its* predictive variance. This benchmark measures that, scenario by scenario, on the
misspecification benchmark's curves (:mod:`bayes_scalerl.analyses.misspec`), and scores
alternative ways of turning the refit's errors into a band, without a fit for each:

For each scenario (family x noise) and horizon ``h``, the runs are fitted on the first ``1 / h``
of their compute *without* the discrepancy (the exact sigmoid with the default noise model, the
batch's AR(1) ``rho`` estimated as the default does), and refitted on their points up to half
of that (``--ratio``: up to ``1 / ratio`` of it), as
:func:`bayes_scalerl.posterior.calibration.calibrate` does. Both fits' predictive
means and variances (curve variance over the draws plus the mean noise variance) give
standardised errors ``z``: the refit's at its held-out fitted points, the main fit's at every
held-out evaluation. Then, with the main fit's predictive approximated as normal given the
scales:

- ``none``: no discrepancy (version 0.1's band with the default noise model);
- ``current``: the package's rule (:func:`~bayes_scalerl.models.discrepancy.scale_posteriors`,
  the batch's mixing distribution of ``(omega, tau)`` by maximum likelihood, each run's
  scales from its own errors under it);
- ``prior10``: the same with 10 pseudo-runs of the prior (``Discrepancy(prior_weight=10)``);
- ``crps``: one ``(omega, tau)`` for the batch, the grid point with the least mean CRPS on the
  refit's errors;
- ``coverage``: one ``(omega, tau)`` for the batch, the grid point whose 50% and 90% coverage
  of the refit's errors is nearest to nominal;
- ``hindsight``: not a rule but a reference: the batch's mixing distribution fitted by the
  package's maximum likelihood to the *main* fit's own errors at the held-out evaluations
  (every run given that distribution). Where even this is out of range, no scale learnt by
  likelihood would be in range, whatever the refit: the errors' shape (a bias, a few large
  misses) is what the scale mixture of normals cannot hold.

Columns: ``refit_z2`` and ``main_z2``, the mean squared standardised error of the refit (over
its held-out points, runs weighted equally) and of the main fit without discrepancy (1 when the
predictive variance is right); ``corr``, the correlation over runs of the two fits' log mean
``z^2`` (does a run's own refit say anything about its main fit's error?); then each rule's 90%
coverage of the main fit's held-out evaluations. The normal approximation is checked by the
``none`` column against the fit's own predictive draws (``none_draws``, AR(1) forecast
included).

Usage::

    python benchmarks/discrepancy_transfer.py --families sigmoid,creep --noises iid,binomial \\
        --horizons 2,4 --runs-per-scenario 48 --out benchmarks/results/discrepancy-transfer.md
"""

from __future__ import annotations

import argparse
import math
import shlex
import sys
import time
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.special import ndtr
from scipy.stats import norm

import bayes_scalerl as bs
from bayes_scalerl.analyses.misspec import FAMILIES, NOISES, simulate_benchmark
from bayes_scalerl.models.discrepancy import SCALE_GRID, Discrepancy, discrepancy_shape, scale_posteriors

sys.path.insert(0, str(Path(__file__).resolve().parent))
from environment import machine_line, versions_line, write_results  # noqa: E402

__all__ = ["RULES", "moments", "error_scales", "transfer_scenario", "main"]

#: The rules scored, in table order.
RULES = ("none", "current", "prior10", "crps", "coverage", "hindsight")
_LAM = math.log(10.0)


def moments(res: bs.FitResult, runs: bs.Runs, after: pd.Series, until: pd.Series | None = None):
    """Predictive mean and variance of each run's evaluations beyond ``after[run]``.

    Returns a DataFrame ``run, i, compute, reward, h, mean, var, var_curve``: ``h`` the log
    of compute over ``after[run]``, ``var`` the curve's variance over the draws plus the mean
    noise variance. Only evaluations up to ``until[run]`` when given.
    """
    t = runs.table
    keep = t["compute"] > t["run"].map(after)
    if until is not None:
        keep &= t["compute"] <= t["run"].map(until)
    held = t[keep]
    names = list(res.run_names)
    held = held[held["run"].isin(names)]
    sizes = held.groupby("run", sort=False).size().reindex(names).fillna(0).astype(int).to_numpy()
    width = max(int(sizes.max()), 1)
    grid = np.ones((len(names), width))
    valid = np.arange(width)[None, :] < sizes[:, None]
    held = held.set_index("run").loc[[n for n, s in zip(names, sizes, strict=True) if s]].reset_index()
    grid[valid] = held["compute"].to_numpy(float)
    grid = np.where(valid, grid, grid[:, :1])
    curve = res.predict_draws(grid, kind="curve", discrepancy=False)  # run, sample, q
    sigma2 = np.mean(res.dt["posterior"]["sigma"].values ** 2, axis=(0, 1))
    out = held[["run", "compute", "reward"]].copy()
    out["i"] = np.repeat(np.arange(len(names)), sizes)
    out["h"] = np.log(out["compute"].to_numpy() / out["run"].map(after).to_numpy(float))
    out["mean"] = curve.mean(axis=1)[valid]
    out["var_curve"] = curve.var(axis=1)[valid]
    out["var"] = out["var_curve"] + np.repeat(sigma2, sizes)
    obs = res.predict_draws(grid, kind="observation", seed=1)
    y = np.zeros_like(grid)
    y[valid] = out["reward"].to_numpy()
    out["pit_draws"] = np.mean(obs <= y[:, None, :], axis=1)[valid]
    return out


def error_scales(errors: pd.DataFrame, pos: Mapping[str, int], settings: Discrepancy) -> np.ndarray:
    """Posterior weights of every run on the scale grid from errors of :func:`moments`.

    ``pos`` maps each run's name to its index (runs without errors get the batch's
    distribution). Returns an array of shape (run, grid, grid).
    """
    e = (errors["reward"] - errors["mean"]).to_numpy()
    s2 = (_LAM * discrepancy_shape(errors["h"].to_numpy(), _LAM)) ** 2
    run_of = errors["run"].map(pos).to_numpy()
    return scale_posteriors(e, errors["var"].to_numpy(), s2, run_of, len(pos), settings)[0]


def _crps(e: np.ndarray, sd: np.ndarray) -> np.ndarray:
    z = e / sd
    return sd * (z * (2.0 * ndtr(z) - 1.0) + 2.0 * norm.pdf(z) - 1.0 / math.sqrt(math.pi))


def _single_scale(ref: pd.DataFrame, how: str) -> tuple[float, float]:
    """One ``(omega, tau)`` for the batch from the refit's errors (runs weighted equally)."""
    g2 = SCALE_GRID**2
    w = 1.0 / ref.groupby("run")["run"].transform("size").to_numpy()
    w = w / w.sum()
    e = (ref["reward"] - ref["mean"]).to_numpy()
    s2 = (_LAM * discrepancy_shape(ref["h"].to_numpy(), _LAM)) ** 2
    sd = np.sqrt(
        ref["var"].to_numpy()[:, None, None] + g2[None, :, None] + s2[:, None, None] * g2[None, None, :]
    )
    if how == "crps":
        loss = np.tensordot(w, _crps(e[:, None, None], sd), axes=1)
    else:
        a = np.abs(e)[:, None, None] / sd
        c90 = np.tensordot(w, a < 1.6449, axes=1)
        c50 = np.tensordot(w, a < 0.6745, axes=1)
        loss = (c90 - 0.9) ** 2 + (c50 - 0.5) ** 2 + 1e-9 * (SCALE_GRID[:, None] + SCALE_GRID[None, :])
    i, j = np.unravel_index(np.argmin(loss), loss.shape)
    return float(SCALE_GRID[i]), float(SCALE_GRID[j])


def _coverage(main: pd.DataFrame, post: np.ndarray) -> float:
    """90% coverage of the main fit's held-out evaluations under each run's scale posterior."""
    g2 = SCALE_GRID**2
    e = (main["reward"] - main["mean"]).to_numpy()
    s2 = (_LAM * discrepancy_shape(main["h"].to_numpy(), _LAM)) ** 2
    total = main["var"].to_numpy()[:, None, None] + g2[None, :, None] + s2[:, None, None] * g2[None, None, :]
    pit = np.sum(post[main["i"].to_numpy()] * ndtr(e[:, None, None] / np.sqrt(total)), axis=(1, 2))
    return float(np.mean((pit > 0.05) & (pit < 0.95)))


def transfer_scenario(
    data: pd.DataFrame,
    h: float,
    *,
    seed: int,
    fit_kwargs: dict,
    ratio: float = 2.0,
    r0_fitted: bool = False,
    rho_method: str = "auto",
) -> dict:
    """The row of one scenario and horizon (see the module docstring).

    ``rho_method``: the batch's AR(1) correlation by ``"auto"`` (the default's variogram) or
    ``"reml"`` (:func:`bayes_scalerl.noise_correlation`'s ``method``).
    ``r0_fitted``: both fits with ``Priors(R0_fitted=True)`` (``R0`` a parameter, the first
    evaluation in the likelihood) instead of the default (``R0`` fixed at the first evaluation).
    """
    cols = ["run", "compute", "reward"] + (["n_eval"] if data["n_eval"].notna().all() else [])
    runs = bs.Runs.from_frame(data[cols], source="<discrepancy transfer>")
    t = runs.table
    c_max = t.groupby("run")["compute"].max()
    cut = c_max / h
    main_runs = bs.Runs.from_frame(t[t["compute"] <= t["run"].map(cut)])
    rho = bs.noise_correlation(main_runs, method=rho_method)
    priors = bs.Priors(rho=rho, R0_fitted=r0_fitted)
    fit_main = bs.fit(main_runs, priors=priors, discrepancy=False, seed=seed, **fit_kwargs)
    c_last = main_runs.table.groupby("run")["compute"].max()
    main = moments(fit_main, runs, c_last)
    mt = main_runs.table
    inner = bs.Runs.from_frame(mt[mt["compute"] <= mt["run"].map(c_last / ratio)])
    fit_ref = bs.fit(inner, priors=priors, discrepancy=False, seed=seed + 1, **fit_kwargs)
    ref = moments(fit_ref, main_runs, inner.table.groupby("run")["compute"].max(), c_last)
    # the runs indexed as the main fit's (error_scales maps the refit's errors with it)
    pos = {n: i for i, n in enumerate(fit_main.run_names)}
    n_runs = len(pos)
    e_ref = (ref["reward"] - ref["mean"]).to_numpy()

    def rule(settings: Discrepancy) -> np.ndarray:
        return error_scales(ref, pos, settings)

    k = SCALE_GRID.size
    point = np.zeros((n_runs, k, k))
    point[:, 0, 0] = 1.0
    row = {"runs": n_runs, "rho": rho}
    z2_ref = (ref.assign(z2=e_ref**2 / ref["var"]).groupby("run")["z2"].mean()).reindex(list(pos))
    e_main = (main["reward"] - main["mean"]).to_numpy()
    z2_main = main.assign(z2=e_main**2 / main["var"]).groupby("run")["z2"].mean().reindex(list(pos))
    ok = z2_ref.notna() & (z2_ref > 0) & (z2_main > 0)
    row["refit_z2"] = float(z2_ref[ok].mean())
    row["main_z2"] = float(z2_main[ok].mean())
    row["corr"] = float(np.corrcoef(np.log(z2_ref[ok]), np.log(z2_main[ok]))[0, 1])
    pit = main["pit_draws"].to_numpy()
    row["none_draws"] = float(np.mean((pit > 0.05) & (pit < 0.95)))
    row["none"] = _coverage(main, point)
    row["current"] = _coverage(main, rule(Discrepancy()))
    row["prior10"] = _coverage(main, rule(Discrepancy(prior_weight=10.0)))
    row["hindsight"] = _coverage(main, error_scales(main, pos, Discrepancy(per_run=False)))
    for how in ("crps", "coverage"):
        om, ta = _single_scale(ref, how)
        one = np.zeros((n_runs, k, k))
        one[:, int(np.searchsorted(SCALE_GRID, om)), int(np.searchsorted(SCALE_GRID, ta))] = 1.0
        row[how] = _coverage(main, one)
        row[f"{how}_scales"] = f"{om:.4f}, {ta:.4f}"
    return row


def main(argv: list[str] | None = None) -> pd.DataFrame:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--families", default=",".join(FAMILIES))
    ap.add_argument("--noises", default=",".join(NOISES))
    ap.add_argument("--horizons", default="2,4")
    ap.add_argument("--runs-per-scenario", type=int, default=48)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument(
        "--ratio", type=float, default=2.0, help="The refit's window: c_last / ratio (default 2)."
    )
    ap.add_argument("--n-evals", type=int, default=48, help="Evaluations per run (default 48).")
    ap.add_argument(
        "--r0-fitted", action="store_true", help="Fit R0 (Priors(R0_fitted=True)) instead of fixing it."
    )
    ap.add_argument(
        "--rho",
        choices=("auto", "reml"),
        default="auto",
        help="The batch's AR(1) correlation: the variogram (auto, the default's) or reml.",
    )
    ap.add_argument("--warmup", type=int, default=500)
    ap.add_argument("--samples", type=int, default=500)
    ap.add_argument("--out", default=None, help="Markdown file to write the table to (atomically).")
    args = ap.parse_args(argv)
    fams, noises = args.families.split(","), args.noises.split(",")
    horizons = [float(x) for x in args.horizons.split(",")]
    fit_kwargs = {"warmup": args.warmup, "samples": args.samples, "progress": False}
    t0 = time.perf_counter()
    rows = []
    for fam in fams:
        for noise in noises:
            data = simulate_benchmark(
                args.seed,
                families=[fam],
                noises=[noise],
                runs_per_scenario=args.runs_per_scenario,
                pairs_per_scenario=0,
                n_evals=args.n_evals,
            )
            for h in horizons:
                row = transfer_scenario(
                    data,
                    h,
                    seed=args.seed,
                    fit_kwargs=fit_kwargs,
                    ratio=args.ratio,
                    r0_fitted=args.r0_fitted,
                    rho_method=args.rho,
                )
                rows.append({"scenario": f"{fam}/{noise}", "horizon": f"{h:g}x", **row})
                print(rows[-1], flush=True)
    table = pd.DataFrame(rows)
    wall = time.perf_counter() - t0
    cmd = "python benchmarks/discrepancy_transfer.py " + " ".join(
        shlex.quote(a) for a in (argv or sys.argv[1:])
    )

    def cell(v) -> str:
        return f"{v:.3f}" if isinstance(v, float) else str(v)

    lines = ["| " + " | ".join(table.columns) + " |", "|" + "---|" * len(table.columns)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in table.itertuples(index=False)]
    text = "\n".join(
        [
            "# Does the refit's error transfer to the main fit? (90% coverage by rule)",
            "",
            f"Command: `{cmd}`",
            "",
            machine_line(),
            versions_line(),
            f"Wall time: {wall:.0f} s.",
            "",
            "Columns: see the module docstring of `benchmarks/discrepancy_transfer.py`.",
            "",
            *lines,
            "",
        ]
    )
    write_results(text, args.out)
    return table


if __name__ == "__main__":
    main()
