"""The InferenceData groups pymc-cv adds, and how draws and scores are read back as arrays.

- ``unconstrained_posterior`` (an ArviZ group name): the draws on the unconstrained space,
  one variable per value variable (``sigma_log__``, ``p_simplex__``, ...).
- ``score``: grad log p (joint log density, Jacobian terms included) at each draw, with the
  same variables and shapes.

PyMC's ``compute_scores`` and the Stan converters both write these two groups, so everything
downstream works for either.  Groups are read and written through :mod:`pymc_cv.compat`, so
an ArviZ 0.x ``InferenceData`` and an ArviZ 1 ``DataTree`` both work and come back as they were.
"""

from __future__ import annotations

import numpy as np

from . import compat

__all__ = ["UNCONSTRAINED", "SCORE", "with_cv_groups", "stacked_draws_and_scores", "coordinate_labels"]

UNCONSTRAINED = "unconstrained_posterior"
SCORE = "score"


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
                f"idata has no '{group}' group. Call pymc_cv.compute_scores(idata, model) for a PyMC "
                "fit, or pymc_cv.from_cmdstanpy / from_pystan for a Stan fit (or pass model= to summary)."
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


def coordinate_labels(idata):
    """One label per column of :func:`stacked_draws_and_scores` (``sigma_log__``, ``theta[3]``)."""
    unc = compat.group(idata, UNCONSTRAINED)
    labels = []
    for name in unc.data_vars:
        shape = unc[name].transpose("chain", "draw", ...).shape[2:]
        labels += [name] if not shape else [f"{name}[{', '.join(map(str, i))}]" for i in np.ndindex(*shape)]
    return labels
