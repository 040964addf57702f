"""The package's modules import each other without cycles.

Every import counts, including those inside functions (an import moved into a function to
dodge a cycle is still a cycle); imports under ``if TYPE_CHECKING:`` do not, since they never
run.
"""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

import mbs

PACKAGE_ROOT = Path(mbs.__file__).parent


def module_names() -> dict[str, Path]:
    modules = {}
    for path in PACKAGE_ROOT.rglob("*.py"):
        parts = ["mbs", *path.relative_to(PACKAGE_ROOT).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = path
    return modules


def imported_modules(name: str, path: Path, known: set[str]) -> set[str]:
    tree = ast.parse(path.read_text())
    skipped = {id(node) for branch in ast.walk(tree) if isinstance(branch, ast.If)
               and "TYPE_CHECKING" in ast.unparse(branch.test) for node in ast.walk(branch)}
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            targets.add(base)
            targets.update(f"{base}.{alias.name}" for alias in node.names)
    return {target for target in targets if target in known and target != name}


def import_graph() -> nx.DiGraph:
    modules = module_names()
    graph = nx.DiGraph()
    for name, path in modules.items():
        graph.add_node(name)
        for target in imported_modules(name, path, set(modules)):
            # importing a package's own submodule from its __init__ is not a cycle of modules
            if not target.startswith(name + "."):
                graph.add_edge(name, target)
    return graph


def test_the_import_graph_covers_the_package():
    graph = import_graph()
    assert {"mbs.simulate", "mbs.solution", "mbs.engine.newton"} <= set(graph)
    assert graph.has_edge("mbs.simulate", "mbs.solution")


def test_no_import_cycles():
    graph = import_graph()
    cycles = [sorted(group) for group in nx.strongly_connected_components(graph)
              if len(group) > 1]
    assert not cycles, f"import cycles: {cycles}"


#: The layers of the package, lowest first: a module imports only from its own layer and the
#: layers below it (a function-level import counts; ``TYPE_CHECKING`` imports do not).
LAYERS = {
    "model building": ["mbs.errors", "mbs.validation", "mbs.rotations", "mbs.elements",
                       "mbs.quadratic", "mbs.time_span", "mbs.bodies", "mbs.joints",
                       "mbs.forces"],
    "compiled model": ["mbs.potential_group", "mbs.model", "mbs.symmetry"],
    "engine": ["mbs.engine"],
    "backends": ["mbs.backends"],
    "methods": ["mbs.solvers"],
}


def layer_of(module: str) -> int | None:
    for rank, prefixes in enumerate(LAYERS.values()):
        if any(module == prefix or module.startswith(prefix + ".") for prefix in prefixes):
            return rank
    return None


def test_layers_import_only_downwards():
    """Model building and the compiled model know nothing of the schemes; the engine (step
    equations, Newton, initial guess) knows no backend and no scheme; backends know no
    scheme."""
    upward = [(source, target) for source, target in import_graph().edges()
              if layer_of(source) is not None
              and (layer_of(target) is None or layer_of(target) > layer_of(source))]
    assert not upward, f"imports from a higher layer: {upward}"


def test_the_layer_check_sees_an_upward_import(tmp_path):
    """The check itself: an engine module importing a scheme is reported."""
    engine = tmp_path / "engine.py"
    engine.write_text("def later():\n    from mbs.solvers import base\n")
    targets = imported_modules("mbs.engine.newton", engine, {"mbs.solvers.base"})
    assert targets == {"mbs.solvers.base"}
    assert layer_of("mbs.solvers.base") > layer_of("mbs.engine.newton")


def test_a_cycle_through_a_function_level_import_is_found(tmp_path):
    """The detector itself: a function-level import back to the importer is a cycle."""
    first = tmp_path / "first.py"
    first.write_text("import mbs.second\n")
    second = tmp_path / "second.py"
    second.write_text("def later():\n    import mbs.first\n")
    graph = nx.DiGraph()
    known = {"mbs.first", "mbs.second"}
    for name, path in (("mbs.first", first), ("mbs.second", second)):
        for target in imported_modules(name, path, known):
            graph.add_edge(name, target)
    assert [sorted(c) for c in nx.strongly_connected_components(graph) if len(c) > 1] == [
        ["mbs.first", "mbs.second"]]


def test_import_mbs_is_light_and_exposes_the_optional_layers_on_use():
    """``import mbs`` loads neither PyVista nor matplotlib; ``mbs.io``, ``mbs.plots`` and
    ``mbs.viz`` are there when used (a fresh interpreter: this one has imported them)."""
    import subprocess
    import sys

    script = (
        "import sys, mbs\n"
        "heavy = [m for m in ('pyvista', 'matplotlib', 'vtk') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
        "assert callable(mbs.plots.convergence_study) and callable(mbs.viz.animate)\n"
        "assert callable(mbs.io.save_solution)\n"
        "assert {'plots', 'viz', 'io'} <= set(dir(mbs))\n")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
