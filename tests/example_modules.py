"""The example scripts under examples/ as modules, for tests that reuse their pieces."""

import importlib.util
from pathlib import Path

EXAMPLES = Path(__file__).parents[1] / "examples"


def load_example(name):
    """examples/<name>.py imported as a module (the examples directory is not a package)."""
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
