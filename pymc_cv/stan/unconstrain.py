"""Stan's unconstraining transforms, where they act on each scalar alone, recovered from a few draws.

``transform_inits`` costs as much as a gradient (httpstan builds the model from its data on every
call), so calling it on every draw is half the cost of :func:`~pymc_cv.stan.from_pystan`.  For the
constraints that act on one scalar at a time, Stan's documented transforms are

- none, or ``offset``/``multiplier``: u = (x - offset) / multiplier (affine);
- ``lower=a``: u = log(x - a); ``upper=b``: u = log(b - x);
- ``lower=a, upper=b``: u = logit((x - a) / (b - a)).

Given draws x and Stan's u at a few of them, :func:`fit_transforms` finds, per coordinate, the one of
these that reproduces u to round-off, and returns None when any coordinate has none (simplexes,
Cholesky factors, bounds that depend on other parameters, or too few distinct values to tell): the
caller then asks Stan for every draw.  Each coordinate is fitted at its smallest and largest draw
among others, so no draw lies outside the range the transform was matched on; the caller checks
the result against Stan at draws the fit did not see.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from scipy.special import expit, logit

__all__ = ["ElementwiseTransforms", "fit_transforms", "probe_draws", "matches"]

# Stan's and numpy's log, exp and logit agree to a few ulp; a transform that is not Stan's misses
# by far more at draws spread over a coordinate's range
_RTOL = 1e-9
_MIN_DISTINCT = 4


class ElementwiseTransforms(NamedTuple):
    """Per coordinate the transform's kind (0 affine, 1 lower, 2 upper, 3 lower and upper) and its
    two constants (affine: offset and multiplier; lower or upper: the bound; both: lower bound and
    width)."""

    kind: np.ndarray
    a: np.ndarray
    b: np.ndarray

    def __call__(self, X):
        """The unconstrained values of the constrained draws ``X`` (n, d)."""
        U = np.empty_like(X, dtype=float)
        for kind, f in enumerate((_affine, _lower, _upper, _both)):
            cols = np.flatnonzero(self.kind == kind)
            if cols.size:
                U[:, cols] = f(X[:, cols], self.a[cols], self.b[cols])
        return U


def _affine(x, a, b):
    return (x - a) / b


def _lower(x, a, b):
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.log(x - a)


def _upper(x, a, b):
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.log(a - x)


def _both(x, a, b):
    with np.errstate(divide="ignore", invalid="ignore"):
        return logit((x - a) / b)


def probe_draws(X, extra, rng):
    """Indices of the draws to ask Stan about: each coordinate's smallest and largest, and ``extra``
    more at random."""
    picked = set(np.argmin(X, axis=0).tolist()) | set(np.argmax(X, axis=0).tolist())
    rest = np.setdiff1d(np.arange(X.shape[0]), list(picked))
    picked |= set(rng.choice(rest, size=min(extra, rest.size), replace=False).tolist())
    return np.array(sorted(picked))


def matches(U, V):
    """Whether two sets of unconstrained values agree to round-off."""
    return bool(np.all(np.abs(U - V) <= _RTOL * (1.0 + np.abs(V))))


def _candidates(x, u):
    """(kind, a, b) of each transform fitted to one coordinate's probe values."""
    ones = np.ones_like(x)
    # affine: x = a + b u
    (a, b), *_ = np.linalg.lstsq(np.column_stack([ones, u]), x, rcond=None)
    yield 0, a, b
    # lower: x - exp(u) is the bound at every draw; upper: x + exp(u).  Taken at the draw nearest
    # the bound, where the difference loses the fewest digits
    near = int(np.argmin(u))
    with np.errstate(over="ignore"):
        yield 1, float(x[near] - np.exp(u[near])), 1.0
        yield 2, float(x[near] + np.exp(u[near])), 1.0
    # lower and upper: x = a + w expit(u)
    (a, w), *_ = np.linalg.lstsq(np.column_stack([ones, expit(u)]), x, rcond=None)
    yield 3, a, w


def fit_transforms(Xp, Up):
    """The :class:`ElementwiseTransforms` that map the probe draws ``Xp`` (m, d) to Stan's
    unconstrained values ``Up`` (m, d) at all of them, or None where some coordinate has no such
    transform (or too few distinct values to tell one)."""
    if Xp.shape != Up.shape:
        return None
    d = Xp.shape[1]
    kind, A, B = np.zeros(d, dtype=int), np.zeros(d), np.ones(d)
    funcs = (_affine, _lower, _upper, _both)
    for j in range(d):
        x, u = Xp[:, j], Up[:, j]
        if np.unique(x).size < _MIN_DISTINCT or not np.all(np.isfinite(u)):
            return None
        for k, a, b in _candidates(x, u):
            if np.isfinite(a) and np.isfinite(b) and b != 0 and matches(funcs[k](x, a, b), u):
                kind[j], A[j], B[j] = k, a, b
                break
        else:
            return None
    return ElementwiseTransforms(kind, A, B)
