"""Breaks SPEC 6.4: a ``ONESHOT`` watcher is re-armed as soon as it is reported, so it keeps
firing like a level-triggered one."""

from __future__ import annotations

from typing import Any

import iopoll
from iopoll import *  # noqa: F403  (every name of SPEC section 1)


class Context(iopoll.Context):  # type: ignore[no-redef]  # replaces the re-exported one
    """``wait()`` re-arms every one-shot watcher it returns."""

    def wait(self, timeout: Any = None, microseconds: Any = 0, max_events: Any = None) -> list[Any]:
        ready = super().wait(timeout, microseconds, max_events)
        for watcher in ready:
            if watcher.watched_events & iopoll.Event.ONESHOT:
                watcher.modify_events(watcher.watched_events)
        return ready
