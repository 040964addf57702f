"""A scheme's step equations as tables for the batched ensemble kernel.

The step equations of every scheme whose unknowns are (q^{n+1}, p^{n+1}, lambda, gamma) are
written once, as terms (:mod:`mbs.engine.equations`); with quadratic constraints and a
potential linear in q the tensor form folds them into a polynomial of degree 2 in
``w = (q^n, p^n, x)`` (:class:`mbs.backends.polynomial.QuadraticSystemBuilder`). This module
turns that polynomial into the tables :func:`mbs.backends.ensemble_numba.run_lanes`
evaluates for many members at once, with ``w`` extended by a constant 1:

* every residual row as a constant plus monomials ``c w_a w_b``;
* the constraint rows the single runs re-evaluate from the factored form of the constraint
  table (differences before products, :func:`mbs.backends.factored_rows.factored_override`)
  as products of affine 3-vectors of ``w``;
* every stored entry of the Newton matrix, which is affine in ``w``, as a constant plus
  monomials ``c w_a``;
* the explicit predictor of the single runs
  (:func:`mbs.backends.polynomial.explicit_predictor_map`) as
  monomials of ``(q^n, p^n, lambda^n, gamma^n, 1)``;
* a static pivot order and the operation lists of sparse LU without row exchanges in that
  order: the identity block of the Newton matrix first (p^{n+1} eliminated exactly, as the
  condensed solves of the single runs do), then the residual blocks paired with the
  unknown blocks in the order whose pivots are largest on sample matrices; the trailing
  block (the multipliers) is the part a member factorises with partial pivoting when its
  static pivots there get small.

The tables are built once per (model, scheme, step size) and kept in the model's cache.
"""

from __future__ import annotations

import itertools
from collections import namedtuple

import numpy as np
import scipy.sparse as sp

from mbs.backends.factored_rows import factored_override
from mbs.backends.polynomial import explicit_predictor_map

#: The tables of one (model, scheme, h); see :func:`lane_plan` and
#: :func:`mbs.backends.ensemble_numba.run_lanes`.
LanePlan = namedtuple("LanePlan", (
    "n_w",                                               # size of w (its 1 is row n_w)
    "residual",         # (const, ptr, coef, var) per residual row
    "overrides",        # (uv_ptr, uv_idx, uv_val, row, first, second, scale)
    "jacobian",         # (const, ptr, coef, var) per stored LU entry
    "predictor",        # (const, ptr, coef, var) per unknown, over (q, p, lam, gam, 1)
    "row_order", "column_order",                         # pivot k: (row_order[k], col...)
    "exact",            # the first pivots, the identity block: exact, never tested
    "trailing",         # the first pivot of the block factorised with pivoting on failure
    "elimination",      # (diag, pairs, phase 2, pair_ops, single_ops, fwd_ptr, fwd, bwd_ptr,
                        #  bwd)
    "entries",          # (e_row, e_col) of the stored entries, in pivot positions
    "schur",            # (entry, row, col) of the stored entries of the trailing block
    "counts",           # sizes and operation counts (dict)
))


def _monomial_rows(rows: np.ndarray, first: np.ndarray, second: np.ndarray,
                   coefficients: np.ndarray, size: int, one: int) -> tuple:
    """(const, ptr, coef, var) of ``size`` sums: entry e adds coefficients[e] w[first[e]]
    w[second[e]] to sum rows[e]; products with the constant ``one`` go to const, equal
    monomials are merged, zeros dropped."""
    rows, first, second = (np.asarray(a, dtype=np.int64) for a in (rows, first, second))
    coefficients = np.asarray(coefficients, dtype=float)
    low, high = np.minimum(first, second), np.maximum(first, second)
    constant = (low == one) & (high == one)
    const = np.bincount(rows[constant], weights=coefficients[constant], minlength=size)
    rows, low, high, coefficients = (a[~constant] for a in (rows, low, high, coefficients))
    key = (rows * (one + 1) + low) * (one + 1) + high
    unique, inverse = np.unique(key, return_inverse=True)
    summed = np.bincount(inverse, weights=coefficients, minlength=unique.size)
    keep = summed != 0.0
    unique, summed = unique[keep], summed[keep]
    rows, rest = np.divmod(unique, (one + 1) * (one + 1))
    low, high = np.divmod(rest, one + 1)
    ptr = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=size))]).astype(np.int64)
    return (const, ptr, summed, np.column_stack([low, high]).astype(np.int64))


def _elimination(pattern: np.ndarray, trailing: int) -> tuple:
    """Fill of elimination without row exchanges for the (size, size) boolean ``pattern``
    (diagonal included) and the operation lists of :func:`mbs.backends.ensemble_numba.
    _lanes_sparse_lu` and of the substitutions, in two phases: phase 1 eliminates the
    pivots before ``trailing`` from every row, phase 2 the trailing pivots from the trailing
    rows; between them the trailing rows hold the Schur complement of the leading block,
    which a member whose trailing static pivots fail factorises with partial pivoting.

    Elimination goes row by row; the L entries (i, c) of row i (c ascending, within a phase)
    are taken in pairs (c1, c2): the multiplier of c1, the update of (i, c2) by c1, the
    multiplier of c2, then the updates of row i from the U entries of rows c1 and c2 (j >
    c2), fused where both rows have column j, single otherwise; the row's inverse pivot after
    its last pair. Every entry receives the updates of column-by-column elimination in its
    order, so the factors are those of dense elimination without its structural zeros.

    Returns (e_row, e_col, diag, pairs, phase-2 first pair, pair_ops, single_ops,
    forward_ptr, forward, backward_ptr, backward, counts): pairs[p] = (l1, c1, l2, c2 (-1:
    none), index of (c1, c2) or -1, first fused op, first single op of c1, first single op
    of c2, row finished after it or -1), a last row closing the ranges.
    """
    size = pattern.shape[0]
    fill = pattern.copy()
    for c in range(size):
        rows = np.flatnonzero(fill[c + 1:, c]) + c + 1
        cols = np.flatnonzero(fill[c, c + 1:]) + c + 1
        fill[np.ix_(rows, cols)] = True
    e_row, e_col = (a.astype(np.int64) for a in np.nonzero(fill))
    index = np.full((size, size), -1, dtype=np.int64)
    index[e_row, e_col] = np.arange(e_row.size)
    diag = index[np.arange(size), np.arange(size)].copy()
    pairs, pair_ops, single_ops = [], [], []

    def row_pairs(i: int, columns: np.ndarray, finishes: bool) -> None:
        for k in range(0, max(columns.size, 1 if finishes else 0), 2):
            c1 = columns[k] if columns.size else -1
            c2 = columns[k + 1] if k + 1 < columns.size else -1
            u1 = set(np.flatnonzero(fill[c1, c1 + 1:]) + c1 + 1) if c1 >= 0 else set()
            u2 = set(np.flatnonzero(fill[c2, c2 + 1:]) + c2 + 1) if c2 >= 0 else set()
            u1.discard(c2)
            pre = index[c1, c2] if c2 >= 0 and fill[c1, c2] else -1
            row = [index[i, c1] if c1 >= 0 else -1, c1, index[i, c2] if c2 >= 0 else -1, c2,
                   pre, len(pair_ops)]
            pair_ops.extend([index[i, j], index[c1, j], index[c2, j]] for j in sorted(u1 & u2))
            row.append(len(single_ops))
            single_ops.extend([index[i, j], index[c1, j]] for j in sorted(u1 - u2))
            row.append(len(single_ops))
            single_ops.extend([index[i, j], index[c2, j]] for j in sorted(u2 - u1))
            pairs.append(row + [i if finishes and k + 2 >= columns.size else -1])

    for i in range(size):                       # phase 1
        columns = np.flatnonzero(fill[i, :min(i, trailing)])
        row_pairs(i, columns, i < trailing)
    second_phase = len(pairs)
    for i in range(trailing, size):             # phase 2
        row_pairs(i, np.flatnonzero(fill[i, trailing:i]) + trailing, True)
    pairs.append([-1] * 5 + [len(pair_ops), len(single_ops), len(single_ops), -1])
    # substitutions: forward by columns of L (rows t, entries u), backward by rows of U
    forward_ptr, forward, backward_ptr, backward = [0], [], [0], []
    for j in range(size):
        rows = np.flatnonzero(fill[j + 1:, j]) + j + 1
        forward.extend([t, index[t, j]] for t in rows)
        forward_ptr.append(len(forward))
        cols = np.flatnonzero(fill[j, j + 1:]) + j + 1
        backward.extend([index[j, c], c] for c in cols)
        backward_ptr.append(len(backward))
    counts = {"size": size, "trailing": size - trailing, "nnz_matrix": int(pattern.sum()),
              "nnz_lu": int(e_row.size),
              "lu_updates": 2 * len(pair_ops) + len(single_ops)
              + sum(row[4] >= 0 for row in pairs),
              "solve_updates": len(forward) + len(backward)}

    def ints(x, columns):
        return np.asarray(x, dtype=np.int64).reshape(-1, columns)

    return (e_row, e_col, diag, ints(pairs, 9), second_phase, ints(pair_ops, 3),
            ints(single_ops, 2), np.asarray(forward_ptr, dtype=np.int64), ints(forward, 2),
            np.asarray(backward_ptr, dtype=np.int64), ints(backward, 2), counts)


def _overrides(builder, n_w: int) -> tuple:
    """The factored constraint rows of the definition as (uv_ptr, uv_idx, uv_val) of the
    affine 3-vectors over (w, 1) and per product (row, first, second, scale): row +=
    scale uv[first] uv[second]; also the rows they replace and their constants."""
    n_d = builder.n_data
    maps, products, replaced, constants = [], [], [], []
    offset = 0
    for start, term in builder.factored_rows:
        override = factored_override(builder.table, start, term.matrix[:, :n_d],
                                     term.matrix[:, n_d:], sp.csr_matrix)
        if override is None:
            continue
        first_row, rows, uv_x, uv_d, uv_const, row_sum, explicit, half = override
        maps.append(sp.hstack([uv_d, uv_x, sp.csr_matrix(uv_const.reshape(-1, 1))]))
        coo = row_sum.tocoo()
        products.append(np.column_stack([first_row + coo.row, offset + coo.col,
                                         offset + half + coo.col, coo.data]))
        replaced.append(first_row + np.arange(rows))
        constants.append(explicit)
        offset += 2 * half
    if not maps:
        empty = np.zeros(0, dtype=np.int64)
        return ((np.zeros(1, dtype=np.int64), empty, np.zeros(0), empty, empty, empty,
                 np.zeros(0)), empty, np.zeros(0))
    uv = sp.csr_matrix(sp.vstack(maps))
    uv.sort_indices()
    table = np.vstack(products)
    return ((uv.indptr.astype(np.int64), uv.indices.astype(np.int64), uv.data.astype(float),
             *(table[:, c].astype(np.int64) for c in range(3)), table[:, 3].copy()),
            np.concatenate(replaced), np.concatenate(constants))


def _smallest_pivot_ratio(matrix: np.ndarray, exact: int) -> float:
    """The smallest |pivot| / max |entry below it| of elimination without row exchanges,
    over the pivots after the first ``exact`` (the test of
    :func:`mbs.backends.ensemble_numba._lanes_sparse_lu`)."""
    a = matrix.astype(float)
    worst = np.inf
    for c in range(a.shape[0]):
        below = np.abs(a[c:, c]).max()
        if c >= exact:
            worst = min(worst, abs(a[c, c]) / below if below > 0.0 else 0.0)
        if not (a[c, c] != 0.0 and np.isfinite(a[c, c])):
            return 0.0
        a[c + 1:, c] /= a[c, c]
        a[c + 1:, c + 1:] -= np.outer(a[c + 1:, c], a[c, c + 1:])
    return worst


def _pivot_order(samples: list[np.ndarray], identity: tuple | None, row_blocks: list,
                 column_blocks: list) -> tuple[np.ndarray, np.ndarray, int]:
    """Static pivot order (rows, columns): the identity block's pairs first; then the other
    residual blocks paired with the unknown blocks of the same size, row i of a block with
    column i of its partner, the pairs in the order and pairing for which the smallest pivot
    ratio over the ``samples`` is largest (a block order keeps the choice independent of
    the orientation of a member, which row-wise partial pivoting is not). Also returns the
    first pivot after the identity block and the first block pair: the trailing block, whose
    pairing may degrade as a mechanism moves (a member factorises it with partial pivoting
    then)."""
    first_rows = first_cols = np.zeros(0, dtype=np.int64)
    if identity is not None:
        first_rows = np.arange(identity[0].start, identity[0].stop)
        first_cols = np.arange(identity[1].start, identity[1].stop)
        row_blocks = [b for b in row_blocks if b[0] != identity[0].start]
        column_blocks = [b for b in column_blocks if b[0] != identity[1].start]
    best, order = -1.0, None
    for columns in itertools.permutations(column_blocks):
        for rows in itertools.permutations(row_blocks):
            if any(r[1] != c[1] for r, c in zip(rows, columns)):
                continue
            row_order = np.concatenate([first_rows] + [np.arange(s, s + z) for s, z in rows])
            col_order = np.concatenate([first_cols] + [np.arange(s, s + z) for s, z in columns])
            ratio = min(_smallest_pivot_ratio(sample[np.ix_(row_order, col_order)],
                                              first_rows.size) for sample in samples)
            if ratio > best:
                best, order = ratio, (row_order, col_order, first_rows.size + rows[0][1])
    return order


def lane_plan(solver) -> LanePlan:
    """The tables of the started ``solver`` (a scheme with unknowns (q1, p1, lambda, gamma),
    tensor form, potential linear in q) at its step size."""
    model, h = solver.model, solver.h
    n, m = model.n, model.m
    builder = solver._equations(solver._polynomial_layout)
    n_d, n_x, n_w = builder.n_data, builder.n_unknowns, builder.n_w
    constant, linear, (out, j, k, values) = builder.collected()
    one = n_w
    linear = linear.tocoo()
    (uv_ptr, uv_idx, uv_val, o_row, o_first, o_second, o_scale), replaced, explicit = (
        _overrides(builder, n_w))
    # residual: c + L w + sum v w_j w_k, the replaced rows from their factored form
    r_rows = np.concatenate([np.arange(n_x), linear.row, out])
    r_first = np.concatenate([np.full(n_x, one), linear.col, j])
    r_second = np.concatenate([np.full(n_x, one), np.full(linear.nnz, one), k])
    r_coef = np.concatenate([constant, linear.data, values])
    keep = ~np.isin(r_rows, replaced)
    residual = list(_monomial_rows(r_rows[keep], r_first[keep], r_second[keep], r_coef[keep],
                                   n_x, one))
    residual[0][replaced] = explicit
    # Newton matrix dR/dx: L_x + sum v (w_k e_j + w_j e_k) over the unknown columns
    x_j, x_k = j >= n_d, k >= n_d
    entry_row = np.concatenate([linear.row, out[x_j], out[x_k]])
    entry_col = np.concatenate([linear.col, j[x_j], k[x_k]]) - n_d
    entry_var = np.concatenate([np.full(linear.nnz, one), k[x_j], j[x_k]])
    entry_coef = np.concatenate([linear.data, values[x_j], values[x_k]])
    unknown = entry_col >= 0
    entry_row, entry_col, entry_var, entry_coef = (
        a[unknown] for a in (entry_row, entry_col, entry_var, entry_coef))
    # the explicit predictor y = c + L v + 1/2 D(v) v over v = (q, p, lam, gam), 1 at 2n + 2m
    prediction = explicit_predictor_map(model, h, solver._new_momentum_weight, solver._warm_gamma,
                           solver._predict_with_gamma, solver._constant_gradient)
    inputs = 2 * n + 2 * m
    lin = sp.coo_matrix(prediction.linear)
    tensor = prediction.tensor.tocoo()
    p_out, p_first = np.divmod(tensor.row, inputs)
    predictor = _monomial_rows(
        np.concatenate([np.arange(inputs), lin.row, p_out]),
        np.concatenate([np.full(inputs, inputs), lin.col, p_first]),
        np.concatenate([np.full(inputs, inputs), np.full(lin.nnz, inputs), tensor.col]),
        np.concatenate([prediction.constant, lin.data, 0.5 * tensor.data]), inputs, inputs)
    # sample matrices of the pivot order, from the model's state: at the first guess of a
    # step, where the kernel meets it, and with multipliers from a seed
    q0, p0 = model.q0, model.p0
    samples = []
    for x in (prediction(np.concatenate([q0, p0, np.zeros(2 * m)])),
              solver._sample_unknowns(q0, p0, np.random.default_rng(0))):
        w = np.concatenate([q0, p0, x, [1.0]])
        samples.append(np.zeros((n_x, n_x)))
        np.add.at(samples[-1], (entry_row, entry_col), entry_coef * w[entry_var])
    identity = solver._identity_block()
    row_order, column_order, trailing = _pivot_order(samples, identity, *builder.blocks())
    position_of_row = np.argsort(row_order)
    position_of_col = np.argsort(column_order)
    pivot_row, pivot_col = position_of_row[entry_row], position_of_col[entry_col]
    pattern = np.eye(n_x, dtype=bool)
    pattern[pivot_row, pivot_col] = True
    e_row, e_col, *elimination, counts = _elimination(pattern, trailing)
    schur = np.flatnonzero((e_row >= trailing) & (e_col >= trailing))
    index = np.full((n_x, n_x), -1, dtype=np.int64)
    index[e_row, e_col] = np.arange(e_row.size)
    jacobian = _monomial_rows(index[pivot_row, pivot_col], entry_var,
                              np.full(entry_var.size, one), entry_coef, e_row.size, one)
    counts.update(residual_terms=int(residual[2].size), jacobian_terms=int(jacobian[2].size),
                  predictor_terms=int(predictor[2].size), factored_products=int(o_row.size))
    return LanePlan(n_w, tuple(residual),
                    (uv_ptr, uv_idx, uv_val, o_row, o_first, o_second, o_scale),
                    jacobian, predictor, row_order.astype(np.int64),
                    column_order.astype(np.int64),
                    0 if identity is None else identity[0].stop - identity[0].start,
                    trailing, tuple(elimination), (e_row, e_col),
                    (schur, e_row[schur] - trailing, e_col[schur] - trailing), counts)
