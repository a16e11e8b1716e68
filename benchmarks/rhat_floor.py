"""Benchmark: how often R-hat misses 1.01 when NUTS samples an ideal posterior.

Usage::

    python benchmarks/rhat_floor.py [--fits 1000] [--dim 4] [--out benchmarks/results/rhat-floor.md]

NumPyro's own NUTS (dense mass, ``target_accept`` 0.9, float64) samples a standard normal
of ``--dim`` dimensions with the package's default size, 4 chains x 500 warm-up x 500
draws, ``--fits`` times (all chains vectorised in one call). Each fit is judged as the
package judges a run: the largest ArviZ rank R-hat (bulk and folded) over the coordinates.
The share of fits above 1.01 is the floor that no reparameterisation of our model can
beat at this number of draws. Prints a table with the machine and versions.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

import arviz_stats as azs
import jax
import numpy as np
import numpyro
import numpyro.distributions as dist
import xarray as xr
from numpyro.infer import MCMC, NUTS

sys.path.insert(0, str(Path(__file__).resolve().parent))
from environment import write_results  # noqa: E402

jax.config.update("jax_enable_x64", True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fits", type=int, default=1000)
    ap.add_argument("--dim", type=int, default=4)
    ap.add_argument("--chains", type=int, default=4)
    ap.add_argument("--warmup", type=int, default=500)
    ap.add_argument("--samples", type=int, default=500)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()

    def model() -> None:
        numpyro.sample("x", dist.Normal(0.0, 1.0).expand([a.dim]))

    mcmc = MCMC(
        NUTS(model, dense_mass=True, target_accept_prob=0.9),
        num_warmup=a.warmup,
        num_samples=a.samples,
        num_chains=a.chains * a.fits,
        chain_method="vectorized",
        progress_bar=False,
    )
    t0 = time.perf_counter()
    mcmc.run(jax.random.key(a.seed))
    took = time.perf_counter() - t0
    x = np.asarray(mcmc.get_samples(group_by_chain=True)["x"]).reshape(a.fits, a.chains, a.samples, a.dim)
    ds = xr.Dataset({f"x{k}": (("run", "chain", "draw"), x[..., k]) for k in range(a.dim)})
    ds = ds.transpose("chain", "draw", "run")
    dev = jax.devices()[0]
    lines = [
        f"machine: {platform.node()} {platform.machine()}, {os.cpu_count()} CPU cores, "
        f"JAX devices: {len(jax.devices())} x {dev.platform}",
        f"versions: python {platform.python_version()}, jax {jax.__version__}, numpyro {numpyro.__version__}",
        f"command: python benchmarks/rhat_floor.py --fits {a.fits} --dim {a.dim} --chains {a.chains} "
        f"--warmup {a.warmup} --samples {a.samples} --seed {a.seed} ({took:.0f} s)",
        f"target: standard normal in {a.dim} dimensions, NumPyro NUTS (dense mass, target_accept 0.9)",
        "",
        "| R-hat | share of fits with any coordinate > 1.01 | share of coordinates > 1.01 |",
        "|---|---|---|",
    ]
    for method in ("rank", "split", "folded"):
        r = azs.rhat(ds, method=method)
        per = np.stack([r[v].values for v in r.data_vars])
        lines.append(f"| {method} | {(per.max(axis=0) > 1.01).mean():.4f} | {(per > 1.01).mean():.4f} |")
    lines += ["", "| ESS (all chains) | 1st percentile | 5th percentile | median |", "|---|---|---|---|"]
    for method in ("bulk", "tail", "folded"):
        e = azs.ess(ds, method=method)
        q = np.quantile(np.stack([e[v].values for v in e.data_vars]), [0.01, 0.05, 0.5])
        lines.append(f"| {method} | {q[0]:.0f} | {q[1]:.0f} | {q[2]:.0f} |")
    text = "\n".join(lines) + "\n"
    write_results(text, a.out)


if __name__ == "__main__":
    main()
