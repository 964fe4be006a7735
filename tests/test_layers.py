"""The package's layers: each imports only downwards, with no cycle, and the array layers need no PyMC,
PyTensor, ArviZ or dask.

Every import counts, at a module's top or inside a function.
"""

import ast
import pathlib
import subprocess
import sys
import textwrap

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1] / "pymc_cv"

# lower rank = lower layer; a module may import its own layer (the same folder) and lower ones
RANKS = {
    "core": 0,
    "evidence": 1,
    "distributed_nystrom": 1,
    "pymc": 2,
    "stan": 2,
    "metacv": 2,
    "arviz layer": 3,
    "__init__": 4,
}
# the top-level modules on the edges: summary and its table, its accessor and plots (ArviZ's containers in and out)
ARVIZ_LAYER = {"summary", "summary_table", "convergence", "accessor", "plots"}
# used by every layer: they import nothing of the package but each other, and their optional
# dependencies (dask, rich) only when used
EVERYWHERE = {"cluster", "progress"}
# ArviZ's containers and versions: for the edges and the ArviZ layer, not for the array layers
ARVIZ_SHARED = {"compat", "idata_groups", "batched_diagnostics"}
HEAVY = ("pymc", "pytensor", "arviz", "arviz_base", "arviz_stats", "arviz_plots", "xarray_einstats", "dask",
         "distributed", "bambi", "stan", "httpstan", "cmdstanpy", "numba")


def _module_name(path):
    rel = path.relative_to(ROOT.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__" and len(parts) > 1:
        parts = parts[:-1]
    return ".".join(parts)


def _unit(module):
    """The layer unit of a module: its folder under pymc_cv, or the top-level module's own name."""
    parts = module.split(".")
    unit = "__init__" if len(parts) == 1 else parts[1]
    return "arviz layer" if unit in ARVIZ_LAYER else unit


def _imports(path):
    """(target, line) for every import of ``path``; targets of the package as full module names."""
    module = _module_name(path)
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                is_module = (ROOT.parent / (sub.replace(".", "/") + ".py")).exists() or (
                    ROOT.parent / sub.replace(".", "/")).is_dir()
                yield (sub if target.startswith("pymc_cv") and is_module else target), node.lineno


def _graph():
    return {_module_name(p): list(_imports(p)) for p in ROOT.rglob("*.py")}


def test_every_import_goes_downwards():
    wrong = []
    for module, imports in _graph().items():
        unit = _unit(module)
        for target, line in imports:
            if not target.startswith("pymc_cv"):
                continue
            other = _unit(target)
            if other == unit or other in EVERYWHERE:
                continue
            if other in ARVIZ_SHARED:
                if unit in ARVIZ_SHARED or RANKS.get(unit, 0) >= 2:
                    continue
            elif unit in EVERYWHERE | ARVIZ_SHARED:
                if unit in ARVIZ_SHARED and other in EVERYWHERE:
                    continue
            elif other in RANKS and unit in RANKS and RANKS[other] < RANKS[unit]:
                continue
            wrong.append(f"{module}:{line} imports {target}")
    assert not wrong, "imports against the layers:\n" + "\n".join(wrong)


def test_every_module_has_a_layer():
    units = {_unit(m) for m in _graph()}
    assert units <= set(RANKS) | EVERYWHERE | ARVIZ_SHARED, units - set(RANKS) - EVERYWHERE - ARVIZ_SHARED


def test_the_array_layers_import_no_sampler_arviz_or_dask():
    wrong = [f"{module}:{line} imports {target}" for module, imports in _graph().items()
             if _unit(module) in ("core", "evidence") for target, line in imports
             if target.split(".")[0] in HEAVY]
    assert not wrong, "\n".join(wrong)


def test_no_import_cycle():
    graph = {m: {t for t, _ in imps if t.startswith("pymc_cv")} for m, imps in _graph().items()}
    # a package's __init__ re-exports its modules: only cycles through modules are cycles
    graph = {m: {t for t in targets if t in graph and not (t == m.rsplit(".", 1)[0])} for m, targets in graph.items()}
    state, cycles = {}, []

    def visit(m, stack):
        state[m] = "open"
        for t in sorted(graph[m]):
            if state.get(t) == "open" and t != m:
                cycles.append(" -> ".join(stack[stack.index(t):] + [t]))
            elif t not in state:
                visit(t, stack + [t])
        state[m] = "done"

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])
    cycles = [c for c in cycles if not all(len(x.split(".")) <= 2 and x.endswith(("core", "evidence")) for x in
                                           c.split(" -> "))]
    assert not cycles, "\n".join(cycles)


@pytest.mark.parametrize("layer", ["core", "evidence"])
def test_the_array_layers_import_without_pymc_arviz_or_dask(layer):
    code = textwrap.dedent(f"""
        import importlib, importlib.abc, pathlib, sys, types
        HEAVY = {HEAVY!r}

        class Refuse(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path, target=None):
                if name.split(".")[0] in HEAVY:
                    raise ImportError(f"{{name}} is not available here")
                return None

        sys.meta_path.insert(0, Refuse())
        root = pathlib.Path({str(ROOT)!r})
        package = types.ModuleType("pymc_cv")  # the package's own __init__ wires ArviZ in: not loaded here
        package.__path__ = [str(root)]
        sys.modules["pymc_cv"] = package
        for path in sorted((root / {layer!r}).rglob("*.py")):
            name = ".".join(path.relative_to(root.parent).with_suffix("").parts).removesuffix(".__init__")
            importlib.import_module(name)
        print("ok", sorted(m for m in sys.modules if m.split(".")[0] in HEAVY))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip() == "ok []"


def test_the_core_says_what_it_needs_when_nothing_is_installed():
    code = textwrap.dedent(f"""
        import pathlib, sys, types
        import numpy as np
        root = pathlib.Path({str(ROOT)!r})
        package = types.ModuleType("pymc_cv")
        package.__path__ = [str(root)]
        sys.modules["pymc_cv"] = package
        from pymc_cv.core.standard_errors import mcse_mean
        print(mcse_mean(np.arange(10.0)))                 # independent draws: no ESS needed
        try:
            mcse_mean(np.arange(10.0), np.repeat([0, 1], 5))
        except RuntimeError as err:
            print(err)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    first, second = out.stdout.strip().split("\n")
    assert float(first) == pytest.approx(float(__import__("numpy").std(range(10), ddof=1) / 10 ** 0.5))
    assert "import pymc_cv" in second and "install" in second
