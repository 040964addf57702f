"""Andrews' squeezing mechanism: the seven-body planar benchmark of multibody dynamics.

Seven rigid links in the x-y plane, joined by ten hinges (axes along z), driven by a constant
torque on the crank and loaded by a stiff spring; no gravity, released from rest. The crank
reaches ~1100 rad/s within 0.03 s, so the problem needs small steps.

Bodies (numbered as in the references; absolute angle of each link about +z in brackets):

1. crank O-F, hinged to the ground at O = (0, 0) (beta);
2. rod F-E, hinged to the crank at F (beta + Theta);
3. triangle B-E-D, hinged to the ground at B (gamma); the spring pulls D towards C;
4. rod G-E (Phi + delta);
5. link A-G, hinged to the ground at A (delta);
6. rod H-E (Omega + epsilon);
7. link A-H, hinged to the ground at A (epsilon).

Bodies 2, 3, 4 and 6 share the hinge point E, so the joint graph has three closed loops
(O-F-E-B, O-F-E-G-A, O-F-E-H-A): 7 x 3 = 21 planar coordinates minus 10 x 2 hinge equations
leave 1 degree of freedom. Built from 3-D revolute joints each loop has 3 redundant
out-of-plane equations (9 in all), which ``System.compile()`` removes with a warning.

Geometry, in the minimal angles of Hairer & Wanner:

    F = rr (cos beta, sin beta)
    E = F - d (cos(beta + Theta), sin(beta + Theta))
      = B + ss (sin gamma, -cos gamma)
      = G + e (sin(Phi + delta), -cos(Phi + delta)),   G = A + zt (cos delta, sin delta)
      = H + zf (cos(Omega + eps), sin(Omega + eps)),   H = A + u (sin eps, -cos eps)
    D = B + sd (cos gamma, sin gamma) + sc (sin gamma, -cos gamma)

Centres of mass: body 1 at distance ra from O along O-F, body 2 at da from F towards E,
body 4 at ea from E towards G, body 6 at fa from E towards H; bodies 3, 5 and 7 turn about a
fixed hinge and only their distance from it enters the equations of motion (the published mass
matrix contains m3 (sa^2 + sb^2), m5 (ta^2 + tb^2), m7 (ua^2 + ub^2)): their centres are put at
(sa, -sb) from B in the frame (cos gamma, sin gamma), (ta, tb) from A in the frame of A-G, and
(ua, ub) from A in the frame of A-H. The published moments of inertia i1..i7 are about the
centres of mass and the z axis. The out-of-plane moments do not affect the planar motion; they
are those of a flat homogeneous ellipsoid with the published in-plane moment, elongated along
the link (a round disk for the crank), which is also the shape ``mbs.viz`` draws.

Data (SI units) and the reference solution at t = 0.03 s are those of

* E. Hairer, G. Wanner, Solving Ordinary Differential Equations II: Stiff and
  Differential-Algebraic Problems, 2nd ed., Springer 1996, section VII.7 ("Andrews' squeezing
  mechanism"), after the benchmark of W. Schiehlen (ed.), Multibody Systems Handbook,
  Springer 1990;
* F. Mazzia, C. Magherini, Test Set for Initial Value Problem Solvers, release 2.4,
  Department of Mathematics, University of Bari, 2008 (continuing the CWI test set of
  W. M. Lioen, J. J. B. de Swart, 1999), problem "andrews": parameters, the consistent initial
  values and the reference solution at t = 0.03 s.

With ``RECOMMENDED`` (EM, h = 2e-5, 1500 steps, ~2.5 s) the angles at t = 0.03 s agree with the
reference to 3.7e-4 rad (beta, which has turned 15.9 rad); the error is O(h^2) (h = 1e-5:
9.1e-5) and (a(h) - a(2h)) / 3 estimates it to 0.05 %. The energy gained equals the work of
the motor to round-off (EM's discrete energy balance).

    python examples/andrews_squeezer.py
    python examples/andrews_squeezer.py --h 1e-5 --animate andrews.mp4 --speed 0.01
"""

from __future__ import annotations

import sys

import numpy as np

import mbs

# -- published data (Hairer & Wanner VII.7; Mazzia & Magherini, problem "andrews") -----------
m1, m2, m3, m4, m5, m6, m7 = 0.04325, 0.00365, 0.02373, 0.00706, 0.07050, 0.00706, 0.05498
i1, i2, i3, i4, i5, i6, i7 = (2.194e-6, 4.410e-7, 5.255e-6, 5.667e-7, 1.169e-5, 5.667e-7,
                              1.912e-5)
xa, ya = -0.06934, -0.00227  # fixed point A
xb, yb = -0.03635, 0.03273  # fixed point B
xc, yc = 0.014, 0.072  # fixed point C (spring anchor)
c0, l0 = 4530.0, 0.07785  # spring stiffness [N/m] and rest length [m]
d, da = 0.028, 0.0115
e, ea = 0.02, 0.01421
rr, ra = 0.007, 0.00092
ss, sa, sb, sc, sd = 0.035, 0.01874, 0.01043, 0.018, 0.02
ta, tb = 0.02308, 0.00916
u, ua, ub = 0.04, 0.01228, 0.00449
zf, zt, fa = 0.02, 0.04, 0.01421
mom = 0.033  # driving torque on the crank [N m]

#: The seven angles (beta, Theta, gamma, Phi, delta, Omega, epsilon) [rad].
ANGLE_NAMES = ("beta", "Theta", "gamma", "Phi", "delta", "Omega", "epsilon")
#: Consistent initial values (at rest).
INITIAL_ANGLES = (-0.0617138900142764496358948458001, 0.0, 0.455279819163070380255912382449,
                  0.222668390165885884674473185609, 0.487364979543842550225598953530,
                  -0.222668390165885884674473185609, 1.23054744454982119249735015568)
#: Reference solution at t = 0.03 s (Mazzia & Magherini).
REFERENCE_TIME = 0.03
REFERENCE_ANGLES = (0.1581077119629904e2, -0.1575637105984298e2, 0.4082224013073101e-1,
                    -0.5347301163226948, 0.5244099658805304, 0.5347301163226948,
                    0.1048080741042263e1)

MASSES = (m1, m2, m3, m4, m5, m6, m7)
INERTIAS = (i1, i2, i3, i4, i5, i6, i7)
BODY_NAMES = tuple(f"body{k}" for k in range(1, 8))

#: Body axis (0: d1, 1: d2) along the line between each link's hinges (None: the crank, drawn
#: as a disk), see :func:`points`.
LINK_AXES = (None, 0, 1, 1, 0, 0, 1)

RECOMMENDED = dict(solver="em", h=2e-5, t_end=0.03)


def _unit(angle: float) -> np.ndarray:
    return np.array([np.cos(angle), np.sin(angle), 0.0])


def _normal(angle: float) -> np.ndarray:
    """The unit vector (sin angle, -cos angle): _unit(angle) turned by -90 degrees."""
    return np.array([np.sin(angle), -np.cos(angle), 0.0])


def absolute_angles(angles) -> np.ndarray:
    """Rotation of each link about +z from the seven (relative) published angles."""
    beta, theta, gamma, phi, delta, omega, eps = angles
    return np.array([beta, beta + theta, gamma, phi + delta, delta, omega + eps, eps])


def relative_angles(absolute: np.ndarray) -> np.ndarray:
    """Inverse of :func:`absolute_angles` (works on (..., 7) arrays)."""
    a = np.asarray(absolute, dtype=float)
    return np.stack([a[..., 0], a[..., 1] - a[..., 0], a[..., 2], a[..., 3] - a[..., 4],
                     a[..., 4], a[..., 5] - a[..., 6], a[..., 6]], axis=-1)


def points(angles=INITIAL_ANGLES) -> dict[str, np.ndarray]:
    """Hinge points O, F, E, B, G, A, H, the spring points D, C and the seven centres of mass
    ("c1".."c7") for the given angles (world frame, z = 0)."""
    beta, theta, gamma, phi, delta, omega, eps = angles
    o = np.zeros(3)
    a, b, c = np.array([xa, ya, 0.0]), np.array([xb, yb, 0.0]), np.array([xc, yc, 0.0])
    f = rr * _unit(beta)
    e_point = f - d * _unit(beta + theta)
    g = a + zt * _unit(delta)
    h = a + u * _normal(eps)
    d_point = b + sd * _unit(gamma) + sc * _normal(gamma)
    centres = {
        "c1": ra * _unit(beta),
        "c2": f - da * _unit(beta + theta),
        "c3": b + sa * _unit(gamma) + sb * _normal(gamma),
        "c4": g + (e - ea) * _normal(phi + delta),
        "c5": a + ta * _unit(delta) + tb * _unit(delta + 0.5 * np.pi),
        "c6": h + (zf - fa) * _unit(omega + eps),
        "c7": a + ua * _normal(eps) + ub * _unit(eps),
    }
    return dict(O=o, F=f, E=e_point, B=b, G=g, A=a, H=h, D=d_point, C=c, **centres)


# The mechanism moves in the x-y plane and there is no gravity, so the scene's "up" is z:
# "top" looks at the plane of motion ("front" would look along y, edge-on).
VIZ = dict(view="top", directors=False, trails={"body2": points()["E"]})


def loop_residuals(angles=INITIAL_ANGLES) -> np.ndarray:
    """The six closure equations of Hairer & Wanner (zero for consistent angles): E reached
    from O through the crank against E reached through bodies 3, 4-5 and 6-7."""
    beta, theta, gamma, phi, delta, omega, eps = angles
    p = points(angles)
    via_b = p["B"] + ss * _normal(gamma)
    via_g = p["G"] + e * _normal(phi + delta)
    via_h = p["H"] + zf * _unit(omega + eps)
    return np.concatenate([(p["E"] - q)[:2] for q in (via_b, via_g, via_h)])


def planar_inertia(mass: float, inertia_z: float, link_axis: int | None) -> np.ndarray:
    """Principal moments (I1, I2, I3) of a homogeneous ellipsoid of ``mass`` with I3 =
    ``inertia_z``, flat in d3 and elongated along the body axis ``link_axis`` (semi-axes in
    the ratio 1 : 0.3 : 0.15; None: a round disk)."""
    ratios = np.array([1.0, 1.0, 0.15]) if link_axis is None else np.array([0.3, 0.3, 0.15])
    if link_axis is not None:
        ratios[link_axis] = 1.0
    squares = ratios**2 * 5.0 * inertia_z / (mass * (ratios[0] ** 2 + ratios[1] ** 2))
    return np.array([0.2 * mass * (squares[1] + squares[2]),
                     0.2 * mass * (squares[0] + squares[2]), inertia_z])


def _rotation_z(angle: float) -> np.ndarray:
    cos, sin = np.cos(angle), np.sin(angle)
    return np.array([[cos, -sin, 0.0], [sin, cos, 0.0], [0.0, 0.0, 1.0]])


def build(angles=INITIAL_ANGLES, torque: float = mom) -> mbs.System:
    """The mechanism at rest at ``angles`` (the published consistent initial values)."""
    system = mbs.System(gravity=None)
    p = points(angles)
    bodies = []
    for k, (name, mass, inertia, link_axis, angle) in enumerate(
            zip(BODY_NAMES, MASSES, INERTIAS, LINK_AXES, absolute_angles(angles))):
        body = system.add(mbs.RigidBody(mass, planar_inertia(mass, inertia, link_axis),
                                        name=name))
        body.set_state(position=p[f"c{k + 1}"], rotation=_rotation_z(angle))
        bodies.append(body)
    b1, b2, b3, b4, b5, b6, b7 = bodies
    z = (0.0, 0.0, 1.0)
    ground = system.ground
    hinges = (("O", ground, b1), ("F", b1, b2), ("B", ground, b3), ("E23", b2, b3),
              ("A5", ground, b5), ("G", b5, b4), ("E24", b2, b4),
              ("A7", ground, b7), ("H", b7, b6), ("E26", b2, b6))
    joints = {}
    for label, body_a, body_b in hinges:
        joints[label] = system.add(mbs.joints.Revolute(body_a, body_b, point=p[label[0]],
                                                       axis=z, name=f"hinge_{label}"))
    system.add(mbs.forces.Spring(ground, b3, c0, rest_length=l0, point_a=p["C"],
                                 point_b=p["D"], name="spring_CD"))
    system.add(mbs.forces.JointTorque(joints["O"], torque, name="motor"))
    return system


def angles(solution: mbs.Solution) -> np.ndarray:
    """The seven published angles along the solution, (N+1, 7), continuous in time (the crank
    turns several times: the absolute angles are unwrapped from the initial values)."""
    initial = absolute_angles(INITIAL_ANGLES)
    columns = []
    for name, start in zip(BODY_NAMES, initial):
        d1 = solution.body(name).rotation[:, :, 0]
        angle = np.unwrap(np.arctan2(d1[:, 1], d1[:, 0]))
        angle += 2.0 * np.pi * np.round((start - angle[0]) / (2.0 * np.pi))
        columns.append(angle)
    return relative_angles(np.column_stack(columns))


def report(solution: mbs.Solution) -> str:
    values = angles(solution)[-1]
    lines = [f"angles at t = {solution.t[-1]:.6g} s"
             + (" (reference: Mazzia & Magherini at t = 0.03 s)"
                if abs(solution.t[-1] - REFERENCE_TIME) < 1e-12 else "")]
    for name, value, reference in zip(ANGLE_NAMES, values, REFERENCE_ANGLES):
        line = f"  {name:<8} {value: .10f}"
        if abs(solution.t[-1] - REFERENCE_TIME) < 1e-12:
            line += f"   reference {reference: .10f}   difference {value - reference: .2e}"
        lines.append(line)
    return "\n".join(lines)


if __name__ == "__main__":
    from mbs.cli import main

    raise SystemExit(main(["run", __file__, *sys.argv[1:]]))
