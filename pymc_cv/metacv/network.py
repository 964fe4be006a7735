"""The neural Stein control variate g(x) = c + div u(x) + u(x) . score(x), u: R^d -> R^d an MLP,
as one PyTensor graph batched over tasks.

Each task of a batch carries its own copy of the flat parameter vector (shape (B, p)), so one
gradient of the summed task losses gives every task's own gradient: that is what the inner
(adaptation) step of MAML needs, and the outer (meta) gradient then flows through it.

u is a full vector field with d outputs.  The thesis's broadcast form (one output copied to all d
coordinates) can only remove variance along the direction (1, ..., 1) (notes-metacv 3.2), so it is
not offered.  The divergence is exact: the Jacobian of u is propagated layer by layer with the
activations, (B, K, width, d) per layer, cheap for the small d and widths used here.
"""

from __future__ import annotations

import numpy as np

# PyTensor loads inside the functions that use it: `import pymc_cv` stays cheap without it.

__all__ = ["layer_shapes", "n_params", "init_params", "stein_term"]


def layer_shapes(d, hidden):
    sizes = [d, *hidden, d]
    return [(sizes[i + 1], sizes[i]) for i in range(len(sizes) - 1)]


def n_params(d, hidden):
    return sum(o * i + o for o, i in layer_shapes(d, hidden))


def init_params(d, hidden, rng, last_scale=0.0):
    """Glorot-uniform weights, zero biases; the last layer scaled by ``last_scale`` so the initial
    CV is the constant (the network starts as 'no control variate')."""
    parts = []
    shapes = layer_shapes(d, hidden)
    for k, (o, i) in enumerate(shapes):
        lim = np.sqrt(6.0 / (o + i))
        W = rng.uniform(-lim, lim, size=(o, i))
        if k == len(shapes) - 1:
            W *= last_scale
        parts += [W.ravel(), np.zeros(o)]
    return np.concatenate(parts)


def _unpack(theta_b, d, hidden):
    """Per-task weights (B, out, in) and biases (B, out) from (B, p)."""
    import pytensor.tensor as pt

    out, off = [], 0
    for o, i in layer_shapes(d, hidden):
        W = theta_b[:, off : off + o * i].reshape((theta_b.shape[0], o, i))
        off += o * i
        b = theta_b[:, off : off + o]
        off += o
        out.append((W, b))
    assert off == n_params(d, hidden)
    _ = pt  # keep the import local to graph building
    return out


def stein_term(theta_b, X, S, d, hidden, activation="tanh"):
    """div u(x) + u(x) . score(x) for every task b and draw k: (B, K).

    theta_b : (B, p) symbolic; X, S : (B, K, d) symbolic draws and scores.
    """
    import pytensor.tensor as pt

    act = {"tanh": (pt.tanh, lambda h: 1.0 - h**2),
           "sigmoid": (pt.sigmoid, lambda h: h * (1.0 - h))}[activation]
    layers = _unpack(theta_b, d, hidden)
    h = X
    J = None  # Jacobian dh/dx, (B, K, width, d)
    for W, b in layers[:-1]:
        pre = pt.matmul(h, W.transpose(0, 2, 1)) + b[:, None, :]
        h = act[0](pre)
        dh = act[1](h)
        WJ = W[:, None, :, :] if J is None else pt.matmul(W[:, None, :, :], J)
        J = dh[..., None] * WJ
    W, b = layers[-1]
    u = pt.matmul(h, W.transpose(0, 2, 1)) + b[:, None, :]
    Ju = W[:, None, :, :] if J is None else pt.matmul(W[:, None, :, :], J)
    div = pt.sum(Ju * pt.eye(d)[None, None, :, :], axis=(-1, -2))
    return div + pt.sum(u * S, axis=-1)
