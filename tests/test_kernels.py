"""Stein kernels against a direct finite-difference evaluation of the Langevin operator."""

import numpy as np
import pytest

from pymc_cv.core.kernels import (
    InverseMultiquadric,
    Polynomial,
    PreconditionedSquaredExponential,
    SquaredExponential,
    gram_with_contraction,
)


def _base(kernel, x, y):
    """The base kernel k(x, y) itself, recovered from its Stein kernel with zero scores is not
    possible, so each kernel's k is written out here independently."""
    if isinstance(kernel, PreconditionedSquaredExponential):
        ell2 = np.asarray(kernel.lengthscale) ** 2
        se = np.exp(-0.5 * np.sum((x - y) ** 2 / ell2))
        return se / ((1 + kernel.alpha * x @ x) * (1 + kernel.alpha * y @ y))
    if isinstance(kernel, InverseMultiquadric):
        ell2 = np.asarray(kernel.lengthscale) ** 2
        return (kernel.c**2 + np.sum((x - y) ** 2 / ell2)) ** kernel.beta
    if isinstance(kernel, SquaredExponential):
        ell2 = np.asarray(kernel.lengthscale) ** 2
        return np.exp(-0.5 * np.sum((x - y) ** 2 / ell2))
    return (x @ y + kernel.c) ** kernel.degree


def _stein_fd(kernel, x, sx, y, sy, h=1e-4):
    d = x.size
    k = _base(kernel, x, y)
    gx = np.array([(_base(kernel, x + h * e, y) - _base(kernel, x - h * e, y)) / (2 * h) for e in np.eye(d)])
    gy = np.array([(_base(kernel, x, y + h * e) - _base(kernel, x, y - h * e)) / (2 * h) for e in np.eye(d)])
    div = sum(
        (_base(kernel, x + h * e, y + h * e) - _base(kernel, x + h * e, y - h * e)
         - _base(kernel, x - h * e, y + h * e) + _base(kernel, x - h * e, y - h * e)) / (4 * h * h)
        for e in np.eye(d)
    )
    return div + sx @ gy + sy @ gx + (sx @ sy) * k


KERNELS = [
    SquaredExponential(lengthscale=np.array([0.7, 1.3, 2.0])),
    SquaredExponential(lengthscale=np.array([1.1])),
    InverseMultiquadric(lengthscale=np.array([0.9, 1.5, 1.2])),
    PreconditionedSquaredExponential(lengthscale=np.array([1.5]), alpha=0.1),
    Polynomial(degree=2, c=1.0),
    Polynomial(degree=3, c=0.5),
]


@pytest.mark.parametrize("kernel", KERNELS, ids=lambda k: type(k).__name__)
def test_stein_kernel_matches_finite_differences(kernel):
    rng = np.random.default_rng(3)
    X, SX = rng.normal(size=(4, 3)), rng.normal(size=(4, 3))
    Y, SY = rng.normal(size=(5, 3)), rng.normal(size=(5, 3))
    K = kernel.gram(X, SX, Y, SY)
    ref = np.array([[_stein_fd(kernel, X[i], SX[i], Y[j], SY[j]) for j in range(5)] for i in range(4)])
    np.testing.assert_allclose(K, ref, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(kernel.diag(X, SX), np.diag(kernel.gram(X, SX)), rtol=1e-10)


@pytest.mark.parametrize("kernel", KERNELS[:4], ids=lambda k: type(k).__name__)
def test_lengthscale_gradients_match_finite_differences(kernel):
    rng = np.random.default_rng(4)
    X, S = rng.normal(size=(6, 3)), rng.normal(size=(6, 3))
    K, grads = kernel.gram_and_grads(X, S)
    np.testing.assert_allclose(K, kernel.gram(X, S), rtol=1e-12)
    theta = kernel.log_params()
    for j, g in enumerate(grads):
        e = np.zeros_like(theta)
        e[j] = 1e-6
        fd = (kernel.with_log_params(theta + e).gram(X, S) - kernel.with_log_params(theta - e).gram(X, S)) / 2e-6
        np.testing.assert_allclose(g, fd, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("kernel", KERNELS[:4] + [PreconditionedSquaredExponential(lengthscale=np.array([0.8, 1.2, 2.0]))],
                         ids=lambda k: type(k).__name__)
def test_gradient_contraction_matches_finite_differences(kernel):
    # what REML tuning needs, sum(W * dK / dlog l_j) and the mean diagonal of dK / dlog l_j, against
    # central differences of the Gram matrix (W not symmetric, so every term of the expansion counts)
    rng = np.random.default_rng(5)
    X, S = rng.normal(size=(7, 3)), rng.normal(size=(7, 3))
    W = rng.normal(size=(7, 7))
    K, contract, diag_grad = gram_with_contraction(kernel, X, S)
    np.testing.assert_allclose(K, kernel.gram(X, S), rtol=1e-12)
    theta = kernel.log_params()
    for j in range(theta.size):
        e = np.zeros_like(theta)
        e[j] = 1e-6
        fd = (kernel.with_log_params(theta + e).gram(X, S) - kernel.with_log_params(theta - e).gram(X, S)) / 2e-6
        np.testing.assert_allclose(contract(W)[j], np.sum(W * fd), rtol=1e-5)
        np.testing.assert_allclose(diag_grad[j], np.mean(np.diag(fd)), rtol=1e-5)


def test_stein_kernel_has_zero_mean_under_target():
    # E_{x ~ N(0,1)} k0(x, y) = 0 for every y: checked by Gauss-Hermite quadrature
    nodes, weights = np.polynomial.hermite_e.hermegauss(80)
    weights = weights / weights.sum()
    x = nodes[:, None]
    y = np.array([[0.3], [-1.2], [2.0]])
    for kernel in KERNELS[1:2] + KERNELS[3:]:
        K = kernel.gram(x, -x, y, -y)
        assert np.max(np.abs(weights @ K)) < 1e-10


def test_tuning_stops_where_the_gradient_no_longer_leads_anywhere_and_keeps_its_best_point():
    """A gradient at odds with the values (as round-off makes it near the nugget's floor, where kidiq's REML
    gradient kept a norm of 371 through 45 evaluations at one point): plain L-BFGS-B spends dozens of
    line-search evaluations there; the watched minimisation stops 8 evaluations after its last gain, at
    the same point."""
    from scipy import optimize

    from pymc_cv.core.tuning import _minimize_until_stalled

    target = np.array([1.0, -2.0])
    calls = {"plain": 0, "watched": 0}

    def objective(key):
        def f(x):
            calls[key] += 1
            r = x - target
            return -1.5e4 + r @ r, 2.0 * r + np.array([5.0, 0.0])
        return f

    bounds = [(-5.0, 5.0)] * 2
    plain = optimize.minimize(objective("plain"), np.zeros(2), jac=True, method="L-BFGS-B", bounds=bounds,
                              options={"ftol": 1e-5, "maxiter": 200})
    x, value = _minimize_until_stalled(objective("watched"), np.zeros(2), np.inf, bounds)
    assert calls["plain"] > 30 and calls["watched"] < 15
    np.testing.assert_allclose(x, plain.x, atol=1e-3)
    assert value <= plain.fun + 1e-6


def test_tuning_of_a_smooth_objective_is_plain_l_bfgs():
    from scipy import optimize

    from pymc_cv.core.tuning import _LBFGS_OPTIONS, _minimize_until_stalled

    def f(x):
        r = x - np.array([0.3, 2.0, -1.0])
        return float(np.sum(np.cosh(r))), np.sinh(r)

    bounds = [(-4.0, 4.0)] * 3
    plain = optimize.minimize(f, np.zeros(3), jac=True, method="L-BFGS-B", bounds=bounds, options=_LBFGS_OPTIONS)
    x, value = _minimize_until_stalled(f, np.zeros(3), np.inf, bounds)
    np.testing.assert_array_equal(x, plain.x)
    assert value == plain.fun


def test_cf_and_secf_tuned_side_by_side_give_the_numbers_of_tuning_in_turn(monkeypatch):
    """The CF's and the SECF's REML tunings run on two threads, one BLAS thread each: the same
    estimates, se and held-out residuals as one after the other, and really off the main thread."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    import pymc_cv
    from pymc_cv.core import estimate, threads

    rng = np.random.default_rng(11)
    x = rng.normal(size=(1200, 2))
    F = np.column_stack([np.sin(x[:, 0]) + x[:, 1] ** 2, np.cos(x[:, 0] * x[:, 1])])
    truth = np.array([1.0, 1 / np.sqrt(2)])  # E sin = 0, E x^2 = 1; E cos(x y) = E exp(-y^2 / 2)

    def run():
        return pymc_cv.cv_estimate(F, x, -x, method="auto", random_seed=1)

    monkeypatch.setattr(threads, "_usable_cores", lambda: 1)
    in_turn = run()
    tuned_on = []
    tune = estimate._tune

    def recording(*args):
        tuned_on.append(threading.get_ident())
        return tune(*args)

    monkeypatch.setattr(threads, "_usable_cores", lambda: 2)
    monkeypatch.setattr(estimate, "_tune", recording)
    side_by_side = run()
    assert len(set(tuned_on)) == 2 and threading.get_ident() not in tuned_on
    assert list(side_by_side.method) == list(in_turn.method)
    for a, b in ((in_turn.estimate, side_by_side.estimate), (in_turn.se, side_by_side.se)):
        np.testing.assert_array_equal(a, b)
    assert np.all(np.abs(side_by_side.estimate - truth) < 3 * side_by_side.se + 1e-3)
    # more draws than one BLAS thread suits, or off the main thread: in turn, in the calling thread
    here = threading.get_ident()
    assert threads.map_small(lambda _: threading.get_ident(), range(2), threads.SMALL + 1) == [here, here]
    with ThreadPoolExecutor(1) as pool:
        ident, ran = pool.submit(lambda: (threading.get_ident(),
                                          threads.map_small(lambda _: threading.get_ident(), range(2), 400))).result()
    assert ran == [ident, ident]


def test_a_cf_fitted_alone_on_its_factor_looks_for_no_secf_factor(monkeypatch):
    """Where the tuning draws keep the CF alone and its kernel matrix has a low-rank factor, the SECF's
    factor is not looked for: one factor, the CF's, and the estimates of the exact mean within 3 se."""
    import pymc_cv
    from pymc_cv.core import estimate

    rng = np.random.default_rng(3)
    x = rng.normal(size=(1200, 1))
    F = np.column_stack([np.sin(x[:, 0]) + x[:, 0] ** 2, np.cos(x[:, 0])])
    truth = np.array([1.0, np.exp(-0.5)])
    looked_for = []
    factor = estimate.low_rank_factor

    def recording(problem, spec, *args, **kwargs):
        looked_for.append(spec.orders[0])
        return factor(problem, spec, *args, **kwargs)

    monkeypatch.setattr(estimate, "low_rank_factor", recording)
    monkeypatch.setattr(estimate, "_designs_worth_fitting", lambda tuned, *a: [tuned[0]])
    res = pymc_cv.cv_estimate(F, x, -x, method="auto", random_seed=1)
    assert looked_for == [0]
    assert any("rank-" in note for note in res.notes)
    assert set(res.method) <= {"cf", "zv1", "zv2", "mc"} and "cf" in set(res.method)
    assert np.all(np.abs(res.estimate - truth) < 3 * res.se + 1e-3)
