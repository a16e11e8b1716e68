"""The shared gather that moves each run's selected points to the front of its row."""

import numpy as np
import pytest

from bayes_scalerl.data.packing import pack, packing


def test_packing_matches_a_loop_over_rows():
    rng = np.random.default_rng(0)
    a = rng.normal(size=(7, 9))
    mask = rng.random((7, 9)) < 0.5
    mask[0] = False  # a run with nothing selected
    mask[1] = True
    p = packing(mask, width=11)
    assert p.take.shape == (7, 11)
    np.testing.assert_array_equal(p.count, mask.sum(axis=1))
    nan_filled, repeated = pack(a, p, np.nan), pack(a, p)
    for i in range(7):
        sel = a[i, mask[i]]
        k = sel.size
        np.testing.assert_array_equal(nan_filled[i, :k], sel)
        assert np.isnan(nan_filled[i, k:]).all()
        np.testing.assert_array_equal(repeated[i, :k], sel)
        np.testing.assert_array_equal(repeated[i, k:], sel[-1] if k else a[i, 0])
        np.testing.assert_array_equal(p.keep[i], np.arange(11) < k)


def test_packing_needs_a_run_by_point_mask():
    with pytest.raises(ValueError, match="run, point"):
        packing(np.ones(4, bool))
