"""Sphinx configuration of the pymc-cv documentation (``pip install -e ".[docs]"``, then
``sphinx-build -W --keep-going -b html docs docs/_build/html``)."""

import json
import os
from pathlib import Path

import pymc_cv

project = "pymc-cv"
author = "the pymc-cv developers"
copyright = "the pymc-cv developers"
release = version = pymc_cv.__version__

extensions = [
    "myst_nb",
    "numpydoc",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.intersphinx",
]
# rst first: autosummary writes its stubs with the first suffix, and they are reStructuredText
source_suffix = {".rst": "restructuredtext", ".md": "myst-nb", ".ipynb": "myst-nb"}
exclude_patterns = ["_build", "**.ipynb_checkpoints", "notebooks/README.md"]

# the notebooks are executed by the test suite (nbmake), which in CI writes their outputs into them
# (--overwrite); a notebook stored without any output (a fresh clone) is executed here, in the short form
# the tests use.  myst-nb's "auto" would also rerun a notebook whose import cell alone has no output.
os.environ.setdefault("PYMC_CV_NB_FAST", "1")


def _has_outputs(notebook):
    cells = json.loads(notebook.read_text())["cells"]
    return any(cell.get("outputs") for cell in cells if cell["cell_type"] == "code")


nb_execution_mode = "force"
nb_execution_excludepatterns = [f"notebooks/{nb.name}" for nb in sorted(Path(__file__).parent.glob("notebooks/*.ipynb"))
                                if _has_outputs(nb)]
nb_execution_timeout = 1200
nb_execution_raise_on_error = True
# The samplers' progress on stderr is left out.
nb_output_stderr = "remove"
nb_merge_streams = True
myst_enable_extensions = ["dollarmath"]
myst_heading_anchors = 3

autosummary_generate = True
autodoc_typehints = "none"
numpydoc_show_class_members = False
numpydoc_xref_param_type = False

# no network: intersphinx has no inventories to fetch, and links stay plain text
intersphinx_mapping = {}

html_theme = "pydata_sphinx_theme"
html_title = "pymc-cv"
html_theme_options = {"navigation_with_keys": False, "show_toc_level": 2}
html_static_path = []
