"""Argument checks shared by every public constructor (errors name the element and the fix)."""

from __future__ import annotations

import decimal
import numbers
import types
import typing

import numpy as np

from mbs.errors import ModelError, ModelTypeError

#: Largest magnitude accepted for any input number: squares and cubes of lengths, masses and
#: stiffnesses must stay finite in double precision. Rescale units beyond it.
MAX_MAGNITUDE = 1e100
#: Smallest positive value accepted for quantities that must be positive.
MIN_POSITIVE = 1e-100


def as_vector(value, length: int, what: str, owner: str) -> np.ndarray:
    """Return ``value`` as a finite float array of shape (length,) or raise a clear error.
    The array is a copy: an element keeps its values when the caller changes the array it
    was given (one array reused to set several bodies)."""
    try:
        array = np.array(value, dtype=float)
    except (TypeError, ValueError) as exc:
        raise ModelTypeError(f"{owner}: {what} must be {length} numbers, got {value!r}") from exc
    if array.shape != (length,):
        raise ModelError(f"{owner}: {what} must have {length} components, got shape "
                         f"{array.shape} ({value!r})")
    if not np.all(np.isfinite(array)):
        raise ModelError(f"{owner}: {what} must be finite, got {value!r}")
    if np.max(np.abs(array), initial=0.0) > MAX_MAGNITUDE:
        raise ModelError(f"{owner}: {what} has a component beyond {MAX_MAGNITUDE:.0e}; rescale "
                         f"the units")
    return array


#: How far from 1 the norm of a vector normalised in floating point can be (a few ulp).
UNIT_ROUNDOFF = 4.0 * np.finfo(float).eps


def as_nonzero_vector(value, what: str, owner: str) -> np.ndarray:
    """Return a finite non-zero 3-vector, normalised to unit length. A vector already of unit
    length to round-off is returned unchanged, so that normalising is idempotent (a saved
    and reloaded model has bitwise the same axes)."""
    array = as_vector(value, 3, what, owner)
    norm = np.linalg.norm(array)
    if norm == 0.0:
        raise ModelError(f"{owner}: {what} is the zero vector; give a direction such as "
                         f"(0, 0, 1)")
    if abs(norm - 1.0) <= UNIT_ROUNDOFF:
        return array
    return array / norm


def is_integer(value) -> bool:
    """Whether ``value`` is an integer (Python or numpy), not a bool."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def as_scalar(value, what: str, owner: str, *, positive: bool = False,
              non_negative: bool = False) -> float:
    """Return a finite float, optionally checked to be positive or non-negative."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real | np.ndarray):
        raise ModelTypeError(f"{owner}: {what} must be a real number, got {value!r}")
    try:
        number = float(value)
    except (TypeError, ValueError) as exc:
        raise ModelTypeError(f"{owner}: {what} must be a real number, got {value!r}") from exc
    if not np.isfinite(number):
        raise ModelError(f"{owner}: {what} must be finite, got {value!r}")
    if positive and number <= 0.0:
        raise ModelError(f"{owner}: {what} must be positive, got {number!r}")
    if abs(number) > MAX_MAGNITUDE or (positive and number < MIN_POSITIVE):
        raise ModelError(f"{owner}: {what} = {number!r} is outside the supported range "
                         f"[{MIN_POSITIVE:.0e}, {MAX_MAGNITUDE:.0e}]; rescale the units")
    if non_negative and number < 0.0:
        raise ModelError(f"{owner}: {what} must not be negative, got {number!r}")
    return number


def optional_damping(value, owner: str) -> float | None:
    """The damping coefficient of an element that damps optionally (a spring, a torsion
    spring, a joint): None for None or 0 (undamped, so that a sweep over damping values may
    start at 0), else a positive finite float."""
    if value is None:
        return None
    number = as_scalar(value, "damping", owner, non_negative=True)
    return None if number == 0.0 else as_scalar(number, "damping", owner, positive=True)


def check_name(name, kind: str) -> str:
    """Return ``name`` if it is a non-empty string."""
    if not isinstance(name, str) or not name:
        raise ModelTypeError(f"{kind}: name must be a non-empty string, got {name!r}")
    return name


#: Relative disagreement between a user's derivative and central differences of the function
#: it belongs to above which the derivative is reported as wrong (central differences of
#: relative step 1e-6 agree with a right derivative to about 1e-8).
DERIVATIVE_TOLERANCE = 1e-4


def difference_mismatch(function, derivative: np.ndarray, x: np.ndarray,
                        step: float = 1e-6, sizes: np.ndarray | float = 1.0,
                        steps: np.ndarray | None = None) -> float:
    """max |D - D_fd| / max(max |D|, max |D_fd|): ``derivative`` D (shape of function(x) plus
    one axis of x's size) against central differences D_fd of ``function`` at ``x``, each
    x_k stepped by ``steps[k]`` if given, else by ``step`` times max(|x_k|, sizes_k)
    (``sizes``: the natural size of each entry, so that small quantities are not stepped by
    an absolute ``step``)."""
    x = np.asarray(x, dtype=float)
    sizes = np.broadcast_to(np.asarray(sizes, dtype=float), x.shape)
    columns = []
    for k in range(x.size):
        h = steps[k] if steps is not None else step * max(sizes[k], abs(x[k]))
        e = np.zeros_like(x)
        e[k] = h
        columns.append((np.asarray(function(x + e), dtype=float)
                        - np.asarray(function(x - e), dtype=float)) / (2.0 * h))
    differences = np.stack(columns, axis=-1)
    derivative = np.asarray(derivative, dtype=float).reshape(differences.shape)
    scale = max(float(np.max(np.abs(derivative), initial=0.0)),
                float(np.max(np.abs(differences), initial=0.0)), 1e-300)
    return float(np.max(np.abs(derivative - differences), initial=0.0)) / scale


def _is_real(value) -> bool:
    """A real number: a Python or numpy real, a Decimal, or a 0-d real array (no bool)."""
    if isinstance(value, np.ndarray):
        return value.ndim == 0 and value.dtype.kind in "fiu"
    return (isinstance(value, numbers.Real | decimal.Decimal)
            and not isinstance(value, bool | np.bool_))


#: How an option declared bool, int, float or str is recognised (numpy scalars included; a
#: flag may be given as 0 or 1)
_DECLARED_TYPES = {
    bool: ("True or False", lambda v: isinstance(v, bool | np.bool_) or (
        isinstance(v, numbers.Integral) and v in (0, 1))),
    int: ("an integer", lambda v: (isinstance(v, numbers.Integral) and not isinstance(
        v, bool | np.bool_)) or (isinstance(v, np.ndarray) and v.ndim == 0
                                 and v.dtype.kind in "iu")),
    float: ("a real number", _is_real),
    str: ("a name", lambda v: isinstance(v, str)),
}


def check_option_types(kind: type, options: dict, owner: str) -> None:
    """Raise :class:`ModelTypeError` for an option of the dataclass ``kind`` whose value is
    not of the type its field declares, where that is bool, int, float or str (or a union of
    them, optionally with None): a text "no" for a flag would otherwise read as True, and
    "1e-10" for a tolerance fail deep inside. Fields of other types are the class's own to
    check."""
    hints = typing.get_type_hints(kind)
    for name, value in options.items():
        hint = hints.get(name)
        union = typing.get_origin(hint) in (typing.Union, types.UnionType)
        allowed = typing.get_args(hint) if union else (hint,)
        if value is None and type(None) in allowed:
            continue
        declared = [t for t in allowed if t is not type(None)]
        if not declared or any(t not in _DECLARED_TYPES for t in declared):
            continue
        if not any(_DECLARED_TYPES[t][1](value) for t in declared):
            expected = " or ".join(_DECLARED_TYPES[t][0] for t in declared)
            raise ModelTypeError(f"{owner}: option {name} must be {expected}"
                                 f"{' (or None)' if len(allowed) > len(declared) else ''}, "
                                 f"got {value!r}")
