"""Body poses at the animation frames and body-fixed attachment points (numpy only).

Joint and force geometry is stored in the model in world coordinates at the initial pose. A
point x given there is attached to a body through its body-fixed coordinates
X = R0^T (x - phi0), with R0 (columns = directors) and phi0 the body's pose in the reference
configuration; at a later time it is at x(t) = phi(t) + R(t) X.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

GROUND = -1  #: body index of the ground (static world frame)


def reference_coordinates(solution) -> np.ndarray:
    """q of the pose in which the model's joint and force data are given.

    That is ``model.q0``: the state set on the bodies when the model was compiled (stored
    with a saved solution as well).
    """
    return np.asarray(solution.model.q0, dtype=float)


def pose_from_coordinates(info, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(position, rotation) of body ``info`` (a BodyInfo) in the state(s) ``q`` (..., n)."""
    coords = q[..., info.coordinates]
    position = coords[..., :3]
    if info.kind != "rigid":
        rotation = np.broadcast_to(np.eye(3), position.shape[:-1] + (3, 3))
        return position, rotation
    directors = coords[..., 3:12].reshape(coords.shape[:-1] + (3, 3))  # [.., i, component]
    return position, np.swapaxes(directors, -1, -2)


@dataclass
class Poses:
    """Positions and rotations of every body at the selected frames.

    Attributes
    ----------
    names : body names in model order; ``index[name]`` gives the body index.
    position : (F, B, 3); rotation : (F, B, 3, 3) with the directors as columns (identity
    for point masses); indices : (F,) solution nodes; times : (F,) node times.
    """

    names: list[str]
    kinds: list[str]
    position: np.ndarray
    rotation: np.ndarray
    indices: np.ndarray
    times: np.ndarray

    @property
    def index(self) -> dict[str, int]:
        return {name: i for i, name in enumerate(self.names)}

    @property
    def frames(self) -> int:
        return self.indices.size

    def transform(self, frame: int, body: int, local: np.ndarray) -> np.ndarray:
        """World coordinates of body-fixed points ``local`` (P, 3) at ``frame``."""
        if body == GROUND:
            return np.asarray(local, dtype=float)
        return self.position[frame, body] + local @ self.rotation[frame, body].T

    def matrix(self, frame: int, body: int) -> np.ndarray:
        """4x4 homogeneous transform body frame -> world at ``frame``."""
        out = np.eye(4)
        if body != GROUND:
            out[:3, :3] = self.rotation[frame, body]
            out[:3, 3] = self.position[frame, body]
        return out


def poses(solution, indices: np.ndarray) -> Poses:
    """Poses of all bodies at the nodes ``indices`` (work proportional to len(indices))."""
    indices = np.asarray(indices, dtype=int)
    q = np.asarray(solution.q)[indices]
    bodies = solution.model.bodies
    frames = indices.size
    position = np.zeros((frames, len(bodies), 3))
    rotation = np.zeros((frames, len(bodies), 3, 3))
    for b, info in enumerate(bodies):
        position[:, b], rotation[:, b] = pose_from_coordinates(info, q)
    return Poses([b.name for b in bodies], [b.kind for b in bodies], position, rotation,
                 indices, np.asarray(solution.t)[indices])


class Attacher:
    """Converts world data of the reference pose into body-fixed data."""

    def __init__(self, solution):
        model = solution.model
        q_ref = reference_coordinates(solution)
        self.index = {b.name: i for i, b in enumerate(model.bodies)}
        self._pose = {b.name: pose_from_coordinates(b, q_ref) for b in model.bodies}

    def body_index(self, name: str) -> int:
        """Index of body ``name``; the ground (or any name not in the model) is GROUND."""
        return self.index.get(name, GROUND)

    def reference_position(self, name: str) -> np.ndarray:
        """Reference point (centre of mass / particle) of ``name`` at the reference pose."""
        if name not in self._pose:
            return np.zeros(3)
        return np.array(self._pose[name][0], dtype=float)

    def local_point(self, name: str, world_point) -> np.ndarray:
        """X = R0^T (x - phi0); the world point itself for the ground."""
        x = np.asarray(world_point, dtype=float)
        if name not in self._pose:
            return x.copy()
        phi0, r0 = self._pose[name]
        return r0.T @ (x - phi0)

    def local_vector(self, name: str, world_vector) -> np.ndarray:
        """R0^T u; the world vector itself for the ground."""
        u = np.asarray(world_vector, dtype=float)
        if name not in self._pose:
            return u.copy()
        return self._pose[name][1].T @ u
