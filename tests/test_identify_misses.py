"""``benchmarks/identify_misses.py``: its curves are the misspecification benchmark's (no fit)."""

from __future__ import annotations

import numpy as np
from conftest import benchmark_module

from bayes_scalerl.analyses.misspec import simulate_benchmark


def test_identify_misses_reads_the_benchmarks_own_runs():
    """``benchmarks/identify_misses.py`` claims its curves are ``simulate_benchmark``'s single runs."""
    mod = benchmark_module("identify_misses")
    for family, noise in (("drift", "ar1"), ("power", "binomial")):
        curves, params = mod.scenario_runs(3, family, noise, 5)
        bench = simulate_benchmark(3, families=[family], noises=[noise], runs_per_scenario=5)
        bench = bench[bench["role"] == "run"]
        np.testing.assert_array_equal(curves["reward"].to_numpy(), bench["reward"].to_numpy())
        np.testing.assert_array_equal(curves["compute"].to_numpy(), bench["compute"].to_numpy())
        truth = bench.groupby("run", sort=False)["true_ceiling"].first()
        np.testing.assert_allclose(params.set_index("run")["true_ceiling"].loc[truth.index], truth.to_numpy())
