"""Joints with axes: revolute, universal, cylindrical, prismatic and rigid (fixed).

All equations are bilinear in the directors: a body-fixed vector of one body dotted with a
body-fixed vector (or a point difference) of the other, so every joint is at most quadratic in
q. Axes are given in world coordinates at the initial pose and stored body-fixed.
"""

from __future__ import annotations

import numpy as np

from mbs.bodies.base import Body
from mbs.errors import ModelError
from mbs.joints.base import COMMON_POINT, PARALLEL_AXES, BuildContext, Joint, perpendicular_pair
from mbs.joints.point_joints import add_coincidence_rows
from mbs.quadratic import QuadraticTableBuilder
from mbs.validation import UNIT_ROUNDOFF, as_nonzero_vector, as_vector, optional_damping

#: Largest |cos| between the two axes of a universal joint accepted as perpendicular.
PERPENDICULAR_TOLERANCE = 1e-8


#: The two equations that keep body b's point on body a's axis line.
ON_AXIS = ("point on the axis, 1", "point on the axis, 2")


def _damping(value, joint) -> float | None:
    """The viscous damping coefficient of a joint (None: undamped); see
    :class:`mbs.forces.JointDamper`."""
    return optional_damping(value, f"{type(joint).__name__} {joint.name!r}")


class _AxisJoint(Joint):
    """Common parts: a point, an axis, and a frame (e1, e2, axis) fixed in both bodies."""

    def __init__(self, body_a: Body, body_b: Body, point, axis, name: str | None):
        super().__init__(body_a, body_b, name)
        owner = f"{type(self).__name__} {self.name!r}"
        self.point = as_vector(point, 3, "point", owner)
        self.axis = as_nonzero_vector(axis, "axis", owner)
        for body in self.bodies:
            if not body.has_orientation:
                raise ModelError(f"{owner}: body {body.name!r} is a point mass and has no "
                                 f"orientation to carry the joint axis; use a RigidBody")

    def _frame(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        e1, e2 = perpendicular_pair(self.axis)
        return self.axis, e1, e2

    def _add_orthogonality(self, builder, context, vector_a, vector_b) -> int:
        row = builder.new_row()
        builder.add_dot(row, context.vector(self.body_a, vector_a),
                        context.vector(self.body_b, vector_b))
        return row

    def _add_axis_alignment(self, builder, context) -> list[int]:
        """axis_a . e1_b = 0 and axis_a . e2_b = 0: the axes stay parallel (2 equations)."""
        axis, e1, e2 = self._frame()
        return [self._add_orthogonality(builder, context, axis, e1),
                self._add_orthogonality(builder, context, axis, e2)]

    def _add_rotation_lock(self, builder, context) -> list[int]:
        """e1_a . e2_b = 0: no relative rotation about the axis (1 equation)."""
        _, e1, e2 = self._frame()
        return [self._add_orthogonality(builder, context, e1, e2)]

    def _add_point_on_axis(self, builder, context) -> list[int]:
        """(x_b(P) - x_a(P)) . e_k(a) / L = 0 for k = 1, 2: b's point stays on a's axis line."""
        _, e1, e2 = self._frame()
        relative = (context.point(self.body_b, self.point)
                    - context.point(self.body_a, self.point))
        scale = 1.0 / self.length_scale(self.point)
        rows = []
        for direction in (e1, e2):
            row = builder.new_row()
            builder.add_dot(row, relative, context.vector(self.body_a, direction), scale)
            rows.append(row)
        return rows

    def _add_coincidence(self, builder, context) -> list[int]:
        return add_coincidence_rows(builder, context, self.body_a, self.body_b, self.point,
                                    1.0 / self.length_scale(self.point))


class Revolute(_AxisJoint):
    """Hinge: common point and common axis (5 equations).

    Parameters
    ----------
    body_a, body_b : Body
    point : array_like (3,)
        A point on the hinge axis, world coordinates at the initial pose.
    axis : array_like (3,)
        Hinge direction, world coordinates at the initial pose.
    damping : float, optional
        Viscous damping c of the relative rotation: torque -c angle' about the axis
        (:class:`mbs.forces.JointDamper`); 0 or None: undamped.
    name : str, optional
        Unique in the system; by default ``joint<k>`` with the first k not taken.
    """

    n_equations = 5
    equation_names = COMMON_POINT + PARALLEL_AXES

    def __init__(self, body_a: Body, body_b: Body, point, axis, name: str | None = None,
                 damping: float | None = None):
        super().__init__(body_a, body_b, point, axis, name)
        self.damping = _damping(damping, self)

    def add_rows(self, builder: QuadraticTableBuilder, context: BuildContext) -> list[int]:
        return self._add_coincidence(builder, context) + self._add_axis_alignment(builder,
                                                                                   context)


class Cylindrical(_AxisJoint):
    """Rotation about and sliding along a common axis (4 equations); ``damping`` damps the
    rotation (see :class:`Revolute`)."""

    n_equations = 4
    equation_names = PARALLEL_AXES + ON_AXIS

    def __init__(self, body_a: Body, body_b: Body, point, axis, name: str | None = None,
                 damping: float | None = None):
        super().__init__(body_a, body_b, point, axis, name)
        self.damping = _damping(damping, self)

    def add_rows(self, builder: QuadraticTableBuilder, context: BuildContext) -> list[int]:
        return self._add_axis_alignment(builder, context) + self._add_point_on_axis(builder,
                                                                                     context)


class Prismatic(_AxisJoint):
    """Sliding along a common axis without relative rotation (5 equations); ``damping`` c
    gives the force -c s' along the axis (s the displacement)."""

    n_equations = 5
    equation_names = PARALLEL_AXES + ("no rotation about the axis",) + ON_AXIS

    def __init__(self, body_a: Body, body_b: Body, point, axis, name: str | None = None,
                 damping: float | None = None):
        super().__init__(body_a, body_b, point, axis, name)
        self.damping = _damping(damping, self)

    def add_rows(self, builder: QuadraticTableBuilder, context: BuildContext) -> list[int]:
        return (self._add_axis_alignment(builder, context)
                + self._add_rotation_lock(builder, context)
                + self._add_point_on_axis(builder, context))


class Rigid(_AxisJoint):
    """Welds two bodies together (6 equations).

    ``point`` defaults to the reference point of ``body_b``; the axis only fixes the frame
    in which the three rotation equations are written and defaults to the world z axis.
    """

    n_equations = 6
    equation_names = COMMON_POINT + PARALLEL_AXES + ("no rotation about the axis",)

    def __init__(self, body_a: Body, body_b: Body, point=None, axis=(0.0, 0.0, 1.0),
                 name: str | None = None):
        if point is None and isinstance(body_b, Body):
            point = body_b.reference_point()
        super().__init__(body_a, body_b, point, axis, name)

    def add_rows(self, builder: QuadraticTableBuilder, context: BuildContext) -> list[int]:
        return (self._add_coincidence(builder, context)
                + self._add_axis_alignment(builder, context)
                + self._add_rotation_lock(builder, context))


class Universal(Joint):
    """Cardan joint: common point, axis_a fixed in a stays perpendicular to axis_b fixed in b
    (4 equations).

    Parameters
    ----------
    body_a, body_b : Body
        The connected bodies (either may be ``system.ground``).
    point : array_like (3,)
        Joint centre (world, initial pose).
    axis_a, axis_b : array_like (3,)
        The two cross axes (world, initial pose); they must be perpendicular there.
    name : str, optional
        Unique in the system; by default ``joint<k>`` with the first k not taken.
    """

    n_equations = 4
    equation_names = COMMON_POINT + ("perpendicular cross axes",)

    def __init__(self, body_a: Body, body_b: Body, point, axis_a, axis_b,
                 name: str | None = None):
        super().__init__(body_a, body_b, name)
        owner = f"Universal {self.name!r}"
        self.point = as_vector(point, 3, "point", owner)
        self.axis_a = as_nonzero_vector(axis_a, "axis_a", owner)
        self.axis_b = as_nonzero_vector(axis_b, "axis_b", owner)
        cosine = abs(float(self.axis_a @ self.axis_b))
        if cosine > PERPENDICULAR_TOLERANCE:
            raise ModelError(f"{owner}: axis_a and axis_b must be perpendicular at the initial "
                             f"pose (|cos| = {cosine:.3e}); give two perpendicular cross axes")
        # the rounding of axes computed by the user: made exact, so that the joint's equation
        # u_a . u_b = 0 holds at the initial pose to round-off, not only to the tolerance
        if cosine > UNIT_ROUNDOFF:  # perpendicular to round-off: kept (idempotent)
            normal = self.axis_b - (self.axis_a @ self.axis_b) * self.axis_a
            self.axis_b = normal / np.linalg.norm(normal)
        for body in self.bodies:
            if not body.has_orientation:
                raise ModelError(f"{owner}: body {body.name!r} is a point mass and has no "
                                 f"orientation to carry a joint axis; use a RigidBody")

    def add_rows(self, builder: QuadraticTableBuilder, context: BuildContext) -> list[int]:
        rows = add_coincidence_rows(builder, context, self.body_a, self.body_b, self.point,
                                    1.0 / self.length_scale(self.point))
        row = builder.new_row()
        builder.add_dot(row, context.vector(self.body_a, self.axis_a),
                        context.vector(self.body_b, self.axis_b))
        return rows + [row]
