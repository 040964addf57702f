"""Solver base class, step results and the property record every scheme registers."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

from mbs.model import Model
from mbs.solvers.newton import NewtonOptions, NewtonState, newton

#: Models with more coordinates use simplified Newton by default (measured: equal cost at
#: n = 36, 1.7x faster at n = 60, 5x at n = 120 and 4x at n = 12000 for EM on chains).
SIMPLIFIED_NEWTON_ABOVE = 48


@dataclass(frozen=True)
class SchemeProperties:
    """What a scheme promises (the README solver table is generated from these)."""

    name: str
    order_q: str
    order_p: str
    symplectic: bool
    energy: str
    momentum: str
    constraints_at_step_end: str
    multiplier_times: str
    reference: str


@dataclass
class StepResult:
    """One accepted step n -> n+1.

    ``velocity`` is the scheme's velocity unknown (v^n for VI-S, v^{n+1} for VI-A/B,
    v^{n+1/2} for EM, M^-1 p^{n+1/2} for RATTLE); ``multiplier`` and
    ``velocity_multiplier`` are the scheme's lambda and gamma (see ``multiplier_times``).
    ``enforced`` holds max-norms of the position- and velocity-level residuals the scheme
    itself enforces (which may be at an intermediate configuration).
    """

    q: np.ndarray
    p: np.ndarray
    velocity: np.ndarray
    multiplier: np.ndarray
    velocity_multiplier: np.ndarray
    iterations: int
    enforced: tuple[float, float]


@dataclass
class Solver:
    """Base class of the time integrators; subclasses implement :meth:`step`.

    Attributes
    ----------
    newton : NewtonOptions
        Tolerance (default 1e-12 relative increment) and iteration limit.
    initial_guess : {"advanced", "simple"}
        Newton predictor, seed 003 section 6.3: "simple" takes the values at t^n,
        "advanced" q^n + h M^-1 p^n (fewer iterations).
    """

    newton: NewtonOptions = field(default_factory=NewtonOptions)
    initial_guess: str = "advanced"

    properties = SchemeProperties("base", "-", "-", False, "-", "-", "-", "-", "-")

    def __post_init__(self):
        from mbs.errors import ModelError

        if self.initial_guess not in ("advanced", "simple"):
            raise ModelError(f"{type(self).__name__}: initial_guess must be 'advanced' or "
                             f"'simple', got {self.initial_guess!r}")
        if not (0.0 < self.newton.tolerance < 1.0) or self.newton.max_iterations < 1:
            raise ModelError(f"{type(self).__name__}: Newton tolerance must be in (0, 1) and "
                             f"max_iterations >= 1")

    @property
    def name(self) -> str:
        return self.properties.name

    def start(self, model: Model, q0: np.ndarray, p0: np.ndarray, h: float) -> None:
        """Prepare for a run (constant matrices, previous multipliers)."""
        self.model = model
        self.h = h
        self._mass = model.mass_operator()
        self._minv = model.inverse_mass_operator()
        self._identity = model.identity_operator()
        self._lam = np.zeros(model.m)
        self._gam = np.zeros(model.m)
        self._newton_state = NewtonState()
        self._simplified = (self.newton.simplified if self.newton.simplified is not None
                            else model.n > SIMPLIFIED_NEWTON_ABOVE)

    def step(self, q: np.ndarray, p: np.ndarray) -> StepResult:
        raise NotImplementedError

    def set_step_size(self, h: float) -> None:
        """Change h between steps (used to refine a failed step); subclasses that cache
        h-dependent data override this."""
        self.h = h

    def checkpoint(self) -> dict:
        """Warm-start state carried between steps (restored by :meth:`restore` on resume,
        so that a resumed run repeats the uninterrupted one bitwise). A Jacobian kept by
        simplified Newton is dropped here, so a resumed run refactors at the same step."""
        if hasattr(self, "_newton_state"):
            self._newton_state.factorization = None
        return {"lam": self._lam.copy(), "gam": self._gam.copy()}

    def restore(self, state: dict) -> None:
        """Inverse of :meth:`checkpoint`."""
        self._lam = np.asarray(state["lam"], dtype=float).copy()
        self._gam = np.asarray(state["gam"], dtype=float).copy()

    # helpers ------------------------------------------------------------------------------
    def _solve(self, system, x0: np.ndarray, q0: np.ndarray, p0: np.ndarray):
        """Newton on ``system`` with convergence judged on the q and p blocks."""
        n = self.model.n
        return newton(system, x0, [slice(0, n), slice(n, 2 * n)], list(self._scales(q0, p0)),
                      self.newton, self._newton_state, self._simplified)

    @property
    def newton_factorizations(self) -> int:
        """Newton-matrix factorisations so far (simplified Newton reuses them)."""
        return self._newton_state.factorizations

    def _predict(self, q: np.ndarray, p: np.ndarray) -> np.ndarray:
        if self.initial_guess == "advanced":
            return q + self.h * (self._minv @ p)
        return q.copy()

    def _scales(self, q: np.ndarray, p: np.ndarray) -> tuple[float, float]:
        force = float(np.max(np.abs(self.model.potential_gradient(q)))) if q.size else 0.0
        return (max(float(np.max(np.abs(q))), 1e-300),
                max(float(np.max(np.abs(p))), self.h * force, 1e-300))

    def _max(self, values: np.ndarray) -> float:
        return float(np.max(np.abs(values))) if values.size else 0.0


_LAYOUTS: dict[tuple, tuple[np.ndarray, np.ndarray, list]] = {}


def assemble(blocks: list[list], dense: bool):
    """Block matrix from a grid of blocks (None = zero): dense ndarray or sparse CSC.

    The dense layout (block offsets and the list of filled slots) is computed once per grid
    shape and cached, since the hot path assembles the same grid at every Newton iteration.
    """
    if not dense:
        return sp.bmat(blocks, format="csc")
    key = tuple(tuple(None if b is None else b.shape for b in row) for row in blocks)
    layout = _LAYOUTS.get(key)
    if layout is None:
        rows = [next(b.shape[0] for b in row if b is not None) for row in blocks]
        cols = [next(blocks[i][j].shape[1] for i in range(len(blocks))
                     if blocks[i][j] is not None) for j in range(len(blocks[0]))]
        row_start = np.concatenate([[0], np.cumsum(rows)])
        col_start = np.concatenate([[0], np.cumsum(cols)])
        slots = [(i, j, slice(row_start[i], row_start[i + 1]),
                  slice(col_start[j], col_start[j + 1]))
                 for i, row in enumerate(blocks) for j, b in enumerate(row) if b is not None]
        layout = _LAYOUTS[key] = (int(row_start[-1]), int(col_start[-1]), slots)
    n_rows, n_cols, slots = layout
    out = np.zeros((n_rows, n_cols))
    for i, j, rows_slice, cols_slice in slots:
        block = blocks[i][j]
        out[rows_slice, cols_slice] = block if isinstance(block, np.ndarray) else block.toarray()
    return out
