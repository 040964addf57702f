"""IFToMM benchmark examples against their reference solutions.

Examples: ``examples/iftomm_pendulum.py`` (problem A01), ``examples/iftomm_four_bar.py`` (A02)
and ``examples/bricard.py`` (A04) of the library of computational benchmark problems of the
IFToMM Technical Committee for Multibody Dynamics (http://lim.ii.udc.es/mbsbenchmark/,
http://lib.iftomm-multibody.org; M. González, D. Dopico, U. Lugrís, J. Cuadrado, Multibody
System Dynamics 16 (2006) 179-190).

References:

* published: the library's time histories of P1 (A01) and B0 (A02), six significant digits,
  as tabulated in the examples (``PUBLISHED``); for A04 only the features of the plot of its
  reference solution (``PUBLISHED_FEATURES``, read to 0.03 m) were available;
* independent, computed here: the pendulum equation theta'' = -(g/L) sin(theta) and the
  one-coordinate motion of the parallelograms by ``scipy.integrate.solve_ivp`` (DOP853,
  rtol = atol = 1e-12, errors ~1e-10 m); for A04 the example's Newton-Euler integration in
  absolute coordinates (DOP853 at 1e-12, no mbs code), whose energy drift and joint closure are
  checked here.

Tolerances come from the order of the scheme, not from the observed errors alone: "em" is of
order 2, so with runs at h and 2h the error of the h run is estimated by Richardson,
E = max |a(2h) - a(h)| / 3 over the compared nodes. The distance to a reference must be at most
1.25 E (a margin for the higher-order terms) plus the accuracy of the reference (published
values: 5e-7 m rounding, 1e-6 m for A01 and 5e-6 m for A02 measured against the independent
solutions; independent solutions: 1e-8 m), and the extrapolated a(h) + (a(h) - a(2h)) / 3 must
be far closer (< 0.05 E). The library's high-precision tolerance 1e-3 m is checked as well.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from scipy.integrate import solve_ivp

import mbs
from mbs.gallery import examples_dir, load_example, load_module

PENDULUM = load_module(examples_dir() / "iftomm_pendulum.py")
FOUR_BAR = load_module(examples_dir() / "iftomm_four_bar.py")
BRICARD = load_module(examples_dir() / "bricard.py")
HIGH_PRECISION = 1e-3  # m, the library's allowed error (high precision)
MARGIN = 1.25  # on the Richardson estimate of an order-2 error
EXTRAPOLATION = 0.05  # extrapolated error / Richardson estimate when the error is O(h^2)
G = 9.81


def compile_quietly(system: mbs.System) -> tuple[mbs.Model, list[str]]:
    """Compile and return the warnings compile() gave."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = system.compile()
    return model, [str(w.message) for w in caught]


def richardson(fine: np.ndarray, coarse: np.ndarray) -> tuple[float, np.ndarray]:
    """Error estimate of the order-2 ``fine`` run (at the nodes of ``coarse``, step 2h) and
    the extrapolated values."""
    fine = fine[::2]
    return float(np.max(np.abs(coarse - fine))) / 3.0, fine + (fine - coarse) / 3.0


def assert_order_two(fine: np.ndarray, coarse: np.ndarray, reference: np.ndarray,
                     reference_accuracy: float) -> float:
    """The checks of the module docstring; returns the fine run's max error."""
    estimate, extrapolated = richardson(fine, coarse)
    error = float(np.max(np.abs(fine - reference)))
    assert error <= MARGIN * estimate + reference_accuracy, (error, estimate)
    assert np.max(np.abs(extrapolated - reference[::2])) <= (EXTRAPOLATION * estimate
                                                             + reference_accuracy)
    return error


def nodes(solution: mbs.Solution, times: np.ndarray) -> np.ndarray:
    index = np.rint(np.asarray(times) / solution.stats["h"]).astype(int)
    assert np.allclose(solution.t[index], times, rtol=0.0, atol=1e-9)
    return index


def pendulum_exact(times: np.ndarray) -> np.ndarray:
    """x, y of P1 from theta'' = -g sin(theta), theta(0) = -pi/2 at rest (L = 1)."""
    solution = solve_ivp(lambda t, s: (s[1], -G * np.sin(s[0])), (0.0, times[-1]),
                         (-np.pi / 2.0, 0.0), method="DOP853", rtol=1e-12, atol=1e-12,
                         t_eval=times)
    return np.column_stack([np.sin(solution.y[0]), -np.cos(solution.y[0])])


def parallelogram_b0(times: np.ndarray, n: int) -> np.ndarray:
    """B0 of the one-coordinate motion of n parallelograms of slender bars (L = m = 1)."""
    kinetic, potential = (n + 1) / 3.0 + n, ((n + 1) / 2.0 + n) * G
    solution = solve_ivp(lambda t, s: (s[1], potential / kinetic * np.sin(s[0])),
                         (0.0, times[-1]), (0.0, 1.0), method="DOP853", rtol=1e-12,
                         atol=1e-12, t_eval=times)
    return np.column_stack([np.sin(solution.y[0]), np.cos(solution.y[0])])


def joint_closure(solution: mbs.Solution) -> np.ndarray:
    """Largest violation of all six revolute joints of the Bricard mechanism (point gap [m],
    and the axis of the first link against the axis of the second) along the solution."""
    worst = np.zeros(solution.t.size)
    poses = {"ground": (np.zeros((1, 3)), np.eye(3)[None])}
    poses.update({name: (solution.body(name).position, solution.body(name).rotation)
                  for name in BRICARD.BARS})
    start = {name: (pose[0][0], pose[1][0]) for name, pose in poses.items()}
    links = ["ground", *BRICARD.BARS, "ground"]
    for k, (point, axis) in enumerate(zip(BRICARD.JOINT_POINTS, BRICARD.JOINT_AXES)):
        ends, axes = [], []
        for name in links[k:k + 2]:
            (x0, r0), (x, r) = start[name], poses[name]
            ends.append(x + r @ (r0.T @ (point - x0)))
            axes.append(r @ (r0.T @ axis))
        misalignment = np.linalg.norm(np.cross(axes[0] * np.ones_like(ends[0]), axes[1]),
                                      axis=1)
        worst = np.maximum(worst, np.maximum(np.abs(ends[0] - ends[1]).max(axis=1),
                                             misalignment))
    return worst


# -- every example follows the gallery contract ---------------------------------------------

@pytest.fixture(scope="module")
def compiled() -> dict[str, tuple]:
    """name -> (module, recommended, viz, title, model, compile warnings), default builds."""
    out = {}
    for name in ("iftomm_pendulum", "iftomm_four_bar", "bricard"):
        module, recommended, viz, title = load_example(examples_dir() / f"{name}.py")
        system = module.build()
        assert isinstance(system, mbs.System)
        out[name] = (module, recommended, viz, title, *compile_quietly(system))
    return out


@pytest.mark.parametrize("name", ["iftomm_pendulum", "iftomm_four_bar", "bricard"])
def test_example_follows_the_gallery_contract(compiled, name):
    # the checks tests/test_examples.py applies to the registered gallery examples
    module, recommended, viz, title, model, caught = compiled[name]
    assert set(module.RECOMMENDED) == {"solver", "h", "t_end"} and title
    assert set(viz) <= {"camera", "follow", "view", "zoom", "center", "trails", "directors",
                        "visuals", "joints", "forces", "ground_plane"}
    assert callable(module.report)
    assert model.is_consistent(*model.initial_state())
    assert all(redundancy.consistent for redundancy in model.redundancies)
    assert all("redundant" in message for message in caught)
    assert model.degrees_of_freedom == (2 if name == "iftomm_pendulum" else 1)
    h = recommended["h"]
    solution = mbs.simulate(model, recommended["solver"], h=h, t_end=3 * h)
    assert len(solution.t) == 4
    energy = solution.energy()
    assert np.max(np.abs(solution.energy_balance())) <= 1e-9 * max(1.0, abs(energy[0]))
    assert "energy" in solution.conservation_summary()
    assert isinstance(module.report(solution), str)


# -- A01 simple pendulum ----------------------------------------------------------------------

PENDULUM_H = 1e-3  # with 2 PENDULUM_H: 10 s in ~0.6 s; error ~5e-5 m


@pytest.fixture(scope="module")
def pendulum_runs(compiled) -> dict[float, mbs.Solution]:
    model = compiled["iftomm_pendulum"][4]
    return {h: mbs.simulate(model, "em", h=h, t_end=10.0) for h in (PENDULUM_H, 2 * PENDULUM_H)}


def test_published_pendulum_values_match_the_exact_solution():
    # the tabulated values (also those up to 2000 s) and the example's closed form
    exact = pendulum_exact(PENDULUM.PUBLISHED[:, 0])
    assert np.max(np.abs(PENDULUM.PUBLISHED[:, 1:] - exact)) < 6e-7  # six digits
    times = np.linspace(0.0, 50.0, 1001)
    assert np.max(np.abs(PENDULUM.exact_p1(times) - pendulum_exact(times))) < 1e-9


def test_pendulum_matches_the_published_values(pendulum_runs):
    published = PENDULUM.PUBLISHED[PENDULUM.PUBLISHED[:, 0] <= 10.0]
    fine, coarse = (pendulum_runs[h] for h in (PENDULUM_H, 2 * PENDULUM_H))
    # every published time is a node of both runs; compare at the published times only
    values = [PENDULUM.point_p1(s)[nodes(s, published[:, 0])] for s in (fine, coarse)]
    estimate = float(np.max(np.abs(values[0] - values[1]))) / 3.0
    error = float(np.max(np.abs(values[0] - published[:, 1:])))
    assert error <= MARGIN * estimate + 1e-6
    assert error < HIGH_PRECISION
    assert PENDULUM.published_errors(fine)[1].max() == pytest.approx(error, rel=1e-12)


def test_pendulum_matches_the_minimal_coordinate_solution(pendulum_runs):
    fine, coarse = (pendulum_runs[h] for h in (PENDULUM_H, 2 * PENDULUM_H))
    error = assert_order_two(PENDULUM.point_p1(fine), PENDULUM.point_p1(coarse),
                             pendulum_exact(fine.t), 1e-8)
    assert error < 5e-5
    assert np.max(np.abs(fine.body("P1").position[:, 2])) == 0.0  # stays in the x-y plane
    energy = fine.energy()
    assert np.max(np.abs(energy - energy[0])) < 1e-13 * np.max(fine.kinetic_energy())


@pytest.mark.slow
def test_pendulum_over_the_library_duration(compiled):
    # 2000 s with the 6th-order composition of em; Richardson for order 6: /63
    model = compiled["iftomm_pendulum"][4]
    runs = [mbs.simulate(model, "em", h=h, t_end=PENDULUM.DURATION, order=6)
            for h in (0.05, 0.1)]
    times = np.arange(0.0, PENDULUM.DURATION + 1e-9, 0.5)
    values = [PENDULUM.point_p1(s)[nodes(s, times)] for s in runs]
    estimate = float(np.max(np.abs(values[0] - values[1]))) / 63.0
    error = float(np.max(np.abs(values[0] - pendulum_exact(times))))
    assert error <= MARGIN * estimate + 1e-8
    published_error = PENDULUM.published_errors(runs[0])[1]
    assert published_error.size == len(PENDULUM.PUBLISHED)
    assert published_error.max() <= MARGIN * estimate + 1e-6
    assert published_error.max() < HIGH_PRECISION


# -- A02 N four-bar mechanism ------------------------------------------------------------------

FOUR_BAR_H = 2.5e-3  # and 5e-3: both divide the published spacing 0.05 s
FOUR_BAR_SHORT = 2.0  # s: two passages through singular positions (t = 0.72 s, 1.24 s)


def four_bar_runs(model: mbs.Model, t_end: float) -> list[mbs.Solution]:
    return [mbs.simulate(model, "em", h=h, t_end=t_end) for h in (FOUR_BAR_H, 2 * FOUR_BAR_H)]


def check_four_bar(runs: list[mbs.Solution], n: int) -> float:
    """Order-2 check against the one-coordinate motion every 0.05 s; the parallelograms keep
    their shape and energy is conserved. Returns the max error of the fine run."""
    times = np.arange(0.0, runs[0].t[-1] + 1e-9, 0.05)
    values = [FOUR_BAR.point_b0(s)[nodes(s, times)] for s in runs]
    reference = parallelogram_b0(times, n)
    estimate = float(np.max(np.abs(values[0] - values[1]))) / 3.0
    error = float(np.max(np.abs(values[0] - reference)))
    assert error <= MARGIN * estimate + 1e-8, (error, estimate)
    assert FOUR_BAR.singular_passages(runs[0]) >= 2
    assert FOUR_BAR.coupler_tilt(runs[0]) < 1e-10  # no switch to another branch
    energy = runs[0].energy()
    assert np.max(np.abs(energy - energy[0])) < 1e-10 * abs(energy[0])
    return error


@pytest.fixture(scope="module")
def four_bar_short(compiled) -> list[mbs.Solution]:
    return four_bar_runs(compiled["iftomm_four_bar"][4], FOUR_BAR_SHORT)


def test_published_four_bar_values_match_the_one_coordinate_solution():
    times = FOUR_BAR.PUBLISHED_STEP * np.arange(len(FOUR_BAR.PUBLISHED))
    assert np.max(np.abs(FOUR_BAR.PUBLISHED - parallelogram_b0(times, 40))) < 5e-6
    assert np.max(np.abs(FOUR_BAR.reduced_b0(times, 40) - parallelogram_b0(times, 40))) < 1e-8


def test_four_bar_model_removes_the_out_of_plane_equations(compiled):
    model = compiled["iftomm_four_bar"][4]
    assert FOUR_BAR.N_LOOPS == 40 and model.n == 12 * 81
    assert sum(redundancy.count for redundancy in model.redundancies) == 3 * 40
    assert model.m == 5 * 121 + 6 * 81 - 3 * 40 and model.degrees_of_freedom == 1


def test_four_bar_passes_the_singular_positions(four_bar_short):
    check_four_bar(four_bar_short, 40)
    fine, coarse = four_bar_short
    times, errors = FOUR_BAR.published_errors(fine)
    assert times[-1] == FOUR_BAR_SHORT and times.size == 9
    values = [FOUR_BAR.point_b0(s)[nodes(s, times)] for s in (fine, coarse)]
    estimate = float(np.max(np.abs(values[0] - values[1]))) / 3.0
    assert errors.max() <= MARGIN * estimate + 5e-6
    assert errors.max() < HIGH_PRECISION


def test_single_four_bar_matches_its_one_coordinate_motion():
    model, _ = compile_quietly(FOUR_BAR.build(1))
    assert model.degrees_of_freedom == 1 and model.redundancies[0].count == 3
    check_four_bar(four_bar_runs(model, 10.0), 1)


@pytest.mark.slow
def test_four_bar_over_the_library_duration(compiled):
    runs = four_bar_runs(compiled["iftomm_four_bar"][4], FOUR_BAR.DURATION)
    check_four_bar(runs, 40)
    times, errors = FOUR_BAR.published_errors(runs[0])
    assert times.size == len(FOUR_BAR.PUBLISHED)
    assert errors.max() < HIGH_PRECISION


# -- A04 Bricard mechanism ---------------------------------------------------------------------

BRICARD_H = 1e-3  # and 2e-3: 10 s in ~3.5 s together; error ~3e-6 m


@pytest.fixture(scope="module")
def bricard_runs(compiled) -> list[mbs.Solution]:
    model = compiled["bricard"][4]
    return [mbs.simulate(model, "em", h=h, t_end=BRICARD.DURATION)
            for h in (BRICARD_H, 2 * BRICARD_H)]


@pytest.fixture(scope="module")
def bricard_reference() -> dict:
    return BRICARD.reference_p3(np.arange(0.0, BRICARD.DURATION + 1e-9, 0.05))


def test_bricard_redundancy_is_found_and_removed(compiled):
    model, caught = compiled["bricard"][4:]
    # Grubler: 5 bars x 6 - 6 hinges x 5 = 0, but the mechanism moves with one freedom
    assert model.n == 5 * 12 and model.m == 5 * 6 + 6 * 5 - 1
    assert model.degrees_of_freedom == 1
    (redundancy,) = model.redundancies
    assert redundancy.count == 1 and redundancy.consistent
    assert set(redundancy.joints) == {f"J{k}" for k in range(1, 7)}
    assert len(redundancy.removed) == 1 and any("redundant" in text for text in caught)


def test_bricard_reference_integration_is_accurate(bricard_reference):
    energy = bricard_reference["energy"]
    assert np.max(np.abs(energy - energy[0])) < 1e-8 * abs(energy[0])
    assert np.max(bricard_reference["closure"]) < 1e-8


def test_bricard_matches_the_independent_integration(bricard_runs, bricard_reference):
    times = np.arange(0.0, BRICARD.DURATION + 1e-9, 0.05)
    fine, coarse = (BRICARD.point_p3(s)[nodes(s, times)] for s in bricard_runs)
    estimate = float(np.max(np.abs(fine - coarse))) / 3.0
    error = float(np.max(np.abs(fine - bricard_reference["p3"])))
    assert error <= MARGIN * estimate + 1e-8, (error, estimate)
    assert error < 1e-5


def test_bricard_follows_the_published_plot(bricard_runs):
    times, errors = BRICARD.feature_errors(bricard_runs[0])
    assert times.size == len(BRICARD.PUBLISHED_FEATURES)
    assert errors.max() < BRICARD.FEATURE_TOLERANCE


def test_bricard_keeps_every_joint_equation(bricard_runs):
    # including the equation compile() removed: the motion satisfies all 30
    solution = bricard_runs[0]
    assert np.max(joint_closure(solution)) < 1e-12
    assert np.max(BRICARD.closure_residuals(solution)) < 1e-12
    energy = solution.energy()
    assert np.max(np.abs(energy - energy[0])) < 1e-12 * abs(energy[0])


def test_example_scripts_run_through_the_command_line(capsys):
    """``python examples/iftomm_pendulum.py --order 4 ...`` is ``mbs run``: the composed
    scheme, the comparison with the published values and the summary."""
    from mbs.cli import main

    assert main(["run", "iftomm-pendulum", "--order", "4", "--h", "0.01", "--t-end", "1",
                 "--quiet", "--progress", "off"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("solver em-order4  h = 0.01  steps = 100")
    assert "P1 against the published values" in out
