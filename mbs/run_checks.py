"""Checks of a finished run that warn where its results should not be trusted: energy lost or
gained beyond the scheme's error, springs too stiff for the step, bodies turned too far in one
step, drives that jumped, angle laws that saw the wrap of their angle, potentials evaluated
outside their range, and constraints left out as redundant that the motion broke."""

from __future__ import annotations

import math

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from mbs.errors import warn_user
from mbs.joints.base import is_angle
from mbs.liegroup.simulation import LieGroupSolver
from mbs.model import Model
from mbs.rotations import skew
from mbs.solution import Solution
from mbs.solvers import Solver


def warn_after_run(solution: Solution, solver: Solver | LieGroupSolver) -> None:
    """Every check of a completed run (``solver``: the :class:`~mbs.solvers.Solver` that
    ran it)."""
    _warn_if_energy_is_lost(solution)
    _warn_if_potentials_left_their_range(solution)
    _warn_if_steps_turn_bodies_too_far(solution, solver)
    _warn_if_drives_jumped(solution)
    _warn_if_angle_laws_saw_a_wrap(solution)
    _warn_if_removed_constraints_broke(solution)


#: Energy change, relative to the size of the energy terms of the run (initial energy, largest
#: kinetic energy, range of the potential, energy passed through the applied forces), above
#: which a run is reported as untrustworthy. At stable step sizes every scheme of mbs keeps
#: the energy balance within a band of size O(h^p) (p its order); a change of this size
#: means the step is beyond the scheme's stability or accuracy limit.
ENERGY_WARNING_LEVEL = 0.1


#: h omega of a spring (omega its frequency with the masses of the bodies it connects) above
#: which a run is warned: the step then samples an oscillation less than ~6 times per period.
STIFF_STEP_RATIO = 1.0


def warn_if_springs_are_too_stiff(model: Model, h: float, solver: str) -> None:
    """Warn once, naming the stiffest springs, when h omega exceeds :data:`STIFF_STEP_RATIO`
    (for rattle, whose kicks are explicit, also the stability limit 2).

    omega bounds the fastest oscillation of the springs on a spring's bodies (stiffness k at
    the rest length): by Gershgorin's theorem applied to M^-1/2 K M^-1/2, omega^2 <= max over
    bodies i of the sum over their springs of k / m_i + k / sqrt(m_i m_j) (j the other moving
    body). That is sqrt(k / m) for one spring to the ground, the exact sqrt(k / mu) for one
    spring between equal masses, and 2 sqrt(k / m) for a long chain, its highest mode;
    springs one by one would miss that factor sqrt 2. Springs along lines act on the masses;
    torsion springs on the moments of inertia about their joint's axis through the joint
    point (:func:`_axis_inertias`), the exact sqrt(k / I) for a body hinged to the ground.
    A line spring attached to a rigid body away from its centre of mass acts on the body's
    effective mass at that point along the line (:func:`_point_masses`): a light link
    turned by a spring on a long arm oscillates much faster than sqrt(k / m)."""
    springs, rows = [], {}
    bodies = {body.name: body for body in model.bodies}
    joints = {joint.name: joint for joint in model.joints}
    for force in model.forces:
        if force.type in ("Spring", "QuarticSpring"):
            kind, inertias = "translation", _point_masses(model, force, bodies)
        elif force.type == "TorsionSpring":
            kind, inertias = "rotation", _axis_inertias(model, joints[force.data["joint"]],
                                                        bodies)
        else:
            continue
        stiffness = float(force.data.get("stiffness", 0.0))
        if force.type == "QuarticSpring":  # V = k/2 (l^2 - L^2)^2: k 4 L^2 along the line
            stiffness *= 4.0 * float(force.data.get("length", 0.0)) ** 2
        moving = [name for name in force.bodies if inertias.get(name, 0.0) > 0.0]
        if not moving or stiffness <= 0.0:
            continue
        springs.append((force, [(kind, name) for name in moving]))
        for name in moving:
            rows[kind, name] = rows.get((kind, name), 0.0) + stiffness / inertias[name] + sum(
                stiffness / math.sqrt(inertias[name] * inertias[other])
                for other in moving if other != name)
    stiff = sorted(((max(math.sqrt(rows[key]) for key in moving), force)
                    for force, moving in springs), key=lambda item: -item[0])
    stiff = [(omega, force) for omega, force in stiff if h * omega > STIFF_STEP_RATIO]
    if not stiff:
        return
    omega, force = stiff[0]
    others = ("" if len(stiff) == 1 else
              f" ({len(stiff) - 1} more spring{'s' if len(stiff) > 2 else ''} beyond it: "
              f"{', '.join(repr(other.name) for _, other in stiff[1:4])}"
              f"{', ...' if len(stiff) > 4 else ''})")
    unstable = (" and beyond rattle's stability limit h omega = 2"
                if solver.startswith("rattle") and h * omega > 2.0 else "")
    warn_user(f"simulate: {force.type} {force.name!r} oscillates at up to omega = "
              f"{omega:.3g} rad per time unit (sqrt(k/m) with the bodies' masses at its "
              f"attachment points, or sqrt(k/I) for torsion, over the springs on its bodies; "
              f"period {2 * math.pi / omega:.3g}); h omega = {h * omega:.3g} is beyond the "
              f"accuracy of every scheme{unstable}{others}: choose h <= {0.2 / omega:.2g} "
              f"to resolve it, or a softer spring", RuntimeWarning)


def _point_masses(model: Model, force, bodies: dict) -> dict[str, float]:
    """The effective masses, at the initial pose, of a line spring's bodies at its
    attachment points along its line e: 1 / (1/m + (r x e) . J_world^-1 (r x e)) with r the
    point relative to the centre of mass (m for a point mass or a point at the centre). A
    free body's: a joint can only make it heavier, so omega stays an upper bound. Where the
    points coincide (a zero-length spring) the line is any direction, and the lightest one
    is taken."""
    points = [np.asarray(point, dtype=float) for point in force.data.get("points", ())]
    line = points[1] - points[0] if len(points) == 2 else np.zeros(3)
    length = float(np.linalg.norm(line))
    out = {}
    for body in (bodies[name] for name in force.bodies if name in bodies):
        out[body.name] = body.mass
        if body.inertia is None or len(points) != 2:
            continue
        coordinates = model.q0[body.coordinates]
        rotation = coordinates[3:].reshape(3, 3).T  # columns the directors
        arm = points[force.bodies.index(body.name)] - coordinates[:3]
        compliance = rotation @ np.linalg.inv(body.inertia) @ rotation.T  # J_world^-1
        lever = skew(arm)  # r x (.)
        rotational = lever.T @ compliance @ lever  # e -> (r x e) . J^-1 (r x e)
        turn = (line @ rotational @ line / length**2 if length > 0.0
                else float(np.linalg.eigvalsh(rotational)[-1]))
        out[body.name] = 1.0 / (1.0 / body.mass + max(turn, 0.0))
    return out


def _axis_inertias(model: Model, info, bodies: dict) -> dict[str, float]:
    """The moments of inertia of a joint's (``info``) rigid bodies about its axis through its
    point, at the model's initial pose (the director rotation R gives the world inertia
    R J R^T; Steiner's term m |a x (c - p)|^2 moves it to the axis)."""
    axis, point = np.asarray(info.data["axis"]), np.asarray(info.data["point"])
    inertias = {}
    for body in (bodies[name] for name in info.bodies if name in bodies):
        if body.inertia is None:
            continue
        coordinates = model.q0[body.coordinates]
        rotation = coordinates[3:].reshape(3, 3).T  # columns the directors
        arm = np.cross(axis, coordinates[:3] - point)
        inertias[body.name] = float(axis @ rotation @ body.inertia @ rotation.T @ axis
                                    + body.mass * arm @ arm)
    return inertias


#: The equations dropped as redundant are reported broken when they exceed this, and 100
#: times the kept equations' largest residual (schemes that enforce their constraints between
#: the nodes leave both off by the same order).
REMOVED_CONSTRAINT_LEVEL = 1e-6


#: Models up to this many coordinates are told why dropped equations broke (a dense rank).
DIAGNOSED_REDUNDANCY_SIZE = 600


def _warn_if_removed_constraints_broke(solution: Solution) -> None:
    """Name the equations dropped as redundant at compile time when the run broke them, and
    say why: either the initial state was a singular configuration (a parallelogram
    folded flat), where the constraints lose rank without being redundant along the
    motion (all equations then have a higher rank where they first broke), or the
    equations kept in their place lost rank further along the motion where the mechanism
    does not, and the scheme left it there."""
    model = solution.model
    if not (isinstance(model, Model) and model.redundancies):
        return
    removed = model.removed_constraint_norms(solution.q)
    kept = float(np.max(solution.constraint_residuals()["position"], initial=0.0))
    level = max(REMOVED_CONSTRAINT_LEVEL, 100.0 * kept)
    worst = int(np.argmax(removed))
    if not removed[worst] > level:
        return
    dropped = ", ".join(label for red in model.redundancies for label in red.removed_labels)
    first = int(np.argmax(removed > level))
    before = first - 1
    singular_start = ("The initial state is a singular configuration of the mechanism (its "
                      "constraints lose rank there, as a parallelogram folded flat); start "
                      "from a regular pose near it")
    # the kept equations are regular at the initial state by their choice: a break in the
    # first step is the singular start's
    if first > 1 and model.n <= DIAGNOSED_REDUNDANCY_SIZE:
        t0, t1 = float(solution.t[0]), float(solution.t[before])
        if not model.full_constraint_rank(solution.q[before], t1) > \
                model.full_constraint_rank(solution.q[0], t0):
            singular_start = (
                f"The equations kept in their place lose rank near t = {t1:.6g} where the "
                f"mechanism does not (they were chosen at the initial state), and the "
                f"scheme left the mechanism there: reduce the step size around t = "
                f"{t1:.6g}, or start from a pose near it")
    warn_user(f"simulate: the equations dropped at compile time as redundant "
              f"({dropped}) are violated by up to {removed[worst]:.3g} (at t = "
              f"{solution.t[worst]:.6g}) while the kept ones hold to {kept:.1e}: they "
              f"were not redundant along the motion. {singular_start}", RuntimeWarning)


def _warn_if_potentials_left_their_range(solution: Solution) -> None:
    """Name the potentials valid on part of the configurations only (torsion springs: half
    a turn about the rest angle) that the motion took beyond it."""
    model = solution.model
    if not isinstance(model, Model):
        return
    for name, state in model.potential_range_exits(solution.q):
        warn_user(f"simulate: torsion spring {name!r} turned more than half a turn from "
                  f"its rest angle at t = {solution.t[state]:.6g}; beyond it the angle is "
                  f"read on the other side and the spring pushes the other way. A torsion "
                  f"spring holds for motions within half a turn of its rest angle",
                  RuntimeWarning)


#: A step that turns a rigid body by more than a quarter turn does not resolve its rotation:
#: the frame turned half a revolution further (a shaft about its axis), which meets the same
#: constraints and keeps the energy, then lies as close to the step's start as the true one,
#: so a run may land on it unnoticed.
QUARTER_TURN = 0.5 * math.pi

#: Frames farther than this from orthonormal (max |R^T R - I|) have no rotation angle
FRAME_TOLERANCE = 0.1

#: Stored states read at a time by :func:`_warn_if_steps_turn_bodies_too_far` (bounded
#: memory for long runs of large models)
_TURN_CHECK_VALUES = 2**20


def _substepped(solution: Solution) -> np.ndarray:
    """Which steps of ``solution`` were done as sub-steps (refined, or after a restart)."""
    done = np.zeros(solution.t.size - 1, dtype=bool)
    first = int(solution.stats.get("first_step", 0))
    for step, depth in solution.stats.get("refined_steps", ()):
        if depth > 0 and 0 <= step - first < done.size:
            done[step - first] = True
    for _, redone_from, _ in solution.stats.get("restarts", ()):
        done[max(redone_from - first, 0):] = True
    return done


def _warn_if_steps_turn_bodies_too_far(solution: Solution, solver: Solver) -> None:
    """Name the rigid bodies that a step turned by more than :data:`QUARTER_TURN`: the
    angle theta of R_n^T R_{n+1}, from tr(R_n^T R_{n+1}) = sum_i d_i^n . d_i^{n+1} =
    1 + 2 cos theta, or h |omega| at either node, omega = 1/2 sum_i d_i x d_i' (the turn
    the motion makes in a step, which em's midpoint rotation shrinks to 2 atan(h |omega| /
    2): below a quarter turn up to h |omega| = 2, while the run's phase drifts far off).
    Steps done as sub-steps turn less in each and are not tested, steps between frames
    that are not rotations (max |R^T R - I| > :data:`FRAME_TOLERANCE`: ggl-vi-a's nodes
    are off the constraints by its error) have no angle and are tested by their rate
    only, and the Lie-group schemes step on the rotations themselves (no constraints to
    land elsewhere on): not tested."""
    model = solution.model
    columns = model.director_columns if isinstance(model, Model) else np.zeros(0)
    if solution.t.size < 2 or not columns.size or isinstance(solver, LieGroupSolver):
        return
    q, bodies = solution.q, columns.size // 9
    steps = np.diff(solution.t)
    tested = ~_substepped(solution)
    largest = np.zeros(bodies)  # the largest turn of each body's steps
    first = np.full(bodies, -1)  # its first step turning by more than a quarter turn
    chunk = max(1, _TURN_CHECK_VALUES // columns.size)
    for start in range(0, q.shape[0] - 1, chunk):
        directors = q[start:start + chunk + 1, columns]
        frames = directors.reshape(-1, bodies, 3, 3)
        rates = np.asarray(model.apply_inverse_mass(solution.p[start:start + chunk + 1].T)
                           ).T[:, columns].reshape(-1, bodies, 3, 3)
        rate = 0.5 * np.linalg.norm(np.cross(frames, rates).sum(axis=2), axis=2)
        rotations = np.abs(frames @ np.swapaxes(frames, 2, 3) - np.eye(3)).max(
            axis=(2, 3)) <= FRAME_TOLERANCE
        traces = (directors[:-1] * directors[1:]).reshape(-1, bodies, 9).sum(axis=2)
        turns = np.arccos(np.clip(0.5 * (traces - 1.0), -1.0, 1.0))
        turns[~(rotations[:-1] & rotations[1:])] = 0.0  # frames off rotations: no angle
        turns = np.maximum(turns, steps[start:start + chunk, None]
                           * np.maximum(rate[:-1], rate[1:]))
        turns[~tested[start:start + chunk]] = 0.0
        largest = np.maximum(largest, turns.max(axis=0))
        beyond = turns > QUARTER_TURN
        found = (first < 0) & beyond.any(axis=0)
        first[found] = start + beyond[:, found].argmax(axis=0)
    turned = np.flatnonzero(first >= 0)
    if not turned.size:
        return
    rigid = [body.name for body in model.bodies if body.kind == "rigid"]
    names = ", ".join(repr(rigid[k]) for k in turned[:3]) + (
        f" and {turned.size - 3} more" if turned.size > 3 else "")
    step = int(first[turned].min())
    warn_user(f"simulate: steps turned {names} by more than a quarter turn (up to "
              f"{math.degrees(largest[turned].max()):.0f} degrees in one step, the larger "
              f"of the step's turn and h times the rotation rate; first in the step to t = "
              f"{solution.t[step + 1]:.6g}). Such steps do not resolve the rotation and can "
              f"land on another configuration of the mechanism (a body turned half a "
              f"revolution about a joint axis) with energy and constraints intact: reduce h "
              f"so that h times the fastest rotation rate stays well below 1 rad",
              RuntimeWarning)


#: A drive's step is a jump when its coordinate's move differs from what its rate moves it
#: in a step by more than this many times the rate's move, the rate taken as the median at
#: the four nodes around the step (a rate by differences across a jump at a node spikes there
#: only). A kink of the position law (the rate changing within the step, an impulsive drive
#: whose step effort carries the impulse) differs by at most the larger rate's move, a smooth
#: law by far less unless the steps do not resolve it.
JUMP_RATIO = 1.5
#: Moves below this fraction of the drive's travel, or of its coordinate's size (1 rad, the
#: model's length), are not tested: the round-off of a drive that holds a joint still
JUMP_FLOOR = 1e-8


def _warn_if_drives_jumped(solution: Solution) -> None:
    """Name the drives whose prescribed coordinate jumped in a step: a position law that is
    not continuous moves the joint within one step while its rate stays, so the run shows
    neither the impulse nor the kinetic energy of the jump. Tested on the schemes whose
    nodes meet the drive's position and rate (both constraint levels at the step end): the
    nodes of the others (ggl-vi-a at q^{n+theta}, ggl-vi-s, hbvm) are off the law by their
    error."""
    model = solution.model
    props = solution.solver_properties
    if (not isinstance(model, Model) or not model.drives or solution.t.size < 2
            or not getattr(props, "nodes_meet_constraints", False)):
        return
    for name, (joint, coordinate) in model.drives.items():
        path = solution.joint(joint, coordinate)
        steps = np.diff(solution.t)
        around = sliding_window_view(np.pad(path.rate, 1, mode="edge"), 4)[:steps.size]
        # the move's deviation from what the rate around the step moves, in either direction
        moved = np.abs(np.diff(path.position) - steps * np.median(around, axis=1))
        rate_moves = steps * np.median(np.abs(around), axis=1)
        size = max(float(np.max(np.abs(path.position))),
                   model.length_scale if coordinate == "displacement" else 1.0)
        floor = JUMP_FLOOR * max(float(np.ptp(path.position)), size)
        jumps = np.flatnonzero((moved > floor) & (moved > JUMP_RATIO * rate_moves))
        if not jumps.size:
            continue
        k = int(jumps[0])
        warn_user(f"simulate: drive {name!r} moved its {coordinate} by {moved[k]:.3g} more "
                  f"than its rate does in the step to t = {solution.t[k + 1]:.6g}, over "
                  f"{JUMP_RATIO:g} times the rate's move in a step ({rate_moves[k]:.3g}): its "
                  f"position law jumps there, or changes faster than the steps resolve "
                  f"({jumps.size} such steps). A jump's impulse is in neither the drive's "
                  f"effort nor its work: give a position law continuous in t, or reduce h",
                  RuntimeWarning)


def _warn_if_angle_laws_saw_a_wrap(solution: Solution) -> None:
    """Name the actuators whose law reads a joint angle that turned beyond +-pi and is not
    periodic in it: the law received the angle wrapped into (-pi, pi], so its effort
    jumped there."""
    model = solution.model
    if not isinstance(model, Model):
        return
    for info in model.forces:
        if "reads_angles_of" in info.data:
            _warn_if_coupled_angles_saw_a_wrap(solution, info)
        joint = info.data.get("reads_angle_of")
        if joint is None:
            continue
        trajectory = solution.joint(joint)
        beyond = np.flatnonzero(np.abs(trajectory.position) > np.pi)
        if not beyond.size:
            continue
        k = int(beyond[0])
        if model.effort_jumps_at_half_turn(info.name, float(solution.t[k]),
                                           float(trajectory.rate[k])):
            _warn_of_a_wrap(info, joint, float(solution.t[k]))


def _warn_of_a_wrap(info, joint: str, time: float) -> None:
    warn_user(f"simulate: {info.type} {info.name!r} reads the angle of joint {joint!r}, which "
              f"turned beyond +-pi at t = {time:.6g}; the law receives the angle wrapped into "
              f"(-pi, pi] (it jumps by 2 pi there): write angle errors wrapped, e.g. (target "
              f"- angle + pi) % (2 * pi) - pi", RuntimeWarning)


def _warn_if_coupled_angles_saw_a_wrap(solution: Solution, info) -> None:
    """:func:`_warn_if_angle_laws_saw_a_wrap` for a law of several joints' coordinates
    (:class:`mbs.forces.JointEfforts`): each angle it reads that turned beyond +-pi, with
    the other coordinates at their values at that node."""
    paths = [solution.joint(joint, coordinate) for joint, coordinate in info.data["coordinates"]]
    for index, joint in enumerate(info.data["reads_angles_of"]):
        if joint is None:
            continue
        beyond = np.flatnonzero(np.abs(paths[index].position) > np.pi)
        if not beyond.size:
            continue
        k = int(beyond[0])
        # the coordinates as the law receives them: angles wrapped into (-pi, pi]
        positions = np.array([path.position[k] if not is_angle(path.coordinate) else
                              np.pi - (np.pi - path.position[k]) % (2.0 * np.pi)
                              for path in paths])
        rates = np.array([path.rate[k] for path in paths])
        if solution.model.effort_jumps_at_half_turn(info.name, float(solution.t[k]), 0.0,
                                                     (positions, rates, index)):
            _warn_of_a_wrap(info, joint, float(solution.t[k]))


def _warn_if_energy_is_lost(solution: Solution) -> None:
    if solution.t.size < 2:
        return
    kinetic, potential, work = (solution.kinetic_energy(), solution.potential_energy(),
                                solution.work)
    energy = kinetic + potential - work  # the balance, for non-conservative models
    # The energy the motion exchanges, not only the terms at the start: a body released near
    # the zero of its potential starts with almost no energy and gains kinetic energy of the
    # size of the potential it descends; a motor driving a damped machine passes energy
    # through it every cycle, and the scheme's error in the balance grows with that flow,
    # not with the net work.
    scale = max(abs(energy[0]), abs(potential[0]), float(np.max(kinetic)),
                float(np.ptp(potential)), float(np.sum(np.abs(np.diff(work)))))
    model = solution.model
    diagonal = model.mass_matrix.diagonal()
    lightest = float(np.min(diagonal[diagonal > 0.0], initial=1.0))
    duration = max(float(solution.t[-1] - solution.t[0]), 1e-300)
    natural = lightest * (getattr(model, "length_scale", 1.0) / duration) ** 2
    if scale <= np.finfo(float).eps * natural:  # at rest up to round-off: nothing to lose
        return
    change = float(np.max(np.abs(energy - energy[0])))
    # What the rounding of the coordinates explains: V moves by |grad V| eps |q| when q
    # does (a body resting on a support in a field, whose height varies by round-off).
    force = float(np.max(np.abs(model.potential_gradient(solution.q[0])), initial=0.0))
    if change <= 16.0 * np.finfo(float).eps * (natural + force * model.length_scale):
        return
    if not change > ENERGY_WARNING_LEVEL * scale:  # also catches NaN
        return
    what = ("the energy (net of the work of loads, dampers, actuators and drives)"
            if solution.model.non_conservative else "the energy of this conservative model")
    largest = float(np.max(np.abs(energy)))
    growth = (f", up to {largest / abs(energy[0]):.3g} times its initial size"
              if largest > 10.0 * abs(energy[0]) > 0.0 else "")
    solver = str(solution.stats["solver"])
    advice = ("reduce h" if solver.startswith("em") else
              "reduce h (or use 'em', which conserves energy at any step size)")
    warn_user(f"simulate: {solver} at h = {solution.stats['h']:g} changed {what} by up to "
              f"{change:.3g} from E0 = {energy[0]:.6g} ({100.0 * change / scale:.3g} % of the "
              f"{scale:.3g} the motion exchanges{growth}): the step is beyond the scheme's "
              f"stability or accuracy limit; {advice}", RuntimeWarning)
