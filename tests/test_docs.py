"""The documentation's sources, checked without building the site (``.ci/docs`` builds it).

* README.md and docs/**/*.md describe the software as it is: no changelog language and no paths
  outside the repository;
* every name a package of ``mbs`` exports (its ``__all__``) has a docstring, found statically
  as the API reference (griffe) finds it;
* every module of ``mbs`` is on an API reference page (docs/api/*.md), and every module those
  pages name exists;
* the solver table appears in the docs only as the marker the build fills from
  :func:`mbs.solvers.solver_table`, never as a copy.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "mbs"
API = ROOT / "docs" / "api"


def _documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


# -- wording and paths ---------------------------------------------------------------------
MONTHS = ("January|February|March|April|May|June|July|August|September|October|November|"
          "December")
CHANGELOG = [
    r"\bpreviously\b", r"\bearlier versions?\b", r"(?<!\bis )(?<!\bare )(?<!\bbe )"
    r"(?<!\bwas )(?<!\bwere )(?<!\bbeen )(?<!\bbeing )\bused to\b", r"\bnow faster\b",
    r"\bno longer\b", r"\bwe (?:changed|now|fixed|replaced|removed|renamed)\b",
    r"\bhas been (?:changed|replaced|removed|renamed|fixed)\b",
    r"\b(?:this|that|the previous|the last|the next|each|a|previous|last) stop\b",
    r"\bstop's\b", r"\bsessions?\b", r"\bchangelog\b",
    r"\b20\d\d-\d\d-\d\d\b", rf"\b\d{{1,2}} (?:{MONTHS}) 20\d\d\b",
    rf"\b(?:{MONTHS}) \d{{1,2}}, 20\d\d\b",
]
OUTSIDE_PATHS = [r"\.\./shared", r"/work/", r"\bseeds/", r"(?<![\w.-])shared/", r"file://",
                 r"/check/"]


def _hits(patterns: list[str]) -> list[str]:
    found = []
    for path in _documents():
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            for pattern in patterns:
                if re.search(pattern, line, re.IGNORECASE):
                    found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()[:120]}")
    return found


def test_no_changelog_language():
    assert _hits(CHANGELOG) == []


def test_no_paths_outside_the_repository():
    assert _hits(OUTSIDE_PATHS) == []


def test_the_patterns_catch_what_they_are_for():
    samples = {"previously the step took 3 ms": True, "this stop's code": True,
               "in the last session": True, "measured on 2024-05-01": True,
               "it used to fail": True, "the library is used to simulate": False,
               "its steps stop converging at large h": False}
    for text, expected in samples.items():
        assert any(re.search(p, text, re.IGNORECASE) for p in CHANGELOG) == expected, text
    assert any(re.search(p, "see ../shared/seeds/003.txt") for p in OUTSIDE_PATHS)


# -- modules and exports -------------------------------------------------------------------
def all_modules() -> list[str]:
    """Every module of mbs, from its files (``__main__`` and private modules excluded)."""
    names = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if parts[-1] == "__main__" or any(part.startswith("_") for part in parts):
            continue
        names.append(".".join(parts))
    return names


def _module_file(name: str) -> Path:
    base = ROOT / Path(*name.split("."))
    return base / "__init__.py" if base.is_dir() else base.with_suffix(".py")


def _exports(tree: ast.Module) -> list[str] | None:
    for node in tree.body:
        if (isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets)):
            return list(ast.literal_eval(node.value))
    return None


def _docstring_of(module: str, name: str, depth: int = 0) -> str | None:
    """The docstring the reference shows for ``module.name`` (imports followed)."""
    if depth > 5:
        return None
    path = _module_file(module)
    if path.is_file() and (path.parent / name / "__init__.py").is_file() and \
            path.name == "__init__.py":
        return ast.get_docstring(ast.parse((path.parent / name / "__init__.py").read_text()))
    if path.with_name(f"{name}.py").is_file() and path.name == "__init__.py":
        submodule = ast.parse(path.with_name(f"{name}.py").read_text())
        defined = {getattr(node, "name", None) for node in submodule.body}
        if name not in defined:  # the submodule itself, not a function of that name
            return ast.get_docstring(submodule)
    tree = ast.parse(path.read_text())
    body = tree.body
    for index, node in enumerate(body):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and \
                node.name == name:
            return ast.get_docstring(node)
        targets = (node.targets if isinstance(node, ast.Assign)
                   else [node.target] if isinstance(node, ast.AnnAssign) else [])
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            following = body[index + 1] if index + 1 < len(body) else None
            if (isinstance(following, ast.Expr) and isinstance(following.value, ast.Constant)
                    and isinstance(following.value.value, str)):
                return following.value.value
            return None
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                if (alias.asname or alias.name) == name:
                    return _docstring_of(node.module, alias.name, depth + 1)
    return None


def _packages_with_exports() -> list[tuple[str, list[str]]]:
    packages = []
    for name in all_modules():
        exports = _exports(ast.parse(_module_file(name).read_text()))
        if exports is not None and _module_file(name).name == "__init__.py":
            packages.append((name, exports))
    return packages


def test_the_packages_export_names():
    packages = dict(_packages_with_exports())
    assert {"mbs", "mbs.bodies", "mbs.joints", "mbs.forces", "mbs.solvers"} <= set(packages)


@pytest.mark.parametrize("package, exports", _packages_with_exports(),
                         ids=[name for name, _ in _packages_with_exports()])
def test_every_exported_name_has_a_docstring(package, exports):
    missing = [name for name in exports if not (_docstring_of(package, name) or "").strip()]
    assert missing == [], f"{package}: no docstring for {missing}"


def test_exported_names_exist_at_run_time():
    import importlib

    for package, exports in _packages_with_exports():
        if package.startswith("mbs.viz"):
            pytest.importorskip("pyvista")
        module = importlib.import_module(package)
        assert [name for name in exports if not hasattr(module, name)] == [], package


NAMED = re.compile(r"^::: (\S+)|<!-- mbs:package (\S+) -->", re.M)
REMAINING = re.compile(r"<!-- mbs:modules (\S+) -->")


def _reference_modules() -> tuple[set[str], set[str]]:
    """(modules the API pages name, packages whose remaining modules a page lists)."""
    named, remaining = set(), set()
    for path in API.glob("*.md"):
        text = path.read_text()
        named.update(a or b for a, b in NAMED.findall(text))
        remaining.update(REMAINING.findall(text))
    return named, remaining


def test_every_module_is_on_an_api_reference_page():
    named, remaining = _reference_modules()
    missing = [name for name in all_modules()
               if name not in named and name.rpartition(".")[0] not in remaining]
    assert missing == []


def test_the_api_pages_name_only_existing_modules():
    named, remaining = _reference_modules()
    assert sorted((named | remaining) - set(all_modules())) == []


def test_the_solver_table_is_generated_not_copied():
    header = "| solver | order q, p | symplectic |"
    pages = [path for path in (ROOT / "docs").rglob("*.md") if header in path.read_text()]
    assert pages == []
    marked = [path for path in (ROOT / "docs").rglob("*.md")
              if "<!-- mbs:solver-table -->" in path.read_text()]
    assert marked, "no page shows the solver table"
