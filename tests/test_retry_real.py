"""``benchmarks/retry_real.py``: which logs make its AMC and best-of-N sets (no fit)."""

from __future__ import annotations

import json

from conftest import benchmark_module

retry_real = benchmark_module("retry_real")


def test_mean4_folder_links_only_the_logs_whose_amc_metric_is_mean_at_4(tmp_path):
    data, into = tmp_path / "data", tmp_path / "into"
    data.mkdir()
    into.mkdir()
    rows = {
        "a.jsonl": {"step": 1, "val-core/AMC-Qwen-instruct/acc/mean@4": 0.3},
        "b.jsonl": {"step": 1, "val-core/AMC-Qwen-instruct/acc/mean@1": 0.3},
        "c.jsonl": {"step": 1, "val-core/AIME-Qwen-instruct/acc/mean@4": 0.1},
    }
    for name, row in rows.items():
        (data / name).write_text(json.dumps(row) + "\n")
    out = retry_real.mean4_folder(data, into)
    assert out == into
    links = sorted(p.name for p in into.iterdir())
    assert links == ["a.jsonl"]
    assert (into / "a.jsonl").is_symlink() and (into / "a.jsonl").resolve() == (data / "a.jsonl").resolve()
