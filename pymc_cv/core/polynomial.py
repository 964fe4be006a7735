"""Stein-operator images of polynomials: the features of zero-variance CVs.

For a polynomial P, the second-order Langevin operator gives
L[P](x) = Laplacian P(x) + grad P(x) . s(x), which has mean zero under pi
(Mira et al. 2013; Assaraf and Caffarel 1999).  A regression of f on these
features plus an intercept is the ZV-CV; the intercept is the estimate.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

__all__ = ["stein_polynomial_features", "n_polynomial_features"]


def n_polynomial_features(d, order, cross=True):
    """Number of Stein features of total degree 1..order in d dimensions: C(d + order, order) - 1
    (``cross=False``, order 2: the d linear and d pure squares only, 2 d)."""
    if int(order) != order or order < 0:
        raise ValueError(f"polynomial order {order!r}; use a non-negative integer.")
    if not cross:
        if order != 2:
            raise ValueError(f"a diagonal polynomial basis (no cross terms) is of order 2, got order {order!r}.")
        return 2 * d
    return math.comb(d + int(order), int(order)) - 1


def _monomial_images(X, S, degree):
    """L[x^a] = sum_j a_j (a_j - 1) x^(a - 2 e_j) + a_j x^(a - e_j) s_j for every exponent a of
    total degree ``degree`` (the general form of the two closed forms below)."""
    n, d = X.shape
    # powers of each coordinate once (elementwise integer powers, as x ** a would take them); a
    # monomial is then the product of its few non-zero factors, in coordinate order
    powers = [X ** np.full(d, k) for k in range(degree)]

    def monomial(a):
        out = np.ones(n)
        for j in np.flatnonzero(a):
            out = out * powers[a[j]][:, j]
        return out

    cols = []
    for combo in itertools.combinations_with_replacement(range(d), degree):
        a = np.bincount(combo, minlength=d)
        col = np.zeros(n)
        for j in np.flatnonzero(a):
            lower = a.copy()
            lower[j] -= 1
            col += a[j] * monomial(lower) * S[:, j]
            if a[j] >= 2:
                lower[j] -= 1
                col += a[j] * (a[j] - 1) * monomial(lower)
        cols.append(col)
    return np.column_stack(cols)


def stein_polynomial_features(X, S, order, cross=True):
    """Features L[P](x) for all monomials P of degree 1..order, shape (n, q).

    ``cross=False`` (order 2 only) keeps x_j and x_j^2 and drops the d (d - 1) / 2 products
    x_i x_j: 2 d features, so a quadratic correction per coordinate still fits with a few
    hundred draws where full order 2 would need d^2 / 2 coefficients.

    Examples
    --------
    >>> import numpy as np
    >>> x = np.array([[0.5, -1.0]])
    >>> stein_polynomial_features(x, -x, 2).round(3)   # N(0, I) scores s = -x
    array([[-0.5,  1. ,  1.5,  0. ,  1. ]])
    >>> stein_polynomial_features(x, -x, 2, cross=False).round(3)   # without x_0 x_1
    array([[-0.5,  1. ,  1.5,  0. ]])
    """
    n, d = X.shape
    q = n_polynomial_features(d, order, cross)  # validates the order
    if order == 0:
        return np.zeros((n, 0))
    # written in place: a list of blocks concatenated held the features twice (4 x 100,000 draws, d = 11:
    # 250 MB more at the Stein check's peak)
    out = np.empty((n, q))
    out[:, :d] = S  # P = x_j
    if order >= 2:
        squares = out[:, d:2 * d]  # P = x_j^2
        np.multiply(X, S, out=squares)
        squares *= 2.0
        squares += 2.0
        at = 2 * d
        if cross:
            for a in range(d - 1):  # P = x_a x_b, b > a, in np.triu_indices' order
                block = out[:, at:at + d - a - 1]
                np.multiply(X[:, a:a + 1], S[:, a + 1:], out=block)
                block += X[:, a + 1:] * S[:, a:a + 1]
                at += d - a - 1
        for k in range(3, int(order) + 1):
            images = _monomial_images(X, S, k)
            out[:, at:at + images.shape[1]] = images
            at += images.shape[1]
    return out
