"""Bambi models: the PyMC model behind them, and the draws as their sampler saw them.

With ``center_predictors=True`` (Bambi's default) a model samples the intercept of the centred
predictors and, after sampling, writes the intercept of the original predictors into
``posterior`` in its place.  The scores must be taken at the points that were sampled, so the
centred intercept is recovered here (intercept + mean of the predictors . slopes, the inverse of
Bambi's own step).  Group-specific terms are non-centred, term = offset x sigma, and ``fit`` drops
the offsets from ``posterior`` (``omit_offsets=True``, its default); they are recovered as
term / sigma.  The posterior the table reports on is left as the user has it.
"""

from __future__ import annotations

import numpy as np

from .. import compat

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


def _coefficients(post, names, dims):
    """(*dims, p): the slopes of the common terms over ``dims`` (chain, draw and any response
    categories), in the design matrix's column order."""
    parts = []
    for name in names:
        da = post[name]
        arr = np.asarray(da.transpose(*dims, ...).values, dtype=float)
        parts.append(arr.reshape(arr.shape[: len(dims)] + (-1,)))
    return np.concatenate(parts, axis=-1)


def _noncentred_factors(model, name):
    """(offset, sigma): the free variables whose product is the Deterministic ``name``, the form of
    Bambi's non-centred terms (``pm.Deterministic(label, offset * sigma)``); None for any other form."""
    from pytensor.compile.ops import ViewOp
    from pytensor.scalar import Mul
    from pytensor.tensor.elemwise import DimShuffle, Elemwise

    var = model.named_vars.get(name)
    if var is None or not any(var is d for d in model.deterministics):
        return None
    while var.owner is not None and isinstance(var.owner.op, ViewOp):
        var = var.owner.inputs[0]
    if var.owner is None or not (isinstance(var.owner.op, Elemwise) and isinstance(var.owner.op.scalar_op, Mul)):
        return None
    factors = []
    for inp in var.owner.inputs:
        while inp.owner is not None and isinstance(inp.owner.op, DimShuffle):
            inp = inp.owner.inputs[0]
        factors.append(inp)
    free = model.free_RVs
    if len(factors) != 2 or not all(any(f is rv for rv in free) for f in factors):
        return None
    return factors[0].name, factors[1].name


def _restore_offsets(model, post):
    """``post`` with the offsets of non-centred terms that it lacks, as term / sigma (a copy; ``post``
    itself when none is missing or none can be recovered: the caller's check names what is missing)."""
    out = post
    for rv in model.free_RVs:
        if rv.name in post or not rv.name.endswith("_offset"):
            continue
        term = rv.name[: -len("_offset")]
        factors = _noncentred_factors(model, term)
        if term not in post or factors is None or rv.name not in factors:
            continue
        sigma = factors[1] if factors[0] == rv.name else factors[0]
        if sigma not in post or not set(post[sigma].dims) <= set(post[term].dims):
            continue
        offset = (post[term] / post[sigma]).transpose(*post[term].dims)
        if not np.all(np.isfinite(offset.values)):
            continue
        if out is post:
            out = post.copy()
        out[rv.name] = offset
    return out


def sampled_posterior(bmb_model, post):
    """``post`` with the draws Bambi's ``fit`` rewrote or dropped restored to what the sampler drew:
    every centred intercept, and the offsets of non-centred terms.

    Parameters
    ----------
    bmb_model : bambi.Model
        The fitted model.
    post : xarray.Dataset
        Its posterior, as ``fit`` returned it.

    Returns
    -------
    xarray.Dataset
        A copy (``post`` itself when nothing was rewritten or dropped).
    """
    import xarray as xr
    from bambi.utils import get_aliased_name

    out = post = _restore_offsets(pymc_model(bmb_model), post)
    if not bmb_model.center_predictors:
        return post
    for component in bmb_model.backend.distributional_components.values():
        term = component.component
        if not (term.intercept_term and term.common_terms):
            continue
        means = np.asarray(component.design_matrix_without_intercept, dtype=float).mean(axis=0)
        names = [get_aliased_name(t) for t in term.common_terms.values()]
        name = get_aliased_name(term.intercept_term)
        # a response with categories (categorical, multinomial) has an intercept and slopes per category
        dims = ("chain", "draw") + tuple(compat.bambi_response_term(bmb_model).coords or ())
        if out is post:
            out = post.copy()
        out[name] = out[name] + xr.DataArray(_coefficients(post, names, dims) @ means, dims=dims)
    return out

