"""Zero-variance control variates: regression on Stein polynomial features.

Order 1 uses the scores themselves, order 2 adds the images of all
quadratic monomials (so it is exact for quadratic integrands under a
Gaussian).  Ordinary least squares by default; in high dimension, where
there are not enough draws for the features, ridge or lasso with the
penalty chosen by cross-validation, as the ZVCV R package offers
(scikit-learn's ``RidgeCV`` / ``LassoCV``; the intercept is not penalised).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from scipy import linalg

from .finalize import Candidate
from .heldout import fold_labels, jackknife_bias, projection_deletion_residuals, refit_residuals
from .polynomial import n_polynomial_features, stein_polynomial_features

__all__ = ["fit_zero_variance", "choose_penalty", "zero_variance_candidate", "LeastSquaresFactor",
           "least_squares_factor"]


def choose_penalty(n, q, penalty):
    """'auto' -> least squares when there are at least 2 draws per coefficient, else lasso."""
    if penalty == "auto":
        return None if n >= 2 * (q + 1) else "lasso"
    if penalty not in (None, "ridge", "lasso"):
        raise ValueError(f"zv_penalty={penalty!r}; use None, 'ridge', 'lasso' or 'auto'.")
    return penalty


def basis_name(order, cross=True):
    """The method name of a ZV basis: ``"zv2"``, or ``"zv2diag"`` without cross products."""
    return f"zv{order}" + ("" if cross else "diag")


def _least_squares_design(X, S, order, cross):
    """[1, Stein features] (n, 1 + q); ``ValueError`` when the draws cannot identify it."""
    psi = stein_polynomial_features(X, S, order, cross)
    n, q = psi.shape
    if n <= q + 1:
        raise ValueError(
            f"{basis_name(order, cross)} needs more than {q + 1} draws for d={X.shape[1]} (got {n}); "
            "use zv_penalty='lasso' or 'ridge', a lower order, or more draws."
        )
    return np.column_stack([np.ones(n), psi])


def fit_zero_variance(X, S, y, order, penalty=None, seed=0, cross=True):
    """Fit y ~ intercept + Stein features; returns (intercept, feature coefficients)."""
    if penalty is None:
        coef, *_ = linalg.lstsq(_least_squares_design(X, S, order, cross), y)
        return coef[0], coef[1:]
    psi = stein_polynomial_features(X, S, order, cross)
    n = psi.shape[0]
    from sklearn.linear_model import LassoCV, RidgeCV  # scikit-learn loads only for penalised fits

    cv = min(5, n)
    if penalty == "ridge":
        model = RidgeCV(alphas=np.logspace(-6, 3, 30)).fit(psi, y)
    else:
        model = LassoCV(cv=cv, random_state=seed, max_iter=20000).fit(psi, y)
    return float(model.intercept_), np.asarray(model.coef_)


class LeastSquaresFactor(NamedTuple):
    """The thin QR factors ``Q``, ``R`` of a least-squares ZV design [1, Stein features] and ``QtY`` = Q'Y.

    Every basis's design is the leading columns of a wider one's (the first-order features lead, then
    the squares, then the cross products and higher orders), and the leading p columns of Householder
    QR factors are those of the leading p columns of the design: one factor serves every narrower basis.
    """

    Q: np.ndarray
    R: np.ndarray
    QtY: np.ndarray

    def leading(self, p):
        return LeastSquaresFactor(self.Q[:, :p], self.R[:p, :p], self.QtY[:p])


def least_squares_factor(X, S, Y, order, cross=True):
    """The :class:`LeastSquaresFactor` of the ZV basis (order, cross); ``ValueError`` as
    ``zero_variance_candidate``'s where the draws cannot identify it."""
    Q, R = np.linalg.qr(_least_squares_design(X, S, order, cross))
    return LeastSquaresFactor(Q, R, Q.T @ Y)


def zero_variance_candidate(X, S, Y, order, penalty, chain, folds, seed=0, first=None, keep_fit=False, cross=True,
                            factor=None):
    """ZV-CV of every column of ``Y`` (n, k) with held-out residuals, as a :class:`Candidate`.

    ``cross=False``: the order-2 basis without cross products (named ``"zv2diag"``).

    Least squares is one QR for all columns, and its held-out residuals are the closed form
    (I - H_BB)^-1 e_B of ``heldout``; penalised fits are refitted per fold and column.
    ``factor``: a :class:`LeastSquaresFactor` of this basis or a wider one, for least squares.
    """
    n, k = Y.shape
    q = n_polynomial_features(X.shape[1], order, cross)
    pen = choose_penalty(n, q, penalty)
    name = basis_name(order, cross)
    if pen is None:
        if factor is None:
            factor = least_squares_factor(X, S, Y, order, cross)
        elif n <= q + 1:
            _least_squares_design(X, S, order, cross)  # its error: too few draws
        Qm, R, QtY = factor.leading(q + 1)
        coef = linalg.solve_triangular(R, QtY, check_finite=False)
        e = Y - Qm @ QtY
        labels = fold_labels(n, chain, folds, first=first)
        resid, z = projection_deletion_residuals(e, Qm, labels)
        influence = Qm @ linalg.solve_triangular(R, np.eye(R.shape[0])[:, 0], trans="T", check_finite=False)
        bias = jackknife_bias(_intercepts_without(Qm, R, Y, QtY), labels, coef[0])
        gamma = coef[1:]
        return Candidate(name, coef[0], resid, z, None, {"order": order, "cross": cross, "penalty": None},
                         influence=influence, labels=labels, jackknife_bias=bias,
                         predictor=_polynomial_predictor(order, gamma, cross) if keep_fit else None)
    est = np.empty(k)
    jack = np.empty(k)
    gamma = np.empty((n_polynomial_features(X.shape[1], order, cross), k))
    resid = np.empty_like(Y)
    labels = fold_labels(n, chain if chain is not None else np.zeros(n, dtype=int), max(folds, 2), max_block=None,
                         first=first)
    for j in range(k):
        est[j], gamma[:, j] = fit_zero_variance(X, S, Y[:, j], order, pen, seed, cross)
        fold_intercepts = []

        def fit_predict(train, test, y=Y[:, j], kept=fold_intercepts):
            b0, gamma = fit_zero_variance(X[train], S[train], y[train], order, pen, seed, cross)
            kept.append(b0)
            r = y[test] - b0 - stein_polynomial_features(X[test], S[test], order, cross) @ gamma
            return r, None

        resid[:, j] = refit_residuals(fit_predict, n, labels)[0]
        # block jackknife over the fold refits (the closed form of least squares has no penalised twin)
        b = np.asarray(fold_intercepts)
        jack[j] = np.sqrt((b.size - 1) / b.size * np.sum((b - b.mean()) ** 2))
    def fit_without(m):
        return np.array([fit_zero_variance(X[~m], S[~m], Y[~m, j], order, pen, seed, cross)[0] for j in range(k)])

    # two parts: each penalised refit cross-validates its penalty
    bias = jackknife_bias(fit_without, labels, est, parts=2)
    return Candidate(name, est, resid, resid, None, {"order": order, "cross": cross, "penalty": pen},
                     jackknife_bias=bias, jackknife=jack,
                     predictor=_polynomial_predictor(order, gamma, cross) if keep_fit else None)


def _polynomial_predictor(order, gamma, cross=True):
    """The zero-mean part of ZV-CVs with Stein-feature coefficients ``gamma`` (q, k)."""
    return lambda X, S: stein_polynomial_features(X, S, order, cross) @ gamma


# deleting draws leaves the design's rank when the kept rows of its orthonormal factor are still near
# orthonormal: Q_kept' Q_kept = I - Q_del' Q_del keeps every eigenvalue above this
_RANK_KEPT = 1e-10


def _intercepts_without(Qm, R, Y, QtY=None):
    """``fit_without(mask)`` for ``heldout.jackknife_bias``: the least-squares intercepts without the
    draws in ``mask``, from the thin QR D = Qm R of the full design.  D_kept = Q_kept R, so the fit
    solves (Q_kept' Q_kept) w = Q_kept' Y_kept and takes R^-1 w: a q x q system per deletion instead of
    a least-squares refit (varying intercepts, 4,000 draws x 179 features: 0.5 s for eight refits).
    ``ValueError`` when the kept draws cannot identify the coefficients."""
    QtY = Qm.T @ Y if QtY is None else QtY

    def fit_without(mask):
        Qd = Qm[mask]
        if Qm.shape[0] - Qd.shape[0] <= Qm.shape[1] + 1:
            raise ValueError("too few draws")
        G = np.eye(Qm.shape[1]) - Qd.T @ Qd
        w, V = np.linalg.eigh(G)
        if w[0] < _RANK_KEPT:
            raise ValueError("rank deficient")
        kept = V @ ((V.T @ (QtY - Qd.T @ Y[mask])) / w[:, None])
        return linalg.solve_triangular(R, kept, check_finite=False)[0]

    return fit_without
