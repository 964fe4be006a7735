"""Zero-variance control variates: regression on Stein polynomial features.

Order 1 uses the scores themselves, order 2 adds the images of all
quadratic monomials (so it is exact for quadratic integrands under a
Gaussian).  Ordinary least squares by default; in high dimension, where
there are not enough draws for the features, ridge or lasso with the
penalty chosen by cross-validation, as the ZVCV R package offers
(scikit-learn's ``RidgeCV`` / ``LassoCV``; the intercept is not penalised).
"""

from __future__ import annotations

import numpy as np
from scipy import linalg

from .polynomial import stein_polynomial_features

__all__ = ["fit_zero_variance", "zv_loo_residuals", "choose_penalty"]


def choose_penalty(n, q, penalty):
    """'auto' -> least squares when there are at least 2 draws per coefficient, else lasso."""
    if penalty == "auto":
        return None if n >= 2 * (q + 1) else "lasso"
    if penalty not in (None, "ridge", "lasso"):
        raise ValueError(f"zv_penalty={penalty!r}; use None, 'ridge', 'lasso' or 'auto'.")
    return penalty


def fit_zero_variance(X, S, y, order, penalty=None, seed=0):
    """Fit y ~ intercept + Stein features; returns (intercept, feature coefficients)."""
    psi = stein_polynomial_features(X, S, order)
    n, q = psi.shape
    if penalty is None:
        if n <= q + 1:
            raise ValueError(
                f"zv{order} needs more than {q + 1} draws for d={X.shape[1]} (got {n}); "
                "use zv_penalty='lasso' or 'ridge', a lower order, or more draws."
            )
        D = np.column_stack([np.ones(n), psi])
        coef, *_ = linalg.lstsq(D, y)
        return coef[0], coef[1:]
    from sklearn.linear_model import LassoCV, RidgeCV

    cv = min(5, n)
    if penalty == "ridge":
        model = RidgeCV(alphas=np.logspace(-6, 3, 30)).fit(psi, y)
    else:
        model = LassoCV(cv=cv, random_state=seed, max_iter=20000).fit(psi, y)
    return float(model.intercept_), np.asarray(model.coef_)


def zv_loo_residuals(X, S, y, order):
    """Exact leave-one-out residuals of the least-squares ZV fit: e_i / (1 - h_ii)."""
    psi = stein_polynomial_features(X, S, order)
    D = np.column_stack([np.ones(len(y)), psi])
    Qm, _ = np.linalg.qr(D)
    h = np.einsum("ij,ij->i", Qm, Qm)
    coef, *_ = linalg.lstsq(D, y)
    e = y - D @ coef
    return e / np.maximum(1.0 - h, 1e-12)
