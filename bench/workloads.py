"""`summary` on the models people run, with default arguments, against `pm.sample` in the same process.

Per model: d, rows, seconds of pm.sample / compute_scores / pymc_cv.summary / az.summary, the ratio
summary / pm.sample, the methods chosen, median and worst |CV error| / |MCMC error| against an
exact reference (bench/workload_models.py), and 2-se coverage of the CV estimates; the same for the
sd (cv_sd against the reference's posterior sd), and the median cv_ess / ess_bulk.  Rows whose
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
    s = az.summary(idata, kind="stats", round_to="none")
    m = az.summary(idata, kind="diagnostics", round_to="none")
    return {lab: (float(s.loc[lab, "mean"]), float(m.loc[lab, "mcse_mean"]), float(s.loc[lab, "sd"]),
                  float(m.loc[lab, "mcse_sd"])) for lab in s.index}


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
    sd_ratios, sd_covered = [], []
    for lab in table.index:
        if lab not in ref:
            continue
        truth, ref_se, ref_sd = ref[lab][:3]
        ref_sd_se = ref[lab][3] if len(ref[lab]) > 3 else 0.0
        mc_err = abs(table.loc[lab, "mean"] - truth)
        cv_err = abs(table.loc[lab, "cv_mean"] - truth)
        covered.append(cv_err <= 2 * np.hypot(table.loc[lab, "cv_mcse"], ref_se))
        if mc_err > 3 * ref_se:
            told += 1
            ratios.append(cv_err / mc_err)
        mc_sd_err = abs(table.loc[lab, "sd"] - ref_sd)
        cv_sd_err = abs(table.loc[lab, "cv_sd"] - ref_sd)
        sd_covered.append(cv_sd_err <= 2 * np.hypot(table.loc[lab, "cv_mcse_sd"], ref_sd_se))
        if mc_sd_err > 3 * ref_sd_se:
            sd_ratios.append(cv_sd_err / mc_sd_err)
    ess = (table["cv_ess"] / table["ess_bulk"]).to_numpy(dtype=float)
    ess = ess[np.isfinite(ess)]
    d = sum(int(np.prod(v.shape[2:])) for v in idata["score"].data_vars.values())
    methods = table["method"].value_counts().to_dict()
    return {
        "model": name, "d": d, "rows": len(table), "sample": t_sample, "scores": t_scores, "summary": t_summary,
        "az": t_az, "methods": methods, "median": np.median(ratios) if ratios else np.nan,
        "worst": np.max(ratios) if ratios else np.nan, "told": told, "coverage": np.mean(covered),
        "vr_median": float(np.median(table["variance_reduction"])),
        "sd_median": np.median(sd_ratios) if sd_ratios else np.nan, "sd_told": len(sd_ratios),
        "sd_coverage": np.mean(sd_covered) if sd_covered else np.nan,
        "cv_ess_ratio": float(np.median(ess)) if ess.size else np.nan,
    }


def main():
    args = sys.argv[1:]
    draws = int(args.pop(0)) if args and args[0].isdigit() else 1000
    names = args or MODELS
    rows = [run(n, draws) for n in names]
    print(f"\n4 chains x {draws} draws (tune 1000), default arguments\n")
    print("| model | d | rows | pm.sample s | compute_scores s | summary s | az.summary s | summary / pm.sample "
          "| methods | median CV/MCMC error | worst | rows told | 2-se coverage | median CV/MCMC sd error "
          "| sd 2-se coverage | cv_ess / ess_bulk |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        meth = ", ".join(f"{k} {v}" for k, v in sorted(r["methods"].items(), key=lambda kv: -kv[1]))
        print(f"| {r['model']} | {r['d']} | {r['rows']} | {r['sample']:.1f} | {r['scores']:.2f} | {r['summary']:.1f} "
              f"| {r['az']:.2f} | {r['summary'] / r['sample']:.2f} | {meth} | {r['median']:.3f} | {r['worst']:.3f} "
              f"| {r['told']} | {r['coverage']:.0%} | {r['sd_median']:.3g} | {r['sd_coverage']:.0%} "
              f"| {r['cv_ess_ratio']:.3g} |")


if __name__ == "__main__":
    main()
