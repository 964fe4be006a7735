"""Quickstart: control variates on draws from a 2-d Gaussian, and vv-CVs across 5 related integrals.

Run:  python examples/quickstart.py
"""

import time

import numpy as np

import pymc_cv

rng = np.random.default_rng(0)
x = rng.normal(size=(100, 2))  # 100 draws from N(0, I); the score of N(0, I) is -x
f = np.sin(x[:, 0]) + np.cos(x[:, 1])
truth = np.exp(-0.5)

print("One integral, E[sin x1 + cos x2] under N(0, I), n = 100")
print(f"{'method':>6} {'estimate':>10} {'se':>9} {'|error|':>9} {'error/MC':>9} {'seconds':>8}")
for method in ["mc", "zv1", "zv2", "cf", "secf", "auto"]:
    t0 = time.perf_counter()
    res = pymc_cv.cv_estimate(f, x, -x, method=method)
    sec = time.perf_counter() - t0
    err, mc_err = abs(res.estimate - truth), abs(res.mc_estimate - truth)
    print(f"{str(res.method):>6} {float(res.estimate):>10.6f} {float(res.se):>9.2g} {err:>9.2g} {err / mc_err:>9.2g} {sec:>8.2f}")

print("\nFive integrals E[sin(x1 + t) + t x2^2], t = 0..1, sharing the same 60 draws (vv-CV, learned B)")
x = rng.normal(size=(60, 2))
ts = np.linspace(0, 1, 5)
values = [np.sin(x[:, 0] + t) + t * x[:, 1] ** 2 for t in ts]
truths = np.exp(-0.5) * np.sin(ts) + ts
res = pymc_cv.vvcv_estimate(values, [x] * 5, [-x] * 5, B="learn")
print(res)
print("sum |error|: vv-CV %.2g, MC %.2g" % (np.abs(res.estimate - truths).sum(), np.abs(res.mc_estimate - truths).sum()))

print("\nA PyMC model: Gamma-Poisson, 4 chains x 1,000 NUTS draws; exact posterior mean of lam = 23/7")
import logging  # noqa: E402

import pymc as pm  # noqa: E402

logging.getLogger("pymc").setLevel(logging.ERROR)
with pm.Model() as model:
    lam = pm.Gamma("lam", 2.0, 1.0)
    pm.Poisson("y", lam, observed=np.array([3, 5, 2, 4, 6, 1]))
    idata = pm.sample(1000, tune=1000, chains=4, random_seed=1, progressbar=False)
table = pymc_cv.summary(idata, model=model, var_names=["lam"], progressbar=False)
print(table.to_string())
print("error: MCMC %.2g, CV %.2g" % (abs(table["mean"].iloc[0] - 23 / 7), abs(table["cv_mean"].iloc[0] - 23 / 7)))
