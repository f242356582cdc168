"""The ``POLL`` backend (POSIX): translation between ``select.poll`` flags and ``Event``.

poll() has no one-shot or edge mode: a one-shot fd is disarmed by taking it out of the
poll set (a disarmed fd must not report even a hang-up).  POLLNVAL marks an fd that was
closed behind the handle's back; the Context reports it once as ``ERROR`` and drops it.
Regular files and ``/dev/null`` are accepted and always ready.

The registrations are kept twice: in CPython's ``select.poll`` object, which the pure-Python
path polls, and as an array of ``struct pollfd`` (``native_pollfds``), on which iopoll's C
fast path calls poll(2) itself (on the array in place while it holds the GIL, so poll(2)
writes the entries' ``revents``, which nothing here reads; on a copy for a call that
blocks).  The array keeps the poll object's order (CPython's is its
dict's: insertion order, a re-registered fd going last, a modified one staying put), so
both paths see the reports in the same order.  An unregistered fd's entry becomes -1, which
poll() skips (the last entry is dropped instead, with any holes before it), and the array
is compacted once such holes make up half of it, or before a new entry would take it past
the open-files limit (poll(2) counts the holes too).
"""

from __future__ import annotations

import math
import resource
import select
import struct
import sys
from typing import ClassVar

from _iopoll_core.errors import raised_by_backend
from _iopoll_core.events import DecodeTable, Event, decode_table, flag_encoder
from _iopoll_core.mechanism import Mechanism
from _iopoll_core.process_handles import PIDFD_AVAILABLE
from _iopoll_core.signal_handles import SIGNALFD_AVAILABLE

__all__ = ["PollMechanism"]

# struct pollfd { int fd; short events; short revents; }: 8 bytes on every POSIX ABI.
_POLLFD = struct.Struct("ihh")
_NO_FD = -1  # an entry poll() skips

_POLLRDHUP = getattr(select, "POLLRDHUP", 0)  # Linux only


def _open_files_limit() -> float:
    """The soft RLIMIT_NOFILE, which poll(2)'s entry count may not pass (inf: no limit)."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return math.inf if soft == resource.RLIM_INFINITY else soft

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

    native_pollfds: bytearray  # the poll set the C fast path polls (module docstring)
    _entries: dict[int, int]  # fd -> the index of its entry in native_pollfds
    _holes: int  # entries of unregistered fds

    def __init__(self) -> None:
        self._poll_object = select.poll()
        self._wait_ms = self._poll_object.poll
        self.native_pollfds = bytearray()
        self._entries = {}
        self._holes = 0

    def register(self, fd: int, events: int) -> None:
        mask = poll_mask(events)
        index = self._entries.get(fd)
        if index is None:  # a new fd goes last, as in the poll object's dict
            if self._holes and len(self.native_pollfds) // _POLLFD.size >= _open_files_limit():
                # poll(2) refuses more entries than RLIMIT_NOFILE (EINVAL), holes included:
                # drop the holes first, which leaves room (every live entry is an open fd).
                self._compact()
            self._poll_object.register(fd, mask)
            size = len(self.native_pollfds)
            try:
                self.native_pollfds += _POLLFD.pack(fd, mask, 0)
                self._entries[fd] = size // _POLLFD.size
            except BaseException:  # MemoryError: the three records agree again
                del self.native_pollfds[size:]  # nothing, or the entry just added
                self._poll_object.unregister(fd)
                raise
        else:  # CPython's poll.register() replaces an entry in place: modify means that
            self._poll_object.register(fd, mask)
            _POLLFD.pack_into(self.native_pollfds, index * _POLLFD.size, fd, mask, 0)

    modify = register

    def unregister(self, fd: int) -> bool:
        try:
            self._poll_object.unregister(fd)
        except KeyError:  # already disarmed
            pass
        index = self._entries.pop(fd, None)
        if index is None:
            return True
        pollfds = self.native_pollfds
        if (index + 1) * _POLLFD.size == len(pollfds):
            # The last entry goes, with the holes just before it, rather than becoming a
            # hole: a server's add and remove of one connection then leaves none, and the
            # next register() does not read the open-files limit (a system call).
            end = index
            while end and _POLLFD.unpack_from(pollfds, (end - 1) * _POLLFD.size)[0] == _NO_FD:
                end -= 1
                self._holes -= 1
            del pollfds[end * _POLLFD.size :]
            return True
        _POLLFD.pack_into(pollfds, index * _POLLFD.size, _NO_FD, 0, 0)
        self._holes += 1
        if self._holes * 2 > len(self._entries) + 16:
            self._compact()
        return True

    def _compact(self) -> None:
        """Drop the holes, keeping the order of the live entries."""
        entries = sorted(self._entries.items(), key=lambda item: item[1])
        array = bytearray(len(entries) * _POLLFD.size)
        old = self.native_pollfds
        for new_index, (fd, index) in enumerate(entries):
            start = index * _POLLFD.size
            array[new_index * _POLLFD.size : (new_index + 1) * _POLLFD.size] = old[
                start : start + _POLLFD.size
            ]
            self._entries[fd] = new_index
        old[:] = array  # in place: the Context holds this very object
        self._holes = 0

    def disarm(self, fd: int) -> None:
        self.unregister(fd)

    def poll(self, timeout: float, max_events: int) -> list[tuple[int, int]]:
        # poll() takes milliseconds; a negative timeout means forever, as ours does.
        try:
            return self._wait_ms(timeout * 1000.0)
        except RuntimeError as exc:
            if not raised_by_backend(exc, type(self)):
                raise  # a signal handler's: it leaves wait() (PEP 475)
            # CPython's poll object refuses a poll() while one of its own runs ("concurrent
            # poll() invocation"): a wait() nested in a signal handler, during a blocking
            # one.  That wait polls a poll object of its own, as the C path does (and as
            # EPOLL allows); the outer poll goes on with its own when the handler returns.
            return self._copy().poll(timeout * 1000.0)

    def _copy(self) -> select.poll:
        """A new poll object with this poll set, in the array's order (the poll object's)."""
        copy = select.poll()
        for fd, mask, _ in _POLLFD.iter_unpack(self.native_pollfds):
            if fd != _NO_FD:
                copy.register(fd, mask)
        return copy
