"""Do TI standard errors cover?  Log evidence of a conjugate Gaussian regression, exact draws.

y = X beta + eps, beta ~ N(0, tau^2 I_d), eps ~ N(0, sigma^2 I): every power posterior is Gaussian,
so its draws are exact, and log p(y) = log N(y; 0, sigma^2 I + tau^2 X X') is known.  ``rungs``
rungs of the power ladder, ``draws`` independent draws per rung, ``ti_from_arrays`` with each
per-rung estimator; per method: 2-se coverage of the log evidence, share flagged reliable,
median |error| / |plain TI error|, and seconds.

    python bench/ti_coverage.py [reps=20] [draws=100] [rungs=11]
"""

from __future__ import annotations

import sys
import time
import warnings

import numpy as np
from scipy import stats

import pymc_cv
from pymc_cv.evidence import power_ladder

METHODS = ("cti", "cf", "secf", "auto", "vvcv")


def problem(rng, d=3, n_obs=20, tau=2.0, sigma=1.0):
    X = rng.normal(size=(n_obs, d))
    y = X @ rng.normal(0, tau, size=d) + rng.normal(0, sigma, size=n_obs)
    exact = stats.multivariate_normal(np.zeros(n_obs), sigma ** 2 * np.eye(n_obs) + tau ** 2 * X @ X.T).logpdf(y)
    return X, y, tau, sigma, exact


def rung_arrays(X, y, tau, sigma, t, draws, rng):
    d = X.shape[1]
    out = {"loglik": [], "samples": [], "grad_loglik": [], "grad_logprior": []}
    for ti in t:
        prec = np.eye(d) / tau ** 2 + ti * X.T @ X / sigma ** 2
        cov = np.linalg.inv(prec)
        mean = cov @ (ti * X.T @ y / sigma ** 2)
        b = rng.multivariate_normal(mean, cov, size=draws)
        r = y[None, :] - b @ X.T
        out["loglik"].append(np.sum(stats.norm.logpdf(r, scale=sigma), axis=1))
        out["samples"].append(b)
        out["grad_loglik"].append(r @ X / sigma ** 2)
        out["grad_logprior"].append(-b / tau ** 2)
    return out


def main(reps=20, draws=100, rungs=11):
    t = power_ladder(rungs)
    rows = {m: {"z": [], "ok": [], "ratio": [], "sec": 0.0} for m in METHODS}
    for rep in range(reps):
        rng = np.random.default_rng(rep)
        X, y, tau, sigma, exact = problem(rng)
        arrays = rung_arrays(X, y, tau, sigma, t, draws, rng)
        for m in METHODS:
            start = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                res = pymc_cv.ti_from_arrays(t, **arrays, method=m, random_seed=rep)
            rows[m]["sec"] += time.perf_counter() - start
            rows[m]["z"].append(abs(res.log_evidence - exact) / res.se)
            rows[m]["ok"].append(res.reliable)
            rows[m]["ratio"].append(abs(res.log_evidence - exact) / abs(res.mc_log_evidence - exact))
    print(f"TI log evidence, conjugate regression (d = 3), {rungs} rungs x {draws} exact draws, {reps} reps\n")
    print("| method | 2-se coverage (all) | coverage among reliable | share reliable | median err / plain TI err | s per run |")
    print("|---|---|---|---|---|---|")
    for m, r in rows.items():
        z, ok = np.array(r["z"]), np.array(r["ok"])
        cov_rel = f"{np.mean(z[ok] <= 2):.0%}" if ok.any() else "n/a"
        print(f"| {m} | {np.mean(z <= 2):.0%} | {cov_rel} | {ok.mean():.0%} | {np.median(r['ratio']):.3g} "
              f"| {r['sec'] / reps:.2f} |")


if __name__ == "__main__":
    args = [int(a) for a in sys.argv[1:]]
    main(*args)
