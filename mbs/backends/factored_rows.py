"""Constraint rows re-evaluated from their factored form, shared by the dense and sparse
polynomial step systems (:mod:`mbs.backends.polynomial`, :mod:`mbs.backends.polynomial_sparse`).

Expanding a product (x_b - x_a) . u into monomials cancels digits when the factors nearly
cancel; those rows are evaluated from the factors instead.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import scipy.sparse as sp

from mbs.quadratic import QuadraticTable

try:  # direct CSR mat-vec into a preallocated buffer: cheaper than ``matrix @ x``
    from scipy.sparse._sparsetools import csr_matvec
except ImportError:  # pragma: no cover - private SciPy API; fall back to the public one
    csr_matvec = None


def cancelling_terms(factored) -> np.ndarray:
    """Product terms u.v whose expanded polynomial can cancel: both factors depend on q and
    one of them combines several coordinates or has a constant (a difference such as
    x_b - x_a, or a point offset). Products of single coordinates (the director
    orthonormality rows d_i . d_j) and linear rows expand exactly."""
    u_map, v_map = sp.csr_matrix(factored.u_map), sp.csr_matrix(factored.v_map)
    u_count = np.diff(u_map.indptr).reshape(-1, 3)
    v_count = np.diff(v_map.indptr).reshape(-1, 3)
    product = (u_count.sum(axis=1) > 0) & (v_count.sum(axis=1) > 0)
    compound = ((u_count > 1).any(axis=1) | (v_count > 1).any(axis=1)
                | (np.asarray(factored.u_const) != 0.0).any(axis=1)
                | (np.asarray(factored.v_const) != 0.0).any(axis=1))
    return product & compound


def factored_override(table: QuadraticTable, start: int, from_data, from_unknowns,
                       convert: Callable) -> tuple | None:
    """Constraint rows g(u), u = U_d d + U_x x, from the factored form of the table: the
    affine 3-vectors of every product term are composed with u's map, so one mat-vec gives
    them all (see :class:`mbs.quadratic.FactoredTerms`). Only the contiguous range of rows
    that holds the cancelling terms (:func:`cancelling_terms`, e.g. the two axis rows of a
    revolute joint) is re-evaluated, with all terms of those rows; None when there is none
    (then the polynomial value is the value). ``convert`` makes the maps dense or CSR.

    Returns (first row, rows, U x-map, U d-map, constant of the 3-vectors, row_sum, explicit
    constants, half length) where row_sum[k, 3 t + c] = scale_t for row k = row_t - first.
    """
    factored = table.factored
    if factored is None:
        return None
    cancelling = cancelling_terms(factored)
    if not cancelling.any():
        return None
    first = int(factored.row[cancelling].min())
    stop = int(factored.row[cancelling].max()) + 1
    terms = np.flatnonzero((factored.row >= first) & (factored.row < stop))
    triples = (3 * terms[:, None] + np.arange(3)).ravel()
    uv_map = sp.vstack([sp.csr_matrix(factored.u_map)[triples],
                        sp.csr_matrix(factored.v_map)[triples]])
    uv_const = np.concatenate([np.asarray(factored.u_const)[terms].ravel(),
                               np.asarray(factored.v_const)[terms].ravel()])
    row_sum = sp.csr_matrix((np.repeat(factored.scale[terms], 3),
                             (np.repeat(factored.row[terms] - first, 3),
                              np.arange(3 * terms.size))), shape=(stop - first, 3 * terms.size))
    return (start + first, stop - first, convert(uv_map @ from_unknowns),
            convert(uv_map @ from_data), uv_const, convert(row_sum),
            factored.explicit_constant[first:stop].copy(), 3 * terms.size)
