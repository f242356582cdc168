"""The ``SELECT`` backend on ``select.select()``: the polyfill's, and iopoll's last resort.

select() reports only "readable", "writable" and "exceptional", so this module derives the
rest:

* Every watched fd is in the read set, so that a hang-up is seen even by a ``WRITE``-only
  watcher.  A readable socket or pipe with no bytes to read has reached end of file: that
  is ``HANGUP`` (a socket also gets ``READ`` when asked).  A socket whose peek fails was
  reset: ``ERROR|HANGUP``.  Reading the error clears it, so ``ERROR`` shows once.
* A fd readable only because of bytes its watcher did not ask for is left out of the read
  set for the rest of that ``wait()``; otherwise select() would return at once, forever.
* A closed fd makes select() fail with EBADF for the whole call; the culprits are found
  with ``fstat`` and reported as invalid, so the Context retires them.
* fds at or above ``FD_SETSIZE`` cannot be put in an ``fd_set``: ``register`` refuses them.
"""

from __future__ import annotations

import errno
import os
import select
import socket
import stat
import sys
import time
from typing import ClassVar

from .backend import Mechanism
from .errors import Refusal
from .events import DecodeTable, ErrorCode, Event

try:  # POSIX: count the bytes waiting on a socket or pipe without a socket object.
    import fcntl
    import termios

    _FIONREAD: int | None = termios.FIONREAD
except ImportError:  # Windows
    fcntl = None  # type: ignore[assignment]
    _FIONREAD = None

__all__ = ["FD_SETSIZE", "SelectMechanism"]

# POSIX limits the fd number; Windows CPython limits the number of sockets per set.
FD_SETSIZE = 512 if sys.platform == "win32" else 1024

_READ, _WRITE, _ERROR, _HANGUP, _INVALID = 1, 2, 4, 8, 16
_NO_BYTES = b"\0\0\0\0"

_SOCKET, _PIPE, _OTHER = 0, 1, 2
_WANTS_READ = Event.READ.value
_WANTS_WRITE = Event.WRITE.value


def _kind_of(fd: int) -> int:
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return _SOCKET if sys.platform == "win32" else _OTHER
    if stat.S_ISSOCK(mode):
        return _SOCKET
    if stat.S_ISFIFO(mode):
        return _PIPE
    return _OTHER  # regular files, ttys, devices: select() says ready, and they are


def _peek_socket(fd: int) -> int:
    """Classify a readable socket with no bytes counted: closed, reset, or other."""
    sock = socket.socket(fileno=fd)
    try:
        if sock.type != socket.SOCK_STREAM:
            return _READ  # a datagram socket has no end of file (an empty datagram is data)
        if sock.getsockopt(socket.SOL_SOCKET, getattr(socket, "SO_ACCEPTCONN", 0x0002)):
            return _READ  # a listening socket: a connection is waiting
        try:
            data = sock.recv(1, socket.MSG_PEEK | getattr(socket, "MSG_DONTWAIT", 0))
        except BlockingIOError:
            return _READ  # nothing after all: a spurious wake-up, level will tell again
        except OSError:
            return _ERROR | _HANGUP
        return _READ if data else _HANGUP | _READ
    finally:
        sock.detach()


def _has_bytes(fd: int) -> bool | None:
    """Whether bytes are waiting on ``fd`` (None when it cannot be asked cheaply)."""
    if _FIONREAD is None:
        return None
    try:
        return fcntl.ioctl(fd, _FIONREAD, _NO_BYTES) != _NO_BYTES
    except OSError:
        return None


class SelectMechanism(Mechanism):
    """``select.select()``: level-triggered, at most ``FD_SETSIZE`` fds."""

    max_timeout: ClassVar[float] = 2_147_483.0
    invalid_fd_bit: ClassVar[int] = _INVALID
    decode: ClassVar[DecodeTable] = DecodeTable(
        [
            (_READ, Event.READ),
            (_WRITE, Event.WRITE),
            (_ERROR, Event.ERROR),
            (_HANGUP, Event.HANGUP),
            (_INVALID, Event.ERROR),
        ]
    )

    def __init__(self) -> None:
        self._interest: dict[int, int] = {}  # fd -> Event bits
        self._kinds: dict[int, int] = {}
        self._readers: list[int] = []
        self._writers: list[int] = []
        self._changed = False

    def register(self, fd: int, events: int) -> None:
        if fd >= FD_SETSIZE and sys.platform != "win32":
            raise Refusal(
                ErrorCode.TOOBIG,
                f"fd {fd} is at or above FD_SETSIZE ({FD_SETSIZE}), the most select() can "
                "watch; use iopoll with the EPOLL, KQUEUE or POLL backend",
            )
        if sys.platform == "win32" and fd not in self._interest and len(self._interest) >= FD_SETSIZE:
            raise Refusal(
                ErrorCode.TOOBIG,
                f"select() on Windows watches at most {FD_SETSIZE} sockets (FD_SETSIZE)",
            )
        self._kinds[fd] = _kind_of(fd)
        self.modify(fd, events)

    def modify(self, fd: int, events: int) -> None:
        self._interest[fd] = int(events)
        self._changed = True

    def unregister(self, fd: int) -> bool:
        self._interest.pop(fd, None)
        self._kinds.pop(fd, None)
        self._changed = True
        return True

    def disarm(self, fd: int) -> None:
        # Kept in _kinds so that re-arming through modify() needs no fstat.
        if self._interest.pop(fd, None) is not None:
            self._changed = True

    def poll(self, timeout: float, max_events: int) -> list[tuple[int, int]]:
        if self._changed:
            self._readers = list(self._interest)
            self._writers = [fd for fd, ev in self._interest.items() if ev & _WANTS_WRITE]
            self._changed = False
        readers, writers = self._readers, self._writers
        deadline = None if timeout < 0 else time.monotonic() + timeout
        while True:
            try:
                readable, writable, _ = select.select(
                    readers, writers, (), None if timeout < 0 else timeout
                )
            except OSError as exc:
                if exc.errno != errno.EBADF:
                    raise
                return self._invalid_fds()
            ready, parked = self._translate(readable, writable)
            if ready or not parked:
                return ready
            # Only unwanted bytes woke us: wait again without those fds, for what is left.
            readers = [fd for fd in readers if fd not in parked]
            writers = [fd for fd in writers if fd not in parked]
            if deadline is not None:
                timeout = max(0.0, deadline - time.monotonic())
            if not readers and not writers:
                if timeout != 0:
                    time.sleep(timeout if timeout > 0 else self.max_timeout)
                return []

    def _translate(self, readable: list[int], writable: list[int]) -> tuple[list[tuple[int, int]], set[int]]:
        interest = self._interest
        kinds = self._kinds
        bits_of: dict[int, int] = {}
        parked: set[int] = set()
        for fd in readable:
            wanted = interest[fd]
            kind = kinds[fd]
            if kind == _OTHER:
                bits = _READ
            else:
                has_bytes = _has_bytes(fd)
                if has_bytes:
                    bits = _READ
                elif kind == _PIPE:
                    bits = _HANGUP
                else:
                    bits = _peek_socket(fd)
            if not wanted & _WANTS_READ:
                bits &= ~_READ
                if not bits:
                    parked.add(fd)
                    continue
            bits_of[fd] = bits
        for fd in writable:
            bits_of[fd] = bits_of.get(fd, 0) | _WRITE
            parked.discard(fd)
        return list(bits_of.items()), parked

    def _invalid_fds(self) -> list[tuple[int, int]]:
        bad = []
        for fd in self._interest:
            try:
                os.fstat(fd)
            except OSError:
                bad.append((fd, _INVALID))
        return bad

    def close(self) -> None:
        self._interest.clear()
        self._kinds.clear()
