"""A PyVista scene built once; each frame only moves actors and rewrites polyline points.

Per frame, :meth:`Scene.render` sets one 4x4 user matrix per body-fixed actor, overwrites the
points of springs/rods/trails in place, updates the time label and the camera, and renders once:
the cost of a frame does not depend on how many simulation steps the solution has.

An inset (central gravity scenes, see :mod:`mbs.viz.visuals`) is a second VTK renderer in the
same window sharing the body actors, so moving an actor moves it in both views; the central
body, orbit tracks and markers stay in the main view.
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


SMOOTH = ("body", "central", "marker")
MAIN_VIEW_ONLY = ("central", "orbit", "marker", "ground")


def _inset_renderer(view, actors, lights, background: str, resolution: tuple[int, int]):
    """A renderer over ``view.viewport`` drawing ``actors`` under copies of ``lights``, with
    a tinted background, a frame and a label naming what it follows."""
    from vtkmodules.vtkCommonCore import vtkPoints
    from vtkmodules.vtkCommonDataModel import vtkCellArray, vtkPolyData
    from vtkmodules.vtkRenderingCore import (
        vtkActor2D,
        vtkCoordinate,
        vtkPolyDataMapper2D,
        vtkRenderer,
        vtkTextActor,
    )

    pv = import_pyvista()
    renderer = vtkRenderer()
    renderer.SetViewport(*view.viewport)
    base = np.array(pv.Color(background).float_rgb)
    renderer.SetBackground(*(0.93 * base + 0.07 * np.array([0.3, 0.45, 0.75])))
    for actor in actors:
        renderer.AddActor(actor)
    renderer.AutomaticLightCreationOff()
    for light in lights:  # the main view's light kit: a lone headlight leaves glyphs black
        renderer.AddLight(light.copy())
    # through pixel centres: a line on the viewport's edge would be drawn half outside it
    x0, y0, x1, y1 = view.viewport
    width = (x1 - x0) * resolution[0]
    height = (y1 - y0) * resolution[1]
    corners = vtkPoints()
    for x, y in ((0.5, 0.5), (width - 0.5, 0.5), (width - 0.5, height - 0.5),
                 (0.5, height - 0.5)):
        corners.InsertNextPoint(x, y, 0.0)
    outline = vtkCellArray()
    outline.InsertNextCell(5)
    for k in (0, 1, 2, 3, 0):
        outline.InsertCellPoint(k)
    frame = vtkPolyData()
    frame.SetPoints(corners)
    frame.SetLines(outline)
    coordinate = vtkCoordinate()
    coordinate.SetCoordinateSystemToViewport()
    mapper = vtkPolyDataMapper2D()
    mapper.SetInputData(frame)
    mapper.SetTransformCoordinate(coordinate)
    border = vtkActor2D()
    border.SetMapper(mapper)
    border.GetProperty().SetColor(0.45, 0.45, 0.5)
    border.GetProperty().SetLineWidth(max(1.0, resolution[1] / 300.0))
    renderer.AddViewProp(border)
    label = vtkTextActor()
    names = view.spec.names
    label.SetInput((names[0] if len(names) == 1 else f"{len(names)} bodies")
                   + (" (LVLH)" if view.center is not None else ""))
    label.GetPositionCoordinate().SetCoordinateSystemToNormalizedViewport()
    label.GetPositionCoordinate().SetValue(0.04, 0.96)
    text = label.GetTextProperty()
    text.SetFontSize(max(7, int(round(resolution[1] / 48))))
    text.SetColor(0.2, 0.2, 0.2)
    text.SetVerticalJustificationToTop()
    renderer.AddViewProp(label)
    return renderer


class Scene:
    """Actors of a :class:`SceneDescription` in a plotter, updated in place per frame.

    Parameters
    ----------
    description : SceneDescription
    camera : CameraRig
        Places the main camera and, when it has one, the inset camera.
    resolution : (width, height)
    off_screen : bool, optional
        Default: off-screen on headless machines.
    label_format : str
        Time label, formatted with ``t``.
    notebook : bool
        Make a plotter that ``plotter.show(jupyter_backend=...)`` displays in a notebook.

    Attributes
    ----------
    plotter : pyvista.Plotter
    inset : vtkRenderer or None
        The inset view's renderer (its camera follows the inset bodies).
    render_count : int
        Number of renders performed (one per :meth:`render` call).
    """

    def __init__(self, description: SceneDescription, camera: CameraRig,
                 resolution=(640, 480), off_screen: bool | None = None,
                 label_format: str = "t = {t:.3f} s", notebook: bool = False):
        import_pyvista()
        self.description = description
        self.camera = camera
        self.resolution = even_resolution(resolution)
        self.off_screen = is_headless() if off_screen is None else bool(off_screen)
        options = description.options
        self.plotter = make_plotter(self.resolution, self.off_screen, options.background,
                                    notebook=notebook)
        # software OpenGL spends most of a frame on multisampling: off unless asked for
        self.plotter.render_window.SetMultiSamples(4 if options.anti_aliasing else 0)
        self.label_format = label_format
        self.render_count = 0
        height = self.resolution[1]
        self._line_scale = max(1.0, height / 480.0)
        self._moving = []
        shared = []  # actors drawn in the inset as well
        overlays = description.overlays
        if options.markers == "auto" and camera.mode != "fixed":
            overlays = []  # a following camera shows the body up close
        for item in description.items + overlays:
            kwargs = dict(opacity=item.opacity, smooth_shading=item.kind in SMOOTH,
                          show_scalar_bar=False)
            if item.kind == "ground":
                kwargs.update(show_edges=True, edge_color="#c4c4c4", smooth_shading=False,
                              ambient=0.35, diffuse=0.7, specular=0.0)
            if item.kind == "orbit":
                kwargs.update(line_width=1.5 * self._line_scale)
            if item.rgb is not None:
                item.mesh.cell_data["rgb"] = item.rgb
                actor = self.plotter.add_mesh(item.mesh, scalars="rgb", rgb=True,
                                              preference="cell", **kwargs)
            else:
                actor = self.plotter.add_mesh(item.mesh, color=item.color, **kwargs)
            if item.body != GROUND:
                self._moving.append((actor, item.body))
            if item.kind not in MAIN_VIEW_ONLY:
                shared.append(actor)
        self._dynamic = []
        for dyn in description.dynamic:
            actor = self.plotter.add_mesh(dyn.mesh, color=dyn.color,
                                          line_width=dyn.width * self._line_scale,
                                          show_scalar_bar=False)
            shared.append(actor)
            self._dynamic.append((dyn, np.empty((dyn.mesh.n_points, 3))))
        self.inset = None
        if camera.inset is not None:
            self.inset = _inset_renderer(camera.inset, shared, self.plotter.renderer.lights,
                                         options.background, self.resolution)
            self.plotter.render_window.AddRenderer(self.inset)
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
        if self.inset is not None:
            self.camera.inset.apply(self.inset, frame)

    def render(self, frame: int) -> np.ndarray:
        """Render ``frame`` and return the image, (height, width, 3) uint8."""
        self.update(frame)
        self.plotter.render()
        self.render_count += 1
        return np.asarray(self.plotter.screenshot(None, return_img=True))

    def close(self) -> None:
        if self.inset is not None and self.plotter.render_window is not None:
            self.plotter.render_window.RemoveRenderer(self.inset)
        self.plotter.close()

    def __enter__(self) -> Scene:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
