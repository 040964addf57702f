"""Variational conversion of an explicit Runge-Kutta method (G. W. Patrick, C. Cuell,
R. J. Spiteri, W. Zhang, "On converting any one-step method to a variational integrator of the
same order").

The one-step method (the *standard layer*) integrates the index-1 equations of motion augmented
with the action, (q, v, S)' = (v, A(q, v), L(q, v)). Its end points over the times h alpha^-
and h alpha^+ and the action between them form a discrete Lagrangian on the states w = (q, v)
on TQ; the discrete Euler-Lagrange equations of that Lagrangian (the *symplectic layer*, Stage 4
of the paper, (S4.1)-(S4.8)) define a symplectic integrator of the same order whose states lie
exactly on TQ and which conserves a discrete Noether momentum.

Notation (row multipliers are stored as vectors of R^n): the node between the states w^n and
w^{n+1} is q_bar = d^+(w^n) = d^-(w^{n+1}), where d^+-(w) = P(R^q(w, h alpha^+-)) are the
boundary maps with the projection P of (3.2); mu is the discrete momentum at that node. A step
solves the w^{n+1} side of (S1.2) for w^{n+1}, lambda^+, nu^+ and theta^+ given (q_bar, mu);
the w^n side, (S1.1) with (S2.4), is linear in (lambda^-, mu, nu^-) and is only solved at the
first step, because the next step's multipliers are mu' = lambda^+ and lambda^-' = -mu.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp
from scipy.linalg import lapack

from mbs.engine.defects import extrapolation_coefficients
from mbs.engine.newton import NewtonConvergenceError, NewtonState
from mbs.errors import ModelError, warn_user
from mbs.model import Model
from mbs.solvers.base import SchemeProperties, Solver, StepResult

_getrf = lapack.dgetrf
_getrs = lapack.dgetrs

#: Classical fourth-order Runge-Kutta tableau (A, b, c).
RK4 = (np.array([[0.0, 0.0, 0.0, 0.0],
                 [0.5, 0.0, 0.0, 0.0],
                 [0.0, 0.5, 0.0, 0.0],
                 [0.0, 0.0, 1.0, 0.0]]),
       np.array([1.0, 2.0, 2.0, 1.0]) / 6.0,
       np.array([0.0, 0.5, 0.5, 1.0]))

#: Named biases (alpha^-, alpha^+).
BIASES = {"left": (0.0, 1.0), "centered": (-0.5, 0.5)}

#: Values of the ``jacobian`` option (how the w^{n+1} equations are iterated).
JACOBIANS = ("auto", "approximate", "finite-difference")

#: Minimum iteration cap of the chord iteration with the approximate Jacobian J0 (at large
#: steps it may need a few dozen iterations).
APPROXIMATE_ITERATIONS = 50
#: Iterations over which the contraction rate of J0's chord iteration is judged ("auto").
RATE_WINDOW = 4
#: ... and not before this iteration: its first iterations often stall on steps that J0
#: still solves.
EARLY_EXIT_AFTER = 10
#: Minimum iteration cap of the chord iteration with the finite-difference Jacobian.
FINITE_DIFFERENCE_ITERATIONS = 30
#: Relative step of the forward differences of the finite-difference Jacobian (~sqrt(eps)).
FINITE_DIFFERENCE_STEP = 1e-7
#: An increment below this relative size that no longer halves is round-off: accepted even
#: when the requested tolerance is tighter.
ROUNDOFF_INCREMENT = 1e-14
#: Previous steps whose guess defects (converged unknowns minus the simple guess of section 6)
#: are extrapolated (degree up to 3) to start the next step, which saves chord iterations.
EXTRAPOLATION_POINTS = 4
#: The projection's Newton iteration stops after an increment below this relative size: its
#: error is then about the square of it, below round-off.
PROJECTION_INCREMENT = 1e-9


@dataclass
class NodeStep:
    """The solution of the w^{n+1} equations for a node (q_bar, mu) (see
    :meth:`VariationalConversion.node_map`).

    Attributes
    ----------
    q, v : ndarray (n,)
        The new state w^{n+1} = (q^{n+1}, v^{n+1}) on TQ.
    node, momentum : ndarray (n,)
        The next node q_bar' = d^+(w^{n+1}) and its discrete momentum mu' = lambda^+.
    nu : ndarray (2m,)
        The multipliers (nu_1^+, nu_2^+) of TTQ in (S1.2).
    theta : ndarray (m,)
        theta^+ of (S4.7a): R^q(w^{n+1}, h alpha^-) = q_bar + G(q_bar)^T theta^+.
    unknowns : ndarray (3n + 3m,)
        (q, v, lambda^+, nu, theta), the unknowns of :meth:`VariationalConversion.node_equations`.
    iterations : int
        Chord iterations (with the approximate and, after a fallback, the finite-difference
        Jacobian).
    fallback : bool
        Whether the finite-difference Jacobian was used.
    residual : ndarray (3n + 3m,)
        The equations at ``unknowns``.
    """

    q: np.ndarray
    v: np.ndarray
    node: np.ndarray
    momentum: np.ndarray
    nu: np.ndarray
    theta: np.ndarray
    unknowns: np.ndarray
    iterations: int
    fallback: bool
    residual: np.ndarray


@dataclass
class VariationalConversion(Solver):
    """The variational conversion of an explicit Runge-Kutta method (Patrick, Cuell, Spiteri,
    Zhang).

    Parameters
    ----------
    tableau : "rk4" or (A, b, c)
        The standard layer: classical RK4, or any explicit Runge-Kutta tableau (A strictly
        lower triangular (s, s), b and c of length s, sum(b) = 1). c is checked but not used
        (the equations of motion are autonomous).
    bias : (alpha_minus, alpha_plus), "left" or "centered"
        -1 <= alpha^- <= 0 <= alpha^+ <= 1 with alpha^+ - alpha^- = 1. The curve segment of a
        state w runs from h alpha^- to h alpha^+ (section 2). "left" = (0, 1) (default): the
        node is the state's position, q^{n+1} = q_bar. "centered" = (-1/2, 1/2): the states
        sit at the segment centres and the standard layer also runs backwards (RK4 with step
        -h/2); its error is then much smaller at a modest extra cost per step.
    jacobian : {"auto", "approximate", "finite-difference"}
        Matrix of the chord iteration on the w^{n+1} equations. "approximate": J0 built from
        the paper's approximates (4.9) and (S4.3'-S4.7') (section 4.3), once per step.
        "finite-difference": forward differences of the equations (3n + 3m extra
        evaluations), once per step; converges in fewer iterations at large h.
        "auto" (default): J0, and the finite-difference matrix when J0 does not converge fast
        enough (increments that grow, or a contraction too slow to reach the tolerance within
        the cap); :attr:`fallbacks` counts those steps.
    reuse_multipliers : bool
        Take the next step's (q_bar, mu) from this step's w^{n+1} side (mu' = lambda^+, exact
        by the direct splitting of TTQ, section 2) instead of solving the w^n side (S1.1),
        (S2.4) again (default True). False solves it at every step (used to check the
        identity).
    newton : NewtonOptions
        ``tolerance`` (relative, default 1e-12): the chord iteration stops when the increment
        of (q^{n+1}, v^{n+1}) and the error it implies, increment theta / (1 - theta) with
        the observed contraction theta, are below it (relative to the sizes of q and v); the
        iteration caps are max(50, ``max_iterations``) with J0 and max(30,
        ``max_iterations``) with finite differences.
        A step that does not converge raises
        :class:`~mbs.engine.newton.NewtonConvergenceError`, so that :func:`mbs.simulate`
        refines it.

    Attributes
    ----------
    alpha_minus, alpha_plus : float
        The bias.
    nodes, node_momenta : list of ndarray (n,)
        Filled during a run, one entry per step (sub-steps of a refined step included): the
        node q_bar_k = d^+(w^k) = d^-(w^{k+1}) between the step's states and its discrete
        momentum mu_k. The discrete Noether momentum of a symmetry generator xi of the model
        (e.g. xi q = e3 x q for rotations about e3) is mu_k . (xi q_bar_k), conserved to
        round-off (section 2, "discrete Noether").
    exit_nodes, exit_momenta : list of ndarray (n,)
        Per step: d^+(w^{k+1}) and lambda^+_k, the next step's node and momentum (equal to the
        next entries of ``nodes`` and ``node_momenta``, bitwise with ``reuse_multipliers``).
    backward_multipliers : list of ndarray (n,)
        Per step: lambda^-_k of the w^k side (-mu_{k-1} when reused).
    fallbacks : int
        Steps at which "auto" fell back to the finite-difference Jacobian (this run).

    Notes
    -----
    The state (q, p) of mbs has p = M v; the scheme's own state is w = (q, v) on TQ. Cost:
    every chord iteration runs the standard layer with its 2n-column sensitivity (the RK
    stages on the first-variation equations) at h alpha^+ (and at h alpha^- when alpha^- <
    0), i.e. s KKT solves with 2n + 1 right-hand sides per run, and a step takes ten or more
    iterations. It is a reference scheme (make an RK method variational), not a fast one.

    Only models whose constraints are all quadratic and time-independent (no Drive, no
    UserConstraint): the sensitivity of A(q, v) uses D^3 g = 0. The inherited options
    ``initial_guess``, ``backend`` and ``predictor_correction`` have no effect (the step is
    not a Newton solve of mbs's (q1, p1, lambda, gamma) system); the equations of motion are
    autonomous, so ``t`` is not used.
    """

    tableau: str | tuple = "rk4"
    bias: str | tuple[float, float] = (0.0, 1.0)
    jacobian: str = "auto"
    reuse_multipliers: bool = True
    nodes: list = field(default_factory=list, init=False, repr=False)
    node_momenta: list = field(default_factory=list, init=False, repr=False)
    exit_nodes: list = field(default_factory=list, init=False, repr=False)
    exit_momenta: list = field(default_factory=list, init=False, repr=False)
    backward_multipliers: list = field(default_factory=list, init=False, repr=False)
    fallbacks: int = field(default=0, init=False)

    properties = SchemeProperties(
        name="vi-conversion", order_q="order of the RK layer (4 for rk4)",
        order_p="order of the RK layer (4 for rk4)", symplectic=True,
        symplectic_in="the node variables (q_bar, mu), not (q, p)",
        energy="bounded oscillation",
        momentum="discrete Noether momentum mu . (xi q_bar) exact; the continuous one to "
                 "O(h^r)",
        multiplier_times="nu_1^+ / h (~ lambda of the step), nu_2^+ / h (O(h)): the TTQ "
                         "multipliers of the w^{n+1} side (S1.2)",
        reference="Patrick, Cuell, Spiteri, Zhang, On converting any one-step method to a "
                  "variational integrator of the same order")
    composable = False
    #: the TTQ multipliers act at the shifted points of the standard layer, not as the
    #: step's constraint force: Solution.reaction refuses them
    drive_effort = "none"

    def __post_init__(self):
        super().__post_init__()
        self._a, self._b = _parse_tableau(self.tableau)
        self.alpha_minus, self.alpha_plus = _parse_bias(self.bias)
        if self.jacobian not in JACOBIANS:
            raise ModelError(f"VariationalConversion: jacobian must be one of {JACOBIANS}, "
                             f"got {self.jacobian!r}")
        # stage slopes A_k that a later stage uses; the others are never needed because the
        # velocity end point R^v is not used by the conversion (section 2)
        self._needs_acceleration = [bool(np.any(self._a[k + 1:, k] != 0.0))
                                    for k in range(self._b.size)]
        self._pending = None

    # -- run interface ------------------------------------------------------------------------
    def start(self, model: Model, q0: np.ndarray, p0: np.ndarray, h: float) -> None:
        """Prepare a run (constant matrices); the w^0 side is solved by the first step."""
        table = model.quadratic_constraint_table
        if table is None:
            raise ModelError(
                "VariationalConversion: every constraint must be quadratic and "
                "time-independent (no Drive, no UserConstraint): the sensitivity of the "
                "standard layer uses D^3 g = 0 and the constant constraint Hessians; use "
                "'lobatto' or 'em' for this model")
        if model.has_applied_forces:
            raise ModelError(
                "VariationalConversion: the model has loads, dampers or actuators, and the "
                "converted method has no forcing terms; use 'lobatto' (any order) or 'em'")
        if self.backend == "compiled":
            warn_user("VariationalConversion: backend='compiled' has no effect: its chord "
                      "iteration on the standard layer runs in numpy")
        if model.is_large:
            size = 3 * model.n + 3 * model.m
            warn_user(
                f"VariationalConversion: the model has n = {model.n} coordinates; every chord "
                f"iteration factorises a dense matrix of size 3n + 3m = {size} and propagates "
                f"a sensitivity of 2n = {2 * model.n} columns through the RK stages, so a "
                f"step costs O(n^3); for high order on large models use 'lobatto' (sparse)",
                RuntimeWarning)
        self.model, self.h = model, h
        self._table = table
        n = model.n
        self._mass = _dense(model.mass_matrix)
        self._minv = _dense(model.inverse_mass_matrix)
        self._eye = np.eye(n)
        # d(q, v)/d(q0, v0) at the start of the standard layer
        self._position_seed = np.hstack((self._eye, np.zeros((n, n))))
        self._velocity_seed = np.hstack((np.zeros((n, n)), self._eye))
        self._constant_gradient = model.constant_potential_gradient()
        # V(q) = V(0) + grad V . q when V is linear (uniform gravity): saves the element loop
        self._potential_at_zero = (None if self._constant_gradient is None
                                   else model.potential(np.zeros(n)))
        self._newton_state = NewtonState()
        self._polynomial = self._compiled = None
        self._simplified = False
        self.guess_retries = 0
        self.fallbacks = 0
        self._pending = None
        for record in self._records():
            record.clear()

    @property
    def batch_capable(self) -> bool:
        return False

    def set_step_size(self, h: float) -> None:
        """Change h between steps; the reused multipliers belong to the previous h, so the
        next step solves its w^n side again."""
        if h != self.h:
            self.h = h
            self._pending = None

    def checkpoint(self) -> dict:
        """The node and momentum the next step reuses with the state they belong to, and the
        number of recorded nodes (a failed refinement attempt is forgotten by
        :meth:`restore`); plain arrays, stored as JSON lists by :mod:`mbs.streaming`."""
        state = {"recorded": len(self.nodes)}
        if self._pending is not None:
            state.update({key: value.copy() for key, value in self._pending.items()})
        return state

    def restore(self, state: dict) -> None:
        """Inverse of :meth:`checkpoint`."""
        keys = ("q", "p", "node", "momentum", "backward", "defects")
        self._pending = ({key: np.asarray(state[key], dtype=float).copy() for key in keys}
                         if "node" in state else None)
        if self._pending is not None:
            self._pending["defects"] = self._pending["defects"].reshape(
                -1, 3 * self.model.n + 3 * self.model.m)
        count = int(state.get("recorded", 0))
        for record in self._records():
            del record[count:]

    def _records(self) -> tuple[list, ...]:
        return (self.nodes, self.node_momenta, self.exit_nodes, self.exit_momenta,
                self.backward_multipliers)

    def step(self, t: float, q: np.ndarray, p: np.ndarray) -> StepResult:
        """Advance w^n = (q, M^-1 p) to w^{n+1}: the node (q_bar, mu) from the w^n side (or
        reused from the previous step), then the w^{n+1} equations (:meth:`node_map`)."""
        h, n, m = self.h, self.model.n, self.model.m
        v = self._minv @ p
        pending = self._pending
        if (pending is not None and np.array_equal(pending["q"], q)
                and np.array_equal(pending["p"], p)):
            node, momentum = pending["node"], pending["momentum"]
            backward, defects = pending["backward"], pending["defects"]
        else:
            node, momentum, backward, _ = self.node_from_state(q, v)
            defects = np.zeros((0, 3 * n + 3 * m))
        simple = self._simple_guess(node, momentum, v)
        solved = self._solve_node(node, momentum, q, v, simple + _extrapolate(defects))
        p2 = self._mass @ solved.v
        for record, value in zip(self._records(), (node, momentum, solved.node,
                                                   solved.momentum, backward)):
            record.append(value)
        self._pending = None
        if self.reuse_multipliers:
            defects = np.vstack((defects[1 - EXTRAPOLATION_POINTS:],
                                 solved.unknowns - simple))
            self._pending = {"q": solved.q, "p": p2, "node": solved.node,
                             "momentum": solved.momentum, "backward": -momentum,
                             "defects": defects}
        residual = solved.residual
        enforced = (self._max(residual[3 * n + m:3 * n + 2 * m]),
                    self._max(residual[3 * n + 2 * m:]))
        return StepResult(solved.q, p2, solved.v, solved.nu[:m] / h, solved.nu[m:] / h,
                          solved.iterations, enforced)

    # -- public pieces of the step -----------------------------------------------------------
    def node_from_state(self, q: np.ndarray, v: np.ndarray
                        ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The w^n side of a step: (q_bar, mu, lambda^-, nu^-) for a state w = (q, v) on TQ.

        q_bar = P R^q(w, h alpha^+) ((S4.2), projection (3.2)); the multipliers solve the
        linear system (S1.1) with the normalisations (S2.4)::

            D d^-(w)^T lambda^- + D d^+(w)^T mu + C(w)^T nu^- = D L_h(w),
            G(d^-(w)) lambda^- = 0,   G(q_bar) mu = 0,

        with D d^+- = DP R^q_w ((4.7)) and C(w) = [[G, 0], [v^T D^2 g, G]].
        """
        h, n, m = self.h, self.model.n, self.model.m
        q, v = np.asarray(q, dtype=float), np.asarray(v, dtype=float)
        plus_hat, jac_plus, _, ds_plus = self._flow(q, v, h * self.alpha_plus)
        minus_hat, jac_minus, _, ds_minus = self._flow(q, v, h * self.alpha_minus)
        node, _, factor_plus = self._project(plus_hat)
        minus, _, factor_minus = self._project(minus_hat)
        d_plus = self._dp_matrix(factor_plus) @ jac_plus
        d_minus = self._dp_matrix(factor_minus) @ jac_minus
        gq = self._jac(q)
        c = self._c_matrix(gq, self._hv(v))
        size = 2 * n + 2 * m
        system = np.zeros((size, size))
        system[:2 * n, :n] = d_minus.T
        system[:2 * n, n:2 * n] = d_plus.T
        system[:2 * n, 2 * n:] = c.T
        system[2 * n:2 * n + m, :n] = self._jac(minus)
        system[2 * n + m:, n:2 * n] = self._jac(node)
        rhs = np.zeros(size)
        rhs[:2 * n] = ds_plus - ds_minus
        solution = _solve(system, rhs, "the w^n multiplier system (S1.1), (S2.4) is singular")
        return node, solution[n:2 * n], solution[:n], solution[2 * n:]

    def node_map(self, node: np.ndarray, momentum: np.ndarray) -> NodeStep:
        """Solve the w^{n+1} equations for the node (q_bar, mu): the map (q_bar, mu) ->
        (q_bar', mu') = (:attr:`NodeStep.node`, :attr:`NodeStep.momentum`) is symplectic
        (section 2: the layer is symplectic for -d theta^-_{L_h}, which is d q_bar ^ d mu on
        the nodes). Needs :meth:`start` (model and h); the guess is the velocity of mu on
        T_{q_bar}Q."""
        node = np.asarray(node, dtype=float)
        momentum = np.asarray(momentum, dtype=float)
        velocity = self._node_velocity(node, momentum)
        return self._solve_node(node, momentum, node, velocity,
                                self._simple_guess(node, momentum, velocity))

    def node_equations(self, node: np.ndarray, momentum: np.ndarray,
                       unknowns: np.ndarray) -> np.ndarray:
        """The equations of the w^{n+1} side for the node (q_bar, mu), residual (3n + 3m,).

        ``unknowns`` = (q2 (n), v2 (n), lambda^+ (n), nu_1^+ (m), nu_2^+ (m), theta^+ (m));
        rows::

            D L_h(w2) - D d^+(w2)^T lambda^+ + D d^-(w2)^T mu - C(w2)^T nu^+   (2n, (S1.2))
            G(d^+(w2)) lambda^+                                               (m, (S4.5b))
            R^q(w2, h alpha^-) - q_bar - G(q_bar)^T theta^+                   (n, (S4.7a))
            g(q2),  G(q2) v2                                       (m, m, (S4.7b), (S4.6b))

        D d^-(w2) uses DP at (q_bar, theta^+), which is P's derivative at R^q(w2, h alpha^-)
        where (S4.7a) holds.
        """
        return self._equations(np.asarray(node, dtype=float),
                               np.asarray(momentum, dtype=float),
                               np.asarray(unknowns, dtype=float))[0]

    # -- the w^{n+1} side --------------------------------------------------------------------
    def _equations(self, node: np.ndarray, momentum: np.ndarray, x: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray]:
        """(residual, d^+(w2)) of :meth:`node_equations`."""
        h, n, m = self.h, self.model.n, self.model.m
        q2, v2, lam = x[:n], x[n:2 * n], x[2 * n:3 * n]
        nu1, nu2, theta = x[3 * n:3 * n + m], x[3 * n + m:3 * n + 2 * m], x[3 * n + 2 * m:]
        plus_hat, jac_plus, _, ds_plus = self._flow(q2, v2, h * self.alpha_plus)
        minus_hat, jac_minus, _, ds_minus = self._flow(q2, v2, h * self.alpha_minus)
        plus, _, factor_plus = self._project(plus_hat)
        residual = np.empty(3 * n + 3 * m)
        # DP is symmetric ((4.7) has a symmetric matrix), so D d^T lam = R_w^T (DP lam)
        r1 = ds_plus - ds_minus - jac_plus.T @ self._dp_apply(factor_plus, lam)
        r1 += jac_minus.T @ self._dp_apply(self._factor(node, theta), momentum)
        if m:
            g2 = self._jac(q2)
            r1[:n] -= g2.T @ nu1 + self._hv(v2).T @ nu2
            r1[n:] -= g2.T @ nu2
            residual[2 * n:2 * n + m] = self._jac(plus) @ lam
            residual[3 * n + m:3 * n + 2 * m] = self.model.constraints(q2)
            residual[3 * n + 2 * m:] = g2 @ v2
            minus_hat = minus_hat - self._jac(node).T @ theta
        residual[:2 * n] = r1
        residual[2 * n + m:3 * n + m] = minus_hat - node
        return residual, plus

    def _approximate_jacobian(self, q_ref: np.ndarray, v_ref: np.ndarray) -> np.ndarray:
        """J0 of section 4.3: the Jacobian of the linearised approximates (S4.5'-S4.7') with
        M0 = M, D_q d^+- ~ 1, D_v d^+- ~ h alpha^+- 1 ((4.9)), and G0 = G(q_ref) and the
        D^2 g term v_ref^T D^2 g at (q_ref, v_ref). The printed (S4.6a') and (S4.7a') are
        garbled; these rows are the consistent linearisation of (S4.6a) and of d^-(w2) ~ q2 +
        h alpha^- v2. The velocity constraint row is linearised fully, [v^T D^2 g, G] ((2.1)),
        where (S4.6b') keeps only G0.

        The caller passes the guess of w2 as (q_ref, v_ref) (the paper: "a nearby
        configuration, e.g. q1"): the constraint rows are then nearly exact and g, G v end at
        round-off. This takes fewer iterations, and ends closer to the constraints, than
        G0 = G(q^n) with (S4.6b') as printed."""
        h, n, m = self.h, self.model.n, self.model.m
        size = 3 * n + 3 * m
        j0 = np.zeros((size, size))
        eye = self._eye
        r1q, r1v = slice(0, n), slice(n, 2 * n)
        r2, r3 = slice(2 * n, 2 * n + m), slice(2 * n + m, 3 * n + m)
        r4, r5 = slice(3 * n + m, 3 * n + 2 * m), slice(3 * n + 2 * m, size)
        cq, cv, cl = slice(0, n), slice(n, 2 * n), slice(2 * n, 3 * n)
        c1, c2, ct = (slice(3 * n, 3 * n + m), slice(3 * n + m, 3 * n + 2 * m),
                      slice(3 * n + 2 * m, size))
        j0[r1q, cl] = -eye
        j0[r1v, cv] = h * self._mass
        j0[r1v, cl] = -h * self.alpha_plus * eye
        j0[r3, cq] = eye
        j0[r3, cv] = h * self.alpha_minus * eye
        if m:
            g0 = self._jac(q_ref)
            j0[r1q, c1] = -g0.T
            d2 = self._hv(v_ref)
            j0[r1q, c2] = -d2.T
            j0[r1v, c2] = -g0.T
            j0[r2, cl] = g0
            j0[r3, ct] = -g0.T
            j0[r4, cq] = g0
            j0[r5, cv] = g0
            j0[r5, cq] = d2
        return j0

    def _node_velocity(self, node: np.ndarray, momentum: np.ndarray) -> np.ndarray:
        """The velocity on T_{q_bar}Q of the momentum mu: M^-1 (mu - G^T kappa) with G M^-1
        (mu - G^T kappa) = 0. mu is normalised by G mu = 0 (S2.4), not by G M^-1 mu = 0 as M v
        is, so M^-1 mu itself has a normal part, which can be far larger than v."""
        velocity = self._minv @ momentum
        if not self.model.m:
            return velocity
        g = self._jac(node)
        g_minv = g @ self._minv
        kappa = _solve(g_minv @ g.T, g @ velocity, "singular constraint Jacobian at the node")
        return velocity - g_minv.T @ kappa

    def _simple_guess(self, node: np.ndarray, momentum: np.ndarray, v_ref: np.ndarray
                      ) -> np.ndarray:
        """The starting unknowns of section 6 (lambda^+ = mu, nu^+ = 0, theta^+ = 0,
        q2 = q_bar - h alpha^- v2) with v2 from the node's velocity v_node (see
        :meth:`_node_velocity`): mu ~ M v^n to O(h) (from (S4.4a')), so v2 ~ v_node + (v_node
        - v^n) (-alpha^- / alpha^+) at the segment centre of w^{n+1}."""
        h, n, m = self.h, self.model.n, self.model.m
        v_node = self._node_velocity(node, momentum)
        v2 = (v_node - (self.alpha_minus / self.alpha_plus) * (v_node - v_ref)
              if self.alpha_plus > 0.0 else v_node)
        guess = np.zeros(3 * n + 3 * m)
        guess[:n] = node - h * self.alpha_minus * v2
        guess[n:2 * n] = v2
        guess[2 * n:3 * n] = momentum
        return guess

    def _solve_node(self, node: np.ndarray, momentum: np.ndarray, q_ref: np.ndarray,
                    v_ref: np.ndarray, guess: np.ndarray) -> NodeStep:
        """Chord iteration on :meth:`_equations` from ``guess`` with J0, then (``jacobian``
        "auto") with the finite-difference matrix. The state w^n = (q_ref, v_ref) and the
        node set the scales of the convergence test."""
        h = self.h
        gradient = self._gradient(q_ref)
        scales = np.array([max(self._max(q_ref), self._max(node), self.model.length_scale),
                           max(self._max(v_ref),
                               self._max(self._node_velocity(node, momentum)),
                               h * self._max(self._minv @ gradient), 1e-300)])

        def evaluate(x):
            return self._equations(node, momentum, x)

        # iterates of a diverging iteration overflow; that is detected and handled below
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            return self._iterate(evaluate, guess, scales)

    def _iterate(self, evaluate, guess: np.ndarray, scales: np.ndarray) -> NodeStep:
        """The chord iterations of :meth:`_solve_node` (J0, then finite differences)."""
        n = self.model.n
        iterations, failure = 0, None
        if self.jacobian != "finite-difference":
            matrix = self._approximate_jacobian(guess[:n], guess[n:2 * n])
            cap = max(APPROXIMATE_ITERATIONS, self.newton.max_iterations)
            result = self._chord(evaluate, guess, matrix, scales, cap,
                                 early_exit=self.jacobian == "auto")
            if isinstance(result, NodeStep):
                return result
            iterations, failure = result
            if self.jacobian == "approximate":
                raise failure
        residual, _ = evaluate(guess)
        matrix = self._difference_jacobian(evaluate, guess, residual, scales)
        cap = max(FINITE_DIFFERENCE_ITERATIONS, self.newton.max_iterations)
        result = self._chord(evaluate, guess, matrix, scales, cap, early_exit=False,
                             first=residual)
        if isinstance(result, NodeStep):
            self.fallbacks += failure is not None
            result.iterations += iterations
            result.fallback = True
            return result
        raise result[1]

    def _chord(self, evaluate, x: np.ndarray, matrix: np.ndarray, scales: np.ndarray,
               cap: int, early_exit: bool, first: np.ndarray | None = None):
        """x <- x - matrix^-1 F(x) (the fixed-point iteration (4.4) with affine approximates)
        until the increment of (q2, v2) and the error it implies are below the tolerance
        (relative to ``scales``); F is evaluated once more at the accepted iterate, so the
        returned node, momentum and residual belong to it. Returns a :class:`NodeStep`, or
        (iterations, error) on failure. ``early_exit`` gives up as soon as the contraction
        rate shows that the cap would be exceeded (the caller then switches matrices)."""
        n, m = self.model.n, self.model.m
        factor = _factor(matrix, "the chord iteration matrix is singular")
        tolerance = self.newton.tolerance
        residual = evaluate(x)[0] if first is None else first
        sizes = []
        for iteration in range(1, cap + 1):
            increment = _getrs(*factor, residual)[0]
            x = x - increment
            try:
                residual, node = evaluate(x)
            except NewtonConvergenceError:  # the projection (3.2) failed at a wild iterate
                break
            size = max(self._max(increment[:n]) / scales[0],
                       self._max(increment[n:2 * n]) / scales[1])
            if not math.isfinite(size) or not np.isfinite(residual).all():
                break
            # a linearly converging iterate is off by ~ size theta / (1 - theta) (theta: the
            # contraction), so one small increment alone does not tell: an extrapolated guess
            # often makes the first one tiny, and stopping there leaves a systematic error of
            # the size of the tolerance at every step. J0's
            # contraction alternates between fast and slow iterations, hence the max of two.
            ratios = [size / value for value in sizes[-2:]]
            theta = max(ratios[-1], ratios[0] ** 0.5) if ratios else math.inf
            if size == 0.0 or (size <= tolerance and theta < 1.0
                               and size * theta <= tolerance * (1.0 - theta)) or (
                    size <= ROUNDOFF_INCREMENT and theta > 0.5):
                return NodeStep(x[:n].copy(), x[n:2 * n].copy(), node, x[2 * n:3 * n].copy(),
                                x[3 * n:3 * n + 2 * m].copy(), x[3 * n + 2 * m:].copy(), x,
                                iteration, False, residual)
            sizes.append(size)
            if early_exit and iteration >= EARLY_EXIT_AFTER:
                # the contraction of J0's iteration alternates between fast and slow
                # iterations: judge its mean rate over a window
                rate = (size / sizes[-1 - RATE_WINDOW]) ** (1.0 / RATE_WINDOW)
                if rate >= 1.0 or (
                        iteration + math.log(tolerance / size) / math.log(rate) > cap):
                    break
        previous = sizes[-1] if sizes else math.inf
        return iteration, NewtonConvergenceError(
            f"vi-conversion: the chord iteration on the w^(n+1) equations did not converge in "
            f"{iteration} iterations (last relative increment {previous:.3e})",
            self._max(residual), previous, iteration,
            "reduce the step size (the standard layer's end points must stay close to the "
            "state)")

    def _difference_jacobian(self, evaluate, x: np.ndarray, residual: np.ndarray,
                             scales: np.ndarray) -> np.ndarray:
        """Forward differences of the equations, column by column (one evaluation each)."""
        n, m = self.model.n, self.model.m
        momentum_scale = max(self._max(x[2 * n:3 * n]), 1e-300)
        length = scales[0]
        floors = np.concatenate([np.full(n, scales[0]), np.full(n, scales[1]),
                                 np.full(n, momentum_scale),
                                 np.full(m, momentum_scale / length),
                                 np.full(m, self.h * momentum_scale / length),
                                 np.full(m, 1.0)])
        steps = FINITE_DIFFERENCE_STEP * np.maximum(np.abs(x), floors)
        out = np.empty((x.size, x.size))
        for j in range(x.size):
            shifted = x.copy()
            shifted[j] += steps[j]
            out[:, j] = (evaluate(shifted)[0] - residual) / (shifted[j] - x[j])
        return out

    # -- the standard layer ------------------------------------------------------------------
    def _flow(self, q: np.ndarray, v: np.ndarray, tau: float
              ) -> tuple[np.ndarray, np.ndarray, float, np.ndarray]:
        """One explicit RK step of size tau on (q, v, S)' = (v, A, L) from (q, v, 0) with its
        first variation: (R^q (n,), dR^q/d(q, v) (n, 2n), R^S, dR^S/d(q, v) (2n,)).

        The derivative is the same RK method applied to the first-variation equations
        (section 4.1), exact to round-off; R^v is not needed (section 2)."""
        n = self.model.n
        if tau == 0.0:
            return q.copy(), self._position_seed.copy(), 0.0, np.zeros(2 * n)
        a, b = self._a, self._b
        stages = b.size
        slopes_q, slopes_a, sens_v, sens_a = [], [], [], []
        q_end = q.copy()
        jac_end = self._position_seed.copy()
        action, d_action = 0.0, np.zeros(2 * n)
        for k in range(stages):
            qk, vk, dq, dv = q, v, self._position_seed, self._velocity_seed
            for j in range(k):
                if a[k, j] != 0.0:
                    weight = tau * a[k, j]
                    qk = qk + weight * slopes_q[j]
                    vk = vk + weight * slopes_a[j]
                    dq = dq + weight * sens_v[j]
                    dv = dv + weight * sens_a[j]
            gradient = self._gradient(qk)
            momentum = self._mass @ vk
            lagrangian = 0.5 * (vk @ momentum) - self._potential(qk)
            d_lagrangian = momentum @ dv - gradient @ dq
            if self._needs_acceleration[k]:
                acceleration, d_acceleration = self._acceleration(qk, vk, dq, dv, gradient)
            else:
                acceleration = d_acceleration = None
            slopes_q.append(vk)
            slopes_a.append(acceleration)
            sens_v.append(dv)
            sens_a.append(d_acceleration)
            weight = tau * b[k]
            if weight != 0.0:
                q_end += weight * vk
                jac_end += weight * dv
                action += weight * lagrangian
                d_action += weight * d_lagrangian
        return q_end, jac_end, action, d_action

    def _acceleration(self, q: np.ndarray, v: np.ndarray, dq: np.ndarray, dv: np.ndarray,
                      gradient: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """A(q, v) from the KKT system (4.2)-(4.3) with constant M and a = 0::

            M A - G^T lam = -grad V,   G A = -v^T D^2 g v,

        and its derivative along the sensitivities (dq, dv) (n, 2n) from the differentiated
        system (section 4.1, with D^3 g = 0)::

            M dA - G^T dlam = (sum_a lam_a D^2 g_a - D^2 V) dq,
            G dA = -(A^T D^2 g) dq - 2 (v^T D^2 g) dv.

        Two signs differ from the paper's print: the first line has + lam_a D^2 g_a (the
        paper: -), the second + in D_q of the constraint row's right-hand side (the paper
        drops it). With the paper's first sign the sensitivity of RK4 disagrees with finite
        differences; with these it agrees to their accuracy.
        """
        minv = self._minv
        hessian = self._hessian(q)
        if not self.model.m:
            acceleration = -(minv @ gradient)
            if hessian is None:
                return acceleration, np.zeros_like(dq)
            return acceleration, -(minv @ (hessian @ dq))
        g = self._jac(q)
        hv = self._hv(v)
        g_minv = g @ minv
        factor = _factor(g_minv @ g.T, "singular constraint Jacobian (redundant constraints "
                                        "or a singular configuration)")
        lam = _getrs(*factor, g_minv @ gradient - hv @ v)[0]
        acceleration = minv @ (g.T @ lam - gradient)
        force = self._table.hessian_product_dense(lam) @ dq
        if hessian is not None:
            force -= hessian @ dq
        rhs = -(self._hv(acceleration) @ dq) - 2.0 * (hv @ dv)
        d_lam = _getrs(*factor, rhs - g_minv @ force)[0]
        return acceleration, minv @ (force + g.T @ d_lam)

    def _potential(self, q: np.ndarray) -> float:
        if self._potential_at_zero is not None:
            return self._potential_at_zero + self._constant_gradient @ q
        return self.model.potential(q)

    def _gradient(self, q: np.ndarray) -> np.ndarray:
        return (self._constant_gradient if self._constant_gradient is not None
                else self.model.potential_gradient(q))

    def _hessian(self, q: np.ndarray) -> np.ndarray | None:
        """D^2 V(q) (dense), None when V is linear."""
        if self._constant_gradient is not None:
            return None
        return _dense(self.model.potential_hessian_matrix(q))

    # -- the projection (3.2) and its derivative (4.7) ---------------------------------------
    def _project(self, q_hat: np.ndarray) -> tuple[np.ndarray, np.ndarray, tuple | None]:
        """P(q_hat) of (3.2): (q, theta) with q + G(q)^T theta = q_hat, g(q) = 0 by Newton's
        method on (q, theta), and the LU factors of the matrix of (4.7) at the solution,
        [[1 + D^2(theta^T g)(q), G(q)^T], [G(q), 0]], for DP."""
        n, m = self.model.n, self.model.m
        if not m:
            return q_hat.copy(), np.zeros(0), None
        q, theta = q_hat.copy(), np.zeros(m)
        scale = max(self._max(q_hat), self.model.length_scale)
        converged = False
        for _ in range(50):
            factor = self._factor(q, theta)
            if converged:
                return q, theta, factor
            residual = np.concatenate((q + self._jac(q).T @ theta - q_hat,
                                       self.model.constraints(q)))
            increment = _getrs(*factor, residual)[0]
            q = q - increment[:n]
            theta = theta - increment[n:]
            converged = self._max(increment[:n]) <= PROJECTION_INCREMENT * scale
        raise NewtonConvergenceError(
            "vi-conversion: the projection (3.2) onto the constraint manifold did not converge",
            self._max(self.model.constraints(q)), np.inf, 50,
            "reduce the step size (the standard layer drifted too far from the constraints)")

    def _factor(self, q: np.ndarray, theta: np.ndarray) -> tuple | None:
        """LU factors of the matrix of (4.7) at (q, theta)."""
        n, m = self.model.n, self.model.m
        if not m:
            return None
        g = self._jac(q)
        matrix = np.zeros((n + m, n + m))
        matrix[:n, :n] = self._eye + self._table.hessian_product_dense(theta)
        matrix[:n, n:] = g.T
        matrix[n:, :n] = g
        return _factor(matrix, "the projection matrix (4.7) is singular (singular "
                               "constraint Jacobian)")

    def _dp_apply(self, factor: tuple | None, lam: np.ndarray) -> np.ndarray:
        """DP^T lam = DP lam by (4.7): the first n rows of the solution for (lam, 0)."""
        if factor is None:
            return lam
        n = self.model.n
        return _getrs(*factor, np.concatenate((lam, np.zeros(self.model.m))))[0][:n]

    def _dp_matrix(self, factor: tuple | None) -> np.ndarray:
        """DP (n, n) by (4.7)."""
        n = self.model.n
        if factor is None:
            return self._eye
        rhs = np.zeros((n + self.model.m, n))
        rhs[:n] = self._eye
        return _getrs(*factor, rhs)[0][:n]

    # -- constraint pieces (quadratic constraints: G affine, D^2 g constant) -------------------
    def _jac(self, q: np.ndarray) -> np.ndarray:
        return self._table.jacobian_dense(q)

    def _hv(self, w: np.ndarray) -> np.ndarray:
        """w^T D^2 g, (m, n): row a is (D^2 g_a w)^T."""
        return self._table.hessian_vector_product_dense(w)

    def _c_matrix(self, g: np.ndarray, hv: np.ndarray) -> np.ndarray:
        """C(w) = [[G, 0], [v^T D^2 g, G]] (2m, 2n): its rows annihilate T_w TQ ((2.1))."""
        n, m = self.model.n, self.model.m
        out = np.zeros((2 * m, 2 * n))
        out[:m, :n] = g
        out[m:, :n] = hv
        out[m:, n:] = g
        return out


def _extrapolate(defects: np.ndarray) -> np.ndarray:
    """The next row of equally spaced rows by the polynomial through them (0 if none)."""
    if not defects.shape[0]:
        return 0.0
    return np.array(extrapolation_coefficients(defects.shape[0])) @ defects[::-1]


def _dense(matrix) -> np.ndarray:
    return matrix.toarray() if sp.issparse(matrix) else np.asarray(matrix, dtype=float)


def _factor(matrix: np.ndarray, message: str) -> tuple:
    lu, piv, info = _getrf(matrix)
    if info != 0 or not np.isfinite(lu).all():
        raise NewtonConvergenceError(f"vi-conversion: {message}", np.inf, np.inf, 0,
                                     "reduce the step size or check the constraints; with "
                                     "masses or moments of inertia many orders of magnitude "
                                     "apart (a 1 mg part on a 1 t body) the scheme's matrices "
                                     "are singular to round-off at every step size: use 'em' "
                                     "or 'lobatto'")
    return lu, piv


def _solve(matrix: np.ndarray, rhs: np.ndarray, message: str) -> np.ndarray:
    return _getrs(*_factor(matrix, message), rhs)[0]


def _parse_bias(bias) -> tuple[float, float]:
    """(alpha^-, alpha^+) from a pair or a name of :data:`BIASES`, checked (section 2)."""
    if isinstance(bias, str):
        if bias not in BIASES:
            raise ModelError(f"VariationalConversion: bias must be a pair (alpha_minus, "
                             f"alpha_plus) or one of {sorted(BIASES)}, got {bias!r}")
        return BIASES[bias]
    try:
        minus, plus = (float(value) for value in bias)
    except (TypeError, ValueError):
        raise ModelError(f"VariationalConversion: bias must be a pair (alpha_minus, "
                         f"alpha_plus) or one of {sorted(BIASES)}, got {bias!r}") from None
    if not (-1.0 <= minus <= 0.0 <= plus <= 1.0) or abs(plus - minus - 1.0) > 1e-12:
        raise ModelError(f"VariationalConversion: bias (alpha_minus, alpha_plus) = {bias!r} "
                         f"must satisfy -1 <= alpha_minus <= 0 <= alpha_plus <= 1 and "
                         f"alpha_plus - alpha_minus = 1")
    return minus, plus


def _parse_tableau(tableau) -> tuple[np.ndarray, np.ndarray]:
    """(A, b) of an explicit Runge-Kutta tableau given as "rk4" or (A, b, c), checked."""
    if isinstance(tableau, str):
        if tableau.lower() != "rk4":
            raise ModelError(f"VariationalConversion: tableau must be 'rk4' or an explicit "
                             f"Runge-Kutta tableau (A, b, c), got {tableau!r}")
        return RK4[0], RK4[1]
    try:
        a, b, c = (np.array(part, dtype=float) for part in tableau)
    except (TypeError, ValueError):
        raise ModelError(f"VariationalConversion: tableau must be 'rk4' or a triple of arrays "
                         f"(A, b, c), got {tableau!r}") from None
    if a.ndim != 2 or a.shape[0] != a.shape[1] or a.shape[0] < 1:
        raise ModelError(f"VariationalConversion: tableau A must be a square (s, s) array, got "
                         f"shape {a.shape}")
    stages = a.shape[0]
    if b.shape != (stages,) or c.shape != (stages,):
        raise ModelError(f"VariationalConversion: tableau b and c must have shape ({stages},) "
                         f"like A, got {b.shape} and {c.shape}")
    if not (np.isfinite(a).all() and np.isfinite(b).all() and np.isfinite(c).all()):
        raise ModelError("VariationalConversion: tableau entries must be finite")
    if np.any(np.triu(a) != 0.0):
        raise ModelError("VariationalConversion: tableau A must be strictly lower triangular "
                         "(an explicit method); implicit standard layers are not supported")
    if abs(b.sum() - 1.0) > 1e-12:
        raise ModelError(f"VariationalConversion: tableau weights must sum to 1 (a consistent "
                         f"method), got sum(b) = {b.sum()!r}")
    return a, b
