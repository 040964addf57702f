"""Symmetric compositions of EM and RATTLE to order 4 and 6 (issue 18)."""

from __future__ import annotations

import numpy as np
import pytest
from mechanisms import assert_stream_resume_and_ensemble_repeat_the_run

import mbs
from mbs.backends import compiled
from mbs.solvers import COMPOSITIONS, Composition, EnergyMomentum
from mbs.solvers.composition import composition_coefficients


def _fitted_order(steps, errors) -> float:
    return -np.polyfit(np.log(steps), np.log(errors), 1)[0]


@pytest.mark.parametrize("method, order", sorted(COMPOSITIONS))
def test_coefficients_raise_stormer_verlet_to_their_order(method, order):
    """The coefficients alone, independent of mbs's schemes: Stormer-Verlet composed with
    them on the nonlinear pendulum q'' = -sin q (whose flow is not linear, so every order
    condition matters) reaches the order, measured against a 16x finer run of the
    composition (errors 1e-5 .. 1e-11, far above its own error and round-off)."""
    gammas = composition_coefficients(order, method)
    assert gammas.sum() == pytest.approx(1.0, abs=1e-15)
    np.testing.assert_allclose(gammas, gammas[::-1], atol=1e-15)

    def run(steps: int, t_end: float = 4.0) -> np.ndarray:
        h, q, p = t_end / steps, 2.0, 0.0
        for _ in range(steps):
            for gamma in gammas:
                p -= 0.5 * gamma * h * np.sin(q)
                q += gamma * h * p
                p -= 0.5 * gamma * h * np.sin(q)
        return np.array([q, p])

    steps = np.array([20, 40, 80]) if order == 4 else np.array([10, 20, 40])
    reference = run(16 * steps[-1])
    errors = [np.abs(run(count) - reference).max() for count in steps]
    assert _fitted_order(steps, errors) == pytest.approx(order, abs=0.15)


@pytest.fixture(scope="module")
def heavy_top_model():
    import heavy_top

    return heavy_top.build().compile()


@pytest.fixture(scope="module")
def double_pendulum_model():
    import double_pendulum

    return double_pendulum.build().compile()


#: (model, order, solver): T, step counts, reference step count. The ranges are where the
#: error of each scheme is asymptotic and far above the reference's: composed EM of order 6
#: is so accurate on the double pendulum that it needs T = 2, where the chaotic motion lifts
#: its errors to 1e-6 .. 2.5e-10.
CASES = {
    ("heavy_top", 4, "em"): (0.2, [100, 200, 400, 800], 4000),
    ("heavy_top", 4, "rattle"): (0.2, [100, 200, 400, 800], 4000),
    ("heavy_top", 6, "em"): (0.2, [100, 200, 400], 4000),
    ("heavy_top", 6, "rattle"): (0.2, [100, 200, 400], 4000),
    ("double_pendulum", 4, "em"): (0.5, [50, 100, 200, 400], 4000),
    ("double_pendulum", 4, "rattle"): (0.5, [50, 100, 200, 400], 4000),
    ("double_pendulum", 6, "em"): (2.0, [200, 400, 800], 8000),
    ("double_pendulum", 6, "rattle"): (0.5, [50, 100, 200, 400], 4000),
    ("heavy_top", 4, "ggl-vi-a"): (0.2, [100, 200, 400, 800], 4000),
    ("heavy_top", 6, "ggl-vi-a"): (0.2, [100, 200, 400], 4000),
    ("double_pendulum", 4, "ggl-vi-a"): (0.5, [50, 100, 200, 400], 4000),
    ("double_pendulum", 6, "ggl-vi-a"): (0.5, [50, 100, 200], 4000),
}
_REFERENCES: dict = {}


def _reference(model, t_end: float, steps: int):
    """Lobatto IIIA-IIIB with 4 stages (order 6): with L h <= 0.07 its error, ~(L h)^6, is
    below 1e-13, under the smallest error it is compared with (2.5e-10)."""
    key = (id(model), t_end, steps)
    if key not in _REFERENCES:
        _REFERENCES[key] = mbs.simulate(model, "lobatto", stages=4, h=t_end / steps,
                                        t_end=t_end)
    return _REFERENCES[key]


@pytest.mark.parametrize("model_name, order, solver", sorted(CASES))
def test_composed_schemes_reach_their_order_in_q_and_p(request, model_name, order, solver):
    """Fitted log-log slopes of the error at T in q and in p, 4 +- 0.2 and 6 +- 0.3, on the
    heavy top (spin 136 rad/s, h = 2e-3 .. 2.5e-4) and the double pendulum on revolute
    joints."""
    model = request.getfixturevalue(f"{model_name}_model")
    t_end, steps, reference_steps = CASES[model_name, order, solver]
    reference = _reference(model, t_end, reference_steps)
    errors_q, errors_p = [], []
    for count in steps:
        run = mbs.simulate(model, solver, order=order, h=t_end / count, t_end=t_end)
        errors_q.append(np.abs(run.q[-1] - reference.q[-1]).max())
        errors_p.append(np.abs(run.p[-1] - reference.p[-1]).max())
        if solver != "ggl-vi-a":  # its constraints hold at the sub-step midpoints only
            assert run.constraint_residuals()["position"].max() <= 1e-12
    tolerance = 0.2 if order == 4 else 0.3
    assert _fitted_order(steps, errors_q) == pytest.approx(order, abs=tolerance)
    assert _fitted_order(steps, errors_p) == pytest.approx(order, abs=tolerance)


@pytest.mark.slow
@pytest.mark.parametrize("order", [4, 6])
def test_composed_em_conserves_energy_over_ten_thousand_steps(heavy_top_model, order):
    """Every EM sub-step conserves energy to the Newton tolerance (1e-12 relative increment),
    so the composed step does too: relative energy error <= 1e-12 over 10^4 steps of the
    heavy top, vertical angular momentum to round-off."""
    run = mbs.simulate(heavy_top_model, "em", order=order, h=1e-3, t_end=10.0)
    energy = run.energy()
    assert np.abs(energy - energy[0]).max() <= 1e-12 * abs(energy[0])
    vertical = run.angular_momentum()[:, 2]
    assert np.abs(vertical - vertical[0]).max() <= 1e-12 * np.abs(vertical).max()
    assert run.stats["solver"] == f"em-order{order}"


def test_streaming_resume_and_ensembles_repeat_the_single_run(heavy_top_model, tmp_path):
    """A composed run streamed, stopped and resumed, and an ensemble member, are bitwise the
    uninterrupted run (each sub-step's warm start is part of the checkpoint)."""
    assert_stream_resume_and_ensemble_repeat_the_run(heavy_top_model, "em", {"order": 4},
                                                     1e-3, 30, tmp_path)


def test_refinement_of_a_failed_step_keeps_the_composition(heavy_top_model):
    """A composed step that Newton cannot solve is refined into sub-steps of the same
    composition on the same output grid, which still conserve energy."""
    run = mbs.simulate(heavy_top_model, "em", order=4, h=0.1, t_end=0.5)
    assert run.stats["refined_steps"]
    energy = run.energy()
    assert np.abs(energy - energy[0]).max() <= 1e-12 * abs(energy[0])


def test_bad_compositions_are_rejected():
    with pytest.raises(mbs.ModelError, match="lobatto"):
        mbs.solvers.make_solver("ggl-vi-b", order=4)
    with pytest.warns(UserWarning, match="unstable"):
        unstable = mbs.solvers.make_solver("ggl-vi-a", theta=0.6)
    with pytest.raises(mbs.ModelError, match="composable"):
        Composition(base=unstable, order=4)
    with pytest.raises(mbs.ModelError, match="order must be 4 or 6"):
        mbs.solvers.make_solver("em", order=5)
    with pytest.raises(mbs.ModelError, match="kahan-li"):
        mbs.solvers.make_solver("em", order=6, composition="suzuki")
    with pytest.raises(mbs.ModelError, match="composable"):
        Composition(base=mbs.solvers.GGLVI(variant="B"))
    assert isinstance(mbs.solvers.make_solver("em", order=2), EnergyMomentum)


needs_numba = pytest.mark.skipif(not compiled.available(), reason="numba not installed")


@needs_numba
def test_compiled_blocks_of_composed_steps_repeat_the_step_by_step_run(heavy_top_model,
                                                                      tmp_path):
    """With backend="compiled" the composed steps run in blocks in the kernel; a streamed run
    (one step per call, the same kernel per sub-step) gives the same states bitwise, and a
    step the kernel cannot solve is refined by the driver as usual."""
    model = heavy_top_model
    blocks = mbs.simulate(model, "em", order=4, h=1e-3, t_end=0.3, backend="compiled")
    single = mbs.simulate(model, "em", order=4, h=1e-3, t_end=0.3, backend="compiled",
                          output=str(tmp_path / "run"))
    np.testing.assert_array_equal(blocks.q, single.q)
    np.testing.assert_array_equal(blocks.p, single.p)
    np.testing.assert_array_equal(blocks.stats["newton_iterations"],
                                  single.stats["newton_iterations"])
    energy = blocks.energy()
    assert np.abs(energy - energy[0]).max() <= 1e-12 * abs(energy[0])
    refined = mbs.simulate(model, "em", order=4, h=0.1, t_end=0.5, backend="compiled")
    assert refined.stats["refined_steps"]
    energy = refined.energy()
    assert np.abs(energy - energy[0]).max() <= 1e-12 * abs(energy[0])


def test_ggl_vi_a_mirrors_states_off_the_manifold_so_it_is_composed_in_pairs():
    """The reason composed GGL-VI A takes two half steps per coefficient: a state off the
    constraint manifold comes back mirrored through it however small h is (g(q^{n+1/2}) = 0
    holds at the midpoint), so one step tends to a reflection, two to the identity. On the
    3D pendulum g = (|q|^2 - 1)/2, a position 1e-4 off the sphere goes to -1e-4 + O(h)."""
    import pendulum_3d

    model = pendulum_3d.build().compile()
    q0 = np.array([1.0 + 1e-4, 0.0, 0.0])
    p0 = np.array([0.0, 1.0, 0.0])
    solver = mbs.solvers.make_solver("ggl-vi-a")
    assert solver.composed_in_pairs
    for h in (1e-5, 1e-6):
        solver.start(model, q0, p0, h)
        once = solver.step(0.0, q0, p0)
        twice = solver.step(h, once.q, once.p)
        deviation = 0.5 * (q0 @ q0 - 1.0)
        assert 0.5 * (once.q @ once.q - 1.0) == pytest.approx(-deviation, rel=1e-3)
        np.testing.assert_allclose(twice.q, q0, atol=10 * h)
    composed = Composition(base=mbs.solvers.make_solver("ggl-vi-a"), order=4)
    np.testing.assert_allclose(composed.coefficients, np.repeat(
        composition_coefficients(4) / 2, 2), rtol=0, atol=1e-15)


def test_composed_ggl_vi_a_streams_resumes_and_runs_in_ensembles(heavy_top_model, tmp_path):
    """Composed GGL-VI A (six sub-steps per step at order 4) streamed, resumed and run as an
    ensemble member repeats the single run bitwise, and conserves the vertical angular
    momentum of the heavy top to round-off as every sub-step does."""
    assert_stream_resume_and_ensemble_repeat_the_run(heavy_top_model, "ggl-vi-a",
                                                     {"order": 4}, 1e-3, 30, tmp_path)
    run = mbs.simulate(heavy_top_model, "ggl-vi-a", order=4, h=1e-3, t_end=0.5)
    vertical = run.angular_momentum()[:, 2]
    assert np.abs(vertical - vertical[0]).max() <= 1e-12 * np.abs(vertical).max()
    assert run.stats["solver"] == "ggl-vi-a-order4"


@pytest.mark.slow
def test_composed_ggl_vi_a_energy_error_is_bounded_and_of_order_four(heavy_top_model):
    """Composed GGL-VI A is symplectic: on the heavy top its energy error oscillates in a
    band that does not grow (largest error over the last quarter of 10 s within 10 % of that
    over the first) and whose width is O(h^4): halving h divides it by 2^4 = 16 (between 12
    and 20, the asymptotic ratio with the slack of a two-point estimate)."""
    bands = []
    for h in (2e-3, 1e-3):
        run = mbs.simulate(heavy_top_model, "ggl-vi-a", order=4, h=h, t_end=10.0)
        energy = run.energy()
        error = np.abs(energy - energy[0]) / abs(energy[0])
        quarter = error.size // 4
        first, last = error[:quarter].max(), error[-quarter:].max()
        assert last <= 1.1 * first
        bands.append(first)
    assert 12.0 <= bands[0] / bands[1] <= 20.0


def spinning_linkage() -> mbs.System:
    """A box turning and sliding on a cylindrical joint, a link hinged to it with a torsion
    spring, and a cylinder hanging off the link by a ball joint; no gravity. The constraint
    forces that keep the spinning bodies on their joints are large against the spring's."""
    system = mbs.System(gravity=None)
    spin_1, centre_1 = np.array([0.0, 0.0, 1.2]), np.array([0.1, 0.05, 0.0])
    velocity_1 = np.cross(spin_1, centre_1) + np.array([0.0, 0.0, 0.3])
    box = system.add(mbs.RigidBody.from_shape("box", mass=2.0, lx=0.6, ly=0.3, lz=0.2,
                                              name="box"))
    box.set_state(position=centre_1, angular_velocity=spin_1, velocity=velocity_1)
    system.add(mbs.joints.Cylindrical(system.ground, box, point=(0.0, 0.0, 0.0),
                                      axis=(0.0, 0.0, 1.0)))
    hinge_point = np.array([0.4, 0.1, 0.0])
    hinge_velocity = velocity_1 + np.cross(spin_1, hinge_point - centre_1)
    spin_2, centre_2 = np.array([0.0, 0.0, 2.5]), hinge_point + np.array([0.25, 0.0, 0.0])
    link = system.add(mbs.RigidBody.from_shape("box", mass=0.8, lx=0.5, ly=0.06, lz=0.06,
                                               name="link"))
    link.set_state(position=centre_2, angular_velocity=spin_2,
                   velocity=hinge_velocity + np.cross(spin_2, centre_2 - hinge_point))
    hinge = system.add(mbs.joints.Revolute(box, link, point=hinge_point, axis=(0.0, 0.0, 1.0)))
    system.add(mbs.forces.TorsionSpring(hinge, stiffness=4.0, rest_angle=0.3))
    ball = hinge_point + np.array([0.5, 0.0, 0.0])
    ball_velocity = hinge_velocity + np.cross(spin_2, ball - hinge_point)
    tilt = mbs.rotation_about_y(0.7) @ mbs.rotation_about_x(0.3)
    centre_3, spin_3 = ball + tilt @ np.array([0.0, 0.0, -0.2]), np.array([0.5, -0.8, 2.0])
    bob = system.add(mbs.RigidBody.from_shape("cylinder", mass=0.5, radius=0.05, length=0.4,
                                              name="bob"))
    bob.set_state(position=centre_3, rotation=tilt, angular_velocity=spin_3,
                  velocity=ball_velocity + np.cross(spin_3, centre_3 - ball))
    system.add(mbs.joints.Spherical(link, bob, point=ball))
    return system


@pytest.mark.parametrize("backend", ["auto", "compiled"])
def test_a_first_composed_step_with_a_long_backward_sub_step_finds_the_near_root(backend):
    """RATTLE of order 4 at h = 0.05 on the spinning linkage: its middle sub-step runs
    backwards by 0.085. Started from zero multipliers, its explicit guess once led Newton to
    another root of the step equations (the state 1.9 away, the energy 16 times larger);
    seeded with the first sub-step's constraint forces it finds the motion. Reference: four
    steps of Lobatto IIIA-IIIB with 5 stages (order 8: 4e-14 from eight steps); the order-4
    step's own error in q and its relative energy error are about 3e-3, and the bound 1e-2
    is far below the other root's."""
    if backend == "compiled" and not compiled.available():
        pytest.skip("numba not installed")
    model = spinning_linkage().compile()
    step = mbs.simulate(model, "rattle", order=4, h=0.05, t_end=0.05, on_failure="raise",
                        backend=backend)
    reference = mbs.simulate(model, "lobatto", stages=5, h=0.0125, t_end=0.05)
    assert np.abs(step.q[-1] - reference.q[-1]).max() < 1e-2
    energy = step.energy()
    assert abs(energy[-1] - energy[0]) < 1e-2 * abs(energy[0])


@pytest.mark.parametrize("solver, order, sub_steps", [("em", 4, 3), ("em", 6, 9),
                                                       ("ggl-vi-a", 4, 6)])
def test_the_summary_says_newton_iterations_are_summed_over_the_sub_steps(
        heavy_top_model, solver, order, sub_steps, tmp_path):
    """Each sub-step is a Newton solve of its own, so a composed step takes at least one
    iteration per sub-step; the summary says over how many the count is summed, also for a
    run read back from its stream."""
    run = mbs.simulate(heavy_top_model, solver, order=order, h=1e-3, t_end=4e-3,
                       output=str(tmp_path / "run"), flush_every=2)
    assert run.stats["sub_steps"] == sub_steps
    assert np.all(run.stats["newton_iterations"] >= sub_steps)
    for solution in (run, mbs.load_solution(str(tmp_path / "run"), heavy_top_model)):
        assert f"per step (over its {sub_steps} sub-steps)" in solution.conservation_summary()
    plain = mbs.simulate(heavy_top_model, solver, h=1e-3, t_end=4e-3)
    assert plain.stats["sub_steps"] == 1
    assert "sub-steps" not in plain.conservation_summary().splitlines()[0]
