"""Seed pairs: does ``bs.compare`` call one of two seeds of the same truth "higher"?

Each pair shares its truth curve (a family of :mod:`bayes_scalerl.analyses.misspec`) and
evaluation schedule; each seed has its own smooth discrepancy and evaluation noise
(:func:`~bayes_scalerl.analyses.misspec.simulate_seed_pairs`). The pairs of one scenario
(family x noise) are fitted together on the first ``1 / h`` of their compute
(``bs.backtest``), and every pair is compared on ``A`` twice from the same fit: with the
default seed term of ``bs.compare`` and with ``seed_sd=0`` (these seeds only). Per family it
prints:

- ``z_rms``: root mean square of ``mean(A_0 - A_1) / sd(A_0 - A_1)`` over pairs. With
  both seeds' ``A`` posteriors calibrated and the truths equal, ``z`` is standard normal
  (``z_rms`` 1); above 1 the posteriors are too narrow for the seed-to-seed scatter of
  their centres, below 1 too wide;
- ``higher`` and ``higher_seed_sd0``: share of pairs called "higher" either way
  (``P > 0.9``). A calibrated posterior whose margin test cannot decide calls about 0.20
  of such pairs (``P(a > b)`` is then uniform), so the share is read beside ``z_rms``;
- ``ceiling_in_90``: share of seeds whose 90% interval of ``A`` holds the true ceiling;
- ``sd_A``: mean posterior sd of ``A``.

Usage::

    python benchmarks/seed_pairs.py --pairs 6 --n-evals 200 --horizon 2 --seed 5
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

import bayes_scalerl as bs
from bayes_scalerl.analyses.misspec import FAMILIES, NOISES, simulate_seed_pairs

sys.path.insert(0, str(Path(__file__).resolve().parent))
from environment import machine_line, versions_line, write_results  # noqa: E402


def one_scenario(rng, family: str, noise: str, pairs: int, n_evals: int, horizon: float, seed: int):
    """Fit one scenario's pairs together; one row per pair."""
    data = simulate_seed_pairs(rng, family, noise, pairs, n_evals=n_evals)
    has_n = "n_eval" in data.columns and data["n_eval"].notna().all()
    cols = ["run", "compute", "reward"] + (["n_eval"] if has_n else [])
    runs = bs.Runs.from_frame(data[cols], source=f"{family}/{noise} pairs")
    bt = bs.backtest(
        runs,
        fraction=1.0 / horizon,
        fit_kwargs={"chains": 4, "warmup": 500, "samples": 500, "progress": False},
        seed=seed,
        baseline=False,
    )
    res = bt.fit
    A = res.draws("A")
    index = {n: i for i, n in enumerate(res.run_names)}
    info = data.groupby("run", sort=False).agg(pair=("pair", "first"), seed=("pair_seed", "first"))
    ceiling = data.groupby("run", sort=False)["true_ceiling"].first()
    rows = []
    for pair, g in info.groupby("pair", sort=False):
        s = g.sort_values("seed").index.tolist()
        if len(s) != 2 or not all(x in index for x in s):
            continue
        a0, a1 = A[index[s[0]]], A[index[s[1]]]
        diff = a0 - a1
        with_term = bs.compare(res, s[0], s[1]).iloc[0]
        plain = bs.compare(res, s[0], s[1], seed_sd=0.0).iloc[0]
        inside = [
            np.quantile(a, 0.05) <= ceiling[x] <= np.quantile(a, 0.95) for a, x in ((a0, s[0]), (a1, s[1]))
        ]
        rows.append(
            {
                "family": family,
                "noise": noise,
                "pair": pair,
                "z": diff.mean() / diff.std(),
                "higher": str(with_term["verdict"]).endswith(" higher"),
                "higher_seed_sd0": str(plain["verdict"]).endswith(" higher"),
                "seed_sd": float(with_term["seed_sd"]),
                "ceiling_in_90": float(np.mean(inside)),
                "sd_A": 0.5 * (a0.std() + a1.std()),
            }
        )
    return rows


def summary(df: pd.DataFrame) -> pd.DataFrame:
    """Per family and over all: the columns of the module docstring."""

    def share(flag: pd.Series) -> str:
        return f"{flag.mean():.2f} ({int(flag.sum())}/{len(flag)})"

    def agg(g: pd.DataFrame) -> pd.Series:
        return pd.Series(
            {
                "pairs": len(g),
                "z_rms": float(np.sqrt(np.mean(g["z"] ** 2))),
                "higher": share(g["higher"]),
                "higher_seed_sd0": share(g["higher_seed_sd0"]),
                "ceiling_in_90": float(g["ceiling_in_90"].mean()),
                "sd_A": float(g["sd_A"].mean()),
            }
        )

    parts = [agg(g).rename(f) for f, g in df.groupby("family", sort=False)]
    parts.append(agg(df).rename("all"))
    return pd.DataFrame(parts)


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--pairs", type=int, default=6, help="pairs per scenario (default 6)")
    ap.add_argument("--n-evals", type=int, default=200, help="evaluations per run (default 200)")
    ap.add_argument("--horizon", type=float, default=2.0, help="fit on compute <= max / horizon (default 2)")
    ap.add_argument("--seed", type=int, default=5)
    ap.add_argument("--families", default=",".join(FAMILIES))
    ap.add_argument("--noises", default=",".join(NOISES))
    ap.add_argument("--out", default=None, help="write the Markdown here too")
    a = ap.parse_args()
    bs.use_all_cpu_cores()
    rng = np.random.default_rng(a.seed)
    t0 = time.perf_counter()
    rows = []
    for family in a.families.split(","):
        for noise in a.noises.split(","):
            rows += one_scenario(rng, family, noise, a.pairs, a.n_evals, a.horizon, a.seed)
            print(f"{family}/{noise}: {time.perf_counter() - t0:.0f} s", flush=True)
    table = summary(pd.DataFrame(rows))
    lines = [
        "# Seed pairs: verdicts on two seeds of one truth",
        "",
        f"Command: `python benchmarks/seed_pairs.py --pairs {a.pairs} --n-evals {a.n_evals} "
        f"--horizon {a.horizon:g} --seed {a.seed}`",
        machine_line(),
        versions_line(),
        f"Wall time {time.perf_counter() - t0:.0f} s.",
        "",
        "| family | " + " | ".join(table.columns) + " |",
        "|---" * (len(table.columns) + 1) + "|",
    ]
    for name, r in table.iterrows():
        cells = [f"{v:.3f}" if isinstance(v, float) else str(v) for v in r]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    text = "\n".join(lines) + "\n"
    write_results(text, a.out)


if __name__ == "__main__":
    main()
