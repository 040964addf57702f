"""Body base class and the ground."""

from __future__ import annotations

import numpy as np

from mbs.elements import Element
from mbs.quadratic import AffineVector, QuadraticTableBuilder
from mbs.validation import as_scalar


class Body(Element):
    """A node of the system graph that owns ``n_coordinates`` generalized coordinates.

    Subclasses provide the coordinate layout, the constant mass block, the internal
    constraints and the affine maps from body-fixed points and vectors to the world frame.
    ``offset`` is the body's first index in the model's q, assigned by ``System.compile``.
    """

    kind = "body"
    n_coordinates = 0
    has_orientation = False

    @property
    def mass(self) -> float:
        """Total mass (validated when set; a model compiled before keeps the old value)."""
        return self._mass

    @mass.setter
    def mass(self, value: float) -> None:
        self._mass = as_scalar(value, "mass", f"{type(self).__name__} {self.name!r}",
                               positive=True)

    def reference_point(self) -> np.ndarray:
        """World position of the body's reference point in the initial state."""
        raise NotImplementedError

    def point_expression(self, local_point: np.ndarray, offset: int) -> AffineVector:
        """World position of a body-fixed point as an affine function of q."""
        raise NotImplementedError

    def vector_expression(self, local_vector: np.ndarray, offset: int) -> AffineVector:
        """World components of a body-fixed direction as a linear function of q."""
        raise NotImplementedError

    def to_local_point(self, world_point: np.ndarray) -> np.ndarray:
        """Body-fixed coordinates of a world point given at the initial pose."""
        raise NotImplementedError

    def to_local_vector(self, world_vector: np.ndarray) -> np.ndarray:
        """Body-fixed components of a world direction given at the initial pose."""
        raise NotImplementedError

    def add_internal_constraints(self, builder: QuadraticTableBuilder, offset: int) -> list[int]:
        """Append the body's own constraints to ``builder``; return their rows."""
        return []

    def characteristic_length(self) -> float:
        """Length scale of the body (used for scaling joint equations)."""
        return 1.0


class Ground(Body):
    """The inertial frame: no coordinates, every point and vector is constant."""

    kind = "ground"

    def __init__(self, name: str = "ground"):
        super().__init__(name)

    def reference_point(self) -> np.ndarray:
        return np.zeros(3)

    def point_expression(self, local_point, offset):
        return AffineVector((), np.array(local_point, dtype=float))

    def vector_expression(self, local_vector, offset):
        return AffineVector((), np.array(local_vector, dtype=float))

    def to_local_point(self, world_point):
        return np.array(world_point, dtype=float)

    def to_local_vector(self, world_vector):
        return np.array(world_vector, dtype=float)

    has_orientation = True  # the ground frame can carry axes
