"""QuadraticTable and AffineVector against dense references built by hand."""

from __future__ import annotations

import numpy as np
import pytest

from mbs.quadratic import (
    AffineVector,
    QuadraticTable,
    QuadraticTableBuilder,
    concatenate_tables,
)

N = 9
ROWS = 5


def random_table(rng, n=N, n_rows=ROWS, n_quad=30, n_lin=12):
    """A table from random raw coefficients (duplicates and diagonal terms included) and its
    dense reference (A_k, b_k, e_k) accumulated by hand."""
    quad_row = rng.integers(0, n_rows, n_quad)
    quad_i = rng.integers(0, n, n_quad)
    quad_j = rng.integers(0, n, n_quad)
    quad_i[:4] = quad_j[:4]  # some squares
    quad_i[4:6], quad_j[4:6], quad_row[4:6] = 2, 3, 1  # a duplicated entry
    quad_coef = rng.standard_normal(n_quad)
    lin_row = rng.integers(0, n_rows, n_lin)
    lin_i = rng.integers(0, n, n_lin)
    lin_coef = rng.standard_normal(n_lin)
    constant = rng.standard_normal(n_rows)
    table = QuadraticTable(n, n_rows, quad_row, quad_i, quad_j, quad_coef, lin_row, lin_i,
                           lin_coef, constant)
    a = np.zeros((n_rows, n, n))
    b = np.zeros((n_rows, n))
    for k, i, j, c in zip(quad_row, quad_i, quad_j, quad_coef):
        a[k, i, j] += c
    for k, i, c in zip(lin_row, lin_i, lin_coef):
        b[k, i] += c
    return table, (a, b, constant.copy())


def dense_value(ref, q):
    a, b, e = ref
    return np.einsum("i,kij,j->k", q, a, q) + b @ q + e


def dense_jacobian(ref, q):
    a, b, _ = ref
    return np.einsum("kij,j->ki", a + a.transpose(0, 2, 1), q) + b


def dense_hessian_product(ref, mult):
    a, _, _ = ref
    return np.einsum("k,kij->ij", mult, a + a.transpose(0, 2, 1))


def test_value_jacobian_hessian_match_dense_reference(rng):
    table, ref = random_table(rng)
    for _ in range(3):
        q = rng.standard_normal(N)
        mult = rng.standard_normal(ROWS)
        np.testing.assert_allclose(table.value(q), dense_value(ref, q), rtol=0, atol=1e-12)
        jac = table.jacobian(q)
        assert jac.shape == (ROWS, N)
        np.testing.assert_allclose(jac.toarray(), dense_jacobian(ref, q), rtol=0, atol=1e-12)
        hess = table.hessian_product(mult)
        assert hess.shape == (N, N)
        np.testing.assert_allclose(hess.toarray(), dense_hessian_product(ref, mult),
                                   rtol=0, atol=1e-12)
        np.testing.assert_allclose(hess.toarray(), hess.toarray().T, atol=1e-14)


def test_jacobian_pattern_independent_of_q(rng):
    table, _ = random_table(rng)
    jac_zero = table.jacobian(np.zeros(N))
    jac_rand = table.jacobian(rng.standard_normal(N))
    np.testing.assert_array_equal(jac_zero.indptr, jac_rand.indptr)
    np.testing.assert_array_equal(jac_zero.indices, jac_rand.indices)


def test_exact_midpoint_discrete_derivative(rng):
    table, _ = random_table(rng)
    q0, q1 = rng.standard_normal(N), rng.standard_normal(N)
    lhs = table.value(q1) - table.value(q0)
    rhs = table.jacobian(0.5 * (q0 + q1)) @ (q1 - q0)
    np.testing.assert_allclose(lhs, rhs, rtol=0, atol=1e-12)


def test_rows_selects_and_reorders(rng):
    table, ref = random_table(rng)
    selection = np.array([3, 0, 4])
    sub = table.rows(selection)
    q = rng.standard_normal(N)
    mult = rng.standard_normal(selection.size)
    sub_ref = tuple(x[selection] for x in ref)
    assert sub.n_rows == 3
    np.testing.assert_allclose(sub.value(q), dense_value(sub_ref, q), atol=1e-12)
    np.testing.assert_allclose(sub.jacobian(q).toarray(), dense_jacobian(sub_ref, q),
                               atol=1e-12)
    np.testing.assert_allclose(sub.hessian_product(mult).toarray(),
                               dense_hessian_product(sub_ref, mult), atol=1e-12)


def test_concatenate_tables(rng):
    first, ref1 = random_table(rng, n_rows=2)
    second, ref2 = random_table(rng, n_rows=4)
    both = concatenate_tables([first, second], N)
    ref = tuple(np.concatenate([x, y]) for x, y in zip(ref1, ref2))
    q = rng.standard_normal(N)
    mult = rng.standard_normal(6)
    assert both.n_rows == 6
    np.testing.assert_allclose(both.value(q), dense_value(ref, q), atol=1e-12)
    np.testing.assert_allclose(both.jacobian(q).toarray(), dense_jacobian(ref, q), atol=1e-12)
    np.testing.assert_allclose(both.hessian_product(mult).toarray(),
                               dense_hessian_product(ref, mult), atol=1e-12)
    empty = concatenate_tables([], N)
    assert empty.n_rows == 0
    assert empty.value(q).shape == (0,)
    assert empty.jacobian(q).shape == (0, N)
    assert empty.hessian_product(np.zeros(0)).shape == (N, N)


def test_is_linear_row():
    empty_i = np.zeros(0, dtype=np.int64)
    table = QuadraticTable(
        4, 3, np.array([1]), np.array([0]), np.array([2]), np.array([2.0]),
        np.array([0, 2]), np.array([1, 3]), np.array([1.0, -1.0]), np.zeros(3))
    np.testing.assert_array_equal(table.is_linear_row(), [True, False, True])
    constant_only = QuadraticTable(4, 1, empty_i, empty_i, empty_i, np.zeros(0), empty_i,
                                   empty_i, np.zeros(0), np.array([2.5]))
    np.testing.assert_allclose(constant_only.value(np.ones(4)), [2.5])
    assert constant_only.jacobian(np.ones(4)).nnz == 0


def test_affine_vector_algebra(rng):
    q = rng.standard_normal(12)
    c1, c2 = rng.standard_normal(3), rng.standard_normal(3)
    a = AffineVector(((2.0, 0), (-0.5, 6)), c1)  # 2 q[0:3] - 0.5 q[6:9] + c1
    b = AffineVector(((1.5, 3),), c2)  # 1.5 q[3:6] + c2
    a_hand = 2.0 * q[0:3] - 0.5 * q[6:9] + c1
    b_hand = 1.5 * q[3:6] + c2
    np.testing.assert_allclose(a.evaluate(q), a_hand)
    np.testing.assert_allclose((a + b).evaluate(q), a_hand + b_hand)
    np.testing.assert_allclose((a - b).evaluate(q), a_hand - b_hand)
    np.testing.assert_allclose((-a).evaluate(q), -a_hand)
    np.testing.assert_allclose(a.scaled(-3.0).evaluate(q), -3.0 * a_hand)
    np.testing.assert_allclose(AffineVector().evaluate(q), np.zeros(3))


@pytest.mark.parametrize("scale", [1.0, -0.7])
def test_builder_rows_evaluate_to_hand_formulas(rng, scale):
    n = 12
    q = rng.standard_normal(n)
    c1, c2, direction = rng.standard_normal(3), rng.standard_normal(3), rng.standard_normal(3)
    a = AffineVector(((2.0, 0), (-0.5, 6)), c1)
    b = AffineVector(((1.5, 3), (1.0, 0)), c2)
    builder = QuadraticTableBuilder(n)
    r0 = builder.new_row()
    builder.add_dot(r0, a, b, scale)
    builder.add_constant(r0, 0.25)
    r1 = builder.new_row()
    builder.add_linear_component(r1, a, direction, scale)
    r2 = builder.new_row()
    builder.add_dot(r2, a, a)
    builder.add_constant(r2, -1.0)
    table = builder.build()
    assert (r0, r1, r2) == (0, 1, 2) and table.n_rows == 3
    a_val, b_val = a.evaluate(q), b.evaluate(q)
    expected = [scale * a_val @ b_val + 0.25, scale * direction @ a_val, a_val @ a_val - 1.0]
    np.testing.assert_allclose(table.value(q), expected, rtol=1e-13, atol=1e-13)
    # Jacobian of a.b by hand: d(a.b)/dq = (da/dq)^T b + (db/dq)^T a
    da = np.zeros((3, n))
    da[:, 0:3] += 2.0 * np.eye(3)
    da[:, 6:9] += -0.5 * np.eye(3)
    db = np.zeros((3, n))
    db[:, 3:6] += 1.5 * np.eye(3)
    db[:, 0:3] += np.eye(3)
    jac = table.jacobian(q).toarray()
    np.testing.assert_allclose(jac[0], scale * (da.T @ b_val + db.T @ a_val), atol=1e-12)
    np.testing.assert_allclose(jac[1], scale * da.T @ direction, atol=1e-12)
    np.testing.assert_allclose(jac[2], 2.0 * da.T @ a_val, atol=1e-12)
    hess = table.hessian_product(np.array([1.0, 0.0, 0.0])).toarray()
    np.testing.assert_allclose(hess, scale * (da.T @ db + db.T @ da), atol=1e-12)


def test_dense_and_matrix_free_evaluations_match_dense_reference(rng):
    """The fast paths solvers use: J^T y without the matrix, dense J, dense sum_k mult_k
    Hess c_k and the Hessian-vector map D_q[J(q) w] (row k = (Hess c_k w)^T)."""
    table, ref = random_table(rng)
    a = ref[0]
    q, y, w = rng.standard_normal(N), rng.standard_normal(ROWS), rng.standard_normal(N)
    mult = rng.standard_normal(ROWS)
    jac = dense_jacobian(ref, q)
    np.testing.assert_allclose(table.jacobian_transpose_product(q, y), jac.T @ y, atol=1e-12)
    np.testing.assert_allclose(table.jacobian_dense(q), jac, atol=1e-12)
    np.testing.assert_allclose(table.hessian_product_dense(mult),
                               dense_hessian_product(ref, mult), atol=1e-12)
    expected_hv = np.einsum("kij,j->ki", a + a.transpose(0, 2, 1), w)
    np.testing.assert_allclose(table.hessian_vector_product(w).toarray(), expected_hv,
                               atol=1e-12)
    np.testing.assert_allclose(table.hessian_vector_product_dense(w), expected_hv, atol=1e-12)
    # consistency of the two Hessian forms: (sum_k mult_k H_k) w = (D_q[J w])^T mult
    np.testing.assert_allclose(table.hessian_product(mult) @ w, expected_hv.T @ mult,
                               atol=1e-12)


def test_batched_values_and_gradients_match_single_point_evaluation():
    """QuadraticTable.values / jacobian_transpose_products and Model.potential_gradients,
    vectorised over configurations, equal the one-configuration methods."""
    import four_particle

    model = four_particle.build().compile()
    rng = np.random.default_rng(11)
    Q = model.q0 + 0.2 * rng.standard_normal((4, model.n))
    table = model.quadratic_constraint_table
    np.testing.assert_allclose(table.values(Q), [table.value(q) for q in Q], atol=1e-14)
    Y = rng.standard_normal((4, table.n_rows))
    np.testing.assert_allclose(table.jacobian_transpose_products(Q, Y),
                               [table.jacobian(q).T @ y for q, y in zip(Q, Y)], atol=1e-13)
    np.testing.assert_allclose(model.potential_gradients(Q),
                               [model.potential_gradient(q) for q in Q], rtol=1e-13, atol=1e-12)
