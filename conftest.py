"""Test-suite settings.

Every item that builds a Stan program runs on one xdist worker (``--dist loadgroup``): httpstan
caches a build by program, but two processes building the same program at once write the same
files; kept on one worker, the first build is reused by the rest.

Notebooks run in their short form (``PYMC_CV_NB_FAST=1``; their kernels inherit the variable).
"""

import os

import pytest

os.environ.setdefault("PYMC_CV_NB_FAST", "1")

_STAN_FILES = ("tests/test_stan.py", "pymc_cv/adapters/stan.py", "examples/notebooks/lotka_volterra.ipynb")


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook turns the marks into groups
def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.path.as_posix().endswith(_STAN_FILES) or "pystan" in item.name:
            item.add_marker(pytest.mark.xdist_group("stan"))
