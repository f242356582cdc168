"""``IoPollDriver``: the loop on an ``iopoll.Context``, one watcher per fd.

Where the backend ``supports_signal_handles()`` (Linux ``EPOLL``/``POLL``), signals come
through ``SignalHandle`` watchers in the same Context (``HandleSignals``), not through a
Python handler and ``signal.set_wakeup_fd``, if this is the process's only thread when the
first signal callback comes.  A handle blocks its signals in the main thread alone, and the
kernel hands a process-directed signal to any thread that does not block it: with another
thread running (numpy's BLAS workers, an executor's), the signal would go there, to its
handler or its default action (for ``SIGUSR1``, the end of the process), and never reach the
handle.  The handler and the wakeup fd see a signal whichever thread the kernel picks, so
that is what the driver takes then.  Threads started later inherit the block of the signals
watched at the time; one watched only after they started is not blocked in them (the
README's limits of signal handles).

Every Context of the driver (the fallback one too) reports the watchers it loses without
``remove()`` (``on_watcher_removed``): their streams were closed before their callbacks were
cancelled, and ``_lose_stream`` cancels and reports those callbacks (the essay in
``_abstract_driver.py``).
"""

from __future__ import annotations

from _iopoll_core.errors import (
    FailedHandleAddError,
    InactiveWatcherError,
    InvalidHandleError,
    PollError,
)
from _iopoll_core.events import Event
from _iopoll_core.watcher import Watcher

from .._native import Backend, Context
from ._abstract_driver import AbstractDriver
from ._callbacks import READ, WRITE, FdEntry
from ._native_dispatch import accelerate
from ._signals import HandleSignals, SignalSource, only_thread

__all__ = ["IoPollDriver", "PyIoPollDriver"]

_EVENTS = {READ: Event.READ, WRITE: Event.WRITE, READ | WRITE: Event.READ | Event.WRITE}


class _WakeTable(dict[Event, int]):
    """Reported ``Event`` -> which callbacks it wakes (READ, WRITE bits), computed once each.

    ``ERROR`` and ``HANGUP`` are reported unasked and stay reported on a level-triggered
    backend, so they wake both the readers and the writers of the fd.  The C
    ``_queue_ready`` applies the same two masks to the reported value itself.
    """

    # The reported events that wake an fd's readers, and those that wake its writers.
    READERS = Event.READ | Event.ERROR | Event.HANGUP
    WRITERS = Event.WRITE | Event.ERROR | Event.HANGUP

    def __missing__(self, event: Event) -> int:
        value = event.value
        bits = (READ if value & self.READERS else 0) | (WRITE if value & self.WRITERS else 0)
        self[event] = bits
        return bits


_WAKE = _WakeTable()


class _StreamLost(Exception):
    """Raised by ``on_watcher_removed``'s callback after a loss, to end that ``wait()``
    before it polls: the tick then sees at once that the lost callbacks are gone."""


class PyIoPollDriver(AbstractDriver[Context]):
    """``IoPollDriver`` in pure Python: the reference its C dispatch is held to."""

    __slots__ = ()

    _refusals = (FailedHandleAddError,)

    def __init__(self, backend: Backend = Backend.AUTO) -> None:
        super().__init__(Context(backend))
        self._poller.on_watcher_removed(self._watcher_removed)

    def _add(self, poller: Context, entry: FdEntry, events: int) -> Watcher | None:
        try:
            return poller.add(entry.stream, _EVENTS[events], entry)
        except InvalidHandleError:
            return None  # closed since it was registered: it never fires

    def _modify(self, entry: FdEntry, events: int) -> None:
        try:
            entry.token.modify_events(_EVENTS[events])
        except InactiveWatcherError:
            pass  # its stream was closed: its callbacks never fire again

    def _remove(self, entry: FdEntry) -> None:
        try:
            entry.token.remove()  # a no-op when its stream was closed
        except PollError:
            pass

    def _new_fallback(self) -> Context:
        fallback = Context(Backend.POLL)
        fallback.on_watcher_removed(self._watcher_removed)
        return fallback

    def _wait(self, poller: Context, timeout: float | None) -> list[Watcher]:
        try:
            return poller.wait(timeout)
        except _StreamLost:
            return []

    def _queue_ready(self, ready: list[Watcher]) -> None:
        queue = self._queue
        wakeup = self._wakeup
        for watcher in ready:
            # The engine's own slots, not the properties: this loop is the hot path.
            entry = watcher._data
            if entry is wakeup:
                self._signals_ready(watcher)
                continue
            wake = _WAKE[watcher._triggered]
            if wake & READ and entry.readers:
                queue.extend(entry.readers.values())
            if wake & WRITE and entry.writers:
                queue.extend(entry.writers.values())

    # -- signals -------------------------------------------------------------------------------

    def _new_signals(self) -> SignalSource:
        if not self._poller.backend.supports_signal_handles() or not only_thread():
            return super()._new_signals()  # a handler and the wakeup fd (the module doc)
        # Every signal watcher carries this marker as its data: _queue_ready tells it apart
        # from the fd entries with the one identity test it makes for the wakeup socket.
        marker = self._wakeup = FdEntry(-1, None)
        return HandleSignals(self._poller, marker, self._count_registrations)

    def _count_registrations(self, delta: int) -> None:
        self._registered += delta  # a signal watcher is a registration the poll waits for

    def _signals_ready(self, watcher: Watcher) -> None:
        signals = self._signals
        if signals is not None:
            signals.take(watcher)

    # -- streams closed before their callbacks were cancelled ----------------------------------

    def _watcher_removed(self, watcher: Watcher) -> None:
        """``on_watcher_removed``: a Context lost ``watcher`` without ``remove()``.

        A watcher the driver still holds for callbacks is a loss; a watcher whose callbacks
        were cancelled (or disabled) since is not (the Context also reports a watcher that
        our own ``remove()`` found closed).
        """
        entry = watcher._data
        if (
            isinstance(entry, FdEntry)
            and entry.token is watcher
            and (entry.readers or entry.writers)
        ):
            self._lose_stream(entry)
            raise _StreamLost  # wait() returns [] before it polls (caught in _wait)

    def _stream_alive(self, entry: FdEntry) -> bool:
        token = entry.token
        # is_active() also queues a lost watcher for on_watcher_removed, which then finds
        # its callbacks cancelled: nothing is reported twice.
        return entry.alive() if token is None else bool(token.is_active())


class IoPollDriver(PyIoPollDriver):
    """The event loop on an ``iopoll.Context`` (``get_handle()`` returns it).

    Streams the backend refuses (regular files, ``/dev/null`` on epoll) go to a second
    ``Context(Backend.POLL)``, where they are always ready.  Signals go through
    ``SignalHandle`` watchers where the backend supports them.  A stream closed before its
    callbacks were cancelled has them cancelled and reported to the error path as
    ``InvalidCallbackError``.  Its dispatch runs in C when ``iopoll.loop._speedups`` was
    built (``iopoll.loop._iopoll_driver.ACCELERATED`` says whether it does).
    """

    __slots__ = ()


ACCELERATED = accelerate(IoPollDriver, io=(Watcher, FdEntry, _WAKE, _StreamLost, Context))
