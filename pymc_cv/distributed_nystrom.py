"""The inducing-point kernel CV with its features as a dask array chunked over draws.

The same fit as :func:`nystrom.fit_nystrom_heldout`, for draws too many for one machine's memory:
the N x (p + r) features F of the nested designs (``nystrom.NestedLayout``: the polynomial columns and the
basis Phi, computed once for the CF and the SECF) live on a dask.distributed cluster's workers, in chunks of
whole held-out blocks.  Only small things come back: F'F and F'Y (sums over chunks) to solve the
(p + r) system here, then per chunk the held-out residuals, which the closed form of ``heldout``
gives from the chunk's own rows of F (a held-out block never spans two chunks).  dask is imported
only here.
"""

from __future__ import annotations

import numpy as np

from .core.heldout import heldout_blocks, split_parts
from .core.kernel_cv import ExactHeldout, kernel_predictor, stein_gram
from .core.linalg import lower_solve
from .core.nystrom import (
    NestedLayout,
    NestedSystem,
    coefficient_se,
    design_for,
    designs_heldout,
    inducing_basis,
    isolated_by_mass,
)

# dask.array loads inside the functions that use it: `import pymc_cv` stays cheap without it.

__all__ = ["fit_nystrom_heldout_dask"]

_ROWS = 20_000  # draws per chunk (whole held-out blocks), as the serial path's K_NM chunks


def _chunks(labels, rows):
    """A permutation of the draws putting every held-out block in one piece, and chunk sizes of
    about ``rows`` draws made of whole blocks."""
    blocks = heldout_blocks(labels)
    perm = np.concatenate(blocks)
    sizes, current = [], 0
    for b in blocks:
        if current and current + b.size > rows:
            sizes.append(current)
            current = 0
        current += b.size
    sizes.append(current)
    return perm, tuple(sizes)


def _features(Xc, Sc, tc, Pc, kernel, B, Z, SZ, tz, L, layout):
    """The chunk's rows of F in ``layout`` (``nystrom.NestedLayout``) from its rows ``Pc`` of P[:, layout.seq]
    and Phi = K_NS L^-T, Z the inducing draws the basis kept."""
    K = stein_gram(kernel, B, Xc, Sc, tc[:, 0], Z, SZ, tz)
    return layout.features(Pc, lower_solve(L, K.T).T)


def _masses(Xc, Sc, tc, labc, kernel, B, Z, SZ, tz, zlab):
    """Each inducing kernel function's squared mass on the chunk's draws, and on those of its own
    held-out block there (1, 2 M): ``nystrom.isolated_by_mass`` adds them up over chunks."""
    K2 = stein_gram(kernel, B, Xc, Sc, tc[:, 0], Z, SZ, tz) ** 2
    own = np.einsum("nm,nm->m", K2, labc[:, :1] == zlab[None, :])
    return np.concatenate([K2.sum(axis=0), own])[None, :]


def _chunk_heldout(Fc, Yc, labc, system, thetas, a0s, sizes):
    """Per draw of the chunk and per design in turn: held-out residuals (k), standardised (k),
    influence (1), residual (k)."""
    es = [Yc - Fc[:, :size] @ theta for theta, size in zip(thetas, sizes)]
    done = designs_heldout(system, Fc, es, sizes, labc[:, 0])
    return np.concatenate([np.concatenate([resid, z, (Fc[:, :size] @ a0)[:, None], e], axis=1)
                           for (resid, z), e, a0, size in zip(done, es, a0s, sizes)], axis=1)


def fit_nystrom_heldout_dask(problem, spec, inducing, client, rows=_ROWS, keep_fit=False):
    """:func:`nystrom.fit_nystrom_heldout` with F on the workers of ``client``.

    The same fit; only the order of the sums in F'F differs, which the conditioning of the
    (p + r) system (a small nugget) can amplify to about 1e-6 relative in the coefficients: far
    below their standard errors.

    Examples
    --------
    >>> import numpy as np
    >>> from distributed import Client, LocalCluster
    >>> from pymc_cv.core.kernels import make_kernel
    >>> from pymc_cv.core.nystrom import fit_nystrom_heldout
    >>> from pymc_cv.core.problem import HeldoutProblem, KernelSpec
    >>> from pymc_cv.distributed_nystrom import fit_nystrom_heldout_dask
    >>> x = np.random.default_rng(0).normal(size=(3000, 2))
    >>> y = (np.sin(x[:, :1]) + x[:, :1] ** 2)
    >>> args = (HeldoutProblem(x, -x, y, np.zeros(3000, dtype=int), 1, np.arange(3000)),
    ...         KernelSpec(make_kernel("se", 2, x), np.ones((1, 1)), 1e-4, [0, 1]), np.arange(0, 3000, 15))
    >>> with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as cluster, \\
    ...         Client(cluster) as client:
    ...     far = fit_nystrom_heldout_dask(*args, client, rows=700)
    >>> near = fit_nystrom_heldout(*args)
    >>> [bool(np.all(np.abs(a.beta - b.beta) < 1e-3 * b.beta_se)) for a, b in zip(far, near)]
    [True, True]
    >>> [bool(np.allclose(a.resid, b.resid, rtol=0, atol=1e-4)) for a, b in zip(far, near)]
    [True, True]
    """
    import dask.array as da

    X, S, Y, tau, T, labels = problem
    kernel, B, nugget, orders = spec
    Z, SZ, tz = X[inducing], S[inducing], tau[inducing]
    Kmm = stein_gram(kernel, B, Z, SZ, tz, Z, SZ, tz)
    Kmm = 0.5 * (Kmm + Kmm.T)
    nug = nugget * float(np.mean(np.diag(Kmm) / np.diag(B)[tz]))
    N, k = Y.shape
    perm, sizes = _chunks(labels, rows)
    inverse = np.empty_like(perm)
    inverse[perm] = np.arange(N)

    def chunked(a):
        a = np.asarray(a)[perm]
        a = a[:, None] if a.ndim == 1 else a
        return da.from_array(a, chunks=(sizes, a.shape[1]))

    dX, dS, dtau, dY, dlab = (chunked(a) for a in (X, S, tau, Y, labels))
    M = len(inducing)
    masses = da.map_blocks(_masses, dX, dS, dtau, dlab, kernel=kernel, B=B, Z=Z, SZ=SZ, tz=tz, zlab=labels[inducing],
                           dtype=float, chunks=((1,) * len(sizes), (2 * M,)))
    masses = client.compute(masses.sum(axis=0), sync=True)
    basis = inducing_basis(Kmm, ~isolated_by_mass(masses[M:], masses[:M], nug * np.diag(Kmm)))
    kept = basis.kept
    r = kept.size
    quarters = split_parts(labels, 4)
    dquarters = [chunked(q.astype(float)) for q in quarters]
    P_all, p_all = design_for(X, S, tau, T, max(orders))
    layout = NestedLayout.of(X.shape[1], T, list(orders), p_all // T - 1, r)
    F = da.map_blocks(_features, dX, dS, dtau, chunked(P_all[:, layout.seq]), kernel=kernel, B=B, Z=Z[kept],
                      SZ=SZ[kept], tz=tz[kept], L=basis.L, layout=layout, dtype=float, chunks=(sizes, p_all + r))
    F = client.persist(F)  # the features stay on the workers for both passes
    # F'F and F'Y per quarter of the draws (their sums are the full ones), for the fits without
    # one of them (``heldout.jackknife_bias``)
    sums = client.compute([x for dq in dquarters for x in ((F * dq).T @ F, (F * dq).T @ dY)], sync=True)
    system = NestedSystem.of(quarters, list(zip(sums[::2], sums[1::2])), layout, nug, T)
    solved = [system.solve(i, labels, T) for i in range(len(orders))]
    width = 3 * k + 1
    packed = da.map_blocks(_chunk_heldout, F, dY, dlab, system=system._replace(fit_on=None),
                           thetas=[theta for theta, _, _ in solved], a0s=[a0 for _, _, a0 in solved],
                           sizes=layout.sizes, dtype=float, chunks=(sizes, width * len(orders)))
    packed = client.compute(packed, sync=True)[inverse]
    client.cancel(F)
    out = []
    for i, (order, (theta, bias, a0), at) in enumerate(zip(orders, solved, layout.at)):
        mine = packed[:, i * width:(i + 1) * width]
        resid, z, influence, e = mine[:, :k], mine[:, k:2 * k], mine[:, 2 * k], mine[:, 2 * k + 1:]
        beta, w = theta[at], theta[layout.nb:layout.nb + r]
        out.append(ExactHeldout(order, beta, coefficient_se(system.factors[i], at, e, w, nug), resid, z, influence,
                                bias, kernel_predictor(kernel, B, Z, SZ, tz, T, order, basis.coefficients(w, len(Z)),
                                                       beta) if keep_fit else None))
    return out
