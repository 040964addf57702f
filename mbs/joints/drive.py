"""Prescribed joint motion: a rheonomic constraint on a joint's axis coordinate.

A drive of a revolute (or cylindrical) joint prescribes the angle f(t) of body_b relative to
body_a about the axis; with e1, e2 fixed in body_a and f1 (= e1 at the initial pose) fixed in
body_b, its equation

    g(q, t) = cos f(t) (f1 . e2) - sin f(t) (f1 . e1) = sin(angle - f(t)) = 0

is a combination of two quadratic forms of q with time-dependent weights, so it has the exact
midpoint discrete derivative of the other joints at any fixed t and g measures the angle
error in radians. A drive of a prismatic joint prescribes the displacement s(t) along the
axis: g = axis_a . (x_b(P) - x_a(P)) - s(t). The velocity constraint of the drive is
G v + dg/dt = 0; every scheme evaluates g and its derivatives at the times of the points where
it enforces the constraints.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from mbs.elements import Element
from mbs.errors import ForceFunctionError, ModelError, ModelTypeError
from mbs.joints.base import AXIS_COORDINATES, BuildContext, Joint, perpendicular_pair
from mbs.joints.user import UserConstraint
from mbs.time_span import within_span
from mbs.validation import as_scalar

#: Step (s) of the central differences that give a drive's rate when none is given. Their
#: Richardson extrapolation errs by about step^4 |f^(5)| / 30 + 3 eps |f| / step: 3e-14 for
#: a unit motion at 10 rad/s, 3e-8 at 1000 rad/s, 1e-9 for |f| = 150. The step is fixed in
#: time, not relative to t, so that the error does not grow as a run goes on.
RATE_DIFFERENCE_STEP = 1e-4

#: Weights (times 12 width) of the fourth-order one-sided first difference.
ONE_SIDED_WEIGHTS = np.array([-25.0, 48.0, -36.0, 16.0, -3.0])

class Drive(UserConstraint):
    """Prescribe a joint's angle or displacement as a function of time.

    Parameters
    ----------
    joint : Revolute, Cylindrical or Prismatic
    position : float or callable
        f(t): the angle (rad, relative to the initial pose) or displacement (m); a number
        holds the coordinate fixed at that value.
    rate : callable, optional
        f'(t); when omitted, by differences of ``position`` over 2e-4 in t: central, or
        one-sided where ``position`` fails on one side of t (a table that ends there).
    coordinate : {"angle", "displacement"}, optional
        For a cylindrical joint (default "angle").
    name : str, optional
        Unique in the system; by default ``drive<k>`` with the first k not taken.

    Notes
    -----
    The reaction the drive exerts (a torque about, or force along, the axis on body_b) and
    its work are ``Solution.drive(name).effort`` and ``.work`` (see
    :meth:`mbs.Solution.drive`); ``Solution.work`` includes the drives' work.
    """

    kind = "drive"  # unnamed drives are called drive1, drive2, ...
    time_dependent = True
    quadratic = True

    def __init__(self, joint: Joint, position, rate: Callable | None = None,
                 coordinate: str | None = None, name: str | None = None):
        Element.__init__(self, name)
        owner = f"Drive {self.name!r}"
        if not isinstance(joint, Joint):
            raise ModelTypeError(f"{owner}: joint must be a joint, got {joint!r}")
        kinds = AXIS_COORDINATES.get(type(joint).__name__)
        if kinds is None:
            raise ModelError(f"{owner}: drives act on revolute, cylindrical and prismatic "
                             f"joints, got {type(joint).__name__} {joint.name!r}")
        coordinate = coordinate or kinds[0]
        if coordinate not in kinds:
            raise ModelError(f"{owner}: a {type(joint).__name__} joint has no {coordinate!r} "
                             f"coordinate (it has {', '.join(kinds)})")
        if callable(position):
            self.position = position
        else:
            try:
                value = as_scalar(position, "position", owner)
            except ModelTypeError:
                raise ModelTypeError(f"{owner}: position must be a real number or a function "
                                     f"of t, got {position!r}") from None
            self.position = lambda t: value
            rate = rate or (lambda t: 0.0)
        if rate is not None and not callable(rate):
            raise ModelTypeError(f"{owner}: rate must be a function of t (or None), got "
                                 f"{rate!r}")
        self.rate = rate
        self.joint, self.coordinate, self.owner = joint, coordinate, owner
        self.bodies = [body for body in joint.bodies if body.n_coordinates]
        self.n_equations = 1
        self.hessian_function = None
        self._forms = None

    def referenced_bodies(self) -> list:
        if self.joint.system is None:
            raise ModelError(f"{self.owner}: joint {self.joint.name!r} is not in a system; add "
                             f"the joint first")
        return list(self.bodies)

    # -- geometry (at the bodies' initial pose, built when the system is compiled) ---------
    def prepare(self) -> None:
        """Build the drive's quadratic forms from the joint geometry at the initial pose."""
        joint, offsets, start = self.joint, {}, 0
        for body in joint.bodies:
            offsets[body.name] = start
            start += body.n_coordinates
        context, size = BuildContext(offsets), start

        def affine(vector):
            matrix = np.zeros((3, size))
            for coefficient, first in vector.terms:
                matrix[:, first:first + 3] += coefficient * np.eye(3)
            return matrix, np.array(vector.constant, dtype=float)

        a, b = joint.body_a, joint.body_b
        if self.coordinate == "angle":
            e1, e2 = perpendicular_pair(joint.axis)
            reference = affine(context.vector(b, e1))
            self._forms = [(reference, affine(context.vector(a, e2))),
                           (reference, affine(context.vector(a, e1)))]
        else:
            self._forms = [(affine(context.vector(a, joint.axis)),
                            affine(context.point(b, joint.point) - context.point(a, joint.point)))]
        self._hessians = [first[0].T @ second[0] + second[0].T @ first[0]
                          for first, second in self._forms]

    def _values(self, q: np.ndarray) -> np.ndarray:
        return np.array([(first[0] @ q + first[1]) @ (second[0] @ q + second[1])
                         for first, second in self._forms])

    def _gradients(self, q: np.ndarray) -> np.ndarray:
        return np.array([first[0].T @ (second[0] @ q + second[1])
                         + second[0].T @ (first[0] @ q + first[1])
                         for first, second in self._forms])

    def _call(self, function: Callable, what: str, t: float, exact: bool = False) -> float:
        """f(t) checked; ``exact``: at t itself, not at the run's end that t may be up to
        rounding (:func:`~mbs.time_span.within_span`)."""
        t = t if exact else within_span(t)
        try:
            value = float(function(t))
        except Exception as exc:  # the user's code: report it with the drive's name
            raise ForceFunctionError(f"{self.owner}: the {what} function failed at t = "
                                     f"{float(t)!r} ({type(exc).__name__}: {exc}); it must return "
                                     f"a number") from exc
        if not np.isfinite(value):
            raise ForceFunctionError(f"{self.owner}: the {what} function returned {value} at "
                                     f"t = {float(t)!r}")
        return value

    def _weights(self, t: float) -> tuple[np.ndarray, float]:
        """(w(t), c(t)) of g = w . pi(q) + c."""
        target = self._call(self.position, "position", t)
        if self.coordinate == "angle":
            return np.array([np.cos(target), -np.sin(target)]), 0.0
        return np.ones(1), -target

    def branch_error(self, q_local: np.ndarray, t: float) -> str | None:
        """Why ``q_local`` is on the wrong solution of g = 0 at time t, or None.

        g = sin(angle - f(t)) also vanishes at angle = f(t) + pi: a step of Newton's method
        started more than a quarter turn from the prescribed angle (a large step of a fast
        drive) can converge there. The prescribed solution has cos(angle - f(t)) > 0."""
        if self.coordinate != "angle":
            return None
        target = self._call(self.position, "position", t)
        across, along = self._values(q_local)  # f1 . e2, f1 . e1
        cosine = np.cos(target) * along + np.sin(target) * across
        if cosine > 0.0:
            return None
        offset = np.arctan2(np.cos(target) * across - np.sin(target) * along, cosine)
        return (f"{self.owner} converged half a turn away from its prescribed angle "
                f"(angle - f(t) = {offset:.3g} rad at t = {t:.6g})")

    def _rate(self, t: float) -> float:
        if self.rate is not None:
            return self._call(self.rate, "rate", t)
        return self._difference_rate(t, RATE_DIFFERENCE_STEP)

    def _difference_rate(self, t: float, step: float) -> float:
        """f'(t) by Richardson extrapolation of central differences over 2 step and 4 step,
        each divided by the distance of its two times as rounded (exact in floating point),
        so that round-off in t itself does not enter.

        Where f cannot be evaluated on one side of t (a table or law that ends at t, the end
        of a run), the one-sided differences of the same order over the same span are used.
        The differences are taken about t as the run reads it (its end, for a time a few
        units of rounding past it), at the times they name."""
        t = within_span(t)

        def central(width: float) -> float:
            ahead, behind = t + width, t - width
            return ((self._call(self.position, "position", ahead, exact=True)
                     - self._call(self.position, "position", behind, exact=True))
                    / (ahead - behind))

        try:
            return (4.0 * central(step) - central(2.0 * step)) / 3.0
        except ForceFunctionError as central_failure:
            self._call(self.position, "position", t)  # a failure at t itself is reported as is
            for direction in (1.0, -1.0):
                try:
                    return self._one_sided_rate(t, direction * 0.5 * step)
                except ForceFunctionError:
                    continue
            raise ForceFunctionError(f"{central_failure}; the drive's rate is taken from "
                                     f"differences of the position within {2 * step:g} s of t: "
                                     f"give rate=") from central_failure

    def _one_sided_rate(self, t: float, width: float) -> float:
        """f'(t) from f(t), f(t + width), ..., f(t + 4 width): the fourth-order one-sided
        difference (-25, 48, -36, 16, -3) / 12, with error width^4 |f^(5)| / 5."""
        times = t + width * np.arange(5)
        values = np.array([self._call(self.position, "position", time, exact=True)
                           for time in times])
        return float(ONE_SIDED_WEIGHTS @ values / (12.0 * width))

    def rate_mismatch(self, times) -> tuple[float, float, float, float] | None:
        """How far the given ``rate`` is from central differences of ``position``.

        Returns (relative mismatch, t, rate(t), difference) at the worst of ``times``, the
        mismatch relative to the largest rate seen or to the mean rate of travel between
        the times (a move that is at rest at every one of them: the differences' error is
        then no mismatch); None without a given rate function or when the drive does not
        move. The differences (see :data:`RATE_DIFFERENCE_STEP`) are exact to about 1e-8
        relative for motions slower than 1e3 rad/s."""
        if self.rate is None:
            return None
        given = np.array([self._call(self.rate, "rate", t) for t in times])
        differences = np.array([self._difference_rate(t, RATE_DIFFERENCE_STEP)
                                for t in times])
        positions = np.array([self._call(self.position, "position", t) for t in times])
        travel = float(np.ptp(positions)) / max(float(np.ptp(times)), 1e-300)
        scale = float(max(np.abs(given).max(), np.abs(differences).max(), travel))
        if scale == 0.0:
            return None
        worst = int(np.argmax(np.abs(given - differences)))
        return (float(abs(given[worst] - differences[worst])) / scale, float(times[worst]),
                float(given[worst]), float(differences[worst]))

    # -- the UserConstraint interface, at time t ---------------------------------------------
    def value(self, q_local: np.ndarray, t: float = 0.0) -> np.ndarray:
        weights, constant = self._weights(t)
        return np.array([weights @ self._values(q_local) + constant])

    def jacobian(self, q_local: np.ndarray, t: float = 0.0) -> np.ndarray:
        weights, _ = self._weights(t)
        return (weights @ self._gradients(q_local))[None, :]

    def hessian_product(self, q_local: np.ndarray, multipliers: np.ndarray, t: float = 0.0
                        ) -> np.ndarray:
        weights, _ = self._weights(t)
        return float(multipliers[0]) * sum(w * h for w, h in zip(weights, self._hessians))

    def discrete_jacobian(self, q0: np.ndarray, q1: np.ndarray, t: float = 0.0) -> np.ndarray:
        return self.jacobian(0.5 * (q0 + q1), t)  # exact: g is quadratic in q at fixed t

    # g quadratic in q at fixed t: the midpoint Jacobian is the mean one (and the Hessian
    # product needs no correction, see Model.hessian_corrections)
    mean_jacobian = discrete_jacobian

    def time_derivative_jacobian(self, q_local: np.ndarray, t: float) -> np.ndarray:
        """d(dg/dt)/dq, (1, size): an angle's dg/dt is f'(t) w'(t) . pi(q) with the quadratic
        forms pi; a displacement's does not depend on q."""
        if self.coordinate != "angle":
            return np.zeros((1, q_local.size))
        rate = self._rate(t)
        target = self._call(self.position, "position", t)
        return (rate * np.array([-np.sin(target), -np.cos(target)])
                @ self._gradients(q_local))[None, :]

    def time_derivative(self, q_local: np.ndarray, t: float) -> np.ndarray:
        """dg/dt at fixed q."""
        rate = self._rate(t)
        if self.coordinate == "angle":
            target = self._call(self.position, "position", t)
            return np.array([rate * np.array([-np.sin(target), -np.cos(target)])
                             @ self._values(q_local)])
        return np.array([-rate])
