"""System -> Model: index maps, constant matrices, constraint table and potential groups.

Everything here runs once per ``System.compile()``; per-element Python loops are fine here and
nowhere downstream.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np
import scipy.sparse as sp

from mbs.analysis import ConstraintGroup, analyse_rank
from mbs.bodies.rigid_body import RigidBody
from mbs.errors import (
    ForceFunctionError,
    InconsistentInitialStateError,
    MbsError,
    ModelError,
    warn_user,
)
from mbs.forces.applied import AppliedForces, JointDamper, joint_effort_term
from mbs.forces.base import TermInstance
from mbs.forces.gravity import UniformGravity
from mbs.joints.base import JOINT_COORDINATES, BuildContext
from mbs.model import (
    POSITION_TOLERANCE,
    VELOCITY_TOLERANCE,
    BodyInfo,
    ElementInfo,
    Model,
    Redundancy,
    UserConstraintBlock,
)
from mbs.potential_group import PotentialGroup
from mbs.quadratic import QuadraticTableBuilder
from mbs.validation import DERIVATIVE_TOLERANCE

if TYPE_CHECKING:
    from mbs.system import System


def compile_system(system: System) -> Model:
    """Build the :class:`~mbs.model.Model` of ``system`` (see :meth:`mbs.System.compile`)."""
    bodies = [b for b in system.bodies if b.n_coordinates > 0]
    offsets, start = {}, 0
    for body in bodies:
        offsets[body.name] = start
        start += body.n_coordinates
    n = start
    offsets[system.ground.name] = 0
    context = BuildContext(offsets)

    body_infos, columns = [], {}
    for body in bodies:
        coords = slice(offsets[body.name], offsets[body.name] + body.n_coordinates)
        columns[body.name] = np.arange(coords.start, coords.stop)
        rigid = isinstance(body, RigidBody)
        body_infos.append(BodyInfo(
            body.name, "rigid" if rigid else "point", coords, body.mass,
            body.inertia if rigid else None, body.euler_tensor if rigid else None,
            getattr(body, "shape", None) if rigid else {"kind": "sphere",
                                                        "radius": body.radius}))

    mass, inverse = _mass_matrices(bodies, n)
    q0 = np.concatenate([b.initial_coordinates() for b in bodies]) if bodies else np.zeros(0)
    v0 = np.concatenate([b.initial_velocities() for b in bodies]) if bodies else np.zeros(0)
    p0 = mass @ v0

    builder = QuadraticTableBuilder(n)
    internal_rows, constraint_rows = {}, {}
    for body in bodies:
        rows = np.array(body.add_internal_constraints(builder, offsets[body.name]), dtype=int)
        internal_rows[body.name] = rows
        if rows.size:
            constraint_rows[body.name] = rows
    joint_infos, groups = [], []
    for joint in system.joints:
        with _blame(joint):
            rows = np.array(joint.add_rows(builder, context), dtype=int)
        constraint_rows[joint.name] = rows
        names = tuple(b.name for b in joint.bodies)
        joint_infos.append(ElementInfo(joint.name, type(joint).__name__, names, rows,
                                       _joint_data(joint)))
        groups.append(ConstraintGroup(joint.name, names, rows))
    table = builder.build()

    user_blocks, row = [], table.n_rows
    for constraint in system.user_constraints:
        prepare = getattr(constraint, "prepare", None)
        if prepare is not None:  # drives: their geometry at the initial pose
            with _blame(constraint):
                prepare()
        rows = np.arange(row, row + constraint.n_equations)
        row += constraint.n_equations
        indices = np.concatenate([columns[b.name] for b in constraint.bodies])
        user_blocks.append(UserConstraintBlock(constraint, indices, rows))
        names = tuple(b.name for b in constraint.bodies)
        constraint_rows[constraint.name] = rows
        joint_infos.append(ElementInfo(constraint.name, type(constraint).__name__, names, rows))
        # a drive reads its joint's relative coordinate, invariant under a common rigid
        # motion of the joint's bodies: it joins its joint's block (a chain with one drive
        # is not one merged block)
        joint = getattr(constraint, "joint", None)
        groups.append(ConstraintGroup(
            constraint.name, names if joint is None else tuple(b.name for b in joint.bodies),
            rows, invariant=joint is not None, prescribed=bool(constraint.time_dependent)))

    potential_groups, force_infos = _potential_groups(system, context, n, q0)
    applied = AppliedForces(n, _applied_terms(system, context))
    _warn_if_gravity_acts_twice(system)

    model = Model(
        n=n, mass_matrix=mass, inverse_mass_matrix=inverse, constraint_table=table,
        user_constraints=user_blocks, potential_groups=potential_groups, bodies=body_infos,
        joints=joint_infos, forces=force_infos, q0=q0, p0=p0,
        point_blocks=np.array([offsets[b.name] // 3 for b in bodies], dtype=int),
        director_blocks=np.array([offsets[b.name] // 3 + k for b in bodies
                                  if isinstance(b, RigidBody) for k in (1, 2, 3)], dtype=int),
        degrees_of_freedom=0, redundancies=[], gravity=system.gravity,
        constraint_rows=constraint_rows, applied_forces=applied)

    ranks = []
    if model.m:
        jacobian = model.constraint_jacobian(q0)
        _check_finite(model.constraints(q0), abs(jacobian).max(axis=1).toarray().ravel(),
                      constraint_rows)
        try:
            ranks = analyse_rank(jacobian, groups, columns, internal_rows, system.ground.name,
                                 kept_rows=np.arange(table.n_rows, model.m), table=table,
                                 q0=q0)
        except np.linalg.LinAlgError as exc:
            raise ModelError(f"the rank analysis of the constraint Jacobian failed ({exc}); "
                             f"check joint points, axes and lengths for extreme values") from exc
    internal_count = sum(r.size for r in internal_rows.values())
    dof = n - internal_count - sum(r.rank for r in ranks)
    redundancies = _describe_redundancies(ranks, constraint_rows, model, q0, system)
    dependent = np.concatenate([r.dependent_rows for r in ranks] + [np.zeros(0, dtype=int)])
    if dependent.size and system.redundant == "remove":
        removed_table = table.rows(np.sort(dependent))
        owner = np.empty(model.m, dtype=object)
        for name, rows in constraint_rows.items():
            owner[rows] = name
        removed_names = tuple(owner[np.sort(dependent)])
        table, constraint_rows, joint_infos, user_blocks = _remove_rows(
            table, dependent, constraint_rows, joint_infos, user_blocks)
        model = Model(
            n=n, mass_matrix=mass, inverse_mass_matrix=inverse, constraint_table=table,
            user_constraints=user_blocks, potential_groups=potential_groups, bodies=body_infos,
            joints=joint_infos, forces=force_infos, q0=q0, p0=p0,
            point_blocks=model.point_blocks, director_blocks=model.director_blocks,
            degrees_of_freedom=0, redundancies=[], gravity=system.gravity,
            constraint_rows=constraint_rows, removed_constraints=removed_table,
            removed_names=removed_names, applied_forces=applied)
        removed = "; ".join(f"{red.count} among {', '.join(red.joints)} (dropped "
                            f"{', '.join(red.removed_labels)})"
                            for red in redundancies)
        warn_user(f"redundant constraints removed: {removed}. The remaining equations "
                  f"define the same motion near the initial state, unless that is a "
                  f"singular configuration of the mechanism (a parallelogram folded flat), "
                  f"where the constraints lose rank without being redundant along the "
                  f"motion: simulate warns when the dropped equations are then violated"
                  + ("" if all(r.consistent for r in redundancies) else
                     "; some removed equations do NOT hold at the initial state "
                     "(inconsistent redundancy): initial_state() rejects that state and "
                     "initial_state(project=True) must satisfy them too"))
    elif dependent.size:
        redundancies = [replace(red, removed=(), removed_labels=()) for red in redundancies]
        kept = "; ".join(f"{red.count} among {', '.join(red.joints)}" for red in redundancies)
        warn_user(f"redundant constraints kept (System(redundant='keep')): {kept}. The "
                  f"Newton matrices of the implicit schemes are then singular: every scheme "
                  f"can lose accuracy or fail where a step is refined (rattle copes on "
                  f"planar loops); the default redundant='remove' drops a dependent "
                  f"subset")
    _warn_if_the_start_is_singular(ranks, dof)
    model.degrees_of_freedom = dof
    model.redundancies = redundancies
    model.joint_coordinates = _joint_coordinates(system, context)
    model.drives = {c.name: (c.joint.name, c.coordinate) for c in system.drives}
    model.notes = [f"body {name!r} is connected to nothing (no joint, no force): it moves "
                   f"uniformly" for name in system.unconnected_bodies()]
    _warn_if_bodies_are_left_out(system)
    _check_user_derivatives(model, user_blocks, model._q0)
    g, gv = model.initial_residuals()
    try:
        model.check_drive_branches(model._q0)
    except InconsistentInitialStateError as exc:
        warn_user(f"{exc} (model.initial_state() raises this at t = 0; with "
                  f"initial_state(t=t_start) and simulate a run is checked at its start)")
    else:
        _warn_if_inconsistent(model, g, gv)
    return model


def _warn_if_gravity_acts_twice(system: System) -> None:
    """Name the bodies that two uniform fields of the same acceleration act on: the weight
    counted twice, typically ``System(gravity=...)`` (which adds a UniformGravity) and a
    UniformGravity added by hand. Fields of different accelerations (gravity and the
    inertial field of an accelerating frame) are left alone."""
    fields = [force for force in system.forces if isinstance(force, UniformGravity)]
    for k, first in enumerate(fields):
        for second in fields[k + 1:]:
            if not np.array_equal(first.acceleration, second.acceleration):
                continue
            common = {b.name for b in first.bodies_acted_on()} & {
                b.name for b in second.bodies_acted_on()}
            if common:
                warn_user(f"UniformGravity {first.name!r} and {second.name!r} both pull "
                          f"{', '.join(sorted(common)[:3])}{' ...' if len(common) > 3 else ''} "
                          f"with {first.acceleration}: their weight counts twice. "
                          f"System(gravity=...) adds one UniformGravity already; give gravity "
                          f"once")


def _warn_if_inconsistent(model: Model, g: float, gv: float) -> None:
    """Warn, naming the most violated joints, when the states set on the bodies violate the
    constraints at t = 0 (max |g| = ``g``, max |G v| = ``gv``).

    A state that only misses the drives' motion at t = 0 (bodies set at rest, a drive
    turning) is not warned about: ``initial_state(project=True, joint_rates=...)`` or
    ``simulate(..., project=True)`` gives it that motion, as the drives' documentation does,
    and ``simulate`` refuses it unprojected, saying so."""
    if model.drives:
        drive_rows = np.concatenate([model.constraint_rows[name] for name in model.drives])
        position, velocity, scale = model._residuals_and_scale(model._q0, model._p0, 0.0,
                                                               drive_rows)
        if position <= POSITION_TOLERANCE and velocity <= VELOCITY_TOLERANCE * scale:
            return
    if not model.is_consistent(model._q0, model._p0):
        worst = model._worst_constraints(model._q0, model._p0, 0.0)
        timed = (" at t = 0 (a run from another t_start is checked at its start)"
                 if model.is_rheonomic else "")
        warn_user(f"initial state is inconsistent with the constraints{timed} (max |g| = "
                  f"{g:.3e}, max |G v| = {gv:.3e}{worst}); "
                  f"model.initial_state(project=True{', t=t_start' if timed else ''}) "
                  f"projects it")


def _mass_matrices(bodies, n: int) -> tuple[sp.csr_matrix, sp.csr_matrix]:
    if not bodies:
        empty = sp.csr_matrix((0, 0))
        return empty, empty
    mass = sp.block_diag([b.mass_block() for b in bodies], format="csr")
    inverse = sp.block_diag([b.inverse_mass_block() for b in bodies], format="csr")
    mass.eliminate_zeros()
    inverse.eliminate_zeros()
    return mass, inverse


def _joint_data(joint) -> dict:
    data = {}
    for key in ("point", "axis", "axis_a", "axis_b", "point_a", "point_b", "length"):
        value = getattr(joint, key, None)
        if value is not None:
            data[key] = value
    return data


def _potential_groups(system: System, context: BuildContext, n: int, q0: np.ndarray):
    instances: dict[type, list[tuple[str, TermInstance]]] = {}
    force_infos = []
    for force in system.forces:
        data = {}
        with _blame(force):
            terms = force.terms(context)
            if hasattr(force, "attachment_points"):
                data["points"] = force.attachment_points()
            if hasattr(force, "ground_points"):
                data["ground_points"] = force.ground_points()
        for instance in terms:
            instances.setdefault(instance.term, []).append((force.name, instance))
        for key in ("center", "mu", "acceleration", "stiffness", "rest_length", "length",
                    "rest_angle"):
            value = getattr(force, key, None)
            if value is not None:
                data[key] = value
        if getattr(force, "reads_joint_angle", False):
            data["reads_angle_of"] = force.joint.name
        if any(getattr(force, "angles_read", ())):  # a law of several joints' coordinates
            data["reads_angles_of"] = force.angles_read
            data["coordinates"] = [(joint.name, coordinate) for joint, coordinate
                                   in zip(force.joints, force.coordinates)]
        if getattr(force, "joint", None) is not None:  # elements acting on a joint
            data["joint"] = force.joint.name
        force_infos.append(ElementInfo(force.name, type(force).__name__,
                                       tuple(b.name for b in force.bodies_acted_on()),
                                       data=data))
    groups = []
    for term, members in instances.items():
        builder = QuadraticTableBuilder(n)
        for _, instance in members:
            if len(instance.invariants) != term.n_invariants:
                raise AssertionError(f"{term.__name__} expects {term.n_invariants} invariants")
            for invariant in instance.invariants:
                row = builder.new_row()
                for a, b, scale in invariant.products:
                    builder.add_dot(row, a, b, scale)
                if invariant.constant:
                    builder.add_constant(row, invariant.constant)
        table = builder.build()
        keys = members[0][1].params.keys()
        params = {k: np.array([inst.params[k] for _, inst in members], dtype=float)
                  for k in keys}
        names = [name for name, _ in members]
        pi0 = table.value(q0).reshape(len(members), term.n_invariants)
        groups.append(PotentialGroup(term, table, params, names,
                                     term.invariant_scales(pi0, params)))
    return groups, force_infos


def _applied_terms(system: System, context: BuildContext) -> list:
    """The work-doing terms of loads, dampers, actuators, spring damping and joint damping,
    each evaluated once at the initial state so that a bad user function is reported now."""
    elements = list(system.forces)
    for joint in system.joints:
        damping = getattr(joint, "damping", None)
        if damping is not None:
            elements.append(JointDamper(joint, damping, name=f"{joint.name}.damping"))
    terms = []
    for element in elements:
        with _blame(element):
            terms.extend(element.applied_terms(context) if hasattr(element, "applied_terms")
                         else [])
    q0 = np.concatenate([b.initial_coordinates() for b in system.bodies if b.n_coordinates])\
        if terms else None
    v0 = np.concatenate([b.initial_velocities() for b in system.bodies if b.n_coordinates])\
        if terms else None
    for term in terms:
        index = term.local.indices
        try:
            term.evaluate(0.0, q0[index], v0[index], True)
        except ForceFunctionError as exc:
            raise ModelError(f"{exc} (evaluated at the initial state)") from exc
    return terms



def _joint_coordinates(system: System, context: BuildContext) -> dict:
    """name -> {kind: term} of the joints with an axis coordinate (see
    :meth:`mbs.model.Model.joint_coordinate`)."""
    return {joint.name: {kind: joint_effort_term(joint, context, None, joint.name, kind)
                         for kind in JOINT_COORDINATES[type(joint).__name__]}
            for joint in system.joints if type(joint).__name__ in JOINT_COORDINATES}


def _warn_if_bodies_are_left_out(system) -> None:
    """Warn for the bodies of a jointed mechanism that no joint, drive or force between two
    bodies links to the rest (a forgotten joint): they move on their own, under gravity they
    fall away, and nothing else would tell (gravity is an edge of the system's graph)."""
    if not system.joints:
        return
    linked = set()
    for a, b, data in system.graph.edges(data=True):
        if data["kind"] != "force" or not data["element"].is_field:
            linked.update((a, b))
    alone = [body.name for body in system.bodies if body.name not in linked]
    if not alone:
        return
    body, be, it, moves, its = (("body", "is", "it", "it moves", "its") if len(alone) == 1
                                else ("bodies", "are", "them", "they move", "their"))
    warn_user(f"compile: {body} {', '.join(map(repr, alone))} {be} linked to nothing: no "
              f"joint, drive, spring or damper ties {it} to another body or the ground, so "
              f"{moves} on {its} own (under gravity: falling freely); add the joint that "
              f"holds {it}, or leave a body meant to fly free as it is")


def _warn_if_the_start_is_singular(ranks: list, dof: int) -> None:
    """Warn when a loop's equations gain rank at configurations near the initial one (found
    by :func:`~mbs.analysis.analyse_rank`): the initial state is then a singular
    configuration of the mechanism, where the mechanism can move on branches it cannot
    reach from its regular poses."""
    singular = [block for block in ranks if block.rank_gain > 0]
    if not singular:
        return
    gain = sum(block.rank_gain for block in singular)
    loops = "; ".join(", ".join(block.joints) for block in singular)
    warn_user(f"the initial state is a singular configuration of the mechanism (the loop of "
              f"{loops}): at configurations near it the joints' equations have {gain} more "
              f"independent equation{'s' if gain > 1 else ''} than at it, as for a "
              f"parallelogram folded flat. degrees_of_freedom counts {dof} here, "
              f"{dof - gain} at those configurations, and a run from this state can follow "
              f"a motion the mechanism cannot make from its regular poses: start from a "
              f"regular pose near it")


def _describe_redundancies(ranks, constraint_rows: dict, model: Model, q0: np.ndarray,
                           system: System) -> list[Redundancy]:
    owner = {}
    for name, rows in constraint_rows.items():
        for k, row in enumerate(rows):
            owner[int(row)] = (name, k)
    g0 = model.constraints(q0) if model.m else np.zeros(0)
    out = []
    for rank in ranks:
        if not rank.redundant:
            continue
        removed = tuple(owner[int(r)] for r in rank.dependent_rows)
        consistent = bool(np.all(np.abs(g0[rank.dependent_rows]) <= 1e-10))
        labels = tuple(system[name].equation_label(k) for name, k in removed)
        out.append(Redundancy(rank.redundant, rank.involved, removed, consistent, labels))
    return out


def _remove_rows(table, dependent, constraint_rows, joint_infos, user_blocks):
    """Drop rows ``dependent`` from the constraint table and renumber every row map."""
    keep = np.setdiff1d(np.arange(table.n_rows), dependent)
    total = table.n_rows + sum(b.rows.size for b in user_blocks)
    new_index = np.full(total, -1)
    new_index[keep] = np.arange(keep.size)
    shift = dependent.size
    new_index[table.n_rows:] = np.arange(table.n_rows, total) - shift

    def renumber(rows):
        mapped = new_index[rows]
        return mapped[mapped >= 0]

    constraint_rows = {name: renumber(rows) for name, rows in constraint_rows.items()}
    joint_infos = [ElementInfo(j.name, j.type, j.bodies, renumber(j.rows), j.data)
                   for j in joint_infos]
    user_blocks = [UserConstraintBlock(b.constraint, b.indices, b.rows - shift)
                   for b in user_blocks]
    return table.rows(keep), constraint_rows, joint_infos, user_blocks


@contextmanager
def _blame(element):
    """Turn a numerical failure while compiling ``element`` into a ModelError naming it."""
    try:
        yield
    except ModelError as exc:
        if type(exc) is not ModelError or repr(element.name) in str(exc):
            raise
        # raised by a body the element attaches to: say which element asked
        raise ModelError(f"{type(element).__name__} {element.name!r}: {exc}") from exc
    except MbsError:
        raise
    except (ArithmeticError, ValueError, np.linalg.LinAlgError) as exc:
        raise ModelError(f"{type(element).__name__} {element.name!r} could not be compiled "
                         f"({type(exc).__name__}: {exc}); check its parameters and the bodies' "
                         f"initial states") from exc


def _check_user_derivatives(model: Model, user_blocks: list, q0: np.ndarray) -> None:
    """Warn about user-given derivatives (of a UserPotential or UserConstraint) that disagree
    with central differences of their functions at the initial state: a wrong gradient gives
    a wrong motion whose energy is still conserved, so no later diagnostic would show it."""
    checks = []
    for group in model.potential_groups:
        compare = getattr(group.term, "derivative_mismatches", None)
        if compare is not None:
            for name, pi in zip(group.names, group.invariants(q0)):
                checks.append((f"UserPotential {name!r}", "energy", compare,
                               group.term.values_at, pi))
    for block in user_blocks:
        if not block.constraint.time_dependent:
            checks.append((f"UserConstraint {block.constraint.name!r}", "function",
                           block.constraint.derivative_mismatches,
                           block.constraint.values_at, q0[block.indices]))
    for block in user_blocks:
        _check_drive_rate(getattr(block.constraint, "rate_mismatch", None),
                          block.constraint.name)
    for owner, source, compare, values_at, point in checks:
        # at the initial state a failing function (a wrong shape or type) is an error of
        # the model; the differences step beside it, where a function may leave its domain
        # (simulate reports that if the motion goes there)
        values_at(point)
        # also next to the state: a derivative wrong only away from a symmetric initial
        # state (e.g. a sign error in a slope that vanishes there) is still found
        nearby = point + 1e-2 * (1.0 + np.abs(point)) * np.cos(np.arange(point.size) + 1.0)
        worst: dict[str, float] = {}
        try:
            for what, mismatch in [*compare(point), *compare(nearby)]:
                worst[what] = max(worst.get(what, 0.0), mismatch)
        except MbsError:
            pass
        for what, mismatch in worst.items():
            if mismatch > DERIVATIVE_TOLERANCE:
                warn_user(f"{owner}: the {what} function differs from central differences "
                          f"of the {source if what != 'hessian' else 'first derivative'} "
                          f"by {mismatch:.2g} (relative) at or next to the initial state; "
                          + ("check it" if what == "jacobian" else
                             "check it, or omit it and let mbs use differences"))


#: Times at which a drive's rate function is compared with differences of its position.
DRIVE_CHECK_TIMES = (0.0, 0.3, 1.0)


def _check_drive_rate(rate_mismatch, name: str) -> None:
    """Warn when a drive's ``rate`` is not the derivative of its ``position``: the drive then
    prescribes the angle and, at the nodes, the wrong rate, and the energy balance still
    holds, so no later diagnostic would show it."""
    if rate_mismatch is None:
        return
    try:
        found = rate_mismatch(DRIVE_CHECK_TIMES)
    except MbsError:  # not defined at these times: simulate reports failures where it is used
        return
    if found is not None and found[0] > DERIVATIVE_TOLERANCE:
        mismatch, t, given, difference = found
        warn_user(f"Drive {name!r}: rate(t) is not the derivative of position(t): at "
                  f"t = {t:g} rate gives {given:.6g}, central differences of position "
                  f"{difference:.6g} ({mismatch:.2g} relative); fix rate, or omit it and "
                  f"let mbs use differences")


def _check_finite(values: np.ndarray, row_magnitudes: np.ndarray, constraint_rows: dict) -> None:
    """Name the element whose equations are not finite at the initial state."""
    bad = ~(np.isfinite(values) & np.isfinite(row_magnitudes))
    if not np.any(bad):
        return
    rows = set(np.flatnonzero(bad).tolist())
    names = [name for name, r in constraint_rows.items() if rows & set(r.tolist())]
    raise ModelError(f"constraint equations of {', '.join(names)} are not finite at the initial "
                     f"state: a user function returning NaN or inf there, or overflow from "
                     f"extreme lengths or coordinates (then rescale the units)")
