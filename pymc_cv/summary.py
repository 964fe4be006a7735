"""``summary``: posterior expectations with and without control variates, laid out like ``az.summary``."""

from __future__ import annotations

import dataclasses
import inspect
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from . import compat
from .cluster import check_client, map_units
from .convergence import divergence_allowance, divergence_note, energy_note, row_convergence, unseen_values_note
from .core import cv_estimate, vvcv_estimate
from .core.local_zv import LocalCoordinates, own_coordinates, shared_coordinates
from .core.quantiles import QuantilePlan, cv_quantile, plain_quantile, smoothed_steps
from .core.score_check import CheckOutcome, ScoreMismatchError, apply_stein_check
from .core.spread import centred_squares, cv_sd, plain_sd
from .core.standard_errors import mcse_mean
from .core.uncertainty import heavy_tail_note, moment_tail_notes
from .idata_groups import (
    PAIRING,
    SCORE,
    UNCHECKED,
    UNCONSTRAINED,
    coordinate_labels,
    has_stored_scores,
    stacked_draws_and_scores,
    with_stored_scores,
)
from .metacv import MetaCV
from .progress import progress_bar
from .pymc.bambi import is_bambi_model, pymc_model
from .pymc.population import POPULATION, population_draws
from .pymc.scores import compute_scores

# pandas and PyMC load inside the functions that use them: `import pymc_cv` stays cheap without them.

__all__ = ["summary"]

_INTERVAL = ["lb", "ub", "cv_lb", "cv_ub"]
_INTERVAL_MCSE = ["mcse_lb", "mcse_ub", "cv_mcse_lb", "cv_mcse_ub"]
_STATS = ["mean", "cv_mean", "sd", "cv_sd"] + _INTERVAL
_DIAGNOSTICS = ["mcse_mean", "cv_mcse", "bias_allowance", "variance_reduction", "cv_ess", "mcse_sd", "cv_mcse_sd",
                "variance_reduction_sd"] + _INTERVAL_MCSE + ["ess_bulk", "r_hat", "method", "method_sd", "se_reliable"]
# the columns of each ``kind``, as ``az.summary``'s: "all" pairs each CV column with its plain one, CV first
_KINDS = {
    "all": ["cv_mean", "cv_mcse", "mean", "mcse_mean", "bias_allowance", "variance_reduction", "cv_ess", "cv_sd",
            "cv_mcse_sd", "sd",
            "mcse_sd", "variance_reduction_sd"] + _INTERVAL + _INTERVAL_MCSE
           + ["ess_bulk", "r_hat", "method", "method_sd", "se_reliable"],
    "stats": _STATS,
    "diagnostics": _DIAGNOSTICS,
}


# cv_estimate's options that summary sets itself, per fit
_SET_BY_SUMMARY = {"tune_columns", "check_mixing", "residual_khat"}


# cv_estimate's default kernel_max_dim: above it the rows also get ZV-CVs on their own coordinates
_KERNEL_MAX_DIM_DEFAULT = inspect.signature(cv_estimate).parameters["kernel_max_dim"].default


def _split_options(options):
    cv_keys = set(inspect.signature(cv_estimate).parameters)
    vv_keys = set(inspect.signature(vvcv_estimate).parameters)
    own = _SET_BY_SUMMARY & set(options)
    if own:
        raise TypeError(f"summary() sets {sorted(own)} itself (the kernel is tuned on the rows, their chains are "
                        "checked for mixing, the table has no k-hat column); drop them, or call cv_estimate for "
                        "these options.")
    unknown = set(options) - cv_keys - vv_keys
    if unknown:
        raise TypeError(f"summary() got unknown options {sorted(unknown)}; see cv_estimate / vvcv_estimate.")
    return ({k: v for k, v in options.items() if k in cv_keys},
            {k: v for k, v in options.items() if k in vv_keys})


def _check_draws_and_scores(X, S):
    bad = ~(np.isfinite(S).all(axis=2) & np.isfinite(X).all(axis=2))
    if bad.any():
        chains, draws = np.nonzero(bad)
        where = ", ".join(f"chain {c} draw {d}" for c, d in list(zip(chains, draws))[:5])
        where += ", ..." if bad.sum() > 5 else ""
        raise ValueError(
            f"The unconstrained draws or their scores are NaN or inf at {bad.sum()} draw(s) ({where}); "
            "these are usually divergent transitions. They are not averaged in or dropped silently: "
            "fix the model (e.g. reparameterise, raise target_accept) or remove those draws "
            "from every group yourself before calling summary."
        )


def _variable_rows(idata, var_names):
    # value variables of transformed RVs (sigma_log__) that include_transformed=True puts in the
    # posterior; an untransformed RV has the same name in both groups and is a row
    internal = ({v for v in compat.group(idata, UNCONSTRAINED).data_vars if v.endswith("__")}
                if UNCONSTRAINED in compat.group_names(idata) else set())
    return _dataset_rows(compat.group(idata, "posterior"), var_names, internal)


def _dataset_rows(post, var_names, internal=frozenset()):
    """[(label, values (chain, draw))] for every scalar element of ``var_names`` in ``post``."""
    available = [v for v in post.data_vars if v not in internal]
    var_names = _selected_names(var_names, available, post)
    labeller = compat.labeller()
    rows = []
    for name, sel, isel, values in compat.var_iter(post, var_names):
        label = labeller.make_label_flat(name, sel, isel)
        rows.append((label, _real(label, values)))
    return rows


def _selected_names(var_names, available, post):
    """``var_names`` as az.summary reads it: None for all, names, or all but the "~name" ones."""
    if var_names is None:
        return available
    names = [var_names] if isinstance(var_names, str) else list(var_names)
    if not names:
        raise ValueError("var_names=[] selects nothing; pass None for every variable, or name some.")
    negated = [v[1:] for v in names if v.startswith("~")]
    if negated and len(negated) != len(names):
        raise ValueError(f"var_names={names} mixes names and '~name' exclusions; use one kind, as az.summary does.")
    wanted = negated or names
    missing = [v for v in wanted if v not in post.data_vars]
    if missing:
        raise ValueError(f"var_names {missing} are not in the posterior; it holds {available}.")
    return [v for v in available if v not in negated] if negated else names


def _real(label, values):
    if np.iscomplexobj(values):
        raise ValueError(f"'{label}' is complex; summarise its real and imaginary parts as two integrands "
                         "(np.real, np.imag).")
    return np.asarray(values, dtype=float)


def _integrand_rows(idata, integrands, n_chain, n_draw):
    """Scalar rows and task task_groups from callables of the constrained posterior variables."""
    post = compat.group(idata, "posterior")
    scalar, task_groups = [], []
    for name, fn in integrands.items():
        if not callable(fn):
            raise ValueError(f"integrands['{name}'] must be a callable taking the posterior variables.")
        out = _real(f"integrands['{name}']", fn(post))
        if out.shape[:2] != (n_chain, n_draw):
            raise ValueError(
                f"integrands['{name}'] returned shape {out.shape}; it must return (chain, draw, ...) "
                f"= ({n_chain}, {n_draw}, ...), one value per draw (extra dims are tasks)."
            )
        if out.ndim == 2:
            scalar.append((name, out))
        else:
            flat = out.reshape(n_chain, n_draw, -1)
            idx = list(np.ndindex(*out.shape[2:]))
            labels = [f"{name}[{', '.join(map(str, i))}]" for i in idx]
            task_groups.append((labels, [flat[:, :, k] for k in range(flat.shape[2])]))
    return scalar, task_groups


class _Posterior(NamedTuple):
    """Everything ``summary`` uses of the InferenceData, read once; the fits work on these arrays.

    ``draws`` and ``scores`` (chain, draw, d) on the unconstrained space; ``parameter_names`` one
    label per column of them (for the Stein check's messages); ``rows`` [(label, values (chain,
    draw))] and ``task_groups`` [(labels, [values])] (an integrand with several tasks): the table's
    quantities; ``diverging`` (chain, draw) or None without ``sample_stats.diverging``; ``energy``
    (chain, draw), the sampler's, or None without one of the draws' shape."""

    draws: np.ndarray
    scores: np.ndarray
    parameter_names: list
    rows: list
    task_groups: list
    diverging: np.ndarray | None
    energy: np.ndarray | None


def _sampler_stat(stats, name, shape, dtype):
    """``sample_stats[name]`` as an array (chain, draw), or None when absent or not of ``shape``."""
    if name not in stats:
        return None
    values = np.asarray(stats[name].transpose("chain", "draw").values, dtype=dtype)
    return values if values.shape == shape else None


def _read_posterior(idata, var_names, integrands):
    """The :class:`_Posterior` of ``idata`` (which holds the scores); errors name what is wrong."""
    X, S = stacked_draws_and_scores(idata)
    _check_draws_and_scores(X, S)
    rows, task_groups = _collect_rows(idata, var_names, integrands, X.shape[0], X.shape[1])
    stats = compat.group(idata, "sample_stats") if "sample_stats" in compat.group_names(idata) else {}
    diverging = (np.asarray(stats["diverging"].transpose("chain", "draw").values, dtype=bool)
                 if "diverging" in stats else None)
    energy = _sampler_stat(stats, "energy", X.shape[:2], float)
    return _Posterior(X, S, coordinate_labels(idata), rows, task_groups, diverging, energy)


class _ResultsByRow(dict):
    """Row label -> (CVResult, index), kept in ``table.attrs``; pandas deep-copies ``attrs`` on
    every operation, and these results are read-only, so copies share them."""

    def __deepcopy__(self, memo):
        return self


class _Row(NamedTuple):
    """One row of the table: the plain and CV mean, sd and interval bounds with their mcse, and the
    convergence diagnostics; ``notes`` says why the sd or a bound fell back to the plain one (not a column)."""

    label: str
    mean: float
    mcse_mean: float
    cv_mean: float
    cv_mcse: float
    variance_reduction: float
    method: str
    se_reliable: bool
    sd: float
    mcse_sd: float
    cv_sd: float
    cv_mcse_sd: float
    variance_reduction_sd: float
    method_sd: str
    lb: float
    ub: float
    mcse_lb: float
    mcse_ub: float
    cv_lb: float
    cv_ub: float
    cv_mcse_lb: float
    cv_mcse_ub: float
    ess_bulk: float = np.nan
    r_hat: float = np.nan
    notes: tuple = ()
    method_bounds: tuple = ("mc", "mc")
    bias_allowance: float = 0.0


class _MoreFits(NamedTuple):
    """Where a row's sd and bounds come from: the (CVResult, index) of the fit of ``(f - centre)^2``,
    the :class:`QuantilePlan` of the smoothed steps, their fits (one per bound) and the row's
    column in the plan, and the mcse of a residual series on the row's draws."""

    sd: tuple
    centre: float
    plan: QuantilePlan | None = None
    steps: list | None = None
    column: int = 0
    residual_se: object = None


class _PlainErrors(NamedTuple):
    """ArviZ's mcse of a row's mean, sd and the two bounds of its equal-tailed interval, and those two
    bounds (the plain quantiles; None: not computed)."""

    mean: float
    sd: float
    bounds: tuple
    quantiles: tuple | None = None


def _plain_errors(vals, probs):
    """A :class:`_PlainErrors` per array of ``vals`` ((chain, draw) or (draw,)), ArviZ's rows
    spread over threads: nan with fewer than 4 draws per chain; for a constant row, nan for the
    sd (as ArviZ) and 0 for the bounds."""
    draws = [np.atleast_2d(v) for v in vals]
    todo = [i for i, d in enumerate(draws) if d.shape[1] >= 4 and np.ptp(d) > 0]
    computed = dict(zip(todo, compat.mcse_rows([draws[i] for i in todo], probs)))
    quantiles = {}
    if todo and len({draws[i].size for i in todo}) == 1:
        # the rows' quantiles in one call, as np.quantile takes them one row at a time (J = 10,000: 8 s)
        q = np.quantile(np.stack([draws[i].reshape(-1) for i in todo]), probs, axis=1)
        quantiles = {i: tuple(float(v) for v in q[:, a]) for a, i in enumerate(todo)}
    out = []
    for i, d in enumerate(draws):
        if i in computed:
            m, sd, *bounds = computed[i]
            out.append(_PlainErrors(float(m), float(sd), tuple(float(b) for b in bounds), quantiles.get(i)))
            continue
        enough, varying = d.shape[1] >= 4, np.ptp(d) > 0
        out.append(_PlainErrors(compat.mcse_mean(d) if enough else np.nan, np.nan,
                                tuple(0.0 if not varying else np.nan for _ in probs)))
    return out


def _record(label, values, res, t=0, results=None, more=None, ci_prob=0.94, errors=None):
    """One table row: the plain mean and ArviZ mcse of ``values`` (chain, draw) or (draw,), entry
    ``t`` of a CV result (also filed in ``results``), the sd and the equal-tailed ``ci_prob``
    interval: by CVs from ``more`` (:class:`_MoreFits`), the plain ones without it.  ``errors``:
    the row's :class:`_PlainErrors` where they were computed with other rows'."""
    if results is not None:
        results[label] = (res, t)

    def at(a):
        # entry t alone: converting the whole array per row cost O(rows^2) (J = 10,000: 10 s)
        return a[t] if isinstance(a, (list, tuple)) else np.ravel(a)[t]

    draws = np.atleast_2d(values)
    varying = np.ptp(draws) > 0
    probs = ((1 - ci_prob) / 2, (1 + ci_prob) / 2)
    if errors is None:
        errors = _plain_errors([values], probs)[0]
    mcse_sd, mcse_q = errors.sd, list(errors.bounds)
    plain_q = (errors.quantiles if errors.quantiles is not None else
               tuple(float(np.quantile(values, p)) for p in probs))
    bounds = [plain_quantile(values, p, m, q) for p, m, q in zip(probs, mcse_q, plain_q)]
    if more is None or not varying:
        spread = plain_sd(values, mcse_sd)
    else:
        spread = cv_sd(values, mcse_sd, (res, t), more.sd, more.centre)
        if more.steps is not None:
            bounds = [cv_quantile(values, more.plan, i, more.column, fit, m, more.residual_se)
                      for i, (fit, m) in enumerate(zip(more.steps, mcse_q))]
    lo, hi = bounds
    tails = [f"{moment}: {note}" for moment, note in zip(("mean", "sd"), moment_tail_notes(values)) if note]
    return _Row(label, float(np.mean(values)), errors.mean, float(at(res.estimate)), float(at(res.se)),
                float(at(res.variance_reduction)), str(at(res.method)), bool(at(res.se_reliable)) and not tails,
                float(np.std(values, ddof=1)), float(mcse_sd), spread.sd, spread.se, spread.variance_reduction,
                spread.method, plain_q[0], plain_q[1],
                float(mcse_q[0]), float(mcse_q[1]), lo.value, hi.value, lo.se, hi.se,
                notes=((f"sd: {spread.note}",) if spread.note else ()) + tuple(tails),
                method_bounds=(lo.method, hi.method))


@compat.diagnosing_once
def summary(data, var_names=None, *, model=None, integrands=None, method="auto", tasks=None, B="learn",
            metacv=None, kind="all", ci_prob=None, ci_kind="eti", cv_interval=False, round_to="auto",
            check_scores=True, return_results=False, progressbar=True, compile_kwargs=None, client=None, **options):
    """Posterior means with and without Stein control variates, one row per scalar quantity.

    Parameters
    ----------
    data : arviz.InferenceData
        Posterior draws; with the ``unconstrained_posterior`` and ``score`` groups (from
        :func:`compute_scores` or a Stan converter), or ``model`` to compute them.  Draws from
        nutpie with ``store_unconstrained=True, store_gradient=True`` carry the sampler's own
        scores, which are used as they are (no ``model`` needed, nothing compiled).
    var_names : str or list of str, optional
        Posterior variables (free, transformed or deterministic) to summarise; every element
        of a vector/matrix variable is a row.  Default: all of them, unless ``integrands``.
    model : pymc.Model or bambi.Model, optional
        Used to compute the scores when ``data`` does not have them (keyword only, as the
        second positional argument is ``var_names``, like ``az.summary``); see
        :func:`compute_scores`.  A warning when ``data`` already holds scores (they are used).
        Default: the sampler's stored gradients when it kept them, else the model of the enclosing
        ``with model:`` block.
    integrands : dict of name -> callable, optional
        Each callable takes the posterior (an xarray Dataset: ``np.asarray(post[name])`` is
        ``(chain, draw, *shape)``) and returns ``(chain, draw, *out)``.  Extra ``out`` dims are tasks
        (e.g. a prediction at 10 time points).
    method : {"auto", "mc", "zv1", "zv2", "zv2diag", "zv", "cf", "secf", "vvcv", "metacv"}
        Estimator (see :func:`cv_estimate`).  Every row and every task shares the draws and
        scores, so all are fitted together in one :func:`cv_estimate` call: one least-squares
        fit for the ZV-CVs, one tuned and factorised kernel matrix for the kernel CVs, the best
        per row.  For tasks sharing their draws this is the vv-CV with task matrix B and kernel
        B (k0 + nugget) with any B (cokriging on shared inputs reduces to kriging per task).
        ``"vvcv"``: each task group by :func:`vvcv_estimate` (learned B).  ``"metacv"``: task groups
        (many tasks, e.g. predictions at hundreds of inputs) get a :class:`MetaCV`, meta-trained
        on half of the tasks and applied to the other half, and the other way round, so no task
        is estimated by a network that was meta-trained on it; scalar rows use ``"auto"``.
    tasks : None, "chain" or "temperature"
        ``"chain"``: every chain is its own task (e.g. chains that target different
        distributions, scores taken per chain); one row per quantity and chain.
        ``"temperature"``: for a :func:`sample_population` run, every quantity at every
        temperature of the ladder, the temperatures estimated jointly by a vv-CV (each with the
        scores of its own power posterior; ``model`` needed); one row per quantity and temperature.
    B : {"learn", "identity"} or array
        Task matrix of the vv-CVs.
    metacv : dict, optional
        Settings of the :class:`MetaCV` for ``method="metacv"`` (``hidden``, ``meta_iterations``,
        ``support_size``, ...).
    kind : {"all", "stats", "diagnostics"}
        Columns, as ``az.summary``'s ``kind``: "stats" the plain and CV means, sds and interval
        bounds; "diagnostics" their mcse, the variance reductions, ``cv_ess``, ``ess_bulk``,
        ``r_hat``, the methods and ``se_reliable``; "all" both.
    ci_prob : float, optional
        Probability of the equal-tailed interval; default the installed ArviZ's (``stats.ci_prob``:
        0.94 on ArviZ 0.x, 0.89 on 1.x).
    ci_kind : {"eti"}
        Only the equal-tailed interval: CVs estimate quantiles (an HDI is an error that says so).
    cv_interval : bool
        Also estimate the interval bounds by CVs (columns ``cv_eti..``; see below).  Off by default:
        it is one more fit as costly as that of the means, and it pays little (``|CV error| / |plain
        error|`` of the 3% and 97% bounds, median over rows: 0.3 on a Beta posterior, 0.5 on a
        4-parameter logistic regression, 0.6-1.0 on eight schools, an 11-parameter logistic regression
        and an 89-parameter hierarchical model, 0.75 over 18 posteriordb posteriors of 3-26 parameters,
        0.33-1.0 by posterior).
    round_to : {"auto", "none"} or int
        "auto" (the default; None the same): the values are raw, and the printed table shows each
        estimate to the second significant digit of its standard error (``cv_mean`` often to more
        digits than ``mean``), the standard errors to two, the ESS as integers, and only the compact,
        CV-first set of columns (see Returns); "none": a plain DataFrame of raw values; an int:
        the float columns rounded to that many decimals, as ``az.summary``'s, but the standard
        errors (the ``mcse`` columns) to that many significant digits: a CV's se of 1e-7 is not
        shown as 0.
    check_scores : bool
        Check the scores against the draws first (see :func:`cv_estimate`): an error when they
        fail the Stein identities by far, ``se_reliable=False`` and a note when mildly; and, when
        the scores are computed here, the model's log density against the sampler's record
        (``check_logp`` of :func:`compute_scores`).
    return_results : bool
        Also return a dict mapping each row label to its ``(CVResult, index)`` (hyperparameters,
        held-out residuals and notes of the fit behind the row).
    progressbar : bool
        PyMC-style progress bar over the rows.
    compile_kwargs : dict, optional
        Passed to :func:`compute_scores` when the scores are computed here (e.g.
        ``{"mode": "NUMBA"}`` for a model with an ODE solver).
    client : dask.distributed.Client, optional
        Fit the units of the table (the scalar rows together, each task group, with
        ``tasks="chain"`` each quantity) on the cluster's workers; the draws and scores are sent
        to every worker once.  The same table as without it.
    **options
        Passed on to :func:`cv_estimate` / :func:`vvcv_estimate` (``kernel``, ``nugget``,
        ``folds``, ``random_seed``, ...).

    Returns
    -------
    SummaryTable (a pandas.DataFrame), or (table, dict) with ``return_results=True``
        Index like ``az.summary`` (``theta[0]``).  ``print(table)`` shows ``cv_mean``, ``cv_mcse``,
        ``mean``, ``mcse_mean``, ``cv_sd``, ``cv_ess``, ``ess_bulk`` and ``se_reliable``, which fit an
        80-column terminal; ``print(table.to_string())`` every column.  The columns (``kind="all"``):

        - ``mean``, ``mcse_mean``: the plain MCMC mean and its mcse, as ArviZ computes them;
        - ``cv_mean``, ``cv_mcse``: the CV estimate of the mean and its se, a Monte Carlo error;
        - ``bias_allowance``: with divergent transitions, twice their share of the draws times the
          row's sd, for the bias they may leave in the mean and the sd, plain or CV alike (0 without
          them; ``print(table)`` shows it where a row has one): add it to either se for an error bound;
        - ``variance_reduction``: (mcse / CV se)^2 of the mean, measured on held-out draws;
        - ``cv_ess``: var(f) / cv_mcse^2, the number of independent draws the reported mean is
          worth, to read beside ArviZ's ``ess_bulk``;
        - ``sd``, ``mcse_sd``: the plain sd and ArviZ's mcse of it; ``cv_sd``, ``cv_mcse_sd``,
          ``variance_reduction_sd``: the sd from CV estimates of the mean and of the second moment
          about the plain mean (one fit with the means; the delta method's se), or the plain sd
          where the CV does not beat it;
        - the interval bounds (named as the installed ArviZ names them: ``eti89_lb``, ``eti89_ub``
          on 1.x, ``eti_3%``, ``eti_97%`` on 0.x) and their ``mcse_``; with ``cv_interval=True``
          also ``cv_`` the same by CVs, and their mcse: the CV bound is the plain quantile moved
          by one Newton step, with the CDF there estimated by a CV of a smoothed step plus the
          plain mean of what smoothing leaves out (``core.quantiles``), or the plain quantile
          where that does not beat it;
        - ``ess_bulk``, ``r_hat``: ArviZ's, per row (not with ``tasks``);
        - ``method``, ``method_sd``: what estimated the mean and the second moment ("mc": plain);
        - ``se_reliable``: False where a check (scores, divergences, mixing, tails) says the
          row's standard errors cannot be trusted.

        The sd is plain with ``method="metacv"`` task groups and ``tasks="temperature"``, the
        interval bounds plain with ``tasks`` and task groups fitted jointly (``"vvcv"``, ``"metacv"``).
        ``table.attrs["cv_results"]`` maps each row to its ``(CVResult, index)``, for
        :func:`pymc_cv.plots.plot_cv_fit`; ``table.attrs["notes"]`` holds what concerns every row
        (divergences, the score check), also issued as warnings, and why a row's sd fell back;
        ``table.attrs["score_backend"]`` where the scores came from (the PyMC model's compiled
        gradient, Stan, or the sampler's stored gradients).

    Examples
    --------
    >>> import numpy as np, pymc as pm, pymc_cv
    >>> with pm.Model() as model:
    ...     mu = pm.Normal("mu", 0, 10)
    ...     y = pm.Normal("y", mu, 1, observed=np.array([0.5, 1.5]))
    ...     idata = pm.sample(200, tune=200, chains=2, progressbar=False, random_seed=0,
    ...                       compute_convergence_checks=False)
    >>> table = pymc_cv.summary(idata, ["mu"], model=model, progressbar=False)
    >>> list(table.columns[:4])
    ['cv_mean', 'cv_mcse', 'mean', 'mcse_mean']
    >>> bool(abs(table.loc["mu", "cv_mean"] - 200 / 201) < 1e-6)   # exact posterior mean: 2 / (2 + 1/100)
    True
    """

    idata = data
    _check_arguments(idata, var_names, model, integrands, method, tasks, metacv,
                     {"check_scores": check_scores, "return_results": return_results, "progressbar": progressbar,
                      "cv_interval": cv_interval})
    ci_prob = _check_layout(kind, ci_prob, ci_kind, round_to)
    if compile_kwargs is not None and not isinstance(compile_kwargs, Mapping):
        raise TypeError(f"`compile_kwargs` must be a dict of pytensor.function options; got "
                        f"{type(compile_kwargs).__name__}.")
    if check_client(client) is not None and tasks == "temperature":
        raise ValueError("client= is not used with tasks='temperature' (one joint fit per quantity); drop it, or "
                         "distribute the sampling with sample_population(..., client=client).")
    if cv_interval and tasks is not None:
        warnings.warn(f"cv_interval=True is not used with tasks={tasks!r}: the interval bounds of those rows are the "
                      "plain quantiles.", UserWarning, stacklevel=2)
    cv_opts, vv_opts = _split_options(options)
    cv_opts["check_scores"] = vv_opts["check_scores"] = False  # checked once, here, with names
    settings = _Settings(cv_opts, vv_opts, B, metacv, options.get("random_seed", 0), method, ci_prob, cv_interval)
    if tasks == "temperature":
        records, results, notes = _temperature_table(idata, var_names, model, settings, check_scores, progressbar,
                                                     compile_kwargs)
        table = _table(records, results, notes, kind, round_to, ci_prob)
        return (table, dict(results)) if return_results else table
    idata = _with_scores(idata, model, progressbar, compile_kwargs, check_logp=check_scores)
    post = _read_posterior(idata, var_names, integrands)  # from here on, arrays only
    settings = dataclasses.replace(settings, coordinate_variables=tuple(lab.split("[")[0]
                                                                        for lab in post.parameter_names))
    X, S, rows, task_groups = post.draws, post.scores, post.rows, post.task_groups
    try:
        flagged, divergent, widening = _run_wide_checks(post, check_scores, per_chain=tasks == "chain")
    except ScoreMismatchError as err:
        untransformed = compat.group(idata, SCORE).attrs.get("untransformed_bounded")
        if not untransformed:
            raise
        raise ScoreMismatchError(
            f"{untransformed} sampled on a bounded support without a transform (transform=None or "
            "default_transform=None): the density need not vanish at the boundary, so Stein's identities, on "
            "which every control variate rests, fail there. Sample with PyMC's default transform (drop "
            f"transform=None / default_transform=None). The check: {err}") from None
    unpaired = _unchecked_pairing_note(compat.group(idata, SCORE).attrs)
    if unpaired:
        warnings.warn(unpaired, UserWarning, stacklevel=2)
        flagged = flagged + [unpaired]
    _warn_unused(method, B, metacv, tasks, task_groups)
    every_row = rows + [(lab, v) for labels, vals in task_groups for lab, v in zip(labels, vals)]  # table order
    units = [u for u in _units(tasks, method, rows, task_groups, every_row) if u[0]]
    fitted = _fit_units(X, S, settings, units, client, progressbar)
    records, results = [], _ResultsByRow()
    for recs, res in fitted:
        records += recs
        results.update(res)
    if tasks != "chain":
        order = {label: i for i, (label, _) in enumerate(every_row)}
        records.sort(key=lambda r: order[r[0]])
        records, row_notes = _with_convergence(records, every_row, results, divergent)
        records, widening_notes = _with_widened_se(records, widening)
        records, tail_notes = _with_heavy_tailed_sd(records, X)
        widening_notes += tail_notes
        records, allowance_notes = _with_divergence_allowance(records, post.diverging)
        flagged = {"all": flagged, "rows": widening_notes + [n for n in allowance_notes if n not in flagged]
                   + row_notes}
    table = _table(records, results, flagged, kind, round_to, ci_prob, cv_interval)
    table.attrs["score_backend"] = compat.group(idata, SCORE).attrs.get("score_backend", "not recorded")
    return (table, dict(results)) if return_results else table


def _unchecked_pairing_note(score_attrs):
    """The note that flags every row where nothing could show the draws to be of the model the scores are of."""
    pairing = str(score_attrs.get(PAIRING, ""))
    if not pairing.startswith(UNCHECKED):
        return None
    return (f"Whether the draws are of this model could not be checked: {pairing.removeprefix(UNCHECKED)}. Such a "
            "model moves every CV estimate by many times its se, and the Stein identities see the difference only "
            "at about the plain MCMC se, so every CV se is marked unreliable. Pass the idata pm.sample returned (its "
            "sample_stats keep the log density), or check_scores=False if the draws are known to be of this model "
            "and data.")


def _check_scores_are_of(idata, model):
    """Scores already in ``idata`` are used; they must be of ``model``'s value variables."""
    pm_model = pymc_model(model) if is_bambi_model(model) else model
    have = sorted(compat.group(idata, UNCONSTRAINED).data_vars)
    want = sorted(v.name for v in pm_model.value_vars)
    if have != want:
        raise ValueError(f"idata already holds scores of the variables {have}, but model= has {want}: those scores "
                         "are of another model. Pass an idata without the groups 'unconstrained_posterior' and "
                         "'score' to score this model.")


def _warn_unused(method, B, metacv, tasks, task_groups):
    """A warning for every argument that nothing in this table uses (nothing is ignored silently)."""
    joint = tasks == "chain" or any(len(vals) > 1 for _, vals in task_groups)
    vv_fitted = tasks == "chain" or (method == "vvcv" and joint)
    unused = []
    if method in ("vvcv", "metacv") and not joint:
        unused.append(f"method={method!r} fits task groups jointly, and this table has none (an integrand with "
                      "extra dims, or tasks='chain'); its rows are fitted as with method='auto'")
    if not (isinstance(B, str) and B == "learn") and not vv_fitted:
        unused.append("B= is the task matrix of a vv-CV (method='vvcv' with task groups, or tasks='chain'); no "
                      "vv-CV is fitted here, so it is not used")
    if metacv is not None and not (joint and method == "metacv"):
        unused.append("metacv= sets up the Meta-CV of method='metacv' on task groups; it is not used here")
    for note in unused:
        warnings.warn(note + ".", UserWarning, stacklevel=3)


def _with_scores(idata, model, progressbar, compile_kwargs=None, check_logp=True):
    """``idata`` itself when it holds the scores, else a new one with them (``model`` needed)."""
    if {UNCONSTRAINED, SCORE} <= set(compat.group_names(idata)):
        if model is not None:
            _check_scores_are_of(idata, model)
        if compile_kwargs is not None:
            warnings.warn(f"compile_kwargs= not used: idata already holds the scores (groups '{UNCONSTRAINED}' "
                          f"and '{SCORE}'), and those are used.", UserWarning, stacklevel=3)
        return idata
    if model is None:
        if has_stored_scores(idata):
            if compile_kwargs is not None:
                warnings.warn("compile_kwargs= not used: the sampler's stored gradients are used and nothing is "
                              "compiled.", UserWarning, stacklevel=3)
            return with_stored_scores(idata)
        model = _context_model()
        if model is None:
            stacked_draws_and_scores(idata)  # raises, saying how to get the scores
    elif compile_kwargs is not None and has_stored_scores(idata):
        warnings.warn("compile_kwargs= not used: the sampler's stored gradients are used and nothing is compiled.",
                      UserWarning, stacklevel=3)
    return compute_scores(idata, model, extend_inferencedata=False, progressbar=progressbar,
                          compile_kwargs=compile_kwargs, check_logp=check_logp)


def _context_model():
    """The model of an enclosing ``with model:`` block, or None (PyMC is not imported for this)."""
    import sys

    pm = sys.modules.get("pymc")
    return None if pm is None else pm.Model.get_context(error_if_none=False)


def _collect_rows(idata, var_names, integrands, n_chain, n_draw):
    """Scalar rows [(label, values (chain, draw))] and task task_groups [(labels, [values])], all finite."""
    rows = _variable_rows(idata, var_names) if (var_names is not None or integrands is None) else []
    task_groups = []
    if integrands is not None:
        scalar, task_groups = _integrand_rows(idata, integrands, n_chain, n_draw)
        rows += scalar
    for label, values in rows + [(lab, v) for labels, vals in task_groups for lab, v in zip(labels, vals)]:
        if not np.all(np.isfinite(values)):
            raise ValueError(f"'{label}' is NaN or inf at some draws; an expectation needs finite values.")
    return rows, task_groups


def _units(tasks, method, rows, task_groups, every_row):
    """Units of work (labels, values, how): every scalar row in one fit, each task group jointly."""
    if tasks == "chain":
        return [([label], [values], "per_chain") for label, values in every_row]
    joint = {"metacv": "meta", "vvcv": "jointly"}.get(method)
    alone = [(labels, vals) for labels, vals in task_groups if joint is None or len(vals) == 1]
    units = [([lab for lab, _ in rows] + [lab for labels, _ in alone for lab in labels],
              [v for _, v in rows] + [v for _, vals in alone for v in vals], "together")]
    return units + [(labels, vals, joint) for labels, vals in task_groups if joint is not None and len(vals) > 1]


def _fit_units(X, S, settings, units, client, progressbar):
    if client is None:
        fitted = []
        with progress_bar(progressbar) as bar:  # one step per row
            task_id = bar.add_task("Control variates", completed=0, total=max(sum(len(u[0]) for u in units), 1))
            for unit in units:
                fitted.append(_fit_unit(X, S, settings, unit))
                bar.advance(task_id, len(unit[1]))
        return fitted

    return map_units(_fit_unit, units, shared=(X, S, settings), client=client, progressbar=progressbar,
                     description="Control variates")


def _fit_unit(X, S, settings, unit):
    """One unit (labels, values, how) of a summary -> (table rows, {label: (CVResult, index)});
    a pure function of its arguments, run here or on a dask worker."""
    labels, vals, how = unit
    fitter = _RowFitter(X, S, settings)
    return fitter.run(how, labels, vals, settings.method), dict(fitter.results)


@dataclass(frozen=True)
class _Settings:
    """What every unit of a summary is fitted with (a dataclass, not a tuple: dask rebuilds the tuples
    among a task's arguments, which a NamedTuple's constructor does not take)."""

    cv_opts: dict
    vv_opts: dict
    B: object
    metacv: dict | None
    random_seed: object
    method: str
    ci_prob: float
    cv_interval: bool
    coordinate_variables: tuple | None = None  # the variable each unconstrained coordinate belongs to


class _RowFitter:
    """Fits units of rows on one posterior's draws and scores, filing each result by row label."""

    def __init__(self, X, S, settings):
        self.X, self.S = X, S
        n_chain, n_draw, d = X.shape
        self.n = n_chain * n_draw
        self.Xf, self.Sf = X.reshape(self.n, d), S.reshape(self.n, d)
        self.chain = np.repeat(np.arange(n_chain), n_draw)
        self.cv_opts, self.vv_opts, self.B, self.metacv = settings.cv_opts, settings.vv_opts, settings.B, \
            settings.metacv
        self.seed, self.ci_prob, self.cv_interval = settings.random_seed, settings.ci_prob, settings.cv_interval
        self.probs = ((1 - self.ci_prob) / 2, (1 + self.ci_prob) / 2)
        self.results = _ResultsByRow()
        self.variables = settings.coordinate_variables

    def run(self, how, labels, vals, method):
        if how == "per_chain":
            return self.per_chain(labels[0], vals[0])
        if how == "together":
            return self.together(labels, vals, "auto" if method in ("vvcv", "metacv") else method)
        return self.jointly(labels, vals) if how == "jointly" else self.meta(labels, vals)

    def together(self, labels, vals, method):
        # every row shares the draws and scores: one estimator call fits them all at once
        # with the centred squares and the smoothed steps at the plain bounds in the same fit: the sd
        # and the interval of every row (``core.spread``, ``core.quantiles``)
        Y = np.column_stack([v.reshape(self.n) for v in vals])
        k = len(vals)
        squares, centre = centred_squares(Y)
        # the kernel tuned on the rows alone: tuned with the squares too, it lost up to 7x on exp(s mu)
        # the squares' mixing is the rows' (their R-hat is the rows' folded one): cv_sd falls back
        # to the plain sd where the row is unmixed
        res = cv_estimate(np.column_stack([Y, squares]), self.Xf, self.Sf, method=method, chain=self.chain,
                          tune_columns=np.arange(k), check_mixing=np.arange(k), residual_khat=False,
                          local=self.local_coordinates(Y), **self.cv_opts)
        errors = _plain_errors(vals, self.probs)
        if not self.cv_interval:
            return [_record(label, v, res, j, self.results, more=_MoreFits((res, k + j), centre[j]),
                            ci_prob=self.ci_prob, errors=errors[j]) for j, (label, v) in enumerate(zip(labels, vals))]
        # the steps in a fit of their own: tuned with the smooth columns, they shortened the kernel's
        # length-scales and cost the sd of a Beta posterior 20x its accuracy
        steps, plan = smoothed_steps(Y, self.probs)
        res_steps = cv_estimate(steps, self.Xf, self.Sf, method=method, chain=self.chain, residual_khat=False,
                                **self.cv_opts)

        def residual_se(r):
            return mcse_mean(r, self.chain)

        return [_record(label, v, res, j, self.results, ci_prob=self.ci_prob, errors=errors[j],
                        more=_MoreFits((res, k + j), centre[j], plan, [(res_steps, i * k + j) for i in range(2)],
                                       j, residual_se))
                for j, (label, v) in enumerate(zip(labels, vals))]

    def local_coordinates(self, Y):
        """Above ``kernel_max_dim`` parameters, each row's own coordinate (its square's too) and the
        coordinates of the smallest variables, for ZV-CVs on those alone (``core.local_zv``)."""
        d = self.Xf.shape[1]
        if d <= self.cv_opts.get("kernel_max_dim", _KERNEL_MAX_DIM_DEFAULT) or self.variables is None:
            return None
        own = own_coordinates(Y, self.Xf)
        return LocalCoordinates(np.concatenate([own, own]), shared_coordinates(self.variables))

    def jointly(self, labels, vals):
        T = len(vals)
        flat = [v.reshape(self.n) for v in vals]
        res = vvcv_estimate(flat, [self.Xf] * T, [self.Sf] * T, B=self.B, chain=[self.chain] * T, **self.vv_opts)
        squares, centre = centred_squares(np.column_stack(flat))
        res_sq = vvcv_estimate(list(squares.T), [self.Xf] * T, [self.Sf] * T, B=self.B, chain=[self.chain] * T,
                               **self.vv_opts)
        errors = _plain_errors(vals, self.probs)
        return [_record(label, v, res, t, self.results, more=_MoreFits((res_sq, t), centre[t]), ci_prob=self.ci_prob,
                        errors=errors[t]) for t, (label, v) in enumerate(zip(labels, vals))]

    def per_chain(self, label, values):
        n_chain, n_draw = self.X.shape[:2]
        chains = [np.zeros(n_draw, dtype=int)] * n_chain
        res = vvcv_estimate([values[c] for c in range(n_chain)], list(self.X), list(self.S), B=self.B,
                            chain=chains, **self.vv_opts)
        centre = values.mean(axis=1)
        res_sq = vvcv_estimate([(values[c] - centre[c]) ** 2 for c in range(n_chain)], list(self.X), list(self.S),
                               B=self.B, chain=chains, **self.vv_opts)
        return [_record(f"{label} (chain {c})", values[c], res, c, self.results,
                        more=_MoreFits((res_sq, c), centre[c]), ci_prob=self.ci_prob) for c in range(n_chain)]

    def meta(self, labels, vals):
        if len(vals) < 4:
            raise ValueError(f"method='metacv' needs at least 4 tasks in a group; '{labels[0]}' has {len(vals)}. "
                             "Use 'vvcv' for a few tasks.")

        # few draws per meta-task keep meta-training quick; every draw is still averaged in estimate
        settings = {"progressbar": False, "random_seed": self.seed, "meta_iterations": 1000,
                    "support_size": min(self.n // 2, 50), **(self.metacv or {})}
        ys = [v.reshape(self.n) for v in vals]
        halves = np.arange(len(vals)) % 2  # interleaved, so neighbouring tasks fall in both halves
        out = [None] * len(vals)
        for h in (0, 1):
            train = [(ys[t], self.Xf, self.Sf) for t in np.flatnonzero(halves != h)]
            test = np.flatnonzero(halves == h)
            k = test.size
            res = MetaCV(**settings).meta_fit(train).estimate([ys[t] for t in test], [self.Xf] * k, [self.Sf] * k,
                                                              chain=[self.chain] * k, check_scores=False)
            for j, t in enumerate(test):
                out[t] = _record(labels[t], vals[t], res, j, self.results, ci_prob=self.ci_prob)
        return out


def _check_layout(kind, ci_prob, ci_kind, round_to):
    """The table's layout arguments, checked; returns the interval probability (ArviZ's default for None)."""
    if kind not in _KINDS:
        raise ValueError(f"kind={kind!r}; use 'all', 'stats' (means, sds and interval bounds) or 'diagnostics' "
                         "(their mcse, the variance reductions, cv_ess, ess_bulk, r_hat, the methods and "
                         "se_reliable), as az.summary.")
    if ci_kind != "eti":
        raise ValueError(f"ci_kind={ci_kind!r}: control variates estimate quantiles, so the interval is the "
                         "equal-tailed one; use ci_kind='eti' (az.summary(..., kind='stats') gives the HDI).")
    if ci_prob is None:
        ci_prob = compat.default_ci_prob()
    if isinstance(ci_prob, bool) or not isinstance(ci_prob, (float, int, np.floating)) or not 0 < ci_prob < 1:
        raise ValueError(f"ci_prob={ci_prob!r}; use a probability strictly between 0 and 1 (e.g. 0.94).")
    if isinstance(round_to, str) and round_to.lower() in ("auto", "none"):
        return float(ci_prob)
    if round_to is not None and (isinstance(round_to, bool) or not isinstance(round_to, (int, np.integer))):
        raise TypeError(f"`round_to` must be 'auto' (the default: raw values, printed to the digits their se "
                        f"warrants), 'none' (a plain DataFrame of raw values) or an int (decimals); got {round_to!r}.")
    return float(ci_prob)


def _check_arguments(idata, var_names, model, integrands, method, tasks, metacv, flags):
    """Every argument of the wrong type is an error naming it, before any work."""
    if not compat.is_inference_data(idata) or "posterior" not in compat.group_names(idata):
        hint = (" Convert a MultiTrace with pm.to_inference_data(trace, model=model), or sample with "
                "return_inferencedata=True." if type(idata).__name__ == "MultiTrace" else "")
        raise TypeError("`data` must be the InferenceData (DataTree on ArviZ 1) of a fitted model, with a "
                        f"'posterior' group; got {type(idata).__name__}.{hint}")
    names = [var_names] if isinstance(var_names, str) else var_names
    if names is not None and not (isinstance(names, (list, tuple)) and all(isinstance(v, str) for v in names)):
        hint = " To pass the model, use summary(idata, model=model)." if hasattr(var_names, "logp") else ""
        raise TypeError(f"`var_names` must be a str or a list of str; got {type(var_names).__name__}.{hint}")
    if model is not None:
        import pymc as pm

        if not (isinstance(model, pm.Model) or is_bambi_model(model)):
            raise TypeError(f"`model` must be a pymc.Model or a fitted bambi.Model; got {type(model).__name__}.")
    if integrands is not None and not isinstance(integrands, Mapping):
        raise TypeError("`integrands` must be a dict of name -> callable(posterior); got "
                        f"{type(integrands).__name__}.")
    if metacv is not None and not isinstance(metacv, Mapping):
        raise TypeError(f"`metacv` must be a dict of MetaCV settings; got {type(metacv).__name__}.")
    for name, flag in flags.items():
        if not isinstance(flag, (bool, np.bool_)):
            raise TypeError(f"`{name}` must be True or False; got {flag!r}.")
    if tasks not in (None, "chain", "temperature"):
        raise ValueError(f"tasks={tasks!r}; use None, 'chain' or 'temperature'.")
    if tasks == "temperature" and integrands is not None:
        raise ValueError("tasks='temperature' summarises var_names at every temperature; integrands are not "
                         "supported there yet. Add the integrand as a pm.Deterministic instead.")
    if method not in ("auto", "mc", "zv1", "zv2", "zv2diag", "zv", "cf", "secf", "vvcv", "metacv"):
        raise ValueError(f"method={method!r}; use 'auto', 'mc', 'zv1', 'zv2', 'zv2diag', 'zv', 'cf', 'secf', 'vvcv' or "
                         "'metacv'.")


def _run_wide_checks(post, check_scores, per_chain):
    """Notes that concern every row: many divergent transitions, chains of low E-BFMI and the Stein check
    of the scores (an error when grossly violated), each also a warning (a non-empty list flags every row);
    the divergent draws (chain, draw) when they are few, for the rows' own check (else None); and the
    Stein check's widening of the CV se's (``CheckOutcome``: factor and note; 1 per chain)."""
    notes = []
    X, S = post.draws, post.scores
    n_chain, n_draw, d = X.shape
    divergent = post.diverging
    if divergent is not None:
        note, wide = divergence_note(int(divergent.sum()), divergent.size)
        # the rows' own check needs the divergent draws aligned with the draws, and one target
        if note and (wide or per_chain or divergent.shape != (n_chain, n_draw)):
            notes.append(note)
            divergent = None
        elif note:
            warnings.warn(note, UserWarning, stacklevel=3)
    if post.energy is not None:
        note = energy_note(post.energy)
        notes += [note] if note else []
    names = post.parameter_names
    widening = CheckOutcome(None)
    if check_scores and per_chain:  # every chain may have a target of its own
        # each chain as the MCMC chain it is, at a level shared by the chains: taken as independent draws, 4
        # AR(1) chains of 1,000 draws (0.5) failed the check in 48 of 200 chains, so most such tables were
        # flagged; with their ESS and a shared level, in 2 of 50 runs of 4 chains
        for c in range(n_chain):
            note = apply_stein_check(X[c], S[c], np.zeros(n_draw, dtype=int), names=names, where=f" in chain {c}",
                                     family=n_chain, second_order=True).note
            notes += [note] if note else []
    elif check_scores:
        chain = np.repeat(np.arange(n_chain), n_draw)
        widening = apply_stein_check(X.reshape(-1, d), S.reshape(-1, d), chain, names=names, second_order=True)
        notes += [widening.note] if widening.note else []
    for note in notes:
        warnings.warn(note, UserWarning, stacklevel=3)
    return notes, divergent, widening


def _temperature_table(idata, var_names, model, settings, check_scores, progressbar, compile_kwargs):
    """Rows ``name (t = ...)``: each quantity at every temperature of a population run, the
    temperatures as the tasks of one vv-CV (per-temperature ``cv_estimate`` for a single-task method),
    fitted with the summary's :class:`_Settings`."""
    if model is None:
        raise ValueError("tasks='temperature' needs the model (summary(idata, model=model)) for the scores at "
                         "every temperature.")
    t, posts, Xs, Ss, chain = population_draws(idata, model, compile_kwargs)
    method, cv_opts, vv_opts, ci_prob = settings.method, settings.cv_opts, settings.vv_opts, settings.ci_prob
    notes = []
    n_div = int(np.asarray(compat.group(idata, POPULATION).get("diverging", 0)).sum())
    if n_div:
        notes.append(f"{n_div} divergent transition(s) among the walkers; every se is marked unreliable.")
    if check_scores:
        for k, tk in enumerate(t):
            note = apply_stein_check(Xs[k], Ss[k], chain, where=f" at t = {tk:.3g}").note
            notes += [note] if note else []
    for note in notes:
        warnings.warn(note, UserWarning, stacklevel=3)
    per_t = [_dataset_rows(post, var_names) for post in posts]
    results, records = _ResultsByRow(), []
    with progress_bar(progressbar) as bar:
        task = bar.add_task("Control variates across temperatures", completed=0, total=len(per_t[0]))
        for j, (label, _) in enumerate(per_t[0]):
            vals = [rows[j][1] for rows in per_t]
            flat = [v.reshape(-1) for v in vals]
            if method in ("auto", "vvcv"):
                res = [vvcv_estimate(flat, Xs, Ss, B=settings.B, chain=[chain] * len(t), **vv_opts)] * len(t)
                idx = list(range(len(t)))
            else:
                res = [cv_estimate(f, X, S, method=method, chain=chain, **cv_opts) for f, X, S in zip(flat, Xs, Ss)]
                idx = [0] * len(t)
            records += [_record(f"{label} (t = {tk:.3g})", v, r, i, results, ci_prob=ci_prob)
                        for tk, v, r, i in zip(t, vals, res, idx)]
            bar.advance(task, 1)
    return records, results, notes


def _rhats_known(labels, vals, results):
    """Each row's R-hat where the fit's mixing check computed it on the row's own values (nan elsewhere)."""
    out = np.full(len(labels), np.nan)
    for i, lab in enumerate(labels):
        res, j = results[lab]
        rhat = getattr(res, "rhat", None)
        if rhat is not None and np.ndim(rhat) == 1 and j < len(res.values) \
                and np.array_equal(np.ravel(res.values[j]), vals[i].ravel()):
            out[i] = rhat[j]
    return out


def _with_convergence(records, every_row, results, divergent):
    """``records`` with each row's convergence checks applied (R-hat, bulk ESS, chains that
    disagree: see :mod:`pymc_cv.convergence`), and the notes of the rows they flagged."""
    values = dict(every_row)
    labels = [r[0] for r in records]
    vals = np.stack([values[lab] for lab in labels])
    resid = np.stack([np.asarray(results[lab][0].heldout_residuals[results[lab][1]]).reshape(vals.shape[1:])
                      for lab in labels])
    conv = row_convergence(vals, resid, divergent, rhat=_rhats_known(labels, vals, results))
    out, notes = [], []
    for rec, spread, note, ess, rhat in zip(records, conv.chain_spread_se, conv.notes, conv.ess_bulk, conv.rhat):
        cv_mcse = max(rec.cv_mcse, float(spread)) if np.isfinite(spread) else rec.cv_mcse
        if note:
            notes.append(f"{rec.label}: {note}.")
        out.append(rec._replace(cv_mcse=cv_mcse, se_reliable=rec.se_reliable and not note, ess_bulk=float(ess),
                                r_hat=float(rhat)))
    unseen, note = unseen_values_note(labels, vals)
    if unseen:
        notes.append(note)
        unseen = set(unseen)
        out = [rec._replace(se_reliable=False) if rec.label in unseen else rec for rec in out]
    for note in notes:
        warnings.warn(note, UserWarning, stacklevel=4)
    # a row marked unreliable by its fit (heavy-tailed draws, a mild Stein check) says why in the
    # table's notes too, not only in its CVResult
    seen = set()
    for rec in out:
        res = results[rec[0]][0]
        if not rec.se_reliable and id(res) not in seen:
            seen.add(id(res))
            notes += [n for n in res.notes if "unreliable" in n and n not in notes]
    return out, notes


def _with_widened_se(records, widening):
    """``records`` with the se of every CV estimate (mean, sd, interval bounds) made ``widening.se_factor``
    times wider and its variance reduction as many times squared smaller, and the note that says so
    (:class:`~pymc_cv.core.score_check.CheckOutcome`); as they are at a factor of 1."""
    f = widening.se_factor
    if f <= 1:
        return records, []
    out = []
    for rec in records:
        if rec.method != "mc":
            rec = rec._replace(cv_mcse=rec.cv_mcse * f, variance_reduction=rec.variance_reduction / f**2)
        if rec.method_sd != "mc":
            rec = rec._replace(cv_mcse_sd=rec.cv_mcse_sd * f, variance_reduction_sd=rec.variance_reduction_sd / f**2)
        lb, ub = (f if m != "mc" else 1.0 for m in rec.method_bounds)
        out.append(rec._replace(cv_mcse_lb=rec.cv_mcse_lb * lb, cv_mcse_ub=rec.cv_mcse_ub * ub))
    return out, [widening.widening_note[0].upper() + widening.widening_note[1:]]


def _with_heavy_tailed_sd(records, X):
    """``records`` with every row marked unreliable where the draws (chain, draw, d) have heavy tails: the sd's
    estimator, plain or CV, needs a fourth moment, which such tails may lack, and a sampler under-represents
    them, so that a row's own tail can look light (:func:`moment_tail_notes` flags rows whose tail is
    heavy by itself). The CV means are flagged by their fits; the plain means' se holds while their second
    moment is finite."""
    if not any(rec.se_reliable for rec in records):
        return records, []
    note = heavy_tail_note(X.reshape(-1, X.shape[-1]))
    if note is not None:
        note = note.replace("every CV estimate is marked unreliable", "every row is marked unreliable, whose sd, "
                            "plain or CV, needs a fourth moment such tails may lack")
    else:
        return records, []
    return [rec._replace(se_reliable=False) for rec in records], [note[0].upper() + note[1:]]


def _with_divergence_allowance(records, diverging):
    """``records`` with the bias divergent transitions may leave in the mean and the sd, plain or CV
    (:func:`pymc_cv.convergence.divergence_allowance`), in their own column, and the note that says so; the
    se's stay Monte Carlo errors (the bias is the sampler's: a CV removes none of it, and the plain mean has it
    too); as they are without divergences."""
    n_div = 0 if diverging is None else int(np.sum(diverging))
    if not n_div:
        return records, []
    out = []
    for rec in records:
        extra = float(divergence_allowance(rec.sd, n_div, diverging.size)) if np.isfinite(rec.sd) else 0.0
        out.append(rec._replace(bias_allowance=extra))
    return out, [divergence_note(n_div, diverging.size)[0]]


def _cv_ess(table, results):
    """var(f) / cv_mcse^2 per row: how many independent draws the reported estimate is worth (ArviZ's
    ess_bulk where the row fell back to MC); nan for a constant row."""
    out = np.full(len(table), np.nan)
    for i, (label, se) in enumerate(zip(table.index, table["cv_mcse"])):
        res, t = results[label]
        var = float(np.var(res.values[t], ddof=1))
        if var > 0 and se > 0:
            out[i] = var / se**2
    return out


def _significant(values, digits):
    """``values`` rounded to ``digits`` significant digits (at least one); zero, nan and inf as they are."""
    out = np.array(values, dtype=float)
    ok = np.isfinite(out) & (out != 0)
    out[ok] = [float(f"{v:.{max(int(digits), 1) - 1}e}") for v in out[ok]]  # decimal rounding, as printed
    return out


def _table(records, results, notes, kind="all", round_to="auto", ci_prob=0.94, cv_interval=False):
    """The DataFrame of ``records`` (``kind`` of columns, rounded to ``round_to`` decimals, the interval
    named as the installed ArviZ names it); notes that concern every row flag every row's se (``notes``
    a list of those, or {"all": those, "rows": notes of single rows, already applied})."""
    import pandas as pd

    wide, rows = (notes["all"], notes["rows"]) if isinstance(notes, dict) else (notes, [])
    table = pd.DataFrame.from_records(records, columns=_Row._fields).set_index("label")
    table.index.name = None
    if wide:
        table["se_reliable"] = False
    table["cv_ess"] = _cv_ess(table, results)
    row_notes = [f"{label}: {note}." for label, notes in table["notes"].items() for note in notes]
    lb, ub = compat.interval_names(ci_prob)
    names = {"lb": lb, "ub": ub, "cv_lb": f"cv_{lb}", "cv_ub": f"cv_{ub}", "mcse_lb": f"mcse_{lb}",
             "mcse_ub": f"mcse_{ub}", "cv_mcse_lb": f"cv_mcse_{lb}", "cv_mcse_ub": f"cv_mcse_{ub}"}
    dropped = set() if cv_interval else {"cv_lb", "cv_ub", "cv_mcse_lb", "cv_mcse_ub"}
    table = table[[c for c in _KINDS[kind] if c not in dropped]].rename(columns=names)
    if round_to is None or (isinstance(round_to, str) and round_to.lower() == "auto"):
        from .summary_table import SummaryTable

        table = SummaryTable(table)
    elif not isinstance(round_to, str):
        numeric = table.select_dtypes("float").columns
        errors = [c for c in numeric if "mcse" in c or c == "bias_allowance"]
        table[errors] = table[errors].apply(lambda col: _significant(col.to_numpy(), round_to))
        plain = [c for c in numeric if c not in errors]
        table[plain] = table[plain].round(round_to)
    table.attrs["cv_results"] = results
    table.attrs["notes"] = list(wide) + list(rows) + row_notes
    return table
