"""Borehole multi-fidelity experiment (vv-CV paper, section 5.1): T = 2, d = 8.

Prints the mean absolute error of the high-fidelity integral over replications for MC, CF,
vv-CV with a fixed B and vv-CV with a learned B, with seconds per replication, next to the
paper's Table 2.  Usage: python bench/borehole.py [reps] [m ...]
"""

import sys
import time

import numpy as np

import pymc_cv

MEAN = np.array([0.1, 100.0, 89335.0, 89.55, 1050.0, 760.0, 1400.0, 10950.0])
VAR = np.array([0.0161812**2, 0.01, 20.0, 1.0, 1.0, 1.0, 10.0, 30.0])  # Table 4: variances
TRUTH_H = 72.8904  # paper: MC with 5e5 draws
PAPER = {10: (6.42, 2.24, 1.94, 3.72), 20: (4.31, 1.96, 1.35, 1.29), 50: (2.63, 1.76, 1.77, 1.04),
         100: (1.83, 1.71, 1.65, 1.07), 150: (1.42, 1.67, 1.30, 0.85)}


def f_fid(x, low):
    rw, r, tu, tl, hu, hl, L, kw = x.T
    lg = np.log(r / rw)
    if low:
        return 5 * tu * (hu - hl) / (lg * (1.5 + 2 * L * tu / (lg * rw**2 * kw) + tu / tl))
    return 2 * np.pi * tu * (hu - hl) / (lg * (1 + 2 * L * tu / (lg * rw**2 * kw) + tu / tl))


def draws(rng, m):
    x = MEAN + np.sqrt(VAR) * rng.normal(size=(m, 8))
    return x, -(x - MEAN) / VAR


def main():
    reps = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    ms = [int(a) for a in sys.argv[2:]] or [10, 20, 50, 100, 150]
    B_fixed = np.array([[1.0, 0.1], [0.1, 1.0]])  # the paper's 5e-4 / 5e-5 correlation, standardised units
    print(f"Borehole, {reps} replications; mean absolute error of Pi_H[f_H] (truth {TRUTH_H})")
    print(f"{'m':>4} | {'MC':>6} {'CF':>7} {'vv fixB':>8} {'vv learnB':>9} | paper: {'MC':>5} {'CF':>5} {'fixB':>5} {'estB':>5} | sec/rep: {'CF':>5} {'fixB':>5} {'estB':>5}")
    for m in ms:
        errs = {k: [] for k in ("mc", "cf", "fix", "learn")}
        secs = {k: 0.0 for k in ("cf", "fix", "learn")}
        for rep in range(reps):
            rng = np.random.default_rng(10_000 * m + rep)
            xl, sl = draws(rng, m)
            xh, sh = draws(rng, m)
            fl, fh = f_fid(xl, True), f_fid(xh, False)
            errs["mc"].append(abs(fh.mean() - TRUTH_H))
            t = time.perf_counter()
            cf = pymc_cv.cv_estimate(fh, xh, sh, method="cf")
            secs["cf"] += time.perf_counter() - t
            errs["cf"].append(abs(cf.estimate - TRUTH_H))
            for key, B in (("fix", B_fixed), ("learn", "learn")):
                t = time.perf_counter()
                vv = pymc_cv.vvcv_estimate([fl, fh], [xl, xh], [sl, sh], B=B, fallback=False)
                secs[key] += time.perf_counter() - t
                errs[key].append(abs(vv.estimate[1] - TRUTH_H))
        mae = {k: np.mean(v) for k, v in errs.items()}
        p = PAPER.get(m, (np.nan,) * 4)
        print(f"{m:>4} | {mae['mc']:>6.3f} {mae['cf']:>7.4f} {mae['fix']:>8.4f} {mae['learn']:>9.4f} | "
              f"       {p[0]:>5.2f} {p[1]:>5.2f} {p[2]:>5.2f} {p[3]:>5.2f} |          "
              f"{secs['cf'] / reps:>5.2f} {secs['fix'] / reps:>5.2f} {secs['learn'] / reps:>5.2f}")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
