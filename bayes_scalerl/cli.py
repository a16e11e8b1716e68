"""The ``bayes-scalerl`` command line.

Exit status: 0 on success, 2 on invalid input or arguments (message on stderr,
nothing written), 1 on any other failure.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

__all__ = ["main"]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # exit 2 with the message, as argparse does
        self.print_usage(sys.stderr)
        self.exit(2, f"{self.prog}: error: {message}\n")


def _computes(text: str) -> list[float]:
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None
    if any(not (v > 0) for v in values):
        raise argparse.ArgumentTypeError(f"compute values must be positive, got {text!r}") from None
    return values


def _positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    return v


def _nonneg_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not v >= 0:
        raise argparse.ArgumentTypeError(f"expected a non-negative number, got {text!r}") from None
    return v


def _add_fit_options(p: argparse.ArgumentParser, out_default: str | None) -> None:
    p.add_argument(
        "--out",
        required=out_default is None,
        default=out_default,
        help="output folder (created; files in it are replaced only on success)",
    )
    p.add_argument(
        "--fit-until", type=_nonneg_float, default=None, help="fit only points with compute <= this"
    )
    p.add_argument(
        "--min-compute",
        type=_nonneg_float,
        default=None,
        help="leave points below this compute out of the likelihood",
    )
    p.add_argument(
        "--predict", type=_computes, default=[], help="extra computes to predict at, comma-separated"
    )
    p.add_argument("--chains", type=_positive_int, default=4, help="chains per run (default 4; at least 2)")
    p.add_argument("--warmup", type=_positive_int, default=500, help="warm-up steps per chain (default 500)")
    p.add_argument("--samples", type=_positive_int, default=500, help="kept draws per chain (default 500)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (exposed for documentation and tests)."""
    parser = _Parser(prog="bayes-scalerl", description="Bayesian fits of ScaleRL compute-scaling curves.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    p_fit = sub.add_parser("fit", help="fit a CSV or Parquet table of runs")
    p_fit.add_argument("data", help="CSV or Parquet file with columns run, compute, reward")
    _add_fit_options(p_fit, None)
    p_demo = sub.add_parser("demo", help="fit the bundled simulated leave-one-out study")
    _add_fit_options(p_demo, "bayes-scalerl-demo")
    return parser


def _write_outputs(result, out: Path, predict: list[float]) -> None:
    from .io import atomic_output_dir
    from .plots import plot_curves

    with atomic_output_dir(out) as tmp:
        summary = result.summary()
        summary.to_csv(tmp / "summary.csv", index=False)
        result.observed_predictions(predict).to_csv(tmp / "predictions.csv", index=False)
        diag = result.diagnostics()
        diag[["run", "n_points", "r_hat_max", "ess_bulk_min", "divergences", "converged"]].to_csv(
            tmp / "diagnostics.csv", index=False
        )
        result.save(tmp / "posterior.nc")
        fig = plot_curves(result)
        fig.savefig(tmp / "curves.png", dpi=120)
        import matplotlib.pyplot as plt

        plt.close(fig)
    return summary, diag


def _run_fit(runs, args, *, defaults: dict | None = None) -> int:
    from .fitting import fit

    kw = dict(min_compute=args.min_compute, fit_until=args.fit_until)
    for k, v in (defaults or {}).items():
        if kw.get(k) is None:
            kw[k] = v
    # validate the window before sampling, so bad input writes nothing
    runs.window(min_compute=kw["min_compute"], fit_until=kw["fit_until"])
    t0 = time.perf_counter()
    result = fit(
        runs,
        chains=args.chains,
        warmup=args.warmup,
        samples=args.samples,
        seed=args.seed,
        progress=True,
        **kw,
    )
    summary, diag = _write_outputs(result, Path(args.out), args.predict)
    took = time.perf_counter() - t0
    bad = diag.loc[~diag["converged"], "run"].tolist()
    a = summary[summary["param"] == "A"]
    print(f"fitted {len(diag)} run(s) in {took:.1f} s; outputs in {args.out}/")
    for _, row in a.iterrows():
        print(f"  {row['run']}: A = {row['q50']:.3f} [90%: {row['q05']:.3f}, {row['q95']:.3f}]")
    if bad:
        print(f"not converged (R-hat > 1.01, bulk ESS < 100 or divergences): {', '.join(bad)}")
    else:
        print("every run converged (R-hat <= 1.01, bulk ESS >= 100, no divergences)")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    from .data import DataError
    from .devices import use_all_cpu_cores

    use_all_cpu_cores()

    try:
        if args.command == "fit":
            from .io import read_runs

            runs = read_runs(args.data)
            return _run_fit(runs, args)
        if args.command == "demo":
            from .data import Runs
            from .demo import DEMO_FIT_UNTIL, DEMO_MIN_COMPUTE, demo_runs

            print(
                "demo: simulated leave-one-out study from the ScaleRL paper's reported "
                "parameters (9 recipes x 2 seeds); fit to 8k GPU-hours, extrapolate to 16k"
            )
            runs = Runs.from_frame(demo_runs(), source="<demo>")
            return _run_fit(
                runs, args, defaults={"fit_until": DEMO_FIT_UNTIL, "min_compute": DEMO_MIN_COMPUTE}
            )
    except DataError as exc:
        print(f"bayes-scalerl: error: {exc}", file=sys.stderr)
        return 2
    except ValueError as exc:
        print(f"bayes-scalerl: error: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # pragma: no cover - reported, not hidden
        print(f"bayes-scalerl: failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    return 1


def entry() -> None:
    """Console-script entry point."""
    sys.exit(main())
