"""Meta-CVs for a hierarchical Gaussian-process regression: predictive means at many inputs.

Data: scikit-learn's bundled diabetes data (no download), disease progression against body-mass
index, both standardised; q = 100 training points.  GP prior k(z, z') = a^2 exp(-(z - z')^2 / (2 l^2)),
hyperpriors a, l ~ Gamma(25, 25) (as the thesis's Sarcos example), noise sd 0.8 known; NUTS on the
marginal likelihood.  Task j is the posterior predictive mean at a test input z_j,
E[f_j(x)] with f_j(x) = k_{j,q}(x) (K_qq(x) + s^2 I)^-1 y over the hyperparameters x = (log a, log l).

As when f is expensive (one q x q solve per draw and input), each task gets only N = 10 draws,
a different random subset of one NUTS run per task.  Half of the test inputs are meta-training
tasks, the other half are estimated with MC, control functionals (per task, on the same 10 draws)
and the Meta-CV.  The reference is a separate long NUTS run (4 x 2,500 draws) corrected by ZV-2.

Usage: python examples/hierarchical_gp_metacv.py   (env GP_TASKS=340, GP_N=10, GP_ITERS=3000, GP_DRAWS=1000
       draws per chain of the run the tasks come from, GP_REF_DRAWS=2500 per chain of the reference)
Small settings (for CI):  GP_TASKS=20 GP_ITERS=50 GP_DRAWS=100 GP_REF_DRAWS=250 python examples/hierarchical_gp_metacv.py
"""

from __future__ import annotations

import os
import sys
import time
import warnings

import numpy as np
import pymc as pm
from sklearn.datasets import load_diabetes

import pymc_cv

NOISE = 0.8
Q = 100


def load(seed=0):
    data = load_diabetes()
    z = data.data[:, 2]
    y = data.target
    z, y = (z - z.mean()) / z.std(), (y - y.mean()) / y.std()
    perm = np.random.default_rng(seed).permutation(z.size)
    return z[perm[:Q]], y[perm[:Q]], np.sort(z[perm[Q:]])


def build_model(z, y):
    with pm.Model() as model:
        amp = pm.Gamma("amp", 25.0, 25.0)
        ls = pm.Gamma("ls", 25.0, 25.0)
        K = amp**2 * pm.math.exp(-((z[:, None] - z[None, :]) ** 2) / (2 * ls**2)) + NOISE**2 * np.eye(z.size)
        pm.MvNormal("y", mu=np.zeros(z.size), cov=K, observed=y)
    return model


def predictive_means(amp, ls, z, y, z_test):
    """f_j at every draw: (n_draws, n_test)."""
    out = np.empty((amp.size, z_test.size))
    for i, (a, l) in enumerate(zip(amp, ls)):
        K = a**2 * np.exp(-((z[:, None] - z[None, :]) ** 2) / (2 * l**2)) + NOISE**2 * np.eye(z.size)
        alpha = np.linalg.solve(K, y)
        out[i] = (a**2 * np.exp(-((z_test[:, None] - z[None, :]) ** 2) / (2 * l**2))) @ alpha
    return out


def run(model, draws, chains, seed):
    with model:
        # PyTensor's C backend has no BLAS here: 48 ms per gradient against 1 ms with Numba
        idata = pm.sample(draws, tune=1000, chains=chains, random_seed=seed, progressbar=False,
                          compute_convergence_checks=False, compile_kwargs={"mode": "NUMBA"})
    idata = pymc_cv.compute_scores(idata, model, compile_kwargs={"mode": "NUMBA"})
    post = idata.posterior
    amp, ls = (np.asarray(post[v]).reshape(-1) for v in ("amp", "ls"))
    # variable by variable: ArviZ 1's DataTree has no selection of several variables by a list
    names = ["amp_log__", "ls_log__"]
    X = np.stack([np.asarray(idata.unconstrained_posterior[v]) for v in names], axis=-1).reshape(-1, 2)
    S = np.stack([np.asarray(idata.score[v]) for v in names], axis=-1).reshape(-1, 2)
    return amp, ls, X, S


def main():
    n_tasks = int(os.environ.get("GP_TASKS", 340))
    N = int(os.environ.get("GP_N", 10))
    iters = int(os.environ.get("GP_ITERS", 3000))
    draws = int(os.environ.get("GP_DRAWS", 1000))
    ref_draws = int(os.environ.get("GP_REF_DRAWS", 2500))
    z, y, z_all = load()
    z_test = z_all[np.linspace(0, z_all.size - 1, n_tasks).astype(int)]
    model = build_model(z, y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        start = time.perf_counter()
        amp_r, ls_r, X_r, S_r = run(model, ref_draws, 4, seed=100)
        F_r = predictive_means(amp_r, ls_r, z, y, z_test)
        ref = pymc_cv.cv_estimate(F_r, X_r, S_r, method="zv2", chain=np.repeat(np.arange(4), ref_draws))
        print(f"reference: {4 * ref_draws:,} draws, ZV-2; se of the reference <= {np.max(ref.se):.2e} "
              f"(plain MCMC se up to {np.max(ref.mc_se):.2e}); {time.perf_counter() - start:.0f} s")
        amp, ls, X, S = run(model, draws, 2, seed=1)
        F = predictive_means(amp, ls, z, y, z_test)
    rng = np.random.default_rng(0)
    picks = [rng.choice(amp.size, size=N, replace=False) for _ in range(n_tasks)]
    tasks = [(F[p, j], X[p], S[p]) for j, p in enumerate(picks)]
    train = np.arange(n_tasks) % 2 == 0
    test = np.flatnonzero(~train)
    truth = ref.estimate[test]

    start = time.perf_counter()
    mcv = pymc_cv.MetaCV(hidden=(64, 64), meta_iterations=iters, random_seed=0, progressbar=sys.stdout.isatty())
    mcv.meta_fit([tasks[j] for j in np.flatnonzero(train)])
    meta_s = time.perf_counter() - start
    start = time.perf_counter()
    res = mcv.estimate(*[[tasks[j][k] for j in test] for k in range(3)])
    adapt_s = time.perf_counter() - start
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cf = np.array([float(pymc_cv.cv_estimate(*tasks[j], method="cf").estimate) for j in test])
    cf_s = time.perf_counter() - start
    err = {"MC": np.abs(res.mc_estimate - truth), "CF": np.abs(cf - truth), "Meta-CV": np.abs(res.estimate - truth)}
    print(f"\nHierarchical GP (diabetes, q = {Q}), {test.size} test inputs, N = {N} draws per task")
    print(f"{'method':>8} {'MAE':>8} {'median':>8} {'/ MC':>6} {'seconds':>8}")
    secs = {"MC": 0.0, "CF": cf_s, "Meta-CV": adapt_s}
    for name, e in err.items():
        print(f"{name:>8} {e.mean():>8.4f} {np.median(e):>8.4f} {e.mean() / err['MC'].mean():>6.2f} {secs[name]:>8.2f}")
    print(f"Meta-CV: meta-training {meta_s:.1f} s on {train.sum()} tasks; fell back to MC on "
          f"{np.mean(res.method == 'mc'):.0%} of test tasks; 2-se interval covered the reference on "
          f"{np.mean(err['Meta-CV'] <= 2 * res.se):.0%}")


if __name__ == "__main__":
    main()
