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
affine function of the unknowns with a constant pattern. An iteration thus takes a fraction of
the numpy calls of the element-wise assembly.

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
import functools
import math
from collections.abc import Callable

import numpy as np
import scipy.sparse as sp
from scipy.linalg import lapack

from mbs.backends.factored_rows import csr_matvec, factored_override
from mbs.backends.polynomial_sparse import SparseQuadraticSystem
from mbs.engine.equations import EquationLayout, Linear
from mbs.engine.newton import (
    NEWTON_HINT,
    NewtonConvergenceError,
    NewtonOptions,
    _getrs,
    converged,
    natural_size,
    residual_at_roundoff,
)
from mbs.model import Model
from mbs.quadratic import QuadraticTable

_gesv = lapack.dgesv

#: max of an array without ndarray.max's Python-level wrapper (costly on small arrays)
_max = np.maximum.reduce


def _expand(rows: np.ndarray, matrix: sp.csr_matrix) -> tuple[np.ndarray, np.ndarray]:
    """For each entry e (asking for row ``rows[e]`` of ``matrix``), one output per stored
    element of that row: (entry index, position in matrix.data)."""
    starts = matrix.indptr[rows]
    counts = matrix.indptr[rows + 1] - starts
    entry = np.repeat(np.arange(rows.size), counts)
    offsets = np.arange(entry.size) - np.repeat(np.cumsum(counts) - counts, counts)
    return entry, starts[entry] + offsets


def _halved(matrix: sp.csr_matrix) -> sp.csr_matrix:
    """``matrix / 2`` with the same index arrays (the tensors enter residuals halved)."""
    return sp.csr_matrix((0.5 * matrix.data, matrix.indices, matrix.indptr),
                         shape=matrix.shape)


def _accumulator(matrix: sp.csr_matrix) -> Callable[[np.ndarray, np.ndarray], None]:
    """``f(x, out)`` doing ``out += matrix @ x`` in place for a flat buffer ``out``: the
    SciPy CSR kernel bound to the matrix arrays (no Python frame per call, cheaper than
    ``matrix @ x`` at these sizes), or the public product where that kernel is missing."""
    if csr_matvec is None:
        def accumulate(x: np.ndarray, out: np.ndarray) -> None:
            out += matrix @ x
        return accumulate
    rows, cols = matrix.shape
    return functools.partial(csr_matvec, rows, cols, matrix.indptr, matrix.indices,
                             matrix.data)


class QuadraticSystemBuilder(EquationLayout):
    """Collects the terms of a residual that is quadratic in ``w = (data blocks, unknowns)``.

    Parameters
    ----------
    table : QuadraticTable
        Constraint table g(q) = A(q, q) + b q + e (the model's quadratic constraints).
    data, unknowns : dict of name -> size
        Blocks of w in order; ``data`` is fixed during a step, ``unknowns`` is Newton's x.
    constant_force : array or None
        grad V when the potential is linear in q (then potential terms are constants);
        None when it is not (potential terms are then evaluated with the model, see
        :class:`~mbs.engine.equations.PotentialTerms`).
    applied_forces : bool
        Whether the model has loads, dampers or actuators (evaluated with the model too).

    Notes
    -----
    Residual blocks are declared with :meth:`equation` in order; terms are added to a block
    by name, with the methods every scheme writes its equations with (see
    :mod:`mbs.engine.equations`). All polynomial terms are exact: their coefficients are
    products of table coefficients, scheme constants and the entries of the linear maps.
    """

    def __init__(self, table: QuadraticTable, data: dict[str, int], unknowns: dict[str, int],
                 constant_force: np.ndarray | None = None, applied_forces: bool = False):
        super().__init__(data, unknowns, constant_force, applied_forces)
        self.table = table
        self._constant: list[tuple[np.ndarray, np.ndarray]] = []
        self._linear: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self._quadratic: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
        #: (first row, u) of the constraint rows g(u) to evaluate from the factored form
        self.factored_rows: list[tuple[int, Linear]] = []

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

    # The constraint terms' ``time`` only matters for drives, which the tensor form (built
    # from the constant constraint table) never holds.
    def add_jacobian_transpose_product(self, equation: str, at: Linear, multipliers: Linear,
                                       scale: float = 1.0, time: float = 0.0) -> None:
        """R[equation] += scale G(u)^T mu, with u = ``at`` and mu = ``multipliers``."""
        self._add_jacobian_terms(equation, at, multipliers, scale, transposed=True)

    def add_jacobian_product(self, equation: str, at: Linear, vector: Linear,
                             scale: float = 1.0, time: float = 0.0) -> None:
        """R[equation] += scale G(u) v, with u = ``at`` and v = ``vector``."""
        self._add_jacobian_terms(equation, at, vector, scale, transposed=False)

    def _add_jacobian_terms(self, equation: str, at: Linear, vector: Linear, scale: float,
                            transposed: bool) -> None:
        """G(u)^T v (``transposed``) or G(u) v as linear plus bilinear entries: component l
        of G^T v is sum_k v_k (dg_k/dq_l + sum_j d2 g_k / dq_l dq_j u_j), component k of G v
        is sum_l (dg_k/dq_l + sum_j d2 g_k / dq_l dq_j u_j) v_l."""
        t = self.table
        constraint, coordinate = t.lin_row, t.lin_i
        out_linear, in_linear = ((coordinate, constraint) if transposed
                                 else (constraint, coordinate))
        self._add_linear_entries(self._rows(equation, out_linear), vector, in_linear,
                                 scale * t.lin_coef)
        row, coord_l, coord_j, coef = self._hessian_entries()
        if transposed:
            self._add_bilinear_entries(self._rows(equation, coord_l), vector, row,
                                       at, coord_j, scale * coef)
        else:
            self._add_bilinear_entries(self._rows(equation, row), at, coord_j, vector, coord_l,
                                       scale * coef)

    def add_discrete_jacobian_transpose_product(self, equation: str, first: Linear,
                                                second: Linear, multipliers: Linear,
                                                scale: float = 1.0, time: float = 0.0) -> None:
        """R[equation] += scale D^G g(a, b)^T mu, which for quadratic constraints is the
        midpoint Jacobian G((a + b)/2)^T mu (exact)."""
        self.add_jacobian_transpose_product(equation, (first + second) * 0.5, multipliers,
                                            scale)

    # Quadratic constraints: the mean of the end Jacobians is the midpoint Jacobian, and the
    # midpoint Hessian product is the exact discrete gradient of mu . G(q) v.
    add_mean_jacobian_transpose_product = add_discrete_jacobian_transpose_product

    def add_discrete_hessian_product(self, equation: str, first: Linear, second: Linear,
                                     multipliers: Linear, vector: Linear, scale: float = 1.0,
                                     time: float = 0.0) -> None:
        """R[equation] += scale (sum_k mu_k d2 g_k) v, exact (constant Hessians)."""
        self.add_hessian_product(equation, first, multipliers, vector, scale, time)

    def add_hessian_product(self, equation: str, at: Linear, multipliers: Linear,
                            vector: Linear, scale: float = 1.0, time: float = 0.0) -> None:
        """R[equation] += scale (sum_k mu_k d2 g_k) v (constant Hessians: ``at`` is not
        needed)."""
        row, coord_l, coord_j, coef = self._hessian_entries()
        self._add_bilinear_entries(self._rows(equation, coord_l), multipliers, row,
                                   vector, coord_j, scale * coef)

    def add_constraints(self, equation: str, at: Linear, time: float = 0.0) -> None:
        """R[equation] += g(u); the rows are re-evaluated from the factored form."""
        t = self.table
        self.add_constant(equation, t.constant)
        self._add_linear_entries(self._rows(equation, t.lin_row), at, t.lin_i, t.lin_coef)
        self._add_bilinear_entries(self._rows(equation, t.quad_row), at, t.quad_i, at,
                                   t.quad_j, t.quad_coef.astype(float))
        self.factored_rows.append((self._equations[equation][0], at))

    # -- result -----------------------------------------------------------------------------
    def build_map(self, post: sp.spmatrix | np.ndarray | None = None) -> QuadraticMap:
        """The collected terms as an explicit map ``w -> post @ R(w)`` (every block of w is
        input; nothing is solved), e.g. a predictor that is quadratic in the state."""
        n_eq, n_w = self.n_equations, self.n_w
        constant, linear, (out, j, k, values) = self.collected()
        tensor = sp.csr_matrix((np.concatenate([values, values]),
                                (np.concatenate([out * n_w + j, out * n_w + k]),
                                 np.concatenate([k, j]))), shape=(n_eq * n_w, n_w))
        if post is not None:
            post = sp.csr_matrix(post)
            constant, linear = post @ constant, post @ linear
            tensor = sp.kron(post, sp.identity(n_w), format="csr") @ tensor
        tensor = sp.csr_matrix(tensor)
        tensor.sum_duplicates()
        tensor.eliminate_zeros()
        return QuadraticMap(np.asarray(constant, dtype=float), sp.csr_matrix(linear).toarray(),
                            tensor)

    def collected(self) -> tuple:
        """The terms so far as arrays: (constant, linear CSR (n_eq, n_w), quadratic entries
        (row, j, k, coefficient)), R(w) = constant + linear w + sum_e coefficient_e w_j w_k."""
        n_eq, n_w = self.n_equations, self.n_w
        constant = np.zeros(n_eq)
        for rows, values in self._constant:
            np.add.at(constant, rows, values)
        lin = [np.concatenate(parts) if parts else np.zeros(0)
               for parts in zip(*self._linear)] if self._linear else [np.zeros(0)] * 3
        linear = sp.csr_matrix((lin[2], (lin[0].astype(np.int64), lin[1].astype(np.int64))),
                               shape=(n_eq, n_w))
        quad = ([np.concatenate(parts) for parts in zip(*self._quadratic)]
                if self._quadratic else [np.zeros(0, dtype=np.int64)] * 3 + [np.zeros(0)])
        return constant, linear, (quad[0].astype(np.int64), quad[1].astype(np.int64),
                                  quad[2].astype(np.int64), quad[3])

    def build(self, dense: bool = True, shift: sp.spmatrix | None = None) -> QuadraticSystem:
        """Freeze the collected terms into a :class:`QuadraticSystem`.

        ``shift`` (unknowns x data), when the unknowns were declared shifted: the system's
        unknowns are then x' = x + S d, and its public methods (:meth:`QuadraticSystem.
        evaluate`, :meth:`~QuadraticSystem.solve`) still take and return x. A scheme whose
        quadratic terms depend on the data only through such combinations (GGL VI-A: q^{n+1/2}
        = (q^n + q^{n+1})/2) then has no data-dependent quadratic terms to fold per step.
        """
        n_eq, n_d, n_x = self.n_equations, self.n_data, self.n_unknowns
        constant, linear, (out, j, k, values) = self.collected()
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
                         for start, term in self.factored_rows]
            if shift is not None:  # no scheme shifts large models (see GGLVI)
                raise ValueError("shifted unknowns need the dense QuadraticSystem")
            system = SparseQuadraticSystem(self.table, constant, linear, parts, overrides,
                                           n_d, n_x)
            system.potential_terms = self._potential_terms()
            return system
        tensor_xx = tensor(is_x_j, is_x_k, n_d, n_x, n_d, n_x)
        tensor_xd = tensor(is_x_j, ~is_x_k, n_d, n_x, 0, n_d)
        tensor_dd = tensor(~is_x_j, ~is_x_k, 0, n_d, 0, n_d)
        overrides = [(start, term.matrix[:, :n_d].tocsr(), term.matrix[:, n_d:].tocsr())
                     for start, term in self.factored_rows]
        system = QuadraticSystem(self.table, constant, linear, tensor_xx, tensor_xd, tensor_dd,
                                 overrides, n_d, n_x, dense, shift)
        system.potential_terms = self._potential_terms()
        return system


class QuadraticMap:
    """An explicit quadratic map ``y = c + L w + 1/2 D(w) w`` (see
    :meth:`QuadraticSystemBuilder.build_map`), evaluated with four numpy calls."""

    def __init__(self, constant: np.ndarray, linear: np.ndarray, tensor: sp.csr_matrix):
        self.constant, self.linear = constant, np.ascontiguousarray(linear)
        self.tensor = tensor  # D(w)[i, j] = sum_k tensor[i * w.size + j, k] w_k
        self._accumulate_half = _accumulator(_halved(tensor))
        self._buffer = np.zeros_like(self.linear)

    def for_run(self) -> QuadraticMap:
        """A copy sharing the constant arrays, with its own buffer."""
        run = copy.copy(self)
        run._buffer = np.zeros_like(self.linear)
        return run

    def __call__(self, w: np.ndarray) -> np.ndarray:
        buffer = self._buffer
        buffer[...] = self.linear
        self._accumulate_half(w, buffer.reshape(-1))
        out = buffer.dot(w)
        out += self.constant
        return out


class QuadraticSystem:
    """Evaluates a residual built by :class:`QuadraticSystemBuilder` and its Jacobian.

    ``potential_terms`` (:class:`~mbs.engine.equations.PotentialTerms` or None) are the
    non-polynomial potential terms of the definition; bound to a step they are the
    ``extra`` of :meth:`start`.

    Call :meth:`start` with the step data d once per step, then :meth:`evaluate` with the
    unknowns x as often as Newton needs, or let :meth:`solve` run the whole Newton iteration.
    ``extra(x)`` (given to :meth:`start`) may add non-polynomial terms, e.g. a potential's
    discrete gradient: it returns ``(r, J)`` to be added (either may be None).

    The per-iteration work is organised around few numpy calls, because at the sizes of small
    models (tens of unknowns) each call costs more than its arithmetic: with
    ``B(x) = L_step + 1/2 D_xx(x)`` the residual is ``c_step + B(x) x`` and the Jacobian is
    ``B(x) + 1/2 D_xx(x)``, so one preallocated buffer receives ``L_step`` and then one or two
    accumulating CSR mat-vecs of the halved tensor.
    """

    def __init__(self, table: QuadraticTable, constant: np.ndarray, linear: sp.csr_matrix,
                 tensor_xx: sp.csr_matrix, tensor_xd: sp.csr_matrix,
                 tensor_dd: sp.csr_matrix, overrides: list, n_data: int, n_unknowns: int,
                 dense: bool, shift: sp.spmatrix | None = None):
        self.table = table
        # x' = x + S d: the unknowns the tensors are written in (see QuadraticSystemBuilder.
        # build); None when they are x itself
        self.shift = None if shift is None else sp.csr_matrix(shift)
        self._shift_dense = None if shift is None else self.shift.toarray()
        self._shift_step = None
        self.shifted_solution = None  # accepted x + S d of the last solve (when shifted)
        self.n_equations = constant.size
        self.n_data, self.n_unknowns = n_data, n_unknowns
        self.constant = constant
        self.linear_data = linear[:, :n_data].toarray() if dense else linear[:, :n_data]
        self.linear_unknowns = (linear[:, n_data:].toarray() if dense
                                else linear[:, n_data:].tocsr())
        self.tensor_xx, self.tensor_xd, self.tensor_dd = tensor_xx, tensor_xd, tensor_dd
        self.dense = dense
        # The Jacobian is kept transposed (row j * n_eq + i of the tensors holds J[i, j]): the
        # C-ordered buffer then is J in Fortran order, which LAPACK gesv factorises and
        # solves in one call without a copy.
        n_eq, n_x = self.n_equations, n_unknowns
        transposed = (np.arange(n_eq)[None, :] * n_x + np.arange(n_x)[:, None]).ravel()
        self._accumulate_half_xx = _accumulator(_halved(tensor_xx)[transposed])
        # one mat-vec folds the step data into L_step and into L_d + 1/2 D_dd(d) (start)
        self._accumulate_step = _accumulator(sp.vstack(
            [sp.csr_matrix(tensor_xd)[transposed], _halved(tensor_dd)], format="csr"))
        self._step_initial = np.concatenate([np.asarray(self.linear_unknowns).T.ravel(),
                                             np.asarray(self.linear_data).ravel()])
        # no data-dependent quadratic terms (e.g. VI-A in its shifted unknowns): L_step and
        # L_d are constant, set once per run instead of refolded every step
        self._data_free = tensor_xd.nnz == 0 and tensor_dd.nnz == 0
        self._extra: Callable | None = None
        self._overrides = [o for o in (self._factored_map(start, from_data, from_unknowns)
                                       for start, from_data, from_unknowns in overrides)
                           if o is not None]
        self._allocate()

    def _allocate(self) -> None:
        """Per-run buffers (flat views share memory with the 2-D arrays). Jacobian-shaped
        buffers hold the transpose (unknowns, equations), see the constructor."""
        n_eq, n_d, n_x = self.n_equations, self.n_data, self.n_unknowns
        self._step_buffer = np.zeros(n_eq * (n_x + n_d))
        self._linear_step_t = self._step_buffer[:n_eq * n_x].reshape(n_x, n_eq)
        self._data_part = self._step_buffer[n_eq * n_x:].reshape(n_eq, n_d)
        self.constant_step = np.zeros(n_eq)
        self._factor_buffer = np.zeros((n_x, n_eq))
        self._scratch = np.zeros((n_x, n_eq))
        self._factor_flat = self._factor_buffer.reshape(-1)
        self._scratch_flat = self._scratch.reshape(-1)
        self._step_buffer[...] = self._step_initial
        self._constant_and_shift = (np.vstack([self._data_part, self._shift_dense])
                                    if self._data_free and self._shift_dense is not None
                                    else None)

    @property
    def linear_step(self) -> np.ndarray:
        """L_step = L_x + D_xd(d) of the current step, (equations, unknowns)."""
        return self._linear_step_t.T

    def _factored_map(self, start: int, from_data: sp.csr_matrix,
                      from_unknowns: sp.csr_matrix) -> tuple | None:
        return factored_override(self.table, start, from_data, from_unknowns,
                                  (lambda a: a.toarray()) if self.dense
                                  else (lambda a: a.tocsr()))

    def for_run(self) -> QuadraticSystem:
        """A copy sharing the constant arrays, with its own per-step buffers."""
        run = copy.copy(self)
        run._allocate()
        run._extra = None
        return run

    def start(self, data: np.ndarray, extra: Callable | None = None) -> None:
        """Fold the step data into the constant and linear parts:
        ``L_step = L_x + D_xd(d)``, ``c_step = c + (L_d + 1/2 D_dd(d)) d``."""
        self.shifted_solution = None
        self._data = data
        if self._constant_and_shift is not None:
            # data-free and shifted: L_d d and S d in one product
            both = self._constant_and_shift.dot(data)
            self.constant_step, self._shift_step = both[:self.n_equations], both[self.n_equations:]
            self.constant_step += self.constant
        else:
            if self._shift_dense is not None:
                self._shift_step = self._shift_dense.dot(data)
            if not self._data_free:
                self._step_buffer[...] = self._step_initial
                self._accumulate_step(data, self._step_buffer)
            np.dot(self._data_part, data, out=self.constant_step)
            self.constant_step += self.constant
        self._override_step = [(o[0], o[1], o[2], o[3] @ data + o[4], o[5], o[6], o[7])
                               for o in self._overrides]
        self._extra = extra

    def _residual(self, x: np.ndarray, buffer: np.ndarray, extra: bool = True) -> np.ndarray:
        """R at the system's own unknowns x (x + S d when shifted); leaves B(x)^T, B(x) =
        L_step + 1/2 D_xx(x), in ``buffer`` (a C-ordered (unknowns, equations) array)."""
        buffer[...] = self._linear_step_t
        self._accumulate_half_xx(x, buffer.reshape(-1))
        residual = x.dot(buffer)  # B x = (x^T B^T)^T
        residual += self.constant_step
        if self._override_step:
            self._override_rows(x, residual)
        if extra and self._extra is not None:
            r_extra, _ = self._extra(x if self._shift_step is None else x - self._shift_step,
                                     False)
            if r_extra is not None:
                residual += r_extra
        return residual

    def _override_rows(self, x: np.ndarray, residual: np.ndarray) -> None:
        """Constraint rows g(u) from the factored form (see :func:`factored_override`)."""
        for start, rows, uv_map, uv_step, row_sum, constant, half in self._override_step:
            uv = uv_map @ x + uv_step
            residual[start:start + rows] = row_sum @ (uv[:half] * uv[half:]) + constant

    def evaluate(self, x: np.ndarray, jacobian: bool = True, first_row: int = 0):
        """(R(x), dR/dx) at the current step data; the Jacobian is None when not asked.
        ``first_row`` is accepted for the interface of :class:`~mbs.engine.equations.
        ModelSystem`; every row is evaluated."""
        buffer = np.empty((self.n_unknowns, self.n_equations))
        inner = x if self._shift_step is None else x + self._shift_step
        residual = self._residual(inner, buffer, extra=False)
        jac = None
        if jacobian:
            self._accumulate_half_xx(inner, buffer.reshape(-1))
            jac = buffer.T
        if self._extra is not None:
            r_extra, j_extra = self._extra(x, jacobian)
            if r_extra is not None:
                residual += r_extra
            if jacobian and j_extra is not None:
                jac += j_extra
        return residual, jac

    def _at_roundoff(self, x: np.ndarray, blocks: tuple, floors: np.ndarray) -> bool:
        """:func:`~mbs.engine.newton.residual_at_roundoff` at ``x`` (the stall test of
        ``NewtonOptions.stall_level``), with the rows' terms in the step data d and the
        constant counted: a stage's position constraint g(q0 + h sum a V) of a mechanism at
        rest sums terms of the size of q0, which (|J| size) over the vanishing unknowns
        misses."""
        starts, _, lead = blocks
        residual, jacobian = self.evaluate(x)
        size = natural_size(x, starts, floors, lead)
        terms = (np.abs(jacobian) @ size + np.abs(self._data_part) @ np.abs(self._data)
                 + np.abs(self.constant))
        return residual_at_roundoff(residual, jacobian, size, terms)

    def solve(self, x0: np.ndarray, blocks: tuple[np.ndarray, np.ndarray, slice],
              floors: np.ndarray, options: NewtonOptions
              ) -> tuple[np.ndarray, int, int, np.ndarray]:
        """Newton's method on R(x) = 0 at the current step data. Dense systems only.

        Same stopping rules, errors and factorisation reuse as
        :func:`mbs.engine.newton.newton` (relative increments per block, stagnation, the
        round-off test of stalled iterations, ``refactor_above``), with the evaluation inlined
        into preallocated buffers and LAPACK getrf/getrs applied to the transposed buffer
        (Fortran order, so nothing is copied).

        Parameters
        ----------
        x0 : array
            Starting iterate (overwritten).
        blocks : (starts, sizes, lead)
            Convergence blocks as in :func:`mbs.engine.newton._segments`: ``x[lead]`` split at
            ``starts`` into blocks of ``sizes``.
        floors : array
            The relative increment of block b is max|dx_b| / max(floor_b, max|x_b|).
        options : NewtonOptions

        Returns
        -------
        x, iterations, factorisations, and R at the accepted x without the extra terms: its
        constraint rows (the enforced residuals) are exact, the force rows are not.
        """
        tolerance = options.tolerance
        contraction, refactor_above = options.contraction, options.refactor_above
        extra = self._extra
        accumulate, linear_step_t, constant_step = (self._accumulate_half_xx,
                                                    self._linear_step_t, self.constant_step)
        overrides = self._override_step
        starts, sizes, lead = blocks
        blocked = starts.size > 0
        if blocked:
            # Estimate max|dx_b| / floor_b, an upper bound of the relative increment (one
            # weight per coordinate); the exact value is computed only when a stopping
            # decision depends on it.
            weights = (1.0 / floors).repeat(sizes)
        shift = self._shift_step
        x = x0 if shift is None else np.add(x0, shift, out=x0)  # the system's unknowns
        previous = increment = math.inf
        lu = pivots = None
        factorizations = 0
        for iteration in range(1, options.max_iterations + 1):
            fresh = lu is None
            if fresh:
                buffer, flat = self._factor_buffer, self._factor_flat
            else:
                buffer, flat = self._scratch, self._scratch_flat
            # residual c_step + B(x) x with B(x)^T, B(x) = L_step + 1/2 D_xx(x), left in the
            # buffer; ndarray.dot costs half of ``@`` at these sizes
            buffer[...] = linear_step_t
            accumulate(x, flat)
            residual = x.dot(buffer)
            residual += constant_step
            if overrides:
                self._override_rows(x, residual)
            if extra is not None:
                r_extra, j_extra = extra(x if shift is None else x - shift, fresh)
                if r_extra is not None:
                    residual += r_extra
            if fresh:
                accumulate(x, flat)  # B(x) + 1/2 D_xx(x) = Jacobian (transposed)
                if extra is not None and j_extra is not None:
                    buffer += (j_extra.toarray() if sp.issparse(j_extra) else j_extra).T
                # buffer.T is J in Fortran order: LU and J step = R in one call, in place
                lu, pivots, step, info = _gesv(buffer.T, residual, overwrite_a=1)
                factorizations += 1
                if info != 0:
                    _raise_failure("singular", residual, iteration)
            else:
                step = _getrs(lu, pivots, residual)[0]
            x -= step
            if blocked:
                weighted = step[lead] * weights
                increment = float(_max(np.abs(weighted, out=weighted)))
                if not increment < math.inf:  # NaN or inf in the q, p blocks
                    _raise_failure("increment", residual, iteration)
                # The estimate bounds the exact value from above, so an estimate at the
                # tolerance already decides convergence; above it the exact value (block
                # magnitudes of the updated x) is needed, by the stagnation rule and by the
                # contraction estimate of the error, which compares two increments.
                if tolerance < increment:
                    current = x[lead] if shift is None else x[lead] - shift[lead]
                    increment = float(_max(
                        np.maximum.reduceat(np.abs(step[lead]), starts)
                        / np.maximum(floors, np.maximum.reduceat(np.abs(current), starts))))
            else:
                increment = 0.0
            if converged(increment, previous, fresh, options,
                         lambda x=x: self._at_roundoff(x if shift is None else x - shift,
                                                       blocks, floors)):
                # the multiplier blocks are outside the increment test: check them once
                if not math.isfinite(step.dot(step)):
                    _raise_failure("increment", residual, iteration)
                # for the enforced constraint rows, which the extra terms (potentials and
                # applied forces, in the momentum rows) do not touch: not evaluated again
                residual = self._residual(x, self._scratch, extra=False)
                if shift is None:
                    return x, iteration, factorizations, residual
                self.shifted_solution = x  # x + S d, for quantities simpler in those
                return x - shift, iteration, factorizations, residual
            if increment > contraction * previous or increment > refactor_above:
                lu = None
            previous = increment
        residual_norm = float(np.abs(residual).max())
        raise NewtonConvergenceError(
            f"Newton did not converge in {options.max_iterations} iterations (last relative "
            f"increment {increment:.3e}, residual {residual_norm:.3e})", residual_norm,
            increment, options.max_iterations, NEWTON_HINT)


def _raise_failure(kind: str, residual: np.ndarray, iteration: int) -> None:
    """The NewtonConvergenceError of a singular matrix or a non-finite increment; a
    non-finite residual (which makes both happen) is named as the cause."""
    if not np.isfinite(residual).all():
        raise NewtonConvergenceError("residual is not finite", float(np.abs(residual).max()),
                                     np.inf, iteration, "the state blew up: reduce the step size")
    norm = float(np.abs(residual).max())
    if kind == "singular":
        raise NewtonConvergenceError(
            "singular Newton matrix", norm, np.inf, iteration,
            "singular configuration or redundant constraints; check model.redundancies")
    raise NewtonConvergenceError(
        "Newton increment is not finite", norm, np.inf, iteration,
        "singular Newton matrix: singular configuration, redundant constraints, or a too "
        "large step")


def explicit_predictor_map(model: Model, h: float, weight: float, warm_gamma: bool,
                           gamma_terms: bool, constant_gradient: np.ndarray) -> QuadraticMap:
    """The "explicit" prediction as a quadratic map of (q, p, lambda, gamma): p1 = p - h F,
    q1 = q + h M^-1 (p - w h F + G(q)^T gamma) with the force F = grad V + G(q)^T lambda +
    H(gamma) M^-1 p (the gamma terms only with ``gamma_terms``); gamma is passed on only
    when ``warm_gamma``. Needs a potential linear in q (``constant_gradient``) and quadratic
    constraints. The state's update is :class:`mbs.engine.guess.WarmStart`'s "explicit"
    mode, folded into one map."""
    n, m = model.n, model.m
    builder = QuadraticSystemBuilder(model.quadratic_constraint_table,
                                     {"q": n, "p": n, "lam": m, "gam": m}, {})
    q, p, lam, gam = builder.variables("q", "p", "lam", "gam")
    for name, size in (("q", n), ("p", n), ("force", n), ("correction", n), ("lam", m),
                       ("gam", m)):
        builder.equation(name, size)
    builder.add_linear("q", q)
    builder.add_linear("p", p)
    builder.add_constant("force", constant_gradient)
    builder.add_jacobian_transpose_product("force", q, lam)
    if gamma_terms:
        builder.add_hessian_product("force", q, gam, p.mapped(model.inverse_mass_matrix))
        builder.add_jacobian_transpose_product("correction", q, gam)
    builder.add_linear("lam", lam)
    builder.add_linear("gam", gam)
    inverse, identity = sp.csr_matrix(model.inverse_mass_matrix), sp.identity(n)
    post = sp.bmat([
        [identity, h * inverse, -weight * h * h * inverse, h * inverse, None, None],
        [None, identity, -h * identity, None, None, None],
        [None, None, None, None, sp.identity(m), None],
        [None, None, None, None, None,
         sp.identity(m) if warm_gamma else sp.csr_matrix((m, m))]])
    return builder.build_map(post)
