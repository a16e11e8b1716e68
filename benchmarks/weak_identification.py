"""Convergence on weakly identified runs: C_mid often beyond the data.

The regime of the issue "Bands you can bet compute on": 500 simulated runs with ``C_mid``
log-uniform on 2k-20k GPU-hours, evaluations every 160 GPU-hours up to 8k, noise sd 0.006,
``R0`` 0.30-0.45, ``A`` 0.50-0.72, ``B`` 1.2-3.0. Reports, per sampler setting, the share of
runs with R-hat <= 1.01 (every variable), the share with a divergent transition and the
wall time of the whole ``fit`` (compilation excluded: a warm-up fit of the same runs with
another seed runs first, once per setting).

    python benchmarks/weak_identification.py --runs 500 --out benchmarks/results/weak-identification.md
"""

from __future__ import annotations

import argparse
import platform
import time

import numpy as np

import bayes_scalerl as bs


def simulate(n_runs: int, seed: int) -> bs.Runs:
    return bs.Runs.from_frame(simulate_frame(n_runs, seed))


def simulate_frame(n_runs: int, seed: int):
    """The regime's runs as a table (``run, compute, reward``)."""
    rng = np.random.default_rng(seed)
    truth = bs.random_truth(
        rng,
        n_runs,
        A=(0.50, 0.72),
        B=(1.2, 3.0),
        C_mid=(2_000.0, 20_000.0),
        R0=(0.30, 0.45),
        sigma=(0.006, 0.006),
    )
    compute = np.arange(0.0, 8_000.0 + 1e-9, 160.0)
    return bs.simulate_runs(truth, compute, rng)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=500)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--settings", nargs="+", default=["default", "default-no-retry"])
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    bs.use_all_cpu_cores()
    import jax

    settings = {
        "default": {},  # priors learnt from the batch from 2026-12-07; the fixed ones before
        "default-no-retry": {"retry": False},
        "fixed": {"priors": bs.Priors(from_batch=False)},  # the default until 2026-12-07
        # one second attempt, no third: the default until 2026-12-06 (the retry-real rows say
        # which setting each "default" row had)
        "default-one-retry": {"retry": bs.Retry(retries=1)},
        "default-two-retries": {"retry": bs.Retry(retries=2)},
        # the batch's AR(1) correlation by the restricted likelihood of least-squares residuals
        "reml": {"priors": bs.Priors(rho="reml")},
        # the default until 0.2: independent Gaussian noise, with the discrepancy
        "gaussian-default": {"priors": bs.Priors(likelihood="gaussian", R0_fitted=False, from_batch=False)},
        "gaussian-default-no-retry": {
            "priors": bs.Priors(likelihood="gaussian", R0_fitted=False, from_batch=False),
            "retry": False,
        },
        # version 0.1's model
        "gaussian-only": {
            "priors": bs.Priors(likelihood="gaussian", R0_fitted=False, from_batch=False),
            "discrepancy": False,
        },
        "gaussian-only-no-retry": {
            "priors": bs.Priors(likelihood="gaussian", R0_fitted=False, from_batch=False),
            "discrepancy": False,
            "retry": False,
        },
        # R0 a parameter, not the first evaluation
        "r0-fitted": {"priors": bs.Priors(R0_fitted=True)},
        "r0-fitted-no-retry": {"priors": bs.Priors(R0_fitted=True), "retry": False},
        # priors of B and C_mid learnt from the batch (each run's from the other runs)
        "batch": {"priors": bs.Priors(from_batch=True)},
        "ceiling": {"priors": bs.Priors(from_batch="ceiling")},  # and of A
        "ta095": {"target_accept": 0.95},
        "s1000": {"samples": 1000},
        "ta095-s1000": {"target_accept": 0.95, "samples": 1000},
        "ar1-auto": {"priors": bs.Priors(likelihood="ar1", rho="auto")},
        "ar1-auto-no-retry": {"priors": bs.Priors(likelihood="ar1", rho="auto"), "retry": False},
        "ar1-auto-ta09": {"priors": bs.Priors(likelihood="ar1", rho="auto"), "target_accept": 0.9},
        "ar1-auto-ta09-no-retry": {
            "priors": bs.Priors(likelihood="ar1", rho="auto"),
            "target_accept": 0.9,
            "retry": False,
        },
    }
    rows = []
    warmed: set = set()
    for seed in args.seeds:
        runs = simulate(args.runs, seed)
        for name in args.settings:
            kw = dict(settings[name], log_likelihood=False, progress=False)
            if (seed, name) not in warmed:
                # compile on the same bucketed shapes: a fit of the same runs with another seed,
                # so that the second attempt's programs are compiled too
                bs.fit(runs, seed=seed + 1000, **kw)
                warmed.update((s, name) for s in args.seeds)
            t0 = time.perf_counter()
            res = bs.fit(runs, seed=seed, **kw)
            wall = time.perf_counter() - t0
            d = res.diagnostics()
            rows.append(
                (
                    seed,
                    name,
                    wall,
                    float((d["r_hat_max"] <= 1.01).mean()),
                    float((d["divergences"] > 0).mean()),
                    float(d["converged"].mean()),
                    int(d["retried"].sum()),
                )
            )
            print(rows[-1], flush=True)
    head = (
        f"machine: {platform.processor() or platform.machine()}, {jax.device_count()} devices "
        f"({jax.devices()[0].platform}); jax {jax.__version__}; bayes_scalerl {bs.__version__}\n\n"
        "| seed | setting | wall s (fit, after compile) | R-hat <= 1.01 | any divergence | converged "
        "| runs sampled again |\n"
        "|---|---|---|---|---|---|---|\n"
    )
    body = "".join(
        f"| {s} | {n} | {w:.1f} | {r:.3f} | {dv:.3f} | {c:.3f} | {k} |\n" for s, n, w, r, dv, c, k in rows
    )
    print(head + body)
    if args.out:
        with open(args.out, "w") as f:
            f.write(
                f"`python benchmarks/weak_identification.py --runs {args.runs} --seeds "
                f"{' '.join(map(str, args.seeds))} --settings {' '.join(args.settings)}`\n\n" + head + body
            )


if __name__ == "__main__":
    main()
