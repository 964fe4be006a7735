"""Ways to a confidently wrong table, each run on several seeds: is every far-off row flagged?

1. Draws of the README model (mu ~ N(0, 10)) handed to `summary` with another model under the same names
   (mu ~ N(0, 5)), from `pm.sample_smc` (no per-draw log density recorded) and from a posterior-only idata
   (no log density, no data): the pairing cannot be checked, so every row must be flagged.
2. The same with the data shifted by 0.002 on a posterior-only idata.
3. Heavy tails: x ~ StudentT(nu, shape=2), nu = 2.5 and 3 (the sd's estimator has infinite variance):
   no mean or sd row beyond 4 se while marked reliable.

Per case and seed: the largest |cv_mean - truth| / cv_mcse (and of cv_sd for the sd rows) over the rows
marked reliable, and how many rows are marked reliable.  "truth" is the exact posterior mean of the model
that made the draws (case 1, 2: conjugate normal with known sd, by quadrature over sigma; case 3: 0 for the
mean, the Student-t's sd for the sd).

Usage: python bench/adversarial.py [seeds]      (default 5)
"""

import sys
import warnings

import numpy as np
from scipy import stats

warnings.simplefilter("ignore")

import pymc as pm  # noqa: E402

import pymc_cv  # noqa: E402
from pymc_cv import compat  # noqa: E402


def readme_model(prior_sd, y):
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, prior_sd)
        sigma = pm.HalfNormal("sigma", 5)
        pm.Normal("y", mu, sigma, observed=y)
    return model


def exact_means(y, prior_sd=10.0):
    """E[mu], E[sigma] of the README model by 2-d quadrature."""
    def log_joint(sigma, mu):
        return (stats.norm.logpdf(y, mu, sigma).sum() + stats.norm.logpdf(mu, 0, prior_sd)
                + stats.halfnorm.logpdf(sigma, scale=5))
    mus, sigmas = np.linspace(-1, 3.5, 601), np.linspace(0.8, 4.0, 601)
    lp = np.array([[log_joint(s, m) for s in sigmas] for m in mus])
    w = np.exp(lp - lp.max())
    w /= w.sum()
    return {"mu": float((w.sum(axis=1) * mus).sum()), "sigma": float((w.sum(axis=0) * sigmas).sum())}


def posterior_only(idata):
    return compat.from_dict({"posterior": {k: np.asarray(v) for k, v in compat.group(idata, "posterior").items()}})


def worst(table, truth, column="cv_mean", se="cv_mcse"):
    rel = table[table["se_reliable"].astype(bool)]
    z = [abs(rel.loc[r, column] - truth[r]) / (rel.loc[r, se] + rel.loc[r, "bias_allowance"]) for r in rel.index
         if r in truth]
    return (max(z) if z else float("nan")), len(rel)


def main():
    seeds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    y = np.random.default_rng(0).normal(1.0, 2.0, size=50)
    truth = exact_means(y)
    rows = []
    for seed in range(1, seeds + 1):
        with readme_model(10.0, y):
            smc = pm.sample_smc(1000, chains=2, random_seed=seed, progressbar=False)
            nuts = pm.sample(500, chains=2, random_seed=seed, progressbar=False,
                             compute_convergence_checks=False)
        other = readme_model(5.0, y)
        shifted = readme_model(10.0, y + 0.002)
        for name, idata, model in (("SMC draws, other prior", smc, other),
                                   ("posterior only, other prior", posterior_only(nuts), other),
                                   ("posterior only, data + 0.002", posterior_only(nuts), shifted)):
            try:
                table = pymc_cv.summary(idata, model=model, progressbar=False)
                z, n_rel = worst(table, truth)
                rows.append((name, seed, f"{z:.1f}", n_rel, "table"))
            except Exception as err:  # an error is a result too
                rows.append((name, seed, "-", 0, type(err).__name__))
    for nu in (2.5, 3.0):
        sd = float(np.sqrt(nu / (nu - 2)))
        for seed in range(1, seeds + 1):
            with pm.Model() as model:
                pm.StudentT("x", nu=nu, mu=0, sigma=1, shape=2)
                idata = pm.sample(1000, chains=4, random_seed=seed, progressbar=False,
                                  compute_convergence_checks=False)
            table = pymc_cv.summary(idata, model=model, progressbar=False)
            zm, n_rel = worst(table, {"x[0]": 0.0, "x[1]": 0.0})
            zs, _ = worst(table, {"x[0]": sd, "x[1]": sd}, "cv_sd", "cv_mcse_sd")
            rows.append((f"StudentT(nu={nu}), mean / sd", seed, f"{zm:.1f} / {zs:.1f}", n_rel, "table"))
    print("| case | seed | largest abs(error) / se among reliable rows | rows marked reliable | outcome |")
    print("|---|---|---|---|---|")
    for r in rows:
        print("| " + " | ".join(str(v) for v in r) + " |")


if __name__ == "__main__":
    main()
