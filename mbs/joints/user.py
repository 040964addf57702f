"""User-defined holonomic constraints of arbitrary form.

Built-in joints are quadratic in q and get exact midpoint discrete derivatives. A user
constraint need not be: its discrete Jacobian is Gonzalez's discrete gradient (row-wise)

    D^G g_k = grad g_k(q_mid) + (g_k(q1) - g_k(q0) - grad g_k(q_mid).dq) dq / |dq|^2,

(over a step so short that the residual in brackets is round-off, Simpson's mean of grad g_k
along the step instead, whose directionality error is far below round-off),
which satisfies directionality but in general not the symmetry (orthogonality) condition,
so momentum conservation is then NOT guaranteed. The energy-momentum scheme also needs the
change of G(q) v over a step written exactly: it takes the mean Jacobian (G(q0) + G(q1)) / 2
on its velocity multipliers and a discrete gradient of mu . G(q) v (Gonzalez's correction of
the midpoint Hessian product), both equal to the midpoint forms for quadratic constraints, and
so conserves energy for constraints of any form.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np

from mbs.bodies.base import Body
from mbs.elements import Element
from mbs.errors import ForceFunctionError, ModelError, ModelTypeError
from mbs.validation import difference_mismatch

#: Relative step of the central differences for a missing constraint Hessian.
FINITE_DIFFERENCE_STEP = 1e-6
#: A Gonzalez residual below this many eps times the size of the terms it is computed from
#: is round-off (as for potentials, see :func:`mbs.forces.base.discrete_invariant_gradient`).
ROUNDOFF_FACTOR = 8.0


class UserConstraint(Element):
    """Constraint g(q_local) = 0 on the stacked coordinates of ``bodies``.

    Parameters
    ----------
    bodies : list of Body, or one Body
        Bodies whose coordinates (in this order) form ``q_local``.
    function : callable
        ``function(q_local) -> (k,)``; should be dimensionless / well scaled.
    jacobian : callable
        ``jacobian(q_local) -> (k, len(q_local))``.
    hessian : callable, optional
        ``hessian(q_local, multipliers) -> (len(q_local), len(q_local))``, the sum of
        multiplier-weighted Hessians; central differences of ``jacobian`` when omitted.
    name : str, optional
        Unique in the system; by default ``constraint<k>`` with the first k not taken.
    """

    kind = "constraint"
    #: Whether g depends on time (drives); a user constraint does not.
    time_dependent = False
    #: Whether g is known to be quadratic in q (at fixed t), where the midpoint forms of its
    #: discrete derivatives are exact (drives); a user constraint may be of any form.
    quadratic = False

    def __init__(self, bodies: list, function: Callable, jacobian: Callable,
                 hessian: Callable | None = None, name: str | None = None):
        super().__init__(name)
        owner = f"UserConstraint {self.name!r}"
        bodies = [bodies] if isinstance(bodies, Body) else list(bodies)
        if not bodies:
            raise ModelError(f"{owner}: give at least one body")
        for body in bodies:
            if not isinstance(body, Body) or body.n_coordinates == 0:
                raise ModelTypeError(f"{owner}: {body!r} is not a body with coordinates")
        if len({id(b) for b in bodies}) != len(bodies):
            raise ModelError(f"{owner}: a body is listed twice")
        if not callable(function) or not callable(jacobian):
            raise ModelTypeError(f"{owner}: function and jacobian must be callables")
        self.bodies = bodies
        self.function, self.jacobian_function, self.hessian_function = (
            function, jacobian, hessian)
        q0 = np.concatenate([b.initial_coordinates() for b in bodies])
        self.n_equations = self._checked(function, "function", q0).size

    def _checked(self, function: Callable, what: str, *arguments, shape=None) -> np.ndarray:
        """``function(*arguments)`` as a float array (of ``shape`` if given); a failing
        function, a value of another shape (a matrix must have exactly ``shape``: its
        transpose is an error, not reshaped) or a non-finite value raises
        :class:`~mbs.errors.ForceFunctionError` naming the constraint (as for the functions
        of loads and user potentials: during a run, :func:`mbs.simulate` adds the step and
        hands over the steps done)."""
        owner = f"{type(self).__name__} {self.name!r}"
        if not np.isfinite(arguments[0]).all():
            raise ForceFunctionError(f"{owner}: the local coordinates are not finite "
                                     f"({arguments[0]}): the state is not finite (a step that "
                                     f"blew up, or NaN in the coordinates given), not the {what}",
                                     hint="reduce the step size: the state blew up")
        try:
            value = function(*arguments)
        except Exception as exc:
            raise ForceFunctionError(f"{owner}: the {what} raised {type(exc).__name__} ({exc}); it "
                             f"must return a float array") from exc
        try:
            array = None if value is None else np.atleast_1d(np.asarray(value, dtype=float))
        except (TypeError, ValueError):
            array = None
        if array is None:
            raise ForceFunctionError(f"{owner}: the {what} returned {value!r:.80}"
                                     f"{' (no return statement?)' if value is None else ''}; "
                                     f"it must return a float array")
        if shape is not None and (array.size != int(np.prod(shape))
                                  or (len(shape) == 2 and array.shape != shape)):
            meaning = ("local coordinates squared" if what == "hessian function" else
                       f"{shape[0]} equations" if len(shape) == 1 else
                       f"{shape[0]} equations, {shape[1]} local coordinates")
            raise ForceFunctionError(f"{owner}: the {what} returned shape {np.shape(value)}; "
                                     f"it must return shape {shape} ({meaning})")
        if not np.isfinite(array).all():
            raise ForceFunctionError(f"{owner}: the {what} returned non-finite values at local "
                             f"coordinates {arguments[0]}; it must return finite values")
        return array if shape is None else array.reshape(shape)

    @functools.cached_property
    def position_columns(self) -> np.ndarray:
        """The local coordinates that are body positions (the first three of each body)."""
        starts = np.cumsum([0] + [body.n_coordinates for body in self.bodies[:-1]])
        return (starts[:, None] + np.arange(3)).ravel()

    def difference_sizes(self, q_local: np.ndarray) -> np.ndarray:
        """The natural size of each local coordinate, below which central differences do
        not shrink their step (it is relative to max(|q_k|, size_k)): 1 for the director
        entries; for positions the spread of the bodies' positions, or one body's distance
        from the origin, or 1 where that is zero too. A mechanism of micrometres is then
        not stepped by an absolute 1e-6."""
        positions = q_local[self.position_columns].reshape(-1, 3)
        spread = float(np.max(np.linalg.norm(positions - positions[0], axis=1)))
        size = spread or float(np.max(np.linalg.norm(positions, axis=1))) or 1.0
        sizes = np.ones(q_local.size)
        sizes[self.position_columns] = size
        return sizes

    def difference_steps(self, q_local: np.ndarray) -> np.ndarray:
        """Steps of central differences of the Jacobian: :data:`FINITE_DIFFERENCE_STEP`
        times max(|q_k|, size_k) (:meth:`difference_sizes`), except that a position far
        from the origin against the mechanism's size s is stepped by (eps |q_k| s^2)^(1/3),
        which balances the round-off of q_k + step (eps |q_k| / step) against the
        truncation error (step / s)^2, instead of by 1e-6 |q_k|, which can exceed s."""
        sizes = self.difference_sizes(q_local)
        steps = FINITE_DIFFERENCE_STEP * np.maximum(np.abs(q_local), sizes)
        positions = self.position_columns
        size = sizes[positions]
        balanced = np.cbrt(np.finfo(float).eps * np.abs(q_local[positions]) * size**2)
        steps[positions] = np.maximum(FINITE_DIFFERENCE_STEP * size,
                                      np.minimum(steps[positions], balanced))
        return steps

    def derivative_mismatches(self, q_local: np.ndarray) -> list[tuple[str, float]]:
        """The Jacobian (and the Hessian, if given, with unit multipliers) against central
        differences of the function (of the Jacobian) at ``q_local``: [(name, relative
        mismatch)]."""
        steps = self.difference_steps(q_local)
        out = [("jacobian", difference_mismatch(self.value, self.jacobian(q_local), q_local,
                                                steps=steps))]
        if self.hessian_function is not None:
            ones = np.ones(self.n_equations)
            out.append(("hessian", difference_mismatch(
                lambda q: ones @ self.jacobian(q), self.hessian_product(q_local, ones),
                q_local, steps=steps)))
        return out

    def values_at(self, q_local: np.ndarray) -> None:
        """Evaluate the user's functions at ``q_local`` alone (no differences beside it): a
        value of the wrong shape or type raises ForceFunctionError there."""
        self.value(q_local)
        self.jacobian(q_local)
        if self.hessian_function is not None:
            self.hessian_product(q_local, np.ones(self.n_equations))

    # evaluation on the local coordinates -------------------------------------------------
    def value(self, q_local: np.ndarray, t: float = 0.0) -> np.ndarray:
        return self._checked(self.function, "function", q_local, shape=(self.n_equations,))

    def jacobian(self, q_local: np.ndarray, t: float = 0.0) -> np.ndarray:
        return self._checked(self.jacobian_function, "jacobian function", q_local,
                          shape=(self.n_equations, q_local.size))

    def hessian_product(self, q_local: np.ndarray, multipliers: np.ndarray, t: float = 0.0
                        ) -> np.ndarray:
        if self.hessian_function is not None:
            return self._checked(self.hessian_function, "hessian function", q_local,
                              multipliers, shape=(q_local.size, q_local.size))
        n = q_local.size
        out = np.zeros((n, n))
        for k, step in enumerate(self.difference_steps(q_local)):
            e = np.zeros(n)
            e[k] = step
            out[:, k] = multipliers @ (self.jacobian(q_local + e, t)
                                       - self.jacobian(q_local - e, t)) / (2 * step)
        return 0.5 * (out + out.T)

    def mean_jacobian(self, q0: np.ndarray, q1: np.ndarray, t: float = 0.0) -> np.ndarray:
        """(G(q0) + G(q1)) / 2: with :meth:`hessian_correction`, it makes the energy-momentum
        scheme's velocity-constraint terms sum to the change of G(q) v over the step, so
        that its energy stays exact for constraints of any form."""
        return 0.5 * (self.jacobian(q0, t) + self.jacobian(q1, t))

    def hessian_correction(self, q0: np.ndarray, q1: np.ndarray, multipliers: np.ndarray,
                           vector: np.ndarray, t: float = 0.0) -> np.ndarray:
        """Gonzalez's correction that turns (sum_k mu_k d2 g_k(q_mid)) v into a discrete
        gradient of f(q) = mu . G(q) v: f(q1) - f(q0) = (H(q_mid) v + this) . (q1 - q0)."""
        dq = q1 - q0
        norm2 = dq @ dq
        if norm2 == 0.0:
            return np.zeros_like(dq)
        start, end = self.jacobian(q0, t), self.jacobian(q1, t)
        change = multipliers @ ((end - start) @ vector)
        curvature = self.hessian_product(0.5 * (q0 + q1), multipliers, t) @ vector
        residual = change - curvature @ dq
        terms = np.abs(multipliers) @ ((np.abs(start) + np.abs(end)) @ np.abs(vector))
        if abs(residual) <= ROUNDOFF_FACTOR * np.finfo(float).eps * terms:
            # round-off over a tiny |dq|^2: Simpson's mean of the gradient of mu . G(q) v
            # along the step instead, whose directionality error O(|dq|^5) is below it
            return (self.hessian_product(q0, multipliers, t) @ vector
                    + self.hessian_product(q1, multipliers, t) @ vector
                    - 2.0 * curvature) / 6.0
        return residual * dq / norm2

    def discrete_jacobian(self, q0: np.ndarray, q1: np.ndarray, t: float = 0.0) -> np.ndarray:
        mid = 0.5 * (q0 + q1)
        jac = self.jacobian(mid)
        dq = q1 - q0
        norm2 = dq @ dq
        if norm2 == 0.0:
            return jac
        start, end = self.value(q0), self.value(q1)
        residual = end - start - jac @ dq
        # the size of the terms g is summed from, estimated by |G| times the coordinates'
        # sizes: a residual below their round-off, divided by a tiny |dq|^2, is noise
        terms = np.abs(jac) @ np.maximum(np.abs(mid), self.difference_sizes(mid))
        noise = np.abs(residual) <= ROUNDOFF_FACTOR * np.finfo(float).eps * (
            np.abs(start) + np.abs(end) + terms)
        if noise.any():  # Simpson's mean of G along the step there (error O(|dq|^5))
            simpson = (self.jacobian(q0) + 4.0 * jac + self.jacobian(q1)) / 6.0
            jac = np.where(noise[:, None], simpson, jac)
            residual = np.where(noise, 0.0, residual)
        return jac + np.outer(residual, dq) / norm2
