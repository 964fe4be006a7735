"""Per-rung moments fitted group by group as the rungs arrive, while later rungs are still sampled.

When the rungs of a ladder are sampled on a cluster's workers, this process would otherwise wait
for the last rung before fitting any CV.  A vv-CV group (``group_size`` consecutive rungs) or a
single rung for the per-rung methods depends only on its own rungs and on the same seed, so it can
be fitted as soon as they are in; the numbers are the ones :func:`rung_moments` gives for the
whole ladder.
"""

from __future__ import annotations

import numpy as np

from .rung_moments import concat_moments, rung_moments

__all__ = ["GroupFitter"]


class GroupFitter:
    """Collects rungs (``add``) and fits each group once all its rungs are in (``moments``: all).

    Parameters
    ----------
    temperatures : array (w,)
    method, group_size, B, random_seed, options
        As :func:`rung_moments` takes them.

    Examples
    --------
    >>> import numpy as np
    >>> from pymc_cv.evidence.pipeline import GroupFitter
    >>> rng = np.random.default_rng(0)
    >>> t = np.array([0.0, 0.5, 1.0])
    >>> xs = [rng.normal(0, (1 + ti) ** -0.5, size=(60, 1)) for ti in t]
    >>> fitter = GroupFitter(t, "cti", 4, "learn", 0, {})
    >>> for i in (2, 0, 1):                 # in the order the rungs finish
    ...     fitter.add(i, (-0.5 * xs[i][:, 0] ** 2, xs[i], -xs[i], -xs[i], None))
    >>> np.allclose(fitter.moments().mean, -0.5 / (1 + t))
    True
    """

    def __init__(self, temperatures, method, group_size, B, random_seed, options):
        self.t = np.asarray(temperatures, dtype=float)
        self.method, self.B, self.seed, self.options = method, B, random_seed, dict(options)
        size = int(group_size) if method == "vvcv" else 1
        self.groups = [list(range(s, min(s + size, self.t.size))) for s in range(0, self.t.size, size)]
        self.rungs, self.done = {}, {}

    def add(self, i, arrays):
        """Rung ``i``'s arrays (loglik, samples, grad_loglik, grad_logprior, chain); fits what became complete."""
        self.rungs[i] = arrays
        for g, idx in enumerate(self.groups):
            if g not in self.done and all(j in self.rungs for j in idx):
                self.done[g] = self._fit(idx)

    def _fit(self, idx):
        ll, X, gl, gp, ch = map(list, zip(*(self.rungs[j] for j in idx)))
        return rung_moments(self.t[idx], ll, X, gl, gp, chain=None if any(c is None for c in ch) else ch,
                            method=self.method, group_size=len(idx), B=self.B, random_seed=self.seed,
                            first_rung=idx[0], **self.options)

    def moments(self):
        """The moments of every rung, in ladder order (fitting any group not yet fitted)."""
        missing = sorted(set(range(self.t.size)) - set(self.rungs))
        if missing:
            raise RuntimeError(f"rungs {missing} never arrived; cannot assemble the moments.")
        return concat_moments([self.done[g] if g in self.done else self._fit(idx)
                               for g, idx in enumerate(self.groups)])
