"""Time and peak memory of cv_estimate (method="auto", 10 integrands, as a summary's rows) against N.

Draws from N(0, I_d) with 4 chain labels; integrands sin/cos/exp mixtures with closed-form means.
Prints seconds, peak traced memory (numpy allocations, tracemalloc), and the CV error / MC error.
Usage: python bench/scaling.py [N ...]      (default 1000 4000 20000 100000; d = 5 and 20)
"""

import sys
import time
import tracemalloc

import numpy as np

import pymc_cv


def integrands(x):
    d = x.shape[1]
    cols, truths = [], []
    for j in range(10):
        a, b = j % d, (j + 1) % d
        w = 0.2 + 0.1 * j
        cols.append(np.sin(w * x[:, a]) + np.cos(x[:, b]) + 0.1 * x[:, a] ** 2)
        truths.append(np.exp(-0.5) + 0.1)
    return np.column_stack(cols), np.array(truths)


def main():
    Ns = [int(a) for a in sys.argv[1:]] or [1000, 4000, 20000, 100000]
    warm = np.random.default_rng(0).normal(size=(200, 2))
    pymc_cv.cv_estimate(np.sin(warm[:, 0]), warm, -warm)  # imports and first-call costs out of the table
    print("| d | N | seconds | peak memory GB | methods | CV error / MC error (median over 10 integrands) |")
    print("|---|---|---|---|---|---|")
    for d in (5, 20):
        for N in Ns:
            rng = np.random.default_rng(N + d)
            x = rng.normal(size=(N, d))
            F, truth = integrands(x)
            chain = np.repeat(np.arange(4), N // 4)
            tracemalloc.start()
            t0 = time.perf_counter()
            res = pymc_cv.cv_estimate(F, x, -x, chain=chain)
            sec = time.perf_counter() - t0
            peak = tracemalloc.get_traced_memory()[1] / 1e9
            tracemalloc.stop()
            ratio = np.median(np.abs(res.estimate - truth) / np.abs(res.mc_estimate - truth))
            meth = ", ".join(f"{m} {c}" for m, c in zip(*np.unique(res.method, return_counts=True)))
            print(f"| {d} | {N} | {sec:.1f} | {peak:.2f} | {meth} | {ratio:.3f} |", flush=True)


if __name__ == "__main__":
    main()
