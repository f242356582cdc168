"""``Mechanism``: the interface one OS readiness backend implements for the ``Context``."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import ClassVar

from .events import DecodeTable, ErrorCode

try:
    import fcntl
except ImportError:  # Windows: no pipe reaches select() or WSAPoll
    fcntl = None  # type: ignore[assignment]

__all__ = ["Mechanism", "is_pipe_write_end"]


def is_pipe_write_end(fd: int) -> bool:
    """Whether ``fd``, a pipe's or FIFO's, is its write end (opened for writing only).

    Readiness on a pipe means one thing on its read end and another on its write end
    (the other side gone: end of file, or a broken pipe), which the OS's report does not
    say: the select and kqueue translations ask this when the fd is registered.
    """
    if fcntl is None:
        return False
    return fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE == os.O_WRONLY


class Mechanism:
    """One OS readiness mechanism, as the ``Context`` sees it.

    A subclass only talks to the OS and translates between its flags and ``Event`` bits;
    every piece of bookkeeping (watchers, one-shot state, leftovers, closed streams) lives in
    the ``Context``.  Methods raise ``OSError`` when a system call fails, or ``Refusal``
    when the backend declines without one.
    """

    # Capabilities, read by ``Backend.supports_*()`` and by the Context's validation.
    supports_edge_triggering: ClassVar[bool] = False
    supports_priority: ClassVar[bool] = False
    supports_read_hangup: ClassVar[bool] = False
    # Whether it watches the fds a SignalHandle or ProcessHandle has here (SPEC 10).
    supports_signal_handles: ClassVar[bool] = False
    supports_process_handles: ClassVar[bool] = False
    # True when the OS disarms a one-shot fd as it reports it (EPOLLONESHOT); otherwise
    # the Context calls ``disarm`` after reporting it.
    disarms_reported_oneshots: ClassVar[bool] = False
    # Raw bit that means "this fd is not open" (POLLNVAL): reported once as ERROR, then the
    # Context drops the registration.
    invalid_fd_bit: ClassVar[int] = 0
    # Longest timeout, in seconds, one ``poll`` call accepts; the Context loops for longer.
    # epoll_wait() and poll() take an int of milliseconds: 2**31 - 1 ms, rounded down.
    max_timeout: ClassVar[float] = 2_147_483.0
    # errno values this backend gives a meaning other than the generic mapping.
    errno_codes: ClassVar[dict[int, ErrorCode]] = {}
    # Raw readiness bits -> Event.
    decode: ClassVar[DecodeTable]
    # The fd of an epoll object that iopoll's C fast path may call epoll_wait(2) on itself,
    # reading each report's fd from its data (CPython's epoll registers data.fd = fd); -1
    # for every other mechanism, whose fast path calls ``poll``.
    native_fd: int = -1
    # An array of ``struct pollfd`` holding every registration, on which the C fast path
    # may call poll(2) itself (POLL); None for the others.
    native_pollfds: bytearray | None = None
    # KQUEUE: the fd of the kqueue on which the C fast path may call kevent(2) itself (read
    # on every wait, -1 while it may not); None for the other mechanisms.
    native_kqueue: int | None = None

    def register(self, fd: int, events: int) -> None:
        """Start watching ``fd`` for ``events`` (``Event`` bits, modes included)."""
        raise NotImplementedError

    def modify(self, fd: int, events: int) -> None:
        """Change what ``fd`` is watched for; also re-arms an fd that ``disarm`` dropped."""
        raise NotImplementedError

    def unregister(self, fd: int) -> bool:
        """Stop watching ``fd``.

        Returns False when the OS might still hold a registration for it (epoll, once the
        fd was closed while a ``dup`` keeps the file open); the Context then rebuilds.
        """
        raise NotImplementedError

    def disarm(self, fd: int) -> None:
        """Stop reporting a one-shot ``fd`` until ``modify`` re-arms it."""
        raise NotImplementedError

    # Wait up to ``timeout`` seconds (-1: forever) for at most ``max_events`` fds (-1: the
    # backend's default batch) and return ``(fd, raw bits)`` pairs.  An attribute, not a
    # method, so that epoll can hand the Context its C function with no Python frame between.
    poll: Callable[[float, int], list[tuple[int, int]]]

    def registered_files(self) -> dict[int, set[int]] | None:
        """The inodes of the files each fd number is registered for, as the OS object holds
        them (a closed file's registration is gone; one a ``dup`` keeps open stays, beside
        a new file's under the same number), or None where it cannot say."""
        return None

    def close(self) -> None:
        """Release the OS object."""
