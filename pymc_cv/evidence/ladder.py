"""Temperature ladders for thermodynamic integration: the power ladder, its refinement, and a
ladder of even exchange rates for population MCMC.

Refinement follows ZVCV's ``Expand_Temperatures``: the draws of rung t_i, reweighted by
exp((t - t_i) log p(y|x)), show how well they would serve a rung at t; where the conditional
effective sample size (CESS) of that reweighting from one rung to the next falls below a
target, the curve E_t[log p(y|x)] changes fast and new rungs are placed in between.
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import brentq

__all__ = ["power_ladder", "conditional_ess", "refine_ladder", "even_exchange_ladder"]


def power_ladder(n_rungs=31, power=5.0):
    """t_i = ((i - 1) / (n_rungs - 1)) ** power, i = 1..n_rungs: dense near t = 0, where the
    expected log-likelihood changes fastest (Friel and Pettitt 2008; the vv-CV paper uses 31, 5).

    Examples
    --------
    >>> power_ladder(3, 2.0)
    array([0.  , 0.25, 1.  ])
    """
    if int(n_rungs) != n_rungs or n_rungs < 2:
        raise ValueError(f"n_rungs={n_rungs!r}; thermodynamic integration needs an integer >= 2.")
    if not power > 0:
        raise ValueError(f"power={power!r}; use a positive exponent (5 is the usual choice).")
    return np.linspace(0.0, 1.0, int(n_rungs)) ** float(power)


def conditional_ess(loglik, delta, offset=0.0):
    """CESS in (0, 1] of a step of ``delta`` in temperature, from draws with log-likelihoods
    ``loglik`` that are already reweighted by exp(offset * loglik) (Zhou, Johansen and Aston 2016).

    (sum W w)^2 / sum W w^2 with normalised weights W and incremental weights w: 1 when the
    two temperatures agree, small when the draws of one say little about the other.

    Examples
    --------
    >>> import numpy as np
    >>> from pymc_cv.evidence import conditional_ess
    >>> ll = np.random.default_rng(0).normal(-10, 3, size=1000)
    >>> conditional_ess(ll, 0.0), round(conditional_ess(ll, 0.1), 2) < 1
    (1.0, True)
    """
    ll = np.asarray(loglik, dtype=float)
    lW = offset * ll - _logsumexp(offset * ll)
    lw = delta * ll
    return float(np.exp(2 * _logsumexp(lW + lw) - _logsumexp(lW + 2 * lw)))


def _logsumexp(a):
    # scipy's handles signs, weights and axes at ~0.2 ms a call: the bisection above makes hundreds
    top = np.max(a)
    if not np.isfinite(top):
        return top
    return top + np.log(np.sum(np.exp(a - top)))


def refine_ladder(temperatures, logliks, target_cess=0.9, max_new=None):
    """New temperatures to add so that every gap of the ladder has a CESS of at least ``target_cess``.

    Parameters
    ----------
    temperatures : array (w,)
        Increasing, from 0 to 1.
    logliks : sequence of w arrays
        log p(y | x) at the draws of each rung.
    target_cess : float in (0, 1)
    max_new : int, optional
        At most this many new temperatures, taken from the worst gaps first.

    Returns
    -------
    array
        The temperatures to add (possibly empty), sorted.  Within a gap [t_i, t_{i+1}] the new
        rungs are placed by bisection so that each step from t_i has the target CESS.

    Examples
    --------
    A wide log-likelihood spread at t = 0 needs many extra rungs before t = 0.5, a narrow one
    at t = 0.5 few after it:

    >>> import numpy as np
    >>> from pymc_cv.evidence import refine_ladder
    >>> rng = np.random.default_rng(0)
    >>> lls = [rng.normal(-50, 10, 500), rng.normal(-10, 1, 500), rng.normal(-9, 1, 500)]
    >>> new = refine_ladder([0.0, 0.5, 1.0], lls)
    >>> int(np.sum(new < 0.5)), int(np.sum(new > 0.5))
    (10, 1)
    """
    t = np.asarray(temperatures, dtype=float)
    if len(logliks) != t.size:
        raise ValueError(f"{len(logliks)} arrays of log-likelihoods for {t.size} temperatures; give one per rung.")
    if not 0 < target_cess < 1:
        raise ValueError(f"target_cess={target_cess!r}; use a value in (0, 1), e.g. 0.9.")
    new, worst = [], []
    for i in range(t.size - 1):
        ll = np.asarray(logliks[i], dtype=float)
        lo, hi = t[i], t[i + 1]
        cess_gap = conditional_ess(ll, hi - lo)
        while conditional_ess(ll, hi - lo, lo - t[i]) < target_cess:
            # CESS decreases in the step, so the largest acceptable step is a root
            off = lo - t[i]
            step = brentq(lambda s: conditional_ess(ll, s, off) - target_cess, 1e-300, hi - lo,
                          xtol=1e-14 * hi + 1e-300)
            if step <= 1e-12 * (hi - lo):  # the draws of this rung are degenerate
                break
            lo = lo + step
            if hi - lo <= 1e-9 * hi:
                break
            new.append(lo)
            worst.append(cess_gap)
            if len(new) > 10 * t.size:
                break
    new, worst = np.array(new), np.array(worst)
    if max_new is not None and new.size > max_new:
        new = new[np.argsort(worst, kind="stable")[: int(max_new)]]
    return np.sort(new)


def even_exchange_ladder(temperatures, rejection):
    """A ladder of as many rungs, 0 first and 1 last, on which neighbours exchange states equally often.

    The cumulative rejection rate of swaps along the ladder estimates the communication barrier
    Lambda(t) of Syed et al. (2022); the new rungs sit at equal steps of Lambda, interpolated
    linearly between the old ones.  Rungs move towards where swaps were rejected.

    Parameters
    ----------
    temperatures : array (w,)
    rejection : array (w - 1,)
        1 - the mean acceptance probability of swaps between rungs k and k + 1.

    Examples
    --------
    >>> even_exchange_ladder([0.0, 0.5, 1.0], [0.9, 0.1]).round(3)     # swaps fail near 0: move in
    array([0.   , 0.278, 1.   ])
    """
    t = np.asarray(temperatures, dtype=float)
    r = np.asarray(rejection, dtype=float)
    if r.shape != (t.size - 1,):
        raise ValueError(f"rejection has shape {r.shape}; give one rate per neighbouring pair ({t.size - 1},).")
    if t.size < 3 or not np.all(np.isfinite(r)) or r.sum() <= 0:
        return t.copy()  # nothing to even out (or nothing measured)
    # a floor keeps Lambda strictly increasing where every swap was accepted
    barrier = np.concatenate([[0.0], np.cumsum(np.clip(r, 1e-3, 1.0))])
    new = np.interp(np.linspace(0.0, barrier[-1], t.size), barrier, t)
    new[0], new[-1] = t[0], t[-1]
    return new
