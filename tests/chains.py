"""Autocorrelated draws for tests of the MCMC paths."""

import numpy as np


def ar1_chain(rng, n, rho):
    """One AR(1) chain of n draws with lag-one correlation rho and a N(0, 1) marginal."""
    z = np.empty(n)
    z[0] = rng.normal()
    for t in range(1, n):
        z[t] = rho * z[t - 1] + np.sqrt(1 - rho**2) * rng.normal()
    return z
