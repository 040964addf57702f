"""Newton's starting point from past defects: fitted linear prediction against analytic
sequences, and its effect on the constrained Lobatto steps of a spinning top."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

import mbs
from mbs.backends import compiled
from mbs.engine.defects import fitted_prediction
from mbs.solvers import Lobatto


def quasi_periodic(times: np.ndarray, columns: int, seed: int = 0) -> np.ndarray:
    """Rows d_t = sum_k a_k cos(w_k t) + b_k sin(w_k t) with two frequencies (1.0 and 0.37
    rad per step, as a spin and a precession sampled by a large step) and random vectors."""
    rng = np.random.default_rng(seed)
    rows = np.zeros((times.size, columns))
    for frequency in (1.0, 0.37):
        rows += np.outer(np.cos(frequency * times), rng.standard_normal(columns))
        rows += np.outer(np.sin(frequency * times), rng.standard_normal(columns))
    return rows


@pytest.mark.parametrize("blocks", [[0, 30], [0, 12, 30]])
def test_two_frequencies_are_predicted_to_roundoff(blocks):
    """Two frequencies obey a linear recurrence of order 4 (characteristic roots
    exp(+-i w_k)), which the fit finds from 8 samples; the polynomial extrapolation of degree 3
    through the last 4 samples is off by O(1) at one radian per sample."""
    times = np.arange(9.0)
    rows = quasi_periodic(times, 30)
    prediction = fitted_prediction(rows[:8], 4, np.array(blocks))
    assert np.abs(prediction - rows[8]).max() <= 1e-6 * np.abs(rows).max()
    polynomial = 4 * rows[7] - 6 * rows[6] + 4 * rows[5] - rows[4]
    assert np.abs(polynomial - rows[8]).max() >= 0.1 * np.abs(rows).max()


def test_polynomial_sequences_and_zero_blocks():
    """A cubic in t is predicted as the polynomial extrapolation predicts it (the binomial
    coefficients are one solution of the fit); a block of zeros gives zeros, not NaN."""
    times = np.arange(9.0)
    rng = np.random.default_rng(1)
    coefficients = rng.standard_normal((4, 6))
    rows = np.zeros((9, 10))
    rows[:, :6] = np.vander(times, 4) @ coefficients
    prediction = fitted_prediction(rows[:8], 4, np.array([0, 6, 10]))
    assert np.all(np.isfinite(prediction))
    np.testing.assert_array_equal(prediction[6:], 0.0)
    assert np.abs(prediction[:6] - rows[8, :6]).max() <= 1e-5 * np.abs(rows).max()


@pytest.mark.parametrize("backend", ["auto", "compiled"])
def test_fitted_prediction_cuts_the_newton_iterations_of_a_spinning_top(backend):
    """Heavy top (spin 136 rad/s), four stages, h = 1/256: 0.53 rad of spin per step. The
    continued stage polynomial plus the cubic extrapolation of the defects leaves a first
    Newton increment of ~4e-2 (3 iterations and 2 factorisations per step); the fitted
    prediction leaves ~3e-4, so the factorisation is kept and the second iteration
    converges. Same trajectory to the Newton tolerance either way."""
    import heavy_top

    if backend == "compiled" and not compiled.available():
        pytest.skip("needs numba")
    model = heavy_top.build().compile()
    runs = {}
    for correction in ("auto", 3):
        solver = Lobatto(stages=4, backend=backend, predictor_correction=correction)
        runs[correction] = mbs.simulate(model, solver, h=1 / 256, t_end=0.5)
    fitted, polynomial = runs["auto"], runs[3]
    # the first 2 r + 1 steps use the polynomial while the fit waits for its 2 r defects
    assert np.mean(fitted.stats["newton_iterations"][20:]) <= 2.1
    assert np.mean(polynomial.stats["newton_iterations"][20:]) >= 2.9
    scale = np.abs(polynomial.q).max()
    assert np.abs(fitted.q - polynomial.q).max() <= 1e-10 * scale


@pytest.mark.parametrize("theta", [1.0, 0.5])
@pytest.mark.parametrize("name", ["double_pendulum", "four_bar", "heavy_top"])
def test_the_explicit_guess_of_ggl_vi_b_saves_iterations(name, theta):
    """Variant B's explicit guess applies the multiplier impulse of its velocity equation
    (82c) with the last step's multipliers: its error is then O(h^2)
    smaller than that of seed 003's advanced guess q^n + h M^-1 p^n, which saves Newton an
    iteration per step on mechanisms that hold loads through their joints. Both guesses lead
    to the same solution, to Newton's tolerance: their difference is below a millionth of the
    discretisation error (estimated by the run at h/2)."""
    model = importlib.import_module(name).build().compile()

    def run(guess, h=2e-3):
        solver = mbs.solvers.GGLVI(variant="B", theta=theta, initial_guess=guess)
        return mbs.simulate(model, solver, h=h, t_end=0.4, progress=False)

    explicit, advanced, halved = run("explicit"), run("advanced"), run("explicit", 1e-3)
    assert explicit.stats["guess_retries"] == 0
    assert (np.mean(explicit.stats["newton_iterations"])
            <= np.mean(advanced.stats["newton_iterations"]) - 0.5)
    discretisation_error = np.abs(halved.q[::2] - explicit.q).max()
    assert np.abs(explicit.q - advanced.q).max() <= 1e-6 * discretisation_error
