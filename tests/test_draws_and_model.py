"""The draws and the model must be the pair that was sampled, and the table must say when the
chains do not describe the posterior: Bambi's rewritten intercept, another model under the same
names, chains stuck in different modes, few divergences, transforms that change a variable's
length, float32 models, hyperparameters outside the likelihood, and arguments nothing uses."""

import warnings

import numpy as np
import pytest
from scipy import stats

import pymc_cv
from pymc_cv.convergence import divergence_note, row_convergence
from pymc_cv.core.density_check import DrawsModelMismatchError, check_recorded_logp

pm = pytest.importorskip("pymc")


def _sample(model, draws=500, chains=2, seed=1, **kwargs):
    with model:
        return pm.sample(draws, tune=500, chains=chains, progressbar=False, random_seed=seed,
                         compute_convergence_checks=False, **kwargs)


@pytest.fixture(scope="module")
def normal_model():
    y = np.random.default_rng(0).normal(1.0, 2.0, 50)
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 10)
        s = pm.HalfNormal("s", 5)
        pm.Normal("y", mu, s, observed=y)
    return model, _sample(model), y


# -- the sampler's record of the log density ---------------------------------------------------

def test_the_recorded_log_density_allows_a_constant_per_chain_and_nothing_else():
    lp = np.random.default_rng(0).normal(-500, 3, size=(4, 200))
    assert check_recorded_logp(lp + np.array([[1.0], [2.0], [3.0], [4.0]]), lp).ok
    assert check_recorded_logp(lp + 1e-9 * lp, lp).ok  # round-off
    assert check_recorded_logp(lp + 0.05 * (lp + 500), lp).bad > 100
    shifted = lp.copy()
    shifted[2, 17] += 0.5  # one draw rewritten
    assert check_recorded_logp(shifted, lp).bad == 1
    assert check_recorded_logp(lp.astype(np.float32) + 0.01, lp, itemsize=4).ok


def test_another_prior_under_the_same_names_is_an_error(normal_model):
    model, idata, y = normal_model
    with pm.Model() as other:  # issue 28, case 2: the "mild" Stein note let this through
        mu = pm.Normal("mu", 0, 1)
        s = pm.HalfNormal("s", 5)
        pm.Normal("y", mu, s, observed=y)
    with pytest.raises(DrawsModelMismatchError, match=r"another one with the same variable names"):
        pymc_cv.summary(idata, model=other, progressbar=False)
    table = pymc_cv.summary(idata, model=model, progressbar=False)
    # the joint second-order test widens the se below p = 0.05, by design in about 5% of clean runs (nutpie's
    # draws on PyMC 6: p = 0.018 here); it flags nothing
    assert table["se_reliable"].all()
    assert all("second-order Stein identities by more than chance" in n for n in table.attrs["notes"])


def _posterior_only(idata):
    from pymc_cv import compat

    return compat.from_dict({"posterior": {k: np.asarray(v) for k, v in compat.group(idata, "posterior").items()}})


def test_draws_whose_model_cannot_be_checked_are_flagged(normal_model):
    """Without the sampler's per-draw log density (a posterior-only idata, pm.sample_smc) another prior under
    the same names moves every CV estimate by thousands of its se, and nothing in the draws can tell: every row
    is flagged, with a note that says why; check_scores=False (the user vouches for the pairing) is not."""
    model, idata, y = normal_model
    with pm.Model() as other:
        mu = pm.Normal("mu", 0, 5)
        s = pm.HalfNormal("s", 5)
        pm.Normal("y", mu, s, observed=y)
    with pytest.warns(UserWarning, match="could not be checked"):
        table = pymc_cv.summary(_posterior_only(idata), model=other, progressbar=False)
    assert not table["se_reliable"].any()
    assert any("no per-draw log density" in n and "no observed_data or constant_data" in n
               for n in table.attrs["notes"])
    with model:
        smc = pm.sample_smc(500, chains=2, random_seed=1, progressbar=False, compute_convergence_checks=False)
    table = pymc_cv.summary(smc, model=other, progressbar=False)
    assert not table["se_reliable"].any()
    assert any("data variables the idata stores match" in n for n in table.attrs["notes"])
    vouched = pymc_cv.summary(_posterior_only(idata), model=model, progressbar=False, check_scores=False)
    assert not any("could not be checked" in n for n in vouched.attrs["notes"])


def test_rewritten_draws_are_an_error_that_names_bambi(normal_model):
    model, idata, _ = normal_model
    moved = idata.copy()
    moved.posterior["mu"] = moved.posterior["mu"] + 0.1 * moved.posterior["s"]
    with pytest.raises(DrawsModelMismatchError, match="Bambi"):
        pymc_cv.compute_scores(moved, model, progressbar=False)


def test_draws_with_the_dims_of_a_variable_in_another_order_get_the_same_scores():
    # Bambi stores a (group, category) variable as (category, group)
    coords = {"g": ["g0", "g1", "g2"], "c": ["a", "b"]}
    with pm.Model(coords=coords) as model:
        z = pm.Normal("z", np.arange(6.0).reshape(3, 2), 1.0, dims=("g", "c"))
        pm.Normal("y", z.sum(), 1.0, observed=0.5)
    idata = _sample(model, draws=100)
    swapped = idata.copy()
    swapped.posterior["z"] = idata.posterior["z"].transpose("chain", "draw", "c", "g")
    want = pymc_cv.compute_scores(idata, model, extend_inferencedata=False, progressbar=False)
    got = pymc_cv.compute_scores(swapped, model, extend_inferencedata=False, progressbar=False)
    np.testing.assert_array_equal(got["score"]["z"].values, want["score"]["z"].values)
    # the scores themselves: -(z - mean) - (sum z - 0.5) for every entry
    z = idata.posterior["z"].values
    exact = -(z - np.arange(6.0).reshape(3, 2)) - (z.sum(axis=(2, 3)) - 0.5)[:, :, None, None]
    np.testing.assert_allclose(got["score"]["z"].values, exact, rtol=1e-10, atol=1e-10)


def test_model_is_not_silently_ignored_when_the_scores_exist(normal_model):
    model, idata, _ = normal_model
    scored = pymc_cv.compute_scores(idata, model, extend_inferencedata=False, progressbar=False)
    with pm.Model() as other:
        pm.Normal("nu", 0, 1)
    with pytest.raises(ValueError, match=r"scores of the variables \['mu', 's_log__'\], but model= has \['nu'\]"):
        pymc_cv.summary(scored, model=other, var_names=["mu"], progressbar=False)
    with pytest.warns(UserWarning, match="compile_kwargs= not used"):
        pymc_cv.summary(scored, model=model, var_names=["mu"], progressbar=False, compile_kwargs={})


@pytest.mark.parametrize("sampler", ["pymc", "nutpie", "numpyro"])
def test_every_sampler_users_run_gives_exact_means_within_their_se(sampler):
    # each records the log density under its own name and sign (nutpie "logp"; PyMC's NumPyro
    # wrapper calls the potential energy, -log p, "lp"), which the draws-and-model check must read
    if sampler != "pymc":
        pytest.importorskip(sampler)
    y = np.random.default_rng(0).normal(1.0, 2.0, 40)
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 10)
        pm.HalfNormal("s", 5)  # no data: its prior, E[s] = 5 sqrt(2 / pi)
        pm.Normal("y", mu, 2.0, observed=y)
    idata = _sample(model, nuts_sampler=sampler)
    table = pymc_cv.summary(idata, model=model, progressbar=False)
    exact = {"mu": (y.sum() / 4) / (y.size / 4 + 1 / 100), "s": 5 * np.sqrt(2 / np.pi)}
    for row, value in exact.items():
        assert abs(table.loc[row, "cv_mean"] - value) <= 3 * table.loc[row, "cv_mcse"] + 1e-9, row
    assert table.loc["mu", "variance_reduction"] > 100


# -- Bambi -------------------------------------------------------------------------------------

def _grid_posterior_means(model, post, functions, points=61):
    """Posterior expectations by quadrature on a grid over the value variables (scalar each;
    ``post`` holds their draws, for the grid's extent), with the model's own log density (Jacobian
    included): a reference independent of the draws' noise."""
    from pymc_cv.pymc.scores import batch_input, batched

    inputs = {v: batch_input(v) for v in model.value_vars}
    fn = batched([inputs[v] for v in model.value_vars], [model.logp(jacobian=True)], inputs, {})
    names = [v.name for v in model.value_vars]
    draws = np.column_stack([np.asarray(post[n]).ravel() for n in names])
    axes = [np.linspace(m - 8 * s, m + 8 * s, points) for m, s in zip(draws.mean(0), draws.std(0))]
    grid = np.stack(np.meshgrid(*axes, indexing="ij"), -1).reshape(-1, len(names))
    lp = np.concatenate([np.asarray(fn(*[grid[i:i + 50_000, j] for j in range(len(names))])[0])
                         for i in range(0, len(grid), 50_000)])
    w = np.exp(lp - lp.max())
    w /= w.sum()
    point = {n: grid[:, j] for j, n in enumerate(names)}
    return {k: float(w @ f(point)) for k, f in functions.items()}


@pytest.mark.parametrize("family", ["bernoulli", "gaussian"])
def test_bambi_default_models_are_right_within_3_se(family):
    bmb = pytest.importorskip("bambi")
    import pandas as pd

    rng = np.random.default_rng(3)
    n = 80
    df = pd.DataFrame({"x": rng.normal(2.0, 1.0, n)})  # a predictor far from 0: centring matters
    eta = -0.4 + 0.8 * df.x
    df["y"] = rng.binomial(1, 1 / (1 + np.exp(-eta))) if family == "bernoulli" else eta + rng.normal(0, 1, n)
    m = bmb.Model("y ~ x", df, family=family)
    idata = m.fit(draws=500, tune=500, chains=2, random_seed=1, progressbar=False)
    # the PyMC model behind it, with the draws Bambi rewrote: the record says they were not sampled
    with pytest.raises(DrawsModelMismatchError, match="pass the Bambi model itself"):
        pymc_cv.summary(idata, model=m.backend.model, progressbar=False)
    table = pymc_cv.summary(idata, model=m, progressbar=False)
    xbar = df.x.mean()
    scored = pymc_cv.compute_scores(idata, m, extend_inferencedata=False, progressbar=False)
    truth = _grid_posterior_means(
        m.backend.model, scored["unconstrained_posterior"],
        {"Intercept": lambda p: p["Intercept"] - xbar * p["x"], "x": lambda p: p["x"]})
    for row, value in truth.items():
        err = abs(table.loc[row, "cv_mean"] - value)
        # the se may be at round-off (CV exact for linear functions): allow a tolerance of
        # 1e-6 of the posterior sd, the quadrature's own accuracy
        assert err <= 3 * table.loc[row, "cv_mcse"] + 1e-6 * np.std(np.asarray(idata.posterior[row])), (row, err)
        assert err < abs(table.loc[row, "mean"] - value) + 1e-9
    assert np.asarray(idata.posterior["Intercept"]).mean() == table.loc["Intercept", "mean"]  # left as it was


def test_bambi_categorical_response_gets_each_category_intercept_back():
    # a response with categories has an intercept and slopes per category, each uncentred by fit
    bmb = pytest.importorskip("bambi")
    import pandas as pd

    rng = np.random.default_rng(4)
    n = 120
    df = pd.DataFrame({"x": rng.normal(1.5, 1.0, n)})  # far from 0: the centring moves the intercepts
    level = np.clip(np.round(0.3 + 0.6 * df.x + rng.logistic(size=n)).astype(int), 0, 2)
    df["y"] = pd.Categorical(np.array(["a", "b", "c"])[level])
    m = bmb.Model("y ~ x", df, family="categorical")
    # the unit of work users sample: with 2 x 400 draws R-hat (1.012) or the second-order Stein check
    # (largest |z| 3.6 against 3.4) flagged a row in 3 of 3 seeds on PyMC 6, none of 4 seeds at 4 x 1,000
    idata = m.fit(draws=1000, tune=1000, chains=4, random_seed=1, progressbar=False)
    # the density check tells the points the sampler visited: the draws as fit left them are not
    with pytest.raises(DrawsModelMismatchError, match="Bambi"):
        pymc_cv.compute_scores(idata, m.backend.model, extend_inferencedata=False, progressbar=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        table = pymc_cv.summary(idata, model=m, progressbar=False)
    assert len(table) == 4 and table["se_reliable"].all()
    assert np.all(np.abs(table["cv_mean"] - table["mean"]) <= 4 * table["mcse_mean"])
    assert np.all(table["variance_reduction"] > 10)


def test_bambi_group_specific_terms_fitted_without_their_offsets():
    # Bambi's fit drops the offsets of its non-centred terms (omit_offsets=True, the default)
    bmb = pytest.importorskip("bambi")
    import pandas as pd

    from pymc_cv.pymc.bambi import sampled_posterior

    rng = np.random.default_rng(5)
    n = 60
    df = pd.DataFrame({"x": rng.normal(1.0, 1.0, n), "g": rng.integers(0, 4, n).astype(str)})
    df["y"] = 0.5 * df.x + rng.normal(0, 0.8, 4)[df.g.astype(int)] + rng.normal(0, 1, n)
    m = bmb.Model("y ~ x + (1|g)", df)
    kept = m.fit(draws=300, tune=300, chains=2, random_seed=2, progressbar=False, omit_offsets=False)
    post = pymc_cv.compat.group(kept, "posterior")
    offsets = [v for v in post.data_vars if v.endswith("_offset")]
    assert offsets == ["1|g_offset"]
    # what fit returns by default
    dropped = pymc_cv.compat.with_groups(kept, {"posterior": post.drop_vars(offsets)})

    restored = sampled_posterior(m, pymc_cv.compat.group(dropped, "posterior"))
    np.testing.assert_allclose(restored["1|g_offset"].values, post["1|g_offset"].values, rtol=1e-12)
    rows = [v for v in post.data_vars if v not in offsets]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        table = pymc_cv.summary(dropped, model=m, progressbar=False)
        reference = pymc_cv.summary(kept, var_names=rows, model=m, progressbar=False)
    assert list(table.index) == list(reference.index)
    # the same draws and scores to round-off, the same table up to where the kernel tuning's optimiser
    # stops (1e-8 of the estimates on PyMC 5, 2e-5 on PyMC 6): a wrong offset would fail the density check
    assert np.all(np.abs(table["cv_mean"] - reference["cv_mean"]) <= 0.1 * reference["cv_mcse"])
    np.testing.assert_allclose(table["cv_mcse"], reference["cv_mcse"], rtol=0.1)
    # the PyMC model behind it cannot tell what is missing from what Bambi left out: the error says
    with pytest.raises(ValueError, match="omit_offsets=False"):
        pymc_cv.compute_scores(dropped, m.backend.model, extend_inferencedata=False, progressbar=False)


# -- convergence -------------------------------------------------------------------------------

def test_chains_stuck_in_different_modes_are_flagged_and_their_se_reaches_the_spread():
    # issue 28, case 3: cv_mean 3.7 +- 0.16 against a truth of 1.6 (13 se), unflagged
    with pm.Model() as model:
        pm.NormalMixture("x", w=[0.3, 0.7], mu=[-4, 4], sigma=[1, 1])
    idata = _sample(model, draws=1000, chains=4, initvals=[{"x": -4.0}, {"x": 4.0}, {"x": 4.0}, {"x": 4.0}])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        table = pymc_cv.summary(idata, model=model, progressbar=False,
                                integrands={"p": lambda post: (np.asarray(post["x"]) > 0).astype(float)},
                                var_names=["x"])
    truth = {"x": 0.3 * -4 + 0.7 * 4, "p": 0.7}
    for row, value in truth.items():
        err = abs(table.loc[row, "cv_mean"] - value)
        assert not table.loc[row, "se_reliable"], row
        assert any(n.startswith(f"{row}: R-hat") for n in table.attrs["notes"]), table.attrs["notes"]
        assert err <= 3 * table.loc[row, "cv_mcse"] or not table.loc[row, "se_reliable"]


def test_the_chains_spread_sets_the_se_only_where_they_disagree():
    rng = np.random.default_rng(0)
    values = rng.normal(size=(2, 4, 500))
    resid = 0.01 * rng.normal(size=(2, 4, 500))
    resid[1] += np.array([0.0, 0.0, 0.0, 0.3])[:, None]  # one chain's estimate off by 30 residual sd
    conv = row_convergence(values, resid)
    assert np.isnan(conv.chain_spread_se[0]) and conv.notes[0] == ""
    assert conv.chain_spread_se[1] == pytest.approx(np.std(resid[1].mean(axis=1), ddof=1) / 2)
    assert "disagree" in conv.notes[1]


def test_the_chains_spread_is_judged_at_their_own_ess():
    # AR(1) residuals (ESS about a twentieth of the draws): offsets that look like disagreement at
    # ESS = draws are chance at the chains' ESS; larger ones are not
    rng = np.random.default_rng(3)
    rows, n_chain, n_draw = 6, 4, 1000
    e = rng.normal(size=(rows, n_chain, n_draw))
    resid = np.empty_like(e)
    resid[..., 0] = e[..., 0]
    for t in range(1, n_draw):
        resid[..., t] = 0.9 * resid[..., t - 1] + e[..., t]
    resid += np.array([0.0, 0.4, 0.8, 1.2, 6.0, 10.0])[:, None, None] * np.array([0, 0, 1, 1])[None, :, None]
    conv = row_convergence(rng.normal(size=resid.shape), resid)
    ess = np.clip(pymc_cv.compat.ess_mean(resid.reshape(-1, 1, n_draw)).reshape(rows, n_chain), 1, n_draw)
    w = ess / resid.var(axis=2, ddof=1)
    means = resid.mean(axis=2)
    pooled = np.sum(w * means, axis=1) / np.sum(w, axis=1)
    q = np.sum(w * (means - pooled[:, None]) ** 2, axis=1)
    disagree = q > stats.chi2.isf(1e-3, n_chain - 1)
    assert list(disagree) == [False, False, False, False, True, True]
    np.testing.assert_allclose(conv.chain_spread_se[disagree], means[disagree].std(axis=1, ddof=1) / 2)
    assert np.isnan(conv.chain_spread_se[~disagree]).all()


def test_few_divergences_flag_only_the_rows_where_they_sit():
    note, wide = divergence_note(1, 4000)  # posteriordb's eight schools: 1 of 4,000
    assert not wide and "1 divergent" in note
    assert divergence_note(31, 600)[1]
    rng = np.random.default_rng(1)
    values = rng.normal(size=(2, 4, 1000))
    divergent = np.zeros((4, 1000), dtype=bool)
    order = np.argsort(values[0].ravel())
    divergent.ravel()[order[:10]] = True  # at the 10 lowest values of row 0, anywhere in row 1
    conv = row_convergence(values, 0.1 * values, divergent)
    assert "low values" in conv.notes[0] and conv.notes[1] == ""


# -- crashes -----------------------------------------------------------------------------------

def test_transformed_variables_with_dims_of_another_length():
    # issue 28, case 5: a simplex of 3 has 2 free coordinates, a zero-sum vector of 4 has 3
    with pm.Model(coords={"cat": ["a", "b", "c"], "g": list("wxyz")}) as model:
        p = pm.Dirichlet("p", a=np.ones(3), dims="cat")
        z = pm.ZeroSumNormal("z", dims="g")
        pm.Multinomial("k", n=30, p=p, observed=[5, 10, 15])
        pm.Normal("obs", z, 1, observed=[0.5, -0.2, 0.1, -0.4], dims="g")
    idata = _sample(model)
    table = pymc_cv.summary(idata, model=model, progressbar=False)
    # E[p] = (1 + k) / (3 + 30) exactly (Dirichlet-multinomial conjugacy)
    exact = (1 + np.array([5, 10, 15])) / 33
    got = table.loc[["p[a]", "p[b]", "p[c]"], "cv_mean"].to_numpy()
    se = table.loc[["p[a]", "p[b]", "p[c]"], "cv_mcse"].to_numpy()
    assert np.all(np.abs(got - exact) <= 4 * se + 1e-9)


def test_a_float32_model_sampled_by_nutpie():
    # issue 28, case 6: nutpie's float64 constrained draws went into the float32 transform uncast
    pytest.importorskip("nutpie")
    import pytensor

    y = np.random.default_rng(0).normal(1.0, 2.0, 30)
    with pytensor.config.change_flags(floatX="float32"):
        with pm.Model() as model:
            mu = pm.Normal("mu", 0, 10)
            s = pm.HalfNormal("s", 5)
            pm.Normal("y", mu, s, observed=y)
        idata = _sample(model, nuts_sampler="nutpie")
        table = pymc_cv.summary(idata, model=model, progressbar=False)
    assert table["se_reliable"].all()
    # float32 scores: the CV is right to float32 precision, not to the float64 round-off
    assert np.all(np.abs(table["cv_mean"] - table["mean"]) <= 4 * table["mcse_mean"])


def test_hyperparameters_outside_the_likelihood_have_zero_likelihood_gradients():
    from pymc_cv.pymc.tempering import loglik_terms

    rng = np.random.default_rng(0)
    g = np.repeat(np.arange(5), 4)
    x = rng.normal(size=20)
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 2)
        sa = pm.HalfNormal("sa", 1)
        a = pm.Normal("a", mu, sa, shape=5)
        b = pm.Normal("b", 0, 1)
        pm.Normal("y", a[g] + b * x, 1, observed=rng.normal(size=20))
    point = model.initial_point()
    ll, g_lik, g_prior = loglik_terms(model)(*[np.asarray(point[v.name])[None] for v in model.value_vars])
    names = [v.name for v in model.value_vars]
    assert names[:2] == ["mu", "sa_log__"]
    assert np.all(g_lik[0, :2] == 0.0) and np.all(g_lik[0, 2:] != 0.0)
    # grad log p(x) of mu at the initial point: -mu / 4 + sum(a - mu) / sa^2 = 0 at mu = a = 0
    assert g_prior[0, 0] == pytest.approx(0.0)


# -- arguments nothing uses --------------------------------------------------------------------

def test_silent_arguments_are_errors_or_warnings(normal_model):
    model, idata, _ = normal_model
    scored = pymc_cv.compute_scores(idata, model, extend_inferencedata=False, progressbar=False)

    def run(**kwargs):
        return pymc_cv.summary(scored, progressbar=False, **kwargs)

    with pytest.raises(ValueError, match="kernel='rbf'"):
        run(kernel="rbf")
    with pytest.raises(ValueError, match="random_seed='abc'"):
        run(random_seed="abc")
    with pytest.raises(ValueError, match="complex"):
        run(integrands={"c": lambda post: np.asarray(post["mu"]) * (1 + 1j)})
    with pytest.raises(ValueError, match=r"var_names=\[\] selects nothing"):
        run(var_names=[])
    assert list(run(var_names=["~s"]).index) == ["mu"]
    with pytest.warns(UserWarning, match="method='vvcv' fits task groups"):
        run(var_names=["mu"], method="vvcv")
    with pytest.warns(UserWarning, match="B= is the task matrix"):
        run(var_names=["mu"], B="identity")
    with pytest.raises(TypeError, match="pm.to_inference_data"):
        with model:
            trace = pm.sample(20, tune=20, chains=1, progressbar=False, return_inferencedata=False,
                              compute_convergence_checks=False)
        pymc_cv.summary(trace, progressbar=False)


@pytest.mark.slow
def test_thermodynamic_integration_with_a_hyperparameter_outside_the_likelihood():
    # issue 28, case 7: DisconnectedInputError from the likelihood's gradient w.r.t. mu.  A linear
    # Gaussian hierarchy has an exact evidence: y ~ N(0, J + 2 I) (J the matrix of ones)
    from scipy import stats

    y = np.array([0.8, -0.3, 1.5])
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 1)
        a = pm.Normal("a", mu, 1, shape=3)
        pm.Normal("y", a, 1, observed=y)
    exact = stats.multivariate_normal(np.zeros(3), np.ones((3, 3)) + 2 * np.eye(3)).logpdf(y)
    res = pymc_cv.thermodynamic_integration(model, 11, draws=300, tune=300, chains=2, method="cf", random_seed=2,
                                            progressbar=False)
    assert abs(res.log_evidence - exact) <= max(4 * res.se, 0.05), (res.log_evidence, res.se, exact)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [2, 5, 7])
def test_lkj_cholesky_prior_results_are_within_3_se_or_flagged(seed):
    """Issue 28, case 4: LKJCholeskyCov (n = 2, eta = 2, Exponential(1) sds), prior only, where E[r^2]
    = 1/5 and E[L11] = 1.  NUTS under-represents the funnel of the Cholesky factor; the ZV-2 estimate
    of E[r^2] was 5.4-7.2 se off on these seeds, and on seed 7 nothing said so.  The second-order
    Stein identities of the draws fail there (largest |z| 3.6-6.5); on CI's CPU, seed 5's draws passed
    them and the estimate was 3.6 se off, which the se widened below p = 0.05 is there for."""
    with pm.Model() as model:
        pm.LKJCholeskyCov("L", n=2, eta=2.0, sd_dist=pm.Exponential.dist(1.0), compute_corr=True)
        idata = pm.sample(1000, tune=1000, chains=4, random_seed=seed, progressbar=False, nuts_sampler="pymc",
                          compute_convergence_checks=False)
    integrands = {"r2": lambda p: np.asarray(p["L_corr"])[..., 0, 1] ** 2, "L11": lambda p: np.asarray(p["L"])[..., 0]}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        table = pymc_cv.summary(idata, model=model, integrands=integrands, progressbar=False)
    for row, truth in (("r2", 0.2), ("L11", 1.0)):
        z = (table.loc[row, "cv_mean"] - truth) / table.loc[row, "cv_mcse"]
        assert abs(z) <= 3 or not table.loc[row, "se_reliable"], (row, z, table.loc[row, "method"])


def test_second_order_identities_jointly_see_what_no_single_one_shows():
    """Draws with a correlation of 0.035 between every pair of coordinates, for scores of N(0, I): the
    first-order identities hold (unit variances), and each Stein image of x_i x_j has mean -0.07, about
    2 of its se on 4,000 draws, below the Bonferroni level of the 20 features one at a time (so in 10 of
    40 seeds); the ten together are beyond chance (in 5 of those 10 at the level 1e-3)."""
    from pymc_cv.core.score_check import stein_check

    rho = 0.035
    x = np.random.default_rng(34).normal(size=(4000, 5)) @ np.linalg.cholesky((1 - rho) * np.eye(5) + rho).T
    x /= x.std(axis=0)
    chk = stein_check(x, -x, second_order=True)
    assert np.all(np.abs(chk.z) < chk.threshold)
    assert chk.second_order_z < chk.second_order_threshold
    assert chk.second_order_p < 1e-4 and chk.level == "mild"
    assert "jointly p = " in chk.message()
    for seed in range(5):  # independent coordinates: no joint deviation
        z = np.random.default_rng(seed).normal(size=(4000, 5))
        assert stein_check(z, -z, second_order=True).second_order_p > 1e-3


def test_second_order_stein_identities_hold_on_exact_draws_and_fail_without_a_region():
    """The second-order check passes on independent draws of N(0, I) and fails on draws that lack the
    region where x0 x1 > 1 (the image of x0 x1 then has mean far from 0); the note says which check."""
    from pymc_cv.core.score_check import ScoreCheck, stein_check

    rng = np.random.default_rng(3)
    x = rng.normal(size=(4000, 3))
    exact = stein_check(x, -x, second_order=True)
    assert exact.level == "ok" and exact.second_order_z < exact.second_order_threshold
    cut = x[x[:, 0] * x[:, 1] < 1.0]
    chk = stein_check(cut, -cut, second_order=True)
    assert chk.level == "mild" and chk.second_order_z > 2 * chk.second_order_threshold
    only_second = ScoreCheck(np.zeros(3), -np.ones(3), np.zeros((2, 3)), 3.0, "mild", 5.0, 3.3)
    assert "second-order Stein identities" in only_second.message()


def test_draws_off_on_the_second_order_identities_by_more_than_chance_widen_the_cv_se():
    """Four AR(1) chains (0.5) of 1,000 draws with a correlation of 0.03 between coordinates, for scores
    of N(0, I): each check passes, the joint test of the second-order identities comes out at p = 0.028,
    and every CV se is widened by sqrt(statistic / degrees of freedom), its variance reduction as many
    times squared smaller, the row still reliable and the note saying so; the same draws taken as
    independent ones are not widened."""
    from pymc_cv.core.score_check import ScoreCheck, stein_check

    rng = np.random.default_rng(4)
    e = rng.normal(size=(4, 1000, 3)) @ np.linalg.cholesky(0.97 * np.eye(3) + 0.03).T
    x = np.empty_like(e)
    x[:, 0] = e[:, 0]
    for t in range(1, 1000):
        x[:, t] = 0.5 * x[:, t - 1] + np.sqrt(0.75) * e[:, t]
    x = x.reshape(4000, 3)
    x /= x.std(axis=0)
    chain = np.repeat(np.arange(4), 1000)
    chk = stein_check(x, -x, chain=chain, second_order=True)
    assert chk.level == "ok" and 0.001 < chk.second_order_p < 0.05
    assert chk.se_factor == pytest.approx(np.sqrt(chk.second_order_dispersion)) and chk.se_factor > 1.2
    f = np.column_stack([x[:, 0] ** 2 + x[:, 1], np.sin(x[:, 2])])
    widened = pymc_cv.cv_estimate(f, x, -x, chain=chain, method="zv2")
    plain = pymc_cv.cv_estimate(f, x, -x, chain=chain, method="zv2", check_scores=False)
    np.testing.assert_allclose(widened.se, plain.se * chk.se_factor)
    np.testing.assert_allclose(widened.variance_reduction, plain.variance_reduction / chk.se_factor**2)
    np.testing.assert_allclose(widened.estimate, plain.estimate)
    assert np.all(widened.se_reliable) and "widened" in widened.notes[0]
    assert stein_check(x, -x, second_order=True).se_factor == 1.0
    from pymc_cv.compat import from_dict
    from pymc_cv.idata_groups import with_cv_groups

    draws = x.reshape(4, 1000, 3)
    idata = with_cv_groups(from_dict({"posterior": {"x": draws}}), {"x": draws}, {"x": -draws})
    table = pymc_cv.summary(idata, progressbar=False, round_to=None)
    assert table.attrs["notes"][0].startswith(f"The draws are off on the second-order Stein identities by more than "
                                              f"chance (jointly p = {chk.second_order_p:.2g}): the se of every "
                                              f"control-variate estimate is widened {chk.se_factor:.2f}x")
    for label, row in table.iterrows():
        res, t = table.attrs["cv_results"][label]
        assert row["method"] != "mc" and row["se_reliable"]
        assert row["cv_mcse"] >= chk.se_factor * np.ravel(res.se)[t] * (1 - 1e-12)
    off = ScoreCheck(np.zeros(3), -np.ones(3), np.zeros((2, 3)), 3.0, "ok", 1.0, 3.3, 0.02, 0.001, 2.25, 0.05)
    assert off.se_factor == 1.5
    chance = ScoreCheck(np.zeros(3), -np.ones(3), np.zeros((2, 3)), 3.0, "ok", 1.0, 3.3, 0.2, 0.001, 1.4, 0.05)
    assert chance.se_factor == 1.0


def test_scores_follow_a_data_change_that_changes_the_shapes_of_the_parameters():
    # the compiled function cuts its raveled input into the variables' shapes; a model whose data set
    # the number of group effects is sampled again after pm.set_data with another number of groups
    with pm.Model(coords={"g": range(3)}) as model:
        n = pm.Data("n", np.zeros(3))
        a = pm.Normal("a", 0.0, 1.0, shape=n.shape)
        pm.Normal("y", a.sum(), 1.0, observed=np.array(0.5))
    for groups in (3, 5):
        with model:
            pm.set_data({"n": np.zeros(groups)})
        idata = _sample(model, draws=200)
        scored = pymc_cv.compute_scores(idata, model, progressbar=False, extend_inferencedata=False)
        x = np.asarray(scored["unconstrained_posterior"]["a"])
        assert x.shape[-1] == groups
        # log p = -|a|^2 / 2 - (y - sum a)^2 / 2: the exact gradient at every draw
        exact = -x + (0.5 - x.sum(axis=-1, keepdims=True))
        np.testing.assert_allclose(np.asarray(scored["score"]["a"]), exact, rtol=1e-10, atol=1e-12)


def test_with_chains_the_stein_check_takes_the_ess_only_where_the_bound_at_ess_n_is_beyond_its_threshold():
    """AR(1) chains of N(0, I) draws in 30 coordinates, five of them with scores 0.7 x the right ones (their
    cross identity is -0.7): those columns' z are the ones at ArviZ's ESS, every other z is the bound at
    ESS = draws (at least as large, and within the threshold as the one at the ESS)."""
    from chains import ar1_chain

    from pymc_cv.core.score_check import _log_scale_z, stein_check
    from pymc_cv.core.standard_errors import effective_sample_sizes

    rng = np.random.default_rng(40)
    chain = np.repeat(np.arange(4), 1000)
    x = np.column_stack([np.concatenate([ar1_chain(rng, 1000, 0.6) for _ in range(4)]) for _ in range(30)])
    s = -x.copy()
    s[:, :5] *= 0.7
    chk = stein_check(x, s, chain)
    xc = x - x.mean(axis=0)
    g = np.column_stack([s / s.std(axis=0), xc * s])
    target = np.concatenate([np.zeros(30), -np.ones(30)])
    mcse = g.std(axis=0, ddof=1) / np.sqrt(effective_sample_sizes(g, chain))
    z_all = (g.mean(axis=0) - target) / mcse
    z_all[30:] = _log_scale_z(-g.mean(axis=0)[30:], mcse[30:], z_all[30:])
    z_all = z_all.reshape(2, 30)
    over = np.abs(chk.z) > chk.threshold
    assert over[1, :5].all() and over.sum() == 5
    np.testing.assert_allclose(chk.z[over], z_all[over], rtol=1e-12)
    assert np.all(np.abs(chk.z) >= np.abs(z_all) * (1 - 1e-12))
    assert chk.level == "mild" and np.abs(z_all[:, 5:]).max() < chk.threshold
