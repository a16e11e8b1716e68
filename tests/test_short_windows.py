"""``benchmarks/short_windows.py``: the band scored on runs with their own refit and on the rest."""

from __future__ import annotations

import types

import numpy as np
import pandas as pd
import pytest
from conftest import benchmark_module


def test_split_scores_score_each_group_of_runs_on_its_own_points():
    mod = benchmark_module("short_windows")
    points = pd.DataFrame(
        {
            "method": ["bayes"] * 6 + ["gaussian"] * 2,
            "run": ["a", "a", "b", "c", "c", "c", "a", "b"],
            "covered90": [True, False, True, True, True, False, False, False],
            "crps": [0.01, 0.03, 0.02, 0.01, 0.01, 0.04, 1.0, 1.0],
        }
    )
    own = pd.Series({"a": True, "b": False, "c": True})
    got = mod.split_scores(types.SimpleNamespace(points=points), own).set_index("runs")
    assert got.loc["all", "n_points"] == 6 and got.loc["all", "coverage90"] == pytest.approx(4 / 6)
    assert got.loc["own refit", "n_runs"] == 2 and got.loc["own refit", "coverage90"] == pytest.approx(3 / 5)
    assert got.loc["own refit", "crps"] == pytest.approx(np.mean([0.01, 0.03, 0.01, 0.01, 0.04]))
    assert got.loc["batch's scales", "n_points"] == 1 and got.loc["batch's scales", "crps"] == pytest.approx(
        0.02
    )
