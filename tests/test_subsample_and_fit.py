"""The half-split shift (fits on halves of the draws with the same hyperparameters) equals direct
refits; the fit objects kept on request evaluate the control variate at new draws."""

import numpy as np
import pytest

import pymc_cv
from pymc_cv.core.heldout import fold_labels, half_split_shift, split_halves, split_parts
from pymc_cv.core.kernel_cv import design_matrix, fit_exact_heldout, stein_gram
from pymc_cv.core.kernels import SquaredExponential
from pymc_cv.core.linalg import gls_solve
from pymc_cv.core.zero_variance import zero_variance_candidate


def _draws(n, d=2, seed=0):
    x = np.random.default_rng(seed).normal(size=(n, d))
    return x, -x


def test_halves_are_pairs_of_quarters_spanning_every_chain():
    labels = fold_labels(80, np.repeat([0, 1], 40), 4)
    quarters = split_parts(labels, 4)
    assert sum(q.sum() for q in quarters) == 80 and not np.any(quarters[0] & quarters[1])
    halves = split_halves(labels)
    assert len(halves) == 6 and all(h.sum() == 40 for h in halves)
    for h in halves:
        assert h[:40].any() and h[40:].any()  # every half holds draws of both chains
    assert len(split_halves(np.array([0, 0, 0, 1, 1, 1]))) == 2  # two folds: the two of them


def test_half_split_shift_of_the_sample_mean_vanishes():
    # the mean of the half means is the mean: a method without bias moves nowhere
    y = np.random.default_rng(0).normal(size=(40, 3))
    np.testing.assert_allclose(half_split_shift(lambda m: y[m].mean(axis=0), np.arange(40), y.mean(axis=0)),
                               0.0, atol=1e-14)


def test_half_split_shift_measures_a_one_over_n_bias():
    # an estimator with bias 1/m (m = number of draws it saw): 1/(n/2) - 1/n = 1/n
    y = np.zeros((64, 1))
    shift = half_split_shift(lambda m: y[m].mean(axis=0) + 1.0 / m.sum(), np.arange(64), np.array([1.0 / 64]))
    np.testing.assert_allclose(shift, [1 / 64])


def test_half_split_shift_is_nan_when_a_half_cannot_be_fitted():
    def fit_on(m):
        raise ValueError("too few draws")
    assert np.isnan(half_split_shift(fit_on, np.arange(20), np.zeros(1))).all()


@pytest.mark.parametrize("order", [0, 1])
def test_kernel_half_split_shift_equals_direct_refits(order):
    x, s = _draws(64)
    Y = np.column_stack([np.sin(x[:, 0]) + x[:, 1] ** 2, np.exp(x[:, 0] / 2)])
    kern = SquaredExponential(lengthscale=np.array([1.1, 0.8]))
    tau, B = np.zeros(64, dtype=int), np.ones((1, 1))
    labels = fold_labels(64, None, 10)
    fit = fit_exact_heldout(x, s, Y, tau, 1, kern, B, 1e-3, [order], labels)[0]
    nugget_abs = 1e-3 * np.mean(np.diag(stein_gram(kern, B, x, s, tau)))

    def refit(mask):  # the same GLS on the draws in mask, with the same absolute nugget
        C = stein_gram(kern, B, x[mask], s[mask], tau[mask]) + nugget_abs * np.eye(mask.sum())
        return gls_solve(C, design_matrix(x[mask], s[mask], tau[mask], 1, order), Y[mask])[0][0]

    half_mean = np.mean([refit(h) for h in split_halves(labels)], axis=0)
    np.testing.assert_allclose(fit.split_shift[0], half_mean - fit.beta[0], rtol=1e-6, atol=1e-10)


def test_zero_variance_half_split_shift_equals_least_squares_refits():
    x, s = _draws(80, d=3, seed=1)
    Y = np.column_stack([x[:, 0] ** 3, np.sin(x[:, 1])])
    cand = zero_variance_candidate(x, s, Y, 1, None, None, 10)
    D = np.column_stack([np.ones(80), s])
    half_mean = np.mean([np.linalg.lstsq(D[h], Y[h], rcond=None)[0][0] for h in split_halves(np.arange(80))], axis=0)
    np.testing.assert_allclose(cand.split_shift, half_mean - cand.estimate, atol=1e-12)


@pytest.mark.parametrize("method,n", [("zv2", 300), ("cf", 300), ("secf", 300), ("secf", 5000), ("auto", 300)])
def test_fit_object_approximates_f_and_its_stein_part_has_mean_zero(method, n):
    rng = np.random.default_rng(3)
    mean, sd = np.array([1.0, -2.0]), np.array([0.5, 3.0])
    x = mean + sd * rng.normal(size=(n, 2))
    score = -(x - mean) / sd**2

    def f(v):
        return np.column_stack([np.sin(v[:, 0]) + v[:, 1] ** 2 / 9, v[:, 0] * v[:, 1]])

    res = pymc_cv.cv_estimate(f(x), x, score, method=method, return_fit=True)
    new = mean + sd * rng.normal(size=(40_000, 2))
    fnew = f(new)
    for j, fit in enumerate(res.fits):
        assert fit.method == res.method[j] and fit.estimate == res.estimate[j]
        part = fit.zero_mean_part(new, -(new - mean) / sd**2)
        # Stein identity: mean zero under the target, within 4 Monte Carlo se
        assert abs(part.mean()) < 4 * part.std() / np.sqrt(part.size)
        if res.method[j] != "mc":  # a CV that helped approximates f on draws it never saw
            g = fit.predict(new, -(new - mean) / sd**2)
            assert np.sqrt(np.mean((fnew[:, j] - g) ** 2)) < 0.3 * fnew[:, j].std()


def test_fits_are_kept_only_on_request_and_checked():
    x, s = _draws(100)
    res = pymc_cv.cv_estimate(np.sin(x[:, 0]), x, s)
    assert res.fits is None
    fit = pymc_cv.cv_estimate(np.sin(x[:, 0]), x, s, return_fit=True).fits
    with pytest.raises(ValueError, match=r"\(n, 2\)"):
        fit.predict(np.zeros((3, 3)), np.zeros((3, 3)))
