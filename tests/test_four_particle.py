"""Four-particle system of seed 003, section 6.3 (acceptance item 3 of the solver issue).

Truths used: the first integrals of a free system with rotation- and translation-invariant springs
and distance constraints (energy, linear momentum (118), angular momentum (121)); the hidden
constraint G M^-1 p = 0 that EM enforces at step ends; and, for the convergence orders, an EM
reference run with h = 1e-5 as in the paper's eq. (128). Orders are fitted log-log slopes.
"""

from __future__ import annotations

import numpy as np
import pytest
from four_particle import END_TIME, STEP, build

import mbs

# Convergence study: error at t = 0.1 against EM with h = 1e-5 (10^4 steps, ~10 s).
CONVERGENCE_TIME = 0.1
REFERENCE_STEP = 1e-5
STEPS = (0.01, 0.005, 0.0025, 0.00125, 0.000625)
P4 = slice(9, 12)  # coordinates of particle 4


@pytest.fixture(scope="module")
def model() -> mbs.Model:
    return build().compile()


@pytest.fixture(scope="module")
def em_run(model) -> mbs.Solution:
    """EM with the paper's h = 0.01 over T = 10."""
    return mbs.simulate(model, "em", h=STEP, t_end=END_TIME)


@pytest.fixture(scope="module")
def reference(model) -> mbs.Solution:
    return mbs.simulate(model, "em", h=REFERENCE_STEP, t_end=CONVERGENCE_TIME)


def relative_drift(values: np.ndarray) -> float:
    """max_n |X_n - X_0| / |X_0| for a scalar or vector series."""
    values = np.asarray(values, dtype=float).reshape(len(values), -1)
    return float(np.max(np.linalg.norm(values - values[0], axis=1))
                 / np.linalg.norm(values[0]))


def slope(steps, errors) -> float:
    return float(np.polyfit(np.log(steps), np.log(errors), 1)[0])


def test_model_size(model):
    """n = 12 coordinates, m = 2 constraints, 10 degrees of freedom (seed 003, after (117))."""
    assert (model.n, model.m, model.degrees_of_freedom) == (12, 2, 10)


def test_initial_invariants_from_the_data(model):
    """Energy, L and J of (127) computed by hand: only particle 4 moves, springs unstretched."""
    q0, p0 = model.initial_state()
    p4 = 1.7 * np.array([0.0, 0.0, 2.0 / 1.7])
    assert model.energy(q0, p0) == pytest.approx(0.5 * p4 @ p4 / 1.7, rel=1e-15)
    np.testing.assert_allclose(model.linear_momentum(p0), p4, atol=1e-15)
    np.testing.assert_allclose(model.angular_momentum(q0, p0),
                               np.cross([1.0, 1.0, 0.0], p4), atol=1e-15)


def test_em_conserves_energy_and_momenta(em_run):
    sol = em_run
    assert sol.stats["completed"] and sol.t[-1] == pytest.approx(END_TIME)
    assert relative_drift(sol.energy()) <= 1e-12
    assert relative_drift(sol.linear_momentum()) <= 1e-12
    assert relative_drift(sol.angular_momentum()) <= 1e-12


def test_em_constraints_at_step_ends(em_run):
    res = em_run.constraint_residuals()
    assert np.max(res["position"]) <= 1e-10
    assert np.max(res["velocity"]) <= 1e-10
    assert np.max(res["enforced_velocity"]) <= 1e-10


def test_em_is_not_trivially_static(em_run):
    """Guards the conservation tests: the particles move far and the springs do work."""
    assert np.max(np.abs(em_run.q - em_run.q[0])) > 0.5
    assert np.max(em_run.potential_energy()) > 1e-3 * em_run.energy()[0]


def test_em_convergence_orders(model, reference):
    """Order 2 in q (eq. (128): relative error of q4) and p, order 1 in lambda at t = 0.1."""
    q4_ref = reference.q[-1, P4]
    p_ref = reference.p[-1]
    lam_ref = reference.multipliers[-1]  # multiplier of the step ending at t = 0.1
    errors = []
    for h in STEPS:
        sol = mbs.simulate(model, "em", h=h, t_end=CONVERGENCE_TIME)
        assert sol.t[-1] == pytest.approx(CONVERGENCE_TIME)
        errors.append((np.linalg.norm(sol.q[-1, P4] - q4_ref) / np.linalg.norm(q4_ref),
                       np.linalg.norm(sol.p[-1] - p_ref) / np.linalg.norm(p_ref),
                       np.linalg.norm(sol.multipliers[-1] - lam_ref) / np.linalg.norm(lam_ref)))
    errors = np.array(errors)
    # the reference must be far more accurate than the finest run it judges
    assert errors[-1, 0] > 1e3 * errors[0, 0] * (REFERENCE_STEP / STEPS[0]) ** 2
    assert slope(STEPS, errors[:, 0]) == pytest.approx(2.0, abs=0.15)
    assert slope(STEPS, errors[:, 1]) == pytest.approx(2.0, abs=0.15)
    assert slope(STEPS, errors[:, 2]) == pytest.approx(1.0, abs=0.15)


@pytest.mark.parametrize("solver", ["ggl-vi-s", "ggl-vi-a", "ggl-vi-b", "rattle"])
def test_other_schemes_conserve_momenta(model, solver):
    """All schemes are momentum conserving for this symmetric system (seed 003, App. A.6, A.7)."""
    sol = mbs.simulate(model, solver, h=STEP, t_end=END_TIME)
    assert sol.stats["completed"]
    assert relative_drift(sol.linear_momentum()) <= 1e-12
    assert relative_drift(sol.angular_momentum()) <= 1e-12
    # stable at h = 0.01 (seed 003, Fig. 31): energy error bounded and small
    assert relative_drift(sol.energy()) <= 1e-2
