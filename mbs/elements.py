"""Base class of everything a user adds to a :class:`mbs.System`."""

from __future__ import annotations

import itertools

_counter = itertools.count(1)


class Element:
    """Something a system is built from: a body, a joint or a force.

    Parameters
    ----------
    name : str or None
        Unique name within the system. When omitted, :meth:`mbs.System.add` names the element
        ``"<kind><k>"`` with the first k not taken in that system (``body1``, ``joint1``, ...);
        before that it carries a provisional name of the same form.
    """

    kind = "element"

    def __init__(self, name: str | None = None):
        from mbs.validation import check_name

        self.name = (check_name(name, type(self).__name__) if name is not None
                     else f"{self.kind}{next(_counter)}")
        self.name_given = name is not None
        self.system = None  # set by System.add

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"
