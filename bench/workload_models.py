"""The models people run, for bench/workloads.py: each builds a PyMC model and an exact reference.

References are made independently of pymc-cv:
- eight schools (non-centred) and the varying-intercept model are Gaussian given their scale
  parameters, so every posterior mean is a 1-d / 2-d quadrature over the scales of closed-form
  conditional means;
- GP regression (pm.gp.Marginal): 3-d quadrature over the log hyperparameters of the
  conditional predictive mean;
- logistic regression: self-normalised importance sampling with a multivariate-t proposal at
  the posterior mode (its own se is printed and is far below the MCMC error);
- stochastic volatility: a long NUTS run (no closed form), its se printed with it.
Each returns (model, integrands or None, reference: dict label -> :class:`Reference`): the posterior
mean, the reference's own se of it, the posterior sd (from the same quadrature or weights: conditional
variances plus the variance of the conditional means) and, where it is not exact, its se; and where the
reference determines them, the posterior quantiles (eight schools, the varying intercepts' Gaussian
coordinates: mixtures over the scale grid of their Gaussian conditionals; the logistic regression: the
weighted quantiles of the importance draws, with their se).
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import numpy as np
import pymc as pm
from scipy import linalg, optimize, special, stats


class Reference(NamedTuple):
    """One row's reference: mean, its se, sd, its se, and ``quantile(probs) -> (values, ses)`` or None."""

    mean: float
    se: float
    sd: float
    se_sd: float = 0.0
    quantile: Callable | None = None


def _logsumexp_weights(logw):
    w = np.exp(logw - logw.max())
    return w / w.sum()


def _gaussian_mixture_quantile(w, means, variances):
    """Quantiles of sum_i w_i N(means_i, variances_i), by root finding on the mixture's CDF (exact up to
    the quadrature that made the weights); components of negligible weight are dropped."""
    keep = w > 1e-14 * w.max()
    w, m, s = w[keep] / w[keep].sum(), means[keep], np.sqrt(variances[keep])
    lo, hi = float(np.min(m - 12 * s)), float(np.max(m + 12 * s))

    def quantile(probs):
        values = [optimize.brentq(lambda x: w @ special.ndtr((x - m) / s) - p, lo, hi, xtol=1e-12, rtol=1e-13)
                  for p in np.atleast_1d(probs)]
        return np.array(values), np.zeros(len(values))

    return quantile


def _weighted_quantile(values, w, importance=True):
    """Quantiles of the weighted points ``values`` (weights ``w`` summing to 1).  Importance draws
    (``importance``) get the se of self-normalised importance sampling: that of the CDF there,
    sqrt(sum w_i^2 (1{x_i <= q} - p)^2), over the density (from the quantiles 0.002 to either side);
    quadrature points get 0."""

    def at(order, cum, p):
        return float(np.interp(p, cum, values[order]))

    def quantile(probs):
        order = np.argsort(values)
        cum = np.cumsum(w[order]) - 0.5 * w[order]
        out, ses = [], []
        for p in np.atleast_1d(probs):
            q = at(order, cum, p)
            out.append(q)
            if not importance:
                ses.append(0.0)
                continue
            density = 0.004 / (at(order, cum, p + 0.002) - at(order, cum, p - 0.002))
            ses.append(np.sqrt(np.sum(w**2 * ((values <= q) - p) ** 2)) / density)
        return np.array(out), np.array(ses)

    return quantile


# -- eight schools ---------------------------------------------------------------------------
Y8 = np.array([28.0, 8.0, -3.0, 7.0, -1.0, 1.0, 18.0, 12.0])
S8 = np.array([15.0, 10.0, 16.0, 11.0, 9.0, 11.0, 10.0, 18.0])


def eight_schools():
    with pm.Model(coords={"school": range(8)}) as model:
        mu = pm.Normal("mu", 0.0, 5.0)
        tau = pm.HalfCauchy("tau", 5.0)
        eta = pm.Normal("eta", 0.0, 1.0, dims="school")
        theta = pm.Deterministic("theta", mu + tau * eta, dims="school")
        pm.Normal("y", theta, S8, observed=Y8)
    # given tau: (mu, theta) Gaussian; mu integrated gives y ~ N(0, diag(s^2 + tau^2) + 25 11')
    u = np.linspace(-12.0, 7.0, 6001)  # log tau
    tau_g = np.exp(u)
    logw, m_mu, m_th, v_mu, v_th, v_eta = [], [], [], [], [], []
    for t in tau_g:
        C = np.diag(S8**2 + t**2) + 25.0
        logw.append(stats.multivariate_normal(np.zeros(8), C).logpdf(Y8))
        # posterior of mu given tau: precision 1/25 + sum 1/(s^2+tau^2)
        v = S8**2 + t**2
        prec = 1 / 25.0 + np.sum(1 / v)
        mmu = np.sum(Y8 / v) / prec
        # theta_j | mu, tau, y: precision 1/tau^2 + 1/s^2; mean linear in mu, so E over mu is plug-in
        mth = (mmu / t**2 + Y8 / S8**2) / (1 / t**2 + 1 / S8**2)
        m_mu.append(mmu)
        m_th.append(mth)
        # variances given tau: theta_j = c_j mu + (noise of variance 1 / (1/tau^2 + 1/s^2)), eta = (theta - mu) / tau
        c = (1 / t**2) / (1 / t**2 + 1 / S8**2)
        noise = 1 / (1 / t**2 + 1 / S8**2)
        v_mu.append(1 / prec)
        v_th.append(c**2 / prec + noise)
        v_eta.append(((c - 1) ** 2 / prec + noise) / t**2)
    logw = np.array(logw) + stats.halfcauchy(scale=5).logpdf(tau_g) + u  # Jacobian of tau = e^u
    w = _logsumexp_weights(logw)
    m_mu, m_th, v_mu, v_th, v_eta = map(np.array, (m_mu, m_th, v_mu, v_th, v_eta))

    def moments(mean, var, quantile=None):
        m = float(w @ mean)
        return Reference(m, 0.0, float(np.sqrt(w @ (var + mean**2) - m**2)),
                         quantile=quantile or _gaussian_mixture_quantile(w, mean, var))

    # tau's quantiles from the 6,001-point grid on log tau (a step of 0.003 in log tau)
    ref = {"mu": moments(m_mu, v_mu), "tau": moments(tau_g, 0.0, _weighted_quantile(tau_g, w, importance=False))}
    for j in range(8):
        ref[f"theta[{j}]"] = moments(m_th[:, j], v_th[:, j])
        ref[f"eta[{j}]"] = moments((m_th[:, j] - m_mu) / tau_g, v_eta[:, j])
    return model, None, ref


# -- logistic regression ---------------------------------------------------------------------
def logistic_regression(seed=0, n=500, p=10):
    rng = np.random.default_rng(seed)
    Xd = rng.normal(size=(n, p))
    beta_true = rng.normal(0, 0.5, size=p)
    yb = rng.binomial(1, special.expit(0.3 + Xd @ beta_true))
    with pm.Model(coords={"pred": range(p)}) as model:
        a = pm.Normal("alpha", 0.0, 2.5)
        b = pm.Normal("beta", 0.0, 2.5, dims="pred")
        pm.Bernoulli("y", logit_p=a + pm.math.dot(Xd, b), observed=yb)
    D = np.column_stack([np.ones(n), Xd])

    def logpost(th):
        eta = D @ th
        return np.sum(yb * eta - np.logaddexp(0, eta)) - 0.5 * np.sum(th**2) / 2.5**2

    def grad(th):
        return D.T @ (yb - special.expit(D @ th)) - th / 2.5**2

    mode = optimize.minimize(lambda t: -logpost(t), np.zeros(p + 1), jac=lambda t: -grad(t), method="BFGS").x
    pr = special.expit(D @ mode)
    H = D.T @ (D * (pr * (1 - pr))[:, None]) + np.eye(p + 1) / 2.5**2
    prop = stats.multivariate_t(mode, np.linalg.inv(H), df=7, seed=rng)
    # 4 million proposals (IS ESS about 2.9 million), in chunks to bound memory: with 400,000 the
    # reference se was 0.28 of the 4 x 5,000-draw MCMC error, and the CV errors it measured were its own
    chunks = []
    for _ in range(20):
        x = prop.rvs(200_000)
        eta = x @ D.T
        lp = (eta * yb).sum(1) - np.logaddexp(0, eta).sum(1) - 0.5 * np.sum(x**2, 1) / 2.5**2
        chunks.append((x, lp - prop.logpdf(x)))
    draws = np.concatenate([c[0] for c in chunks])
    w = _logsumexp_weights(np.concatenate([c[1] for c in chunks]))
    ess = 1.0 / np.sum(w**2)
    ref = {}
    for j, lab in enumerate(["alpha"] + [f"beta[{i}]" for i in range(p)]):
        m = float(w @ draws[:, j])
        sq = (draws[:, j] - m) ** 2
        var = float(w @ sq)
        # the self-normalised IS se of the variance, through the delta method to the sd
        se_sd = float(np.sqrt(np.sum(w**2 * (sq - var) ** 2)) / (2 * np.sqrt(var)))
        ref[lab] = Reference(m, float(np.sqrt(var / ess)), float(np.sqrt(var)), se_sd,
                             _weighted_quantile(draws[:, j], w))
    return model, None, ref


# -- varying intercepts ----------------------------------------------------------------------
def varying_intercepts(seed=0, groups=85, n=900):
    rng = np.random.default_rng(seed)
    g = np.concatenate([np.arange(groups), rng.integers(0, groups, n - groups)])
    x = rng.normal(size=n)
    a_true = 1.0 + 0.7 * rng.normal(size=groups)
    y = a_true[g] - 0.6 * x + 0.8 * rng.normal(size=n)
    with pm.Model(coords={"group": range(groups)}) as model:
        mu_a = pm.Normal("mu_a", 0.0, 5.0)
        sigma_a = pm.HalfNormal("sigma_a", 2.0)
        z = pm.Normal("a_offset", 0.0, 1.0, dims="group")
        a = pm.Deterministic("a", mu_a + sigma_a * z, dims="group")
        beta = pm.Normal("beta", 0.0, 5.0)
        sigma_y = pm.HalfNormal("sigma_y", 2.0)
        pm.Normal("y", a[g] + beta * x, sigma_y, observed=y)
    # given (sigma_a, sigma_y) the model is linear-Gaussian in (mu_a, beta, a): 2-d quadrature
    Z = np.zeros((n, groups))
    Z[np.arange(n), g] = 1.0
    D = np.column_stack([np.ones(n), x])  # fixed effects mu_a, beta; a = mu_a + u, u ~ N(0, sa^2)
    F = np.column_stack([D, Z])  # y = F (mu_a, beta, u) + e
    FtF, Fty, yty = F.T @ F, F.T @ y, y @ y
    la = np.linspace(np.log(0.3), np.log(1.5), 121)
    ly = np.linspace(np.log(0.65), np.log(0.95), 121)
    logw, cond, cond_var = [], [], []
    for sa in np.exp(la):
        for sy in np.exp(ly):
            prior_prec = np.concatenate([[1 / 25.0, 1 / 25.0], np.full(groups, 1 / sa**2)])
            Lam = FtF / sy**2 + np.diag(prior_prec)
            c = linalg.cho_factor(Lam)
            m = linalg.cho_solve(c, Fty / sy**2)
            logdet = 2 * np.sum(np.log(np.diag(c[0])))
            ll = (-0.5 * n * np.log(2 * np.pi * sy**2) - 0.5 * yty / sy**2 + 0.5 * m @ Lam @ m
                  - 0.5 * logdet + 0.5 * np.sum(np.log(prior_prec)))
            lp = ll + stats.halfnorm(scale=2).logpdf(sa) + stats.halfnorm(scale=2).logpdf(sy) + np.log(sa * sy)
            logw.append(lp)
            cond.append(np.concatenate([[m[0], m[1]], m[0] + m[2:], m[2:] / sa, [sa, sy]]))
            # variances given the scales: of mu_a, beta, a_j = mu_a + u_j, and u_j / sigma_a
            cov = linalg.cho_solve(c, np.eye(len(m)))
            d = np.diag(cov)
            v_a = d[0] + d[2:] + 2 * cov[0, 2:]
            cond_var.append(np.concatenate([d[:2], v_a, d[2:] / sa**2, [0.0, 0.0]]))
    w = _logsumexp_weights(np.array(logw))
    cond, cond_var = np.array(cond), np.array(cond_var)
    mean = w @ cond
    sd = np.sqrt(w @ (cond_var + cond**2) - mean**2)
    ref = {"mu_a": 0, "beta": 1, "sigma_a": len(mean) - 2, "sigma_y": len(mean) - 1}
    for j in range(groups):
        ref[f"a[{j}]"] = 2 + j
        ref[f"a_offset[{j}]"] = 2 + groups + j
    # the scales are grid points (121 a side: too coarse for their quantiles); the rest are Gaussian given them
    return model, None, {k: Reference(float(mean[i]), 0.0, float(sd[i]),
                                      quantile=None if k.startswith("sigma") else
                                      _gaussian_mixture_quantile(w, cond[:, i], cond_var[:, i]))
                         for k, i in ref.items()}


# -- GP regression ---------------------------------------------------------------------------
def gp_regression(seed=0, n=50, n_new=20, width=10.0, points=61):
    rng = np.random.default_rng(seed)
    X = np.sort(rng.uniform(0, 10, n))
    y = np.sin(X) + 0.3 * np.cos(2.3 * X) + 0.3 * rng.normal(size=n)
    Xnew = np.linspace(-0.5, 10.5, n_new)
    with pm.Model() as model:
        ls = pm.Gamma("ls", 2.0, 1.0)
        eta = pm.HalfNormal("eta", 2.0)
        sigma = pm.HalfNormal("sigma", 1.0)
        gp = pm.gp.Marginal(cov_func=eta**2 * pm.gp.cov.ExpQuad(1, ls=ls))
        gp.marginal_likelihood("y", X=X[:, None], y=y, sigma=sigma)

    def cond_mean(ls, eta, sigma):
        """Predictive mean at Xnew given hyperparameters; arrays of any batch shape."""
        shape = np.shape(ls)
        ls, eta, sigma = (np.ravel(a)[:, None, None] for a in (ls, eta, sigma))
        K = eta**2 * np.exp(-0.5 * (X[None, :, None] - X[None, None, :]) ** 2 / ls**2)
        K = K + (sigma**2) * np.eye(n)[None]
        Ks = eta**2 * np.exp(-0.5 * (Xnew[None, :, None] - X[None, None, :]) ** 2 / ls**2)
        alpha = np.linalg.solve(K, np.broadcast_to(y, (K.shape[0], n))[..., None])[..., 0]
        return np.einsum("bmn,bn->bm", Ks, alpha).reshape(shape + (n_new,)), K

    def predictive(post):
        return cond_mean(np.asarray(post["ls"]), np.asarray(post["eta"]), np.asarray(post["sigma"]))[0]

    # quadrature over (log ls, log eta, log sigma) on a box found from the log posterior's mode
    def logpost(u):
        ls, eta, sg = np.exp(u)
        K = eta**2 * np.exp(-0.5 * (X[:, None] - X[None, :]) ** 2 / ls**2) + sg**2 * np.eye(n)
        ll = stats.multivariate_normal(np.zeros(n), K, allow_singular=True).logpdf(y)
        return (ll + stats.gamma(2, scale=1).logpdf(ls) + stats.halfnorm(scale=2).logpdf(eta)
                + stats.halfnorm(scale=1).logpdf(sg) + u.sum())

    opt = optimize.minimize(lambda u: -logpost(u), np.log([1.0, 1.0, 0.3]), method="Nelder-Mead")
    h = 1e-3
    Hd = np.array([(logpost(opt.x + h * e) - 2 * logpost(opt.x) + logpost(opt.x - h * e)) / h**2
                   for e in np.eye(3)])
    sd = 1 / np.sqrt(-Hd)
    grids = [np.linspace(m - width * s, m + width * s, points) for m, s in zip(opt.x, sd)]
    U = np.stack(np.meshgrid(*grids, indexing="ij"), -1).reshape(-1, 3)
    logw, means = np.empty(len(U)), np.empty((len(U), n_new))
    for a in range(0, len(U), 2000):
        ls, eta, sg = np.exp(U[a : a + 2000]).T
        mu, K = cond_mean(ls, eta, sg)
        L = np.linalg.cholesky(K)
        v = np.linalg.solve(L, np.broadcast_to(y, (K.shape[0], n))[..., None])[..., 0]
        ll = -0.5 * np.sum(v**2, 1) - np.sum(np.log(np.diagonal(L, axis1=1, axis2=2)), 1) - 0.5 * n * np.log(2 * np.pi)
        logw[a : a + 2000] = (ll + stats.gamma(2, scale=1).logpdf(ls) + stats.halfnorm(scale=2).logpdf(eta)
                              + stats.halfnorm(scale=1).logpdf(sg) + U[a : a + 2000].sum(1))
        means[a : a + 2000] = mu
    w = _logsumexp_weights(logw)

    def moments(x):
        m = float(w @ x)
        return Reference(m, 0.0, float(np.sqrt(max(w @ x**2 - m**2, 0.0))))

    ref = {name: moments(np.exp(U[:, i])) for i, name in enumerate(["ls", "eta", "sigma"])}
    ref.update({f"pred[{j}]": moments(means[:, j]) for j in range(n_new)})
    return model, {"pred": predictive}, ref


# -- stochastic volatility -------------------------------------------------------------------
def stochastic_volatility(seed=0, T=300):
    rng = np.random.default_rng(seed)
    h = np.zeros(T)
    for t in range(1, T):
        h[t] = 0.95 * h[t - 1] + 0.25 * rng.normal()
    r = np.exp(h / 2 - 4) * rng.normal(size=T)
    with pm.Model(coords={"time": range(T)}) as model:
        sigma = pm.Exponential("sigma", 10.0)
        nu = pm.Gamma("nu", 2.0, 0.1)
        s = pm.GaussianRandomWalk("s", sigma=sigma, init_dist=pm.Normal.dist(-8, 2), dims="time")
        pm.StudentT("r", nu=nu, lam=np.exp(-2 * s), observed=r)
    return model, None, None  # reference: a long run, made by the bench (no closed form)
