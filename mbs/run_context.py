"""What every run sets up around its steps: single-threaded BLAS, subnormal numbers flushed
to zero, a progress bar, and Ctrl-C held back while a stream is written."""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import platform
import signal
import sys
import threading
from collections.abc import Iterator

from threadpoolctl import ThreadpoolController

from mbs.errors import ModelTypeError

#: A bar appears (with ``progress=None``, the default) once a run has taken this long.
PROGRESS_DELAY_SECONDS = 3.0

_CONTROLLER: ThreadpoolController | None = None


def single_threaded_blas() -> contextlib.AbstractContextManager:
    """BLAS limited to one thread for the run. Multithreaded BLAS only adds synchronisation
    cost here: the dense solves of small models are tiny, and the sparse path does vector
    operations and SuperLU's small supernodes; when other processes share the cores, the
    threads wait on each other and a step becomes many times slower. One controller per
    process, because discovering the BLAS libraries is not free."""
    global _CONTROLLER
    if _CONTROLLER is None:
        _CONTROLLER = ThreadpoolController()
    return _CONTROLLER.limit(limits=1, user_api="blas")


def progress_bar(total: int, label: str, progress: bool | None, initial: int = 0,
                 unit: str = "step"):
    """A tqdm bar over ``total`` steps (or other ``unit``s), or None.

    ``progress``: True always shows it, False never; None (automatic) shows it on an
    interactive terminal once the run has taken :data:`PROGRESS_DELAY_SECONDS`, so that
    short runs and logs stay clean.
    """
    if progress not in (True, False, None):  # "no" or 0.5 would read as True
        raise ModelTypeError(f"progress must be True, False or None (automatic), got "
                             f"{progress!r}")
    if progress is not None and not progress:
        return None
    try:
        from tqdm.auto import tqdm
    except ImportError:  # pragma: no cover - tqdm is a dependency
        return None
    automatic = progress is None
    return tqdm(total=total, initial=initial, desc=f"mbs {label}", unit=unit, leave=False,
                delay=PROGRESS_DELAY_SECONDS if automatic else 0.0,
                disable=None if automatic else False)


#: MXCSR bits of x86-64: FTZ (results below the smallest normal number become 0) and DAZ
#: (subnormal operands read as 0).
_FLUSH_TO_ZERO_BITS = 0x8040
#: Its floating-point exception masks, all set in a Python process.
_EXCEPTION_MASKS = 0x1F80
#: Offset of the MXCSR word in glibc's x86-64 ``fenv_t`` (32 bytes; <bits/fenv.h>).
_MXCSR_OFFSET = 28
_FENV_BYTES = 32


@functools.cache
def _libm() -> ctypes.CDLL | None:
    """glibc's libm where the MXCSR can be set through fegetenv/fesetenv (Linux, x86-64),
    else None."""
    if not (sys.platform.startswith("linux") and platform.machine() in ("x86_64", "AMD64")):
        return None
    name = ctypes.util.find_library("m")
    try:
        return ctypes.CDLL(name) if name else None
    except OSError:
        return None


def _environments() -> tuple[ctypes.Array, ctypes.Array] | None:
    """(the thread's floating-point environment, the same with FTZ and DAZ set), or None
    where the MXCSR cannot be set (or does not hold the expected exception masks)."""
    libm = _libm()
    saved = ctypes.create_string_buffer(64)
    if libm is None or libm.fegetenv(saved) != 0:
        return None
    flushed = bytearray(saved.raw[:_FENV_BYTES])
    mxcsr = int.from_bytes(flushed[_MXCSR_OFFSET:_MXCSR_OFFSET + 4], "little")
    if mxcsr & _EXCEPTION_MASKS != _EXCEPTION_MASKS:
        return None
    flushed[_MXCSR_OFFSET:_MXCSR_OFFSET + 4] = (mxcsr | _FLUSH_TO_ZERO_BITS).to_bytes(
        4, "little")
    return saved, ctypes.create_string_buffer(bytes(flushed), 64)


@contextlib.contextmanager
def subnormals_flushed() -> Iterator[None]:
    """Subnormal numbers (below 2.2e-308) flushed to zero while the block runs, on Linux
    x86-64 (elsewhere a no-op).

    Components that decay towards zero (the out-of-plane motion of a planar mechanism started
    from a state with round-off in it, a damped mode) reach the subnormal range after a
    few hundred steps; arithmetic on subnormals takes a slow path in the processor, and a
    step with many of them costs several times a normal one. Values that small are zero for
    every model, and results without them are bitwise the same. The setting is the calling
    thread's (the run's BLAS is single-threaded) and is restored afterwards."""
    environments = _environments()
    if environments is None or _libm().fesetenv(environments[1]) != 0:
        yield
        return
    try:
        yield
    finally:
        _libm().fesetenv(environments[0])


@contextlib.contextmanager
def interrupts_deferred() -> Iterator[None]:
    """Ctrl-C (SIGINT) held back until the block is done, then delivered to the handler it
    was meant for (Python's raises KeyboardInterrupt; an ignored SIGINT stays ignored): for
    steps that must happen together or not at all (a flush of a stream and the bookkeeping
    that records it). Outside the main thread, where no handler can be set, the block runs
    as it is."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received = []
    try:
        previous = signal.signal(signal.SIGINT, lambda number, frame: received.append(number))
    except (ValueError, OSError):  # no signal handling here (an embedded interpreter)
        yield
        return
    try:
        yield
    finally:
        # None: a handler not set from Python; Python's own is the nearest equivalent
        signal.signal(signal.SIGINT, signal.default_int_handler if previous is None
                      else previous)
        if received:  # delivered now to the handler it was meant for (or ignored)
            signal.raise_signal(signal.SIGINT)
