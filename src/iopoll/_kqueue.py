"""The ``KQUEUE`` backend (macOS, BSD): translation between kevents and ``Event``.

kqueue watches reading and writing as two filters of one fd (``EVFILT_READ``,
``EVFILT_WRITE``), so this module adds and deletes filters as the watched events change, and
merges the two reports of one fd into one entry.  ``EV_CLEAR`` gives edge-triggering.
One-shot is left to the Context (deleting the filters disarms it), so that a report cut by
``max_events`` is never lost.

What a kevent means depends on the kind of file (``fstat`` at ``register``), and the rules
below are chosen to report what epoll and poll(2) report for the same state:

* **Switching level <-> edge.**  BSD reads a knote's flags only when it creates it: an
  ``EV_ADD`` with or without ``EV_CLEAR`` on an existing filter keeps the old mode.  When
  the mode of a filter changes, it is deleted and added again.
* **Sockets: half-close and hang-up.**  ``EV_EOF`` on the *read* filter means the peer will
  send nothing more: a half-close (``shutdown(SHUT_WR)``) or a full close look the same
  there.  So it is ``READ`` plus ``READ_HANGUP`` (which this backend supports, SPEC 2: "from
  ``EV_EOF`` on the read filter"), and ``HANGUP`` only once writing is over too: ``EV_EOF``
  on the *write* filter, which a watcher asking for ``WRITE`` has anyway, and which is
  probed once (an ``EV_ONESHOT`` write filter on a second kqueue) for a watcher that does
  not.  That is epoll's ``EPOLLHUP``: both directions shut.  An error in ``fflags`` with
  ``EV_EOF`` (a reset, a refused connect) is ``ERROR|HANGUP``.
* **READ_HANGUP without READ, and a watcher of neither READ nor WRITE.**  A level read
  filter fires while bytes are unread, which such a watcher does not want reported: it
  would make every ``wait()`` return at once with nothing.  Its read filter is added with
  ``EV_CLEAR`` instead.  A watcher that asks for neither ``READ`` nor ``WRITE`` (``ERROR``
  or ``HANGUP`` alone, or modes alone) gets that read filter too: kqueue has no filter for
  errors and hang-ups alone, and SPEC 6.2 reports them asked or not.  Once the filter
  reported an end of file that the watcher is told of (which never goes away: a pipe's
  other end gone, a socket shut both ways, or its peer's half-close for ``READ_HANGUP``),
  the fd is reported on every ``wait()``, as level asks.  A socket's ``ERROR`` is reported
  once, with the end of file: the error goes away when the application reads it, which
  this backend cannot see without consuming it.
* **Pipes, FIFOs, terminals.**  ``EV_EOF`` on the read filter means the writer is gone:
  ``HANGUP``, with ``READ`` only while bytes are left (``data > 0``), as poll(2) says.
  ``EV_EOF`` on the write filter means the reader is gone and a write fails with
  ``EPIPE``: ``WRITE|ERROR``, no ``HANGUP`` (poll's ``POLLOUT|POLLERR``).  Each filter can
  be asked of the other end of a pipe too (libuv watches a write end for reading, to learn
  that the reader left), where ``EV_EOF`` means the other side is gone: on a write end
  the read filter's is ``ERROR`` (poll's ``POLLERR``), on a read end the write filter's
  is ``HANGUP`` (``POLLHUP``).  So a pipe's end is told by its access mode at
  registration, and an error in ``fflags`` is read as a socket's only.
* **Regular files** (SPEC 6.7 is silent on ``KQUEUE``; the rule is stated in
  ``docs/testing-your-backend.md`` and held by the conformance suite): accepted.  ``WRITE``
  is always ready; ``READ`` is ready while the file offset is before end of file, which is
  what kqueue's read filter on a vnode says (``data`` is the bytes left).  **Devices**
  the OS's kqueue cannot watch (``ENODEV``, FreeBSD's ``/dev/null``) are
  ``FailedHandleAddError`` with ``NOSUPPORT``.
* ``EV_ERROR`` (a change that failed, reported in the event list) is ``ERROR``.

kqueue drops a closed fd's filters itself, so nothing can go stale (``unregister`` is always
True).  The translation functions take and return plain ints so that they can be
unit-tested on platforms without ``select.kqueue``; the constants fall back to their BSD
values there.  ``select.kqueue`` and ``select.kevent`` are looked up when a mechanism is
made, not at import.

iopoll's C fast path calls ``kevent(2)`` itself on the kqueue's fd (``native_kqueue``) and
turns the plain kevents into reports in C: a read or write filter that is ready, with
neither ``EV_EOF`` nor ``EV_ERROR``, for a watcher that asked for it, merged per fd.  Every
rule above is about the other kevents, and a batch holding one of those is handed back,
whole, to ``translate_kevents``, the same translation ``poll`` runs.  ``native_kqueue`` is
-1 while the C path may not wait at all: while the end of file of a level watcher without
``READ`` is reported without asking the OS (``_at_eof``), and for a kqueue object that is not
``select.kqueue`` unless it says it may (``raw_wait_fd()``, which the test binding over
libkqueue offers while it emulates nothing).
"""

from __future__ import annotations

import errno
import os
import select
import stat
import time
from typing import Any, ClassVar

from _iopoll_core.events import DecodeTable, ErrorCode, Event, decode_table
from _iopoll_core.mechanism import Mechanism, is_pipe_write_end
from _iopoll_core.process_handles import PIDFD_AVAILABLE
from _iopoll_core.signal_handles import SIGNALFD_AVAILABLE

__all__ = [
    "KqueueMechanism",
    "FILE",
    "OTHER",
    "PIPE_READ_END",
    "PIPE_WRITE_END",
    "SOCKET",
    "filter_changes",
    "file_kind",
    "merge_kevents",
    "readiness",
    "report",
]

# Typed loosely: the type checker may run on a platform whose select module lacks kqueue.
_select: Any = select
# select's own kqueue type, whose fd the C fast path may wait on (None where there is none:
# a look-alike installed later, such as the test binding, is asked with raw_wait_fd()).
_NATIVE_KQUEUE: Any = getattr(select, "kqueue", None)

FILTER_READ = getattr(select, "KQ_FILTER_READ", -1)
FILTER_WRITE = getattr(select, "KQ_FILTER_WRITE", -2)
EV_ADD = getattr(select, "KQ_EV_ADD", 0x0001)
EV_DELETE = getattr(select, "KQ_EV_DELETE", 0x0002)
EV_ENABLE = getattr(select, "KQ_EV_ENABLE", 0x0004)
EV_ONESHOT = getattr(select, "KQ_EV_ONESHOT", 0x0010)
EV_CLEAR = getattr(select, "KQ_EV_CLEAR", 0x0020)
EV_ERROR = getattr(select, "KQ_EV_ERROR", 0x4000)
EV_EOF = getattr(select, "KQ_EV_EOF", 0x8000)

# The kinds of file whose kevents mean different things.
SOCKET, FILE, OTHER, PIPE_READ_END, PIPE_WRITE_END = 0, 1, 2, 3, 4

_READ = Event.READ.value
_WRITE = Event.WRITE.value
_ERROR = Event.ERROR.value
_HANGUP = Event.HANGUP.value
_READ_HANGUP = Event.READ_HANGUP.value
_EDGE = Event.EDGE_TRIGGERED.value
# What a registration keeps of the watched events.
_KEPT = _READ | _WRITE | _READ_HANGUP | _EDGE
# Internal only, never returned: the read filter said end of file.
READ_EOF = 1 << 24
# Internal only, in every registration's kept events: one that asks for no event bit
# (ERROR or HANGUP alone, or modes alone) is still told apart from no registration.
_REGISTERED = 1 << 25


def file_kind(mode: int) -> int:
    """``SOCKET``, ``FILE`` (regular) or ``OTHER`` (pipe, FIFO, device) for an ``st_mode``."""
    if stat.S_ISSOCK(mode):
        return SOCKET
    if stat.S_ISREG(mode):
        return FILE
    return OTHER


def kind_of(fd: int) -> int:
    """``fd``'s kind, a pipe's or FIFO's end told by its access mode (read end if both)."""
    mode = os.fstat(fd).st_mode
    kind = file_kind(mode)
    if stat.S_ISFIFO(mode):
        return PIPE_WRITE_END if is_pipe_write_end(fd) else PIPE_READ_END
    return kind


def _reads_end_of_file_only(events: int) -> bool:
    """Whether a registration of ``events`` (0: none) has a read filter for its end of file
    only: ``READ_HANGUP`` without ``READ``, or neither ``READ`` nor ``WRITE``, which learns
    of a hang-up from it."""
    if not events or events & _READ:
        return False
    return bool(events & _READ_HANGUP or not events & _WRITE)


def _keeps_end_of_file(events: int) -> bool:
    """Whether ``events`` is a level watcher whose read filter is added with ``EV_CLEAR``
    although it is level: the mechanism itself keeps its end of file level."""
    return not events & _EDGE and _reads_end_of_file_only(events)


def _filters(events: int) -> dict[int, bool]:
    """The filters ``events`` needs (none for 0, no registration), each with whether it is
    added with ``EV_CLEAR``."""
    wanted: dict[int, bool] = {}
    if events & _READ or _reads_end_of_file_only(events):
        # No READ: edge, so that unread bytes do not fire it on every wait.
        wanted[FILTER_READ] = bool(events & _EDGE or not events & _READ)
    if events & _WRITE:
        wanted[FILTER_WRITE] = bool(events & _EDGE)
    return wanted


def filter_changes(old_events: int, new_events: int) -> list[tuple[int, int]]:
    """The ``(filter, flags)`` changes that take an fd from ``old_events`` to ``new_events``.

    ``old_events`` is 0 for a new or disarmed fd.  A filter that stays is added again (which
    makes kqueue look at the fd again, as ``EPOLL_CTL_MOD`` does); one whose mode changes
    is deleted first, as kqueue keeps a knote's ``EV_CLEAR`` from its creation.
    """
    old, new = _filters(old_events), _filters(new_events)
    # A level watcher with an edge read filter keeps its end of file itself; switched to or
    # from that, its filter is made afresh, which looks at the fd (libkqueue's EV_ADD on an
    # existing filter does not, and the end of file would never come again).
    remade = _keeps_end_of_file(old_events) != _keeps_end_of_file(new_events)
    changes = []
    for kfilter in (FILTER_READ, FILTER_WRITE):
        if kfilter in new:
            if kfilter in old and (
                old[kfilter] != new[kfilter] or (remade and kfilter == FILTER_READ)
            ):
                changes.append((kfilter, EV_DELETE))
            changes.append((kfilter, EV_ADD | EV_ENABLE | (EV_CLEAR if new[kfilter] else 0)))
        elif kfilter in old:
            changes.append((kfilter, EV_DELETE))
    return changes


def readiness(kfilter: int, flags: int, fflags: int, data: int = 0, kind: int = SOCKET) -> int:
    """The raw bits one returned kevent stands for (``READ_EOF`` included; see ``report``).

    ``data`` is the kevent's (bytes readable, for the read filter); ``kind`` the file's.
    """
    if flags & EV_ERROR:
        return _ERROR
    if kfilter == FILTER_READ:
        if not flags & EV_EOF:
            return _READ
        if kind == PIPE_WRITE_END:  # the reader is gone: a write fails with EPIPE
            return READ_EOF | _ERROR
        if fflags and kind not in (PIPE_READ_END, PIPE_WRITE_END):
            # The socket error that ended the connection: both directions are over.
            return READ_EOF | _READ | _READ_HANGUP | _ERROR | _HANGUP
        if kind == SOCKET:  # the peer sends no more; HANGUP only once writing is over too
            return READ_EOF | _READ | _READ_HANGUP
        # A pipe or FIFO whose writer is gone: READ only while bytes are left.
        return READ_EOF | _HANGUP | (_READ if data > 0 else 0)
    if kfilter == FILTER_WRITE:
        if not flags & EV_EOF:
            return _WRITE
        if kind == SOCKET:
            return _WRITE | _HANGUP | (_ERROR if fflags else 0)
        if kind == PIPE_READ_END:  # the writer is gone; this end never could write
            return _HANGUP
        return _WRITE | _ERROR  # the reader is gone: a write fails with EPIPE
    return 0


def merge_kevents(
    kevents: list[tuple[int, int, int, int, int]], kinds: dict[int, int] | None = None
) -> dict[int, int]:
    """Merge ``(ident, filter, flags, fflags, data)`` reports into raw bits per fd, in the
    order the fds first appear.  ``kinds`` gives each fd's kind (default ``SOCKET``)."""
    kinds = kinds or {}
    merged: dict[int, int] = {}
    for ident, kfilter, flags, fflags, data in kevents:
        bits = readiness(kfilter, flags, fflags, data, kinds.get(ident, SOCKET))
        merged[ident] = merged.get(ident, 0) | bits
    return merged


def report(bits: int, watched: int) -> int:
    """What is reported of ``bits`` to a watcher of ``watched``: ``READ``, ``WRITE`` and
    ``READ_HANGUP`` when asked, ``ERROR`` and ``HANGUP`` always (SPEC 6.2)."""
    return bits & ((watched & (_READ | _WRITE | _READ_HANGUP)) | _ERROR | _HANGUP)


class KqueueMechanism(Mechanism):
    """``select.kqueue``: O(ready) waits and edge-triggering (``EV_CLEAR``)."""

    supports_edge_triggering: ClassVar[bool] = True
    supports_read_hangup: ClassVar[bool] = True
    # Signal and process handles are fds here (signalfd, pidfd) where the platform has them.
    supports_signal_handles: ClassVar[bool] = SIGNALFD_AVAILABLE
    supports_process_handles: ClassVar[bool] = PIDFD_AVAILABLE
    # A device kqueue cannot watch (FreeBSD's devfs: ENODEV) is a missing feature.
    errno_codes: ClassVar[dict[int, ErrorCode]] = {errno.ENODEV: ErrorCode.NOSUPPORT}
    decode: ClassVar[DecodeTable] = decode_table(
        [
            (bit.value, bit)
            for bit in (Event.READ, Event.WRITE, Event.ERROR, Event.HANGUP, Event.READ_HANGUP)
        ]
    )

    # The kqueue's fd while the C fast path may call kevent(2) on it itself, else -1 (the
    # module docstring says when); kept by _sync_native, read by the C path on every wait.
    native_kqueue: int

    def __init__(self) -> None:
        self._kqueue = _select.kqueue()
        self._kevent = _select.kevent
        self._registered: dict[int, int] = {}  # fd -> the watched events its filters serve
        self._kinds: dict[int, int] = {}  # fd -> its kind (kind_of)
        # Level watchers without READ whose read filter reported an end of file they are
        # told of -> its bits (_keeps_end_of_file).
        self._at_eof: dict[int, int] = {}
        self._prober: Any = None  # a second kqueue, made on first use by _writing_over
        self._sync_native()

    def _sync_native(self) -> None:
        """Set ``native_kqueue`` from what it depends on: ``_at_eof``, the kqueue being open,
        and, for a kqueue object that is not ``select.kqueue``, its ``raw_wait_fd()``."""
        kqueue = self._kqueue
        if self._at_eof or kqueue.closed:
            self.native_kqueue = -1
        elif _NATIVE_KQUEUE is not None and type(kqueue) is _NATIVE_KQUEUE:
            self.native_kqueue = kqueue.fileno()
        else:
            raw_wait_fd = getattr(kqueue, "raw_wait_fd", None)
            self.native_kqueue = -1 if raw_wait_fd is None else raw_wait_fd()

    def _apply(self, fd: int, events: int) -> None:
        old = self._registered.get(fd, 0)
        changes = filter_changes(old, events)
        kevents = [self._kevent(fd, kfilter, flags) for kfilter, flags in changes]
        self._kqueue.control(kevents, 0, 0)
        if events:
            self._registered[fd] = events & _KEPT | _REGISTERED
        else:
            self._registered.pop(fd, None)
        if fd in self._at_eof and not _keeps_end_of_file(events):
            del self._at_eof[fd]
        self._sync_native()

    def register(self, fd: int, events: int) -> None:
        try:
            self._kinds[fd] = kind_of(fd)
        except OSError:
            self._kinds[fd] = OTHER  # kevent() says what is wrong with the fd
        self._registered.pop(fd, None)  # a new file on this number: no filter of its own yet
        self._at_eof.pop(fd, None)
        self._apply(fd, events)

    def modify(self, fd: int, events: int) -> None:
        self._apply(fd, events)

    def unregister(self, fd: int) -> bool:
        # kqueue drops an fd's filters when the fd is closed, so nothing can go stale.
        try:
            self._apply(fd, 0)
        except OSError:  # ENOENT (macOS) or EBADF (FreeBSD): already gone
            pass
        self._registered.pop(fd, None)
        if self._at_eof.pop(fd, None) is not None:
            self._sync_native()
        return True

    def disarm(self, fd: int) -> None:
        self.unregister(fd)

    def poll(self, timeout: float, max_events: int) -> list[tuple[int, int]]:
        """Wait up to ``timeout`` seconds; the ``(fd, Event bits)`` reports, one per fd."""
        # A kevent can mean nothing to report (bytes for a watcher without READ): the
        # wait then goes on for the time left, so that poll returns early only with reports.
        deadline = time.monotonic() + timeout if timeout > 0 else timeout
        while True:
            reports, woken = self._poll_once(timeout, max_events)
            if reports or not woken or timeout == 0:
                return reports
            if deadline > 0:
                timeout = deadline - time.monotonic()
                if timeout <= 0:
                    return reports

    def _poll_once(self, timeout: float, max_events: int) -> tuple[list[tuple[int, int]], bool]:
        """One ``kevent()``: the reports, and whether any kevent came at all."""
        # Two filters per fd: room for both reports of every fd asked for.
        batch = 2 * (len(self._registered) if max_events < 0 else max_events)
        if self._at_eof:
            timeout = 0.0  # some are ready without asking the OS
        kevents = self._kqueue.control(None, max(batch, 1), None if timeout < 0 else timeout)
        reports = self.translate_kevents(
            [(k.ident, k.filter, k.flags, k.fflags, k.data) for k in kevents]
        )
        return reports, bool(kevents)

    def translate_kevents(
        self, kevents: list[tuple[int, int, int, int, int]]
    ) -> list[tuple[int, int]]:
        """The ``(fd, Event bits)`` reports, one per fd, of one ``kevent()`` call's
        ``(ident, filter, flags, fflags, data)`` tuples (see the module docstring).  iopoll's
        C fast path calls it with a batch that holds more than plain reports."""
        merged = merge_kevents(kevents, self._kinds)
        at_eof = self._at_eof
        for fd, bits in at_eof.items():
            merged[fd] = merged.get(fd, 0) | bits
        had_eof = bool(at_eof)
        reports = []
        for fd, bits in merged.items():
            watched = self._registered.get(fd)
            if watched is None:  # no registration here: the Context decides what it is
                reports.append((fd, report(bits, _READ | _WRITE)))
                continue
            if bits & READ_EOF:
                socket_kind = self._kinds.get(fd) == SOCKET
                if (
                    socket_kind
                    and not bits & _HANGUP
                    and not watched & _WRITE
                    and self._writing_over(fd)
                ):
                    bits |= _HANGUP
                if _keeps_end_of_file(watched):
                    # Level from now on: the end of file and a hang-up, which never go away,
                    # but not a socket's error, which the application's next read consumes
                    # (a pipe's is its other end gone).  Kept only while it is reported: a
                    # kept fd makes every wait ask the OS without waiting.
                    kept = bits & ~_ERROR if socket_kind else bits
                    if report(kept, watched):
                        at_eof[fd] = kept
                    else:
                        at_eof.pop(fd, None)
            bits = report(bits, watched)
            if bits:
                reports.append((fd, bits))
        if bool(at_eof) != had_eof:
            self._sync_native()
        return reports

    def _writing_over(self, fd: int) -> bool:
        """Whether writing on socket ``fd`` is over too (a hang-up, not a half-close).

        Asked of a second kqueue with a one-shot write filter, for a watcher that has no
        write filter of its own: its ``EV_EOF`` means both directions are shut.
        """
        if self._prober is None:
            self._prober = _select.kqueue()
        probe = self._kevent(fd, FILTER_WRITE, EV_ADD | EV_ONESHOT)
        try:
            found = self._prober.control([probe], 1, 0)
        except OSError:
            return False
        if not found:  # not writable, so not at end of file either: take the filter back
            try:
                self._prober.control([self._kevent(fd, FILTER_WRITE, EV_DELETE)], 0, 0)
            except OSError:
                pass
            return False
        return bool(found[0].flags & EV_EOF)

    def close(self) -> None:
        self._kqueue.close()
        self.native_kqueue = -1
        if self._prober is not None:
            self._prober.close()
