"""Andrews' squeezing mechanism (examples/andrews_squeezer.py) against the published solution.

Reference: the seven angles at t = 0.03 s of problem "andrews" of the IVP test set (Mazzia &
Magherini, University of Bari, release 2.4, 2008), the benchmark of Hairer & Wanner, Solving
ODEs II, section VII.7.

Tolerances come from error estimates, not from the observed errors alone:

* "em" is of order 2: with runs at h and h/2 the error of the h/2 run is estimated by
  Richardson's (a(h/2) - a(h)) / 3; the distance to the reference must be that estimate (up to
  a 25 % margin for the higher-order terms), and the extrapolated value must be far closer.
* "lobatto" with 4 stages is of order 6: (a(h/2) - a(h)) / 63 puts its error at h = 4e-5 at
  ~1e-12, so its distance to the reference measures the accuracy of the published values
  themselves (observed 1.2e-9 rad on beta = 15.8 rad, i.e. 8e-11 relative, confirmed by the
  extrapolated "em" runs); it must stay below 3e-10 relative.
"""

from __future__ import annotations

import numpy as np
import pytest

import mbs
from mbs.gallery import examples_dir, load_module

EXAMPLE = load_module(examples_dir() / "andrews_squeezer.py")
REFERENCE = np.array(EXAMPLE.REFERENCE_ANGLES)
T_END = EXAMPLE.REFERENCE_TIME
H_EM = 4e-5  # the "em" runs use H_EM and H_EM / 2 (750 and 1500 steps, ~4 s together)
H_LOBATTO = 8e-5  # 4-stage Lobatto at H_LOBATTO (~6 s), and H_LOBATTO / 2 in a slow test


def compile_model() -> mbs.Model:
    """The example's model; compile() removes the 9 redundant out-of-plane equations of the
    three planar loops (built from 3-D revolute joints) with a warning."""
    with pytest.warns(UserWarning, match="redundant constraints removed"):
        return EXAMPLE.build().compile()


def final_angles(solution: mbs.Solution) -> np.ndarray:
    assert solution.stats["completed"] and solution.t[-1] == pytest.approx(T_END, abs=1e-14)
    return EXAMPLE.angles(solution)[-1]


@pytest.fixture(scope="module")
def model() -> mbs.Model:
    return compile_model()


@pytest.fixture(scope="module")
def em_runs(model) -> dict[float, mbs.Solution]:
    return {h: mbs.simulate(model, "em", h=h, t_end=T_END) for h in (H_EM, H_EM / 2)}


def test_published_initial_angles_close_the_loops():
    assert np.max(np.abs(EXAMPLE.loop_residuals())) < 1e-16
    assert np.allclose(EXAMPLE.relative_angles(EXAMPLE.absolute_angles(EXAMPLE.INITIAL_ANGLES)),
                       EXAMPLE.INITIAL_ANGLES, rtol=0.0, atol=1e-16)


def test_model_has_one_degree_of_freedom_and_a_consistent_initial_state():
    model = compile_model()
    assert model.n == 7 * 12
    assert model.degrees_of_freedom == 1
    # 3 loops x 3 out-of-plane equations, all satisfied by the planar initial state
    assert sum(r.count for r in model.redundancies) == 9
    assert all(r.consistent for r in model.redundancies)
    q0, p0 = model.initial_state()  # no projection: the published angles are consistent
    assert model.is_consistent(q0, p0)
    g, gv = model.initial_residuals()
    assert g < 1e-14 and gv == 0.0  # released from rest
    projected, _ = model.initial_state(project=True)
    assert np.max(np.abs(projected - q0)) < 1e-14


def test_em_reproduces_the_reference_solution(em_runs):
    coarse, fine = (final_angles(em_runs[h]) for h in (H_EM, H_EM / 2))
    assert np.allclose(EXAMPLE.angles(em_runs[H_EM / 2])[0], EXAMPLE.INITIAL_ANGLES,
                       rtol=0.0, atol=1e-13)
    estimate = (fine - coarse) / 3.0  # Richardson: error of the fine run, order 2
    error = fine - REFERENCE
    assert np.max(np.abs(estimate)) < 1e-3  # the tolerance below is not vacuous
    assert np.all(np.abs(error) <= 1.25 * np.abs(estimate) + 1e-8), (error, estimate)
    # the leading error term is removed by extrapolation (observed: 4e-4 of the estimate)
    extrapolated = fine + estimate
    assert np.all(np.abs(extrapolated - REFERENCE) <= 0.05 * np.abs(estimate) + 1e-8)
    # second order: halving h divides the distance to the reference by 4
    ratio = np.abs(coarse - REFERENCE) / np.abs(error)
    assert np.all((ratio > 3.8) & (ratio < 4.2)), ratio


def test_em_energy_balance_is_exact(em_runs):
    for solution in em_runs.values():
        energy, work = solution.energy(), solution.work
        scale = max(float(np.max(np.abs(energy))), float(np.max(np.abs(work))))
        assert np.max(np.abs(solution.energy_balance())) <= 1e-10 * scale
        # the motor did work: 0.033 N m over ~2.5 crank turns
        assert work[-1] == pytest.approx(EXAMPLE.mom * (final_angles(solution)[0]
                                                        - EXAMPLE.INITIAL_ANGLES[0]), rel=1e-3)


def test_em_motion_stays_planar(em_runs):
    solution = em_runs[H_EM / 2]
    for name in EXAMPLE.BODY_NAMES:
        body = solution.body(name)
        assert np.max(np.abs(body.position[:, 2])) < 1e-12
        assert np.max(np.abs(body.rotation[:, :, 2] - [0.0, 0.0, 1.0])) < 1e-12
    assert np.max(solution.constraint_residuals()["position"]) < 1e-12


def reference_tolerance() -> np.ndarray:
    """The accuracy of the published values, 3e-10 relative (see the module docstring)."""
    return 3e-10 * np.maximum(np.abs(REFERENCE), 1.0)


@pytest.fixture(scope="module")
def lobatto_coarse(model) -> np.ndarray:
    return final_angles(mbs.simulate(model, "lobatto", h=H_LOBATTO, t_end=T_END, stages=4))


def test_lobatto_order_six_matches_the_reference(lobatto_coarse):
    # its own error is 4e-10 on beta (the slow test below estimates it), 1e-11 on the others
    assert np.all(np.abs(lobatto_coarse - REFERENCE) <= reference_tolerance())


@pytest.mark.slow
def test_lobatto_error_estimate(model, lobatto_coarse):
    fine = final_angles(mbs.simulate(model, "lobatto", h=H_LOBATTO / 2, t_end=T_END,
                                     stages=4))
    estimate = np.abs(fine - lobatto_coarse) / 63.0  # error of the fine run, order 6
    assert np.max(estimate) < 1e-10
    assert np.all(np.abs(fine - REFERENCE) <= 2.0 * estimate + reference_tolerance())


@pytest.mark.slow
def test_em_converges_with_order_two(model, em_runs):
    steps = [H_EM, H_EM / 2, H_EM / 4, H_EM / 8]
    runs = {**em_runs, **{h: mbs.simulate(model, "em", h=h, t_end=T_END) for h in steps[2:]}}
    errors = np.array([np.max(np.abs(final_angles(runs[h]) - REFERENCE)) for h in steps])
    orders = np.log2(errors[:-1] / errors[1:])
    assert np.all(np.abs(orders - 2.0) < 0.02), orders
    extrapolated = final_angles(runs[steps[-1]]) + (final_angles(runs[steps[-1]])
                                                    - final_angles(runs[steps[-2]])) / 3.0
    assert np.max(np.abs(extrapolated - REFERENCE)) < 5e-9
