"""Compiled kernels of :func:`mbs.simulate_ensemble` (optional: needs numba).

Importing this module raises ImportError when numba is missing; :mod:`mbs.ensemble` then runs
the members one by one through :func:`mbs.simulate`. For potentials linear in q (gravity)
:func:`run_lanes` computes the whole run in one call, members in SIMD lanes (see the comment
above it). Otherwise one call of :func:`iterate` performs one Newton iteration of the
energy-momentum scheme (seed 003, (84)) for every listed member, in parallel over the
members:

* members flagged ``refresh`` first rebuild and LU-factorise their condensed Newton matrix at
  the current iterate (p^{n+1} eliminated exactly with the first block row, whose p-block is
  -1/2 I: unknowns (q1, lambda, gamma), n + 2m instead of 2n + 2m);
* then the residual (84a,b,d,e) is evaluated, the condensed system solved with the member's
  (possibly older) factors, the p increment recovered and the relative increments of q and p
  returned, measured as in :func:`mbs.solvers.newton.newton`.

Constraint rows are the quadratic table of the model in coordinate form (entries c q_i q_j,
b q_i), values g(q1) from its factored form (differences before products, as
``QuadraticTable.value``); mass matrices in CSR form.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from mbs.ensemble_rows import (
    LANES,
    _v_abs_max,
    _v_add,
    _v_add_cdot,
    _v_add_cmul,
    _v_add_half_sum,
    _v_add_mul,
    _v_add_scaled,
    _v_add_where,
    _v_assemble,
    _v_copy,
    _v_copy_where,
    _v_diff,
    _v_diff_div_add,
    _v_div,
    _v_div_sub,
    _v_dot_div,
    _v_dp,
    _v_fill,
    _v_flag_nonfinite,
    _v_half_sum,
    _v_mul,
    _v_neg,
    _v_pivot_ok,
    _v_predict,
    _v_rhs_d,
    _v_rhs_q,
    _v_sub,
    _v_sub_mul,
    _v_sub_mul2_run,
    _v_sub_mul_run,
    _v_sum_scaled,
)
from mbs.solvers.compiled import (  # the pivoted per-member fallback
    _lu_factor,
    _lu_solve,
)


@njit(cache=True)
def _factor(k, h, q0, p0, q1, p1, lam, gam, dvjac, jac_step, qr, qi, qj, qc, lr, li, lc,
            m_ptr, m_idx, m_val, mi_ptr, mi_idx, mi_val, a, piv, hg, gm, g1, vec, wnn, wmn):
    """Condensed Newton matrix of member k at the current iterate, LU-factorised in place
    (``a[k]``); keeps H(gamma), G(q_mid), G(q1) for the right-hand sides of later iterations.
    ``vec``, ``wnn``, ``wmn`` are workspaces. False if the matrix is singular."""
    n, m = q0.shape[1], lam.shape[1]
    size = n + 2 * m
    for i in range(n):
        vec[k, 0, i] = 0.5 * (q0[k, i] + q1[k, i])   # q_mid
        vec[k, 1, i] = 0.5 * (p0[k, i] + p1[k, i])   # p_mid
        vec[k, 4, i] = p1[k, i]
    for i in range(n):                                 # v_mid, v1
        s, t = 0.0, 0.0
        for e in range(mi_ptr[i], mi_ptr[i + 1]):
            s += mi_val[e] * vec[k, 1, mi_idx[e]]
            t += mi_val[e] * vec[k, 4, mi_idx[e]]
        vec[k, 2, i] = s
        vec[k, 3, i] = t
    hg[k] = 0.0
    wnn[k, 0] = 0.0       # H(lam)
    gm[k] = 0.0
    g1[k] = 0.0
    wmn[k, 0] = 0.0       # HV(v_mid)
    wmn[k, 1] = 0.0       # HV(v1)
    for e in range(qr.size):
        r, i, j, c = qr[e], qi[e], qj[e], qc[e]
        hg[k, i, j] += c * gam[k, r]
        hg[k, j, i] += c * gam[k, r]
        wnn[k, 0, i, j] += c * lam[k, r]
        wnn[k, 0, j, i] += c * lam[k, r]
        gm[k, r, i] += c * vec[k, 0, j]
        gm[k, r, j] += c * vec[k, 0, i]
        g1[k, r, i] += c * q1[k, j]
        g1[k, r, j] += c * q1[k, i]
        wmn[k, 0, r, i] += c * vec[k, 2, j]
        wmn[k, 0, r, j] += c * vec[k, 2, i]
        wmn[k, 1, r, i] += c * vec[k, 3, j]
        wmn[k, 1, r, j] += c * vec[k, 3, i]
    for e in range(lr.size):
        gm[k, lr[e], li[e]] += lc[e]
        g1[k, lr[e], li[e]] += lc[e]
    # W = M^-1 H(gam) (wnn[k, 1]); with M^-1 symmetric: V = G1 M^-1 (wmn[k, 2]),
    # U^T = G_mid M^-1 (wmn[k, 3])
    wnn[k, 1] = 0.0
    wmn[k, 2] = 0.0
    wmn[k, 3] = 0.0
    for i in range(n):
        for e in range(mi_ptr[i], mi_ptr[i + 1]):
            c, col = mi_val[e], mi_idx[e]
            for j in range(n):
                wnn[k, 1, i, j] += c * hg[k, col, j]
            for j in range(m):
                wmn[k, 3, j, i] += c * gm[k, j, col]
                wmn[k, 2, j, i] += c * g1[k, j, col]
    a[k] = 0.0
    two_h = 2.0 / h
    # rows b: D_f + H(lam)/2 + 2M/h^2 - H(gam) M^-1 H(gam)/2 | G_mid^T | HV_mid^T - 2/h G_mid^T
    #         - H(gam) M^-1 G_mid^T
    for i in range(n):
        for j in range(n):
            a[k, i, j] = 0.5 * wnn[k, 0, i, j]
            if jac_step:
                a[k, i, j] += dvjac[k, i, j]
        for e in range(m_ptr[i], m_ptr[i + 1]):
            a[k, i, m_idx[e]] += 2.0 * m_val[e] / (h * h)
        for j in range(m):
            a[k, i, n + j] = gm[k, j, i]
            a[k, i, n + m + j] = wmn[k, 0, j, i] - two_h * gm[k, j, i]
        for col in range(n):
            c = hg[k, i, col]
            if c != 0.0:
                for j in range(n):
                    a[k, i, j] -= 0.5 * c * wnn[k, 1, col, j]
                for j in range(m):
                    a[k, i, n + m + j] -= c * wmn[k, 3, j, col]
    # rows c: G1
    for r in range(m):
        for j in range(n):
            a[k, n + r, j] = g1[k, r, j]
    # rows d: HV1 + 2/h G1 - G1 M^-1 H(gam) | 0 | -2 G1 M^-1 G_mid^T
    for r in range(m):
        row = n + m + r
        for j in range(n):
            a[k, row, j] = wmn[k, 1, r, j] + two_h * g1[k, r, j]
        for col in range(n):
            c = wmn[k, 2, r, col]
            if c != 0.0:
                for j in range(n):
                    a[k, row, j] -= c * hg[k, col, j]
                for j in range(m):
                    a[k, row, n + m + j] -= 2.0 * c * gm[k, j, col]
    # LU with partial pivoting, in place
    for c in range(size):
        p = c
        big = abs(a[k, c, c])
        for i in range(c + 1, size):
            if abs(a[k, i, c]) > big:
                big = abs(a[k, i, c])
                p = i
        piv[k, c] = p
        if big == 0.0 or not np.isfinite(big):
            return False
        if p != c:
            for j in range(size):
                t = a[k, c, j]
                a[k, c, j] = a[k, p, j]
                a[k, p, j] = t
        inv = 1.0 / a[k, c, c]
        for i in range(c + 1, size):
            f = a[k, i, c] * inv
            a[k, i, c] = f
            if f != 0.0:
                for j in range(c + 1, size):
                    a[k, i, j] -= f * a[k, c, j]
    return True


@njit(cache=True)
def _step(k, a_row, h, q0, p0, q1, p1, lam, gam, dv, dv_step, q_scale, p_scale, qr, qi, qj,
          qc, lr, li, lc, m_ptr, m_idx, m_val, mi_ptr, mi_idx, mi_val, use_factored, fr, fs,
          u_ptr, u_idx, u_val, u_const, v_ptr, v_idx, v_val, v_const, explicit, const, lu,
          piv, hg, gm, g1, vec, increment, status):
    """Residual (84a, b, d, e) of member k, condensed solve with its stored factors, update
    of (q1, p1, lambda, gamma) and the relative increment."""
    n, m = q0.shape[1], lam.shape[1]
    size = n + 2 * m
    d = a_row * dv_step
    # vec rows: 0 q_mid, 1 p_mid, 2 v_mid, 3 v1, 4 M dq, 5 G_mid^T gam, 6 G_mid^T lam,
    # 7 H(gam) v_mid, 8 residual (2n + 2m), 9 rhs / solution, 10 M^-1 r_a, 11 q1 - q0
    for i in range(n):
        vec[k, 0, i] = 0.5 * (q0[k, i] + q1[k, i])
        vec[k, 1, i] = 0.5 * (p0[k, i] + p1[k, i])
        vec[k, 11, i] = q1[k, i] - q0[k, i]
        vec[k, 5, i] = 0.0
        vec[k, 6, i] = 0.0
        vec[k, 7, i] = 0.0
    for i in range(n):
        s, t = 0.0, 0.0
        for e in range(mi_ptr[i], mi_ptr[i + 1]):
            s += mi_val[e] * vec[k, 1, mi_idx[e]]
            t += mi_val[e] * p1[k, mi_idx[e]]
        vec[k, 2, i] = s
        vec[k, 3, i] = t
        s = 0.0
        for e in range(m_ptr[i], m_ptr[i + 1]):
            s += m_val[e] * vec[k, 11, m_idx[e]]
        vec[k, 4, i] = s
    rd = 2 * n + m
    for r in range(m):
        vec[k, 8, rd + r] = 0.0
    for e in range(qr.size):
        r, i, j, c = qr[e], qi[e], qj[e], qc[e]
        gk, lk = c * gam[k, r], c * lam[k, r]
        vec[k, 5, i] += gk * vec[k, 0, j]
        vec[k, 5, j] += gk * vec[k, 0, i]
        vec[k, 6, i] += lk * vec[k, 0, j]
        vec[k, 6, j] += lk * vec[k, 0, i]
        vec[k, 7, i] += gk * vec[k, 2, j]
        vec[k, 7, j] += gk * vec[k, 2, i]
        vec[k, 8, rd + r] += c * (q1[k, j] * vec[k, 3, i] + q1[k, i] * vec[k, 3, j])
    for e in range(lr.size):
        r, i, c = lr[e], li[e], lc[e]
        vec[k, 5, i] += c * gam[k, r]
        vec[k, 6, i] += c * lam[k, r]
        vec[k, 8, rd + r] += c * vec[k, 3, i]
    for i in range(n):
        vec[k, 8, i] = vec[k, 4, i] / h - vec[k, 1, i] - vec[k, 5, i]
        vec[k, 8, n + i] = ((p1[k, i] - p0[k, i]) / h + dv[d, i] + vec[k, 6, i]
                            + vec[k, 7, i])
    # g(q1): factored form (differences before products) when the table has it
    rc = 2 * n
    if use_factored:
        for r in range(m):
            vec[k, 8, rc + r] = explicit[r]
        for t in range(fr.size):
            dot = 0.0
            for x in range(3):
                row = 3 * t + x
                u = u_const[t, x]
                for e in range(u_ptr[row], u_ptr[row + 1]):
                    u += u_val[e] * q1[k, u_idx[e]]
                v = v_const[t, x]
                for e in range(v_ptr[row], v_ptr[row + 1]):
                    v += v_val[e] * q1[k, v_idx[e]]
                dot += u * v
            vec[k, 8, rc + fr[t]] += fs[t] * dot
    else:
        for r in range(m):
            vec[k, 8, rc + r] = const[r]
        for e in range(qr.size):
            vec[k, 8, rc + qr[e]] += qc[e] * q1[k, qi[e]] * q1[k, qj[e]]
        for e in range(lr.size):
            vec[k, 8, rc + lr[e]] += lc[e] * q1[k, li[e]]
    # right-hand side of the condensed system from the stored blocks of its matrix
    for i in range(n):
        s = 0.0
        for e in range(mi_ptr[i], mi_ptr[i + 1]):
            s += mi_val[e] * vec[k, 8, mi_idx[e]]
        vec[k, 10, i] = s
    for i in range(n):
        s = -vec[k, 8, n + i] - 2.0 * vec[k, 8, i] / h
        for j in range(n):
            s -= hg[k, i, j] * vec[k, 10, j]
        vec[k, 9, i] = s
    for j in range(m):
        vec[k, 9, n + j] = -vec[k, 8, rc + j]
        s = -vec[k, 8, rd + j]
        for col in range(n):
            s -= 2.0 * g1[k, j, col] * vec[k, 10, col]
        vec[k, 9, n + m + j] = s
    # solve with the LU factors
    for c in range(size):
        p = piv[k, c]
        if p != c:
            t = vec[k, 9, c]
            vec[k, 9, c] = vec[k, 9, p]
            vec[k, 9, p] = t
    for i in range(size):
        s = vec[k, 9, i]
        for j in range(i):
            s -= lu[k, i, j] * vec[k, 9, j]
        vec[k, 9, i] = s
    for i in range(size - 1, -1, -1):
        s = vec[k, 9, i]
        for j in range(i + 1, size):
            s -= lu[k, i, j] * vec[k, 9, j]
        vec[k, 9, i] = s / lu[k, i, i]
    # dp = 2 (M dq / h - H(gam) dq / 2 - G_mid^T dgam + r_a)
    big_dq, big_dp, big_q, big_p = 0.0, 0.0, 0.0, 0.0
    finite = True
    for i in range(n):
        s = 0.0
        for e in range(m_ptr[i], m_ptr[i + 1]):
            s += m_val[e] * vec[k, 9, m_idx[e]]
        s = s / h + vec[k, 8, i]
        for j in range(n):
            s -= 0.5 * hg[k, i, j] * vec[k, 9, j]
        for j in range(m):
            s -= gm[k, j, i] * vec[k, 9, n + m + j]
        vec[k, 11, i] = 2.0 * s
    for i in range(n):
        dq, dp = vec[k, 9, i], vec[k, 11, i]
        if not (np.isfinite(dp) and np.isfinite(dq)):
            finite = False
        q1[k, i] += dq
        p1[k, i] += dp
        big_dq = max(big_dq, abs(dq))
        big_dp = max(big_dp, abs(dp))
        big_q = max(big_q, abs(q1[k, i]))
        big_p = max(big_p, abs(p1[k, i]))
    for j in range(m):
        dl, dg = vec[k, 9, n + j], vec[k, 9, n + m + j]
        if not (np.isfinite(dl) and np.isfinite(dg)):
            finite = False
        lam[k, j] += dl
        gam[k, j] += dg
    if not finite:
        status[k] = 2
        increment[k] = np.inf
        return
    increment[k] = max(big_dq / max(q_scale[k], big_q), big_dp / max(p_scale[k], big_p))


@njit(cache=True, parallel=True)
def iterate(active, refresh, h, q0, p0, q1, p1, lam, gam, dv, dv_step, dvjac, jac_step,
            q_scale, p_scale, qr, qi, qj, qc, lr, li, lc, m_ptr, m_idx, m_val, mi_ptr,
            mi_idx, mi_val, use_factored, fr, fs, u_ptr, u_idx, u_val, u_const, v_ptr, v_idx,
            v_val, v_const, explicit, const, lu, piv, hg, gm, g1, vec, wnn, wmn, increment,
            status):
    """One Newton iteration for members ``active``, with fresh factors where ``refresh``
    (see module doc).

    ``dv`` holds D^G V of active member a in row ``a * dv_step`` (dv_step = 0: one constant
    row), ``dvjac`` the Jacobian of member k in ``k * jac_step`` (jac_step = 0: none);
    ``status[k]`` becomes 1 for a singular matrix, 2 for a non-finite increment.
    """
    for a in prange(active.size):
        k = active[a]
        status[k] = 0
        if refresh[k] and not _factor(k, h, q0, p0, q1, p1, lam, gam, dvjac, jac_step, qr, qi,
                                      qj, qc, lr, li, lc, m_ptr, m_idx, m_val, mi_ptr, mi_idx,
                                      mi_val, lu, piv, hg, gm, g1, vec, wnn, wmn):
            status[k] = 1
            increment[k] = np.inf
            continue
        _step(k, a, h, q0, p0, q1, p1, lam, gam, dv, dv_step, q_scale, p_scale, qr, qi, qj,
              qc, lr, li, lc, m_ptr, m_idx, m_val, mi_ptr, mi_idx, mi_val, use_factored, fr,
              fs, u_ptr, u_idx, u_val, u_const, v_ptr, v_idx, v_val, v_const, explicit, const,
              lu, piv, hg, gm, g1, vec, increment, status)


#: Member status codes of :func:`run_lanes`.
CONVERGED, SINGULAR, NOT_FINITE, NOT_CONVERGED = 0, 1, 2, 3


# -- members in SIMD lanes ---------------------------------------------------------------------
# The kernels below hold LANES members per array, member-innermost ((n, LANES), (nnz,
# LANES)): every arithmetic operation acts on a row of LANES values, one per member, as
# vector instructions (mbs.ensemble_rows) that reassociate nothing (each lane computes
# exactly the sequence of operations of a scalar run, so no fastmath is needed). Products
# with the constraint Jacobian and Hessians go through the quadratic table's entries (few
# per row); the condensed Newton matrix is stored, assembled, factorised and solved entry by
# entry with the structure found once per model (:func:`mbs.ensemble._lane_plan`).

#: Default of ``pivot_threshold`` (:func:`run_lanes`): a static pivot is accepted when it is
#: at least this fraction of the largest entry below it in its column (threshold pivoting:
#: the growth of the entries stays bounded); a member whose matrix fails the test is
#: factorised again with partial pivoting.
STATIC_PIVOT_THRESHOLD = 0.1


@njit(cache=True, error_model="numpy")
def _lanes_jt(out, qv, y, qr, qi, qj, qc, lr, li, lc, linear):
    """out += G(qv)^T y in every lane; without ``linear`` the quadratic part only, which
    is H(y) qv."""
    for e in range(qr.size):
        r, i, j, c = qr[e], qi[e], qj[e], qc[e]
        _v_add_cmul(out, i, c, y, r, qv, j)      # out[i] += (c y[r]) qv[j]
        _v_add_cmul(out, j, c, y, r, qv, i)
    if linear:
        for e in range(lr.size):
            _v_add_scaled(out, li[e], lc[e], y, lr[e])


@njit(cache=True, error_model="numpy")
def _lanes_j(out, qv, x, qr, qi, qj, qc, lr, li, lc, linear):
    """out += G(qv) x in every lane; without ``linear`` the quadratic part, HV(qv) x."""
    for e in range(qr.size):
        r, i, j, c = qr[e], qi[e], qj[e], qc[e]
        _v_add_cdot(out, r, c, qv, j, x, i, qv, i, x, j)   # c (qv[j] x[i] + qv[i] x[j])
    if linear:
        for e in range(lr.size):
            _v_add_scaled(out, lr[e], lc[e], x, li[e])


@njit(cache=True, error_model="numpy")
def _lanes_csr(ptr, idx, val, x, out):
    """out[i, :] = (A x)[i] in every lane for the CSR matrix A."""
    for i in range(ptr.size - 1):
        _v_fill(out, i, 0.0)
        for e in range(ptr[i], ptr[i + 1]):
            _v_add_scaled(out, i, val[e], x, idx[e])


# -- structurally sparse condensed matrices ----------------------------------------------------
# The condensed Newton matrix has a fixed structure per model (the quadratic table and the
# mass matrix patterns): :func:`mbs.ensemble._lane_plan` expands every entry once into
# monomials of the lane variables (gamma, lambda, q_mid, q1, v_mid, v1, 1), computes the
# fill of elimination without row exchanges in the static order (rows q, d, c; columns q,
# lambda, gamma) and lists the operations. The matrix and its factors are stored entry by
# entry (nnz, LANES), the fill included, in row-major order.


@njit(cache=True, error_model="numpy")
def _lanes_zero(a, rows):
    """a[:rows] = 0."""
    for i in range(rows):
        _v_fill(a, i, 0.0)


@njit(cache=True, error_model="numpy")
def _lanes_assemble(a, xv, a_const, term_ptr, term_coef, term_var):
    """The condensed matrices of every lane (nnz, LANES) from the lane variables ``xv`` with
    the assembly tables of :func:`mbs.ensemble._lane_plan` (see :func:`_v_assemble`)."""
    _v_assemble(a, xv, a_const, term_ptr, term_coef, term_var)


@njit(cache=True, error_model="numpy")
def _lanes_sparse_lu(a, ok, column_max, inverse, threshold, diag, pairs, pair_ops, single_ops):
    """LU without row exchanges of every lane of ``a`` (nnz, LANES), in place, with the
    tables of :func:`mbs.ensemble._lane_plan`: for each pair (c1, c2) of L entries of a row
    i, the multipliers (times the inverse pivots) and the updates of row i from rows c1 and
    c2, two at a time where both rows have the column (the multipliers stay in registers);
    the inverse pivot of a row once it is finished. Every entry receives the updates of
    column-by-column elimination in the same order, so the factors are those of the dense
    elimination without its structural zeros. ``ok`` (1, LANES) becomes 0.0 in lanes where a
    pivot is zero, not finite or smaller than ``threshold`` times the largest entry below
    it in its column (collected in ``column_max`` (size, LANES) as the rows pass;
    ``inverse`` (size, LANES) holds the inverse pivots). (Assembling each row just before
    its elimination instead of the whole matrix first measured the same.)"""
    size = diag.size
    for c in range(size):
        _v_fill(column_max, c, 0.0)
    for p in range(pairs.shape[0] - 1):
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
    for c in range(size):
        _v_pivot_ok(ok, 0, threshold, a, diag[c], column_max, c)


@njit(cache=True, error_model="numpy")
def _lanes_sparse_solve(lu, x, diag, forward_ptr, forward, backward_ptr, backward):
    """x <- A^-1 x in every lane with the factors of :func:`_lanes_sparse_lu`: forward
    column by column (x[t] -= L[t, j] x[j]), backward row by row (x[i] = (x[i] - U[i, j]
    x[j] ...) / U[i, i]); every x_i receives its terms in the order of the dense
    substitutions."""
    size = diag.size
    for j in range(size):
        _v_sub_mul_run(x, x, j, lu, forward, forward_ptr[j], forward_ptr[j + 1])
    for i in range(size - 1, -1, -1):
        _v_dot_div(x, i, lu, backward, backward_ptr[i], backward_ptr[i + 1], diag[i])


@njit(cache=True, error_model="numpy")
def _lanes_correct_guess(q0, p0, q1, p1, lam, gam, raw, defects, defect_count, order,
                         coefficients):
    """Keep the predictor's guess (q1, p1, lambda, gamma) in ``raw`` and add to it, lane by
    lane, the extrapolated defect of :meth:`mbs.solvers.guess.WarmStart.corrected` (same
    terms, summed term by term), unless it is larger than the predicted change of (q, p)."""
    n, m, lanes = q1.shape[0], lam.shape[0], q1.shape[1]
    for lane in range(lanes):
        for i in range(n):
            raw[i, lane] = q1[i, lane]
            raw[n + i, lane] = p1[i, lane]
        for r in range(m):
            raw[2 * n + r, lane] = lam[r, lane]
            raw[2 * n + m + r, lane] = gam[r, lane]
    usable = min(order + 1, defect_count)
    if usable == 0:
        return
    newest = defect_count - 1
    correction = np.empty(raw.shape[0])
    for lane in range(lanes):
        for j in range(raw.shape[0]):
            correction[j] = coefficients[usable, 0] * defects[newest, j, lane]
        for term in range(1, usable):
            coefficient = coefficients[usable, term]
            for j in range(raw.shape[0]):
                correction[j] = correction[j] + coefficient * defects[newest - term, j, lane]
        size = 0.0
        change = 0.0
        for i in range(n):
            size = max(size, abs(correction[i]), abs(correction[n + i]))
            change = max(change, abs(q1[i, lane] - q0[i, lane]), abs(p1[i, lane] - p0[i, lane]))
        if size > change:
            continue
        for i in range(n):
            q1[i, lane] += correction[i]
            p1[i, lane] += correction[n + i]
        for r in range(m):
            lam[r, lane] += correction[2 * n + r]
            gam[r, lane] += correction[2 * n + m + r]


@njit(cache=True, error_model="numpy")
def _lanes_block(first, lanes, pivot_threshold, h, q_out, p_out, force, force_scale,
                 length_scale, tolerance,
                 max_iterations, contraction, refactor_above, stagnation_level,
                 correction_order, coefficients, qr, qi, qj, qc, lr,
                 li, lc, m_ptr, m_idx, m_val, mi_ptr, mi_idx, mi_val, use_factored, fr, fs, u_ptr,
                 u_idx, u_val, u_const, v_ptr, v_idx, v_val, v_const, explicit, const, nv,
                 a_const, term_ptr, term_coef, term_var, diag, pairs, pair_ops,
                 single_ops, forward_ptr, forward, backward_ptr, backward, e_row, e_col,
                 increment, status, iterations, factorizations, failed_step, fallbacks):
    """Every step of members first .. first + lanes - 1 (see :func:`run_lanes`). The lane
    count is an argument (``lanes == LANES``) for the loops over lanes: see :data:`LANES`."""
    count, steps, n = q_out.shape[0], q_out.shape[1] - 1, q_out.shape[2]
    m = const.size
    size = n + 2 * m
    # lane state: alive (a member that has not failed), active (still iterating this step)
    alive = np.zeros(lanes, dtype=np.bool_)
    for lane in range(lanes):
        alive[lane] = first + lane < count
        if alive[lane]:
            status[first + lane] = CONVERGED
            failed_step[first + lane] = -1
    active = np.zeros(lanes, dtype=np.bool_)
    fresh = np.zeros(lanes, dtype=np.bool_)
    pivoted = np.zeros(lanes, dtype=np.bool_)
    ok = np.zeros((1, lanes))        # 1.0 / 0.0: static pivots accepted
    previous, done = np.zeros(lanes), np.zeros(lanes, dtype=np.int64)
    q_scale, p_scale = np.zeros(lanes), np.zeros(lanes)
    masks = np.zeros((2, lanes))     # 1.0 / 0.0 rows: 0 active, 1 takes new factors
    big = np.zeros((4, lanes))
    q0, p0, p1 = np.zeros((n, lanes)), np.zeros((n, lanes)), np.zeros((n, lanes))
    lam_prev, gam_prev = np.zeros((m, lanes)), np.zeros((m, lanes))
    # the lane variables of the matrix assembly (see _lane_plan), rows of xv: gamma, lambda,
    # q_mid, q1, v_mid, v1, 1
    xv = np.zeros((nv, lanes))
    gam, lam = xv[:m], xv[m:2 * m]
    q_mid, q1 = xv[2 * m:2 * m + n], xv[2 * m + n:2 * m + 2 * n]
    v_mid, v1 = xv[2 * m + 2 * n:2 * m + 3 * n], xv[2 * m + 3 * n:2 * m + 4 * n]
    _v_fill(xv, nv - 1, 1.0)
    # factor-time data of each lane's stored matrix: gamma, q1, q_mid
    gam_f, q1_f, qmid_f = np.zeros((m, lanes)), np.zeros((n, lanes)), np.zeros((n, lanes))
    vec = np.zeros((7, max(n, m), lanes))   # n- and m-vectors, rows named below
    p_mid, tmp, tmp2, mr, hq, dp = vec[0], vec[1], vec[2], vec[3], vec[4], vec[5]
    x = np.zeros((size, lanes))
    res = np.zeros((2 * n + 2 * m, lanes))
    ra, rb, rc, rd = 0, n, 2 * n, 2 * n + m
    res_a, res_d = res[ra:ra + n], res[rd:]
    dq, dmul = x[:n], x[n + m:]
    # condensed matrices entry by entry (see _lane_plan): the factors in use, the matrix
    # being factorised
    lu = np.zeros((e_row.size, lanes))
    work = np.zeros((e_row.size, lanes))
    column_max, inverse = np.zeros((size, lanes)), np.zeros((size, lanes))
    lu_pivoted = np.zeros((lanes, size, size))
    piv = np.zeros((lanes, size), dtype=np.int64)
    # predictor defects (q1, p1, lambda, gamma) - guess of the last order + 1 steps, newest
    # last
    unknowns = 2 * n + 2 * m
    defects = np.zeros((max(correction_order + 1, 1), unknowns, lanes))
    defect_count = 0
    raw = np.zeros((unknowns, lanes))
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
                q0[i, lane] = q_out[k, s, i]
                p0[i, lane] = p_out[k, s, i]
                big_q = max(big_q, abs(q0[i, lane]))
                big_p = max(big_p, abs(p0[i, lane]))
            q_scale[lane] = max(big_q, length_scale)
            p_scale[lane] = max(max(big_p, h * force_scale), 1e-300)
            if not alive[lane]:
                for r in range(m):
                    lam_prev[r, lane] = lam_prev[r, anyone]
                    gam_prev[r, lane] = gam_prev[r, anyone]
        # explicit predictor (see _predict): p1 = p0 - h (f + G0^T lam + H(gam) M^-1 p0),
        # q1 = q0 + h M^-1 ((p0 + p1) / 2 + G0^T gam)
        _lanes_csr(mi_ptr, mi_idx, mi_val, p0, v1)
        _lanes_zero(tmp, n)
        _lanes_zero(tmp2, n)
        _lanes_jt(tmp, q0, lam_prev, qr, qi, qj, qc, lr, li, lc, True)
        _lanes_jt(tmp, v1, gam_prev, qr, qi, qj, qc, lr, li, lc, False)
        _lanes_jt(tmp2, q0, gam_prev, qr, qi, qj, qc, lr, li, lc, True)
        for i in range(n):
            _v_predict(p1, i, h, force[0, i], p0, i, tmp, i)     # p0 - h (f + tmp)
            _v_add_half_sum(tmp2, i, 0.5, p0, i, p1, i)         # tmp2 + 0.5 (p0 + p1)
        _lanes_csr(mi_ptr, mi_idx, mi_val, tmp2, tmp)
        for i in range(n):
            _v_sum_scaled(q1, i, h, q0, i, tmp, i)               # q0 + h tmp
        for r in range(m):
            _v_copy(lam, r, lam_prev, r)
            _v_fill(gam, r, 0.0)
        if correction_order >= 0:
            _lanes_correct_guess(q0, p0, q1, p1, lam, gam, raw, defects, defect_count,
                                 correction_order, coefficients)
        for lane in range(lanes):
            active[lane] = alive[lane]
            fresh[lane] = True
            previous[lane] = np.inf
            done[lane] = 0
        for iteration in range(1, max_iterations + 1):
            for i in range(n):
                _v_half_sum(q_mid, i, 0.5, q0, i, q1, i)         # 0.5 (q0 + q1)
                _v_half_sum(p_mid, i, 0.5, p0, i, p1, i)
            _lanes_csr(mi_ptr, mi_idx, mi_val, p_mid, v_mid)
            _lanes_csr(mi_ptr, mi_idx, mi_val, p1, v1)
            refactor = False
            everyone = True
            for lane in range(lanes):
                take = active[lane] and fresh[lane]
                masks[1, lane] = 1.0 if take else 0.0
                refactor |= take
                everyone &= take
            if refactor:
                _lanes_assemble(work, xv, a_const, term_ptr, term_coef, term_var)
                _v_fill(ok, 0, 1.0)
                _lanes_sparse_lu(work, ok, column_max, inverse, pivot_threshold, diag, pairs,
                                 pair_ops, single_ops)
                if everyone:        # the usual case: the new factors are every lane's
                    lu, work = work, lu
                else:
                    for e in range(e_row.size):
                        _v_copy_where(lu, e, work, e, masks, 1)
                for i in range(n):
                    _v_copy_where(q1_f, i, q1, i, masks, 1)
                    _v_copy_where(qmid_f, i, q_mid, i, masks, 1)
                for r in range(m):
                    _v_copy_where(gam_f, r, gam, r, masks, 1)
                fallback = False
                for lane in range(lanes):
                    if masks[1, lane] != 0.0:
                        factorizations[first + lane] += 1
                        pivoted[lane] = ok[0, lane] == 0.0
                        fallback |= pivoted[lane]
                if fallback:   # the matrix again (work is free now): partial pivoting
                    _lanes_assemble(work, xv, a_const, term_ptr, term_coef, term_var)
                    for lane in range(lanes):
                        if not (masks[1, lane] != 0.0 and pivoted[lane]):
                            continue
                        k = first + lane
                        fallbacks[k] += 1
                        lu_pivoted[lane] = 0.0
                        for e in range(e_row.size):
                            lu_pivoted[lane, e_row[e], e_col[e]] = work[e, lane]
                        if not _lu_factor(lu_pivoted[lane], piv[lane]):
                            status[k] = SINGULAR
                            increment[k] = np.inf
                            alive[lane] = False
                            active[lane] = False
            # residual (84a, b, e, d) at the iterate
            for i in range(n):
                _v_diff(tmp, i, q1, i, q0, i)
            _lanes_csr(m_ptr, m_idx, m_val, tmp, tmp2)                  # M (q1 - q0)
            for i in range(n):
                _v_div_sub(res, ra + i, h, tmp2, i, p_mid, i)           # M dq / h - p_mid
                _v_diff_div_add(res, rb + i, h, force[0, i], p1, i, p0, i)  # dp / h + f
            _lanes_zero(tmp, n)
            _lanes_jt(tmp, q_mid, gam, qr, qi, qj, qc, lr, li, lc, True)
            _lanes_zero(tmp2, n)
            _lanes_jt(tmp2, q_mid, lam, qr, qi, qj, qc, lr, li, lc, True)
            _lanes_jt(tmp2, v_mid, gam, qr, qi, qj, qc, lr, li, lc, False)
            for i in range(n):
                _v_sub(res, ra + i, tmp, i)
                _v_add(res, rb + i, tmp2, i)
            _lanes_zero(res_d, m)
            _lanes_j(res_d, q1, v1, qr, qi, qj, qc, lr, li, lc, True)
            if use_factored:    # g(q1), differences before products
                for r in range(m):
                    _v_fill(res, rc + r, explicit[r])
                for t in range(fr.size):
                    _v_fill(big, 2, 0.0)
                    for xyz in range(3):
                        row = 3 * t + xyz
                        _v_fill(big, 0, u_const[t, xyz])
                        _v_fill(big, 1, v_const[t, xyz])
                        for e in range(u_ptr[row], u_ptr[row + 1]):
                            _v_add_scaled(big, 0, u_val[e], q1, u_idx[e])
                        for e in range(v_ptr[row], v_ptr[row + 1]):
                            _v_add_scaled(big, 1, v_val[e], q1, v_idx[e])
                        _v_add_mul(big, 2, big, 0, big, 1)
                    _v_add_scaled(res, rc + fr[t], fs[t], big, 2)
            else:
                for r in range(m):
                    _v_fill(res, rc + r, const[r])
                for e in range(qr.size):
                    _v_add_cmul(res, rc + qr[e], qc[e], q1, qi[e], q1, qj[e])
                for e in range(lr.size):
                    _v_add_scaled(res, rc + lr[e], lc[e], q1, li[e])
            # condensed right-hand side with the stored blocks, rows (q, d, c)
            _lanes_csr(mi_ptr, mi_idx, mi_val, res_a, mr)              # M^-1 r_a
            _lanes_zero(tmp, n)
            _lanes_jt(tmp, mr, gam_f, qr, qi, qj, qc, lr, li, lc, False)  # H_f M^-1 r_a
            for i in range(n):
                _v_rhs_q(x, i, 2.0, h, res, rb + i, res, ra + i, tmp, i)  # -r_b - 2 r_a/h - tmp
            _lanes_zero(tmp2, m)
            _lanes_j(tmp2, q1_f, mr, qr, qi, qj, qc, lr, li, lc, True)   # G1_f M^-1 r_a
            for r in range(m):
                _v_rhs_d(x, n + r, 2.0, res, rd + r, tmp2, r)           # -r_d - 2 tmp2
                _v_neg(x, n + m + r, res, rc + r)                       # -r_c
            pending = x.copy() if _any_pivoted(active, pivoted) else x
            _lanes_sparse_solve(lu, x, diag, forward_ptr, forward, backward_ptr, backward)
            for lane in range(lanes):
                if active[lane] and pivoted[lane]:
                    for i in range(size):
                        x[i, lane] = pending[i, lane]
                    _lu_solve(lu_pivoted[lane], piv[lane], x[:, lane])
            # dp = 2 (M dq / h - H_f dq / 2 - G_mid,f^T dgam + r_a)
            _lanes_csr(m_ptr, m_idx, m_val, dq, tmp)
            _lanes_zero(tmp2, n)
            _lanes_jt(tmp2, dq, gam_f, qr, qi, qj, qc, lr, li, lc, False)
            _lanes_zero(hq, n)
            _lanes_jt(hq, qmid_f, dmul, qr, qi, qj, qc, lr, li, lc, True)
            for i in range(n):
                _v_dp(dp, i, 2.0, h, 0.5, tmp, i, tmp2, i, hq, i, res, ra + i)
            # update the iterating lanes; big: |dq|, |dp| (inf if not finite), |q1|, |p1|
            for lane in range(lanes):
                masks[0, lane] = 1.0 if active[lane] else 0.0
            for j in range(3):
                _v_fill(big, j, 0.0)
            _v_fill(big, 3, 1.0)
            for i in range(n):
                _v_add_where(q1, i, dq, i, masks, 0)
                _v_add_where(p1, i, dp, i, masks, 0)
                _v_abs_max(big, 0, dq, i)
                _v_abs_max(big, 1, dp, i)
                _v_abs_max(big, 2, q1, i)
                _v_abs_max(big, 3, p1, i)
                _v_flag_nonfinite(big, 0, dq, i)
                _v_flag_nonfinite(big, 0, dp, i)
            for r in range(m):
                _v_add_where(lam, r, x, n + r, masks, 0)
                _v_add_where(gam, r, x, n + m + r, masks, 0)
                _v_flag_nonfinite(big, 0, x, n + r)
                _v_flag_nonfinite(big, 0, x, n + m + r)
            any_active = False
            for lane in range(lanes):
                if not active[lane]:
                    continue
                k = first + lane
                if big[0, lane] == np.inf or not big[1, lane] < np.inf:
                    status[k] = NOT_FINITE
                    increment[k] = np.inf
                    alive[lane] = False
                    active[lane] = False
                    continue
                step_increment = max(big[0, lane] / max(q_scale[lane], big[2, lane]),
                                     big[1, lane] / max(p_scale[lane], big[3, lane]))
                increment[k] = step_increment
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
        for lane in range(lanes):
            if not alive[lane]:
                continue
            k = first + lane
            if active[lane] or done[lane] == 0:
                status[k] = NOT_CONVERGED
                alive[lane] = False
                continue
            iterations[k, s] = done[lane]
            for i in range(n):
                q_out[k, s + 1, i] = q1[i, lane]
                p_out[k, s + 1, i] = p1[i, lane]
            for r in range(m):
                lam_prev[r, lane] = lam[r, lane]
                gam_prev[r, lane] = gam[r, lane]
        # step 0 starts from zero multipliers: its defect is not the smooth predictor error
        # (see WarmStart.startup_defects)
        if correction_order >= 0 and s > 0:
            if defect_count == defects.shape[0]:  # drop the oldest
                for row in range(defect_count - 1):
                    defects[row, :, :] = defects[row + 1]
                defect_count -= 1
            newest = defects[defect_count]
            for lane in range(lanes):
                for i in range(n):
                    newest[i, lane] = q1[i, lane] - raw[i, lane]
                    newest[n + i, lane] = p1[i, lane] - raw[n + i, lane]
                for r in range(m):
                    newest[2 * n + r, lane] = lam[r, lane] - raw[2 * n + r, lane]
                    newest[2 * n + m + r, lane] = gam[r, lane] - raw[2 * n + m + r, lane]
            defect_count += 1
        for lane in range(lanes):
            k = first + lane
            if k < count and status[k] != CONVERGED and failed_step[k] < 0:
                failed_step[k] = s


@njit(cache=True)
def _any_pivoted(active, pivoted):
    """Whether an iterating lane has partially pivoted factors."""
    return np.any(active & pivoted)


@njit(cache=True, parallel=True, error_model="numpy")
def run_lanes(lanes, pivot_threshold, h, q_out, p_out, force, force_scale, length_scale,
              tolerance,
              max_iterations, contraction, refactor_above, stagnation_level, correction_order,
              coefficients, qr, qi, qj, qc, lr, li,
              lc, m_ptr, m_idx, m_val, mi_ptr, mi_idx, mi_val, use_factored, fr, fs, u_ptr, u_idx,
              u_val, u_const, v_ptr, v_idx, v_val, v_const, explicit, const, nv, a_const,
              term_ptr, term_coef, term_var, diag, pairs, pair_ops, single_ops,
              forward_ptr, forward, backward_ptr, backward, e_row, e_col, increment, status,
              iterations, factorizations, failed_step, fallbacks):
    """Every step of every member for a potential linear in q (constant ``force`` = grad V
    in a (1, n) array, largest entry ``force_scale``; ``length_scale`` floors the q scale,
    :attr:`mbs.model.Model.length_scale`), ``lanes`` members per SIMD block and
    the blocks in parallel.

    Row 0 of ``q_out``, ``p_out`` (K, N + 1, n) holds the initial states; rows 1..N are
    written. Each step starts from the explicit predictor of the single runs
    (:meth:`mbs.solvers.guess.ExplicitPredictor.state`, w = 1/2) with the previous step's
    multipliers, lambda from the previous step and gamma = 0, corrected by the extrapolated
    defects of the member's past steps of degree ``correction_order`` (-1: none; see
    ``Solver.predictor_correction``; ``coefficients`` is
    :data:`mbs.solvers.defects.COEFFICIENT_TABLE`), and runs exact Newton that
    keeps its factors once the relative increment is below ``refactor_above`` and contracts
    by ``contraction`` (:func:`mbs.solvers.newton.newton`). A failing member stops:
    ``status[k]`` (codes above), ``failed_step[k]`` and its last ``increment[k]`` say why;
    the others go on. The condensed matrices are assembled entry by entry and factorised
    without row exchanges with the operation lists of :func:`mbs.ensemble._lane_plan`
    (``nv`` .. ``e_col``; :func:`_lanes_sparse_lu`) and, for a member whose static pivots
    fail the ``pivot_threshold`` test, again with partial pivoting (``fallbacks[k]`` counts
    those factorisations)."""
    if lanes != LANES:
        raise ValueError("run_lanes: lanes must be LANES (the width of the row operations)")
    count = q_out.shape[0]
    blocks = (count + lanes - 1) // lanes
    for b in prange(blocks):
        _lanes_block(b * lanes, lanes, pivot_threshold, h, q_out, p_out, force, force_scale,
                     length_scale,
                     tolerance, max_iterations, contraction, refactor_above, stagnation_level,
                     correction_order, coefficients, qr,
                     qi, qj, qc, lr, li, lc, m_ptr, m_idx, m_val, mi_ptr, mi_idx, mi_val,
                     use_factored, fr, fs, u_ptr, u_idx, u_val, u_const, v_ptr, v_idx, v_val,
                     v_const, explicit, const, nv, a_const, term_ptr, term_coef, term_var,
                     diag, pairs, pair_ops, single_ops, forward_ptr, forward,
                     backward_ptr, backward, e_row, e_col, increment, status, iterations,
                     factorizations, failed_step, fallbacks)
