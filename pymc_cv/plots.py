"""Plots, with ArviZ's keyword conventions (``ax=``, ``figsize=``); each returns the matplotlib Axes."""

from __future__ import annotations

import numpy as np

from .evidence.plot import axes_for, plot_ti_curve

# matplotlib loads inside the functions that use it: `import pymc_cv` stays cheap without it.

__all__ = ["plot_ti_curve", "plot_estimates", "plot_forest", "plot_variance_reduction", "plot_cv_fit"]


def _table(table):
    needed = {"mean", "mcse_mean", "cv_mean", "cv_mcse", "variance_reduction"}
    if not hasattr(table, "columns") or not needed <= set(table.columns):
        raise ValueError("Pass the DataFrame returned by pymc_cv.summary (columns mean, mcse_mean, cv_mean, "
                         "cv_mcse, variance_reduction).")
    return table


def plot_estimates(table, *, ax=None, figsize=None, interval=2.0, reference=None):
    """MC and CV estimates of every row of a :func:`pymc_cv.summary` table, +/- ``interval`` se.

    Parameters
    ----------
    table : pandas.DataFrame
        From :func:`pymc_cv.summary`.
    ax, figsize : as in ArviZ.
    interval : float
    reference : array-like, optional
        Known values to mark (e.g. a long-run or analytic reference), one per row.

    Returns
    -------
    matplotlib Axes

    Examples
    --------
    >>> import matplotlib, pandas as pd
    >>> matplotlib.use("Agg")
    >>> from pymc_cv.plots import plot_estimates
    >>> t = pd.DataFrame({"mean": [1.0, 2.1], "mcse_mean": [0.1, 0.1], "cv_mean": [1.01, 2.0],
    ...                   "cv_mcse": [0.01, 0.01], "variance_reduction": [100.0, 100.0]}, index=["a", "b"])
    >>> len(plot_estimates(t).get_yticklabels())
    2
    """
    table = _table(table)
    ax = axes_for(ax, figsize or (6.0, 0.45 * len(table) + 1.5))
    pos = np.arange(len(table))[::-1]
    ax.errorbar(table["mean"], pos + 0.15, xerr=interval * table["mcse_mean"], fmt="o", ms=4, color="0.55",
                capsize=2, label="MCMC mean")
    ax.errorbar(table["cv_mean"], pos - 0.15, xerr=interval * table["cv_mcse"], fmt="s", ms=4, color="C0",
                capsize=2, label="control variate")
    if reference is not None:
        ax.scatter(np.asarray(reference, dtype=float), pos, marker="|", s=200, color="C3", label="reference", zorder=3)
    ax.set_yticks(pos)
    ax.set_yticklabels([str(i) for i in table.index])
    ax.set_ylim(-0.6, len(table) - 0.4)
    ax.set_xlabel("posterior expectation")
    ax.set_title(f"Estimates ± {interval:g} se")
    ax.legend(fontsize="small")
    return ax


def _interval_columns(table):
    """(lower, upper) column names of the plain interval of a summary table (``eti89_lb`` or ``eti_3%``)."""
    bounds = [c for c in table.columns if not c.startswith(("cv_", "mcse_")) and c.startswith("eti")]
    if len(bounds) != 2:
        raise ValueError("This table has no interval columns; pass a table of pymc_cv.summary with kind='all' or "
                         "kind='stats'.")
    return bounds[0], bounds[1]


def plot_forest(table, *, ax=None, figsize=None, interval=2.0):
    """Forest plot of a :func:`pymc_cv.summary` table: per row the plain (grey) and CV (blue)
    posterior interval and mean, as ``az.plot_forest`` draws them.

    Each bound carries whiskers of +/- ``interval`` of its mcse, and each mean a bar of +/-
    ``interval`` of its se, so what the control variates sharpened shows as shorter whiskers.
    Without the ``cv_`` bounds (``summary(..., cv_interval=False)``) the CV row shows the plain
    interval around the CV mean.

    Parameters
    ----------
    table : pandas.DataFrame
        From :func:`pymc_cv.summary` with ``kind="all"`` (the default).
    ax, figsize : as in ArviZ.
    interval : float
        How many mcse the whiskers span.

    Returns
    -------
    matplotlib Axes

    Examples
    --------
    >>> import matplotlib, pandas as pd
    >>> matplotlib.use("Agg")
    >>> from pymc_cv.plots import plot_forest
    >>> t = pd.DataFrame({"mean": [1.0], "mcse_mean": [0.1], "cv_mean": [1.01], "cv_mcse": [0.01],
    ...                   "variance_reduction": [100.0], "eti_3%": [0.0], "eti_97%": [2.0],
    ...                   "mcse_eti_3%": [0.1], "mcse_eti_97%": [0.1]}, index=["a"])
    >>> len(plot_forest(t).get_yticklabels())
    1
    """
    table = _table(table)
    lb, ub = _interval_columns(table)
    ax = axes_for(ax, figsize or (6.0, 0.5 * len(table) + 1.5))
    pos = np.arange(len(table))[::-1].astype(float)
    has_cv = f"cv_{lb}" in table.columns
    cv_lb, cv_ub = (f"cv_{lb}", f"cv_{ub}") if has_cv else (lb, ub)
    rows = (("MCMC", "0.55", pos + 0.15, "mean", "mcse_mean", lb, ub),
            ("control variates", "C0", pos - 0.15, "cv_mean", "cv_mcse", cv_lb, cv_ub))
    for label, color, y, mean, se, lo, hi in rows:
        se_lo, se_hi = f"mcse_{lo}", f"mcse_{hi}"
        ax.hlines(y, table[lo], table[hi], color=color, lw=2.5, label=f"{label}: interval and mean")
        for bound, bound_se in ((lo, se_lo), (hi, se_hi)):
            if bound_se in table.columns:
                ax.errorbar(table[bound], y, xerr=interval * table[bound_se].fillna(0), fmt="none", ecolor=color,
                            elinewidth=1, capsize=3)
        ax.errorbar(table[mean], y, xerr=interval * table[se].fillna(0), fmt="o", ms=5, color=color, mfc="white",
                    capsize=2, zorder=3)
    ax.set_yticks(pos)
    ax.set_yticklabels([str(i) for i in table.index])
    ax.set_ylim(-0.6, len(table) - 0.4)
    ax.grid(axis="x", alpha=0.3)
    ax.set_title(f"Posterior intervals and means (whiskers ± {interval:g} mcse)")
    ax.legend(fontsize="small", loc="best")
    return ax


def plot_variance_reduction(table, *, ax=None, figsize=None):
    """The variance reduction (MC variance / CV variance, held-out) of every row, on a log scale.

    Bars below 1 (the dashed line) are rows where the CV did not help; their ``cv_mean`` is the
    MC mean.  Rows whose se is flagged unreliable are hatched.

    Examples
    --------
    >>> import matplotlib, pandas as pd
    >>> matplotlib.use("Agg")
    >>> from pymc_cv.plots import plot_variance_reduction
    >>> t = pd.DataFrame({"mean": [1.0], "mcse_mean": [0.1], "cv_mean": [1.0], "cv_mcse": [0.01],
    ...                   "variance_reduction": [100.0], "se_reliable": [True]}, index=["a"])
    >>> plot_variance_reduction(t).get_xscale()
    'log'
    """
    table = _table(table)
    ax = axes_for(ax, figsize or (6.0, 0.35 * len(table) + 1.5))
    vr = np.clip(table["variance_reduction"].to_numpy(dtype=float), 1e-3, 1e12)
    pos = np.arange(len(table))[::-1]
    reliable = table["se_reliable"].to_numpy(dtype=bool) if "se_reliable" in table else np.ones(len(table), bool)
    colors = np.where(vr > 1, "C0", "C3")
    for p, v, c, ok in zip(pos, vr, colors, reliable):
        ax.barh(p, v, height=0.6, color=c, hatch=None if ok else "//", edgecolor="white" if ok else "k")
    ax.axvline(1.0, color="k", ls="--", lw=1)
    ax.set_xscale("log")
    ax.set_ylim(-0.6, len(table) - 0.4)
    ax.set_yticks(pos)
    ax.set_yticklabels([str(i) for i in table.index])
    ax.set_xlabel("variance reduction (MC variance / CV variance, held-out)")
    ax.set_title("What the control variates gained")
    return ax


def _fit_check(result, index):
    """(values, held-out fit, method, variance reduction) of one integrand of a CVResult, or of the
    row ``index`` of a :func:`pymc_cv.summary` table."""
    if hasattr(result, "attrs"):
        rows = result.attrs.get("cv_results")
        if rows is None:
            raise ValueError("This table has no attrs['cv_results']; pass a table straight from pymc_cv.summary "
                             "(pandas drops attrs on some operations, e.g. concat) or a CVResult.")
        if index not in rows:
            raise ValueError(f"index={index!r} is not a row of the table; use one of {list(rows)[:5]}...")
        result, index = rows[index]
    if not getattr(result, "heldout_residuals", None):
        raise ValueError("Pass a CVResult from cv_estimate, vvcv_estimate or MetaCV.estimate, or a summary table.")
    k = len(result.values)
    if not isinstance(index, (int, np.integer)) or not -k <= index < k:
        raise ValueError(f"index={index!r}; this result has {k} integrand(s) (tasks): use 0..{k - 1}.")
    values = np.asarray(result.values[index], dtype=float)
    fit = values - np.asarray(result.heldout_residuals[index], dtype=float)
    method = np.ravel(np.asarray(result.method, dtype=object))[index]
    vr = float(np.ravel(result.variance_reduction)[index])
    return values, fit, str(method), vr


def plot_cv_fit(result, index=0, *, ax=None, figsize=None):
    """The control variate's fit on held-out draws: f(x_i) against c + g(x_i), with g fitted
    without x_i (leave-one-out or cross-fitted, as the se was computed).

    Left: f against the fit; points on the diagonal are draws the CV explains.  Right: the size
    of the held-out residual ``|f - fit|`` on a log scale, against the spread of f (plain MC's
    residual) and the residuals' root mean square (the CV's).  The gap between the two lines is
    the variance reduction; a few points far above the rest (often at extreme f, where a kernel
    fit reverts to a constant) are the heavy tail behind an "se unreliable" flag.

    Parameters
    ----------
    result : CVResult or pandas.DataFrame
        From :func:`pymc_cv.cv_estimate`, :func:`pymc_cv.vvcv_estimate` or
        :meth:`pymc_cv.MetaCV.estimate`; or a :func:`pymc_cv.summary` table.
    index : int or str
        Integrand (task) number of a CVResult, or row label of a summary table.
    ax : pair of matplotlib Axes, optional
    figsize : tuple, optional

    Returns
    -------
    numpy array of two matplotlib Axes

    Examples
    --------
    >>> import numpy as np, matplotlib, pymc_cv
    >>> matplotlib.use("Agg")
    >>> from pymc_cv.plots import plot_cv_fit
    >>> rng = np.random.default_rng(0)
    >>> x = rng.normal(size=(100, 2))
    >>> res = pymc_cv.cv_estimate(np.sin(x[:, 0]) + x[:, 1] ** 2, x, -x, method="secf")
    >>> axes = plot_cv_fit(res)
    >>> axes[0].get_xlabel(), axes[1].get_yscale()
    ('held-out fit c + g(x)', 'log')
    """
    import matplotlib.pyplot as plt

    values, fit, method, vr = _fit_check(result, index)
    created = ax is None
    if created:
        _, ax = plt.subplots(1, 2, figsize=figsize or (9.0, 4.0))
    ax = np.ravel(ax)
    if ax.size != 2:
        raise ValueError(f"ax has {ax.size} Axes; plot_cv_fit draws two panels: pass a pair, e.g. "
                         "plt.subplots(1, 2)[1].")
    left, right = ax
    left.scatter(fit, values, s=9, alpha=0.6, color="C0", edgecolor="none")
    lo, hi = min(values.min(), fit.min()), max(values.max(), fit.max())
    pad = 0.03 * (hi - lo) if hi > lo else 1.0
    left.plot([lo - pad, hi + pad], [lo - pad, hi + pad], color="k", lw=1, ls="--", label="f = fit")
    left.axvline(values.mean(), color="0.55", lw=1, ls=":", label="MC (a constant fit)")
    left.set_xlabel("held-out fit c + g(x)")
    left.set_ylabel("integrand f(x)")
    left.legend(fontsize="small", loc="upper left")

    resid = np.abs(values - fit)
    floor = max(resid.max(), values.std(), 1e-300) * 1e-16  # exact fits: show round-off, not -inf
    right.scatter(fit, np.maximum(resid, floor), s=9, alpha=0.6, color="C0", edgecolor="none")
    right.axhline(values.std(), color="0.55", lw=1.5, label=f"sd of f (MC): {values.std():.3g}")
    rms = float(np.sqrt(np.mean(resid ** 2)))
    right.axhline(max(rms, floor), color="C0", lw=1.5, ls="--", label=f"rms residual (CV): {rms:.3g}")
    right.set_yscale("log")
    right.set_xlabel("held-out fit c + g(x)")
    right.set_ylabel("|f - fit| on held-out draws")
    right.legend(fontsize="small", loc="lower right")
    left.figure.suptitle(f"{method}: variance reduction {vr:.3g}x (held-out)", fontsize="medium")
    if created:
        left.figure.tight_layout()
    return ax
