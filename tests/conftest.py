"""Shared fixtures: small fits reused across tests (each distinct sampler set-up compiles once)."""

from __future__ import annotations

import numpy as np
import pytest

import bayes_scalerl as bs

#: Sampler settings of the quick fits in the tests.
QUICK = dict(chains=4, warmup=300, samples=300)


@pytest.fixture(scope="session")
def demo_fit():
    runs = bs.Runs.from_frame(bs.demo_runs(), source="<demo>")
    return bs.fit(runs, min_compute=1500, fit_until=8000, seed=1, **QUICK)


@pytest.fixture
def rng():
    return np.random.default_rng(12345)
