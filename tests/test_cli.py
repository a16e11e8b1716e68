"""The command line end to end, with small sample counts."""

import numpy as np
import pandas as pd
import pytest

import bayes_scalerl as bs
from bayes_scalerl.cli import main

SMALL = ["--chains", "4", "--warmup", "300", "--samples", "300"]


def test_demo_writes_every_output(tmp_path, capsys):
    out = tmp_path / "demo"
    assert main(["demo", "--out", str(out), "--predict", "32000", *SMALL]) == 0
    for name in ("summary.csv", "predictions.csv", "diagnostics.csv", "posterior.nc", "curves.png"):
        assert (out / name).stat().st_size > 0, name
    s = pd.read_csv(out / "summary.csv")
    assert list(s.columns) == ["run", "param", "mean", "sd", "q05", "q50", "q95", "r_hat", "ess_bulk"]
    assert {"A", "B", "C_mid"} <= set(s.param)
    p = pd.read_csv(out / "predictions.csv")
    assert list(p.columns) == ["run", "compute", "observed", "in_fit", "q05", "q25", "q50", "q75", "q95"]
    extra = p[p.compute == 32000]
    assert len(extra) == 18 and extra.observed.isna().all() and not extra.in_fit.any()
    assert (p.loc[p.compute > 8000, "in_fit"] == False).all()  # noqa: E712
    assert np.all(np.diff(p[["q05", "q25", "q50", "q75", "q95"]].to_numpy(), axis=1) >= 0)
    d = pd.read_csv(out / "diagnostics.csv")
    assert list(d.columns) == ["run", "n_points", "r_hat_max", "ess_bulk_min", "divergences", "converged"]
    res = bs.FitResult.load(out / "posterior.nc")
    assert res.run_names == d.run.tolist()
    assert "A = " in capsys.readouterr().out


def test_fit_on_a_csv_with_fit_until(tmp_path):
    df = bs.demo_runs().query("recipe in ['ScaleRL', 'LOO-dapo']")
    df.to_csv(tmp_path / "runs.csv", index=False)
    out = tmp_path / "fit"
    code = main(
        [
            "fit",
            str(tmp_path / "runs.csv"),
            "--out",
            str(out),
            "--fit-until",
            "8000",
            "--min-compute",
            "1500",
            *SMALL,
        ]
    )
    assert code == 0
    p = pd.read_csv(out / "predictions.csv")
    assert p.loc[p.in_fit, "compute"].between(1500, 8000).all()
    assert len(pd.read_csv(out / "diagnostics.csv")) == 4


@pytest.mark.parametrize(
    "rows, words",
    [
        ("run,compute,reward\na,0,0.2\na,100,1.5\n", ["run 'a'", "'reward'", "1.5"]),
        ("run,compute\na,0\n", ["missing", "'reward'"]),
        ("run,compute,reward\na,0,0.2\na,100,0.3\n", ["run 'a'", "at least 4"]),
    ],
)
def test_bad_input_exits_2_and_writes_nothing(tmp_path, capsys, rows, words):
    f = tmp_path / "bad.csv"
    f.write_text(rows)
    out = tmp_path / "out"
    assert main(["fit", str(f), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "bad.csv" in err
    for w in words:
        assert w in err
    assert not out.exists()
    assert [p.name for p in tmp_path.iterdir()] == ["bad.csv"]


def test_bad_arguments_exit_2(tmp_path):
    with pytest.raises(SystemExit) as exc:
        main(["fit", "x.csv", "--out", str(tmp_path / "o"), "--predict", "1,abc"])
    assert exc.value.code == 2
    with pytest.raises(SystemExit) as exc:
        main(["fit", "x.csv", "--out", str(tmp_path / "o"), "--chains", "0"])
    assert exc.value.code == 2
    assert main(["fit", str(tmp_path / "missing.csv"), "--out", str(tmp_path / "o")]) == 2


def test_existing_output_is_untouched_on_failure(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "summary.csv").write_text("keep me")
    f = tmp_path / "bad.csv"
    f.write_text("run,compute,reward\na,0,nan\n")
    assert main(["fit", str(f), "--out", str(out)]) == 2
    assert (out / "summary.csv").read_text() == "keep me"
