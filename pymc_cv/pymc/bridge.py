"""Log evidence of a PyMC model from the posterior draws the user already sampled (bridge sampling).

The draws are mapped to the model's unconstrained space once, the model's log joint density
(Jacobian and Potentials included) is compiled once for batches of draws, and
:func:`pymc_cv.evidence.posterior_draws.evidence_from_draws` does the rest on arrays.
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np

from .. import compat
from ..evidence.posterior_draws import evidence_from_draws
from .scores import (
    _check_draws_match,
    _check_recorded_logp,
    _check_same_data,
    _flat,
    _in_model_order,
    batch_input,
    batched,
    check_model,
    forward_transform_fn,
)

__all__ = ["bridge_sampling"]


def bridge_sampling(idata, model=None, *, random_seed=None, proposal_draws=None, compile_kwargs=None,
                    check_logp=True, control_variates=False):
    """Log evidence log p(y) of a PyMC model from its posterior draws, by bridge sampling.

    No new sampling: a normal proposal is fitted to the first half of each chain, and a few thousand
    evaluations of the log joint density at its draws and at the second halves give log p(y)
    (Meng & Wong 1996; Gronau et al. 2017).  Two more estimates check it (the halves swapped, and
    importance sampling from a Student-t fitted to the draws, diagnosed by PSIS's k-hat), and the
    chains' R-hat; see :mod:`pymc_cv.evidence.posterior_draws`.

    Parameters
    ----------
    idata : InferenceData (DataTree on ArviZ 1)
        From ``pm.sample`` (any NUTS sampler) of ``model``, with a ``posterior`` group.
    model : pymc.Model, optional
        Taken from the context when not given.  Every free variable needs a proper prior: p(y) is not
        defined otherwise.
    random_seed : int, optional
        For the proposals' draws.
    proposal_draws : int, optional
        Draws of each bridge proposal (default: as many as the draws in the estimator, at least 4,000).
    compile_kwargs : dict, optional
        For the batched log density, e.g. ``{"mode": "NUMBA"}``.
    check_logp : bool
        Compare the model's log density at the draws with the one the sampler recorded (and the
        stored data with the model's), as :func:`pymc_cv.compute_scores` does: draws of another model
        raise :class:`~pymc_cv.core.density_check.DrawsModelMismatchError`.
    control_variates : bool
        Sharpen the bridge's two means with zero-variance control variates (the model's gradient at the
        posterior draws, the normal proposal's at its own), reported where the fits are reliable and agree
        with the plain estimate (``res.cv_bridge``, and a note).  Off by default: on the ten models of
        ``bench/evidence_from_draws.py`` they cut the median error 1.5-4.5x on six and not on the other
        three that bridge sampling gets right, at 2-4x its seconds, where it is already within 0.01 nats.

    Returns
    -------
    PosteriorEvidence
        ``.log_evidence``, ``.se``, ``.reliable`` and ``.notes``.

    Examples
    --------
    >>> import numpy as np, pymc as pm, pymc_cv
    >>> from scipy import stats
    >>> y = np.array([0.3, -0.5, 1.2])
    >>> with pm.Model() as model:
    ...     mu = pm.Normal("mu", 0, 2)
    ...     obs = pm.Normal("y", mu, 1, observed=y)
    ...     idata = pm.sample(1000, tune=500, chains=2, progressbar=False, random_seed=0,
    ...                       compute_convergence_checks=False)
    >>> res = pymc_cv.bridge_sampling(idata, model, random_seed=1)
    >>> exact = stats.multivariate_normal(np.zeros(3), np.eye(3) + 4.0).logpdf(y)
    >>> bool(abs(res.log_evidence - exact) < 3 * res.se < 0.02), res.reliable
    (True, True)
    """
    import pymc as pm  # PyMC loads on first use: it takes seconds

    model = pm.modelcontext(model)
    _check_evidence_defined(model)
    if not compat.is_inference_data(idata) or "posterior" not in compat.group_names(idata):
        raise ValueError("idata has no 'posterior' group; pass the InferenceData (DataTree on ArviZ 1) returned "
                         "by pm.sample().")
    start = time.perf_counter()
    if check_logp:
        _check_same_data(idata, model)
    post = _in_model_order(compat.group(idata, "posterior"), model)
    X, chain, shape = _unconstrained(post, model, dict(compile_kwargs or {}))
    log_joint = LogJoint(model, compile_kwargs)
    lj, scores = log_joint.with_gradient(X)
    if check_logp:
        _check_recorded_logp(idata, post, lj.reshape(shape), model, False)
    prepared = time.perf_counter() - start
    res = evidence_from_draws(log_joint, X, chain, rng=random_seed, draws_log_joint=lj,
                              scores=scores if control_variates else None, divergences=_divergences(idata),
                              proposal_draws=proposal_draws)
    return dataclasses.replace(res, seconds={"prepare": prepared, **res.seconds})


class LogJoint:
    """log p(y|x) + log p(x) (Jacobian and Potentials included) of ``model`` at batches of unconstrained
    draws (n, d), the value variables raveled and concatenated in the model's order, and its gradient
    (:meth:`with_gradient`); each compiled at its first call."""

    def __init__(self, model, compile_kwargs=None):
        self.model, self.compile_kwargs = model, dict(compile_kwargs or {})
        point = model.initial_point()
        self.shapes = [tuple(point[v.name].shape) for v in model.value_vars]
        self.bounds = np.cumsum([0] + [int(np.prod(s, dtype=int)) for s in self.shapes])
        self._fns = {}

    def _compiled(self, gradient):
        if gradient not in self._fns:
            import pytensor.tensor as pt

            values = self.model.value_vars
            inputs = {v: batch_input(v) for v in values}
            logp = self.model.logp(jacobian=True, sum=True)
            # a variable that enters no term (none in a proper model) has a zero gradient, not an error
            outputs = [logp, *pt.grad(logp, values, disconnected_inputs="ignore")] if gradient else [logp]
            fn = batched([inputs[v] for v in values], outputs, inputs, _numpy_mode(self.compile_kwargs))
            if _elementwise_in_python(fn):
                fn = batched([inputs[v] for v in values], outputs, inputs, self.compile_kwargs)
            self._fns[gradient] = fn
        return self._fns[gradient]

    def _parts(self, X):
        X = np.asarray(X, dtype=float)
        n = X.shape[0]
        return n, [np.asarray(X[:, a:b].reshape((n,) + s), dtype=v.dtype)
                   for a, b, s, v in zip(self.bounds, self.bounds[1:], self.shapes, self.model.value_vars)]

    def __call__(self, X):
        _, parts = self._parts(X)
        out = np.asarray(self._compiled(False)(*parts)[0], dtype=float).reshape(-1)
        return np.where(np.isnan(out), -np.inf, out)

    def with_gradient(self, X):
        """(log density (n,), gradient (n, d)) at the draws ``X`` (n, d)."""
        n, parts = self._parts(X)
        out = self._compiled(True)(*parts)
        logp = np.asarray(out[0], dtype=float).reshape(-1)
        grad = np.concatenate([np.asarray(g, dtype=float).reshape(n, -1) for g in out[1:]], axis=1)
        return np.where(np.isnan(logp), -np.inf, logp), grad


def _numpy_mode(compile_kwargs):
    """Without a ``mode`` in ``compile_kwargs``, PyTensor's Python linker: the batched graph is a few dozen
    array operations over all draws at once, which numpy runs as fast as compiled C, and compiling them to
    C took seconds, longer than the whole estimate.  Softplus (which PyTensor's rewrites make of a
    logistic likelihood) has no numpy ufunc and is rewritten into ops that have one."""
    if "mode" in compile_kwargs:
        return compile_kwargs
    from pytensor.compile.mode import Mode, get_mode
    from pytensor.graph.rewriting.basic import in2out

    optimizer = get_mode("FAST_RUN").provided_optimizer.excluding("fusion")
    # after the stabilising rewrites, which would turn the expression back into a softplus
    mode = Mode(linker="py", optimizer=optimizer).register((in2out(_softplus_by_ufuncs()), 48.5))
    return {**compile_kwargs, "mode": mode}


def _softplus_by_ufuncs():
    import pytensor.tensor as pt
    from pytensor.graph.rewriting.basic import node_rewriter
    from pytensor.scalar.math import Softplus
    from pytensor.tensor.elemwise import Elemwise

    @node_rewriter([Elemwise])
    def softplus_by_ufuncs(fgraph, node):
        if isinstance(node.op.scalar_op, Softplus):
            x = node.inputs[0]
            return [pt.maximum(x, 0) + pt.log1p(pt.exp(-pt.abs(x)))]
        return None

    return softplus_by_ufuncs


def _elementwise_in_python(fn):
    """Whether the Python linker runs an elementwise op of ``fn`` one element at a time (a scalar op with no
    numpy ufunc: 2 s for 10,000 draws of 100 observations), where compiled C is worth its compilation."""
    from pytensor.tensor.elemwise import Elemwise

    return any(isinstance(node.op, Elemwise) and node.op.nfunc_spec is None
               for node in fn.maker.fgraph.apply_nodes)


def _divergences(idata):
    if "sample_stats" not in compat.group_names(idata) or "diverging" not in compat.group(idata, "sample_stats"):
        return 0
    return int(np.sum(np.asarray(compat.group(idata, "sample_stats")["diverging"].values)))


def _check_evidence_defined(model):
    from pymc.distributions.continuous import FlatRV, HalfFlatRV

    check_model(model)
    improper = [rv.name for rv in model.free_RVs if isinstance(rv.owner.op, (FlatRV, HalfFlatRV))]
    if improper:
        raise ValueError(
            f"{improper} have improper priors (pm.Flat / pm.HalfFlat): the evidence p(y) = int p(y|x) p(x) dx is "
            "not defined for them. Give each a proper prior on the scale you believe (e.g. pm.Normal(name, 0, 10)).")


def _unconstrained(post, model, compile_kwargs):
    """The posterior's draws on the model's unconstrained space (n, d), their chain index, and (chain, draw)."""
    n_chain, n_draw = post.sizes["chain"], post.sizes["draw"]
    n = n_chain * n_draw

    if _check_draws_match(post, model, model.eval_rv_shapes()):
        values = [_flat(post, v.name, n) for v in model.value_vars]
    else:
        fwd = forward_transform_fn(model, compile_kwargs)
        values = fwd(*[_flat(post, rv.name, n).astype(rv.dtype) for rv in model.free_RVs])
    X = np.concatenate([np.asarray(v, dtype=float).reshape(n, -1) for v in values], axis=1)
    return X, np.repeat(np.arange(n_chain), n_draw), (n_chain, n_draw)
