"""Exact references for the posteriordb posteriors that are Gaussian linear regressions.

Ten posteriors of the set are y ~ N(X beta, sigma) with a flat or Gaussian prior on beta and a
prior on sigma alone.  Given sigma, beta is Gaussian in closed form, and so is the marginal
likelihood of sigma; what remains is a one-dimensional integral over log sigma, done on a grid of
4,001 points spanning +-14 posterior sd (trapezoid rule: spectrally accurate for a smooth peaked
integrand; the end weights are checked to be negligible).  diamonds has a Student-t prior on the
intercept of centred predictors, which decouples from the slopes given sigma: a Gauss-Hermite
rule over the intercept inside the grid over sigma.  arK is an autoregression: given the first K
observations, it is the regression of y[t] on (1, y[t-1], ..., y[t-K]).  The mcse of these references is 0 (their
error is round-off, ~1e-12 of the posterior sd).  The 3% and 97% quantiles come from the same
quadratures: each row's CDF is a mixture over the grid of its CDF given sigma (Gaussian for the
regression coefficients; for diamonds' intercept, whose prior is not Gaussian, a trapezoid rule
on 1,801 points given sigma), inverted by Brent's method; sigma's own CDF is the grid's, linear
between nodes (an error of O(step^2), step = 0.007 posterior sd of log sigma).

Usage: python bench/posteriordb_exact.py [PDB] [NAME ...]      (writes bench/data/posteriordb/NAME.json)
"""

from __future__ import annotations

import datetime
import json
import os
import sys

import numpy as np
import posteriordb_set as pset
from scipy import optimize, special, stats

OUT = os.path.join(os.path.dirname(__file__), "data", "posteriordb")
GRID = 4001
WIDTH = 14.0
PROBS = (0.03, 0.97)


def _log_half(dist, sigma):
    return dist.logpdf(sigma)  # the half-distributions' normalisation is a constant


def _sigma_grid(y, X):
    n, k = X.shape
    beta, *_ = np.linalg.lstsq(X, y, rcond=None)
    s0 = np.sqrt(np.sum((y - X @ beta) ** 2) / (n - k))
    return np.exp(np.log(s0) + np.linspace(-1.0, 1.0, GRID) * WIDTH / np.sqrt(2.0 * (n - k)))


def _weights(logpost):
    w = np.exp(logpost - logpost.max())
    if max(w[0], w[-1]) > 1e-14:
        raise RuntimeError("the grid over sigma does not cover the posterior; widen WIDTH")
    return w / w.sum()


def _invert(cdf, mean, sd):
    """The ``PROBS`` quantiles of a row with CDF ``cdf`` (vectorised only over nothing), mean and sd."""
    lo, hi = mean - 12 * sd, mean + 12 * sd
    return [optimize.brentq(lambda x: cdf(x) - p, lo, hi, xtol=1e-12 * sd, rtol=1e-14) for p in PROBS]


def _gaussian_mixture_quantiles(w, means, sds):
    """Quantiles of the mixture sum_i w_i N(means_i, sds_i^2)."""
    mean = w @ means
    sd = np.sqrt(w @ (sds**2 + (means - mean) ** 2))
    return _invert(lambda x: w @ special.ndtr((x - means) / sds), mean, sd)


def _grid_quantiles(w, sig):
    """Quantiles of sigma from its grid (uniform in log sigma): the CDF at node i is the weight below it
    plus half its own (the midpoint rule), linear in log sigma between nodes."""
    cdf = np.cumsum(w) - w / 2
    return [float(np.exp(np.interp(p, cdf, np.log(sig)))) for p in PROBS]


def gaussian_linear(y, X, sigma_logprior, prior_mean=None, prior_sd=None):
    """Posterior means, sds and ``PROBS`` quantiles of (beta..., sigma) of y ~ N(X beta, sigma), beta flat
    or N(prior_mean, prior_sd^2) elementwise, sigma with log prior density ``sigma_logprior``."""
    n, k = X.shape
    XtX, Xty, yty = X.T @ X, X.T @ y, y @ y
    sig = _sigma_grid(y, X)
    means, covs, logml = np.empty((GRID, k)), np.empty((GRID, k, k)), np.empty(GRID)
    for i, s in enumerate(sig):
        if prior_sd is None:
            prec = XtX / s**2
            b = Xty / s**2
            const = 0.0
        else:
            prec = XtX / s**2 + np.diag(1.0 / prior_sd**2)
            b = Xty / s**2 + prior_mean / prior_sd**2
            const = np.sum(prior_mean**2 / prior_sd**2)
        chol = np.linalg.cholesky(prec)
        m = np.linalg.solve(prec, b)
        means[i] = m
        covs[i] = np.linalg.inv(prec)
        # log N(y | X beta, s^2) integrated over beta (the flat prior's integral as its limit)
        logml[i] = -n * np.log(s) - 0.5 * (yty / s**2 + const - m @ b) - np.sum(np.log(np.diag(chol)))
    w = _weights(logml + sigma_logprior(sig) + np.log(sig))  # + log sigma: the grid is over log sigma
    e_beta = w @ means
    var_beta = np.einsum("i,ijj->j", w, covs) + w @ (means - e_beta) ** 2
    e_sigma = w @ sig
    sds = np.sqrt(np.einsum("ijj->ij", covs))
    quantiles = [_gaussian_mixture_quantiles(w, means[:, j], sds[:, j]) for j in range(k)]
    quantiles.append(_grid_quantiles(w, sig))
    return np.r_[e_beta, e_sigma], np.sqrt(np.r_[var_beta, w @ (sig - e_sigma) ** 2]), quantiles


def diamonds(data):
    """{row: (mean, sd, quantiles)} of b (centred slopes, N(0, 1)), Intercept (t3(8, 10)), sigma
    (half-t3(0, 10)) and b_Intercept."""
    Y, X = np.asarray(data["Y"], float), np.asarray(data["X"], float)[:, 1:]
    means_x = X.mean(axis=0)
    Xc = X - means_x
    n, k = Xc.shape
    ybar = Y.mean()
    yc = Y - ybar
    XtX, Xty, yty = Xc.T @ Xc, Xc.T @ yc, yc @ yc
    sig = _sigma_grid(yc, Xc)
    nodes, hw = special.roots_hermitenorm(80)  # E over N(0, 1) with weights hw / sqrt(2 pi)
    hw = hw / np.sqrt(2 * np.pi)
    prior_a = stats.t(3, loc=8, scale=10)
    mb, logml, ea, va = np.empty((GRID, k)), np.empty(GRID), np.empty(GRID), np.empty(GRID)
    Vb = np.empty((GRID, k, k))  # the slopes' whole covariance given sigma: b_Intercept needs it
    for i, s in enumerate(sig):
        prec = XtX / s**2 + np.eye(k)
        b = Xty / s**2
        chol = np.linalg.cholesky(prec)
        m = np.linalg.solve(prec, b)
        mb[i], Vb[i] = m, np.linalg.inv(prec)
        # intercept: sum (y - a - Xc b)^2 = sum (yc - Xc b)^2 + n (ybar - a)^2, so given sigma it is
        # t3(8, 10) times N(ybar, s^2 / n): integrate by Gauss-Hermite around ybar
        a = ybar + nodes * s / np.sqrt(n)
        pa = prior_a.pdf(a)
        z = hw @ pa
        ea[i] = (hw * pa) @ a / z
        va[i] = (hw * pa) @ (a - ea[i]) ** 2 / z
        logml[i] = (-n * np.log(s) - 0.5 * (yty / s**2 - m @ b) - np.sum(np.log(np.diag(chol)))
                    + np.log(z) + np.log(s / np.sqrt(n)))
    sigma_prior = stats.t(3, loc=0, scale=10)
    w = _weights(logml + sigma_prior.logpdf(sig) + np.log(sig))
    e_b, e_a, e_s = w @ mb, w @ ea, w @ sig
    vb = np.einsum("ijj->ij", Vb)
    sd_b = np.sqrt(w @ vb + w @ (mb - e_b) ** 2)
    sd_a = np.sqrt(w @ va + w @ (ea - e_a) ** 2)
    sd_s = np.sqrt(w @ (sig - e_s) ** 2)
    # b_Intercept = Intercept - means_x . b; a and b are independent given sigma, so they covary
    # only through sigma
    cov_b = np.einsum("i,ijk->jk", w, Vb) + np.einsum("i,ij,ik->jk", w, mb - e_b, mb - e_b)
    cov_ab = w @ ((ea - e_a)[:, None] * (mb - e_b))
    var_bi = sd_a**2 + means_x @ cov_b @ means_x - 2 * means_x @ cov_ab
    quantiles = {f"b[{j}]": _gaussian_mixture_quantiles(w, mb[:, j], np.sqrt(vb[:, j])) for j in range(k)}
    quantiles["sigma"] = _grid_quantiles(w, sig)
    # the intercept given sigma on a grid of u = (a - ybar) sqrt(n) / s, its density phi(u) t3(a), and its
    # CDF by the trapezoid rule, linear between nodes
    u = np.linspace(-9.0, 9.0, 1801)
    du = u[1] - u[0]
    scale = sig / np.sqrt(n)
    a_grid = ybar + u[None, :] * scale[:, None]
    dens = stats.norm.pdf(u)[None, :] * prior_a.pdf(a_grid)
    cum = np.concatenate([np.zeros((GRID, 1)), np.cumsum((dens[:, 1:] + dens[:, :-1]) / 2, axis=1)], axis=1)
    cum /= cum[:, -1:]
    tw = dens.copy()
    tw[:, [0, -1]] /= 2
    tw /= tw.sum(axis=1, keepdims=True)

    def intercept_cdf(x):
        pos = np.clip((x - ybar) / scale - u[0], 0.0, u[-1] - u[0]) / du
        j = np.minimum(pos.astype(int), u.size - 2)
        rows_ = np.arange(GRID)
        frac = pos - j
        return w @ (cum[rows_, j] * (1 - frac) + cum[rows_, j + 1] * frac)

    # b_Intercept = a - means_x . b: given sigma and a, Gaussian in b
    lin_mean = mb @ means_x
    lin_sd = np.sqrt(np.einsum("j,ijk,k->i", means_x, Vb, means_x))

    def b_intercept_cdf(x):
        z = (x - a_grid + lin_mean[:, None]) / lin_sd[:, None]
        return w @ np.sum(tw * special.ndtr(z), axis=1)

    quantiles["Intercept"] = _invert(intercept_cdf, e_a, sd_a)
    quantiles["b_Intercept"] = _invert(b_intercept_cdf, e_a - means_x @ e_b, float(np.sqrt(var_bi)))
    rows = {f"b[{j}]": (e_b[j], sd_b[j]) for j in range(k)}
    rows.update({"Intercept": (e_a, sd_a), "sigma": (e_s, sd_s),
                 "b_Intercept": (e_a - means_x @ e_b, float(np.sqrt(var_bi)))})
    return {lab: (m, s, quantiles[lab]) for lab, (m, s) in rows.items()}


def _col(data, name):
    return np.asarray(data[name], dtype=float)


def _autoregression(d):
    y, K = _col(d, "y"), int(d["K"])
    T = len(y)
    lags = [y[K - k:T - k] for k in range(1, K + 1)]
    return y[K:], np.column_stack([np.ones(T - K)] + lags)


def _regressions():
    half_cauchy = stats.cauchy(0, 2.5)
    flat = lambda s: np.zeros_like(s)  # noqa: E731
    ones = lambda d: np.ones(d["N"])  # noqa: E731
    return {
        "arK-arK": (_autoregression, half_cauchy.logpdf, lambda d, k: (np.zeros(k), np.full(k, 10.0)),
                    lambda k: ["alpha"] + [f"beta[{j}]" for j in range(k - 1)]),
        "kidiq-kidscore_momiq": (lambda d: (_col(d, "kid_score"), np.column_stack([ones(d), _col(d, "mom_iq")])),
                                 half_cauchy.logpdf, None, "beta"),
        "kidiq-kidscore_interaction": (
            lambda d: (_col(d, "kid_score"), np.column_stack([ones(d), _col(d, "mom_hs"), _col(d, "mom_iq"),
                                                              _col(d, "mom_hs") * _col(d, "mom_iq")])),
            half_cauchy.logpdf, None, "beta"),
        "earnings-earn_height": (lambda d: (_col(d, "earn"), np.column_stack([ones(d), _col(d, "height")])),
                                 flat, None, "beta"),
        "earnings-logearn_interaction": (
            lambda d: (np.log(_col(d, "earn")), np.column_stack([ones(d), _col(d, "height"), _col(d, "male"),
                                                                 _col(d, "height") * _col(d, "male")])),
            flat, None, "beta"),
        "mesquite-logmesquite": (
            lambda d: (np.log(_col(d, "weight")),
                       np.column_stack([ones(d)] + [np.log(_col(d, c)) for c in
                                                    ("diam1", "diam2", "canopy_height", "total_height", "density")]
                                       + [_col(d, "group")])),
            flat, None, "beta"),
        "nes2000-nes": (
            lambda d: (_col(d, "partyid7"),
                       np.column_stack([ones(d), _col(d, "real_ideo"), _col(d, "race_adj")]
                                       + [(np.asarray(d["age_discrete"]) == a).astype(float) for a in (2, 3, 4)]
                                       + [_col(d, "educ1"), _col(d, "gender"), _col(d, "income")])),
            flat, None, "beta"),
        "sblrc-blr": (lambda d: (_col(d, "y"), np.asarray(d["X"], dtype=float)), stats.norm(0, 10).logpdf,
                      lambda d, k: (np.zeros(k), np.full(k, 10.0)), "beta"),
        "kilpisjarvi_mod-kilpisjarvi": (
            lambda d: (_col(d, "y"), np.column_stack([ones(d), _col(d, "x")])), flat,
            lambda d, k: (np.array([d["pmualpha"], d["pmubeta"]]), np.array([d["psalpha"], d["psbeta"]])),
            ("alpha", "beta")),
    }


EXACT = [*_regressions(), "diamonds-diamonds"]


def exact_rows(name, data):
    """{row label: (mean, sd, ``PROBS`` quantiles)} of the posterior ``name``."""
    if name == "diamonds-diamonds":
        return diamonds(data)
    design, sigma_logprior, prior, labels = _regressions()[name]
    y, X = design(data)
    k = X.shape[1]
    prior_mean, prior_sd = prior(data, k) if prior is not None else (None, None)
    mean, sd, quantiles = gaussian_linear(y, X, sigma_logprior, prior_mean, prior_sd)
    if isinstance(labels, str):
        names = [f"{labels}[{j}]" for j in range(k)]
    else:
        names = labels(k) if callable(labels) else list(labels)
    return {lab: (m, s, q) for lab, m, s, q in zip(names + ["sigma"], mean, sd, quantiles)}


def make(pdb, name):
    p = pset.load(pdb, name)
    rows = {lab: {"mean": float(m), "mcse": 0.0, "sd": float(s), **pset.quantile_entry(PROBS, q, [0.0] * len(q))}
            for lab, (m, s, q) in exact_rows(name, p.data).items()}
    check = pset.posteriordb_check(rows, p.reference_draws)
    how = {"method": "exact: closed form given sigma, quadrature over log sigma"
                     + (" and Gauss-Hermite over the intercept" if name == "diamonds-diamonds" else ""),
           "grid": GRID, "date": datetime.date.today().isoformat()}
    return {"name": name, "how": how, "rows": rows, "posteriordb_check": check}


def main():
    args = sys.argv[1:]
    pdb = args.pop(0) if args and os.path.isdir(args[0]) else pset.DEFAULT_PDB
    names = args or EXACT
    os.makedirs(OUT, exist_ok=True)
    print("| posterior | rows | rows in posteriordb | max abs z | abs z <= 2 |\n|---|---|---|---|---|")
    for name in names:
        ref = make(pdb, name)
        with open(os.path.join(OUT, f"{name}.json"), "w") as fh:
            json.dump(ref, fh, indent=1)
        z = np.array([abs(c["z"]) for c in ref["posteriordb_check"].values()])
        print(f"| {name} | {len(ref['rows'])} | {z.size} | {z.max(initial=0):.2f} | {np.mean(z <= 2):.0%} |", flush=True)


if __name__ == "__main__":
    main()
