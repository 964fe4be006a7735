"""The plot of thermodynamic integration: E_t[log p(y|x)] against t (``TIResult.plot``).

:mod:`pymc_cv.plots` has it too, with the package's other plots.
"""

from __future__ import annotations

import numpy as np

__all__ = ["axes_for", "plot_ti_curve"]


def axes_for(ax, figsize):
    """``ax``, or the axes of a new figure of ``figsize`` when it is None."""
    import matplotlib.pyplot as plt  # matplotlib loads only when something is drawn

    if ax is None:
        _, ax = plt.subplots(figsize=figsize or (6.0, 4.0))
    return ax


def plot_ti_curve(result, *, ax=None, figsize=None, show_mc=True, interval=2.0, linthresh=None):
    """E_t[log p(y|x)] against the temperature t, plain averages and CV estimates, +/- ``interval`` se.

    Parameters
    ----------
    result : TIResult
        From :func:`pymc_cv.thermodynamic_integration` or :func:`pymc_cv.ti_from_arrays`.
    ax : matplotlib Axes, optional
    figsize : tuple, optional
    show_mc : bool
        Also show the plain per-rung averages (grey).
    interval : float
        Error bars are this many standard errors.
    linthresh : float, optional
        The t axis is symmetric-log (the curve changes fastest near t = 0); linear below this
        (default: the smallest positive temperature).

    Returns
    -------
    matplotlib Axes

    Examples
    --------
    >>> import numpy as np, matplotlib
    >>> matplotlib.use("Agg")
    >>> from pymc_cv.evidence import power_ladder, ti_from_arrays
    >>> from pymc_cv.plots import plot_ti_curve
    >>> rng = np.random.default_rng(1)
    >>> t = power_ladder(11)
    >>> xs = [rng.normal(0, (1 + ti) ** -0.5, size=(50, 1)) for ti in t]
    >>> ll = [-0.5 * np.log(2 * np.pi) - 0.5 * x[:, 0] ** 2 for x in xs]
    >>> ax = plot_ti_curve(ti_from_arrays(t, ll, xs, [-x for x in xs], [-x for x in xs], method="cti"))
    >>> ax.get_xlabel()
    'temperature t'
    """
    ax = axes_for(ax, figsize)
    t = np.asarray(result.temperatures)
    mom = result.moments
    if show_mc:
        ax.errorbar(t, mom.mc_mean, yerr=interval * mom.mc_mean_se, fmt="o", ms=4, color="0.55", capsize=2,
                    label=f"MC: log Z = {result.mc_log_evidence:.6g} ± {result.mc_se:.2g}")
    ax.errorbar(t, mom.mean, yerr=interval * mom.mean_se, fmt="s-", ms=3, lw=1, color="C0", capsize=2,
                label=f"{result.method}: log Z = {result.log_evidence:.6g} ± {result.se:.2g}")
    positive = t[t > 0]
    ax.set_xscale("symlog", linthresh=linthresh or (positive.min() if positive.size else 1e-3))
    ax.set_xlim(0, 1.05)
    ax.set_xlabel("temperature t")
    ax.set_ylabel("E_t[log p(y | x)]")
    ax.set_title(f"Thermodynamic integration ({t.size} rungs, ±{interval:g} se)")
    ax.legend(loc="lower right", fontsize="small")
    return ax
