"""Generalised least squares with a kernel covariance, and its restricted likelihood.

Every kernel CV here (control functionals, semi-exact CFs, vv-CVs) is the
same problem: y = P beta + g + noise with g ~ GP(0, K0) and a flat prior on
beta, where P holds the intercept(s) and, for semi-exact CVs, the Stein
polynomial features.  The estimates are the intercepts in beta.
"""

from __future__ import annotations

import numpy as np
from scipy import linalg
from scipy.linalg import blas, lapack

__all__ = ["RankDeficientDesignError", "cholesky_jitter", "lower_solve", "gls_solve", "gls_from_solves",
           "restricted_loglik", "restricted_loglik_value", "reml_projector", "loo_residuals"]


class RankDeficientDesignError(ValueError):
    """The intercept/polynomial design of a GLS fit is rank deficient for these draws (P' C^-1 P
    cannot be factorised): a design of lower polynomial order may still be fitted."""


# a pivot L_ii^2 below this share of C_ii: column i is collinear with the earlier ones to within
# rounding, and the factor, though computed, solves nothing (an inducing-point SECF normal matrix
# factorised with pivot ratios 2e-15 gave coefficients 5,000 se off; with 1e-10 jitter, correct)
_MIN_PIVOT = 1e-12


def cholesky_jitter(C, max_tries=10):
    """Lower Cholesky factor of C, adding jitter * mean(diag C) to the diagonal only if needed:
    when the factorisation fails, or when a pivot L_ii^2 is below 1e-12 of C_ii (numerically
    singular; the last jitter is kept whatever its pivots).

    Returns ``(L, jitter)``; raises ``ValueError`` if C is not finite or not
    positive definite even with 1e-2 relative jitter.

    Examples
    --------
    >>> import numpy as np
    >>> C = np.array([[1.0, 1.0], [1.0, 1.0 + 1e-14]])   # factorises, with pivot L_22^2 = 1e-14
    >>> L, jitter = cholesky_jitter(C)
    >>> jitter, bool(L[1, 1] ** 2 >= 1e-12)
    (1e-10, True)
    """
    if not np.all(np.isfinite(C)):
        raise ValueError(
            "The kernel matrix contains NaN or inf. Check that samples and scores are finite "
            "and of moderate size (standardize=True helps), or pick another kernel."
        )
    scale = float(np.mean(np.diag(C)))
    if not scale > 0:
        raise ValueError("The kernel matrix has a non-positive diagonal; the kernel is degenerate.")
    # 0, then 1e-10, 1e-9, ..., 1e-2 relative to the mean diagonal
    jitters = [0.0] + [1e-10 * 10.0**i for i in range(max_tries - 1)]
    for jitter in jitters:
        try:
            A = C if jitter == 0.0 else C + (jitter * scale) * np.eye(C.shape[0])
            L = linalg.cholesky(A, lower=True, check_finite=False)
        except linalg.LinAlgError:
            continue
        if jitter == jitters[-1] or np.min(np.diag(L) ** 2 / np.diag(A)) >= _MIN_PIVOT:
            return L, jitter
    if max_tries == 1:
        raise ValueError("The kernel matrix is not numerically positive definite without jitter.")
    raise ValueError(
        "The kernel matrix is not positive definite even with jitter 1e-2 x its mean diagonal. "
        "Duplicate draws or a lengthscale far too large are the usual causes; increase `nugget`."
    )


def lower_solve(L, B, overwrite_b=False):
    """L^-1 B for a lower-triangular L (m, m) and B (m, n), by BLAS ``dtrsm``.

    For panels of many right-hand sides (n draws) this ran 2-3x faster than ``solve_triangular``
    (N = 20,000, M = 1,066: 0.32 s against 0.72-1.08 s, the same numbers): LAPACK's ``trtrs``
    path copies both operands and checks the diagonal first.  ``B`` given in Fortran order (the
    transpose of a C-ordered (n, m) array) and ``overwrite_b=True`` is solved in place.

    Examples
    --------
    >>> import numpy as np
    >>> from scipy import linalg
    >>> L = np.linalg.cholesky(np.array([[4.0, 2.0], [2.0, 3.0]]))
    >>> B = np.arange(6.0).reshape(2, 3)
    >>> bool(np.allclose(lower_solve(L, B), linalg.solve_triangular(L, B, lower=True)))
    True
    """
    return blas.dtrsm(1.0, np.asfortranarray(L), B, lower=1, overwrite_b=overwrite_b)


def _factor_design(M):
    """The Cholesky factor (upper, for ``cho_solve``) of P' C^-1 P, or ``RankDeficientDesignError``."""
    try:
        return linalg.cho_factor(M, lower=False, check_finite=False)
    except linalg.LinAlgError:
        raise RankDeficientDesignError(
            "The polynomial/intercept design is rank deficient for these draws: use a lower "
            "`poly_order` or more draws."
        ) from None


def gls_solve(C, P, Y):
    """Generalised least squares of Y (N, k) on P (N, p) with covariance C.

    Returns ``beta`` (p, k), ``coef`` = C^{-1} (Y - P beta) (N, k), the
    Cholesky factor and ``beta_cov`` (p, p, k): the posterior covariance of
    beta under the GP model with the amplitude of each column profiled,
    s2 (P' C^-1 P)^-1 with s2 = y' Q y / (N - p).  Raises ``ValueError``
    when P is rank deficient.
    """
    L, _ = cholesky_jitter(C)
    CiP = linalg.cho_solve((L, True), P, check_finite=False)
    CiY = linalg.cho_solve((L, True), Y, check_finite=False)
    beta, coef, Minv, s2 = gls_from_solves(P, CiP, Y, CiY)
    beta_cov = Minv[:, :, None] * s2[None, None, :]
    return beta, coef, L, beta_cov


def gls_from_solves(P, CiP, Y, CiY):
    """The GLS step once C^-1 P and C^-1 Y are known.

    Returns ``beta`` (p, k), ``coef`` = C^-1 (Y - P beta) = Q Y (N, k), ``Minv`` =
    (P' C^-1 P)^-1 and the profiled amplitudes ``s2`` = y' Q y / (N - p) (k,), clipped at 0.
    Raises ``ValueError`` when P is rank deficient.
    """
    Mc = _factor_design(P.T @ CiP)
    beta = linalg.cho_solve(Mc, P.T @ CiY, check_finite=False)
    coef = CiY - CiP @ beta
    N, p = P.shape
    s2 = np.maximum(np.einsum("nk,nk->k", Y, coef) / max(N - p, 1), 0.0)
    Minv = linalg.cho_solve(Mc, np.eye(p), check_finite=False)
    return beta, coef, Minv, s2


def restricted_loglik(C, P, y, profile_scale=True, allow_jitter=True, projector=True):
    """Restricted (REML) log-likelihood of y ~ N(P beta, s2 C) with a flat prior on beta.

    ``y`` may be (N,) or (N, k): k columns sharing C (summed log-likelihoods).

    With ``profile_scale`` the amplitude s2 is maximised out in closed form,
    so only the shape of C matters.  Returns ``(value, W, Q)``: the gradient
    with respect to any parameter of C is ``0.5 * sum(W * dC)``, and ``Q``
    is the REML projector, whose ``(Q y)_i / Q_ii`` are the exact
    leave-one-out residuals of the GLS fit.  With ``allow_jitter`` False a
    C that is not numerically positive definite raises ``ValueError``
    instead of being jittered, so an optimiser sees a smooth objective.
    With ``projector`` False, W is formed in Q's memory and ``Q`` is None (what an optimiser needs).
    """
    N, p = P.shape
    L, _ = cholesky_jitter(C, max_tries=8 if allow_jitter else 1)
    Q, Mc = reml_projector(L, P)
    Yc = y[:, None] if y.ndim == 1 else y
    q = Q @ Yc
    yQy = np.einsum("nk,nk->k", Yc, q)
    k = Yc.shape[1]
    value = _reml_value(yQy, L, Mc, N, p, profile_scale)
    a = q / np.maximum(yQy / (N - p), 1e-150) if profile_scale else q
    # each column gets its own amplitude; the kernel shape is shared
    if projector:
        return value, a @ q.T - k * Q, Q
    Q *= -k
    Q += a @ q.T
    return value, Q, None


def _reml_value(yQy, L, Mc, N, p, profile_scale):
    logdet = 2.0 * np.sum(np.log(np.diag(L))) + 2.0 * np.sum(np.log(np.diag(Mc[0])))
    k = yQy.size
    if profile_scale:
        s2 = np.maximum(yQy / (N - p), 1e-150)
        return float(np.sum(-0.5 * (N - p) * np.log(s2)) - 0.5 * k * logdet)
    return float(-0.5 * np.sum(yQy) - 0.5 * k * logdet)


def restricted_loglik_value(C, P, y, profile_scale=True, allow_jitter=True):
    """The value of :func:`restricted_loglik` alone, from triangular solves: no inverse of C,
    a third of the cost where the gradient is not wanted (an optimiser's starting points)."""
    N, p = P.shape
    L, _ = cholesky_jitter(C, max_tries=8 if allow_jitter else 1)
    Yc = y[:, None] if y.ndim == 1 else y
    solved = lower_solve(L, np.column_stack([P, Yc]))
    b, a = solved[:, :p], solved[:, p:]
    Mc = _factor_design(b.T @ b)
    ab = a.T @ b
    yQy = np.einsum("nk,nk->k", a, a) - np.einsum("kp,pk->k", ab, linalg.cho_solve(Mc, ab.T, check_finite=False))
    return _reml_value(yQy, L, Mc, N, p, profile_scale)


def reml_projector(L, P):
    """Q = C^-1 - C^-1 P (P' C^-1 P)^-1 P' C^-1 from the Cholesky factor L of C; also the
    Cholesky factor of P' C^-1 P."""
    Ci, info = lapack.dpotri(L, lower=1)  # C^-1 from the factor: a third of a solve against I
    if info != 0:
        raise ValueError("Could not invert the kernel matrix from its Cholesky factor; increase `nugget`.")
    # dpotri fills the lower triangle only
    Ci = np.tril(Ci)
    Ci += np.tril(Ci, -1).T
    CiP = Ci @ P
    Mc = _factor_design(P.T @ CiP)
    Ci -= CiP @ linalg.cho_solve(Mc, CiP.T, check_finite=False)
    return Ci, Mc


def loo_residuals(Q, y):
    """Exact leave-one-out residuals y_i - yhat_{-i}(x_i) of a GLS/kernel fit from its projector,
    and the same standardised by their GP predictive sd (proportional to 1 / sqrt(Q_ii))."""
    Qy, dQ = Q @ y, np.diag(Q)
    if Qy.ndim == 2:
        dQ = dQ[:, None]
    return Qy / dQ, Qy / np.sqrt(dQ)
