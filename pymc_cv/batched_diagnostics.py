"""ArviZ's convergence diagnostics and MCSEs of many rows at once.

ArviZ (0.x and arviz-stats alike) computes them one (chain, draw) array at a time, in Python: a table of
a hierarchical model with J = 10,000 groups spent about 100 s of its 170 s there, four times
``pm.sample``'s own time.  These are the same algorithms (split chains, rank normalisation with Blom's
offset, FFT autocovariances, Geyer's initial positive and monotone sequences, the floor 1 / log10(n) on
tau; the MCSE of the sd from the ESS of the centred squares; the quantile's from the ESS of its
indicator and the beta quantiles of the sorted draws), each step taken for all rows together.  They
agree with ArviZ 0.23's and arviz-stats 1.3's to rounding (``tests/test_batched_diagnostics.py``);
:func:`pymc_cv.compat.batched_agreeing` checks each against the installed ArviZ once and leaves to ArviZ
any that differs (ArviZ 0.20's MCSE of the sd is another formula).

Every function takes ``ary`` (rows, chain, draw), finite, with at least 4 draws per chain; the caller
(:mod:`pymc_cv.compat`) sends ArviZ any row outside that.
"""

from __future__ import annotations

import functools

import numpy as np
from scipy import special, stats
from scipy.fftpack import next_fast_len

__all__ = ["ess_mean", "ess_bulk", "rhat_rank", "mcse_mean", "mcse_sd", "mcse_quantile", "handles"]

# rows per block: bounds the FFT's working memory (rows x chains x 2 draws complex values), in rows and
# in bytes (4 x 100,000 draws: 22 rows at once took 0.5 GB)
_BLOCK_ROWS = 256
_BLOCK_BYTES = 32e6


def handles(ary):
    """Whether ``ary`` (rows, chain, draw) is one these functions take (else ArviZ's own per row)."""
    return ary.ndim == 3 and ary.shape[0] > 0 and ary.shape[2] >= 4 and bool(np.all(np.isfinite(ary)))


def _by_blocks(fn):
    """``fn`` applied to blocks of at most ``_BLOCK_ROWS`` rows and about ``_BLOCK_BYTES`` of spectrum: the
    working arrays (ranks, FFTs, sorts) stay the size of a block, not of the table (J = 10,000: 20,000 rows
    of 4,000 values)."""
    @functools.wraps(fn)
    def blocked(ary, *args):
        per_row = 16 * 2 * ary.shape[1] * ary.shape[2]  # the spectrum of a row's split chains, padded
        rows = int(max(1, min(_BLOCK_ROWS, _BLOCK_BYTES // max(per_row, 1))))
        if ary.shape[0] <= rows:
            return fn(ary, *args)
        return np.concatenate([fn(ary[a:a + rows], *args) for a in range(0, ary.shape[0], rows)])

    return blocked


def _split(ary):
    half = ary.shape[-1] // 2
    return np.concatenate([ary[:, :, :half], ary[:, :, -half:]], axis=1)


def _z_scale(ary):
    """Rank-normalised values of each row (ranks over all its chains and draws, Blom's offset 3/8).

    Average ranks for ties, as ArviZ's ``rankdata``: a run of equal values in sort order takes the
    mean of its first and last positions.  The sort and the normal quantile function called directly
    are 4-6x faster than SciPy's ``rankdata`` and ``norm.ppf``, with the same numbers."""
    rows = ary.shape[0]
    flat = ary.reshape(rows, -1)
    size = flat.shape[1]
    order = np.argsort(flat, axis=1)
    ordered = np.take_along_axis(flat, order, axis=1)
    new_run = np.ones(flat.shape, dtype=bool)
    new_run[:, 1:] = ordered[:, 1:] != ordered[:, :-1]
    pos = np.arange(size)
    scale = size - 2 * 3 / 8 + 1
    scores = np.empty(flat.shape)
    scores[:] = special.ndtri((pos + 1.0 - 3 / 8) / scale)
    tied = np.flatnonzero(~new_run.all(axis=1))
    if tied.size:
        starts = new_run[tied]
        ends = np.ones(starts.shape, dtype=bool)
        ends[:, :-1] = starts[:, 1:]
        first = np.maximum.accumulate(np.where(starts, pos, 0), axis=1)
        last = np.minimum.accumulate(np.where(ends, pos, size)[:, ::-1], axis=1)[:, ::-1]
        scores[tied] = special.ndtri(((first + last) / 2 + 1.0 - 3 / 8) / scale)
    out = np.empty(flat.shape)
    np.put_along_axis(out, order, scores, axis=1)
    return out.reshape(ary.shape)


@_by_blocks
def ess_mean(ary):
    """ESS of the mean of each row (ArviZ's ``ess(method="mean")``)."""
    return _ess(_split(ary))


@_by_blocks
def ess_bulk(ary):
    """Bulk ESS of each row (ArviZ's ``ess(method="bulk")``)."""
    return _ess(_z_scale(_split(ary)))


@_by_blocks
def rhat_rank(ary):
    """Rank-normalised split R-hat of each row (ArviZ's ``rhat(method="rank")``): NaN with one chain."""
    if ary.shape[1] < 2:
        return np.full(ary.shape[0], np.nan)
    split = _split(ary)
    bulk = _rhat(_z_scale(split))
    median = np.median(split.reshape(split.shape[0], -1), axis=1)
    tail = _rhat(_z_scale(np.abs(split - median[:, None, None])))
    return np.maximum(bulk, tail)


@_by_blocks
def mcse_mean(ary):
    """MCSE of the mean of each row: sd / sqrt(ESS of the mean)."""
    sd = np.std(ary.reshape(ary.shape[0], -1), axis=1, ddof=1)
    return sd / np.sqrt(ess_mean(ary))


@_by_blocks
def mcse_sd(ary):
    """MCSE of the sd of each row, from the ESS of its centred squares."""
    flat = ary.reshape(ary.shape[0], -1)
    centred = ary - flat.mean(axis=1)[:, None, None]
    squares = centred**2
    ess = ess_mean(squares)
    sq = squares.reshape(ary.shape[0], -1)
    evar = sq.mean(axis=1)
    varvar = ((centred.reshape(ary.shape[0], -1) ** 4).mean(axis=1) - evar**2) / ess
    return np.sqrt(varvar / evar / 4)


@_by_blocks
def mcse_quantile(ary, prob):
    """MCSE of the ``prob`` quantile of each row, from the ESS of its indicator."""
    rows = ary.shape[0]
    flat = ary.reshape(rows, -1)
    quantile = np.quantile(flat, prob, axis=1)
    ess = _ess(_split((ary <= quantile[:, None, None]).astype(float)))
    with np.errstate(invalid="ignore"):
        ppf = stats.beta.ppf(np.array([0.1586553, 0.8413447])[None, :], ess[:, None] * prob + 1,
                             ess[:, None] * (1 - prob) + 1)
    ordered = np.sort(flat, axis=1)
    size = flat.shape[1]
    ppf_size = ppf * size - 1
    lo = np.floor(np.fmax(ppf_size[:, 0], 0)).astype(int)
    hi = np.ceil(np.fmin(ppf_size[:, 1], size - 1)).astype(int)
    at = np.arange(rows)
    return (ordered[at, hi] - ordered[at, lo]) / 2


def _rhat(ary):
    n = ary.shape[2]
    chain_mean = ary.mean(axis=2)
    between = n * np.var(chain_mean, axis=1, ddof=1)
    within = np.mean(np.var(ary, axis=2, ddof=1), axis=1)
    return np.sqrt((between / within + n - 1) / n)


def _ess(ary):
    """ESS of each (chain, draw) array of ``ary`` (rows, chain, draw): n for a constant row."""
    rows, n_chain, n_draw = ary.shape
    out = np.empty(rows)
    spread = np.max(ary, axis=(1, 2)) - np.min(ary, axis=(1, 2))
    constant = spread < np.finfo(float).resolution
    out[constant] = n_chain * n_draw
    todo = np.flatnonzero(~constant)
    if todo.size:
        out[todo] = _ess_varying(ary[todo])
    return out


def _autocov(ary):
    """Autocovariances at every lag along the last axis, by FFT (as ArviZ's ``autocov``)."""
    n = ary.shape[-1]
    m = next_fast_len(2 * n)
    centred = ary - ary.mean(axis=-1, keepdims=True)
    spectrum = np.fft.rfft(centred, n=m, axis=-1)
    spectrum *= np.conjugate(spectrum)
    return np.fft.irfft(spectrum, n=m, axis=-1)[..., :n] / n


def _ess_varying(ary):
    rows, n_chain, n_draw = ary.shape
    acov = _autocov(ary)
    chain_mean = ary.mean(axis=2)
    mean_var = np.mean(acov[:, :, 0], axis=1) * n_draw / (n_draw - 1.0)
    var_plus = mean_var * (n_draw - 1.0) / n_draw
    if n_chain > 1:
        var_plus = var_plus + np.var(chain_mean, axis=1, ddof=1)
    mean_acov = np.mean(acov, axis=1)  # (rows, n_draw): the chains' mean autocovariance at each lag

    rho = np.zeros((rows, n_draw))
    rho[:, 0] = 1.0
    even = np.ones(rows)
    odd = 1.0 - (mean_var - mean_acov[:, 1]) / var_plus
    rho[:, 1] = odd
    # Geyer's initial positive sequence: each row stops at its own lag
    t_end = np.ones(rows, dtype=int)
    active = (even + odd) > 0.0
    t = 1
    while t < n_draw - 3 and active.any():
        idx = np.flatnonzero(active)
        ev = 1.0 - (mean_var[idx] - mean_acov[idx, t + 1]) / var_plus[idx]
        od = 1.0 - (mean_var[idx] - mean_acov[idx, t + 2]) / var_plus[idx]
        even[idx], odd[idx] = ev, od
        kept = idx[(ev + od) >= 0]
        rho[kept, t + 1] = even[kept]
        rho[kept, t + 2] = odd[kept]
        t += 2
        t_end[idx] = t
        active[idx] = (ev + od) > 0.0
    max_t = t_end - 2
    improve = np.flatnonzero(even > 0)
    rho[improve, max_t[improve] + 1] = even[improve]
    # Geyer's initial monotone sequence, lag by lag, for the rows that reach each lag
    for t in range(1, int(max_t.max(initial=0)) - 1, 2):
        rows_t = np.flatnonzero(t <= max_t - 2)
        up = rows_t[(rho[rows_t, t + 1] + rho[rows_t, t + 2]) > (rho[rows_t, t - 1] + rho[rows_t, t])]
        rho[up, t + 1] = (rho[up, t - 1] + rho[up, t]) / 2.0
        rho[up, t + 2] = rho[up, t + 1]

    n = n_chain * n_draw
    lags = np.arange(n_draw)
    head = np.sum(np.where(lags[None, :] <= max_t[:, None], rho, 0.0), axis=1)
    tail = np.where(max_t + 1 < n_draw, rho[np.arange(rows), np.minimum(max_t + 1, n_draw - 1)], 0.0)
    tau = np.maximum(-1.0 + 2.0 * head + tail, 1 / np.log10(n))
    ess = n / tau
    ess[np.any(np.isnan(rho), axis=1)] = np.nan
    return ess
