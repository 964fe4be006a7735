"""cv_estimate against analytic truths under Gaussian targets."""

import numpy as np
import pytest
from chains import ar1_chain

import pymc_cv


def gaussian_draws(n, d, seed, mean=None, sd=None):
    rng = np.random.default_rng(seed)
    mean = np.zeros(d) if mean is None else np.asarray(mean, float)
    sd = np.ones(d) if sd is None else np.asarray(sd, float)
    x = mean + sd * rng.normal(size=(n, d))
    return x, -(x - mean) / sd**2


@pytest.mark.parametrize("seed", range(3))
def test_zv2_exact_for_quadratic_integrands_under_any_gaussian(seed):
    rng = np.random.default_rng(100 + seed)
    d = 3
    mean = rng.normal(size=d) * 5
    A = rng.normal(size=(d, d))
    cov = A @ A.T + 0.5 * np.eye(d)
    x = rng.multivariate_normal(mean, cov, size=60)
    score = -np.linalg.solve(cov, (x - mean).T).T
    H = rng.normal(size=(d, d))
    b = rng.normal(size=d)
    f = np.einsum("ni,ij,nj->n", x, H, x) + x @ b + 3.0
    truth = np.trace(H @ cov) + mean @ H @ mean + b @ mean + 3.0
    res = pymc_cv.cv_estimate(f, x, score, method="zv2")
    assert abs(res.estimate - truth) < 1e-8
    assert res.se < 1e-8
    assert res.method == "zv2"


def test_zv_chooses_the_order_that_makes_each_integrand_exact():
    """Under N(0, 1)^2, ZV order k integrates polynomials of degree k exactly: a cubic needs 3."""
    x, s = gaussian_draws(200, 2, 1)
    F = np.column_stack([x[:, 0] ** 3 + x[:, 1] ** 2 * x[:, 0] + 2.0, x[:, 0] ** 2 + x[:, 1]])
    res = pymc_cv.cv_estimate(F, x, s, method="zv")
    np.testing.assert_allclose(res.estimate, [2.0, 1.0], atol=1e-8)
    assert res.method[0] == "zv3" and res.method[1] in ("zv2", "zv3")
    # too few draws for order 3 (10 coefficients): it is not tried
    few = pymc_cv.cv_estimate(F[:20, 1], x[:20], s[:20], method="zv")
    assert few.method in ("zv1", "zv2", "mc") and abs(few.estimate - 1.0) < 1e-8


def test_auto_fits_squares_without_cross_terms_when_draws_are_too_few_for_full_order_2():
    """d = 30, n = 200: full order 2 has 495 coefficients (needs 992 draws) but the 60 of x_j and
    x_j^2 fit, and they make sums of squares exact under an axis-aligned Gaussian."""
    mean, sd = np.linspace(-2, 2, 30), np.linspace(0.5, 3, 30)
    x, s = gaussian_draws(200, 30, 4, mean, sd)
    F = np.column_stack([x[:, 0] ** 2 + 3 * x[:, 5] ** 2 - x[:, 7], np.sin(x[:, 1])])
    truth = mean[0] ** 2 + sd[0] ** 2 + 3 * (mean[5] ** 2 + sd[5] ** 2) - mean[7]
    res = pymc_cv.cv_estimate(F, x, s)
    assert res.method[0] == "zv2diag"
    assert abs(res.estimate[0] - truth) < 1e-8 and res.se[0] < 1e-8
    assert abs(pymc_cv.cv_estimate(F[:, 0], x, s, method="zv2diag").estimate - truth) < 1e-8
    # with draws for full order 2 (d = 3, n = 200) the diagonal basis is not a separate candidate
    assert pymc_cv.cv_estimate(F[:, 0], x[:, :3], s[:, :3], method="zv").method != "zv2diag"
    with pytest.raises(ValueError, match="order 2"):
        pymc_cv.core.polynomial.stein_polynomial_features(x, s, 3, cross=False)


def test_several_integrands_at_once():
    x, s = gaussian_draws(300, 2, 0)
    F = np.column_stack([x[:, 0] ** 2, x[:, 1], x[:, 0] * x[:, 1] + 2.0])
    res = pymc_cv.cv_estimate(F, x, s, method="zv2")
    np.testing.assert_allclose(res.estimate, [1.0, 0.0, 2.0], atol=1e-10)
    assert res.estimate.shape == (3,) and res.method.shape == (3,)


@pytest.mark.parametrize("method", ["cf", "secf"])
def test_kernel_cvs_cut_mc_error_tenfold(method):
    truth = np.exp(-0.5)  # E[sin x1 + cos x2] under N(0, I)
    cv_err, mc_err = [], []
    for seed in range(12):
        x, s = gaussian_draws(100, 2, seed)
        f = np.sin(x[:, 0]) + np.cos(x[:, 1])
        res = pymc_cv.cv_estimate(f, x, s, method=method)
        cv_err.append(abs(res.estimate - truth))
        mc_err.append(abs(res.mc_estimate - truth))
    assert np.mean(cv_err) * 10 <= np.mean(mc_err)


def test_auto_falls_back_to_mc_when_no_cv_helps():
    # scores of the wrong target carry no information about f: no CV can beat MC
    rng = np.random.default_rng(0)
    x = rng.normal(size=(80, 2))
    f = rng.normal(size=80)  # pure noise, independent of x
    res = pymc_cv.cv_estimate(f, x, -x, method="auto")
    assert res.method == "mc"
    assert res.estimate == res.mc_estimate
    assert any("no control variate beat" in n for n in res.notes)


def test_explicit_method_that_does_not_help_says_so():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(80, 2))
    f = rng.normal(size=80)
    res = pymc_cv.cv_estimate(f, x, -x, method="zv1")
    if res.variance_reduction <= 1:
        assert any("did not beat plain MC" in n for n in res.notes)
    assert not (res.variance_reduction > 1 and any("did not beat" in n for n in res.notes))


def test_standardisation_handles_wildly_different_scales():
    # coordinates of scale 0.1 and 9e4 (as in Borehole); score magnitudes differ by 1e10
    x, s = gaussian_draws(100, 2, 5, mean=[0.1, 89335.0], sd=[0.016, 20.0])
    f = np.sin((x[:, 0] - 0.1) / 0.016) + ((x[:, 1] - 89335.0) / 20.0) ** 2
    truth = 1.0
    res = pymc_cv.cv_estimate(f, x, s, method="secf")
    assert abs(res.estimate - truth) < 0.1 * abs(res.mc_estimate - truth) + 1e-6


def test_mcmc_chain_labels_use_block_folds_and_arviz_ess():
    # AR(1) chains targeting N(0, 1): the MC se must account for autocorrelation
    rng = np.random.default_rng(2)
    n, rho = 400, 0.9
    x = np.stack([ar1_chain(rng, n, rho) for _ in range(2)])
    xs = x.reshape(-1, 1)
    chain = np.repeat([0, 1], n)
    f = xs[:, 0] ** 2
    res = pymc_cv.cv_estimate(f, xs, -xs, method="zv2", chain=chain)
    iid = pymc_cv.cv_estimate(f, xs, -xs, method="mc")
    assert res.mc_se > 2 * iid.mc_se  # ESS far below n for rho = 0.9
    assert abs(res.estimate - 1.0) < 1e-8


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(values=np.ones(10), samples=np.ones((9, 2)), scores=np.ones((10, 2))), "same number of draws"),
        (dict(values=np.ones(10), samples=np.ones((10, 2)), scores=np.ones((10, 3))), "shape of `samples`"),
        (dict(values=np.r_[np.nan, np.ones(9)], samples=np.ones((10, 2)), scores=np.ones((10, 2))), "`values` has NaN"),
        (dict(values=np.ones(10), samples=np.ones((10, 2)), scores=np.r_[[[np.inf, 0]], np.ones((9, 2))]), "divergent"),
        (dict(values=np.ones(3), samples=np.ones((3, 2)), scores=np.ones((3, 2))), "at least 5 draws"),
        (dict(values=np.ones((10, 2, 2)), samples=np.ones((10, 2)), scores=np.ones((10, 2))), "shape \\(n,\\) or \\(n, k\\)"),
    ],
)
def test_bad_input_gets_a_clear_error(kwargs, match):
    with pytest.raises(ValueError, match=match):
        pymc_cv.cv_estimate(**kwargs)


def test_bad_method_and_options_are_named():
    x, s = gaussian_draws(20, 2, 0)
    with pytest.raises(ValueError, match="method='nope'"):
        pymc_cv.cv_estimate(x[:, 0], x, s, method="nope")
    x3, s3 = gaussian_draws(8, 3, 0)  # zv2 in d = 3 has 9 features + intercept
    with pytest.raises(ValueError, match="zv2 needs more than"):
        pymc_cv.cv_estimate(x3[:, 0], x3, s3, method="zv2", zv_penalty=None)
    with pytest.raises(ValueError, match="chain"):
        pymc_cv.cv_estimate(x[:, 0], x, s, chain=np.zeros(5))
    for bad in ("all", 3):
        with pytest.raises(ValueError, match=f"max_tune_points={bad!r}"):
            pymc_cv.cv_estimate(x[:, 0], x, s, method="cf", max_tune_points=bad)
        with pytest.raises(ValueError, match=f"max_tune_points={bad!r}"):
            pymc_cv.vvcv_estimate([x[:, 0]] * 2, [x] * 2, [s] * 2, max_tune_points=bad)


def test_auto_tuning_set_is_a_share_of_the_draws_within_bounds():
    from pymc_cv.core.tuning import tune_points

    assert [tune_points("auto", n) for n in (40, 150, 300, 1000, 5000)] == [40, 150, 150, 300, 400]
    assert tune_points(250, 5000) == 250


def test_lasso_zv_in_high_dimension():
    d, n = 30, 40  # zv2 has 495 features: far more than draws
    x, s = gaussian_draws(n, d, 3)
    f = x[:, 0] ** 2 + 0.5 * x[:, 1]
    res = pymc_cv.cv_estimate(f, x, s, method="zv2")
    assert res.hyperparameters[0]["penalty"] == "lasso"
    assert abs(res.estimate - 1.0) < 0.5 * abs(res.mc_estimate - 1.0)


@pytest.mark.slow
@pytest.mark.parametrize("method", ["cf", "secf"])
def test_coverage_of_the_reported_se_on_a_bounded_smooth_integrand(method):
    """200 replications, d = 2, n = 100: the 95% interval covers 90-99.9% and se <= 3x rmse."""
    truth = np.exp(-0.5)
    err, se, flagged = [], [], []
    for rep in range(200):
        x, s = gaussian_draws(100, 2, 1000 + rep)
        res = pymc_cv.cv_estimate(np.sin(x[:, 0]) + np.cos(x[:, 1]), x, s, method=method)
        err.append(res.estimate - truth), se.append(res.se), flagged.append(not res.se_reliable)
    err, se = np.array(err), np.array(se)
    coverage = np.mean(np.abs(err) <= 1.96 * se)
    rmse = np.sqrt(np.mean(err**2))
    # the cross-fit gap in the se (what makes exp integrands cover, bench/se_coverage) makes it
    # conservative here: measured rms se 3.7x the rmse (2x before the gap)
    assert 0.90 <= coverage <= 0.999 or (coverage == 1.0 and np.sqrt(np.mean(se**2)) < 4.5 * rmse)
    assert np.sqrt(np.mean(se**2)) <= 4.5 * rmse
    assert np.mean(flagged) < 0.2


@pytest.mark.slow
def test_heavy_tailed_residuals_are_covered_or_flagged():
    """exp(x/2) under N(0, 1): the kernel fit reverts to a constant in the tails, where the draws
    are few; the se (with its jackknife bias) must cover, or the result be flagged."""
    ok = []
    for rep in range(30):
        x, s = gaussian_draws(100, 2, 2000 + rep)
        res = pymc_cv.cv_estimate(np.exp(0.5 * x[:, 0]), x, s, method="cf")
        ok.append(abs(res.estimate - np.exp(0.125)) <= 2 * res.se or not res.se_reliable)
    assert np.mean(ok) >= 0.9


@pytest.mark.slow
def test_nearly_interpolating_fits_cover_and_are_not_flagged():
    """Issue 13's target in the cell bench/se_coverage.py flagged wholesale before (exp(x0 / 2),
    d = 2, n = 200, independent draws): 2-se coverage >= 90% among reliable results, at least half
    of them reliable, and CV beating MC.  Residual k-hat of these fits is above 1."""
    covered, reliable, ratio = [], [], []
    for rep in range(30):
        x, s = gaussian_draws(200, 2, 3000 + rep)
        res = pymc_cv.cv_estimate(np.exp(0.5 * x[:, 0]), x, s)
        err = abs(res.estimate - np.exp(0.125))
        covered.append(err <= 2 * res.se), reliable.append(res.se_reliable)
        ratio.append(err / abs(res.mc_estimate - np.exp(0.125)))
    covered, reliable = np.array(covered), np.array(reliable)
    assert np.mean(covered[reliable]) >= 0.9 and np.mean(reliable) >= 0.5
    assert np.median(ratio) < 0.01


def test_heavy_tailed_draws_mark_every_cv_estimate_unreliable():
    """Student-t3 draws: CVs extrapolate into tails the draws rarely reach (x^2 covered 3-10%);
    Gaussian draws of the same size are not flagged."""
    from scipy import stats

    flagged_t, flagged_gauss = [], []
    for rep in range(20):
        rng = np.random.default_rng(rep)
        x = stats.t(3).rvs(size=(1000, 1), random_state=rng)
        res = pymc_cv.cv_estimate(np.column_stack([x[:, 0] ** 2, np.arctan(x[:, 0]) ** 2]), x,
                                  -4 * x / (3 + x**2))
        cv = res.method != "mc"
        flagged_t.append(bool(np.all(~res.se_reliable[cv])) and any("heavy tails" in n for n in res.notes))
        z, s = gaussian_draws(1000, 2, 100 + rep)
        flagged_gauss.append(not np.all(pymc_cv.cv_estimate(np.sin(z[:, 0]), z, s).se_reliable))
    assert np.mean(flagged_t) >= 0.8 and np.mean(flagged_gauss) <= 0.1


def test_auto_skips_a_full_quadratic_basis_that_would_take_minutes():
    """ZV-2 with cross terms in 89 dimensions has 4,094 features: on 20,000 draws its least squares cost
    minutes, so "auto" fits the squares alone and says so; on 4,000 draws in 10 dimensions it is fitted."""
    from pymc_cv.core.estimate import _planned_methods

    notes = []
    bases, _ = _planned_methods("auto", 20_000, 89, notes)
    assert (2, True) not in bases and (2, False) in bases and (1, True) in bases
    assert len(notes) == 1 and "4094 features" in notes[0]
    notes = []
    bases, _ = _planned_methods("auto", 4_000, 10, notes)
    assert (2, True) in bases and notes == []
    assert (2, True) in _planned_methods("zv2", 20_000, 89)[0]  # asked for by name: fitted
    # "zv" is held to the same budget: ZV-3 in 30 dimensions has 5,455 features
    notes = []
    bases, kernels = _planned_methods("zv", 100_000, 30, notes)
    assert bases == [(1, True), (2, False)] and kernels == []
    assert [n.split(" with")[0] for n in notes] == ["ZV-2", "ZV-3"] and "5455 features" in notes[1]
    assert (3, True) in _planned_methods("zv", 20_000, 5)[0]  # 55 features: cheap, fitted


def test_the_cf_shares_the_secf_kernel_only_where_that_costs_it_nothing_held_out():
    """One kernel for CF and SECF (one N x N factorisation, not two) when, on the tuning draws, the
    better design under it is as good held-out as the two kernels tuned apart; not when the SECF's
    kernel is ten times too short for the CF."""
    from pymc_cv.core.estimate import _one_kernel_suffices
    from pymc_cv.core.kernels import make_kernel
    from pymc_cv.core.problem import KernelSpec

    x, s = gaussian_draws(300, 2, 4)
    f = np.column_stack([np.sin(x[:, 0]) + np.cos(x[:, 1]), np.exp(x[:, 0] / 2)])
    good = make_kernel("se", 2, x)
    cf = KernelSpec(good, np.ones((1, 1)), 1e-6, [0])
    notes = []
    assert _one_kernel_suffices([(cf, 0), (cf._replace(orders=[2]), 2)], x, s, f, notes)
    assert "leave-one-out error is 1.00x" in notes[0]
    short = good.with_log_params(good.log_params() + np.log(0.1))
    secf = KernelSpec(short, np.ones((1, 1)), 1e-6, [2])
    assert not _one_kernel_suffices([(cf, 0), (secf, 2)], x, s, f, notes)
    assert len(notes) == 1


def test_only_the_better_kernel_design_is_fitted_unless_the_other_wins_on_some_integrand():
    """On a Gaussian target the SECF's quadratic design is exact for x0^2 + x1, where the CF is not:
    the CF is not fitted on all the draws.  With a second integrand on which the CF (its own kernel) is
    far better than an SECF with a kernel ten times too short, both are fitted."""
    from pymc_cv.core.estimate import _designs_worth_fitting
    from pymc_cv.core.kernels import make_kernel
    from pymc_cv.core.problem import KernelSpec

    x, s = gaussian_draws(300, 2, 4)
    good = make_kernel("se", 2, x)
    cf = KernelSpec(good, np.ones((1, 1)), 1e-6, [0])
    secf = cf._replace(orders=[2])
    notes = []
    kept = _designs_worth_fitting([(cf, 0), (secf, 2)], x, s, (x[:, 0] ** 2 + x[:, 1])[:, None], notes)
    assert [spec.orders for spec, _ in kept] == [[2]]
    assert len(notes) == 1 and notes[0].startswith("CF not fitted")
    short = secf._replace(kernel=good.with_log_params(good.log_params() + np.log(0.1)))
    f = np.column_stack([x[:, 0] ** 2, np.sin(x[:, 0]) + np.cos(x[:, 1])])
    both = [(cf, 0), (short, 2)]
    assert _designs_worth_fitting(both, x, s, f, notes) is both
    assert len(notes) == 1


def test_zv_jackknife_fits_without_a_part_equal_least_squares_refits():
    """The intercepts without a quarter, downdated from the full fit's QR, are those of refitting the
    kept draws by least squares; a deletion that leaves a feature unidentified is an error."""
    from scipy import linalg

    from pymc_cv.core.zero_variance import _intercepts_without, _least_squares_design

    x, s = gaussian_draws(400, 4, 7, np.linspace(-1, 1, 4), np.linspace(0.5, 2, 4))
    Y = np.column_stack([np.sin(x[:, 0]) * x[:, 1], np.exp(0.3 * x[:, 2]), x[:, 3] ** 3])
    D = _least_squares_design(x, s, 2, True)
    Qm, R = np.linalg.qr(D)
    without = _intercepts_without(Qm, R, Y)
    for k in range(4):
        mask = np.arange(400) % 4 == k
        np.testing.assert_allclose(without(mask), linalg.lstsq(D[~mask], Y[~mask])[0][0], rtol=1e-10, atol=1e-12)
    # a feature seen only by the deleted draws
    D1 = np.column_stack([D[:, :3], (np.arange(400) < 50).astype(float)])
    Qm1, R1 = np.linalg.qr(D1)
    with pytest.raises(ValueError, match="rank"):
        _intercepts_without(Qm1, R1, Y)(np.arange(400) < 50)


@pytest.mark.parametrize("order, cross", [(1, True), (2, False)])
def test_a_zv_basis_fitted_from_a_wider_bases_qr_is_the_basis_fitted_alone(order, cross):
    """ZV-1 and ZV-2 without cross terms lead the full order-2 design, so the leading columns of its QR
    give them the same estimates, held-out residuals and jackknife bias as their own QR."""
    from pymc_cv.core.zero_variance import least_squares_factor, zero_variance_candidate

    x, s = gaussian_draws(600, 3, 11, np.linspace(-1, 1, 3), np.linspace(0.5, 2, 3))
    Y = np.column_stack([np.sin(x[:, 0]) * x[:, 1], np.exp(0.3 * x[:, 2]), x[:, 0] * x[:, 1]])
    chain = np.repeat(np.arange(2), 300)
    wide = least_squares_factor(x, s, Y, 2, True)
    assert wide.Q.shape[1] > 1 + (3 if order == 1 else 6)
    alone = zero_variance_candidate(x, s, Y, order, None, chain, 4, cross=cross)
    shared = zero_variance_candidate(x, s, Y, order, None, chain, 4, cross=cross, factor=wide)
    for a, b in [(alone.estimate, shared.estimate), (alone.resid, shared.resid), (alone.z, shared.z),
                 (alone.jackknife_bias, shared.jackknife_bias), (alone.influence, shared.influence)]:
        np.testing.assert_allclose(b, a, rtol=1e-9, atol=1e-12 * np.max(np.abs(a)))
    # the wider basis's own fit differs (x0 x1 is exact under order 2 with cross terms only)
    full = zero_variance_candidate(x, s, Y, 2, None, chain, 4, factor=wide)
    assert not np.allclose(full.resid[:, 2], alone.resid[:, 2])
