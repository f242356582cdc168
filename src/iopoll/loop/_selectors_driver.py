"""``SelectorsDriver``: the loop on the standard library's ``selectors`` (the baseline)."""

from __future__ import annotations

import selectors

from ._abstract_driver import AbstractDriver
from ._callbacks import READ, WRITE, FdEntry
from ._native_dispatch import accelerate

__all__ = ["PySelectorsDriver", "SelectorsDriver"]

# selectors' EVENT_READ and EVENT_WRITE are our READ and WRITE bits.
assert selectors.EVENT_READ == READ and selectors.EVENT_WRITE == WRITE

_Ready = list[tuple[selectors.SelectorKey, int]]


class PySelectorsDriver(AbstractDriver[selectors.BaseSelector]):
    """``SelectorsDriver`` in pure Python: the reference its C dispatch is held to."""

    __slots__ = ()

    _refusals = (ValueError, OSError)

    def __init__(self) -> None:
        super().__init__(selectors.DefaultSelector())

    def _add(
        self, poller: selectors.BaseSelector, entry: FdEntry, events: int
    ) -> selectors.BaseSelector | None:
        try:
            poller.register(entry.fd, events, entry)
        except (ValueError, OSError):
            if not entry.alive():
                return None  # closed since it was registered: it never fires
            raise
        return poller

    def _modify(self, entry: FdEntry, events: int) -> None:
        try:
            entry.token.modify(entry.fd, events, entry)
        except (KeyError, ValueError, OSError):
            pass  # its stream was closed: its callbacks never fire again

    def _remove(self, entry: FdEntry) -> None:
        try:
            entry.token.unregister(entry.fd)
        except (KeyError, ValueError, OSError):
            pass  # closed behind our back

    def _new_fallback(self) -> selectors.BaseSelector:
        return selectors.PollSelector()

    def _wait(self, poller: selectors.BaseSelector, timeout: float | None) -> _Ready:
        return poller.select(timeout)

    def _queue_ready(self, ready: _Ready) -> None:
        queue = self._queue
        wakeup = self._wakeup
        for key, wake in ready:
            entry = key.data
            if entry is wakeup:
                self._drain_wakeup()
                continue
            if wake & READ and entry.readers:
                queue.extend(entry.readers.values())
            if wake & WRITE and entry.writers:
                queue.extend(entry.writers.values())


class SelectorsDriver(PySelectorsDriver):
    """The event loop on ``selectors.DefaultSelector`` (``get_handle()`` returns it).

    Streams the selector refuses (regular files on epoll) go to a ``PollSelector``, where
    they are always ready.  The stdlib selectors wake both directions on error and hang-up.
    An fd's token is the selector it is registered with.  Its dispatch runs in C when
    ``iopoll.loop._speedups`` was built, as ``IoPollDriver``'s does.
    """

    __slots__ = ()


accelerate(SelectorsDriver)
