"""The result of thermodynamic integration."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .importance import ImportanceEstimate
from .plot import plot_ti_curve
from .rung_moments import RungMoments
from .stepping_stone import SteppingStone

__all__ = ["TIResult"]


@dataclass
class TIResult:
    """Log evidence from thermodynamic integration.

    Attributes
    ----------
    log_evidence : float
        The estimate of log p(y).
    se : float
        Its standard error: the sampling se of the per-rung estimates and the estimated
        quadrature (temperature discretisation) error, added in quadrature.
    sampling_se, quadrature_error : float
        The two parts of ``se``.
    mc_log_evidence, mc_se : float
        Plain TI (per-rung averages, same rule, same draws) and its se, for comparison.
    temperatures : array (w,)
        The rungs TI integrates over (with ``refine=``, the refined ladder); when the first rungs
        are crossed by stepping stones, the ladder from the first rung after them.
    stepping_stone : SteppingStone or None
        log Z at the first TI rung by stepping stones over the rungs below it, where
        E_t[log p(y|x)] is singular at t = 0 (``notes`` say so); None when TI covers [0, 1].
    moments : RungMoments
        Per-rung means and variances of log p(y|x), with and without CVs, and their se.
    method, rule : str
        The per-rung estimator and the quadrature rule; ``estimator`` says both in words.
    seconds : dict
        Wall time of sampling, of the per-draw terms and of the estimation.
    reliable : bool
        False when the se may be too small: too few rungs for a quadrature error, chains that
        disagree at some rung (R-hat), scores that fail the Stein check, a per-rung estimate
        flagged unreliable, or CV estimates at neighbouring rungs that all moved the same way from
        the plain averages beyond chance (draws that miss part of the power posterior); ``notes``
        say which.
    notes : list of str
    importance : ImportanceEstimate or None
        log p(y) by importance sampling from a Student-t fitted to the posterior draws, where the
        sampler gives the posterior and the log joint density (``thermodynamic_integration`` with
        ``sampler="smc"``); ``log_evidence`` and ``se`` then weigh it against TI (``notes`` say how).
    ti_log_evidence, ti_se : float
        TI's own estimate and se (what ``ti_from_arrays(**res.draws)`` repeats), equal to
        ``log_evidence`` and ``se`` unless importance sampling was weighed in.

    Examples
    --------
    >>> import numpy as np, pymc_cv
    >>> from pymc_cv.evidence import power_ladder
    >>> rng = np.random.default_rng(0)
    >>> t = power_ladder(21)     # x ~ N(0, 1), y = 0 ~ N(x, 1): p_t(x) = N(0, 1 / (1 + t))
    >>> xs = [rng.normal(0, (1 + ti) ** -0.5, size=(100, 1)) for ti in t]
    >>> ll = [-0.5 * np.log(2 * np.pi) - 0.5 * x[:, 0] ** 2 for x in xs]
    >>> res = pymc_cv.ti_from_arrays(t, ll, xs, [-x for x in xs], [-x for x in xs], method="cti")
    >>> exact = -0.5 * np.log(2 * np.pi * 2)
    >>> bool(abs(res.log_evidence - exact) < 3 * res.se), bool(res.se < res.mc_se)
    (True, True)
    """

    log_evidence: float
    se: float
    sampling_se: float
    quadrature_error: float
    mc_log_evidence: float
    mc_se: float
    temperatures: np.ndarray
    moments: RungMoments
    method: str
    rule: str
    estimator: str
    seconds: dict = field(default_factory=dict)
    notes: list = field(default_factory=list)
    reliable: bool = True
    draws: dict = field(default_factory=dict, repr=False)
    stepping_stone: SteppingStone | None = None
    importance: ImportanceEstimate | None = None
    ti_log_evidence: float | None = None
    ti_se: float | None = None

    def __post_init__(self):
        if self.ti_log_evidence is None:
            self.ti_log_evidence, self.ti_se = self.log_evidence, self.se

    def plot(self, ax=None, **kwargs):
        """E_t[log p(y|x)] against t, MC and CV, with error bars; see :func:`pymc_cv.plots.plot_ti_curve`."""
        return plot_ti_curve(self, ax=ax, **kwargs)

    def __repr__(self):
        lines = [
            f"TIResult ({self.estimator}, {self.temperatures.size} rungs)",
            f"  log_evidence = {self.log_evidence:.6g} +/- {self.se:.3g}"
            f"  (sampling {self.sampling_se:.3g}, quadrature {self.quadrature_error:.3g})"
            + ("" if self.reliable else "  (se unreliable)"),
            f"  plain TI     = {self.mc_log_evidence:.6g} +/- {self.mc_se:.3g}",
        ]
        if self.importance is not None:
            imp = self.importance
            lines.append(f"  importance   = {imp.log_evidence:.6g} +/- {imp.se:.3g}  (k-hat {imp.khat:.2f}"
                         + ("" if imp.usable else ", not used") + ")")
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)
