"""Joints on points only: spherical joint and distance constraint."""

from __future__ import annotations

import numpy as np

from mbs.bodies.base import Body
from mbs.errors import ModelError
from mbs.joints.base import COMMON_POINT, BuildContext, Joint
from mbs.quadratic import QuadraticTableBuilder
from mbs.validation import as_scalar, as_vector


class Spherical(Joint):
    """Ball joint: a common point of both bodies (3 linear equations).

    g = (x_b(P) - x_a(P)) / L with x = phi + X_i d_i body-fixed; L from
    :meth:`Joint.length_scale`. For a top fixed at its tip this is seed 003 eq. (104).

    Parameters
    ----------
    body_a, body_b : Body
        The connected bodies (either may be ``system.ground``).
    point : array_like (3,)
        Joint centre in world coordinates at the initial pose.
    name : str, optional
        Unique in the system; by default ``joint<k>`` with the first k not taken.
    """

    n_equations = 3
    equation_names = COMMON_POINT

    def __init__(self, body_a: Body, body_b: Body, point, name: str | None = None):
        super().__init__(body_a, body_b, name)
        self.point = as_vector(point, 3, "point", f"Spherical {self.name!r}")

    def add_rows(self, builder: QuadraticTableBuilder, context: BuildContext) -> list[int]:
        return add_coincidence_rows(builder, context, self.body_a, self.body_b, self.point,
                                    1.0 / self.length_scale(self.point))


def add_coincidence_rows(builder: QuadraticTableBuilder, context: BuildContext, body_a: Body,
                         body_b: Body, point: np.ndarray, scale: float) -> list[int]:
    """Three rows scale * (x_b(P) - x_a(P)) . e_k = 0."""
    relative = context.point(body_b, point) - context.point(body_a, point)
    rows = []
    for direction in np.eye(3):
        row = builder.new_row()
        builder.add_linear_component(row, relative, direction, scale)
        rows.append(row)
    return rows


class Distance(Joint):
    """Fixed distance between two body points (1 quadratic equation).

    g = 1/2 (|x_b - x_a|^2 / length^2 - 1), the form of seed 003 section 6.1.

    Parameters
    ----------
    body_a, body_b : Body
    length : float, optional
        Positive distance; defaults to the distance at the initial pose.
    point_a, point_b : array_like (3,), optional
        Attachment points in world coordinates at the initial pose; default to each body's
        reference point (centre of mass, particle, or the ground origin).
    name : str, optional
        Unique in the system; by default ``joint<k>`` with the first k not taken.
    """

    n_equations = 1
    equation_names = ("distance",)

    def __init__(self, body_a: Body, body_b: Body, length: float | None = None,
                 point_a=None, point_b=None, name: str | None = None):
        super().__init__(body_a, body_b, name)
        owner = f"Distance {self.name!r}"
        self.point_a = None if point_a is None else as_vector(point_a, 3, "point_a", owner)
        self.point_b = None if point_b is None else as_vector(point_b, 3, "point_b", owner)
        self.length = None if length is None else as_scalar(length, "length", owner,
                                                            positive=True)

    def attachment_points(self) -> tuple[np.ndarray, np.ndarray]:
        a = self.body_a.reference_point() if self.point_a is None else self.point_a
        b = self.body_b.reference_point() if self.point_b is None else self.point_b
        return a, b

    def resolved_length(self) -> float:
        """``length`` or, when omitted, the distance at the initial pose."""
        if self.length is not None:
            return self.length
        a, b = self.attachment_points()
        distance = float(np.linalg.norm(b - a))
        if distance == 0.0:
            raise ModelError(f"Distance {self.name!r}: the attachment points coincide at the "
                             f"initial pose, so the length would be 0; give length= or use a "
                             f"Spherical joint")
        return distance

    def add_rows(self, builder: QuadraticTableBuilder, context: BuildContext) -> list[int]:
        a, b = self.attachment_points()
        length = self.resolved_length()
        if np.array_equal(a, b):
            raise ModelError(f"Distance {self.name!r}: the attachment points coincide at the "
                             f"initial pose (at {a}) while length = {length:g}; the joint has "
                             f"no direction there (its Jacobian vanishes). Set the bodies' "
                             f"initial positions {length:g} apart")
        relative = context.point(self.body_b, b) - context.point(self.body_a, a)
        row = builder.new_row()
        builder.add_dot(row, relative, relative, 0.5 / length**2)
        builder.add_constant(row, -0.5)
        return [row]
