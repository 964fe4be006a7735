"""Mean and variance of log p(y|x) at every rung of a temperature ladder, with or without CVs.

The variance is estimated as the mean of (log p(y|x) - c)^2 minus (mean - c)^2, with c the
rung's plain average: centring keeps the second-moment integrand small and makes the variance
insensitive to the error of the mean.  Both are integrals under the rung's power posterior, whose
score is t grad log p(y|x) + grad log p(x).
"""

from __future__ import annotations

import dataclasses
import difflib
import inspect
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from ..core import cv_estimate, pipeline, vvcv_estimate
from ..core.standard_errors import mcse_mean
from .weighted_rung import weighted_moments

__all__ = ["METHODS", "RungArrays", "RungMoments", "rung_moments", "concat_moments", "check_rung_counts",
           "check_cv_options"]

# name -> what it is; "cti" is controlled thermodynamic integration (Oates, Papamarkou and
# Girolami 2016): zero-variance CVs at every rung, the polynomial order chosen on held-out draws as
# ZVCV's CTI chooses it by cross-validation (issue 15: a fixed order 2 had 2.4x the error of ZVCV's CTI
# on the van der Pol SMC arrays).
METHODS = {
    "mc": "plain averages",
    "cti": "zero-variance CVs per rung (order 1-3 chosen on held-out draws)",
    "cf": "control functionals per rung",
    "secf": "semi-exact control functionals per rung",
    "auto": "the best of MC, ZV and CF/SECF per rung (held-out)",
    "vvcv": "vector-valued CVs across groups of neighbouring rungs",
}
_CV_METHOD = {"cti": "zv", "cf": "cf", "secf": "secf", "auto": "auto"}


def _rung_cv_options():
    """The keyword arguments every rung's CV fit takes from the caller: those both estimators accept, less
    the ones the rungs set themselves."""
    def keywords(fn):
        return {name for name, p in inspect.signature(fn).parameters.items() if p.kind is p.KEYWORD_ONLY
                or (p.kind is p.POSITIONAL_OR_KEYWORD and p.default is not p.empty)}
    return sorted((keywords(cv_estimate) & keywords(vvcv_estimate)) - {"method", "B", "chain", "random_seed"})


def check_cv_options(options, caller):
    """Raise a ``TypeError`` naming the caller for a keyword argument that is neither the caller's own nor
    one the rungs' CV fits take (a misspelt ``draws=`` would otherwise reach ``cv_estimate``)."""
    accepted = _rung_cv_options()
    unknown = [name for name in options if name not in accepted]
    if not unknown:
        return
    own = [name for name, p in inspect.signature(caller).parameters.items() if p.kind is not p.VAR_KEYWORD]
    name = unknown[0]
    close = difflib.get_close_matches(name, own + accepted, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise TypeError(f"{caller.__name__}() got an unexpected keyword argument {name!r}{hint}. Its own arguments "
                    f"are {', '.join(own)}; besides them it passes these to every rung's control variates: "
                    f"{', '.join(a for a in accepted if a not in own)}.")


@dataclass
class RungMoments:
    """Per-rung estimates (arrays over rungs); ``mc_*`` are the plain averages of the same draws."""

    mean: np.ndarray
    var: np.ndarray
    mean_se: np.ndarray
    var_se: np.ndarray
    mc_mean: np.ndarray
    mc_var: np.ndarray
    mc_mean_se: np.ndarray
    mc_var_se: np.ndarray
    method: np.ndarray
    reliable: np.ndarray | None = None  # per rung: False where a se may be too small
    notes: list = field(default_factory=list)
    # signed jackknife bias estimates of the CV estimates (``CVResult.jackknife_bias``; 0 for MC and
    # weighted rungs), part of mean_se / var_se, combined signed by ``quadrature.integrate``
    mean_bias: np.ndarray | None = None
    var_bias: np.ndarray | None = None
    # per rung, the MCSE of the fitted control's values (f minus the held-out residual): the se of
    # mean - mc_mean, the shift the CV made (nan for rungs reported as MC or weighted)
    shift_se: np.ndarray | None = None


def _or_default(a, n, name):
    if a is not None:
        return a
    return np.full(n, np.nan) if name == "shift_se" else np.zeros(n)


def concat_moments(parts, order=None):
    """One :class:`RungMoments` from several (rungs in the order given, then permuted by ``order``)."""
    merged = {}
    for f in dataclasses.fields(RungMoments):
        if f.name != "notes":
            arr = np.concatenate([_or_default(getattr(p, f.name), p.mean.size, f.name) for p in parts])
            merged[f.name] = arr if order is None else arr[order]
    return RungMoments(**merged, notes=[n for p in parts for n in p.notes])


def check_rung_counts(temperatures, loglik, samples, grad_loglik, grad_logprior, chain):
    """One array per rung in every sequence (``chain`` may be None)."""
    w = len(temperatures)
    for name, seq in (("loglik", loglik), ("samples", samples), ("grad_loglik", grad_loglik),
                      ("grad_logprior", grad_logprior)):
        if len(seq) != w:
            raise ValueError(f"`{name}` holds {len(seq)} arrays for {w} temperatures; give one per rung.")
    if chain is not None and len(chain) != w:
        raise ValueError(f"`chain` holds {len(chain)} arrays for {w} temperatures; give one per rung or None.")


class RungArrays(NamedTuple):
    """One rung's arrays: log p(y|x) (m,), the draws (m, d) on the unconstrained space, the gradients of
    log p(y|x) and of log p(x) (Jacobian included) at them (m, d), and their chain labels (m,) or None."""

    loglik: np.ndarray
    samples: np.ndarray
    grad_loglik: np.ndarray
    grad_logprior: np.ndarray
    chain: np.ndarray | None


def _check_rungs(temperatures, loglik, samples, grad_loglik, grad_logprior, chain):
    check_rung_counts(temperatures, loglik, samples, grad_loglik, grad_logprior, chain)
    w = len(temperatures)
    out = []
    for i in range(w):
        ll = np.asarray(loglik[i], dtype=float)
        X = np.asarray(samples[i], dtype=float)
        X = X[:, None] if X.ndim == 1 else X
        gl = np.asarray(grad_loglik[i], dtype=float).reshape(X.shape)
        gp = np.asarray(grad_logprior[i], dtype=float).reshape(X.shape)
        if ll.ndim != 1 or ll.size != X.shape[0]:
            raise ValueError(f"rung {i}: loglik must be 1-d with one value per draw ({X.shape[0]}); got {ll.shape}.")
        for name, arr in (("loglik", ll), ("samples", X), ("grad_loglik", gl), ("grad_logprior", gp)):
            if not np.all(np.isfinite(arr)):
                bad = np.flatnonzero(~np.isfinite(arr.reshape(arr.shape[0], -1)).all(axis=1))
                raise ValueError(
                    f"rung {i} (t = {temperatures[i]:g}): `{name}` is NaN or inf at draw(s) {bad[:5].tolist()}; "
                    "remove divergent draws or fix the model; nothing is dropped silently."
                )
        c = None if chain is None else np.asarray(chain[i])
        out.append(RungArrays(ll, X, gl, gp, c))
    return out


def _mc(ll, c):
    center = ll.mean()
    f2 = (ll - center) ** 2
    return ll.mean(), f2.mean(), mcse_mean(ll, c), mcse_mean(f2, c)


@dataclass
class _MomentTable:
    """Per rung, filled in as the fits come: E[l] and E[(l - center)^2] (``est``), their se and
    jackknife bias (pairs of arrays (w,)), the method used, whether the se is reliable, and the notes."""

    est: tuple
    se: tuple
    bias: tuple
    shift_se: np.ndarray
    used: np.ndarray
    reliable: np.ndarray
    notes: list


class _RungProblem:
    """The per-rung draws, scores t * grad log p(y|x) + grad log p(x) and the two integrands
    (l and (l - center)^2), and the fits that fill a table of rung moments."""

    def __init__(self, t, rungs, centers, random_seed, options, first_rung=0):
        self.t, self.rungs, self.centers, self.seed, self.options = t, rungs, centers, random_seed, options
        self.first = first_rung  # index of rung 0 here in the whole ladder, for the notes

    def values(self, i):
        ll = self.rungs[i].loglik
        return ll, (ll - self.centers[i]) ** 2

    def score(self, i):
        _, _, gl, gp, _ = self.rungs[i]
        return self.t[i] * gl + gp

    def fit_group(self, idx, B, with_chains, table):
        """Both moments of the rungs ``idx`` jointly (a vv-CV; a kernel CV for a lone rung); each rung on
        its own where the joint design cannot be fitted (rank deficient for these draws)."""
        if len(idx) == 1:
            return self._fit_jointly(idx, B, with_chains, table)
        try:
            return self._fit_jointly(idx, B, with_chains, table)
        except ValueError as err:
            table.notes.append(f"rungs {idx[0] + self.first}-{idx[-1] + self.first}: the joint vv-CV could not be "
                               f"fitted ({err}); each rung was fitted on its own.")
            for i in idx:
                self._fit_jointly([i], B, with_chains, table)

    def _fit_jointly(self, idx, B, with_chains, table):
        Xs = [self.rungs[i].samples for i in idx]
        Ss = [self.score(i) for i in idx]
        chains = [self.rungs[i].chain for i in idx] if with_chains else None
        for k in range(2):
            fs = [self.values(i)[k] for i in idx]
            if len(idx) == 1:
                r = cv_estimate(fs[0], Xs[0], Ss[0], method="auto", chain=self.rungs[idx[0]].chain,
                                random_seed=self.seed, **self.options)
            else:
                r = vvcv_estimate(fs, Xs, Ss, B=B, chain=chains, random_seed=self.seed, **self.options)
            for j, i in enumerate(idx):
                table.est[k][i] = float(np.ravel(r.estimate)[j])
                table.se[k][i] = float(np.ravel(r.se)[j])
                table.bias[k][i] = float(np.ravel(r.jackknife_bias)[j])
                table.reliable[i] &= bool(np.ravel(r.se_reliable)[j])
                if k == 0:
                    table.used[i] = str(np.ravel(r.method)[j])
                    table.shift_se[i] = _shift_se(fs[0], r, j, self.rungs[i].chain)
            table.notes += [f"rungs {idx[0] + self.first}-{idx[-1] + self.first}: {n}" for n in r.notes]

    def fit_rung(self, i, method, table):
        """Both moments of rung ``i``, each by its own ``cv_estimate``: kernel hyperparameters tuned
        for both at once fitted the mean (most of the log evidence) worse (van der Pol, 20 draws
        per rung: CF error +0.014 nats against +0.003).  The second moment takes the method chosen
        for the mean: chosen by its own se, a skewed (l - center)^2 took its low estimates (ZV on
        30 exact draws: bias -1645 against -921 for ZV-2 throughout, variance 5866)."""
        used = method
        for k, f in enumerate(self.values(i)):
            r = cv_estimate(f, self.rungs[i].samples, self.score(i), method=used, chain=self.rungs[i].chain,
                            random_seed=self.seed, **self.options)
            table.est[k][i], table.se[k][i], table.bias[k][i] = r.estimate, r.se, r.jackknife_bias
            table.reliable[i] &= bool(r.se_reliable)
            table.notes += [f"rung {i + self.first}: {n}" for n in r.notes]
            if k == 0:
                table.used[i] = used = str(r.method).removesuffix("-nystrom")
                table.shift_se[i] = _shift_se(f, r, 0, self.rungs[i].chain)


def _shift_se(f, res, j, chain):
    """The se of integrand ``j``'s CV estimate minus its plain mean in ``res`` (a CVResult): the MCSE
    of the fitted control f - (held-out residual), whose mean the CV subtracts; nan when MC is reported."""
    if str(np.ravel(res.method)[j]) == "mc":
        return np.nan
    control = np.asarray(f, dtype=float) - np.asarray(res.heldout_residuals[j], dtype=float)
    return float(mcse_mean(control, chain))


def _weighted_rungs(t, rungs, weights, method, table, mc, progress):
    """Fill the table's rows of the rungs with importance weights (weighted average or weighted ZV)."""
    if weights is None:
        return []
    if len(weights) != t.size:
        raise ValueError(f"`weights` holds {len(weights)} entries for {t.size} temperatures; give one array (or "
                         "None for an unweighted rung) per rung.")
    done = [i for i, w in enumerate(weights) if w is not None]
    if done and method not in ("mc", "cti"):
        raise ValueError(f"method={method!r} with importance weights: weighted draws are estimated with "
                         "method='cti' (weighted ZV-CVs, as ZVCV's CTI) or 'mc'; kernel CVs of weighted "
                         "draws are not built. Use one of those, or resample the particles first.")
    for i in done:
        ll, X, gl, gp, c = rungs[i]
        out = weighted_moments(ll, X, t[i] * gl + gp, weights[i], chain=c, zv=method == "cti")
        mc[i] = [out["mc_est"][0], out["mc_est"][1], out["mc_se"][0], out["mc_se"][1]]
        for k in range(2):
            table.est[k][i], table.se[k][i] = out["est"][k], out["se"][k]
        table.used[i] = "weighted " + out["method"]
        if out["notes"]:
            table.reliable[i] = False
            table.notes += [f"rung {i} (t = {t[i]:.4g}): {n}" for n in out["notes"]]
        progress(1)
    return done


def rung_moments(temperatures, loglik, samples, grad_loglik, grad_logprior, *, chain=None, method="vvcv",
                 group_size=4, B="learn", progress=None, random_seed=0, weights=None, first_rung=0, **options):
    """Estimate E_t[log p(y|x)] and Var_t[log p(y|x)] at every rung.

    Parameters
    ----------
    temperatures : array (w,)
    loglik, samples, grad_loglik, grad_logprior : sequences of w arrays
        Per rung: log p(y|x) (m_i,), the draws on the unconstrained space (m_i, d), and the
        gradients of the log-likelihood and of the log-prior (Jacobian included) at them.
    chain : sequence of w arrays, optional
        Chain labels of MCMC draws, for ESS-based standard errors.
    method : {"vvcv", "cti", "cf", "secf", "auto", "mc"}
    group_size : int
        vv-CVs are fitted jointly over this many consecutive rungs (the paper uses 4).
    B : passed to :func:`vvcv_estimate`.
    progress : callable, optional
        Called with the number of rungs finished after each fit.
    weights : sequence of w arrays (m_i,) or None, optional
        Importance weights of each rung's draws (SMC particles before resampling; None for an
        unweighted rung).  Weighted rungs take ``method="mc"`` (self-normalised average) or
        ``"cti"`` (weighted ZV-CVs, see :mod:`pymc_cv.evidence.weighted_rung`); their scores are
        not Stein-checked, since the draws do not follow the rung's target.
    first_rung : int
        Where these rungs start in a larger ladder (the notes name rungs by that index); the
        numbers do not depend on it, so groups of a ladder can be fitted apart.
    **options : passed to :func:`cv_estimate` or :func:`vvcv_estimate`.

    Returns
    -------
    RungMoments

    Examples
    --------
    x ~ N(0, 1), y = 0 ~ N(x, 1): log p(y|x) is quadratic in x, so ZV-2 (``"cti"``) is exact.

    >>> import numpy as np
    >>> from pymc_cv.evidence import rung_moments
    >>> rng = np.random.default_rng(0)
    >>> t = np.array([0.0, 0.5, 1.0])
    >>> xs = [rng.normal(0, (1 + ti) ** -0.5, size=(60, 1)) for ti in t]
    >>> ll = [-0.5 * np.log(2 * np.pi) - 0.5 * x[:, 0] ** 2 for x in xs]
    >>> mom = rung_moments(t, ll, xs, [-x for x in xs], [-x for x in xs], method="cti")
    >>> np.allclose(mom.mean, -0.5 * np.log(2 * np.pi) - 0.5 / (1 + t))
    True
    """
    if method not in METHODS:
        raise ValueError(f"method={method!r}; use one of {sorted(METHODS)}.")
    if int(group_size) != group_size or group_size < 1:
        raise ValueError(f"group_size={group_size!r}; use a positive integer (e.g. 4).")
    t = np.asarray(temperatures, dtype=float)
    rungs = _check_rungs(t, loglik, samples, grad_loglik, grad_logprior, chain)
    w = t.size
    weighted = set() if weights is None else {i for i, wi in enumerate(weights) if wi is not None}
    reliable, notes = _check_inputs(t, rungs, weighted, first_rung, options)
    mc = np.array([_mc(ll, c) for ll, _, _, _, c in rungs])
    table = _MomentTable((mc[:, 0].copy(), mc[:, 1].copy()), (mc[:, 2].copy(), mc[:, 3].copy()),
                         (np.zeros(w), np.zeros(w)), np.full(w, np.nan), np.array(["mc"] * w, dtype=object),
                         reliable, notes)
    progress = progress or (lambda k: None)
    _weighted_rungs(t, rungs, weights, method, table, mc, progress)
    centers = mc[:, 0]
    problem = _RungProblem(t, rungs, centers, random_seed, options, first_rung)
    plain = [i for i in range(w) if i not in weighted]
    if method == "mc":
        progress(len(plain))
    elif method == "vvcv":
        for start in range(0, w, int(group_size)):
            idx = list(range(start, min(start + int(group_size), w)))
            problem.fit_group(idx, B, chain is not None, table)
            progress(len(idx))
    else:
        for i in plain:
            problem.fit_rung(i, _CV_METHOD[method], table)
            progress(1)
    (mean, second), (mean_se, var_se), used = table.est, table.se, table.used
    var = second - (mean - centers) ** 2
    mean_bias, second_bias = table.bias
    return RungMoments(
        mean=mean, var=var, mean_se=mean_se, var_se=var_se, mc_mean=mc[:, 0], mc_var=mc[:, 1],
        mc_mean_se=mc[:, 2], mc_var_se=mc[:, 3], method=used, reliable=reliable, notes=notes,
        # var = second - (mean - center)^2 to first order
        mean_bias=mean_bias, var_bias=second_bias - 2.0 * (mean - centers) * mean_bias, shift_se=table.shift_se,
    )


def _check_inputs(t, rungs, weighted, first_rung, options):
    """(reliable per rung, notes) from the checks made once for the ladder, which the per-rung fits
    then skip: the Stein check of every rung's scores and the tails of the end rungs."""
    reliable = np.ones(t.size, dtype=bool)
    targets = [pipeline.Target(X, t[i] * gl + gp, c, rows=i, label=f"rung {i + first_rung} (t = {t[i]:.4g})")
               for i, (_, X, gl, gp, c) in enumerate(rungs) if i not in weighted]
    findings = []
    if options.pop("check_scores", True):
        # swapped or mis-signed gradients, or draws from another ladder, fail this at some rung; one
        # level for the ladder: per rung, 31 rungs of 100 exact draws flagged 4 runs of 10
        findings += pipeline.check_scores(targets, family=t.size, where=" at {label}")
    options["check_scores"] = False
    if options.pop("check_tails", True):
        # a power posterior's tails come from the prior (t = 0) or the posterior (t = 1): those two
        # rungs are checked once for the ladder, for every rung; per rung, 62 checks of 100-draw
        # Gaussian rungs flagged nearly every run of bench/ti_coverage.py by chance
        ends = [tg._replace(rows=slice(None)) for tg in targets if t[tg.rows] in (0.0, 1.0)]
        findings += pipeline.check_tails(ends)
    options["check_tails"] = False
    for f in findings:
        reliable[f.rows] = False
    return reliable, [f.note if f.cv_only else f.note + _RUNG_STEIN for f in findings]


# at a rung of thermodynamic_integration the scores are the model's own, so a failed Stein check
# points at the draws: on the README model a flagged 2 x 100-draw rung's plain average was 4.8 se
# from the exact value (its chains had missed the small-sigma tail) while its CV estimate was right
_RUNG_STEIN = (" Where the scores are the model's own (thermodynamic_integration, ti_from_draws, ti_from_population), "
               "the draws are at fault: the rung's chains missed part of its power posterior (too few draws to reach "
               "a tail, or not mixed). More draws or tuning per rung, or sampler='population', help.")
