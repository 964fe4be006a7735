"""What a kernel fit with held-out residuals takes: the stacked draws of its tasks, and its kernel.

Every solver (exact, inducing points here or on a cluster, the inducing-point search) takes one
:class:`HeldoutProblem` and one :class:`KernelSpec`, so the twelve arrays and settings of a fit
travel together and in one order.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

__all__ = ["HeldoutProblem", "KernelSpec"]


class HeldoutProblem(NamedTuple):
    """The draws of T tasks stacked for one fit, with the held-out fold of each draw.

    Attributes
    ----------
    X, S : array (N, d)
        The draws (standardised) and their scores.
    Y : array (N, k)
        The integrands' values (standardised), k columns fitted at once.
    tau : array of int (N,)
        The task of each draw (all 0 for one target).
    T : int
        The number of tasks.
    labels : array of int (N,)
        The held-out fold of each draw (``heldout.fold_labels``).
    """

    X: np.ndarray
    S: np.ndarray
    Y: np.ndarray
    tau: np.ndarray
    T: int
    labels: np.ndarray

    def rows(self, idx):
        """The same problem on the draws ``idx`` (an index array, a mask or a permutation)."""
        return HeldoutProblem(self.X[idx], self.S[idx], self.Y[idx], self.tau[idx], self.T, self.labels[idx])


class KernelSpec(NamedTuple):
    """The kernel of a fit.

    Attributes
    ----------
    kernel : Kernel
        The base kernel of the Stein kernel, hyperparameters set.
    B : array (T, T)
        The task matrix of the matrix-valued kernel (``[[1]]`` for one target).
    nugget : float or array (N,)
        The regulariser relative to the mean diagonal of the Stein kernel (per draw where draws
        carry multiplicities).
    orders : list of int
        The polynomial orders fitted with the kernel (0: the CF; one fit per order).
    """

    kernel: object
    B: np.ndarray
    nugget: object
    orders: list
