"""Zero-variance CVs on a few coordinates per integrand: the rows of a model with many parameters.

For a vector field g that depends on the coordinates in a subset C and points along them,
L[g] = div g + g . s has mean zero under pi whatever the other coordinates do, and it uses the
scores of C alone.  A row that depends on one coordinate j (a group effect theta_j) is mostly
explained by fields on C = {j} + a few shared coordinates (the hierarchy's mean and scale): the fields
P(x_C) e_i, one direction i at a time, with P a monomial of degree < order, give a basis of m x
C(m + order - 1, order - 1) features per row where a polynomial basis in all d dimensions affords only
ZV-1's d features shared by every row.  One direction at a time matters: the scores of shared
coordinates sum over every group and carry that noise into any feature they enter, while the row's
own direction does not (J = 1,000 group effects: in-sample variance reduction of a group effect
320 with the gradients of quadratics on C, 1,020 with the fields).

All rows are fitted at once in blocks: normal equations batched over rows (``numpy.linalg.solve`` on
stacked systems), the held-out residuals and the jackknife from the same normal equations less each
fold's part (exact refits; no design kept beyond its block), the order chosen per row by held-out error.
"""

from __future__ import annotations

import itertools
import math
from typing import NamedTuple

import numpy as np

from .finalize import Candidate
from .heldout import fold_labels

__all__ = ["LocalCoordinates", "own_coordinates", "shared_coordinates", "directional_stein_features", "local_orders",
           "local_zero_variance_candidates"]

# design values held at once per block of rows (bounds the memory: 8 bytes each)
_BLOCK_VALUES = 8_000_000
# draws per coefficient a local basis needs (held-out folds and the jackknife refit on 3/4 of them)
_DRAWS_PER_COEFFICIENT = 8
# relative ridge on the normal equations: against exact collinearity (a coordinate shared and own)
_RIDGE = 1e-10


class LocalCoordinates(NamedTuple):
    """The coordinates each integrand's local ZV-CV uses.

    ``own`` (k,): per integrand the coordinate it depends on (-1: none, no local fit); ``shared``
    (g,): coordinates every local fit uses besides its own (the hierarchy's mean and scale)."""

    own: np.ndarray
    shared: np.ndarray

    def subsets(self, columns):
        """The integrands ``columns`` that have an own coordinate, grouped by their subset's size:
        [(columns, subsets (len, m))]; a row of a shared coordinate uses the shared ones alone."""
        columns = np.asarray(columns, dtype=int)
        own = self.own[columns]
        within = np.isin(own, self.shared)
        apart = (own >= 0) & ~within
        out = []
        if apart.any():
            out.append((columns[apart], np.column_stack(
                [own[apart], np.broadcast_to(self.shared, (int(apart.sum()), self.shared.size))]).astype(int)))
        if within.any():
            out.append((columns[within], np.broadcast_to(self.shared, (int(within.sum()), self.shared.size))
                        .astype(int)))
        return out


def own_coordinates(Y, X, max_draws=512):
    """Per column of ``Y`` (n, k) the column of ``X`` (n, d) it is most correlated with (Pearson, on at most
    ``max_draws`` evenly spaced draws): for a variable's element that is its own unconstrained coordinate
    (the identity, or a monotone transform of it)."""
    n = X.shape[0]
    idx = np.unique(np.linspace(0, n - 1, min(n, max_draws)).astype(int))
    Xc = X[idx] - X[idx].mean(axis=0)
    Yc = Y[idx] - Y[idx].mean(axis=0)
    xs = np.linalg.norm(Xc, axis=0)
    ys = np.linalg.norm(Yc, axis=0)
    own = np.full(Y.shape[1], -1)
    step = max(1, _BLOCK_VALUES // max(1, Xc.shape[1] * 8))
    for a in range(0, Y.shape[1], step):
        corr = np.abs(Yc[:, a:a + step].T @ Xc) / np.maximum(np.outer(ys[a:a + step], xs), 1e-300)
        best = np.argmax(corr, axis=1)
        own[a:a + step] = np.where(corr[np.arange(best.size), best] > 0, best, -1)
    return own


def shared_coordinates(variable, max_shared=8):
    """The coordinates every local fit shares: those of the smallest variables (``variable`` (d,): the
    variable each coordinate belongs to), whole variables, smallest first, while they number at most
    ``max_shared`` and each variable is at most a tenth of the coordinates (a hierarchy's mean and scale,
    not its group effects)."""
    variable = np.asarray(variable)
    names, inverse, sizes = np.unique(variable, return_inverse=True, return_counts=True)
    shared = []
    for v in np.argsort(sizes, kind="stable"):
        if len(shared) + sizes[v] > max_shared or sizes[v] > max(1, variable.size // 10):
            break
        shared += list(np.flatnonzero(inverse == v))
    return np.sort(np.array(shared, dtype=int))


def _exponents(m, degree):
    """Exponents (count, m) of every monomial in m variables of total degree 0..degree, by degree."""
    out = [np.zeros(m, dtype=int)]
    for deg in range(1, degree + 1):
        for combo in itertools.combinations_with_replacement(range(m), deg):
            out.append(np.bincount(combo, minlength=m))
    return np.array(out)


def n_directional_features(m, order):
    """Features of the local basis of ``order`` on m coordinates: m directions x monomials of degree < order."""
    return m * math.comb(m + order - 1, order - 1)


def directional_stein_features(X, S, order):
    """L[P e_i] = d_i P + P s_i for every monomial P of degree < ``order`` and coordinate i: (n, q), by
    monomial (in :func:`_exponents`' order) and then direction, so that a lower order's features lead.

    The fields P e_i span the gradients of ZV-CVs' polynomials of degree <= ``order`` and more: the
    image in direction i uses the score s_i alone, so features along a row's own coordinate carry none
    of the noise of the shared coordinates' scores, which sum over every group (a hierarchical normal
    model with J = 1,000: in-sample variance reduction of a group effect 320 -> 1,020 at order 2).
    """
    n, m = X.shape
    exps = _exponents(m, order - 1)
    # one contiguous row per coordinate, monomial and feature, returned transposed: written column by
    # column into an (n, q) array the same features took 3x as long (J = 10,000: 6.5 s)
    Xt, St = np.ascontiguousarray(X.T), np.ascontiguousarray(S.T)
    powers = [np.ones_like(Xt)] + [Xt**k for k in range(1, order)]
    mono = np.ones((len(exps), n))
    for t, a in enumerate(exps):
        for j in np.flatnonzero(a):
            mono[t] *= powers[a[j]][j]
    index = {tuple(a): t for t, a in enumerate(exps)}
    out = np.empty((len(exps) * m, n))
    for t, a in enumerate(exps):
        for i in range(m):
            row = out[t * m + i]
            np.multiply(mono[t], St[i], out=row)
            if a[i]:
                lower = a.copy()
                lower[i] -= 1
                row += a[i] * mono[index[tuple(lower)]]
    return out.T


def local_orders(n, m):
    """Orders of the local bases tried on m coordinates with n draws (order o: fields of degree o - 1):
    2, and 3 up to 2 coordinates, each with enough draws per coefficient."""
    # order 3 on three coordinates (a group effect, the mean and the scale): 31 features instead of 13 for
    # the same error (J = 1,000: median 0.173 of MCMC's either way, summary 16 s -> 12 s without it)
    orders = [2, 3] if m <= 2 else [2]
    return [o for o in orders if n >= _DRAWS_PER_COEFFICIENT * (1 + n_directional_features(m, o))]


class _LocalFit(NamedTuple):
    """Per integrand: estimate, held-out residuals (n, k), block-jackknife se, jackknife bias, order."""

    estimate: np.ndarray
    resid: np.ndarray
    jackknife: np.ndarray
    jackknife_bias: np.ndarray
    order: np.ndarray


def local_zero_variance_candidates(X, S, Y, local, columns, chain, folds, first=None):
    """The local ZV-CVs of the integrands ``columns`` of ``Y`` (n, k), in ``Y``'s units: one
    :class:`Candidate` (named ``"zv-local"``), each integrand fitted at the order (of
    :func:`local_orders`) whose held-out residuals are smallest; [] where none can be fitted.

    ``X``, ``S`` (n, d): draws and scores (standardised); ``local``: :class:`LocalCoordinates`.  Every
    integrand has its own design, so the block-jackknife se comes from here (``Candidate.jackknife``);
    one candidate keeps one n x k array of residuals, whatever the number of orders tried."""
    n = X.shape[0]
    labels = fold_labels(n, chain, folds, first=first)
    fold = np.unique(labels, return_inverse=True)[1].ravel()
    parts = []
    for cols, subs in local.subsets(np.asarray(columns)):
        orders = local_orders(n, subs.shape[1])
        if orders:
            parts.append((cols, _fit_designs(X, S, Y, cols, subs, orders, fold)))
    if not parts:
        return []
    cols = np.concatenate([c for c, _ in parts])
    fit = _LocalFit(*(np.concatenate([f[i] for _, f in parts], axis=-1) for i in range(5)))
    orders, counts = np.unique(fit.order, return_counts=True)
    return [Candidate("zv-local", fit.estimate, fit.resid, fit.resid, None,
                      {"orders": dict(zip(orders.tolist(), counts.tolist())), "coordinates": "own and shared"},
                      columns=cols, jackknife=fit.jackknife, jackknife_bias=fit.jackknife_bias)]


def _fit_designs(X, S, Y, cols, subs, orders, fold):
    """Least-squares fits of the columns ``cols`` of ``Y`` on the directional Stein features of their
    coordinates ``subs`` (len(cols), m), at each of ``orders``, each integrand keeping the order with the
    smallest held-out mean squared residual: a :class:`_LocalFit`.  Integrands with the same coordinates
    (a row and its square) share a design; the bases of the orders are nested, so one Gram matrix per
    design and fold serves them all, and each fit without a fold or a quarter of the folds is a solve of
    the normal equations less that part."""
    n = X.shape[0]
    designs, which = np.unique(subs, axis=0, return_inverse=True)
    which = which.ravel()
    members = [np.flatnonzero(which == u) for u in range(designs.shape[0])]
    c = max(len(mm) for mm in members)
    m = designs.shape[1]
    top = max(orders)
    widths = [1 + n_directional_features(m, o) for o in orders]
    p = max(widths)
    K = fold.max() + 1
    order_of = np.argsort(fold, kind="stable")  # each fold one contiguous run
    edges = np.searchsorted(fold[order_of], np.arange(K + 1))
    k = cols.size
    out = _LocalFit(np.empty(k), np.empty((n, k)), np.empty(k), np.empty(k), np.empty(k, dtype=int))
    best = np.full(k, np.inf)
    step = max(1, _BLOCK_VALUES // (n * (p + m + c)))
    for a in range(0, designs.shape[0], step):
        block = designs[a:a + step]
        b = block.shape[0]
        flat = block.reshape(-1)[None, :]
        xs = X[order_of[:, None], flat].reshape(n, b, m).transpose(1, 0, 2).reshape(b * n, m)
        ss = S[order_of[:, None], flat].reshape(n, b, m).transpose(1, 0, 2).reshape(b * n, m)
        D = np.empty((b, n, p))
        D[:, :, 0] = 1.0
        D[:, :, 1:] = directional_stein_features(xs, ss, top).reshape(b, n, p - 1)
        del xs, ss
        scale = np.sqrt(np.mean(D**2, axis=1, keepdims=True))
        D /= np.where(scale > 0, scale, 1.0)
        # the block's integrands, c per design (a design with fewer repeats its first)
        slots = np.array([list(mm) + [mm[0]] * (c - len(mm)) for mm in members[a:a + b]])
        y = Y[order_of[:, None], cols[slots].reshape(-1)[None, :]].reshape(n, b, c).transpose(1, 0, 2)
        Dt = D.transpose(0, 2, 1)
        Gf = np.stack([Dt[:, :, edges[f]:edges[f + 1]] @ D[:, edges[f]:edges[f + 1]] for f in range(K)], axis=1)
        hf = np.stack([Dt[:, :, edges[f]:edges[f + 1]] @ y[:, edges[f]:edges[f + 1]] for f in range(K)], axis=1)
        # a slot that repeats its design's first integrand is not one of the design's own
        own_slot = np.arange(c)[None, :] < np.array([len(mm) for mm in members[a:a + b]])[:, None]
        for order, w in zip(orders, widths):
            fitted = _solve_block(D[:, :, :w], y, Gf[:, :, :w, :w], hf[:, :, :w], edges)
            err = np.mean(fitted.resid**2, axis=1)  # (b, c)
            better = own_slot & (err < best[slots])
            if not better.any():
                continue
            idx = slots[better]
            best[idx] = err[better]
            out.estimate[idx] = fitted.estimate[better]
            out.jackknife[idx] = fitted.jackknife[better]
            out.jackknife_bias[idx] = fitted.jackknife_bias[better]
            out.order[idx] = order
            out.resid[order_of[:, None], idx[None, :]] = fitted.resid.transpose(1, 0, 2)[:, better]
    return out


def _solve_block(D, y, Gf, hf, edges):
    """The fits of a block of designs ``D`` (b, n, w) for integrands ``y`` (b, n, c), from the designs'
    per-fold normal equations ``Gf`` (b, K, w, w), ``hf`` (b, K, w, c): a :class:`_LocalFit` of (b, c)
    arrays (residuals (b, n, c)) without ``order``."""
    b, n, w = D.shape
    K = Gf.shape[1]
    G, h = Gf.sum(axis=1), hf.sum(axis=1)
    G = G + _RIDGE * np.trace(G, axis1=1, axis2=2)[:, None, None] / w * np.eye(w)
    beta = np.linalg.solve(G, h)  # (b, w, c)
    beta_f = np.linalg.solve(G[:, None] - Gf, h[:, None] - hf)  # (b, K, w, c): without each fold
    resid = np.empty((b, n, y.shape[2]))
    for f in range(K):
        rows = slice(edges[f], edges[f + 1])
        resid[:, rows] = y[:, rows] - D[:, rows] @ beta_f[:, f]
    # block jackknife over the folds: the intercept without each fold, from the same solves
    delta = beta_f[:, :, 0] - beta_f[:, :, 0].mean(axis=1, keepdims=True)  # (b, K, c)
    jackknife = np.sqrt((K - 1) / K * np.sum(delta**2, axis=1))
    part = np.arange(K) % 4  # quarters of alternate folds, as heldout.split_parts makes them
    quarters = [np.linalg.solve(G - Gf[:, part == q].sum(axis=1), h - hf[:, part == q].sum(axis=1))[:, 0]
                for q in range(min(4, K))]
    bias = (len(quarters) - 1) * (np.mean(quarters, axis=0) - beta[:, 0])  # (b, c)
    return _LocalFit(beta[:, 0], resid, jackknife, bias, None)
