"""Breaks SPEC 10: a process watcher is reported on two waits, not once per context: the
wait after the one that reported the exit reports it again."""

from __future__ import annotations

from typing import Any

import iopoll
from iopoll import *  # noqa: F403  (every name of SPEC section 1)


class Context(iopoll.Context):  # type: ignore[no-redef]  # replaces the re-exported one
    """``wait()`` returns again the process watchers the previous ``wait()`` returned."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._again: list[Any] = []

    def wait(self, timeout: Any = None, microseconds: Any = 0, max_events: Any = None) -> list[Any]:
        ready = super().wait(timeout, microseconds, max_events)
        again, self._again = self._again, []
        for watcher in again:
            room = max_events is None or len(ready) < max_events
            if watcher.is_active() and watcher not in ready and room:
                ready.append(watcher)
        self._again = [
            watcher
            for watcher in ready
            if isinstance(watcher.handle, iopoll.ProcessHandle) and watcher not in again
        ]
        return ready
