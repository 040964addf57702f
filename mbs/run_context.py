"""What every run sets up around its steps: single-threaded BLAS and a progress bar."""

from __future__ import annotations

import contextlib

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
