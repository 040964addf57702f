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
theta^2/(2k+4)(2k+5); 26 terms for d, whose terms fall like (theta/2 pi)^2 = 0.23 at theta = 3).
The coefficients are then accurate to a few units of u over the whole range, so the maps are
machine-precise, which the variational integrators need for symplecticity (paper, section 4.1).
"""

from __future__ import annotations

from fractions import Fraction
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


_BERNOULLI = bernoulli_numbers(64)

# Maclaurin coefficients in powers of theta^2 (lowest first).
_SINC_SERIES = np.array([(-1) ** k / factorial(2 * k + 1) for k in range(4)])
_C_SERIES = np.array([(-1) ** k / factorial(2 * k + 3) for k in range(9)])
# 1 - x cot x = sum_{n>=1} |B_2n| (2x)^2n / (2n)!, hence d = sum_{n>=1} |B_2n|/(2n)! theta^(2n-2).
_D_SERIES = np.array([float(abs(_BERNOULLI[2 * n]) / factorial(2 * n)) for n in range(1, 27)])


def _polynomial_in_square(coefficients: np.ndarray, theta_squared: np.ndarray) -> np.ndarray:
    """Horner evaluation of sum_k coefficients[k] * theta_squared**k."""
    result = np.full_like(theta_squared, coefficients[-1])
    for coefficient in coefficients[-2::-1]:
        result = result * theta_squared + coefficient
    return result


def _sinc(theta: np.ndarray) -> np.ndarray:
    """sin(theta)/theta."""
    small = theta < SINC_TAYLOR_BELOW
    safe = np.where(small, 1.0, theta)
    return np.where(small, _polynomial_in_square(_SINC_SERIES, theta * theta), np.sin(safe) / safe)


def _one_minus_cos_over_square(theta: np.ndarray) -> np.ndarray:
    """(1 - cos theta)/theta^2, written as sinc(theta/2)^2 / 2 to avoid cancellation."""
    half = _sinc(0.5 * theta)
    return 0.5 * half * half


def _theta_minus_sin_over_cube(theta: np.ndarray) -> np.ndarray:
    """(theta - sin theta)/theta^3."""
    small = theta < C_TAYLOR_BELOW
    safe = np.where(small, 1.0, theta)
    direct = (safe - np.sin(safe)) / (safe * safe * safe)
    return np.where(small, _polynomial_in_square(_C_SERIES, theta * theta), direct)


def _dexp_inv_coefficient(theta: np.ndarray) -> np.ndarray:
    """(1 - (theta/2) cot(theta/2))/theta^2, finite for theta < 2 pi."""
    small = theta < D_TAYLOR_BELOW
    safe = np.where(small, 1.0, theta)
    half = 0.5 * safe
    direct = (1.0 - half * np.cos(half) / np.sin(half)) / (safe * safe)
    return np.where(small, _polynomial_in_square(_D_SERIES, theta * theta), direct)


def hat(w: np.ndarray) -> np.ndarray:
    """Skew matrix of ``w``: ``hat(w) @ v == np.cross(w, v)``; shape (..., 3) -> (..., 3, 3)."""
    w = np.asarray(w, dtype=float)
    matrix = np.zeros(w.shape + (3,))
    matrix[..., 0, 1] = -w[..., 2]
    matrix[..., 0, 2] = w[..., 1]
    matrix[..., 1, 0] = w[..., 2]
    matrix[..., 1, 2] = -w[..., 0]
    matrix[..., 2, 0] = -w[..., 1]
    matrix[..., 2, 1] = w[..., 0]
    return matrix


def vee(matrix: np.ndarray) -> np.ndarray:
    """Inverse of :func:`hat` on the skew part: vee(A) = axial vector of (A - A^T)/2."""
    matrix = np.asarray(matrix, dtype=float)
    return 0.5 * np.stack([matrix[..., 2, 1] - matrix[..., 1, 2],
                           matrix[..., 0, 2] - matrix[..., 2, 0],
                           matrix[..., 1, 0] - matrix[..., 0, 1]], axis=-1)


def _hat_and_angle(w: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    w = np.asarray(w, dtype=float)
    skew = hat(w)
    return skew, skew @ skew, np.sqrt(np.einsum("...i,...i->...", w, w))


def _identity_like(w: np.ndarray) -> np.ndarray:
    return np.broadcast_to(np.eye(3), np.shape(w)[:-1] + (3, 3))


def exp(w: np.ndarray) -> np.ndarray:
    """Rotation matrix exp(hat(w)) by Rodrigues' formula I + a W + b W^2 (module docstring)."""
    skew, square, theta = _hat_and_angle(w)
    a = _sinc(theta)[..., None, None]
    b = _one_minus_cos_over_square(theta)[..., None, None]
    return _identity_like(w) + a * skew + b * square


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

    symmetric = 0.5 * (g + np.swapaxes(g, -1, -2)) - cosine[..., None, None] * np.eye(3)
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
    sign = _side_sign(trivialization)
    return _identity_like(w) + sign * b * skew + c * square


def dexp_inv(w: np.ndarray, trivialization: Trivialization = "right") -> np.ndarray:
    """Inverse of :func:`dexp`: I - W/2 + d W^2 (right), I + W/2 + d W^2 (left); |w| < 2 pi."""
    skew, square, theta = _hat_and_angle(w)
    d = _dexp_inv_coefficient(theta)[..., None, None]
    sign = _side_sign(trivialization)
    return _identity_like(w) - sign * 0.5 * skew + d * square


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


def _even_series_coefficient(r: int, theta_squared: np.ndarray, inverse: bool
                             ) -> tuple[np.ndarray, np.ndarray]:
    """Coefficient p of W^2 (and its derivative in theta^2) in a series truncated at order r.

    Powers reduce by W^3 = -theta^2 W: W^(2m) = (-theta^2)^(m-1) W^2, W^(2m+1) =
    (-theta^2)^m W, so sum_{k=2}^{r} c_k W^k = p(theta^2) W^2 + q(theta^2) W. For dexp^{-1} the
    odd Bernoulli numbers beyond B_1 vanish and q = 0; for dexp they do not (handled by caller).
    """
    p = np.zeros_like(theta_squared)
    dp = np.zeros_like(theta_squared)
    for m in range(1, r // 2 + 1):
        coefficient = (float(_BERNOULLI[2 * m] / factorial(2 * m)) if inverse
                       else 1.0 / factorial(2 * m + 1))
        power = (-1.0) ** (m - 1)
        p = p + coefficient * power * theta_squared ** (m - 1)
        if m >= 2:
            dp = dp + coefficient * power * (m - 1) * theta_squared ** (m - 2)
    return p, dp


def dexp_inv_series(w: np.ndarray, r: int, trivialization: Trivialization = "right"
                    ) -> np.ndarray:
    """Truncated dexp^{-1}_{(r), w} = sum_{k=0}^{r} (B_k/k!) ad_w^k (paper, eq. (14)).

    r = 0 gives I, r = 1 gives I - W/2, r = 2 and r = 3 give I - W/2 + W^2/12 (B_3 = 0),
    r = 4 and 5 add -W^4/720. Shape (..., 3, 3).
    """
    r = _check_truncation(r)
    skew, square, theta = _hat_and_angle(w)
    p, _ = _even_series_coefficient(r, theta * theta, inverse=True)
    first = 0.0 if r == 0 else -0.5 * _side_sign(trivialization)
    return _identity_like(w) + first * skew + p[..., None, None] * square


def dexp_series(w: np.ndarray, r: int, trivialization: Trivialization = "right") -> np.ndarray:
    """Truncated dexp_{(r), w} = sum_{k=0}^{r} ad_w^k/(k+1)!; shape (..., 3, 3)."""
    r = _check_truncation(r)
    skew, square, theta = _hat_and_angle(w)
    theta_squared = theta * theta
    odd = np.zeros_like(theta_squared)
    for m in range(0, (r - 1) // 2 + 1):
        odd = odd + (-theta_squared) ** m / factorial(2 * m + 2)
    even, _ = _even_series_coefficient(r, theta_squared, inverse=False)
    sign = _side_sign(trivialization)
    return _identity_like(w) + sign * odd[..., None, None] * skew + even[..., None, None] * square


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
    theta_squared = np.einsum("...i,...i->...", x, x)
    p, dp = _even_series_coefficient(r, theta_squared, inverse=True)
    x_dot_xi = np.einsum("...i,...i->...", x, xi)
    double_cross = x * x_dot_xi[..., None] - xi * theta_squared[..., None]
    bracket = (x_dot_xi[..., None, None] * np.eye(3) + x[..., :, None] * xi[..., None, :]
               - 2.0 * xi[..., :, None] * x[..., None, :])
    return (0.5 * hat(xi) + p[..., None, None] * bracket
            + 2.0 * dp[..., None, None] * double_cross[..., :, None] * x[..., None, :])


def cay(w: np.ndarray) -> np.ndarray:
    """Cayley map (I - W/2)^{-1} (I + W/2) = I + (W + W^2/2)/(1 + theta^2/4); no small-angle
    branch is needed (rational in w)."""
    skew, square, theta = _hat_and_angle(w)
    scale = (1.0 / (1.0 + 0.25 * theta * theta))[..., None, None]
    return _identity_like(w) + scale * (skew + 0.5 * square)


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
    return scale * (_identity_like(w) + 0.5 * _side_sign(trivialization) * skew)


def dcay_inv(w: np.ndarray, trivialization: Trivialization = "right") -> np.ndarray:
    """Inverse of :func:`dcay`: I - W/2 + w w^T/4 (right), I + W/2 + w w^T/4 (left)."""
    w = np.asarray(w, dtype=float)
    skew = hat(w)
    return (_identity_like(w) - 0.5 * _side_sign(trivialization) * skew
            + 0.25 * w[..., :, None] * w[..., None, :])
