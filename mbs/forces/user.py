"""User-defined potentials written through invariants of the user's choice."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from mbs.bodies.base import Body, Ground
from mbs.errors import ForceFunctionError, ModelError, ModelTypeError
from mbs.forces.base import Force, Invariant, InvariantTerm, TermInstance
from mbs.quadratic import AffineVector
from mbs.validation import as_nonzero_vector, as_vector, difference_mismatch

#: Relative step of the central differences used when the user gives no derivative of V~.
FINITE_DIFFERENCE_STEP = 1e-6
#: Relative step of the second differences of the energy when neither derivative is given
#: (~eps^(1/4): truncation and round-off errors both ~1e-8 relative).
HESSIAN_STEP = 1e-4


class SquaredDistance:
    """Invariant |x_b - x_a|^2 between two body points (world coordinates, initial pose)."""

    def __init__(self, body_a: Body, body_b: Body, point_a=None, point_b=None):
        if body_a is body_b:
            raise ModelError(f"SquaredDistance: both points are on body "
                             f"{getattr(body_a, 'name', body_a)!r}, so their distance never "
                             f"changes; give two different bodies")
        self.body_a, self.body_b = body_a, body_b
        self.point_a = None if point_a is None else as_vector(point_a, 3, "point_a",
                                                              "SquaredDistance")
        self.point_b = None if point_b is None else as_vector(point_b, 3, "point_b",
                                                              "SquaredDistance")

    def bodies(self):
        return [self.body_a, self.body_b]

    def build(self, context) -> Invariant:
        a = self.body_a.reference_point() if self.point_a is None else self.point_a
        b = self.body_b.reference_point() if self.point_b is None else self.point_b
        relative = context.point(self.body_b, b) - context.point(self.body_a, a)
        return Invariant([(relative, relative, 1.0)])


class PointComponent:
    """Invariant n . x(P): a body point's coordinate along a fixed world direction, with n the
    direction normalised to unit length (so pi is a length whatever the direction's size)."""

    def __init__(self, body: Body, direction, point=None):
        self.body = body
        self.direction = as_nonzero_vector(direction, "direction", "PointComponent")
        self.point = None if point is None else as_vector(point, 3, "point", "PointComponent")

    def bodies(self):
        return [self.body]

    def build(self, context) -> Invariant:
        point = self.body.reference_point() if self.point is None else self.point
        return Invariant([(context.point(self.body, point),
                           AffineVector((), self.direction), 1.0)])


class AxisProduct:
    """Invariant u_a . u_b of two body-fixed unit axes (the given axes normalised; world
    components at the initial pose): the cosine of the angle between them."""

    def __init__(self, body_a: Body, axis_a, body_b: Body, axis_b):
        self.body_a, self.body_b = body_a, body_b
        self.axis_a = as_nonzero_vector(axis_a, "axis_a", "AxisProduct")
        self.axis_b = as_nonzero_vector(axis_b, "axis_b", "AxisProduct")

    def bodies(self):
        return [self.body_a, self.body_b]

    def build(self, context) -> Invariant:
        return Invariant([(context.vector(self.body_a, self.axis_a),
                           context.vector(self.body_b, self.axis_b), 1.0)])


class UserPotential(Force):
    """V = energy(pi) for invariants pi of the user's choice.

    Parameters
    ----------
    invariants : list, or one invariant
        :class:`SquaredDistance`, :class:`PointComponent` or :class:`AxisProduct` objects.
        Angular momentum is conserved by the EM scheme when every invariant is symmetric
        under the rotation considered (e.g. squared distances between bodies).
    energy : callable
        ``energy(pi) -> float`` for ``pi`` of shape (n_invariants,).
    gradient, hessian : callable, optional
        dV/dpi (n,) and d2V/dpi2 (n, n); central differences (relative step
        :data:`FINITE_DIFFERENCE_STEP`) are used when omitted, with ~1e-8 relative accuracy.
    name : str, optional
        Unique in the system; by default ``force<k>`` with the first k not taken.
    """

    def __init__(self, invariants: list, energy: Callable, gradient: Callable | None = None,
                 hessian: Callable | None = None, name: str | None = None):
        super().__init__(name)
        owner = f"UserPotential {self.name!r}"
        if hasattr(invariants, "build"):  # one invariant, not in a list
            invariants = [invariants]
        if not invariants:
            raise ModelError(f"{owner}: give at least one invariant")
        for invariant in invariants:
            if not hasattr(invariant, "build"):
                raise ModelTypeError(f"{owner}: {invariant!r} is not an invariant; use "
                                     f"SquaredDistance, PointComponent or AxisProduct")
        if not callable(energy):
            raise ModelTypeError(f"{owner}: energy must be callable, got {energy!r}")
        self.invariants = list(invariants)
        self.functions = (energy, gradient, hessian)

    def bodies_acted_on(self):
        # each body once (invariants often share bodies; duplicates made graph self-loops)
        return list(dict.fromkeys(b for inv in self.invariants for b in inv.bodies()))

    def terms(self, context):
        # a term class of its own per compiled model: it keeps that model's invariant sizes
        term = _make_user_term(len(self.invariants), *self.functions,
                               f"UserPotential {self.name!r}")
        return [TermInstance(term, [inv.build(context) for inv in self.invariants], {})]

    def ground_points(self) -> list[np.ndarray]:
        """The ground points its distance invariants measure from (anchors about which
        the angular momentum may be conserved)."""
        points = []
        for invariant in self.invariants:
            if isinstance(invariant, SquaredDistance):
                for body, point in ((invariant.body_a, invariant.point_a),
                                    (invariant.body_b, invariant.point_b)):
                    if isinstance(body, Ground):
                        points.append(body.reference_point() if point is None else point)
        return points


def _user_value(function, what: str, p: np.ndarray, shape: tuple[int, ...], owner: str
                ) -> np.ndarray:
    """``function(p)`` as a float array of ``shape``; a failing function, a value of another
    shape (a matrix of exactly ``shape``) or a non-finite value raises ForceFunctionError
    naming the potential and the function; non-finite invariants (a state that is not
    finite) are named as the cause instead of the function."""
    if not np.isfinite(p).all():
        raise ForceFunctionError(f"{owner}: the invariants are not finite ({p}): the state "
                                 f"they are computed from is not finite (a step that blew up, "
                                 f"or NaN in the coordinates given), not the {what} function",
                                 hint="reduce the step size: the state blew up")
    try:
        value = function(p)
    except Exception as exc:
        raise ForceFunctionError(f"{owner}: the {what} function raised {type(exc).__name__} "
                                 f"({exc}) at invariants {p}") from exc
    try:
        array = None if value is None else np.asarray(value, dtype=float)
    except (TypeError, ValueError):
        array = None
    if array is None or array.size != int(np.prod(shape)) or (not shape and array.ndim) or (
            len(shape) == 2 and array.shape != shape):
        expected = "a number" if not shape else f"shape {shape}"
        got = (f"shape {array.shape}" if array is not None else
               "None (no return statement?)" if value is None else repr(value))
        raise ForceFunctionError(f"{owner}: the {what} function returned {got} at invariants "
                                 f"{p}; it must return {expected}")
    if not np.isfinite(array).all():
        raise ForceFunctionError(f"{owner}: the {what} function returned {array} at "
                                 f"invariants {p}; it must return finite values")
    return array.reshape(shape)


def _make_user_term(n: int, energy, gradient, hessian, owner: str) -> type[InvariantTerm]:
    # The natural size of each invariant (|pi| at the initial state, 1 where that vanishes:
    # an invariant that starts at zero names no size), recorded when the model is compiled
    # (the term class is made for that model, with the user potential its only element):
    # the central differences step relative to max(|pi|, that size), so that the invariants
    # of a model of millimetres are not stepped by an absolute 1e-6 (a squared distance of
    # 1e-6 m^2 stepped below zero).
    sizes = [np.ones(n)]

    def steps(p: np.ndarray, relative: float) -> np.ndarray:
        return relative * np.maximum(np.abs(p), sizes[0])

    def scalar_energy(p: np.ndarray) -> float:
        return float(_user_value(energy, "energy", p, (), owner))

    def scalar_gradient(p: np.ndarray) -> np.ndarray:
        if gradient is not None:
            return _user_value(gradient, "gradient", p, (n,), owner)
        out = np.zeros(n)
        for k, step in enumerate(steps(p, FINITE_DIFFERENCE_STEP)):
            e = np.zeros(n)
            e[k] = step
            out[k] = (scalar_energy(p + e) - scalar_energy(p - e)) / (2 * step)
        return out

    def scalar_hessian(p: np.ndarray) -> np.ndarray:
        if hessian is not None:
            return _user_value(hessian, "hessian", p, (n, n), owner)
        out = np.zeros((n, n))
        if gradient is not None:
            for k, step in enumerate(steps(p, FINITE_DIFFERENCE_STEP)):
                e = np.zeros(n)
                e[k] = step
                out[:, k] = (scalar_gradient(p + e) - scalar_gradient(p - e)) / (2 * step)
            return 0.5 * (out + out.T)
        # Second differences of the energy itself: nesting two first differences of step
        # FINITE_DIFFERENCE_STEP would leave a round-off error of ~eps / step^2 ~ 1e-4.
        second = steps(p, HESSIAN_STEP)
        for k in range(n):
            ek = np.zeros(n)
            ek[k] = second[k]
            for j in range(k, n):
                ej = np.zeros(n)
                ej[j] = second[j]
                out[k, j] = out[j, k] = (
                    scalar_energy(p + ek + ej) - scalar_energy(p + ek - ej)
                    - scalar_energy(p - ek + ej) + scalar_energy(p - ek - ej)
                ) / (4.0 * second[k] * second[j])
        return out

    class UserTerm(InvariantTerm):
        n_invariants = n

        @classmethod
        def invariant_scales(cls, pi0: np.ndarray, params: dict) -> np.ndarray:
            scales = super().invariant_scales(pi0, params)
            sizes[0] = scales[0].copy()
            return scales

        @classmethod
        def energy(cls, pi, params):
            return np.array([scalar_energy(row) for row in pi])

        @classmethod
        def gradient(cls, pi, params):
            return np.array([scalar_gradient(row) for row in pi])

        @classmethod
        def hessian(cls, pi, params):
            return np.array([scalar_hessian(row) for row in pi])

        @classmethod
        def values_at(cls, pi_row: np.ndarray) -> None:
            """Evaluate the user's functions at ``pi_row`` alone (no differences beside it):
            a value of the wrong shape or type raises ForceFunctionError there."""
            scalar_energy(pi_row)
            if gradient is not None:
                scalar_gradient(pi_row)
            if hessian is not None:
                scalar_hessian(pi_row)

        @classmethod
        def derivative_mismatches(cls, pi_row: np.ndarray) -> list[tuple[str, float]]:
            """The user's gradient and Hessian (those given) against central differences
            of the energy and of the gradient at ``pi_row``: [(name, relative mismatch)]."""
            out = []
            if gradient is not None:
                out.append(("gradient", difference_mismatch(
                    scalar_energy, scalar_gradient(pi_row), pi_row, sizes=sizes[0])))
            if hessian is not None:
                out.append(("hessian", difference_mismatch(
                    scalar_gradient, scalar_hessian(pi_row), pi_row, sizes=sizes[0])))
            return out

    return UserTerm
