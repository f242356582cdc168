"""The ``SELECT`` backend on ``select.select()``: the polyfill's, and iopoll's last resort.

select() reports only "readable" and "writable", so this module derives the rest:

* Every watched fd is in the read set, so that a hang-up is seen even by a ``WRITE``-only
  watcher.  A readable socket or pipe with no bytes waiting has reached end of file: that
  is ``HANGUP`` (a socket also gets ``READ`` when asked; a pipe gets ``HANGUP`` alone, as
  poll() says).  A socket with an error pending (a reset, a refused connect) is
  ``ERROR|HANGUP`` for as long as the error is pending.  The error is left for the
  application: a read, or ``getsockopt(SO_ERROR)``, would clear it, and a non-blocking
  ``connect()`` learns its outcome from exactly that ``SO_ERROR``.  So the pending error is
  asked of a one-fd ``poll()`` (``POLLERR``), which clears nothing, before any peek; where
  there is no ``poll()`` (Windows) the peek's failure stands in for it.  The write end of a
  pipe reads as ready only once its reader is gone: ``ERROR``.  ``READ_HANGUP`` is never
  reported.
* A fd readable only because of bytes its watcher did not ask for is taken out of the read
  set for the rest of that ``wait()`` (it stays in the write set); otherwise select() would
  return at once, forever, and the wait would spin.
* A closed fd makes select() fail with EBADF for the whole call; the culprits are found
  with ``fstat`` and reported as invalid, so the Context reports them once and drops them.
  Linux checks only the fds below the size of the process's fd table and leaves the bits
  above it as they were passed, so a fd number that was never open and lies beyond the
  table would come back "ready" from every select().  ``register`` sees it (its ``fstat``
  fails), and the next poll reports it invalid without asking select().
* fds at or above ``FD_SETSIZE`` cannot be put in an ``fd_set`` (POSIX), and Windows
  CPython's sets hold at most ``FD_SETSIZE`` sockets: ``register`` refuses both as ``TOOBIG``.

Cost per ``wait()``: one select() and, per readable socket or pipe, one ``FIONREAD`` ioctl
into a buffer owned by the mechanism.  The rarer peek (end of file, reset) builds a socket
object; listening and datagram sockets, which have no end of file, are recognised by the
first peek and never peeked again.
"""

from __future__ import annotations

import contextlib
import errno
import os
import select
import socket
import stat
import sys
import time
from collections.abc import Callable, Iterator
from typing import ClassVar

from .errors import Refusal, raised_by_backend
from .events import DecodeTable, ErrorCode, Event, decode_table
from .mechanism import Mechanism, is_pipe_write_end

__all__ = ["FD_SETSIZE", "SelectMechanism"]

_ioctl: Callable[[int, int, bytearray], int]
try:  # count the bytes waiting on a socket or pipe without making a socket object
    import fcntl
    import termios
except ImportError:  # Windows: every fd select() takes is a socket: peek instead of FIONREAD
    _FIONREAD = 0

    def _no_ioctl(fd: int, request: int, buffer: bytearray) -> int:
        raise OSError(errno.ENOSYS, "ioctl() is not available here")

    _ioctl = _no_ioctl

else:
    _FIONREAD = termios.FIONREAD
    _ioctl = fcntl.ioctl


_WINDOWS = sys.platform == "win32"
# POSIX limits the fd number; Windows CPython limits the number of sockets per set.
FD_SETSIZE = 512 if _WINDOWS else 1024

# Raw bits handed to the Context (decoded by SelectMechanism.decode).
_READ, _WRITE, _ERROR, _HANGUP, _INVALID = 1, 2, 4, 8, 16
_NOT_READ = ~_READ
_NO_BYTES = b"\0\0\0\0"  # FIONREAD's count when nothing is waiting (any int width >= 4)

# What a readable fd means, by kind (found once, at register or at the first peek).
_ALWAYS = 0  # regular file, tty, device, listening or datagram socket: readable is READ
_STREAM = 1  # stream socket: bytes, end of file or reset
_PIPE = 2  # read end of a pipe or FIFO: bytes or end of file
_PIPE_WRITER = 3  # write end of a pipe: readable only when the reader is gone
_NOT_OPEN = 4  # fstat() failed at register: reported invalid by the next poll

_WANTS_READ = Event.READ.value
_WANTS_WRITE = Event.WRITE.value
_MSG_PEEK_NOW = socket.MSG_PEEK | getattr(socket, "MSG_DONTWAIT", 0)
# A send that asks whether the socket may still send: no wait, and no SIGPIPE (Linux).
_SEND_PROBE = getattr(socket, "MSG_DONTWAIT", 0) | getattr(socket, "MSG_NOSIGNAL", 0)
# A peek's errno on a stream socket that has no peer (Windows: Winsock's own number).
_NOT_CONNECTED = frozenset({errno.ENOTCONN, getattr(errno, "WSAENOTCONN", errno.ENOTCONN)})
_SO_ACCEPTCONN = getattr(socket, "SO_ACCEPTCONN", 0x0002)
_select = select.select


def _kind_of(fd: int) -> int:
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        # Windows sockets are not CRT fds; elsewhere, the fd is not open (yet).
        return _STREAM if _WINDOWS else _NOT_OPEN
    if stat.S_ISSOCK(mode):
        return _STREAM  # until a peek shows it is a listening or datagram socket
    if stat.S_ISFIFO(mode):
        return _PIPE_WRITER if is_pipe_write_end(fd) else _PIPE
    return _ALWAYS  # regular files, ttys, devices: readable means a read will not block


if hasattr(select, "poll"):

    def _error_pending(fd: int) -> bool:
        """Has the socket an error pending?  Asked of poll(), which, unlike a read or
        ``getsockopt(SO_ERROR)``, does not clear it (Linux ``sock_poll``: ``sk_err``)."""
        probe = select.poll()
        probe.register(fd, 0)  # POLLERR is always reported, whatever was asked
        return any(bits & select.POLLERR for _, bits in probe.poll(0))

else:  # Windows: no poll() here; the peek's failure reports the error (and clears it)

    def _error_pending(fd: int) -> bool:
        return False


def _is_listening(sock: socket.socket) -> bool:
    try:
        return bool(sock.getsockopt(socket.SOL_SOCKET, _SO_ACCEPTCONN))
    except OSError:  # the option is missing on some systems: then it is a connection
        return False


@contextlib.contextmanager
def _socket_on(fd: int) -> Iterator[socket.socket | None]:
    """A socket object on ``fd``, detached on exit so the fd stays open; None if ``fd`` was
    closed or replaced by another thread since select() returned."""
    try:
        sock = socket.socket(fileno=fd)
    except OSError:
        yield None
        return
    try:
        yield sock
    finally:
        sock.detach()


def _peek(fd: int, kinds: dict[int, int]) -> int:
    """Classify a readable socket with no bytes counted: end of file, reset, or ready.

    A socket that turns out to have no end of file (listening, datagram) is recorded in
    ``kinds`` as ``_ALWAYS`` so that it is never peeked again.
    """
    with _socket_on(fd) as sock:
        if sock is None:
            return _ERROR | _HANGUP
        if sock.type != socket.SOCK_STREAM or _is_listening(sock):
            kinds[fd] = _ALWAYS  # an empty datagram is data; a listener has a connection
            return _READ
        if _error_pending(fd):
            return _ERROR | _HANGUP  # reset or refused (SPEC 7: no READ); error left unread
        try:
            data = sock.recv(1, _MSG_PEEK_NOW)
        except BlockingIOError:
            return _READ  # nothing after all: a spurious wake-up; level will tell again
        except OSError as exc:
            if exc.errno in _NOT_CONNECTED:
                # Never connected (or shut down before it was): no peer, no error; poll(2)
                # says POLLHUP, with SO_ERROR 0.
                return _HANGUP
            return _ERROR | _HANGUP  # reset (SPEC 7: no READ)
        return _READ if data else _HANGUP | _READ


def _half_closed(fd: int) -> bool:
    """Whether the peer of a socket at end of file only shut down its sending side.

    A zero-length send moves no byte and fails only when this side may not send: the peer
    shut down its receiving side as well (EPIPE on AF_UNIX, where poll says POLLHUP), or
    reset the connection.  TCP cannot tell a peer's SHUT_RDWR from its SHUT_WR until data
    comes back refused, and poll reports no hang-up for either.
    """
    with _socket_on(fd) as sock:
        if sock is None:
            return False
        try:
            sock.send(b"", _SEND_PROBE)
        except OSError:
            return False
        return True


class SelectMechanism(Mechanism):
    """``select.select()``: level-triggered, fds below ``FD_SETSIZE`` only."""

    invalid_fd_bit: ClassVar[int] = _INVALID
    decode: ClassVar[DecodeTable] = decode_table(
        [
            (_READ, Event.READ),
            (_WRITE, Event.WRITE),
            (_ERROR, Event.ERROR),
            (_HANGUP, Event.HANGUP),
        ]
    )

    # What the polyfill's fused wait (iopoll_polyfill/fallback.py) reads, besides poll():
    # what refresh() derives from the registrations (the fd lists select() is given, and
    # `reading`), fresh while ``changed`` is false; and the buffer FIONREAD writes into.
    readers: list[int]
    writers: list[int]
    # Armed fd that asked for READ -> whether its readable report needs FIONREAD (its kind
    # is not _ALWAYS): the two questions the fused wait asks of a report, in one lookup.
    reading: dict[int, bool]
    changed: bool
    kinds: dict[int, int]  # registered fd -> kind (kept while disarmed)
    interest: dict[int, int]  # armed fd -> Event bits
    count: bytearray  # mutable, so that no bytes object is made per call

    def __init__(self) -> None:
        self.interest = {}
        self.kinds = {}
        self.readers = []
        self.writers = []
        self.reading = {}
        self.changed = False
        self._not_open = False  # a fd registered since the last poll had no open file
        self.count = bytearray(len(_NO_BYTES))

    def register(self, fd: int, events: int) -> None:
        if _WINDOWS:
            if fd not in self.kinds and len(self.kinds) >= FD_SETSIZE:
                raise Refusal(
                    ErrorCode.TOOBIG,
                    f"select() on Windows watches at most {FD_SETSIZE} sockets (FD_SETSIZE); "
                    "use iopoll's native backend for more",
                )
        elif fd >= FD_SETSIZE:
            raise Refusal(
                ErrorCode.TOOBIG,
                f"fd {fd} is at or above FD_SETSIZE ({FD_SETSIZE}), the highest select() can "
                "watch; use iopoll with the EPOLL, KQUEUE or POLL backend for such fds",
            )
        kind = _kind_of(fd)
        if kind == _NOT_OPEN:
            self._not_open = True
            kind = _ALWAYS  # if it is open by the next poll, it is whatever fd it became
        self.kinds[fd] = kind
        self.modify(fd, events)

    def modify(self, fd: int, events: int) -> None:
        self.interest[fd] = int(events)
        self.changed = True

    def unregister(self, fd: int) -> bool:
        self.interest.pop(fd, None)
        self.kinds.pop(fd, None)
        self.changed = True
        return True

    def disarm(self, fd: int) -> None:
        # Kept in kinds so that re-arming through modify() needs no fstat.
        if self.interest.pop(fd, None) is not None:
            self.changed = True

    def refresh(self) -> list[tuple[int, int]]:
        """Bring ``readers`` and ``writers`` up to date with the registrations; return the
        fds registered with no open file that are still not open (reported invalid)."""
        if self._not_open:
            self._not_open = False
            invalid = self._invalid_fds()
            if invalid:
                return invalid
        kinds = self.kinds
        self.readers = list(self.interest)
        self.writers = [fd for fd, ev in self.interest.items() if ev & _WANTS_WRITE]
        # A pipe's write end is left out: readable, it is never READ (translate()).
        self.reading = {
            fd: kinds[fd] != _ALWAYS
            for fd, ev in self.interest.items()
            if ev & _WANTS_READ and kinds[fd] != _PIPE_WRITER
        }
        self.changed = False
        return []

    def poll(self, timeout: float, max_events: int) -> list[tuple[int, int]]:
        # The clock is read only when the wait may have to be resumed (see below).
        if self.changed:
            invalid = self.refresh()
            if invalid:
                return self._drop_invalid(invalid, max_events)
        readers, writers = self.readers, self.writers
        deadline = time.monotonic() + timeout if timeout > 0 else 0.0
        while True:
            try:
                readable, writable, _ = _select(
                    readers, writers, (), None if timeout < 0 else timeout
                )
            except OSError as exc:
                if exc.errno != errno.EBADF or not raised_by_backend(exc, type(self)):
                    raise
                invalid = self._invalid_fds()
                return self._drop_invalid(invalid, max_events) if invalid else invalid
            ready, parked = self.translate(readable, writable)
            if ready or parked is None or timeout == 0:
                return ready
            # Only unwanted bytes woke us: wait on without reading those fds, for the rest
            # of the time.  They stay in the write set, where they may still become ready.
            readers = [fd for fd in readers if fd not in parked]
            if timeout > 0:
                timeout = max(0.0, deadline - time.monotonic())
            if not readers and not writers:
                if timeout != 0:
                    time.sleep(timeout if timeout > 0 else self.max_timeout)
                return []

    def translate(
        self, readable: list[int], writable: list[int]
    ) -> tuple[list[tuple[int, int]], set[int] | None]:
        """What select()'s answer means: the raw reports, and the fds that were readable
        only with bytes their watcher did not ask for (None if there were none)."""
        interest, kinds, count = self.interest, self.kinds, self.count
        if self.changed:
            # A signal handler changed the registrations while select() waited (it retries
            # on EINTR with the fd lists it was given): an fd unwatched since is not news.
            readable = [fd for fd in readable if fd in interest]
            writable = [fd for fd in writable if fd in interest]
        ready: list[tuple[int, int]] = []
        parked: set[int] | None = None
        for fd in readable:
            kind = kinds[fd]
            if kind == _ALWAYS:
                bits = _READ
            elif kind == _PIPE_WRITER:
                # The reader is gone.  FIONREAD would count the bytes it left in the pipe.
                bits = _ERROR
            else:
                try:  # FIONREAD: are bytes waiting, or is this end of file?
                    _ioctl(fd, _FIONREAD, count)
                    bits = _READ if count != _NO_BYTES else self._without_bytes(fd, kind)
                except OSError:  # a listening socket (EINVAL), or Windows: no ioctl
                    bits = self._without_bytes(fd, kind)
            if not interest[fd] & _WANTS_READ:
                bits &= _NOT_READ
                if (
                    bits == _HANGUP
                    and kind == _STREAM
                    and fd not in writable
                    and _half_closed(fd)
                ):
                    # The socket is in the read set only for its hang-up, and its end of
                    # file is the peer's shutdown(SHUT_WR): poll reports no hang-up for
                    # it, and a writer on a full socket must not wake at every wait until
                    # the peer reads.  (A pipe's end of file is every writer gone.)
                    bits = 0
                if not bits:
                    if parked is None:
                        parked = set()
                    parked.add(fd)
                    continue
            ready.append((fd, bits))
        if writable:
            if not ready:
                return [(fd, _WRITE) for fd in writable], parked
            self._merge_writable(ready, writable)
        return ready, parked

    def _drop_invalid(
        self, invalid: list[tuple[int, int]], max_events: int
    ) -> list[tuple[int, int]]:
        """``invalid`` (fds with no open file) and, polled at once, what else is ready.

        The other fds may be ready too: leaving them out would break level triggering for
        this wait.  The Context drops the invalid ones.
        """
        for fd, _ in invalid:
            self.disarm(fd)
        return invalid + self.poll(0, max_events)

    def _without_bytes(self, fd: int, kind: int) -> int:
        """What a readable fd with no bytes counted means, by kind."""
        if kind == _STREAM:
            bits = _peek(fd, self.kinds)
            if self.kinds[fd] != kind:
                self.changed = True  # a listening or datagram socket: `reading` is stale
            return bits
        if kind == _PIPE:
            return _HANGUP  # end of file: every writer is gone
        return _ERROR  # not open any more (translate() answers a pipe's write end itself)

    @staticmethod
    def _merge_writable(ready: list[tuple[int, int]], writable: list[int]) -> None:
        position = {fd: index for index, (fd, _) in enumerate(ready)}
        for fd in writable:
            index = position.get(fd)
            if index is None:
                ready.append((fd, _WRITE))
            else:
                ready[index] = (fd, ready[index][1] | _WRITE)

    def _invalid_fds(self) -> list[tuple[int, int]]:
        bad = []
        for fd in self.interest:
            try:
                os.fstat(fd)
            except OSError:
                bad.append((fd, _INVALID))
        return bad

    def close(self) -> None:
        self.interest.clear()
        self.kinds.clear()
        self.readers = []
        self.writers = []
        self.reading = {}
        self.changed = True  # a select() under way (a handler closed it) answers nothing
