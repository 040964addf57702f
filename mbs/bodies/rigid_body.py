"""Rigid body in the director formulation (seed 003, section 6.2)."""

from __future__ import annotations

import numpy as np

from mbs.bodies.base import Body
from mbs.errors import ModelError
from mbs.quadratic import AffineVector, QuadraticTableBuilder
from mbs.rotations import check_rotation
from mbs.validation import MAX_MAGNITUDE, MIN_POSITIVE, as_vector

#: Relative tolerance (to the trace of the inertia) for symmetry and for a vanishing Euler inertia.
INERTIA_TOLERANCE = 1e-12

_INTERNAL_PAIRS = ((0, 0), (1, 1), (2, 2), (0, 1), (0, 2), (1, 2))


class RigidBody(Body):
    """A rigid body with coordinates q = (phi, d1, d2, d3) in R^12.

    phi is the centre of mass, d1, d2, d3 the body-fixed orthonormal directors (the columns of
    the rotation matrix, aligned with the body axes in which ``inertia`` is given). The mass
    matrix is constant, M = diag(m I3, E (x) I3) with the Euler tensor E = 1/2 tr(J) I - J
    (seed 003, eq. (101)); six internal constraints keep the directors orthonormal (eq. (103)).

    Parameters
    ----------
    mass : float
        Total mass, positive.
    inertia : array_like
        Either three principal moments (I1, I2, I3) about the centre of mass (body axes = the
        directors) or a symmetric 3x3 inertia tensor in the body frame.
    name : str, optional
        Unique name in the system.
    shape : dict, optional
        Geometry record (set by :meth:`from_shape`, used for visualisation).
    """

    kind = "body"
    n_coordinates = 12
    has_orientation = True

    def __init__(self, mass: float, inertia, name: str | None = None,
                 shape: dict | None = None):
        super().__init__(name)
        self.mass = mass
        self.inertia = inertia
        self.shape = shape
        self.position = np.zeros(3)
        self.rotation = np.eye(3)
        self.velocity = np.zeros(3)
        self.angular_velocity = np.zeros(3)

    @property
    def inertia(self) -> np.ndarray:
        """Inertia tensor (3, 3) about the centre of mass in the body frame (read-only);
        setting a new one validates it and updates :attr:`euler_tensor`."""
        return self._inertia

    @inertia.setter
    def inertia(self, value) -> None:
        owner = f"RigidBody {self.name!r}"
        inertia = _inertia_tensor(value, owner)
        euler = _euler_tensor(inertia, owner)
        for array in (inertia, euler):  # changed only as a whole, through this setter
            array.setflags(write=False)
        self._inertia, self._euler_tensor = inertia, euler

    @property
    def euler_tensor(self) -> np.ndarray:
        """E = 1/2 tr(J) I - J of :attr:`inertia` (seed 003, eq. (101))."""
        return self._euler_tensor

    # -- construction helpers ---------------------------------------------------------------
    @classmethod
    def from_shape(cls, shape: str, *, mass: float | None = None, density: float | None = None,
                   name: str | None = None, **dimensions) -> RigidBody:
        """Rigid body with the mass and inertia of a homogeneous solid.

        See :func:`mbs.bodies.shapes.shape_inertia` for the shapes and their dimensions
        (box, cylinder, tube, sphere, spherical_shell, cone, torus). Exactly one of ``mass`` and
        ``density`` must be given.
        """
        from mbs.bodies.shapes import shape_inertia

        owner = f"RigidBody {name!r}" if name is not None else f"RigidBody.from_shape({shape!r})"
        body_mass, inertia, record = shape_inertia(shape, mass=mass, density=density,
                                                   owner=owner, **dimensions)
        return cls(body_mass, inertia, name=name, shape=record)

    def set_state(self, position=None, rotation=None, velocity=None,
                  angular_velocity=None) -> RigidBody:
        """Set the initial state in the world frame.

        Parameters
        ----------
        position : array_like (3,)
            Centre of mass.
        rotation : array_like (3, 3) or scipy.spatial.transform.Rotation
            Columns are the directors d1, d2, d3 (orthonormal, right-handed).
        velocity : array_like (3,)
            Velocity of the centre of mass.
        angular_velocity : array_like (3,)
            Angular velocity in the world frame; director rates are omega x d_i.
        """
        owner = f"RigidBody {self.name!r}"
        if position is not None:
            self.position = as_vector(position, 3, "position", owner)
        if rotation is not None:
            self.rotation = check_rotation(rotation, owner)
        if velocity is not None:
            self.velocity = as_vector(velocity, 3, "velocity", owner)
        if angular_velocity is not None:
            self.angular_velocity = as_vector(angular_velocity, 3, "angular_velocity", owner)
        return self

    # -- model data -------------------------------------------------------------------------
    def initial_coordinates(self) -> np.ndarray:
        """q0 = (phi, d1, d2, d3)."""
        return np.concatenate([self.position, self.rotation.T.ravel()])

    def initial_velocities(self) -> np.ndarray:
        """dq/dt at t0: (v, omega x d1, omega x d2, omega x d3)."""
        director_rates = np.cross(self.angular_velocity, self.rotation.T)
        return np.concatenate([self.velocity, director_rates.ravel()])

    def mass_block(self) -> np.ndarray:
        """The constant 12x12 mass block diag(m I3, E (x) I3)."""
        block = np.zeros((12, 12))
        block[:3, :3] = self.mass * np.eye(3)
        block[3:, 3:] = np.kron(self.euler_tensor, np.eye(3))
        return block

    def inverse_mass_block(self) -> np.ndarray:
        """Inverse of :meth:`mass_block`, diag(I3/m, E^-1 (x) I3)."""
        block = np.zeros((12, 12))
        block[:3, :3] = np.eye(3) / self.mass
        block[3:, 3:] = np.kron(np.linalg.inv(self.euler_tensor), np.eye(3))
        return block

    def reference_point(self) -> np.ndarray:
        return self.position

    def point_expression(self, local_point, offset):
        x = np.asarray(local_point, dtype=float)
        terms = ((1.0, offset),) + tuple(
            (float(x[i]), offset + 3 + 3 * i) for i in range(3) if x[i] != 0.0)
        return AffineVector(terms, np.zeros(3))

    def vector_expression(self, local_vector, offset):
        u = np.asarray(local_vector, dtype=float)
        terms = tuple((float(u[i]), offset + 3 + 3 * i) for i in range(3) if u[i] != 0.0)
        return AffineVector(terms, np.zeros(3))

    def to_local_point(self, world_point):
        return self.rotation.T @ (np.asarray(world_point, dtype=float) - self.position)

    def to_local_vector(self, world_vector):
        return self.rotation.T @ np.asarray(world_vector, dtype=float)

    def director_expression(self, index: int, offset: int) -> AffineVector:
        """d_index (0-based) as an expression."""
        return AffineVector(((1.0, offset + 3 + 3 * index),), np.zeros(3))

    def add_internal_constraints(self, builder: QuadraticTableBuilder, offset: int) -> list[int]:
        """Orthonormality of the directors, seed 003 eq. (103)."""
        rows = []
        for i, j in _INTERNAL_PAIRS:
            row = builder.new_row()
            di, dj = self.director_expression(i, offset), self.director_expression(j, offset)
            if i == j:
                builder.add_dot(row, di, dj, 0.5)
                builder.add_constant(row, -0.5)
            else:
                builder.add_dot(row, di, dj)
            rows.append(row)
        return rows

    def characteristic_length(self) -> float:
        """Radius of gyration sqrt(tr J / (2 m)), a length that scales joint equations."""
        return float(np.sqrt(np.trace(self.inertia) / (2.0 * self.mass)))


def _inertia_tensor(inertia, owner: str) -> np.ndarray:
    try:
        array = np.asarray(inertia, dtype=float)
    except (TypeError, ValueError) as exc:
        raise ModelError(f"{owner}: inertia must be three principal moments or a 3x3 tensor, "
                         f"got {inertia!r}") from exc
    if array.shape == (3,):
        array = np.diag(array)
    if array.shape != (3, 3):
        raise ModelError(f"{owner}: inertia must be three principal moments (I1, I2, I3) or a "
                         f"symmetric 3x3 tensor, got shape {array.shape}")
    if not np.all(np.isfinite(array)):
        raise ModelError(f"{owner}: inertia must be finite, got {inertia!r}")
    largest = float(np.max(np.abs(array)))
    if largest > MAX_MAGNITUDE or 0.0 < largest < MIN_POSITIVE:
        raise ModelError(f"{owner}: inertia has the magnitude {largest:.3g}, outside the "
                         f"supported range [{MIN_POSITIVE:.0e}, {MAX_MAGNITUDE:.0e}]; rescale "
                         f"the units")
    scale = max(np.max(np.abs(array)), np.finfo(float).tiny)
    if np.max(np.abs(array - array.T)) > INERTIA_TOLERANCE * scale:
        raise ModelError(f"{owner}: inertia tensor is not symmetric; pass a symmetric 3x3 "
                         f"matrix (body frame, about the centre of mass)")
    array = 0.5 * (array + array.T)
    moments = np.linalg.eigvalsh(array)
    if moments[0] < 0.0 or moments[-1] <= 0.0:
        raise ModelError(f"{owner}: inertia must be positive (semi-)definite, got principal "
                         f"moments {moments}")
    return array


def _euler_tensor(inertia: np.ndarray, owner: str) -> np.ndarray:
    """E = 1/2 tr(J) I - J; positive definite iff the principal moments satisfy the strict
    triangle inequality I_i < I_j + I_k."""
    euler = 0.5 * np.trace(inertia) * np.eye(3) - inertia
    values, vectors = np.linalg.eigh(euler)
    tolerance = INERTIA_TOLERANCE * np.trace(inertia)
    for value, vector in zip(values, vectors.T):
        axis = _axis_name(vector)
        if value < -tolerance:
            raise ModelError(
                f"{owner}: inertia violates the triangle inequality (a principal moment exceeds "
                f"the sum of the other two; Euler inertia along {axis} is {value:.3e} < 0); "
                f"no physical mass distribution has these moments")
        if value <= tolerance:
            raise ModelError(
                f"{owner}: zero Euler inertia along {axis}: the body has no extent in that "
                f"direction (ideal rod or lamina), which gives a singular director mass matrix. "
                f"Give it a small thickness, e.g. RigidBody.from_shape('cylinder', radius=...) "
                f"for a rod or from_shape('box', ...) with a non-zero thickness for a plate")
    return euler


def _axis_name(vector: np.ndarray) -> str:
    index = int(np.argmax(np.abs(vector)))
    if abs(abs(vector[index]) - 1.0) < 1e-9:
        return f"body axis d{index + 1}"
    return f"body direction {np.round(vector, 4)}"
