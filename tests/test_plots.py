"""The held-out fits behind plots.plot_cv_fit, and the plots' argument checks."""

import matplotlib
import numpy as np
import pytest

import pymc_cv
from pymc_cv.compat import from_dict
from pymc_cv.idata_groups import with_cv_groups
from pymc_cv.plots import plot_cv_fit, plot_forest

matplotlib.use("Agg")


def test_heldout_residuals_give_the_reported_variance_reduction():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(120, 2))
    f = np.column_stack([np.cos(x[:, 0]) + x[:, 1], x[:, 0] ** 2])
    res = pymc_cv.cv_estimate(f, x, -x, method="cf")
    for j in range(2):
        r = res.heldout_residuals[j]
        assert r.shape == (120,) and abs(r.mean()) < 1e-10
        np.testing.assert_array_equal(res.values[j], f[:, j])
        # independent draws: the variance reduction is var(f) / var(held-out residuals)
        np.testing.assert_allclose(res.variance_reduction[j], np.var(f[:, j]) / np.var(r), rtol=1e-8)


def test_a_quadratic_is_fitted_exactly_on_heldout_draws_and_mc_fits_a_constant():
    rng = np.random.default_rng(4)
    x = rng.normal(size=(60, 2))
    res = pymc_cv.cv_estimate(x[:, 0] ** 2 - x[:, 1], x, -x, method="zv2")
    assert np.max(np.abs(res.heldout_residuals[0])) < 1e-8
    mc = pymc_cv.cv_estimate(x[:, 0], x, -x, method="mc")
    np.testing.assert_allclose(mc.values[0] - mc.heldout_residuals[0], x[:, 0].mean(), rtol=1e-12)


def test_vvcv_keeps_one_heldout_fit_per_task_with_its_own_draws():
    rng = np.random.default_rng(5)
    xs = [rng.normal(size=(m, 1)) for m in (30, 40)]
    res = pymc_cv.vvcv_estimate([np.sin(x[:, 0]) for x in xs], xs, [-x for x in xs], B="identity")
    assert [r.size for r in res.heldout_residuals] == [30, 40]
    for t in range(2):
        assert np.var(res.heldout_residuals[t]) < 0.1 * np.var(res.values[t])


def test_summary_table_rows_lead_to_their_results():
    rng = np.random.default_rng(6)
    draws = rng.normal(size=(2, 100))
    idata = with_cv_groups(from_dict({"posterior": {"mu": draws}}), {"mu": draws}, {"mu": -draws})
    table = pymc_cv.summary(idata, integrands={"sq": lambda p: np.asarray(p["mu"]) ** 2}, method="zv2",
                            progressbar=False)
    res, i = table.attrs["cv_results"]["sq"]
    np.testing.assert_allclose(res.estimate[i], table.loc["sq", "cv_mean"])
    axes = plot_cv_fit(table, "sq")
    assert axes.size == 2 and "zv2" in axes[0].figure._suptitle.get_text()
    with pytest.raises(ValueError, match="not a row"):
        plot_cv_fit(table, "nope")


def test_plot_cv_fit_names_bad_arguments():
    rng = np.random.default_rng(7)
    x = rng.normal(size=(40, 1))
    res = pymc_cv.cv_estimate(x[:, 0] ** 2, x, -x, method="zv2")
    with pytest.raises(ValueError, match="index=3"):
        plot_cv_fit(res, 3)
    with pytest.raises(ValueError, match="pass a pair"):
        import matplotlib.pyplot as plt

        plot_cv_fit(res, ax=plt.subplots()[1])
    with pytest.raises(ValueError, match="CVResult"):
        plot_cv_fit(object())


def test_plot_forest_draws_the_tables_intervals():
    rng = np.random.default_rng(7)
    draws = rng.normal(size=(2, 200))
    idata = with_cv_groups(from_dict({"posterior": {"mu": draws}}), {"mu": draws}, {"mu": -draws})
    table = pymc_cv.summary(idata, integrands={"e": lambda p: np.exp(np.asarray(p["mu"]) / 2)}, var_names=["mu"],
                            cv_interval=True, progressbar=False)
    ax = plot_forest(table)
    assert [t.get_text() for t in ax.get_yticklabels()] == ["mu", "e"]
    lb, ub = pymc_cv.compat.interval_names(pymc_cv.compat.default_ci_prob())
    segments = [seg for coll in ax.collections if hasattr(coll, "get_segments") for seg in coll.get_segments()]
    spans = {tuple(np.round([seg[0][0], seg[1][0]], 12)) for seg in segments}
    for row in table.index:  # the plain and the CV interval of every row are drawn
        assert tuple(np.round(table.loc[row, [lb, ub]].astype(float), 12)) in spans
        assert tuple(np.round(table.loc[row, [f"cv_{lb}", f"cv_{ub}"]].astype(float), 12)) in spans
    with pytest.raises(ValueError, match="no interval columns"):
        plot_forest(table[["mean", "mcse_mean", "cv_mean", "cv_mcse", "variance_reduction"]])
