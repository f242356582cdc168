"""iopoll_polyfill: the iopoll API wherever Python runs.

``import iopoll_polyfill`` gives iopoll's own objects when iopoll is installed and has a
native backend (``AUTO`` resolves to something better than ``SELECT``), and the pure
standard library select() implementation (:mod:`iopoll_polyfill.fallback`) otherwise.
Set ``IOPOLL_POLYFILL=1`` to force the select implementation.  ``IMPLEMENTATION`` says
which one was chosen: ``"native"`` or ``"select"``.
"""

from __future__ import annotations

import os
from types import ModuleType
from typing import TYPE_CHECKING

from . import fallback

__all__ = [
    "FD_SETSIZE",
    "IMPLEMENTATION",
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
    "fallback",
]


def _native() -> ModuleType | None:
    """iopoll, if it should be used: importable, not vetoed, better than select()."""
    if os.environ.get("IOPOLL_POLYFILL", "") not in ("", "0"):
        return None
    try:
        import iopoll  # the only import of iopoll on the polyfill's path
    except ImportError:
        return None
    if iopoll.Backend.AUTO.resolve() is iopoll.Backend.SELECT:
        return None
    return iopoll


_chosen = _native()
IMPLEMENTATION = "select" if _chosen is None else "native"
"""``"native"`` when the names below are iopoll's own objects, ``"select"`` otherwise."""

FD_SETSIZE = fallback.FD_SETSIZE

if TYPE_CHECKING:
    # Type checkers see the polyfill's signatures (whole-second ``wait``): code that
    # passes them runs on both implementations.
    from .fallback import (
        Backend,
        BackendUnavailableError,
        Context,
        ErrorCode,
        Event,
        FailedContextInitializationError,
        FailedHandleAddError,
        FailedPollOperationError,
        FailedPollWaitError,
        FailedWatcherModificationError,
        Handle,
        HandleAlreadyWatchedError,
        InactiveWatcherError,
        InvalidHandleError,
        PollError,
        StreamPollHandle,
        Watcher,
    )
else:
    _source: ModuleType = fallback if _chosen is None else _chosen
    Backend = _source.Backend
    BackendUnavailableError = _source.BackendUnavailableError
    Context = _source.Context
    ErrorCode = _source.ErrorCode
    Event = _source.Event
    FailedContextInitializationError = _source.FailedContextInitializationError
    FailedHandleAddError = _source.FailedHandleAddError
    FailedPollOperationError = _source.FailedPollOperationError
    FailedPollWaitError = _source.FailedPollWaitError
    FailedWatcherModificationError = _source.FailedWatcherModificationError
    Handle = _source.Handle
    HandleAlreadyWatchedError = _source.HandleAlreadyWatchedError
    InactiveWatcherError = _source.InactiveWatcherError
    InvalidHandleError = _source.InvalidHandleError
    PollError = _source.PollError
    StreamPollHandle = _source.StreamPollHandle
    Watcher = _source.Watcher
