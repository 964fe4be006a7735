"""Independent units of work (rungs, chains, task groups) on a dask.distributed cluster.

pymc-cv runs no pool of its own.  Given a ``dask.distributed.Client`` (a ``LocalCluster`` on one
machine, or a scheduler address for a real cluster) the units are submitted to its workers;
without one they run here, in order, and dask is never imported.  A unit's result depends only
on its arguments (every seed is drawn before anything is submitted), so the numbers do not
depend on the number of workers or on the order in which they finish.

Large inputs that every unit needs (the model, a posterior's draws and scores) are scattered
to every worker once.  PyTensor functions are compiled on a worker at its first unit and cached
there per model (``pymc.tempering.compiled``), not per unit.  dask's nanny starts each
worker process with one BLAS/OpenMP thread (``distributed.nanny.pre-spawn-environ``), so
``n_workers`` processes on as many cores do not oversubscribe them.
"""

from __future__ import annotations

from .progress import progress_bar

# dask.distributed loads inside the functions that use it, and only with a client: it is optional.

__all__ = ["check_client", "map_units"]


def check_client(client):
    """``client`` itself when it is a ``dask.distributed.Client`` or None; an error saying what to pass otherwise."""
    if client is None:
        return None
    try:
        from distributed import Client
    except ImportError as err:
        raise ImportError("client= needs dask.distributed: pip install 'pymc-cv[dask]'.") from err
    if not isinstance(client, Client):
        raise TypeError(f"client must be a dask.distributed.Client, e.g. Client(LocalCluster(n_workers=2, "
                        f"threads_per_worker=1)) or Client('tcp://scheduler:8786'); got {type(client).__name__}.")
    return client


def map_units(fn, units, *, shared=(), client=None, progressbar=False, description="Units", on_result=None):
    """``[fn(*shared, unit) for unit in units]``, here or on the workers of ``client``.

    Parameters
    ----------
    fn : callable
        A module-level function (workers import it by name), pure in its arguments.
    units : list
        One small argument per unit (a temperature and its seed, a chain's seed, a task group).
    shared : tuple
        Arguments every unit needs; with a client each is sent to every worker once.
    client : dask.distributed.Client, optional
    progressbar : bool
        One step per finished unit.
    description : str
    on_result : callable, optional
        ``on_result(k, result)`` as soon as unit k is done (in order here, in the order the
        workers finish with a client), e.g. to process finished units while others still run.

    Returns
    -------
    list
        The units' results in the order of ``units``.
    """
    client = check_client(client)
    units = list(units)
    with progress_bar(progressbar) as bar:
        task = bar.add_task(description, completed=0, total=len(units))
        if client is None:
            out = []
            for k, unit in enumerate(units):
                out.append(fn(*shared, unit))
                bar.advance(task, 1)
                if on_result is not None:
                    on_result(k, out[-1])
            return out
        from distributed import as_completed

        # hash=False: dask would otherwise tokenise a model by pickling it twice
        remote = [client.scatter(s, broadcast=True, hash=False) for s in shared]
        futures = [client.submit(fn, *remote, unit, pure=False) for unit in units]
        index = {f.key: k for k, f in enumerate(futures)}
        try:
            for future in as_completed(futures):
                bar.advance(task, 1)
                if on_result is not None:
                    on_result(index[future.key], future.result())
            return client.gather(futures)
        finally:
            client.cancel(futures + remote)
