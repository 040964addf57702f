"""Time integrators and their registry.

Every scheme declares its properties (:class:`SchemeProperties`: order, symplecticity, what it
conserves, which constraint levels hold at step ends); :func:`solver_table` renders them, and the
README's solver table is that output.

Each implicit scheme writes its step equations once as terms (:mod:`mbs.engine.equations`);
backends evaluate them (``backend=`` option): "polynomial" (default where it applies: quadratic
constraints; :mod:`mbs.backends.polynomial`), "assembled" (through the model's functions: any
model, the reference) and "compiled" (optional numba kernel, :mod:`mbs.backends.compiled`).
"""

from __future__ import annotations

import difflib
import inspect
from functools import partial

from mbs.engine.newton import NewtonOptions
from mbs.errors import ModelError, ModelTypeError
from mbs.solvers.base import SchemeProperties, Solver, StepResult, instance_or_key
from mbs.solvers.composition import COMPOSITIONS, Composition
from mbs.solvers.conversion import VariationalConversion
from mbs.solvers.energy_momentum import EnergyMomentum
from mbs.solvers.ggl_vi import GGLVI
from mbs.solvers.hbvm import HBVM
from mbs.solvers.lobatto import Lobatto, LobattoTableau
from mbs.solvers.rattle import Rattle
from mbs.validation import check_option_types

REGISTRY = {
    "em": EnergyMomentum,
    "ggl-vi-s": partial(GGLVI, variant="S"),
    "ggl-vi-a": partial(GGLVI, variant="A"),
    "ggl-vi-b": partial(GGLVI, variant="B"),
    "rattle": Rattle,
    "hbvm": HBVM,
    "lobatto": Lobatto,
    "vi-conversion": VariationalConversion,
}
"""Solver names accepted by :func:`mbs.simulate` and the factory building each."""


def option_names(solver: str) -> list[str]:
    """The options a registered solver name accepts: the keyword arguments of its factory
    (a partial: those it leaves open), and ``order`` and ``composition`` (which only the
    composable schemes take)."""
    factory = REGISTRY[solver]
    fixed = getattr(factory, "keywords", {})
    parameters = inspect.signature(getattr(factory, "func", factory)).parameters.values()
    names = [p.name for p in parameters if p.name not in fixed and p.kind in (
        p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return names + ["order", "composition"]


def make_solver(solver: str | Solver, **options) -> Solver:
    """A solver instance from a registered name or an instance (returned unchanged).

    ``order=4`` or ``6`` (with an optional ``composition=`` name of
    :data:`~mbs.solvers.composition.COMPOSITIONS`) composes "em", "rattle" or "ggl-vi-a" to
    that order (:class:`Composition`); ``order=2`` is the scheme itself."""
    key = instance_or_key(solver, Solver, options,
                          f"solver must be a name {sorted(REGISTRY)} or a Solver instance")
    if isinstance(key, Solver):
        return key
    if key not in REGISTRY:
        raise ModelError(f"unknown solver {solver!r}; choose one of {sorted(REGISTRY)}")
    order = options.pop("order", None)
    method = options.pop("composition", None)
    if method is not None and not isinstance(method, str):
        raise ModelTypeError(f"solver {solver!r}: composition must be a name of "
                             f"{sorted({name for name, _ in COMPOSITIONS})}, got {method!r}")
    names = option_names(key)
    unknown = sorted(set(options) - set(names))
    if unknown:
        close = [match for name in unknown
                 for match in difflib.get_close_matches(name, names, n=1)]
        raise ModelError(f"solver {solver!r}: invalid options {unknown}"
                         f"{f' (did you mean {close}?)' if close else ''}; its options: "
                         f"{', '.join(names)}")
    factory = REGISTRY[key]
    check_option_types(getattr(factory, "func", factory), options, f"solver {solver!r}")
    base = factory(**options)
    if order is None and method is None:
        return base
    if not base.composable:
        raise ModelError(f"solver {solver!r}: order= and composition= compose 'em', "
                         f"'rattle' and 'ggl-vi-a' with theta = 1/2 (symmetric, second "
                         f"order; see mbs.solvers.composition); for a symplectic scheme of "
                         f"order 4 or 6 use 'lobatto' with stages=3 or 4, or "
                         f"solver='rattle', order=4")
    if order == 2 and method is None:
        return base
    return Composition(base=base, order=4 if order is None else order, method=method)


def solver_table() -> str:
    """Markdown table of the registered solvers' properties."""
    header = ("| solver | order q, p | symplectic | energy | momentum | constraints exact at "
              "step ends | multipliers | source |\n|---|---|---|---|---|---|---|---|")
    rows = []
    composed = [(name, {"order": order}) for name in REGISTRY
                if make_solver(name).composable for order in (4, 6)]
    for name, options in [*((name, {}) for name in REGISTRY), *composed]:
        p = make_solver(name, **options).properties
        label = f"`{name}`, `order={options['order']}`" if options else f"`{p.name}`"
        rows.append(f"| {label} | {p.order_q}, {p.order_p} | "
                    f"{'yes' if p.symplectic else 'no'}"
                    f"{f' (in {p.symplectic_in})' if p.symplectic_in else ''} | {p.energy} | "
                    f"{p.momentum} | "
                    f"{p.constraints_at_step_end} | {p.multiplier_times} | {p.reference} |")
    return "\n".join([header] + rows)


__all__ = ["COMPOSITIONS", "Composition", "EnergyMomentum", "GGLVI", "HBVM", "Lobatto",
           "LobattoTableau", "NewtonOptions", "REGISTRY", "Rattle", "VariationalConversion",
           "SchemeProperties", "Solver", "StepResult", "make_solver", "solver_table"]
