"""Standardised coordinates z = (x - mean) / sd, with scores sd * s.

Posterior coordinates can differ in scale by orders of magnitude (Borehole:
r_w ~ 0.1, T_u ~ 9e4); one isotropic kernel on the raw scale then sees only
the widest coordinate.  The map is affine, so E_pi[f] is unchanged and the
score of the transformed density is the chain rule's sd * s.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["Standardizer"]


@dataclass(frozen=True)
class Standardizer:
    mean: np.ndarray
    sd: np.ndarray

    @classmethod
    def fit(cls, samples_list):
        X = np.concatenate(list(samples_list), axis=0)
        sd = X.std(axis=0)
        sd = np.where(sd > 0, sd, 1.0)
        return cls(X.mean(axis=0), sd)

    @classmethod
    def identity(cls, d):
        return cls(np.zeros(d), np.ones(d))

    def transform(self, X, S):
        return (X - self.mean) / self.sd, S * self.sd
