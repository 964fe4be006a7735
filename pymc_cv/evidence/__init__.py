"""Model evidence by thermodynamic integration, with control variates at every rung."""

from .ladder import conditional_ess, power_ladder, refine_ladder
from .quadrature import integrate, quadrature_error, quadrature_weights
from .result import TIResult
from .rung_moments import RungMoments, rung_moments
from .thermodynamic_integration import (
    thermodynamic_integration,
    ti_from_arrays,
    ti_from_draws,
    ti_from_population,
    ti_from_pystan,
)

__all__ = [
    "power_ladder", "conditional_ess", "refine_ladder", "integrate", "quadrature_error", "quadrature_weights",
    "TIResult", "RungMoments", "rung_moments", "thermodynamic_integration", "ti_from_arrays", "ti_from_draws",
    "ti_from_pystan", "ti_from_population",
]
