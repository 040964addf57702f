"""Compiled geometry of joint angles and body torques: the angle s, its force direction J
and their derivatives for a batch of angle efforts (joint torques and dampers,
``JointEfforts``), and the torque coordinates of loads with a torque.

The batched NumPy form in :mod:`mbs.forces.applied` spends its time in the calls of many
small array operations (a few µs each, some sixty per evaluation); the kernels here run the
same formulas as loops over the terms, compiled by numba (this module needs it;
:mod:`mbs.forces.applied` imports it only when numba can be imported). For each
term, with the affine vectors e1, e2 (body a), f1 (body b) and the axis w of the local
coordinates q, and each body's directors d_i (rows of D) with sign +1 for body b, -1 for
body a:

* s = atan2(f1 . e2, f1 . e1); J collects +-(c x d_i) at the directors of each body, with
  c = K(D)^-1 w and K(D) = tr(D^T D) I - D^T D (Betsch and Steinmann's torque coordinates,
  exact also at directors that are not orthonormal);
* ds/dq from the affine maps of e1, e2, f1;
* dJ/dq from dc = K^-1 (dw - sum_j (2 c d_j^T - (d_j . c) I - d_j c^T) dd_j) and
  dQ_i = -[d_i]x dc + [c]x dd_i.
"""

from __future__ import annotations

import math

import numba
import numpy as np

_jit = numba.njit(cache=True, nogil=True)


@_jit
def _affine(matrix, constant, q, k, term, out):
    """out = A q_k + c with the affine map of ``term`` of a batch of maps (terms, 3, size)."""
    for a in range(3):
        total = constant[term, a]
        for j in range(q.shape[1]):
            total += matrix[term, a, j] * q[k, j]
        out[a] = total


@_jit
def _frame(q, k, directors, term, frame):
    """The directors of ``term`` at state k as the rows of ``frame`` (3, 3)."""
    for i in range(3):
        for a in range(3):
            frame[i, a] = q[k, directors[term, i, a]]


@_jit
def _generator_inverse(frame, inverse):
    """K(D)^-1 with K = tr(G) I - G, G = D^T D, by its cofactors."""
    gram = np.zeros((3, 3))
    for i in range(3):
        for a in range(3):
            for b in range(3):
                gram[a, b] += frame[i, a] * frame[i, b]
    trace = gram[0, 0] + gram[1, 1] + gram[2, 2]
    generator = -gram
    for a in range(3):
        generator[a, a] += trace
    for a in range(3):
        for b in range(3):
            a1, a2, b1, b2 = (b + 1) % 3, (b + 2) % 3, (a + 1) % 3, (a + 2) % 3
            inverse[a, b] = (generator[a1, b1] * generator[a2, b2]
                             - generator[a1, b2] * generator[a2, b1])
    determinant = (generator[0, 0] * inverse[0, 0] + generator[0, 1] * inverse[1, 0]
                   + generator[0, 2] * inverse[2, 0])
    for a in range(3):
        for b in range(3):
            inverse[a, b] /= determinant


@_jit
def _cross(u, v, out):
    out[0] = u[1] * v[2] - u[2] * v[1]
    out[1] = u[2] * v[0] - u[0] * v[2]
    out[2] = u[0] * v[1] - u[1] * v[0]


@_jit
def _torque_rows(frame, torque, inverse, c, rows):
    """Q_i = c x d_i, c = K(D)^-1 w (the torque coordinates of the world torque w on a body
    with directors D as rows of ``frame``) into ``rows`` (3, 3); leaves K^-1 in ``inverse``
    and c in ``c``."""
    _generator_inverse(frame, inverse)
    for a in range(3):
        c[a] = inverse[a, 0] * torque[0] + inverse[a, 1] * torque[1] + inverse[a, 2] * torque[2]
    for i in range(3):
        _cross(c, frame[i], rows[i])


@_jit
def _torque_row_derivatives(frame, c, inverse, by_directors, by_torque):
    """dQ_i[a]/dd_j[b] as ``by_directors`` [i, a, j, b] and dQ_i[a]/dw[b] as ``by_torque``
    [i, a, b] of the rows of :func:`_torque_rows` (with its K^-1 and c)."""
    c_by_directors = np.empty((3, 3, 3))  # dc[a] / dd_j[b] as [a, j, b]
    column, crossed = np.empty(3), np.empty(3)
    for j in range(3):
        along = frame[j, 0] * c[0] + frame[j, 1] * c[1] + frame[j, 2] * c[2]
        for b in range(3):
            # column b of dK c / dd_j: 2 c d_j[b] - (d_j . c) e_b - d_j c[b]
            for m in range(3):
                column[m] = 2.0 * c[m] * frame[j, b] - frame[j, m] * c[b]
            column[b] -= along
            for a in range(3):
                c_by_directors[a, j, b] = -(inverse[a, 0] * column[0]
                                            + inverse[a, 1] * column[1]
                                            + inverse[a, 2] * column[2])
    for i in range(3):
        for j in range(3):
            for b in range(3):
                # -[d_i]x dc/dd_j[b], plus [c]x e_b where j = i
                _cross(frame[i], c_by_directors[:, j, b], crossed)
                for a in range(3):
                    value = -crossed[a]
                    if i == j and b == (a + 2) % 3:
                        value += c[(a + 1) % 3]
                    elif i == j and b == (a + 1) % 3:
                        value -= c[(a + 2) % 3]
                    by_directors[i, a, j, b] = value
        for b in range(3):  # -[d_i]x K^-1 e_b
            _cross(frame[i], inverse[:, b], crossed)
            for a in range(3):
                by_torque[i, a, b] = -crossed[a]


@_jit
def _torque_coordinates_kernel(frames, torques, rows):
    """:func:`_torque_rows` of a batch: frames (k, 3, 3), torques (k, 3) -> rows (k, 3, 3)."""
    inverse, c = np.empty((3, 3)), np.empty(3)
    for k in range(frames.shape[0]):
        _torque_rows(frames[k], torques[k], inverse, c, rows[k])


@_jit
def _torque_derivatives_kernel(frames, torques, by_directors, by_torque):
    """:func:`_torque_row_derivatives` of a batch: (k, 3, 3, 3, 3) and (k, 3, 3, 3)."""
    inverse, c, rows = np.empty((3, 3)), np.empty(3), np.empty((3, 3))
    for k in range(frames.shape[0]):
        _torque_rows(frames[k], torques[k], inverse, c, rows)
        _torque_row_derivatives(frames[k], c, inverse, by_directors[k], by_torque[k])


@_jit
def _coordinate_kernel(q, axis_map, axis_constant, first_map, first_constant, second_map,
                       second_constant, reference_map, reference_constant, directors_a,
                       directors_b, angle, rows):
    """s (k,) and J (k, size) of a batch: ``angle`` and ``rows`` (zeros) are filled."""
    e1, e2, f1, axis = np.empty(3), np.empty(3), np.empty(3), np.empty(3)
    frame, inverse, torque_rows = np.empty((3, 3)), np.empty((3, 3)), np.empty((3, 3))
    c = np.empty(3)
    for k in range(q.shape[0]):
        term = k if first_map.shape[0] > 1 else 0  # one term at many states, or k terms
        _affine(first_map, first_constant, q, k, term, e1)
        _affine(second_map, second_constant, q, k, term, e2)
        _affine(reference_map, reference_constant, q, k, term, f1)
        _affine(axis_map, axis_constant, q, k, term, axis)
        y = f1[0] * e2[0] + f1[1] * e2[1] + f1[2] * e2[2]
        x = f1[0] * e1[0] + f1[1] * e1[1] + f1[2] * e1[2]
        angle[k] = math.atan2(y, x)
        for directors, sign in ((directors_b, 1.0), (directors_a, -1.0)):
            if directors.shape[0] == 0:
                continue
            _frame(q, k, directors, term, frame)
            _torque_rows(frame, axis, inverse, c, torque_rows)
            for i in range(3):
                for a in range(3):
                    rows[k, directors[term, i, a]] += sign * torque_rows[i, a]


@_jit
def _gradient_kernel(q, first_map, first_constant, second_map, second_constant,
                     reference_map, reference_constant, gradient):
    """ds/dq (k, size) of s = atan2(y, x), y = f1 . e2, x = f1 . e1, into ``gradient``."""
    e1, e2, f1 = np.empty(3), np.empty(3), np.empty(3)
    for k in range(q.shape[0]):
        term = k if first_map.shape[0] > 1 else 0
        _affine(first_map, first_constant, q, k, term, e1)
        _affine(second_map, second_constant, q, k, term, e2)
        _affine(reference_map, reference_constant, q, k, term, f1)
        y = f1[0] * e2[0] + f1[1] * e2[1] + f1[2] * e2[2]
        x = f1[0] * e1[0] + f1[1] * e1[1] + f1[2] * e1[2]
        norm = x * x + y * y
        for j in range(q.shape[1]):
            grad_y, grad_x = 0.0, 0.0
            for a in range(3):
                grad_y += reference_map[term, a, j] * e2[a] + second_map[term, a, j] * f1[a]
                grad_x += reference_map[term, a, j] * e1[a] + first_map[term, a, j] * f1[a]
            gradient[k, j] = (x * grad_y - y * grad_x) / norm


@_jit
def _row_derivative_kernel(q, axis_map, axis_constant, directors_a, directors_b, d_row):
    """dJ/dq (k, size, size) of a batch, [k, r, c] = dJ_r/dq_c, into ``d_row`` (zeros): the
    rows' derivatives by the directors, and by the axis w = A_axis q + a."""
    axis, c = np.empty(3), np.empty(3)
    frame, inverse, torque_rows = np.empty((3, 3)), np.empty((3, 3)), np.empty((3, 3))
    by_directors, by_torque = np.empty((3, 3, 3, 3)), np.empty((3, 3, 3))
    for k in range(q.shape[0]):
        term = k if axis_map.shape[0] > 1 else 0
        _affine(axis_map, axis_constant, q, k, term, axis)
        for directors, sign in ((directors_b, 1.0), (directors_a, -1.0)):
            if directors.shape[0] == 0:
                continue
            _frame(q, k, directors, term, frame)
            _torque_rows(frame, axis, inverse, c, torque_rows)
            _torque_row_derivatives(frame, c, inverse, by_directors, by_torque)
            for i in range(3):
                for a in range(3):
                    row = directors[term, i, a]
                    for j in range(3):
                        for b in range(3):
                            d_row[k, row, directors[term, j, b]] += (
                                sign * by_directors[i, a, j, b])
                    for b in range(3):
                        for col in range(q.shape[1]):
                            d_row[k, row, col] += sign * by_torque[i, a, b] * axis_map[
                                term, b, col]


_NO_DIRECTORS = np.zeros((0, 3, 3), dtype=np.intp)


def _directors(data: dict, key: str) -> np.ndarray:
    """The batch's director positions of one body, (k, 3, 3); none for the ground."""
    directors = data[key]
    return _NO_DIRECTORS if directors is None else directors.astype(np.intp, copy=False)


def coordinate(data: dict, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(s, J) of a batch of angle terms at local coordinates q (k, size)."""
    q = np.ascontiguousarray(q, dtype=float)
    angle, rows = np.empty(q.shape[0]), np.zeros(q.shape)
    _coordinate_kernel(q, *data["axis"], *data["first"], *data["second"], *data["reference"],
                       _directors(data, "directors_a"), _directors(data, "directors_b"),
                       angle, rows)
    return angle, rows


def gradient(data: dict, q: np.ndarray) -> np.ndarray:
    """ds/dq of a batch of angle terms at local coordinates q (k, size)."""
    q = np.ascontiguousarray(q, dtype=float)
    out = np.empty(q.shape)
    _gradient_kernel(q, *data["first"], *data["second"], *data["reference"], out)
    return out


def row_derivative(data: dict, q: np.ndarray) -> np.ndarray:
    """dJ/dq of a batch of angle terms at local coordinates q (k, size), (k, size, size)."""
    q = np.ascontiguousarray(q, dtype=float)
    out = np.zeros(q.shape + q.shape[1:])
    _row_derivative_kernel(q, *data["axis"], _directors(data, "directors_a"),
                           _directors(data, "directors_b"), out)
    return out


def torque_coordinates(frames: np.ndarray, torques: np.ndarray) -> np.ndarray:
    """The rows c x d_i, c = K(D)^-1 w, for directors (k, 3, 3) as rows and world torques
    w (k, 3): (k, 3, 3)."""
    frames = np.ascontiguousarray(frames, dtype=float)
    rows = np.empty(frames.shape)
    _torque_coordinates_kernel(frames, np.ascontiguousarray(torques, dtype=float), rows)
    return rows


def torque_coordinate_derivatives(frames: np.ndarray, torques: np.ndarray
                                  ) -> tuple[np.ndarray, np.ndarray]:
    """Derivatives of :func:`torque_coordinates` by the directors, (k, i, a, j, b), and by
    the torque, (k, i, a, b)."""
    frames = np.ascontiguousarray(frames, dtype=float)
    count = frames.shape[0]
    by_directors, by_torque = np.empty((count, 3, 3, 3, 3)), np.empty((count, 3, 3, 3))
    _torque_derivatives_kernel(frames, np.ascontiguousarray(torques, dtype=float),
                               by_directors, by_torque)
    return by_directors, by_torque
