"""Rungs that were never sampled: the draws of a sampled rung, reweighted onto a finer ladder.

ZVCV's ``Expand_Temperatures``: where the conditional ESS between neighbouring rungs is low,
E_t[log p(y|x)] changes fast and the quadrature over t is coarse there.  New temperatures t in
(t_i, t_{i+1}) are placed as :func:`refine_ladder` places them, and rung t is estimated from
the draws of t_i with importance weights exp((t - t_i) log p(y|x)); no new sampling.  The new
rungs reuse their source rung's draws, so their errors are correlated with it: ``source`` says
which sampled rung each one came from (the quadrature then adds those errors linearly).
"""

from __future__ import annotations

import numpy as np

from .ladder import refine_ladder

__all__ = ["reweighted_ladder"]


def reweighted_ladder(temperatures, logliks, target_cess=0.9, max_new=None):
    """New temperatures, the sampled rung each is reweighted from, and its importance weights.

    Parameters
    ----------
    temperatures : array (w,)
        The sampled ladder, 0 first and 1 last.
    logliks : sequence of w arrays (m_i,)
        log p(y|x) at the draws of each rung.
    target_cess : float in (0, 1)
        Add rungs until every step from a sampled rung has at least this conditional ESS.
    max_new : int, optional
        At most this many new rungs (the worst gaps first); default 10 per sampled rung.

    Returns
    -------
    new : array (k,)
    source : int array (k,)
        Index of the sampled rung just below each new temperature.
    weights : list of k arrays
        exp((new_j - t_source) * (l - max l)) at the source rung's draws.

    Examples
    --------
    >>> import numpy as np
    >>> from pymc_cv.evidence.reweighting import reweighted_ladder
    >>> rng = np.random.default_rng(0)
    >>> lls = [rng.normal(-50, 10, 500), rng.normal(-10, 1, 500), rng.normal(-9, 1, 500)]
    >>> new, source, weights = reweighted_ladder([0.0, 0.5, 1.0], lls, max_new=4)
    >>> new.size, source.tolist(), len(weights[0]) == 500
    (4, [0, 0, 0, 0], True)
    """
    t = np.asarray(temperatures, dtype=float)
    if max_new is None:
        max_new = 10 * t.size
    new = refine_ladder(t, logliks, target_cess=target_cess, max_new=max_new)
    source = np.searchsorted(t, new, side="right") - 1
    weights = []
    for tj, i in zip(new, source):
        ll = np.asarray(logliks[i], dtype=float)
        weights.append(np.exp((tj - t[i]) * (ll - ll.max())))
    return new, source.astype(int), weights
