"""Bridge sampling from posterior draws, against closed-form evidences."""

import numpy as np
import pytest
from scipy import stats

from pymc_cv.evidence import bridge_evidence, evidence_from_draws


class LinearGaussian:
    """y ~ N(X b, s^2 I), b ~ N(0, tau^2 I), s known: the posterior is normal and p(y) is a normal density."""

    def __init__(self, seed=0, n=20, p=3, s=0.7, tau=2.0):
        rng = np.random.default_rng(seed)
        self.X = rng.normal(size=(n, p))
        self.y = self.X @ rng.normal(size=p) + s * rng.normal(size=n)
        self.s, self.tau = s, tau
        prec = np.eye(p) / tau**2 + self.X.T @ self.X / s**2
        self.cov = np.linalg.inv(prec)
        self.mean = self.cov @ self.X.T @ self.y / s**2
        marginal = s**2 * np.eye(n) + tau**2 * self.X @ self.X.T
        self.exact = stats.multivariate_normal(np.zeros(n), marginal).logpdf(self.y)

    def log_joint(self, b):
        r = self.y[None, :] - b @ self.X.T
        return (stats.norm.logpdf(r, scale=self.s).sum(axis=1) + stats.norm.logpdf(b, scale=self.tau).sum(axis=1))

    def chains(self, rng, chains=4, draws=500, rho=0.0):
        """Posterior draws as ``chains`` stationary AR(1) chains with autocorrelation ``rho``."""
        L = np.linalg.cholesky(self.cov)
        z = rng.normal(size=(chains, draws, self.mean.size))
        for t in range(1, draws):
            z[:, t] = rho * z[:, t - 1] + np.sqrt(1 - rho**2) * z[:, t]
        X = self.mean + z.reshape(-1, self.mean.size) @ L.T
        return X, np.repeat(np.arange(chains), draws)


def test_bridge_matches_a_closed_form_evidence():
    model = LinearGaussian()
    X, chain = model.chains(np.random.default_rng(1))
    est, proposal = bridge_evidence(model.log_joint, X, chain, rng=2)
    assert est.usable and est.posterior_draws == 1000 and est.proposal_draws == 4000
    assert proposal.fit.sum() == 1000 and np.all(proposal.fit.reshape(4, 500)[:, :250])
    assert abs(est.log_evidence - model.exact) < 3 * est.se and est.se < 0.01


@pytest.mark.parametrize("rho", [0.0, 0.8])
def test_bridge_se_is_calibrated(rho):
    """Over replications the estimates' spread is the se's, with independent and with autocorrelated draws
    (where the ESS, not the number of draws, sets the posterior term)."""
    model = LinearGaussian(seed=3)
    rng = np.random.default_rng(4)
    z, se = [], []
    for _ in range(60):
        X, chain = model.chains(rng, rho=rho)
        est, _ = bridge_evidence(model.log_joint, X, chain, rng=rng, proposal_draws=1000)
        z.append((est.log_evidence - model.exact) / est.se)
        se.append(est.se)
    assert 0.7 < np.std(z) < 1.4 and abs(np.mean(z)) < 0.5
    if rho:
        assert np.median(se) > 1.3 * 0.0045  # the independent draws' se at these sizes (measured: 0.0043)


def test_evidence_from_draws_reports_bridge_and_its_checks():
    model = LinearGaussian(seed=5)
    X, chain = model.chains(np.random.default_rng(6), rho=0.5)
    res = evidence_from_draws(model.log_joint, X, chain, rng=7)
    assert res.reliable and res.estimator.startswith("bridge")
    assert res.log_evidence == res.bridge.log_evidence and res.se == res.bridge.se
    assert abs(res.log_evidence - model.exact) < 3 * res.se
    assert abs(res.swapped.log_evidence - model.exact) < 3 * res.swapped.se
    assert res.importance.usable and abs(res.importance.log_evidence - model.exact) < 3 * res.importance.se
    assert res.max_rhat < 1.05 and any("agrees" in n for n in res.notes)


def test_draws_of_another_posterior_are_caught():
    """Draws of a shifted posterior bias bridge sampling; importance sampling uses them only to place its
    proposal, stays right, and is reported, flagged."""
    model = LinearGaussian(seed=8)
    X, chain = model.chains(np.random.default_rng(9))
    shifted = X + 0.5 * np.sqrt(np.diag(model.cov))
    res = evidence_from_draws(model.log_joint, shifted, chain, rng=10)
    assert abs(res.bridge.log_evidence - model.exact) > 10 * res.bridge.se
    assert not res.reliable and res.estimator == "importance sampling"
    assert abs(res.log_evidence - model.exact) < 3 * res.se
    assert any("do not follow this model's posterior" in n for n in res.notes)


def test_divergences_without_a_confirming_estimate_flag_the_result():
    model = LinearGaussian(seed=11)
    X, chain = model.chains(np.random.default_rng(12))
    clean = evidence_from_draws(model.log_joint, X, chain, rng=13, divergences=5)
    assert clean.reliable  # importance sampling (k-hat < 0.5) agrees: the draws' bias did not matter
    from pymc_cv.evidence.importance import ImportanceEstimate
    from pymc_cv.evidence.posterior_draws import _Draws, _weigh

    heavy = ImportanceEstimate(clean.importance.log_evidence, 0.01, 0.8, 10_000, False)  # k-hat 0.8: not usable
    res = _weigh(clean.bridge, clean.swapped, heavy, _Draws(clean.max_rhat, 5), {})
    assert not res.reliable and any("5 divergent transitions" in n for n in res.notes)
    assert res.log_evidence == clean.bridge.log_evidence
    with pytest.raises(ValueError, match="importance_draws=3"):
        evidence_from_draws(model.log_joint, X, chain, importance_draws=3)


def test_chains_in_different_places_flag_the_result():
    model = LinearGaussian(seed=14)
    X, chain = model.chains(np.random.default_rng(15))
    X[chain == 0] += np.sqrt(np.diag(model.cov))
    res = evidence_from_draws(model.log_joint, X, chain, rng=16)
    assert res.max_rhat > 1.05 and not res.reliable and any("R-hat" in n for n in res.notes)


def test_bad_draws_are_refused_with_what_to_do():
    model = LinearGaussian()
    X, chain = model.chains(np.random.default_rng(0), chains=2, draws=6)
    with pytest.raises(ValueError, match="needs at least 16 draws; sample more"):
        bridge_evidence(model.log_joint, X, chain)
    X, chain = model.chains(np.random.default_rng(0))
    with pytest.raises(ValueError, match="one chain index per draw"):
        bridge_evidence(model.log_joint, X, chain[:-1])
    X[:, 1] = 0.0
    with pytest.raises(ValueError, match="covariance is singular"):
        bridge_evidence(model.log_joint, X, chain)
    X[0, 0] = np.nan
    with pytest.raises(ValueError, match="non-finite"):
        bridge_evidence(model.log_joint, X, chain)


@pytest.fixture(scope="module")
def normal_mean():
    """A normal mean with known noise, sampled by PyMC: p(y) is a 3-d normal density."""
    pm = pytest.importorskip("pymc")
    y = np.array([0.3, -0.5, 1.2])
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 2)
        sigma = pm.HalfNormal("sigma", 1)  # a transformed variable, so the draws go through the forward map
        pm.Normal("y", mu, 1, observed=y)
        pm.Normal("z", 0, sigma, observed=np.array([0.5, -1.0]))
        idata = pm.sample(1000, tune=1000, chains=2, cores=1, random_seed=0, progressbar=False,
                          compute_convergence_checks=False)
    return model, idata, y


def test_pymc_bridge_sampling_matches_the_closed_form(normal_mean):
    from scipy import integrate

    import pymc_cv

    model, idata, y = normal_mean
    z = np.array([0.5, -1.0])
    # mu and sigma are independent a posteriori: the mean part in closed form, sigma's by quadrature
    mean_part = stats.multivariate_normal(np.zeros(3), np.eye(3) + 4.0).logpdf(y)
    sigma_part = np.log(integrate.quad(lambda s: stats.halfnorm.pdf(s) * np.prod(stats.norm.pdf(z, 0, s)), 0, 50,
                                       epsabs=0, epsrel=1e-12)[0])
    res = pymc_cv.bridge_sampling(idata, model, random_seed=1)
    assert res.reliable and abs(res.log_evidence - (mean_part + sigma_part)) < 3 * res.se < 0.03
    assert set(res.seconds) == {"prepare", "estimators"}


def test_pymc_bridge_sampling_refuses_draws_of_other_data(normal_mean):
    import pymc as pm

    import pymc_cv

    _, idata, y = normal_mean
    with pm.Model() as other:
        mu = pm.Normal("mu", 0, 2)
        sigma = pm.HalfNormal("sigma", 1)
        pm.Normal("y", mu, 1, observed=y + 0.5)
        pm.Normal("z", 0, sigma, observed=np.array([0.5, -1.0]))
    with pytest.raises(ValueError, match="differ from the data the draws were sampled with"):
        pymc_cv.bridge_sampling(idata, other)


def test_pymc_bridge_sampling_refuses_improper_priors():
    pm = pytest.importorskip("pymc")
    import pymc_cv

    with pm.Model() as model:
        mu = pm.Flat("mu")
        pm.Normal("y", mu, 1, observed=np.array([0.1, 0.2]))
    with pytest.raises(ValueError, match="improper priors"):
        pymc_cv.bridge_sampling(object(), model)


def test_log_joint_runs_in_numpy_and_equals_compiled_c():
    """A logistic likelihood's softplus is rewritten into numpy ufuncs: nothing runs element by element in
    Python, and the values are the C-compiled graph's."""
    pm = pytest.importorskip("pymc")
    from pymc_cv.pymc.bridge import LogJoint, _elementwise_in_python
    from pymc_cv.pymc.scores import batch_input, batched

    rng = np.random.default_rng(0)
    X = rng.normal(size=(50, 2))
    with pm.Model() as model:
        b = pm.Normal("b", 0, 2, shape=2)
        pm.Bernoulli("y", logit_p=pm.math.dot(X, b), observed=(rng.random(50) < 0.5).astype(float))
    log_joint = LogJoint(model)
    draws = rng.normal(scale=30, size=(1000, 2))  # far out, where a naive log(1 + exp(x)) overflows
    values = log_joint(draws)
    assert not _elementwise_in_python(log_joint._compiled(False))
    np.testing.assert_allclose(log_joint.with_gradient(draws)[0], values, rtol=1e-12)
    inputs = {v: batch_input(v) for v in model.value_vars}
    c_compiled = batched(list(inputs.values()), [model.logp(jacobian=True, sum=True)], inputs, {})
    assert np.all(np.isfinite(values))
    np.testing.assert_allclose(values, c_compiled(draws)[0], rtol=1e-12)


def test_pymc_bridge_sampling_refuses_draws_of_another_prior(normal_mean):
    """Same data and names, another prior: the sampler's recorded log density tells them apart."""
    import pymc as pm

    import pymc_cv
    from pymc_cv.core.density_check import DrawsModelMismatchError

    _, idata, y = normal_mean
    with pm.Model() as other:
        mu = pm.Normal("mu", 0, 5)
        sigma = pm.HalfNormal("sigma", 1)
        pm.Normal("y", mu, 1, observed=y)
        pm.Normal("z", 0, sigma, observed=np.array([0.5, -1.0]))
    with pytest.raises(DrawsModelMismatchError):
        pymc_cv.bridge_sampling(idata, other)


def _stand_in(log_evidence, se, reliable, notes=("a note",)):
    from types import SimpleNamespace

    return SimpleNamespace(log_evidence=log_evidence, se=se, reliable=reliable, notes=notes, estimator="est")


def test_choose_evidence_reports_what_passed_its_checks():
    from pymc_cv.evidence import Attempt, choose_evidence

    good, bad = _stand_in(-10.0, 0.01, True), _stand_in(-10.3, 0.02, False, ("divergences",))
    res = choose_evidence([Attempt("bridge", good)], seconds={"bridge": 0.1})
    assert (res.log_evidence, res.se, res.reliable, res.estimator) == (-10.0, 0.01, True, "bridge")
    assert res.notes == ("a note",) and res.seconds == {"bridge": 0.1}
    res = choose_evidence([Attempt("bridge", bad), Attempt("ti", _stand_in(-10.01, 0.03, True))])
    assert (res.log_evidence, res.se, res.reliable, res.estimator) == (-10.01, 0.03, True, "ti")
    assert "divergences" in res.notes[0] and "is reported" in res.notes[1]
    res = choose_evidence([Attempt("ti", None, "ScoreMismatchError: rung 9"), Attempt("bridge", good)])
    assert (res.log_evidence, res.reliable) == (-10.0, True) and "rung 9" in res.notes[0]
    res = choose_evidence([Attempt("bridge", bad), Attempt("ti", None, "ScoreMismatchError: rung 9")])
    assert (res.log_evidence, res.reliable) == (-10.3, False) and "rung 9" in res.notes[1]
    res = choose_evidence([Attempt("bridge", bad), Attempt("ti", _stand_in(-10.31, 0.01, False))])
    assert (res.log_evidence, res.reliable, res.estimator) == (-10.31, False, "ti") and "agree" in res.notes[-1]
    res = choose_evidence([Attempt("bridge", bad), Attempt("ti", _stand_in(-9.0, 0.01, False))])
    assert (res.log_evidence, res.reliable) == (-10.3, False) and "apart" in res.notes[-1]
    with pytest.raises(RuntimeError, match="no evidence estimator gave a number"):
        choose_evidence([Attempt("ti", None, "boom")])


def test_log_evidence_from_a_users_idata(normal_mean):
    import pymc_cv

    model, idata, _ = normal_mean
    res = pymc_cv.log_evidence(model, idata, random_seed=1)
    direct = pymc_cv.bridge_sampling(idata, model, random_seed=1)
    assert res.reliable and res.ti is None and set(res.seconds) == {"bridge"}
    assert res.log_evidence == direct.log_evidence and res.se == direct.se
    with pytest.raises(ValueError, match="sample_kwargs= is for pm.sample"):
        pymc_cv.log_evidence(model, idata, sample_kwargs={"draws": 10})


def test_control_variates_sharpen_the_bridge():
    """With the posterior's scores, zero-variance CVs on the bridge's two means: on a Gaussian posterior both
    integrands are smooth and the se falls (11x here), the estimate staying within it."""
    model = LinearGaussian(seed=17)
    X, chain = model.chains(np.random.default_rng(18), rho=0.5)
    scores = -np.linalg.solve(model.cov, (X - model.mean).T).T
    res = evidence_from_draws(model.log_joint, X, chain, rng=19, scores=scores)
    assert res.estimator.endswith("with control variates") and res.cv_bridge.usable
    assert res.log_evidence == res.cv_bridge.log_evidence and res.se < res.bridge.se / 5
    assert abs(res.log_evidence - model.exact) < 3 * res.se
    with pytest.raises(ValueError, match="gradient at every draw"):
        evidence_from_draws(model.log_joint, X, chain, scores=scores[:, :2])


def test_pymc_bridge_sampling_with_control_variates(normal_mean):
    from scipy import integrate

    import pymc_cv

    model, idata, y = normal_mean
    z = np.array([0.5, -1.0])
    exact = (stats.multivariate_normal(np.zeros(3), np.eye(3) + 4.0).logpdf(y)
             + np.log(integrate.quad(lambda s: stats.halfnorm.pdf(s) * np.prod(stats.norm.pdf(z, 0, s)), 0, 50,
                                     epsabs=0, epsrel=1e-12)[0]))
    plain = pymc_cv.bridge_sampling(idata, model, random_seed=1)
    res = pymc_cv.bridge_sampling(idata, model, random_seed=1, control_variates=True)
    assert plain.cv_bridge is None and res.cv_bridge is not None
    assert res.reliable and abs(res.log_evidence - exact) < 3 * res.se and res.se < plain.se
