"""Are the draws the points the sampler visited, under the model the scores come from?

A sampler records the log density of every draw it keeps (PyMC's and NumPyro's ``lp``, nutpie's
``logp``, Stan's ``lp__``).  The same model's log density evaluated at the draws handed to
pymc-cv must equal it up to one additive constant per chain (Stan drops constants; nothing else
may differ).  Draws rewritten after sampling (Bambi's uncentred intercept), another prior under
the same names, other data, or a model that only shares the variable names break that equality,
and every control variate built on them would be confidently wrong.  Numpy only.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["DensityCheck", "check_recorded_logp", "DrawsModelMismatchError"]

# relative to the size of the log density: float64 sums of thousands of terms and a transform's
# round trip (constrained draws back to the unconstrained space) stay far below this, while any
# change of the density or of the draws moves it by a sizeable fraction of a nat
_RTOL = {8: 1e-7, 4: 1e-3}


class DrawsModelMismatchError(ValueError):
    """The draws and the model are not the pair that was sampled."""


@dataclass(frozen=True)
class DensityCheck:
    """``gap`` (chain, draw): model log density minus the recorded one, less each chain's median;
    ``tolerance``: the largest |gap| taken as round-off; ``bad``: how many draws exceed it."""

    gap: np.ndarray
    tolerance: float
    bad: int

    @property
    def ok(self):
        return self.bad == 0

    def evidence(self):
        """A sentence with the numbers: how many draws differ and by how much."""
        n = self.gap.size
        worst = float(np.max(np.abs(self.gap)))
        return (f"at {self.bad} of {n} draws the model's log density differs from the one the sampler "
                f"recorded by more than a constant per chain (largest difference {worst:.3g} nats, "
                f"round-off allows {self.tolerance:.2g})")


def check_recorded_logp(model_logp, recorded_logp, itemsize=8):
    """Compare the model's log density at the draws with the sampler's record, per chain.

    Parameters
    ----------
    model_logp, recorded_logp : arrays (chain, draw)
    itemsize : int
        Bytes of the floating-point type the model computes in (8, or 4 for float32 models).

    Returns
    -------
    DensityCheck

    Examples
    --------
    >>> import numpy as np
    >>> lp = np.random.default_rng(0).normal(-50, 2, size=(2, 100))
    >>> check_recorded_logp(lp + 3.0, lp).ok            # a constant offset: Stan's dropped constants
    True
    >>> check_recorded_logp(lp + 0.01 * lp ** 2, lp).bad > 0
    True
    """
    model_logp = np.asarray(model_logp, dtype=float)
    recorded_logp = np.asarray(recorded_logp, dtype=float)
    if model_logp.shape != recorded_logp.shape or model_logp.ndim != 2:
        raise ValueError(f"model and recorded log densities must both be (chain, draw); got {model_logp.shape} "
                         f"and {recorded_logp.shape}.")
    diff = model_logp - recorded_logp
    gap = diff - np.nanmedian(diff, axis=1, keepdims=True)
    scale = 1.0 + np.nanmax(np.abs(recorded_logp))
    tolerance = _RTOL.get(int(itemsize), 1e-3) * scale
    bad = int(np.sum(~(np.abs(gap) <= tolerance)))  # NaN counts as a mismatch
    return DensityCheck(gap, float(tolerance), bad)
