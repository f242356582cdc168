"""``FakeWinsock``: a stand-in for ``ws2_32`` on the host's ``poll()`` and ``getsockopt()``.

``tests/test_wsapoll.py`` runs the ``WSAPOLL`` mechanism on Windows' own ``Platform`` data
(``WSAPOLLFD``, Windows' flag values, Winsock's error numbers) with this in place of the DLL,
so that everything but the DLL call itself runs on POSIX with Windows' values.
"""

from __future__ import annotations

import ctypes
import errno
import os
import select
import socket
import stat
from typing import Any

from iopoll import _wsapoll as wsapoll
from iopoll._wsapoll import POLLFD, Calls

__all__ = ["FakeWinsock", "host_errno_to_winsock"]


def host_errno_to_winsock(number: int) -> int:
    # Winsock's codes for the BSD errors are those errno values plus 10000 (WSAEINTR 10004,
    # WSAEBADF 10009, WSAEINVAL 10022, ...), and ENOTSOCK is WSAENOTSOCK.
    return wsapoll.WSAENOTSOCK if number == errno.ENOTSOCK else 10000 + number


# Windows' poll bits -> the host's, for ``events``; the host's -> Windows', for ``revents``.
_TO_HOST = (
    (wsapoll.POLLRDNORM | wsapoll.POLLRDBAND, select.POLLIN),
    (wsapoll.POLLWRNORM, select.POLLOUT),
)
_TO_WINDOWS = (
    (select.POLLIN, wsapoll.POLLRDNORM),
    (select.POLLOUT, wsapoll.POLLWRNORM),
    (select.POLLERR, wsapoll.POLLERR),
    (select.POLLHUP, wsapoll.POLLHUP),
    (select.POLLNVAL, wsapoll.POLLNVAL),
)


def _is_socket(fd: int) -> bool:
    """Whether ``fd`` is an open socket: what WSAPoll calls a valid entry."""
    try:
        return stat.S_ISSOCK(os.fstat(fd).st_mode)
    except OSError:
        return False


def _translate(bits: int, table: tuple[tuple[int, int], ...]) -> int:
    """``bits`` in the other platform's values: every ``(source, target)`` row of ``table``
    whose ``source`` shares a bit with ``bits`` gives its ``target``."""
    return sum(target for source, target in table if bits & source)


class FakeWinsock:
    """``ws2_32``'s ``WSAPoll`` and ``getsockopt`` as the backend calls them, on the host's.

    It takes Windows' ``WSAPOLLFD`` array and flag values, refuses what WSAPoll refuses
    (``POLLPRI``/``POLLWRBAND`` or any unknown bit in ``events``, ``nfds == 0``, an array
    without one valid socket) with ``WSAEINVAL``, and answers in Windows' flag values.
    ``script`` holds Winsock errors the next polls fail with; ``calls`` records each poll's
    ``(nfds, timeout_ms)``.
    """

    def __init__(self) -> None:
        self.host = wsapoll._bind_libc()
        self.error = 0
        self.script: list[int] = []
        self.calls: list[tuple[int, int]] = []

    def set_error(self, number: int) -> None:
        self.error = number

    def poll(self, array: Any, nfds: int, timeout_ms: int) -> int:
        self.calls.append((nfds, timeout_ms))
        if self.script:
            self.error = self.script.pop(0)
            return -1
        allowed = wsapoll.POLLIN | wsapoll.POLLOUT
        if nfds == 0 or any(array[i].events & ~allowed for i in range(nfds)):
            self.error = wsapoll.WSAEINVAL
            return -1
        if not any(_is_socket(array[i].fd) for i in range(nfds)):
            self.error = wsapoll.WSAEINVAL  # "none of the sockets ... were valid"
            return -1
        host = (POLLFD * nfds)()
        for i in range(nfds):
            host[i].fd, host[i].events = array[i].fd, _translate(array[i].events, _TO_HOST)
        ctypes.set_errno(0)
        count = self.host.poll(host, nfds, timeout_ms)
        if count < 0:
            self.error = host_errno_to_winsock(ctypes.get_errno())
            return -1
        for i in range(nfds):
            array[i].revents = _translate(host[i].revents, _TO_WINDOWS)
        return count

    def getsockopt(self, fd: int, level: int, name: int, value: Any, length: Any) -> int:
        assert (level, name) == (0xFFFF, 0x1008)  # SOL_SOCKET, SO_TYPE in winsock2.h
        ctypes.set_errno(0)
        if self.host.getsockopt(fd, socket.SOL_SOCKET, socket.SO_TYPE, value, length) == 0:
            return 0
        self.error = host_errno_to_winsock(ctypes.get_errno())
        return -1

    def calls_object(self) -> Calls:
        # Looked up at each call, so that a test can replace ``poll``.
        return Calls(
            lambda *args: self.poll(*args),
            lambda *args: self.getsockopt(*args),
            lambda: self.error,
            self.set_error,
        )
