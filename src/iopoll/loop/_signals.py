"""Process signal state for one driver, held only while it has signal callbacks.

The Python-level handler records the signal number; ``signal.set_wakeup_fd`` on an internal
non-blocking socketpair makes the C-level handler wake a blocking wait at once (PEP 475 would
otherwise retry the wait after the handler ran).  The first callback for a signal installs
the handler (and, for the first signal, the wakeup fd); the last one restores what was there.
"""

from __future__ import annotations

import signal
import socket
import threading
from collections import deque
from collections.abc import Callable
from types import FrameType
from typing import Any

from ._errors import UnsupportedFeatureError

__all__ = ["SignalState"]

_Handler = Callable[[int, FrameType | None], Any] | int | signal.Handlers | None


class SignalState:
    """Installed handlers, their previous values, the wakeup socketpair and pending signals."""

    __slots__ = ("pending", "counts", "previous", "reader", "writer", "previous_wakeup", "_watch")

    def __init__(self, watch: Callable[[socket.socket | None], None]) -> None:
        self.pending: deque[int] = deque()
        self.counts: dict[int, int] = {}
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
        if not 0 < signum < signal.NSIG or signum in (signal.SIGKILL, signal.SIGSTOP):
            raise ValueError(f"signum must be a catchable signal number, not {signum}")
        if threading.current_thread() is not threading.main_thread():
            raise UnsupportedFeatureError("Signals can only be handled in the main thread")
        return signum

    def _handler(self, signum: int, frame: FrameType | None) -> None:
        self.pending.append(signum)

    def add(self, signum: int) -> None:
        """One more callback for ``signum``: install the handler with the first."""
        count = self.counts.get(signum, 0)
        if count == 0:
            if not self.counts:
                self._open_wakeup()
            try:
                self.previous[signum] = signal.signal(signum, self._handler)
            except BaseException:
                if not self.counts:
                    self._close_wakeup()
                raise
        self.counts[signum] = count + 1

    def remove(self, signum: int) -> None:
        """One callback fewer for ``signum``: restore the previous handler with the last."""
        count = self.counts[signum] - 1
        if count:
            self.counts[signum] = count
            return
        del self.counts[signum]
        previous = self.previous.pop(signum)
        signal.signal(signum, previous if previous is not None else signal.SIG_DFL)
        if not self.counts:
            self._close_wakeup()

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
        reader, writer = socket.socketpair()
        reader.setblocking(False)
        writer.setblocking(False)
        self.previous_wakeup = signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
        self.reader, self.writer = reader, writer
        self._watch(reader)

    def _close_wakeup(self) -> None:
        reader, writer = self.reader, self.writer
        if reader is None or writer is None:
            return
        self._watch(None)
        signal.set_wakeup_fd(self.previous_wakeup)
        self.previous_wakeup = -1
        self.reader = self.writer = None
        reader.close()
        writer.close()
        self.pending.clear()

    def close(self) -> None:
        """Restore every handler and the wakeup fd (the driver is going away)."""
        for signum in list(self.counts):
            self.counts[signum] = 1
            self.remove(signum)
