"""Scores of a PyMC model at every posterior draw, on the unconstrained space.

The log density (Jacobian included) and its gradient come from the function PyMC's NUTS
compiles, ``model.logp_dlogp_function(ravel_inputs=True)``, called once per draw.  After
``pm.sample`` its compiled code is in PyTensor's cache, so it costs a fraction of a second where
a graph of our own took seconds of C compilation (`bench/scores.py`).  Draws on the
unconstrained space are taken from the posterior when it already holds the value variables
(``idata_kwargs={"include_transformed": True}``), and otherwise computed from the constrained
draws with the model's own transforms, vectorised over draws and run by numpy (no compilation).
"""

from __future__ import annotations

import warnings
import weakref

import numpy as np

from .. import compat
from ..core.density_check import DrawsModelMismatchError, check_recorded_logp
from ..core.heldout import repeated_draws
from ..idata_groups import (
    CHECKED,
    PAIRING,
    SCORE,
    SKIPPED,
    UNCHECKED,
    UNCONSTRAINED,
    has_stored_scores,
    recorded_sampler,
    stored_labels,
    stored_names,
    with_cv_groups,
    with_stored_scores,
)
from ..progress import progress_bar
from . import bambi

# PyMC and PyTensor load inside the functions that use them: `import pymc_cv` stays cheap without them.

__all__ = ["compute_scores"]

_CHUNK = 1_000  # draws per step of the progress bar


def check_model(model):
    discrete = [rv.name for rv in model.free_RVs if rv.type.dtype.startswith(("int", "uint", "bool"))]
    if discrete:
        raise ValueError(
            f"The model has discrete free variables {discrete}: they have no gradient, and Stein "
            "control variates need continuous parameters. Marginalize them out (e.g. "
            "pymc_extras.marginalize) or condition on them with pm.observe / pm.do, then resample."
        )


def _current_value(var):
    """The value a data variable or observed RV of the model holds now (None if not a constant)."""
    if hasattr(var, "get_value"):
        return np.asarray(var.get_value())
    if hasattr(var, "data"):
        return np.asarray(var.data)
    try:
        return np.asarray(var.eval())
    except Exception:  # a graph with inputs: nothing to compare
        return None


def _check_same_data(idata, model):
    """The draws were sampled with the data in ``observed_data`` / ``constant_data``; scores taken
    with other data (``pm.set_data`` after sampling, another dataset) belong to another posterior.
    Returns how many of the model's data variables were compared."""
    differ, compared = [], 0
    for group in ("observed_data", "constant_data"):
        if group not in compat.group_names(idata):
            continue
        stored = compat.group(idata, group)
        for name in stored.data_vars:
            if name not in model.named_vars:
                continue
            var = model.named_vars[name]
            var = model.rvs_to_values.get(var, var)  # an observed RV: its data
            now = _current_value(var)
            then = np.asarray(stored[name].values)
            if now is None:
                continue
            compared += 1
            # ArviZ stores a scalar observation with shape (1,): compare the values, not the shapes
            same = now.size == then.size and np.allclose(now.astype(float).ravel(), then.astype(float).ravel(),
                                                         equal_nan=True)
            if not same:
                differ.append(f"{group}['{name}']")
    if differ:
        raise ValueError(
            f"The model's data differ from the data the draws were sampled with ({', '.join(differ)}): the "
            "scores would belong to another posterior and every control variate would be confidently wrong. "
            "Restore the sampling data (e.g. pm.set_data({...}) with idata.constant_data) before computing "
            "scores, and set the new data only for predictions afterwards."
        )
    return compared


def batched(fn_inputs, outputs, replace, compile_kwargs):
    import pytensor
    from pytensor.compile.mode import Mode, get_mode
    from pytensor.graph.replace import vectorize_graph

    batched = vectorize_graph(outputs, replace=replace)
    kwargs = dict(compile_kwargs)
    # as PyMC compiles a log density: a parameter outside its support gives -inf, not an error
    # (one bad draw must not stop the evaluation of the others)
    mode = get_mode(kwargs.pop("mode", None))
    mode = Mode(linker=mode.linker, optimizer=mode.provided_optimizer.including("local_check_parameter_to_ninf_switch"))
    return pytensor.function(fn_inputs, batched, on_unused_input="ignore", mode=mode, **kwargs)


def batch_input(var):
    import pytensor.tensor as pt

    return pt.tensor(dtype=var.dtype, shape=(None,) + var.type.shape, name=f"{var.name}_draws")


def posterior_fn(model, compile_kwargs):
    """Names and a compiled map from batched value-variable draws to the free RVs (constrained)
    and deterministics: the variables of ``pm.sample``'s posterior."""
    rvs = [*model.free_RVs, *model.deterministics]
    outs = model.replace_rvs_by_values(rvs)
    inputs = {v: batch_input(v) for v in model.value_vars}
    return [rv.name for rv in rvs], batched([inputs[v] for v in model.value_vars], outs, inputs,
                                             dict(compile_kwargs or {}))


def forward_transform_fn(model, compile_kwargs):
    """Compiled map from batched constrained draws of the free RVs to batched value variables.

    Without a ``mode`` in ``compile_kwargs`` it runs on numpy (PyTensor's Python linker, without
    elementwise fusion, whose fused loops would run element by element there): transforms are a
    few elementwise ops, which compiled to C cost a second or more of compilation per model."""
    from pytensor.compile.mode import Mode, get_mode
    from pytensor.graph.replace import graph_replace

    core = {rv: rv.type() for rv in model.free_RVs}
    outs = []
    for rv in model.free_RVs:
        tr = model.rvs_to_transforms.get(rv)
        if tr is None:
            outs.append(core[rv])
            continue
        expr = tr.forward(core[rv], *rv.owner.inputs)
        # parameters of a transform (e.g. Uniform bounds) may depend on other free RVs
        outs.append(graph_replace(expr, {r: core[r] for r in model.free_RVs if r is not rv}, strict=False))
    inputs = {rv: batch_input(core[rv]) for rv in model.free_RVs}
    if "mode" not in compile_kwargs:
        optimizer = get_mode("FAST_RUN").provided_optimizer.excluding("fusion")
        compile_kwargs = {**compile_kwargs, "mode": Mode(linker="py", optimizer=optimizer)}
    return batched([inputs[rv] for rv in model.free_RVs], outs, {core[rv]: inputs[rv] for rv in model.free_RVs},
                    compile_kwargs)


class SamplerGradient:
    """The joint log density (Jacobian included) and its gradient at draws of the value variables,
    from the function PyMC's NUTS compiles (``model.logp_dlogp_function(ravel_inputs=True)``).

    Its compiled code is in PyTensor's cache once the model was sampled with PyMC's NUTS, so
    building it costs graph rewriting alone: 0.2-1.0 s on the workloads' models against 4-22 s for
    a batched graph of our own, whose elementwise loops gcc compiled anew.  Calling it once per
    draw costs 5-200 microseconds a draw.
    """

    def __init__(self, model, compile_kwargs):
        self._fn = model.logp_dlogp_function(ravel_inputs=True, **compile_kwargs)
        self._fn.set_extra_values({})  # every value variable is differentiated (check_model)
        self.dtype = self._fn.dtype

    def __call__(self, X):
        """(logp (m,), gradient (m, d)) at the draws ``X`` (m, d), the value variables raveled
        and concatenated in the model's order."""
        X = np.ascontiguousarray(X, dtype=self.dtype)
        return at_distinct_draws(self._evaluate, [X])

    def _evaluate(self, X):
        logp = np.empty(X.shape[0])
        grad = np.empty(X.shape)
        for i, x in enumerate(X):
            logp[i], grad[i] = self._fn(x)
        return logp, grad


def at_distinct_draws(fn, draws):
    """``fn(*draws)``, each draw evaluated once: ``draws`` are arrays (n, ...) and ``fn`` returns a
    sequence of arrays (n, ...).  Samplers that reject proposals (random-walk Metropolis, slice,
    DEMetropolis) repeat draws, most of them at Metropolis's usual acceptance rate of a quarter, and
    a log density with its gradient is the costly part of an ODE model's scores."""
    n = len(draws[0])
    rows = np.concatenate([np.asarray(x, dtype=float).reshape(n, -1) for x in draws], axis=1)
    rep = repeated_draws(rows) if n else None
    if rep is None:
        return fn(*draws)
    _, unique, inverse, _ = rep
    return [np.asarray(out)[inverse] for out in fn(*[np.asarray(x)[unique] for x in draws])]


def _check_draws_match(post, model, shapes):
    """Every variable the scores need is in the posterior with the model's shape.  True when the
    posterior holds the value variables themselves (``include_transformed=True``)."""
    have_values = all(v.name in post for v in model.value_vars)
    if not have_values:
        missing = [rv.name for rv in model.free_RVs if rv.name not in post]
        if missing:
            hint = (" Bambi's fit leaves out the offsets of group-specific terms (omit_offsets=True); pass the "
                    "Bambi model itself as model=, or fit with omit_offsets=False."
                    if all(name.endswith("_offset") for name in missing) else "")
            raise ValueError(
                f"The posterior has no draws of {missing}; was idata sampled from this model? "
                f"It holds {sorted(post.data_vars)}.{hint}"
            )
    for var in model.value_vars if have_values else model.free_RVs:
        got = tuple(post[var.name].shape[2:])
        if got != tuple(shapes[var.name]):
            raise ValueError(
                f"Draws of '{var.name}' have shape {got} per draw but the model's '{var.name}' has "
                f"shape {tuple(shapes[var.name])}; idata and model do not match."
            )
    return have_values


def _in_model_order(post, model):
    """``post`` with each free variable's dims in the model's order where it holds them in another
    (Bambi puts a response's categories before the groups: (category, group) draws of a (group,
    category) variable)."""
    out = post
    for rv in model.free_RVs:
        named = model.named_vars_to_dims.get(rv.name)
        if rv.name not in post or not named or any(dim is None for dim in named):
            continue
        have = post[rv.name].dims[2:]
        if tuple(have) != tuple(named) and sorted(have) == sorted(named):
            if out is post:
                out = post.copy()
            out[rv.name] = post[rv.name].transpose(*post[rv.name].dims[:2], *named)
    return out


def _flat(post, name, n):
    arr = np.asarray(post[name].transpose("chain", "draw", ...).values)
    return arr.reshape((n,) + arr.shape[2:])


def compute_scores(idata, model=None, *, extend_inferencedata=True, progressbar=True, compile_kwargs=None,
                   check_logp=True, stored_gradients=True):
    """Add the unconstrained draws and the scores of ``model`` at every posterior draw.

    Parameters
    ----------
    idata : arviz.InferenceData
        Output of ``pm.sample()`` (with a ``posterior`` group) for this model.
    model : pymc.Model or bambi.Model, optional
        Taken from the model context when not given (as ``pm.compute_log_likelihood``).  For a
        Bambi model the scores are taken at the draws its sampler made (Bambi rewrites the
        intercept after sampling when it centres the predictors); the posterior is left as it is.
    extend_inferencedata : bool
        Add the two groups to ``idata`` in place and return it (PyMC's convention); False leaves
        ``idata`` as it is and returns a new InferenceData with its groups and the two new ones.
    progressbar : bool
        Show PyMC's progress bar while draws are evaluated in chunks.
    compile_kwargs : dict, optional
        Passed to ``model.logp_dlogp_function``, the compilation of the log density and its
        gradient that ``pm.sample`` does: give the ``compile_kwargs`` the draws were sampled with
        (e.g. ``{"mode": "NUMBA"}``) and the compiled code in PyTensor's cache is used again.
    check_logp : bool
        Compare the model's log density at the draws with the one the sampler recorded
        (``sample_stats.lp``, nutpie's ``logp``): equal up to a constant per chain, or a
        :class:`~pymc_cv.core.density_check.DrawsModelMismatchError` naming the likely cause
        (draws rewritten after sampling, another model with the same variable names, other
        data).  Without such a record the Stein check of ``summary`` is the guard.
    stored_gradients : bool
        When the sampler kept its unconstrained draws and gradients (nutpie's
        ``store_unconstrained=True, store_gradient=True``, also through ``pm.sample(nuts_sampler=
        "nutpie", nuts_sampler_kwargs=...)``), use them: nothing is compiled or evaluated, and the
        groups' attribute ``score_backend`` says so.  They are the sampler's own, so there is no
        recorded density to compare (``check_logp`` does not apply).  False evaluates the model.

    Returns
    -------
    arviz.InferenceData
        ``idata`` (or a new InferenceData) with ``unconstrained_posterior`` (value variables,
        e.g. ``sigma_log__``) and ``score`` (grad log p, Jacobian included), with the model's
        dims and coords.  The compiled function is kept per model for later calls.

    Examples
    --------
    >>> import numpy as np, pymc as pm, pymc_cv
    >>> with pm.Model() as model:
    ...     mu = pm.Normal("mu", 0, 10)
    ...     y = pm.Normal("y", mu, 1, observed=np.array([0.5, 1.5]))
    ...     idata = pm.sample(100, tune=100, chains=2, progressbar=False, random_seed=0,
    ...                       compute_convergence_checks=False)
    >>> idata = pymc_cv.compute_scores(idata, model, progressbar=False)
    >>> sorted(g for g in pymc_cv.compat.group_names(idata) if g in ("score", "unconstrained_posterior"))
    ['score', 'unconstrained_posterior']
    """
    import pymc as pm

    bmb = model if bambi.is_bambi_model(model) else None
    model = bambi.pymc_model(bmb) if bmb is not None else pm.modelcontext(model)
    check_model(model)
    compile_kwargs = dict(compile_kwargs or {})
    if not compat.is_inference_data(idata) or "posterior" not in compat.group_names(idata):
        raise ValueError("idata has no 'posterior' group; pass the InferenceData (DataTree on ArviZ 1) returned "
                         "by pm.sample().")
    if stored_gradients and has_stored_scores(idata):
        new = _stored_scores(idata, model)
        if not extend_inferencedata:
            return new
        return compat.with_groups(idata, {g: compat.group(new, g) for g in (UNCONSTRAINED, SCORE)}, inplace=True)
    data_compared = _check_same_data(idata, model)
    post = compat.group(idata, "posterior")
    if bmb is not None:
        post = bambi.sampled_posterior(bmb, post)
    post = _in_model_order(post, model)
    n_chain, n_draw = post.sizes["chain"], post.sizes["draw"]
    n = n_chain * n_draw
    shapes = model.eval_rv_shapes()
    value_vars = model.value_vars
    have_values = _check_draws_match(post, model, shapes)

    if have_values:
        values = [_flat(post, v.name, n) for v in value_vars]
        fwd = None
    else:
        fwd = forward_transform_fn(model, compile_kwargs)
        # a float32 model (pytensor.config.floatX) takes float32 input, whatever the sampler stored
        constrained = [_flat(post, rv.name, n).astype(rv.dtype) for rv in model.free_RVs]
    score_fn = _cached_score_fn(model, compile_kwargs, shapes)
    sizes = [int(np.prod(shapes[v.name], dtype=int)) for v in value_vars]
    chunks = [slice(i, min(i + _CHUNK, n)) for i in range(0, n, _CHUNK)]
    out_v = [[] for _ in value_vars]
    out_s = [[] for _ in value_vars]
    out_lp = []
    with progress_bar(progressbar) as bar:
        task = bar.add_task("Scores", completed=0, total=n)
        for sl in chunks:
            vals = fwd(*[c[sl] for c in constrained]) if fwd is not None else [v[sl] for v in values]
            vals = [np.asarray(v, dtype=value_vars[i].dtype) for i, v in enumerate(vals)]
            m = sl.stop - sl.start
            logp, grad = score_fn(np.concatenate([v.reshape(m, -1) for v in vals], axis=1))
            out_lp.append(logp)
            for i, g in enumerate(np.split(grad, np.cumsum(sizes)[:-1], axis=1)):
                out_v[i].append(vals[i])
                out_s[i].append(g.reshape(vals[i].shape))
            bar.advance(task, m)

    def regroup(parts, var):
        return np.concatenate(parts).reshape((n_chain, n_draw) + tuple(shapes[var.name]))

    logp_compared = check_logp and _check_recorded_logp(idata, post, np.concatenate(out_lp).reshape(n_chain, n_draw),
                                                        model, bmb is not None)
    unconstrained = {v.name: regroup(out_v[i], v) for i, v in enumerate(value_vars)}
    scores = {v.name: regroup(out_s[i], v) for i, v in enumerate(value_vars)}
    bad = sum(int(np.sum(~np.isfinite(s).reshape(n_chain, n_draw, -1).all(axis=2))) for s in scores.values())
    if bad:
        warnings.warn(
            f"The scores are NaN or inf at {bad} draw(s), usually divergent transitions; "
            "pymc_cv.summary will refuse them until they are removed or the model is fixed.",
            stacklevel=2,
        )
    dims, coords = dims_and_coords(model, shapes)
    attrs = {**_score_attrs(idata, model), PAIRING: _pairing(check_logp, logp_compared, data_compared)}
    new = with_cv_groups(idata, unconstrained, scores, dims=dims, coords=coords, attrs=attrs)
    if not extend_inferencedata:
        return new
    return compat.with_groups(idata, {g: compat.group(new, g) for g in (UNCONSTRAINED, SCORE)}, inplace=True)


def untransformed_bounded(model):
    """Free variables sampled on a bounded support without the transform PyMC would give them
    (``transform=None`` / ``default_transform=None``): the density need not vanish at the boundary there,
    so Stein's identities, on which every control variate rests, need not hold."""
    from pymc.distributions.transforms import _default_transform

    return [rv.name for rv in model.free_RVs
            if model.rvs_to_transforms.get(rv) is None and _default_transform(rv.owner.op, rv) is not None]


def _score_attrs(idata, model):
    """The score group's attributes: ``score_backend`` (the model's gradient, and whose draws it was taken
    at) and the variables :func:`untransformed_bounded` names, for the error of a failed Stein check."""
    sampler = recorded_sampler(idata)
    at = f"at the draws {sampler} sampled" if sampler else "at the draws (the sampler is not recorded in the idata)"
    attrs = {"score_backend": f"pymc (the model's log density gradient, compiled by pymc-cv) {at}"}
    if untransformed_bounded(model):
        attrs["untransformed_bounded"] = ", ".join(untransformed_bounded(model))
    return attrs


def _stored_scores(idata, model):
    """The CV groups from the sampler's stored draws and gradients, split into ``model``'s value variables."""
    shapes = model.eval_rv_shapes()
    want = [lab for v in model.value_vars for lab in stored_names(v.name, shapes[v.name])]
    have = stored_labels(idata)
    if want != have:
        raise ValueError(
            f"The sampler stored the unconstrained coordinates {have[:8]}{' ...' if len(have) > 8 else ''}, but "
            f"model= has {want[:8]}{' ...' if len(want) > 8 else ''}: the draws are of another model. Pass the "
            "model that was sampled, or stored_gradients=False to evaluate this one.")
    layout = [(v.name, tuple(int(k) for k in shapes[v.name])) for v in model.value_vars]
    dims, coords = dims_and_coords(model, shapes)
    return with_stored_scores(idata, layout, dims=dims, coords=coords)


_RECORDED_LOGP = ("lp", "logp")  # PyMC's NUTS and NumPyro; nutpie


def _recorded_logp(idata, post):
    """The sampler's log density of each draw (chain, draw), aligned with ``post``, or None."""
    if "sample_stats" not in compat.group_names(idata):
        return None
    stats = compat.group(idata, "sample_stats")
    name = next((k for k in _RECORDED_LOGP if k in stats.data_vars), None)
    if name is None or not {"chain", "draw"} <= set(stats[name].dims) or stats[name].ndim != 2:
        return None
    try:
        rec = stats[name].sel(chain=post["chain"].values, draw=post["draw"].values)
    except (KeyError, IndexError, ValueError):
        return None
    return np.asarray(rec.transpose("chain", "draw").values, dtype=float)


def _pairing(check_logp, logp_compared, data_compared):
    """What showed that the draws are of the model whose scores were taken (the score group's ``PAIRING``)."""
    if logp_compared:
        return CHECKED + "the log density the sampler recorded at every draw equals the model's"
    if not check_logp:
        return SKIPPED + "check_logp=False"
    data = (f"the {data_compared} data variables the idata stores match the model's, but "
            if data_compared else "it stores no observed_data or constant_data to compare either, and ")
    return (UNCHECKED + "the idata has no per-draw log density of the sampler (pm.sample_smc and a posterior-only "
            f"idata keep none); {data}another prior or likelihood under the same variable names cannot be told "
            "from this one")


def _check_recorded_logp(idata, post, model_logp, model, from_bambi):
    """True when the sampler's recorded log density was compared (and matched); False when there is none."""
    recorded = _recorded_logp(idata, post)
    if recorded is None:
        return False
    itemsize = min(np.dtype(v.dtype).itemsize for v in model.value_vars)
    check = check_recorded_logp(model_logp, recorded, itemsize)
    # pm.sample(nuts_sampler="numpyro") records NumPyro's potential energy, -log p, as "lp"
    if check.ok or check_recorded_logp(model_logp, -recorded, itemsize).ok:
        return True
    causes = ["the posterior was changed after sampling"
              + ("" if from_bambi else " (Bambi does this to the intercept when it centres the predictors, "
                 "its default: pass the Bambi model itself, summary(idata, model=bambi_model), not "
                 "model.backend.model)"),
              "the model is another one with the same variable names (another prior or likelihood)",
              "the data were changed (pm.set_data) after sampling"]
    raise DrawsModelMismatchError(
        f"The posterior draws are not the points the sampler visited under this model: {check.evidence()}. "
        "Every control variate would be confidently wrong. Likely causes: "
        + "; ".join(f"({i}) {c}" for i, c in enumerate(causes, 1))
        + ". Pass check_logp=False (check_scores=False in summary) only if the sampler's record is known to "
        "be wrong.")


def dims_and_coords(model, shapes):
    """Dims of each value variable (those of its random variable) and the model's coords."""
    dims = {}
    for value in model.value_vars:
        rv = model.values_to_rvs[value]
        named = model.named_vars_to_dims.get(rv.name)
        if not named or any(dim is None for dim in named):
            continue
        # a transform may change the length (a simplex of K has K - 1 free coordinates): the
        # random variable's dims then do not describe the value variable, which keeps ArviZ's own
        lengths = tuple(len(model.coords[dim]) if model.coords.get(dim) is not None else None for dim in named)
        if lengths == tuple(shapes[value.name]):
            dims[value.name] = list(named)
    coords = {k: list(v) for k, v in model.coords.items() if v is not None and any(k in d for d in dims.values())}
    return dims, coords


# compiled score functions per model, compile options and shapes of the variables (compiling takes
# seconds, a minute for a model with an ODE; a model is immutable in what the gradient graph depends
# on except its shared data, which the compiled function reads at call time, and which can change the
# shapes the raveled input is cut into)
_SCORE_FNS = weakref.WeakKeyDictionary()


def _cached_score_fn(model, compile_kwargs, shapes):
    key = (repr(sorted(compile_kwargs.items())), repr(sorted((k, tuple(int(i) for i in v)) for k, v in shapes.items())))
    cache = _SCORE_FNS.setdefault(model, {})
    if key not in cache:
        cache[key] = SamplerGradient(model, compile_kwargs)
    return cache[key]
