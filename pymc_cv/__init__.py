"""pymc-cv: Stein control variates for PyMC and Stan posterior draws."""

from .core import CVResult, cv_estimate, vvcv_estimate
from .evidence import thermodynamic_integration, ti_from_arrays, ti_from_draws, ti_from_pystan
from .metacv import MetaCV
from .summary import summary


def compute_scores(idata, model, **kwargs):
    """Add unconstrained draws and scores of a PyMC ``model`` to ``idata``; see
    :func:`pymc_cv.adapters.pymc.compute_scores` (imported lazily: PyMC is heavy)."""
    from .adapters.pymc import compute_scores as _compute_scores

    return _compute_scores(idata, model, **kwargs)


def from_pystan(fit, posterior, **kwargs):
    """InferenceData with unconstrained draws and scores of a PyStan 3 fit; see
    :func:`pymc_cv.adapters.stan.from_pystan` (imported lazily)."""
    from .adapters.stan import from_pystan as _from_pystan

    return _from_pystan(fit, posterior, **kwargs)


def from_cmdstanpy(fit, model=None, data=None, **kwargs):
    """InferenceData with unconstrained draws and scores of a CmdStanPy fit; see
    :func:`pymc_cv.adapters.stan.from_cmdstanpy` (imported lazily)."""
    from .adapters.stan import from_cmdstanpy as _from_cmdstanpy

    return _from_cmdstanpy(fit, model, data, **kwargs)


__version__ = "0.1.0"
__all__ = [
    "cv_estimate", "vvcv_estimate", "summary", "compute_scores", "CVResult", "thermodynamic_integration",
    "ti_from_arrays", "ti_from_draws", "ti_from_pystan", "MetaCV", "from_pystan", "from_cmdstanpy", "__version__",
]
