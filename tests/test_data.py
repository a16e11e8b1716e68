import numpy as np
import pandas as pd
import pytest

import bayes_scalerl as bs
from bayes_scalerl.data import DataError, Runs


def good_frame():
    c = np.array([0, 1000, 2000, 3000, 4000, 5000], float)
    return pd.DataFrame(
        {
            "run": ["a"] * 6 + ["b"] * 6,
            "compute": np.concatenate([c, c]),
            "reward": np.concatenate([0.2 + 0.05 * np.arange(6), 0.3 + 0.02 * np.arange(6)]),
        }
    )


def test_unsorted_rows_are_fine_and_order_of_runs_kept():
    df = good_frame().sample(frac=1.0, random_state=0)
    runs = Runs.from_frame(df)
    assert runs.n_runs == 2
    w = runs.window()
    assert np.all(np.diff(w.compute[0][w.mask[0]]) > 0)
    assert w.R0[runs.names.index("a")] == pytest.approx(0.2)


@pytest.mark.parametrize(
    "mutate, words",
    [
        (lambda d: d.drop(columns="reward"), ["missing", "'reward'"]),
        (
            lambda d: d.assign(reward=d["reward"].astype(object).where(d.index != 3, "abc")),
            ["run 'a'", "'reward'", "'abc'", "non-numeric"],
        ),
        (lambda d: d.assign(reward=d["reward"].where(d.index != 8, np.nan)), ["run 'b'", "'reward'", "nan"]),
        (
            lambda d: d.assign(compute=d["compute"].where(d.index != 2, np.inf)),
            ["run 'a'", "'compute'", "inf"],
        ),
        (
            lambda d: d.assign(reward=d["reward"].where(d.index != 7, 1.3)),
            ["run 'b'", "'reward'", "1.3", "[0, 1]"],
        ),
        (
            lambda d: d.assign(compute=d["compute"].where(d.index != 4, -5.0)),
            ["run 'a'", "'compute'", "-5.0", "negative"],
        ),
        (
            lambda d: d.assign(compute=d["compute"].where(d.index != 5, 4000.0)),
            ["run 'a'", "'compute'", "4000.0", "duplicate"],
        ),
        (lambda d: d.iloc[0:0], ["empty"]),
    ],
)
def test_bad_input_is_refused_with_a_clear_message(mutate, words):
    with pytest.raises(DataError) as exc:
        Runs.from_frame(mutate(good_frame()), source="curves.csv")
    msg = str(exc.value)
    assert "curves.csv" in msg
    for w in words:
        assert w in msg, (w, msg)


def test_compute_zero_is_allowed_and_sets_R0():
    runs = Runs.from_frame(good_frame())
    w = runs.window()
    assert w.mask.sum(axis=1).tolist() == [5, 5]


def test_fitted_R0_keeps_the_first_evaluation_below_min_compute():
    from bayes_scalerl.data.runs import in_likelihood

    c = np.array([[0.0, 10, 20, 30, np.nan], [5.0, 10, 20, 30, 40]])
    first = in_likelihood(c, min_compute=15)
    fitted = in_likelihood(c, min_compute=15, R0_fitted=True)
    assert not first[:, 0].any() and fitted[:, 0].all()
    assert (fitted[:, 1:] == first[:, 1:]).all() and not fitted[0, 4]
    # fit_until still applies to it
    assert not in_likelihood(c, fit_until=3.0, R0_fitted=True)[1, 0]
    w = Runs.from_frame(good_frame()).window(R0_fitted=True)
    assert w.mask.sum(axis=1).tolist() == [6, 6]


def test_too_few_points_names_run_and_counts():
    runs = Runs.from_frame(good_frame(), source="x.csv")
    with pytest.raises(DataError) as exc:
        runs.window(min_compute=1000, fit_until=3000)
    msg = str(exc.value)
    assert "run 'a'" in msg and "3 point(s)" in msg and "at least 4" in msg and "fit_until=3000" in msg


def test_read_csv_and_parquet_round_trip(tmp_path):
    df = good_frame().assign(recipe="r1", seed=0)
    df.to_csv(tmp_path / "runs.csv", index=False)
    df.to_parquet(tmp_path / "runs.parquet")
    a = bs.read_runs(tmp_path / "runs.csv")
    b = bs.read_runs(tmp_path / "runs.parquet")
    pd.testing.assert_frame_equal(a.table, b.table, check_dtype=False)
    assert a.run_attribute("recipe") == ["r1", "r1"]
    np.testing.assert_allclose(a.table["reward"], df.sort_values(["run", "compute"])["reward"])


def test_read_errors_name_the_file(tmp_path):
    with pytest.raises(DataError, match="no such file"):
        bs.read_runs(tmp_path / "nope.csv")
    (tmp_path / "x.json").write_text("{}")
    with pytest.raises(DataError, match="unknown file type"):
        bs.read_runs(tmp_path / "x.json")
