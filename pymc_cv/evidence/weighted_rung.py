"""Moments of log p(y|x) at a rung whose draws carry importance weights.

Two sources of weighted draws: SMC particles before resampling, and the draws of a sampled rung
t_i reweighted by exp((t - t_i) log p(y|x)) onto a temperature t that was never sampled (ZVCV's
``Expand_Temperatures``).  Both estimate E_t by self-normalised importance sampling, and the
zero-variance CVs of controlled TI carry over as weighted least squares: the Stein features
still have mean zero under the target, and the weighted intercept is the estimate.

Standard errors linearise the ratio estimator: with normalised weights W_i and held-out
residuals r_i, the error is about sum_i W_i r_i, whose MCSE is that of z_i = n W_i r_i (ESS
over the chains of the draws, from ArviZ).  The order of the ZV-CV (0 = plain weighted average,
1-3) is chosen per integrand by that held-out se, as ``cti`` chooses it for unweighted rungs.
"""

from __future__ import annotations

import numpy as np
from scipy import linalg

from ..core.external import diagnostics
from ..core.heldout import fold_labels, projection_deletion_residuals
from ..core.polynomial import n_polynomial_features, stein_polynomial_features
from ..core.standard_errors import KHAT_THRESHOLD, mcse_mean
from ..core.threads import single_threaded_when_small

__all__ = ["normalized_weights", "weighted_moments"]


def normalized_weights(weights, n, where=""):
    """Weights (n,) scaled to sum to one; a clear error for a wrong length, NaN, negative or all zero."""
    w = np.asarray(weights, dtype=float)
    if w.shape != (n,):
        raise ValueError(f"weights{where} have shape {w.shape}; give one weight per draw ({n},).")
    if not np.all(np.isfinite(w)) or np.any(w < 0):
        raise ValueError(f"weights{where} must be finite and non-negative; pass importance weights (not log "
                         "weights: exponentiate after subtracting their maximum).")
    if not w.sum() > 0:
        raise ValueError(f"weights{where} are all zero; at least one draw must carry weight.")
    return w / w.sum()


def _weighted_fit(D, Y, W, labels):
    """Weighted least squares of every column of Y on D: intercepts (k,) and held-out residuals (n, k)."""
    sw = np.sqrt(W)[:, None]
    Qm, R = np.linalg.qr(D * sw)
    coef = linalg.solve_triangular(R, Qm.T @ (Y * sw), check_finite=False)
    e = (Y - D @ coef) * sw
    resid, _ = projection_deletion_residuals(e, Qm, labels)
    return coef[0], resid / sw


def _weights_khat(log_w):
    """PSIS k-hat of the weights; nan when there is no tail to fit (under 25 draws, or the largest
    weights all equal, e.g. equal weights), where ArviZ 0.x says inf and arviz-stats raises."""
    n = log_w.size
    tail = int(np.ceil(min(0.2 * n, 3 * np.sqrt(n)))) + 1
    if n < 25 or np.ptp(np.sort(log_w)[-tail:]) == 0:
        return np.nan
    try:
        return diagnostics().psis_khat(log_w)
    except ValueError:  # arviz-stats: "All tail values are the same" (ties within the tail)
        return np.nan


# order 3 is tried up to this many features (d <= 6): in 10 dimensions its 285 features took 40% of the
# estimation of SMC evidence on eight schools (0.44 -> 0.29 s without it) and moved the log evidence by
# at most 0.009 nats, within its se (bench/evidence.py)
_MAX_ORDER3_FEATURES = 100


def _orders(n, d, max_order):
    # an order is tried when the draws with weight are at least twice its number of coefficients
    def tried(o):
        q = n_polynomial_features(d, o)
        return n > 2 * (1 + q) and (o < 3 or q <= _MAX_ORDER3_FEATURES)

    return [o for o in range(max_order + 1) if o == 0 or tried(o)]


@single_threaded_when_small(lambda loglik, *args, **kwargs: np.size(loglik))
def weighted_moments(loglik, samples, score, weights, *, chain=None, center=None, zv=True, folds=10, max_order=3):
    """E_t[l] and E_t[(l - center)^2] of l = log p(y|x) from weighted draws.

    Parameters
    ----------
    loglik : array (n,)
    samples, score : arrays (n, d)
        The draws and the score of the target rung, t grad log p(y|x) + grad log p(x).
    weights : array (n,)
        Importance weights of the draws for the target rung (any scale).
    chain : array (n,), optional
        Chain labels when the draws are MCMC output (held out in blocks, ESS-based se).
    center : float, optional
        Centre of the second moment (default: the weighted mean of ``loglik``).
    zv : bool
        Weighted ZV-CVs of order 1-3 (chosen per moment by held-out se, the plain weighted
        average included); False: the weighted average only.

    Returns
    -------
    dict
        ``est``, ``se``, ``mc_est``, ``mc_se`` (each (2,): mean, second moment), ``center``,
        ``method`` (of the mean), ``khat`` (PSIS k-hat of the weights), ``ess`` (Kish's
        effective sample size) and ``notes``.

    Examples
    --------
    Draws of N(0, 1) weighted onto N(0, 1/2): l = -x^2 / 2 is quadratic, so weighted ZV-2 is exact.

    >>> import numpy as np
    >>> from pymc_cv.evidence.weighted_rung import weighted_moments
    >>> x = np.random.default_rng(0).normal(size=(400, 1))
    >>> ll = -0.5 * x[:, 0] ** 2
    >>> out = weighted_moments(ll, x, -2 * x, np.exp(ll))
    >>> bool(abs(out["est"][0] + 0.25) < 1e-10), out["method"]
    (True, 'zv2')
    """
    ll = np.asarray(loglik, dtype=float)
    X = np.asarray(samples, dtype=float).reshape(ll.size, -1)
    S = np.asarray(score, dtype=float).reshape(X.shape)
    W = normalized_weights(weights, ll.size)
    keep = W > 0  # zero-weight draws say nothing about this rung
    ll, X, S, W = ll[keep], X[keep], S[keep], W[keep]
    chain = None if chain is None else np.asarray(chain)[keep]
    n = ll.size
    center = float(W @ ll) if center is None else float(center)
    Y = np.column_stack([ll, (ll - center) ** 2])
    labels = fold_labels(n, chain, folds)
    best = None
    for order in _orders(n, X.shape[1], max_order if zv else 0):
        D = np.ones((n, 1)) if order == 0 else np.column_stack([np.ones(n), stein_polynomial_features(X, S, order)])
        est, resid = _weighted_fit(D, Y, W, labels)
        se = np.array([mcse_mean(n * W * resid[:, k], chain) for k in range(2)])
        if order == 0:
            mc = (est, se)
            best = (est.copy(), se.copy(), np.array(["mc", "mc"], dtype=object))
            continue
        # a higher order must gain more than noise (exact fits tie at rounding level)
        better = se < 0.99 * best[1] - 1e-10 * mc[1]
        best[0][better], best[1][better], best[2][better] = est[better], se[better], f"zv{order}"
    ess = float(1.0 / np.sum(W**2))
    khat = _weights_khat(np.log(W))
    notes = []
    if np.isfinite(khat) and khat > KHAT_THRESHOLD:
        notes.append(f"the importance weights are heavy-tailed (PSIS k-hat {khat:.2f} > {KHAT_THRESHOLD}, Kish "
                     f"ESS {ess:.0f} of {n}): the weighted estimate and its se are unreliable.")
    return {"est": best[0], "se": best[1], "mc_est": mc[0], "mc_se": mc[1], "center": center,
            "method": str(best[2][0]), "khat": khat, "ess": ess, "notes": notes}
