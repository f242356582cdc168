"""iopoll: I/O readiness with watchers, one-shot and edge-triggered modes, on epoll, kqueue,
poll and select.  The Python counterpart of PHP 8.6's ``Io\\Poll``.

    import iopoll, socket

    a, b = socket.socketpair()
    with iopoll.Context() as ctx:
        watcher = ctx.add(b, iopoll.Event.READ, data="b")
        a.send(b"ping")
        for ready in ctx.wait(timeout=1):
            print(ready.data, repr(ready.triggered_events))  # b <Event.READ: 1>
"""

from _iopoll_core.api import *  # noqa: F403  (the names every implementation shares)

from ._native import Backend as Backend
from ._native import Context as Context
from ._native import Watcher as Watcher

__version__ = "0.1.0"

# SPEC sections 1 and 10; tests/test_public_names.py holds it to docs/SPEC.md.
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
    "NotifyHandle",
    "PollError",
    "ProcessHandle",
    "SignalHandle",
    "StreamPollHandle",
    "StreamPollWeakHandle",
    "TimerHandle",
    "Watcher",
    "WeakHandle",
]
