"""Efforts on several joints from one law of all their coordinates: controllers that couple
joints (computed torque, gravity compensation, coupled PD laws)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from mbs.errors import ModelError, ModelTypeError
from mbs.forces.applied import AppliedTerm, EffortGroup, _coordinates, _Value, joint_effort_term
from mbs.forces.base import Force
from mbs.forces.kinematics import LocalCoordinates
from mbs.joints.base import JOINT_COORDINATES, Joint, is_angle

#: Relative step of the central differences giving the law's slopes for Newton's matrix.
SLOPE_STEP = 1e-6


class JointEfforts(Force):
    """Torques about (forces along) the axes of several joints, all given by one law of all
    their coordinates and rates: a computed-torque or gravity-compensating controller, or PD
    laws coupled across joints.

    Each effort acts as a :class:`~mbs.forces.JointTorque` (or
    :class:`~mbs.forces.JointForce`) on its own joint: on the joint's body_b, and opposite
    on its body_a.

    Parameters
    ----------
    joints : sequence of joints, or of (joint, coordinate) pairs
        Revolute joints (their angle), prismatic joints (their displacement), cylindrical
        joints (their angle, or their slide with ``(joint, "displacement")``) and universal
        joints (the rotation about axis_a, or with ``(joint, "angle_b")`` about axis_b; see
        :meth:`mbs.Solution.joint`).
    law : sequence of k numbers, or function
        ``f(t)`` or ``f(t, positions, rates)`` returning the k efforts, with ``positions``
        and ``rates`` arrays (k,) of the joints' coordinates in the order given: angles from
        the initial pose in (-pi, pi] (as :class:`~mbs.forces.JointTorque`'s law receives
        them: write angle errors wrapped) and displacements, and their rates. Newton's
        matrix takes the law's slopes from central differences.
    name : str, optional
        Unique in the system; by default ``force<k>`` with the first k not taken.

    Notes
    -----
    ``Solution.force(name).work`` is the work of all k efforts together and ``effort`` is
    None; each joint's coordinate and rate are ``Solution.joint(joint)``.
    """

    def __init__(self, joints: Sequence, law: Sequence[float] | Callable,
                 name: str | None = None):
        super().__init__(name)
        owner = self.owner = f"JointEfforts {self.name!r}"
        if isinstance(joints, (Joint, str)) or not isinstance(joints, Sequence) or not joints:
            raise ModelTypeError(f"{owner}: joints must be a non-empty list of joints (or of "
                                 f"(joint, coordinate) pairs), got {joints!r}")
        self.joints, self.coordinates = [], []
        for entry in joints:
            joint, coordinate = (entry if isinstance(entry, tuple) and len(entry) == 2
                                 else (entry, None))
            if not isinstance(joint, Joint):
                raise ModelTypeError(f"{owner}: {joint!r} is not a joint; give revolute, "
                                     f"cylindrical, prismatic or universal joints")
            allowed = JOINT_COORDINATES.get(type(joint).__name__)
            if allowed is None:
                raise ModelError(f"{owner}: {type(joint).__name__} {joint.name!r} has no axis "
                                 f"coordinate; efforts act on revolute, cylindrical, "
                                 f"prismatic and universal joints (use a Load on a body "
                                 f"instead)")
            coordinate = allowed[0] if coordinate is None else coordinate
            if coordinate not in allowed:
                raise ModelError(f"{owner}: joint {joint.name!r} has no {coordinate!r} "
                                 f"coordinate; it has {', '.join(allowed)}")
            if (joint, coordinate) in zip(self.joints, self.coordinates):
                raise ModelError(f"{owner}: the {coordinate} of joint {joint.name!r} is listed "
                                 f"twice; list each joint coordinate once")
            self.joints.append(joint)
            self.coordinates.append(coordinate)
        if (len(self.joints) == 1 and not callable(law) and np.ndim(law) == 1
                and len(law) == 1):
            law = law[0]  # one effort, given as a sequence like any count of them
        self.law = _Value(law, len(self.joints), "efforts", owner, "positions, rates")

    @property
    def angles_read(self) -> list[str | None]:
        """Per listed coordinate, the joint whose angle the law reads (None for a
        displacement, and for every coordinate when the law is of t only)."""
        return [joint.name if is_angle(coordinate) and self.law.uses_state else None
                for joint, coordinate in zip(self.joints, self.coordinates)]

    def bodies_acted_on(self) -> list:
        bodies = []
        for joint in self.joints:
            bodies.extend(body for body in joint.bodies if body not in bodies)
        return bodies

    def referenced_bodies(self) -> list:
        for joint in self.joints:
            if joint.system is None:
                raise ModelError(f"{self.owner}: joint {joint.name!r} is not in a system; add "
                                 f"the joint first")
        return self.bodies_acted_on()

    def terms(self, context) -> list:
        return []

    def applied_terms(self, context) -> list[AppliedTerm]:
        local = LocalCoordinates(_coordinates(context, *[
            body for body in self.bodies_acted_on() if body.n_coordinates]))
        geometry = [joint_effort_term(joint, context, None, f"{self.name}[{k}]", coordinate,
                                      local)
                    for k, (joint, coordinate) in enumerate(zip(self.joints,
                                                                self.coordinates))]
        return [_CoupledEffortTerm(self.name, local, geometry, self.law)]


class _CoupledEffortTerm(AppliedTerm):
    """Q = sum_i tau_i(t, s, s') J_i(q) for the joint coordinates s_i(q), s'_i = J_i . v,
    every one written on the same local coordinates. With A = dtau/ds and B = dtau/ds' (by
    central differences):

        dQ/dq = sum_i tau_i dJ_i/dq + J^T (A ds/dq + B d(J v)/dq),    dQ/dv = J^T B J,

    exact also off the constraints, where Newton's iterates are (the geometry's derivatives
    are those of the single-joint efforts, :class:`~mbs.forces.applied._EffortTerm`)."""

    def __init__(self, name: str, local: LocalCoordinates, geometry: list, law: _Value):
        super().__init__(name, local)
        self.law, self.count = law, len(geometry)
        # joint coordinates of one geometry class and layout are evaluated as one batch
        members: dict[tuple, list[int]] = {}
        for index, term in enumerate(geometry):
            members.setdefault(EffortGroup.key(term), []).append(index)
        self._groups = [(np.array(indices), EffortGroup([geometry[i] for i in indices]))
                        for indices in members.values()]

    def _efforts(self, t: float, positions: np.ndarray, rates: np.ndarray) -> np.ndarray:
        return np.atleast_1d(np.asarray(self.law(t, positions, rates), dtype=float))

    def half_turn_gap(self, t: float, positions: np.ndarray, rates: np.ndarray, index: int,
                      e: float) -> float:
        """|tau_index| difference between angle ``index`` at pi - e and at -pi + e, the other
        coordinates at ``positions`` and ``rates``: a gap that closes with e is a law
        periodic in that angle, one that keeps its size a jump."""
        values = []
        for angle in (np.pi - e, -np.pi + e):
            shifted = np.array(positions, dtype=float)
            shifted[index] = angle
            values.append(self._efforts(t, shifted, rates)[index])
        return abs(values[0] - values[1])

    def evaluate(self, t, q, v, jacobian):
        size = q.size
        positions, rows = np.empty(self.count), np.empty((self.count, size))  # s and J
        for order, group in self._groups:
            positions[order], rows[order] = group.kind.batch_coordinate(
                group.data, np.repeat(q[None, :], order.size, axis=0))
        rates = rows @ v
        efforts = self._efforts(t, positions, rates)
        value = efforts @ rows
        if not jacobian:
            return value, None, None
        by_position, by_rate = self._slopes(t, positions, rates)
        gradients, d_rows = np.empty((self.count, size)), np.zeros((self.count, size, size))
        for order, group in self._groups:
            states = np.repeat(q[None, :], order.size, axis=0)
            gradients[order] = group.kind.batch_coordinate_gradient(group.data, states,
                                                                    rows[order])
            turning = group.kind.batch_row_derivative(group.data, states)
            if turning is not None:
                d_rows[order] = turning
        rate_gradients = np.einsum("r,krc->kc", v, d_rows)
        d_q = (np.einsum("k,kac->ac", efforts, d_rows)
               + rows.T @ (by_position @ gradients + by_rate @ rate_gradients))
        return value, d_q, rows.T @ by_rate @ rows

    def _slopes(self, t: float, positions: np.ndarray, rates: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray]:
        """(dtau/ds, dtau/ds'), each (k, k), by central differences (zero for a law of t
        only)."""
        count = positions.size
        if not self.law.uses_state:
            return np.zeros((count, count)), np.zeros((count, count))
        slopes = []
        for varied, fixed, first in ((positions, rates, True), (rates, positions, False)):
            columns = []
            for j in range(count):
                step = SLOPE_STEP * max(abs(float(varied[j])), 1.0)
                shift = np.zeros(count)
                shift[j] = step
                plus, minus = ((varied + shift, fixed) if first else (fixed, varied + shift),
                               (varied - shift, fixed) if first else (fixed, varied - shift))
                columns.append((self._efforts(t, *plus) - self._efforts(t, *minus))
                               / (2.0 * step))
            slopes.append(np.stack(columns, axis=1))
        return slopes[0], slopes[1]
