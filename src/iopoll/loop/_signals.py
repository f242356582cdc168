"""How a driver receives signals, held only while it has signal callbacks.  Two ways, with
one interface (``SignalSource``): ``add``/``remove`` one callback's signal number, the
signal numbers taken so far in ``pending`` (the tick empties it), ``take`` when the poller
reported the source ready, ``close``.

* ``SignalState`` (every driver): process signal state.  The Python-level handler records
  the signal number; ``signal.set_wakeup_fd`` on an internal non-blocking socketpair makes
  the C-level handler wake a blocking wait at once (PEP 475 would otherwise retry the wait
  after the handler ran).  The first callback for a signal installs the handler (and, for
  the first signal, the wakeup fd); the last one restores what was there.
* ``HandleSignals`` (``IoPollDriver`` where the backend ``supports_signal_handles()``):
  one ``SignalHandle`` per signal number, watched in the driver's ``Context`` (SPEC 10)
  from the first callback for that signal to the last.  No handler and no wakeup fd: the
  engine blocks the signal while it is watched and restores the mask after, and the
  signalfd behind the handle is what wakes the wait.
"""

from __future__ import annotations

import os
import signal
import socket
import threading
from collections import deque
from collections.abc import Callable
from types import FrameType
from typing import Any, Protocol

from _iopoll_core.context import Context
from _iopoll_core.errors import PollError
from _iopoll_core.events import Event
from _iopoll_core.signal_handles import VALID_SIGNALS, SignalHandle
from _iopoll_core.watcher import Watcher

from ._errors import UnsupportedFeatureError

__all__ = ["SignalSource", "SignalState", "HandleSignals", "only_thread"]

# What on_signal() takes: this system's signals (not glibc's own 32 and 33), less the two
# that cannot be caught.
_CATCHABLE = VALID_SIGNALS.difference(
    getattr(signal, name) for name in ("SIGKILL", "SIGSTOP") if hasattr(signal, name)
)


def only_thread() -> bool:
    """Whether the calling thread is the process's only one, counting the threads that C
    libraries started (which ``threading`` does not see) where ``/proc`` lists them."""
    try:
        return len(os.listdir("/proc/self/task")) == 1
    except OSError:
        return threading.active_count() == 1


class SignalSource(Protocol):
    """What the driver asks of its way of receiving signals."""

    @property
    def pending(self) -> deque[int]:
        """Signal numbers taken and not dispatched yet, in order."""

    def add(self, signum: int) -> None:
        """One more callback for ``signum`` (the first starts receiving it)."""

    def remove(self, signum: int) -> None:
        """One callback fewer for ``signum`` (the last stops, restoring what was there)."""

    def take(self, token: Any) -> None:
        """The poller reported ``token`` (what the source registered) ready."""

    def close(self) -> None:
        """Stop receiving every signal (the driver is going away)."""


_Handler = Callable[[int, FrameType | None], Any] | int | signal.Handlers | None


class _PerSignal:
    """The callbacks counted per signal: the first starts receiving it (``_first``), the
    last stops and restores what was there (``_last``)."""

    __slots__ = ("pending", "counts")

    def __init__(self) -> None:
        self.pending: deque[int] = deque()
        self.counts: dict[int, int] = {}

    def add(self, signum: int) -> None:
        """One more callback for ``signum``."""
        count = self.counts.get(signum, 0)
        if count == 0:
            self._first(signum)  # before the count: ``counts`` tells it if it is the first
        self.counts[signum] = count + 1

    def remove(self, signum: int) -> None:
        """One callback fewer for ``signum``."""
        count = self.counts[signum] - 1
        if count:
            self.counts[signum] = count
            return
        del self.counts[signum]
        self._last(signum)

    def close(self) -> None:
        """Stop receiving every signal (the driver is going away)."""
        for signum in list(self.counts):
            self.counts[signum] = 1
            self.remove(signum)
        self.pending.clear()

    def _first(self, signum: int) -> None:
        raise NotImplementedError

    def _last(self, signum: int) -> None:
        raise NotImplementedError


# Every SignalState that holds a signal's handler or the wakeup fd.  Drivers give them back
# in any order: one that gives back what another installed over it must leave the other's
# in place and hand it its own previous value instead (the restores in SignalState).
_HOLDING: set[SignalState] = set()


def _set_wakeup_fd(fd: int) -> None:
    """Make ``fd`` the wakeup fd again, as whoever set it did: a driver's without the
    full-buffer warning (its byte only wakes a wait), anyone else's with it (the default)."""
    ours = any(state.writer is not None and state.writer.fileno() == fd for state in _HOLDING)
    signal.set_wakeup_fd(fd, warn_on_full_buffer=not ours)


class SignalState(_PerSignal):
    """Installed handlers, their previous values, the wakeup socketpair and pending signals.

    The process holds one handler per signal and one wakeup fd, and each driver saves what
    it replaced.  Given back in the reverse order, each restores its saved value.  Given
    back out of order (two drivers: the first releases first), the one that releases finds
    another driver's value installed over its own: that one stays, and the driver that
    saved this one's value as its previous takes this one's previous instead, as a list
    unlinks an item.  Restoring blindly would remove the other driver's handler, and later
    put back a handler of a closed driver, or a wakeup fd that was closed (EBADF), or whose
    number an unrelated socket has taken since (every signal then writes a byte into it).
    """

    __slots__ = ("previous", "reader", "writer", "previous_wakeup", "_watch")

    def __init__(self, watch: Callable[[socket.socket | None], None]) -> None:
        super().__init__()
        self.previous: dict[int, _Handler] = {}
        self.reader: socket.socket | None = None
        self.writer: socket.socket | None = None
        self.previous_wakeup = -1
        self._watch = watch  # tells the driver to poll the reader (or to stop, with None)

    @staticmethod
    def check_signum(signum: object) -> int:
        """Validate a signal number and that signals can be handled from this thread."""
        if isinstance(signum, bool) or not isinstance(signum, int):
            raise TypeError(f"signum must be an int signal number, not {type(signum).__name__}")
        if signum not in _CATCHABLE:
            raise ValueError(f"signum must be a catchable signal number, not {signum}")
        if threading.current_thread() is not threading.main_thread():
            raise UnsupportedFeatureError("Signals can only be handled in the main thread")
        return signum

    def _handler(self, signum: int, frame: FrameType | None) -> None:
        self.pending.append(signum)

    def _first(self, signum: int) -> None:
        # The handler (and, for the first signal, the wakeup fd) with the first callback.
        if not self.counts:
            self._open_wakeup()
        try:
            self.previous[signum] = signal.signal(signum, self._handler)
        except BaseException:
            if not self.counts:
                self._close_wakeup()
            raise
        _HOLDING.add(self)

    def _last(self, signum: int) -> None:
        previous = self.previous.pop(signum)
        if signal.getsignal(signum) == self._handler:
            signal.signal(signum, previous if previous is not None else signal.SIG_DFL)
        else:
            # Installed over this one's since: it stays (the class doc).
            for other in _HOLDING:
                if other is not self and other.previous.get(signum) == self._handler:
                    other.previous[signum] = previous
        if not self.counts:
            self._close_wakeup()

    def take(self, token: Any) -> None:
        """The wakeup socket was reported ready."""
        self.drain()

    def drain(self) -> None:
        """Empty the wakeup socket (its bytes only woke the wait; ``pending`` says what came)."""
        reader = self.reader
        if reader is None:
            return
        try:
            while reader.recv(4096):
                pass
        except (BlockingIOError, InterruptedError):
            pass

    def _open_wakeup(self) -> None:
        # All or nothing: a driver that cannot watch the reader (closed) must not leave the
        # process's wakeup fd on a socket it will close, whose number a later file reuses.
        reader, writer = socket.socketpair()
        try:
            reader.setblocking(False)
            writer.setblocking(False)
            self._watch(reader)
            try:
                previous = signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
            except BaseException:
                self._watch(None)
                raise
        except BaseException:
            reader.close()
            writer.close()
            raise
        self.previous_wakeup = previous
        self.reader, self.writer = reader, writer

    def _close_wakeup(self) -> None:
        reader, writer = self.reader, self.writer
        if reader is None or writer is None:
            return
        self._watch(None)
        mine, previous = writer.fileno(), self.previous_wakeup
        # Set to this one's own fd (open: it cannot fail) to learn which is set now.
        current = signal.set_wakeup_fd(mine, warn_on_full_buffer=False)
        if current == mine:
            try:
                _set_wakeup_fd(previous)
            except (OSError, ValueError):  # closed since by whoever set it
                signal.set_wakeup_fd(-1)
        else:
            # Set over this one's since: it stays (the class doc).
            _set_wakeup_fd(current)
            for other in _HOLDING:
                if other is not self and other.previous_wakeup == mine:
                    other.previous_wakeup = previous
        _HOLDING.discard(self)
        self.previous_wakeup = -1
        self.reader = self.writer = None
        reader.close()
        writer.close()
        self.pending.clear()

class HandleSignals(_PerSignal):
    """Signals through one ``SignalHandle`` per signal number in ``context`` (SPEC 10).

    The first callback for a signal adds a watcher of a new handle for it (the engine then
    blocks the signal in the process), the last removes it (the engine restores the mask).
    Every watcher carries ``data``, the one object the driver's ``_queue_ready`` tells apart
    from the fd entries, and ``registered(+1 / -1)`` keeps the driver's count of
    registrations.  A report of a watcher moves what its handle took into ``pending``;
    the handle keeps deliveries in the order the OS handed them over.  A handle per signal
    keeps ``add`` and ``remove`` to one watcher each; across signals, the order is the
    order of the reports (standard signals pending together are not ordered by the OS
    either).
    """

    __slots__ = ("_context", "_data", "_registered", "_watchers")

    def __init__(self, context: Context, data: object, registered: Callable[[int], None]) -> None:
        super().__init__()
        self._context = context
        self._data = data
        self._registered = registered
        self._watchers: dict[int, Watcher] = {}

    def _first(self, signum: int) -> None:
        self._watchers[signum] = self._context.add(
            SignalHandle((signum,)), Event.SIGNAL, self._data
        )
        self._registered(1)

    def _last(self, signum: int) -> None:
        watcher = self._watchers.pop(signum)
        try:
            watcher.remove()  # the engine takes what is still pending, then unblocks
        except PollError:
            pass  # its context was closed first: the watcher is gone already
        self._registered(-1)

    def take(self, token: Any) -> None:
        handle: SignalHandle = token.handle
        self.pending.extend(handle.delivered())
