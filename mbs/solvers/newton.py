"""Newton's method shared by the implicit schemes.

Each scheme supplies its residual and analytic Jacobian assembled from Model pieces. The linear
algebra is dense LAPACK (getrf/getrs called directly) for small systems and SuperLU
(scipy.sparse.linalg.splu, COLAMD ordering — measured fastest on chains, e.g. 53 ms against 55
for MMD_ATA and 8 s for MMD_AT_PLUS_A at 42 000 unknowns) for large ones, chosen by size.

Convergence: after each update the increments of the blocks listed in ``blocks`` are compared
with ``tolerance`` times the block's magnitude. Because Newton converges quadratically, the
iterate after an increment of relative size 1e-12 is exact to round-off, which is what the
energy-momentum scheme needs to conserve energy to ~1e-15 (with a tolerance of 1e-9 it would
conserve only to ~1e-9: the scheme is exact only at the solution of its equations). When the
increments of exact-Jacobian iterations stop decreasing at round-off level (stagnation below
``stagnation_level``) the iteration is also accepted.

Simplified Newton (``NewtonOptions(simplified=True)``): the factorised Jacobian is kept across
iterations and steps and rebuilt only when the contraction of the increments is slower than
``contraction`` (or the iteration diverges), so most iterations cost one residual and one
back-substitution. Convergence is then linear, so the stagnation rule is not used with a stale
Jacobian and the tolerance test alone decides.
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
    simplified : bool or None
        Reuse the factorised Jacobian across iterations and steps (see module doc). None
        (default) chooses it for models with more than 48 coordinates, where factorisation
        dominates (``mbs.solvers.base.SIMPLIFIED_NEWTON_ABOVE``). A run resumed from a stream
        then reproduces the streamed run (the Jacobian is rebuilt at every flush), not a run
        without streaming, bitwise.
    contraction : float
        With ``simplified``, rebuild the Jacobian when an increment is larger than this
        fraction of the previous one.
    """

    tolerance: float = 1e-12
    max_iterations: int = 25
    stagnation_level: float = 1e-8
    simplified: bool | None = None
    contraction: float = 0.25


class Factorization:
    """LU factors of a Newton matrix: dense LAPACK or SuperLU."""

    def __init__(self, matrix):
        if isinstance(matrix, np.ndarray):  # hot path of small models: straight to LAPACK
            self._sparse = None
            self._lu, self._piv, info = _getrf(matrix)
            if info != 0:
                raise np.linalg.LinAlgError(f"singular matrix (getrf info = {info})")
            return
        if sp.issparse(matrix) and matrix.shape[0] > SPARSE_THRESHOLD:
            self._sparse = spla.splu(matrix.tocsc(), permc_spec="COLAMD")
            return
        self._sparse = None
        dense = matrix.toarray() if sp.issparse(matrix) else matrix
        # LAPACK getrf/getrs directly: the scipy.linalg wrappers cost several times more at
        # the sizes of small multibody systems (tens of unknowns).
        self._lu, self._piv, info = _getrf(dense)
        if info != 0:
            raise np.linalg.LinAlgError(f"singular matrix (getrf info = {info})")

    def solve(self, rhs: np.ndarray) -> np.ndarray:
        if self._sparse is not None:
            return self._sparse.solve(rhs)
        return _getrs(self._lu, self._piv, rhs)[0]


def solve_linear(matrix, rhs: np.ndarray) -> np.ndarray:
    """Solve ``matrix x = rhs``: dense LAPACK LU for small, SuperLU for large sparse systems."""
    return Factorization(matrix).solve(rhs)


class NewtonState:
    """What a solver keeps between steps for simplified Newton: the last factorisation."""

    def __init__(self):
        self.factorization: Factorization | None = None
        self.factorizations = 0


def newton(system: Callable[..., tuple[np.ndarray, object]], x0: np.ndarray,
           blocks: list[slice], scales: list[float], options: NewtonOptions,
           state: NewtonState | None = None, simplified: bool = False
           ) -> tuple[np.ndarray, int, float]:
    """Solve R(x) = 0 from ``x0``.

    Parameters
    ----------
    system : callable
        ``system(x)`` returns ``(R(x), DR(x))``; ``system(x, False)`` may return
        ``(R(x), None)`` (used by simplified Newton to skip the Jacobian).
    blocks, scales : list
        Slices of x whose relative increments decide convergence, and the magnitude each
        block is compared with (a floor for blocks that may vanish).
    state : NewtonState, optional
        Keeps the factorisation between calls when ``simplified``.

    Returns
    -------
    x, iterations, residual norm at the accepted iterate.
    """
    x = x0.copy()
    previous = np.inf
    residual_norm = np.inf
    increment = np.inf
    state = state if state is not None else NewtonState()
    factorization = state.factorization if simplified else None
    for iteration in range(1, options.max_iterations + 1):
        fresh = factorization is None
        if fresh:
            residual, jacobian = system(x)
        else:
            residual, _ = system(x, False)
        residual_norm = float(abs(residual).max()) if residual.size else 0.0
        if not np.isfinite(residual_norm):
            raise NewtonConvergenceError("residual is not finite", residual_norm, np.inf,
                                         iteration, "the state blew up: reduce the step size")
        if fresh:
            try:
                factorization = Factorization(jacobian)
                state.factorizations += 1
            except (np.linalg.LinAlgError, RuntimeError) as exc:
                raise NewtonConvergenceError(
                    f"singular Newton matrix ({exc})", residual_norm, np.inf, iteration,
                    "singular configuration or redundant constraints; check "
                    "model.redundancies") from exc
        delta = factorization.solve(-residual)
        if not np.all(np.isfinite(delta)):
            raise NewtonConvergenceError("Newton increment is not finite", residual_norm, np.inf,
                                         iteration, "singular Newton matrix: singular "
                                         "configuration, redundant constraints, or a too large "
                                         "step")
        x += delta
        increment = max((float(abs(delta[b]).max()) / max(s, float(abs(x[b]).max()))
                         if delta[b].size else 0.0) for b, s in zip(blocks, scales))
        if increment <= options.tolerance:
            state.factorization = factorization if simplified else None
            return x, iteration, residual_norm
        if fresh and increment <= options.stagnation_level and increment > 0.5 * previous:
            state.factorization = factorization if simplified else None
            return x, iteration, residual_norm
        if not simplified or increment > options.contraction * previous:
            factorization = None  # exact Newton, or a stale Jacobian that contracts too slowly
        previous = increment
    state.factorization = None
    raise NewtonConvergenceError(
        f"Newton did not converge in {options.max_iterations} iterations (last relative "
        f"increment {increment:.3e}, residual {residual_norm:.3e})", residual_norm, increment,
        options.max_iterations, "reduce the step size or raise max_iterations")
