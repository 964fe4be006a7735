"""The compatibility layer gives the same numbers and types on ArviZ 0.x and ArviZ 1 (CI runs both)."""

import numpy as np
import pytest

import pymc_cv
from pymc_cv import compat
from pymc_cv.idata_groups import with_cv_groups


def _ar1(phi, n_chain, n_draw, rng):
    x = np.empty((n_chain, n_draw))
    x[:, 0] = rng.normal(size=n_chain) / np.sqrt(1 - phi**2)
    for j in range(1, n_draw):
        x[:, j] = phi * x[:, j - 1] + rng.normal(size=n_chain)
    return x


def test_ess_of_ar1_chains_matches_theory_and_is_the_same_per_column_or_batched():
    rng = np.random.default_rng(0)
    n_chain, n_draw = 4, 5000
    phis = [0.0, 0.5, 0.8]
    draws = np.stack([_ar1(phi, n_chain, n_draw, rng) for phi in phis])  # (3, chain, draw)
    batched = compat.ess_mean(draws)
    one_by_one = [float(compat.ess_mean(draws[k])) for k in range(len(phis))]
    np.testing.assert_allclose(batched, one_by_one, rtol=1e-12)
    theory = [n_chain * n_draw * (1 - phi) / (1 + phi) for phi in phis]  # AR(1): n (1 - phi) / (1 + phi)
    np.testing.assert_allclose(batched, theory, rtol=0.12)


def test_pareto_khat_recovers_the_tail_index():
    rng = np.random.default_rng(1)
    for k in (0.3, 0.8):
        w = rng.pareto(1 / k, size=4000) + 1.0  # a Pareto tail with shape k
        assert abs(compat.psis_khat(np.log(w)) - k) < 0.15


def test_rhat_separates_agreeing_from_disagreeing_chains():
    rng = np.random.default_rng(2)
    same = rng.normal(size=(4, 500))
    apart = same + np.array([0.0, 0.0, 0.0, 2.0])[:, None]
    assert compat.rhat(same) < 1.02 and compat.rhat(apart) > 1.2


def test_mcse_of_iid_draws_is_sd_over_root_n():
    x = np.random.default_rng(3).normal(size=(4, 2500))
    assert abs(compat.mcse_mean(x) / (x.std() / 100) - 1) < 0.1


def test_groups_come_back_in_the_type_they_came_in():
    draws = np.random.default_rng(4).normal(size=(2, 50, 3))
    idata = compat.from_dict({"posterior": {"theta": draws}})
    new = with_cv_groups(idata, {"theta": draws}, {"theta": -draws}, dims={"theta": ["k"]},
                         coords={"k": ["a", "b", "c"]})
    assert type(new) is type(idata)
    assert "score" not in compat.group_names(idata)
    assert {"posterior", "unconstrained_posterior", "score"} <= set(compat.group_names(new))
    score = compat.group(new, "score")
    assert score["theta"].dims == ("chain", "draw", "k") and list(score["k"].values) == ["a", "b", "c"]
    same = compat.with_groups(idata, {"score": score}, inplace=True)
    assert same is idata and "score" in compat.group_names(idata)
    with pytest.raises(KeyError):
        compat.group(idata, "prior")


@pytest.mark.skipif(compat.arviz_major() < 1, reason="the cv accessor is on ArviZ 1's DataTree; this lane has 0.x")
def test_datatree_accessor_runs_the_workflow_of_pm_sample():
    import pymc as pm
    import xarray as xr

    y = np.array([0.3, -0.5, 1.2, 0.8])
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 2)
        pm.Normal("y", mu, 1, observed=y)
        idata = pm.sample(300, tune=300, chains=2, progressbar=False, random_seed=0,
                          compute_convergence_checks=False)
    assert isinstance(idata, xr.DataTree)
    exact = y.sum() / (y.size + 0.25)  # conjugate posterior mean
    # as xarray's accessors, scores leaves the DataTree as it is unless told to extend it
    out = idata.cv.scores(model, progressbar=False)
    assert out is not idata and isinstance(out, xr.DataTree) and "score" in out.children
    assert "score" not in idata.children
    with pytest.raises(ValueError, match="Pass model="):
        idata.cv.summary(["mu"], progressbar=False)
    with model:  # the enclosing model's scores, as compute_scores takes them
        table = idata.cv.summary(["mu"], progressbar=False)
    assert abs(table.loc["mu", "cv_mean"] - exact) < 1e-8
    assert "score" not in idata.children
    same = idata.cv.scores(model, extend_inferencedata=True, progressbar=False)
    assert same is idata and "score" in idata.children
    table = idata.cv.summary(["mu"], progressbar=False)
    assert abs(table.loc["mu", "cv_mean"] - exact) < 1e-8
    # summary on a DataTree without scores leaves it as it was
    fresh = pm.sample(100, tune=100, chains=2, progressbar=False, random_seed=1, compute_convergence_checks=False,
                      model=model)
    pymc_cv.summary(fresh, model=model, progressbar=False)
    assert "score" not in fresh.children


def test_diagnostics_of_draws_seen_before_in_one_call_are_not_computed_again(monkeypatch):
    """Inside ``diagnosed_once`` (one ``summary``), R-hat and ESS of rows already diagnosed come from the
    first computation: the same numbers, and only the new rows go to ArviZ."""
    rng = np.random.default_rng(4)
    draws = np.stack([_ar1(phi, 4, 500, rng) for phi in (0.0, 0.5, 0.9)])  # (3, chain, draw)
    plain = compat.rhats(draws), compat.ess_bulk(draws)
    seen = []
    computed = compat._computed_diagnostic
    monkeypatch.setattr(compat, "_computed_diagnostic",
                        lambda ary, name, **kw: seen.append((name, ary.shape[0])) or computed(ary, name, **kw))
    with compat.diagnosed_once():
        np.testing.assert_array_equal(compat.rhats(draws[:2]), plain[0][:2])
        np.testing.assert_array_equal(compat.rhats(draws), plain[0])
        np.testing.assert_array_equal(compat.rhats(draws[[2, 2]]), plain[0][[2, 2]])
        np.testing.assert_array_equal(compat.ess_bulk(draws), plain[1])
        assert float(compat.rhat(draws[1])) == plain[0][1]
    assert seen == [("rhat", 2), ("rhat", 1), ("ess", 3)]
    compat.rhats(draws)  # outside: computed
    assert seen[-1] == ("rhat", 3)


@pytest.mark.skipif(compat.arviz_major() >= 1, reason="ArviZ 0.x's numba switch")
def test_arviz_0x_diagnostics_take_the_numpy_path_and_leave_arviz_as_they_found_it():
    import arviz as az

    pytest.importorskip("numba")
    draws = _ar1(0.6, 4, 500, np.random.default_rng(2))
    before = az.Numba.numba_flag
    az.Numba.enable_numba()
    try:
        with_numba = float(az.rhat(draws)), float(az.ess(draws, method="bulk"))
        seen = []
        original = az.rhat

        def spy(*args, **kwargs):
            seen.append(az.Numba.numba_flag)
            return original(*args, **kwargs)

        az.rhat = spy
        try:
            ours = compat.rhat(draws), float(compat.ess_bulk(draws))
        finally:
            az.rhat = original
        assert seen == [False] and az.Numba.numba_flag  # numba off inside, restored after
        np.testing.assert_allclose(ours, with_numba, rtol=1e-12)
    finally:
        az.Numba.numba_flag = before


def test_diagnostics_leave_a_lazily_registered_jax_unimported(monkeypatch):
    import sys
    import types

    class _LazyModule(types.ModuleType):
        """Stands for the lazy module arviz-base registers for an installed JAX: touching it imports JAX."""

        def __getattr__(self, name):
            raise AssertionError(f"jax.{name} was looked up: JAX would have been imported")

    fake = _LazyModule("jax")
    monkeypatch.setitem(sys.modules, "jax", fake)
    rng = np.random.default_rng(4)
    khat = compat.psis_khat(rng.standard_t(2, size=2000))
    ess = compat.ess_bulk(_ar1(0.5, 4, 300, rng))
    assert sys.modules["jax"] is fake  # put back, never loaded
    assert np.isfinite(khat) and khat > 0.3 and np.isfinite(ess)



def test_diagnostics_spread_over_threads_give_the_numbers_of_one_thread(monkeypatch):
    """Where ArviZ's own functions take the rows (those the batched ones do not), rank R-hat, bulk ESS and
    the MCSEs of long rows go to ArviZ in one chunk per thread: the same numbers as one call, and the
    chunks really run on other threads; the batched functions give them to rounding."""
    import threading

    rng = np.random.default_rng(5)
    draws = np.stack([_ar1(phi, 4, 2500, rng) for phi in (0.0, 0.3, 0.6, 0.9, 0.95)])  # (5, chain, draw)
    probs = (0.03, 0.97)
    batched = (compat.rhats(draws), compat.ess_bulk(draws), compat.mcse_rows(list(draws), probs))
    monkeypatch.setattr(compat.batched_diagnostics, "handles", lambda ary: False)
    monkeypatch.setattr(compat, "_usable_cores", lambda: 1)
    one = (compat.rhats(draws), compat.ess_bulk(draws), compat.mcse_rows(list(draws), probs))
    ran_on = set()
    mapped = compat._map_in_threads

    def recording(fn, parts):
        return mapped(lambda p: ran_on.add(threading.get_ident()) or fn(p), parts)

    monkeypatch.setattr(compat, "_usable_cores", lambda: 2)
    monkeypatch.setattr(compat, "_map_in_threads", recording)
    spread = (compat.rhats(draws), compat.ess_bulk(draws), compat.mcse_rows(list(draws), probs))
    assert len(ran_on) >= 2 and threading.get_ident() not in ran_on
    for a, b, c in zip(one, spread, batched):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_allclose(c, a, rtol=1e-9)
    # each row's mcse as ArviZ gives it alone: mean, sd, then the quantiles
    for row, got in zip(draws, spread[2]):
        want = [compat.mcse_mean(row), compat.mcse_sd(row)] + [compat.mcse_quantile(row, p) for p in probs]
        np.testing.assert_array_equal(got, want)
    # rows too short to gain, and the ESS of the mean, stay in this thread
    ran_on.clear()
    compat.rhats(draws[:, :, :1000])
    compat.ess_mean(draws)
    assert ran_on <= {threading.get_ident()}


def test_diagnostics_stay_in_one_thread_off_the_main_thread(monkeypatch):
    import threading
    from concurrent.futures import ThreadPoolExecutor

    monkeypatch.setattr(compat, "_usable_cores", lambda: 2)
    assert [(s.start, s.stop) for s in compat._split_evenly(11, 3)] == [(0, 4), (4, 7), (7, 11)]
    assert compat._split_evenly(2, 4) == [slice(0, 1), slice(1, 2)]
    assert compat._threads_for(20_000) == 2 and compat._threads_for(4_000) == 1
    with ThreadPoolExecutor(1) as pool:  # a worker thread, as on a dask worker
        assert pool.submit(compat._threads_for, 20_000).result() == 1
    assert threading.current_thread() is threading.main_thread()
