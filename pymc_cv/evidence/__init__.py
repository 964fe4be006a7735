"""Model evidence on arrays: ladders, quadrature, rung moments with control variates, reweighting,
stepping stones, the thermodynamic-integration estimator, importance sampling from the posterior, and
bridge sampling from posterior draws.

Arrays in, arrays out: this layer imports the core and nothing that samples.  The drivers that
sample power posteriors are in :mod:`pymc_cv.pymc.evidence` and :mod:`pymc_cv.stan.evidence`.
"""

from .bridge import BridgeEstimate, BridgeProposal, bridge_evidence, bridge_from_arrays, fit_bridge_proposal
from .choice import Attempt, EvidenceResult, choose_evidence
from .importance import ImportanceEstimate, importance_evidence
from .ladder import conditional_ess, power_ladder, refine_ladder
from .posterior_draws import PosteriorEvidence, evidence_from_draws
from .quadrature import integrate, quadrature_error, quadrature_weights
from .result import TIResult
from .rung_moments import RungMoments, rung_moments
from .thermodynamic_integration import ti_from_arrays

__all__ = [
    "power_ladder", "conditional_ess", "refine_ladder", "integrate", "quadrature_error", "quadrature_weights",
    "TIResult", "RungMoments", "rung_moments", "ti_from_arrays", "ImportanceEstimate", "importance_evidence",
    "BridgeEstimate", "BridgeProposal", "bridge_evidence", "bridge_from_arrays", "fit_bridge_proposal",
    "PosteriorEvidence", "evidence_from_draws", "EvidenceResult", "Attempt", "choose_evidence",
]
