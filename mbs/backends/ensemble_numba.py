"""Compiled kernels of :func:`mbs.simulate_ensemble` (optional: needs numba).

Importing this module raises ImportError when numba is missing; :mod:`mbs.ensemble` then runs
the members one by one through :func:`mbs.simulate`. :func:`run_lanes` computes a whole run
of many members in one call, members in SIMD lanes, from the tables of a scheme's step
equations (:func:`mbs.backends.ensemble_plan.lane_plan`): the kernels know no scheme; the residual,
the Newton matrix and the predictor are sums of monomials of each member's variables.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from mbs.backends.compiled import (  # the pivoted per-member fallback; the far-root test
    _far_from_guess,
    _lu_factor,
    _lu_solve,
)
from mbs.backends.ensemble_rows import (
    LANES,
    _v_abs_max,
    _v_add_cmul,
    _v_add_scaled,
    _v_add_where,
    _v_assemble,
    _v_copy,
    _v_copy_where,
    _v_div,
    _v_dot_div,
    _v_fill,
    _v_flag_nonfinite,
    _v_mul,
    _v_neg,
    _v_pivot_ok,
    _v_sub_mul,
    _v_sub_mul2_run,
    _v_sub_mul_run,
)
from mbs.engine.guess import FAR_ROOT_FLOOR

#: Member status codes of :func:`run_lanes`; FAR_FROM_GUESS: a step converged farther from
#: its guess than it moves (:func:`mbs.engine.guess.far_from_guess`).
CONVERGED, SINGULAR, NOT_FINITE, NOT_CONVERGED, FAR_FROM_GUESS = 0, 1, 2, 3, 4


# -- members in SIMD lanes ---------------------------------------------------------------------
# The kernels below hold LANES members per array, member-innermost ((n, LANES), (nnz,
# LANES)): every arithmetic operation acts on a row of LANES values, one per member, as
# vector instructions (mbs.backends.ensemble_rows) that reassociate nothing (each lane computes
# exactly the sequence of operations of a scalar run, so no fastmath is needed). The Newton
# matrix is stored, assembled, factorised and solved entry by entry with the structure found
# once per model, scheme and step size (:func:`mbs.backends.ensemble_plan.lane_plan`).

#: Default of ``pivot_threshold`` (:func:`run_lanes`): a static pivot is accepted when it is
#: at least this fraction of the largest entry below it in its column (threshold pivoting:
#: the growth of the entries stays bounded); a member whose matrix fails the test is
#: factorised again with partial pivoting. The factors serve Newton steps only, whose
#: increments measure the error whatever the accuracy of the solve, so the threshold of
#: sparse direct solvers that favour sparsity (0.01) is kept rather than 0.1, which good
#: static orders fail at larger step sizes.
STATIC_PIVOT_THRESHOLD = 0.01


@njit(cache=True, error_model="numpy")
def _lanes_csr(ptr, idx, val, x, out):
    """out[i, :] = (A x)[i] in every lane for the CSR matrix A."""
    for i in range(ptr.size - 1):
        _v_fill(out, i, 0.0)
        for e in range(ptr[i], ptr[i + 1]):
            _v_add_scaled(out, i, val[e], x, idx[e])


# -- sparse Newton matrices --------------------------------------------------------------------
# The Newton matrix has a fixed structure per model, scheme and step size:
# :func:`mbs.backends.ensemble_plan.lane_plan` expands every entry once into monomials of the lane
# variables, computes the fill of elimination without row exchanges in a static pivot order
# and lists the operations. The matrix and its factors are stored entry by entry (nnz,
# LANES), the fill included, in row-major order of the pivot positions.


@njit(cache=True, error_model="numpy")
def _lanes_sparse_lu(a, ok, ok_row, column_max, inverse, threshold, tested_from, tested_to, diag,
                     pairs, first_pair, last_pair, pair_ops, single_ops):
    """One phase of LU without row exchanges of every lane of ``a`` (nnz, LANES), in place,
    with the tables of :func:`mbs.backends.ensemble_plan.lane_plan` (pairs ``first_pair`` ..
    ``last_pair`` - 1): for each pair (c1, c2) of L entries of a row i, the multipliers (times
    the inverse pivots) and the updates of row i from rows c1 and c2, two at a time where
    both rows have the column (the multipliers stay in registers); the inverse pivot of a
    row once it is finished. Every entry receives the updates of column-by-column
    elimination in the same order, so the factors are those of the dense elimination without
    its structural zeros. ``ok[ok_row]`` (LANES) becomes 0.0 in lanes where one of the
    pivots ``tested_from`` .. ``tested_to`` - 1 is zero, not finite or smaller than
    ``threshold`` times the largest entry below it in its column (collected in
    ``column_max`` (size, LANES) as the rows pass; the pivots before ``tested_from`` are an
    exact elimination, such as the identity block of the Newton matrix, whatever their
    size). ``inverse`` (size, LANES) holds the inverse pivots."""
    for c in range(tested_from, tested_to):
        _v_fill(column_max, c, 0.0)
    for p in range(first_pair, last_pair):
        l1, c1, l2, c2 = pairs[p, 0], pairs[p, 1], pairs[p, 2], pairs[p, 3]
        if c1 >= 0:
            _v_abs_max(column_max, c1, a, l1)
            _v_mul(a, l1, inverse, c1)                  # the multiplier a[i, c1] / a[c1, c1]
            if c2 >= 0:
                if pairs[p, 4] >= 0:
                    _v_sub_mul(a, l2, a, l1, a, pairs[p, 4])
                _v_abs_max(column_max, c2, a, l2)
                _v_mul(a, l2, inverse, c2)
                # a[i, j] -= a[i, c1] a[c1, j], then a[i, c2] a[c2, j]
                _v_sub_mul2_run(a, a, l1, l2, a, pair_ops, pairs[p, 5], pairs[p + 1, 5])
                _v_sub_mul_run(a, a, l2, a, single_ops, pairs[p, 7], pairs[p + 1, 6])
            _v_sub_mul_run(a, a, l1, a, single_ops, pairs[p, 6], pairs[p, 7])
        i = pairs[p, 8]
        if i >= 0:
            _v_fill(inverse, i, 1.0)
            _v_div(inverse, i, a, diag[i])
    for c in range(tested_from, tested_to):
        _v_pivot_ok(ok, ok_row, threshold, a, diag[c], column_max, c)


@njit(cache=True, error_model="numpy")
def _lanes_forward(lu, x, forward_ptr, forward, first, stop):
    """Forward substitution with the columns ``first`` .. ``stop`` - 1 of L, in every lane:
    x[t] -= L[t, j] x[j], in the order of the dense substitution."""
    for j in range(first, stop):
        _v_sub_mul_run(x, x, j, lu, forward, forward_ptr[j], forward_ptr[j + 1])


@njit(cache=True, error_model="numpy")
def _lanes_backward(lu, x, diag, backward_ptr, backward, first, stop):
    """Backward substitution of the rows ``stop`` - 1 down to ``first`` of U, in every lane:
    x[i] = (x[i] - U[i, j] x[j] ...) / U[i, i]."""
    for i in range(stop - 1, first - 1, -1):
        _v_dot_div(x, i, lu, backward, backward_ptr[i], backward_ptr[i + 1], diag[i])


@njit(cache=True, error_model="numpy")
def _lanes_correct_guess(w, n, size, defects, defect_count, order, lag, coefficients,
                         corrected):
    """Add to the predictor's guess, the unknowns x in rows 2n .. 2n + size - 1 of ``w``, lane
    by lane, the extrapolated defect of :meth:`mbs.engine.guess.WarmStart.corrected` (same
    terms, summed term by term) through every ``lag``-th past defect, unless it is larger
    than the predicted change of (q, p) from the data (q0, p0) in rows 0 .. 2n - 1;
    ``corrected[lane]`` says whether it was added."""
    corrected[:] = False
    usable = min(order + 1, defect_count // lag)
    if usable == 0:
        return
    newest = defect_count - lag   # the defect ``lag`` steps before the next one
    lanes = w.shape[1]
    correction = np.empty(size)
    for lane in range(lanes):
        for j in range(size):
            correction[j] = coefficients[usable, 0] * defects[newest, j, lane]
        for term in range(1, usable):
            coefficient = coefficients[usable, term]
            for j in range(size):
                correction[j] = correction[j] + coefficient * defects[newest - term * lag, j, lane]
        largest, change = 0.0, 0.0
        for i in range(2 * n):
            largest = max(largest, abs(correction[i]))
            change = max(change, abs(w[2 * n + i, lane] - w[i, lane]))
        corrected[lane] = largest <= change
        if corrected[lane]:
            for j in range(size):
                w[2 * n + j, lane] += correction[j]


@njit(cache=True, error_model="numpy")
def _lanes_residual(res, uv, w, residual, overrides):
    """The step residual of every lane at the lane variables ``w`` (see
    :func:`mbs.backends.ensemble_plan.lane_plan`): the polynomial rows, then the factored
    constraint rows."""
    r_const, r_ptr, r_coef, r_var = residual
    _v_assemble(res, w, r_const, r_ptr, r_coef, r_var)
    uv_ptr, uv_idx, uv_val, rows, first, second, scale = overrides
    if rows.size:
        _lanes_csr(uv_ptr, uv_idx, uv_val, w, uv)
        for t in range(rows.size):
            _v_add_cmul(res, rows[t], scale[t], uv, first[t], uv, second[t])


@njit(cache=True, error_model="numpy")
def _lanes_newton(first, lanes, n, u, size, w, res, rhs, uv, lu, work, ok, column_max, inverse,
                  schur, tail, lu_pivoted, piv, masks, big, alive, active, fresh, mode,
                  previous, done, q_scale, p_scale, pivot_threshold, limits, plan, status,
                  factorizations, fallbacks):
    """Newton's iteration of the step for the ``active`` lanes, from the unknowns in rows u ..
    u + size - 1 of ``w`` (see :func:`_lanes_block`, which owns the arrays): a lane stops
    with ``done[lane]`` = its iteration count, or with ``alive[lane]`` False and its
    ``status`` (singular matrix, increment not finite), or still ``active`` after the last
    iteration. A lane's factors are static (``mode`` 0), static with the trailing block
    factorised with partial pivoting (1: its Schur complement, kept in ``schur``, in
    ``lu_pivoted[lane]``), or the whole matrix with partial pivoting (2)."""
    tolerance, max_iterations, contraction, refactor_above, stagnation_level = limits
    n_w, residual, overrides, jacobian, predictor, row_order, column_order, exact, trailing, \
        elimination, entries, schur_entries = plan
    diag, pairs, second_phase, pair_ops, single_ops, forward_ptr, forward, backward_ptr, \
        backward = elimination
    e_row, e_col = entries
    s_entry, s_row, s_col = schur_entries
    last_pair = pairs.shape[0] - 1
    j_const, j_ptr, j_coef, j_var = jacobian
    for iteration in range(1, max_iterations + 1):
        refactor = False
        everyone = True
        for lane in range(lanes):
            take = active[lane] and fresh[lane]
            masks[1, lane] = 1.0 if take else 0.0
            refactor |= take
            everyone &= take
        if refactor:
            _v_assemble(work, w, j_const, j_ptr, j_coef, j_var)
            _v_fill(ok, 0, 1.0)
            _v_fill(ok, 1, 1.0)
            _lanes_sparse_lu(work, ok, 0, column_max, inverse, pivot_threshold, exact,
                             trailing, diag, pairs, 0, second_phase, pair_ops, single_ops)
            for t in range(s_entry.size):      # the Schur complement of the leading block
                _v_copy(schur, t, work, s_entry[t])
            _lanes_sparse_lu(work, ok, 1, column_max, inverse, pivot_threshold, trailing,
                             size, diag, pairs, second_phase, last_pair, pair_ops, single_ops)
            if everyone:        # the usual case: the new factors are every lane's
                lu, work = work, lu
            else:
                for e in range(e_row.size):
                    _v_copy_where(lu, e, work, e, masks, 1)
            whole = False
            for lane in range(lanes):
                if masks[1, lane] != 0.0:
                    factorizations[first + lane] += 1
                    mode[lane] = 2 if ok[0, lane] == 0.0 else 1 if ok[1, lane] == 0.0 else 0
                    whole |= mode[lane] == 2
            if whole:   # the matrix again (work is free now)
                _v_assemble(work, w, j_const, j_ptr, j_coef, j_var)
            for lane in range(lanes):
                if not (masks[1, lane] != 0.0 and mode[lane] > 0):
                    continue
                k = first + lane
                fallbacks[k] += 1
                dense = lu_pivoted[lane]
                dense[:] = 0.0
                if mode[lane] == 1:
                    for t in range(s_entry.size):
                        dense[s_row[t], s_col[t]] = schur[t, lane]
                    factored = _lu_factor(dense[:size - trailing, :size - trailing],
                                          piv[lane, :size - trailing])
                else:
                    for e in range(e_row.size):
                        dense[e_row[e], e_col[e]] = work[e, lane]
                    factored = _lu_factor(dense, piv[lane])
                if not factored:
                    status[k] = SINGULAR
                    alive[lane] = False
                    active[lane] = False
        _lanes_residual(res, uv, w, residual, overrides)
        for j in range(size):
            _v_neg(rhs, j, res, row_order[j])
        pending = rhs.copy() if _any_mode(active, mode, 2) else rhs
        _lanes_forward(lu, rhs, forward_ptr, forward, 0, trailing)
        trailing_pivoted = _any_mode(active, mode, 1)
        if trailing_pivoted:
            for j in range(trailing, size):
                _v_copy(tail, j - trailing, rhs, j)
        _lanes_forward(lu, rhs, forward_ptr, forward, trailing, size)
        _lanes_backward(lu, rhs, diag, backward_ptr, backward, trailing, size)
        if trailing_pivoted:
            for lane in range(lanes):
                if active[lane] and mode[lane] == 1:
                    for j in range(trailing, size):
                        rhs[j, lane] = tail[j - trailing, lane]
                    _lu_solve(lu_pivoted[lane, :size - trailing, :size - trailing],
                              piv[lane, :size - trailing], rhs[trailing:, lane])
        _lanes_backward(lu, rhs, diag, backward_ptr, backward, 0, trailing)
        for lane in range(lanes):
            if active[lane] and mode[lane] == 2:
                for j in range(size):
                    rhs[j, lane] = pending[j, lane]
                _lu_solve(lu_pivoted[lane], piv[lane], rhs[:, lane])
        # update the iterating lanes; big: |dq|, |dp| (inf if not finite), |q1|, |p1|
        for lane in range(lanes):
            masks[0, lane] = 1.0 if active[lane] else 0.0
        for j in range(3):
            _v_fill(big, j, 0.0)
        _v_fill(big, 3, 1.0)
        for j in range(size):
            column = column_order[j]
            _v_add_where(w, u + column, rhs, j, masks, 0)
            _v_flag_nonfinite(big, 0, rhs, j)
            if column < n:
                _v_abs_max(big, 0, rhs, j)
            elif column < 2 * n:
                _v_abs_max(big, 1, rhs, j)
        for i in range(n):
            _v_abs_max(big, 2, w, u + i)
            _v_abs_max(big, 3, w, u + n + i)
        any_active = False
        for lane in range(lanes):
            if not active[lane]:
                continue
            k = first + lane
            if big[0, lane] == np.inf or not big[1, lane] < np.inf:
                status[k] = NOT_FINITE
                alive[lane] = False
                active[lane] = False
                continue
            step_increment = max(big[0, lane] / max(q_scale[lane], big[2, lane]),
                                 big[1, lane] / max(p_scale[lane], big[3, lane]))
            if step_increment <= tolerance or (
                    fresh[lane] and step_increment <= stagnation_level
                    and step_increment > 0.5 * previous[lane]):
                done[lane] = iteration
                active[lane] = False
                continue
            fresh[lane] = (step_increment > contraction * previous[lane]
                           or step_increment > refactor_above)
            previous[lane] = step_increment
            any_active = True
        if not any_active:
            break


@njit(cache=True, error_model="numpy")
def _lanes_block(first, lanes, n, pivot_threshold, q_out, p_out, scales, limits,
                 correction_order, lag, coefficients, plan, status, iterations,
                 factorizations, failed_step, fallbacks, retries):
    """Every step of members first .. first + lanes - 1 (see :func:`run_lanes`). The lane
    count is an argument (``lanes == LANES``) for the loops over lanes: see :data:`LANES`."""
    length_scale, p_floor = scales
    n_w, overrides, predictor, row_order, trailing = plan[0], plan[2], plan[4], plan[5], plan[8]
    e_row, s_entry = plan[10][0], plan[11][0]
    v_const, v_ptr, v_coef, v_var = predictor
    count, steps = q_out.shape[0], q_out.shape[1] - 1
    size = row_order.size
    # lane state: alive (a member that has not failed), active (still iterating this step)
    alive = np.zeros(lanes, dtype=np.bool_)
    for lane in range(lanes):
        alive[lane] = first + lane < count
        if alive[lane]:
            status[first + lane] = CONVERGED
            failed_step[first + lane] = -1
    active = np.zeros(lanes, dtype=np.bool_)
    corrected = np.zeros(lanes, dtype=np.bool_)   # the guess has the extrapolated defect
    fresh = np.zeros(lanes, dtype=np.bool_)
    mode = np.zeros(lanes, dtype=np.int64)   # how the lane's factors were made
    ok = np.zeros((2, lanes))        # 1.0 / 0.0: static pivots accepted (leading, trailing)
    previous, done = np.zeros(lanes), np.zeros(lanes, dtype=np.int64)
    q_scale, p_scale = np.zeros(lanes), np.zeros(lanes)
    masks = np.zeros((2, lanes))     # 1.0 / 0.0 rows: 0 active, 1 takes new factors
    big = np.zeros((4, lanes))
    # lane variables: w = (q0, p0, x, 1) of the equations, v = (q0, p0, lambda, gamma, 1)
    # of the predictor
    w = np.zeros((n_w + 1, lanes))
    v = np.zeros((size + 1, lanes))
    _v_fill(w, n_w, 1.0)
    _v_fill(v, size, 1.0)
    u = 2 * n  # the unknowns x are rows u .. u + size - 1 of w
    raw = np.zeros((size, lanes))
    start = np.zeros((n, lanes))     # the guess of q1 (Newton overwrites w)
    solution, start_lane, state = np.zeros(n), np.zeros(n), np.zeros(n)
    far_floor = FAR_ROOT_FLOOR * length_scale
    res = np.zeros((size, lanes))
    rhs = np.zeros((size, lanes))
    uv = np.zeros((max(overrides[0].size - 1, 1), lanes))
    lu = np.zeros((e_row.size, lanes))
    work = np.zeros((e_row.size, lanes))
    column_max, inverse = np.zeros((size, lanes)), np.zeros((size, lanes))
    schur = np.zeros((max(s_entry.size, 1), lanes))   # the trailing Schur complement
    tail = np.zeros((max(size - trailing, 1), lanes))
    lu_pivoted = np.zeros((lanes, size, size))
    piv = np.zeros((lanes, size), dtype=np.int64)
    # predictor defects (solution - guess) of the last (order + 1) lag steps, newest last
    defects = np.zeros((max((correction_order + 1) * lag, 1), size, lanes))
    defect_count = 0
    # the multipliers of the last step, which the predictor takes one step later when the
    # scheme's multipliers alternate (lag 2, see WarmStart)
    latest = np.zeros((size - 2 * n, lanes))
    for s in range(steps):
        anyone = -1
        for lane in range(lanes):
            if alive[lane]:
                anyone = lane
        if anyone < 0:
            break
        for lane in range(lanes):
            # lanes without a live member repeat a live one (finite, never written back)
            k = first + lane if alive[lane] else first + anyone
            big_q, big_p = 0.0, 0.0
            for i in range(n):
                w[i, lane] = v[i, lane] = q_out[k, s, i]
                w[n + i, lane] = v[n + i, lane] = p_out[k, s, i]
                big_q = max(big_q, abs(w[i, lane]))
                big_p = max(big_p, abs(w[n + i, lane]))
            q_scale[lane] = max(big_q, length_scale)
            p_scale[lane] = max(big_p, p_floor)
            if not alive[lane]:
                for r in range(2 * n, size):
                    v[r, lane] = v[r, anyone]
                    latest[r - 2 * n, lane] = latest[r - 2 * n, anyone]
        # the explicit predictor of the single runs, then its extrapolated defect
        _v_assemble(raw, v, v_const, v_ptr, v_coef, v_var)
        for j in range(size):
            _v_copy(w, u + j, raw, j)
        if correction_order >= 0:
            _lanes_correct_guess(w, n, size, defects, defect_count, correction_order, lag,
                                 coefficients, corrected)
        for i in range(n):
            _v_copy(start, i, w, u + i)
        for lane in range(lanes):
            active[lane] = alive[lane]
            fresh[lane] = True
            previous[lane] = np.inf
            done[lane] = 0
        for attempt in range(2):
            _lanes_newton(first, lanes, n, u, size, w, res, rhs, uv, lu, work, ok,
                          column_max, inverse, schur, tail, lu_pivoted, piv, masks, big, alive,
                          active, fresh, mode, previous, done, q_scale, p_scale,
                          pivot_threshold,
                          limits, plan, status, factorizations, fallbacks)
            # a lane whose corrected guess failed starts once more from the predictor's
            # own guess, as a single run retries from another guess
            retry = False
            for lane in range(lanes):
                k = first + lane
                if k >= count:
                    continue
                unsolved = ((alive[lane] and (active[lane] or done[lane] == 0))
                            or (not alive[lane] and status[k] != CONVERGED
                                and failed_step[k] < 0))
                active[lane] = False
                if attempt == 0 and corrected[lane] and unsolved:
                    alive[lane], active[lane], fresh[lane] = True, True, True
                    status[k], previous[lane], done[lane] = CONVERGED, np.inf, 0
                    for j in range(size):
                        w[u + j, lane] = raw[j, lane]
                    for i in range(n):
                        start[i, lane] = raw[i, lane]
                    retries[k] += 1
                    retry = True
            if not retry:
                break
        for lane in range(lanes):
            if not alive[lane]:
                continue
            k = first + lane
            if done[lane] == 0:
                status[k] = NOT_CONVERGED
                alive[lane] = False
                continue
            for i in range(n):
                solution[i], start_lane[i], state[i] = w[u + i, lane], start[i, lane], v[i, lane]
            if _far_from_guess(solution, start_lane, state, far_floor,
                               v[2 * n:2 * n + (size - 2 * n) // 2, lane], done[lane]):
                status[k] = FAR_FROM_GUESS  # its single run redoes the step (see mbs.ensemble)
                alive[lane] = False
                continue
            iterations[k, s] = done[lane]
            for i in range(n):
                q_out[k, s + 1, i] = w[u + i, lane]
                p_out[k, s + 1, i] = w[u + n + i, lane]
            for r in range(2 * n, size):     # the multipliers of the next steps
                v[r, lane] = w[u + r, lane] if lag == 1 else latest[r - 2 * n, lane]
                latest[r - 2 * n, lane] = w[u + r, lane]
        # the first lag steps start from zero multipliers: their defects are not the smooth
        # predictor error (see WarmStart.startup_defects)
        if correction_order >= 0 and s >= lag:
            if defect_count == defects.shape[0]:  # drop the oldest
                for row in range(defect_count - 1):
                    defects[row, :, :] = defects[row + 1]
                defect_count -= 1
            newest = defects[defect_count]
            for lane in range(lanes):
                for j in range(size):
                    newest[j, lane] = w[u + j, lane] - raw[j, lane]
            defect_count += 1
        for lane in range(lanes):
            k = first + lane
            if k < count and status[k] != CONVERGED and failed_step[k] < 0:
                failed_step[k] = s


@njit(cache=True)
def _any_mode(active, mode, value):
    """Whether an iterating lane has factors of the given ``mode`` (see
    :func:`_lanes_newton`)."""
    return np.any(active & (mode == value))


@njit(cache=True, parallel=True, error_model="numpy")
def run_lanes(lanes, n, pivot_threshold, q_out, p_out, scales, limits, correction_order, lag,
              coefficients, plan, status, iterations, factorizations, failed_step,
              fallbacks, retries):
    """Every step of every member, ``lanes`` members per SIMD block and the blocks in
    parallel, for the step equations in ``plan`` (:class:`mbs.backends.ensemble_plan.LanePlan`
    without its counts; n coordinates, unknowns (q1, p1, lambda, gamma)).

    Row 0 of ``q_out``, ``p_out`` (K, N + 1, n) holds the initial states; rows 1..N are
    written. Each step starts from the explicit predictor of the single runs with the
    multipliers of ``lag`` steps before (1, or 2 for schemes whose multipliers alternate;
    zero at the start), corrected by the extrapolated defects of every ``lag``-th past step
    of the member, of degree ``correction_order`` (-1: none; see
    ``Solver.predictor_correction``; ``coefficients`` is
    :data:`mbs.engine.defects.COEFFICIENT_TABLE`), and runs exact Newton that keeps its
    factors once the relative increment is below ``refactor_above`` and contracts by
    ``contraction`` (:func:`mbs.engine.newton.newton`; ``limits`` = (tolerance,
    max_iterations, contraction, refactor_above, stagnation_level)). The increments of q and
    p are relative to max(|q0|, length scale) and max(|p0|, p floor) (``scales``) or the
    iterate, whichever is larger. A failing member stops: ``status[k]`` (codes above),
    ``failed_step[k]`` say why; the others go on. The Newton
    matrices are assembled entry by entry and factorised without row exchanges in the plan's
    pivot order (:func:`_lanes_sparse_lu`); for a member whose static pivots fail the
    ``pivot_threshold`` test the Schur complement of the trailing block (the multipliers) is
    factorised with partial pivoting, or the whole matrix if the leading pivots fail
    (``fallbacks[k]`` counts those factorisations). A member whose iteration from the
    corrected guess fails starts once more from the predictor's own guess (``retries[k]``
    counts those steps); one whose step converges farther from its guess than the step
    moves stops with FAR_FROM_GUESS (a possible far root, which its single run redoes from
    the "advanced" guess)."""
    if lanes != LANES:
        raise ValueError("run_lanes: lanes must be LANES (the width of the row operations)")
    count = q_out.shape[0]
    blocks = (count + lanes - 1) // lanes
    # the parallel loop takes arrays, not tuples of arrays: the plan is unpacked here and
    # packed again in the loop body
    n_w, residual, overrides, jacobian, predictor, rows, columns, exact, trailing, \
        elimination, entries, schur = plan
    r0, r1, r2, r3 = residual
    o0, o1, o2, o3, o4, o5, o6 = overrides
    j0, j1, j2, j3 = jacobian
    v0, v1, v2, v3 = predictor
    e0, e1, e2, e3, e4, e5, e6, e7, e8 = elimination
    f0, f1 = entries
    s0, s1, s2 = schur
    for b in prange(blocks):
        _lanes_block(b * lanes, lanes, n, pivot_threshold, q_out, p_out, scales, limits,
                     correction_order, lag, coefficients,
                     (n_w, (r0, r1, r2, r3), (o0, o1, o2, o3, o4, o5, o6), (j0, j1, j2, j3),
                      (v0, v1, v2, v3), rows, columns, exact, trailing,
                      (e0, e1, e2, e3, e4, e5, e6, e7, e8), (f0, f1), (s0, s1, s2)),
                     status, iterations, factorizations, failed_step, fallbacks,
                     retries)
