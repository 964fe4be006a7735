"""vv-CVs against a control functional (CF) per task, on the same draws.

Two settings, each over seeds, with closed-form or quadrature truths:

- shared draws: one Normal-Normal posterior N(m, v) (mu ~ N(0, 2), 8 observations, sd 1) and
  the 10 integrands exp(s mu), s in [0.1, 1]: E = exp(s m + s^2 v / 2).  N iid draws shared by all
  tasks (the Kronecker solver).
- draws per task (the vv-CV paper's App. E.2): pi_1 = N(0, 1), pi_2 = N(0, 1.25), N draws each.
  "related": f_1 = 1.5 + x + 1.5 x^2 + 1.75 sin(pi x) exp(-x^2), f_2 = 1 + x + x^2 + sin(pi x) exp(-x^2)
  (the paper's pair); "unrelated": f_2 = cos(3 x) instead.

Per cell: the median over seeds of (summed absolute error of the vv-CV) / (that of a CF per task),
its worst seed, the vv-CV / MCMC median, and how many seeds reported a task as MC while the CF beat MC.
The vv-CV is ``vvcv_estimate`` with defaults (B learned, Stein polynomials where held-out error
says so); the CF is ``cv_estimate(method="cf")``; "per-task default" is ``cv_estimate`` with defaults
(the best of ZV, CF and semi-exact CF per task, by held-out error).
The paper's Lotka-Volterra (T = 2, 5, 10) comparison is ``examples/lotka_volterra.py``.

Usage: python bench/vvcv_vs_cf.py [SEEDS]   (default 10)
"""

from __future__ import annotations

import sys
import time

import numpy as np

import pymc_cv


def shared_cell(n, seed):
    rng = np.random.default_rng(seed)
    y = rng.normal(0.5, 1.0, 8)
    v = 1.0 / (0.25 + 8)
    m = y.sum() * v
    x = rng.normal(m, np.sqrt(v), size=(n, 1))
    s = np.linspace(0.1, 1.0, 10)
    fs = [np.exp(si * x[:, 0]) for si in s]
    return fs, [x] * 10, [-(x - m) / v] * 10, np.exp(s * m + s**2 * v / 2)


_NODES, _W = np.polynomial.hermite_e.hermegauss(120)
_W = _W / _W.sum()
_F1 = lambda x: 1.5 + x + 1.5 * x**2 + 1.75 * np.sin(np.pi * x) * np.exp(-(x**2))  # noqa: E731
_F2 = {"related": lambda x: 1 + x + x**2 + np.sin(np.pi * x) * np.exp(-(x**2)),
       "unrelated": lambda x: np.cos(3 * x)}


def task_cell(n, kind, seed):
    rng = np.random.default_rng(seed)
    x1 = rng.normal(size=(n, 1))
    x2 = np.sqrt(1.25) * rng.normal(size=(n, 1))
    f2 = _F2[kind]
    truth = np.array([_W @ _F1(_NODES), _W @ f2(np.sqrt(1.25) * _NODES)])
    return [_F1(x1[:, 0]), f2(x2[:, 0])], [x1, x2], [-x1, -x2 / 1.25], truth


def run(cell, seeds):
    ratios, vs_auto, vs_mc, mc_while_cf_won, t_vv, t_cf = [], [], [], 0, 0.0, 0.0
    for seed in range(seeds):
        fs, xs, ss, truth = cell(seed)
        t0 = time.perf_counter()
        vv = pymc_cv.vvcv_estimate(fs, xs, ss)
        t1 = time.perf_counter()
        cf = [pymc_cv.cv_estimate(f, x, s, method="cf") for f, x, s in zip(fs, xs, ss)]
        t_vv, t_cf = t_vv + t1 - t0, t_cf + time.perf_counter() - t1
        e_vv = np.abs(vv.estimate - truth).sum()
        e_cf = np.abs(np.array([c.estimate.item() for c in cf]) - truth).sum()
        e_mc = np.abs(vv.mc_estimate - truth).sum()
        auto = np.array([pymc_cv.cv_estimate(f, x, s).estimate.item() for f, x, s in zip(fs, xs, ss)])
        ratios.append(e_vv / e_cf)
        vs_auto.append(e_vv / np.abs(auto - truth).sum())
        vs_mc.append(e_vv / e_mc)
        cf_won = np.array([abs(c.estimate.item() - t) < abs(c.mc_estimate.item() - t) for c, t in zip(cf, truth)])
        mc_while_cf_won += bool(np.any((vv.method == "mc") & cf_won))
    return (np.median(ratios), np.max(ratios), np.median(vs_auto), np.median(vs_mc), mc_while_cf_won,
            t_vv / t_cf)


def main():
    seeds = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    cells = [(f"shared draws, T = 10, N = {n}", lambda s, n=n: shared_cell(n, s)) for n in (50, 200, 1000)]
    cells += [(f"draws per task, {kind}, T = 2, N = {n} per task", lambda s, n=n, k=kind: task_cell(n, k, s))
              for kind in ("related", "unrelated") for n in (20, 50, 200)]
    print(f"{seeds} seeds per cell\n")
    print("| cell | vv / CF error, median | worst seed | vv / per-task default, median | vv / MCMC, median "
          "| seeds with a task reported as MC where the CF beat MC | vv s / CF s |\n|---|---|---|---|---|---|---|")
    for name, cell in cells:
        med, worst, auto, mc, bad, t = run(cell, seeds)
        print(f"| {name} | {med:.3g} | {worst:.3g} | {auto:.3g} | {mc:.2g} | {bad} | {t:.2f} |", flush=True)


if __name__ == "__main__":
    main()
