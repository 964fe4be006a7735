"""Log evidence from PyStan fits: bridge sampling from a fit of the program, and thermodynamic integration
from fits of a tempered program, one fit per rung."""

from __future__ import annotations

import dataclasses
import re
import time

import numpy as np

from .. import compat
from ..evidence.posterior_draws import evidence_from_draws
from ..evidence.rung_moments import check_cv_options
from ..evidence.thermodynamic_integration import TISettings, estimate_from_rungs
from .convert import PowerPosteriorTerms, _StanDensity, from_pystan

__all__ = ["ti_from_pystan", "bridge_from_pystan"]


def bridge_from_pystan(fit, posterior, *, random_seed=None, proposal_draws=None):
    """Log evidence log p(y) of a Stan program from a PyStan fit, by bridge sampling (no new sampling).

    As :func:`pymc_cv.bridge_sampling` for PyMC: Stan's unconstrained draws (``transform_inits``) and
    its log density with the Jacobian (``log_prob``) at them and at the proposals' draws, then
    :func:`pymc_cv.evidence_from_draws`.  Stan's ``log_prob`` drops the normalising constants of ``~``
    statements and ``_lupdf`` calls, which the evidence needs: the program must increment ``target``
    with full densities (``target += normal_lpdf(y | mu, sigma);``), or it is refused.

    Parameters
    ----------
    fit : stan.fit.Fit
    posterior : stan.model.Model
        The model (``stan.build(program_code, data=...)``) that sampled ``fit``.
    random_seed : int, optional
    proposal_draws : int, optional
        As in :func:`pymc_cv.bridge_sampling`.

    Returns
    -------
    PosteriorEvidence
    """
    _check_keeps_constants(posterior.program_code)
    start = time.perf_counter()
    idata = from_pystan(fit, posterior)
    U = np.asarray(compat.group(idata, "unconstrained_posterior")["unconstrained"].transpose("chain", "draw", ...))
    n_chain, n_draw = U.shape[:2]
    X = U.reshape(n_chain * n_draw, -1)
    density = _StanDensity(posterior)

    def log_joint(x):
        with density.batch():
            return np.array([density.log_prob(row) for row in np.asarray(x, dtype=float)])

    stats = compat.group(idata, "sample_stats")
    divergences = int(np.sum(stats["diverging"].values)) if "diverging" in stats else 0
    prepared = time.perf_counter() - start
    res = evidence_from_draws(log_joint, X, np.repeat(np.arange(n_chain), n_draw), rng=random_seed,
                              divergences=divergences, proposal_draws=proposal_draws)
    return dataclasses.replace(res, seconds={"prepare": prepared, **res.seconds})


def _check_keeps_constants(program_code):
    code = re.sub(r"//[^\n]*|/\*.*?\*/|#[^\n]*", "", program_code, flags=re.S)
    dropping = [m.group(0).strip() for m in re.finditer(r"[^;{}]*(~|_lupdf|_lupmf)[^;]*;", code)]
    if dropping:
        raise ValueError(
            f"The Stan program has statements whose normalising constants Stan's log_prob drops "
            f"({dropping[0]!r}{' and others' if len(dropping) > 1 else ''}): the log evidence would be off by "
            "them. Write each as target += ..._lpdf(...) (or _lpmf), e.g. 'y ~ normal(mu, sigma);' as "
            "'target += normal_lpdf(y | mu, sigma);', and sample again.")


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
