"""Exception types raised by mbs.

Every error raised on bad user input is an :class:`MbsError`; the concrete classes also derive
from the built-in type a Python user would expect (``ValueError``, ``TypeError``,
``RuntimeError``) so that generic handlers keep working.
"""

from __future__ import annotations

import os
import sys
import warnings
from typing import Any


class MbsError(Exception):
    """Base class of every exception raised by mbs."""


class ModelError(MbsError, ValueError):
    """A mechanism description is invalid (bad parameter, unknown body, inconsistent data)."""


class UnknownNameError(ModelError, KeyError):
    """A body, joint, drive or element looked up by a name the system or model does not have
    (a ``ModelError`` that is also a ``KeyError``, as dictionary lookups raise)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class ModelTypeError(MbsError, TypeError):
    """An argument has the wrong type (e.g. a joint given something that is not a body)."""


class InconsistentInitialStateError(ModelError):
    """The initial state violates the position or velocity constraints.

    Attributes
    ----------
    position_residual, velocity_residual : float
        Max-norms of g(q0) and G(q0) M^-1 p0.
    """

    def __init__(self, message: str, position_residual: float, velocity_residual: float):
        super().__init__(message)
        self.position_residual = position_residual
        self.velocity_residual = velocity_residual


class SolutionFileNotFoundError(MbsError, FileNotFoundError):
    """:func:`mbs.load_solution` was given a path with no file (also a
    ``FileNotFoundError``, so generic handlers catch it)."""


class SolverError(MbsError, RuntimeError):
    """A time integration failed.

    Attributes
    ----------
    solution : Solution
        Every step accepted before the failure.
    step, time : int, float
        Index and start time of the failed step.
    residual_norm : float
        Max-norm of the scheme's residual at the last Newton iterate.
    hint : str
        What to try (smaller step, check redundancies, ...).
    """

    def __init__(self, message: str, solution: Any = None, step: int | None = None,
                 time: float | None = None, residual_norm: float | None = None,
                 hint: str = ""):
        super().__init__(message)
        self.solution = solution
        self.step = step
        self.time = time
        self.residual_norm = residual_norm
        self.hint = hint


class SimulationError(SolverError):
    """A run stopped by an error that is not a solver failure (an exception in user code
    such as a potential, a failing stream write): ``solution`` holds every step accepted
    before it and the original exception is the ``__cause__``."""


class ForceFunctionError(SimulationError):
    """A user function of a load, actuator, drive, user potential or user constraint failed
    or returned a wrong shape or a non-finite value; the message names the element. Raised by
    :func:`mbs.simulate` with ``solution`` holding every step accepted before."""


class SimulationInterrupted(MbsError, KeyboardInterrupt):  # noqa: N818 - reads as an event
    """Ctrl-C during :func:`mbs.simulate`; ``solution`` holds every completed step."""

    def __init__(self, message: str, solution: Any = None):
        super().__init__(message)
        self.solution = solution


_PACKAGE_DIRECTORY = os.path.dirname(os.path.abspath(__file__)) + os.sep


def warn_user(message: str, category: type[Warning] = UserWarning) -> None:
    """``warnings.warn`` attributed to the line of the user's code that called into mbs
    (the first caller outside the package), however deep inside mbs the cause was found."""
    frame, level = sys._getframe(1), 2
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(
            _PACKAGE_DIRECTORY):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, category, stacklevel=level)
