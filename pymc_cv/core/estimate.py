"""``cv_estimate``: control variates for the expectations of one or more integrands under one target.

Every method is judged on held-out draws.  For independent draws these are
exact leave-one-out residuals (closed form for least squares and for the
GLS kernel fit); for MCMC draws (``chain`` given) the fit is refitted on K-1
of K contiguous blocks of every chain and evaluated on the held-out block,
so autocorrelated neighbours cannot leak into the fit.  Held-out residuals
give the variance reduction over MC and drive ``method="auto"``; the
reported se is sd(held-out residuals) / sqrt(ESS) for ZV-CVs and the rule
of ``uncertainty`` for kernel CVs.
"""

from __future__ import annotations

import numpy as np

from .kernel_cv import design_matrix, fit_kernel_cv
from .kernels import make_kernel
from .linalg import loo_residuals, restricted_loglik
from .polynomial import n_polynomial_features, stein_polynomial_features
from .result import CVResult
from .standard_errors import KHAT_THRESHOLD, block_folds, mcse_mean
from .uncertainty import combine_se, reliability, roundoff_floor
from .standardize import Standardizer
from .threads import single_threaded_when_small
from .tuning import subsample_per_task, tune_marginal_likelihood
from .validation import check_chain, check_task, check_tune_points
from .zero_variance import choose_penalty, fit_zero_variance, zv_loo_residuals

__all__ = ["cv_estimate", "METHODS"]

METHODS = ("mc", "zv1", "zv2", "cf", "secf", "auto")


def _zv_method(order, penalty):
    def fit(X, S, y):
        pen = choose_penalty(len(y), n_polynomial_features(X.shape[1], order), penalty)
        b0, gamma = fit_zero_variance(X, S, y, order, pen)

        def zero_mean_part(Xt, St):
            return stein_polynomial_features(Xt, St, order) @ gamma

        return b0, zero_mean_part, {"order": order, "penalty": pen}, None

    def loo(X, S, y, info):
        if info["penalty"] is None:
            r = zv_loo_residuals(X, S, y, order)
            return r, r
        return None

    return fit, loo


def _secf_order(n, d, poly_order):
    if poly_order != "auto":
        return int(poly_order)
    # leave at least half the draws for the kernel part
    for order in (2, 1):
        if 1 + n_polynomial_features(d, order) <= n // 3:
            return order
    return 0


def _kernel_method(semi_exact, opts, rng):
    def fit(X, S, y, hyper=None):
        n, d = X.shape
        order = _secf_order(n, d, opts["poly_order"]) if semi_exact else 0
        tau = np.zeros(n, dtype=int)
        B = np.ones((1, 1))
        if hyper is None:
            kernel = make_kernel(opts["kernel"], d, X, ard=opts["ard"])
            idx = subsample_per_task(tau, 1, opts["max_tune_points"], rng)
            hyper = _tune(kernel, X[idx], S[idx], y[idx], tau[idx], B, order, opts)
        kernel, nugget = hyper
        model = fit_kernel_cv(X, S, y, tau, 1, kernel, B, nugget, order)

        def zero_mean_part(Xt, St):
            return model.zero_mean_part(Xt, St, np.zeros(Xt.shape[0], dtype=int))

        def predictive_sd(Xt, St):
            return model.predictive_sd(Xt, St, np.zeros(Xt.shape[0], dtype=int))

        info = {"kernel": kernel, "nugget": nugget, "poly_order": order, "hyper": hyper,
                "se_model": float(model.intercept_se[0]), "model": model}
        return float(model.intercepts[0]), zero_mean_part, info, predictive_sd

    def loo(X, S, y, info):
        return info["model"].loo_residuals(y)

    return fit, loo


def _tune(kernel, X, S, y, tau, B, order, opts):
    if opts["tune"] == "none":
        return kernel, opts["nugget"]
    if opts["tune"] == "ml":
        h = tune_marginal_likelihood(kernel, X, S, y, tau, B.shape[0], B, order, nugget=opts["nugget"])
        return h.kernel, h.nugget
    if opts["tune"] == "cv":
        return _tune_loo_grid(kernel, X, S, y, tau, B, order, opts)
    raise ValueError(f"tune={opts['tune']!r}; use 'ml' (marginal likelihood), 'cv' or 'none'.")


def _tune_loo_grid(kernel, X, S, y, tau, B, order, opts):
    """Grid search minimising the exact leave-one-out squared error (ZVCV's CF_crossval, n folds)."""
    P = design_matrix(X, S, tau, B.shape[0], order)
    base = kernel.log_params()
    best = (np.inf, kernel, opts["nugget"])
    for mult in (0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0) if kernel.n_params else (1.0,):
        kern = kernel.with_log_params(base + np.log(mult))
        K0 = kern.gram(X, S)
        for nug in (1e-8, 1e-6, 1e-4, 1e-2):
            C = K0.copy()
            C[np.diag_indices_from(C)] += nug * np.mean(np.diag(K0))
            try:
                _, _, Q = restricted_loglik(C, P, y)
            except (ValueError, np.linalg.LinAlgError):
                continue
            err = float(np.mean(loo_residuals(Q, y)[0] ** 2))
            if err < best[0]:
                best = (err, kern, nug)
    return best[1], best[2]


def _heldout_residuals(fit, loo, X, S, y, chain, folds, info):
    """Residuals f - g on draws the fit did not see (see module docstring), and the same
    standardised by the fit's predictive sd where it has one."""
    if chain is None and loo is not None:
        r = loo(X, S, y, info)
        if r is not None:
            return r
    k = int(min(folds, max(2, X.shape[0] // 4)))
    labels = block_folds(X.shape[0], chain, k)
    resid = np.empty_like(y)
    z = np.empty_like(y)
    for f in range(k):
        test = labels == f
        train = ~test
        kwargs = {"hyper": info["hyper"]} if "hyper" in info else {}
        _, g, _, sd = fit(X[train], S[train], y[train], **kwargs)
        resid[test] = y[test] - g(X[test], S[test])
        z[test] = resid[test] / sd(X[test], S[test]) if sd is not None else resid[test]
    resid -= resid.mean()
    return resid, z


@single_threaded_when_small(lambda values, *a, **k: np.shape(values)[0])
def cv_estimate(
    values,
    samples,
    scores,
    method="auto",
    *,
    chain=None,
    kernel="se",
    ard=True,
    tune="ml",
    nugget=1e-4,
    poly_order="auto",
    zv_penalty="auto",
    standardize=True,
    folds=10,
    max_tune_points="auto",
    random_seed=0,
):
    """Estimate E_pi[f] with Stein control variates from draws, integrand values and scores.

    Parameters
    ----------
    values : array (n,) or (n, k)
        Integrand values f(x_i) at each draw (k integrands at once).
    samples : array (n, d)
        The draws, on the unconstrained space where the scores are taken.
    scores : array (n, d)
        grad_x log pi(x_i) at each draw (log density up to a constant, Jacobian included).
    method : {"auto", "mc", "zv1", "zv2", "cf", "secf"}
        ``"zv1"``/``"zv2"``: zero-variance polynomial CVs; ``"cf"``: control functional
        (kernel CV); ``"secf"``: semi-exact control functional (polynomial + kernel);
        ``"auto"``: the method with the smallest held-out standard error, MC included.
    chain : array (n,), optional
        Chain label of each draw for MCMC output; draws must be in sampling order
        within a chain.  Without it the draws are treated as independent.
    kernel : {"se", "imq", "precond_se", "polynomial"} or kernel object
        Base kernel of the Stein kernel (squared exponential by default).
    ard : bool
        One lengthscale per dimension (True) or a single one.
    tune : {"ml", "cv", "none"}
        Kernel hyperparameters by restricted marginal likelihood with exact gradients
        (L-BFGS), by a leave-one-out grid search, or not at all (median heuristic).
    nugget : float
        Regulariser relative to the mean diagonal of the Stein kernel (a start when tuned).
    poly_order : {"auto", 0, 1, 2}
        Polynomial order of the semi-exact CF.
    zv_penalty : {"auto", None, "ridge", "lasso"}
        Least squares or cross-validated ridge/lasso for ZV-CVs ("auto": lasso when there
        are fewer than two draws per coefficient).
    standardize : bool
        Work in z = (x - mean) / sd with scores sd * s (strongly recommended when
        parameters differ in scale).
    folds : int
        Number of contiguous blocks per chain for cross-fitting MCMC draws.
    max_tune_points : int or "auto"
        Hyperparameters are tuned on a random subset of at most this many draws; "auto": 30%
        of them, at least 150 and at most 400.
    random_seed : int

    Returns
    -------
    CVResult

    Examples
    --------
    >>> import numpy as np
    >>> import pymc_cv
    >>> rng = np.random.default_rng(1)
    >>> x = rng.normal(size=(200, 2))           # draws from N(0, I)
    >>> f = x[:, 0] ** 2 + x[:, 0] * x[:, 1]    # E[f] = 1
    >>> res = pymc_cv.cv_estimate(f, x, -x, method="zv2")
    >>> round(float(res.estimate), 8)
    1.0
    """
    if method not in METHODS:
        raise ValueError(f"method={method!r} is unknown; use one of {METHODS}.")
    Y, X, S, one_d = check_task(values, samples, scores)
    n, d = X.shape
    chain = check_chain(chain, n)
    if n < 5:
        raise ValueError(f"cv_estimate needs at least 5 draws; got {n}.")
    max_tune_points = check_tune_points(max_tune_points)
    rng = np.random.default_rng(random_seed)
    opts = dict(kernel=kernel, ard=ard, tune=tune, nugget=nugget, poly_order=poly_order,
                max_tune_points=max_tune_points)
    std = Standardizer.fit([X]) if standardize else Standardizer.identity(d)
    Xs, Ss = std.transform(X, S)

    builders = {
        "zv1": lambda: _zv_method(1, zv_penalty),
        "zv2": lambda: _zv_method(2, zv_penalty),
        "cf": lambda: _kernel_method(False, opts, rng),
        "secf": lambda: _kernel_method(True, opts, rng),
    }
    if method == "auto":
        candidates = ["zv1", "cf", "secf"]
        if n > 2 * (1 + n_polynomial_features(d, 2)):
            candidates.insert(1, "zv2")
    else:
        candidates = [] if method == "mc" else [method]

    out = {k: [] for k in ("est", "se", "mc", "mcse", "meth", "vr", "ok", "khat", "hyper", "resid")}
    notes = []
    for j in range(Y.shape[1]):
        y_raw = Y[:, j]
        mc, mcse = float(np.mean(y_raw)), mcse_mean(y_raw, chain)
        loc, scale = mc, float(np.std(y_raw))
        best = ("mc", mc, mcse, mcse, True, np.nan, None, y_raw - mc)
        if scale == 0.0:
            candidates_j = []  # a constant integrand is known exactly
            best = ("mc", mc, roundoff_floor(y_raw), 0.0, True, np.nan, None, y_raw - mc)
        else:
            candidates_j = candidates
        y = (y_raw - loc) / scale if scale > 0 else y_raw
        tried = []
        for name in candidates_j:
            fit, loo = builders[name]()
            try:
                est, _, info, _ = fit(Xs, Ss, y)
                resid, z = _heldout_residuals(fit, loo, Xs, Ss, y, chain, folds, info)
            except ValueError as err:
                if method != "auto":
                    raise
                notes.append(f"integrand {j}: {name} skipped ({err})")
                continue
            se_held = mcse_mean(resid * scale, chain)
            se = max(combine_se(info.get("se_model", np.nan) * scale, se_held, chain), roundoff_floor(y_raw))
            reliable, khat = reliability(z)
            tried.append((name, loc + scale * est, se, se_held, reliable, khat, info, (resid - resid.mean()) * scale))
        if tried:
            # methods are compared on held-out draws, the only yardstick they share
            chosen = min(tried, key=lambda t: t[3]) if method == "auto" else tried[0]
            if method != "auto" or chosen[3] < mcse:
                best = chosen
            elif method == "auto":
                notes.append(f"integrand {j}: no control variate beat plain MC on held-out draws; using MC.")
        name, est, se, se_held, reliable, khat, info, heldout = best
        vr = (mcse / se_held) ** 2 if se_held > 0 else np.inf
        if method not in ("auto", "mc") and vr <= 1.0:
            notes.append(f"integrand {j}: {name} did not beat plain MC on held-out draws "
                         f"(variance reduction {vr:.2f}); prefer method='auto' or 'mc'.")
        if not reliable:
            notes.append(f"integrand {j}: held-out residuals are heavy-tailed (Pareto k-hat "
                         f"{khat:.2f} > {KHAT_THRESHOLD}); the se may be too small.")
        for key, val in zip(("est", "se", "mc", "mcse", "meth", "vr", "ok", "khat", "hyper", "resid"),
                            (est, se, mc, mcse, name, vr, reliable, khat, info, heldout)):
            out[key].append(val)

    def arr(key, dtype=float):
        a = np.asarray(out[key], dtype=dtype)
        return a[0] if one_d else a

    return CVResult(
        estimate=arr("est"), se=arr("se"), mc_estimate=arr("mc"), mc_se=arr("mcse"),
        method=arr("meth", object), variance_reduction=arr("vr"), se_reliable=arr("ok", bool),
        khat=arr("khat"), hyperparameters=out["hyper"], notes=notes,
        values=[Y[:, j].copy() for j in range(Y.shape[1])], heldout_residuals=out["resid"],
    )
