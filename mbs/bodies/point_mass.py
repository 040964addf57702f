"""Point mass (particle) with q in R^3."""

from __future__ import annotations

import numpy as np

from mbs.bodies.base import Body
from mbs.errors import ModelError, ModelTypeError
from mbs.quadratic import AffineVector
from mbs.validation import as_scalar, as_vector

#: Distance (relative to the attachment scale) within which a point counts as "at the particle".
ATTACHMENT_TOLERANCE = 1e-9


class PointMass(Body):
    """A particle of mass ``mass``; its coordinates are its world position.

    A point mass has no orientation: joints that need axes on it are rejected, and every
    attachment point on it must be the particle itself.
    """

    kind = "body"
    n_coordinates = 3
    has_orientation = False

    def __init__(self, mass: float, name: str | None = None, radius: float | None = None):
        super().__init__(name)
        owner = f"PointMass {self.name!r}"
        self.mass = mass
        self.radius = None if radius is None else as_scalar(radius, "radius", owner,
                                                            positive=True)
        self.position = np.zeros(3)
        self.velocity = np.zeros(3)

    def set_state(self, position=None, velocity=None, **others) -> PointMass:
        """Set the initial position and velocity (world frame)."""
        owner = f"PointMass {self.name!r}"
        if others:
            raise ModelTypeError(f"{owner}: set_state takes position and velocity only, got "
                                 f"{sorted(others)}; a point mass has no rotation (use a "
                                 f"RigidBody for orientation and angular velocity)")
        if position is not None:
            self.position = as_vector(position, 3, "position", owner)
        if velocity is not None:
            self.velocity = as_vector(velocity, 3, "velocity", owner)
        return self

    def initial_coordinates(self) -> np.ndarray:
        return self.position.copy()

    def initial_velocities(self) -> np.ndarray:
        return self.velocity.copy()

    def mass_block(self) -> np.ndarray:
        return self.mass * np.eye(3)

    def inverse_mass_block(self) -> np.ndarray:
        return np.eye(3) / self.mass

    def reference_point(self) -> np.ndarray:
        return self.position

    def point_expression(self, local_point, offset):
        return AffineVector(((1.0, offset),), np.zeros(3))

    def vector_expression(self, local_vector, offset):
        raise ModelError(f"PointMass {self.name!r} has no orientation, so no body-fixed axis "
                         f"can be attached to it; use a RigidBody")

    def to_local_point(self, world_point):
        world_point = np.asarray(world_point, dtype=float)
        distance = np.linalg.norm(world_point - self.position)
        scale = max(1.0, np.linalg.norm(self.position))
        if distance > ATTACHMENT_TOLERANCE * scale:
            raise ModelError(
                f"PointMass {self.name!r}: attachment point {world_point} is {distance:.3g} "
                f"away from the particle at {self.position}; a point mass can only be attached "
                f"at its own position (omit the point or use a RigidBody)")
        return np.zeros(3)

    def to_local_vector(self, world_vector):
        return self.vector_expression(world_vector, 0)
