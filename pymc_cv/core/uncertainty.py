"""How the reported standard error of a CV is formed, and when it is flagged.

Measured on 200 replications (d = 2, n = 100, bounded smooth integrand): the sample se of
held-out residuals covered the truth only 74% of the time at nominal 95% (its residuals are
tiny near the draws and large in the tails), while the GP-model se of the GLS intercept,
s2 (P' C^-1 P)^-1 with the amplitude profiled by REML, covered 100% with an rms se 1.6x the
rms error.  So kernel CVs report the model se; for MCMC draws, which the GP model does not know
are autocorrelated, the larger of it and the held-out se (with ArviZ's ESS of the residuals).

The model se fails when the integrand grows faster than the kernel can follow (exp(x/2) under a
Gaussian: 26% coverage): the fit is biased by the tails its draws do not reach.  ``finalize``
adds the jackknife estimate of that bias, from fits without a quarter of the draws
(``heldout.jackknife_bias``): 67% -> 97% on exp(x0 / 2) (d = 2, n = 200).

Heavy-tailed held-out residuals (Pareto k-hat of their squares > 0.7) used to flag a result.
They are the rule for fits that nearly interpolate the draws, whose se (with the jackknife
bias) covers: the flag marked most such fits unreliable in 51 of 144 cells of
``bench/se_coverage.py`` that covered 90-100%.  k-hat is still reported (``CVResult.khat``).
What does defeat the se is a target with heavy tails: kernel and polynomial CVs extrapolate into
tails the draws rarely reach and the bias decays slowly (Student-t with 3 degrees of freedom: x^2
covered 7-10%, atan(x)^2 50-70%).  :func:`heavy_tail_note` looks at the draws themselves and
flags every CV estimate when their tails are heavy.  Measured (``bench/se_tails.py``, 100 runs
each): Gaussian draws are flagged in 26% / 16% / 10% of runs at n = 50 (d = 1 / 5 / 20), 0-5% from
n = 200; t3 draws in 70-92% with d = 1 (37-85% at d = 5, 18-79% at d = 20), t5 in 49-62% with d = 1.
"""

from __future__ import annotations

import numpy as np

from .standard_errors import tail_khat

__all__ = ["combine_se", "heavy_tail_note", "moment_tail_notes", "residual_khat", "roundoff_floor", "TAIL_THRESHOLD"]

# Pareto k-hat of the draws' squared standardised distance from their mean above which the
# target counts as heavy-tailed (t_nu has 2 / nu: t3 0.67, t5 0.4; a Gaussian 0)
TAIL_THRESHOLD = 0.4


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


def residual_khat(standardized_resid):
    """Pareto k-hat of the squared standardised held-out residuals (a diagnostic, reported as
    ``CVResult.khat``); NaN for residuals at round-off level (an exact CV) or too few draws."""
    z = np.asarray(standardized_resid, dtype=float)
    if z.size < 20 or not np.any(np.abs(z) > 1e-12 * max(1.0, np.max(np.abs(z)))):
        return np.nan
    return tail_khat(z)


def heavy_tail_note(samples):
    """A note when the draws (n, d) look heavy-tailed, else None: Pareto k-hat of the upper tail of
    their squared standardised distance from the mean above ``TAIL_THRESHOLD``, over the distinct
    draws.  Nothing is concluded below 25 draws."""
    X = np.unique(np.asarray(samples, dtype=float), axis=0)  # repeats (rejections) would fake a tail
    sd = X.std(axis=0)
    z = (X - X.mean(axis=0)) / np.where(sd > 0, sd, 1.0)
    r2 = np.sum(z**2, axis=1)
    khat = tail_khat(np.sqrt(r2 - r2.min()))  # tail_khat fits the tail of the square of its input
    if not (np.isfinite(khat) and khat > TAIL_THRESHOLD):
        return None
    return (f"the draws have heavy tails (Pareto k-hat {khat:.2f} > {TAIL_THRESHOLD} for their squared distance "
            "from the mean): control variates extrapolate into tails the draws rarely reach, and their se can be "
            "far too small there (Student-t3 draws: x^2 covered 7-10%); every CV estimate is marked unreliable.")


# a row's own values: the Pareto k-hat of (f - mean)^2 is 2 / nu for a Student-t_nu f, and the estimator of
# E[f] has a finite variance only below k = 1 (nu > 2), that of the sd (through E[(f - c)^2]) only below
# k = 0.5 (nu > 4, a finite fourth moment).  The estimate is rough: over 100 sets of 4,000 independent
# draws it reached 0.5 for 4% of exponential, 5% of lognormal(0, 0.5) and 19% of t5 sets, and on nutpie's
# draws of a GP regression's skewed hyperparameters in 2 of 2 runs, whose sd's se covered; at 0.7, set here,
# none of those (t3: 38%, t2.5: 68%).  Rows whose kurtosis is below _TAIL_KURTOSIS are not fitted (a
# Gaussian's is 3, an exponential's 9).
_SD_TAIL_K, _MEAN_TAIL_K, _TAIL_KURTOSIS = 0.7, 1.0, 6.0


def moment_tail_notes(values):
    """(note for the mean, note for the sd) of one row's draws, each None where the tail of its values lets
    that moment's estimator have a finite variance (Pareto k-hat of the squared deviations from the mean,
    module notes), else why its se cannot be trusted.  Applies to the plain estimates as to the CVs."""
    f = np.ravel(np.asarray(values, dtype=float))
    dev = f - f.mean()
    m2 = float(np.mean(dev**2))
    if f.size < 25 or m2 == 0 or float(np.mean(dev**4)) / m2**2 < _TAIL_KURTOSIS:
        return None, None
    khat = tail_khat(dev)
    if not np.isfinite(khat) or khat < _SD_TAIL_K:
        return None, None
    what = (f"its values have heavy tails (Pareto k-hat {khat:.2f} of their squared deviations from the mean, "
            "{bound}): {which} has no finite variance and its se cannot be estimated, the plain one's as the CV's")
    sd_note = what.format(bound=f">= {_SD_TAIL_K}, beyond a finite fourth moment", which="the estimate of the sd")
    mean_note = (what.format(bound=f">= {_MEAN_TAIL_K}, no finite second moment", which="the estimate of the mean")
                 if khat >= _MEAN_TAIL_K else None)
    return mean_note, sd_note

