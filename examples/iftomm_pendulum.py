"""IFToMM benchmark A01: simple pendulum released from the horizontal position.

Problem A01 "Simple pendulum (planar)" of the library of computational benchmark problems of the
IFToMM Technical Committee for Multibody Dynamics (M. González, Laboratorio de Ingeniería
Mecánica, Universidade da Coruña, 2005; http://lim.ii.udc.es/mbsbenchmark/, continued at
http://lib.iftomm-multibody.org), described in

    M. González, D. Dopico, U. Lugrís, J. Cuadrado, "A benchmarking system for MBS simulation
    software: problem standardization and performance measurement", Multibody System Dynamics
    16 (2006) 179-190.

A point mass P1 of 1 kg on a massless link of 1 m pivots about the origin; gravity 9.81 N/kg
acts along -y. P1 starts at rest with the link horizontal. The library's reference solution is
the time history of P1 (x, y) every 0.5 s over 2000 s (file ``A01_solution_data.txt``, six
significant digits), with allowed errors 1e-1 (low precision) and 1e-3 (high precision). The
specification's text puts P1 at x = +1 m, its solution file starts at x = -1 m; this example
follows the solution file (the two motions are mirror images). ``PUBLISHED`` holds the
published values at 0, 0.5, ..., 10 s and every 100 s up to 2000 s.

Model: a :class:`mbs.PointMass` held at 1 m from the origin by a :class:`mbs.joints.Distance`
rod (3 coordinates, 1 constraint). The rod alone allows a spherical pendulum; the motion stays
in the x-y plane because the initial state and gravity have no z component.

Independent reference: the exact solution of the minimal-coordinate equation
theta'' = -(g / L) sin(theta) (theta from the downward vertical), theta(0) = -pi/2 at rest:
sin(theta / 2) = -k sn(K(k) - omega0 t, k), k = sin(pi / 4), omega0 = sqrt(g / L), period
4 K / omega0 = 2.3678 s. The published values agree with it to 5.0e-7 over the whole 2000 s
(their rounding to six digits).

With ``RECOMMENDED`` (energy-momentum scheme, h = 1 ms, 10 s) P1 deviates from the exact
solution by 4.6e-5 m at most (order 2: 1.2e-5 m at h = 0.5 ms) and energy is conserved to
round-off. The library's full 2000 s to its high-precision level needs a higher order:
``--order 6 --h 0.05 --t-end 2000`` (the 6th-order composition of the scheme, 18 s) stays
within 9.0e-5 m of the exact solution.

    python examples/iftomm_pendulum.py
    python examples/iftomm_pendulum.py --order 6 --h 0.05 --t-end 2000
    python examples/iftomm_pendulum.py --animate pendulum.mp4
"""

from __future__ import annotations

import sys

import numpy as np
from scipy.special import ellipj, ellipk

import mbs

MASS = 1.0  # kg, point mass P1
LENGTH = 1.0  # m, massless link
GRAVITY = 9.81  # N/kg along -y
START = (-1.0, 0.0, 0.0)  # P1 at t = 0 (link horizontal, at rest)
DURATION = 2000.0  # s, the library's simulation time
TOLERANCES = {"low precision": 1e-1, "high precision": 1e-3}  # m, the library's allowed errors

RECOMMENDED = dict(solver="em", h=0.001, t_end=10.0)
VIZ = dict(view="front", directors=False, trails=["P1"])

# (t [s], x [m], y [m]) of P1 from the library's A01_solution_data.txt
PUBLISHED = np.array([
    (0.0, -1.0, 0.0), (0.5, -0.391049, -0.92037), (1.0, 0.986292, -0.165011),
    (1.5, 0.884132, -0.467237), (2.0, -0.793566, -0.608484), (2.5, -0.996334, -0.0855439),
    (3.0, 0.176652, -0.984273), (3.5, 0.999914, -0.013142), (4.0, 0.577564, -0.816346),
    (4.5, -0.963293, -0.268452), (5.0, -0.942305, -0.334754), (5.5, 0.665293, -0.746583),
    (6.0, 0.999498, -0.0316965), (6.5, 0.0511945, -0.998689), (7.0, -0.998619, -0.0525408),
    (7.5, -0.727459, -0.686151), (8.0, 0.919858, -0.392252), (8.5, 0.975626, -0.21944),
    (9.0, -0.498374, -0.866962), (9.5, -0.999992, -0.00402112), (10.0, -0.275087, -0.961419),
    (100.0, -0.181513, -0.983388), (200.0, 0.999439, -0.0334942),
    (300.0, 0.510366, -0.859958), (400.0, -0.991045, -0.133527),
    (500.0, -0.75456, -0.656231), (600.0, 0.955157, -0.296099),
    (700.0, 0.901986, -0.431765), (800.0, -0.862318, -0.506367),
    (900.0, -0.972027, -0.234871), (1000.0, 0.68323, -0.730203),
    (1100.0, 0.995716, -0.0924623), (1200.0, -0.40712, -0.913375),
    (1300.0, -0.999892, -0.0147136), (1400.0, 0.0595166, -0.998227),
    (1500.0, 0.999993, -0.00381092), (1600.0, 0.299451, -0.954112),
    (1700.0, -0.998206, -0.0598682), (1800.0, -0.603623, -0.79727),
    (1900.0, 0.983337, -0.181794), (2000.0, 0.814603, -0.580019),
])


def build(mass: float = MASS, length: float = LENGTH) -> mbs.System:
    """The pendulum at rest with the link horizontal.

    Parameters
    ----------
    mass : float
        Mass of P1 [kg].
    length : float
        Length of the massless link [m]; P1 starts at (-length, 0, 0).

    Returns
    -------
    mbs.System
        Point mass "P1" and the distance joint "link" to the ground.
    """
    system = mbs.System(gravity=(0.0, -GRAVITY, 0.0))
    bob = system.add(mbs.PointMass(mass=mass, name="P1"))
    bob.set_state(position=(-length, 0.0, 0.0))
    system.add(mbs.joints.Distance(system.ground, bob, length=length, name="link"))
    return system


def point_p1(solution: mbs.Solution) -> np.ndarray:
    """(N+1, 2) x, y of P1 at the solution's nodes."""
    return solution.body("P1").position[:, :2]


def exact_p1(times: np.ndarray, length: float = LENGTH) -> np.ndarray:
    """Exact position of P1 released from the horizontal at x = -length.

    Parameters
    ----------
    times : (k,) array
        Times [s].
    length : float
        Link length [m].

    Returns
    -------
    (k, 2) array
        x, y of P1 from the Jacobi elliptic solution sin(theta / 2) = -k sn(K - omega0 t, k).
    """
    times = np.asarray(times, dtype=float)
    parameter = np.sin(np.pi / 4.0) ** 2  # m = k^2, k = sin(theta0 / 2)
    sn = ellipj(ellipk(parameter) - np.sqrt(GRAVITY / length) * times, parameter)[0]
    theta = -2.0 * np.arcsin(np.sqrt(parameter) * sn)
    return length * np.column_stack([np.sin(theta), -np.cos(theta)])


def period(length: float = LENGTH) -> float:
    """Period of the pendulum released from the horizontal [s]."""
    return 4.0 * ellipk(np.sin(np.pi / 4.0) ** 2) / np.sqrt(GRAVITY / length)



def published_errors(solution: mbs.Solution) -> tuple[np.ndarray, np.ndarray]:
    """Published times that are nodes of ``solution`` and max(|dx|, |dy|) of P1 there."""
    nodes, usable = solution.nodes_at(PUBLISHED[:, 0])
    errors = np.abs(point_p1(solution)[nodes[usable]] - PUBLISHED[usable, 1:]).max(axis=1)
    return PUBLISHED[usable, 0], errors


def report(solution: mbs.Solution) -> str:
    """Errors of P1 against the published values and against the exact solution."""
    times, errors = published_errors(solution)
    exact = np.max(np.abs(point_p1(solution) - exact_p1(solution.t)))
    level = next((name for name, tol in sorted(TOLERANCES.items(), key=lambda kv: kv[1])
                  if errors.size and errors.max() <= tol), "none")
    lines = [f"P1 against the exact solution: max |error| = {exact:.2e} m over "
             f"[0, {solution.t[-1]:g}] s"]
    if errors.size:
        lines.append(f"P1 against the published values at {times.size} times up to "
                     f"{times[-1]:g} s: max |error| = {errors.max():.2e} m (precision level "
                     f"met: {level})")
    out_of_plane = float(np.max(np.abs(solution.body("P1").position[:, 2])))
    lines.append(f"out-of-plane |z| <= {out_of_plane:.1e} m; period {period():.6f} s")
    return "\n".join(lines)


if __name__ == "__main__":
    from mbs.cli import main

    raise SystemExit(main(["run", __file__, *sys.argv[1:]]))
