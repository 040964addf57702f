"""The sparse (pattern-based) form of the polynomial step equations, for large models.

See :mod:`mbs.solvers.polynomial` for the polynomial form of the step equations; this module
holds :class:`SparseQuadraticSystem`, which keeps the Jacobian on its fixed sparsity pattern
(chains of hundreds or thousands of bodies) and is driven by :func:`mbs.solvers.newton.newton`.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import numpy as np
import scipy.sparse as sp

from mbs.quadratic import QuadraticTable
from mbs.solvers.polynomial import _csr_matvec, _factored_override


class SparseQuadraticSystem:
    """The sparse counterpart of :class:`QuadraticSystem` for large models.

    The derivative tensor is stored on the fixed pattern of the Jacobian: ``T_J`` maps x to
    the data array of the CSR Jacobian (one mat-vec per iteration), ``T_Jd`` maps the step
    data to the data of L_step (one per step). No dense n_eq x n_x array is ever formed.
    """

    dense = False

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
        keys = np.unique(np.concatenate([
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
            _factored_override(table, start, from_data, from_unknowns, sp.csr_matrix)
            for start, from_data, from_unknowns in overrides) if o is not None]
        self._extra = None

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
        self._linear_step = self._linear_x + self._tensor_jd @ data
        self._override_step = [(o[0], o[1], o[2], o[3] @ data + o[4], o[5], o[6], o[7])
                               for o in self._overrides]
        self._extra = extra

    def evaluate(self, x: np.ndarray, jacobian: bool = True):
        """(R(x), dR/dx as CSR) at the current step data."""
        derivative = self._tensor_jx @ x
        half = self._linear_step + 0.5 * derivative
        residual = self.constant_step.copy()
        if _csr_matvec is not None:
            _csr_matvec(self.n_equations, self.n_unknowns, self._indptr, self._indices, half,
                        x, residual)
        else:
            residual += sp.csr_matrix((half, self._indices, self._indptr),
                                      shape=(self.n_equations, self.n_unknowns)) @ x
        for start, rows, uv_map, uv_step, row_sum, constant, half_size in self._override_step:
            uv = uv_map @ x + uv_step
            residual[start:start + rows] = row_sum @ (uv[:half_size] * uv[half_size:]) + constant
        jac = (sp.csr_matrix((self._linear_step + derivative, self._indices, self._indptr),
                             shape=(self.n_equations, self.n_unknowns)) if jacobian else None)
        if self._extra is not None:
            r_extra, j_extra = self._extra(x, jacobian)
            if r_extra is not None:
                residual += r_extra
            if jacobian and j_extra is not None:
                jac = (jac + sp.csr_matrix(j_extra)).tocsr()
        return residual, jac
