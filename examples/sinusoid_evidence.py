"""A model whose power posteriors have many modes: the frequency of a sinusoid observed in noise.

y_i = sin(w s_i) + e_i at 25 times s in [0, 10], e_i ~ N(0, 0.5^2), w ~ Uniform(0, 10), simulated at
w = 3.  The likelihood has a sharp peak at the true frequency and many local ones, so at intermediate
temperatures several modes share the mass.  The parameter is one-dimensional: the exact log evidence
comes from quadrature on a fine grid.  Used by ``examples/notebooks/multimodal_evidence.ipynb``,
``bench/population_ti.py`` and the population tests.

Usage: python examples/sinusoid_evidence.py   (TI with NUTS per rung and with population MCMC; SIN_DRAWS=1500
       draws and SIN_TUNE=300 tuning steps per rung)
Small settings (for CI):  SIN_DRAWS=200 SIN_TUNE=100 python examples/sinusoid_evidence.py
"""

from __future__ import annotations

import os
import sys

import numpy as np
import pymc as pm
from scipy import stats

S = np.linspace(0, 10, 25)
NOISE = 0.5
GRID = np.linspace(0, 10, 200_001)


def simulate(seed=0):
    return np.sin(3.0 * S) + np.random.default_rng(seed).normal(0, NOISE, S.size)


def grid_loglik(y):
    """log p(y | w) on ``GRID``."""
    return stats.norm.logpdf(y[None, :], np.sin(GRID[:, None] * S[None, :]), NOISE).sum(axis=1)


def frequency_model(y):
    """The PyMC model and its exact log evidence."""
    with pm.Model() as model:
        w = pm.Uniform("w", 0, 10)
        pm.Normal("y", pm.math.sin(w * S), NOISE, observed=y)
    ll = grid_loglik(y)
    return model, ll.max() + np.log(np.trapezoid(np.exp(ll - ll.max()), GRID) / 10)


def main():
    import pymc_cv

    draws, tune = int(os.environ.get("SIN_DRAWS", 1500)), int(os.environ.get("SIN_TUNE", 300))
    model, exact = frequency_model(simulate(0))
    print(f"exact log p(y) = {exact:.4f}")
    for sampler in ("nuts", "population"):
        res = pymc_cv.thermodynamic_integration(model, 16, draws=draws, tune=tune, method="mc", sampler=sampler,
                                                random_seed=1, progressbar=sys.stdout.isatty())
        print(f"{sampler:>10}: {res.log_evidence:.3f} +- {res.se:.3f} (error {res.log_evidence - exact:+.3f}), "
              f"reliable = {res.reliable}")


if __name__ == "__main__":
    main()
