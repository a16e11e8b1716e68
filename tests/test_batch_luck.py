"""The scripts behind ``benchmarks/results/batch-luck.md``: two seeds' cells set side by side,
and one scenario's noise drawn again around its truth."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from conftest import benchmark_module

import bayes_scalerl as bs

_HEADER = (
    "| scenario | horizon | method | n_runs | n_points | coverage50 | coverage90 | coverage90_se "
    "| x | x | x | x |"
)


def _results_file(path, cells):
    rows = "\n".join(
        f"| {s} | {h} | m | 48 | 1000 | 0.5 | {c} | {se} | 0 | 0 | 0 | 0 |" for s, h, c, se in cells
    )
    path.write_text(f"# t\n\n## Every scenario\n\n{_HEADER}\n|---|\n{rows}\n\n## Fit times\n\n| 2x | m |\n")
    return str(path)


def test_two_seeds_reads_both_tables_and_judges_the_mean(tmp_path, capsys):
    mod = benchmark_module("two_seeds")
    a = _results_file(tmp_path / "a.md", [("s/iid", "2x", 0.90, 0.02), ("w/iid", "2x", 0.99, 0.005)])
    a4 = _results_file(tmp_path / "a4.md", [("s/iid", "4x", 0.80, 0.01)])
    b = _results_file(
        tmp_path / "b.md",
        [
            ("s/iid", "2x", 0.86, 0.02),
            ("w/iid", "2x", 0.97, 0.005),
            ("s/iid", "4x", 0.78, 0.01),
            ("x/iid", "2x", 0.9, 0.01),
        ],
    )
    m = mod.main([a, a4, "--against", b])
    assert len(m) == 3  # x/iid is in one seed only
    row = m.set_index(["scenario", "horizon"])
    s2 = row.loc[("s/iid", "2x")]
    assert s2["both"] == pytest.approx(0.88) and s2["verdict"] == "inside"
    assert s2["z"] == pytest.approx(0.04 / np.hypot(0.02, 0.02))
    assert row.loc[("w/iid", "2x"), "verdict"] == "too wide"  # 0.98 - 2 * 0.0035 > 0.95
    assert row.loc[("s/iid", "4x"), "verdict"] == "too narrow"  # 0.79 + 2 * 0.007 < 0.85
    out = capsys.readouterr().out
    assert "| 2x | 2 | 1 | 1 | 0 |" in out and "| 4x | 1 | 0 | 0 | 1 |" in out
    (tmp_path / "empty.md").write_text("# x\n")
    with pytest.raises(ValueError, match="no '## Every scenario' table"):
        mod.scenario_rows(str(tmp_path / "empty.md"))


def test_noise_redraws_keep_the_truth_and_the_noise_scale():
    mod = benchmark_module("noise_redraws")
    n = 20000
    data = pd.DataFrame({"mu": np.full(n, 0.4), "noise_sd": 0.01, "n_eval": 1000.0})
    rng = np.random.default_rng(0)
    iid = mod.redraw(data, "iid", rng)
    binom = mod.redraw(data, "binomial", rng)
    # Monte Carlo error of a mean of n draws: sd / sqrt(n) = 7e-5 (iid), 1.1e-4 (binomial); 5 se
    assert abs(iid.mean() - 0.4) < 5 * 0.01 / np.sqrt(n)
    assert abs(binom.mean() - 0.4) < 5 * np.sqrt(0.24 / 1000) / np.sqrt(n)
    # the sd of the sample sd of n normal draws is about sd / sqrt(2 n) (0.5%); 5 of it
    assert iid.std() == pytest.approx(0.01, rel=5 / np.sqrt(2 * n))
    assert binom.std() == pytest.approx(np.sqrt(0.24 / 1000), rel=5 / np.sqrt(2 * n))
    assert np.allclose(binom * 1000, np.round(binom * 1000))  # counts out of n_eval
    with pytest.raises(ValueError, match="iid or binomial"):
        mod.redraw(data, "ar1", rng)


def test_dapo_batches_keeps_training_runs_whole_and_pools_by_curve():
    mod = benchmark_module("dapo_batches")
    # five training runs of 2, 3, 2, 2 and 1 curves
    sizes = {"t0": 2, "t1": 3, "t2": 2, "t3": 2, "t4": 1}
    rows = []
    for t, k in sizes.items():
        for j in range(k):
            for i, c in enumerate((0.0, 10.0, 20.0, 40.0, 80.0)):
                rows.append({"run": f"{t}:m{j}", "training_run": t, "compute": c, "reward": 0.3 + 0.01 * i})
    runs = bs.Runs.from_frame(pd.DataFrame(rows), source="<test>")
    groups = mod.batches_of(runs, 4)
    assert groups == [
        ["t0:m0", "t0:m1", "t1:m0", "t1:m1", "t1:m2"],
        ["t2:m0", "t2:m1", "t3:m0", "t3:m1", "t4:m0"],
    ]
    assert mod.batches_of(runs, 100) == [list(runs.names)]  # fewer curves than a batch: one
    with pytest.raises(ValueError, match="at least 2"):
        mod.batches_of(runs, 1)
    # pooled coverage over points, its error clustered by curve: two curves all in / all out
    pts = pd.DataFrame(
        {
            "method": ["bayes"] * 20 + ["gaussian"] * 2,
            "run": ["a"] * 10 + ["b"] * 10 + ["a", "b"],
            "covered90": [True] * 10 + [False] * 10 + [True, True],
            "covered50": [False] * 22,
            "q05": 0.0,
            "q95": 0.1,
            "crps": 0.01,
        }
    )
    p = mod.pooled(pts).set_index("method")
    assert p.loc["bayes", "coverage90"] == pytest.approx(0.5)
    assert p.loc["bayes", "coverage90_se"] == pytest.approx(0.5)  # 2 clusters, not 20 points
    assert p.loc["gaussian", "coverage90"] == 1.0 and p.loc["gaussian", "n_points"] == 2
