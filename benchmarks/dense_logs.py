"""What smooth departures from the sigmoid cost on dense logs (hundreds of evaluations a run).

``Priors(shape_noise="auto")`` whitens each run's errors by a Kalman filter
(:func:`bayes_scalerl.models.shape_noise.apply_whitening`) where a dense whitening matrix
(:func:`~bayes_scalerl.models.shape_noise.whitening`) took ``point^2`` work at every
gradient. Two tables:

1. **The gradient alone:** the time of one gradient of a whitened sum of squares, for a
   batch of runs and chains, with the dense matrix, the filter as a parallel prefix and the
   filter point by point (the default on CPU), beside the unwhitened one (the model
   without the term).
2. **Whole fits** (``--fit``): ``bs.fit`` with the defaults on simulated wiggles (the
   misspecification simulator's ``wiggle`` family, iid noise), with ``shape_noise`` "auto"
   and None, wall time and the share of runs converged.

Example::

    python benchmarks/dense_logs.py --runs 16 --n-evals 900 --fit
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

import bayes_scalerl as bs
from bayes_scalerl.analyses.misspec import simulate_scenario
from bayes_scalerl.models.shape_noise import apply_whitening, state_space_whitening, whitening

__all__ = ["gradient_times", "fit_times", "main"]


def _time(fn, args, repeats: int) -> float:
    """Mean seconds of a compiled call (after one call that compiles it)."""
    jax.block_until_ready(fn(*args))
    t0 = time.perf_counter()
    for _ in range(repeats):
        jax.block_until_ready(fn(*args))
    return (time.perf_counter() - t0) / repeats


def gradient_times(n_runs: int, n_points: int, chains: int = 4, repeats: int = 20) -> list[dict]:
    """Milliseconds per gradient of ``sum (L^-1 sin v)^2`` over ``(run, chain, point)``."""
    rng = np.random.default_rng(0)
    x = np.broadcast_to(np.log(np.arange(1, n_points + 1) * 10.0), (n_runs, n_points))
    mask = np.ones((n_runs, n_points), bool)
    coef, _ = state_space_whitening(x, mask, 0.3, 0.75, 2.0)
    W, _ = whitening(x, mask, 0.3, 0.75, 2.0, xp=np)
    v = jnp.asarray(rng.normal(size=(n_runs, chains, n_points)))

    def grad(f):
        return jax.jit(jax.vmap(jax.grad(f, argnums=1)))

    cases = {
        "none (no departures)": (grad(lambda c, u: jnp.sum(jnp.sin(u) ** 2)), jnp.asarray(coef)),
        "dense matrix": (grad(lambda w, u: jnp.sum((jnp.sin(u) @ w.T) ** 2)), jnp.asarray(W)),
        "filter, parallel prefix": (
            grad(lambda c, u: jnp.sum(apply_whitening(c, jnp.sin(u), True) ** 2)),
            jnp.asarray(coef),
        ),
        "filter, point by point": (
            grad(lambda c, u: jnp.sum(apply_whitening(c, jnp.sin(u), False) ** 2)),
            jnp.asarray(coef),
        ),
    }
    return [
        {
            "runs": n_runs,
            "points": n_points,
            "chains": chains,
            "whitening": name,
            "ms": 1e3 * _time(f, (a, v), repeats),
        }
        for name, (f, a) in cases.items()
    ]


def fit_times(n_runs: int, n_evals: int, seed: int = 3) -> list[dict]:
    """Wall time of ``bs.fit`` (defaults) on simulated wiggles, with and without the term."""
    df = simulate_scenario(np.random.default_rng(seed), "wiggle", "iid", n_runs, n_evals=n_evals)
    runs = bs.Runs.from_frame(df[["run", "compute", "reward"]])
    rows = []
    for name, setting in (("auto", "auto"), ("none", None)):
        t0 = time.perf_counter()
        res = bs.fit(runs, priors=bs.Priors(shape_noise=setting), seed=0)
        took = time.perf_counter() - t0
        rows.append(
            {
                "runs": n_runs,
                "evaluations": n_evals,
                "shape_noise": name,
                "seconds": took,
                "converged": float(res.diagnostics()["converged"].mean()),
                "noise": res.settings.get("noise", ""),
            }
        )
    return rows


def _markdown(rows: list[dict]) -> str:
    cols = list(rows[0])
    cell = lambda v: f"{v:.3g}" if isinstance(v, float) else str(v)  # noqa: E731
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(cell(r[c]) for c in cols) + " |" for r in rows]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=16)
    ap.add_argument("--n-evals", type=int, default=900)
    ap.add_argument("--gradient-runs", default="16,128", help="batch sizes of the gradient table")
    ap.add_argument("--fit", action="store_true", help="also time whole fits (minutes)")
    args = ap.parse_args(argv)
    bs.use_all_cpu_cores()
    print(
        f"# {platform.processor() or platform.machine()}, {os.cpu_count()} CPU cores, "
        f"{len(jax.devices())} JAX device(s) ({jax.devices()[0].platform}); python "
        f"{platform.python_version()}, jax {jax.__version__}, bayes_scalerl {bs.__version__}\n"
    )
    rows = [r for n in args.gradient_runs.split(",") for r in gradient_times(int(n), args.n_evals)]
    print(_markdown(rows) + "\n")
    if args.fit:
        print(_markdown(fit_times(args.runs, args.n_evals)))


if __name__ == "__main__":
    main()
