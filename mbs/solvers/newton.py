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

import math
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
    refactor_above : float
        Exact Newton refactorises the Jacobian only while the last relative increment is
        above this; below it the previous factorisation is reused. The iteration then
        contracts by about that increment per step (1e-4 -> 1e-8 -> 1e-12 ...), so the
        accepted iterate is off by about refactor_above * tolerance = 1e-16, i.e. exact to
        round-off like with fresh Jacobians (measured on the heavy top: 2.7 instead of 4 LU
        factorisations per step, energy still to 1e-14 over 1000 steps; 1e-2 would leave
        ~1e-14 per step, visible as 4e-13 drift over 1000 steps).
    """

    tolerance: float = 1e-12
    max_iterations: int = 25
    stagnation_level: float = 1e-8
    simplified: bool | None = None
    contraction: float = 0.25
    refactor_above: float = 1e-4


class Factorization:
    """LU factors of a Newton matrix: dense LAPACK or SuperLU.

    ``identity_block = (rows, cols, alpha)`` says that ``matrix[rows, cols] = alpha I`` (the
    p-block of the energy-momentum and GGL steps, e.g. -1/2 I in (84a)): large sparse
    matrices are then factorised through the Schur complement on that block, which removes
    those unknowns from the sparse LU (measured on a 1000-body chain: 42 000 -> 30 000
    unknowns, factorisation 60 -> 21 ms, solve 3.8 -> 2.5 ms).
    """

    def __init__(self, matrix, identity_block: tuple[slice, slice, float] | None = None):
        self._block = None
        if isinstance(matrix, np.ndarray):  # hot path of small models: straight to LAPACK
            self._sparse = None
            self._lu, self._piv, info = _getrf(matrix)
            if info != 0:
                raise np.linalg.LinAlgError(f"singular matrix (getrf info = {info})")
            return
        if sp.issparse(matrix) and matrix.shape[0] > SPARSE_THRESHOLD:
            if identity_block is not None:
                self._factor_condensed(sp.csr_matrix(matrix), *identity_block)
                return
            self._sparse = spla.splu(matrix.tocsc(), permc_spec="COLAMD")
            return
        self._sparse = None
        dense = matrix.toarray() if sp.issparse(matrix) else matrix
        # LAPACK getrf/getrs directly: the scipy.linalg wrappers cost several times more at
        # the sizes of small multibody systems (tens of unknowns).
        self._lu, self._piv, info = _getrf(dense)
        if info != 0:
            raise np.linalg.LinAlgError(f"singular matrix (getrf info = {info})")

    def _factor_condensed(self, matrix: sp.csr_matrix, rows: slice, cols: slice,
                          alpha: float) -> None:
        size = matrix.shape[0]
        other_rows = np.r_[0:rows.start, rows.stop:size]
        other_cols = np.r_[0:cols.start, cols.stop:size]
        by_columns = matrix.tocsc()
        coupling_in = by_columns[:, cols][other_rows].tocsr()       # J[R', C]
        coupling_out = matrix[rows][:, other_cols].tocsr()          # J[R, C']
        schur = by_columns[:, other_cols][other_rows] - (coupling_in @ coupling_out) / alpha
        # COLAMD measured fastest over whole runs of the 1000-body chain (46.5 ms per step
        # against 50-52 ms with MMD_ATA and threshold pivoting 0.1, although the latter solves
        # faster with the first step's matrix).
        self._sparse = spla.splu(schur.tocsc(), permc_spec="COLAMD")
        self._block = (rows, cols, alpha, other_rows, other_cols, coupling_in, coupling_out)

    def solve(self, rhs: np.ndarray) -> np.ndarray:
        if self._block is not None:
            rows, cols, alpha, other_rows, other_cols, coupling_in, coupling_out = self._block
            out = np.empty_like(rhs)
            rhs_block = rhs[rows]
            reduced = self._sparse.solve(rhs[other_rows] - (coupling_in @ rhs_block) / alpha)
            out[other_cols] = reduced
            out[cols] = (rhs_block - coupling_out @ reduced) / alpha
            return out
        if self._sparse is not None:
            return self._sparse.solve(rhs)
        return _getrs(self._lu, self._piv, rhs)[0]


def solve_linear(matrix, rhs: np.ndarray) -> np.ndarray:
    """Solve ``matrix x = rhs``: dense LAPACK LU for small, SuperLU for large sparse systems."""
    return Factorization(matrix).solve(rhs)


_SEGMENTS: dict[tuple, tuple[np.ndarray, slice]] = {}


def _segments(blocks: list[slice], scales: list[float]) -> tuple[np.ndarray, np.ndarray, slice]:
    """Non-empty convergence blocks as segments of x[lead] (per-block maxima by one reduceat);
    cached per block layout since every step asks for the same one."""
    key = tuple((b.start, b.stop) for b in blocks)
    cached = _SEGMENTS.get(key)
    if cached is None:
        kept = [b for b in blocks if b.stop > b.start]
        if any(a.stop != b.start for a, b in zip(kept, kept[1:])):
            raise ValueError("newton: convergence blocks must be contiguous and in order")
        lead = slice(kept[0].start if kept else 0, kept[-1].stop if kept else 0)
        starts = np.array([b.start - lead.start for b in kept], dtype=np.intp)
        cached = _SEGMENTS[key] = (starts, lead)
    starts, lead = cached
    floors = np.array([sc for b, sc in zip(blocks, scales) if b.stop > b.start], dtype=float)
    return starts, floors, lead


class NewtonState:
    """What a solver keeps between steps for simplified Newton: the last factorisation."""

    def __init__(self):
        self.factorization: Factorization | None = None
        self.factorizations = 0


def newton(system: Callable[..., tuple[np.ndarray, object]], x0: np.ndarray,
           blocks: list[slice], scales: list[float], options: NewtonOptions,
           state: NewtonState | None = None, simplified: bool = False,
           identity_block: tuple[slice, slice, float] | None = None
           ) -> tuple[np.ndarray, int, float]:
    """Solve R(x) = 0 from ``x0``.

    Parameters
    ----------
    system : callable
        ``system(x)`` returns ``(R(x), DR(x))``; ``system(x, False)`` may return
        ``(R(x), None)`` (used by simplified Newton to skip the Jacobian).
    blocks, scales : list
        Slices of x whose relative increments decide convergence, and the magnitude each
        block is compared with (a floor for blocks that may vanish): the relative increment
        of a block is max |dx_b| / max(scale_b, max |x_b|). Blocks must be contiguous and
        in order.
    state : NewtonState, optional
        Keeps the factorisation between calls when ``simplified``.
    identity_block : (rows, cols, alpha), optional
        A block of the Jacobian known to be alpha I (see :class:`Factorization`).

    Returns
    -------
    x, iterations, residual norm at the accepted iterate.
    """
    x = x0.copy()
    state = state if state is not None else NewtonState()
    segment_starts, floors, lead = _segments(blocks, scales)
    previous = np.inf
    residual_norm = np.inf
    increment = np.inf
    factorization = state.factorization if simplified else None
    for iteration in range(1, options.max_iterations + 1):
        fresh = factorization is None
        if fresh:
            residual, jacobian = system(x)
        else:
            residual, _ = system(x, False)
        # One dot product detects NaN/inf (and overflow) without a pass over |R|.
        if not math.isfinite(residual @ residual):
            residual_norm = float(np.abs(residual).max())
            raise NewtonConvergenceError("residual is not finite", residual_norm, np.inf,
                                         iteration, "the state blew up: reduce the step size")
        if fresh:
            try:
                factorization = Factorization(jacobian, identity_block)
                state.factorizations += 1
            except (np.linalg.LinAlgError, RuntimeError) as exc:
                raise NewtonConvergenceError(
                    f"singular Newton matrix ({exc})", float(np.abs(residual).max()), np.inf,
                    iteration, "singular configuration or redundant constraints; check "
                    "model.redundancies") from exc
        delta = factorization.solve(-residual)
        if not math.isfinite(delta @ delta):
            raise NewtonConvergenceError("Newton increment is not finite",
                                         float(np.abs(residual).max()), np.inf,
                                         iteration, "singular Newton matrix: singular "
                                         "configuration, redundant constraints, or a too large "
                                         "step")
        x += delta
        # relative increment per block: max|dx_b| / max(scale_b, max|x_b|)
        increment = (float((np.maximum.reduceat(np.abs(delta[lead]), segment_starts)
                            / np.maximum(floors, np.maximum.reduceat(np.abs(x[lead]),
                                                                      segment_starts))).max())
                     if floors.size else 0.0)
        if (increment <= options.tolerance
                or (fresh and increment <= options.stagnation_level
                    and increment > 0.5 * previous)):
            state.factorization = factorization if simplified else None
            return x, iteration, float(np.abs(residual).max()) if residual.size else 0.0
        if (increment > options.contraction * previous
                or not (simplified or increment <= options.refactor_above)):
            # a stale Jacobian that contracts too slowly, or exact Newton still far from the
            # solution; close to it the last factorisation is good enough (refactor_above)
            factorization = None
        previous = increment
    state.factorization = None
    residual_norm = float(np.abs(residual).max()) if residual.size else 0.0
    raise NewtonConvergenceError(
        f"Newton did not converge in {options.max_iterations} iterations (last relative "
        f"increment {increment:.3e}, residual {residual_norm:.3e})", residual_norm, increment,
        options.max_iterations, "reduce the step size or raise max_iterations")
