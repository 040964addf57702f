"""Matplotlib plots and the convergence-study helper."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import mbs

pytest.importorskip("matplotlib")
from mbs import plots  # noqa: E402


@pytest.fixture(scope="module")
def pendulum_runs():
    import pendulum_3d

    model = pendulum_3d.build().compile()
    return [mbs.simulate(model, solver, h=0.02, t_end=0.4) for solver in ("em", "ggl-vi-a")]


def png_ok(path) -> bool:
    return path.is_file() and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_functions_of_one_solution_save_pngs(tmp_path, pendulum_runs):
    em = pendulum_runs[0]
    for name in ("energy", "momentum", "constraints"):
        path = tmp_path / f"{name}.png"
        figure = getattr(plots, f"plot_{name}")(em, path)
        assert png_ok(path)
        assert figure.axes


def test_overlay_and_pdf(tmp_path, pendulum_runs):
    figure = plots.plot_energy(pendulum_runs, tmp_path / "energy.pdf", components=True)
    assert (tmp_path / "energy.pdf").read_bytes()[:4] == b"%PDF"
    labels = [t.get_text() for t in figure.axes[0].get_legend().get_texts()]
    assert labels == ["em, h = 0.02", "ggl-vi-a, h = 0.02"]
    # the components panel draws every run: its totals are the runs' energies
    totals = {line.get_label(): line.get_ydata() for line in figure.axes[1].get_lines()}
    for run, label in zip(pendulum_runs, labels):
        np.testing.assert_array_equal(totals[f"{label}: total E"], run.energy())
    figure = plots.plot_constraints(pendulum_runs, tmp_path / "c.png")
    titles = [ax.get_title() for ax in figure.axes]
    for run, title in zip(pendulum_runs, titles):
        assert run.solver_properties.constraints_at_step_end in title
    assert figure.axes[0].get_yscale() == "log"
    with pytest.raises(mbs.ModelError, match="cannot save"):
        plots.plot_momentum(pendulum_runs, tmp_path / "m.jpg2")
    with pytest.raises(mbs.ModelError, match="give one label per solution"):
        plots.plot_energy(pendulum_runs, labels=["only one"])


def test_convergence_study_slopes_and_table(tmp_path, capsys):
    import pendulum_3d

    study = plots.convergence_study(pendulum_3d.build, ["em", "rattle"], [0.02, 0.01, 0.005],
                                    0.2, path=tmp_path / "conv.png")
    assert png_ok(tmp_path / "conv.png")
    printed = capsys.readouterr().out
    assert "fitted slope" in printed and "rattle" in printed
    for solver in ("em", "rattle"):
        assert 1.7 < study.slopes_q[solver] < 2.5
        assert np.all(np.diff(study.errors_q[solver]) < 0)
    assert study.table == str(study)


def test_convergence_against_an_exact_solution():
    """A free particle: q(t) = q0 + v t exactly; every scheme reproduces it."""
    system = mbs.System()
    particle = system.add(mbs.PointMass(2.0, name="p"))
    particle.set_state(position=(0.0, 0.0, 0.0), velocity=(1.0, 2.0, 3.0))
    exact = lambda t: (np.array([1.0, 2.0, 3.0]) * t, np.array([2.0, 4.0, 6.0]))  # noqa: E731
    study = plots.convergence_study(system, ["em"], [0.1, 0.05], 0.5, reference=exact,
                                    print_table=False)
    assert np.all(study.errors_q["em"] < 1e-12)
    with pytest.raises(mbs.ModelError, match="does not divide"):
        plots.convergence_study(system, ["em"], [0.3, 0.2], 0.5, reference=exact)


def test_steps_divide_the_studied_interval_from_t_start():
    """With t_start, every run covers t_end - t_start: a step must divide that interval
    (a step dividing only t_end would end its run short of t_end, and its error would
    compare states at different times). Harmonic oscillator, omega = 1, started at
    t_start = 0.1 from x = 1: x(t) = cos(t - 0.1); EM is of order 2."""
    system = mbs.System()
    particle = system.add(mbs.PointMass(1.0, name="p"))
    particle.set_state(position=(1.0, 0.0, 0.0))
    system.add(mbs.forces.Spring(system.ground, particle, stiffness=1.0, rest_length=0.0))

    def exact(t):
        return (np.array([np.cos(t - 0.1), 0.0, 0.0]), np.array([-np.sin(t - 0.1), 0.0, 0.0]))

    study = plots.convergence_study(system, ["EM"], [0.3, 0.15, 0.075], 1.0, t_start=0.1,
                                    reference=exact, print_table=False)
    assert 1.8 < study.slopes_q["EM"] < 2.2
    with pytest.raises(mbs.ModelError, match="does not divide t_end - t_start = 0.95"):
        plots.convergence_study(system, ["em"], [0.1, 0.05], 1.0, t_start=0.05,
                                reference=exact)


def test_solver_options_apply_to_the_studied_solvers_only():
    import pendulum_3d

    model = pendulum_3d.build().compile()
    study = plots.convergence_study(model, ["lobatto"], [0.02, 0.01], 0.2, stages=2,
                                    print_table=False)
    assert not study.failures and study.reference.startswith("em with h")
    # order=4 composes the studied em; the reference stays the plain em run, whose error the
    # fourth-order errors reach
    plain_reference = mbs.simulate(model, "em", h=0.01 / 8, t_end=0.2)
    with pytest.warns(UserWarning, match="reference's own error"):
        default = plots.convergence_study(model, ["em"], [0.02, 0.01], 0.2, order=4,
                                          print_table=False)
    given = plots.convergence_study(model, ["em"], [0.02, 0.01], 0.2, order=4,
                                    reference=plain_reference, print_table=False)
    assert np.array_equal(default.errors_q["em"], given.errors_q["em"])


def test_solvers_studied_side_by_side_take_options_of_their_own():
    """em next to lobatto with stages=3 in one study: each run with its own options (the
    errors equal those of separate studies), labelled with them."""
    import pendulum_3d

    model = pendulum_3d.build().compile()
    steps, reference = [0.04, 0.02, 0.01], {"stages": 5}
    both = plots.convergence_study(model, ["em", ("lobatto", {"stages": 3})], steps, 0.4,
                                   reference_solver="lobatto", reference_options=reference,
                                   print_table=False)
    for label, solver, options in (("em", "em", {}),
                                   ("lobatto (stages=3)", "lobatto", {"stages": 3})):
        alone = plots.convergence_study(model, [solver], steps, 0.4, **options,
                                        reference_solver="lobatto",
                                        reference_options=reference, print_table=False)
        np.testing.assert_array_equal(both.errors_q[label], alone.errors_q[solver])
    assert both.slopes_q["em"] == pytest.approx(2.0, abs=0.2)
    assert both.slopes_q["lobatto (stages=3)"] == pytest.approx(4.0, abs=0.3)
    assert "lobatto (stages=3)" in both.table
    with pytest.raises(mbs.ModelTypeError, match=r"a \(name, dict\) pair"):
        plots.convergence_study(model, [(3, {})], steps, 0.4)
    with pytest.raises(mbs.ModelError, match="two solvers labelled 'ggl-vi-a'"):
        plots.convergence_study(model, [mbs.solvers.GGLVI(variant="A"),
                                        mbs.solvers.GGLVI(variant="A", theta=0.25)], steps, 0.4)
    # solver options reach the named solvers, not an instance (which carries its own)
    mixed = plots.convergence_study(model, ["em", mbs.solvers.Rattle()], steps, 0.4, order=4,
                                    reference_solver="lobatto", reference_options=reference,
                                    print_table=False)
    assert not mixed.failures
    assert mixed.slopes_q["em"] == pytest.approx(4.0, abs=0.3)
    assert mixed.slopes_q["rattle"] == pytest.approx(2.0, abs=0.2)


def test_reference_options_configure_the_reference_run():
    import pendulum_3d

    model = pendulum_3d.build().compile()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # accurate enough: no warning about the reference
        study = plots.convergence_study(model, ["em"], [0.02, 0.01], 0.2, order=4,
                                        reference_options={"order": 6}, print_table=False)
    assert study.reference == "em (order=6) with h = 0.00125"
    assert 3.5 < study.slopes_q["em"] < 4.5
    with pytest.raises(mbs.ModelError, match="reference_options"):
        plots.convergence_study(model, ["em"], [0.02, 0.01], 0.2, reference=lambda t: 0.0,
                                reference_options={"order": 6})


def test_the_initial_state_is_shared_with_the_reference_run():
    import pendulum_3d

    model = pendulum_3d.build().compile()
    later = mbs.simulate(model, "em", h=0.01, t_end=0.3)
    start = (later.q[-1], later.p[-1])
    study = plots.convergence_study(model, ["rattle"], [0.02, 0.01], 0.2, initial_state=start,
                                    print_table=False)
    assert 1.7 < study.slopes_q["rattle"] < 2.5


def test_momentum_plot_shows_the_conserved_components_about_the_pivot(tmp_path):
    """A top pivoted away from the origin conserves only the vertical angular momentum
    about its pivot, and no linear momentum: the plot draws the error of that component
    (at round-off for EM: 20 steps of sums of a few terms of size max |J|, 1e-12 is
    generous) and the momenta it does not conserve as their components."""
    pivot = np.array([1.0, 2.0, 0.5])
    system = mbs.System(gravity=(0.0, 0.0, -9.81))
    body = system.add(mbs.RigidBody(mass=1.0, inertia=(0.4, 0.4, 0.2), name="top"))
    rotation = mbs.rotation_about_x(0.3)
    omega = 30.0 * rotation[:, 2]
    offset = rotation @ np.array([0.0, 0.0, 0.5])
    body.set_state(position=pivot + offset, rotation=rotation,
                   velocity=np.cross(omega, offset), angular_velocity=omega)
    system.add(mbs.joints.Spherical(system.ground, body, point=tuple(pivot), name="tip"))
    run = mbs.simulate(system.compile(), "em", h=0.01, t_end=0.2)
    assert np.array_equal(run.momentum_reference_point(), pivot)

    figure = plots.plot_momentum(run, tmp_path / "momentum.png")
    angular, linear = figure.axes[:2]
    assert len(angular.lines) == 1 and "(0, 0, 1)" in angular.get_title()
    assert np.max(np.abs(angular.lines[0].get_ydata())) < 1e-12
    assert len(linear.lines) == 3 and "not conserved" in linear.get_title()
    assert figure.get_suptitle() == ("momentum: errors of the conserved components, the "
                                     "others as they are")
    for axes in (angular, linear):  # the labels fit in the saved figure
        for text in (axes.yaxis.label, axes.title):
            box = text.get_window_extent()
            assert figure.bbox.y0 <= box.y0 and box.y1 <= figure.bbox.y1

    about_origin = plots.plot_momentum(run, about=(0.0, 0.0, 0.0)).axes[0]
    assert len(about_origin.lines) == 3 and "not conserved" in about_origin.get_title()


def test_a_reference_point_that_is_not_three_numbers_is_refused(pendulum_runs):
    """Every function taking the point of an angular momentum names itself and the point."""
    solution = pendulum_runs[0]
    calls = {"Solution.angular_momentum": lambda about: solution.angular_momentum(about),
             "Solution.conservation_summary":
                 lambda about: solution.conservation_summary(about=about),
             "Solution.conserved_directions": lambda about: solution.conserved_directions(about),
             "plot_momentum": lambda about: plots.plot_momentum(solution, about=about)}
    for owner, call in calls.items():
        with pytest.raises(mbs.ModelError, match=rf"{owner}: about \(the point the angular "
                                                 rf"momentum is taken about\) must have 3 "):
            call((1.0, 2.0))
        with pytest.raises(mbs.ModelTypeError, match=f"{owner}: about .* must be 3 numbers"):
            call("origin")


def test_an_unwritable_figure_path_is_refused_before_the_study_runs(tmp_path):
    """Refused before the model is even built (the runs would all be lost)."""
    (tmp_path / "plainfile").write_text("not a directory")
    built = []

    def build():
        built.append(True)
        return mbs.System()

    with pytest.raises(mbs.ModelError, match="cannot write the figure to .*choose a writable"):
        plots.convergence_study(build, ["em"], [0.1, 0.05], 0.5,
                                path=tmp_path / "plainfile" / "conv.png")
    assert not built


def test_the_constraint_plot_of_a_scheme_enforcing_none_labels_what_it_reports():
    """Lie-group methods enforce no director constraints; their reported residual is
    labelled as such, and no velocity line of exact zeros is drawn."""
    import heavy_top

    lie = heavy_top.build().compile(formulation="lie-group")
    solution = mbs.simulate(lie, "vrkmk", h=0.01, t_end=0.05)
    figure = plots.plot_constraints(solution)
    labels = [line.get_label() for line in figure.axes[0].get_lines()]
    assert "residual the scheme reports" in labels
    assert not any("enforces" in label for label in labels)
    assert "\n" in figure.axes[0].get_title()  # the long property wrapped, not cut off
