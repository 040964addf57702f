"""Compiled potentials: all elements of one invariant-term class, evaluated in one call."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from mbs.forces.base import InvariantTerm, discrete_invariant_gradient
from mbs.quadratic import QuadraticTable

#: an empty two-entry cache of :meth:`PotentialGroup.invariants`
_NO_INVARIANTS = ((None, None), (None, None))

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
        # V linear in q (uniform gravity): constant gradient, zero Hessian, exact discrete
        # gradient; cached so that the hot path does no work for it.
        self.linear_in_q = term.polynomial_degree == 1 and table.quad_row.size == 0
        self._invariant_cache = _NO_INVARIANTS
        if self.linear_in_q:
            zero = np.zeros(table.n)
            self._constant_gradient = table.jacobian_transpose_product(
                zero, term.gradient(self.invariants(zero), params).ravel())

    def invariants(self, q: np.ndarray) -> np.ndarray:
        """pi(q), shape (n_elements, n_invariants).

        The last two configurations are remembered (by value): a Newton iteration of the EM
        step asks for pi(q^n) and pi(q^{n+1}) in every discrete gradient, and q^n is the same
        for the whole step, so about half the evaluations are saved. The cache is one tuple
        swapped atomically, so runs sharing a model across threads stay correct."""
        key = q.tobytes()
        cache = self.__dict__.get("_invariant_cache", _NO_INVARIANTS)
        for cached_key, cached in cache:
            if cached_key == key:
                return cached.copy()
        value = self.table.value(q).reshape(self.n_elements, self.n_invariants)
        self._invariant_cache = ((key, value.copy()), cache[0])
        return value

    def energy(self, q: np.ndarray) -> float:
        return float(np.sum(self.term.energy(self.invariants(q), self.params)))

    def gradient(self, q: np.ndarray) -> np.ndarray:
        if self.linear_in_q:
            return self._constant_gradient.copy()
        dv = self.term.gradient(self.invariants(q), self.params).ravel()
        return self.table.jacobian_transpose_product(q, dv)

    def gradient_magnitudes(self, q: np.ndarray) -> np.ndarray:
        """Per coordinate, the sum of |dV/dq| over the group's elements (n,): the size of
        the forces that cancel in :meth:`gradient` at an equilibrium."""
        if self.linear_in_q:
            return np.abs(self._constant_gradient)
        dv = self.term.gradient(self.invariants(q), self.params).ravel()
        return abs(self.table.jacobian(q)).T @ np.abs(dv)

    def energies(self, Q: np.ndarray) -> np.ndarray:
        """V of this group at each row of Q (K, n) -> (K,)."""
        return self.element_energies(Q).sum(axis=1)

    def element_energies(self, Q: np.ndarray) -> np.ndarray:
        """V~ of each element at each row of Q (K, n) -> (K, n_elements)."""
        count = Q.shape[0]
        pi = self.table.values(Q).reshape(count * self.n_elements, self.n_invariants)
        return self.term.energy(pi, self._tiled_params(count)).reshape(count, -1)

    def gradients(self, Q: np.ndarray) -> np.ndarray:
        """grad V at each configuration of Q (K, n) -> (K, n), vectorised over K."""
        if self.linear_in_q:
            return np.broadcast_to(self._constant_gradient, Q.shape).copy()
        count = Q.shape[0]
        pi = self.table.values(Q).reshape(count * self.n_elements, self.n_invariants)
        params = self._tiled_params(count)
        dv = self.term.gradient(pi, params).reshape(count, -1)
        return self.table.jacobian_transpose_products(Q, dv)

    def range_exits(self, Q: np.ndarray) -> list[tuple[str, int]]:
        """(element name, first state) of the elements whose V~ left the configurations it
        is valid for along the states Q (K, n) (see :meth:`InvariantTerm.range_exits`)."""
        if self.term.range_exits.__func__ is InvariantTerm.range_exits.__func__:
            return []
        pi = self.table.values(Q).reshape(Q.shape[0], self.n_elements, self.n_invariants)
        exits = self.term.range_exits(pi, self.params)
        return [(self.names[e], int(exits[e])) for e in np.flatnonzero(exits >= 0)]

    def singular_distances(self, q: np.ndarray) -> list[tuple[str, float]]:
        """(element name, distance from q to the element's singular configurations) for
        the elements whose V~ has any (see :meth:`InvariantTerm.singular_distance`)."""
        distances = self.term.singular_distance(self.invariants(q), self.params)
        if distances is None:
            return []
        return [(name, float(distance)) for name, distance in zip(self.names, distances)]

    def singular_steps(self, q0: np.ndarray, q1: np.ndarray) -> list[tuple[str, float, float]]:
        """(element name, distance at q1 from its singular configurations, how far the
        measured point moved from q0) for the elements whose V~ has any."""
        pi1 = self.invariants(q1)
        distances = self.term.singular_distance(pi1, self.params)
        if distances is None:
            return []
        travel = self.term.singular_travel(self.invariants(q0),
                                           self.invariants(0.5 * (q0 + q1)), pi1, self.params)
        return [(name, float(distance), float(moved))
                for name, distance, moved in zip(self.names, distances, travel)]

    def _tiled_params(self, count: int) -> dict:
        cache = self.__dict__.setdefault("_tiled", {})
        if count not in cache:
            cache[count] = {key: np.tile(np.asarray(value), (count,) + (1,) * (np.ndim(value) - 1))
                            for key, value in self.params.items()}
        return cache[count]

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

    def discrete_gradient_jacobian(self, q0: np.ndarray, q1: np.ndarray, dense: bool):
        """d D^G V(q0, q1) / d q1, for Newton's method.

        Exact: when V~ is a polynomial of degree <= 2 in pi the discrete gradient is
        dpi/dq(q_mid)^T grad V~(pi_mid) with pi_mid = (pi0 + pi1)/2; otherwise it is
        Gonzalez's quotient, differentiated by :meth:`_quotient_jacobian`.
        """
        q_mid = 0.5 * (q0 + q1)
        if self.linear_in_q:
            return np.zeros((self.table.n,) * 2) if dense else sp.csr_matrix((self.table.n,) * 2)
        if self.term.polynomial_degree is None or self.term.polynomial_degree > 2:
            return self._quotient_jacobian(q0, q1, dense)
        pi_mid = 0.5 * (self.invariants(q0) + self.invariants(q1))
        dv = self.term.gradient(pi_mid, self.params).ravel()
        d2v = self.term.hessian(pi_mid, self.params)
        k, e = self.n_invariants, self.n_elements
        if dense:
            jac_mid = self.table.jacobian_dense(q_mid)
            jac_1 = self.table.jacobian_dense(q1)
            weighted = np.einsum("eab,ebj->eaj", d2v, jac_1.reshape(e, k, -1))
            return 0.5 * (self.table.hessian_product_dense(dv)
                          + jac_mid.T @ weighted.reshape(jac_1.shape))
        rows = np.repeat(np.arange(e * k).reshape(-1, k), k, axis=1).ravel()
        cols = np.tile(np.arange(e * k).reshape(-1, k), (1, k)).ravel()
        block = sp.csr_matrix((d2v.ravel(), (rows, cols)), shape=(e * k, e * k))
        return 0.5 * (self.table.hessian_product(dv)
                      + self.table.jacobian(q_mid).T @ block @ self.table.jacobian(q1)).tocsr()

    def _quotient_jacobian(self, q0: np.ndarray, q1: np.ndarray, dense: bool):
        """d/dq1 of dpi/dq(q_mid)^T D V~(pi0, pi1) for Gonzalez's quotient (potentials that
        are no polynomials of degree <= 2): 1/2 sum_k D_k Hess pi_k + dpi/dq(q_mid)^T
        (dD/dpi1) dpi/dq(q1), exact (the invariants are quadratic in q)."""
        gradient, slope = discrete_invariant_gradient(
            self.term, self.invariants(q0), self.invariants(q1), self.params, self.scales,
            jacobian=True)
        q_mid = 0.5 * (q0 + q1)
        k, e = self.n_invariants, self.n_elements
        if dense:
            jac_mid = self.table.jacobian_dense(q_mid)
            jac_1 = self.table.jacobian_dense(q1)
            weighted = np.einsum("eab,ebj->eaj", slope, jac_1.reshape(e, k, -1))
            return (0.5 * self.table.hessian_product_dense(gradient.ravel())
                    + jac_mid.T @ weighted.reshape(jac_1.shape))
        rows = np.repeat(np.arange(e * k).reshape(-1, k), k, axis=1).ravel()
        cols = np.tile(np.arange(e * k).reshape(-1, k), (1, k)).ravel()
        block = sp.csr_matrix((slope.ravel(), (rows, cols)), shape=(e * k, e * k))
        return (0.5 * self.table.hessian_product(gradient.ravel())
                + self.table.jacobian(q_mid).T @ block @ self.table.jacobian(q1)).tocsr()

    def discrete_gradient(self, q0: np.ndarray, q1: np.ndarray) -> np.ndarray:
        """(dpi/dq)(q_mid)^T D V~(pi0, pi1), seed 003 eqs. (125)-(126)."""
        if self.linear_in_q:
            return self._constant_gradient.copy()
        d_tilde = discrete_invariant_gradient(
            self.term, self.invariants(q0), self.invariants(q1), self.params, self.scales)
        return self.table.jacobian_transpose_product(0.5 * (q0 + q1), d_tilde.ravel())
