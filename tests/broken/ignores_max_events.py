"""Breaks SPEC 4: ``wait()`` returns every ready watcher, whatever ``max_events`` says.

A bad ``max_events`` is still refused: only the limit itself is ignored.
"""

from __future__ import annotations

from typing import Any

import iopoll
from iopoll import *  # noqa: F403  (every name of SPEC section 1)


class Context(iopoll.Context):  # type: ignore[no-redef]  # replaces the re-exported one
    """``wait()`` validates ``max_events``, then returns everything."""

    def wait(self, timeout: Any = None, microseconds: Any = 0, max_events: Any = None) -> list[Any]:
        if type(max_events) is int and 1 <= max_events <= 2**31 - 1:
            max_events = None
        return super().wait(timeout, microseconds, max_events)
