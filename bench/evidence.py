"""Log evidence on models people write, against precise references: ``log_evidence`` and TI with their
defaults, every sampler.

Models: all but the logistic regression have a scale parameter whose prior has mass near 0, so TI's
integrand is singular at t = 0; their log p(y) is by quadrature after integrating the Gaussian parts in
closed form:

- readme: the README's model, mu ~ N(0, 10), sigma ~ HalfNormal(5), 50 observations;
- eight_schools_nc / eight_schools_c: eight schools, non-centred and centred (mu ~ N(0, 5),
  tau ~ HalfCauchy(5)); y ~ N(mu 1, diag(s^2 + tau^2) + 25 11') given tau;
- varying_intercept: 6 groups x 5 observations, a_j ~ N(mu, tau), mu ~ N(0, 5), tau ~ HalfNormal(2),
  sigma ~ HalfNormal(2); 2-d quadrature over (tau, sigma);
- heavy_tailed: 30 observations, mu ~ StudentT(3, 0, 10), sigma ~ HalfCauchy(2.5); 2-d quadrature;
- logistic: a logistic regression, intercept and 3 predictors, 100 observations, N(0, 2.5) priors;
  no scale parameter and no closed form: the reference is importance sampling from a Student-t(5)
  proposal at the Laplace approximation (covariance x 1.3), 10^6 draws, its se printed (about 5e-4);
- vague_halfcauchy / vague_halfnormal: a regression with vague priors, b ~ N(0, 100) (intercept and 4
  slopes), 100 observations, sigma ~ HalfCauchy(1) or HalfNormal(2); 1-d quadrature over log sigma;
- pdb_sblrc_blr, pdb_arK: posteriordb's sblrc-blr (beta ~ N(0, 10), sigma ~ N+(0, 10)) and arK-arK (an AR(5),
  coefficients ~ N(0, 10), sigma ~ Cauchy+(0, 2.5)) as PyMC models, with posteriordb's data; 1-d quadrature.

Per model, method and seed: ``log_evidence(model, random_seed=seed)`` (bridge sampling from ``pm.sample``'s
draws, TI where that fails its checks), or ``thermodynamic_integration(model, sampler=..., random_seed=seed)``
("nuts", "population", "smc"; "smc" is TI's default, with 1,000 particles and ZV-CVs) with every other
argument at the sampler's default; the error of the reported
estimate and of plain TI (``mc_log_evidence``) in nats, |error| / se, whether it is flagged, seconds, and in
how many runs importance sampling from the last SMC stage was usable (k-hat < 0.5) and weighed in.
Beside it, PyMC's own SMC (``pm.sample_smc``, 2 chains, its default draws) and its log marginal
likelihood (mean over chains), as an anchor.

Usage: python bench/evidence.py [SEEDS] [MODEL ...] [--samplers=log_evidence,nuts,population,smc]
"""

from __future__ import annotations

import logging
import sys
import time
import warnings

import numpy as np
from scipy import integrate, optimize, stats
from scipy.special import log_expit, logsumexp

warnings.simplefilter("ignore")
logging.getLogger("pymc").setLevel(logging.ERROR)

import pymc as pm  # noqa: E402

import pymc_cv  # noqa: E402

sys.path.insert(0, __import__("os").path.dirname(__file__))
import posteriordb_set as pset  # noqa: E402

SCHOOLS_Y = np.array([28.0, 8.0, -3.0, 7.0, -1.0, 1.0, 18.0, 12.0])
SCHOOLS_S = np.array([15.0, 10.0, 16.0, 11.0, 9.0, 11.0, 10.0, 18.0])


def _mvn_logpdf(y, cov):
    return stats.multivariate_normal(np.zeros(y.size), cov).logpdf(y)


def _quad_log(f, lo, hi, **kw):
    """log of int f over [lo, hi] for f given as a log density: the integrand is shifted by its peak."""
    grid = np.linspace(lo, hi, 2001)
    peak = max(f(g) for g in grid)
    value, _ = integrate.quad(lambda u: np.exp(f(u) - peak), lo, hi, limit=500, epsabs=0, epsrel=1e-10, **kw)
    return np.log(value) + peak


def readme():
    y = np.random.default_rng(0).normal(1.0, 2.0, size=50)
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 10)
        sigma = pm.HalfNormal("sigma", 5)
        pm.Normal("y", mu, sigma, observed=y)
    ones = np.ones((y.size, y.size))

    def log_marginal(log_sigma):  # over log sigma, with the Jacobian
        s = np.exp(log_sigma)
        return _mvn_logpdf(y, s**2 * np.eye(y.size) + 100 * ones) + stats.halfnorm.logpdf(s, scale=5) + log_sigma

    return model, _quad_log(log_marginal, -4, 4)


def _schools(centred):
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 5)
        tau = pm.HalfCauchy("tau", 5)
        if centred:
            theta = pm.Normal("theta", mu, tau, shape=8)
        else:
            eta = pm.Normal("eta", 0, 1, shape=8)
            theta = pm.Deterministic("theta", mu + tau * eta)
        pm.Normal("y", theta, SCHOOLS_S, observed=SCHOOLS_Y)

    def log_marginal(log_tau):
        t = np.exp(log_tau)
        cov = np.diag(SCHOOLS_S**2 + t**2) + 25 * np.ones((8, 8))
        return _mvn_logpdf(SCHOOLS_Y, cov) + stats.halfcauchy.logpdf(t, scale=5) + log_tau

    return model, _quad_log(log_marginal, -25, 12)


def eight_schools_nc():
    return _schools(False)


def eight_schools_c():
    return _schools(True)


def varying_intercept():
    rng = np.random.default_rng(3)
    J, n = 6, 5
    group = np.repeat(np.arange(J), n)
    y = rng.normal(1.0, 1.0, J)[group] + rng.normal(0, 0.8, J * n)
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 5)
        tau = pm.HalfNormal("tau", 2)
        sigma = pm.HalfNormal("sigma", 2)
        a = pm.Normal("a", mu, tau, shape=J)
        pm.Normal("y", a[group], sigma, observed=y)
    same = (group[:, None] == group[None, :]).astype(float)

    def log_marginal(log_tau, log_sigma):
        s, t = np.exp(log_sigma), np.exp(log_tau)
        cov = s**2 * np.eye(y.size) + t**2 * same + 25.0
        return (_mvn_logpdf(y, cov) + stats.halfnorm.logpdf(t, scale=2) + stats.halfnorm.logpdf(s, scale=2)
                + log_sigma + log_tau)

    return model, _dblquad_log(log_marginal, (-20, 4), (-4, 3))


def heavy_tailed():
    y = np.random.default_rng(4).standard_t(4, size=30) * 1.5 + 2.0
    with pm.Model() as model:
        mu = pm.StudentT("mu", nu=3, mu=0, sigma=10)
        sigma = pm.HalfCauchy("sigma", 2.5)
        pm.Normal("y", mu, sigma, observed=y)

    def log_joint(mu, log_sigma):
        s = np.exp(log_sigma)
        return (stats.norm.logpdf(y, mu, s).sum() + stats.t.logpdf(mu, 3, 0, 10)
                + stats.halfcauchy.logpdf(s, scale=2.5) + log_sigma)

    return model, _dblquad_log(log_joint, (-10, 15), (-4, 4))


def logistic():
    rng = np.random.default_rng(5)
    n, k, prior_sd = 100, 3, 2.5
    X = rng.normal(size=(n, k))
    y = (rng.random(n) < 1 / (1 + np.exp(-(-0.3 + X @ np.array([0.8, -1.2, 0.4]))))).astype(float)
    with pm.Model() as model:
        a = pm.Normal("a", 0, prior_sd)
        b = pm.Normal("b", 0, prior_sd, shape=k)
        pm.Bernoulli("y", logit_p=a + pm.math.dot(X, b), observed=y)
    design = np.column_stack([np.ones(n), X])

    def log_joint(w):  # w: (..., k + 1)
        eta = w @ design.T
        return (y * log_expit(eta) + (1 - y) * log_expit(-eta)).sum(-1) + stats.norm.logpdf(w, 0, prior_sd).sum(-1)

    mode = optimize.minimize(lambda w: -log_joint(w), np.zeros(k + 1), method="BFGS").x
    p = 1 / (1 + np.exp(-(design @ mode)))
    hessian = design.T @ (design * (p * (1 - p))[:, None]) + np.eye(k + 1) / prior_sd**2
    proposal = stats.multivariate_t(mode, 1.3 * np.linalg.inv(hessian), df=5)
    draws = proposal.rvs(size=1_000_000, random_state=np.random.default_rng(0))
    log_w = log_joint(draws) - proposal.logpdf(draws)
    w = np.exp(log_w - log_w.max())
    print(f"logistic: importance-sampling reference se {w.std() / w.mean() / np.sqrt(w.size):.1e} nats")
    return model, float(logsumexp(log_w) - np.log(log_w.size))


def _vague_regression(scale_prior):
    """b ~ N(0, 100) (intercept and 4 slopes), 100 observations, a vague prior that TI's first rungs
    cannot follow; log p(y) by quadrature over log sigma."""
    rng = np.random.default_rng(7)
    n, d = 100, 5
    X = np.column_stack([np.ones(n), rng.normal(size=(n, d - 1))])
    y = X @ np.array([1.0, 0.5, -0.8, 0.3, 0.0]) + rng.normal(0, 1.2, n)
    prior = {"halfcauchy": (pm.HalfCauchy, 1.0, stats.halfcauchy), "halfnormal": (pm.HalfNormal, 2.0, stats.halfnorm)}
    dist, scale, density = prior[scale_prior]
    with pm.Model() as model:
        b = pm.Normal("b", 0, 100, shape=d)
        sigma = dist("sigma", scale)
        pm.Normal("y", pm.math.dot(X, b), sigma, observed=y)
    return model, _gaussian_regression_evidence(y, X, 100.0, lambda s: density.logpdf(s, scale=scale))


def _gaussian_regression_evidence(y, X, prior_sd, sigma_logprior):
    """log p(y) of y ~ N(X b, sigma), b ~ N(0, prior_sd^2 I): normal given sigma, quadrature over log sigma."""
    n, k = X.shape
    XtX, Xty, yty = X.T @ X, X.T @ y, y @ y

    def log_marginal(log_sigma):  # Woodbury and the determinant lemma: k x k, stable at any sigma
        s2 = np.exp(2 * log_sigma)
        chol = np.linalg.cholesky(XtX + s2 / prior_sd**2 * np.eye(k))
        u = np.linalg.solve(chol, Xty)
        quad = (yty - u @ u) / s2
        logdet = n * np.log(s2) + 2 * np.sum(np.log(np.diag(chol))) - k * np.log(s2 / prior_sd**2)
        return -0.5 * (n * np.log(2 * np.pi) + logdet + quad) + sigma_logprior(np.exp(log_sigma)) + log_sigma

    grid = np.linspace(-8, 6, 1401)
    top = grid[int(np.argmax([log_marginal(g) for g in grid]))]
    return _quad_log(log_marginal, top - 3, top + 3)


def pdb_sblrc_blr():
    """posteriordb's sblrc-blr: beta ~ N(0, 10) (5 coefficients), sigma ~ N+(0, 10), 100 observations."""
    data = pset.load(pset.DEFAULT_PDB, "sblrc-blr").data
    y, X = np.asarray(data["y"], dtype=float), np.asarray(data["X"], dtype=float)
    with pm.Model() as model:
        beta = pm.Normal("beta", 0, 10, shape=X.shape[1])
        sigma = pm.HalfNormal("sigma", 10)
        pm.Normal("y", pm.math.dot(X, beta), sigma, observed=y)
    return model, _gaussian_regression_evidence(y, X, 10.0, lambda s: stats.halfnorm.logpdf(s, scale=10))


def pdb_arK():
    """posteriordb's arK-arK: an AR(5) with alpha, beta ~ N(0, 10), sigma ~ Cauchy+(0, 2.5), given the first
    5 observations (the regression of y[t] on 1 and its 5 lags)."""
    data = pset.load(pset.DEFAULT_PDB, "arK-arK").data
    series, K = np.asarray(data["y"], dtype=float), int(data["K"])
    T = series.size
    X = np.column_stack([np.ones(T - K)] + [series[K - k:T - k] for k in range(1, K + 1)])
    y = series[K:]
    with pm.Model() as model:
        coef = pm.Normal("coef", 0, 10, shape=K + 1)
        sigma = pm.HalfCauchy("sigma", 2.5)
        pm.Normal("y", pm.math.dot(X, coef), sigma, observed=y)
    return model, _gaussian_regression_evidence(y, X, 10.0, lambda s: stats.halfcauchy.logpdf(s, scale=2.5))


def vague_halfcauchy():
    return _vague_regression("halfcauchy")


def vague_halfnormal():
    return _vague_regression("halfnormal")


def _dblquad_log(f, inner, outer):
    """log int int exp f(u, v) du dv, u over ``inner`` and v over ``outer``, shifted by a grid peak."""
    u, v = np.linspace(*inner, 201), np.linspace(*outer, 201)
    peak = max(f(a, b) for a in u[::5] for b in v[::5])
    value, _ = integrate.dblquad(lambda a, b: np.exp(f(a, b) - peak), outer[0], outer[1], inner[0], inner[1],
                                 epsabs=0, epsrel=1e-8)
    return np.log(value) + peak


MODELS = {f.__name__: f for f in (readme, eight_schools_nc, eight_schools_c, varying_intercept, heavy_tailed,
                                   logistic, vague_halfcauchy, vague_halfnormal, pdb_sblrc_blr, pdb_arK)}


def pymc_smc(model, seed):
    t0 = time.perf_counter()
    with model:
        idata = pm.sample_smc(chains=2, random_seed=seed, progressbar=False, compute_convergence_checks=False)
    lml = np.asarray(idata.sample_stats["log_marginal_likelihood"])
    # PyMC keeps one value per stage for some versions: the last finite one per chain is the estimate
    # (or an object array of per-stage arrays)
    per_chain = []
    for c in lml.reshape(lml.shape[0], -1):
        values = np.concatenate([np.ravel(np.asarray(v, dtype=float)) for v in np.ravel(c)])
        per_chain.append(values[np.isfinite(values)][-1])
    return float(logsumexp(per_chain) - np.log(len(per_chain))), time.perf_counter() - t0


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    seeds = int(args.pop(0)) if args and args[0].isdigit() else 3
    names = args or list(MODELS)
    samplers = ["log_evidence", "nuts", "population", "smc"]
    for a in sys.argv[1:]:
        if a.startswith("--samplers="):
            samplers = a.split("=", 1)[1].split(",")
    rows = []
    for name in names:
        model, truth = MODELS[name]()
        print(f"{name}: log p(y) = {truth:.4f} (reference)", flush=True)
        anchor = [pymc_smc(model, s) for s in range(seeds)]
        for sampler in samplers:
            runs = []
            for seed in range(seeds):
                t0 = time.perf_counter()
                try:
                    if sampler == "log_evidence":
                        res = pymc_cv.log_evidence(model, random_seed=seed, progressbar=False)
                    else:
                        res = pymc_cv.thermodynamic_integration(model, sampler=sampler, random_seed=seed,
                                                                progressbar=False)
                except Exception as exc:  # a failure is a result of the bench, reported in its row
                    print(f"  {sampler} seed {seed}: {type(exc).__name__}: {exc}", flush=True)
                    runs.append(None)
                    continue
                sec = time.perf_counter() - t0
                err = res.log_evidence - truth
                imp = getattr(res, "importance", None)
                used = imp is not None and imp.usable
                plain = getattr(res, "mc_log_evidence", np.nan) - truth
                runs.append((err, abs(err) / res.se, not res.reliable, plain, sec, used))
                print(f"  {sampler} seed {seed}: error {err:+.4f} se {res.se:.3g} flagged {not res.reliable} "
                      f"{res.estimator[:40]}, plain TI {plain:+.3f} {sec:.1f} s"
                      + ("" if imp is None else f" importance k-hat {imp.khat:.2f}" + (" used" if used else "")),
                      flush=True)
                for note in res.notes if not res.reliable else ():
                    print(f"    note: {note[:160]}", flush=True)
            ok = [r for r in runs if r is not None]
            arr = np.array(ok, dtype=float) if ok else np.empty((0, 6))
            good = (np.abs(arr[:, 0]) <= 0.05) & (arr[:, 1] <= 3) & (arr[:, 2] == 0) if ok else np.array([])
            smc_err = np.array([a[0] - truth for a in anchor])
            rows.append(
                f"| {name} | {sampler} | {len(runs) - len(ok)} | {np.median(np.abs(arr[:, 0])) if ok else np.nan:.3f} "
                f"| {np.max(arr[:, 1]) if ok else np.nan:.1f} | {int(np.sum(arr[:, 2])) if ok else 0} "
                f"| {int(np.sum((arr[:, 1] > 3) & (arr[:, 2] == 0))) if ok else 0} | {int(good.sum())}/{len(runs)} "
                f"| {int(np.sum(arr[:, 5])) if ok else 0} "
                f"| {np.median(np.abs(arr[:, 3])) if ok else np.nan:.3f} "
                f"| {np.median(arr[:, 4]) if ok else np.nan:.1f} "
                f"| {np.median(np.abs(smc_err)):.3f} | {np.median([a[1] for a in anchor]):.1f} "
                f"| {np.median(arr[:, 4]) / np.median([a[1] for a in anchor]) if ok else np.nan:.1f} |")
    print(f"\n{seeds} seeds per cell; errors in nats against quadrature (importance sampling for logistic)\n")
    print("| model | sampler | failed | median abs error | max abs error / se | flagged | > 3 se, not flagged "
          "| within 0.05 and 3 se, not flagged | importance sampling used | plain TI median abs error | median s "
          "| PyMC SMC median abs error | PyMC SMC s | s / PyMC SMC s |\n" + "|---" * 14 + "|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
