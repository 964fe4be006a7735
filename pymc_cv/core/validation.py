"""Input checks with messages that name the argument and say what to do."""

from __future__ import annotations

import numpy as np

__all__ = ["check_task", "check_chain", "check_B", "check_tune_points"]


def _as_float(name, a):
    try:
        arr = np.asarray(a, dtype=float)
    except (TypeError, ValueError):
        raise ValueError(f"`{name}` must be a numeric array; got {type(a).__name__}.") from None
    return arr


def _finite(name, arr, what):
    bad = ~np.isfinite(arr)
    if bad.any():
        rows = np.unique(np.nonzero(bad.reshape(arr.shape[0], -1))[0])
        raise ValueError(
            f"`{name}` has NaN or inf at {rows.size} draw(s) (first: {rows[:5].tolist()}). "
            f"{what} Remove those draws from all arrays (or fix them); "
            "they are never averaged in or dropped silently."
        )


def check_task(values, samples, scores, name=""):
    """Validate one task's arrays; returns values (n, k), samples (n, d), scores (n, d), 1-d flag."""
    sfx = f" (task {name})" if name != "" else ""
    values = _as_float("values" + sfx, values)
    samples = _as_float("samples" + sfx, samples)
    scores = _as_float("scores" + sfx, scores)
    one_d = values.ndim == 1
    if values.ndim not in (1, 2):
        raise ValueError(f"`values`{sfx} must have shape (n,) or (n, k); got {values.shape}.")
    if samples.ndim == 1:
        samples = samples[:, None]
    if scores.ndim == 1:
        scores = scores[:, None]
    if samples.ndim != 2 or scores.ndim != 2:
        raise ValueError(f"`samples` and `scores`{sfx} must have shape (n, d); got {samples.shape} and {scores.shape}.")
    n = values.shape[0]
    if samples.shape[0] != n or scores.shape[0] != n:
        raise ValueError(
            f"`values`, `samples` and `scores`{sfx} must have the same number of draws (first axis); "
            f"got {n}, {samples.shape[0]} and {scores.shape[0]}."
        )
    if samples.shape != scores.shape:
        raise ValueError(
            f"`scores`{sfx} must have the shape of `samples` (one gradient entry per parameter); "
            f"got {scores.shape} and {samples.shape}."
        )
    _finite("values" + sfx, values, "An integrand that is not finite has no expectation to estimate.")
    _finite("samples" + sfx, samples, "")
    _finite("scores" + sfx, scores, "Non-finite gradients usually mark divergent draws.")
    return (values[:, None] if one_d else values), samples, scores, one_d


def check_chain(chain, n):
    if chain is None:
        return None
    chain = np.asarray(chain)
    if chain.shape != (n,):
        raise ValueError(f"`chain` must hold one chain label per draw, shape ({n},); got {chain.shape}.")
    return chain


def check_B(B, T):
    B = _as_float("B", B)
    if B.shape != (T, T):
        raise ValueError(f"`B` must be a ({T}, {T}) matrix, one row/column per task; got {B.shape}.")
    if not np.all(np.isfinite(B)) or not np.allclose(B, B.T, rtol=1e-10, atol=1e-14):
        raise ValueError("`B` must be finite and symmetric; pass (B + B.T) / 2 or B='learn'.")
    eig = np.linalg.eigvalsh(B)
    if eig.min() < -1e-10 * max(abs(eig.max()), 1e-300) or eig.max() <= 0:
        raise ValueError(
            f"`B` must be positive semi-definite (smallest eigenvalue {eig.min():.3g}); "
            "use B='identity', B='learn', or a covariance matrix."
        )
    return B


def check_tune_points(max_tune_points):
    """``max_tune_points`` is "auto" or an integer of at least 10; returns it (an int if given one)."""
    if isinstance(max_tune_points, str):
        if max_tune_points == "auto":
            return max_tune_points
    elif int(max_tune_points) >= 10:
        return int(max_tune_points)
    raise ValueError(f"max_tune_points={max_tune_points!r}; use 'auto' or an integer >= 10.")
