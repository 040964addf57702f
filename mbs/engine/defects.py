"""The predictor's past errors and their extrapolation (``Solver.predictor_correction``).

A step's defect is the converged solution minus the predictor's guess. For a smooth motion the
defects vary smoothly from step to step, so the polynomial through the last few of them predicts
the next one, and adding it to the next guess removes the predictor's leading error terms.
:class:`DefectHistory` keeps them in preallocated rings and forms the extrapolation as one
product of a weight vector with a ring.
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


#: COEFFICIENT_TABLE[k, j] = c_{j+1} of :func:`extrapolation_coefficients` (k), for the
#: compiled kernels (which take it as an argument); zeros beyond j = k - 1.
COEFFICIENT_TABLE = np.zeros((MAX_CORRECTION_DEGREE + 2, MAX_CORRECTION_DEGREE + 1))
for _points in range(1, MAX_CORRECTION_DEGREE + 2):
    COEFFICIENT_TABLE[_points, :_points] = extrapolation_coefficients(_points)
_COEFFICIENTS = {points: COEFFICIENT_TABLE[points, :points].copy()
                 for points in range(1, MAX_CORRECTION_DEGREE + 2)}


#: Ridge of the normal equations of :func:`fitted_prediction`, relative to their mean diagonal:
#: defects of a slow, smooth motion are nearly collinear (the polynomial case), and the ridge
#: keeps the coefficients bounded there at a negligible cost in accuracy.
FIT_RIDGE = 1e-12

#: Below this mean square the defects of a block are predicted as zero: the ridge would
#: underflow (defects of ~1e-150 occur at exact equilibria) and leave the fit singular.
SMALLEST_FITTED_SCALE = np.finfo(float).tiny / FIT_RIDGE


def fitted_prediction(history: np.ndarray, order: int, blocks: np.ndarray) -> np.ndarray:
    """The next defect by linear prediction with fitted coefficients: for each block
    ``blocks[b]:blocks[b + 1]`` of the defect vector, the coefficients c_1 .. c_r (r =
    ``order``) that predict each of the last r defects best from its r predecessors,

        min_c  sum_t |d_t - sum_j c_j d_{t-j}|^2 + FIT_RIDGE (trace / r) |c|^2,

    and the prediction sum_j c_j d_{k+1-j}. ``history`` holds the last 2 r defects, oldest
    first. Polynomial extrapolation is the special case of fixed (binomial) coefficients;
    fitted ones also follow motions made of a few frequencies (a spinning, precessing body),
    where a polynomial through defects one radian apart in phase predicts nothing. A block
    whose defects are all zero, or so small that their fit underflows, is predicted as zero."""
    r = order
    targets = history[r:2 * r]
    lagged = np.stack([history[r - j:2 * r - j] for j in range(1, r + 1)])  # d_{t-j}
    latest = history[2 * r - 1:r - 1:-1] if r > 0 else history[:0]  # d_k, d_{k-1}, ...
    prediction = np.zeros(history.shape[1])
    for low, high in zip(blocks[:-1], blocks[1:]):
        columns = lagged[:, :, low:high].reshape(r, -1)
        gram = columns @ columns.T
        scale = np.trace(gram) / r
        if not SMALLEST_FITTED_SCALE < scale < np.inf:
            continue
        gram[np.diag_indices(r)] += FIT_RIDGE * scale
        coefficients = np.linalg.solve(gram, columns @ targets[:, low:high].ravel())
        prediction[low:high] = coefficients @ latest[:, low:high]
    return prediction


class DefectHistory:
    """The last (degree + 1) L defects of a run and their extrapolation.

    Defect k goes to ring k mod L, each ring a preallocated (degree + 1, n_x) array whose
    newest row moves round; the next defect is predicted from its own ring alone (every L-th
    defect), by one product of a weight vector with that ring. Nothing is copied or shifted
    per step (a shifting window would copy the whole history at every step). The sums
    run in ring order, so :meth:`layout` is kept with the rows to resume a run
    bitwise.

    Parameters
    ----------
    degree : int or None
        Degree of the extrapolating polynomial (None: no history is kept).
    lag : int
        Every L-th defect is used (L = 2 for schemes whose multipliers alternate from step to
        step, see :class:`~mbs.engine.guess.WarmStart`).
    fit_order : int, optional
        Once 2 r defects are known (r = ``fit_order``, lag 1), predict by
        :func:`fitted_prediction` over the ``fit_blocks`` of the defect vector instead of
        the polynomial (which still serves the first steps).
    fit_blocks : array, optional
        Block boundaries of the fit (0, ..., n_x).
    """

    def __init__(self, degree: int | None, lag: int = 1, fit_order: int | None = None,
                 fit_blocks: np.ndarray | None = None):
        self.degree, self.lag = degree, lag
        self.fit_order = fit_order if degree is not None and lag == 1 else None
        self.fit_blocks = fit_blocks
        # defects per ring
        self.depth = (0 if degree is None else
                      max(degree + 1, 2 * self.fit_order) if self.fit_order else degree + 1)
        self.capacity = self.depth * lag
        self._rings: np.ndarray | None = None  # (lag, depth, n_x)
        self._weights: dict[tuple[int, int], np.ndarray] = {}
        self.clear()

    def __len__(self) -> int:
        return self.count

    def clear(self) -> None:
        """Forget all defects (a step from another guess, a new step size). Rows keep stale
        values, which enter the products with weight 0 only."""
        self.count = 0
        self._phase = 0  # ring of the next defect
        self._newest = [-1] * self.lag  # row of each ring's newest defect
        self._counts = [0] * self.lag

    def append(self, solution: np.ndarray, guess: np.ndarray) -> None:
        """Keep solution - guess as the newest defect, dropping the oldest when full."""
        if not self.depth:
            return
        if self._rings is None or self._rings.shape[2] != solution.size:
            # zeros, not empty: rows not yet written get weight 0, and 0 * garbage may be NaN
            self._rings = np.zeros((self.lag, self.depth, solution.size))
        ring = self._phase
        row = self._newest[ring] = (self._newest[ring] + 1) % self.depth
        np.subtract(solution, guess, out=self._rings[ring, row])
        if self._counts[ring] < self.depth:
            self._counts[ring] += 1
            self.count += 1
        self._phase = (ring + 1) % self.lag

    def extrapolate(self) -> np.ndarray | None:
        """sum_j c_j d^{k+1-j L}: the polynomial extrapolation of degree ``degree`` (lowered
        while fewer defects are known) through every L-th kept defect, or the fitted
        prediction (``fit_order``); None without usable defects."""
        if self.fit_order and self.count >= 2 * self.fit_order:
            return fitted_prediction(self.rows()[-2 * self.fit_order:], self.fit_order,
                                     self.fit_blocks)
        ring = self._phase
        usable = min(self._counts[ring], self.degree + 1) if self.depth else 0
        if not usable:
            return None
        newest = self._newest[ring]
        weights = self._weights.get((usable, newest))
        if weights is None:
            weights = self._weights[usable, newest] = np.zeros(self.depth)
            for term, coefficient in enumerate(_COEFFICIENTS[usable]):
                weights[(newest - term) % self.depth] = coefficient
        return weights.dot(self._rings[ring])

    def rows(self) -> np.ndarray:
        """The kept defects, oldest first, as a (count, n_x) array (a copy)."""
        if not self.count:
            return np.zeros((0, 0 if self._rings is None else self._rings.shape[2]))
        if self.lag == 1:  # one ring: its rows from the oldest on
            newest, count = self._newest[0], self.count
            return self._rings[0, (np.arange(newest - count + 1, newest + 1)) % self.depth]
        ring, rows, position = self._phase, [], list(self._newest)
        for _ in range(self.count):
            ring = (ring - 1) % self.lag
            rows.append(self._rings[ring, position[ring]])
            position[ring] = (position[ring] - 1) % self.depth
        return np.array(rows[::-1])

    def layout(self) -> list[int]:
        """Where the rings stand (next ring, each ring's newest row), for :meth:`load`."""
        return [self._phase, *self._newest]

    def load(self, rows, layout=None) -> None:
        """Replace the history by ``rows`` (oldest first, e.g. from :meth:`rows`); with the
        :meth:`layout` saved alongside, the rows land where they were, so that the
        extrapolation sums in the same order as before."""
        self.clear()
        rows = np.asarray(rows, dtype=float)[-self.capacity:] if self.capacity else ()
        if layout is None and len(rows):
            # each ring's rows in order from row 0 (what appending them one by one does, in
            # one assignment per ring: the compiled backend reloads its history every call)
            if self._rings is None or self._rings.shape[2] != rows.shape[1]:
                self._rings = np.zeros((self.lag, self.depth, rows.shape[1]))
            for ring in range(min(self.lag, len(rows))):
                taken = rows[ring::self.lag]
                self._rings[ring, :len(taken)] = taken
                self._newest[ring] = len(taken) - 1
                self._counts[ring] = len(taken)
            self.count = len(rows)
            self._phase = len(rows) % self.lag
            return
        if layout is not None and len(rows):
            phase, *newest = (int(value) for value in layout)
            self._phase = (phase - len(rows)) % self.lag
            for ring in range(self.lag):
                arriving = sum(1 for i in range(len(rows))
                               if (self._phase + i) % self.lag == ring)
                self._newest[ring] = (newest[ring] - arriving) % self.depth
        for row in rows:
            self.append(row, np.zeros_like(row))
