"""Population MCMC (sample_population) and TI from it, against closed forms and quadrature."""

import numpy as np
import pytest
from example_modules import load_example
from scipy import stats

import pymc_cv
from pymc_cv import compat
from pymc_cv.evidence import power_ladder

pm = pytest.importorskip("pymc")

Y_OBS = 0.7


def normal_model():
    """x ~ N(0, 1), y ~ N(x, 1): p_t(x) = N(t y / (1 + t), 1 / (1 + t)), log p(y) = log N(y; 0, 2)."""
    with pm.Model() as model:
        x = pm.Normal("x", 0, 1)
        pm.Normal("y", x, 1, observed=Y_OBS)
    return model


@pytest.fixture(scope="module")
def normal_run():
    model = normal_model()
    idata = pymc_cv.sample_population(model, 6, draws=400, tune=300, chains=2, random_seed=3, progressbar=False)
    return model, idata


def test_every_walker_samples_its_power_posterior(normal_run):
    _, idata = normal_run
    pop = compat.group(idata, "population")
    t = pop["temperature"].values
    x = pop["x"].transpose("chain", "draw", "temperature").values
    for i, ti in enumerate(t):
        mean, sd = ti * Y_OBS / (1 + ti), (1 + ti) ** -0.5
        ess = compat.ess_mean(x[:, :, i])
        assert abs(x[:, :, i].mean() - mean) < 4 * sd / np.sqrt(ess), (ti, x[:, :, i].mean(), mean)
        assert abs(x[:, :, i].std() / sd - 1) < 0.15
    # the t = 1 walkers are the posterior, in pm.sample's layout
    post = compat.group(idata, "posterior")
    np.testing.assert_array_equal(post["x"].values, x[:, :, -1])
    assert set(pop["loglik"].dims) == {"chain", "draw", "temperature"}
    np.testing.assert_allclose(pop["loglik"].values, stats.norm.logpdf(Y_OBS, pop["x"].values, 1))


def test_exchange_rates_are_recorded_and_plausible(normal_run):
    _, idata = normal_run
    acc = compat.group(idata, "sample_stats")["exchange_accept"]
    assert acc.sizes["pair"] == 5
    rates = np.nanmean(acc.values.reshape(-1, 5), axis=0)
    # every pair proposed about every other iteration, and accepted often on this easy ladder
    proposed = np.isfinite(acc.values.reshape(-1, 5)).mean(axis=0)
    np.testing.assert_allclose(proposed, 0.5, atol=0.01)
    assert np.all(rates > 0.5) and np.all(rates <= 1)


def test_ti_from_population_matches_the_closed_form_evidence(normal_run):
    model, idata = normal_run
    exact = stats.norm.logpdf(Y_OBS, 0, np.sqrt(2))
    for method in ("mc", "cti"):
        res = pymc_cv.ti_from_population(idata, model, method=method, progressbar=False)
        assert abs(res.log_evidence - exact) < max(3 * res.se, 0.02), (method, res.log_evidence, exact, res.se)
        assert any("exchange acceptance rates" in n for n in res.notes)


def test_the_same_seed_gives_the_same_run():
    model = normal_model()
    a, b = (pymc_cv.sample_population(model, 3, draws=20, tune=20, random_seed=7, progressbar=False) for _ in "ab")
    for name in ("x", "loglik"):
        np.testing.assert_array_equal(compat.group(a, "population")[name].values,
                                      compat.group(b, "population")[name].values)
    c = pymc_cv.sample_population(model, 3, draws=20, tune=20, random_seed=8, progressbar=False)
    assert not np.array_equal(compat.group(a, "population")["x"].values, compat.group(c, "population")["x"].values)


def test_posterior_of_a_population_run_works_with_summary():
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 10)
        sigma = pm.HalfNormal("sigma", 2)
        pm.Normal("y", mu, sigma, observed=np.array([0.3, 1.2, -0.4, 0.8, 2.0]))
    idata = pymc_cv.sample_population(model, 4, draws=300, tune=300, random_seed=1, progressbar=False)
    assert "sigma" in compat.group(idata, "posterior") and "sigma_log__" in compat.group(idata, "population")
    table = pymc_cv.summary(idata, ["mu"], model=model, method="zv1", progressbar=False)
    assert table.shape[0] == 1 and np.isfinite(table["cv_mean"].iloc[0])


def test_ti_from_population_takes_arrays_from_any_sampler():
    """The array layout (samples / grad_loglik / grad_logprior), filled with exact draws."""
    rng = np.random.default_rng(0)
    t = power_ladder(11)
    n_chain, n_draw = 2, 200
    x = np.stack([rng.normal(ti * Y_OBS / (1 + ti), (1 + ti) ** -0.5, size=(n_chain, n_draw)) for ti in t], axis=2)
    pop = compat.dict_to_dataset(
        {"loglik": stats.norm.logpdf(Y_OBS, x, 1), "samples": x[..., None], "grad_loglik": (Y_OBS - x)[..., None],
         "grad_logprior": -x[..., None]},
        coords={"temperature": list(t), "param": [0]},
        dims={"loglik": ["temperature"], "samples": ["temperature", "param"],
              "grad_loglik": ["temperature", "param"], "grad_logprior": ["temperature", "param"]})
    idata = compat.with_groups(compat.from_dict({"posterior": {"x": x[:, :, -1]}}), {"population": pop})
    res = pymc_cv.ti_from_population(idata, method="cti", progressbar=False)
    exact = stats.norm.logpdf(Y_OBS, 0, np.sqrt(2))
    assert abs(res.log_evidence - exact) < 3 * res.se
    assert res.se < res.mc_se


def test_bad_input_is_refused_with_the_fix():
    model = normal_model()
    with pytest.raises(ValueError, match="from 0 to 1"):
        pymc_cv.sample_population(model, [0.2, 0.5, 1.0], draws=5, tune=5, progressbar=False)
    with pytest.raises(ValueError, match="draws"):
        pymc_cv.sample_population(model, 3, draws=0, progressbar=False)
    with pytest.raises(ValueError, match="population"):
        pymc_cv.ti_from_population(compat.from_dict({"posterior": {"x": np.zeros((2, 5))}}), model)


def sinusoid(seed=0):
    """The frequency of a sinusoid in noise (examples/sinusoid_evidence.py): many local modes in w."""
    module = load_example("sinusoid_evidence")
    return module.frequency_model(module.simulate(seed))


@pytest.mark.slow
def test_population_finds_what_independent_rungs_miss_on_a_multimodal_model():
    model, exact = sinusoid()
    pop = pymc_cv.thermodynamic_integration(model, 16, draws=400, tune=300, sampler="population", method="mc",
                                            random_seed=2, progressbar=False)
    # seeds 1-8: errors of -0.39 to +0.33 nats (PyMC 5 and 6), z of rms 1.2-1.3 (1.7-1.9 before the se
    # counted the rungs' correlation); the NUTS rungs below are 17-30 nats off
    assert abs(pop.log_evidence - exact) < max(3 * pop.se, 0.05) and abs(pop.log_evidence - exact) < 0.5, \
        (pop.log_evidence, exact, pop.se)
    nuts = pymc_cv.thermodynamic_integration(model, 16, draws=100, tune=300, sampler="nuts", method="mc",
                                             random_seed=2, progressbar=False)
    # independent NUTS runs get stuck in local modes; either right or flagged, never confidently wrong
    assert abs(nuts.log_evidence - exact) < 3 * nuts.se or not nuts.reliable


def test_summary_across_temperatures_matches_every_power_posterior_mean(normal_run):
    model, idata = normal_run
    table = pymc_cv.summary(idata, ["x"], model=model, tasks="temperature", progressbar=False)
    t = compat.group(idata, "population")["temperature"].values
    assert list(table.index) == [f"x (t = {ti:.3g})" for ti in t]
    exact = t * Y_OBS / (1 + t)
    # x is linear: a Stein CV with the linear polynomial in it is exact at every temperature
    np.testing.assert_allclose(table["cv_mean"].values, exact, atol=1e-6)
    mc_err = np.abs(table["mean"].values - exact)
    assert np.all(np.abs(table["cv_mean"].values - exact) <= mc_err + 1e-9)
    per_t = pymc_cv.summary(idata, ["x"], model=model, tasks="temperature", method="zv1", progressbar=False)
    np.testing.assert_allclose(per_t["cv_mean"].values, exact, atol=1e-6)
    with pytest.raises(ValueError, match="needs the model"):
        pymc_cv.summary(idata, ["x"], tasks="temperature", progressbar=False)


def test_summary_passes_compile_kwargs_to_the_scores():
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 10)
        pm.Normal("y", mu, 1, observed=np.array([0.5, 1.5]))
    idata = compat.from_dict({"posterior": {"mu": np.random.default_rng(0).normal(1, 0.7, (2, 100))}})
    table = pymc_cv.summary(idata, ["mu"], model=model, method="zv1", progressbar=False,
                            compile_kwargs={"mode": "FAST_COMPILE"})
    assert abs(table.loc["mu", "cv_mean"] - 200 / 201) < 1e-6
    with pytest.raises(TypeError, match="compile_kwargs"):
        pymc_cv.summary(idata, ["mu"], model=model, compile_kwargs="NUMBA", progressbar=False)


def test_even_exchange_ladder_moves_rungs_to_where_swaps_fail():
    from pymc_cv.evidence.ladder import even_exchange_ladder

    t = np.linspace(0, 1, 5)
    new = even_exchange_ladder(t, [0.8, 0.1, 0.05, 0.05])
    assert new[0] == 0 and new[-1] == 1 and np.all(np.diff(new) > 0)
    assert new[1] < t[1] and new[2] < t[1]  # most of the barrier lies below t = 0.25
    # equal rejection rates keep an evenly spaced ladder; nothing measured keeps any ladder
    np.testing.assert_allclose(even_exchange_ladder(t, [0.3] * 4), t)
    np.testing.assert_array_equal(even_exchange_ladder(t, [np.nan] * 4), t)
    with pytest.raises(ValueError, match="one rate per neighbouring pair"):
        even_exchange_ladder(t, [0.1, 0.2])


def test_adapted_ladder_evens_out_the_exchange_rates():
    # 40 observations make the power posteriors narrow fast: an even ladder has swaps that nearly
    # always fail near t = 0 and nearly always succeed near t = 1
    y = np.random.default_rng(0).normal(0.5, 1.0, 40)
    with pm.Model() as model:
        x = pm.Normal("x", 0, 3)
        pm.Normal("y", x, 1, observed=y)
    t = np.linspace(0, 1, 6)
    kw = dict(draws=300, tune=300, chains=2, random_seed=4, progressbar=False)
    fixed = pymc_cv.sample_population(model, t, **kw)
    adapted = pymc_cv.sample_population(model, t, adapt_temperatures=True, **kw)

    def rates(idata):
        acc = np.asarray(compat.group(idata, "sample_stats")["exchange_accept"].values)
        return np.nanmean(acc.reshape(-1, acc.shape[-1]), axis=0)

    new_t = np.asarray(compat.group(adapted, "population")["temperature"].values)
    assert new_t[0] == 0 and new_t[-1] == 1 and np.all(np.diff(new_t) > 0) and new_t[1] < t[1]
    assert rates(adapted).min() > rates(fixed).min() + 0.1
    assert np.ptp(rates(adapted)) < 0.5 * np.ptp(rates(fixed))
    # the same seed gives the same ladder
    again = pymc_cv.sample_population(model, t, adapt_temperatures=True, **kw)
    np.testing.assert_array_equal(np.asarray(compat.group(again, "population")["temperature"].values), new_t)
