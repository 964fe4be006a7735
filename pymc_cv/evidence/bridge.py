"""Log evidence by bridge sampling from posterior draws the user already has.

Bridge sampling (Meng & Wong 1996) estimates p(y) = int q(x) dx, q(x) = p(y|x) p(x), from draws of
the posterior and of a proposal g:

    p(y) = E_g[q h] / E_post[g h]

for any bridge function h; the optimal one, h = 1 / (s1 q + s2 p(y) g), depends on p(y) itself and is
found by fixed-point iteration.  Its two integrands are bounded, so the estimate has finite variance
whatever the proposal's tails, unlike importance sampling.  As the R package bridgesampling (Gronau et
al. 2017) does, g is a multivariate normal fitted to the first half of each chain, and the second
halves enter the estimator, so that g does not depend on the draws it is compared with; s1 uses the
effective sample size of those draws.  The se is Fruehwirth-Schnatter's (2004) relative error, with the
posterior term's variance divided by its ESS (ArviZ) rather than by the number of draws.

Everything here works on unconstrained draws and a log joint density on the same space (Jacobian
included); :mod:`pymc_cv.pymc.evidence` and :mod:`pymc_cv.stan.evidence` supply them from a model.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, NamedTuple

import numpy as np
from scipy import stats
from scipy.special import logsumexp

from ..core.estimate import cv_estimate
from ..core.external import diagnostics

__all__ = ["BridgeProposal", "BridgeEstimate", "BridgeIntegrands", "fit_bridge_proposal", "bridge_from_arrays",
           "bridge_evidence", "bridge_with_cvs", "BRIDGE_MIN_DRAWS"]

# proposal draws at least this many, and as many as the posterior draws in the estimator beyond it
BRIDGE_MIN_DRAWS = 4_000
_TOL = 1e-10
_MAX_ITER = 1_000


class BridgeProposal(NamedTuple):
    """The normal proposal of bridge sampling and how the posterior draws were split.

    Attributes
    ----------
    mean : array (d,)
    cov : array (d, d)
        Mean and covariance of the fitting half of the draws.
    fit : array of bool (n,)
        Which posterior draws fitted the proposal (the first half of each chain); the others enter
        the estimator.
    """

    mean: np.ndarray
    cov: np.ndarray
    fit: np.ndarray

    def logpdf(self, x):
        return stats.multivariate_normal(self.mean, self.cov, allow_singular=False).logpdf(x).reshape(-1)

    def draw(self, n, rng):
        return np.asarray(stats.multivariate_normal(self.mean, self.cov).rvs(n, random_state=rng)).reshape(n, -1)


class BridgeIntegrands(NamedTuple):
    """The optimal bridge's two integrands at the converged estimate.

    log p(y) = ``shift`` + log mean(``proposal_values``) - log mean(``posterior_values``): the first at
    the proposal's draws ``proposal_draws`` (k, d), the second at the posterior draws in the estimator.
    """

    proposal_draws: np.ndarray
    proposal_values: np.ndarray
    posterior_values: np.ndarray
    shift: float


@dataclass(frozen=True)
class BridgeEstimate:
    """log p(y) by bridge sampling.

    Attributes
    ----------
    log_evidence, se : float
        The estimate and its se (relative error of p(y), which is the se of log p(y)).
    posterior_draws, proposal_draws : int
        Draws of each kind in the estimator.
    ess : float
        ESS of the posterior integrand, which replaces ``posterior_draws`` in the optimal bridge
        and the se.
    iterations : int
        Fixed-point iterations until the estimate moved less than 1e-10 (relative).
    usable : bool
        Finite estimate and se, and the iteration converged.
    integrands : BridgeIntegrands or None
        The two integrands, for control variates (:func:`bridge_with_cvs`).
    """

    log_evidence: float
    se: float
    posterior_draws: int
    proposal_draws: int
    ess: float
    iterations: int
    usable: bool
    integrands: BridgeIntegrands | None = field(default=None, repr=False, compare=False)


def fit_bridge_proposal(draws, chain=None):
    """The :class:`BridgeProposal` of unconstrained posterior ``draws`` (n, d) with ``chain`` (n,)
    indices (None: one chain): a normal at the mean and covariance of each chain's first half.

    Raises ValueError when the fitting half cannot define a normal (fewer than 2 (d + 1) draws, or a
    singular covariance, as with a parameter that never moved)."""
    X = as_draws(draws)
    chain = chain_index(chain, X.shape[0])
    fit = np.zeros(X.shape[0], dtype=bool)
    for c in np.unique(chain):
        where = np.flatnonzero(chain == c)
        fit[where[: where.size // 2]] = True
    n_fit, d = int(fit.sum()), X.shape[1]
    if n_fit < 2 * (d + 1) or (~fit).sum() < 2:
        raise ValueError(f"{X.shape[0]} draws of {d} parameters: bridge sampling fits a normal to half of them and "
                         f"needs at least {4 * (d + 1)} draws; sample more.")
    mean = X[fit].mean(axis=0)
    cov = np.cov(X[fit], rowvar=False).reshape(d, d)
    try:
        np.linalg.cholesky(cov)
    except np.linalg.LinAlgError:
        raise ValueError("the posterior draws' covariance is singular (a parameter that does not move, or two that "
                         "are copies of each other): bridge sampling cannot fit its normal proposal.") from None
    return BridgeProposal(mean, cov, fit)


def bridge_from_arrays(proposal, posterior_log_joint, posterior_chain, proposal_draws_log_joint,
                       proposal_draws_logpdf, posterior_logpdf, proposal_draws=None):
    """:class:`BridgeEstimate` from log densities already evaluated.

    Parameters
    ----------
    proposal : BridgeProposal
    posterior_log_joint : array (m,)
        log p(y|x) + log p(x) at the posterior draws that did not fit the proposal (``~proposal.fit``),
        in their order.
    posterior_chain : array (m,)
        Their chain indices (for the ESS).
    proposal_draws_log_joint, proposal_draws_logpdf : array (k,)
        log p(y|x) + log p(x) and the proposal's log density at ``proposal.draw(k, rng)``.
    posterior_logpdf : array (m,)
        The proposal's log density at the same posterior draws.
    proposal_draws : array (k, d), optional
        The proposal's draws, kept in the result's ``integrands`` for control variates.
    """
    l1 = _finite(np.asarray(posterior_log_joint, dtype=float) - np.asarray(posterior_logpdf, dtype=float))
    l2 = _finite(np.asarray(proposal_draws_log_joint, dtype=float) - np.asarray(proposal_draws_logpdf, dtype=float))
    m, k = l1.size, l2.size
    if np.any(l1 == -np.inf):
        # a posterior draw outside the support of the model: the draws are not this model's
        return BridgeEstimate(np.nan, np.nan, m, k, np.nan, 0, False)
    shift = float(np.median(l1))
    l1, l2 = l1 - shift, l2 - shift
    chain = np.asarray(posterior_chain)
    ess = min(float(m), _ess(l1, chain))
    log_s1, log_s2 = np.log(ess / (ess + k)), np.log(k / (ess + k))
    log_r, iterations, converged = 0.0, 0, False
    for iterations in range(1, _MAX_ITER + 1):
        num = logsumexp(l2 - np.logaddexp(log_s1 + l2, log_s2 + log_r)) - np.log(k)
        den = logsumexp(-np.logaddexp(log_s1 + l1, log_s2 + log_r)) - np.log(m)
        new = float(num - den)
        converged = abs(new - log_r) < _TOL
        log_r = new
        if converged:
            break
    # Fruehwirth-Schnatter (2004): the relative squared error of p(y), the posterior term over its ESS
    f1 = np.exp(l2 - np.logaddexp(log_s1 + l2, log_s2 + log_r))
    f2 = np.exp(-np.logaddexp(log_s1 + l1, log_s2 + log_r))
    ess_f2 = min(float(m), _ess(f2, chain))
    rel2 = np.var(f1) / np.mean(f1) ** 2 / k + np.var(f2) / np.mean(f2) ** 2 / ess_f2
    log_z, se = float(log_r + shift), float(np.sqrt(rel2))
    usable = bool(converged and np.isfinite(log_z) and np.isfinite(se))
    integrands = None if proposal_draws is None else BridgeIntegrands(np.asarray(proposal_draws), f1, f2, shift)
    return BridgeEstimate(log_z, se, m, k, ess_f2, iterations, usable, integrands)


def bridge_evidence(log_joint: Callable, draws, chain=None, *, rng=None, proposal_draws=None,
                    draws_log_joint=None):
    """log p(y) by bridge sampling from unconstrained posterior draws.

    Parameters
    ----------
    log_joint : callable
        (n, d) -> (n,) log p(y|x) + log p(x) on the draws' space (Jacobian included), -inf outside
        the support; called once on the proposal's draws (and once on the posterior draws unless
        ``draws_log_joint`` is given).
    draws : array (n, d)
    chain : array (n,), optional
        Chain index of each draw, draws of a chain in order (None: one chain).
    rng : numpy Generator or seed, optional
    proposal_draws : int, optional
        Default: as many as the posterior draws in the estimator, at least ``BRIDGE_MIN_DRAWS``.
    draws_log_joint : array (n,), optional
        ``log_joint`` at ``draws`` when it is known (e.g. the sampler's recorded ``lp``).

    Returns
    -------
    (BridgeEstimate, BridgeProposal)

    Examples
    --------
    A normal mean with known noise: p(y) is a normal density.

    >>> import numpy as np
    >>> from scipy import stats
    >>> y, rng = 0.7, np.random.default_rng(0)
    >>> post = rng.normal(y / 2, np.sqrt(0.5), size=(4000, 1))     # x ~ N(0, 1), y ~ N(x, 1)
    >>> def log_joint(x):
    ...     return stats.norm.logpdf(x[:, 0]) + stats.norm.logpdf(y, x[:, 0])
    >>> est, _ = bridge_evidence(log_joint, post, rng=1)
    >>> exact = stats.norm.logpdf(y, 0, np.sqrt(2))
    >>> bool(abs(est.log_evidence - exact) < 3 * est.se < 0.01)
    True
    """
    X = as_draws(draws)
    chain = chain_index(chain, X.shape[0])
    rng = np.random.default_rng(rng)
    proposal = fit_bridge_proposal(X, chain)
    rest = ~proposal.fit
    m = int(rest.sum())
    k = max(m, BRIDGE_MIN_DRAWS) if proposal_draws is None else int(proposal_draws)
    if k < 2:
        raise ValueError(f"proposal_draws={proposal_draws!r}; use at least 2 (default: {BRIDGE_MIN_DRAWS} or more).")
    if draws_log_joint is None:
        post_lj = np.asarray(log_joint(X[rest]), dtype=float).reshape(-1)
    else:
        post_lj = np.asarray(draws_log_joint, dtype=float).reshape(-1)
        if post_lj.size != X.shape[0]:
            raise ValueError(f"draws_log_joint has {post_lj.size} values for {X.shape[0]} draws; give one per draw.")
        post_lj = post_lj[rest]
    x = proposal.draw(k, rng)
    est = bridge_from_arrays(proposal, post_lj, chain[rest], np.asarray(log_joint(x), dtype=float).reshape(-1),
                             proposal.logpdf(x), proposal.logpdf(X[rest]), proposal_draws=x)
    return est, proposal


def bridge_with_cvs(est, proposal, posterior_draws, posterior_scores, posterior_chain):
    """The bridge estimate ``est`` with each of its two means by Stein control variates
    (:func:`pymc_cv.cv_estimate`, method "auto"): the proposal's integrand with the normal proposal's own
    score, the posterior's with ``posterior_scores`` (the log joint density's gradient) at
    ``posterior_draws``, the draws in the estimator (``~proposal.fit``), with their ``posterior_chain``.

    The bridge function stays the one the plain estimate converged to: any bridge function gives a
    consistent estimate, so only the two means change.  Returns a :class:`BridgeEstimate` whose ``usable``
    is False where either fit's se is not reliable or a mean is not positive; ``iterations`` is 0.
    """
    terms = est.integrands
    if terms is None or not est.usable:
        return None
    x = terms.proposal_draws
    proposal_scores = -np.linalg.solve(proposal.cov, (x - proposal.mean).T).T
    g = cv_estimate(terms.proposal_values[:, None], x, proposal_scores, method="zv")
    p = cv_estimate(terms.posterior_values[:, None], np.asarray(posterior_draws, dtype=float),
                    np.asarray(posterior_scores, dtype=float), method="zv", chain=np.asarray(posterior_chain))
    m1, m2 = float(g.estimate[0]), float(p.estimate[0])
    if m1 <= 0 or m2 <= 0:
        return BridgeEstimate(np.nan, np.nan, est.posterior_draws, est.proposal_draws, est.ess, 0, False)
    log_z = terms.shift + np.log(m1) - np.log(m2)
    se = float(np.hypot(g.se[0] / m1, p.se[0] / m2))
    usable = bool(g.se_reliable[0] and p.se_reliable[0] and np.isfinite(log_z) and np.isfinite(se))
    return BridgeEstimate(float(log_z), se, est.posterior_draws, est.proposal_draws, est.ess, 0, usable)


def as_draws(draws):
    X = np.asarray(draws, dtype=float)
    if X.ndim == 1:
        X = X[:, None]
    if X.ndim != 2:
        raise ValueError(f"draws of shape {X.shape}; give (n, d) unconstrained draws.")
    if not np.all(np.isfinite(X)):
        raise ValueError("the draws hold non-finite values; drop those draws (a sampler that failed) first.")
    return X


def chain_index(chain, n):
    if chain is None:
        return np.zeros(n, dtype=int)
    chain = np.asarray(chain)
    if chain.shape != (n,):
        raise ValueError(f"chain has shape {chain.shape} for {n} draws; give one chain index per draw.")
    return chain


def _finite(a):
    # NaN log densities (outside a support PyTensor does not guard) count as zero density
    return np.where(np.isnan(a), -np.inf, a)


def _ess(values, chain):
    """ESS of the mean of ``values`` over its chains (equal-length chains; else one chain)."""
    labels, counts = np.unique(chain, return_counts=True)
    if counts.min() != counts.max() or counts.min() < 4:
        ary = values[None, :]
    else:
        ary = np.stack([values[chain == c] for c in labels])
    ess = float(diagnostics().ess_mean(ary))
    return ess if np.isfinite(ess) and ess > 0 else 1.0
