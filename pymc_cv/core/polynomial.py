"""Stein-operator images of polynomials: the features of zero-variance CVs.

For a polynomial P, the second-order Langevin operator gives
L[P](x) = Laplacian P(x) + grad P(x) . s(x), which has mean zero under pi
(Mira et al. 2013; Assaraf and Caffarel 1999).  A regression of f on these
features plus an intercept is the ZV-CV; the intercept is the estimate.
"""

from __future__ import annotations

import numpy as np

__all__ = ["stein_polynomial_features", "n_polynomial_features"]


def n_polynomial_features(d, order):
    """Number of Stein features of total degree 1..order in d dimensions (order <= 2)."""
    if order == 0:
        return 0
    if order == 1:
        return d
    if order == 2:
        return d + d + d * (d - 1) // 2
    raise ValueError(f"polynomial order {order} is not supported; use 0, 1 or 2.")


def stein_polynomial_features(X, S, order):
    """Features L[P](x) for all monomials P of degree 1..order, shape (n, q).

    Examples
    --------
    >>> import numpy as np
    >>> x = np.array([[0.5, -1.0]])
    >>> stein_polynomial_features(x, -x, 2).round(3)   # N(0, I) scores s = -x
    array([[-0.5,  1. ,  1.5,  0. ,  1. ]])
    """
    n, d = X.shape
    if order == 0:
        return np.zeros((n, 0))
    cols = [S]  # P = x_j
    if order >= 2:
        cols.append(2.0 + 2.0 * X * S)  # P = x_j^2
        i, j = np.triu_indices(d, 1)
        cols.append(X[:, i] * S[:, j] + X[:, j] * S[:, i])  # P = x_i x_j
    if order > 2:
        raise ValueError(f"polynomial order {order} is not supported; use 0, 1 or 2.")
    return np.concatenate(cols, axis=1)
