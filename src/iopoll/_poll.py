"""The ``POLL`` backend (POSIX): translation between ``select.poll`` flags and ``Event``.

poll() has no one-shot or edge mode: a one-shot fd is disarmed by taking it out of the
poll set (a disarmed fd must not report even a hang-up).  POLLNVAL marks an fd that was
closed behind the handle's back; the Context reports it once as ``ERROR`` and drops it.
Regular files and ``/dev/null`` are accepted and always ready.
"""

from __future__ import annotations

import select
import sys
from typing import ClassVar

from _iopoll_core.events import DecodeTable, Event, decode_table, flag_encoder
from _iopoll_core.mechanism import Mechanism
from _iopoll_core.process_handles import PIDFD_AVAILABLE
from _iopoll_core.signal_handles import SIGNALFD_AVAILABLE

__all__ = ["PollMechanism"]

_POLLRDHUP = getattr(select, "POLLRDHUP", 0)  # Linux only

# The poll() event mask for ``Event`` bits (POLLERR, POLLHUP and POLLNVAL are implied).
poll_mask = flag_encoder(
    [
        (Event.READ, select.POLLIN),
        (Event.WRITE, select.POLLOUT),
        (Event.PRIORITY, select.POLLPRI),
        (Event.READ_HANGUP, _POLLRDHUP),
    ]
)


class PollMechanism(Mechanism):
    """``select.poll``: level-triggered, O(registered) per wait, no fd limit."""

    supports_priority: ClassVar[bool] = sys.platform != "darwin"  # macOS poll() lacks POLLPRI
    supports_read_hangup: ClassVar[bool] = bool(_POLLRDHUP)
    # Signal and process handles are fds here (signalfd, pidfd) where the platform has them.
    supports_signal_handles: ClassVar[bool] = SIGNALFD_AVAILABLE
    supports_process_handles: ClassVar[bool] = PIDFD_AVAILABLE
    invalid_fd_bit: ClassVar[int] = select.POLLNVAL
    decode: ClassVar[DecodeTable] = decode_table(
        [
            (select.POLLIN, Event.READ),
            (select.POLLOUT, Event.WRITE),
            (select.POLLERR, Event.ERROR),
            (select.POLLHUP, Event.HANGUP),
            (_POLLRDHUP, Event.READ_HANGUP),
            (select.POLLPRI, Event.PRIORITY),
        ]
    )

    def __init__(self) -> None:
        self._poll_object = select.poll()
        self._wait_ms = self._poll_object.poll

    def register(self, fd: int, events: int) -> None:
        self._poll_object.register(fd, poll_mask(events))

    # CPython's poll.register() replaces an existing entry, which is what modify means.
    modify = register

    def unregister(self, fd: int) -> bool:
        try:
            self._poll_object.unregister(fd)
        except KeyError:  # already disarmed
            pass
        return True

    def disarm(self, fd: int) -> None:
        self.unregister(fd)

    def poll(self, timeout: float, max_events: int) -> list[tuple[int, int]]:
        # poll() takes milliseconds; a negative timeout means forever, as ours does.
        return self._wait_ms(timeout * 1000.0)
