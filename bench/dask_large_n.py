"""Large N with the inducing-point features on a dask.distributed cluster: this process's memory.

The problem of bench/scaling.py (draws from N(0, I_d), 4 chain labels, 10 integrands, closed-form
means; ``cv_estimate(method="auto")``), fitted once in this process alone and once with
``client=`` a LocalCluster of 2 worker processes (one thread each), where the N x M features are a
dask array on the workers.  Prints seconds, the peak traced memory of this process (numpy
allocations, tracemalloc; the workers' memory is not counted), the largest |difference| between
the two estimates in units of their se, and the CV error / MC error.

    python bench/dask_large_n.py            # N = 20,000 and 100,000, d = 5
    python bench/dask_large_n.py 200000
"""

import sys
import time
import tracemalloc
import warnings

import numpy as np
from distributed import Client, LocalCluster
from scaling import integrands

import pymc_cv


def fit(F, x, chain, client):
    tracemalloc.start()
    t0 = time.perf_counter()
    res = pymc_cv.cv_estimate(F, x, -x, chain=chain, client=client)
    sec = time.perf_counter() - t0
    peak = tracemalloc.get_traced_memory()[1] / 1e9
    tracemalloc.stop()
    return res, sec, peak


def main():
    Ns = [int(a) for a in sys.argv[1:]] or [20000, 100000]
    d = 5
    warnings.simplefilter("ignore")
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        print("| N | where | seconds | peak memory here GB | methods | max abs(difference) / se | CV error / MC error |")
        print("|---|---|---|---|---|---|---|")
        for N in Ns:
            rng = np.random.default_rng(N + d)
            x = rng.normal(size=(N, d))
            F, truth = integrands(x)
            chain = np.repeat(np.arange(4), N // 4)
            here = fit(F, x, chain, None)
            there = fit(F, x, chain, client)
            diff = np.max(np.abs(there[0].estimate - here[0].estimate) / here[0].se)
            for name, (res, sec, peak) in (("this process", here), ("2 workers", there)):
                ratio = np.median(np.abs(res.estimate - truth) / np.abs(res.mc_estimate - truth))
                meth = ", ".join(f"{m} {c}" for m, c in zip(*np.unique(res.method, return_counts=True)))
                print(f"| {N:,} | {name} | {sec:.1f} | {peak:.2f} | {meth} | "
                      f"{diff if name != 'this process' else 0:.1e} | {ratio:.3f} |", flush=True)


if __name__ == "__main__":
    main()
