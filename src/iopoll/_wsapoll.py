"""The ``WSAPOLL`` backend (Windows): ``ws2_32.WSAPoll`` through ctypes.

WSAPoll is poll(2) for Winsock: an array of ``WSAPOLLFD {SOCKET fd; SHORT events; SHORT
revents}`` (``SOCKET`` is pointer-sized: 16 bytes an entry on 64-bit Windows), a timeout in
milliseconds, -1 on failure with the reason in ``WSAGetLastError()`` rather than errno.  It is
level-triggered, has no ``FD_SETSIZE`` limit, and takes sockets only.  So, as SPEC section 2
says: anything but a socket is refused by ``register`` (``FailedHandleAddError`` with
``code == NOSUPPORT``), and neither ``EDGE_TRIGGERED`` nor ``PRIORITY`` is supported (asking
for ``POLLPRI`` or ``POLLWRBAND`` fails the whole call with ``WSAEINVAL``).  One-shot is left
to the Context: a disarmed socket is taken out of the array, so it reports not even a
hang-up.  ``POLLNVAL`` marks a socket closed behind the handle's back; the Context reports
it once as ``ERROR`` and drops it.

What the module does, the same for every platform:

* The array is built from the registrations only when the set of fds changed (an add, a
  remove, a one-shot disarmed or re-armed); a change of what a registered fd is watched
  for is written into its entry in place.  After each call ``revents`` is read back
  through one strided ``memoryview`` over the array, without a ctypes object per entry,
  and the ready entries are picked in C (``itertools.compress``): one poll of 1,000
  sockets costs the OS call plus about 25 µs here.
* The timeout is in milliseconds, rounded up so that a wait lasts at least as long as
  asked; the Context splits a longer timeout than ``max_timeout`` (2**31 - 1 ms) into
  chunks.  An empty array (every watcher a fired one-shot) is never handed to the OS
  (WSAPoll refuses ``nfds == 0`` with ``WSAEINVAL``): the mechanism sleeps instead.
* An interrupted call (``EINTR``, ``WSAEINTR``) runs the Python signal handlers and, if
  none raised, is retried with the time that is left (PEP 475), as ``select.poll`` does.
  A handler's exception leaves ``poll`` as it is, and the Context lets it through.
* The socket check is ``getsockopt(SOL_SOCKET, SO_TYPE)``: ``ENOTSOCK`` (``WSAENOTSOCK``)
  means "not a socket"; any other failure (``EBADF``) is the caller's bad fd.
* Failures raise ``OSError`` whose ``errno`` is the platform's error number (a Winsock
  ``WSAE*`` code on Windows, as the ``socket`` module's errors carry them there);
  ``errno_codes`` maps the Winsock codes to ``ErrorCode`` as SPEC 6.10 maps their errno
  counterparts (``WSAENOBUFS``, WSAPoll's "out of memory", is ``NOMEM``).

Everything that differs between platforms is one ``Platform`` object: the entry structure,
the flag values, the foreign calls and how their error is read.  ``winsock()`` is Windows';
``libc()`` is the host's ``poll()`` with ``struct pollfd {int fd; short events; short
revents}`` and the ``select`` module's flag values.  With the environment variable
``IOPOLL_WSAPOLL_LIBC`` set to anything but empty or ``0`` (a testing switch, read when
iopoll is imported), ``Backend.WSAPOLL`` is available on POSIX on ``libc()``: the same
mechanism code, the sockets-only rule included, with only the DLL call left out.  The
project's tests run the conformance suite on it that way.

Known defects of Windows itself, which no backend code can hide:

* Before Windows 10 version 2004 (build 19041) a non-blocking ``connect()`` that fails is
  never reported by WSAPoll: a watcher waiting for ``WRITE`` on a refused connection waits
  for ever (or until its timeout).  From 2004 on it is reported as ``POLLHUP | POLLERR |
  POLLWRNORM``, which is ``HANGUP | ERROR | WRITE``; on older Windows, give such waits a
  timeout and check ``SO_ERROR``.
* WSAPoll is not interrupted by Ctrl+C: a ``wait()`` without a timeout sees a
  ``KeyboardInterrupt`` only once a socket becomes ready (``select()`` on Windows is no
  better).  Pass a timeout, or give ``signal.set_wakeup_fd()`` the write end of a
  ``socket.socketpair()`` and watch its read end: the C-level handler writes to it from
  the thread Windows runs it on, which wakes the wait.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import math
import os
import select
import socket
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from itertools import compress
from typing import Any, ClassVar

from _iopoll_core.events import DecodeTable, ErrorCode, Event, decode_table, flag_encoder
from _iopoll_core.mechanism import Mechanism

__all__ = [
    "Calls",
    "PollFlags",
    "Platform",
    "WsaPollMechanism",
    "libc",
    "mechanism_for",
    "wsapoll_mechanism",
    "winsock",
]

# Windows' poll flag values (winsock2.h); they differ from every POSIX system's.
POLLRDNORM = 0x0100
POLLRDBAND = 0x0200
POLLIN = POLLRDNORM | POLLRDBAND
POLLPRI = 0x0400  # refused in ``events`` with WSAEINVAL
POLLWRNORM = 0x0010
POLLOUT = POLLWRNORM
POLLWRBAND = 0x0020  # refused in ``events`` with WSAEINVAL
POLLERR = 0x0001
POLLHUP = 0x0002
POLLNVAL = 0x0004

# Winsock error numbers (winerror.h), what WSAGetLastError() returns.
WSAEINTR = 10004
WSAEBADF = 10009
WSAEACCES = 10013
WSAEFAULT = 10014
WSAEINVAL = 10022
WSAEMFILE = 10024
WSAEWOULDBLOCK = 10035
WSAENOTSOCK = 10038
WSAEOPNOTSUPP = 10045
WSAENETDOWN = 10050
WSAENOBUFS = 10055
WSAETIMEDOUT = 10060
WSANOTINITIALISED = 10093

_INT_MAX = 2**31 - 1  # the timeout argument is a C int of milliseconds
_FOREVER_MS = -1  # INFTIM on POSIX, INFINITE (as an INT) for WSAPoll


class WSAPOLLFD(ctypes.Structure):
    """Windows' ``WSAPOLLFD``: ``SOCKET`` is a ``UINT_PTR``, as wide as a pointer."""

    _fields_ = [("fd", ctypes.c_size_t), ("events", ctypes.c_short), ("revents", ctypes.c_short)]


class POLLFD(ctypes.Structure):
    """POSIX ``struct pollfd``."""

    _fields_ = [("fd", ctypes.c_int), ("events", ctypes.c_short), ("revents", ctypes.c_short)]


@dataclass(frozen=True)
class PollFlags:
    """One platform's poll() bit values for what the backend asks for and reads back.

    ``read`` and ``write`` are what ``events`` asks for, and each of their bits reads back as
    ``READ`` / ``WRITE``; ``error``, ``hangup`` and ``invalid`` are reported unasked.
    """

    read: int
    write: int
    error: int
    hangup: int
    invalid: int

    @property
    def known(self) -> int:
        """Every bit the backend reads back; any other bit in ``revents`` is ignored."""
        return self.read | self.write | self.error | self.hangup | self.invalid

    def encoder(self) -> Callable[[int], int]:
        """``Event`` bits -> ``events`` (modes and unsupported events add nothing)."""
        return flag_encoder([(Event.READ, self.read), (Event.WRITE, self.write)])

    def decode_table(self) -> DecodeTable:
        """Every combination of the reported bits but ``invalid`` -> ``Event``."""
        # decode_table maps any subset that overlaps a mask: POLLIN's two bits need no split.
        return decode_table(
            [
                (self.read, Event.READ),
                (self.write, Event.WRITE),
                (self.error, Event.ERROR),
                (self.hangup, Event.HANGUP),
            ]
        )


@dataclass(frozen=True)
class Calls:
    """The foreign calls of one platform, bound to its library.

    ``poll(array, nfds, timeout_ms)`` and ``getsockopt(fd, level, name, value, length)``
    return -1 on failure; ``last_error()`` is then the error number of that failure (errno,
    or ``WSAGetLastError()``), and ``clear_error(0)`` is called before each call so that a
    stale number can never be read as a new one.
    """

    poll: Callable[..., int]
    getsockopt: Callable[..., int]
    last_error: Callable[[], int]
    clear_error: Callable[[int], object]


@dataclass(frozen=True, eq=False)
class Platform:
    """Everything in which WSAPoll and a POSIX poll() differ for this backend.

    ``bind`` loads the library and is called by each new mechanism (it is cached); the rest
    is plain data, so that a platform can be looked at, and tested, where it cannot run.
    """

    name: str
    pollfd: type[ctypes.Structure]
    flags: PollFlags
    # Error numbers with a meaning beyond the generic errno mapping (Mechanism.errno_codes).
    error_codes: Mapping[int, ErrorCode]
    interrupted: int  # the error number of a call a signal interrupted
    not_socket: int  # getsockopt()'s error number for an fd that is not a socket
    sol_socket: int
    so_type: int
    describe: Callable[[int], str]  # an error number -> its message
    bind: Callable[[], Calls]
    # The error number of a poll that finds no valid socket in the array at all (WSAPoll
    # fails the whole call; poll(2) reports each POLLNVAL): 0 where there is none.
    none_valid: int = 0


def _bind(
    library: ctypes.CDLL,
    poll_name: str,
    pollfd: type[ctypes.Structure],
    last_error: Callable[[], int],
    clear_error: Callable[[int], object],
) -> Calls:
    """Declare the argument types of ``poll_name`` and ``getsockopt`` in ``library``."""
    socket_type = {field[0]: field[1] for field in pollfd._fields_}["fd"]  # SOCKET, or int
    poll = getattr(library, poll_name)
    # ULONG nfds (Windows), nfds_t (unsigned long on Linux, unsigned int elsewhere: passed
    # in a register, so the wider type is safe on the 64-bit ABIs).
    poll.argtypes = [ctypes.POINTER(pollfd), ctypes.c_ulong, ctypes.c_int]
    poll.restype = ctypes.c_int
    getsockopt = library.getsockopt
    getsockopt.argtypes = [
        socket_type,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_void_p,
        ctypes.POINTER(ctypes.c_int),
    ]
    getsockopt.restype = ctypes.c_int
    return Calls(poll, getsockopt, last_error, clear_error)


@functools.cache
def _bind_winsock() -> Calls:
    if sys.platform != "win32":
        raise OSError(errno.ENOSYS, "ws2_32.WSAPoll exists only on Windows")
    # use_last_error: ctypes saves GetLastError() (which is what WSAGetLastError() returns)
    # right after the call, before anything else on this thread can change it.
    library = ctypes.WinDLL("ws2_32", use_last_error=True)
    return _bind(library, "WSAPoll", WSAPOLLFD, ctypes.get_last_error, ctypes.set_last_error)


@functools.cache
def _bind_libc() -> Calls:
    library = ctypes.CDLL(None, use_errno=True)
    return _bind(library, "poll", POLLFD, ctypes.get_errno, ctypes.set_errno)


def _describe_winsock(number: int) -> str:
    if sys.platform == "win32":
        return ctypes.FormatError(number).strip()
    return f"Winsock error {number}"


# SPEC 6.10's errno table, through the Winsock counterpart of each errno; the rest
# (WSAEFAULT, WSAENETDOWN, WSANOTINITIALISED, ...) is SYSTEM, as an unlisted errno is.
WINSOCK_ERROR_CODES: Mapping[int, ErrorCode] = {
    WSAENOBUFS: ErrorCode.NOMEM,
    WSAEINVAL: ErrorCode.INVALID,
    WSAEBADF: ErrorCode.INVALID,
    WSAETIMEDOUT: ErrorCode.TIMEOUT,
    WSAEINTR: ErrorCode.INTERRUPTED,
    WSAEACCES: ErrorCode.PERMISSION,
    WSAEMFILE: ErrorCode.TOOBIG,
    WSAEWOULDBLOCK: ErrorCode.AGAIN,
    WSAEOPNOTSUPP: ErrorCode.NOSUPPORT,
}


@functools.cache
def winsock() -> Platform:
    """Windows: ``ws2_32.WSAPoll``, ``WSAPOLLFD``, Windows' flags and Winsock's errors."""
    return Platform(
        name="winsock",
        pollfd=WSAPOLLFD,
        flags=PollFlags(
            read=POLLIN, write=POLLOUT, error=POLLERR, hangup=POLLHUP, invalid=POLLNVAL
        ),
        error_codes=WINSOCK_ERROR_CODES,
        interrupted=WSAEINTR,
        not_socket=WSAENOTSOCK,
        sol_socket=0xFFFF,  # SOL_SOCKET and SO_TYPE in winsock2.h
        so_type=0x1008,
        describe=_describe_winsock,
        bind=_bind_winsock,
        none_valid=WSAEINVAL,
    )


@functools.cache
def libc() -> Platform:
    """POSIX: libc ``poll()``, ``struct pollfd`` and the host's flag values (testing only)."""
    host: Any = select  # typed loosely: Windows' select module has no POLL* constants
    return Platform(
        name="libc",
        pollfd=POLLFD,
        flags=PollFlags(
            read=host.POLLIN,
            write=host.POLLOUT,
            error=host.POLLERR,
            hangup=host.POLLHUP,
            invalid=host.POLLNVAL,
        ),
        error_codes={},
        interrupted=errno.EINTR,
        not_socket=errno.ENOTSOCK,
        sol_socket=socket.SOL_SOCKET,
        so_type=socket.SO_TYPE,
        describe=os.strerror,
        bind=_bind_libc,
    )


# Python's signal handlers, run now (PEP 475's "call PyErr_CheckSignals()"); a handler's
# exception is raised from here.  Without the C API (not CPython), the handlers run at the
# interpreter's next check, a few bytecodes later.
_pythonapi: Any = getattr(ctypes, "pythonapi", None)
_check_signals: Callable[[], object] = (
    _pythonapi.PyErr_CheckSignals if _pythonapi is not None else (lambda: None)
)


class WsaPollMechanism(Mechanism):
    """WSAPoll's array, kept from the registrations; one subclass per ``Platform``.

    ``mechanism_for(platform)`` makes the subclass: its ``platform`` and the class
    attributes the Context reads (``decode``, ``invalid_fd_bit``, ``errno_codes``).
    """

    platform: ClassVar[Platform]

    def __init__(self) -> None:
        platform = self.platform
        self._calls = platform.bind()
        self._encode = platform.flags.encoder()
        self._known = platform.flags.known
        self._masks: dict[int, int] = {}  # fd -> events, the registrations
        # The array and what it was built from; _slots is None when it must be rebuilt.
        self._slots: dict[int, int] | None = None  # fd -> index in the array
        self._fds: list[int] = []
        self._array: ctypes.Array[ctypes.Structure] | None = None
        self._revents: memoryview | None = None

    # -- registrations ------------------------------------------------------------------

    def register(self, fd: int, events: int) -> None:
        self._check_socket(fd)
        self._set(fd, self._encode(events))

    def modify(self, fd: int, events: int) -> None:
        # Also re-arms a one-shot that disarm() took out of the array.
        self._set(fd, self._encode(events))

    def unregister(self, fd: int) -> bool:
        if self._masks.pop(fd, None) is not None:
            self._slots = None
        return True

    def disarm(self, fd: int) -> None:
        self.unregister(fd)

    def _set(self, fd: int, mask: int) -> None:
        slots = self._slots
        if slots is not None and fd in slots:
            if self._masks[fd] != mask:
                assert self._array is not None
                self._array[slots[fd]].events = mask
        else:
            self._slots = None  # a new fd: the array is rebuilt before the next call
        self._masks[fd] = mask

    def _check_socket(self, fd: int) -> None:
        """Refuse anything but a socket: ``OSError`` with ``ENOTSOCK`` (``NOSUPPORT``), or the
        error ``getsockopt`` gave for a bad fd."""
        platform = self.platform
        calls = self._calls
        value = ctypes.c_int(0)
        length = ctypes.c_int(ctypes.sizeof(value))
        calls.clear_error(0)
        status = calls.getsockopt(
            fd, platform.sol_socket, platform.so_type, ctypes.byref(value), ctypes.byref(length)
        )
        if status == 0:
            return
        number = calls.last_error()
        if number == platform.not_socket:  # NOSUPPORT (errno_codes), the errno kept
            raise OSError(number, f"backend WSAPOLL watches sockets only; fd {fd} is not one")
        raise OSError(number, platform.describe(number))

    def _build(self) -> None:
        """Make the array from the registrations, and the view of its ``revents``."""
        pollfd = self.platform.pollfd
        fds = list(self._masks)
        array_type: Any = pollfd * len(fds)  # built from tuples: one C call, not n
        array = array_type(*[(fd, mask, 0) for fd, mask in self._masks.items()])
        self._fds = fds
        self._slots = {fd: index for index, fd in enumerate(fds)}
        self._array = array
        if fds:
            # Every entry's revents (a short), one stride of an entry apart.
            size = ctypes.sizeof(pollfd)
            offset: int = pollfd.revents.offset
            shorts = memoryview(array).cast("B").cast("h")
            self._revents = shorts[offset // 2 :: size // 2]
        else:
            self._revents = None

    # -- waiting ------------------------------------------------------------------------

    def poll(self, timeout: float, max_events: int) -> list[tuple[int, int]]:
        """One call of the OS for every registration; ``(fd, revents)`` of the ready ones.

        ``timeout`` is in seconds (negative: forever) and at most ``max_timeout``;
        ``max_events`` is ignored, since the Context makes the cut itself.
        """
        if self._slots is None:
            self._build()
        revents = self._revents
        if revents is None:
            self._sleep(timeout)
            return []
        if not self._call(len(self._fds), timeout):
            return []
        # The ready entries, picked in C (compress) rather than by a Python loop over all.
        every = revents.tolist()
        known = self._known
        return [
            (fd, bits & known)
            for fd, bits in zip(compress(self._fds, every), compress(every, every), strict=True)
            if bits & known
        ]

    def _call(self, nfds: int, timeout: float) -> int:
        """The OS call, retried with the time left after a signal whose handlers returned."""
        calls = self._calls
        platform = self.platform
        if timeout < 0:
            milliseconds = _FOREVER_MS
            deadline = 0.0
        else:
            milliseconds = min(math.ceil(timeout * 1000.0), _INT_MAX)
            deadline = time.monotonic() + timeout if milliseconds else 0.0
        while True:
            calls.clear_error(0)
            count = calls.poll(self._array, nfds, milliseconds)
            if count >= 0:
                return count
            number = calls.last_error()
            if number and number == platform.none_valid and self._none_valid():
                return self._all_invalid(nfds)
            if number != platform.interrupted:
                raise OSError(number, platform.describe(number))
            _check_signals()  # a handler's exception leaves from here (PEP 475)
            if self._array is None:  # a handler closed the Context: as a closed epoll's
                raise OSError(errno.EBADF, os.strerror(errno.EBADF))
            if milliseconds > 0:
                left = deadline - time.monotonic()
                milliseconds = max(math.ceil(left * 1000.0), 0)

    def _none_valid(self) -> bool:
        """Whether no fd in the array is a socket any more: what WSAPoll's WSAEINVAL means
        when it is not a bit it refuses in ``events``, which this module never asks for."""
        for fd in self._fds:
            try:
                self._check_socket(fd)
            except OSError:
                continue
            return False
        return True

    def _all_invalid(self, nfds: int) -> int:
        """WSAPoll's answer when no socket in the array is valid (each closed behind its
        handle's back), as poll(2) gives it: ``POLLNVAL`` in every entry."""
        revents = self._revents
        assert revents is not None  # an array was polled
        for index in range(nfds):
            revents[index] = self.platform.flags.invalid
        return nfds

    def _sleep(self, timeout: float) -> None:
        # Nothing in the array (every watcher a fired one-shot): nothing can become ready.
        # time.sleep() runs signal handlers and lets their exceptions through.
        if timeout > 0:
            time.sleep(timeout)
        elif timeout < 0:
            while True:  # until a signal handler raises (SPEC 6.12)
                time.sleep(self.max_timeout)

    def close(self) -> None:
        self._masks.clear()
        self._slots = None
        self._revents = None
        self._array = None


@functools.cache
def mechanism_for(platform: Platform) -> type[WsaPollMechanism]:
    """The ``WsaPollMechanism`` subclass on ``platform`` (one class per platform)."""
    flags = platform.flags
    namespace: dict[str, Any] = {
        "__module__": __name__,
        "__doc__": f"WSAPOLL on {platform.name}.",
        "platform": platform,
        "decode": flags.decode_table(),
        "invalid_fd_bit": flags.invalid,
        # Not a socket is WSAPOLL's own refusal (SPEC 2): NOSUPPORT, like epoll's EPERM.
        "errno_codes": {**platform.error_codes, platform.not_socket: ErrorCode.NOSUPPORT},
    }
    name = f"WsaPollMechanism_{platform.name}"
    return type(name, (WsaPollMechanism,), namespace)


def wsapoll_mechanism() -> type[WsaPollMechanism]:
    """What ``Backend.WSAPOLL`` runs here: WSAPoll on Windows, libc poll() elsewhere."""
    return mechanism_for(winsock() if sys.platform == "win32" else libc())
