"""Conjugate PyMC models with closed-form posterior means (shared by the PyMC tests)."""

import numpy as np
import pymc as pm


def normal_normal():
    y = np.array([1.2, 0.4, 2.1, 1.7, 0.9])
    with pm.Model() as model:
        mu = pm.Normal("mu", 0.0, 2.0)
        pm.Normal("y", mu, 1.0, observed=y)
    prec = 1 / 4 + y.size
    return model, {"mu": np.array([y.sum() / prec])}


def gamma_poisson():
    y = np.array([3, 5, 2, 4, 6, 1])
    a, b = 2.0, 1.0
    with pm.Model() as model:
        lam = pm.Gamma("lam", a, b)
        pm.Poisson("y", lam, observed=y)
    return model, {"lam": np.array([(a + y.sum()) / (b + y.size)])}


def beta_binomial():
    n, k, a, b = 20, 7, 2.0, 3.0
    with pm.Model() as model:
        p = pm.Beta("p", a, b)
        pm.Binomial("y", n=n, p=p, observed=k)
    return model, {"p": np.array([(a + k) / (a + b + n)])}


def dirichlet_multinomial():
    counts = np.array([5, 2, 9])
    alpha = np.array([1.0, 2.0, 1.5])
    with pm.Model() as model:
        p = pm.Dirichlet("p", a=alpha)
        pm.Multinomial("y", n=counts.sum(), p=p, observed=counts)
    post = alpha + counts
    return model, {"p": post / post.sum()}


MODELS = {
    "normal_normal": normal_normal,
    "gamma_poisson": gamma_poisson,
    "beta_binomial": beta_binomial,
    "dirichlet_multinomial": dirichlet_multinomial,
}


def sample(model, seed, draws=300):
    return pm.sample(draws=draws, tune=300, chains=2, model=model, random_seed=seed, progressbar=False,
                     compute_convergence_checks=False)
