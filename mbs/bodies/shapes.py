"""Mass and inertia of homogeneous solids about their centre of mass.

Every shape's symmetry axis is the body axis d3. The centre of mass is the body's reference
point; the returned record gives the geometry relative to it for visualisation.
"""

from __future__ import annotations

import numpy as np

from mbs.errors import ModelError
from mbs.validation import as_scalar

_SHAPES = {
    "box": ("lx", "ly", "lz"),
    "cylinder": ("radius", "length"),
    "tube": ("radius", "length"),
    "sphere": ("radius",),
    "spherical_shell": ("radius",),
    "cone": ("radius", "height"),
    "torus": ("radius", "tube_radius"),
}


def _volume(kind: str, d: dict) -> float | None:
    if kind == "box":
        return d["lx"] * d["ly"] * d["lz"]
    if kind == "cylinder":
        return np.pi * d["radius"] ** 2 * d["length"]
    if kind == "sphere":
        return 4.0 / 3.0 * np.pi * d["radius"] ** 3
    if kind == "cone":
        return np.pi * d["radius"] ** 2 * d["height"] / 3.0
    if kind == "torus":
        return 2.0 * np.pi**2 * d["radius"] * d["tube_radius"] ** 2
    return None  # thin-walled: no volume


def _principal_moments(kind: str, m: float, d: dict) -> np.ndarray:
    if kind == "box":
        lx, ly, lz = d["lx"], d["ly"], d["lz"]
        return m / 12.0 * np.array([ly**2 + lz**2, lx**2 + lz**2, lx**2 + ly**2])
    if kind == "cylinder":
        r, length = d["radius"], d["length"]
        transverse = m * (3 * r**2 + length**2) / 12.0
        return np.array([transverse, transverse, 0.5 * m * r**2])
    if kind == "tube":  # thin-walled open cylinder
        r, length = d["radius"], d["length"]
        transverse = m * (6 * r**2 + length**2) / 12.0
        return np.array([transverse, transverse, m * r**2])
    if kind == "sphere":
        return np.full(3, 0.4 * m * d["radius"] ** 2)
    if kind == "spherical_shell":
        return np.full(3, 2.0 / 3.0 * m * d["radius"] ** 2)
    if kind == "cone":  # about the centre of mass, a quarter height above the base
        r, h = d["radius"], d["height"]
        transverse = m * (3.0 / 20.0 * r**2 + 3.0 / 80.0 * h**2)
        return np.array([transverse, transverse, 0.3 * m * r**2])
    if kind == "torus":  # solid, centre circle of radius R about d3, tube radius r
        big, small = d["radius"], d["tube_radius"]
        transverse = m * (0.5 * big**2 + 0.625 * small**2)
        return np.array([transverse, transverse, m * (big**2 + 0.75 * small**2)])
    raise AssertionError(kind)


def shape_inertia(shape: str, *, mass: float | None, density: float | None, owner: str,
                  **dimensions) -> tuple[float, np.ndarray, dict]:
    """Mass, principal moments and geometry record of a homogeneous shape.

    Parameters
    ----------
    shape : {"box", "cylinder", "tube", "sphere", "spherical_shell", "cone", "torus"}
        box(lx, ly, lz); cylinder(radius, length) and thin-walled tube(radius, length) along
        d3; sphere(radius) and thin spherical_shell(radius); cone(radius, height) with its axis
        along d3, apex up, centre of mass at height/4 above the base; solid torus(radius,
        tube_radius) about d3 (gimbal rings, wheel rims; a thin hoop has no extent along d3,
        which the director formulation cannot hold: give it a tube radius).
    mass, density : float
        Exactly one of them; thin-walled shapes need ``mass``.
    """
    if shape not in _SHAPES:
        raise ModelError(f"{owner}: unknown shape {shape!r}; choose one of {sorted(_SHAPES)}")
    needed = _SHAPES[shape]
    unknown = set(dimensions) - set(needed)
    missing = set(needed) - set(dimensions)
    if unknown or missing:
        raise ModelError(f"{owner}: shape {shape!r} takes dimensions {needed}; "
                         f"missing {sorted(missing)}, unknown {sorted(unknown)}")
    dims = {k: as_scalar(v, k, owner, positive=True) for k, v in dimensions.items()}
    if (mass is None) == (density is None):
        raise ModelError(f"{owner}: give exactly one of mass= and density=")
    if mass is not None:
        body_mass = as_scalar(mass, "mass", owner, positive=True)
    else:
        volume = _volume(shape, dims)
        if volume is None:
            raise ModelError(f"{owner}: {shape!r} is thin-walled and has no volume: give its "
                             f"mass=, not density=")
        body_mass = as_scalar(density, "density", owner, positive=True) * volume
    moments = _principal_moments(shape, body_mass, dims)
    if shape == "torus" and dims["tube_radius"] >= dims["radius"]:
        raise ModelError(f"{owner}: a torus needs tube_radius < radius (got "
                         f"{dims['tube_radius']:g} and {dims['radius']:g}); use a sphere or "
                         f"a cylinder for a body without a hole")
    record = {"kind": shape, **dims}
    if shape == "cone":
        record["base_offset"] = -dims["height"] / 4.0
    return body_mass, moments, record
