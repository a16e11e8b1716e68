"""Readers that turn training logs into validated :class:`~bayes_scalerl.data.runs.Runs`.

Four input formats, one function each, and :func:`read_any` to choose among them:

- :func:`read_verl`: verl-style metric JSON lines, one file per run (a ``.jsonl`` file
  or a folder of them).
- :func:`read_tensorboard`: a TensorBoard log directory, one sub-directory per run
  (needs the optional ``tensorboard`` package: ``pip install bayes_scalerl[tensorboard]``).
- :func:`read_wandb_csv`: a Weights & Biases CSV export, either a chart export (columns
  ``Step``, ``<run> - <metric>``, ``<run> - <metric>__MIN``, ``<run> - <metric>__MAX``)
  or one run's history (columns ``_step``, ``_runtime``, ``_timestamp`` and metrics).
- :func:`read_table`: a tidy CSV or Parquet table with a column mapping.

Training logs count steps or seconds, not GPU-hours; every log reader takes exactly one
of ``gpus`` (GPU-hours = seconds / 3600 * gpus) or ``gpu_hours_per_step``
(GPU-hours = step * gpu_hours_per_step). Metric (or tag) names may be exact names,
:mod:`fnmatch` patterns or a list of them; when several metrics match, each becomes its
own curve and the table gets a ``task`` column holding the metric name.

Bad input raises :class:`~bayes_scalerl.data.runs.DataError` naming the file, the line or row
and what is wrong. Nothing is dropped silently: every line, cell or event left out is
counted in :attr:`Runs.notes <bayes_scalerl.data.runs.Runs>`, one readable sentence each.
"""

from __future__ import annotations

import difflib
import inspect
import json
import math
import os
from collections.abc import Callable, Sequence
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from .runs import DataError, Runs

__all__ = ["FORMATS", "read_any", "read_table", "read_tensorboard", "read_verl", "read_wandb_csv"]

#: Values accepted by :func:`read_any`'s ``format``.
FORMATS = ("auto", "table", "verl", "tensorboard", "wandb")

#: Keys that hold the training step in a verl metric line, in order of preference.
_VERL_STEP_KEYS = ("train_global_steps", "training/global_step", "global_step", "step")
#: Key that holds the wall-clock seconds of training so far.
_VERL_TIME_KEY = "accumulated_training_time"
#: verl's per-step timer (seconds), summed when the accumulated time is not logged.
_VERL_STEP_TIMER = "timing_s/step"
_WANDB_HISTORY_KEYS = ("_step", "_runtime", "_timestamp")
_WANDB_SEP = " - "
_TFEVENTS = "tfevents"

MetricSpec = str | Sequence[str]


# ---------------------------------------------------------------------- shared helpers
class _Point(NamedTuple):
    step: float | None
    compute: float
    reward: float
    where: str


class _Compute(NamedTuple):
    """How to turn a step count or seconds into GPU-hours."""

    unit: str  # "steps" or "seconds"
    factor: float  # gpu_hours_per_step, or gpus

    def __call__(self, x: float) -> float:
        return x * self.factor if self.unit == "steps" else x / 3600.0 * self.factor


def _positive(where: str, name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise DataError(f"{where}: {name} must be a positive number, got {value!r}.")
    if not (math.isfinite(float(value)) and float(value) > 0):
        raise DataError(f"{where}: {name} must be a positive finite number, got {value!r}.")
    return float(value)


def _compute_rule(where: str, gpus: float | None, gpu_hours_per_step: float | None) -> _Compute:
    if (gpus is None) == (gpu_hours_per_step is None):
        given = "both were given" if gpus is not None else "neither was given"
        raise DataError(
            f"{where}: give exactly one of gpus (compute = training seconds / 3600 * gpus) or "
            f"gpu_hours_per_step (compute = step * gpu_hours_per_step); {given}."
        )
    if gpus is not None:
        return _Compute("seconds", _positive(where, "gpus", gpus))
    return _Compute("steps", _positive(where, "gpu_hours_per_step", gpu_hours_per_step))


def _patterns(where: str, metric: MetricSpec, what: str = "metric") -> list[str]:
    items = [metric] if isinstance(metric, str) else list(metric)
    if not items or not all(isinstance(p, str) and p for p in items):
        raise DataError(f"{where}: {what} must be a name, a glob pattern or a list of them, got {metric!r}.")
    return items


def _is_glob(pattern: str) -> bool:
    return any(ch in pattern for ch in "*?[")


def _describe_missing(pattern: str, names: Sequence[str], what: str = "metric") -> str:
    close = difflib.get_close_matches(pattern, list(names), n=3, cutoff=0.6)
    hint = f" Did you mean {', '.join(map(repr, close))}?" if close else ""
    shown = ", ".join(map(repr, names[:30]))
    more = f" and {len(names) - 30} more" if len(names) > 30 else ""
    kind = "pattern" if _is_glob(pattern) else "name"
    return f"no {what} matches the {kind} {pattern!r}.{hint} Found {len(names)}: {shown}{more}."


def _match(
    where: str,
    patterns: Sequence[str],
    names: Sequence[str],
    what: str = "metric",
    glob_names: Sequence[str] | None = None,
) -> list[str]:
    """Names matched by the patterns, in pattern order then name order; each pattern must match.

    Glob patterns search ``glob_names`` (default ``names``), exact names search ``names``.
    """
    matched: list[str] = []
    for pattern in patterns:
        pool = glob_names if (glob_names is not None and _is_glob(pattern)) else names
        hits = [n for n in pool if fnmatchcase(n, pattern)]
        if not hits:
            raise DataError(f"{where}: {_describe_missing(pattern, names, what)}")
        matched.extend(h for h in hits if h not in matched)
    return matched


def _reward(where: str, metric: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise DataError(f"{where}: {metric!r} has value {value!r}, not a number.")
    value = float(value)
    if not math.isfinite(value):
        raise DataError(f"{where}: {metric!r} has value {value!r}, not a finite number.")
    if not 0.0 <= value <= 1.0:
        raise DataError(f"{where}: {metric!r} has value {value!r}, outside [0, 1] (rewards are pass rates).")
    return value


def _curve(source: str, run: str, metric: str, points: list[_Point], notes: list[str]) -> list[_Point]:
    """Keep the last value logged at each step, sort, check compute increases; note what was done."""
    if not points:
        return points
    by_key: dict[float, list[_Point]] = {}
    for p in points:
        by_key.setdefault(p.step if p.step is not None else p.compute, []).append(p)
    repeated = {k: v for k, v in by_key.items() if len(v) > 1}
    if repeated:
        label = "step" if points[0].step is not None else "compute"
        k, v = next(iter(repeated.items()))
        example = f"{label} {k:g} ({', '.join(p.where for p in v)})"
        notes.append(
            f"run {run!r}: {sum(len(v) - 1 for v in repeated.values())} earlier value(s) of {metric!r} "
            f"at {len(repeated)} repeated {label}(s) replaced by the last one logged (a resumed run?), "
            f"e.g. {example}."
        )
    kept = sorted((v[-1] for v in by_key.values()), key=lambda p: p.step if p.step is not None else p.compute)
    for prev, cur in zip(kept, kept[1:], strict=False):
        if cur.compute <= prev.compute:
            raise DataError(
                f"{source}, {cur.where}: run {run!r}, {metric!r}: compute {cur.compute!r} at {_at(cur)} "
                f"is not above {prev.compute!r} at {_at(prev)} ({prev.where}); the training clock went "
                "back (a restarted run?). Count compute in steps with gpu_hours_per_step instead."
            )
    first = kept[0]
    if first.step is not None and first.step != 0:
        notes.append(
            f"run {run!r}: the first value of {metric!r} is at step {first.step:g} (compute "
            f"{first.compute:g}), not at step 0 (before training); it sets R0."
        )
    return kept


def _at(p: _Point) -> str:
    return f"step {p.step:g}" if p.step is not None else f"compute {p.compute:g}"


def _frame(curves: list[tuple[str, str, list[_Point]]], tasks: bool) -> pd.DataFrame:
    rows: dict[str, list] = {"run": [], "compute": [], "reward": [], "step": []}
    if tasks:
        rows["task"] = []
    for run, metric, points in curves:
        for p in points:
            rows["run"].append(run)
            rows["compute"].append(p.compute)
            rows["reward"].append(p.reward)
            rows["step"].append(np.nan if p.step is None else p.step)
            if tasks:
                rows["task"].append(metric)
    frame = pd.DataFrame(rows)
    if frame["step"].isna().all():
        frame = frame.drop(columns="step")
    elif frame["step"].notna().all():
        frame["step"] = frame["step"].astype("int64")
    order = ["run", "task", "compute", "reward", "step"]
    return frame[[c for c in order if c in frame.columns]]


def _finish(source: str, curves: list[tuple[str, str, list[_Point]]], notes: list[str]) -> Runs:
    for run, metric, points in curves:
        if not points:
            notes.append(f"run {run!r}: no values of {metric!r}; no curve.")
    curves = [c for c in curves if c[2]]
    if not curves:
        raise DataError(f"{source}: no values of the requested metric(s) were found.")
    tasks = len({metric for _, metric, _ in curves}) > 1
    return Runs.from_frame(_frame(curves, tasks), source=source, notes=tuple(notes))


def _step_value(where: str, key: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise DataError(f"{where}: step {key!r} has value {value!r}, not a number.")
    value = float(value)
    if not (math.isfinite(value) and value >= 0 and value == round(value)):
        raise DataError(f"{where}: step {key!r} has value {value!r}, not a whole number >= 0.")
    return value


# ---------------------------------------------------------------------- verl
class _VerlLine(NamedTuple):
    lineno: int
    step: float | None
    seconds: float | None
    fields: dict


def _parse_verl_file(file: Path) -> tuple[list[_VerlLine], bool, dict[str, bool]]:
    """Parse one verl metric file.

    Returns its lines, whether the seconds are a running sum of the step timer, and the
    metric names (mapped to whether any value of theirs is a number).
    """
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"{file}: could not be read ({type(exc).__name__}: {exc}).") from exc
    parsed: list[tuple[int, float | None, float | None, float, dict]] = []
    names: dict[str, bool] = {}  # metric name -> has a numeric value somewhere
    summed = 0.0
    any_timer = False
    for lineno, raw in enumerate(text.splitlines(), 1):
        if not raw.strip():
            continue
        where = f"{file}, line {lineno}"
        try:
            obj = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise DataError(f"{where}: not valid JSON ({exc.msg} at column {exc.colno}).") from exc
        if not isinstance(obj, dict):
            raise DataError(f"{where}: expected a JSON object, got {type(obj).__name__}.")
        if isinstance(obj.get("data"), dict) and "step" in obj:
            # verl's own file logger: {"step": N, "data": {metric: value, ...}}
            fields, step_key, step_raw = obj["data"], "step", obj["step"]
        else:
            fields = obj
            step_key = next((k for k in _VERL_STEP_KEYS if k in obj), None)
            step_raw = obj.get(step_key) if step_key else None
        step = None if step_key is None else _step_value(where, step_key, step_raw)
        seconds = _seconds(where, fields[_VERL_TIME_KEY]) if _VERL_TIME_KEY in fields else None
        if _VERL_STEP_TIMER in fields:
            any_timer = True
            summed += _seconds(where, fields[_VERL_STEP_TIMER], key=_VERL_STEP_TIMER)
        parsed.append((lineno, step, seconds, summed, fields))
        for k, v in fields.items():
            if k in _VERL_STEP_KEYS or k == _VERL_TIME_KEY:
                continue
            names.setdefault(k, False)
            if isinstance(v, int | float) and not isinstance(v, bool):
                names[k] = True
    if not parsed:
        raise DataError(f"{file}: the file has no metric lines.")
    has_time = any(seconds is not None for _, _, seconds, _, _ in parsed)
    use_sum = any_timer and not has_time
    lines = [
        _VerlLine(lineno, step, total if use_sum else seconds, fields)
        for lineno, step, seconds, total, fields in parsed
    ]
    return lines, use_sum, names


def _seconds(where: str, value: object, key: str = _VERL_TIME_KEY) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(float(value)):
        raise DataError(f"{where}: {key!r} has value {value!r}, not a finite number of seconds.")
    if float(value) < 0:
        raise DataError(f"{where}: {key!r} has value {value!r}, negative seconds.")
    return float(value)


#: Runs named in a note on a metric some runs never log (the rest are counted).
_MAX_NAMED = 5


def _missing_notes(kind: str, names: list[str], runs: list[tuple[str, list[str]]]) -> list[str]:
    """One note per metric (or tag) that some runs log and others never do.

    A glob that matches ``mean@4`` in some logs and ``mean@16`` in others would otherwise
    give a note per run and metric; this gives one per metric, naming the runs without it.
    """
    notes = []
    for m in names:
        without = [run for run, matched in runs if m not in matched]
        if not without:
            continue
        named = ", ".join(repr(r) for r in without[:_MAX_NAMED])
        more = f" and {len(without) - _MAX_NAMED} more" if len(without) > _MAX_NAMED else ""
        notes.append(
            f"{kind} {m!r} is logged in {len(runs) - len(without)} of {len(runs)} runs and never in "
            f"{named}{more}; no curve there."
        )
    return notes


def read_verl(
    path: str | os.PathLike,
    *,
    metric: MetricSpec,
    gpus: float | None = None,
    gpu_hours_per_step: float | None = None,
    run_name: str | None = None,
) -> Runs:
    """Read verl-style metric JSON lines: one file per run.

    Each line is a JSON object of one logging step: either flat, with the step in
    ``train_global_steps`` (or ``training/global_step``, ``global_step``, ``step``), the
    wall-clock seconds of training so far in ``accumulated_training_time`` and metrics such
    as ``val-core/math_dapo-Qwen-instruct/acc/mean@1``; or verl's own file logger form
    ``{"step": N, "data": {...}}``. Lines without the metric (training-only lines) are
    skipped and counted in ``notes``.

    Parameters
    ----------
    path : str or path-like
        A ``.jsonl`` file, or a folder whose ``*.jsonl`` files are read (one run each).
    metric : str or sequence of str
        An exact metric name, an :mod:`fnmatch` pattern, or a list of them. Every pattern
        must match a metric in every file. With more than one matched metric, each
        becomes its own curve and the table has a ``task`` column (the metric name).
    gpus : float, optional
        GPUs the run used: compute = seconds / 3600 * gpus (GPU-hours). The seconds are
        ``accumulated_training_time``, or, when a file does not log it, the running sum of
        verl's ``timing_s/step`` (noted).
    gpu_hours_per_step : float, optional
        Compute = step * gpu_hours_per_step. Give exactly one of ``gpus`` and this.
    run_name : str, optional
        Name of the run when ``path`` is a single file (default: the file name without
        ``.jsonl``). Runs read from a folder are named after their files.

    Returns
    -------
    Runs
        Columns ``run``, ``compute``, ``reward``, ``step`` (and ``task`` with several
        metrics); ``notes`` lists what was skipped. Step 0 gives compute 0: the
        evaluation before training.

    Raises
    ------
    DataError
        If the path is missing or has no ``.jsonl`` file, a line is not valid JSON (file and
        line named), a metric matches nothing in a file, a value is not a number in
        ``[0, 1]``, the compute options are not exactly one, or the training time goes back.

    Examples
    --------
    >>> runs = read_verl("dapo-metrics/", metric="val-core/math_dapo-Qwen-instruct/acc/mean@1",
    ...                  gpus=4)  # doctest: +SKIP
    >>> print("\\n".join(runs.notes))  # doctest: +SKIP
    """
    path = Path(path)
    source = str(path)
    if not path.exists():
        raise DataError(f"{path}: no such file or folder.")
    rule = _compute_rule(source, gpus, gpu_hours_per_step)
    patterns = _patterns(source, metric)
    if path.is_dir():
        files = sorted(p for p in path.glob("*.jsonl") if p.is_file())
        if not files:
            found = sorted(p.name for p in path.iterdir())[:10]
            raise DataError(f"{path}: the folder has no .jsonl files (found {found}).")
        if run_name is not None:
            raise DataError(f"{path}: run_name applies to a single file; runs in a folder are named by file.")
    else:
        files = [path]
    notes: list[str] = []
    per_file = []
    all_metrics: list[str] = []
    for file in files:
        lines, summed, names = _parse_verl_file(file)
        numeric = [k for k, is_number in names.items() if is_number]
        matched = _match(str(file), patterns, list(names), glob_names=numeric)
        all_metrics.extend(m for m in matched if m not in all_metrics)
        run = run_name if run_name is not None else file.stem
        per_file.append((file, run, lines, summed, matched))
    curves: list[tuple[str, str, list[_Point]]] = []
    notes += _missing_notes("metric", all_metrics, [(run, matched) for _, run, _, _, matched in per_file])
    for file, run, lines, summed, matched in per_file:
        if rule.unit == "seconds" and summed:
            notes.append(
                f"run {run!r}: training seconds are the running sum of {_VERL_STEP_TIMER!r} "
                f"(the file has no {_VERL_TIME_KEY!r})."
            )
        for m in matched:
            points: list[_Point] = []
            absent = 0
            for line in lines:
                if m not in line.fields:
                    absent += 1
                    continue
                where = f"line {line.lineno}"
                reward = _reward(f"{file}, {where}", m, line.fields[m])
                if line.step is None:
                    raise DataError(
                        f"{file}, {where}: no step ({', '.join(map(repr, _VERL_STEP_KEYS))}) on a line "
                        f"with {m!r}."
                    )
                if rule.unit == "seconds":
                    if line.seconds is None:
                        raise DataError(
                            f"{file}, {where}: no {_VERL_TIME_KEY!r} (nor {_VERL_STEP_TIMER!r}) to turn into "
                            "GPU-hours with gpus; give gpu_hours_per_step to count compute in steps."
                        )
                    compute = rule(line.seconds)
                else:
                    compute = rule(line.step)
                points.append(_Point(line.step, compute, reward, where))
            if absent:
                notes.append(f"run {run!r}: {absent} line(s) without metric {m!r} skipped.")
            curves.append((run, m, _curve(str(file), run, m, points, notes)))
    return _finish(source, curves, notes)


# ---------------------------------------------------------------------- TensorBoard
def _tensorboard_runs(logdir: Path) -> list[tuple[str, Path]]:
    if logdir.is_file():
        if _TFEVENTS not in logdir.name:
            raise DataError(f"{logdir}: not a TensorBoard event file (events.out.tfevents.*).")
        return [(logdir.parent.name or str(logdir.parent), logdir)]
    runs = []
    for folder, dirs, files in os.walk(logdir):
        dirs.sort()
        if any(_TFEVENTS in f for f in files):
            rel = Path(folder).relative_to(logdir).as_posix()
            runs.append((logdir.name if rel == "." else rel, Path(folder)))
    if not runs:
        raise DataError(f"{logdir}: no TensorBoard event files (events.out.tfevents.*) in the folder.")
    return runs


def read_tensorboard(
    logdir: str | os.PathLike,
    *,
    tag: MetricSpec,
    compute: str | None = None,
    gpus: float | None = None,
    gpu_hours_per_step: float | None = None,
) -> Runs:
    """Read scalar summaries from a TensorBoard log directory, one sub-directory per run.

    Needs the optional ``tensorboard`` package (``pip install bayes_scalerl[tensorboard]``);
    its event reader handles both the classic scalar summaries (``SummaryWriter.add_scalar``
    of PyTorch, tensorboardX, verl) and TensorFlow 2's tensor summaries. TensorBoard keeps
    scalars in float32, so values come back as float32 numbers.

    Parameters
    ----------
    logdir : str or path-like
        Folder searched recursively; every folder holding ``events.out.tfevents.*`` files is
        one run, named by its path relative to ``logdir`` (``logdir``'s own name when the
        files lie directly in it). Several event files in one folder (restarts) are read in
        order; a step logged again replaces the earlier value (noted).
    tag : str or sequence of str
        Scalar tag name, :mod:`fnmatch` pattern, or a list of them; several matched tags
        become curves with a ``task`` column, as in :func:`read_verl`.
    compute : {"step", "wall_time"}, optional
        ``"step"``: compute = step * gpu_hours_per_step. ``"wall_time"``: compute =
        (wall_time - origin) / 3600 * gpus, where origin is the wall time of the tag's
        step-0 value (the evaluation before training) or, if the tag has none, of the first
        event in the run's log (noted). Default: chosen by which of ``gpus`` and
        ``gpu_hours_per_step`` is given.
    gpus, gpu_hours_per_step : float, optional
        Exactly one, matching ``compute``.

    Returns
    -------
    Runs
        Columns ``run``, ``compute``, ``reward``, ``step`` (and ``task``), with ``notes``.

    Raises
    ------
    ImportError
        If ``tensorboard`` is not installed.
    DataError
        If there is no event file, a tag matches no scalar in a run, a value is not a
        finite number in ``[0, 1]``, or the options disagree.
    """
    logdir = Path(logdir)
    source = str(logdir)
    if not logdir.exists():
        raise DataError(f"{logdir}: no such folder.")
    rule = _compute_rule(source, gpus, gpu_hours_per_step)
    wanted = "wall_time" if rule.unit == "seconds" else "step"
    if compute is None:
        compute = wanted
    if compute not in ("step", "wall_time"):
        raise DataError(f"{source}: compute must be 'step' or 'wall_time', got {compute!r}.")
    if compute != wanted:
        need = "gpus" if compute == "wall_time" else "gpu_hours_per_step"
        raise DataError(f"{source}: compute={compute!r} needs {need} (and not the other option).")
    patterns = _patterns(source, tag, "tag")
    try:
        from tensorboard.backend.event_processing import plugin_event_accumulator
        from tensorboard.util import tensor_util
    except ImportError as exc:
        raise ImportError(
            "read_tensorboard needs the 'tensorboard' package: pip install 'bayes_scalerl[tensorboard]'"
        ) from exc

    notes: list[str] = []
    loaded = []
    all_tags: list[str] = []
    for run, folder in _tensorboard_runs(logdir):
        acc = plugin_event_accumulator.EventAccumulator(
            str(folder), size_guidance={plugin_event_accumulator.TENSORS: 0}, purge_orphaned_data=False
        )
        try:
            acc.Reload()
        except Exception as exc:  # corrupt or unreadable event files
            raise DataError(
                f"{folder}: could not read the event files ({type(exc).__name__}: {exc})."
            ) from exc
        plugins = {t: acc.SummaryMetadata(t).plugin_data.plugin_name for t in acc.Tags()["tensors"]}
        scalars = [t for t, p in plugins.items() if p == "scalars"]
        for pattern in patterns:
            if not _is_glob(pattern) and pattern in plugins and plugins[pattern] != "scalars":
                raise DataError(
                    f"{folder}: tag {pattern!r} holds {plugins[pattern]!r} summaries, not scalars."
                )
        matched = _match(str(folder), patterns, scalars, "scalar tag")
        all_tags.extend(t for t in matched if t not in all_tags)
        loaded.append((run, folder, acc, matched))

    curves: list[tuple[str, str, list[_Point]]] = []
    notes += _missing_notes("tag", all_tags, [(run, matched) for run, _, _, matched in loaded])
    for run, folder, acc, matched in loaded:
        for t in matched:
            events = acc.Tensors(t)
            origin = None
            if compute == "wall_time":
                at_zero = [e.wall_time for e in events if e.step == 0]
                if at_zero:
                    origin = at_zero[-1]
                else:
                    origin = acc.FirstEventTimestamp()
                    notes.append(
                        f"run {run!r}: {t!r} has no step-0 value; wall time is counted from the first "
                        "event in the run's log."
                    )
            points: list[_Point] = []
            for e in events:
                where = f"event at step {e.step}"
                value = tensor_util.make_ndarray(e.tensor_proto)
                if value.size != 1:
                    raise DataError(
                        f"{folder}, {where}: tag {t!r} holds {value.size} numbers, not one scalar."
                    )
                reward = _reward(f"{folder}, {where}", t, value.reshape(()).item())
                if compute == "wall_time":
                    c = rule(max(e.wall_time - origin, 0.0))
                else:
                    c = rule(float(e.step))
                points.append(_Point(float(e.step), c, reward, where))
            curves.append((run, t, _curve(str(folder), run, t, points, notes)))
    return _finish(source, curves, notes)


# ---------------------------------------------------------------------- W&B CSV
def _read_csv_strict(path: Path) -> pd.DataFrame:
    """Read a CSV as text; only empty cells are missing (a literal 'NaN' stays visible)."""
    try:
        return pd.read_csv(path, dtype=str, keep_default_na=False, na_values=[""])
    except Exception as exc:  # parser errors of every kind
        raise DataError(f"{path}: could not be read ({type(exc).__name__}: {exc}).") from exc


def _numeric(path: Path, frame: pd.DataFrame, col: str) -> tuple[np.ndarray, np.ndarray]:
    """A column's cells as floats (parsed by Python, so exactly) and a mask of empty cells.

    Raises DataError on any other cell that is not a finite number.
    """
    raw = frame[col]
    empty = raw.isna().to_numpy()
    values = np.full(len(raw), np.nan)
    for i in np.flatnonzero(~empty):
        try:
            values[i] = float(raw.iloc[i])
        except ValueError:
            values[i] = np.nan
        if not math.isfinite(values[i]):
            raise DataError(
                f"{path}, row {i + 2}: column {col!r} has value {raw.iloc[i]!r}, not a finite number."
            )
    return values, empty


def _split_wandb_column(col: str, patterns: Sequence[str]) -> tuple[str, str] | None:
    """Split ``"<run> - <metric>"`` where the metric part matches a pattern (leftmost split first)."""
    start = 0
    while (i := col.find(_WANDB_SEP, start)) > 0:
        run, metric = col[:i], col[i + len(_WANDB_SEP) :]
        if any(fnmatchcase(metric, p) for p in patterns):
            return run, metric
        start = i + 1
    return None


def _is_wandb_stat(col: str, columns: set[str]) -> bool:
    return col.endswith(("__MIN", "__MAX")) and col[:-5] in columns


def _found(columns: Sequence[str]) -> str:
    """The first 20 column names, for an error message."""
    return ", ".join(map(repr, columns[:20])) + (
        f" and {len(columns) - 20} more" if len(columns) > 20 else ""
    )


def _wandb_curve(
    path: Path,
    frame: pd.DataFrame,
    col: str,
    run: str,
    metric: str,
    rule: _Compute,
    x: np.ndarray,
    required: Sequence[tuple[str, np.ndarray]],
    steps: tuple[str, np.ndarray] | None,
    notes: list[str],
) -> tuple[str, str, list[_Point]]:
    """One curve of a W&B export: the non-empty cells of column ``col``.

    Parameters
    ----------
    path : Path
        The file (for messages).
    frame : pandas.DataFrame
        The file as text (:func:`_read_csv_strict`).
    col : str
        The column of rewards.
    run, metric : str
        The curve's run and metric.
    rule : _Compute
        Turns ``x`` into GPU-hours.
    x : ndarray
        The compute column's values.
    required : sequence of (str, ndarray)
        Columns that must not be empty on a row with a reward: name and mask of empty cells.
    steps : (str, ndarray) or None
        Name and values of the column holding the steps, if the steps are known.
    notes : list of str
        Gets a note of the empty cells skipped (and the notes of :func:`_curve`).

    Returns
    -------
    tuple
        ``(run, metric, points)``.

    Raises
    ------
    DataError
        On a cell that is not a number in ``[0, 1]``, a required cell left empty, or a step
        that is not a whole number.
    """
    values, empty = _numeric(path, frame, col)
    points = []
    for i in np.flatnonzero(~empty):
        where = f"row {i + 2}"
        reward = _reward(f"{path}, {where}", col, values[i])
        for name, miss in required:
            if miss[i]:
                raise DataError(f"{path}, {where}: column {name!r} is empty on a row with {col!r}.")
        step = None if steps is None else _step_value(f"{path}, {where}", steps[0], steps[1][i])
        points.append(_Point(step, rule(x[i]), reward, where))
    if empty.any():
        notes.append(f"run {run!r}: {int(empty.sum())} empty cell(s) of {metric!r} skipped.")
    return run, metric, _curve(str(path), run, metric, points, notes)


def _wandb_history_curves(
    path: Path,
    frame: pd.DataFrame,
    patterns: Sequence[str],
    rule: _Compute,
    compute_col: str,
    run: str,
    notes: list[str],
) -> list[tuple[str, str, list[_Point]]]:
    """The curves of a run-history export (one run; a column per metric).

    Parameters
    ----------
    path : Path
        The file.
    frame : pandas.DataFrame
        Its cells as text, with a ``_step`` column.
    patterns : sequence of str
        The metric patterns.
    rule : _Compute
        Turns the compute column into GPU-hours.
    compute_col : str
        The column holding steps or seconds.
    run : str
        The run's name.
    notes : list of str
        Gets the notes of the curves.

    Returns
    -------
    list of (run, metric, points)

    Raises
    ------
    DataError
        If the compute column is missing, a pattern matches no metric, or a cell is bad.
    """
    columns = list(frame.columns)
    if compute_col not in columns:
        raise DataError(f"{path}: no column {compute_col!r} for compute; found {_found(columns)}.")
    names = [c for c in columns if c not in _WANDB_HISTORY_KEYS and c != compute_col and c != "Unnamed: 0"]
    matched = _match(str(path), patterns, names)
    steps, steps_empty = _numeric(path, frame, "_step")
    x, x_empty = _numeric(path, frame, compute_col)
    required = (("_step", steps_empty), (compute_col, x_empty))
    return [_wandb_curve(path, frame, m, run, m, rule, x, required, ("_step", steps), notes) for m in matched]


def _wandb_chart_pairs(
    path: Path, columns: Sequence[str], patterns: Sequence[str], compute_col: str
) -> list[tuple[str, tuple[str, str]]]:
    """The ``<run> - <metric>`` columns of a chart export whose metric matches a pattern.

    Returns
    -------
    list of (column, (run, metric))

    Raises
    ------
    DataError
        If there are none: the file is neither W&B layout, or no metric matches the first
        pattern.
    """
    pairs = [
        (c, split)
        for c in columns
        if c != compute_col
        and not _is_wandb_stat(c, set(columns))
        and (split := _split_wandb_column(c, patterns)) is not None
    ]
    if not pairs:
        looks = any(_WANDB_SEP in c for c in columns)
        if not looks:
            raise DataError(
                f"{path}: neither W&B layout: no '_step' column (run history) and no "
                f"'<run> - <metric>' columns (chart export); found {_found(columns)}."
            )
        metrics_found = list(dict.fromkeys(c.rsplit(_WANDB_SEP, 1)[1] for c in columns if _WANDB_SEP in c))
        metrics_found = [m for m in metrics_found if not m.endswith(("__MIN", "__MAX"))]
        raise DataError(f"{path}: {_describe_missing(patterns[0], metrics_found)}")
    return pairs


def _check_wandb_chart(
    path: Path,
    columns: Sequence[str],
    compute_col: str,
    rule: _Compute,
    patterns: Sequence[str],
    pairs: Sequence[tuple[str, tuple[str, str]]],
) -> None:
    """Refuse a chart export without its x column, with steps counted as seconds, or missing a metric.

    Raises
    ------
    DataError
        If ``compute_col`` is not a column, ``Step`` is to be turned into GPU-hours with
        ``gpus``, or a pattern matches none of the metrics in ``pairs``.
    """
    if compute_col not in columns:
        raise DataError(
            f"{path}: no x column {compute_col!r} for compute (give compute_col); found {_found(columns)}."
        )
    if compute_col == "Step" and rule.unit == "seconds":
        raise DataError(
            f"{path}: column 'Step' counts training steps: give gpu_hours_per_step, or export the chart "
            "with a time x-axis in seconds and name it with compute_col to use gpus."
        )
    present = {m for _, (_, m) in pairs}
    for pattern in patterns:
        if not any(fnmatchcase(m, pattern) for m in present):
            raise DataError(f"{path}: {_describe_missing(pattern, sorted(present))}")


def _absent_metric_notes(pairs: Sequence[tuple[str, tuple[str, str]]]) -> list[str]:
    """A note for each run of a chart export that lacks a metric other runs have."""
    runs_metrics: dict[str, list[str]] = {}
    for _, (run, m) in pairs:
        runs_metrics.setdefault(run, []).append(m)
    all_metrics = list(dict.fromkeys(m for _, (_, m) in pairs))
    return [
        f"run {run!r}: metric {m!r} (found for other runs) is not in the file; no curve."
        for run, ms in runs_metrics.items()
        for m in all_metrics
        if m not in ms
    ]


def _wandb_chart_curves(
    path: Path,
    frame: pd.DataFrame,
    patterns: Sequence[str],
    rule: _Compute,
    compute_col: str,
    notes: list[str],
) -> list[tuple[str, str, list[_Point]]]:
    """The curves of a chart export (many runs; a ``<run> - <metric>`` column per curve).

    The arguments are those of :func:`_wandb_history_curves`, less the run's name: the
    columns name the runs. ``notes`` also gets one note per metric a run lacks.

    Raises
    ------
    DataError
        If the layout or a metric is not found, the x column is missing or unfit for the
        compute option, or a cell is bad.
    """
    columns = list(frame.columns)
    pairs = _wandb_chart_pairs(path, columns, patterns, compute_col)
    _check_wandb_chart(path, columns, compute_col, rule, patterns, pairs)
    x, x_empty = _numeric(path, frame, compute_col)
    steps = (compute_col, x) if compute_col == "Step" else None
    curves = [
        _wandb_curve(path, frame, col, run, m, rule, x, ((compute_col, x_empty),), steps, notes)
        for col, (run, m) in pairs
    ]
    notes.extend(_absent_metric_notes(pairs))
    return curves


def read_wandb_csv(
    path: str | os.PathLike,
    *,
    metric: MetricSpec,
    compute_col: str | None = None,
    gpus: float | None = None,
    gpu_hours_per_step: float | None = None,
    run_name: str | None = None,
) -> Runs:
    """Read a Weights & Biases CSV export.

    Two layouts are recognised:

    - a **chart export** (a line plot's "Export panel > CSV"): one x column (``Step`` by
      default) and, for every run, ``<run> - <metric>`` with ``<run> - <metric>__MIN`` and
      ``<run> - <metric>__MAX`` (the ``__MIN``/``__MAX`` columns are ignored). Many runs
      share the file; a run not logged at a step has an empty cell there.
    - a **run history** (``run.history()`` or ``scan_history()`` saved as CSV): columns
      ``_step``, ``_runtime`` (seconds since the run started), ``_timestamp`` and one column
      per metric; one run per file.

    Empty cells are skipped and counted in ``notes``.

    Parameters
    ----------
    path : str or path-like
        The CSV file.
    metric : str or sequence of str
        Metric name, :mod:`fnmatch` pattern, or a list of them (several matches give a
        ``task`` column, as in :func:`read_verl`).
    compute_col : str, optional
        Column to turn into compute. Default: ``Step`` for a chart export; for a history,
        ``_step`` with ``gpu_hours_per_step`` and ``_runtime`` with ``gpus``.
    gpus : float, optional
        Compute = compute_col / 3600 * gpus (compute_col in seconds, such as ``_runtime``).
    gpu_hours_per_step : float, optional
        Compute = compute_col * gpu_hours_per_step (compute_col counting steps; use 1 if the
        column already holds GPU-hours). Give exactly one of ``gpus`` and this.
    run_name : str, optional
        Run name of a history export (default: the file name without ``.csv``).

    Returns
    -------
    Runs
        Columns ``run``, ``compute``, ``reward`` (and ``step`` when the steps are known,
        ``task`` with several metrics), with ``notes``.

    Raises
    ------
    DataError
        If the file cannot be read, is neither layout, a metric or the compute column is
        missing, a cell is not a finite number in ``[0, 1]``, or the options disagree.
    """
    path = Path(path)
    source = str(path)
    if not path.is_file():
        raise DataError(f"{path}: no such file.")
    rule = _compute_rule(source, gpus, gpu_hours_per_step)
    patterns = _patterns(source, metric)
    frame = _read_csv_strict(path)
    frame.columns = [str(c) for c in frame.columns]
    notes: list[str] = []
    if "_step" in frame.columns:  # a run history
        x_col = ("_step" if rule.unit == "steps" else "_runtime") if compute_col is None else compute_col
        run = path.stem if run_name is None else run_name
        curves = _wandb_history_curves(path, frame, patterns, rule, x_col, run, notes)
    else:  # a chart export
        if run_name is not None:
            raise DataError(
                f"{path}: run_name applies to a run-history export; a chart export names its runs."
            )
        x_col = "Step" if compute_col is None else compute_col
        curves = _wandb_chart_curves(path, frame, patterns, rule, x_col, notes)
    return _finish(source, curves, notes)


# ---------------------------------------------------------------------- tidy tables
def _read_table_file(path: Path) -> pd.DataFrame:
    if not path.is_file():
        raise DataError(f"{path}: no such file.")
    suffix = path.suffix.lower()
    try:
        if suffix in (".csv", ".txt"):
            return pd.read_csv(path)
        if suffix in (".parquet", ".pq"):
            return pd.read_parquet(path)
    except Exception as exc:  # parser errors of every kind
        raise DataError(f"{path}: could not be read ({type(exc).__name__}: {exc}).") from exc
    raise DataError(f"{path}: unknown file type {suffix!r}; use .csv or .parquet.")


def read_table(
    path: str | os.PathLike,
    *,
    run_col: str = "run",
    compute_col: str = "compute",
    reward_col: str = "reward",
    recipe_col: str | None = None,
    seed_col: str | None = None,
    task_col: str | None = None,
    n_eval_col: str | None = None,
) -> Runs:
    """Read a tidy CSV or Parquet table, renaming its columns to the package's names.

    Parameters
    ----------
    path : str or path-like
        ``.csv`` (or ``.txt``) or ``.parquet`` (or ``.pq``) file, one row per evaluation.
    run_col, compute_col, reward_col : str
        Columns holding the run name, the compute (GPU-hours by convention; 0 = before
        training) and the reward in ``[0, 1]``.
    recipe_col, seed_col, task_col, n_eval_col : str, optional
        Columns for the optional ``recipe``, ``seed``, ``task`` and ``n_eval``. Columns
        already called so are used without being named here; other columns are kept.

    Returns
    -------
    Runs

    Raises
    ------
    DataError
        If the file cannot be read, a named column is not in it (the columns found are
        listed), a rename would overwrite another column, or the table is invalid.
    """
    path = Path(path)
    frame = _read_table_file(path)
    mapping = {
        "run": run_col,
        "compute": compute_col,
        "reward": reward_col,
        "recipe": recipe_col,
        "seed": seed_col,
        "task": task_col,
        "n_eval": n_eval_col,
    }
    columns = [str(c) for c in frame.columns]
    frame.columns = columns
    found = ", ".join(map(repr, columns))
    missing = [(t, s) for t, s in mapping.items() if s is not None and s not in columns]
    if missing:
        said = ", ".join(f"{s!r} (for {t})" for t, s in missing)
        raise DataError(f"{path}: missing column {said}; found {found}.")
    out = frame.copy()
    sources = {s for s in mapping.values() if s is not None}
    for target, src in mapping.items():
        if src is None or src == target:
            continue
        if target in columns and target not in sources:
            raise DataError(
                f"{path}: column {src!r} would replace the file's own column {target!r}; rename one of them."
            )
        out[target] = frame[src]
    renamed_away = [s for t, s in mapping.items() if s is not None and s != t and s not in mapping]
    out = out.drop(columns=[c for c in renamed_away if c in out.columns])
    return Runs.from_frame(out, source=str(path))


# ---------------------------------------------------------------------- dispatch
_READERS: dict[str, Callable[..., Runs]] = {
    "table": read_table,
    "verl": read_verl,
    "tensorboard": read_tensorboard,
    "wandb": read_wandb_csv,
}


def _detect(path: Path) -> str:
    formats = ", ".join(repr(f) for f in FORMATS[1:])
    if not path.exists():
        raise DataError(f"{path}: no such file or folder.")
    if path.is_dir():
        jsonl = any(p.is_file() for p in path.glob("*.jsonl"))
        tb = any(_TFEVENTS in name for _, _, files in os.walk(path) for name in files)
        if jsonl and tb:
            raise DataError(
                f"{path}: cannot tell the format: the folder holds both .jsonl files (verl) and "
                "TensorBoard event files; pass format='verl' or format='tensorboard'."
            )
        if jsonl:
            return "verl"
        if tb:
            return "tensorboard"
        raise DataError(
            f"{path}: cannot tell the format: the folder holds no .jsonl files (verl) and no "
            f"events.out.tfevents.* files (TensorBoard); pass format= one of {formats}."
        )
    suffix = path.suffix.lower()
    if _TFEVENTS in path.name:
        return "tensorboard"
    if suffix == ".jsonl":
        return "verl"
    if suffix in (".parquet", ".pq"):
        return "table"
    if suffix in (".csv", ".txt"):
        try:
            header = [str(c) for c in pd.read_csv(path, nrows=0).columns]
        except Exception as exc:  # parser errors of every kind
            raise DataError(f"{path}: could not be read ({type(exc).__name__}: {exc}).") from exc
        if {"run", "compute", "reward"} <= set(header):
            return "table"
        if "_step" in header or ("Step" in header and any(_WANDB_SEP in c for c in header)):
            return "wandb"
        return "table"
    raise DataError(
        f"{path}: cannot tell the format from the suffix {suffix!r}; pass format= one of {formats}."
    )


def read_any(path: str | os.PathLike, *, format: str = "auto", **options: Any) -> Runs:
    """Read runs from any supported input, choosing the reader by ``format``.

    Parameters
    ----------
    path : str or path-like
        File or folder.
    format : {"auto", "table", "verl", "tensorboard", "wandb"}
        ``"auto"`` decides from the path: a ``.jsonl`` file or a folder of them is verl; a
        folder with ``events.out.tfevents.*`` files (or such a file) is TensorBoard; a
        ``.csv`` with ``run``, ``compute`` and ``reward`` columns is a table, one with a
        ``_step`` column or with ``Step`` and ``<run> - <metric>`` columns is a W&B export,
        any other ``.csv`` and every ``.parquet`` is a table. It refuses to guess otherwise.
    **options
        Keyword options of the chosen reader (:func:`read_table`, :func:`read_verl`,
        :func:`read_tensorboard`, :func:`read_wandb_csv`). Options set to None are dropped,
        so a command line can pass all its flags.

    Returns
    -------
    Runs

    Raises
    ------
    DataError
        On an unknown format, an input whose format cannot be told, an option the reader
        does not take or a required option left out, and whatever the reader refuses.
    """
    path = Path(path)
    if format not in FORMATS:
        raise DataError(f"{path}: unknown format {format!r}; choose one of {', '.join(map(repr, FORMATS))}.")
    fmt = _detect(path) if format == "auto" else format
    reader = _READERS[fmt]
    params = {name: p for name, p in inspect.signature(reader).parameters.items() if p.kind is p.KEYWORD_ONLY}
    options = {k: v for k, v in options.items() if v is not None}
    unknown = sorted(set(options) - set(params))
    if unknown:
        raise DataError(
            f"{path}: option(s) {', '.join(map(repr, unknown))} do not apply to format {fmt!r} "
            f"(it takes {', '.join(map(repr, params))})."
        )
    required = [n for n, p in params.items() if p.default is p.empty and n not in options]
    if required:
        raise DataError(f"{path}: format {fmt!r} needs the option(s) {', '.join(map(repr, required))}.")
    return reader(path, **options)
