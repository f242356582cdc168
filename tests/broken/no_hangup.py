"""Breaks SPEC 6.2: ``HANGUP`` is never reported (a watcher left with nothing is dropped)."""

from __future__ import annotations

from typing import Any

import iopoll
from iopoll import *  # noqa: F403  (every name of SPEC section 1)


class Context(iopoll.Context):  # type: ignore[no-redef]  # replaces the re-exported one
    """``wait()`` strips ``HANGUP`` from what it reports."""

    def wait(self, timeout: Any = None, microseconds: Any = 0, max_events: Any = None) -> list[Any]:
        ready = []
        for watcher in super().wait(timeout, microseconds, max_events):
            watcher._triggered &= ~iopoll.Event.HANGUP
            if watcher._triggered:
                ready.append(watcher)
        return ready
