"""Every gallery example builds, compiles, and runs a few steps with its recommended solver."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import mbs
from mbs.gallery import EXAMPLES, available, load_example

NAMES = list(EXAMPLES)


@pytest.mark.parametrize("name", NAMES)
def test_example_runs_a_few_steps(name):
    if not available(name):
        pytest.skip(f"example module for {name!r} is not in examples/")
    module, recommended, viz_options, title = load_example(name)
    assert {"solver", "h", "t_end"} <= set(recommended) and title
    assert set(viz_options) <= {"camera", "follow", "view", "zoom", "center", "trails",
                                "directors", "visuals", "joints", "forces", "ground_plane"}
    system = module.build()
    assert isinstance(system, mbs.System)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = system.compile()
    assert model.is_consistent(*model.initial_state())
    # planar loops of hinges repeat out-of-plane equations: removed, and consistent
    assert all(redundancy.consistent for redundancy in model.redundancies)
    assert all("redundant" in str(w.message) for w in caught)
    h = recommended["h"]
    solution = mbs.simulate(model, recommended["solver"], h=h, t_end=3 * h)
    assert len(solution.t) == 4
    energy = solution.energy()  # or its balance with the work of loads and motors
    assert np.max(np.abs(solution.energy_balance())) <= 1e-9 * max(1.0, abs(energy[0]))
    assert "energy" in solution.conservation_summary()
    report = getattr(module, "report", None)
    if report is not None:
        assert isinstance(report(solution), str)


def test_new_examples_define_settings():
    for name in ("dzhanibekov", "satellite-libration", "double-pendulum", "four-bar",
                 "slider-crank", "chain"):
        module, *_ = load_example(name)
        assert set(module.RECOMMENDED) == {"solver", "h", "t_end"}
        assert callable(module.build)


def test_linkages_have_one_degree_of_freedom():
    for name in ("four-bar", "slider-crank"):
        module, *_ = load_example(name)
        assert module.build().compile().degrees_of_freedom == 1


def test_dzhanibekov_flips():
    module, *_ = load_example("dzhanibekov")
    solution = mbs.simulate(module.build().compile(), "em", h=0.01, t_end=1.0)
    assert module.flip_times(solution).size >= 1


def test_satellite_librates_at_the_predicted_period():
    module, *_ = load_example("satellite-libration")
    solution = mbs.simulate(module.build(np.radians(5.0)).compile(), "em", h=0.05, t_end=10.0)
    assert module.measured_period(solution) == pytest.approx(module.predicted_period(), rel=0.02)


def test_satellite_liegroup_example_compares_both_formulations():
    import satellite_liegroup

    text = satellite_liegroup.main(["--t-end", "1.6", "--animation", ""])
    assert "director, em" in text and "lie-group, vrkmk gauss-2" in text
