"""Quantiles (interval bounds) by control variates.

The CDF of f at the plain quantile q0 is E[1{f <= q0}].  The indicator is a step, which Stein CVs
fit badly; a logistic step of width h = ``SMOOTHING`` sd of f is smooth, so the CDF is split into
E[s(f)], estimated by a CV, and E[1{f <= q0} - s(f)], a plain mean of a term that is nonzero only
within a few h of q0 (no smoothing bias is left).  One Newton step from q0 with the density at q0
(the logistic kernel's estimate) gives the quantile; its se is the CDF's se over the density.

Measured before it was made the default (4 x 1,000 NUTS draws, 3% and 97% bounds): |CV error| /
|plain error| had median 0.3 on a Beta posterior and 0.47-0.54 on a 4-parameter logistic
regression; h = 0.03-0.4 sd all helped, 0.06-0.12 best.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from scipy import special

__all__ = ["SMOOTHING", "QuantilePlan", "QuantileEstimate", "smoothed_steps", "cv_quantile", "plain_quantile"]

SMOOTHING = 0.1


class QuantilePlan(NamedTuple):
    """Where the steps sit: ``probs`` (P,), the plain quantiles ``q0`` (P, k) and the widths ``h`` (k,)."""

    probs: np.ndarray
    q0: np.ndarray
    h: np.ndarray


class QuantileEstimate(NamedTuple):
    value: float
    se: float
    method: str


def smoothed_steps(Y, probs, smoothing=SMOOTHING):
    """The integrands s = expit((q0 - f) / h) (n, P * k, probability-major) for the k columns of
    ``Y`` at the plain quantiles of ``probs``, and their :class:`QuantilePlan`."""
    Y = np.asarray(Y, dtype=float)
    probs = np.asarray(probs, dtype=float)
    q0 = np.quantile(Y, probs, axis=0)
    h = smoothing * Y.std(axis=0)
    h = np.where(h > 0, h, 1.0)
    steps = special.expit((q0[:, None, :] - Y[None, :, :]) / h)  # (P, n, k)
    return np.concatenate(list(steps), axis=1), QuantilePlan(probs, q0, h)


def plain_quantile(y, p, mcse, value=None):
    """The plain ``p`` quantile of draws ``y`` with its ``mcse`` (``value``: that quantile, already computed)."""
    return QuantileEstimate(float(np.quantile(y, p)) if value is None else float(value), float(mcse), "mc")


def cv_quantile(y, plan, i, j, fit, mcse_plain, residual_se):
    """Quantile ``plan.probs[i]`` of draws ``y`` (column j) from the CV ``fit`` = (CVResult, index) of
    its smoothed step.  ``residual_se(r)``: the mcse of the mean of a residual series r (with the
    chains); ``mcse_plain``: ArviZ's mcse of the plain quantile.  The plain quantile where the CV's
    se is not below it, or the fit was flagged."""
    res, c = fit
    p, q0, h = plan.probs[i], plan.q0[i, j], plan.h[j]
    y = np.ravel(y)
    if str(res.method[c]) == "mc" or not bool(res.se_reliable[c]):
        return plain_quantile(y, p, mcse_plain)
    u = (q0 - y) / h
    step = special.expit(u)
    left_out = (y <= q0) - step
    cdf = float(res.estimate[c]) + float(np.mean(left_out))
    density = float(np.mean(step * special.expit(-u))) / h
    if not density > 0:
        return plain_quantile(y, p, mcse_plain)
    # the CV part and the plain part share draws: their se from the sum of their residuals
    resid = np.ravel(res.heldout_residuals[c]) + left_out - np.mean(left_out)
    se_cdf = max(float(residual_se(resid)), float(np.hypot(res.se[c], residual_se(left_out - np.mean(left_out)))))
    se = se_cdf / density
    if not se < mcse_plain:
        return plain_quantile(y, p, mcse_plain)
    return QuantileEstimate(q0 + (p - cdf) / density, se, str(res.method[c]))
