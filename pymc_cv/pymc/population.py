"""Population MCMC over power posteriors: one walker per temperature, NUTS moves, exchange moves.

Every chain is a population of walkers, walker k targeting p_k(x) ~ p(y|x)^t_k p(x).  Each
iteration moves every walker by one NUTS transition on its own power posterior, then proposes to
exchange the states of neighbouring walkers (Calderhead & Girolami 2009), so that states found
at hot temperatures, where modes are connected, travel down to t = 1.  A swap of walkers i and
j is accepted with probability min(1, exp((t_i - t_j)(l_j - l_i))), l = log p(y|x).  Even and
odd neighbour pairs are proposed in alternation (non-reversible parallel tempering, Syed et al.
2022), which moves states along the ladder faster than one random pair per iteration.

The NUTS step is compiled once (the temperature is a shared variable of the tempered model);
each walker has its own copy of the step's adaptive state (step size, mass matrix), which stays
with its temperature when states are exchanged.
"""

from __future__ import annotations

import copy
from typing import NamedTuple

import numpy as np

from .. import compat
from ..cluster import check_client, map_units
from ..core.threads import one_blas_thread
from ..evidence.ladder import even_exchange_ladder, power_ladder
from ..progress import progress_bar
from .scores import dims_and_coords, posterior_fn
from .tempering import TemperedSampler, compiled, kept_model, loglik_terms, model_token

# PyMC loads inside the functions that use it: `import pymc_cv` stays cheap without it.

__all__ = ["sample_population", "run_population", "population_draws", "population_group", "value_draws",
           "POPULATION", "population_chain"]

POPULATION = "population"


def _walker_steps(step, n):
    """``n`` NUTS steps sharing ``step``'s compiled log-density and gradient, each with its own
    step-size and mass-matrix adaptation."""
    from pymc.step_methods.hmc.integration import CpuLeapfrogIntegrator

    walkers = []
    for _ in range(n):
        w = copy.copy(step)
        w.step_adapt = copy.deepcopy(step.step_adapt)
        w.potential = copy.deepcopy(step.potential)
        w.integrator = CpuLeapfrogIntegrator(w.potential, step._logp_dlogp_func)
        walkers.append(w)
    return walkers


def _initial_point(model, rng):
    """The model's initial point on the unconstrained space, jittered by U(-1, 1) as pm.sample does."""
    point = model.initial_point()
    return {k: np.asarray(v + rng.uniform(-1, 1, size=np.shape(v)), dtype=np.asarray(v).dtype)
            for k, v in point.items()}


def _exchange(states, loglik, temperatures, parity, rng):
    """Propose swaps of neighbours (k, k+1) for k = parity, parity + 2, ...; returns the acceptance
    probabilities (nan where no swap was proposed) and swaps ``states``/``loglik`` in place."""
    prob = np.full(len(temperatures) - 1, np.nan)
    for k in range(parity, len(temperatures) - 1, 2):
        log_a = (temperatures[k] - temperatures[k + 1]) * (loglik[k + 1] - loglik[k])
        prob[k] = 0.0 if np.isnan(log_a) else float(np.exp(min(0.0, log_a)))
        if rng.uniform() < prob[k]:
            states[k], states[k + 1] = states[k + 1], states[k]
            loglik[k], loglik[k + 1] = loglik[k + 1], loglik[k]
    return prob


def _run_chain(sampler, temperatures, draws, tune, swap_every, seed, bar, task):
    """One population chain; returns per draw and walker the points, log-likelihoods, NUTS stats
    and per draw the exchange acceptance probabilities."""
    rng = np.random.default_rng(seed)
    walker_rngs = rng.spawn(len(temperatures))
    steps = _walker_steps(sampler.step, len(temperatures))
    for w, r in zip(steps, walker_rngs):
        compat.setup_step(w, r, tune, draws)
        w.tune = bool(tune)
        if tune:
            w.reset_tuning()
    states = [_initial_point(sampler.model, rng) for _ in temperatures]
    loglik = sampler.loglik(states)
    keep = {"points": [], "loglik": [], "diverging": [], "stats": [], "exchange": []}
    for i in range(tune + draws):
        if i == tune:
            for w in steps:
                w.stop_tuning()
        stats = []
        for k, (w, t) in enumerate(zip(steps, temperatures)):
            sampler.set_temperature(t)
            states[k], st = w.step(states[k])
            stats.append(st[0])
        loglik = sampler.loglik(states)
        prob = (_exchange(states, loglik, temperatures, i // swap_every % 2, rng) if (i + 1) % swap_every == 0
                else np.full(len(temperatures) - 1, np.nan))
        if i >= tune:
            keep["points"].append([dict(s) for s in states])
            keep["loglik"].append(loglik.copy())
            keep["diverging"].append([bool(s.get("diverging", False)) for s in stats])
            keep["stats"].append(stats[-1])
            keep["exchange"].append(prob)
        bar.advance(task, 1)
    return keep


def sample_population(model=None, temperatures=None, *, draws=1000, tune=1000, chains=2, swap_every=1,
                      random_seed=None, progressbar=True, compile_kwargs=None, client=None,
                      adapt_temperatures=False):
    """Sample every power posterior of ``model`` at once by population MCMC with exchange moves.

    Parameters
    ----------
    model : pymc.Model, optional
        With observed variables and continuous free variables; taken from the context when not given.
    temperatures : None, int or array
        The ladder, 0 first and 1 last; None: 16 rungs of the power ladder ((i-1)/15)^5; int: that
        many rungs of it.
    draws, tune : int
        Iterations kept and discarded per chain; each iteration moves every walker.
    chains : int
        Independent populations (for R-hat per rung).
    swap_every : int
        Propose exchanges every ``swap_every`` iterations.
    random_seed : int, optional
        The same seed gives the same draws.
    progressbar : bool
    compile_kwargs : dict, optional
        For the NUTS step and the per-draw terms, e.g. ``{"mode": "NUMBA"}``.
    client : dask.distributed.Client, optional
        Run the chains on the cluster's workers (a chain's walkers are coupled by the exchanges,
        so the unit is a chain); the same seed gives the same draws with or without it.
    adapt_temperatures : bool
        Before the chains, a pilot of ``tune // 2`` iterations of one population in three rounds,
        each moving the inner rungs so that neighbours exchange equally often (Syed et al. 2022:
        equal steps of the cumulative rejection rate).  The chains then run on that ladder, which
        is the ``temperature`` coordinate of the result.

    Returns
    -------
    InferenceData (DataTree on ArviZ 1)
        ``posterior``: the t = 1 walkers, as ``pm.sample`` gives them (so ``az.summary`` and
        ``pymc_cv.summary`` work unchanged); ``sample_stats``: their NUTS statistics and
        ``exchange_accept`` (chain, draw, pair), the acceptance probability of the swap proposed
        between rungs k and k+1 at that iteration (nan where none was); ``population``: every
        walker's value variables (unconstrained, dims chain, draw, temperature, ...),
        ``loglik`` and ``diverging``, with the ladder as the ``temperature`` coordinate.

    Examples
    --------
    >>> import pymc as pm, pymc_cv
    >>> with pm.Model() as model:
    ...     x = pm.Normal("x", 0, 1)
    ...     y = pm.Normal("y", x, 1, observed=0.5)
    >>> idata = pymc_cv.sample_population(model, 4, draws=50, tune=50, random_seed=1, progressbar=False)
    >>> pymc_cv.compat.group(idata, "population")["loglik"].sizes["temperature"]
    4
    """
    import pymc as pm

    model = pm.modelcontext(model)
    t = population_ladder(temperatures)
    for name, val in (("draws", draws), ("chains", chains), ("swap_every", swap_every)):
        if int(val) != val or val < 1:
            raise ValueError(f"{name}={val!r}; use a positive integer.")
    if int(tune) != tune or tune < 0:
        raise ValueError(f"tune={tune!r}; use a non-negative integer.")
    # with a client the chains' sampler is compiled on the workers, not here
    sampler = model if check_client(client) is not None else compiled(model, compile_kwargs, need_nuts=True)[1]
    return run_population(sampler, t, draws=int(draws), tune=int(tune), chains=int(chains),
                          swap_every=int(swap_every), random_seed=random_seed, progressbar=progressbar,
                          compile_kwargs=compile_kwargs, client=client, adapt_temperatures=bool(adapt_temperatures))


def run_population(sampler, temperatures, *, draws, tune, chains, swap_every, random_seed, progressbar,
                   compile_kwargs, client=None, adapt_temperatures=False):
    """:func:`sample_population` with a validated ladder and either a compiled
    :class:`~pymc_cv.pymc.tempering.TemperedSampler` (thermodynamic_integration keeps one
    per model) or the model, whose sampler is then compiled where the chains run."""
    model = sampler.source if isinstance(sampler, TemperedSampler) else sampler
    token = None if client is None else model_token(model)  # workers reuse what they compiled for it
    root = np.random.SeedSequence(random_seed)
    seeds = [int(s.generate_state(1)[0]) for s in root.spawn(chains)]
    if adapt_temperatures:
        pilot = np.random.SeedSequence(root.entropy, spawn_key=(_PILOT_KEY,))  # a stream no chain uses
        temperatures = _adapted_ladder(model, token, compile_kwargs, temperatures, tune, swap_every, pilot, client)
    settings = (model, token, compile_kwargs, temperatures, draws, tune, swap_every)
    if client is None and isinstance(sampler, TemperedSampler):
        runs = []
        with progress_bar(progressbar) as bar:  # one step per iteration of the population
            task = bar.add_task(f"Population MCMC, {temperatures.size} temperatures", completed=0,
                                total=chains * (draws + tune))
            for seed in seeds:
                with one_blas_thread():  # as population_chain: the same bits here and on a worker
                    runs.append(_run_chain(sampler, temperatures, draws, tune, swap_every, seed, bar, task))
    else:
        runs = map_units(population_chain, seeds, shared=settings, client=client, progressbar=progressbar,
                         description=f"Population MCMC chains, {temperatures.size} temperatures")
    return _to_inference_data(model, temperatures, runs, compile_kwargs)


# spawn key of the pilot's random stream; chains use 0, 1, ...
_PILOT_KEY = 1 << 16
# the pilot's rounds, as shares of its iterations: later rounds start from a better ladder
_PILOT_ROUNDS = (1, 2, 4)


def _adapted_ladder(model, token, compile_kwargs, temperatures, tune, swap_every, seed_sequence, client):
    """The ladder after a pilot: rounds of one population chain (tune // 2 iterations in all, at least
    20 a round), each followed by moving the rungs to even exchange rates (Syed et al. 2022)."""
    t = temperatures
    total = max(tune // 2, 20 * len(_PILOT_ROUNDS))
    for share, ss in zip(_PILOT_ROUNDS, seed_sequence.spawn(len(_PILOT_ROUNDS))):
        n = max(total * share // sum(_PILOT_ROUNDS), 20)
        run = map_units(population_chain, [int(ss.generate_state(1)[0])],
                        shared=(model, token, compile_kwargs, t, n - n // 2, n // 2, swap_every), client=client)[0]
        t = even_exchange_ladder(t, 1.0 - np.nanmean(np.stack(run["exchange"]), axis=0))
    return t


def population_chain(model, token, compile_kwargs, temperatures, draws, tune, swap_every, seed):
    """One population chain of ``model`` from ``seed``: the unit of work on a dask worker (the
    walkers of a chain are coupled by the exchanges, so a chain is never split)."""
    _, sampler = compiled(kept_model(model, token), compile_kwargs, need_nuts=True)
    with progress_bar(False) as bar, one_blas_thread():
        return _run_chain(sampler, temperatures, draws, tune, swap_every, seed, bar, 0)


def population_ladder(temperatures):
    if temperatures is None:
        return power_ladder(16)
    if np.ndim(temperatures) == 0:
        if int(temperatures) != temperatures or temperatures < 2:
            raise ValueError(f"temperatures={temperatures!r}; use an integer >= 2 or an increasing array from 0 to 1.")
        return power_ladder(int(temperatures))
    t = np.asarray(temperatures, dtype=float)
    if t.ndim != 1 or t.size < 2 or t[0] != 0 or t[-1] != 1 or np.any(np.diff(t) <= 0):
        raise ValueError("temperatures must increase strictly from 0 to 1 (e.g. pymc_cv.evidence.power_ladder(16)).")
    return t


def _to_inference_data(model, t, runs, compile_kwargs):
    n_chain, n_draw, w = len(runs), len(runs[0]["loglik"]), t.size
    value_vars = model.value_vars
    values = {v.name: np.stack([np.stack([[p[k][v.name] for k in range(w)] for p in run["points"]])
                                for run in runs]) for v in value_vars}  # (chain, draw, temperature, ...)
    dims, coords = dims_and_coords(model, model.eval_rv_shapes())
    pop = dict(values)
    pop["loglik"] = np.stack([np.stack(run["loglik"]) for run in runs])
    pop["diverging"] = np.stack([np.array(run["diverging"]) for run in runs])
    pop_dims = {name: ["temperature", *dims.get(name, [])] for name in values}
    pop_dims.update(loglik=["temperature"], diverging=["temperature"])

    names, fn = posterior_fn(model, compile_kwargs)
    outs = fn(*[values[v.name][:, :, -1].reshape((n_chain * n_draw,) + values[v.name].shape[3:]) for v in value_vars])
    posterior = {name: np.asarray(o).reshape((n_chain, n_draw) + np.shape(o)[1:]) for name, o in zip(names, outs)}
    post_dims = {name: list(d) for name, d in model.named_vars_to_dims.items() if name in posterior and d
                 and all(x is not None for x in d)}

    stats = {}
    # not the NUTS step's model_logp: it is of the state before the exchange move, and the kept draw
    # may be another walker's (compute_scores compares a recorded lp with the draws)
    for key in ("diverging", "tree_depth", "step_size", "energy", "acceptance_rate", "n_steps"):
        if key in runs[0]["stats"][0]:
            stats[key] = np.array([[s[key] for s in run["stats"]] for run in runs])
    stats["exchange_accept"] = np.stack([np.stack(run["exchange"]) for run in runs])
    all_coords = {k: list(v) for k, v in model.coords.items() if v is not None}
    all_coords.update(coords, temperature=list(map(float, t)), pair=list(range(w - 1)))
    # a value variable without transform has the posterior's name: the two groups need their own dims
    idata = compat.from_dict({"posterior": posterior, "sample_stats": stats}, coords=all_coords,
                             dims={**post_dims, "exchange_accept": ["pair"]})
    pop_ds = compat.dict_to_dataset(pop, coords=all_coords, dims=pop_dims,
                                    attrs={"sampler": "pymc_cv.sample_population"})
    return compat.with_groups(idata, {POPULATION: pop_ds}, inplace=True)


class PopulationDraws(NamedTuple):
    """Per temperature of a population run (:func:`population_draws`)."""

    temperatures: np.ndarray
    posteriors: list
    samples: list
    scores: list
    chain: np.ndarray


def population_draws(idata, model=None, compile_kwargs=None):
    """Per temperature of a population run: the posterior variables, the unconstrained draws and
    the scores of that temperature's power posterior.

    Returns
    -------
    PopulationDraws, with
    t : array (w,)
    posteriors : list of w xarray Datasets (chain, draw, ...)
        The free variables (constrained) and deterministics, as ``pm.sample``'s posterior.
    X, S : lists of w arrays (chain * draw, d)
        Value variables, flattened in the order of ``model.value_vars``, and the scores
        t grad log p(y|x) + grad log p(x) (Jacobian included).
    chain : array (chain * draw,)
    """
    import pymc as pm

    model = pm.modelcontext(model)
    pop = population_group(idata)
    t = np.asarray(pop["temperature"].values, dtype=float)
    n_chain, n_draw, w = pop.sizes["chain"], pop.sizes["draw"], t.size
    n = n_chain * n_draw
    vals = value_draws(pop, model, ("temperature", "chain", "draw"))
    _, gl, gp = loglik_terms(model, compile_kwargs)(*vals)
    X = np.concatenate([v.reshape(w * n, -1) for v in vals], axis=1).astype(float)
    names, fn = posterior_fn(model, compile_kwargs)
    outs = [np.asarray(o) for o in fn(*vals)]
    post_dims = {name: list(d) for name, d in model.named_vars_to_dims.items() if name in names and d
                 and all(x is not None for x in d)}
    coords = {k: list(v) for k, v in model.coords.items() if v is not None}
    coords.update(dims_and_coords(model, model.eval_rv_shapes())[1])
    posteriors = []
    for k in range(w):
        sl = slice(k * n, (k + 1) * n)
        data = {name: o[sl].reshape((n_chain, n_draw) + o.shape[1:]) for name, o in zip(names, outs)}
        posteriors.append(compat.dict_to_dataset(data, coords=coords, dims=post_dims))
    S = [t[k] * gl[k * n:(k + 1) * n] + gp[k * n:(k + 1) * n] for k in range(w)]
    return PopulationDraws(t, posteriors, [X[k * n:(k + 1) * n] for k in range(w)], S,
                           np.repeat(np.arange(n_chain), n_draw))


def population_group(idata):
    """The ``population`` group of ``idata`` as a Dataset; a ValueError saying what to pass when absent."""
    if not compat.is_inference_data(idata) or POPULATION not in compat.group_names(idata):
        raise ValueError("idata has no 'population' group; pass the result of pymc_cv.sample_population (or an "
                         "InferenceData with the same layout).")
    return compat.group(idata, POPULATION)


def value_draws(pop, model, lead):
    """The model's value variables in the population group, each (n, *shape) with the three ``lead``
    dims (chain, draw and temperature, in that order of nesting) flattened into n."""
    missing = [v.name for v in model.value_vars if v.name not in pop]
    if missing:
        raise ValueError(f"the population group has no {missing} (the model's value variables); pass the model "
                         "the run was sampled from.")
    n = int(np.prod([pop.sizes[dim] for dim in lead]))
    return [np.asarray(pop[v.name].transpose(*lead, ...).values).reshape((n,) + tuple(pop[v.name].shape[3:]))
            for v in model.value_vars]
