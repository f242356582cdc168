"""Breaks SPEC 6.3: a level-triggered watcher still ready with the same events is not
reported again on the next ``wait()`` (it behaves as edge-triggered)."""

from __future__ import annotations

from typing import Any

import iopoll
from iopoll import *  # noqa: F403  (every name of SPEC section 1)


class Context(iopoll.Context):  # type: ignore[no-redef]  # replaces the re-exported one
    """``wait()`` leaves out what the previous ``wait()`` reported unchanged."""

    def __init__(self, backend: Any = iopoll.Backend.AUTO) -> None:
        super().__init__(backend)
        self.previous: dict[int, Any] = {}

    def wait(self, timeout: Any = None, microseconds: Any = 0, max_events: Any = None) -> list[Any]:
        ready = super().wait(timeout, microseconds, max_events)
        now = {id(w): w.triggered_events for w in ready}
        fresh = [w for w in ready if self.previous.get(id(w)) != w.triggered_events]
        self.previous = now
        return fresh
