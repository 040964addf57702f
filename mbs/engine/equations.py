"""A scheme's step equations, written once as a list of terms, and their evaluation.

Every implicit one-step scheme of mbs states its residual ``R(x; d) = 0`` (step data
``d = (q^n, p^n)``, unknowns ``x``) as a sum of terms, each acting on linear functions of
``w = (d, x)`` (:class:`Linear`): constants, linear maps, constraint values ``g(u)``, constraint
Jacobian products ``G(u) v`` and ``G(u)^T mu``, their discrete counterpart ``D^G g(a, b)^T mu``,
constraint Hessian products, potential gradients and discrete gradients. A scheme writes these
terms once, against the methods shared by two builders:

* :class:`mbs.backends.polynomial.QuadraticSystemBuilder` folds them into sparse tensors when
  every constraint is quadratic (the fast numpy path and the input of the compiled kernel);
* :class:`ModelEquations` evaluates each term with the model's own functions, for any model
  (user constraints, non-polynomial potentials) -- the reference evaluation.

The Jacobian of every term follows from the chain rule through the term's linear maps, so a
scheme never writes its Newton matrix: ``d/dx f(S w) = f'(S w) S_x`` with ``S_x`` the
unknowns' columns of ``S``. Terms whose derivative involves third derivatives of the
constraints (a Hessian product whose point moves) drop them: they vanish for the quadratic
constraints of every built-in joint, and Newton still converges where they do not.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import scipy.sparse as sp


class Linear:
    """A linear function ``S w`` of the variable vector, stored as a sparse (size, n_w) matrix.

    Supports ``+``, ``-``, scaling by a float and left multiplication by a constant matrix
    (``lin.mapped(A)`` = ``A S w``), which is how scheme formulas such as
    ``q_mid = (q0 + q1)/2`` or ``v = M^-1 p`` are written.
    """

    def __init__(self, matrix: sp.spmatrix):
        self.matrix = sp.csr_matrix(matrix)

    def __add__(self, other: Linear) -> Linear:
        return Linear(self.matrix + other.matrix)

    def __sub__(self, other: Linear) -> Linear:
        return Linear(self.matrix - other.matrix)

    def __neg__(self) -> Linear:
        return Linear(-self.matrix)

    def __mul__(self, factor: float) -> Linear:
        return Linear(float(factor) * self.matrix)

    __rmul__ = __mul__

    def mapped(self, matrix) -> Linear:
        """``matrix @ self`` for a constant (dense or sparse) matrix."""
        return Linear(sp.csr_matrix(matrix) @ self.matrix)


def weighted_sum(parts: list[Linear], weights: np.ndarray) -> Linear:
    """sum_k weights_k parts_k over the nonzero weights (the zero function when all vanish),
    e.g. a stage q0 + h sum_k a_jk V_k of a Runge-Kutta scheme."""
    total = parts[0] * 0.0
    for k in np.flatnonzero(weights):
        total = total + parts[k] * float(weights[k])
    return total


class EquationLayout:
    """Blocks of ``w = (data, unknowns)`` and of the residual, shared by both builders.

    Parameters
    ----------
    data, unknowns : dict of name -> size
        Blocks of w in order; ``data`` is fixed during a step, ``unknowns`` is Newton's x.
    """

    def __init__(self, data: dict[str, int], unknowns: dict[str, int],
                 constant_force: np.ndarray | None = None, applied_forces: bool = False):
        self.constant_force = constant_force
        self.applied_forces = applied_forces
        self._potential: list[tuple] = []
        self._applied: list[tuple] = []
        self.n_data = int(sum(data.values()))
        self.n_unknowns = int(sum(unknowns.values()))
        self.n_w = self.n_data + self.n_unknowns
        self._variables: dict[str, tuple[int, int]] = {}
        start = 0
        for name, size in list(data.items()) + list(unknowns.items()):
            self._variables[name] = (start, int(size))
            start += int(size)
        self._equations: dict[str, tuple[int, int]] = {}
        self.n_equations = 0

    def variable(self, name: str) -> Linear:
        """The block ``name`` of w as a linear function (a selector)."""
        start, size = self._variables[name]
        selector = sp.csr_matrix((np.ones(size), (np.arange(size), start + np.arange(size))),
                                 shape=(size, self.n_w))
        return Linear(selector)

    def variables(self, *names: str) -> list[Linear]:
        """:meth:`variable` of each name."""
        return [self.variable(name) for name in names]

    def blocks(self) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
        """(start, size) of the residual blocks and of the unknown blocks, in order (offsets
        of the unknowns within x)."""
        unknowns = [(start - self.n_data, size) for start, size in self._variables.values()
                    if start >= self.n_data]
        return list(self._equations.values()), unknowns

    def equation(self, name: str, size: int) -> None:
        """Declare the next residual block."""
        self._equations[name] = (self.n_equations, int(size))
        self.n_equations += int(size)

    def _rows(self, equation: str, local: np.ndarray) -> np.ndarray:
        start, _ = self._equations[equation]
        return start + np.asarray(local, dtype=np.int64)

    def add_constant(self, equation: str, vector: np.ndarray) -> None:
        raise NotImplementedError

    def add_potential_gradient(self, equation: str, at: Linear, scale: float = 1.0) -> None:
        """R[equation] += scale grad V(u): a constant for potentials linear in q."""
        if self.constant_force is not None:
            self.add_constant(equation, scale * self.constant_force)
        else:
            self._potential.append(("gradient", self._equations[equation][0], at, None, scale))

    def add_potential_discrete_gradient(self, equation: str, first: Linear,
                                        second: Linear) -> None:
        """R[equation] += D^G V(a, b) (``first`` must be step data): the constant gradient
        for potentials linear in q."""
        if self.constant_force is not None:
            self.add_constant(equation, self.constant_force)
        else:
            self._potential.append(("discrete", self._equations[equation][0], first, second,
                                    1.0))

    def add_applied_force(self, equation: str, at: Linear, velocity: Linear, time: float,
                          scale: float, work_weight: float = 0.0,
                          work_along: Linear | None = None) -> None:
        """R[equation] += scale Q(t + time, u, v): the loads, dampers and actuators of the
        model at the point u with the velocity v, ``time`` after the step's start t. The
        step's work is the sum of ``work_weight Q . w`` over the terms, w = ``work_along``
        (default: the velocity v); each scheme weighs the terms of its momentum balance so
        that this is the work it applies. Nothing is added for models without such
        forces."""
        if self.applied_forces:
            self._applied.append((self._equations[equation][0], at, velocity, float(time),
                                  float(scale), float(work_weight),
                                  velocity if work_along is None else work_along))

    def _potential_terms(self) -> PotentialTerms | None:
        return (PotentialTerms(self._potential, self.n_data, self.n_equations,
                               self.n_unknowns, self._applied)
                if self._potential or self._applied else None)


class _Map:
    """A :class:`Linear` split into its data and unknowns columns: ``u = S_d d + S_x x``."""

    def __init__(self, term: Linear, n_data: int):
        matrix = term.matrix
        self.data = matrix[:, :n_data].tocsr()
        self.unknowns = matrix[:, n_data:].tocsr()
        self.moves = self.unknowns.nnz > 0  # depends on the unknowns


class _Maps:
    """The distinct linear functions among a definition's terms, each split once: terms at
    the same point share the model's evaluations there."""

    def __init__(self, n_data: int):
        self.n_data, self.split = n_data, {}

    def __call__(self, term: Linear) -> _Map:
        matrix = term.matrix.copy()
        matrix.sum_duplicates()
        matrix.eliminate_zeros()
        key = (matrix.shape, matrix.indptr.tobytes(), matrix.indices.tobytes(),
               matrix.data.tobytes())
        return self.split.setdefault(key, _Map(term, self.n_data))


class PotentialTerms:
    """The terms of a step residual evaluated with the model's own functions: the
    potential's ``scale grad V(u)`` and ``D^G V(a, b)``, and the applied forces
    ``scale Q(t, u, v)`` (see :meth:`EquationLayout.add_applied_force`).

    Used by both builders, since the tensor form holds only potentials that are linear in q
    and no applied forces.

    Parameters
    ----------
    terms : list of (kind, row start, first, second, scale)
        kind "gradient" (``first`` the point u) or "discrete" (``first``, ``second`` the
        points a, b; a must not depend on the unknowns).
    applied : list of (row start, point, velocity, time, scale, work weight, work direction)
    """

    def __init__(self, terms: list, n_data: int, n_equations: int, n_unknowns: int,
                 applied: list = ()):
        self.n_equations, self.n_unknowns = n_equations, n_unknowns
        split = _Maps(n_data)
        self._applied = [(start, split(at), split(velocity), time, scale, weight, split(along))
                         for start, at, velocity, time, scale, weight, along in applied]
        self._gradients: dict[int, tuple[_Map, list]] = {}  # point -> (map, [(start, scale)])
        self._discrete = []
        for kind, start, first, second, scale in terms:
            if kind == "gradient":
                point = split(first)
                self._gradients.setdefault(id(point), (point, []))[1].append((start, scale))
            else:
                if split(first).moves:
                    raise ValueError("the first point of a discrete gradient must be step data")
                self._discrete.append((start, split(first), split(second)))
        #: the end of the last row these terms add to (a gradient has one row per coordinate)
        self.rows_end = max([start + first.matrix.shape[0] for _, start, first, _, _ in terms]
                            + [start + at.data.shape[0] for start, at, *_ in self._applied])

    def jacobian_pattern(self) -> tuple[np.ndarray, np.ndarray]:
        """(rows, cols) of every entry of the Newton matrix these terms may make nonzero:
        each term's rows times the unknowns its point (and velocity) depend on."""
        blocks = []
        for point, uses in self._gradients.values():
            for start, _ in uses:
                blocks.append((start, point.data.shape[0], point.unknowns))
        for start, _, second in self._discrete:
            blocks.append((start, second.data.shape[0], second.unknowns))
        for start, at, velocity, *_ in self._applied:
            blocks.append((start, at.data.shape[0], sp.vstack([at.unknowns,
                                                                velocity.unknowns])))
        rows, cols = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)]
        for start, size, unknowns in blocks:
            columns = np.flatnonzero(np.diff(sp.csc_matrix(unknowns).indptr))
            rows.append(np.repeat(np.arange(start, start + size), columns.size))
            cols.append(np.tile(columns, size))
        return np.concatenate(rows), np.concatenate(cols)

    def bind(self, model, data: np.ndarray, shift: sp.spmatrix | None = None,
             time: float = 0.0) -> Callable:
        """``extra(x, jacobian) -> (r, J)`` at the step data (the ``extra`` of the tensor
        systems) and the step's start ``time``; ``shift`` is S of unknowns written as
        x' = x + S d (see :meth:`~mbs.backends.polynomial.QuadraticSystemBuilder.build`), the
        maps being in x'. grad V and its Hessian are evaluated once per point, whatever the
        number of rows that use them. ``extra.work(x)`` is the work of the applied forces."""
        shift_step = None if shift is None else shift @ data
        n_eq, n_x, dense = self.n_equations, self.n_unknowns, model.dense
        gradients = [(point, point.data @ data, uses)
                     for point, uses in self._gradients.values()]
        discrete = [(start, first.data @ data, second, second.data @ data)
                    for start, first, second in self._discrete]

        points = [point for point, _, _ in gradients]
        point_steps = np.array([point_step for _, point_step, _ in gradients])

        def columns_of(linear):
            """The unknowns' columns of a point, dense for small models: a dense matrix
            times a sparse one goes through scipy's transposes, far slower at these sizes."""
            return linear.unknowns.toarray() if dense else linear.unknowns

        columns = [columns_of(point) for point in points]
        discrete = [(start, first_step, second, second_step, columns_of(second))
                    for start, first_step, second, second_step in discrete]

        def extra(x: np.ndarray, jacobian: bool):
            inner = x if shift_step is None else x + shift_step
            residual = np.zeros(n_eq)
            parts = []
            at = values = ()
            if gradients:
                at = point_steps + np.array([point.unknowns @ inner for point in points])
                values = model.potential_gradients(at)  # one vectorised call for all points
            for (point, _, uses), u, value, point_columns in zip(gradients, at, values,
                                                                 columns):
                derivative = (model.potential_hessian_matrix(u) @ point_columns
                              if jacobian and point.moves else None)
                for start, scale in uses:
                    residual[start:start + value.size] += scale * value
                    if derivative is not None:
                        parts.append((start, scale * derivative))
            for start, a, second, second_step, second_columns in discrete:
                b = second_step + second_columns @ inner
                value = model.potential_discrete_gradient(a, b)
                residual[start:start + value.size] += value
                if jacobian and second.moves:
                    parts.append((start, model.potential_discrete_gradient_jacobian_matrix(
                        a, b) @ second_columns))
            for (start, _, _, at_step, velocity_step, when, scale, *_, at_columns,
                 velocity_columns) in applied:
                u, v = at_step + at_columns @ inner, velocity_step + velocity_columns @ inner
                if not jacobian:
                    residual[start:start + u.size] += scale * model.applied_force(when, u, v)
                    continue
                value, by_q, by_v = model.applied_force_derivatives(when, u, v)
                residual[start:start + u.size] += scale * value
                parts.append((start, scale * (by_q @ at_columns + by_v @ velocity_columns)))
            return residual, (_stack(parts, n_eq, n_x, dense) if jacobian else None)

        applied = [(start, at, velocity, at.data @ data, velocity.data @ data, time + offset,
                    scale, weight, along, along.data @ data, columns_of(at),
                    columns_of(velocity))
                   for start, at, velocity, offset, scale, weight, along in self._applied]

        def work(x: np.ndarray) -> float:
            inner = x if shift_step is None else x + shift_step
            total = 0.0
            for (_, at, velocity, at_step, velocity_step, when, _, weight, along,
                 along_step, *_) in applied:
                if weight:
                    u = at_step + at.unknowns @ inner
                    v = velocity_step + velocity.unknowns @ inner
                    direction = along_step + along.unknowns @ inner
                    total += weight * float(model.applied_force(when, u, v) @ direction)
            return total

        extra.work = work
        return extra


def _stack(parts: list, n_equations: int, n_unknowns: int, dense: bool):
    """The (n_equations, n_unknowns) matrix summing blocks placed at row offsets."""
    if dense:
        out = np.zeros((n_equations, n_unknowns))
        for start, block in parts:
            block = block.toarray() if sp.issparse(block) else np.asarray(block)
            out[start:start + block.shape[0]] += block
        return out
    rows, cols, values = [np.zeros(0, dtype=np.int64)], [np.zeros(0, dtype=np.int64)], [
        np.zeros(0)]
    for start, block in parts:
        coo = sp.coo_matrix(block)
        rows.append(coo.row.astype(np.int64) + start)
        cols.append(coo.col.astype(np.int64))
        values.append(coo.data)
    return sp.csc_matrix((np.concatenate(values), (np.concatenate(rows), np.concatenate(cols))),
                         shape=(n_equations, n_unknowns))


class ModelEquations(EquationLayout):
    """Builds a scheme's step equations for evaluation through the model's own functions.

    Same term methods as :class:`~mbs.backends.polynomial.QuadraticSystemBuilder`, so that a
    scheme writes its equations once; works for every model (constraints and potentials of
    any form). :meth:`build` returns a :class:`ModelSystem`.
    """

    def __init__(self, model, data: dict[str, int], unknowns: dict[str, int]):
        super().__init__(data, unknowns, model.constant_potential_gradient(),
                         model.has_applied_forces)
        self.model = model
        self._constant: list[tuple[str, np.ndarray]] = []
        self._linear: list[tuple[str, Linear]] = []
        self._terms: list[tuple] = []

    def add_constant(self, equation: str, vector: np.ndarray) -> None:
        """R[equation] += vector."""
        self._constant.append((equation, np.asarray(vector, dtype=float)))

    def add_linear(self, equation: str, term: Linear) -> None:
        """R[equation] += S w."""
        self._linear.append((equation, term))

    # Every constraint term takes the ``time`` of its point after the step's start: drives
    # (rheonomic constraints) are evaluated there; the other constraints ignore it.
    def add_jacobian_transpose_product(self, equation: str, at: Linear, multipliers: Linear,
                                       scale: float = 1.0, time: float = 0.0) -> None:
        """R[equation] += scale G(u)^T mu."""
        self._terms.append(("jacobian_transpose", equation, (at, multipliers), scale, time))

    def add_discrete_jacobian_transpose_product(self, equation: str, first: Linear,
                                                second: Linear, multipliers: Linear,
                                                scale: float = 1.0, time: float = 0.0) -> None:
        """R[equation] += scale D^G g(a, b)^T mu (the model's discrete derivative)."""
        self._terms.append(("discrete_jacobian_transpose", equation,
                            (first, second, multipliers, (first + second) * 0.5), scale, time))

    def add_mean_jacobian_transpose_product(self, equation: str, first: Linear,
                                            second: Linear, multipliers: Linear,
                                            scale: float = 1.0, time: float = 0.0) -> None:
        """R[equation] += scale ((G(a) + G(b)) / 2)^T mu (the midpoint Jacobian, equal to it,
        for quadratic constraints; see :meth:`mbs.Model.mean_jacobian_matrix`)."""
        self._terms.append(("mean_jacobian_transpose", equation,
                            (first, second, multipliers, (first + second) * 0.5), scale, time))

    def add_discrete_hessian_product(self, equation: str, first: Linear, second: Linear,
                                     multipliers: Linear, vector: Linear, scale: float = 1.0,
                                     time: float = 0.0) -> None:
        """R[equation] += scale times a discrete gradient of mu . G(q) v between a and b, the
        midpoint Hessian product (sum_k mu_k d2 g_k((a + b)/2)) v for quadratic constraints
        (see :meth:`mbs.Model.discrete_hessian_vector`)."""
        self._terms.append(("discrete_hessian", equation,
                            (first, second, multipliers, vector, (first + second) * 0.5),
                            scale, time))

    def add_jacobian_product(self, equation: str, at: Linear, vector: Linear,
                             scale: float = 1.0, time: float = 0.0) -> None:
        """R[equation] += scale (G(u) v + dg/dt(u)): the rate of the constraints along the
        velocity v (dg/dt is nonzero for drives only)."""
        self._terms.append(("jacobian", equation, (at, vector), scale, time))

    def add_hessian_product(self, equation: str, at: Linear, multipliers: Linear,
                            vector: Linear, scale: float = 1.0, time: float = 0.0) -> None:
        """R[equation] += scale (sum_k mu_k d2 g_k(u)) v."""
        self._terms.append(("hessian", equation, (at, multipliers, vector), scale, time))

    def add_constraints(self, equation: str, at: Linear, time: float = 0.0) -> None:
        """R[equation] += g(u)."""
        self._terms.append(("constraints", equation, (at,), 1.0, time))

    def build(self) -> ModelSystem:
        n_eq, n_d = self.n_equations, self.n_data
        constant = np.zeros(n_eq)
        for equation, vector in self._constant:
            constant[self._rows(equation, np.arange(vector.size))] += vector
        linear = sp.csr_matrix((n_eq, self.n_w))
        for equation, term in self._linear:
            start, size = self._equations[equation]
            placed = sp.vstack([sp.csr_matrix((start, self.n_w)), term.matrix,
                                sp.csr_matrix((n_eq - start - size, self.n_w))])
            linear = linear + placed
        split = _Maps(n_d)
        terms = [(kind, *self._equations[equation], tuple(split(a) for a in arguments), scale,
                  time) for kind, equation, arguments, scale, time in self._terms]
        return ModelSystem(self.model, constant, linear.tocsr(), terms,
                           self._potential_terms(), n_d, self.n_unknowns)


class ModelSystem:
    """Residual and Jacobian of a :class:`ModelEquations` definition at the step data set by
    :meth:`start` (``evaluate`` is the ``system`` of :func:`mbs.engine.newton.newton`).

    Small models keep the linear maps as dense arrays and the Jacobian dense; every model
    function is evaluated once per point and iterate, however many terms use it."""

    def __init__(self, model, constant: np.ndarray, linear: sp.csr_matrix, terms: list,
                 potential: PotentialTerms | None, n_data: int, n_unknowns: int):
        self.model = model
        self.n_equations, self.n_data, self.n_unknowns = constant.size, n_data, n_unknowns
        self.constant = constant
        self.dense = model.dense
        convert = (lambda a: a.toarray()) if self.dense else (lambda a: a)
        self.linear_data = convert(linear[:, :n_data].tocsr())
        self.linear_unknowns = convert(linear[:, n_data:].tocsr())
        self._linear_jacobian = (self.linear_unknowns if self.dense
                                 else self.linear_unknowns.tocsc())
        maps = {id(m): m for _, _, _, arguments, _, _ in terms for m in arguments}
        self._maps = {key: (convert(m.unknowns), m.moves) for key, m in maps.items()}
        # every point of every term in one product per iterate: (S_d d + S_x x) stacked
        ends = np.cumsum([m.data.shape[0] for m in maps.values()], dtype=np.intp)
        self._slices = {key: slice(end - m.data.shape[0], end)
                        for (key, m), end in zip(maps.items(), ends)}
        def stack(part: str, width: int):
            blocks = [getattr(m, part) for m in maps.values()]
            return convert(sp.vstack(blocks, format="csr") if blocks
                           else sp.csr_matrix((0, width)))

        self._points_data = stack("data", n_data)
        self._points_unknowns = stack("unknowns", n_unknowns)
        self._terms = [(kind, start, size, tuple(id(m) for m in arguments), scale, time)
                       for kind, start, size, arguments, scale, time in terms]
        self._potential = potential
        self._time = 0.0

    def start(self, data: np.ndarray, time: float = 0.0) -> None:
        """Fold the step data ``d`` (and the step's start time) into the constant part
        and the maps."""
        self._data = data
        self._constant_step = self.constant + self.linear_data @ data
        self._points_step = self._points_data @ data
        self._time = time
        self._extra = (None if self._potential is None else
                       self._potential.bind(self.model, data, time=time))

    @property
    def bound_terms(self):
        """The model-evaluated terms bound to the current step (None without any); their
        ``work(x)`` is the work of the applied forces."""
        return self._extra

    def evaluate(self, x: np.ndarray, jacobian: bool = True, first_row: int = 0):
        """(R(x), dR/dx) -- the Jacobian dense for small models, sparse CSC otherwise. Without
        the Jacobian, terms that only add to rows before ``first_row`` are skipped (those
        rows are then incomplete)."""
        stacked = self._points_step + self._points_unknowns @ x
        points = {key: stacked[rows] for key, rows in self._slices.items()}
        at_time: dict[float, _Evaluations] = {}  # the model's functions at each term time
        residual = self._constant_step + self.linear_unknowns @ x
        matrix = self._linear_jacobian.copy() if jacobian and self.dense else None
        parts = []
        for kind, start, size, arguments, scale, time in self._terms:
            if not jacobian and start + size <= first_row:
                continue
            model_at = at_time.get(time)
            if model_at is None:
                model_at = at_time[time] = _Evaluations(self.model, points, self._time + time)
            value, derivatives = _TERMS[kind]
            residual[start:start + size] += scale * value(model_at, *arguments)
            for index, derivative in derivatives.items() if jacobian else ():
                unknowns, moves = self._maps[arguments[index]]
                if not moves:
                    continue
                block = scale * (derivative(model_at, *arguments) @ unknowns)
                if matrix is not None:
                    matrix[start:start + block.shape[0]] += block
                else:
                    parts.append((start, block))
        if self._extra is not None and (jacobian or self._potential.rows_end > first_row):
            r_extra, j_extra = self._extra(x, jacobian)
            residual += r_extra
            if matrix is not None:
                matrix += j_extra
            elif jacobian:
                parts.append((0, j_extra))
        if not jacobian:
            return residual, None
        if matrix is None:
            matrix = _stack(parts, self.n_equations, self.n_unknowns, False) + \
                self._linear_jacobian
        return residual, matrix


    def term_sizes(self, x: np.ndarray, size: np.ndarray) -> np.ndarray:
        """Per row, the size of the terms that the residual sums at ``x``:
        sum_j |dR_i/dz_j| |z_j| over the step data and the unknowns z (``size``: the natural
        size of the unknowns), plus the size of the constant and applied-force terms.

        Round-off in R_i is a small multiple of this (the stall test
        :func:`~mbs.engine.newton.residual_at_roundoff`). The step data count: a stage
        scheme's constraint row g(q_k + h sum_j a_ij V_j) sums terms of the size of the
        positions, while its derivative in the stage velocities is only of the size h G."""
        data = np.abs(self._data)
        point_sizes = abs(self._points_data) @ data + abs(self._points_unknowns) @ size
        stacked = self._points_step + self._points_unknowns @ x
        points = {key: stacked[rows] for key, rows in self._slices.items()}
        magnitude = (np.abs(self.constant) + abs(self.linear_data) @ data
                     + abs(self.linear_unknowns) @ size)
        at_time: dict[float, _Evaluations] = {}
        for kind, start, _, arguments, scale, time in self._terms:
            model_at = at_time.get(time)
            if model_at is None:
                model_at = at_time[time] = _Evaluations(self.model, points, self._time + time)
            for index, derivative in _TERMS[kind][1].items():
                block = abs(derivative(model_at, *arguments)) @ point_sizes[
                    self._slices[arguments[index]]]
                magnitude[start:start + block.shape[0]] += abs(scale) * block
        if self._extra is not None:
            r_extra, j_extra = self._extra(x, True)
            magnitude += np.abs(r_extra) + abs(j_extra) @ size
        return magnitude


class _Evaluations:
    """The model's functions at the points of one iterate, each evaluated once."""

    def __init__(self, model, points: dict[int, np.ndarray], time: float = 0.0):
        self.model, self.points, self._done, self.time = model, points, {}, time

    def __call__(self, function: str, *keys: int):
        """``model.<function>`` at the points (or vectors) of the maps ``keys`` and at the
        terms' time (constraint functions take it as ``t``)."""
        out = self._done.get((function, *keys))
        if out is None:
            out = self._done[(function, *keys)] = getattr(self.model, function)(
                *(self.points[key] for key in keys), t=self.time)
        return out

    def mean_jacobian(self, a: int, b: int):
        """(G(a) + G(b)) / 2 of the user rows (:meth:`mbs.Model.mean_jacobian_matrix`): the
        discrete Jacobian, evaluated once for both, when every constraint is quadratic."""
        if self.model.quadratic_forms_only:
            return self("discrete_jacobian_matrix", a, b)
        return self("mean_jacobian_matrix", a, b)

    def discrete_hessian(self, a: int, b: int, mu: int, v: int, middle: int):
        """:meth:`mbs.Model.discrete_hessian_vector` from the Hessian product at the middle
        that the derivatives share, plus the user rows' corrections."""
        value = self("hessian_product_matrix", middle, mu) @ self.points[v]
        if self.model.quadratic_forms_only:
            return value
        return value + self("hessian_corrections", a, b, mu, v)

    def rate(self, at: int, vector: int):
        """G(u) v + dg/dt(u): dg/dt only for rheonomic models."""
        value = self("jacobian_matrix", at) @ self.points[vector]
        if self.model.is_rheonomic:
            value = value + self("constraint_time_derivative", at)
        return value

    def rate_derivative(self, at: int, vector: int):
        """d/du [G(u) v + dg/dt(u)]."""
        value = self("hessian_vector_matrix", at, vector)
        if self.model.is_rheonomic:
            value = value + self("constraint_time_derivative_jacobian", at)
        return value


# Each term kind: its value and its derivative with respect to each argument, as functions of
# the model's evaluations at the iterate and the arguments' keys. Arguments missing from the
# derivatives (the point of a Hessian product; the multipliers' midpoint of a discrete
# Jacobian) enter through third derivatives or not at all: exact for quadratic constraints.
_TERMS = {
    "jacobian_transpose": (  # G(u)^T mu
        lambda f, u, mu: f("jacobian_matrix", u).T @ f.points[mu],
        {0: lambda f, u, mu: f("hessian_product_matrix", u, mu),
         1: lambda f, u, mu: f("jacobian_matrix", u).T}),
    "discrete_jacobian_transpose": (  # D^G g(a, b)^T mu; d/da = d/db = 1/2 H(mu) at the middle
        lambda f, a, b, mu, middle: f("discrete_jacobian_matrix", a, b).T @ f.points[mu],
        {0: lambda f, a, b, mu, middle: 0.5 * f("hessian_product_matrix", middle, mu),
         1: lambda f, a, b, mu, middle: 0.5 * f("hessian_product_matrix", middle, mu),
         2: lambda f, a, b, mu, middle: f("discrete_jacobian_matrix", a, b).T}),
    "mean_jacobian_transpose": (  # ((G(a) + G(b)) / 2)^T mu; d/da, d/db as above
        lambda f, a, b, mu, middle: f.mean_jacobian(a, b).T @ f.points[mu],
        {0: lambda f, a, b, mu, middle: 0.5 * f("hessian_product_matrix", middle, mu),
         1: lambda f, a, b, mu, middle: 0.5 * f("hessian_product_matrix", middle, mu),
         2: lambda f, a, b, mu, middle: f.mean_jacobian(a, b).T}),
    "discrete_hessian": (  # discrete gradient of mu . G(q) v; derivatives at the middle
        lambda f, a, b, mu, v, middle: f.discrete_hessian(a, b, mu, v, middle),
        {2: lambda f, a, b, mu, v, middle: f("hessian_vector_matrix", middle, v).T,
         3: lambda f, a, b, mu, v, middle: f("hessian_product_matrix", middle, mu)}),
    "jacobian": (  # G(u) v + dg/dt(u)
        lambda f, u, v: f.rate(u, v),
        {0: lambda f, u, v: f.rate_derivative(u, v),
         1: lambda f, u, v: f("jacobian_matrix", u)}),
    "hessian": (  # sum_k mu_k d2 g_k(u) v
        lambda f, u, mu, v: f("hessian_product_matrix", u, mu) @ f.points[v],
        {1: lambda f, u, mu, v: f("hessian_vector_matrix", u, v).T,
         2: lambda f, u, mu, v: f("hessian_product_matrix", u, mu)}),
    "constraints": (  # g(u)
        lambda f, u: f("constraints", u),
        {0: lambda f, u: f("jacobian_matrix", u)}),
}
