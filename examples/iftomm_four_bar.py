"""IFToMM benchmark A02: a row of N four-bar linkages passing through singular positions.

Problem A02 "N four-bar mechanism" of the library of computational benchmark problems of the
IFToMM Technical Committee for Multibody Dynamics (M. González, Laboratorio de Ingeniería
Mecánica, Universidade da Coruña, 2005; http://lim.ii.udc.es/mbsbenchmark/, continued at
http://lib.iftomm-multibody.org), described in

    M. González, D. Dopico, U. Lugrís, J. Cuadrado, "A benchmarking system for MBS simulation
    software: problem standardization and performance measurement", Multibody System Dynamics
    16 (2006) 179-190.

N + 1 vertical bars ("crank_0" ... "crank_N") hinged to the ground at x = 0, 1, ..., N and N
horizontal bars ("coupler_0" ... "coupler_N-1") joining their tops form N parallelograms: 2N + 1
bars of 1 m with a uniformly distributed mass of 1 kg, gravity 9.81 N/kg along -y, N = 40. At
t = 0 the vertical bars stand upright and the top B0 of the first one moves at 1 m/s along +x.
The bars fall, turn over and keep rotating; each time they are horizontal (B0 on the x axis)
every bar lies on one line and the number of degrees of freedom jumps from 1 to N + 1. The
library's reference solution is the time history of B0 over 20 s (file
``A02_solution_data.txt``, every 0.05 s, six significant digits), with allowed errors 1e-1
(low precision) and 1e-3 (high precision); ``PUBLISHED`` holds its values every 0.25 s.

Model: every bar is a rigid body with the slender bar's in-plane moment m L^2 / 12 about its
centre; the two moments the planar motion does not excite are those of a bar with a 5 cm square
section (the director formulation needs a body with extent in every direction). 3N + 1
revolute joints about z; each parallelogram built from 3-D hinges repeats 3 out-of-plane
equations, which ``System.compile()`` removes (3N redundant equations, 1 degree of freedom).

Independent reference: the motion keeps the parallelogram shape, so it has one coordinate, the
angle theta of the vertical bars from the upward vertical (B0 = L (sin theta, cos theta)):
T = 1/2 ((N+1)/3 + N) m L^2 theta'^2, V = ((N+1)/2 + N) m g L cos theta, integrated by
``scipy.integrate.solve_ivp`` (DOP853, rtol = atol = 1e-12). The published values agree with it
to 1.3e-6 m up to 10 s and 4.1e-6 m up to 20 s.

With ``RECOMMENDED`` (energy-momentum scheme, h = 2.5 ms, 20 s, 20 passages through singular
positions) B0 deviates from the reduced solution by 6.3e-4 m at most, within the library's
high-precision level (order 2: over the first 2 s 5.3e-5 m, 1.3e-5 m with h = 1.25 ms); energy
is conserved to 2e-11 and the couplers stay horizontal. Composed schemes need care at the
singular positions: for N = 40 the 4th-order composition (``order=4``) at h = 5 ms and 10 ms
leaves the parallelogram branch at the first one (t = 0.73 s: couplers turn vertical while
energy and constraints are still kept), whereas the order-2 scheme keeps it at h = 10 ms
(checked over 5 s).

    python examples/iftomm_four_bar.py                      # N = 40 (build(n) for others)
    python examples/iftomm_four_bar.py --t-end 10 --animate four_bars.mp4
"""

from __future__ import annotations

import sys

import numpy as np
from scipy.integrate import solve_ivp

import mbs

N_LOOPS = 40  # the library's N
LENGTH = 1.0  # m, every bar
MASS = 1.0  # kg, every bar
GRAVITY = 9.81  # N/kg along -y
SPEED = 1.0  # m/s, initial velocity of B0 along +x
SECTION = 0.05  # m, square section setting the moments the planar motion does not excite
DURATION = 20.0  # s, the library's simulation time
TOLERANCES = {"low precision": 1e-1, "high precision": 1e-3}  # m, the library's allowed errors
Z = np.array([0.0, 0.0, 1.0])

RECOMMENDED = dict(solver="em", h=0.0025, t_end=20.0)
VIZ = dict(view="front", directors=False, trails={"crank_0": (0.0, LENGTH, 0.0)})  # its top

PUBLISHED_STEP = 0.25  # s
# (x, y) of B0 [m] at t = 0, 0.25, ..., 20 s from the library's A02_solution_data.txt (N = 40)
PUBLISHED = np.array([
    (-1.03833e-13, 1.0), (0.276071, 0.961137), (0.687926, 0.725781), (0.990062, -0.140633),
    (-0.115357, -0.993324), (-0.999592, 0.0285468), (-0.622202, 0.782857),
    (-0.232363, 0.972629), (0.0344663, 0.999406), (0.32264, 0.946522), (0.754378, 0.656441),
    (0.948074, -0.318051), (-0.338518, -0.94096), (-0.982908, 0.184095),
    (-0.558537, 0.829479), (-0.191167, 0.981557), (0.0693421, 0.997593),
    (0.372365, 0.928086), (0.819566, 0.572985), (0.868509, -0.495673), (-0.540191, -0.841543),
    (-0.946395, 0.323013), (-0.49775, 0.867321), (-0.152108, 0.988364), (0.105037, 0.994468),
    (0.425461, 0.904977), (0.880692, 0.473689), (0.748588, -0.663036), (-0.709615, -0.70459),
    (-0.895918, 0.444219), (-0.44027, 0.897865), (-0.114789, 0.99339), (0.141958, 0.989873),
    (0.482019, 0.876161), (0.93402, 0.357222), (0.58908, -0.808075), (-0.840387, -0.541987),
    (-0.836474, 0.548007), (-0.38625, 0.922394), (-0.0788053, 0.99689), (0.180513, 0.983573),
    (0.54195, 0.840411), (0.974817, 0.223008), (0.395157, -0.918614), (-0.930615, -0.365999),
    (-0.772062, 0.635548), (-0.335638, 0.941991), (-0.0437503, 0.999042),
    (0.221098, 0.975252), (0.604906, 0.796297), (0.997426, 0.0717087), (0.176485, -0.984303),
    (-0.98224, -0.18763), (-0.705722, 0.708489), (-0.28825, 0.957555), (-0.00921436, 0.999958),
    (0.264098, 0.964496), (0.670186, 0.742194), (0.995549, -0.094243), (-0.0536801, -0.998558),
    (-0.999878, -0.0156064), (-0.639648, 0.768668), (-0.243808, 0.969824),
    (0.0252118, 0.999682), (0.309869, 0.950779), (0.736607, 0.676321), (0.962823, -0.270132),
    (-0.28032, -0.959906), (-0.989581, 0.143979), (-0.575333, 0.817919),
    (-0.201976, 0.979391), (0.0599378, 0.998202), (0.358724, 0.933444), (0.802373, 0.596823),
    (0.893716, -0.448634), (-0.488964, -0.872304), (-0.957773, 0.287527),
    (-0.513718, 0.857959), (-0.162382, 0.986728), (0.0953729, 0.995442), (0.410902, 0.911679),
])


def bar(name: str, start: tuple[float, float, float],
        end: tuple[float, float, float]) -> mbs.RigidBody:
    """A bar from ``start`` to ``end`` in the x-y plane: d1 along it, d3 = z."""
    start, end = np.asarray(start, float), np.asarray(end, float)
    d1 = (end - start) / np.linalg.norm(end - start)
    slender = MASS * LENGTH**2 / 12.0
    body = mbs.RigidBody(MASS, (MASS * SECTION**2 / 6.0, slender, slender), name=name,
                         shape={"kind": "box", "lx": LENGTH, "ly": SECTION, "lz": SECTION})
    body.set_state(position=0.5 * (start + end),
                   rotation=np.column_stack([d1, np.cross(Z, d1), Z]))
    return body


def build(n: int = N_LOOPS, speed: float = SPEED) -> mbs.System:
    """The mechanism in its initial state.

    Parameters
    ----------
    n : int
        Number of four-bar loops (the library's problem: 40).
    speed : float
        Initial velocity of B0 along +x [m/s]; the vertical bars stand upright.

    Returns
    -------
    mbs.System
        2n + 1 bars and 3n + 1 revolute joints "A0".."An" (ground), "B0".."B(n-1)" (left ends
        of the couplers), "C1".."Cn" (right ends).
    """
    if n < 1:
        raise ValueError(f"need at least one four-bar loop, got n = {n}")
    system = mbs.System(gravity=(0.0, -GRAVITY, 0.0))
    rate = -speed / LENGTH  # about +z: the tops move along +x
    cranks = []
    for i in range(n + 1):
        crank = system.add(bar(f"crank_{i}", (i * LENGTH, 0.0, 0.0), (i * LENGTH, LENGTH, 0.0)))
        crank.set_state(velocity=(0.5 * speed, 0.0, 0.0), angular_velocity=rate * Z)
        system.add(mbs.joints.Revolute(system.ground, crank, point=(i * LENGTH, 0.0, 0.0),
                                       axis=Z, name=f"A{i}"))
        cranks.append(crank)
    for i in range(n):
        left, right = (i * LENGTH, LENGTH, 0.0), ((i + 1) * LENGTH, LENGTH, 0.0)
        coupler = system.add(bar(f"coupler_{i}", left, right))
        coupler.set_state(velocity=(speed, 0.0, 0.0))
        system.add(mbs.joints.Revolute(cranks[i], coupler, point=left, axis=Z, name=f"B{i}"))
        system.add(mbs.joints.Revolute(coupler, cranks[i + 1], point=right, axis=Z,
                                       name=f"C{i + 1}"))
    return system


def loops(solution: mbs.Solution) -> int:
    """N of the solved model (number of couplers)."""
    return sum(body.name.startswith("coupler_") for body in solution.model.bodies)


def point_b0(solution: mbs.Solution) -> np.ndarray:
    """(N+1, 2) x, y of B0, the top of the first vertical bar."""
    crank = solution.body("crank_0")
    return (crank.position + 0.5 * LENGTH * crank.rotation[:, :, 0])[:, :2]


def reduced_b0(times: np.ndarray, n: int = N_LOOPS, speed: float = SPEED) -> np.ndarray:
    """B0 from the one-coordinate motion of the parallelograms.

    Parameters
    ----------
    times : (k,) array
        Increasing output times from 0 [s].
    n, speed : int, float
        As in :func:`build`.

    Returns
    -------
    (k, 2) array
        x, y of B0 = L (sin theta, cos theta), theta from the upward vertical (clockwise),
        from DOP853 at rtol = atol = 1e-12.
    """
    times = np.asarray(times, dtype=float)
    ratio = ((n + 1) / 2.0 + n) * GRAVITY / (((n + 1) / 3.0 + n) * LENGTH)
    solution = solve_ivp(lambda t, s: (s[1], ratio * np.sin(s[0])), (0.0, times[-1]),
                         (0.0, speed / LENGTH), method="DOP853", rtol=1e-12, atol=1e-12,
                         t_eval=times)
    return LENGTH * np.column_stack([np.sin(solution.y[0]), np.cos(solution.y[0])])



def published_errors(solution: mbs.Solution) -> tuple[np.ndarray, np.ndarray]:
    """Published times that are nodes of ``solution`` and max(|dx|, |dy|) of B0 there (only
    for N = 40, the library's problem; empty otherwise)."""
    if loops(solution) != N_LOOPS:
        return np.zeros(0), np.zeros(0)
    times = PUBLISHED_STEP * np.arange(len(PUBLISHED))
    nodes, usable = solution.nodes_at(times)
    errors = np.abs(point_b0(solution)[nodes[usable]] - PUBLISHED[usable]).max(axis=1)
    return times[usable], errors


def singular_passages(solution: mbs.Solution) -> int:
    """How often the bars became horizontal (B0 crossed the x axis)."""
    y = point_b0(solution)[:, 1]
    return int(np.count_nonzero(np.sign(y[1:]) != np.sign(y[:-1])))


def coupler_tilt(solution: mbs.Solution) -> float:
    """Largest |y component| of a coupler's axis: 0 while the parallelograms keep their shape."""
    return max(float(np.max(np.abs(solution.body(body.name).rotation[:, 1, 0])))
               for body in solution.model.bodies if body.name.startswith("coupler_"))


def report(solution: mbs.Solution) -> str:
    """Errors of B0 against the reduced solution and the published values."""
    n = loops(solution)
    reduced = np.max(np.abs(point_b0(solution) - reduced_b0(solution.t, n)))
    lines = [f"N = {n}: {singular_passages(solution)} passages through singular positions; "
             f"largest coupler tilt {coupler_tilt(solution):.1e}",
             f"B0 against the one-coordinate solution: max |error| = {reduced:.2e} m over "
             f"[0, {solution.t[-1]:g}] s"]
    times, errors = published_errors(solution)
    if errors.size:
        level = next((name for name, tol in sorted(TOLERANCES.items(), key=lambda kv: kv[1])
                      if errors.max() <= tol), "none")
        lines.append(f"B0 against the published values at {times.size} times up to "
                     f"{times[-1]:g} s: max |error| = {errors.max():.2e} m (precision level "
                     f"met: {level})")
    return "\n".join(lines)


if __name__ == "__main__":
    from mbs.cli import main

    raise SystemExit(main(["run", __file__, *sys.argv[1:]]))
