"""Ensembles: one model integrated from many initial states in one vectorised run.

:func:`simulate_ensemble` advances K copies of a small model at once with the energy-momentum
scheme (seed 003, (84)): residuals and Jacobians of all members are evaluated with batched
kernels of the model (``QuadraticTable.values / jacobians_dense``, ``PotentialGroup
.discrete_gradients``, ...) and the K Newton systems are solved as one stacked LAPACK call, so
the cost per member is a fraction of a separate run (e.g. Monte Carlo studies of tops).

Parameter sweeps (different masses, stiffnesses, geometry) are different models: run them with
:func:`simulate_many`, which maps :func:`mbs.simulate` over (model, options) pairs with any
``concurrent.futures.Executor`` — a ``ProcessPoolExecutor`` on one machine or, unchanged, the
executor of a Dask cluster (``distributed.Client(...).get_executor()``).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from concurrent.futures import Executor
from dataclasses import dataclass, field

import numpy as np

from mbs.errors import ModelError, SolverError
from mbs.model import Model
from mbs.validation import as_scalar


@dataclass
class EnsembleSolution:
    """States of every member: ``q``, ``p`` of shape (K, N+1, n) at times ``t`` (N+1,)."""

    model: Model
    t: np.ndarray
    q: np.ndarray
    p: np.ndarray
    stats: dict = field(default_factory=dict)

    def kinetic_energy(self) -> np.ndarray:
        """(K, N+1)."""
        minv = self.model.inverse_mass_operator()
        return 0.5 * np.einsum("kti,ij,ktj->kt", self.p, minv, self.p)

    def potential_energy(self) -> np.ndarray:
        """(K, N+1)."""
        flat = self.q.reshape(-1, self.model.n)
        return self.model.potential_energies(flat).reshape(self.q.shape[:2])

    def energy(self) -> np.ndarray:
        """(K, N+1)."""
        return self.kinetic_energy() + self.potential_energy()

    def angular_momentum(self, about=(0.0, 0.0, 0.0)) -> np.ndarray:
        """(K, N+1, 3)."""
        return self.model.angular_momentum(self.q, self.p, about=about)

    def member(self, k: int):
        """Arrays (q, p) of member k."""
        return self.q[k], self.p[k]


def simulate_ensemble(model: Model, initial_states, *, h: float, t_end: float,
                      tolerance: float = 1e-12, max_iterations: int = 25) -> EnsembleSolution:
    """Integrate K members of ``model`` with the EM scheme, vectorised over the members.

    Parameters
    ----------
    model : Model
        A small model (``model.dense``) with quadratic constraints (all built-in joints).
    initial_states : (Q0, P0) arrays of shape (K, n), or an array (K, 2, n)
        Consistent initial states (check them with ``model.is_consistent``).
    h, t_end : float
        Step size and end time (start at 0).
    tolerance, max_iterations
        Newton stopping rule, as :class:`mbs.solvers.NewtonOptions` (relative increment of q
        and p of every member).

    Returns
    -------
    EnsembleSolution
        Every member conserves energy and momentum maps as a single EM run does.
    """
    if not isinstance(model, Model):
        raise ModelError("simulate_ensemble expects a compiled Model")
    if not model.dense or not model.constraints_are_quadratic:
        raise ModelError("simulate_ensemble needs a small model (model.dense) with quadratic "
                         "constraints; use simulate_many for large models or user constraints")
    h = as_scalar(h, "h", "simulate_ensemble", positive=True)
    t_end = as_scalar(t_end, "t_end", "simulate_ensemble", positive=True)
    q0, p0 = _initial_arrays(model, initial_states)
    steps = max(1, int(round(t_end / h)))
    kernel = _BatchedEnergyMomentum(model, h, tolerance, max_iterations)
    count, n = q0.shape
    q = np.empty((count, steps + 1, n))
    p = np.empty((count, steps + 1, n))
    q[:, 0], p[:, 0] = q0, p0
    lam = np.zeros((count, model.m))
    iterations = np.zeros(steps, dtype=int)
    started = time.perf_counter()
    for step in range(steps):
        try:
            q[:, step + 1], p[:, step + 1], lam, iterations[step] = kernel.step(
                q[:, step], p[:, step], lam)
        except SolverError as error:
            error.solution = EnsembleSolution(model, h * np.arange(step + 1), q[:, :step + 1],
                                              p[:, :step + 1])
            error.step, error.time = step, step * h
            raise
    return EnsembleSolution(model, h * np.arange(steps + 1), q, p,
                            {"solver": "em (ensemble)", "h": h, "members": count,
                             "newton_iterations": iterations,
                             "wall_time": time.perf_counter() - started})


def simulate_many(runs: Iterable[tuple[Model, dict]], executor: Executor | None = None) -> list:
    """``mbs.simulate(model, **options)`` for every (model, options) pair.

    With ``executor=None`` the runs execute here one after the other; with any
    ``concurrent.futures.Executor`` (process pool, Dask ``Client.get_executor()``) they run
    where the executor puts them. Models must be picklable for process or cluster executors
    (true for every built-in element; user potentials holding lambdas are not).
    """
    from mbs.simulate import simulate

    runs = list(runs)
    if executor is None:
        return [simulate(model, **options) for model, options in runs]
    futures = [executor.submit(simulate, model, **options) for model, options in runs]
    return [future.result() for future in futures]


def _initial_arrays(model: Model, initial_states) -> tuple[np.ndarray, np.ndarray]:
    try:
        if isinstance(initial_states, tuple) and len(initial_states) == 2:
            q0, p0 = (np.asarray(a, dtype=float) for a in initial_states)
        else:
            states = np.asarray(initial_states, dtype=float)
            q0, p0 = states[:, 0], states[:, 1]
    except (TypeError, ValueError, IndexError) as exc:
        raise ModelError(f"simulate_ensemble: initial_states must be (Q0, P0) of shape (K, "
                         f"{model.n}) or an array (K, 2, {model.n})") from exc
    if q0.ndim != 2 or q0.shape != p0.shape or q0.shape[1] != model.n:
        raise ModelError(f"simulate_ensemble: initial states must have shape (K, {model.n}), "
                         f"got {q0.shape} and {p0.shape}")
    if not (np.all(np.isfinite(q0)) and np.all(np.isfinite(p0))):
        raise ModelError("simulate_ensemble: initial states must be finite")
    bad = [k for k in range(q0.shape[0]) if not model.is_consistent(q0[k], p0[k])]
    if bad:
        raise ModelError(f"simulate_ensemble: members {bad[:10]} violate the constraints; "
                         f"project them with model.project(q, p)")
    return q0.copy(), p0.copy()


class _BatchedEnergyMomentum:
    """The EM residual (84) and its Jacobian for K members at once (cf. EnergyMomentum)."""

    def __init__(self, model: Model, h: float, tolerance: float, max_iterations: int):
        self.model, self.h = model, h
        self.tolerance, self.max_iterations = tolerance, max_iterations
        self.mass = model.mass_operator()
        self.minv = model.inverse_mass_operator()
        self.table = model._table
        n, m = model.n, model.m
        self.n, self.m, self.size = n, m, 2 * n + 2 * m
        self.eye = np.eye(n)
        self.inverse = None  # stacked inverse Newton matrices, reused (simplified Newton)

    def _discrete_gradients(self, q0, q1):
        out = np.zeros_like(q0)
        for group in self.model.potential_groups:
            out += group.discrete_gradients(q0, q1)
        return out

    def _discrete_gradient_jacobians(self, q0, q1):
        out = np.zeros((q0.shape[0], self.n, self.n))
        for group in self.model.potential_groups:
            out += group.discrete_gradient_jacobians(q0, q1)
        return out

    def _system(self, q0, p0, x, jacobian: bool = True):
        h, n, m, table = self.h, self.n, self.m, self.table
        q1, p1 = x[:, :n], x[:, n:2 * n]
        lam, gam = x[:, 2 * n:2 * n + m], x[:, 2 * n + m:]
        q_mid, p_mid = 0.5 * (q0 + q1), 0.5 * (p0 + p1)
        v_mid, v1 = p_mid @ self.minv, p1 @ self.minv
        g_mid, g1 = table.jacobians_dense(q_mid), table.jacobians_dense(q1)
        h_gam, h_lam = table.hessian_products_dense(gam), table.hessian_products_dense(lam)
        residual = np.concatenate([
            (q1 - q0) @ self.mass / h - p_mid - np.einsum("kmn,km->kn", g_mid, gam),
            (p1 - p0) / h + self._discrete_gradients(q0, q1)
            + np.einsum("kmn,km->kn", g_mid, lam) + np.einsum("kij,kj->ki", h_gam, v_mid),
            table.values(q1),
            np.einsum("kmn,kn->km", g1, v1)], axis=1)
        if not jacobian:
            return residual, None
        a, b, c = slice(0, n), slice(n, 2 * n), slice(2 * n, 2 * n + m)
        d = slice(2 * n + m, self.size)
        jac = np.zeros((q0.shape[0], self.size, self.size))
        jac[:, a, a] = self.mass / h - 0.5 * h_gam
        jac[:, a, b] = -0.5 * self.eye
        jac[:, a, d] = -np.transpose(g_mid, (0, 2, 1))
        jac[:, b, a] = self._discrete_gradient_jacobians(q0, q1) + 0.5 * h_lam
        jac[:, b, b] = self.eye / h + 0.5 * h_gam @ self.minv
        jac[:, b, c] = np.transpose(g_mid, (0, 2, 1))
        jac[:, b, d] = np.transpose(table.hessian_vector_products_dense(v_mid), (0, 2, 1))
        jac[:, c, a] = g1
        jac[:, d, a] = table.hessian_vector_products_dense(v1)
        jac[:, d, b] = g1 @ self.minv
        return residual, jac

    def step(self, q0, p0, lam):
        """One step for all members: simplified Newton with the inverse Newton matrices kept
        across iterations and steps, rebuilt when the increments contract slower than 1/4
        (the members' Jacobians change little per step; the stacked inversion dominates)."""
        n, h = self.n, self.h
        x = np.concatenate([q0 + h * (p0 @ self.minv), p0, lam, np.zeros_like(lam)], axis=1)
        force = np.abs(self.model.potential_gradients(q0)).max(axis=1)
        q_scale = np.maximum(np.abs(q0).max(axis=1), 1e-300)
        p_scale = np.maximum(np.maximum(np.abs(p0).max(axis=1), h * force), 1e-300)
        previous = np.inf
        for iteration in range(1, self.max_iterations + 1):
            fresh = self.inverse is None
            residual, jac = self._system(q0, p0, x, jacobian=fresh)
            if fresh:
                try:
                    self.inverse = np.linalg.inv(jac)
                except np.linalg.LinAlgError as exc:
                    raise SolverError(f"ensemble EM: singular Newton matrix ({exc})",
                                      hint="singular configuration or redundant "
                                      "constraints") from exc
            delta = -np.matmul(self.inverse, residual[..., None])[..., 0]
            if not np.all(np.isfinite(delta)):
                raise SolverError("ensemble EM: non-finite Newton increment",
                                  hint="reduce the step size")
            x += delta
            increment = float(np.max(np.maximum(
                np.abs(delta[:, :n]).max(axis=1) / np.maximum(q_scale, np.abs(x[:, :n]).max(1)),
                np.abs(delta[:, n:2 * n]).max(axis=1)
                / np.maximum(p_scale, np.abs(x[:, n:2 * n]).max(1)))))
            if increment <= self.tolerance or (fresh and increment <= 1e-8
                                               and increment > 0.5 * previous):
                return x[:, :n], x[:, n:2 * n], x[:, 2 * n:2 * n + self.m], iteration
            if increment > 0.25 * previous:
                self.inverse = None
            previous = increment
        raise SolverError(f"ensemble EM: Newton did not converge in {self.max_iterations} "
                          f"iterations (relative increment {increment:.3e})",
                          hint="reduce the step size")
