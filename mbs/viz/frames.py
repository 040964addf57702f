"""Which solution nodes become animation frames (numpy only).

The number of frames depends on the playback settings, never on the number of simulation
steps: ``(t_end - t_start) / speed`` seconds of video at ``fps`` frames per second (one frame
more for the end), each frame showing the node nearest to its time. This is what keeps
rendering cost independent of the simulation length.
"""

from __future__ import annotations

import numbers

import numpy as np

from mbs.errors import ModelError


def frame_count(t_start: float, t_end: float, fps: float = 30.0, speed: float = 1.0) -> int:
    """Frames of a video that plays [t_start, t_end] at ``speed`` times real time (>= 2):
    round((t_end - t_start) / speed * fps) intervals of 1 / fps between frames, plus the
    frame at t_end, so that frame k, shown at k / fps, is the motion at t_start + k speed /
    fps."""
    _check_playback(fps, speed)
    return max(2, int(round((t_end - t_start) / speed * fps)) + 1)


def _check_playback(fps: float, speed: float) -> None:
    """Refuse a frame rate or real-time factor that is not a positive number."""
    for name, value in (("fps", fps), ("speed (real-time factor)", speed)):
        if isinstance(value, bool) or not isinstance(value, (int, float, np.number)) \
                or not 0.0 < value < np.inf:
            raise ModelError(f"{name} must be a positive number, got {value!r}")


def select_frames(t: np.ndarray, fps: float = 30.0, speed: float = 1.0,
                  frames: int | None = None, t_range: tuple[float, float] | None = None
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Node indices and frame times of an animation of the time grid ``t``.

    Parameters
    ----------
    t : (N+1,) increasing node times.
    fps, speed : float
        Frame rate of the video and real-time factor (2 plays twice as fast as reality).
    frames : int, optional
        Exact number of frames (overrides fps/speed for the count).
    t_range : (t0, t1), optional
        Part of the solution to show (default: all of it).

    Returns
    -------
    indices : (F,) int, the node shown in each frame (nearest node to the frame time).
    times : (F,) the frame times, evenly spaced over the range, both ends included.
    """
    _check_playback(fps, speed)  # the video's frame rate, also when frames= sets the count
    t = np.asarray(t, dtype=float)
    if t.ndim != 1 or t.size == 0:
        raise ModelError("the solution has no time nodes")
    t0, t1 = (float(t[0]), float(t[-1])) if t_range is None else map(float, t_range)
    if t1 < t0:
        raise ModelError(f"t_range must be increasing, got ({t0}, {t1})")
    slack = 1e-9 * max(1.0, abs(float(t[-1])), abs(float(t[0])))
    if t0 < t[0] - slack or t1 > t[-1] + slack:
        raise ModelError(f"t_range ({t0:g}, {t1:g}) reaches outside the solution's times "
                         f"[{t[0]:g}, {t[-1]:g}]; give a range within them")
    if frames is None:
        count = frame_count(t0, t1, fps, speed) if t1 > t0 else 1
    else:
        if not isinstance(frames, numbers.Integral) or frames < 1:
            raise ModelError(f"frames must be a whole number of at least 1, got {frames!r}")
        count = int(frames)
    times = np.linspace(t0, t1, count) if count > 1 else np.array([t1])
    return nearest_nodes(t, times), times


def nearest_nodes(t: np.ndarray, times: np.ndarray) -> np.ndarray:
    """Index of the node of ``t`` nearest to each of ``times`` (O(F log N))."""
    right = np.clip(np.searchsorted(t, times), 1, max(t.size - 1, 1))
    left = right - 1
    if t.size == 1:
        return np.zeros(len(times), dtype=int)
    choose_left = np.abs(times - t[left]) <= np.abs(t[right] - times)
    return np.where(choose_left, left, right).astype(int)
