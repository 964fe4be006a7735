"""vv-CVs: solver agreement, the benefit of a learned B, and input checks."""

import numpy as np
import pytest

import pymc_cv
from pymc_cv.core.heldout import fold_labels
from pymc_cv.core.kernel_cv import fit_kernel_cv
from pymc_cv.core.kernels import SquaredExponential
from pymc_cv.core.kronecker import fit_shared_draws
from pymc_cv.core.nystrom import fit_nystrom_heldout
from pymc_cv.core.problem import HeldoutProblem, KernelSpec


def _shared_problem(m=30, T=4, d=2, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(m, d))
    S = -X
    t = np.linspace(0, 1, T)
    Y = np.column_stack([np.sin(X[:, 0] + tk) + tk * X[:, 1] ** 2 for tk in t])
    return X, S, Y


@pytest.mark.parametrize("poly_order", [0, 1, 2])
def test_shared_draws_fast_path_agrees_with_general_solver(poly_order):
    X, S, Y = _shared_problem()
    m, T = Y.shape
    rng = np.random.default_rng(1)
    A = rng.normal(size=(T, T))
    B = A @ A.T + 0.1 * np.eye(T)
    kern = SquaredExponential(lengthscale=np.array([1.3, 0.8]))
    fast = fit_shared_draws(X, S, Y, kern, B, 1e-3, poly_order)
    tau = np.repeat(np.arange(T), m)
    general = fit_kernel_cv(np.tile(X, (T, 1)), np.tile(S, (T, 1)), Y.T.ravel(), tau, T, kern, B, 1e-3, poly_order)
    np.testing.assert_allclose(fast.intercepts, general.intercepts, rtol=0, atol=1e-8)
    np.testing.assert_allclose(fast.intercept_se, general.intercept_se, rtol=1e-6)
    Xn = np.random.default_rng(2).normal(size=(5, 2))
    g_fast = fast.zero_mean_part(Xn, -Xn)
    g_gen = np.column_stack([general.zero_mean_part(Xn, -Xn, np.full(5, t)) for t in range(T)])
    np.testing.assert_allclose(g_fast, g_gen, atol=1e-7)
    sd_fast = fast.predictive_sd(Xn, -Xn)
    sd_gen = np.column_stack([general.predictive_sd(Xn, -Xn, np.full(5, t)) for t in range(T)])
    np.testing.assert_allclose(sd_fast, sd_gen, rtol=1e-6)


def test_inducing_points_equal_exact_solution_when_all_draws_are_inducing():
    rng = np.random.default_rng(3)
    X = rng.normal(size=(50, 2))
    tau = np.repeat([0, 1], 25)
    y = np.sin(X[:, 0]) + 0.3 * tau
    B = np.array([[1.0, 0.5], [0.5, 1.0]])
    kern = SquaredExponential(lengthscale=np.array([1.0, 1.5]))
    exact = fit_kernel_cv(X, -X, y, tau, 2, kern, B, 1e-3, 1)
    problem = HeldoutProblem(X, -X, y[:, None], tau, 2, fold_labels(50, None, 5))
    ind = fit_nystrom_heldout(problem, KernelSpec(kern, B, 1e-3, [1]), np.arange(50))[0]
    np.testing.assert_allclose(ind.beta[:2, 0], exact.intercepts, atol=1e-7)


def test_inducing_solver_close_to_exact_with_fewer_points():
    rng = np.random.default_rng(4)
    xs = [rng.normal(size=(300, 2)) for _ in range(2)]
    fs = [np.sin(x[:, 0]) + np.cos(x[:, 1]) for x in xs]
    ex = pymc_cv.vvcv_estimate(fs, xs, [-x for x in xs], solver="exact")
    ind = pymc_cv.vvcv_estimate(fs, xs, [-x for x in xs], solver="inducing", n_inducing=200)
    truth = np.exp(-0.5)
    assert np.all(np.abs(ex.estimate - truth) < 1e-4)
    assert np.all(np.abs(ind.estimate - truth) < 0.1 * np.abs(ind.mc_estimate - truth) + 1e-4)


def test_vvcv_cuts_mc_error_tenfold_in_2d():
    truth = np.exp(-0.5)
    err, mc = [], []
    for seed in range(8):
        rng = np.random.default_rng(seed)
        xs = [rng.normal(size=(100, 2)) for _ in range(2)]
        fs = [np.sin(x[:, 0]) + np.cos(x[:, 1]) for x in xs]
        res = pymc_cv.vvcv_estimate(fs, xs, [-x for x in xs])
        err.append(np.abs(res.estimate - truth)), mc.append(np.abs(res.mc_estimate - truth))
    assert np.mean(err) * 10 <= np.mean(mc)


def test_learned_B_beats_independent_cfs_on_related_tasks_with_20_draws():
    """Two related tasks (paper App. E.2): pi_1 = N(0, 1), pi_2 = N(0, 1.25), 20 draws each."""
    f1 = lambda x: 1.5 + x + 1.5 * x**2 + 1.75 * np.sin(np.pi * x) * np.exp(-(x**2))
    f2 = lambda x: 1 + x + x**2 + np.sin(np.pi * x) * np.exp(-(x**2))
    # truths by quadrature
    nodes, w = np.polynomial.hermite_e.hermegauss(120)
    w = w / w.sum()
    truth = np.array([w @ f1(nodes), w @ f2(np.sqrt(1.25) * nodes)])
    err_vv, err_cf = [], []
    for seed in range(20):
        rng = np.random.default_rng(seed)
        x1 = rng.normal(size=(20, 1))
        x2 = np.sqrt(1.25) * rng.normal(size=(20, 1))
        vals = [f1(x1[:, 0]), f2(x2[:, 0])]
        scores = [-x1, -x2 / 1.25]
        vv = pymc_cv.vvcv_estimate(vals, [x1, x2], scores, B="learn", fallback=False, poly_order=0)
        cf = [pymc_cv.cv_estimate(v, x, s, method="cf") for v, x, s in zip(vals, [x1, x2], scores)]
        err_vv.append(np.sum((vv.estimate - truth) ** 2))
        err_cf.append(np.sum((np.array([c.estimate for c in cf]) - truth) ** 2))
    assert np.mean(err_vv) < np.mean(err_cf)


def _normal_normal_exp_tasks(seed, n=500):
    """exp(s mu) at 10 values of s under the Normal-Normal posterior N(m, v): E = exp(s m + s^2 v / 2)."""
    rng = np.random.default_rng(seed)
    y = rng.normal(0.5, 1.0, 8)
    v = 1.0 / (0.25 + 8)
    m = y.sum() * v
    x = rng.normal(m, np.sqrt(v), size=(n, 1))
    s = np.linspace(0.1, 1.0, 10)
    return [np.exp(si * x[:, 0]) for si in s], x, -(x - m) / v, np.exp(s * m + s**2 * v / 2)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_vvcv_on_shared_draws_is_within_2x_of_a_cf_per_task(seed):
    """Integrands close to the span of the Stein polynomials: the learned B is nearly singular.
    A fit that factorised B with its round-off negative eigenvalues clipped but predicted with the
    unclipped B had held-out residuals 800x the integrands' sd and fell back to MC on every task."""
    fs, x, score, truth = _normal_normal_exp_tasks(seed)
    vv = pymc_cv.vvcv_estimate(fs, [x] * 10, [score] * 10)
    cf = np.array([pymc_cv.cv_estimate(f, x, score, method="cf").estimate for f in fs])
    assert np.all(vv.method == "vvcv-shared")
    err_vv, err_cf = np.abs(vv.estimate - truth).sum(), np.abs(cf - truth).sum()
    assert err_vv <= 2 * err_cf
    assert err_vv < 1e-3 * np.abs(vv.mc_estimate - truth).sum()


def test_shared_fit_predicts_with_the_task_matrix_it_factorised():
    X, S, Y = _shared_problem()
    T = Y.shape[1]
    lam = np.array([-1e-9, 1e-12, 0.5, 1.0])
    U = np.linalg.qr(np.random.default_rng(5).normal(size=(T, T)))[0]
    B = (U * lam) @ U.T
    fit = fit_shared_draws(X, S, Y, SquaredExponential(lengthscale=np.array([1.0, 1.0])), B, 1e-12, 0)
    clipped = fit_shared_draws(X, S, Y, SquaredExponential(lengthscale=np.array([1.0, 1.0])),
                               (U * np.maximum(lam, 0)) @ U.T, 1e-12, 0)
    Xn = np.random.default_rng(6).normal(size=(5, 2))
    np.testing.assert_allclose(fit.zero_mean_part(Xn, -Xn), clipped.zero_mean_part(Xn, -Xn), rtol=1e-2)


@pytest.mark.parametrize(
    "B, match",
    [
        (np.array([[1.0, 2.0], [0.0, 1.0]]), "symmetric"),
        (np.array([[1.0, 2.0], [2.0, 1.0]]), "positive semi-definite"),
        (np.eye(3), "\\(2, 2\\)"),
        ("nope", "B='nope'"),
    ],
)
def test_bad_task_matrix(B, match):
    x = np.random.default_rng(0).normal(size=(10, 1))
    with pytest.raises(ValueError, match=match):
        pymc_cv.vvcv_estimate([x[:, 0], x[:, 0]], [x, x], [-x, -x], B=B)


def test_bad_task_lists():
    x = np.random.default_rng(0).normal(size=(10, 1))
    with pytest.raises(ValueError, match="one array per task"):
        pymc_cv.vvcv_estimate([x[:, 0], x[:, 0]], [x], [-x, -x])
    with pytest.raises(ValueError, match="task 1"):
        pymc_cv.vvcv_estimate([x[:, 0], x[:5, 0]], [x, x], [-x, -x])
    with pytest.raises(ValueError, match="sequence of T"):
        pymc_cv.vvcv_estimate(x[:, 0], x, -x)


def test_auto_polynomial_order_fits_the_draws_hyperparameters_are_tuned_on():
    """4 tasks x 200 draws in d = 10 (four rungs of eight schools' TI): order 2 has 4 x 66 coefficients,
    within a third of the 800 draws but not of the 240 the hyperparameters are tuned on."""
    rng = np.random.default_rng(0)
    xs = [rng.normal(size=(200, 10)) for _ in range(4)]
    fs = [x[:, 0] + 0.1 * k * x[:, 1] ** 2 for k, x in enumerate(xs)]
    res = pymc_cv.vvcv_estimate(fs, xs, [-x for x in xs])
    assert res.hyperparameters[0]["poly_order"] < 2
    truth = 0.1 * np.arange(4)
    assert np.all(np.abs(res.estimate - truth) <= np.abs(res.mc_estimate - truth) + 1e-3)


def test_a_polynomial_design_that_cannot_be_fitted_falls_back_to_none_with_a_note():
    # one parameter written twice: its Stein polynomials in the two copies are the same columns, so
    # the semi-exact design is rank deficient (population chains of a nearly Gaussian posterior hit
    # this to rounding); the vv-CV without polynomials is fitted instead of the call failing
    rng = np.random.default_rng(0)
    vals, Xs, Ss = [], [], []
    for m in (0.0, 0.5):
        x = rng.normal(m, 1.0, size=(150, 1))
        Xs.append(np.hstack([x, x]))
        Ss.append(np.hstack([-(x - m) / 2, -(x - m) / 2]))
        vals.append(x[:, 0] ** 2)
    res = pymc_cv.vvcv_estimate(vals, Xs, Ss, random_seed=0)
    assert any("not fitted" in n and "rank deficient" in n for n in res.notes)
    assert np.all(np.abs(res.estimate - np.array([1.0, 1.25])) <= 3 * res.se)
    with pytest.raises(ValueError, match="rank deficient"):
        pymc_cv.vvcv_estimate(vals, Xs, Ss, random_seed=0, poly_order=2)
