"""Meshes in body-fixed coordinates (centre of mass at the origin, axes = directors d1, d2, d3).

Every function returns a new :class:`pyvista.PolyData`; nothing here touches a plotter, so the
same meshes serve the on-screen scene and the VTK export of :mod:`mbs.io`.
"""

from __future__ import annotations

import numpy as np

from mbs.errors import ModelError
from mbs.viz.backend import import_pyvista

pv = import_pyvista()

RESOLUTION = 40  #: facets around round shapes
RING_TUBE = 0.06  #: tube radius of a "ring" shape given without one, relative to its radius


def shape_mesh(shape: dict | None, resolution: int = RESOLUTION):
    """Mesh of a shape record (None if the record is absent or unknown).

    Records are those of :meth:`mbs.RigidBody.from_shape` or a :class:`mbs.viz.Visual`'s
    ``shape``; every axis of symmetry is d3:

    * ``box(lx, ly, lz)``;
    * ``cylinder(radius, length)``, capped (``"capped": False`` leaves the ends open);
    * ``tube(radius, length)``, an open thin-walled tube (``"capped": True`` closes it);
    * ``sphere(radius)``, ``spherical_shell(radius)``;
    * ``cone(radius, height, base_offset)``, apex up;
    * ``torus(radius, tube_radius)`` and ``ring(radius, tube_radius=0.06 radius)``: a ring
      whose centre line is a circle of ``radius`` in the d1-d2 plane, see :func:`torus`.
    """
    if not shape:
        return None
    kind = shape.get("kind")
    if kind == "box":
        return pv.Cube(x_length=shape["lx"], y_length=shape["ly"], z_length=shape["lz"]
                       ).triangulate()
    if kind in ("cylinder", "tube"):
        return cylinder(shape["radius"], shape["length"],
                        capped=bool(shape.get("capped", kind == "cylinder")),
                        resolution=resolution)
    if kind in ("sphere", "spherical_shell"):
        if shape.get("radius") is None:
            return None
        return sphere(shape["radius"], resolution=resolution)
    if kind == "cone":
        height = shape["height"]
        base = shape.get("base_offset", -height / 4.0)
        return pv.Cone(center=(0.0, 0.0, base + height / 2.0), direction=(0.0, 0.0, 1.0),
                       height=height, radius=shape["radius"], resolution=resolution
                       ).triangulate()
    if kind in ("torus", "ring"):
        radius = float(shape["radius"])
        tube = shape.get("tube_radius", RING_TUBE * radius if kind == "ring" else None)
        if tube is None:
            raise ModelError("shape 'torus' needs radius and tube_radius, e.g. "
                             "{'kind': 'torus', 'radius': 0.1, 'tube_radius': 0.01}")
        return torus(radius, float(tube), resolution=resolution)
    return None


def cylinder(radius: float, length: float, capped: bool = True,
             resolution: int = RESOLUTION):
    """Cylinder along d3 centred at the origin; without end discs when ``capped`` is False
    (an open tube: what lies inside stays visible)."""
    if capped:
        return pv.Cylinder(center=(0.0, 0.0, 0.0), direction=(0.0, 0.0, 1.0),
                           radius=float(radius), height=float(length), resolution=resolution,
                           capping=True).triangulate()
    # built directly: one ring of points per end, shared by the side triangles, so the
    # surface has exactly two boundary loops and no seam
    angle = 2.0 * np.pi * np.arange(resolution) / resolution
    ring = np.column_stack([radius * np.cos(angle), radius * np.sin(angle),
                            np.zeros(resolution)])
    points = np.vstack([ring + (0.0, 0.0, -0.5 * length), ring + (0.0, 0.0, 0.5 * length)])
    i = np.arange(resolution)
    j = (i + 1) % resolution
    top = i + resolution
    triangles = np.vstack([np.column_stack([i, j, j + resolution]),
                           np.column_stack([i, j + resolution, top])])
    return _triangles(points, triangles)


def torus(radius: float, tube_radius: float, resolution: int = RESOLUTION):
    """Closed ring (torus) about d3: centre-line circle of ``radius`` in the d1-d2 plane,
    circular cross-section of ``tube_radius``.

    The surface is one watertight triangle mesh (no seam, no boundary edges), so it can be
    used for volume or genus checks as well as for drawing.
    """
    radius, tube_radius = float(radius), float(tube_radius)
    if not 0.0 < tube_radius < radius:
        raise ModelError(f"torus needs 0 < tube_radius < radius, got tube_radius="
                         f"{tube_radius!r}, radius={radius!r}")
    around = max(8, int(resolution))             # along the centre line
    section = max(6, int(resolution) // 2)       # around the cross-section
    u = 2.0 * np.pi * np.arange(around) / around
    v = 2.0 * np.pi * np.arange(section) / section
    uu, vv = np.meshgrid(u, v, indexing="ij")
    distance = radius + tube_radius * np.cos(vv)
    points = np.column_stack([(distance * np.cos(uu)).ravel(),
                              (distance * np.sin(uu)).ravel(),
                              (tube_radius * np.sin(vv)).ravel()])
    a, b = np.meshgrid(np.arange(around), np.arange(section), indexing="ij")
    a1, b1 = (a + 1) % around, (b + 1) % section
    p00, p10 = a * section + b, a1 * section + b
    p01, p11 = a * section + b1, a1 * section + b1
    triangles = np.vstack([np.column_stack([p00.ravel(), p10.ravel(), p11.ravel()]),
                           np.column_stack([p00.ravel(), p11.ravel(), p01.ravel()])])
    return _triangles(points, triangles)


def _triangles(points: np.ndarray, triangles: np.ndarray):
    faces = np.column_stack([np.full(len(triangles), 3), triangles]).astype(np.int64).ravel()
    return pv.PolyData(np.asarray(points, dtype=float), faces=faces)


def sphere(radius: float, center=(0.0, 0.0, 0.0), resolution: int = 24):
    return pv.Sphere(radius=float(radius), center=center, theta_resolution=resolution,
                     phi_resolution=max(8, resolution // 2))


def inertia_ellipsoid(mass: float, inertia: np.ndarray, resolution: int = 24):
    """Homogeneous ellipsoid with the body's mass and inertia (a shape for bodies given by
    mass and inertia only): semi-axes a_i^2 = 5 / (2 m) (I_j + I_k - I_i)."""
    moments, axes = np.linalg.eigh(np.asarray(inertia, dtype=float))
    total = moments.sum()
    semi = np.sqrt(np.maximum(5.0 / (2.0 * mass) * (total - 2.0 * moments), 0.0))
    semi = np.maximum(semi, 0.05 * semi.max())
    mesh = pv.ParametricEllipsoid(*semi, u_res=resolution, v_res=resolution // 2,
                                  w_res=resolution // 2)
    mesh = pv.PolyData(mesh.points @ axes.T, mesh.faces) if mesh.n_points else mesh
    return mesh.triangulate()


def cone_between(apex: np.ndarray, base_center: np.ndarray, radius: float,
                 resolution: int = RESOLUTION):
    """Solid cone with its apex at ``apex`` and its base circle centred at ``base_center``."""
    apex, base_center = np.asarray(apex, float), np.asarray(base_center, float)
    axis = apex - base_center
    height = float(np.linalg.norm(axis))
    return pv.Cone(center=0.5 * (apex + base_center), direction=axis / height, height=height,
                   radius=radius, resolution=resolution).triangulate()


def rod(start, end, radius: float, resolution: int = 16):
    """Capped cylinder from ``start`` to ``end``."""
    start, end = np.asarray(start, float), np.asarray(end, float)
    axis = end - start
    length = float(np.linalg.norm(axis))
    if length == 0.0:
        return sphere(radius)
    return pv.Cylinder(center=0.5 * (start + end), direction=axis / length, radius=radius,
                       height=length, resolution=resolution, capping=True).triangulate()


def arrow(start, direction, length: float, radius: float):
    """Arrow of total ``length`` from ``start`` along ``direction``."""
    direction = np.asarray(direction, float)
    direction = direction / np.linalg.norm(direction)
    return pv.Arrow(start=start, direction=direction, tip_length=0.22, tip_radius=2.2 * radius
                    / length, shaft_radius=radius / length, scale=length,
                    tip_resolution=16, shaft_resolution=12).triangulate()


def box(center, size: float):
    return pv.Cube(center=center, x_length=size, y_length=size, z_length=size).triangulate()


def plane(center, normal, size: float, divisions: int = 12):
    return pv.Plane(center=center, direction=normal, i_size=size, j_size=size,
                    i_resolution=divisions, j_resolution=divisions)


def polyline(n_points: int):
    """A connected line through ``n_points`` points, all at the origin (points set later)."""
    lines = np.concatenate([[n_points], np.arange(n_points)]).astype(np.int64)
    return pv.PolyData(np.zeros((n_points, 3)), lines=lines)


def helix_points(a: np.ndarray, b: np.ndarray, radius: float, turns: float,
                 out: np.ndarray) -> np.ndarray:
    """Fill ``out`` (P, 3) with a helix of ``turns`` windings and ``radius`` from a to b.

    The first and last 6 % of the points are straight leads on the axis, as on a real spring.
    """
    n = out.shape[0]
    axis = b - a
    length = float(np.linalg.norm(axis))
    u = axis / length if length > 0.0 else np.array([0.0, 0.0, 1.0])
    helper = np.eye(3)[int(np.argmin(np.abs(u)))]
    e1 = np.cross(u, helper)
    e1 /= np.linalg.norm(e1)
    e2 = np.cross(u, e1)
    s = np.linspace(0.0, 1.0, n)
    lead = 0.06
    inner = np.clip((s - lead) / (1.0 - 2.0 * lead), 0.0, 1.0)
    r = np.where((s > lead) & (s < 1.0 - lead), radius, 0.0)
    angle = 2.0 * np.pi * turns * inner
    out[:] = (a + np.outer(s, axis) + np.outer(r * np.cos(angle), e1)
              + np.outer(r * np.sin(angle), e2))
    return out


def stripe_colors(mesh, color, axis=(0.0, 0.0, 1.0), sectors: int = 8,
                  shade: float = 0.72, caps: bool = True) -> np.ndarray:
    """(cells, 3) uint8 colours alternating in ``sectors`` around ``axis``, so that a spin
    about that axis is visible on an axisymmetric body; with ``caps``, faces normal to the
    axis (flat ends) get one plain darker shade."""
    base = np.array(pv.Color(color).int_rgb, dtype=float)
    axis = np.asarray(axis, float) / np.linalg.norm(axis)
    helper = np.eye(3)[int(np.argmin(np.abs(axis)))]
    e1 = np.cross(axis, helper)
    e1 /= np.linalg.norm(e1)
    e2 = np.cross(axis, e1)
    centers = np.asarray(mesh.cell_centers().points, dtype=float)
    azimuth = np.arctan2(centers @ e2, centers @ e1)
    band = np.floor((azimuth + np.pi) / (2.0 * np.pi / sectors)).astype(int) % 2
    colors = np.where(band[:, None] == 1, base * shade, base)
    if not caps:
        return np.clip(colors, 0, 255).astype(np.uint8)
    normals = mesh.compute_normals(cell_normals=True, point_normals=False,
                                   auto_orient_normals=False, split_vertices=False
                                   ).cell_data["Normals"]
    flat = np.abs(np.asarray(normals) @ axis) > 0.99
    colors[flat] = base * 0.6
    return np.clip(colors, 0, 255).astype(np.uint8)


def combine(meshes):
    """One PolyData holding all ``meshes`` (triangulated, points not merged)."""
    out = meshes[0]
    if len(meshes) > 1:
        out = out.merge(list(meshes[1:]), merge_points=False)
    if not isinstance(out, pv.PolyData):
        out = out.extract_geometry()
    return out.triangulate()


def bounding_radius(mesh) -> float:
    """Largest distance of a mesh point from the local origin."""
    if mesh is None or mesh.n_points == 0:
        return 0.0
    return float(np.max(np.linalg.norm(np.asarray(mesh.points, dtype=float), axis=1)))


def sphere_points(center, radius: float, count: int = 200) -> np.ndarray:
    """``count`` points spread evenly over a sphere (Fibonacci lattice): its extent in every
    direction to within 1 - cos(pi / sqrt(count))."""
    k = np.arange(count) + 0.5
    polar = np.arccos(1.0 - 2.0 * k / count)
    azimuth = np.pi * (1.0 + 5.0**0.5) * k
    unit = np.column_stack([np.sin(polar) * np.cos(azimuth), np.sin(polar) * np.sin(azimuth),
                            np.cos(polar)])
    return np.asarray(center, dtype=float) + float(radius) * unit


def sample_points(mesh, count: int = 200) -> np.ndarray:
    """At most ``count`` of the mesh points (for cheap bounds over many frames)."""
    points = np.asarray(mesh.points, dtype=float)
    if points.shape[0] <= count:
        return points
    return points[np.linspace(0, points.shape[0] - 1, count).astype(int)]
