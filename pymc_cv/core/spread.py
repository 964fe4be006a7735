"""The posterior sd by control variates.

The sd of f is sqrt(E[(f - c)^2] - (E[f] - c)^2) for any constant c; with c the plain mean both
expectations are well scaled and come from one CV fit of the columns f and (f - c)^2, which share
the draws and scores.  The se is the delta method's, with the covariance of the two estimates taken
from the correlation of their held-out residuals.  Where the CV does not beat the plain sd (or its
fit is flagged), the plain sd is reported with ArviZ's mcse, as for the mean.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

__all__ = ["SdEstimate", "centred_squares", "cv_sd", "plain_sd"]


class SdEstimate(NamedTuple):
    """The sd of one integrand: its value, se, variance reduction over the plain sd's mcse, the
    method of the second-moment fit ("mc": the plain sd) and, when it fell back, why."""

    sd: float
    se: float
    variance_reduction: float
    method: str
    note: str | None = None


def centred_squares(Y):
    """(Y - c)^2 for Y (n, k), c the column means: the integrands whose CV estimates give the sd."""
    Y = np.asarray(Y, dtype=float)
    centre = Y.mean(axis=0)
    return (Y - centre) ** 2, centre


def plain_sd(y, mcse_sd, note=None):
    """The plain sd (ddof = 1, as ArviZ) of draws ``y`` and its mcse."""
    return SdEstimate(float(np.std(y, ddof=1)), float(mcse_sd), 1.0, "mc", note)


def _correlation(a, b):
    a, b = np.ravel(a), np.ravel(b)
    if a.size != b.size or a.size < 3 or np.ptp(a) == 0 or np.ptp(b) == 0:
        return 0.0
    return float(np.corrcoef(a, b)[0, 1])


def cv_sd(y, mcse_sd, first, second, centre):
    """The sd of draws ``y`` from CV estimates of its mean and of its second moment about ``centre``.

    Parameters
    ----------
    y : array
        The integrand's draws (any shape).
    mcse_sd : float
        ArviZ's mcse of the plain sd of ``y``.
    first, second : (CVResult, int)
        The results and indices of the fits of ``y`` and of ``(y - centre)^2``.
    centre : float
        The constant the second moment is taken about (the plain mean of ``y``).
    """
    (res1, i), (res2, j) = first, second
    if str(res2.method[j]) == "mc":
        return plain_sd(y, mcse_sd)
    if not (bool(res2.se_reliable[j]) and bool(res1.se_reliable[i])):
        return plain_sd(y, mcse_sd, "the second-moment fit is flagged unreliable; the plain sd is reported")
    shift = float(res1.estimate[i]) - centre
    var = float(res2.estimate[j]) - shift**2
    if not var > 0:
        return plain_sd(y, mcse_sd, "the CV variance is not positive; the plain sd is reported")
    sd = np.sqrt(var)
    se1, se2 = float(res1.se[i]), float(res2.se[j])
    rho = _correlation(res1.heldout_residuals[i], res2.heldout_residuals[j])
    # sd = sqrt(m2 - shift^2): gradient (1 / (2 sd), -shift / sd) in (m2, shift)
    a, b = 1.0 / (2.0 * sd), -shift / sd
    se = float(np.sqrt(max(a**2 * se2**2 + b**2 * se1**2 + 2.0 * a * b * rho * se1 * se2, 0.0)))
    vr = (mcse_sd / se) ** 2 if se > 0 else np.inf
    if vr <= 1.0:
        return plain_sd(y, mcse_sd)
    return SdEstimate(float(sd), se, float(vr), str(res2.method[j]))
