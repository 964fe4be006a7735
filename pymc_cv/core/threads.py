"""How many BLAS threads the kernel linear algebra uses.

Kernel CVs make many calls on small matrices (a REML optimisation is hundreds of Cholesky
factorisations of a few hundred draws), interleaved with Python.  Measured on 2 cores with
OpenBLAS: a 200 x 200 Cholesky inside the tuning loop took 4.8 ms with 2 threads and 0.12 ms
with 1 (alone, both take ~0.2 ms), and a whole control functional on 200 draws 1.1 s against
0.10 s.  Large factorisations do gain from threads (8000 x 8000: 4.7 s on 1, 2.1 s on 2), so
one thread is used only up to ``SMALL`` draws.  ``threadpoolctl`` (a scikit-learn dependency)
sets the limit for whichever BLAS numpy and scipy load.
"""

from __future__ import annotations

import functools
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext

# threadpoolctl loads inside the functions that use it: `import pymc_cv` stays cheap without it.

__all__ = ["SMALL", "blas_threads", "map_small", "one_blas_thread", "single_threaded_when_small"]

SMALL = 1500


@functools.lru_cache(maxsize=1)
def _controller():
    # finding the loaded BLAS libraries takes ~3 ms, a third of a whole small fit: do it once
    # (numpy's and scipy's BLAS are loaded by then: the core imports both)
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController()


def blas_threads(n):
    """A context: one BLAS thread for problems of at most ``SMALL`` draws, the default above."""
    if n > SMALL:
        return nullcontext()
    return _controller().limit(limits=1, user_api="blas")


def one_blas_thread():
    """A context with one BLAS thread.  Units of work that may run here or on a dask worker (whose
    nanny starts it with one thread) use it, so that both sum in the same order and give the same
    bits: NUTS amplifies a last-digit difference in a gradient into different draws."""
    return _controller().limit(limits=1, user_api="blas")


def single_threaded_when_small(size_of):
    """Decorator: run the function under ``blas_threads(size_of(*args, **kwargs))``."""

    def wrap(fn):
        @functools.wraps(fn)
        def inner(*args, **kwargs):
            try:
                n = int(size_of(*args, **kwargs))
            except Exception:  # malformed input: the function's own validation explains it
                n = 0
            with blas_threads(n):
                return fn(*args, **kwargs)

        return inner

    return wrap


def _usable_cores():
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def map_small(fn, items, n):
    """``[fn(x) for x in items]``, where each call works on problems of ``n`` draws.

    Up to ``SMALL`` draws each call runs with one BLAS thread, in turn or side by side: two REML
    tunings of 400 draws are Python loops around small factorisations that cannot use a second core,
    and their numpy calls release the GIL.  Side by side, one thread per item up to the usable cores,
    but only from the main thread: on a dask worker or in a user's own pool the caller already sets
    how many run at once.  Either way every call gives the same numbers.
    """
    items = list(items)
    workers = min(len(items), _usable_cores())
    if n > SMALL or workers < 2 or threading.current_thread() is not threading.main_thread():
        return [fn(x) for x in items]
    # the limit is process-wide: set once here, so that no thread's exit restores two BLAS threads
    # while another still runs
    with one_blas_thread(), ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(fn, items))
