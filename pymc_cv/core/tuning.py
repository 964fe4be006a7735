"""Hyperparameters of kernel CVs: restricted marginal likelihood with exact gradients.

The kernel CV is the posterior mean of a Gaussian process with covariance
s2 (B k0 + nugget I) and flat priors on the intercepts and polynomial
coefficients, so its lengthscales, nugget and task matrix B are tuned by
maximising the restricted (REML) likelihood with L-BFGS-B: the kernel with
B fixed (the identity when B is to be learned), then jointly with B = L L'
(diagonal of L through exp, so B stays positive definite).  The
median heuristic is only a starting point: a multi-start over multiples of
it picks where L-BFGS begins (FINDINGS: the heuristic itself can be 10-100x
worse than a tuned lengthscale).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import linalg, optimize

from .kernel_cv import design_matrix
from .kernels import gram_with_contraction
from .linalg import restricted_loglik, restricted_loglik_value
from .threads import single_threaded_when_small

__all__ = ["Hyperparameters", "tune_marginal_likelihood", "subsample_per_task", "tune_points"]

_LOG_NUGGET_BOUNDS = (np.log(1e-10), np.log(1.0))
_START_MULTIPLES = (0.5, 1.0, 2.0, 4.0, 8.0)
# CV fits interpolate noise-free integrands, so the nugget sits near its floor and the REML
# carries round-off of ~1e-6 relative; a tolerance at or below it only buys failed line searches
# (a 3-parameter regression: 72 evaluations at 1e-7, 37 at 1e-5, within 0.3 of an REML of -16,498,
# the same estimates; eight schools, logistic regression and GP regression, 3-6 nutpie runs each:
# the same error ratios and coverage)
_LBFGS_OPTIONS = {"ftol": 1e-5, "maxiter": 200}
# when tasks are (nearly) the same function the likelihood creeps up a ridge towards correlation 1
# for hundreds of iterations while the estimates no longer move; stop the joint stage earlier (TI's
# rung groups: most fits were still gaining nats at 100 iterations, yet at 50 the log evidences of 11
# of 12 runs moved by at most 0.0006 nats and one, 0.41 nats off with se 0.23, moved to 0.08 off; the
# TI estimation took 10-40% less time; bench/vvcv_vs_cf.py the same but for its N = 20 cell)
_LBFGS_OPTIONS_JOINT = {"ftol": 1e-7, "maxiter": 50}


@dataclass
class Hyperparameters:
    kernel: object
    nugget: float
    B: np.ndarray
    loglik: float


# max_tune_points="auto": 30% of the draws, between 150 and 400.  An REML evaluation costs about
# five factorisations of the tuning set and L-BFGS takes ~100 of them, so tuning on all of 500
# draws took 500x one Cholesky of the full system; on 150 it takes ~30x, with the same Borehole
# errors (bench/borehole.py: 0.0118 at m = 50, 100, 150 either way) and 4x less time.
_AUTO_TUNE = (0.3, 150, 400)
# a kernel's few hyperparameters in one or two dimensions are pinned down by fewer draws:
# at most 100 (d + 1) of them
_AUTO_TUNE_PER_DIM = 100


def tune_points(max_points, N, d=None):
    """The number of draws hyperparameters are tuned on, from ``max_tune_points`` (checked by
    ``validation.check_tune_points``), N and (for "auto") the dimension d."""
    if max_points == "auto":
        frac, lo, hi = _AUTO_TUNE
        if d is not None:
            hi = min(hi, _AUTO_TUNE_PER_DIM * (d + 1))
        return int(min(N, max(lo, min(hi, round(frac * N)))))
    return int(max_points)


def subsample_per_task(tau, T, max_points, rng):
    """Indices of at most ``max_points`` draws (an int or "auto", see ``tune_points``), split
    across tasks in proportion to their size."""
    N = tau.size
    if isinstance(max_points, str):
        max_points = tune_points(max_points, N)
    if N <= max_points:
        return np.arange(N)
    keep = []
    for t in range(T):
        idx = np.flatnonzero(tau == t)
        k = max(int(round(max_points * idx.size / N)), 2)
        keep.append(np.sort(rng.choice(idx, size=min(k, idx.size), replace=False)))
    return np.concatenate(keep)


def _tril_params(L):
    i, j = np.tril_indices(L.shape[0])
    vals = L[i, j].copy()
    diag = i == j
    vals[diag] = np.log(vals[diag])
    return vals


def _tril_matrix(params, T):
    i, j = np.tril_indices(T)
    L = np.zeros((T, T))
    vals = params.copy()
    diag = i == j
    vals[diag] = np.exp(vals[diag])
    L[i, j] = vals
    return L


# near the nugget's floor the REML's round-off can reach 1e-3 of its value: L-BFGS then spends dozens of
# line-search evaluations on noise at one point (kidiq's SECF on 400 draws: 58 evaluations, from the 12th
# on the same point to three decimals with values scattered over 13 nats of 15,529).  After this many
# evaluations without a gain of ftol (relative) on the best value, the best point is taken.
_STALL_EVALUATIONS = 8


class _Stalled(Exception):
    pass


class _StallWatch:
    """An objective that raises ``_Stalled`` once ``_STALL_EVALUATIONS`` evaluations in a row have not
    bettered the best value by ftol (relative), keeping the best point."""

    def __init__(self, objective):
        self.objective, self.value, self.point, self.since = objective, np.inf, None, 0

    def __call__(self, theta):
        value, grad = self.objective(theta)
        if self.value - value > _LBFGS_OPTIONS["ftol"] * max(abs(value), 1.0):  # inf - inf is nan: no gain
            self.since = 0
        else:
            self.since += 1
        if value < self.value:
            self.value, self.point = value, theta.copy()
        if self.since >= _STALL_EVALUATIONS:
            raise _Stalled
        return value, grad


def _minimize_until_stalled(objective, start, f_start, bounds):
    """L-BFGS-B on ``objective`` (value, gradient) from ``start`` (value ``f_start``), stopped where it
    stalls; (x, value), the start when no finite value was found."""
    watch = _StallWatch(objective)
    try:
        res = optimize.minimize(watch, start, jac=True, method="L-BFGS-B", bounds=bounds, options=_LBFGS_OPTIONS)
        x, value = res.x, res.fun
    except _Stalled:
        x, value = watch.point, watch.value
    return (x, value) if np.isfinite(value) else (start, f_start)


@single_threaded_when_small(lambda kernel, X, *a, **k: X.shape[0])
def tune_marginal_likelihood(
    kernel, X, S, y, tau, T, B, poly_order, nugget=1e-4, learn_B=False, tune_nugget=True
):
    """Tune the lengthscales (and nugget, and B if ``learn_B``) by REML.

    With ``learn_B`` False, B is held fixed up to an overall scale (profiled
    out).  With ``learn_B`` True, B is learned jointly with the lengthscales
    from a start at the fixed-B optimum; the returned B is on the scale of
    the standardised values.  Returns ``Hyperparameters``.
    """
    P = design_matrix(X, S, tau, T, poly_order)
    N = X.shape[0]
    if N - P.shape[1] < 2:
        raise ValueError(
            f"{N} draws cannot fit {P.shape[1]} intercept/polynomial coefficients; "
            "use a lower poly_order or more draws."
        )
    Bmask = B[np.ix_(tau, tau)]
    n_k = kernel.n_params

    def fixed_covariance(theta, contraction):
        kern = kernel.with_log_params(theta[:n_k])
        eta = np.exp(theta[n_k]) if tune_nugget else nugget
        K, contract, diag_grad = gram_with_contraction(kern, X, S) if contraction else (kern.gram(X, S), None, None)
        scale = float(np.mean(np.diag(K)))
        C = Bmask * K if T > 1 else K.copy()
        C[np.diag_indices(N)] += eta * scale
        return C, eta, scale, contract, diag_grad

    def fixed_objective(theta):
        C, eta, scale, contract, diag_grad = fixed_covariance(theta, True)
        try:
            value, W, _ = restricted_loglik(C, P, y, profile_scale=True, allow_jitter=False, projector=False)
        except (ValueError, np.linalg.LinAlgError):
            return np.inf, np.zeros_like(theta)
        # the nugget follows the mean diagonal of K, so it moves with the lengthscale too
        trace_w = np.trace(W)
        grad = list(0.5 * (contract(Bmask * W if T > 1 else W) + eta * diag_grad * trace_w))
        if tune_nugget:
            grad.append(0.5 * eta * scale * trace_w)
        return -value, -np.asarray(grad)

    def fixed_value(theta):
        try:
            return -restricted_loglik_value(fixed_covariance(theta, False)[0], P, y, profile_scale=True,
                                            allow_jitter=False)
        except (ValueError, np.linalg.LinAlgError):
            return np.inf

    theta0 = kernel.log_params()
    if n_k or tune_nugget:
        starts = []
        for mult in _START_MULTIPLES if n_k else (1.0,):
            th = np.concatenate([theta0 + np.log(mult), [np.log(nugget)] if tune_nugget else []])
            starts.append((fixed_value(th), th))
        f_start, start = min(starts, key=lambda s: s[0])
        bounds = [(t - np.log(50.0), t + np.log(50.0)) for t in theta0]
        if tune_nugget:
            bounds.append(_LOG_NUGGET_BOUNDS)
        theta, f_theta = _minimize_until_stalled(fixed_objective, start, f_start, bounds)
    else:
        theta = np.zeros(0)
        f_theta = fixed_value(theta)
    kern = kernel.with_log_params(theta[:n_k])
    eta = float(np.exp(theta[n_k])) if tune_nugget else nugget
    best = Hyperparameters(kern, eta, B, -f_theta)
    if not learn_B or T == 1:
        return best
    return _learn_task_matrix(best, X, S, y, tau, T, P, n_k)


def _learn_task_matrix(start, X, S, y, tau, T, P, n_k):
    """Joint REML over (log lengthscales, log nugget, L) with B = L L', from the fixed-B optimum,
    with a weak LKJ(2) prior on the task correlations (a MAP estimate of B).

    L is optimised in units of sqrt(s2), the profiled amplitude at the start, so its entries
    are O(1) like the log-parameters.
    """
    N = X.shape[0]
    K0 = start.kernel.gram(X, S)
    k_scale = float(np.mean(np.diag(K0)))
    C0 = start.B[np.ix_(tau, tau)] * K0
    C0[np.diag_indices(N)] += start.nugget * k_scale
    _, _, Q = restricted_loglik(C0, P, y, profile_scale=True)
    s2 = float(y @ Q @ y) / (N - P.shape[1])
    if not s2 > 1e-24 * max(float(y @ y) / N, 1e-300):
        return start  # the polynomial part fits y exactly: nothing is left for B to explain
    L0 = np.linalg.cholesky(start.B + 1e-12 * np.eye(T))
    ti, tj = np.tril_indices(T)
    diag = ti == tj
    onehot = np.zeros((N, T))
    onehot[np.arange(N), tau] = 1.0

    def objective(params):
        kern = start.kernel.with_log_params(params[:n_k])
        log_nug = params[n_k]
        L = _tril_matrix(params[n_k + 1 :], T)
        Bfull = s2 * (L @ L.T)
        Bm = Bfull[np.ix_(tau, tau)]
        K, contract, _ = gram_with_contraction(kern, X, S)
        C = Bm * K
        C[np.diag_indices(N)] += np.exp(log_nug)
        try:
            value, W, _ = restricted_loglik(C, P, y, profile_scale=False, allow_jitter=False, projector=False)
        except (ValueError, np.linalg.LinAlgError):
            return np.inf, np.zeros_like(params)
        grad = list(0.5 * contract(W * Bm))
        grad.append(0.5 * np.exp(log_nug) * np.trace(W))
        # LKJ(2) prior on the task correlations R: log det R = log det B - sum_t log B_tt; it keeps
        # B away from singular when two tasks are (nearly) the same function, where the
        # likelihood alone climbs towards correlation 1 for ever
        Bd = np.diag(Bfull)
        value += 2.0 * np.sum(np.log(np.diag(L))) + T * np.log(s2) - np.sum(np.log(Bd))
        Linv = linalg.solve_triangular(L, np.eye(T), lower=True, check_finite=False)
        G = (Linv.T @ Linv) / s2 - np.diag(1.0 / Bd)  # d log det R / dB, B^-1 through L
        # dB-contraction: M[t, t'] = sum over draws of tasks t, t' of W * K
        M = onehot.T @ (W * K) @ onehot
        A = 0.5 * M + G
        gvals = ((A + A.T) @ L * s2)[ti, tj]
        gvals[diag] *= L[ti[diag], tj[diag]]
        return -value, -np.concatenate([grad, gvals])

    theta0 = start.kernel.log_params()
    p0 = np.concatenate([theta0, [np.log(start.nugget * k_scale * s2)], _tril_params(L0)])
    bounds = [(t - np.log(50.0), t + np.log(50.0)) for t in theta0]
    # the same floor as the fixed-B stage: nugget >= 1e-10 x the mean diagonal of B k0
    floor = _LOG_NUGGET_BOUNDS[0] + np.log(k_scale * s2 * np.mean(np.diag(start.B)))
    bounds.append((max(p0[n_k] + np.log(1e-6), floor), p0[n_k] + np.log(1e6)))
    bounds += [(-20.0, 20.0) if a == b else (None, None) for a, b in zip(ti, tj)]
    f0 = objective(p0)[0]
    res = optimize.minimize(objective, p0, jac=True, method="L-BFGS-B", bounds=bounds,
                            options=_LBFGS_OPTIONS_JOINT)
    params, f = (res.x, res.fun) if np.isfinite(res.fun) and res.fun <= f0 else (p0, f0)
    kern = start.kernel.with_log_params(params[:n_k])
    L = _tril_matrix(params[n_k + 1 :], T)
    nugget_rel = float(np.exp(params[n_k]) / np.mean(kern.diag(X, S)))
    return Hyperparameters(kern, nugget_rel, s2 * (L @ L.T), -f)
