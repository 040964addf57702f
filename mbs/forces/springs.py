"""Springs and dampers between body points."""

from __future__ import annotations

import numpy as np

from mbs.bodies.base import Body
from mbs.errors import ModelError, ModelTypeError
from mbs.forces.applied import two_point_damper
from mbs.forces.base import Force, InvariantTerm, TermInstance, squared_distance
from mbs.validation import as_scalar, as_vector


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
        (see :class:`mbs.forces.Damper`).
    """

    def __init__(self, body_a: Body, body_b: Body, stiffness: float,
                 rest_length: float | None = None, point_a=None, point_b=None,
                 name: str | None = None, damping: float | None = None):
        super().__init__(body_a, body_b, point_a, point_b, name)
        owner = f"Spring {self.name!r}"
        self.stiffness = as_scalar(stiffness, "stiffness", owner, positive=True)
        self.rest_length = (None if rest_length is None else
                            as_scalar(rest_length, "rest_length", owner, non_negative=True))
        self.damping = (None if damping is None else
                        as_scalar(damping, "damping", owner, positive=True))
        if self.rest_length not in (None, 0.0) and self.initial_length() == 0.0:
            raise ModelError(f"{owner}: its two points coincide at the initial pose, where a "
                             f"spring of rest length {self.rest_length:g} has no direction to "
                             f"push; give distinct points, or rest_length=0 for a zero-length "
                             f"spring")
        if self.damping is not None and self.initial_length() == 0.0:
            raise ModelError(f"{owner}: a spring-damper needs distinct attachment points (the "
                             f"damping acts along the line between them)")

    def applied_terms(self, context):
        if self.damping is None:
            return []
        return [two_point_damper(self.name, context, self.body_a, self.body_b,
                                 *self.attachment_points(), self.damping)]

    def terms(self, context):
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
    """

    def __init__(self, body_a: Body, body_b: Body, damping: float, point_a=None, point_b=None,
                 name: str | None = None):
        super().__init__(body_a, body_b, point_a, point_b, name)
        owner = f"Damper {self.name!r}"
        self.damping = as_scalar(damping, "damping", owner, positive=True)
        if self.initial_length() == 0.0:
            raise ModelError(f"{owner}: its two points coincide at the initial pose; the "
                             f"damping direction is undefined (give distinct points)")

    def terms(self, context):
        return []

    def applied_terms(self, context):
        return [two_point_damper(self.name, context, self.body_a, self.body_b,
                                 *self.attachment_points(), self.damping)]

