"""IFToMM benchmark A04: Bricard's over-constrained mechanism swinging under gravity.

Problem A04 "Bricard mechanism" of the library of computational benchmark problems of the IFToMM
Technical Committee for Multibody Dynamics (M. González, Laboratorio de Ingeniería Mecánica,
Universidade da Coruña, 2005; http://lim.ii.udc.es/mbsbenchmark/, continued at
http://lib.iftomm-multibody.org), described in

    M. González, D. Dopico, U. Lugrís, J. Cuadrado, "A benchmarking system for MBS simulation
    software: problem standardization and performance measurement", Multibody System Dynamics
    16 (2006) 179-190.

Five bars of 1 m and 1 kg ("bar_1" ... "bar_5") and the ground close a loop of six revolute
joints J1 ... J6 at (0, 0, 0), (1, 0, 0), (1, -1, 0), (1, -1, 1), (0, -1, 1), (0, 0, 1) with
axes y, z, x, y, z, x; consecutive axes are perpendicular and every link, the ground one from
J6 to J1 included, is 1 m long (R. Bricard, "Mémoire sur la théorie de l'octaèdre articulé",
Journal de Mathématiques pures et appliquées, 5e série, 3 (1897) 113-148). Grübler's count gives
6 x 5 - 6 x 5 = 0 degrees of freedom, yet the mechanism moves with one: one of the 30 joint
equations is redundant everywhere along the motion. Gravity 9.81 N/kg acts along -y, the
mechanism starts at rest and is simulated for 10 s; the output is P3, the hinge J3 between the
second and third bar, at (1, -1, 0) at t = 0. The library's allowed errors (as stated in its
specifications of A01 and A02) are 1e-1 (low precision) and 1e-3 (high precision). The bars are
homogeneous boxes with a square section of 0.1 m, as in the published ports of the problem (L.
Tagliapietra, M. Vivian, E. Ceseracciu, M. Reggiani, "Multi-Body Systems Benchmark in OpenSim
(MBS-BOS)", 2015, http://rehabenggroup.github.io/MBSbenchmarksInOpenSim/, problem A04, and the
Exudyn test model "bricardMechanism", https://github.com/jgerstmayr/EXUDYN); the section matters
at the high-precision level: a 5 cm section moves P3 by 8e-3 m within 10 s.

``System.compile()`` finds the redundant equation (``model.redundancies``: one among J1 ... J6,
consistent at the initial state) and removes it with a warning; the removed equation keeps
holding along the computed motion (``closure_residuals``: every joint equation stays at
round-off).

Reference solutions:

* the library's numerical time history of P3 (``A04_solution_data.txt``) was not available
  when this example was written; the features of its plot in the MBS-BOS documentation above
  are checked instead (``PUBLISHED_FEATURES``, read to 0.03 m): P3 swings between
  (1, -1, 0) at t = 0, 5, 10 s and (-1, -1, 0) at t = 2.5, 7.5 s, passing (0, -0.87, -0.5) half
  way;
* an independent integration (``reference_p3``): the Newton-Euler equations of the five bars in
  absolute coordinates (centre, rotation matrix, velocity, angular velocity), the joint
  reactions from all 30 joint equations at acceleration level solved in the least-squares sense
  (their Gram matrix has rank 29), ``scipy.integrate.solve_ivp`` (DOP853,
  rtol = atol = 1e-12; with 1e-10 the result moves by 1.4e-8 m).

With ``RECOMMENDED`` (energy-momentum scheme, h = 1 ms, 10 s) P3 deviates from the independent
integration by 3.4e-6 m at most (order 2; 1.3e-5 m at h = 2 ms), energy is conserved to
4e-14 relative and all joint equations hold to 1e-13.

    python examples/bricard.py
    python examples/bricard.py --animate bricard.mp4
"""

from __future__ import annotations

import sys

import numpy as np
from scipy.integrate import solve_ivp

import mbs

LENGTH = 1.0  # m, every bar
MASS = 1.0  # kg, every bar
SECTION = 0.1  # m, side of the square cross-section
GRAVITY = 9.81  # N/kg along -y
DURATION = 10.0  # s, the library's simulation time
TOLERANCES = {"low precision": 1e-1, "high precision": 1e-3}  # m, as for A01 and A02
X, Y, Z = np.eye(3)
JOINT_POINTS = LENGTH * np.array([(0.0, 0.0, 0.0), (1.0, 0.0, 0.0), (1.0, -1.0, 0.0),
                                  (1.0, -1.0, 1.0), (0.0, -1.0, 1.0), (0.0, 0.0, 1.0)])
JOINT_AXES = np.array([Y, Z, X, Y, Z, X])
BARS = tuple(f"bar_{k}" for k in range(1, 6))

RECOMMENDED = dict(solver="em", h=0.001, t_end=10.0)
VIZ = dict(view="iso", directors=False, trails={"bar_2": JOINT_POINTS[2]})  # P3

# P3 (x, y, z) [m] at t [s], read from the plot of the library's reference solution in the
# MBS-BOS documentation (to 0.03 m)
PUBLISHED_FEATURES = {0.0: (1.0, -1.0, 0.0), 1.25: (0.0, -0.87, -0.5), 2.5: (-1.0, -1.0, 0.0),
                      3.75: (0.0, -0.87, -0.5), 5.0: (1.0, -1.0, 0.0),
                      6.25: (0.0, -0.87, -0.5), 7.5: (-1.0, -1.0, 0.0),
                      8.75: (0.0, -0.87, -0.5), 10.0: (1.0, -1.0, 0.0)}
FEATURE_TOLERANCE = 0.03  # m


def bar_frames() -> tuple[np.ndarray, np.ndarray]:
    """(5, 3) centres and (5, 3, 3) rotations (columns d1 along the bar from J_k to J_k+1,
    d2, d3 across it) of the bars at t = 0."""
    centres = 0.5 * (JOINT_POINTS[:-1] + JOINT_POINTS[1:])
    rotations = []
    for start, end in zip(JOINT_POINTS[:-1], JOINT_POINTS[1:]):
        d1 = (end - start) / np.linalg.norm(end - start)
        d2 = np.cross(d1, Z) if abs(d1 @ Z) < 0.9 else np.cross(d1, X)
        d2 /= np.linalg.norm(d2)
        rotations.append(np.column_stack([d1, d2, np.cross(d1, d2)]))
    return centres, np.array(rotations)


def bar_inertia(section: float = SECTION) -> np.ndarray:
    """Principal moments (along the bar, across, across) of a homogeneous square bar."""
    return MASS / 12.0 * np.array([2.0 * section**2, LENGTH**2 + section**2,
                                   LENGTH**2 + section**2])


def build(section: float = SECTION) -> mbs.System:
    """The mechanism at rest in the position of the benchmark's figure.

    Parameters
    ----------
    section : float
        Side of the bars' square cross-section [m].

    Returns
    -------
    mbs.System
        Bars "bar_1".."bar_5" and revolute joints "J1".."J6" (J1 and J6 to the ground).
    """
    system = mbs.System(gravity=(0.0, -GRAVITY, 0.0))
    centres, rotations = bar_frames()
    links = [system.ground]
    for name, centre, rotation in zip(BARS, centres, rotations):
        body = mbs.RigidBody(MASS, bar_inertia(section), name=name,
                             shape={"kind": "box", "lx": LENGTH, "ly": section, "lz": section})
        body.set_state(position=centre, rotation=rotation)
        links.append(system.add(body))
    links.append(system.ground)
    for k, (point, axis) in enumerate(zip(JOINT_POINTS, JOINT_AXES)):
        system.add(mbs.joints.Revolute(links[k], links[k + 1], point=point, axis=axis,
                                       name=f"J{k + 1}"))
    return system


def point_p3(solution: mbs.Solution) -> np.ndarray:
    """(N+1, 3) P3, the end of bar 2 at joint J3."""
    bar = solution.body("bar_2")
    return bar.position + 0.5 * LENGTH * bar.rotation[:, :, 0]


def closure_residuals(solution: mbs.Solution) -> np.ndarray:
    """(N+1,) largest violation of the 30 joint equations (all six revolute joints, including
    the equation removed as redundant) computed from the bodies' motion: the gap at each joint
    point [m] and the two products of the joint axis with directions normal to it in the other
    link."""
    centres, rotations = bar_frames()
    frames = {name: solution.body(name) for name in BARS}
    worst = np.zeros(solution.t.size)

    def pose(k: int) -> tuple[np.ndarray, np.ndarray]:
        # position (N+1, 3) and rotation (N+1, 3, 3) of link k (the ground for -1 and 5)
        if k in (-1, 5):
            return np.zeros((1, 3)), np.eye(3)[None]
        return frames[BARS[k]].position, frames[BARS[k]].rotation

    for j, (point, axis) in enumerate(zip(JOINT_POINTS, JOINT_AXES)):
        a, b = j - 1, j
        xa, ra = pose(a)
        xb, rb = pose(b)
        local_a = point if a == -1 else rotations[a].T @ (point - centres[a])
        local_b = point if b == 5 else rotations[b].T @ (point - centres[b])
        gap = (xa + ra @ local_a) - (xb + rb @ local_b)
        axis_a = ra @ (axis if a == -1 else rotations[a].T @ axis)
        normals = np.linalg.svd(axis[None])[2][1:]  # two unit vectors normal to the axis
        products = [np.sum(axis_a * (rb @ (normal if b == 5 else rotations[b].T @ normal)),
                           axis=-1) * np.ones(solution.t.size) for normal in normals]
        worst = np.maximum(worst, np.max(np.abs(np.column_stack([gap, *products])), axis=1))
    return worst


def reference_p3(times: np.ndarray, section: float = SECTION, rtol: float = 1e-12) -> dict:
    """Independent solution: Newton-Euler equations of the five bars, DOP853.

    Parameters
    ----------
    times : (k,) array
        Increasing output times from 0 [s].
    section : float
        Side of the bars' square cross-section [m].
    rtol : float
        Relative and absolute tolerance of ``solve_ivp``.

    Returns
    -------
    dict
        "p3" (k, 3) positions of P3, "energy" (k,) total energy [J] and "closure" (k,) the
        largest violation of the 30 joint equations.
    """
    times = np.asarray(times, dtype=float)
    centres, rotations = bar_frames()
    inertia = np.diag(bar_inertia(section))
    inverse_inertia = np.linalg.inv(inertia)
    gravity = np.array([0.0, -GRAVITY, 0.0])
    # joint j joins link a = j - 1 and link b = j; index 5 is the ground (identity pose)
    link_a, link_b = np.array([5, 0, 1, 2, 3, 4]), np.arange(6)
    all_centres = np.vstack([centres, np.zeros(3)])
    all_rotations = np.concatenate([rotations, np.eye(3)[None]])
    local_a = np.einsum("jki,jk->ji", all_rotations[link_a], JOINT_POINTS - all_centres[link_a])
    local_b = np.einsum("jki,jk->ji", all_rotations[link_b], JOINT_POINTS - all_centres[link_b])
    axis_a = np.einsum("jki,jk->ji", all_rotations[link_a], JOINT_AXES)
    normals = np.array([np.linalg.svd(axis[None])[2][1:] for axis in JOINT_AXES])  # (6, 2, 3)
    normals_b = np.einsum("jki,jmk->jmi", all_rotations[link_b], normals)
    joints, bodies = np.arange(6), np.arange(5)

    def skew(v: np.ndarray) -> np.ndarray:
        out = np.zeros(v.shape[:-1] + (3, 3))
        out[..., 0, 1], out[..., 0, 2], out[..., 1, 2] = -v[..., 2], v[..., 1], -v[..., 0]
        out[..., 1, 0], out[..., 2, 0], out[..., 2, 1] = v[..., 2], -v[..., 1], v[..., 0]
        return out

    def unpack(y: np.ndarray) -> tuple[np.ndarray, ...]:
        state = y.reshape(5, 18)
        rot = np.concatenate([state[:, 3:12].reshape(5, 3, 3), np.eye(3)[None]])
        omega = np.vstack([state[:, 15:18], np.zeros(3)])
        pos = np.vstack([state[:, :3], np.zeros(3)])
        return state, pos, rot, omega

    def joint_terms(pos: np.ndarray, rot: np.ndarray) -> tuple[np.ndarray, ...]:
        r_a = np.einsum("jik,jk->ji", rot[link_a], local_a)
        r_b = np.einsum("jik,jk->ji", rot[link_b], local_b)
        u = np.einsum("jik,jk->ji", rot[link_a], axis_a)
        n = np.einsum("jik,jmk->jmi", rot[link_b], normals_b)
        gap = pos[link_a] + r_a - pos[link_b] - r_b
        return r_a, r_b, u, n, gap, np.einsum("ji,jmi->jm", u, n)

    def rhs(t: float, y: np.ndarray) -> np.ndarray:
        state, pos, rot, omega = unpack(y)
        r_a, r_b, u, n, _, _ = joint_terms(pos, rot)
        w_a, w_b = omega[link_a], omega[link_b]
        world_inertia = rot[:5] @ inertia @ rot[:5].transpose(0, 2, 1)
        forces = np.zeros((5, 6))
        forces[:, :3] = MASS * gravity
        forces[:, 3:] = -np.cross(omega[:5], np.einsum("kij,kj->ki", world_inertia, omega[:5]))
        # velocity Jacobian G (joint, row, link, column) and the terms gamma with G a = -gamma
        jac = np.zeros((6, 5, 6, 6))
        jac[joints, :3, link_a, :3] = np.eye(3)
        jac[joints, :3, link_a, 3:] = -skew(r_a)
        jac[joints, :3, link_b, :3] = -np.eye(3)
        jac[joints, :3, link_b, 3:] = skew(r_b)
        cross = np.cross(u[:, None, :], n)  # d/dt (u . n) = (w_a - w_b) . (u x n)
        jac[joints[:, None], np.array([[3, 4]]), link_a[:, None], 3:] = cross
        jac[joints[:, None], np.array([[3, 4]]), link_b[:, None], 3:] = -cross
        gamma = np.zeros((6, 5))
        gamma[:, :3] = (np.cross(w_a, np.cross(w_a, r_a)) - np.cross(w_b, np.cross(w_b, r_b)))
        rate = (np.cross(np.cross(w_a, u)[:, None, :], n)
                + np.cross(u[:, None, :], np.cross(w_b[:, None, :], n)))
        gamma[:, 3:] = np.einsum("ji,jmi->jm", w_a - w_b, rate)
        g_matrix = jac[:, :, :5, :].reshape(30, 30)
        inverse_mass = np.zeros((5, 6, 5, 6))
        inverse_mass[bodies, :3, bodies, :3] = np.eye(3) / MASS
        inverse_mass[bodies, 3:, bodies, 3:] = (rot[:5] @ inverse_inertia
                                                @ rot[:5].transpose(0, 2, 1))
        inverse_mass = inverse_mass.reshape(30, 30)
        g_m = g_matrix @ inverse_mass
        multipliers = np.linalg.lstsq(g_m @ g_matrix.T,
                                      -gamma.ravel() - g_m @ forces.ravel(), rcond=1e-10)[0]
        acceleration = (inverse_mass @ (forces.ravel() + g_matrix.T @ multipliers)).reshape(5, 6)
        derivative = np.empty((5, 18))
        derivative[:, :3] = state[:, 12:15]
        derivative[:, 3:12] = (skew(state[:, 15:18]) @ rot[:5]).reshape(5, 9)
        derivative[:, 12:15] = acceleration[:, :3]
        derivative[:, 15:18] = acceleration[:, 3:]
        return derivative.ravel()

    start = np.zeros((5, 18))
    start[:, :3], start[:, 3:12] = centres, rotations.reshape(5, 9)
    solution = solve_ivp(rhs, (0.0, times[-1]), start.ravel(), method="DOP853", rtol=rtol,
                         atol=rtol, t_eval=times)
    p3, energy, closure = [], [], []
    for y in solution.y.T:
        state, pos, rot, omega = unpack(y)
        _, r_b, _, _, gap, products = joint_terms(pos, rot)
        p3.append(pos[2] + r_b[2])
        kinetic = 0.5 * MASS * np.sum(state[:, 12:15] ** 2) + 0.5 * np.einsum(
            "ki,kij,kj->", omega[:5], rot[:5] @ inertia @ rot[:5].transpose(0, 2, 1),
            omega[:5])
        energy.append(kinetic + MASS * GRAVITY * np.sum(pos[:5, 1]))
        closure.append(max(np.max(np.abs(gap)), np.max(np.abs(products))))
    return {"p3": np.array(p3), "energy": np.array(energy), "closure": np.array(closure)}



def feature_errors(solution: mbs.Solution) -> tuple[np.ndarray, np.ndarray]:
    """Times of ``PUBLISHED_FEATURES`` that are nodes of ``solution`` and max |error| of P3."""
    times = np.array(list(PUBLISHED_FEATURES))
    values = np.array(list(PUBLISHED_FEATURES.values()))
    nodes, usable = solution.nodes_at(times)
    errors = np.abs(point_p3(solution)[nodes[usable]] - values[usable]).max(axis=1)
    return times[usable], errors


def report(solution: mbs.Solution, reference_step: float = 0.05) -> str:
    """P3 against the independent integration (every ``reference_step`` s) and the plot
    features, the joint closure including the removed equation."""
    times = np.arange(0.0, solution.t[-1] + 1e-9, reference_step)
    nodes, usable = solution.nodes_at(times)
    times, nodes = times[usable], nodes[usable]
    lines = []
    if times.size > 1:
        reference = reference_p3(times)
        error = np.max(np.abs(point_p3(solution)[nodes] - reference["p3"]))
        drift = np.max(np.abs(reference["energy"] - reference["energy"][0]))
        lines.append(f"P3 against the independent integration at {times.size} times: max "
                     f"|error| = {error:.2e} m (reference: energy drift {drift:.1e} J, joint "
                     f"closure {reference['closure'].max():.1e})")
    feature_times, errors = feature_errors(solution)
    lines.append(f"P3 against the {feature_times.size} features of the published plot: max "
                 f"|error| = {errors.max():.3f} m (read to {FEATURE_TOLERANCE} m)")
    redundant = ", ".join(f"{red.count} among {'-'.join(red.joints)} (removed "
                          f"{', '.join(f'{j}[{k}]' for j, k in red.removed)}, "
                          f"{'consistent' if red.consistent else 'INCONSISTENT'})"
                          for red in solution.model.redundancies) or "none"
    lines.append(f"redundant equations: {redundant}; all 30 joint equations along the motion: "
                 f"max |residual| = {closure_residuals(solution).max():.1e}")
    return "\n".join(lines)


if __name__ == "__main__":
    from mbs.cli import main

    raise SystemExit(main(["run", __file__, *sys.argv[1:]]))
