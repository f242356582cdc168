"""Breaks SPEC 10: a periodic timer far behind does not skip the periods it missed.

It catches up one period at a time instead: after a long gap it is reported on each of the
next waits, once per missed period, a burst spread over back-to-back waits.  Each report
on its own looks right (one entry, TIMER, timers first); only their number is wrong.
"""

from __future__ import annotations

import time
from typing import Any

import iopoll
from iopoll import *  # noqa: F403  (every name of SPEC section 1)


class Context(iopoll.Context):  # type: ignore[no-redef]  # replaces the re-exported one
    """``wait()`` owes each periodic timer a report per period since it was added, and pays
    what the real timer skipped on the following waits."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # id(watcher) -> [watcher, monotonic time of add, reports so far]
        self._periodic: dict[int, list[Any]] = {}

    def add(self, handle: Any, events: Any, data: Any = None) -> Any:
        watcher = super().add(handle, events, data)
        if (
            isinstance(handle, iopoll.TimerHandle)
            and handle.periodic
            and not watcher.watched_events & iopoll.Event.ONESHOT
        ):
            self._periodic[id(watcher)] = [watcher, time.monotonic(), 0]
        return watcher

    def wait(self, timeout: Any = None, microseconds: Any = 0, max_events: Any = None) -> list[Any]:
        ready = super().wait(timeout, microseconds, max_events)
        now = time.monotonic()
        for key, entry in list(self._periodic.items()):
            watcher, start, paid = entry
            if not watcher.is_active():
                del self._periodic[key]
                continue
            owed = int((now - start) / watcher.handle.timeout.total_seconds())
            room = max_events is None or len(ready) < max_events
            if watcher in ready:
                entry[2] = paid + 1
            elif paid < owed and room:
                ready.insert(0, watcher)
                entry[2] = paid + 1
        return ready
