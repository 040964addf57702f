"""Meshes in body-fixed coordinates (centre of mass at the origin, axes = directors d1, d2, d3).

Every function returns a new :class:`pyvista.PolyData`; nothing here touches a plotter, so the
same meshes serve the on-screen scene and the VTK export of :mod:`mbs.io`.
"""

from __future__ import annotations

import numpy as np

from mbs.viz.backend import import_pyvista

pv = import_pyvista()

RESOLUTION = 40  #: facets around round shapes


def shape_mesh(shape: dict | None, resolution: int = RESOLUTION):
    """Mesh of a shape record from :meth:`mbs.RigidBody.from_shape` (None if unknown/absent).

    box(lx, ly, lz); cylinder and tube(radius, length) along d3; sphere and
    spherical_shell(radius); cone(radius, height, base_offset) along d3, apex up.
    """
    if not shape:
        return None
    kind = shape.get("kind")
    if kind == "box":
        return pv.Cube(x_length=shape["lx"], y_length=shape["ly"], z_length=shape["lz"]
                       ).triangulate()
    if kind in ("cylinder", "tube"):
        return pv.Cylinder(center=(0.0, 0.0, 0.0), direction=(0.0, 0.0, 1.0),
                           radius=shape["radius"], height=shape["length"],
                           resolution=resolution, capping=True).triangulate()
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
    return None


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
                  shade: float = 0.72) -> np.ndarray:
    """(cells, 3) uint8 colours alternating in ``sectors`` around ``axis``, so that a spin
    about that axis is visible on an axisymmetric body."""
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
    normals = mesh.compute_normals(cell_normals=True, point_normals=False,
                                   auto_orient_normals=False, split_vertices=False
                                   ).cell_data["Normals"]
    caps = np.abs(np.asarray(normals) @ axis) > 0.99  # flat ends: one plain darker shade
    colors[caps] = base * 0.6
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


def sample_points(mesh, count: int = 200) -> np.ndarray:
    """At most ``count`` of the mesh points (for cheap bounds over many frames)."""
    points = np.asarray(mesh.points, dtype=float)
    if points.shape[0] <= count:
        return points
    return points[np.linspace(0, points.shape[0] - 1, count).astype(int)]
