"""Stage-equation solver shared by VRKMK and VCG, the method interface and the driver.

Both families of G. Bogfjellmo and H. Marthinsen, "High order symplectic partitioned Lie group
methods" (preprint, 2014) define a step by a fixed-point system z = Phi(z) in a few unknowns per
stage (eq. (16): X_i, M_i, lambda_i; eq. (18): xi_i, M_i), with everything else explicit. The
paper iterates z <- Phi(z); its contraction factor is O(h |d f|), which for stiff problems (e.g.
the dipole test with a small J_3) costs many iterations per step.
:func:`solve_stage_equations` instead applies Newton's method to F(z) = z - Phi(z):

* Jacobian: forward differences, dF/dz_j = e_j - (Phi(z + eps_j e_j) - Phi(z))/eps_j with
  eps_j = sqrt(u) max(|z_j|, s_j) (u = 2.2e-16, s_j the natural size of the unknown's block).
  Truncation (eps |Phi''|) and rounding (u |Phi|/eps) errors balance at a relative Jacobian
  error of about sqrt(u) = 1.5e-8, so Newton converges quadratically until the increments reach
  1e-8 relative and then contracts by about 1e-8 per iteration. All n columns are evaluated in
  one stacked call of Phi (the problems and group maps work on leading axes), so a Jacobian
  costs one vectorised evaluation rather than n.
* Convergence: Newton runs in the engine of the director schemes
  (:func:`mbs.engine.newton.newton`), each unknown a convergence block whose floor is the
  natural size s_j of its block (for instance h |xi| for the X_i, |mu| + h |n| for the M_i).
  The iteration stops when the increment relative to max(s_j, |z_j|) is below ``tol``, or when
  ``rate / (1 - rate) * increment <= tol`` with rate the ratio of successive increments, an
  estimate of the remaining error (Hairer and Wanner, Solving ODEs II, section IV.8). After a
  Newton increment of 1e-12 relative the remaining error is about 1e-8 of that, far below
  round-off. Increments that stop halving at round-off level (1e3 u) are accepted as
  converged too, since no further progress is possible. Close to the solution (increments
  below ``NewtonOptions.refactor_above``) the last Jacobian is reused, which saves its n
  stage-map evaluations.
* Fixed-point iteration (the paper's solver) is available with ``method="fixed-point"``; it
  stops when the increment relative to s_j meets the same error estimate.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import numpy as np

from mbs.engine.newton import NewtonConvergenceError, NewtonOptions, newton
from mbs.errors import SolverError
from mbs.liegroup.problems import Problem

#: Unit round-off of float64.
UNIT_ROUNDOFF = float(np.finfo(float).eps)


@dataclass(frozen=True)
class SolverSettings:
    """Settings of the stage-equation solver.

    Parameters
    ----------
    method : {"newton", "fixed-point"}
        Newton's method with a finite-difference Jacobian, or the paper's fixed-point iteration.
    tol : float
        Bound on the estimated remaining error of every unknown relative to its natural size.
    max_iterations : int, optional
        Iterations before :class:`mbs.errors.SolverError` is raised; default 20 for Newton
        (3-4 are typical) and 300 for fixed-point iteration (about 50 are needed for the dipole
        test at h = 0.05).
    """

    method: Literal["newton", "fixed-point"] = "newton"
    tol: float = 1e-12
    max_iterations: int | None = None

    def __post_init__(self):
        if self.method not in ("newton", "fixed-point"):
            raise ValueError(f"method must be 'newton' or 'fixed-point', got {self.method!r}")
        if not 0.0 < self.tol < 1.0:  # a relative error bound
            raise ValueError(f"tol must lie in (0, 1), got {self.tol!r}")
        if self.max_iterations is None:
            object.__setattr__(self, "max_iterations", 20 if self.method == "newton" else 300)
        if (isinstance(self.max_iterations, bool)
                or not isinstance(self.max_iterations, numbers.Integral)
                or self.max_iterations < 1):
            raise ValueError(f"max_iterations must be a whole number of at least 1, got "
                             f"{self.max_iterations!r}")


@dataclass
class SolveResult:
    """Converged unknowns of one stage system and how they were obtained.

    Attributes
    ----------
    z : ndarray (n,)
        The converged unknowns.
    iterations : int
    residual_norm : float
        max |z - Phi(z)| at the last evaluated iterate (before its final increment).
    """

    z: np.ndarray
    iterations: int
    residual_norm: float


def finite_difference_jacobian(fixed_point_map: Callable[[np.ndarray], np.ndarray],
                               z: np.ndarray, scales: np.ndarray
                               ) -> tuple[np.ndarray, np.ndarray]:
    """Jacobian of F(z) = z - Phi(z) by forward differences, and Phi(z).

    Parameters
    ----------
    fixed_point_map : callable
        Phi, mapping stacked unknowns (..., n) to (..., n).
    z : ndarray, shape (n,)
    scales : ndarray, shape (n,)
        Natural size of every unknown (positive); sets the difference steps
        eps_j = sqrt(u) max(|z_j|, scales_j).

    Returns
    -------
    jacobian : ndarray, shape (n, n)
    phi : ndarray, shape (n,)
    """
    steps = math.sqrt(UNIT_ROUNDOFF) * np.maximum(np.abs(z), scales)
    # Exactly representable steps: (z + eps) - z == eps, so the quotient uses the true step.
    steps = (z + steps) - z
    points = np.vstack([z[None, :], z[None, :] + np.diag(steps)])
    values = fixed_point_map(points)
    phi = values[0]
    jacobian = np.eye(z.size) - (values[1:] - phi).T / steps[None, :]
    return jacobian, phi


def solve_stage_equations(fixed_point_map: Callable[[np.ndarray], np.ndarray],
                          z0: np.ndarray, scales: np.ndarray,
                          settings: SolverSettings) -> SolveResult:
    """Solve z = Phi(z) by Newton's method or fixed-point iteration (module docstring).

    Raises
    ------
    SolverError
        If the scaled increments do not meet ``settings.tol`` within
        ``settings.max_iterations`` iterations or become non-finite.
    """
    z = np.array(z0, dtype=float)
    if settings.method == "newton":
        return _newton(fixed_point_map, z, scales, settings)
    previous = math.inf
    increment = math.inf
    for iteration in range(1, settings.max_iterations + 1):
        delta = fixed_point_map(z[None, :])[0] - z
        residual_norm = float(np.max(np.abs(delta), initial=0.0))
        z = z + delta
        increment = float(np.max(np.abs(delta) / scales))
        if not math.isfinite(increment):
            break
        rate = increment / previous
        if increment <= settings.tol if iteration == 1 else (
                rate < 1.0 and rate / (1.0 - rate) * increment <= settings.tol):
            return SolveResult(z, iteration, residual_norm)
        previous = increment
    raise SolverError(
        f"stage equations not solved: scaled increment {increment:.3e} after "
        f"{settings.max_iterations} fixed-point iterations (tolerance {settings.tol:.1e})",
        residual_norm=increment, hint="reduce the step size")


def _newton(fixed_point_map: Callable[[np.ndarray], np.ndarray], z: np.ndarray,
            scales: np.ndarray, settings: SolverSettings) -> SolveResult:
    """Newton's method on F(z) = z - Phi(z) by the engine of every scheme."""

    def system(x: np.ndarray, with_jacobian: bool = True):
        if with_jacobian:
            jacobian, phi = finite_difference_jacobian(fixed_point_map, x, scales)
            return x - phi, jacobian
        return x - fixed_point_map(x[None, :])[0], None

    options = NewtonOptions(tolerance=settings.tol, estimate_level=settings.tol,
                            max_iterations=settings.max_iterations,
                            stagnation_level=1e3 * UNIT_ROUNDOFF)
    try:
        z, iterations, residual_norm = newton(
            system, z, [slice(j, j + 1) for j in range(z.size)], list(scales), options)
    except NewtonConvergenceError as failure:
        raise SolverError(
            f"stage equations not solved (tolerance {settings.tol:.1e}): {failure}",
            residual_norm=failure.residual_norm,
            hint="reduce the step size") from failure
    return SolveResult(z, iterations, residual_norm)


def block_scales(sizes: Sequence[float], block_lengths: Sequence[int]) -> np.ndarray:
    """Per-unknown scales from one natural size per block.

    A block whose natural size is zero (for example the momenta of a body at rest) takes the
    largest of the other sizes, and if all are zero the scale is 1: the unknowns are then
    exactly zero and any positive scale gives the same answer.
    """
    sizes = np.asarray(sizes, dtype=float)
    fallback = float(np.max(sizes)) if np.max(sizes) > 0.0 else 1.0
    sizes = np.where(sizes > 0.0, sizes, fallback)
    return np.repeat(sizes, block_lengths)


@dataclass
class StepResult:
    """One step q0, mu0 -> q1, mu1 with the converged unknowns (the next step's guess)."""

    q: np.ndarray
    mu: np.ndarray
    guess: Any
    iterations: int


class Method(Protocol):
    """A one-step method on T*G."""

    name: str
    order: int

    def step(self, problem: Problem, q0: np.ndarray, mu0: np.ndarray, h: float,
             guess: Any = None) -> StepResult:
        """Advance by h; ``guess`` is the previous step's ``StepResult.guess`` or None."""


@dataclass
class Trajectory:
    """Output of :func:`integrate`.

    Attributes
    ----------
    t : ndarray, shape (N+1,)
    g : ndarray, shape (N+1, *element_shape)
        Configurations (rotation matrices for SO(3) problems).
    mu : ndarray, shape (N+1, dim)
        Right-trivialised (spatial) momenta.
    energy : ndarray, shape (N+1,)
    momentum : ndarray, shape (N+1, dim)
        The problem's momentum map (spatial angular momentum mu for rigid bodies).
    iterations : ndarray, shape (N,)
        Solver iterations per step (summed over the sub-steps of a composition).
    """

    t: np.ndarray
    g: np.ndarray
    mu: np.ndarray
    energy: np.ndarray
    momentum: np.ndarray
    iterations: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=int))

    @property
    def body_momentum(self) -> np.ndarray:
        """Pi = Ad*_g mu (g^T mu on SO(3)), shape (N+1, dim)."""
        return np.einsum("...ji,...j->...i", self.g, self.mu) if self.g.ndim == 3 else self.mu


def integrate(problem: Problem, method: Method, h: float, steps: int,
              q0: np.ndarray | None = None, mu0: np.ndarray | None = None) -> Trajectory:
    """Integrate ``problem`` with ``method`` for ``steps`` steps of size ``h``.

    Parameters
    ----------
    problem : Problem
    method : Method
        For example ``VRKMK("gauss-2")`` or ``VCG("triple-jump")``.
    h : float
        Step size (negative integrates backwards).
    steps : int
    q0, mu0 : ndarray, optional
        Initial state; defaults to ``problem.initial_state()``.

    Returns
    -------
    Trajectory
    """
    if q0 is None or mu0 is None:
        default_q, default_mu = problem.initial_state()
        q0 = default_q if q0 is None else q0
        mu0 = default_mu if mu0 is None else mu0
    q = np.empty((steps + 1,) + np.shape(q0))
    mu = np.empty((steps + 1,) + np.shape(mu0))
    iterations = np.zeros(steps, dtype=int)
    q[0], mu[0] = q0, mu0
    guess = None
    for k in range(steps):
        try:
            result = method.step(problem, q[k], mu[k], h, guess)
        except SolverError as error:
            error.step, error.time = k, k * h
            raise
        q[k + 1], mu[k + 1], guess = result.q, result.mu, result.guess
        iterations[k] = result.iterations
    return Trajectory(t=h * np.arange(steps + 1), g=q, mu=mu, energy=problem.energy(q, mu),
                      momentum=problem.momentum(q, mu), iterations=iterations)


class StageMethod:
    """A one-step method whose step solves stage equations z = Phi(z) for unknowns z (VRKMK,
    VCG): subclasses give ``_fixed_point_map``, ``scales``, ``initial_guess`` and ``finish``."""

    solver: SolverSettings

    def step(self, problem, q0: np.ndarray, mu0: np.ndarray, h: float,
             guess=None) -> StepResult:
        """One step from (q0, mu0); ``guess`` is the previous step's unknowns (or None)."""
        q0 = np.asarray(q0, dtype=float)
        mu0 = np.asarray(mu0, dtype=float)
        z0 = self.initial_guess(problem, q0, mu0, h) if guess is None else guess
        solution = solve_stage_equations(self._fixed_point_map(problem, q0, mu0, h), z0,
                                         self.scales(problem, q0, mu0, h), self.solver)
        q1, mu1 = self.finish(problem, q0, mu0, h, solution.z)
        return StepResult(q1, mu1, solution.z, solution.iterations)

