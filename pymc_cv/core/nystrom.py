"""Kernel CVs for many draws: inducing points (Nystroem / subset of regressors).

g(x) = sum_j k0(x, z_j) c_j over M inducing draws z_j, with the intercept and Stein polynomial
features P of the exact fit, minimising

    ||y - P beta - K_NM c||^2 + nugget * c' K_MM c,

a penalised least-squares problem.  It is solved in a basis orthonormal in the kernel's norm: a
pivoted Cholesky factor L L' = K_SS of the inducing draws' Gram matrix keeps the r draws S whose
kernel functions are not combinations of the others to rounding, and with features Phi = K_NS L^-T
and c_S = L^-T w the penalty is nugget w'w.  The normal matrix F'F + blockdiag(0, nugget I) of
F = [P, Phi] (size p + r) is then conditioned by the nugget, not by K_MM, whose condition number
it would otherwise square.  Memory O(N M), time O(N M^2), for all integrands at once.  It is a
linear smoother, so held-out residuals have the closed form of ``heldout`` with Q = I - H (nested
designs, the CF's intercepts inside the SECF's polynomial, share one normal matrix, its factor and the
panel L^-1 F' those residuals come from: ``NestedLayout``); the
basis functions are kept fixed when a block is held out, so an inducing draw whose kernel function
lives almost only on its own block's draws is left out of the basis (``isolated_inducing``): held out,
nothing but the penalty would pin it.  Under the equivalent Gaussian model
(c ~ N(0, s2 / nugget K_MM^-1), noise s2) the intercepts have covariance s2 (F'F + Lambda)^-1.

M is chosen by the held-out error: it grows fourfold from ``m_start`` while the held-out mean
squared residual (summed over integrands) still falls by more than ``tol`` and some integrand's is
above ``ACCURATE_ENOUGH`` of its variance, up to ``m_max`` and a memory budget of about
``mem_bytes`` for K_NM.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from typing import NamedTuple

import numpy as np
from scipy import linalg
from scipy.linalg import lapack

from .external import cluster_nystrom
from .heldout import (
    jackknife_bias,
    nested_deletion_residuals,
    projection_deletion_residuals,
    quarter_order,
    split_parts,
)
from .kernel_cv import ExactHeldout, design_columns, design_matrix, kernel_predictor, stein_gram, unpermuted
from .linalg import cholesky_jitter, lower_solve

__all__ = ["fit_nystrom_heldout", "choose_inducing", "inducing_basis", "InducingBasis", "isolated_inducing",
           "isolated_by_mass", "NestedLayout", "nested_factors", "NestedSystem", "designs_heldout", "MAX_INDUCING",
           "ACCURATE_ENOUGH", "accurate_enough"]

# Work on N x M arrays goes a slab of draws at a time, each temporary about this size: fresh
# arrays of hundreds of MB are page-faulted in on every call, and here that cost more than the
# arithmetic (K_NM for N = 20,000, M = 250..1,000: 0.82 s in slabs of 20,000 draws, 0.13 s in
# slabs of 2,000)
_SLAB_BYTES = 16e6


def _slab_rows(width):
    """Rows of a slab of ``width`` doubles per row (at least one)."""
    return max(1, int(_SLAB_BYTES // (8 * max(width, 1))))


@dataclass
class NystromChoice:
    m: int
    fits: list  # ExactHeldout per order
    path: list  # (M, held-out mse) tried
    accurate: bool = False  # stopped at ACCURATE_ENOUGH


def cross_gram(kernel, B, X, S, tau, inducing, previous=None):
    """The Stein Gram matrix between all draws and the draws ``inducing`` (N, M).  ``previous``:
    this matrix for the first columns of ``inducing``, which are then not computed again."""
    N, done = X.shape[0], 0 if previous is None else previous.shape[1]
    K = np.empty((N, len(inducing)))
    if done:
        K[:, :done] = previous
    Z, SZ, tz = X[inducing[done:]], S[inducing[done:]], tau[inducing[done:]]
    rows = _slab_rows(len(inducing) - done)
    for a in range(0, N, rows):
        b = min(N, a + rows)
        K[a:b, done:] = stein_gram(kernel, B, X[a:b], S[a:b], tau[a:b], Z, SZ, tz)
    return K


# a pivot of K_MM's pivoted Cholesky factor below this share of its largest diagonal entry: the
# remaining inducing draws' kernel functions are combinations of those kept, to rounding.  Kept,
# they had made the normal matrix singular to rounding (eight schools, 4 x 1,000 draws, M = 500 and
# 1,000: jitter needed, and a held-out error that rose with M)
_BASIS_TOL = 1e-10


class InducingBasis(NamedTuple):
    """The inducing draws kept (``kept``, indices into the M given) and the lower Cholesky factor
    ``L`` of their Gram matrix: the features K_N,kept L^-T are orthonormal in the kernel's norm."""

    kept: np.ndarray
    L: np.ndarray

    def features(self, Knm):
        """Phi = K_N,kept L^-T (N, r) from the cross Gram matrix of all M inducing draws (N, M)."""
        return lower_solve(self.L, Knm[:, self.kept].T, overwrite_b=True).T  # the gather is a copy

    def coefficients(self, w, m):
        """The kernel coefficients c (m, k) over all m inducing draws of the basis weights w (r, k)."""
        c = np.zeros((m,) + w.shape[1:])
        c[self.kept] = linalg.solve_triangular(self.L, w, lower=True, trans="T", check_finite=False)
        return c


def inducing_basis(Kmm, usable=None):
    """The :class:`InducingBasis` of the symmetric Gram matrix ``Kmm`` (M, M) of the inducing draws,
    from those marked ``usable`` (M,) (default: all)."""
    idx = np.arange(Kmm.shape[0]) if usable is None else np.flatnonzero(usable)
    Kmm = Kmm[np.ix_(idx, idx)]
    scale = float(np.max(np.diag(Kmm))) if idx.size else 0.0
    if not np.all(np.isfinite(Kmm)) or not scale > 0:
        raise ValueError("The inducing draws' kernel matrix is not finite and positive on its diagonal; check "
                         "that samples and scores are finite, or pick another kernel.")
    c, piv, rank, info = lapack.dpstrf(Kmm, tol=_BASIS_TOL * scale, lower=1)
    if info < 0:
        raise ValueError(f"LAPACK dpstrf failed (info={info}) on the inducing draws' kernel matrix.")
    return InducingBasis(idx[piv[:rank] - 1], np.tril(c[:rank, :rank]))


# an inducing draw whose kernel function has more than this many times as much squared mass on the
# draws of its own held-out block as on all others plus its penalty is left out of the basis.  Fitted
# without that block, little pins its coefficient, and the block's held-out residuals are inflated
# about that many times: eight schools, 4 x 5,000 draws, one draw of a funnel excursion (a ratio of
# 500) carried 99% of the held-out error at M = 500 and stopped the M-ladder there
_ISOLATION = 100.0


def isolated_inducing(Knm, inducing, labels, penalty):
    """Which inducing draws (M,) are isolated in their held-out block (``_ISOLATION``), from the
    cross Gram matrix ``Knm`` (N, M), the draws' fold ``labels`` (N,) and each kernel function's
    ``penalty`` (M,: nugget x k0(z, z))."""
    own = np.zeros(len(inducing))
    block_of = labels[inducing]
    for label in np.unique(block_of):
        cols = np.flatnonzero(block_of == label)
        rows = np.flatnonzero(labels == label)
        own[cols] = np.einsum("nm,nm->m", Knm[np.ix_(rows, cols)], Knm[np.ix_(rows, cols)])
    return isolated_by_mass(own, np.einsum("nm,nm->m", Knm, Knm), penalty)


def isolated_by_mass(own, total, penalty):
    """``isolated_inducing`` from each inducing kernel function's squared mass on its own block's
    draws (``own``), on all draws (``total``) and its ``penalty``."""
    return own > _ISOLATION * (np.maximum(total - own, 0.0) + penalty)


def design_for(X, S, tau, T, order):
    """The intercept/polynomial design of ``order`` and its width, checked against the draws."""
    P = design_matrix(X, S, tau, T, order)
    N, p = P.shape
    if N - p - 1 < 2:
        raise ValueError(f"{N} draws cannot fit {p} intercept/polynomial coefficients; lower poly_order.")
    return P, p


def coefficient_se(L, at, e, w, nug):
    """Model se (p, k) of the design coefficients under the equivalent Gaussian model (module
    docstring), from the factor L of the normal matrix, the residuals e and the basis weights w.
    ``at``: the coefficients' positions in the normal matrix, or their number p when they come first."""
    at = np.arange(at) if np.ndim(at) == 0 else np.asarray(at)
    N, p = e.shape[0], at.size
    s2 = (np.einsum("nk,nk->k", e, e) + nug * np.einsum("mk,mk->k", w, w)) / max(N - p, 1)
    Ainv_diag = np.sum(linalg.solve_triangular(L, np.eye(L.shape[0])[:, at], lower=True, check_finite=False) ** 2,
                       axis=0)
    return np.sqrt(Ainv_diag)[:, None] * np.sqrt(np.maximum(s2, 0.0))[None, :]


def _as_slice(mask):
    """A boolean mask that selects one contiguous run, as a slice (rows of K_NM as a view, not a copy)."""
    idx = np.flatnonzero(mask)
    return slice(idx[0], idx[-1] + 1) if idx.size and idx[-1] - idx[0] + 1 == idx.size else idx


def fit_nystrom_heldout(problem, spec, inducing, keep_fit=False, Knm=None):
    """Inducing-point kernel CVs of the columns of ``problem.Y`` for each order in ``spec.orders``;
    the same return as :func:`kernel_cv.fit_exact_heldout`.  ``inducing`` indexes the z_j; ``Knm``,
    when given, is their cross Gram matrix (N, M) (``cross_gram``)."""
    X, S, Y, tau, T, labels = problem
    kernel, B, nugget, orders = spec
    perm = quarter_order(labels)
    if perm is not None:
        # the per-quarter normal matrices read K_NM a quarter at a time: on rows in quarter order
        # those are views; gathered by a mask each was a copy of the quarter (four per design),
        # a third of the fit's time at N = 20,000, M = 1,000
        inverse = np.argsort(perm)
        fits = fit_nystrom_heldout(problem.rows(perm), spec, inverse[inducing], keep_fit,
                                   None if Knm is None else Knm[perm])
        return [unpermuted(f, inverse) for f in fits]
    if Knm is None:
        Knm = cross_gram(kernel, B, X, S, tau, inducing)
    return _fit_in_quarter_order(problem, spec, inducing, keep_fit, Knm)[0]


class NestedLayout(NamedTuple):
    """Where each coefficient sits in the normal matrix shared by nested designs: the columns of the
    largest design in the order ``seq`` (the smallest design's, then each larger design's new ones),
    the kernel features after the first ``nb`` of them.  Design i is then the leading ``sizes[i]``
    rows and columns, so one Cholesky factor and one panel L^-1 F' serve every design."""

    seq: np.ndarray  # columns of the largest design
    nb: int  # the smallest design's width: the features start here
    r: int
    sizes: list  # per design (in the order given): r + its width
    at: list  # per design: its coefficients' positions, in its own column order

    @classmethod
    def of(cls, d, T, orders, q_all, r):
        columns = {o: design_columns(d, T, o, q_all) for o in orders}
        seq = []
        for o in sorted(set(orders)):
            seq += [c for c in columns[o] if c not in seq]
        nb = len(columns[min(orders)])
        place = {c: (j if j < nb else r + j) for j, c in enumerate(seq)}
        return cls(np.array(seq), nb, r, [r + len(columns[o]) for o in orders],
                   [np.array([place[c] for c in columns[o]]) for o in orders])

    def features(self, Ps, Phi):
        """F = [the smallest design's columns, Phi, the others] from ``Ps`` = P[:, seq]."""
        return np.concatenate([Ps[:, :self.nb], Phi, Ps[:, self.nb:]], axis=1)

    def times(self, Ps, Phi, theta):
        """F theta for the design of ``len(theta)`` coefficients, without forming F (N x r)."""
        nb, r = self.nb, self.r
        return Ps[:, :nb] @ theta[:nb] + Phi @ theta[nb:nb + r] + Ps[:, nb:len(theta) - r] @ theta[nb + r:]

    def normal_part(self, Ps, Phi, Y):
        """F'F and F'Y of one quarter's rows, without forming F (it would double the memory)."""
        nb, r = self.nb, self.r
        p = Ps.shape[1]
        poly = np.r_[0:nb, nb + r:p + r]
        A = np.empty((p + r, p + r))
        A[np.ix_(poly, poly)] = Ps.T @ Ps
        A[poly, nb:nb + r] = Ps.T @ Phi
        A[nb:nb + r, poly] = A[poly, nb:nb + r].T
        A[nb:nb + r, nb:nb + r] = Phi.T @ Phi
        rhs = np.empty((p + r,) + Y.shape[1:])
        rhs[poly] = Ps.T @ Y
        rhs[nb:nb + r] = Phi.T @ Y
        return A, rhs


def nested_factors(A, sizes):
    """The lower Cholesky factor of A and of each leading block ``A[:s, :s]`` (``cholesky_jitter``),
    and whether the blocks' are blocks of A's: they are unless A's needed jitter (then each leading
    block is factorised on its own, as a fit of that design alone would be)."""
    L, jitter = cholesky_jitter(A)
    if jitter == 0:
        return L, [L[:s, :s] for s in sizes], True
    return L, [L if s == A.shape[0] else cholesky_jitter(A[:s, :s])[0] for s in sizes], False


def nested_fit_on(quarters, parts, penalty, T, sizes):
    """``fit_on(mask, i)`` for ``heldout.jackknife_bias``: the intercepts of design i (the leading
    ``sizes[i]`` coefficients) fitted on the whole quarters inside ``mask``, from the per-quarter
    normal matrices and right-hand sides ``parts``; one factorisation per mask serves every design."""
    cache = {}

    def fit_on(mask, i):
        inside = tuple(j for j, q in enumerate(quarters) if mask[q].all())
        if inside not in cache:
            cache[inside] = nested_factors(sum(parts[j][0] for j in inside) + penalty, sizes)[1]
        rhs = sum(parts[j][1] for j in inside)[:sizes[i]]
        return linalg.cho_solve((cache[inside][i], True), rhs, check_finite=False)[:T]
    return fit_on


class NestedSystem(NamedTuple):
    """The penalised normal equations of nested designs (a :class:`NestedLayout`) summed over the
    quarters of the draws: the factors of :func:`nested_factors`, the right-hand side, and the fits
    without quarters for the jackknife (:func:`nested_fit_on`)."""

    L_all: np.ndarray
    factors: list
    shared: bool
    rhs: np.ndarray
    fit_on: object

    @classmethod
    def of(cls, quarters, parts, layout, nug, T):
        """From the per-quarter F'F and F'Y ``parts`` and the penalty ``nug`` on the kernel features."""
        nb, r = layout.nb, layout.r
        penalty = np.zeros_like(parts[0][0])
        penalty[nb:nb + r, nb:nb + r] = nug * np.eye(r)
        L_all, factors, shared = nested_factors(sum(a for a, _ in parts) + penalty, layout.sizes)
        return cls(L_all, factors, shared, sum(b for _, b in parts),
                   nested_fit_on(quarters, parts, penalty, T, layout.sizes))

    def solve(self, i, labels, T):
        """Design i's coefficients theta (in the layout's order), the jackknife bias of its T
        intercepts, and a0 = A^-1 e_0 (how its first intercept weighs each draw, through F a0)."""
        L = self.factors[i]
        theta = linalg.cho_solve((L, True), self.rhs[:L.shape[0]], check_finite=False)
        bias = jackknife_bias(lambda m: self.fit_on(~m, i), labels, theta[:T])
        a0 = linalg.cho_solve((L, True), np.eye(L.shape[0])[:, 0], check_finite=False)
        return theta, bias, a0


def _fit_in_quarter_order(problem, spec, inducing, keep_fit, Knm, rows=None):
    """``fit_nystrom_heldout`` on draws in quarter order, as (fits, finish): one fit per order.
    ``rows``: a slice of whole quarters whose held-out residuals are computed now; ``finish()``
    adds the others' (NaN until then).  Without ``rows``, all are, and ``finish`` does nothing."""
    X, S, Y, tau, T, labels = problem
    kernel, B, nugget, orders = spec
    Kmm = Knm[inducing]
    Kmm = 0.5 * (Kmm + Kmm.T)
    nug = nugget * float(np.mean(np.diag(Kmm) / np.diag(B)[tau[inducing]]))
    basis = inducing_basis(Kmm, ~isolated_inducing(Knm, inducing, labels, nug * np.diag(Kmm)))
    Phi = basis.features(Knm)
    r = Phi.shape[1]
    quarters = [_as_slice(q) for q in split_parts(labels, 4)]
    P_all, p_all = design_for(X, S, tau, T, max(orders))
    layout = NestedLayout.of(X.shape[1], T, list(orders), p_all // T - 1, r)
    Ps = P_all[:, layout.seq]
    # F'F and F'Y as sums over quarters of the draws: the fits without one of them (same
    # hyperparameters, ``heldout.jackknife_bias``) then cost no extra pass over Phi
    system = NestedSystem.of(quarters, [layout.normal_part(Ps[q], Phi[q], Y[q]) for q in quarters], layout, nug, T)

    fits, residuals = [], []
    for i, (order, L, at) in enumerate(zip(orders, system.factors, layout.at)):
        theta, bias, a0 = system.solve(i, labels, T)
        beta, w = theta[at], theta[layout.nb:layout.nb + r]
        e = Y - layout.times(Ps, Phi, theta)
        predictor = kernel_predictor(kernel, B, X[inducing], S[inducing], tau[inducing], T, order,
                                     basis.coefficients(w, len(inducing)), beta) if keep_fit else None
        fits.append(ExactHeldout(order, beta, coefficient_se(L, at, e, w, nug), np.full_like(e, np.nan),
                                 np.full_like(e, np.nan), layout.times(Ps, Phi, a0), bias, predictor))
        residuals.append(e)

    def heldout(part):
        # one panel of whole held-out blocks: slabs of blocks gathered by index took 1.4x as long at
        # N = 20,000, M = 1,000 (the gathers, and triangular solves on fewer columns)
        done = designs_heldout(system, layout.features(Ps[part], Phi[part]),
                               [e[part] for e in residuals], layout.sizes, labels[part], overwrite=True)
        for fit, (resid, z) in zip(fits, done):
            fit.resid[part], fit.z[part] = resid, z

    heldout(slice(None) if rows is None else rows)
    return fits, (lambda: None) if rows is None else functools.partial(heldout, slice(rows.stop, None))


def chunk_heldout(L, Fc, e, labels, overwrite=False):
    """Held-out residuals and their standardised form for the draws of whole held-out blocks (all
    draws, or a chunk of the dask path), from their rows ``Fc`` of F, their residuals ``e`` and the
    Cholesky factor L of the normal matrix: with G = L^-1 Fc', H_BB = G_B' G_B for each block
    (``heldout`` does the rest).  ``overwrite``: ``Fc`` (C-ordered) may be overwritten."""
    G = lower_solve(L, Fc.T, overwrite_b=overwrite)
    return projection_deletion_residuals(e, G.T, labels)


def designs_heldout(system, Fc, es, sizes, labels, overwrite=False):
    """``chunk_heldout`` of nested designs at once, as (resid, z) per design: ``Fc`` holds the rows of F
    in a :class:`NestedLayout` (design i is its first ``sizes[i]`` columns), ``es`` each design's
    residuals there, and ``system`` is their :class:`NestedSystem`.  Shared factors give one panel
    G = L^-1 Fc' for every design, and each block's b x b product is built up across the designs
    (``heldout.nested_deletion_residuals``); otherwise each design has its own."""
    if not system.shared:
        return [chunk_heldout(L, Fc[:, :size], e, labels) for L, size, e in zip(system.factors, sizes, es)]
    G = lower_solve(system.L_all, Fc.T, overwrite_b=overwrite)
    by_size = np.argsort(sizes, kind="stable")
    done = nested_deletion_residuals([es[j] for j in by_size], G.T, [sizes[j] for j in by_size], labels)
    out = [None] * len(sizes)
    for j, pair in zip(by_size, done):
        out[j] = pair
    return out


# the most inducing draws ``choose_inducing`` tries
MAX_INDUCING = 1000
# M grows fourfold: on every ladder measured (eight schools and the logistic regression at 4 x 5,000
# draws, bench/scaling.py's d = 5 and 20 at 20,000) the held-out error still fell by 28-89% from M = 500
# to 1,000, so a fit at M = 500 bought nothing; from 250 the cap of 1,000 is one step
_M_GROWTH = 4


# held-out mean squared residual at most this share of an integrand's variance: its CV se is about a
# hundredth of the plain mean's (the square root), so the sampler would need 10,000 times the draws to
# match it.  A larger M costs O(N M^2) for digits beyond those: regression d = 11, 4 x 25,000 draws, where
# the squares behind the sd are within 1.4e-5 at M = 250, summary 19 s -> 9 s and median CV / MCMC error
# of the means 2.6e-6 -> 1.0e-4 against 1e-6 of the variance, which took the ladder on to M = 1,000
ACCURATE_ENOUGH = 1e-4


def accurate_enough(per_column):
    """Whether some design's held-out errors ``per_column`` (one array of shares of the variance per
    design) are within ``ACCURATE_ENOUGH`` on every integrand."""
    return any(bool(np.all(e <= ACCURATE_ENOUGH)) for e in per_column)


def choose_inducing(problem, spec, rng, *, m_start=250, m_max=MAX_INDUCING, tol=0.1, mem_bytes=1e9, client=None,
                    keep_fit=False):
    """Fit with M = m_start, 4 m_start, ... inducing draws (up to the cap) and keep the M after which
    the held-out error stopped improving by more than ``tol`` (relative), or was within
    ``ACCURATE_ENOUGH`` on every integrand.  Returns a :class:`NystromChoice`.
    With a dask.distributed ``client`` the features are a dask array on its workers (the fit
    installed in :mod:`.external`) and ``mem_bytes`` no longer bounds M."""
    N = problem.X.shape[0]
    m_cap = int(min(m_max, N // 2, max(m_start, mem_bytes // (8 * N)) if client is None else m_max))
    order = rng.permutation(N)  # nested inducing sets: each M extends the last
    perm = quarter_order(problem.labels)
    if perm is None:
        return _choose(problem, spec, order, m_start, m_cap, tol, client, keep_fit)
    # fitted in quarter order (see ``fit_nystrom_heldout``), with the same inducing draws
    inverse = np.argsort(perm)
    choice = _choose(problem.rows(perm), spec, inverse[order], m_start, m_cap, tol, client, keep_fit)
    return replace(choice, fits=[unpermuted(f, inverse) for f in choice.fits])


def _choose(problem, spec, order, m_start, m_cap, tol, client, keep_fit):
    # each M is judged on the held-out residuals of half of the draws (two whole quarters, the
    # first half in quarter order); only the M kept gets the other half's.  The dask path computes
    # every draw's in one pass over the workers' features, but judges on the same half, so both
    # paths keep the same M
    X, S, Y, tau, T, labels = problem
    half = slice(0, int(sum(q.sum() for q in split_parts(labels, 4)[:2])))
    scale = np.maximum(np.var(Y, axis=0), 1e-300)
    best, path, M, Knm, accurate = None, [], min(m_start, m_cap), None, False
    while True:
        if client is None:
            # the columns of the last M are kept, not recomputed
            Knm = cross_gram(spec.kernel, spec.B, X, S, tau, order[:M], previous=Knm)
            fitted = _fit_in_quarter_order(problem, spec, order[:M], keep_fit, Knm, rows=half)
        else:
            fitted = (cluster_nystrom()(problem, spec, order[:M], client, keep_fit=keep_fit), lambda: None)
        per_column = [np.mean(f.resid[half] ** 2, axis=0) / scale for f in fitted[0]]
        err = min(float(np.sum(e)) for e in per_column)
        path.append((M, err))
        improved = best is None or err < (1.0 - tol) * best[1]
        if best is None or err < best[1]:
            best = (M, err, fitted)
        accurate = accurate_enough(per_column)
        if not improved or M >= m_cap or accurate:
            break
        M = min(_M_GROWTH * M, m_cap)
    fits, finish = best[2]
    finish()
    return NystromChoice(best[0], fits, path, accurate)
