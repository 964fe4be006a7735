"""The InferenceData groups pymc-cv adds, and how draws and scores are read back as arrays.

- ``unconstrained_posterior`` (an ArviZ group name): the draws on the unconstrained space,
  one variable per value variable (``sigma_log__``, ``p_simplex__``, ...).
- ``score``: grad log p (joint log density, Jacobian terms included) at each draw, with the
  same variables and shapes.

PyMC's ``compute_scores`` and the Stan converters both write these two groups, so everything
downstream works for either.  A sampler that kept its own unconstrained draws and gradients
(nutpie's ``store_unconstrained=True, store_gradient=True``) gives them without evaluating the
model again: :func:`with_stored_scores`.  Groups are read and written through :mod:`pymc_cv.compat`, so
an ArviZ 0.x ``InferenceData`` and an ArviZ 1 ``DataTree`` both work and come back as they were.
"""

from __future__ import annotations

import re

import numpy as np

from . import compat

__all__ = ["UNCONSTRAINED", "SCORE", "PAIRING", "CHECKED", "SKIPPED", "UNCHECKED",
           "with_cv_groups", "stacked_draws_and_scores", "coordinate_labels",
           "has_stored_scores", "with_stored_scores", "recorded_sampler"]

UNCONSTRAINED = "unconstrained_posterior"
SCORE = "score"
# the score group's attribute that says what showed the draws to be of the model the scores are of, and
# how its value starts: checked, skipped by the caller, or not possible with what the idata holds
PAIRING = "pairing_check"
CHECKED, SKIPPED, UNCHECKED = "checked: ", "skipped: ", "not possible: "

# nutpie's record in sample_stats: the point of each draw on the unconstrained space and the
# gradient of the log density it sampled there, one column per coordinate of that space
_STORED_DRAW, _STORED_GRADIENT, _STORED_DIM = "unconstrained_draw", "gradient", "unconstrained_parameter"


def recorded_sampler(idata):
    """The sampler named in the posterior's attributes (``"nutpie 0.16.11"``, ``"pymc 5.28.5"``), or None."""
    attrs = compat.group(idata, "posterior").attrs
    library = attrs.get("inference_library")
    if not library:
        return None
    version = attrs.get("inference_library_version")
    return f"{library} {version}" if version else str(library)


def stored_backend(idata):
    """``score_backend`` of scores read from the sampler's own record."""
    sampler = recorded_sampler(idata) or "nutpie"
    return f"the sampler's stored gradients ({sampler}, store_gradient=True)"


def with_cv_groups(idata, unconstrained, scores, dims=None, coords=None, attrs=None):
    """A new InferenceData / DataTree: every group of ``idata`` plus the two CV groups (no data copied)."""
    post = compat.group(idata, "posterior")
    coords = {"chain": post.chain.values, "draw": post.draw.values, **(coords or {})}
    attrs = {"created_by": "pymc_cv", **(attrs or {})}
    new = {name: compat.dict_to_dataset(data, coords=coords, dims=dims, attrs=dict(attrs))
           for name, data in ((UNCONSTRAINED, unconstrained), (SCORE, scores))}
    return compat.with_groups(idata, new)


def stacked_draws_and_scores(idata):
    """Draws and scores as arrays (chain, draw, d), the variables in the groups' order.

    Raises ``ValueError`` naming what is missing and how to get it.
    """
    for group in (UNCONSTRAINED, SCORE):
        if group not in compat.group_names(idata):
            raise ValueError(
                f"idata has no '{group}' group{_what_nutpie_kept(idata)}. Pass model= (the PyMC or Bambi model "
                "that was sampled) to summary, or call pymc_cv.compute_scores(idata, model) for a PyMC fit, or "
                "pymc_cv.from_cmdstanpy / from_pystan for a Stan fit."
            )
    unc, sco = compat.group(idata, UNCONSTRAINED), compat.group(idata, SCORE)
    names = list(unc.data_vars)
    if sorted(names) != sorted(sco.data_vars):
        raise ValueError(
            f"'{UNCONSTRAINED}' and '{SCORE}' hold different variables ({sorted(names)} vs "
            f"{sorted(sco.data_vars)}); recompute both with compute_scores."
        )
    n_chain, n_draw = unc.sizes["chain"], unc.sizes["draw"]
    X, S = [], []
    for name in names:
        x = np.asarray(unc[name].transpose("chain", "draw", ...).values, dtype=float)
        s = np.asarray(sco[name].transpose("chain", "draw", ...).values, dtype=float)
        if x.shape != s.shape:
            raise ValueError(f"draws and scores of '{name}' differ in shape: {x.shape} vs {s.shape}.")
        k = int(np.prod(x.shape[2:], dtype=int))
        X.append(x.reshape(n_chain, n_draw, k))
        S.append(s.reshape(n_chain, n_draw, k))
    return np.concatenate(X, axis=2), np.concatenate(S, axis=2)


def _what_nutpie_kept(idata):
    """Why a nutpie idata has no stored scores, and the sampling call that keeps them ("" for other samplers)."""
    if "sample_stats" not in compat.group_names(idata) or "nutpie" not in str(recorded_sampler(idata)):
        return ""
    stats = compat.group(idata, "sample_stats")
    kept = [k for k in (_STORED_DRAW, _STORED_GRADIENT) if k in stats.data_vars]
    if len(kept) == 2:
        return ""
    what = {(): "neither its unconstrained draws nor its gradients", (_STORED_GRADIENT,): "its gradients but not "
            "its unconstrained draws", (_STORED_DRAW,): "its unconstrained draws but not its gradients"}[tuple(kept)]
    return (f", and nutpie kept {what}: sample with pm.sample(**pymc_cv.nutpie_with_gradients()) (PyMC 6: "
            "nuts_sampler='nutpie', idata_kwargs={'include_transformed': True}, nuts={'store_gradient': True}; "
            "PyMC 5: nuts_sampler_kwargs={'store_unconstrained': True, 'store_gradient': True}) and no model is "
            "needed")


def coordinate_labels(idata):
    """One label per column of :func:`stacked_draws_and_scores` (``sigma_log__``, ``theta[3]``)."""
    unc = compat.group(idata, UNCONSTRAINED)
    labels = []
    for name in unc.data_vars:
        shape = unc[name].transpose("chain", "draw", ...).shape[2:]
        labels += [name] if not shape else [f"{name}[{', '.join(map(str, i))}]" for i in np.ndindex(*shape)]
    return labels


def has_stored_scores(idata):
    """True when the sampler kept its unconstrained draws and gradients in ``sample_stats``."""
    if "sample_stats" not in compat.group_names(idata):
        return False
    stats = compat.group(idata, "sample_stats")
    return all(k in stats.data_vars and _STORED_DIM in stats[k].dims for k in (_STORED_DRAW, _STORED_GRADIENT))


def stored_labels(idata):
    """The sampler's name of every coordinate of the unconstrained space (nutpie: ``mu_0``, ``L_1.0``)."""
    return [str(v) for v in compat.group(idata, "sample_stats")[_STORED_DIM].values]


def with_stored_scores(idata, layout=None, dims=None, coords=None):
    """A new InferenceData / DataTree with the CV groups taken from the sampler's own record.

    Parameters
    ----------
    idata : InferenceData or DataTree
        With ``sample_stats.unconstrained_draw`` and ``sample_stats.gradient`` (nutpie with
        ``store_unconstrained=True, store_gradient=True``), the draws of ``posterior``.
    layout : sequence of (name, shape), optional
        How the columns split into variables (a PyMC model's value variables, in order).  Without
        it, runs of columns named as the sampler names a posterior variable's elements are that
        variable (with its dims), and any other column is a scalar variable of its own name.
    dims, coords : dict, optional
        The variables' dims and coords, as for ArviZ's ``dict_to_dataset`` (with ``layout``).

    Returns
    -------
    InferenceData or DataTree
        ``idata``'s groups plus ``unconstrained_posterior`` and ``score``, whose attribute
        ``score_backend`` says where the scores came from.
    """
    post = compat.group(idata, "posterior")
    stats = compat.group(idata, "sample_stats")
    try:  # the posterior may have been subset after sampling: keep its draws, in its order
        stats = stats.sel(chain=post["chain"].values, draw=post["draw"].values)
    except (KeyError, IndexError, ValueError) as err:
        raise ValueError("The sampler's stored draws (sample_stats) do not cover the posterior's chains and "
                         "draws; subset sample_stats with the posterior, or compute the scores with "
                         "pymc_cv.compute_scores(idata, model).") from err
    draws = np.asarray(stats[_STORED_DRAW].transpose("chain", "draw", _STORED_DIM).values, dtype=float)
    grads = np.asarray(stats[_STORED_GRADIENT].transpose("chain", "draw", _STORED_DIM).values, dtype=float)
    if layout is None:
        layout, dims = _layout_of_posterior(stored_labels(idata), post)
        coords = {d: post[d].values for names in dims.values() for d in names if d in post.coords}
    sizes = [int(np.prod(shape, dtype=int)) for _, shape in layout]
    if sum(sizes) != draws.shape[2]:
        raise ValueError(f"The sampler stored {draws.shape[2]} unconstrained coordinates but the model has "
                         f"{sum(sizes)}; the draws are of another model.")
    unconstrained, scores = {}, {}
    start = 0
    for (name, shape), size in zip(layout, sizes):
        cols = slice(start, start + size)
        unconstrained[name] = draws[:, :, cols].reshape(draws.shape[:2] + tuple(shape))
        scores[name] = grads[:, :, cols].reshape(draws.shape[:2] + tuple(shape))
        start += size
    return with_cv_groups(idata, unconstrained, scores, dims=dims, coords=coords,
                          attrs={"score_backend": stored_backend(idata),
                                 PAIRING: CHECKED + "the draws and gradients are the sampler's own record"})


def stored_names(name, shape):
    """The names nutpie gives the unconstrained coordinates of a variable: ``mu`` for a scalar,
    ``beta_0``, ``L_1.0`` for the elements of an array (C order)."""
    shape = tuple(int(k) for k in shape)
    return [name] if not shape else [f"{name}_{'.'.join(map(str, i))}" for i in np.ndindex(*shape)]


def _layout_of_posterior(labels, post):
    """(name, shape) per variable of the stored columns, and the dims of those found in the posterior."""
    shapes = {name: tuple(post[name].transpose("chain", "draw", ...).shape[2:]) for name in post.data_vars}
    layout, dims, i = [], {}, 0
    while i < len(labels):
        for name, shape in shapes.items():
            names = stored_names(name, shape)
            if labels[i:i + len(names)] == names:
                layout.append((name, shape))
                dims[name] = [d for d in post[name].transpose("chain", "draw", ...).dims[2:]]
                i += len(names)
                break
        else:  # not in the posterior (a value variable): an array when the names enumerate one
            name, shape = _array_named_at(labels, i)
            layout.append((name, shape))
            i += len(stored_names(name, shape))
    return layout, dims


def _array_named_at(labels, i):
    """(name, shape) of the array whose element names start at ``labels[i]``, or the scalar ``labels[i]``."""
    match = re.fullmatch(r"(.+)_(\d+(?:\.\d+)*)", labels[i])
    if match is None:
        return labels[i], ()
    name, arity = match.group(1), match.group(2).count(".") + 1
    run = []
    for label in labels[i:]:
        m = re.fullmatch(re.escape(name) + r"_(\d+(?:\.\d+)*)", label)
        if m is None or m.group(1).count(".") + 1 != arity:
            break
        run.append(tuple(int(k) for k in m.group(1).split(".")))
    shape = tuple(int(k) + 1 for k in np.max(run, axis=0))
    if labels[i:i + len(run)] != stored_names(name, shape):
        return labels[i], ()
    return name, shape
