"""The Stein check: do the draws and the scores describe the same target?

Integration by parts gives, for every coordinate i of a proper density on R^d,

    E[s_i] = 0        and        E[(x_i - E x_i) s_i] = -1.

Scores of the wrong sign, scores computed with other data than the draws were sampled with
(``pm.set_data`` after sampling, another dataset in the same program), scores of the
constrained instead of the unconstrained parameters, or chains that have not converged break
these identities, and every control variate built on such scores is confidently wrong.  Each
statistic is compared with its Monte Carlo standard error (ArviZ's ESS), the second on the log scale
(``_log_scale_z``): far off and by a large amount is an error; off beyond chance (Bonferroni over the
2d statistics) is a note and an unreliable se.  Below 50 draws (a Meta-CV task) nothing is
concluded.  O(n d): a few per cent of a CV fit.

``second_order=True`` also checks the second-order identities E[L(P)] = 0 for the monomials P of
degree 1 and 2 of the standardised draws (the features of a ZV-2 fit, up to d = 20): draws that
under-represent a region where the scores are large (the funnel of a Cholesky factor) pass the
first-order identities but fail these, and control variates amplify that error.  Two tests: the
largest |z| of the features one at a time (Bonferroni), and all of them jointly (``_joint_p``), which
sees deviations that are moderate in each of several correlated features.  LKJCholeskyCov (n = 2),
24 runs of 4 x 1,000 NUTS draws: the ZV-2 or SECF estimate of E[r^2] was more than 3 se off in 10, and
the largest |z| missed 5 of them (1.5-3.1 against a level of 3.3), the joint test 1 (p 0.04); 24 sets
of independent draws of the same target: largest |z| 3.6 once, joint p at least 0.013; the 17
posteriordb posteriors of up to 20 parameters: largest |z| at most 2.9 and joint p at least 0.013.

Between chance and a failure the joint test grades: where its p-value is below ``_WIDEN_LEVEL``, the
means of the features are overdispersed against their MCSEs by the statistic over its degrees of
freedom, and the se of every CV estimate is widened by the square root of that (``se_factor``), for the
bias a region the chains under-represent may leave (draws in chains only: independent draws have no such
region, and widening 5% of their results by chance made the se looser, not safer). Under a fixed bias
the statistic grows with the draws, and so does the widening, as the se shrinks. The same LKJ model on
seeds 0-42 of 4 x 1,000 NUTS draws (PyMC 6), the check alone: the ZV-2 or SECF estimate of E[r^2] was
more than 3 se off in three runs it passed, at joint p 0.015-0.035 (4.0, 3.6 and 3.7 se off; 2.7, 2.4
and 2.6 widened). AR(1) chains (0.5) of N(0, I_d), d = 1-10, 200 runs each: 4-10% of them widened, by
1.2-2.0x (median).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
from scipy import stats

from .heldout import repeated_draws
from .polynomial import stein_polynomial_features
from .standard_errors import effective_sample_sizes, head_of_chains, segment_effective_sample_sizes

__all__ = ["ScoreCheck", "CheckOutcome", "stein_check", "apply_stein_check", "ScoreMismatchError"]

# an identity broken by more than this many MCSEs *and* by a large amount is an error
_GROSS_Z = 10.0
_GROSS_EFFECT = 0.5  # |E[(x - Ex) s] + 1| or |E[s]| / sd(s)
_FAMILY_LEVEL = 0.001
_MIN_DRAWS_GROSS = 50  # below this a chance sample (all draws near the mode) can look gross
_MIN_DRAWS_MILD = 100  # below this z is too skewed (and the ESS too rough) for a mild flag
_SECOND_ORDER_LEVEL = 0.01  # family level of the second-order identities (Bonferroni over them)
_SECOND_ORDER_MAX_DIM = 20  # d (d + 3) / 2 features: 230 at d = 20
# the joint test of the second-order identities: its level, and how many effective draws per feature
# it needs.  Its covariance of the feature means takes each whitened feature at its own ESS, which
# ignores their cross-autocorrelation: on AR(1) chains (0.5, 0.9; d = 1-20, 100 runs each) runs with
# fewer than 20 effective draws per feature came out below 1e-3 up to 43% of the time, the others in
# at most 1% (the same on Student-t draws); with ArviZ's ESS per feature instead of whitened, one
# posteriordb regression (logearn_interaction) came out at 1.6e-5
_JOINT_LEVEL = 0.001
_JOINT_ESS_PER_FEATURE = 20
_WIDEN_LEVEL = 0.05  # below this joint p-value the CV se's are widened (module docstring)
# the ESS of the identities from this many draws at the head of the chains, scaled to all of them
_ESS_DRAWS = 40_000


class ScoreMismatchError(ValueError):
    """The scores fail the Stein identities by far: they do not belong to the draws' target."""


@dataclass
class ScoreCheck:
    """Result of :func:`stein_check`.

    ``mean_score`` (d,): mean of s_i in units of sd(s_i) (should be 0); ``cross`` (d,): mean of
    (x_i - mean x_i) s_i (should be -1); ``z`` (2, d): their deviations over their MCSEs (with
    chains, within the threshold it may be a bound: the MCSE at ESS = draws); ``level``: "ok",
    "mild" or "gross".
    """

    mean_score: np.ndarray
    cross: np.ndarray
    z: np.ndarray
    threshold: float
    level: str
    # largest |z| of the second-order identities (nan: not checked; below its threshold, possibly a bound)
    second_order_z: float = float("nan")
    second_order_threshold: float = float("nan")
    # p-value of their joint test (nan: not made; above its level, possibly a lower bound of it)
    second_order_p: float = float("nan")
    second_order_level: float = float("nan")
    # the joint statistic over its degrees of freedom (nan: not computed) and the p-value below which the
    # CV se's are widened by its square root
    second_order_dispersion: float = float("nan")
    widen_level: float = float("nan")

    @property
    def second_order_failed(self):
        return bool(self.second_order_z > self.second_order_threshold or self.second_order_p < self.second_order_level)

    @property
    def se_factor(self):
        """How many times wider the se of a CV estimate is made: sqrt(dispersion) where the joint test of the
        second-order identities is below ``widen_level``, else 1."""
        if self.second_order_p < self.widen_level and self.second_order_dispersion > 1:
            return float(np.sqrt(self.second_order_dispersion))
        return 1.0

    def widening_note(self, where=""):
        return (f"the draws are off on the second-order Stein identities by more than chance{where} (jointly p = "
                f"{self.second_order_p:.2g}): the se of every control-variate estimate is widened "
                f"{self.se_factor:.2f}x for the bias a region the draws under-represent may leave.")

    def message(self, names=None, where=""):
        d = self.cross.size
        names = [f"parameter {i}" for i in range(d)] if names is None else list(names)
        worst = np.argsort(-np.max(np.abs(self.z), axis=0))[:3]
        parts = [f"{names[i]}: mean score {self.mean_score[i]:+.3g} sd (should be 0, z = {self.z[0, i]:+.1f}), "
                 f"mean of (x - mean x) * score {self.cross[i]:+.3g} (should be -1, z = {self.z[1, i]:+.1f})"
                 for i in worst if np.max(np.abs(self.z[:, i])) > self.threshold]
        if not parts and self.second_order_failed:
            found = (f"largest |z| {self.second_order_z:.1f} > {self.second_order_threshold:.1f}"
                     if self.second_order_z > self.second_order_threshold else
                     f"jointly p = {self.second_order_p:.2g} < {self.second_order_level:.2g}")
            return (f"the draws fail the second-order Stein identities{where} ({found} over the means of the "
                    "Stein images of the quadratic monomials, which are 0 under the target): the draws "
                    "under-represent a region where the scores are large (a funnel the sampler does not "
                    "reach into, chains not mixed), and control variates amplify that error.")
        head = f"the scores fail the Stein check{where} (" + "; ".join(parts) + "). "
        return head + ("Scores must be +grad log density of the target the draws come from, on the "
                       "unconstrained space, computed with the same data the draws were sampled with "
                       "(pm.set_data after sampling or another dataset breaks this); chains that have "
                       "not converged fail it too.")


def _log_scale_z(m, mcse, linear_z):
    """z of m = -mean of (x - mean x) s against 1 on the log scale, positive where m < 1.

    m is a ratio of spreads (the draws' variance over the one the scores imply), and its MCSE grows
    with it: draws that by chance spread little also show a small MCSE, so the linear z of short
    chains' small sample variances is far out.  Measured on correct scores (two AR(1) chains, 0.5,
    d = 50, 400 runs), the check flagged 31% of runs of 2 x 50 draws and 13% of 2 x 100 against a
    family level of 0.1%, and raised an error in 0.5% of runs of 2 x 25; with log(m) / (mcse / m)
    6%, 3% and none.  Where m <= 0 (scores of the wrong sign) the linear z is kept."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(m > 0, -m * np.log(np.where(m > 0, m, 1.0)) / mcse, linear_z)


def _second_order(samples, scores, chain, ess_independent, family):
    """(largest |z| of the means of the order-1 and order-2 Stein features, its level, the p-value of their
    joint test, its level, the joint statistic over its degrees of freedom, the widening level). With
    chains, each is first taken at ESS = draws, which bounds it (the ESS is capped at the draws), and
    ArviZ's ESS is computed only where that bound fails its level: most draws pass there (d = 20, 4,000
    draws: the whole check 0.04 s with the joint test, 0.10 s before without it, most of which was the ESS
    of the 230 features)."""
    sd = samples.std(axis=0)
    sd = np.where(sd > 0, sd, 1.0)
    F = stein_polynomial_features((samples - samples.mean(axis=0)) / sd, scores * sd, 2)
    threshold = float(stats.norm.isf(_SECOND_ORDER_LEVEL / (2 * F.shape[1] * family)))
    # independent draws have no region a sampler failed to reach: there a low p-value is chance
    widen = _WIDEN_LEVEL / family if chain is not None else 0.0
    p, dispersion = _joint_p(F, chain, ess_independent, max(widen, _JOINT_LEVEL / family))
    return (_largest_z(F, chain, ess_independent, threshold), threshold, p, _JOINT_LEVEL / family, dispersion, widen)


def _largest_z(F, chain, ess_independent, threshold):
    """Largest |z| of the column means of F (n, p), or at most ``threshold`` when its bound at ESS = n is."""
    n = F.shape[0]
    mean, sd = np.abs(F.mean(axis=0)), np.sqrt(_covariance(F).diagonal())

    def largest(ess):
        mcse = sd / np.sqrt(ess)
        with np.errstate(divide="ignore", invalid="ignore"):
            return float(np.max(np.where(mcse > 0, mean / mcse, 0.0)))

    if chain is None:
        return largest(np.full(F.shape[1], ess_independent))
    bound = largest(np.full(F.shape[1], float(n)))
    return bound if bound <= threshold else largest(segment_effective_sample_sizes(F, chain, _ESS_DRAWS))


def _covariance(F):
    """The covariance of the columns of ``F`` (n, p) without a centred copy: the Stein features have mean
    zero under the target, so the sums of squares lose nothing to cancellation."""
    n = F.shape[0]
    mean = F.mean(axis=0)
    return (F.T @ F - n * np.outer(mean, mean)) / (n - 1)


def _hotelling_p(t2, p, nu):
    return float(stats.f.sf(t2 * (nu - p) / (p * (nu - 1)), p, nu - p))


def _joint_p(F, chain, ess_independent, level):
    """(p-value, statistic / degrees of freedom) of H0: every column of F (n, p) has mean 0, from all of
    them at once: the columns are whitened by their covariance, each whitened column's mean is taken at
    its own ESS, and Hotelling's F correction is made with the median ESS as the sample size; nan with
    fewer than ``_JOINT_ESS_PER_FEATURE`` effective draws per column.  Where its bound at ESS = n is
    above ``level``, that bound (and the statistic at ESS = n)."""
    n = F.shape[0]
    w, V = np.linalg.eigh(_covariance(F))
    keep = w > max(w[-1], 0.0) * 1e-10
    p = int(keep.sum())
    if not p or n < _JOINT_ESS_PER_FEATURE * p:
        return float("nan"), float("nan")
    whiten = V[:, keep] / np.sqrt(w[keep])
    m2 = (F.mean(axis=0) @ whiten) ** 2
    if chain is None:
        ess = np.full(p, ess_independent)
    else:
        t2 = float(np.sum(m2)) * n
        bound = _hotelling_p(t2, p, float(n))
        if bound >= level:
            return bound, t2 / p
        # whitened only where the ESS is taken (4 x 100,000 draws, 77 features: 250 MB per copy)
        head = head_of_chains(chain, _ESS_DRAWS)
        ess = np.clip(effective_sample_sizes(F[head] @ whiten, chain[head]) * (n / head.sum()), 1.0, n)
    nu = float(np.median(ess))
    if nu < _JOINT_ESS_PER_FEATURE * p:
        return float("nan"), float("nan")
    t2 = float(np.sum(m2 * ess))
    return _hotelling_p(t2, p, nu), t2 / p


def stein_check(samples, scores, chain=None, repeats="find", family=1, second_order=False):
    """Compare the Stein identities E[s] = 0 and E[(x - Ex) s_i] = -1 with their MCSEs.

    Parameters
    ----------
    samples, scores : arrays (n, d)
    chain : array (n,), optional
        Chain labels (draws in sampling order), for the ESS.
    repeats : "find", None or tuple
        For independent draws, ``heldout.repeated_draws(samples)`` if the caller has it (None:
        no repeats); "find" computes it.
    family : int
        How many such checks the caller makes (rungs of a ladder): the level is shared among them.
    second_order : bool
        Also check the second-order identities (module docstring); a failure is "mild".

    Returns
    -------
    ScoreCheck
    """
    n, d = samples.shape
    xc = samples - samples.mean(axis=0)
    sd = scores.std(axis=0)
    g = np.column_stack([scores / np.where(sd > 0, sd, 1.0), xc * scores])
    target = np.concatenate([np.zeros(d), -np.ones(d)])
    mean = g.mean(axis=0)
    sd_g = g.std(axis=0, ddof=1)
    threshold = float(stats.norm.isf(_FAMILY_LEVEL / (4 * d * family)))

    def z_at(ess):
        mcse = sd_g / np.sqrt(ess)
        with np.errstate(divide="ignore", invalid="ignore"):
            z = np.where(mean == target, 0.0, (mean - target) / mcse)
            z[d:] = _log_scale_z(-mean[d:], mcse[d:], z[d:])
        return z

    if chain is None:  # independent draws, but a rejecting sampler's repeats are not
        rep = repeated_draws(samples) if isinstance(repeats, str) else repeats
        ess_independent = float(n) if rep is None else n ** 2 / float(np.sum(rep[3] ** 2))
        z = z_at(ess_independent)
    else:
        # the ESS is capped at the draws, so |z| at ESS = n bounds it: ArviZ's ESS only where that bound
        # is beyond the threshold (d = 10,002, 4,000 draws: the ESS of 20,004 columns took 8 s)
        z = z_at(float(n))
        over = np.abs(z) > threshold
        if over.any():
            ess = np.full(2 * d, float(n))
            ess[over] = segment_effective_sample_sizes(g[:, over], chain, _ESS_DRAWS)
            z = np.where(over, z_at(ess), z)
    z = z.reshape(2, d)
    effect = np.abs(mean - target).reshape(2, d)
    if n >= _MIN_DRAWS_GROSS and np.any((np.abs(z) > max(_GROSS_Z, threshold)) & (effect > _GROSS_EFFECT)):
        level = "gross"
    elif n >= _MIN_DRAWS_MILD and np.any(np.abs(z) > threshold):
        level = "mild"
    else:
        level = "ok"
    second = (float("nan"),) * 6
    if second_order and n >= _MIN_DRAWS_MILD and d <= _SECOND_ORDER_MAX_DIM:
        second = _second_order(samples, scores, chain, ess_independent if chain is None else None, family)
    chk = ScoreCheck(mean[:d], mean[d:], z, threshold, level, *second)
    if level == "ok" and chk.second_order_failed:
        chk.level = "mild"
    return chk


class CheckOutcome(NamedTuple):
    """What :func:`apply_stein_check` found: the note of a mild failure (None: passed), after which the
    caller marks its se unreliable, and how many times wider the se of a CV estimate is made
    (``ScoreCheck.se_factor``), with its note (None at 1)."""

    note: str | None
    se_factor: float = 1.0
    widening_note: str | None = None


def apply_stein_check(samples, scores, chain=None, *, names=None, where="", repeats="find", family=1,
                      second_order=False):
    """Run :func:`stein_check`; raise :class:`ScoreMismatchError` when gross, else a :class:`CheckOutcome`."""
    chk = stein_check(samples, scores, chain, repeats, family, second_order)
    if chk.level == "gross":
        msg = chk.message(names, where)
        raise ScoreMismatchError(msg[0].upper() + msg[1:] + " Pass check_scores=False to skip this check.")
    note = chk.message(names, where) + " The se is marked unreliable." if chk.level == "mild" else None
    factor = chk.se_factor
    return CheckOutcome(note, factor, chk.widening_note(where) if factor > 1 else None)
