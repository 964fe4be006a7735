"""The restricted likelihood, its gradient, and leave-one-out residuals."""

import numpy as np
import pytest

from pymc_cv.core.kernel_cv import design_matrix, fit_kernel_cv
from pymc_cv.core.kernels import SquaredExponential
from pymc_cv.core.linalg import cholesky_jitter, restricted_loglik


def _problem():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 2))
    y = np.sin(X[:, 0]) + X[:, 1] ** 2
    return X, -X, (y - y.mean()) / y.std()


@pytest.mark.parametrize("profile", [True, False])
def test_reml_gradient_matches_finite_differences(profile):
    X, S, y = _problem()
    P = design_matrix(X, S, np.zeros(40, dtype=int), 1, 1)

    def C_of(theta):
        kern = SquaredExponential(lengthscale=np.exp(theta[:2]))
        K, dKs = kern.gram_and_grads(X, S)
        C = K + np.exp(theta[2]) * np.eye(40)
        return C, dKs + [np.exp(theta[2]) * np.eye(40)]

    theta = np.array([0.2, 0.5, np.log(1e-3)])
    C, dCs = C_of(theta)
    _, W, _ = restricted_loglik(C, P, y, profile_scale=profile)
    grad = np.array([0.5 * np.vdot(W, dC) for dC in dCs])
    h = 1e-6
    fd = [(restricted_loglik(C_of(theta + h * e)[0], P, y, profile)[0]
           - restricted_loglik(C_of(theta - h * e)[0], P, y, profile)[0]) / (2 * h) for e in np.eye(3)]
    np.testing.assert_allclose(grad, fd, rtol=1e-5)


def test_loo_residuals_equal_refits_without_each_draw():
    X, S, y = _problem()
    tau = np.zeros(40, dtype=int)
    kern = SquaredExponential(lengthscale=np.array([1.0, 1.3]))
    B = np.ones((1, 1))
    full = fit_kernel_cv(X, S, y, tau, 1, kern, B, 1e-3, 1)
    loo, _ = full.loo_residuals(y)
    nugget_abs = full.nugget_abs
    for i in (0, 7, 23):
        keep = np.arange(40) != i
        # the same absolute nugget as the full fit, so only the draw differs
        scale = nugget_abs / np.mean(kern.diag(X[keep], S[keep]))
        sub = fit_kernel_cv(X[keep], S[keep], y[keep], tau[keep], 1, kern, B, scale, 1)
        pred = sub.intercepts[0] + sub.zero_mean_part(X[i : i + 1], S[i : i + 1], tau[:1])[0]
        assert abs((y[i] - pred) - loo[i]) < 1e-6


def test_cholesky_without_jitter_refuses_a_singular_matrix():
    C = np.ones((3, 3))
    with pytest.raises(ValueError, match="without jitter"):
        cholesky_jitter(C, max_tries=1)
    L, jitter = cholesky_jitter(C)
    assert jitter > 0 and np.all(np.isfinite(L))
