"""Variational Runge-Kutta-Munthe-Kaas (VRKMK) methods on T*G.

G. Bogfjellmo and H. Marthinsen, "High order symplectic partitioned Lie group methods"
(preprint, 2014), section 4.1, eq. (16). For a Runge-Kutta tableau (A, b) with all b_i != 0 and
the dexp^{-1} truncation order r, one step (q0, mu0) -> (q1, mu1) solves, for i = 1..s,

    Lambda    = dexp*_{-Y} ( mu0 + h sum_i b_i Ad*_{exp X_i} n_i )
    lambda_i  = -h b_i dexp*_{X_i} n_i + h P*_(r)(X_i, xi_i) ( b_i Lambda + sum_j a_ji lambda_j )
    M_i       = (1/b_i) (dexp^{-1}_{(r), X_i})* ( b_i Lambda + sum_j a_ji lambda_j )
    X_i       = h sum_j a_ij dexp^{-1}_{(r), X_j} xi_j
    (xi_i, n_i) = f( exp(X_i) q0, M_i )
    Y         = h sum_i b_i dexp^{-1}_{(r), X_i} xi_i

and sets q1 = exp(Y) q0, mu1 = Ad*_{exp(-Y)} ( mu0 + h sum_i b_i Ad*_{exp X_i} n_i ). The
unknowns are X_i, M_i, lambda_i (3 n s scalars for dim G = n); the rest is explicit.

Order (paper, Thm. 5.3): min(order of the symplectic partitioned RK method (A, b; A_hat, b) with
a_hat_ij = b_j - b_j a_ji / b_i, r + 2). The default truncation r = p - 2 keeps the tableau's
order p: 0 for Gauss-1 (midpoint, order 2), 1 for Kutta's third-order method (order 3), 2 for
Gauss-2 (order 4), 4 for Gauss-3 (order 6). Kutta's method can do better on some problems: its
errors fall at order 3 on the paper's dipole and on a mixed system of bodies, springs and
central gravity, but at order 4 on a torque-free asymmetric body and on an asymmetric heavy top
(its weights are Simpson's rule). The method is symplectic for every r, and on an
abelian group it is the partitioned RK method above.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from mbs.liegroup.integrator import (
    SolverSettings,
    StageMethod,
    block_scales,
)
from mbs.liegroup.problems import Problem


@dataclass(frozen=True)
class Tableau:
    """A Runge-Kutta tableau (A, b) and its classical order (paper, Table 1)."""

    name: str
    A: np.ndarray
    b: np.ndarray
    order: int

    @property
    def stages(self) -> int:
        return self.b.size

    @property
    def c(self) -> np.ndarray:
        return self.A.sum(axis=1)


def _gauss_tableaux() -> dict[str, Tableau]:
    r3, r15 = np.sqrt(3.0), np.sqrt(15.0)
    return {
        "gauss-1": Tableau("gauss-1", np.array([[0.5]]), np.array([1.0]), 2),
        "gauss-2": Tableau("gauss-2", np.array([[0.25, 0.25 - r3 / 6.0],
                                                [0.25 + r3 / 6.0, 0.25]]),
                           np.array([0.5, 0.5]), 4),
        "gauss-3": Tableau("gauss-3", np.array([
            [5.0 / 36.0, 2.0 / 9.0 - r15 / 15.0, 5.0 / 36.0 - r15 / 30.0],
            [5.0 / 36.0 + r15 / 24.0, 2.0 / 9.0, 5.0 / 36.0 - r15 / 24.0],
            [5.0 / 36.0 + r15 / 30.0, 2.0 / 9.0 + r15 / 15.0, 5.0 / 36.0]]),
            np.array([5.0 / 18.0, 4.0 / 9.0, 5.0 / 18.0]), 6),
        "kutta": Tableau("kutta", np.array([[0.0, 0.0, 0.0], [0.5, 0.0, 0.0],
                                            [-1.0, 2.0, 0.0]]),
                         np.array([1.0 / 6.0, 2.0 / 3.0, 1.0 / 6.0]), 3),
    }


TABLEAUX: dict[str, Tableau] = _gauss_tableaux()
"""The tableaux of the paper's Table 1."""


def adjoint_weights(A: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a_hat_ij = b_j - b_j a_ji / b_i: the momentum tableau of the partitioned RK method that
    VRKMK (and VCG) reduce to on an abelian group."""
    return b[None, :] - b[None, :] * A.T / b[:, None]


@dataclass
class VRKMK(StageMethod):
    """VRKMK method of eq. (16) for a tableau of :data:`TABLEAUX` (or a :class:`Tableau`).

    Parameters
    ----------
    tableau : str or Tableau
        "gauss-1", "gauss-2", "gauss-3" or "kutta".
    truncation : int, optional
        Order r of the truncated dexp^{-1}; default ``max(order - 2, 0)``, the smallest r that
        keeps the tableau's order (Thm. 5.3). Smaller r lowers the order to r + 2.
    solver : SolverSettings
        Stage-equation solver (Newton by default).
    """

    tableau: str | Tableau = "gauss-2"
    truncation: int | None = None
    solver: SolverSettings = field(default_factory=SolverSettings)

    def __post_init__(self):
        if isinstance(self.tableau, str):
            if self.tableau not in TABLEAUX:
                raise ValueError(f"unknown tableau {self.tableau!r}; choose from "
                                 f"{sorted(TABLEAUX)}")
            self.tableau = TABLEAUX[self.tableau]
        if np.any(self.tableau.b == 0.0):
            raise ValueError("VRKMK needs all weights b_i != 0 (eq. (16) divides by b_i)")
        if self.truncation is None:
            self.truncation = max(self.tableau.order - 2, 0)
        if isinstance(self.truncation, bool) or int(self.truncation) != self.truncation or \
                self.truncation < 0:
            raise ValueError(f"truncation must be a non-negative integer, got "
                             f"{self.truncation!r}")
        self.truncation = int(self.truncation)

    @property
    def order(self) -> int:
        """min(tableau order, r + 2) (Thm. 5.3 and the bound that makes it sharp)."""
        return min(self.tableau.order, self.truncation + 2)

    @property
    def name(self) -> str:
        return f"vrkmk-{self.tableau.name}-r{self.truncation}"

    # -- the stage equations -----------------------------------------------------------------

    def _stage_quantities(self, problem: Problem, q0: np.ndarray, mu0: np.ndarray, h: float,
                          X: np.ndarray, M: np.ndarray) -> dict[str, np.ndarray]:
        """Everything explicit in (X, M): steps 3-5 of the per-step algorithm; X, M (..., s, d)."""
        group, tableau, r = problem.group, self.tableau, self.truncation
        E = group.exp(X)
        xi, n = problem.vector_field(group.multiply(E, q0), M)
        dexp_inv = group.dexp_inv_series(X, r)
        eta = np.einsum("...ij,...j->...i", dexp_inv, xi)
        Y = h * np.einsum("i,...id->...d", tableau.b, eta)
        coadjoint_n = np.einsum("...ij,...j->...i", group.coadjoint(E), n)
        S = mu0 + h * np.einsum("i,...id->...d", tableau.b, coadjoint_n)
        return {"E": E, "xi": xi, "n": n, "dexp_inv": dexp_inv, "eta": eta, "Y": Y, "S": S}

    def _fixed_point_map(self, problem: Problem, q0: np.ndarray, mu0: np.ndarray, h: float):
        group, tableau, r = problem.group, self.tableau, self.truncation
        s, d = tableau.stages, group.dim
        A, b = tableau.A, tableau.b

        def fixed_point_map(z: np.ndarray) -> np.ndarray:
            unknowns = z.reshape(z.shape[:-1] + (3, s, d))
            X, M, L = unknowns[..., 0, :, :], unknowns[..., 1, :, :], unknowns[..., 2, :, :]
            stage = self._stage_quantities(problem, q0, mu0, h, X, M)
            # dexp*_{-Y} = dexp_{-Y}^T
            Lam = np.einsum("...ji,...j->...i", group.dexp(-stage["Y"]), stage["S"])
            weighted = b[:, None] * Lam[..., None, :] + np.einsum("ji,...jd->...id", A, L)
            L_new = (-h * b[:, None] * np.einsum("...ji,...j->...i", group.dexp(X), stage["n"])
                     + h * np.einsum("...ji,...j->...i",
                                     group.dexp_inv_series_derivative(X, stage["xi"], r),
                                     weighted))
            M_new = np.einsum("...ji,...j->...i", stage["dexp_inv"], weighted) / b[:, None]
            X_new = h * np.einsum("ij,...jd->...id", A, stage["eta"])
            return np.stack([X_new, M_new, L_new], axis=-3).reshape(z.shape)

        return fixed_point_map

    def initial_guess(self, problem: Problem, q0: np.ndarray, mu0: np.ndarray, h: float
                      ) -> np.ndarray:
        """X_i = h c_i xi0, M_i = mu0, lambda_i = -h b_i n0 with (xi0, n0) = f(q0, mu0)."""
        xi0, n0 = problem.vector_field(q0, mu0)
        tableau = self.tableau
        X = h * tableau.c[:, None] * xi0
        M = np.broadcast_to(mu0, X.shape)
        L = -h * tableau.b[:, None] * n0
        return np.stack([X, M, L]).ravel()

    def scales(self, problem: Problem, q0: np.ndarray, mu0: np.ndarray, h: float) -> np.ndarray:
        """Natural sizes: h|xi| for X_i, |mu| + h|n| for M_i, h(|n| + |xi||mu|) for lambda_i."""
        xi0, n0 = problem.vector_field(q0, mu0)
        size_xi, size_n, size_mu = (float(np.linalg.norm(v)) for v in (xi0, n0, mu0))
        block = self.tableau.stages * problem.group.dim
        return block_scales([abs(h) * size_xi, size_mu + abs(h) * size_n,
                             abs(h) * (size_n + size_xi * size_mu)], [block] * 3)

    def finish(self, problem: Problem, q0: np.ndarray, mu0: np.ndarray, h: float,
               z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """q1 = exp(Y) q0 and mu1 = Ad*_{exp(-Y)} S from converged unknowns z."""
        group = problem.group
        s, d = self.tableau.stages, group.dim
        X, M, _ = z.reshape(3, s, d)
        stage = self._stage_quantities(problem, q0, mu0, h, X, M)
        Y = stage["Y"]
        q1 = group.multiply(group.exp(Y), q0)
        mu1 = group.coadjoint(group.exp(-Y)) @ stage["S"]
        return q1, mu1
