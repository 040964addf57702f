"""The sparse (pattern-based) form of the polynomial step equations, for large models.

See :mod:`mbs.backends.polynomial` for the polynomial form of the step equations; this module
holds :class:`SparseQuadraticSystem`, which keeps the Jacobian on its fixed sparsity pattern
(chains of hundreds or thousands of bodies) and is driven by :func:`mbs.engine.newton.newton`.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import numpy as np
import scipy.sparse as sp

from mbs.backends.factored_rows import csr_matvec, factored_override
from mbs.engine import newton as _newton
from mbs.quadratic import QuadraticTable


def _evaluate_kernel(x, tensor_indptr, tensor_indices, tensor_values, linear_step, indptr,
                     indices, constant_step, residual, jacobian_values, with_jacobian
                     ):  # pragma: no cover - compiled by numba
    """R(x) and the Jacobian values on the pattern in one pass (compiled with numba by
    :func:`_evaluate_compiled`): for each Jacobian slot k, ``D_k = (T_J x)_k``, the Jacobian
    value ``L_k + D_k`` and the residual term ``(L_k + D_k / 2) x_col(k)``. The sums run in
    the order of the SciPy mat-vecs of :meth:`SparseQuadraticSystem.evaluate`."""
    for i in range(indptr.size - 1):
        total = constant_step[i]
        for k in range(indptr[i], indptr[i + 1]):
            derivative = 0.0
            for t in range(tensor_indptr[k], tensor_indptr[k + 1]):
                derivative += tensor_values[t] * x[tensor_indices[t]]
            if with_jacobian:
                jacobian_values[k] = linear_step[k] + derivative
            total += (linear_step[k] + 0.5 * derivative) * x[indices[k]]
        residual[i] = total


def _factored_rows_kernel(x, map_indptr, map_indices, map_values, uv_step, half, sum_indptr,
                         sum_indices, sum_values, constant, residual, start, products
                         ):  # pragma: no cover - compiled by numba
    """The constraint rows g(u) from the factored form (see :meth:`SparseQuadraticSystem.
    _finish`) in one pass, in the order of its SciPy mat-vecs: the 3-vector components
    ``u_t``, ``v_t`` of every product term (rows t and t + half of ``U x + uv_step``), their
    products, and the rows' scaled sums."""
    for t in range(half):
        u = 0.0
        for e in range(map_indptr[t], map_indptr[t + 1]):
            u += map_values[e] * x[map_indices[e]]
        v = 0.0
        for e in range(map_indptr[t + half], map_indptr[t + half + 1]):
            v += map_values[e] * x[map_indices[e]]
        products[t] = (u + uv_step[t]) * (v + uv_step[t + half])
    for k in range(sum_indptr.size - 1):
        total = 0.0
        for e in range(sum_indptr[k], sum_indptr[k + 1]):
            total += sum_values[e] * products[sum_indices[e]]
        residual[start + k] = total + constant[k]


def _linear_step_kernel(linear_x, indptr, indices, values, data, out
                        ):  # pragma: no cover - compiled by numba
    """``out = linear_x + T_Jd @ data`` for a CSR ``T_Jd`` in one pass (compiled with numba
    by :func:`_evaluate_compiled`), in the order of the SciPy mat-vec it replaces."""
    for k in range(out.size):
        total = 0.0
        for t in range(indptr[k], indptr[k + 1]):
            total += values[t] * data[indices[t]]
        out[k] = linear_x[k] + total


_EVALUATE: dict = {}


def _evaluate_compiled() -> dict | None:
    """:func:`_evaluate_kernel` and :func:`_factored_rows_kernel` compiled by numba (once,
    cached on disk), or None without numba (or with :data:`mbs.engine.newton.USE_NUMBA`
    off)."""
    if _newton._kernels() is None:
        return None
    if not _EVALUATE:
        import numba

        _EVALUATE.update(
            (name, numba.njit(cache=True, nogil=True)(function)) for name, function in
            (("evaluate", _evaluate_kernel), ("factored_rows", _factored_rows_kernel),
             ("linear_step", _linear_step_kernel)))
    return _EVALUATE


class SparseQuadraticSystem:
    """The sparse counterpart of :class:`QuadraticSystem` for large models.

    The derivative tensor is stored on the fixed pattern of the Jacobian: ``T_J`` maps x to
    the data array of the CSR Jacobian (one mat-vec per iteration), ``T_Jd`` maps the step
    data to the data of L_step (one per step). No dense n_eq x n_x array is ever formed.
    """

    dense = False
    shift = None  # unknowns are never shifted here (see QuadraticSystemBuilder.build)
    potential_terms = None  # set by QuadraticSystemBuilder.build

    def __init__(self, table: QuadraticTable, constant: np.ndarray, linear: sp.csr_matrix,
                 parts: dict, overrides: list, n_data: int, n_unknowns: int):
        self.table = table
        self.n_equations = n_eq = constant.size
        self.n_data, self.n_unknowns = n_d, n_x = n_data, n_unknowns
        self.constant = constant
        self.linear_data = linear[:, :n_d].tocsr()
        linear_x = linear[:, n_d:].tocoo()
        xx_i, xx_j, xx_k, xx_v = parts["xx"]
        xd_i, xd_j, xd_k, xd_v = parts["xd"]
        dd_i, dd_j, dd_k, dd_v = parts["dd"]
        # Jacobian pattern: union of L_x, the (row, j) slots of D_xd and of D_xx
        keys = _newton._sorted_unique(np.concatenate([
            linear_x.row.astype(np.int64) * n_x + linear_x.col,
            xd_i * n_x + (xd_j - n_d), xx_i * n_x + (xx_j - n_d)]))
        self._indices = (keys % n_x).astype(np.int32)
        self._indptr = np.searchsorted(keys // n_x, np.arange(n_eq + 1)).astype(np.int32)
        nnz = keys.size

        def on_pattern(rows, cols, values, source_cols, width):
            position = np.searchsorted(keys, rows * n_x + cols)
            matrix = sp.csr_matrix((values, (position, source_cols)), shape=(nnz, width))
            matrix.sum_duplicates()
            return matrix

        self._linear_x = np.zeros(nnz)
        np.add.at(self._linear_x,
                  np.searchsorted(keys, linear_x.row.astype(np.int64) * n_x + linear_x.col),
                  linear_x.data)
        self._tensor_jd = on_pattern(xd_i, xd_j - n_d, xd_v, xd_k, n_d)
        self._tensor_jx = on_pattern(xx_i, xx_j - n_d, xx_v, xx_k - n_d, n_x)
        # D_dd(d) d / 2 only enters c_step: rows of the (row, j) pairs with their j
        dd_keys, dd_index = np.unique(dd_i * n_d + dd_j, return_inverse=True)
        self._tensor_dd = sp.csr_matrix((dd_v, (dd_index, dd_k)), shape=(dd_keys.size, n_d))
        self._dd_rows, self._dd_cols = dd_keys // max(n_d, 1), dd_keys % max(n_d, 1)
        self._overrides = [o for o in (
            factored_override(table, start, from_data, from_unknowns, sp.csr_matrix)
            for start, from_data, from_unknowns in overrides) if o is not None]
        self._extra = None
        # the index arrays again, unsigned, for the compiled evaluation (_evaluate_kernel)
        self._kernel_arrays = (_newton._kernel_index(self._tensor_jx.indptr),
                               _newton._kernel_index(self._tensor_jx.indices),
                               self._tensor_jx.data, _newton._kernel_index(self._indptr),
                               _newton._kernel_index(self._indices))
        index = _newton._kernel_index
        self._data_kernel_arrays = (index(self._tensor_jd.indptr),
                                    index(self._tensor_jd.indices), self._tensor_jd.data)
        self._override_kernel_arrays = [
            (index(uv_map.indptr), index(uv_map.indices), uv_map.data, index(row_sum.indptr),
             index(row_sum.indices), row_sum.data)
            for _, _, uv_map, _, _, row_sum, _, _ in self._overrides]

    def for_run(self) -> SparseQuadraticSystem:
        """A copy sharing the constant arrays (the per-step arrays are rebound by start)."""
        run = copy.copy(self)
        run._extra = None
        return run

    def start(self, data: np.ndarray, extra: Callable | None = None) -> None:
        """Fold the step data into the constant and the Jacobian data."""
        dd = self._tensor_dd @ data
        self.constant_step = (self.constant + self.linear_data @ data
                              + 0.5 * np.bincount(self._dd_rows, weights=dd * data[self._dd_cols],
                                                  minlength=self.n_equations))
        kernels = _evaluate_compiled()
        if kernels is None:
            self._linear_step = self._linear_x + self._tensor_jd @ data
        else:
            # one pass over the pattern instead of a mat-vec into a temporary and a sum
            self._linear_step = np.empty(self._linear_x.size)
            kernels["linear_step"](self._linear_x, *self._data_kernel_arrays, data,
                                   self._linear_step)
        self._override_step = [(o[0], o[1], o[2], o[3] @ data + o[4], o[5], o[6], o[7])
                               for o in self._overrides]
        self._extra = extra

    def evaluate(self, x: np.ndarray, jacobian: bool = True, first_row: int = 0):
        """(R(x), dR/dx as CSR) at the current step data (every row, whatever
        ``first_row``: see :meth:`QuadraticSystem.evaluate`)."""
        kernels = _evaluate_compiled()
        if kernels is not None:
            # one compiled pass instead of two mat-vecs and three temporaries
            residual = np.empty(self.n_equations)
            values = np.empty(self._indices.size) if jacobian else residual
            tensor_indptr, tensor_indices, tensor_values, indptr, indices = self._kernel_arrays
            kernels["evaluate"](x, tensor_indptr, tensor_indices, tensor_values,
                                self._linear_step, indptr, indices, self.constant_step,
                                residual, values, jacobian)
            for override, arrays in zip(self._override_step, self._override_kernel_arrays):
                start, _, _, uv_step, _, constant, half_size = override
                map_indptr, map_indices, map_values, sum_indptr, sum_indices, sum_values = arrays
                kernels["factored_rows"](x, map_indptr, map_indices, map_values, uv_step,
                                         half_size, sum_indptr, sum_indices, sum_values,
                                         constant, residual, start, np.empty(half_size))
            return self._finish(x, residual, values if jacobian else None, jacobian,
                                factored_rows=False)
        derivative = self._tensor_jx @ x
        half = self._linear_step + 0.5 * derivative
        residual = self.constant_step.copy()
        if csr_matvec is not None:
            csr_matvec(self.n_equations, self.n_unknowns, self._indptr, self._indices, half,
                        x, residual)
        else:
            residual += sp.csr_matrix((half, self._indices, self._indptr),
                                      shape=(self.n_equations, self.n_unknowns)) @ x
        return self._finish(x, residual,
                            self._linear_step + derivative if jacobian else None, jacobian)

    def _finish(self, x: np.ndarray, residual: np.ndarray, jacobian_values: np.ndarray | None,
                jacobian: bool, factored_rows: bool = True):
        """Constraint rows from the factored form (unless done already), the Jacobian as
        CSR, the extra terms."""
        for start, rows, uv_map, uv_step, row_sum, constant, half_size in (
                self._override_step if factored_rows else ()):
            uv = uv_map @ x + uv_step
            residual[start:start + rows] = row_sum @ (uv[:half_size] * uv[half_size:]) + constant
        jac = (sp.csr_matrix((jacobian_values, self._indices, self._indptr),
                             shape=(self.n_equations, self.n_unknowns)) if jacobian else None)
        if self._extra is not None:
            r_extra, j_extra = self._extra(x, jacobian)
            if r_extra is not None:
                residual += r_extra
            if jacobian and j_extra is not None:
                jac = (jac + sp.csr_matrix(j_extra)).tocsr()
        return residual, jac
