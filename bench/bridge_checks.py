"""False alarms and coverage of ``evidence_from_draws`` (bridge sampling and its checks) on clean draws.

A Gaussian linear regression with known noise (d coefficients, 30 observations), whose posterior is normal
and whose log p(y) is a normal density.  Its posterior draws are 4 stationary AR(1) chains (autocorrelation
rho: 0 as independent draws, 0.8 as a slowly mixing sampler's); per cell, 200 replications.  Printed: how
often each check fires (the halves swapped, importance sampling disagreeing, R-hat above its limit), how
often the result is flagged, how often the reported estimate is within 2 and 3 se of the exact value, and
the median se.

Usage: python bench/bridge_checks.py [REPLICATIONS]
"""

from __future__ import annotations

import sys

import numpy as np
from scipy import stats

import pymc_cv  # noqa: F401  (installs ArviZ's diagnostics for the array layer)
from pymc_cv.evidence.posterior_draws import AGREE, RHAT_LIMIT, evidence_from_draws


def regression(d, seed=3, n=30, s=0.7, tau=2.0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = X @ rng.normal(size=d) + s * rng.normal(size=n)
    cov = np.linalg.inv(np.eye(d) / tau**2 + X.T @ X / s**2)
    mean = cov @ X.T @ y / s**2
    exact = stats.multivariate_normal(np.zeros(n), s**2 * np.eye(n) + tau**2 * X @ X.T).logpdf(y)

    def log_joint(b):
        r = y[None, :] - b @ X.T
        return stats.norm.logpdf(r, scale=s).sum(axis=1) + stats.norm.logpdf(b, scale=tau).sum(axis=1)

    return log_joint, mean, np.linalg.cholesky(cov), exact


def chains(rng, mean, L, n_chains, draws, rho):
    z = rng.normal(size=(n_chains, draws, mean.size))
    for t in range(1, draws):
        z[:, t] = rho * z[:, t - 1] + np.sqrt(1 - rho**2) * z[:, t]
    return mean + z.reshape(-1, mean.size) @ L.T, np.repeat(np.arange(n_chains), draws)


def _apart(a, b):
    return abs(a.log_evidence - b.log_evidence) / np.hypot(a.se, b.se) > AGREE


def main():
    reps = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    rng = np.random.default_rng(0)
    print("| d | draws | rho | halves swapped apart | importance apart | R-hat > limit | flagged | within 2 se "
          "| within 3 se | median se |\n" + "|---" * 10 + "|")
    for d in (3, 10):
        log_joint, mean, L, exact = regression(d)
        for draws in (500, 1000):
            for rho in (0.0, 0.5, 0.8):
                out = []
                for _ in range(reps):
                    X, chain = chains(rng, mean, L, 4, draws, rho)
                    res = evidence_from_draws(log_joint, X, chain, rng=rng)
                    imp = res.importance
                    imp_apart = imp is not None and imp.usable and _apart(res.bridge, imp)
                    z = abs(res.log_evidence - exact) / res.se
                    out.append((_apart(res.bridge, res.swapped), imp_apart, res.max_rhat > RHAT_LIMIT, not res.reliable,
                                z, res.se))
                a = np.array(out, dtype=float)
                print(f"| {d} | 4 x {draws} | {rho} | {a[:, 0].mean():.3f} | {a[:, 1].mean():.3f} "
                      f"| {a[:, 2].mean():.3f} | {a[:, 3].mean():.3f} | {np.mean(a[:, 4] <= 2):.3f} "
                      f"| {np.mean(a[:, 4] <= 3):.3f} "
                      f"| {np.median(a[:, 5]):.4f} |", flush=True)
    print(f"\n{reps} replications per row; AGREE = {AGREE} combined se, RHAT_LIMIT = {RHAT_LIMIT}")


if __name__ == "__main__":
    main()
