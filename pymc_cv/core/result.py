"""The result object returned by every estimator."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

# pandas and xarray load inside the conversions that use them: the core needs neither.

__all__ = ["CVResult"]


@dataclass
class CVResult:
    """Estimates of one or more integrals, with and without control variates.

    Attributes are numpy arrays over integrands (``cv_estimate``) or tasks
    (``vvcv_estimate``); 0-d when ``cv_estimate`` was given 1-d ``values``.

    Attributes
    ----------
    estimate, se : the CV estimate and its standard error.
    mc_estimate, mc_se : the plain (MC/MCMC) mean and its standard error.
    method : the estimator used (``"mc"`` when a CV did not help under ``method="auto"``).
    variance_reduction : (mc_se / se)^2, from held-out residuals; > 1 means the CV helped.
    se_reliable : False where a check of the inputs says the se may be too small: draws with heavy
        tails, scores that fail the Stein check, divergent transitions, too few draws per task.
    jackknife_bias : estimate of the bias of the estimate (signed; 0 where the MC mean is reported):
        the delete-a-part jackknife's, (g - 1) x (mean of the fits without each of g parts of
        held-out blocks - the fit), g = 4 (2 for fits that must be refitted), or, where it is larger
        and beyond 1.5 times its own se, the estimate minus the cross-fitted estimate (each draw's f
        minus the zero-mean part of the fit without its block, averaged), which sees a bias that
        does not shrink with the draws.
        ``|jackknife_bias|`` is part of ``se``; estimates combined linearly (thermodynamic
        integration) combine it signed, since a bias of one sign adds up.
    khat : Pareto k-hat of the squared standardised held-out residuals (nan when it could not be
        computed): a diagnostic; above 0.7 the fit extrapolates from few draws, which fits that
        nearly interpolate the draws always do (their se accounts for it).
    B : the task matrix used (vv-CVs only).
    rhat : ArviZ's rank-normalised split R-hat of each integrand's values, from the check that the
        chains mixed (nan where it was not made: no chain labels, a constant integrand, columns
        left out of ``check_mixing``; None for estimators over tasks).
    notes : human-readable remarks (fallbacks, unreliable se, ...).
    values : list of arrays, the integrand values of each integrand (task).
    heldout_residuals : list of arrays, f - g at each draw from a fit that did not see that
        draw (centred; f minus the mean for rows reported as MC).  ``values - heldout_residuals``
        is the held-out fit that :func:`pymc_cv.plots.plot_cv_fit` draws against ``values``.
    fits : list of :class:`~pymc_cv.core.cvfit.CVFit` (one :class:`CVFit` for 1-d ``values``), or
        None: the fitted control variates, kept only with ``return_fit=True``.

    Examples
    --------
    >>> import numpy as np, pymc_cv
    >>> rng = np.random.default_rng(0)
    >>> x = rng.normal(size=(100, 1))
    >>> res = pymc_cv.cv_estimate(np.column_stack([x[:, 0] ** 2, rng.normal(size=100)]), x, -x)
    >>> res.helps          # the second integrand is noise the draws cannot explain
    array([ True, False])
    >>> res.method
    array(['zv2', 'mc'], dtype=object)
    """

    estimate: np.ndarray
    se: np.ndarray
    mc_estimate: np.ndarray
    mc_se: np.ndarray
    method: np.ndarray
    variance_reduction: np.ndarray
    se_reliable: np.ndarray
    khat: np.ndarray
    jackknife_bias: np.ndarray | None = None
    B: np.ndarray | None = None
    rhat: np.ndarray | None = None
    hyperparameters: list = field(default_factory=list)
    notes: list = field(default_factory=list)
    values: list = field(default_factory=list, repr=False)
    heldout_residuals: list = field(default_factory=list, repr=False)
    fits: list | None = field(default=None, repr=False)

    def mark_unreliable(self, note, which=slice(None)):
        """Put ``note`` first among the notes and set ``se_reliable`` False for ``which``
        (all integrands by default): a finding about the inputs, not about one fit."""
        self.notes.insert(0, note)
        self.se_reliable[which] = False

    def widen_se(self, note, factor, which=slice(None)):
        """Put ``note`` first among the notes and make the se of ``which`` ``factor`` times wider (its
        variance reduction ``factor**2`` times smaller): a finding about the inputs."""
        self.notes.insert(0, note)
        self.se[which] = self.se[which] * factor
        self.variance_reduction[which] = self.variance_reduction[which] / factor**2

    _FIELDS = ("estimate", "se", "mc_estimate", "mc_se", "variance_reduction", "method", "se_reliable", "khat")

    def to_dataframe(self, labels=None):
        """One row per integrand (task): estimate, se, mc_estimate, mc_se, variance_reduction,
        method, se_reliable, khat; ``labels`` names the rows (default 0, 1, ...).

        >>> import numpy as np, pymc_cv
        >>> x = np.random.default_rng(0).normal(size=(100, 1))
        >>> pymc_cv.cv_estimate(x[:, 0] ** 2, x, -x).to_dataframe(["x^2"]).loc["x^2", "method"]
        'zv2'
        """
        import pandas as pd

        cols = {k: np.atleast_1d(np.asarray(getattr(self, k))) for k in self._FIELDS}
        k = cols["estimate"].size
        index = list(range(k)) if labels is None else list(labels)
        if len(index) != k:
            raise ValueError(f"`labels` must name each of the {k} integrands; got {len(index)}.")
        return pd.DataFrame(cols, index=index)

    def to_xarray(self, labels=None, dim="integrand"):
        """The same as an xarray Dataset with dimension ``dim`` (``labels`` as its coordinate)."""
        import xarray as xr

        df = self.to_dataframe(labels)
        return xr.Dataset({c: (dim, df[c].to_numpy()) for c in df.columns}, coords={dim: list(df.index)},
                          attrs={"notes": "\n".join(self.notes)})

    @property
    def helps(self):
        """Where the CV beat plain Monte Carlo on held-out draws."""
        return np.asarray(self.variance_reduction) > 1.0

    def __repr__(self):
        est, se = np.atleast_1d(self.estimate), np.atleast_1d(self.se)
        mc, mcse = np.atleast_1d(self.mc_estimate), np.atleast_1d(self.mc_se)
        meth, vr = np.atleast_1d(self.method), np.atleast_1d(self.variance_reduction)
        ok = np.atleast_1d(self.se_reliable)
        lines = [f"{'':>4} {'estimate':>12} {'se':>10} {'mc_estimate':>12} {'mc_se':>10} {'var_red':>9}  method"]
        for i in range(est.size):
            flag = "" if ok[i] else "  (se unreliable)"
            lines.append(
                f"{i:>4} {est[i]:>12.6g} {se[i]:>10.3g} {mc[i]:>12.6g} {mcse[i]:>10.3g} {vr[i]:>9.3g}  {meth[i]}{flag}"
            )
        lines += [f"note: {n}" for n in self.notes]
        return "CVResult\n" + "\n".join(lines)
