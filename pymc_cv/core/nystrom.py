"""Kernel CVs for many draws: inducing points (Nystroem / subset of regressors).

g(x) = sum_j k0(x, z_j) c_j over M inducing draws z_j, with the intercept and Stein polynomial
features P of the exact fit, minimising

    ||y - P beta - K_NM c||^2 + nugget * c' K_MM c,

a penalised least-squares problem with features F = [P, K_NM]: normal matrix F'F + blockdiag(0,
nugget K_MM) of size p + M.  Memory O(N M), time O(N M^2), for all integrands at once.  It is a
linear smoother, so held-out residuals have the closed form of ``heldout`` with Q = I - H; the
basis functions are kept fixed when a block is held out.  Under the equivalent Gaussian model
(c ~ N(0, s2 / nugget K_MM^-1), noise s2) the intercepts have covariance s2 (F'F + Lambda)^-1.

M is chosen by the held-out error: it doubles from ``m_start`` while the held-out mean squared
residual (summed over integrands) still falls by more than ``tol``, up to ``m_max`` and a memory
budget of about ``mem_bytes`` for K_NM.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import linalg

from .heldout import deletion_residuals, jackknife_bias, split_parts
from .kernel_cv import ExactHeldout, design_matrix, kernel_predictor, stein_gram
from .linalg import cholesky_jitter

__all__ = ["fit_nystrom_heldout", "choose_inducing", "normal_fit_on"]

_CHUNK = 20_000  # rows of K_NM computed at once (bounds the kernel's temporaries)


@dataclass
class NystromChoice:
    m: int
    fits: list  # ExactHeldout per order
    path: list  # (M, held-out mse) tried


def cross_gram(kernel, B, X, S, tau, inducing, previous=None):
    """The Stein Gram matrix between all draws and the draws ``inducing`` (N, M).  ``previous``:
    this matrix for the first columns of ``inducing``, which are then not computed again."""
    N, done = X.shape[0], 0 if previous is None else previous.shape[1]
    K = np.empty((N, len(inducing)))
    if done:
        K[:, :done] = previous
    Z, SZ, tz = X[inducing[done:]], S[inducing[done:]], tau[inducing[done:]]
    for a in range(0, N, _CHUNK):
        b = min(N, a + _CHUNK)
        K[a:b, done:] = stein_gram(kernel, B, X[a:b], S[a:b], tau[a:b], Z, SZ, tz)
    return K


def design_for(X, S, tau, T, order):
    """The intercept/polynomial design of ``order`` and its width, checked against the draws."""
    P = design_matrix(X, S, tau, T, order)
    N, p = P.shape
    if N - p - 1 < 2:
        raise ValueError(f"{N} draws cannot fit {p} intercept/polynomial coefficients; lower poly_order.")
    return P, p


def coefficient_se(L, p, e, c, Kmm, nug):
    """Model se (p, k) of the design coefficients under the equivalent Gaussian model (module docstring)."""
    N, M = e.shape[0], Kmm.shape[0]
    penalty = nug * np.einsum("mk,mk->k", c, Kmm @ c)
    s2 = (np.einsum("nk,nk->k", e, e) + penalty) / max(N - p, 1)
    Ainv_diag = np.sum(linalg.solve_triangular(L, np.eye(p + M)[:, :p], lower=True, check_finite=False) ** 2,
                       axis=0)
    return np.sqrt(Ainv_diag)[:, None] * np.sqrt(np.maximum(s2, 0.0))[None, :]


def fit_nystrom_heldout(X, S, Y, tau, T, kernel, B, nugget, orders, labels, inducing, keep_fit=False, Knm=None):
    """Inducing-point kernel CVs of the columns of ``Y`` for each order in ``orders``; the
    same return as :func:`kernel_cv.fit_exact_heldout`.  ``inducing`` indexes the z_j; ``Knm``,
    when given, is their cross Gram matrix (N, M) (``cross_gram``)."""
    if Knm is None:
        Knm = cross_gram(kernel, B, X, S, tau, inducing)
    Kmm = Knm[inducing]
    Kmm = 0.5 * (Kmm + Kmm.T)
    M = Kmm.shape[0]
    nug = nugget * float(np.mean(np.diag(Kmm) / np.diag(B)[tau[inducing]]))
    N, k = Y.shape
    quarters = split_parts(labels, 4)
    # F'F and F'Y as sums over quarters of the draws: the fits without one of them (same
    # hyperparameters, ``heldout.jackknife_bias``) then cost no extra pass over K_NM
    KtK = [Knm[q].T @ Knm[q] for q in quarters]  # shared by every design
    KtY = [Knm[q].T @ Y[q] for q in quarters]
    out = []
    for order in orders:
        P, p = design_for(X, S, tau, T, order)
        # normal matrices of F = [P, K_NM] per quarter without forming F (it would double the memory)
        parts = []
        for q, ktk, kty in zip(quarters, KtK, KtY):
            Aq = np.empty((p + M, p + M))
            Aq[:p, :p] = P[q].T @ P[q]
            Aq[:p, p:] = P[q].T @ Knm[q]
            Aq[p:, :p] = Aq[:p, p:].T
            Aq[p:, p:] = ktk
            parts.append((Aq, np.concatenate([P[q].T @ Y[q], kty])))
        penalty = np.zeros((p + M, p + M))
        penalty[p:, p:] = nug * Kmm
        A = sum(a for a, _ in parts) + penalty
        L, _ = cholesky_jitter(A)
        rhs = sum(b for _, b in parts)
        theta = linalg.cho_solve((L, True), rhs, check_finite=False)
        beta, c = theta[:p], theta[p:]
        fit_on = normal_fit_on(quarters, parts, penalty, T)
        bias = jackknife_bias(lambda m: fit_on(~m), labels, theta[:T])
        e = Y - P @ beta - Knm @ c
        beta_se = coefficient_se(L, p, e, c, Kmm, nug)

        # G = L^-1 F' once (a (p + M) x N panel), so that H_BB = G_B' G_B for every block
        G = np.empty((p + M, N))
        for a in range(0, N, _CHUNK):
            rows = slice(a, min(N, a + _CHUNK))
            G[:, rows] = linalg.solve_triangular(L, np.concatenate([P[rows], Knm[rows]], axis=1).T, lower=True,
                                                 check_finite=False)

        def q_diag(G=G):
            return 1.0 - np.einsum("mn,mn->n", G, G)

        def q_block(idx, G=G):
            Gb = G[:, idx]
            return np.eye(idx.size) - Gb.T @ Gb

        a0 = linalg.cho_solve((L, True), np.eye(p + M)[:, 0], check_finite=False)
        influence = P @ a0[:p] + Knm @ a0[p:]
        resid, z = deletion_residuals(e, q_diag, q_block, labels)
        del G
        out.append(ExactHeldout(order, beta, beta_se, resid, z, influence, bias, kernel_predictor(
            kernel, B, X[inducing], S[inducing], tau[inducing], T, order, c, beta) if keep_fit else None))
    return out


def normal_fit_on(quarters, parts, penalty, T):
    """``fit_on(mask)`` for ``heldout.jackknife_bias`` from per-quarter normal matrices and
    right-hand sides ``parts``: a mask made of whole quarters is fitted from their sums."""
    def fit_on(mask):
        inside = [i for i, q in enumerate(quarters) if mask[q].all()]
        L, _ = cholesky_jitter(sum(parts[i][0] for i in inside) + penalty)
        return linalg.cho_solve((L, True), sum(parts[i][1] for i in inside), check_finite=False)[:T]
    return fit_on


def choose_inducing(X, S, Y, tau, T, kernel, B, nugget, orders, labels, rng, *, m_start=250, m_max=1000,
                    tol=0.1, mem_bytes=1e9, client=None, keep_fit=False):
    """Fit with M = m_start, 2 m_start, ... inducing draws and keep the M after which the held-out
    error stopped improving by more than ``tol`` (relative).  Returns a :class:`NystromChoice`.
    With a dask.distributed ``client`` the features are a dask array on its workers
    (``nystrom_dask``) and ``mem_bytes`` no longer bounds M."""
    N = X.shape[0]
    m_cap = int(min(m_max, N // 2, max(m_start, mem_bytes // (8 * N)) if client is None else m_max))
    order = rng.permutation(N)  # nested inducing sets: each M extends the last
    best, path, M, Knm = None, [], min(m_start, m_cap), None
    while True:
        if client is None:
            # the columns of the last M are kept, not recomputed (M = 250, 500, 1,000 had computed
            # 1,750 columns to use 1,000)
            Knm = cross_gram(kernel, B, X, S, tau, order[:M], previous=Knm)
            fits = fit_nystrom_heldout(X, S, Y, tau, T, kernel, B, nugget, orders, labels, order[:M],
                                       keep_fit=keep_fit, Knm=Knm)
        else:
            from .nystrom_dask import fit_nystrom_heldout_dask

            fits = fit_nystrom_heldout_dask(X, S, Y, tau, T, kernel, B, nugget, orders, labels, order[:M],
                                            client, keep_fit=keep_fit)
        scale = np.maximum(np.var(Y, axis=0), 1e-300)
        err = min(float(np.sum(np.mean(f.resid**2, axis=0) / scale)) for f in fits)
        path.append((M, err))
        improved = best is None or err < (1.0 - tol) * best[1]
        if best is None or err < best[1]:
            best = (M, err, fits)
        if not improved or M >= m_cap:
            break
        M = min(2 * M, m_cap)
    return NystromChoice(best[0], best[2], path)
