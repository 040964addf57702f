"""Compiled potentials: all elements of one invariant-term class, evaluated in one call."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from mbs.forces.base import InvariantTerm, discrete_invariant_gradient
from mbs.quadratic import QuadraticTable


class PotentialGroup:
    """V(q) = sum_e V~(pi_e(q)) for every element e of one :class:`InvariantTerm` class.

    Parameters
    ----------
    term : type[InvariantTerm]
    table : QuadraticTable
        Invariants, element-major: rows e*k ... e*k + k - 1 belong to element e.
    params : dict
        Parameter arrays with leading dimension n_elements.
    names : list of str
        Owning element of each row block (for diagnostics).
    scales : ndarray (n_elements, n_invariants)
        Characteristic magnitudes of the invariants.
    """

    def __init__(self, term: type[InvariantTerm], table: QuadraticTable, params: dict,
                 names: list[str], scales: np.ndarray):
        self.term = term
        self.table = table
        self.params = params
        self.names = names
        self.n_elements = len(names)
        self.n_invariants = term.n_invariants
        self.scales = scales

    def invariants(self, q: np.ndarray) -> np.ndarray:
        """pi(q), shape (n_elements, n_invariants)."""
        return self.table.value(q).reshape(self.n_elements, self.n_invariants)

    def energy(self, q: np.ndarray) -> float:
        return float(np.sum(self.term.energy(self.invariants(q), self.params)))

    def element_energies(self, q: np.ndarray) -> np.ndarray:
        return self.term.energy(self.invariants(q), self.params)

    def gradient(self, q: np.ndarray) -> np.ndarray:
        dv = self.term.gradient(self.invariants(q), self.params).ravel()
        return self.table.jacobian_transpose_product(q, dv)

    def hessian(self, q: np.ndarray) -> sp.csr_matrix:
        """sum_k dV~/dpi_k d^2 pi_k + (dpi/dq)^T d^2V~/dpi^2 (dpi/dq)."""
        pi = self.invariants(q)
        dv = self.term.gradient(pi, self.params).ravel()
        d2v = self.term.hessian(pi, self.params)
        k = self.n_invariants
        rows = np.repeat(np.arange(self.n_elements * k).reshape(-1, k), k, axis=1).ravel()
        cols = np.tile(np.arange(self.n_elements * k).reshape(-1, k), (1, k)).ravel()
        block = sp.csr_matrix((d2v.ravel(), (rows, cols)),
                              shape=(self.n_elements * k, self.n_elements * k))
        jac = self.table.jacobian(q)
        return (self.table.hessian_product(dv) + jac.T @ block @ jac).tocsr()

    def hessian_dense(self, q: np.ndarray) -> np.ndarray:
        """Dense :meth:`hessian` (fast path for small models)."""
        pi = self.invariants(q)
        dv = self.term.gradient(pi, self.params).ravel()
        d2v = self.term.hessian(pi, self.params)
        jac = self.table.jacobian_dense(q)
        stacked = jac.reshape(self.n_elements, self.n_invariants, -1)
        weighted = np.einsum("eab,ebj->eaj", d2v, stacked).reshape(jac.shape)
        return self.table.hessian_product_dense(dv) + jac.T @ weighted

    def discrete_gradient(self, q0: np.ndarray, q1: np.ndarray) -> np.ndarray:
        """(dpi/dq)(q_mid)^T D V~(pi0, pi1), seed 003 eqs. (125)-(126)."""
        d_tilde = discrete_invariant_gradient(
            self.term, self.invariants(q0), self.invariants(q1), self.params, self.scales)
        return self.table.jacobian_transpose_product(0.5 * (q0 + q1), d_tilde.ravel())
