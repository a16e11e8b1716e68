"""The fit result: an ArviZ DataTree plus summaries, predictions and save/load."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import xarray as xr

from ..engine import runtime
from ..models.curve import scalerl_curve
from ..models.discrepancy import discrepancy_shape
from ..models.shape_noise import ar1_lags, noise_forecast, steps_ahead
from .diagnostics import convergence, run_diagnostics, sampler_draws

__all__ = ["FitResult", "QUANTILES"]

#: Quantiles reported by summaries and predictions.
QUANTILES = (0.05, 0.25, 0.5, 0.75, 0.95)


#: Runs per block of :meth:`FitResult.observed_predictions` (bounds its memory).
PREDICT_CHUNK = 64
#: Runs per block of the smooth departures' forecast (bounds its (run, sample, point) errors).
_FORECAST_BLOCK = 32


def _encoding(dt: xr.DataTree) -> dict:
    """Encoding of :meth:`FitResult.save`: compress the numeric variables outside ``posterior``."""
    enc = {}
    for node in dt.subtree:
        if node.name == "posterior" or not node.has_data:
            continue
        enc[node.path] = {
            k: {"zlib": True, "complevel": 1, "shuffle": True}
            for k, v in node.data_vars.items()
            if v.dtype.kind in "biuf" and v.ndim > 0
        }
    return enc


def _qname(q: float) -> str:
    return f"q{int(round(q * 100)):02d}"


@dataclass
class FitResult:
    """Posterior of every run, as an ArviZ-compatible :class:`xarray.DataTree`.

    Attributes
    ----------
    dt : xarray.DataTree
        Groups ``posterior`` (``A``, ``B``, ``C_mid``, ``sigma`` and ``R0`` when fitted;
        dims ``chain, draw, run``), ``sample_stats``, ``observed_data`` (``reward``, dims
        ``run, point``, NaN-padded), ``constant_data`` (``compute``, ``in_fit``, ``R0_obs``)
        and, if asked for, ``log_likelihood`` (NaN where a point is not fitted). Its
        attributes record the settings and priors.
    """

    dt: xr.DataTree
    _diagnostics_cache: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    # ------------------------------------------------------------------ basics
    @property
    def run_names(self) -> list[str]:
        """Run names (the ``run`` coordinate)."""
        return [str(r) for r in self.dt["posterior"]["run"].values]

    @property
    def settings(self) -> dict:
        """The settings of the fit (cutoffs, sampler, priors)."""
        return json.loads(self.dt.attrs["bayes_scalerl_settings"])

    @property
    def model(self):
        """The model the fit sampled (a :class:`~bayes_scalerl.models.base.BatchedModel`)."""
        from ..models import model_from_spec

        settings = self.settings
        spec = settings.get("model_spec") or {"model": "sigmoid", "priors": settings.get("priors") or {}}
        return model_from_spec(spec)

    @property
    def var_names(self) -> list[str]:
        """Posterior variables of the runs, in the order summaries list them."""
        return list(self.model.var_names)

    def draws(self, name: str, idx: np.ndarray | None = None) -> np.ndarray:
        """Draws of a posterior variable as an array of shape ``(run, chain * draw)``.

        ``idx`` (integer positions of runs) selects runs before the copy.
        """
        x = self.dt["posterior"][name].values  # chain, draw, run
        if idx is not None:
            x = x[..., idx]
        return np.moveaxis(x, -1, 0).reshape(x.shape[-1], -1)

    def _delta(self, idx) -> np.ndarray | None:
        """Draws of the ceiling offset of the calibrated discrepancy (run, sample), if any."""
        if "delta" not in self.dt["posterior"].data_vars:
            return None
        return self.draws("delta", idx)

    def _R0_draws(self, idx: np.ndarray | None = None) -> np.ndarray:
        if "R0" in self.dt["posterior"].data_vars:
            return self.draws("R0", idx)
        r0 = self.dt["constant_data"]["R0_obs"].values
        r0 = r0 if idx is None else r0[idx]
        post = self.dt["posterior"]
        return np.broadcast_to(r0[:, None], (r0.shape[0], post.sizes["chain"] * post.sizes["draw"]))

    # ------------------------------------------------------------------ tables
    def _convergence(self, names: Sequence[str]) -> dict[str, dict[str, np.ndarray]]:
        """R-hat, bulk and tail ESS of each variable in ``names``, computed once per result.

        The DataTree does not change after the fit, so the values are kept on the object
        (and dropped if ``dt`` is replaced). With the calibrated discrepancy, ``A`` is the
        sampler's draw plus an independent offset ``delta`` drawn afresh for every draw;
        the offset would dilute R-hat and inflate the ESS of ``A`` and hide a chain that
        did not mix, so the diagnostics of ``A`` are those of the sampler's own draws
        ``A - delta``.
        """
        cache = self._diagnostics_cache
        if cache.get("dt") is not self.dt:
            cache.clear()
            cache.update(dt=self.dt, vars={})
        done = cache["vars"]
        post = self.dt["posterior"]

        def one(name: str) -> dict[str, np.ndarray]:
            return convergence(sampler_draws(post, name).transpose("chain", "draw", ...).values)

        todo = [n for n in dict.fromkeys(names) if n not in done]
        # NumPy releases the GIL in the sorts and FFTs: one variable per thread
        with ThreadPoolExecutor(max_workers=max(1, min(len(todo), runtime.n_cpus()))) as pool:
            done.update(zip(todo, pool.map(one, todo), strict=True))
        return {name: done[name] for name in names}

    def summary(self, *, var_names: Sequence[str] | None = None) -> pd.DataFrame:
        """Posterior summary, one row per run and parameter.

        Returns
        -------
        pandas.DataFrame
            Columns ``run, param, mean, sd, q05, q50, q95, r_hat, ess_bulk``; R-hat and bulk
            ESS as :func:`bayes_scalerl.posterior.diagnostics.convergence` (ArviZ's definitions;
            for ``A`` with the calibrated discrepancy, of the sampler's own draws ``A - delta``).
        """
        names = list(var_names) if var_names is not None else self.var_names
        conv = self._convergence(names)
        runs = np.array(self.run_names, dtype=object)
        parts = []
        for name in names:
            d = self.draws(name)
            q = np.quantile(d, [0.05, 0.5, 0.95], axis=1)
            parts.append(
                pd.DataFrame(
                    {
                        "run": runs,
                        "param": name,
                        "mean": d.mean(axis=1),
                        "sd": d.std(axis=1, ddof=1),
                        "q05": q[0],
                        "q50": q[1],
                        "q95": q[2],
                        "r_hat": np.asarray(conv[name]["r_hat"], float),
                        "ess_bulk": np.asarray(conv[name]["ess_bulk"], float),
                    }
                )
            )
        cols = ["run", "param", "mean", "sd", "q05", "q50", "q95", "r_hat", "ess_bulk"]
        if not parts:
            return pd.DataFrame(columns=cols)
        return pd.concat(parts, ignore_index=True)[cols]

    def diagnostics(self) -> pd.DataFrame:
        """Per-run diagnostics (see :func:`bayes_scalerl.posterior.diagnostics.run_diagnostics`).

        Computed once per result; each call returns a copy.
        """
        cache = self._diagnostics_cache
        names = self.var_names
        conv = self._convergence(names)  # resets the cache if dt was replaced
        if "table" not in cache:
            cache["table"] = run_diagnostics(self.dt, names, convergence_by_var=conv)
        return cache["table"].copy()

    # ------------------------------------------------------------------ log-likelihood
    def log_likelihood(self) -> xr.Dataset:
        """The pointwise log-likelihood of every fitted point under every draw.

        The stored ``log_likelihood`` group when the fit kept one, otherwise computed
        from the draws and the data (the model's likelihood, written once in JAX, in
        chunks of runs). With the calibrated discrepancy the likelihood is that of the
        sampler's own draws (the ceiling without its offset beyond the data).

        Returns
        -------
        xarray.Dataset
            ``reward`` of dims ``(chain, draw, run, point)`` in float32, NaN where a
            point is not fitted (ArviZ's ``log_likelihood`` group).
        """
        if "log_likelihood" in self.dt.children:
            return self.dt["log_likelihood"].to_dataset()
        from .assemble import loglik_dataset, window_from_datatree

        model = self.model
        post = self.dt["posterior"]
        params = {}
        for name in model.var_names:
            x = post[name]
            if name == "A" and "delta" in post.data_vars:
                x = x - post["delta"]
            params[name] = np.moveaxis(x.transpose("chain", "draw", "run").values, -1, 0)
        fitted = np.asarray(self.dt["constant_data"]["in_fit"].values, bool)
        with runtime.x64():
            return loglik_dataset(model, window_from_datatree(self.dt), params, fitted, self.run_names)

    def with_log_likelihood(self) -> FitResult:
        """This result with the ``log_likelihood`` group (for ArviZ's ``loo``, ``compare``).

        Examples
        --------
        >>> import arviz_stats as azs                              # doctest: +SKIP
        >>> azs.loo(res.with_log_likelihood().dt.isel(run=0))      # doctest: +SKIP
        """
        if "log_likelihood" in self.dt.children:
            return self
        dt = self.dt.copy()
        dt["log_likelihood"] = xr.DataTree(self.log_likelihood())
        return FitResult(dt)

    # ------------------------------------------------------------------ prediction
    def predict_draws(
        self,
        compute,
        *,
        kind: str = "observation",
        seed: int | np.random.Generator = 0,
        runs: Sequence[str] | None = None,
        discrepancy: bool = True,
    ) -> np.ndarray:
        """Posterior (predictive) draws at ``compute``.

        Parameters
        ----------
        compute : array_like, shape (q,) or (run, q)
            Compute values, shared by all runs or one row per run.
        kind : {"observation", "curve"}
            ``"curve"``: the noise-free expected reward. ``"observation"``: a new
            evaluation, curve plus noise of the fit's likelihood (Gaussian; Student-t;
            binomial at the run's median ``n_eval`` plus the extra term; AR(1): the
            forecast given the run's last fitted residual, see ``_ar1_forecast``),
            clipped to ``[0, 1]``.
        seed : int or numpy.random.Generator
            Seed of the observation noise (or the generator to draw it from, so that
            calls on successive blocks of runs draw fresh noise).
        runs : sequence of str, optional
            Restrict to these runs.
        discrepancy : bool
            Add the calibrated discrepancy beyond each run's last fitted compute (when
            the fit has one; see :mod:`bayes_scalerl.models.discrepancy`). ``False``
            gives the exact sigmoid's predictive (the model of version 0.1).

        Returns
        -------
        ndarray, shape (run, sample, q)
        """
        if kind not in ("observation", "curve"):
            raise ValueError(f"kind must be 'observation' or 'curve', got {kind!r}")
        idx = self._run_index(runs)
        c = np.asarray(compute, float)
        c = np.broadcast_to(c, (len(idx), c.shape[-1])) if c.ndim == 1 else c
        return self._predict(idx, c, kind, np.random.default_rng(seed), discrepancy)

    def _run_index(self, runs: Sequence[str] | None) -> np.ndarray:
        """Positions of ``runs`` (all runs when None); KeyError naming unknown ones."""
        if runs is None:
            return np.arange(len(self.run_names))
        lookup = {r: i for i, r in enumerate(self.run_names)}
        missing = [r for r in runs if r not in lookup]
        if missing:
            raise KeyError(f"unknown run(s): {', '.join(map(repr, missing))}")
        return np.array([lookup[r] for r in runs], dtype=int)

    def _predict(
        self, idx: np.ndarray, c: np.ndarray, kind: str, rng: np.random.Generator, discrepancy: bool
    ) -> np.ndarray:
        """:meth:`predict_draws` of the runs at positions ``idx``, computes ``c`` (run, q)."""
        model = self.model
        params = {n: self.draws(n, idx)[..., None] for n in model.var_names}
        cd = self.dt["constant_data"]
        R0 = self._R0_draws(idx)[..., None]
        c_ref = cd["C_ref"].values[idx][:, None, None] if "C_ref" in cd else None
        delta = self._delta(idx)
        if delta is not None:  # the curve is the sigmoid's, plus the discrepancy
            params["A"] = params["A"] - delta[..., None]
        mu = model.mean(c[:, None, :], params, R0, c_ref)
        if delta is not None and discrepancy:
            level = self.draws("delta_level", idx)[..., None]
            horizon = float(self.settings["discrepancy"]["horizon"])
            h = np.log(np.maximum(c, 1e-300) / cd["C_ref"].values[idx][:, None])
            grow = discrepancy_shape(h, horizon)[:, None, :]
            mu = mu + np.where(c[:, None, :] > 0, level + (delta[..., None] - level) * grow, 0.0)
        if kind == "curve":
            return mu
        sigma = params["sigma"]
        priors = self.settings.get("priors") or {}
        likelihood = priors.get("likelihood", "gaussian")
        if likelihood == "student_t":
            noise = sigma * rng.standard_t(priors.get("nu", 4.0), mu.shape)
        elif likelihood == "binomial":
            # a new evaluation with the run's median number of graded generations
            from ..models.scalerl import binomial_variance

            n_ref = np.nanmedian(cd["n_eval"].values[idx], axis=1)[:, None, None]
            var = sigma**2 + binomial_variance(np.clip(mu, 0.0, 1.0), n_ref)
            noise = np.sqrt(var) * rng.standard_normal(mu.shape)
        elif isinstance(priors.get("shape_noise"), (list, tuple)):
            mu, sd = self._shape_forecast(idx, c, mu, sigma, priors)
            noise = sd * rng.standard_normal(mu.shape)
        elif likelihood == "ar1":
            mu, sd = self._ar1_forecast(idx, c, mu, sigma)
            noise = sd * rng.standard_normal(mu.shape)
        else:
            noise = sigma * rng.standard_normal(mu.shape)
        out = mu + noise
        return np.clip(out, 0.0, 1.0, out=out)

    def _shape_forecast(self, idx, c, mu, sigma, priors):
        """Forecast of new evaluations' errors under AR(1) noise plus smooth departures.

        Each draw's errors at the run's fitted points give the conditional mean and sd of
        the errors beyond the last fitted point
        (:func:`~bayes_scalerl.models.shape_noise.noise_forecast`); points inside or before
        the fit window get the stationary sd ``sigma sqrt(1 + kappa^2)``.
        """
        cd = self.dt["constant_data"]
        comp, fitted = cd["compute"].values[idx], cd["in_fit"].values[idx]
        fitted = fitted & (comp > 0)
        y = self.dt["observed_data"]["reward"].values[idx]
        kappa, ell = (float(v) for v in priors["shape_noise"])
        rho = float(priors["rho"]) if priors.get("likelihood") == "ar1" else 0.0
        A, B, C = (self.draws(n, idx) for n in ("A", "B", "C_mid"))
        delta = self._delta(idx)
        A = A if delta is None else A - delta
        R0 = self._R0_draws(idx)
        ahead = steps_ahead(comp, fitted, c)
        step = cd["step"].values[idx] if "step" in cd else None
        lag = ar1_lags(comp, fitted, step) if rho else None  # as the fit counted them
        shift = np.empty(mu.shape)
        sd = np.empty((len(idx), 1, c.shape[1]))
        log_c, log_new = np.log(np.maximum(comp, 1e-300)), np.log(np.maximum(c, 1e-300))
        for lo in range(0, len(idx), _FORECAST_BLOCK):
            sl = slice(lo, lo + _FORECAST_BLOCK)
            fit_mu = scalerl_curve(
                comp[sl, None, :], A[sl, :, None], B[sl, :, None], C[sl, :, None], R0[sl, :, None]
            )
            shift[sl], s = noise_forecast(
                log_c[sl],
                fitted[sl],
                y[sl, None, :] - fit_mu,
                log_new[sl],
                ahead[sl],
                rho,
                kappa,
                ell,
                None if lag is None else lag[sl],
            )
            sd[sl, 0] = s
        return mu + shift, sigma * sd

    def _ar1_forecast(self, idx, c, mu, sigma):
        """AR(1) forecast of new evaluations after each run's last fitted one.

        A point ``k`` evaluations after the last fitted one (``k`` from the run's median
        spacing of fitted evaluations) has mean ``mu + rho^k e_last`` and sd
        ``sigma sqrt(1 - rho^(2k))``, with ``e_last`` the draw's residual at the last fitted
        evaluation; points inside or before the fit window get the stationary ``sigma``.
        """
        cd = self.dt["constant_data"]
        comp, fitted = cd["compute"].values[idx], cd["in_fit"].values[idx]
        y = self.dt["observed_data"]["reward"].values[idx]
        if "rho" in self.dt["posterior"].data_vars:
            rho = self.draws("rho", idx)[..., None]
        else:  # fixed for every run (Priors.rho)
            rho = float((self.settings.get("priors") or {})["rho"])
        last = fitted.shape[1] - 1 - np.argmax(fitted[:, ::-1], axis=1)  # last fitted point per run
        rows = np.arange(len(idx))
        c_last, y_last = comp[rows, last], y[rows, last]
        A, B, C = (self.draws(n, idx) for n in ("A", "B", "C_mid"))
        delta = self._delta(idx)
        A = A if delta is None else A - delta
        mu_last = scalerl_curve(c_last[:, None], A, B, C, self._R0_draws(idx))  # run, sample
        e_last = (y_last[:, None] - mu_last)[..., None]
        k = steps_ahead(comp, fitted, c)[:, None, :]  # run, 1, q: whole steps (rho may be < 0)
        w = np.where(k > 0, rho**k, 0.0)
        return mu + w * e_last, sigma * np.sqrt(1.0 - w**2)

    def predict(
        self,
        compute,
        *,
        kind: str = "observation",
        quantiles: Sequence[float] = QUANTILES,
        seed: int = 0,
        runs: Sequence[str] | None = None,
    ) -> pd.DataFrame:
        """Posterior predictive bands at ``compute``, one row per run and compute.

        Returns
        -------
        pandas.DataFrame
            Columns ``run, compute, mean`` and one ``qXX`` column per quantile.
        """
        names = list(runs) if runs is not None else self.run_names
        d = self.predict_draws(compute, kind=kind, seed=seed, runs=names)
        c = np.asarray(compute, float)
        c = np.broadcast_to(c, (len(names), c.shape[-1])) if c.ndim == 1 else c
        qs = np.quantile(d, list(quantiles), axis=1)  # q, run, point
        out = {"run": np.repeat(names, c.shape[1]), "compute": c.ravel(), "mean": d.mean(1).ravel()}
        for k, q in enumerate(quantiles):
            out[_qname(q)] = qs[k].ravel()
        return pd.DataFrame(out)

    def observed_predictions(self, extra_compute: Sequence[float] = (), *, seed: int = 0) -> pd.DataFrame:
        """Predictive bands at every observed compute of each run and at ``extra_compute``.

        Returns
        -------
        pandas.DataFrame
            Columns ``run, compute, observed, in_fit, q05, q25, q50, q75, q95``;
            ``observed`` is NaN (and ``in_fit`` False) at the extra computes.

        Notes
        -----
        Runs are predicted in blocks of ``PREDICT_CHUNK`` (64), in parallel threads, each
        block with the noise generator ``numpy.random.default_rng([seed, block])``: memory
        stays bounded by the block and the values do not depend on the number of cores.
        """
        cd = self.dt["constant_data"].to_dataset()
        od = self.dt["observed_data"].to_dataset()
        extra = np.asarray(list(extra_compute), float)
        compute = cd["compute"].values  # run, point (NaN-padded)
        n_runs = compute.shape[0]
        grid = np.concatenate([compute, np.broadcast_to(extra, (n_runs, extra.size))], axis=1)
        observed = np.concatenate([od["reward"].values, np.full((n_runs, extra.size), np.nan)], axis=1)
        in_fit = np.concatenate([cd["in_fit"].values, np.zeros((n_runs, extra.size), bool)], axis=1)
        # an extra compute that was also observed is reported once, as observed
        dup = np.zeros_like(in_fit)
        dup[:, compute.shape[1] :] = np.isin(grid[:, compute.shape[1] :], compute) if extra.size else False
        keep = ~np.isnan(grid) & ~dup
        grid0 = np.nan_to_num(grid)
        # blocks of PREDICT_CHUNK runs, each with its own generator (seed, block): memory
        # bounded by the block, blocks on every core (NumPy releases the GIL), and the
        # same values whatever the number of cores
        qs = np.empty((len(QUANTILES), n_runs, grid.shape[1]))

        def block(lo: int) -> None:
            idx = np.arange(lo, min(lo + PREDICT_CHUNK, n_runs))
            rng = np.random.default_rng([seed, lo // PREDICT_CHUNK])
            draws = self._predict(idx, grid0[idx], "observation", rng, True)  # run, sample, q
            qs[:, idx] = np.quantile(draws, list(QUANTILES), axis=1)

        starts = range(0, n_runs, PREDICT_CHUNK)
        with ThreadPoolExecutor(max_workers=max(1, min(len(starts), runtime.n_cpus()))) as pool:
            list(pool.map(block, starts))
        runs = np.repeat(np.array(self.run_names, dtype=object), grid.shape[1]).reshape(grid.shape)
        out = {"run": runs[keep], "compute": grid[keep], "observed": observed[keep], "in_fit": in_fit[keep]}
        for k, q in enumerate(QUANTILES):
            out[_qname(q)] = qs[k][keep]
        df = pd.DataFrame(out)
        order = {r: i for i, r in enumerate(self.run_names)}
        df["_o"] = df["run"].map(order)
        return df.sort_values(["_o", "compute"], kind="stable").drop(columns="_o").reset_index(drop=True)

    # ------------------------------------------------------------------ I/O
    def save(self, path: str | os.PathLike) -> Path:
        """Write the DataTree to netCDF atomically (a temporary file, then a rename).

        Every group but ``posterior`` is compressed (zlib level 1 with byte shuffling:
        sampler statistics, step sizes and masks shrink several-fold at little cost; the
        float64 draws themselves do not, and are written as they are).
        """
        from ..data.files import atomic_file

        path = Path(path)
        with atomic_file(path) as tmp:
            self.dt.to_netcdf(tmp, engine="h5netcdf", encoding=_encoding(self.dt))
        return path

    @classmethod
    def load(cls, path: str | os.PathLike) -> FitResult:
        """Read a result written by :meth:`save`."""
        dt = xr.open_datatree(path, engine="h5netcdf").load()
        for node in dt.subtree:
            if "run" in node.coords:
                node.coords["run"] = node.coords["run"].astype(str)
        return cls(dt)
