"""Array core: Stein kernels, control-variate estimators and standard errors (numpy/scipy only)."""

from .estimate import cv_estimate
from .result import CVResult

__all__ = ["cv_estimate", "CVResult"]
