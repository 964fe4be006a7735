"""``cv_estimate``: control variates for the expectations of k integrands under one target.

The k integrands share the draws and scores, so the work is shared too:

1. zero-variance CVs (ZV-1, ZV-2): one least-squares fit for all integrands;
2. kernel CVs (CF, SEMI-exact CF): hyperparameters tuned by REML summed over (up to 20 of) the
   integrands, on a subset of the draws; one factorisation of the kernel matrix serves all
   integrands: a low-rank factor where one equals the matrix to a tenth of the nugget (few
   dimensions: ``low_rank``, O(N M^2)), else the exact N x N Cholesky up to ``exact_max_n`` draws,
   else inducing points (``nystrom``), their number chosen by the held-out error;
3. every candidate's held-out residuals come in closed form from its one fit (``heldout``), and
   ``finalize`` picks per integrand, reports the se and says when no CV helped.

Under ``method="auto"`` kernels are fitted only for integrands that ZV-CVs did not already make
exact, and not at all above ``kernel_max_dim`` parameters (said in the notes).  Above ``2 * FIT_DRAWS``
draws, ``"auto"`` and ``"zv"`` fit on one draw in t of each chain and evaluate the fitted control variates
at all the draws.
"""

from __future__ import annotations

import dataclasses
import warnings
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from ..cluster import check_client
from . import pipeline
from .finalize import Candidate
from .heldout import fold_labels, repeated_draws
from .kernel_cv import design_matrix, fit_exact_heldout, low_rank_factor
from .kernels import KERNEL_NAMES, make_kernel
from .linalg import loo_residuals, restricted_loglik
from .local_zv import LocalCoordinates, local_zero_variance_candidates
from .nystrom import ACCURATE_ENOUGH, MAX_INDUCING, choose_inducing
from .polynomial import n_polynomial_features
from .problem import HeldoutProblem, KernelSpec
from .standardize import Standardizer
from .threads import map_small, single_threaded_when_small
from .tuning import subsample_per_task, tune_marginal_likelihood, tune_points
from .validation import check_columns, check_cv_options, check_kernel, check_random_seed, check_task
from .zero_variance import basis_name, choose_penalty, least_squares_factor, zero_variance_candidate

__all__ = ["cv_estimate", "METHODS"]

METHODS = ("mc", "zv1", "zv2", "zv2diag", "zv3", "zv", "cf", "secf", "auto")
_MAX_TUNE_COLUMNS = 20
# held-out residual variance below this share of var(f): the integrand is already exact
_EXACT = 1e-20
# above twice this many draws "auto" and "zv" fit on every t-th draw, about this many, and evaluate the
# control variates at all of them: the fits cost O(draws) with large constants (kernel features,
# polynomial bases, held-out refits) while their accuracy is set by the basis, not the draws.
FIT_DRAWS = 20_000
_PREDICT_ROWS = 20_000


@dataclass(frozen=True)
class CVSettings:
    """The options of :func:`cv_estimate`, checked once (``validation.check_cv_options``)."""

    kernel: object
    ard: object
    tune: str
    nugget: float
    poly_order: object
    zv_penalty: object
    folds: int
    max_tune_points: object
    exact_max_n: int
    kernel_max_dim: int
    tune_columns: np.ndarray | None
    random_seed: object
    client: object
    return_fit: bool


class StandardisedDraws(NamedTuple):
    """The draws, scores and integrand values in standardised units, with the draws' chain labels and
    ``heldout.repeated_draws`` of the draws (None without repeats)."""

    X: np.ndarray
    S: np.ndarray
    Y: np.ndarray
    chain: np.ndarray | None
    repeats: tuple | None


def _secf_order(n, d, poly_order):
    if poly_order != "auto":
        return int(poly_order)
    # leave at least two thirds of the draws for the kernel part
    for order in (2, 1):
        if 1 + n_polynomial_features(d, order) <= n // 3:
            return order
    return 0


def _tune(kernel, X, S, Y, order, opts):
    tau, B = np.zeros(X.shape[0], dtype=int), np.ones((1, 1))
    if opts.tune == "none":
        return kernel, opts.nugget
    if opts.tune == "ml":
        h = tune_marginal_likelihood(kernel, X, S, Y, tau, 1, B, order, nugget=opts.nugget)
        return h.kernel, h.nugget
    return _tune_loo_grid(kernel, X, S, Y, tau, B, order, opts)


def _tune_loo_grid(kernel, X, S, Y, tau, B, order, opts):
    """Grid search minimising the exact leave-one-out squared error (ZVCV's CF_crossval, n folds)."""
    P = design_matrix(X, S, tau, 1, order)
    base = kernel.log_params()
    best = (np.inf, kernel, opts.nugget)
    for mult in (0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0) if kernel.n_params else (1.0,):
        kern = kernel.with_log_params(base + np.log(mult))
        K0 = kern.gram(X, S)
        for nug in (1e-8, 1e-6, 1e-4, 1e-2):
            C = K0.copy()
            C[np.diag_indices_from(C)] += nug * np.mean(np.diag(K0))
            try:
                _, _, Q = restricted_loglik(C, P, Y)
            except (ValueError, np.linalg.LinAlgError):
                continue
            err = float(np.mean(loo_residuals(Q, Y)[0] ** 2))
            if err < best[0]:
                best = (err, kern, nug)
    return best[1], best[2]


def _kernel_candidates(names, draws, cols, opts, rng, notes):
    """CF and/or SECF candidates for the columns ``cols`` of the :class:`StandardisedDraws` ``draws``.

    Repeated draws (``draws.repeats``) are one point of the kernel fit with nugget / multiplicity
    (the same GLS fit as with every copy, better conditioned and cheaper), in one held-out fold, so
    that no copy of a held-out draw stays in the training set.
    """
    X, S, Y, chain, rep = draws
    labels = fold_labels(X.shape[0], chain, opts.folds, first=None if rep is None else rep[0])
    if rep is not None and rep[1].size <= opts.exact_max_n:
        _, unique, inverse, counts = rep
        problem = HeldoutProblem(X[unique], S[unique], Y[unique], np.zeros(unique.size, dtype=int), 1,
                                 labels[unique])
        out = _kernel_fits(names, problem, cols, opts, rng, notes, weights=counts)
        for cand in out:
            cand.resid, cand.z = cand.resid[inverse], cand.z[inverse]
            cand.influence = cand.influence[inverse] / counts[inverse]
            cand.labels = labels
        return out
    return _kernel_fits(names, HeldoutProblem(X, S, Y, np.zeros(X.shape[0], dtype=int), 1, labels), cols, opts, rng,
                        notes)


def _kernel_fits(names, problem, cols, opts, rng, notes, weights=None):
    """The CF and SECF of ``names``, each with a kernel tuned for it, on the columns ``cols``."""
    X, S, Y = problem.X, problem.S, problem.Y
    n, d = X.shape
    order = _secf_order(n, d, opts.poly_order) if "secf" in names else 0
    orders = ([0] if "cf" in names else []) + ([order] if "secf" in names and order > 0 else [])
    if not orders:  # SECF without room for polynomials is the CF
        orders = [0]
    n_tune = tune_points(opts.max_tune_points, n, d)
    idx = subsample_per_task(np.zeros(n, dtype=int), 1, n_tune, rng)
    pool = cols if opts.tune_columns is None else np.intersect1d(cols, opts.tune_columns)
    pool = pool if pool.size else cols
    tcols = pool[np.unique(np.linspace(0, pool.size - 1, min(pool.size, _MAX_TUNE_COLUMNS)).astype(int))]
    # CF and SECF tuned each for itself: a kernel tuned with the polynomials left the CF several
    # times worse than tuned alone (the polynomials explain what the kernel must otherwise)
    # both designs start from the same kernel (its median heuristic is a sort of half a million distances)
    start = make_kernel(opts.kernel, d, X, ard=opts.ard if opts.ard != "auto" else d <= 20)
    Xt, St, Yt = X[idx], S[idx], Y[np.ix_(idx, tcols)]

    def tune_design(o):
        tune_order = o if opts.poly_order != "auto" else min(o, _secf_order(n_tune, d, "auto"))
        kernel, nugget = _tune(start, Xt, St, Yt, tune_order, opts)
        return KernelSpec(kernel, np.ones((1, 1)), nugget, [o]), tune_order

    # REML tuning runs on one BLAS thread however many draws are fitted: side by side the same numbers
    tuned = map_small(tune_design, orders, n_tune) if opts.tune == "ml" else [tune_design(o) for o in orders]
    fitted = problem._replace(Y=Y[:, cols])
    factors = [_TRY] * len(tuned)
    if len(tuned) == 2 and n >= _SHARE_MIN_N:
        tuning = (X[idx], S[idx], Y[np.ix_(idx, tcols)], Y[np.ix_(idx, cols)])
        tuned, factors = _designs_and_factors(tuned, fitted, tuning, orders, opts, rng, notes, weights)
    if len(tuned) == 2 and n > opts.exact_max_n and factors[1] is None:  # no factor: a ladder each
        return _accurate_design_first(tuned, factors, fitted, cols, opts, rng, notes, weights)
    out = []
    for (spec, _), factor in zip(tuned, factors):
        out += _fit_with(spec, fitted, cols, opts, rng, notes, weights, factor)
    return out


def _accurate_design_first(tuned, factors, fitted, cols, opts, rng, notes, weights):
    """The CF's and the SECF's fits above ``exact_max_n`` draws, the SECF's first: where its inducing-point
    ladder ends accurate enough on every integrand (``nystrom.ACCURATE_ENOUGH``), the CF's ladder is not
    climbed (regression, d = 11, 4 x 100,000 draws: two ladders of 250-312 inducing draws, 41 s)."""
    secf = _fit_with(tuned[1][0], fitted, cols, opts, rng, notes, weights, factors[1])
    if secf and all(c.info.get("accurate") for c in secf):
        notes.append("CF not fitted: the SECF's held-out errors were already within "
                     f"{ACCURATE_ENOUGH:g} of every integrand's variance.")
        return secf
    return _fit_with(tuned[0][0], fitted, cols, opts, rng, notes, weights, factors[0]) + secf


def _designs_and_factors(tuned, fitted, tuning, orders, opts, rng, notes, weights):
    """The designs of ``tuned`` (the CF's and the SECF's specs, each with the order it was tuned at)
    worth a fit of all the draws, each with its kernel matrix's low-rank factor (None: none; ``_TRY``:
    not looked for yet).  ``tuning``: the tuning draws X, S and their integrands, tuned and all."""
    Xt, St, Yt_tuned, Yt = tuning
    # where the two designs still take two fits, judged only where the tuning draws carry the SECF's own
    # polynomials (d = 20, 4,000 draws: a quadratic SECF judged by a linear one on 400 draws lost, and
    # doubled the error ratio when dropped)
    judged = tuned[1][1] == tuned[1][0].orders[0]
    design_notes = []
    kept = _designs_worth_fitting(tuned, Xt, St, Yt, design_notes) if judged else tuned
    if len(kept) == 1 and kept[0] is tuned[0]:
        # the CF alone on its own factor: the SECF's factor is not looked for (posteriordb's mesquite and
        # sblrc at 4,000 draws: 0.13 s and 0.06 s of a 0.5-0.9 s summary)
        factor = low_rank_factor(fitted, _per_point(tuned[0][0], weights), opts.exact_max_n, rng,
                                 max_columns=MAX_INDUCING)
        if factor is not None:
            notes += design_notes
            return kept, [factor]
        factors = [None, _TRY]
    else:
        factors = [_TRY, _TRY]
    # only a costly fit is worth sharing (the N x N one, or the inducing points' ladder above
    # exact_max_n): a low-rank factor's fit costs a fraction of it
    factors[1] = low_rank_factor(fitted, _per_point(tuned[1][0], weights), opts.exact_max_n, rng,
                                 max_columns=MAX_INDUCING)
    if factors[1] is None and _one_kernel_suffices(tuned, Xt, St, Yt_tuned, notes):
        # a shared kernel comes before dropping a design: it costs one fit already, and there the tuning
        # draws told less (eight schools, PyMC's draws: the CF, dropped, was chosen on 15 of 18 rows, and
        # the error ratio went 0.012 -> 0.021)
        return [(tuned[1][0]._replace(orders=orders), None)], [None]
    if len(kept) == 1:
        notes += design_notes
        return kept, [factors[0 if kept[0] is tuned[0] else 1]]
    return tuned, factors


_TRY = object()  # _fit_with's factor: look for one


def _per_point(spec, weights):
    """Repeated draws are one point each, with nugget / multiplicity."""
    return spec if weights is None else spec._replace(nugget=spec.nugget / weights)


# the SECF's kernel serves the CF too when, on the tuning draws, the better of the two designs under it
# is within this factor of the better of the two tuned apart, in held-out squared error, on every tuned
# column: one N x N factorisation instead of two.  Eight schools on 4 x 1,000 nutpie draws loses 1.11:
# shared, summary took 2.2 s instead of 3.0 s with median error ratios no worse (mean 0.029 against
# 0.045, sd 0.10 against 0.11); posteriordb's estimates and the coverage grid's were unchanged at 1.2
_SHARED_KERNEL_LOSS = 1.2
# below this many draws an exact fit takes hundredths of a second: CF and SECF keep their own kernels
_SHARE_MIN_N = 1000


# CF and SECF each cost a fit of all the draws.  On the tuning draws (exact leave-one-out, each design
# under its own tuned kernel) the one that is better overall is fitted alone unless the other is better
# on some integrand by more than this factor in squared error
_DESIGN_MARGIN = 1.5


@single_threaded_when_small(lambda tuned, X, *a: X.shape[0])
def _designs_worth_fitting(tuned, X, S, Y, notes):
    """``tuned`` (the CF's and the SECF's specs, each with the order it was tuned at), or the one of
    them worth a fit of all the draws, judged by exact leave-one-out errors on the tuning draws."""
    loo = np.array([_loo_mse(spec, order, X, S, Y) for spec, order in tuned])
    told = np.max(loo, axis=0) > 0  # an integrand constant on the tuning draws tells nothing
    if not np.all(np.isfinite(loo)) or not told.any():
        return tuned
    log_ratio = np.log(np.maximum(loo[1, told], 1e-300)) - np.log(np.maximum(loo[0, told], 1e-300))
    keep = 0 if np.mean(log_ratio) > 0 else 1
    other_gain = log_ratio if keep == 1 else -log_ratio  # log of (kept's error / other's)
    if np.max(other_gain) > np.log(_DESIGN_MARGIN):
        return tuned
    names = ("CF", "SECF")
    notes.append(f"{names[1 - keep]} not fitted: on the {X.shape[0]} tuning draws its leave-one-out error was "
                 f"{np.exp(-np.mean(other_gain)):.2g}x the {names[keep]}'s (geometric mean over integrands), "
                 f"on no integrand below {1 / _DESIGN_MARGIN:.2g}x.")
    return [tuned[keep]]


def _loo_mse(spec, order, X, S, Y):
    K = spec.kernel.gram(X, S)
    K[np.diag_indices_from(K)] += spec.nugget * np.mean(np.diag(K))
    try:
        _, _, Q = restricted_loglik(K, design_matrix(X, S, np.zeros(X.shape[0], dtype=int), 1, order), Y)
    except (ValueError, np.linalg.LinAlgError):
        return np.full(Y.shape[1], np.inf)
    return np.mean(loo_residuals(Q, Y)[0] ** 2, axis=0)


@single_threaded_when_small(lambda tuned, X, *a: X.shape[0])
def _one_kernel_suffices(tuned, X, S, Y, notes):
    """Whether the CF can use the SECF's tuned kernel (``tuned``: the CF's and the SECF's specs, each
    with the order it was tuned at), judged by exact leave-one-out errors on the tuning draws."""
    (cf, cf_order), (secf, secf_order) = tuned
    apart = np.minimum(_loo_mse(cf, cf_order, X, S, Y), _loo_mse(secf, secf_order, X, S, Y))
    shared = np.minimum(_loo_mse(secf, cf_order, X, S, Y), _loo_mse(secf, secf_order, X, S, Y))
    # every column: one integrand can lose many times over while the others gain (sin + cos, d = 10: 45x)
    ratio = float(np.max(shared / np.maximum(apart, 1e-300)))
    if not np.isfinite(ratio) or ratio > _SHARED_KERNEL_LOSS:
        return False
    notes.append(f"CF and SECF fitted with the SECF's kernel (one factorisation): on the {X.shape[0]} tuning "
                 f"draws its better design's leave-one-out error is {ratio:.2f}x that of the two kernels tuned "
                 "apart.")
    return True


def _fit_with(spec, problem, cols, opts, rng, notes, weights, factor=_TRY):
    """The kernel fits of ``spec`` on ``problem`` (the columns ``cols`` of the integrands) as candidates:
    on a low-rank factor of the kernel matrix where one equals it to within a tenth of the nugget
    (``low_rank``; few dimensions), else exact up to ``exact_max_n`` draws, with inducing points above.
    ``factor``: the factor (or None) when already looked for."""
    n = problem.X.shape[0]
    info = {"kernel": spec.kernel, "nugget": spec.nugget}
    spec = _per_point(spec, weights)
    # tried with a client too: a factor is at most 250 MB here, and the same numbers as without one
    if factor is _TRY:
        # above exact_max_n a factor with more columns than the inducing-point fit may use costs more
        # than that fit (eight schools, 20,000 draws: two failed attempts of 1,600 columns, 5.3 of 10.5 s)
        factor = low_rank_factor(problem, spec, opts.exact_max_n, rng, max_columns=MAX_INDUCING)
    fits = None if factor is None else fit_exact_heldout(problem, spec, keep_fit=opts.return_fit, factor=factor)
    suffix = ""
    if fits is not None:
        info["rank"] = fits[0].rank
        notes.append(f"kernel CVs ({'SECF' if spec.orders[0] else 'CF'}) fitted on a rank-{fits[0].rank} factor "
                     f"of the {n} x {n} kernel matrix, equal to it within a tenth of the nugget: the exact fit.")
    elif n <= opts.exact_max_n:
        fits = fit_exact_heldout(problem, spec, keep_fit=opts.return_fit)
    else:
        choice = choose_inducing(problem, spec, rng, client=opts.client, keep_fit=opts.return_fit)
        fits = choice.fits
        info["n_inducing"] = choice.m
        info["accurate"] = choice.accurate
        suffix = "-nystrom"
        notes.append(f"kernel CVs used {choice.m} inducing draws ({n} draws > exact_max_n="
                     f"{opts.exact_max_n}; held-out mean squared error on half of the draws, by M: "
                     + ", ".join(f"{m}: {e:.3g}" for m, e in choice.path)
                     + (f"; below {ACCURATE_ENOUGH:g} of every integrand's variance, so no more" if choice.accurate
                        else "") + ").")
    out = []
    for fit in fits:
        name = ("secf" if fit.poly_order else "cf") + suffix
        out.append(Candidate(name, fit.beta[0], fit.resid, fit.z, fit.beta_se[0],
                             {**info, "poly_order": fit.poly_order}, columns=cols, influence=fit.influence,
                             labels=problem.labels, jackknife_bias=fit.jackknife_bias[0], predictor=fit.predictor))
    return out


def _rescale(cand, loc, scale):
    """A candidate fitted on standardised columns, in the integrands' units."""
    cols = np.arange(loc.size) if cand.columns is None else cand.columns
    lo, sc = loc[cols], scale[cols]
    cand.estimate = lo + sc * cand.estimate
    if cand.z is cand.resid and isinstance(cand.resid, np.ndarray) and cand.resid.flags.owndata \
            and cand.resid.flags.writeable:
        # in place: a copy kept the standardised array alive as ``z`` (J = 10,000: 640 MB), which is read only
        # for the k-hat of its squares, and a positive scale per column leaves that alone
        cand.resid *= sc
    else:
        cand.resid = cand.resid * sc
    if cand.se_model is not None:
        cand.se_model = cand.se_model * sc
    if cand.jackknife_bias is not None:
        cand.jackknife_bias = cand.jackknife_bias * sc
    if cand.jackknife is not None:
        cand.jackknife = cand.jackknife * sc
    if cand.predictor is not None:
        cand.predictor = _scaled(cand.predictor, sc)
    return cand


def _scaled(predictor, scale):
    return lambda X, S: predictor(X, S) * scale


# a full polynomial basis of q features on n draws costs about a dozen least-squares solves of
# n q^2 flops (the fit, its held-out folds, the jackknife); past this budget it is not tried in "auto"
# (varying intercepts, d = 89, 4 x 5,000 draws: ZV-2's 4,094 features took 200 s)
_ZV_FLOP_BUDGET = 2e10


def _planned_methods(method, n, d, notes=None):
    """ZV bases (order, cross terms) and kernel designs that ``method`` asks for (``"auto"``: all
    that can be fitted)."""
    if method in ("auto", "zv"):
        # a basis is tried when the draws are at least twice its number of coefficients
        orders = [o for o in ((1, 2) if method == "auto" else (1, 2, 3))
                  if o == 1 or n > 2 * (1 + n_polynomial_features(d, o))]
        if method == "auto" and n <= 2 * (1 + d) and n * d * d > _ZV_FLOP_BUDGET:
            # fewer draws than two per coefficient: a cross-validated lasso path over d features
            # (d = 10,002, 4,000 draws: not done in 25 minutes)
            orders = [o for o in orders if o != 1]
            if notes is not None:
                notes.append(f"ZV-1 on all {d} coordinates not fitted: {n} draws are fewer than two per coefficient "
                             "and its lasso path costs minutes (method='zv1' fits it).")
        costly = [o for o in orders if o > 1 and n * n_polynomial_features(d, o) ** 2 > _ZV_FLOP_BUDGET]
        if costly:
            # "zv" too: ZV-3 at d = 30 on 4 x 25,000 draws (5,456 features) took 580 s and 24 GB
            orders = [o for o in orders if o not in costly]
            if notes is not None:
                for o in costly:
                    notes.append(f"ZV-{o} with cross terms not fitted: its {n_polynomial_features(d, o)} features on "
                                 f"{n} draws cost minutes" + ("; the squares alone (zv2diag) are tried instead"
                                                              if o == 2 else "") + f" (method='zv{o}' fits it).")
        bases = [(o, True) for o in orders]
        if 2 not in orders and d > 1 and n > 2 * (1 + n_polynomial_features(d, 2, cross=False)):
            # too many draws short of the d^2 / 2 cross terms: the squares alone still fit
            bases.append((2, False))
        return bases, (["cf", "secf"] if method == "auto" else [])
    if method == "zv2diag":
        return [(2, False)], []
    return ([(int(method[2]), True)] if method.startswith("zv") else []), ([method] if method in ("cf", "secf") else [])


def _zv_candidates(bases, draws, live, opts, strict, notes):
    """One ZV-CV candidate per polynomial basis, fitted for every live integrand at once."""
    candidates = []
    rep = draws.repeats
    factor = _shared_least_squares_factor(bases, draws, live, opts)
    for order, cross in bases:
        try:
            cand = zero_variance_candidate(draws.X, draws.S, draws.Y[:, live], order, opts.zv_penalty, draws.chain,
                                           opts.folds, opts.random_seed, first=None if rep is None else rep[0],
                                           keep_fit=opts.return_fit, cross=cross, factor=factor)
        except ValueError as err:
            if strict:
                raise
            notes.append(f"{basis_name(order, cross)} skipped ({err})")
            continue
        cand.columns = live
        candidates.append(cand)
    return candidates


def _shared_least_squares_factor(bases, draws, live, opts):
    """The QR factor of the widest least-squares ZV basis, which every narrower basis's design leads
    (varying intercepts, 4 x 5,000 draws: ZV-1's own QR took 0.14 s); None where no basis or only one
    is fitted by least squares, or the widest cannot be."""
    n, d = draws.X.shape
    try:  # a basis that cannot be fitted says so in the loop over the bases, as without a shared factor
        widths = [(n_polynomial_features(d, order, cross), order, cross) for order, cross in bases
                  if choose_penalty(n, n_polynomial_features(d, order, cross), opts.zv_penalty) is None]
        if len(widths) < 2:
            return None
        _, order, cross = max(widths)
        return least_squares_factor(draws.X, draws.S, draws.Y[:, live], order, cross)
    except (ValueError, np.linalg.LinAlgError):
        return None


def _kernel_plan(kernel_names, strict, d, kernel_max_dim, candidates, live, notes):
    """Kernel designs still worth fitting and the integrands to fit them for (``method="auto"``
    fits none above ``kernel_max_dim`` and skips integrands a ZV-CV already made exact)."""
    if not kernel_names or strict:
        return kernel_names, live
    if d > kernel_max_dim:
        notes.append(f"no kernel CVs: d = {d} > kernel_max_dim = {kernel_max_dim} (they rarely pay in "
                     "this many dimensions and cost O(d) per kernel entry); ZV-CVs or MC only.")
        return [], live
    exact = [c.columns[np.var(c.resid, axis=0) <= _EXACT] for c in candidates]
    return kernel_names, (np.setdiff1d(live, np.concatenate(exact)) if exact else live)


@single_threaded_when_small(lambda values, *a, **k: np.shape(values)[0])
def cv_estimate(
    values,
    samples,
    scores,
    method="auto",
    *,
    chain=None,
    kernel="se",
    ard="auto",
    tune="ml",
    nugget=1e-4,
    poly_order="auto",
    zv_penalty="auto",
    standardize=True,
    folds=10,
    max_tune_points="auto",
    exact_max_n=4000,
    kernel_max_dim=50,
    random_seed=0,
    check_scores=True,
    check_tails=True,
    check_mixing=True,
    residual_khat=True,
    client=None,
    return_fit=False,
    tune_columns=None,
    local=None,
):
    """Estimate E_pi[f] with Stein control variates from draws, integrand values and scores.

    Parameters
    ----------
    values : array (n,) or (n, k)
        Integrand values f(x_i) at each draw (k integrands at once, sharing all the work).
    samples : array (n, d)
        The draws, on the unconstrained space where the scores are taken.
    scores : array (n, d)
        grad_x log pi(x_i) at each draw (log density up to a constant, Jacobian included).
    method : {"auto", "mc", "zv1", "zv2", "zv2diag", "zv3", "zv", "cf", "secf"}
        ``"zv1"``/``"zv2"``/``"zv3"``: zero-variance polynomial CVs; ``"zv2diag"``: order 2
        without cross products (2 d coefficients; ``"auto"`` and ``"zv"`` try it when the draws
        are too few for full order 2); ``"zv"``: the ZV-CV whose order
        (1, 2 or 3, as many as the draws identify) has the smallest held-out se, MC included
        (ZVCV's choice of the order by cross-validation); ``"cf"``: control functional
        (kernel CV); ``"secf"``: semi-exact control functional (polynomial + kernel);
        ``"auto"``: per integrand the method with the smallest held-out standard error, MC
        included.  Above 40,000 draws ``"auto"`` and ``"zv"`` fit on one draw in t of each chain
        (about 20,000) and evaluate the control variates at all the draws (said in the notes).
    chain : array (n,), optional
        Chain label of each draw for MCMC output; draws must be in sampling order
        within a chain.  Without it the draws are treated as independent.
    kernel : {"se", "imq", "precond_se", "polynomial"} or kernel object
        Base kernel of the Stein kernel (squared exponential by default).
    ard : bool or "auto"
        One lengthscale per dimension (True) or a single one; "auto": one per dimension up to
        d = 20.
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
        Contiguous held-out blocks per chain for MCMC draws (at least 2).
    max_tune_points : int or "auto"
        Hyperparameters are tuned on a random subset of at most this many draws; "auto": 30%
        of them, at least 150 and at most 400 (200 in one dimension, 300 in two).
    exact_max_n : int
        Kernel CVs are fitted on a low-rank factor of the kernel matrix wherever one equals it to a
        tenth of the nugget (few dimensions; the notes give its rank), else exactly up to this many
        draws and with inducing points above (O(n M) memory), said in the notes.
    kernel_max_dim : int
        ``method="auto"`` fits no kernel CV above this many parameters (ZV-CVs or MC only).
    random_seed : int
    check_scores : bool
        Check the scores against the draws first (the Stein identities E[s] = 0 and
        E[(x - Ex) s_i] = -1, within their MCSE): an error when they fail by far (wrong sign,
        other data), a note and ``se_reliable=False`` when mildly.
    check_tails : bool
        Mark every CV estimate unreliable, with a note, when the draws look heavy-tailed (see
        :func:`pymc_cv.core.uncertainty.heavy_tail_note`): control variates extrapolate into tails
        the draws rarely reach.  Callers that check many related sets of draws once for all
        (thermodynamic integration checks its end rungs) turn it off.
    check_mixing : bool or array of int
        With chain labels, mark an integrand unreliable, with a note, when its chains disagree
        beyond chance (ArviZ's rank-normalised split R-hat, see :mod:`pymc_cv.core.mixing`): True
        checks every integrand, a list of column indices of ``values`` those alone, False none.
        ``summary`` checks the rows and not the centred squares that give their sd: the rank
        R-hat of f is the larger of its bulk and folded (``abs(f - median)``) values, and the ranks
        of ``(f - mean)**2`` are those of ``abs(f - mean)``.
    residual_khat : bool
        Fill ``CVResult.khat``, the Pareto k-hat of each integrand's standardised held-out residuals
        (one PSIS fit per integrand, a diagnostic that nothing here acts on); False leaves it NaN.
        ``summary``, whose table does not show it, turns it off.
    client : dask.distributed.Client, optional
        Above ``exact_max_n`` draws, where no low-rank factor of the kernel matrix exists (that one
        is fitted here, with or without a client), keep the inducing-point features (N x M) as a
        dask array on the cluster's workers, in chunks of whole held-out blocks, instead of in this process's
        memory (the draws themselves stay here).  The estimates agree with the local fit up to
        the order of the sums.
    return_fit : bool
        Keep each integrand's fitted control variate in ``CVResult.fits`` (a
        :class:`~pymc_cv.core.cvfit.CVFit` with ``.predict(samples, scores)``); off by default,
        when the result keeps nothing the size of the kernel fit.
    tune_columns : array of int, optional
        The integrands (column indices of ``values``) the kernel is tuned on; the others are
        fitted with that kernel.  Default: all (up to 20 of them, evenly spread).  ``summary``
        tunes on the rows themselves, not on the squares that give their sd.
    local : LocalCoordinates, optional
        Under ``method="auto"`` or ``"zv"``, also fit each integrand's ZV-CVs on its own coordinate
        and the shared ones alone (:mod:`pymc_cv.core.local_zv`): with many parameters, a cubic basis
        of a few coordinates per integrand where the full basis can afford only order 1.
        ``summary`` passes it above ``kernel_max_dim`` parameters.

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
    opts = check_cv_options(n, chain=chain, folds=folds, nugget=nugget, max_tune_points=max_tune_points,
                            exact_max_n=exact_max_n, kernel_max_dim=kernel_max_dim, tune=tune, ard=ard,
                            poly_order=poly_order)
    chain = opts.pop("chain")
    check_kernel(kernel, KERNEL_NAMES)  # under method="auto" a misspelt kernel would skip every kernel CV
    check_random_seed(random_seed)
    opts = CVSettings(kernel=kernel, zv_penalty=zv_penalty, random_seed=random_seed, client=check_client(client),
                      return_fit=bool(return_fit),
                      tune_columns=check_columns("tune_columns", tune_columns, Y.shape[1]), **opts)
    mixing = _mixing_columns(check_mixing, Y.shape[1])
    rep = repeated_draws(X)
    target = pipeline.Target(X, S, chain, repeats=rep)
    findings = pipeline.check_scores([target], second_order=True) if check_scores else []
    findings += pipeline.check_tails([target]) if check_tails else []
    std = Standardizer.fit([X]) if standardize else Standardizer.identity(d)
    solver = _Solver(method, X, S, Y, chain, rep, std, opts, _check_local(local, Y.shape[1], d, return_fit))
    res = pipeline.run(Y, chain, solver, findings, choose="first" if solver.strict else "best",
                       fallback=not solver.strict, standardizer=std if return_fit else None,
                       mixing_columns=mixing, khat=bool(residual_khat))
    return pipeline.squeeze(res) if one_d else res


def _best_somewhere(candidates, k):
    """The candidates whose held-out mean squared residual is the smallest on at least one of the k integrands:
    the others are not evaluated at every draw, where each would hold its n x k residuals until ``finalize``."""
    mse = [np.mean(c.resid**2, axis=0) for c in candidates]
    cols = [np.arange(k) if c.columns is None else np.asarray(c.columns) for c in candidates]
    best = np.full(k, np.inf)
    for m, j in zip(mse, cols):
        np.minimum.at(best, j, m)
    return [c for c, m, j in zip(candidates, mse, cols) if np.any(m <= best[j])]


def _every_tth(n, chain, t):
    """Indices of every t-th draw of each chain (draws in sampling order within a chain), the first kept."""
    if chain is None:
        return np.arange(0, n, t)
    inverse = np.unique(chain, return_inverse=True)[1].ravel()
    order = np.argsort(inverse, kind="stable")
    grouped = inverse[order]
    position = np.empty(n, dtype=int)
    position[order] = np.arange(n) - np.searchsorted(grouped, grouped)
    return np.flatnonzero(position % t == 0)


def _check_local(local, k, d, return_fit):
    """``local`` checked against the k integrands and d coordinates; None where it is not used."""
    if local is None:
        return None
    if not isinstance(local, LocalCoordinates):
        raise TypeError(f"local= must be a pymc_cv.core.local_zv.LocalCoordinates (own, shared); got "
                        f"{type(local).__name__}.")
    own, shared = np.asarray(local.own, dtype=int), np.asarray(local.shared, dtype=int)
    if own.shape != (k,) or np.any(own < -1) or np.any(own >= d) or np.any((shared < 0) | (shared >= d)):
        raise ValueError(f"local.own must hold one coordinate in [0, {d}) or -1 per integrand ({k}), and "
                         f"local.shared coordinates in [0, {d}).")
    if return_fit:
        warnings.warn("local= is not used with return_fit=True (local fits keep no predictor); drop one.",
                      UserWarning, stacklevel=3)
        return None
    return LocalCoordinates(own, shared)


def _mixing_columns(check_mixing, k):
    """The integrands whose chains are checked for mixing (None: all)."""
    if isinstance(check_mixing, (bool, np.bool_)):
        return None if check_mixing else np.zeros(0, dtype=int)
    if isinstance(check_mixing, str) or np.ndim(check_mixing) != 1:
        raise ValueError(f"`check_mixing` must be True, False or a list of column indices of `values`; "
                         f"got {check_mixing!r}.")
    return check_columns("check_mixing", check_mixing, k)


class _Solver:
    """The ZV and kernel candidates ``method`` asks for, on standardised draws and integrands, back in
    the integrands' units: the solver :func:`cv_estimate` plugs into ``pipeline.run``."""

    def __init__(self, method, X, S, Y, chain, rep, std, opts, local=None):
        self.method, self.Y, self.chain, self.rep, self.std, self.opts = method, Y, chain, rep, std, opts
        self.local = local
        self.X, self.S = X, S
        self.strict = method not in ("auto", "zv")

    def __call__(self, notes):
        if not self.strict and self.X.shape[0] > 2 * FIT_DRAWS:
            return self._fitted_on_every_tth(notes)
        return self._candidates(notes)

    def _fitted_on_every_tth(self, notes):
        """Candidates fitted on one draw in t of each chain (about ``FIT_DRAWS`` of them), each control
        variate then evaluated at all the draws: the estimate is the mean of f - L phi over all of them, and
        the residuals are held out everywhere (the thinned draws keep their held-out residuals of the fit)."""
        n = self.X.shape[0]
        t = -(-n // FIT_DRAWS)
        kept = _every_tth(n, self.chain, t)
        Xk, Sk = self.X[kept], self.S[kept]
        sub = _Solver(self.method, Xk, Sk, self.Y[kept], None if self.chain is None else self.chain[kept],
                      repeated_draws(Xk), self.std, dataclasses.replace(self.opts, return_fit=True), self.local)
        fitted = [c for c in sub._candidates(notes) if c.predictor is not None and not isinstance(c.resid, list)]
        Xs, Ss = self.std.transform(self.X, self.S)
        out = []
        for cand in _best_somewhere(fitted, self.Y.shape[1]):
            cols = np.arange(self.Y.shape[1]) if cand.columns is None else cand.columns
            resid = self.Y[:, cols].copy()
            for a in range(0, n, _PREDICT_ROWS):  # a kernel CV's n x M Gram matrix a slab at a time
                resid[a:a + _PREDICT_ROWS] -= cand.predictor(Xs[a:a + _PREDICT_ROWS], Ss[a:a + _PREDICT_ROWS])
            estimate = resid.mean(axis=0)
            resid -= estimate
            resid[kept] = cand.resid + (cand.estimate - estimate)
            out.append(Candidate(cand.name, estimate, resid, resid, None,
                                 {**cand.info, "fitted_on": f"one draw in {t}"}, columns=cand.columns,
                                 predictor=cand.predictor if self.opts.return_fit else None))
        notes.append(f"control variates fitted on one draw in {t} of each chain ({kept.size} of {n}), each then "
                     f"evaluated at all {n} draws for the estimate and its se (the draws it was fitted on with "
                     "their held-out residuals).")
        return out

    def _candidates(self, notes):
        X, Y, rep, opts, strict = self.X, self.Y, self.rep, self.opts, self.strict
        n, d = X.shape
        Xs, Ss = self.std.transform(X, self.S)
        loc = Y.mean(axis=0)
        scale = Y.std(axis=0)
        live = np.flatnonzero(scale > 0)  # a constant integrand is known exactly: nothing to fit
        Ystd = (Y - loc) / np.where(scale > 0, scale, 1.0)
        scale = np.where(scale > 0, scale, 1.0)
        zv_bases, kernel_names = _planned_methods(self.method, n, d, notes)
        if rep is not None:
            notes.append(f"{n - rep[1].size} of the {n} draws repeat an earlier one (rejections, thinning): "
                         "copies are held out together and are one point of a kernel fit.")
        draws = StandardisedDraws(Xs, Ss, Ystd, self.chain, rep)
        candidates = _zv_candidates(zv_bases if live.size else [], draws, live, opts, strict, notes)
        if self.local is not None and not strict and live.size:
            candidates += local_zero_variance_candidates(Xs, Ss, Ystd, self.local, live, self.chain, opts.folds,
                                                         first=None if rep is None else rep[0])
        kernel_names, todo = _kernel_plan(kernel_names, strict, d, opts.kernel_max_dim, candidates, live, notes)
        if kernel_names and todo.size:
            try:
                rng = np.random.default_rng(opts.random_seed)
                candidates += _kernel_candidates(kernel_names, draws, todo, opts, rng, notes)
            except ValueError as err:
                if strict:
                    raise
                notes.append(f"kernel CVs skipped ({err})")
        return [_rescale(c, loc, scale) for c in candidates]
