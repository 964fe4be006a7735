"""The kernel matrix as a low-rank factor plus its nugget, when that is the same matrix to within a
small part of the nugget.

In few dimensions a smooth Stein kernel on thousands of draws has few eigenvalues above the nugget
(one parameter, 4,000 draws: about 50), so A = G + nugget I equals F F' + nugget I, with F of N x M,
up to a perturbation far below the nugget, and every GLS quantity of the exact fit (the intercepts,
the held-out residuals, the jackknife) follows in O(N M^2) instead of O(N^3) (``kernel_cv``).

F comes from randomly pivoted Cholesky (Chen, Epperly, Tropp and Webber 2023) in blocks: draws are
picked with probability proportional to the diagonal the factor does not yet explain, their kernel
columns are computed and the part the factor already explains is removed; the block adds the
directions of its residual matrix whose eigenvalues exceed the tolerance.  It stops once no draw's
unexplained diagonal exceeds the tolerance, or at ``m_max`` columns, or on the way there when it is still
far from the tolerance and its recent rate of progress would not get there by ``m_max`` either (then the
caller fits exactly).
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import numpy as np

__all__ = ["LowRankFactor", "pivoted_factor", "LowRankInverse"]

# (share of m_max, how many times the tolerance the largest unexplained diagonal entry may still be
# there): past it the factor will not be done in time (posteriordb, 4,000 draws, m_max = 666: factors
# that finished were within 3e3 of the tolerance halfway, garch and eight schools, which did not, 2e6-3e9)
HALFWAY = ((1 / 2, 1e5),)
# a factor far from the tolerance at a checkpoint is still kept going when the fall of the largest
# unexplained diagonal entry over about this many of its last columns, continued at the same rate on a
# log scale, reaches the tolerance by ON_TIME x m_max.  Smooth kernels in few dimensions speed up on the
# way, the others slow down.  GP regression, 20,000 draws: 1e5-9e5 tolerances away at 500 of 1,000
# columns, falling 1.1-1.4 decades per 100 (on time by 865-1,043), done at 860 columns; given up there by
# the schedule alone in 8 of 12 seeds of summary, which left its errors 2-3x larger on inducing points.
# Eight schools and the logistic regression at 20,000 draws fall 0.4-0.9 decades per 100 there (on time
# by 1,163 at the earliest) and end 3e5-2e7 tolerances away at 1,000 columns
RECENT_COLUMNS = 256
ON_TIME = 1.1


class LowRankFactor(NamedTuple):
    """G ~ F F' with every draw's unexplained diagonal at most ``max_residual``."""

    F: np.ndarray  # (N, M)
    max_residual: float
    pivots: np.ndarray  # the draws whose kernel columns were computed


def pivoted_factor(diag, columns: Callable, tol, m_max, rng, block=64, give_up=HALFWAY):
    """A :class:`LowRankFactor` of the PSD matrix with diagonal ``diag`` (N,) and columns
    ``columns(idx) -> (N, len(idx))``, to ``tol`` on every diagonal entry; None when that takes
    more than ``m_max`` columns, or when ``give_up`` (pairs of a share of ``m_max`` and a multiple of ``tol``)
    says it will."""
    residual = np.asarray(diag, dtype=float).copy()
    N = residual.size
    # columns are written into one buffer: growing F by concatenation copied it at every block, a
    # third of a failed attempt's time (eight schools, 20,000 draws)
    buffer = np.empty((N, m_max + block))
    m = 0
    F = buffer[:, :0]
    pivots = []
    progress = []  # (columns, log of the largest unexplained diagonal entry) after each block
    while residual.max() > tol:
        progress.append((m, np.log(residual.max())))
        if m >= m_max:
            return None
        if any(m >= share * m_max and residual.max() > far * tol for share, far in give_up) and not _on_time(
                progress, np.log(tol), m_max):
            return None
        p = np.maximum(residual, 0.0)
        picked = np.unique(rng.choice(N, size=min(block, N), p=p / p.sum()))
        picked = picked[residual[picked] > tol]
        G = columns(picked)
        G -= F @ F[picked].T
        H = G[picked]
        w, V = np.linalg.eigh(0.5 * (H + H.T))
        keep = w > tol
        if not keep.any():  # what these draws add is below the tolerance: they are explained
            residual[picked] = 0.0
            continue
        new = G @ (V[:, keep] / np.sqrt(w[keep]))
        buffer[:, m:m + new.shape[1]] = new
        m += new.shape[1]
        F = buffer[:, :m]
        pivots.extend(picked.tolist())
        residual -= np.einsum("nm,nm->n", new, new)
        residual[picked] = np.minimum(residual[picked], 0.0)
    return LowRankFactor(np.ascontiguousarray(F), float(max(residual.max(), 0.0)), np.array(pivots, dtype=int))


def _on_time(progress, log_tol, m_max):
    """Whether the largest unexplained diagonal entry, falling at its rate over the last
    ``RECENT_COLUMNS`` columns or so, reaches ``exp(log_tol)`` by ``ON_TIME * m_max`` columns."""
    m, now = progress[-1]
    earlier = [(mi, li) for mi, li in progress if mi <= m - RECENT_COLUMNS]
    if not earlier:
        return False
    m0, then = earlier[-1]
    rate = (then - now) / (m - m0)  # fall of the log per column
    return rate > 0 and m + (now - log_tol) / rate <= ON_TIME * m_max


class LowRankInverse:
    """A^-1 for A = F F' + D (F of N x M, D diagonal: the nugget, per draw or one for all): what
    ``kernel_cv``'s exact fit needs of A^-1 (products, its diagonal, its diagonal blocks), in O(N M)
    per column.

    With Ft = D^-1/2 F and the eigendecomposition Ft'Ft = V diag(w) V', W = Ft V, Woodbury gives

        A^-1 = D^-1/2 [I - W diag(1 / (1 + w)) W'] D^-1/2,

    which divides by no eigenvalue, so directions the factor barely carries (w near 0) cost no
    accuracy, and nothing falls back to an SVD of Ft (gp_regr, 4,000 draws: 0.24 s a fit).
    """

    def __init__(self, F, nugget):
        self.h = np.broadcast_to(1.0 / np.sqrt(np.asarray(nugget, dtype=float)), (F.shape[0],)).copy()
        Ft = F * self.h[:, None]
        w, V = np.linalg.eigh(Ft.T @ Ft)
        self.W = Ft @ V
        self.inner = 1.0 / (1.0 + np.maximum(w, 0.0))

    def solve(self, B):
        h = self.h if B.ndim == 1 else self.h[:, None]
        Bt = B * h
        WtB = self.W.T @ Bt
        return h * (Bt - self.W @ ((self.inner if B.ndim == 1 else self.inner[:, None]) * WtB))

    def diag(self):
        return self.h**2 * (1.0 - (self.W**2) @ self.inner)

    def block(self, idx):
        Wb, hb = self.W[idx], self.h[idx]
        inner = np.eye(idx.size) - (Wb * self.inner) @ Wb.T
        return hb[:, None] * inner * hb[None, :]

    def solve_block_update(self, idx, W, V, rhs):
        """(A^-1[idx, idx] - W V') \\ rhs for W, V of (len(idx), p), by Woodbury: the block is a
        diagonal minus a matrix of rank M + p, so a large block costs O(len(idx) (M + p)^2), not its
        cube."""
        Wb, hb = self.W[idx], self.h[idx]
        a = hb**2  # the diagonal part
        G = (hb[:, None] * Wb) * np.sqrt(self.inner)  # G G' is the low-rank part, each column at most unit scale
        left = np.concatenate([G, W], axis=1)
        right = np.concatenate([G, V], axis=1)
        core = np.eye(left.shape[1]) - right.T @ (left / a[:, None])
        x = rhs / a[:, None] if rhs.ndim == 2 else rhs / a
        return x + (left @ np.linalg.solve(core, right.T @ x)) / (a[:, None] if rhs.ndim == 2 else a)
