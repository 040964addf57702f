"""Simplified Newton (Jacobian reused across iterations and steps) solves the same equations."""

from __future__ import annotations

import numpy as np
import pytest

import mbs
from benchmarks.chain_compile import build_chain
from mbs.solvers import GGLVI, EnergyMomentum, NewtonOptions


@pytest.fixture(scope="module")
def chain():
    system = build_chain(6)
    system["link0"].set_state(angular_velocity=(0.0, 0.0, 2.0))
    system["link0"].set_state(velocity=(0.0, 0.5, 0.0))
    with pytest.warns(UserWarning):
        model = system.compile()
    return model


@pytest.mark.filterwarnings("ignore:initial state projected")
@pytest.mark.parametrize("make", [EnergyMomentum, lambda **kw: GGLVI(variant="A", **kw)],
                         ids=["em", "ggl-vi-a"])
def test_simplified_and_exact_newton_agree(chain, make):
    exact = make(newton=NewtonOptions(simplified=False))
    simplified = make(newton=NewtonOptions(simplified=True))
    a = mbs.simulate(chain, exact, h=0.005, t_end=0.25, project=True)
    b = mbs.simulate(chain, simplified, h=0.005, t_end=0.25, project=True)
    np.testing.assert_allclose(b.q, a.q, atol=1e-10)
    assert simplified.newton_factorizations < exact.newton_factorizations / 3
    if make is EnergyMomentum:
        energy = b.energy()
        scale = np.max(b.kinetic_energy())
        assert np.max(np.abs(energy - energy[0])) <= 1e-12 * scale


def test_default_is_simplified_only_for_larger_models(chain):
    import heavy_top

    small = EnergyMomentum()
    small.start(heavy_top.build().compile(), *heavy_top.build().compile().initial_state(), 0.01)
    large = EnergyMomentum()
    large.start(chain, chain.q0, chain.p0, 0.01)
    assert not small.uses_simplified_newton and large.uses_simplified_newton


@pytest.mark.filterwarnings("ignore:initial state projected")
@pytest.mark.parametrize("backend", ["auto", "compiled"])
def test_simplified_newton_keeps_the_energy_at_roundoff(chain, backend):
    """A Jacobian kept from earlier steps contracts linearly: stopping at the increment
    tolerance would leave a same-signed error of ~1e-13 per step, which the energy of EM
    sums up (about 5e-15 of the kinetic energy per step here, 5e-12 over 1000 steps). The
    iterate is taken to round-off instead, so the energy error stays a random walk of
    round-off: ~sqrt(1000) x 1e-15 < 2e-13."""
    if backend == "compiled":
        pytest.importorskip("numba")
    solver = EnergyMomentum(backend=backend)
    solution = mbs.simulate(chain, solver, h=0.001, t_end=1.0, project=True)
    assert solver.uses_simplified_newton
    energy = solution.energy()
    scale = np.max(solution.kinetic_energy())
    assert np.max(np.abs(energy - energy[0])) <= 2e-13 * scale


@pytest.mark.parametrize("backend", ["auto", "compiled"])
def test_simplified_newton_on_a_slowly_contracting_model_equals_exact_newton(backend):
    """The flyball governor (n = 72: simplified Newton by default) at its recommended step:
    its spindle, light about its axis, carries the motor's torque to the arms, and a
    Jacobian kept from an earlier iterate contracts slowly from the explicit guess during
    the spin-up. Every step is solved at full size, not cut into sub-steps, and the run
    equals the exact-Newton run to round-off (both converge each step to the 1e-12
    tolerance)."""
    if backend == "compiled":
        pytest.importorskip("numba")
    import flyball_governor

    model = flyball_governor.build().compile()
    solver = EnergyMomentum(backend=backend)
    run = mbs.simulate(model, solver, h=0.01, t_end=0.6)
    exact = mbs.simulate(model, EnergyMomentum(newton=NewtonOptions(simplified=False)),
                         h=0.01, t_end=0.6)
    assert solver.uses_simplified_newton
    assert run.stats["refined_steps"] == [] and exact.stats["refined_steps"] == []
    np.testing.assert_allclose(run.q, exact.q, rtol=0, atol=1e-12)
    np.testing.assert_allclose(run.p, exact.p, rtol=0, atol=1e-12 * np.abs(exact.p).max())


@pytest.mark.parametrize("backend", ["auto", "compiled"])
def test_a_jacobian_too_slow_to_finish_is_rebuilt_before_the_iterations_run_out(backend):
    """In the governor's spin-up a kept Jacobian contracts by theta ~ 0.1 per iteration:
    from an increment of 1e-5 it would need some 13 more iterations to reach an iterate
    exact to round-off, more than the 12 allowed. The iteration rebuilds the Jacobian as
    soon as its contraction shows that, so no step runs out of iterations and is solved a
    second time: every step takes at most ``max_iterations`` in all."""
    if backend == "compiled":
        pytest.importorskip("numba")
    import flyball_governor

    model = flyball_governor.build().compile()
    solver = EnergyMomentum(backend=backend)
    run = mbs.simulate(model, solver, h=0.01, t_end=0.6)
    assert solver.uses_simplified_newton
    assert run.stats["newton_iterations"].max() <= solver.newton.max_iterations
