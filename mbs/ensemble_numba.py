"""Compiled kernels of :func:`mbs.simulate_ensemble` (optional: needs numba).

Importing this module raises ImportError when numba is missing; :mod:`mbs.ensemble` then uses
its numpy kernels, which compute the same iteration. For potentials linear in q (gravity)
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

from mbs.solvers.compiled import _lu_factor, _lu_solve  # the pivoted per-member fallback


@njit(cache=True)
def _csr_apply(ptr, idx, val, x, k, out, o):
    """out[k, o, :] = A x[k] for the CSR matrix A (arrays indexed, no views: views of shared
    arrays cost atomic reference counts, which dominate when threads share them)."""
    for i in range(ptr.size - 1):
        s = 0.0
        for e in range(ptr[i], ptr[i + 1]):
            s += val[e] * x[k, idx[e]]
        out[k, o, i] = s


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
# The kernels below hold LANES members per array, member-innermost ((n, LANES), (size, size,
# LANES)): every arithmetic operation is an independent loop over the lanes, which LLVM turns
# into vector instructions without reassociating anything (each lane computes exactly the
# sequence of operations of a scalar run, so no fastmath is needed). Products with the
# constraint Jacobian and Hessians go through the quadratic table's entries (few per row).

#: Members per SIMD block. The kernels read the lane count from their arrays' shapes: with a
#: compile-time constant LLVM unrolls the lane loops completely and, numba's pipeline having
#: no SLP vectoriser, leaves them scalar (measured: LU of 30 unknowns 5.8 us per member with
#: 8 constant lanes, 3.2 with 16 run-time lanes, which leave room for the runtime alias
#: checks of the loop vectoriser).
LANES = 16
#: Default of ``pivot_threshold`` (:func:`run_lanes`): a static pivot is accepted when it is
#: at least this fraction of the largest entry below it in its column (threshold pivoting:
#: the growth of the entries stays bounded); a member whose matrix fails the test is
#: factorised again with partial pivoting.
STATIC_PIVOT_THRESHOLD = 0.1


@njit(cache=True, error_model="numpy")
def _lanes_jt(out, qv, y, qr, qi, qj, qc, lr, li, lc, linear):
    """out += G(qv)^T y in every lane; without ``linear`` the quadratic part only, which
    is H(y) qv."""
    lanes = out.shape[-1]
    for e in range(qr.size):
        r, i, j, c = qr[e], qi[e], qj[e], qc[e]
        for lane in range(lanes):
            cy = c * y[r, lane]
            out[i, lane] += cy * qv[j, lane]
            out[j, lane] += cy * qv[i, lane]
    if linear:
        for e in range(lr.size):
            r, i, c = lr[e], li[e], lc[e]
            for lane in range(lanes):
                out[i, lane] += c * y[r, lane]


@njit(cache=True, error_model="numpy")
def _lanes_j(out, qv, x, qr, qi, qj, qc, lr, li, lc, linear):
    """out += G(qv) x in every lane; without ``linear`` the quadratic part, HV(qv) x."""
    lanes = out.shape[-1]
    for e in range(qr.size):
        r, i, j, c = qr[e], qi[e], qj[e], qc[e]
        for lane in range(lanes):
            out[r, lane] += c * (qv[j, lane] * x[i, lane] + qv[i, lane] * x[j, lane])
    if linear:
        for e in range(lr.size):
            r, i, c = lr[e], li[e], lc[e]
            for lane in range(lanes):
                out[r, lane] += c * x[i, lane]


@njit(cache=True, error_model="numpy")
def _lanes_dense_j(out, qv, qr, qi, qj, qc, lr, li, lc, linear):
    """out[r, i, :] = G(qv)[r, i] (HV(qv) without ``linear``)."""
    lanes = out.shape[-1]
    out[:] = 0.0
    for e in range(qr.size):
        r, i, j, c = qr[e], qi[e], qj[e], qc[e]
        for lane in range(lanes):
            out[r, i, lane] += c * qv[j, lane]
            out[r, j, lane] += c * qv[i, lane]
    if linear:
        for e in range(lr.size):
            r, i, c = lr[e], li[e], lc[e]
            for lane in range(lanes):
                out[r, i, lane] += c


@njit(cache=True, error_model="numpy")
def _lanes_csr(ptr, idx, val, x, out):
    """out[i, :] = (A x)[i] in every lane for the CSR matrix A."""
    lanes = out.shape[-1]
    for i in range(ptr.size - 1):
        for lane in range(lanes):
            out[i, lane] = 0.0
        for e in range(ptr[i], ptr[i + 1]):
            c, col = val[e], idx[e]
            for lane in range(lanes):
                out[i, lane] += c * x[col, lane]


@njit(cache=True, error_model="numpy")
def _lanes_matrix(a, h, q_mid, q1, v_mid, v1, lam, gam, qr, qi, qj, qc, lr, li, lc, m_ptr,
                  m_idx, m_val, mi_ptr, mi_idx, mi_val, gm, g1, hvm, hv1, hg, hl, w, ugm, vg):
    """Condensed Newton matrix in every lane, rows ordered (q, d, c) and columns
    (q, lambda, gamma) so that elimination without row exchanges meets O(1/h^2), O(h) and
    O(h) pivots (:func:`_lanes_lu`):

        q rows: 2M/h^2 + H(lam)/2 - H(gam) M^-1 H(gam)/2 | G_mid^T | HV_mid^T - 2/h G_mid^T
                - H(gam) M^-1 G_mid^T
        d rows: HV1 + 2/h G1 - G1 M^-1 H(gam) | 0 | -2 G1 M^-1 G_mid^T
        c rows: G1 | 0 | 0

    The other arguments are workspaces (dense G_mid, G1, HV(v_mid), HV(v1), H(gam),
    H(lam), M^-1 H(gam), M^-1 G_mid^T, G1 M^-1).
    """
    lanes = a.shape[-1]
    n, m = q1.shape[0], lam.shape[0]
    two_h = 2.0 / h
    _lanes_dense_j(gm, q_mid, qr, qi, qj, qc, lr, li, lc, True)
    _lanes_dense_j(g1, q1, qr, qi, qj, qc, lr, li, lc, True)
    _lanes_dense_j(hvm, v_mid, qr, qi, qj, qc, lr, li, lc, False)
    _lanes_dense_j(hv1, v1, qr, qi, qj, qc, lr, li, lc, False)
    hg[:] = 0.0
    hl[:] = 0.0
    for e in range(qr.size):
        r, i, j, c = qr[e], qi[e], qj[e], qc[e]
        for lane in range(lanes):
            hg[i, j, lane] += c * gam[r, lane]
            hg[j, i, lane] += c * gam[r, lane]
            hl[i, j, lane] += c * lam[r, lane]
            hl[j, i, lane] += c * lam[r, lane]
    # M^-1 H(gam), and with M^-1 symmetric: (M^-1 G_mid^T)^T and G1 M^-1, row by row of M^-1
    w[:] = 0.0
    ugm[:] = 0.0
    vg[:] = 0.0
    for i in range(n):
        for e in range(mi_ptr[i], mi_ptr[i + 1]):
            c, col = mi_val[e], mi_idx[e]
            for j in range(n):
                for lane in range(lanes):
                    w[i, j, lane] += c * hg[col, j, lane]
            for s in range(m):
                for lane in range(lanes):
                    ugm[s, i, lane] += c * gm[s, col, lane]
                    vg[s, i, lane] += c * g1[s, col, lane]
    a[:] = 0.0
    for i in range(n):
        for j in range(n):
            for lane in range(lanes):
                a[i, j, lane] = 0.5 * hl[i, j, lane]
        for e in range(m_ptr[i], m_ptr[i + 1]):
            c = 2.0 * m_val[e] / (h * h)
            col = m_idx[e]
            for lane in range(lanes):
                a[i, col, lane] += c
        for s in range(m):
            for lane in range(lanes):
                a[i, n + s, lane] = gm[s, i, lane]
                a[i, n + m + s, lane] = hvm[s, i, lane] - two_h * gm[s, i, lane]
    for s in range(m):
        for j in range(n):
            for lane in range(lanes):
                a[n + s, j, lane] = hv1[s, j, lane] + two_h * g1[s, j, lane]
                a[n + m + s, j, lane] = g1[s, j, lane]
    # the H(gam) products, entry by entry of the table (H(gam) has two per entry)
    for e in range(qr.size):
        r, i, j, c = qr[e], qi[e], qj[e], qc[e]
        for lane in range(lanes):
            cg = c * gam[r, lane]
            for col in range(n):
                a[i, col, lane] -= 0.5 * cg * w[j, col, lane]
                a[j, col, lane] -= 0.5 * cg * w[i, col, lane]
            for s in range(m):
                a[i, n + m + s, lane] -= cg * ugm[s, j, lane]
                a[j, n + m + s, lane] -= cg * ugm[s, i, lane]
                a[n + s, j, lane] -= cg * vg[s, i, lane]
                a[n + s, i, lane] -= cg * vg[s, j, lane]
    # -2 G1 M^-1 G_mid^T through the entries of G_mid's rows t
    for e in range(qr.size):
        t, i, j, c = qr[e], qi[e], qj[e], qc[e]
        for s in range(m):
            for lane in range(lanes):
                a[n + s, n + m + t, lane] -= 2.0 * c * (vg[s, i, lane] * q_mid[j, lane]
                                                        + vg[s, j, lane] * q_mid[i, lane])
    for e in range(lr.size):
        t, i, c = lr[e], li[e], lc[e]
        for s in range(m):
            for lane in range(lanes):
                a[n + s, n + m + t, lane] -= 2.0 * c * vg[s, i, lane]


@njit(cache=True, error_model="numpy")
def _lanes_lu(a, ok, inverse, column_max, threshold):
    """LU without row exchanges of every lane of ``a`` (size, size, LANES), in place.
    ``ok[lane]`` becomes False where a pivot is zero, not finite or smaller than
    ``threshold`` times the largest entry below it."""
    lanes = a.shape[-1]
    size = a.shape[0]
    for c in range(size):
        for lane in range(lanes):
            column_max[lane] = 0.0
        for i in range(c + 1, size):
            for lane in range(lanes):
                column_max[lane] = max(column_max[lane], abs(a[i, c, lane]))
        for lane in range(lanes):
            pivot = abs(a[c, c, lane])
            if not (pivot >= threshold * column_max[lane] and pivot > 0.0
                    and pivot < np.inf):
                ok[lane] = False
            inverse[lane] = 1.0 / a[c, c, lane]
        for i in range(c + 1, size):
            nonzero = False
            for lane in range(lanes):
                f = a[i, c, lane] * inverse[lane]
                a[i, c, lane] = f
                nonzero |= f != 0.0
            if nonzero:   # structural zeros of G1 and the zero blocks: skip the row
                for j in range(c + 1, size):
                    for lane in range(lanes):
                        a[i, j, lane] -= a[i, c, lane] * a[c, j, lane]


@njit(cache=True, error_model="numpy")
def _lanes_solve(a, x):
    """x <- A^-1 x in every lane with the factors of :func:`_lanes_lu`."""
    lanes = x.shape[-1]
    size = a.shape[0]
    for i in range(size):
        for j in range(i):
            for lane in range(lanes):
                x[i, lane] -= a[i, j, lane] * x[j, lane]
    for i in range(size - 1, -1, -1):
        for j in range(i + 1, size):
            for lane in range(lanes):
                x[i, lane] -= a[i, j, lane] * x[j, lane]
        for lane in range(lanes):
            x[i, lane] = x[i, lane] / a[i, i, lane]


@njit(cache=True, error_model="numpy")
def _lanes_block(first, lanes, pivot_threshold, h, q_out, p_out, force, force_scale, tolerance,
                 max_iterations, contraction, refactor_above, stagnation_level, qr, qi, qj, qc, lr,
                 li, lc, m_ptr, m_idx, m_val, mi_ptr, mi_idx, mi_val, use_factored, fr, fs, u_ptr,
                 u_idx, u_val, u_const, v_ptr, v_idx, v_val, v_const, explicit, const, increment,
                 status, iterations, factorizations, failed_step, fallbacks):
    """Every step of members first .. first + lanes - 1 (see :func:`run_lanes`). The lane
    count is an argument, not the constant LANES: see :data:`LANES`."""
    count, steps, n = q_out.shape[0], q_out.shape[1] - 1, q_out.shape[2]
    m = lam_size = const.size
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
    ok = np.zeros(lanes, dtype=np.bool_)
    previous, done = np.zeros(lanes), np.zeros(lanes, dtype=np.int64)
    q_scale, p_scale = np.zeros(lanes), np.zeros(lanes)
    inverse, column_max = np.zeros(lanes), np.zeros(lanes)
    big = np.zeros((4, lanes))
    q0, p0, q1, p1 = (np.zeros((n, lanes)), np.zeros((n, lanes)), np.zeros((n, lanes)),
                      np.zeros((n, lanes)))
    lam, gam = np.zeros((lam_size, lanes)), np.zeros((lam_size, lanes))
    lam_prev, gam_prev = np.zeros((lam_size, lanes)), np.zeros((lam_size, lanes))
    # factor-time data of each lane's stored matrix: gamma, q1, q_mid
    gam_f, q1_f, qmid_f = np.zeros((m, lanes)), np.zeros((n, lanes)), np.zeros((n, lanes))
    vec = np.zeros((12, max(n, m), lanes))   # n- and m-vectors, rows named below
    x = np.zeros((size, lanes))
    res = np.zeros((2 * n + 2 * m, lanes))
    work = np.zeros((size, size, lanes))
    original = np.zeros((size, size, lanes))
    lu = np.zeros((size, size, lanes))
    lu_pivoted = np.zeros((lanes, size, size))
    piv = np.zeros((lanes, size), dtype=np.int64)
    gm, g1 = np.zeros((m, n, lanes)), np.zeros((m, n, lanes))
    hvm, hv1 = np.zeros((m, n, lanes)), np.zeros((m, n, lanes))
    hg, hl, w = np.zeros((n, n, lanes)), np.zeros((n, n, lanes)), np.zeros((n, n, lanes))
    ugm, vg = np.zeros((m, n, lanes)), np.zeros((m, n, lanes))
    q_mid, p_mid, v_mid, v1 = vec[0], vec[1], vec[2], vec[3]
    tmp, tmp2, mr = vec[4], vec[5], vec[6]
    uu, vv, dot = big[0], big[1], big[2]
    ra, rb, rc, rd = 0, n, 2 * n, 2 * n + m
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
            q_scale[lane] = max(big_q, 1e-300)
            p_scale[lane] = max(max(big_p, h * force_scale), 1e-300)
            if not alive[lane]:
                for r in range(m):
                    lam_prev[r, lane] = lam_prev[r, anyone]
                    gam_prev[r, lane] = gam_prev[r, anyone]
        # explicit predictor (see _predict)
        _lanes_csr(mi_ptr, mi_idx, mi_val, p0, v1)
        tmp[:n] = 0.0
        tmp2[:n] = 0.0
        _lanes_jt(tmp, q0, lam_prev, qr, qi, qj, qc, lr, li, lc, True)
        _lanes_jt(tmp, v1, gam_prev, qr, qi, qj, qc, lr, li, lc, False)
        _lanes_jt(tmp2, q0, gam_prev, qr, qi, qj, qc, lr, li, lc, True)
        for i in range(n):
            for lane in range(lanes):
                p1[i, lane] = p0[i, lane] - h * (force[0, i] + tmp[i, lane])
                tmp2[i, lane] += 0.5 * (p0[i, lane] + p1[i, lane])
        _lanes_csr(mi_ptr, mi_idx, mi_val, tmp2, tmp)
        for i in range(n):
            for lane in range(lanes):
                q1[i, lane] = q0[i, lane] + h * tmp[i, lane]
        for r in range(m):
            for lane in range(lanes):
                lam[r, lane] = lam_prev[r, lane]
                gam[r, lane] = 0.0
        for lane in range(lanes):
            active[lane] = alive[lane]
            fresh[lane] = True
            previous[lane] = np.inf
            done[lane] = 0
        for iteration in range(1, max_iterations + 1):
            for i in range(n):
                for lane in range(lanes):
                    q_mid[i, lane] = 0.5 * (q0[i, lane] + q1[i, lane])
                    p_mid[i, lane] = 0.5 * (p0[i, lane] + p1[i, lane])
            _lanes_csr(mi_ptr, mi_idx, mi_val, p_mid, v_mid)
            _lanes_csr(mi_ptr, mi_idx, mi_val, p1, v1)
            refactor = False
            for lane in range(lanes):
                refactor |= active[lane] and fresh[lane]
            if refactor:
                _lanes_matrix(work, h, q_mid, q1, v_mid, v1, lam, gam, qr, qi, qj, qc, lr, li,
                              lc, m_ptr, m_idx, m_val, mi_ptr, mi_idx, mi_val, gm, g1, hvm,
                              hv1, hg, hl, w, ugm, vg)
                original[:] = work
                ok[:] = True
                _lanes_lu(work, ok, inverse, column_max, pivot_threshold)
                for lane in range(lanes):
                    if not (active[lane] and fresh[lane]):
                        continue
                    k = first + lane
                    factorizations[k] += 1
                    for i in range(size):
                        for j in range(size):
                            lu[i, j, lane] = work[i, j, lane]
                    for i in range(n):
                        q1_f[i, lane] = q1[i, lane]
                        qmid_f[i, lane] = q_mid[i, lane]
                    for r in range(m):
                        gam_f[r, lane] = gam[r, lane]
                    pivoted[lane] = not ok[lane]
                    if pivoted[lane]:
                        fallbacks[k] += 1
                        for i in range(size):
                            for j in range(size):
                                lu_pivoted[lane, i, j] = original[i, j, lane]
                        if not _lu_factor(lu_pivoted[lane], piv[lane]):
                            status[k] = SINGULAR
                            increment[k] = np.inf
                            alive[lane] = False
                            active[lane] = False
            # residual (84a, b, e, d) at the iterate
            for i in range(n):
                for lane in range(lanes):
                    tmp[i, lane] = q1[i, lane] - q0[i, lane]
            _lanes_csr(m_ptr, m_idx, m_val, tmp, tmp2)                  # M (q1 - q0)
            for i in range(n):
                for lane in range(lanes):
                    res[ra + i, lane] = tmp2[i, lane] / h - p_mid[i, lane]
                    res[rb + i, lane] = (p1[i, lane] - p0[i, lane]) / h + force[0, i]
            tmp[:n] = 0.0
            _lanes_jt(tmp, q_mid, gam, qr, qi, qj, qc, lr, li, lc, True)
            tmp2[:n] = 0.0
            _lanes_jt(tmp2, q_mid, lam, qr, qi, qj, qc, lr, li, lc, True)
            _lanes_jt(tmp2, v_mid, gam, qr, qi, qj, qc, lr, li, lc, False)
            for i in range(n):
                for lane in range(lanes):
                    res[ra + i, lane] -= tmp[i, lane]
                    res[rb + i, lane] += tmp2[i, lane]
            for r in range(m):
                for lane in range(lanes):
                    res[rd + r, lane] = 0.0
            _lanes_j(res[rd:], q1, v1, qr, qi, qj, qc, lr, li, lc, True)
            if use_factored:    # g(q1), differences before products
                for r in range(m):
                    for lane in range(lanes):
                        res[rc + r, lane] = explicit[r]
                for t in range(fr.size):
                    for lane in range(lanes):
                        dot[lane] = 0.0
                    for xyz in range(3):
                        row = 3 * t + xyz
                        for lane in range(lanes):
                            uu[lane] = u_const[t, xyz]
                            vv[lane] = v_const[t, xyz]
                        for e in range(u_ptr[row], u_ptr[row + 1]):
                            for lane in range(lanes):
                                uu[lane] += u_val[e] * q1[u_idx[e], lane]
                        for e in range(v_ptr[row], v_ptr[row + 1]):
                            for lane in range(lanes):
                                vv[lane] += v_val[e] * q1[v_idx[e], lane]
                        for lane in range(lanes):
                            dot[lane] += uu[lane] * vv[lane]
                    for lane in range(lanes):
                        res[rc + fr[t], lane] += fs[t] * dot[lane]
            else:
                for r in range(m):
                    for lane in range(lanes):
                        res[rc + r, lane] = const[r]
                for e in range(qr.size):
                    for lane in range(lanes):
                        res[rc + qr[e], lane] += qc[e] * q1[qi[e], lane] * q1[qj[e], lane]
                for e in range(lr.size):
                    for lane in range(lanes):
                        res[rc + lr[e], lane] += lc[e] * q1[li[e], lane]
            # condensed right-hand side with the stored blocks, rows (q, d, c)
            _lanes_csr(mi_ptr, mi_idx, mi_val, res[ra:ra + n], mr)      # M^-1 r_a
            tmp[:n] = 0.0
            _lanes_jt(tmp, mr, gam_f, qr, qi, qj, qc, lr, li, lc, False)  # H_f M^-1 r_a
            for i in range(n):
                for lane in range(lanes):
                    x[i, lane] = -res[rb + i, lane] - 2.0 * res[ra + i, lane] / h - tmp[i, lane]
            tmp2[:m] = 0.0
            _lanes_j(tmp2, q1_f, mr, qr, qi, qj, qc, lr, li, lc, True)   # G1_f M^-1 r_a
            for r in range(m):
                for lane in range(lanes):
                    x[n + r, lane] = -res[rd + r, lane] - 2.0 * tmp2[r, lane]
                    x[n + m + r, lane] = -res[rc + r, lane]
            pending = x.copy() if _any_pivoted(active, pivoted) else x
            _lanes_solve(lu, x)
            for lane in range(lanes):
                if active[lane] and pivoted[lane]:
                    for i in range(size):
                        x[i, lane] = pending[i, lane]
                    _lu_solve(lu_pivoted[lane], piv[lane], x[:, lane])
            # dp = 2 (M dq / h - H_f dq / 2 - G_mid,f^T dgam + r_a)
            _lanes_csr(m_ptr, m_idx, m_val, x[:n], tmp)
            tmp2[:n] = 0.0
            _lanes_jt(tmp2, x[:n], gam_f, qr, qi, qj, qc, lr, li, lc, False)
            vec[7, :n] = 0.0
            _lanes_jt(vec[7], qmid_f, x[n + m:], qr, qi, qj, qc, lr, li, lc, True)
            for i in range(n):
                for lane in range(lanes):
                    vec[8, i, lane] = 2.0 * ((tmp[i, lane] / h - 0.5 * tmp2[i, lane])
                                             - vec[7, i, lane] + res[ra + i, lane])
            big[:] = 0.0
            for lane in range(lanes):
                big[3, lane] = 1.0
            for i in range(n):
                for lane in range(lanes):
                    if active[lane]:
                        dq, dp = x[i, lane], vec[8, i, lane]
                        q1[i, lane] += dq
                        p1[i, lane] += dp
                        big[0, lane] = max(big[0, lane], abs(dq))
                        big[1, lane] = max(big[1, lane], abs(dp))
                        big[2, lane] = max(big[2, lane], abs(q1[i, lane]))
                        big[3, lane] = max(big[3, lane], abs(p1[i, lane]))
                        if not (abs(dq) < np.inf and abs(dp) < np.inf):
                            big[0, lane] = np.inf
            for r in range(m):
                for lane in range(lanes):
                    if active[lane]:
                        dl, dg = x[n + r, lane], x[n + m + r, lane]
                        lam[r, lane] += dl
                        gam[r, lane] += dg
                        if not (abs(dl) < np.inf and abs(dg) < np.inf):
                            big[0, lane] = np.inf
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
        for lane in range(lanes):
            k = first + lane
            if k < count and status[k] != CONVERGED and failed_step[k] < 0:
                failed_step[k] = s


@njit(cache=True)
def _any_pivoted(active, pivoted):
    """Whether an iterating lane has partially pivoted factors."""
    return np.any(active & pivoted)


@njit(cache=True, parallel=True, error_model="numpy")
def run_lanes(lanes, pivot_threshold, h, q_out, p_out, force, force_scale, tolerance,
              max_iterations, contraction, refactor_above, stagnation_level, qr, qi, qj, qc, lr, li,
              lc, m_ptr, m_idx, m_val, mi_ptr, mi_idx, mi_val, use_factored, fr, fs, u_ptr, u_idx,
              u_val, u_const, v_ptr, v_idx, v_val, v_const, explicit, const, increment, status,
              iterations, factorizations, failed_step, fallbacks):
    """Every step of every member for a potential linear in q (constant ``force`` = grad V
    in a (1, n) array, largest entry ``force_scale``), ``lanes`` members per SIMD block and
    the blocks in parallel.

    Row 0 of ``q_out``, ``p_out`` (K, N + 1, n) holds the initial states; rows 1..N are
    written. Each step starts from the explicit predictor of the single runs
    (:meth:`mbs.solvers.base.Solver._predict_state`, w = 1/2) with the previous step's
    multipliers, lambda from the previous step and gamma = 0, and runs exact Newton that
    keeps its factors once the relative increment is below ``refactor_above`` and contracts
    by ``contraction`` (:func:`mbs.solvers.newton.newton`). A failing member stops:
    ``status[k]`` (codes above), ``failed_step[k]`` and its last ``increment[k]`` say why;
    the others go on. The condensed matrices are
    factorised without row exchanges (:func:`_lanes_lu`) and, for a member whose static
    pivots fail the ``pivot_threshold`` test, again with partial pivoting
    (``fallbacks[k]`` counts those factorisations)."""
    count = q_out.shape[0]
    blocks = (count + lanes - 1) // lanes
    for b in prange(blocks):
        _lanes_block(b * lanes, lanes, pivot_threshold, h, q_out, p_out, force, force_scale,
                     tolerance, max_iterations, contraction, refactor_above, stagnation_level, qr,
                     qi, qj, qc, lr, li, lc, m_ptr, m_idx, m_val, mi_ptr, mi_idx, mi_val,
                     use_factored, fr, fs, u_ptr, u_idx, u_val, u_const, v_ptr, v_idx, v_val,
                     v_const, explicit, const, increment, status, iterations, factorizations,
                     failed_step, fallbacks)
