"""User-facing rendering: :func:`animate` (MP4/GIF), :func:`snapshot` (PNG) and :func:`show`
(interactive, in a desktop window or a Jupyter notebook)."""

from __future__ import annotations

import importlib.util
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mbs.errors import ModelError, warn_user
from mbs.run_context import progress_bar
from mbs.safe_files import check_writable
from mbs.viz.backend import is_headless
from mbs.viz.camera import CameraRig
from mbs.viz.frames import nearest_nodes, select_frames
from mbs.viz.scene import Scene, even_resolution
from mbs.viz.visuals import SceneOptions, describe
from mbs.viz.writers import open_writer

_SCENE_FIELDS = set(SceneOptions.__dataclass_fields__)
#: A time within this fraction (times 1 + |time|) of a node is that node (as for
#: Solution.nodes_at): node times are sums of steps, exact to round-off only
NODE_TIME_TOLERANCE = 1e-9
#: Jupyter backends of PyVista served by trame (the others need no extra package)
TRAME_BACKENDS = ("trame", "server", "client", "html")


@dataclass
class RenderReport:
    """What :func:`animate` produced and what it cost."""

    path: str
    frames: int
    fps: float
    duration: float  # seconds of video (frames / fps)
    resolution: tuple[int, int]
    render_calls: int
    seconds: float  # wall time of scene building, rendering and encoding
    render_seconds: float  # wall time of the frame loop alone
    steps: int  # simulation steps in the solution

    @property
    def ms_per_frame(self) -> float:
        return 1000.0 * self.render_seconds / max(self.frames, 1)

    def __str__(self) -> str:
        return (f"{self.path}: {self.frames} frames, {self.duration:.2f} s at {self.fps:g} fps, "
                f"{self.resolution[0]}x{self.resolution[1]}, {self.ms_per_frame:.1f} ms/frame "
                f"({self.steps} simulation steps)")


def _split_options(options: dict) -> SceneOptions:
    unknown = set(options) - _SCENE_FIELDS
    if unknown:
        raise ModelError(f"unknown visualisation options {sorted(unknown)}; scene options are "
                         f"{sorted(_SCENE_FIELDS)}")
    return SceneOptions(**options)


def _scene(solution, indices, resolution, camera, follow, view, zoom, center, off_screen,
           options, notebook: bool = False) -> Scene:
    if camera is None:
        camera = "fixed" if follow is None else "follow"
    elif camera == "fixed" and follow is not None:
        raise ModelError(f"follow={follow!r} names a body for a moving camera, but "
                         f"camera='fixed' shows the whole motion from one place; give "
                         f"camera='follow' (or 'lvlh'), or leave follow out")
    if off_screen is False and not notebook and is_headless():
        raise ModelError("off_screen=False opens a window, and this machine has no display; "
                         "leave off_screen out (files render off screen)")
    resolution = even_resolution(resolution)
    description = describe(solution, indices, _split_options(options))
    rig = CameraRig(description, camera, follow=follow, view=view, zoom=zoom, center=center,
                    aspect=resolution[0] / resolution[1])
    return Scene(description, rig, resolution=resolution, off_screen=off_screen,
                 notebook=notebook)


def animate(solution, path, *, fps: float = 30.0, speed: float = 1.0,
            frames: int | None = None, t_range: tuple[float, float] | None = None,
            resolution=(640, 480), camera: str | None = None, follow: str | None = None,
            view="iso", zoom: float = 1.0, center=None, quality: int = 7,
            progress: bool | None = None, off_screen: bool | None = None,
            **options) -> RenderReport:
    """Write an animation of ``solution`` to ``path`` (.mp4, .mov, .mkv, .avi, .webm, .gif).

    Parameters
    ----------
    solution : mbs.Solution (or a loaded one, see :func:`mbs.load_solution`)
    path : str or Path
        The file to write; its suffix picks the format (checked before rendering).
    fps : float
        Frames per second of the video.
    speed : float
        Real-time factor: 1 plays the motion at its real speed, 0.5 in slow motion.
        The video has ``round((t_end - t_start) / speed * fps) + 1`` frames, each showing the
        solution node nearest to its time (the solution is not interpolated between nodes):
        frames are subsampled so the cost does not depend on the number of simulation
        steps. Where the video has more frames per second of motion (``fps / speed``) than
        the solution has nodes (``1 / h``), consecutive frames show the same node and the
        motion advances in steps of h; simulate with a smaller h for smoother slow motion.
    frames : int, optional
        Exact number of frames instead (spread evenly over the time range).
    t_range : (t0, t1), optional
        Part of the solution to animate.
    resolution : (width, height)
        Rounded up to even numbers.
    camera : {"fixed", "follow", "lvlh"}, optional
        Default: "follow" when ``follow`` is given, else "fixed".
    follow : str, optional
        Name of the body the camera follows.
    view : str or 3-vector
        Viewing direction: a preset name ("iso" by default; presets are set in a frame whose
        third axis points up against gravity) or a vector in world coordinates from the
        target to the camera.
    zoom : float
        Magnification of the framed view.
    center : 3-vector, optional
        Attracting centre for "lvlh" (default: the central gravity's centre, else the
        origin); see :mod:`mbs.viz.camera`. Every camera is framed so that all bodies stay
        in view.
    quality : int
        FFmpeg quality 0-10 (MP4 only).
    progress : bool or None
        Progress bar (tqdm) while rendering: True always, False never, None (default) on an
        interactive terminal once rendering has taken a moment (as :func:`mbs.simulate`).
    off_screen : bool, optional
        Default: off-screen on headless machines (and always for files it makes no
        difference what is on screen).
    **options
        Scene options, see :class:`~mbs.viz.visuals.SceneOptions` (``visuals``, ``directors``,
        ``joints``, ``forces``, ``ground_plane``, ``world_axes``, ``trails``, ``glyph_scale``,
        ``time_label``, ``title``, ``background``; for central gravity ``central_body``,
        ``orbits``, ``markers``, ``inset``).

    Returns
    -------
    RenderReport
    """
    started = time.perf_counter()
    indices, _ = select_frames(solution.t, fps=fps, speed=speed, frames=frames,
                               t_range=t_range)
    writer = open_writer(path, fps, quality)
    scene = _scene(solution, indices, resolution, camera, follow, view, zoom, center,
                   True if off_screen is None else off_screen, options)
    bar = progress_bar(indices.size, f"render {Path(path).name}", progress, unit="frame")
    try:
        loop_start = time.perf_counter()
        for k in range(indices.size):
            writer.append(scene.render(k))
            if bar is not None:
                bar.update(1)
        loop_seconds = time.perf_counter() - loop_start
    finally:
        if bar is not None:
            bar.close()
        writer.close()
        scene.close()
    return RenderReport(str(path), int(indices.size), float(fps), indices.size / float(fps),
                        scene.resolution, scene.render_count, time.perf_counter() - started,
                        loop_seconds, int(len(solution.t) - 1))


def snapshot(solution, path=None, *, time: float | None = None, resolution=(640, 480),
             camera: str | None = None, follow: str | None = None, view="iso", zoom: float = 1.0,
             center=None, off_screen: bool | None = None,
             trail_frames: int = 200, **options) -> np.ndarray:
    """Render the state at ``time`` (default: the last node) to a PNG and return the image.

    The solution is known at its nodes only and is not interpolated: a ``time`` between two
    nodes draws the node nearest to it, with a warning naming the node's time and the
    spacing of the nodes (give a node time, or simulate with a smaller h, to draw exactly
    the instant wanted). The time label shows the node's time.

    The camera frames the whole motion, sampled at ``trail_frames`` evenly spaced nodes, so
    pictures at different times of one run share a view (an animation frames the nodes of
    its own frames, so its view may differ slightly); trails are drawn up to the node drawn,
    through those sampled nodes. Camera and scene options are those of :func:`animate`.
    Returns the image as a (height, width, 3) uint8 array; writes it if ``path`` is given.

    Raises
    ------
    ModelError
        ``time`` lies outside the solution's time range, or an option is invalid.
    """
    if path is not None:
        _check_image_suffix(path)
    t = np.asarray(solution.t)
    when = float(t[-1]) if time is None else float(time)
    if not t[0] - 1e-12 <= when <= t[-1] + 1e-12:
        raise ModelError(f"snapshot time {when} is outside the solution [{t[0]}, {t[-1]}]")
    last = int(nearest_nodes(t, np.array([when]))[0])
    if time is not None:
        _warn_off_node(t, when, last)
    count = min(max(2, int(trail_frames)), t.size)
    indices = np.unique(np.concatenate([nearest_nodes(t, np.linspace(t[0], t[-1], count)),
                                        [last]]))
    scene = _scene(solution, indices, resolution, camera, follow, view, zoom, center,
                   True if off_screen is None else off_screen, options)
    try:
        image = scene.render(int(np.searchsorted(indices, last)))
    finally:
        scene.close()
    if path is not None:
        _write_png(path, image)
    return image


def _warn_off_node(t: np.ndarray, when: float, node: int) -> None:
    """Warn that ``when`` lies between the nodes ``t`` by more than round-off, naming the
    node drawn instead, ``t[node]``, and the spacing of the nodes around ``when``."""
    if abs(float(t[node]) - when) <= NODE_TIME_TOLERANCE * (1.0 + abs(when)):
        return
    right = int(np.clip(np.searchsorted(t, when), 1, t.size - 1))
    step = float(t[right] - t[right - 1])
    warn_user(f"snapshot: time={when:g} lies between the solution's nodes, which are "
              f"h = {step:g} apart there ({t[right - 1]:g} and {t[right]:g}); the solution "
              f"is not interpolated, so the picture shows the nearest node, t = {t[node]:g}. "
              f"Give a node time, or simulate with a smaller h")


def _check_image_suffix(path) -> None:
    """Refuse, before rendering, a file name whose suffix names no image format."""
    from PIL import Image

    Image.init()
    suffix = Path(path).suffix.lower()
    kind = Image.registered_extensions().get(suffix)
    if kind is None or kind not in Image.SAVE:
        raise ModelError(f"snapshot: {Path(path).name!r} is no image type Pillow writes; use "
                         f".png (or .jpg, .tif, .bmp)")
    check_writable(Path(path), "snapshot")


def _write_png(path, image: np.ndarray) -> None:
    from PIL import Image

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(image).save(path)


def show(solution, *, fps: float = 30.0, speed: float = 1.0, resolution=(960, 720),
         camera: str | None = None, follow: str | None = None, view="iso", zoom: float = 1.0,
         center=None, jupyter_backend: str | bool | None = None, **options) -> None:
    """Explore ``solution`` interactively: the scene with a time slider.

    The scene, camera and options are those of :func:`animate`; the slider (under the view,
    "t [s]") moves every body to the frame nearest to the chosen time, and the mouse rotates,
    pans and zooms as in any PyVista window.

    Parameters
    ----------
    solution : mbs.Solution
    fps, speed : float
        Frames the slider steps through: as many as an animation at ``fps`` frames per second
        and ``speed`` times real time would have.
    resolution : (width, height)
    camera, follow, view, zoom, center
        See :func:`animate`.
    jupyter_backend : str or False, optional
        Show the scene in a Jupyter notebook through PyVista's ``jupyter_backend``, e.g.
        ``"trame"`` (remote rendering on the kernel's machine, also on a headless server) or
        ``"static"`` (a still picture of the first frame). Inside a Jupyter kernel the
        default is ``"trame"``; elsewhere, and with False, a desktop window. The trame
        backends ("trame", "server", "client", "html") need
        ``pip install "pyvista[jupyter]"``; the slider and the inset need server-side
        rendering ("trame" or "server").
    **options
        Scene options, see :class:`~mbs.viz.visuals.SceneOptions`.

    Raises
    ------
    RuntimeError
        For a desktop window on a machine without a display (use :func:`animate` or
        :func:`snapshot` there, or a notebook with ``jupyter_backend="trame"``).
    ImportError
        For a trame backend when trame is not installed.

    Examples
    --------
    In a script on a desktop::

        mbs.viz.show(solution)

    In a Jupyter notebook (the viewer appears as the cell's output)::

        mbs.viz.show(solution, jupyter_backend="trame")
    """
    if jupyter_backend is None and _in_jupyter_kernel():
        jupyter_backend = "trame"
    notebook = jupyter_backend not in (None, False)
    if notebook:
        _check_jupyter_backend(jupyter_backend)
    elif is_headless():
        raise RuntimeError("mbs.viz.show needs a display (none found: no DISPLAY or "
                           "WAYLAND_DISPLAY); write a file with mbs.viz.animate(solution, "
                           "'run.mp4') or mbs.viz.snapshot(solution, 'run.png') instead, or "
                           "use a Jupyter notebook: mbs.viz.show(solution, "
                           "jupyter_backend='trame')")
    indices, times = select_frames(solution.t, fps=fps, speed=speed)
    scene = _scene(solution, indices, resolution, camera, follow, view, zoom, center,
                   notebook, options, notebook=notebook)

    def on_slider(value: float) -> None:
        scene.update(int(np.argmin(np.abs(times - value))))

    scene.update(0)
    right = 0.75 if scene.inset is None else min(0.75, scene.camera.inset.viewport[0] - 0.04)
    scene.plotter.add_slider_widget(on_slider, [float(times[0]), float(times[-1])],
                                    value=float(times[0]), title="t [s]",
                                    pointa=(max(right - 0.5, 0.2), 0.08),
                                    pointb=(right, 0.08))
    if notebook:
        scene.plotter.show(jupyter_backend=jupyter_backend)
    else:
        scene.plotter.show()


def _in_jupyter_kernel() -> bool:
    """True inside a Jupyter (IPython kernel) session, where windows are not the way to show."""
    shell = sys.modules.get("IPython")
    if shell is None:
        return False
    try:
        ipython = shell.get_ipython()
    except AttributeError:  # pragma: no cover - a module named IPython that is not IPython
        return False
    return ipython is not None and "IPKernelApp" in getattr(ipython, "config", {})


def _check_jupyter_backend(backend: str) -> None:
    if not isinstance(backend, str):
        raise ModelError(f"jupyter_backend must be a PyVista backend name such as 'trame', got "
                         f"{backend!r}")
    if backend.lower() not in TRAME_BACKENDS:
        return
    missing = [name for name in _trame_modules() if _module_missing(name)]
    if missing:
        raise ImportError(f"mbs.viz.show(jupyter_backend={backend!r}) needs PyVista's trame "
                          f"support ({', '.join(missing)} not installed): "
                          f'pip install "pyvista[jupyter]"')


def _trame_modules() -> tuple[str, ...]:
    """Modules PyVista's trame backends import (what ``pip install "pyvista[jupyter]"``
    installs): since PyVista 0.49 they live in the trame-pyvista package."""
    import pyvista

    try:
        version = tuple(int(part) for part in pyvista.__version__.split(".")[:2])
    except ValueError:  # a development version string
        version = (0, 49)
    own = "trame_pyvista" if version >= (0, 49) else "trame_vuetify"
    return ("trame", "trame_vtk", own, "ipywidgets")


def _module_missing(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is None
    except (ImportError, ValueError):
        return True
