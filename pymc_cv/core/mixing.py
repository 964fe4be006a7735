"""Chains that have not mixed: a check of the integrand values, made with the other input checks.

A control variate corrects the noise of draws that follow the target; it cannot correct chains stuck
in different regions, and its se then says nothing about the error.  With chain labels, each
integrand's rank-normalised split R-hat (ArviZ) is compared with the largest value converged chains
of that length reach by chance: 1 + max(0.01, 10 / ESS), the ESS summed over the chains each taken
alone (with converged AR(1) pairs of chains of 100-1,000 draws, (R-hat - 1) x ESS stayed below 5-12
in 99.9% of simulations; the ESS of the pooled draws would be lowered by the very disagreement).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .external import diagnostics

__all__ = ["Mixing", "chain_mixing", "unmixed_columns", "unmixed_note"]

_RHAT_FLOOR = 1.01  # ArviZ's advice for final inferences
_RHAT_NOISE = 10.0


class Mixing(NamedTuple):
    """Each column's R-hat (nan where not computed: constant columns, no chains to compare) and the
    columns whose chains disagree beyond chance, {column: (R-hat, limit)}."""

    rhat: np.ndarray
    unmixed: dict


def chain_mixing(values, chain):
    """The :class:`Mixing` of the columns of ``values`` (n, k); nothing judged (R-hat nan) without
    chain labels, with fewer than 2 chains, unequal chains or chains of fewer than 8 draws."""
    Y = np.asarray(values, dtype=float)
    Y = Y.reshape(Y.shape[0], -1)
    rhat = np.full(Y.shape[1], np.nan)
    if chain is None:
        return Mixing(rhat, {})
    chain = np.asarray(chain)
    labels, counts = np.unique(chain, return_counts=True)
    live = np.ptp(Y, axis=0) > 0
    if labels.size < 2 or np.unique(counts).size != 1 or counts[0] < 8 or not live.any():
        return Mixing(rhat, {})
    V = np.stack([Y[chain == lab].T for lab in labels], axis=1)  # (k, chain, draw)
    found = diagnostics()
    cols = np.flatnonzero(live)
    rhat[cols] = np.atleast_1d(np.asarray(found.rhat(V[cols]), dtype=float))
    # the limit is never below the floor, so only columns above it need the per-chain ESS (each
    # column's is as costly as its R-hat, four times over with four chains)
    cols = cols[rhat[cols] > _RHAT_FLOOR]
    if not cols.size:
        return Mixing(rhat, {})
    ess = sum(np.atleast_1d(np.asarray(found.ess_bulk(V[cols][:, c:c + 1]), dtype=float)) for c in range(labels.size))
    limit = 1.0 + np.maximum(_RHAT_FLOOR - 1.0, _RHAT_NOISE / np.maximum(ess, 1e-12))
    return Mixing(rhat, {int(j): (float(rhat[j]), float(lj)) for j, lj in zip(cols, limit) if rhat[j] > lj})


def unmixed_columns(values, chain):
    """{column: (R-hat, limit)} for the columns of ``values`` (n, k) whose chains disagree beyond
    chance (:func:`chain_mixing`)."""
    return chain_mixing(values, chain).unmixed


def unmixed_note(where, rhat, limit):
    return (f"{where}: its chains disagree (R-hat {rhat:.2f} > {limit:.2f}, beyond what converged chains of "
            "this length reach by chance): they have not mixed, so the draws do not represent the target and "
            "no control variate corrects that; the error can be far larger than the se. Run longer chains or "
            "check the sampler.")
