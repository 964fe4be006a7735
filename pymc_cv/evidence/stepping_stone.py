"""The stepping-stone estimator (Xie et al. 2011), for the part of a ladder where TI's integrand is singular.

log Z(t_k) - log Z(t_0) = sum_i log E_{t_i}[p(y|x)^(t_{i+1} - t_i)]: each step is a mean of
importance weights exp((t_{i+1} - t_i) log p(y|x)) over the draws of the lower rung.  Those weights
lie in (0, max], so every step is finite even where E_t[log p(y|x)] is not.  That happens at the
prior end of the ladder whenever the prior puts mass where the likelihood vanishes: under a
HalfNormal scale sigma, log p(y|x) ~ -1 / sigma^2 near sigma = 0, E_0[log p(y|x)] = -infinity, and
TI's integrand has an integrable singularity at t = 0 that no quadrature over a finite ladder sees.

The first steps lean on the rare draws near the likelihood's zero (sigma near 0), which an MCMC run
at a small t visits too seldom or too often (on the README model, a 16-rung population run's stones
were 3 se off).  Given independent draws of the prior, those steps are taken at once
by importance sampling from the prior, log Z(t_j) = log E_0[p(y|x)^t_j]: bounded weights and
independent draws, so an unbiased ratio with an honest se, as far up the ladder as their ESS allows.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..core.external import diagnostics
from ..core.standard_errors import KHAT_THRESHOLD, mcse_mean, tail_khat

__all__ = ["SteppingStone", "stepping_stone", "prior_importance", "prior_reach", "singular_start",
           "SINGULAR_KHAT", "PRIOR_MIN_ESS", "PRIOR_TI_ESS"]

# Pareto k-hat of the lower tail of log p(y|x) at a rung above this: its variance is infinite, so
# the rung's mean (TI's integrand) has no honest se there
SINGULAR_KHAT = 0.5

# importance sampling from the prior reaches up to the last rung whose weights keep this share of
# the prior draws as effective sample size (and at least PRIOR_MIN_DRAWS effective draws)
PRIOR_MIN_ESS = 0.1
PRIOR_MIN_DRAWS = 100
# ... and TI starts no lower than the last rung where they keep half: there the prior's draws are about
# as precise as the rungs', while TI's quadrature next to the singular end is not
PRIOR_TI_ESS = 0.5


@dataclass
class SteppingStone:
    """log Z(t_k) - log Z(t_0) over a ladder t_0 < ... < t_k, step by step.

    ``log_ratios`` and ``ratio_se`` (k,) per step; ``se`` adds the steps' se in quadrature (the rungs
    are sampled independently); ``khat`` (k,) the PSIS k-hat of each step's weights and
    ``reliable`` False where one is above 0.7.  ``prior_steps``: how many of the first steps were
    taken by importance sampling from ``prior_draws`` independent prior draws (their ``ratio_se`` and
    ``khat`` are nan: the se of those steps together is ``prior_se``); ``prior_loglik`` the prior
    draws' log p(y|x), or None.
    """

    log_evidence: float
    se: float
    log_ratios: np.ndarray
    ratio_se: np.ndarray
    khat: np.ndarray
    reliable: bool
    prior_steps: int = 0
    prior_draws: int = 0
    prior_se: float = np.nan
    prior_loglik: np.ndarray | None = None


def prior_importance(temperatures, prior_loglik):
    """log Z(t) = log E_0[exp(t log p(y|x))] at each temperature from independent prior draws.

    Parameters
    ----------
    temperatures : array (k,)
        Non-negative.
    prior_loglik : array (n,)
        log p(y|x) at n independent draws of the prior.

    Returns
    -------
    log_z, se, ess : arrays (k,)
        The estimates, their delta-method standard errors and the weights' effective sample sizes.

    Examples
    --------
    x ~ N(0, 1), y = 0 ~ N(x, 1): Z(t) = (2 pi)^(-t/2) (1 + t)^(-1/2).

    >>> import numpy as np
    >>> x = np.random.default_rng(0).normal(size=4000)
    >>> log_z, se, ess = prior_importance([0.5, 1.0], -0.5 * np.log(2 * np.pi) - 0.5 * x**2)
    >>> exact = -0.5 * np.array([0.5, 1.0]) * np.log(2 * np.pi) - 0.5 * np.log1p([0.5, 1.0])
    >>> bool(np.all(np.abs(log_z - exact) < 3 * se)), bool(np.all(ess > 3000))
    (True, True)
    """
    t = np.asarray(temperatures, dtype=float)
    ll = np.asarray(prior_loglik, dtype=float)
    if ll.ndim != 1 or ll.size < 2 or not np.all(np.isfinite(ll) | (ll == -np.inf)):
        raise ValueError("prior_loglik must be a 1-d array of log-likelihoods (finite or -inf) at >= 2 prior draws.")
    top = ll.max()
    if not np.isfinite(top):
        raise ValueError("prior_loglik is -inf at every prior draw: the data are impossible under all of them.")
    w = np.exp(np.outer(t, ll - top))  # in [0, 1]: no overflow, whatever the scale of log p(y|x)
    mean = w.mean(axis=1)
    log_z = t * top + np.log(mean)
    se = w.std(axis=1, ddof=1) / np.sqrt(ll.size) / mean
    ess = w.sum(axis=1) ** 2 / np.sum(w**2, axis=1)
    return log_z, se, ess


def prior_reach(temperatures, prior_loglik, share=PRIOR_TI_ESS):
    """Index of the last rung of a ladder from t = 0 that importance sampling from the prior's draws reaches
    with an ESS of at least ``share`` of them (0 when not even the first)."""
    t = np.asarray(temperatures, dtype=float)
    _, _, ess = prior_importance(t[1:], prior_loglik)
    ok = ess >= share * np.asarray(prior_loglik).size
    return t.size - 1 if ok.all() else int(np.argmin(ok))


def stepping_stone(temperatures, loglik, chain=None, prior_loglik=None):
    """Stepping-stone estimate of log Z(t_k) - log Z(t_0) from the draws of rungs 0..k-1.

    Parameters
    ----------
    temperatures : array (k + 1,)
        Increasing; with t_0 = 0 (the prior, whose normalising constant is 1) the result is log Z(t_k).
    loglik : sequence of at least k arrays (m_i,)
        log p(y|x) at the draws of each rung (the last rung's draws are not used).
    chain : sequence of arrays or None, optional
        Chain labels of each rung's draws (ESS-based se).
    prior_loglik : array (n,) or None, optional
        log p(y|x) at independent draws of the prior (needs t_0 = 0).  The steps up to the last rung
        t_j where their importance weights keep an ESS of ``PRIOR_MIN_ESS`` n (and at least
        ``PRIOR_MIN_DRAWS``) are then one importance-sampling estimate of log Z(t_j) (see
        :func:`prior_importance`); the rungs' own draws take the steps above t_j.

    Returns
    -------
    SteppingStone

    Examples
    --------
    x ~ N(0, 1), y = 0 ~ N(x, 1): p_t(x) = N(0, 1 / (1 + t)) and log p(y) = -log(4 pi) / 2.

    >>> import numpy as np
    >>> from pymc_cv.evidence.stepping_stone import stepping_stone
    >>> rng = np.random.default_rng(0)
    >>> t = np.linspace(0, 1, 11)
    >>> ll = [-0.5 * np.log(2 * np.pi) - 0.5 * rng.normal(0, (1 + ti) ** -0.5, 2000) ** 2 for ti in t]
    >>> ss = stepping_stone(t, ll)
    >>> bool(abs(ss.log_evidence + 0.5 * np.log(4 * np.pi)) < 3 * ss.se < 0.05)
    True
    """
    t = np.asarray(temperatures, dtype=float)
    if t.ndim != 1 or t.size < 2 or not np.all(np.diff(t) > 0):
        raise ValueError("temperatures must be a strictly increasing 1-d array of at least 2 values.")
    k = t.size - 1
    if len(loglik) < k:
        raise ValueError(f"`loglik` holds {len(loglik)} arrays; the {k} steps need the draws of rungs 0 to {k - 1}.")
    log_r, se, khat = np.empty(k), np.empty(k), np.empty(k)
    j, prior_se, n_prior = 0, np.nan, 0
    if prior_loglik is not None:
        if t[0] != 0.0:
            raise ValueError(f"prior_loglik needs a ladder that starts at the prior (t = 0), not t = {t[0]:g}.")
        log_z, z_se, ess = prior_importance(t[1:], prior_loglik)
        n_prior = np.asarray(prior_loglik).size
        enough = (ess >= PRIOR_MIN_ESS * n_prior) & (ess >= PRIOR_MIN_DRAWS)
        # the steps from 0 up to the first rung the prior's draws cannot reach, in one estimate
        j = k if enough.all() else int(np.argmin(enough))
        if j:
            log_r[:j] = np.diff(np.r_[0.0, log_z[:j]])
            se[:j] = khat[:j] = np.nan
            prior_se = float(z_se[j - 1])
    for i in range(j, k):
        ll = np.asarray(loglik[i], dtype=float)
        log_w = (t[i + 1] - t[i]) * (ll - ll.max())
        w = np.exp(log_w)
        c = None if chain is None or chain[i] is None else np.asarray(chain[i])
        log_r[i] = (t[i + 1] - t[i]) * ll.max() + np.log(w.mean())
        se[i] = mcse_mean(w, c) / w.mean() if np.ptp(w) > 0 else 0.0  # delta method for the log
        khat[i] = diagnostics().psis_khat(log_w) if ll.size >= 25 and np.ptp(w) > 0 else np.nan
    total_se = float(np.sqrt(np.sum(se[j:] ** 2) + (prior_se**2 if j else 0.0)))
    return SteppingStone(float(log_r.sum()), total_se, log_r, se, khat, bool(np.all(~(khat > KHAT_THRESHOLD))),
                         prior_steps=j, prior_draws=n_prior, prior_se=prior_se,
                         prior_loglik=None if prior_loglik is None else np.asarray(prior_loglik, dtype=float))


def singular_start(loglik):
    """Index of the first rung where TI can start: the first of two consecutive rungs whose log
    p(y|x) has a lower tail of finite variance (Pareto k-hat <= ``SINGULAR_KHAT``); 0 when rungs 0 and
    1 do.  Two, because the singularity sits at the prior end and the tails lighten as t grows,
    while one rung's k-hat from a few hundred draws can land above 0.5 by chance.  Rungs of fewer
    than 25 draws are not judged (taken as light)."""
    light = [not (_lower_tail_khat(ll) > SINGULAR_KHAT) for ll in loglik]
    for i in range(len(light)):
        if light[i] and (i + 1 == len(light) or light[i + 1]):
            return i
    return len(light)


def _lower_tail_khat(loglik):
    ll = np.asarray(loglik, dtype=float)
    if ll.ndim != 1 or not np.all(np.isfinite(ll)):
        return np.nan  # the rung checks say what is wrong with it
    # tail_khat fits the upper tail of the square of its input: here the distance below the largest value
    return tail_khat(np.sqrt(ll.max() - ll)) if ll.size >= 25 else np.nan
