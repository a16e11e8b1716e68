"""The ``bayes-scalerl`` command line.

Exit status: 0 on success; 2 on invalid input or arguments (bad options or option
combinations, a :class:`~bayes_scalerl.DataError` in the data, an output folder that is a
file, a checkpoint folder of another fit: a message on stderr, nothing written); anything
else is a failure of the program and propagates (traceback, exit status 1).

Option names follow the Python API: ``--chains``, ``--warmup``, ``--samples``,
``--checkpoint-dir`` (``checkpoint_dir=``), ``--n-future`` (``n_future=``), ``--params``
(``params=``), ... The older spellings ``--checkpoint``, ``--futures`` and ``--param`` are
still accepted (hidden from ``--help``, with a note on stderr).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

from .. import __version__
from ..data.runs import DataError
from ..engine import runtime
from ..engine.retry import Retry
from ..models.priors import LIKELIHOODS

__all__ = ["main", "build_parser", "entry"]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # exit 2 with the message, as argparse does
        self.print_usage(sys.stderr)
        self.exit(2, f"{self.prog}: error: {message}\n")


class _DeprecatedAlias(argparse.Action):
    """An old spelling of an option: stores into the new option's ``dest``, with a note."""

    def __init__(self, option_strings, dest, *, new: str, **kwargs):
        kwargs.setdefault("help", argparse.SUPPRESS)
        kwargs.setdefault("default", argparse.SUPPRESS)
        super().__init__(option_strings, dest, **kwargs)
        self.new = new

    def __call__(self, parser, namespace, values, option_string=None):
        print(f"{parser.prog}: note: {option_string} is deprecated; use {self.new}", file=sys.stderr)
        setattr(namespace, self.dest, values)


def _computes(text: str) -> list[float]:
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None
    if any(not (v > 0) for v in values):
        raise argparse.ArgumentTypeError(f"compute values must be positive, got {text!r}") from None
    return values


def _int_from(text: str, low: int, what: str) -> int:
    try:
        v = int(text)
    except ValueError:
        v = low - 1
    if v < low:
        raise argparse.ArgumentTypeError(f"expected a {what} integer, got {text!r}") from None
    return v


def _positive_int(text: str) -> int:
    return _int_from(text, 1, "positive")


def _nonneg_int(text: str) -> int:
    return _int_from(text, 0, "non-negative")


def _chains(text: str) -> int:
    v = _positive_int(text)
    if v < 2:
        raise argparse.ArgumentTypeError(f"expected at least 2 chains (for R-hat), got {text!r}")
    return v


def _fractions(text: str) -> list[float]:
    values = _computes(text)
    if any(v > 1 for v in values):
        raise argparse.ArgumentTypeError(f"fractions must be in (0, 1], got {text!r}")
    return values


def _finite_nonneg_float(text: str) -> float:
    v = _nonneg_float(text)
    if not math.isfinite(v):
        raise argparse.ArgumentTypeError(f"expected a finite non-negative number, got {text!r}")
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
    _add_sampler_options(p)
    p.add_argument(
        "--no-retry",
        action="store_true",
        help="do not sample again the runs that fail the convergence checks (the same as --retries 0; "
        "by default they are sampled again, see --retries; with --model hierarchical, pooled chains "
        "that fail them run on, a pass of draws at a time, up to 4 passes)",
    )
    p.add_argument(
        "--likelihood",
        choices=LIKELIHOODS,
        default="ar1",
        help="noise model of an evaluation (default ar1: neighbouring evaluations share noise, at one "
        "correlation for the batch; gaussian: independent noise, version 0.1's default; binomial needs "
        "an n_eval column)",
    )
    _add_rho_option(p)
    _add_r0_option(p)
    _add_priors_option(p)
    _add_shape_noise_option(p)
    _add_discrepancy_options(p)
    p.add_argument(
        "--model",
        choices=("independent", "hierarchical"),
        default="independent",
        help="independent fits per run (default), or seeds pooled within recipes (needs a recipe column)",
    )
    p.add_argument(
        "--checkpoint-dir",
        metavar="DIR",
        default=None,
        help="write each finished chunk of runs to DIR; the same command run again resumes from it "
        "(a DIR of a different fit is refused)",
    )
    p.add_argument(
        "--checkpoint", dest="checkpoint_dir", metavar="DIR", action=_DeprecatedAlias, new="--checkpoint-dir"
    )
    p.add_argument(
        "--executor",
        choices=("local", "ray"),
        default="local",
        help="run chunks on this machine's devices (default) or as Ray tasks (needs ray)",
    )
    p.add_argument(
        "--log-likelihood",
        action="store_true",
        help="store the pointwise log-likelihood in posterior.nc (for ArviZ's loo; about 0.4 MB a run)",
    )


def _add_input_options(p: argparse.ArgumentParser) -> None:
    from ..data.readers import FORMATS

    g = p.add_argument_group("input (see the docs: Reading training logs)")
    g.add_argument("--format", choices=FORMATS, default="auto", help="input format (default: auto-detect)")
    g.add_argument(
        "--metric",
        action="append",
        default=None,
        help="verl / W&B metric name or glob; repeat for several (each becomes a task)",
    )
    g.add_argument("--tag", action="append", default=None, help="TensorBoard scalar tag or glob")
    g.add_argument("--gpus", type=_positive_float, default=None, help="GPU-hours = wall hours x this")
    g.add_argument("--gpu-hours-per-step", type=_positive_float, default=None, help="GPU-hours = step x this")
    g.add_argument("--run-name", default=None, help="name of the run (a single verl file or W&B history)")
    for col in ("run", "compute", "reward", "recipe", "seed", "task", "n-eval"):
        g.add_argument(f"--{col}-col", default=None, help=f"column holding {col.replace('-', '_')}")


def _read_input(args):
    from ..data.readers import read_any

    def one(v):
        return v[0] if isinstance(v, list) and len(v) == 1 else v

    options = {
        "metric": one(args.metric),
        "tag": one(args.tag),
        "gpus": args.gpus,
        "gpu_hours_per_step": args.gpu_hours_per_step,
        "run_name": args.run_name,
    }
    for col in ("run", "compute", "reward", "recipe", "seed", "task", "n_eval"):
        options[f"{col}_col"] = getattr(args, f"{col}_col")
    runs = read_any(args.data, format=args.format, **options)
    for note in runs.notes:
        print(f"note: {note}")
    return runs


def _add_sampler_options(p: argparse.ArgumentParser) -> None:
    """``--chains``, ``--warmup``, ``--samples``, ``--seed``: the arguments of ``fit`` of the same names."""
    p.add_argument("--chains", type=_chains, default=4, help="chains per run (default 4; at least 2)")
    p.add_argument("--warmup", type=_positive_int, default=500, help="warm-up steps per chain (default 500)")
    p.add_argument("--samples", type=_positive_int, default=500, help="kept draws per chain (default 500)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument(
        "--retries",
        type=_nonneg_int,
        default=None,
        help="how many times a run that fails the convergence checks is sampled again (default 2: "
        "once at target_accept 0.99 with twice the draws, thinned back, and those that fail again "
        "once more at 0.999 with four times the draws; 1: the first of these alone, faster where "
        "many runs fail; 0: never)",
    )


def _retry(args: argparse.Namespace) -> Retry | bool:
    """``--retries`` (and ``--no-retry``) as ``fit``'s ``retry``: ``False`` (0), ``True`` (the
    default, 2) or a :class:`Retry` with another count."""
    n = _retries(args)
    if n == 0:
        return False
    return True if n == Retry().retries else Retry(retries=n)


def _retry_hint(args: argparse.Namespace) -> str | None:
    """What to try when runs of a fit did not converge, if more retries may help."""
    if getattr(args, "model", "independent") != "independent" or not 0 < _retries(args) < Retry().retries:
        return None
    return (
        "  --retries 2 (the default) samples such runs once more, at target_accept 0.999 with four "
        "times the draws (it converged 145 of the 154 real DAPO curves fitted on their first quarter, "
        "against 114 with --retries 1)"
    )


def _retries(args: argparse.Namespace) -> int:
    """How many retries the options ask for (``--no-retry``: 0)."""
    if getattr(args, "no_retry", False):
        return 0
    n = getattr(args, "retries", None)
    return Retry().retries if n is None else int(n)


def _add_rho_option(p: argparse.ArgumentParser) -> None:
    """``--rho``: a fixed AR(1) correlation (checked in :func:`_check_args`)."""
    p.add_argument(
        "--rho",
        default=None,
        help="with --likelihood ar1: the AR(1) correlation of neighbouring evaluations, 'auto' "
        "(default: the batch's estimate from the data, bs.noise_correlation, for every run), "
        "'reml' (the batch's estimate by the restricted likelihood of least-squares residuals), "
        "a number in (-1, 1) for every run, or 'sampled' (each run's own, sampled; slower)",
    )


def _add_r0_option(p: argparse.ArgumentParser) -> None:
    """``--r0``: ``R0`` the first evaluation (default) or fitted (``Priors.R0_fitted``)."""
    p.add_argument(
        "--r0",
        choices=("first", "fitted"),
        default="first",
        help="first (default, the paper's convention): R0 is each run's first evaluation; fitted: the "
        "reward before training is a parameter, and the first evaluation a noisy point like the others "
        "(bs.Priors(R0_fitted=True); not with --model hierarchical)",
    )


def _add_priors_option(p: argparse.ArgumentParser) -> None:
    """``--priors``: the default priors, or ``A``, ``B`` and ``C_mid``'s learnt from the batch."""
    p.add_argument(
        "--priors",
        choices=("batch", "fixed"),
        default=None,
        help="batch (the default with --model independent): each run's priors of A, B and C_mid "
        "learnt from the batch's other runs (bs.Priors(from_batch='ceiling')); fixed: the wide "
        "priors of A, B and C_mid, the same for every run (the earlier default, and the default "
        "with --model hierarchical, which pools the runs itself)",
    )


def _add_shape_noise_option(p: argparse.ArgumentParser) -> None:
    """``--shape-noise``: smooth departures from the sigmoid (``Priors.shape_noise``)."""
    p.add_argument(
        "--shape-noise",
        default=None,
        metavar="{auto,none,KAPPA:ELL}",
        help="smooth departures from the sigmoid in log compute, shared by neighbouring evaluations: "
        "auto (default: the batch's estimate; none where the data show none), none, or KAPPA:ELL "
        "(their sd over sigma and length scale in e-folds of compute); a pair needs --likelihood ar1 "
        "(fixed --rho) or gaussian, not --model hierarchical",
    )


def _shape_noise(value: str | None):
    """``--shape-noise``'s value as ``Priors.shape_noise``."""
    if value is None or value == "auto":
        return "auto"  # the default
    if value == "none":
        return None
    kappa, ell = value.split(":")
    return (float(kappa), float(ell))


def _decades(text: str) -> float:
    v = _positive_float(text)
    if not math.isfinite(v):
        raise argparse.ArgumentTypeError(f"expected a finite positive number, got {text!r}")
    return v


def _add_discrepancy_options(p: argparse.ArgumentParser) -> None:
    """``--discrepancy`` and ``--discrepancy-horizon`` (fit, demo, backtest, identify)."""
    p.add_argument(
        "--discrepancy",
        choices=("calibrated", "none"),
        default="calibrated",
        help="calibrated (default): a discrepancy beyond the data, learnt by refitting each run on its "
        "earlier points, widens bands and A; none: the exact sigmoid alone (version 0.1)",
    )
    p.add_argument(
        "--discrepancy-horizon",
        type=_decades,
        default=None,
        metavar="DECADES",
        help="decades of compute over which a departure from the sigmoid keeps growing beyond the data "
        "(default 2). The data cannot tell it; it matters little for bands at 2-4x the data but sets how "
        "wide A is (docs: 'A is a limit')",
    )


def _discrepancy(args: argparse.Namespace):
    """The ``discrepancy`` argument of :func:`~bayes_scalerl.fit` from ``--discrepancy`` and
    ``--discrepancy-horizon``: ``False``, ``True`` (the default settings) or a
    :class:`~bayes_scalerl.Discrepancy`."""
    decades = getattr(args, "discrepancy_horizon", None)
    if args.discrepancy != "calibrated":
        return False  # with --discrepancy-horizon refused by the parser's checks
    if decades is None:
        return True
    from ..models.discrepancy import Discrepancy

    return Discrepancy(horizon=decades * math.log(10.0))


def _add_refit_options(p: argparse.ArgumentParser) -> None:
    """Model and sampler options of the commands that refit (backtest, identify)."""
    p.add_argument("--min-compute", type=_nonneg_float, default=None, help="leave earlier points out")
    _add_sampler_options(p)
    p.add_argument("--likelihood", choices=LIKELIHOODS, default="ar1", help="noise model (default ar1)")
    _add_rho_option(p)
    _add_r0_option(p)
    _add_priors_option(p)
    _add_shape_noise_option(p)
    _add_discrepancy_options(p)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (exposed for documentation and tests)."""
    parser = _Parser(prog="bayes-scalerl", description="Bayesian fits of ScaleRL compute-scaling curves.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    p_fit = sub.add_parser("fit", help="fit a CSV or Parquet table of runs")
    p_fit.add_argument(
        "data",
        help="a table (CSV/Parquet: run, compute, reward), verl JSON-lines file(s), a TensorBoard log "
        "directory or a W&B CSV export",
    )
    _add_input_options(p_fit)
    _add_fit_options(p_fit, None)
    p_demo = sub.add_parser("demo", help="fit the bundled simulated leave-one-out study")
    _add_fit_options(p_demo, "bayes-scalerl-demo")
    p_bt = sub.add_parser(
        "backtest", help="fit early evaluations, score the later ones beside the paper's least squares"
    )
    p_bt.add_argument("data", help="the runs (any input format; see fit)")
    _add_input_options(p_bt)
    cut = p_bt.add_mutually_exclusive_group(required=True)
    cut.add_argument(
        "--fit-until", type=_positive_float, default=None, help="fit compute <= this for every run"
    )
    cut.add_argument(
        "--fraction", type=_fraction, default=None, help="fit each run on compute <= this share of its own"
    )
    p_bt.add_argument("--out", required=True, help="folder for backtest.csv, scores.csv and chains.csv")
    p_bt.add_argument("--bootstrap", type=_positive_int, default=200, help="bootstrap replicates (200)")
    p_bt.add_argument(
        "--no-baseline",
        action="store_true",
        help="do not fit version 0.1's model (independent Gaussian noise) beside the default "
        "(its row 'gaussian'; it costs about half the default's time)",
    )
    _add_refit_options(p_bt)
    p_id = sub.add_parser(
        "identify", help="does the data pin down the ceiling A? budget sweep, prior sensitivity, prediction"
    )
    p_id.add_argument("data", help="the runs (any input format; see fit)")
    _add_input_options(p_id)
    p_id.add_argument("--out", required=True, help="folder for identify.csv, widths.csv, widths.png")
    grid = p_id.add_mutually_exclusive_group()
    grid.add_argument(
        "--budgets", type=_computes, default=None, help="shared compute cut-offs, comma-separated"
    )
    grid.add_argument(
        "--fractions",
        type=_fractions,
        default=None,
        help="cut-offs as fractions (0, 1] of each run's compute",
    )
    p_id.add_argument("--tolerance", type=_positive_float, default=0.02, help="half-width asked of A (0.02)")
    p_id.add_argument(
        "--n-future", type=_nonneg_int, default=5, help="simulated futures per run for the prediction (5)"
    )
    p_id.add_argument(
        "--futures", dest="n_future", type=_nonneg_int, action=_DeprecatedAlias, new="--n-future"
    )
    p_id.add_argument(
        "--no-sensitivity", action="store_true", help="skip the refits under alternative priors"
    )
    _add_refit_options(p_id)
    p_rep = sub.add_parser("report", help="write an HTML and Markdown report of a fit output folder")
    p_rep.add_argument("fitdir", help="output folder of 'bayes-scalerl fit' (holds posterior.nc)")
    p_rep.add_argument("--out", default=None, help="folder for the report (default: FITDIR)")
    p_cmp = sub.add_parser("compare", help="compare recipes of a fit output folder")
    p_cmp.add_argument("fitdir", help="output folder of 'bayes-scalerl fit' (holds posterior.nc)")
    p_cmp.add_argument("--a", default=None, help="first recipe (default: every pair)")
    p_cmp.add_argument("--b", default=None, help="second recipe")
    p_cmp.add_argument(
        "--params",
        type=_params,
        default=["A"],
        help="comma-separated among A,B,C_mid,reward (reward needs --budget; default A)",
    )
    p_cmp.add_argument("--param", dest="params", type=_params, action=_DeprecatedAlias, new="--params")
    p_cmp.add_argument(
        "--rope",
        type=_nonneg_float,
        default=None,
        help="margin of practical equivalence (default 0.02 on A and reward, 5%% relative on B, C_mid)",
    )
    p_cmp.add_argument(
        "--seed-sd",
        type=_finite_nonneg_float,
        default=None,
        help="independent fits: seed-to-seed sd of A and reward added to each recipe (default: "
        "estimated from repeat seeds, pooled with 0.01 from the ScaleRL paper; 0: these seeds only)",
    )
    p_cmp.add_argument("--budget", type=_positive_float, default=None, help="compute for reward, P(best)")
    p_cmp.add_argument(
        "--target", type=_reward, default=None, help="reward target: compute each recipe needs"
    )
    p_cmp.add_argument("--task", default=None, help="task to compare on, when the fit has several")
    p_cmp.add_argument("--out", default=None, help="folder for the tables (default: FITDIR)")
    return parser


def _params(text: str) -> list[str]:
    from ..analyses.comparisons import PARAMS

    values = [v.strip() for v in text.split(",") if v.strip()]
    bad = [v for v in values if v not in PARAMS]
    if bad or not values:
        raise argparse.ArgumentTypeError(f"expected names among {','.join(PARAMS)}, got {text!r}")
    return values


def _nonneg_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {text!r}") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {text!r}")
    return v


def _positive_float(text: str) -> float:
    v = _nonneg_float(text)
    if not v > 0:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return v


def _strictly_between_0_and_1(what: str):
    def parse(text: str) -> float:
        v = _nonneg_float(text)
        if not 0 < v < 1:
            raise argparse.ArgumentTypeError(f"expected a {what} between 0 and 1, got {text!r}")
        return v

    return parse


_fraction = _strictly_between_0_and_1("fraction")
_reward = _strictly_between_0_and_1("reward")


def _run_backtest(args) -> int:
    from ..analyses.backtest import backtest

    runs = _read_input(args)
    bt = backtest(
        runs,
        fit_until=args.fit_until,
        fraction=args.fraction,
        min_compute=args.min_compute,
        bootstrap=args.bootstrap,
        seed=args.seed,
        baseline=not args.no_baseline,
        fit_kwargs=dict(
            chains=args.chains,
            warmup=args.warmup,
            samples=args.samples,
            retry=_retry(args),
            priors=_priors(args),
            discrepancy=_discrepancy(args),
            progress=True,
        ),
    )
    bt.write(args.out)
    for note in bt.notes:
        print(f"note: {note}")
    sc = bt.scores
    print(f"backtest of {int(sc['n_runs'].iloc[0])} run(s), {int(sc['n_points'].iloc[0])} held-out points:")
    for _, r in sc.iterrows():
        cov = (
            "" if r["method"] == "ls" else f", coverage 50% {r['coverage50']:.2f}, 90% {r['coverage90']:.2f}"
        )
        print(f"  {r['method']:>5}: CRPS {r['crps']:.4f}, |error| {r['abs_error']:.4f}{cov}")
    ch = bt.by_chain()
    not_converged = int((~bt.fit.diagnostics()["converged"].astype(bool)).sum())
    print(
        f"  bayes chain by chain: 90% coverage {ch['coverage90'].min():.2f}-{ch['coverage90'].max():.2f}, "
        f"CRPS {ch['crps'].min():.4f}-{ch['crps'].max():.4f}"
        + (
            f" ({not_converged} run(s) did not pass the convergence check; where the chains score "
            "alike, they disagree about something these forecasts do not depend on)"
            if not_converged
            else ""
        )
    )
    print(f"tables in {args.out}/ (backtest.csv, scores.csv, chains.csv)")
    return 0


def _priors(args):
    """The :class:`~bayes_scalerl.Priors` of ``--likelihood``, ``--rho``, ``--r0``, ``--shape-noise``
    and ``--priors``."""
    from ..models.priors import Priors

    rho = getattr(args, "rho", None)
    if rho is None:
        rho = "auto"
    elif rho == "sampled":
        rho = None
    elif rho not in ("auto", "reml"):
        rho = float(rho)
    return Priors(
        likelihood=args.likelihood,
        rho=rho,
        R0_fitted=getattr(args, "r0", "first") == "fitted",
        shape_noise=_shape_noise(getattr(args, "shape_noise", None)),
        from_batch={"batch": "ceiling", "fixed": False}.get(getattr(args, "priors", None), "auto"),
    )


def _run_identify(args) -> int:
    from ..analyses.identify import budget_sweep, prior_sensitivity

    runs = _read_input(args)
    kw = dict(
        min_compute=args.min_compute,
        priors=_priors(args),
        discrepancy=_discrepancy(args),
        chains=args.chains,
        warmup=args.warmup,
        samples=args.samples,
        retry=_retry(args),
    )
    sweep = budget_sweep(
        runs,
        budgets=args.budgets,
        fractions=args.fractions,
        tolerance=args.tolerance,
        n_future=args.n_future,
        seed=args.seed,
        fit_kwargs=kw,
    )
    sens = None
    if not args.no_sensitivity:
        sens = prior_sensitivity(runs, fit_kwargs=kw, baseline=sweep.result, seed=args.seed)
    sweep.write(args.out, sensitivity=sens)
    for note in sweep.notes:
        print(f"note: {note}")
    t = sweep.table
    print(f"identifiability of A (90% interval within +-{args.tolerance:g}) for {len(t)} run(s):")
    for _, r in t.iterrows():
        print(f"  {r['run']}: {r['status']}")
    if sens is not None:
        moved = sens.loc[sens["prior_sensitive"], "run"].tolist()
        if moved:
            print(f"A moves by more than 0.02 under an alternative prior: {', '.join(map(str, moved))}")
    print(f"tables and plot in {args.out}/")
    return 0


def _run_compare(args) -> int:
    from ..analyses import comparisons as cmp
    from ..data.files import atomic_output_dir
    from ..posterior.results import FitResult

    fitdir = Path(args.fitdir)
    result = FitResult.load(_posterior_path(fitdir))
    _check_recipes_and_task(result, fitdir, args)
    table = cmp.compare(
        result,
        args.a,
        args.b,
        params=args.params,
        rope=args.rope,
        budget=args.budget,
        task=args.task,
        seed_sd=args.seed_sd,
    )
    extra = {}
    if args.budget is not None:
        extra["p_best.csv"] = cmp.p_best(result, budget=args.budget, task=args.task, seed_sd=args.seed_sd)
    if args.target is not None:
        extra["compute_to_target.csv"] = cmp.compute_to_target(result, args.target, task=args.task)
    if len(cmp.recipe_names(result)) > 1:
        extra["crossover.csv"] = cmp.crossover(result, args.a, args.b, task=args.task)
    out = Path(args.out) if args.out else fitdir
    with atomic_output_dir(out) as tmp:
        table.to_csv(tmp / "comparisons.csv", index=False)
        for name, df in extra.items():
            df.to_csv(tmp / name, index=False)
    model = result.settings.get("model", "independent")
    print(f"compared {len(cmp.recipe_names(result))} recipe(s) of a {model} fit; tables in {out}/")
    if model != "hierarchical":
        seeded = table.loc[table["param"].isin(["A", "reward"]), "seed_sd"]
        tau = f"{seeded.iloc[0]:.3g}" if len(seeded) else "-"
        print("  note: independent fits compare the mean of each recipe's seeds, plus a seed-to-seed")
        print(f"  sd on A and reward of {tau} (--seed-sd); the hierarchical model")
        print("  (--model hierarchical) estimates the seed-to-seed spread of every parameter.")
    for _, r in table.iterrows():
        print(
            f"  {r['param']}: {r['a']} - {r['b']} = {r['diff_mean']:+.4g} "
            f"[90%: {r['diff_q05']:+.4g}, {r['diff_q95']:+.4g}], P(a > b) = {r['p_a_greater']:.2f}, "
            f"P(|diff| < margin) = {r['p_in_rope']:.2f}: {r['verdict']}"
        )
    if "p_best.csv" in extra:
        top = extra["p_best.csv"].iloc[0]
        print(f"  best at {args.budget:g}: {top['recipe']} (P = {top['p_best']:.2f})")
    return 0


def _posterior_path(fitdir: Path) -> Path:
    path = fitdir / "posterior.nc"
    if not path.is_file():
        raise DataError(f"{fitdir}: no posterior.nc here; give the output folder of 'bayes-scalerl fit'.")
    return path


def _check_recipes_and_task(result, fitdir: Path, args) -> None:
    """Refuse recipe and task names the fit does not have (user input, exit status 2)."""
    import numpy as np

    from ..analyses.comparisons import recipe_names

    names = recipe_names(result)
    for opt, x in (("--a", args.a), ("--b", args.b)):
        if x is not None and x not in names:
            raise DataError(f"{fitdir}: {opt}: unknown recipe {x!r}; the fit has {', '.join(names)}.")
    if args.a is not None and args.a == args.b:
        raise DataError(f"--a and --b name the same recipe {args.a!r}; compare two different recipes.")
    cd = result.dt["constant_data"]
    tasks = list(dict.fromkeys(np.asarray(cd["task"].values).astype(str))) if "task" in cd.data_vars else []
    if args.task is not None and tasks and args.task not in tasks:
        raise DataError(f"{fitdir}: --task: unknown task {args.task!r}; the fit has {', '.join(tasks)}.")
    if args.task is None and len(tasks) > 1:
        raise DataError(f"{fitdir}: the fit has several tasks ({', '.join(tasks)}); choose one with --task.")


#: Most runs the console lists by name (the files have them all).
MAX_LISTED = 20


def _listing(names: list[str]) -> str:
    """``'a, b, c'``; a long list ends with how many more there are and where to find them."""
    if len(names) <= MAX_LISTED:
        return ", ".join(names)
    head = ", ".join(names[:MAX_LISTED])
    return f"{len(names)} runs: {head}, ... and {len(names) - MAX_LISTED} more (see diagnostics.csv)"


def _print_timings(t: dict[str, float], total: float) -> None:
    """One line: where the command's time went (phases of :func:`~bayes_scalerl.engine.runtime.phase`)."""
    other = max(0.0, total - sum(t.values()))
    parts = [f"{k} {v:.1f}" for k, v in t.items()] + [f"other {other:.1f}"]
    print(f"time (s): {', '.join(parts)}; total {total:.1f}")


def _run_fit(runs, args, *, defaults: dict | None = None) -> int:
    from ..posterior.fitting import fit

    kw = dict(min_compute=args.min_compute, fit_until=args.fit_until)
    for k, v in (defaults or {}).items():
        if kw.get(k) is None:
            kw[k] = v
    # validate the window before sampling, so bad input writes nothing
    runs.window(min_compute=kw["min_compute"], fit_until=kw["fit_until"])
    t0 = time.perf_counter()

    result = fit(
        runs,
        model=args.model,
        priors=_priors(args),
        discrepancy=_discrepancy(args),
        retry=_retry(args),
        chains=args.chains,
        warmup=args.warmup,
        samples=args.samples,
        seed=args.seed,
        progress=True,
        checkpoint_dir=args.checkpoint_dir,
        executor=args.executor,
        log_likelihood=args.log_likelihood,
        **kw,
    )
    from ..report.outputs import write_fit_folder_tables

    _, summary, diag = write_fit_folder_tables(result, Path(args.out), args.predict)
    took = time.perf_counter() - t0
    bad = diag.loc[~diag["converged"], "run"].tolist()
    a = summary[summary["param"] == "A"]
    print(f"fitted {len(diag)} run(s) in {took:.1f} s; outputs in {args.out}/")
    fixed_rho = (result.settings.get("priors") or {}).get("rho")
    if args.likelihood == "ar1" and isinstance(fixed_rho, float):
        how = (
            "as given"
            if getattr(args, "rho", None) not in (None, "auto", "reml")
            else "the batch's estimate from the data"
        )
        print(f"AR(1) noise with rho fixed at {fixed_rho:.3f} for every run ({how})")
    noise = str(result.settings.get("noise", "")).split("; ")
    learnt = [part.strip() for part in noise if "learnt from" in part]
    if learnt:  # --priors batch: what the batch said
        print(learnt[0])
    for _, row in a.head(MAX_LISTED).iterrows():
        print(f"  {row['run']}: A = {row['q50']:.3f} [90%: {row['q05']:.3f}, {row['q95']:.3f}]")
    if len(a) > MAX_LISTED:
        print(f"  ... and {len(a) - MAX_LISTED} more run(s): every run's A is in summary.csv")
    again = diag.loc[diag["retried"], "run"].tolist()
    if again:
        print(
            "sampled again with longer chains at a smaller step, thinned back (they failed the "
            f"convergence checks at first; columns retried and retries of diagnostics.csv): {_listing(again)}"
        )
    passes = result.settings.get("pool_passes", 1)
    if passes > 1:
        print(
            f"pooled chains ran {passes} times as long, one draw in {passes} kept (a parameter failed the "
            "convergence checks after each pass before; settings: pool_passes)"
        )
    if bad:
        print(f"not converged (R-hat > 1.01, bulk ESS < 100 or divergences): {_listing(bad)}")
        hint = _retry_hint(args)
        if hint:
            print(hint)
    else:
        print("every run converged (R-hat <= 1.01, bulk ESS >= 100, no divergences)")
    low_bfmi = diag.loc[diag["bfmi_min"] < 0.3, "run"].tolist()
    if low_bfmi:
        print(f"low E-BFMI (< 0.3: the sampler explores the energy poorly): {_listing(low_bfmi)}")
    if "falls" in diag.columns and diag["falls"].any():
        fall = diag[diag["falls"].astype(bool)]
        shown = [f"{r} (by {d:.3f})" for r, d in zip(fall["run"], fall["reward_drop"], strict=True)]
        print(
            "reward falls during training, beyond noise (the ScaleRL curve only rises and cannot "
            "describe it: look at the run, or fit up to its peak with --fit-until; see reward_drop "
            f"in diagnostics.csv): {_listing(shown)}"
        )
    if "discrepancy_tau" in diag.columns:
        tau = diag["discrepancy_tau"]
        n_batch = int((diag["discrepancy_from"] == "batch").sum())
        print(
            "discrepancy beyond the data (slope tau, reward per unit log compute): "
            f"median {tau.median():.4f}, range {tau.min():.4f}-{tau.max():.4f}; "
            f"{n_batch} run(s) too short for a refit of their own took the batch's (see diagnostics.csv)"
        )
    if "a_identified" in diag.columns:
        weak = diag.loc[~diag["a_identified"].astype(bool), "run"].tolist()
        if weak:
            print(
                f"A weakly identified (90% interval wider than 0.10 or posterior close to its prior; "
                f"see a_flag in diagnostics.csv and 'bayes-scalerl identify'): {_listing(weak)}"
            )
    return 0


def _check_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Option problems argparse cannot see on its own: exit status 2 with a usage line."""
    out = getattr(args, "out", None)
    if out:
        path = Path(out)
        if path.exists() and not path.is_dir():
            parser.error(f"argument --out: {out} exists and is not a folder")
        for parent in path.parents:
            if parent.exists():
                if not parent.is_dir():
                    parser.error(f"argument --out: {parent} is a file, not a folder")
                break
    if getattr(args, "no_retry", False) and getattr(args, "retries", None) not in (None, 0):
        parser.error(f"argument --no-retry: not allowed with --retries {args.retries}")
    if getattr(args, "discrepancy_horizon", None) is not None and args.discrepancy != "calibrated":
        parser.error("argument --discrepancy-horizon: needs --discrepancy calibrated")
    rho = getattr(args, "rho", None)
    if rho is not None:
        if args.likelihood != "ar1":
            parser.error("argument --rho: needs --likelihood ar1")
        try:
            ok = rho in ("auto", "reml", "sampled") or -1.0 < float(rho) < 1.0
        except ValueError:
            ok = False
        if not ok:
            parser.error(f"argument --rho: 'auto', 'reml', 'sampled' or a number in (-1, 1), got {rho!r}")
    shape = getattr(args, "shape_noise", None)
    if shape is not None:
        try:
            from ..models.priors import Priors

            Priors(
                likelihood=args.likelihood,
                rho=None if rho == "sampled" else "auto",
                shape_noise=_shape_noise(shape),
            )
            ok = True
        except ValueError:
            ok = False
        if not ok:
            parser.error(
                "argument --shape-noise: 'auto', 'none' or KAPPA:ELL (KAPPA >= 0, ELL > 0), with "
                f"--likelihood ar1 (a fixed --rho) or gaussian; got {shape!r}"
            )
        if getattr(args, "model", "independent") == "hierarchical" and isinstance(_shape_noise(shape), tuple):
            parser.error("argument --shape-noise: not with --model hierarchical")
    hierarchical = getattr(args, "model", "independent") == "hierarchical"
    if getattr(args, "priors", None) == "batch" and hierarchical:
        parser.error("argument --priors: batch needs --model independent (the hierarchical model pools)")
    if args.command in ("fit", "demo"):
        if args.model == "hierarchical" and (
            args.likelihood not in ("gaussian", "ar1") or (args.likelihood == "ar1" and rho == "sampled")
        ):
            parser.error(
                "--model hierarchical has the ar1 likelihood with a fixed --rho (default) or gaussian, "
                f"got --likelihood {args.likelihood}" + (" --rho sampled" if rho == "sampled" else "")
            )
        if args.model == "hierarchical" and getattr(args, "r0", "first") == "fitted":
            parser.error(
                "--model hierarchical takes R0 from each run's first evaluation; --r0 fitted needs "
                "--model independent"
            )
        if args.executor == "ray":
            import importlib.util

            if importlib.util.find_spec("ray") is None:
                parser.error("--executor ray needs Ray: pip install 'bayes_scalerl[ray]'")
        ckpt = args.checkpoint_dir
        if ckpt is not None and Path(ckpt).exists() and not Path(ckpt).is_dir():
            parser.error(f"argument --checkpoint-dir: {ckpt} exists and is not a folder")
    if getattr(args, "format", None) == "tensorboard":
        import importlib.util

        if importlib.util.find_spec("tensorboard") is None:
            parser.error("--format tensorboard needs TensorBoard: pip install 'bayes_scalerl[tensorboard]'")
    if args.command == "compare" and "reward" in args.params and args.budget is None:
        parser.error("--params reward needs --budget")


def _run(args: argparse.Namespace) -> int:
    if args.command == "fit":
        with runtime.phase("read"):
            runs = _read_input(args)
        return _run_fit(runs, args)
    if args.command == "compare":
        return _run_compare(args)
    if args.command == "backtest":
        return _run_backtest(args)
    if args.command == "identify":
        return _run_identify(args)
    if args.command == "report":
        from ..report.report import write_report

        _posterior_path(Path(args.fitdir))
        paths = write_report(args.fitdir, out=args.out)
        print(f"report: {paths['html']} and {paths['markdown']}")
        return 0
    if args.command == "demo":
        from ..data.runs import Runs
        from .demo import DEMO_FIT_UNTIL, DEMO_MIN_COMPUTE, demo_runs

        print(
            "demo: simulated leave-one-out study from the ScaleRL paper's reported "
            "parameters (9 recipes x 2 seeds); fit to 8k GPU-hours, extrapolate to 16k"
        )
        runs = Runs.from_frame(demo_runs(), source="<demo>")
        return _run_fit(runs, args, defaults={"fit_until": DEMO_FIT_UNTIL, "min_compute": DEMO_MIN_COMPUTE})
    raise AssertionError(f"unhandled command {args.command!r}")  # pragma: no cover


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit status.

    Invalid arguments exit through :class:`SystemExit` with status 2 (argparse's way);
    invalid data (:class:`~bayes_scalerl.DataError`) and a checkpoint folder of another fit
    return 2 with a message on stderr. Any other exception propagates.
    """
    t0 = time.perf_counter()
    parser = build_parser()
    args = parser.parse_args(argv)
    _check_args(parser, args)
    from ..engine.checkpoint import CheckpointMismatch
    from ..engine.devices import use_all_cpu_cores

    use_all_cpu_cores()
    import matplotlib

    matplotlib.use("Agg")  # the command line writes figures to files; no window
    if args.command in ("fit", "demo", "backtest", "identify"):
        runtime.ensure_compilation_cache()
    try:
        with runtime.x64(), runtime.timings() as took:
            status = _run(args)
        if args.command in ("fit", "demo") and status == 0:
            _print_timings(took, time.perf_counter() - t0)
        return status
    except (DataError, CheckpointMismatch) as exc:
        print(f"bayes-scalerl: error: {exc}", file=sys.stderr)
        return 2


def entry() -> None:
    """Console-script entry point."""
    sys.exit(main())
