"""The fitted control variate of one integrand, kept only on request (``return_fit=True``).

A control variate is g(x) = c + (L phi)(x), where the Stein part L phi has mean zero under the
target, so c is the estimate and g approximates f.  :class:`CVFit` evaluates both at new draws,
to look at the fit (where it follows f, where it does not) or to reuse it on draws it did not
see.  It keeps what the fit needs to be evaluated: the draws and scores of a kernel fit (or its
inducing draws) and its coefficients, O(n (d + k)); never the n x n kernel matrix.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

__all__ = ["CVFit"]


@dataclass(repr=False)
class CVFit:
    """The fitted control variate of one integrand.

    Attributes
    ----------
    method : str
        The estimator that produced it (as ``CVResult.method``).
    estimate : float
        The constant c of g = c + L phi: the CV estimate of the integral.

    Examples
    --------
    >>> import numpy as np, pymc_cv
    >>> x = np.random.default_rng(0).normal(size=(200, 1))
    >>> res = pymc_cv.cv_estimate(x[:, 0] ** 2, x, -x, method="zv2", return_fit=True)
    >>> fit = res.fits          # one CVFit: `values` was 1-d
    >>> new = np.array([[0.0], [2.0]])
    >>> np.round(fit.predict(new, -new), 6)   # g = f exactly: ZV-2 is exact for x^2 under N(0, 1)
    array([0., 4.])
    >>> np.round(fit.zero_mean_part(new, -new), 6)
    array([-1.,  3.])
    """

    method: str
    estimate: float
    _zero_mean: Callable  # (standardised draws, standardised scores) -> (n,) in integrand units
    _standardizer: object

    def zero_mean_part(self, samples, scores):
        """(L phi)(x) at draws ``samples`` (n, d) with scores ``scores`` (n, d): the part of the
        control variate with mean zero under the target."""
        X = np.atleast_2d(np.asarray(samples, dtype=float))
        S = np.atleast_2d(np.asarray(scores, dtype=float))
        if X.shape != S.shape or X.shape[1] != self._standardizer.mean.size:
            raise ValueError(f"`samples` and `scores` must both be (n, {self._standardizer.mean.size}); got "
                             f"{X.shape} and {S.shape}.")
        return np.asarray(self._zero_mean(*self._standardizer.transform(X, S)), dtype=float)

    def predict(self, samples, scores):
        """g(x) = estimate + (L phi)(x): the fitted approximation of the integrand."""
        return self.estimate + self.zero_mean_part(samples, scores)

    def __repr__(self):
        return f"CVFit(method={self.method!r}, estimate={self.estimate:.6g})"


def column_predictor(zero_mean, column, scale=1.0):
    """Column ``column`` of a predictor (X, S) -> (n, k), times ``scale``."""
    return lambda X, S: scale * zero_mean(X, S)[:, column]
