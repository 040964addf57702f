"""Per-model store of what solvers build from a Model and reuse across runs.

The step equations of a scheme (its polynomial system, predictor map and compiled kernel
data) depend only on the model, the scheme and the step size, and building them can cost more
than a short run. They are kept here, keyed weakly by the model, so a Model stays immutable
(no solver writes into it) and the store empties when the model is garbage collected.
"""

from __future__ import annotations

import threading
import weakref

_STORE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


def model_cache(model, kind: str) -> dict:
    """The dictionary of built objects of ``kind`` (e.g. "polynomial_systems") for ``model``,
    created empty on first use."""
    with _LOCK:
        per_model = _STORE.get(model)
        if per_model is None:
            per_model = _STORE[model] = {}
        return per_model.setdefault(kind, {})
