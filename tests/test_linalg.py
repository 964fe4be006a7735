"""The restricted likelihood, its gradient, and leave-one-out residuals."""

import numpy as np
import pytest

from pymc_cv.core.kernel_cv import design_matrix, fit_kernel_cv
from pymc_cv.core.kernels import SquaredExponential
from pymc_cv.core.linalg import cholesky_jitter, restricted_loglik, restricted_loglik_value


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


@pytest.mark.parametrize("profile", [True, False])
@pytest.mark.parametrize("columns", [1, 3])
def test_reml_value_from_solves_and_weights_without_projector_equal_the_full_computation(profile, columns):
    X, S, y = _problem()
    Y = y if columns == 1 else np.column_stack([y, np.cos(X[:, 1]), X[:, 0] * X[:, 1]])
    P = design_matrix(X, S, np.zeros(40, dtype=int), 1, 1)
    C = SquaredExponential(lengthscale=np.array([1.3, 0.7])).gram(X, S) + 1e-4 * np.eye(40)
    value, W, Q = restricted_loglik(C, P, Y, profile_scale=profile)
    assert Q is not None
    np.testing.assert_allclose(restricted_loglik_value(C, P, Y, profile_scale=profile), value, rtol=1e-10)
    value_w, W_only, none = restricted_loglik(C, P, Y, profile_scale=profile, projector=False)
    assert none is None and value_w == value
    np.testing.assert_array_equal(W_only, W)


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


def test_low_rank_inverse_is_the_dense_inverse_with_a_per_draw_nugget():
    from pymc_cv.core.low_rank import LowRankInverse

    rng = np.random.default_rng(0)
    F = rng.normal(size=(60, 7))
    # columns the factor barely carries, beside large ones and a near copy: nothing divides by them
    skewed = np.column_stack([F * np.logspace(1, -6, 7), F[:, 0] * 10 + 1e-9 * rng.normal(size=60)])
    for F in (F, skewed):
        nugget = rng.uniform(0.5, 2.0, size=60)
        dense = np.linalg.inv(F @ F.T + np.diag(nugget))
        inv = LowRankInverse(F, nugget)
        B = rng.normal(size=(60, 3))
        scale = np.abs(dense).max()
        np.testing.assert_allclose(inv.solve(B), dense @ B, rtol=1e-9, atol=1e-12 * scale)
        np.testing.assert_allclose(inv.diag(), np.diag(dense), rtol=1e-9)
        idx = np.array([3, 10, 11, 40])
        np.testing.assert_allclose(inv.block(idx), dense[np.ix_(idx, idx)], rtol=1e-9, atol=1e-12 * scale)
        idx = np.arange(0, 60, 2)  # a large block: the Woodbury solve against the dense one
        W, V = rng.normal(size=(idx.size, 2)), rng.normal(size=(idx.size, 2))
        rhs = rng.normal(size=(idx.size, 3))
        np.testing.assert_allclose(inv.solve_block_update(idx, W, V, rhs),
                                   np.linalg.solve(dense[np.ix_(idx, idx)] - W @ V.T, rhs), rtol=1e-8, atol=1e-10)


def test_pivoted_factor_reaches_its_tolerance_or_says_it_cannot():
    from pymc_cv.core.low_rank import pivoted_factor

    rng = np.random.default_rng(1)
    x = rng.normal(size=(400, 1))
    K = np.exp(-0.5 * (x - x.T) ** 2)  # smooth in one dimension: numerically low rank
    fac = pivoted_factor(np.diag(K), lambda idx: K[:, idx].copy(), 1e-8, 200, rng)
    assert fac is not None and fac.F.shape[1] < 60
    assert np.max(np.diag(K - fac.F @ fac.F.T)) <= 1e-8
    assert np.max(np.abs(K - fac.F @ fac.F.T)) <= 1e-8  # PSD residual: off-diagonals below the diagonal
    assert pivoted_factor(np.ones(400), lambda idx: np.eye(400)[:, idx], 1e-8, 50, rng) is None  # full rank


def test_pivoted_factor_gives_up_on_the_way_when_its_schedule_says_it_is_far_from_the_tolerance():
    from pymc_cv.core.low_rank import pivoted_factor

    computed = []

    def columns(idx):
        computed.append(idx.size)
        return np.eye(600)[:, idx]

    diag = np.ones(600)  # the identity: every column leaves the others' diagonal at 1, 1e8 tolerances away
    rng = np.random.default_rng(2)
    assert pivoted_factor(diag, columns, 1e-8, 480, rng, give_up=((1 / 3, 1e6),)) is None
    assert 160 <= sum(computed) < 160 + 64  # stopped at the first block past a third of 480
    computed.clear()
    assert pivoted_factor(diag, columns, 1e-8, 480, rng, give_up=()) is None
    assert 480 <= sum(computed) < 480 + 64  # without a schedule: at the limit


def test_pivoted_factor_past_its_schedule_goes_on_while_its_progress_gets_there_in_time():
    from pymc_cv.core.low_rank import pivoted_factor

    def factor(decades_per_column, m_max):
        diag = 10.0 ** (-decades_per_column * np.arange(1000))  # a diagonal matrix: one column per entry
        computed = []

        def columns(idx):
            computed.append(idx.size)
            return np.diag(diag)[:, idx]

        # the schedule alone gives up at the first block past half of m_max: still 1e-8 tolerances away
        return pivoted_factor(diag, columns, 1e-8, m_max, np.random.default_rng(3), give_up=((1 / 2, 1.0),)), computed

    # 2 decades per 100 columns: 8 decades take about 400 of the 600 allowed, so it goes on and finishes
    fac, computed = factor(0.02, 600)
    assert fac is not None and fac.max_residual <= 1e-8 and sum(computed) < 600
    # 0.2 decades per 100 columns would take 4,000: given up at the schedule
    fac, computed = factor(0.002, 600)
    assert fac is None and 300 <= sum(computed) < 300 + 64


def test_on_time_extrapolates_the_recent_fall_of_the_largest_residual():
    from pymc_cv.core.low_rank import RECENT_COLUMNS, _on_time

    log_tol = np.log(1e-8)
    # from 1e2 at 2 decades per 100 columns: 1e-4.4 at 320 columns, the tolerance at about 500
    fast = [(m, np.log(1e2) - 0.02 * m * np.log(10)) for m in range(0, 321, 64)]
    assert _on_time(fast, log_tol, 600)
    assert not _on_time(fast, log_tol, 400)  # by 400 columns (440 with the slack) it would not be done
    slow = [(m, np.log(1e2) - 0.002 * m * np.log(10)) for m in range(0, 321, 64)]
    assert not _on_time(slow, log_tol, 600)
    assert not _on_time([(m, -m) for m in range(0, RECENT_COLUMNS, 64)], log_tol, 10 ** 6)  # too little history
