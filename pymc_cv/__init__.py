"""pymc-cv: Stein control variates for PyMC and Stan posterior draws."""

from .core import CVResult, cv_estimate, vvcv_estimate
from .evidence import thermodynamic_integration, ti_from_arrays, ti_from_draws
from .metacv import MetaCV
from .summary import summary


def compute_scores(idata, model, **kwargs):
    """Add unconstrained draws and scores of a PyMC ``model`` to ``idata``; see
    :func:`pymc_cv.adapters.pymc.compute_scores` (imported lazily: PyMC is heavy)."""
    from .adapters.pymc import compute_scores as _compute_scores

    return _compute_scores(idata, model, **kwargs)


__version__ = "0.1.0"
__all__ = [
    "cv_estimate", "vvcv_estimate", "summary", "compute_scores", "CVResult", "thermodynamic_integration",
    "ti_from_arrays", "ti_from_draws", "MetaCV", "__version__",
]
