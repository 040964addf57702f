"""Heavy top of seed 003 section 6.2 against the exact steady precession.

Exact motion: R(t) = R_z(w_p t) R0 R_z(w_s t), phi = l d3, director rates omega x d_i with
omega = w_p e3 + w_s d3 (the spin rate from (112) makes this an exact solution).
"""

from __future__ import annotations

import heavy_top as ht
import numpy as np
import pytest

import mbs

ALL = ("em", "ggl-vi-s", "ggl-vi-a", "ggl-vi-b", "rattle")


@pytest.fixture(scope="module")
def model():
    return ht.build().compile()


def exact_state(model, t: float) -> tuple[np.ndarray, np.ndarray]:
    rotation = (mbs.rotation_about_z(ht.PRECESSION_RATE * t)
                @ mbs.rotation_about_x(ht.NUTATION) @ mbs.rotation_about_z(ht.spin_rate() * t))
    q = np.concatenate([ht.LENGTH * rotation[:, 2], rotation.T.ravel()])
    omega = ht.PRECESSION_RATE * np.array([0.0, 0.0, 1.0]) + ht.spin_rate() * rotation[:, 2]
    v = np.cross(omega, q.reshape(4, 3)).ravel()
    return q, model.mass_matrix @ v


def errors(model, scheme: str, steps: list[float], t_end: float):
    q_exact, p_exact = exact_state(model, t_end)
    eq, ep = [], []
    for h in steps:
        sol = mbs.simulate(model, scheme, h=h, t_end=t_end)
        eq.append(np.max(np.abs(sol.q[-1] - q_exact)) / np.max(np.abs(q_exact)))
        ep.append(np.max(np.abs(sol.p[-1] - p_exact)) / np.max(np.abs(p_exact)))
    return np.array(eq), np.array(ep)


def slope(steps, errs) -> float:
    return float(np.polyfit(np.log(steps), np.log(errs), 1)[0])


STEPS = [2.5e-4, 1.25e-4, 6.25e-5, 3.125e-5]
T_ORDER = 0.01


@pytest.mark.parametrize("scheme", ("em", "ggl-vi-a", "rattle"))
def test_second_order_schemes(model, scheme):
    eq, ep = errors(model, scheme, STEPS, T_ORDER)
    assert slope(STEPS, eq) == pytest.approx(2.0, abs=0.15)
    assert slope(STEPS, ep) == pytest.approx(2.0, abs=0.15)


#: Steps down to where the first-order term of q shows (see test_first_order_schemes)
FIRST_ORDER_STEPS = [2.5e-4 / 2**k for k in range(6)]
T_FIRST_ORDER = 0.1


@pytest.mark.parametrize("scheme", ("ggl-vi-s", "ggl-vi-b"))
def test_first_order_schemes(model, scheme):
    """VI-S and VI-B are first order (seed 003): the momenta at every h here, the
    coordinates only below h ~ 3e-5. Their error is a h + b h^2 with the second-order
    phase error of the 136 rad/s spin far larger per unit, so the observed order of q falls
    from 2 towards 1 as h shrinks (measured 1.9 -> 1.3 for VI-S and 2.0 -> 1.0 for VI-B over
    these steps); a test on larger steps alone would see order 2."""
    eq, ep = errors(model, scheme, FIRST_ORDER_STEPS, T_FIRST_ORDER)
    assert slope(FIRST_ORDER_STEPS, ep) == pytest.approx(1.0, abs=0.1)
    observed = np.log2(eq[:-1] / eq[1:])
    assert observed[0] > 1.7
    assert observed[-1] < 1.5


def test_em_energy_round_off_h_0002_t_2(model):
    sol = mbs.simulate(model, "em", h=0.002, t_end=2.0)
    energy = sol.energy()
    assert np.max(np.abs(energy - energy[0])) / abs(energy[0]) <= 1e-12
    res = sol.constraint_residuals()
    assert np.max(res["position"]) <= 1e-12
    assert np.max(res["velocity"]) <= 1e-10


@pytest.mark.parametrize("scheme", ALL)
def test_vertical_angular_momentum(model, scheme):
    sol = mbs.simulate(model, scheme, h=0.002, t_end=0.4)
    j3 = sol.angular_momentum()[:, 2]
    assert np.max(np.abs(j3 - j3[0])) <= 1e-12 * np.max(np.abs(sol.angular_momentum()))


def test_vi_s_violates_velocity_constraint_at_step_end_but_not_at_q_bar(model):
    """Seed digest: G(q^{n+1}) M^-1 p^{n+1} is only O(h^2) for the first-order VI, while the
    velocity constraint at q_bar = q^n + h v^n holds exactly."""
    maxima = []
    for h in (2e-3, 1e-3):
        sol = mbs.simulate(model, "ggl-vi-s", h=h, t_end=0.1)
        res = sol.constraint_residuals()
        q_bar = sol.q[:-1] + h * sol.scheme_velocities
        at_bar = [model.velocity_constraints(qb, p) for qb, p in zip(q_bar, sol.p[1:])]
        assert np.max(np.abs(at_bar)) <= 1e-10
        assert np.max(res["position"]) <= 1e-12
        maxima.append(np.max(res["velocity"]))
    assert maxima[0] > 1e-3
    assert maxima[0] / maxima[1] == pytest.approx(4.0, rel=0.25)


def test_em_matches_exact_precession_height(model):
    sol = mbs.simulate(model, "em", h=1e-4, t_end=0.05)
    height = sol.body("top").position[:, 2]
    assert np.max(np.abs(height - 0.0375)) / 0.0375 <= 1e-4
