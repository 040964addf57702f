"""Variational Crouch-Grossman (VCG) methods on T*G.

G. Bogfjellmo and H. Marthinsen, "High order symplectic partitioned Lie group methods"
(preprint, 2014), section 4.2, eq. (18). For a tableau (A, b) with all b_i != 0, with
q^0 = q0, q^j = exp(h b_j xi_j) q^{j-1}, Q_i0 = q0, Q_ij = exp(h a_ij xi_j) Q_i,j-1, Q_i = Q_is:

    (xi_i, n_i) = f(Q_i, M_i)
    mu_bar_0 = Ad*_{q0} mu0,  n_bar_i = Ad*_{Q_i} n_i,  mu_bar_1 = mu_bar_0 + h sum_j b_j n_bar_j
    M_i = dexp*_{h b_i xi_i} Ad*_{(q^i)^{-1}} mu_bar_1
          - h sum_j (b_j a_ji / b_i) dexp*_{h a_ji xi_i} Ad*_{Q_ji^{-1}} n_bar_j

and q1 = q^s, mu1 = Ad*_{q1^{-1}} mu_bar_1. The unknowns are (xi_i, M_i), 2 n s scalars.

The implementation uses the relative elements p^j = q^j q0^{-1} and P_ij = Q_ij q0^{-1}
(products of exponentials only). With Ad*_{gh} = Ad*_h Ad*_g the equations become
m1 = mu0 + h sum_j b_j Ad*_{P_j} n_j, Ad*_{(q^i)^{-1}} mu_bar_1 = Ad*_{(p^i)^{-1}} m1,
Ad*_{Q_ji^{-1}} n_bar_j = Ad*_{P_ji^{-1}} Ad*_{P_j} n_j and mu1 = Ad*_{(p^s)^{-1}} m1: the same
method, but q0 enters only through f(P_i q0, M_i) and q1 = p^s q0. Transporting mu through the
body frame with Ad*_{q0} and back with Ad*_{q1^{-1}} would instead inject the rounding-level
non-orthogonality of q0 into mu at every step (on SO(3), Ad*_{g^{-1}} = g assumes g^T g = I),
so that momentum maps drift by far more than round-off.

With s = 1 and (A, b) = (1/2, 1) this is the paper's midpoint method (Example 3.3), second
order, symmetric, and analytically identical to VRKMK with Gauss-1. By Lemma 5.4 a VCG step of
length gamma h followed by one of length (1 - gamma) h is one VCG step whose tableau is block
lower-triangular; the paper's fourth- and sixth-order methods (Table 2) are the triple-jump and
Yoshida compositions of the midpoint step (Prop. 5.5). :class:`VCG` runs them as compositions
(one 2n-unknown solve per sub-step) or, with ``form="tableau"``, as one solve of the composed
diagonally implicit tableau, which must give the same step.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from mbs.liegroup.integrator import (
    SolverSettings,
    StageMethod,
    StepResult,
    block_scales,
)
from mbs.liegroup.problems import Problem

_CBRT2 = 2.0 ** (1.0 / 3.0)

COMPOSITIONS: dict[str, tuple[float, ...]] = {
    "midpoint": (1.0,),
    "triple-jump": (1.0 / (2.0 - _CBRT2), -_CBRT2 / (2.0 - _CBRT2), 1.0 / (2.0 - _CBRT2)),
    "yoshida-6": (0.78451361047755726381949763, 0.23557321335935813368479318,
                  -1.17767998417887100694641568, 1.31518632068391121888424973,
                  -1.17767998417887100694641568, 0.23557321335935813368479318,
                  0.78451361047755726381949763),
}
"""Sub-step fractions gamma_k of the symmetric compositions of the midpoint step (paper, Table 2;
Yoshida's sixth-order coefficients as printed there)."""

#: Classical order of each composition.
COMPOSITION_ORDERS = {"midpoint": 2, "triple-jump": 4, "yoshida-6": 6}


def composition_tableau(gammas: tuple[float, ...] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Tableau of the composition of midpoint steps of lengths gamma_k h (Lemma 5.4).

    Row i of A is (b_1, ..., b_{i-1}, b_i / 2, 0, ...) and b = gamma (paper, Table 2).
    """
    b = np.asarray(gammas, dtype=float)
    A = np.tril(np.broadcast_to(b, (b.size, b.size)), k=-1) + np.diag(0.5 * b)
    return A, b


@dataclass
class VCGTableauStep(StageMethod):
    """One VCG step of eq. (18) for a general tableau (A, b), all b_i != 0."""

    A: np.ndarray
    b: np.ndarray
    solver: SolverSettings = field(default_factory=SolverSettings)

    def __post_init__(self):
        self.A = np.asarray(self.A, dtype=float)
        self.b = np.asarray(self.b, dtype=float)
        if np.any(self.b == 0.0):
            raise ValueError("VCG needs all weights b_i != 0 (eq. (18) divides by b_i)")

    def _products(self, problem: Problem, h: float, xi: np.ndarray):
        """Relative rotations p^j = q^j q0^{-1} and P_ij = Q_ij q0^{-1} (j = 1..s), xi (..., s, d).

        Returns p (..., s, *element_shape) with p[..., j-1] = p^j and P (..., s, s,
        *element_shape) with P[..., i, j-1] = P_ij.
        """
        group, A, b = problem.group, self.A, self.b
        s = b.size
        stage = group.exp(h * b[0] * xi[..., 0, :])
        partial = group.exp(h * A[:, 0, None] * xi[..., None, 0, :])   # P_i1 for all i at once
        stages, partials = [stage], [partial]
        for j in range(1, s):
            stage = group.multiply(group.exp(h * b[j] * xi[..., j, :]), stage)
            partial = group.multiply(group.exp(h * A[:, j, None] * xi[..., None, j, :]), partial)
            stages.append(stage)
            partials.append(partial)
        element_axes = len(group.element_shape)
        return (np.stack(stages, axis=-1 - element_axes),
                np.stack(partials, axis=-1 - element_axes))

    def _momenta(self, problem: Problem, q0: np.ndarray, mu0: np.ndarray, h: float,
                 xi: np.ndarray, M: np.ndarray):
        """Stage values and m1 = mu0 + h sum_j b_j Ad*_{P_j} n_j (= Ad*_{q0^{-1}} mu_bar_1)."""
        group = problem.group
        s = self.b.size
        p, P = self._products(problem, h, xi)
        P_full = np.take(P, s - 1, axis=-1 - len(group.element_shape))      # P_i = P_is
        xi_new, n = problem.vector_field(group.multiply(P_full, q0), M)
        n_rel = np.einsum("...ij,...j->...i", group.coadjoint(P_full), n)  # Ad*_{P_j} n_j
        m1 = mu0 + h * np.einsum("j,...jd->...d", self.b, n_rel)
        return p, P, xi_new, n_rel, m1

    def _fixed_point_map(self, problem: Problem, q0: np.ndarray, mu0: np.ndarray, h: float):
        group, A, b = problem.group, self.A, self.b
        s, d = b.size, group.dim

        def fixed_point_map(z: np.ndarray) -> np.ndarray:
            unknowns = z.reshape(z.shape[:-1] + (2, s, d))
            xi, M = unknowns[..., 0, :, :], unknowns[..., 1, :, :]
            p, P, xi_new, n_rel, m1 = self._momenta(problem, q0, mu0, h, xi, M)
            # dexp*_{h b_i xi_i} Ad*_{(p^i)^{-1}} m1 for every stage i.
            back = np.einsum("...ij,...j->...i", group.coadjoint_inverse(p), m1[..., None, :])
            first = np.einsum("...ji,...j->...i", group.dexp(h * b[:, None] * xi), back)
            # sum_j (b_j a_ji / b_i) dexp*_{h a_ji xi_i} Ad*_{P_ji^{-1}} Ad*_{P_j} n_j.
            back_n = np.einsum("...jiab,...jb->...jia", group.coadjoint_inverse(P), n_rel)
            arguments = h * A[:, :, None] * xi[..., None, :, :]           # [j, i] = h a_ji xi_i
            pulled = np.einsum("...jiba,...jib->...jia", group.dexp(arguments), back_n)
            weights = b[:, None] * A / b[None, :]                       # [j, i] = b_j a_ji / b_i
            second = h * np.einsum("ji,...jia->...ia", weights, pulled)
            return np.stack([xi_new, first - second], axis=-3).reshape(z.shape)

        return fixed_point_map

    def initial_guess(self, problem: Problem, q0: np.ndarray, mu0: np.ndarray,
                      h: float = 0.0) -> np.ndarray:
        """xi_i = xi0 and M_i = mu0 with xi0 from f(q0, mu0)."""
        xi0, _ = problem.vector_field(q0, mu0)
        s = self.b.size
        return np.stack([np.broadcast_to(xi0, (s, xi0.size)),
                         np.broadcast_to(mu0, (s, mu0.size))]).ravel()

    def scales(self, problem: Problem, q0: np.ndarray, mu0: np.ndarray, h: float) -> np.ndarray:
        """Natural sizes: |xi| + h|d xi/dt| ~ |xi| for xi_i, |mu| + h|n| for M_i."""
        xi0, n0 = problem.vector_field(q0, mu0)
        block = self.b.size * problem.group.dim
        return block_scales([float(np.linalg.norm(xi0)),
                             float(np.linalg.norm(mu0)) + abs(h) * float(np.linalg.norm(n0))],
                            [block, block])

    def finish(self, problem: Problem, q0: np.ndarray, mu0: np.ndarray, h: float,
               z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """q1 = p^s q0 and mu1 = Ad*_{(p^s)^{-1}} m1 from converged unknowns z."""
        group = problem.group
        s, d = self.b.size, group.dim
        xi, M = z.reshape(2, s, d)
        p, _, _, _, m1 = self._momenta(problem, q0, mu0, h, xi, M)
        p_step = p[s - 1]
        return group.multiply(p_step, q0), group.coadjoint_inverse(p_step) @ m1


@dataclass
class VCG:
    """VCG method: a symmetric composition of the midpoint step (paper, Table 2).

    Parameters
    ----------
    composition : {"midpoint", "triple-jump", "yoshida-6"}
        Orders 2, 4 and 6.
    form : {"composition", "tableau"}
        "composition" solves one midpoint system per sub-step of length gamma_k h (2n unknowns
        each); "tableau" solves eq. (18) once for the composed tableau (2 n s unknowns).
    solver : SolverSettings
    """

    composition: str = "triple-jump"
    form: Literal["composition", "tableau"] = "composition"
    solver: SolverSettings = field(default_factory=SolverSettings)

    def __post_init__(self):
        if self.composition not in COMPOSITIONS:
            raise ValueError(f"unknown composition {self.composition!r}; choose from "
                             f"{sorted(COMPOSITIONS)}")
        if self.form not in ("composition", "tableau"):
            raise ValueError(f"form must be 'composition' or 'tableau', got {self.form!r}")
        self.gammas = np.array(COMPOSITIONS[self.composition])
        self._midpoint = VCGTableauStep(*composition_tableau((1.0,)), solver=self.solver)
        self._tableau = VCGTableauStep(*composition_tableau(self.gammas), solver=self.solver)

    @property
    def order(self) -> int:
        return COMPOSITION_ORDERS[self.composition]

    @property
    def name(self) -> str:
        return f"vcg-{self.composition}"

    def step(self, problem: Problem, q0: np.ndarray, mu0: np.ndarray, h: float,
             guess: Any = None) -> StepResult:
        """One step; ``guess`` holds the previous step's unknowns of every sub-step."""
        if self.form == "tableau":
            return self._tableau.step(problem, q0, mu0, h, guess)
        guesses = guess if guess is not None else [None] * self.gammas.size
        q, mu = q0, mu0
        converged = []
        iterations = 0
        for gamma, sub_guess in zip(self.gammas, guesses):
            result = self._midpoint.step(problem, q, mu, gamma * h, sub_guess)
            q, mu = result.q, result.mu
            converged.append(result.guess)
            iterations += result.iterations
        return StepResult(q, mu, converged, iterations)
