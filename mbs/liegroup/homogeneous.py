"""Nonholonomic partitioned RKMK integrators on the homogeneous space S^2 = SO(3)/SO(2).

Method B of R. T. Sato Martin de Almagro, "High-order integrators for Lagrangian systems on
homogeneous spaces via nonholonomic mechanics" (preprint), section 4.2: a configuration x on the
sphere is represented by a rotation g with x = g x0 (x0 = e3), the Lagrangian is lifted to
SO(3), where it is singular (rotations about x0 do not move x), regularised as

    l_reg(g, eta) = m/2 |eta x x0|^2 + M/2 (eta . x0)^2 - V(g x0),

and the isotropy directions are removed by the nonholonomic constraint phi(eta) = eta . x0 = 0
on the left-trivialised velocity g' = g hat(eta). The step is the variational Lobatto
IIIA-IIIB partitioned Runge-Kutta-Munthe-Kaas scheme (eqs. (3a)-(3d)) with the constraint force
Lambda^i x0 in the force slot and the constraint imposed on the stage velocities H^i of the
extra stage momenta (eqs. (4)-(5)):

    Xi^i = h sum_j a_ij Xidot^j,   xi = h sum_j b_j Xidot^j,   G^i = g_k tau(Xi^i)
    eta^i = dtau^L_{Xi^i} Xidot^i,  Pi0^i = I eta^i,  N0^i = T*_e L_{G^i} D_1 l + Lambda^i x0
    Pi^i = (dtau^L_{Xi^i})* Pi0^i,  N^i = (dtau^L_{Xi^i})* N0^i + (ddtau^L_{Xi^i} Xidot^i)* Pi0^i
    hat(Pi)^i = Ad*_{tau(xi)} [ mu_k + h sum_j b_j ( Ad*_{tau(-Xi^j)} N0^j
                                - (a_ji / b_i) Ad*_{tau(-xi)} hat(N)^j ) ]          (3c)
    mu_{k+1} = Ad*_{tau(xi)} [ mu_k + h sum_j b_j Ad*_{tau(-Xi^j)} N0^j ]            (3d)
    M0^i = Ad*_{tau(Xi^i)} [ mu_k + h sum_j a_ij Ad*_{tau(-Xi^j)} N0^j ],  phi(I^{-1} M0^i) = 0,
                                                                  i = 2..s           (5), (4)

with hat(X) = (dtau^L_xi^{-1})* X, g_{k+1} = g_k tau(xi) and tau the Cayley map or exp. On
SO(3): Ad*_R mu = R^T mu, so Ad*_{tau(-X)} Y = tau(X) Y. The unknowns are Xidot^1..s and
Lambda^2..s (3 s + s - 1); Lambda^1 is not determined by the step ("incomplete", the paper):
``multiplier="concatenate"`` takes Lambda^1_{k+1} = Lambda^s_k (the paper's default, with
Lambda^1_0 the continuous multiplier of the initial data) and ``multiplier="zero"`` takes
Lambda^1 = 0. With the three-stage method concatenation makes the multipliers drift (the
paper's Figs. 2-3), which Lambda^1 = 0 avoids.

The stage equations are solved by Newton's method with a finite-difference Jacobian
(:func:`mbs.liegroup.integrator.solve_stage_equations`, tolerance 1e-14 as the paper's
``scipy.optimize.root``); every stage and Jacobian column is evaluated in one stacked call.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from math import factorial
from typing import Literal

import numpy as np

from mbs.liegroup import so3
from mbs.liegroup.integrator import SolverSettings, block_scales, solve_stage_equations

Retraction = Literal["cayley", "exp"]
MultiplierMode = Literal["concatenate", "zero"]

_E3 = np.array([0.0, 0.0, 1.0])


# ----------------------------------------------------------------------------------------------
# Lobatto IIIA tableaux (stiffly accurate: a_1j = 0, a_sj = b_j)
# ----------------------------------------------------------------------------------------------


def lobatto_iiia(stages: int) -> tuple[np.ndarray, np.ndarray]:
    """(A, b) of the s-stage Lobatto IIIA method, s = 2, 3, 4 (orders 2, 4, 6)."""
    if stages == 2:
        return np.array([[0.0, 0.0], [0.5, 0.5]]), np.array([0.5, 0.5])
    if stages == 3:
        return (np.array([[0.0, 0.0, 0.0], [5.0 / 24.0, 1.0 / 3.0, -1.0 / 24.0],
                          [1.0 / 6.0, 2.0 / 3.0, 1.0 / 6.0]]),
                np.array([1.0 / 6.0, 2.0 / 3.0, 1.0 / 6.0]))
    if stages == 4:
        r5 = np.sqrt(5.0)
        b = np.array([1.0, 5.0, 5.0, 1.0]) / 12.0
        A = np.array([[0.0, 0.0, 0.0, 0.0],
                      [11.0 + r5, 25.0 - r5, 25.0 - 13.0 * r5, -1.0 + r5],
                      [11.0 - r5, 25.0 + 13.0 * r5, 25.0 + r5, -1.0 - r5],
                      [10.0, 50.0, 50.0, 10.0]]) / 120.0
        return A, b
    raise ValueError(f"Method B is defined here for 2, 3 or 4 Lobatto stages, got {stages!r}")


# ----------------------------------------------------------------------------------------------
# Left-trivialised retractions on SO(3): tau, dtau^L, its inverse and its derivative
# ----------------------------------------------------------------------------------------------

#: Below this angle b'(theta)/theta and c'(theta)/theta are summed from their Maclaurin series.
SERIES_BELOW = 1.0
# b = (1 - cos t)/t^2 = sum (-1)^k t^2k/(2k+2)!  ->  b'/t = sum_{k>=1} (-1)^k 2k t^(2k-2)/(2k+2)!
_DB_SERIES = np.array([(-1) ** k * 2 * k / factorial(2 * k + 2) for k in range(1, 14)])
# c = (t - sin t)/t^3 = sum (-1)^k t^2k/(2k+3)!  ->  c'/t = sum_{k>=1} (-1)^k 2k t^(2k-2)/(2k+3)!
_DC_SERIES = np.array([(-1) ** k * 2 * k / factorial(2 * k + 3) for k in range(1, 14)])


def _series(coefficients: np.ndarray, theta_squared: np.ndarray) -> np.ndarray:
    result = np.full(np.shape(theta_squared), coefficients[-1])
    for coefficient in coefficients[-2::-1]:
        result = result * theta_squared + coefficient
    return result


def _exp_coefficient_derivatives(theta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """b'(theta)/theta and c'(theta)/theta of dexp = I + b W + c W^2 (so3 module docstring).

    The closed forms (theta sin theta - 2 (1 - cos theta))/theta^4 and
    (theta (1 - cos theta) - 3 (theta - sin theta))/theta^5 cancel to O(theta^4) and O(theta^4)
    of their terms, so below :data:`SERIES_BELOW` the series are used (13 terms; the first
    omitted one is below 1e-25 there).
    """
    small = theta < SERIES_BELOW
    safe = np.where(small, SERIES_BELOW, theta)
    squared = theta * theta
    db = np.where(small, _series(_DB_SERIES, squared),
                  (safe * np.sin(safe) - 2.0 * (1.0 - np.cos(safe))) / safe**4)
    dc = np.where(small, _series(_DC_SERIES, squared),
                  (safe * (1.0 - np.cos(safe)) - 3.0 * (safe - np.sin(safe))) / safe**5)
    return db, dc


def retraction(x: np.ndarray, kind: Retraction) -> np.ndarray:
    """tau(x): exp or the Cayley map, (..., 3) -> (..., 3, 3)."""
    return so3.exp(x) if kind == "exp" else so3.cay(x)


def retraction_tangent(x: np.ndarray, kind: Retraction) -> np.ndarray:
    """Left-trivialised tangent dtau^L_x: tau(x)^{-1} d/dt tau(x(t)) = hat(dtau^L_x x')."""
    return so3.dexp(x, "left") if kind == "exp" else so3.dcay(x, "left")


def retraction_tangent_inverse(x: np.ndarray, kind: Retraction) -> np.ndarray:
    """(dtau^L_x)^{-1}."""
    return so3.dexp_inv(x, "left") if kind == "exp" else so3.dcay_inv(x, "left")


def retraction_second_tangent(x: np.ndarray, v: np.ndarray, kind: Retraction) -> np.ndarray:
    """The 3x3 Jacobian d/dx (dtau^L_x v) (the paper's ddtau^L_x v as a matrix), (..., 3, 3).

    exp: dtau^L_x v = v - b x x v + c x x (x x v) with b, c of dexp (theta = |x|), so
    d/dx = b hat(v) - (b'/theta)(x x v) x^T - c (hat(x x v) + hat(x) hat(v))
           + (c'/theta)(x x (x x v)) x^T;
    Cayley: dtau^L_x v = 2 (2 v - x x v)/(4 + |x|^2), so
    d/dx = -4 (2 v - x x v) x^T/(4 + |x|^2)^2 + 2 hat(v)/(4 + |x|^2).
    """
    x = np.asarray(x, dtype=float)
    v = np.asarray(v, dtype=float)
    shape = np.broadcast_shapes(x.shape, v.shape)
    x, v = np.broadcast_to(x, shape), np.broadcast_to(v, shape)
    squared = np.einsum("...i,...i->...", x, x)
    x_cross_v = so3.cross(x, v)
    if kind == "cayley":
        denominator = 4.0 + squared
        return (-4.0 / denominator**2)[..., None, None] * (
            (2.0 * v - x_cross_v)[..., :, None] * x[..., None, :]) \
            + (2.0 / denominator)[..., None, None] * so3.hat(v)
    theta = np.sqrt(squared)
    b = so3._one_minus_cos_over_square(theta)[..., None, None]
    c = so3._theta_minus_sin_over_cube(theta)[..., None, None]
    db, dc = (value[..., None, None] for value in _exp_coefficient_derivatives(theta))
    double = so3.cross(x, x_cross_v)
    return (b * so3.hat(v) - db * x_cross_v[..., :, None] * x[..., None, :]
            - c * (so3.hat(x_cross_v) + so3.hat(x) @ so3.hat(v))
            + dc * double[..., :, None] * x[..., None, :])


# ----------------------------------------------------------------------------------------------
# The test problem
# ----------------------------------------------------------------------------------------------


@dataclass
class SphericalPendulum:
    """The paper's spherical mathematical pendulum (section 5.1) lifted to SO(3).

    L(x, x') = m/2 |x'|^2 - alpha x_3 on the unit sphere, x = g e3; regularised Lagrangian
    l_reg = m/2 |eta x e3|^2 + M/2 (eta . e3)^2 - alpha (g e3)_3, so the regularised inertia is
    I = diag(m, m, M). The paper's initial data: g0 = R_y(pi/3) (Tait-Bryan (0, pi/3, 0)),
    eta0 = (1/3, 0, 0), lambda0 = 0 (the continuous multiplier vanishes: M eta_3' = lambda and
    eta_3 = 0); m, alpha and M are not given in the paper (default 1).

    State: g (..., 3, 3) and the left-trivialised momentum mu = I eta (..., 3).
    """

    mass: float = 1.0
    gravity: float = 1.0
    regularization: float = 1.0
    rotation0: np.ndarray = field(default_factory=lambda: np.array(
        [[0.5, 0.0, np.sqrt(3.0) / 2.0], [0.0, 1.0, 0.0], [-np.sqrt(3.0) / 2.0, 0.0, 0.5]]))
    velocity0: np.ndarray = field(default_factory=lambda: np.array([1.0 / 3.0, 0.0, 0.0]))
    multiplier0: float = 0.0
    #: The isotropy axis x0: x = g x0, constraint eta . x0 = 0.
    axis: np.ndarray = field(default_factory=lambda: _E3.copy())

    @property
    def inertia(self) -> np.ndarray:
        return np.diag([self.mass, self.mass, self.regularization])

    def initial_state(self) -> tuple[np.ndarray, np.ndarray, float]:
        """(g0, mu0 = I eta0, Lambda^1_0)."""
        return (np.array(self.rotation0, dtype=float), self.inertia @ self.velocity0,
                float(self.multiplier0))

    def force(self, g: np.ndarray) -> np.ndarray:
        """T*_e L_g D_1 l = alpha (g^T e3) x e3 (the left-trivialised gravity force)."""
        g = np.asarray(g, dtype=float)
        return self.gravity * so3.cross(g[..., 2, :], _E3)

    def energy(self, g: np.ndarray, mu: np.ndarray) -> np.ndarray:
        """E = eta . I eta / 2 + alpha (g e3)_3 with eta = I^{-1} mu."""
        eta = np.asarray(mu) / np.diag(self.inertia)
        return 0.5 * np.einsum("...i,...i->...", eta, mu) + self.gravity * np.asarray(g)[..., 2, 2]

    def position(self, g: np.ndarray) -> np.ndarray:
        """x = g e3."""
        return np.asarray(g)[..., :, 2]

    def velocity(self, g: np.ndarray, mu: np.ndarray) -> np.ndarray:
        """x' = g (eta x e3)."""
        eta = np.asarray(mu) / np.diag(self.inertia)
        return np.einsum("...ij,...j->...i", g, so3.cross(eta, self.axis))


# ----------------------------------------------------------------------------------------------
# Method B
# ----------------------------------------------------------------------------------------------


@dataclass
class MethodBStep:
    """One step: the new state, every stage multiplier Lambda^1..s and Newton's count."""

    g: np.ndarray
    mu: np.ndarray
    multipliers: np.ndarray
    unknowns: np.ndarray
    iterations: int


@dataclass
class MethodB:
    """Method B (module docstring) with s Lobatto stages and retraction tau.

    Parameters
    ----------
    stages : {2, 3, 4}
        Orders 2, 4, 6.
    retraction : {"cayley", "exp"}
    multiplier : {"concatenate", "zero"}
        Lambda^1_{k+1} = Lambda^s_k (the paper's default) or Lambda^1 = 0.
    solver : SolverSettings
        Newton on the stage equations; default tolerance 1e-14 (the paper's).
    """

    stages: int = 3
    retraction: Retraction = "cayley"
    multiplier: MultiplierMode = "concatenate"
    solver: SolverSettings = field(default_factory=lambda: SolverSettings(tol=1e-14))

    def __post_init__(self):
        self.A, self.b = lobatto_iiia(self.stages)
        if self.retraction not in ("cayley", "exp"):
            raise ValueError(f"retraction must be 'cayley' or 'exp', got {self.retraction!r}")
        if self.multiplier not in ("concatenate", "zero"):
            raise ValueError(f"multiplier must be 'concatenate' or 'zero', got "
                             f"{self.multiplier!r}")

    @property
    def order(self) -> int:
        return 2 * self.stages - 2

    def _residual(self, problem: SphericalPendulum, g0: np.ndarray, mu0: np.ndarray,
                  first_multiplier: float, h: float):
        """The stage equations (3c), (4)-(5) as r(z) for stacked unknowns z (..., 4 s - 1)."""
        A, b, s, kind = self.A, self.b, self.stages, self.retraction
        inertia = problem.inertia
        inverse_diagonal = 1.0 / np.diag(inertia)
        axis = problem.axis

        def stages(z: np.ndarray):
            leading = z.shape[:-1]
            rates = z[..., :3 * s].reshape(leading + (s, 3))
            lam = np.concatenate([np.full(leading + (1,), first_multiplier), z[..., 3 * s:]],
                                 axis=-1)
            Xi = h * np.einsum("ij,...jd->...id", A, rates)
            T = retraction(Xi, kind)
            forces = problem.force(g0 @ T) + lam[..., None] * axis           # N0^i
            transported = np.einsum("...ij,...j->...i", T, forces)          # Ad*_{tau(-Xi)} N0
            return rates, Xi, T, forces, transported

        def residual(z: np.ndarray) -> np.ndarray:
            rates, Xi, T, forces, transported = stages(z)
            D = retraction_tangent(Xi, kind)
            eta = np.einsum("...ij,...j->...i", D, rates)
            Pi0 = eta @ inertia.T
            Pi = np.einsum("...ji,...j->...i", D, Pi0)
            N = (np.einsum("...ji,...j->...i", D, forces)
                 + np.einsum("...ji,...j->...i", retraction_second_tangent(Xi, rates, kind), Pi0))
            xi = h * np.einsum("j,...jd->...d", b, rates)
            F = retraction(xi, kind)
            W = np.swapaxes(retraction_tangent_inverse(xi, kind), -1, -2)   # hat(X) = W X
            base = mu0 + h * np.einsum("j,...jd->...d", b, transported)
            hat_N = np.einsum("...ij,...sj->...si", F @ W, N)               # Ad*_{tau(-xi)} hat N
            weights = b[:, None] * A / b[None, :]                           # [j, i] = b_j a_ji/b_i
            inner = base[..., None, :] - h * np.einsum("ji,...jd->...id", weights, hat_N)
            r_momentum = (np.einsum("...ij,...sj->...si", W, Pi)
                          - np.einsum("...ji,...sj->...si", F, inner))
            partial = mu0 + h * np.einsum("ij,...jd->...id", A, transported)
            M0 = np.einsum("...sji,...sj->...si", T, partial)                # (5)
            r_constraint = np.einsum("...si,i->...s", M0 * inverse_diagonal, axis)[..., 1:]
            leading = z.shape[:-1]
            return np.concatenate([r_momentum.reshape(leading + (-1,)), r_constraint], axis=-1)

        return residual, stages

    def initial_guess(self, problem: SphericalPendulum, mu0: np.ndarray,
                      first_multiplier: float) -> np.ndarray:
        """Xidot^j = I^{-1} mu_k, Lambda^j = Lambda^1."""
        eta = mu0 / np.diag(problem.inertia)
        return np.concatenate([np.tile(eta, self.stages),
                               np.full(self.stages - 1, first_multiplier)])

    def step(self, problem: SphericalPendulum, g0: np.ndarray, mu0: np.ndarray,
             first_multiplier: float, h: float, guess: np.ndarray | None = None
             ) -> MethodBStep:
        """Advance (g_k, mu_k) by h with Lambda^1_k = ``first_multiplier``."""
        g0 = np.asarray(g0, dtype=float)
        mu0 = np.asarray(mu0, dtype=float)
        if self.multiplier == "zero":
            first_multiplier = 0.0
        residual, stages = self._residual(problem, g0, mu0, first_multiplier, h)
        z0 = self.initial_guess(problem, mu0, first_multiplier) if guess is None else guess
        eta_size = float(np.linalg.norm(mu0 / np.diag(problem.inertia)))
        force_size = float(np.linalg.norm(problem.force(g0))) + float(np.linalg.norm(mu0)) \
            * eta_size
        scales = block_scales([eta_size + abs(h) * force_size, force_size],
                              [3 * self.stages, self.stages - 1])
        solution = solve_stage_equations(lambda z: z - residual(z), z0, scales, self.solver)
        z = solution.z
        rates, _, _, _, transported = stages(z)
        xi = h * self.b @ rates
        F = retraction(xi, self.retraction)
        mu1 = F.T @ (mu0 + h * self.b @ transported)                         # (3d)
        multipliers = np.concatenate([[first_multiplier], z[3 * self.stages:]])
        return MethodBStep(g0 @ F, mu1, multipliers, z, solution.iterations)


@dataclass
class HomogeneousTrajectory:
    """Output of :func:`integrate_method_b`.

    Attributes
    ----------
    t : (N+1,)
    g : (N+1, 3, 3)
    mu : (N+1, 3)
        Left-trivialised momenta I eta.
    multipliers : (N, s)
        Lambda^1..s of every step.
    iterations : (N,)
    """

    t: np.ndarray
    g: np.ndarray
    mu: np.ndarray
    multipliers: np.ndarray
    iterations: np.ndarray


def integrate_method_b(problem: SphericalPendulum, method: MethodB, h: float, steps: int
                       ) -> HomogeneousTrajectory:
    """Integrate ``problem`` from its initial state for ``steps`` steps of size ``h``.

    Lambda^1 of the first step is the problem's ``multiplier0``; with
    ``multiplier="concatenate"`` every later step starts from the previous step's Lambda^s.
    Newton starts from the previous step's converged unknowns.
    """
    g0, mu0, first = problem.initial_state()
    g = np.empty((steps + 1, 3, 3))
    mu = np.empty((steps + 1, 3))
    multipliers = np.empty((steps, method.stages))
    iterations = np.zeros(steps, dtype=int)
    g[0], mu[0] = g0, mu0
    guess = None
    for k in range(steps):
        result = method.step(problem, g[k], mu[k], first, h, guess)
        g[k + 1], mu[k + 1] = result.g, result.mu
        multipliers[k], iterations[k] = result.multipliers, result.iterations
        first, guess = result.multipliers[-1], result.unknowns
    return HomogeneousTrajectory(h * np.arange(steps + 1), g, mu, multipliers, iterations)
