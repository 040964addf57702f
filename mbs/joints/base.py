"""Joint base class and the compile-time context that turns world data into q-expressions."""

from __future__ import annotations

import numpy as np

from mbs.bodies.base import Body
from mbs.elements import Element
from mbs.errors import ModelError, ModelTypeError
from mbs.quadratic import AffineVector, QuadraticTableBuilder


class BuildContext:
    """What an element needs at compile time: each body's first index in q."""

    def __init__(self, offsets: dict[str, int]):
        self.offsets = offsets

    def point(self, body: Body, world_point: np.ndarray) -> AffineVector:
        """Body-fixed point given in world coordinates at the initial pose, as an expression."""
        return body.point_expression(body.to_local_point(world_point), self.offsets[body.name])

    def vector(self, body: Body, world_vector: np.ndarray) -> AffineVector:
        """Body-fixed direction given in world coordinates at the initial pose."""
        return body.vector_expression(body.to_local_vector(world_vector), self.offsets[body.name])


class Joint(Element):
    """A holonomic constraint between two bodies (or a body and the ground).

    Subclasses implement :meth:`add_rows`, appending their equations to a
    :class:`~mbs.quadratic.QuadraticTableBuilder`; ``n_equations`` is their count.
    """

    kind = "joint"
    n_equations = 0
    #: What each equation keeps, in row order; names the equations dropped as redundant.
    equation_names: tuple[str, ...] = ()

    def __init__(self, body_a: Body, body_b: Body, name: str | None = None):
        super().__init__(name)
        for label, body in (("first body", body_a), ("second body", body_b)):
            if not isinstance(body, Body):
                raise ModelTypeError(f"{type(self).__name__} {self.name!r}: {label} must be a "
                                     f"body (RigidBody, PointMass or system.ground), got "
                                     f"{body!r}")
        if body_a is body_b:
            raise ModelError(f"{type(self).__name__} {self.name!r} connects body "
                             f"{body_a.name!r} to itself; give two different bodies")
        self.body_a = body_a
        self.body_b = body_b

    @property
    def bodies(self) -> tuple[Body, Body]:
        return (self.body_a, self.body_b)

    def add_rows(self, builder: QuadraticTableBuilder, context: BuildContext) -> list[int]:
        raise NotImplementedError

    def equation_label(self, index: int) -> str:
        """``name[index] (what the equation keeps)``, e.g. ``hinge[4] (parallel axes, 2)``."""
        return equation_label(self.name, self.equation_names, index)

    def length_scale(self, point: np.ndarray) -> float:
        """Length that makes the joint's point equations dimensionless.

        The largest distance from a rigid body's centre of mass to the joint point, so that a
        tip fixed at distance l gives phi/l - d3 as in seed 003 eq. (104); the bodies' radius of
        gyration when the joint sits at a centre of mass; 1 for particles and ground.
        """
        distances = [np.linalg.norm(np.asarray(point) - b.reference_point())
                     for b in self.bodies if b.n_coordinates == 12]
        if distances and max(distances) > 0.0:
            return float(max(distances))
        lengths = [b.characteristic_length() for b in self.bodies if b.n_coordinates == 12]
        return float(max(lengths)) if lengths else 1.0


#: Names of the three equations that keep a point common to two bodies (world x, y, z).
COMMON_POINT = ("common point, x", "common point, y", "common point, z")
#: Names of the two equations that keep two axes parallel.
PARALLEL_AXES = ("parallel axes, 1", "parallel axes, 2")
#: The coordinates of the joints that have one along an axis, by joint type: the angle about
#: it and the displacement along it (drives, actuators and Solution.joint read these).
AXIS_COORDINATES = {"Revolute": ("angle",), "Cylindrical": ("angle", "displacement"),
                    "Prismatic": ("displacement",)}
#: The coordinates of every joint that has some: those of :data:`AXIS_COORDINATES` and a
#: universal joint's rotations about its two cross axes, "angle_a" about axis_a (fixed in
#: body_a) and "angle_b" about axis_b (fixed in body_b), read by Solution.joint and
#: JointEfforts.
JOINT_COORDINATES = {**AXIS_COORDINATES, "Universal": ("angle_a", "angle_b")}


def is_angle(coordinate: str) -> bool:
    """Whether a joint coordinate (of :data:`JOINT_COORDINATES`) is an angle."""
    return coordinate.startswith("angle")


def equation_label(name: str, equation_names: tuple[str, ...], index: int) -> str:
    """``name[index]``, followed by the equation's name in parentheses when it has one."""
    if 0 <= index < len(equation_names):
        return f"{name}[{index}] ({equation_names[index]})"
    return f"{name}[{index}]"


def perpendicular_pair(axis: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Two unit vectors that make (e1, e2, axis) a right-handed orthonormal frame."""
    axis = axis / np.linalg.norm(axis)
    helper = np.eye(3)[int(np.argmin(np.abs(axis)))]
    e1 = np.cross(helper, axis)
    e1 /= np.linalg.norm(e1)
    return e1, np.cross(axis, e1)
