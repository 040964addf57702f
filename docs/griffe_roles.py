"""Griffe extension of the documentation build: Sphinx roles in docstrings become links.

The docstrings of ``mbs`` use reStructuredText roles (``:class:`System```,
``:func:`~mbs.simulate```, ``:mod:`mbs.engine.equations```). mkdocstrings renders docstrings as
Markdown, where such a role would appear literally. This extension rewrites each role, once
every module is loaded:

* to a cross-reference ``[`System`][mbs.System]`` when the name resolves (in the scope
  of the documented object) to a public object of ``mbs`` that the API reference renders;
* to plain code ``System`` otherwise (private helpers, other packages).

A leading ``~`` keeps only the last component of the name as the link text, as in Sphinx.
Each solver class also gets the rows of :func:`mbs.solvers.solver_table` that describe it,
after its summary line: the properties the scheme declares, from the same source as the
solver tables of the README and of the concepts page.

Only the docstring text seen by the documentation build changes; the package is untouched.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import griffe

ROOT = Path(__file__).resolve().parent.parent

ROLE = re.compile(r":(?:py:)?(class|func|meth|attr|data|mod|exc|obj|const):`(~?)([^`<>]+?)`")


def _public(obj) -> bool:
    """Whether the reference renders ``obj``: public path, defined in mbs."""
    path = obj.canonical_path if hasattr(obj, "canonical_path") else obj.path
    parts = path.split(".")
    return parts[0] == "mbs" and not any(
        part.startswith("_") and not (part.startswith("__") and part.endswith("__"))
        for part in parts)


def _lookup(root, path: str):
    """The object at dotted ``path`` below the package ``root`` (aliases followed)."""
    parts = path.split(".")
    if parts[0] != root.name:
        return None
    obj = root
    for part in parts[1:]:
        try:
            obj = obj.members[part]
            if obj.is_alias:
                obj = obj.final_target
        except (KeyError, griffe.AliasResolutionError, griffe.CyclicAliasError):
            return None
    return obj


def _resolve(root, scope, name: str):
    """The object a role's target names, looked up as Sphinx would: absolute, then in scope."""
    candidates = [name]
    head, _, rest = name.partition(".")
    here = scope
    while here is not None:
        try:
            resolved = here.resolve(head)
        except (griffe.NameResolutionError, AttributeError, KeyError):
            resolved = None
        if resolved:
            candidates.append(resolved + ("." + rest if rest else ""))
        if here.is_class or here.is_module:
            candidates.append(f"{here.path}.{name}")
        here = here.parent
    for candidate in candidates:
        obj = _lookup(root, candidate)
        if obj is not None:
            return obj
    return None


def scheme_rows() -> tuple[list[str], dict[str, list[str]]]:
    """Header and rows of :func:`mbs.solvers.solver_table`, grouped by solver class path."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from mbs.solvers import make_solver, solver_table

    lines = solver_table().splitlines()
    grouped: dict[str, list[str]] = {}
    for row in lines[2:]:
        label = re.findall(r"`([^`]+)`", row.split("|")[1])
        options = {"order": int(label[1].split("=")[1])} if len(label) > 1 else {}
        solver = make_solver(label[0], **options)
        path = f"{type(solver).__module__}.{type(solver).__qualname__}"
        grouped.setdefault(path, []).append(row)
    return lines[:2], grouped


def _with_properties(text: str, header: list[str], rows: list[str]) -> str:
    """``text`` with the scheme's rows of the solver table after its summary paragraph."""
    summary, _, rest = text.partition("\n\n")
    table = "\n".join([*header, *rows])
    note = ("Declared properties (the rows of [`solver_table()`][mbs.solvers.solver_table] "
            "for this class):")
    return f"{summary}\n\n{note}\n\n{table}\n\n{rest}".rstrip() + "\n"


class SphinxRoles(griffe.Extension):
    """Rewrite Sphinx roles in every docstring of the loaded package."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        self._header, self._schemes = scheme_rows() if pkg.name == "mbs" else ([], {})
        self._walk(pkg, pkg)

    def _walk(self, root, obj) -> None:
        if obj.is_alias:
            return
        if obj.docstring is not None:
            obj.docstring.value = self._rewrite(root, obj, obj.docstring.value)
            if obj.is_class and obj.path in self._schemes:
                obj.docstring.value = _with_properties(obj.docstring.value, self._header,
                                                       self._schemes[obj.path])
        for member in obj.members.values():
            self._walk(root, member)

    def _rewrite(self, root, scope, text: str) -> str:
        def replace(match: re.Match) -> str:
            role, short, name = match.groups()
            name = name.strip()
            label = name.rsplit(".", 1)[-1] if short else name
            if role in ("func", "meth"):
                label += "()"
            target = _resolve(root, scope, name)
            if target is not None and _public(target):
                return f"[`{label}`][{target.canonical_path}]"
            return f"`{label}`"

        return ROLE.sub(replace, text)
