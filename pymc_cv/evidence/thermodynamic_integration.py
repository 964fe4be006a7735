"""Thermodynamic integration (TI) for the log evidence, with CVs at every rung.

log p(y) = int_0^1 E_t[log p(y|x)] dt, E_t under the power posterior p_t(x) ~ p(y|x)^t p(x).
Three entry points share one estimator:

- :func:`thermodynamic_integration` samples the power posteriors of a PyMC model itself;
- :func:`ti_from_draws` takes one InferenceData per rung that the user sampled;
- :func:`ti_from_population` takes a population-MCMC run (all rungs in one InferenceData);
- :func:`ti_from_arrays` takes plain arrays (what the Stan route produces).

Where log p(y|x) has a lower tail of infinite variance at the first rungs (a prior with mass where
the likelihood vanishes), E_t[log p(y|x)] is singular at t = 0: those rungs are crossed by
stepping stones (:mod:`.stepping_stone`) and TI starts after them.
"""

from __future__ import annotations

import contextlib
import time

import numpy as np

from ..core.score_check import ScoreMismatchError
from .ladder import power_ladder, refine_ladder
from .quadrature import RULES, integrate, quadrature_error
from .result import TIResult
from .rung_moments import METHODS, check_rung_counts, concat_moments, rung_moments
from .stepping_stone import SINGULAR_KHAT, singular_start, stepping_stone

__all__ = ["thermodynamic_integration", "ti_from_draws", "ti_from_arrays", "ti_from_pystan", "ti_from_population"]


def _estimate(t, loglik, samples, grad_loglik, grad_logprior, chain, method, rule, group_size, B, progressbar,
              random_seed, options, weights=None, refine=None, moments=None):
    from ..progress import progress_bar

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
    sampled, source = ts, None
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
    notes = list(mom.notes)
    reliable = _judge(sampled, loglik, chain, mom, qerr, sampling_se, notes, first=head)
    stones = None
    if head:
        stones = stepping_stone(t[:head + 1], head_loglik, head_chain)
        value, mc_value = value + stones.log_evidence, mc_value + stones.log_evidence
        sampling_se, mc_sampling = np.hypot(sampling_se, stones.se), np.hypot(mc_sampling, stones.se)
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
    return (f"log p(y|x) has a lower tail of infinite variance at the rungs below t = {t[head]:.3g} (Pareto "
            f"k-hat above {SINGULAR_KHAT}): the prior puts mass where the likelihood vanishes (typically a scale "
            "parameter near 0), so E_t[log p(y|x)] is singular at t = 0 and no quadrature over the ladder "
            f"integrates it. Rungs 0-{head - 1} are crossed by stepping stones (log Z(t = {t[head]:.3g}) = "
            f"{stones.log_evidence:.4g} +/- {stones.se:.2g}), TI ({method}) covers t >= {t[head]:.3g}.")


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
    from .reweighting import reweighted_ladder

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
    from ..compat import ess_bulk, rhat

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
        out[i] = rhat(per_chain)
        ess = sum(float(ess_bulk(x[None, :])) for x in per_chain if np.ptp(x) > 0)
        if ess > 0:
            limit[i] = 1.0 + max(_RHAT_MAX - 1.0, _RHAT_NOISE / ess)
    return out, limit


def _estimate_rungs(t, rungs, method, rule, group_size, B, progressbar, random_seed, options, refine=None,
                    moments=None, **seconds):
    """``_estimate`` on per-rung tuples (loglik, samples, grad_loglik, grad_logprior, chain), keeping
    the sampled rungs in ``.draws`` so other estimators can be run on the same ones
    (``ti_from_arrays(**res.draws, ...)``; with ``refine=`` ``res.temperatures`` is the refined ladder)."""
    ll, X, gl, gp, ch = map(list, zip(*rungs))
    res = _estimate(t, ll, X, gl, gp, ch, method, rule, group_size, B, progressbar, random_seed, options,
                    refine=refine, moments=moments)
    res.seconds.update(seconds)
    res.draws = {"temperatures": np.asarray(t, dtype=float), "loglik": ll, "samples": X, "grad_loglik": gl,
                 "grad_logprior": gp, "chain": ch}
    return res


def ti_from_arrays(temperatures, loglik, samples, grad_loglik, grad_logprior, *, chain=None, method="vvcv",
                   rule="corrected", group_size=4, B="learn", progressbar=False, random_seed=0, weights=None,
                   refine=None, **options):
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
    return _estimate(t, loglik, samples, grad_loglik, grad_logprior, chain, method, rule, group_size, B,
                     progressbar, random_seed, options, weights=weights, refine=refine)


def _rung_seeds(random_seed, w):
    return [int(child.generate_state(1)[0]) for child in np.random.SeedSequence(random_seed).spawn(w)]


# an exchange acceptance rate below this between neighbouring rungs: states barely travel along the
# ladder there, so the population is no better than independent chains at that step
_LOW_EXCHANGE = 0.1


def ti_from_population(idata, model=None, *, method="vvcv", rule="corrected", group_size=4, B="learn",
                       progressbar=True, compile_kwargs=None, random_seed=0, refine=None, **options):
    """Log evidence by TI from a population-MCMC run: every temperature in one InferenceData.

    Parameters
    ----------
    idata : InferenceData (DataTree on ArviZ 1)
        With a ``population`` group whose dims are (chain, draw, temperature, ...) and whose
        ``temperature`` coordinate is the ladder (0 first, 1 last), as
        :func:`pymc_cv.sample_population` returns.  It holds ``loglik`` and either the model's
        value variables (unconstrained; the gradients are then computed from ``model``) or, from
        any other sampler, ``samples``, ``grad_loglik`` and ``grad_logprior`` with a last dim
        for the d parameters.
    model : pymc.Model, optional
        Needed when the group has the value variables; taken from the context when not given.
    method, rule, group_size, B, progressbar, random_seed, refine, **options
        As in :func:`ti_from_arrays`.
    compile_kwargs : dict, optional
        For the gradient terms.

    Returns
    -------
    TIResult
        Its notes also give the exchange acceptance rates, when the run recorded them
        (``sample_stats.exchange_accept``), and name the steps of the ladder where they are low.

    Examples
    --------
    >>> import numpy as np, pymc as pm, pymc_cv
    >>> with pm.Model() as model:
    ...     x = pm.Normal("x", 0, 1)
    ...     y = pm.Normal("y", x, 1, observed=0.0)
    >>> idata = pymc_cv.sample_population(model, 6, draws=200, tune=200, random_seed=1, progressbar=False)
    >>> res = pymc_cv.ti_from_population(idata, model, method="cti", progressbar=False)
    >>> bool(abs(res.log_evidence - (-0.5 * np.log(4 * np.pi))) < 3 * res.se + 1e-3)
    True
    """
    from ..adapters.population import population_group

    pop = population_group(idata)
    for name in ("loglik", "temperature"):
        if name not in pop.variables:
            raise ValueError(f"the population group has no {name!r}; see pymc_cv.ti_from_population's docstring "
                             "for the layout.")
    t = np.asarray(pop["temperature"].values, dtype=float)
    ll = np.asarray(pop["loglik"].transpose("chain", "draw", "temperature").values, dtype=float)
    n_chain, n_draw, w = ll.shape
    start = time.perf_counter()
    if all(k in pop for k in ("samples", "grad_loglik", "grad_logprior")):
        X, gl, gp = (np.asarray(pop[k].transpose("chain", "draw", "temperature", ...).values, dtype=float)
                     for k in ("samples", "grad_loglik", "grad_logprior"))
    else:
        X, gl, gp = _population_terms(pop, model, compile_kwargs)
    X, gl, gp = (a.reshape(n_chain, n_draw, w, -1) for a in (X, gl, gp))
    chain = np.repeat(np.arange(n_chain), n_draw)
    rungs = [(ll[:, :, i].reshape(-1), X[:, :, i].reshape(n_chain * n_draw, -1),
              gl[:, :, i].reshape(n_chain * n_draw, -1), gp[:, :, i].reshape(n_chain * n_draw, -1), chain)
             for i in range(w)]
    res = _estimate_rungs(t, rungs, method, rule, group_size, B, progressbar, random_seed, options, refine=refine,
                          compile=time.perf_counter() - start)
    _exchange_notes(res, idata, t)
    return res


def _population_terms(pop, model, compile_kwargs):
    import pymc as pm

    from ..adapters.population import value_draws
    from ..adapters.pymc_tempering import compiled, rung_arrays

    model = pm.modelcontext(model)
    vals = value_draws(pop, model, ("chain", "draw", "temperature"))
    terms, _ = compiled(model, compile_kwargs, need_nuts=False)
    _, X, gl, gp, _ = rung_arrays(vals, terms, None)
    return X, gl, gp


def _exchange_notes(res, idata, t):
    from .. import compat

    if "sample_stats" not in compat.group_names(idata) or "exchange_accept" not in compat.group(idata, "sample_stats"):
        return
    acc = np.asarray(compat.group(idata, "sample_stats")["exchange_accept"].values, dtype=float)
    rates = np.nanmean(acc.reshape(-1, acc.shape[-1]), axis=0)
    res.notes.append(f"exchange acceptance rates between neighbouring rungs: min {np.nanmin(rates):.2f}, "
                     f"median {np.nanmedian(rates):.2f}.")
    low = np.flatnonzero(rates < _LOW_EXCHANGE)
    if low.size:
        res.notes.append("few exchanges between rungs " + ", ".join(
            f"{k}-{k + 1} (t = {t[k]:.3g}-{t[k + 1]:.3g}, rate {rates[k]:.2f})" for k in low[:8])
            + ": states rarely travel along the ladder there; add temperatures between them.")


def ti_from_draws(idatas, temperatures, model, *, method="vvcv", rule="corrected", group_size=4, B="learn",
                  progressbar=True, compile_kwargs=None, random_seed=0, **options):
    """Log evidence by TI from power-posterior draws a user already has (PyMC).

    Parameters
    ----------
    idatas : sequence of w arviz.InferenceData
        One per temperature, each with a posterior sampled from p_t(x) ~ p(y|x)^t p(x) of
        ``model`` (e.g. by a tempered copy of it).
    temperatures : array (w,)
    model : pymc.Model
        The untempered model: it gives log p(y|x) and the gradients at every draw.
    method, rule, group_size, B, **options : as in :func:`ti_from_arrays`.
    compile_kwargs : dict, optional
        For the batched per-draw terms, e.g. ``{"mode": "NUMBA"}`` for models with a scan.

    Returns
    -------
    TIResult
        With the per-draw terms in ``.draws`` (as :func:`thermodynamic_integration`).

    Examples
    --------
    A normal mean with known noise: the evidence is a 3-d normal density.

    >>> import numpy as np, pymc as pm, pymc_cv
    >>> from scipy import stats
    >>> from pymc_cv.evidence import power_ladder
    >>> y = np.array([0.3, -0.5, 1.2])
    >>> with pm.Model() as model:
    ...     mu = pm.Normal("mu", 0, 2)
    ...     obs = pm.Normal("y", mu, 1, observed=y)
    >>> def power_posterior(t):                    # p(y | mu)^t p(mu)
    ...     with pm.Model() as tempered:
    ...         mu = pm.Normal("mu", 0, 2)
    ...         pm.Potential("tempered_loglik", t * pm.logp(pm.Normal.dist(mu, 1), y).sum())
    ...     return tempered
    >>> t = power_ladder(9)
    >>> idatas = [pm.sample(200, tune=200, chains=2, cores=1, model=power_posterior(ti), random_seed=i,
    ...                     progressbar=False, compute_convergence_checks=False) for i, ti in enumerate(t)]
    >>> res = pymc_cv.ti_from_draws(idatas, t, model, progressbar=False)
    >>> exact = stats.multivariate_normal(np.zeros(3), np.eye(3) + 4.0).logpdf(y)
    >>> bool(abs(res.log_evidence - exact) < 3 * res.se < 0.1)
    True
    """
    from ..adapters.pymc_tempering import loglik_terms, rung_arrays_of

    t = np.asarray(temperatures, dtype=float)
    if len(idatas) != t.size:
        raise ValueError(f"{len(idatas)} InferenceData for {t.size} temperatures; pass one per rung.")
    start = time.perf_counter()
    terms = loglik_terms(model, compile_kwargs)
    rungs = [rung_arrays_of(idata, model, terms) for idata in idatas]
    return _estimate_rungs(t, rungs, method, rule, group_size, B, progressbar, random_seed, options,
                           terms=time.perf_counter() - start)


def ti_from_pystan(fits, program_code, data, temperatures, *, temperature="temperature", method="vvcv",
                   rule="corrected", group_size=4, B="learn", progressbar=True, random_seed=0, **options):
    """Log evidence by TI from PyStan fits of a tempered Stan program, one fit per temperature.

    Parameters
    ----------
    fits : sequence of w stan.fit.Fit
        Fit i sampled the program built with ``data[temperature] = temperatures[i]``.
    program_code : str
        The Stan program; its log-likelihood is multiplied by the data variable ``temperature``
        and keeps its normalising constants (``target += t * ..._lpdf``), e.g.
        ``stan_models/van_der_pol.stan``.
    data : dict
        The program's data (any value for the temperature).
    temperatures : array (w,)
    method, rule, group_size, B, **options : as in :func:`ti_from_arrays`.

    Returns
    -------
    TIResult
        With the per-draw terms in ``.draws`` (as :func:`thermodynamic_integration`).

    Examples
    --------
    A normal mean with known noise, as in :func:`pymc_cv.from_pystan`: the evidence is a 3-d
    normal density.  One build serves every rung (httpstan caches by program).

    >>> import numpy as np, stan, pymc_cv
    >>> from scipy import stats
    >>> from pymc_cv.evidence import power_ladder
    >>> program = ("data { int<lower=1> N; vector[N] y; real<lower=0, upper=1> temperature; } "
    ...            "parameters { real mu; } "
    ...            "model { mu ~ normal(0, 2); target += temperature * normal_lpdf(y | mu, 1); }")
    >>> data = {"N": 3, "y": [0.3, -0.5, 1.2], "temperature": 1.0}
    >>> t = power_ladder(9)
    >>> fits = []
    >>> for i, ti in enumerate(t):
    ...     posterior = stan.build(program, data={**data, "temperature": float(ti)}, random_seed=i)
    ...     fits.append(posterior.sample(num_chains=2, num_samples=200))   # doctest: +ELLIPSIS
    Building...
    >>> res = pymc_cv.ti_from_pystan(fits, program, data, t, progressbar=False)
    >>> exact = stats.multivariate_normal(np.zeros(3), np.eye(3) + 4.0).logpdf(data["y"])
    >>> bool(abs(res.log_evidence - exact) < 3 * res.se < 0.1)
    True
    """
    from ..adapters.stan import PowerPosteriorTerms

    t = np.asarray(temperatures, dtype=float)
    if len(fits) != t.size:
        raise ValueError(f"{len(fits)} fits for {t.size} temperatures; pass one per rung.")
    start = time.perf_counter()
    terms = PowerPosteriorTerms(program_code, data, temperature)
    rungs = [terms(fit) for fit in fits]
    return _estimate_rungs(t, rungs, method, rule, group_size, B, progressbar, random_seed, options,
                           terms=time.perf_counter() - start)


def _ladder(temperatures):
    if temperatures is None:
        return power_ladder(31), False
    if isinstance(temperatures, str):
        if temperatures != "adaptive":
            raise ValueError(f"temperatures={temperatures!r}; use None, an int, an array or 'adaptive'.")
        return power_ladder(11), True
    if np.ndim(temperatures) == 0:
        return power_ladder(int(temperatures)), False
    return np.asarray(temperatures, dtype=float), False


def thermodynamic_integration(model, temperatures=None, *, draws=100, tune=500, chains=2, method="vvcv",
                              rule="corrected", sampler="nuts", random_seed=None, group_size=4, B="learn",
                              target_cess=0.9, max_rungs=64, progressbar=True, compile_kwargs=None,
                              client=None, adapt_temperatures=False, refine=None, **options):
    """Log evidence of a PyMC model by thermodynamic integration with control variates.

    Samples the power posteriors p_t(x) ~ p(y|x)^t p(x) (likelihood terms, i.e. the observed
    variables, scaled by t), records log p(y|x) and the gradients of the log-likelihood and of
    the log-prior at every draw, and integrates E_t[log p(y|x)] over t.

    Parameters
    ----------
    model : pymc.Model
        With observed variables and continuous free variables; no Potentials.
    temperatures : None, int, array or "adaptive"
        None: the power ladder t_i = ((i-1)/30)^5 with 31 rungs; int: that many rungs of it;
        an array: your ladder (0 first, 1 last); "adaptive": start from 11 rungs of the power
        ladder and add rungs where the conditional ESS between neighbours is below
        ``target_cess`` (as ZVCV's Expand_Temperatures), up to ``max_rungs``.
    draws, tune, chains : int
        Per rung, for NUTS (one compiled step reused across rungs).
    method : {"vvcv", "cti", "cf", "secf", "auto", "mc"}
        Per-rung estimator (see :func:`ti_from_arrays`).  The draws depend only on
        ``random_seed`` and the ladder, never on ``method``: compare estimators on the same draws
        with ``ti_from_arrays(**result.draws, method=...)``, or ``result.mc_log_evidence``.
    rule : {"corrected", "trapezoid"}
    sampler : {"nuts", "population", "smc"}
        "nuts": an independent NUTS run per rung.  "population": all rungs sampled together by
        :func:`pymc_cv.sample_population` (one NUTS walker per temperature, exchange moves
        between neighbours), which finds modes that independent runs at intermediate temperatures
        miss; ``draws``/``tune`` are then iterations of the whole population.  "smc": PyMC's
        sequential Monte Carlo (IMH kernel); its tempering stages become the rungs
        (``temperatures`` is then ignored, ``draws`` is the number of particles).
    random_seed : int, optional
    group_size, B : vv-CV grouping (consecutive rungs) and task matrix.
    progressbar : bool
    compile_kwargs : dict, optional
        For NUTS and the per-draw terms, e.g. ``{"mode": "NUMBA"}`` for ODE models with a scan.
    adapt_temperatures : bool
        With ``sampler="population"``: move the rungs before sampling so that neighbours exchange
        states equally often (see :func:`pymc_cv.sample_population`).  Experimental for the
        evidence: the result's notes say why.
    refine : None, bool or float in (0, 1)
        After sampling, reweight the draws onto a finer ladder where neighbouring rungs have a
        conditional ESS below this target (see :func:`ti_from_arrays`); no new sampling.  None
        (default): True with ``sampler="smc"``, whose stages are few (README model, 3 seeds: errors
        0.16-0.35 nats with the stages alone, 0.03-0.08 refined), off otherwise; False: off.
    client : dask.distributed.Client, optional
        Sample the rungs (``sampler="nuts"``) or the chains (``sampler="population"``, whose
        walkers are coupled) on the cluster's workers; the same seed gives the same numbers
        with or without it.  The per-rung CVs are fitted here, with this machine's BLAS threads
        (on one-thread workers they took longer: bench/dask_ti.py), each group of rungs as soon
        as its rungs are back, while the workers sample the others (``evidence.pipeline``).
    **options : passed to the CV estimators.

    Returns
    -------
    TIResult
        ``.log_evidence``, ``.se``, per-rung moments in ``.moments``, and the draws in
        ``.draws`` (keys temperatures, loglik, samples, grad_loglik, grad_logprior, chain: the
        arguments of :func:`ti_from_arrays` for the sampled rungs).

    Examples
    --------
    >>> import numpy as np, pymc as pm, pymc_cv
    >>> with pm.Model() as model:
    ...     x = pm.Normal("x", 0, 1)
    ...     y = pm.Normal("y", x, 1, observed=0.0)
    >>> res = pymc_cv.thermodynamic_integration(model, 11, draws=100, tune=200, method="cti",
    ...                                         random_seed=1, progressbar=False)
    >>> bool(abs(res.log_evidence - (-0.5 * np.log(4 * np.pi))) < 3 * res.se + 1e-3)
    True
    """
    from ..adapters.pymc_tempering import check_temperable, compiled, rung_arrays
    from ..cluster import check_client

    check_temperable(model)
    if sampler not in ("nuts", "smc", "population"):
        raise ValueError(f"sampler={sampler!r}; use 'nuts', 'population' or 'smc'.")
    if method not in METHODS or rule not in RULES:
        raise ValueError(f"method={method!r}, rule={rule!r}; use a method of {sorted(METHODS)} and a rule of {RULES}.")
    for name, val in (("draws", draws), ("chains", chains)):
        if int(val) != val or val < 1:
            raise ValueError(f"{name}={val!r}; use a positive integer.")
    if adapt_temperatures and sampler != "population":
        raise ValueError("adapt_temperatures=True evens out the exchange rates of sampler='population'; for "
                         "independent rungs use temperatures='adaptive' (rungs added by conditional ESS).")
    if check_client(client) is not None and sampler == "smc":
        raise ValueError("client= distributes rungs (sampler='nuts') or chains (sampler='population'); the "
                         "stages of SMC depend on each other. Drop client or choose another sampler.")
    refine = True if refine is None and sampler == "smc" else refine
    start = time.perf_counter()
    # with a client the workers compile what they sample with, and NUTS rungs come back with their
    # gradients: nothing to compile here then (the workers start on the rungs sooner)
    terms = tempered = None
    if sampler != "nuts" or client is None:
        terms, tempered = compiled(model, compile_kwargs, need_nuts=sampler != "smc" and client is None)
    compile_seconds = time.perf_counter() - start
    start = time.perf_counter()
    if sampler == "population":
        return _ti_population(model, tempered, temperatures, draws, tune, chains, method, rule, random_seed,
                              group_size, B, progressbar, compile_kwargs, {**options, "refine": refine},
                              compile_seconds, client, adapt_temperatures)
    moments = None
    if sampler == "smc":
        from ..adapters.pymc_tempering import smc_rungs

        t, rungs = smc_rungs(model, draws=int(draws), random_seed=random_seed, progressbar=progressbar,
                             compile_kwargs=compile_kwargs)
        rungs = [rung_arrays(vals, terms, np.zeros(vals[0].shape[0], dtype=int)) for vals in rungs]
    else:
        fitter = None
        if client is not None and method != "mc" and not isinstance(temperatures, str):
            from .pipeline import GroupFitter

            # fit each group of rungs here while the workers sample the others
            fitter = GroupFitter(_ladder(temperatures)[0], method, group_size, B,
                                 0 if random_seed is None else random_seed, options)
        t, rungs = _nuts_rungs(model, temperatures, int(draws), int(tune), int(chains), random_seed, target_cess,
                               max_rungs, progressbar, compile_kwargs, client,
                               on_rung=None if fitter is None else fitter.add)
        if fitter is not None:
            moments = fitter.moments()
    with _smc_particles_named(sampler, len(t)):
        return _estimate_rungs(t, rungs, method, rule, group_size, B, progressbar,
                               0 if random_seed is None else random_seed, options, refine=refine, moments=moments,
                               sampling=time.perf_counter() - start, compile=compile_seconds)


@contextlib.contextmanager
def _smc_particles_named(sampler, stages):
    """With SMC stages as rungs the scores are the model's own: a failed Stein check means that the
    particles of a stage do not follow its power posterior, and the error says so."""
    try:
        yield
    except ScoreMismatchError as err:
        if sampler != "smc":
            raise
        raise ScoreMismatchError(
            f"{err} With sampler='smc' the scores are the model's own: PyMC's SMC particles at that stage do not "
            f"follow the power posterior (its {stages} stages are too coarse for this model, or its particles too "
            "few). Use sampler='nuts' or 'population', or more draws.") from err


def _nuts_rungs(model, temperatures, draws, tune, chains, random_seed, target_cess, max_rungs, progressbar,
                compile_kwargs, client, on_rung=None):
    """The ladder and its rungs' arrays, each rung an independent NUTS run (here or on ``client``);
    ``on_rung(i, arrays)`` as rung i of a fixed ladder finishes."""
    from ..adapters.pymc_tempering import model_token, sample_rung
    from ..cluster import map_units

    t, adaptive = _ladder(temperatures)
    rungs = {}
    token = None if client is None else model_token(model)  # workers reuse what they compiled for it

    def run(ladder):
        # a rung's seed depends on its temperature's place in the first ladder it appeared in
        seeds = dict(zip(ladder, _rung_seeds(random_seed, len(ladder))))
        todo = [(ti, seeds[ti]) for ti in ladder if ti not in rungs]
        where = {ti: i for i, ti in enumerate(ladder)}
        done = None if on_rung is None else (lambda k, arrays: on_rung(where[todo[k][0]], arrays))
        out = map_units(sample_rung, todo, shared=(model, token, compile_kwargs, draws, tune, chains), client=client,
                        progressbar=progressbar, description="Sampling power posteriors", on_result=done)
        rungs.update({ti: arrays for (ti, _), arrays in zip(todo, out)})

    run(t)
    while adaptive and t.size < max_rungs:
        new = refine_ladder(t, [rungs[ti][0] for ti in t], target_cess=target_cess, max_new=max_rungs - t.size)
        if new.size == 0:
            break
        t = np.sort(np.concatenate([t, new]))
        run(t)
    return t, [rungs[ti] for ti in t]


def _ti_population(model, tempered, temperatures, draws, tune, chains, method, rule, random_seed, group_size, B,
                   progressbar, compile_kwargs, options, compile_seconds, client, adapt_temperatures):
    from ..adapters.population import _population_ladder, run_population

    if isinstance(temperatures, str):
        raise ValueError("temperatures='adaptive' refines the ladder between independent NUTS runs; with "
                         "sampler='population' give the ladder (an int or an array).")
    t = _population_ladder(power_ladder(31) if temperatures is None else temperatures)
    start = time.perf_counter()
    idata = run_population(model if tempered is None else tempered, t, draws=int(draws), tune=int(tune),
                           chains=int(chains), swap_every=1, random_seed=random_seed, progressbar=progressbar,
                           compile_kwargs=compile_kwargs, client=client,
                           adapt_temperatures=adapt_temperatures)
    sampling = time.perf_counter() - start
    res = ti_from_population(idata, model, method=method, rule=rule, group_size=group_size, B=B,
                             progressbar=progressbar, compile_kwargs=compile_kwargs,
                             random_seed=0 if random_seed is None else random_seed, **options)
    res.seconds.update(sampling=sampling, compile=compile_seconds)
    if adapt_temperatures:
        # measured in bench/population_ti.py: 2 of 10 runs off by 5 se, unflagged (0 of 10 on fixed ladders)
        res.notes.append("the ladder was moved to even out exchange rates, not to reduce the quadrature error; on "
                         "multimodal test models the se of such runs was sometimes too small (5 se off). Compare "
                         "with a run on a fixed ladder before relying on it.")
    return res
