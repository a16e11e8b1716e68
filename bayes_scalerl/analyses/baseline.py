"""The ScaleRL paper's least-squares fit (arXiv 2510.13786, Appendix A.5), as a baseline.

For every pair on a grid of ``A`` and ``C_mid`` the exponent ``B`` is fitted by least
squares, and the pair with the smallest residual sum of squares wins. The paper calls
``scipy.optimize.curve_fit`` for ``B``; here ``B`` is fitted for all pairs at once by a
log-spaced grid search followed by Gauss-Newton refinement, which reaches the same
one-dimensional least-squares optimum (a test checks it against ``curve_fit``). The fit of
one run lives in :mod:`bayes_scalerl.models.least_squares` (the models layer's smooth
departures use it too); this module fits every run of a :class:`~bayes_scalerl.data.Runs`.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..data.runs import Runs
from ..models.curve import gain_fraction
from ..models.least_squares import PAPER_A_GRID, _fit_B, _sigmoid_grid, paper_fit_arrays  # noqa: F401

__all__ = ["paper_fit", "paper_fit_arrays", "PAPER_A_GRID"]


def paper_fit(
    runs: Runs, *, min_compute: float | None = None, fit_until: float | None = None
) -> pd.DataFrame:
    """The paper's fit for every run.

    Returns
    -------
    pandas.DataFrame
        One row per run: ``run, A, B, C_mid, R0, rss``.
    """
    w = runs.window(min_compute=min_compute, fit_until=fit_until)
    rows = []
    for i, name in enumerate(runs.names):
        m = w.mask[i]
        res = paper_fit_arrays(w.compute[i][m], w.reward[i][m], float(w.R0[i]))
        rows.append({"run": name, **res})
    return pd.DataFrame(rows)


def paper_predict(params: pd.DataFrame, run: str, compute) -> np.ndarray:
    """Point prediction of the paper's fit for one run."""
    p = params.set_index("run").loc[run]
    return p["R0"] + (p["A"] - p["R0"]) * gain_fraction(np.asarray(compute, float), p["B"], p["C_mid"])
