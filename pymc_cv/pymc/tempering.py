"""Power posteriors p_t(x) ~ p(y|x)^t p(x) of a PyMC model, and the per-draw terms TI needs.

The tempered density is PyMC's own (as its SMC uses it): log p(x) + t log p(y|x), with t a weight
of the compiled log density and gradient, so NUTS is compiled once and every rung only changes t
(a new compile per rung costs seconds; a rung of a small model samples in a fraction of one).  ``pm.sample`` resets the
step's adaptation at the start of every chain, so a rung's draws depend only on its temperature and
seed, not on which rungs the step sampled before: rungs can run in any order, on any worker.
"""

from __future__ import annotations

import hashlib
import logging
import weakref
from collections import OrderedDict
from typing import NamedTuple

import numpy as np

from .. import compat
from ..compat import smc_imh_kernel, smc_reinitialisable
from ..core.threads import one_blas_thread
from ..evidence.rung_moments import RungArrays
from ..progress import progress_bar
from .scores import at_distinct_draws, batch_input, batched, check_model, compute_scores, forward_transform_fn

# PyMC and PyTensor load inside the functions that use them: `import pymc_cv` stays cheap without them.

__all__ = ["check_temperable", "TemperedSampler", "loglik_terms", "compiled", "rung_arrays", "rung_arrays_of",
           "sample_rung", "smc_rungs", "SMCRun", "model_token", "kept_model", "prior_loglik", "PRIOR_DRAWS"]

# independent prior draws for the first stepping stones: their se is sqrt((1 / ESS share - 1) / n), 0.0075
# nats where TI starts (an ESS share of 0.5); with 4,000 it was 0.015, twice the se of the rest of the
# README model's 31-rung estimate
PRIOR_DRAWS = 16000

def check_temperable(model):
    check_model(model)
    if not model.observed_RVs:
        raise ValueError("The model has no observed variables, so there is no likelihood to temper; "
                         "pass the model with its data (observed=...).")
    from pymc.distributions.continuous import FlatRV, HalfFlatRV

    improper = [rv.name for rv in model.free_RVs if isinstance(rv.owner.op, (FlatRV, HalfFlatRV))]
    if improper:
        raise ValueError(
            f"{improper} have improper priors (pm.Flat / pm.HalfFlat): the evidence p(y) = int p(y|x) p(x) dx "
            "is not defined for them, and no prior draws exist to start the ladder from. Give each a proper "
            "prior on the scale you believe (e.g. pm.Normal(name, 0, 10), pm.HalfNormal(name, 10)).")
    if model.potentials:
        names = [p.name for p in model.potentials]
        raise ValueError(
            f"The model has Potentials {names}: pymc-cv cannot tell whether they belong to the prior "
            "or the likelihood. Write likelihood terms as observed variables (e.g. pm.CustomDist(..., "
            "observed=y)) and prior terms as distributions."
        )


class TemperedSampler:
    """Samples p_t for any t in [0, 1] with one compiled NUTS step."""

    def __init__(self, model, compile_kwargs=None):
        import pymc as pm
        from pymc.model.fgraph import clone_model

        check_temperable(model)
        self.source = model  # the user's model: names, dims and the posterior's deterministics
        self.model = clone_model(model)
        self._compile_kwargs = dict(compile_kwargs or {})
        with self.model:
            self._loglik = self.model.logp(vars=self.model.observed_RVs, sum=True)
            # not log p(x, y) + (t - 1) log p(y|x): where |log p(y|x)| is 1e16 times |log p(x)| (a scale
            # parameter near 0) that sum loses log p(x) to round-off, and at small t NUTS drifted there
            # and stayed (the README model's prior rung sat at log sigma = -20)
            density = self.model.logp_dlogp_function(tempered=True, ravel_inputs=True, **self._compile_kwargs)
            density.trust_input = True
            self.step = pm.NUTS(logp_dlogp_func=density)
        self._weights_dtype = density.dtype
        self._loglik_fn = None
        self.set_temperature(1.0)

    def set_temperature(self, temperature):
        """Every copy of ``step`` that shares its compiled density samples p_t from now on."""
        self.temperature = temperature
        self._set_weight(temperature)

    def _set_weight(self, temperature):
        self.step._logp_dlogp_func.set_weights(np.array([temperature], dtype=self._weights_dtype))

    def terms(self, *draws):
        """:func:`loglik_terms`'s (log p(y|x), grad log p(y|x), grad log p(x)) at value-variable
        draws, from the density NUTS samples with: log p(x) at t = 0, log p(x) + log p(y|x) at t = 1.

        Two calls per draw and no compile of its own.  On the van der Pol model (an RK4 scan, Numba)
        the batched graph of :func:`loglik_terms` took 50 s to compile and these calls 3 s for 11
        rungs of 80 draws.  log p(y|x) is a difference, exact to round-off relative to |log p(x)|.
        """
        density = self.step._logp_dlogp_func
        density.set_extra_values({})  # every value variable is differentiated (check_model)
        n = len(draws[0])
        # draws come in the order of the user's model; the density ravels the clone's, which may differ
        by_name = {v.name: np.reshape(x, (n, -1)) for v, x in zip(self.source.value_vars, draws)}
        order = [v.name for v in self.model.continuous_value_vars]
        X = np.concatenate([by_name[name] for name in order], axis=1).astype(density.dtype)
        width = {name: a.shape[1] for name, a in by_name.items()}
        start = dict(zip(order, np.cumsum([0] + [width[name] for name in order])))
        back = np.concatenate([np.arange(start[name], start[name] + width[name]) for name in by_name])

        def evaluate(X):
            logp, grad = np.empty(len(X)), np.empty(X.shape)
            for i, x in enumerate(X):
                logp[i], grad[i] = density(x)
            return logp, grad

        try:
            self._set_weight(0.0)
            prior, g_prior = at_distinct_draws(evaluate, [X])
            self._set_weight(1.0)
            joint, g_joint = at_distinct_draws(evaluate, [X])
        finally:
            self._set_weight(self.temperature)
        return joint - prior, (g_joint - g_prior)[:, back], g_prior[:, back]

    def loglik(self, points):
        """log p(y|x) at each of a list of points (dicts of value variables, as the step methods use
        them), in one batched call."""
        values = self.model.value_vars
        if self._loglik_fn is None:  # compiled after every gradient graph was built (scan models)
            inputs = {v: batch_input(v) for v in values}
            self._loglik_fn = batched([inputs[v] for v in values], self._loglik, inputs, self._compile_kwargs)
        draws = [np.stack([p[v.name] for p in points]) for v in values]
        return np.asarray(at_distinct_draws(lambda *x: [self._loglik_fn(*x)], draws)[0], dtype=float)

    def sample(self, temperature, draws, tune, chains, random_seed, **kwargs):
        import pymc as pm

        self.set_temperature(temperature)
        logger = logging.getLogger("pymc")
        level = logger.level
        logger.setLevel(logging.ERROR)  # per-rung banners and short-chain warnings are noise here
        try:
            with self.model:
                return pm.sample(
                    draws=draws, tune=tune, chains=chains, cores=1, step=self.step, random_seed=random_seed,
                    progressbar=False, compute_convergence_checks=False,
                    idata_kwargs={"include_transformed": True}, **kwargs,
                )
        finally:
            logger.setLevel(level)


def loglik_terms(model, compile_kwargs=None):
    """A function of the value-variable draws (each (n, *shape)) returning, per draw,
    log p(y|x) (n,), grad log p(y|x) and grad log p(x) (Jacobian included), both (n, d),
    flattened in the order of ``model.value_vars`` (the order of the ``score`` group); its
    ``loglik`` attribute returns log p(y|x) alone.

    The gradient graphs are built now and compiled at the first call.  That order matters for
    models with a ``scan`` (ODE solvers): compiling a function rewrites the shared Scan's inner
    graph in place, after which PyTensor can no longer differentiate it, so every gradient
    (these and the NUTS step's) must be taken before anything is compiled.
    """
    import pytensor.tensor as pt

    check_temperable(model)
    loglik = model.logp(vars=model.observed_RVs, sum=True)
    logprior = model.logp(vars=model.free_RVs, jacobian=True, sum=True)
    values = model.value_vars
    # a hyperparameter enters only the prior (and a parameter with a flat prior only the
    # likelihood): its gradient there is zero, not an error
    g_lik = pt.grad(loglik, values, disconnected_inputs="ignore")
    g_prior = pt.grad(logprior, values, disconnected_inputs="ignore")
    inputs = {v: batch_input(v) for v in values}
    k = len(values)
    compiled = []

    def terms(*draws):
        if not compiled:
            compiled.append(batched([inputs[v] for v in values], [loglik, *g_lik, *g_prior], inputs,
                                     dict(compile_kwargs or {})))
        out = at_distinct_draws(compiled[0], [np.asarray(x, dtype=v.dtype) for x, v in zip(draws, values)])
        n = np.asarray(out[0]).shape[0]
        flat = [np.asarray(g, dtype=float).reshape(n, -1) for g in out[1:]]
        return np.asarray(out[0], dtype=float), np.concatenate(flat[:k], axis=1), np.concatenate(flat[k:], axis=1)

    loglik_only = []

    def loglik_at(*draws):
        # without the gradients: a third of the cost on an ODE model, and the prior's draws need none
        if not loglik_only:
            loglik_only.append(batched([inputs[v] for v in values], [loglik], inputs, dict(compile_kwargs or {})))
        out = at_distinct_draws(loglik_only[0], [np.asarray(x, dtype=v.dtype) for x, v in zip(draws, values)])
        return np.asarray(out[0], dtype=float)

    densities_only = []

    def densities_at(*draws):
        # log p(y|x) and log p(x) without gradients: SMC's moves and importance sampling
        if not densities_only:
            densities_only.append(batched([inputs[v] for v in values], [loglik, logprior], inputs,
                                          dict(compile_kwargs or {})))
        out = at_distinct_draws(densities_only[0], [np.asarray(x, dtype=v.dtype) for x, v in zip(draws, values)])
        return np.asarray(out[0], dtype=float), np.asarray(out[1], dtype=float)

    terms.loglik = loglik_at
    terms.densities = densities_at
    terms.log_joint = lambda *draws: sum(densities_at(*draws))
    return terms


# compiled per-draw terms and NUTS step per model and compile options: a model with an ODE takes
# a minute to compile in Numba, a replication of TI seconds to sample.  On a dask worker the
# model is the scattered copy, so the worker compiles once for all the units it runs.
_COMPILED = weakref.WeakKeyDictionary()


# token -> the first copy of a model this process received under it.  A dask worker gets a fresh
# copy of the model with every call; keeping the first one keeps its compiled functions (above)
# for the next call too.  The last few models only.
_BY_TOKEN = OrderedDict()
_KEEP = 4


def model_token(model):
    """A digest of the pickled model: equal for copies of one model, different after pm.set_data."""
    import cloudpickle

    return hashlib.sha256(cloudpickle.dumps(model)).hexdigest()


def kept_model(model, token):
    """``model``, or the copy of it this process already compiled (same ``token``)."""
    if token is None:
        return model
    kept = _BY_TOKEN.setdefault(token, model)
    _BY_TOKEN.move_to_end(token)
    while len(_BY_TOKEN) > _KEEP:
        _BY_TOKEN.popitem(last=False)
    return kept


def compiled(model, compile_kwargs=None, need_nuts=True):
    """(terms, tempered): :func:`loglik_terms` and a :class:`TemperedSampler` (None unless
    ``need_nuts``) of ``model``, built once per model and compile options."""
    key = repr(sorted((compile_kwargs or {}).items()))
    cache = _COMPILED.setdefault(model, {})
    terms, tempered = cache.get(key, (None, None))
    if terms is None:
        terms = loglik_terms(model, compile_kwargs)  # gradient graphs before any compile (scan models)
    if tempered is None and need_nuts:
        tempered = TemperedSampler(model, compile_kwargs)
    cache[key] = (terms, tempered)
    return terms, tempered


def draw_prior(model, draws, random_seed=None):
    """Independent draws of ``model``'s free variables from the prior, (draws, *shape) each.

    One vectorised draw: the variables whose parameters depend on no other free variable are resized
    by PyMC (``change_dist_size``) and PyTensor vectorises the rest of the graph over that leading
    dimension.  16,000 draws then take tens of milliseconds, where ``pm.draw``'s loop of one call per
    draw took 1-2 s.  Where a distribution cannot be resized or vectorised, or the result does not
    have the shapes of one draw, PyMC's loop draws them.
    """
    import pymc as pm

    cache = _PRIOR_SAMPLERS.setdefault(model, {})
    if draws not in cache:
        cache[draws] = _prior_sampler(model, draws)
    if cache[draws] is None:
        return pm.draw(list(model.free_RVs), draws=draws, random_seed=random_seed)
    return cache[draws](random_seed)


# compiled vectorised prior draws per model and number of draws: compiling took longer than drawing
# (eight schools: 0.05-0.1 s against 2 ms for 1,000 draws), and TI draws the prior two to four times
_PRIOR_SAMPLERS = weakref.WeakKeyDictionary()


def _prior_sampler(model, draws):
    """``random_seed -> draws`` of :func:`draw_prior`'s fast path, compiled once; None where it fails or
    its draws do not have the shapes of one draw."""
    import pymc as pm

    rvs = list(model.free_RVs)
    try:
        fn, rngs = compat.compiled_draws(_batched_prior(rvs, draws))
        probe = fn()
    except Exception:  # noqa: BLE001 -- any failure of the fast path leaves PyMC's own loop, which is right
        return None
    one = pm.draw(rvs, draws=1, random_seed=0)
    if not all(np.shape(v) == (draws,) + np.shape(o) for v, o in zip(probe, one)):
        return None

    def sample(random_seed):
        compat.reseed_draws(rngs, random_seed)
        return list(fn())

    return sample


def _batched_prior(rvs, draws):
    from pymc.distributions.shape_utils import change_dist_size
    from pytensor.graph.replace import vectorize_graph

    free = set(rvs)
    roots = {v: change_dist_size(v, (draws,), expand=True) for v in rvs
             if not any(a in free for a in compat.graph_ancestors(v.owner.inputs))}
    return vectorize_graph(rvs, replace=roots)


def prior_loglik(model, terms, draws=PRIOR_DRAWS, random_seed=None, compile_kwargs=None):
    """log p(y|x) (draws,) at independent draws of ``model``'s prior, or None with the reason when PyMC
    cannot draw it (a distribution without a random generator, e.g. a CustomDist with logp only)."""

    try:
        raw = draw_prior(model, draws, random_seed)
    except NotImplementedError as err:
        return None, f"PyMC cannot draw the prior ({str(err).splitlines()[0]})"
    vals = forward_transform_fn(model, dict(compile_kwargs or {}))(*raw)
    ll = terms.loglik(*vals)
    bad = np.isnan(ll) | (ll == np.inf)
    if bad.any():
        return None, f"log p(y|x) is nan or +inf at {bad.sum()} of {draws} prior draws"
    return ll, None


def rung_arrays(vals, terms, chain):
    """The :class:`~pymc_cv.evidence.rung_moments.RungArrays` of value-variable draws ``vals``."""
    ll, gl, gp = terms(*vals)
    X = np.concatenate([v.reshape(v.shape[0], -1) for v in vals], axis=1).astype(float)
    return RungArrays(ll, X, gl, gp, chain)


def rung_arrays_of(idata, model, terms):
    """:func:`rung_arrays` of one rung's InferenceData (scores computed when it has none)."""
    post = compat.group(idata, "posterior")
    if not all(v.name in post for v in model.value_vars):
        idata = compute_scores(idata, model, extend_inferencedata=False, progressbar=False)
        post = compat.group(idata, "unconstrained_posterior")
    n_chain, n_draw = post.sizes["chain"], post.sizes["draw"]
    vals = [np.asarray(post[v.name].transpose("chain", "draw", ...).values).reshape((n_chain * n_draw,)
            + tuple(post[v.name].shape[2:])) for v in model.value_vars]
    return rung_arrays(vals, terms, np.repeat(np.arange(n_chain), n_draw))


def sample_rung(model, token, compile_kwargs, draws, tune, chains, rung):
    """One unit of thermodynamic integration: ``rung`` = (temperature, seed) -> its
    :func:`rung_arrays`.  A pure function of its arguments, run here or on a dask worker
    (``token``: see :func:`kept_model`; None here)."""
    model = kept_model(model, token)
    temperature, seed = rung
    _, tempered = compiled(model, compile_kwargs, need_nuts=True)
    with one_blas_thread():
        return rung_arrays_of(tempered.sample(temperature, draws, tune, chains, seed), model, tempered.terms)


class SMCRun(NamedTuple):
    """PyMC's SMC stages: the temperatures (0, the adaptive betas, 1), per stage the value-variable
    draws (each (draws, *shape), in the order of ``model.value_vars``; stage 0 is the prior), and the
    IMH acceptance rate of the moves that made each stage (nan at stage 0, or where PyMC does not
    record it)."""

    temperatures: np.ndarray
    stages: list
    acceptance: np.ndarray


# PyMC's SMC kernels per model and settings: its constructor compiles two log densities (0.4-0.5 s on
# the varying intercepts, more than the sampling), and a run of thermodynamic integration may sample twice
_SMC_KERNELS = weakref.WeakKeyDictionary()
_BATCHED_IMH = []


def _smc_kernel(model, draws, rng, threshold, compile_kwargs):
    """The :func:`_batched_imh` kernel of ``model``, initialised with ``rng``: built once per model and
    settings where PyMC's kernels can be initialised again."""
    def prepare(kernel):
        terms, _ = compiled(model, compile_kwargs, need_nuts=False)
        forward = forward_transform_fn(model, dict(compile_kwargs or {}))
        names = [model.rvs_to_values[rv].name for rv in model.free_RVs]
        unravel = _unraveller(kernel)
        kernel.densities = lambda particles: terms.densities(*unravel(particles))
        kernel.prior_draws = lambda rng: dict(zip(names, forward(*draw_prior(model, kernel.draws, rng))))

    if not smc_reinitialisable():
        return smc_imh_kernel(model, draws, rng, threshold, compile_kwargs, _batched_imh(), prepare)
    cache = _SMC_KERNELS.setdefault(model, {})
    key = (int(draws), float(threshold), repr(sorted((compile_kwargs or {}).items())))
    if key in cache:
        cache[key].initialize(None, rng)
    else:
        cache[key] = smc_imh_kernel(model, draws, rng, threshold, compile_kwargs, _batched_imh(), prepare)
    return cache[key]


def _unraveller(kernel):
    """flat particles (n, d) of a PyMC SMC kernel -> the value variables' draws, each (n, *shape)."""
    def unravel(particles):
        out, start = [], 0
        for v in kernel.variables:
            shape, size = kernel.var_info[v.name]
            out.append(np.asarray(particles[:, start:start + size]).reshape((particles.shape[0],) + tuple(shape)))
            start += size
        return out
    return unravel


def _batched_imh():
    """PyMC's IMH kernel whose moves evaluate the log densities of all proposals in one batched call
    (``densities``: flat particles (n, d) -> log p(y|x), log p(x)), and whose first particles are one
    vectorised draw of the prior (``prior_draws``: rng -> value-variable draws by name).  PyMC's calls
    the densities one particle at a time and draws the prior one particle at a time: on the varying
    intercepts those loops were most of the sampling's 0.55 s (now 0.1 s)."""
    if not _BATCHED_IMH:
        from pymc.pytensorf import floatX
        from pymc.smc.kernels import IMH, Pearson

        class BatchedIMH(IMH):
            densities = None
            prior_draws = None

            def initialize_population(self):
                # every particle from the prior, which is the stage-0 power posterior TI integrates from
                # (PyMC's own would start a variable with a custom initval at that value)
                return self.prior_draws(self.rng)

            def mutate(self):
                # independent Metropolis-Hastings moves from the kernel's Gaussian proposal, repeated
                # while the particles' correlation with where they started still falls (PyMC's rule)
                self.n_steps = 1
                start, previous, accepted_all = Pearson(self.tempered_posterior), 2, []
                while True:
                    log_u = np.log(self.rng.random(self.draws))
                    proposal = floatX(self.proposal_dist.rvs(size=self.draws, random_state=self.rng))
                    proposal = proposal.reshape(len(proposal), -1)
                    # the proposal is independent of the current point: both directions enter the ratio
                    forward = self.proposal_dist.logpdf(proposal)
                    backward = self.proposal_dist.logpdf(self.tempered_posterior)
                    loglik, logprior = self.densities(proposal)
                    tempered = logprior + loglik * self.beta
                    accepted = log_u < (tempered + backward) - (self.tempered_posterior_logp + forward)
                    self.tempered_posterior[accepted] = proposal[accepted]
                    self.tempered_posterior_logp[accepted] = tempered[accepted]
                    self.prior_logp[accepted] = logprior[accepted]
                    self.likelihood_logp[accepted] = loglik[accepted]
                    accepted_all.append(accepted)
                    self.n_steps += 1
                    corr = start.get(self.tempered_posterior)
                    if np.mean((previous - corr) > self.correlation_threshold) > 0.9:
                        previous = corr
                    else:
                        break
                self.acc_rate = np.mean(accepted_all)

        _BATCHED_IMH.append(BatchedIMH)
    return _BATCHED_IMH[0]


def smc_rungs(model, draws, random_seed=None, progressbar=False, threshold=0.5, compile_kwargs=None):
    """Run PyMC's SMC (IMH kernel) and keep the particles of every tempering stage (an :class:`SMCRun`).

    Particles of one stage are resampled and moved by MCMC, so they are not independent; the
    standard errors computed from them treat them as if they were.
    """
    check_temperable(model)
    rng = np.random.default_rng(random_seed)
    kernel = _smc_kernel(model, draws, rng, threshold, compile_kwargs)
    unravel = _unraveller(kernel)


    temps, stages, accept = [0.0], [unravel(kernel.tempered_posterior)], [np.nan]
    with progress_bar(progressbar) as bar:
        task = bar.add_task("SMC stages", completed=0, total=None)
        while kernel.beta < 1:
            kernel.update_beta_and_weights()
            kernel.resample()
            kernel.tune()
            kernel.mutate()
            temps.append(float(kernel.beta))
            stages.append(unravel(kernel.tempered_posterior))
            rate = getattr(kernel, "acc_rate", None)
            accept.append(np.nan if rate is None else float(np.mean(rate)))
            bar.advance(task, 1)
    return SMCRun(np.array(temps), stages, np.array(accept))
