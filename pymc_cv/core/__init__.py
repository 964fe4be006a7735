"""Array core: Stein kernels, control-variate estimators and standard errors (numpy/scipy only)."""

from .estimate import cv_estimate
from .result import CVResult
from .vvcv import vvcv_estimate

__all__ = ["cv_estimate", "vvcv_estimate", "CVResult"]
