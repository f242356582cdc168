"""``IoPollDriver``: the loop on an ``iopoll.Context``, one watcher per fd."""

from __future__ import annotations

import socket
import time
from typing import Any

from _iopoll_core.errors import (
    FailedHandleAddError,
    InactiveWatcherError,
    InvalidHandleError,
    PollError,
)
from _iopoll_core.events import Event

from .._native import Backend, Context
from ._callbacks import READ, WRITE, FdEntry
from ._driver import MAX_WAIT, AbstractDriver

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


class IoPollDriver(AbstractDriver):
    """The event loop on an ``iopoll.Context`` (``get_handle()`` returns it).

    Streams the backend refuses (regular files, ``/dev/null`` on epoll) go to a second
    ``Context(Backend.POLL)``, where they are always ready.
    """

    _now = staticmethod(time.monotonic)

    def __init__(self, backend: Backend = Backend.AUTO) -> None:
        super().__init__()
        self._context = Context(backend)
        self._fallback: Context | None = None
        self._fallback_count = 0  # fds in the fallback context: they make every wait a poll
        self._registered = 0  # fds with a watcher in either context
        self._wakeup: Any = None

    def get_handle(self) -> Context:
        """The ``iopoll.Context`` this driver waits on."""
        return self._context

    def _io_update(self, entry: FdEntry, old: int, new: int) -> None:
        watcher = entry.token
        if not new:
            if watcher is not None:
                entry.token = None
                self._forget(entry)
                try:
                    watcher.remove()  # a no-op when its stream was closed
                except PollError:
                    pass
            return
        if watcher is not None:
            try:
                watcher.modify_events(_EVENTS[new])
            except InactiveWatcherError:
                pass  # its stream was closed: its callbacks never fire again
            return
        try:
            entry.token = self._context.add(entry.stream, _EVENTS[new], entry)
        except InvalidHandleError:
            return  # closed since it was registered: it never fires
        except FailedHandleAddError as refusal:
            entry.token = self._add_fallback(entry, _EVENTS[new], refusal)
            entry.fallback = True
            self._fallback_count += 1
        self._registered += 1

    def _add_fallback(self, entry: FdEntry, events: Event, refusal: Exception) -> Any:
        try:
            if self._fallback is None:
                self._fallback = Context(Backend.POLL)
            return self._fallback.add(entry.stream, events, entry)
        except PollError:
            raise refusal from None

    def _forget(self, entry: FdEntry) -> None:
        self._registered -= 1
        if entry.fallback:
            entry.fallback = False
            self._fallback_count -= 1

    def _watch_wakeup(self, sock: socket.socket | None) -> None:
        if sock is None:
            if self._wakeup is not None:
                self._wakeup.remove()
                self._wakeup = None
                self._registered -= 1
            return
        self._wakeup = self._context.add(sock, Event.READ, None)
        self._registered += 1

    def _poll(self, timeout: float | None) -> None:
        if self._fallback_count:
            assert self._fallback is not None
            ready = self._context.wait(0) + self._fallback.wait(0)
        elif not self._registered:
            # No fd to wait for: a zero timeout needs no system call at all.
            if timeout is None:
                time.sleep(MAX_WAIT)  # nothing can wake us but a timer-less eternity
            elif timeout:
                time.sleep(timeout)
            return
        else:
            ready = self._context.wait(timeout)
        if not ready:
            return
        queue = self._queue
        for watcher in ready:
            # The engine's own slots, not the properties: this loop is the hot path.
            entry = watcher._data
            if entry is None:
                assert self._signals is not None
                self._signals.drain()
                continue
            wake = _WAKE[watcher._triggered]
            if wake & READ and entry.readers:
                queue.extend(entry.readers.values())
            if wake & WRITE and entry.writers:
                queue.extend(entry.writers.values())
        self._idle = False

    def close(self) -> None:
        """Restore signal state and close the contexts."""
        super().close()
        self._context.close()
        if self._fallback is not None:
            self._fallback.close()
