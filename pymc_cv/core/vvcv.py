"""``vvcv_estimate``: vector-valued control variates across T related tasks.

Three solvers for the same estimator (see ``kernel_cv``):

- ``"shared"``: every task has the same draws and scores (integrands at many
  time points under one posterior); Kronecker eigen-solve (``kronecker``).
- ``"exact"``: the reduced N x N system, one Cholesky.
- ``"inducing"``: subset of regressors on M inducing draws, for large N.

``solver="auto"`` picks shared when the draws coincide, else exact up to
``exact_max_n`` draws, else inducing.  Hyperparameters (ARD lengthscales,
nugget and, with ``B="learn"``, the task matrix) are tuned by restricted
marginal likelihood with exact gradients on at most ``max_tune_points``
draws.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..cluster import check_client
from . import pipeline
from .external import cluster_nystrom
from .finalize import Candidate
from .heldout import fold_labels, jackknife_bias
from .kernel_cv import fit_exact_heldout, low_rank_factor
from .kernels import KERNEL_NAMES, make_kernel
from .kronecker import fit_shared_draws, reml_task_matrix
from .linalg import RankDeficientDesignError
from .nystrom import fit_nystrom_heldout
from .polynomial import n_polynomial_features
from .problem import HeldoutProblem, KernelSpec
from .standardize import Standardizer
from .threads import single_threaded_when_small
from .tuning import subsample_per_task, tune_marginal_likelihood, tune_points
from .validation import (
    check_B,
    check_chain,
    check_folds,
    check_kernel,
    check_random_seed,
    check_task,
    check_tune_points,
)

__all__ = ["vvcv_estimate"]


class KernelPlan(NamedTuple):
    """How the vv-CV kernel is set up and tuned, shared by the solvers."""

    kernel: object  # the base kernel before tuning (its name until the draws are standardised)
    B: np.ndarray  # the task matrix (the start when learned)
    learn_B: bool
    nugget: float
    tune: str
    max_tune_points: object
    folds: int


class TaskFit(NamedTuple):
    """A vv-CV fit of T tasks on standardised values."""

    estimate: np.ndarray  # (T,)
    se_model: np.ndarray | None
    resid: list  # T arrays of held-out residuals
    z: list  # the same standardised by their model sd
    B: np.ndarray
    hyperparameters: dict
    jackknife_bias: np.ndarray  # (T,)


def _poly_order(poly_order, m_min, T, d, n_total, n_tune):
    """The Stein polynomial order: with "auto" the highest (up to 2) whose coefficients are at most a
    third of each task's draws, of all draws, and of the draws the hyperparameters are tuned on."""
    if poly_order != "auto":
        return int(poly_order)
    for order in (2, 1):
        q1 = 1 + n_polynomial_features(d, order)
        if q1 <= m_min // 3 and T * q1 <= min(n_total, n_tune) // 3:
            return order
    return 0


def _shared(samples, scores):
    first_x, first_s = samples[0], scores[0]
    return all(
        x.shape == first_x.shape and np.array_equal(x, first_x) and np.array_equal(s, first_s)
        for x, s in zip(samples[1:], scores[1:])
    )



def _problem_size(values, samples, *args, **kwargs):
    """Draws in the largest matrix: per task when all tasks share one array of draws."""
    sizes = [np.shape(v)[0] for v in values]
    if len(samples) and all(s is samples[0] for s in samples):
        return max(sizes)
    return sum(sizes)


def _check_tasks(values, samples, scores):
    """Per-task (values (m_t,), draws (m_t, d), scores (m_t, d)), validated, one d for all."""
    if isinstance(values, np.ndarray) and values.ndim == 1:
        raise ValueError("`values` must be a sequence of T per-task arrays; for one task use cv_estimate.")
    T = len(values)
    if not (len(samples) == len(scores) == T):
        raise ValueError(
            f"`values`, `samples` and `scores` must each hold one array per task; got {T}, "
            f"{len(samples)} and {len(scores)}."
        )
    if T < 1:
        raise ValueError("vvcv_estimate needs at least one task.")
    ys, Xs, Ss = [], [], []
    for t in range(T):
        Y, X, S, one_d = check_task(values[t], samples[t], scores[t], name=t)
        if not one_d:
            raise ValueError(f"`values` of task {t} must be 1-d (one integrand per task); got {Y.shape}.")
        if Y.shape[0] < 4:
            raise ValueError(f"task {t} has {Y.shape[0]} draws; vv-CVs need at least 4 per task.")
        ys.append(Y[:, 0]), Xs.append(X), Ss.append(S)
    if any(X.shape[1] != Xs[0].shape[1] for X in Xs):
        raise ValueError("All tasks must share one parameter space: samples with the same d.")
    return ys, Xs, Ss


def _initial_B(B, T):
    """The task matrix to start from (identity for "learn" and "identity")."""
    if isinstance(B, str):
        if B not in ("learn", "identity"):
            raise ValueError(f"B={B!r}; use 'learn', 'identity' or a (T, T) matrix.")
        return np.eye(T)
    return check_B(B, T)


@single_threaded_when_small(_problem_size)
def vvcv_estimate(
    values,
    samples,
    scores,
    B="learn",
    *,
    chain=None,
    kernel="se",
    ard=True,
    nugget=1e-4,
    tune="ml",
    poly_order="auto",
    standardize=True,
    solver="auto",
    exact_max_n=10000,
    n_inducing=2000,
    folds=5,
    max_tune_points="auto",
    fallback=True,
    random_seed=0,
    check_scores=True,
    check_tails=True,
    client=None,
):
    """Estimate T related integrals E_{pi_t}[f_t] jointly with vector-valued control variates.

    Parameters
    ----------
    values, samples, scores : sequences of T arrays
        Per task t: integrand values (m_t,), draws (m_t, d) and the scores of pi_t at
        those draws (m_t, d).  Tasks may have different draws, sizes and targets.
    B : {"learn", "identity"} or array (T, T)
        Task similarity of the separable kernel B k.  ``"learn"``: restricted marginal
        likelihood over B = L L' (closed form when all tasks share their draws).  A fixed
        B is on the scale of the standardised integrands (each task scaled to unit sd).
    chain : sequence of T arrays, optional
        Chain labels per task for MCMC draws (in sampling order within chains).
    kernel, ard, nugget, tune, poly_order, standardize :
        As in :func:`cv_estimate`; ``poly_order`` adds per-task Stein polynomial
        features (semi-exact vv-CV), "auto" uses them when each task has enough draws.
    solver : {"auto", "shared", "exact", "inducing"}
    exact_max_n : int
        Above this many draws in total, ``solver="auto"`` uses inducing points.
    n_inducing : int
        Number of inducing draws for ``solver="inducing"``.
    folds : int
        Held-out blocks per task for the variance-reduction check (MCMC or large N).
    max_tune_points : int or "auto"
        Hyperparameters are tuned on a random subset of at most this many draws; "auto": 30%
        of them, at least 150 and at most 400.
    fallback : bool
        Report the plain MC mean (method "mc") for tasks where the vv-CV did not beat MC on
        held-out draws.
    random_seed : int
    check_scores : bool
        Check every task's scores against its draws (see :func:`cv_estimate`).
    check_tails : bool
        Mark a task's CV estimate unreliable when its draws look heavy-tailed (see
        :func:`cv_estimate`).
    client : dask.distributed.Client, optional
        With ``solver="inducing"``, keep the inducing-point features as a dask array on the
        cluster's workers (see :func:`cv_estimate`).

    Returns
    -------
    CVResult
        Arrays over tasks, plus ``.B`` (the task matrix used).  ``hyperparameters`` holds per task
        the settings of the fit it reports (kernel, nugget, polynomial order, B, solver; None for
        the MC fallback).

    Examples
    --------
    >>> import numpy as np
    >>> import pymc_cv
    >>> rng = np.random.default_rng(0)
    >>> x = rng.normal(size=(40, 1))
    >>> fs = [np.sin(x[:, 0]) + x[:, 0] ** 2, 1.1 * np.sin(x[:, 0]) + x[:, 0] ** 2]  # E = 1, 1
    >>> res = pymc_cv.vvcv_estimate(fs, [x, x], [-x, -x], B="learn")
    >>> bool(np.all(np.abs(res.estimate - 1.0) < 1e-3))
    True
    """
    ys, Xs, Ss = _check_tasks(values, samples, scores)
    T, d = len(ys), Xs[0].shape[1]
    chains = [None] * T if chain is None else [check_chain(c, ys[t].size) for t, c in enumerate(chain)]
    learn = isinstance(B, str) and B == "learn"
    B0 = _initial_B(B, T)
    if solver not in ("auto", "shared", "exact", "inducing"):
        raise ValueError(f"solver={solver!r}; use 'auto', 'shared', 'exact' or 'inducing'.")
    max_tune_points = check_tune_points(max_tune_points)
    folds = check_folds(folds)
    check_kernel(kernel, KERNEL_NAMES)
    check_random_seed(random_seed)
    shared = _shared(Xs, Ss)
    if solver == "shared" and not shared:
        raise ValueError("solver='shared' needs identical samples and scores for every task.")
    # all tasks share one set of draws: checked once, a finding for every task
    targets = ([pipeline.Target(Xs[0], Ss[0], chains[0])] if shared else
               [pipeline.Target(Xs[t], Ss[t], chains[t], rows=t, label=f"task {t}") for t in range(T)])
    findings = pipeline.check_scores(targets) if check_scores else []
    findings += pipeline.check_tails(targets) if check_tails else []
    std = Standardizer.fit(Xs[:1] if shared else Xs) if standardize else Standardizer.identity(d)
    plan = KernelPlan(kernel, B0, learn, nugget, tune, max_tune_points, folds)
    fit_tasks = _TaskSolver(ys, Xs, Ss, chains, std, plan, shared, settings=_SolverSettings(
        solver, ard, poly_order, exact_max_n, n_inducing, random_seed, client))
    res = pipeline.run(ys, chains, fit_tasks, findings, kind="task", fallback=fallback)
    # the task matrix of the candidate most tasks report (the MC fallback has none)
    chosen = [h for h in res.hyperparameters if h is not None] or [fit_tasks.first_info]
    res.B = max(chosen, key=lambda h: sum(g is h for g in chosen))["B"]
    return res


class _SolverSettings(NamedTuple):
    solver: str
    ard: bool
    poly_order: object
    exact_max_n: int
    n_inducing: int
    random_seed: object
    client: object


class _TaskSolver:
    """The vv-CV candidates on standardised draws and values, back in the units of the integrands:
    the solver :func:`vvcv_estimate` plugs into ``pipeline.run``.  With shared draws and
    ``poly_order="auto"``, the vv-CV without polynomial features is a candidate too (held-out error
    decides, as ``cv_estimate``'s "auto" decides between a CF and a semi-exact CF)."""

    def __init__(self, ys, Xs, Ss, chains, std, plan, shared, settings):
        self.ys, self.Xs, self.Ss, self.chains, self.std = ys, Xs, Ss, chains, std
        self.plan, self.shared, self.settings = plan, shared, settings
        self.use_shared = shared and settings.solver in ("auto", "shared") and len(ys) > 1
        self.first_info = None

    def __call__(self, notes):
        ys, T, opts = self.ys, len(self.ys), self.settings
        d = self.Xs[0].shape[1]
        Zs, SZs = zip(*(self.std.transform(X, S) for X, S in zip(self.Xs, self.Ss)))
        locs = np.array([y.mean() for y in ys])
        scales = np.array([y.std() for y in ys])
        scales = np.where(scales > 0, scales, 1.0)
        yst = [(y - loc) / sc for y, loc, sc in zip(ys, locs, scales)]
        m = np.array([y.size for y in ys])
        N = int(m.sum())
        n_fit = int(m[0]) if self.shared else N
        order = _poly_order(opts.poly_order, int(m.min()), 1 if self.shared else T, d, n_fit,
                            tune_points(self.plan.max_tune_points, n_fit))
        base = make_kernel(self.plan.kernel, d, np.concatenate(Zs[:1] if self.shared else Zs), ard=opts.ard)
        plan = self.plan._replace(kernel=base)
        rng = np.random.default_rng(opts.random_seed)
        if self.use_shared:
            orders = [order] + ([0] if opts.poly_order == "auto" and order > 0 else [])
            name = "shared"

            def run(o):
                return _run_shared(Zs[0], SZs[0], np.column_stack(yst), plan, o, self.chains[0], rng)
        else:
            problem = _task_problem(Zs, SZs, yst, self.chains, plan.folds)
            name = opts.solver if opts.solver != "auto" else ("exact" if N <= opts.exact_max_n else "inducing")
            orders = [order] + ([0] if opts.poly_order == "auto" and order > 0 else [])

            def run(o):
                return _run_general(problem, plan, o, name, opts, rng)
        fits = []
        for o in orders:
            try:
                fits.append((name, run(o)))
            except RankDeficientDesignError as err:
                if o == 0 or opts.poly_order != "auto":
                    raise
                # Stein polynomials of nearly Gaussian draws can be collinear to rounding
                notes.append(f"vv-CV with polynomials of order {o} not fitted ({err}); fitted without them.")
            if fits and not self.use_shared:
                break  # the general solver's fallback to order 0 only where the polynomials cannot be fitted
        cands = [_candidate(name, locs, scales, fit) for name, fit in fits]
        self.first_info = cands[0].info
        return cands


def _candidate(solver, locs, scales, fit):
    """A :class:`TaskFit` as a finalize candidate, back in the units of the integrands."""
    return Candidate(f"vvcv-{solver}", locs + scales * fit.estimate, [r * sc for r, sc in zip(fit.resid, scales)],
                     list(fit.z), None if fit.se_model is None else fit.se_model * scales,
                     {**fit.hyperparameters, "B": fit.B, "solver": solver},
                     jackknife_bias=fit.jackknife_bias * scales)


def _tune(plan, X, S, y, tau, T, order):
    """The kernel, nugget and task matrix of ``plan`` (a :class:`KernelPlan`) tuned on these draws."""
    if plan.tune == "none":
        return plan.kernel, plan.nugget, plan.B
    if plan.tune != "ml":
        raise ValueError(f"tune={plan.tune!r}; vv-CVs support 'ml' or 'none'.")
    h = tune_marginal_likelihood(plan.kernel, X, S, y, tau, T, plan.B, order, nugget=plan.nugget,
                                 learn_B=plan.learn_B)
    return h.kernel, h.nugget, h.B


def _run_shared(X, S, Y, plan, order, chain, rng):
    m, T = Y.shape
    idx = subsample_per_task(np.zeros(m, dtype=int), 1, plan.max_tune_points, rng)
    # one lengthscale set for all tasks: REML summed over tasks (each with its own amplitude)
    cols = np.unique(np.linspace(0, T - 1, min(T, 20)).astype(int))
    kern, nug, _ = _tune(plan._replace(B=np.ones((1, 1)), learn_B=False), X[idx], S[idx], Y[np.ix_(idx, cols)],
                         np.zeros(idx.size, dtype=int), 1, order)
    if plan.learn_B:
        B = reml_task_matrix(X, S, Y, kern, nug, order)
        B += 1e-10 * np.trace(B) / T * np.eye(T)
        nug_b = nug * float(np.mean(np.diag(B)))
    else:
        B, nug_b = plan.B, nug
    fit = fit_shared_draws(X, S, Y, kern, B, nug_b, order)
    labels = fold_labels(m, chain if chain is not None else np.zeros(m, dtype=int), plan.folds, max_block=None)
    resid = np.empty_like(Y)
    z = np.empty_like(Y)
    for f in np.unique(labels):
        te = labels == f
        sub = fit_shared_draws(X[~te], S[~te], Y[~te], kern, B, nug_b, order)
        resid[te] = Y[te] - sub.zero_mean_part(X[te], S[te])
        z[te] = resid[te] / sub.predictive_sd(X[te], S[te])
    resid -= resid.mean(axis=0)
    # two parts: each costs an eigendecomposition of the draws without it
    bias = jackknife_bias(lambda m: fit_shared_draws(X[~m], S[~m], Y[~m], kern, B, nug_b, order).intercepts, labels,
                          fit.intercepts, parts=2)
    hyper = {"kernel": kern, "nugget": nug_b, "poly_order": order}
    return TaskFit(fit.intercepts, fit.intercept_se, [resid[:, t] for t in range(T)], [z[:, t] for t in range(T)], B,
                   hyper, bias)


def _task_problem(Zs, SZs, yst, chains, folds):
    """All tasks' standardised draws as one :class:`HeldoutProblem`, held-out blocks numbered across tasks."""
    T = len(yst)
    m = [y.size for y in yst]
    tau = np.repeat(np.arange(T), m)
    labels = np.empty(tau.size, dtype=int)
    offset = 0
    for t in range(T):
        it = np.flatnonzero(tau == t)
        labels[it] = offset + fold_labels(it.size, chains[t], folds)
        offset = labels[it].max() + 1
    return HeldoutProblem(np.concatenate(Zs), np.concatenate(SZs), np.concatenate(yst)[:, None], tau, T, labels)


def _run_general(problem, plan, order, solver, opts, rng):
    """The vv-CV of ``problem``'s tasks by the ``"exact"`` or ``"inducing"`` solver."""
    X, S, tau, T = problem.X, problem.S, problem.tau, problem.T
    idx = subsample_per_task(tau, T, plan.max_tune_points, rng)
    kern, nug, B = _tune(plan, X[idx], S[idx], problem.Y[idx, 0], tau[idx], T, order)
    spec = KernelSpec(kern, B, nug, [order])
    if solver == "inducing":
        ind = np.sort(subsample_per_task(tau, T, opts.n_inducing, rng))
        if opts.client is None:
            fit = fit_nystrom_heldout(problem, spec, ind)[0]
        else:
            fit = cluster_nystrom()(problem, spec, ind, check_client(opts.client))[0]
    else:
        factor = low_rank_factor(problem, spec, opts.exact_max_n, rng)
        fits = None if factor is None else fit_exact_heldout(problem, spec, factor=factor)
        fit = (fits or fit_exact_heldout(problem, spec))[0]
    r, z = fit.resid[:, 0], fit.z[:, 0]
    resid = [r[tau == t] for t in range(T)]
    zs = [z[tau == t] for t in range(T)]
    hyper = {"kernel": kern, "nugget": nug, "poly_order": order}
    return TaskFit(fit.beta[:T, 0], fit.beta_se[:T, 0], resid, zs, B, hyper, fit.jackknife_bias[:, 0])
