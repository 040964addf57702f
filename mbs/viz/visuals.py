"""What the scene contains: body visuals, joint glyphs, springs, directors, trails, ground,
and for central gravity the attracting body, orbit tracks and an inset view.

:func:`describe` turns a solution's static model information into a
:class:`SceneDescription`: meshes in body-fixed coordinates attached to a body index (or to the
ground), plus "dynamic" polylines whose points are recomputed per frame (springs, distance
rods, trails). Nothing in it depends on a plotter; :mod:`mbs.viz.scene` renders it and
:func:`mbs.io.save_vtk` exports it.

Central gravity scenes (a :class:`mbs.forces.CentralGravity` element in the model) get, by
default:

* the attracting body, a sphere at the element's centre. Its radius is the Earth's mean
  radius (6371 km) when mu is the Earth's (in m^3/s^2 or km^3/s^2) and the bodies stay above
  that surface; otherwise 0.4 times the closest approach of the attracted bodies to the
  centre, so the sphere never hides them. ``central_body=radius`` sets it.
* the orbit track of every attracted body: its centre-of-mass path over the shown time range.
* visibility aids for bodies that are small against their orbit (the choice between a
  magnified glyph and a follow view is not needed: both are drawn). In the main view a
  translucent marker sphere (2.5 % of the scene size) surrounds each body smaller than it,
  so its place on the orbit is always seen; an inset in the lower right corner follows the
  attracted bodies (their centroid) in the local vertical / local horizontal frame: radius
  vector up, looking along the orbit normal (turned 35 degrees towards the flight direction
  for several bodies, so a formation is not seen edge-on), where attitude motion and the
  formation's shape can be seen. The inset appears when the attracted bodies together, or
  else the first of them, span less than 5 % of the scene; the main view is then framed in
  the part of the image the inset and the labels leave free. A camera that already follows
  a body (``camera="follow"``/``"lvlh"``) gets neither automatically.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from mbs.errors import ModelError
from mbs.viz import geometry
from mbs.viz.backend import import_pyvista
from mbs.viz.kinematics import GROUND, Attacher, Poses, pose_from_coordinates, poses

PALETTE = ("#e0a030", "#4c78a8", "#54a24b", "#e45756", "#72b7b2", "#b279a2", "#9d755d",
           "#ff9da6", "#8c6bb1", "#bab0ac")
DIRECTOR_COLORS = ("#d62728", "#2ca02c", "#1f77b4")  # d1 red, d2 green, d3 blue
JOINT_COLOR = "#3a3a3a"
SUPPORT_COLOR = "#7a7a7a"
SPRING_COLOR = "#8a1c7c"
ROD_COLOR = "#555555"
TRAIL_COLOR = "#1f77b4"
GROUND_COLOR = "#e6e6e6"
CENTRAL_COLOR = "#5b8fd0"

#: (mu, mean radius) of the Earth in SI units and in km: the default central-body radius
EARTH = ((3.986004418e14, 6.371e6), (3.986004418e5, 6371.0))
CENTRAL_FRACTION = 0.4  #: default central radius relative to the closest approach
MARKER_FRACTION = 0.025  #: marker radius relative to the scene radius
INSET_FRACTION = 0.05  #: bodies whose extent is below this part of the scene get an inset
DIRECTOR_BODIES = 2  #: directors="auto" draws them on models of at most this many rigid bodies
ORBIT_POINTS = 2000  #: most points of one orbit track
AXISYMMETRIC = ("cylinder", "tube", "cone", "sphere", "spherical_shell", "torus", "ring")
#: The shape kinds a Visual draws and the sizes each needs (see :func:`geometry.shape_mesh`).
SHAPE_SIZES = {"box": ("lx", "ly", "lz"), "cylinder": ("radius", "length"),
               "tube": ("radius", "length"), "sphere": ("radius",),
               "spherical_shell": ("radius",), "cone": ("radius", "height"),
               "torus": ("radius", "tube_radius"), "ring": ("radius",)}


@dataclass
class Visual:
    """How one body is drawn.

    Parameters
    ----------
    mesh : pyvista.DataSet or str, optional
        Mesh in body coordinates (origin at the centre of mass, axes = directors d1, d2, d3),
        or a file PyVista can read (STL, OBJ, PLY, VTK, ...), scaled by ``scale``.
    shape : dict, optional
        A shape record like those of :meth:`mbs.RigidBody.from_shape`, e.g.
        ``{"kind": "cylinder", "radius": 0.02, "length": 0.3}``; overrides the body's own.
        Besides the body shapes: ``{"kind": "torus", "radius": R, "tube_radius": r}`` (a ring
        about d3, also ``"ring"`` with a default tube of 0.06 R); tubes are drawn open and
        cylinders closed unless ``"capped"`` says otherwise (see
        :func:`mbs.viz.geometry.shape_mesh`).
    color : str, optional
        Any matplotlib/PyVista colour (default: from a palette).
    opacity : float
    stripes : bool, optional
        Alternate shades around d3 so that spin about an axis of symmetry is visible
        (default: on for cylinders, tubes, cones, spheres and rings).
    visible : bool
    """

    mesh: object = None
    shape: dict | None = None
    color: str | None = None
    opacity: float = 1.0
    stripes: bool | None = None
    visible: bool = True
    scale: float = 1.0

    def __post_init__(self):
        if not (np.isfinite(self.scale) and self.scale > 0.0):
            raise ModelError(f"Visual: scale must be a positive number, got {self.scale!r}")
        if not 0.0 <= self.opacity <= 1.0:
            raise ModelError(f"Visual: opacity must lie in [0, 1], got {self.opacity!r}")
        if self.color is not None:
            try:
                import_pyvista().Color(self.color)
            except ValueError:
                raise ModelError(f"Visual: color {self.color!r} is not a colour; give a name "
                                 f"('steelblue'), a hex string ('#4682b4') or an RGB "
                                 f"triple") from None
        if self.shape is None:
            return
        kind = self.shape.get("kind") if isinstance(self.shape, dict) else None
        if kind not in SHAPE_SIZES:
            raise ModelError(f"Visual: shape must be a dict with 'kind' one of "
                             f"{sorted(SHAPE_SIZES)}, got {self.shape!r}")
        for key in SHAPE_SIZES[kind]:
            value = self.shape.get(key)
            if not (isinstance(value, (int, float, np.number)) and np.isfinite(value)
                    and value > 0.0):
                raise ModelError(f"Visual: shape {kind!r} needs a positive {key!r} (sizes: "
                                 f"{', '.join(SHAPE_SIZES[kind])}), got {value!r}")


@dataclass
class SceneOptions:
    """What to draw besides the bodies (all optional).

    visuals : {body name: Visual | dict of Visual fields | colour string | False}
    directors : "auto", bool or list of body names; arrows d1 (red), d2 (green), d3 (blue)
        ("auto": on every rigid body of a model of at most :data:`DIRECTOR_BODIES` of them,
        a top or a satellite, where they show the attitude; a mechanism of more links is
        drawn without, since arrows on every link hide it)
    joints : bool; glyphs for joints (sphere: spherical, cylinder along the axis: revolute,
        rails: prismatic/cylindrical, crossed pins: universal, cube: rigid, rods: distance)
    forces : bool; springs as helices between their attachment points
    ground_plane : "auto" (when the model has uniform gravity), True or False
    world_axes : bool; the small orientation triad in the corner
    trails : list of body names or {name: point}; the path of each body's reference point
        (centre of mass, particle), or of the point of the body that was at ``point``
        (3 world coordinates) at the initial pose (``model.q0``): the convention of
        :meth:`mbs.Solution.point`, which computes the path, and of the attachment points
        of joints, springs and loads (given at the initial pose). A point mass has no
        orientation: its trail is its own path, whatever the point
    glyph_scale : float, optional; joint glyph size (default from the bodies' sizes)
    time_label : bool; title : str, optional (shown above the time)
    background : str
    anti_aliasing : bool; 4x multisampling (smoother edges, about twice the render time with
        software OpenGL)
    central_body : bool, float or {force name: radius}; the attracting body of each
        CentralGravity element as a sphere (True: default radius, see the module notes)
    central_color : str
    orbits : "auto" (every body a CentralGravity element attracts), True (every body), list
        of body names or False; static tracks of the centres of mass over the shown range
    markers : "auto" (central gravity scenes), True or False; a translucent sphere around
        bodies too small to see in the main view
    inset : "auto", True, body name(s) or False; a corner view following those bodies
        ("auto": in central gravity scenes with a fixed camera, when the attracted bodies are
        small against the scene; True: always, the attracted or else the first body)
    """

    visuals: dict = field(default_factory=dict)
    directors: bool | str | Sequence[str] = "auto"
    joints: bool = True
    forces: bool = True
    ground_plane: bool | str = "auto"
    world_axes: bool = True
    trails: Sequence[str] | dict | None = None
    glyph_scale: float | None = None
    time_label: bool = True
    title: str | None = None
    background: str = "white"
    anti_aliasing: bool = False
    central_body: bool | float | dict = True
    central_color: str = CENTRAL_COLOR
    orbits: bool | str | Sequence[str] = "auto"
    markers: bool | str = "auto"
    inset: bool | str | Sequence[str] = "auto"

    def __post_init__(self):
        # one body given by its name is the list of it (a string is no list of names)
        if isinstance(self.directors, str) and self.directors != "auto":
            self.directors = [self.directors]
        if isinstance(self.trails, str):
            self.trails = [self.trails]
        if isinstance(self.trails, dict):
            for name, point in self.trails.items():
                try:
                    coordinates = np.asarray(point, dtype=float)
                except (TypeError, ValueError):
                    coordinates = None
                if (coordinates is None or coordinates.shape != (3,)
                        or not np.all(np.isfinite(coordinates))):
                    raise ModelError(f"trails: the point of {name!r} must be 3 finite world "
                                     f"coordinates at the initial pose (as for "
                                     f"Solution.point), got {point!r}")
        if self.glyph_scale is not None and not (
                isinstance(self.glyph_scale, (int, float, np.number))
                and np.isfinite(self.glyph_scale) and self.glyph_scale > 0.0):
            raise ModelError(f"glyph_scale must be a positive number (or None for the "
                             f"default), got {self.glyph_scale!r}")
        for name, allowed in (("ground_plane", (True, False, "auto")),
                              ("markers", (True, False, "auto"))):
            if getattr(self, name) not in allowed:
                raise ModelError(f"{name} must be True, False or 'auto', got "
                                 f"{getattr(self, name)!r}")
        try:
            import_pyvista().Color(self.background)
        except ValueError:
            raise ModelError(f"background {self.background!r} is not a colour; give a name "
                             f"('white'), a hex string ('#ffffff') or an RGB triple") from None


@dataclass
class Item:
    """A rigid mesh: body-fixed (``body`` >= 0) or static (``body`` == GROUND)."""

    name: str
    mesh: object
    body: int
    color: str = "grey"
    opacity: float = 1.0
    rgb: np.ndarray | None = None  # per-cell colours, overrides ``color``
    kind: str = "body"


@dataclass
class DynamicItem:
    """A polyline whose points are recomputed for each frame (fixed topology)."""

    name: str
    mesh: object
    fill: Callable[[int, np.ndarray], None]  # (frame, points out (P, 3))
    color: str
    width: float = 3.0  # line width in pixels at 480 px image height
    kind: str = "spring"

    def points_at(self, frame: int) -> np.ndarray:
        out = np.empty((self.mesh.n_points, 3))
        self.fill(frame, out)
        return out


@dataclass
class CentralBody:
    """The attracting body of a CentralGravity element (drawn as a sphere)."""

    name: str  # of the force element
    center: np.ndarray
    radius: float
    bodies: list[str]  # attracted bodies


@dataclass
class InsetSpec:
    """What the inset view follows: the centroid of ``bodies`` (indices), seen from ``reach``
    away; in the LVLH frame about ``center`` when that is given."""

    bodies: list[int]
    names: list[str]
    reach: float
    center: np.ndarray | None = None
    explicit: bool = False  # asked for by name or True (kept with a following main camera)


@dataclass
class SceneDescription:
    poses: Poses
    items: list[Item]
    dynamic: list[DynamicItem]
    up: np.ndarray
    center: np.ndarray
    radius: float
    body_radius: dict[str, float]
    cloud: np.ndarray  # sample of all geometry over the frames, for camera fitting
    glyph: float
    options: SceneOptions
    central: list[CentralBody] = field(default_factory=list)
    overlays: list[Item] = field(default_factory=list)  # main view only (markers), not exported
    inset: InsetSpec | None = None
    gravity_center: np.ndarray | None = None  # of the first CentralGravity element


def _coerce_visual(value, name: str) -> Visual:
    if value is None:
        return Visual()
    if isinstance(value, Visual):
        return value
    if value is False:
        return Visual(visible=False)
    if isinstance(value, str | dict):
        try:
            return Visual(color=value) if isinstance(value, str) else Visual(**value)
        except (TypeError, ModelError) as exc:
            raise ModelError(f"visual for body {name!r}: {exc}") from exc
    raise ModelError(f"visual for body {name!r} must be a Visual, dict, colour or False, got "
                     f"{value!r}")


def _explicit_mesh(visual: Visual):
    pv = import_pyvista()
    mesh = visual.mesh
    if isinstance(mesh, str):
        mesh = pv.read(mesh)
    if not isinstance(mesh, pv.DataSet):
        raise ModelError(f"Visual.mesh must be a PyVista mesh or a file name, got {mesh!r}")
    mesh = mesh.extract_geometry() if not isinstance(mesh, pv.PolyData) else mesh.copy()
    if visual.scale != 1.0:
        mesh.points = np.asarray(mesh.points, dtype=float) * visual.scale
    return mesh.triangulate()


def _attachments(model, attacher: Attacher) -> dict[str, list[np.ndarray]]:
    """Body-fixed attachment points of joints and forces on each body."""
    out: dict[str, list[np.ndarray]] = {b.name: [] for b in model.bodies}

    def add(name, world):
        if name in out and world is not None:
            out[name].append(attacher.local_point(name, world))

    for joint in model.joints:
        data = joint.data
        for name in joint.bodies:
            if "point" in data:
                add(name, data["point"])
        if joint.type == "Distance" and len(joint.bodies) == 2:
            add(joint.bodies[0], data.get("point_a"))
            add(joint.bodies[1], data.get("point_b"))
    for force in model.forces:
        points = force.data.get("points")
        if points is not None and len(points) == 2 and len(force.bodies) == 2:
            for name, point in zip(force.bodies, points):
                add(name, point)
    return out


def _distinct(points: list[np.ndarray], tolerance: float) -> list[np.ndarray]:
    out: list[np.ndarray] = []
    for p in points:
        if all(np.linalg.norm(p - q) > tolerance for q in out):
            out.append(p)
    return out


def _default_rigid_mesh(info, attachments: list[np.ndarray]):
    """Visual for a rigid body given by mass and inertia only.

    One attachment point away from the centre of mass (a top or a body on a ball joint): a
    spinning top: a cone with its apex there and its centre of mass where a solid cone's is
    (3/4 of the height from the apex), and a short handle on the axis. Otherwise the
    inertia-equivalent ellipsoid, with thin rods from the centre of mass to each attachment
    point outside it.
    """
    ellipsoid = geometry.inertia_ellipsoid(info.mass, info.inertia)
    size = geometry.bounding_radius(ellipsoid)
    points = [p for p in _distinct(attachments, 1e-9 * max(size, 1e-300))
              if np.linalg.norm(p) > 1e-9 * max(size, 1e-300)]
    if len(points) == 1 and np.linalg.norm(points[0]) > 0.3 * size:
        apex = points[0]
        distance = float(np.linalg.norm(apex))
        height = 4.0 / 3.0 * distance
        base = apex - height * apex / distance
        moments = np.linalg.eigvalsh(info.inertia)
        radius = float(np.clip(np.sqrt(10.0 / 3.0 * moments[0] / info.mass), 0.25 * height,
                               0.55 * height))
        axis = -apex / distance  # from the apex towards the base
        cone = geometry.cone_between(apex, base, radius)
        stem = geometry.rod(base, base + 0.3 * height * axis, 0.09 * height)
        mesh = geometry.combine([cone, stem])
        return mesh, True, axis
    meshes = [ellipsoid]
    rod_radius = 0.12 * size
    for p in points:
        if np.linalg.norm(p) > 0.9 * size:
            meshes.append(geometry.rod(np.zeros(3), p, rod_radius))
    return geometry.combine(meshes), False, None


def describe(solution, indices: np.ndarray, options: SceneOptions | None = None
             ) -> SceneDescription:
    """Build the scene content for the frames ``indices`` of ``solution``.

    Parameters
    ----------
    solution : mbs.Solution
    indices : (F,) int
        Solution nodes shown as frames (see :func:`mbs.viz.select_frames`).
    options : SceneOptions, optional

    Returns
    -------
    SceneDescription
        Meshes, per-frame polylines, bounds for camera fitting, the central bodies of central
        gravity elements and the inset to draw.
    """
    options = options or SceneOptions()
    model = solution.model
    indices = np.asarray(indices, dtype=int)
    frame_poses = poses(solution, indices)
    attacher = Attacher(solution)
    names = [b.name for b in model.bodies]
    unknown = set(options.visuals) - set(names)
    if unknown:
        raise ModelError(f"visuals given for unknown bodies {sorted(unknown)}; bodies: "
                         f"{names}")
    attachments = _attachments(model, attacher)
    elements = _central_elements(model)
    tracked = _orbit_bodies(options.orbits, names, elements)
    track_poses = (poses(solution, _track_nodes(solution, indices))
                   if tracked or elements else None)
    central = _central_bodies(elements, options.central_body, track_poses)

    # -- extent of the motion (centres of mass over all frames) ------------------------------
    positions = frame_poses.position.reshape(-1, 3)
    ground_points = [np.asarray(j.data["point"], float) for j in model.joints
                     if "point" in j.data and any(attacher.body_index(b) == GROUND
                                                  for b in j.bodies)]
    spheres = [c.center + c.radius * s for c in central for s in (np.eye(3), -np.eye(3))]
    cloud = np.vstack([positions] + ground_points + spheres)
    low, high = cloud.min(axis=0), cloud.max(axis=0)
    motion_radius = 0.5 * float(np.linalg.norm(high - low))

    # -- body meshes --------------------------------------------------------------------------
    body_meshes, body_radius, visuals, axisymmetric = {}, {}, {}, {}
    for info in model.bodies:
        visual = _coerce_visual(options.visuals.get(info.name), info.name)
        visuals[info.name] = visual
        shape = visual.shape if visual.shape is not None else info.shape
        mesh, spin_axis = None, (0.0, 0.0, 1.0)
        symmetric = bool(shape) and shape.get("kind") in AXISYMMETRIC
        if visual.mesh is not None:
            mesh = _explicit_mesh(visual)
        elif shape and geometry.shape_mesh(shape) is not None:
            mesh = geometry.shape_mesh(shape)
        elif info.kind == "rigid":
            mesh, symmetric, axis = _default_rigid_mesh(info, attachments[info.name])
            if axis is not None:
                spin_axis = axis
        body_meshes[info.name] = mesh
        caps = not (bool(shape) and shape.get("kind") in ("tube", "torus", "ring"))
        axisymmetric[info.name] = (symmetric, spin_axis, caps)
        body_radius[info.name] = geometry.bounding_radius(mesh)
    known = [r for r in body_radius.values() if r > 0.0]
    scene_scale = max(motion_radius, max(known, default=0.0))
    if scene_scale == 0.0:
        scene_scale = 1.0
    point_radius = 0.04 * scene_scale if not known else min(0.04 * scene_scale,
                                                             0.5 * float(np.median(known)))
    if elements and len(names) > 1:
        # a formation on a large orbit: particles sized by their spacing, not by the orbit
        first = frame_poses.position[0]
        gaps = np.linalg.norm(first[:, None] - first[None], axis=-1)
        gaps = gaps[np.triu_indices(len(names), 1)]
        if np.any(gaps > 0.0):
            point_radius = min(point_radius, 0.15 * float(gaps[gaps > 0.0].min()))
    for info in model.bodies:  # particles without a radius
        if body_meshes[info.name] is None:
            body_meshes[info.name] = geometry.sphere(point_radius)
            body_radius[info.name] = point_radius
            axisymmetric[info.name] = (True, (0.0, 0.0, 1.0), True)
    radii = np.array(list(body_radius.values()))
    glyph = options.glyph_scale or float(np.clip(0.1 * np.median(radii), 0.012 * scene_scale,
                                                 0.05 * scene_scale))
    if elements:  # glyphs sized by the bodies, not by the orbit
        glyph = options.glyph_scale or float(0.1 * np.median(radii))

    items: list[Item] = []
    colors: dict[str, str] = {}
    for b, info in enumerate(model.bodies):
        visual = visuals[info.name]
        colors[info.name] = visual.color or PALETTE[b % len(PALETTE)]
        if not visual.visible:
            continue
        color = colors[info.name]
        mesh = body_meshes[info.name]
        symmetric, spin_axis, caps = axisymmetric[info.name]
        stripes = symmetric if visual.stripes is None else visual.stripes
        rgb = geometry.stripe_colors(mesh, color, spin_axis, caps=caps) if stripes else None
        items.append(Item(info.name, mesh, b, color, visual.opacity, rgb, "body"))

    # -- directors ----------------------------------------------------------------------------
    wanted = options.directors
    rigid = [b.name for b in model.bodies if b.kind == "rigid"]
    if wanted == "auto":
        wanted = len(rigid) <= DIRECTOR_BODIES
    director_bodies = rigid if wanted is True else [] if not wanted else list(wanted)
    for name in director_bodies:
        b = attacher.body_index(name)
        if b == GROUND or model.bodies[b].kind != "rigid":
            raise ModelError(f"directors: {name!r} is not a rigid body of the model")
        length = 1.45 * body_radius[name]
        for i in range(3):
            items.append(Item(f"{name}.d{i + 1}", geometry.arrow(
                np.zeros(3), np.eye(3)[i], length, 0.022 * length), b, DIRECTOR_COLORS[i],
                kind="director"))

    # -- central bodies and orbit tracks ---------------------------------------------------
    for body in central:
        items.append(Item(body.name, geometry.sphere(body.radius, body.center, resolution=48),
                          GROUND, options.central_color, kind="central"))
    for name in tracked:
        path = track_poses.position[:, track_poses.index[name]]
        line = geometry.polyline(path.shape[0])
        line.points = path
        items.append(Item(f"{name}.orbit", line, GROUND, colors[name], 0.9, kind="orbit"))

    up = _up_vector(model)
    dynamic: list[DynamicItem] = []
    if options.joints:
        _joint_glyphs(model, attacher, frame_poses, glyph, up, items, dynamic)
    if options.forces:
        _springs(model, attacher, frame_poses, glyph, dynamic)
    if options.trails:
        _trails(solution, options.trails, attacher, frame_poses, dynamic)

    # -- bounds of all geometry over the frames ------------------------------------------------
    samples, support_samples, abstract = [], [], []
    for body in central:
        samples.append(geometry.sphere_points(body.center, body.radius))
    for item in items:
        if item.kind == "central":
            continue
        local = geometry.sample_points(item.mesh, 60)
        if item.body == GROUND:
            world = local
        else:
            world = (frame_poses.position[:, item.body, None, :]
                     + local @ np.swapaxes(frame_poses.rotation[:, item.body], 1, 2)
                     ).reshape(-1, 3)
        {"support": support_samples, "director": abstract}.get(item.kind, samples).append(
            world)
    every = max(1, frame_poses.frames // 50)
    for dyn in dynamic:
        for k in range(0, frame_poses.frames, every):
            samples.append(dyn.points_at(k))
    content = np.vstack(samples) if samples else np.zeros((1, 3))
    cloud = np.vstack([content] + support_samples + abstract)
    low, high = cloud.min(axis=0), cloud.max(axis=0)
    center = 0.5 * (low + high)
    radius = max(0.5 * float(np.linalg.norm(high - low)), 1e-12)

    plane_wanted = options.ground_plane
    if plane_wanted == "auto":
        plane_wanted = model.gravity is not None and float(np.linalg.norm(model.gravity)) > 0
    if plane_wanted:
        level = float((content @ up).min())
        if support_samples:  # mounts below everything rest on the floor
            mounts = float((np.vstack(support_samples) @ up).min())
            level = mounts if mounts <= level + 1e-9 * radius else min(level, mounts) - (
                0.08 * radius)
        else:
            level -= 0.08 * radius
        horizontal = cloud - np.outer(cloud @ up, up)
        middle = 0.5 * (horizontal.min(axis=0) + horizontal.max(axis=0))
        reach = float(np.max(np.linalg.norm(horizontal - middle, axis=1)))
        size = 2.0 * max(1.25 * reach, 0.3 * radius)
        base = middle + level * up
        items.insert(0, Item("ground", geometry.plane(base, up, size), GROUND, GROUND_COLOR,
                             kind="ground"))

    # -- visibility aids for small bodies on large orbits ----------------------------------
    attracted = [n for n in names if visuals[n].visible
                 and any(n in e.bodies for e in elements)]
    overlays: list[Item] = []
    markers = options.markers
    if markers == "auto":
        markers = bool(elements)
    if markers:
        size = MARKER_FRACTION * radius
        for name in (attracted if elements else
                     [n for n in names if visuals[n].visible]):
            if body_radius[name] < size:
                b = attacher.body_index(name)
                overlays.append(Item(f"{name}.marker", geometry.sphere(size), b, colors[name],
                                     0.45, kind="marker"))
        for item in overlays:
            cloud = np.vstack([cloud, frame_poses.position[:, item.body] + size,
                               frame_poses.position[:, item.body] - size])
    inset = _inset(options.inset, names, visuals, attracted, elements, frame_poses,
                   body_radius, set(director_bodies), radius)
    if cloud.shape[0] > 20000:
        cloud = cloud[np.linspace(0, cloud.shape[0] - 1, 20000).astype(int)]
    return SceneDescription(frame_poses, items, dynamic, up, center, radius, body_radius,
                            cloud, glyph, options, central, overlays, inset,
                            np.asarray(elements[0].data["center"], dtype=float)
                            if elements else None)


def _central_elements(model) -> list:
    return [f for f in model.forces if f.type == "CentralGravity" and "center" in f.data]


def _track_nodes(solution, indices: np.ndarray) -> np.ndarray:
    """Solution nodes of the shown time range, at most ORBIT_POINTS of them."""
    first, last = int(indices.min()), int(indices.max())
    count = last - first + 1
    if count <= ORBIT_POINTS:
        return np.arange(first, last + 1)
    return np.unique(np.linspace(first, last, ORBIT_POINTS).round().astype(int))


def _orbit_bodies(setting, names: list[str], centrals: list) -> list[str]:
    if setting == "auto":
        attracted = {b for f in centrals for b in f.bodies}
        return [n for n in names if n in attracted]
    if setting is True:
        return list(names)
    if not setting:
        return []
    chosen = [setting] if isinstance(setting, str) else list(setting)
    unknown = [n for n in chosen if n not in names]
    if unknown:
        raise ModelError(f"orbits: unknown bodies {unknown}; bodies: {names}")
    return chosen


def default_central_radius(mu: float, closest: float) -> float:
    """Radius drawn for an attracting body of parameter ``mu`` when the attracted bodies come
    no closer than ``closest`` to its centre.

    The Earth's mean radius when ``mu`` is the Earth's (in m^3/s^2 or km^3/s^2, within 1 %)
    and ``closest`` lies outside it; otherwise CENTRAL_FRACTION * ``closest``.
    """
    for mu_earth, radius in EARTH:
        if abs(mu / mu_earth - 1.0) < 0.01 and closest >= radius:
            return radius
    return CENTRAL_FRACTION * closest


def _central_bodies(elements: list, setting, track_poses: Poses | None) -> list[CentralBody]:
    if setting is False or setting is None or not elements:
        return []
    out = []
    for element in elements:
        center = np.asarray(element.data["center"], dtype=float)
        bodies = [n for n in element.bodies if n in track_poses.index]
        if isinstance(setting, dict):
            if element.name not in setting:
                continue
            radius = setting[element.name]
        elif setting is True:
            radius = None
        else:
            radius = setting
        if radius is None:
            if not bodies:
                continue
            paths = track_poses.position[:, [track_poses.index[n] for n in bodies]]
            closest = float(np.min(np.linalg.norm(paths - center, axis=-1)))
            radius = default_central_radius(float(element.data["mu"]), closest)
        radius = float(radius)
        if not radius > 0.0:
            raise ModelError(f"central_body radius must be positive, got {radius!r}")
        out.append(CentralBody(element.name, center, radius, bodies))
    if isinstance(setting, dict):
        unknown = set(setting) - {e.name for e in elements}
        if unknown:
            raise ModelError(f"central_body: no CentralGravity element named "
                             f"{sorted(unknown)}; elements: {[e.name for e in elements]}")
    return out


def _inset(setting, names: list[str], visuals: dict, attracted: list[str],
           elements: list, frame_poses: Poses, body_radius: dict,
           with_directors: set, scene_radius: float) -> InsetSpec | None:
    """The bodies an inset follows (None: no inset)."""
    if setting is False or setting is None:
        return None
    explicit = setting != "auto"
    if setting == "auto" and not elements:
        return None
    if isinstance(setting, str) and setting != "auto":
        chosen = [setting]
    elif setting in (True, "auto"):
        chosen = attracted or [n for n in names if visuals[n].visible][:1]
    else:
        chosen = list(setting)
    unknown = [n for n in chosen if n not in names]
    if unknown:
        raise ModelError(f"inset: unknown bodies {unknown}; bodies: {names}")
    if not chosen:
        return None

    def extent(group: list[str]) -> float:
        idx = [frame_poses.index[n] for n in group]
        pts = frame_poses.position[:, idx]
        middle = pts.mean(axis=1, keepdims=True)
        size = np.array([body_radius[n] * (1.45 if n in with_directors else 1.0)
                         for n in group])
        return float(np.max(np.linalg.norm(pts - middle, axis=-1) + size))

    size = extent(chosen)
    if not explicit and size >= INSET_FRACTION * scene_radius:
        chosen = chosen[:1]
        size = extent(chosen)
        if size >= INSET_FRACTION * scene_radius:
            return None
    center = next((np.asarray(e.data["center"], dtype=float) for e in elements
                   if all(n in e.bodies for n in chosen)), None)
    return InsetSpec([frame_poses.index[n] for n in chosen], chosen, 1.25 * size, center,
                     explicit)


def _up_vector(model) -> np.ndarray:
    gravity = model.gravity
    if gravity is not None and float(np.linalg.norm(gravity)) > 0.0:
        return -np.asarray(gravity, float) / float(np.linalg.norm(gravity))
    return np.array([0.0, 0.0, 1.0])


def _joint_glyphs(model, attacher: Attacher, frame_poses: Poses, s: float, up: np.ndarray,
                  items: list[Item], dynamic: list[DynamicItem]) -> None:
    gravity_present = model.gravity is not None and float(np.linalg.norm(model.gravity)) > 0
    for joint in model.joints:
        data, names = joint.data, joint.bodies
        if len(names) != 2:
            continue
        a, b = names
        ia, ib = attacher.body_index(a), attacher.body_index(b)
        carrier = b if ib != GROUND else a
        ic = attacher.body_index(carrier)
        kind = joint.type
        if kind == "Distance":
            _distance_rod(joint, attacher, frame_poses, s, items, dynamic)
            continue
        if "point" not in data:
            continue
        point = attacher.local_point(carrier, data["point"])
        meshes = []
        if kind == "Spherical":
            meshes.append((geometry.sphere(1.1 * s, point), ic))
        elif kind == "Revolute":
            axis = attacher.local_vector(carrier, data["axis"])
            axis = axis / np.linalg.norm(axis)
            meshes.append((geometry.rod(point - 2.5 * s * axis, point + 2.5 * s * axis,
                                        0.9 * s), ic))
        elif kind == "Universal":
            meshes.append((geometry.sphere(0.9 * s, point), ic))
            for name, key in ((a, "axis_a"), (b, "axis_b")):
                i = attacher.body_index(name)
                local = attacher.local_point(name, data["point"])
                axis = attacher.local_vector(name, data[key])
                axis = axis / np.linalg.norm(axis)
                meshes.append((geometry.rod(local - 2.5 * s * axis, local + 2.5 * s * axis,
                                            0.4 * s), i))
        elif kind in ("Prismatic", "Cylindrical"):
            _rail(joint, attacher, frame_poses, s, items)
            if kind == "Cylindrical":
                meshes.append((geometry.sphere(0.8 * s, point), ic))
        elif kind == "Rigid":
            meshes.append((geometry.box(point, 2.0 * s), ic))
        else:
            meshes.append((geometry.sphere(0.8 * s, point), ic))
        for mesh, body in meshes:
            items.append(Item(f"{joint.name}", mesh, body, JOINT_COLOR, kind="joint"))
        if GROUND in (ia, ib) and kind not in ("Prismatic", "Cylindrical"):
            other = a if ia != GROUND else b
            world = np.asarray(data["point"], float)
            away = world - attacher.reference_position(other)
            if gravity_present:  # a floor mount below, or a ceiling mount above
                away = -up if away @ up <= 0.0 else up
            elif np.linalg.norm(away) > 0.0:
                away = away / np.linalg.norm(away)
            else:
                away = -up
            start = world + 1.0 * s * away
            items.append(Item(f"{joint.name}.support", geometry.rod(
                start, start + 0.7 * s * away, 3.0 * s, resolution=32), GROUND,
                SUPPORT_COLOR, kind="support"))


def _rail(joint, attacher: Attacher, frame_poses: Poses, s: float, items: list[Item]) -> None:
    """Guide of a prismatic/cylindrical joint: on body a, long enough for b's travel."""
    a, b = joint.bodies
    ia, ib = attacher.body_index(a), attacher.body_index(b)
    world_point = np.asarray(joint.data["point"], float)
    world_axis = np.asarray(joint.data["axis"], float)
    world_axis = world_axis / np.linalg.norm(world_axis)
    point_a = attacher.local_point(a, world_point)
    axis_a = attacher.local_vector(a, world_axis)
    point_b = attacher.local_point(b, world_point)
    # travel of b's point along the axis, measured in a's frame
    travel = [0.0]
    for k in range(frame_poses.frames):
        xb = frame_poses.transform(k, ib, point_b[None])[0]
        if ia == GROUND:
            local = xb
        else:
            local = frame_poses.rotation[k, ia].T @ (xb - frame_poses.position[k, ia])
        travel.append(float((local - point_a) @ axis_a))
    lo, hi = min(travel) - 3.0 * s, max(travel) + 3.0 * s
    items.append(Item(f"{joint.name}.rail", geometry.rod(point_a + lo * axis_a,
                                                         point_a + hi * axis_a, 0.5 * s),
                      ia, SUPPORT_COLOR, kind="joint"))


def _distance_rod(joint, attacher: Attacher, frame_poses: Poses, s: float, items: list[Item],
                  dynamic: list[DynamicItem]) -> None:
    a, b = joint.bodies
    data = joint.data
    ends = []
    for name, key in ((a, "point_a"), (b, "point_b")):
        world = data.get(key)
        local = (attacher.local_point(name, world) if world is not None else np.zeros(3))
        ends.append((attacher.body_index(name), local))
        if attacher.body_index(name) == GROUND:
            items.append(Item(f"{joint.name}.anchor", geometry.sphere(1.1 * s, local), GROUND,
                              JOINT_COLOR, kind="joint"))
    (ia, xa), (ib, xb) = ends

    def fill(frame: int, out: np.ndarray) -> None:
        out[0] = frame_poses.transform(frame, ia, xa[None])[0]
        out[1] = frame_poses.transform(frame, ib, xb[None])[0]

    dynamic.append(DynamicItem(joint.name, geometry.polyline(2), fill, ROD_COLOR, 4.0, "rod"))


def _springs(model, attacher: Attacher, frame_poses: Poses, s: float,
             dynamic: list[DynamicItem]) -> None:
    for force in model.forces:
        points = force.data.get("points")
        if points is None or len(points) != 2 or len(force.bodies) != 2:
            continue
        (a, b), (pa, pb) = force.bodies, points
        ia, ib = attacher.body_index(a), attacher.body_index(b)
        xa, xb = attacher.local_point(a, pa), attacher.local_point(b, pb)
        length = float(np.linalg.norm(np.asarray(pb, float) - np.asarray(pa, float)))
        radius = float(np.clip(0.07 * length, 1.2 * s, 4.0 * s)) if length > 0 else 2.0 * s
        helical = "Spring" in force.type
        count = 240 if helical else 2

        def fill(frame: int, out: np.ndarray, ia=ia, ib=ib, xa=xa, xb=xb, radius=radius,
                 helical=helical) -> None:
            start = frame_poses.transform(frame, ia, xa[None])[0]
            end = frame_poses.transform(frame, ib, xb[None])[0]
            if helical:
                geometry.helix_points(start, end, radius, 10.0, out)
            else:
                out[0], out[1] = start, end

        dynamic.append(DynamicItem(force.name, geometry.polyline(count), fill, SPRING_COLOR,
                                   2.5, "spring"))


def _trails(solution, trails, attacher: Attacher, frame_poses: Poses,
            dynamic: list[DynamicItem]) -> None:
    """Append a trail per entry of ``trails`` (body names, or {name: world point at the
    initial pose}) to ``dynamic``; see :func:`trail_path`."""
    spec = {name: None for name in trails} if not isinstance(trails, dict) else trails
    for name, point in spec.items():
        if attacher.body_index(name) == GROUND:
            raise ModelError(f"trails: no body named {name!r}; bodies: {frame_poses.names}")
        path = trail_path(solution, name, point, frame_poses.indices)

        def fill(frame: int, out: np.ndarray, path=path) -> None:
            out[:frame + 1] = path[:frame + 1]
            out[frame + 1:] = path[frame]

        dynamic.append(DynamicItem(f"{name}.trail", geometry.polyline(frame_poses.frames), fill,
                                   TRAIL_COLOR, 2.0, "trail"))


def trail_path(solution, body: str, point, indices: np.ndarray) -> np.ndarray:
    """Positions, (F, 3), at the nodes ``indices`` of the point a trail of ``body`` follows.

    Parameters
    ----------
    solution : mbs.Solution
    body : str
        Name of a body of the model.
    point : 3-vector or None
        World coordinates, at the initial pose (``model.q0``), of the point of the body to
        trace (as :meth:`mbs.Solution.point` takes them: attachment points of joints, springs
        and loads are given the same way); None for the body's reference point (centre of
        mass or particle).
    indices : (F,) int
        Solution nodes (the frames of a scene).

    Returns
    -------
    (F, 3) world positions: those of ``solution.point(body, point)`` at ``indices``.
    """
    indices = np.asarray(indices, dtype=int)
    info = solution.model.body(body)
    if point is None:
        # the reference point: its own coordinates, read at the frames only
        return np.array(pose_from_coordinates(info, np.asarray(solution.q)[indices])[0],
                        dtype=float)
    # one pass over the nodes of one body (and its velocities, which Solution.point returns
    # too): cheap beside the run, and the trail is the path Solution.point reports
    positions, _ = solution.point(body, point)
    return positions[indices]
