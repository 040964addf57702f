"""Step equations that are quadratic polynomials, evaluated from precomputed sparse tensors.

With a constant mass matrix and quadratic constraints (every built-in joint and the director
orthonormality conditions), the step equations of the energy-momentum scheme (seed 003, (84))
and of the GGL variational integrators ((55), (79), (82)) are polynomials of degree 2 in the
vector ``w = (d, x)`` of step data ``d = (q^n, p^n)`` and unknowns ``x``; only the potential
may add non-polynomial terms. Writing the quadratic part through its symmetric derivative
tensor ``T`` (``D(w) = sum_k T[:, :, k] w_k``)::

    R(w)  = c + L w + 1/2 D(w) w,        dR/dw = L + D(w).

Once per step the data part is folded in (``c_step = c + L_d d + 1/2 D_dd(d) d``,
``L_step = L_x + D_xd(d)``), after which every Newton iteration costs one sparse mat-vec
``D_xx(x) = T_xx x`` plus a handful of dense operations, whatever the scheme: the Jacobian is an
affine function of the unknowns with a constant pattern (issue 7). This replaces ~50 numpy calls
of the element-wise assembly per iteration by ~10.

The coefficients are built exactly from the constraint table (no numerical probing), so the
polynomial is the same function as the assembled residual, up to the order of floating-point
additions. Rows that are constraint values g(u) are re-evaluated from the table's factored form
after the polynomial evaluation, because the expanded quadratic loses ~|q|^2 eps far from the
origin (see :class:`mbs.quadratic.FactoredTerms`).

Small models (n <= 48) keep D_xx(x) as a dense (equations x unknowns) array
(:class:`QuadraticSystem`, also the input of the compiled kernel); larger ones keep the tensor
and the Jacobian on the Jacobian's sparsity pattern (:class:`SparseQuadraticSystem`).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable

import numpy as np
import scipy.sparse as sp

from mbs.quadratic import QuadraticTable
from mbs.solvers.newton import NewtonConvergenceError, NewtonOptions, _getrf, _getrs, _segments

#: max of an array without ndarray.max's Python-level wrapper (~1 us per call on small arrays)
_max = np.maximum.reduce

try:  # direct CSR mat-vec into a preallocated buffer: ~2x cheaper than ``matrix @ x``
    from scipy.sparse._sparsetools import csr_matvec as _csr_matvec
except ImportError:  # pragma: no cover - private SciPy API; fall back to the public one
    _csr_matvec = None


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


def _expand(rows: np.ndarray, matrix: sp.csr_matrix) -> tuple[np.ndarray, np.ndarray]:
    """For each entry e (asking for row ``rows[e]`` of ``matrix``), one output per stored
    element of that row: (entry index, position in matrix.data)."""
    starts = matrix.indptr[rows]
    counts = matrix.indptr[rows + 1] - starts
    entry = np.repeat(np.arange(rows.size), counts)
    offsets = np.arange(entry.size) - np.repeat(np.cumsum(counts) - counts, counts)
    return entry, starts[entry] + offsets


def _embed(block, row_offset: int, size: int):
    """A (size, size) matrix holding ``block`` (n x n, dense or sparse) at rows
    row_offset .. row_offset + n and columns 0 .. n (the q1 columns of a step's unknowns)."""
    n = block.shape[0]
    if isinstance(block, np.ndarray):
        out = np.zeros((size, size))
        out[row_offset:row_offset + n, :n] = block
        return out
    coo = sp.coo_matrix(block)
    return sp.csr_matrix((coo.data, (coo.row + row_offset, coo.col)), shape=(size, size))


def _factored_override(table: QuadraticTable, start: int, from_data, from_unknowns,
                       convert: Callable) -> tuple | None:
    """Constraint rows g(u), u = U_d d + U_x x, from the factored form of the table: the
    affine 3-vectors of every product term are composed with u's map, so one mat-vec gives
    them all (see :class:`mbs.quadratic.FactoredTerms`). None when the table has no factored
    form (then the polynomial value is the value). ``convert`` makes the maps dense or CSR.

    Returns (start, rows, U x-map, U d-map, constant of the 3-vectors, row_sum, explicit
    constants, half length) where row_sum[k, 3 t + c] = scale_t for row k = row_t.
    """
    factored = table.factored
    if factored is None:
        return None
    uv_map = sp.vstack([sp.csr_matrix(factored.u_map), sp.csr_matrix(factored.v_map)])
    uv_const = np.concatenate([factored.u_const.ravel(), factored.v_const.ravel()])
    terms = factored.row.size
    row_sum = sp.csr_matrix((np.repeat(factored.scale, 3),
                             (np.repeat(factored.row, 3), np.arange(3 * terms))),
                            shape=(table.n_rows, 3 * terms))
    return (start, table.n_rows, convert(uv_map @ from_unknowns), convert(uv_map @ from_data),
            uv_const, convert(row_sum), factored.explicit_constant.copy(), 3 * terms)


class QuadraticSystemBuilder:
    """Collects the terms of a residual that is quadratic in ``w = (data blocks, unknowns)``.

    Parameters
    ----------
    table : QuadraticTable
        Constraint table g(q) = A(q, q) + b q + e (the model's quadratic constraints).
    data, unknowns : dict of name -> size
        Blocks of w in order; ``data`` is fixed during a step, ``unknowns`` is Newton's x.

    Residual blocks are declared with :meth:`equation` in order; terms are added to a block
    by name. All terms are exact: their coefficients are products of table coefficients,
    scheme constants and the entries of the linear maps.
    """

    def __init__(self, table: QuadraticTable, data: dict[str, int], unknowns: dict[str, int]):
        self.table = table
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
        self._constant: list[tuple[np.ndarray, np.ndarray]] = []
        self._linear: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self._quadratic: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
        self._overrides: list[tuple[int, Linear]] = []

    # -- declarations -----------------------------------------------------------------------
    def variable(self, name: str) -> Linear:
        """The block ``name`` of w as a linear function (a selector)."""
        start, size = self._variables[name]
        selector = sp.csr_matrix((np.ones(size), (np.arange(size), start + np.arange(size))),
                                 shape=(size, self.n_w))
        return Linear(selector)

    def equation(self, name: str, size: int) -> None:
        """Declare the next residual block."""
        self._equations[name] = (self.n_equations, int(size))
        self.n_equations += int(size)

    def _rows(self, equation: str, local: np.ndarray) -> np.ndarray:
        start, _ = self._equations[equation]
        return start + np.asarray(local, dtype=np.int64)

    # -- terms ------------------------------------------------------------------------------
    def add_constant(self, equation: str, vector: np.ndarray) -> None:
        """R[equation] += vector."""
        vector = np.asarray(vector, dtype=float)
        self._constant.append((self._rows(equation, np.arange(vector.size)), vector))

    def add_linear(self, equation: str, term: Linear) -> None:
        """R[equation] += S w."""
        coo = term.matrix.tocoo()
        self._linear.append((self._rows(equation, coo.row), coo.col, coo.data))

    def _add_linear_entries(self, out, source: Linear, source_rows, coef) -> None:
        """R[out_e] += coef_e (S w)[source_rows_e] for each entry e."""
        entry, position = _expand(np.asarray(source_rows, dtype=np.int64), source.matrix)
        self._linear.append((out[entry], source.matrix.indices[position],
                             coef[entry] * source.matrix.data[position]))

    def _add_bilinear_entries(self, out, first: Linear, first_rows, second: Linear,
                              second_rows, coef) -> None:
        """R[out_e] += coef_e (S1 w)[first_rows_e] (S2 w)[second_rows_e] for each entry e."""
        entry1, pos1 = _expand(np.asarray(first_rows, dtype=np.int64), first.matrix)
        entry2, pos2 = _expand(np.asarray(second_rows, dtype=np.int64)[entry1], second.matrix)
        entry = entry1[entry2]
        pos1 = pos1[entry2]
        self._quadratic.append((
            out[entry], first.matrix.indices[pos1], second.matrix.indices[pos2],
            coef[entry] * first.matrix.data[pos1] * second.matrix.data[pos2]))

    def _hessian_entries(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Entries (row k, coordinate l, coordinate j, coefficient) of the constant Hessians
        d2 g_k / dq_l dq_j: each term a q_i q_j gives (i, j, a) and (j, i, a)."""
        t = self.table
        return (np.concatenate([t.quad_row, t.quad_row]),
                np.concatenate([t.quad_i, t.quad_j]), np.concatenate([t.quad_j, t.quad_i]),
                np.concatenate([t.quad_coef, t.quad_coef]))

    def add_jacobian_transpose_product(self, equation: str, at: Linear, multipliers: Linear,
                                       scale: float = 1.0) -> None:
        """R[equation] += scale G(u)^T mu, with u = ``at`` and mu = ``multipliers``."""
        t = self.table
        self._add_linear_entries(self._rows(equation, t.lin_i), multipliers, t.lin_row,
                                 scale * t.lin_coef)
        # component l: sum_k mu_k d2 g_k / dq_l dq_j u_j
        row, coord_l, coord_j, coef = self._hessian_entries()
        self._add_bilinear_entries(self._rows(equation, coord_l), multipliers, row,
                                   at, coord_j, scale * coef)

    def add_jacobian_product(self, equation: str, at: Linear, vector: Linear,
                             scale: float = 1.0) -> None:
        """R[equation] += scale G(u) v, with u = ``at`` and v = ``vector``."""
        t = self.table
        self._add_linear_entries(self._rows(equation, t.lin_row), vector, t.lin_i,
                                 scale * t.lin_coef)
        # component k: sum_{l, j} d2 g_k / dq_l dq_j u_j v_l
        row, coord_l, coord_j, coef = self._hessian_entries()
        self._add_bilinear_entries(self._rows(equation, row), at, coord_j, vector, coord_l,
                                   scale * coef)

    def add_hessian_product(self, equation: str, multipliers: Linear, vector: Linear,
                            scale: float = 1.0) -> None:
        """R[equation] += scale (sum_k mu_k d2 g_k) v (constant Hessians)."""
        row, coord_l, coord_j, coef = self._hessian_entries()
        self._add_bilinear_entries(self._rows(equation, coord_l), multipliers, row,
                                   vector, coord_j, scale * coef)

    def add_constraints(self, equation: str, at: Linear) -> None:
        """R[equation] += g(u); the rows are re-evaluated from the factored form."""
        t = self.table
        self.add_constant(equation, t.constant)
        self._add_linear_entries(self._rows(equation, t.lin_row), at, t.lin_i, t.lin_coef)
        self._add_bilinear_entries(self._rows(equation, t.quad_row), at, t.quad_i, at,
                                   t.quad_j, t.quad_coef.astype(float))
        self._overrides.append((self._equations[equation][0], at))

    # -- result -----------------------------------------------------------------------------
    def build(self, dense: bool = True) -> QuadraticSystem:
        """Freeze the collected terms into a :class:`QuadraticSystem`."""
        n_eq, n_w, n_d, n_x = self.n_equations, self.n_w, self.n_data, self.n_unknowns
        constant = np.zeros(n_eq)
        for rows, values in self._constant:
            np.add.at(constant, rows, values)
        lin = [np.concatenate(parts) if parts else np.zeros(0)
               for parts in zip(*self._linear)] if self._linear else [np.zeros(0)] * 3
        linear = sp.csr_matrix((lin[2], (lin[0].astype(np.int64), lin[1].astype(np.int64))),
                               shape=(n_eq, n_w))
        quad = ([np.concatenate(parts) for parts in zip(*self._quadratic)]
                if self._quadratic else [np.zeros(0, dtype=np.int64)] * 3 + [np.zeros(0)])
        out, j, k, values = (quad[0].astype(np.int64), quad[1].astype(np.int64),
                             quad[2].astype(np.int64), quad[3])
        # Symmetric derivative tensor: d/dw_j of sum Q_ijk w_j w_k = sum_k (Q_ijk + Q_ikj) w_k.
        rows_i = np.concatenate([out, out])
        cols_j = np.concatenate([j, k])
        cols_k = np.concatenate([k, j])
        values = np.concatenate([values, values])
        is_x_j, is_x_k = cols_j >= n_d, cols_k >= n_d

        def tensor(mask_j, mask_k, offset_j, width_j, offset_k, width_k):
            select = mask_j & mask_k
            row = rows_i[select] * width_j + (cols_j[select] - offset_j)
            matrix = sp.csr_matrix((values[select], (row, cols_k[select] - offset_k)),
                                   shape=(n_eq * width_j, width_k))
            matrix.sum_duplicates()
            matrix.eliminate_zeros()
            return matrix

        if not dense:
            parts = {name: (rows_i[sel], cols_j[sel], cols_k[sel], values[sel]) for name, sel in
                     (("xx", is_x_j & is_x_k), ("xd", is_x_j & ~is_x_k),
                      ("dd", ~is_x_j & ~is_x_k))}
            overrides = [(start, term.matrix[:, :n_d].tocsr(), term.matrix[:, n_d:].tocsr())
                         for start, term in self._overrides]
            from mbs.solvers.polynomial_sparse import SparseQuadraticSystem

            return SparseQuadraticSystem(self.table, constant, linear, parts, overrides, n_d,
                                         n_x)
        tensor_xx = tensor(is_x_j, is_x_k, n_d, n_x, n_d, n_x)
        tensor_xd = tensor(is_x_j, ~is_x_k, n_d, n_x, 0, n_d)
        tensor_dd = tensor(~is_x_j, ~is_x_k, 0, n_d, 0, n_d)
        overrides = [(start, term.matrix[:, :n_d].tocsr(), term.matrix[:, n_d:].tocsr())
                     for start, term in self._overrides]
        return QuadraticSystem(self.table, constant, linear, tensor_xx, tensor_xd, tensor_dd,
                               overrides, n_d, n_x, dense)


class QuadraticSystem:
    """Evaluates a residual built by :class:`QuadraticSystemBuilder` and its Jacobian.

    Call :meth:`start` with the step data d once per step, then :meth:`evaluate` with the
    unknowns x as often as Newton needs. ``extra(x)`` (given to :meth:`start`) may add
    non-polynomial terms, e.g. a potential's discrete gradient: it returns ``(r, J)`` to be
    added (either may be None).
    """

    def __init__(self, table: QuadraticTable, constant: np.ndarray, linear: sp.csr_matrix,
                 tensor_xx: sp.csr_matrix, tensor_xd: sp.csr_matrix,
                 tensor_dd: sp.csr_matrix, overrides: list, n_data: int, n_unknowns: int,
                 dense: bool):
        self.table = table
        self.n_equations = constant.size
        self.n_data, self.n_unknowns = n_data, n_unknowns
        self.constant = constant
        self.linear_data = linear[:, :n_data].toarray() if dense else linear[:, :n_data]
        self.linear_unknowns = (linear[:, n_data:].toarray() if dense
                                else linear[:, n_data:].tocsr())
        self.tensor_xx, self.tensor_xd, self.tensor_dd = tensor_xx, tensor_xd, tensor_dd
        self.dense = dense
        self._buffer = np.zeros(self.n_equations * n_unknowns)
        self._buffer_xd = np.zeros(self.n_equations * n_unknowns)
        self._buffer_dd = np.zeros(self.n_equations * n_data)
        self._jacobian_buffer = np.zeros((self.n_equations, n_unknowns))
        self._extra: Callable | None = None
        self._overrides = [self._factored_map(start, from_data, from_unknowns)
                           for start, from_data, from_unknowns in overrides]

    def _factored_map(self, start: int, from_data: sp.csr_matrix,
                      from_unknowns: sp.csr_matrix) -> tuple | None:
        return _factored_override(self.table, start, from_data, from_unknowns,
                                  (lambda a: a.toarray()) if self.dense
                                  else (lambda a: a.tocsr()))

    def for_run(self) -> QuadraticSystem:
        """A copy sharing the constant arrays, with its own per-step buffers."""
        run = copy.copy(self)
        run._buffer = np.zeros_like(self._buffer)
        run._buffer_xd = np.zeros_like(self._buffer_xd)
        run._buffer_dd = np.zeros_like(self._buffer_dd)
        run._jacobian_buffer = np.zeros_like(self._jacobian_buffer)
        run._extra = None
        return run

    @staticmethod
    def _matvec(matrix: sp.csr_matrix, x: np.ndarray, buffer: np.ndarray) -> np.ndarray:
        if _csr_matvec is None:
            return matrix @ x
        buffer.fill(0.0)
        rows, cols = matrix._shape  # the property costs a Python call per mat-vec
        _csr_matvec(rows, cols, matrix.indptr, matrix.indices, matrix.data, x, buffer)
        return buffer

    def start(self, data: np.ndarray, extra: Callable | None = None) -> None:
        """Fold the step data into the constant and linear parts."""
        n_eq, n_d, n_x = self.n_equations, self.n_data, self.n_unknowns
        d_dd = self._matvec(self.tensor_dd, data, self._buffer_dd).reshape(n_eq, n_d)
        self.constant_step = self.constant + self.linear_data @ data + 0.5 * (d_dd @ data)
        d_xd = self._matvec(self.tensor_xd, data, self._buffer_xd).reshape(n_eq, n_x)
        self.linear_step = self.linear_unknowns + d_xd
        self._override_step = [
            None if o is None else (o[0], o[1], o[2], o[3] @ data + o[4], o[5], o[6], o[7])
            for o in self._overrides]
        self._extra = extra

    def evaluate(self, x: np.ndarray, jacobian: bool = True):
        """(R(x), dR/dx) at the current step data; the Jacobian is None when not asked."""
        d_xx = self._matvec(self.tensor_xx, x, self._buffer).reshape(
            self.n_equations, self.n_unknowns)
        residual = self.constant_step + (self.linear_step + 0.5 * d_xx) @ x
        for override in self._override_step:
            if override is not None:
                start, rows, uv_map, uv_step, row_sum, constant, half = override
                uv = uv_map @ x + uv_step
                residual[start:start + rows] = row_sum @ (uv[:half] * uv[half:]) + constant
        jac = (self.linear_step + d_xx) if jacobian else None
        if self._extra is not None:
            r_extra, j_extra = self._extra(x, jacobian)
            if r_extra is not None:
                residual += r_extra
            if jacobian and j_extra is not None:
                jac += j_extra
        return residual, jac

    def solve(self, x0: np.ndarray, blocks: list[slice], scales: list[float],
              options: NewtonOptions) -> tuple[np.ndarray, int, int, float]:
        """Newton's method on R(x) = 0 at the current step data.

        Same stopping rules, errors and factorisation reuse as
        :func:`mbs.solvers.newton.newton` (relative increments per block, stagnation,
        ``refactor_above``), but with the evaluation inlined, the Jacobian written into a
        preallocated buffer and LAPACK getrf/getrs applied to its transpose (Fortran order,
        so nothing is copied). Dense systems only.

        Returns
        -------
        x, iterations, factorisations, residual norm at the last evaluation.
        """
        segments, floors, lead = _segments(blocks, scales)
        spans = [(slice(lead.start + s, lead.start + e), floor) for s, e, floor in
                 zip(segments, list(segments[1:]) + [lead.stop - lead.start], floors)]

        def relative_increment(step, x):
            """max over blocks of max|dx_b| / max(scale_b, max|x_b|)."""
            return max(float(_max(np.abs(step[span]))) / max(floor, float(_max(np.abs(x[span]))))
                       for span, floor in spans) if spans else 0.0

        # Cheap estimate with the block magnitudes of x0 (one vector product per iteration);
        # the exact increment is computed only when a stopping decision depends on it.
        weights = np.zeros(lead.stop - lead.start)
        for span, floor in spans:
            weights[span.start - lead.start:span.stop - lead.start] = 1.0 / max(
                floor, float(_max(np.abs(x0[span]))))
        tolerance, stagnation = options.tolerance, options.stagnation_level
        contraction, refactor_above = options.contraction, options.refactor_above
        jac = self._jacobian_buffer
        x = x0.copy()
        previous = increment = np.inf
        residual = x
        lu = pivots = None
        factorizations = 0
        for iteration in range(1, options.max_iterations + 1):
            fresh = lu is None
            d_xx = self._matvec(self.tensor_xx, x, self._buffer).reshape(
                self.n_equations, self.n_unknowns)
            if fresh:
                np.add(self.linear_step, d_xx, out=jac)
                residual = self.constant_step + (jac - 0.5 * d_xx) @ x
            else:
                residual = self.constant_step + (self.linear_step + 0.5 * d_xx) @ x
            for override in self._override_step:
                if override is not None:
                    start, rows, uv_map, uv_step, row_sum, constant, half = override
                    uv = uv_map @ x + uv_step
                    residual[start:start + rows] = row_sum @ (uv[:half] * uv[half:]) + constant
            if self._extra is not None:
                r_extra, j_extra = self._extra(x, fresh)
                if r_extra is not None:
                    residual += r_extra
                if fresh and j_extra is not None:
                    jac += j_extra
            if not math.isfinite(residual @ residual):
                raise NewtonConvergenceError("residual is not finite",
                                             float(np.abs(residual).max()), np.inf, iteration,
                                             "the state blew up: reduce the step size")
            if fresh:
                lu, pivots, info = _getrf(jac.T, overwrite_a=1)  # LU of J^T
                factorizations += 1
                if info != 0:
                    raise NewtonConvergenceError(
                        f"singular Newton matrix (getrf info = {info})",
                        float(np.abs(residual).max()), np.inf, iteration,
                        "singular configuration or redundant constraints; check "
                        "model.redundancies")
            step = _getrs(lu, pivots, residual, trans=1)[0]  # J step = R
            if not math.isfinite(step @ step):
                raise NewtonConvergenceError(
                    "Newton increment is not finite", float(np.abs(residual).max()), np.inf,
                    iteration, "singular Newton matrix: singular configuration, redundant "
                    "constraints, or a too large step")
            x -= step
            increment = float(_max(np.abs(step[lead]) * weights)) if spans else 0.0
            if increment <= 4.0 * max(tolerance, stagnation):
                increment = relative_increment(step, x)
            if (increment <= tolerance
                    or (fresh and increment <= stagnation and increment > 0.5 * previous)):
                return x, iteration, factorizations, float(_max(np.abs(residual)))
            if increment > contraction * previous or increment > refactor_above:
                lu = None
            previous = increment
        residual_norm = float(np.abs(residual).max())
        raise NewtonConvergenceError(
            f"Newton did not converge in {options.max_iterations} iterations (last relative "
            f"increment {increment:.3e}, residual {residual_norm:.3e})", residual_norm,
            increment, options.max_iterations, "reduce the step size or raise max_iterations")
