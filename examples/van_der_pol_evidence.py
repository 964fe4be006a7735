"""Model evidence of the van der Pol oscillator by thermodynamic integration (vv-CV paper, section 5.2).

u'' - x (1 - u^2) u' + u = 0, as u1' = u2, u2' = x (1 - u1^2) u2 - u1 with u(0) = (0, 2) (the
paper does not state its initial state); log x ~ N(0, 0.25^2); y(s) ~ N(u1(s; x), 0.1^2) at
s = 0, 1, ..., 10, simulated at x = 1.  The ODE is solved inside the PyMC model by RK4 (h = 0.05)
in a PyTensor scan, sampled with NUTS in PyTensor's Numba backend.

The reference is the evidence by one-dimensional quadrature over log x with the same RK4 solution
(and checked against scipy's solve_ivp at rtol 1e-11), not a long MCMC run.

Each replication samples the 31 power posteriors of the ladder t_i = ((i-1)/30)^5 with 80 draws
each (2 chains x 40) and estimates log p(y) from the first m = 20, 40 and 80 draws per rung
(m/2 per chain) with plain TI (MC), control functionals per rung (CF) and vv-CVs over groups of 4
neighbouring rungs (learned B).  Settings: VDP_REPS (20), VDP_DRAWS ("20,40,80"), VDP_TUNE (300 tuning
steps per chain and rung).

VDP_BACKEND=stan samples the rungs from stan_models/van_der_pol.stan with PyStan instead (Stan's
RK45 at tolerance 1e-8; the reference is then the quadrature with solve_ivp) and takes log p(y|x)
and both gradients from Stan (pymc_cv.ti_from_pystan).

VDP_SAMPLER=population (PyMC backend) samples all rungs together by population MCMC with exchange
moves (pymc_cv.sample_population) instead of an independent NUTS run per rung.

Usage: python examples/van_der_pol_evidence.py
Small settings (for CI):  VDP_REPS=1 VDP_DRAWS=20 VDP_TUNE=100 python examples/van_der_pol_evidence.py
"""

from __future__ import annotations

import os
import time
import warnings
from pathlib import Path

import numpy as np
import pymc as pm
import pytensor.tensor as pt
from scipy import integrate, stats

import pymc_cv
from pymc_cv.compat import scan_outputs
from pymc_cv.evidence import power_ladder, ti_from_arrays

S_OBS = np.arange(11.0)
H = 0.05
U0 = np.array([0.0, 2.0])
NOISE = 0.1
PRIOR_SD = 0.25
STEPS_PER_UNIT = int(round(1 / H))


def _field(u, x):
    """The van der Pol field."""
    return np.array([u[1], x * (1 - u[0] ** 2) * u[1] - u[0]])


def rk4_numpy(x):
    """u1 at S_OBS by the same RK4 as the model, shape (11,) + np.shape(x) (x may be an array:
    one solve for all its values)."""
    x = np.asarray(x, dtype=float)
    u = np.multiply.outer(U0, np.ones_like(x))
    out = [u[0]]
    for _ in range(10):
        for _ in range(STEPS_PER_UNIT):
            k1 = _field(u, x)
            k2 = _field(u + H / 2 * k1, x)
            k3 = _field(u + H / 2 * k2, x)
            k4 = _field(u + H * k3, x)
            u = u + H / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
        out.append(u[0])
    return np.array(out)


def damped_linear(x):
    """u1 at S_OBS of the damped linear oscillator u'' + x u' + u = 0 in closed form, shape (11,) +
    np.shape(x): 2 e^(-x s / 2) sin(w s) / w with w = sqrt(1 - x^2 / 4), or sinh and sqrt(x^2 / 4 - 1)
    past critical damping (x > 2)."""
    x = np.asarray(x, dtype=float)
    s = S_OBS.reshape((-1,) + (1,) * x.ndim)
    w2 = 1 - x**2 / 4
    w = np.sqrt(np.abs(w2))
    return 2 * np.exp(-x * s / 2) * np.where(w2 > 0, np.sin(w * s), np.sinh(w * s)) / w


def solve_exact(x):
    sol = integrate.solve_ivp(lambda s, u: _field(u, x), (0, 10), U0, t_eval=S_OBS, rtol=1e-11, atol=1e-12,
                              method="DOP853")
    return sol.y[0]


def simulate(seed=0, x_true=1.0):
    return solve_exact(x_true) + NOISE * np.random.default_rng(seed).normal(size=S_OBS.size)


def loglik_numpy(x, y, solver=rk4_numpy):
    """log p(y | x); for an array x (with the vectorised ``rk4_numpy``) an array of the same shape."""
    if np.ndim(x) == 0:
        return float(stats.norm(solver(x), NOISE).logpdf(y).sum())
    return stats.norm(solver(x), NOISE).logpdf(np.reshape(y, (-1,) + (1,) * np.ndim(x))).sum(axis=0)


def log_evidence_quadrature(y, solver=rk4_numpy):
    """log int p(y|x) p(x) dx over z = log x ~ N(0, 0.25^2) and its relative error.  A ``solver`` that
    takes an array of x (one solve for every node, as ``rk4_numpy``) gets composite Gauss-Legendre
    over where the integrand is within e^-60 of its largest value on a grid, the error from the same
    rule on half as many panels; a scalar one (``solve_exact``) adaptive quadrature."""
    prior = stats.norm(0, PRIOR_SD)
    # a wide range: a poor model's posterior can sit far in the prior's tail (the damped linear
    # oscillator of the notebook prefers x near 0, z = log x below -8 prior sds)
    zs = np.linspace(-10.0, 3.0, 1301)
    try:
        lls = loglik_numpy(np.exp(zs), y, solver)
        vectorised = np.shape(lls) == zs.shape
    except (TypeError, ValueError):
        vectorised = False
    if not vectorised:
        return _adaptive_quadrature(y, solver, zs, prior)
    lp = lls + prior.logpdf(zs)
    inside = np.flatnonzero(lp > lp.max() - 60)
    a, b = zs[max(inside[0] - 1, 0)], zs[min(inside[-1] + 1, zs.size - 1)]
    nodes, weights = np.polynomial.legendre.leggauss(20)

    def integral(panels, shift):
        edges = np.linspace(a, b, panels + 1)
        half, mid = np.diff(edges)[:, None] / 2, (edges[:-1] + edges[1:])[:, None] / 2
        z = (mid + half * nodes).ravel()
        return np.sum((half * weights).ravel() * np.exp(loglik_numpy(np.exp(z), y, solver) + prior.logpdf(z) - shift))

    shift = lp.max()
    fine, coarse = integral(400, shift), integral(200, shift)
    return shift + np.log(fine), abs(fine - coarse) / fine


def _adaptive_quadrature(y, solver, zs, prior):
    lls = np.array([loglik_numpy(np.exp(z), y, solver) for z in zs])
    shift = lls.max()

    def integrand(z):
        return np.exp(loglik_numpy(np.exp(z), y, solver) - shift) * prior.pdf(z)

    peak = zs[np.argmax(lls + prior.logpdf(zs))]
    val, err = integrate.quad(integrand, zs[0], zs[-1], points=[peak], limit=400, epsabs=0, epsrel=1e-10)
    return shift + np.log(val), err / val


def build_model(y, kind="van_der_pol"):
    """The van der Pol model (RK4 in a scan), or (kind="linear") the damped linear oscillator, whose
    solution is in closed form (:func:`damped_linear`)."""
    with pm.Model() as model:
        x = pm.LogNormal("x", 0.0, PRIOR_SD)
        if kind == "linear":
            s = pt.as_tensor(S_OBS)
            w2 = 1 - x**2 / 4
            w = pt.sqrt(pt.abs(w2))
            u1 = 2 * pt.exp(-x * s / 2) * pt.switch(w2 > 0, pt.sin(w * s), pt.sinh(w * s)) / w
        else:
            def step(u, x):
                def f(v):
                    return pt.stack([v[1], x * (1 - v[0] ** 2) * v[1] - v[0]])

                k1 = f(u)
                k2 = f(u + H / 2 * k1)
                k3 = f(u + H / 2 * k2)
                k4 = f(u + H * k3)
                return u + H / 6 * (k1 + 2 * k2 + 2 * k3 + k4)

            traj = scan_outputs(step, outputs_info=[pt.as_tensor(U0)], non_sequences=[x], n_steps=10 * STEPS_PER_UNIT)
            u1 = pt.concatenate([pt.as_tensor(U0[:1]), traj[STEPS_PER_UNIT - 1 :: STEPS_PER_UNIT, 0]])
        pm.Normal("y", u1, NOISE, observed=y)
    return model


def subsample(draws, m):
    """The first m/2 draws of each of the 2 chains of every rung."""
    out = {k: [] for k in ("loglik", "samples", "grad_loglik", "grad_logprior", "chain")}
    for i in range(len(draws["loglik"])):
        ch = draws["chain"][i]
        keep = np.concatenate([np.flatnonzero(ch == c)[: m // 2] for c in np.unique(ch)])
        for k in out:
            out[k].append(draws[k][i][keep])
    return out


def stan_rungs(t, y, draws, seed, tune=300):
    """One PyStan fit per temperature of stan_models/van_der_pol.stan, and their TI terms."""
    import stan

    from pymc_cv.stan.evidence import ti_from_pystan

    program = (Path(__file__).parents[1] / "stan_models" / "van_der_pol.stan").read_text()
    data = {"S": 10, "s_obs": list(map(float, S_OBS[1:])), "y": y.tolist(), "temperature": 1.0}
    fits = []
    for i, ti in enumerate(t):
        posterior = stan.build(program, data={**data, "temperature": float(ti)}, random_seed=1000 * seed + i)
        fits.append(posterior.sample(num_chains=2, num_samples=draws // 2, num_warmup=tune, init=[{"x": 1.0}] * 2))
    return ti_from_pystan(fits, program, data, t, method="mc", progressbar=False)


def main():
    backend = os.environ.get("VDP_BACKEND", "pymc")
    sampler = os.environ.get("VDP_SAMPLER", "nuts")
    reps = int(os.environ.get("VDP_REPS", 20))
    ms = [int(v) for v in os.environ.get("VDP_DRAWS", "20,40,80").split(",")]
    tune = int(os.environ.get("VDP_TUNE", 300))
    y = simulate(0)
    truth, rel = log_evidence_quadrature(y)
    exact, _ = log_evidence_quadrature(y, solve_exact)
    if backend == "stan":
        truth = exact  # Stan's RK45 at tolerance 1e-8 is the exact ODE solution to that accuracy
    print(f"reference log p(y) = {truth:.8f} (quadrature rel. error {rel:.1e}; with solve_ivp instead of "
          f"RK4: {exact:.8f})")
    model = build_model(y)
    t = power_ladder(31)
    methods = {"MC": "mc", "CF": "cf", "vv-CV": "vvcv"}
    est = {(name, m): [] for name in methods for m in ms}
    secs = {(name, m): 0.0 for name in methods for m in ms}
    sampling = 0.0
    for rep in range(reps):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            start = time.perf_counter()
            if backend == "stan":
                base = stan_rungs(t, y, max(ms), rep, tune)
                base.seconds["sampling"] = time.perf_counter() - start
            else:
                base = pymc_cv.thermodynamic_integration(
                    model, t, draws=max(ms) // 2, tune=tune, chains=2, method="mc", random_seed=rep,
                    sampler=sampler, progressbar=False, compile_kwargs={"mode": "NUMBA"},
                )
            sampling += time.perf_counter() - start
            for m in ms:
                d = subsample(base.draws, m)
                for name, method in methods.items():
                    start = time.perf_counter()
                    r = ti_from_arrays(t, **d, method=method, random_seed=rep)
                    secs[(name, m)] += time.perf_counter() - start
                    est[(name, m)].append(r.log_evidence)
        line = "  ".join(f"{name} m={m}: {est[(name, m)][-1] - truth:+.4f}" for m in ms for name in methods)
        line += f"  ({base.seconds['sampling']:.0f} s sampling)"
        print(f"rep {rep:2d}: {line}", flush=True)

    how = sampler if backend == "pymc" else "NUTS per rung"
    print(f"\nvan der Pol ({backend}, {how}), 31 rungs, {reps} replications; reference log p(y) = {truth:.4f}; "
          f"sampling {sampling / reps:.1f} s per replication (31 rungs x {max(ms)} draws)")
    print(f"{'m per rung':>10} {'method':>6} {'sd':>8} {'bias':>8} {'rmse':>8} {'seconds':>8}")
    for m in ms:
        for name in methods:
            e = np.array(est[(name, m)]) - truth
            print(f"{m:>10} {name:>6} {e.std(ddof=1) if e.size > 1 else np.nan:>8.4f} {e.mean():>8.4f} "
                  f"{np.sqrt(np.mean(e ** 2)):>8.4f} {secs[(name, m)] / reps:>8.2f}")
    print("Paper (Fig. 2, box plots only): CVs relatively accurate but their central 50% excludes the truth; "
          "vv-CVs much more concentrated and centred on the truth.")


if __name__ == "__main__":
    main()
