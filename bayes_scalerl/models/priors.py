"""Default priors on the ScaleRL parameters, in user units.

Every prior is a plain dataclass field, so it is printed, saved with the fit and
changed with :func:`dataclasses.replace`.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields, replace

__all__ = ["Priors", "LIKELIHOODS"]

#: Noise models of an evaluation (see :class:`Priors`).
LIKELIHOODS = ("gaussian", "student_t", "binomial", "ar1")


@dataclass(frozen=True)
class Priors:
    """Priors of the ScaleRL sigmoid ``R(C) = R0 + (A - R0) sigmoid(B (log C - log C_mid))``.

    Parameters
    ----------
    A_loc, A_scale : float or None
        Prior on the asymptote. ``None`` (default) gives ``A ~ Uniform(R0, 1)``, or under
        ``from_batch`` (the default) each run's prior learnt from the batch; numbers give
        a Normal(``A_loc``, ``A_scale``) truncated to ``(R0, 1)`` for every run (then the
        default ``from_batch="auto"`` learns no prior; not with ``"ceiling"``).
    B_median : float
        Median of the log-normal prior on the exponent ``B`` (default 2, the middle of
        the paper's reported values 1.1-5.2).
    B_log_sd : float
        Standard deviation of ``log B`` (default 0.7: a 90% prior interval of about
        0.6 to 6.3).
    C_mid_median : float or None
        Median of the log-normal prior on ``C_mid`` in compute units. ``None``
        (default) uses each run's largest fitted compute, so the prior puts as much
        mass beyond the data as before it.
    C_mid_log_sd : float
        Standard deviation of ``log C_mid`` (default 1.5: a 90% prior interval from
        about 1/12 to 12 times the median).
    sigma_scale : float
        Scale of the half-normal prior on the noise standard deviation of one
        evaluation (default 0.1 reward units).
    R0_fitted : bool
        If ``False`` (default, the paper's convention) ``R0`` is the run's first
        evaluation, which then leaves the likelihood. If ``True`` ``R0`` is a parameter
        with a ``Uniform(0, 1)`` prior and every point, the first evaluation included
        (even below ``min_compute``), is in the likelihood as a noisy measurement like
        the others. On dense simulated logs that makes the bands calibrated where the
        default's are too narrow (exact sigmoids, 200 evaluations, 4x: 90% coverage
        0.98 against 0.84); on the DAPO curves fitted on their first quarter it widens
        the band (mean width 0.19 against 0.14) at a worse CRPS (0.0215 against
        0.0198): there the first evaluation, of the base model, is surer than the
        residual noise the fit learns from the training checkpoints
        (``benchmarks/results/misspecification-dense.md``). The hierarchical model and
        the other curve families take ``R0`` from the first evaluation.
    likelihood : {"gaussian", "student_t", "binomial", "ar1"}
        The noise model of an evaluation (kept here so that one object specifies the
        whole model):

        - ``"ar1"`` (default): errors of consecutive fitted evaluations are AR(1) with
          correlation ``rho`` and stationary sd ``sigma`` (neighbouring checkpoints
          share noise; the errors of a gap's two sides are independent). With the
          default ``rho="auto"`` the correlation is estimated once from the batch's data,
          so that a curve's wiggles are not counted as independent evidence: measured on
          curves that are not sigmoids (``benchmarks/results/misspecification-ar1auto.md``)
          the 90% band extrapolated 4x covered 0.91 of held-out points against 0.85 for
          independent errors, at equal or lower CRPS.
        - ``"gaussian"``: independent Normal(0, ``sigma``) errors (version 0.1's default;
          the same as ``"ar1"`` with ``rho=0``).
        - ``"student_t"``: independent Student-t errors with ``nu`` degrees of freedom
          and scale ``sigma`` (robust to outlying evaluations), sampled as a normal scale
          mixture: one latent precision per point, ``Gamma(nu/2, nu/2)``, so that ``A``
          is still integrated out given them.
        - ``"binomial"``: the variance of an evaluation is ``sigma^2 + p (1 - p) / n``
          with ``n`` the ``n_eval`` column (graded generations behind the mean) and
          ``p`` the observed pass rate shrunk as ``(y n + 0.5) / (n + 1)``; ``sigma`` is
          the extra (non-sampling) noise.
    nu : float
        Degrees of freedom of the Student-t likelihood (default 4).
    rho_scale : float
        Prior of the AR(1) correlation: ``atanh(rho) ~ Normal(0, rho_scale)`` (default
        0.75: a 95% prior interval of about -0.9 to 0.9). A flat prior on ``(-1, 1)``
        puts mass near ``rho = 1``, where a near-random walk of large stationary sd
        mimics any curve: measured, it made the posterior of ``A`` and the bands far
        too wide (90% bands covering 97% of held-out points).
    rho : float, "auto", "reml" or None
        With ``likelihood="ar1"``: ``"auto"`` (default) fixes every run's correlation at
        :func:`~bayes_scalerl.noise_correlation` of the fitted runs, estimated from the
        data before the fit (a variogram of second differences); ``"reml"`` at the
        restricted likelihood of each run's least-squares residuals
        (:mod:`~bayes_scalerl.models.residual_correlation`);
        a number in ``(-1, 1)`` fixes it at that value (a point-mass prior: one
        coordinate fewer for NUTS, and no ``rho`` in the posterior); ``None`` samples
        each run's correlation with the prior above (needs ``target_accept`` 0.99 and
        converges on fewer runs). Other likelihoods ignore ``"auto"``, ``"reml"``
        and ``None`` and refuse a number.
    shape_noise : None, "auto" or (float, float)
        Departures from the sigmoid that are smooth in log compute, shared by
        neighbouring evaluations over a stretch of a curve (an Ornstein-Uhlenbeck process
        in ``log C`` on top of the evaluation noise): ``(kappa, ell)`` gives its sd as a
        multiple of ``sigma`` and its length scale in e-folds of compute (a ``kappa`` of 0
        is ``None``). ``None`` leaves it out; ``"auto"`` (default) estimates both once from
        the batch (:func:`~bayes_scalerl.models.shape_noise.shape_noise_arrays`), as
        ``rho="auto"`` does the correlation, and leaves it out where the data show none.
        It makes the fit count a dense log's smooth wiggles as the few
        pieces of evidence they are, and adds their variance to bands beyond the data.
        Needs ``likelihood="ar1"`` with a fixed ``rho``, or ``"gaussian"``.
    from_batch : "auto", "ceiling", bool
        Learn each run's priors from the batch before the fit
        (:mod:`~bayes_scalerl.models.population`): ``"ceiling"`` (CLI ``--priors batch``)
        learns those of ``A``, ``B`` and ``C_mid``: each run's prior is the predictive of
        the population of the other training runs' ceilings, exponents and midpoints, with
        ``C_mid`` counted relative to each run's window end or in compute, whichever the
        batch supports better. The priors above (``B_median``, ``B_log_sd``,
        ``C_mid_median``, ``C_mid_log_sd``, ``A`` uniform) are then the hyperprior's
        predictive, which a batch that says little leaves as it is. Where windows end
        before the midpoints, a run's likelihood is a ridge in ``(A, B, C_mid)``; the other
        runs' ceilings pin where on it the run sits. Calibrated on exact sigmoids drawn from
        such a population, with lower CRPS than the fixed priors there, on the
        misspecification and item-response simulators and on the real sets
        (``benchmarks/results/batch-priors.md``); one run's ``A`` then leans toward the
        batch's ceilings (README, "What the default assumes"). ``"auto"`` (default) is
        ``"ceiling"`` for the independent model, and ``False`` for the hierarchical model
        (which pools in its own fit) or when ``A_loc`` gives ``A``'s prior. ``False``
        (CLI ``--priors fixed``): the priors above for every run. ``True`` learns ``B``
        and ``C_mid`` only, and is not for decisions: their population's split of its
        spread between the two is not identified on a ridge, yet it sets the
        extrapolation; on exact sigmoids drawn from the very population it assumes, its 4x
        bands were too narrow. A batch of one training run has no other runs to learn
        from and keeps the fixed priors. :func:`~bayes_scalerl.identifiability` judges
        ``A`` on each run's own data.
    """

    A_loc: float | None = None
    A_scale: float | None = None
    B_median: float = 2.0
    B_log_sd: float = 0.7
    C_mid_median: float | None = None
    C_mid_log_sd: float = 1.5
    sigma_scale: float = 0.1
    R0_fitted: bool = False
    likelihood: str = "ar1"
    nu: float = 4.0
    rho_scale: float = 0.75
    rho: float | str | None = "auto"
    shape_noise: tuple[float, float] | str | None = "auto"
    from_batch: bool | str = "auto"

    def __post_init__(self) -> None:
        if self.from_batch not in (False, True, "ceiling", "auto"):
            raise ValueError(
                f"Priors: from_batch must be 'auto', 'ceiling', True or False, got {self.from_batch!r}."
            )
        if self.from_batch == "ceiling" and self.A_loc is not None:
            raise ValueError(
                f"Priors: A_loc={self.A_loc!r} gives every run a prior of A, and from_batch='ceiling' learns "
                "each run's from the batch; give one of them (from_batch=True learns B and C_mid only)."
            )
        if self.likelihood not in LIKELIHOODS:
            raise ValueError(
                f"Priors: likelihood must be one of {', '.join(map(repr, LIKELIHOODS))}, "
                f"got {self.likelihood!r}."
            )
        if self.rho is not None and self.rho not in ("auto", "reml"):
            if self.likelihood != "ar1":
                raise ValueError(f"Priors: rho={self.rho!r} needs likelihood='ar1', got {self.likelihood!r}.")
            try:
                ok = -1.0 < float(self.rho) < 1.0
            except (TypeError, ValueError):
                ok = False
            if not ok:
                raise ValueError(
                    f"Priors: rho must be 'auto', 'reml', None or a number in (-1, 1), got {self.rho!r}."
                )
            object.__setattr__(self, "rho", float(self.rho))
        if self.shape_noise is not None and self.shape_noise != "auto":
            try:
                kappa, ell = (float(v) for v in self.shape_noise)
                ok = kappa >= 0 and ell > 0 and math.isfinite(kappa) and math.isfinite(ell)
            except (TypeError, ValueError):
                ok = False
            if not ok:
                raise ValueError(
                    "Priors: shape_noise must be None, 'auto' or (kappa >= 0, ell > 0), got "
                    f"{self.shape_noise!r}."
                )
            if self.likelihood not in ("ar1", "gaussian") or self.rho_sampled:
                raise ValueError(
                    "Priors: shape_noise needs likelihood='ar1' with a fixed rho, or 'gaussian'; got "
                    f"likelihood={self.likelihood!r}, rho={self.rho!r}."
                )
            # no departures is the model without the term, bit for bit
            object.__setattr__(self, "shape_noise", (kappa, ell) if kappa > 0 else None)
        if (self.A_loc is None) != (self.A_scale is None):
            raise ValueError("Priors: give both A_loc and A_scale, or neither (uniform A).")
        checks = {
            "A_scale": self.A_scale,
            "B_median": self.B_median,
            "B_log_sd": self.B_log_sd,
            "C_mid_median": self.C_mid_median,
            "C_mid_log_sd": self.C_mid_log_sd,
            "sigma_scale": self.sigma_scale,
            "nu": self.nu,
            "rho_scale": self.rho_scale,
        }
        for name, value in checks.items():
            if value is not None and not (math.isfinite(value) and value > 0):
                raise ValueError(f"Priors: {name} must be a positive finite number, got {value!r}.")

    @property
    def rho_sampled(self) -> bool:
        """Whether each run's AR(1) correlation is a sampled parameter."""
        return self.likelihood == "ar1" and self.rho is None

    @property
    def A_uniform(self) -> bool:
        """Whether the prior on ``A`` is uniform on ``(R0, 1)``."""
        return self.A_scale is None

    def for_model(self, model: str) -> Priors:
        """These priors with ``from_batch="auto"`` resolved for ``model``.

        ``"ceiling"`` for the independent model; ``False`` for the hierarchical model (it
        pools the runs in its own fit) and where ``A_loc`` gives every run a prior of ``A``.
        Other values are returned as they are.
        """
        if self.from_batch != "auto":
            return self
        learn = model != "hierarchical" and self.A_loc is None
        return replace(self, from_batch="ceiling" if learn else False)

    def to_dict(self) -> dict:
        """The priors as a plain dict (``None`` kept), for attributes and reports."""
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> Priors:
        """Priors from :meth:`to_dict` (unknown keys ignored), read as when they were saved.

        Fits saved before the AR(1) default meant what their defaults meant then: a dict
        without ``likelihood`` is Gaussian, and an ``"ar1"`` one without ``rho`` sampled
        each run's correlation.
        """
        names = {f.name for f in fields(cls)}
        d = {k: v for k, v in dict(d).items() if k in names}
        d.setdefault("likelihood", "gaussian")
        d.setdefault("shape_noise", None)  # saved before the term existed
        d.setdefault("from_batch", False)  # saved before priors were learnt from the batch
        if d["likelihood"] == "ar1":
            d.setdefault("rho", None)
        return cls(**d)
