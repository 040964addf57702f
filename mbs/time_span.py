"""The times of a run: its output nodes, and the span on which laws of time are evaluated.

A run of N steps of size h from t_start has the nodes t_start + k h. Their floating-point
values drift from the decimal times a user has in mind (3 * 0.1 is 0.30000000000000004), so
the last node, when it is t_end up to rounding, is t_end itself; and while a run goes on, a
law of time (a load, an actuator's torque, a drive's position) asked for its value a few
rounding units past an end of the run is evaluated at that end. A law given as a table on
[t_start, t_end] is then never read outside it by the schemes whose stages lie within their
steps; the sub-steps of compositions (``order=4`` or ``6``) reach beyond their step, and
read laws up to 0.35 h outside the run (see :mod:`mbs.solvers.composition`).
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

import numpy as np

#: Times that differ by at most this fraction of the run's time scale (|t_start| + |t_end|)
#: are the same time: a node time is one product and one sum, a scheme's stage time a few
#: sums more, each rounded by at most eps of that scale.
TIME_ROUNDING = 64.0 * np.finfo(float).eps
#: ... and by at most this fraction of a step: far from t = 0, where the rounding of t
#: exceeds it, a step that does not reach t_end by more (which simulate warns about) keeps
#: its own end, and a law's values a small time apart (a drive's rate by differences) stay
#: apart.
STEP_FRACTION = 1e-6

_SPAN: contextvars.ContextVar[tuple[float, float, float] | None] = contextvars.ContextVar(
    "mbs_run_span", default=None)


def _same_time(t: float, reference: float, start: float, end: float, h: float) -> bool:
    tolerance = min(TIME_ROUNDING * (abs(start) + abs(end)), STEP_FRACTION * h)
    return abs(t - reference) <= tolerance


def last_node_time(t_start: float, h: float, steps: int, t_end: float) -> float:
    """The time of a run's last node: ``t_end`` when t_start + steps h is t_end up to
    rounding, else t_start + steps h (a step that does not divide the interval)."""
    reached = t_start + steps * h
    return t_end if _same_time(reached, t_end, t_start, t_end, h) else reached


def node_times(t_start: float, h: float, first: int, last: int,
               end: float | None = None) -> np.ndarray:
    """The times of nodes ``first`` .. ``last`` of a run, t_start + k h, with node ``last``
    at ``end`` when given (the run's :func:`last_node_time`, for a run that reached it)."""
    times = t_start + h * np.arange(first, last + 1)
    if end is not None and times.size:
        times[-1] = end
    return times


@contextlib.contextmanager
def evaluation_span(t_start: float, t_end: float, h: float) -> Iterator[None]:
    """Laws of time evaluated inside the block, by a run of step ``h``, are read on
    [t_start, t_end] (see :func:`within_span`); the span is the calling thread's (and
    context's)."""
    token = _SPAN.set((t_start, t_end, h))
    try:
        yield
    finally:
        _SPAN.reset(token)


def within_span(t: float) -> float:
    """``t``, or the end of the running simulation's span that it is up to rounding (the
    stage times of the last step, summed from t_start in floating point, land a few units of
    rounding past t_end)."""
    span = _SPAN.get()
    if span is None:
        return t
    start, end, h = span
    if t > end and _same_time(t, end, start, end, h):
        return end
    if t < start and _same_time(t, start, start, end, h):
        return start
    return t
