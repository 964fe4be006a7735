"""Thermodynamic integration on a PyMC model: the power posteriors sampled, then the array estimator.

- :func:`thermodynamic_integration` samples the power posteriors of a PyMC model itself (NUTS per
  rung, population MCMC with exchange moves, or PyMC's SMC stages);
- :func:`ti_from_draws` takes one InferenceData per rung that the user sampled;
- :func:`ti_from_population` takes a population-MCMC run (all rungs in one InferenceData).

Each turns its draws into per-rung arrays once (log p(y|x), draws, gradients) and hands them to
:func:`pymc_cv.evidence.thermodynamic_integration.estimate_from_rungs`.  Where the first rungs turn out
singular (a scale parameter near 0), each also draws the model's prior (``tempering.prior_loglik``) for
the first stepping stones.
"""

from __future__ import annotations

import contextlib
import time
from typing import NamedTuple

import numpy as np

from .. import compat
from ..cluster import check_client, map_units
from ..core.score_check import ScoreMismatchError
from ..evidence.importance import importance_evidence, weigh_importance
from ..evidence.ladder import power_ladder, refine_ladder
from ..evidence.pipeline import GroupFitter
from ..evidence.quadrature import RULES
from ..evidence.rung_moments import METHODS, RungArrays, check_cv_options
from ..evidence.thermodynamic_integration import TISettings, estimate_from_rungs
from .population import population_group, population_ladder, run_population, value_draws
from .tempering import (
    check_temperable,
    compiled,
    loglik_terms,
    model_token,
    prior_loglik,
    rung_arrays,
    rung_arrays_of,
    sample_rung,
    smc_rungs,
)

__all__ = ["thermodynamic_integration", "ti_from_draws", "ti_from_population"]


def _rung_seeds(random_seed, w):
    return [int(child.generate_state(1)[0]) for child in np.random.SeedSequence(random_seed).spawn(w)]


class _Sampling(NamedTuple):
    """How ``thermodynamic_integration`` samples: per rung (NUTS) or per population iteration."""

    draws: int
    tune: int
    chains: int
    random_seed: object
    progressbar: bool
    compile_kwargs: dict | None
    client: object


# an exchange acceptance rate below this between neighbouring rungs: states barely travel along the
# ladder there, so the population is no better than independent chains at that step
_LOW_EXCHANGE = 0.1


class _PriorDraws:
    """log p(y|x) at independent draws of ``model``'s prior, drawn only when the estimator asks (when the
    first rungs are singular and crossed by stepping stones)."""

    def __init__(self, model, random_seed, compile_kwargs):
        self.model, self.compile_kwargs = model, compile_kwargs
        self.seed = np.random.default_rng([0 if random_seed is None else random_seed, 1])
        self.reason = None

    def __call__(self):
        if self.model is None:
            self.reason = "no model was given to draw the prior from"
            return None
        terms, _ = compiled(self.model, self.compile_kwargs, need_nuts=False)
        ll, self.reason = prior_loglik(self.model, terms, random_seed=self.seed, compile_kwargs=self.compile_kwargs)
        return ll

    def estimate(self, t, rungs, settings, **kwargs):
        res = estimate_from_rungs(t, rungs, settings, prior_loglik=self, **kwargs)
        if self.reason:
            res.notes.append(f"{self.reason}: the first stepping stones use the rungs' MCMC draws, which visit "
                             "the region where the likelihood vanishes too seldom or too often at small t.")
        return res


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
    check_cv_options(options, ti_from_population)
    settings = TISettings(method, rule, group_size, B, progressbar, random_seed, refine, options)
    return _estimate_population(idata, model, settings, compile_kwargs)


def _estimate_population(idata, model, settings, compile_kwargs):
    """The population run's rungs as arrays, the estimate from them, and the exchange notes."""
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
    rungs = [RungArrays(ll[:, :, i].reshape(-1), X[:, :, i].reshape(n_chain * n_draw, -1),
                        gl[:, :, i].reshape(n_chain * n_draw, -1), gp[:, :, i].reshape(n_chain * n_draw, -1), chain)
             for i in range(w)]
    res = _PriorDraws(_model_or_none(model), settings.random_seed, compile_kwargs).estimate(
        t, rungs, settings, shared_iterations=True, compile=time.perf_counter() - start)
    _exchange_notes(res, idata, t)
    return res


def _model_or_none(model):
    import pymc as pm  # PyMC loads on first use: it takes seconds

    try:
        return pm.modelcontext(model)
    except TypeError:  # no model given and none on the context stack: the run's own arrays suffice
        return None


def _population_terms(pop, model, compile_kwargs):
    import pymc as pm  # PyMC loads on first use: it takes seconds

    model = pm.modelcontext(model)
    vals = value_draws(pop, model, ("chain", "draw", "temperature"))
    terms, _ = compiled(model, compile_kwargs, need_nuts=False)
    _, X, gl, gp, _ = rung_arrays(vals, terms, None)
    return X, gl, gp


def _exchange_notes(res, idata, t):

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

    check_cv_options(options, ti_from_draws)
    t = np.asarray(temperatures, dtype=float)
    if len(idatas) != t.size:
        raise ValueError(f"{len(idatas)} InferenceData for {t.size} temperatures; pass one per rung.")
    start = time.perf_counter()
    terms = loglik_terms(model, compile_kwargs)
    rungs = [rung_arrays_of(idata, model, terms) for idata in idatas]
    settings = TISettings(method, rule, group_size, B, progressbar, random_seed, None, options)
    return _PriorDraws(model, random_seed, compile_kwargs).estimate(t, rungs, settings,
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


# what each sampler runs when not told (bench/evidence.py): SMC's stages with 1,000 particles and
# ZV-CVs per rung were within 0.03 nats on the README model, eight schools (both forms) and a
# heavy-tailed prior in 5 of 5 seeds each, in 0.9-2.1 s; NUTS per rung with vv-CVs took 18-75 s
_DEFAULTS = {"smc": {"draws": 1000, "method": "cti"},
             "nuts": {"draws": 100, "tune": 500, "chains": 2, "method": "vvcv"},
             "population": {"draws": 100, "tune": 500, "chains": 2, "method": "vvcv"}}


def _resolve_sampler(sampler, temperatures, client, given):
    """The sampler and its settings: ``given`` holds draws, tune, chains and method as passed (None:
    the sampler's default).  SMC picks its own stages and moves its particles with its own kernel, so
    a ladder, tune or chains given with it would go unused: an error."""
    explicit = sampler is not None
    if not explicit:
        sampler = "smc" if temperatures is None and client is None else "nuts"
    if sampler not in _DEFAULTS:
        raise ValueError(f"sampler={sampler!r}; use 'smc', 'nuts' or 'population'.")
    if sampler == "smc" and check_client(client) is not None:
        raise ValueError("client= distributes rungs (sampler='nuts') or chains (sampler='population'); the "
                         "stages of SMC depend on each other. Drop client or choose another sampler.")
    if sampler == "smc":
        unused = [name for name in ("tune", "chains") if given[name] is not None]
        if temperatures is not None:
            unused.insert(0, "temperatures")
        if unused:
            which = "sampler='smc'" + ("" if explicit else " (the default)")
            raise ValueError(f"{', '.join(unused)} given with {which}, which picks its own stages and moves one "
                             "population of particles (draws= is their number): drop them, or pass sampler='nuts' "
                             "or 'population' to sample a ladder of your own.")
    out = {**_DEFAULTS[sampler], **{k: v for k, v in given.items() if v is not None}}
    return sampler, out


def thermodynamic_integration(model, temperatures=None, *, draws=None, tune=None, chains=None, method=None,
                              rule="corrected", sampler=None, random_seed=None, group_size=4, B="learn",
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
        The ladder for ``sampler="nuts"`` or ``"population"``.  None: SMC picks the stages (with the
        default sampler), or the power ladder t_i = ((i-1)/30)^5 with 31 rungs; int: that many rungs
        of it; an array: your ladder (0 first, 1 last); "adaptive": start from 11 rungs of the power
        ladder and add rungs where the conditional ESS between neighbours is below
        ``target_cess`` (as ZVCV's Expand_Temperatures), up to ``max_rungs``.
    draws : int, optional
        SMC: the number of particles (default 1,000).  NUTS: draws per rung and chain (default
        100); population: iterations of the whole population (default 100).
    tune, chains : int, optional
        NUTS and population only (defaults 500 and 2; one compiled NUTS step reused across rungs).
    method : {"cti", "vvcv", "cf", "secf", "auto", "mc"}, optional
        Per-rung estimator (see :func:`ti_from_arrays`); default "cti" with SMC (kernel CVs did
        not improve on it there at 1,000 particles and took twice as long), "vvcv" otherwise.  The draws depend only on
        ``random_seed`` and the ladder, never on ``method``: compare estimators on the same draws
        with ``ti_from_arrays(**result.draws, method=...)``, or ``result.mc_log_evidence``.
    rule : {"corrected", "trapezoid"}
    sampler : {"smc", "nuts", "population"}, optional
        Default: "smc", or "nuts" when ``temperatures`` or a ``client`` are given.
        "nuts": an independent NUTS run per rung.  "population": all rungs sampled together by
        :func:`pymc_cv.sample_population` (one NUTS walker per temperature, exchange moves
        between neighbours), which finds modes that independent runs at intermediate temperatures
        miss; ``draws``/``tune`` are then iterations of the whole population.  "smc": PyMC's
        sequential Monte Carlo (IMH kernel); its tempering stages become the rungs, refined by
        reweighting (``refine``), and TI is weighed against importance sampling from a Student-t
        fitted to the last stage's particles (:mod:`pymc_cv.evidence.importance`): their
        inverse-variance mean where both hold and agree, the importance estimate where TI's checks
        fail and its weights' k-hat is below 0.5 (varying intercepts: TI 0.07 nats off and flagged,
        this 0.008 at the median), a flag where they disagree otherwise.
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
        (default): True with ``sampler="smc"``, whose stages are few (README model, 100 particles, 3
        seeds: errors 0.16-0.35 nats with the stages alone, 0.03-0.08 refined), off otherwise; False: off.
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
        arguments of :func:`ti_from_arrays` for the sampled rungs, which repeats TI's own
        ``.ti_log_evidence``); with SMC, ``.importance``.

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

    check_cv_options(options, thermodynamic_integration)
    check_temperable(model)
    sampler, chosen = _resolve_sampler(sampler, temperatures, client,
                                       {"draws": draws, "tune": tune, "chains": chains, "method": method})
    draws, method = chosen["draws"], chosen["method"]
    tune, chains = chosen.get("tune", 0), chosen.get("chains", 1)
    if method not in METHODS or rule not in RULES:
        raise ValueError(f"method={method!r}, rule={rule!r}; use a method of {sorted(METHODS)} and a rule of {RULES}.")
    for name, val in (("draws", draws), ("chains", chains)):
        if int(val) != val or val < 1:
            raise ValueError(f"{name}={val!r}; use a positive integer.")
    if adapt_temperatures and sampler != "population":
        raise ValueError("adapt_temperatures=True evens out the exchange rates of sampler='population'; for "
                         "independent rungs use temperatures='adaptive' (rungs added by conditional ESS).")
    refine = True if refine is None and sampler == "smc" else refine
    start = time.perf_counter()
    # with a client the workers compile what they sample with, and NUTS rungs come back with their
    # gradients: nothing to compile here then (the workers start on the rungs sooner)
    terms = tempered = None
    if sampler != "nuts" or client is None:
        terms, tempered = compiled(model, compile_kwargs, need_nuts=sampler != "smc" and client is None)
    compile_seconds = time.perf_counter() - start
    start = time.perf_counter()
    settings = TISettings(method, rule, group_size, B, progressbar, 0 if random_seed is None else random_seed,
                          refine, options)
    how = _Sampling(int(draws), int(tune), int(chains), random_seed, progressbar, compile_kwargs, client)
    if sampler == "population":
        res = _ti_population(model if tempered is None else tempered, temperatures, how, adapt_temperatures,
                             lambda idata: _estimate_population(idata, model, settings, compile_kwargs))
        res.seconds["compile"] = compile_seconds
        return res
    moments = run = None
    if sampler == "smc":
        run = smc_rungs(model, draws=int(draws), random_seed=random_seed, progressbar=progressbar,
                        compile_kwargs=compile_kwargs)
        t, rungs = run.temperatures, _smc_arrays(run, terms)
    else:
        fitter = None
        if client is not None and method != "mc" and not isinstance(temperatures, str):
            # fit each group of rungs here while the workers sample the others
            fitter = GroupFitter(_ladder(temperatures)[0], method, group_size, B,
                                 0 if random_seed is None else random_seed, options)
        t, rungs = _nuts_rungs(model, temperatures, how, (target_cess, max_rungs),
                               on_rung=None if fitter is None else fitter.add)
        if fitter is not None:
            moments = fitter.moments()
    with _smc_particles_named(sampler, len(t)):
        res = _PriorDraws(model, random_seed, compile_kwargs).estimate(
            t, rungs, settings, moments=moments, sampling=time.perf_counter() - start, compile=compile_seconds)
    if run is not None and not _importance_from_particles(res, run, terms, random_seed):
        _second_smc_run(res, run, model, terms, settings, (int(draws), random_seed, compile_kwargs))
    return res


def _importance_from_particles(res, run, terms, random_seed):
    """Weigh TI against importance sampling from a Student-t fitted to the last SMC stage (see
    :mod:`pymc_cv.evidence.importance`); True when that estimate was usable."""
    start = time.perf_counter()
    last = run.stages[-1]
    n = last[0].shape[0]
    shapes = [v.shape[1:] for v in last]
    sizes = [int(np.prod(sh)) for sh in shapes]
    bounds = np.cumsum([0] + sizes)

    def log_joint(x):
        return terms.log_joint(*[x[:, a:b].reshape((x.shape[0],) + sh) for a, b, sh in zip(bounds, bounds[1:], shapes)])

    flat = np.concatenate([np.asarray(v, dtype=float).reshape(n, -1) for v in last], axis=1)
    rng = np.random.default_rng([0 if random_seed is None else random_seed, 2])
    try:
        usable = weigh_importance(res, importance_evidence(log_joint, flat, rng))
    finally:
        res.seconds["importance"] = time.perf_counter() - start
    return usable


def _smc_arrays(run, terms):
    return [rung_arrays(vals, terms, np.zeros(vals[0].shape[0], dtype=int)) for vals in run.stages]


# IMH acceptance below this at a stage: the particles there are mostly resampled copies, and a stage
# can miss part of its power posterior.  bench/evidence.py: 0.10-0.26 at t < 0.4 on the varying
# intercepts' funnel, where single runs were up to 1.4 nats off (one of 15 seeds 0.40 nats, 4 se, off
# with no other flag); 0.6-0.9 on the README, non-centred eight schools and heavy-tailed models;
# 0.09-0.11 on centred eight schools, which SMC gets right
_LOW_ACCEPT = 0.2
# independent runs further apart than this many combined se disagree
_RUNS_APART = 3.0


def _second_smc_run(res, run, model, terms, settings, how):
    """Where the IMH moves accepted few proposals, check the result against a second, independent SMC
    run (the result stays the first run's): runs that disagree beyond their se mark it unreliable."""
    low = np.flatnonzero(run.acceptance < _LOW_ACCEPT)
    if low.size == 0:
        return
    draws, random_seed, compile_kwargs = how
    start = time.perf_counter()
    seed = _rung_seeds(random_seed, 1)[0]
    where = (f"IMH moves accepted {np.nanmin(run.acceptance):.0%} of proposals at t = "
             f"{', '.join(f'{ti:.3g}' for ti in run.temperatures[low])}, so the particles there are mostly "
             "resampled copies")
    try:
        other_run = smc_rungs(model, draws=draws, random_seed=seed, compile_kwargs=compile_kwargs)
        with _smc_particles_named("smc", other_run.temperatures.size):
            other = _PriorDraws(model, seed, compile_kwargs).estimate(
                other_run.temperatures, _smc_arrays(other_run, terms), settings._replace(progressbar=False))
    except ScoreMismatchError as err:
        res.reliable = False
        res.notes.append(f"{where}; a second, independent SMC run failed its Stein check ({str(err)[:200]}...): "
                         "the particles do not follow the power posteriors. Use sampler='population', or NUTS "
                         "rungs on a ladder.")
        return
    finally:
        res.seconds["second_run"] = time.perf_counter() - start
    z = (res.log_evidence - other.log_evidence) / np.hypot(res.se, other.se)
    agree = abs(z) <= _RUNS_APART
    res.reliable &= bool(agree)
    verdict = ("agrees with this one" if agree else
               "disagrees with this one: the particles do not follow the power posteriors there (a funnel's neck, "
               "a mode the proposals miss), so the log evidence can be off by more than its se. Use "
               "sampler='population', or NUTS rungs on a ladder, and compare seeds")
    res.notes.append(f"{where}; a second, independent SMC run gave {other.log_evidence:.3f} +/- {other.se:.3f} "
                     f"({abs(z):.1f} combined se from {res.log_evidence:.3f}) and {verdict}.")


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
            "few, as with vague priors). pymc_cv.log_evidence(model) estimates it from NUTS draws of the posterior by "
            "bridge sampling instead (bench/evidence.py: within 0.01 nats on regressions with N(0, 100) priors, "
            "where this fails); or use sampler='nuts' or 'population', or more draws.") from err


def _nuts_rungs(model, temperatures, how, refinement, on_rung=None):
    """The ladder and its rungs' arrays, each rung an independent NUTS run (here or on ``how.client``);
    ``refinement`` (target_cess, max_rungs) for an adaptive ladder; ``on_rung(i, arrays)`` as rung i of
    a fixed ladder finishes."""

    t, adaptive = _ladder(temperatures)
    target_cess, max_rungs = refinement
    rungs = {}
    token = None if how.client is None else model_token(model)  # workers reuse what they compiled for it

    def run(ladder):
        # a rung's seed depends on its temperature's place in the first ladder it appeared in
        seeds = dict(zip(ladder, _rung_seeds(how.random_seed, len(ladder))))
        todo = [(ti, seeds[ti]) for ti in ladder if ti not in rungs]
        where = {ti: i for i, ti in enumerate(ladder)}
        done = None if on_rung is None else (lambda k, arrays: on_rung(where[todo[k][0]], arrays))
        out = map_units(sample_rung, todo, shared=(model, token, how.compile_kwargs, how.draws, how.tune, how.chains),
                        client=how.client, progressbar=how.progressbar, description="Sampling power posteriors",
                        on_result=done)
        rungs.update({ti: arrays for (ti, _), arrays in zip(todo, out)})

    run(t)
    while adaptive and t.size < max_rungs:
        new = refine_ladder(t, [rungs[ti][0] for ti in t], target_cess=target_cess, max_new=max_rungs - t.size)
        if new.size == 0:
            break
        t = np.sort(np.concatenate([t, new]))
        run(t)
    return t, [rungs[ti] for ti in t]


def _ti_population(tempered, temperatures, how, adapt_temperatures, estimate):
    """``thermodynamic_integration(sampler="population")``: one population run of the ``tempered``
    model, then ``estimate(idata)`` from its rungs."""
    if isinstance(temperatures, str):
        raise ValueError("temperatures='adaptive' refines the ladder between independent NUTS runs; with "
                         "sampler='population' give the ladder (an int or an array).")
    t = population_ladder(power_ladder(31) if temperatures is None else temperatures)
    start = time.perf_counter()
    idata = run_population(tempered, t, draws=how.draws, tune=how.tune, chains=how.chains, swap_every=1,
                           random_seed=how.random_seed, progressbar=how.progressbar,
                           compile_kwargs=how.compile_kwargs, client=how.client,
                           adapt_temperatures=adapt_temperatures)
    sampling = time.perf_counter() - start
    res = estimate(idata)
    res.seconds.update(sampling=sampling)
    if adapt_temperatures:
        # measured in bench/population_ti.py: 2 of 10 runs off by 5 se, unflagged (0 of 10 on fixed ladders)
        res.notes.append("the ladder was moved to even out exchange rates, not to reduce the quadrature error; on "
                         "multimodal test models the se of such runs was sometimes too small (5 se off). Compare "
                         "with a run on a fixed ladder before relying on it.")
    return res
