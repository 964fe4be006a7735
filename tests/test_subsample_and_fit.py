"""The jackknife estimate of a fit's bias (fits without parts of the draws, same hyperparameters)
equals direct refits; the fit objects kept on request evaluate the control variate at new draws."""

import numpy as np
import pytest

import pymc_cv
from pymc_cv.core.heldout import fold_labels, jackknife_bias, split_parts
from pymc_cv.core.kernel_cv import design_matrix, fit_exact_heldout, stein_gram
from pymc_cv.core.kernels import SquaredExponential
from pymc_cv.core.linalg import gls_solve
from pymc_cv.core.problem import HeldoutProblem, KernelSpec
from pymc_cv.core.zero_variance import zero_variance_candidate


def _draws(n, d=2, seed=0):
    x = np.random.default_rng(seed).normal(size=(n, d))
    return x, -x


def test_parts_are_alternate_folds_spanning_every_chain():
    labels = fold_labels(80, np.repeat([0, 1], 40), 4)
    quarters = split_parts(labels, 4)
    assert sum(q.sum() for q in quarters) == 80 and not np.any(quarters[0] & quarters[1])
    for q in quarters:
        assert q[:40].any() and q[40:].any()  # every group holds draws of both chains


def test_jackknife_bias_of_the_sample_mean_vanishes():
    # the mean of the means without each equal-size group is the mean: no bias, none estimated
    y = np.random.default_rng(0).normal(size=(40, 3))
    for parts in (2, 4):
        np.testing.assert_allclose(jackknife_bias(lambda m: y[~m].mean(axis=0), np.arange(40), y.mean(axis=0),
                                                  parts), 0.0, atol=1e-14)


@pytest.mark.parametrize("parts", [2, 4])
def test_jackknife_bias_is_exact_for_a_one_over_n_bias(parts):
    # an estimator with bias 1/m (m = number of draws it saw) has bias 1/64 on 64 draws
    y = np.zeros((64, 1))
    bias = jackknife_bias(lambda m: y[~m].mean(axis=0) + 1.0 / (~m).sum(), np.arange(64), np.array([1.0 / 64]),
                          parts)
    np.testing.assert_allclose(bias, [1 / 64])


def test_jackknife_bias_is_nan_when_a_fit_cannot_be_made():
    def fit_without(m):
        raise ValueError("too few draws")
    assert np.isnan(jackknife_bias(fit_without, np.arange(20), np.zeros(1))).all()


@pytest.mark.parametrize("order", [0, 1])
def test_kernel_jackknife_bias_equals_direct_refits(order):
    x, s = _draws(64)
    Y = np.column_stack([np.sin(x[:, 0]) + x[:, 1] ** 2, np.exp(x[:, 0] / 2)])
    kern = SquaredExponential(lengthscale=np.array([1.1, 0.8]))
    tau, B = np.zeros(64, dtype=int), np.ones((1, 1))
    labels = fold_labels(64, None, 10)
    fit = fit_exact_heldout(HeldoutProblem(x, s, Y, tau, 1, labels), KernelSpec(kern, B, 1e-3, [order]))[0]
    nugget_abs = 1e-3 * np.mean(np.diag(stein_gram(kern, B, x, s, tau)))

    def refit(keep):  # the same GLS on the draws kept, with the same absolute nugget
        C = stein_gram(kern, B, x[keep], s[keep], tau[keep]) + nugget_abs * np.eye(keep.sum())
        return gls_solve(C, design_matrix(x[keep], s[keep], tau[keep], 1, order), Y[keep])[0][0]

    without = np.mean([refit(~q) for q in split_parts(labels, 4)], axis=0)
    np.testing.assert_allclose(fit.jackknife_bias[0], 3 * (without - fit.beta[0]), rtol=1e-6, atol=1e-10)


def test_zero_variance_jackknife_bias_equals_least_squares_refits():
    x, s = _draws(80, d=3, seed=1)
    Y = np.column_stack([x[:, 0] ** 3, np.sin(x[:, 1])])
    cand = zero_variance_candidate(x, s, Y, 1, None, None, 10)
    D = np.column_stack([np.ones(80), s])
    without = np.mean([np.linalg.lstsq(D[~q], Y[~q], rcond=None)[0][0] for q in split_parts(np.arange(80), 4)],
                      axis=0)
    np.testing.assert_allclose(cand.jackknife_bias, 3 * (without - cand.estimate), atol=1e-12)


@pytest.mark.parametrize("method,n,factor", [("zv2", 300, True), ("cf", 300, True), ("secf", 300, True),
                                             ("secf", 5000, True), ("secf", 5000, False), ("auto", 300, True)])
def test_fit_object_approximates_f_and_its_stein_part_has_mean_zero(method, n, factor, monkeypatch):
    """``factor=False``: no low-rank factor (as in many dimensions), so 5,000 draws go on inducing points."""
    from pymc_cv.core import kernel_cv

    if not factor:
        monkeypatch.setattr(kernel_cv, "_FACTOR_MIN_N", 10**9)
    rng = np.random.default_rng(3)
    mean, sd = np.array([1.0, -2.0]), np.array([0.5, 3.0])
    x = mean + sd * rng.normal(size=(n, 2))
    score = -(x - mean) / sd**2

    def f(v):
        return np.column_stack([np.sin(v[:, 0]) + v[:, 1] ** 2 / 9, v[:, 0] * v[:, 1]])

    res = pymc_cv.cv_estimate(f(x), x, score, method=method, return_fit=True)
    new = mean + sd * rng.normal(size=(40_000, 2))
    fnew = f(new)
    if not factor:
        assert all(m.endswith("-nystrom") for m in res.method)
    for j, fit in enumerate(res.fits):
        assert fit.method == res.method[j] and fit.estimate == res.estimate[j]
        part = fit.zero_mean_part(new, -(new - mean) / sd**2)
        # Stein identity: mean zero under the target, within 4 Monte Carlo se
        assert abs(part.mean()) < 4 * part.std() / np.sqrt(part.size)
        if res.method[j] != "mc":  # a CV that helped approximates f on draws it never saw
            g = fit.predict(new, -(new - mean) / sd**2)
            # 5,000 draws of a smooth f in two dimensions: within a fiftieth of its sd (0.002 here)
            assert np.sqrt(np.mean((fnew[:, j] - g) ** 2)) < (0.02 if n == 5000 else 0.3) * fnew[:, j].std()


def test_fits_are_kept_only_on_request_and_checked():
    x, s = _draws(100)
    res = pymc_cv.cv_estimate(np.sin(x[:, 0]), x, s)
    assert res.fits is None
    fit = pymc_cv.cv_estimate(np.sin(x[:, 0]), x, s, return_fit=True).fits
    with pytest.raises(ValueError, match=r"\(n, 2\)"):
        fit.predict(np.zeros((3, 3)), np.zeros((3, 3)))
