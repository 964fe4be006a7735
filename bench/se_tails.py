"""Standard errors beyond the coverage grid: faster-growing integrands, heavy-tailed targets, and how
often the heavy-tail check of the draws fires.

1. Target N(0, I_d), integrands exp(x0), exp(1.5 x0), x0^4, |x0| (d = 1, 2, 5; n = 200, 1,000; iid
   and two AR(1) chains as in ``se_coverage.py``).
2. Student-t targets (3 and 5 degrees of freedom, d = 1, n = 200, 1,000, independent draws),
   integrands x^2, |x|, atan(x)^2, sin(x): where kernel and polynomial CVs extrapolate into tails the
   draws rarely reach.
3. The share of runs in which ``uncertainty.heavy_tail_note`` flags the draws (100 runs per entry).

Per cell: 2-se coverage among results flagged reliable @ share reliable (coverage of all results),
median |CV error| / |MC error|.

    python bench/se_tails.py [reps=30]
"""

from __future__ import annotations

import sys

import numpy as np
from scipy import stats

from pymc_cv.core.uncertainty import heavy_tail_note
from se_coverage import cell

GROWTH = ("exp(x0)", "exp(1.5 x0)", "x0^4", "|x0|")
GROWTH_TRUTH = np.array([np.exp(0.5), np.exp(1.125), 3.0, np.sqrt(2 / np.pi)])
HEAVY = ("x^2", "|x|", "atan(x)^2", "sin(x)")


def growth(x):
    a = x[:, 0]
    return np.column_stack([np.exp(a), np.exp(1.5 * a), a**4, np.abs(a)])


def heavy(x):
    a = x[:, 0]
    return np.column_stack([a**2, np.abs(a), np.arctan(a) ** 2, np.sin(a)])


def student(nu):
    def target(n, d, rng):
        x = stats.t(nu).rvs(size=(n, d), random_state=rng)
        return x, -(nu + 1) * x / (nu + x**2), None
    return target


def heavy_truth(nu):
    t = stats.t(nu)
    return np.array([nu / (nu - 2), t.expect(abs), t.expect(lambda v: np.arctan(v) ** 2), 0.0])


def _row(label, res):
    cells = [f"{c.coverage:.0%} @ {c.share_reliable:.0%} ({c.coverage_all:.0%}), {c.error_ratio:.2g}" for c in res]
    return f"| {label} | " + " | ".join(cells) + " |"


def main(reps=30):
    print(f"1. N(0, I_d), {reps} replications per cell: coverage among reliable @ share reliable (all), median "
          "|CV err| / |MC err|\n")
    print("| draws, d, n | " + " | ".join(GROWTH) + " |\n|---|" + "---|" * len(GROWTH))
    for sampler, d, n in [("iid", 1, 200), ("iid", 1, 1000), ("iid", 2, 200), ("iid", 2, 1000), ("iid", 5, 200),
                          ("iid", 5, 1000), ("mcmc", 1, 200), ("mcmc", 2, 1000), ("mcmc", 5, 200)]:
        res = cell(d, n, sampler, reps, seed=1000 * d + n, funcs=growth, truth=GROWTH_TRUTH)
        print(_row(f"{sampler}, {d}, {n}", res), flush=True)
    print(f"\n2. Student-t draws (d = 1), {reps} replications per cell\n")
    print("| target, n | " + " | ".join(HEAVY) + " |\n|---|" + "---|" * len(HEAVY))
    for nu in (3, 5):
        for n in (200, 1000):
            res = cell(1, n, "iid", reps, seed=10 * nu + n, funcs=heavy, truth=heavy_truth(nu), target=student(nu))
            print(_row(f"t{nu}, {n}", res), flush=True)
    print("\n3. Share of runs whose draws the heavy-tail check flags (100 runs each)\n")
    dims = (1, 5, 20)
    print("| target | n | " + " | ".join(f"d = {d}" for d in dims) + " |\n|---|---|" + "---|" * len(dims))
    rng = np.random.default_rng(1)
    targets = {"N(0, I)": lambda n, d: rng.normal(size=(n, d)), "t5": lambda n, d: student(5)(n, d, rng)[0],
               "t3": lambda n, d: student(3)(n, d, rng)[0]}
    for name, gen in targets.items():
        for n in (50, 200, 1000):
            rates = [np.mean([heavy_tail_note(gen(n, d)) is not None for _ in range(100)]) for d in dims]
            print(f"| {name} | {n} | " + " | ".join(f"{r:.0%}" for r in rates) + " |", flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 30)
