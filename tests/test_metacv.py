"""Meta-CVs: the Stein network, its MAML gradients, and estimates against closed forms."""

import pickle

import numpy as np
import pytest

import pymc_cv
from pymc_cv.metacv.network import init_params, n_params, stein_term


def uncompiled_mode():
    """A PyTensor mode that compiles nothing (each operation runs its NumPy implementation), for tests
    of what a graph computes.  The Meta-CV's graphs take one to two minutes to compile on a cold PyTensor
    cache (CI's), seconds once cached; uncompiled, a training step of one hidden layer of 8 on 5 tasks
    of 10 draws costs 3-5 ms on PyTensor 3 (0.12 ms compiled) and about 20 ms on PyTensor 2, so only
    short runs gain.  Elementwise fusion is left out: a fused loop run in Python is slower than the
    NumPy operations it replaces."""
    from pytensor.compile.mode import Mode

    return Mode(linker="py", optimizer="fast_run").excluding("fusion")


def _compiled_stein(d, hidden, activation="tanh"):
    import pytensor
    import pytensor.tensor as pt

    th = pt.matrix("th")
    X, S = pt.tensor3("X"), pt.tensor3("S")
    return pytensor.function([th, X, S], stein_term(th, X, S, d, hidden, activation))


def _u_numpy(theta, x, d, hidden, activation):
    from pymc_cv.metacv.network import layer_shapes

    act = np.tanh if activation == "tanh" else (lambda z: 1 / (1 + np.exp(-z)))
    h, off = x, 0
    shapes = layer_shapes(d, hidden)
    for k, (o, i) in enumerate(shapes):
        W = theta[off : off + o * i].reshape(o, i)
        off += o * i
        b = theta[off : off + o]
        off += o
        h = W @ h + b
        if k < len(shapes) - 1:
            h = act(h)
    return h


@pytest.mark.parametrize("activation", ["tanh", "sigmoid"])
def test_stein_term_has_the_exact_divergence(activation):
    d, hidden = 3, (7, 5)
    rng = np.random.default_rng(0)
    theta = init_params(d, hidden, rng, last_scale=1.0) + 0.1 * rng.normal(size=n_params(d, hidden))
    X = rng.normal(size=(1, 4, d))
    S = rng.normal(size=(1, 4, d))
    got = _compiled_stein(d, hidden, activation)(theta[None], X, S)[0]
    eps = 1e-6
    for k in range(4):
        x = X[0, k]
        u = _u_numpy(theta, x, d, hidden, activation)
        div = sum((_u_numpy(theta, x + eps * e, d, hidden, activation)[j]
                   - _u_numpy(theta, x - eps * e, d, hidden, activation)[j]) / (2 * eps)
                  for j, e in enumerate(np.eye(d)))
        assert got[k] == pytest.approx(div + u @ S[0, k], rel=1e-6, abs=1e-8)


def test_stein_term_has_mean_zero_under_its_target():
    """E[div u + u . grad log pi] = 0: here pi = N(0, I_2), 200,000 draws, a random network."""
    d, hidden = 2, (8,)
    rng = np.random.default_rng(1)
    theta = init_params(d, hidden, rng, last_scale=1.0)
    x = rng.normal(size=(1, 200_000, d))
    vals = _compiled_stein(d, hidden)(theta[None], x, -x)[0]
    assert abs(vals.mean()) < 4 * vals.std() / np.sqrt(vals.size)
    assert vals.std() > 0.1  # not trivially zero


def test_maml_meta_gradient_matches_finite_differences():
    """The second-order meta-gradient through one inner step, against central differences."""
    import pytensor
    import pytensor.tensor as pt

    from pymc_cv.metacv.maml import InnerLoop, Network, _inner

    d, hidden = 1, (4,)
    rng = np.random.default_rng(2)
    theta_v = pt.vector("theta")
    XS, SS, XQ, SQ = (pt.tensor3(n) for n in ("XS", "SS", "XQ", "SQ"))
    FS, FQ = pt.matrix("FS"), pt.matrix("FQ")
    for first_order in (False, True):
        th_b, c_b = _inner(theta_v, (XS, SS, FS), Network(d, hidden, "tanh"), InnerLoop(0.1, 2, first_order))
        loss = pt.mean((FQ - c_b[:, None] - stein_term(th_b, XQ, SQ, d, hidden, "tanh")) ** 2)
        # uncompiled: the derivative is what is checked, and compiling it takes a minute on a cold cache
        f = pytensor.function([theta_v, XS, SS, FS, XQ, SQ, FQ], [loss, pt.grad(loss, theta_v)],
                              mode=uncompiled_mode())
        x = rng.normal(size=(2, 6, d))
        args = (x[:, :3], -x[:, :3], x[:, :3, 0] ** 2, x[:, 3:], -x[:, 3:], x[:, 3:, 0] ** 2)
        theta = init_params(d, hidden, rng, last_scale=1.0)
        _, g = f(theta, *args)
        eps = 1e-6
        fd = np.array([(f(theta + eps * e, *args)[0] - f(theta - eps * e, *args)[0]) / (2 * eps)
                       for e in np.eye(theta.size)])
        if first_order:  # first-order MAML drops the inner Hessian term: close but not equal
            assert not np.allclose(g, fd, rtol=1e-4, atol=1e-8)
            assert np.corrcoef(g, fd)[0, 1] > 0.5
        else:
            np.testing.assert_allclose(g, fd, rtol=1e-4, atol=1e-8)


def _quadratic_task(rng, n=10):
    """E[a x^2 + b x + c sin(x)] under x ~ N(0, 1) is a (the sine is odd)."""
    a, b, c = rng.uniform(1, 2), rng.uniform(-1, 1), rng.uniform(-1, 1)
    x = rng.normal(size=(n, 1))
    return (a * x[:, 0] ** 2 + b * x[:, 0] + c * np.sin(x[:, 0]), x, -x), a


@pytest.mark.slow
def test_metacv_beats_mc_on_unseen_tasks_and_round_trips(tmp_path):
    mcv = pymc_cv.MetaCV(hidden=(16,), meta_iterations=1500, progressbar=False, random_seed=0)
    mcv.meta_fit(lambda rng: _quadratic_task(rng)[0])
    assert mcv.history_.shape == (1500,)
    assert mcv.history_[-300:].mean() < 0.8 * mcv.history_[:100].mean()
    rng = np.random.default_rng(99)
    tests = [_quadratic_task(rng) for _ in range(200)]
    truth = np.array([a for _, a in tests])
    vals, xs, ss = ([t[0][k] for t in tests] for k in range(3))
    res = mcv.estimate(vals, xs, ss)
    err, err_mc = np.abs(res.estimate - truth), np.abs(res.mc_estimate - truth)
    assert err.mean() <= 0.5 * err_mc.mean()  # measured 0.34
    assert np.mean(err <= 2 * res.se) >= 0.8  # se from 5 residuals per half: rough, flagged as such
    assert not res.se_reliable.any()
    # the thesis's estimator (adapt on half, average the other) is unbiased but noisier
    res_q = mcv.estimate(vals, xs, ss, crossfit=False, fallback=False)
    assert np.abs(res_q.estimate - truth).mean() <= 0.7 * err_mc.mean()  # measured 0.50
    # one task at a time gives the same numbers as the batch
    one = mcv.estimate(*tests[3][0])
    assert one.estimate.shape == () and one.estimate == pytest.approx(res.estimate[3], rel=1e-10)
    # save / load
    path = tmp_path / "metacv.npz"
    mcv.save(path)
    again = pymc_cv.MetaCV.load(path)
    np.testing.assert_allclose(again.estimate(vals[:5], xs[:5], ss[:5]).estimate, res.estimate[:5], rtol=1e-10)
    # pickled as for dask workers: without compiled functions, and estimating compiles no meta-training step
    shipped = pickle.loads(pickle.dumps(mcv))
    assert not hasattr(shipped, "_train_step")
    np.testing.assert_allclose(shipped.estimate(vals[:5], xs[:5], ss[:5]).estimate, res.estimate[:5], rtol=1e-10)
    assert shipped._train_step is None


def test_metacv_refuses_bad_input():
    with pytest.raises(ValueError, match="not meta-trained"):
        pymc_cv.MetaCV().estimate(np.zeros(4), np.zeros((4, 1)), np.zeros((4, 1)))
    with pytest.raises(ValueError, match="activation"):
        pymc_cv.MetaCV(activation="relu").meta_fit([(np.zeros(4), np.zeros((4, 1)), np.zeros((4, 1)))])
    with pytest.raises(ValueError, match="triple"):
        pymc_cv.MetaCV().meta_fit([np.zeros(4)])
    x = np.random.default_rng(0).normal(size=(6, 1))
    with pytest.raises(ValueError, match="support_size"):
        pymc_cv.MetaCV(support_size=4).meta_fit([(x[:, 0], x, -x)])


@pytest.mark.slow
def test_summary_with_metacv_on_many_tasks_of_a_conjugate_posterior():
    """mu | y ~ N(m, s^2) (conjugate); tasks f_j(mu) = sin(a_j mu) + b_j mu^2 with
    E f_j = sin(a_j m) exp(-a_j^2 s^2 / 2) + b_j (m^2 + s^2)."""
    import pymc as pm

    rng = np.random.default_rng(0)
    y = rng.normal(1.0, 1.0, size=5)
    prior_sd = 2.0
    post_var = 1 / (1 / prior_sd**2 + y.size)
    m, s2 = post_var * y.sum(), post_var
    a = np.linspace(0.5, 3.0, 24)
    b = np.linspace(-1.0, 1.0, 24)
    truth = np.sin(a * m) * np.exp(-(a**2) * s2 / 2) + b * (m**2 + s2)
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, prior_sd)
        pm.Normal("y", mu, 1.0, observed=y)
        # PyMC's NUTS, for draws that stay the same when nutpie is installed (PyMC 6 then samples with it); over
        # sampling seeds 1-6 this ratio is 0.17-0.89 on PyMC's draws and 0.40-1.35 on nutpie's (docs/limitations.md)
        idata = pm.sample(50, tune=300, chains=2, random_seed=1, progressbar=False, compute_convergence_checks=False,
                          nuts_sampler="pymc")

    def tasks(post):
        mu = np.asarray(post["mu"])[..., None]
        return np.sin(a * mu) + b * mu**2

    table = pymc_cv.summary(idata, model=model, integrands={"f": tasks}, method="metacv", progressbar=False,
                            metacv={"hidden": (16,), "meta_iterations": 800})
    assert list(table.index[:2]) == ["f[0]", "f[1]"] and len(table) == 24
    err = np.abs(table["cv_mean"].to_numpy() - truth)
    err_mc = np.abs(table["mean"].to_numpy() - truth)
    assert err.mean() <= 0.5 * err_mc.mean()
    assert set(table["method"]) <= {"metacv", "mc"}
