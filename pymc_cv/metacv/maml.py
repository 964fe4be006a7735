"""MAML for neural Stein CVs (thesis Algorithms 6 and 7) as compiled PyTensor functions.

Inner loop: L gradient steps of size alpha on the support loss, from the shared initialisation,
per task; the intercept c of each task starts at its support mean (the quantity that differs most
between tasks) and is adapted with the network.  Outer loop: Adam (PyMC's implementation) on the
mean query loss over a batch of tasks, through the inner steps (second order) or with the inner
gradients held constant (first-order MAML).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..compat import compile_kwargs_for_deep_graphs
from .network import stein_term

# PyTensor and PyMC load inside the functions that use them: `import pymc_cv` stays cheap without them.

__all__ = ["Network", "InnerLoop", "build_functions"]


class Network(NamedTuple):
    """The MLP u: R^d -> R^d of the Stein term: input dimension, hidden widths, activation."""

    d: int
    hidden: tuple
    activation: str


class InnerLoop(NamedTuple):
    """The per-task adaptation: ``steps`` gradient steps of size ``alpha`` on the support loss;
    ``first_order``: the outer gradient holds the inner gradients constant."""

    alpha: float
    steps: int
    first_order: bool


def _inner(theta, support, net, inner):
    """The parameters (B, P) and intercepts (B,) adapted to each task's ``support`` (XS, SS, FS)."""
    import pytensor.tensor as pt
    from pytensor.gradient import disconnected_grad

    XS, SS, FS = support
    d, hidden, activation = net
    B = XS.shape[0]
    theta_b = pt.broadcast_to(theta, (B, theta.shape[0]))
    c_b = pt.mean(FS, axis=1)
    for _ in range(inner.steps):
        resid = FS - c_b[:, None] - stein_term(theta_b, XS, SS, d, hidden, activation)
        loss = pt.sum(pt.mean(resid**2, axis=1))  # a sum of per-task losses: per-task gradients
        g_theta, g_c = pt.grad(loss, [theta_b, c_b])
        if inner.first_order:
            g_theta, g_c = disconnected_grad(g_theta), disconnected_grad(g_c)
        theta_b = theta_b - inner.alpha * g_theta
        c_b = c_b - inner.alpha * g_c
    return theta_b, c_b


def build_functions(net, inner, learning_rate, theta0, compile_kwargs=None, training=True):
    """Compile (train_step, adapt_and_apply) around a shared parameter vector, for the
    :class:`Network` ``net`` adapted by the :class:`InnerLoop` ``inner``, meta-trained by Adam.

    train_step(XS, SS, FS, XQ, SQ, FQ) -> mean query loss, and updates the shared parameters;
    arrays (B, K, d) / (B, K).  adapt_and_apply(XS, SS, FS, XQ, SQ) -> the adapted Stein term at
    the query draws (B, K_Q) (no intercept: the estimator does not need it).  Without ``training``
    train_step is None: estimation alone needs no meta-gradient, the costliest graph to compile.
    """
    import pytensor
    import pytensor.tensor as pt
    from pymc.variational.updates import adam

    theta = pytensor.shared(np.asarray(theta0, dtype=float), name="metacv_theta")
    X3 = [pt.tensor3(n, dtype="float64") for n in ("XS", "SS", "XQ", "SQ")]
    XS, SS, XQ, SQ = X3
    FS, FQ = pt.matrix("FS", dtype="float64"), pt.matrix("FQ", dtype="float64")
    theta_b, c_b = _inner(theta, (XS, SS, FS), net, inner)
    resid_q = FQ - c_b[:, None] - stein_term(theta_b, XQ, SQ, *net)
    meta_loss = pt.mean(resid_q**2)
    kw = compile_kwargs_for_deep_graphs(compile_kwargs)
    train_step = None
    if training:
        updates = adam(meta_loss, [theta], learning_rate=learning_rate)
        train_step = pytensor.function([XS, SS, FS, XQ, SQ, FQ], meta_loss, updates=updates, **kw)
    adapted = stein_term(theta_b, XQ, SQ, *net)
    adapt_and_apply = pytensor.function([XS, SS, FS, XQ, SQ], adapted, **kw)
    return theta, train_step, adapt_and_apply
