"""client= : rungs, chains and summary units on a dask.distributed LocalCluster give the serial numbers."""

import subprocess
import sys

import numpy as np
import pymc as pm
import pytest
from test_metacv import _quadratic_task, uncompiled_mode  # _quadratic_task: E[a x^2 + b x + c sin x] = a

import pymc_cv
from pymc_cv.cluster import check_client, map_units

distributed = pytest.importorskip("distributed")

# one cluster for the module, and the module on one xdist worker: two worker processes per test
# run are what the cores hold
pytestmark = pytest.mark.xdist_group("dask")


_WARM_NUMBA_CACHE = """
import numpy as np, pymc as pm, pymc_cv
with pm.Model() as model:
    x = pm.Normal("x", 0, 2)
    pm.Normal("y", x, 1, observed=np.array([0.3, 1.1, 0.8]))
pymc_cv.thermodynamic_integration(model, 3, draws=20, tune=20, method="mc", random_seed=0, progressbar=False)
pymc_cv.sample_population(model, 3, draws=10, tune=10, chains=1, random_seed=0, progressbar=False)
"""


@pytest.fixture(scope="module")
def client():
    # With PyTensor 3's Numba backend, code JIT-compiled in this process and the same code loaded
    # from Numba's on-disk cache (as the workers do once this process has written it) can differ
    # in the last bit, and NUTS then takes another path (TI log evidence 8.8e-4 nats apart, seen
    # on a cold cache).  Compiling the tests' model once in another process first makes both
    # sides load the cached code, which the bit-for-bit comparisons below need.
    subprocess.run([sys.executable, "-c", _WARM_NUMBA_CACHE], check=True, capture_output=True)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster, distributed.Client(cluster) as c:
        yield c


def _normal_model():
    # x ~ N(0, 2^2), y_i ~ N(x, 1): the evidence is a multivariate normal density
    with pm.Model() as model:
        x = pm.Normal("x", 0, 2)
        pm.Normal("y", x, 1, observed=np.array([0.3, 1.1, 0.8]))
    return model


def _blas_threads():
    from threadpoolctl import threadpool_info

    return [lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"]


def test_without_client_distributed_is_not_imported():
    # (dask itself is: xarray imports it when installed)
    code = ("import numpy as np, pymc as pm, pymc_cv, sys\n"
            "with pm.Model() as m:\n"
            "    x = pm.Normal('x', 0, 1)\n"
            "    pm.Normal('y', x, 1, observed=np.zeros(3))\n"
            "    idata = pm.sample(50, tune=50, chains=2, cores=1, progressbar=False, random_seed=0)\n"
            "pymc_cv.summary(idata, model=m, method='zv', progressbar=False)\n"
            "print('distributed' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "False"


def test_client_must_be_a_dask_client():
    assert check_client(None) is None
    with pytest.raises(TypeError, match="dask.distributed.Client"):
        check_client("tcp://127.0.0.1:8786")
    with pytest.raises(TypeError, match="client"):
        map_units(abs, [1], client=object())


def test_map_units_keeps_the_order_and_workers_use_one_blas_thread(client):
    assert map_units(pow, [0, 1, 2, 3], shared=(2,), client=client) == [1, 2, 4, 8]
    assert map_units(pow, [0, 1, 2, 3], shared=(2,)) == [1, 2, 4, 8]
    threads = client.run(_blas_threads)
    assert len(threads) == 2 and all(t and max(t) == 1 for t in threads.values())


def test_summary_units_on_the_cluster_give_the_serial_table(client):
    model = _normal_model()
    idata = pm.sample(200, tune=200, chains=2, cores=1, model=model, random_seed=0, progressbar=False)
    serial = pymc_cv.summary(idata, model=model, tasks="chain", progressbar=False)
    remote = pymc_cv.summary(idata, model=model, tasks="chain", progressbar=False, client=client)
    assert list(remote.index) == ["x (chain 0)", "x (chain 1)"]
    np.testing.assert_allclose(remote[["cv_mean", "cv_mcse"]].to_numpy(), serial[["cv_mean", "cv_mcse"]].to_numpy(),
                               rtol=0, atol=1e-8)
    # exact posterior mean 2.2 / (3 + 1/4): every chain's vv-CV is on it
    np.testing.assert_allclose(remote["cv_mean"], 2.2 / 3.25, atol=1e-6)
    with pytest.raises(ValueError, match="tasks='temperature'"):
        pymc_cv.summary(idata, model=model, tasks="temperature", client=client, progressbar=False)


@pytest.mark.slow
def test_thermodynamic_integration_on_the_cluster_gives_the_serial_log_evidence(client):
    from scipy import stats

    model = _normal_model()
    kw = dict(draws=100, tune=200, method="cti", random_seed=3, progressbar=False)
    serial = pymc_cv.thermodynamic_integration(model, 8, **kw)
    remote = pymc_cv.thermodynamic_integration(model, 8, client=client, **kw)
    if _same_path(remote, serial):
        assert abs(remote.log_evidence - serial.log_evidence) < 1e-8
    truth = stats.multivariate_normal(np.zeros(3), np.eye(3) + 4.0).logpdf([0.3, 1.1, 0.8])
    assert abs(remote.log_evidence - truth) < 3 * remote.se + 0.01
    with pytest.raises(ValueError, match="SMC"):
        pymc_cv.thermodynamic_integration(model, 8, sampler="smc", client=client, progressbar=False)
    # vv-CV groups fitted here while the workers still sample later rungs: the serial numbers
    kw["method"] = "vvcv"
    serial = pymc_cv.thermodynamic_integration(model, 7, **kw)
    remote = pymc_cv.thermodynamic_integration(model, 7, client=client, **kw)
    if _same_path(remote, serial):
        assert abs(remote.log_evidence - serial.log_evidence) < 1e-8 and abs(remote.se - serial.se) < 1e-8
        np.testing.assert_allclose(remote.moments.var, serial.moments.var, rtol=1e-8)
        assert sorted(remote.notes) == sorted(serial.notes)
        assert list(remote.moments.method) == list(serial.moments.method)


def _same_path(remote, serial):
    """True where every number of the remote run must be the serial one: under PyMC 5 (C backend) the
    workers draw the serial run's draws and compute the same scores.  Under PyTensor 3's Numba backend,
    code JIT-compiled here and the same code loaded by the workers from Numba's cache can differ in the
    last bit (docs/guide/dask.md), even with the cache warmed first: NUTS can then take another path, and
    on draws equal to 1e-10 a last-bit change in a score can still tip a near tie between two CV orders
    at a rung (a CI run: 0.008 nats apart).  There the two estimates must agree within their se."""
    same = all(np.allclose(r, s, rtol=0, atol=1e-10)
               for r, s in zip(remote.draws["samples"], serial.draws["samples"]))
    if not same:
        assert int(pm.__version__.split(".")[0]) >= 6, "the workers' draws differ from the serial run's"
    if int(pm.__version__.split(".")[0]) >= 6:
        assert abs(remote.log_evidence - serial.log_evidence) < 3 * np.hypot(remote.se, serial.se)
        return False
    return same


@pytest.mark.slow
def test_population_chains_on_the_cluster_give_the_serial_draws(client):
    model = _normal_model()
    kw = dict(draws=60, tune=60, chains=2, random_seed=1, progressbar=False)
    serial = pymc_cv.sample_population(model, 4, **kw)
    remote = pymc_cv.sample_population(model, 4, client=client, **kw)
    for group, name in (("posterior", "x"), ("population", "loglik"), ("sample_stats", "exchange_accept")):
        a = np.asarray(pymc_cv.compat.group(serial, group)[name].values)
        b = np.asarray(pymc_cv.compat.group(remote, group)[name].values)
        np.testing.assert_allclose(b, a, rtol=0, atol=1e-10, equal_nan=True)


@pytest.mark.slow
def test_metacv_tasks_on_the_cluster_give_the_serial_estimates(client):
    # uncompiled: the comparison is of the numbers, and compiling takes 1-2 minutes on a cold cache
    mcv = pymc_cv.MetaCV(hidden=(8,), meta_iterations=300, progressbar=False, random_seed=0,
                         compile_kwargs={"mode": uncompiled_mode()})
    mcv.meta_fit(lambda rng: _quadratic_task(rng, 20)[0])
    rng = np.random.default_rng(5)
    tests = [_quadratic_task(rng, 20) for _ in range(30)]
    vals, xs, ss = ([t[0][k] for t in tests] for k in range(3))
    serial = mcv.estimate(vals, xs, ss)
    remote = mcv.estimate(vals, xs, ss, client=client)
    for key in ("estimate", "se", "variance_reduction"):
        np.testing.assert_allclose(getattr(remote, key), getattr(serial, key), rtol=1e-8, atol=1e-10)
    truth = np.array([a for _, a in tests])
    assert np.abs(remote.estimate - truth).mean() < np.abs(remote.mc_estimate - truth).mean()



def test_large_n_kernel_cv_with_its_features_on_the_workers(client, monkeypatch):
    """Above exact_max_n the inducing-point features live on the workers (a dask array): the same
    estimates as the local fit, to far below their se, and close to the truth.  Where a low-rank
    factor of the kernel matrix exists (two dimensions), it is fitted here, client or not."""
    from pymc_cv.core import kernel_cv

    rng = np.random.default_rng(5)
    x = rng.normal(size=(1500, 2))
    f = np.column_stack([x[:, 0] ** 2 + np.sin(x[:, 1]), np.cos(x[:, 0])])  # E = 1, exp(-1/2)
    chain = np.repeat([0, 1], 750)
    kw = dict(method="cf", chain=chain, exact_max_n=600, random_seed=2)
    factored = pymc_cv.cv_estimate(f, x, -x, **kw)
    assert list(factored.method) == ["cf"] * 2 and any("factor" in n for n in factored.notes)
    np.testing.assert_array_equal(pymc_cv.cv_estimate(f, x, -x, client=client, **kw).estimate, factored.estimate)
    monkeypatch.setattr(kernel_cv, "_FACTOR_MIN_N", 10**9)  # as in many dimensions, where no factor is small
    here = pymc_cv.cv_estimate(f, x, -x, **kw)
    there = pymc_cv.cv_estimate(f, x, -x, client=client, **kw)
    assert list(there.method) == list(here.method) == ["cf-nystrom"] * 2
    # both judge each M of the ladder on the same half of the draws, so both keep the same M
    assert [h["n_inducing"] for h in there.hyperparameters] == [h["n_inducing"] for h in here.hyperparameters]
    assert np.all(np.abs(there.estimate - here.estimate) < 1e-3 * here.se)
    np.testing.assert_allclose(there.se, here.se, rtol=1e-3)
    assert np.all(np.abs(there.estimate - [1.0, np.exp(-0.5)]) < 4 * there.se)
    with pytest.raises(TypeError, match="dask.distributed.Client"):
        pymc_cv.cv_estimate(f, x, -x, client="localhost", **kw)
    # the vv-CV's inducing solver too: two tasks on their own draws
    xs = [x[:750], 0.5 + x[750:]]
    fs = [xi[:, 0] ** 2 + np.sin(xi[:, 1]) for xi in xs]
    vkw = dict(solver="inducing", n_inducing=150, chain=[chain[:750], chain[750:]], random_seed=1)
    here = pymc_cv.vvcv_estimate(fs, xs, [-x[:750], -(xs[1] - 0.5)], **vkw)
    there = pymc_cv.vvcv_estimate(fs, xs, [-x[:750], -(xs[1] - 0.5)], client=client, **vkw)
    # the fit is exact to about 1e-7 here (se 9e-8 and 2e-7), so the sums' order, amplified by the
    # conditioning of the basis, shows at about a hundredth of the se (1e-9)
    assert np.all(np.abs(there.estimate - here.estimate) < 0.05 * here.se)
    assert np.all(np.abs(here.estimate - [1.0, 1.25 + np.sin(0.5) * np.exp(-0.5)]) < 4 * here.se)
