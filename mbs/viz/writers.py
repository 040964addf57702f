"""Frame sinks: MP4 (and other FFmpeg containers) through imageio-ffmpeg, GIF through Pillow."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from mbs.errors import ModelError

VIDEO_SUFFIXES = (".mp4", ".mov", ".mkv", ".avi", ".webm")
GIF_SUFFIXES = (".gif",)


def _imageio():
    try:
        import imageio.v2 as iio
    except ImportError as exc:  # pragma: no cover - depends on the installation
        raise ImportError("writing animations needs imageio: pip install 'mbs[viz]'") from exc
    return iio


class VideoWriter:
    """Streams frames to an FFmpeg container (H.264 for .mp4, yuv420p, even frame sizes)."""

    def __init__(self, path: Path, fps: float, quality: int = 7):
        iio = _imageio()
        try:
            import imageio_ffmpeg  # noqa: F401
        except ImportError as exc:  # pragma: no cover - depends on the installation
            raise ImportError("MP4 output needs imageio-ffmpeg: pip install 'mbs[viz]' (or "
                              "write a .gif)") from exc
        kwargs = dict(fps=fps, quality=quality, macro_block_size=2)
        if path.suffix.lower() in (".mp4", ".mov", ".mkv"):
            kwargs.update(codec="libx264", pixelformat="yuv420p")
        self._writer = iio.get_writer(str(path), format="FFMPEG", mode="I", **kwargs)

    def append(self, image: np.ndarray) -> None:
        self._writer.append_data(image)

    def close(self) -> None:
        self._writer.close()


class GifWriter:
    """Animated GIF, looping, each frame shown for 1/fps (rounded to GIF's 10 ms)."""

    def __init__(self, path: Path, fps: float):
        _imageio()
        from PIL import Image

        self._image = Image
        self._path = path
        self._duration = max(10, int(round(100.0 / fps)) * 10)  # ms, multiple of 10
        self._frames = []

    def append(self, image: np.ndarray) -> None:
        # quantise right away: a palette frame is a third of an RGB frame
        self._frames.append(self._image.fromarray(np.asarray(image, dtype=np.uint8)).quantize(
            colors=255, method=self._image.Quantize.MEDIANCUT, dither=self._image.Dither.NONE))

    def close(self) -> None:
        if self._frames:
            first, rest = self._frames[0], self._frames[1:]
            first.save(self._path, save_all=True, append_images=rest, duration=self._duration,
                       loop=0, optimize=False, disposal=1)
        self._frames = []


def open_writer(path, fps: float, quality: int = 7):
    """A writer for ``path`` chosen by its suffix (.mp4/.mov/.mkv/.avi/.webm or .gif)."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix in GIF_SUFFIXES:
        writer = GifWriter(path, fps)
    elif suffix in VIDEO_SUFFIXES:
        writer = VideoWriter(path, fps, quality)
    else:
        raise ModelError(f"cannot write an animation to {str(path)!r}: use one of "
                         f"{VIDEO_SUFFIXES + GIF_SUFFIXES} (or mbs.viz.snapshot for .png)")
    path.parent.mkdir(parents=True, exist_ok=True)
    return writer
