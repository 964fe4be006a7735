"""Thermodynamic integration with its rungs on a dask.distributed LocalCluster, against the serial run.

Model: Bayesian logistic regression (n = 500 observations, 10 predictors and an intercept), a
model whose rungs take a second or more each.  The same seed and ladder (12 rungs of the power
ladder, 2 chains x (500 tuning + 500 draws) per rung) run

- serially (``client=None``, every rung in this process, as a user runs it),
- on a LocalCluster of 1 and of 2 worker processes with one thread each.

Each configuration is timed twice in a row: ``cold`` includes compiling the model (in this process,
or on every worker), ``warm`` reuses it.  Prints |log evidence - serial| and the wall time relative to
the serial run (and of the sampling phase, which with a client includes the CV groups fitted in this
process while the workers sample), and an estimate of the time with one worker per rung (32 rungs on 32 workers): the
compile time, plus the slowest rung, plus the CVs, from the per-rung times measured serially.

    python bench/dask_ti.py                 # 12 rungs
    python bench/dask_ti.py --rungs 32
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pymc as pm
from distributed import Client, LocalCluster

import pymc_cv
from pymc_cv.pymc.tempering import compiled, sample_rung
from pymc_cv.evidence import power_ladder


def logistic_model(seed=0, n=500, p=10):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, p))
    beta = rng.normal(0, 0.5, p)
    y = rng.binomial(1, 1 / (1 + np.exp(-(0.3 + X @ beta))))
    with pm.Model() as model:
        a = pm.Normal("a", 0, 2)
        b = pm.Normal("b", 0, 1, shape=p)
        pm.Bernoulli("y", logit_p=a + pm.math.dot(X, b), observed=y)
    return model


def run(model, rungs, draws, client):
    start = time.perf_counter()
    res = pymc_cv.thermodynamic_integration(model, rungs, draws=draws, tune=draws, chains=2, method="vvcv",
                                            random_seed=7, progressbar=False, client=client)
    return res, time.perf_counter() - start


def per_rung_seconds(model, rungs, draws):
    """Serial seconds of each rung's sampling (the model compiled beforehand)."""
    compiled(model)
    out = []
    for i, t in enumerate(power_ladder(rungs)):
        start = time.perf_counter()
        sample_rung(model, None, None, draws, draws, 2, (t, i))
        out.append(time.perf_counter() - start)
    return np.array(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rungs", type=int, default=12)
    ap.add_argument("--draws", type=int, default=500)
    args = ap.parse_args()

    rows = []
    # the serial baseline is what a user gets: this process with its default BLAS threads
    model = logistic_model()
    cold = run(model, args.rungs, args.draws, None)
    warm = run(model, args.rungs, args.draws, None)
    serial = (cold, warm)
    rows.append(("serial", 0, cold[1], warm[1], 0.0, warm[0].seconds["sampling"]))
    rung_seconds = per_rung_seconds(model, args.rungs, args.draws)
    for workers in (1, 2):
        with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
                Client(cluster) as client:
            model = logistic_model()
            cold = run(model, args.rungs, args.draws, client)
            warm = run(model, args.rungs, args.draws, client)
            diff = max(abs(cold[0].log_evidence - serial[0][0].log_evidence),
                       abs(warm[0].log_evidence - serial[0][0].log_evidence))
            rows.append((f"{workers} worker(s)", workers, cold[1], warm[1], diff, warm[0].seconds["sampling"]))

    ref = serial[0][0]
    print(f"logistic regression, {args.rungs} rungs x 2 chains x ({args.draws} + {args.draws}) draws; "
          f"log evidence {ref.log_evidence:.4f} +/- {ref.se:.4f}")
    print(f"{'run':<14}{'cold s':>9}{'warm s':>9}{'cold / serial':>15}{'warm / serial':>15}"
          f"{'warm sampling / serial':>24}{'|diff| nats':>13}")
    for name, _, c, w, d, smp in rows:
        print(f"{name:<14}{c:9.1f}{w:9.1f}{c / rows[0][2]:15.2f}{w / rows[0][3]:15.2f}"
              f"{smp / rows[0][5]:24.2f}{d:13.1e}")
    compile_s = rows[0][2] - rows[0][3]
    cv_s = ref.seconds.get("estimation", 0.0)
    print(f"serial sampling per rung: mean {rung_seconds.mean():.2f} s, max {rung_seconds.max():.2f} s; "
          f"compile ~{compile_s:.1f} s; CVs {cv_s:.1f} s")
    per_rung = rung_seconds.mean()
    print(f"on paper, 32 rungs: serial ~{compile_s + 32 * per_rung + cv_s:.0f} s; on 32 workers "
          f"~{compile_s + rung_seconds.max() + cv_s:.0f} s (compile + slowest rung + CVs, transfers ignored)")


if __name__ == "__main__":
    main()
