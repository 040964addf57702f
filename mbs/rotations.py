"""Rotation helpers: build the director matrix R = [d1 d2 d3] from common parametrisations."""

from __future__ import annotations

import numpy as np

from mbs.errors import ModelError
from mbs.validation import as_scalar

#: Tolerance on max |R^T R - I| and |det R - 1| accepted for an initial rotation.
ORTHONORMALITY_TOLERANCE = 1e-10


def skew(vector: np.ndarray) -> np.ndarray:
    """Cross-product matrix: ``skew(a) @ b == np.cross(a, b)``."""
    x, y, z = vector
    return np.array([[0.0, -z, y], [z, 0.0, -x], [-y, x, 0.0]])


def _float_array(value, what: str) -> np.ndarray:
    try:
        return np.asarray(value, dtype=float)
    except (TypeError, ValueError) as exc:
        raise ModelError(f"{what} must be numbers, got {value!r}") from exc


def rotation_from_axis_angle(axis, angle: float) -> np.ndarray:
    """Rotation matrix of ``angle`` (radians) about ``axis`` (Rodrigues' formula).

    Parameters
    ----------
    axis : array_like, shape (3,)
        Rotation axis; normalised here, must be non-zero.
    angle : float
        Rotation angle in radians (right-hand rule).
    """
    axis = _float_array(axis, "rotation_from_axis_angle: axis")
    norm = np.linalg.norm(axis)
    if axis.shape != (3,) or not np.isfinite(norm) or norm == 0.0:
        raise ModelError(f"rotation axis must be a finite non-zero 3-vector, got {axis!r}")
    angle = as_scalar(angle, "angle", "rotation")
    k = skew(axis / norm)
    return np.eye(3) + np.sin(angle) * k + (1.0 - np.cos(angle)) * (k @ k)


def rotation_from_quaternion(quaternion) -> np.ndarray:
    """Rotation matrix of the quaternion (w, x, y, z) (scalar first); normalised here."""
    quaternion = _float_array(quaternion, "rotation_from_quaternion: quaternion")
    norm = np.linalg.norm(quaternion)
    if quaternion.shape != (4,) or not np.isfinite(norm) or norm == 0.0:
        raise ModelError(f"quaternion must be a finite non-zero 4-vector (w, x, y, z), "
                         f"got {quaternion!r}")
    w, x, y, z = quaternion / norm
    return np.array([
        [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
        [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
        [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
    ])


def rotation_about_x(angle: float) -> np.ndarray:
    """Rotation about the world x axis."""
    return rotation_from_axis_angle((1.0, 0.0, 0.0), angle)


def rotation_about_y(angle: float) -> np.ndarray:
    """Rotation about the world y axis."""
    return rotation_from_axis_angle((0.0, 1.0, 0.0), angle)


def rotation_about_z(angle: float) -> np.ndarray:
    """Rotation about the world z axis."""
    return rotation_from_axis_angle((0.0, 0.0, 1.0), angle)


def check_rotation(rotation, owner: str) -> np.ndarray:
    """Return ``rotation`` (a matrix, or a single ``scipy.spatial.transform.Rotation``) as an
    array after checking it is a proper orthonormal 3x3 matrix.

    Raises
    ------
    ModelError
        If the matrix is not 3x3, not finite, not orthonormal within
        :data:`ORTHONORMALITY_TOLERANCE`, or a reflection.
    """
    if callable(getattr(rotation, "as_matrix", None)):  # scipy.spatial.transform.Rotation
        rotation = rotation.as_matrix()
    try:
        rotation = np.array(rotation, dtype=float)  # a copy, as for vectors
    except (TypeError, ValueError) as exc:
        raise ModelError(f"{owner}: rotation must be a 3x3 matrix whose columns are the "
                         f"directors d1, d2, d3 (or a scipy Rotation), got {rotation!r}"
                         ) from exc
    if rotation.shape != (3, 3) or not np.all(np.isfinite(rotation)):
        raise ModelError(f"{owner}: rotation must be a finite 3x3 matrix whose columns are the "
                         f"directors d1, d2, d3; got shape {rotation.shape}")
    error = np.max(np.abs(rotation.T @ rotation - np.eye(3)))
    if error > ORTHONORMALITY_TOLERANCE:
        raise ModelError(
            f"{owner}: rotation is not orthonormal (max |R^T R - I| = {error:.3e} > "
            f"{ORTHONORMALITY_TOLERANCE:.0e}); build it with mbs.rotation_from_axis_angle or "
            f"mbs.rotation_from_quaternion, or orthonormalise it")
    if np.linalg.det(rotation) < 0.0:
        raise ModelError(f"{owner}: rotation has determinant -1 (a reflection); swap the sign of "
                         f"one director to make the frame right-handed")
    return rotation
