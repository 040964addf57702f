"""Whole steps of the stage schemes in the compiled kernel (see :mod:`mbs.backends.compiled`).

A step of constrained Lobatto IIIA-IIIB (:class:`~mbs.solvers.lobatto.Lobatto`) is, besides
Newton on its tensor form, a guess from the previous step's stage values, a defect correction,
the Newton scales and the step's outputs: a few vector operations that cost more in Python
than an iteration of the kernel. :func:`run_stage_steps` runs blocks of such steps in one
call, with exactly the operations of :meth:`Lobatto.step`; a single step of a run on the
compiled backend is a block of one, so that blocks, single steps, streaming and resume give
the same numbers bitwise.
"""

from __future__ import annotations

import numpy as np

from mbs.backends.compiled import (
    CONVERGED,
    _correct_guess,
    _jit,
    _keep_defect,
    _lu_factor,
    _lu_solve,
    _newton_step,
    _step_buffers,
    _unroll_defects,
)
from mbs.engine.defects import COEFFICIENT_TABLE, FIT_RIDGE, SMALLEST_FITTED_SCALE


@_jit
def _fitted_correction(x, defects, defect_count, oldest, order, blocks, correction, gram,
                       rhs, pivots):
    """x += :func:`mbs.engine.defects.fitted_prediction` of the last 2 ``order`` defects of
    the ring ``defects`` (logical row 0, the oldest, at ring row ``oldest``), per block
    ``blocks[b]:blocks[b + 1]``; ``gram`` (r, r), ``rhs`` (r,), ``pivots`` are scratch."""
    capacity = defects.shape[0]
    first = oldest + defect_count - 2 * order  # ring row of history[0] (before wrapping)
    for b in range(blocks.shape[0] - 1):
        low, high = blocks[b], blocks[b + 1]
        gram[:] = 0.0
        rhs[:] = 0.0
        for target in range(order, 2 * order):
            t_row = (first + target) % capacity
            for i in range(order):
                i_row = (first + target - 1 - i) % capacity
                s = 0.0
                for c in range(low, high):
                    s += defects[i_row, c] * defects[t_row, c]
                rhs[i] += s
                for j in range(i, order):
                    j_row = (first + target - 1 - j) % capacity
                    s = 0.0
                    for c in range(low, high):
                        s += defects[i_row, c] * defects[j_row, c]
                    gram[i, j] += s
        scale = 0.0
        for i in range(order):
            scale += gram[i, i]
            for j in range(i):
                gram[i, j] = gram[j, i]
        scale /= order
        for c in range(low, high):
            correction[c] = 0.0
        if not SMALLEST_FITTED_SCALE < scale < np.inf:
            continue
        for i in range(order):
            gram[i, i] += FIT_RIDGE * scale
        if not _lu_factor(gram, pivots):
            continue
        _lu_solve(gram, pivots, rhs)
        for i in range(order):
            row = (first + 2 * order - 1 - i) % capacity
            for c in range(low, high):
                correction[c] += rhs[i] * defects[row, c]
    for c in range(x.shape[0]):
        x[c] += correction[c]


@_jit
def _continue_stages(continuation, values, x, start):
    """x[start + i w + j] = sum_l continuation[i, l] values[l, j] for values (s, w): the
    previous step's stage values continued over the next step."""
    stages, width = values.shape
    for i in range(stages):
        for j in range(width):
            v = 0.0
            for previous in range(stages):
                v += continuation[i, previous] * values[previous, j]
            x[start + i * width + j] = v


@_jit
def _run_stage_steps(q_out, p_out, velocity_out, lam_out, gam_out, enforced_out,
                     iterations_out, first, count, stage_velocities, stage_multipliers, started,
                     weights, continuation, h, inverse_mass, acceleration, momentum_floor,
                     equations, limits, condensation, residual_from, work, correction_order,
                     defects, defect_count,
                     startup_defects, fit_order, fit_blocks, coefficients):
    """Steps first .. first + count - 1 of constrained Lobatto IIIA-IIIB with s stages.

    The unknowns are (V_1 .. V_s, p1, Lambda_1 .. Lambda_s) (see
    :meth:`Lobatto._equations`). Newton starts from the previous step's stage velocities
    and multipliers continued over the new step (``continuation`` (s, s), the Lagrange basis
    on the nodes evaluated at 1 + c_i; in/out arrays ``stage_velocities`` (s, n),
    ``stage_multipliers`` (s, m)), or, before the first step (``started[0]`` = 0), from
    M^-1 p at every stage and the given multipliers; p1 starts from p. With
    ``correction_order`` >= 0 the guess is corrected by the extrapolated defects (as in
    :func:`mbs.backends.compiled._run_steps`), or, with ``fit_order`` r > 0 and 2 r defects
    known, by their fitted linear prediction over the blocks ``fit_blocks``
    (:func:`_fitted_correction`). The convergence blocks are the stage velocities,
    of size max(|M^-1 p|, h ``acceleration``), and p1, of size max(|p|,
    ``momentum_floor``). ``equations``, ``limits``, ``condensation``, ``residual_from`` and
    ``work`` are the arguments of :func:`~mbs.backends.compiled._newton_step`. Outputs: q1 =
    q + h sum_i b_i V_i, p1, the last stage velocity, the first and last stage multipliers,
    the largest stage and velocity constraint rows. Returns (steps done, code of the failed
    step or CONVERGED, its residual norm, increment, iterations, LU factorisations, defect
    count, startup defects left)."""
    n = q_out.shape[1]
    stages = weights.shape[0]
    m = stage_multipliers.shape[1]
    momentum_at = stages * n
    multipliers_at = (stages + 1) * n
    n_x = multipliers_at + stages * m
    data, x, raw_guess, defect_sum, residual, shift_step, floors = _step_buffers(n, n_x, n_x)
    no_data = np.empty(0)
    velocity = np.empty(n)
    segment_lo = np.array([0, momentum_at])
    segment_hi = np.array([momentum_at, multipliers_at])
    state = work[-1]
    fit_size = max(fit_order, 1)
    gram = np.empty((fit_size, fit_size))
    fit_rhs = np.empty(fit_size)
    fit_pivots = np.empty(fit_size, dtype=np.int64)
    total_factorizations = 0
    oldest = 0
    for k in range(first, first + count):
        q0 = q_out[k]
        p0 = p_out[k]
        data[:n] = q0
        data[n:] = p0
        largest_velocity = 0.0
        for j in range(n):
            v = 0.0
            for i in range(n):
                v += inverse_mass[j, i] * p0[i]
            velocity[j] = v
            largest_velocity = max(largest_velocity, abs(v))
        if started[0]:
            _continue_stages(continuation, stage_velocities, x, 0)
            _continue_stages(continuation, stage_multipliers, x, multipliers_at)
        else:
            for i in range(stages):
                x[i * n:(i + 1) * n] = velocity
            x[multipliers_at:] = stage_multipliers.ravel()
        largest_momentum = 0.0
        for j in range(n):
            x[momentum_at + j] = p0[j]
            largest_momentum = max(largest_momentum, abs(p0[j]))
        raw_guess[:] = x
        correcting = correction_order >= 0
        if correcting and fit_order > 0 and defect_count >= 2 * fit_order:
            _fitted_correction(x, defects, defect_count, oldest, fit_order, fit_blocks,
                               defect_sum, gram, fit_rhs, fit_pivots)
        elif correcting:
            _correct_guess(x, no_data, defects, defect_count, oldest, correction_order, 1,
                           defect_sum, coefficients)
        floors[0] = max(largest_velocity, h * acceleration, 1e-300)
        floors[1] = max(largest_momentum, momentum_floor)
        state[:4] = 0.0  # state[4], a factorisation held, stays for simplified Newton
        code, iterations, norm, increment, factorizations = _newton_step(
            data, x, equations, (segment_lo, segment_hi, floors), limits, condensation,
            residual_from, work, residual, shift_step)
        if code != CONVERGED:  # the failed step is left to the caller
            _unroll_defects(defects, oldest)
            return (k - first, code, norm, increment, iterations,
                    total_factorizations + factorizations, defect_count, startup_defects)
        total_factorizations += factorizations
        defect_count, oldest, startup_defects = _keep_defect(
            correcting, startup_defects, defects, defect_count, oldest, x, raw_guess)
        for i in range(stages):
            for j in range(n):
                stage_velocities[i, j] = x[i * n + j]
            for j in range(m):
                stage_multipliers[i, j] = x[multipliers_at + i * m + j]
        started[0] = 1
        for j in range(n):
            v = 0.0
            for i in range(stages):
                v += weights[i] * x[i * n + j]
            q_out[k + 1, j] = q0[j] + h * v  # = Q_s (the last row of a is b)
            p_out[k + 1, j] = x[momentum_at + j]
            velocity_out[k, j] = x[(stages - 1) * n + j]
        position = 0.0
        for row in range(multipliers_at, multipliers_at + (stages - 1) * m):
            position = max(position, abs(residual[row]))
        hidden = 0.0
        for row in range(multipliers_at + (stages - 1) * m, n_x):
            hidden = max(hidden, abs(residual[row]))
        for j in range(m):
            lam_out[k, j] = x[multipliers_at + j]
            gam_out[k, j] = x[multipliers_at + (stages - 1) * m + j]
        enforced_out[k, 0] = position
        enforced_out[k, 1] = hidden
        iterations_out[k] = iterations
    _unroll_defects(defects, oldest)
    return count, CONVERGED, 0.0, 0.0, 0, total_factorizations, defect_count, startup_defects


def run_stage_steps(q_out, p_out, velocity_out, lam_out, gam_out, enforced_out,
                    iterations_out, first: int, count: int, scheme: tuple, newton: tuple,
                    warm: tuple) -> tuple:
    """:func:`_run_stage_steps` with its arguments grouped: ``scheme`` = (stage velocities,
    stage multipliers, started, weights b, continuation, h, M^-1 dense, acceleration,
    momentum floor), ``newton`` = (equations, limits, condensation, residual_from, work) and
    ``warm`` = (correction order, defects (capacity, n_x) oldest first, defect count, startup
    defects, fit order (0: none), fit block boundaries)."""
    return _run_stage_steps(q_out, p_out, velocity_out, lam_out, gam_out, enforced_out,
                            iterations_out, first, count, *scheme, *newton, *warm,
                            COEFFICIENT_TABLE)
