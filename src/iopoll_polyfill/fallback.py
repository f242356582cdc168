"""The select() implementation of the iopoll API: pure standard library, no fd beyond
``FD_SETSIZE``, level-triggered only, whole-second timeouts.

This module is always the select implementation, whichever one ``iopoll_polyfill`` chose.
"""

from __future__ import annotations

from _iopoll_core.api import *  # noqa: F403  (the names every implementation shares)
from _iopoll_core.backend import BackendBase
from _iopoll_core.context import Context as _EngineContext
from _iopoll_core.select_mechanism import FD_SETSIZE, SelectMechanism
from _iopoll_core.watcher import Watcher as Watcher

# SPEC sections 1 and 10, and FD_SETSIZE; tests/test_public_names.py holds it to docs/SPEC.md.
__all__ = [
    "FD_SETSIZE",
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


class Backend(BackendBase):
    """The backends of the iopoll API; only ``SELECT`` (and ``AUTO``) is available here."""

    # The members of SPEC section 1, in its order, here and in the other implementation's
    # Backend: an enum with members cannot be subclassed, and type checkers need them
    # written out.  tests/test_public_names.py holds both to SPEC.
    AUTO = "auto"
    POLL = "poll"
    EPOLL = "epoll"
    KQUEUE = "kqueue"
    EVENT_PORTS = "event_ports"
    WSAPOLL = "wsapoll"
    SELECT = "select"


Backend._mechanisms = {"SELECT": SelectMechanism}

_WHOLE_SECONDS = (
    "timeout must be None or a whole number of seconds (int), not {}: the polyfill takes "
    "whole seconds plus microseconds, e.g. wait(1, 500000) for 1.5 s"
)

_engine_wait = _EngineContext.wait


class Context(_EngineContext):
    """Watches handles and reports which are ready, with ``select.select()``.

    Only ``Backend.SELECT`` (or ``AUTO``, which resolves to it) is available; any other
    backend raises ``BackendUnavailableError``.  fds at or above ``FD_SETSIZE`` are refused
    with ``FailedHandleAddError`` (``code == ErrorCode.TOOBIG``), and
    ``Event.EDGE_TRIGGERED`` with ``code == ErrorCode.NOSUPPORT``.
    """

    __slots__ = ()
    _backend_type = Backend

    def __init__(self, backend: Backend = Backend.AUTO) -> None:
        super().__init__(backend)

    @property
    def backend(self) -> Backend:
        """Always ``Backend.SELECT``."""
        return self._backend  # type: ignore[return-value]

    def wait(  # type: ignore[override]
        self,
        timeout: int | None = None,
        microseconds: int = 0,
        max_events: int | None = None,
    ) -> list[Watcher]:
        """Wait until watchers are ready and return them, one entry per watcher.

        ``timeout`` is ``None`` (until something is ready) or whole seconds as an ``int``;
        ``microseconds`` (0..999999) is added to it: ``wait(0, 250_000)`` waits 250 ms.
        A ``float`` or ``timedelta`` is a ``TypeError`` (so code written for the polyfill
        runs unchanged on native ``iopoll``, whose ``wait`` takes the same arguments).
        At most ``max_events`` watchers are returned; the rest stay ready for the next call.
        """
        if (
            timeout is not None
            and type(timeout) is not int
            and (isinstance(timeout, bool) or not isinstance(timeout, int))
        ):
            raise TypeError(_WHOLE_SECONDS.format(type(timeout).__name__))
        return _engine_wait(self, timeout, microseconds, max_events)
