"""The printed form of summary's table: CV columns first, in 80 characters, each estimate to the digits
its standard error warrants; the values themselves raw."""

import numpy as np
import pandas as pd

from pymc_cv.summary_table import COMPACT, SummaryTable, formatted


def _table(n_rows=18):
    rng = np.random.default_rng(0)
    labels = [f"theta[{i}]" for i in range(n_rows)]
    columns = {
        "cv_mean": rng.normal(4, 2, n_rows), "cv_mcse": rng.uniform(0.002, 0.03, n_rows),
        "mean": rng.normal(4, 2, n_rows), "mcse_mean": rng.uniform(0.04, 0.1, n_rows),
        "variance_reduction": rng.uniform(10, 3e4, n_rows), "cv_ess": rng.uniform(1e4, 2e5, n_rows),
        "cv_sd": rng.uniform(0.9, 6, n_rows), "cv_mcse_sd": rng.uniform(0.002, 0.03, n_rows),
        "sd": rng.uniform(0.9, 6, n_rows), "mcse_sd": rng.uniform(0.01, 0.06, n_rows),
        "ess_bulk": rng.uniform(2000, 7000, n_rows), "r_hat": rng.uniform(0.999, 1.004, n_rows),
        "method": ["secf"] * n_rows, "se_reliable": np.ones(n_rows, dtype=bool),
    }
    return SummaryTable(pd.DataFrame(columns, index=labels))


def test_print_shows_the_compact_cv_first_columns_in_80_characters():
    table = _table()
    lines = repr(table).splitlines()
    assert lines[0].split() == COMPACT
    assert max(len(line) for line in lines) <= 80
    assert lines[-1] == "[18 rows x 14 columns; 6 more in table.to_string(); see help(pymc_cv.summary)]"
    every = table.to_string().splitlines()[0].split()
    assert every == list(table.columns)


def test_estimates_are_printed_to_the_second_significant_digit_of_their_se():
    table = SummaryTable(pd.DataFrame({"cv_mean": [4.399528, -0.0857203], "cv_mcse": [0.0103, 0.003048],
                                       "mean": [6.304199, 1234.5678], "mcse_mean": [0.100322, 12.5],
                                       "cv_ess": [103637.85, np.nan], "r_hat": [1.002658, 1.0]},
                                      index=["mu", "eta"]))
    shown = formatted(table)
    assert shown.loc["mu"].tolist() == ["4.400", "0.010", "6.30", "0.10", "103637", "1.00"]
    assert shown.loc["eta"].tolist() == ["-0.0857", "0.0030", "1235", "12", "nan", "1.00"]
    # five significant digits at most, however small the se
    assert formatted(SummaryTable(pd.DataFrame({"cv_mean": [1.25708858], "cv_mcse": [3.8e-9]}))).iloc[0, 0] == "1.2571"
    # the values are not rounded
    assert table.loc["mu", "cv_mean"] == 4.399528 and table.loc["eta", "mean"] == 1234.5678


def test_selections_are_plain_dataframes_and_a_table_of_some_columns_shows_them_all():
    table = _table(3)
    assert type(table[["mean", "sd"]]) is pd.DataFrame and type(table.loc["theta[0]"]) is pd.Series
    stats = SummaryTable(table[["cv_mean", "mean", "cv_sd", "sd"]])
    assert repr(stats).splitlines()[0].split() == ["cv_mean", "mean", "cv_sd", "sd"]
    assert repr(stats).splitlines()[-1] == "[3 rows x 4 columns]"
