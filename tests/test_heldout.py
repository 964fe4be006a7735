"""Held-out residuals in closed form equal refits without each block; the block jackknife; large N."""

import pickle

import numpy as np
import pytest

import pymc_cv
from pymc_cv.core.heldout import deletion_residuals, fold_labels, projection_deletion_residuals
from pymc_cv.core.kernel_cv import design_matrix, fit_exact_heldout, fit_kernel_cv
from pymc_cv.core.kernels import SquaredExponential
from pymc_cv.core.nystrom import fit_nystrom_heldout
from pymc_cv.core.problem import HeldoutProblem, KernelSpec
from pymc_cv.core.zero_variance import zero_variance_candidate


def _draws(n, d=2, seed=0):
    x = np.random.default_rng(seed).normal(size=(n, d))
    return x, -x


def test_fold_labels_are_contiguous_blocks_per_chain_and_capped_in_size():
    chain = np.repeat([0, 1], [30, 20])
    labels = fold_labels(50, chain, 3)
    assert np.unique(labels).size == 6
    assert np.all(np.diff(labels[:30]) >= 0) and set(labels[:30]).isdisjoint(labels[30:])
    assert np.array_equal(fold_labels(7, None, 3), np.arange(7))  # independent draws: leave-one-out
    long = fold_labels(4000, np.zeros(4000, dtype=int), 2)
    assert np.bincount(long).max() <= 250


@pytest.mark.parametrize("order", [0, 1])
def test_kernel_block_deletion_residuals_and_intercepts_equal_refits(order):
    x, s = _draws(60)
    Y = np.column_stack([np.sin(x[:, 0]) + x[:, 1] ** 2, np.cos(x[:, 1])])
    kern = SquaredExponential(lengthscale=np.array([1.2, 0.9]))
    tau, B = np.zeros(60, dtype=int), np.ones((1, 1))
    labels = fold_labels(60, np.repeat([0, 1], 30), 3)
    fit = fit_exact_heldout(HeldoutProblem(x, s, Y, tau, 1, labels), KernelSpec(kern, B, 1e-3, [order]))[0]
    full = fit_kernel_cv(x, s, Y[:, 0], tau, 1, kern, B, 1e-3, order)
    k0_scale = full.nugget_abs / 1e-3
    for b in np.unique(labels):
        te = labels == b
        # the nugget is relative to the mean diagonal: refit with the full fit's absolute nugget
        G = kern.gram(x[~te], s[~te])
        nug_rel = k0_scale * 1e-3 / np.mean(np.diag(G))
        for j in range(2):
            sub = fit_kernel_cv(x[~te], s[~te], Y[~te, j], tau[~te], 1, kern, B, nug_rel, order)
            pred = sub.intercepts[0] + sub.zero_mean_part(x[te], s[te], tau[te])
            np.testing.assert_allclose(fit.resid[te, j], Y[te, j] - pred, rtol=1e-6, atol=1e-9)
            moved = fit.beta[0, j] - np.sum(fit.influence[te] * fit.resid[te, j])
            np.testing.assert_allclose(moved, sub.intercepts[0], rtol=1e-6, atol=1e-9)


def test_zero_variance_block_deletion_equals_refits():
    x, s = _draws(80, 3, seed=1)
    Y = np.column_stack([np.exp(0.3 * x[:, 0]), x[:, 1] * x[:, 2] + np.sin(x[:, 0])])
    chain = np.repeat([0, 1], 40)
    cand = zero_variance_candidate(x, s, Y, 2, None, chain, 4)
    labels = fold_labels(80, chain, 4)
    for b in np.unique(labels):
        te = labels == b
        D = np.column_stack([np.ones(80), pymc_cv.core.zero_variance.stein_polynomial_features(x, s, 2)])
        coef = np.linalg.lstsq(D[~te], Y[~te], rcond=None)[0]
        np.testing.assert_allclose(cand.resid[te], Y[te] - D[te] @ coef, rtol=1e-7, atol=1e-10)
        np.testing.assert_allclose(cand.estimate - cand.influence[te] @ cand.resid[te], coef[0], rtol=1e-7)


def test_cross_fit_gap_and_its_se_equal_refits_without_each_block():
    # the cross-fitted estimate: each draw's f minus the zero-mean part of the fit without its block
    x, s = _draws(80, 3, seed=2)
    Y = np.column_stack([np.exp(0.3 * x[:, 0]), x[:, 1] * x[:, 2] + np.sin(x[:, 0])])
    chain = np.repeat([0, 1], 40)
    cand = zero_variance_candidate(x, s, Y, 2, None, chain, 4)
    labels = fold_labels(80, chain, 4)
    D = np.column_stack([np.ones(80), pymc_cv.core.zero_variance.stein_polynomial_features(x, s, 2)])
    crossfit = np.empty_like(Y)
    for b in np.unique(labels):
        te = labels == b
        coef = np.linalg.lstsq(D[~te], Y[~te], rcond=None)[0]
        crossfit[te] = Y[te] - D[te, 1:] @ coef[1:]
    for i in range(2):
        np.testing.assert_allclose(cand.estimate[i] + cand.crossfit_gap(i, cand.resid[:, i]), crossfit[:, i].mean(),
                                   rtol=1e-10)
        fold_means = np.array([crossfit[labels == b, i].mean() for b in np.unique(labels)])  # equal-sized folds
        K = fold_means.size
        np.testing.assert_allclose(cand.crossfit_gap_se(i, cand.resid[:, i]), fold_means.std(ddof=1) / np.sqrt(K),
                                   rtol=1e-10)


@pytest.mark.parametrize("p", [6, 30])  # fewer coefficients than a block holds, and more
def test_low_rank_block_deletion_of_a_penalised_fit_equals_refits(p):
    rng = np.random.default_rng(3)
    n, lam = 100, 2.0
    D = rng.normal(size=(n, p))
    Y = D @ rng.normal(size=(p, 2)) + rng.normal(size=(n, 2))
    # ridge: hat matrix D (D'D + lam I)^-1 D' = U U' with U = D L^-T, L L' = D'D + lam I
    L = np.linalg.cholesky(D.T @ D + lam * np.eye(p))
    U = np.linalg.solve(L, D.T).T
    e = Y - U @ (U.T @ Y)
    labels = fold_labels(n, np.repeat([0, 1], 50), 4)
    resid, z = projection_deletion_residuals(e, U, labels)
    full = deletion_residuals(e, lambda: 1.0 - np.einsum("ij,ij->i", U, U),
                              lambda idx: np.eye(idx.size) - U[idx] @ U[idx].T, labels)
    np.testing.assert_allclose(resid, full[0], rtol=1e-9)
    np.testing.assert_allclose(z, full[1], rtol=1e-9)
    for b in np.unique(labels):
        te = labels == b
        coef = np.linalg.solve(D[~te].T @ D[~te] + lam * np.eye(p), D[~te].T @ Y[~te])
        np.testing.assert_allclose(resid[te], Y[te] - D[te] @ coef, rtol=1e-8, atol=1e-10)


def test_nystrom_with_every_draw_inducing_is_the_exact_fit():
    x, s = _draws(40, seed=2)
    y = (np.sin(x[:, 0]) + x[:, 1])[:, None]
    kern = SquaredExponential(lengthscale=np.array([1.0, 1.0]))
    tau, B = np.zeros(40, dtype=int), np.ones((1, 1))
    labels = fold_labels(40, np.zeros(40, dtype=int), 4)
    problem, spec = HeldoutProblem(x, s, y, tau, 1, labels), KernelSpec(kern, B, 1e-4, [1])
    ex = fit_exact_heldout(problem, spec)[0]
    ny = fit_nystrom_heldout(problem, spec, np.arange(40))[0]
    np.testing.assert_allclose(ny.beta[0], ex.beta[0], rtol=1e-5)
    assert design_matrix(x, s, tau, 1, 1).shape == (40, 3)


def test_nystrom_with_every_draw_inducing_is_the_exact_fit_where_k_mm_is_singular_to_rounding():
    """400 draws in two dimensions with a small nugget: K_MM's condition number is far beyond 1e8, so
    normal equations in the basis of the kernel functions (their condition number squared) lost the
    fit; in the basis orthonormal in the kernel's norm it is the exact fit."""
    x, s = _draws(400, seed=3)
    y = np.column_stack([np.sin(x[:, 0]) + x[:, 1] ** 2, np.cos(x[:, 0] * x[:, 1])])
    kern = SquaredExponential(lengthscale=np.array([1.5, 1.5]))
    tau, B = np.zeros(400, dtype=int), np.ones((1, 1))
    labels = fold_labels(400, np.zeros(400, dtype=int), 4)
    problem = HeldoutProblem(x, s, y, tau, 1, labels)
    for order in (0, 1):
        spec = KernelSpec(kern, B, 1e-7, [order])
        ex = fit_exact_heldout(problem, spec)[0]
        ny = fit_nystrom_heldout(problem, spec, np.arange(400))[0]
        assert np.all(np.abs(ny.beta[0] - ex.beta[0]) < 0.01 * ex.beta_se[0])
        assert np.mean(ny.resid ** 2) < 1.1 * np.mean(ex.resid ** 2)


@pytest.mark.parametrize("tasks, orders, shared", [(1, (0, 1), True), (1, (2, 0, 1), True), (2, (1, 2), True),
                                                   (1, (0, 1), False)])
def test_nested_inducing_fits_from_one_factor_equal_each_design_fitted_alone(tasks, orders, shared, monkeypatch):
    """The designs share one normal matrix (each a leading block of the largest) and one panel for their
    held-out residuals, whose blocks (250 draws here, between the widths of the designs) are deleted
    directly for the wider designs and by Woodbury for the narrower: every number is that of the design
    fitted on its own, and with more than one task the coefficients come back in the design's order.
    Where the largest design's factor needed jitter each design has its own (``shared`` False)."""
    from pymc_cv.core import nystrom
    from pymc_cv.core.linalg import cholesky_jitter

    if not shared:
        monkeypatch.setattr(nystrom, "nested_factors", lambda A, sizes: (
            cholesky_jitter(A)[0], [cholesky_jitter(A[:s, :s])[0] for s in sizes], False))
    n, d = 1000, 2
    x, s = _draws(n, d=d, seed=5)
    tau = np.arange(n) % tasks
    y = np.column_stack([np.sin(x[:, 0]) + x[:, 1] ** 2, np.cos(x[:, 0] * x[:, 1])])
    kern = SquaredExponential(lengthscale=np.array([1.2, 1.2]))
    B = np.eye(tasks) if tasks == 1 else np.array([[1.0, 0.5], [0.5, 1.0]])
    labels = fold_labels(n, np.repeat([0, 1], n // 2), 2)
    problem = HeldoutProblem(x, s, y, tau, tasks, labels)
    inducing = np.random.default_rng(0).choice(n, 240, replace=False)
    together = fit_nystrom_heldout(problem, KernelSpec(kern, B, 1e-6, list(orders)), inducing)
    assert [f.poly_order for f in together] == list(orders)
    for fit in together:
        alone = fit_nystrom_heldout(problem, KernelSpec(kern, B, 1e-6, [fit.poly_order]), inducing)[0]
        assert fit.beta.shape == alone.beta.shape == (design_matrix(x, s, tau, tasks, fit.poly_order).shape[1], 2)
        # to rounding, which the nugget's conditioning amplifies: measured in the fit's own units
        assert np.all(np.abs(fit.beta - alone.beta) < 1e-4 * alone.beta_se)
        assert np.all(np.abs(fit.jackknife_bias - alone.jackknife_bias) < 1e-4 * alone.beta_se[:tasks])
        np.testing.assert_allclose(fit.beta_se, alone.beta_se, rtol=1e-6)
        for key in ("resid", "z", "influence"):
            a, b = getattr(fit, key), getattr(alone, key)
            assert np.all(np.isfinite(a)) and np.max(np.abs(a - b)) < 1e-4 * np.sqrt(np.mean(b ** 2)), key


def test_nested_factors_fall_back_to_a_factor_per_design_where_the_largest_needs_jitter():
    from pymc_cv.core.nystrom import nested_factors

    A = np.eye(4)
    A[2:, 2:] = [[1.0, 1.0], [1.0, 1.0 + 1e-15]]  # singular to rounding beyond the first three columns
    L, factors, shared = nested_factors(A, [3, 2, 4])
    assert not shared and factors[2] is L
    np.testing.assert_array_equal(factors[0], np.linalg.cholesky(A[:3, :3]))  # no jitter in the leading blocks
    np.testing.assert_array_equal(factors[1], np.eye(2))
    L, factors, shared = nested_factors(A[:3, :3], [3, 2])
    assert shared and np.shares_memory(factors[1], L)


def test_inducing_draws_isolated_in_their_held_out_block_are_left_out_of_the_basis(monkeypatch):
    """Five draws of an excursion far from the rest, all in one held-out block, two of them inducing:
    held out with their block, their kernel functions are pinned by nothing but a tiny penalty."""
    from pymc_cv.core import nystrom

    rng = np.random.default_rng(7)
    x = rng.normal(size=(2000, 2))
    x[700:705] = np.array([5.0, 5.0]) + 0.05 * rng.normal(size=(5, 2))
    y = (np.sin(x[:, 0]) + np.cos(x[:, 1]))[:, None]
    labels = fold_labels(2000, np.repeat([0, 1, 2, 3], 500), 10)
    problem = HeldoutProblem(x, -x, y, np.zeros(2000, dtype=int), 1, labels)
    spec = KernelSpec(SquaredExponential(lengthscale=np.array([1.0, 1.0])), np.ones((1, 1)), 1e-8, [0])
    inducing = np.r_[np.arange(0, 2000, 20), 702]
    Knm = nystrom.cross_gram(spec.kernel, spec.B, x, -x, problem.tau, inducing)
    penalty = spec.nugget * np.mean(np.diag(Knm[inducing])) * np.diag(Knm[inducing])
    assert list(inducing[nystrom.isolated_inducing(Knm, inducing, labels, penalty)]) == [700, 702]
    block = labels == labels[702]
    kept = fit_nystrom_heldout(problem, spec, inducing)[0]
    assert np.mean(kept.resid[block] ** 2) < np.var(y)
    assert abs(kept.beta[0, 0] - np.exp(-0.5)) < 0.01
    monkeypatch.setattr(nystrom, "_ISOLATION", np.inf)
    with_them = fit_nystrom_heldout(problem, spec, inducing)[0]
    assert np.mean(with_them.resid[block] ** 2) > 100 * np.mean(kept.resid[block] ** 2)


def test_few_dimensions_fit_on_a_low_rank_factor_that_is_the_exact_fit(monkeypatch):
    from pymc_cv.core import kernel_cv

    x, s = _draws(3000, seed=5)
    F = np.column_stack([np.sin(x[:, 0]) + np.cos(x[:, 1]), np.exp(0.3 * x[:, 0])])
    chain = np.repeat([0, 1, 2], 1000)
    res = pymc_cv.cv_estimate(F, x, s, method="cf", chain=chain)
    assert any("rank-" in n and "factor" in n for n in res.notes)
    monkeypatch.setattr(kernel_cv, "_FACTOR_MIN_N", 10**9)
    exact = pymc_cv.cv_estimate(F, x, s, method="cf", chain=chain)
    assert not any("factor" in n for n in exact.notes)
    np.testing.assert_allclose(res.estimate, exact.estimate, atol=0.05 * exact.se.min())
    np.testing.assert_allclose(res.se, exact.se, rtol=0.05)
    np.testing.assert_allclose(res.jackknife_bias, exact.jackknife_bias, atol=0.05 * exact.se.min())


def test_large_n_switches_to_inducing_points_says_so_and_stays_accurate(monkeypatch):
    from pymc_cv.core import kernel_cv

    monkeypatch.setattr(kernel_cv, "_FACTOR_MIN_N", 10**9)  # as in many dimensions, where no factor is small
    x, s = _draws(6000, seed=3)
    f = np.sin(x[:, 0]) + np.cos(x[:, 1])
    res = pymc_cv.cv_estimate(f, x, s, method="cf", exact_max_n=2000)
    assert res.method == "cf-nystrom"
    assert any("inducing draws" in n for n in res.notes)
    truth = np.exp(-0.5)
    assert abs(res.estimate - truth) < 0.1 * abs(res.mc_estimate - truth)
    assert abs(res.estimate - truth) < 3 * res.se


@pytest.mark.parametrize("signal", [True, False])
def test_inducing_ladder_grows_m_fourfold_and_keeps_the_m_after_which_the_error_stopped_falling(signal):
    """A smooth integrand in five dimensions: the held-out error keeps falling, so the ladder climbs
    to its cap (250, then 1,000).  Noise unrelated to the draws: no M explains it, so after one step
    up the ladder keeps the smaller fit."""
    from pymc_cv.core.nystrom import choose_inducing

    rng = np.random.default_rng(11)
    x = rng.normal(size=(4000, 5))
    y = np.sin(x[:, 0]) + np.cos(x[:, 1]) + 0.1 * x[:, 2] ** 2 if signal else rng.normal(size=4000)
    labels = fold_labels(4000, np.repeat([0, 1, 2, 3], 1000), 10)
    problem = HeldoutProblem(x, -x, y[:, None], np.zeros(4000, dtype=int), 1, labels)
    spec = KernelSpec(SquaredExponential(lengthscale=np.full(5, 2.0)), np.ones((1, 1)), 1e-6, [0])
    choice = choose_inducing(problem, spec, np.random.default_rng(0))
    (m1, e1), (m2, e2) = choice.path
    assert (m1, m2) == (250, 1000)
    if signal:
        assert e2 < 0.9 * e1 and choice.m == 1000
    else:
        assert e2 > 0.9 * e1 and choice.m == 250
    assert choice.fits[0].resid.shape == (4000, 1)


def test_inducing_ladder_stops_where_every_integrand_is_accurate_enough(monkeypatch):
    """A linear integrand with a small smooth part: the SECF's linear term explains all but ~1e-8 of
    its variance at M = 250, so M = 1,000 (which would explain more of the rest) is not fitted."""
    from pymc_cv.core import nystrom

    rng = np.random.default_rng(12)
    x = rng.normal(size=(4000, 5))
    y = x[:, 0] + 1e-4 * np.sin(2 * x[:, 1])
    labels = fold_labels(4000, np.repeat([0, 1, 2, 3], 1000), 10)
    problem = HeldoutProblem(x, -x, y[:, None], np.zeros(4000, dtype=int), 1, labels)
    spec = KernelSpec(SquaredExponential(lengthscale=np.full(5, 2.0)), np.ones((1, 1)), 1e-6, [1])
    choice = nystrom.choose_inducing(problem, spec, np.random.default_rng(0))
    assert choice.accurate and choice.m == 250 and len(choice.path) == 1
    assert choice.path[0][1] <= nystrom.ACCURATE_ENOUGH
    assert np.all(np.isfinite(choice.fits[0].resid))
    # without the stop the ladder climbs, and the larger M explains more: the stop is what ended it
    monkeypatch.setattr(nystrom, "ACCURATE_ENOUGH", 0.0)
    climbed = nystrom.choose_inducing(problem, spec, np.random.default_rng(0))
    assert not climbed.accurate and [m for m, _ in climbed.path] == [250, 1000]
    assert climbed.path[1][1] < 0.9 * climbed.path[0][1]


def test_above_exact_max_n_a_factor_is_given_up_at_the_inducing_limit(monkeypatch):
    from pymc_cv.core import estimate, kernel_cv

    computed = []
    gram = kernel_cv.stein_gram

    def counting(kernel, B, X, S, tau, X2=None, S2=None, tau2=None):
        if X2 is not None and X2.shape[0] < X.shape[0]:  # the factor's columns, not a full Gram matrix
            computed.append(X2.shape[0])
        return gram(kernel, B, X, S, tau, X2, S2, tau2)

    monkeypatch.setattr(kernel_cv, "stein_gram", counting)
    monkeypatch.setattr(estimate, "MAX_INDUCING", 128)
    x, s = _draws(2400, seed=6, d=8)  # eight dimensions: no factor of a few hundred columns exists
    f = np.sin(x[:, 0]) + np.cos(x[:, 1])
    res = pymc_cv.cv_estimate(f, x, s, method="cf", exact_max_n=1200, max_tune_points=150)
    assert res.method == "cf-nystrom"
    # columns computed while looking for the factor: the limit plus at most one block of 64 past it
    assert 0 < sum(computed) <= 128 + 64
    truth = np.exp(-0.5)
    assert abs(res.estimate - truth) < 3 * res.se


def test_results_keep_nothing_n_by_n():
    x, s = _draws(1200, seed=4)
    F = np.column_stack([np.sin(x[:, 0]), np.cos(x[:, 1]), x[:, 0] * x[:, 1]])
    res = pymc_cv.cv_estimate(F, x, s, method="cf")
    assert len(pickle.dumps(res)) < 1_000_000  # was 35 MB when every fit kept its N x N factor


@pytest.mark.parametrize("bad", [{"folds": 0}, {"folds": -3}, {"folds": 1}, {"folds": 2.5}, {"nugget": 0.0},
                                 {"nugget": float("nan")}, {"exact_max_n": 5}, {"tune": "mle"}, {"ard": "yes"},
                                 {"poly_order": 3}])
def test_bad_options_are_errors_that_name_the_option(bad):
    x, s = _draws(50)
    with pytest.raises(ValueError, match=list(bad)[0]):
        pymc_cv.cv_estimate(x[:, 0] ** 2, x, s, chain=np.repeat([0, 1], 25), **bad)
