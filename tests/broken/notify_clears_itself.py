"""Breaks SPEC 10: a notify watcher is not level-triggered: ``wait()`` clears the handle of
each notify watcher it reports, so it is reported once per ``notify()``, not until
``clear()``."""

from __future__ import annotations

from typing import Any

import iopoll
from iopoll import *  # noqa: F403  (every name of SPEC section 1)


class Context(iopoll.Context):  # type: ignore[no-redef]  # replaces the re-exported one
    """``wait()`` calls ``clear()`` on the NotifyHandle of every watcher it returns."""

    def wait(self, timeout: Any = None, microseconds: Any = 0, max_events: Any = None) -> list[Any]:
        ready = super().wait(timeout, microseconds, max_events)
        for watcher in ready:
            if isinstance(watcher.handle, iopoll.NotifyHandle):
                watcher.handle.clear()
        return ready
