"""``SelectorsDriver``: the loop on the standard library's ``selectors`` (the baseline)."""

from __future__ import annotations

import selectors
import socket
import time
from typing import Any

from ._callbacks import READ, WRITE, FdEntry
from ._driver import MAX_WAIT, AbstractDriver

__all__ = ["SelectorsDriver"]

# selectors' EVENT_READ and EVENT_WRITE are our READ and WRITE bits.
assert selectors.EVENT_READ == READ and selectors.EVENT_WRITE == WRITE


class SelectorsDriver(AbstractDriver):
    """The event loop on ``selectors.DefaultSelector`` (``get_handle()`` returns it).

    Streams the selector refuses (regular files on epoll) go to a ``PollSelector``, where
    they are always ready.  The stdlib selectors wake both directions on error and hang-up.
    """

    _now = staticmethod(time.monotonic)

    def __init__(self) -> None:
        super().__init__()
        self._selector = selectors.DefaultSelector()
        self._fallback: selectors.BaseSelector | None = None
        self._fallback_count = 0
        self._registered = 0
        self._wakeup: socket.socket | None = None

    def get_handle(self) -> selectors.BaseSelector:
        """The ``selectors`` object this driver waits on."""
        return self._selector

    def _io_update(self, entry: FdEntry, old: int, new: int) -> None:
        selector = self._fallback if entry.fallback else self._selector
        assert selector is not None
        if not new:
            if entry.token is not None:
                entry.token = None
                self._registered -= 1
                if entry.fallback:
                    self._fallback_count -= 1
                try:
                    selector.unregister(entry.fd)
                except (KeyError, ValueError, OSError):
                    pass  # closed behind our back
            return
        if entry.token is not None:
            try:
                selector.modify(entry.fd, new, entry)
            except (KeyError, ValueError, OSError):
                pass  # its stream was closed: its callbacks never fire again
            return
        try:
            entry.token = self._selector.register(entry.fd, new, entry)
        except (ValueError, OSError) as refusal:
            if not entry.alive():
                return  # closed since it was registered: it never fires
            if self._fallback is None:
                self._fallback = selectors.PollSelector()
            try:
                entry.token = self._fallback.register(entry.fd, new, entry)
            except (ValueError, OSError):
                raise refusal from None
            entry.fallback = True
            self._fallback_count += 1
        self._registered += 1

    def _watch_wakeup(self, sock: socket.socket | None) -> None:
        if sock is None:
            if self._wakeup is not None:
                self._selector.unregister(self._wakeup)
                self._wakeup = None
                self._registered -= 1
            return
        self._selector.register(sock, selectors.EVENT_READ, None)
        self._wakeup = sock
        self._registered += 1

    def _poll(self, timeout: float | None) -> None:
        if self._fallback_count:
            assert self._fallback is not None
            ready = self._selector.select(0) + self._fallback.select(0)
        elif not self._registered:
            if timeout is None:
                time.sleep(MAX_WAIT)
            elif timeout:
                time.sleep(timeout)
            return
        else:
            ready = self._selector.select(timeout)
        if not ready:
            return
        queue = self._queue
        for key, mask in ready:
            entry: Any = key.data
            if entry is None:
                assert self._signals is not None
                self._signals.drain()
                continue
            if mask & READ and entry.readers:
                queue.extend(entry.readers.values())
            if mask & WRITE and entry.writers:
                queue.extend(entry.writers.values())
        self._idle = False

    def close(self) -> None:
        """Restore signal state and close the selectors."""
        super().close()
        self._selector.close()
        if self._fallback is not None:
            self._fallback.close()
