"""Quadrature over temperature: log p(y) = int_0^1 E_t[log p(y|x)] dt from per-rung moments.

Both rules are linear in the per-rung means mu_i and variances v_i, log Z = a.mu + b.v, so
their standard errors follow from the per-rung ones.  The corrected trapezoid of Friel, Hurn
and Wyse (2014) uses d/dt E_t[log p(y|x)] = Var_t[log p(y|x)]: it is the integral of the cubic
Hermite interpolant, with error O(h^4) instead of the trapezoid's O(h^2).
"""

from __future__ import annotations

import numpy as np

__all__ = ["RULES", "quadrature_weights", "integrate", "quadrature_error"]

RULES = ("corrected", "trapezoid")
_ORDER = {"corrected": 4, "trapezoid": 2}


def _check_ladder(t, from_prior=True):
    t = np.asarray(t, dtype=float)
    if t.ndim != 1 or t.size < 2:
        raise ValueError("temperatures must be a 1-d array of at least 2 values from 0 to 1.")
    if not np.all(np.diff(t) > 0):
        raise ValueError("temperatures must be strictly increasing; sort them and drop duplicates.")
    if (from_prior and t[0] != 0.0) or t[-1] != 1.0 or t[0] < 0.0:
        raise ValueError(
            f"temperatures run from {t[0]:g} to {t[-1]:g}; thermodynamic integration needs the prior "
            "(t = 0) and the posterior (t = 1) as the first and last rungs."
        )
    return t


def quadrature_weights(temperatures, rule="corrected", from_prior=True):
    """Weights (a, b) with log Z = a . mu + b . v for the rule.

    ``from_prior=False``: the ladder may start above 0, and a . mu + b . v is then the integral
    over [t_0, 1], i.e. log Z(1) - log Z(t_0).

    Examples
    --------
    >>> a, b = quadrature_weights([0.0, 0.5, 1.0], "trapezoid")
    >>> a.tolist(), b.tolist()
    ([0.25, 0.5, 0.25], [0.0, 0.0, 0.0])
    """
    if rule not in RULES:
        raise ValueError(f"rule={rule!r}; use one of {RULES}.")
    t = _check_ladder(temperatures, from_prior)
    h = np.diff(t)
    a = np.zeros(t.size)
    a[:-1] += h / 2
    a[1:] += h / 2
    b = np.zeros(t.size)
    if rule == "corrected":
        b[:-1] += h**2 / 12
        b[1:] -= h**2 / 12
    return a, b


def integrate(temperatures, mean, var, mean_se=None, var_se=None, rule="corrected", source=None, mean_bias=None,
              var_bias=None, from_prior=True):
    """(log Z, se) from per-rung means and variances of log p(y|x) and their standard errors.

    Rungs are sampled independently, so their errors add in quadrature; the small covariance
    of a rung's mean and variance estimates (same draws) is ignored.  (The rungs of one
    population run are not independent: ``thermodynamic_integration.shared_iteration_factor``
    scales this se for them.)  ``source`` (w,): rungs
    with the same label share draws (reweighted rungs, :mod:`.reweighting`); their errors
    add linearly, the bound for fully correlated errors.

    ``mean_bias``, ``var_bias`` (w,): the signed jackknife bias estimates of CV estimates
    (``CVResult.jackknife_bias``), whose absolute values are part of ``mean_se`` / ``var_se``.  A
    bias of one sign adds up over rungs where noise does not, so they are taken out of the
    per-rung se's and come back as the bias of the log evidence itself, |sum of weight x bias|
    (the log evidence is linear in the rung estimates).

    ``from_prior=False``: the integral over a ladder that starts above 0 (see :func:`quadrature_weights`).

    Examples
    --------
    x ~ N(0, 1), y = 0 ~ N(x, 1): E_t[log p(y|x)] = -log(2 pi)/2 - 1/(2 (1 + t)), Var_t = 1/(2 (1 + t)^2),
    and log p(y) = -log(4 pi)/2.

    >>> import numpy as np
    >>> from pymc_cv.evidence import integrate, power_ladder
    >>> t = power_ladder(21)
    >>> value, _ = integrate(t, -0.5 * np.log(2 * np.pi) - 0.5 / (1 + t), 0.5 / (1 + t) ** 2)
    >>> bool(abs(value + 0.5 * np.log(4 * np.pi)) < 1e-6)
    True
    """
    a, b = quadrature_weights(temperatures, rule, from_prior)
    mean, var = np.asarray(mean, dtype=float), np.asarray(var, dtype=float)
    if mean.shape != a.shape or var.shape != a.shape:
        raise ValueError(f"need one mean and one variance per temperature ({a.size}); got {mean.shape}, {var.shape}.")
    value = float(a @ mean + b @ var)
    if mean_se is None:
        return value, np.nan
    var_se = np.zeros_like(a) if var_se is None else np.asarray(var_se, dtype=float)
    ms = np.zeros_like(a) if mean_bias is None else np.asarray(mean_bias, dtype=float)
    vs = np.zeros_like(a) if var_bias is None else np.asarray(var_bias, dtype=float)
    noise_mean = np.maximum(np.asarray(mean_se, dtype=float) - np.abs(ms), 0.0)
    noise_var = np.maximum(var_se - np.abs(vs), 0.0)
    per_rung = np.hypot(a * noise_mean, b * noise_var)
    if source is not None:
        labels, inverse = np.unique(np.asarray(source), return_inverse=True)
        per_rung = np.bincount(inverse.ravel(), weights=per_rung, minlength=labels.size)
    return value, float(np.sqrt(np.sum(per_rung**2)) + abs(a @ ms + b @ vs))


def quadrature_error(temperatures, mean, var, rule="corrected", from_prior=True):
    """Richardson estimate of the discretisation error of ``rule`` on this ladder.

    The same rule on every other rung (both ends kept) has about 2^p times the error of the
    full ladder (p = 4 corrected, 2 trapezoid), so the error is about |full - coarse| / (2^p - 1).
    With an even number of rungs one coarse interval must span a single fine one; that is done
    at either end and the larger estimate kept (merging only at the hot end, where the fine
    intervals are widest, made the estimate 3x too small on a 6-rung power ladder).  Sampling
    noise enters both terms, so this is itself an estimate; nan below 3 rungs.

    Examples
    --------
    >>> import numpy as np
    >>> from pymc_cv.evidence import integrate, power_ladder, quadrature_error
    >>> t = power_ladder(11)
    >>> mean, var = -0.5 * np.log(2 * np.pi) - 0.5 / (1 + t), 0.5 / (1 + t) ** 2
    >>> error = abs(integrate(t, mean, var, rule="trapezoid")[0] + 0.5 * np.log(4 * np.pi))
    >>> bool(0.5 * error < quadrature_error(t, mean, var, rule="trapezoid") < 2 * error)
    True
    """
    t = _check_ladder(temperatures, from_prior)
    if t.size < 3:
        return np.nan
    mean, var = np.asarray(mean, dtype=float), np.asarray(var, dtype=float)
    full, _ = integrate(t, mean, var, rule=rule, from_prior=from_prior)
    last = t.size - 1
    coarse_ladders = {tuple(np.unique(np.r_[np.arange(0, t.size, 2), last])),
                      tuple(np.unique(np.r_[0, np.arange(last, -1, -2)]))}
    coarse = [integrate(t[list(k)], mean[list(k)], var[list(k)], rule=rule, from_prior=from_prior)[0]
              for k in coarse_ladders]
    return max(abs(full - c) for c in coarse) / (2 ** _ORDER[rule] - 1)
