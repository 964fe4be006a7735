"""MAML for neural Stein CVs (thesis Algorithms 6 and 7) as compiled PyTensor functions.

Inner loop: L gradient steps of size alpha on the support loss, from the shared initialisation,
per task; the intercept c of each task starts at its support mean (the quantity that differs most
between tasks) and is adapted with the network.  Outer loop: Adam (PyMC's implementation) on the
mean query loss over a batch of tasks, through the inner steps (second order) or with the inner
gradients held constant (first-order MAML).
"""

from __future__ import annotations

import numpy as np

from .network import stein_term

# PyTensor and PyMC load inside the functions that use them: `import pymc_cv` stays cheap without them.

__all__ = ["build_functions"]


def _inner(theta, XS, SS, FS, d, hidden, activation, alpha, steps, first_order):
    import pytensor.tensor as pt
    from pytensor.gradient import disconnected_grad

    B = XS.shape[0]
    theta_b = pt.broadcast_to(theta, (B, theta.shape[0]))
    c_b = pt.mean(FS, axis=1)
    for _ in range(steps):
        resid = FS - c_b[:, None] - stein_term(theta_b, XS, SS, d, hidden, activation)
        loss = pt.sum(pt.mean(resid**2, axis=1))  # a sum of per-task losses: per-task gradients
        g_theta, g_c = pt.grad(loss, [theta_b, c_b])
        if first_order:
            g_theta, g_c = disconnected_grad(g_theta), disconnected_grad(g_c)
        theta_b = theta_b - alpha * g_theta
        c_b = c_b - alpha * g_c
    return theta_b, c_b


def build_functions(d, hidden, activation, alpha, steps, first_order, learning_rate, theta0, compile_kwargs=None):
    """Compile (train_step, adapt_and_apply) around a shared parameter vector.

    train_step(XS, SS, FS, XQ, SQ, FQ) -> mean query loss, and updates the shared parameters;
    arrays (B, K, d) / (B, K).  adapt_and_apply(XS, SS, FS, XQ, SQ) -> the adapted Stein term at
    the query draws (B, K_Q) (no intercept: the estimator does not need it).
    """
    import pytensor
    import pytensor.tensor as pt
    from pymc.variational.updates import adam

    theta = pytensor.shared(np.asarray(theta0, dtype=float), name="metacv_theta")
    X3 = [pt.tensor3(n, dtype="float64") for n in ("XS", "SS", "XQ", "SQ")]
    XS, SS, XQ, SQ = X3
    FS, FQ = pt.matrix("FS", dtype="float64"), pt.matrix("FQ", dtype="float64")
    theta_b, c_b = _inner(theta, XS, SS, FS, d, hidden, activation, alpha, steps, first_order)
    resid_q = FQ - c_b[:, None] - stein_term(theta_b, XQ, SQ, d, hidden, activation)
    meta_loss = pt.mean(resid_q**2)
    updates = adam(meta_loss, [theta], learning_rate=learning_rate)
    kw = dict(compile_kwargs or {})
    train_step = pytensor.function([XS, SS, FS, XQ, SQ, FQ], meta_loss, updates=updates, **kw)
    adapted = stein_term(theta_b, XQ, SQ, d, hidden, activation)
    adapt_and_apply = pytensor.function([XS, SS, FS, XQ, SQ], adapted, **kw)
    return theta, train_step, adapt_and_apply
