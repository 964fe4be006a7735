"""Scores the sampler already computed: nutpie's ``store_unconstrained=True, store_gradient=True``
keeps each draw's point on the unconstrained space and the gradient there, which ``summary`` and
``compute_scores`` use instead of compiling and evaluating the model."""

import numpy as np
import pytest

import pymc_cv
from pymc_cv import compat
from pymc_cv.idata_groups import has_stored_scores, stored_names, with_stored_scores

pm = pytest.importorskip("pymc")


def _dirichlet_model():
    counts = np.array([5, 2, 9])
    alpha = np.array([1.0, 2.0, 1.5])
    y = np.array([1.2, 0.4, 2.1, 1.7, 0.9])
    with pm.Model(coords={"k": ["a", "b", "c"]}) as model:
        pm.Dirichlet("p", a=alpha, dims="k")
        pm.Multinomial("counts", n=counts.sum(), p=model["p"], observed=counts)
        mu = pm.Normal("mu", 0.0, 2.0)
        pm.Normal("y", mu, 1.0, observed=y)
    post = alpha + counts
    return model, {"p[a]": post[0] / post.sum(), "p[b]": post[1] / post.sum(), "p[c]": post[2] / post.sum(),
                   "mu": y.sum() / (1 / 4 + y.size)}


def _as_if_stored(idata, model):
    """``idata`` with sample_stats holding the scores in nutpie's layout (for a stack without nutpie)."""
    import xarray as xr

    scored = pymc_cv.compute_scores(idata, model, extend_inferencedata=False, progressbar=False)
    shapes = model.eval_rv_shapes()
    labels = [lab for v in model.value_vars for lab in stored_names(v.name, shapes[v.name])]

    def flat(group):
        ds = compat.group(scored, group)
        parts = [np.asarray(ds[v.name].transpose("chain", "draw", ...).values) for v in model.value_vars]
        return np.concatenate([p.reshape(p.shape[:2] + (-1,)) for p in parts], axis=2)

    stats = compat.group(idata, "sample_stats").assign(
        unconstrained_draw=(("chain", "draw", "unconstrained_parameter"), flat("unconstrained_posterior")),
        gradient=(("chain", "draw", "unconstrained_parameter"), flat("score")),
    ).assign_coords(unconstrained_parameter=labels)
    assert isinstance(stats, xr.Dataset)
    return compat.with_groups(idata, {"sample_stats": stats}), scored


@pytest.fixture(scope="module")
def stored():
    model, exact = _dirichlet_model()
    with model:
        idata = pm.sample(1000, tune=500, chains=2, random_seed=4, progressbar=False, nuts_sampler="pymc",
                          compute_convergence_checks=False)
    with_stats, scored = _as_if_stored(idata, model)
    return model, exact, with_stats, scored


def test_stored_scores_give_the_table_of_the_computed_ones_without_a_model(stored):
    model, exact, idata, scored = stored
    assert has_stored_scores(idata) and not has_stored_scores(scored)
    table = pymc_cv.summary(idata, progressbar=False)
    computed = pymc_cv.summary(scored, progressbar=False)
    assert list(table.index) == list(computed.index) == ["mu", "p[a]", "p[b]", "p[c]"]
    np.testing.assert_array_equal(table["cv_mean"], computed["cv_mean"])
    np.testing.assert_array_equal(table["cv_mcse"], computed["cv_mcse"])
    for row, value in exact.items():
        assert abs(table.loc[row, "cv_mean"] - value) <= 3 * table.loc[row, "cv_mcse"] + 1e-9, row
    assert table.attrs["score_backend"].startswith("the sampler's stored gradients")
    assert computed.attrs["score_backend"].startswith("pymc")


def test_the_variables_and_dims_are_read_back_from_the_labels(stored):
    model, _, idata, _ = stored
    groups = with_stored_scores(idata)
    unc = compat.group(groups, "unconstrained_posterior")
    assert list(unc.data_vars) == ["p_simplex__", "mu"]  # PyMC's value variables, in the model's order
    assert compat.group(groups, "score")["mu"].dims == ("chain", "draw")
    with_model = pymc_cv.compute_scores(idata, model, extend_inferencedata=False, progressbar=False)
    assert compat.group(with_model, "score").attrs["score_backend"].startswith("the sampler's stored gradients")


def test_stored_scores_of_another_model_are_refused(stored):
    _, _, idata, _ = stored
    with pm.Model() as other:
        pm.Normal("mu", 0.0, 2.0)
        pm.HalfNormal("s", 1.0)
    with pytest.raises(ValueError, match=r"stored the unconstrained coordinates .*'p_simplex___0'.*"
                                         r"model= has \['mu', 's_log__'\]"):
        pymc_cv.compute_scores(idata, other, progressbar=False)
    with pytest.warns(UserWarning, match="compile_kwargs= not used"):
        pymc_cv.summary(idata, var_names=["mu"], progressbar=False, compile_kwargs={})


def test_stored_scores_follow_a_subset_posterior(stored):
    _, exact, idata, _ = stored
    post = compat.group(idata, "posterior").isel(draw=slice(0, 800, 2))
    thinned = compat.with_groups(idata, {"posterior": post})
    table = pymc_cv.summary(thinned, var_names=["mu"], progressbar=False)
    assert table.loc["mu", "ess_bulk"] < 1000
    assert abs(table.loc["mu", "cv_mean"] - exact["mu"]) <= 3 * table.loc["mu", "cv_mcse"] + 1e-9


def test_nutpie_stored_gradients_are_the_model_s_scores():
    pytest.importorskip("nutpie")
    model, exact = _dirichlet_model()
    with model:
        idata = pm.sample(1000, tune=500, chains=2, random_seed=5, progressbar=False,
                          compute_convergence_checks=False, **pymc_cv.nutpie_with_gradients())
    stored = pymc_cv.compute_scores(idata, model, extend_inferencedata=False, progressbar=False)
    computed = pymc_cv.compute_scores(idata, model, extend_inferencedata=False, progressbar=False,
                                      stored_gradients=False)
    for v in model.value_vars:
        np.testing.assert_allclose(stored["score"][v.name].values, computed["score"][v.name].values,
                                   rtol=1e-9, atol=1e-9)
        np.testing.assert_allclose(stored["unconstrained_posterior"][v.name].values,
                                   computed["unconstrained_posterior"][v.name].values, rtol=1e-12)
    table = pymc_cv.summary(idata, progressbar=False)
    assert table.attrs["score_backend"].startswith("the sampler's stored gradients (nutpie ")
    import nutpie

    backend = compat.group(computed, "score").attrs["score_backend"]
    assert backend.endswith(f"at the draws nutpie {nutpie.__version__} sampled")
    for row, value in exact.items():
        assert abs(table.loc[row, "cv_mean"] - value) <= 3 * table.loc[row, "cv_mcse"] + 1e-9, row
    assert table.loc["mu", "variance_reduction"] > 100


def test_bambi_fit_by_nutpie_keeps_the_draws_its_sampler_made():
    """Bambi rewrites the intercept after sampling; the stored draws are the sampler's own, and equal the
    ones compute_scores restores for the scores."""
    pytest.importorskip("nutpie")
    bmb = pytest.importorskip("bambi")
    import pandas as pd

    rng = np.random.default_rng(3)
    df = pd.DataFrame({"x": rng.normal(3.0, 1.0, 60)})
    df["y"] = 1.0 + 2.0 * df.x + rng.normal(0.0, 1.0, 60)
    model = bmb.Model("y ~ x", df)
    stored = {k: v for k, v in pymc_cv.nutpie_with_gradients().items() if k != "nuts_sampler"}
    idata = model.fit(inference_method="nutpie", draws=500, tune=500, chains=2, random_seed=1, progressbar=False,
                      **stored)
    stored = pymc_cv.compute_scores(idata, model, extend_inferencedata=False, progressbar=False)
    computed = pymc_cv.compute_scores(idata, model, extend_inferencedata=False, progressbar=False,
                                      stored_gradients=False)
    for name in compat.group(computed, "score").data_vars:
        np.testing.assert_allclose(stored["unconstrained_posterior"][name].values,
                                   computed["unconstrained_posterior"][name].values, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(stored["score"][name].values, computed["score"][name].values, rtol=1e-7,
                                   atol=1e-9)
    table = pymc_cv.summary(idata, progressbar=False)
    with_model = pymc_cv.summary(idata, model=model, progressbar=False)
    np.testing.assert_array_equal(table["cv_mean"], with_model["cv_mean"])
    assert np.all(np.abs(table["cv_mean"] - table["mean"]) < 4 * table["mcse_mean"])
