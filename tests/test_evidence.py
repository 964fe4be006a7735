"""Thermodynamic integration against closed-form evidences."""

import numpy as np
import pytest
from scipy import stats

from pymc_cv.evidence import (
    conditional_ess, integrate, power_ladder, quadrature_error, quadrature_weights, refine_ladder, ti_from_arrays,
)


class GaussianRegression:
    """y = X b + e, e ~ N(0, s^2 I) with s known, b ~ N(0, tau^2 I): every power posterior is Gaussian."""

    def __init__(self, seed=0, n=15, p=2, s=0.5, tau=1.0):
        rng = np.random.default_rng(seed)
        self.X = rng.normal(size=(n, p))
        self.y = self.X @ rng.normal(size=p) + s * rng.normal(size=n)
        self.s, self.tau, self.n, self.p = s, tau, n, p

    def log_evidence(self):
        cov = self.s**2 * np.eye(self.n) + self.tau**2 * self.X @ self.X.T
        return stats.multivariate_normal(np.zeros(self.n), cov).logpdf(self.y)

    def power_posterior(self, t):
        prec = np.eye(self.p) / self.tau**2 + t * self.X.T @ self.X / self.s**2
        cov = np.linalg.inv(prec)
        return cov @ (t * self.X.T @ self.y / self.s**2), cov

    def loglik(self, b):
        r = self.y[None, :] - b @ self.X.T
        return -0.5 * self.n * np.log(2 * np.pi * self.s**2) - 0.5 * np.sum(r**2, axis=1) / self.s**2

    def grad_loglik(self, b):
        return (self.y[None, :] - b @ self.X.T) @ self.X / self.s**2

    def grad_logprior(self, b):
        return -b / self.tau**2

    def moments(self, t):
        """Exact mean and variance of log p(y|b) under the power posterior at t."""
        m, C = self.power_posterior(t)
        A = self.X.T @ self.X / self.s**2  # loglik = const - 0.5 (b - bhat)' A (b - bhat) + ...
        r = self.y - self.X @ m
        mean = -0.5 * self.n * np.log(2 * np.pi * self.s**2) - 0.5 * (r @ r / self.s**2 + np.trace(A @ C))
        g = self.X.T @ r / self.s**2  # gradient at the mean
        var = g @ C @ g + 0.5 * np.trace(A @ C @ A @ C)
        return mean, var

    def draws(self, temperatures, m, rng):
        out = {"loglik": [], "samples": [], "grad_loglik": [], "grad_logprior": []}
        for t in temperatures:
            mu, C = self.power_posterior(t)
            b = rng.multivariate_normal(mu, C, size=m)
            out["samples"].append(b)
            out["loglik"].append(self.loglik(b))
            out["grad_loglik"].append(self.grad_loglik(b))
            out["grad_logprior"].append(self.grad_logprior(b))
        return out


def test_power_ladder():
    t = power_ladder(31)
    assert t[0] == 0 and t[-1] == 1 and t.size == 31
    np.testing.assert_allclose(t[1], (1 / 30) ** 5)
    with pytest.raises(ValueError, match="n_rungs"):
        power_ladder(1)


def test_quadrature_rules_on_the_exact_curve():
    model = GaussianRegression()
    truth = model.log_evidence()
    t = power_ladder(31)
    mean, var = np.array([model.moments(ti) for ti in t]).T
    # the exact moments: check them against their own derivative identity d/dt E_t = Var_t
    h = 1e-6
    dmean = (model.moments(0.3 + h)[0] - model.moments(0.3 - h)[0]) / (2 * h)
    np.testing.assert_allclose(dmean, model.moments(0.3)[1], rtol=1e-5)
    trap, _ = integrate(t, mean, var, rule="trapezoid")
    corr, _ = integrate(t, mean, var, rule="corrected")
    assert abs(corr - truth) < 0.2 * abs(trap - truth)
    assert abs(corr - truth) < 1e-3
    # the Richardson estimate is within a factor of a few of the actual error
    for rule, value in (("trapezoid", trap), ("corrected", corr)):
        est = quadrature_error(t, mean, var, rule=rule)
        assert abs(value - truth) / 5 < est < 5 * abs(value - truth)


@pytest.mark.parametrize("n_rungs", range(5, 17))
def test_richardson_error_does_not_understate_short_ladders(n_rungs):
    # even rung counts need a coarse interval spanning one fine one; at the hot end that gave
    # a third of the actual error on 6 rungs
    model = GaussianRegression(seed=1, n=3, p=1, tau=2.0, s=1.0)
    t = power_ladder(n_rungs)
    mean, var = np.array([model.moments(ti) for ti in t]).T
    error = abs(integrate(t, mean, var)[0] - model.log_evidence())
    assert 0.5 * error < quadrature_error(t, mean, var) < 3 * error


def test_quadrature_weights_and_bad_ladders():
    a, b = quadrature_weights([0, 0.25, 1], "corrected")
    np.testing.assert_allclose(a, [0.125, 0.5, 0.375])
    np.testing.assert_allclose(b, [0.25**2 / 12, (0.75**2 - 0.25**2) / 12 * -1, -(0.75**2) / 12][:1] + [
        -(0.25**2) / 12 + 0.75**2 / 12, -(0.75**2) / 12])
    with pytest.raises(ValueError, match="increasing"):
        quadrature_weights([0, 0.5, 0.5, 1])
    with pytest.raises(ValueError, match="t = 0"):
        quadrature_weights([0.1, 1])
    with pytest.raises(ValueError, match="rule"):
        quadrature_weights([0, 1], "simpson")


def test_conditional_ess_and_refinement():
    rng = np.random.default_rng(0)
    ll = rng.normal(-50, 5, size=2000)
    assert conditional_ess(ll, 0.0) == pytest.approx(1.0)
    # lognormal weights: CESS = exp(-delta^2 sd^2) in the limit
    assert conditional_ess(ll, 0.1) == pytest.approx(np.exp(-0.25), abs=0.05)
    t = np.array([0.0, 1.0])
    lls = [ll, rng.normal(-40, 1, size=2000)]
    new = refine_ladder(t, lls, target_cess=0.5)
    assert new.size >= 2 and np.all((new > 0) & (new < 1))
    full = np.concatenate([[0.0], new])
    for lo, hi in zip(full[:-1], full[1:]):  # every new step from rung 0's draws hits the target
        assert conditional_ess(ll, hi - lo, lo) == pytest.approx(0.5, abs=1e-6)
    with pytest.raises(ValueError, match="one per rung"):
        refine_ladder(t, lls[:1])


def test_bad_rung_input_is_refused():
    model = GaussianRegression()
    t = power_ladder(5)
    d = model.draws(t, 20, np.random.default_rng(0))
    d["loglik"][2] = d["loglik"][2].copy()
    d["loglik"][2][3] = np.nan
    with pytest.raises(ValueError, match=r"rung 2 .*NaN"):
        ti_from_arrays(t, **d, method="mc")
    with pytest.raises(ValueError, match="one per rung"):
        ti_from_arrays(t[:-1], **d, method="mc")
    with pytest.raises(ValueError, match="method"):
        ti_from_arrays(t, **d, method="zv9")


@pytest.mark.slow
def test_cv_ti_on_a_gaussian_regression_beats_plain_ti_and_covers():
    """Exact draws from the power posteriors (the quadrature truth is exact): CV estimators cut
    the sampling error of TI, and the reported se covers the truth."""
    model = GaussianRegression(seed=3)
    truth = model.log_evidence()
    t = power_ladder(21)
    errs = {"mc": [], "cti": [], "vvcv": []}
    covered = {"mc": 0, "cti": 0, "vvcv": 0}
    seeds = range(10)
    for seed in seeds:
        d = model.draws(t, 30, np.random.default_rng(seed))
        for method in errs:
            r = ti_from_arrays(t, **d, method=method, random_seed=seed)
            errs[method].append(abs(r.log_evidence - truth))
            covered[method] += abs(r.log_evidence - truth) <= 2 * r.se
            if method == "vvcv":
                assert abs(r.mc_log_evidence - truth) == pytest.approx(errs["mc"][-1])
    mae = {k: np.mean(v) for k, v in errs.items()}
    assert mae["vvcv"] < 0.05 and mae["vvcv"] <= 0.5 * mae["mc"]
    assert mae["cti"] <= 0.5 * mae["mc"]
    for method in errs:
        assert covered[method] >= 8, (method, covered, mae)


def _nig_regression(seed, n=20, p=3, a=3.0, b=2.0, v=1.0):
    """Normal-inverse-gamma linear regression: sigma2 ~ IG(a, b), beta | sigma2 ~ N(0, sigma2 v I);
    y is multivariate t with 2a degrees of freedom, so log p(y) is closed form."""
    import pymc as pm

    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, p))
    y = X @ rng.normal(size=p) + 0.7 * rng.normal(size=n)
    truth = stats.multivariate_t(np.zeros(n), (b / a) * (np.eye(n) + v * X @ X.T), df=2 * a).logpdf(y)
    with pm.Model() as model:
        s2 = pm.InverseGamma("sigma2", a, b)
        beta = pm.Normal("beta", 0, pm.math.sqrt(s2 * v), shape=p)
        pm.Normal("y", pm.math.dot(X, beta), pm.math.sqrt(s2), observed=y)
    return model, truth


@pytest.mark.slow
def test_thermodynamic_integration_of_a_pymc_model_with_nuts():
    """NUTS on the power posteriors of a conjugate regression with unknown noise (log p(y|x) is not
    quadratic on the unconstrained space): vv-CV TI within 0.05 nats, at most half the error of
    plain TI on the same draws, se covering the truth."""
    import pymc_cv

    model, truth = _nig_regression(0)
    errs, mc_errs, covered = [], [], 0
    for seed in range(2):
        r = pymc_cv.thermodynamic_integration(model, 21, draws=100, tune=300, random_seed=seed, progressbar=False)
        assert r.method == "vvcv" and r.temperatures.size == 21
        errs.append(abs(r.log_evidence - truth))
        mc_errs.append(abs(r.mc_log_evidence - truth))
        covered += errs[-1] <= 2 * r.se
    assert np.mean(errs) < 0.05
    assert np.mean(errs) <= 0.5 * np.mean(mc_errs)
    assert covered == 2
    # the same seed gives the same draws whatever the method (a short ladder shows it as well)
    short = dict(draws=50, tune=100, random_seed=0, progressbar=False)
    r = pymc_cv.thermodynamic_integration(model, 4, **short)
    r_mc = pymc_cv.thermodynamic_integration(model, 4, method="mc", **short)
    assert r.method != r_mc.method == "mc"
    assert r_mc.log_evidence == pytest.approx(r.mc_log_evidence, abs=1e-12)


def test_tempering_refuses_models_it_cannot_temper():
    import pymc as pm

    import pymc_cv

    with pm.Model() as no_data:
        pm.Normal("x", 0, 1)
    with pytest.raises(ValueError, match="no observed variables"):
        pymc_cv.thermodynamic_integration(no_data, 5)
    with pm.Model() as potential:
        x = pm.Normal("x", 0, 1)
        pm.Potential("lik", -0.5 * x**2)
        pm.Normal("y", x, 1, observed=0.0)
    with pytest.raises(ValueError, match="Potentials"):
        pymc_cv.thermodynamic_integration(potential, 5)
    with pm.Model() as discrete:
        k = pm.Poisson("k", 3.0)
        pm.Normal("y", k, 1, observed=0.0)
    with pytest.raises(ValueError, match="discrete"):
        pymc_cv.thermodynamic_integration(discrete, 5)


@pytest.mark.slow
def test_ti_from_draws_the_user_sampled():
    """Power posteriors sampled by the user (their own tempered models) and the untempered model."""
    import pymc as pm

    from pymc_cv.pymc.evidence import ti_from_draws

    y = np.array([0.4, -0.2, 1.1])
    truth = stats.multivariate_normal(np.zeros(3), np.eye(3) + np.ones((3, 3))).logpdf(y)
    with pm.Model() as model:
        x = pm.Normal("x", 0, 1)
        pm.Normal("y", x, 1, observed=y)
    t = power_ladder(6)
    idatas = []
    for i, ti in enumerate(t):
        with pm.Model():
            x = pm.Normal("x", 0, 1)
            pm.Potential("tempered_likelihood", ti * pm.logp(pm.Normal.dist(x, 1), y).sum())
            idatas.append(pm.sample(100, tune=300, chains=2, random_seed=i, progressbar=False,
                                    compute_convergence_checks=False))
    res = ti_from_draws(idatas, t, model, method="cti", progressbar=False)
    assert res.temperatures.size == 6 and res.seconds["terms"] >= 0
    assert abs(res.log_evidence - truth) <= 3 * res.se + 1e-3
    assert abs(res.log_evidence - truth) < 0.02
    with pytest.raises(ValueError, match="one per rung"):
        ti_from_draws(idatas[:-1], t, model)


def test_weighted_rung_estimate_is_accurate_and_its_se_covers():
    """Draws of N(0, 1) reweighted onto p_t(x) ~ exp(t l(x)) N(x; 0, 1), l = -x^2/2 + sin x:
    weighted ZV-CVs beat the weighted average many times and both se cover (truth by quadrature)."""
    from scipy import integrate as quad

    from pymc_cv.evidence.weighted_rung import weighted_moments

    t = 0.5
    dens = lambda x: np.exp(t * (-0.5 * x**2 + np.sin(x)) - 0.5 * x**2)  # noqa: E731
    truth = quad.quad(lambda x: dens(x) * (-0.5 * x**2 + np.sin(x)), -20, 20)[0] / quad.quad(dens, -20, 20)[0]
    rng = np.random.default_rng(1)
    err, se, mc_err, mc_se = [], [], [], []
    for _ in range(100):
        x = rng.normal(size=(300, 1))
        ll = -0.5 * x[:, 0] ** 2 + np.sin(x[:, 0])
        out = weighted_moments(ll, x, t * (np.cos(x) - x) - x, 7.0 * np.exp(t * ll))  # any scale
        err.append(out["est"][0] - truth)
        se.append(out["se"][0])
        mc_err.append(out["mc_est"][0] - truth)
        mc_se.append(out["mc_se"][0])
    err, se, mc_err, mc_se = map(np.asarray, (err, se, mc_err, mc_se))
    assert np.sqrt(np.mean(err**2)) < 0.1 * np.sqrt(np.mean(mc_err**2))
    assert np.mean(np.abs(err) < 2 * se) >= 0.85 and np.mean(np.abs(mc_err) < 2 * mc_se) >= 0.85


def test_weighted_zv_of_order_3_only_where_its_features_are_few():
    """Order 3 in 10 dimensions (285 features) cost 40% of eight schools' SMC evidence for no gain; in
    6 dimensions (83 features) it is still tried. A quadratic log-likelihood in 10 dimensions is then
    still exact with order 2: N(0, I) reweighted onto N(0, I / 2), E[-|x|^2 / 2] = -d / 4."""
    from pymc_cv.evidence.weighted_rung import _orders, weighted_moments

    assert _orders(4000, 10, 3) == [0, 1, 2]
    assert _orders(4000, 6, 3) == [0, 1, 2, 3]
    x = np.random.default_rng(2).normal(size=(1000, 10))
    ll = -0.5 * np.sum(x**2, axis=1)
    out = weighted_moments(ll, x, -2 * x, np.exp(ll))
    assert out["method"] == "zv2" and abs(out["est"][0] + 2.5) < 1e-8


def test_ti_with_importance_weighted_rungs():
    """Every rung's draws come from a cooler power posterior, reweighted onto the rung (as SMC
    particles before resampling): weighted TI recovers the closed-form evidence."""
    model = GaussianRegression(seed=4)
    truth = model.log_evidence()
    t = power_ladder(16)
    cooler = t * 0.8
    rng = np.random.default_rng(0)
    d = model.draws(cooler, 400, rng)
    weights = [np.exp((ti - ci) * (ll - ll.max())) for ti, ci, ll in zip(t, cooler, d["loglik"])]
    res = {m: ti_from_arrays(t, **d, weights=weights, method=m) for m in ("mc", "cti")}
    for r in res.values():
        assert abs(r.log_evidence - truth) < 3 * r.se
    assert abs(res["cti"].log_evidence - truth) < 0.02
    assert res["cti"].moments.method[3].startswith("weighted zv")
    # unweighted averages of the same draws are biased (they follow the cooler ladder)
    assert abs(ti_from_arrays(t, **d, method="mc").log_evidence - truth) > 5 * res["mc"].se
    with pytest.raises(ValueError, match="method='cti'"):
        ti_from_arrays(t, **d, weights=weights, method="vvcv")
    for bad, match in ((weights[:-1], "one array"), ([-w for w in weights], "non-negative"),
                       ([w[:-1] for w in weights], "one weight per draw"), ([w * 0 for w in weights], "all zero")):
        with pytest.raises(ValueError, match=match):
            ti_from_arrays(t, **d, weights=bad, method="mc")


def test_refine_reweights_draws_onto_a_finer_ladder():
    """A coarse ladder (6 rungs) on a sharp likelihood: reweighting onto a finer one cuts the
    quadrature error many times without new draws, and the result still covers."""
    model = GaussianRegression(seed=2, s=0.3)
    truth = model.log_evidence()
    t = power_ladder(6)
    for seed in range(3):
        d = model.draws(t, 500, np.random.default_rng(seed))
        plain = ti_from_arrays(t, **d, method="cti")
        fine = ti_from_arrays(t, **d, method="cti", refine=True)
        assert fine.temperatures.size > t.size and np.all(np.isin(t, fine.temperatures))
        assert fine.quadrature_error < 0.2 * plain.quadrature_error
        assert abs(fine.log_evidence - truth) < max(3 * fine.se, 0.2 * abs(plain.log_evidence - truth))
        assert abs(fine.log_evidence - truth) < 3 * fine.se + 1e-3
        assert any("refine:" in n for n in fine.notes)
    with pytest.raises(ValueError, match="refine"):
        ti_from_arrays(t, **d, refine=1.5)


@pytest.mark.slow
def test_smc_stages_refined_by_reweighting_recover_a_closed_form_evidence():
    """PyMC's SMC picks few stages; refine=True reweights them onto a finer ladder (no new draws)."""
    import pymc_cv

    model, truth = _nig_regression(seed=2)
    res = pymc_cv.thermodynamic_integration(model, sampler="smc", draws=600, method="cti", random_seed=3,
                                            refine=True, progressbar=False)
    stages = res.draws["loglik"]
    assert res.temperatures.size > len(stages) >= 3
    assert abs(res.log_evidence - truth) < 3 * res.se and abs(res.log_evidence - truth) < 0.1
    assert any("refine:" in n for n in res.notes)
    # the README's line: TI's estimate afterwards, from the sampled rungs kept in res.draws
    again = pymc_cv.ti_from_arrays(**res.draws, method="cti", refine=True, random_seed=3)
    assert again.log_evidence == pytest.approx(res.ti_log_evidence, abs=1e-9)
    assert again.ti_log_evidence == again.log_evidence and again.importance is None
    np.testing.assert_array_equal(again.temperatures, res.temperatures)


def test_integrate_adds_the_rungs_biases_signed_and_their_noise_in_quadrature():
    """A bias of one sign adds up over rungs: the per-rung se's hold |bias| linearly, integrate
    takes it out of each and puts back |sum of weight x bias| once."""
    from pymc_cv.evidence import quadrature_weights

    t = power_ladder(5)
    mean, var = -np.linspace(3, 1, 5), np.linspace(2, 0.5, 5)
    noise, shift = np.full(5, 0.1), np.array([0.05, 0.05, -0.02, 0.05, 0.05])
    a, b = quadrature_weights(t, "corrected")
    _, se = integrate(t, mean, var, noise + np.abs(shift), np.zeros(5), mean_bias=shift, var_bias=np.zeros(5))
    assert se == pytest.approx(np.sqrt(np.sum((a * noise) ** 2)) + abs(a @ shift))
    _, se_plain = integrate(t, mean, var, noise, np.zeros(5))
    assert se_plain == pytest.approx(np.sqrt(np.sum((a * noise) ** 2)))


class _ScaleOnly:
    """y_1..n ~ N(0, sigma^2), sigma ~ HalfNormal(1), x = log sigma: E_0[log p(y|x)] = -infinity.
    Power posteriors are drawn exactly by inverting their CDF on a fine grid of x."""

    def __init__(self, n=20, seed=0):
        self.n = n
        self.ss = float(np.sum(np.random.default_rng(seed).normal(0, 1.5, n) ** 2))
        self.grid = np.linspace(-40.0, 4.0, 400_001)

    def loglik(self, x):
        return -0.5 * self.n * np.log(2 * np.pi) - self.n * x - 0.5 * self.ss * np.exp(-2 * x)

    def logprior(self, x):  # HalfNormal(1) on sigma = e^x, with the Jacobian
        return np.log(np.sqrt(2 / np.pi)) - 0.5 * np.exp(2 * x) + x

    def log_evidence(self, t=1.0):
        lp = self.logprior(self.grid) + t * self.loglik(self.grid)
        return float(np.log(np.sum(np.exp(lp - lp.max())) * (self.grid[1] - self.grid[0])) + lp.max())

    def prior_loglik(self, m, rng):
        return self.loglik(np.log(np.abs(rng.normal(size=m))))

    def draws(self, t, m, rng):
        out = {"temperatures": t, "loglik": [], "samples": [], "grad_loglik": [], "grad_logprior": []}
        for ti in t:
            lp = self.logprior(self.grid) + ti * self.loglik(self.grid)
            cdf = np.cumsum(np.exp(lp - lp.max()))
            x = np.interp(rng.uniform(size=m) * cdf[-1], cdf, self.grid)
            out["loglik"].append(self.loglik(x))
            out["samples"].append(x[:, None])
            out["grad_loglik"].append((-self.n + self.ss * np.exp(-2 * x))[:, None])
            out["grad_logprior"].append((1 - np.exp(2 * x))[:, None])
        return out


@pytest.mark.parametrize("seed", [0, 1])
def test_stepping_stones_cross_the_singular_prior_end(seed):
    """Under a HalfNormal scale TI's integrand is -infinity at t = 0 and the first rungs' log-likelihoods
    have infinite variance: TI over the whole ladder was flagged (heavy tails at t = 0) with a se up to
    0.45 nats.  Stepping stones over those rungs and TI after them recover the quadrature evidence
    within 3 se, with a se of about 0.013 that is not flagged."""
    model = _ScaleOnly()
    truth = model.log_evidence()
    d = model.draws(power_ladder(31), 250, np.random.default_rng(seed))
    res = ti_from_arrays(**d)
    assert res.stepping_stone is not None and res.temperatures[0] > 0
    assert any("stepping stones" in n for n in res.notes)
    assert res.reliable and res.se < 0.03
    assert abs(res.log_evidence - truth) < 3 * res.se
    from pymc_cv.evidence.stepping_stone import stepping_stone

    # the whole ladder by stepping stones agrees too (a check of the estimator on its own)
    whole = stepping_stone(d["temperatures"], d["loglik"])
    assert abs(whole.log_evidence - truth) < 3 * whole.se


def test_prior_draws_take_the_first_stepping_stones_that_mcmc_draws_get_wrong():
    """At small t the stones lean on rare draws near sigma = 0, where the likelihood vanishes.  Rungs whose
    draws miss the lowest 1% of log sigma (as a sampler that seldom goes there) put the stones several se
    too high; with independent prior draws those steps are one importance-sampling estimate from the prior,
    within 3 se of the truth."""
    from pymc_cv.evidence.stepping_stone import PRIOR_MIN_ESS, prior_importance, stepping_stone

    model, rng = _ScaleOnly(), np.random.default_rng(0)
    t = power_ladder(16)[:5]
    truth = model.log_evidence(t[-1])
    d = model.draws(t, 2000, rng)
    missed = [ll[x[:, 0] > np.quantile(x[:, 0], 0.01)] for ll, x in zip(d["loglik"], d["samples"])]
    off = stepping_stone(t, missed)
    assert off.log_evidence - truth > 3 * off.se
    prior = model.prior_loglik(4000, rng)
    fixed = stepping_stone(t, missed, prior_loglik=prior)
    _, _, ess = prior_importance(t[1:], prior)
    assert fixed.prior_steps == 4 and np.all(ess > PRIOR_MIN_ESS * 4000)
    assert abs(fixed.log_evidence - truth) < 3 * fixed.se < 0.05
    # further up the ladder the prior's weights degenerate: the steps there go back to the rungs' draws
    model, far = _ScaleOnly(n=2000), power_ladder(16)
    d, prior = model.draws(far, 500, rng), model.prior_loglik(4000, rng)
    part = stepping_stone(far, d["loglik"], prior_loglik=prior)
    _, _, ess = prior_importance(far[1:], prior)
    assert 0 < part.prior_steps < far.size - 1
    assert ess[part.prior_steps] < PRIOR_MIN_ESS * 4000 <= ess[part.prior_steps - 1]
    assert abs(part.log_evidence - model.log_evidence()) < 3 * part.se


@pytest.mark.parametrize("vectorised", [True, False])
def test_prior_draws_of_a_hierarchical_model_have_its_moments(vectorised, monkeypatch):
    """mu ~ N(0, 5), tau ~ HalfNormal(2), a_j ~ N(mu, tau): var a_j = 25 + 4, cov(a_0, a_1) = 25; a
    HalfCauchy(1) beside them has median 1.  Vectorised, and by PyMC's loop when that fails."""
    import pymc as pm

    from pymc_cv.pymc import tempering

    if not vectorised:
        monkeypatch.setattr(tempering, "_batched_prior", lambda rvs, draws: 1 / 0)
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 5)
        tau = pm.HalfNormal("tau", 2)
        a = pm.Normal("a", mu, tau, shape=3)
        s = pm.HalfCauchy("s", 1)
        pm.Normal("y", a.sum() + s, 1, observed=[0.1])
    if vectorised:  # the fast path itself works here (the loop would pass the moments too)
        assert [v.shape for v in pm.draw(tempering._batched_prior(list(model.free_RVs), 5))] == [(5,), (5,), (5, 3),
                                                                                                 (5,)]
    n = 16000 if vectorised else 4000
    draws = dict(zip(["mu", "tau", "a", "s"], tempering.draw_prior(model, n, np.random.default_rng(0))))
    assert draws["a"].shape == (n, 3) and draws["s"].shape == (n,)
    tol = 4 / np.sqrt(n)
    np.testing.assert_allclose(np.var(draws["a"], axis=0), 29, rtol=4 * tol)
    assert abs(np.corrcoef(draws["a"][:, 0], draws["a"][:, 2])[0, 1] - 25 / 29) < tol
    assert abs(np.mean(draws["tau"] ** 2) - 4) < 4 * 4 * tol
    assert abs(np.mean(draws["s"] < 1) - 0.5) < tol


def test_prior_draws_of_a_pymc_model_give_its_tempered_evidence():
    """``prior_loglik`` draws the prior of a PyMC model: importance sampling from its draws recovers
    log Z(t) of the scale-only model by quadrature; a prior PyMC cannot draw gives None and the reason."""
    import pymc as pm

    from pymc_cv.evidence.stepping_stone import prior_importance
    from pymc_cv.pymc.tempering import loglik_terms, prior_loglik

    exact = _ScaleOnly()
    y = np.random.default_rng(0).normal(0, 1.5, exact.n)
    with pm.Model() as model:
        sigma = pm.HalfNormal("sigma", 1)
        pm.Normal("y", 0, sigma, observed=y)
    ll, why = prior_loglik(model, loglik_terms(model), 4000, random_seed=1)
    assert why is None and ll.shape == (4000,)
    t = np.array([1e-4, 1e-2, 0.1])
    log_z, se, _ = prior_importance(t, ll)
    truth = np.array([exact.log_evidence(ti) for ti in t])
    assert np.all(np.abs(log_z - truth) < 3 * se)
    with pm.Model() as custom:
        sigma = pm.CustomDist("sigma", 1.0, logp=lambda v, s: pm.logp(pm.HalfNormal.dist(s), v),
                              transform=pm.distributions.transforms.log)
        pm.Normal("y", 0, sigma, observed=y)
    ll, why = prior_loglik(custom, loglik_terms(custom), 100, random_seed=1)
    assert ll is None and "PyMC cannot draw the prior" in why and "random" in why


@pytest.mark.parametrize("seed", [0, 1])
def test_ti_starts_where_the_prior_draws_still_carry_half_their_ess(seed):
    """With prior draws, the stones run up to the last rung where importance sampling from the prior keeps
    half its ESS (or further, where the rungs' tails say so), and TI covers the rest."""
    from pymc_cv.evidence.stepping_stone import prior_reach, singular_start

    model, rng = _ScaleOnly(), np.random.default_rng(seed)
    t = power_ladder(16)
    d, prior = model.draws(t, 250, rng), model.prior_loglik(4000, rng)
    res = ti_from_arrays(**d, prior_loglik=prior, method="cti")
    start = max(prior_reach(t, prior), singular_start(d["loglik"]))
    assert 0 < prior_reach(t, prior) < t.size - 2 and res.temperatures[0] == t[start]
    assert res.stepping_stone.prior_steps > 0
    assert res.reliable and abs(res.log_evidence - model.log_evidence()) < 3 * res.se < 0.1


def test_prior_draws_must_start_at_the_prior():
    from pymc_cv.evidence.stepping_stone import stepping_stone

    with pytest.raises(ValueError, match="starts at the prior"):
        stepping_stone([0.1, 0.5], [np.zeros(10)], prior_loglik=np.zeros(10))


@pytest.mark.slow
def test_smc_particles_that_miss_a_stage_are_an_error_that_names_smc():
    """A varying-intercept model with 100 particles: PyMC's SMC takes few stages, and its particles at t = 1
    fail the Stein identities (6 of seeds 0-7; the other two runs are 2.2 nats off and flagged); the error
    says the particles, not the scores, are at fault."""
    import pymc as pm

    import pymc_cv
    from pymc_cv.core.score_check import ScoreMismatchError

    rng = np.random.default_rng(3)
    group = np.repeat(np.arange(6), 5)
    y = rng.normal(1.0, 1.0, 6)[group] + rng.normal(0, 0.8, 30)
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 5)
        tau = pm.HalfNormal("tau", 2)
        sigma = pm.HalfNormal("sigma", 2)
        a = pm.Normal("a", mu, tau, shape=6)
        pm.Normal("y", a[group], sigma, observed=y)
    with pytest.raises(ScoreMismatchError, match="PyMC's SMC particles"):
        pymc_cv.thermodynamic_integration(model, sampler="smc", draws=100, random_seed=1, progressbar=False)


@pytest.mark.parametrize("kwargs, named", [({"tune": 100}, "tune"), ({"chains": 4}, "chains"),
                                           ({"temperatures": 5, "sampler": "smc"}, "temperatures")])
def test_settings_smc_would_not_use_are_errors_that_name_them(kwargs, named):
    import pymc as pm

    import pymc_cv

    with pm.Model() as model:
        x = pm.Normal("x", 0, 1)
        pm.Normal("y", x, 1, observed=0.0)
    with pytest.raises(ValueError, match=f"{named} given with sampler='smc'.*sampler='nuts'"):
        pymc_cv.thermodynamic_integration(model, progressbar=False, **kwargs)


def test_the_default_sampler_is_smc_with_its_own_particles_and_zv_cvs_and_recovers_a_closed_form():
    """x ~ N(0, 1), y = 0 ~ N(x, 1): log p(y) = -log(4 pi) / 2."""
    import pymc as pm

    import pymc_cv

    with pm.Model() as model:
        x = pm.Normal("x", 0, 1)
        pm.Normal("y", x, 1, observed=0.0)
    res = pymc_cv.thermodynamic_integration(model, random_seed=1, progressbar=False)
    stages = res.draws["loglik"]
    assert all(ll.size == 1000 for ll in stages) and res.temperatures.size > len(stages)
    assert set(res.moments.method) <= {"mc", "zv1", "zv2", "zv3", "weighted mc", "weighted zv1", "weighted zv2",
                                       "weighted zv3"}
    truth = -0.5 * np.log(4 * np.pi)
    assert res.reliable and abs(res.log_evidence - truth) < min(0.02, 3 * res.se)
    # importance sampling from the last stage, weighed in: it agrees with TI here
    imp = res.importance
    assert imp.usable and abs(imp.log_evidence - truth) < 3 * imp.se and "second_run" not in res.seconds
    assert any("inverse-variance mean is reported" in n for n in res.notes)
    # given a ladder, the rungs are NUTS runs
    nuts = pymc_cv.thermodynamic_integration(model, 5, draws=50, tune=100, method="mc", random_seed=1,
                                             progressbar=False)
    assert [ll.size for ll in nuts.draws["loglik"]] == [100] * 5


@pytest.mark.parametrize("apart", [3.0, 0.0])
def test_smc_with_few_accepted_moves_is_checked_against_a_second_independent_run(apart, monkeypatch):
    """Where the IMH moves accept few proposals, a second SMC run checks the first: agreeing runs keep the
    result reliable; runs further apart than the threshold (0 se here, to force it) mark it unreliable."""
    import pymc as pm

    import pymc_cv
    from pymc_cv.pymc import evidence

    monkeypatch.setattr(evidence, "_LOW_ACCEPT", 1.01)  # every stage counts as low
    monkeypatch.setattr(evidence, "_RUNS_APART", apart)
    # the second run is the check where importance sampling from the particles cannot be used
    monkeypatch.setattr(evidence, "importance_evidence", lambda *a, **k: None)
    with pm.Model() as model:
        x = pm.Normal("x", 0, 1)
        pm.Normal("y", x, 1, observed=0.0)
    res = pymc_cv.thermodynamic_integration(model, draws=300, random_seed=2, progressbar=False)
    (note,) = [n for n in res.notes if "second, independent SMC run" in n]
    assert "second_run" in res.seconds
    other = float(note.split("run gave ")[1].split(" ")[0])
    truth = -0.5 * np.log(4 * np.pi)
    assert abs(other - truth) < 0.05 and other != res.log_evidence
    if apart:
        assert res.reliable and "agrees" in note
    else:
        assert not res.reliable and "disagrees" in note and "sampler='population'" in note


def _one_d_rungs(t, rng, cut=None, m=200):
    """x ~ N(0, 1), y = 0 ~ N(x, 1): rung t is N(0, 1 / (1 + t)); with ``cut`` the draws miss its tails
    beyond ``cut`` sd."""
    sd = (1 + t) ** -0.5
    xs = [rng.normal(0, s, size=(m, 1)) if cut is None
          else stats.truncnorm.rvs(-cut, cut, scale=s, size=(m, 1), random_state=rng) for s in sd]
    ll = [-0.5 * np.log(2 * np.pi) - 0.5 * x[:, 0] ** 2 for x in xs]
    return ll, xs, [-x for x in xs], [-x for x in xs]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_cvs_that_move_neighbouring_rungs_the_same_way_mark_the_result_unreliable(seed):
    """Draws that miss every rung's tails beyond 2 sd (the Stein check skipped, so that this check is the
    one that sees it): the ZV-CVs restore the tails' share of E_t[log p(y|x)] at every rung, the plain
    averages cannot, and the CV estimate is 2-3 of its se from the exact value.  Exact draws pass."""
    from pymc_cv.evidence.thermodynamic_integration import CV_DRIFT, cv_drift

    t = power_ladder(21)
    exact = -0.5 * np.log(4 * np.pi)
    good = ti_from_arrays(t, *_one_d_rungs(t, np.random.default_rng(seed)), method="cti", check_scores=False)
    assert good.reliable and abs(good.log_evidence - exact) < 3 * good.se
    assert cv_drift(good.moments)[0].max() < 2.0
    bad = ti_from_arrays(t, *_one_d_rungs(t, np.random.default_rng(seed), cut=2.0), method="cti",
                         check_scores=False)
    assert (cv_drift(bad.moments)[0] > CV_DRIFT).sum() >= 4
    assert not bad.reliable
    assert any("moved the same way from the plain averages" in n and "do not cover" in n for n in bad.notes)


def _gaussian_posterior_draws(m, rng):
    """x ~ N(0, 1), y = 0 ~ N(x, 1): posterior N(0, 1/2), log p(y) = -log(4 pi) / 2, log joint on arrays."""
    def log_joint(x):
        return stats.norm.logpdf(0.0, x[:, 0], 1.0) + stats.norm.logpdf(x[:, 0])
    return rng.normal(0, 0.5**0.5, size=(m, 1)), log_joint, -0.5 * np.log(4 * np.pi)


def test_importance_sampling_from_a_t_fitted_to_posterior_draws_recovers_a_closed_form_evidence():
    from pymc_cv.evidence import importance_evidence

    for seed in range(3):
        rng = np.random.default_rng(seed)
        draws, log_joint, truth = _gaussian_posterior_draws(500, rng)
        est = importance_evidence(log_joint, draws, rng)
        assert est.usable and est.khat < 0.5 and est.draws == 10_000
        assert 0 < est.se < 0.01 and abs(est.log_evidence - truth) < 3 * est.se


def test_importance_sampling_is_not_used_where_its_weights_have_an_infinite_variance():
    """A target (Cauchy) with tails far heavier than the Student-t(5) fitted to draws that miss them
    (standard normal draws): the weights grow as |x|^4, and k-hat says so."""
    from pymc_cv.evidence import importance_evidence

    rng = np.random.default_rng(0)
    draws = rng.normal(size=(2000, 1))
    est = importance_evidence(lambda x: stats.cauchy.logpdf(x[:, 0]), draws, rng)
    assert est.khat >= 0.5 and not est.usable
    # too few draws for a covariance: no proposal at all
    assert importance_evidence(lambda x: x[:, 0], draws[:3].repeat(2, axis=1), rng) is None


@pytest.mark.parametrize("case", ["agree", "replace", "conflict", "unusable"])
def test_importance_and_ti_are_weighed_as_the_notes_say(case):
    from pymc_cv.evidence.importance import ImportanceEstimate, weigh_importance

    rng = np.random.default_rng(0)
    t = power_ladder(21)
    xs = [rng.normal(0, (1 + ti) ** -0.5, size=(200, 1)) for ti in t]
    ll = [-0.5 * np.log(2 * np.pi) - 0.5 * x[:, 0] ** 2 for x in xs]
    res = ti_from_arrays(t, ll, xs, [-x for x in xs], [-x for x in xs], method="cti")
    ti, ti_se = res.log_evidence, res.se
    if case == "agree":
        est = ImportanceEstimate(ti + ti_se, ti_se / 2, 0.2, 10_000, True)
        assert weigh_importance(res, est) and res.reliable
        # inverse-variance mean: weights 1 and 4
        assert res.log_evidence == pytest.approx(ti + 0.8 * ti_se) and res.se == pytest.approx(ti_se / 5**0.5)
        assert "agree" in res.notes[-1] and "inverse-variance" in res.estimator
    elif case == "replace":
        res.reliable = False
        est = ImportanceEstimate(ti + 10 * ti_se, ti_se / 2, 0.3, 10_000, True)
        assert weigh_importance(res, est) and res.reliable
        assert res.log_evidence == est.log_evidence and res.se == est.se and "reported instead" in res.notes[-1]
    elif case == "conflict":
        est = ImportanceEstimate(ti + 10 * ti_se, ti_se / 2, 0.3, 10_000, True)
        assert weigh_importance(res, est) and not res.reliable
        assert res.log_evidence == ti and "nothing tells which is wrong" in res.notes[-1]
    else:
        est = ImportanceEstimate(ti + 10 * ti_se, ti_se / 2, 0.8, 10_000, False)
        assert not weigh_importance(res, est) and res.reliable and res.log_evidence == ti
        assert "not used" in res.notes[-1]
    assert res.importance is est


def test_smc_evidence_is_the_same_for_a_seed_whether_its_kernel_and_prior_sampler_are_new_or_kept():
    """The SMC kernel and the compiled prior draws are kept per model: a second call with the same seed,
    and a call on a new model object of the same definition, give the same numbers."""
    import pymc as pm

    import pymc_cv

    def build():
        with pm.Model() as model:
            mu = pm.Normal("mu", 0, 5)
            sigma = pm.HalfNormal("sigma", 2)
            pm.Normal("y", mu, sigma, observed=np.array([0.3, -1.2, 0.8, 1.9, 0.1]))
        return model

    model = build()
    first = pymc_cv.thermodynamic_integration(model, draws=300, random_seed=4, progressbar=False)
    again = pymc_cv.thermodynamic_integration(model, draws=300, random_seed=4, progressbar=False)
    fresh = pymc_cv.thermodynamic_integration(build(), draws=300, random_seed=4, progressbar=False)
    other = pymc_cv.thermodynamic_integration(model, draws=300, random_seed=5, progressbar=False)
    assert first.log_evidence == again.log_evidence == fresh.log_evidence
    np.testing.assert_array_equal(first.draws["loglik"][-1], fresh.draws["loglik"][-1])
    assert other.log_evidence != first.log_evidence


def test_rungs_sampled_together_have_the_se_of_their_weighted_sum():
    from pymc_cv.evidence import power_ladder
    from pymc_cv.evidence.quadrature import quadrature_weights
    from pymc_cv.evidence.thermodynamic_integration import shared_iteration_factor

    rng = np.random.default_rng(4)
    t = power_ladder(8)
    chain = np.repeat([0, 1], 2000)
    x = rng.normal(size=4000)
    a, _ = quadrature_weights(t, "corrected")
    # every rung the same draws: errors fully correlated, sum |a| / sqrt(sum a^2)
    same = shared_iteration_factor(t, [x + k for k in range(t.size)], [chain] * t.size)
    assert same == pytest.approx(a.sum() / np.sqrt(np.sum(a**2)), rel=1e-10)
    apart = [shared_iteration_factor(t, [rng.normal(size=4000) for _ in t], [chain] * t.size) for _ in range(20)]
    assert 0.8 < np.median(apart) < 1.2
    # rungs of other lengths are not aligned draw by draw
    assert shared_iteration_factor(t[:2], [x, x[:3000]], [chain, chain[:3000]]) == 1.0
