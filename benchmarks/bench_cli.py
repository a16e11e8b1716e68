"""The whole ``bayes-scalerl fit`` command, phase by phase, with its peak memory.

Each row is one ``bayes-scalerl fit data.csv --out DIR --predict 32000`` process on
simulated runs of the weakly identified regime (``C_mid`` log-uniform on 2k-20k GPU-hours,
evaluations every 160 GPU-hours up to 8k, noise sd 0.006, ``R0`` 0.30-0.45, ``A``
0.50-0.72, ``B`` 1.2-3.0: about 50 evaluations a run). The phases are the ones the command
prints on its ``time (s):`` line (read the input; load programs: trace and compile, or load
from the persistent cache; sample: waiting on the devices; calibrate: the discrepancy's
bookkeeping around its refits; assemble: the DataTree; diagnostics and identifiability;
predictions; write: CSV and netCDF; plot). "after sampling" is everything after the
sampler's draws are in: assemble, calibrate, diagnostics, identifiability, predictions,
write and plot. Peak memory is the process's maximum resident set size (``wait4``).

Beside it, a loop of ``scipy.optimize.curve_fit`` (the paper's least-squares fit, one run
at a time, in this process) on the same runs.

With ``--warm`` (the default) each noise model first runs once untimed on the smallest size:
on a CPU every size then runs the same group program (64 runs a group, the same padded
point count), so each timed process finds it in the persistent compilation cache, as a
user's second command does.

    python benchmarks/bench_cli.py --runs 100 1000 10000 --out benchmarks/results/bench-cli.md
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import bayes_scalerl as bs

sys.path.insert(0, str(Path(__file__).resolve().parent))
from environment import write_results  # noqa: E402
from weak_identification import simulate_frame  # noqa: E402

PHASES = (
    "read",
    "load programs",
    "sample",
    "calibrate",
    "assemble",
    "diagnostics",
    "identifiability",
    "predictions",
    "write",
    "plot",
    "other",
)
AFTER_SAMPLING = ("calibrate", "assemble", "diagnostics", "identifiability", "predictions", "write", "plot")


def simulate(n_runs: int, seed: int = 0):
    """The runs of the issue's regime (the weak-identification benchmark's simulator)."""
    return simulate_frame(n_runs, seed)


def run_command(data: Path, out: Path, extra: list[str]) -> dict:
    """One ``bayes-scalerl fit`` process: wall time, peak RSS and the printed phases."""
    exe = shutil.which("bayes-scalerl") or sys.executable
    cmd = [exe] if exe != sys.executable else [sys.executable, "-m", "bayes_scalerl.cli"]
    cmd += ["fit", str(data), "--out", str(out), "--predict", "32000", *extra]
    if out.exists():
        shutil.rmtree(out)
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    stdout = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{stdout[-2000:]}")
    line = next(ln for ln in stdout.splitlines() if ln.startswith("time (s):"))
    phases = {k: float(v) for k, v in re.findall(r"([a-z ]+?) (\d+\.\d)(?:,|;)", line[len("time (s): ") :])}
    phases = {k.strip(): v for k, v in phases.items()}
    size = sum(p.stat().st_size for p in out.iterdir())
    return {"wall": wall, "peak_gib": usage.ru_maxrss / 2**20, "phases": phases, "out_mb": size / 1e6}


def curve_fit_loop(df) -> float:
    """Seconds for a scipy ``curve_fit`` of the sigmoid to every run, one at a time."""
    from scipy.optimize import curve_fit

    def f(c, A, B, C_mid, R0):
        return bs.scalerl_curve(c, A, B, C_mid, R0)

    t0 = time.perf_counter()
    for _, g in df.groupby("run", sort=False):
        c, y = g["compute"].to_numpy(float), g["reward"].to_numpy(float)
        p0 = [min(y.max() + 0.05, 0.99), 1.5, float(np.median(c[c > 0])), y[0]]
        try:
            curve_fit(f, c, y, p0=p0, bounds=([0, 0.1, 1.0, 0], [1, 10, 1e7, 1]), maxfev=2000)
        except RuntimeError:
            pass  # no convergence: counted in the time all the same
    return time.perf_counter() - t0


def _versions() -> str:
    import importlib.metadata as md

    names = ("jax", "jaxlib", "numpyro", "numpy", "xarray", "arviz-stats", "matplotlib", "scipy")
    return ", ".join(f"{n} {md.version(n)}" for n in names)


def _machine() -> str:
    mem = ""
    try:
        with open("/proc/meminfo") as fh:
            kb = int(fh.readline().split()[1])
        mem = f", {kb / 2**20:.0f} GiB memory"
    except OSError:
        pass
    return f"{platform.platform()}, {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs{mem}"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, nargs="+", default=[100, 1000])
    ap.add_argument(
        "--discrepancy",
        nargs="+",
        default=["none", "calibrated"],
        choices=["none", "calibrated"],
        help="noise models to time (calibrated is the default model)",
    )
    ap.add_argument("--max-calibrated", type=int, default=10_000, help="largest size timed with calibrated")
    ap.add_argument("--no-warm", dest="warm", action="store_false")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        if args.warm:
            small = tmp / "warm.csv"
            simulate(min(args.runs)).to_csv(small, index=False)
            for disc in args.discrepancy:
                run_command(small, tmp / "warm", ["--discrepancy", disc])
        for n in args.runs:
            df = simulate(n)
            data = tmp / f"runs{n}.csv"
            df.to_csv(data, index=False)
            scipy_s = curve_fit_loop(df)
            for disc in args.discrepancy:
                if disc == "calibrated" and n > args.max_calibrated:
                    continue
                r = run_command(data, tmp / "out", ["--discrepancy", disc])
                ph = r["phases"]
                after = sum(ph.get(k, 0.0) for k in AFTER_SAMPLING)
                rows.append((n, disc, r, after, scipy_s))
                print(
                    f"{n} runs, {disc}: {r['wall']:.1f} s, peak {r['peak_gib']:.2f} GiB, "
                    f"sample {ph.get('sample', 0):.1f} s, after sampling {after:.1f} s",
                    flush=True,
                )
    head = ["runs", "discrepancy", "wall (s)", *PHASES, "after sampling (s)", "after / sample"]
    head += ["peak memory (GiB)", "output (MB)", "scipy curve_fit loop (s)"]
    lines = [
        "# The whole `bayes-scalerl fit` command",
        "",
        f"Machine: {_machine()}. Python {platform.python_version()}; {_versions()}.",
        "",
        f"Command: `python benchmarks/bench_cli.py {' '.join(argv if argv is not None else sys.argv[1:])}`."
        " Each row is one process `bayes-scalerl fit data.csv --out DIR --predict 32000 --discrepancy X`"
        " (4 chains x 500 + 500)"
        + (
            ", after an untimed run on the smallest size (programs in the persistent cache)."
            if args.warm
            else " (no warm-up run)."
        ),
        "Phase columns are the command's own `time (s):` line, in seconds; `other` is what no phase"
        " covers (argument parsing, imports inside the commands, freeing memory); the wall time also"
        " holds Python's start and the package import.",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    for n, disc, r, after, scipy_s in rows:
        ph = r["phases"]
        sample = ph.get("sample", 0.0)
        cells = [f"{n:,}", disc, f"{r['wall']:.1f}", *(f"{ph.get(k, 0.0):.1f}" for k in PHASES)]
        cells += [f"{after:.1f}", f"{after / sample:.2f}" if sample else "-"]
        cells += [f"{r['peak_gib']:.2f}", f"{r['out_mb']:.0f}", f"{scipy_s:.1f}"]
        lines.append("| " + " | ".join(cells) + " |")
    text = "\n".join(lines) + "\n"
    write_results(text, args.out)


if __name__ == "__main__":
    main()
