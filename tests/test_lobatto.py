"""Constrained Lobatto IIIA-IIIB (Method A in R^n): the spherical pendulum of Sato Martín de
Almagro with the parameters of the reproduction (m = alpha = 1, unit radius, x(0) =
(sqrt(3)/2, 0, 1/2), v(0) = (0, -1/3, 0); M = I, V = x_3, g = (|x|^2 - 1)/2)."""

from __future__ import annotations

import numpy as np
import pytest
from mechanisms import assert_stream_resume_and_ensemble_repeat_the_run, spherical_pendulum

import mbs
from mbs.backends import compiled
from mbs.solvers import Lobatto, LobattoTableau, Rattle


@pytest.fixture(scope="module")
def pendulum() -> mbs.Model:
    return spherical_pendulum().compile()


@pytest.mark.parametrize("stages", [2, 3, 4, 5, 6, 8, 10])
def test_tableau_is_lobatto_iiia_with_its_iiib_partner(stages):
    """C(s) for IIIA (sum_j a_ij c_j^(k-1) = c_i^k / k), quadrature of order 2s - 2, the
    stiffly accurate Lobatto structure (first row zero, last row b), and the symplecticity
    condition b_i a_hat_ij + b_j a_ji = b_i b_j of the partitioned pair."""
    tableau = LobattoTableau.with_stages(stages)
    a, b, a_hat = tableau.a, tableau.b, tableau.a_hat
    c = a.sum(axis=1)
    # the coefficients are sums of ~s terms of size <= 1: s units of round-off
    roundoff = 2.0 * stages * np.finfo(float).eps
    for k in range(1, stages + 1):
        np.testing.assert_allclose(a @ c ** (k - 1), c**k / k, atol=roundoff)
    for k in range(1, 2 * stages - 1):
        assert b @ c ** (k - 1) == pytest.approx(1.0 / k, abs=roundoff)
    np.testing.assert_array_equal(a[0], 0.0)
    np.testing.assert_allclose(a[-1], b, atol=1e-16)
    np.testing.assert_allclose(b[:, None] * a_hat + (b[:, None] * a).T, np.outer(b, b),
                               atol=roundoff)


def test_two_stages_are_rattle(pendulum):
    """Digest check 4: s = 2 against the independent RATTLE of mbs, 100 steps at h = 0.1."""
    lobatto = mbs.simulate(pendulum, Lobatto(stages=2), h=0.1, t_end=10.0)
    rattle = mbs.simulate(pendulum, Rattle(), h=0.1, t_end=10.0)
    assert np.abs(lobatto.q - rattle.q).max() <= 1e-12
    assert np.abs(lobatto.p - rattle.p).max() <= 1e-12 * np.abs(rattle.p).max()


@pytest.mark.parametrize("stages, order", [(2, 2), (3, 4), (4, 6)])
def test_orders_and_stage_constraints_on_the_spherical_pendulum(pendulum, stages, order):
    """Digest checks 1 and 2: at T = 2 with 10 .. 80 steps the fitted slope of the max error
    in (q, p) at T is 2s - 2 within 0.1 (reference: s = 4 with 800 steps, whose error is
    below 1e-13); g at every stage, and G M^-1 p at the step ends, are at round-off."""
    reference = mbs.simulate(pendulum, Lobatto(stages=4), h=2.0 / 800, t_end=2.0)
    steps = np.array([10, 20, 40, 80])
    errors = []
    for count in steps:
        solution = mbs.simulate(pendulum, Lobatto(stages=stages), h=2.0 / count, t_end=2.0)
        errors.append(max(np.abs(solution.q[-1] - reference.q[-1]).max(),
                          np.abs(solution.p[-1] - reference.p[-1]).max()))
        assert solution.enforced_residuals.max() <= 1e-12
        residuals = solution.constraint_residuals()
        assert residuals["position"].max() <= 1e-12 and residuals["velocity"].max() <= 1e-12
    slope = -np.polyfit(np.log(steps), np.log(errors), 1)[0]
    assert slope == pytest.approx(order, abs=0.1)


@pytest.mark.parametrize("stages, steps, order, slack",
                         [(5, (5, 10, 20), 8, 0.1), (6, (3, 5, 8), 10, 0.4)])
def test_more_stages_reach_order_2s_minus_2(pendulum, stages, steps, order, slack):
    """Tableaux beyond the closed forms (collocation on the Lobatto nodes): slope 2s - 2 on the
    spherical pendulum at T = 2 against s = 7 with 400 steps (agreeing with 200 steps to
    3e-15). Few steps keep the errors above round-off (s = 6 reaches 4e-15 at 16 steps),
    so s = 6 is measured at steps of 0.25 .. 0.67, where its slope still rises (9.7): the
    slack allows for that."""
    reference = mbs.simulate(pendulum, Lobatto(stages=7), h=2.0 / 400, t_end=2.0)
    errors = []
    for count in steps:
        solution = mbs.simulate(pendulum, Lobatto(stages=stages), h=2.0 / count, t_end=2.0)
        errors.append(max(np.abs(solution.q[-1] - reference.q[-1]).max(),
                          np.abs(solution.p[-1] - reference.p[-1]).max()))
        residuals = solution.constraint_residuals()
        assert residuals["position"].max() <= 1e-12 and residuals["velocity"].max() <= 1e-12
    slope = -np.polyfit(np.log(steps), np.log(errors), 1)[0]
    assert order - slack <= slope <= order + 0.1


@pytest.mark.slow
@pytest.mark.parametrize("stages, band", [(2, 6.86e-3), (3, 1.39e-6), (4, 9.73e-10)])
def test_energy_stays_in_its_band_without_drift(pendulum, stages, band):
    """Digest check 3: at h = 0.1 over T = 1000 the energy error oscillates in a band of the
    reproduced size (within 30 %), and over t in [900, 1000] it is no larger than 1.2 x its
    value over [0, 100] (a symplectic scheme: no drift)."""
    solver = Lobatto(stages=stages, backend="compiled" if compiled.available() else "auto")
    solution = mbs.simulate(pendulum, solver, h=0.1, t_end=1000.0)
    error = np.abs(solution.energy() - solution.energy()[0])
    tenth = error.size // 10
    assert error.max() == pytest.approx(band, rel=0.3)
    assert error[-tenth:].max() <= 1.2 * error[:tenth].max()


def test_heavy_top_conserves_momentum_and_constraints():
    """Rigid body in director coordinates (9 constraints): vertical angular momentum exact,
    constraints at every step end at round-off, energy within the order-4 band."""
    import heavy_top

    model = heavy_top.build().compile()
    solution = mbs.simulate(model, "lobatto", stages=3, h=2e-3, t_end=0.1)
    vertical = solution.angular_momentum()[:, 2]
    assert np.abs(vertical - vertical[0]).max() <= 1e-13 * np.abs(vertical).max()
    assert solution.constraint_residuals()["position"].max() <= 1e-13
    energy = solution.energy()
    assert np.abs(energy - energy[0]).max() <= 1e-9 * abs(energy[0])


def test_bad_stage_counts_are_rejected():
    for stages in (1, 11, 2.5, True, "4"):
        with pytest.raises(mbs.ModelError, match="stages"):
            Lobatto(stages=stages)


def test_resume_and_ensembles_reproduce_the_single_run(tmp_path):
    """The driver's features work with the scheme unchanged: a run streamed, stopped and
    resumed, and an ensemble member, are bitwise the uninterrupted single run."""
    import heavy_top

    assert_stream_resume_and_ensemble_repeat_the_run(heavy_top.build().compile(), "lobatto",
                                                     {"stages": 3}, 2e-3, 20, tmp_path)


def test_user_constraint_through_the_model_evaluation():
    """A non-quadratic user constraint (x^6 + y^4 + z^2 = 0.625, seed 004's modified
    pendulum) has no tensor form: the same equations run through the model. Fourth order
    for s = 3 (h = 1/16 .. 1/64) against an s = 4 run at h = 1/256, whose sixth-order error
    is far below the measured ones (1e-7 .. 4e-10), and the constraint at round-off at every
    step end."""
    from hbvm_problems import modified_pendulum

    model = modified_pendulum()
    reference = mbs.simulate(model, Lobatto(stages=4), h=1 / 256, t_end=1.0)
    errors = []
    for steps in (16, 32, 64):
        solver = Lobatto(stages=3)
        run = mbs.simulate(model, solver, h=1.0 / steps, t_end=1.0)
        assert solver.active_backend == "assembled"
        assert np.max(run.enforced_residuals[:, 0]) <= 1e-14
        errors.append(np.abs(run.q[-1] - reference.q[-1]).max())
    orders = np.log2(np.array(errors[:-1]) / np.array(errors[1:]))
    np.testing.assert_allclose(orders, 4.0, atol=0.1)


#: (model, stages): T, step counts (errors from 3e-4 down to 3e-11, asymptotic and far above
#: the reference's), reference step count
ORDER_CASES = {
    ("heavy_top", 3): (0.2, [100, 200, 400, 800], 4000),
    ("heavy_top", 4): (0.2, [50, 100, 200, 400], 4000),
    ("double_pendulum", 3): (0.5, [50, 100, 200, 400], 4000),
    ("double_pendulum", 4): (0.5, [50, 100, 200], 4000),
}


@pytest.mark.parametrize("name, stages", sorted(ORDER_CASES))
def test_orders_on_the_heavy_top_and_the_double_pendulum(name, stages):
    """Fitted log-log slopes of the error at T in q and in p: 4 +- 0.2 (s = 3) and 6 +- 0.3
    (s = 4) on the heavy top (spin 136 rad/s) and the double pendulum on revolute joints.
    Reference: the sixth-order composition of EM (another scheme) with 4000 steps, whose error
    ~(L h)^6 with L h <= 0.007 is below 1e-15."""
    import double_pendulum
    import heavy_top

    model = {"heavy_top": heavy_top, "double_pendulum": double_pendulum}[name].build().compile()
    t_end, steps, reference_steps = ORDER_CASES[name, stages]
    backend = "compiled" if compiled.available() else "auto"
    reference = mbs.simulate(model, "em", order=6, h=t_end / reference_steps, t_end=t_end,
                             backend=backend)
    errors_q, errors_p = [], []
    for count in steps:
        run = mbs.simulate(model, Lobatto(stages=stages, backend=backend), h=t_end / count,
                           t_end=t_end)
        errors_q.append(np.abs(run.q[-1] - reference.q[-1]).max())
        errors_p.append(np.abs(run.p[-1] - reference.p[-1]).max())
    order, tolerance = 2 * stages - 2, 0.2 if stages == 3 else 0.3
    for errors in (errors_q, errors_p):
        slope = -np.polyfit(np.log(steps), np.log(errors), 1)[0]
        assert slope == pytest.approx(order, abs=tolerance)


@pytest.mark.skipif(not compiled.available(), reason="needs numba")
def test_whole_steps_in_the_compiled_kernel(tmp_path):
    """With a potential linear in q, the compiled backend runs whole steps (guess, Newton,
    outputs) in the kernel: the states agree with the numpy path to the Newton tolerance
    (1e-12 relative per step, 100 steps of the heavy top), and blocks of steps, single
    steps (a streamed run), a resumed run and an ensemble member give the same bits."""
    import heavy_top

    model = heavy_top.build().compile()
    solver = Lobatto(stages=4, backend="compiled")
    kernel = mbs.simulate(model, solver, h=2e-3, t_end=0.2)
    assert solver.active_backend == "compiled" and solver.batch_capable
    numpy_path = mbs.simulate(model, "lobatto", stages=4, h=2e-3, t_end=0.2)
    assert np.abs(kernel.q - numpy_path.q).max() <= 1e-10 * np.abs(numpy_path.q).max()
    assert np.abs(kernel.p - numpy_path.p).max() <= 1e-10 * np.abs(numpy_path.p).max()
    np.testing.assert_allclose(kernel.enforced_residuals, 0.0, atol=1e-13)
    assert_stream_resume_and_ensemble_repeat_the_run(
        model, "lobatto", {"stages": 4, "backend": "compiled"}, 2e-3, 20, tmp_path)


@pytest.mark.parametrize("backend", ["auto", "compiled"])
def test_refined_steps_continue_the_stage_polynomial_at_their_own_length(backend):
    """A step redone as sub-steps starts Newton from the last stage polynomial evaluated at
    the sub-steps' nodes (its time axis scaled by h_sub / h). Five stages on the heavy top
    at h = 1/64 (2.1 rad of spin per step): steps that fail are refined and the run
    completes, with the constraints at round-off (a guess continued over the full step
    length left every refinement depth without convergence)."""
    import heavy_top

    if backend == "compiled" and not compiled.available():
        pytest.skip("needs numba")
    model = heavy_top.build().compile()
    solution = mbs.simulate(model, "lobatto", stages=5, backend=backend, h=1 / 64, t_end=0.5)
    assert solution.stats["completed"] and solution.stats["refined_steps"]
    assert solution.constraint_residuals()["position"].max() <= 1e-12
