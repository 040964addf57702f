"""Newton's starting point for a step, shared by every implicit scheme.

Two parts, each owned by the solver run:

* :class:`WarmStart` -- what a step hands to the next: the multipliers of the last two steps
  (the warm start, taken ``lag`` steps back) and the predictor defects ``x - guess`` of past
  steps, whose extrapolation corrects the next guess (``Solver.predictor_correction``). It
  is the whole state a resumed run needs to repeat the uninterrupted one bitwise.
* :class:`ExplicitPredictor` -- the unknowns (q^{n+1}, p^{n+1}, lambda, gamma) predicted from
  the state: seed 003 section 6.3's "simple" (values at t^n) and "advanced" (q^n + h M^-1 p^n)
  guesses, and the "explicit" one, the momentum balance with the previous multipliers
  followed by the scheme's position update::

      p1 = p - h (grad V + G^T lambda + H(gamma) M^-1 p)
      q1 = q + h M^-1 ((1 - w) p + w p1 + G^T gamma)

  O(h^2) in p and O(h^3) in q instead of O(h) and O(h^2); w is the weight of p^{n+1} in the
  scheme's position update (1/2 for EM, 1 - theta for the GGL theta methods). For small
  models with a potential linear in q it is one quadratic map of (q, p, lambda, gamma)
  (:func:`~mbs.backends.polynomial.explicit_predictor_map`), built once per model, scheme
  and h.

A converged step is checked against its "explicit" guess (:func:`far_from_guess`): a solution
farther from the guess than the state moves in the step is taken as a possible far root and
the step is redone from the "advanced" guess (``Solver.step``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from mbs.engine.defects import DefectHistory
from mbs.model import Model

if TYPE_CHECKING:
    from mbs.backends.polynomial import QuadraticMap

#: max of an array without ndarray.max's Python-level wrapper (hot path of small models)
_max = np.maximum.reduce

#: Guess errors below this fraction of the model's length scale (about sqrt of round-off) are
#: never taken for a far root: Newton from so close a start converges to the nearest solution.
FAR_ROOT_FLOOR = 1.5e-8

#: Steps that Newton solves in at most this many iterations are not checked for a far root:
#: the second increment, about the square of the first (the guess's relative error), passed
#: the 1e-12 tolerance, so the guess was within about 1e-6 of the solution.
FAR_ROOT_ITERATIONS = 2


def far_from_guess(solution: np.ndarray, guess: np.ndarray, state: np.ndarray,
                   floor: float, multipliers: np.ndarray, iterations: int) -> bool:
    """Whether Newton, started from the "explicit" ``guess`` of q^{n+1} made with the
    ``multipliers`` lambda, converged in ``iterations`` to a ``solution`` farther from the
    guess than the step moves: farther than the state q^n (``state``) is from the solution or
    from the guess (max-norms), and farther than ``floor`` (see also
    :data:`FAR_ROOT_ITERATIONS`).

    The explicit prediction applies the previous step's constraint forces to every body. On a
    light body carrying the constraint forces of heavy ones (a 1 kg link holding a 1e6 kg
    one) their change over one step moves it by more than the step does, so Newton starts
    far away, wanders, and may settle on another root of the step equations: the far
    intersection of the constraint manifold with the step's direction, such as the light
    body turned half a revolution about its joint. The near root is the one Newton finds from
    the "advanced" guess q^n + h M^-1 p^n, whose error is O(h^2) of the body's own
    acceleration. The check needs a guess that applies constraint forces: the first step's,
    from zero multipliers, is off by the whole constraint acceleration, which is larger than
    the step's motion wherever the constraints hold the bodies nearly still (a pendulum
    released next to its lowest point).
    """
    if iterations <= FAR_ROOT_ITERATIONS:  # the common case
        return False
    error = _max(np.abs(solution - guess))
    if error <= floor:
        return False
    return bool(multipliers.any() and error > min(_max(np.abs(solution - state)),
                                                  _max(np.abs(guess - state))))


#: A step from a rotation to the mirror image of one moves some director component by at
#: least 2/3 (for a rotation R and a reflection S, |R - S|_F^2 = 6 - 2 tr(R^T S) >= 4):
#: steps that move every director component by less than this are not tested for one.
MIRROR_MOTION = 0.5


def mirrored_frames(model: Model, q0: np.ndarray, q1: np.ndarray, iterations: int
                    ) -> str | None:
    """Why a step from ``q0`` that Newton solved in ``iterations`` reached ``q1`` on
    another root of its equations: the frames of rigid bodies that it turned into their
    mirror images (:meth:`~mbs.model.Model.mirrored_bodies`), or None. A mirror image meets
    every orthonormality constraint, so energy, constraints and joint angles can look
    right. Only Newton iterations that travel far from the guess reach it, and only steps
    that move a director component by :data:`MIRROR_MOTION`: others are not checked (the
    common case costs one comparison)."""
    columns = model.director_columns
    if (iterations <= FAR_ROOT_ITERATIONS or not columns.size
            or not _max(np.abs(q1[columns] - q0[columns])) > MIRROR_MOTION):
        return None
    bodies = model.mirrored_bodies(q1)
    if not bodies:
        return None
    return (f"Newton converged on the mirror image (directors of determinant -1) of the "
            f"frame of {', '.join(repr(name) for name in bodies)}: another root of the step "
            f"equations")


class WarmStart:
    """Multipliers and predictor defects carried from step to step.

    Parameters
    ----------
    m : int
        Number of constraints.
    degree : int or None
        Degree of the defect extrapolation (None: no correction).
    lag : int
        Steps between the multipliers a new step resembles most: 1 when they vary smoothly
        (EM), 2 for the GGL theta methods, whose lambda^n, gamma^n alternate from step to step.
    fit_order, fit_blocks : optional
        Linear prediction of the defects with fitted coefficients (see
        :class:`~mbs.engine.defects.DefectHistory`).
    """

    def __init__(self, m: int, degree: int | None, lag: int, fit_order: int | None = None,
                 fit_blocks: np.ndarray | None = None):
        self.degree, self.lag = degree, lag
        self.fit = (fit_order, fit_blocks)
        self.lam, self.gam = np.zeros(m), np.zeros(m)
        self.lam_before = self.gam_before = None  # one step older (see ``lag``)
        self.defects = DefectHistory(degree, lag, *self.fit)
        # The first L steps start from multipliers that are not the lag-L warm start (zeros,
        # then for L = 2 the previous step's): their defects hold that jump, not the smooth
        # predictor error, and would spoil the extrapolation while in the history.
        self.startup_defects = lag

    def record(self, lam: np.ndarray, gam: np.ndarray, copy: bool = True) -> None:
        """Keep a step's multipliers (``copy=False`` for arrays nobody modifies afterwards,
        e.g. slices of a step's own solution vector)."""
        self.lam_before, self.gam_before = self.lam, self.gam
        self.lam, self.gam = (lam.copy(), gam.copy()) if copy else (lam, gam)

    def record_run(self, multipliers: np.ndarray, velocity_multipliers: np.ndarray) -> None:
        """Keep the multipliers of the last two rows of a block of steps (compiled kernel)."""
        if len(multipliers) >= 2:
            self.lam_before = multipliers[-2].copy()
            self.gam_before = velocity_multipliers[-2].copy()
            self.lam, self.gam = multipliers[-1].copy(), velocity_multipliers[-1].copy()
        elif len(multipliers) == 1:
            self.record(multipliers[0], velocity_multipliers[0])

    @property
    def started(self) -> bool:
        """Whether a step has been recorded (the warm start holds a step's multipliers)."""
        return self.lam_before is not None

    def seed(self, lam: np.ndarray) -> None:
        """Before the run's first step only: start lambda from ``lam``, the constraint
        forces of a neighbouring sub-step of a composition, instead of zero."""
        if not self.started:
            self.lam = lam.copy()

    def multipliers(self) -> tuple[np.ndarray, np.ndarray]:
        """The warm start of (lambda, gamma) for the next step."""
        if self.lag == 2 and self.lam_before is not None:
            return self.lam_before, self.gam_before
        return self.lam, self.gam

    def older(self) -> tuple[np.ndarray, np.ndarray]:
        """(lambda, gamma) one step older than the last (the last ones at the start)."""
        if self.lam_before is None:
            return self.lam, self.gam
        return self.lam_before, self.gam_before

    def corrected(self, guess: np.ndarray, data: np.ndarray, explicit: bool) -> np.ndarray:
        """The predictor's guess plus the extrapolated defect, as a new array (Newton
        overwrites its start). The correction is skipped while it is larger than the predicted
        change of (q, p): the predictor is then far from its asymptotic regime (very large
        steps) and the defects say nothing about the next."""
        correction = self.defects.extrapolate() if explicit else None
        if correction is None:
            return guess.copy()
        lead = data.size  # np.maximum.reduce: skips ndarray.max's Python-level wrapper
        if lead and _max(np.abs(correction[:lead])) > _max(np.abs(guess[:lead] - data)):
            return guess.copy()
        return guess + correction

    def remember(self, solution: np.ndarray, guess: np.ndarray, explicit: bool) -> None:
        """Keep solution - guess of an "explicit" step (the last (degree + 1) L); a step from
        another guess (the "advanced" retry of a failed step) starts the history afresh."""
        if not self.defects.capacity or not explicit:
            self.defects.clear()
            return
        if self.startup_defects:
            self.startup_defects -= 1
            return
        self.defects.append(solution, guess)

    def checkpoint(self) -> dict:
        """Everything the next step depends on, as plain arrays."""
        state = {"lam": self.lam.copy(), "gam": self.gam.copy()}
        if self.lam_before is not None:
            state.update(lam_before=self.lam_before.copy(), gam_before=self.gam_before.copy())
        if self.defects:
            state["defects"] = self.defects.rows()
            state["defect_layout"] = self.defects.layout()
        if self.startup_defects:
            state["startup_defects"] = self.startup_defects
        return state

    def restore(self, state: dict) -> None:
        """Inverse of :meth:`checkpoint`."""
        self.lam = np.asarray(state["lam"], dtype=float).copy()
        self.gam = np.asarray(state["gam"], dtype=float).copy()
        before = state.get("lam_before")
        self.lam_before = None if before is None else np.asarray(before, dtype=float).copy()
        self.gam_before = (None if before is None
                           else np.asarray(state["gam_before"], dtype=float).copy())
        self.defects = DefectHistory(self.degree, self.lag, *self.fit)
        self.defects.load(state.get("defects", ()), state.get("defect_layout"))
        self.startup_defects = int(state.get("startup_defects", 0))


class ExplicitPredictor:
    """Newton's starting unknowns (q^{n+1}, p^{n+1}, lambda, gamma) from the state (see the
    module doc).

    Parameters
    ----------
    model : Model
    h : float
    weight : float
        Weight w of p^{n+1} in the scheme's position update.
    warm_gamma : bool
        Whether gamma starts from the previous step's (else from zero).
    gamma_terms : bool
        Whether gamma is a velocity-level multiplier that the prediction applies (G(q)^T
        gamma in q^{n+1}, H(gamma) M^-1 p in the force), as in EM and the GGL schemes; False
        for a second constraint force (RATTLE's mu), which the prediction leaves out.
    constant_gradient : array or None
        grad V when the potential is linear in q.
    tensor_map : QuadraticMap or None
        The "explicit" prediction as one map of (q, p, lambda, gamma)
        (:func:`mbs.backends.polynomial.explicit_predictor_map`).
    """

    def __init__(self, model: Model, h: float, weight: float, warm_gamma: bool,
                 gamma_terms: bool, constant_gradient: np.ndarray | None,
                 tensor_map: QuadraticMap | None):
        self.model, self.h, self.weight, self.warm_gamma = model, h, weight, warm_gamma
        self.gamma_terms = gamma_terms
        self.constant_gradient, self.tensor_map = constant_gradient, tensor_map
        self.inverse_mass = model.inverse_mass_operator()
        self.time = 0.0  # the step's start time (constraint directions of drives)

    def state(self, q: np.ndarray, p: np.ndarray, lam: np.ndarray, gam: np.ndarray,
              mode: str) -> tuple[np.ndarray, np.ndarray]:
        """The predicted (q^{n+1}, p^{n+1}) for ``mode`` "simple", "advanced" or
        "explicit"."""
        if mode == "simple":
            return q.copy(), p.copy()
        if mode == "advanced":
            return q + self.h * (self.inverse_mass @ p), p.copy()
        model, h = self.model, self.h
        force = (self.constant_gradient if self.constant_gradient is not None
                 else model.potential_gradient(q))
        table = model.quadratic_constraint_table
        velocity = self.inverse_mass @ p
        if not self.gamma_terms:
            gam = np.zeros_like(gam)
        if table is not None:
            constraint_force = (table.jacobian_transpose_product(q, lam)
                                + table.hessian_vector_transpose_product(velocity, gam))
            correction = table.jacobian_transpose_product(q, gam)
        else:
            constraint_force = model.constraint_jacobian_transpose_product(q, lam, self.time)
            correction = model.constraint_jacobian_transpose_product(q, gam, self.time)
        p_new = p - h * (force + constraint_force)
        weight = self.weight
        return (q + h * (self.inverse_mass @ ((1.0 - weight) * p + weight * p_new + correction)),
                p_new)

    def unknowns(self, q: np.ndarray, p: np.ndarray, lam: np.ndarray, gam: np.ndarray,
                 mode: str) -> np.ndarray:
        """x0 = (q^{n+1}, p^{n+1}, lambda, gamma): the tensor map where it applies, else
        :meth:`state` with the multipliers (gamma only when ``warm_gamma``)."""
        if self.tensor_map is not None and mode == "explicit":
            return self.tensor_map(np.concatenate((q, p, lam, gam)))
        return np.concatenate([*self.state(q, p, lam, gam, mode), lam,
                               gam if self.warm_gamma else np.zeros_like(gam)])

