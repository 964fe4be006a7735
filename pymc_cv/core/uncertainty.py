"""How the reported standard error of a kernel CV is formed, and when it is flagged.

Measured on 200 replications (d = 2, n = 100, bounded smooth integrand): the
sample se of held-out residuals covered the truth only 74% of the time at
nominal 95% (its residuals are tiny near the draws and large in the tails),
while the GP-model se of the GLS intercept, s2 (P' C^-1 P)^-1 with the
amplitude profiled by REML, covered 100% with an rms se 1.6x the rms error.
So kernel CVs report the model se; for MCMC draws, which the GP model does
not know are autocorrelated, the larger of it and the held-out se (with
ArviZ's ESS of the residuals).

The model se fails when the integrand grows faster than the kernel can
follow (exp(x/2) under a Gaussian: 26% coverage).  Held-out residuals
standardised by their GP predictive sd then have heavy tails: Pareto
k-hat of z^2 above 0.7 flagged 93% of those replications and 8% of the
bounded ones.  Where that happens the result says the se is unreliable.
"""

from __future__ import annotations

import numpy as np

from .standard_errors import KHAT_THRESHOLD, tail_khat

__all__ = ["combine_se", "reliability", "roundoff_floor"]


def roundoff_floor(values):
    """The smallest honest se for a mean of these values: floating-point summation round-off,
    eps * sqrt(n) * (|mean| + sd).  An exact CV (ZV-2 on a quadratic) otherwise reports an se far
    below the 1-ulp error it actually has."""
    v = np.asarray(values, dtype=float)
    return float(np.finfo(float).eps * np.sqrt(v.size) * (abs(v.mean()) + v.std()))


def combine_se(se_model, se_heldout, chain):
    if not np.isfinite(se_model):
        return se_heldout
    if chain is None:
        return se_model
    return max(se_model, se_heldout)


def reliability(standardized_resid):
    """(reliable, khat): k-hat of squared standardised held-out residuals against 0.7.

    Residuals at round-off level (an exact CV) are reliable by definition.
    """
    z = np.asarray(standardized_resid, dtype=float)
    if z.size < 20 or not np.any(np.abs(z) > 1e-12 * max(1.0, np.max(np.abs(z)))):
        return True, np.nan
    khat = tail_khat(z)
    return not (np.isfinite(khat) and khat > KHAT_THRESHOLD), khat
