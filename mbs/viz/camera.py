"""Camera presets: a fixed view of the whole motion, or a camera following one body.

Modes
-----
"fixed"   one camera for all frames, framing everything the scene shows over the animation
          (every body over the whole trajectory, the ground, central bodies, orbit tracks).
"follow"  keeps a constant world-frame offset from a body's centre of mass (``follow=name``).
"lvlh"    follows a body and turns with its radius vector from ``center`` (local vertical /
          local horizontal frame of an orbiting body): the local vertical is the image's
          vertical, the camera looks along the orbit normal. ``center`` defaults to the
          centre of the model's central gravity (else the origin).

The following modes are framed per frame: the camera distance is the largest over the frames
of the distance that shows every body (its bounding sphere) around the followed one, and at
least three times the followed body's size, so no body leaves the picture and the view does
not pump in and out. ``zoom`` divides that distance.

Views (direction from the target to the camera, in the frame whose third axis points up,
i.e. against gravity): "iso", "front", "back", "side", "top", or any 3-vector.

An inset (see :mod:`mbs.viz.visuals`) occupies INSET_VIEWPORT of the image; the main view is
then framed in the rest of the width and below the title and time label (the projection is
shifted, not the viewport cropped).
"""

from __future__ import annotations

import numpy as np

from mbs.errors import ModelError

VIEWS = {"iso": (1.0, -1.5, 0.85), "front": (0.0, -1.0, 0.12), "back": (0.0, 1.0, 0.12),
         "side": (1.0, 0.0, 0.12), "top": (0.0, -1e-3, 1.0)}
MODES = ("fixed", "follow", "lvlh")
VIEW_ANGLE = 30.0  # degrees, vertical
INSET_VIEWPORT = (0.64, 0.0, 1.0, 0.48)  # (x0, y0, x1, y1) in normalised window coordinates
MARGIN = 1.08  # room left around fitted content
LABEL_LINE = 0.05  # image height kept free per label line (title, time) beside an inset
GROUP_TILT = 35.0  # degrees between the orbit normal and an inset following several bodies


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
        try:
            direction = np.asarray(view, dtype=float)
        except (TypeError, ValueError):
            direction = np.zeros(0)
        if direction.shape != (3,):
            raise ModelError(f"view must be one of {sorted(VIEWS)} or a direction vector of "
                             f"3 world coordinates, got {view!r}")
    norm = float(np.linalg.norm(direction))
    if not (norm > 0.0 and np.isfinite(norm)):
        raise ModelError("view direction must be non-zero and finite")
    return direction / norm


def fit(cloud: np.ndarray, direction: np.ndarray, view_up: np.ndarray, aspect: float,
        margin: float = MARGIN, width: float = 1.0, height: float = 1.0
        ) -> tuple[np.ndarray, float]:
    """Focal point and distance of a perspective camera looking along ``-direction`` such
    that every point of ``cloud`` is inside the image (vertical angle VIEW_ANGLE), or inside
    the part ``width`` x ``height`` of it (fractions; the projection is shifted to it)."""
    view = -direction
    right = np.cross(view, view_up)
    right /= np.linalg.norm(right)
    image_up = np.cross(right, view)
    x, y, z = cloud @ right, cloud @ image_up, cloud @ direction
    xc, yc = 0.5 * (x.min() + x.max()), 0.5 * (y.min() + y.max())
    tan_v = np.tan(np.radians(VIEW_ANGLE / 2.0)) * height
    tan_h = np.tan(np.radians(VIEW_ANGLE / 2.0)) * aspect * width
    zc = 0.5 * (z.min() + z.max())
    need = (z - zc) + margin * np.maximum(np.abs(x - xc) / tan_h, np.abs(y - yc) / tan_v)
    distance = max(float(need.max()), 1e-9)
    focal = xc * right + yc * image_up + zc * direction
    return focal, distance


def orbit_normal(relative: np.ndarray) -> np.ndarray:
    """Unit normal of the plane swept by the radius vectors ``relative`` (F, 3): the sum of
    r_k x r_k+1 (robust to a stalled or wobbling step); any normal to r_0 when that vanishes."""
    normal = np.cross(relative[:-1], relative[1:]).sum(axis=0) if len(relative) > 1 else 0.0
    if np.linalg.norm(normal) <= 1e-12 * max(float(np.max(np.abs(relative))) ** 2, 1e-300):
        r0 = relative[0]
        if np.linalg.norm(r0) == 0.0:
            return np.array([0.0, 0.0, 1.0])
        normal = np.cross(r0, np.eye(3)[int(np.argmin(np.abs(r0)))])
    return normal / np.linalg.norm(normal)


def _local_vertical(radial: np.ndarray, fallback: np.ndarray) -> np.ndarray:
    """The unit radius vectors ``radial`` (..., 3) from the centre, the view-up of the local
    vertical; ``fallback`` where a body is at the centre and the vertical is undefined."""
    norm = np.linalg.norm(radial, axis=-1, keepdims=True)
    scale = max(float(np.max(norm, initial=0.0)), 1e-300)
    defined = norm > 1e-12 * scale
    return np.where(defined, radial / np.where(defined, norm, 1.0), fallback)


def _image_axes(direction: np.ndarray, view_up: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(right, image up) of a camera looking along -direction with ``view_up`` (..., 3)."""
    right = np.cross(-direction, view_up)
    right = right / np.linalg.norm(right, axis=-1, keepdims=True)
    return right, np.cross(right, -direction)


def clip_close_up(camera, renderer, distance: float, reach: float) -> None:
    """Clipping range for a camera ``distance`` away from content of size ``reach``.

    VTK's automatic range spans every prop; with a planet thousands of times larger than the
    followed body that puts the near plane behind the body. Keep the near plane in front of
    the content and the far/near ratio within what a depth buffer resolves.
    """
    renderer.ResetCameraClippingRange()
    near, far = camera.GetClippingRange()
    wanted = max(distance - 2.0 * reach, 1e-3 * distance)
    if near > wanted:
        camera.SetClippingRange(wanted, max(min(far, 1e4 * wanted), distance + 2.0 * reach))


class InsetView:
    """Camera of the inset: follows the centroid of the inset bodies.

    With an attracting centre it looks along the orbit normal with the radius vector up
    (local vertical / local horizontal frame), turned by GROUP_TILT towards the flight
    direction when it follows several bodies (a formation in the orbit plane would otherwise
    be seen edge-on); otherwise along the main view direction.
    """

    def __init__(self, spec, poses, direction: np.ndarray, up: np.ndarray,
                 viewport=INSET_VIEWPORT):
        self.spec = spec
        self.viewport = tuple(float(v) for v in viewport)
        self.track = poses.position[:, spec.bodies].mean(axis=1)
        self.center = spec.center
        self.direction = direction
        self.up = up
        if self.center is not None:
            self.normal = orbit_normal(self.track - self.center)
            self.tilt = np.radians(GROUP_TILT) if len(spec.bodies) > 1 else 0.0
        self.distance = spec.reach / np.tan(np.radians(VIEW_ANGLE / 2.0))

    def placement(self, frame: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(camera position, focal point, view-up) for ``frame``."""
        focal = self.track[frame]
        if self.center is None:
            return (focal + self.distance * self.direction, focal,
                    CameraRig._view_up(self.direction, self.up))
        radial = _local_vertical(focal - self.center,
                                 CameraRig._view_up(self.normal, self.up))
        ahead = np.cross(self.normal, radial)
        toward = np.cos(self.tilt) * self.normal + np.sin(self.tilt) * ahead
        return focal + self.distance * toward, focal, radial

    def apply(self, renderer, frame: int) -> None:
        position, focal, view_up = self.placement(frame)
        camera = renderer.GetActiveCamera()
        camera.SetPosition(*position)
        camera.SetFocalPoint(*focal)
        camera.SetViewUp(*view_up)
        camera.SetViewAngle(VIEW_ANGLE)
        clip_close_up(camera, renderer, self.distance, self.spec.reach)


class CameraRig:
    """Places the camera for each frame of a :class:`~mbs.viz.visuals.SceneDescription`.

    Parameters
    ----------
    description : SceneDescription
    mode : {"fixed", "follow", "lvlh"}
    follow : str, optional
        Body followed by "follow" and "lvlh" (default: the first body).
    view : str or array_like
        Preset name or direction from the target to the camera.
    zoom : float
        Divides the fitted camera distance.
    center : array_like, optional
        Attracting centre of "lvlh" (default: the central gravity's centre, else the origin).
    aspect : float
        Image width / height.

    Attributes
    ----------
    inset : InsetView or None
        The inset camera: the description's inset when the main camera is fixed or the inset
        was asked for explicitly.
    """

    def __init__(self, description, mode: str = "fixed", follow: str | None = None,
                 view="iso", zoom: float = 1.0, center=None, aspect: float = 4 / 3):
        if mode not in MODES:
            raise ModelError(f"unknown camera mode {mode!r}; choose one of {MODES}")
        if not zoom > 0:
            raise ModelError(f"zoom must be positive, got {zoom!r}")
        self.mode = mode
        self.poses = description.poses
        self.up = description.up
        self.direction = view_direction(view, self.up)
        self.zoom = float(zoom)
        if center is None:
            center = description.gravity_center
            center = (0.0, 0.0, 0.0) if center is None else center
        self.center = np.asarray(center, dtype=float)
        spec = description.inset
        self.inset = (InsetView(spec, self.poses, self.direction, self.up)
                      if spec is not None and (mode == "fixed" or spec.explicit) else None)
        # an inset covers the right part of the image: frame the main view in the rest, and
        # below the title and time label (content otherwise runs under the text)
        self.window_shift = (0.0, 0.0)
        if self.inset is not None:
            options = description.options
            lines = bool(options.title) + bool(options.time_label)
            self.window_shift = (1.0 - self.inset.viewport[0],
                                 (0.02 + LABEL_LINE * lines) if lines else 0.0)
        self.width = 1.0 - self.window_shift[0]
        self.height = 1.0 - self.window_shift[1]
        self.aspect = aspect
        half = np.radians(VIEW_ANGLE / 2.0)
        if mode == "fixed":
            self.body = None
            self.focal, self.distance = fit(description.cloud, self.direction,
                                            self._view_up(self.direction, self.up), aspect,
                                            width=self.width, height=self.height)
            self.distance /= self.zoom
            return
        if follow is None:
            follow = self.poses.names[0]
        if follow not in self.poses.names:
            raise ModelError(f"camera follows unknown body {follow!r}; bodies: "
                             f"{self.poses.names}")
        self.body = self.poses.index[follow]
        if mode == "lvlh":
            self.normal = orbit_normal(self.poses.position[:, self.body] - self.center)
        own = 3.0 * description.body_radius[follow] / np.tan(half)
        self.distance = max(own, self._fit_bodies(description)) / self.zoom

    def _fit_bodies(self, description) -> float:
        """Smallest distance from the followed body that shows every drawn body (its bounding
        sphere) in every frame."""
        drawn = sorted({item.body for item in description.items
                        if item.kind == "body" and item.body >= 0})
        if not drawn:
            return 0.0
        focal = self.poses.position[:, self.body]  # (F, 3)
        offsets = self.poses.position[:, drawn] - focal[:, None]  # (F, B, 3)
        size = np.array([description.body_radius[self.poses.names[b]] for b in drawn])
        if self.mode == "follow":
            direction = np.broadcast_to(self.direction, focal.shape)
            view_up = np.broadcast_to(self._view_up(self.direction, self.up), focal.shape)
        else:
            view_up = _local_vertical(focal - self.center,
                                      self._view_up(self.normal, self.up))
            direction = np.broadcast_to(self.normal, focal.shape)
        right, image_up = _image_axes(direction, view_up)
        x = np.abs(np.einsum("fbi,fi->fb", offsets, right)) + size
        y = np.abs(np.einsum("fbi,fi->fb", offsets, image_up)) + size
        z = np.einsum("fbi,fi->fb", offsets, direction)
        tan = np.tan(np.radians(VIEW_ANGLE / 2.0))
        need = z + MARGIN * np.maximum(x / (tan * self.aspect * self.width),
                                       y / (tan * self.height))
        return float(max(need.max(), (z + size).max()))

    def placement(self, frame: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(camera position, focal point, view-up) for ``frame``."""
        if self.mode == "fixed":
            return self.focal + self.distance * self.direction, self.focal, self._view_up(
                self.direction, self.up)
        focal = self.poses.position[frame, self.body]
        if self.mode == "follow":
            return focal + self.distance * self.direction, focal, self._view_up(
                self.direction, self.up)
        radial = _local_vertical(focal - self.center, self._view_up(self.normal, self.up))
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
        # vtkCamera: the focal point projects to normalised (x, y) = -shift
        camera.SetWindowCenter(*self.window_shift)
        if self.mode == "fixed":
            plotter.renderer.ResetCameraClippingRange()
        else:
            clip_close_up(camera, plotter.renderer, self.distance,
                          self.distance * np.tan(np.radians(VIEW_ANGLE / 2.0)))
