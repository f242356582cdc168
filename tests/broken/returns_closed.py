"""Breaks SPEC 6.8: a watcher whose stream was closed keeps coming out of ``wait()``.

Every watcher added and not removed whose stream is closed is returned, reporting ``HANGUP``.
"""

from __future__ import annotations

from typing import Any

import iopoll
from _iopoll_core.watcher import REMOVED
from iopoll import *  # noqa: F403  (every name of SPEC section 1)


class Context(iopoll.Context):  # type: ignore[no-redef]  # replaces the re-exported one
    """``wait()`` also returns the watchers of closed streams."""

    def __init__(self, backend: Any = iopoll.Backend.AUTO) -> None:
        super().__init__(backend)
        self.added: list[Any] = []

    def add(self, handle: Any, events: Any, data: Any = None) -> Any:
        watcher = super().add(handle, events, data)
        self.added.append(watcher)
        return watcher

    def wait(self, timeout: Any = None, microseconds: Any = 0, max_events: Any = None) -> list[Any]:
        ready = super().wait(timeout, microseconds, max_events)
        for watcher in self.added:
            if watcher._state != REMOVED and not watcher.handle.is_valid() and watcher not in ready:
                watcher._triggered = iopoll.Event.HANGUP
                ready.append(watcher)
        return ready
