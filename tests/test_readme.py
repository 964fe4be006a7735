"""The README's PyMC and Stan examples run as printed and do what they say."""

import re
from pathlib import Path

import numpy as np
import pytest

README = (Path(__file__).parents[1] / "README.md").read_text()


def _example(section):
    body = README.split(f"## {section}\n", 1)[1]
    return re.search(r"```python\n(.*?)```", body, re.S).group(1)


def _check(table):
    # y ~ N(mu, sigma): the posterior mean of mu is nearly linear in the draws, so a CV removes
    # most of the noise; the CV and MCMC means must agree within the MCMC's error
    row = table.loc["mu"]
    assert row["variance_reduction"] > 10
    assert abs(row["cv_mean"] - row["mean"]) < 4 * row["mcse_mean"]
    assert np.all(np.isfinite(table[["cv_mean", "cv_mcse"]].to_numpy()))


def test_readme_pymc_example():
    namespace = {}
    exec(compile(_example("Use with PyMC"), "README.md (PyMC)", "exec"), namespace)
    _check(namespace["table"])
    assert {"mu", "sigma"} <= set(namespace["table"].index)


@pytest.mark.slow
def test_readme_stan_example():
    namespace = {}
    exec(compile(_example("Use with Stan"), "README.md (Stan)", "exec"), namespace)
    _check(namespace["table"])


def test_readme_bambi_example():
    pytest.importorskip("bambi")
    namespace = {}
    exec(compile(_example("Samplers, Bambi, and the checks before any fit"), "README.md (Bambi)", "exec"), namespace)
    table = namespace["table"]
    assert list(table.index) == ["Intercept", "x"]
    assert np.all(np.abs(table["cv_mean"] - table["mean"]) < 4 * table["mcse_mean"])
    # a row marked unreliable says why in the table's notes
    assert table["se_reliable"].all() or any("unreliable" in n for n in table.attrs["notes"])
