"""Optional compiled backend: Newton solves of many polynomial steps in one numba call.

The :class:`~mbs.backends.polynomial.QuadraticSystem` of a scheme is plain arrays, so its steps
can run in compiled code with no Python in the loop (:func:`_run_steps`, blocks of steps):

* the predictor (seed 003's simple or advanced guess, or the explicit momentum-balance guess of
  :meth:`mbs.engine.guess.ExplicitPredictor.state`);
* the step data folded into the equations, then per Newton iteration the residual and the
  Jacobian on its fixed sparsity pattern (one CSR tensor product), the constraint rows from the
  factored form;
* the Newton matrix, kept as its values on the fixed pattern, condensed on its alpha I
  momentum block (as :class:`mbs.engine.newton.Factorization` does for sparse models) with
  only the structural products (a pattern split made once, :func:`_condensation_plan`), and
  factorised by a small dense LU with partial pivoting that skips zero multipliers, reused
  while the increments are below ``refactor_above`` or, with simplified Newton (above 48
  coordinates), from step to step while it contracts; when the factors fill little of the
  matrix the triangular solves visit only their nonzeros (:func:`_compress_lu`); stopping
  rules as in :func:`mbs.engine.newton.newton`.

Terms the tensor form does not hold (potentials that are not linear in q, applied forces:
Python code) are evaluated between iterations: the Newton loop pauses after each iteration
(:data:`PAUSED`), the caller adds those terms at the new iterate and resumes it, so the
iteration, its stopping rules and factorisation reuse are the same. Such steps run one by one
(:meth:`CompiledSystem.solve`), the others in blocks.

It is used by ``backend="compiled"`` and falls back to the numpy polynomial path, with a
warning, when numba is not installed or for large sparse models.

numba compiles the kernels on first use (several seconds) and caches the machine code on disk
(``cache=True``), so the cost is paid once per machine; :func:`compile_seconds` reports what the
first call in this process took (well under a second when loaded from the cache).
"""

from __future__ import annotations

import time
from collections import namedtuple
from collections.abc import Callable

import numpy as np
import scipy.sparse as sp

from mbs.engine.defects import COEFFICIENT_TABLE
from mbs.engine.guess import FAR_ROOT_FLOOR, FAR_ROOT_ITERATIONS
from mbs.engine.newton import estimated_error as _estimated_error_python
from mbs.engine.newton import stale_cannot_finish as _stale_cannot_finish_python
from mbs.engine.newton import stale_iterate_exact as _stale_iterate_exact_python

try:  # optional dependency: pip install "mbs[fast]"
    import numba
except ImportError:  # pragma: no cover - exercised when numba is absent
    numba = None

if numba is not None:
    _jit = numba.njit(cache=True, nogil=True)
    # reassociation lets LLVM vectorise the dot products of the triangular solves; no
    # fast-math flag that assumes finite values (NaN/inf checks must stay)
    _jit_dots = numba.njit(cache=True, nogil=True, fastmath={"reassoc", "contract"})
else:  # pragma: no cover - the solvers never call the kernels without numba
    def _jit(function):
        return function

    _jit_dots = _jit

#: Outcome codes of the kernel; PAUSED: one iteration done, the caller adds the terms
#: evaluated in Python at the new iterate and calls again (see :meth:`CompiledSystem.solve`);
#: FAR_FROM_GUESS: converged farther from the explicit guess than the step moves
#: (:func:`mbs.engine.guess.far_from_guess`), left to the caller to redo.
(CONVERGED, RESIDUAL_NOT_FINITE, SINGULAR, INCREMENT_NOT_FINITE, NOT_CONVERGED, PAUSED,
 FAR_FROM_GUESS) = range(7)

_compile_seconds: float | None = None

#: :func:`mbs.engine.newton.estimated_error`, compiled for the kernels
_estimated_error = _jit(_estimated_error_python)
_stale_iterate_exact = _jit(_stale_iterate_exact_python)
_stale_cannot_finish = _jit(_stale_cannot_finish_python)


#: The arrays of a scheme's tensor form that :func:`_newton_step` reads (see
#: :class:`CompiledSystem`): D_dd by non-empty (equation, datum) rows; the Jacobian's
#: pattern (row starts, columns) with the pattern rows of D_xd that are not empty and the CSR
#: rows of D_xx; c, L_d (CSR tuple) and L_x on the pattern; the factored constraint rows.
QuadraticArrays = namedtuple("QuadraticArrays", (
    "tensor_dd_equation", "tensor_dd_datum", "tensor_dd_indptr", "tensor_dd_indices",
    "tensor_dd_data", "pattern_start", "tensor_xd_entry", "tensor_xd_indptr",
    "tensor_xd_indices", "tensor_xd_data", "pattern_col", "tensor_xx_indptr",
    "tensor_xx_indices", "tensor_xx_data", "constant", "linear_data", "linear_pattern",
    "override_rows", "uv_indptr", "uv_indices", "uv_data", "uv_from_data", "uv_const",
    "term_row", "term_scale", "row_constant"))
#: The split of the Newton matrix's pattern that condenses its alpha I block
#: (:func:`_condense`, :func:`_condensation_plan`), and whether the triangular solves visit
#: only the factors' nonzeros (:func:`_compress_lu`).
Condensation = namedtuple("Condensation", (
    "block_rows", "block_cols", "alpha", "other_rows", "other_cols", "direct_entry",
    "direct_target", "coupling_entry", "coupling_row", "coupling_block", "block_start",
    "block_col", "block_entry", "sparse_factors"))

#: The triangular solves visit the factors' nonzeros only when these fill less than this
#: fraction of the condensed matrix (on the sample Newton matrix), or, without a sample,
#: when the condensed matrix has more rows than :data:`SPARSE_FACTORS_ABOVE`. Below, the
#: dense solves (vectorised) are faster.
SPARSE_FACTORS_FILL = 0.15
SPARSE_FACTORS_ABOVE = 150
#: The stopping rules of :class:`mbs.engine.newton.NewtonOptions` as kernel arguments, and
#: whether the factorisation is kept across steps (simplified Newton).
NewtonLimits = namedtuple("NewtonLimits", (
    "tolerance", "stagnation", "estimate_level", "contraction", "refactor_above",
    "max_iterations", "simplified"))


def newton_limits(options, simplified: bool) -> NewtonLimits:
    """The kernel's :class:`NewtonLimits` of a :class:`~mbs.engine.newton.NewtonOptions`
    and the run's choice of simplified Newton."""
    return NewtonLimits(float(options.tolerance), float(options.stagnation_level),
                        float(options.estimate_level), float(options.contraction),
                        float(options.refactor_above), int(options.max_iterations),
                        bool(simplified))


def available() -> bool:
    """True when numba can be imported."""
    return numba is not None


def compile_seconds() -> float | None:
    """Wall time of the first kernel call in this process (compilation or cache load)."""
    return _compile_seconds


@_jit_dots
def _affine(matrix, x, offset, scale, out):
    """out = offset + scale * matrix @ x, without a BLAS call (whose dispatch costs more than
    the arithmetic at these sizes)."""
    for i in range(matrix.shape[0]):
        s = 0.0
        for j in range(matrix.shape[1]):
            s += matrix[i, j] * x[j]
        out[i] = offset[i] + scale * s


@_jit
def _affine_sparse(matrix, x, offset, out):
    """out = offset + matrix @ x for a CSR matrix given as (indptr, indices, data)."""
    indptr, indices, values = matrix
    for i in range(out.shape[0]):
        s = offset[i]
        for t in range(indptr[i], indptr[i + 1]):
            s += values[t] * x[indices[t]]
        out[i] = s


@_jit
def _lu_factor(a, pivots):
    """In-place LU with scaled partial pivoting of the C-ordered square matrix ``a`` (row
    swaps in ``pivots``); returns False when a pivot is zero. Row operations skip zero
    multipliers: Newton matrices of multibody steps are mostly zeros."""
    return _lu_factor_counted(a, pivots) >= 0


@_jit
def _lu_work(a):
    """Multiply-adds :func:`_lu_factor` spends on ``a`` (factorised in place; -1 when
    singular): the measure by which :class:`CompiledSystem` chooses the column order of the
    condensed matrix."""
    return _lu_factor_counted(a, np.empty(a.shape[0], dtype=np.int64))


@_jit
def _lu_factor_counted(a, pivots):
    """:func:`_lu_factor`, returning its multiply-adds (-1 for a zero pivot).

    The pivot of column k is the entry largest relative to the largest entry of its row
    in ``a`` (scaled partial pivoting): the rows of a step's Newton matrix differ in size by
    the masses and the unit of length (grams and millimetres against kilograms and metres,
    a light link next to a heavy one), and plain partial pivoting on such rows loses
    accuracy that the stopping test then mistakes for round-off."""
    n = a.shape[0]
    work = 0
    inverse_size = np.empty(n)
    for i in range(n):
        size = 0.0
        for j in range(n):
            size = max(size, abs(a[i, j]))
        inverse_size[i] = 1.0 / size if size > 0.0 else 1.0
    for k in range(n):
        pivot = k
        largest = abs(a[k, k]) * inverse_size[k]
        for i in range(k + 1, n):
            if abs(a[i, k]) * inverse_size[i] > largest:
                largest = abs(a[i, k]) * inverse_size[i]
                pivot = i
        pivots[k] = pivot
        if largest == 0.0 or not np.isfinite(largest):
            return -1
        if pivot != k:
            inverse_size[k], inverse_size[pivot] = inverse_size[pivot], inverse_size[k]
            for j in range(n):
                a[k, j], a[pivot, j] = a[pivot, j], a[k, j]
        inverse = 1.0 / a[k, k]
        for i in range(k + 1, n):
            factor = a[i, k]
            if factor != 0.0:
                factor *= inverse
                a[i, k] = factor
                work += n - k - 1
                for j in range(k + 1, n):
                    a[i, j] -= factor * a[k, j]
    return work


@_jit
def _apply_pivots(pivots, b):
    """The row swaps of :func:`_lu_factor` applied to ``b`` in order."""
    for k in range(b.shape[0]):
        if pivots[k] != k:
            b[k], b[pivots[k]] = b[pivots[k]], b[k]


@_jit_dots
def _lu_solve(a, pivots, b):
    """Solve with the factors of :func:`_lu_factor`, overwriting ``b``."""
    n = a.shape[0]
    _apply_pivots(pivots, b)
    for i in range(n):
        s = b[i]
        for j in range(i):
            s -= a[i, j] * b[j]
        b[i] = s
    for i in range(n - 1, -1, -1):
        s = b[i]
        for j in range(i + 1, n):
            s -= a[i, j] * b[j]
        b[i] = s / a[i, i]


@_jit
def _compress_lu(a, factors):
    """The nonzero entries of the LU factors in ``a`` (:func:`_lu_factor`) by rows into
    ``factors`` = (row_start, row_split, cols, vals): row i holds the multipliers of L at
    row_start[i] .. row_split[i] - 1 and the entries of U right of the diagonal up to
    row_start[i + 1] - 1, each in ascending column order. The fill of a Newton matrix's
    factors is small, so the triangular solves (:func:`_lu_solve_compressed`, once per
    Newton iteration) visit only these instead of n^2 entries."""
    row_start, row_split, cols, vals = factors
    n = a.shape[0]
    k = 0
    for i in range(n):
        row_start[i] = k
        for j in range(n):
            if j == i:
                row_split[i] = k
            elif a[i, j] != 0.0:
                cols[k] = j
                vals[k] = a[i, j]
                k += 1
    row_start[n] = k


@_jit
def _lu_solve_compressed(a, pivots, factors, b):
    """:func:`_lu_solve` with the factors' nonzeros from :func:`_compress_lu` (the diagonal
    of U from ``a``)."""
    row_start, row_split, cols, vals = factors
    n = b.shape[0]
    _apply_pivots(pivots, b)
    for i in range(n):
        s = b[i]
        for e in range(row_start[i], row_split[i]):
            s -= vals[e] * b[cols[e]]
        b[i] = s
    for i in range(n - 1, -1, -1):
        s = b[i]
        for e in range(row_split[i], row_start[i + 1]):
            s -= vals[e] * b[cols[e]]
        b[i] = s / a[i, i]


@_jit
def _condense(values, condensation, schur):
    """Schur complement S = J_oo - J_ob J_ao / alpha of the Newton matrix J on its block
    J_ab = alpha I (a: block rows, b: block columns, o: the others), see
    :class:`mbs.engine.newton.Factorization`, from the values of J on its fixed sparsity
    pattern (``values[p]`` = J at pattern entry p).

    The pattern is split once (:class:`CompiledSystem`): ``direct_*`` are the entries of J_oo
    with their flat position in S; ``coupling_*`` the entries of J_ob (row of S, block index k),
    sorted by (row, k); row k of J_ao is ``block_entry[block_start[k]:block_start[k + 1]]``
    with its columns of S in ``block_col``. Only structural products are formed, a fraction of
    a dense row update per coupling. ``condensation`` is
    :attr:`CompiledSystem.condensation`."""
    (_, _, alpha, _, _, direct_entry, direct_target, coupling_entry, coupling_row,
     coupling_block, block_start, block_col, block_entry, _) = condensation
    flat = schur.reshape(-1)
    flat[:] = 0.0
    for t in range(direct_entry.shape[0]):
        flat[direct_target[t]] = values[direct_entry[t]]
    inverse = 1.0 / alpha
    for t in range(coupling_entry.shape[0]):
        coupling = values[coupling_entry[t]]
        if coupling != 0.0:
            coupling *= inverse
            row = coupling_row[t]
            k = coupling_block[t]
            for e in range(block_start[k], block_start[k + 1]):
                schur[row, block_col[e]] -= coupling * values[block_entry[e]]


@_jit
def _condensed_solve(values, schur, pivots, factors, condensation, rhs, reduced, out):
    """Solve J out = rhs with the LU factors of the Schur complement of :func:`_condense`
    (same pattern split; their nonzeros in ``factors``, :func:`_compress_lu`)."""
    (block_rows, block_cols, alpha, other_rows, other_cols, _, _, coupling_entry,
     coupling_row, coupling_block, block_start, block_col, block_entry,
     sparse_factors) = condensation
    inverse = 1.0 / alpha
    for i in range(other_rows.shape[0]):
        reduced[i] = rhs[other_rows[i]]
    for t in range(coupling_entry.shape[0]):
        coupling = values[coupling_entry[t]]
        if coupling != 0.0:
            reduced[coupling_row[t]] -= coupling * inverse * rhs[block_rows[coupling_block[t]]]
    if sparse_factors:
        _lu_solve_compressed(schur, pivots, factors, reduced)
    else:
        _lu_solve(schur, pivots, reduced)
    for i in range(other_cols.shape[0]):
        out[other_cols[i]] = reduced[i]
    for k in range(block_rows.shape[0]):
        s = rhs[block_rows[k]]
        for e in range(block_start[k], block_start[k + 1]):
            s -= values[block_entry[e]] * reduced[block_col[e]]
        out[block_cols[k]] = s * inverse


@_jit
def _residual(x, c_step, l_step, quadratic, jac_values, factored, uv_step, residual,
              first_row):
    """R(x) = c + (L + D(x)/2) x into ``residual``; the values of the Jacobian L + D(x) on its
    pattern into ``jac_values`` when it is given (size > 0); constraint rows from the
    factored form. Only rows from ``first_row`` on are formed (0 for all of R).

    L and D live on the Jacobian's fixed sparsity pattern, sorted by row: row i holds the
    entries p = pattern_start[i] .. pattern_start[i + 1] - 1, in column pattern_col[p], with
    ``l_step[p]`` and row p of the CSR tensor (D(x)[p] = T[p] . x). A row is summed in a
    register, in the order of its entries. ``quadratic`` = (pattern_start, pattern_col, T's
    indptr, indices, data); ``factored`` = the constraint rows' factored form, as
    :attr:`CompiledSystem.override` without its data map and constant."""
    pattern_start, pattern_col, tensor_indptr, tensor_indices, tensor_data = quadratic
    override_rows, uv_indptr, uv_indices, uv_data, term_row, term_scale, row_constant = factored
    with_jacobian = jac_values.shape[0] > 0
    for row in range(first_row, c_step.shape[0]):
        total = c_step[row]
        for p in range(pattern_start[row], pattern_start[row + 1]):
            s = 0.0
            for k in range(tensor_indptr[p], tensor_indptr[p + 1]):
                s += tensor_data[k] * x[tensor_indices[k]]
            total += (l_step[p] + 0.5 * s) * x[pattern_col[p]]
            if with_jacobian:
                jac_values[p] = l_step[p] + s
        residual[row] = total
    if override_rows.shape[0] > 0:
        # constraint rows sum_t scale_t (u_t . v_t) + e from the factored form (rows
        # override_rows, term t adding to row term_row[t]); u (then v) are the first
        # (second) half of the affine vectors uv = U x + uv_step
        for k in range(row_constant.shape[0]):
            residual[override_rows[k]] = row_constant[k]
        half_terms = term_row.shape[0]
        for t in range(half_terms):
            dot = 0.0
            for c in range(3):
                u_row = 3 * t + c
                v_row = 3 * (t + half_terms) + c
                u = uv_step[u_row]
                for p in range(uv_indptr[u_row], uv_indptr[u_row + 1]):
                    u += uv_data[p] * x[uv_indices[p]]
                v = uv_step[v_row]
                for p in range(uv_indptr[v_row], uv_indptr[v_row + 1]):
                    v += uv_data[p] * x[uv_indices[p]]
                dot += u * v
            residual[term_row[t]] += term_scale[t] * dot


@_jit
def _newton_step(data, x, equations, segments, limits, condensation, constraint_row, work,
                 residual_out, shift_step):
    """Newton on R(x) = c + L x + 1/2 D(x) x = 0 at step data ``data`` (see polynomial.py),
    with the stopping rules and factorisation reuse of :func:`mbs.engine.newton.newton`.

    ``x`` holds the initial guess and is overwritten with the solution, both in the system's
    unknowns x + ``shift_step`` (zero unless the system is shifted, see
    :meth:`QuadraticSystemBuilder.build`; relative increments are measured against the
    unshifted x); ``residual_out``
    receives the constraint rows of R (rows from ``constraint_row`` on) at the accepted
    iterate, the other rows at the iterate before. ``work`` holds the scratch arrays of
    :func:`_newton_workspace`. Returns (code, iterations, residual
    max-norm, last relative increment, factorisations).

    Terms of R that the tensor form does not hold (potentials that are not linear in q,
    applied forces: evaluated in Python) enter through ``work``'s extra residual and extra
    Jacobian values (on the pattern): with ``state[3]`` set, the loop does one iteration per
    call, keeping its progress in ``state`` = (iterations done, last increment, fresh
    Jacobian, pausing, factorisation held) and returning PAUSED, so that the caller
    evaluates those terms at the new iterate; R then is the tensor form plus the extra
    terms. With ``limits.simplified`` the factorisation (flag ``state[4]``) is kept from
    step to step and renewed only when an increment is larger than ``contraction`` times
    the previous one, as :func:`mbs.engine.newton.newton` does.

    The argument groups: ``equations`` is :attr:`CompiledSystem.equations`; ``segments`` =
    (first index, stop index, floor) of each convergence block; ``limits`` is
    :class:`NewtonLimits`; ``condensation`` is :attr:`CompiledSystem.condensation`.
    """
    (tensor_dd_equation, tensor_dd_datum, tensor_dd_indptr, tensor_dd_indices, tensor_dd_data,
     pattern_start, tensor_xd_entry, tensor_xd_indptr, tensor_xd_indices, tensor_xd_data,
     pattern_col, tensor_xx_indptr, tensor_xx_indices, tensor_xx_data, constant, linear_data,
     linear_pattern, override_rows, uv_indptr, uv_indices, uv_data, uv_from_data, uv_const,
     term_row, term_scale, row_constant) = equations
    segment_lo, segment_hi, floors = segments
    (tolerance, stagnation, estimate_level, contraction, refactor_above, max_iterations,
     simplified) = limits
    quadratic = (pattern_start, pattern_col, tensor_xx_indptr, tensor_xx_indices,
                 tensor_xx_data)
    factored = (override_rows, uv_indptr, uv_indices, uv_data, term_row, term_scale,
                row_constant)
    n_eq = constant.shape[0]
    n_x = x.shape[0]
    (c_step, l_step, uv_step, jac_values, no_jacobian, schur, reduced, pivots, factors, step,
     extra_residual, extra_jacobian, state) = work
    sparse_factors = condensation.sparse_factors
    pausing = state[3] != 0.0
    first_iteration = int(state[0]) + 1 if pausing else 1
    if tensor_xd_entry.shape[0] == 0:
        l_step = linear_pattern  # no data in the Jacobian (VI-A in its shifted unknowns)
    if first_iteration == 1:
        # fold the data: c_step = c + L_d d + 1/2 D_dd(d) d,  L_step = L_x + D_xd(d)
        _affine_sparse(linear_data, data, constant, c_step)
        for t in range(tensor_dd_equation.shape[0]):
            s = 0.0
            for p in range(tensor_dd_indptr[t], tensor_dd_indptr[t + 1]):
                s += tensor_dd_data[p] * data[tensor_dd_indices[p]]
            c_step[tensor_dd_equation[t]] += 0.5 * s * data[tensor_dd_datum[t]]
        if tensor_xd_entry.shape[0] > 0:
            l_step[:] = linear_pattern
        for t in range(tensor_xd_entry.shape[0]):
            s = 0.0
            for k in range(tensor_xd_indptr[t], tensor_xd_indptr[t + 1]):
                s += tensor_xd_data[k] * data[tensor_xd_indices[k]]
            l_step[tensor_xd_entry[t]] += s
        _affine_sparse(uv_from_data, data, uv_const, uv_step)
    previous = state[1] if pausing and first_iteration > 1 else np.inf
    increment = np.inf
    norm = np.inf
    # pausing: the caller's choice (first call) or this loop's; else a new Jacobian unless
    # simplified Newton holds the factorisation of an earlier step (state[4])
    fresh = state[2] != 0.0 if pausing else not (simplified and state[4] != 0.0)
    factorizations = 0
    for iteration in range(first_iteration, max_iterations + 1):
        _residual(x, c_step, l_step, quadratic, jac_values if fresh else no_jacobian,
                  factored, uv_step, residual_out, 0)
        if pausing:
            for row in range(n_eq):
                residual_out[row] += extra_residual[row]
            if fresh:
                for k in range(jac_values.shape[0]):
                    jac_values[k] += extra_jacobian[k]
        norm = 0.0
        for row in range(n_eq):
            norm = max(norm, abs(residual_out[row]))
        if not np.isfinite(norm):
            state[4] = 0.0
            return RESIDUAL_NOT_FINITE, iteration, norm, increment, factorizations
        if fresh:
            factorizations += 1
            _condense(jac_values, condensation, schur)
            state[4] = 1.0
            if not _lu_factor(schur, pivots):
                state[4] = 0.0
                return SINGULAR, iteration, norm, increment, factorizations
            if sparse_factors:
                _compress_lu(schur, factors)
        _condensed_solve(jac_values, schur, pivots, factors, condensation, residual_out,
                         reduced, step)
        for j in range(n_x):
            if not np.isfinite(step[j]):
                state[4] = 0.0
                return INCREMENT_NOT_FINITE, iteration, norm, increment, factorizations
        x -= step
        increment = 0.0
        for b in range(floors.shape[0]):
            largest_step = 0.0
            largest_x = floors[b]
            for j in range(segment_lo[b], segment_hi[b]):
                largest_step = max(largest_step, abs(step[j]))
                largest_x = max(largest_x, abs(x[j] - shift_step[j]))
            increment = max(increment, largest_step / largest_x)
        if increment <= tolerance and simplified and not fresh:
            accept = _stale_iterate_exact(increment, previous)
        else:
            accept = (increment <= tolerance
                      or _estimated_error(increment, previous) <= estimate_level
                      or (fresh and increment <= stagnation and increment > 0.5 * previous))
        if accept:
            # the constraint rows at the accepted iterate (the enforced residuals reported)
            _residual(x, c_step, l_step, quadratic, no_jacobian, factored, uv_step,
                      residual_out, constraint_row)
            return CONVERGED, iteration, norm, increment, factorizations
        # a Jacobian that contracts too slowly, or (exact Newton) an iterate still far from
        # the solution, is renewed; below the tolerance it only takes the iterate to round-off
        stale = simplified and not fresh
        fresh = increment > tolerance and (increment > contraction * previous
                                           or (not simplified and increment > refactor_above))
        if stale and not fresh:
            fresh = _stale_cannot_finish(increment, previous, max_iterations - iteration)
        previous = increment
        if pausing and iteration < max_iterations:
            state[0], state[1], state[2] = iteration, previous, 1.0 if fresh else 0.0
            return PAUSED, iteration, norm, increment, factorizations
    state[4] = 0.0
    return NOT_CONVERGED, max_iterations, norm, increment, factorizations


@_jit
def _newton_workspace(equations, condensation, n_x):
    """Scratch arrays of :func:`_newton_step` for its ``equations`` and ``condensation``,
    allocated once per block of steps: (c_step, l_step, uv_step, Jacobian values, empty
    Jacobian, Schur complement, reduced right-hand side, pivots, its factors' nonzeros
    (:func:`_compress_lu`), increment, extra residual, extra Jacobian values, iteration state
    (see :func:`_newton_step`))."""
    n_eq, pattern_size = equations.constant.shape[0], equations.linear_pattern.shape[0]
    uv_size, reduced_size = equations.uv_const.shape[0], condensation.other_rows.shape[0]
    return (np.empty(n_eq), np.empty(pattern_size), np.empty(uv_size), np.empty(pattern_size),
            np.empty(0), np.empty((reduced_size, reduced_size)), np.empty(reduced_size),
            np.empty(reduced_size, dtype=np.int64),
            (np.zeros(reduced_size + 1, dtype=np.int64), np.zeros(reduced_size, dtype=np.int64),
             np.zeros(reduced_size * reduced_size, dtype=np.int64),
             np.zeros(reduced_size * reduced_size)),
            np.empty(n_x), np.zeros(n_eq), np.zeros(pattern_size), np.zeros(5))


@_jit
def _step_buffers(n, n_x, n_eq):
    """Per-step arrays of the step kernels: (data (q0, p0), unknowns, raw guess, defect sum,
    residual, shift of the unknowns (zero), convergence floors of the two blocks)."""
    return (np.empty(2 * n), np.empty(n_x), np.empty(n_x), np.empty(n_x), np.empty(n_eq),
            np.zeros(n_x), np.empty(2))


@_jit
def _far_from_guess(x, guess, q0, floor, multipliers, iterations):
    """:func:`mbs.engine.guess.far_from_guess` of the q1 block of the unknowns ``x``."""
    if iterations <= FAR_ROOT_ITERATIONS:
        return False
    error = 0.0
    motion = 0.0
    predicted = 0.0
    for j in range(q0.shape[0]):
        error = max(error, abs(x[j] - guess[j]))
        motion = max(motion, abs(x[j] - q0[j]))
        predicted = max(predicted, abs(guess[j] - q0[j]))
    return error > floor and np.any(multipliers != 0.0) and error > min(motion, predicted)


@_jit
def _run_steps(q_out, p_out, velocity_out, lam_out, gam_out, enforced_out, iterations_out,
               first, count, inverse_mass, h, guess_mode, force_scale, length_scale, lam_guess,
               gam_guess, warm_gamma, velocity_from_data, velocity_from_unknowns, m, equations,
               limits, condensation, force, new_weight, gamma_weight, jacobian_map, lag,
               lam_before_guess,
               gam_before_guess, constraint_row, correction_order, defects, defect_count,
               shift_map, shifted, startup_defects, coefficients):
    """Steps first .. first + count - 1 of a run whose unknowns are (q1, p1, lambda, gamma).

    Row k of q_out/p_out is the state at step k; rows k + 1 are written. The predictor
    (``guess_mode``) is seed 003's simple (0) or advanced (1, q + h M^-1 p) guess, or the
    explicit one (2): p1 = p - h (grad V + G(q)^T lambda), q1 = q + h M^-1 ((1 - w) p + w p1)
    with G from the table's Jacobian map (data = map q + offset at (jac_rows, jac_cols));
    lambda and gamma are those of the previous step (``lag`` 1) or of the one before (2, for
    multipliers that alternate); gamma starts from zero unless ``warm_gamma``; its terms of
    :class:`~mbs.engine.guess.ExplicitPredictor` are weighted by ``gamma_weight`` (1 or
    0). The scheme velocity is V_d (q, p) + V_x x with the CSR arrays (indptr, indices, data)
    of V_d and V_x in ``velocity_from_data`` and ``velocity_from_unknowns``. With the explicit
    guess and
    ``correction_order`` >= 0 the guess is corrected by the extrapolated defects (rows
    0 .. defect_count - 1 of ``defects``, newest last, updated in place; see
    ``Solver.predictor_correction``). With ``shifted`` the system's unknowns are x + S d,
    S the CSR ``shift_map``. The defects of the next ``startup_defects`` steps are not kept
    (see ``WarmStart.startup_defects``). ``coefficients`` is
    :data:`mbs.engine.defects.COEFFICIENT_TABLE` (read per step: recomputing the binomials
    costs integer divisions at every step). Returns (steps
    done, code of the failed step or CONVERGED, its residual norm, increment, iterations, LU
    factorisations, defect count, startup defects left). ``equations``, ``limits`` and
    ``condensation`` are the arguments of :func:`_newton_step`; ``jacobian_map`` is
    :attr:`CompiledSystem.jacobian_map`.
    """
    n = q_out.shape[1]
    n_x = 2 * n + 2 * m
    jac_indptr, jac_indices, jac_data, jac_offset, jac_rows, jac_cols = jacobian_map
    data, x, raw_guess, defect_sum, residual, shift_step, floors = _step_buffers(
        n, n_x, equations.constant.shape[0])
    segment_lo = np.array([0, n])
    segment_hi = np.array([n, 2 * n])
    lam = lam_guess.copy()
    gam = gam_guess.copy()
    lam_before = lam_before_guess.copy()
    gam_before = gam_before_guess.copy()
    predicted = np.empty(n)
    start = np.empty(n)  # the corrected guess of q1, which Newton overwrites
    far_floor = FAR_ROOT_FLOOR * length_scale
    momentum = np.empty(n)
    blend = np.empty(n)
    correction = np.empty(n)
    velocity_part = np.empty(n)
    zero_velocity = np.zeros(n)
    zero_unknowns = np.zeros(n_x)
    work = _newton_workspace(equations, condensation, n_x)
    total_factorizations = 0
    oldest = 0  # ring position of the oldest defect (rows rotate instead of shifting)
    for k in range(first, first + count):
        q0 = q_out[k]
        p0 = p_out[k]
        lam_guess_k = lam_before if lag == 2 else lam
        gam_guess_k = gam_before if lag == 2 else gam
        data[:n] = q0
        data[n:] = p0
        if guess_mode == 2:
            # p1 = p - h (grad V + G^T lambda + H(gamma) M^-1 p),
            # q1 = q + h M^-1 ((1 - w) p + w p1 + G^T gamma)   (see ExplicitPredictor.state)
            _affine(inverse_mass, p0, zero_velocity, 1.0, velocity_part)
            momentum[:] = force
            correction[:] = 0.0
            for e in range(jac_offset.shape[0]):
                value = jac_offset[e]
                curvature = 0.0
                for t in range(jac_indptr[e], jac_indptr[e + 1]):
                    value += jac_data[t] * q0[jac_indices[t]]
                    curvature += jac_data[t] * velocity_part[jac_indices[t]]
                column = jac_cols[e]
                gamma = gamma_weight * gam_guess_k[jac_rows[e]]
                momentum[column] += value * lam_guess_k[jac_rows[e]] + curvature * gamma
                correction[column] += value * gamma
            for j in range(n):
                momentum[j] = p0[j] - h * momentum[j]
                blend[j] = ((1.0 - new_weight) * p0[j] + new_weight * momentum[j]
                            + correction[j])
            _affine(inverse_mass, blend, q0, h, predicted)
            x[:n] = predicted
            x[n:2 * n] = momentum
        elif guess_mode == 1:
            _affine(inverse_mass, p0, q0, h, predicted)
            x[:n] = predicted
            x[n:2 * n] = p0
        else:
            x[:n] = q0
            x[n:2 * n] = p0
        x[2 * n:2 * n + m] = lam_guess_k
        if warm_gamma:
            x[2 * n + m:] = gam_guess_k
        else:
            x[2 * n + m:] = 0.0
        raw_guess[:] = x
        correcting = guess_mode == 2 and correction_order >= 0
        if correcting:
            _correct_guess(x, data, defects, defect_count, oldest, correction_order, lag,
                           defect_sum, coefficients)
        start[:] = x[:n]
        largest_q = length_scale
        largest_p = abs(h) * force_scale  # h < 0 in the backward sub-steps of compositions
        for j in range(n):
            largest_q = max(largest_q, abs(q0[j]))
            largest_p = max(largest_p, abs(p0[j]))
        floors[0] = largest_q
        floors[1] = max(largest_p, 1e-300)
        if shifted:
            _affine_sparse(shift_map, data, zero_unknowns, shift_step)
            for j in range(n_x):
                x[j] += shift_step[j]
        code, iterations, norm, increment, factorizations = _newton_step(
            data, x, equations, (segment_lo, segment_hi, floors), limits, condensation,
            constraint_row, work, residual, shift_step)
        if shifted:
            for j in range(n_x):
                x[j] -= shift_step[j]
        total_factorizations += factorizations
        if code == CONVERGED and guess_mode == 2 and _far_from_guess(
                x, start, q0, far_floor, lam_guess_k, iterations):
            code = FAR_FROM_GUESS
        if code != CONVERGED:
            _unroll_defects(defects, oldest)
            return (k - first, code, norm, increment, iterations, total_factorizations,
                    defect_count, startup_defects)
        defect_count, oldest, startup_defects = _keep_defect(
            correcting, startup_defects, defects, defect_count, oldest, x, raw_guess)
        q_out[k + 1] = x[:n]
        p_out[k + 1] = x[n:2 * n]
        # the step's multipliers become the newest; the older buffer is reused
        lam_before, lam = lam, lam_before
        gam_before, gam = gam, gam_before
        lam[:] = x[2 * n:2 * n + m]
        gam[:] = x[2 * n + m:]
        lam_out[k] = lam
        gam_out[k] = gam
        _affine_sparse(velocity_from_data, data, zero_velocity, velocity_part)
        _affine_sparse(velocity_from_unknowns, x, velocity_part, velocity_out[k])
        position = 0.0
        velocity = 0.0
        for row in range(m):
            position = max(position, abs(residual[2 * n + row]))
            velocity = max(velocity, abs(residual[2 * n + m + row]))
        enforced_out[k, 0] = position
        enforced_out[k, 1] = velocity
        iterations_out[k] = iterations
    _unroll_defects(defects, oldest)
    return count, CONVERGED, 0.0, 0.0, 0, total_factorizations, defect_count, startup_defects


@_jit
def _run_composed(q_out, p_out, velocity_out, lam_out, gam_out, enforced_out, iterations_out,
                  first, count, systems, lam, gam, lam_before, gam_before, defects,
                  defect_counts, startups, coefficients, fractions):
    """Steps first .. first + count - 1 of a composition: each step is the sequence of
    sub-steps i = 0 .. S - 1, sub-step i one step of :func:`_run_steps` with the argument
    groups ``systems[i]`` (a typed list, see :meth:`CompiledSystem.argument_groups`) and its
    own warm start (row i of ``lam``, ``gam``, ``lam_before``, ``gam_before``, ``defects``,
    ``defect_counts``, ``startups``, updated in place), exactly as the sub-step solvers
    would run it one call at a time. A step's outputs are those of its last sub-step, with
    the iterations summed, the enforced residuals the largest of the sub-steps' and the
    multipliers the sub-steps' weighted by their ``fractions`` of the step. When a
    sub-step fails, the warm starts are put back to the start of that step and the step is
    left to the caller. Returns (steps done, factorisations)."""
    n = q_out.shape[1]
    m = lam.shape[1]
    sub_q, sub_p = np.empty((2, n)), np.empty((2, n))
    sub_velocity, sub_lam, sub_gam = np.empty((1, n)), np.empty((1, m)), np.empty((1, m))
    sub_enforced, sub_iterations = np.empty((1, 2)), np.zeros(1, dtype=np.int64)
    saved = (lam.copy(), gam.copy(), lam_before.copy(), gam_before.copy(), defects.copy(),
             defect_counts.copy(), startups.copy())
    factorizations = 0
    for k in range(first, first + count):
        saved[0][:], saved[1][:], saved[2][:], saved[3][:] = lam, gam, lam_before, gam_before
        saved[4][:], saved[5][:], saved[6][:] = defects, defect_counts, startups
        sub_q[0], sub_p[0] = q_out[k], p_out[k]
        total, position, velocity = 0, 0.0, 0.0
        lam_out[k], gam_out[k] = 0.0, 0.0
        for i in range(len(systems)):
            front, middle, late, shift = systems[i]
            (_, code, _, _, _, sub_factorizations, defect_counts[i],
             startups[i]) = _run_steps(
                sub_q, sub_p, sub_velocity, sub_lam, sub_gam, sub_enforced, sub_iterations,
                0, 1, *front, lam[i], gam[i], *middle, lam_before[i], gam_before[i], *late,
                defects[i], defect_counts[i], *shift, startups[i], coefficients)
            factorizations += sub_factorizations
            if code != CONVERGED:
                lam[:], gam[:] = saved[0], saved[1]
                lam_before[:], gam_before[:] = saved[2], saved[3]
                defects[:], defect_counts[:], startups[:] = saved[4], saved[5], saved[6]
                return k - first, factorizations
            lam_before[i], gam_before[i] = lam[i], gam[i]
            lam[i], gam[i] = sub_lam[0], sub_gam[0]
            lam_out[k] += fractions[i] * sub_lam[0]
            gam_out[k] += fractions[i] * sub_gam[0]
            sub_q[0], sub_p[0] = sub_q[1], sub_p[1]
            total += sub_iterations[0]
            position = max(position, sub_enforced[0, 0])
            velocity = max(velocity, sub_enforced[0, 1])
        q_out[k + 1], p_out[k + 1] = sub_q[0], sub_p[0]
        velocity_out[k] = sub_velocity[0]
        enforced_out[k, 0], enforced_out[k, 1] = position, velocity
        iterations_out[k] = total
    return count, factorizations


@_jit
def _unroll_defects(defects, oldest):
    """Rotate the ring of defects (oldest at row ``oldest``) back to oldest-first order, the
    layout the kernel receives and returns."""
    if oldest == 0:
        return
    ordered = defects.copy()
    capacity = defects.shape[0]
    for row in range(capacity):
        defects[row] = ordered[(oldest + row) % capacity]


@_jit
def _keep_defect(correcting, startup_defects, defects, defect_count, oldest, x, guess):
    """:meth:`mbs.engine.guess.WarmStart.remember` on the kernels' ring ``defects`` (logical
    row 0, the oldest, at ring row ``oldest``): skip while ``startup_defects`` remain, else
    keep x - guess, overwriting the oldest when full; a step from another guess (not
    ``correcting``) starts the history afresh. Returns (count, oldest, startup defects)."""
    if not correcting:
        return 0, 0, startup_defects
    if startup_defects > 0:
        return defect_count, oldest, startup_defects - 1
    capacity = defects.shape[0]
    if defect_count == capacity:
        slot = oldest
        oldest = (oldest + 1) % capacity
    else:
        slot = (oldest + defect_count) % capacity
        defect_count += 1
    for j in range(x.shape[0]):
        defects[slot, j] = x[j] - guess[j]
    return defect_count, oldest, startup_defects


@_jit
def _correct_guess(x, data, defects, defect_count, oldest, order, lag, correction,
                   coefficients):
    """x += the extrapolated defect of :meth:`mbs.engine.guess.WarmStart.corrected`
    (same terms, summed term by term), unless it is larger than the predicted change of (q, p).
    ``coefficients`` is :data:`mbs.engine.defects.COEFFICIENT_TABLE`."""
    usable = min(order + 1, defect_count // lag)
    if usable == 0:
        return
    n_x = x.shape[0]
    capacity = defects.shape[0]
    # ring row of the logical row defect_count - lag (0 = oldest), then lag rows back per term
    row = oldest + defect_count - lag
    if row >= capacity:
        row -= capacity
    coefficient = coefficients[usable, 0]
    for j in range(n_x):
        correction[j] = coefficient * defects[row, j]
    for term in range(1, usable):
        coefficient = coefficients[usable, term]
        row -= lag
        if row < 0:
            row += capacity
        for j in range(n_x):
            correction[j] = correction[j] + coefficient * defects[row, j]
    size = 0.0
    change = 0.0
    for j in range(data.shape[0]):
        size = max(size, abs(correction[j]))
        change = max(change, abs(x[j] - data[j]))
    if size > change:
        return
    for j in range(n_x):
        x[j] += correction[j]


def run_composed(q_out, p_out, velocity_out, lam_out, gam_out, enforced_out, iterations_out,
                 first: int, count: int, systems: tuple, lam, gam, lam_before, gam_before,
                 defects, defect_counts, startups, fractions) -> tuple[int, int]:
    """:func:`_run_composed` (see there); returns (steps done, factorisations)."""
    # a typed list (not a tuple) of the sub-steps' groups: one compiled kernel whatever
    # the number of sub-steps
    groups = numba.typed.List()
    for system in systems:
        groups.append(system)
    done, factorizations = _run_composed(
        q_out, p_out, velocity_out, lam_out, gam_out, enforced_out, iterations_out, first,
        count, groups, lam, gam, lam_before, gam_before, defects, defect_counts, startups,
        COEFFICIENT_TABLE, fractions)
    return int(done), int(factorizations)


def record_compile_time(seconds: float) -> None:
    """Remember the first kernel call's wall time (compilation or cache load)."""
    global _compile_seconds
    if _compile_seconds is None:
        _compile_seconds = seconds


def csr_arrays(matrix: sp.csr_matrix) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(indptr, indices, data) of a CSR matrix in the dtypes of the kernels."""
    matrix = sp.csr_matrix(matrix)
    return (matrix.indptr.astype(np.int64), matrix.indices.astype(np.int64),
            matrix.data.astype(float))


#: A fill-reducing column order replaces the count order only when it saves more than this
#: fraction of the LU work on the sample matrix.
ORDER_MIN_SAVING = 0.05


def _measured_column_order(values: np.ndarray, condensation: Condensation
                           ) -> tuple[str, np.ndarray | None]:
    """(name, permutation of the condensed matrix's columns, or None to keep them) with the
    least LU work on the sample ``values`` (see :class:`CompiledSystem`)."""
    from scipy.sparse.linalg import splu

    size = condensation.other_rows.size
    schur = np.empty((size, size))
    _condense(values, condensation, schur)
    if not np.isfinite(schur).all():
        return "count", None
    best_name, best_order = "count", None
    best_work = _lu_work(schur.copy())
    if best_work < 0:  # singular sample: no basis for a choice
        return "count", None
    limit = (1.0 - ORDER_MIN_SAVING) * best_work
    matrix = sp.csc_matrix(schur)
    for spec in ("COLAMD", "MMD_ATA", "MMD_AT_PLUS_A"):
        try:
            # splu factorises A Pc; perm_c[j] is the position of column j in that order
            order = np.argsort(splu(matrix, permc_spec=spec).perm_c)
        except RuntimeError:  # singular to SuperLU: skip this candidate
            continue
        work = _lu_work(np.ascontiguousarray(schur[:, order]))
        if 0 <= work < limit and (best_order is None or work < best_work):
            best_name, best_order, best_work = spec, order.astype(np.int64), work
    return best_name, best_order


def _factor_fill(values: np.ndarray, condensation: Condensation) -> float:
    """The fraction of nonzero entries in the LU factors of the condensed sample matrix
    (1 when it is singular or not finite: no basis for sparse solves)."""
    size = condensation.other_rows.size
    schur = np.empty((size, size))
    _condense(values, condensation, schur)
    if not np.isfinite(schur).all() or not _lu_factor(schur, np.empty(size, dtype=np.int64)):
        return 1.0
    return np.count_nonzero(schur) / size**2


def _condensation_plan(pattern_row: np.ndarray, pattern_col: np.ndarray, size: int,
                       block_rows: np.ndarray, block_cols: np.ndarray, other_rows: np.ndarray,
                       other_cols: np.ndarray) -> tuple[np.ndarray, ...]:
    """Split the Jacobian's pattern entries for :func:`_condense` and
    :func:`_condensed_solve`: (direct_entry, direct_target, coupling_entry, coupling_row,
    coupling_block, block_start, block_col, block_entry).

    Entries of the block rows in the block columns are the alpha I block and are not read.
    Couplings are sorted by (row, block index) and each block row by column, so that every
    sum is formed in the order of a dense row-by-row condensation.
    """
    def position(indices):
        where = np.full(size, -1, dtype=np.int64)
        where[indices] = np.arange(indices.size)
        return where

    row_other, row_block = position(other_rows)[pattern_row], position(block_rows)[pattern_row]
    col_other, col_block = position(other_cols)[pattern_col], position(block_cols)[pattern_col]
    entries = np.arange(pattern_row.size, dtype=np.int64)
    direct = (row_other >= 0) & (col_other >= 0)
    direct_target = row_other[direct] * other_cols.size + col_other[direct]
    coupling = (row_other >= 0) & (col_block >= 0)
    coupling_order = np.lexsort((col_block[coupling], row_other[coupling]))
    block = (row_block >= 0) & (col_other >= 0)
    block_order = np.lexsort((col_other[block], row_block[block]))
    block_start = np.searchsorted(row_block[block][block_order],
                                  np.arange(block_rows.size + 1)).astype(np.int64)
    return (entries[direct], direct_target.astype(np.int64),
            entries[coupling][coupling_order], row_other[coupling][coupling_order],
            col_block[coupling][coupling_order], block_start,
            col_other[block][block_order], entries[block][block_order])


def _merged_overrides(overrides: list, n_x: int, n_d: int) -> tuple:
    """The factored constraint rows of a system (one block per constraint equation of the
    scheme, see :func:`mbs.backends.factored_rows.factored_override`) as one set for
    :func:`_residual`: (rows, U x-map as CSR arrays, U d-map, constants of the 3-vectors, row
    and scale of every term, explicit constants), all u vectors before all v vectors."""
    rows, term_rows, term_scales, constants = [], [], [], []
    u_x, v_x, u_d, v_d, u_c, v_c = [], [], [], [], [], []
    for start, count, uv_map, uv_from_data, uv_const, row_sum, row_constant, half in overrides:
        rows.append(np.arange(start, start + count))
        constants.append(np.asarray(row_constant, float))
        # row and scale of each term from row_sum[k, 3 t] = scale_t at k = row_t - start
        by_term = sp.csc_matrix(row_sum)[:, ::3]
        by_term.eliminate_zeros()
        term_row = np.full(by_term.shape[1], start, dtype=np.int64)
        term_scale = np.zeros(by_term.shape[1])
        present = np.diff(by_term.indptr) > 0
        term_row[present] += by_term.indices[by_term.indptr[:-1][present]]
        term_scale[present] = by_term.data[by_term.indptr[:-1][present]]
        term_rows.append(term_row)
        term_scales.append(term_scale)
        uv_map, uv_from_data = sp.csr_matrix(uv_map), sp.csr_matrix(uv_from_data)
        u_x.append(uv_map[:half])
        v_x.append(uv_map[half:])
        u_d.append(uv_from_data[:half])
        v_d.append(uv_from_data[half:])
        u_c.append(np.asarray(uv_const, float)[:half])
        v_c.append(np.asarray(uv_const, float)[half:])
    if not overrides:
        empty = sp.csr_matrix((0, n_x))
        return (np.zeros(0, np.int64), *csr_arrays(empty),
                csr_arrays(sp.csr_matrix((0, n_d))), np.zeros(0), np.zeros(0, np.int64),
                np.zeros(0), np.zeros(0))
    uv_x = sp.vstack(u_x + v_x, format="csr")
    return (np.concatenate(rows).astype(np.int64), *csr_arrays(uv_x),
            csr_arrays(sp.vstack(u_d + v_d, format="csr")), np.concatenate(u_c + v_c),
            np.concatenate(term_rows), np.concatenate(term_scales), np.concatenate(constants))


class CompiledSystem:
    """The arrays of a dense :class:`QuadraticSystem` laid out for the kernel.

    Parameters
    ----------
    system : QuadraticSystem
        Dense step equations of a scheme.
    m : int
        Number of constraints.
    identity_block : (rows, cols, alpha) or None
        Block of the Newton matrix equal to alpha I, condensed out.
    extra_pattern : (rows, cols), optional
        Entries of the Newton matrix where the terms evaluated in Python (see
        :meth:`solve`) may be nonzero; added to the tensor form's pattern.
    sample_jacobian : ndarray, optional
        A Newton matrix of the system (e.g. at the model's initial state). With it, the column
        order of the condensed matrix is chosen by measurement among the count order and the
        fill-reducing orders of SuperLU (COLAMD, MMD on A^T A and on A^T + A): the one whose
        pivoted LU (:func:`_lu_work`) takes the fewest multiply-adds on the sample, the count
        order unless another saves more than 5 %. Without it the count order is used.
    """

    def __init__(self, system, m: int, identity_block: tuple[slice, slice, float] | None,
                 sample_jacobian: np.ndarray | None = None,
                 extra_pattern: tuple[np.ndarray, np.ndarray] | None = None):
        self.m = m
        table = system.table  # G(q) data = map q + offset, for the explicit predictor
        jac_map = sp.csr_matrix(table._jac_map)
        self.jacobian_map = (jac_map.indptr.astype(np.int64), jac_map.indices.astype(np.int64),
                             jac_map.data.astype(float), table._jac_offset.astype(float),
                             table._jac_rows.astype(np.int64),
                             table._jac_indices.astype(np.int64))
        size = self.n_unknowns = system.n_unknowns
        if not system.dense:
            raise ValueError("the compiled backend needs a dense QuadraticSystem")
        overrides = [o for o in system._overrides if o is not None]

        n_x = system.n_unknowns
        linear_x = np.asarray(system.linear_unknowns)
        # the Jacobian's sparsity pattern: L_x, and the (row, j) slots of D_xd and D_xx
        extra_keys = (np.zeros(0, np.int64) if extra_pattern is None else
                      np.asarray(extra_pattern[0]) * n_x + np.asarray(extra_pattern[1]))
        keys = np.unique(np.concatenate([
            np.flatnonzero(linear_x.ravel()),
            np.flatnonzero(np.diff(system.tensor_xd.indptr)),
            np.flatnonzero(np.diff(system.tensor_xx.indptr)), extra_keys])).astype(np.int64)
        # rows (equation, datum) of D_dd that are not empty, split once: an integer division
        # per entry in the kernel is a noticeable share of a small model's step
        n_d = system.n_data
        dd_rows = np.flatnonzero(np.diff(system.tensor_dd.indptr)).astype(np.int64)
        # pattern entries whose value depends on the step data (D_xd rows that are not
        # empty): the fold visits only those
        xd_entries = np.flatnonzero(np.diff(sp.csr_matrix(system.tensor_xd)[keys].indptr)
                                    ).astype(np.int64)
        # the pattern (keys, sorted) by row: entries pattern_start[i] .. of row i
        pattern_start = np.searchsorted(keys // n_x, np.arange(system.constant.shape[0] + 1)
                                        ).astype(np.int64)
        tensors = (dd_rows // n_d, dd_rows % n_d,
                   *csr_arrays(sp.csr_matrix(system.tensor_dd)[dd_rows]),
                   pattern_start, xd_entries,
                   *csr_arrays(sp.csr_matrix(system.tensor_xd)[keys][xd_entries]),
                   keys % n_x, *csr_arrays(sp.csr_matrix(system.tensor_xx)[keys]))
        self.pattern_size = keys.size
        self.pattern_row, self.pattern_col = keys // n_x, keys % n_x
        # rows 2n.. of the step equations are the constraint rows
        self.constraint_row = system.n_unknowns - 2 * m
        # Columns of the condensed matrix in ascending order of their pattern counts: the LU
        # skips zero multipliers, and eliminating the sparse columns (the multipliers) first
        # keeps the fill small (far less LU work than in the natural order).
        column_count = np.bincount(keys % n_x, minlength=n_x)
        if identity_block is None:  # no block to condense: the Schur complement is J
            everything = np.arange(size, dtype=np.int64)
            block_rows = block_cols = np.zeros(0, np.int64)
            alpha = 1.0
            other_rows = everything
            other_cols = np.argsort(column_count, kind="stable").astype(np.int64)
        else:
            rows, cols, alpha = identity_block
            block_rows = np.arange(rows.start, rows.stop, dtype=np.int64)
            block_cols = np.arange(cols.start, cols.stop, dtype=np.int64)
            other_rows = np.r_[0:rows.start, rows.stop:size].astype(np.int64)
            other_cols = np.r_[0:cols.start, cols.stop:size]
            other_cols = other_cols[np.argsort(column_count[other_cols],
                                              kind="stable")].astype(np.int64)
        def condensation(columns, sparse_factors=other_rows.size > SPARSE_FACTORS_ABOVE):
            return Condensation(block_rows, block_cols, float(alpha), other_rows, columns,
                                *_condensation_plan(keys // n_x, keys % n_x, size, block_rows,
                                                    block_cols, other_rows, columns),
                                bool(sparse_factors))

        #: :class:`Condensation` of the Newton matrix
        self.condensation = condensation(other_cols)
        self.column_order = "count"
        if sample_jacobian is not None and other_cols.size > 1:
            values = np.ascontiguousarray(np.asarray(sample_jacobian)[keys // n_x, keys % n_x],
                                          dtype=float)
            self.column_order, order = _measured_column_order(values, self.condensation)
            if order is not None:
                other_cols = other_cols[order]
            fill = _factor_fill(values, condensation(other_cols))
            self.condensation = condensation(other_cols, fill < SPARSE_FACTORS_FILL)
        shift = getattr(system, "shift", None)
        self.shift = (csr_arrays(sp.csr_matrix(shift)) if shift is not None
                      else csr_arrays(sp.csr_matrix((n_x, n_d))), shift is not None)
        #: :class:`QuadraticArrays` of the step equations
        self.equations = QuadraticArrays(
            *tensors, system.constant, csr_arrays(system.linear_data),
            np.ascontiguousarray(linear_x.ravel()[keys]),
            *_merged_overrides(overrides, n_x, n_d))

    def solve(self, data: np.ndarray, x: np.ndarray, segments: tuple[np.ndarray, np.ndarray],
              floors: np.ndarray, limits: NewtonLimits, residual_from: int, work: tuple,
              residual: np.ndarray, extra: Callable | None = None
              ) -> tuple[int, int, float, float, int]:
        """Newton on one step of any scheme's tensor form (:func:`_newton_step`) from ``x``
        (overwritten with the solution), convergence judged on the blocks ``segments`` =
        (first, stop) indices with ``floors``; ``residual`` receives R, its rows from
        ``residual_from`` on at the solution. ``work`` is :meth:`workspace`. Returns (code,
        iterations, residual norm, increment, factorisations).

        ``extra(x, jacobian) -> (r, J)`` adds terms evaluated in Python (the bound
        :class:`~mbs.engine.equations.PotentialTerms` of the step, J dense and zero outside
        the ``extra_pattern``): the kernel then pauses after each iteration for them, with
        the same iteration, stopping rules and factorisation reuse."""
        shift_step = work[-1]
        if self.shift[1]:
            _affine_sparse(self.shift[0], data, np.zeros(x.size), shift_step)
            x += shift_step
        arguments = (self.equations, (*segments, floors), limits, self.condensation,
                     int(residual_from), work[0], residual, shift_step)
        state = work[0][-1]
        reuse = limits.simplified and state[4] != 0.0  # a factorisation of an earlier step
        if extra is None:
            state[:4] = 0.0
            code, iterations, norm, increment, factorizations = _newton_step(data, x,
                                                                             *arguments)
        else:
            extra_residual, extra_jacobian = work[0][-3:-1]
            state[:4] = (0.0, np.inf, 0.0 if reuse else 1.0, 1.0)
            factorizations, code = 0, PAUSED
            while code == PAUSED:
                fresh = state[2] != 0.0
                r_extra, j_extra = extra(x - shift_step, fresh)
                extra_residual[:] = r_extra
                if fresh:
                    extra_jacobian[:] = j_extra[self.pattern_row, self.pattern_col]
                code, iterations, norm, increment, count = _newton_step(data, x, *arguments)
                factorizations += count
        if self.shift[1]:
            x -= shift_step
        return code, iterations, norm, increment, factorizations

    def workspace(self) -> tuple:
        """Scratch arrays of :meth:`solve` (one set per solver run): the kernel's
        (:func:`_newton_workspace`) and the shift of the unknowns."""
        return (_newton_workspace(self.equations, self.condensation, self.n_unknowns),
                np.zeros(self.n_unknowns))

    def argument_groups(self, inverse_mass, h: float, guess_mode: int, force_scale: float,
                        length_scale: float, warm_gamma: bool, velocity_maps,
                        limits: NewtonLimits,
                        force: np.ndarray, new_weight: float, gamma_weight: float, lag: int,
                        correction_order: int) -> tuple[tuple, tuple, tuple, tuple]:
        """The arguments of :func:`_run_steps` other than the outputs, the step range, the
        warm start and the coefficient table, as the four groups (front, middle, late,
        shift) the warm-start arguments separate."""
        front = (inverse_mass, float(h), int(guess_mode), float(force_scale),
                 float(length_scale))
        middle = (bool(warm_gamma), velocity_maps[0], velocity_maps[1], self.m,
                  self.equations, limits, self.condensation, force,
                  float(new_weight), float(gamma_weight), self.jacobian_map, int(lag))
        return front, middle, (self.constraint_row, int(correction_order)), self.shift

    def run(self, q_out, p_out, velocity_out, lam_out, gam_out, enforced_out, iterations_out,
            first: int, count: int, groups: tuple, lam_guess, gam_guess, lam_before_guess,
            gam_before_guess, defects: np.ndarray, defect_count: int, startup_defects: int):
        """Run :func:`_run_steps` (see there) with the :meth:`argument_groups` ``groups``
        and the warm start."""
        front, middle, late, shift = groups
        started = time.perf_counter() if _compile_seconds is None else None
        result = _run_steps(q_out, p_out, velocity_out, lam_out, gam_out, enforced_out,
                            iterations_out, first, count, *front, lam_guess, gam_guess,
                            *middle, lam_before_guess, gam_before_guess, *late, defects,
                            int(defect_count), *shift, int(startup_defects),
                            COEFFICIENT_TABLE)
        if started is not None:
            record_compile_time(time.perf_counter() - started)
        return result
