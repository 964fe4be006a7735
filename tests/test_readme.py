"""The README's and the documentation's examples run as printed and do what they say."""

import re
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).parents[1]
README = (ROOT / "README.md").read_text()


def _example(section, index=0):
    body = README.split(f"## {section}\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", body, re.S)[index]


def _docs_example(page, index=0):
    return re.findall(r"```python\n(.*?)```", (ROOT / "docs" / page).read_text(), re.S)[index]


def _check(table):
    # y ~ N(mu, sigma): the posterior mean of mu is nearly linear in the draws, so a CV removes
    # most of the noise; the CV and MCMC means must agree within the MCMC's error
    row = table.loc["mu"]
    assert row["variance_reduction"] > 10
    assert abs(row["cv_mean"] - row["mean"]) < 4 * row["mcse_mean"]
    assert np.all(np.isfinite(table[["cv_mean", "cv_mcse"]].to_numpy()))


def _printed(section):
    body = README.split(f"## {section}\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```text\n(.*?)```", body, re.S)[0].splitlines()


def _check_printed(section, shown):
    """The output printed under the example has the table's columns, rows and layout (the digits
    differ from one stack's sampler to the other's)."""
    printed, shown = _printed(section), shown.splitlines()
    assert printed[0].split() == shown[0].split()
    assert [line.split()[0] for line in printed[1:3]] == [line.split()[0] for line in shown[1:3]]
    if printed[-1].startswith("["):  # the footer, or the output ends at the last row
        assert printed[-1] == shown[-1]
    assert max(len(line) for line in shown) <= 80


def test_readme_pymc_example(capsys):
    namespace = {}
    exec(compile(_example("Use with PyMC"), "README.md (PyMC)", "exec"), namespace)
    _check(namespace["table"])
    assert {"mu", "sigma"} <= set(namespace["table"].index)
    _check_printed("Use with PyMC", repr(namespace["table"]))


@pytest.mark.slow
def test_readme_stan_example():
    namespace = {}
    exec(compile(_example("Use with Stan"), "README.md (Stan)", "exec"), namespace)
    _check(namespace["table"])
    _check_printed("Use with Stan", repr(namespace["table"]))


def test_readme_bambi_example():
    pytest.importorskip("bambi")
    namespace = {}
    exec(compile(_example("Samplers, Bambi, and the checks before any fit"), "README.md (Bambi)", "exec"), namespace)
    table = namespace["table"]
    assert list(table.index) == ["Intercept", "x"]
    assert np.all(np.abs(table["cv_mean"] - table["mean"]) < 4 * table["mcse_mean"])
    # a row marked unreliable says why in the table's notes
    assert table["se_reliable"].all() or any("unreliable" in n for n in table.attrs["notes"])


def test_readme_nutpie_example():
    pytest.importorskip("nutpie")
    namespace = {}
    exec(compile(_example("Samplers, Bambi, and the checks before any fit", 1), "README.md (nutpie)", "exec"),
         namespace)
    table = namespace["table"]
    assert table.attrs["score_backend"].startswith("the sampler's stored gradients")
    _check(table)


def _readme_model_log_evidence():
    """log p(y) of the README's PyMC model by 2-d quadrature (mu ~ N(0, 10), sigma ~ HalfNormal(5))."""
    from scipy import integrate, stats

    y = np.random.default_rng(0).normal(1.0, 2.0, size=50)
    shift = 107.0

    def density(sigma, mu):
        return np.exp(stats.norm.logpdf(y, mu, sigma).sum() + stats.norm.logpdf(mu, 0, 10)
                      + stats.halfnorm.logpdf(sigma, scale=5) + shift)

    value, _ = integrate.dblquad(density, -10, 10, 0.3, 10, epsabs=1e-12)
    return np.log(value) - shift


@pytest.mark.slow
def test_readme_evidence_example():
    """The evidence guide's TI block on the README's PyMC model, whose HalfNormal scale makes TI's integrand
    singular at t = 0."""
    import matplotlib

    matplotlib.use("Agg")
    namespace = {}
    exec(compile(_example("Use with PyMC"), "README.md (PyMC)", "exec"), namespace)
    exec(compile(_docs_example("guide/evidence.md"), "docs/guide/evidence.md", "exec"), namespace)
    res, truth = namespace["res"], _readme_model_log_evidence()
    assert res.stepping_stone is not None and any("stepping stones" in n for n in res.notes)
    assert abs(res.log_evidence - truth) < min(0.1, 3 * res.se)


def test_docs_arrays_example():
    namespace = {}
    exec(compile(_docs_example("guide/arrays.md"), "docs/guide/arrays.md", "exec"), namespace)
    res, res_vv, new = namespace["res"], namespace["res_vv"], namespace["new"]
    truth = np.array([1.0, np.exp(1 / 8)])
    assert np.all(np.abs(res.estimate - truth) <= 4 * res.se + 1e-10)
    assert np.all(res.variance_reduction > 10)
    assert np.allclose(res_vv.estimate, [1.0, 2.25], atol=1e-6)  # x0^2: exact for ZV-2 / SECF
    assert np.allclose(namespace["fit"].predict(new, -new), new[:, 0] ** 2, atol=1e-6)
