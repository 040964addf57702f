"""3-D visualisation of solutions with PyVista (the ``viz`` extra).

>>> from mbs import viz                                    # doctest: +SKIP
>>> viz.animate(solution, "top.mp4", fps=30, speed=1.0)    # doctest: +SKIP
>>> viz.snapshot(solution, "top.png", time=0.5)            # doctest: +SKIP
>>> viz.show(solution)                    # window with a time slider  # doctest: +SKIP
>>> viz.show(solution, jupyter_backend="trame")   # in a Jupyter notebook  # doctest: +SKIP

Every body is drawn from the shape it was built from (``RigidBody.from_shape``), or from an
explicit :class:`Visual` (a PyVista mesh or a mesh file, a shape record such as an open
``tube`` or a ``torus``/``ring``, colour, opacity); rigid bodies given only by mass and
inertia get a cone (one attachment point, e.g. a top) or their inertia ellipsoid. Point
masses are spheres, springs helices, joints small glyphs; a ground plane (under uniform
gravity), director arrows, trails and a time label are optional.

The default camera frames every body over the whole motion; following cameras keep every
body in view as well. Scenes with central gravity draw the attracting body and the orbit
tracks, mark bodies too small to see at the orbit's scale and add an inset that follows them
(see :mod:`mbs.viz.visuals`). ``viz.show`` in a notebook needs
``pip install "pyvista[jupyter]"`` (PyVista's trame backend).

Importing this package selects an off-screen OpenGL window on headless machines (see
:mod:`mbs.viz.backend`) and fails with an ImportError naming the extra when PyVista is missing.

Modules: backend (display detection), frames (subsampling), kinematics (poses, attachments),
geometry (meshes), visuals (scene content), camera (presets), scene (actors updated in place),
writers (MP4/GIF), animate (animate, snapshot, show).
"""

from mbs.viz.backend import configure, import_pyvista, is_headless

configure()
import_pyvista()

from mbs.viz.animate import RenderReport, animate, show, snapshot  # noqa: E402
from mbs.viz.camera import CameraRig  # noqa: E402
from mbs.viz.frames import frame_count, select_frames  # noqa: E402
from mbs.viz.scene import Scene  # noqa: E402
from mbs.viz.visuals import SceneOptions, Visual, describe  # noqa: E402

__all__ = ["CameraRig", "RenderReport", "Scene", "SceneOptions", "Visual", "animate",
           "configure", "describe", "frame_count", "import_pyvista", "is_headless",
           "select_frames", "show", "snapshot"]
