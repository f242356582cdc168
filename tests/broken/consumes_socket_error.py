"""Breaks SPEC 6.2: ``wait()`` reads the socket error it reports, so the application cannot."""

from __future__ import annotations

import socket
from typing import Any

import iopoll
from iopoll import *  # noqa: F403  (every name of SPEC section 1)


class Context(iopoll.Context):  # type: ignore[no-redef]  # replaces the re-exported one
    """``wait()`` reads ``SO_ERROR`` of every socket it reports with ``ERROR``, clearing it."""

    def wait(self, timeout: Any = None, microseconds: Any = 0, max_events: Any = None) -> list[Any]:
        ready = super().wait(timeout, microseconds, max_events)
        for watcher in ready:
            stream = getattr(watcher.handle, "stream", None)
            if watcher.has_triggered(iopoll.Event.ERROR) and isinstance(stream, socket.socket):
                stream.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        return ready
