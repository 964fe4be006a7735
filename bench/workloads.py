"""`summary` on the models people run, with default arguments, against `pm.sample` in the same process.

Per model: d, rows, seconds of pm.sample / compute_scores / pymc_cv.summary / az.summary, the ratio
summary / pm.sample, the methods chosen, median and worst |CV error| / |MCMC error| against an
exact reference (bench/workload_models.py), and 2-se coverage of the CV estimates.  Rows whose
MCMC error is within 3 reference se are not used for the error ratios (the reference cannot tell).

Usage: python bench/workloads.py [draws] [model ...]     (draws per chain, default 1000; 4 chains)
       REF_FACTOR=k: the long-run reference (stochastic volatility) has k x draws per chain (default 10)
       models: eight_schools logistic_regression varying_intercepts gp_regression stochastic_volatility
Run it alone on the machine: timings next to other heavy jobs are not comparable.
"""

import os
import sys
import time
import warnings

import numpy as np

warnings.simplefilter("ignore")

import arviz as az  # noqa: E402
import pymc as pm  # noqa: E402

import pymc_cv  # noqa: E402
import workload_models as wm  # noqa: E402

MODELS = ["eight_schools", "logistic_regression", "varying_intercepts", "gp_regression", "stochastic_volatility"]


def _long_run_reference(model, draws):
    with model:
        idata = pm.sample(draws, tune=1000, chains=4, random_seed=99, progressbar=False,
                          compute_convergence_checks=False)
    s = az.summary(idata, kind="stats")
    m = az.summary(idata, kind="diagnostics")
    return {lab: (float(s.loc[lab, "mean"]), float(m.loc[lab, "mcse_mean"])) for lab in s.index}


def run(name, draws):
    model, integrands, ref = getattr(wm, name)()
    with model:
        t0 = time.perf_counter()
        idata = pm.sample(draws, tune=1000, chains=4, random_seed=1, progressbar=False)
        t_sample = time.perf_counter() - t0
    t0 = time.perf_counter()
    idata = pymc_cv.compute_scores(idata, model, progressbar=False)
    t_scores = time.perf_counter() - t0
    t0 = time.perf_counter()
    table = pymc_cv.summary(idata, integrands=integrands,
                            var_names=None if integrands is None else list(idata.posterior.data_vars),
                            progressbar=False)
    t_summary = time.perf_counter() - t0
    t0 = time.perf_counter()
    az.summary(idata)
    t_az = time.perf_counter() - t0
    if ref is None:
        ref = _long_run_reference(model, int(os.environ.get("REF_FACTOR", 10)) * draws)
    ratios, covered, told = [], [], 0
    for lab in table.index:
        if lab not in ref:
            continue
        truth, ref_se = ref[lab]
        mc_err = abs(table.loc[lab, "mean"] - truth)
        cv_err = abs(table.loc[lab, "cv_mean"] - truth)
        covered.append(cv_err <= 2 * np.hypot(table.loc[lab, "cv_mcse"], ref_se))
        if mc_err > 3 * ref_se:
            told += 1
            ratios.append(cv_err / mc_err)
    d = sum(int(np.prod(v.shape[2:])) for v in idata["score"].data_vars.values())
    methods = table["method"].value_counts().to_dict()
    return {
        "model": name, "d": d, "rows": len(table), "sample": t_sample, "scores": t_scores, "summary": t_summary,
        "az": t_az, "methods": methods, "median": np.median(ratios) if ratios else np.nan,
        "worst": np.max(ratios) if ratios else np.nan, "told": told, "coverage": np.mean(covered),
        "vr_median": float(np.median(table["variance_reduction"])),
    }


def main():
    args = sys.argv[1:]
    draws = int(args.pop(0)) if args and args[0].isdigit() else 1000
    names = args or MODELS
    rows = [run(n, draws) for n in names]
    print(f"\n4 chains x {draws} draws (tune 1000), default arguments\n")
    print("| model | d | rows | pm.sample s | compute_scores s | summary s | az.summary s | summary / pm.sample "
          "| methods | median CV/MCMC error | worst | rows told | 2-se coverage |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        meth = ", ".join(f"{k} {v}" for k, v in sorted(r["methods"].items(), key=lambda kv: -kv[1]))
        print(f"| {r['model']} | {r['d']} | {r['rows']} | {r['sample']:.1f} | {r['scores']:.2f} | {r['summary']:.1f} "
              f"| {r['az']:.2f} | {r['summary'] / r['sample']:.2f} | {meth} | {r['median']:.3f} | {r['worst']:.3f} "
              f"| {r['told']} | {r['coverage']:.0%} |")


if __name__ == "__main__":
    main()
