"""Newton's method shared by the implicit schemes.

Each scheme supplies its residual and analytic Jacobian assembled from Model pieces. The linear
algebra is dense LAPACK (getrf/getrs called directly) for small systems and SuperLU
(scipy.sparse.linalg.splu, COLAMD ordering, the fastest on chains) for large ones, chosen by
size.

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
back-substitution. Convergence is then linear, so with a stale Jacobian the stagnation rule is
not used, and an increment below the tolerance is accepted only once the iterate's estimated
error is at round-off (:func:`stale_iterate_exact`); a contraction too slow to get there within
the iterations left (:func:`stale_cannot_finish`) also rebuilds the Jacobian.

Large sparse Newton matrices with an identity block (the p-block of the EM and GGL steps) are
condensed to the Schur complement S on that block (:class:`Factorization`). With numba
installed the condensed path runs compiled kernels: S is assembled on index arrays computed once
per Jacobian pattern, factorised by SuperLU once and then refactorised on SuperLU's pivot order
and factor patterns (falling back to SuperLU when a pivot degrades or new fill appears), and
each solve is one compiled pass. Without numba the same path runs on SciPy.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla
from scipy.linalg import lapack

from mbs.errors import ModelError
from mbs.validation import is_integer

#: Unknowns above which sparse LU is used.
SPARSE_THRESHOLD = 400

_getrf = lapack.dgetrf
_getrs = lapack.dgetrs

#: Models with more coordinates use simplified Newton by default: from about this size on,
#: reusing the factorisation costs less than the extra iterations it needs.
SIMPLIFIED_NEWTON_ABOVE = 48


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
        Iterations before :class:`NewtonConvergenceError` (default 12). From the
        predictor Newton converges in 2-4 iterations; a step that needs more than 12 starts
        outside the region of quadratic convergence (too large a step) or sits at a
        near-singular configuration, and :func:`mbs.simulate` then redoes it as sub-steps
        (its default ``on_failure="refine"``), which is cheaper and keeps the trajectory
        on its branch through singular positions of mechanisms.
    stagnation_level : float
        With a fresh Jacobian, increments below this relative size (default 1e-10) that no
        longer halve count as converged without a residual test: they stall at the
        conditioning of the Newton matrix times round-off. Higher levels also catch the slow
        (linear) contraction of the unknowns of a light body that the blocks' sizes hide
        (a 1e-8 kg link between 1 kg links contracts by 0.52 per iteration at 4e-9), and
        accept it unconverged; above this level a stalled iteration needs its residual at
        round-off (``stall_level``).
    estimate_level : float
        When positive, the iteration also stops when the estimated relative error of the
        current iterate, theta / (1 - theta) times the last increment with theta the ratio of
        the last two increments (:func:`estimated_error`), is below this. The tolerance test
        alone asks for one more iteration to see an increment below 1e-12 when the
        increments fall as 1e-6, 1e-12; this test saves that iteration at the same accuracy
        (constrained Lobatto's defaults set 1e-15). 0 (default) turns the test off: the
        energy of the energy-momentum scheme is exact only for the exact solution of its step
        equations, and stopping at an estimated error lets it drift above round-off.
    stall_level : float
        Near a singular configuration the Newton matrix is ill-conditioned and the increments
        stall at about (condition number) x (round-off), above the tolerance, while the
        residual is already at round-off. So do they at an equilibrium, where the momenta
        are tiny and the forces cancel: the increments of p are round-off of the force terms
        but large against |p|. When the relative increment is below this level (default 1:
        any stalled iteration) and no longer halves, the residual is compared with the size
        of the terms it is made of, row by row (|R_i| against sum_j |dR_i/dz_j| |z_j| over
        the unknowns and, for model-evaluated equations, the step data: a stage scheme's
        constraint rows at rest sum terms of the size of the positions): at
        :data:`ROUNDOFF_RESIDUAL` or below the iterate is accepted, since no further
        iteration can improve it.
    simplified : bool or None
        Reuse the factorised Jacobian across iterations and steps (see module doc). None
        (default) chooses it for models with more than 48 coordinates, where factorisation
        dominates (:data:`SIMPLIFIED_NEWTON_ABOVE`). Its iterates converge linearly, so
        once an increment passes ``tolerance`` the iteration goes on until the estimated
        error is at round-off (:func:`stale_iterate_exact`): the energy-momentum scheme then
        conserves energy to round-off on large models too. A contraction too slow to get
        there within ``max_iterations`` rebuilds the Jacobian at once
        (:func:`stale_cannot_finish`). A step whose simplified iteration
        does not converge is solved again from its guess with exact Newton before it counts
        as failed (``Solver._solve_system``). A run resumed from a stream
        then reproduces the streamed run (the Jacobian is rebuilt at every flush), not a run
        without streaming, bitwise.
    contraction : float
        With ``simplified``, rebuild the Jacobian when an increment is larger than this
        fraction of the previous one.
    refactor_above : float
        Exact Newton refactorises the Jacobian only while the last relative increment is
        above this (default 1e-5); below it the previous factorisation is reused. The
        iteration then contracts by about that increment per step (1e-5 -> 1e-10 -> 1e-15
        ...), so the accepted iterate is off by at most about refactor_above * tolerance =
        1e-17 relative, below round-off. The error is systematic (it has the same sign from
        step to step), so it shows as a slow linear drift of the energy when it is not that
        small: larger values let that drift grow, smaller ones cost extra factorisations.
    """

    tolerance: float = 1e-12
    max_iterations: int = 12
    stagnation_level: float = 1e-10
    estimate_level: float = 0.0
    stall_level: float = 1.0
    simplified: bool | None = None
    contraction: float = 0.25
    refactor_above: float = 1e-5

    def __post_init__(self):
        # checked when created: a wrong type would otherwise surface inside the first step
        iterations = self.max_iterations
        if not is_integer(iterations) or iterations < 1:
            raise ModelError(f"NewtonOptions: max_iterations must be an integer >= 1, got "
                             f"{iterations!r}")
        self.max_iterations = int(iterations)
        for name in ("tolerance", "stagnation_level", "estimate_level", "stall_level",
                     "contraction", "refactor_above"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float, np.floating,
                                                                 np.integer)) \
                    or not 0.0 <= value < math.inf:
                raise ModelError(f"NewtonOptions: {name} must be a finite number >= 0, got "
                                 f"{value!r}")
            setattr(self, name, float(value))
        if not 0.0 < self.tolerance < 1.0:
            raise ModelError(f"NewtonOptions: tolerance must be in (0, 1), got "
                             f"{self.tolerance!r}")
        if self.simplified not in (None, True, False):
            raise ModelError(f"NewtonOptions: simplified must be None, True or False, got "
                             f"{self.simplified!r}")


def _kernel_index(array: np.ndarray) -> np.ndarray:
    """An index array for the numba kernels: unsigned 32-bit where it fits, because numba
    checks signed indices for negative wraparound, which slows every indexed access."""
    array = np.asarray(array)
    return array.astype(np.uint32) if array.size == 0 or array.max() < 2**32 else array


def _sorted_unique(keys: np.ndarray) -> np.ndarray:
    """``np.unique(keys)`` by sorting: on large key arrays it is much faster than numpy 2's
    hash-based unique."""
    keys = np.sort(keys)
    return keys[np.r_[True, keys[1:] != keys[:-1]]] if keys.size else keys


class _SchurPattern:
    """Index arrays that assemble the condensed matrix of a fixed Jacobian pattern.

    For ``J[R, C] = alpha I`` the unknowns of C are eliminated::

        S = J[R', C'] - J[R', C] J[R, C'] / alpha,

    (R', C': the other rows and columns). Every entry of S is a gathered entry of J minus a
    sum of products of two entries of J, always on the same positions of ``J.data`` while the
    pattern is fixed, so the positions are found once and each factorisation only gathers and
    sums, much faster than sparse slicing and a sparse product.

    Parameters
    ----------
    matrix : scipy.sparse.csr_matrix
        A matrix with the pattern (its values are not used).
    rows, cols : slice
        R and C, of equal length.
    """

    def __init__(self, matrix: sp.csr_matrix, rows: slice, cols: slice):
        size = matrix.shape[0]
        self.indptr, self.indices = matrix.indptr.copy(), matrix.indices.copy()
        self.rows, self.cols = rows, cols
        self.size = size - (rows.stop - rows.start)
        block = rows.stop - rows.start
        entry_row = np.repeat(np.arange(size), np.diff(matrix.indptr))
        entry_col = matrix.indices.astype(np.int64)
        position = np.arange(entry_row.size)
        in_rows = (entry_row >= rows.start) & (entry_row < rows.stop)
        in_cols = (entry_col >= cols.start) & (entry_col < cols.stop)
        # row / column index in S of an entry outside R / C
        reduced_row = np.where(entry_row < rows.start, entry_row, entry_row - block)
        reduced_col = np.where(entry_col < cols.start, entry_col, entry_col - block)
        direct = ~in_rows & ~in_cols
        coupling_in = ~in_rows & in_cols          # J[R', C], CSR order = by reduced row
        coupling_out = in_rows & ~in_cols         # J[R, C'], CSR order = by block row
        # J[R', C] as CSR over (reduced row, block column) and J[R, C'] over (block row,
        # reduced column); their values are gathered from J.data by ``*_source``.
        self.in_source = _kernel_index(position[coupling_in])
        self.in_indices = _kernel_index(entry_col[coupling_in] - cols.start)
        self.in_indptr = _kernel_index(np.searchsorted(reduced_row[coupling_in],
                                                       np.arange(self.size + 1)))
        self.out_source = _kernel_index(position[coupling_out])
        self.out_indices = _kernel_index(reduced_col[coupling_out])
        self.out_indptr = _kernel_index(np.searchsorted(entry_row[coupling_out] - rows.start,
                                                        np.arange(block + 1)))
        # products J[r, c] J[c - C + R, c']: each entry of J[R', C] times the row of J[R, C']
        # whose block index is that entry's block column
        in_block = self.in_indices.astype(np.int64)
        out_indptr = self.out_indptr.astype(np.int64)
        counts = out_indptr[in_block + 1] - out_indptr[in_block]
        pair_in = np.repeat(np.arange(in_block.size), counts)
        pair_out = (np.repeat(out_indptr[in_block], counts)
                    + np.arange(pair_in.size) - np.repeat(np.cumsum(counts) - counts, counts))
        pair_row = reduced_row[coupling_in][pair_in]
        pair_col = self.out_indices[pair_out].astype(np.int64)
        # S in CSC (what SuperLU factorises) with sorted row indices
        direct_keys = reduced_col[direct] * self.size + reduced_row[direct]
        pair_keys = pair_col * self.size + pair_row
        keys = _sorted_unique(np.concatenate([direct_keys, pair_keys]))
        self.schur_indices = (keys % self.size).astype(np.int32)
        self.schur_indptr = np.searchsorted(keys // self.size,
                                            np.arange(self.size + 1)).astype(np.int32)
        self.direct_target = _kernel_index(np.searchsorted(keys, direct_keys))
        self.direct_source = _kernel_index(position[direct])
        # products sorted by target, so a reduceat sums each target's products
        pair_target = np.searchsorted(keys, pair_keys)
        order = np.argsort(pair_target, kind="stable")
        self.pair_in_source = self.in_source[pair_in[order]]
        self.pair_out_source = self.out_source[pair_out[order]]
        pair_target = pair_target[order]
        starts = np.flatnonzero(np.r_[True, pair_target[1:] != pair_target[:-1]])
        self.pair_starts = _kernel_index(starts[:pair_target.size])  # none without products
        self.pair_target = _kernel_index(pair_target[self.pair_starts])
        #: pivot orders and factor patterns of S (:class:`_StaticLU`) by the values of S
        #: they were made from: each run keeps its own (see :meth:`symbolic_for`), and runs
        #: that alternate (the sub-steps of a composition) find theirs again
        self.symbolics: dict[bytes, tuple[np.ndarray, _StaticLU]] = {}

    def symbolic_for(self, values: np.ndarray) -> _StaticLU:
        """The pivot order and factor patterns SuperLU chooses for S with ``values``
        (factorised on first use, then kept; the last :data:`_SYMBOLICS_KEPT`)."""
        for kept_values, symbolic in self.symbolics.values():
            # a run hands back the array it was given (``_StaticLU.values``): found without
            # hashing the values, which costs as much as a refactorisation on large chains
            if kept_values is values:
                return symbolic
        key = hashlib.blake2b(values.tobytes(), digest_size=16).digest()
        kept = self.symbolics.get(key)
        if kept is not None and np.array_equal(kept[0], values):
            return kept[1]
        lu = spla.splu(self.schur(values), permc_spec="COLAMD", panel_size=_PANEL_SIZE)
        symbolic = _StaticLU(lu, self.size, values.copy())
        if len(self.symbolics) >= _SYMBOLICS_KEPT:
            self.symbolics.pop(next(iter(self.symbolics)))
        self.symbolics[key] = (symbolic.values, symbolic)
        return symbolic

    def matches(self, matrix: sp.csr_matrix) -> bool:
        """Whether ``matrix`` has the pattern these index arrays were built for (compared
        by value: Jacobians are new matrices every time)."""
        return (np.array_equal(matrix.indptr, self.indptr)
                and np.array_equal(matrix.indices, self.indices))

    def values(self, data: np.ndarray, alpha: float) -> np.ndarray:
        """The values of S on its full pattern (zeros included) from the values ``data`` of
        a matrix with this pattern."""
        values = np.zeros(self.schur_indices.size)
        kernels = _kernels()
        if kernels is not None:
            kernels["schur_values"](data, self.direct_source, self.direct_target,
                                    self.pair_in_source, self.pair_out_source,
                                    self.pair_starts, self.pair_target, alpha, values)
        else:
            values[self.direct_target] = data[self.direct_source]
            if self.pair_target.size:
                products = np.add.reduceat(
                    data[self.pair_in_source] * data[self.pair_out_source], self.pair_starts)
                values[self.pair_target] -= products / alpha
        return values

    def schur(self, values: np.ndarray) -> sp.csc_matrix:
        """S with ``values`` (from :meth:`values`) as a CSC matrix without its zero entries.

        Zeros are dropped for SuperLU because the Jacobian of a chain holds many exact zeros
        (e.g. at a straight configuration) and COLAMD orders the stored pattern: with the
        zeros stored, the factors fill in more and the factorisation is slower.
        """
        # copies: eliminate_zeros compacts the arrays in place (values too, which the caller
        # goes on using)
        schur = sp.csc_matrix((values.copy(), self.schur_indices.copy(),
                               self.schur_indptr.copy()), shape=(self.size, self.size))
        schur.eliminate_zeros()
        return schur


class _StaticLU:
    """The pivot order of SuperLU's factors of S and their patterns, for factorising later
    matrices with the pattern of S without SuperLU (:func:`_refactor_kernel`).

    SuperLU's factorisation of a chain's S is nearly all overhead (column ordering, symbolic
    analysis, supernode bookkeeping for factors with a dozen entries per column); a
    left-looking factorisation on known patterns with known pivots costs a fraction of it.
    The patterns are SuperLU's numerical ones: entries that come out
    exactly zero are omitted (identical bodies make exact cancellations common; the
    structural patterns of the same order hold three times as many entries).
    """

    def __init__(self, lu: spla.SuperLU, size: int, values: np.ndarray):
        #: the values of S SuperLU factorised (what a checkpoint keeps of the pivot order)
        self.values = values
        lower, upper = lu.L.tocsc(), lu.U.tocsc()
        lower.sort_indices()
        upper.sort_indices()  # the refactorisation visits the rows of U in ascending order
        lower_column = np.repeat(np.arange(size), np.diff(lower.indptr))
        upper_column = np.repeat(np.arange(size), np.diff(upper.indptr))
        strict_lower = lower.indices > lower_column
        strict_upper = upper.indices < upper_column
        on_diagonal = upper.indices == upper_column
        if np.count_nonzero(on_diagonal) != size:
            raise np.linalg.LinAlgError("singular matrix (zero pivot in SuperLU's U)")
        self.perm_r = _kernel_index(lu.perm_r)
        self.perm_c = _kernel_index(lu.perm_c)
        inverse = np.empty(size, dtype=np.int64)
        inverse[lu.perm_c] = np.arange(size)
        self.inverse_perm_c = _kernel_index(inverse)
        self.lower_indptr = _kernel_index(np.r_[0, np.cumsum(
            np.bincount(lower_column[strict_lower], minlength=size))])
        self.lower_indices = _kernel_index(lower.indices[strict_lower])
        self.upper_indptr = _kernel_index(np.r_[0, np.cumsum(
            np.bincount(upper_column[strict_upper], minlength=size))])
        self.upper_indices = _kernel_index(upper.indices[strict_upper])
        #: SuperLU's factors as (strict L, strict U, diagonal of U)
        self.factors = (lower.data[strict_lower], upper.data[strict_upper],
                        upper.data[on_diagonal])

    def refactor(self, values: np.ndarray, pattern: _SchurPattern, kernel
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """(strict L, strict U, diagonal of U) of S with ``values`` in the pivot order and on
        the patterns of SuperLU's factors, or None when a pivot falls below
        :data:`REFACTOR_PIVOT_THRESHOLD` times its column or a value outside the patterns
        is more than round-off (:data:`REFACTOR_DROP_TOLERANCE`)."""
        size = pattern.size
        lower = np.empty(self.lower_indices.size)
        upper = np.empty(self.upper_indices.size)
        diagonal = np.empty(size)
        ok = kernel(pattern.schur_indptr, pattern.schur_indices, values, self.perm_r,
                    self.inverse_perm_c, self.lower_indptr, self.lower_indices,
                    self.upper_indptr, self.upper_indices, lower, upper, diagonal,
                    np.zeros(size), np.full(size, -1, dtype=np.int64),
                    np.empty(size, dtype=np.int64), REFACTOR_PIVOT_THRESHOLD,
                    REFACTOR_DROP_TOLERANCE)
        return (lower, upper, diagonal) if ok else None


#: A refactorisation keeps SuperLU's pivots while each is at least this fraction of the
#: largest entry below it (SuperLU's own choice had a ratio >= 1: partial pivoting). This is
#: threshold partial pivoting: each elimination step grows the entries by at most a factor
#: 1 + 1/threshold. The factors serve Newton's method, whose iterates are judged by the
#: exact residual: a less accurate solve shows as a slower contraction, which refreshes the
#: matrix as staleness does, while a pivot order kept longer saves SuperLU's analyses:
#: GGL-VI A on a falling chain of 1000 bodies needs 3 in 200 steps with 0.01, 10 with 0.1
#: (7 % of the run time).
REFACTOR_PIVOT_THRESHOLD = 0.01

#: A refactorisation may drop a value outside SuperLU's patterns up to this fraction of the
#: largest entry of its column of S; a larger one means the patterns changed and SuperLU
#: factorises anew, at a much higher cost. Such values are round-off of cancellations
#: that SuperLU computed as exactly zero, or entries that were exactly zero when the patterns
#: were taken (e.g. terms in gamma at its zero warm start, or another scheme's matrix: the
#: patterns are cached per Jacobian pattern). The factors serve simplified Newton, whose
#: matrices are off by O(h) anyway, so a relative 1e-8 costs nothing in convergence, while a
#: tolerance near round-off sends the GGL schemes back to SuperLU more often.
REFACTOR_DROP_TOLERANCE = 1e-8


def _refactor_kernel(schur_indptr, schur_indices, schur_values, perm_r, inverse_perm_c,
                     lower_indptr, lower_indices, upper_indptr, upper_indices, lower_values,
                     upper_values, diagonal, work, owner, outside, threshold,
                     drop):  # pragma: no cover - compiled by numba
    """Left-looking LU of ``Pr S Pc`` on fixed factor patterns with fixed pivots (compiled by
    :func:`_kernels`). ``work`` (zeros) and ``owner`` (-1) have one slot per row; ``owner``
    marks the rows of the current column's patterns, ``outside`` collects the rows reached
    outside them. Returns False when a pivot is too small (or not finite) or a value
    outside the patterns exceeds ``drop`` times the column's largest entry of S."""
    size = diagonal.size
    for j in range(size):
        for t in range(upper_indptr[j], upper_indptr[j + 1]):
            owner[upper_indices[t]] = j
        owner[j] = j
        for t in range(lower_indptr[j], lower_indptr[j + 1]):
            owner[lower_indices[t]] = j
        n_outside = 0
        scale = 0.0
        column = inverse_perm_c[j]
        for e in range(schur_indptr[column], schur_indptr[column + 1]):
            value = schur_values[e]
            if value != 0.0:
                row = perm_r[schur_indices[e]]
                if owner[row] != j:
                    owner[row] = j
                    outside[n_outside] = row
                    n_outside += 1
                work[row] = value
                scale = max(scale, abs(value))
        for t in range(upper_indptr[j], upper_indptr[j + 1]):  # rows k < j, ascending
            k = upper_indices[t]
            value = work[k]
            work[k] = 0.0
            upper_values[t] = value
            if value != 0.0:
                for s in range(lower_indptr[k], lower_indptr[k + 1]):
                    row = lower_indices[s]
                    if owner[row] != j:
                        owner[row] = j
                        outside[n_outside] = row
                        n_outside += 1
                    work[row] -= lower_values[s] * value
        good = True
        for t in range(n_outside):
            row = outside[t]
            if abs(work[row]) > drop * scale:
                good = False
            work[row] = 0.0
        pivot = work[j]
        work[j] = 0.0
        largest = 0.0
        for t in range(lower_indptr[j], lower_indptr[j + 1]):
            largest = max(largest, abs(work[lower_indices[t]]))
        if not good or not abs(pivot) >= threshold * largest or pivot == 0.0:
            for t in range(lower_indptr[j], lower_indptr[j + 1]):  # leave work zeroed
                work[lower_indices[t]] = 0.0
            return False
        diagonal[j] = pivot
        for t in range(lower_indptr[j], lower_indptr[j + 1]):
            row = lower_indices[t]
            lower_values[t] = work[row] / pivot
            work[row] = 0.0
    return True


#: SuperLU's panel size for S: smaller than the default 12 because the columns of S hold
#: only about a dozen entries, so wide panels do not pay.
_PANEL_SIZE = 2


#: Pivot orders kept per Schur pattern (one per run that uses the pattern at a time).
_SYMBOLICS_KEPT = 8

#: The last few Schur patterns (a model's Jacobian pattern is the same at every
#: factorisation of every run; building the index arrays and the first SuperLU
#: factorisation, kept as ``pattern.symbolic``, is costly on large models).
_PATTERNS: list[_SchurPattern] = []
_PATTERNS_KEPT = 4


def _schur_pattern(matrix: sp.csr_matrix, rows: slice, cols: slice) -> _SchurPattern:
    """The cached :class:`_SchurPattern` of ``matrix`` (built on first use)."""
    for pattern in list(_PATTERNS):
        if pattern.rows == rows and pattern.cols == cols and pattern.matches(matrix):
            return pattern
    pattern = _SchurPattern(matrix, rows, cols)
    _PATTERNS.insert(0, pattern)
    del _PATTERNS[_PATTERNS_KEPT:]
    return pattern


def _schur_values_kernel(data, direct_source, direct_target, pair_in_source,
                         pair_out_source, pair_starts, pair_target, alpha,
                         values):  # pragma: no cover - compiled by numba
    """The values of S on its pattern (compiled by :func:`_kernels`; the numpy form is in
    :meth:`_SchurPattern.values`)."""
    for e in range(direct_source.size):
        values[direct_target[e]] = data[direct_source[e]]
    count = pair_in_source.size
    for g in range(pair_starts.size):
        stop = pair_starts[g + 1] if g + 1 < pair_starts.size else count
        total = 0.0
        for e in range(pair_starts[g], stop):
            total += data[pair_in_source[e]] * data[pair_out_source[e]]
        values[pair_target[g]] -= total / alpha


def _condensed_solve_kernel(rhs, out, row_start, col_start, block, alpha,
                            in_indptr, in_indices, in_values, out_indptr, out_indices,
                            out_values, lower_indptr, lower_indices, lower_values,
                            upper_indptr, upper_indices, upper_values, diagonal,
                            perm_r, perm_c, work):  # pragma: no cover - compiled by numba
    """``out = J^-1 rhs`` through the Schur complement and its SuperLU factors (compiled
    with numba by :func:`_kernels`; see :meth:`Factorization.solve` for the SciPy form).

    ``Pr S Pc = L U`` with L unit lower and U upper triangular: their entries off the
    diagonal in CSC, the diagonal of U in ``diagonal``.
    """
    size = work.size
    # reduced right-hand side rhs[R'] - J[R', C] rhs[R] / alpha, scattered by Pr
    for i in range(size):
        full = i if i < row_start else i + block
        coupled = 0.0
        for k in range(in_indptr[i], in_indptr[i + 1]):
            coupled += in_values[k] * rhs[row_start + in_indices[k]]
        work[perm_r[i]] = rhs[full] - coupled / alpha
    for j in range(size):  # L y = Pr b, column by column
        value = work[j]
        if value != 0.0:
            for k in range(lower_indptr[j], lower_indptr[j + 1]):
                i = lower_indices[k]
                if i > j:
                    work[i] -= lower_values[k] * value
    for j in range(size - 1, -1, -1):  # U z = y
        value = work[j] / diagonal[j]
        work[j] = value
        if value != 0.0:
            for k in range(upper_indptr[j], upper_indptr[j + 1]):
                i = upper_indices[k]
                if i < j:
                    work[i] -= upper_values[k] * value
    for i in range(size):  # x[C'] = Pc z
        out[i if i < col_start else i + block] = work[perm_c[i]]
    for k in range(block):  # x[C] = (rhs[R] - J[R, C'] x[C']) / alpha
        coupled = 0.0
        for t in range(out_indptr[k], out_indptr[k + 1]):
            column = out_indices[t]
            coupled += out_values[t] * out[column if column < col_start else column + block]
        out[col_start + k] = (rhs[row_start + k] - coupled) / alpha


#: Compile the sparse kernels with numba when it can be imported (tests switch this off to
#: cover the SciPy path).
USE_NUMBA = True
_KERNELS: dict | None = None


def _kernels() -> dict | None:
    """The numba-compiled kernels of this module (compiled once, cached on disk), or None
    without numba or with :data:`USE_NUMBA` off."""
    global _KERNELS
    if not USE_NUMBA:
        return None
    if _KERNELS is None:
        try:
            import numba
        except ImportError:  # pragma: no cover - numba is optional (pip install mbs[fast])
            _KERNELS = {}
        else:
            _KERNELS = {name: numba.njit(cache=True, nogil=True)(function) for name, function
                        in (("condensed_solve", _condensed_solve_kernel),
                            ("schur_values", _schur_values_kernel),
                            ("refactor", _refactor_kernel))}
    return _KERNELS or None


class Factorization:
    """LU factors of a Newton matrix: dense LAPACK or SuperLU.

    ``identity_block = (rows, cols, alpha)`` says that ``matrix[rows, cols] = alpha I`` (the
    p-block of the energy-momentum and GGL steps, e.g. -1/2 I in (84a)): large sparse
    matrices are then factorised through the Schur complement on that block, which removes
    those unknowns from the sparse LU and makes factorisation and solves faster. The Schur
    complement is assembled on a precomputed pattern (:class:`_SchurPattern`, cached per
    Jacobian pattern).
    With numba, S is factorised by SuperLU once per run and afterwards refactorised with
    SuperLU's pivot order on its factor patterns (:class:`_StaticLU`, far cheaper), and a
    solve is one compiled pass over the factors and the coupling blocks (faster than
    ``SuperLU.solve`` and sparse products).
    """

    def __init__(self, matrix, identity_block: tuple[slice, slice, float] | None = None,
                 symbolic_values: np.ndarray | None = None):
        # kept (a copy: systems reuse their Jacobian buffers) for checkpoints to refactorise
        self.matrix = matrix.copy()
        #: values of S whose pivot order the factors use (sparse condensed path with numba)
        self.symbolic_values = None
        self._block = None
        if isinstance(matrix, np.ndarray):  # hot path of small models: straight to LAPACK
            self._sparse = None
            self._lu, self._piv, info = _getrf(matrix)
            if info != 0:
                raise np.linalg.LinAlgError(f"singular matrix (getrf info = {info})")
            return
        if sp.issparse(matrix) and matrix.shape[0] > SPARSE_THRESHOLD:
            if identity_block is not None:
                self._factor_condensed(sp.csr_matrix(matrix), *identity_block,
                                       symbolic_values)
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
                          alpha: float, symbolic_values: np.ndarray | None = None) -> None:
        self.pattern = pattern = _schur_pattern(matrix, rows, cols)
        data = matrix.data
        coupling = (data[pattern.in_source], data[pattern.out_source])
        self._block = (rows, cols, alpha, coupling)
        self._compiled = None
        kernels = _kernels()
        if kernels is None:
            # COLAMD: over whole runs of large chains faster than MMD_ATA and than threshold
            # pivoting
            self._sparse = spla.splu(pattern.schur(pattern.values(data, alpha)),
                                     permc_spec="COLAMD", panel_size=_PANEL_SIZE)
            block = rows.stop - rows.start
            self._coupling = (  # J[R', C] and J[R, C'] for the solves
                sp.csr_matrix((coupling[0], pattern.in_indices.astype(np.int32),
                               pattern.in_indptr.astype(np.int32)), shape=(pattern.size, block)),
                sp.csr_matrix((coupling[1], pattern.out_indices.astype(np.int32),
                               pattern.out_indptr.astype(np.int32)), shape=(block, pattern.size)))
            return
        # With numba: SuperLU once per run (and whenever its pivots or patterns stop
        # fitting), then refactorisations with its pivot order (see _StaticLU). The factors
        # always come from the refactorisation, so that they depend only on the matrix and
        # the pivot order, which the run keeps (``symbolic_values``, also in checkpoints),
        # not on other runs that used the pattern.
        self._sparse = None
        values = pattern.values(data, alpha)
        if symbolic_values is None or symbolic_values.size != values.size:
            symbolic_values = values  # first of the run, or the Jacobian's pattern changed
        symbolic = pattern.symbolic_for(symbolic_values)
        factors = symbolic.refactor(values, pattern, kernels["refactor"])
        if factors is None:
            symbolic = pattern.symbolic_for(values)
            factors = symbolic.refactor(values, pattern, kernels["refactor"]) or \
                symbolic.factors
        self.symbolic_values = symbolic.values
        lower, upper, diagonal = factors
        self._compiled = (
            kernels["condensed_solve"],
            (rows.start, cols.start, rows.stop - rows.start, alpha,
             pattern.in_indptr, pattern.in_indices, coupling[0],
             pattern.out_indptr, pattern.out_indices, coupling[1],
             symbolic.lower_indptr, symbolic.lower_indices, lower,
             symbolic.upper_indptr, symbolic.upper_indices, upper, diagonal,
             symbolic.perm_r, symbolic.perm_c))

    def solve(self, rhs: np.ndarray) -> np.ndarray:
        """``matrix^-1 rhs``."""
        if self._block is not None:
            out = np.empty_like(rhs)
            if self._compiled is not None:
                kernel, arguments = self._compiled
                kernel(rhs, out, *arguments, np.empty(self.pattern.size))
                return out
            rows, cols, alpha, _ = self._block
            coupling_in, coupling_out = self._coupling
            rhs_block = rhs[rows]
            reduced = self._sparse.solve(np.concatenate([rhs[:rows.start], rhs[rows.stop:]])
                                         - (coupling_in @ rhs_block) / alpha)
            out[:cols.start] = reduced[:cols.start]
            out[cols.stop:] = reduced[cols.start:]
            out[cols] = (rhs_block - coupling_out @ reduced) / alpha
            return out
        if self._sparse is not None:
            return self._sparse.solve(rhs)
        return _getrs(self._lu, self._piv, rhs)[0]


#: Residual rows, relative to the size of their terms, that count as round-off: a few hundred
#: units of round-off cover the sums of the tens of terms of a row of a step's equations.
ROUNDOFF_RESIDUAL = 256.0 * np.finfo(float).eps


def residual_at_roundoff(residual: np.ndarray, jacobian, size: np.ndarray,
                         term_sizes: np.ndarray | None = None) -> bool:
    """Whether every row of ``residual`` is at round-off: |R_i| <= :data:`ROUNDOFF_RESIDUAL`
    times the size of the terms row i sums (see ``NewtonOptions.stall_level``). Those sizes
    are ``term_sizes`` when the system measures them (``ModelSystem.term_sizes``), else
    (|J| size)_i: what a change of the unknowns by round-off of their natural ``size`` can
    explain."""
    if not residual.size:
        return True
    magnitude = (term_sizes if term_sizes is not None
                 else abs(jacobian) @ size if sp.issparse(jacobian)
                 else np.abs(jacobian) @ size)
    return bool(np.all(np.abs(residual) <= ROUNDOFF_RESIDUAL * magnitude))


def estimated_error(increment: float, previous: float) -> float:
    """Estimated relative error of a Newton iterate from its relative ``increment`` and the
    ``previous`` one: theta / (1 - theta) * increment with the contraction factor
    theta = increment / previous (Hairer, Wanner, Solving Ordinary Differential Equations II
    (1996), IV.8, eq. (8.10)); inf unless the iteration contracts (the first iteration has
    ``previous`` = inf). Compiled unchanged into the numba kernel."""
    if not previous < math.inf or not increment < previous:
        return math.inf
    return increment * increment / (previous - increment)


#: The hint of a Newton iteration that ran out of iterations.
NEWTON_HINT = ("reduce the step size or raise max_iterations "
               "(newton=mbs.solvers.NewtonOptions(max_iterations=...))")

#: The estimated relative error (:func:`estimated_error`) below which an iterate of simplified
#: Newton is exact to round-off.
ROUNDOFF_ERROR = 4.0 * np.finfo(float).eps
#: The same for an approximate Jacobian (see :func:`converged`), whose error has the same
#: sign from step to step: on a disc held by a torsion spring, iterates accepted at
#: ROUNDOFF_ERROR still raised the energy by 3e-16 (relative) per step on average, at this
#: level by 2e-17 at 6 % more iterations.
APPROXIMATE_ERROR = 0.1 * np.finfo(float).eps


def stale_iterate_exact(increment: float, previous: float,
                        level: float = ROUNDOFF_ERROR) -> bool:
    """Whether an iterate of simplified Newton (a Jacobian kept from earlier steps) whose
    increment passed the tolerance is exact: its estimated error (:func:`estimated_error`)
    is at round-off (``level``), or the increments stalled there (no longer halve).

    Such a Jacobian contracts only linearly (theta ~ 0.1), so an increment at the tolerance
    leaves an error of theta / (1 - theta) times it, of the same sign from step to step: it
    would accumulate in the energy that the energy-momentum scheme conserves. Compiled
    unchanged into the numba kernel."""
    if not previous < math.inf:
        return False
    return (increment > 0.5 * previous
            or increment * increment <= level * (previous - increment))


def stale_cannot_finish(increment: float, previous: float, iterations_left: int) -> bool:
    """Whether simplified Newton, contracting by theta = increment / previous per iteration,
    would still not have an iterate exact to round-off (:func:`stale_iterate_exact`) after
    ``iterations_left`` more: increment theta^(k + 1) / (1 - theta) > ROUNDOFF_ERROR for
    k = ``iterations_left`` (the test of Hairer, Wanner, Solving Ordinary Differential
    Equations II (1996), IV.8, eq. (8.11), with round-off as the target). Rebuilding the
    Jacobian then costs less than running out of iterations and solving the step again.
    Compiled unchanged into the numba kernel."""
    if not previous < math.inf or not increment < previous:
        return False
    theta = increment / previous
    return increment * theta ** (iterations_left + 1) > ROUNDOFF_ERROR * (1.0 - theta)


def converged(increment: float, previous: float, fresh: bool, options: NewtonOptions,
              at_roundoff: Callable[[], bool], stale: bool = False,
              approximate: bool = False) -> bool:
    """The stopping rule of every Newton loop of the implicit schemes.

    Accept when the relative increment is at the tolerance (with a ``stale`` Jacobian of
    simplified Newton, or an ``approximate`` one -- the derivatives of a non-quadratic
    constraint's terms taken at the midpoint --, once the iterate is also exact:
    :func:`stale_iterate_exact`; both contract only linearly); or when
    the estimated error of the iterate (:func:`estimated_error`) is below ``estimate_level``;
    or when it stopped halving (``stalled``) at round-off level with a fresh Jacobian
    (``stagnation_level``); or when it stalled below ``stall_level`` and ``at_roundoff()``
    (evaluated only then) finds the residual at round-off, as at singular configurations (see
    :class:`NewtonOptions`).
    """
    stalled = increment > 0.5 * previous
    if stale and increment <= options.tolerance:
        return stale_iterate_exact(increment, previous)
    if approximate and increment <= options.tolerance:
        return stale_iterate_exact(increment, previous, APPROXIMATE_ERROR)
    return (increment <= options.tolerance
            or estimated_error(increment, previous) <= options.estimate_level
            or (fresh and stalled and increment <= options.stagnation_level)
            or (stalled and increment <= options.stall_level and at_roundoff()))


def natural_size(x: np.ndarray, segment_starts: np.ndarray, floors: np.ndarray,
                  lead: slice) -> np.ndarray:
    """|x| with every entry of a convergence block raised to the block's size max(floor_b,
    max |x_b|): a coordinate that happens to be zero still varies on the scale of its block."""
    size = np.abs(x)
    if floors.size:
        block = np.maximum(floors, np.maximum.reduceat(size[lead], segment_starts))
        counts = np.diff(np.r_[segment_starts, lead.stop - lead.start])
        size[lead] = np.repeat(block, counts)
    return size


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


def matrix_state(factorization: Factorization) -> dict:
    """A factorisation's Newton matrix as plain arrays (dense, or the CSR/CSC arrays exactly
    as stored: the same index order gives the same factorisation path and bits), with the
    values whose pivot order its sparse factors use."""
    matrix = factorization.matrix
    state = ({} if factorization.symbolic_values is None else
             {"newton_symbolic_values": factorization.symbolic_values.copy()})
    if isinstance(matrix, np.ndarray):
        return {**state, "newton_matrix": matrix.copy()}
    if matrix.format not in ("csr", "csc"):
        matrix = matrix.tocsr()
    return {**state, "newton_matrix_data": matrix.data.copy(),
            "newton_matrix_indices": matrix.indices.copy(),
            "newton_matrix_indptr": matrix.indptr.copy(),
            "newton_matrix_shape": np.array(matrix.shape),
            "newton_matrix_format": np.array(0 if matrix.format == "csr" else 1)}


def state_factorization(state: dict, identity_block) -> Factorization | None:
    """Inverse of :func:`matrix_state`: the same factorisation (None when ``state`` holds no
    matrix)."""
    matrix = _state_matrix(state)
    if matrix is None:
        return None
    symbolic = state.get("newton_symbolic_values")
    return Factorization(matrix, identity_block,
                         None if symbolic is None else np.asarray(symbolic, dtype=float))


def _state_matrix(state: dict):
    if "newton_matrix" in state:
        return np.asarray(state["newton_matrix"], dtype=float)
    if "newton_matrix_data" not in state:
        return None
    shape = tuple(int(v) for v in np.asarray(state["newton_matrix_shape"]))
    kind = sp.csc_matrix if int(np.asarray(state["newton_matrix_format"])) else sp.csr_matrix
    arrays = (np.asarray(state["newton_matrix_data"], dtype=float),
              np.asarray(state["newton_matrix_indices"]),
              np.asarray(state["newton_matrix_indptr"]))
    return kind(arrays, shape=shape)


class NewtonState:
    """What a solver keeps between steps for simplified Newton: the last factorisation, and
    the values of S whose pivot order the run's sparse factorisations use (None until the
    first: a run's pivot order comes from its own first matrix)."""

    def __init__(self):
        self.factorization: Factorization | None = None
        self.factorizations = 0
        self.symbolic_values: np.ndarray | None = None


def newton(system: Callable[..., tuple[np.ndarray, object]], x0: np.ndarray,
           blocks: list[slice], scales: list[float], options: NewtonOptions,
           state: NewtonState | None = None, simplified: bool = False,
           identity_block: tuple[slice, slice, float] | None = None,
           term_sizes: Callable[[np.ndarray, np.ndarray], np.ndarray] | None = None,
           approximate: bool = False) -> tuple[np.ndarray, int, float]:
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
    term_sizes : callable, optional
        ``term_sizes(x, size)``: per row, the size of the terms R sums at x, given the
        natural size of the unknowns (``ModelSystem.term_sizes``); the stall test compares
        the residual with it. Default: (|DR| size), which misses terms of the step data.
    approximate : bool
        The Jacobian is an approximation (see :func:`converged`): the iteration goes on until
        the iterate is exact to round-off, not only its increment small.

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
                factorization = Factorization(jacobian, identity_block,
                                              state.symbolic_values)
                state.factorizations += 1
                state.symbolic_values = factorization.symbolic_values
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
        if converged(increment, previous, fresh, options,
                     lambda x=x: _stalled_at_roundoff(system, term_sizes, x, natural_size(
                         x, segment_starts, floors, lead)),
                     stale=simplified and not fresh, approximate=approximate):
            state.factorization = factorization if simplified else None
            return x, iteration, float(np.abs(residual).max()) if residual.size else 0.0
        if increment > options.tolerance and (
                increment > options.contraction * previous
                or not (simplified or increment <= options.refactor_above)):
            # a stale Jacobian that contracts too slowly, or exact Newton still far from the
            # solution; close to it the last factorisation is good enough (refactor_above),
            # and below the tolerance it only takes the iterate to round-off
            factorization = None
        elif simplified and not fresh and stale_cannot_finish(
                increment, previous, options.max_iterations - iteration):
            factorization = None
        previous = increment
    state.factorization = None
    residual_norm = float(np.abs(residual).max()) if residual.size else 0.0
    raise NewtonConvergenceError(
        f"Newton did not converge in {options.max_iterations} iterations (last relative "
        f"increment {increment:.3e}, residual {residual_norm:.3e})", residual_norm, increment,
        options.max_iterations, NEWTON_HINT)


def _stalled_at_roundoff(system: Callable, term_sizes: Callable | None, x: np.ndarray,
                         size: np.ndarray) -> bool:
    """:func:`residual_at_roundoff` of ``system`` at ``x``, with its own term sizes if given."""
    return residual_at_roundoff(*system(x), size,
                                None if term_sizes is None else term_sizes(x, size))
