"""Thermodynamic integration on multimodal power posteriors: population MCMC vs NUTS per rung.

Two models whose likelihood has many local modes in the frequency of a sinusoid observed in noise
(one parameter: the frequency; two: frequency and amplitude), log evidence by quadrature.  For
each of 5 seeds, the same ladder (16 rungs of the power ladder) and the same draws per rung:

- ``population``: ``thermodynamic_integration(..., sampler="population")`` (exchange moves);
- ``nuts``: an independent NUTS run per rung (``sampler="nuts"``);
- ``population-adapted`` (with ``--samplers``): population MCMC on a ladder moved by a pilot to even
  exchange rates (``adapt_temperatures=True``; the pilot's seconds count as sampling).

Prints per run the error, the se, |error| / se, whether the result is flagged unreliable, and the
sampling seconds; then per model the ratio of sampling seconds population / NUTS per rung.

    python bench/population_ti.py            # 5 seeds, 400 draws + 300 tuning per rung
    python bench/population_ti.py --draws 1500 --samplers population
    python bench/population_ti.py --samplers population,population-adapted
    python bench/population_ti.py --draws 750 --chains 4 --samplers population   # same cost as 2 x 1,500
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pymc as pm
from scipy import stats

import pymc_cv
from pymc_cv.evidence import ti_from_arrays

sys.path.insert(0, str(Path(__file__).parents[1] / "examples"))
from sinusoid_evidence import NOISE, S, frequency_model  # noqa: E402
from sinusoid_evidence import simulate as data  # noqa: E402


def frequency_amplitude_model(y):
    with pm.Model() as model:
        w = pm.Uniform("w", 0, 10)
        a = pm.Normal("a", 1, 0.5)
        pm.Normal("y", a * pm.math.sin(w * S), NOISE, observed=y)
    w_grid = np.linspace(0, 10, 40_001)
    a_grid = np.linspace(-2, 4, 601)
    sin = np.sin(w_grid[:, None] * S[None, :])  # (W, n)
    # sum_i (y_i - a sin_i)^2 = yy - 2 a (sin . y) + a^2 (sin . sin)
    yy, sy, ss = y @ y, sin @ y, (sin ** 2).sum(axis=1)
    rss = yy - 2 * a_grid[None, :] * sy[:, None] + a_grid[None, :] ** 2 * ss[:, None]
    ll = -0.5 * rss / NOISE ** 2 - S.size * np.log(NOISE * np.sqrt(2 * np.pi))
    lp = ll + stats.norm.logpdf(a_grid, 1, 0.5)[None, :] - np.log(10)
    m = lp.max()
    inner = np.trapezoid(np.exp(lp - m), a_grid, axis=1)
    return model, m + np.log(np.trapezoid(inner, w_grid))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--draws", type=int, default=400)
    parser.add_argument("--tune", type=int, default=300)
    parser.add_argument("--rungs", type=int, default=16)
    parser.add_argument("--chains", type=int, default=2)
    parser.add_argument("--samplers", default="population,nuts")
    args = parser.parse_args()
    samplers = args.samplers.split(",")
    y = data()
    rows, seconds = [], {}
    for name, build in (("frequency (d = 1)", frequency_model), ("frequency + amplitude (d = 2)",
                                                                   frequency_amplitude_model)):
        model, exact = build(y)
        for sampler in samplers:
            for seed in range(1, args.seeds + 1):
                how = ({"sampler": "population", "adapt_temperatures": True} if sampler == "population-adapted"
                       else {"sampler": sampler})
                res = pymc_cv.thermodynamic_integration(model, args.rungs, draws=args.draws, tune=args.tune,
                                                        chains=args.chains, method="mc", random_seed=seed,
                                                        progressbar=False, **how)
                start = time.perf_counter()
                vv = ti_from_arrays(res.temperatures, res.draws["loglik"], res.draws["samples"],
                                    res.draws["grad_loglik"], res.draws["grad_logprior"], chain=res.draws["chain"],
                                    method="vvcv", random_seed=seed, shared_iterations=sampler != "nuts")
                vv_seconds = time.perf_counter() - start
                seconds.setdefault((name, sampler), []).append(res.seconds["sampling"])
                for method, r in (("mc", res), ("vvcv", vv)):
                    err = r.log_evidence - exact
                    rows.append((name, sampler, seed, method, err, r.se, abs(err) / r.se, r.reliable,
                                 res.seconds["sampling"] if method == "mc" else vv_seconds))
                print(f"{name:31s} {sampler:10s} seed {seed}: mc error {res.log_evidence - exact:+8.3f} "
                      f"(se {res.se:.3f}), vvcv error {vv.log_evidence - exact:+8.3f} (se {vv.se:.3f})", flush=True)
    print()
    print("| model | sampler | seed | per-rung estimator | error (nats) | se | abs(error) / se | flagged "
          "unreliable | seconds (sampling; vvcv: estimation) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, sampler, seed, method, err, se, z, reliable, sec in rows:
        print(f"| {name} | {sampler} | {seed} | {method} | {err:+.3f} | {se:.3f} | {z:.1f} | "
              f"{'no' if reliable else 'yes'} | {sec:.1f} |")
    print()
    print("| model | sampler | runs within 3 se and 0.2 nats (mc / vvcv) | runs wrong by > 3 se and not flagged "
          "(mc / vvcv) | median sampling seconds |")
    print("|---|---|---|---|---|")
    for name in dict.fromkeys(r[0] for r in rows):
        for sampler in samplers:
            counts, silent = [], []
            for method in ("mc", "vvcv"):
                sel = [r for r in rows if r[0] == name and r[1] == sampler and r[3] == method]
                counts.append(f"{sum(r[6] <= 3 and abs(r[4]) <= 0.2 for r in sel)}/{len(sel)}")
                silent.append(f"{sum(r[6] > 3 and r[7] for r in sel)}/{len(sel)}")
            print(f"| {name} | {sampler} | {' / '.join(counts)} | {' / '.join(silent)} | "
                  f"{np.median(seconds[(name, sampler)]):.1f} |")
    if samplers != ["population", "nuts"]:
        return
    print()
    print("| model | sampling seconds, population / NUTS per rung (median over seeds) |")
    print("|---|---|")
    for name in dict.fromkeys(r[0] for r in rows):
        ratio = np.median(seconds[(name, "population")]) / np.median(seconds[(name, "nuts")])
        print(f"| {name} | {ratio:.2f} |")


if __name__ == "__main__":
    main()
