"""Test-suite settings.

Items that build the same Stan program run on one xdist worker (``--dist loadgroup``): httpstan
caches a build by program, but two processes building the same program at once write the same
files; kept on one worker, the first build is reused by the rest.  Items of different programs
are in different groups, so the two workers can build them side by side (a build takes one to
three minutes on a machine that has not built it).

Notebooks run in their short form (``PYMC_CV_NB_FAST=1``; their kernels inherit the variable).

Every process runs one BLAS / OpenMP thread.  Two xdist workers on two cores, each with its own
BLAS threads and ``pm.sample``'s chain processes with theirs, oversubscribe the cores, and
OpenBLAS's spinning threads then slow everything down: two copies of the hierarchical GP notebook
side by side took 240 s with the default threads and 65 s with one each.  The variables are set
here, in the main process, before xdist starts the workers, so the workers, the notebooks'
kernels and the samplers' processes all inherit them before they load a BLAS.
"""

import os

import pytest

os.environ.setdefault("PYMC_CV_NB_FAST", "1")
for _threads in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_threads, "1")

# (part of an item's path, part of its name or "" for any) -> the Stan program it builds
_STAN_PROGRAMS = (
    ("tests/test_stan.py", "lotka_volterra", "stan-lotka-volterra"),
    ("examples/notebooks/lotka_volterra.ipynb", "", "stan-lotka-volterra"),
    ("tests/test_stan.py", "van_der_pol", "stan-van-der-pol"),
    ("tests/test_stan.py", "hierarchical_gp", "stan-hierarchical-gp"),
    # the doctests' normal-mean program, which the TI test reuses
    ("tests/test_stan.py", "thermodynamic_integration", "stan-normal-mean"),
    ("pymc_cv/stan/convert.py", "", "stan-normal-mean"),
    ("pymc_cv/stan/evidence.py", "pystan", "stan-normal-mean"),
    ("tests/test_stan.py", "", "stan-beta-binomial-normal"),
    ("tests/test_readme.py", "stan", "stan-readme"),
)


def _stan_group(item):
    path = item.path.as_posix()
    for part, name, group in _STAN_PROGRAMS:
        if path.endswith(part) and name in item.name:
            return group
    return None


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook turns the marks into groups
def pytest_collection_modifyitems(config, items):
    for item in items:
        group = _stan_group(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
