"""Bambi models: the PyMC model behind them, and the draws as their sampler saw them.

With ``center_predictors=True`` (Bambi's default) a model samples the intercept of the centred
predictors and, after sampling, writes the intercept of the original predictors into
``posterior`` in its place.  The scores must be taken at the points that were sampled, so the
centred intercept is recovered here (intercept + mean of the predictors . slopes, the inverse of
Bambi's own step); the posterior the table reports on is left as the user has it.
"""

from __future__ import annotations

import numpy as np

# Bambi and xarray load inside the functions that use them: `import pymc_cv` stays cheap without them.

__all__ = ["is_bambi_model", "pymc_model", "sampled_posterior"]


def is_bambi_model(obj):
    """True for a ``bambi.Model`` (checked without importing Bambi)."""
    return type(obj).__module__.split(".")[0] == "bambi" and hasattr(obj, "center_predictors")


def pymc_model(bmb_model):
    """The ``pymc.Model`` a Bambi model built (after ``fit`` or ``build``)."""
    backend = getattr(bmb_model, "backend", None)
    if backend is None or getattr(backend, "model", None) is None:
        raise ValueError("The Bambi model has not been built: call model.fit() (or model.build()) first, then pass "
                         "the same model object.")
    return backend.model


def _coefficients(post, names):
    """(chain, draw, p): the slopes of the common terms, in the design matrix's column order."""
    parts = []
    for name in names:
        arr = np.asarray(post[name].transpose("chain", "draw", ...).values, dtype=float)
        parts.append(arr.reshape(arr.shape[0], arr.shape[1], -1))
    return np.concatenate(parts, axis=2)


def sampled_posterior(bmb_model, post):
    """``post`` with every centred intercept restored to the value the sampler drew.

    Parameters
    ----------
    bmb_model : bambi.Model
        The fitted model.
    post : xarray.Dataset
        Its posterior, as ``fit`` returned it.

    Returns
    -------
    xarray.Dataset
        A copy (``post`` itself when nothing was centred).
    """
    import xarray as xr
    from bambi.utils import get_aliased_name

    if not bmb_model.center_predictors:
        return post
    out = post
    for component in bmb_model.backend.distributional_components.values():
        term = component.component
        if not (term.intercept_term and term.common_terms):
            continue
        if bmb_model.response_component.term.coords:
            raise NotImplementedError(
                "This Bambi family has a response with categories, whose centred intercepts pymc-cv does not "
                "restore yet: build the model with center_predictors=False and fit it again.")
        means = np.asarray(component.design_matrix_without_intercept, dtype=float).mean(axis=0)
        coefs = _coefficients(post, [get_aliased_name(t) for t in term.common_terms.values()])
        name = get_aliased_name(term.intercept_term)
        if out is post:
            out = post.copy()
        out[name] = out[name] + xr.DataArray(coefs @ means, dims=("chain", "draw"))
    return out

