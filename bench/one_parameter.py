"""`summary` on one-parameter PyMC models against nutpie's sampling, with exact references.

Four models with one free parameter each, as people write them with PyMC's distribution helpers: a
mixture weight (``pm.NormalMixture``), a censored mean (``pm.Censored``), a truncated mean
(``pm.Truncated``) and an exponential rate with a hand-written likelihood (``pm.CustomDist``).  Each
has the parameter and one deterministic function of it as rows.  The references are exact: the
posterior mean and sd of each row by a 1-d quadrature over the unconstrained parameter (40,001 points,
15 posterior sd either side of the mode) of the log density and the rows as PyMC computes them, which is
what the sampler draws from.  The same quadrature of the model's maths, written with SciPy, must agree
within 1e-5 posterior sd (the column "maths - PyMC" gives the largest gap); the CustomDist's posterior is
conjugate (Gamma), and the quadrature of its maths is checked against the closed form.

For each model and seed: nutpie's compilation (once) and sampling, 4 chains x DRAWS after 1,000 tuning
steps, with ``store_unconstrained=True, store_gradient=True``; then ``az.summary`` and
``pymc_cv.summary`` (defaults, the sampler's stored gradients) on its draws, each timed in the same
process.  The table gives per model the median and largest seconds over the seeds and their ratios to
nutpie's sampling, the methods chosen, the median |CV error| / |MCMC error| of the mean and of the sd
over rows and seeds, the 2-se coverage of ``cv_mean`` and ``cv_sd``, and how sharp their se's are: per row,
the median reported se over the seeds divided by the RMSE of the estimates against the exact value (1 is
exact; 2 understates what the CV bought 4x in variance), the median over rows that the CV does not make exact
to round-off (RMSE above 1e-12 sd), and the mean over the seeds of (CV estimate - exact) / se, the row's
with the largest magnitude (about 1 / sqrt(seeds) for an unbiased estimate with an exact se; a bias the se
does not cover shows as one sign in every seed).  Use 20 seeds or more for these.

Usage: python bench/one_parameter.py [DRAWS] [SEEDS]   (defaults 1000 and 5)
Run it alone on the machine: timings next to other heavy jobs are not comparable.
"""

from __future__ import annotations

import sys
import time
import warnings

import arviz as az
import numpy as np
import pymc as pm
import pytensor.tensor as pt
from scipy import optimize, special, stats

import pymc_cv

GRID = 40_001
WIDTH = 15.0  # posterior sd either side of the mode


def _grid(log_density, start):
    """40,001 points over 15 posterior sd either side of the mode of ``log_density`` (the unconstrained
    parameter's, Jacobian included)."""
    mode = optimize.minimize_scalar(lambda u: -log_density(u), bracket=(start - 1.0, start + 1.0)).x
    h = 1e-4
    curvature = -(log_density(mode + h) - 2 * log_density(mode) + log_density(mode - h)) / h**2
    sd = 1.0 / np.sqrt(curvature)
    return np.linspace(mode - WIDTH * sd, mode + WIDTH * sd, GRID)


def _moments(u, logp, values):
    """Mean and sd of each array of ``values`` (on the grid ``u``) under the density exp(logp)."""
    w = np.exp(logp - logp.max())
    w /= _integrate(w, u)
    out = {}
    for name, f in values.items():
        mean = float(_integrate(w * f, u))
        out[name] = (mean, float(np.sqrt(_integrate(w * (f - mean) ** 2, u))))
    return out


def _integrate(f, u):
    return np.trapezoid(f, u) if hasattr(np, "trapezoid") else np.trapz(f, u)


def reference(model, log_density, rows, start):
    """The posterior mean and sd of every row of ``model`` (one free parameter) by quadrature, with the log
    density and the rows as PyMC computes them: that is the distribution the sampler draws from (PyTensor's
    normal log-CDF, for one, differs from SciPy's by up to 4e-7, which moves a mean by 1e-8 and is far
    beyond a CV se of 1e-10).  The same quadrature of the maths (``log_density`` and ``rows``, functions of
    the unconstrained parameter written with SciPy) must agree within 1e-5 posterior sd: the model is the
    one meant.  Returns ({row: (mean, sd)}, the largest disagreement in posterior sd)."""
    import pytensor
    from pytensor.graph.replace import vectorize_graph

    u = _grid(log_density, start)
    (value,) = model.value_vars
    names = list(rows)
    graph = model.replace_rvs_by_values([model.logp()] + [model[name] for name in names])
    grid = pt.dvector("grid")
    evaluated = pytensor.function([grid], vectorize_graph(graph, replace={value: grid}))(u)
    ref = _moments(u, evaluated[0], dict(zip(names, evaluated[1:])))
    maths = _moments(u, log_density(u), {name: fn(u) for name, fn in rows.items()})
    gap = max(max(abs(ref[n][0] - maths[n][0]), abs(ref[n][1] - maths[n][1])) / ref[n][1] for n in names)
    if gap > 1e-5:
        raise AssertionError(f"{model.name or 'model'}: PyMC's density and the maths disagree by {gap:.2g} sd")
    return ref, gap


def mixture_weight(rng):
    y = np.where(rng.random(200) < 0.3, rng.normal(-1.0, 1.0, 200), rng.normal(1.5, 1.0, 200))
    with pm.Model() as model:
        w = pm.Beta("w", 2.0, 2.0)
        pm.Deterministic("odds", w / (1 - w))
        pm.NormalMixture("y", w=pt.stack([w, 1 - w]), mu=np.array([-1.0, 1.5]), sigma=1.0, observed=y)
    a, b = stats.norm.logpdf(y, -1.0, 1.0), stats.norm.logpdf(y, 1.5, 1.0)

    def log_density(u):  # u = logit(w)
        u = np.atleast_1d(u)
        wv = special.expit(u)[:, None]
        like = np.logaddexp(np.log(wv) + a, np.log1p(-wv) + b).sum(axis=1)
        out = like + stats.beta.logpdf(wv[:, 0], 2.0, 2.0) + np.log(wv[:, 0]) + np.log1p(-wv[:, 0])
        return out if out.size > 1 else out[0]

    return model, log_density, {"w": special.expit, "odds": np.exp}, 0.0


def censored_mean(rng):
    lower, upper = -1.0, 1.5
    y = np.clip(rng.normal(0.8, 1.0, 100), lower, upper)
    with pm.Model() as model:
        mu = pm.Normal("mu", 0.0, 10.0)
        pm.Deterministic("p_above", 1 - pm.math.exp(pm.logcdf(pm.Normal.dist(mu, 1.0), upper)))
        pm.Censored("y", pm.Normal.dist(mu, 1.0), lower=lower, upper=upper, observed=y)
    inside, n_low, n_high = y[(y > lower) & (y < upper)], np.sum(y <= lower), np.sum(y >= upper)

    def log_density(m):
        m = np.atleast_1d(m)[:, None]
        like = (stats.norm.logpdf(inside, m, 1.0).sum(axis=1) + n_low * stats.norm.logcdf(lower - m[:, 0])
                + n_high * stats.norm.logsf(upper - m[:, 0]))
        out = like + stats.norm.logpdf(m[:, 0], 0.0, 10.0)
        return out if out.size > 1 else out[0]

    return model, log_density, {"mu": lambda m: m, "p_above": lambda m: stats.norm.sf(upper - m)}, float(np.mean(y))


def truncated_mean(rng):
    y = stats.truncnorm.rvs(-0.3, np.inf, loc=0.3, scale=1.0, size=100, random_state=rng)
    with pm.Model() as model:
        mu = pm.Normal("mu", 0.0, 5.0)
        # the mean of the truncated normal the data come from: mu + phi(mu) / Phi(mu)
        pm.Deterministic("data_mean", mu + pm.math.exp(pm.logp(pm.Normal.dist(0.0, 1.0), mu)
                                                       - pm.logcdf(pm.Normal.dist(0.0, 1.0), mu)))
        pm.Truncated("y", pm.Normal.dist(mu, 1.0), lower=0.0, observed=y)

    def log_density(m):
        m = np.atleast_1d(m)[:, None]
        like = (stats.norm.logpdf(y, m, 1.0) - stats.norm.logsf(-m)).sum(axis=1)
        out = like + stats.norm.logpdf(m[:, 0], 0.0, 5.0)
        return out if out.size > 1 else out[0]

    rows = {"mu": lambda m: m, "data_mean": lambda m: m + np.exp(stats.norm.logpdf(m) - stats.norm.logcdf(m))}
    return model, log_density, rows, float(np.mean(y))


def custom_rate(rng):
    y = rng.exponential(1 / 1.5, 50)
    with pm.Model() as model:
        lam = pm.Gamma("lam", 2.0, 1.0)
        pm.Deterministic("mean_wait", 1 / lam)
        pm.CustomDist("y", lam, logp=lambda value, rate: pt.log(rate) - rate * value, observed=y)
    shape, rate = 2.0 + y.size, 1.0 + y.sum()  # conjugate: Gamma(shape, rate)

    def log_density(u):  # u = log(lam)
        return stats.gamma.logpdf(np.exp(u), shape, scale=1 / rate) + u

    rows = {"lam": np.exp, "mean_wait": lambda u: np.exp(-u)}
    # the quadrature against the conjugate posterior's closed form
    u = _grid(log_density, 0.0)
    maths = _moments(u, log_density(u), {name: fn(u) for name, fn in rows.items()})
    exact = {"lam": (shape / rate, np.sqrt(shape) / rate),
             "mean_wait": (rate / (shape - 1), rate / ((shape - 1) * np.sqrt(shape - 2)))}
    for name, (m, s) in exact.items():
        assert abs(maths[name][0] - m) < 1e-9 * s and abs(maths[name][1] - s) < 1e-9 * s, (name, maths[name], m, s)
    return model, log_density, rows, 0.0


MODELS = {"mixture weight": mixture_weight, "censored mean": censored_mean, "truncated mean": truncated_mean,
          "CustomDist rate": custom_rate}


def run(name, build, draws, seeds):
    import nutpie

    model, log_density, rows, start = build(np.random.default_rng(2026))
    ref, gap = reference(model, log_density, rows, start)
    t0 = time.perf_counter()
    compiled = nutpie.compile_pymc_model(model)
    t_compile = time.perf_counter() - t0
    runs = []
    for seed in seeds:
        t0 = time.perf_counter()
        idata = nutpie.sample(compiled, draws=draws, tune=1000, chains=4, seed=seed, progress_bar=False,
                              store_unconstrained=True, store_gradient=True)
        t_sample = time.perf_counter() - t0
        t0 = time.perf_counter()
        az.summary(idata)
        t_az = time.perf_counter() - t0
        t0 = time.perf_counter()
        table = pymc_cv.summary(idata, progressbar=False)
        t_summary = time.perf_counter() - t0
        runs.append({"sample": t_sample, "az": t_az, "summary": t_summary, "table": table})
    return {"name": name, "compile": t_compile, "runs": runs, "ref": ref, "gap": gap}


def _pooled(result):
    ratios, sd_ratios, covered, sd_covered, methods = [], [], [], [], {}
    sharp, sd_sharp, mean_z = [], [], []
    for lab, (mean, sd) in result["ref"].items():
        tables = [r["table"].loc[lab] for r in result["runs"]]
        if len(tables) < 2:
            continue
        for est, se, truth, out in (("cv_mean", "cv_mcse", mean, sharp), ("cv_sd", "cv_mcse_sd", sd, sd_sharp)):
            errors = np.array([t[est] - truth for t in tables])
            ses = np.array([t[se] for t in tables])
            rmse = np.sqrt(np.mean(errors ** 2))
            if rmse > 1e-12 * sd:  # a row the CV makes exact reports the round-off floor as its se
                out.append(np.median(ses) / rmse)
                mean_z.append((f"{lab} {'mean' if est == 'cv_mean' else 'sd'}", float(np.mean(errors / ses))))
    for r in result["runs"]:
        table = r["table"]
        for lab, (mean, sd) in result["ref"].items():
            ratios.append(abs(table.loc[lab, "cv_mean"] - mean) / abs(table.loc[lab, "mean"] - mean))
            sd_ratios.append(abs(table.loc[lab, "cv_sd"] - sd) / abs(table.loc[lab, "sd"] - sd))
            covered.append(abs(table.loc[lab, "cv_mean"] - mean) <= 2 * table.loc[lab, "cv_mcse"] + 2 * table.loc[lab, "bias_allowance"])
            sd_covered.append(abs(table.loc[lab, "cv_sd"] - sd) <= 2 * table.loc[lab, "cv_mcse_sd"] + 2 * table.loc[lab, "bias_allowance"])
            methods[table.loc[lab, "method"]] = methods.get(table.loc[lab, "method"], 0) + 1
    return {"median": float(np.median(ratios)), "sd_median": float(np.median(sd_ratios)),
            "coverage": float(np.mean(covered)), "sd_coverage": float(np.mean(sd_covered)), "methods": methods,
            "n": len(ratios), "se_over_rmse": float(np.median(sharp)) if sharp else np.nan,
            "sd_se_over_rmse": float(np.median(sd_sharp)) if sd_sharp else np.nan,
            "mean_z": max(mean_z, key=lambda lz: abs(lz[1])) if mean_z else ("", np.nan)}


def main():
    warnings.simplefilter("ignore")
    args = sys.argv[1:]
    draws = int(args[0]) if args else 1000
    seeds = list(range(1, 1 + (int(args[1]) if len(args) > 1 else 5)))
    results = [run(name, build, draws, seeds) for name, build in MODELS.items()]
    print(f"\nnutpie, 4 chains x {draws} draws (tune 1000), seeds {seeds[0]}-{seeds[-1]}; summary with defaults on "
          "the sampler's stored gradients; seconds: median (largest) over the seeds\n")
    print("| model | rows | maths - PyMC (sd) | nutpie compile s | nutpie sample s | az.summary s | summary s "
          "| summary / nutpie sample "
          "| methods | median CV/MCMC error | 2-se coverage | median CV/MCMC sd error | sd 2-se coverage "
          "| se / RMSE | sd se / RMSE | largest mean z over seeds |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for res in results:
        runs, acc = res["runs"], _pooled(res)
        sample = np.array([r["sample"] for r in runs])
        az_s = np.array([r["az"] for r in runs])
        summ = np.array([r["summary"] for r in runs])
        ratio = summ / sample
        meth = ", ".join(f"{k} {v}" for k, v in sorted(acc["methods"].items(), key=lambda kv: -kv[1]))
        print(f"| {res['name']} | {len(res['ref'])} | {res['gap']:.1e} | {res['compile']:.1f} "
              f"| {np.median(sample):.2f} ({sample.max():.2f}) | {np.median(az_s):.2f} ({az_s.max():.2f}) "
              f"| {np.median(summ):.2f} ({summ.max():.2f}) | {np.median(ratio):.2f} ({ratio.max():.2f}) | {meth} "
              f"| {acc['median']:.3g} "
              f"| {acc['coverage']:.0%} | {acc['sd_median']:.3g} | {acc['sd_coverage']:.0%} "
              f"| {acc['se_over_rmse']:.2f} | {acc['sd_se_over_rmse']:.2f} "
              f"| {acc['mean_z'][1]:+.2f} ({acc['mean_z'][0]}) |")
    every = np.array([r["summary"] for res in results for r in res["runs"]])
    print(f"\nsummary seconds over all {every.size} runs: median {np.median(every):.2f}, largest {every.max():.2f}; "
          f"runs under 0.5 s: {np.mean(every < 0.5):.0%}")


if __name__ == "__main__":
    main()
