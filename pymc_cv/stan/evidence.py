"""Thermodynamic integration from PyStan fits of a tempered Stan program, one fit per rung."""

from __future__ import annotations

import time

import numpy as np

from ..evidence.rung_moments import check_cv_options
from ..evidence.thermodynamic_integration import TISettings, estimate_from_rungs
from .convert import PowerPosteriorTerms

__all__ = ["ti_from_pystan"]


def ti_from_pystan(fits, program_code, data, temperatures, *, temperature="temperature", method="vvcv",
                   rule="corrected", group_size=4, B="learn", progressbar=True, random_seed=0, **options):
    """Log evidence by TI from PyStan fits of a tempered Stan program, one fit per temperature.

    Parameters
    ----------
    fits : sequence of w stan.fit.Fit
        Fit i sampled the program built with ``data[temperature] = temperatures[i]``.
    program_code : str
        The Stan program; its log-likelihood is multiplied by the data variable ``temperature``
        and keeps its normalising constants (``target += t * ..._lpdf``), e.g.
        ``stan_models/van_der_pol.stan``.
    data : dict
        The program's data (any value for the temperature).
    temperatures : array (w,)
    method, rule, group_size, B, **options : as in :func:`ti_from_arrays`.

    Returns
    -------
    TIResult
        With the per-draw terms in ``.draws`` (as :func:`thermodynamic_integration`).

    Examples
    --------
    A normal mean with known noise, as in :func:`pymc_cv.from_pystan`: the evidence is a 3-d
    normal density.  One build serves every rung (httpstan caches by program).

    >>> import numpy as np, stan, pymc_cv
    >>> from scipy import stats
    >>> from pymc_cv.evidence import power_ladder
    >>> program = ("data { int<lower=1> N; vector[N] y; real<lower=0, upper=1> temperature; } "
    ...            "parameters { real mu; } "
    ...            "model { mu ~ normal(0, 2); target += temperature * normal_lpdf(y | mu, 1); }")
    >>> data = {"N": 3, "y": [0.3, -0.5, 1.2], "temperature": 1.0}
    >>> t = power_ladder(9)
    >>> fits = []
    >>> for i, ti in enumerate(t):
    ...     posterior = stan.build(program, data={**data, "temperature": float(ti)}, random_seed=i)
    ...     fits.append(posterior.sample(num_chains=2, num_samples=200))   # doctest: +ELLIPSIS
    Building...
    >>> res = pymc_cv.ti_from_pystan(fits, program, data, t, progressbar=False)
    >>> exact = stats.multivariate_normal(np.zeros(3), np.eye(3) + 4.0).logpdf(data["y"])
    >>> bool(abs(res.log_evidence - exact) < 3 * res.se < 0.1)
    True
    """
    t = np.asarray(temperatures, dtype=float)
    if len(fits) != t.size:
        raise ValueError(f"{len(fits)} fits for {t.size} temperatures; pass one per rung.")
    start = time.perf_counter()
    terms = PowerPosteriorTerms(program_code, data, temperature)
    rungs = [terms(fit) for fit in fits]
    check_cv_options(options, ti_from_pystan)
    settings = TISettings(method, rule, group_size, B, progressbar, random_seed, None, options)
    return estimate_from_rungs(t, rungs, settings, terms=time.perf_counter() - start)
