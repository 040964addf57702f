"""Builders of the test mechanisms and small numerical helpers shared by the tests.

Every builder returns an uncompiled :class:`mbs.System` whose bodies are set at a consistent
initial pose; the truths the tests compare against (degrees of freedom, redundancy counts) are
derived by hand in each docstring.
"""

from __future__ import annotations

import numpy as np

import mbs
from mbs.rotations import skew

Z = np.array([0.0, 0.0, 1.0])


# -- numerical helpers ------------------------------------------------------------------------
def finite_difference(function, q: np.ndarray, step: float = 1e-6) -> np.ndarray:
    """Central differences of a scalar or vector function: shape (len(f), len(q))."""
    q = np.asarray(q, dtype=float)
    columns = []
    for i in range(q.size):
        e = np.zeros(q.size)
        e[i] = step
        plus = np.atleast_1d(np.asarray(function(q + e), dtype=float))
        minus = np.atleast_1d(np.asarray(function(q - e), dtype=float))
        columns.append((plus - minus) / (2.0 * step))
    return np.column_stack(columns)


def second_difference(function, q: np.ndarray, step: float = 1e-4) -> np.ndarray:
    """Hessian of a scalar function by central second differences of the function itself."""
    q = np.asarray(q, dtype=float)
    n = q.size
    out = np.zeros((n, n))
    for i in range(n):
        ei = np.zeros(n)
        ei[i] = step
        for j in range(i, n):
            ej = np.zeros(n)
            ej[j] = step
            out[i, j] = out[j, i] = (function(q + ei + ej) - function(q + ei - ej)
                                     - function(q - ei + ej) + function(q - ei - ej)
                                     ) / (4.0 * step * step)
    return out


def relative_error(value, reference) -> float:
    """max |value - reference| / max(max |reference|, tiny)."""
    value = np.asarray(value.toarray() if hasattr(value, "toarray") else value, dtype=float)
    reference = np.asarray(reference, dtype=float)
    scale = max(float(np.max(np.abs(reference))) if reference.size else 0.0, 1e-300)
    return float(np.max(np.abs(value - reference))) / scale if value.size else 0.0


def rotation_generator(model: mbs.Model, q: np.ndarray, axis, center=(0.0, 0.0, 0.0)
                       ) -> np.ndarray:
    """xi q: skew(axis) applied to every 3-block of q; point blocks (centres of mass and
    particles) are rotated about ``center``, directors are free vectors."""
    k = skew(np.asarray(axis, dtype=float))
    blocks = np.asarray(q, dtype=float).reshape(-1, 3).copy()
    blocks[model.point_blocks] -= np.asarray(center, dtype=float)
    return (blocks @ k.T).ravel()


def random_rotation(rng: np.random.Generator) -> np.ndarray:
    """A uniformly random proper rotation (QR of a Gaussian matrix, sign-fixed)."""
    qr, r = np.linalg.qr(rng.standard_normal((3, 3)))
    qr = qr @ np.diag(np.sign(np.diag(r)))
    if np.linalg.det(qr) < 0.0:
        qr[:, 0] = -qr[:, 0]
    return qr


def random_unit(rng: np.random.Generator) -> np.ndarray:
    v = rng.standard_normal(3)
    return v / np.linalg.norm(v)


def random_inertia(rng: np.random.Generator, principal: bool = False) -> np.ndarray:
    """Inertia of a random box-like mass distribution (always physical): principal moments
    (3,) or a rotated non-principal 3x3 tensor."""
    lengths = rng.uniform(0.3, 1.5, 3)
    mass = 1.0
    moments = mass / 12.0 * np.array([lengths[1] ** 2 + lengths[2] ** 2,
                                      lengths[0] ** 2 + lengths[2] ** 2,
                                      lengths[0] ** 2 + lengths[1] ** 2])
    if principal:
        return moments
    rotation = random_rotation(rng)
    return rotation @ np.diag(moments) @ rotation.T


def link(name: str, start, end, mass: float = 1.0, thickness: float = 0.05
         ) -> mbs.RigidBody:
    """A slender box from ``start`` to ``end`` with d1 along the link (not yet added)."""
    start, end = np.asarray(start, dtype=float), np.asarray(end, dtype=float)
    axis = end - start
    length = float(np.linalg.norm(axis))
    d1 = axis / length
    helper = np.eye(3)[int(np.argmin(np.abs(d1)))]
    d2 = np.cross(d1, helper)
    d2 /= np.linalg.norm(d2)
    d3 = np.cross(d1, d2)
    body = mbs.RigidBody.from_shape("box", mass=mass, lx=length, ly=thickness, lz=thickness,
                                    name=name)
    body.set_state(position=0.5 * (start + end), rotation=np.column_stack([d1, d2, d3]))
    return body


# -- mechanisms ---------------------------------------------------------------------------------
def double_pendulum() -> mbs.System:
    """Two links in the x-z plane hinged about y: 2 x 6 - 2 x 5 = 2 degrees of freedom."""
    system = mbs.System(gravity=(0.0, 0.0, -9.81))
    a = system.add(link("link1", (0, 0, 0), (1, 0, 0)))
    b = system.add(link("link2", (1, 0, 0), (2, 0, -0.5)))
    system.add(mbs.joints.Revolute(system.ground, a, point=(0, 0, 0), axis=(0, 1, 0),
                                   name="hinge1"))
    system.add(mbs.joints.Revolute(a, b, point=(1, 0, 0), axis=(0, 1, 0), name="hinge2"))
    return system


# Planar four-bar in the x-y plane: ground pivots O and C, crank O-A, coupler A-B, rocker C-B.
_O = np.array([0.0, 0.0, 0.0])
_A = np.array([0.6, 0.8, 0.0])
_B = np.array([2.6, 1.3, 0.0])
_C = np.array([3.0, 0.0, 0.0])


def planar_four_bar(coupler_rocker_joint: str = "revolute") -> mbs.System:
    """Four-bar linkage with all hinge axes along z.

    With four revolute joints: 3 x 6 = 18 coordinates of freedom, 20 equations, mobility 1, so
    rank G = 17 and 3 equations are redundant (the out-of-plane ones).  With the coupler-rocker
    hinge replaced by a spherical joint (``"spherical"``): 18 equations, mobility still 1 (the
    coupler stays planar through its revolute joint with the crank), so exactly 1 redundant
    equation: the 3-D four-bar with one redundant constraint.
    """
    system = mbs.System(gravity=(0.0, -9.81, 0.0))
    crank = system.add(link("crank", _O, _A))
    coupler = system.add(link("coupler", _A, _B))
    rocker = system.add(link("rocker", _C, _B))
    system.add(mbs.joints.Revolute(system.ground, crank, point=_O, axis=Z, name="pivot_O"))
    system.add(mbs.joints.Revolute(crank, coupler, point=_A, axis=Z, name="pin_A"))
    if coupler_rocker_joint == "revolute":
        system.add(mbs.joints.Revolute(coupler, rocker, point=_B, axis=Z, name="pin_B"))
    else:
        system.add(mbs.joints.Spherical(coupler, rocker, point=_B, name="ball_B"))
    system.add(mbs.joints.Revolute(rocker, system.ground, point=_C, axis=Z, name="pivot_C"))
    return system


def bennett_linkage(crank_angle: float = 1.0) -> mbs.System:
    """Bennett's spatial four-bar: four revolute joints whose axes are twisted by 40 and 70
    degrees between links of lengths 1 and sin 70 / sin 40 (Bennett's condition), so that
    the loop moves with one degree of freedom where Grubler's count gives -2: three of its
    20 joint equations are redundant at every pose. Links of masses 1, 1.3, 1.6 hang under
    gravity, at rest, at the pose where the first joint is at ``crank_angle``.

    The pose follows from the Denavit-Hartenberg closure of the loop (frame k turned by
    joint angle theta_k about z, then moved along x by the link length and turned about x
    by its twist), solved for the other three angles."""
    from scipy.optimize import least_squares

    lengths = [1.0, np.sin(np.radians(70.0)) / np.sin(np.radians(40.0))] * 2
    twists = [np.radians(40.0), np.radians(70.0)] * 2

    def transform(rotation: np.ndarray, offset=(0.0, 0.0, 0.0)) -> np.ndarray:
        out = np.eye(4)
        out[:3, :3], out[:3, 3] = rotation, offset
        return out

    def frames(angles) -> list[np.ndarray]:
        out, current = [], np.eye(4)
        for angle, length, twist in zip(angles, lengths, twists):
            current = current @ transform(mbs.rotation_about_z(angle))
            out.append(current)
            current = (current @ transform(np.eye(3), (length, 0.0, 0.0))
                       @ transform(mbs.rotation_about_x(twist)))
        return out + [current]

    closure = least_squares(
        lambda rest: (frames([crank_angle, *rest])[-1] - np.eye(4))[:3].ravel(),
        [2.0, 2.0, 2.0], xtol=1e-15, ftol=1e-15, gtol=1e-15)
    poses = frames([crank_angle, *closure.x])
    system = mbs.System(gravity=(0.0, 0.0, -9.81))
    links = []
    for k in range(3):
        rotation, origin = poses[k][:3, :3], poses[k][:3, 3]
        body = system.add(mbs.RigidBody.from_shape(
            "box", mass=1.0 + 0.3 * k, lx=lengths[k], ly=0.05, lz=0.05, name=f"link{k + 1}"))
        body.set_state(position=origin + 0.5 * lengths[k] * rotation[:, 0], rotation=rotation)
        links.append(body)
    ends = [system.ground, *links, system.ground]
    for k in range(4):
        system.add(mbs.joints.Revolute(ends[k], ends[k + 1], point=poses[k][:3, 3],
                                       axis=poses[k][:3, 2], name=f"hinge{k + 1}"))
    return system


def stacked_four_bars(count: int) -> mbs.System:
    """``count`` independent planar four-bars stacked along z (3 redundant equations each);
    20 of them exceed the size above which the model uses sparse linear algebra."""
    system = mbs.System(gravity=(0.0, -9.81, 0.0))
    for k in range(count):
        o, a, b, c = (p + (0.0, 0.0, float(k)) for p in (_O, _A, _B, _C))
        crank = system.add(link(f"crank{k}", o, a))
        coupler = system.add(link(f"coupler{k}", a, b))
        rocker = system.add(link(f"rocker{k}", c, b))
        system.add(mbs.joints.Revolute(system.ground, crank, point=o, axis=Z))
        system.add(mbs.joints.Revolute(crank, coupler, point=a, axis=Z))
        system.add(mbs.joints.Revolute(coupler, rocker, point=b, axis=Z))
        system.add(mbs.joints.Revolute(rocker, system.ground, point=c, axis=Z))
    return system


def parallelogram_chain(count: int, crank_rate: float = 1.0, length: float = 1.0
                        ) -> mbs.System:
    """``count`` parallelogram four-bars in a row in the x-y plane (gravity -y): ``count`` + 1
    upright cranks hinged to the ground about z at x = 0, L, ..., count L, and ``count``
    horizontal couplers joining the tips of neighbouring cranks (links of :func:`link`).

    All cranks turn at ``crank_rate`` and the couplers translate with the crank tips. One
    degree of freedom: each loop adds 6 coordinates of freedom and 10 equations in 3D, of
    which 3 planar ones are redundant (6 (2 count + 1) - 5 (3 count + 1) + 3 count = 1).
    When the cranks are horizontal every bar lies on one line: a singular configuration
    where the constraint Jacobian loses further rank (the parallelogram can fold).
    """
    system = mbs.System(gravity=(0.0, -9.81, 0.0))
    spin = np.array([0.0, 0.0, crank_rate])
    up = np.array([0.0, length, 0.0])
    cranks = []
    for i in range(count + 1):
        base = np.array([i * length, 0.0, 0.0])
        crank = system.add(link(f"crank{i}", base, base + up))
        crank.set_state(velocity=np.cross(spin, 0.5 * up), angular_velocity=spin)
        system.add(mbs.joints.Revolute(system.ground, crank, point=base, axis=Z,
                                       name=f"pivot{i}"))
        cranks.append(crank)
    for i in range(count):
        start = np.array([i * length, length, 0.0])
        coupler = system.add(link(f"coupler{i}", start, start + (length, 0.0, 0.0)))
        coupler.set_state(velocity=np.cross(spin, up))
        system.add(mbs.joints.Revolute(cranks[i], coupler, point=start, axis=Z,
                                       name=f"left{i}"))
        system.add(mbs.joints.Revolute(coupler, cranks[i + 1],
                                       point=start + (length, 0.0, 0.0), axis=Z,
                                       name=f"right{i}"))
    return system


def parallelogram_chain_angle(solution, crank: int) -> np.ndarray:
    """Angle of crank ``crank`` of :func:`parallelogram_chain` from the +x axis, unwrapped."""
    along = solution.body(f"crank{crank}").rotation[:, :, 0]
    return np.unwrap(np.arctan2(along[:, 1], along[:, 0]))


def spring_link() -> mbs.System:
    """A rigid link on a revolute joint, a point mass on a Hookean spring from it, uniform and
    central gravity: quadratic constraints and potentials that are not polynomial in q."""
    system = mbs.System(gravity=(0.0, 0.0, -9.81))
    body = system.add(mbs.RigidBody(mass=2.0, inertia=(0.3, 0.4, 0.5), name="link"))
    body.set_state(position=(0.0, 0.0, -0.5), rotation=mbs.rotation_about_y(0.3),
                   angular_velocity=(0.0, 1.0, 0.5))
    system.add(mbs.joints.Revolute(system.ground, body, point=(0, 0, 0), axis=(0, 1, 0)))
    bob = system.add(mbs.PointMass(mass=0.5, name="bob"))
    bob.set_state(position=(0.5, 0.0, -1.0))
    system.add(mbs.forces.Spring(body, bob, stiffness=30.0, rest_length=0.3))
    system.add(mbs.forces.CentralGravity(5.0, center=(0.0, 0.0, 3.0), bodies=[bob, body]))
    return system


def slider_crank() -> mbs.System:
    """Crank (hinge to ground), connecting rod, slider (prismatic along x): planar, 1 dof.

    18 coordinates of freedom, 4 x 5 = 20 equations, mobility 1: 3 redundant equations.
    """
    system = mbs.System(gravity=(0.0, -9.81, 0.0))
    crank_tip = np.array([0.3, 0.4, 0.0])
    slider_pin = np.array([1.5, 0.0, 0.0])
    crank = system.add(link("crank", _O, crank_tip))
    rod = system.add(link("rod", crank_tip, slider_pin))
    slider = system.add(mbs.RigidBody.from_shape("box", mass=2.0, lx=0.3, ly=0.2, lz=0.2,
                                                 name="slider"))
    slider.set_state(position=slider_pin)
    system.add(mbs.joints.Revolute(system.ground, crank, point=_O, axis=Z, name="crank_pivot"))
    system.add(mbs.joints.Revolute(crank, rod, point=crank_tip, axis=Z, name="crank_pin"))
    system.add(mbs.joints.Revolute(rod, slider, point=slider_pin, axis=Z, name="wrist_pin"))
    system.add(mbs.joints.Prismatic(system.ground, slider, point=slider_pin, axis=(1, 0, 0),
                                    name="guide"))
    return system


# Spatial four-bars: crank hinged about z at the origin, rocker hinged about x at R.
_SA = np.array([0.0, 1.0, 0.0])  # crank tip
_SR = np.array([2.0, 0.0, 0.5])  # rocker pivot
_SB = np.array([2.0, 0.8, 1.1])  # rocker tip


def spatial_four_bar(coupler_end: str = "universal") -> mbs.System:
    """RSUR (``"universal"``) or RSSR (``"spherical"``) spatial four-bar with skew hinges.

    RSUR: 18 - (5 + 3 + 4 + 5) = 1 degree of freedom, no redundancy (the universal joint's
    cross axis on the coupler is perpendicular to the coupler line, so it blocks the spin).
    RSSR: 18 - (5 + 3 + 3 + 5) = 2 = 1 + the idle spin of the coupler about the line through
    its two ball centres; no redundancy.
    """
    system = mbs.System(gravity=(0.0, 0.0, -9.81))
    crank = system.add(link("crank", _O, _SA))
    coupler = system.add(link("coupler", _SA, _SB))
    rocker = system.add(link("rocker", _SR, _SB))
    system.add(mbs.joints.Revolute(system.ground, crank, point=_O, axis=Z, name="crank_hinge"))
    system.add(mbs.joints.Spherical(crank, coupler, point=_SA, name="ball_A"))
    if coupler_end == "universal":
        line = (_SB - _SA) / np.linalg.norm(_SB - _SA)
        axis_a = np.cross(line, (1.0, 0.0, 0.0))
        axis_b = np.cross(axis_a, line)
        system.add(mbs.joints.Universal(coupler, rocker, point=_SB, axis_a=axis_a,
                                        axis_b=axis_b, name="cardan_B"))
    else:
        system.add(mbs.joints.Spherical(coupler, rocker, point=_SB, name="ball_B"))
    system.add(mbs.joints.Revolute(rocker, system.ground, point=_SR, axis=(1, 0, 0),
                                   name="rocker_hinge"))
    return system


def spherical_chain(n_links: int, link_length: float = 0.5) -> mbs.System:
    """A chain of ``n_links`` rigid rods along x, joined by spherical joints, first to ground."""
    system = mbs.System(gravity=(0.0, 0.0, -9.81))
    previous = system.ground
    for k in range(n_links):
        body = system.add(mbs.RigidBody(1.0, (0.02, 0.021, 0.005), name=f"rod{k}"))
        body.set_state(position=((k + 0.5) * link_length, 0.0, 0.0),
                       rotation=mbs.rotation_about_y(np.pi / 2))
        system.add(mbs.joints.Spherical(previous, body, point=(k * link_length, 0.0, 0.0),
                                        name=f"ball{k}"))
        previous = body
    return system


# -- random trees (used by the hypothesis tests) -----------------------------------------------
JOINT_EQUATIONS = {"Spherical": 3, "Revolute": 5, "Universal": 4, "Cylindrical": 4,
                   "Prismatic": 5, "Rigid": 6, "Distance": 1, "None": 0}
RIGID_ONLY = ("Revolute", "Universal", "Cylindrical", "Prismatic", "Rigid")


def random_tree(kinds: list[str], parents: list[int], joints: list[str], seed: int,
                distance_stretch: float = 0.0, velocity_scale: float = 1.0
                ) -> tuple[mbs.System, int]:
    """A random tree of bodies and its Grübler count.

    Parameters
    ----------
    kinds : list of {"rigid", "point"}
    parents : list of int
        ``parents[k]`` in [-1, k - 1]: -1 is the ground, otherwise an earlier body.
    joints : list of str
        Joint type between body k and its parent; joints needing axes fall back to
        "Spherical" when a point mass is involved; "None" leaves the body free.
    seed : int
        Seed of the random geometry, masses, poses and (inconsistent) velocities.
    distance_stretch : float
        Distance joints get ``length = (1 + stretch) * initial distance``, so the initial
        position is inconsistent and projection has work to do.

    Returns
    -------
    system, grubler
        ``grubler`` = 6 per rigid body + 3 per point mass - equations of every joint.
    """
    rng = np.random.default_rng(seed)
    system = mbs.System(gravity=tuple(rng.normal(0.0, 3.0, 3)))
    bodies: list = []
    grubler = 0
    for k, kind in enumerate(kinds):
        parent = system.ground if parents[k] < 0 else bodies[parents[k]]
        parent_point = np.zeros(3) if parent is system.ground else parent.position
        joint_type = joints[k]
        is_point = kind == "point"
        if (is_point or isinstance(parent, mbs.PointMass)) and joint_type in RIGID_ONLY:
            joint_type = "Spherical"
        # joint location: at a point mass if one is involved, else random near the parent
        if isinstance(parent, mbs.PointMass):
            joint_point = parent.position.copy()
        else:
            joint_point = parent_point + rng.uniform(-1.0, 1.0, 3)
        if is_point:
            body = mbs.PointMass(mass=rng.uniform(0.5, 2.0), name=f"b{k}")
            position = (joint_point if joint_type == "Spherical"
                        else joint_point + rng.uniform(0.5, 1.0) * random_unit(rng))
            body.set_state(position=position,
                           velocity=velocity_scale * rng.standard_normal(3))
            grubler += 3
        else:
            principal = bool(rng.integers(2))
            body = mbs.RigidBody(mass=rng.uniform(0.5, 2.0),
                                 inertia=random_inertia(rng, principal), name=f"b{k}")
            body.set_state(position=joint_point + rng.uniform(0.3, 1.0) * random_unit(rng),
                           rotation=random_rotation(rng),
                           velocity=velocity_scale * rng.standard_normal(3),
                           angular_velocity=velocity_scale * rng.standard_normal(3))
            grubler += 6
        system.add(body)
        bodies.append(body)
        grubler -= JOINT_EQUATIONS[joint_type]
        name = f"j{k}"
        if joint_type == "None":
            continue
        if joint_type == "Spherical":
            joint = mbs.joints.Spherical(parent, body, point=joint_point, name=name)
        elif joint_type == "Distance":
            # a point mass parent is attached at the particle, which is joint_point
            point_a = None if isinstance(parent, mbs.PointMass) else joint_point
            point_b = None if is_point else body.position + 0.2 * random_unit(rng)
            b = body.position if point_b is None else point_b
            length = (1.0 + distance_stretch) * float(np.linalg.norm(b - joint_point))
            joint = mbs.joints.Distance(parent, body, length=length, point_a=point_a,
                                        point_b=point_b, name=name)
        elif joint_type == "Universal":
            axis_a = random_unit(rng)
            axis_b = np.cross(axis_a, random_unit(rng))
            joint = mbs.joints.Universal(parent, body, point=joint_point, axis_a=axis_a,
                                         axis_b=axis_b, name=name)
        else:
            cls = getattr(mbs.joints, joint_type)
            joint = cls(parent, body, point=joint_point, axis=random_unit(rng), name=name)
        system.add(joint)
    return system, grubler


def rod_pendulum(start: float = 1.0, gravity: float = -9.81) -> mbs.System:
    """A unit point mass on a rod of length |start| from the origin, released at rest from
    (start, 0, 0), at the height of its pivot."""
    system = mbs.System(gravity=(0.0, 0.0, gravity))
    bob = system.add(mbs.PointMass(1.0, name="bob"))
    bob.set_state(position=(start, 0.0, 0.0))
    system.add(mbs.joints.Distance(system.ground, bob, length=abs(start), name="rod"))
    return system


def spherical_pendulum() -> mbs.System:
    """Sato Martín de Almagro's spherical pendulum with the parameters of the reproductions
    (m = alpha = 1, unit radius, x(0) = (sqrt(3)/2, 0, 1/2), v(0) = (0, -1/3, 0); M = I,
    V = x_3, g = (|x|^2 - 1)/2), the test problem of the seeds on high-order schemes."""
    system = mbs.System(gravity=(0.0, 0.0, -1.0))
    start = (np.sqrt(3.0) / 2.0, 0.0, 0.5)
    bob = system.add(mbs.PointMass(mass=1.0, name="bob"))
    bob.set_state(position=start, velocity=(0.0, -1.0 / 3.0, 0.0))
    system.add(mbs.joints.Distance(system.ground, bob, length=1.0, point_a=(0.0, 0.0, 0.0),
                                   point_b=start))
    return system


def assert_stream_resume_and_ensemble_repeat_the_run(model: mbs.Model, solver: str,
                                                     options: dict, h: float, steps: int,
                                                     directory) -> None:
    """The driver's features with a scheme: a run streamed to ``directory``, stopped halfway
    and resumed, and a member of an ensemble, are bitwise the uninterrupted run."""
    full = mbs.simulate(model, solver, h=h, t_end=steps * h, **options)
    stream = str(directory / "run")
    mbs.simulate(model, solver, h=h, t_end=steps // 2 * h, output=stream, flush_every=4,
                 **options)
    resumed = mbs.simulate(model, solver, h=h, t_end=steps * h, resume=stream, **options)
    np.testing.assert_array_equal(resumed.q, full.q)
    np.testing.assert_array_equal(resumed.p, full.p)
    states = (np.stack([model.q0, model.q0]), np.stack([model.p0, model.p0]))
    ensemble = mbs.simulate_ensemble(model, states, h=h, t_end=steps * h, solver=solver,
                                     **options)
    np.testing.assert_array_equal(ensemble.q[1], full.q)


def thrust_ending_at(time: float):
    """A load law of t that raises from ``time`` on (a table that ends there): a run using
    it stops at ``time`` with the steps done so far."""
    def thrust(t):
        if t >= time - 1e-12:
            raise ZeroDivisionError(f"the thrust law ends at t = {time}")
        return (0.0, 0.0, 1.0)
    return thrust


def assert_effort_derivatives_exact_off_the_constraints(model: mbs.Model, seed: int) -> None:
    """dQ/dq and dQ/dv at a state 2 % off the initial one (off the constraints and the
    orthonormal directors) against central differences of step 1e-6, which are exact to
    about 1e-12 |Q''| / |Q|; the bound leaves a factor of 100 on that."""
    rng = np.random.default_rng(seed)
    q = model.q0 + 0.02 * rng.standard_normal(model.n)
    v = rng.standard_normal(model.n)
    _, by_q, by_v = model.applied_force_derivatives(0.3, q, v)
    by_q = by_q.toarray() if hasattr(by_q, "toarray") else by_q
    by_v = by_v.toarray() if hasattr(by_v, "toarray") else by_v
    np.testing.assert_allclose(by_q, finite_difference(lambda x: model.applied_force(0.3, x, v),
                                                       q), atol=1e-8)
    np.testing.assert_allclose(by_v, finite_difference(lambda x: model.applied_force(0.3, q, x),
                                                       v), atol=1e-8)
