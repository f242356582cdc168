"""Breaks SPEC 6.1: adding an fd already watched replaces its watcher instead of raising
``HandleAlreadyWatchedError``."""

from __future__ import annotations

from typing import Any

import iopoll
from iopoll import *  # noqa: F403  (every name of SPEC section 1)


class Context(iopoll.Context):  # type: ignore[no-redef]  # replaces the re-exported one
    """``add()`` of a watched fd: the last one wins."""

    def add(self, handle: Any, events: Any, data: Any = None) -> Any:
        try:
            return super().add(handle, events, data)
        except iopoll.HandleAlreadyWatchedError:
            fd = handle if isinstance(handle, int) else handle.fileno()
            self._watchers[fd].remove()
            return super().add(handle, events, data)
