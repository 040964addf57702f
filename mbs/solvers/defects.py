"""The predictor's past errors and their extrapolation (``Solver.predictor_correction``).

A step's defect is the converged solution minus the predictor's guess. For a smooth motion the
defects vary smoothly from step to step, so the polynomial through the last few of them predicts
the next one, and adding it to the next guess removes the predictor's leading error terms.
:class:`DefectHistory` keeps them in a preallocated window and forms the extrapolation as one
product of a weight vector with it: the list-of-arrays form cost ~4.5 us per step on the heavy
top (mostly converting the list to an array), the window ~1.5 us with its shift.
"""

from __future__ import annotations

import math

import numpy as np

#: Highest degree of the defect extrapolation (``Solver.predictor_correction``).
MAX_CORRECTION_DEGREE = 6


def extrapolation_coefficients(points: int) -> tuple[float, ...]:
    """c_1 .. c_k of d^{k+1} ~ sum_j c_j d^{k+1-j}, the value at the next point of the
    polynomial of degree k - 1 through k equally spaced values: c_j = (-1)^(j+1) binom(k, j)
    (the k-th difference of the sequence vanishes). Integers, so exact in floating point."""
    return tuple(float((-1) ** j * math.comb(points, j + 1)) for j in range(points))


_COEFFICIENTS = {points: np.array(extrapolation_coefficients(points))
                 for points in range(1, MAX_CORRECTION_DEGREE + 2)}


def extrapolated_defect(defects: list, degree: int | None, lag: int = 1):
    """sum_j c_j d^{k+1-j L}: the polynomial extrapolation of the given ``degree`` (lowered
    while fewer defects are known) through every L-th entry of ``defects`` (newest last), for
    arrays (n_x,) or (members, n_x) (ensembles); None without usable defects. The reference
    form of :meth:`DefectHistory.extrapolate` (the compiled kernels form the same terms,
    summed term by term, so they differ from this by round-off)."""
    usable = 0 if degree is None else min(degree + 1, len(defects) // lag)
    if usable == 0:
        return None
    coefficients = _COEFFICIENTS[usable]
    newest_first = defects[-lag::-lag][:usable]
    if newest_first[0].ndim == 1:
        return coefficients.dot(newest_first)
    return np.tensordot(coefficients, newest_first, axes=1)


class DefectHistory:
    """The last (degree + 1) L defects of a run and their extrapolation.

    The defects sit in a preallocated (capacity, n_x) window, oldest first and newest in the
    last row; a new one shifts the window by a row (one memmove). The layout depends only on
    the defects themselves, so the extrapolation, one product of a fixed weight vector with
    the window, sums in the same order in a run and in its resumed continuation (bitwise
    resume), which a ring with a moving start would not.

    Parameters
    ----------
    degree : int or None
        Degree of the extrapolating polynomial (None: no history is kept).
    lag : int
        Every L-th defect is used (L = 2 for schemes whose multipliers alternate from step to
        step, see ``Solver._multiplier_lag``).
    """

    def __init__(self, degree: int | None, lag: int = 1):
        self.degree, self.lag = degree, lag
        self.capacity = 0 if degree is None else (degree + 1) * lag
        self.count = 0
        self._window: np.ndarray | None = None
        self._weights: dict[int, np.ndarray] = {}

    def __len__(self) -> int:
        return self.count

    def clear(self) -> None:
        """Forget all defects (a step from another guess, a new step size)."""
        self.count = 0
        if self._window is not None:
            self._window[...] = 0.0

    def append(self, solution: np.ndarray, guess: np.ndarray) -> None:
        """Keep solution - guess as the newest defect, dropping the oldest when full."""
        if not self.capacity:
            return
        window = self._window
        if window is None or window.shape[1] != solution.size:
            # zeros, not empty: rows not yet written get weight 0, and 0 * garbage may be NaN
            window = self._window = np.zeros((self.capacity, solution.size))
            self.count = 0
        window[:-1] = window[1:]
        np.subtract(solution, guess, out=window[-1])
        if self.count < self.capacity:
            self.count += 1

    def extrapolate(self) -> np.ndarray | None:
        """:func:`extrapolated_defect` of the kept defects (one product); None without
        usable defects."""
        usable = 0 if self.degree is None else min(self.degree + 1, self.count // self.lag)
        if not usable:
            return None
        weights = self._weights.get(usable)
        if weights is None:
            # term j uses the defect (lag - 1) + j lag rows older than the newest
            weights = self._weights[usable] = np.zeros(self.capacity)
            weights[self.capacity - self.lag::-self.lag][:usable] = _COEFFICIENTS[usable]
        return weights.dot(self._window)

    def rows(self) -> np.ndarray:
        """The kept defects, oldest first, as a (count, n_x) array (a copy)."""
        if not self.count:
            return np.zeros((0, 0 if self._window is None else self._window.shape[1]))
        return self._window[self.capacity - self.count:].copy()

    def load(self, rows) -> None:
        """Replace the history by ``rows`` (oldest first), e.g. from :meth:`rows`."""
        self.clear()
        for row in np.asarray(rows, dtype=float)[-self.capacity:] if self.capacity else ():
            self.append(row, np.zeros_like(row))
