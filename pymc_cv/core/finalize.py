"""From candidate fits to reported estimates: one place for the se, the variance reduction, the
tail check, the choice between methods and the fallback to plain MC.

Every estimator (``cv_estimate``, ``vvcv_estimate``, ``MetaCV.estimate``) produces
:class:`Candidate` fits, one per method, each for k integrands at once, and hands them here, so
``variance_reduction`` and ``se_reliable`` mean the same thing whichever method produced them:

- variance reduction: (MC se / se of the held-out residuals)^2, both with ArviZ's ESS; for MCMC
  draws the residuals' se is the smaller of that at their own ESS and at the integrand's;
- se: the model se (kernel CVs, see ``uncertainty``; for MCMC draws at least the held-out
  residuals' se) or the held-out se, at least the block-jackknife se, plus an estimate of the
  fit's bias: the jackknife's (how far the estimate moves when a quarter of the draws is deleted,
  times 3, ``heldout.jackknife_bias``), or minus the cross-fit gap (the mean over draws of f minus
  the zero-mean part of a fit that did not see the draw, less the estimate) where that is larger
  and beyond chance; never below floating-point round-off;
- se_reliable: set False by the checks of the inputs (scores, heavy-tailed draws, divergences,
  see ``uncertainty``), not here; ``khat``, the tail of the held-out residuals, is reported;
- a method whose held-out residuals lost to MC is reported with the held-out se, never its
  model se alone, and with a note; under ``method="auto"`` (or ``fallback``) the MC mean is
  reported instead.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from .cvfit import CVFit, column_predictor
from .result import CVResult
from .standard_errors import effective_sample_sizes, mcse_mean
from .uncertainty import combine_se, residual_khat, roundoff_floor

__all__ = ["Candidate", "finalize"]


@dataclass
class Candidate:
    """One method's fit for k integrands, in the units of the integrands.

    ``estimate`` (k,); ``se_model`` (k,) or None; ``resid`` and ``z`` (n, k): held-out residuals
    f - g and the same standardised by their model sd (``resid`` where there is none);
    ``info``: the method's settings (small objects only).  For tasks with draws of their own
    ``resid`` and ``z`` are lists of k arrays.
    """

    name: str
    estimate: np.ndarray
    resid: np.ndarray
    z: np.ndarray
    se_model: np.ndarray | None = None
    info: dict = field(default_factory=dict)
    columns: np.ndarray | None = None  # which of the k integrands it fitted (None: all)
    resid_chain: list | None = None  # chain labels of ``resid`` where it covers other draws than f
    # for the block jackknife: the estimate without fold B is estimate - sum_B influence * resid
    influence: np.ndarray | None = None
    labels: np.ndarray | None = None
    # (k,): delete-a-part jackknife estimate of the bias (``heldout.jackknife_bias``); None where
    # the method has none
    jackknife_bias: np.ndarray | None = None
    jackknife: np.ndarray | None = None  # (k,): block-jackknife se from refits, where no influence exists
    # (standardised draws, scores) -> (n, k): the zero-mean part of the fitted CVs, in the units of
    # the integrands; only with ``return_fit=True``
    predictor: object | None = None

    def _fold_deltas(self, r):
        """(fold index of each draw, per fold sum of influence * r): how far the estimate moves
        when that fold is dropped.  The fold index is computed once per candidate (and labels)."""
        cached = getattr(self, "_fold_index", None)
        if cached is None or cached[0] is not self.labels:
            cached = self._fold_index = (self.labels, np.unique(self.labels, return_inverse=True)[1])
        inv = cached[1]
        return inv, np.bincount(inv, weights=self.influence * r, minlength=inv.max() + 1)

    def jackknife_se(self, i):
        """Block-jackknife se of estimate i over the held-out folds (nan without influence)."""
        if self.jackknife is not None:
            return float(self.jackknife[i])
        if self.influence is None or self.labels is None:
            return np.nan
        _, delta = self._fold_deltas(self.resid[:, i])
        K = delta.size
        if K < 2:
            return np.nan
        return float(np.sqrt((K - 1) / K * np.sum((delta - delta.mean()) ** 2)))

    def crossfit_gap(self, i, r):
        """Cross-fitted estimate minus estimate for integrand i: the mean over draws of the residual
        plus the intercept of the fit that did not see the draw (0 without influence).  A fit that
        leans on the draws it saw (the tails it extrapolates to) shows it here."""
        if self.influence is None or self.labels is None:
            return 0.0
        inv, delta = self._fold_deltas(r)
        return float(np.mean(r) - np.mean(delta[inv]))

    def crossfit_gap_se(self, i, r):
        """se of ``crossfit_gap`` for integrand i from the spread of its per-fold means (nan without
        influence): a gap made by one held-out draw far in the tails has an se as large as itself."""
        if self.influence is None or self.labels is None:
            return np.nan
        inv, delta = self._fold_deltas(r)
        size = np.bincount(inv)
        K = size.size
        if K < 2:
            return np.nan
        terms = np.bincount(inv, weights=r, minlength=K) - size * delta  # per fold: sum of (r - delta)
        m = terms.sum() / size.sum()
        return float(np.sqrt(K / (K - 1) * np.sum((terms - size * m) ** 2)) / size.sum())

    def heldout_se(self, i, chain, capped=None):
        """se of the mean of held-out residuals i at their own ESS.  Where every column shares
        ``chain``, the ESS of all columns comes from one ArviZ call (once per call it was a third of
        a small summary's time).  ``capped`` (k,), by integrand: where True, the residuals' ESS is
        taken as n without computing it (see ``finalize``)."""
        r = self.resid[i] if isinstance(self.resid, list) else self.resid[:, i]
        if isinstance(self.resid, list) or self.resid_chain is not None or r.size < 2:
            return mcse_mean(r - r.mean(), chain if self.resid_chain is None else self.resid_chain[i])
        return float(np.std(r, ddof=1) / np.sqrt(self.resid_ess(chain, capped)[i]))

    def resid_ess(self, chain, capped=None):
        """ESS of each column of ``resid`` (n, k) with labels ``chain`` (n where ``capped``), cached."""
        cached = getattr(self, "_ess", None)
        key = None if capped is None else np.asarray(capped, bool).tobytes()
        if cached is None or cached[0] is not chain or cached[2] != key:
            n, k = self.resid.shape
            ess = np.full(k, float(n))
            todo = (np.ones(k, bool) if capped is None else
                    ~np.asarray(capped if self.columns is None else capped[self.columns], bool))
            if todo.any():
                ess[todo] = effective_sample_sizes(self.resid[:, todo], chain)
            cached = self._ess = (chain, ess, key)
        return cached[1]

    def fold_terms(self):
        """(K, k) per-fold sums of influence x resid, (K, k) per-fold sums of resid, (K,) fold sizes and
        the fold of each draw, for every column at once (None without influence): what ``jackknife_se``,
        ``crossfit_gap`` and ``crossfit_gap_se`` take one column of."""
        if self.influence is None or self.labels is None:
            return None
        inv, _ = self._fold_deltas(self.resid[:, 0])
        size = np.bincount(inv)
        # sums over the draws of each fold (hundreds of held-out blocks at 100,000 draws: no K x n matrix)
        order = np.argsort(inv, kind="stable")
        starts = np.concatenate([[0], np.cumsum(size)[:-1]])
        k = self.resid.shape[1]
        weighted, sums = np.zeros((size.size, k)), np.zeros((size.size, k))
        live = size > 0
        step = max(1, int(_BLOCK_BYTES // (8 * inv.size)))  # a block of columns at a time
        for a in range(0, k, step):
            R = self.resid[order, a:a + step]
            sums[live, a:a + step] = np.add.reduceat(R, starts[live], axis=0)
            R *= self.influence[order, None]
            weighted[live, a:a + step] = np.add.reduceat(R, starts[live], axis=0)
        return weighted, sums, size, inv

    def index_of(self, j):
        if self.columns is None:
            return j
        hit = np.flatnonzero(self.columns == j)
        return int(hit[0]) if hit.size else None


def _label(kind, j):
    return f"{kind} {j}"


class Assessment(NamedTuple):
    """What a candidate would report for one integrand (its column ``i``)."""

    cand: Candidate
    i: int
    variance_reduction: float
    se: float  # as reported: model, held-out and jackknife parts, plus |bias|
    resid: np.ndarray
    bias: float


class Reported(NamedTuple):
    """One integrand's line of the result."""

    estimate: float
    se: float
    mc_estimate: float
    mc_se: float
    method: str
    variance_reduction: float
    khat: float
    hyperparameters: dict | None
    resid: np.ndarray
    jackknife_bias: float
    fit: CVFit | None = None


# the cross-fit gap is the bias where it is larger than the jackknife's and this many times its own se
# (from the spread of its fold means), which a gap made of a few held-out draws in the tails is not.
# bench/random_walk.py (NUTS): 2-se coverage of the rows 96% (the SECF's 91%) at 1.5, 89% (72%) at 2;
# on sin + cos (d = 2, n = 100, 100 replications) 1 of 100 gaps passes at 1.5, where gating on the
# gap's size alone (above the se) passed 9 and made the se 4.7x the rmse instead of 3.8x
_GAP_T = 1.5


def _assess(cand, i, sd_y, c, mcse, floor, capped=None):
    """The se this candidate would report for integrand i, and its held-out variance reduction."""
    r = cand.resid[i] if isinstance(cand.resid, list) else cand.resid[:, i]
    rc = c if cand.resid_chain is None else cand.resid_chain[i]
    se_held = cand.heldout_se(i, c, capped)
    if cand.resid_chain is None and c is not None:
        # residuals at the integrand's ESS as well: held-out residuals of block-deletion refits
        # carry each refit's offset, a slow component the jackknife terms below already count,
        # so their own ESS is pessimistic (stochastic volatility: 1/3 of in-sample residuals').
        # With it the SV summary error went 0.255 -> 0.12 of MC's; the MCMC coverage grid and a
        # two-speed target (slow residual left by the CV, tests/test_confidently_wrong.py) kept
        # their coverage.
        if sd_y > 0:
            se_held = min(se_held, mcse * np.std(r) / sd_y)
    # below floating-point round-off a held-out se says nothing more: the variance reduction is
    # inf only for an integrand the CV makes exact to the last bit, not 1e30 for a near-exact fit
    vr = (mcse / max(se_held, floor)) ** 2 if max(se_held, floor) > 0 else np.inf
    se_model = np.nan if cand.se_model is None else float(cand.se_model[i])
    se = max(combine_se(se_model, se_held, rc), floor)
    # the fold-to-fold spread of the estimate: what the fit's dependence on the draws it saw adds
    # to the error, which neither the model se nor the residuals show
    se_jack = cand.jackknife_se(i)
    if np.isfinite(se_jack):
        se = max(se, se_jack)
    if vr <= 1.0:  # the held-out residuals say the fit lost to MC: its model se is not believed
        se = max(se, se_held)
    # the fit's bias from what its draws do not show: the jackknife over parts of held-out blocks.
    # On exp(x0 / 2), d = 2, n = 200 the se covered 67% without a bias term, 73% with the 10-fold
    # cross-fit gap and 97% with the jackknife bias, which on sin + cos (n = 100) costs an se 3.5x
    # (CF) / 4.1x (SECF) the rmse (1.5x without).  A bias that does not shrink as draws are deleted
    # escapes the jackknife; the cross-fitted estimate then sits away from the fit's, and minus that
    # gap is the bias instead (bench/random_walk.py: a funnel where a kernel fit's intercept, off
    # by 3 se, tracked the gap with correlation 0.99)
    jack = np.nan if cand.jackknife_bias is None else float(cand.jackknife_bias[i])
    gap = cand.crossfit_gap(i, r)
    bias = jack if np.isfinite(jack) else -gap
    if abs(gap) > abs(bias) and abs(gap) > _GAP_T * cand.crossfit_gap_se(i, r):
        bias = -gap
    # added, not in quadrature: a bias of the fit, not noise independent of the rest
    se_all = se + abs(bias)
    return Assessment(cand, i, vr, se_all, r, bias)


_BLOCK_BYTES = 64e6


class _PlainStatistics(NamedTuple):
    """An integrand's plain mean, its mcse, its sd, the round-off floor of a mean (``roundoff_floor``) and
    whether it is constant; or the same as arrays over integrands."""

    mean: float
    mcse: float
    sd: float
    floor: float
    constant: bool


def _plain_statistics(Y, ess):
    """:class:`_PlainStatistics` of the columns of ``Y`` (n, k) as arrays, the mcse at ``ess``."""
    mean, sd = np.mean(Y, axis=0), np.std(Y, axis=0)
    mcse = np.std(Y, axis=0, ddof=1) / np.sqrt(ess)
    floor = np.finfo(float).eps * np.sqrt(Y.shape[0]) * (np.abs(mean) + sd)
    return _PlainStatistics(mean, mcse, sd, floor, np.ptp(Y, axis=0) == 0)


class _Assessed(NamedTuple):
    """A candidate's :class:`Assessment` of every column it fitted, as arrays over its columns."""

    variance_reduction: np.ndarray
    se: np.ndarray
    bias: np.ndarray


def _assess_columns(cand, sd_y, c, mcse, floor, capped=None):
    """``_assess`` of every column of ``cand`` at once, for residuals (n, k) on the integrands' own draws
    (no ``resid_chain``, n >= 2); ``sd_y``, ``mcse``, ``floor`` are by integrand.  The same formulas
    in arrays over the columns (J = 10,000 groups, 20,004 integrands: ``finalize`` 23 s -> 14 s)."""
    R = cand.resid
    js = np.arange(R.shape[1]) if cand.columns is None else np.asarray(cand.columns)
    sd_y, mcse, floor = sd_y[js], mcse[js], floor[js]
    se_held = np.std(R, axis=0, ddof=1) / np.sqrt(cand.resid_ess(c, capped))
    if c is not None:  # see ``_assess``
        with np.errstate(divide="ignore", invalid="ignore"):
            at_own = mcse * np.std(R, axis=0) / sd_y
        se_held = np.where(sd_y > 0, np.minimum(se_held, at_own), se_held)
    base = np.maximum(se_held, floor)
    with np.errstate(divide="ignore"):
        vr = np.where(base > 0, (mcse / np.where(base > 0, base, 1.0)) ** 2, np.inf)
    se_model = np.full(js.size, np.nan) if cand.se_model is None else np.asarray(cand.se_model, float)
    combined = np.where(np.isfinite(se_model), se_model if c is None else np.maximum(se_model, se_held), se_held)
    se = np.maximum(combined, floor)
    terms = cand.fold_terms()
    if cand.jackknife is not None:
        se_jack = np.asarray(cand.jackknife, float)
    elif terms is None or terms[2].size < 2:
        se_jack = np.full(js.size, np.nan)
    else:
        delta, K = terms[0], terms[2].size
        se_jack = np.sqrt((K - 1) / K * np.sum((delta - delta.mean(axis=0)) ** 2, axis=0))
    se = np.where(np.isfinite(se_jack), np.maximum(se, np.where(np.isfinite(se_jack), se_jack, 0.0)), se)
    se = np.where(vr <= 1.0, np.maximum(se, se_held), se)
    jack = np.full(js.size, np.nan) if cand.jackknife_bias is None else np.asarray(cand.jackknife_bias, float)
    if terms is None:
        gap, gap_se = np.zeros(js.size), np.full(js.size, np.nan)
    else:
        delta, sums, size, _ = terms
        n, K = size.sum(), size.size
        gap = R.mean(axis=0) - size @ delta / n
        if K < 2:
            gap_se = np.full(js.size, np.nan)
        else:
            per_fold = sums - size[:, None] * delta
            m = per_fold.sum(axis=0) / n
            gap_se = np.sqrt(K / (K - 1) * np.sum((per_fold - size[:, None] * m) ** 2, axis=0)) / n
    bias = np.where(np.isfinite(jack), jack, -gap)
    with np.errstate(invalid="ignore"):
        replace = (np.abs(gap) > np.abs(bias)) & (np.abs(gap) > _GAP_T * gap_se)
    bias = np.where(replace, -gap, bias)
    return _Assessed(vr, se + np.abs(bias), bias)


def _batched(cand, chains, k):
    """Whether ``_assess_columns`` takes ``cand``: residuals on draws every one of the k columns shares,
    one column per integrand it fitted."""
    return (not isinstance(chains, list) and not isinstance(cand.resid, list) and cand.resid_chain is None
            and cand.resid.shape[0] >= 2 and cand.resid.shape[1] == (k if cand.columns is None else len(cand.columns)))


def finalize(Y, chain, candidates, *, choose="best", fallback=True, kind="integrand", notes=None,
             method_label=None, standardizer=None, khat=True):
    """A :class:`CVResult` for the k integrands (columns of ``Y``) from candidate fits.

    Parameters
    ----------
    Y : array (n, k)
        Integrand values; ``chain`` as for ``cv_estimate``, or a list of k label arrays
        (None entries for independent draws) when columns are tasks with draws of their own.
    candidates : list of Candidate
    choose : {"best", "first"}
        "best": per integrand the candidate with the smallest se as it would be reported, among
        those that beat MC on held-out draws if any did; "first": the first candidate that
        fitted it (an explicit method).
    fallback : bool
        Report the MC mean where the chosen candidate did not beat MC on held-out draws.
    kind : str
        "integrand" or "task", for the notes.
    standardizer : Standardizer, optional
        With it, ``CVResult.fits`` holds each integrand's chosen fit as a :class:`CVFit` (the
        candidates must carry predictors: ``return_fit=True``).
    khat : bool
        Fill ``CVResult.khat`` (a Pareto fit per integrand); NaN without it.
    Y may also be a list of k 1-d arrays of different lengths (tasks).
    """
    cols = [np.asarray(Y[:, j]) for j in range(Y.shape[1])] if isinstance(Y, np.ndarray) else list(Y)
    chains = chain if isinstance(chain, list) else [chain] * len(cols)
    notes = list(notes or [])
    shared = not isinstance(chain, list) and len({y.size for y in cols}) == 1 and cols[0].size >= 2
    # the columns side by side: Y itself where it is one array (a copy of 20,004 columns cost 0.8 s)
    together = (np.asarray(Y, dtype=float) if isinstance(Y, np.ndarray) and Y.ndim == 2 else np.column_stack(cols)
                ) if shared else None
    mc_ess = effective_sample_sizes(together, chain) if shared else None
    # where an integrand's ESS is n (capped), the held-out se is std(r) / sqrt(n) whatever the
    # residuals' own ESS (also capped at n, and the smaller se of the two is taken in ``_assess``),
    # so theirs is not computed: half of the varying intercepts' columns, 4 of 5 of eight schools'
    capped = None if mc_ess is None else mc_ess >= cols[0].size
    lines = []
    rule = _Rule(choose, fallback, kind, method_label, khat)
    assessed, plain = {}, None
    if mc_ess is not None:
        # every column's plain statistics at once (20,004 columns one at a time: seconds)
        plain = _plain_statistics(together, mc_ess)
        assessed = {id(cand): _assess_columns(cand, plain.sd, chain, plain.mcse, plain.floor, capped)
                    for cand in candidates if _batched(cand, chain, len(cols))}
    del together
    for j, (y, c) in enumerate(zip(cols, chains)):
        if plain is None:
            stats = _PlainStatistics(float(np.mean(y)), mcse_mean(y, c), float(np.std(y)), roundoff_floor(y),
                                     bool(np.std(y) == 0.0))
        else:
            stats = _PlainStatistics(*(float(a[j]) for a in plain[:4]), bool(plain.constant[j]))
        line, chosen = _report(j, y, c, stats, candidates, rule, notes, capped, assessed)
        if standardizer is not None:
            with_fit = chosen is not None and chosen.cand.predictor is not None
            zero_mean = (column_predictor(chosen.cand.predictor, chosen.i) if with_fit
                         else (lambda X, S: np.zeros(X.shape[0])))
            line = line._replace(fit=CVFit(line.method, line.estimate, zero_mean, standardizer))
        lines.append(line)
    return CVResult(
        estimate=np.array([ln.estimate for ln in lines], float), se=np.array([ln.se for ln in lines], float),
        mc_estimate=np.array([ln.mc_estimate for ln in lines], float),
        mc_se=np.array([ln.mc_se for ln in lines], float),
        method=np.array([ln.method for ln in lines], object),
        variance_reduction=np.array([ln.variance_reduction for ln in lines], float),
        se_reliable=np.ones(len(lines), bool), khat=np.array([ln.khat for ln in lines], float),
        jackknife_bias=np.array([ln.jackknife_bias for ln in lines], float),
        hyperparameters=[ln.hyperparameters for ln in lines], notes=notes,
        values=[np.array(y, dtype=float) for y in cols], heldout_residuals=[ln.resid for ln in lines],
        fits=[ln.fit for ln in lines] if standardizer is not None else None,
    )


class _Rule(NamedTuple):
    """How ``finalize`` chooses among candidates and names the integrands in its notes."""

    choose: str
    fallback: bool
    kind: str
    method_label: str | None
    khat: bool = True


# a CV's se (its fit's jackknife spread and bias included) is conservative, up to 2-3x its RMSE on
# bench/se_coverage.py's cells: from this multiple of MC's se on, the MC mean is reported.  At 1x the
# grid lost accuracy (n = 50-200, d = 10-50: error ratios 0.2-0.8 -> 1) and 4 cells their coverage
# target (MC's se of 50 MCMC draws covering less than the CV's)
_SE_OVER_MC = 2.0


def _report(j, y, c, stats, candidates, rule, notes, capped=None, assessed=None):
    """Integrand j's :class:`Reported` line (the chosen candidate's, or MC's, from its
    :class:`_PlainStatistics` ``stats``) and the chosen :class:`Assessment` (None when MC is reported).
    ``assessed``: the :class:`_Assessed` of candidates assessed for all their columns at once, by ``id``."""
    mc, mcse, sd_y, floor, constant = stats
    choose, fallback, kind, method_label, _ = rule
    plain = Reported(mc, mcse, mc, mcse, "mc", 1.0, np.nan, None, y - mc, 0.0)
    if constant:  # a constant integrand is known exactly
        return plain._replace(se=floor, variance_reduction=np.inf, resid=(y - mc) - np.mean(y - mc)), None
    tried = []
    for cand in candidates:
        i = cand.index_of(j)
        if i is None or not np.isfinite(cand.estimate[i]):
            continue
        done = (assessed or {}).get(id(cand))
        if done is None:
            tried.append(_assess(cand, i, sd_y, c, mcse, floor, capped))
        else:
            tried.append(Assessment(cand, i, float(done.variance_reduction[i]), float(done.se[i]), cand.resid[:, i],
                                    float(done.bias[i])))
    if not tried:
        return plain._replace(resid=(y - mc) - np.mean(y - mc)), None
    # the smallest se as reported (model, held-out and jackknife parts), not the held-out
    # one alone: a fit that looks best on held-out draws but moves with them loses
    helped = [a for a in tried if a.variance_reduction > 1.0]  # no fallback to MC while a CV beat it
    a = tried[0] if choose == "first" else min(helped or tried, key=lambda a: a.se)
    vr = a.variance_reduction
    name = method_label or a.cand.name
    if vr <= 1.0 and fallback:
        notes.append(f"{_label(kind, j)}: no control variate beat plain MC on held-out draws "
                     f"({name}: variance reduction {vr:.2f}); reporting the MC mean.")
        return plain._replace(variance_reduction=vr, resid=(y - mc) - np.mean(y - mc)), None
    if a.se >= _SE_OVER_MC * mcse and fallback:
        # the held-out residuals beat MC, but the fit moves with the draws it saw (jackknife spread
        # and bias) far more than MC's own error: on 100 SMC particles of the centred eight schools a
        # vv-CV of two rungs reported 11 MC se from the plain mean with an se 5x MC's
        notes.append(f"{_label(kind, j)}: {name} beat plain MC on held-out draws (variance reduction {vr:.2f}) "
                     f"but its se with the fit's spread and bias ({a.se:.3g}) is {a.se / mcse:.1f}x MC's ({mcse:.3g}); "
                     "reporting the MC mean.")
        return plain._replace(variance_reduction=(mcse / a.se) ** 2, resid=(y - mc) - np.mean(y - mc)), None
    if vr <= 1.0:
        notes.append(f"{_label(kind, j)}: {name} did not beat plain MC on held-out draws "
                     f"(variance reduction {vr:.2f}); its estimate is kept, with the held-out se.")
    z = a.cand.z[a.i] if isinstance(a.cand.z, list) else a.cand.z[:, a.i]
    khat = residual_khat(z) if rule.khat else np.nan
    line = Reported(float(a.cand.estimate[a.i]), a.se, mc, mcse, name, vr, khat, a.cand.info,
                    a.resid - np.mean(a.resid), a.bias if a.cand.info is not None else 0.0)
    return line, a
