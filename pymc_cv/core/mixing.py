"""Chains that have not mixed: a check of the integrand values, made with the other input checks.

A control variate corrects the noise of draws that follow the target; it cannot correct chains stuck
in different regions, and its se then says nothing about the error.  With chain labels, each
integrand's rank-normalised split R-hat (ArviZ) is compared with the largest value converged chains
of that length reach by chance: 1 + max(0.01, 10 / ESS), the ESS summed over the chains each taken
alone (with converged AR(1) pairs of chains of 100-1,000 draws, (R-hat - 1) x ESS stayed below 5-12
in 99.9% of simulations; the ESS of the pooled draws would be lowered by the very disagreement).
"""

from __future__ import annotations

import numpy as np

from .external import diagnostics

__all__ = ["unmixed_columns", "unmixed_note"]

_RHAT_FLOOR = 1.01  # ArviZ's advice for final inferences
_RHAT_NOISE = 10.0


def unmixed_columns(values, chain):
    """{column: (R-hat, limit)} for the columns of ``values`` (n, k) whose chains disagree beyond
    chance; empty without chain labels, with fewer than 2 chains, unequal chains or chains of fewer
    than 8 draws (nothing judged)."""
    if chain is None:
        return {}
    chain = np.asarray(chain)
    labels, counts = np.unique(chain, return_counts=True)
    if labels.size < 2 or np.unique(counts).size != 1 or counts[0] < 8:
        return {}
    Y = np.asarray(values, dtype=float).reshape(chain.size, -1)
    V = np.stack([Y[chain == lab].T for lab in labels], axis=1)  # (k, chain, draw)
    live = np.ptp(Y, axis=0) > 0
    out = {}
    if not live.any():
        return out
    found = diagnostics()
    cols = np.flatnonzero(live)
    r = np.atleast_1d(np.asarray(found.rhat(V[cols]), dtype=float))
    # the limit is never below the floor, so only columns above it need the per-chain ESS (each
    # column's is as costly as its R-hat, four times over with four chains)
    cols, r = cols[r > _RHAT_FLOOR], r[r > _RHAT_FLOOR]
    if not cols.size:
        return out
    ess = sum(np.atleast_1d(np.asarray(found.ess_bulk(V[cols][:, c:c + 1]), dtype=float)) for c in range(labels.size))
    limit = 1.0 + np.maximum(_RHAT_FLOOR - 1.0, _RHAT_NOISE / np.maximum(ess, 1e-12))
    for j, rj, lj in zip(cols, r, limit):
        if rj > lj:
            out[int(j)] = (float(rj), float(lj))
    return out


def unmixed_note(where, rhat, limit):
    return (f"{where}: its chains disagree (R-hat {rhat:.2f} > {limit:.2f}, beyond what converged chains of "
            "this length reach by chance): they have not mixed, so the draws do not represent the target and "
            "no control variate corrects that; the error can be far larger than the se. Run longer chains or "
            "check the sampler.")
