"""vv-CVs when every task shares the same draws and the same target.

Integrands at many time points under one posterior: all T tasks are
evaluated at the same m draws, so the vv-CV system is A = B (x) K0 + nugget I
(special case II of the paper).  With B = U diag(lam) U' and
K0 = V diag(D) V', A^{-1} = (U (x) V) diag(1 / (lam_s D_i + nugget)) (U (x) V)',
and with per-task design Phi (intercept plus Stein polynomial features,
identical for all tasks) the GLS normal equations split into T small
(1 + q) x (1 + q) systems in the rotated task basis.  Cost
O(m^3 + T^3 + m^2 T + m T q^2), against O((m T)^3) for the general solver.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import linalg

from .polynomial import stein_polynomial_features

__all__ = ["SharedDrawsFit", "fit_shared_draws", "reml_task_matrix"]


def _design(X, S, poly_order):
    return np.column_stack([np.ones(X.shape[0]), stein_polynomial_features(X, S, poly_order)])


@dataclass
class SharedDrawsFit:
    kernel: object
    B: np.ndarray
    poly_order: int
    X: np.ndarray
    S: np.ndarray
    beta: np.ndarray  # (T, 1 + q)
    coef: np.ndarray  # (m, T)
    intercept_se: np.ndarray  # (T,)
    eig: tuple  # (D, V, lam, U, den, nugget): the factorisation, reused for predictive sds

    @property
    def intercepts(self):
        return self.beta[:, 0]

    def predictive_sd(self, X, S):
        """GP predictive sd (up to the amplitude) of every task at new draws, shape (len(X), T)."""
        D, V, lam, U, den, nug = self.eig
        w2 = (V.T @ self.kernel.gram(self.X, self.S, X, S)) ** 2  # (m, n)
        explained = np.einsum("is,in->ns", 1.0 / den, w2) @ ((U * lam) ** 2).T
        prior = self.kernel.diag(X, S)[:, None] * np.diag(self.B)[None, :] + nug
        return np.sqrt(np.maximum(prior - explained, 1e-300))

    def zero_mean_part(self, X, S):
        """g_t(x) minus its intercept for every task, shape (len(X), T)."""
        g = self.kernel.gram(X, S, self.X, self.S) @ self.coef @ self.B
        if self.poly_order:
            g += stein_polynomial_features(X, S, self.poly_order) @ self.beta[:, 1:].T
        return g


def fit_shared_draws(X, S, Y, kernel, B, nugget, poly_order):
    """Exact vv-CV for shared draws: X, S (m, d), Y (m, T); nugget relative to mean diag of k0."""
    m, T = Y.shape
    K0 = kernel.gram(X, S)
    nug = nugget * float(np.mean(np.diag(K0)))
    D, V = linalg.eigh(K0, check_finite=False)
    D = np.maximum(D, 0.0)
    lam, U = linalg.eigh(B, check_finite=False)
    lam = np.maximum(lam, 0.0)
    # the fit must use the B it factorised: a negative round-off eigenvalue of B kept in
    # zero_mean_part would multiply coefficients that were divided by the nugget alone
    B = (U * lam) @ U.T
    den = D[:, None] * lam[None, :] + nug  # (m, T)
    Phi = _design(X, S, poly_order)
    p1 = Phi.shape[1]
    if m - p1 < 2:
        raise ValueError(f"{m} shared draws cannot fit {p1} coefficients per task; lower poly_order.")
    Pt = V.T @ Phi  # (m, p1)
    Yt = V.T @ Y @ U  # (m, T)
    Ms = np.einsum("ia,is,ib->sab", Pt, 1.0 / den, Pt)  # (T, p1, p1)
    zs = np.einsum("ia,is->sa", Pt, Yt / den)  # (T, p1)
    Ms_inv = np.linalg.inv(Ms)
    gam = np.einsum("sab,sb->sa", Ms_inv, zs)
    beta = U @ gam  # (T, p1): coefficients per task
    R = Y - Phi @ beta.T
    coef = V @ ((V.T @ R @ U) / den) @ U.T
    # GP-model covariance of the intercepts: s2 * [(U (x) I) blockdiag(Ms^-1) (U' (x) I)]_tt
    yQy = np.sum(Yt**2 / den) - np.einsum("sa,sa->", zs, gam)
    s2 = max(yQy / (m * T - T * p1), 0.0)
    var0 = s2 * (U**2) @ Ms_inv[:, 0, 0]
    # round-off can make an ill-conditioned Ms_inv[0, 0] negative: no model se then (nan), and the
    # caller uses the held-out se instead
    se0 = np.sqrt(np.where(var0 >= 0, var0, np.nan))
    return SharedDrawsFit(kernel, B, poly_order, X, S, beta, coef, se0, (D, V, lam, U, den, nug))


def reml_task_matrix(X, S, Y, kernel, nugget, poly_order):
    """REML estimate of B under A = B (x) (K0 + nugget I): B = Y' Q Y / (m - 1 - q).

    Closed form (matrix-normal restricted likelihood), so learning B costs
    one m x m factorisation however large T is.
    """
    K0 = kernel.gram(X, S)
    K0[np.diag_indices_from(K0)] += nugget * float(np.mean(np.diag(K0)))
    Phi = _design(X, S, poly_order)
    L = linalg.cholesky(K0, lower=True, check_finite=False)
    CiY = linalg.cho_solve((L, True), Y, check_finite=False)
    CiP = linalg.cho_solve((L, True), Phi, check_finite=False)
    QY = CiY - CiP @ np.linalg.solve(Phi.T @ CiP, Phi.T @ CiY)
    B = Y.T @ QY / (Y.shape[0] - Phi.shape[1])
    return 0.5 * (B + B.T)
