"""Choosing the rendering backend: on-screen when a display exists, off-screen otherwise.

Importing :mod:`mbs.viz` calls :func:`configure` before PyVista (and VTK) are imported. On a
headless Linux machine (no ``DISPLAY`` and no ``WAYLAND_DISPLAY``) it selects VTK's EGL render
window (or OSMesa when no EGL library is present) through ``VTK_DEFAULT_OPENGL_WINDOW``, unless
the user already set that variable, so off-screen rendering needs no user action and VTK does
not print X-server warnings.
"""

from __future__ import annotations

import ctypes.util
import os
import sys

_ENV = "VTK_DEFAULT_OPENGL_WINDOW"


def is_headless() -> bool:
    """True when no display is available (no X server or Wayland compositor to open windows).

    macOS and Windows always have a display session for desktop users; on Linux and other
    Unix systems a display is announced through ``DISPLAY`` or ``WAYLAND_DISPLAY``.
    """
    if sys.platform in ("darwin", "win32"):
        return False
    return not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def configure() -> str | None:
    """Select an off-screen OpenGL window class for VTK on headless machines.

    Returns the window class set in ``VTK_DEFAULT_OPENGL_WINDOW`` (None when nothing was
    changed). Must run before VTK creates its first render window.
    """
    if not is_headless() or os.environ.get(_ENV):
        return None
    if ctypes.util.find_library("EGL"):
        window = "vtkEGLRenderWindow"
    elif ctypes.util.find_library("OSMesa"):
        window = "vtkOSOpenGLRenderWindow"
    else:  # leave VTK's own fallback chain in charge
        return None
    os.environ[_ENV] = window
    return window


def import_pyvista():
    """``import pyvista`` after :func:`configure`, with an actionable error if it is missing."""
    configure()
    try:
        import pyvista
    except ImportError as exc:  # pragma: no cover - depends on the installation
        raise ImportError("mbs.viz needs PyVista: pip install 'mbs[viz]' (pyvista, imageio, "
                          "imageio-ffmpeg)") from exc
    return pyvista


def make_plotter(resolution: tuple[int, int], off_screen: bool | None = None,
                 background: str = "white", notebook: bool = False):
    """A PyVista plotter of ``resolution`` (width, height); off-screen when headless.

    ``notebook`` makes a plotter that :meth:`pyvista.Plotter.show` displays in a Jupyter
    notebook (rendered off-screen); otherwise it is never treated as one, even inside a
    Jupyter kernel.
    """
    pv = import_pyvista()
    if off_screen is None:
        off_screen = is_headless()
    plotter = pv.Plotter(off_screen=off_screen or notebook, window_size=list(resolution),
                         notebook=notebook)
    plotter.set_background(background)
    return plotter
