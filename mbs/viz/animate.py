"""User-facing rendering: :func:`animate` (MP4/GIF), :func:`snapshot` (PNG) and :func:`show`."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mbs.errors import ModelError
from mbs.viz.backend import is_headless
from mbs.viz.camera import CameraRig
from mbs.viz.frames import nearest_nodes, select_frames
from mbs.viz.scene import Scene, even_resolution
from mbs.viz.visuals import SceneOptions, describe
from mbs.viz.writers import open_writer

_SCENE_FIELDS = set(SceneOptions.__dataclass_fields__)


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
           options) -> Scene:
    resolution = even_resolution(resolution)
    description = describe(solution, indices, _split_options(options))
    rig = CameraRig(description, camera, follow=follow, view=view, zoom=zoom, center=center,
                    aspect=resolution[0] / resolution[1])
    return Scene(description, rig, resolution=resolution, off_screen=off_screen)


def animate(solution, path, *, fps: float = 30.0, speed: float = 1.0,
            frames: int | None = None, t_range: tuple[float, float] | None = None,
            resolution=(640, 480), camera: str = "fixed", follow: str | None = None,
            view="iso", zoom: float = 1.0, center=(0.0, 0.0, 0.0), quality: int = 7,
            progress: bool = True, off_screen: bool | None = None, **options) -> RenderReport:
    """Write an animation of ``solution`` to ``path`` (.mp4, .mov, .mkv, .avi, .webm, .gif).

    Parameters
    ----------
    solution : mbs.Solution (or a loaded one, see :func:`mbs.load_solution`)
    fps : float
        Frames per second of the video.
    speed : float
        Real-time factor: 1 plays the motion at its real speed, 0.5 in slow motion.
        The video has ``round((t_end - t_start) / speed * fps)`` frames, each showing the
        solution node nearest to its time: frames are subsampled (or repeated) so the cost
        does not depend on the number of simulation steps.
    frames : int, optional
        Exact number of frames instead (spread evenly over the time range).
    t_range : (t0, t1), optional
        Part of the solution to animate.
    resolution : (width, height)
        Rounded up to even numbers.
    camera : {"fixed", "follow", "lvlh"}, follow : body name, view : preset or 3-vector,
    zoom : float, center : attracting centre for "lvlh" (see :mod:`mbs.viz.camera`)
    quality : int
        FFmpeg quality 0-10 (MP4 only).
    progress : bool
        Progress bar (tqdm) while rendering.
    off_screen : bool, optional
        Default: off-screen on headless machines (and always for files it makes no
        difference what is on screen).
    **options
        Scene options, see :class:`~mbs.viz.visuals.SceneOptions` (``visuals``, ``directors``,
        ``joints``, ``forces``, ``ground_plane``, ``world_axes``, ``trails``, ``glyph_scale``,
        ``time_label``, ``title``, ``background``).

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
    bar = _bar(indices.size, Path(path).name) if progress else None
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
             camera: str = "fixed", follow: str | None = None, view="iso", zoom: float = 1.0,
             center=(0.0, 0.0, 0.0), off_screen: bool | None = None,
             trail_frames: int = 200, **options) -> np.ndarray:
    """Render the state at ``time`` (default: the last node) to a PNG and return the image.

    The camera frames the whole motion (as the animation does), so pictures at different
    times of one run share a view; trails are drawn up to ``time``.
    Returns the image as a (height, width, 3) uint8 array; writes it if ``path`` is given.
    """
    t = np.asarray(solution.t)
    when = float(t[-1]) if time is None else float(time)
    if not t[0] - 1e-12 <= when <= t[-1] + 1e-12:
        raise ModelError(f"snapshot time {when} is outside the solution [{t[0]}, {t[-1]}]")
    last = int(nearest_nodes(t, np.array([when]))[0])
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


def _write_png(path, image: np.ndarray) -> None:
    from PIL import Image

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(image).save(path)


def show(solution, *, fps: float = 30.0, speed: float = 1.0, resolution=(960, 720),
         camera: str = "fixed", follow: str | None = None, view="iso", zoom: float = 1.0,
         center=(0.0, 0.0, 0.0), **options) -> None:
    """Interactive window with a time slider (needs a display).

    On a headless machine this raises :class:`RuntimeError`; use :func:`animate` or
    :func:`snapshot` there.
    """
    if is_headless():
        raise RuntimeError("mbs.viz.show needs a display (none found: no DISPLAY or "
                           "WAYLAND_DISPLAY); write a file with mbs.viz.animate(solution, "
                           "'run.mp4') or mbs.viz.snapshot(solution, 'run.png') instead")
    indices, times = select_frames(solution.t, fps=fps, speed=speed)
    scene = _scene(solution, indices, resolution, camera, follow, view, zoom, center, False,
                   options)

    def on_slider(value: float) -> None:
        scene.update(int(np.argmin(np.abs(times - value))))

    scene.update(0)
    scene.plotter.add_slider_widget(on_slider, [float(times[0]), float(times[-1])],
                                    value=float(times[0]), title="t [s]",
                                    pointa=(0.25, 0.08), pointb=(0.75, 0.08))
    scene.plotter.show()


def _bar(total: int, label: str):
    try:
        from tqdm.auto import tqdm
    except ImportError:  # pragma: no cover - tqdm is a dependency of mbs
        return None
    return tqdm(total=total, desc=f"render {label}", unit="frame", leave=False)
