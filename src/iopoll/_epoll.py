"""The ``EPOLL`` backend (Linux): translation between ``select.epoll`` flags and ``Event``.

Why the choices:
* ``EPOLLONESHOT`` makes the kernel disarm a one-shot fd as it reports it, which saves a
  system call per event and means a report cut by ``max_events`` is never lost (the kernel
  delivers at most ``maxevents`` and keeps the rest armed).
* epoll refuses fds that do not support polling (regular files, ``/dev/null``) with EPERM;
  that is the backend's missing feature, not the caller's permission: ``NOSUPPORT``.
* An entry in the interest list is keyed by (fd number, open file).  Closing an fd whose
  file a ``dup`` keeps open leaves an entry that ``EPOLL_CTL_DEL`` can no longer reach;
  ``unregister`` reports that, and the Context rebuilds the epoll object.
* Linux lists an epoll object's entries in ``/proc/self/fdinfo/<epfd>``, one line per
  entry with the registered file's inode (``tfd: N events: .. data: .. pos:.. ino:X``):
  what the rebuild asks (``registered_files``) before it registers a watcher again by its
  number, which may name another file now: a bare ``int`` fd's, or a stream's whose fd was
  closed behind its back (``os.close``), which the stream cannot tell.
"""

from __future__ import annotations

import errno
import os
import select
from typing import ClassVar

from _iopoll_core.events import DecodeTable, ErrorCode, Event, decode_table, flag_encoder
from _iopoll_core.mechanism import Mechanism
from _iopoll_core.process_handles import PIDFD_AVAILABLE
from _iopoll_core.signal_handles import SIGNALFD_AVAILABLE

__all__ = ["EpollMechanism"]

# The epoll registration mask for ``Event`` bits (EPOLLERR and EPOLLHUP are implied).
epoll_mask = flag_encoder(
    [
        (Event.READ, select.EPOLLIN),
        (Event.WRITE, select.EPOLLOUT),
        (Event.PRIORITY, select.EPOLLPRI),
        (Event.READ_HANGUP, select.EPOLLRDHUP),
        (Event.ONESHOT, select.EPOLLONESHOT),
        (Event.EDGE_TRIGGERED, select.EPOLLET),
    ]
)


class EpollMechanism(Mechanism):
    """``select.epoll``: O(ready) waits, edge-triggered and one-shot in the kernel."""

    supports_edge_triggering: ClassVar[bool] = True
    supports_priority: ClassVar[bool] = True
    supports_read_hangup: ClassVar[bool] = True
    # Signal and process handles are fds here (signalfd, pidfd) where the platform has them.
    supports_signal_handles: ClassVar[bool] = SIGNALFD_AVAILABLE
    supports_process_handles: ClassVar[bool] = PIDFD_AVAILABLE
    disarms_reported_oneshots: ClassVar[bool] = True
    errno_codes: ClassVar[dict[int, ErrorCode]] = {errno.EPERM: ErrorCode.NOSUPPORT}
    decode: ClassVar[DecodeTable] = decode_table(
        [
            (select.EPOLLIN, Event.READ),
            (select.EPOLLOUT, Event.WRITE),
            (select.EPOLLERR, Event.ERROR),
            (select.EPOLLHUP, Event.HANGUP),
            (select.EPOLLRDHUP, Event.READ_HANGUP),
            (select.EPOLLPRI, Event.PRIORITY),
        ]
    )

    def __init__(self) -> None:
        self._epoll = select.epoll()
        # epoll.poll(timeout_seconds, maxevents) already has the Mechanism.poll signature.
        self.poll = self._epoll.poll
        self.native_fd = self._epoll.fileno()

    def register(self, fd: int, events: int) -> None:
        self._epoll.register(fd, epoll_mask(events))

    def modify(self, fd: int, events: int) -> None:
        try:
            self._epoll.modify(fd, epoll_mask(events))
        except FileNotFoundError:  # disarmed by unregistering, or lost in a rebuild
            self._epoll.register(fd, epoll_mask(events))

    def unregister(self, fd: int) -> bool:
        try:
            self._epoll.unregister(fd)
        except OSError:  # EBADF: fd closed; ENOENT: the number now names another file
            return False
        return True

    def disarm(self, fd: int) -> None:
        # Only for one-shots reported from buffered bytes: the kernel did not disarm them.
        self.unregister(fd)

    def registered_files(self) -> dict[int, set[int]] | None:
        # os.open and os.read rather than open(): no buffered file object, whose lock's
        # allocation fails with RuntimeError rather than MemoryError.
        try:
            fd = os.open(f"/proc/self/fdinfo/{self.native_fd}", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:  # no /proc here
            return None
        try:
            chunks = []
            while chunk := os.read(fd, 65536):
                chunks.append(chunk)
        finally:
            os.close(fd)
        held: dict[int, set[int]] = {}
        for line in b"".join(chunks).splitlines():
            if line.startswith(b"tfd:"):
                fields = line.split()
                inode = [field[4:] for field in fields if field.startswith(b"ino:")]
                if inode:
                    held.setdefault(int(fields[1]), set()).add(int(inode[0], 16))
        # No entry listed: a kernel (or a sandbox's /proc) that does not list them, as far
        # as this can tell; a rebuild always has the stale entry that asked for it.
        return held or None

    def close(self) -> None:
        self._epoll.close()
