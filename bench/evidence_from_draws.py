"""Log evidence from the draws a user already has: ``pymc_cv.log_evidence(model, idata)`` after ``pm.sample``.

The models and references of ``bench/evidence.py`` (quadrature, or importance sampling with 10^6 draws for
the logistic regression).  Per model and seed: ``pm.sample(model=model, random_seed=seed)`` as a user runs it
(PyMC's default sampler, chains and draws: on PyMC 6.4 that is nutpie), timed, then ``log_evidence`` in the
same process, timed (bridge sampling from those draws, and TI where that fails its checks); the error of the
reported estimate in nats, |error| / se, whether it is flagged, which estimator was reported, and the seconds
of ``log_evidence`` over the sampler's.

With ``--cv``: ``bridge_sampling(idata, model, control_variates=True)`` instead (bridge sampling alone, its two
means with zero-variance control variates).

Usage: python bench/evidence_from_draws.py [SEEDS] [MODEL ...] [--cv]
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
import evidence as ev  # noqa: E402  (the models, their references, and the quiet PyMC logger)
import pymc as pm  # noqa: E402

import pymc_cv  # noqa: E402


def main():
    cv = "--cv" in sys.argv
    args = [a for a in sys.argv[1:] if a != "--cv"]
    seeds = int(args.pop(0)) if args and args[0].isdigit() else 5
    names = args or list(ev.MODELS)
    rows = []
    for name in names:
        model, truth = ev.MODELS[name]()
        print(f"{name}: log p(y) = {truth:.4f} (reference)", flush=True)
        runs = []
        for seed in range(seeds):
            t0 = time.perf_counter()
            idata = pm.sample(model=model, random_seed=seed, progressbar=False)
            sampling = time.perf_counter() - t0
            diverging = int(np.sum(np.asarray(pymc_cv.compat.group(idata, "sample_stats")["diverging"])))
            t0 = time.perf_counter()
            if cv:
                res = pymc_cv.bridge_sampling(idata, model, random_seed=seed, control_variates=True)
            else:
                res = pymc_cv.log_evidence(model, idata, random_seed=seed, progressbar=False)
            seconds = time.perf_counter() - t0
            err = res.log_evidence - truth
            bridged = ("control variates" in res.estimator) if cv else res.estimator.startswith("bridge")
            runs.append((err, abs(err) / res.se, not res.reliable, seconds, sampling, bridged))
            print(f"  seed {seed}: error {err:+.4f} se {res.se:.4f} ({abs(err) / res.se:.1f} se) flagged "
                  f"{not res.reliable} ({res.estimator}) {seconds:.2f} s / sampling {sampling:.1f} s, "
                  f"{diverging} divergences",
                  flush=True)
            for note in res.notes if not res.reliable else ():
                print(f"    note: {note[:200]}", flush=True)
        a = np.array(runs, dtype=float)
        good = (np.abs(a[:, 0]) <= 0.05) & (a[:, 1] <= 3) & (a[:, 2] == 0)
        missed = int(np.sum((a[:, 1] > 3) & (a[:, 2] == 0)))
        rows.append(f"| {name} | {np.median(np.abs(a[:, 0])):.4f} | {np.max(np.abs(a[:, 0])):.4f} "
                    f"| {np.max(a[:, 1]):.1f} | {int(a[:, 2].sum())} | {missed} | {int(good.sum())}/{seeds} "
                    f"| {np.median(a[:, 4]):.1f} | {np.median(a[:, 3]):.2f} | {np.median(a[:, 3] / a[:, 4]):.2f} "
                    f"| {np.max(a[:, 3] / a[:, 4]):.2f} | {int(a[:, 5].sum())}/{seeds} |")
    print(f"\n{seeds} seeds per model; errors in nats against the references of bench/evidence.py\n")
    print("| model | median abs error | max abs error | max abs error / se | flagged | > 3 se, not flagged "
          "| within 0.05 and 3 se, not flagged | sampling s | log_evidence s | ratio median | ratio max "
          f"| {'control variates used' if cv else 'bridge sampling reported'} |\n" + "|---" * 12 + "|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
