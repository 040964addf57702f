"""Sparse tables of quadratic forms in the generalized coordinates.

In the director formulation every built-in constraint and every invariant through which a
potential is written has the form (see DESIGN.md, "everything is a quadratic form")

    c_k(q) = sum_{ij} a_kij q_i q_j + sum_i b_ki q_i + e_k .

A :class:`QuadraticTable` stores all such rows of a model as flat coefficient arrays and
evaluates values, the (sparse) Jacobian and the multiplier-weighted Hessian without any Python
loop over elements.  Because the Jacobian is affine in q, its sparsity pattern is constant and its
values are one sparse mat-vec ``data = jacobian_map @ q + jacobian_offset``; the Hessian product
``sum_k mult_k d^2 c_k`` is constant in q and linear in the multipliers.

Exact midpoint property: for any quadratic c, c(q1) - c(q0) = Dc((q0 + q1)/2) (q1 - q0), which is
the discrete derivative used by the energy-momentum scheme (seed 003, eq. (99)).

Rows are built at compile time from :class:`AffineVector` expressions: a 3-vector that is an affine
function of q, e.g. a body-fixed point x = phi + X_i d_i of a rigid body.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp


@dataclass(frozen=True)
class AffineVector:
    """A 3-vector affine in q: ``sum_c coef_c * q[start_c:start_c+3] + constant``.

    Parameters
    ----------
    terms : tuple of (float, int)
        Pairs (coefficient, start index of a 3-block of q).
    constant : ndarray, shape (3,)
        Constant part (e.g. a ground point).
    """

    terms: tuple[tuple[float, int], ...] = ()
    constant: np.ndarray = field(default_factory=lambda: np.zeros(3))

    def __add__(self, other: AffineVector) -> AffineVector:
        return AffineVector(self.terms + other.terms, self.constant + other.constant)

    def __neg__(self) -> AffineVector:
        return AffineVector(tuple((-c, s) for c, s in self.terms), -self.constant)

    def __sub__(self, other: AffineVector) -> AffineVector:
        return self + (-other)

    def scaled(self, factor: float) -> AffineVector:
        """Return ``factor * self``."""
        return AffineVector(tuple((factor * c, s) for c, s in self.terms), factor * self.constant)

    def evaluate(self, q: np.ndarray) -> np.ndarray:
        """Value of the vector at q (used at compile time and in tests)."""
        out = np.array(self.constant, dtype=float)
        for coef, start in self.terms:
            out = out + coef * q[start:start + 3]
        return out


class QuadraticTableBuilder:
    """Accumulates rows of quadratic forms; :meth:`build` returns a :class:`QuadraticTable`."""

    def __init__(self, n: int):
        self.n = n
        self.n_rows = 0
        self._quad: list[np.ndarray] = []  # rows of (row, i, j, a)
        self._lin: list[np.ndarray] = []  # rows of (row, i, b)
        self._const: list[tuple[int, float]] = []
        self._explicit: list[tuple[int, float]] = []  # constants not from dot products
        self._dots: list[tuple[int, float, AffineVector, AffineVector]] = []

    def new_row(self) -> int:
        """Reserve one row and return its index."""
        self.n_rows += 1
        return self.n_rows - 1

    def add_constant(self, row: int, value: float) -> None:
        """Add the constant ``value`` to row ``row``."""
        self._const.append((row, float(value)))
        self._explicit.append((row, float(value)))

    def add_dot(self, row: int, a: AffineVector, b: AffineVector, scale: float = 1.0) -> None:
        """Add ``scale * (a . b)`` to row ``row``."""
        self._dots.append((row, float(scale), a, b))
        comp = np.arange(3)
        for ca, sa in a.terms:
            for cb, sb in b.terms:
                coef = scale * ca * cb
                if coef != 0.0:
                    self._quad.append(np.column_stack(
                        [np.full(3, row), sa + comp, sb + comp, np.full(3, coef)]))
        for ca, sa in a.terms:
            self._add_linear(row, sa, scale * ca * b.constant)
        for cb, sb in b.terms:
            self._add_linear(row, sb, scale * cb * a.constant)
        const = scale * float(a.constant @ b.constant)
        if const != 0.0:
            self._const.append((row, const))

    def add_linear_component(self, row: int, a: AffineVector, direction: np.ndarray,
                             scale: float = 1.0) -> None:
        """Add ``scale * direction . a`` to row ``row`` (``direction`` a constant 3-vector)."""
        self.add_dot(row, a, AffineVector((), np.asarray(direction, dtype=float)), scale)

    def _add_linear(self, row: int, start: int, coefs: np.ndarray) -> None:
        mask = coefs != 0.0
        if np.any(mask):
            idx = np.arange(3)[mask]
            self._lin.append(np.column_stack(
                [np.full(idx.size, row), start + idx, coefs[mask]]))

    def build(self) -> QuadraticTable:
        """Freeze the accumulated rows into a :class:`QuadraticTable`."""
        quad = np.vstack(self._quad) if self._quad else np.zeros((0, 4))
        lin = np.vstack(self._lin) if self._lin else np.zeros((0, 3))
        const = np.zeros(self.n_rows)
        for row, value in self._const:
            const[row] += value
        return QuadraticTable(
            self.n, self.n_rows,
            quad[:, 0].astype(np.int64), quad[:, 1].astype(np.int64),
            quad[:, 2].astype(np.int64), quad[:, 3],
            lin[:, 0].astype(np.int64), lin[:, 1].astype(np.int64), lin[:, 2], const,
            factored=self._factored())

    def _factored(self) -> FactoredTerms:
        count = len(self._dots)
        explicit = np.zeros(self.n_rows)
        for row, value in self._explicit:
            explicit[row] += value

        def affine_map(vectors: list[AffineVector]) -> tuple[sp.csr_matrix, np.ndarray]:
            rows, cols, vals = [], [], []
            for t, vector in enumerate(vectors):
                for coef, start in vector.terms:
                    rows.extend(3 * t + np.arange(3))
                    cols.extend(start + np.arange(3))
                    vals.extend([coef] * 3)
            matrix = sp.csr_matrix((vals, (rows, cols)), shape=(3 * count, self.n))
            constant = (np.array([v.constant for v in vectors], dtype=float)
                        if count else np.zeros((0, 3)))
            return matrix, constant

        u_map, u_const = affine_map([d[2] for d in self._dots])
        v_map, v_const = affine_map([d[3] for d in self._dots])
        return FactoredTerms(np.array([d[0] for d in self._dots], dtype=np.int64),
                             np.array([d[1] for d in self._dots], dtype=float),
                             u_map, u_const, v_map, v_const, explicit)


@dataclass
class FactoredTerms:
    """The rows as sums of products scale_t (u_t . v_t) of affine 3-vectors plus constants.

    Values are evaluated from this form: differences such as x_b - x_a are formed before
    they are multiplied, so a spring length or a distance constraint far from the origin
    keeps its precision (the expanded sum of a_ij q_i q_j loses ~|q|^2 eps to cancellation).
    """

    row: np.ndarray
    scale: np.ndarray
    u_map: sp.csr_matrix
    u_const: np.ndarray
    v_map: sp.csr_matrix
    v_const: np.ndarray
    explicit_constant: np.ndarray

    def __post_init__(self):
        self.u_map = _maybe_dense(self.u_map)
        self.v_map = _maybe_dense(self.v_map)

    def value(self, q: np.ndarray, n_rows: int) -> np.ndarray:
        u = (self.u_map @ q).reshape(-1, 3) + self.u_const
        v = (self.v_map @ q).reshape(-1, 3) + self.v_const
        products = self.scale * np.einsum("ti,ti->t", u, v)
        return np.bincount(self.row, weights=products, minlength=n_rows) + self.explicit_constant

    def values(self, Q: np.ndarray, n_rows: int) -> np.ndarray:
        """Rows at each configuration of Q (K, n) -> (K, n_rows)."""
        count = self.row.size
        u = (self.u_map @ Q.T).T.reshape(Q.shape[0], count, 3) + self.u_const
        v = (self.v_map @ Q.T).T.reshape(Q.shape[0], count, 3) + self.v_const
        products = self.scale * np.einsum("kti,kti->kt", u, v)
        if not hasattr(self, "_row_sum"):
            self._row_sum = _maybe_dense(sp.csr_matrix(
                (np.ones(count), (self.row, np.arange(count))), shape=(n_rows, count)))
        return (self._row_sum @ products.T).T + self.explicit_constant

    def select(self, selection: np.ndarray, new_index: np.ndarray) -> FactoredTerms:
        keep = np.flatnonzero(new_index[self.row] >= 0)
        triples = (3 * keep[:, None] + np.arange(3)).ravel()
        return FactoredTerms(new_index[self.row[keep]], self.scale[keep],
                             sp.csr_matrix(self.u_map)[triples], self.u_const[keep],
                             sp.csr_matrix(self.v_map)[triples], self.v_const[keep],
                             self.explicit_constant[selection])

    @staticmethod
    def stack(parts: list[FactoredTerms], offsets: np.ndarray) -> FactoredTerms:
        return FactoredTerms(
            np.concatenate([p.row + o for p, o in zip(parts, offsets)]),
            np.concatenate([p.scale for p in parts]),
            sp.vstack([sp.csr_matrix(p.u_map) for p in parts]).tocsr(),
            np.concatenate([p.u_const for p in parts]),
            sp.vstack([sp.csr_matrix(p.v_map) for p in parts]).tocsr(),
            np.concatenate([p.v_const for p in parts]),
            np.concatenate([p.explicit_constant for p in parts]))


class QuadraticTable:
    """Rows c_k(q) = q.A_k.q + b_k.q + e_k stored as flat sparse coefficient arrays.

    Parameters
    ----------
    n : int
        Number of coordinates.
    n_rows : int
        Number of rows (constraints or invariants).
    quad_row, quad_i, quad_j, quad_coef : ndarray
        Entries a_kij: row k, coordinates i and j, coefficient (term a q_i q_j).
    lin_row, lin_i, lin_coef : ndarray
        Entries b_ki.
    constant : ndarray, shape (n_rows,)
        e_k.
    """

    def __init__(self, n: int, n_rows: int, quad_row: np.ndarray, quad_i: np.ndarray,
                 quad_j: np.ndarray, quad_coef: np.ndarray, lin_row: np.ndarray,
                 lin_i: np.ndarray, lin_coef: np.ndarray, constant: np.ndarray,
                 factored: FactoredTerms | None = None):
        self.n = n
        self.n_rows = n_rows
        self.quad_row, self.quad_i, self.quad_j, self.quad_coef = (
            quad_row, quad_i, quad_j, quad_coef)
        self.lin_row, self.lin_i, self.lin_coef = lin_row, lin_i, lin_coef
        self.constant = np.asarray(constant, dtype=float)
        self.factored = factored
        self._build_jacobian_map()
        self._build_hessian_map()

    # -- precomputation -------------------------------------------------------------------
    def _build_jacobian_map(self) -> None:
        n, n_rows = self.n, self.n_rows
        # d/dq_l (a q_i q_j) = a q_j [l=i] + a q_i [l=j]; b q_i contributes b at (k, i).
        rows = np.concatenate([self.quad_row, self.quad_row, self.lin_row])
        cols = np.concatenate([self.quad_i, self.quad_j, self.lin_i])
        keys = rows * n + cols
        unique_keys, position = np.unique(keys, return_inverse=True)
        n_quad = self.quad_row.size
        pos_quad_i = position[:n_quad]
        pos_quad_j = position[n_quad:2 * n_quad]
        pos_lin = position[2 * n_quad:]
        nnz = unique_keys.size
        self._jac_keys = unique_keys
        self._jac_rows = unique_keys // max(n, 1)
        self._jac_indices = (unique_keys % n).astype(np.int32) if n else unique_keys
        self._jac_indptr = np.searchsorted(
            unique_keys // max(n, 1), np.arange(n_rows + 1)).astype(np.int32)
        self._jac_map = sp.csr_matrix(
            (np.concatenate([self.quad_coef, self.quad_coef]),
             (np.concatenate([pos_quad_i, pos_quad_j]),
              np.concatenate([self.quad_j, self.quad_i]))),
            shape=(nnz, n))
        self._jac_offset = np.bincount(pos_lin, weights=self.lin_coef, minlength=nnz)
        # Small tables: a dense map makes the mat-vec a BLAS call instead of a scipy.sparse
        # dispatch, whose overhead dominates small models.
        self._jac_map = _maybe_dense(self._jac_map)

    def _build_hessian_map(self) -> None:
        n = self.n
        rows = np.concatenate([self.quad_i, self.quad_j])
        cols = np.concatenate([self.quad_j, self.quad_i])
        keys = rows * n + cols
        unique_keys, position = np.unique(keys, return_inverse=True)
        nnz = unique_keys.size
        self._hess_keys = unique_keys
        self._hess_indices = (unique_keys % n).astype(np.int32) if n else unique_keys
        self._hess_indptr = np.searchsorted(
            unique_keys // max(n, 1), np.arange(n + 1)).astype(np.int32)
        self._hess_map = sp.csr_matrix(
            (np.concatenate([self.quad_coef, self.quad_coef]),
             (position, np.concatenate([self.quad_row, self.quad_row]))),
            shape=(nnz, self.n_rows))
        self._hess_map = _maybe_dense(self._hess_map)

    # -- evaluation -----------------------------------------------------------------------
    def value(self, q: np.ndarray) -> np.ndarray:
        """c(q), shape (n_rows,); from the factored form when the table has one."""
        if self.factored is not None:
            return self.factored.value(q, self.n_rows)
        quad = self.quad_coef * q[self.quad_i] * q[self.quad_j]
        lin = self.lin_coef * q[self.lin_i]
        return (np.bincount(self.quad_row, weights=quad, minlength=self.n_rows)
                + np.bincount(self.lin_row, weights=lin, minlength=self.n_rows)
                + self.constant)

    def jacobian(self, q: np.ndarray) -> sp.csr_matrix:
        """Dc(q) as a CSR matrix of shape (n_rows, n) with a pattern independent of q."""
        data = self._jac_map @ q + self._jac_offset
        return sp.csr_matrix((data, self._jac_indices, self._jac_indptr),
                             shape=(self.n_rows, self.n))

    def jacobian_transpose_product(self, q: np.ndarray, y: np.ndarray) -> np.ndarray:
        """Dc(q)^T y without forming the matrix."""
        data = self._jac_map @ q + self._jac_offset
        return np.bincount(self._jac_indices, weights=data * y[self._jac_rows],
                           minlength=self.n)

    def hessian_vector_transpose_product(self, w: np.ndarray, y: np.ndarray) -> np.ndarray:
        """(sum_k y_k d2 c_k) w without forming the Hessians."""
        data = self._jac_map @ w
        return np.bincount(self._jac_indices, weights=data * y[self._jac_rows],
                           minlength=self.n)

    @property
    def entries(self) -> int:
        """The largest count of terms or Jacobian entries one evaluation touches (the width
        of the arrays of the vectorised evaluations per configuration)."""
        return max(self.quad_coef.size, self.lin_coef.size, self._jac_indices.size)

    def values(self, Q: np.ndarray) -> np.ndarray:
        """c at each configuration of Q (K, n) -> (K, n_rows), vectorised over K."""
        if self.factored is not None:
            return self.factored.values(Q, self.n_rows)
        if not hasattr(self, "_term_scatter"):
            self._term_scatter = tuple(_maybe_dense(sp.csr_matrix(
                (np.ones(rows.size), (rows, np.arange(rows.size))),
                shape=(self.n_rows, rows.size))) for rows in (self.quad_row, self.lin_row))
        quad = self.quad_coef * Q[:, self.quad_i] * Q[:, self.quad_j]
        lin = self.lin_coef * Q[:, self.lin_i]
        return ((self._term_scatter[0] @ quad.T).T + (self._term_scatter[1] @ lin.T).T
                + self.constant)

    def _jacobian_entries(self, Q: np.ndarray) -> np.ndarray:
        """The Jacobian's stored entries at each row of Q (K, n) -> (nnz, K)."""
        return (self._jac_map @ Q.T) + self._jac_offset[:, None]

    def _entry_sum(self, into_rows: bool):
        """The matrix that sums the Jacobian's entries into their rows (n_rows, nnz) or into
        their columns (n, nnz), built once."""
        key = "_row_entry_sum" if into_rows else "_column_entry_sum"
        if not hasattr(self, key):
            targets, size = ((self._jac_rows, self.n_rows) if into_rows
                             else (self._jac_indices, self.n))
            setattr(self, key, _maybe_dense(sp.csr_matrix(
                (np.ones(targets.size), (targets, np.arange(targets.size))),
                shape=(size, targets.size))))
        return getattr(self, key)

    def jacobian_products(self, Q: np.ndarray, W: np.ndarray) -> np.ndarray:
        """Dc(Q_l) W_l for each row l: (K, n), (K, n) -> (K, n_rows), vectorised over K."""
        weighted = self._jacobian_entries(Q) * W[:, self._jac_indices].T
        return (self._entry_sum(True) @ weighted).T

    def jacobian_transpose_products(self, Q: np.ndarray, Y: np.ndarray) -> np.ndarray:
        """Dc(Q_l)^T Y_l for each row l: (K, n), (K, n_rows) -> (K, n), vectorised over K."""
        weighted = self._jacobian_entries(Q) * Y[:, self._jac_rows].T
        return (self._entry_sum(False) @ weighted).T

    def jacobians_dense(self, Q: np.ndarray) -> np.ndarray:
        """Dc at each row of Q (K, n) -> (K, n_rows, n), dense (ensembles of small models)."""
        out = np.zeros((Q.shape[0], self.n_rows * self.n))
        out[:, self._jac_keys] = (self._jac_map @ Q.T).T + self._jac_offset
        return out.reshape(Q.shape[0], self.n_rows, self.n)

    def jacobian_dense(self, q: np.ndarray) -> np.ndarray:
        """Dc(q) as a dense array (fast path for small models)."""
        out = np.zeros(self.n_rows * self.n)
        out[self._jac_keys] = self._jac_map @ q + self._jac_offset
        return out.reshape(self.n_rows, self.n)

    def hessian_vector_product_dense(self, w: np.ndarray) -> np.ndarray:
        """Dense :meth:`hessian_vector_product`."""
        out = np.zeros(self.n_rows * self.n)
        out[self._jac_keys] = self._jac_map @ w
        return out.reshape(self.n_rows, self.n)

    def hessian_product_dense(self, multipliers: np.ndarray) -> np.ndarray:
        """Dense :meth:`hessian_product`."""
        out = np.zeros(self.n * self.n)
        out[self._hess_keys] = self._hess_map @ multipliers
        return out.reshape(self.n, self.n)

    def hessian_vector_product(self, w: np.ndarray) -> sp.csr_matrix:
        """Matrix whose row k is (d^2 c_k w)^T, i.e. D_q[Dc(q) w]; constant in q."""
        return sp.csr_matrix((self._jac_map @ w, self._jac_indices, self._jac_indptr),
                             shape=(self.n_rows, self.n))

    def hessian_product(self, multipliers: np.ndarray) -> sp.csr_matrix:
        """sum_k multipliers_k d^2 c_k as a symmetric CSR matrix (n, n), constant in q."""
        data = self._hess_map @ multipliers
        return sp.csr_matrix((data, self._hess_indices, self._hess_indptr),
                             shape=(self.n, self.n))

    def is_linear_row(self) -> np.ndarray:
        """Boolean mask of rows without quadratic terms."""
        has_quad = np.zeros(self.n_rows, dtype=bool)
        has_quad[self.quad_row] = True
        return ~has_quad

    def rows(self, selection: np.ndarray) -> QuadraticTable:
        """Sub-table made of the given rows (renumbered in the given order)."""
        selection = np.asarray(selection, dtype=np.int64)
        new_index = np.full(self.n_rows, -1, dtype=np.int64)
        new_index[selection] = np.arange(selection.size)
        qmask = new_index[self.quad_row] >= 0
        lmask = new_index[self.lin_row] >= 0
        return QuadraticTable(
            self.n, selection.size, new_index[self.quad_row[qmask]], self.quad_i[qmask],
            self.quad_j[qmask], self.quad_coef[qmask], new_index[self.lin_row[lmask]],
            self.lin_i[lmask], self.lin_coef[lmask], self.constant[selection],
            factored=None if self.factored is None else self.factored.select(selection,
                                                                              new_index))


#: Maps with at most this many entries (dense) are stored as dense arrays.
DENSE_MAP_LIMIT = 200_000


def _maybe_dense(matrix: sp.csr_matrix):
    if matrix.shape[0] * matrix.shape[1] <= DENSE_MAP_LIMIT:
        return matrix.toarray()
    return matrix


def concatenate_tables(tables: list[QuadraticTable], n: int) -> QuadraticTable:
    """Stack tables row-wise (all over the same n coordinates)."""
    offsets = np.cumsum([0] + [t.n_rows for t in tables])
    if not tables:
        empty_i = np.zeros(0, dtype=np.int64)
        return QuadraticTable(n, 0, empty_i, empty_i, empty_i, np.zeros(0), empty_i, empty_i,
                              np.zeros(0), np.zeros(0))
    return QuadraticTable(
        n, int(offsets[-1]),
        np.concatenate([t.quad_row + o for t, o in zip(tables, offsets)]),
        np.concatenate([t.quad_i for t in tables]),
        np.concatenate([t.quad_j for t in tables]),
        np.concatenate([t.quad_coef for t in tables]),
        np.concatenate([t.lin_row + o for t, o in zip(tables, offsets)]),
        np.concatenate([t.lin_i for t in tables]),
        np.concatenate([t.lin_coef for t in tables]),
        np.concatenate([t.constant for t in tables]),
        factored=(FactoredTerms.stack([t.factored for t in tables], offsets[:-1])
                  if all(t.factored is not None for t in tables) else None))
