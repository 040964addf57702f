"""What ``convergence_study`` accepts: the Lie-group schemes ``simulate`` runs, and only a
reference solution of the study's own initial-value problem."""

from __future__ import annotations

import numpy as np
import pytest

import mbs
from mbs.liegroup.simulation import make_method

pytest.importorskip("matplotlib")
from mbs import plots  # noqa: E402


def free_body_system() -> mbs.System:
    """A torque-free asymmetric rigid body, J = diag(2, 3, 4), Omega(0) = (1, 0, 1)."""
    system = mbs.System()
    body = system.add(mbs.RigidBody(mass=1.0, inertia=(2.0, 3.0, 4.0), name="body"))
    body.set_state(angular_velocity=(1.0, 0.0, 1.0))
    return system


def spinning_body_system(mass: float = 2.0) -> mbs.System:
    """A free rigid body spinning about its axis of largest inertia, drifting sideways."""
    system = mbs.System()
    body = system.add(mbs.RigidBody(mass=mass, inertia=(2.0, 3.0, 4.0), name="body"))
    body.set_state(velocity=(0.1, 0.0, 0.0), angular_velocity=(0.0, 0.1, 1.0))
    return system


STEPS, T_END = [0.4, 0.2, 0.1], 2.0


@pytest.mark.parametrize("solver, options", [("vrkmk", {}), ("vrkmk", {"tableau": "gauss-1"}),
                                             ("vcg", {})])
def test_lie_group_schemes_converge_at_their_declared_order(solver, options):
    """Each scheme studied on the Lie-group model against a sixth-order director reference
    (em order 6 at h = 0.0125, errors below 1e-9 here) shows the order its method declares;
    the errors are those of the director states the runs return."""
    model = free_body_system().compile(formulation="lie-group")
    study = plots.convergence_study(model, [(solver, options)], STEPS, T_END,
                                    reference_options={"order": 6}, print_table=False)
    label = study.solvers[0]
    assert not study.failures
    declared = make_method(solver, **options).order
    assert study.slopes_q[label] == pytest.approx(declared, abs=0.3)
    assert study.slopes_p[label] == pytest.approx(declared, abs=0.3)

    reference = mbs.simulate(model.director_model, "em", order=6, h=min(STEPS) / 8,
                             t_end=T_END)
    coarsest = mbs.simulate(model, solver, h=STEPS[0], t_end=T_END, **options)
    assert coarsest.model is model.director_model
    error = np.max(np.abs(coarsest.q[-1] - reference.q[-1])) / np.max(np.abs(reference.q[-1]))
    assert study.errors_q[label][0] == pytest.approx(error, rel=1e-12)


def test_a_lie_group_reference_run_and_a_lie_group_reference_solution():
    """A Lie-group reference solver runs on the Lie-group model; a Lie-group run given as the
    reference is of the study's (director) model and starts where the studied runs do."""
    model = free_body_system().compile(formulation="lie-group")
    by_run = plots.convergence_study(model, ["vcg"], STEPS, T_END, reference_solver="vrkmk",
                                     reference_options={"tableau": "gauss-3"},
                                     print_table=False)
    assert by_run.reference.startswith("vrkmk (tableau='gauss-3') with h = 0.0125")
    given = mbs.simulate(model, "vrkmk", tableau="gauss-3", h=min(STEPS) / 8, t_end=T_END)
    by_solution = plots.convergence_study(model, ["vcg"], STEPS, T_END, reference=given,
                                          print_table=False)
    np.testing.assert_array_equal(by_solution.errors_q["vcg"], by_run.errors_q["vcg"])
    assert by_run.slopes_q["vcg"] == pytest.approx(4.0, abs=0.3)


def test_solvers_are_refused_as_simulate_refuses_them():
    """The formulation's solvers, names and options are checked by simulate's own rules,
    before any run (a refused run would otherwise be recorded as a failed run)."""
    system = free_body_system()
    lie_group, director = system.compile(formulation="lie-group"), system.compile()
    cases = [(director, "vrkmk", {}), (director, "vrkmk", {"tableau": "gauss-2"}),
             (lie_group, "em", {}), (lie_group, "vrkmk", {"tablaeu": "gauss-2"}),
             (lie_group, "vcg", {"composition": "leapfrog"}), (lie_group, "nonsense", {})]
    for model, solver, options in cases:
        with pytest.raises(mbs.ModelError) as by_simulate:
            mbs.simulate(model, solver, h=0.1, t_end=0.2, **options)
        with pytest.raises(mbs.ModelError) as by_study:
            plots.convergence_study(model, [(solver, options)], [0.1, 0.05], 0.2,
                                    reference=lambda t: np.zeros(director.n),
                                    print_table=False)
        assert str(by_study.value) == str(by_simulate.value)
    # options given to the whole study reach the Lie-group solvers named in it
    with pytest.raises(mbs.ModelError, match="unknown options"):
        plots.convergence_study(lie_group, ["vrkmk"], [0.1, 0.05], 0.2, stages=3,
                                reference=lambda t: np.zeros(director.n),
                                print_table=False)
    with pytest.raises(mbs.ModelError, match="unknown solver 'nonsense'; choose from .*vcg"):
        plots.convergence_study(director, ["nonsense"], [0.1, 0.05], 0.2, print_table=False)


def test_a_reference_of_another_start_time_is_refused():
    model = spinning_body_system().compile()
    reference = mbs.simulate(model, "em", order=4, h=0.0125, t_start=0.0, t_end=1.0)
    with pytest.raises(mbs.ModelError, match=r"starts at t = 0.0, the study at t_start = 0.5.*"
                                             r"t_start=0.5"):
        plots.convergence_study(model, ["em"], [0.1, 0.05], 1.0, t_start=0.5,
                                reference=reference, print_table=False)
    later = mbs.simulate(model, "em", order=4, h=0.0125, t_start=0.5, t_end=1.0)
    study = plots.convergence_study(model, ["em"], [0.1, 0.05], 1.0, t_start=0.5,
                                    reference=later, print_table=False)
    assert study.slopes_q["em"] == pytest.approx(2.0, abs=0.3)


def test_a_reference_from_another_initial_state_is_refused(tmp_path):
    """A start moved by 1e-4 relative or 1e-6 m is refused; the same start computed again
    (another build of the model), also read back from a file, is accepted."""
    model = spinning_body_system().compile()
    q0, p0 = model.initial_state()
    faster = mbs.simulate(model, "em", order=4, h=0.0125, t_end=1.0,
                          initial_state=(q0, (1.0 + 1e-4) * p0))
    with pytest.raises(mbs.ModelError, match=r"starts from another state .*max \|q0 - q0_ref\| "
                                             r"= 0.000e\+00, max \|p0 - p0_ref\| = [1-9]"):
        plots.convergence_study(model, ["em"], [0.1, 0.05], 1.0, reference=faster,
                                print_table=False)
    shifted, centre = q0.copy(), model.coordinates("body").start
    shifted[centre:centre + 3] += 1e-6  # the centre of mass: the constraints stay met
    moved = mbs.simulate(model, "em", order=4, h=0.0125, t_end=1.0,
                         initial_state=(shifted, p0))
    with pytest.raises(mbs.ModelError, match="starts from another state"):
        plots.convergence_study(model, ["em"], [0.1, 0.05], 1.0, reference=moved,
                                print_table=False)
    rebuilt = spinning_body_system().compile()
    same = mbs.simulate(rebuilt, "em", order=4, h=0.0125, t_end=1.0)
    study = plots.convergence_study(model, ["em"], [0.1, 0.05], 1.0, reference=same,
                                    print_table=False)
    assert study.slopes_q["em"] == pytest.approx(2.0, abs=0.3)
    loaded = mbs.io.load_solution(mbs.io.save_solution(same, tmp_path / "reference.npz"))
    from_file = plots.convergence_study(model, ["em"], [0.1, 0.05], 1.0, reference=loaded,
                                        print_table=False)
    np.testing.assert_array_equal(from_file.errors_q["em"], study.errors_q["em"])


def test_a_reference_of_another_model_is_refused():
    """Another mass, the same initial state in director coordinates: only the model check
    tells the problems apart."""
    model = spinning_body_system().compile()
    heavier = spinning_body_system(mass=3.0).compile()
    q0, p0 = model.initial_state()
    other = mbs.simulate(heavier, "em", order=4, h=0.0125, t_end=1.0, initial_state=(q0, p0))
    with pytest.raises(mbs.ModelError, match="reference solution is of another model: its "
                                             "masses differ"):
        plots.convergence_study(model, ["em"], [0.1, 0.05], 1.0, reference=other,
                                print_table=False)
