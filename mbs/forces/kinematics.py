"""Kinematics of body points, frames and joint coordinates in director form, on a few
coordinates of q (what the work-doing forces of :mod:`mbs.forces.applied` act through).

A body point x = phi + sum_k X_k d_k is affine in q, so a force F at it has the generalized
force B^T F with a constant B. A torque tau on a rigid body acts on the directors as
Q_i = c x d_i with c = K^-1 tau, K = tr(S) I - S, S = sum_i d_i d_i^T: then
sum_i d_i x Q_i = tau for any directors, so the momentum map of a rotation about e changes by
exactly tau . e per unit time, also at the interpolated (not quite orthonormal) configurations
where the schemes evaluate forces. On orthonormal directors K = 2 I, c = tau / 2 and the
matching angular velocity K^-1 sum_i d_i x d_i' is the usual 1/2 sum_i d_i x d_i'.
"""

from __future__ import annotations

import numpy as np

from mbs.quadratic import AffineVector


class LocalCoordinates:
    """The coordinates of q an element depends on, and the maps of its affine vectors.

    Parameters
    ----------
    indices : ndarray of int
        Model coordinates, in the order of the element's local vectors.
    """

    def __init__(self, indices: np.ndarray):
        self.indices = np.asarray(indices, dtype=np.intp)
        self._local = {int(index): k for k, index in enumerate(self.indices)}

    @property
    def size(self) -> int:
        return int(self.indices.size)

    def affine(self, vector: AffineVector) -> tuple[np.ndarray, np.ndarray]:
        """(A, c) with ``vector(q) = A q_local + c``; A has shape (3, size)."""
        matrix = np.zeros((3, self.size))
        for coefficient, start in vector.terms:
            for j in range(3):
                matrix[j, self._local[start + j]] += coefficient
        return matrix, np.array(vector.constant, dtype=float)

    def directors(self, offset: int | None) -> np.ndarray | None:
        """Local positions of d1, d2, d3 of the rigid body at ``offset`` (3, 3), or None."""
        if offset is None:
            return None
        return np.array([[self._local[offset + 3 + 3 * i + j] for j in range(3)]
                         for i in range(3)], dtype=np.intp)


def cross(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a x b over the last axis (broadcast), without the overhead of ``np.cross`` on the
    small arrays of one element."""
    a, b = np.broadcast_arrays(a, b)
    out = np.empty(a.shape)
    out[..., 0] = a[..., 1] * b[..., 2] - a[..., 2] * b[..., 1]
    out[..., 1] = a[..., 2] * b[..., 0] - a[..., 0] * b[..., 2]
    out[..., 2] = a[..., 0] * b[..., 1] - a[..., 1] * b[..., 0]
    return out


def skew(vector: np.ndarray) -> np.ndarray:
    """[v]x, the matrix of v x ."""
    x, y, z = vector
    return np.array([[0.0, -z, y], [z, 0.0, -x], [-y, x, 0.0]])


def rotation_generator(directors: np.ndarray) -> np.ndarray:
    """K = tr(S) I - S with S = sum_i d_i d_i^T for directors as rows (3, 3)."""
    gram = directors.T @ directors
    return np.trace(gram) * np.eye(3) - gram


def torque_coordinates(directors: np.ndarray, torque: np.ndarray) -> np.ndarray:
    """The generalized force of ``torque`` on the directors (rows d_i), shape (3, 3):
    row i is c x d_i with c = K^-1 torque (see the module docstring)."""
    c = np.linalg.solve(rotation_generator(directors), torque)
    return cross(c, directors)


def angular_velocity(directors: np.ndarray, rates: np.ndarray) -> np.ndarray:
    """K^-1 sum_i d_i x d_i', the rate dual to :func:`torque_coordinates`."""
    return np.linalg.solve(rotation_generator(directors), cross(directors, rates).sum(axis=0))
