"""`summary`'s first call against the sampler as the user ran it, across sizes: seconds, memory, accuracy.

Cells: hierarchical normal models with J groups (d = J + 2) and linear regressions with p
coefficients and an unknown noise scale (d = p + 1), each sampled by ``pm.sample`` with nutpie (its
stored gradients kept, compilation included in its seconds) at 4 chains x the given draws.  Exact
posterior means and sds by 1-d quadrature over the scale (given it, the rest is Gaussian).

Each cell runs in a fresh process: the sampler's wall time, then ``summary``'s first call in that
process, its ratio to the sampler's, the peak resident memory above the level before ``summary``
(Linux's VmHWM, reset just before the call) beside the bytes of the draws and scores, the methods
chosen, median |CV error| / |MCMC error| of the means against the exact ones, and the 2-se coverage
of the CV means (se = cv_mcse + bias_allowance) and of the plain means (mcse_mean).

Usage: python bench/scaling_grid.py [cell ...]
       cells: hier:J:draws or reg:p:draws (default: the grid of issue 93 up to J = 1,000 and
       4 x 25,000 draws; add hier:10000:1000, reg:10:100000 by name)
Run it alone on the machine: timings next to other heavy jobs are not comparable.
"""

import json
import os
import subprocess
import sys
import time
import warnings

import numpy as np
from scipy import special, stats

DEFAULT = ["hier:10:1000", "hier:100:1000", "hier:1000:1000", "reg:10:1000", "reg:30:1000", "reg:10:25000",
           "reg:30:25000"]


def _weights(logw):
    w = np.exp(logw - special.logsumexp(logw))
    return w / w.sum()


def hierarchical(J, seed=0):
    """y_j ~ N(theta_j, s_j), theta_j ~ N(mu, tau), mu ~ N(0, 5), tau ~ HalfNormal(5): data, exact means, sds."""
    rng = np.random.default_rng(seed)
    s = rng.uniform(0.5, 2.0, J)
    y = 1.0 + rng.normal(size=J) + s * rng.normal(size=J)
    u = np.linspace(np.log(0.05), np.log(20.0), 4001)  # log tau
    tau = np.exp(u)[:, None]
    v = s**2 + tau**2  # (G, J): y_j | mu, tau ~ N(mu, v_j); mu ~ N(0, 25)
    a = np.sum(1 / v, axis=1)
    b = np.sum(y / v, axis=1)
    # log N(y | 0, diag(v) + 25 11') by Sherman-Morrison
    logml = -0.5 * (np.sum(np.log(v), axis=1) + np.log1p(25 * a) + np.sum(y**2 / v, axis=1)
                    - 25 * b**2 / (1 + 25 * a) + J * np.log(2 * np.pi))
    logw = logml + stats.halfnorm(scale=5).logpdf(tau[:, 0]) + u
    w = _weights(logw)
    prec = 1 / 25 + a
    m_mu, v_mu = b / prec, 1 / prec
    c = (1 / tau**2) / (1 / tau**2 + 1 / s**2)  # theta_j = c_j mu + (1 - c_j) y_j + noise
    noise = 1 / (1 / tau**2 + 1 / s**2)
    m_th = c * m_mu[:, None] + (1 - c) * y
    v_th = c**2 * v_mu[:, None] + noise
    means = {"mu": w @ m_mu, "tau": w @ tau[:, 0]}
    sds = {"mu": np.sqrt(w @ (v_mu + m_mu**2) - means["mu"] ** 2),
           "tau": np.sqrt(w @ tau[:, 0] ** 2 - means["tau"] ** 2)}
    mt = w @ m_th
    st = np.sqrt(w @ (v_th + m_th**2) - mt**2)
    for j in range(J):
        means[f"theta[{j}]"], sds[f"theta[{j}]"] = mt[j], st[j]
    return (y, s), means, sds


def regression(p, seed=0, n=200):
    """y ~ N(X b, sigma), b ~ N(0, 5), sigma ~ HalfNormal(2): data, exact means, sds."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, p))
    y = X @ rng.normal(size=p) + 1.5 * rng.normal(size=n)
    u = np.linspace(np.log(0.3), np.log(8.0), 4001)
    XtX, Xty, yty = X.T @ X, X.T @ y, y @ y
    logw, mb, vb = [], [], []
    for sig in np.exp(u):
        Lam = XtX / sig**2 + np.eye(p) / 25
        L = np.linalg.cholesky(Lam)
        m = np.linalg.solve(Lam, Xty / sig**2)
        ll = (-0.5 * n * np.log(2 * np.pi * sig**2) - 0.5 * yty / sig**2 + 0.5 * m @ Lam @ m
              - np.sum(np.log(np.diag(L))) - 0.5 * p * np.log(25))
        logw.append(ll + stats.halfnorm(scale=2).logpdf(sig) + np.log(sig))
        mb.append(m)
        vb.append(np.diag(np.linalg.inv(Lam)))
    w = _weights(np.array(logw))
    mb, vb, sig = np.array(mb), np.array(vb), np.exp(u)
    means = {"sigma": w @ sig}
    sds = {"sigma": np.sqrt(w @ sig**2 - means["sigma"] ** 2)}
    m = w @ mb
    sd = np.sqrt(w @ (vb + mb**2) - m**2)
    for k in range(p):
        means[f"b[{k}]"], sds[f"b[{k}]"] = m[k], sd[k]
    return (X, y), means, sds


def _peak_reset():
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def _status(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key):
                return int(line.split()[1]) * 1024
    return 0


def run_cell(cell):
    warnings.simplefilter("ignore")
    import pymc as pm

    import pymc_cv

    kind, size, draws = cell.split(":")
    size, draws = int(size), int(draws)
    if kind == "hier":
        (y, s), means, sds = hierarchical(size)
        with pm.Model() as model:
            mu = pm.Normal("mu", 0, 5)
            tau = pm.HalfNormal("tau", 5)
            theta = pm.Normal("theta", mu, tau, shape=size)
            pm.Normal("y", theta, s, observed=y)
    else:
        (X, y), means, sds = regression(size)
        with pm.Model() as model:
            b = pm.Normal("b", 0, 5, shape=size)
            sigma = pm.HalfNormal("sigma", 2)
            pm.Normal("y", X @ b, sigma, observed=y)
    t0 = time.perf_counter()
    with model:
        idata = pm.sample(draws, tune=1000, chains=4, random_seed=1, progressbar=False,
                          **pymc_cv.nutpie_with_gradients())
    t_sample = time.perf_counter() - t0
    d = sum(int(np.prod(v.shape[2:])) for v in idata.posterior.data_vars.values())
    data_bytes = 2 * 4 * draws * d * 8
    before = _status("VmRSS")
    _peak_reset()
    t0 = time.perf_counter()
    table = pymc_cv.summary(idata, progressbar=False)
    t_summary = time.perf_counter() - t0
    peak = _status("VmHWM") - before
    labels = [k for k in means if k in table.index]
    truth = np.array([means[k] for k in labels])
    t = table.loc[labels]
    cv_err = np.abs(t["cv_mean"].to_numpy() - truth)
    mc_err = np.abs(t["mean"].to_numpy() - truth)
    se = t["cv_mcse"].to_numpy() + (t["bias_allowance"].to_numpy() if "bias_allowance" in t else 0.0)
    methods = t["method"].value_counts()
    return {
        "cell": cell, "d": d, "rows": len(table), "sample_s": t_sample, "summary_s": t_summary,
        "peak_gb": peak / 1e9, "data_gb": data_bytes / 1e9,
        "ratio": float(np.median(cv_err / mc_err)),
        "cover_cv": float(np.mean(cv_err <= 2 * se)),
        "cover_mc": float(np.mean(mc_err <= 2 * t["mcse_mean"].to_numpy())),
        "worst_z": float(np.max((cv_err / se)[t["se_reliable"].to_numpy()], initial=0.0)),
        "methods": ", ".join(f"{m} {c}" for m, c in methods.items()),
    }


def main():
    if len(sys.argv) > 2 and sys.argv[1] == "--cell":
        print("RESULT " + json.dumps(run_cell(sys.argv[2])), flush=True)
        return
    cells = sys.argv[1:] or DEFAULT
    print("| cell | d | rows | pm.sample (nutpie) s | summary s | ratio | peak above GB | draws+scores GB | "
          "median CV err / MC err | 2-se cover CV | 2-se cover MC | worst |z| reliable | methods |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for cell in cells:
        out = subprocess.run([sys.executable, __file__, "--cell", cell], capture_output=True, text=True,
                             env={**os.environ, "PYTHONWARNINGS": "ignore"})
        line = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")]
        if not line:
            print(f"| {cell} | failed: {out.stderr.strip().splitlines()[-1] if out.stderr.strip() else '?'} |")
            continue
        r = json.loads(line[0][7:])
        print(f"| {r['cell']} | {r['d']} | {r['rows']} | {r['sample_s']:.1f} | {r['summary_s']:.1f} | "
              f"{r['summary_s'] / r['sample_s']:.2f} | {r['peak_gb']:.2f} | {r['data_gb']:.3f} | {r['ratio']:.3g} | "
              f"{r['cover_cv']:.2f} | {r['cover_mc']:.2f} | {r['worst_z']:.1f} | {r['methods']} |", flush=True)


if __name__ == "__main__":
    main()
