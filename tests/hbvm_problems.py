"""The four test problems of seed 004 section 5, built through the public mbs API, with their
independent reference data (exact solutions and the paper's error measures, digest section 7).

Scaling between mbs and the paper: a ``Distance`` joint of unit length is
g_mbs = 1/2 (|d|^2 - 1) while the paper uses g = |d|^2 - 1 (63), (70), (77); hence
lambda_paper = lambda_mbs / 2 and the paper's hidden constraint grad g^T M^-1 p is twice the
model's G M^-1 p. The modified pendulum's user constraint is the paper's g itself (76).
"""

from __future__ import annotations

import numpy as np
from scipy.special import ellipj

import mbs

CONICAL_PERIOD = 2.0 ** 0.75 * np.pi  # (72)
CONICAL_OMEGA = 2.0 ** 0.25
CONICAL_LAMBDA = 2.0 ** -0.5  # (73), paper scaling


# -- problems ---------------------------------------------------------------------------------
def planar_pendulum() -> mbs.Model:
    """(62)-(64): H = |p|^2/2 + y, |q| = 1, q0 = (0, -1), p0 = (1, 0) (z = 0 stays 0)."""
    system = mbs.System(gravity=(0.0, -1.0, 0.0))
    bob = system.add(mbs.PointMass(mass=1.0, name="bob"))
    bob.set_state(position=(0.0, -1.0, 0.0), velocity=(1.0, 0.0, 0.0))
    system.add(mbs.joints.Distance(system.ground, bob, length=1.0, name="rod"))
    return system.compile()


def conical_pendulum() -> mbs.Model:
    """(69)-(71): H = |p|^2/2 + z, |q| = 1, q0 = (2^-1/2, 0, -2^-1/2), p0 = (0, 2^-1/4, 0)."""
    system = mbs.System(gravity=(0.0, 0.0, -1.0))
    bob = system.add(mbs.PointMass(mass=1.0, name="bob"))
    r = 2.0 ** -0.5
    bob.set_state(position=(r, 0.0, -r), velocity=(0.0, 2.0 ** -0.25, 0.0))
    system.add(mbs.joints.Distance(system.ground, bob, length=1.0, name="rod"))
    return system.compile()


def _modified_g(q):
    x, y, z = q
    return np.array([x**6 + y**4 + z**2 - 0.625])


def _modified_jacobian(q):
    x, y, z = q
    return np.array([[6.0 * x**5, 4.0 * y**3, 2.0 * z]])


def _modified_hessian(q, multipliers):
    x, y, _ = q
    return multipliers[0] * np.diag([30.0 * x**4, 12.0 * y**2, 2.0])


def modified_pendulum() -> mbs.Model:
    """(75)-(76): H = |p|^2/2 + z^4, g = x^6 + y^4 + z^2 - 0.625, data (71)."""
    system = mbs.System()
    bob = system.add(mbs.PointMass(mass=1.0, name="bob"))
    r = 2.0 ** -0.5
    bob.set_state(position=(r, 0.0, -r), velocity=(0.0, 2.0 ** -0.25, 0.0))
    system.add(mbs.joints.UserConstraint([bob], _modified_g, _modified_jacobian,
                                         _modified_hessian, name="surface"))
    system.add(mbs.forces.UserPotential(
        [mbs.forces.PointComponent(bob, (0.0, 0.0, 1.0))], energy=lambda pi: pi[0] ** 4,
        gradient=lambda pi: [4.0 * pi[0] ** 3], hessian=lambda pi: [[12.0 * pi[0] ** 2]],
        name="quartic"))
    return system.compile()


def tethered_satellites() -> mbs.Model:
    """(77)-(80) through examples/tethered_satellites.py."""
    import tethered_satellites

    return tethered_satellites.build().compile()


# -- exact solutions --------------------------------------------------------------------------
def pendulum_exact(t: np.ndarray):
    """Exact (q, p, lambda_paper) of (65)-(68): theta = 2 arcsin(sn(t | 1/4)/2),
    theta' = cn(t | 1/4), lambda = (theta'^2 + cos theta)/2."""
    sn, cn, _, _ = ellipj(np.asarray(t, dtype=float), 0.25)
    theta, rate = 2.0 * np.arcsin(0.5 * sn), cn
    zero = np.zeros_like(theta)
    q = np.stack([np.sin(theta), -np.cos(theta), zero], axis=-1)
    p = np.stack([np.cos(theta) * rate, np.sin(theta) * rate, zero], axis=-1)
    return q, p, 0.5 * (rate**2 + np.cos(theta))


def conical_exact(t: float):
    """Exact circular motion (72): q = (r cos wt, r sin wt, -r), r = 2^-1/2, w = 2^1/4."""
    r, w = 2.0 ** -0.5, CONICAL_OMEGA
    q = np.array([r * np.cos(w * t), r * np.sin(w * t), -r])
    p = np.array([-r * w * np.sin(w * t), r * w * np.cos(w * t), 0.0])
    return q, p


# -- runs and error measures (digest section 7) -----------------------------------------------
def run(model: mbs.Model, k: int, s: int, h: float, t_end: float, **options) -> mbs.Solution:
    return mbs.simulate(model, mbs.solvers.HBVM(k=k, s=s, **options), h=h, t_end=t_end)


def hidden(model: mbs.Model, sol: mbs.Solution) -> np.ndarray:
    """Model hidden constraint G(q_n) M^-1 p_n at every node, (N+1, m)."""
    return np.array([model.velocity_constraints(q, p) for q, p in zip(sol.q, sol.p)])


def energy_and_constraint_errors(model: mbs.Model, sol: mbs.Solution) -> tuple[float, float]:
    """max_n |H_n - H_0| and max_n max_i |g_i(q_n)| (model scaling)."""
    energy = sol.energy()
    g = np.array([model.constraints(q) for q in sol.q])
    return float(np.max(np.abs(energy - energy[0]))), float(np.max(np.abs(g)))


def coarse_grid_differences(fine: mbs.Solution, coarse: mbs.Solution, spacing: float,
                            lam_factor: float = 1.0) -> tuple[float, float]:
    """Tables 3-4: max over t = j * spacing of ||y_h - y_{h/2}||_inf and of
    ||lambda_h - lambda_{h/2}||_inf, lambda_h(t) the multiplier of the step starting at t."""
    h = coarse.stats["h"]
    every = int(round(spacing / h))
    idx_c = np.arange(0, coarse.t.size, every)
    idx_f = 2 * idx_c
    y_c = np.hstack([coarse.q[idx_c], coarse.p[idx_c]])
    y_f = np.hstack([fine.q[idx_f], fine.p[idx_f]])
    e_s = float(np.max(np.abs(y_c - y_f)))
    steps = idx_c[idx_c < coarse.multipliers.shape[0]]
    e_lam = float(np.max(np.abs(coarse.multipliers[steps] - fine.multipliers[2 * steps])))
    return e_s, lam_factor * e_lam


def rates(errors, ratio: float = 2.0) -> np.ndarray:
    """Observed orders log(e_{n-1}/e_n)/log(ratio)."""
    errors = np.asarray(errors, dtype=float)
    return np.log(errors[:-1] / errors[1:]) / np.log(ratio)
