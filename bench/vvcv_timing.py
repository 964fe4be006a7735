"""Time of the exact vv-CV with fixed hyperparameters against one numpy Cholesky of its N x N matrix.

Also the time of a full ``vvcv_estimate`` (hyperparameter learning on at most 400 draws, learned B,
held-out check) against the same Cholesky.  T = 2 tasks, d = 4.
Usage: python bench/vvcv_timing.py [N ...]
"""

import sys
import time

import numpy as np

import pymc_cv
from pymc_cv.core.kernel_cv import fit_kernel_cv, stein_gram
from pymc_cv.core.kernels import SquaredExponential
from pymc_cv.core.threads import blas_threads


def best_of(fn, k=2):
    out = np.inf
    for _ in range(k):
        t = time.perf_counter()
        fn()
        out = min(out, time.perf_counter() - t)
    return out


def main():
    Ns = [int(a) for a in sys.argv[1:]] or [500, 1000, 2000, 4000, 8000]
    d, T = 4, 2
    kern = SquaredExponential(lengthscale=np.full(d, 1.5))
    B = np.array([[1.0, 0.3], [0.3, 1.0]])
    x0 = np.random.default_rng(0).normal(size=(50, d))
    pymc_cv.vvcv_estimate([x0[:, 0], x0[:, 1]], [x0, x0], [-x0, -x0])  # first call imports ArviZ: not timed
    print(f"{'N':>6} {'cholesky s':>11} {'vv-CV fixed s':>14} {'ratio':>6} {'full estimate s':>16} {'ratio':>6}")
    for N in Ns:
        rng = np.random.default_rng(N)
        X = rng.normal(size=(N, d))
        tau = np.repeat(np.arange(T), N // T)
        y = np.sin(X[:, 0] + 0.3 * tau) + 0.5 * tau * X[:, 1] ** 2  # related, not identical, tasks
        A = stein_gram(kern, B, X, -X, tau)
        A[np.diag_indices(N)] += 1e-4 * np.mean(np.diag(A))
        t_chol = best_of(lambda: np.linalg.cholesky(A))
        with blas_threads(N):  # as the library runs it (one BLAS thread up to 1500 draws)
            t_fit = best_of(lambda: fit_kernel_cv(X, -X, y, tau, T, kern, B, 1e-4, 0))
        if N <= 8000:
            xs = [X[tau == t] for t in range(T)]
            t_full = best_of(lambda: pymc_cv.vvcv_estimate([y[tau == t] for t in range(T)], xs, [-x for x in xs]), 1)
            full = f"{t_full:>16.2f} {t_full / t_chol:>6.1f}"
        else:
            full = f"{'-':>16} {'-':>6}"
        print(f"{N:>6} {t_chol:>11.3f} {t_fit:>14.3f} {t_fit / t_chol:>6.2f} {full}")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
