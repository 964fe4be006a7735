"""Meta-learned neural control variates (Meta-CVs; Sun, Oates, Briol: thesis chapter 5)."""

from __future__ import annotations

import json
import time

import numpy as np

from ..cluster import check_client, map_units
from ..core import pipeline
from ..core.finalize import Candidate
from ..core.validation import check_chain, check_task
from ..progress import progress_bar
from .maml import InnerLoop, Network, build_functions
from .network import init_params, n_params

__all__ = ["MetaCV"]


def _as_task(task, name):
    if not (isinstance(task, (tuple, list)) and len(task) == 3):
        raise ValueError(f"task {name} must be a (values, samples, scores) triple; got {type(task).__name__}.")
    Y, X, S, one_d = check_task(*task, name=name)
    if not one_d:
        raise ValueError(f"task {name}: `values` must be 1-d (one integrand per task); got shape {Y.shape}.")
    return Y[:, 0], X, S


def _halves(n, chain):
    """Two folds of draws: the first and second half (of each chain, for MCMC draws)."""
    if chain is None:
        idx = np.arange(n)
        return idx[: n // 2], idx[n // 2 :]
    a, b = [], []
    for c in np.unique(chain):
        idx = np.flatnonzero(chain == c)
        a.append(idx[: idx.size // 2]), b.append(idx[idx.size // 2 :])
    return np.concatenate(a), np.concatenate(b)


def _targets(tasks, samples, scores):
    """One pipeline target per distinct array of draws and scores, serving every task given it."""
    rows = {}
    for i in range(len(tasks)):
        rows.setdefault((id(samples[i]), id(scores[i])), []).append(i)
    return [pipeline.Target(tasks[idx[0]][1], tasks[idx[0]][2], tasks[idx[0]][3], rows=idx, label=f"task {idx[0]}")
            for idx in rows.values()]


class MetaCV:
    """A neural Stein control variate meta-learned over many related integration tasks.

    g(x) = c + div u(x) + u(x) . grad log pi(x), with u: R^d -> R^d a small MLP.  ``meta_fit``
    learns an initialisation of u from which one (or a few) gradient steps on a handful of
    draws of a new task give a good CV for it (MAML).  ``estimate`` adapts to each task on half
    of its draws and averages f - (div u + u . score) over the other half (thesis eq. 5.2),
    and by default also the other way round (cross-fitting), so every draw is averaged.

    Parameters
    ----------
    hidden : tuple of int
        Hidden layer widths.
    activation : {"tanh", "sigmoid"}
    inner_steps : int
        Gradient steps of adaptation (L).
    inner_lr : float
        Step size of adaptation (alpha), on standardised values.
    meta_lr : float
        Adam step size of the outer loop.
    meta_iterations : int
    task_batch : int
        Tasks per meta-iteration (B).
    support_size : int, optional
        Draws per task used for adaptation during meta-training (K; as many again are the query
        draws).  Default: half the draws of the smallest task.
    first_order : bool
        First-order MAML (the inner gradients are held constant in the meta-gradient): cheaper.
    random_seed : int
    progressbar : bool
    compile_kwargs : dict, optional
        Passed to ``pytensor.function``.

    Attributes
    ----------
    theta_ : array
        The meta-learned network parameters (after ``meta_fit`` or ``load``).
    history_ : array
        Meta (query) loss per iteration, on standardised values.
    seconds_ : dict
        Wall time of compiling and of meta-training.

    Examples
    --------
    Tasks E[a x^2 + b x] under x ~ N(0, 1) (truth a), four draws each:

    >>> import numpy as np, pymc_cv
    >>> rng = np.random.default_rng(0)
    >>> def task(rng, n=4):
    ...     a, b = rng.uniform(1, 2, size=2)
    ...     x = rng.normal(size=(n, 1))
    ...     return a * x[:, 0] ** 2 + b * x[:, 0], x, -x
    >>> mcv = pymc_cv.MetaCV(hidden=(16,), meta_iterations=300, progressbar=False)
    >>> mcv = mcv.meta_fit(task)
    >>> res = mcv.estimate(*task(np.random.default_rng(1), n=20))
    >>> res.method in ("metacv", "mc")
    True
    """

    def __init__(self, hidden=(64, 64), activation="tanh", inner_steps=1, inner_lr=0.01, meta_lr=2e-3,
                 meta_iterations=4000, task_batch=5, support_size=None, first_order=False, random_seed=0,
                 progressbar=True, compile_kwargs=None):
        self.hidden = tuple(int(h) for h in hidden)
        self.activation = activation
        self.inner_steps = inner_steps
        self.inner_lr = inner_lr
        self.meta_lr = meta_lr
        self.meta_iterations = meta_iterations
        self.task_batch = task_batch
        self.support_size = support_size
        self.first_order = first_order
        self.random_seed = random_seed
        self.progressbar = progressbar
        self.compile_kwargs = compile_kwargs

    # -- settings and fitted state ---------------------------------------------------------
    def _check_settings(self):
        if self.activation not in ("tanh", "sigmoid"):
            raise ValueError(f"activation={self.activation!r}; use 'tanh' or 'sigmoid'.")
        for name in ("inner_steps", "meta_iterations", "task_batch"):
            val = getattr(self, name)
            if int(val) != val or val < (0 if name == "inner_steps" else 1):
                raise ValueError(f"{name}={val!r}; use a positive integer.")
        for name in ("inner_lr", "meta_lr"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name}={getattr(self, name)!r}; use a positive step size.")
        if not self.hidden or min(self.hidden) < 1:
            raise ValueError(f"hidden={self.hidden!r}; give at least one layer width, e.g. (64, 64).")

    def _compile(self, theta, training=True):
        start = time.perf_counter()
        self._theta_shared, self._train_step, self._adapt = build_functions(
            Network(self.d_, self.hidden, self.activation), InnerLoop(self.inner_lr, int(self.inner_steps),
                                                                       self.first_order),
            self.meta_lr, theta, self.compile_kwargs, training=training)
        return time.perf_counter() - start

    def _check_fitted(self):
        if not hasattr(self, "theta_"):
            raise ValueError("This MetaCV is not meta-trained yet: call .meta_fit(tasks) or MetaCV.load(path).")
        if not hasattr(self, "_adapt"):
            self._compile(self.theta_, training=False)

    def __getstate__(self):
        # compiled functions are rebuilt where they are used (``_check_fitted``): a dask worker only
        # adapts, and unpickling the meta-training step recompiles its second-order graph, minutes per
        # worker on a cold PyTensor cache
        state = dict(self.__dict__)
        for name in ("_theta_shared", "_train_step", "_adapt"):
            state.pop(name, None)
        return state

    def _standardise(self, X, S, f):
        return (X - self.x_loc_) / self.x_scale_, S * self.x_scale_, f / self.f_scale_

    def _batch(self, tasks):
        """Standardised draws, scores and values of (values, samples, scores) triples of equal
        sizes, stacked over tasks: (B, K, d), (B, K, d), (B, K)."""
        parts = [self._standardise(X, S, y) for y, X, S in tasks]
        return tuple(np.stack([p[k] for p in parts]) for k in range(3))

    # -- meta-training --------------------------------------------------------------------
    def meta_fit(self, tasks, *, n_probe=50):
        """Meta-train on a collection or a source of tasks.

        Parameters
        ----------
        tasks : sequence of (values, samples, scores) or callable
            Stored tasks (each meta-iteration draws ``task_batch`` of them and, from each,
            2 x ``support_size`` random draws split into support and query), or a callable
            ``tasks(rng)`` returning a fresh task, called ``task_batch`` times per iteration (as
            the thesis's synthetic experiments do).
        n_probe : int
            For a callable source: tasks drawn first to fix the standardisation and sizes.

        Returns
        -------
        self
        """
        self._check_settings()
        rng = np.random.default_rng(self.random_seed)
        source = tasks if callable(tasks) else None
        stored = None
        if source is None:
            stored = [_as_task(t, i) for i, t in enumerate(tasks)]
            if not stored:
                raise ValueError("`tasks` is empty; give at least one (values, samples, scores) triple.")
            probe = stored
        else:
            probe = [_as_task(source(rng), f"from the source #{i}") for i in range(int(n_probe))]
        d = probe[0][1].shape[1]
        if any(X.shape[1] != d for _, X, _ in probe):
            raise ValueError("All tasks must have draws of the same dimension d.")
        n_min = min(y.size for y, _, _ in probe)
        K = int(self.support_size or n_min // 2)
        if K < 1 or 2 * K > n_min:
            raise ValueError(f"support_size={K} needs tasks of at least {2 * K} draws; the smallest has {n_min}.")
        Xall = np.concatenate([X for _, X, _ in probe])
        self.d_ = d
        self.x_loc_ = Xall.mean(axis=0)
        self.x_scale_ = np.where(Xall.std(axis=0) > 0, Xall.std(axis=0), 1.0)
        within = np.mean([np.var(y) for y, _, _ in probe])
        self.f_scale_ = float(np.sqrt(within)) if within > 0 else 1.0
        self.support_size_ = K
        theta0 = init_params(d, self.hidden, rng)
        compile_seconds = self._compile(theta0)

        B = int(self.task_batch)
        history = np.empty(int(self.meta_iterations))
        start = time.perf_counter()
        with progress_bar(self.progressbar) as bar:
            job = bar.add_task("Meta-training", completed=0, total=int(self.meta_iterations))
            for it in range(int(self.meta_iterations)):
                batch = []
                for _ in range(B):
                    if source is not None:
                        y, X, S = _as_task(source(rng), "from the source")
                    else:
                        y, X, S = stored[rng.integers(len(stored))]
                    if y.size < 2 * K:
                        raise ValueError(f"a task has {y.size} draws; support_size={K} needs {2 * K}.")
                    pick = rng.permutation(y.size)[: 2 * K]
                    batch.append((y[pick], X[pick], S[pick]))
                Z, SZ, F = self._batch(batch)
                history[it] = self._train_step(Z[:, :K], SZ[:, :K], F[:, :K], Z[:, K:], SZ[:, K:], F[:, K:])
                if not np.isfinite(history[it]):
                    raise FloatingPointError(
                        f"the meta loss became {history[it]} at iteration {it}; lower meta_lr or inner_lr.")
                if it % 50 == 49 or it == int(self.meta_iterations) - 1:
                    bar.update(job, completed=it + 1)
        self.theta_ = np.array(self._theta_shared.get_value())
        self.history_ = history
        self.seconds_ = {"compile": compile_seconds, "meta_training": time.perf_counter() - start}
        return self

    # -- estimation -----------------------------------------------------------------------
    def _stein_after_adaptation(self, fit, apply):
        """Stein term (div u + u . score) at the ``apply`` draws after adapting on ``fit`` draws,
        for a batch of tasks of equal sizes; in the units of f."""
        self._check_fitted()  # compiles the adaptation where it is missing (unpickled on a worker)
        Zf, Sf, Ff = self._batch(fit)
        Za, Sa, _ = self._batch(apply)
        return np.asarray(self._adapt(Zf, Sf, Ff, Za, Sa)) * self.f_scale_

    def _check_tasks(self, values, samples, scores, chain):
        if not (len(values) == len(samples) == len(scores) == len(chain)):
            raise ValueError("`values`, `samples`, `scores` (and `chain`) must hold one array per task.")
        tasks = []
        for i in range(len(values)):
            y, X, S = _as_task((values[i], samples[i], scores[i]), i)
            if X.shape[1] != self.d_:
                raise ValueError(f"task {i} has d = {X.shape[1]}; this MetaCV was meta-trained with d = {self.d_}.")
            if y.size < 4:
                raise ValueError(f"task {i} has {y.size} draws; a Meta-CV needs at least 4 (2 to adapt, 2 to average).")
            tasks.append((y, X, S, None if chain[i] is None else check_chain(chain[i], y.size)))
        return tasks

    def _heldout_residuals(self, tasks, crossfit):
        """Per task: the mean of held-out residuals, the residuals (sampling order) and their chains.
        Each draw's residual comes from the network adapted on the other half; tasks of equal
        half sizes are adapted in one batch."""
        halves = [_halves(y.size, c) for y, _, _, c in tasks]
        resid = [dict() for _ in tasks]
        for fit_h, apply_h in [(0, 1), (1, 0)] if crossfit else [(0, 1)]:
            batches = {}
            for i in range(len(tasks)):
                batches.setdefault((halves[i][fit_h].size, halves[i][apply_h].size), []).append(i)
            for idx in batches.values():
                fit = [tuple(a[halves[i][fit_h]] for a in tasks[i][:3]) for i in idx]
                app = [tuple(a[halves[i][apply_h]] for a in tasks[i][:3]) for i in idx]
                stein = self._stein_after_adaptation(fit, app)
                for j, i in enumerate(idx):
                    resid[i][apply_h] = app[j][0] - stein[j]
        est, heldout, resid_chain = [], [], []
        for i, (_, _, _, c) in enumerate(tasks):
            used = np.concatenate([halves[i][h] for h in sorted(resid[i])])
            order = np.argsort(used, kind="stable")  # back to sampling order, for the ESS
            r = np.concatenate([resid[i][h] for h in sorted(resid[i])])[order]
            est.append(r.mean())
            heldout.append(r)
            resid_chain.append(None if c is None else c[used[order]])
        return est, heldout, resid_chain

    def _heldout_on(self, tasks, crossfit, client):
        """:meth:`_heldout_residuals`, here or in chunks of tasks on the workers of ``client``."""
        if client is None:
            return self._heldout_residuals(tasks, crossfit)

        # a few chunks per worker balance uneven tasks; within a chunk tasks still adapt in batches
        n_chunks = min(len(tasks), 4 * max(len(client.scheduler_info()["workers"]), 1))
        chunks = [[tasks[i] for i in idx] for idx in np.array_split(np.arange(len(tasks)), n_chunks)]
        parts = map_units(_heldout_chunk, chunks, shared=(self, crossfit), client=client)
        return tuple([x for part in parts for x in part[k]] for k in range(3))

    def estimate(self, values, samples, scores, *, chain=None, crossfit=True, fallback=True, check_scores=True,
                 client=None):
        """Estimate E[f] for one task, or for many (sequences of per-task arrays).

        Parameters
        ----------
        values, samples, scores : arrays (n,), (n, d), (n, d), or sequences of them (one per task)
        chain : array (n,) or sequence, optional
            Chain labels of MCMC draws: the halves are then taken within each chain.
        crossfit : bool
            Adapt on each half and average over the other (all draws averaged).  False: adapt on
            the first half and average over the second only (the thesis's estimator).
        fallback : bool
            Report the MC mean (method "mc") for tasks where the held-out residual variance is
            not below the sample variance of f.
        check_scores : bool
            Check each task's scores against its draws (see :func:`pymc_cv.cv_estimate`); with
            the few draws of a meta-task only a gross failure counts (an error).
        client : dask.distributed.Client, optional
            Adapt the network to the tasks on the cluster's workers (chunks of tasks; the fitted
            MetaCV is sent to every worker once).  The same numbers as without it.

        Returns
        -------
        CVResult
            Arrays over tasks (scalars for one task, as :func:`pymc_cv.cv_estimate` gives for 1-d values).
        """
        self._check_fitted()
        one = not isinstance(values, (list, tuple))
        if one:
            values, samples, scores, chain = [values], [samples], [scores], [chain]
        elif chain is None:
            chain = [None] * len(values)
        tasks = self._check_tasks(values, samples, scores, chain)
        targets = _targets(tasks, samples, scores)
        findings = pipeline.check_scores(targets) if check_scores else []
        # (only tasks with 25 draws or more can tell)
        findings += pipeline.check_tails([tg._replace(rows=t, label=f"task {t}") for t, tg in
                                          enumerate(pipeline.Target(X, S, c) for _, X, S, c in tasks)])
        client = check_client(client)
        info = {"support_size": self.support_size_, "inner_steps": self.inner_steps}

        def adapt(notes):
            est, heldout, resid_chain = self._heldout_on(tasks, crossfit, client)
            return [Candidate("metacv", np.array(est), heldout, heldout, None, info, resid_chain=resid_chain)]

        res = pipeline.run([y for y, *_ in tasks], [c for *_, c in tasks], adapt, findings, kind="task",
                           choose="first", fallback=fallback)
        small = np.array([y.size < 40 for y, *_ in tasks])
        if small.any():
            res.notes.append(f"{int(small.sum())} task(s) have fewer than 40 draws: their se comes from a few "
                             "held-out residuals and is itself rough.")
            res.se_reliable = res.se_reliable & ~small
        res.hyperparameters = [info]
        return pipeline.squeeze(res) if one else res

    # -- persistence ----------------------------------------------------------------------
    _SETTINGS = ("hidden", "activation", "inner_steps", "inner_lr", "meta_lr", "meta_iterations", "task_batch",
                 "support_size", "first_order", "random_seed")

    def save(self, path):
        """Save the settings and the meta-learned state to ``path`` (a .npz file)."""
        if not hasattr(self, "theta_"):
            raise ValueError("Nothing to save: call .meta_fit(tasks) first.")
        settings = {k: getattr(self, k) for k in self._SETTINGS}
        np.savez(path, settings=json.dumps(settings), theta=self.theta_, x_loc=self.x_loc_, x_scale=self.x_scale_,
                 f_scale=self.f_scale_, d=self.d_, support_size=self.support_size_, history=self.history_)

    @classmethod
    def load(cls, path, **kwargs):
        """A MetaCV from :meth:`save`'s file; ``kwargs`` (e.g. ``compile_kwargs``) override settings."""
        with np.load(path, allow_pickle=False) as z:
            settings = json.loads(str(z["settings"]))
            settings.update(kwargs)
            obj = cls(**settings)
            obj.theta_ = z["theta"]
            obj.x_loc_, obj.x_scale_ = z["x_loc"], z["x_scale"]
            obj.f_scale_, obj.d_ = float(z["f_scale"]), int(z["d"])
            obj.support_size_ = int(z["support_size"])
            obj.history_ = z["history"]
        if obj.theta_.size != n_params(obj.d_, obj.hidden):
            raise ValueError(f"{path}: the stored parameters do not match hidden={obj.hidden} and d={obj.d_}.")
        return obj


def _heldout_chunk(metacv, crossfit, tasks):
    """A unit of :meth:`MetaCV.estimate` on a dask worker: held-out residuals of some tasks."""
    return metacv._heldout_residuals(tasks, crossfit)
