"""The select() implementation of the iopoll API: pure standard library, no fd beyond
``FD_SETSIZE``, level-triggered only, whole-second timeouts.

This module is always the select implementation, whichever one ``iopoll_polyfill`` chose.
"""

from __future__ import annotations

import time

from _iopoll_core.api import *  # noqa: F403  (the names every implementation shares)
from _iopoll_core.arguments import FOREVER
from _iopoll_core.backend import BackendBase
from _iopoll_core.context import Context as _EngineContext
from _iopoll_core.select_mechanism import (
    _FIONREAD,
    _NO_BYTES,
    _READ,
    _WRITE,
    FD_SETSIZE,
    SelectMechanism,
    _ioctl,
    _select,
)
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
# wait()'s default: CPython has one int 0, so `microseconds is _NO_MICROSECONDS` is the test
# "an int equal to 0" in one step (0.0 and False are not it: the engine refuses them).  An
# interpreter with more than one 0 would send some int zeros down the general path, which
# gives the same answer.
_NO_MICROSECONDS = 0
_MAX_TIMEOUT = SelectMechanism.max_timeout
_decode = SelectMechanism.decode
_READ_EVENT, _WRITE_EVENT = _decode[_READ], _decode[_WRITE]


class Context(_EngineContext):
    """Watches handles and reports which are ready, with ``select.select()``.

    Only ``Backend.SELECT`` (or ``AUTO``, which resolves to it) is available; any other
    backend raises ``BackendUnavailableError``.  fds at or above ``FD_SETSIZE`` are refused
    with ``FailedHandleAddError`` (``code == ErrorCode.TOOBIG``), and
    ``Event.EDGE_TRIGGERED`` with ``code == ErrorCode.NOSUPPORT``.
    """

    __slots__ = ()
    _backend_type = Backend
    _usable: SelectMechanism | None

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
        # Read before it is known to be set: _fast_poll is only set while it is.
        mechanism: SelectMechanism = self._usable  # type: ignore[assignment]
        watchers = self._watchers
        if (
            self._fast_poll is not None
            and not mechanism.changed
            and self._first_timer is None
            and max_events is None
            and microseconds is _NO_MICROSECONDS
            and watchers
            and (timeout is None or (type(timeout) is int and 0 <= timeout <= _MAX_TIMEOUT))
        ):
            # The engine's fast path and SelectMechanism.poll() fused into one pass, for
            # the common case: each readable fd has bytes waiting (or cannot reach end of
            # file) and a plain, open watcher that asked for READ; or only writers are
            # ready.  Anything else is handed, with the same select() answer, to the
            # mechanism's translation and the engine's general path: no rule is decided
            # here, and what this loop did (setting _triggered) is done again there.
            started = time.monotonic() if timeout else 0.0
            # wait(None) asks what is ready now, as the engine's does: with nothing ready
            # it blocks only while a watcher can still end it, which the engine decides
            # (one whose stream was closed, or a fired one-shot, cannot).
            try:
                readable, writable, _ = _select(
                    mechanism.readers, mechanism.writers, (), 0 if timeout is None else timeout
                )
            except OSError as exc:
                traceback = exc.__traceback__
                if traceback is not None and traceback.tb_next is None:
                    # select() itself failed (a closed fd: EBADF): the mechanism's poll
                    # finds the culprits, or reports the failure.  An OSError with frames
                    # below this one is a signal handler's, and leaves wait() (PEP 475).
                    return _engine_wait(self, timeout, 0, None)
                raise
            if timeout is None and not readable and not writable:
                return _engine_wait(self, None, 0, None)
            ready: list[Watcher] = []
            try:
                if mechanism.changed:
                    pass  # a signal handler changed the watchers: the translation sorts it
                elif not writable:
                    reading, count = mechanism.reading, mechanism.count
                    for fd in readable:
                        if reading[fd]:  # KeyError: READ not asked; translation's work
                            # FIONREAD: bytes waiting, or end of file (or a reset)?  OSError
                            # (a listening socket's EINVAL) goes to the translation.
                            _ioctl(fd, _FIONREAD, count)
                            if count == _NO_BYTES:
                                break
                        watcher = watchers[fd]
                        if not watcher._plain:
                            break
                        # Watcher._stream_open(), inlined.  The probe is read first and
                        # then called: `watcher._probe()` would be a method lookup that
                        # CPython cannot specialize (the slot holds a bound method).
                        probe = watcher._probe
                        if probe() != fd:
                            break
                        watcher._triggered = _READ_EVENT
                        ready.append(watcher)
                    else:
                        return ready
                elif not readable:
                    for fd in writable:
                        watcher = watchers[fd]
                        probe = watcher._probe
                        if not watcher._plain or probe() != fd:
                            break
                        watcher._triggered = _WRITE_EVENT
                        ready.append(watcher)
                    else:
                        return ready
            except Exception:  # no watcher; a closed file's fileno(); the ioctl's OSError
                pass
            raw, _ = mechanism.translate(readable, writable)
            return self._finish_wait(raw, FOREVER if timeout is None else timeout, started)
        return self._unfused_wait(timeout, microseconds, max_events)

    def _unfused_wait(
        self, timeout: int | None, microseconds: int, max_events: int | None
    ) -> list[Watcher]:
        """``wait()`` without the fused pass: the engine's, once the timeout's type is
        checked (tests/test_speedups_differential.py runs the two side by side)."""
        if self._usable is None:  # closed, or inherited over fork: said before the timeout
            self._raise_unusable(FailedPollWaitError)
        if (
            timeout is not None
            and type(timeout) is not int
            and (isinstance(timeout, bool) or not isinstance(timeout, int))
        ):
            raise TypeError(_WHOLE_SECONDS.format(type(timeout).__name__))
        return _engine_wait(self, timeout, microseconds, max_events)
