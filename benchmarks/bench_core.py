"""Benchmark: batched NUTS against a scipy ``curve_fit`` loop on simulated runs.

Usage::

    python benchmarks/bench_core.py [--runs 100 500] [--out benchmarks/results/core.md]

Each set: about 50 evaluations a run on a linear grid from 0 to 16k GPU-hours (the first
sets R0; points from 1.5k are fitted), true A in [0.45, 0.75], B in [1, 3], C_mid
log-uniform in [2k, 20k] (so many curves are seen only below C_mid), noise 0.01-0.02.
NUTS: 4 chains x 500 warm-up x 500 draws per run. The wall time is after compilation
(compile s: tracing, lowering and XLA compilation, or loading from the persistent
compilation cache, during a fit of one group of other runs per device, which compiles the program
on every device for the timed fit; the script checks that the timed fit does not trace
again).
"""

from __future__ import annotations

import argparse
import collections
import os
import platform
import time
import warnings
from pathlib import Path

import jax
import numpy as np
from scipy.optimize import curve_fit

import bayes_scalerl as bs
from bayes_scalerl import engine
from bayes_scalerl.engine import driver

_SECS: collections.Counter = collections.Counter()
_COMPILE_EVENTS = (
    "/jax/core/compile/jaxpr_trace_duration",
    "/jax/core/compile/jaxpr_to_mlir_module_duration",
    "/jax/core/compile/backend_compile_duration",
)


def _curve_fit_loop(runs: bs.Runs) -> float:
    w = runs.window(min_compute=1500)
    t0 = time.perf_counter()
    for i in range(w.reward.shape[0]):
        m = w.mask[i]
        c, y, r0 = w.compute[i][m], w.reward[i][m], w.R0[i]

        def f(cc, A, B, lc, r0=r0):
            return bs.scalerl_curve(cc, A, B, np.exp(lc), r0)

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                curve_fit(f, c, y, p0=[0.6, 1.5, np.log(8000)], bounds=([0, 0.01, 0], [1, 20, 20]))
            except RuntimeError:
                pass
    return time.perf_counter() - t0


def _data(n: int, seed: int) -> bs.Runs:
    rng = np.random.default_rng(seed)
    truth = bs.random_truth(rng, n)
    grid = np.linspace(0.0, 16000.0, 51)
    return bs.Runs.from_frame(bs.simulate_runs(truth, grid, rng))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, nargs="+", default=[100, 500])
    ap.add_argument("--warmup", type=int, default=500)
    ap.add_argument("--samples", type=int, default=500)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    bs.use_all_cpu_cores()
    jax.monitoring.register_event_duration_secs_listener(lambda name, d, **kw: _SECS.update({name: d}))
    dev = jax.devices()[0]
    lines = [
        f"machine: {platform.node()} {platform.machine()}, {os.cpu_count()} CPU cores, "
        f"JAX devices: {len(jax.devices())} x {dev.platform} ({dev.device_kind})",
        f"versions: python {platform.python_version()}, jax {jax.__version__}, "
        f"numpyro {__import__('numpyro').__version__}, bayes_scalerl {bs.__version__}",
        f"NUTS: 4 chains x {args.warmup} warm-up x {args.samples} draws per run",
        "",
        "| runs | method | compile s | wall s (after compile) | s / run | R-hat <= 1.01 "
        "| any divergence | converged |",
        "|---|---|---|---|---|---|---|---|",
    ]
    print("\n".join(lines), flush=True)
    for n in args.runs:
        # a fit of one group of other runs per device compiles the program (on every
        # device) that the timed fit uses
        group = driver._default_group_size(jax.devices()[0].platform, 512)
        warm = _data(min(n, group * len(jax.devices())), 1000 + n)
        runs = _data(n, n)
        base = dict(
            min_compute=1500, warmup=args.warmup, samples=args.samples, log_likelihood=False, progress=False
        )
        # the sampler alone (the exact sigmoid, discrepancy=False), then the default fit, whose
        # calibrated discrepancy adds one leave-future-out refit of every run (same program)
        methods = (("batched NUTS", {"discrepancy": False}), ("default fit (+ calibration refit)", {}))
        for label, extra in methods:
            settings = {**base, **extra}
            _SECS.clear()
            bs.fit(warm, seed=0, **settings)
            compile_s = sum(_SECS[e] for e in _COMPILE_EVENTS)
            traces = engine.trace_count()
            t0 = time.perf_counter()
            res = bs.fit(runs, seed=1, **settings)
            wall = time.perf_counter() - t0
            assert engine.trace_count() == traces, "the timed call recompiled"
            d = res.diagnostics()
            row = (
                f"| {n} | {label} | {compile_s:.1f} | {wall:.1f} | {wall / n:.3f} | "
                f"{(d.r_hat_max <= 1.01).mean():.3f} | {(d.divergences > 0).mean():.3f} | "
                f"{d.converged.mean():.3f} |"
            )
            print(row, flush=True)
            lines.append(row)
        cf = _curve_fit_loop(runs)
        row2 = f"| {n} | scipy curve_fit loop (points only) | - | {cf:.2f} | {cf / n:.4f} | - | - | - |"
        print(row2, flush=True)
        lines.append(row2)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
