"""pymc-cv: Stein control variates for PyMC and Stan posterior draws."""

import importlib

from . import compat as _compat
from .accessor import register as _register_accessor
from .core import CVResult, cv_estimate, vvcv_estimate
from .core.external import ArrayDiagnostics as _ArrayDiagnostics
from .core.external import install as _install
from .distributed_nystrom import fit_nystrom_heldout_dask as _fit_nystrom_heldout_dask
from .evidence import evidence_from_draws, ti_from_arrays
from .metacv import MetaCV
from .summary import summary

nutpie_with_gradients = _compat.nutpie_with_gradients

# the core computes no ESS, R-hat or PSIS of its own: ArviZ's, for the installed ArviZ
_install(diagnostics=_ArrayDiagnostics(_compat.ess_mean, _compat.ess_bulk, _compat.rhats, _compat.psis_khat),
         cluster_nystrom=_fit_nystrom_heldout_dask)
_register_accessor()  # idata.cv on ArviZ 1's DataTree


# The PyMC and Stan edges import PyMC or PyStan, which take seconds; they load on first use (PEP 562),
# and pymc_cv.compute_scores is then the edge's own function, docstring and all.
_LAZY = {
    "compute_scores": "pymc_cv.pymc.scores",
    "sample_population": "pymc_cv.pymc.population",
    "thermodynamic_integration": "pymc_cv.pymc.evidence",
    "ti_from_draws": "pymc_cv.pymc.evidence",
    "ti_from_population": "pymc_cv.pymc.evidence",
    "bridge_sampling": "pymc_cv.pymc.bridge",
    "log_evidence": "pymc_cv.pymc.log_evidence",
    "from_pystan": "pymc_cv.stan.convert",
    "from_cmdstanpy": "pymc_cv.stan.convert",
    "ti_from_pystan": "pymc_cv.stan.evidence",
    "bridge_from_pystan": "pymc_cv.stan.evidence",
}


def __getattr__(name):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'pymc_cv' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY))


__version__ = "0.1.0"
__all__ = [
    "cv_estimate", "vvcv_estimate", "summary", "compute_scores", "CVResult", "thermodynamic_integration",
    "ti_from_arrays", "ti_from_draws", "ti_from_pystan", "ti_from_population", "MetaCV", "from_pystan",
    "from_cmdstanpy", "sample_population", "nutpie_with_gradients", "bridge_sampling",
    "evidence_from_draws", "log_evidence", "bridge_from_pystan", "__version__",
]
