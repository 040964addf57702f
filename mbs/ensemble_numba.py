"""Compiled kernels of :func:`mbs.simulate_ensemble` (optional: needs numba).

Importing this module raises ImportError when numba is missing; :mod:`mbs.ensemble` then uses
its numpy kernels, which compute the same iteration. One call of :func:`iterate` performs one
simplified-Newton iteration of the energy-momentum scheme (seed 003, (84)) for every listed
member, in parallel over the members:

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
    """One simplified-Newton iteration for members ``active`` (see module doc).

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
