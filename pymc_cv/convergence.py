"""Convergence checks per row of a summary: R-hat, bulk ESS, and chains that disagree; and what concerns
every row: divergent transitions and the sampler's energy (E-BFMI).

A control variate removes the noise of the draws around the target; it cannot remove what the
chains got wrong.  Chains stuck in different modes are each locally consistent (the Stein check
passes in each), and a CV fitted to all of them then reports a tiny se around a mean that no
chain supports.  So every row is checked as ArviZ would check it (rank-normalised split R-hat
above 1.01, bulk ESS below 100 per chain), and the chains' own CV estimates are compared: the
per-chain means of the held-out residuals f - g must agree within their standard errors
(chi-square over the chains); where they do not, the se is at least the spread of the chains'
estimates and the row is marked unreliable.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import stats

from . import compat

__all__ = ["RowConvergence", "row_convergence", "divergence_note", "divergence_allowance", "energy_note",
           "unseen_values_note", "RHAT_MAX", "ESS_PER_CHAIN_MIN", "DIVERGENT_SHARE_MAX", "BFMI_MIN"]

RHAT_MAX = 1.01
ESS_PER_CHAIN_MIN = 100
_DISAGREE_LEVEL = 1e-3  # chance level of the chains' chi-square at which they are said to disagree
# above this share of divergent transitions every row is suspect; below it, the rows whose values
# at the divergent draws sit in one tail (mean rank |z| > _DIVERGENT_Z, at least 3 divergences)
DIVERGENT_SHARE_MAX = 0.005
_DIVERGENT_Z = 3.0
# the bias a sampler leaves where its trajectories diverge, per posterior sd and per divergent share
# of the draws: the mean moved by mass of about that share missed at about two sd.  Eight schools
# (non-centred), nutpie 4 x 5,000 at target_accept 0.8 (8-24 divergences), 6 runs: the CV estimates
# were outside 2 se on 15% of 108 rows (the plain means over 60 such runs were 1-2.5e-3 sd low);
# with this allowance, on none.  At target_accept 0.95 (no divergences) they covered without it.
_DIVERGENT_BIAS_PER_SHARE = 2.0
# E-BFMI below this in a chain: the threshold of ArviZ's ``bfmi`` and of Stan's diagnostics.  A Gaussian
# random walk with an unknown step size (bench/random_walk.py summary), 4 x 1,000 NUTS draws without a
# divergence: where the chains' smallest E-BFMI was 0.22-0.29 the CV means were within 2 se of the exact
# ones on 75% of rows, up to 5.6 se off; at 0.04-0.14, 51% (6.9 se); at 0.29-0.38, 98%.  At 0.22-0.29
# the plain means were within 2 mcse on 84-100% of rows: their wider se hides the part of the funnel the
# chains did not reach, which the CVs' does not.
BFMI_MIN = 0.3


@dataclass(frozen=True)
class RowConvergence:
    """Per row: ``rhat``, ``ess_bulk``, ``chain_spread_se`` (the se the spread of the chains'
    estimates allows; NaN where the chains agree) and ``notes`` (one string per row, "" if none)."""

    rhat: np.ndarray
    ess_bulk: np.ndarray
    chain_spread_se: np.ndarray
    notes: list

    @property
    def reliable(self):
        return np.array([not n for n in self.notes])


def _chain_spread_se(resid):
    """(rows,): sd of the chains' estimates / sqrt(chains) where the chains disagree, else NaN.

    ``resid`` (rows, chain, draw): held-out residuals f - g (a chain's estimate is the overall one
    plus its residual mean minus the overall residual mean)."""
    rows, n_chain, n_draw = resid.shape
    means = resid.mean(axis=2)
    sd = resid.std(axis=2, ddof=1)
    limit = stats.chi2.isf(_DISAGREE_LEVEL, n_chain - 1)
    # q = min over c of sum w (mean - c)^2 grows with every weight, so q at the largest weights
    # (ESS = draws) bounds it: only rows over the limit there need their chains' ESS
    ess = np.full((rows, n_chain), float(n_draw))
    suspect = _disagreement(means, sd, ess, n_draw) > limit
    if suspect.any():
        ess[suspect] = compat.ess_mean(resid[suspect].reshape(-1, 1, n_draw)).reshape(-1, n_chain)
    q = _disagreement(means, sd, ess, n_draw)
    out = np.full(rows, np.nan)
    disagree = suspect & np.isfinite(q) & (q > limit)
    out[disagree] = means[disagree].std(axis=1, ddof=1) / np.sqrt(n_chain)
    return out


def _disagreement(means, sd, ess, n_draw):
    """(rows,): the chains' chi-square, sum over chains of (mean - pooled mean)^2 / se^2, each chain's
    se = sd / sqrt(ESS) with the ESS capped at its draws."""
    se = sd / np.sqrt(np.clip(ess, 1.0, n_draw))
    with np.errstate(divide="ignore", invalid="ignore"):
        w = 1.0 / se**2
        pooled = np.sum(w * means, axis=1) / np.sum(w, axis=1)
        return np.sum(w * (means - pooled[:, None]) ** 2, axis=1)


def divergence_note(n_divergent, n_draws):
    """The note on divergent transitions (None without any), and whether it concerns every row."""
    if not n_divergent:
        return None, False
    share = n_divergent / n_draws
    if share > DIVERGENT_SHARE_MAX:
        return (f"{n_divergent} divergent transitions ({share:.1%} of the draws, above {DIVERGENT_SHARE_MAX:.1%}): "
                "the draws may be biased where the sampler could not go, and control variates cannot remove "
                "that bias; every se is marked unreliable. Reparameterise or raise target_accept."), True
    return (f"{n_divergent} divergent transition(s) ({share:.2%} of the draws): rows whose values at those draws "
            "sit in one tail are marked unreliable, the others are not, and the column bias_allowance holds "
            f"{_DIVERGENT_BIAS_PER_SHARE:g} x {share:.2%} of the row's sd for the bias they may leave in the mean "
            "and the sd, plain or CV: add it to either se for an error bound. Reparameterise or raise "
            "target_accept to be sure."), False


def energy_note(energy):
    """The note on chains whose E-BFMI (ArviZ's, of the sampler's ``energy`` (chain, draw)) is below
    ``BFMI_MIN``, else None: such a chain resamples its momentum too little to cross the energy levels
    of the posterior (a funnel's neck, heavy tails), so the draws can miss a region without any
    divergent transition, and control variates, which remove the noise that hides it, report a tiny
    se around a biased mean."""
    energy = np.asarray(energy, dtype=float)
    if energy.ndim != 2 or energy.shape[1] < 4 or not np.all(np.isfinite(energy)):
        return None
    value = compat.bfmi(energy)
    low = np.flatnonzero(np.isfinite(value) & (value < BFMI_MIN))
    if not low.size:
        return None
    return (f"E-BFMI {np.min(value[low]):.2f} < {BFMI_MIN} in {low.size} of {value.size} chains: Hamiltonian "
            "Monte Carlo explored the energy distribution poorly (a funnel, heavy tails), so the draws may miss "
            "a region of the posterior without any divergent transition, and control variates remove the "
            "noise that would otherwise hide that bias; every se is marked unreliable. Reparameterise (a "
            "non-centred parameterisation of a hierarchical scale) and check with longer chains.")


def divergence_allowance(sd, n_divergent, n_draws):
    """The bias divergent transitions may leave in a mean (or an sd) of posterior sd ``sd``, which no
    control variate removes: reported beside the se's (``summary``'s ``bias_allowance``), which on long runs
    are far below it."""
    if not n_divergent or not n_draws:
        return np.zeros_like(np.asarray(sd, dtype=float))
    return _DIVERGENT_BIAS_PER_SHARE * (n_divergent / n_draws) * np.asarray(sd, dtype=float)


def _divergence_z(values, divergent):
    """(rows,): z of the mean rank of the divergent draws among all draws of each row."""
    flat = values.reshape(values.shape[0], -1)
    mask = np.asarray(divergent, dtype=bool).reshape(-1)
    k, n = int(mask.sum()), mask.size
    ranks = stats.rankdata(flat, axis=1) / (n + 1)
    return (ranks[:, mask].mean(axis=1) - 0.5) / np.sqrt(1.0 / (12.0 * k))


def row_convergence(values, resid, divergent=None, rhat=None):
    """Convergence of each row of a table.

    Parameters
    ----------
    values : array (rows, chain, draw)
        The rows' integrand values.
    resid : array (rows, chain, draw)
        Their held-out residuals (f minus the fitted CV; f minus the mean for MC rows).
    divergent : array (chain, draw) of bool, optional
        Divergent transitions, when too few to concern every row (:func:`divergence_note`).
    rhat : array (rows,), optional
        The rows' R-hats where already computed (ArviZ's rank-normalised split R-hat of these values);
        nan entries are computed here.

    Returns
    -------
    RowConvergence
    """
    values = np.asarray(values, dtype=float)
    rows, n_chain, n_draw = values.shape
    if n_chain < 2 or n_draw < 4:
        nan = np.full(rows, np.nan)
        return RowConvergence(nan, nan, nan, [""] * rows)
    varying = np.ptp(values.reshape(rows, -1), axis=1) > 0
    known = np.full(rows, np.nan) if rhat is None else np.asarray(rhat, dtype=float)
    rhat, ess = np.where(varying, known, np.nan), np.full(rows, np.nan)
    todo = varying & np.isnan(known)
    if todo.any():
        rhat[todo] = compat.rhats(values[todo])
    if varying.any():
        ess[varying] = compat.ess_bulk(values[varying])
    spread = _chain_spread_se(np.asarray(resid, dtype=float))
    div_z = np.zeros(rows)
    if divergent is not None and np.sum(divergent) >= 3:
        div_z = _divergence_z(values, divergent)
    notes = []
    for i in range(rows):
        parts = []
        if abs(div_z[i]) > _DIVERGENT_Z:
            side = "high" if div_z[i] > 0 else "low"
            parts.append(f"the divergent transitions sit at its {side} values (mean rank z = {div_z[i]:+.1f})")
        if rhat[i] > RHAT_MAX:
            parts.append(f"R-hat {rhat[i]:.3f} > {RHAT_MAX}")
        if ess[i] < ESS_PER_CHAIN_MIN * n_chain:
            parts.append(f"bulk ESS {ess[i]:.0f} < {ESS_PER_CHAIN_MIN * n_chain} ({ESS_PER_CHAIN_MIN} per chain)")
        if np.isfinite(spread[i]):
            parts.append(f"the chains' CV estimates disagree beyond their se (se set to their spread, "
                         f"{spread[i]:.3g})")
        notes.append("; ".join(parts) + (": the draws may not represent the posterior here, which control "
                                         "variates cannot correct; the se is marked unreliable" if parts else ""))
    return RowConvergence(rhat, ess, spread, notes)


def _variable(label):
    return label.split("[", 1)[0]


def unseen_values_note(labels, values):
    """The rows of discrete quantities that took one value at every draw, and a note on them.

    A row constant in the draws is reported as that constant with mcse 0 (as ArviZ does).  That is
    exact for a quantity constant by construction (a fixed element of a Cholesky factor), but not for
    a discrete one (a latent state, a count) whose other values are merely rare: a value of
    probability p is missed by n draws with chance (1 - p)^n, so p up to about 3 / n goes unseen.  A
    variable whose every element is integer-valued at every draw, and some element varies, is taken
    as discrete; its constant elements are returned (and their se is to be marked unreliable).

    Parameters
    ----------
    labels : list of str
        Row labels (``name[i, j]``: the variable is the part before the bracket).
    values : array (rows, ...)
    """
    values = np.asarray(values, dtype=float).reshape(len(labels), -1)
    constant = np.ptp(values, axis=1) == 0
    integer = np.all(values == np.round(values), axis=1)
    by_var = {}
    for i, lab in enumerate(labels):
        by_var.setdefault(_variable(lab), []).append(i)
    unseen = [labels[i] for rows in by_var.values()
              if all(integer[rows]) and not all(constant[rows]) for i in rows if constant[i]]
    if not unseen:
        return [], ""
    shown = ", ".join(unseen[:5]) + (f" and {len(unseen) - 5} more" if len(unseen) > 5 else "")
    n = values.shape[1]
    return unseen, (f"{len(unseen)} rows of discrete quantities ({shown}) took one value at every draw: their "
                    f"mean is reported as that value with mcse 0, as ArviZ does, but another value of "
                    f"probability up to about {3 / n:.2g} (3 / draws) would not have been drawn; their se is "
                    "marked unreliable.")
