"""The fit folder written from Python (write_fit_folder): files, permissions, atomicity, report."""

from __future__ import annotations

import os
import stat

import matplotlib

matplotlib.use("Agg")
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

import bayes_scalerl as bs  # noqa: E402
from bayes_scalerl.cli import main  # noqa: E402
from bayes_scalerl.data.files import atomic_file, atomic_output_dir, new_file_mode  # noqa: E402
from bayes_scalerl.report import plots  # noqa: E402
from bayes_scalerl.report.outputs import (  # noqa: E402
    DECLINE_COLUMNS,
    DISCREPANCY_COLUMNS,
    IDENTIFIABILITY_COLUMNS,
    PRIOR_COLUMNS,
)

FILES = {"summary.csv", "predictions.csv", "diagnostics.csv", "posterior.nc", "curves.png"}


@pytest.fixture
def umask():
    """Set the process umask for a test, then restore it."""
    saved = os.umask(0o022)
    os.umask(saved)

    def set_mask(mask: int) -> None:
        os.umask(mask)

    yield set_mask
    os.umask(saved)


@pytest.fixture
def small_fit(demo_fit) -> bs.FitResult:
    """Four runs of the demo fit (no new sampling)."""
    names = ["ScaleRL/s0", "ScaleRL/s1", "LOO-batch/s0", "LOO-batch/s1"]
    return bs.FitResult(demo_fit.dt.isel(run=[demo_fit.run_names.index(r) for r in names]))


def _modes(folder) -> dict[str, int]:
    return {p.name: stat.S_IMODE(p.stat().st_mode) for p in folder.iterdir()}


@pytest.mark.parametrize("mask, mode", [(0o022, 0o644), (0o027, 0o640)])
def test_files_get_the_umask_permissions(small_fit, tmp_path, umask, mask, mode):
    umask(mask)
    out = tmp_path / "fit-out"
    paths = bs.write_fit_folder(small_fit, out, predict=[16000.0])
    assert set(paths) == {"summary", "predictions", "diagnostics", "posterior", "curves"}
    assert {p.name for p in paths.values()} == FILES
    assert _modes(out) == dict.fromkeys(FILES, mode)  # posterior.nc too (it came from mkstemp)
    assert [p.name for p in tmp_path.iterdir()] == ["fit-out"]  # no temporary folder left
    assert new_file_mode() == mode


def test_atomic_file_and_folder_follow_the_umask(tmp_path, umask):
    umask(0o022)
    target = tmp_path / "one.txt"
    with atomic_file(target) as tmp:
        assert tmp.parent == tmp_path and tmp.exists()
        tmp.write_text("new")
    assert target.read_text() == "new" and stat.S_IMODE(target.stat().st_mode) == 0o644
    with pytest.raises(RuntimeError, match="stop"), atomic_file(target) as tmp:
        tmp.write_text("half")
        raise RuntimeError("stop")
    assert target.read_text() == "new" and sorted(p.name for p in tmp_path.iterdir()) == ["one.txt"]
    with atomic_output_dir(tmp_path / "folder") as tmp:
        (tmp / "sub").mkdir(mode=0o700)
        (tmp / "sub" / "x.csv").write_text("x")
    assert stat.S_IMODE((tmp_path / "folder" / "sub").stat().st_mode) == 0o755
    assert stat.S_IMODE((tmp_path / "folder" / "sub" / "x.csv").stat().st_mode) == 0o644


def test_folder_from_python_reads_like_the_cli_one(small_fit, tmp_path, capsys):
    out = tmp_path / "py-fit"
    bs.write_fit_folder(small_fit, out, predict=[32000.0])
    d = pd.read_csv(out / "diagnostics.csv")
    # the default fit: its discrepancy, then each run's prior of A learnt from the batch
    tail = [*IDENTIFIABILITY_COLUMNS, *DECLINE_COLUMNS, *DISCREPANCY_COLUMNS, *PRIOR_COLUMNS]
    assert list(d.columns[-len(tail) :]) == tail
    assert set(d["discrepancy_from"]) <= {"run+batch", "batch"} and (d["discrepancy_tau"] >= 0).all()
    assert d.run.tolist() == small_fit.run_names
    p = pd.read_csv(out / "predictions.csv")
    assert (p.loc[p.compute == 32000, "observed"].isna()).all() and (p.compute == 32000).sum() == 4
    assert bs.FitResult.load(out / "posterior.nc").run_names == small_fit.run_names
    # the report of it, through the command line, shows the identifiability columns
    assert main(["report", str(out)]) == 0
    html = (out / "report.html").read_text(encoding="utf-8")
    md = (out / "report.md").read_text(encoding="utf-8")
    for col in IDENTIFIABILITY_COLUMNS:
        assert f"<th>{col}</th>" in html
    assert "a\\_flag" in md or "a_flag" in md
    assert "report.html" in capsys.readouterr().out


def test_a_failure_leaves_the_folder_as_it_was(small_fit, tmp_path, monkeypatch):
    out = tmp_path / "fit-out"
    out.mkdir()
    (out / "summary.csv").write_text("keep me")

    def broken(*args, **kwargs):
        raise RuntimeError("plot failed")

    monkeypatch.setattr(plots, "plot_curves", broken)
    with pytest.raises(RuntimeError, match="plot failed"):
        bs.write_fit_folder(small_fit, out)
    assert [p.name for p in out.iterdir()] == ["summary.csv"]
    assert (out / "summary.csv").read_text() == "keep me"
    assert [p.name for p in tmp_path.iterdir()] == ["fit-out"]


def test_out_that_is_a_file_is_refused_before_writing(small_fit, tmp_path):
    f = tmp_path / "taken"
    f.write_text("a file")
    with pytest.raises(FileExistsError, match="not a folder"):
        bs.write_fit_folder(small_fit, f)
    with pytest.raises(NotADirectoryError, match="is a file"):
        bs.write_fit_folder(small_fit, f / "sub")
    assert f.read_text() == "a file" and [p.name for p in tmp_path.iterdir()] == ["taken"]


def test_write_fit_folder_is_exported():
    assert (
        "write_fit_folder" in bs.__all__ and bs.write_fit_folder.__module__ == "bayes_scalerl.report.outputs"
    )
