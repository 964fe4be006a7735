"""Exact kernel control variates: control functionals, semi-exact CFs and vv-CVs.

All three are one generalised-least-squares problem over the N = sum_t m_t
draws of T tasks (notes-vvcv section 4.3).  Each draw n observes only its
own task tau(n), so the matrix-valued Stein kernel K0 = B k0 reduces to the
N x N matrix

    G[n, n'] = B[tau(n), tau(n')] * k0(z_n, z_n'; s_tau(n)(z_n), s_tau(n')(z_n')),

which needs only each draw's own-task score.  With a flat prior on the
intercepts (and, for semi-exact CVs, on per-task polynomial coefficients),
the intercepts are the GLS estimates

    beta = (P' A^-1 P)^-1 P' A^-1 y,    A = G + nugget * I,

one N x N Cholesky.  T = 1, B = 1 gives the control functional of Oates et
al. (2017); adding Stein polynomial features to P gives the semi-exact CF
of South et al. (2022).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
from scipy import linalg
from scipy.linalg import blas, lapack

from .heldout import deletion_residuals, jackknife_bias, quarter_order, split_parts
from .linalg import cholesky_jitter, gls_from_solves, gls_solve, loo_residuals, reml_projector
from .low_rank import HALFWAY, LowRankInverse, pivoted_factor
from .polynomial import n_polynomial_features, stein_polynomial_features

__all__ = ["KernelCVFit", "design_matrix", "fit_kernel_cv", "polynomial_part", "stein_gram"]


def design_matrix(X, S, tau, T, poly_order):
    """Per-task intercepts, then per-task Stein polynomial features: shape (N, T (1 + q))."""
    N = X.shape[0]
    onehot = np.zeros((N, T))
    onehot[np.arange(N), tau] = 1.0
    if poly_order == 0:
        return onehot
    psi = stein_polynomial_features(X, S, poly_order)
    blocks = [onehot] + [onehot[:, [t]] * psi for t in range(T)]
    return np.concatenate(blocks, axis=1)


def polynomial_part(beta, T, poly_order, X, S, tau):
    """The Stein-polynomial part of g (zero mean under pi_tau): per-task coefficients after the
    T intercepts in ``beta``."""
    if not poly_order:
        return 0.0
    psi = stein_polynomial_features(X, S, poly_order)
    gamma = beta[T:].reshape(T, psi.shape[1])
    return np.einsum("nq,nq->n", psi, gamma[tau])


def stein_gram(kernel, B, X, S, tau, X2=None, S2=None, tau2=None):
    """The reduced vv-CV Gram matrix G (see module docstring); X2 given: the cross matrix."""
    K = kernel.gram(X, S, X2, S2) if X2 is not None else kernel.gram(X, S)
    tau2 = tau if X2 is None else tau2
    if B.shape == (1, 1):
        return K * B[0, 0] if B[0, 0] != 1.0 else K
    K *= B[np.ix_(tau, tau2)]
    return K


@dataclass
class KernelCVFit:
    """A fitted kernel CV: the GLS coefficients and what is needed to evaluate it elsewhere."""

    kernel: object
    B: np.ndarray
    nugget: float
    poly_order: int
    X: np.ndarray
    S: np.ndarray
    tau: np.ndarray
    beta: np.ndarray  # (T (1 + q),)
    coef: np.ndarray  # (N,)
    beta_cov: np.ndarray  # (T (1 + q), T (1 + q)), GP-model posterior covariance of beta
    chol: np.ndarray  # lower Cholesky factor of A = G + nugget I
    nugget_abs: float  # the nugget added to the diagonal of G

    @property
    def T(self):
        return self.B.shape[0]

    @property
    def intercepts(self):
        """The CV estimates of the T integrals (in the units of the fitted values)."""
        return self.beta[: self.T]

    @property
    def intercept_se(self):
        """Model-based (Bayesian-quadrature) standard errors of the intercepts."""
        return np.sqrt(np.diag(self.beta_cov)[: self.T])

    def predictive_sd(self, X, S, tau):
        """GP predictive sd (up to the amplitude) of f at new draws, to standardise residuals."""
        Kx = stein_gram(self.kernel, self.B, X, S, tau, self.X, self.S, self.tau)
        prior = self.kernel.diag(X, S) * np.diag(self.B)[tau] + self.nugget_abs
        v = linalg.solve_triangular(self.chol, Kx.T, lower=True, check_finite=False)
        return np.sqrt(np.maximum(prior - np.einsum("ij,ij->j", v, v), 1e-300))

    def zero_mean_part(self, X, S, tau):
        """g(x) minus its intercept for task tau: the part with zero mean under pi_tau."""
        G = stein_gram(self.kernel, self.B, X, S, tau, self.X, self.S, self.tau)
        return G @ self.coef + polynomial_part(self.beta, self.T, self.poly_order, X, S, tau)

    def loo_residuals(self, y):
        """Exact leave-one-out residuals of this fit on its own draws (``y`` as fitted), raw and
        standardised by their GP predictive sd; reuses the fit's Cholesky factor."""
        Q, _ = reml_projector(self.chol, design_matrix(self.X, self.S, self.tau, self.T, self.poly_order))
        return loo_residuals(Q, y)


def fit_kernel_cv(X, S, y, tau, T, kernel, B, nugget, poly_order):
    """Fit the exact kernel CV with fixed hyperparameters.

    ``nugget`` is relative to the mean diagonal of the unscaled Stein Gram
    matrix, so it means the same whatever the scale of the scores.
    """
    G = stein_gram(kernel, B, X, S, tau)
    k0_scale = float(np.mean(np.diag(G) / np.diag(B)[tau]))
    A = G
    A[np.diag_indices_from(A)] += nugget * k0_scale
    P = design_matrix(X, S, tau, T, poly_order)
    beta, coef, L, beta_cov = gls_solve(A, P, y[:, None])
    return KernelCVFit(kernel, B, nugget, poly_order, X, S, tau, beta[:, 0], coef[:, 0],
                       beta_cov[:, :, 0], L, nugget * k0_scale)


@dataclass
class ExactHeldout:
    """One design's GLS fit of k columns sharing the kernel matrix, with held-out residuals."""

    poly_order: int
    beta: np.ndarray  # (p, k)
    beta_se: np.ndarray  # (p, k): GP-model se of each coefficient
    resid: np.ndarray  # (N, k)
    z: np.ndarray  # (N, k)
    influence: np.ndarray  # (N,): beta_0 without block B is beta_0 - sum_B influence * resid
    # (T, k): delete-a-part jackknife estimate of the intercepts' bias (``heldout.jackknife_bias``)
    jackknife_bias: np.ndarray | None = None
    predictor: object | None = None  # (X, S) -> (n, k): the zero-mean part (single task), on request
    rank: int | None = None  # columns of the low-rank factor of the kernel matrix fitted on (None: exact)


def design_columns(d, T, order, q_all):
    """Columns of the largest design that make the design of ``order``: intercepts, then per task
    the first q features (features of lower degree come first)."""
    q = n_polynomial_features(d, order)
    return list(range(T)) + [T + t * q_all + i for t in range(T) for i in range(q)]


class _DenseInverse:
    """The diagonal blocks of C^-1 that the fit needs, from the Cholesky factor L of C.

    With L^-1 (``lapack.dtrtri``), C^-1[B, B] = L^-1[b:, B]' L^-1[b:, B] for a contiguous block B
    starting at b: the blocks of the four jackknife quarters, contiguous once the draws are in
    quarter order, cost 10/64 N^3 together where the whole inverse (``dpotri``) costs N^3 / 3.
    Every held-out fold lies in one quarter, so its block is part of its quarter's.  Below
    ``_QUARTER_BLOCKS_MIN_N`` draws the whole inverse is formed instead (``dpotri``).
    """

    def __init__(self, A):
        L, _ = cholesky_jitter(A)
        del A
        self.L = L
        self._blocks = {}

    def solve(self, B):
        return linalg.cho_solve((self.L, True), B, check_finite=False)

    def invert(self, quarters=None):
        """From here on ``diag`` and ``block`` work (the factor is overwritten by L^-1, or by the whole
        inverse without ``quarters``: boolean masks of the draws, each one contiguous run)."""
        if quarters is None:
            Ci, info = lapack.dpotri(self.L, lower=1, overwrite_c=1)  # C^-1 in the lower triangle, in place
            self.L, self.Li = None, None
            if info != 0:
                raise ValueError("Could not invert the kernel matrix from its Cholesky factor; increase `nugget`.")
            self.Ci, self._diag = Ci, np.diag(Ci).copy()
            return
        Li, info = lapack.dtrtri(self.L, lower=1, overwrite_c=1)
        self.L = None
        if info != 0:
            raise ValueError("Could not invert the kernel matrix from its Cholesky factor; increase `nugget`.")
        self.Li = Li
        self._diag = np.empty(Li.shape[0])
        self._quarter = np.full(Li.shape[0], -1)
        self._quarters = []  # the draws of each quarter
        for i, mask in enumerate(q for q in quarters if q.any()):
            idx = np.flatnonzero(mask)
            self._quarter[idx] = i
            self._quarters.append(idx)
            block = self._gram(idx)
            self._blocks[idx.tobytes()] = block
            self._diag[idx] = np.diag(block)
        if np.any(self._quarter < 0):
            self._diag = np.einsum("ij,ij->j", Li, Li)

    def _gram(self, idx):
        """C^-1[idx][:, idx] (``idx`` sorted), lower triangle valid: from the rows of L^-1 from the
        first draw of ``idx`` on (a contiguous run is a view, anything else a copy)."""
        cols = slice(idx[0], idx[-1] + 1) if idx[-1] - idx[0] + 1 == idx.size else idx
        return blas.dsyrk(1.0, self.Li[idx[0]:, cols], trans=1, lower=1)

    def diag(self):
        return self._diag

    def lower_block(self, idx):
        """Ci[idx][:, idx] with only its lower triangle valid (``idx`` sorted), for factorisations that
        read no more; kept, since every order of the fit asks again."""
        key = idx.tobytes()
        if key not in self._blocks and self.Li is None:
            self._blocks[key] = self.Ci[np.ix_(idx, idx)]
        if key not in self._blocks:
            q = self._quarter[idx[0]]
            if q >= 0 and np.all(self._quarter[idx] == q):
                whole = self._quarters[q]
                local = idx - whole[0]
                self._blocks[key] = self._blocks[whole.tobytes()][np.ix_(local, local)]
            else:
                self._blocks[key] = self._gram(idx)
        return self._blocks[key]

    def block(self, idx):
        blk = self.lower_block(idx)
        return np.tril(blk) + np.tril(blk, -1).T


# below this many draws the whole inverse (one ``dpotri``) costs no more than the quarter blocks and
# their permutation (400 draws: 8 ms against 15 ms; 1,000: 65 ms against 59 ms; 4,000: 1.00 s against 0.93 s)
_QUARTER_BLOCKS_MIN_N = 1000


def fit_exact_heldout(problem, spec, keep_fit=False, factor=None):
    """Exact kernel CVs of the columns of ``problem.Y`` (N, k) (a :class:`~.problem.HeldoutProblem`)
    for each polynomial order in ``spec.orders`` (a :class:`~.problem.KernelSpec`),
    all from one Cholesky factor of A = G + nugget I, with their held-out residuals in closed
    form (``heldout.deletion_residuals``), also without each quarter of the draws for the jackknife
    estimate of the bias (``heldout.jackknife_bias``); nothing N x N is kept.

    ``factor``: a :class:`~.low_rank.LowRankFactor` of G; A is then F F' + nugget I, the same matrix
    to within its ``max_residual``, and nothing N x N is formed.  None is returned when the design
    is too ill-conditioned for that (P' A^-1 P: condition number above 1e12); fit exactly then.

    Returns a list of :class:`ExactHeldout`, one per order; with ``keep_fit`` (T = 1) each carries
    a predictor of its zero-mean part at new draws.
    """
    quarter_blocks = factor is None and problem.X.shape[0] >= _QUARTER_BLOCKS_MIN_N
    if quarter_blocks:
        perm = quarter_order(problem.labels)
        if perm is not None:
            # in quarter order, each quarter's block of the inverse is one contiguous run (``_DenseInverse``)
            inverse = np.argsort(perm)
            nugget = spec.nugget if np.ndim(spec.nugget) == 0 else np.asarray(spec.nugget)[perm]
            fits = fit_exact_heldout(problem.rows(perm), spec._replace(nugget=nugget), keep_fit)
            return [unpermuted(f, inverse) for f in fits]
    X, S, Y, tau, T, labels = problem
    kernel, B, nugget, orders = spec
    N, k = Y.shape
    if factor is None:
        A = stein_gram(kernel, B, X, S, tau)
        k0_scale = float(np.mean(np.diag(A) / np.diag(B)[tau]))
        A[np.diag_indices_from(A)] += nugget * k0_scale
        inverse = _DenseInverse(A)
        del A
    else:
        k0_scale = float(np.mean(kernel.diag(X, S)))
        inverse = LowRankInverse(factor.F, np.asarray(nugget) * k0_scale)
    P_all = design_matrix(X, S, tau, T, max(orders))
    q_all = P_all.shape[1] // T - 1
    designs = [design_columns(X.shape[1], T, order, q_all) for order in orders]
    for cols in designs:
        if N - len(cols) < 2:
            raise ValueError(f"{N} draws cannot fit {len(cols)} intercept/polynomial coefficients; lower poly_order.")
    CiP_all = inverse.solve(P_all)
    if factor is not None and not _well_conditioned(P_all.T @ CiP_all):
        # the factor's error (a tenth of the nugget) is amplified by the design's condition number
        return None
    CiY = inverse.solve(Y)
    if factor is None:
        inverse.invert(split_parts(labels, 4) if quarter_blocks else None)
    ci_diag = inverse.diag()

    out = []
    for order, cols in zip(orders, designs):
        P, CiP = P_all[:, cols], CiP_all[:, cols]
        beta, Qy, Minv, s2 = gls_from_solves(P, CiP, Y, CiY)
        beta_se = np.sqrt(np.maximum(np.diag(Minv), 0.0))[:, None] * np.sqrt(s2)[None, :]
        W = CiP @ Minv

        def q_block(idx, W=W, CiP=CiP):
            return inverse.block(idx) - W[idx] @ CiP[idx].T

        def intercepts_without(mask, beta=beta, W=W, CiP=CiP, Qy=Qy):
            # deleting block B is adding a dummy per draw of B (coefficients r_B), which moves beta
            # by -(P'C^-1 P)^-1 (C^-1 P)_B' r_B
            idx = np.flatnonzero(mask)
            if factor is not None:
                r = inverse.solve_block_update(idx, W[idx], CiP[idx], Qy[idx])
            else:
                # the factorisation reads the lower triangle alone: no symmetric copy of the block
                lower = inverse.lower_block(idx) - W[idx] @ CiP[idx].T
                r = linalg.cho_solve(linalg.cho_factor(lower, lower=True, check_finite=False, overwrite_a=True),
                                     Qy[idx], check_finite=False)
            return beta[:T] - W[idx, :T].T @ r

        resid, z = deletion_residuals(Qy, lambda: ci_diag - np.einsum("np,np->n", W, CiP), q_block, labels)
        bias = jackknife_bias(intercepts_without, labels, beta[:T])
        out.append(ExactHeldout(order, beta, beta_se, resid, z, W[:, 0].copy(), bias,
                                kernel_predictor(kernel, B, X, S, tau, T, order, Qy, beta) if keep_fit else None,
                                None if factor is None else factor.F.shape[1]))
    return out


def unpermuted(fit, inverse):
    """An :class:`ExactHeldout` fitted on permuted draws, back in the draws' order (``inverse``:
    the inverse permutation)."""
    return replace(fit, resid=fit.resid[inverse], z=fit.z[inverse], influence=fit.influence[inverse])


def _well_conditioned(M, limit=1e12):
    """P' A^-1 P far enough from singular that a factor's small error in A cannot move the fit
    (semi-exact CFs on posteriordb regressions: condition numbers 5e10-1e11, estimates within 0.07
    se of the exact fit's; a singular design under a learned task matrix: 1e15, one eigenvalue < 0).
    Measured with the columns scaled to a unit diagonal: the scale of a column does not change the
    fit (a censored-normal mean, d = 1: 6e12 as it stands, 1.6 scaled)."""
    d = np.diag(M)
    if np.any(d <= 0):
        return False
    scaled = M / np.sqrt(np.outer(d, d))
    w = np.linalg.eigvalsh(0.5 * (scaled + scaled.T))
    return w[0] > 0 and w[-1] / w[0] < limit


# a factor of G counts as G when no draw's diagonal entry is off by more than this share of the
# nugget (tenth: held-out residuals within 1%, estimates within 0.05 se of the exact fit's in d = 1-6)
_FACTOR_TOL = 0.1
# a factor of up to N / 3 columns still costs a fraction of the exact fit: posteriordb at 4,000 draws,
# factors of 705-1,091 columns took summary 3.3 -> 1.5 s (nes), 3.1 -> 1.4 s (mesquite), 1.7 -> 0.9 s
# (low_dim_gauss_mix), 2.3 -> 1.1 s (hmm_example), 3.7 -> 3.1 s (gp_pois_regr) against at most N / 6
_FACTOR_SHARE = 3
# where the exact fit is the alternative a factor also gives up a third of the way (posteriordb, 4,000
# draws, m_max = 1,333: factors that finished were within 7e3 of the tolerance there, eight schools and
# garch 2e6-3e8); above exact_max_n the alternative is inducing points, which lose accuracy (GP
# regression, 20,000 draws: given up at a third, the mean's error ratio 0.025 -> 0.099), so only halfway
_GIVE_UP_BEFORE_EXACT = ((1 / 3, 1e6), (1 / 2, 1e5))
# below this many draws the exact fit takes a few hundredths of a second: no factor is tried
_FACTOR_MIN_N = 1000
# memory for a factor above exact_max_n draws (N x M doubles)
_FACTOR_BYTES = 2.5e8


def low_rank_factor(problem, spec, exact_max_n, rng, max_columns=None):
    """A :class:`~.low_rank.LowRankFactor` of the problem's Stein Gram matrix G, to a tenth of the
    nugget, when one with at most a third as many columns as draws exists (a sixth above
    ``exact_max_n`` draws); None otherwise (then fit exactly, or with inducing points above
    ``exact_max_n`` draws).  ``max_columns``: above ``exact_max_n`` draws, no more columns than this
    (the inducing-point fit's own limit, which a larger factor costs more than)."""
    X, S, _, tau, _, _ = problem
    kernel, B = spec.kernel, spec.B
    N = X.shape[0]
    if N < _FACTOR_MIN_N:
        return None
    m_max = N // _FACTOR_SHARE if N <= exact_max_n else int(min(N // 6, _FACTOR_BYTES / (8 * N), max_columns or np.inf))
    k0 = kernel.diag(X, S)
    diag = k0 * np.diag(B)[tau]
    return pivoted_factor(diag, lambda idx: stein_gram(kernel, B, X, S, tau, X[idx], S[idx], tau[idx]),
                          _FACTOR_TOL * float(np.min(spec.nugget)) * float(np.mean(k0)), m_max, rng,
                          give_up=_GIVE_UP_BEFORE_EXACT if N <= exact_max_n else HALFWAY)


def kernel_predictor(kernel, B, Z, SZ, tz, T, order, coef, beta):
    """The zero-mean part sum_j k0(x, z_j) coef_j + polynomial features times their coefficients
    of a single-task kernel CV, at new draws: (X, S) -> (n, k)."""
    if T != 1:
        raise ValueError("fit objects are kept for single-task kernel CVs only.")

    def zero_mean(X, S):
        tau = np.zeros(X.shape[0], dtype=int)
        g = stein_gram(kernel, B, X, S, tau, Z, SZ, tz) @ coef
        if order:
            g = g + design_matrix(X, S, tau, 1, order)[:, 1:] @ beta[1:]
        return g
    return zero_mean
