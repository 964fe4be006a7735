"""``SummaryTable``: the DataFrame ``summary`` returns, printed CV-first in a terminal's width.

The values are the raw numbers; only the printed form is shortened, as pandas shortens a wide frame
and ArviZ 1's ``SummaryDataFrame`` rounds one: each estimate is shown to the digits its standard
error warrants, and ``print(table)`` shows the compact set of columns (``COMPACT``) with a line
saying what else the table holds.  ``table.to_string()`` prints every column.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

__all__ = ["COMPACT", "SummaryTable"]

# what a reader looks at first, CV columns before their plain counterparts; 80 characters wide on
# tables like eight schools'; R-hat is in ``se_reliable`` (and in ``to_string()``)
COMPACT = ["cv_mean", "cv_mcse", "mean", "mcse_mean", "cv_sd", "cv_ess", "ess_bulk", "se_reliable"]

# estimate column -> the column of its standard error
_SE_OF = {"cv_mean": "cv_mcse", "mean": "mcse_mean", "cv_sd": "cv_mcse_sd", "sd": "mcse_sd"}


def _se_column(column, columns):
    """The standard error column of ``column`` (interval bounds: ``mcse_<bound>``), or None."""
    if column in _SE_OF:
        return _SE_OF[column]
    plain = column[3:] if column.startswith("cv_") else column
    candidate = ("cv_mcse_" if column.startswith("cv_") else "mcse_") + plain
    return candidate if candidate in columns and not column.startswith("mcse_") else None


def _significant(value, digits):
    return f"{value:.{digits}g}"


def _two_significant(value):
    """Two significant digits, trailing zeros kept (0.010, not 0.01)."""
    if value == 0:
        return "0"
    decimals = 1 - math.floor(math.log10(abs(value)))
    if decimals > 6:
        return f"{value:.1e}"
    return f"{value:.{max(decimals, 0)}f}"


def _to_its_se(value, se):
    """``value`` rounded at the second significant digit of ``se`` (the digits past it are noise), to
    five significant digits at most (a near-exact CV would otherwise widen the column past reading;
    ``cv_mcse`` and ``cv_ess`` say how exact it is)."""
    if not (math.isfinite(se) and se > 0):
        return _significant(value, 4)
    decimals = 1 - math.floor(math.log10(se))
    if value != 0:
        decimals = min(decimals, 4 - math.floor(math.log10(abs(value))))
    return f"{value:.{max(decimals, 0)}f}"


def _cell(column, value, se):
    if isinstance(value, (bool, np.bool_, str)) or value is None:
        return str(value)
    value = float(value)
    if not math.isfinite(value):
        return str(value)
    if column.startswith("ess") or column == "cv_ess":
        # a CV exact to rounding is worth billions of draws: the digits past two say nothing
        return str(int(math.floor(value))) if value < 1e6 else f"{value:.1e}"
    if column == "r_hat":
        return f"{value:.2f}"
    if "mcse" in column or column == "bias_allowance":
        return _two_significant(value)
    if column.startswith("variance_reduction"):
        return _significant(value, 2)
    if se is not None:
        return _to_its_se(value, se)
    return _significant(value, 4)


def formatted(table):
    """A DataFrame of strings: every cell of ``table`` as printed."""
    shown = pd.DataFrame(index=table.index, columns=table.columns, dtype=object)
    for column in table.columns:
        se_column = _se_column(column, table.columns)
        for label in table.index:
            se = table.at[label, se_column] if se_column in table.columns else None
            shown.at[label, column] = _cell(column, table.at[label, column],
                                            None if se is None else float(se))
    return shown


class SummaryTable(pd.DataFrame):
    """The table of :func:`pymc_cv.summary`: a ``pandas.DataFrame`` of raw values that prints compactly.

    ``print(table)`` and the notebook view show the columns of ``COMPACT`` that the table has,
    each estimate rounded at the second significant digit of its standard error, and a line naming
    the columns left out; ``table.to_string()`` prints every column so.  Selections and arithmetic
    give plain DataFrames.
    """

    @property
    def _constructor(self):
        return pd.DataFrame

    def _shown_columns(self):
        """The compact set on a whole table, with the sampler's bias allowance where a row has one; a table of
        some columns (``kind="stats"``) shows them all."""
        if not set(COMPACT) <= set(self.columns):
            return list(self.columns)
        biased = "bias_allowance" in self.columns and bool((self["bias_allowance"] > 0).any())
        return COMPACT[:4] + ["bias_allowance"] + COMPACT[4:] if biased else COMPACT

    def _footer(self, shown):
        size = f"[{len(self.index)} rows x {len(self.columns)} columns"
        left = len(self.columns) - len(shown)
        if not left:
            return size + "]"
        return f"{size}; {left} more in table.to_string(); see help(pymc_cv.summary)]"

    def __repr__(self):
        shown = self._shown_columns()
        return pd.DataFrame.to_string(formatted(self)[shown]) + "\n\n" + self._footer(shown)

    def __str__(self):
        return self.__repr__()

    def _repr_html_(self):
        shown = self._shown_columns()
        return pd.DataFrame.to_html(formatted(self)[shown]) + f"<p>{self._footer(shown)}</p>"

    def to_string(self, *args, **kwargs):
        """Every column (or those given), each value printed as in ``print(table)``."""
        return pd.DataFrame.to_string(formatted(self), *args, **kwargs)
