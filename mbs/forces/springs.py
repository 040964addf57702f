"""Springs and dampers between body points."""

from __future__ import annotations

import numpy as np

from mbs.bodies.base import Body
from mbs.errors import ModelError, ModelTypeError, warn_user
from mbs.forces.applied import joint_damper_term, two_point_damper
from mbs.forces.base import (
    Force,
    Invariant,
    InvariantTerm,
    JointElement,
    TermInstance,
    squared_distance,
)
from mbs.joints.base import perpendicular_pair
from mbs.validation import as_scalar, as_vector, optional_damping


class HookeanSpringTerm(InvariantTerm):
    """V~ = 1/2 k (sqrt(pi) - l0)^2 with pi the squared length."""

    n_invariants = 1

    @classmethod
    def energy(cls, pi, params):
        return 0.5 * params["stiffness"] * (np.sqrt(pi[:, 0]) - params["rest_length"]) ** 2

    @classmethod
    def gradient(cls, pi, params):
        length = np.sqrt(pi[:, 0])
        return (0.5 * params["stiffness"] * (1.0 - params["rest_length"] / length))[:, None]

    @classmethod
    def hessian(cls, pi, params):
        return (0.25 * params["stiffness"] * params["rest_length"]
                * pi[:, 0] ** -1.5)[:, None, None]

    @classmethod
    def energy_scale(cls, pi, params):
        """k |d| (L + l0 + |d|/2) with L = sqrt(pi) and d = L - l0: the stretch d is a
        difference of two sizes of order L + l0, so a spring stretched little against its
        length (stiff, or preloaded near equilibrium) has a round-off of eps k |d| (L + l0)
        in V~, far above eps V~."""
        length = np.sqrt(pi[:, 0])
        stretch = np.abs(length - params["rest_length"])
        return params["stiffness"] * stretch * (length + params["rest_length"] + 0.5 * stretch)


class ZeroLengthSpringTerm(InvariantTerm):
    """V~ = 1/2 k pi: the Hookean spring of rest length 0, linear in the squared length (a
    separate term because the general form divides by the length, which may vanish)."""

    n_invariants = 1
    polynomial_degree = 1

    @classmethod
    def energy(cls, pi, params):
        return 0.5 * params["stiffness"] * pi[:, 0]

    @classmethod
    def gradient(cls, pi, params):
        return 0.5 * params["stiffness"][:, None] * np.ones((pi.shape[0], 1))

    @classmethod
    def hessian(cls, pi, params):
        return np.zeros((pi.shape[0], 1, 1))


class QuarticSpringTerm(InvariantTerm):
    """V~ = 1/2 k (pi - l^2)^2 (seed 003, section 6.3): quadratic in pi."""

    n_invariants = 1
    polynomial_degree = 2

    @classmethod
    def energy(cls, pi, params):
        return 0.5 * params["stiffness"] * (pi[:, 0] - params["length"] ** 2) ** 2

    @classmethod
    def gradient(cls, pi, params):
        return (params["stiffness"] * (pi[:, 0] - params["length"] ** 2))[:, None]

    @classmethod
    def hessian(cls, pi, params):
        return params["stiffness"][:, None, None] * np.ones((pi.shape[0], 1, 1))


class TorsionSpringTerm(InvariantTerm):
    """V~ = 1/2 k alpha^2 with alpha = atan2(s', c') the angle from the rest angle theta0,
    where (c', s') is the invariant pair (c, s) = (cos theta, sin theta) turned by -theta0:
    c' = c cos theta0 + s sin theta0, s' = s cos theta0 - c sin theta0."""

    n_invariants = 2

    @staticmethod
    def _turned(pi, params):
        cos0, sin0 = np.cos(params["rest_angle"]), np.sin(params["rest_angle"])
        c, s = pi[:, 0], pi[:, 1]
        return c * cos0 + s * sin0, s * cos0 - c * sin0, cos0, sin0

    @classmethod
    def _angle(cls, pi, params):
        c, s, _, _ = cls._turned(pi, params)
        return np.arctan2(s, c)

    @classmethod
    def energy(cls, pi, params):
        return 0.5 * params["stiffness"] * cls._angle(pi, params) ** 2

    @classmethod
    def gradient(cls, pi, params):
        """k alpha (d alpha/d(c', s')) turned back: d alpha/dc' = -s'/r^2, d alpha/ds' =
        c'/r^2 with r^2 = c'^2 + s'^2."""
        c, s, cos0, sin0 = cls._turned(pi, params)
        factor = params["stiffness"] * np.arctan2(s, c) / (c * c + s * s)
        dc, ds = -s * factor, c * factor
        return np.stack([dc * cos0 - ds * sin0, dc * sin0 + ds * cos0], axis=1)

    @classmethod
    def hessian(cls, pi, params):
        """k (grad alpha grad alpha^T + alpha Hess alpha) in (c', s') turned back, with
        Hess alpha = [[2c's', s'^2 - c'^2], [s'^2 - c'^2, -2c's']] / r^4."""
        c, s, cos0, sin0 = cls._turned(pi, params)
        r2 = c * c + s * s
        alpha = np.arctan2(s, c)
        grad = np.stack([-s, c], axis=1) / r2[:, None]
        cross, square = 2.0 * c * s / r2**2, (s * s - c * c) / r2**2
        curvature = np.stack([np.stack([cross, square], axis=1),
                              np.stack([square, -cross], axis=1)], axis=1)
        turned = (grad[:, :, None] * grad[:, None, :] + alpha[:, None, None] * curvature)
        # (c', s') = turn (c, s), one turn per element
        turn = np.moveaxis(np.array([[cos0, sin0], [-sin0, cos0]]), -1, 0)
        return params["stiffness"][:, None, None] * np.einsum("kai,kab,kbj->kij", turn,
                                                              turned, turn)

    @classmethod
    def energy_scale(cls, pi, params):
        """k (|alpha| + alpha^2 / 2): alpha comes from two invariants of size 1, so it carries
        an absolute round-off of about eps, which V~ multiplies by k |alpha|."""
        alpha = np.abs(cls._angle(pi, params))
        return params["stiffness"] * (alpha + 0.5 * alpha * alpha)

    @classmethod
    def invariant_scales(cls, pi0, params):
        return np.ones_like(pi0)  # cosine and sine of one angle

    @classmethod
    def range_exits(cls, pi_series, params):
        """The first state after the angle from the rest angle jumped by more than pi: it
        passed theta0 +- pi, where it is read on the other side."""
        states, elements, _ = pi_series.shape
        tiled = {key: np.tile(value, states) for key, value in params.items()}
        alpha = cls._angle(pi_series.reshape(states * elements, 2), tiled).reshape(
            states, elements)
        jumped = np.abs(np.diff(alpha, axis=0)) > np.pi
        return np.where(jumped.any(axis=0), jumped.argmax(axis=0) + 1, -1)


class TorsionSpring(JointElement):
    """A torsion spring on a revolute or cylindrical joint: V = 1/2 k (theta - theta0)^2, with
    theta the rotation of body_b relative to body_a about the joint axis (0 at the initial
    pose, positive by the right-hand rule about the axis, as for
    :class:`~mbs.forces.JointTorque`).

    theta is read from the cosine and sine of the angle, two invariants quadratic in q, so the
    energy-momentum scheme conserves energy and angular momentum with it. The angle is
    measured within half a turn of the rest angle, in (theta0 - pi, theta0 + pi]: a spring
    wound further reads the angle on the other side (its torque changes sign there), so the
    motion must stay within half a turn of theta0; :func:`mbs.simulate` warns after a run
    that left it.

    Parameters
    ----------
    joint : Revolute or Cylindrical
        The joint whose relative rotation the spring resists.
    stiffness : float
        k > 0 (torque per radian).
    rest_angle : float, optional
        theta0 in radians relative to the initial pose (default 0: relaxed at the initial
        pose); |theta0| <= pi.
    damping : float, optional
        c > 0 adds the viscous torque -c theta' (a :class:`~mbs.forces.JointDamper`); 0 or
        None: undamped.
    name : str, optional
        Unique in the system; by default ``force<k>`` with the first k not taken.
    """

    def __init__(self, joint, stiffness: float, rest_angle: float = 0.0,
                 damping: float | None = None, name: str | None = None):
        super().__init__(name)
        self._attach(joint, {"Revolute": "angle", "Cylindrical": "angle"},
                     "use a UserPotential of AxisProduct invariants for other rotations")
        owner = self.owner
        self.stiffness = as_scalar(stiffness, "stiffness", owner, positive=True)
        self.rest_angle = as_scalar(rest_angle, "rest_angle", owner)
        if abs(self.rest_angle) > np.pi:
            raise ModelError(f"{owner}: rest_angle {self.rest_angle:g} rad is more than half "
                             f"a turn from the initial pose; give it in [-pi, pi]")
        self.damping = optional_damping(damping, owner)

    def terms(self, context):
        body_a, body_b = self.joint.body_a, self.joint.body_b
        first, second = perpendicular_pair(self.joint.axis)
        reference = context.vector(body_b, first)
        return [TermInstance(TorsionSpringTerm, [
            Invariant([(context.vector(body_a, first), reference, 1.0)]),
            Invariant([(context.vector(body_a, second), reference, 1.0)])],
            {"stiffness": self.stiffness, "rest_angle": self.rest_angle})]

    def applied_terms(self, context):
        if self.damping is None:
            return []
        return [joint_damper_term(self.joint, context, self.damping, self.name)]


class _TwoPointForce(Force):
    def __init__(self, body_a: Body, body_b: Body, point_a, point_b, name):
        super().__init__(name)
        owner = f"{type(self).__name__} {self.name!r}"
        for label, body in (("first body", body_a), ("second body", body_b)):
            if not isinstance(body, Body):
                raise ModelTypeError(f"{owner}: {label} must be a body, got {body!r}")
        if body_a is body_b:
            raise ModelError(f"{owner} connects body {body_a.name!r} to itself; give two "
                             f"different bodies")
        self.body_a, self.body_b = body_a, body_b
        self.point_a = None if point_a is None else as_vector(point_a, 3, "point_a", owner)
        self.point_b = None if point_b is None else as_vector(point_b, 3, "point_b", owner)

    def bodies_acted_on(self):
        return [self.body_a, self.body_b]

    def attachment_points(self) -> tuple[np.ndarray, np.ndarray]:
        a = self.body_a.reference_point() if self.point_a is None else self.point_a
        b = self.body_b.reference_point() if self.point_b is None else self.point_b
        return a, b

    def _relative(self, context):
        a, b = self.attachment_points()
        return context.point(self.body_b, b) - context.point(self.body_a, a)

    def initial_length(self) -> float:
        a, b = self.attachment_points()
        return float(np.linalg.norm(b - a))


class Spring(_TwoPointForce):
    """Linear (Hookean in length) spring: V = 1/2 k (|x_b - x_a| - l0)^2.

    Parameters
    ----------
    body_a, body_b : Body
    stiffness : float
        k > 0.
    rest_length : float, optional
        l0 >= 0; defaults to the initial length.
    point_a, point_b : array_like (3,), optional
        Attachment points (world, initial pose); default to the bodies' reference points.
    damping : float, optional
        c > 0 makes it a spring-damper: a viscous force -c l' along the spring's line
        (see :class:`mbs.forces.Damper`); 0 or None: undamped.
    name : str, optional
        Unique in the system; by default ``force<k>`` with the first k not taken.
    """

    def __init__(self, body_a: Body, body_b: Body, stiffness: float,
                 rest_length: float | None = None, point_a=None, point_b=None,
                 name: str | None = None, damping: float | None = None):
        super().__init__(body_a, body_b, point_a, point_b, name)
        owner = f"Spring {self.name!r}"
        self.stiffness = as_scalar(stiffness, "stiffness", owner, positive=True)
        self.rest_length = (None if rest_length is None else
                            as_scalar(rest_length, "rest_length", owner, non_negative=True))
        self.damping = optional_damping(damping, owner)

    # The attachment points are those of the initial pose, which is final at compile():
    # the geometry is checked there.
    def applied_terms(self, context):
        if self.damping is None:
            return []
        if self.initial_length() == 0.0:
            raise ModelError(f"Spring {self.name!r}: a spring-damper needs distinct attachment "
                             f"points at the initial pose (the damping acts along the line "
                             f"between them)")
        return [two_point_damper(self.name, context, self.body_a, self.body_b,
                                 *self.attachment_points(), self.damping)]

    def terms(self, context):
        owner = f"Spring {self.name!r}"
        if self.initial_length() == 0.0:
            if self.rest_length not in (None, 0.0):
                raise ModelError(f"{owner}: its two points coincide at the initial pose, where "
                                 f"a spring of rest length {self.rest_length:g} has no "
                                 f"direction to push; give distinct points, or rest_length=0 "
                                 f"for a zero-length spring")
            if self.rest_length is None:
                warn_user(f"{owner}: its two points coincide at the initial pose, so the "
                          f"rest length (by default the initial distance) is 0: a zero-length "
                          f"spring; give rest_length= for another, or rest_length=0 to say "
                          f"so")
        rest = self.initial_length() if self.rest_length is None else self.rest_length
        invariant = squared_distance(self._relative(context))
        if rest == 0.0:
            return [TermInstance(ZeroLengthSpringTerm, [invariant],
                                 {"stiffness": self.stiffness})]
        return [TermInstance(HookeanSpringTerm, [invariant],
                             {"stiffness": self.stiffness, "rest_length": rest})]


class QuarticSpring(_TwoPointForce):
    """Nonlinear spring of seed 003 section 6.3: V = 1/2 k (|x_b - x_a|^2 - l^2)^2.

    Its discrete gradient is the exact midpoint formula (V~ is quadratic in the invariant).
    """

    def __init__(self, body_a: Body, body_b: Body, stiffness: float, length: float,
                 point_a=None, point_b=None, name: str | None = None):
        super().__init__(body_a, body_b, point_a, point_b, name)
        owner = f"QuarticSpring {self.name!r}"
        self.stiffness = as_scalar(stiffness, "stiffness", owner, positive=True)
        self.length = as_scalar(length, "length", owner, non_negative=True)

    def terms(self, context):
        return [TermInstance(QuarticSpringTerm, [squared_distance(self._relative(context))],
                             {"stiffness": self.stiffness, "length": self.length})]


class Damper(_TwoPointForce):
    """Linear viscous damper along the line of two body points: f = -c l' e (l the distance
    of the points, e the unit vector from a to b); it does work, see
    :mod:`mbs.forces.applied`.

    Parameters
    ----------
    body_a, body_b : Body
        Either may be ``system.ground``.
    damping : float
        c > 0 (force per velocity).
    point_a, point_b : array_like (3,), optional
        Attachment points (world, initial pose); default to the bodies' reference points.
        They must not coincide.
    name : str, optional
        Unique in the system; by default ``force<k>`` with the first k not taken.
    """

    def __init__(self, body_a: Body, body_b: Body, damping: float, point_a=None, point_b=None,
                 name: str | None = None):
        super().__init__(body_a, body_b, point_a, point_b, name)
        owner = f"Damper {self.name!r}"
        self.damping = as_scalar(damping, "damping", owner, positive=True)

    def terms(self, context):
        return []

    def applied_terms(self, context):
        if self.initial_length() == 0.0:  # at the initial pose, final at compile()
            raise ModelError(f"Damper {self.name!r}: its two points coincide at the initial "
                             f"pose; the damping direction is undefined (give distinct "
                             f"points)")
        return [two_point_damper(self.name, context, self.body_a, self.body_b,
                                 *self.attachment_points(), self.damping)]

