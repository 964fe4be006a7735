"""Input checks with messages that name the argument and say what to do."""

from __future__ import annotations

import numpy as np

__all__ = ["check_task", "check_chain", "check_B", "check_tune_points", "check_cv_options", "check_folds",
           "check_positive", "check_random_seed", "check_kernel"]


def _as_float(name, a):
    if np.iscomplexobj(a):
        raise ValueError(f"`{name}` is complex; estimate the real and imaginary parts as two real integrands "
                         "(np.real, np.imag): nothing is dropped silently.")
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


def check_folds(folds):
    """``folds`` is an integer of at least 2 (held-out blocks per chain)."""
    if isinstance(folds, (bool, np.bool_)) or not isinstance(folds, (int, np.integer)) or folds < 2:
        raise ValueError(f"folds={folds!r}; use an integer >= 2 (held-out blocks per chain, 10 by default).")
    return int(folds)


def check_random_seed(random_seed):
    """Anything ``numpy.random.default_rng`` takes: None, an int, a SeedSequence or a Generator."""
    if isinstance(random_seed, (str, bytes, float, bool, np.bool_)):
        raise ValueError(f"random_seed={random_seed!r}; use an int, None or a numpy Generator.")
    try:
        np.random.default_rng(random_seed)
    except (TypeError, ValueError):
        raise ValueError(f"random_seed={random_seed!r}; use an int, None or a numpy Generator.") from None
    return random_seed


def check_kernel(kernel, names):
    """A kernel name among ``names`` or a kernel object (with ``gram``)."""
    if isinstance(kernel, str) and kernel in names:
        return kernel
    if not isinstance(kernel, str) and hasattr(kernel, "gram"):
        return kernel
    raise ValueError(f"kernel={kernel!r}; use one of {sorted(names)} or a kernel object.")


def check_positive(name, value, integer=False, minimum=None):
    """A finite number > 0 (or >= ``minimum``), an integer if asked."""
    ok = isinstance(value, (int, np.integer)) if integer else isinstance(value, (int, float, np.number))
    ok = ok and not isinstance(value, (bool, np.bool_)) and np.isfinite(value)
    ok = ok and (value >= minimum if minimum is not None else value > 0)
    if not ok:
        what = "an integer" if integer else "a finite number"
        bound = f">= {minimum}" if minimum is not None else "> 0"
        raise ValueError(f"{name}={value!r}; use {what} {bound}.")
    return value


def _one_of(name, value, allowed):
    if not any(value is a or (type(value) is type(a) and value == a) for a in allowed):
        raise ValueError(f"{name}={value!r}; use one of {allowed}.")
    return value


def check_cv_options(n, *, chain, folds, nugget, max_tune_points, exact_max_n, kernel_max_dim, tune, ard,
                     poly_order):
    """Every option of ``cv_estimate`` checked in one place; returns them as a dict."""
    if n < 5:
        raise ValueError(f"cv_estimate needs at least 5 draws; got {n}.")
    return {
        "chain": check_chain(chain, n),
        "folds": check_folds(folds),
        "nugget": float(check_positive("nugget", nugget)),
        "max_tune_points": check_tune_points(max_tune_points),
        "exact_max_n": int(check_positive("exact_max_n", exact_max_n, integer=True, minimum=10)),
        "kernel_max_dim": int(check_positive("kernel_max_dim", kernel_max_dim, integer=True, minimum=1)),
        "tune": _one_of("tune", tune, ("ml", "cv", "none")),
        "ard": _one_of("ard", ard, (True, False, "auto")),
        "poly_order": _one_of("poly_order", poly_order, ("auto", 0, 1, 2)),
    }


def check_columns(name, columns, k):
    """None, or the distinct column indices ``columns`` of k integrands, as an int array."""
    if columns is None:
        return None
    arr = np.asarray(columns)
    if arr.ndim != 1 or arr.size == 0 or not np.issubdtype(arr.dtype, np.integer) or arr.min() < 0 or arr.max() >= k:
        raise ValueError(f"`{name}` must be a non-empty list of column indices of `values` (0 to {k - 1}); "
                         f"got {columns!r}.")
    return np.unique(arr)
