"""The compiled numerical model: everything a solver needs, nothing it does not.

A :class:`Model` is produced by :meth:`mbs.System.compile`. It holds the constant mass matrix,
the constraint table, the potential groups and the index maps, and evaluates every derivative
and discrete derivative the integrators of seeds 003 and 004 need. Solvers see only this.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from mbs.errors import (
    InconsistentInitialStateError,
    ModelError,
    ModelTypeError,
    UnknownNameError,
    warn_user,
)
from mbs.potential_group import PotentialGroup
from mbs.quadratic import QuadraticTable
from mbs.validation import as_scalar, as_vector

#: Max-norm of g(q0) accepted as consistent (constraints are scaled to be dimensionless).
POSITION_TOLERANCE = 1e-10

#: Singular values below this fraction of the largest one count as zero (the rank analysis
#: of compile and the diagnostics of broken redundancy).
RANK_TOLERANCE = 1e-9
#: Max-norm of G M^-1 p0 accepted, relative to max_k sum_i |G_ki v_i|.
VELOCITY_TOLERANCE = 1e-10
#: Systems with more coordinates than this use sparse factorisations: below it the dense LU
#: of the Newton matrix is cheaper, above it SuperLU quickly wins.
DENSE_LIMIT = 150
#: Entries of the arrays of one block of states in :meth:`Model.constraint_residual_norms`.
RESIDUAL_BLOCK = 1 << 22


@dataclass(frozen=True)
class BodyInfo:
    """Static description of a body in the compiled model (read by solutions and viz)."""

    name: str
    kind: str  # "rigid" or "point"
    coordinates: slice
    mass: float
    inertia: np.ndarray | None = None
    euler_tensor: np.ndarray | None = None
    shape: dict | None = None


@dataclass(frozen=True)
class ElementInfo:
    """Static description of a joint or force: its type, bodies, rows and geometry."""

    name: str
    type: str
    bodies: tuple[str, ...]
    rows: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=int))
    data: dict = field(default_factory=dict)


@dataclass
class UserConstraintBlock:
    """A user (non-quadratic) constraint with the model indices of its local coordinates."""

    constraint: object
    indices: np.ndarray
    rows: np.ndarray


@dataclass(frozen=True)
class Redundancy:
    """Redundant constraints found in one block of the joint graph.

    ``removed`` lists the equations dropped at compile time as (joint name, equation index
    within the joint) and ``removed_labels`` names them, e.g. ``"hinge[4] (parallel axes,
    2)"``; ``consistent`` tells whether they hold at the initial state (a consistent
    redundancy, e.g. a planar four-bar built with 3-D revolute joints).
    """

    count: int
    joints: tuple[str, ...]
    removed: tuple[tuple[str, int], ...] = ()
    consistent: bool = True
    removed_labels: tuple[str, ...] = ()


class Model:
    """Compiled mechanical system with constant mass matrix and holonomic constraints.

    Sizes ``n`` (coordinates) and ``m`` (constraints); constant ``mass_matrix`` (scipy.sparse
    CSR) and ``inverse_mass_matrix``; ``potential*``, ``constraint*`` and their discrete
    derivatives; observables; index maps (``coordinates(name)``, ``constraint_rows``).
    Every evaluation is vectorised per element type.
    """

    def __init__(self, *, n: int, mass_matrix: sp.csr_matrix,
                 inverse_mass_matrix: sp.csr_matrix, constraint_table: QuadraticTable,
                 user_constraints: list[UserConstraintBlock],
                 potential_groups: list[PotentialGroup], bodies: list[BodyInfo],
                 joints: list[ElementInfo], forces: list[ElementInfo],
                 q0: np.ndarray, p0: np.ndarray, point_blocks: np.ndarray,
                 director_blocks: np.ndarray, degrees_of_freedom: int,
                 redundancies: list[Redundancy], gravity: np.ndarray | None,
                 constraint_rows: dict[str, np.ndarray],
                 removed_constraints: QuadraticTable | None = None,
                 removed_names: tuple[str, ...] = (),
                 applied_forces=None):
        self.n = n
        #: Work-doing forces Q(t, q, v) (:class:`mbs.forces.applied.AppliedForces`), or None.
        self.applied_forces = applied_forces if applied_forces else None
        #: joint name -> {"angle" | "displacement": its kinematics}, set by the compiler
        self.joint_coordinates: dict[str, dict] = {}
        #: drive name -> (joint name, "angle" | "displacement"), set by the compiler
        self.drives: dict[str, tuple[str, str]] = {}
        self.mass_matrix = mass_matrix
        self.inverse_mass_matrix = inverse_mass_matrix
        self._table = constraint_table
        self._user = user_constraints
        self.m = constraint_table.n_rows + sum(b.rows.size for b in user_constraints)
        self.potential_groups = potential_groups
        self.bodies = bodies
        self.joints = joints
        self.forces = forces
        self._rigid = [body.name for body in bodies if body.kind == "rigid"]
        #: The coordinates of the rigid bodies' directors d1, d2, d3 (9 per body, in body
        #: order).
        self.director_columns = (3 * np.asarray(director_blocks, dtype=np.int64)[:, None]
                                 + np.arange(3)).ravel()
        self._q0 = q0
        largest = float(np.max(np.abs(q0))) if q0.size else 0.0
        self._length_scale = largest if largest > 0.0 else 1.0
        self._p0 = p0
        self.point_blocks = point_blocks
        self.director_blocks = director_blocks
        self.degrees_of_freedom = degrees_of_freedom
        self.redundancies = redundancies
        self.gravity = gravity
        self._constraint_rows = constraint_rows
        # Redundant equations dropped at compile time: still checked (and enforced by
        # projection) for the initial state, so an inconsistent redundancy is caught.
        self._removed = (removed_constraints if removed_constraints is not None
                         else constraint_table.rows(np.zeros(0, dtype=int)))
        self._removed_names = tuple(removed_names)  # the element of each removed row
        self.constraints_are_quadratic = not user_constraints
        #: Remarks from compile() that are not errors (e.g. bodies connected to nothing).
        self.notes: list[str] = []
        self._body_by_name = {b.name: b for b in bodies}

    # -- index maps -----------------------------------------------------------------------
    def coordinates(self, name: str) -> slice:
        """Slice of q belonging to body ``name``."""
        try:
            return self._body_by_name[name].coordinates
        except KeyError:
            raise UnknownNameError(f"no body named {name!r}; bodies: "
                           f"{[b.name for b in self.bodies]}") from None

    def body(self, name: str) -> BodyInfo:
        """Static information of body ``name``."""
        self.coordinates(name)
        return self._body_by_name[name]

    @property
    def constraint_rows(self) -> dict[str, np.ndarray]:
        """Rows of g owned by each body (internal constraints) and joint."""
        return dict(self._constraint_rows)

    @property
    def is_large(self) -> bool:
        """True when solvers should use sparse linear algebra."""
        return self.n > DENSE_LIMIT

    # -- matrices in the format solvers should use (dense ndarray when small) -------------
    @property
    def dense(self) -> bool:
        """True when the model is small enough for dense linear algebra."""
        return not self.is_large

    def mass_operator(self):
        """Constant mass matrix, dense when :attr:`dense`."""
        if not hasattr(self, "_mass_op"):
            self._mass_op = self.mass_matrix.toarray() if self.dense else self.mass_matrix
            self._inverse_mass_op = (self.inverse_mass_matrix.toarray() if self.dense
                                     else self.inverse_mass_matrix)
        return self._mass_op

    def inverse_mass_operator(self):
        """Constant inverse mass matrix, dense when :attr:`dense`."""
        self.mass_operator()
        return self._inverse_mass_op

    def jacobian_matrix(self, q: np.ndarray, t: float = 0.0):
        """G(q, t), dense when :attr:`dense`, else sparse (t matters for drives only)."""
        if not self.dense:
            return self.constraint_jacobian(q, t)
        if not self._user:
            return self._table.jacobian_dense(q)
        out = np.zeros((self.m, self.n))
        out[:self._table.n_rows] = self._table.jacobian_dense(q)
        for block in self._user:
            out[np.ix_(block.rows, block.indices)] = block.constraint.jacobian(
                q[block.indices], t)
        return out

    def hessian_product_matrix(self, q: np.ndarray, multipliers: np.ndarray, t: float = 0.0):
        """sum_k mult_k d2 g_k, dense when :attr:`dense`."""
        if not self.dense:
            return self.constraint_hessian_product(q, multipliers, t)
        out = self._table.hessian_product_dense(multipliers[:self._table.n_rows])
        for block in self._user:
            index = np.ix_(block.indices, block.indices)
            out[index] += block.constraint.hessian_product(q[block.indices],
                                                           multipliers[block.rows], t)
        return out

    def hessian_vector_matrix(self, q: np.ndarray, w: np.ndarray, t: float = 0.0):
        """D_q[G(q) w], dense when :attr:`dense`."""
        if not self.dense:
            return self.constraint_hessian_vector_product(q, w, t)
        if not self._user:
            return self._table.hessian_vector_product_dense(w)
        out = np.zeros((self.m, self.n))
        out[:self._table.n_rows] = self._table.hessian_vector_product_dense(w)
        for block in self._user:
            out[np.ix_(block.rows, block.indices)] = self._user_hessian_vector(block, q, w, t)
        return out

    def potential_hessian_matrix(self, q: np.ndarray):
        """Hessian of V, dense when :attr:`dense`."""
        if self.dense:
            out = np.zeros((self.n, self.n))
            for group in self.potential_groups:
                out += group.hessian_dense(q)
            return out
        return self.potential_hessian(q)

    def potential_discrete_gradient_jacobian_matrix(self, q0: np.ndarray, q1: np.ndarray):
        """d D^G V(q0, q1) / d q1 (see PotentialGroup.discrete_gradient_jacobian), dense when
        :attr:`dense`."""
        out = np.zeros((self.n, self.n)) if self.dense else sp.csr_matrix((self.n, self.n))
        for group in self.potential_groups:
            out = out + group.discrete_gradient_jacobian(q0, q1, self.dense)
        return out

    def discrete_jacobian_matrix(self, q0: np.ndarray, q1: np.ndarray, t: float = 0.0):
        """D^G g(q0, q1) (at time t for drives), dense when :attr:`dense`."""
        return self._two_point_jacobian(q0, q1, t, "discrete_jacobian", self.dense)

    @property
    def quadratic_forms_only(self) -> bool:
        """Whether every constraint is quadratic in q (at fixed t, as drives are): then the
        midpoint forms of the discrete derivatives are exact, and
        :meth:`mean_jacobian_matrix` is :meth:`discrete_jacobian_matrix`."""
        return all(block.constraint.quadratic for block in self._user)

    def mean_jacobian_matrix(self, q0: np.ndarray, q1: np.ndarray, t: float = 0.0):
        """(G(q0) + G(q1)) / 2 for the user constraints and the midpoint Jacobian (equal to it)
        for the quadratic ones, dense when :attr:`dense` (see
        :meth:`mbs.joints.UserConstraint.mean_jacobian`)."""
        return self._two_point_jacobian(q0, q1, t, "mean_jacobian", self.dense)

    def _two_point_jacobian(self, q0: np.ndarray, q1: np.ndarray, t: float, kind: str,
                            dense: bool):
        """The midpoint Jacobian of the quadratic rows, with each user block's ``kind``
        ("discrete_jacobian" or "mean_jacobian") of (q0, q1) in its rows; dense or sparse."""
        middle = (self._table.jacobian_dense(0.5 * (q0 + q1)) if dense
                  else self._table.jacobian(0.5 * (q0 + q1)))
        if not self._user:
            return middle
        blocks = [(block, getattr(block.constraint, kind)(q0[block.indices],
                                                          q1[block.indices], t))
                  for block in self._user]
        if not dense:
            return sp.vstack([middle, self._user_rows([local for _, local in blocks])]
                             ).tocsr()
        out = np.zeros((self.m, self.n))
        out[:self._table.n_rows] = middle
        for block, local in blocks:
            out[np.ix_(block.rows, block.indices)] = local
        return out

    def discrete_hessian_vector(self, q0: np.ndarray, q1: np.ndarray,
                                multipliers: np.ndarray, w: np.ndarray, t: float = 0.0
                                ) -> np.ndarray:
        """A discrete gradient of f(q) = multipliers . G(q) w between q0 and q1,
        f(q1) - f(q0) = (this) . (q1 - q0): (sum_k mult_k d2 g_k(q_mid)) w, exact for the
        quadratic rows, with Gonzalez's correction for the other user rows
        (:meth:`hessian_corrections`)."""
        out = self.hessian_product_matrix(0.5 * (q0 + q1), multipliers, t) @ w
        return out + self.hessian_corrections(q0, q1, multipliers, w, t)

    def hessian_corrections(self, q0: np.ndarray, q1: np.ndarray, multipliers: np.ndarray,
                            w: np.ndarray, t: float = 0.0) -> np.ndarray:
        """The sum of the user constraints' corrections of :meth:`discrete_hessian_vector`
        (:meth:`mbs.joints.UserConstraint.hessian_correction`; zero for quadratic ones)."""
        out = np.zeros(self.n)
        for block in self._user:
            if not block.constraint.quadratic:
                out[block.indices] += block.constraint.hessian_correction(
                    q0[block.indices], q1[block.indices], multipliers[block.rows],
                    w[block.indices], t)
        return out

    @property
    def quadratic_constraint_table(self) -> QuadraticTable | None:
        """The constraint table when every constraint is quadratic (else None): solvers build
        their polynomial step equations from it (:mod:`mbs.backends.polynomial`)."""
        return None if self._user else self._table

    def constant_potential_gradient(self) -> np.ndarray | None:
        """grad V when V is linear in q (uniform gravity, or no potential), else None."""
        if not all(group.linear_in_q for group in self.potential_groups):
            return None
        out, origin = np.zeros(self.n), np.zeros(self.n)
        for group in self.potential_groups:
            out += group.gradient(origin)
        return out

    # -- mass -----------------------------------------------------------------------------
    @property
    def has_applied_forces(self) -> bool:
        """Whether loads, dampers or actuators act (the model is then not conservative)."""
        return self.applied_forces is not None

    @property
    def non_conservative(self) -> bool:
        """Whether loads, dampers, actuators or drives do work on the system."""
        return self.has_applied_forces or bool(self.drives)

    def applied_force(self, t: float, q: np.ndarray, v: np.ndarray) -> np.ndarray:
        """Generalized force Q(t, q, v) of every load, damper and actuator, shape (n,)."""
        if self.applied_forces is None:
            return np.zeros(self.n)
        return self.applied_forces.force(t, q, v)

    def applied_force_derivatives(self, t: float, q: np.ndarray, v: np.ndarray):
        """(Q, dQ/dq, dQ/dv), the derivatives dense when :attr:`dense`."""
        if self.applied_forces is None:
            zero = np.zeros((self.n, self.n)) if self.dense else sp.csr_matrix((self.n,) * 2)
            return np.zeros(self.n), zero, zero
        return self.applied_forces.force_and_derivatives(t, q, v, self.dense)

    def joint_coordinate(self, name: str, q: np.ndarray, v: np.ndarray,
                         coordinate: str | None = None) -> tuple[float, float, np.ndarray]:
        """(position, rate, row) of joint ``name``'s coordinate at (q, v): the angle about
        its axis (0 at the initial pose, in (-pi, pi]) for revolute and cylindrical joints,
        the displacement along it for prismatic ones (``coordinate="displacement"`` for the
        slide of a cylindrical joint, as for :class:`~mbs.joints.Drive`), a universal
        joint's rotation about axis_a ("angle_a", the default) or axis_b ("angle_b", see
        :meth:`mbs.Solution.joint`); ``row`` (n,) gives rate = row . v."""
        term = self._joint_coordinate_term(name, coordinate)
        index = term.local.indices
        position, local_row = term.coordinate(q[index])
        row = np.zeros(self.n)
        row[index] = local_row
        return position, float(row @ v), row

    def joint_coordinate_path(self, name: str, q: np.ndarray, v: np.ndarray,
                              coordinate: str | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(positions, rates), each (k,), of :meth:`joint_coordinate` at the k states of
        ``q`` and ``v`` (k, n), in one evaluation."""
        term = self._joint_coordinate_term(name, coordinate)
        index = term.local.indices
        positions, rows = term.batch_coordinate(term.data, q[:, index])
        return positions, np.einsum("ki,ki->k", rows, v[:, index])

    def _joint_coordinate_term(self, name: str, coordinate: str | None):
        coordinates = self.joint_coordinates.get(name)
        if coordinates is None:
            with_axis = ", ".join(self.joint_coordinates) or "none"
            if name not in self._constraint_rows:
                raise UnknownNameError(f"no joint {name!r}; joints with an axis coordinate: "
                                       f"{with_axis}")
            raise ModelError(f"joint {name!r} has no axis coordinate (revolute, cylindrical, "
                             f"prismatic and universal joints have them; this model's: "
                             f"{with_axis})")
        coordinate = coordinate or next(iter(coordinates))
        if coordinate not in coordinates:
            raise ModelError(f"joint {name!r} has no {coordinate!r} coordinate; it has "
                             f"{', '.join(coordinates)}")
        return coordinates[coordinate]

    def apply_inverse_mass(self, p: np.ndarray) -> np.ndarray:
        """M^-1 p (blockwise constant inverse)."""
        return self.inverse_mass_matrix @ p

    # -- potential ------------------------------------------------------------------------
    def potential(self, q: np.ndarray) -> float:
        """V(q)."""
        q = self.checked_state(q, "q", "Model.potential", single=True)
        return float(sum(g.energy(q) for g in self.potential_groups))

    def checked_state(self, value, what: str, caller: str, single: bool = False
                      ) -> np.ndarray:
        """``value`` as a float array whose last axis has the model's n coordinates (a state
        or, unless ``single``, the rows of a trajectory); otherwise a ModelError naming
        ``caller``."""
        try:
            array = np.asarray(value, dtype=float)
        except (TypeError, ValueError) as exc:
            states = (" (a Solution's states are its .q and .p)" if hasattr(value, "q")
                      and hasattr(value, "p") else "")
            raise ModelTypeError(f"{caller}: {what} must be an array of {self.n} "
                                 f"numbers, got {type(value).__name__}{states}") from exc
        if single and array.shape != (self.n,):
            raise ModelError(f"{caller}: {what} must be one state of shape ({self.n},), "
                             f"got shape {array.shape}")
        if array.ndim == 0 or array.shape[-1] != self.n:
            raise ModelError(f"{caller}: {what} must have {self.n} entries (one state, "
                             f"or one per row of a trajectory), got shape {array.shape}")
        return array

    def potential_gradient(self, q: np.ndarray) -> np.ndarray:
        """grad V(q), shape (n,)."""
        out = np.zeros(self.n)
        for group in self.potential_groups:
            out += group.gradient(q)
        return out

    def potential_force_scale(self, q: np.ndarray) -> float:
        """The largest sum, over one coordinate, of the sizes of the potential forces acting
        on it: |grad V| where the forces do not cancel, and at an equilibrium (a mass
        hanging on a spring, a prestressed net) the size of the forces that do."""
        if not self.n:
            return 0.0
        total = np.zeros(self.n)
        for group in self.potential_groups:
            total += group.gradient_magnitudes(q)
        return float(total.max())

    def potential_gradients(self, Q: np.ndarray) -> np.ndarray:
        """grad V at each row of Q (K, n) -> (K, n), vectorised over the K configurations
        (quadrature nodes of HBVM, ensembles)."""
        out = np.zeros(Q.shape)
        for group in self.potential_groups:
            out += group.gradients(Q)
        return out

    def potential_energies(self, Q: np.ndarray) -> np.ndarray:
        """V at each row of Q (K, n) -> (K,), vectorised over the configurations."""
        out = np.zeros(Q.shape[0])
        for group in self.potential_groups:
            out += group.energies(Q)
        return out

    def element_potential_energies(self, Q: np.ndarray, name: str) -> np.ndarray:
        """V of the element (spring, torsion spring, field) ``name`` alone at each row of Q
        (K, n) -> (K,)."""
        owned = [(group, [element for element, owner in enumerate(group.names)
                          if owner == name]) for group in self.potential_groups]
        owned = [(group, elements) for group, elements in owned if elements]
        if not owned:
            names = sorted({owner for group in self.potential_groups for owner in group.names})
            raise UnknownNameError(f"no element {name!r} with a potential; this model's: "
                                   f"{', '.join(names) or 'none'}")
        return sum(group.element_energies(Q)[:, elements].sum(axis=1)
                   for group, elements in owned)

    def potential_hessian(self, q: np.ndarray) -> sp.csr_matrix:
        """Hessian of V, sparse (n, n)."""
        out = sp.csr_matrix((self.n, self.n))
        for group in self.potential_groups:
            out = out + group.hessian(q)
        return out.tocsr()

    def potential_range_exits(self, Q: np.ndarray) -> list[tuple[str, int]]:
        """(element name, first state) of the potentials that left the configurations they
        are valid for along the states Q (K, n): a torsion spring turned more than half a
        turn from its rest angle. Empty for most models."""
        return [exit for group in self.potential_groups for exit in group.range_exits(Q)]

    def potential_singular_distances(self, q: np.ndarray) -> list[tuple[str, float]]:
        """(element name, distance) from q to the singular configurations of the
        potentials that have any (a central gravity's attracting centre). Empty for most
        models."""
        return [item for group in self.potential_groups
                for item in group.singular_distances(q)]

    def potential_singular_steps(self, q0: np.ndarray, q1: np.ndarray
                                 ) -> list[tuple[str, float, float]]:
        """(element name, distance at q1 from its singular configurations, how far the
        point it measures moved from q0) of the potentials that have any."""
        return [item for group in self.potential_groups
                for item in group.singular_steps(q0, q1)]

    def potential_discrete_gradient(self, q0: np.ndarray, q1: np.ndarray) -> np.ndarray:
        """Momentum-conserving discrete gradient D^G V(q0, q1) (seed 003, (125)-(126)).

        Satisfies V(q1) - V(q0) = D^G V . (q1 - q0) and, for rotation-invariant elements,
        D^G V . (xi q_mid) = 0.
        """
        out = np.zeros(self.n)
        for group in self.potential_groups:
            out += group.discrete_gradient(q0, q1)
        return out

    # -- constraints ----------------------------------------------------------------------
    def constraints(self, q: np.ndarray, t: float = 0.0) -> np.ndarray:
        """g(q, t), shape (m,); only drives depend on t."""
        q = self.checked_state(q, "q", "Model.constraints", single=True)
        value = self._table.value(q)
        if not self._user:
            return value
        return np.concatenate([value] + [b.constraint.value(q[b.indices], t)
                                         for b in self._user])

    @property
    def is_rheonomic(self) -> bool:
        """Whether some constraint depends on time (a :class:`mbs.joints.Drive`)."""
        return any(b.constraint.time_dependent for b in self._user)

    def effort_jumps_at_half_turn(self, name: str, t: float, rate: float,
                                  coupled: tuple | None = None) -> bool:
        """Whether the law of actuator ``name`` jumps where the joint angle it receives,
        wrapped into (-pi, pi], passes +-pi (time t, joint rate ``rate``): a law that is not
        periodic in the angle (target - angle). For a law of several coordinates
        (:class:`~mbs.forces.JointEfforts`), ``coupled`` = (positions, rates, index): the
        coordinates it receives and the angle tested.

        The law is called at pi - e and -pi + e only, inside its range: the gap closes with
        e for a periodic law and keeps its size for a jump. Laws that read the bodies'
        states are not evaluated (False)."""
        term = next(term for term in self.applied_forces.terms if term.name == name)
        if coupled is not None:
            positions, rates, index = coupled

            def gap(e: float) -> float:
                return term.half_turn_gap(t, positions, rates, index, e)

            closer = gap(1e-7)
            return closer > 0.0 and closer > 0.5 * gap(1e-4)
        if getattr(term.law, "reads_bodies", False):
            return False

        def gap(e: float) -> float:
            return abs(float(term.law(t, np.pi - e, rate, False)[0])
                       - float(term.law(t, -np.pi + e, rate, False)[0]))

        closer = gap(1e-7)
        return closer > 0.0 and closer > 0.5 * gap(1e-4)

    @property
    def has_branch_checks(self) -> bool:
        """Whether some constraint can check that it holds on the solution of g = 0 it
        prescribes (drives; see :meth:`constraint_branch_errors`)."""
        return any(getattr(block.constraint, "branch_error", None) is not None
                   for block in self._user)

    def constraint_branch_errors(self, q: np.ndarray, t: float = 0.0) -> list[str]:
        """Constraints that hold at q but on another solution of g = 0 than the one they
        prescribe (a drive's angle half a turn off), each as a message naming it; empty for
        models without drives."""
        return [error for _, error in self._branch_errors(q, t)]

    def _branch_errors(self, q: np.ndarray, t: float) -> list[tuple[str, str]]:
        """(name, message) of :meth:`constraint_branch_errors`."""
        errors = []
        for block in self._user:
            check = getattr(block.constraint, "branch_error", None)
            error = None if check is None else check(q[block.indices], t)
            if error is not None:
                errors.append((block.constraint.name, error))
        return errors

    def mirrored_bodies(self, q: np.ndarray) -> list[str]:
        """The rigid bodies whose directors (d1, d2, d3) at q form a left-handed frame,
        det = -1: a mirror image of a rotation, which satisfies every orthonormality
        constraint but no continuous motion from a rotation reaches."""
        if not self._rigid:
            return []
        return [self._rigid[i] for i in np.flatnonzero(self.frame_determinants(q) < 0.0)]

    def frame_determinants(self, q: np.ndarray) -> np.ndarray:
        """det(d1, d2, d3) of every rigid body at q (n,) or at each row of Q (K, n): +1 for
        a rotation, -1 for its mirror image; shape (bodies,) or (K, bodies)."""
        d = np.asarray(q)[..., self.director_columns]
        d = d.reshape(*d.shape[:-1], self.director_columns.size // 9, 9)  # d1, d2, d3 each
        return (d[..., 0] * (d[..., 4] * d[..., 8] - d[..., 5] * d[..., 7])
                - d[..., 1] * (d[..., 3] * d[..., 8] - d[..., 5] * d[..., 6])
                + d[..., 2] * (d[..., 3] * d[..., 7] - d[..., 4] * d[..., 6]))

    @property
    def drive_rows(self) -> np.ndarray:
        """The constraint rows of the drives (rheonomic constraints)."""
        rows = [block.rows for block in self._user if block.constraint.time_dependent]
        return np.concatenate(rows) if rows else np.zeros(0, dtype=int)

    def constraint_time_derivative(self, q: np.ndarray, t: float = 0.0) -> np.ndarray:
        """dg/dt at fixed q, shape (m,): zero but for drives. The velocity constraint of a
        rheonomic system is G(q, t) v + dg/dt = 0."""
        out = np.zeros(self.m)
        for block in self._user:
            if block.constraint.time_dependent:
                out[block.rows] = block.constraint.time_derivative(q[block.indices], t)
        return out

    def constraint_time_derivative_jacobian(self, q: np.ndarray, t: float = 0.0):
        """d(dg/dt)/dq at time t, (m, n), dense when :attr:`dense`: nonzero only in the rows
        of drives of angles."""
        rows, columns, values = [], [], []
        for block in self._user:
            if block.constraint.time_dependent:
                local = block.constraint.time_derivative_jacobian(q[block.indices], t)
                rows.append(np.repeat(block.rows, block.indices.size))
                columns.append(np.tile(block.indices, block.rows.size))
                values.append(np.ravel(local))
        shape = (self.m, self.n)
        if not rows:
            return np.zeros(shape) if self.dense else sp.csr_matrix(shape)
        out = sp.csr_matrix((np.concatenate(values), (np.concatenate(rows),
                                                      np.concatenate(columns))), shape=shape)
        return out.toarray() if self.dense else out

    def constraint_jacobian_transpose_product(self, q: np.ndarray, y: np.ndarray,
                                              t: float = 0.0) -> np.ndarray:
        """G(q)^T y without forming G when every constraint is quadratic."""
        if not self._user:
            return self._table.jacobian_transpose_product(q, y)
        return self.constraint_jacobian(q, t).T @ y

    def constraint_jacobian_transpose_products(self, Q: np.ndarray, Y: np.ndarray,
                                               T: np.ndarray, rows: np.ndarray
                                               ) -> np.ndarray:
        """G(q_k, t_k)^T y_k at every state of a trajectory (K, n), (K, len(rows)), (K,) ->
        (K, n), y_k holding the multipliers of the constraint ``rows`` (the others zero):
        vectorised over the states, in blocks of them, when every constraint is quadratic;
        state by state otherwise."""
        out = np.empty(Q.shape)
        rows = np.asarray(rows, dtype=int)
        if np.all(rows < self._table.n_rows):
            # rows of the table only (one joint's reaction): its sub-table, whose cost is
            # that of the rows, not of the whole model
            table = self._table.rows(rows)
            for block in self._state_blocks(Q.shape[0]):
                out[block] = table.jacobian_transpose_products(Q[block], Y[block])
            return out
        for block in self._state_blocks(Q.shape[0]):
            full = np.zeros((Q[block].shape[0], self.m))
            full[:, rows] = Y[block]
            if self._user:
                out[block] = [self.constraint_jacobian_transpose_product(q, y, t)
                              for q, y, t in zip(Q[block], full, T[block])]
            else:
                out[block] = self._table.jacobian_transpose_products(Q[block], full)
        return out

    def _state_blocks(self, count: int) -> list[slice]:
        """Blocks of ``count`` states whose vectorised evaluation keeps its arrays below
        :data:`RESIDUAL_BLOCK` entries."""
        width = max(self._table.entries, self.n, self.m, 1)
        size = max(1, RESIDUAL_BLOCK // width)
        return [slice(start, start + size) for start in range(0, count, size)]

    def constraint_jacobian(self, q: np.ndarray, t: float = 0.0) -> sp.csr_matrix:
        """G(q) = Dg(q), sparse (m, n) with a pattern independent of q."""
        jac = self._table.jacobian(q)
        if not self._user:
            return jac
        return sp.vstack([jac, self._user_rows([b.constraint.jacobian(q[b.indices], t)
                                                for b in self._user])]).tocsr()

    def constraint_hessian_product(self, q: np.ndarray, multipliers: np.ndarray,
                                   t: float = 0.0) -> sp.csr_matrix:
        """sum_k multipliers_k d^2 g_k(q), sparse symmetric (n, n); constant in q when all
        constraints are quadratic."""
        k = self._table.n_rows
        out = self._table.hessian_product(multipliers[:k])
        if not self._user:
            return out.tocsr()
        # every block's (indices x indices) matrix in one sparse sum: adding them one by
        # one would cost the whole matrix per block
        rows = np.concatenate([np.repeat(block.indices, block.indices.size)
                               for block in self._user])
        cols = np.concatenate([np.tile(block.indices, block.indices.size)
                               for block in self._user])
        values = np.concatenate([np.asarray(block.constraint.hessian_product(
            q[block.indices], multipliers[block.rows], t), dtype=float).ravel()
            for block in self._user])
        return (out + sp.csr_matrix((values, (rows, cols)), shape=(self.n, self.n))).tocsr()

    def constraint_hessian_vector_product(self, q: np.ndarray, w: np.ndarray,
                                          t: float = 0.0) -> sp.csr_matrix:
        """D_q[G(q) w], sparse (m, n): row k is (d^2 g_k(q) w)^T. Together with
        :meth:`constraint_hessian_product` it gives sum_k mult_k d^2 g_k w = (this)^T mult."""
        out = self._table.hessian_vector_product(w)
        if not self._user:
            return out
        return sp.vstack([out, self._user_rows([self._user_hessian_vector(block, q, w, t)
                                                for block in self._user])]).tocsr()

    @staticmethod
    def _user_hessian_vector(block: UserConstraintBlock, q: np.ndarray, w: np.ndarray,
                             t: float) -> np.ndarray:
        """D_q[G w] of a user block by central differences of its Jacobian along w, with
        a step that moves each coordinate by at most its own difference step
        (:meth:`~mbs.joints.user.UserConstraint.difference_steps`)."""
        c, ql, wl = block.constraint, q[block.indices], w[block.indices]
        step = 1.0 / max(float(np.max(np.abs(wl) / c.difference_steps(ql))), 1e-300)
        return (c.jacobian(ql + step * wl, t) - c.jacobian(ql - step * wl, t)) / (2 * step)

    def constraint_discrete_jacobian(self, q0: np.ndarray, q1: np.ndarray, t: float = 0.0
                                     ) -> sp.csr_matrix:
        """D^G g(q0, q1) with g(q1) - g(q0) = D^G g (q1 - q0): the midpoint Jacobian for the
        quadratic rows (exact, and orthogonal to symmetry generators), Gonzalez's discrete
        gradient for user rows (momentum then not guaranteed); sparse."""
        return self._two_point_jacobian(q0, q1, t, "discrete_jacobian", False)

    def _user_block(self, block: UserConstraintBlock, local: np.ndarray) -> sp.csr_matrix:
        rows = np.repeat(np.arange(local.shape[0]), local.shape[1])
        cols = np.tile(block.indices, local.shape[0])
        return sp.csr_matrix((local.ravel(), (rows, cols)), shape=(local.shape[0], self.n))

    def _user_rows(self, locals_: list[np.ndarray]) -> sp.csr_matrix:
        """The user constraints' rows (their dense local matrices, one per block, in the
        order of the blocks) as one sparse (rows, n) matrix: their pattern is fixed, so its
        index arrays are built once and each call only concatenates the values (one
        scipy matrix per constraint and step cost milliseconds per thousand)."""
        pattern = self.__dict__.get("_user_pattern")
        if pattern is None:
            sizes = [block.rows.size * block.indices.size for block in self._user]
            indices = np.concatenate([np.tile(block.indices, block.rows.size)
                                      for block in self._user])
            indptr = np.concatenate([[0], np.cumsum(np.concatenate(
                [np.full(block.rows.size, block.indices.size) for block in self._user]))])
            pattern = self.__dict__["_user_pattern"] = (sizes, indices, indptr)
        sizes, indices, indptr = pattern
        values = [np.asarray(local, dtype=float) for local in locals_]
        if [value.size for value in values] != sizes:  # a block of another shape
            return sp.vstack([self._user_block(block, value)
                              for block, value in zip(self._user, values)]).tocsr()
        return sp.csr_matrix((np.concatenate([value.ravel() for value in values]), indices,
                              indptr), shape=(indptr.size - 1, self.n))

    def constraint_residual_norms(self, Q: np.ndarray, P: np.ndarray, T: np.ndarray
                                  ) -> tuple[np.ndarray, np.ndarray]:
        """max |g(q_k, t_k)| and max |G(q_k) M^-1 p_k (+ dg/dt)| at every state of a
        trajectory (K, n), (K, n), (K,): vectorised over the states, in blocks of them, when
        every constraint is quadratic; state by state otherwise."""
        K = Q.shape[0]
        if not self.m:
            return np.zeros(K), np.zeros(K)
        if self._user:
            return (np.array([np.max(np.abs(self.constraints(q, t))) for q, t in zip(Q, T)]),
                    np.array([np.max(np.abs(self.velocity_constraints(q, p, t)))
                              for q, p, t in zip(Q, P, T)]))
        table = self._table
        position, velocity = np.empty(K), np.empty(K)
        for rows in self._state_blocks(K):
            position[rows] = np.abs(table.values(Q[rows])).max(axis=1)
            V = (self.inverse_mass_matrix @ P[rows].T).T
            velocity[rows] = np.abs(table.jacobian_products(Q[rows], V)).max(axis=1)
        return position, velocity

    def full_constraint_rank(self, q: np.ndarray, t: float = 0.0) -> int:
        """Rank of the Jacobian of every constraint equation at q, the ones dropped as
        redundant at compile time included (dense: for diagnostics of small models)."""
        q = self.checked_state(q, "q", "Model.full_constraint_rank", single=True)
        jacobian = np.vstack([self.constraint_jacobian(q, t).toarray(),
                              self._removed.jacobian(q).toarray()])
        if not jacobian.size:
            return 0
        singular = np.linalg.svd(jacobian, compute_uv=False)
        return int(np.sum(singular > RANK_TOLERANCE * max(singular[0], 1e-300)))

    def removed_constraint_norms(self, Q: np.ndarray) -> np.ndarray:
        """max |g(q_k)| of the equations dropped as redundant at compile time, at every
        configuration of a trajectory (K, n) (zeros when none were dropped). A redundancy
        found at the initial state holds along the motion, and these stay at the size of
        the kept residuals, unless the initial state was a singular configuration, where
        the constraints lose rank without being redundant nearby."""
        Q = np.atleast_2d(self.checked_state(Q, "Q", "Model.removed_constraint_norms"))
        if not self._removed.n_rows:
            return np.zeros(Q.shape[0])
        norms = np.empty(Q.shape[0])
        for rows in self._state_blocks(Q.shape[0]):
            norms[rows] = np.abs(self._removed.values(Q[rows])).max(axis=1)
        return norms

    def velocity_constraints(self, q: np.ndarray, p: np.ndarray, t: float = 0.0) -> np.ndarray:
        """g^v(q, p) = G(q) M^-1 p (seed 003, eq. (29)), plus dg/dt for drives."""
        q = self.checked_state(q, "q", "Model.velocity_constraints", single=True)
        p = self.checked_state(p, "p", "Model.velocity_constraints", single=True)
        value = self.constraint_jacobian(q, t) @ self.apply_inverse_mass(p)
        return value + self.constraint_time_derivative(q, t) if self.is_rheonomic else value

    # -- observables (accept a state (n,) or a trajectory (N, n)) ------------------------
    def kinetic_energy(self, p: np.ndarray) -> np.ndarray | float:
        """T = 1/2 p . M^-1 p."""
        p = self.checked_state(p, "p", "Model.kinetic_energy")
        if p.ndim == 1:
            return float(0.5 * p @ self.apply_inverse_mass(p))
        return 0.5 * np.einsum("ij,ij->i", p, (self.inverse_mass_matrix @ p.T).T)

    def potential_energy(self, q: np.ndarray) -> np.ndarray | float:
        """V(q) for a state or each row of a trajectory."""
        q = self.checked_state(q, "q", "Model.potential_energy")
        if q.ndim == 1:
            return self.potential(q)
        return self.potential_energies(q.reshape(-1, self.n)).reshape(q.shape[:-1])

    def energy(self, q: np.ndarray, p: np.ndarray) -> np.ndarray | float:
        """Total energy H = T(p) + V(q) (seed 003, eq. (4))."""
        q = self.checked_state(q, "q", "Model.energy")
        p = self.checked_state(p, "p", "Model.energy")
        return self.kinetic_energy(p) + self.potential_energy(q)

    def linear_momentum(self, p: np.ndarray) -> np.ndarray:
        """Sum of the momenta of all centres of mass and particles (seed 003, (118))."""
        p = self.checked_state(p, "p", "Model.linear_momentum")
        blocks = p.reshape(p.shape[:-1] + (-1, 3))
        return blocks[..., self.point_blocks, :].sum(axis=-2)

    def angular_momentum(self, q: np.ndarray, p: np.ndarray, about=(0.0, 0.0, 0.0)
                         ) -> np.ndarray:
        """J = sum_i (q_i - c) x p_i over the 3-blocks (seed 003, eq. (107)); directors are
        vectors and are not shifted by the reference point ``about``."""
        q = self.checked_state(q, "q", "Model.angular_momentum")
        p = self.checked_state(p, "p", "Model.angular_momentum")
        about = as_vector(about, 3, "about", "Model.angular_momentum")
        q_blocks = q.reshape(q.shape[:-1] + (-1, 3)).copy()
        p_blocks = p.reshape(p.shape[:-1] + (-1, 3))
        q_blocks[..., self.point_blocks, :] -= about
        return np.cross(q_blocks, p_blocks).sum(axis=-2)

    @property
    def length_scale(self) -> float:
        """The natural size of the coordinates: max |q0| of the pose set on the bodies, or
        1 when that pose is all zeros (a lone point mass at the origin).

        Newton's increment test compares a coordinate increment with
        max(|q|, length_scale): relative to |q| while the coordinates are of their natural
        size, never relative to a vanishing |q|, where round-off in the increment would
        never pass a relative test.
        """
        return self._length_scale

    @property
    def q0(self) -> np.ndarray:
        """Coordinates of the state set on the bodies at compile time (the pose at which joint
        and force geometry was given); unprojected."""
        return self._q0.copy()

    @property
    def p0(self) -> np.ndarray:
        """Momenta M v0 of the state set on the bodies at compile time; unprojected."""
        return self._p0.copy()

    # -- initial state --------------------------------------------------------------------
    def initial_residuals(self) -> tuple[float, float]:
        """(max |g(q0)|, max |G(q0) M^-1 p0|) of the state set on the bodies."""
        return self._residuals(self._q0, self._p0)

    def _worst_constraints(self, q: np.ndarray, p: np.ndarray, t: float) -> str:
        """", largest in joint 'x' (position) and 'y' (velocity)": the elements whose
        equations the state violates most (the redundant ones removed at compile time
        included)."""
        names = np.empty(self.m, dtype=object)
        for name, rows in self.constraint_rows.items():
            names[rows] = name
        names = np.concatenate([names, np.array(self._removed_names, dtype=object)])
        if not names.size:
            return ""
        position = np.abs(self._all_constraints(q, t))
        velocity = np.abs(self._all_jacobian(q, t) @ self.apply_inverse_mass(p)
                          + self._all_time_derivative(q, t))
        _, _, scale = self._residuals_and_scale(q, p, t)
        worst = [f"{names[int(np.argmax(values))]!r} ({level})"
                 for values, level, tolerance in (
                     (position, "position", POSITION_TOLERANCE),
                     (velocity, "velocity", VELOCITY_TOLERANCE * scale))
                 if values.max() > tolerance and names[int(np.argmax(values))] is not None]
        return f", largest in {' and '.join(worst)}" if worst else ""

    def _all_constraints(self, q: np.ndarray, t: float = 0.0) -> np.ndarray:
        """g(q, t) including the redundant equations removed at compile time."""
        if not self._removed.n_rows:
            return self.constraints(q, t)
        return np.concatenate([self.constraints(q, t), self._removed.value(q)])

    def _all_jacobian(self, q: np.ndarray, t: float = 0.0) -> sp.csr_matrix:
        """G(q, t) including the redundant equations removed at compile time."""
        if not self._removed.n_rows:
            return self.constraint_jacobian(q, t)
        return sp.vstack([self.constraint_jacobian(q, t), self._removed.jacobian(q)]).tocsr()

    def _all_time_derivative(self, q: np.ndarray, t: float) -> np.ndarray:
        return np.concatenate([self.constraint_time_derivative(q, t),
                               np.zeros(self._removed.n_rows)])

    def _residuals(self, q: np.ndarray, p: np.ndarray, t: float = 0.0) -> tuple[float, float]:
        return self._residuals_and_scale(q, p, t)[:2]

    def _residuals_and_scale(self, q: np.ndarray, p: np.ndarray, t: float = 0.0,
                             skipped_rows: np.ndarray | None = None
                             ) -> tuple[float, float, float]:
        """(max |g(q, t)|, max |G(q) v + g_t|, velocity scale max(1, max |G| |v|)) with
        v = M^-1 p, from one Jacobian (this runs at the start of every simulation); the
        maxima leave out ``skipped_rows``."""
        if self.m + self._removed.n_rows == 0:
            return 0.0, 0.0, 1.0
        jac = self._all_jacobian(q, t)
        v = self.apply_inverse_mass(p)
        scale = max(1.0, float(np.max(abs(jac) @ np.abs(v))))
        velocity = np.abs(jac @ v + (self._all_time_derivative(q, t) if self.is_rheonomic
                                     else 0.0))
        position = np.abs(self._all_constraints(q, t))
        if skipped_rows is not None:
            velocity[skipped_rows] = position[skipped_rows] = 0.0
        return float(np.max(position)), float(np.max(velocity)), scale

    def is_consistent(self, q: np.ndarray, p: np.ndarray, t: float = 0.0) -> bool:
        """Whether (q, p) satisfies g = 0 and G M^-1 p (+ dg/dt) = 0 at time t within the
        tolerances, every drive on the solution of g = 0 it prescribes (an angle drive's g
        also vanishes half a turn away)."""
        q = self.checked_state(q, "q", "Model.is_consistent", single=True)
        p = self.checked_state(p, "p", "Model.is_consistent", single=True)
        g, gv, scale = self._residuals_and_scale(q, p, t)
        return (g <= POSITION_TOLERANCE and gv <= VELOCITY_TOLERANCE * scale
                and not self.constraint_branch_errors(q, t))

    def initial_state(self, project: bool = False, joint_rates: dict | None = None,
                      t: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
        """(q0, p0) with p0 = M v0 from the states set on the bodies.

        Parameters
        ----------
        project : bool
            If the state is inconsistent, project q0 onto g = 0 (minimal M-norm correction,
            Gauss-Newton) and p0 onto the tangent space {G M^-1 p = 0} (M-orthogonal
            projection), with a warning stating the size of the correction and the joint
            rates it changed. Without projection an inconsistent state raises
            :class:`InconsistentInitialStateError`.
        joint_rates : dict, optional
            Joint name -> rate (rad/s about a revolute or cylindrical axis, m/s along a
            prismatic one), or (joint name, coordinate) -> rate for a joint with two
            coordinates (a cylindrical joint's "displacement", a universal joint's "angle_b";
            the name alone selects the first), that the initial velocities must have: p0
            becomes the M-nearest momentum that satisfies G M^-1 p = 0 and these rates
            exactly (the other velocities set on the bodies are kept as far as the
            constraints allow).
            Rates the constraints do not allow raise a :class:`ModelError` naming them.
        t : float
            The start time (drives prescribe positions and rates as functions of it).
        """
        if project not in (True, False):  # "no" would read as True
            raise ModelTypeError(f"initial_state: project must be True or False, got "
                                 f"{project!r}")
        q, p = self._q0.copy(), self._p0.copy()
        if joint_rates:
            return self._state_with_rates(q, p, dict(joint_rates), project, t)
        return self.consistent_state(q, p, project, t)

    def consistent_state(self, q: np.ndarray, p: np.ndarray, project: bool = False,
                         t: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
        """(q, p) if it satisfies the constraints at time t, or (with ``project``) its
        projection onto them; see :meth:`initial_state`.

        Raises
        ------
        ModelError
            q or p has a non-finite entry.
        InconsistentInitialStateError
            The state violates the constraints and ``project`` is False, or the projection
            fails.
        """
        for name, value in (("q0", q), ("p0", p)):
            bad = np.flatnonzero(~np.isfinite(value))
            if bad.size:
                raise ModelError(f"initial state: {name}[{bad[0]}] = {value[bad[0]]} is not "
                                 f"finite ({bad.size} such entries); give finite coordinates "
                                 f"and momenta")
        mirrored = self.mirrored_bodies(np.asarray(q, dtype=float))
        if mirrored:
            raise ModelError(f"initial state: the directors of {', '.join(map(repr, mirrored))} "
                             f"form a left-handed frame (a mirror image, det = -1); give a "
                             f"rotation (det = +1), e.g. reverse one director")
        self.check_drive_branches(q, t)
        if self.is_consistent(q, p, t):
            return q, p
        g, gv = self._residuals(q, p, t)
        if not project:
            raise InconsistentInitialStateError(
                f"initial state violates the constraints: max |g(q0)| = {g:.3e} (tolerance "
                f"{POSITION_TOLERANCE:.0e}), max |G M^-1 p0| = {gv:.3e} (tolerance "
                f"{VELOCITY_TOLERANCE:.0e} relative){self._worst_constraints(q, p, t)}; fix "
                f"the bodies' set_state calls (or the initial_state given to simulate), or "
                f"project it: model.initial_state(project=True), simulate(..., project=True)",
                g, gv)
        try:
            with np.errstate(all="ignore"):
                q_new, p_new = self.project(q, p, t=t)
        except (np.linalg.LinAlgError, ArithmeticError, RuntimeError) as exc:
            raise InconsistentInitialStateError(
                f"projecting the initial state failed ({exc}); the constraints may be "
                f"degenerate or badly scaled at the initial state (before: max |g| = {g:.3e}, "
                f"max |G M^-1 p| = {gv:.3e})", g, gv) from exc
        self.check_drive_branches(q_new, t)
        if not (np.all(np.isfinite(q_new)) and np.all(np.isfinite(p_new))
                and self.is_consistent(q_new, p_new, t)):
            g_new, gv_new = self._residuals(q_new, p_new, t)
            raise InconsistentInitialStateError(
                f"projecting the initial state failed: max |g| = {g_new:.3e}, max "
                f"|G M^-1 p| = {gv_new:.3e} after projection (before: {g:.3e}, {gv:.3e}); the "
                f"constraints may have no solution near the initial state (check joint "
                f"lengths, points and the bodies' set_state calls)", g_new, gv_new)
        warn_user(
            f"initial state projected onto the constraint manifold: |dq| = "
            f"{np.max(np.abs(q_new - q)):.3e}, |dp| = {np.max(np.abs(p_new - p)):.3e} "
            f"(residuals were |g| = {g:.3e}, |G v| = {gv:.3e})"
            + self._changed_rates(q, p, q_new, p_new))
        return q_new, p_new

    def check_drive_branches(self, q: np.ndarray, t: float = 0.0) -> None:
        """Raise :class:`InconsistentInitialStateError` when an initial configuration q
        puts a drive on the solution of its equation half a turn from the angle it
        prescribes at time t (a pose more than a quarter turn from it, which a projection
        cannot cross), naming the drives."""
        drives = [repr(name) for name, _ in self._branch_errors(q, t)]
        if drives:
            raise InconsistentInitialStateError(
                f"initial state: the pose set on the bodies is more than a quarter turn from "
                f"the angle that {', '.join(drives)} prescribe{'s' if len(drives) == 1 else ''} "
                f"at t = {t:.6g} (sin(angle - f(t)) = 0 also holds half a turn away, the "
                f"solution a projection reaches from there); set the bodies at a pose near "
                f"f({t:.6g}), or start f at the pose's angle", 0.0, 0.0)

    def _changed_rates(self, q, p, q_new, p_new) -> str:
        """The joint rates a projection changed, as a sentence for its warning."""
        changed = []
        for name, kinds in self.joint_coordinates.items():
            for kind in kinds:
                before = self.joint_coordinate(name, q, self.apply_inverse_mass(p), kind)[1]
                after = self.joint_coordinate(name, q_new, self.apply_inverse_mass(p_new),
                                              kind)[1]
                if abs(after - before) > 1e-9 * max(abs(before), abs(after), 1e-300):
                    label = name if len(kinds) == 1 else f"{name} ({kind})"
                    changed.append(f"{label} {before:.6g} -> {after:.6g}")
        if not changed:
            return ""
        return (f"; it changed joint rates: {', '.join(changed)}. To prescribe rates, pass "
                f"joint_rates={{name: rate}} (or {{(name, coordinate): rate}}) to "
                f"initial_state")

    def _state_with_rates(self, q, p, joint_rates: dict, project: bool, t: float):
        """(q, p) with the given joint rates: p - A^T (A M^-1 A^T)^+ (A M^-1 p - b) for
        A = [G; rows of the joint rates], b = [0; rates]."""
        g, _ = self._residuals(q, p, t)
        if g > POSITION_TOLERANCE:
            if not project:
                raise InconsistentInitialStateError(
                    f"initial positions violate the constraints (max |g| = {g:.3e}); fix the "
                    f"bodies' set_state calls or pass project=True", g, np.nan)
            q_projected, _ = self.project(q, p, t=t)
            warn_user(f"initial positions projected onto the constraint manifold: |dq| = "
                      f"{np.max(np.abs(q_projected - q)):.3e} (residual was |g| = {g:.3e}); "
                      f"the velocities follow from the given joint rates")
            q = q_projected
        self.check_drive_branches(q, t)
        v = self.apply_inverse_mass(p)
        names, coordinates, rates, rows = [], [], [], []
        for key, rate in joint_rates.items():
            name, coordinate = key if isinstance(key, tuple) and len(key) == 2 else (key, None)
            rows.append(self.joint_coordinate(name, q, v, coordinate)[2])
            names.append(name)
            coordinates.append(coordinate)
            rates.append(as_scalar(rate, "rate", f"initial_state: joint {key!r}"))
        jacobian = self._all_jacobian(q, t)
        matrix = sp.vstack([jacobian, sp.csr_matrix(np.array(rows))]).tocsr()
        target = np.concatenate([-self._all_time_derivative(q, t), rates])
        p = self._corrected_momentum(matrix, p, target)
        reached = np.array([self.joint_coordinate(name, q, self.apply_inverse_mass(p),
                                                  coordinate)[1]
                            for name, coordinate in zip(names, coordinates)])
        missed = [f"{name} (asked {rate:.6g}, possible {got:.6g})"
                  for name, rate, got in zip(names, rates, reached)
                  if abs(got - rate) > 1e-9 * max(1.0, abs(rate))]
        if missed or not self.is_consistent(q, p, t):
            driven = {joint: drive for drive, (joint, coordinate) in self.drives.items()
                      if coordinate == next(iter(self.joint_coordinates[joint]))}
            prescribed = [f"{name} by {driven[name]!r}" for name in names if name in driven]
            raise ModelError(f"initial_state: the constraints do not allow the joint rates "
                             f"{', '.join(missed) or 'given'}; "
                             + (f"the drives prescribe the rates of driven joints "
                                f"({', '.join(prescribed)}: their rate(t)), leave those out of "
                                f"joint_rates" if prescribed else
                                "the joints' rates are coupled (give fewer rates, one per "
                                "degree of freedom)"))
        return q, p

    def project(self, q: np.ndarray, p: np.ndarray, max_iterations: int = 50, t: float = 0.0
                ) -> tuple[np.ndarray, np.ndarray]:
        """Project (q, p) onto {g = 0, G M^-1 p + dg/dt = 0} (at time t) in the M-metric."""
        q = q.copy()
        previous = np.inf
        for _ in range(max_iterations):
            residual = self._all_constraints(q, t)
            size = float(np.max(np.abs(residual), initial=0.0))
            # Newton converges quadratically: past the tolerance, go on while the residual
            # still halves, i.e. down to round-off (where the schemes keep it).
            if size == 0.0 or (size <= 0.01 * POSITION_TOLERANCE and size > 0.5 * previous):
                break
            previous = size
            jac = self._all_jacobian(q, t)
            q -= self.apply_inverse_mass(jac.T @ self._solve_gram(jac, residual))
        return q, self._corrected_momentum(self._all_jacobian(q, t), p,
                                           -self._all_time_derivative(q, t))

    def _corrected_momentum(self, matrix: sp.csr_matrix, p: np.ndarray, target: np.ndarray
                            ) -> np.ndarray:
        """The M-nearest momentum to p with ``matrix M^-1 p = target``: p - A^T (A M^-1
        A^T)^+ (A M^-1 p - target), corrected again while the residual still halves (up to
        four solves). One least-squares solve of an ill-conditioned Gram matrix (a
        parallelogram's redundant rows, a spatial loop's nearly dependent ones) leaves the
        residual at its condition number times round-off, not at round-off."""
        previous = np.inf
        for _ in range(4):
            residual = matrix @ self.apply_inverse_mass(p) - target
            size = float(np.max(np.abs(residual), initial=0.0))
            if size == 0.0 or size > 0.5 * previous:
                break
            previous = size
            p = p - matrix.T @ self._solve_gram(matrix, residual)
        return p

    def _solve_gram(self, jac: sp.csr_matrix, rhs: np.ndarray) -> np.ndarray:
        """Least-squares solution of (G M^-1 G^T) x = rhs (redundant constraints allowed)."""
        gram = (jac @ self.inverse_mass_matrix @ jac.T)
        if not (np.all(np.isfinite(gram.data)) and np.all(np.isfinite(rhs))):
            raise ArithmeticError("non-finite constraint values or Jacobian")
        if not self.is_large:
            # scaled to a unit diagonal first: the equations of a gram-and-millimetre body
            # beside a tonne-and-metre one differ in size by far more than the rank cut-off
            # (which tells redundant equations apart), not in how independent they are
            scale = np.sqrt(np.abs(gram.diagonal()))
            scale[scale == 0.0] = 1.0
            dense = gram.toarray() / np.outer(scale, scale)
            return np.linalg.lstsq(dense, rhs / scale, rcond=1e-12)[0] / scale
        rhs_norm = np.linalg.norm(rhs)
        try:
            factor = spla.splu(gram.tocsc())
            solution = factor.solve(rhs)
            # an ill-conditioned Gram matrix (a long chain) leaves the solve at its
            # condition number times round-off: refined with the same factors; a
            # numerically singular one (redundant constraints) need not make splu fail and
            # then returns garbage, so a solution is accepted only if it solves
            best, best_norm = None, np.inf
            for _ in range(3):
                if not np.all(np.isfinite(solution)):
                    break
                residual = rhs - gram @ solution
                size = np.linalg.norm(residual)
                if size <= 1e-10 * rhs_norm:
                    return solution
                if size >= 0.5 * best_norm:  # at the conditioning's limit
                    break
                best, best_norm = solution, size
                solution = solution + factor.solve(residual)
            # the Gram matrix squares G's condition number (1e11 for a chain of 200 links):
            # a residual at that limit still makes Gauss-Newton contract by 1e-6 per step,
            # where the regularised solve below would crawl
            if best is not None and best_norm <= 1e-6 * rhs_norm:
                return best
        except RuntimeError:
            pass
        # Redundant constraints: factorise gram + delta I and refine iteratively. The
        # components along null(gram) = null(G^T) do not change G^T x; a component of rhs
        # outside the range (incompatible redundant equations) stops the refinement.
        delta = 1e-10 * max(float(np.max(np.abs(gram.diagonal()))), np.finfo(float).tiny)
        factor = spla.splu((gram + delta * sp.identity(gram.shape[0])).tocsc())
        solution = np.zeros_like(rhs)
        residual, residual_norm = rhs, rhs_norm
        for _ in range(30):
            solution = solution + factor.solve(residual)
            residual = rhs - gram @ solution
            previous, residual_norm = residual_norm, np.linalg.norm(residual)
            if residual_norm <= 1e-14 * rhs_norm or residual_norm > 0.5 * previous:
                break
        return solution

    # -- text -----------------------------------------------------------------------------
    def __repr__(self) -> str:
        return (f"Model(n={self.n}, m={self.m}, bodies={len(self.bodies)}, "
                f"joints={len(self.joints)}, dof={self.degrees_of_freedom})")
