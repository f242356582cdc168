"""Handles that are not streams (SPEC 10): their base, ``TimerHandle`` and ``NotifyHandle``.

Each of these reports one event of its own (``TIMER``, ``NOTIFY``, ``SIGNAL``,
``PROCESS``) and nothing else.  A timer has no fd at all: its deadline is kept by the
Context (``timers.TimerQueue``), which shortens the OS wait to it.  The others are an fd that
becomes readable when the handle has something to say (an eventfd, a signalfd, a pidfd), so
every mechanism watches them as it watches any fd; the Context asks the handle, when the fd
is reported, whether there is really something (``_take``), and reports its event.
``SignalHandle`` and ``ProcessHandle`` live in their own modules, with their OS code.
"""

from __future__ import annotations

import io
import math
import os
import socket
import sys
import threading
import weakref
from datetime import timedelta
from typing import ClassVar

from .events import Event
from .handles import Handle

__all__ = ["SourceHandle", "TimerHandle", "NotifyHandle", "duration_ns", "MAX_DURATION_NS"]

# The longest timer: what a signed 64-bit count of nanoseconds holds (about 292 years).
MAX_DURATION_NS = 2**63 - 1


class SourceHandle(Handle):
    """Base of the handles that are not streams: each reports its one event alone."""

    __slots__ = ()

    # The event its watchers ask for and report.
    _event: ClassVar[Event]
    # The Mechanism capability it needs (the flag behind Backend.supports_*()), or "".
    _needs: ClassVar[str] = ""
    # Whether a watcher of it holds process-wide state that must be given back when the
    # watcher goes, even by the garbage collector (a SignalHandle's blocked signals).
    _holds_process_state: ClassVar[bool] = False

    def _take(self) -> bool:
        """The OS reported this handle's fd: take what it says, and say whether to report.

        False when there is nothing after all (another handle took a signal first).
        """
        return True

    def _watch(self) -> None:
        """A watcher of this handle became active in some context (``SignalHandle``)."""

    def _unwatch(self) -> None:
        """A watcher of this handle stopped being active (removed, context closed or gone)."""


def duration_ns(value: object, argument: str) -> int:
    """``value`` (seconds as ``int`` or ``float``, or a ``timedelta``) in nanoseconds."""
    if isinstance(value, bool):
        raise TypeError(
            f"{argument} must be a number of seconds (int or float) or a datetime.timedelta, "
            "not bool"
        )
    if isinstance(value, timedelta):
        ns = (
            (value.days * 86_400 + value.seconds) * 1_000_000 + value.microseconds
        ) * 1_000
    elif isinstance(value, int):
        ns = value * 1_000_000_000
    elif isinstance(value, float):
        if math.isnan(value):
            raise ValueError(f"{argument} must be a number of seconds, not NaN")
        if math.isinf(value):
            raise ValueError(f"{argument} must be finite, not {value}")
        if value < 0:  # before the rounding, which makes -1e-10 zero
            raise ValueError(f"{argument} must not be negative, not {value!r}")
        if value > MAX_DURATION_NS / 1e9:  # before the product, which could overflow
            raise ValueError(f"{argument} is too large: at most {MAX_DURATION_NS} nanoseconds")
        ns = round(value * 1e9)
    else:
        raise TypeError(
            f"{argument} must be a number of seconds (int or float) or a datetime.timedelta, "
            f"not {type(value).__name__}"
        )
    if ns < 0:
        raise ValueError(f"{argument} must not be negative, not {value!r}")
    if ns > MAX_DURATION_NS:
        raise ValueError(f"{argument} is too large: at most {MAX_DURATION_NS} nanoseconds")
    return int(ns)


class TimerHandle(SourceHandle):
    """A timer: ``TimerHandle(timeout, periodic=False)``, watched for ``Event.TIMER``.

    The deadline counts from ``add()`` (or the ``modify_events`` that re-arms it) on the
    monotonic clock.  A timer fires once and stays active, disarmed, until
    ``modify_events(Event.TIMER)`` re-arms it; a periodic one re-arms from its previous
    deadline, and one far behind skips the periods it missed: one report per ``wait()``.
    It has no file descriptor: ``fileno()`` raises ``io.UnsupportedOperation``.
    """

    __slots__ = ("_timeout_ns", "_periodic")

    _event = Event.TIMER
    _timeout_ns: int
    _periodic: bool

    def __init__(self, timeout: float | timedelta, periodic: bool = False) -> None:
        if hasattr(self, "_timeout_ns"):
            raise TypeError("TimerHandle.__init__ cannot be called twice")
        if not isinstance(periodic, bool):
            raise TypeError(f"periodic must be a bool, not {type(periodic).__name__}")
        ns = duration_ns(timeout, "timeout")
        if periodic and ns == 0:
            raise ValueError(
                "timeout must be at least 1 nanosecond for a periodic timer, "
                f"not {timeout!r}"
            )
        self._timeout_ns = ns
        self._periodic = periodic

    @property
    def timeout(self) -> timedelta:
        """The timer's duration (to the microsecond)."""
        return timedelta(microseconds=self._timeout_ns // 1_000)

    @property
    def periodic(self) -> bool:
        """Whether it re-arms itself after each report."""
        return self._periodic

    def fileno(self) -> int:
        """A timer has no file descriptor: always raises ``io.UnsupportedOperation``."""
        raise io.UnsupportedOperation("a TimerHandle has no file descriptor")

    def __repr__(self) -> str:
        kind = "periodic " if self._periodic else ""
        return f"<TimerHandle {kind}timeout={self.timeout!r}>"


# eventfd on Linux; a pipe on other POSIX systems; a socket pair on Windows, whose WSAPoll
# and select take sockets only.  IOPOLL_WSAPOLL_LIBC, the switch that runs the WSAPOLL
# backend's code on libc poll() for testing (src/iopoll/_wsapoll.py), picks the socket pair
# too: that backend refuses anything else there as on Windows.
_WINDOWS = sys.platform == "win32" or os.environ.get("IOPOLL_WSAPOLL_LIBC", "") not in ("", "0")
_EVENTFD = hasattr(os, "eventfd") and not _WINDOWS


class NotifyHandle(SourceHandle):
    """A wake-up from any thread, watched for ``Event.NOTIFY``.

    ``notify()`` (from any thread, any number of times) makes it ready; it is reported on
    every ``wait()`` until ``clear()``.  ``close()`` frees its file descriptors; a closed
    handle cannot be added, and its watchers leave their contexts as a closed stream's do.
    """

    __slots__ = ("_reader", "_writer", "_sockets", "_closing", "_lock")

    _event = Event.NOTIFY
    _reader: int  # the fd a context watches; -1 once closed
    _writer: int  # the eventfd itself on Linux
    _sockets: tuple[socket.socket, socket.socket] | None  # Windows: the pair behind the fds
    _closing: weakref.finalize[..., object]
    _lock: threading.Lock  # notify() from other threads against close()

    def __init__(self) -> None:
        if hasattr(self, "_reader"):
            raise TypeError("NotifyHandle.__init__ cannot be called twice")
        self._sockets = None
        if _EVENTFD:
            fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
            self._reader = self._writer = fd
            self._closing = weakref.finalize(self, os.close, fd)
        elif _WINDOWS:
            pair = socket.socketpair()
            for end in pair:
                end.setblocking(False)
            self._sockets = pair
            self._reader, self._writer = pair[0].fileno(), pair[1].fileno()
            self._closing = weakref.finalize(self, _close_sockets, pair)
        else:
            reader, writer = os.pipe()
            os.set_blocking(reader, False)
            os.set_blocking(writer, False)
            self._reader, self._writer = reader, writer
            self._closing = weakref.finalize(self, _close_fds, reader, writer)
        self._lock = threading.Lock()
        _notify_handles.add(self)

    def notify(self) -> None:
        """Make the handle ready (its watchers are reported until ``clear()``)."""
        with self._lock:
            if self._reader < 0:
                raise ValueError("notify() on a closed NotifyHandle")
            try:
                if _EVENTFD:
                    os.eventfd_write(self._writer, 1)
                elif self._sockets is not None:
                    self._sockets[1].send(b"\1")
                else:
                    os.write(self._writer, b"\1")
            except BlockingIOError:
                pass  # full (a pipe, or an eventfd at its maximum): it is ready anyway

    def clear(self) -> None:
        """Make the handle not ready, until the next ``notify()``."""
        with self._lock:
            if self._reader < 0:
                raise ValueError("clear() on a closed NotifyHandle")
            try:
                if _EVENTFD:
                    os.eventfd_read(self._reader)  # reads the counter and resets it to 0
                elif self._sockets is not None:
                    while self._sockets[0].recv(4096):
                        pass
                else:
                    while os.read(self._reader, 4096):
                        pass
            except BlockingIOError:
                pass  # nothing (more) was there

    def close(self) -> None:
        """Free the file descriptors.  Idempotent."""
        with self._lock:
            self._reader = self._writer = -1
            self._closing()

    @property
    def closed(self) -> bool:
        """Whether ``close()`` was called."""
        return self._reader < 0

    def fileno(self) -> int:
        """The fd a context watches; raises ``ValueError`` once the handle is closed."""
        fd = self._reader
        if fd < 0:
            raise ValueError("the NotifyHandle is closed")
        return fd

    def __repr__(self) -> str:
        return f"<NotifyHandle {'closed' if self._reader < 0 else f'fd={self._reader}'}>"


# Every NotifyHandle alive, for _new_locks_in_child.
_notify_handles: weakref.WeakSet[NotifyHandle] = weakref.WeakSet()


def _new_locks_in_child() -> None:
    # A thread of the parent may have held a handle's lock at the fork (notify() may come
    # from any thread): the child has no such thread to release it.
    for handle in list(_notify_handles):
        handle._lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_locks_in_child)


def _close_fds(*fds: int) -> None:
    for fd in fds:
        os.close(fd)


def _close_sockets(pair: tuple[socket.socket, socket.socket]) -> None:
    for end in pair:
        end.close()
