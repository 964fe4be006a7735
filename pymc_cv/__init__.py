"""pymc-cv: Stein control variates for PyMC and Stan posterior draws."""

from .core import CVResult, cv_estimate, vvcv_estimate

__version__ = "0.1.0"
__all__ = ["cv_estimate", "vvcv_estimate", "CVResult", "__version__"]
