"""A PyVista scene built once; each frame only moves actors and rewrites polyline points.

Per frame, :meth:`Scene.render` sets one 4x4 user matrix per body-fixed actor, overwrites the
points of springs/rods/trails in place, updates the time label and the camera, and renders once:
the cost of a frame does not depend on how many simulation steps the solution has.
"""

from __future__ import annotations

import numpy as np

from mbs.viz.backend import import_pyvista, is_headless, make_plotter
from mbs.viz.camera import CameraRig
from mbs.viz.kinematics import GROUND
from mbs.viz.visuals import SceneDescription


def even_resolution(resolution) -> tuple[int, int]:
    """(width, height) as positive even integers (video encoders need even sizes)."""
    try:
        width, height = (int(v) for v in resolution)
    except (TypeError, ValueError):
        from mbs.errors import ModelError

        raise ModelError(f"resolution must be (width, height), got {resolution!r}") from None
    if width < 16 or height < 16:
        from mbs.errors import ModelError

        raise ModelError(f"resolution must be at least 16x16 pixels, got {resolution!r}")
    return width + width % 2, height + height % 2


class Scene:
    """Actors of a :class:`SceneDescription` in a plotter, updated in place per frame.

    Attributes
    ----------
    plotter : pyvista.Plotter
    render_count : int
        Number of renders performed (one per :meth:`render` call).
    """

    def __init__(self, description: SceneDescription, camera: CameraRig,
                 resolution=(640, 480), off_screen: bool | None = None,
                 label_format: str = "t = {t:.3f} s"):
        import_pyvista()
        self.description = description
        self.camera = camera
        self.resolution = even_resolution(resolution)
        self.off_screen = is_headless() if off_screen is None else bool(off_screen)
        options = description.options
        self.plotter = make_plotter(self.resolution, self.off_screen, options.background)
        # software OpenGL spends most of a frame on multisampling: off unless asked for
        self.plotter.render_window.SetMultiSamples(4 if options.anti_aliasing else 0)
        self.label_format = label_format
        self.render_count = 0
        height = self.resolution[1]
        self._line_scale = max(1.0, height / 480.0)
        self._moving = []
        for item in description.items:
            kwargs = dict(opacity=item.opacity, smooth_shading=item.kind in ("body",),
                          show_scalar_bar=False)
            if item.kind == "ground":
                kwargs.update(show_edges=True, edge_color="#c4c4c4", smooth_shading=False,
                              ambient=0.35, diffuse=0.7, specular=0.0)
            if item.rgb is not None:
                item.mesh.cell_data["rgb"] = item.rgb
                actor = self.plotter.add_mesh(item.mesh, scalars="rgb", rgb=True,
                                              preference="cell", **kwargs)
            else:
                actor = self.plotter.add_mesh(item.mesh, color=item.color, **kwargs)
            if item.body != GROUND:
                self._moving.append((actor, item.body))
        self._dynamic = []
        for dyn in description.dynamic:
            self.plotter.add_mesh(dyn.mesh, color=dyn.color,
                                  line_width=dyn.width * self._line_scale,
                                  show_scalar_bar=False)
            self._dynamic.append((dyn, np.empty((dyn.mesh.n_points, 3))))
        font = max(7, int(round(height / 40)))
        self._label = None
        if options.time_label or options.title:
            # a plain text actor (a corner annotation costs several ms per frame)
            margin = max(4, height // 60)
            self._label = self.plotter.add_text(" ", position=(margin, height - margin),
                                                font_size=font, color="black")
            self._label.GetTextProperty().SetVerticalJustificationToTop()
        if options.world_axes:
            self.plotter.add_axes(line_width=2, labels_off=False)

    def update(self, frame: int) -> None:
        """Move everything to ``frame`` (no rendering)."""
        poses = self.description.poses
        for actor, body in self._moving:
            actor.user_matrix = poses.matrix(frame, body)
        for dyn, buffer in self._dynamic:
            dyn.fill(frame, buffer)
            dyn.mesh.points[:] = buffer
            dyn.mesh.Modified()
        if self._label is not None:
            lines = []
            if self.description.options.title:
                lines.append(self.description.options.title)
            if self.description.options.time_label:
                lines.append(self.label_format.format(t=float(poses.times[frame])))
            text = "\n".join(lines)
            if hasattr(self._label, "SetInput"):  # vtkTextActor
                self._label.SetInput(text)
            else:  # vtkCornerAnnotation: corner 2 is the upper left
                self._label.SetText(2, text)
        self.camera.apply(self.plotter, frame)

    def render(self, frame: int) -> np.ndarray:
        """Render ``frame`` and return the image, (height, width, 3) uint8."""
        self.update(frame)
        self.plotter.render()
        self.render_count += 1
        return np.asarray(self.plotter.screenshot(None, return_img=True))

    def close(self) -> None:
        self.plotter.close()

    def __enter__(self) -> Scene:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
