"""How often the Stein checks fire on correct scores: two AR(1) chains (lag-one correlation 0.5) of N(0, I_d),
scores -x, `stein_check(..., second_order=True)`; per cell the share of runs in which each test fires.

Columns: "first" the first-order identities beyond their level (a mild flag), "second z" the second-order
identities one at a time, "second jointly" their joint test at its level (both mild flags), "widened" the se
widened by the joint test (p below its widening level).

Usage: python bench/stein_false_alarms.py [runs]      (default 200 per cell; about a minute)
"""

import sys

import numpy as np

from pymc_cv.core.score_check import stein_check


def ar1(rng, n_chain, n, d, phi=0.5):
    x = np.empty((n_chain, n, d))
    x[:, 0] = rng.normal(size=(n_chain, d))
    for t in range(1, n):
        x[:, t] = phi * x[:, t - 1] + np.sqrt(1 - phi**2) * rng.normal(size=(n_chain, d))
    return x


def main():
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    rng = np.random.default_rng(0)
    print("| draws | d | first | second z | second jointly | widened |")
    print("|---|---|---|---|---|---|")
    for n in (50, 100, 500, 1000):
        for d in (1, 2, 5, 10):
            counts = np.zeros(4)
            for _ in range(runs):
                x = ar1(rng, 2, n, d).reshape(-1, d)
                chk = stein_check(x, -x, np.repeat([0, 1], n), second_order=True)
                counts += [np.any(np.abs(chk.z) > chk.threshold), chk.second_order_z > chk.second_order_threshold,
                           chk.second_order_p < chk.second_order_level, chk.se_factor > 1]
            print(f"| 2 x {n} | {d} | " + " | ".join(f"{c / runs:.1%}" for c in counts) + " |")


if __name__ == "__main__":
    main()
