"""Which log evidence to report when several estimators were tried.

The drivers try the cheapest estimator first and the next only where the one before failed its checks:
with the user's posterior draws at hand, bridge sampling from them (:mod:`.posterior_draws`, no sampling)
and then thermodynamic integration; without them, TI (PyMC's SMC moving through the power posteriors
from the prior) and then bridge sampling from newly sampled posterior draws.  Rules:

- the first estimate that passes its checks is reported, with the notes of those before it;
- where none does, a flagged estimate: the one with the smaller se where two agree within ``AGREE``
  combined se, else the first one's; the notes of every attempt say why and what to do.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from .posterior_draws import AGREE

__all__ = ["EvidenceResult", "Attempt", "choose_evidence"]


class Attempt(NamedTuple):
    """One estimator tried: its name, its result (a :class:`~.posterior_draws.PosteriorEvidence` or a
    :class:`~.result.TIResult`; None where it raised) and, where it raised, why."""

    estimator: str
    result: object = None
    failure: str | None = None

    def said(self):
        if self.result is None:
            return f"{self.estimator} failed: {self.failure}"
        res = self.result
        verdict = "passed its checks" if res.reliable else "flagged: " + " ".join(res.notes)
        return f"{self.estimator} gave {res.log_evidence:.4f} +/- {res.se:.4f}, {verdict}"


@dataclass(frozen=True)
class EvidenceResult:
    """Log evidence by the estimator that passed its checks.

    Attributes
    ----------
    log_evidence, se : float
    reliable : bool
        False when no estimator passed its checks; ``notes`` say why and what to do.
    estimator : str
        The estimator reported.
    bridge : PosteriorEvidence or None
        Bridge sampling from posterior draws, with its checks, where it was run.
    ti : TIResult or None
        Thermodynamic integration, where it was run and did not raise.
    notes : tuple of str
    seconds : dict
        Wall time of sampling the posterior (when the call sampled it), bridge sampling and TI.
    """

    log_evidence: float
    se: float
    reliable: bool
    estimator: str
    bridge: object = None
    ti: object = None
    notes: tuple = ()
    seconds: dict = field(default_factory=dict, compare=False)

    def __repr__(self):
        lines = [f"EvidenceResult ({self.estimator})",
                 f"  log_evidence = {self.log_evidence:.6g} +/- {self.se:.3g}"
                 + ("" if self.reliable else "  (se unreliable)")]
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)


def choose_evidence(attempts, bridge=None, ti=None, seconds=None):
    """The :class:`EvidenceResult` of ``attempts`` (:class:`Attempt`, in the order tried); ``bridge`` and
    ``ti`` are kept in it as they are."""
    seconds = dict(seconds or {})
    attempts = list(attempts)
    for i, att in enumerate(attempts):
        if att.result is not None and att.result.reliable:
            res = att.result
            notes = tuple(a.said() for a in attempts[:i]) + ((tuple(res.notes) if i == 0 else
                                                              (att.said() + ", and is reported.",)))
            return EvidenceResult(res.log_evidence, res.se, True, att.estimator, bridge, ti, notes, seconds)
    notes = [a.said() for a in attempts]
    ran = [a for a in attempts if a.result is not None and np.isfinite(a.result.log_evidence)]
    if not ran:
        raise RuntimeError("no evidence estimator gave a number: " + " ".join(notes))
    pick = ran[0]
    if len(ran) >= 2:
        a, b = ran[0].result, ran[1].result
        z = (a.log_evidence - b.log_evidence) / np.hypot(a.se, b.se)
        if abs(z) <= AGREE:
            pick = ran[0] if a.se <= b.se else ran[1]
            notes.append(f"The two agree ({abs(z):.1f} combined se); {pick.estimator} (the smaller se) is reported, "
                         "flagged.")
        else:
            notes.append(f"They are {abs(z):.1f} combined se apart; {pick.estimator} is reported, flagged.")
    res = pick.result
    return EvidenceResult(res.log_evidence, res.se, False, pick.estimator, bridge, ti, tuple(notes), seconds)
