"""What the core uses but does not compute: MCMC diagnostics, and inducing-point fits on a cluster.

The core is numpy/scipy only.  ESS, R-hat and PSIS's Pareto k-hat belong to ArviZ, and fitting
inducing-point features held on a dask cluster needs dask; the core asks for both here, and
``import pymc_cv`` installs ArviZ's diagnostics (``pymc_cv.compat``, for the installed ArviZ) and
the dask fit (``pymc_cv.distributed_nystrom``).  Whoever uses the core without the package
installs their own with :func:`install`.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import numpy as np

__all__ = ["ArrayDiagnostics", "install", "diagnostics", "cluster_nystrom"]


class ArrayDiagnostics(NamedTuple):
    """Diagnostics of arrays whose last two axes are (chain, draw); leading axes are kept.

    Attributes
    ----------
    ess_mean : callable
        ESS of the mean (ArviZ's method "mean").
    ess_bulk : callable
        Bulk ESS (rank-normalised).
    rhat : callable
        Rank-normalised split R-hat.
    psis_khat : callable
        Pareto k-hat of PSIS on 1-d log weights (a float).
    """

    ess_mean: Callable[[np.ndarray], np.ndarray]
    ess_bulk: Callable[[np.ndarray], np.ndarray]
    rhat: Callable[[np.ndarray], np.ndarray]
    psis_khat: Callable[[np.ndarray], float]


_installed = {"diagnostics": None, "cluster_nystrom": None}


def install(*, diagnostics=None, cluster_nystrom=None):
    """Make these the functions the core uses (None leaves one as it is).

    Parameters
    ----------
    diagnostics : ArrayDiagnostics, optional
    cluster_nystrom : callable, optional
        :func:`pymc_cv.core.nystrom.fit_nystrom_heldout`'s arguments and a ``client`` after them:
        the same fit with the features held on the client's cluster.
    """
    if diagnostics is not None:
        if not isinstance(diagnostics, ArrayDiagnostics):
            raise TypeError(f"diagnostics must be an ArrayDiagnostics; got {type(diagnostics).__name__}.")
        _installed["diagnostics"] = diagnostics
    if cluster_nystrom is not None:
        if not callable(cluster_nystrom):
            raise TypeError(f"cluster_nystrom must be callable; got {type(cluster_nystrom).__name__}.")
        _installed["cluster_nystrom"] = cluster_nystrom


def _get(name):
    if _installed[name] is None:
        raise RuntimeError(f"no {name} is installed for pymc_cv.core: `import pymc_cv` installs the package's, "
                           f"or call pymc_cv.core.external.install({name}=...).")
    return _installed[name]


def diagnostics():
    """The installed :class:`ArrayDiagnostics`."""
    return _get("diagnostics")


def cluster_nystrom():
    """The installed inducing-point fit on a cluster."""
    return _get("cluster_nystrom")
