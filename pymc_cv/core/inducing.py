"""Kernel CVs for large N: inducing points (subset of regressors).

g(x) = sum_j K0(x, z_j) c_j over M << N inducing draws z_j, with the same
intercepts/polynomial design P as the exact fit, minimising

    ||y - P beta - K_NM c||^2 + nugget * c' K_MM c,

a (p + M) x (p + M) system: O(N M^2) instead of O(N^3).  With M = N it is
the exact GLS solution (kernel ridge with unpenalised fixed effects).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import linalg

from .kernel_cv import design_matrix, polynomial_part, stein_gram

__all__ = ["InducingFit", "fit_inducing"]


@dataclass
class InducingFit:
    kernel: object
    B: np.ndarray
    poly_order: int
    Z: np.ndarray
    SZ: np.ndarray
    tau_z: np.ndarray
    beta: np.ndarray
    coef: np.ndarray

    @property
    def T(self):
        return self.B.shape[0]

    @property
    def intercepts(self):
        return self.beta[: self.T]

    def zero_mean_part(self, X, S, tau):
        g = stein_gram(self.kernel, self.B, X, S, tau, self.Z, self.SZ, self.tau_z) @ self.coef
        return g + polynomial_part(self.beta, self.T, self.poly_order, X, S, tau)


def fit_inducing(X, S, y, tau, T, kernel, B, nugget, poly_order, inducing_idx):
    """Fit the inducing-point kernel CV with fixed hyperparameters; ``inducing_idx`` picks the z_j."""
    Z, SZ, tz = X[inducing_idx], S[inducing_idx], tau[inducing_idx]
    Knm = stein_gram(kernel, B, X, S, tau, Z, SZ, tz)
    Kmm = Knm[inducing_idx]
    Kmm = 0.5 * (Kmm + Kmm.T)
    k0_scale = float(np.mean(np.diag(Kmm) / np.diag(B)[tz]))
    P = design_matrix(X, S, tau, T, poly_order)
    p = P.shape[1]
    F = np.concatenate([P, Knm], axis=1)
    # least squares on [F; 0 sqrt(nugget) R] rather than normal equations, which square cond(F)
    R = linalg.cholesky(Kmm + 1e-10 * np.mean(np.diag(Kmm)) * np.eye(Kmm.shape[0]), check_finite=False)
    pen = np.concatenate([np.zeros((R.shape[0], p)), np.sqrt(nugget * k0_scale) * R], axis=1)
    A = np.concatenate([F, pen], axis=0)
    rhs = np.concatenate([y, np.zeros(R.shape[0])])
    sol = linalg.lstsq(A, rhs, lapack_driver="gelsy", check_finite=False)[0]
    return InducingFit(kernel, B, poly_order, Z, SZ, tz, sol[:p], sol[p:])
