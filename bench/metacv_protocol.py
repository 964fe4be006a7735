"""The protocol both Meta-CV benches share (thesis section 5.4): meta-train on fresh tasks with N draws
each, then estimate n_test unseen tasks with the cross-fitted and the thesis's half-split estimator."""

import time

import numpy as np

import pymc_cv


def meta_train_and_test(task, N, iters, n_test):
    """``task(rng, n)`` returns ((values, samples, scores), true integral).

    Returns the true integrals, the cross-fitted and the half-split results over the test tasks, and
    the seconds of compiling, meta-training and adapting to all test tasks.
    """
    mcv = pymc_cv.MetaCV(hidden=(64, 64), inner_steps=1, inner_lr=0.01, meta_lr=2e-3, meta_iterations=iters,
                         task_batch=5, random_seed=0, progressbar=False)
    mcv.meta_fit(lambda rng: task(rng, N)[0])
    rng = np.random.default_rng(12345)
    tests = [task(rng, N) for _ in range(n_test)]
    true = np.array([t for _, t in tests])
    vals, xs, ss = ([t[0][k] for t in tests] for k in range(3))
    start = time.perf_counter()
    res = mcv.estimate(vals, xs, ss)
    seconds = {**mcv.seconds_, "adapt": time.perf_counter() - start}
    res_half = mcv.estimate(vals, xs, ss, crossfit=False, fallback=False)
    return true, res, res_half, seconds
