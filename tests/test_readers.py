"""Readers of training logs: verl JSON lines, TensorBoard, W&B CSV exports, tidy tables.

Every format is written here the way its tool writes it (TensorBoard logs by tensorboardX's
real ``SummaryWriter``) and read back exactly. The public DAPO curves are read by path from
``BAYES_SCALERL_DAPO_DIR`` (default ``../shared/data/dapo-metrics`` beside the repository).
"""

from __future__ import annotations

import csv
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from bayes_scalerl.data import DataError, Runs
from bayes_scalerl.data.readers import (
    FORMATS,
    read_any,
    read_table,
    read_tensorboard,
    read_verl,
    read_wandb_csv,
)

REPO = Path(__file__).resolve().parents[1]
DAPO_DIR = Path(os.environ.get("BAYES_SCALERL_DAPO_DIR", REPO.parent / "shared" / "data" / "dapo-metrics"))
DAPO_METRIC = "val-core/math_dapo-Qwen-instruct/acc/mean@1"
needs_dapo = pytest.mark.skipif(
    not DAPO_DIR.is_dir(),
    reason=f"DAPO metric logs not found at {DAPO_DIR} (set BAYES_SCALERL_DAPO_DIR to their folder)",
)


def curves(runs: Runs) -> dict[tuple[str, str | None], pd.DataFrame]:
    """Rows of each curve keyed by (training run, task or None)."""
    t = runs.table
    base = t["training_run"] if "training_run" in t.columns else t["run"]
    task = t["task"] if "task" in t.columns else pd.Series(["<none>"] * len(t), index=t.index)
    out = {}
    for r, k in dict.fromkeys(zip(base, task, strict=True)):
        rows = t[(base == r) & (task == k)].reset_index(drop=True)
        out[(r, None if k == "<none>" else k)] = rows
    return out


def write_jsonl(path: Path, records: list[dict | str]) -> Path:
    lines = [r if isinstance(r, str) else json.dumps(r) for r in records]
    path.write_text("\n".join(lines) + "\n")
    return path


def verl_records(rewards, *, every=2, seconds_per_step=100.0, metric="val/acc", extra=None):
    """Flat verl lines: a training-only line every step, the metric every ``every`` steps."""
    out = []
    for step in range(0, every * (len(rewards) - 1) + 1):
        rec = {"train_global_steps": step, "accumulated_training_time": step * seconds_per_step, "loss": 1.0}
        if step % every == 0:
            rec[metric] = rewards[step // every]
            for k, v in (extra or {}).items():
                rec[k] = v[step // every]
        out.append(rec)
    return out


#: Compute option used where the test is about something else.
STEPS = {"gpu_hours_per_step": 1.0}


# ---------------------------------------------------------------------- verl: public DAPO runs
@needs_dapo
def test_dapo_runs_read_exactly_with_gpus():
    runs = read_verl(DAPO_DIR, metric=DAPO_METRIC, gpus=4)
    files = sorted(DAPO_DIR.glob("*.jsonl"))
    assert len(files) == 20
    assert runs.n_runs == 20
    assert sorted(runs.names) == sorted(f.stem for f in files)
    assert runs.notes == ()  # every line of these files has the metric
    t = runs.table
    for f in files:
        raw = [json.loads(line) for line in f.read_text().splitlines() if line.strip()]
        with_metric = [r for r in raw if DAPO_METRIC in r]
        g = t[t["run"] == f.stem].reset_index(drop=True)
        assert len(g) == len(with_metric)
        assert g["compute"].iloc[0] == 0.0 and g["step"].iloc[0] == 0
        assert g["step"].tolist() == [r["train_global_steps"] for r in with_metric]
        assert np.all(np.diff(g["compute"]) > 0)
    # spot check one line against the raw JSON, bit for bit
    f = DAPO_DIR / "7B-Math-GRPO-dataDAPO-N24.jsonl"
    rec = json.loads(f.read_text().splitlines()[5])
    row = t[(t["run"] == f.stem) & (t["step"] == rec["train_global_steps"])]
    assert len(row) == 1
    assert row["reward"].item() == rec[DAPO_METRIC]
    assert row["compute"].item() == rec["accumulated_training_time"] / 3600.0 * 4


@needs_dapo
def test_dapo_metric_list_and_glob_give_one_curve_per_task():
    metrics = ["val-core/MATH500-Qwen-instruct/acc/mean@1", "val-core/math_dapo-*/acc/mean@1"]
    runs = read_any(DAPO_DIR, metric=metrics, gpu_hours_per_step=0.5)
    t = runs.table
    assert set(t["task"]) == {"val-core/MATH500-Qwen-instruct/acc/mean@1", DAPO_METRIC}
    cs = curves(runs)
    assert len(cs) == 40 and runs.n_runs == 40
    for g in cs.values():
        assert g["compute"].tolist() == (g["step"] * 0.5).tolist()


# ---------------------------------------------------------------------- verl: written here
def test_verl_skips_training_only_lines_and_says_so(tmp_path):
    rewards = [0.1, 0.25, 0.3, 0.42]
    f = write_jsonl(tmp_path / "run-a.jsonl", verl_records(rewards, every=2))
    runs = read_verl(f, metric="val/acc", gpus=8)
    t = runs.table
    assert list(t.columns) == ["run", "compute", "reward", "step"]
    assert t["run"].unique().tolist() == ["run-a"]
    assert t["reward"].tolist() == rewards
    assert t["step"].tolist() == [0, 2, 4, 6]
    assert t["compute"].tolist() == [s * 100.0 / 3600.0 * 8 for s in (0, 2, 4, 6)]
    assert runs.notes == ("run 'run-a': 3 line(s) without metric 'val/acc' skipped.",)


def test_verl_steps_times_gpu_hours_and_run_name(tmp_path):
    f = write_jsonl(tmp_path / "x.jsonl", verl_records([0.2, 0.3, 0.4], every=5))
    runs = read_verl(f, metric="val/acc", gpu_hours_per_step=1.5, run_name="mine")
    assert runs.names == ["mine"]
    assert runs.table["compute"].tolist() == [0.0, 7.5, 15.0]


def test_verl_glob_gives_tasks_and_reports_metrics_missing_in_a_run(tmp_path):
    a = verl_records([0.1, 0.2, 0.3], metric="val/gsm8k/acc", extra={"val/math/acc": [0.5, 0.6, 0.7]})
    b = verl_records([0.15, 0.25, 0.35], metric="val/gsm8k/acc")
    write_jsonl(tmp_path / "a.jsonl", a)
    write_jsonl(tmp_path / "b.jsonl", b)
    runs = read_verl(tmp_path, metric="val/*/acc", gpu_hours_per_step=2.0)
    cs = curves(runs)
    assert set(cs) == {("a", "val/gsm8k/acc"), ("a", "val/math/acc"), ("b", "val/gsm8k/acc")}
    assert cs[("a", "val/math/acc")]["reward"].tolist() == [0.5, 0.6, 0.7]
    assert cs[("b", "val/gsm8k/acc")]["reward"].tolist() == [0.15, 0.25, 0.35]
    assert "metric 'val/math/acc' is logged in 1 of 2 runs and never in 'b'; no curve there." in runs.notes
    assert not any("'val/gsm8k/acc' is logged" in n for n in runs.notes)  # every run logs it
    # the same (run, compute) appears under two tasks: the key is (run, task, compute)
    assert cs[("a", "val/gsm8k/acc")]["compute"].tolist() == cs[("a", "val/math/acc")]["compute"].tolist()


def test_verl_one_metric_matched_by_glob_has_no_task_column(tmp_path):
    recs = verl_records([0.1, 0.2], metric="val/only/acc")
    recs[0]["val/comment"] = "text values are not metrics a glob picks"
    f = write_jsonl(tmp_path / "a.jsonl", recs)
    runs = read_verl(f, metric="val/*", gpus=1)
    assert "task" not in runs.table.columns
    assert runs.table["reward"].tolist() == [0.1, 0.2]


def test_verl_first_evaluation_after_step_0_is_noted(tmp_path):
    recs = [r for r in verl_records([0.1, 0.2, 0.3], every=2) if r["train_global_steps"] > 0]
    f = write_jsonl(tmp_path / "late.jsonl", recs)
    runs = read_verl(f, metric="val/acc", gpu_hours_per_step=1.0)
    assert runs.table["compute"].iloc[0] == 2.0
    assert any("first value of 'val/acc' is at step 2" in n and "sets R0" in n for n in runs.notes)


def test_verl_own_file_logger_format_sums_step_timer(tmp_path):
    # verl's `trainer.logger=[file]`: {"step": N, "data": {...}}, no accumulated time
    recs = [{"step": 0, "data": {"val-core/x/acc/mean@1": 0.2}}]
    for step in range(1, 5):
        data = {"timing_s/step": 60.0 * step, "actor/loss": 0.1}
        if step % 2 == 0:
            data["val-core/x/acc/mean@1"] = 0.2 + 0.1 * step
        recs.append({"step": step, "data": data})
    f = write_jsonl(tmp_path / "native.jsonl", recs)
    runs = read_verl(f, metric="val-core/x/acc/mean@1", gpus=2)
    t = runs.table
    assert t["step"].tolist() == [0, 2, 4]
    assert t["compute"].tolist() == [0.0, (60.0 + 120.0) / 3600.0 * 2, 600.0 / 3600.0 * 2]
    assert any("running sum of 'timing_s/step'" in n for n in runs.notes)
    assert "run 'native': 2 line(s) without metric 'val-core/x/acc/mean@1' skipped." in runs.notes


def test_verl_repeated_step_keeps_the_last_value_and_says_so(tmp_path):
    recs = verl_records([0.1, 0.2, 0.3], every=1)
    recs.append({"train_global_steps": 2, "accumulated_training_time": 200.0, "val/acc": 0.33})
    f = write_jsonl(tmp_path / "resumed.jsonl", recs)
    runs = read_verl(f, metric="val/acc", gpu_hours_per_step=1.0)
    assert runs.table["reward"].tolist() == [0.1, 0.2, 0.33]
    assert any(
        "replaced by the last one logged" in n and "e.g. step 2 (line 3, line 4)" in n for n in runs.notes
    )


@pytest.mark.parametrize(
    "records, options, words",
    [
        (
            ['{"train_global_steps": 0, "val/acc": 0.1}', '{"train_global_steps": 1, "val/acc": 0.'],
            STEPS,
            ["line 2", "not valid JSON"],
        ),
        (
            [{"train_global_steps": 0, "val/ac": 0.1}],
            STEPS,
            ["no metric matches", "'val/acc'", "Did you mean 'val/ac'"],
        ),
        ([{"train_global_steps": 0, "val/acc": 1.5}], STEPS, ["line 1", "outside [0, 1]"]),
        ([{"train_global_steps": 0, "val/acc": "NaN"}], STEPS, ["line 1", "not a number"]),
        ([{"train_global_steps": 0, "val/acc": None}], STEPS, ["line 1", "not a number"]),
        (['{"train_global_steps": 0, "val/acc": NaN}'], STEPS, ["line 1", "not a finite number"]),
        ([{"val/acc": 0.1}], STEPS, ["line 1", "no step"]),
        ([{"train_global_steps": 1.5, "val/acc": 0.1}], STEPS, ["line 1", "whole number"]),
        ([[1, 2]], STEPS, ["line 1", "JSON object"]),
        ([{"train_global_steps": 0, "val/acc": 0.1}], {"gpus": 4}, ["line 1", "'accumulated_training_time'"]),
        (
            [
                {"train_global_steps": 0, "accumulated_training_time": 0.0, "val/acc": 0.1},
                {"train_global_steps": 1, "accumulated_training_time": 50.0, "val/acc": 0.2},
                {"train_global_steps": 2, "accumulated_training_time": 10.0, "val/acc": 0.3},
            ],
            {"gpus": 4},
            ["line 3", "went back", "gpu_hours_per_step"],
        ),
        (
            [{"train_global_steps": 0, "val/acc": 0.1}],
            {"gpus": 4, "gpu_hours_per_step": 1.0},
            ["exactly one", "both"],
        ),
        (
            [{"train_global_steps": 0, "val/acc": 0.1}],
            {"gpu_hours_per_step": None},
            ["exactly one", "neither"],
        ),
        ([{"train_global_steps": 0, "val/acc": 0.1}], {"gpu_hours_per_step": -1.0}, ["positive"]),
        ([" "], STEPS, ["no metric lines"]),
    ],
)
def test_verl_bad_input_names_the_file_and_the_problem(tmp_path, records, options, words):
    f = write_jsonl(tmp_path / "bad.jsonl", records)
    with pytest.raises(DataError) as exc:
        read_verl(f, metric="val/acc", **options)
    msg = str(exc.value)
    assert str(f) in msg, msg
    for w in words:
        assert w in msg, (w, msg)


def test_verl_folder_errors(tmp_path):
    with pytest.raises(DataError, match="no .jsonl files"):
        read_verl(tmp_path, metric="m", gpus=1)
    write_jsonl(tmp_path / "a.jsonl", verl_records([0.1, 0.2]))
    with pytest.raises(DataError, match="run_name applies to a single file"):
        read_verl(tmp_path, metric="val/acc", gpus=1, run_name="x")
    with pytest.raises(DataError, match="no such file"):
        read_verl(tmp_path / "nope.jsonl", metric="val/acc", gpus=1)
    # a metric missing from one file of a folder names that file
    write_jsonl(tmp_path / "b.jsonl", verl_records([0.1, 0.2], metric="val/other"))
    with pytest.raises(DataError) as exc:
        read_verl(tmp_path, metric="val/acc", gpus=1)
    assert str(tmp_path / "b.jsonl") in str(exc.value)


# ---------------------------------------------------------------------- TensorBoard
def write_tb(
    logdir: Path, run: str, series: dict[str, list[tuple[int, float, float]]], suffix: str = ""
) -> None:
    """Log scalars with tensorboardX; ``suffix`` keeps a second writer in the same second from
    overwriting the first file (real restarts get new time-stamped names)."""
    from tensorboardX import SummaryWriter

    with SummaryWriter(str(logdir / run), filename_suffix=suffix) as w:
        for tag, points in series.items():
            for step, value, wall in points:
                w.add_scalar(tag, value, global_step=step, walltime=wall)


def f32(x: float) -> float:
    """TensorBoard stores scalars as float32."""
    return float(np.float32(x))


def test_tensorboard_round_trip_steps_and_wall_time(tmp_path):
    t0 = 1.7e9
    a = [(0, 0.11, t0), (10, 0.2371, t0 + 1800.0), (20, 0.30517578125, t0 + 3600.5)]
    b = [(0, 0.05, t0 + 7.0), (10, 0.5, t0 + 907.0)]
    write_tb(tmp_path, "runA", {"eval/acc": a, "train/loss": [(1, 3.0, t0 + 1.0)]})
    write_tb(tmp_path, "group/runB", {"eval/acc": b})

    runs = read_tensorboard(tmp_path, tag="eval/acc", gpu_hours_per_step=0.25)
    assert runs.names == ["group/runB", "runA"]
    cs = curves(runs)
    ga = cs[("runA", None)]
    assert ga["reward"].tolist() == [f32(v) for _, v, _ in a]
    assert ga["step"].tolist() == [0, 10, 20]
    assert ga["compute"].tolist() == [0.0, 2.5, 5.0]
    assert runs.notes == ()

    runs = read_tensorboard(tmp_path, tag="eval/acc", compute="wall_time", gpus=8)
    cs = curves(runs)
    assert cs[("runA", None)]["compute"].tolist() == [(w - t0) / 3600.0 * 8 for _, _, w in a]
    assert cs[("group/runB", None)]["compute"].tolist() == [(w - (t0 + 7.0)) / 3600.0 * 8 for _, _, w in b]

    assert read_any(tmp_path, tag="eval/acc", gpu_hours_per_step=0.25).table.equals(
        read_tensorboard(tmp_path, tag="eval/acc", gpu_hours_per_step=0.25).table
    )


def test_tensorboard_restart_glob_and_missing_step_0(tmp_path):
    t0 = 1.7e9
    write_tb(tmp_path, "r", {"eval/a": [(0, 0.1, t0), (5, 0.2, t0 + 10)], "eval/b": [(0, 0.5, t0)]})
    write_tb(tmp_path, "r", {"eval/a": [(5, 0.25, t0 + 20), (10, 0.3, t0 + 30)]}, suffix=".2")  # a restart
    runs = read_tensorboard(tmp_path, tag="eval/*", gpu_hours_per_step=1.0)
    cs = curves(runs)
    assert cs[("r", "eval/a")]["reward"].tolist() == [f32(0.1), f32(0.25), f32(0.3)]
    assert cs[("r", "eval/b")]["reward"].tolist() == [0.5]
    assert cs[("r", "eval/a")]["step"].tolist() == [0, 5, 10]
    assert any("replaced by the last one logged" in n for n in runs.notes)

    # no step-0 value: wall time counts from the writer's first event (written when it opened)
    now = time.time()
    write_tb(tmp_path / "late", "s", {"eval/a": [(5, 0.2, now + 10.0), (10, 0.3, now + 20.0)]})
    runs = read_tensorboard(tmp_path / "late", tag="eval/a", compute="wall_time", gpus=2)
    assert any("'eval/a' has no step-0 value" in n for n in runs.notes)
    c = runs.table["compute"].to_numpy()
    assert 5.0 / 3600 * 2 < c[0] <= 10.0 / 3600 * 2  # the writer opened within 5 s after `now`
    assert c[1] - c[0] == pytest.approx(10.0 / 3600 * 2, rel=1e-6)


def test_tensorboard_errors(tmp_path, monkeypatch):
    from tensorboardX import SummaryWriter

    with SummaryWriter(str(tmp_path / "r")) as w:
        w.add_scalar("eval/acc", 0.5, 0)
        w.add_histogram("eval/hist", np.arange(10.0), 0)
        w.add_scalar("eval/big", 2.0, 0)
    for tag, words in [
        ("eval/ac", ["no scalar tag matches", "Did you mean 'eval/acc'"]),
        ("eval/hist", ["'histograms'", "not scalars"]),
        ("eval/big", ["outside [0, 1]", "step 0"]),
    ]:
        with pytest.raises(DataError) as exc:
            read_tensorboard(tmp_path, tag=tag, gpu_hours_per_step=1.0)
        assert str(tmp_path / "r") in str(exc.value)
        for word in words:
            assert word in str(exc.value), (word, str(exc.value))
    with pytest.raises(DataError, match="needs gpus"):
        read_tensorboard(tmp_path, tag="eval/acc", compute="wall_time", gpu_hours_per_step=1.0)
    with pytest.raises(DataError, match="no TensorBoard event files"):
        read_tensorboard(_empty(tmp_path), tag="x", gpus=1)
    for name in [m for m in sys.modules if m == "tensorboard" or m.startswith("tensorboard.")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, "tensorboard", None)
    with pytest.raises(ImportError, match=r"pip install 'bayes_scalerl\[tensorboard\]'"):
        read_tensorboard(tmp_path, tag="eval/acc", gpus=1)


def _empty(tmp_path: Path) -> Path:
    d = tmp_path / "empty"
    d.mkdir()
    return d


# ---------------------------------------------------------------------- W&B CSV exports
def write_csv(path: Path, header: list[str], rows: list[list]) -> Path:
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        w.writerows([["" if v is None else v for v in row] for row in rows])
    return path


def test_wandb_chart_export_round_trip(tmp_path, rng):
    steps = [0, 20, 40, 60]
    va = rng.uniform(0, 1, 4).tolist()
    vb = [0.1, None, 0.35, None]  # not logged at steps 20 and 60
    runs_ = {"dapo-7b": va, "grpo - baseline": vb}  # a run name holding " - "
    header = ["Step"]
    for r in runs_:
        header += [f"{r} - eval/acc", f"{r} - eval/acc__MIN", f"{r} - eval/acc__MAX"]
    rows = [[s] + [x for r in runs_ for x in (runs_[r][i],) * 3] for i, s in enumerate(steps)]
    f = write_csv(tmp_path / "chart.csv", header, rows)

    runs = read_wandb_csv(f, metric="eval/acc", gpu_hours_per_step=2.0)
    assert runs.names == ["dapo-7b", "grpo - baseline"]
    cs = curves(runs)
    assert cs[("dapo-7b", None)]["reward"].tolist() == va
    assert cs[("dapo-7b", None)]["compute"].tolist() == [0.0, 40.0, 80.0, 120.0]
    assert cs[("grpo - baseline", None)]["reward"].tolist() == [0.1, 0.35]
    assert cs[("grpo - baseline", None)]["step"].tolist() == [0, 40]
    assert runs.notes == ("run 'grpo - baseline': 2 empty cell(s) of 'eval/acc' skipped.",)
    assert read_any(f, format="auto", metric="eval/acc", gpu_hours_per_step=2.0).table.equals(runs.table)


def test_wandb_chart_export_two_metrics_and_errors(tmp_path):
    header = [
        "Step",
        "a - val/x",
        "a - val/x__MIN",
        "a - val/x__MAX",
        "a - val/y",
        "a - val/y__MIN",
        "a - val/y__MAX",
    ]
    f = write_csv(
        tmp_path / "two.csv", header, [[0, 0.1, 0.1, 0.1, 0.5, 0.5, 0.5], [5, 0.2, 0.2, 0.2, 0.6, 0.6, 0.6]]
    )
    cs = curves(read_wandb_csv(f, metric="val/*", gpu_hours_per_step=1.0))
    assert cs[("a", "val/y")]["reward"].tolist() == [0.5, 0.6]
    for options, words in [
        ({"metric": "val/z", "gpu_hours_per_step": 1.0}, ["no metric matches", "'val/z'"]),
        ({"metric": "val/x", "gpus": 4}, ["'Step' counts training steps", "gpu_hours_per_step"]),
        ({"metric": "val/x", "gpu_hours_per_step": 1.0, "compute_col": "Time"}, ["no x column 'Time'"]),
        ({"metric": "val/x", "gpu_hours_per_step": 1.0, "run_name": "r"}, ["run_name applies"]),
    ]:
        with pytest.raises(DataError) as exc:
            read_wandb_csv(f, **options)
        assert str(f) in str(exc.value)
        for w in words:
            assert w in str(exc.value), (w, str(exc.value))
    g = write_csv(tmp_path / "nan.csv", ["Step", "a - val/x"], [[0, 0.1], [5, "NaN"]])
    with pytest.raises(DataError, match=r"row 3: column 'a - val/x' has value 'NaN'"):
        read_wandb_csv(g, metric="val/x", gpu_hours_per_step=1.0)


def test_wandb_run_history_round_trip(tmp_path, rng):
    n = 7
    steps = list(range(n))
    runtime = np.cumsum(rng.uniform(50, 70, n)).tolist()
    runtime[0] = 0.0
    acc = [v if i % 3 == 0 else None for i, v in enumerate(rng.uniform(0, 1, n).tolist())]
    loss = rng.uniform(1, 2, n).tolist()
    rows = [[steps[i], runtime[i], 1.7e9 + runtime[i], loss[i], acc[i]] for i in range(n)]
    f = write_csv(tmp_path / "run-42.csv", ["_step", "_runtime", "_timestamp", "train/loss", "val/acc"], rows)

    runs = read_wandb_csv(f, metric="val/acc", gpus=4)
    t = runs.table
    keep = [i for i in range(n) if acc[i] is not None]
    assert runs.names == ["run-42"]
    assert t["reward"].tolist() == [acc[i] for i in keep]
    assert t["step"].tolist() == keep
    assert t["compute"].tolist() == [runtime[i] / 3600.0 * 4 for i in keep]
    assert runs.notes == ("run 'run-42': 4 empty cell(s) of 'val/acc' skipped.",)

    runs = read_any(f, metric="val/acc", gpu_hours_per_step=0.5, run_name="renamed")
    assert runs.names == ["renamed"]
    assert runs.table["compute"].tolist() == [0.5 * i for i in keep]

    # a matched metric with no value at all gets no curve, and a note says so
    g = write_csv(
        tmp_path / "h.csv",
        ["_step", "_runtime", "val/a", "val/b"],
        [[0, 0.0, 0.5, None], [1, 9.0, 0.6, None]],
    )
    runs = read_wandb_csv(g, metric=["val/a", "val/b"], gpus=1)
    assert "task" not in runs.table.columns and runs.table["reward"].tolist() == [0.5, 0.6]
    assert runs.notes == (
        "run 'h': 2 empty cell(s) of 'val/b' skipped.",
        "run 'h': no values of 'val/b'; no curve.",
    )


# ---------------------------------------------------------------------- tidy tables
def test_table_column_mapping_csv_and_parquet(tmp_path):
    df = pd.DataFrame(
        {
            "name": ["a"] * 3 + ["b"] * 3,
            "gpu_h": [0.0, 10.0, 20.0] * 2,
            "acc": [0.1, 0.2, 0.3, 0.15, 0.25, 0.35],
            "algo": ["dapo"] * 3 + ["grpo"] * 3,
            "extra": range(6),
        }
    )
    mapping = dict(run_col="name", compute_col="gpu_h", reward_col="acc", recipe_col="algo")
    for f in (tmp_path / "t.csv", tmp_path / "t.parquet"):
        df.to_csv(f, index=False) if f.suffix == ".csv" else df.to_parquet(f)
        runs = read_table(f, **mapping)
        t = runs.table
        assert list(t.columns) == ["extra", "run", "compute", "reward", "recipe"]
        assert t["reward"].tolist() == df["acc"].tolist()
        assert runs.run_attribute("recipe") == ["dapo", "grpo"]
        assert read_any(f, format="table", **mapping).table.equals(t)


def test_table_errors_list_the_columns(tmp_path):
    f = tmp_path / "t.csv"
    pd.DataFrame({"name": ["a"], "run": ["x"], "gpu_h": [0.0], "acc": [0.1]}).to_csv(f, index=False)
    with pytest.raises(DataError) as exc:
        read_table(f, run_col="nmae", compute_col="gpu_h", reward_col="acc")
    msg = str(exc.value)
    assert str(f) in msg and "'nmae' (for run)" in msg and "found 'name', 'run', 'gpu_h', 'acc'" in msg
    with pytest.raises(DataError, match="would replace the file's own column 'run'"):
        read_table(f, run_col="name", compute_col="gpu_h", reward_col="acc")
    with pytest.raises(DataError, match="unknown file type '.xlsx'"):
        (tmp_path / "t.xlsx").write_text("x")
        read_table(tmp_path / "t.xlsx")


# ---------------------------------------------------------------------- read_any dispatch
def test_read_any_detects_and_refuses_to_guess(tmp_path):
    assert FORMATS == ("auto", "table", "verl", "tensorboard", "wandb")
    (tmp_path / "v").mkdir()
    f = write_jsonl(tmp_path / "v" / "a.jsonl", verl_records([0.1, 0.2]))
    assert read_any(f, metric="val/acc", gpus=1).names == ["a"]
    assert read_any(tmp_path / "v", metric="val/acc", gpus=1, tag=None).names == ["a"]
    table = tmp_path / "t.csv"
    pd.DataFrame({"run": ["a", "a"], "compute": [0, 1], "reward": [0.1, 0.2]}).to_csv(table, index=False)
    assert read_any(table).n_runs == 1

    write_tb(tmp_path / "v", "tb", {"x": [(0, 0.1, None)]})
    cases = [
        (tmp_path / "v", {}, ["cannot tell the format", "format='verl'"]),
        (tmp_path / "nothing", {}, ["no such file"]),
        (tmp_path / "v" / "a.jsonl", {"format": "json"}, ["unknown format 'json'", "'wandb'"]),
        (
            tmp_path / "v" / "a.jsonl",
            {"metric": "val/acc", "gpus": 1, "tag": "x"},
            ["'tag'", "format 'verl'"],
        ),
        (tmp_path / "v" / "a.jsonl", {"gpus": 1}, ["format 'verl' needs", "'metric'"]),
        (table, {"metric": "m"}, ["'metric'", "format 'table'"]),
    ]
    (tmp_path / "x.json").write_text("{}")
    cases.append((tmp_path / "x.json", {}, ["cannot tell the format", "'.json'"]))
    (tmp_path / "blank").mkdir()
    cases.append((tmp_path / "blank", {}, ["cannot tell the format", "no .jsonl files"]))
    for path, options, words in cases:
        with pytest.raises(DataError) as exc:
            read_any(path, **options)
        msg = str(exc.value)
        assert str(path) in msg, msg
        for w in words:
            assert w in msg, (w, msg)


def test_a_metric_missing_in_many_runs_gives_one_note():
    # a glob matching mean@4 in some logs and mean@16 in others: one note per metric, not per run
    from bayes_scalerl.data.readers import _missing_notes

    runs = [(f"r{i}", ["m@16"] if i < 2 else ["m@4"]) for i in range(9)]
    notes = _missing_notes("tag", ["m@16", "m@4"], runs)
    assert notes == [
        "tag 'm@16' is logged in 2 of 9 runs and never in 'r2', 'r3', 'r4', 'r5', 'r6' and 2 more; "
        "no curve there.",
        "tag 'm@4' is logged in 7 of 9 runs and never in 'r0', 'r1'; no curve there.",
    ]
    assert _missing_notes("metric", ["m@4"], [("a", ["m@4"])]) == []
