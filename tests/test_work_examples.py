"""Physics of the gallery examples with loads, dampers and motors: motor-slider-crank,
flyball-governor and reaction-wheel, each run once with its recommended settings.

Tolerances (estimates, not fits to a run):

* EM's energy balance E_{n+1} - E_n = W_n holds up to Newton's tolerance (1e-12 relative
  increments) and round-off of O(n) sums: 1e-12 of the energy scale per step; the total
  angular momentum of the free satellite likewise to 1e-12 relative.
* Slider-crank: :func:`predicted_speed` balances the mean powers at constant crank speed and
  neglects terms of second order in the relative speed swing delta
  (:func:`speed_fluctuation`, ~7 % peak to peak, i.e. a variance of ~delta^2 / 8 times O(1)
  coefficients): the steady mean speed must match it to delta^2. The approach to it is
  exponential with the time constant of the linearised mean torque balance
  (:func:`run_up_time_constant`), which the measured decay of the revolution means must
  match to 25 % (the linearisation ignores the speed dependence of the reduced inertia's
  effect, O(delta)).
* Governor: the steady spin TAU(w) = C_LOAD w is exact at steady state (the sleeve damper is
  idle). The quasi-static time constant of the approach (balls following the speed) ignores
  the arms' own swing, whose period is not much shorter than it, so 15 %; from rest the deficit
  starts at w* and decays no slower than exp(-t / (1.15 tau)). The lift follows the speed
  through d lift / dw (twice that allowed), plus the second-order error of the relative
  equilibrium: the midpoint rule turns by 2 arctan(w h / 2) per step, a relative error
  (w h)^2 / 12.
* Reaction wheel: the yaw error of the closed loop I e'' + KD e' + KP e = 0 is
  :func:`predicted_error`; EM integrates this linear loop with a relative frequency error
  eps = (OMEGA_N h)^2 / 12, which shifts the error (1 + x) exp(-x) e0, x = OMEGA_N t, by
  eps x^2 exp(-x) |e0| <= 0.54 eps |e0| during the slew and by eps x^2 / (1 + x) relative
  at the end (1.5e-3 at x = 12): we allow 3 eps |e0| (about 6 times the estimate) and 1 %
  at the end. The peak wheel speed change is set by the peak yaw rate, to a few eps: 20 eps.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import mbs
from mbs.gallery import load_example


def run(name: str):
    """(module, solution) of a gallery example run with its recommended settings; compiling
    must raise no warning (no redundant constraint removed, no projection)."""
    module, recommended, _, _ = load_example(name)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model = module.build().compile()
        assert not model.redundancies
        solution = mbs.simulate(model, recommended["solver"], h=recommended["h"],
                                t_end=recommended["t_end"])
    assert solution.stats["completed"]
    return module, solution


def energy_balance_per_step(solution: mbs.Solution) -> float:
    """max |(E_{n+1} - E_n) - W_n| over the steps, relative to the energy scale."""
    energy = solution.energy()
    scale = max(float(np.max(np.abs(energy))), float(np.max(solution.kinetic_energy())),
                float(np.max(np.abs(solution.work))))
    return float(np.max(np.abs(np.diff(solution.energy_balance())))) / scale


# -- motor-driven slider-crank --------------------------------------------------------------------
@pytest.fixture(scope="module")
def slider_crank():
    return run("motor-slider-crank")


def test_slider_crank_runs_up_to_the_predicted_steady_speed(slider_crank):
    module, solution = slider_crank
    means = module.revolution_means(solution)
    assert means.size >= 15
    increments = np.diff(means)
    assert np.all(increments[3:] > 0.0)  # a monotone run-up, revolution by revolution
    # the increments decay geometrically with the run-up time constant
    durations = 2.0 * np.pi / means
    ratio = increments[-1] / increments[-2]
    measured_tau = -durations[-1] / np.log(ratio)
    assert measured_tau == pytest.approx(module.run_up_time_constant(), rel=0.25)
    # the remaining approach is a geometric series: its limit is the steady speed
    steady = means[-1] + increments[-1] * ratio / (1.0 - ratio)
    # from rest the deficit starts at the steady speed and decays with that time constant
    # (to 25 %): what remains at the end
    tau = module.run_up_time_constant()
    assert 0.0 < steady - means[-1] <= steady * np.exp(-solution.t[-1] / (1.25 * tau))
    delta = module.speed_fluctuation()
    assert 0.03 < delta < 0.15
    assert steady == pytest.approx(module.predicted_speed(), rel=delta**2)


def test_slider_crank_energy_balance_and_work_split(slider_crank):
    module, solution = slider_crank
    assert energy_balance_per_step(solution) <= 1e-12
    works = module.element_work(solution)
    assert set(works) == {"motor", "dashpot", "gas"}
    # per step, the elements' work adds up to the scheme's (the same terms, summed
    # differently): to the accuracy of the balance
    energy_scale = max(float(np.max(np.abs(solution.energy()))),
                       float(np.max(np.abs(solution.work))))
    total = sum(works.values())
    assert np.max(np.abs(np.diff(total - solution.work))) <= 1e-12 * energy_scale
    assert np.all(np.diff(works["motor"]) > 0.0)  # the motor drives below no-load speed
    assert np.all(np.diff(works["dashpot"]) <= 0.0) and np.all(np.diff(works["gas"]) <= 0.0)
    assert "mean crank speed over the last revolution" in module.report(solution)


# -- flyball governor -----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def governor():
    return run("flyball-governor")


def test_governor_has_two_degrees_of_freedom_and_no_redundancy():
    module, *_ = load_example("flyball-governor")
    model = module.build().compile()
    assert model.degrees_of_freedom == 2 and not model.redundancies


def test_governor_settles_at_the_steady_spin_with_the_balls_lifted(governor):
    module, solution = governor
    h = solution.stats["h"]
    spin = solution.joint("bearing").rate
    lift = solution.joint("sleeve_guide").position
    w_star, tau = module.steady_speed(), module.settling_time_constant()
    assert module.steady_lift() > 0.05  # the balls fly out: the sleeve rises by ~10 cm
    # the spin deficit decays at the quasi-static rate
    deficit = w_star - spin
    late = solution.t >= solution.t[-1] / 2.0
    slope = np.polyfit(solution.t[late], np.log(deficit[late]), 1)[0]
    assert -1.0 / slope == pytest.approx(tau, rel=0.15)
    assert 0.0 < deficit[-1] <= w_star * np.exp(-solution.t[-1] / (1.15 * tau))
    # the lift follows the speed
    step = 1e-4
    lift_per_speed = (module.steady_lift(w_star + step)
                      - module.steady_lift(w_star - step)) / (2.0 * step)
    tolerance = (2.0 * abs(lift_per_speed) * deficit[-1]
                 + (w_star * h) ** 2 / 12.0 * module.steady_lift())
    assert lift[-1] == pytest.approx(module.steady_lift(), abs=tolerance)
    assert "spindle speed" in module.report(solution)


def test_governor_energy_balance(governor):
    _, solution = governor
    assert energy_balance_per_step(solution) <= 1e-12
    assert solution.work[-1] > 0.0  # the motor's work exceeds what machine and damper take


# -- reaction wheel -------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def reaction_wheel():
    return run("reaction-wheel")


def test_reaction_wheel_slews_to_the_commanded_yaw(reaction_wheel):
    module, solution = reaction_wheel
    h, t = solution.stats["h"], solution.t
    error = module.yaw_error(solution)
    predicted = module.predicted_error(t)
    e0 = module.YAW_START - module.YAW_COMMAND
    assert error[0] == pytest.approx(e0, abs=1e-14)
    eps = (module.OMEGA_N * h) ** 2 / 12.0
    assert np.max(np.abs(error - predicted)) <= 3.0 * eps * abs(e0)
    assert error[-1] == pytest.approx(predicted[-1], rel=0.01)
    assert abs(error[-1]) < np.radians(0.01)  # 24 s = 12 / OMEGA_N: pointed to 0.005 deg


def test_reaction_wheel_speed_follows_from_the_momentum(reaction_wheel):
    module, solution = reaction_wheel
    wheel = solution.joint("wheel_bearing").rate
    inertia_z = module.satellite_inertia_z()
    inertia_w = 0.5 * module.WHEEL_MASS * module.WHEEL_RADIUS**2
    # H = I_z yaw' + I_w (yaw' + wheel) = I_w WHEEL_BIAS: the wheel absorbs the slew rate
    ratio = (inertia_z + inertia_w) / inertia_w
    e0 = module.YAW_START - module.YAW_COMMAND
    peak_rate = abs(e0) * module.OMEGA_N / np.e  # max |e'| of the critically damped loop
    assert wheel[0] == pytest.approx(module.WHEEL_BIAS, rel=1e-14)
    eps = (module.OMEGA_N * solution.stats["h"]) ** 2 / 12.0
    assert wheel.min() == pytest.approx(module.WHEEL_BIAS - ratio * peak_rate, rel=20 * eps)
    yaw_rate = solution.body("satellite").angular_velocity[:, 2]
    np.testing.assert_allclose(wheel, module.WHEEL_BIAS - ratio * yaw_rate, rtol=0,
                               atol=1e-11 * module.WHEEL_BIAS)


def test_reaction_wheel_conserves_angular_momentum_and_balances_energy(reaction_wheel):
    module, solution = reaction_wheel
    assert module.momentum_drift(solution) <= 1e-12
    momentum = solution.angular_momentum()[0]
    inertia_w = 0.5 * module.WHEEL_MASS * module.WHEEL_RADIUS**2
    np.testing.assert_allclose(momentum, [0.0, 0.0, inertia_w * module.WHEEL_BIAS],
                               rtol=0, atol=1e-14)
    assert energy_balance_per_step(solution) <= 1e-12
    assert "max |H - H0| / |H0|" in module.report(solution)
