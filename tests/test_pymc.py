"""PyMC layer: scores, summary on conjugate models sampled with NUTS, and bad input."""

import logging

import arviz as az
import numpy as np
import pymc as pm
import pytest
from conjugate_models import MODELS, sample
from scipy import stats

import pymc_cv
from pymc_cv.compat import from_dict, group, group_names, with_groups

logging.getLogger("pymc").setLevel(logging.ERROR)


@pytest.fixture(scope="module")
def hierarchical():
    y = np.array([28.0, 8.0, -3.0, 7.0, -1.0, 1.0, 18.0, 12.0])
    sigma = np.array([15.0, 10.0, 16.0, 11.0, 9.0, 11.0, 10.0, 18.0])
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 5)
        tau = pm.HalfCauchy("tau", 5)
        z = pm.Normal("z", 0, 1, shape=8)
        theta = pm.Deterministic("theta", mu + tau * z)
        pm.Normal("y", theta, sigma, observed=y)
        pm.Dirichlet("p", a=np.ones(3))  # a simplex transform too
        pm.Uniform("u", lower=mu - 1, upper=mu + 1)  # an interval whose bounds depend on mu
        pm.Normal("o", 0, 3, shape=3, transform=pm.distributions.transforms.ordered,
                  initval=np.array([-1.0, 0.0, 1.0]))
        pm.LKJCorr("corr", n=3, eta=2.0)  # packed correlations (interval transform)
        pm.LKJCholeskyCov("chol", n=2, eta=2.0, sd_dist=pm.Exponential.dist(1.0), compute_corr=False)
    # PyMC's own NUTS: nutpie (PyMC 6's default once installed) does not store the value variables
    idata = pm.sample(100, tune=200, chains=2, model=model, random_seed=3, progressbar=False, nuts_sampler="pymc",
                      compute_convergence_checks=False, idata_kwargs={"include_transformed": True})
    return model, idata


def test_scores_match_finite_differences_of_the_log_density(hierarchical):
    """Including simplex, ordered, interval and correlation-matrix transforms."""
    model, idata = hierarchical
    out = pymc_cv.compute_scores(idata, model)
    logp = model.compile_logp(jacobian=True)
    names = [v.name for v in model.value_vars]
    for c, d in [(0, 0), (1, 57), (0, 99)]:
        point = {n: np.asarray(out.unconstrained_posterior[n].values[c, d], dtype=float) for n in names}
        for n in names:
            score = np.atleast_1d(out.score[n].values[c, d])
            for i in range(score.size):
                h = 1e-5
                plus = {k: v.copy() for k, v in point.items()}
                minus = {k: v.copy() for k, v in point.items()}
                np.ravel(plus[n])[i] += h  # 0-d arrays are views through ravel
                plus[n] = plus[n] if plus[n].ndim else np.array(float(point[n]) + h)
                minus[n] = minus[n] if minus[n].ndim else np.array(float(point[n]) - h)
                if minus[n].ndim:
                    np.ravel(minus[n])[i] -= h
                fd = (logp(plus) - logp(minus)) / (2 * h)
                assert abs(score[i] - fd) < 1e-6 * max(1.0, abs(fd))


def test_transforms_computed_from_constrained_draws_equal_pymc_s(hierarchical):
    model, idata = hierarchical
    with_values = pymc_cv.compute_scores(idata, model)
    names = [v.name for v in model.value_vars]
    posterior = group(idata, "posterior").drop_vars([n for n in names if n.endswith("__")])
    constrained_only = with_groups(idata, {"posterior": posterior})
    recomputed = pymc_cv.compute_scores(constrained_only, model)
    for n in names:
        np.testing.assert_allclose(recomputed.unconstrained_posterior[n].values,
                                   with_values.unconstrained_posterior[n].values, atol=1e-10)
        np.testing.assert_allclose(recomputed.score[n].values, with_values.score[n].values, atol=1e-8)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(MODELS))
def test_summary_beats_mcmc_on_conjugate_models(name):
    model, truth = MODELS[name]()
    tv = np.concatenate([np.ravel(v) for v in truth.values()])
    cv_err, mc_err, covered = [], [], []
    for seed in range(3):
        idata = sample(model, seed)
        table = pymc_cv.summary(idata, model=model, var_names=list(truth), progressbar=False)
        cv_err += list(np.abs(table["cv_mean"].values - tv))
        mc_err += list(np.abs(table["mean"].values - tv))
        covered += list(np.abs(table["cv_mean"].values - tv) <= 1.96 * table["cv_mcse"].values)
        # the plain columns are ArviZ's own numbers
        ref = az.summary(idata, var_names=list(truth), kind="stats", round_to="none")
        np.testing.assert_allclose(table["mean"].values, ref["mean"].values, rtol=1e-12)
        np.testing.assert_allclose(table["mcse_mean"].values,
                                   az.summary(idata, var_names=list(truth), kind="diagnostics",
                                              round_to="none")["mcse_mean"].values, rtol=1e-10)
    assert np.mean(cv_err) <= 0.3 * np.mean(mc_err)
    assert np.mean(covered) >= 0.9


def test_summary_rows_are_labelled_like_arviz(hierarchical):
    model, idata = hierarchical
    table = pymc_cv.summary(idata, model=model, var_names=["mu", "theta"], method="zv1", progressbar=False)
    ref = az.summary(idata, var_names=["mu", "theta"], kind="stats")
    assert list(table.index) == list(ref.index)
    assert {"mean", "mcse_mean", "cv_mean", "cv_mcse", "variance_reduction", "cv_ess", "method"} <= set(table.columns)


def test_cv_ess_is_what_the_cv_estimate_is_worth_in_independent_draws(hierarchical):
    model, idata = hierarchical
    table = pymc_cv.summary(idata, model=model, var_names=["mu", "theta"], progressbar=False)
    sd = az.summary(idata, var_names=["mu", "theta"], kind="stats", round_to="none")["sd"]
    np.testing.assert_allclose(table["cv_ess"], sd**2 / table["cv_mcse"] ** 2, rtol=1e-6)
    # with divergent transitions (these short runs have some on one stack) the sampler's bias is reported
    # apart: twice their share times the row's sd, the same for either estimate
    allowance = 2 * np.asarray(idata.sample_stats["diverging"]).mean() * table["sd"]
    np.testing.assert_allclose(table["bias_allowance"], allowance, rtol=1e-12)
    # where the CV beat MC, the fit's se is worth more draws than ArviZ's ESS of the plain mean says
    # (the se also carries the jackknife's bias term, so a row can sit at the plain ESS: 188.6 against
    # 189.5 on the lowest stack)
    ess_mean = (sd / table["mcse_mean"]) ** 2
    helped = table["method"] != "mc"
    fit_ess = sd**2 / table["cv_mcse"] ** 2
    ratio = (fit_ess / ess_mean)[helped]
    assert helped.any() and np.median(ratio) > 1.5 and np.all(ratio > 0.5)


def test_cv_sd_of_a_beta_posterior_against_its_closed_form():
    """p | 6 of 15 ~ Beta(7, 10): the sd by CVs of p and (p - mean)^2 beats the plain sd by far and
    its se covers; the plain columns are ArviZ's."""
    a, b = 7, 10
    truth = np.sqrt(a * b / ((a + b) ** 2 * (a + b + 1)))
    with pm.Model() as model:
        p = pm.Beta("p", 1, 1)
        pm.Binomial("k", n=15, p=p, observed=6)
        idata = pm.sample(500, tune=500, chains=2, random_seed=3, progressbar=False, compute_convergence_checks=False)
    row = pymc_cv.summary(idata, ["p"], model=model, progressbar=False, ci_prob=0.9, cv_interval=True).loc["p"]
    ref = az.summary(idata, var_names=["p"], round_to="none").loc["p"]
    np.testing.assert_allclose([row["sd"], row["mcse_sd"]], [ref["sd"], ref["mcse_sd"]], rtol=1e-6)
    assert row["method_sd"] != "mc" and row["variance_reduction_sd"] > 100
    assert abs(row["cv_sd"] - truth) <= 4 * row["cv_mcse_sd"]
    assert abs(row["cv_sd"] - truth) < 0.01 * abs(row["sd"] - truth)
    # the 5% and 95% quantiles: the plain ones with ArviZ's mcse, the CV ones within 4 se
    lb, ub = pymc_cv.compat.interval_names(0.9)
    draws = np.asarray(group(idata, "posterior")["p"])
    np.testing.assert_allclose([row[lb], row[ub]], np.quantile(draws, [0.05, 0.95]))
    np.testing.assert_allclose(row[f"mcse_{lb}"], pymc_cv.compat.mcse_quantile(draws, 0.05))
    for bound, q in ((lb, 0.05), (ub, 0.95)):
        exact = stats.beta(a, b).ppf(q)
        assert row[f"cv_mcse_{bound}"] < row[f"mcse_{bound}"]
        assert abs(row[f"cv_{bound}"] - exact) <= 4 * row[f"cv_mcse_{bound}"]


def test_kind_and_round_to_lay_out_the_table_as_arviz(hierarchical):
    model, idata = hierarchical
    full = pymc_cv.summary(idata, model=model, var_names=["mu"], method="zv1", progressbar=False)
    table = pymc_cv.summary(idata, model=model, var_names=["mu"], method="zv1", progressbar=False, kind="stats",
                            round_to=2)
    lb, ub = pymc_cv.compat.interval_names(pymc_cv.compat.default_ci_prob())
    assert list(table.columns) == ["mean", "cv_mean", "sd", "cv_sd", lb, ub]
    np.testing.assert_allclose(table.loc["mu"], full.loc["mu", table.columns].astype(float).round(2))
    diag = pymc_cv.summary(idata, model=model, var_names=["mu"], method="zv1", progressbar=False, kind="diagnostics")
    assert {"mcse_mean", "cv_mcse", "ess_bulk", "r_hat", "se_reliable"} <= set(diag.columns)
    # the fit's mixing check computed the row's R-hat; the table shows that one, ArviZ's own
    mu = np.asarray(group(idata, "posterior")["mu"])
    assert diag.loc["mu", "r_hat"] == pymc_cv.compat.rhats(mu[None])[0]
    assert not {"mean", "cv_mean"} & set(diag.columns)
    # round_to=2: the standard errors to two significant digits, so that a CV's se of 1e-7 is not 0.0
    rounded = pymc_cv.summary(idata, model=model, var_names=["mu"], method="zv1", progressbar=False, round_to=2)
    for column in ("cv_mcse", "mcse_mean"):
        assert rounded.loc["mu", column] == float(f"{full.loc['mu', column]:.1e}") != 0
    assert rounded.loc["mu", "cv_mean"] == round(full.loc["mu", "cv_mean"], 2)
    from pymc_cv.summary import _significant

    np.testing.assert_array_equal(_significant([1.2345e-7, 0.0, np.nan, -0.0456], 2), [1.2e-7, 0.0, np.nan, -0.046])
    with pytest.raises(ValueError, match="kind='hdi'"):
        pymc_cv.summary(idata, model=model, kind="hdi", progressbar=False)
    with pytest.raises(TypeError, match="round_to"):
        pymc_cv.summary(idata, model=model, round_to="2", progressbar=False)
    with pytest.raises(ValueError, match="ci_kind='eti'"):
        pymc_cv.summary(idata, model=model, ci_kind="hdi", progressbar=False)
    with pytest.raises(ValueError, match="ci_prob=94"):
        pymc_cv.summary(idata, model=model, ci_prob=94, progressbar=False)


def test_default_rows_are_every_posterior_variable_like_arviz(hierarchical):
    """Untransformed free variables share their name with their value variable: still rows."""
    model, idata = hierarchical
    table = pymc_cv.summary(idata, model=model, method="zv1", progressbar=False)
    ref = az.summary(idata, kind="stats")
    # every row of az.summary except the value variables (tau_log__) that include_transformed adds
    assert list(table.index) == [i for i in ref.index if "__" not in str(i)]
    assert "mu" in table.index and not any(str(i).endswith("__") for i in table.index)


def test_integrand_with_task_dims_is_fitted_with_the_rows_or_by_vvcv(hierarchical):
    model, idata = hierarchical
    ts = np.linspace(0, 1, 4)

    def curve(post):  # (chain, draw, 4): a prediction at 4 "time points"
        mu = np.asarray(post["mu"])[..., None]
        return mu + ts * mu**2

    plain = curve(idata.posterior).mean(axis=(0, 1))
    for method, names in (("auto", {"zv1", "zv2", "zv2diag", "cf", "secf", "mc"}), ("vvcv", {"vvcv-shared", "mc"})):
        table = pymc_cv.summary(idata, model=model, integrands={"curve": curve}, method=method, progressbar=False)
        assert list(table.index) == [f"curve[{i}]" for i in range(4)]
        assert set(table["method"]) <= names
        np.testing.assert_allclose(table["mean"].values, plain)


def test_tasks_chain_gives_one_row_per_chain(hierarchical):
    model, idata = hierarchical
    table = pymc_cv.summary(idata, model=model, var_names=["mu"], tasks="chain", progressbar=False)
    assert list(table.index) == ["mu (chain 0)", "mu (chain 1)"]
    np.testing.assert_allclose(table["mean"].values, idata.posterior["mu"].mean("draw").values)


def test_discrete_free_variable_is_refused_with_a_clear_error():
    with pm.Model() as model:
        k = pm.Poisson("k", 3.0)
        pm.Normal("y", k, 1.0, observed=[2.0])
    idata = from_dict({"posterior": {"k": np.ones((2, 10))}})
    with pytest.raises(ValueError, match=r"discrete free variables \['k'\].*[Mm]arginali"):
        pymc_cv.compute_scores(idata, model)


def test_missing_groups_and_mismatched_draws_are_reported():
    model, _ = MODELS["normal_normal"]()
    with pytest.raises(ValueError, match="no 'posterior' group"):
        pymc_cv.compute_scores(from_dict({"prior": {"mu": np.zeros((1, 5))}}), model)
    with pytest.raises(ValueError, match=r"no draws of \['mu'\]"):
        pymc_cv.compute_scores(from_dict({"posterior": {"nu": np.zeros((2, 5))}}), model)
    with pytest.raises(ValueError, match="shape"):
        pymc_cv.compute_scores(from_dict({"posterior": {"mu": np.zeros((2, 5, 3))}}), model)
    with pytest.raises(ValueError, match="compute_scores"):
        pymc_cv.summary(from_dict({"posterior": {"mu": np.zeros((2, 5))}}))


def test_non_finite_scores_are_refused_not_averaged():
    model, _ = MODELS["gamma_poisson"]()
    draws = np.abs(np.random.default_rng(0).normal(3.0, 0.5, size=(2, 50)))
    draws[1, 7] = np.nan  # a corrupted draw: its score is NaN
    idata = from_dict({"posterior": {"lam": draws}})
    with pytest.warns(UserWarning, match="NaN or inf at 1 draw"):
        scored = pymc_cv.compute_scores(idata, model)
    with pytest.raises(ValueError, match="chain 1 draw 7.*divergent"):
        pymc_cv.summary(scored, progressbar=False)


def test_bad_summary_arguments():
    model, _ = MODELS["normal_normal"]()
    idata = from_dict({"posterior": {"mu": np.random.default_rng(0).normal(size=(2, 30))}})
    with pytest.raises(ValueError, match=r"var_names \['nope'\]"):
        pymc_cv.summary(idata, model=model, var_names=["nope"], progressbar=False)
    with pytest.raises(ValueError, match="method="):
        pymc_cv.summary(idata, model=model, method="magic", progressbar=False)
    with pytest.raises(ValueError, match=r"must return \(chain, draw"):
        pymc_cv.summary(idata, model=model, integrands={"f": lambda post: np.ones(3)}, progressbar=False)
    with pytest.raises(TypeError, match="unknown options"):
        pymc_cv.summary(idata, model=model, colour="red", progressbar=False)
    for own in ("check_mixing", "tune_columns", "residual_khat"):
        with pytest.raises(TypeError, match=f"sets \\['{own}'\\] itself"):
            pymc_cv.summary(idata, model=model, progressbar=False, **{own: False})


def test_infinite_unconstrained_draw_is_reported():
    model, _ = MODELS["gamma_poisson"]()
    draws = np.abs(np.random.default_rng(0).normal(3.0, 0.5, size=(2, 50)))
    draws[0, 3] = 0.0  # log(0) = -inf on the unconstrained space (its score stays finite)
    scored = pymc_cv.compute_scores(from_dict({"posterior": {"lam": draws}}), model)
    with pytest.raises(ValueError, match="chain 0 draw 3"):
        pymc_cv.summary(scored, progressbar=False)


def test_compute_scores_follows_pymc_conventions_and_keeps_dims():
    with pm.Model(coords={"school": ["a", "b", "c"]}) as model:
        mu = pm.Normal("mu", 0, 5, dims="school")
        s = pm.HalfNormal("s", 1)
        pm.Normal("y", mu, s, observed=[1.0, 2.0, 3.0], dims="school")
        idata = pm.sample(100, tune=100, chains=2, progressbar=False, random_seed=0,
                          compute_convergence_checks=False)
        kept = pymc_cv.compute_scores(idata, extend_inferencedata=False, progressbar=False)  # model from context
        assert "score" not in group_names(idata) and "score" in group_names(kept)
        out = pymc_cv.compute_scores(idata, progressbar=False)
    assert out is idata and "score" in group_names(idata)
    assert idata.score["mu"].dims == ("chain", "draw", "school")
    assert list(idata.score["mu"].coords["school"].values) == ["a", "b", "c"]
    np.testing.assert_array_equal(kept.score["mu"].values, idata.score["mu"].values)
    table, results = pymc_cv.summary(idata, return_results=True, progressbar=False)
    assert list(table.index) == ["mu[a]", "mu[b]", "mu[c]", "s"]
    res, j = results["mu[b]"]
    frame = res.to_dataframe()
    assert frame.loc[j, "estimate"] == pytest.approx(table.loc["mu[b]", "cv_mean"])
    assert res.to_xarray()["se"].dims == ("integrand",)


def test_repeated_metropolis_draws_are_evaluated_once_and_scored_exactly():
    """Random-walk Metropolis repeats most draws: the density and gradient are evaluated once per
    distinct draw, and every draw still gets its own exact score (conjugate normal, closed form)."""
    from pymc_cv.pymc.scores import _cached_score_fn
    from pymc_cv.pymc.tempering import loglik_terms

    y = np.array([0.3, 1.1, 2.0, 0.7])
    with pm.Model() as model:
        x = pm.Normal("x", 0, 10)
        pm.Normal("y", x, 1, observed=y)
        idata = pm.sample(300, tune=100, chains=2, step=pm.Metropolis(), random_seed=2, progressbar=False,
                          compute_convergence_checks=False)
    draws = idata.posterior["x"].values.ravel()
    distinct = np.unique(draws).size
    assert distinct < 0.8 * draws.size  # the case: most draws repeat
    fn = _cached_score_fn(model, {}, model.eval_rv_shapes())
    calls = []
    inner = fn._fn
    fn._fn = lambda point: calls.append(1) or inner(point)
    try:
        out = pymc_cv.compute_scores(idata, model, extend_inferencedata=False, progressbar=False)
    finally:
        fn._fn = inner
    assert len(calls) == distinct
    exact = np.sum(y) - y.size * draws - draws / 100
    np.testing.assert_allclose(out.score["x"].values.ravel(), exact, rtol=1e-10, atol=1e-10)
    loglik, g_lik, g_prior = loglik_terms(model)(draws)
    np.testing.assert_allclose(loglik, stats.norm.logpdf(y[:, None], draws, 1).sum(axis=0), rtol=1e-10)
    np.testing.assert_allclose(g_lik[:, 0], np.sum(y) - y.size * draws, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(g_prior[:, 0], -draws / 100, rtol=1e-10, atol=1e-12)
