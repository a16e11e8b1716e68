"""Benchmark: batched NUTS from 10 to 10,000 runs, beside a scipy ``curve_fit`` loop.

Usage::

    python benchmarks/bench_scale.py --sizes 10,100,1000,10000 --out benchmarks/results/scale-cpu.md
    python benchmarks/bench_scale.py --sizes 100,1000,10000 --out benchmarks/results/scale-gpu.md  # on a GPU

Each size: simulated curves (``bayes_scalerl.random_truth`` + ``simulate_runs``, 51
evaluations from 0 to 16k GPU-hours; points from 1.5k are fitted), 4 chains x 500
warm-up x 500 draws per run (``--warmup``/``--samples`` to change). For each size it
reports

- compile s: tracing + lowering + XLA compilation (or loading from the persistent
  compilation cache, "cache hits") of the programs the size needs, measured with
  ``jax.monitoring`` during a warm-up fit on other curves of the same bucketed shapes;
- wall s: the timed fit after that (it must not compile again), and s / run;
- peak RSS: the process's peak resident memory so far (``ru_maxrss``; sizes run in
  increasing order), peak host: the largest Python/NumPy allocation during the timed fit
  (``tracemalloc``), device peak: the accelerator's ``peak_bytes_in_use`` (GPU only);
- the share of runs with R-hat <= 1.01 and no divergent transition, and of runs the
  package calls converged (also bulk ESS >= 100);
- beside it, a scipy ``curve_fit`` loop over the same curves (point estimates only).

The table is written to ``--out`` after each size, so a long run keeps what it finished.
"""

from __future__ import annotations

import argparse
import collections
import os
import platform
import resource
import sys
import time
import tracemalloc
from pathlib import Path

import jax
import numpy as np

import bayes_scalerl as bs
from bayes_scalerl import engine
from bayes_scalerl.engine import driver, runtime

sys.path.insert(0, str(Path(__file__).parent))
from bench_core import _curve_fit_loop  # noqa: E402

_EVENTS: collections.Counter = collections.Counter()
_SECS: collections.Counter = collections.Counter()
_COMPILE_EVENTS = (
    "/jax/core/compile/jaxpr_trace_duration",
    "/jax/core/compile/jaxpr_to_mlir_module_duration",
    "/jax/core/compile/backend_compile_duration",
)


def _data(n: int, seed: int) -> bs.Runs:
    rng = np.random.default_rng(seed)
    truth = bs.random_truth(rng, n)
    grid = np.linspace(0.0, 16000.0, 51)
    return bs.Runs.from_frame(bs.simulate_runs(truth, grid, rng))


def _warm_sizes(n: int, chunk_size: int, group: int, n_devices: int) -> list[int]:
    """Smallest run counts whose fits compile every program a fit of ``n`` runs uses.

    A chunk of ``m`` runs runs the program of groups of ``min(group, 2**k)`` runs
    (``2**k >= m``) on up to ``n_devices`` devices (one executable per device), so a
    fit of ``min(m, group * n_devices)`` runs compiles the same ones.
    """
    sizes = [min(n, chunk_size, group * n_devices)]
    if n > chunk_size and n % chunk_size:
        sizes.append(min(n % chunk_size, group * n_devices))
    return sizes


def _peak_rss_mib() -> float:
    kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    return kib / 1024


def _device_peak_mib() -> str:
    dev = jax.local_devices()[0]
    if dev.platform == "cpu":
        return "-"
    stats = dev.memory_stats() or {}
    peak = stats.get("peak_bytes_in_use")
    return "-" if peak is None else f"{peak / 2**20:.0f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="10,100,1000,10000", help="comma-separated run counts")
    ap.add_argument("--chains", type=int, default=4)
    ap.add_argument("--warmup", type=int, default=500)
    ap.add_argument("--samples", type=int, default=500)
    ap.add_argument("--chunk-size", type=int, default=512)
    ap.add_argument("--group-size", type=int, default=None, help="default: 64 on a CPU, chunk size on a GPU")
    ap.add_argument("--executor", choices=("local", "ray"), default="local")
    ap.add_argument("--out", default=None, help="Markdown file for the table")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    n_cpu = bs.use_all_cpu_cores()
    jax.monitoring.register_event_listener(lambda name, **kw: _EVENTS.update([name]))
    jax.monitoring.register_event_duration_secs_listener(lambda name, d, **kw: _SECS.update({name: d}))
    dev = jax.devices()[0]
    group = args.group_size or driver._default_group_size(dev.platform, args.chunk_size)
    runtime.ensure_compilation_cache()  # what the first fit would switch on: the header reports it
    lines = [
        f"machine: {platform.node()} {platform.machine()}, {os.cpu_count()} CPU cores, "
        f"JAX devices: {len(jax.devices())} x {dev.platform} ({dev.device_kind}); CPU devices: {n_cpu}",
        f"versions: python {platform.python_version()}, jax {jax.__version__}, "
        f"numpyro {__import__('numpyro').__version__}, bayes_scalerl {bs.__version__}",
        f"NUTS: {args.chains} chains x {args.warmup} warm-up x {args.samples} draws per run; "
        f"chunk size {args.chunk_size}, group size {group}, executor {args.executor}; "
        f"compilation cache: {runtime.compilation_cache_dir()}",
        f"command: python benchmarks/bench_scale.py {' '.join(sys.argv[1:])}",
        "",
        "| runs | method | compile s | cache hits | wall s (after compile) | s / run | peak RSS MiB "
        "| peak host MiB (timed fit) | device peak MiB | R-hat <= 1.01, no div. | converged |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    print("\n".join(lines), flush=True)

    def write():
        if args.out:
            Path(args.out).parent.mkdir(parents=True, exist_ok=True)
            Path(args.out).write_text("\n".join(lines) + "\n")

    settings = dict(
        min_compute=1500,
        chains=args.chains,
        warmup=args.warmup,
        samples=args.samples,
        chunk_size=args.chunk_size,
        group_size=args.group_size,
        executor=args.executor,
        log_likelihood=False,
        progress=False,
        # the engine alone: the calibrated discrepancy's refit doubles the sampling (see bench_core)
        discrepancy=False,
    )
    for n in sizes:
        runs = _data(n, n)
        _EVENTS.clear()
        _SECS.clear()
        for k, m in enumerate(_warm_sizes(n, args.chunk_size, group, len(jax.devices()))):
            bs.fit(_data(m, 1_000_000 + 10 * n + k), seed=0, **settings)
        compile_s = sum(_SECS[e] for e in _COMPILE_EVENTS)
        hits = _EVENTS["/jax/compilation_cache/cache_hits"]
        traces = engine.trace_count()
        tracemalloc.start()
        t0 = time.perf_counter()
        res = bs.fit(runs, seed=1, **settings)
        wall = time.perf_counter() - t0
        _, host_peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        if args.executor == "local":
            assert engine.trace_count() == traces, "the timed fit compiled again"
        d = res.diagnostics()
        ok = ((d.r_hat_max <= 1.01) & (d.divergences == 0)).mean()
        row = (
            f"| {n} | batched NUTS | {compile_s:.1f} | {hits} | {wall:.1f} | {wall / n:.3f} | "
            f"{_peak_rss_mib():.0f} | {host_peak / 2**20:.0f} | {_device_peak_mib()} | {ok:.3f} | "
            f"{d.converged.mean():.3f} |"
        )
        del res, d
        cf = _curve_fit_loop(runs)
        dash = " - |"
        row2 = f"| {n} | scipy curve_fit loop (points only) | - | - | {cf:.2f} | {cf / n:.4f} |" + dash * 5
        print(row, row2, sep="\n", flush=True)
        lines += [row, row2]
        write()
    write()


if __name__ == "__main__":
    main()
