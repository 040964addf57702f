"""Work-doing forces: loads, dampers and joint actuators.

Each element compiles to one or more :class:`AppliedTerm` objects acting on a few
coordinates of q (see :mod:`mbs.forces.kinematics`); the model sums their generalized forces
Q(t, q, v) (:class:`AppliedForces`). The schemes evaluate Q at points of their own choice
and report the work it does in every step (``Solution.work``); EM then satisfies the discrete
energy balance E_{n+1} - E_n = Q . (q_{n+1} - q_n) exactly.

Values may be constants, functions of t, or functions of (t, state) where the state is a
:class:`BodyState` (loads) or the joint coordinate and its rate (actuators). Functions are
checked at the initial state when the system is compiled, and at every evaluation: a wrong
shape or a non-finite value raises :class:`~mbs.errors.ForceFunctionError` naming the element.
"""

from __future__ import annotations

import importlib.util
import inspect
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from mbs.bodies.base import Body
from mbs.errors import ForceFunctionError, ModelError, ModelTypeError
from mbs.forces.base import Force, JointElement
from mbs.forces.kinematics import LocalCoordinates, cross
from mbs.joints.base import perpendicular_pair
from mbs.time_span import within_span
from mbs.validation import as_scalar, as_vector

#: Relative step of the forward differences that give the Jacobian of a load that is a user
#: function of the body state (~sqrt(eps)).
STATE_DIFFERENCE_STEP = 1.5e-8


@dataclass(frozen=True)
class BodyState:
    """What a load function ``f(t, state)`` sees (world frame).

    Attributes
    ----------
    position, velocity : (3,)
        Of the load's point of application (the body's reference point by default).
    rotation : (3, 3) or None
        Columns d1, d2, d3 (rigid bodies).
    angular_velocity : (3,) or None
    """

    position: np.ndarray
    velocity: np.ndarray
    rotation: np.ndarray | None
    angular_velocity: np.ndarray | None


def _body_states(position: tuple[np.ndarray, np.ndarray], directors: np.ndarray | None,
                 qs: np.ndarray, vs: np.ndarray) -> list[BodyState]:
    """The :class:`BodyState` of a body point (affine map ``position``) and of the body's
    frame (local director positions, None for point masses) at each row of local (qs, vs),
    computed for all rows at once."""
    matrix, offset = position
    points, velocities = qs @ matrix.T + offset, vs @ matrix.T
    if directors is None:
        return [BodyState(x, u, None, None) for x, u in zip(points, velocities)]
    frames = qs[:, directors]  # (k, 3, 3), rows d_i
    spin = cross(frames, vs[:, directors]).sum(axis=1)
    omegas = np.linalg.solve(_batch_generator(frames), spin[:, :, None])[:, :, 0]
    return [BodyState(x, u, frame.T, omega)
            for x, u, frame, omega in zip(points, velocities, frames, omegas)]


#: Samples, bisections and relative size of :meth:`AppliedForces.jump_along`.
JUMP_SAMPLES, JUMP_BISECTIONS, JUMP_LEVEL = 33, 40, 1e-6


class AppliedTerm:
    """The generalized force of one element on its coordinates ``local.indices``."""

    def __init__(self, name: str, local: LocalCoordinates):
        self.name, self.local = name, local

    def evaluate(self, t: float, q: np.ndarray, v: np.ndarray, jacobian: bool):
        """(Q, dQ/dq, dQ/dv) on the local coordinates; the derivatives are None without
        ``jacobian`` (and may be None when they vanish)."""
        raise NotImplementedError


class AppliedForces:
    """Sum of the applied terms of a model: Q(t, q, v) and its derivatives.

    Dampers and actuators of one kind and layout are evaluated as one batch
    (:class:`EffortGroup`); loads and laws that read the body states one by one."""

    def __init__(self, n: int, terms: list[AppliedTerm]):
        self.n, self.terms = n, terms
        groups: dict[tuple, list] = {}
        self._single = []
        for term in terms:
            if isinstance(term, _EffortTerm) and term.bodies is None:
                groups.setdefault(EffortGroup.key(term), []).append(term)
            else:
                self._single.append(term)
        self._groups = [EffortGroup(members) for members in groups.values()]
        # the (row, column) pattern of every term's local block, in evaluation order
        blocks = [group.indices for group in self._groups] + [
            term.local.indices[None] for term in self._single]
        self._rows = np.concatenate([np.repeat(b, b.shape[1], axis=1).ravel() for b in blocks]
                                    ) if blocks else np.zeros(0, dtype=np.intp)
        self._columns = np.concatenate([np.tile(b, (1, b.shape[1])).ravel() for b in blocks]
                                       ) if blocks else np.zeros(0, dtype=np.intp)

    def __bool__(self) -> bool:
        return bool(self.terms)

    def _evaluate(self, t: float, q: np.ndarray, v: np.ndarray, jacobian: bool):
        out = np.zeros(self.n)
        by_q, by_v = [], []
        for group in self._groups:
            index = group.indices
            value, d_q, d_v = group.evaluate(t, q[index], v[index], jacobian)
            out += np.bincount(index.ravel(), weights=value.ravel(), minlength=self.n)
            if jacobian:
                by_q.append(d_q.ravel())
                by_v.append(d_v.ravel())
        for term in self._single:
            index = term.local.indices
            value, d_q, d_v = term.evaluate(t, q[index], v[index], jacobian)
            out[index] += value
            if jacobian:
                size = index.size * index.size
                by_q.append(np.zeros(size) if d_q is None else d_q.ravel())
                by_v.append(np.zeros(size) if d_v is None else d_v.ravel())
        return out, by_q, by_v

    def jump_along(self, t: float, start: tuple[np.ndarray, np.ndarray],
                   end: tuple[np.ndarray, np.ndarray]) -> tuple[str, float, float] | None:
        """The term whose force jumps along the straight path from state ``start`` = (q, v)
        to ``end`` at time t: (name, jump, largest |Q| on the path), or None.

        Each term's force is sampled at 33 points; the largest difference between neighbours
        is bisected 40 times (down to 1e-12 of the path). A Lipschitz force's difference
        shrinks with the interval; a jump (a relay's sign(s), a switch in the state) keeps
        its size, and stops Newton's method at every step size."""
        for term in self.terms:
            index = term.local.indices

            def force(s, index=index, term=term) -> np.ndarray:
                q = (1.0 - s) * start[0][index] + s * end[0][index]
                v = (1.0 - s) * start[1][index] + s * end[1][index]
                return np.asarray(term.evaluate(t, q, v, False)[0], dtype=float)

            samples = [force(s) for s in np.linspace(0.0, 1.0, JUMP_SAMPLES)]
            size = max(float(np.abs(f).max(initial=0.0)) for f in samples)
            gaps = [float(np.abs(b - a).max(initial=0.0)) for a, b in zip(samples, samples[1:])]
            worst = int(np.argmax(gaps))
            if size == 0.0 or gaps[worst] <= JUMP_LEVEL * size:
                continue
            left, right = worst / (JUMP_SAMPLES - 1), (worst + 1) / (JUMP_SAMPLES - 1)
            values = {left: samples[worst], right: samples[worst + 1]}
            for _ in range(JUMP_BISECTIONS):
                middle = 0.5 * (left + right)
                values[middle] = force(middle)
                if (np.abs(values[middle] - values[left]).max()
                        >= np.abs(values[right] - values[middle]).max()):
                    right = middle
                else:
                    left = middle
            jump = float(np.abs(values[right] - values[left]).max())
            if jump > JUMP_LEVEL * size:
                return term.name, jump, size
        return None

    def largest(self, t: float, q: np.ndarray, v: np.ndarray) -> tuple[str, float]:
        """The term with the largest generalized force at (t, q, v): (name, max |Q|)."""
        sizes = [(float(np.abs(term.evaluate(t, q[term.local.indices], v[term.local.indices],
                                             False)[0]).max(initial=0.0)), term.name)
                 for term in self.terms]
        size, name = max(sizes)
        return name, size

    def force(self, t: float, q: np.ndarray, v: np.ndarray) -> np.ndarray:
        """Q(t, q, v), shape (n,)."""
        return self._evaluate(t, q, v, False)[0]

    def force_and_derivatives(self, t: float, q: np.ndarray, v: np.ndarray, dense: bool):
        """(Q, dQ/dq, dQ/dv): dense (n, n) arrays or sparse CSR matrices."""
        out, by_q, by_v = self._evaluate(t, q, v, True)
        if dense:  # summed straight into the arrays: no sparse matrix per evaluation
            flat, size = self._rows * self.n + self._columns, self.n * self.n
            return out, *(np.bincount(flat, weights=np.concatenate(parts), minlength=size
                                      ).reshape(self.n, self.n) for parts in (by_q, by_v))
        shape = (self.n, self.n)
        d_q = sp.csr_matrix((np.concatenate(by_q), (self._rows, self._columns)), shape=shape)
        d_v = sp.csr_matrix((np.concatenate(by_v), (self._rows, self._columns)), shape=shape)
        return out, d_q, d_v


# -- user values ------------------------------------------------------------------------------
class _Value:
    """A constant, f(t) or f(t, *state) given by the user, checked on every evaluation."""

    def __init__(self, value, size: int, what: str, owner: str, state_names: str):
        self.what, self.owner, self.size = what, owner, size
        if callable(value):
            self.function, self.constant = value, None
            self.arguments = _positional_count(value, what, owner, state_names)
            self.uses_state = self.arguments > 1
        else:
            self.function, self.uses_state, self.arguments = None, False, 1
            try:
                self.constant = (as_vector(value, size, what, owner) if size > 1
                                 else as_scalar(value, what, owner))
            except ModelTypeError:
                kind = f"{size} numbers" if size > 1 else "a real number"
                raise ModelTypeError(f"{owner}: {what} must be {kind} or a function of t, got "
                                     f"{value!r}") from None

    def __call__(self, t: float, *state):
        if self.function is None:
            return self.constant
        t = within_span(t)
        try:
            result = self.function(t, *state[:self.arguments - 1])
        except Exception as exc:  # the user's code: report it with the element's name
            raise ForceFunctionError(f"{self.owner}: the {self.what} function raised "
                                     f"{type(exc).__name__} at t = {float(t)!r}: {exc}") from exc
        array = np.asarray(result, dtype=float) if _numeric(result) else None
        allowed = ((self.size,),) if self.size > 1 else ((), (1,))
        if array is None or array.shape not in allowed:
            raise ForceFunctionError(
                f"{self.owner}: the {self.what} function returned {result!r} at t = {float(t)!r}; "
                f"it must return " + ("a real number" if self.size == 1 else "a real 3-vector"
                                      if self.size == 3 else f"{self.size} real numbers"))
        if not np.all(np.isfinite(array)):
            raise ForceFunctionError(f"{self.owner}: the {self.what} function returned a "
                                     f"non-finite value {result!r} at t = {float(t)!r}")
        return array if self.size > 1 else float(array.reshape(-1)[0])


def _numeric(value) -> bool:
    """Whether ``value`` holds real numbers (integers or floats): not complex values (their
    imaginary parts would be dropped), strings ("0.1" converts, but is a bug in the law),
    booleans or None."""
    try:
        array = np.asarray(value)
        if array.dtype.kind == "O":  # Fractions, Decimals, numbers of other libraries
            items = array.reshape(-1).tolist()
            np.asarray(items, dtype=float)
            return not any(isinstance(item, (str, bytes, bool, complex)) or item is None
                           for item in items)
    except (TypeError, ValueError):
        return False
    return array.dtype.kind in "iuf"


def _positional_count(function: Callable, what: str, owner: str, state_names: str) -> int:
    """How many positional arguments ``function`` takes: 1 (t) or 1 + the count of
    ``state_names``, or any count in between that ends a group ("angle, rate | bodies"
    allows (t), (t, angle, rate) and (t, angle, rate, bodies))."""
    groups = [len(g.split(",")) for g in state_names.split("|")]
    allowed = [1] + [1 + sum(groups[:k + 1]) for k in range(len(groups))]
    try:
        parameters = list(inspect.signature(function).parameters.values())
    except (TypeError, ValueError):
        return 1  # builtins without a signature: f(t)
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    required = [p for p in parameters if p.kind in kinds and p.default is inspect.Parameter.empty]
    if any(p.kind == inspect.Parameter.VAR_POSITIONAL for p in parameters):
        return allowed[-1]
    if len(required) not in allowed:
        forms = " or ".join("(t" + "".join(", " + name.strip() for name in
                                           ",".join(state_names.split("|")).split(",")[:k - 1])
                            + ")" for k in allowed)
        raise ModelTypeError(f"{owner}: the {what} function must take {forms}, it takes "
                             f"{len(required)} arguments")
    return len(required)


# -- loads ------------------------------------------------------------------------------------
class Load(Force):
    """A force at a body point and/or a torque on a rigid body.

    Parameters
    ----------
    body : Body
    force, torque : 3-vector, f(t) or f(t, state), optional
        World components (or body components with ``frame="body"``); ``state`` is a
        :class:`BodyState`. A torque needs a rigid body.
    point : array_like (3,), optional
        Point of application (world, initial pose); the body's reference point by default.
    frame : {"world", "body"}
        Components of force and torque: fixed in space, or fixed in the body (thrusters).
    name : str, optional
        Unique in the system; by default ``force<k>`` with the first k not taken.
    """

    def __init__(self, body: Body, force=None, torque=None, point=None, frame: str = "world",
                 name: str | None = None):
        super().__init__(name)
        owner = f"Load {self.name!r}"
        if not isinstance(body, Body):
            raise ModelTypeError(f"{owner}: body must be a body, got {body!r}")
        if body.n_coordinates == 0:
            raise ModelError(f"{owner}: a load on the ground does no work; give a moving body")
        if force is None and torque is None:
            raise ModelError(f"{owner}: give a force, a torque or both")
        if frame not in ("world", "body"):
            raise ModelError(f"{owner}: frame must be 'world' or 'body', got {frame!r}")
        if (torque is not None or frame == "body") and not body.has_orientation:
            raise ModelError(f"{owner}: body {body.name!r} is a point mass; a torque or "
                             f"body-frame components need a RigidBody")
        self.body, self.frame = body, frame
        self.point = None if point is None else as_vector(point, 3, "point", owner)
        state = "state"
        self.force = None if force is None else _Value(force, 3, "force", owner, state)
        self.torque = None if torque is None else _Value(torque, 3, "torque", owner, state)

    def bodies_acted_on(self):
        return [self.body]

    def terms(self, context):
        return []

    def applied_terms(self, context) -> list[AppliedTerm]:
        offset = context.offsets[self.body.name]
        local = LocalCoordinates(np.arange(offset, offset + self.body.n_coordinates))
        point = self.body.reference_point() if self.point is None else self.point
        position = local.affine(context.point(self.body, point))
        directors = local.directors(offset if self.body.has_orientation else None)
        return [_LoadTerm(self.name, local, position, directors, self.force, self.torque,
                          self.frame == "body")]


class _LoadTerm(AppliedTerm):
    def __init__(self, name, local, position, directors, force, torque, body_frame):
        super().__init__(name, local)
        self.position, self.offset = position
        self.directors = directors
        self.force, self.torque, self.body_frame = force, torque, body_frame
        self.uses_state = any(v is not None and v.uses_state for v in (force, torque))

    def _values(self, t, qs, vs, value) -> np.ndarray | None:
        """The force or torque ``value`` at each row of (qs, vs), (k, 3), or None."""
        if value is None:
            return None
        if not self.uses_state:
            return np.broadcast_to(value(t), (qs.shape[0], 3))
        states = _body_states((self.position, self.offset), self.directors, qs, vs)
        return np.array([value(t, state) for state in states])

    def _generalized(self, t, qs, vs):
        """(Q, force, torque) at each row of the local (qs, vs): (k, n_local), (k, 3) or
        None, (k, 3) or None."""
        force, torque = self._values(t, qs, vs, self.force), self._values(t, qs, vs, self.torque)
        out = np.zeros(qs.shape)
        directors = None if self.directors is None else qs[:, self.directors]
        if force is not None:  # directors^T F = sum_i F_i d_i for body components
            world = np.einsum("kia,ki->ka", directors, force) if self.body_frame else force
            out += world @ self.position
        if torque is not None:
            world = np.einsum("kia,ki->ka", directors, torque) if self.body_frame else torque
            out[:, self.directors] += _batch_torque_coordinates(directors, world)
        return out, force, torque

    def evaluate(self, t, q, v, jacobian):
        values, forces, torques = self._generalized(t, q[None, :], v[None, :])
        value = values[0]
        force = None if forces is None else forces[0]
        torque = None if torques is None else torques[0]
        if not jacobian:
            return value, None, None
        if self.uses_state:
            return value, *_forward_differences(
                lambda qs, vs: self._generalized(t, qs, vs)[0], q, v, value)
        d_q = np.zeros((q.size, q.size))
        index = self.directors
        if force is not None and self.body_frame:  # d(B^T sum_k F_k d_k)/d d_k = F_k B^T
            for k in range(3):
                d_q[:, index[k]] += force[k] * self.position.T
        if torque is not None:
            directors = q[index]
            world = directors.T @ torque if self.body_frame else torque
            by_directors, by_torque = _batch_torque_coordinate_derivatives(
                directors[None], world[None])
            block = by_directors[0].reshape(9, 9)
            if self.body_frame:  # w = sum_k tau_k d_k: dw/dd_k = tau_k I
                block += np.einsum("iab,k->iakb", by_torque[0], torque).reshape(9, 9)
            flat = index.ravel()
            d_q[np.ix_(flat, flat)] += block
        return value, d_q, None


def _forward_differences(function, q, v, value, which: tuple[int, ...] = (0, 1)):
    """(dQ/dq, dQ/dv) of Q = ``function(q, v)`` (= ``value`` at (q, v)) by forward
    differences, each only if its index (0 for q, 1 for v) is in ``which`` (else None).
    ``function(qs, vs)`` evaluates Q at every row of (qs, vs) at once, (k, value.size): one
    call takes all the shifted states of a derivative."""
    derivatives = []
    for argument, index in ((q, 0), (v, 1)):
        if index not in which:
            derivatives.append(None)
            continue
        scale = max(float(np.max(np.abs(argument), initial=0.0)), 1.0)
        step = STATE_DIFFERENCE_STEP * scale
        shifted = np.tile(argument, (argument.size, 1))
        shifted[np.diag_indices(argument.size)] += step
        fixed = np.tile(v if index == 0 else q, (argument.size, 1))
        rows = function(shifted, fixed) if index == 0 else function(fixed, shifted)
        derivatives.append(((rows - value) / step).T)
    return derivatives


# -- scalar efforts: dampers and joint actuators ----------------------------------------------
class _EffortTerm(AppliedTerm):
    """Q = tau(t, s, s') J(q) for a scalar coordinate s(q) with s' = J(q) . v.

    The geometry is written for a batch of terms of one class (arrays with a leading axis
    over the terms, see :class:`EffortGroup`): subclasses keep their constant arrays in
    ``data`` (leading axis of length 1 for one term) and give s and J
    (:meth:`batch_coordinate`), the gradient of s (:meth:`batch_coordinate_gradient`) and
    the derivative of J (:meth:`batch_curvature`): dQ/dq = tau_s J (ds/dq)^T + tau_s' J
    (d(J.v)/dq)^T + tau dJ/dq and dQ/dv = tau_s' J J^T, exact also off the constraints,
    where Newton's iterates are.
    """

    def __init__(self, name, local, law, data: dict, bodies=None):
        super().__init__(name, local)
        self.law = law  # (t, s, rate, jacobian, bodies) -> (tau, dtau/ds, dtau/drate)
        self.data = data
        #: (qs, vs) -> per row, the BodyStates of the joint's bodies, when the law reads them
        self.bodies = bodies if getattr(law, "reads_bodies", False) else None

    @staticmethod
    def batch_coordinate(data: dict, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(s, J) of the terms at local coordinates q (k, size): shapes (k,), (k, size)."""
        raise NotImplementedError

    @staticmethod
    def batch_coordinate_gradient(data: dict, q: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """ds/dq of the terms at local q (k, size), given their rows J (k, size): J itself
        (default) where s is a distance, whose gradient J is."""
        return rows

    @staticmethod
    def batch_row_derivative(data: dict, q: np.ndarray) -> np.ndarray | None:
        """dJ/dq of the terms at local q (k, size): [k, a, c] = dJ_a/dq_c, (k, size, size);
        None where J is constant."""
        return None

    @classmethod
    def batch_curvature(cls, data: dict, q, v, effort, rate_slope, rows) -> np.ndarray | None:
        """tau dJ/dq + tau_s' J (dJ/dq v)^T: the part of dQ/dq from the turning of J."""
        d_row = cls.batch_row_derivative(data, q)
        if d_row is None:
            return None
        rate_gradient = np.einsum("kr,krc->kc", v, d_row)
        return (effort[:, None, None] * d_row
                + rate_slope[:, None, None] * rows[:, :, None] * rate_gradient[:, None, :])

    def coordinate(self, q: np.ndarray) -> tuple[float, np.ndarray]:
        """(s, J) of this term at its local coordinates q."""
        s, row = self.batch_coordinate(self.data, q[None, :])
        return float(s[0]), row[0]

    def _body_law_efforts(self, t, qs, vs, geometry=None) -> np.ndarray:
        """tau of a law that reads the body states at each row of (qs, vs), (k,): the
        geometry and the body states of all rows at once, then one law call per row
        (``geometry`` = (s, J) to use instead of those at qs)."""
        s, jacobians = self.batch_coordinate(self.data, qs) if geometry is None else geometry
        rates = np.einsum("ki,ki->k", jacobians, vs)
        states = self.bodies(qs, vs)
        return np.array([self.law(t, float(s[k]), float(rates[k]), False, states[k])[0]
                         for k in range(qs.shape[0])], dtype=float)

    def _evaluate_body_law(self, t, q, v, jacobian):
        """Q = tau J for a user law of the body states, with its Jacobian by forward
        differences: dQ/dq of Q itself, dQ/dv = J (dtau/dv)^T of the scalar tau only (s and
        J do not depend on v, so each v difference is one law call)."""
        coordinate = self.batch_coordinate(self.data, q[None, :])
        effort = self._body_law_efforts(t, q[None, :], v[None, :], coordinate)
        row = coordinate[1][0]
        value = effort[0] * row
        if not jacobian:
            return value, None, None

        def generalized(qs, vs):
            s, jacobians = self.batch_coordinate(self.data, qs)
            return self._body_law_efforts(t, qs, vs, (s, jacobians))[:, None] * jacobians

        def efforts(qs, vs):  # differences in v: s and J as at q
            count = qs.shape[0]
            at_q = (coordinate[0].repeat(count), coordinate[1].repeat(count, axis=0))
            return self._body_law_efforts(t, qs, vs, at_q)[:, None]

        by_q, _ = _forward_differences(generalized, q, v, value, which=(0,))
        _, by_v = _forward_differences(efforts, q, v, effort, which=(1,))
        return value, by_q, row[:, None] * by_v

    def evaluate(self, t, q, v, jacobian):
        if self.bodies is not None:
            return self._evaluate_body_law(t, q, v, jacobian)
        group = EffortGroup([self])
        value, d_q, d_v = group.evaluate(t, q[None, :], v[None, :], jacobian)
        return value[0], None if d_q is None else d_q[0], None if d_v is None else d_v[0]


def _stack(parts: list):
    """Concatenate batch arrays (or pairs of them, or Nones) along their leading axis."""
    if parts[0] is None:
        return None
    if isinstance(parts[0], tuple):
        return tuple(np.concatenate(column) for column in zip(*parts))
    return np.concatenate(parts)


class EffortGroup:
    """Terms of one :class:`_EffortTerm` class with equal local sizes and geometry layout,
    evaluated together: one batched geometry evaluation for all of them, one law call per
    term only for user functions (constant-coefficient dampers are vectorised too)."""

    def __init__(self, terms: list[_EffortTerm]):
        self.terms, self.kind = terms, type(terms[0])
        self.indices = np.stack([term.local.indices for term in terms])
        self.data = {key: _stack([term.data[key] for term in terms]) for key in terms[0].data}
        dampings = [getattr(term.law, "damping", None) for term in terms]
        self.damping = None if None in dampings else np.array(dampings)

    @staticmethod
    def key(term: _EffortTerm) -> tuple:
        """Terms with equal keys batch together."""
        return (type(term), term.local.size,
                tuple(key for key, value in term.data.items() if value is None))

    def evaluate(self, t: float, q: np.ndarray, v: np.ndarray, jacobian: bool):
        """Generalized forces (k, size) at local (q, v) of shape (k, size), and (if
        ``jacobian``) their derivatives (k, size, size)."""
        s, rows = self.kind.batch_coordinate(self.data, q)
        rate = np.einsum("ki,ki->k", rows, v)
        if self.damping is not None:
            effort, slope, rate_slope = -self.damping * rate, 0.0 * rate, -self.damping
        else:
            laws = [term.law(t, float(s[k]), float(rate[k]), jacobian)
                    for k, term in enumerate(self.terms)]
            effort, slope, rate_slope = (np.array(column, dtype=float) for column in
                                         zip(*laws))
        value = effort[:, None] * rows
        if not jacobian:
            return value, None, None
        gradient = self.kind.batch_coordinate_gradient(self.data, q, rows)
        d_q = slope[:, None, None] * rows[:, :, None] * gradient[:, None, :]
        outer = rows[:, :, None] * rows[:, None, :]
        extra = self.kind.batch_curvature(self.data, q, v, effort, rate_slope, rows)
        if extra is not None:
            d_q = d_q + extra
        return value, d_q, rate_slope[:, None, None] * outer


class _DampingLaw:
    """tau = -c s' (a class, not a closure, so that models pickle for process pools); its
    ``damping`` lets EffortGroup evaluate many dampers at once."""

    def __init__(self, damping: float):
        self.damping = damping

    def __call__(self, t, s, rate, jacobian, bodies=None):
        return -self.damping * rate, 0.0, -self.damping


class _UserLaw:
    """tau(t, s, s'[, bodies]) of a user's value with its slopes in s and s' by central
    differences (a class, not a closure, so that models pickle for process pools)."""

    def __init__(self, value: _Value):
        self.value = value
        self.reads_bodies = value.arguments == 4

    def __call__(self, t, s, rate, jacobian, bodies=None):
        value = self.value
        effort = value(t, s, rate, bodies)
        if not jacobian or not value.uses_state:
            return effort, 0.0, 0.0
        slopes = []
        for ds, dr in ((1.0, 0.0), (0.0, 1.0)):
            step = 1e-6 * max(abs(s) * ds + abs(rate) * dr, 1.0)
            plus = value(t, s + step * ds, rate + step * dr)
            minus = value(t, s - step * ds, rate - step * dr)
            slopes.append((plus - minus) / (2.0 * step))
        return effort, slopes[0], slopes[1]


def _affine(pair) -> tuple[np.ndarray, np.ndarray]:
    """An affine map (A, c) with a leading batch axis of length 1."""
    return pair[0][None], pair[1][None]


def _apply(pair: tuple[np.ndarray, np.ndarray], q: np.ndarray) -> np.ndarray:
    """Batched affine vectors A_k q_k + c_k, (k, 3)."""
    return np.einsum("kij,kj->ki", pair[0], q) + pair[1]


class _DistanceTerm(_EffortTerm):
    """s = |x_b - x_a| for two body points; J = D^T e with e the unit vector from a to b."""

    def __init__(self, name, local, relative, law):
        super().__init__(name, local, law, {"relative": _affine(relative)})

    @staticmethod
    def batch_coordinate(data, q):
        r = _apply(data["relative"], q)
        length = np.linalg.norm(r, axis=1)
        if not np.all(length > 0.0):
            raise ForceFunctionError("a damper's two points coincide: the direction of its "
                                     "force is undefined")
        return length, np.einsum("kij,ki->kj", data["relative"][0], r / length[:, None])

    @staticmethod
    def batch_curvature(data, q, v, effort, rate_slope, rows):
        matrix = data["relative"][0]
        r = _apply(data["relative"], q)
        length = np.linalg.norm(r, axis=1)
        e = r / length[:, None]
        projector = (np.eye(3)[None] - e[:, :, None] * e[:, None, :]) / length[:, None, None]
        d_row = np.einsum("kai,kab,kbj->kij", matrix, projector, matrix)  # dJ/dq
        relative_rate = np.einsum("kij,kj->ki", matrix, v)
        d_rate = np.einsum("ka,kab,kbj->kj", relative_rate, projector, matrix)  # d(J.v)/dq
        return (effort[:, None, None] * d_row
                + rate_slope[:, None, None] * rows[:, :, None] * d_rate[:, None, :])


def two_point_damper(name: str, context, body_a: Body, body_b: Body, point_a, point_b,
                     damping: float) -> AppliedTerm:
    """The applied term of a viscous damper between two body points
    (:class:`mbs.forces.Damper`, ``Spring(damping=...)``)."""
    local = LocalCoordinates(_coordinates(context, body_a, body_b))
    relative = (context.point(body_b, point_b) - context.point(body_a, point_a))
    return _DistanceTerm(name, local, local.affine(relative), _DampingLaw(damping))


def joint_damper_term(joint, context, damping: float, name: str) -> AppliedTerm:
    """The applied term of viscous damping of ``joint``'s relative motion about its axis
    (revolute, cylindrical) or along it (prismatic): :class:`JointDamper`, ``damping=`` of
    joints and torsion springs."""
    coordinate = "displacement" if type(joint).__name__ == "Prismatic" else "angle"
    return joint_effort_term(joint, context, _DampingLaw(damping), name, coordinate)


def _coordinates(context, *bodies: Body) -> np.ndarray:
    parts = [np.arange(context.offsets[b.name], context.offsets[b.name] + b.n_coordinates)
             for b in bodies]
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.intp)


#: Evaluate the geometry of joint-angle efforts and of torques on bodies with the compiled
#: kernels of :mod:`mbs.forces.angle_kernels` when numba can be imported (tests switch this
#: off to cover the NumPy form).
USE_ANGLE_KERNELS = True
_NUMBA_INSTALLED = importlib.util.find_spec("numba") is not None


def angle_kernels():
    """:mod:`mbs.forces.angle_kernels`, or None without numba or with
    :data:`USE_ANGLE_KERNELS` off."""
    if not (USE_ANGLE_KERNELS and _NUMBA_INSTALLED):
        return None
    from mbs.forces import angle_kernels as compiled  # imports numba: only when it is used

    return compiled


def _batch_generator(directors: np.ndarray) -> np.ndarray:
    """:func:`~mbs.forces.kinematics.rotation_generator` of a batch: directors (k, 3, 3) as
    rows -> (k, 3, 3)."""
    gram = np.einsum("kia,kib->kab", directors, directors)
    return np.einsum("kaa->k", gram)[:, None, None] * np.eye(3)[None] - gram


def _batch_torque_coordinates(directors: np.ndarray, torque: np.ndarray) -> np.ndarray:
    """:func:`~mbs.forces.kinematics.torque_coordinates` of a batch: directors (k, 3, 3)
    as rows, torques (k, 3) -> (k, 3, 3)."""
    compiled = angle_kernels()
    if compiled is not None:
        return compiled.torque_coordinates(directors, torque)
    c = np.linalg.solve(_batch_generator(directors), torque[:, :, None])[:, :, 0]
    return cross(c[:, None, :], directors)


def _batch_torque_coordinate_derivatives(directors: np.ndarray, torque: np.ndarray
                                         ) -> tuple[np.ndarray, np.ndarray]:
    """Derivatives of the rows Q_i = c x d_i of :func:`_batch_torque_coordinates`, c =
    K(D)^-1 w, for directors (k, 3, 3) as rows and world torques w (k, 3), at any (also not
    orthonormal) directors: (dQ_i[a]/dd_j[b] as (k, i, a, j, b), dQ_i[a]/dw[b] as (k, i, a,
    b)). With dK c = (2 c d_j^T - (d_j . c) I - d_j c^T) dd_j,

        dc = K^-1 (dw - sum_j (2 c d_j^T - (d_j . c) I - d_j c^T) dd_j),
        dQ_i = -[d_i]x dc + [c]x dd_i.
    """
    compiled = angle_kernels()
    if compiled is not None:
        return compiled.torque_coordinate_derivatives(directors, torque)
    inverse = np.linalg.inv(_batch_generator(directors))
    c = np.einsum("kab,kb->ka", inverse, torque)
    identity = np.eye(3)[None]
    d_kc = np.stack([2.0 * c[:, :, None] * directors[:, j, None, :]
                     - np.einsum("ka,ka->k", directors[:, j], c)[:, None, None] * identity
                     - directors[:, j, :, None] * c[:, None, :] for j in range(3)], axis=2)
    c_by_directors = -np.einsum("kab,kbjc->kajc", inverse, d_kc)  # (k, a, j, b)
    cross_d = np.stack([_batch_skew(directors[:, i]) for i in range(3)], axis=1)  # [d_i]x
    by_directors = -np.einsum("kiab,kbjc->kiajc", cross_d, c_by_directors)
    cross_c = _batch_skew(c)
    for i in range(3):
        by_directors[:, i, :, i, :] += cross_c
    by_torque = -np.einsum("kiab,kbc->kiac", cross_d, inverse)
    return by_directors, by_torque


class _AngleTerm(_EffortTerm):
    """s = the rotation of body b relative to body a about the joint axis (0 at the initial
    pose, in (-pi, pi]); J = (R_b - R_a)^T axis with R the torque maps of the bodies."""

    def __init__(self, name, local, law, axis, first, second, reference, directors_a,
                 directors_b, bodies=None):
        super().__init__(name, local, law, {
            "axis": _affine(axis), "first": _affine(first), "second": _affine(second),
            "reference": _affine(reference),
            "directors_a": None if directors_a is None else directors_a[None],
            "directors_b": None if directors_b is None else directors_b[None]}, bodies)

    @staticmethod
    def batch_coordinate(data, q):
        compiled = angle_kernels()
        if compiled is not None:
            return compiled.coordinate(data, q)
        e1, e2, f1, axis = (_apply(data[key], q)
                            for key in ("first", "second", "reference", "axis"))
        angle = np.arctan2(np.einsum("ki,ki->k", f1, e2), np.einsum("ki,ki->k", f1, e1))
        rows = np.zeros_like(q)
        batch = np.arange(q.shape[0])[:, None, None]
        for key, sign in (("directors_b", 1.0), ("directors_a", -1.0)):
            directors = data[key]
            if directors is not None:
                rows[batch, directors] += sign * _batch_torque_coordinates(
                    q[batch, directors], axis)
        return angle, rows

    @staticmethod
    def batch_coordinate_gradient(data, q, rows):
        """ds/dq of s = atan2(y, x), y = f1 . e2, x = f1 . e1 (all affine in q): along
        rotations it is J, off the orthonormal directors it is not."""
        compiled = angle_kernels()
        if compiled is not None:
            return compiled.gradient(data, q)
        e1, e2, f1 = (_apply(data[key], q) for key in ("first", "second", "reference"))
        maps = {key: data[key][0] for key in ("first", "second", "reference")}
        y, x = np.einsum("ki,ki->k", f1, e2), np.einsum("ki,ki->k", f1, e1)
        grad_y = (np.einsum("kai,ka->ki", maps["reference"], e2)
                  + np.einsum("kai,ka->ki", maps["second"], f1))
        grad_x = (np.einsum("kai,ka->ki", maps["reference"], e1)
                  + np.einsum("kai,ka->ki", maps["first"], f1))
        return (x[:, None] * grad_y - y[:, None] * grad_x) / (x * x + y * y)[:, None]

    @staticmethod
    def batch_row_derivative(data, q):
        """dJ/dq with J's rows c x d_i, c = K^-1 axis(q), exact at any directors
        (:func:`_batch_torque_coordinate_derivatives`)."""
        compiled = angle_kernels()
        if compiled is not None:
            return compiled.row_derivative(data, q)
        count, size = q.shape
        axis = _apply(data["axis"], q)
        axis_map = data["axis"][0]
        d_row = np.zeros((count, size, size))
        batch = np.arange(count)[:, None, None, None, None]
        for key, sign in (("directors_b", 1.0), ("directors_a", -1.0)):
            directors = data[key]
            if directors is None:
                continue
            frame = q[np.arange(count)[:, None, None], directors]
            by_directors, by_axis = _batch_torque_coordinate_derivatives(frame, axis)
            # distinct (row, column) pairs for each term: no repeated index in the sum
            d_row[batch, directors[:, :, :, None, None], directors[:, None, None, :, :]] += (
                sign * by_directors)
            flat_rows = directors.reshape(count, 9)
            d_row[np.arange(count)[:, None], flat_rows, :] += sign * np.einsum(
                "kiab,kbc->kiac", by_axis, axis_map).reshape(count, 9, size)
        return d_row


def _batch_skew(vectors: np.ndarray) -> np.ndarray:
    """[v]x for each row of (k, 3) vectors, (k, 3, 3)."""
    out = np.zeros(vectors.shape[:1] + (3, 3))
    out[:, 0, 1], out[:, 0, 2] = -vectors[:, 2], vectors[:, 1]
    out[:, 1, 0], out[:, 1, 2] = vectors[:, 2], -vectors[:, 0]
    out[:, 2, 0], out[:, 2, 1] = -vectors[:, 1], vectors[:, 0]
    return out


class _SlideTerm(_EffortTerm):
    """s = axis . r with r = x_b(P) - x_a(P) (0 at the initial pose) and the axis fixed in
    body a, both affine in q (axis = A q + a, r = R q + c); J = ds/dq = R^T axis + A^T r.

    The effort acts as the force pair +-tau axis at the two points, plus, through A^T r, the
    turning of body a's axis: the pair's moment r x tau axis is cancelled by axis x tau r, so
    the generalized force has no net moment at any q, also off the constraints, where the
    energy-momentum scheme evaluates it (the midpoint of a step): momentum maps stay
    conserved. s is quadratic in q, so J at the midpoint is its exact discrete gradient,
    J . (q_{n+1} - q_n) = s_{n+1} - s_n, and the effort's work per step is tau (s_{n+1} - s_n).
    On the constraints r is along the axis, and A^T r only loads body a's directors along the
    gradients of their orthonormality constraints."""

    def __init__(self, name, local, law, axis, relative, bodies=None):
        super().__init__(name, local, law, {"axis": _affine(axis),
                                            "relative": _affine(relative)}, bodies)

    @staticmethod
    def batch_coordinate(data, q):
        axis, r = _apply(data["axis"], q), _apply(data["relative"], q)
        return (np.einsum("ki,ki->k", axis, r),
                np.einsum("kij,ki->kj", data["relative"][0], axis)
                + np.einsum("kai,ka->ki", data["axis"][0], r))

    @staticmethod
    def batch_row_derivative(data, q):
        """dJ/dq = R^T A + A^T R, the constant Hessian of s."""
        mixed = np.einsum("kai,kaj->kij", data["relative"][0], data["axis"][0])
        return mixed + np.transpose(mixed, (0, 2, 1))


def joint_effort_term(joint, context, law, name: str, coordinate: str,
                      local: LocalCoordinates | None = None) -> AppliedTerm:
    """The applied term of an effort on ``joint``'s rotation (``coordinate`` "angle") or
    translation ("displacement") about/along its axis, or on a universal joint's rotation
    about a cross axis ("angle_a", "angle_b"), written on the coordinates of the joint's two
    bodies or on ``local`` (coordinates that include them)."""
    body_a, body_b = joint.body_a, joint.body_b
    if local is None:
        local = LocalCoordinates(_coordinates(context, body_a, body_b))
    if coordinate in ("angle_a", "angle_b"):
        return _cross_angle_term(joint, context, law, name, coordinate, local)
    axis = local.affine(context.vector(body_a, joint.axis))
    states = [None if body.n_coordinates == 0 else
              (local.affine(context.point(body, body.reference_point())),
               _local_directors(context, local, body))
              for body in (body_a, body_b)]

    def bodies(qs, vs):
        per_body = [[None] * qs.shape[0] if state is None else
                    _body_states(state[0], state[1], qs, vs) for state in states]
        return list(zip(*per_body))

    if coordinate == "displacement":
        relative = local.affine(context.point(body_b, joint.point)
                                - context.point(body_a, joint.point))
        return _SlideTerm(name, local, law, axis, relative, bodies)
    e1, e2 = perpendicular_pair(joint.axis)
    return _AngleTerm(name, local, law, axis, local.affine(context.vector(body_a, e1)),
                      local.affine(context.vector(body_a, e2)),
                      local.affine(context.vector(body_b, e1)),
                      _local_directors(context, local, body_a),
                      _local_directors(context, local, body_b), bodies)


def _local_directors(context, local: LocalCoordinates, body: Body) -> np.ndarray | None:
    """The positions of ``body``'s directors among ``local``'s coordinates (None for a body
    without coordinates, the ground)."""
    return local.directors(context.offsets[body.name]) if body.n_coordinates else None


def _cross_angle_term(joint, context, law, name: str, coordinate: str,
                      local: LocalCoordinates) -> AppliedTerm:
    """A universal joint's rotation about one cross axis as an :class:`_AngleTerm`.

    "angle_a" turns axis_b about axis_a (fixed in body_a): the angle of body_b's axis_b from
    its initial direction, measured in body_a's plane (axis_b, axis_a x axis_b). "angle_b"
    turns body_b about its axis_b: the angle of body_a's axis_a as body_b sees it, from its
    initial direction in body_b's plane (axis_a, axis_a x axis_b), with the sign that makes
    it body_b's rotation relative to body_a. Each rate is (omega_b - omega_a) . axis, the
    axis staying perpendicular to the other cross axis, so the torque about that axis is
    the effort that does the angle's work."""
    own, other = ((joint.body_a, joint.body_b) if coordinate == "angle_a"
                  else (joint.body_b, joint.body_a))
    axis, cross_axis = ((joint.axis_a, joint.axis_b) if coordinate == "angle_a"
                        else (joint.axis_b, joint.axis_a))
    normal = np.cross(joint.axis_a, joint.axis_b)

    def on(body, vector):
        return local.affine(context.vector(body, vector))

    return _AngleTerm(name, local, law, on(own, axis), on(own, cross_axis), on(own, normal),
                      on(other, cross_axis), _local_directors(context, local, joint.body_a),
                      _local_directors(context, local, joint.body_b))


class _JointEffort(JointElement):
    """Common parts of the joint actuators and dampers."""

    coordinates: dict = {}  # joint type name -> "angle" or "displacement"
    what = "effort"

    def __init__(self, joint, name: str | None):
        super().__init__(name)
        self.coordinate = self._attach(joint, self.coordinates,
                                       f"use a Load for a {self.what} on a body instead")

    def terms(self, context):
        return []


class _JointActuator(_JointEffort):
    """An effort given by the user (number or function) about or along a joint's axis; the
    value is kept under the attribute named ``what`` ("torque" or "force")."""

    state_names = ""

    def __init__(self, joint, value, name: str | None):
        super().__init__(joint, name)
        setattr(self, self.what, _Value(value, 1, self.what, self.owner, self.state_names))

    def applied_terms(self, context):
        law = _UserLaw(getattr(self, self.what))
        return [joint_effort_term(self.joint, context, law, self.name, self.coordinate)]

    @property
    def reads_joint_angle(self) -> bool:
        """Whether the law is a function of the joint angle (which it receives wrapped into
        (-pi, pi])."""
        return self.coordinate == "angle" and getattr(self, self.what).uses_state


class JointTorque(_JointActuator):
    """A torque tau about the axis of a revolute (or cylindrical) joint, on body_b (and -tau
    on body_a): a motor. ``torque`` is a number, f(t), f(t, angle, rate) with the joint
    angle (0 at the initial pose, in (-pi, pi]) and its rate -- PD laws and motor curves --
    or f(t, angle, rate, bodies) with ``bodies`` the :class:`BodyState` of body_a (None for
    the ground) and body_b at their centres of mass, for control laws that read the bodies'
    attitude (a reaction wheel's torque from the satellite's rotation)."""

    coordinates = {"Revolute": "angle", "Cylindrical": "angle"}
    what, state_names = "torque", "angle, rate | bodies"

    def __init__(self, joint, torque, name: str | None = None):
        super().__init__(joint, torque, name)


class JointForce(_JointActuator):
    """A force along the axis of a prismatic (or cylindrical) joint, on body_b (and its
    opposite on body_a). ``force`` is a number, f(t), f(t, displacement, rate) or
    f(t, displacement, rate, bodies) (see :class:`JointTorque`)."""

    coordinates = {"Prismatic": "displacement", "Cylindrical": "displacement"}
    what, state_names = "force", "displacement, rate | bodies"

    def __init__(self, joint, force, name: str | None = None):
        super().__init__(joint, force, name)


class JointDamper(_JointEffort):
    """Viscous damping of a joint's relative motion: torque -c angle' on revolute and
    cylindrical joints (about the axis), force -c displacement' on prismatic joints. Also
    created by ``damping=`` of :class:`~mbs.joints.Revolute` and
    :class:`~mbs.joints.Prismatic`."""

    coordinates = {"Revolute": "angle", "Cylindrical": "angle", "Prismatic": "displacement"}
    what = "damping"

    def __init__(self, joint, damping: float, name: str | None = None):
        super().__init__(joint, name)
        self.damping = as_scalar(damping, "damping", self.owner, positive=True)

    def applied_terms(self, context):
        return [joint_damper_term(self.joint, context, self.damping, self.name)]
