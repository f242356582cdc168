"""The public names every implementation shares: the errors, ``Event``, ``ErrorCode`` and
the handles of SPEC section 1.

``iopoll`` and ``iopoll_polyfill.fallback`` (the select implementation) each take these
with ``from _iopoll_core.api import *`` and add their own ``Backend``, ``Context`` and
``Watcher``.  Their ``__all__`` stay written out, because type checkers read a literal list
only; ``tests/test_public_names.py`` holds each of them to SPEC section 1.
"""

from __future__ import annotations

from .errors import (
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
from .events import ErrorCode, Event
from .handles import Handle, StreamPollHandle

__all__ = [
    "BackendUnavailableError",
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
]
