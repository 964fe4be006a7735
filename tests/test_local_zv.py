"""ZV-CVs on each row's own and shared coordinates (``core.local_zv``): exact identities, exact refits,
and the rows of a hierarchical model against its exact posterior means."""

import numpy as np
import pytest
from scipy import special, stats

import pymc_cv
from pymc_cv.core.heldout import fold_labels
from pymc_cv.core.local_zv import (LocalCoordinates, directional_stein_features, local_orders,
                                   local_zero_variance_candidates, own_coordinates, shared_coordinates)


def test_directional_stein_features_have_mean_zero_under_the_target():
    # x ~ N(m, diag(v)): each feature d_i P + P s_i has mean 0, to its Monte Carlo error
    rng = np.random.default_rng(0)
    m, v = np.array([0.5, -1.0, 2.0]), np.array([0.5, 2.0, 1.5])
    X = m + np.sqrt(v) * rng.normal(size=(400_000, 3))
    F = directional_stein_features(X, -(X - m) / v, 3)
    assert F.shape[1] == 3 * 10
    z = F.mean(axis=0) / (F.std(axis=0) / np.sqrt(X.shape[0]))
    assert np.max(np.abs(z)) < 5
    # and a wrong score (shifted mean) shows in the constant fields' features
    Fw = directional_stein_features(X, -(X - m - 0.05) / v, 2)
    assert np.max(np.abs(Fw.mean(axis=0) / (Fw.std(axis=0) / np.sqrt(X.shape[0])))) > 20


def test_lower_orders_lead_the_higher_orders_features():
    rng = np.random.default_rng(1)
    X, S = rng.normal(size=(50, 3)), rng.normal(size=(50, 3))
    F2, F3 = directional_stein_features(X, S, 2), directional_stein_features(X, S, 3)
    np.testing.assert_array_equal(F3[:, :F2.shape[1]], F2)


def test_local_fits_are_least_squares_refits_without_each_fold():
    rng = np.random.default_rng(2)
    n, d = 1200, 12
    X = rng.normal(size=(n, d))
    S = -X
    Y = np.column_stack([np.sin(X[:, j]) + X[:, j] ** 2 + 0.3 * X[:, 0] * X[:, j] for j in range(4, 8)])
    Y = np.column_stack([Y, Y**2])  # a row and its square share a design
    chain = np.repeat(np.arange(4), n // 4)
    own = own_coordinates(Y, X)
    np.testing.assert_array_equal(own, [4, 5, 6, 7] * 2)
    (cand,) = local_zero_variance_candidates(X, S, Y, LocalCoordinates(own, np.array([0, 1])), np.arange(8),
                                             chain, folds=5)
    fold = np.unique(fold_labels(n, chain, 5), return_inverse=True)[1].ravel()
    for j in range(8):
        sub = [own[j], 0, 1]
        fits = []
        for order in local_orders(n, 3):
            D = np.column_stack([np.ones(n), directional_stein_features(X[:, sub], S[:, sub], order)])
            resid, intercepts = np.empty(n), []
            for f in range(fold.max() + 1):
                out = fold == f
                b = np.linalg.lstsq(D[~out], Y[~out, j], rcond=None)[0]
                resid[out] = Y[out, j] - D[out] @ b
                intercepts.append(b[0])
            full = np.linalg.lstsq(D, Y[:, j], rcond=None)[0][0]
            b0 = np.array(intercepts)
            fits.append((np.mean(resid**2), full, resid, np.sqrt((b0.size - 1) / b0.size * np.sum((b0 - b0.mean()) ** 2))))
        _, full, resid, jack = min(fits, key=lambda t: t[0])
        i = int(np.flatnonzero(cand.columns == j)[0])
        assert cand.estimate[i] == pytest.approx(full, abs=1e-8)
        np.testing.assert_allclose(cand.resid[:, i], resid, atol=1e-7)
        assert cand.jackknife[i] == pytest.approx(jack, rel=1e-6)


def test_a_local_quadratic_field_makes_a_coordinates_square_exact():
    # independent Gaussian coordinates: the field x_j e_j gives L = 1 + x_j s_j, so x_j^2 is exact
    rng = np.random.default_rng(3)
    n, d = 800, 300
    mean, sd = rng.normal(size=d), rng.uniform(0.5, 2.0, d)
    X = mean + sd * rng.normal(size=(n, d))
    S = -(X - mean) / sd**2
    cols = np.arange(10, 20)
    Y = X[:, cols] ** 2
    (cand,) = local_zero_variance_candidates(X, S, Y, LocalCoordinates(cols, np.array([0, 1])), np.arange(10),
                                             np.repeat(np.arange(4), n // 4), folds=10)
    np.testing.assert_allclose(cand.estimate, mean[cols] ** 2 + sd[cols] ** 2, rtol=1e-8)


def test_shared_coordinates_are_the_smallest_variables():
    variable = ["mu", "tau"] + ["theta"] * 100 + ["sigma"]
    np.testing.assert_array_equal(shared_coordinates(variable), [0, 1, 102])
    # none of the variables is small next to the others: nothing shared
    assert shared_coordinates(["a"] * 5 + ["b"] * 5).size == 0


def test_local_coordinates_are_checked():
    x = np.random.default_rng(4).normal(size=(100, 3))
    with pytest.raises(ValueError, match="local.own"):
        pymc_cv.cv_estimate(x[:, 0], x, -x, local=LocalCoordinates(np.array([5]), np.array([0])))
    with pytest.raises(TypeError, match="LocalCoordinates"):
        pymc_cv.cv_estimate(x[:, 0], x, -x, local=([0], [1]))


def _hierarchical_posterior_means(y, s):
    """Exact E[theta_j] and E[mu] of y_j ~ N(theta_j, s_j), theta ~ N(mu, tau), mu ~ N(0, 5), tau ~ HalfNormal(5):
    given tau the rest is Gaussian; quadrature over log tau."""
    u = np.linspace(np.log(0.02), np.log(30.0), 6001)
    tau = np.exp(u)[:, None]
    v = s**2 + tau**2
    a, b = np.sum(1 / v, axis=1), np.sum(y / v, axis=1)
    logw = (-0.5 * (np.sum(np.log(v), axis=1) + np.log1p(25 * a) + np.sum(y**2 / v, axis=1) - 25 * b**2 / (1 + 25 * a))
            + stats.halfnorm(scale=5).logpdf(tau[:, 0]) + u)
    w = np.exp(logw - special.logsumexp(logw))
    m_mu = b / (1 / 25 + a)
    c = (1 / tau**2) / (1 / tau**2 + 1 / s**2)
    return w @ (c * m_mu[:, None] + (1 - c) * y), float(w @ m_mu)


def test_summary_fits_the_rows_of_a_hierarchical_model_on_their_own_coordinates():
    pm = pytest.importorskip("pymc")
    rng = np.random.default_rng(5)
    J = 60  # d = 62, above kernel_max_dim
    s = rng.uniform(0.2, 0.6, J)  # informative data: the centred parameterisation samples cleanly
    y = 1.0 + 2.0 * rng.normal(size=J) + s * rng.normal(size=J)
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 5)
        tau = pm.HalfNormal("tau", 5)
        theta = pm.Normal("theta", mu, tau, shape=J)
        pm.Normal("y", theta, s, observed=y)
        idata = pm.sample(500, tune=500, chains=4, random_seed=1, progressbar=False, nuts_sampler="pymc",
                          compute_convergence_checks=False)
    table = pymc_cv.summary(idata, model=model, progressbar=False)
    exact_theta, exact_mu = _hierarchical_posterior_means(y, s)
    rows = [f"theta[{j}]" for j in range(J)]
    t = table.loc[rows]
    assert (t["method"] == "zv-local").sum() >= 10  # 23 of 60 here; zv2diag and zv1 win the others
    cv_err = np.abs(t["cv_mean"].to_numpy() - exact_theta)
    mc_err = np.abs(t["mean"].to_numpy() - exact_theta)
    se = t["cv_mcse"].to_numpy() + t["bias_allowance"].to_numpy()
    assert np.mean(cv_err <= 2 * se) >= 0.9  # 0.95 here
    assert np.all(cv_err[t["se_reliable"].to_numpy()] <= 4 * se[t["se_reliable"].to_numpy()])
    assert np.median(cv_err / mc_err) < 0.05  # 0.014 here
    assert abs(table.loc["mu", "cv_mean"] - exact_mu) <= 4 * table.loc["mu", "cv_mcse"]
