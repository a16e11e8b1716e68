"""The command line end to end, with small sample counts."""

import math

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
    need = ["run", "n_points", "r_hat_max", "ess_bulk_min", "ess_tail_min", "divergences", "bfmi_min"]
    need += ["converged", "retried", "retries", "likelihood", "rho", "shape_kappa", "shape_ell"]
    need += ["a_width90", "a_width90_data", "a_width90_sigmoid", "a_contraction", "p_cmid_beyond_data"]
    need += ["a_identified", "a_flag", "reward_drop", "falls"]
    need += ["discrepancy_omega", "discrepancy_tau", "discrepancy_from"]  # the default predictive
    need += ["prior_a_loc", "prior_a_scale"]  # the default: each run's prior of A learnt from the batch
    assert list(d.columns) == need
    assert np.isfinite(d[["prior_a_loc", "prior_a_scale"]].to_numpy()).all() and (d.prior_a_scale > 0).all()
    # the default noise model: AR(1), one correlation for the batch, in [0, 0.9]
    assert (d.likelihood == "ar1").all() and d.rho.nunique() == 1 and 0.0 <= d.rho.iloc[0] <= 0.9
    # the flag follows its documented rule: contraction >= 0.9 and a 90% width <= 0.10, both
    # of the run's own data under the fixed priors (the priors are learnt from the batch)
    rule = (d.a_contraction >= 0.9) & (d.a_width90_data <= 0.10)
    assert (d.a_identified == rule).all()
    assert d.loc[d.a_identified, "a_flag"].str.startswith("A identified").all()
    assert d.loc[~d.a_identified, "a_flag"].str.startswith("A weakly identified").all()
    res = bs.FitResult.load(out / "posterior.nc")
    assert res.run_names == d.run.tolist()
    assert "log_likelihood" not in res.dt.children  # only with --log-likelihood
    printed = capsys.readouterr().out
    assert "A = " in printed and "priors of A, B and C_mid learnt from the batch" in printed
    # the last line says where the time went; its phases add up to at most the total
    last = printed.strip().splitlines()[-1]
    assert last.startswith("time (s): ")
    phases = dict(p.rsplit(" ", 1) for p in last[len("time (s): ") :].split("; ")[0].split(", "))
    assert {"load programs", "sample", "calibrate", "diagnostics", "predictions", "write", "plot"} <= set(
        phases
    )
    total = float(last.rsplit("total ", 1)[1])
    assert sum(map(float, phases.values())) <= total + 0.05 * len(phases)  # rounding of each


def test_fit_stores_the_log_likelihood_when_asked(tmp_path):
    df = bs.demo_runs().query("recipe in ['ScaleRL', 'LOO-dapo']")
    df.to_csv(tmp_path / "runs.csv", index=False)
    args = ["fit", str(tmp_path / "runs.csv"), "--discrepancy", "none", "--log-likelihood", *SMALL]
    assert main([*args, "--out", str(tmp_path / "fit")]) == 0
    res = bs.FitResult.load(tmp_path / "fit" / "posterior.nc")
    ll = res.dt["log_likelihood"]["reward"].values
    bare = bs.FitResult(res.dt.drop_nodes("log_likelihood"))
    np.testing.assert_array_equal(bare.log_likelihood()["reward"].values, ll)


def test_fit_with_ar1_rho_auto_saves_the_estimate_and_reloads(tmp_path, capsys):
    df = bs.demo_runs().query("recipe in ['ScaleRL', 'LOO-dapo']")
    df.to_csv(tmp_path / "runs.csv", index=False)
    args = ["fit", str(tmp_path / "runs.csv"), "--discrepancy", "none", "--log-likelihood", *SMALL]
    args += ["--likelihood", "ar1", "--rho", "auto", "--out", str(tmp_path / "fit")]
    assert main(args) == 0
    res = bs.FitResult.load(tmp_path / "fit" / "posterior.nc")
    rho = res.settings["priors"]["rho"]
    assert rho == pytest.approx(bs.noise_correlation(df), abs=1e-12)  # every point of the runs is fitted
    assert f"rho fixed at {rho:.3f}" in capsys.readouterr().out
    # the saved fit rebuilds its likelihood from the file: the fixed rho travels in its settings
    ll = res.dt["log_likelihood"]["reward"].values
    bare = bs.FitResult(res.dt.drop_nodes("log_likelihood"))
    np.testing.assert_allclose(bare.log_likelihood()["reward"].values, ll, rtol=1e-12)


def test_console_lists_at_most_twenty_runs_by_name():
    from bayes_scalerl.cli.commands import MAX_LISTED, _listing

    names = [f"r{i}" for i in range(45)]
    assert _listing(names[:MAX_LISTED]) == ", ".join(names[:MAX_LISTED])
    text = _listing(names)
    assert text.startswith("45 runs: r0, r1") and "r19, ... and 25 more (see diagnostics.csv)" in text
    assert "r20" not in text


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


def test_hierarchical_fit_then_compare(tmp_path, capsys):
    df = bs.demo_runs(3).query("recipe in ['ScaleRL', 'LOO-dapo', 'LOO-batch']")
    df.to_csv(tmp_path / "runs.csv", index=False)
    out = tmp_path / "fit"
    args = ["fit", str(tmp_path / "runs.csv"), "--out", str(out), "--fit-until", "8000"]
    assert main([*args, "--min-compute", "1500", "--model", "hierarchical", *SMALL]) == 0
    rec = pd.read_csv(out / "recipes.csv")
    assert set(rec.recipe) == {"ScaleRL", "LOO-dapo", "LOO-batch"} and (rec.n_runs == 3).all()
    assert {"A_recipe", "A_seed_sd"} <= set(pd.read_csv(out / "sampler.csv").variable)
    capsys.readouterr()
    code = main(["compare", str(out), "--params", "A,reward", "--budget", "16000", "--target", "0.58"])
    assert code == 0
    c = pd.read_csv(out / "comparisons.csv")
    need = ["a", "b", "param", "diff_mean", "diff_q05", "diff_q95", "p_a_greater", "p_in_rope", "verdict"]
    assert set(need) <= set(c.columns)
    assert len(c) == 6 and set(c.param) == {"A", "reward"}
    assert (c.diff_q05 <= c.diff_mean).all() and (c.diff_mean <= c.diff_q95).all()
    for name in ("p_best.csv", "compute_to_target.csv", "crossover.csv"):
        assert (out / name).stat().st_size > 0
    assert "P(a > b)" in capsys.readouterr().out
    # one pair into another folder, with a wider margin
    other = tmp_path / "cmp"
    assert (
        main(
            ["compare", str(out), "--a", "ScaleRL", "--b", "LOO-dapo", "--rope", "0.05", "--out", str(other)]
        )
        == 0
    )
    one = pd.read_csv(other / "comparisons.csv")
    assert len(one) == 1 and one.rope.item() == 0.05
    # names the fit does not have are user errors: exit status 2, a message, nothing written
    capsys.readouterr()
    for argv, words in (
        (["--a", "nope"], ["unknown recipe 'nope'", "LOO-dapo"]),
        (["--a", "ScaleRL", "--b", "ScaleRL"], ["same recipe"]),
    ):
        assert main(["compare", str(out), *argv, "--out", str(tmp_path / "none")]) == 2
        err = capsys.readouterr().err
        assert all(w in err for w in words), err
        assert not (tmp_path / "none").exists()


def test_compare_refuses_a_folder_without_a_fit(tmp_path, capsys):
    assert main(["compare", str(tmp_path)]) == 2
    assert "posterior.nc" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        main(["compare", str(tmp_path), "--params", "A,Q"])
    assert exc.value.code == 2


def test_fit_reads_verl_logs_with_a_metric(tmp_path, capsys):
    import json

    truth = bs.demo_truth(1).iloc[:2]
    rows = bs.simulate_runs(truth, np.arange(0, 8001, 400.0), np.random.default_rng(0))
    logs = tmp_path / "logs"
    logs.mkdir()
    for name, g in rows.groupby("run"):
        with open(logs / f"{name.replace('/', '_')}.jsonl", "w") as f:
            for c, r in zip(g.compute, g.reward, strict=True):
                f.write(
                    json.dumps(
                        {"train_global_steps": int(c / 400) * 25, "accumulated_training_time": c * 900.0}
                    )
                    + "\n"
                )
                f.write(
                    json.dumps(
                        {
                            "train_global_steps": int(c / 400) * 25,
                            "accumulated_training_time": c * 900.0,
                            "val/acc": r,
                        }
                    )
                    + "\n"
                )
    out = tmp_path / "fit"
    # compute = seconds / 3600 * 4 GPUs = c * 900 / 3600 * 4 = c
    # with the priors learnt from the batch (two runs: close to the default's), said in the summary
    argv = ["fit", str(logs), "--metric", "val/acc", "--gpus", "4", "--out", str(out), "--priors", "batch"]
    assert main([*argv, *SMALL]) == 0
    assert "priors of A, B and C_mid learnt from the batch" in capsys.readouterr().out
    # diagnostics.csv says which prior of A each run got: the one the fit kept
    d = pd.read_csv(out / "diagnostics.csv")
    learnt = bs.FitResult.load(out / "posterior.nc").dt["constant_data"]["batch_prior"]
    np.testing.assert_allclose(
        d[["prior_a_loc", "prior_a_scale"]].to_numpy(), learnt.sel(prior_term=["A_loc", "A_scale"]).values
    )
    assert (d["prior_a_scale"] > 0).all() and list(d.columns[-2:]) == ["prior_a_loc", "prior_a_scale"]
    p = pd.read_csv(out / "predictions.csv")
    assert set(p.run) == {"ScaleRL_s0", "LOO-prompt-lvl-adv-norm_s0"}
    np.testing.assert_allclose(np.sort(p.compute.unique()), np.arange(0, 8001, 400.0))


def test_backtest_and_identify_commands(tmp_path, capsys):
    df = bs.demo_runs().query("recipe in ['ScaleRL', 'LOO-dapo']")
    df.to_csv(tmp_path / "runs.csv", index=False)
    bt = tmp_path / "bt"
    code = main(
        [
            "backtest",
            str(tmp_path / "runs.csv"),
            "--fraction",
            "0.5",
            "--out",
            str(bt),
            "--bootstrap",
            "20",
            *SMALL,
        ]
    )
    assert code == 0
    scores = pd.read_csv(bt / "scores.csv")
    assert scores.method.iloc[0] == "bayes" and "coverage90" in scores.columns
    assert list(scores.method) == ["bayes", "gaussian", "ls", "boot"]  # version 0.1's model beside
    points = pd.read_csv(bt / "backtest.csv")
    assert len(points) == scores.n_points.iloc[0] and (points.compute > 8000).all()
    out = capsys.readouterr().out
    assert "CRPS" in out and "bayes chain by chain: 90% coverage" in out
    assert len(pd.read_csv(bt / "chains.csv")) == 4  # one row per chain (SMALL: 4)
    ident = tmp_path / "ident"
    args = ["identify", str(tmp_path / "runs.csv"), "--out", str(ident), "--fractions", "0.5,1"]
    assert main([*args, "--n-future", "2", "--no-sensitivity", *SMALL]) == 0
    table = pd.read_csv(ident / "identify.csv")
    assert len(table) == 4 and (ident / "widths.png").stat().st_size > 0
    out = capsys.readouterr().out
    for run in table.run:
        assert run in out
    # --no-baseline: the default alone beside least squares
    only = tmp_path / "bt-only"
    args = ["backtest", str(tmp_path / "runs.csv"), "--fraction", "0.5", "--out", str(only)]
    assert main([*args, "--bootstrap", "20", "--no-baseline", *SMALL]) == 0
    assert list(pd.read_csv(only / "scores.csv").method) == ["bayes", "ls", "boot"]
    # exactly one way to cut the data
    with pytest.raises(SystemExit):
        main(["backtest", str(tmp_path / "runs.csv"), "--out", str(bt)])


def test_version(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.strip() == f"bayes-scalerl {bs.__version__}"


def test_out_that_is_a_file_exits_2(tmp_path, capsys):
    taken = tmp_path / "taken"
    taken.write_text("a file")
    for argv in (
        ["demo", "--out", str(taken)],
        ["fit", "x.csv", "--out", str(taken)],
        ["backtest", "x.csv", "--fraction", "0.5", "--out", str(taken)],
        ["identify", "x.csv", "--out", str(taken / "sub")],
        ["report", str(tmp_path), "--out", str(taken)],
        ["compare", str(tmp_path), "--out", str(taken)],
    ):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == 2, argv
        err = capsys.readouterr().err
        assert "--out" in err and str(taken) in err and ("not a folder" in err or "is a file" in err), err
    assert taken.read_text() == "a file" and [p.name for p in tmp_path.iterdir()] == ["taken"]


@pytest.mark.parametrize(
    "argv, words",
    [
        (["fit", "x.csv", "--out", "o", "--chains", "1"], ["--chains", "at least 2"]),
        (["backtest", "x.csv", "--out", "o", "--fraction", "1.5"], ["--fraction", "between 0 and 1"]),
        (["backtest", "x.csv", "--out", "o", "--fit-until", "0"], ["--fit-until", "positive"]),
        (["identify", "x.csv", "--out", "o", "--fractions", "0.5,2"], ["--fractions", "(0, 1]"]),
        (["identify", "x.csv", "--out", "o", "--n-future", "-1"], ["--n-future", "non-negative"]),
        (["compare", "f", "--params", "A,reward"], ["--params reward needs --budget"]),
        (["compare", "f", "--seed-sd", "-0.01"], ["--seed-sd", "non-negative"]),
        (["compare", "f", "--seed-sd", "inf"], ["--seed-sd", "finite"]),
        (
            ["demo", "--model", "hierarchical", "--likelihood", "student_t"],
            ["hierarchical", "--likelihood student_t"],
        ),
        (["demo", "--model", "hierarchical", "--rho", "sampled"], ["hierarchical", "--rho sampled"]),
        (
            ["fit", "x.csv", "--out", "o", "--model", "hierarchical", "--r0", "fitted"],
            ["hierarchical", "--r0 fitted"],
        ),
        (
            ["fit", "x.csv", "--out", "o", "--likelihood", "gaussian", "--rho", "0.5"],
            ["--rho", "needs --likelihood ar1"],
        ),
        (
            ["backtest", "x.csv", "--out", "o", "--fraction", "0.5", "--likelihood", "ar1", "--rho", "1"],
            ["--rho", "(-1, 1)"],
        ),
        (["identify", "x.csv", "--out", "o", "--likelihood", "ar1", "--rho", "high"], ["--rho", "'auto'"]),
        (["fit", "x.csv", "--out", "o", "--retries", "-1"], ["--retries", "non-negative"]),
        (["demo", "--no-retry", "--retries", "2"], ["--no-retry", "--retries 2"]),
        (["demo", "--no-retry", "--retries", "1"], ["--no-retry", "--retries 1"]),
        (["fit", "x.csv", "--out", "o", "--shape-noise", "1:0"], ["--shape-noise", "KAPPA:ELL"]),
        (["fit", "x.csv", "--out", "o", "--shape-noise", "wavy"], ["--shape-noise", "got 'wavy'"]),
        (
            ["backtest", "x.csv", "--out", "o", "--likelihood", "student_t", "--shape-noise", "1:0.5"],
            ["--shape-noise", "gaussian"],
        ),
        (
            ["fit", "x.csv", "--out", "o", "--model", "hierarchical", "--shape-noise", "1:0.5"],
            ["--shape-noise", "hierarchical"],
        ),
        (
            ["fit", "x.csv", "--out", "o", "--model", "hierarchical", "--priors", "batch"],
            ["--priors", "--model independent"],
        ),
    ],
)
def test_bad_options_and_combinations_exit_2(tmp_path, monkeypatch, capsys, argv, words):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert all(w in err for w in words), err
    assert list(tmp_path.iterdir()) == []


def test_option_names_follow_the_api_with_old_spellings_accepted(capsys):
    from bayes_scalerl.cli import build_parser

    parser = build_parser()
    new = parser.parse_args(["fit", "x.csv", "--out", "o", "--checkpoint-dir", "ck"])
    assert new.checkpoint_dir == "ck" and capsys.readouterr().err == ""
    old = parser.parse_args(["fit", "x.csv", "--out", "o", "--checkpoint", "ck"])
    assert (
        old.checkpoint_dir == "ck"
        and "--checkpoint is deprecated; use --checkpoint-dir" in capsys.readouterr().err
    )
    assert parser.parse_args(["fit", "x.csv", "--out", "o"]).checkpoint_dir is None
    ident = parser.parse_args(["identify", "x.csv", "--out", "o", "--futures", "3"])
    assert ident.n_future == 3 and "use --n-future" in capsys.readouterr().err
    assert parser.parse_args(["identify", "x.csv", "--out", "o"]).n_future == 5
    cmp = parser.parse_args(["compare", "f", "--param", "A,B"])
    assert cmp.params == ["A", "B"] and "use --params" in capsys.readouterr().err
    assert parser.parse_args(["compare", "f"]).params == ["A"]
    assert parser.parse_args(["compare", "f"]).seed_sd is None  # estimated from the fit
    assert parser.parse_args(["compare", "f", "--seed-sd", "0"]).seed_sd == 0.0
    # the old spellings are not advertised
    fit_help = parser._subparsers._group_actions[0].choices["fit"].format_help()
    assert "--checkpoint-dir" in fit_help and "--checkpoint DIR" not in fit_help


def test_only_user_errors_exit_2_bugs_propagate(tmp_path, monkeypatch, capsys):
    """A ValueError from inside the package is a bug: traceback and exit 1, not 'invalid input'."""
    from bayes_scalerl.engine.checkpoint import CheckpointMismatch
    from bayes_scalerl.posterior import fitting

    def buggy_fit(runs, **kw):
        raise ValueError("internal shape mismatch")

    monkeypatch.setattr(fitting, "fit", buggy_fit)
    with pytest.raises(ValueError, match="internal shape mismatch"):
        main(["demo", "--out", str(tmp_path / "o")])

    def refused(runs, **kw):
        raise CheckpointMismatch("ck: the checkpoint folder holds chunks of another fit")

    monkeypatch.setattr(fitting, "fit", refused)
    assert main(["demo", "--out", str(tmp_path / "o"), "--checkpoint-dir", str(tmp_path / "ck")]) == 2
    assert "chunks of another fit" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()
    # a folder without a fit is the user's mistake
    assert main(["report", str(tmp_path)]) == 2
    assert "posterior.nc" in capsys.readouterr().err


@pytest.mark.parametrize(
    "command", [["fit", "x.csv", "--out", "o"], ["backtest", "x.csv", "--out", "o", "--fraction", "0.5"]]
)
def test_r0_option_sets_the_priors(command):
    from bayes_scalerl.cli.commands import _priors, build_parser

    parser = build_parser()
    assert _priors(parser.parse_args(command)).R0_fitted is False  # the default: the first evaluation
    assert _priors(parser.parse_args([*command, "--r0", "fitted"])).R0_fitted is True
    assert _priors(parser.parse_args([*command, "--r0", "first"])).R0_fitted is False


@pytest.mark.parametrize(
    "command",
    [
        ["fit", "x.csv", "--out", "o"],
        ["backtest", "x.csv", "--out", "o", "--fraction", "0.5"],
        ["identify", "x.csv", "--out", "o", "--fractions", "0.5"],
    ],
)
def test_priors_option_learns_them_from_the_batch(command):
    from bayes_scalerl.cli.commands import _priors, build_parser

    parser = build_parser()
    # the default: learnt where the model can (fit resolves "auto" by model)
    assert _priors(parser.parse_args(command)).from_batch == "auto"
    assert _priors(parser.parse_args([*command, "--priors", "fixed"])).from_batch is False
    assert _priors(parser.parse_args([*command, "--priors", "batch"])).from_batch == "ceiling"
    with pytest.raises(SystemExit):  # the old name of the fixed priors is refused, not guessed
        parser.parse_args([*command, "--priors", "default"])


@pytest.mark.parametrize(
    "command", [["fit", "x.csv", "--out", "o"], ["identify", "x.csv", "--out", "o", "--fractions", "0.5"]]
)
def test_shape_noise_option_sets_the_priors(command):
    from bayes_scalerl.cli.commands import _priors, build_parser

    parser = build_parser()
    assert _priors(parser.parse_args(command)).shape_noise == "auto"  # the default
    assert _priors(parser.parse_args([*command, "--shape-noise", "auto"])).shape_noise == "auto"
    assert _priors(parser.parse_args([*command, "--shape-noise", "none"])).shape_noise is None
    assert _priors(parser.parse_args([*command, "--shape-noise", "1.5:0.5"])).shape_noise == (1.5, 0.5)


@pytest.mark.parametrize(
    "command", [["fit", "x.csv", "--out", "o"], ["backtest", "x.csv", "--out", "o", "--fraction", "0.5"]]
)
def test_rho_option_sets_the_priors(command):
    from bayes_scalerl.cli.commands import _priors, build_parser

    parser = build_parser()
    assert _priors(parser.parse_args(command)).rho == "auto"  # the default: the batch's variogram
    assert _priors(parser.parse_args([*command, "--rho", "reml"])).rho == "reml"
    assert _priors(parser.parse_args([*command, "--rho", "0.4"])).rho == 0.4
    assert _priors(parser.parse_args([*command, "--rho", "sampled"])).rho is None


@pytest.mark.parametrize(
    "command",
    [
        ["fit", "x.csv", "--out", "o"],
        ["backtest", "x.csv", "--out", "o", "--fraction", "0.5"],
        ["identify", "x.csv", "--out", "o", "--fractions", "0.5"],
    ],
)
def test_retries_option_sets_the_retry(command):
    from bayes_scalerl.cli.commands import _retry, build_parser
    from bayes_scalerl.posterior.fitting import resolve_retry

    parser = build_parser()
    assert _retry(parser.parse_args(command)) is True  # the default: Retry(), two retries
    assert resolve_retry(_retry(parser.parse_args(command))) == bs.Retry(retries=2)
    assert _retry(parser.parse_args([*command, "--retries", "0"])) is False
    assert _retry(parser.parse_args([*command, "--retries", "2"])) is True
    assert _retry(parser.parse_args([*command, "--retries", "1"])) == bs.Retry(retries=1)
    assert _retry(parser.parse_args([*command, "--retries", "3"])) == bs.Retry(retries=3)
    if command[0] == "fit":
        assert _retry(parser.parse_args([*command, "--no-retry"])) is False


def test_unconverged_runs_get_the_retries_hint_only_where_it_can_help():
    from bayes_scalerl.cli.commands import _retry_hint, build_parser

    parser = build_parser()
    fit = ["fit", "x.csv", "--out", "o"]
    assert "--retries 2" in _retry_hint(parser.parse_args([*fit, "--retries", "1"]))
    assert _retry_hint(parser.parse_args(fit)) is None  # the default: two retries already
    assert _retry_hint(parser.parse_args([*fit, "--retries", "3"])) is None
    assert _retry_hint(parser.parse_args([*fit, "--no-retry"])) is None  # retries switched off
    assert _retry_hint(parser.parse_args([*fit, "--model", "hierarchical"])) is None  # pooled passes


@pytest.mark.parametrize("command", ["backtest", "identify"])
def test_retries_option_reaches_the_refits(tmp_path, monkeypatch, command):
    """``--retries`` reaches the fits ``backtest`` and ``identify`` run (their ``fit_kwargs``)."""
    import importlib

    backtest_mod = importlib.import_module("bayes_scalerl.analyses.backtest")
    identify_mod = importlib.import_module("bayes_scalerl.analyses.identify")
    seen = {}

    class Stop(Exception):
        pass

    def record(runs, **kw):
        seen.update(kw["fit_kwargs"])
        raise Stop

    monkeypatch.setattr(backtest_mod, "backtest", record)
    monkeypatch.setattr(identify_mod, "budget_sweep", record)
    path = tmp_path / "runs.csv"
    bs.demo_runs().to_csv(path, index=False)
    extra = ["--fraction", "0.5"] if command == "backtest" else ["--fractions", "0.5"]
    with pytest.raises(Stop):
        main([command, str(path), "--out", str(tmp_path / "o"), *extra, "--retries", "1"])
    assert seen["retry"] == bs.Retry(retries=1)


@pytest.mark.parametrize(
    "command",
    [
        ["fit", "x.csv", "--out", "o"],
        ["demo"],
        ["backtest", "x.csv", "--out", "o", "--fraction", "0.5"],
        ["identify", "x.csv", "--out", "o", "--fractions", "0.5"],
    ],
)
def test_discrepancy_horizon_option(command, capsys):
    """``--discrepancy-horizon DECADES`` sets ``Discrepancy(horizon=DECADES log 10)``; the default
    keeps the default settings, and the option is refused without the discrepancy or out of range."""
    from bayes_scalerl.cli.commands import _check_args, _discrepancy, build_parser

    parser = build_parser()
    assert _discrepancy(parser.parse_args(command)) is True
    assert _discrepancy(parser.parse_args([*command, "--discrepancy", "none"])) is False
    got = _discrepancy(parser.parse_args([*command, "--discrepancy-horizon", "2"]))
    assert got == bs.Discrepancy(horizon=2 * math.log(10.0))
    for bad in ("0", "-1", "inf", "nan", "two"):
        with pytest.raises(SystemExit):
            parser.parse_args([*command, "--discrepancy-horizon", bad])
    args = parser.parse_args([*command, "--discrepancy", "none", "--discrepancy-horizon", "2"])
    with pytest.raises(SystemExit) as exc:
        _check_args(parser, args)
    assert exc.value.code == 2
    assert "--discrepancy-horizon: needs --discrepancy calibrated" in capsys.readouterr().err
