"""Newton's method shared by the implicit schemes.

Each scheme supplies its residual and analytic Jacobian assembled from Model pieces. The linear
algebra is dense LAPACK (getrf/getrs through scipy.linalg.lu_factor/lu_solve) for small systems
and SuperLU (scipy.sparse.linalg.splu) for large ones, chosen by size.

Convergence: after each update the increments of the blocks listed in ``check_blocks`` are
compared with ``tolerance`` times the block's magnitude. Because Newton converges quadratically,
the iterate after an increment of relative size 1e-12 is exact to round-off, which is what the
energy-momentum scheme needs to conserve energy to ~1e-15 (with a tolerance of 1e-9 it would
conserve only to ~1e-9: the scheme is exact only at the solution of its equations). When the
increments stop decreasing at round-off level (stagnation below ``stagnation_level``) the
iteration is also accepted.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla
from scipy.linalg import lapack

#: Unknowns above which sparse LU is used.
SPARSE_THRESHOLD = 400

_getrf = lapack.dgetrf
_getrs = lapack.dgetrs


class NewtonConvergenceError(Exception):
    """Raised when Newton's method does not converge; carries diagnostics."""

    def __init__(self, message: str, residual_norm: float, increment_norm: float,
                 iterations: int, hint: str):
        super().__init__(message)
        self.residual_norm = residual_norm
        self.increment_norm = increment_norm
        self.iterations = iterations
        self.hint = hint


@dataclass
class NewtonOptions:
    """Options of Newton's method.

    Attributes
    ----------
    tolerance : float
        Relative increment below which the iteration stops (default 1e-12, see module doc).
    max_iterations : int
        Iterations before :class:`NewtonConvergenceError` (default 25).
    stagnation_level : float
        Increments below this relative size that no longer halve count as converged.
    """

    tolerance: float = 1e-12
    max_iterations: int = 25
    stagnation_level: float = 1e-8


def solve_linear(matrix, rhs: np.ndarray) -> np.ndarray:
    """Solve ``matrix x = rhs``: dense LAPACK LU for small, SuperLU for large sparse systems."""
    if sp.issparse(matrix):
        if matrix.shape[0] > SPARSE_THRESHOLD:
            lu = spla.splu(matrix.tocsc(), permc_spec="COLAMD")
            return lu.solve(rhs)
        matrix = matrix.toarray()
    # LAPACK getrf/getrs directly: the scipy.linalg wrappers cost several times more at the
    # sizes of small multibody systems (tens of unknowns).
    lu, piv, info = _getrf(matrix)
    if info != 0:
        raise np.linalg.LinAlgError(f"singular matrix (getrf info = {info})")
    x, info = _getrs(lu, piv, rhs)
    return x


def newton(residual_and_jacobian: Callable[[np.ndarray], tuple[np.ndarray, object]],
           x0: np.ndarray, blocks: list[slice], scales: list[float],
           options: NewtonOptions) -> tuple[np.ndarray, int, float]:
    """Solve R(x) = 0 from ``x0``.

    Parameters
    ----------
    residual_and_jacobian : callable
        ``x -> (R(x), DR(x))``; DR dense ndarray or scipy.sparse.
    blocks, scales : list
        Slices of x whose relative increments decide convergence, and the magnitude each
        block is compared with (a floor for blocks that may vanish).

    Returns
    -------
    x, iterations, residual norm at the accepted iterate.
    """
    x = x0.copy()
    previous = np.inf
    residual_norm = np.inf
    for iteration in range(1, options.max_iterations + 1):
        residual, jacobian = residual_and_jacobian(x)
        residual_norm = float(np.max(np.abs(residual))) if residual.size else 0.0
        if not np.isfinite(residual_norm):
            raise NewtonConvergenceError("residual is not finite", residual_norm, np.inf, iteration,
                                "the state blew up: reduce the step size")
        try:
            delta = solve_linear(jacobian, -residual)
        except (np.linalg.LinAlgError, RuntimeError) as exc:
            raise NewtonConvergenceError(f"singular Newton matrix ({exc})", residual_norm, np.inf,
                                iteration, "singular configuration or redundant constraints; "
                                "check model.redundancies") from exc
        if not np.all(np.isfinite(delta)):
            raise NewtonConvergenceError("Newton increment is not finite", residual_norm, np.inf,
                                iteration, "singular Newton matrix: singular configuration, "
                                "redundant constraints, or a too large step")
        x += delta
        increment = max((float(np.max(np.abs(delta[b]))) / max(s, float(np.max(np.abs(x[b]))))
                         if delta[b].size else 0.0) for b, s in zip(blocks, scales))
        if increment <= options.tolerance:
            return x, iteration, residual_norm
        if increment <= options.stagnation_level and increment > 0.5 * previous:
            return x, iteration, residual_norm
        previous = increment
    raise NewtonConvergenceError(
        f"Newton did not converge in {options.max_iterations} iterations (last relative "
        f"increment {increment:.3e}, residual {residual_norm:.3e})", residual_norm, increment,
        options.max_iterations, "reduce the step size or raise max_iterations")
