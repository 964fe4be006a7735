"""`summary` on real posteriors (the Stan posterior database), with default arguments, against Stan.

For each posterior, in its own subprocess with a time limit: build with PyStan, sample 4 x 1,000
after 1,000 warm-up iterations (fixed seed), ArviZ's own conversion, ``pymc_cv.from_pystan``,
``pymc_cv.summary`` with defaults and ``az.summary``, each timed in that process.  Errors are against the precise
references of bench/data/posteriordb/ (made by bench/posteriordb_reference.py).

Columns: d (unconstrained parameters), rows, Stan sampling seconds (warm-up included, build not),
the seconds of ArviZ's conversion alone (its first call in the process, which a user of ``az.from_pystan``
pays as well), ``from_pystan`` (after it) and ``summary`` seconds and their ratios to Stan's, the
methods chosen; "told": rows whose MCMC error is above 3 reference MCSE (only these enter the error
ratios, since on the others the reference cannot tell); median and worst |CV error| / |MCMC error| over told rows; 2-se
coverage of the CV intervals (CV se and reference MCSE combined) over all rows but those constant in this
run (a state the chains never left: no se, and flagged); "far": rows more
than 4 combined se off, and how many of those were flagged ``se_reliable=False``; flagged rows;
"precise": rows whose reference MCSE is below 0.1x this run's MCMC MCSE.  The same for the sd
(rows told, median |CV sd error| / |MCMC sd error|, 2-se coverage of ``cv_sd``), and the median
``cv_ess / ess_bulk``.  The last line also gives both coverages over the rows marked reliable alone.
A second table: the 3% and 97% bounds of ``summary(..., cv_interval=True)`` (timed apart) against the
references' quantiles (see ``_bound_errors``).

Usage: python bench/posteriordb.py [PDB] [NAME ...]
       PDB: a posteriordb checkout (default ../shared/data/posteriordb); NAME: posteriordb names
       (default: the set in bench/posteriordb_set.py).  PDB_TIMEOUT: seconds per posterior (default 1800).
       PDB_FIGURE: where the bar charts go (default docs/_static/posteriordb.png; "" for none).
Run it alone on the machine: timings next to other heavy jobs are not comparable.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
import warnings

import numpy as np
import posteriordb_set as pset

REF_DIR = os.path.join(os.path.dirname(__file__), "data", "posteriordb")
SEED = 1
CI_PROB = 0.94


def _reference(name):
    path = os.path.join(REF_DIR, f"{name}.json")
    if not os.path.exists(path):
        raise SystemExit(f"No reference for {name} in {REF_DIR}: run python bench/posteriordb_reference.py first.")
    with open(path) as fh:
        return json.load(fh)["rows"]


def _errors(table, ref):
    ratios, covered, far, far_flagged, precise, reliable, constant = [], [], 0, 0, [], [], 0
    for lab in table.index:
        r = ref[lab]
        if table.loc[lab, "sd"] == 0:
            # constant in this run (a rare state never visited): no se to cover with, and flagged
            constant += 1
            continue
        mc_err = abs(table.loc[lab, "mean"] - r["mean"])
        cv_err = abs(table.loc[lab, "cv_mean"] - r["mean"])
        combined = np.hypot(table.loc[lab, "cv_mcse"] + table.loc[lab, "bias_allowance"], r["mcse"])
        covered.append(cv_err <= 2 * combined)
        reliable.append(bool(table.loc[lab, "se_reliable"]))
        if cv_err > 4 * combined:
            far += 1
            far_flagged += not table.loc[lab, "se_reliable"]
        if np.isfinite(table.loc[lab, "mcse_mean"]) and table.loc[lab, "mcse_mean"] > 0:
            precise.append(r["mcse"] < 0.1 * table.loc[lab, "mcse_mean"])
        if mc_err > 3 * r["mcse"]:
            ratios.append(cv_err / mc_err)
    return {"told": len(ratios), "median": float(np.median(ratios)) if ratios else float("nan"),
            "worst": float(np.max(ratios)) if ratios else float("nan"),
            "coverage": float(np.mean(covered)) if covered else float("nan"), "judged": len(covered),
            "covered": int(np.sum(covered)), "constant": constant,
            "reliable": int(np.sum(reliable)), "covered_reliable": int(np.sum(np.array(covered) & np.array(reliable))),
            "far": far, "far_flagged": far_flagged, "precise": float(np.mean(precise)) if precise else float("nan"),
            **_sd_errors(table, ref)}


def _sd_errors(table, ref):
    """As for the mean, for the sd: median |CV sd error| / |MCMC sd error| over rows the reference
    tells, 2-se coverage of cv_sd, and the median cv_ess / ess_bulk."""
    ratios, covered, far, far_flagged, reliable = [], [], 0, 0, []
    for lab in table.index:
        r = ref[lab]
        if r["sd"] == 0 or table.loc[lab, "sd"] == 0:
            continue
        ref_se = pset.reference_sd_se(r)
        mc_err = abs(table.loc[lab, "sd"] - r["sd"])
        cv_err = abs(table.loc[lab, "cv_sd"] - r["sd"])
        combined = np.hypot(table.loc[lab, "cv_mcse_sd"] + table.loc[lab, "bias_allowance"], ref_se)
        covered.append(cv_err <= 2 * combined)
        reliable.append(bool(table.loc[lab, "se_reliable"]))
        if not cv_err <= 4 * combined:
            far += 1
            far_flagged += not table.loc[lab, "se_reliable"]
        if mc_err > 3 * ref_se:
            ratios.append(cv_err / mc_err)
    ess = (table["cv_ess"] / table["ess_bulk"]).to_numpy(dtype=float)
    ess = ess[np.isfinite(ess)]
    return {"sd_told": len(ratios), "sd_median": float(np.median(ratios)) if ratios else float("nan"),
            "sd_coverage": float(np.mean(covered)) if covered else float("nan"), "sd_judged": len(covered),
            "sd_covered": int(np.sum(covered)), "sd_far": far,
            "sd_far_flagged": far_flagged, "sd_reliable": int(np.sum(reliable)),
            "sd_covered_reliable": int(np.sum(np.array(covered, dtype=bool) & np.array(reliable, dtype=bool))),
            "cv_ess_ratio": float(np.median(ess)) if ess.size else float("nan")}


def _bound_errors(table, ref, ci_prob):
    """The interval bounds of ``summary(..., cv_interval=True)`` against the reference quantiles: per bound,
    2-se coverage of the CV bound (its se and the reference's combined), and over the bounds whose plain
    quantile is more than 3 reference se off ("told"), the median |CV error| / |plain error|, also over
    those the CVs moved from the plain quantile; the median cv_mcse / mcse of the moved bounds."""
    from pymc_cv import compat

    names = compat.interval_names(ci_prob)
    probs = ((1 - ci_prob) / 2, (1 + ci_prob) / 2)
    ratios, moved_ratios, se_ratios, covered = [], [], [], []
    for lab in table.index:
        if table.loc[lab, "sd"] == 0:
            continue
        for name, prob in zip(names, probs):
            truth = pset.reference_quantile(ref[lab], prob)
            if truth is None:
                continue
            t, t_se = truth
            plain, cv = float(table.loc[lab, name]), float(table.loc[lab, f"cv_{name}"])
            cv_se = float(table.loc[lab, f"cv_mcse_{name}"])
            covered.append(bool(abs(cv - t) <= 2 * np.hypot(cv_se, t_se)))
            moved = cv != plain
            if moved:
                se_ratios.append(cv_se / float(table.loc[lab, f"mcse_{name}"]))
            if abs(plain - t) > 3 * t_se:
                ratios.append(abs(cv - t) / abs(plain - t))
                if moved:
                    moved_ratios.append(ratios[-1])
    med = lambda x: float(np.median(x)) if x else float("nan")  # noqa: E731
    return {"bounds": len(covered), "told": len(ratios), "moved": len(se_ratios), "median": med(ratios),
            "moved_median": med(moved_ratios), "covered": int(np.sum(covered)), "se_ratio": med(se_ratios),
            "ratios": ratios}


def _forget_fits(model_name):
    """httpstan keeps every fit and returns it again for the same model, data, arguments and seed:
    without this a second run of the bench would time a cache read, not Stan's sampling."""
    import shutil

    import httpstan.cache

    shutil.rmtree(httpstan.cache.model_directory(model_name) / "fits", ignore_errors=True)


def run_one(pdb, name):
    """Every number of one posterior's table row (runs in the subprocess)."""
    warnings.simplefilter("ignore")
    import arviz as az
    import stan

    import pymc_cv
    from pymc_cv import compat

    ref = _reference(name)
    p = pset.load(pdb, name)
    with contextlib.redirect_stdout(sys.stderr):
        posterior = stan.build(p.code, data=p.data, random_seed=SEED)
        _forget_fits(posterior.model_name)
        t0 = time.perf_counter()
        fit = posterior.sample(num_chains=4, num_samples=1000, num_warmup=1000)
        t_stan = time.perf_counter() - t0
    # ArviZ's own conversion first: its first call in a process (xarray's first arrays, about 0.4 s) is
    # paid by a user of az.from_pystan too, and would otherwise be counted as the scores' cost
    t0 = time.perf_counter()
    compat.pystan_posterior(fit, posterior)
    t_arviz = time.perf_counter() - t0
    t0 = time.perf_counter()
    idata = pymc_cv.from_pystan(fit, posterior)
    t_convert = time.perf_counter() - t0
    # az.summary before pymc_cv.summary, for the same reason: the first diagnostics in a process (xarray
    # importing dask where it is installed, ArviZ 0.x compiling its numba functions: 0.3 s of az.summary's
    # first call here, 0.5 s of pymc_cv.summary's when it came first) are paid by whichever comes first
    t0 = time.perf_counter()
    az.summary(idata)
    t_az = time.perf_counter() - t0
    t0 = time.perf_counter()
    table = pymc_cv.summary(idata, progressbar=False)
    t_summary = time.perf_counter() - t0
    # the bounds by CVs (not a default): a second table, timed apart
    t0 = time.perf_counter()
    bounds_table = pymc_cv.summary(idata, progressbar=False, cv_interval=True, ci_prob=CI_PROB)
    t_bounds = time.perf_counter() - t0
    bounds = dict(_bound_errors(bounds_table, ref, CI_PROB), seconds=t_bounds)
    divergent = int(np.sum(np.asarray(fit["divergent__"])))
    return {"name": name, "d": int(idata["score"]["unconstrained"].shape[-1]), "rows": len(table),
            "stan": t_stan, "arviz": t_arviz, "convert": t_convert, "summary": t_summary, "az": t_az,
            "methods": table["method"].value_counts().to_dict(), "flagged": int((~table["se_reliable"]).sum()),
            "divergent": divergent, "bounds": bounds, **_errors(table, ref)}


def _in_subprocess(pdb, name, timeout):
    cmd = [sys.executable, __file__, "--one", pdb, name]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"name": name, "error": f"no result in {timeout:.0f} s"}
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or ["(no message)"])[-1]
        return {"name": name, "error": f"exit {out.returncode}: {last[:200]}"}
    return json.loads(out.stdout.strip().splitlines()[-1])


HEADER = ("| posterior | d | rows | Stan s | ArviZ conversion s | from_pystan s | summary s | from_pystan / Stan "
          "| summary / Stan | methods | told | median CV/MCMC error | worst | 2-se coverage | far (flagged) | flagged "
          "| divergent | precise "
          "| sd told | median CV/MCMC sd error | sd 2-se coverage | sd far (flagged) | cv_ess / ess_bulk |\n"
          "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")


def line(r):
    if "error" in r:
        return f"| {r['name']} | {r.get('error')} |" + " |" * 21
    meth = ", ".join(f"{k} {v}" for k, v in sorted(r["methods"].items(), key=lambda kv: -kv[1]))
    return (f"| {r['name']} | {r['d']} | {r['rows']} | {r['stan']:.1f} | {r['arviz']:.2f} | {r['convert']:.2f} "
            f"| {r['summary']:.1f} "
            f"| {r['convert'] / r['stan']:.2f} | {r['summary'] / r['stan']:.2f} | {meth} | {r['told']} "
            f"| {r['median']:.2g} | {r['worst']:.2g} | {r['coverage']:.0%} | {r['far']} ({r['far_flagged']}) "
            f"| {r['flagged']} | {r['divergent']} | {r['precise']:.0%} | {r['sd_told']} | {r['sd_median']:.2g} "
            f"| {r['sd_coverage']:.0%} | {r['sd_far']} ({r['sd_far_flagged']}) | {r['cv_ess_ratio']:.3g} |")


BOUNDS_HEADER = ("| posterior | bounds | told | moved | median CV/plain error | over moved | 2-se coverage "
                 "| cv_mcse / mcse (moved) | summary(cv_interval=True) s | / Stan |\n"
                 "|---|---|---|---|---|---|---|---|---|---|")


def bounds_line(r):
    if "error" in r or not r["bounds"]["bounds"]:
        return f"| {r['name']} | {r.get('error', 'no reference quantiles')} |" + " |" * 8
    b = r["bounds"]
    return (f"| {r['name']} | {b['bounds']} | {b['told']} | {b['moved']} | {b['median']:.2g} | {b['moved_median']:.2g} "
            f"| {b['covered'] / b['bounds']:.0%} | {b['se_ratio']:.2g} | {b['seconds']:.1f} "
            f"| {b['seconds'] / r['stan']:.2f} |")


def bounds_overall(results):
    ok = [r["bounds"] for r in results if "error" not in r and r["bounds"]["bounds"]]
    ratios = np.concatenate([b["ratios"] for b in ok]) if ok else np.array([])
    medians = [b["median"] for b in ok if np.isfinite(b["median"])]
    pooled = np.median(ratios) if ratios.size else float("nan")
    per_posterior = np.median(medians) if medians else float("nan")
    coverage = sum(b["covered"] for b in ok) / max(sum(b["bounds"] for b in ok), 1)
    return (f"bounds: {sum(b['bounds'] for b in ok)} in {len(ok)} posteriors, {ratios.size} told; median CV/plain "
            f"error over told bounds {pooled:.2g}, median of per-posterior medians {per_posterior:.2g}; "
            f"2-se coverage {coverage:.1%}")


def overall(results):
    ok = [r for r in results if "error" not in r]
    if not ok:
        return "no posterior gave a result"
    rows = sum(r["rows"] for r in ok)
    constant = sum(r["constant"] for r in ok)
    cov = sum(r["covered"] for r in ok) / max(sum(r["judged"] for r in ok), 1)
    medians = [r["median"] for r in ok if np.isfinite(r["median"])]
    ratio = [r["summary"] / r["stan"] for r in ok]
    convert = [r["convert"] / r["stan"] for r in ok]
    # over the rows whose sd is judged (the reference's sd is not 0)
    sd_cov = sum(r["sd_covered"] for r in ok) / max(sum(r["sd_judged"] for r in ok), 1)
    # among the rows the table vouches for (se_reliable): what a user who heeds the flag is told
    reliable = sum(r["reliable"] for r in ok)
    cov_reliable = sum(r["covered_reliable"] for r in ok) / max(reliable, 1)
    sd_reliable = sum(r["sd_reliable"] for r in ok)
    sd_cov_reliable = sum(r["sd_covered_reliable"] for r in ok) / max(sd_reliable, 1)
    sd_medians = [r["sd_median"] for r in ok if np.isfinite(r["sd_median"])]
    return (f"{len(ok)} of {len(results)} posteriors ran; {rows} rows, {constant} of them constant in this run (no "
            f"se, flagged; not in the coverages); 2-se coverage {cov:.1%} "
            f"({cov_reliable:.1%} of the {reliable} rows marked reliable); "
            f"median of per-posterior median CV/MCMC error {np.median(medians):.2g}; "
            f"rows far and not flagged {sum(r['far'] - r['far_flagged'] for r in ok)}; "
            f"summary / Stan median {np.median(ratio):.2f}, max {np.max(ratio):.2f}; "
            f"from_pystan / Stan median {np.median(convert):.2f}, max {np.max(convert):.2f}; "
            f"sd: median of per-posterior median CV/MCMC error {np.median(sd_medians):.2g}, "
            f"2-se coverage {sd_cov:.1%} ({sd_cov_reliable:.1%} of the {sd_reliable} rows marked reliable), "
            "rows far and not flagged "
            f"{sum(r['sd_far'] - r['sd_far_flagged'] for r in ok)}; "
            f"median cv_ess / ess_bulk {np.median([r['cv_ess_ratio'] for r in ok]):.3g}")


def figure(results, path):
    """Per posterior, two bar charts on log scales: the seconds of summary and from_pystan over Stan's
    sampling, and the median |CV error| / |MCMC error| of the mean and of the sd."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = sorted((r for r in results if "error" not in r), key=lambda r: r["summary"] / r["stan"])
    names = [r["name"].split("-", 1)[-1] for r in ok]
    pos = np.arange(len(ok))
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 0.3 * len(ok) + 1.8), sharey=True)
    left.barh(pos + 0.2, [r["summary"] / r["stan"] for r in ok], height=0.4, color="C0", label="summary")
    left.barh(pos - 0.2, [r["convert"] / r["stan"] for r in ok], height=0.4, color="0.6", label="from_pystan")
    left.axvline(1.0, color="k", lw=0.8)
    left.set_xscale("log")
    left.set_xlabel("seconds / Stan's sampling seconds")
    left.legend(fontsize="small")
    err = [r["median"] if np.isfinite(r["median"]) else np.nan for r in ok]
    sd_err = [r["sd_median"] if np.isfinite(r["sd_median"]) else np.nan for r in ok]
    right.barh(pos + 0.2, err, height=0.4, color="C0", label="mean")
    right.barh(pos - 0.2, sd_err, height=0.4, color="C2", label="sd")
    right.axvline(1.0, color="k", lw=0.8)
    right.set_xscale("log")
    right.set_xlabel("median |CV error| / |MCMC error| (rows told)")
    right.legend(fontsize="small")
    left.set_yticks(pos)
    left.set_yticklabels(names, fontsize="small")
    fig.suptitle("posteriordb, PyStan 4 x 1,000 draws: pymc_cv.summary with defaults", fontsize="medium")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return path


def main():
    args = sys.argv[1:]
    if args and args[0] == "--one":
        print(json.dumps(run_one(args[1], args[2])))
        return

    pdb = args.pop(0) if args and os.path.isdir(args[0]) else pset.DEFAULT_PDB
    names = args or pset.NAMES
    timeout = float(os.environ.get("PDB_TIMEOUT", 1800))
    results = []
    for name in names:
        results.append(_in_subprocess(pdb, name, timeout))
        print(line(results[-1]), flush=True)
    print("\n4 chains x 1,000 draws after 1,000 warm-up (PyStan), pymc_cv.summary with defaults\n")
    print(HEADER)
    print("\n".join(line(r) for r in results))
    print("\n" + overall(results))
    print(f"\nThe {100 * (1 - CI_PROB) / 2:g}% and {100 * (1 + CI_PROB) / 2:g}% bounds, "
          "summary(..., cv_interval=True)\n")
    print(BOUNDS_HEADER)
    print("\n".join(bounds_line(r) for r in results))
    print("\n" + bounds_overall(results))
    out = os.environ.get("PDB_FIGURE", os.path.join(os.path.dirname(__file__), "..", "docs", "_static",
                                                    "posteriordb.png"))
    if out:
        print("figure:", figure(results, out))


if __name__ == "__main__":
    main()
