"""`summary` on the models people run, with default arguments, against `pm.sample` in the same process.

Per model: d, rows, seconds of pm.sample / compute_scores / pymc_cv.summary / az.summary, the ratio
summary / pm.sample, the methods chosen, median and worst |CV error| / |MCMC error| against an
exact reference (bench/workload_models.py), and 2-se coverage of the CV estimates; the same for the
sd (cv_sd against the reference's posterior sd), and the median cv_ess / ess_bulk.  Rows whose
MCMC error is within 3 reference se are not used for the error ratios (the reference cannot tell).
Where the reference has quantiles (eight schools, logistic regression, varying intercepts), a table of
the 3% and 97% bounds: summary with cv_interval=True (its seconds beside the default's), per bound
|CV error| / |plain error| against the reference's quantile, 2-se coverage, and how many bounds the CV
moved from the plain quantile (the others are the plain quantile: the CV did not beat it).
With nutpie installed, a second table: each model sampled by nutpie (compilation timed apart) with
its stored gradients, and summary on those draws against nutpie's sampling time, beside az.summary's
own seconds on the same draws over nutpie's (what any table with ArviZ's diagnostics costs at least),
and what the CV is worth in sampling time: the median over the rows of (mcse_mean / cv_mcse)^2, how many
times its draws nutpie would have to draw for the plain mean to reach the CV's se, nutpie's seconds for
that many draws (its draw phase scaled; tuning not repeated) and summary's seconds over those.

Usage: python bench/workloads.py [draws] [model ...]     (draws per chain, default 1000; 4 chains)
       REF_FACTOR=k: the long-run reference (stochastic volatility) has k x draws per chain (default 10)
       WORKLOADS_FIGURE: where the bar charts go (default docs/_static/workloads.png; "" for none)
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

try:
    import nutpie  # noqa: F401
    _HAVE_NUTPIE = True
except ImportError:
    _HAVE_NUTPIE = False

_TUNE = 1000
MODELS = ["eight_schools", "logistic_regression", "varying_intercepts", "gp_regression", "stochastic_volatility"]


def _long_run_reference(model, draws):
    with model:
        idata = pm.sample(draws, tune=1000, chains=4, random_seed=99, progressbar=False,
                          compute_convergence_checks=False)
    s = az.summary(idata, kind="stats", round_to="none")
    m = az.summary(idata, kind="diagnostics", round_to="none")
    return {lab: (float(s.loc[lab, "mean"]), float(m.loc[lab, "mcse_mean"]), float(s.loc[lab, "sd"]),
                  float(m.loc[lab, "mcse_sd"])) for lab in s.index}


def _accuracy(table, ref):
    """Error ratios and coverage of the mean and the sd against the reference."""
    ratios, covered, told = [], [], 0
    sd_ratios, sd_covered = [], []
    for lab in table.index:
        if lab not in ref:
            continue
        truth, ref_se, ref_sd = ref[lab][:3]
        ref_sd_se = ref[lab][3] if len(ref[lab]) > 3 else 0.0
        mc_err = abs(table.loc[lab, "mean"] - truth)
        cv_err = abs(table.loc[lab, "cv_mean"] - truth)
        covered.append(cv_err <= 2 * np.hypot(table.loc[lab, "cv_mcse"] + table.loc[lab, "bias_allowance"], ref_se))
        if mc_err > 3 * ref_se:
            told += 1
            ratios.append(cv_err / mc_err)
        mc_sd_err = abs(table.loc[lab, "sd"] - ref_sd)
        cv_sd_err = abs(table.loc[lab, "cv_sd"] - ref_sd)
        sd_covered.append(cv_sd_err <= 2 * np.hypot(table.loc[lab, "cv_mcse_sd"] + table.loc[lab, "bias_allowance"], ref_sd_se))
        if mc_sd_err > 3 * ref_sd_se:
            sd_ratios.append(cv_sd_err / mc_sd_err)
    ess = (table["cv_ess"] / table["ess_bulk"]).to_numpy(dtype=float)
    ess = ess[np.isfinite(ess)]
    # how many times the draws plain MCMC would need for the CV's se, row by row (its se as reported,
    # which overstates the error where the CV is nearly exact, so this understates the factor)
    draws_factor = (table["mcse_mean"] / table["cv_mcse"]).to_numpy(dtype=float) ** 2
    draws_factor = draws_factor[np.isfinite(draws_factor)]
    return {
        "median": np.median(ratios) if ratios else np.nan, "worst": np.max(ratios) if ratios else np.nan,
        "told": told, "coverage": np.mean(covered),
        "sd_median": np.median(sd_ratios) if sd_ratios else np.nan, "sd_told": len(sd_ratios),
        "sd_coverage": np.mean(sd_covered) if sd_covered else np.nan,
        "cv_ess_ratio": float(np.median(ess)) if ess.size else np.nan,
        "draws_factor": float(np.median(draws_factor)) if draws_factor.size else np.nan,
    }


def _summary(idata, integrands, **kwargs):
    return pymc_cv.summary(idata, integrands=integrands,
                           var_names=None if integrands is None else list(idata.posterior.data_vars),
                           progressbar=False, **kwargs)


_CI_PROB = 0.94  # the 3% and 97% bounds, on either ArviZ


def _bounds(idata, integrands, ref):
    """The interval bounds by CVs against the reference's quantiles (None without any)."""
    if not any(getattr(r, "quantile", None) for r in ref.values()):
        return None
    t0 = time.perf_counter()
    table = _summary(idata, integrands, cv_interval=True, ci_prob=_CI_PROB)
    seconds = time.perf_counter() - t0
    names = pymc_cv.compat.interval_names(_CI_PROB)
    probs = np.array([(1 - _CI_PROB) / 2, (1 + _CI_PROB) / 2])
    ratios, moved_ratios, se_ratios, covered, moved = [], [], [], [], 0
    for lab in table.index:
        quantile = getattr(ref.get(lab), "quantile", None)
        if quantile is None:
            continue
        truth, truth_se = quantile(probs)
        for name, t, t_se in zip(names, truth, truth_se):
            plain, cv = float(table.loc[lab, name]), float(table.loc[lab, f"cv_{name}"])
            cv_se = float(table.loc[lab, f"cv_mcse_{name}"])
            covered.append(abs(cv - t) <= 2 * np.hypot(cv_se, t_se))
            is_moved = cv != plain
            moved += is_moved
            if is_moved:
                se_ratios.append(cv_se / float(table.loc[lab, f"mcse_{name}"]))
            if abs(plain - t) > 3 * t_se:
                ratios.append(abs(cv - t) / abs(plain - t))
                if is_moved:
                    moved_ratios.append(ratios[-1])
    med = lambda x: float(np.median(x)) if x else np.nan  # noqa: E731
    return {"seconds": seconds, "bounds": len(covered), "told": len(ratios), "moved": moved,
            "median": med(ratios), "moved_median": med(moved_ratios), "coverage": float(np.mean(covered)),
            "se_ratio": med(se_ratios)}


def _with_nutpie(model, integrands, draws, ref):
    """nutpie's compilation and sampling (apart), and summary on its draws with its stored gradients."""
    import nutpie

    t0 = time.perf_counter()
    compiled = nutpie.compile_pymc_model(model)
    t_compile = time.perf_counter() - t0
    t0 = time.perf_counter()
    idata = nutpie.sample(compiled, draws=draws, tune=_TUNE, chains=4, seed=1, progress_bar=False,
                          store_unconstrained=True, store_gradient=True)
    t_sample = time.perf_counter() - t0
    t0 = time.perf_counter()
    table = _summary(idata, integrands)
    t_summary = time.perf_counter() - t0
    # ArviZ's own table on the same draws: what any summary with its diagnostics costs at least
    t0 = time.perf_counter()
    az.summary(idata)
    t_az = time.perf_counter() - t0
    accuracy = _accuracy(table, ref)
    # nutpie's seconds to draw that many times the draws (its tuning steps, as many as the draws
    # at 1,000, are not repeated)
    t_matched = t_sample * draws / (draws + _TUNE) * accuracy["draws_factor"]
    return {"compile": t_compile, "sample": t_sample, "summary": t_summary, "az": t_az,
            "backend": table.attrs["score_backend"], "matched": t_matched, **accuracy}


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
    table = _summary(idata, integrands)
    t_summary = time.perf_counter() - t0
    t0 = time.perf_counter()
    az.summary(idata)
    t_az = time.perf_counter() - t0
    if ref is None:
        ref = _long_run_reference(model, int(os.environ.get("REF_FACTOR", 10)) * draws)
    bounds = _bounds(idata, integrands, ref)
    d = sum(int(np.prod(v.shape[2:])) for v in idata["score"].data_vars.values())
    methods = table["method"].value_counts().to_dict()
    nutpie_run = _with_nutpie(model, integrands, draws, ref) if _HAVE_NUTPIE else None
    return {
        "model": name, "d": d, "rows": len(table), "sample": t_sample, "scores": t_scores, "summary": t_summary,
        "az": t_az, "methods": methods, "vr_median": float(np.median(table["variance_reduction"])),
        **_accuracy(table, ref), "nutpie": nutpie_run, "bounds": bounds,
    }


def figure(rows, draws, path):
    """Per model, two bar charts on log scales: summary's seconds over each sampler's (PyMC's NUTS, and
    nutpie's without its compilation), and the median |CV error| / |MCMC error| of the mean and the sd."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pos = np.arange(len(rows))
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 0.45 * len(rows) + 1.8), sharey=True)
    left.barh(pos + 0.2, [r["summary"] / r["sample"] for r in rows], height=0.4, color="0.6",
              label="over pm.sample (PyMC NUTS)")
    if all(r["nutpie"] for r in rows):
        left.barh(pos - 0.2, [r["nutpie"]["summary"] / r["nutpie"]["sample"] for r in rows], height=0.4,
                  color="C0", label="over nutpie's sampling")
    left.axvline(1.0, color="k", lw=0.8)
    left.set_xscale("log")
    left.set_xlabel("summary seconds / sampler seconds")
    left.legend(fontsize="small")
    right.barh(pos + 0.2, [r["median"] for r in rows], height=0.4, color="C0", label="mean")
    right.barh(pos - 0.2, [r["sd_median"] for r in rows], height=0.4, color="C2", label="sd")
    right.axvline(1.0, color="k", lw=0.8)
    right.set_xscale("log")
    right.set_xlabel("median |CV error| / |MCMC error| (PyMC draws)")
    right.legend(fontsize="small")
    left.set_yticks(pos)
    left.set_yticklabels([r["model"].replace("_", " ") for r in rows], fontsize="small")
    left.invert_yaxis()
    fig.suptitle(f"bench/workloads.py, 4 x {draws:,} draws: pymc_cv.summary with defaults", fontsize="medium")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


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
    bounded = [r for r in rows if r["bounds"]]
    if bounded:
        print(f"\nThe {100 * (1 - _CI_PROB) / 2:g}% and {100 * (1 + _CI_PROB) / 2:g}% bounds (cv_interval=True), "
              "against the reference's quantiles; a bound the CV did not move is the plain quantile\n")
        print("| model | summary s | with cv_interval s | bounds | told | moved by the CV | median CV/MCMC error "
              "(told) | median CV/MCMC error (told, moved) | 2-se coverage | median cv_mcse / mcse (moved) |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        for r in bounded:
            b = r["bounds"]
            print(f"| {r['model']} | {r['summary']:.1f} | {b['seconds']:.1f} | {b['bounds']} | {b['told']} "
                  f"| {b['moved']} | {b['median']:.3g} | {b['moved_median']:.3g} | {b['coverage']:.0%} "
                  f"| {b['se_ratio']:.3g} |")
    out = os.environ.get("WORKLOADS_FIGURE", os.path.join(os.path.dirname(__file__), "..", "docs", "_static",
                                                          "workloads.png"))
    if out:
        print("figure:", figure(rows, draws, out))
    if not _HAVE_NUTPIE:
        print("\nnutpie is not installed: no nutpie table")
        return
    print(f"\nnutpie (store_unconstrained=True, store_gradient=True), 4 chains x {draws} draws (tune 1000); summary "
          "on its draws with the sampler's stored gradients (nothing compiled by pymc-cv)\n")
    print("| model | nutpie compile s | nutpie sample s | summary s | summary / nutpie sample | az.summary / nutpie "
          "sample | median CV/MCMC error | worst | rows told | 2-se coverage | median CV/MCMC sd error "
          "| sd 2-se coverage | median (mcse_mean / cv_mcse)^2 | nutpie s for that many draws "
          "| summary / those s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        n = r["nutpie"]
        print(f"| {r['model']} | {n['compile']:.1f} | {n['sample']:.2f} | {n['summary']:.2f} "
              f"| {n['summary'] / n['sample']:.2f} | {n['az'] / n['sample']:.2f} | {n['median']:.3f} "
              f"| {n['worst']:.3f} | {n['told']} "
              f"| {n['coverage']:.0%} | {n['sd_median']:.3g} | {n['sd_coverage']:.0%} "
              f"| {n['draws_factor']:.3g} | {n['matched']:.3g} | {n['summary'] / n['matched']:.2g} |")


if __name__ == "__main__":
    main()
