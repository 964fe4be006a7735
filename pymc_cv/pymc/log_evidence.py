"""The log evidence of a PyMC model in one call: the cheapest estimator first, the next where it fails its
checks (:mod:`pymc_cv.evidence.choice`)."""

from __future__ import annotations

import time
import warnings

from ..evidence.choice import Attempt, choose_evidence
from .bridge import bridge_sampling
from .evidence import thermodynamic_integration

__all__ = ["log_evidence"]

BRIDGE = "bridge sampling from posterior draws"
TI = "thermodynamic integration (SMC)"


def log_evidence(model=None, idata=None, *, random_seed=None, progressbar=True, compile_kwargs=None,
                 sample_kwargs=None):
    """Log evidence log p(y) of a PyMC model, by the estimator that passes its checks.

    With ``idata`` (posterior draws already sampled): bridge sampling from them
    (:func:`pymc_cv.bridge_sampling`, no new sampling), then, where its checks fail (divergences with no
    confirming importance estimate, chains that disagree), thermodynamic integration with its defaults
    (:func:`pymc_cv.thermodynamic_integration`: PyMC's SMC, CVs per stage).  Without: TI first, then,
    where it fails its checks (vague priors, whose power posteriors near t = 0 SMC's particles do not
    follow), ``pm.sample`` with PyMC's defaults and bridge sampling from its draws.

    Parameters
    ----------
    model : pymc.Model, optional
        Taken from the context when not given.  Every free variable needs a proper prior.
    idata : InferenceData (DataTree on ArviZ 1), optional
        Posterior draws of ``model`` from ``pm.sample``.
    random_seed : int, optional
    progressbar : bool
    compile_kwargs : dict, optional
        For the batched log density and TI's terms, e.g. ``{"mode": "NUMBA"}``.
    sample_kwargs : dict, optional
        Passed to ``pm.sample`` where it runs (e.g. ``{"target_accept": 0.95}``); not with ``idata``.

    Returns
    -------
    EvidenceResult
        ``.log_evidence``, ``.se``, ``.reliable``, ``.estimator``, ``.notes``; ``.bridge`` and ``.ti``
        hold each estimator's own result where it ran.

    Examples
    --------
    A regression with vague priors, where the power posteriors near t = 0 are hard to sample:

    >>> import numpy as np, pymc as pm, pymc_cv
    >>> rng = np.random.default_rng(0)
    >>> x = rng.normal(size=50)
    >>> with pm.Model() as model:
    ...     b = pm.Normal("b", 0, 100, shape=2)
    ...     sigma = pm.HalfCauchy("sigma", 1)
    ...     y = pm.Normal("y", b[0] + b[1] * x, sigma, observed=1 + 0.5 * x + rng.normal(size=50))
    >>> res = pymc_cv.log_evidence(model, random_seed=1, progressbar=False)
    >>> res.reliable, bool(res.se < 0.05)
    (True, True)
    """
    import pymc as pm  # PyMC loads on first use: it takes seconds

    model = pm.modelcontext(model)
    if sample_kwargs is not None and idata is not None:
        raise ValueError("sample_kwargs= is for pm.sample, which does not run when idata= is given: drop one.")
    seconds, attempts, found = {}, [], {"bridge": None, "ti": None}

    def run_bridge(draws):
        start = time.perf_counter()
        found["bridge"] = bridge_sampling(draws, model, random_seed=random_seed, compile_kwargs=compile_kwargs)
        seconds["bridge"] = time.perf_counter() - start
        attempts.append(Attempt(BRIDGE, found["bridge"]))

    def run_ti():
        start = time.perf_counter()
        try:
            found["ti"] = thermodynamic_integration(model, random_seed=random_seed, progressbar=progressbar,
                                                    compile_kwargs=compile_kwargs)
            attempts.append(Attempt(TI, found["ti"]))
        except ValueError as err:  # a failed Stein check (ScoreMismatchError), or a model TI cannot temper
            attempts.append(Attempt(TI, None, f"{type(err).__name__}: {str(err)[:400]}"))
        seconds["ti"] = time.perf_counter() - start

    def passed():
        return attempts[-1].result is not None and attempts[-1].result.reliable

    if idata is not None:
        run_bridge(idata)
        if not passed():
            run_ti()
    else:
        run_ti()
        if not passed():
            start = time.perf_counter()
            idata = pm.sample(model=model, random_seed=random_seed, progressbar=progressbar, **(sample_kwargs or {}))
            seconds["sampling"] = time.perf_counter() - start
            run_bridge(idata)
        elif sample_kwargs is not None:
            warnings.warn("sample_kwargs= went unused: thermodynamic integration passed its checks, so pm.sample "
                          "did not run.", UserWarning, stacklevel=2)
    return choose_evidence(attempts, found["bridge"], found["ti"], seconds)
