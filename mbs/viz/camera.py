"""Camera presets: a fixed view of the whole motion, or a camera following one body.

Modes
-----
"fixed"   one camera for all frames, framing everything the scene shows over the animation.
"follow"  keeps a constant world-frame offset from a body's centre of mass (``follow=name``).
"lvlh"    follows a body and turns with its radius vector from ``center`` (local vertical /
          local horizontal frame of an orbiting body): the local vertical is the image's
          vertical, the camera looks along the orbit normal.

Views (direction from the target to the camera, in the frame whose third axis points up,
i.e. against gravity): "iso", "front", "back", "side", "top", or any 3-vector.
"""

from __future__ import annotations

import numpy as np

from mbs.errors import ModelError

VIEWS = {"iso": (1.0, -1.5, 0.85), "front": (0.0, -1.0, 0.12), "back": (0.0, 1.0, 0.12),
         "side": (1.0, 0.0, 0.12), "top": (0.0, -1e-3, 1.0)}
MODES = ("fixed", "follow", "lvlh")
VIEW_ANGLE = 30.0  # degrees, vertical


def horizontal_frame(up: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Two horizontal unit vectors (e_a, e_b) with (e_a, e_b, up) right-handed; e_a is the
    world x axis projected on the horizontal plane when possible."""
    up = up / np.linalg.norm(up)
    for candidate in np.eye(3):
        e_a = candidate - (candidate @ up) * up
        if np.linalg.norm(e_a) > 0.3:
            e_a /= np.linalg.norm(e_a)
            return e_a, np.cross(up, e_a)
    raise AssertionError("no horizontal direction")  # pragma: no cover


def view_direction(view, up: np.ndarray) -> np.ndarray:
    """Unit vector from the target to the camera for a preset name or a 3-vector."""
    if isinstance(view, str):
        if view not in VIEWS:
            raise ModelError(f"unknown view {view!r}; choose one of {sorted(VIEWS)} or give a "
                             f"direction vector")
        e_a, e_b = horizontal_frame(up)
        c = VIEWS[view]
        direction = c[0] * e_a + c[1] * e_b + c[2] * up
    else:
        direction = np.asarray(view, dtype=float).reshape(3)
    norm = float(np.linalg.norm(direction))
    if norm == 0.0:
        raise ModelError("view direction must be non-zero")
    return direction / norm


def fit(cloud: np.ndarray, direction: np.ndarray, view_up: np.ndarray, aspect: float,
        margin: float = 1.08) -> tuple[np.ndarray, float]:
    """Focal point and distance of a perspective camera looking along ``-direction`` such
    that every point of ``cloud`` is inside the image (vertical angle VIEW_ANGLE)."""
    view = -direction
    right = np.cross(view, view_up)
    right /= np.linalg.norm(right)
    image_up = np.cross(right, view)
    x, y, z = cloud @ right, cloud @ image_up, cloud @ direction
    xc, yc = 0.5 * (x.min() + x.max()), 0.5 * (y.min() + y.max())
    tan_v = np.tan(np.radians(VIEW_ANGLE / 2.0))
    tan_h = tan_v * aspect
    zc = 0.5 * (z.min() + z.max())
    need = (z - zc) + margin * np.maximum(np.abs(x - xc) / tan_h, np.abs(y - yc) / tan_v)
    distance = max(float(need.max()), 1e-9)
    focal = xc * right + yc * image_up + zc * direction
    return focal, distance


class CameraRig:
    """Places the camera for each frame of a :class:`~mbs.viz.visuals.SceneDescription`."""

    def __init__(self, description, mode: str = "fixed", follow: str | None = None,
                 view="iso", zoom: float = 1.0, center=(0.0, 0.0, 0.0), aspect: float = 4 / 3):
        if mode not in MODES:
            raise ModelError(f"unknown camera mode {mode!r}; choose one of {MODES}")
        if not zoom > 0:
            raise ModelError(f"zoom must be positive, got {zoom!r}")
        self.mode = mode
        self.poses = description.poses
        self.up = description.up
        self.direction = view_direction(view, self.up)
        self.zoom = float(zoom)
        self.center = np.asarray(center, dtype=float)
        half = np.radians(VIEW_ANGLE / 2.0)
        if mode == "fixed":
            self.body = None
            self.focal, self.distance = fit(description.cloud, self.direction,
                                            self._view_up(self.direction, self.up), aspect)
            self.distance /= self.zoom
            return
        if follow is None:
            follow = self.poses.names[0]
        if follow not in self.poses.names:
            raise ModelError(f"camera follows unknown body {follow!r}; bodies: "
                             f"{self.poses.names}")
        self.body = self.poses.index[follow]
        reach = 3.0 * description.body_radius[follow]
        self.distance = reach / np.tan(half) / self.zoom
        if mode == "lvlh":
            r0 = self.poses.position[0, self.body] - self.center
            step = (self.poses.position[min(1, self.poses.frames - 1), self.body]
                    - self.poses.position[0, self.body])
            normal = np.cross(r0, step)
            if np.linalg.norm(normal) == 0.0:
                normal = np.cross(r0, np.eye(3)[int(np.argmin(np.abs(r0)))])
            self.normal = normal / np.linalg.norm(normal)

    def placement(self, frame: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(camera position, focal point, view-up) for ``frame``."""
        if self.mode == "fixed":
            return self.focal + self.distance * self.direction, self.focal, self._view_up(
                self.direction, self.up)
        focal = self.poses.position[frame, self.body]
        if self.mode == "follow":
            return focal + self.distance * self.direction, focal, self._view_up(
                self.direction, self.up)
        radial = focal - self.center
        radial = radial / np.linalg.norm(radial)
        return focal + self.distance * self.normal, focal, radial

    @staticmethod
    def _view_up(direction: np.ndarray, up: np.ndarray) -> np.ndarray:
        if abs(direction @ up) > 0.99:  # looking straight down: image up = a horizontal axis
            return horizontal_frame(up)[1]
        return up

    def apply(self, plotter, frame: int) -> None:
        position, focal, view_up = self.placement(frame)
        camera = plotter.camera
        camera.position = tuple(position)
        camera.focal_point = tuple(focal)
        camera.up = tuple(view_up)
        camera.view_angle = VIEW_ANGLE
        plotter.renderer.ResetCameraClippingRange()
