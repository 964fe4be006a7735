"""pymc-cv: Stein control variates for PyMC and Stan posterior draws."""

from .accessor import register as _register_accessor
from .core import CVResult, cv_estimate, vvcv_estimate
from .evidence import thermodynamic_integration, ti_from_arrays, ti_from_draws, ti_from_population, ti_from_pystan
from .metacv import MetaCV
from .summary import summary

_register_accessor()  # idata.cv on ArviZ 1's DataTree


# The adapters import PyMC or PyStan, which take seconds; they load on first use (PEP 562),
# and pymc_cv.compute_scores is then the adapter's own function, docstring and all.
_LAZY = {
    "compute_scores": "pymc_cv.adapters.pymc",
    "from_pystan": "pymc_cv.adapters.stan",
    "from_cmdstanpy": "pymc_cv.adapters.stan",
    "sample_population": "pymc_cv.adapters.population",
}


def __getattr__(name):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'pymc_cv' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY))


__version__ = "0.1.0"
__all__ = [
    "cv_estimate", "vvcv_estimate", "summary", "compute_scores", "CVResult", "thermodynamic_integration",
    "ti_from_arrays", "ti_from_draws", "ti_from_pystan", "ti_from_population", "MetaCV", "from_pystan",
    "from_cmdstanpy", "sample_population", "__version__",
]
