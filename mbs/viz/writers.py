"""Frame sinks: MP4 (and other FFmpeg containers) through imageio-ffmpeg, GIF through Pillow."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from mbs.errors import ModelError
from mbs.safe_files import check_writable

VIDEO_SUFFIXES = (".mp4", ".mov", ".mkv", ".avi", ".webm")
GIF_SUFFIXES = (".gif",)
#: The longest a GIF frame can show, s (its delay is a 16-bit count of 10 ms).
MAX_GIF_DELAY = 655.35
#: The shortest GIF frame delay viewers honour, s: browsers and most viewers show frames with
#: a delay of 10 ms or less for 100 ms.
MIN_GIF_DELAY = 0.02


def _imageio():
    try:
        import imageio.v2 as iio
    except ImportError as exc:  # pragma: no cover - depends on the installation
        raise ImportError("writing animations needs imageio: pip install 'mbs[viz]'") from exc
    return iio


#: The video codec of each container (the FFmpeg that imageio-ffmpeg ships has them all).
CODECS = {".mp4": "libx264", ".mov": "libx264", ".mkv": "libx264", ".avi": "libx264",
          ".webm": "libvpx-vp9"}


class VideoWriter:
    """Streams frames to an FFmpeg container (H.264, or VP9 for .webm; yuv420p, even frame
    sizes)."""

    def __init__(self, path: Path, fps: float, quality: int = 7):
        iio = _imageio()
        try:
            import imageio_ffmpeg  # noqa: F401
        except ImportError as exc:  # pragma: no cover - depends on the installation
            raise ImportError("MP4 output needs imageio-ffmpeg: pip install 'mbs[viz]' (or "
                              "write a .gif)") from exc
        if isinstance(quality, bool) or not isinstance(quality, (int, np.integer)) or not (
                0 <= quality <= 10):
            raise ModelError(f"quality must be an integer from 0 to 10 (FFmpeg's scale), got "
                             f"{quality!r}")
        kwargs = dict(fps=fps, quality=quality, macro_block_size=2,
                      codec=CODECS[path.suffix.lower()], pixelformat="yuv420p")
        self._writer = iio.get_writer(str(path), format="FFMPEG", mode="I", **kwargs)

    def append(self, image: np.ndarray) -> None:
        self._writer.append_data(image)

    def close(self) -> None:
        self._writer.close()


def check_gif_fps(fps: float) -> None:
    """A ModelError for a frame rate a GIF cannot play at its speed."""
    if 1.0 / fps > MAX_GIF_DELAY:
        raise ModelError(f"fps = {fps:g} is too low for a GIF, whose frames show for at "
                         f"most {MAX_GIF_DELAY:g} s; raise fps or write a video")
    if 1.0 / fps < MIN_GIF_DELAY:
        raise ModelError(f"fps = {fps:g} is too high for a GIF: viewers show frames of "
                         f"less than {MIN_GIF_DELAY * 1e3:g} ms for 100 ms, so it would "
                         f"play slowly; use fps <= {1.0 / MIN_GIF_DELAY:g} or write a "
                         f"video (.mp4)")


class GifWriter:
    """Animated GIF, looping, at ``fps``: GIF delays are whole 10 ms, so frame k is shown
    from k / fps rounded to 10 ms until the next frame's time rounded alike; the delays
    then average 1/fps and the animation keeps the real duration (a fixed rounded delay
    would play 30 fps 10 % fast)."""

    def __init__(self, path: Path, fps: float):
        _imageio()
        from PIL import Image

        check_gif_fps(fps)
        self._image = Image
        self._path = path
        self._fps = fps
        self._frames = []

    def append(self, image: np.ndarray) -> None:
        # quantise right away: a palette frame is a third of an RGB frame
        self._frames.append(self._image.fromarray(np.asarray(image, dtype=np.uint8)).quantize(
            colors=255, method=self._image.Quantize.MEDIANCUT, dither=self._image.Dither.NONE))

    def close(self) -> None:
        if self._frames:
            first, rest = self._frames[0], self._frames[1:]
            ticks = np.round(np.arange(len(self._frames) + 1) * 100.0 / self._fps)  # 10 ms
            durations = [int(d) for d in 10 * np.maximum(np.diff(ticks), 1)]
            first.save(self._path, save_all=True, append_images=rest, duration=durations,
                       loop=0, optimize=False, disposal=1)
        self._frames = []


def open_writer(path, fps: float, quality: int = 7):
    """A writer for ``path`` chosen by its suffix (.mp4/.mov/.mkv/.avi/.webm or .gif)."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in GIF_SUFFIXES + VIDEO_SUFFIXES:
        raise ModelError(f"cannot write an animation to {str(path)!r}: use one of "
                         f"{VIDEO_SUFFIXES + GIF_SUFFIXES} (or mbs.viz.snapshot for .png)")
    check_writable(path, "an animation")
    if suffix in GIF_SUFFIXES:
        return GifWriter(path, fps)
    return VideoWriter(path, fps, quality)

