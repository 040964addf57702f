"""The rotation group SO(3): exponential, logarithm, trivialised tangents, Cayley map.

The Lie algebra so(3) is identified with R^3 through the hat map, ``hat(w) @ v == cross(w, v)``,
and its dual with R^3 through the dot product. Then ``ad_x y = x x y`` and ``ad*_x mu = mu x x``.
Every function accepts stacked input: vectors of shape ``(..., 3)`` and matrices of shape
``(..., 3, 3)``, and works on all leading indices at once.

Conventions follow G. Bogfjellmo and H. Marthinsen, "High order symplectic partitioned Lie group
methods" (preprint, 2014), section 1.2: the *right-trivialised* tangent of the exponential is

    d/dt exp(w(t)) = hat(dexp_w w') exp(w(t)),   dexp_w = sum_k ad_w^k / (k + 1)!,

and ``dexp^{-1}_{(r), w} = sum_{k=0}^{r} (B_k / k!) ad_w^k`` is its Taylor truncation of order r
(Bernoulli numbers with B_1 = -1/2, so r = 0 gives the identity; the paper's eq. (14) prints the
sum from k = 2 after "id - ad/2", which is literal only for r >= 1). The left-trivialised
versions, ``exp(w)^{-1} d/dt exp(w) = hat(dexp^L_w w')``, are ``dexp^L_w = dexp_{-w}``.

Accuracy of the closed forms
----------------------------
With W = hat(w) and theta = |w| (u = 2.2e-16 is the unit round-off of float64):

* exp(w) = I + a W + b W^2 with a = sin(theta)/theta, b = (1 - cos theta)/theta^2;
* dexp_w = I + b W + c W^2 with c = (theta - sin theta)/theta^3;
* dexp^{-1}_w = I - W/2 + d W^2 with d = (1 - (theta/2) cot(theta/2))/theta^2 (theta < 2 pi).

a needs no cancellation-free rewrite: ``sin(theta)/theta`` has a relative error of about one
unit in the last place for every theta > 0, and the Taylor polynomial is used below
:data:`SINC_TAYLOR_BELOW` only to avoid 0/0; its truncation error theta^8/9! is 7e-20 there.
b is evaluated as a(theta/2)^2 / 2 (from 1 - cos theta = 2 sin^2(theta/2)), which has no
cancellation either. c and d suffer cancellation: the rounding of sin theta (or of
(theta/2) cot(theta/2), about 1.5 u) is amplified by 3/theta^2 (by 18/theta^2 for d), so the
direct formulas are used only above :data:`C_TAYLOR_BELOW` = 1 and :data:`D_TAYLOR_BELOW` = 3,
where that bound is below 3 u and 2 u. Below them the Maclaurin series are summed to the term
whose successor is below 1e-19 relative at the threshold (9 terms for c, whose terms fall like
theta^2/(2k+4)(2k+5); 34 terms for d, whose terms fall like (theta/2 pi)^2 = 0.23 at theta = 3).
The coefficients are then accurate to a few units of u over the whole range, so the maps are
machine-precise, which the variational integrators need for symplecticity (paper, section 4.1).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable
from fractions import Fraction
from functools import cache
from math import factorial
from typing import Literal

import numpy as np

Trivialization = Literal["right", "left"]

#: Below this angle sin(theta)/theta is evaluated by its Maclaurin polynomial (to theta^6).
SINC_TAYLOR_BELOW = 0.02
#: Below this angle (theta - sin theta)/theta^3 is evaluated by its Maclaurin polynomial.
C_TAYLOR_BELOW = 1.0
#: Below this angle (1 - (theta/2) cot(theta/2))/theta^2 is evaluated by its Maclaurin polynomial.
D_TAYLOR_BELOW = 3.0
#: Above this angle the logarithm reads the rotation axis from the symmetric part of g, because
#: the skew part sin(theta) n loses the axis as theta -> pi (error u theta / sin theta would exceed
#: 2.2 u); below it the skew part is used, whose relative accuracy the symmetric part lacks as
#: theta -> 0.
LOG_SYMMETRIC_ABOVE = 2.0


def bernoulli_numbers(count: int) -> tuple[Fraction, ...]:
    """Bernoulli numbers B_0 ... B_{count-1} with the convention B_1 = -1/2 (exact fractions).

    Uses the recurrence sum_{j=0}^{m} binom(m+1, j) B_j = 0 for m >= 1.
    """
    numbers: list[Fraction] = []
    for m in range(count):
        if m == 0:
            numbers.append(Fraction(1))
            continue
        total = sum(Fraction(_binomial(m + 1, j)) * numbers[j] for j in range(m))
        numbers.append(-total / (m + 1))
    return tuple(numbers)


def _binomial(n: int, k: int) -> int:
    return factorial(n) // (factorial(k) * factorial(n - k))


_BERNOULLI = bernoulli_numbers(72)

# Maclaurin coefficients in powers of theta^2 (lowest first).
_SINC_SERIES = np.array([(-1) ** k / factorial(2 * k + 1) for k in range(4)])
_C_SERIES = np.array([(-1) ** k / factorial(2 * k + 3) for k in range(9)])
# 1 - x cot x = sum_{n>=1} |B_2n| (2x)^2n / (2n)!, hence d = sum_{n>=1} |B_2n|/(2n)! theta^(2n-2).
_D_SERIES = np.array([float(abs(_BERNOULLI[2 * n]) / factorial(2 * n)) for n in range(1, 35)])


def _polynomial_in_square(coefficients: np.ndarray, theta_squared: np.ndarray) -> np.ndarray:
    """Horner evaluation of sum_k coefficients[k] * theta_squared**k."""
    if len(coefficients) == 1:
        return np.full(np.shape(theta_squared), float(coefficients[0]))
    result = coefficients[-1] * theta_squared + coefficients[-2]
    for coefficient in coefficients[-3::-1]:
        result = result * theta_squared + coefficient
    return result


def _series_radii(coefficients: np.ndarray) -> list[float]:
    """radii[N - 1]: the largest theta for which the first N terms leave a remainder below
    1e-19 relative, estimated by the first omitted term |c_N| theta^(2N). (The series used here
    decrease at least geometrically with ratio below 1/4 where they are used, so the omitted
    tail is at most 4/3 of that term.)"""
    radii = [(1e-19 * abs(coefficients[0]) / abs(coefficients[n])) ** (1.0 / (2 * n))
             for n in range(1, len(coefficients))]
    return radii + [np.inf]


_SINC_RADII = _series_radii(_SINC_SERIES)
_C_RADII = _series_radii(_C_SERIES)
_D_RADII = _series_radii(_D_SERIES)


def _branched(theta: np.ndarray, threshold: float, series: np.ndarray, radii: list[float],
              direct: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """series(theta^2) below ``threshold``, direct(theta) above; each evaluated only if used."""
    theta_max = float(theta.max(initial=0.0))
    if theta_max < threshold:
        # The common case inside the integrators (theta ~ h |xi|): sum only the terms needed.
        return _polynomial_in_square(series[:bisect_left(radii, theta_max) + 1], theta * theta)
    if theta.min() >= threshold:
        return direct(theta)
    small = theta < threshold
    safe = np.where(small, threshold, theta)
    return np.where(small, _polynomial_in_square(series, theta * theta), direct(safe))


def _sinc(theta: np.ndarray) -> np.ndarray:
    """sin(theta)/theta."""
    return _branched(theta, SINC_TAYLOR_BELOW, _SINC_SERIES, _SINC_RADII, lambda t: np.sin(t) / t)


def _one_minus_cos_over_square(theta: np.ndarray) -> np.ndarray:
    """(1 - cos theta)/theta^2, written as sinc(theta/2)^2 / 2 to avoid cancellation."""
    half = _sinc(0.5 * theta)
    return 0.5 * half * half


def _theta_minus_sin_over_cube(theta: np.ndarray) -> np.ndarray:
    """(theta - sin theta)/theta^3."""
    return _branched(theta, C_TAYLOR_BELOW, _C_SERIES, _C_RADII,
                     lambda t: (t - np.sin(t)) / (t * t * t))


def _dexp_inv_coefficient(theta: np.ndarray) -> np.ndarray:
    """(1 - (theta/2) cot(theta/2))/theta^2, finite for theta < 2 pi."""
    return _branched(theta, D_TAYLOR_BELOW, _D_SERIES, _D_RADII,
                     lambda t: (1.0 - 0.5 * t / np.tan(0.5 * t)) / (t * t))


_EYE = np.eye(3)
# hat(w) = w @ _HAT reshaped: the linear map R^3 -> R^9 of the skew matrix entries.
_HAT = np.zeros((3, 9))
_HAT[0, 5], _HAT[0, 7] = -1.0, 1.0
_HAT[1, 2], _HAT[1, 6] = 1.0, -1.0
_HAT[2, 1], _HAT[2, 3] = -1.0, 1.0


def hat(w: np.ndarray) -> np.ndarray:
    """Skew matrix of ``w``: ``hat(w) @ v == np.cross(w, v)``; shape (..., 3) -> (..., 3, 3)."""
    w = np.asarray(w, dtype=float)
    return (w @ _HAT).reshape(w.shape + (3,))


def vee(matrix: np.ndarray) -> np.ndarray:
    """Inverse of :func:`hat` on the skew part: vee(A) = axial vector of (A - A^T)/2."""
    matrix = np.asarray(matrix, dtype=float)
    return 0.5 * np.stack([matrix[..., 2, 1] - matrix[..., 1, 2],
                           matrix[..., 0, 2] - matrix[..., 2, 0],
                           matrix[..., 1, 0] - matrix[..., 0, 1]], axis=-1)


def cross(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a x b for stacked vectors (..., 3), computed as hat(a) b: within one rounding of
    ``np.cross`` at a fraction of its cost on small arrays."""
    return (hat(a) @ np.asarray(b, dtype=float)[..., None])[..., 0]


def _hat_and_angle(w: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    w = np.asarray(w, dtype=float)
    skew = hat(w)
    return skew, skew @ skew, np.sqrt(np.einsum("...i,...i->...", w, w))


def exp(w: np.ndarray) -> np.ndarray:
    """Rotation matrix exp(hat(w)) by Rodrigues' formula I + a W + b W^2 (module docstring)."""
    skew, square, theta = _hat_and_angle(w)
    a = _sinc(theta)[..., None, None]
    b = _one_minus_cos_over_square(theta)[..., None, None]
    return _EYE + a * skew + b * square


def log(g: np.ndarray) -> np.ndarray:
    """Rotation vector w with exp(w) = g and |w| <= pi (principal logarithm).

    The angle is ``atan2(|s|, (tr g - 1)/2)`` with s = vee(g), the axial vector of the skew part,
    which is accurate at every angle. The axis comes from s/|s| below
    :data:`LOG_SYMMETRIC_ABOVE` and otherwise from the largest column of the symmetric part
    (g + g^T)/2 - cos(theta) I = (1 - cos theta) n n^T, signed to agree with s. At exactly
    theta = pi either sign is a valid logarithm.
    """
    g = np.asarray(g, dtype=float)
    skew_axis = vee(g)
    sine = np.sqrt(np.einsum("...i,...i->...", skew_axis, skew_axis))
    cosine = 0.5 * (np.trace(g, axis1=-2, axis2=-1) - 1.0)
    theta = np.arctan2(sine, cosine)
    regular = skew_axis / _sinc(theta)[..., None]

    symmetric = 0.5 * (g + np.swapaxes(g, -1, -2)) - cosine[..., None, None] * _EYE
    symmetric = symmetric / np.maximum(1.0 - cosine, 1.0)[..., None, None]
    diagonal = np.diagonal(symmetric, axis1=-2, axis2=-1)
    column = np.argmax(diagonal, axis=-1)
    picked = np.take_along_axis(symmetric, column[..., None, None], axis=-1)[..., 0]
    pivot = np.sqrt(np.maximum(np.take_along_axis(diagonal, column[..., None], axis=-1), 1e-300))
    axis = picked / pivot
    sign = np.where(np.einsum("...i,...i->...", axis, skew_axis) < 0.0, -1.0, 1.0)
    near_pi = axis * (sign * theta)[..., None]
    return np.where((theta > LOG_SYMMETRIC_ABOVE)[..., None], near_pi, regular)


def dexp(w: np.ndarray, trivialization: Trivialization = "right") -> np.ndarray:
    """Trivialised tangent of exp: dexp_w = I + b W + c W^2 (module docstring), shape (..., 3, 3).

    ``"right"``: d/dt exp(w) = hat(dexp_w w') exp(w) (the paper's convention). ``"left"``:
    exp(w)^{-1} d/dt exp(w) = hat(dexp^L_w w') with dexp^L_w = dexp_{-w} = dexp_w^T.
    """
    skew, square, theta = _hat_and_angle(w)
    b = _one_minus_cos_over_square(theta)[..., None, None]
    c = _theta_minus_sin_over_cube(theta)[..., None, None]
    return _EYE + _side_sign(trivialization) * b * skew + c * square


def dexp_inv(w: np.ndarray, trivialization: Trivialization = "right") -> np.ndarray:
    """Inverse of :func:`dexp`: I - W/2 + d W^2 (right), I + W/2 + d W^2 (left); |w| < 2 pi."""
    skew, square, theta = _hat_and_angle(w)
    d = _dexp_inv_coefficient(theta)[..., None, None]
    return _EYE - _side_sign(trivialization) * 0.5 * skew + d * square


def _side_sign(trivialization: Trivialization) -> float:
    if trivialization == "right":
        return 1.0
    if trivialization == "left":
        return -1.0
    raise ValueError(f"trivialization must be 'right' or 'left', got {trivialization!r}")


def _check_truncation(r: int) -> int:
    if isinstance(r, bool) or not isinstance(r, int | np.integer) or r < 0:
        raise ValueError(f"truncation order r must be a non-negative integer, got {r!r}")
    return int(r)


@cache
def _square_coefficients(r: int, inverse: bool) -> tuple[np.ndarray, np.ndarray]:
    """Coefficients (in powers of theta^2) of p and p' with sum_{k=2}^{r} c_k W^k = p W^2 + ...

    Powers reduce by W^3 = -theta^2 W: W^(2m) = (-theta^2)^(m-1) W^2. For dexp^{-1}
    (c_k = B_k/k!) the odd terms beyond k = 1 vanish (B_3 = B_5 = ... = 0); for dexp
    (c_k = 1/(k+1)!) the odd terms are collected separately by the caller.
    """
    p = np.array([(float(_BERNOULLI[2 * m] / factorial(2 * m)) if inverse
                   else 1.0 / factorial(2 * m + 1)) * (-1.0) ** (m - 1)
                  for m in range(1, r // 2 + 1)] or [0.0])
    dp = p[1:] * np.arange(1, p.size) if p.size > 1 else np.array([0.0])
    return p, dp


def _matrix_coefficient(coefficients: np.ndarray, theta_squared: np.ndarray):
    """A polynomial in theta^2 shaped to scale stacked matrices (a scalar if constant)."""
    if len(coefficients) == 1:
        return float(coefficients[0])
    return _polynomial_in_square(coefficients, theta_squared)[..., None, None]


def dexp_inv_series(w: np.ndarray, r: int, trivialization: Trivialization = "right"
                    ) -> np.ndarray:
    """Truncated dexp^{-1}_{(r), w} = sum_{k=0}^{r} (B_k/k!) ad_w^k (paper, eq. (14)).

    r = 0 gives I, r = 1 gives I - W/2, r = 2 and r = 3 give I - W/2 + W^2/12 (B_3 = 0),
    r = 4 and 5 add -W^4/720. Shape (..., 3, 3).
    """
    r = _check_truncation(r)
    skew, square, theta = _hat_and_angle(w)
    p, _ = _square_coefficients(r, True)
    first = 0.0 if r == 0 else -0.5 * _side_sign(trivialization)
    return _EYE + first * skew + _matrix_coefficient(p, theta * theta) * square


def dexp_series(w: np.ndarray, r: int, trivialization: Trivialization = "right") -> np.ndarray:
    """Truncated dexp_{(r), w} = sum_{k=0}^{r} ad_w^k/(k+1)!; shape (..., 3, 3)."""
    r = _check_truncation(r)
    skew, square, theta = _hat_and_angle(w)
    theta_squared = theta * theta
    # W^(2m+1) = (-theta^2)^m W carries 1/(2m+2)!.
    odd = np.array([(-1.0) ** m / factorial(2 * m + 2) for m in range((r - 1) // 2 + 1)]
                   or [0.0])
    even, _ = _square_coefficients(r, False)
    return (_EYE + _side_sign(trivialization) * _matrix_coefficient(odd, theta_squared) * skew
            + _matrix_coefficient(even, theta_squared) * square)


def dexp_inv_series_derivative(x: np.ndarray, xi: np.ndarray, r: int) -> np.ndarray:
    """D_(r)(x, xi) = d/dx [dexp^{-1}_{(r), x} xi] (right-trivialised), shape (..., 3, 3).

    Its transpose is the paper's P*_(r)(x, xi) (section 4.1). With p(theta^2) the coefficient of
    W^2 (see :func:`dexp_inv_series`) and x x (x x xi) = x (x . xi) - theta^2 xi,

        D = hat(xi)/2 + p (x.xi I + x xi^T - 2 xi x^T) + 2 p'(theta^2) (x x (x x xi)) x^T

    for r >= 1, and D_(0) = 0. This equals the paper's
    1/2 ad_xi - sum_{k=2}^{r} (B_k/k!) sum_{i=0}^{k-1} ad_x^(k-1-i) ad_(ad_x^i xi), transposed.
    """
    r = _check_truncation(r)
    x = np.asarray(x, dtype=float)
    xi = np.asarray(xi, dtype=float)
    shape = np.broadcast_shapes(x.shape, xi.shape)
    if r == 0:
        return np.zeros(shape + (3,))
    x = np.broadcast_to(x, shape)
    xi = np.broadcast_to(xi, shape)
    result = 0.5 * hat(xi)
    if r == 1:
        return result
    theta_squared = np.einsum("...i,...i->...", x, x)
    p_coefficients, dp_coefficients = _square_coefficients(r, True)
    p = _matrix_coefficient(p_coefficients, theta_squared)
    x_dot_xi = np.einsum("...i,...i->...", x, xi)[..., None]
    outer_x_xi = x[..., :, None] * xi[..., None, :]
    result = result + p * (x_dot_xi[..., None] * _EYE + outer_x_xi
                           - 2.0 * np.swapaxes(outer_x_xi, -1, -2))
    if r >= 4:
        dp = _matrix_coefficient(dp_coefficients, theta_squared)
        double_cross = x * x_dot_xi - xi * theta_squared[..., None]
        result = result + 2.0 * dp * double_cross[..., :, None] * x[..., None, :]
    return result


def cay(w: np.ndarray) -> np.ndarray:
    """Cayley map (I - W/2)^{-1} (I + W/2) = I + (W + W^2/2)/(1 + theta^2/4); no small-angle
    branch is needed (rational in w)."""
    skew, square, theta = _hat_and_angle(w)
    scale = (1.0 / (1.0 + 0.25 * theta * theta))[..., None, None]
    return _EYE + scale * (skew + 0.5 * square)


def cay_inv(g: np.ndarray) -> np.ndarray:
    """Inverse Cayley map w = 4 vee(g)/(1 + tr g), vee(g) the axial vector of (g - g^T)/2.

    Undefined for half-turns (tr g = -1), where the Cayley map has no preimage.
    """
    g = np.asarray(g, dtype=float)
    return 4.0 * vee(g) / (1.0 + np.trace(g, axis1=-2, axis2=-1))[..., None]


def dcay(w: np.ndarray, trivialization: Trivialization = "right") -> np.ndarray:
    """Trivialised tangent of cay: (I + W/2)/(1 + theta^2/4) (right), (I - W/2)/(...) (left)."""
    skew, _, theta = _hat_and_angle(w)
    scale = (1.0 / (1.0 + 0.25 * theta * theta))[..., None, None]
    return scale * (_EYE + 0.5 * _side_sign(trivialization) * skew)


def dcay_inv(w: np.ndarray, trivialization: Trivialization = "right") -> np.ndarray:
    """Inverse of :func:`dcay`: I - W/2 + w w^T/4 (right), I + W/2 + w w^T/4 (left)."""
    w = np.asarray(w, dtype=float)
    skew = hat(w)
    return (_EYE - 0.5 * _side_sign(trivialization) * skew
            + 0.25 * w[..., :, None] * w[..., None, :])
