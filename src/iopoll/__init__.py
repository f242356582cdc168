"""iopoll: I/O readiness with watchers, one-shot and edge-triggered modes, on epoll, kqueue,
poll and select.  The Python counterpart of PHP 8.6's ``Io\\Poll``.

    import iopoll, socket

    a, b = socket.socketpair()
    with iopoll.Context() as ctx:
        watcher = ctx.add(b, iopoll.Event.READ, data="b")
        a.send(b"ping")
        for ready in ctx.wait(timeout=1):
            print(ready.data, ready.triggered_events)
"""

from _iopoll_core.errors import (
    BackendUnavailableError,
    FailedContextInitializationError,
    FailedHandleAddError,
    FailedPollOperationError,
    FailedPollWaitError,
    FailedWatcherModificationError,
    HandleAlreadyWatchedError,
    InactiveWatcherError,
    InvalidHandleError,
    PollError,
)
from _iopoll_core.events import ErrorCode, Event
from _iopoll_core.handles import Handle, StreamPollHandle

from ._native import Backend, Context, Watcher

__version__ = "0.1.0"

__all__ = [
    "Backend",
    "BackendUnavailableError",
    "Context",
    "ErrorCode",
    "Event",
    "FailedContextInitializationError",
    "FailedHandleAddError",
    "FailedPollOperationError",
    "FailedPollWaitError",
    "FailedWatcherModificationError",
    "Handle",
    "HandleAlreadyWatchedError",
    "InactiveWatcherError",
    "InvalidHandleError",
    "PollError",
    "StreamPollHandle",
    "Watcher",
]
