"""Every difference between the two supported stacks, in one place.

- ArviZ 0.x (with PyMC 5): ``pm.sample`` returns ``arviz.InferenceData``; diagnostics are
  ``az.ess`` / ``az.mcse`` / ``az.rhat`` / ``az.psislw``; labels in ``arviz.labels``.
- ArviZ 1.x (with PyMC 6): ``pm.sample`` returns an ``xarray.DataTree`` whose children are the
  groups; array diagnostics are ``arviz_stats.base.array_stats``; labels in ``arviz_base``;
  there is no ``from_pystan`` (PyStan fits are converted through ``from_dict`` here).

The rest of the package reads and writes groups only through these functions, and gets back
the type it was given.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import hashlib
import inspect
import os
import sys
import threading
import warnings
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from . import batched_diagnostics

# ArviZ and PyMC load inside the functions that use them: `import pymc_cv` stays cheap without them.

__all__ = [
    "arviz_major", "is_inference_data", "group_names", "group", "with_groups", "dict_to_dataset", "from_dict",
    "ess_mean", "ess_bulk", "rhats", "mcse_mean", "rhat", "bfmi", "psis_khat", "labeller", "var_iter", "from_cmdstanpy",
    "pystan_posterior", "pymc_major", "graph_ancestors", "scan_outputs", "bambi_response_term", "nutpie_with_gradients",
    "setup_step", "compile_kwargs_for_deep_graphs",
]


@functools.cache
def arviz_major():
    """1 on ArviZ 1.x (DataTree), 0 on ArviZ 0.x (InferenceData)."""
    import arviz as az

    return int(az.__version__.split(".")[0])


def _is_datatree(obj):
    import xarray as xr

    return isinstance(obj, getattr(xr, "DataTree", ()))


def is_inference_data(obj):
    """True for what ``pm.sample`` returns on either stack (InferenceData or DataTree)."""
    if _is_datatree(obj):
        return True
    return hasattr(obj, "groups") and callable(obj.groups) and hasattr(obj, "add_groups")


def group_names(idata):
    """The top-level groups (``posterior``, ``sample_stats``, ...)."""
    if _is_datatree(idata):
        return list(idata.children)
    return list(idata.groups())


def group(idata, name):
    """One group as an ``xarray.Dataset``; ``KeyError`` when absent."""
    if name not in group_names(idata):
        raise KeyError(name)
    node = idata[name]
    return node.to_dataset() if _is_datatree(idata) else node


def with_groups(idata, groups, *, inplace=False):
    """``idata`` with ``groups`` ({name: Dataset}) added or replaced.

    ``inplace=False`` returns a new object of the same type sharing the other groups' data.
    """
    if _is_datatree(idata):
        import xarray as xr

        out = idata if inplace else idata.copy(deep=False)
        for name, ds in groups.items():
            out[name] = xr.DataTree(ds)
        return out
    import arviz as az

    with _own_groups_allowed():
        if inplace:
            for name, ds in groups.items():
                if name in idata.groups():
                    delattr(idata, name)
                idata.add_groups({name: ds})
            return idata
        kept = {g: idata[g] for g in idata.groups() if g not in groups}
        return az.InferenceData(**kept, **groups)


@contextlib.contextmanager
def _own_groups_allowed():
    """ArviZ 0.20 warns on any group outside its scheme; pymc-cv's groups are outside it by design."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*group is not defined in the InferenceData scheme")
        yield


def dict_to_dataset(data, *, coords=None, dims=None, attrs=None):
    """A (chain, draw, ...) Dataset from arrays, with ArviZ's conventions on either stack."""
    import arviz as az

    if arviz_major() >= 1:
        return az.dict_to_dataset(data, coords=coords, dims=dims, attrs=attrs)
    return az.dict_to_dataset(data, coords=coords, dims=dims, attrs=attrs, library=None)


def from_dict(groups, *, coords=None, dims=None):
    """InferenceData / DataTree from ``{group: {var: array (chain, draw, ...)}}``."""
    import arviz as az

    if arviz_major() >= 1:
        return az.from_dict(groups, coords=coords, dims=dims)
    with _own_groups_allowed():
        return az.from_dict(**groups, coords=coords, dims=dims)


@contextlib.contextmanager
def _lazy_jax_set_aside():
    """JAX left unimported while ArviZ's diagnostics run.

    arviz-base registers JAX as a lazy module wherever it is installed (numpyro pulls it in), and
    SciPy's array-API helpers (``logsumexp`` inside PSIS: the first of them a summary reaches) look up
    ``jax.Array`` on whatever ``sys.modules["jax"]`` holds, which imports it, for numpy arrays that are
    not JAX's: 0.2-0.8 s of the first ``summary`` in a process (eight schools on nutpie's draws, PyMC 6:
    2.50 -> 2.25 s at the median of 3 processes with JAX's files in the disk cache; 0.82 s of a first
    call profiled with a cold cache).  A lazy module not yet loaded is set aside for the call and put
    back unless JAX was imported meanwhile.
    """
    lazy = sys.modules.get("jax")
    if lazy is None or type(lazy).__name__ != "_LazyModule":
        yield
        return
    del sys.modules["jax"]
    try:
        yield
    finally:
        sys.modules.setdefault("jax", lazy)


@contextlib.contextmanager
def _array_stats():
    """``arviz_stats.base.array_stats`` (ArviZ 1), JAX set aside while it runs."""
    from arviz_stats.base import array_stats

    with _lazy_jax_set_aside():
        yield array_stats


# one call can diagnose the same draws more than once (the integrands' mixing check, then the table's
# R-hat and ESS columns: varying intercepts, 174 rows, 1.0 of 3.6 s went to two identical R-hat passes
# on ArviZ 0.x); inside ``diagnosed_once()`` each result is computed once, keyed on the values
_DIAGNOSED = contextvars.ContextVar("pymc_cv_diagnosed", default=None)
# what one call diagnoses twice; the ESS of the mean is asked of arrays (integrands, held-out
# residuals) that are not asked twice, and keying 20,000-draw rows on their values costs as much as
# the saving (varying intercepts, 4 x 5,000: 0.5 s of hashing)
_DIAGNOSED_TWICE = {("rhat", "rank"), ("ess", "bulk")}


@contextlib.contextmanager
def diagnosed_once():
    """Within this block, ArviZ's bulk ESS and R-hat of identical draws are computed once."""
    token = _DIAGNOSED.set({})
    try:
        yield
    finally:
        _DIAGNOSED.reset(token)


def diagnosing_once(fn):
    """``fn`` run inside :func:`diagnosed_once`."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with diagnosed_once():
            return fn(*args, **kwargs)
    return wrapper


def _diagnostic(ary, name, **kwargs):
    """ArviZ's ``name`` ("ess" or "rhat") over the last two axes (chain, draw); leading axes kept."""
    ary = np.asarray(ary, dtype=float)
    done = _DIAGNOSED.get()
    if done is None or (name, kwargs.get("method")) not in _DIAGNOSED_TWICE:
        return _computed_diagnostic(ary, name, **kwargs)
    # per (chain, draw) slice: the table's rows are a subset of the integrands the fit saw
    lead = ary.shape[:-2]
    flat = np.ascontiguousarray(ary.reshape((-1,) + ary.shape[-2:]))
    what = (name, tuple(sorted(kwargs.items())), ary.shape[-2:])
    keys = [what + (hashlib.sha1(row.data, usedforsecurity=False).digest(),) for row in flat]
    first = {}
    for i, k in enumerate(keys):
        if k not in done:
            first.setdefault(k, i)
    todo = list(first.values())
    if todo:
        values = np.atleast_1d(_computed_diagnostic(flat[todo], name, **kwargs))
        done.update(zip((keys[i] for i in todo), values))
    return np.array([done[k] for k in keys], dtype=float).reshape(lead)


@contextlib.contextmanager
def _numpy_path():
    """ArviZ 0.x's diagnostics on their numpy path.  Where numba is installed (PyTensor 2.38 requires
    it) ArviZ 0.x takes chain variances through numba, which compiles them in every new process: 0.1-0.2
    s of the first summary (eight schools, 4 x 1,000 draws: 2.03 -> 1.83 s), and the numba path of the
    sd's mcse calls float() on a 1-element array, an error under NumPy 2.  JAX is set aside too
    (:func:`_lazy_jax_set_aside`)."""
    import arviz as az

    flag = az.Numba.numba_flag
    az.Numba.numba_flag = False
    try:
        with _lazy_jax_set_aside():
            yield
    finally:
        az.Numba.numba_flag = flag


# ArviZ's diagnostics of rows of at least this many values (chains x draws) are spread over threads, and
# only the rank-based ones and the MCSEs: 174 rows on 2 cores, ArviZ 0.x, one thread -> two: rank R-hat
# 0.24 -> 0.22 s at 4 x 1,000 draws, 0.41 -> 0.34 at 4 x 2,000, 1.00 -> 0.57 at 4 x 5,000 (bulk ESS
# alike); the mcse of the mean, sd and two quantiles 0.28 -> 0.45, 0.44 -> 0.43, 1.03 -> 0.58; the ESS of
# the mean 0.085 -> 0.093 at 4 x 5,000 (its FFTs are quick, the threads contend for the GIL)
_THREADED_MIN_VALUES = 8000
_THREADED = {("rhat", "rank"), ("ess", "bulk")}


# ArviZ's algorithms batched over rows (``batched_diagnostics``): the same numbers, for all rows at once
_BATCHED = {("ess", "mean"): batched_diagnostics.ess_mean, ("ess", "bulk"): batched_diagnostics.ess_bulk,
            ("rhat", "rank"): batched_diagnostics.rhat_rank}


def _arviz_row(row, name, **kwargs):
    """ArviZ's own ``name`` ("ess", "rhat" or "mcse") of one (chain, draw) array, a float."""
    with _mcse_function():  # ArviZ's warnings silenced, ArviZ 0.x on its numpy path
        if arviz_major() >= 1:
            with _array_stats() as stats:
                return float(np.ravel(getattr(stats, name)(row, **kwargs))[0])
        import arviz as az

        return float(np.ravel(getattr(az, name)(row, **kwargs))[0])


@functools.cache
def batched_agreeing():
    """The batched diagnostics that give the installed ArviZ's own numbers, checked once on fixed draws
    (ArviZ 0.20's MCSE of the sd is another formula): {(name, method)}; the others go to ArviZ row by row."""
    rng = np.random.default_rng(0)
    ary = np.cumsum(rng.normal(size=(3, 4, 60)), axis=2) * 0.3 + rng.normal(size=(3, 4, 60))
    ary[2] = np.round(ary[2])  # ties
    batched = {**_BATCHED, ("mcse", "mean"): batched_diagnostics.mcse_mean,
               ("mcse", "sd"): batched_diagnostics.mcse_sd,
               ("mcse", "quantile"): lambda a: batched_diagnostics.mcse_quantile(a, 0.03)}
    agreeing = set()
    for (name, method), fn in batched.items():
        kwargs = {"method": method, **({"prob": 0.03} if method == "quantile" else {})}
        want = np.array([_arviz_row(row, name, **kwargs) for row in ary])
        if np.allclose(fn(ary), want, rtol=1e-9, atol=0.0):
            agreeing.add((name, method))
    return frozenset(agreeing)


def _computed_diagnostic(ary, name, **kwargs):
    batched = _BATCHED.get((name, kwargs.get("method")))
    if batched is not None and set(kwargs) == {"method"} and (name, kwargs["method"]) in batched_agreeing():
        flat = ary.reshape((-1,) + ary.shape[-2:])
        if batched_diagnostics.handles(flat):
            return batched(flat).reshape(ary.shape[:-2])
    threaded = (name, kwargs.get("method")) in _THREADED
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if arviz_major() >= 1:
            with _array_stats() as stats:
                return _by_row_chunks(lambda a: np.asarray(getattr(stats, name)(a, **kwargs), dtype=float), ary,
                                      threaded)
        with _numpy_path():
            return _by_row_chunks(lambda a: _computed_diagnostic_0x(a, name, **kwargs), ary, threaded)


# at most this many threads (measured on 2 cores; more contend for the GIL)
_MAX_THREADS = 4


def _usable_cores():
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _threads_for(row_size):
    """Threads for ArviZ's diagnostics of rows of ``row_size`` values: one per usable core (at most
    ``_MAX_THREADS``) for long rows; one off the main thread, where a dask worker or a user's own pool
    already sets how many run at once."""
    if row_size < _THREADED_MIN_VALUES or threading.current_thread() is not threading.main_thread():
        return 1
    return max(1, min(_MAX_THREADS, _usable_cores()))


def _split_evenly(n, parts):
    """``parts`` contiguous slices covering range(n), sizes differing by at most one, none empty."""
    parts = max(1, min(parts, n))
    edges = [round(i * n / parts) for i in range(parts + 1)]
    return [slice(a, b) for a, b in zip(edges[:-1], edges[1:])]


def _map_in_threads(fn, parts):
    """``[fn(p) for p in parts]``, one thread per part.  ArviZ's diagnostics loop over rows in Python,
    and the numpy calls of each row (sorts, ranks, FFTs) release the GIL.  ``fn`` must leave
    process-wide state (warnings filters, ArviZ's flags) alone: the caller sets it around the call."""
    if len(parts) < 2:
        return [fn(p) for p in parts]
    with ThreadPoolExecutor(max_workers=len(parts)) as pool:
        return list(pool.map(fn, parts))


def _by_row_chunks(fn, ary, threaded=True):
    """``fn`` (a diagnostic over the last two axes) of ``ary``; with ``threaded``, its rows in one chunk
    per thread where they are long enough to gain: the same numbers."""
    if ary.ndim == 2:
        return fn(ary)
    lead = ary.shape[:-2]
    flat = ary.reshape((-1,) + ary.shape[-2:])
    parts = _split_evenly(flat.shape[0], _threads_for(ary.shape[-2] * ary.shape[-1]) if threaded else 1)
    if len(parts) == 1:
        return np.asarray(fn(ary), dtype=float)
    out = _map_in_threads(lambda s: np.asarray(fn(flat[s]), dtype=float).reshape(-1), parts)
    return np.concatenate(out).reshape(lead)


def _computed_diagnostic_0x(ary, name, **kwargs):
    import arviz as az

    fn = getattr(az, name)
    if ary.ndim == 2:
        return np.asarray(fn(ary, **kwargs), dtype=float)
    lead = ary.shape[:-2]
    # ArviZ 0.x on a Dataset wants (chain, draw, ...) per variable
    flat = np.moveaxis(ary.reshape((-1,) + ary.shape[-2:]), 0, -1)
    out = fn(az.convert_to_dataset(flat), **kwargs)["x"].values
    return np.asarray(out, dtype=float).reshape(lead)


def ess_mean(ary):
    """ESS of the mean over the last two axes (chain, draw) of ``ary``; leading axes are kept."""
    return _diagnostic(ary, "ess", method="mean")


def ess_bulk(ary):
    """ArviZ's bulk ESS (rank-normalised) over the last two axes (chain, draw); leading axes kept."""
    return _diagnostic(ary, "ess", method="bulk")


def rhats(ary):
    """ArviZ's rank-normalised split R-hat over the last two axes (chain, draw); leading axes kept."""
    return _diagnostic(ary, "rhat", method="rank")


@contextlib.contextmanager
def _mcse_function():
    """ArviZ's MCSE of one (chain, draw) array, ``fn(ary, method=..., **kwargs) -> float``, with its
    warnings silenced (and ArviZ 0.x on its numpy path) while the block runs."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if arviz_major() >= 1:
            with _array_stats() as stats:
                yield lambda ary, **kw: float(stats.mcse(ary, **kw))
            return
        import arviz as az

        with _numpy_path():
            yield lambda ary, **kw: float(np.ravel(az.mcse(ary, **kw))[0])


def _mcse(ary, method, **kwargs):
    with _mcse_function() as mcse:
        return mcse(np.asarray(ary, dtype=float), method=method, **kwargs)


def mcse_rows(rows, probs):
    """ArviZ's MCSE of the mean, the sd and each of the ``probs`` quantiles of every (chain, draw)
    array in ``rows``: an array (len(rows), 2 + len(probs)), the rows spread over threads."""
    rows = [np.asarray(r, dtype=float) for r in rows]
    out = np.empty((len(rows), 2 + len(probs)))
    by_shape = {}
    for i, r in enumerate(rows):
        by_shape.setdefault(r.shape, []).append(i)
    rest = []
    for shape, idx in by_shape.items():
        ary = np.stack([rows[i] for i in idx]) if len(shape) == 2 else None
        if ary is None or not batched_diagnostics.handles(ary) or not _MCSES <= batched_agreeing():
            rest += idx
            continue
        out[idx] = np.column_stack([batched_diagnostics.mcse_mean(ary), batched_diagnostics.mcse_sd(ary)]
                                   + [batched_diagnostics.mcse_quantile(ary, p) for p in probs])
    if rest:
        out[rest] = _mcse_rows_by_arviz([rows[i] for i in rest], probs)
    return out


_MCSES = {("mcse", "mean"), ("mcse", "sd"), ("mcse", "quantile")}


def _mcse_rows_by_arviz(rows, probs):
    """:func:`mcse_rows` by ArviZ's own functions, one row at a time, spread over threads."""
    with _mcse_function() as mcse:
        def chunk(s):
            return [[mcse(a, method="mean"), mcse(a, method="sd")] + [mcse(a, method="quantile", prob=p) for p in probs]
                    for a in rows[s]]

        parts = _split_evenly(len(rows), _threads_for(max(r.size for r in rows))) if rows else []
        out = _map_in_threads(chunk, parts)
    return np.array([v for part in out for v in part], dtype=float).reshape(len(rows), 2 + len(probs))


def mcse_mean(ary):
    """ArviZ's MCSE of the mean of ``ary`` (chain, draw)."""
    return _mcse(ary, "mean")


def mcse_sd(ary):
    """ArviZ's MCSE of the sd of ``ary`` (chain, draw)."""
    return _mcse(ary, "sd")


def mcse_quantile(ary, prob):
    """ArviZ's MCSE of the ``prob`` quantile of ``ary`` (chain, draw)."""
    return _mcse(ary, "quantile", prob=prob)


def default_ci_prob():
    """The installed ArviZ's default interval probability (0.94 on 0.x, 0.89 on 1.x unless set)."""
    import arviz as az

    return float(az.rcParams["stats.ci_prob"])


def interval_names(ci_prob):
    """Column names of the lower and upper bound of an equal-tailed interval, as the installed
    ArviZ names its summary's interval (``eti89_lb`` on 1.x; ``eti_3%`` like ``hdi_3%`` on 0.x)."""
    if arviz_major() >= 1:
        pct = f"{100 * ci_prob:g}"
        return f"eti{pct}_lb", f"eti{pct}_ub"
    alpha = 1 - ci_prob
    return f"eti_{100 * alpha / 2:g}%", f"eti_{100 * (1 - alpha / 2):g}%"


def rhat(ary):
    """ArviZ's rank-normalised split R-hat of ``ary`` (chain, draw)."""
    ary = np.asarray(ary, dtype=float)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if arviz_major() >= 1:
            with _array_stats() as stats:
                return float(stats.rhat(ary))
        import arviz as az

        with _numpy_path():
            return float(az.rhat(ary))


def bfmi(energy):
    """ArviZ's E-BFMI of each chain of the sampler's ``energy`` (chain, draw)."""
    energy = np.asarray(energy, dtype=float)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if arviz_major() >= 1:
            with _array_stats() as stats:
                return np.asarray(stats.bfmi(energy), dtype=float)
        import arviz as az

        with _numpy_path():
            return np.asarray(az.bfmi(energy), dtype=float)


def psis_khat(log_weights):
    """Pareto k-hat of PSIS on 1-d log weights (``arviz_stats`` on ArviZ 1, ``az.psislw`` before)."""
    lw = np.asarray(log_weights, dtype=float)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if arviz_major() >= 1:
            # arviz_stats' psislw takes log-likelihood values (it smooths -ary), not log weights
            try:
                with _array_stats() as stats:
                    _, khat = stats.psislw(-lw)
            except ValueError as err:
                if "tail values are the same" not in str(err):
                    raise
                return float("inf")  # a flat tail: what az.psislw of ArviZ 0.x reports for it
        else:
            import arviz as az

            with _lazy_jax_set_aside():
                _, khat = az.psislw(lw)
    return float(khat)


def labeller():
    """ArviZ's default labeller (``theta[0]``, ``theta[a]`` with coords)."""
    if arviz_major() >= 1:
        from arviz_base.labels import BaseLabeller
    else:
        from arviz.labels import BaseLabeller
    return BaseLabeller()


def var_iter(dataset, var_names):
    """ArviZ's iterator over the scalar components of variables: (name, sel, isel, values)."""
    if arviz_major() >= 1:
        from arviz_base.sel_utils import xarray_var_iter

        # on ArviZ 1 combined=False means "loop over chains"; None leaves that to skip_dims
        return xarray_var_iter(dataset[list(var_names)], combined=None, skip_dims={"chain", "draw"},
                               dim_order=["chain", "draw"])
    from arviz.sel_utils import xarray_var_iter

    return xarray_var_iter(dataset[list(var_names)], combined=False, skip_dims={"chain", "draw"})


def from_cmdstanpy(fit, **kwargs):
    """ArviZ's CmdStanPy converter (same name on both stacks)."""
    import arviz as az

    return az.from_cmdstanpy(posterior=fit, **kwargs)


def pystan_posterior(fit, posterior_model=None, **kwargs):
    """InferenceData / DataTree of a PyStan 3 fit.

    ArviZ 1 ships no PyStan converter, so there the posterior (the program's parameters,
    transformed parameters and generated quantities) and the sampler's ``lp__``,
    ``divergent__`` and ``energy__`` are read from the fit itself; ``kwargs`` (``coords``, ``dims``) pass on.
    """
    if arviz_major() < 1:
        import arviz as az

        return az.from_pystan(posterior=fit, posterior_model=posterior_model, **kwargs)
    n_chain, n_draw = fit.num_chains, fit.num_samples
    posterior = {}
    for name, shape in zip(fit.param_names, fit.dims):
        # (*shape, draws) with chains concatenated along draws; a scalar comes as (1, draws)
        arr = np.asarray(fit[name]).reshape(tuple(shape) + (-1,))
        arr = np.moveaxis(arr.reshape(arr.shape[:-1] + (n_draw, n_chain), order="F"), (-1, -2), (0, 1))
        posterior[name] = arr
    stats = {}
    for stan_name, az_name in (("lp__", "lp"), ("divergent__", "diverging"), ("stepsize__", "step_size"),
                               ("treedepth__", "tree_depth"), ("accept_stat__", "acceptance_rate"),
                               ("energy__", "energy")):
        if stan_name in fit.sample_and_sampler_param_names:
            arr = np.asarray(fit[stan_name]).reshape(n_draw, n_chain, order="F").T
            stats[az_name] = arr.astype(bool) if az_name == "diverging" else arr
    return from_dict({"posterior": posterior, "sample_stats": stats}, **kwargs)


@functools.cache
def pymc_major():
    """6 on PyMC 6, 5 on PyMC 5."""
    import pymc

    return int(pymc.__version__.split(".")[0])


def graph_ancestors(variables):
    """PyTensor's ``ancestors`` (in ``pytensor.graph.traversal`` since 2.32; ``graph.basic`` before)."""
    try:
        from pytensor.graph.traversal import ancestors
    except ImportError:
        from pytensor.graph.basic import ancestors
    return ancestors(variables)


def scan_outputs(fn, **kwargs):
    """``pytensor.scan``'s outputs alone: PyTensor 2.38 and 3 take ``return_updates=False`` (and warn without
    it); older versions return (outputs, updates)."""
    import pytensor

    if "return_updates" in inspect.signature(pytensor.scan).parameters:
        return pytensor.scan(fn, return_updates=False, **kwargs)
    return pytensor.scan(fn, **kwargs)[0]


def bambi_response_term(bmb_model):
    """A Bambi model's response term (``Model.response_term`` from Bambi 0.18; ``response_component.term``,
    deprecated there, before)."""
    if hasattr(type(bmb_model), "response_term"):
        return bmb_model.response_term
    return bmb_model.response_component.term


def nutpie_with_gradients():
    """``pm.sample``'s keyword arguments that sample with nutpie and keep each draw's unconstrained point
    and gradient: PyMC 6 passes ``store_unconstrained`` to nutpie itself (from ``idata_kwargs``) and takes
    nutpie's options in ``nuts=``; PyMC 5 passes ``nuts_sampler_kwargs`` to nutpie as they are."""
    if pymc_major() >= 6:
        return {"nuts_sampler": "nutpie", "idata_kwargs": {"include_transformed": True},
                "nuts": {"store_gradient": True}}
    return {"nuts_sampler": "nutpie", "nuts_sampler_kwargs": {"store_unconstrained": True, "store_gradient": True}}


def setup_step(step, rng, tune, draws):
    """Seed a PyMC step method before its chain, as ``pm.sample`` does (PyMC 6: ``setup_chain``;
    PyMC 5: ``set_rng``)."""
    if hasattr(step, "setup_chain"):
        step.setup_chain(rng, tune, draws)
    else:
        step.set_rng(rng)


def smc_imh_kernel(model, draws, rng, threshold, compile_kwargs, kernel_class=None, prepare=None):
    """PyMC's SMC kernel (IMH, or ``kernel_class``, a subclass of it), initialised, compiled in the mode
    the rest of the run uses (a model compiled in two backends, e.g. Numba and C, broke its scan's inner
    graph on the next run).  Where PyMC's kernels can be initialised again (:func:`smc_reinitialisable`),
    ``rng`` is used by the initialisation alone, so a kernel built once gives the same run for the same
    ``rng`` as a new one.  ``prepare(kernel)`` runs before the first initialisation."""
    from pymc.smc.kernels import IMH, SMC_KERNEL

    kwargs = {}
    if compile_kwargs and "compile_kwargs" in inspect.signature(SMC_KERNEL.__init__).parameters:
        kwargs["compile_kwargs"] = dict(compile_kwargs)
    cls = kernel_class or IMH
    if smc_reinitialisable():
        # the constructor's generator only picks an initial point for the variables' shapes
        kernel = cls(draws=draws, model=model, random_seed=np.random.default_rng(0), threshold=threshold, **kwargs)
        if prepare is not None:
            prepare(kernel)
        kernel.initialize(None, rng)
    else:  # PyMC < 5.2x
        kernel = cls(draws=draws, model=model, random_seed=rng, threshold=threshold, **kwargs)
        if prepare is not None:
            prepare(kernel)
        kernel._initialize_kernel()
        kernel.setup_kernel()
    return kernel


def compiled_draws(outputs):
    """``(draw, rngs)``: a compiled function of no inputs returning ``outputs`` (random variables), and its
    random generators, for :func:`reseed_draws` before each call (``pm.draw`` compiles at every call)."""
    from pytensor.tensor.random.type import RandomGeneratorType

    try:
        from pymc.pytensorf import compile as compile_fn
    except ImportError:  # PyMC < 5.2x
        from pymc.pytensorf import compile_pymc as compile_fn
    fn = compile_fn(inputs=[], outputs=outputs, random_seed=0)
    return fn, [v for v in fn.get_shared() if isinstance(v.type, RandomGeneratorType)]


def reseed_draws(rngs, seed):
    """New generators for ``rngs`` from ``seed`` (an int, None, or a numpy Generator, which gives one)."""
    from pymc.pytensorf import reseed_rngs

    if isinstance(seed, np.random.Generator):
        seed = int(seed.integers(2**63))
    reseed_rngs(rngs, seed)


def smc_reinitialisable():
    """Whether PyMC's SMC kernels start a new run with ``initialize(start, rng)``."""
    from pymc.smc.kernels import SMC_KERNEL

    return hasattr(SMC_KERNEL, "initialize")


# PyTensor 3's rewrite that drops the transpose of a symmetric matrix asks its assumption system, per
# transpose, whether the input is symmetric; on the Meta-CV's training graph (a gradient through an
# inner gradient) those queries took 15 of the 38 s the compilation took, and none of its transposes is
# of a symmetric matrix.  PyTensor 2 has no such rewrite, and excluding an absent one does nothing.
_SLOW_REWRITES = ("useless_symmetric_transpose",)


def compile_kwargs_for_deep_graphs(compile_kwargs):
    """``compile_kwargs`` for ``pytensor.function`` on a large gradient graph: the default mode without
    the rewrites in ``_SLOW_REWRITES`` unless the caller chose a mode (then it is used as given)."""
    kwargs = dict(compile_kwargs or {})
    if "mode" not in kwargs:
        from pytensor.compile.mode import get_default_mode

        kwargs["mode"] = get_default_mode().excluding(*_SLOW_REWRITES)
    return kwargs
