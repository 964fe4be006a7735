"""Held-out residuals: how every method is judged on draws its fit did not see.

Independent draws are held out one at a time (leave-one-out); MCMC draws in
contiguous blocks of each chain, so that autocorrelated neighbours of a
held-out draw are held out with it.

Every fit here that is linear in the integrand (least-squares ZV-CVs, the
GLS/kriging fit of kernel CVs, the penalised inducing-point fit) has a
residual projector Q with Q y the in-sample residual (or C^-1 times it), and
the residuals of the fit refitted without block B have the closed form

    r_B = (Q_BB)^-1 (Q y)_B                    (Dubrule 1983)

with the same hyperparameters, so one factorisation gives the held-out
residuals of all blocks and all integrands; no refit.  Their covariance under
the fit's Gaussian model is proportional to (Q_BB)^-1, which standardises
them for the tail check.  Methods with no such form (lasso ZV-CVs, Meta-CVs)
refit per fold through :func:`refit_residuals`.

A fit biased by what its draws do not show (the tails an exp(x / 2) integrand lives in) is more
biased on fewer draws.  :func:`jackknife_bias` deletes parts made of folds (a quarter of the draws,
in closed form where the fit has one) with the same hyperparameters: how far that moves the
estimate measures the bias where the held-out residuals, tiny wherever the draws are, do not
(``finalize`` adds it to the se).
"""

from __future__ import annotations

import numpy as np
from scipy import linalg
from scipy.linalg import lapack

from .threads import blas_threads

__all__ = ["fold_labels", "heldout_blocks", "repeated_draws", "deletion_residuals", "projection_deletion_residuals",
           "nested_deletion_residuals", "refit_residuals", "split_parts", "quarter_order", "jackknife_bias",
           "MAX_BLOCK"]

# blocks of at most this many draws: a block costs a b x b solve, and blocks far longer than any
# autocorrelation time buy nothing
MAX_BLOCK = 250
# blocks whose Q_BB are formed before they are factorised (bounds that memory: 32 x 250^2 doubles)
_BLOCK_BATCH = 32


def fold_labels(n, chain, folds, max_block=MAX_BLOCK, first=None):
    """Fold label of each draw: ``arange(n)`` (leave-one-out) for independent draws, else
    ``folds`` contiguous blocks per chain (more when a block would exceed ``max_block`` draws;
    None for paths that refit per fold, where more folds cost more refits).

    ``first`` (n,): index of the first draw equal to each draw (``repeated_draws``); a repeated
    draw joins the fold of its first copy, or a fit would be judged on a draw it saw.
    """
    labels = _fold_labels(n, chain, folds, max_block)
    return labels if first is None else labels[first]


def repeated_draws(X):
    """(first, unique, inverse, counts) of the rows of ``X``, or None when all rows differ.

    Metropolis and slice samplers repeat draws when they reject, thinning keeps some of the
    repeats: ``first[i]`` is the first row equal to row i, ``X[unique]`` the distinct rows,
    ``inverse`` maps rows to them and ``counts`` says how often each occurs."""
    _, unique, inverse, counts = np.unique(X, axis=0, return_index=True, return_inverse=True, return_counts=True)
    if unique.size == X.shape[0]:
        return None
    inverse = inverse.ravel()
    return unique[inverse], unique, inverse, counts


def _fold_labels(n, chain, folds, max_block):
    if chain is None:
        return np.arange(n)
    labels = np.empty(n, dtype=int)
    offset = 0
    for label in np.unique(chain):
        idx = np.flatnonzero(chain == label)
        k = folds if max_block is None else max(folds, -(-idx.size // max_block))
        k = int(min(k, max(2, idx.size // 4)))
        labels[idx] = offset + np.minimum((np.arange(idx.size) * k) // idx.size, k - 1)
        offset += k
    return labels


def heldout_blocks(labels):
    """The indices of each held-out block (draws with one fold label), in label order."""
    order = np.argsort(labels, kind="stable")
    cuts = np.flatnonzero(np.diff(labels[order])) + 1
    return np.split(order, cuts)


def deletion_residuals(Qy, q_diag, q_block, labels):
    """Held-out residuals from a residual projector, without refitting.

    Parameters
    ----------
    Qy : array (n, k)
        Q y for k integrands sharing one fit.
    q_diag : callable () -> (n,)
        The diagonal of Q (the leave-one-out fast path).
    q_block : callable (idx) -> (b, b)
        The block Q[idx][:, idx].
    labels : array (n,)
        Fold labels (``fold_labels``).

    Returns
    -------
    resid, z : arrays (n, k)
        Residuals of the fit without each draw's fold, and the same divided by their
        model sd (up to the amplitude, which the tail check does not need).
    """
    n = Qy.shape[0]
    if np.unique(labels).size == n:  # leave-one-out
        dq = np.maximum(q_diag(), 1e-300)[:, None]
        return Qy / dq, Qy / np.sqrt(dq)
    resid = np.empty_like(Qy)
    z = np.empty_like(Qy)
    blocks = heldout_blocks(labels)
    for start in range(0, len(blocks), _BLOCK_BATCH):
        batch = blocks[start:start + _BLOCK_BATCH]
        # forming Q_BB can be a product over a long inner dimension (M inducing draws), which BLAS
        # threads do speed up; the b x b factorisations that follow are where threads only
        # thrash (see ``threads``)
        QBBs = [q_block(idx) for idx in batch]
        with blas_threads(1):
            for idx, QBB in zip(batch, QBBs):
                _delete_block(idx, Qy, QBB, resid, z)
    return resid, z


def _delete_block(idx, Qy, QBB, resid, z):
    """Residuals of block ``idx`` from the fit without it, written into ``resid`` and ``z``."""
    QBB = 0.5 * (QBB + QBB.T)
    try:
        c = linalg.cho_factor(QBB, lower=True, check_finite=False)
        resid[idx] = linalg.cho_solve(c, Qy[idx], check_finite=False)
        # diag((L L')^-1) = column sums of (L^-1)^2: half the work of the whole inverse (dpotri)
        Linv, info = lapack.dtrtri(c[0], lower=1)
        if info != 0:
            raise linalg.LinAlgError("dtrtri")
        var = np.einsum("ij,ij->j", np.tril(Linv), np.tril(Linv))
    except linalg.LinAlgError:  # a block the fit interpolates exactly (e.g. repeated draws)
        inv = linalg.pinvh(QBB)
        resid[idx] = inv @ Qy[idx]
        var = np.diag(inv)
    z[idx] = resid[idx] / np.sqrt(np.maximum(var, 1e-300))[:, None]


def projection_deletion_residuals(e, U, labels):
    """:func:`deletion_residuals` of a (possibly penalised) least-squares fit whose hat matrix is
    U U' (U (n, p); e (n, k) its in-sample residuals), so that Q = I - U U'.

    A block's (I - U_B U_B')^-1 is I + U_B (I - U_B' U_B)^-1 U_B' (Woodbury): a p x p factorisation
    instead of a b x b one, which is what makes held-out residuals of polynomial fits with a few
    dozen coefficients cheap on blocks of hundreds of draws.
    """
    return nested_deletion_residuals([e], U, [U.shape[1]], labels)[0]


def nested_deletion_residuals(es, U, widths, labels):
    """:func:`projection_deletion_residuals` of nested fits at once: fit i has hat matrix
    U_i U_i' with U_i the first ``widths[i]`` columns of U (increasing widths) and in-sample
    residuals ``es[i]``.  A block no longer than a fit is wide is deleted from its b x b
    I - U_B U_B', and that product is built up across the fits: each adds only its own columns'.
    Returns (resid, z) per fit."""
    n = U.shape[0]
    if np.unique(labels).size == n:
        out, leverage, done = [], np.zeros(n), 0
        for e, w in zip(es, widths):
            leverage = leverage + np.einsum("ij,ij->i", U[:, done:w], U[:, done:w])
            done = w
            dq = np.maximum(1.0 - leverage, 1e-300)[:, None]
            out.append((e / dq, e / np.sqrt(dq)))
        return out
    out = [(np.empty_like(e), np.empty_like(e)) for e in es]
    eyes = [np.eye(w) for w in widths]
    with blas_threads(1):
        for idx in heldout_blocks(labels):
            Ub = U[idx]
            H, done = None, 0
            for e, w, eye, (resid, z) in zip(es, widths, eyes, out):
                if w >= idx.size:
                    part = Ub[:, done:w]
                    H = part @ part.T if H is None else H + part @ part.T
                    done = w
                    _delete_block(idx, e, np.eye(idx.size) - H, resid, z)
                else:
                    _woodbury_block(idx, e, Ub[:, :w], eye, resid, z)
    return out


def _woodbury_block(idx, e, Ub, eye, resid, z):
    try:
        L = linalg.cholesky(eye - Ub.T @ Ub, lower=True, check_finite=False)
    except linalg.LinAlgError:  # the fit interpolates this block: no closed form in p x p
        _delete_block(idx, e, np.eye(idx.size) - Ub @ Ub.T, resid, z)
        return
    # U_B (I - U_B' U_B)^-1 U_B' = W W' with W = U_B L^-T: one triangular solve serves the
    # residuals and their variances (2 b p k + b p^2 flops instead of 2 b p k + 2 p^2 (k + b))
    W = linalg.solve_triangular(L, Ub.T, lower=True, check_finite=False).T
    resid[idx] = e[idx] + W @ (W.T @ e[idx])
    var = 1.0 + np.einsum("ij,ij->i", W, W)
    z[idx] = resid[idx] / np.sqrt(np.maximum(var, 1e-300))[:, None]


def refit_residuals(fit_predict, n, labels):
    """Held-out residuals by refitting per fold; ``fit_predict(train, test)`` returns the
    residuals (len(test), k) at the test draws and their standardised form (or None)."""
    resid = z = None
    for idx in heldout_blocks(labels):
        test = np.zeros(n, dtype=bool)
        test[idx] = True
        r, zz = fit_predict(~test, test)
        if resid is None:
            resid = np.empty((n,) + r.shape[1:])
            z = np.empty_like(resid)
        resid[idx] = r
        z[idx] = r if zz is None else zz
    return resid, z



def split_parts(labels, parts):
    """``parts`` subsamples of the draws made of alternate held-out folds (fold i goes to part
    i mod parts), as boolean masks: each spans every chain from start to end, repeated draws stay
    together because their folds do, and the quarters (parts=4) nest in the halves (parts=2)."""
    ids = np.unique(labels, return_inverse=True)[1].ravel()
    return [ids % parts == i for i in range(parts)]


def quarter_order(labels):
    """The stable permutation of the draws that makes each jackknife quarter
    (``split_parts(labels, 4)``) one contiguous run, or None when they already are."""
    part = np.unique(labels, return_inverse=True)[1].ravel() % 4
    return None if np.all(np.diff(part) >= 0) else np.argsort(part, kind="stable")


def jackknife_bias(fit_without, labels, full, parts=4):
    """Delete-a-part jackknife estimate of the bias of the estimates: (g - 1) (mean over the g
    ``parts`` of the fit without the part - ``full``), the parts made of alternate folds
    (:func:`split_parts`).  Exact for a bias proportional to 1/n; with g = 2 it is how far fits
    on half of the draws move the estimate.

    ``fit_without(mask)`` returns the estimates (shaped like ``full``) of the same method with the
    same hyperparameters fitted without the draws in ``mask``; if it raises ``ValueError`` or
    ``LinAlgError`` (too few draws for the design) the estimate is NaN.  Four parts where deleting
    one is cheap (closed forms), two where each costs a refit.
    """
    masks = split_parts(labels, parts)
    if any(m.sum() < 1 or (~m).sum() < 2 for m in masks):
        return np.full_like(full, np.nan)
    try:
        return (parts - 1) * (np.mean([fit_without(m) for m in masks], axis=0) - full)
    except (ValueError, linalg.LinAlgError):
        return np.full_like(full, np.nan)
