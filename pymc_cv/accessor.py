"""``idata.cv``: pymc-cv as an accessor on the DataTree that ``pm.sample`` returns on ArviZ 1.

Registered with xarray as arviz-stats registers ``azstats``, so post-processing reads like the
rest of an ArviZ 1 workflow::

    scored = idata.cv.scores(model)  # pymc_cv.compute_scores(idata, model, extend_inferencedata=False)
    idata.cv.summary(["mu"])         # pymc_cv.summary(idata, ["mu"])

As the accessors of xarray and arviz-stats, these leave ``idata`` as it is: ``scores`` returns a new
DataTree (``extend_inferencedata=True`` adds the groups in place, PyMC's convention).

On ArviZ 0.x ``pm.sample`` returns an ``InferenceData``, which has no accessors; call the
functions directly there.
"""

from __future__ import annotations

from .pymc.scores import compute_scores
from .summary import summary

# xarray (ArviZ 1's DataTree accessor) loads inside the functions that use it: `import pymc_cv` stays cheap without it.

__all__ = ["CVAccessor", "register"]


class CVAccessor:
    """The ``cv`` namespace of a DataTree (the root of an ArviZ 1 posterior)."""

    def __init__(self, datatree):
        self._obj = datatree

    def scores(self, model=None, *, extend_inferencedata=False, **kwargs):
        """A new DataTree with the unconstrained draws and the scores (``extend_inferencedata=True``: added
        to this one in place); see :func:`pymc_cv.compute_scores`."""
        return compute_scores(self._obj, model, extend_inferencedata=extend_inferencedata, **kwargs)

    def summary(self, var_names=None, **kwargs):
        """Plain and CV posterior means; see :func:`pymc_cv.summary` (inside ``with model:`` the scores are
        that model's, where the DataTree holds none)."""
        return summary(self._obj, var_names, **kwargs)


def register():
    """Register ``cv`` on ``xarray.DataTree`` once (a no-op where xarray has no DataTree)."""
    import xarray as xr

    if hasattr(xr, "register_datatree_accessor") and not hasattr(xr.DataTree, "cv"):
        xr.register_datatree_accessor("cv")(CVAccessor)
