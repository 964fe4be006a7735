"""The shared-draws fast path: T integrands at many time points under one target, m shared draws.

E[sin(x1 + t) + t x2^2] under N(0, I_2) for T time points t in [0, 1]; truths exp(-1/2) sin t + t.
Prints the summed absolute error of vv-CV and MC and the seconds, with the fast-path solve alone
against one Cholesky of the m x m kernel matrix (the general solver would factor an (mT) x (mT) one).
Usage: python bench/shared_draws.py [T] [m]
"""

import sys
import time

import numpy as np

import pymc_cv
from pymc_cv.core.kernels import SquaredExponential
from pymc_cv.core.kronecker import fit_shared_draws


def main():
    T = int(sys.argv[1]) if len(sys.argv) > 1 else 100
    m = int(sys.argv[2]) if len(sys.argv) > 2 else 1000
    rng = np.random.default_rng(0)
    x = rng.normal(size=(m, 2))
    ts = np.linspace(0, 1, T)
    Y = np.column_stack([np.sin(x[:, 0] + t) + t * x[:, 1] ** 2 for t in ts])
    truth = np.exp(-0.5) * np.sin(ts) + ts
    t0 = time.perf_counter()
    res = pymc_cv.vvcv_estimate(list(Y.T), [x] * T, [-x] * T, B="learn")
    t_full = time.perf_counter() - t0
    kern = SquaredExponential(lengthscale=np.array([1.5, 1.5]))
    K = kern.gram(x, -x)
    K[np.diag_indices(m)] += 1e-4 * np.mean(np.diag(K))
    t0 = time.perf_counter()
    np.linalg.cholesky(K)
    t_chol = time.perf_counter() - t0
    t0 = time.perf_counter()
    fit_shared_draws(x, -x, Y, kern, res.B, 1e-4, 0)
    t_fast = time.perf_counter() - t0
    print(f"T = {T}, m = {m} shared draws (N = {T * m})")
    print(f"summed |error|: vv-CV {np.abs(res.estimate - truth).sum():.3g}, MC {np.abs(res.mc_estimate - truth).sum():.3g}, "
          f"ratio {np.abs(res.estimate - truth).sum() / np.abs(res.mc_estimate - truth).sum():.2g}")
    print(f"methods used: {sorted(set(res.method))}")
    print(f"seconds: full vvcv_estimate (tuning, learned B, 5-fold check) {t_full:.2f}; "
          f"fast-path solve alone {t_fast:.2f}; one m x m Cholesky {t_chol:.3f} (ratio {t_fast / t_chol:.1f})")


if __name__ == "__main__":
    main()
