"""Thermodynamic integration (TI) for the log evidence from per-rung arrays, with CVs at every rung.

log p(y) = int_0^1 E_t[log p(y|x)] dt, E_t under the power posterior p_t(x) ~ p(y|x)^t p(x).
:func:`ti_from_arrays` takes plain arrays; the samplers' drivers (``pymc_cv.pymc.evidence``,
``pymc_cv.stan.evidence``) turn their draws into the same arrays and call
:func:`estimate_from_rungs`.

Where log p(y|x) has a lower tail of infinite variance at the first rungs (a prior with mass where
the likelihood vanishes), E_t[log p(y|x)] is singular at t = 0: those rungs are crossed by
stepping stones (:mod:`.stepping_stone`) and TI starts after them.
"""

from __future__ import annotations

import time
from typing import NamedTuple

import numpy as np

from ..core.external import diagnostics
from ..core.standard_errors import mcse_mean
from ..progress import progress_bar
from .quadrature import RULES, integrate, quadrature_error, quadrature_weights
from .result import TIResult
from .reweighting import reweighted_ladder
from .rung_moments import METHODS, check_cv_options, check_rung_counts, concat_moments, rung_moments
from .stepping_stone import PRIOR_TI_ESS, SINGULAR_KHAT, prior_reach, singular_start, stepping_stone

__all__ = ["ti_from_arrays", "TISettings", "estimate_log_evidence", "estimate_from_rungs", "shared_iteration_factor"]


class TISettings(NamedTuple):
    """How the log evidence is estimated from the rungs' arrays: the arguments of
    :func:`ti_from_arrays` other than the arrays, made once by each entry point and passed down."""

    method: str = "vvcv"
    rule: str = "corrected"
    group_size: int = 4
    B: object = "learn"
    progressbar: bool = False
    random_seed: int = 0
    refine: object = None
    options: dict | None = None  # passed to cv_estimate / vvcv_estimate


def estimate_log_evidence(t, loglik, samples, grad_loglik, grad_logprior, chain, settings, weights=None,
                          moments=None, prior_loglik=None, shared_iterations=False):
    """Log evidence by TI from per-rung arrays (:class:`TISettings` ``settings``), rungs with a singular
    integrand crossed by stepping stones (the first of them by importance sampling from the prior when
    ``prior_loglik`` holds log p(y|x) at independent prior draws, or is a function returning them or
    None, called only then); ``moments``: the rungs' moments when already fitted (``pipeline.GroupFitter``).
    ``shared_iterations``: the rungs' i-th draws were made together (one population run with exchange
    moves), so their errors are correlated (:func:`shared_iteration_factor`)."""
    method, rule, group_size, B, progressbar, random_seed, refine, options = settings
    options = {} if options is None else options
    if rule not in RULES:
        raise ValueError(f"rule={rule!r}; use one of {RULES}.")
    if method not in METHODS:
        raise ValueError(f"method={method!r}; use one of {sorted(METHODS)}.")
    target_cess = _check_refine(refine, weights)
    start = time.perf_counter()
    t = np.asarray(t, dtype=float)
    check_rung_counts(t, loglik, samples, grad_loglik, grad_logprior, chain)
    # where log p(y|x) has a lower tail of infinite variance, TI's integrand is singular: those rungs
    # are crossed by stepping stones and TI starts after them (weighted SMC rungs are not judged)
    head = min(singular_start(loglik), t.size - 2) if weights is None and t.size > 2 else 0
    if head and t[0] == 0.0 and prior_loglik is not None:
        prior_loglik = prior_loglik() if callable(prior_loglik) else prior_loglik
        if prior_loglik is not None:
            # the rungs' k-hat (a few hundred draws) may end the singular part early, where TI's
            # integrand is still steep; the prior's draws carry the estimate that far as precisely
            head = max(head, min(prior_reach(t, prior_loglik), t.size - 2))
    ts = t[head:]
    head_loglik = list(loglik)[:head]
    head_chain = None if chain is None else list(chain)[:head]
    loglik, samples, grad_loglik, grad_logprior, chain, weights = (
        None if seq is None else list(seq)[head:]
        for seq in (loglik, samples, grad_loglik, grad_logprior, chain, weights))
    mom = moments  # fitted while the rungs were sampled (pipeline.GroupFitter)
    if mom is not None and head:
        mom = concat_moments([mom], np.arange(head, t.size))
    if mom is None:
        with progress_bar(progressbar) as bar:
            task = bar.add_task(f"TI ({method})", completed=0, total=len(ts))
            mom = rung_moments(ts, loglik, samples, grad_loglik, grad_logprior, chain=chain, method=method,
                               group_size=group_size, B=B, progress=lambda k: bar.advance(task, k),
                               random_seed=random_seed, weights=weights, first_rung=head, **options)
    sampled, source, sampled_mom = ts, None, mom
    if target_cess is not None:
        ts, mom, source = _refined(ts, mom, (loglik, samples, grad_loglik, grad_logprior, chain), method,
                                   target_cess, random_seed)
    whole = head == 0
    value, sampling_se = integrate(ts, mom.mean, mom.var, mom.mean_se, mom.var_se, rule=rule, source=source,
                                   mean_bias=mom.mean_bias, var_bias=mom.var_bias, from_prior=whole)
    qerr = quadrature_error(ts, mom.mean, mom.var, rule=rule, from_prior=whole)
    mc_value, mc_sampling = integrate(ts, mom.mc_mean, mom.mc_var, mom.mc_mean_se, mom.mc_var_se, rule=rule,
                                      source=source, from_prior=whole)
    mc_qerr = quadrature_error(ts, mom.mc_mean, mom.mc_var, rule=rule, from_prior=whole)
    notes = list(dict.fromkeys(mom.notes))  # a rung fits its mean and second moment: one note each
    factor = shared_iteration_factor(sampled, loglik, chain, rule, from_prior=whole) if shared_iterations else 1.0
    sampling_se, mc_sampling = _correlated(factor, sampling_se, notes), _correlated(factor, mc_sampling)
    stones = None
    if head:
        stones = stepping_stone(t[:head + 1], head_loglik, head_chain,
                                prior_loglik=prior_loglik if t[0] == 0.0 else None)
        value, mc_value = value + stones.log_evidence, mc_value + stones.log_evidence
        sampling_se, mc_sampling = np.hypot(sampling_se, stones.se), np.hypot(mc_sampling, stones.se)
    reliable = _judge(sampled, loglik, chain, mom, qerr, sampling_se, notes, first=head)
    reliable &= _cvs_agree(sampled, sampled_mom, notes, first=head)
    if head:
        notes.append(_singular_note(t, head, stones, method))
        if not stones.reliable:
            reliable = False
            notes.append(f"stepping stones: a step's importance weights have a Pareto k-hat above 0.7 "
                         f"({np.nanmax(stones.khat):.2f}); their se may be too small. Add rungs near t = 0.")
    rule_name = "corrected trapezoid (Friel et al. 2014)" if rule == "corrected" else "trapezoid"
    return TIResult(
        log_evidence=value, se=float(np.hypot(sampling_se, np.nan_to_num(qerr))), sampling_se=sampling_se,
        quadrature_error=qerr, mc_log_evidence=mc_value, mc_se=float(np.hypot(mc_sampling, np.nan_to_num(mc_qerr))),
        temperatures=np.asarray(ts, dtype=float), moments=mom, method=method, rule=rule,
        estimator=f"{METHODS[method]}; {rule_name}" + (f"; stepping stones below t = {t[head]:.3g}" if head else ""),
        seconds={"estimation": time.perf_counter() - start}, notes=notes, reliable=reliable, stepping_stone=stones,
    )


def _singular_note(t, head, stones, method):
    return (f"log p(y|x) has a lower tail of infinite variance at the first rungs (Pareto "
            f"k-hat above {SINGULAR_KHAT}): the prior puts mass where the likelihood vanishes (typically a scale "
            "parameter near 0), so E_t[log p(y|x)] is singular at t = 0 and no quadrature over the ladder "
            f"integrates it. Rungs 0-{head - 1} are crossed by stepping stones (log Z(t = {t[head]:.3g}) = "
            f"{stones.log_evidence:.4g} +/- {stones.se:.2g}), TI ({method}) covers t >= {t[head]:.3g}."
            + _prior_note(t, stones))


def _prior_note(t, stones):
    j = stones.prior_steps
    if not stones.prior_draws:
        return ""
    if not j:
        return (f" The {stones.prior_draws} independent prior draws could not reach t = {t[1]:.3g} (importance "
                "weights of too small an ESS), so every stone uses the rungs' own MCMC draws.")
    return (f" Up to t = {t[j]:.3g} the stones are one importance-sampling step from {stones.prior_draws} "
            f"independent prior draws (se {stones.prior_se:.2g}): MCMC draws at such small t visit the region "
            "where the likelihood vanishes too seldom or too often. TI starts no lower than where these draws "
            f"keep an ESS of {PRIOR_TI_ESS:g} of their number.")


def _judge(t, loglik, chain, mom, qerr, sampling_se, notes, first=0):
    """Whether the result's se can be trusted; the reasons when not go into ``notes`` (rungs numbered
    from ``first``, where these start in the sampled ladder)."""
    reliable = bool(np.all(mom.reliable))
    if not reliable:
        bad = np.flatnonzero(~mom.reliable) + first
        notes.append(f"rung(s) {bad.tolist()} have standard errors that may be too small (see the notes above).")
    if not np.isfinite(qerr):
        reliable = False
        notes.append(f"{len(mom.mean)} rungs are too few to estimate the quadrature error (it needs at least 3); "
                     "the se covers the sampling error only. Use more temperatures.")
    rhat, limit = _rung_rhat(loglik, chain)
    stuck = np.flatnonzero(rhat > limit)
    if stuck.size:
        reliable = False
        notes.append("chains disagree about E_t[log p(y|x)] at rung(s) "
                     + ", ".join(f"{i + first} (t = {t[i]:.3g}, R-hat {rhat[i]:.2f} > {limit[i]:.2f})"
                                 for i in stuck[:8])
                     + f"{', ...' if stuck.size > 8 else ''}: the power posterior there may have several "
                     "modes the chains did not mix between; the log evidence can be far off. Use more "
                     "tuning/draws or a population sampler.")
    if np.isfinite(qerr) and qerr > sampling_se:
        notes.append(f"the estimated quadrature error ({qerr:.3g}) exceeds the sampling se ({sampling_se:.3g}): "
                     "add rungs (temperatures='adaptive', a larger ladder, or refine= to reweight the draws "
                     "onto a finer one).")
    return reliable


# |sum of z| / sqrt(k) over a run of CV_GROUP consecutive sampled rungs above this: the CV estimates
# of E_t[log p(y|x)] moved from the plain averages together, beyond chance (z = (CV - plain) / the
# MCSE of the fitted control).  On bench/evidence.py's models (3 seeds each) the NUTS and population
# runs within 0.1 nats of the truth reached 3.1 once (centred eight schools, population) and
# 2.4 otherwise; the centred varying-intercept model, whose funnel the draws at t = 0.1-0.5 miss,
# reached 3.7 (NUTS, +0.23 and +0.62 nats, the second otherwise marked reliable) and 5.6 (population,
# +0.60); SMC's 100 resampled particles of eight schools 4-5.  The z are ratios to estimated MCSEs,
# heavier-tailed than normal
CV_DRIFT = 3.5
CV_GROUP = 4


def cv_drift(mom):
    """Per run of :data:`CV_GROUP` consecutive rungs of ``mom`` (a :class:`RungMoments` of sampled, not
    refined rungs): |sum z| / sqrt(k) of the k rungs reported with CVs, z = (CV - plain) / shift_se;
    and the first rung of each run.  Rungs reported as plain averages or from weighted draws add nothing."""
    cv = np.isfinite(mom.shift_se) & (mom.shift_se > 0)
    z = np.where(cv, (mom.mean - mom.mc_mean) / np.where(cv, mom.shift_se, 1.0), 0.0)
    starts = np.arange(0, z.size, CV_GROUP)
    k = np.add.reduceat(cv.astype(int), starts) if z.size else np.zeros(0, int)
    total = np.add.reduceat(z, starts) if z.size else np.zeros(0)
    return np.abs(total) / np.sqrt(np.maximum(k, 1)), starts


def _cvs_agree(t, mom, notes, first=0):
    """False (and a note) where the CVs at a run of neighbouring rungs moved their estimates from the
    plain averages of the same draws together by more than chance."""
    drift, starts = cv_drift(mom)
    bad = np.flatnonzero(drift > CV_DRIFT)
    if not bad.size:
        return True
    runs = []
    for g in bad:
        lo, hi = starts[g], min(starts[g] + CV_GROUP, t.size) - 1
        runs.append(f"{lo + first}-{hi + first} (t = {t[lo]:.3g}-{t[hi]:.3g}, {drift[g]:.1f})")
    notes.append(
        "at rungs " + ", ".join(runs) + " the CV estimates of E_t[log p(y|x)] all moved the same way from the "
        f"plain averages of the same draws, by more than {CV_DRIFT:g} se together (|sum of z| / sqrt(rungs) in "
        "brackets): the control variates extrapolate over a part of the power posterior the rungs' draws do not "
        "cover (a funnel's neck, a mode the chains missed), so the log evidence can be off by more than its se. "
        "More draws per rung, a non-centred parametrisation, or sampler='population' help; mc_log_evidence is "
        "the plain estimate of the same draws.")
    return False


def _check_refine(refine, weights):
    """The target CESS of ``refine`` (None: no refinement)."""
    if refine is None or refine is False:
        return None
    # new rungs cost one weighted least-squares fit each, so the default asks for many (on van der Pol
    # SMC arrays 0.99 gave errors of 1e-3 nats where 0.9 left 1e-2: bench/smc_refine.py)
    target = 0.99 if refine is True else refine
    if isinstance(target, bool) or not isinstance(target, (int, float)) or not 0 < target < 1:
        raise ValueError(f"refine={refine!r}; use None, True (a target CESS of 0.99) or a target CESS in (0, 1).")
    if weights is not None and any(w is not None for w in weights):
        raise ValueError("refine= reweights the draws of unweighted rungs; with weights= (SMC particles) "
                         "resample them first or leave refine=None.")
    return float(target)


def _refined(t, mom, arrays, method, target_cess, random_seed):
    """The ladder with rungs added by reweighting (ZVCV's Expand_Temperatures), their moments
    merged in, and the sampled rung each rung's draws come from."""
    loglik, samples, grad_loglik, grad_logprior, chain = arrays
    new, src, weights = reweighted_ladder(t, loglik, target_cess=target_cess)
    if new.size == 0:
        mom.notes.append(f"refine: every step of the ladder already has a CESS of at least {target_cess:g}; "
                         "no rung added.")
        return t, mom, None
    sub = rung_moments(new, *([a[i] for i in src] for a in (loglik, samples, grad_loglik, grad_logprior)),
                       chain=None if chain is None else [chain[i] for i in src],
                       method="mc" if method == "mc" else "cti", weights=weights, random_seed=random_seed)
    order = np.argsort(np.r_[t, new], kind="stable")
    how = "weighted averages" if method == "mc" else "weighted ZV-CVs (cti)"
    merged = concat_moments([mom, sub], order)
    merged.notes.append(
        f"refine: {new.size} rungs added between the {t.size} sampled ones by reweighting their draws (target "
        f"CESS {target_cess:g}), estimated with {how}; their errors are added to their source rung's linearly.")
    return np.r_[t, new][order], merged, np.r_[np.arange(t.size), src][order]


# split-R-hat of log p(y|x) above this at a rung: its chains disagree (1.01 is ArviZ's advice for
# final inferences; rungs are often short, and their R-hat that much noisier)
_RHAT_MAX = 1.05
# ... and above 1 + this / (the rung's ESS): with converged chains (R-hat - 1) x bulk ESS stayed below
# 5-12 in 99.9% of simulated AR(1) pairs of chains of 100-1,000 draws, while at 1.05 a 31-rung ladder
# of 2 x 100 draws was flagged in most runs by chance.  The ESS is summed over chains each taken
# alone, so chains stuck apart (which lower the ESS of the pooled draws) do not raise the limit.
_RHAT_NOISE = 10.0


def _rung_rhat(loglik, chain):
    """ArviZ's rank-normalised split R-hat of log p(y|x) per rung and the R-hat above which the rung's
    chains disagree beyond chance (nan where not computable)."""
    found = diagnostics()
    out = np.full(len(loglik), np.nan)
    limit = np.full(len(loglik), _RHAT_MAX)
    for i, ll in enumerate(loglik):
        c = None if chain is None else chain[i]
        if c is None:
            continue
        labels, counts = np.unique(c, return_counts=True)
        if labels.size < 2 or np.unique(counts).size != 1 or counts[0] < 8:
            continue
        per_chain = np.stack([np.asarray(ll, dtype=float)[np.asarray(c) == lab] for lab in labels])
        out[i] = float(found.rhat(per_chain))
        ess = sum(float(found.ess_bulk(x[None, :])) for x in per_chain if np.ptp(x) > 0)
        if ess > 0:
            limit[i] = 1.0 + max(_RHAT_MAX - 1.0, _RHAT_NOISE / ess)
    return out, limit


def estimate_from_rungs(t, rungs, settings, moments=None, prior_loglik=None, shared_iterations=False, **seconds):
    """:func:`estimate_log_evidence` on per-rung tuples (loglik, samples, grad_loglik, grad_logprior, chain), keeping
    the sampled rungs in ``.draws`` so other estimators can be run on the same ones
    (``ti_from_arrays(**res.draws, ...)``, ``shared_iterations`` among them for a population run; with
    ``refine=`` ``res.temperatures`` is the refined ladder)."""
    ll, X, gl, gp, ch = map(list, zip(*rungs))
    res = estimate_log_evidence(t, ll, X, gl, gp, ch, settings, moments=moments, prior_loglik=prior_loglik,
                                shared_iterations=shared_iterations)
    res.seconds.update(seconds)
    res.draws = {"temperatures": np.asarray(t, dtype=float), "loglik": ll, "samples": X, "grad_loglik": gl,
                 "grad_logprior": gp, "chain": ch}
    if res.stepping_stone is not None and res.stepping_stone.prior_draws:
        res.draws["prior_loglik"] = res.stepping_stone.prior_loglik
    if shared_iterations:
        res.draws["shared_iterations"] = True
    return res


def _correlated(factor, se, notes=None):
    """``se`` times a :func:`shared_iteration_factor` above 1 (and the note that says so)."""
    if not factor > 1.0:
        return se
    if notes is not None:
        notes.append(f"the rungs were sampled together and exchange states, so their errors are correlated: the "
                     f"sampling se is {factor:.2f}x what independent rungs would have (the MCSE of the weighted "
                     "sum of log p(y|x) over rungs, draw by draw, against that of its terms).")
    return se * factor


def shared_iteration_factor(t, loglik, chain, rule="corrected", from_prior=True):
    """How much larger the sampling error of TI is than independent rungs' errors would make it, where
    the rungs' i-th draws were made together (a population run: ``loglik`` w arrays of one length, the
    same ``chain`` labels): the MCSE of sum_k a_k log p(y|x_k), draw by draw (a the quadrature's weights
    of the means), over the root sum of squares of a_k x the MCSE of rung k.  Exchange moves pass states
    between neighbouring rungs, so their averages err together: on the sinusoid frequency model (16
    rungs, 4 x 400 iterations) the z of the log evidence over 8 seeds had an rms of 1.7-1.9 without this
    factor (PyMC 6 and 5).  1 where the arrays are not aligned."""
    lengths = {np.size(ll) for ll in loglik}
    if len(lengths) != 1 or chain is None or any(c is None or not np.array_equal(c, chain[0]) for c in chain):
        return 1.0
    a, _ = quadrature_weights(t, rule, from_prior)
    L = np.column_stack([np.asarray(ll, dtype=float) for ll in loglik])
    apart = float(np.sqrt(np.sum([(a[k] * mcse_mean(L[:, k], chain[0])) ** 2 for k in range(L.shape[1])])))
    if not apart > 0:
        return 1.0
    return float(mcse_mean(L @ a, chain[0]) / apart)


def ti_from_arrays(temperatures, loglik, samples, grad_loglik, grad_logprior, *, chain=None, method="vvcv",
                   rule="corrected", group_size=4, B="learn", progressbar=False, random_seed=0, weights=None,
                   refine=None, prior_loglik=None, shared_iterations=False, **options):
    """Log evidence by TI from per-rung arrays.

    Parameters
    ----------
    temperatures : array (w,)
        Increasing from 0 (prior) to 1 (posterior).
    loglik : sequence of w arrays (m_i,)
        log p(y|x) at the draws of each rung.
    samples : sequence of w arrays (m_i, d)
        The draws, on the unconstrained space.
    grad_loglik, grad_logprior : sequences of w arrays (m_i, d)
        Gradients of log p(y|x) and of log p(x) (Jacobian included) at the draws; the score of
        rung t is t * grad_loglik + grad_logprior.
    chain : sequence of w arrays, optional
        Chain labels of MCMC draws (ESS-based standard errors).
    method : {"vvcv", "cti", "cf", "secf", "auto", "mc"}
        Per-rung estimator: vv-CVs over groups of ``group_size`` neighbouring rungs (default),
        controlled TI (ZV-CVs of order 2), control functionals, semi-exact CFs, the best per
        rung, or plain averages.
    rule : {"corrected", "trapezoid"}
        Quadrature over t; "corrected" is Friel, Hurn and Wyse (2014).
    group_size, B : vv-CV grouping and task matrix.
    weights : sequence of w arrays (m_i,) or None, optional
        Importance weights of each rung's draws, e.g. SMC particles before resampling (None for
        an unweighted rung).  Weighted rungs need ``method="cti"`` (weighted ZV-CVs) or
        ``"mc"`` (self-normalised averages); their se linearises the ratio estimator and a
        PSIS k-hat of the weights above 0.7 marks the rung unreliable.
    refine : None, True or float in (0, 1)
        Reweight the draws onto a finer ladder, as ZVCV's ``Expand_Temperatures``: where the
        conditional ESS from a rung to the next is below this target (True: 0.99), rungs are
        added and estimated from the lower rung's draws with weights exp((t - t_i) log p(y|x)),
        by weighted ZV-CVs (weighted averages with ``method="mc"``); no new sampling.  Lowers
        the quadrature error where E_t[log p(y|x)] bends between rungs.  The result's
        ``temperatures`` and ``moments`` then cover the refined ladder.
    prior_loglik : array (n,) or None, optional
        log p(y|x) at n independent draws of the prior.  Where the first rungs are singular
        (crossed by stepping stones), the steps from t = 0 are then taken by importance sampling
        from these draws as far as their weights' ESS allows (see
        :func:`pymc_cv.evidence.stepping_stone.stepping_stone`); the PyMC drivers draw them.
    shared_iterations : bool
        The rungs' i-th draws were made together (one population-MCMC run with exchange moves, as
        ``res.draws`` of ``thermodynamic_integration(sampler="population")``): their errors are
        correlated, and the sampling se is scaled by :func:`shared_iteration_factor`.  Default False:
        independent rungs.
    **options : passed to :func:`pymc_cv.cv_estimate` / :func:`pymc_cv.vvcv_estimate`.

    Returns
    -------
    TIResult

    Examples
    --------
    Exact draws of the power posteriors of x ~ N(0, 1), y | x ~ N(x, 1), y = 0, where
    log p(y) = log N(0; 0, 2):

    >>> import numpy as np
    >>> from pymc_cv.evidence import power_ladder, ti_from_arrays
    >>> rng = np.random.default_rng(1)
    >>> t = power_ladder(11)
    >>> xs = [rng.normal(0, (1 + ti) ** -0.5, size=(50, 1)) for ti in t]
    >>> ll = [-0.5 * np.log(2 * np.pi) - 0.5 * x[:, 0] ** 2 for x in xs]
    >>> res = ti_from_arrays(t, ll, xs, [-x for x in xs], [-x for x in xs], method="cti")
    >>> bool(abs(res.log_evidence - (-0.5 * np.log(4 * np.pi))) < 1e-3)
    True
    """
    t = np.asarray(temperatures, dtype=float)
    check_cv_options(options, ti_from_arrays)
    settings = TISettings(method, rule, group_size, B, progressbar, random_seed, refine, options)
    return estimate_log_evidence(t, loglik, samples, grad_loglik, grad_logprior, chain, settings, weights=weights,
                                 prior_loglik=prior_loglik, shared_iterations=shared_iterations)
