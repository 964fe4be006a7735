"""Errors that name the user's mistake and the fix: one test per message."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import pymc_cv

pm = pytest.importorskip("pymc")


def _normal_model():
    with pm.Model() as model:
        x = pm.Normal("x", 0, 1)
        pm.Normal("y", x, 1, observed=np.array([0.2, -0.4]))
    return model


def test_a_misspelt_evidence_argument_names_the_function_and_the_likely_spelling():
    with pytest.raises(TypeError, match=r"thermodynamic_integration\(\) got an unexpected keyword argument 'draw' "
                                        r"\(did you mean 'draws'\?\)"):
        pymc_cv.thermodynamic_integration(_normal_model(), draw=500)
    t = np.array([0.0, 1.0])
    arrays = ([np.zeros(4)] * 2, [np.zeros((4, 1))] * 2, [np.zeros((4, 1))] * 2, [np.zeros((4, 1))] * 2)
    with pytest.raises(TypeError, match=r"ti_from_arrays\(\) got an unexpected keyword argument 'fold' "
                                        r"\(did you mean 'folds'\?\)"):
        pymc_cv.ti_from_arrays(t, *arrays, fold=5)


def test_an_improper_prior_in_the_evidence_says_to_give_it_a_proper_one():
    with pm.Model() as model:
        x = pm.Flat("x")
        s = pm.HalfFlat("s")
        pm.Normal("y", x, s, observed=np.array([0.0, 1.0]))
    with pytest.raises(ValueError, match=r"\['x', 's'\] have improper priors .* Give each a proper prior"):
        pymc_cv.thermodynamic_integration(model, progressbar=False)


def test_a_bounded_variable_sampled_without_its_transform_is_named_as_the_cause():
    """Beta(1, 1) on (0, 1) sampled as it is, with the posterior's mass at the boundary 0: the density does
    not vanish there, the Stein identities fail, and the error says why instead of blaming the data."""
    with pm.Model() as model:
        p = pm.Beta("p", 1, 1, default_transform=None)
        pm.Binomial("k", 10, p, observed=0)
        idata = pm.sample(500, tune=500, chains=2, random_seed=1, progressbar=False, nuts_sampler="pymc",
                          compute_convergence_checks=False)
    with pytest.raises(pymc_cv.core.score_check.ScoreMismatchError,
                       match=r"^p sampled on a bounded support without a transform .* \(drop transform=None"):
        pymc_cv.summary(idata, model=model, progressbar=False)


def test_from_cmdstanpy_says_what_a_fit_is():
    pytest.importorskip("cmdstanpy")
    with pytest.raises(TypeError, match="fit= is a str, not a CmdStanPy fit: pass the CmdStanMCMC"):
        pymc_cv.from_cmdstanpy("not a fit")


def test_a_method_forced_on_a_rung_or_row_is_not_told_to_change_it():
    """A CV that did not beat plain MC under a method the caller (or TI's default) chose keeps its estimate
    and says so, without telling a user on the defaults to pass another method."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(400, 1))
    res = pymc_cv.cv_estimate(rng.normal(size=400), x, -x, method="zv1")
    assert any("its estimate is kept, with the held-out se" in n for n in res.notes)
    assert not any("method=" in n for n in res.notes)


def test_the_quickstart_demo_runs_without_a_warning():
    root = Path(__file__).parents[1]
    run = subprocess.run([sys.executable, "-W", "default", str(root / "examples" / "quickstart.py")],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    assert "Warning" not in run.stderr, run.stderr
    mcmc, cv = (float(v) for v in run.stdout.strip().splitlines()[-1].removeprefix("error: MCMC ").split(", CV "))
    assert cv < 1e-3 * mcmc  # lam's posterior mean 23/7: ZV-1 is exact for a Gamma posterior
