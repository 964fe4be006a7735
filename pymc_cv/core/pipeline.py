"""The pipeline every estimator runs, with its own solver plugged in.

1. ``check_scores``: the Stein check of each target's scores against its draws (an error when gross,
   a finding when mild), made before any fit;
2. ``check_tails``: heavy-tailed draws, a finding for the CV estimates only (control variates
   extrapolate into tails the draws rarely reach; the plain mean's se does not);
3. ``run``: the solver's candidates, ``finalize`` (the choice per integrand, the se, the fallback to
   the plain mean), then the findings and the rows whose chains have not mixed (R-hat of the
   integrand values), marked on the result.

``cv_estimate`` (ZV and kernel solvers), ``vvcv_estimate`` (the vv-CV solvers) and
``MetaCV.estimate`` (adaptation of a meta-learned network) run all three; ``rung_moments`` runs the
two checks once for a ladder and the pipeline per rung with the checks off.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import numpy as np

from .finalize import finalize
from .mixing import chain_mixing, unmixed_columns, unmixed_note
from .score_check import apply_stein_check
from .uncertainty import heavy_tail_note

__all__ = ["Target", "Finding", "check_scores", "check_tails", "run", "squeeze"]


class Target(NamedTuple):
    """One set of draws from one target distribution and the rows of the result it serves.

    ``rows`` indexes the result's arrays (a task, a list of tasks sharing these draws, or
    ``slice(None)`` for all); ``label`` names it in notes ("" when the result has one target).
    """

    samples: np.ndarray
    scores: np.ndarray
    chain: np.ndarray | None
    rows: object = slice(None)
    label: str = ""
    repeats: object = "find"  # ``heldout.repeated_draws`` of the draws, or "find"


class Finding(NamedTuple):
    """What a check of the inputs found: a note and the rows whose se it makes unreliable
    (``cv_only``: only rows that report a CV estimate); or, with ``se_factor`` > 1 and ``unreliable``
    False, the rows whose CV se it widens that many times."""

    note: str
    rows: object
    cv_only: bool = False
    se_factor: float = 1.0
    unreliable: bool = True


def check_scores(targets, *, family=1, second_order=False, where=" for {label}"):
    """The Stein check of every target (:func:`~pymc_cv.core.score_check.apply_stein_check`):
    raises on a gross failure; a :class:`Finding` per mild one."""
    found = []
    for tg in targets:
        place = where.format(label=tg.label) if tg.label else ""
        outcome = apply_stein_check(tg.samples, tg.scores, tg.chain, where=place, repeats=tg.repeats, family=family,
                                    second_order=second_order)
        if outcome.note:
            found.append(Finding(outcome.note, tg.rows))
        if outcome.se_factor > 1:
            found.append(Finding(outcome.widening_note, tg.rows, cv_only=True, se_factor=outcome.se_factor,
                                 unreliable=False))
    return found


def check_tails(targets):
    """A :class:`Finding` (CV rows only) per target whose draws look heavy-tailed."""
    found = []
    for tg in targets:
        note = heavy_tail_note(tg.samples)
        if note:
            found.append(Finding(f"{tg.label}: {note}" if tg.label else note, tg.rows, cv_only=True))
    return found


def run(values, chains, solver: Callable, findings=(), *, kind="integrand", choose="best", fallback=True,
        standardizer=None, mixing_columns=None, khat=True):
    """The estimate of every integrand (task) from the candidates ``solver(notes)`` returns.

    Parameters
    ----------
    values : array (n, k) or list of T arrays
        The integrand values (columns of one set of draws, or one array per task).
    chains : array (n,), list of T arrays, or None
        Chain labels, as ``values`` is laid out.
    solver : callable
        ``solver(notes) -> list of finalize.Candidate``; it may append to ``notes``.
    findings : sequence of :class:`Finding`
        From :func:`check_scores` and :func:`check_tails`, marked on the result in this order
        (so the first reads first).
    kind, choose, fallback, standardizer, khat
        As :func:`~pymc_cv.core.finalize.finalize` takes them.
    mixing_columns : array of int, optional
        The integrands (``kind="integrand"``) whose chains are checked for mixing; None: all.

    Returns
    -------
    CVResult
    """
    notes = []
    candidates = solver(notes)
    res = finalize(values, chains, candidates, choose=choose, fallback=fallback, kind=kind, notes=notes,
                   standardizer=standardizer, khat=khat)
    del candidates  # their held-out residuals (n x k each) are not needed past here
    for j, (rhat, limit) in _unmixed(values, chains, kind, mixing_columns, res):
        res.mark_unreliable(unmixed_note(f"{kind} {j}", rhat, limit), j)
    for f in reversed(list(findings)):
        rows = f.rows
        if f.cv_only:
            mask = np.zeros(np.shape(res.se_reliable), dtype=bool)
            mask[rows] = True
            rows = mask & (np.asarray(res.method) != "mc")
        if f.unreliable:
            res.mark_unreliable(f.note, rows)
        else:
            res.widen_se(f.note, f.se_factor, rows)
    return res


_MIXING_BLOCK = 1024


def _unmixed(values, chains, kind, columns, res):
    """(row, (R-hat, limit)) for the rows (of ``columns``, None: all) whose chains disagree beyond chance;
    the R-hats of the integrands checked are kept on ``res`` (``CVResult.rhat``)."""
    if kind == "integrand":
        Y = np.asarray(values)
        Y = Y.reshape(Y.shape[0], -1)
        cols = np.arange(Y.shape[1]) if columns is None else columns
        res.rhat = np.full(Y.shape[1], np.nan)
        # a block of columns at a time: the (column, chain, draw) copies stay small (J = 10,000: 1.3 GB at once)
        for a in range(0, cols.size, _MIXING_BLOCK):
            block = cols[a:a + _MIXING_BLOCK]
            found = chain_mixing(Y[:, block], chains)
            res.rhat[block] = found.rhat
            for j, pair in found.unmixed.items():
                yield int(block[j]), pair
        return
    for t, y in enumerate(values):
        for _, found in unmixed_columns(y, None if chains is None else chains[t]).items():
            yield t, found


def squeeze(res):
    """The result of one integrand: every per-integrand array a scalar, ``fits`` the one fit."""
    for key in ("estimate", "se", "mc_estimate", "mc_se", "method", "variance_reduction", "se_reliable", "khat",
                "jackknife_bias", "rhat"):
        setattr(res, key, np.ravel(getattr(res, key))[0])
    if res.fits is not None:
        res.fits = res.fits[0]
    return res
