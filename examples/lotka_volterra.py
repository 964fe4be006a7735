"""Lotka-Volterra on the Hudson Bay hare-lynx data (vv-CV paper, section 5.3 and Table 3).

Model: 8 unconstrained parameters (log rates alpha, beta, gamma, delta; log initial
populations; log noise sds), log-normal observations of hares (prey) and lynx (predators)
1900-1920.  The ODE is solved inside the model by a fixed-step RK4 (h = 0.5 years) written in
PyTensor, so NUTS gets exact gradients; PyTensor's Numba backend compiles the loop.

Integrands: expected prey abundance at T = 2, 5, 10 times in 1912-1913.8 (paper's Table 3),
computed after sampling with an accurate RK4 (h = 0.01) at every posterior draw.  Estimators
on the same draws: the MCMC mean, a control functional per time point, and vv-CVs across the
T time points (shared draws: the Kronecker fast path) with fixed and with learned B.
Errors are against a long reference run; the table shows the summed absolute error over the
T time points, averaged over replications, next to the paper's.  The reference is a long run
corrected by a ZV-2 control variate (its se is printed; the plain long-run mean was not
accurate enough to measure CV errors).

The same from Stan: LV_BACKEND=stan samples stan_models/lotka_volterra.stan (the same model, the same
fixed-step RK4) with PyStan and takes the scores from Stan through pymc_cv.from_pystan.

Run:  python examples/lotka_volterra.py          (LV_BACKEND=stan for the Stan version)
Small settings (for CI):  LV_REPS=2 LV_DRAWS=200 LV_REF_DRAWS=1000 python examples/lotka_volterra.py
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import numpy as np
import pymc as pm
import pytensor.tensor as pt

import pymc_cv
from pymc_cv.compat import scan_outputs

logging.getLogger("pymc").setLevel(logging.ERROR)

DATA = Path(__file__).parent / "data" / "hudson-bay-lynx-hare.csv"
STAN_PROGRAM = Path(__file__).parents[1] / "stan_models" / "lotka_volterra.stan"
H_MODEL = 0.5
TASKS = {
    2: [1913.0, 1913.2],
    5: [1912.0, 1912.2, 1912.4, 1912.6, 1912.8],
    10: [1912.0 + 0.2 * i for i in range(10)],
}
PAPER = {2: (0.568, 0.666, 0.404, 0.462), 5: (0.987, 0.521, 0.419, 0.393), 10: (2.663, 2.540, 1.031, 0.938)}
# plausible starting values (FINDINGS: random inits can stall chains in a stiff region)
INIT = {"log_alpha": -0.6, "log_beta": -3.6, "log_gamma": -0.2, "log_delta": -3.7,
        "log_v0": np.array([3.5, 1.8]), "log_sigma": np.array([-1.4, -1.4])}


def load_data():
    data = np.loadtxt(DATA, delimiter=",", comments="#", skiprows=3)
    return data[:, 0], data[:, 2], data[:, 1]  # years, hare (prey), lynx (predator)


def _rk4_step(v, h, alpha, beta, gamma, delta, stack):
    def f(u):
        return stack([alpha * u[0] - beta * u[0] * u[1], delta * u[0] * u[1] - gamma * u[1]])

    k1 = f(v)
    k2 = f(v + 0.5 * h * k1)
    k3 = f(v + 0.5 * h * k2)
    k4 = f(v + h * k3)
    return v + h / 6.0 * (k1 + 2 * k2 + 2 * k3 + k4)


def build_model(years, hare, lynx):
    n_steps = int(round((years[-1] - years[0]) / H_MODEL))
    obs = np.round((years - years[0]) / H_MODEL).astype(int)
    with pm.Model() as model:
        la = pm.Normal("log_alpha", 0.0, 0.5)
        lb = pm.Normal("log_beta", -3.0, 0.5)
        lg = pm.Normal("log_gamma", 0.0, 0.5)
        ld = pm.Normal("log_delta", -3.0, 0.5)
        lv0 = pm.Normal("log_v0", np.log(10.0), 1.0, shape=2)
        ls = pm.Normal("log_sigma", -1.0, 1.0, shape=2)

        def step(v, a, b, g, d):
            return _rk4_step(v, H_MODEL, a, b, g, d, pt.stack)

        v0 = pt.exp(lv0)
        traj = scan_outputs(step, outputs_info=[v0], n_steps=n_steps,
                            non_sequences=[pt.exp(la), pt.exp(lb), pt.exp(lg), pt.exp(ld)])
        traj = pt.concatenate([v0[None], traj], axis=0)
        pm.LogNormal("hare", pt.log(traj[obs, 0]), pt.exp(ls[0]), observed=hare)
        pm.LogNormal("lynx", pt.log(traj[obs, 1]), pt.exp(ls[1]), observed=lynx)
    return model


def prey_at(post, times, start_year, h=0.01):
    """Prey abundance v1(t) at each posterior draw, by RK4 vectorised over draws: (chain, draw, len(times))."""
    p = {k: np.asarray(post[k]) for k in ("log_alpha", "log_beta", "log_gamma", "log_delta", "log_v0")}
    a, b, g, d = (np.exp(p[k]) for k in ("log_alpha", "log_beta", "log_gamma", "log_delta"))
    v = np.exp(np.moveaxis(p["log_v0"], -1, 0))  # (2, chain, draw)
    offsets = np.asarray(times) - start_year
    n_steps = int(round(offsets.max() / h))
    want = {int(round(o / h)): i for i, o in enumerate(offsets)}
    out = np.empty(a.shape + (len(times),))
    for k in range(n_steps + 1):
        if k in want:
            out[..., want[k]] = v[0]
        v = _rk4_step(v, h, a, b, g, d, np.stack)
    return out


def sample(model, draws, chains, seed):
    return pm.sample(draws=draws, tune=max(draws, 500), chains=chains, cores=min(chains, 2), model=model,
                     initvals=INIT, random_seed=seed, progressbar=False, compute_convergence_checks=False,
                     compile_kwargs={"mode": "NUMBA"})


def stan_data(years, hare, lynx):
    n_steps = int(round((years[-1] - years[0]) / H_MODEL))
    obs = np.round((years - years[0]) / H_MODEL).astype(int)
    return {"n_steps": n_steps, "h": H_MODEL, "N": len(years), "obs": obs.tolist(), "hare": list(map(float, hare)),
            "lynx": list(map(float, lynx))}


def fit_with_scores(backend, years, hare, lynx, draws, chains, seed, model=None):
    """Posterior draws with the unconstrained draws and scores, from PyMC or from Stan."""
    if backend == "stan":
        import stan

        posterior = stan.build(STAN_PROGRAM.read_text(), data=stan_data(years, hare, lynx), random_seed=seed)
        init = {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in INIT.items()}
        fit = posterior.sample(num_chains=chains, num_samples=draws, num_warmup=max(draws, 500), init=[init] * chains)
        return pymc_cv.from_pystan(fit, posterior)
    idata = sample(model, draws, chains, seed)
    # a fresh model: compiling the sampler rewrites the shared Scan's inner graph in place,
    # after which its gradient can no longer be built
    return pymc_cv.compute_scores(idata, build_model(years, hare, lynx), compile_kwargs={"mode": "NUMBA"})


def main():
    backend = os.environ.get("LV_BACKEND", "pymc")
    if backend not in ("pymc", "stan"):
        raise SystemExit(f"LV_BACKEND={backend!r}; use 'pymc' or 'stan'.")
    reps = int(os.environ.get("LV_REPS", 10))
    draws = int(os.environ.get("LV_DRAWS", 250))
    ref_draws = int(os.environ.get("LV_REF_DRAWS", 20000))
    years, hare, lynx = load_data()
    model = build_model(years, hare, lynx)
    all_times = sorted({t for ts in TASKS.values() for t in ts})

    t0 = time.perf_counter()
    # The plain mean of the long run has an mcse comparable to the CV errors being measured, so
    # the reference is the long run corrected by a second-order ZV-CV (least squares: another
    # method family than the kernel CVs judged here, on independent draws).
    ref = fit_with_scores(backend, years, hare, lynx, ref_draws // 4, 4, 12345, model)
    ref_sec = time.perf_counter() - t0
    Xr, Sr = pymc_cv.idata_groups.stacked_draws_and_scores(ref)
    nr = Xr.shape[0] * Xr.shape[1]
    ref_prey = prey_at(ref.posterior, all_times, years[0]).reshape(nr, -1)
    ref_chain = np.repeat(np.arange(Xr.shape[0]), Xr.shape[1])
    ref_cv = pymc_cv.cv_estimate(ref_prey, Xr.reshape(nr, -1), Sr.reshape(nr, -1), method="zv2", chain=ref_chain)
    truth = dict(zip(all_times, ref_cv.estimate))
    print(f"reference: {ref_draws} NUTS draws in {ref_sec:.0f} s; per time point, plain-mean mcse up to "
          f"{ref_cv.mc_se.max():.3g}, ZV-2 reference se up to {ref_cv.se.max():.3g}")

    err = {T: {k: [] for k in ("mcmc", "cf", "vv_fix", "vv_learn")} for T in TASKS}
    secs = {k: 0.0 for k in ("sample", "cf", "vv_fix", "vv_learn")}
    B_fixed = None
    for rep in range(reps):
        t = time.perf_counter()
        idata = fit_with_scores(backend, years, hare, lynx, draws // 2, 2, rep, model)
        secs["sample"] += time.perf_counter() - t
        X, S = pymc_cv.idata_groups.stacked_draws_and_scores(idata)
        n = X.shape[0] * X.shape[1]
        X, S = X.reshape(n, -1), S.reshape(n, -1)
        chain = np.repeat(np.arange(idata.posterior.sizes["chain"]), idata.posterior.sizes["draw"])
        for T, times in TASKS.items():
            prey = prey_at(idata.posterior, times, years[0]).reshape(n, T)
            tv = np.array([truth[t] for t in times])
            err[T]["mcmc"].append(np.abs(prey.mean(axis=0) - tv).sum())
            t = time.perf_counter()
            cf = np.array([float(pymc_cv.cv_estimate(prey[:, i], X, S, method="cf", chain=chain).estimate)
                           for i in range(T)])
            secs["cf"] += time.perf_counter() - t
            err[T]["cf"].append(np.abs(cf - tv).sum())
            B_fixed = 0.1 * np.ones((T, T)) + 0.9 * np.eye(T)  # the paper's 10:1 ratio of B_tt to B_tt'
            for key, B in (("vv_fix", B_fixed), ("vv_learn", "learn")):
                t = time.perf_counter()
                res = pymc_cv.vvcv_estimate(list(prey.T), [X] * T, [S] * T, B=B, chain=[chain] * T)
                secs[key] += time.perf_counter() - t
                err[T][key].append(np.abs(res.estimate - tv).sum())
        print(f"replication {rep + 1}/{reps} done", flush=True)

    print(f"\nExpected prey abundance ({backend}), sum over T time points of the absolute error, mean of {reps} "
          f"replications of {draws} NUTS draws (paper: m = 500, 10 replications)")
    print(f"{'T':>3} | {'MCMC':>7} {'CF':>7} {'vv fixB':>8} {'vv estB':>8} | {'vv estB/MCMC':>12} | "
          f"paper: {'MCMC':>6} {'CF':>6} {'fixB':>6} {'estB':>6}")
    for T in TASKS:
        m = {k: np.mean(v) for k, v in err[T].items()}
        p = PAPER[T]
        print(f"{T:>3} | {m['mcmc']:>7.3f} {m['cf']:>7.3f} {m['vv_fix']:>8.3f} {m['vv_learn']:>8.3f} | "
              f"{m['vv_learn'] / m['mcmc']:>12.3f} | {'':>6} {p[0]:>6.3f} {p[1]:>6.3f} {p[2]:>6.3f} {p[3]:>6.3f}")
    print(f"\nseconds per replication: NUTS sampling and scores {secs['sample'] / reps:.1f} (incl. compile), CF {secs['cf'] / reps:.2f}, vv-CV fixed B {secs['vv_fix'] / reps:.2f}, "
          f"vv-CV learned B {secs['vv_learn'] / reps:.2f} (all three T)")


if __name__ == "__main__":
    main()
