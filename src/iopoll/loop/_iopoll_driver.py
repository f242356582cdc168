"""``IoPollDriver``: the loop on an ``iopoll.Context``, one watcher per fd."""

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

__all__ = ["IoPollDriver"]

_EVENTS = {READ: Event.READ, WRITE: Event.WRITE, READ | WRITE: Event.READ | Event.WRITE}


class _WakeTable(dict[Event, int]):
    """Reported ``Event`` -> which callbacks it wakes (READ, WRITE bits), computed once each.

    ``ERROR`` and ``HANGUP`` are reported unasked and stay reported on a level-triggered
    backend, so they wake both the readers and the writers of the fd.
    """

    def __missing__(self, event: Event) -> int:
        value = event.value
        bits = (READ if value & (Event.READ | Event.ERROR | Event.HANGUP) else 0) | (
            WRITE if value & (Event.WRITE | Event.ERROR | Event.HANGUP) else 0
        )
        self[event] = bits
        return bits


_WAKE = _WakeTable()


class IoPollDriver(AbstractDriver[Context]):
    """The event loop on an ``iopoll.Context`` (``get_handle()`` returns it).

    Streams the backend refuses (regular files, ``/dev/null`` on epoll) go to a second
    ``Context(Backend.POLL)``, where they are always ready.
    """

    _refusals = (FailedHandleAddError,)

    def __init__(self, backend: Backend = Backend.AUTO) -> None:
        super().__init__(Context(backend))

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
        return Context(Backend.POLL)

    def _wait(self, poller: Context, timeout: float | None) -> list[Watcher]:
        return poller.wait(timeout)

    def _queue_ready(self, ready: list[Watcher]) -> None:
        queue = self._queue
        wakeup = self._wakeup
        for watcher in ready:
            # The engine's own slots, not the properties: this loop is the hot path.
            entry = watcher._data
            if entry is wakeup:
                self._drain_wakeup()
                continue
            wake = _WAKE[watcher._triggered]
            if wake & READ and entry.readers:
                queue.extend(entry.readers.values())
            if wake & WRITE and entry.writers:
                queue.extend(entry.writers.values())
