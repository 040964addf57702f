"""Line-integral HBVM(k, s) for Hamiltonian systems with holonomic constraints (seed 004).

Brugnano, Gurioli, Iavernaro, Weinmueller, "Line integral solution of Hamiltonian systems with
holonomic constraints". The multiplier is frozen on each step, lambda_n constant on
[t_n, t_{n+1}]; the frozen problem is integrated by a Hamiltonian boundary value method
HBVM(k, s): a degree-s polynomial whose s Legendre coefficients are computed with a k-point
Gauss-Legendre quadrature (k >= s); lambda_n is fixed by requiring that the discrete line
integral of grad g along the polynomial vanishes (seed 004, (51)).

Notation (seed 004 section 4, written with the model's sizes: n coordinates, m constraints and
G(q) = Dg(q) the m x n constraint Jacobian, so that grad g = G^T):

* nodes c_l and weights b_l of the k-point Gauss-Legendre rule on [0, 1] (49);
* P_j(c) = sqrt(2j + 1) L_j(2c - 1), the shifted orthonormal Legendre polynomials (21);
* P_hat = (P_j(c_l)) (k x s), I_hat = (int_0^{c_l} P_j) (k x s), Omega = diag(b) (28);
* X_s, the s x s tridiagonal matrix of (27) with xi_j = 1 / (2 sqrt(|4 j^2 - 1|));
* the unknown Gamma (s x n), whose rows are the coefficients gamma_j of the velocity
  polynomial; the stages are Y = e q0^T + h I_hat Gamma (k x n).

One step solves (50)-(51) in the separable form (54):

    Psi   = P_hat^T Omega grad V(Y)                      (rows psi_j)          (50b)
    rho_j = sum_l b_l P_j(c_l) G(Y_l)^T                   (n x m each)          (50c)
    A lam = r,   A = h sum_{ij} (X_s)_{ji} rho_j^T M^-1 rho_i,
                 r = rho_0^T M^-1 p0 - h sum_{ij} (X_s)_{ji} rho_j^T M^-1 psi_i          (51)
    Gamma = e_1 (M^-1 p0)^T - h X_s (Psi + R lam) M^-1                           (50a), (54)

and (52) gives q1 = q0 + h gamma_0 and p1 = p0 - h (psi_0 + rho_0 lam). Given (50a), (51) is the
condition sum_j rho_j^T gamma_j = 0, i.e. the quadrature of int_0^1 grad g(u)^T u' dc, the
line integral of grad g along the stage polynomial, vanishes (29). The identities
P_hat^T Omega e = e_1, P_hat^T Omega P_hat = I_s and P_hat^T Omega I_hat = X_s (digest section
3.2) hold for every k >= s and are used to write (50a) without the k stages.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp
from numpy.polynomial import legendre

from mbs.engine.equations import weighted_sum
from mbs.engine.newton import NewtonConvergenceError, NewtonOptions, solve_linear
from mbs.errors import ModelError
from mbs.model import Model
from mbs.solvers.base import SchemeProperties, Solver, StepResult

_TINY = 1e-300
#: Multiplier systems up to this size are solved with numpy.linalg.solve.
SMALL_SYSTEM = 64


# -- quadrature and Legendre matrices ---------------------------------------------------------
@dataclass(frozen=True)
class HBVMTableau:
    """Constant matrices of HBVM(k, s) (seed 004, (21), (27), (28), (49)).

    Attributes
    ----------
    c, b : (k,)
        Gauss-Legendre nodes and weights on [0, 1].
    P : (k, s)
        P_hat = (P_j(c_l)).
    I : (k, s)
        I_hat = (int_0^{c_l} P_j(x) dx).
    PtO : (s, k)
        P_hat^T Omega.
    X : (s, s)
        X_s of (27).
    runge_kutta : (k, k)
        Butcher matrix I_hat P_hat^T Omega (rank s) of the equivalent k-stage method.
    """

    k: int
    s: int
    c: np.ndarray
    b: np.ndarray
    P: np.ndarray
    I: np.ndarray  # noqa: E741 - the paper's name
    PtO: np.ndarray
    X: np.ndarray
    runge_kutta: np.ndarray


def xi(j: int) -> float:
    """xi_j = 1 / (2 sqrt(|4 j^2 - 1|)) of seed 004, (27)."""
    return 1.0 / (2.0 * np.sqrt(abs(4.0 * j * j - 1.0)))


def tableau(k: int, s: int) -> HBVMTableau:
    """Matrices of HBVM(k, s) (digest section 3.4, steps P1-P5)."""
    x, w = legendre.leggauss(k)
    c, b = 0.5 * (x + 1.0), 0.5 * w
    # P_j(c) = sqrt(2j+1) L_j(2c-1), j = 0..s (one column more for int_0^c P_{s-1}).
    full = np.column_stack([np.sqrt(2 * j + 1) * legendre.legval(x, np.eye(s + 1)[j])
                            for j in range(s + 1)])
    X = np.zeros((s, s))
    X[0, 0] = xi(0)
    for j in range(1, s):
        X[j, j - 1] = xi(j)
        X[j - 1, j] = -xi(j)
    # int_0^c P_0 = c = xi_0 P_0 + xi_1 P_1 and int_0^c P_j = xi_{j+1} P_{j+1} - xi_j P_{j-1}:
    # I_hat = P_{s+1} X_hat with X_hat = [X_s; (0, ..., 0, xi_s)] (digest section 3.2).
    x_hat = np.vstack([X, np.zeros((1, s))])
    x_hat[s, s - 1] = xi(s)
    integral = full @ x_hat
    P = full[:, :s]
    pto = P.T * b[None, :]
    return HBVMTableau(k, s, c, b, P, integral, pto, X, integral @ pto)


# -- stage-wise evaluation of grad V and G, vectorised over the k nodes ------------------------
class _StageFunctions:
    """Psi = P_hat^T Omega grad V(Y) and the projected Jacobians rho_j^T of (50).

    grad V is evaluated at all k stages in one call (``Model.potential_gradients``). For
    quadratic constraints G is affine in q, so rho_j^T = sum_l (P_hat^T Omega)_{jl} G(Y_l)
    equals G(y_0) for j = 0 and G(y_j) - G(0) for j >= 1, with y = P_hat^T Omega Y (the rows
    of P_hat^T Omega sum to delta_j0): s Jacobian evaluations instead of k, exact for any k,
    and no second derivatives.
    User (non-quadratic) constraints are evaluated at each stage.
    """

    def __init__(self, model: Model, tab: HBVMTableau, dense: bool):
        self.model, self.tab, self.dense = model, tab, dense
        self.quadratic = model.constraints_are_quadratic
        if self.quadratic and model.m:
            zero = np.zeros(model.n)
            self.jacobian_at_zero = (model.jacobian_matrix(zero) if dense
                                     else model.constraint_jacobian(zero))

    def potential(self, Y: np.ndarray) -> np.ndarray:
        """Psi (s, n)."""
        return self.tab.PtO @ self.model.potential_gradients(Y)

    def jacobians(self, Y: np.ndarray):
        """rho_j^T, j = 0..s-1: ndarray (s, m, n) when dense, else a list of CSR matrices."""
        model, pto = self.model, self.tab.PtO
        if self.quadratic:
            ybar = pto @ Y
            if self.dense:
                out = np.empty((self.tab.s, model.m, model.n))
                out[0] = model.jacobian_matrix(ybar[0])
                for j in range(1, self.tab.s):
                    out[j] = model.jacobian_matrix(ybar[j]) - self.jacobian_at_zero
                return out
            return ([model.constraint_jacobian(ybar[0])]
                    + [(model.constraint_jacobian(ybar[j]) - self.jacobian_at_zero).tocsr()
                       for j in range(1, self.tab.s)])
        if self.dense:
            stages = np.stack([model.jacobian_matrix(y) for y in Y])
            return np.einsum("jl,lab->jab", pto, stages)
        stages = [model.constraint_jacobian(y) for y in Y]
        return [sum(pto[j, i] * stages[i] for i in range(self.tab.k)).tocsr()
                for j in range(self.tab.s)]


# -- the solver --------------------------------------------------------------------------------
def _default_options() -> NewtonOptions:
    return NewtonOptions(tolerance=1e-15, max_iterations=100, stagnation_level=1e-12)


@dataclass
class HBVM(Solver):
    """Line-integral HBVM(k, s) of seed 004 for constrained Hamiltonian systems.

    Parameters
    ----------
    s : int
        Degree of the stage polynomial (default 2). The order is 2 in q and p for every s
        unless the exact multiplier is constant, then 2s (seed 004, Theorem 8); the step's
        constant lambda is first order against lambda(t_n) and second order against lambda at
        the step's midpoint, where reactions and drive efforts read it; s
        only changes the error constant, and the paper recommends s > 1 (s = 1 is clearly
        less accurate, s = 2 and 3 nearly equal).
    k : int or None
        Number of Gauss-Legendre nodes, k >= s; default ``None`` means k = 2 s. g(q_n) and
        H are conserved exactly when they are polynomials of degree <= 2k/s, otherwise to
        O(h^{2k}) (Theorem 8, (57), (61)). In the director formulation every built-in
        constraint is quadratic and the kinetic energy is quadratic, so k = s already keeps g
        exact; the default k = 2 s also makes H exact for potentials of degree <= 4 (linear
        gravity, quadratic and quartic springs) and gives O(h^{4s}) = O(h^8) for s = 2
        otherwise (central gravity, springs through a square root). For non-polynomial H
        raise k until that is below round-off (the tethered satellites use k = 6, s <= 3).
        The cost grows with k only through the k evaluations of grad V per iteration.
    iteration : {"fixed-point", "newton"}
        "fixed-point" (default): the paper's iteration on Gamma (section 4) with lambda
        eliminated exactly from (51) in every sweep; its contraction factor is O(h) times the
        stiffness, so it needs no Hessians but becomes slow or diverges for stiff systems
        (small inertias, stiff springs). "newton": the shared Newton engine on the same
        equations written as terms (:meth:`_equations`: (50a) times M, (52) and (51) as
        sum_j rho_j^T gamma_j = 0), in tensor form for quadratic constraints, with the exact
        Jacobian. It handles stiff potentials (a k = 1e5 spring at h = 0.01, where the
        fixed-point iteration diverges) and fast rotations (the heavy top at h omega ~ 1.4).
        A step whose fixed-point sweeps fail (stiffness, or nearly singular constraints at a
        mechanism's dead point, where they can stall at any step size) is solved by "newton";
        ``stats["newton_steps"]`` counts them.
        Models with loads, dampers, actuators or drives always use "newton": applied forces
        enter at the nodes Y_l with the stage polynomial's velocity, and the step's work is
        their quadrature h sum_l b_l F_l . Y_l'; drives are evaluated at t + c_l h.
    newton : NewtonOptions
        Stopping rule of either iteration: stop when the largest increment of Gamma (and of
        lambda for "newton") is <= ``tolerance`` (default 1e-15) times its magnitude, or
        once it stops decreasing below ``stagnation_level`` (default 1e-12) times the magnitude
        (round-off floor; a looser level could accept an oscillating, unconverged iterate, and
        the scheme conserves H and g only at the solution of its equations);
        ``max_iterations`` (default 100) sweeps before :class:`NewtonConvergenceError`.
    sparse : bool or None
        Sparse linear algebra for the Jacobians, M^-1 and the m x m multiplier system;
        default: the model's choice (``not model.dense``).

    Notes
    -----
    Start: straight-line stages Y_l = q0 + c_l h M^-1 p0, i.e. Gamma = e_1 (M^-1 p0)^T (the
    paper gives no starting guess). ``StepResult.velocity`` is the average velocity
    gamma_0 = (q1 - q0)/h, ``multiplier`` the constant lambda_n of the step (in the model's
    constraint scaling; it approximates lambda(t_n) to O(h) and lambda(t_n + h/2) to O(h^2)),
    ``velocity_multiplier`` zeros, ``iterations`` the number of sweeps (evaluations of the k
    stages), ``enforced`` = (max |g(q1)|, max |G(q1) M^-1 p1|): the hidden constraint is not
    enforced and is only O(h^2) (Theorem 8).

    Order, symplecticity, what the scheme conserves, which constraint levels hold at the step
    ends and the times of its multipliers are declared once in ``properties``
    (:class:`~mbs.solvers.base.SchemeProperties`); :func:`mbs.solvers.solver_table`
    renders them for every scheme.

    Without constraints (m = 0) and with k = s the scheme is the symplectic s-stage Gauss
    method. The paper proves order 2 in q and p whatever s (2s when lambda is constant);
    the positions alone converge with order 4 for every s >= 2 (measured for s = 2 on a
    double pendulum, a four-bar, an RSSR linkage and a gimbal, and for s = 3 and 4 on double
    pendulums and spring-coupled bodies: the multiplier, constant over a step, bars more),
    while the momenta show order 2: their error lies along the hidden constraint, which
    holds to O(h^2) only (applied forces and dampers on slender bodies feel that error, and
    their positions can then converge at order 2 only). The multiplier lambda converges with
    order 1. Momentum maps are
    kept to round-off by HBVM(1,1), and only approximately (a slow drift) by HBVM(2,2).
    """

    s: int = 2
    k: int | None = None
    iteration: str = "fixed-point"
    sparse: bool | None = None
    newton: NewtonOptions = field(default_factory=_default_options)

    properties = SchemeProperties(
        name="hbvm",
        order_q="4 observed for s >= 2 on conservative models (2 proven; down to 2 under "
                "applied forces and dampers, see the limitations)",
        order_p="2 (2s if lambda const.)",
        symplectic=False,
        energy="exact if H polynomial of degree <= 2k/s, else O(h^{2k})",
        momentum="not guaranteed",
        constraints_at_step_end="g(q^{n+1}) as energy; G M^-1 p^{n+1} only O(h^2)",
        multiplier_times="lambda_n constant on [t_n, t_{n+1}] (~ lambda(t_n + h/2))",
        reference=("Brugnano, Gurioli, Iavernaro, Weinmüller, Line integral solution of "
                   "Hamiltonian systems with holonomic constraints, (50)-(52)"),
        nodes_meet_constraints=False)
    # G M^-1 p^{n+1} is enforced only to O(h^2), and lambda_n alternates from step to step
    drive_effort = "centred"

    def __post_init__(self):
        super().__post_init__()
        if isinstance(self.s, bool) or not isinstance(self.s, (int, np.integer)) or self.s < 1:
            raise ModelError(f"HBVM: s must be an integer >= 1, got {self.s!r}")
        self.s = int(self.s)
        if self.k is None:
            self.k = 2 * self.s
        if (isinstance(self.k, bool) or not isinstance(self.k, (int, np.integer))
                or self.k < self.s):
            raise ModelError(f"HBVM: k must be an integer >= s = {self.s}, got {self.k!r}")
        self.k = int(self.k)
        iteration = str(self.iteration).lower().replace("_", "-")
        if iteration == "fixed point":
            iteration = "fixed-point"
        if iteration not in ("fixed-point", "newton"):
            raise ModelError(f"HBVM: iteration must be 'fixed-point' or 'newton', got "
                             f"{self.iteration!r}")
        self.iteration = iteration
        self.tab = tableau(self.k, self.s)

    def __repr__(self) -> str:
        return f"HBVM(k={self.k}, s={self.s}, iteration={self.iteration!r})"

    # -- setup --------------------------------------------------------------------------------
    def start(self, model: Model, q0: np.ndarray, p0: np.ndarray, h: float) -> None:
        if model.has_applied_forces or model.is_rheonomic:
            self.iteration = "newton"  # the fixed-point sweep has no forces or drives
        super().start(model, q0, p0, h)
        #: steps whose fixed-point sweeps failed and that Newton's method solved instead
        self.newton_steps = 0
        self._dense = model.dense if self.sparse is None else not self.sparse
        self._minv = (model.inverse_mass_operator() if self._dense
                      else model.inverse_mass_matrix.tocsr())
        self._stages = _StageFunctions(model, self.tab, self._dense)

    # -- building blocks ----------------------------------------------------------------------
    def _apply_minv_rows(self, rows: np.ndarray) -> np.ndarray:
        """Rows r_j -> (M^-1 r_j) for an (s, n) array (M^-1 symmetric)."""
        return rows @ self._minv if self._dense else (self._minv @ rows.T).T

    def _evaluate(self, q0: np.ndarray, gamma: np.ndarray):
        """Stages Y = q0 + h I_hat Gamma and their projections Psi, rho^T."""
        Y = q0[None, :] + self.h * (self.tab.I @ gamma)
        psi = self._stages.potential(Y)
        rho = self._stages.jacobians(Y) if self.model.m else None
        return psi, rho

    def _multiplier(self, rho, psi: np.ndarray, v0: np.ndarray) -> np.ndarray:
        """Solve (51): A lam = r with A = h sum X_ji rho_j^T M^-1 rho_i (non-symmetric)."""
        h, X, s = self.h, self.tab.X, self.tab.s
        xmp = X @ self._apply_minv_rows(psi)  # rows sum_i X_ji M^-1 psi_i
        if self._dense:
            s, m, n = rho.shape
            mrho = (rho.reshape(s * m, n) @ self._minv).reshape(s, m * n)  # (M^-1 rho_i)^T
            xmrho = (X @ mrho).reshape(s, m, n).transpose(1, 0, 2).reshape(m, s * n)
            flat = rho.transpose(1, 0, 2).reshape(m, s * n)  # [a, (j, n)] = rho_j[n, a]
            A = h * (flat @ xmrho.T)
            rhs = rho[0] @ v0 - h * (flat @ xmp.ravel())
        else:
            mrho = [(r @ self._minv).tocsr() for r in rho]
            A = sp.csr_matrix((self.model.m, self.model.m))
            for j in range(s):
                for i in range(max(0, j - 1), min(s, j + 2)):
                    if X[j, i] != 0.0:
                        A = A + (h * X[j, i]) * (rho[j] @ mrho[i].T)
            rhs = rho[0] @ v0 - h * sum(rho[j] @ xmp[j] for j in range(s))
        try:
            if not sp.issparse(A) and A.shape[0] == 1:
                lam = rhs / A[0]
                if not np.all(np.isfinite(lam)) or A[0, 0] == 0.0:
                    raise np.linalg.LinAlgError("singular 1 x 1 system")
            elif not sp.issparse(A) and A.shape[0] <= SMALL_SYSTEM:
                lam = np.linalg.solve(A, rhs)
                if not np.all(np.isfinite(lam)):
                    raise np.linalg.LinAlgError("non-finite solution")
            else:
                lam = solve_linear(A.tocsc() if sp.issparse(A) else A, rhs)
        except (np.linalg.LinAlgError, RuntimeError) as exc:
            raise NewtonConvergenceError(
                f"singular multiplier equation (51) ({exc})", np.inf, np.inf, 0,
                "singular configuration or redundant constraints (check model.redundancies); "
                "A = h/2 G M^-1 G^T + O(h^2) must be invertible") from exc
        return lam

    def _forces(self, rho, psi: np.ndarray, lam: np.ndarray) -> np.ndarray:
        """F = Psi + R lam (rows psi_j + rho_j lam)."""
        if rho is None:
            return psi
        if self._dense:
            return psi + lam @ rho  # (m,) @ (s, m, n) -> (s, n)
        return psi + np.stack([r.T @ lam for r in rho])

    def _update(self, force: np.ndarray, v0: np.ndarray) -> np.ndarray:
        """(50a): Gamma = e_1 v0^T - h X_s F M^-1."""
        gamma = -self.h * self._apply_minv_rows(self.tab.X @ force)
        gamma[0] += v0
        return gamma

    # -- step ---------------------------------------------------------------------------------
    def step(self, t: float, q: np.ndarray, p: np.ndarray) -> StepResult:
        self._time = t
        model, work = self.model, 0.0
        v0 = np.asarray(model.apply_inverse_mass(p)).ravel()
        if self.iteration == "newton":
            gamma, p1, lam, iterations, work = self._solve_newton(q, p, v0)
        else:
            try:
                gamma, force, lam, iterations = self._solve_fixed_point(q, v0)
                p1 = p - self.h * force[0]  # (52)
            except NewtonConvergenceError as sweeps:
                # the sweeps contract by about h times the largest frequency and by the
                # conditioning of the constraints: near a mechanism's dead point they can stall
                # at any step size, where Newton's method still converges
                try:
                    gamma, p1, lam, iterations, work = self._solve_newton(q, p, v0)
                except NewtonConvergenceError:
                    raise sweeps from None
                self.newton_steps += 1
        q1 = q + self.h * gamma[0]
        self._warm.lam = lam
        if model.m:
            t1 = t + self.h  # drives move the constraints: g(q1, t1), G v1 + dg/dt
            enforced = (self._max(model.constraints(q1, t1)),
                         self._max(model.velocity_constraints(q1, p1, t1)))
        else:
            enforced = (0.0, 0.0)
        return StepResult(q1, p1, gamma[0].copy(), lam.copy(), np.zeros(model.m), iterations,
                          enforced, work)

    def _converged(self, iteration: int, increment: float, previous: float) -> bool:
        if increment <= self.newton.tolerance:
            return True
        return (iteration >= 3 and increment >= previous
                and increment <= self.newton.stagnation_level)

    def _fail(self, message: str, increment: float, iterations: int, hint: str):
        return NewtonConvergenceError(f"HBVM({self.k},{self.s}) {self.iteration}: {message}",
                                      np.inf, increment, iterations, hint)

    def _solve_fixed_point(self, q0: np.ndarray, v0: np.ndarray):
        """The paper's fixed-point iteration on Gamma, lambda eliminated by (51) each sweep."""
        m = self.model.m
        gamma = np.zeros((self.tab.s, q0.size))
        gamma[0] = v0
        previous = np.inf
        increment = np.inf
        for iteration in range(1, self.newton.max_iterations + 1):
            psi, rho = self._evaluate(q0, gamma)
            lam = self._multiplier(rho, psi, v0) if m else np.zeros(0)
            force = self._forces(rho, psi, lam)
            new = self._update(force, v0)
            scale = max(float(np.max(np.abs(new), initial=0.0)), _TINY)
            increment = float(np.max(np.abs(new - gamma), initial=0.0)) / scale
            if not np.isfinite(increment):
                raise self._fail("the iterates are not finite", increment, iteration,
                                 "use iteration='newton', or reduce the step size")
            gamma = new
            if self._converged(iteration, increment, previous):
                return gamma, force, lam, iteration
            previous = increment
        raise self._fail(f"no convergence in {self.newton.max_iterations} sweeps (last "
                         f"relative increment {increment:.3e})", increment,
                         self.newton.max_iterations,
                         "use iteration='newton', or reduce the step size: the fixed-point "
                         "sweeps stop contracting when h times the largest frequency grows "
                         "(stiff systems) or the constraints become nearly singular (a "
                         "mechanism's dead point)")

    def annotate(self, solution) -> None:
        """``stats["newton_steps"]``: the fixed-point iteration's steps solved by Newton's
        method after their sweeps stopped contracting."""
        if self.iteration == "fixed-point":
            solution.stats["newton_steps"] = self.newton_steps

    #: the unknowns are Legendre coefficients, p1 and lambda, not (q1, p1, lambda, gamma)
    _state_unknowns = False

    def _polynomial_key(self) -> tuple:
        return (self.k, self.s)

    def _polynomial_applies(self, model) -> bool:
        # the fixed-point iteration evaluates its own stage functions
        return self.iteration == "newton" and super()._polynomial_applies(model)

    def _no_tensor_form(self, model) -> str:
        if self.iteration != "newton":
            return ("the fixed-point iteration evaluates its own stage functions "
                    "(iteration='newton' runs in the kernel)")
        return super()._no_tensor_form(model)

    def _equations(self, layout, shifted: bool = False):
        """(50a) multiplied by M and the line-integral condition (51) over the data (q0, p0)
        and the unknowns (gamma_0 .. gamma_{s-1}, p1, lambda), with the stages Y_l = q0 +
        h sum_j I_hat_lj gamma_j::

            M gamma_j - delta_j0 p0 + h sum_l W_jl (grad V(Y_l) + G(Y_l)^T lambda) = 0
            (p1 - p0)/h + sum_l b_l (grad V(Y_l) + G(Y_l)^T lambda)              = 0   (52)
            sum_l b_l G(Y_l) sum_j P_hat_lj gamma_j                              = 0   (51)

        with W = X_s P_hat^T Omega; the last row is sum_j rho_j^T gamma_j, the quadrature of
        the line integral of grad g along the stage polynomial.
        """
        model, h, tab = self.model, self.h, self.tab
        n, m, s = model.n, model.m, tab.s
        unknowns = {**{f"gamma{j}": n for j in range(s)}, "p1": n, "lam": m}
        builder = layout({"q0": n, "p0": n}, unknowns)
        q0, p0, p1, lam = builder.variables("q0", "p0", "p1", "lam")
        gamma = builder.variables(*(f"gamma{j}" for j in range(s)))

        stages = [q0 + weighted_sum(gamma, h * tab.I[node]) for node in range(tab.k)]

        def add_force(equation: str, weights: np.ndarray, work: float = 0.0) -> None:
            for node in np.flatnonzero(weights):  # sum_l w_l (grad V - F + G^T lambda)(Y_l)
                builder.add_potential_gradient(equation, stages[node], weights[node])
                builder.add_applied_force(equation, stages[node],
                                          weighted_sum(gamma, tab.P[node]),
                                          tab.c[node] * h, -weights[node],
                                          work * weights[node])
                builder.add_jacobian_transpose_product(equation, stages[node], lam,
                                                       weights[node], tab.c[node] * h)

        weights = tab.X @ tab.PtO
        for j in range(s):
            builder.equation(f"coefficient{j}", n)
            builder.add_linear(f"coefficient{j}", gamma[j].mapped(model.mass_matrix)
                               - p0 * float(j == 0))
            add_force(f"coefficient{j}", h * weights[j])
        builder.equation("momentum", n)
        builder.add_linear("momentum", (p1 - p0) * (1.0 / h))
        add_force("momentum", tab.b, h)  # work: h sum_l b_l F(Y_l, Y_l') . Y_l'
        builder.equation("line", m)
        for node in range(tab.k):
            builder.add_jacobian_product("line", stages[node], weighted_sum(gamma, tab.P[node]),
                                         tab.b[node], tab.c[node] * h)
        return builder

    def _initial_guess(self, q0: np.ndarray, p0: np.ndarray) -> None:
        return None  # _solve_newton starts from the straight line

    def _solve_newton(self, q0: np.ndarray, p0: np.ndarray, v0: np.ndarray):
        """Newton's method (the shared engine) on :meth:`_equations`, from the straight-line
        stages and the previous step's multiplier. Returns (gamma, p1, lambda, iterations,
        work of the applied forces)."""
        n, s = self.model.n, self.tab.s
        x0 = np.concatenate([v0, np.zeros((s - 1) * n), p0, self._warm.lam])
        acceleration = self.model.apply_inverse_mass(self.model.potential_gradient(q0))
        scale = max(self._max(v0), abs(self.h) * self._max(acceleration),
                    abs(self.h) * self._applied_acceleration(q0, p0), _TINY)
        evaluate, _ = self.newton_system(q0, p0)
        x, iterations, _ = self._solve_system(evaluate, x0, [slice(0, s * n)], [scale],
                                              residual_from=None)
        return (x[:s * n].reshape(s, n), x[s * n:(s + 1) * n], x[(s + 1) * n:], iterations,
                self._work(x))
