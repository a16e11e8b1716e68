"""``benchmarks/ceiling_coverage.py``: its summary counts (no fit)."""

from __future__ import annotations

import numpy as np
import pandas as pd
from conftest import benchmark_module


def test_summary_counts_coverage_sides_and_wrong_calls():
    """Five runs: two below, one above, two inside; three called identified, two of them wrongly."""
    mod = benchmark_module("ceiling_coverage")
    rows = pd.DataFrame(
        {
            "family": ["drift"] * 5,
            "a_width90": [0.05, 0.08, 0.30, 0.09, 0.40],
            "a_identified": [True, True, False, True, False],
            "converged": [True, True, True, False, True],
            "below": [True, True, False, False, False],
            "above": [False, False, True, False, False],
        }
    )
    got = mod.summarise(rows, ["family"]).iloc[0]
    assert got["runs"] == 5 and got["identified"] == 3 and got["wrong"] == 2
    np.testing.assert_allclose(
        got[["limit_in_90", "below", "above", "median_width90", "converged"]].to_numpy(float),
        [0.4, 0.4, 0.2, 0.09, 0.8],
    )
