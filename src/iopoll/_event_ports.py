"""The ``EVENT_PORTS`` backend (illumos, Solaris): libc's event ports through ctypes.

CPython's ``select`` has no event-ports API, so this module binds ``port_create``,
``port_associate``, ``port_dissociate`` and ``port_getn`` from libc with ctypes, and
translates between poll(2) bits (illumos values, ``<sys/poll.h>``) and ``Event``.

Why the choices:

* **An association is one-shot by nature.**  Once ``port_getn`` retrieves an fd's event,
  the fd is no longer associated.  A level-triggered watcher is therefore re-associated
  after each report; this module does it lazily, at the start of the next ``poll``
  (before its ``port_getn``), so that a watcher modified or removed in between costs no
  extra system call.  A ``ONESHOT`` watcher is simply not re-associated: the port disarms
  it as it reports it (``disarms_reported_oneshots``), and ``modify`` re-arms it.
* **A re-association refused with EBADFD** (the fd was closed behind the handle's back;
  illumos's ``port_associate`` says EBADFD for a bad object and keeps EBADF for a bad
  port, and EBADF is taken the same way) is reported once as ``POLLNVAL`` by that next
  ``poll``, which the Context reports as ``ERROR`` and drops (SPEC 6.9).  An fd closed
  while associated is dissociated by the system silently, so it may also never be
  reported: "at most once".
* **A report carries the bits the port queued**: ``port_associate`` polls the fd and
  queues an event at once if it is ready, and a wake-up queues one later; ``port_getn``
  hands out those bits without polling again.  An fd drained by a read the program made
  without being told in between is then reported all the same (the read gets EAGAIN), a
  stale report ``epoll`` does not make.  A re-association drops a queued event, so a
  level watcher's report after a report is fresh.
* **A signal handler that raises** between ``port_getn`` and the bookkeeping of what it
  retrieved would leave level fds the port no longer holds counted as associated, silent
  for good.  So any exception out of ``port_getn``'s call queues every level fd for
  re-association, which replaces an association that is still there.
* **The ``max_events`` cut is the Context's**: it asks for every registration, and this
  module fetches them in calls of at most ``PORT_MAX_LIST`` events (the system's limit per
  call), asking again at once while a call comes back full.
* ``port_getn`` waits for ``*nget`` events: it is given 1, and it fails with ETIME when
  the timeout passes first, with ``*nget`` set to what it did retrieve (possibly some).
  EINTR is retried with the time that is left (PEP 475); a signal handler that raises
  leaves ``wait()`` with its exception.
* Edge-triggering does not exist (``EDGE_TRIGGERED`` is ``NOSUPPORT``); ``PRIORITY`` is
  ``POLLPRI``; ``READ_HANGUP`` is never reported.  Regular files are accepted and always
  ready, as poll(2) says.

The mechanism reaches the system only through a *port library*: an object with the
``port_*`` calls and ``close`` in their C shape (ints in, an int out, -1 with the reason in
ctypes' ``errno``; ``port_getn`` fills a ``port_event_t`` array and a ``c_uint``).  On
illumos and Solaris that is libc (:class:`LibcPorts`); elsewhere the module still imports,
so that its translation and bookkeeping can be tested against an emulation of the calls
(:meth:`EventPortsMechanism.with_library`).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import math
import os
import sys
import time
from collections.abc import Callable
from typing import Any, ClassVar, Protocol, cast

from _iopoll_core.events import DecodeTable, ErrorCode, Event, decode_table, flag_encoder
from _iopoll_core.mechanism import Mechanism

__all__ = [
    "EventPortsMechanism",
    "LibcPorts",
    "PortLibrary",
    "event_ports_available",
    "association_mask",
    "timespec_for",
    "port_event_t",
    "timespec",
    "PORT_SOURCE_FD",
    "PORT_MAX_LIST",
    "POLLIN",
    "POLLPRI",
    "POLLOUT",
    "POLLERR",
    "POLLHUP",
    "POLLNVAL",
]

# <sys/port.h>
PORT_SOURCE_FD = 4
PORT_MAX_LIST = 8192  # the most events one port_getn() call retrieves

# <sys/poll.h> on illumos and Solaris (the same numbers as Linux for these six).
POLLIN = 0x0001
POLLPRI = 0x0002
POLLOUT = 0x0004
POLLERR = 0x0008
POLLHUP = 0x0010
POLLNVAL = 0x0020


class port_event_t(ctypes.Structure):
    """``port_event_t`` of ``<sys/port.h>``: one retrieved event."""

    _fields_ = [
        ("portev_events", ctypes.c_int),  # poll(2) bits, for PORT_SOURCE_FD
        ("portev_source", ctypes.c_ushort),
        ("portev_pad", ctypes.c_ushort),
        ("portev_object", ctypes.c_size_t),  # uintptr_t: the fd
        ("portev_user", ctypes.c_void_p),
    ]


class timespec(ctypes.Structure):
    """``struct timespec``: ``time_t`` and the nanoseconds are ``long`` on illumos."""

    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


# The association mask for ``Event`` bits (POLLERR, POLLHUP and POLLNVAL are implied).
association_mask = flag_encoder(
    [
        (Event.READ, POLLIN),
        (Event.WRITE, POLLOUT),
        (Event.PRIORITY, POLLPRI),
    ]
)


def timespec_for(seconds: float) -> tuple[int, int]:
    """``(tv_sec, tv_nsec)`` for a timeout of ``seconds`` >= 0, rounded up to the
    nanosecond so that a wait never ends before its time."""
    whole = math.floor(seconds)
    nanoseconds = math.ceil((seconds - whole) * 1e9)
    if nanoseconds >= 1_000_000_000:
        return whole + 1, 0
    return whole, nanoseconds


class PortLibrary(Protocol):
    """The calls an ``EventPortsMechanism`` makes, in their C shape.

    Each returns -1 on failure with the reason in ctypes' private ``errno``
    (``ctypes.get_errno()``), as a libc loaded with ``use_errno=True`` does.
    """

    def port_create(self) -> int:
        """A new port's fd."""
        ...

    def port_associate(self, port: int, source: int, obj: int, events: int, user: int) -> int:
        """Associate ``obj`` (an fd, for ``PORT_SOURCE_FD``) for poll(2) ``events``."""
        ...

    def port_dissociate(self, port: int, source: int, obj: int) -> int:
        """Remove the association of ``obj``."""
        ...

    def port_getn(
        self,
        port: int,
        events: ctypes.Array[port_event_t],
        max_events: int,
        nget: ctypes.c_uint,
        timeout: timespec | None,
    ) -> int:
        """Retrieve up to ``max_events`` events into ``events``, waiting for ``nget.value``
        of them or ``timeout`` (None: forever); ``nget.value`` becomes the number
        retrieved."""
        ...

    def close(self, fd: int) -> int:
        """close(2)."""
        ...


def _load_libc() -> Any:
    """libc with the event-ports calls, or None where it has none."""
    candidates: list[str | None] = [None]  # dlopen(NULL): what the process has loaded
    found = ctypes.util.find_library("c")
    if found:
        candidates.append(found)
    for name in candidates:
        try:
            lib = ctypes.CDLL(name, use_errno=True)
        except OSError:
            continue
        if hasattr(lib, "port_create"):
            return lib
    return None


def event_ports_available() -> bool:
    """Whether this is illumos or Solaris and its libc has ``port_create``."""
    if not sys.platform.startswith(("sunos", "illumos", "solaris")):
        return False
    return _load_libc() is not None


def _c_function(function: Any, argtypes: list[Any]) -> Callable[..., int]:
    """``function``, a libc function from ctypes, with its C argument types declared and an
    ``int`` result (ctypes then passes a ``c_uint`` or a ``timespec`` given for a pointer
    by reference, and None as NULL)."""
    function.argtypes = argtypes
    function.restype = ctypes.c_int
    return cast("Callable[..., int]", function)


class LibcPorts:
    """The port library on illumos and Solaris: libc's functions themselves, through ctypes
    (their C shapes are ``PortLibrary``'s)."""

    def __init__(self) -> None:
        lib = _load_libc()
        if lib is None:
            raise OSError(errno.ENOSYS, "libc has no event ports (port_create)")
        c_int, c_uint, c_size_t = ctypes.c_int, ctypes.c_uint, ctypes.c_size_t
        pointer = ctypes.POINTER
        self.port_create = _c_function(lib.port_create, [])
        self.port_associate = _c_function(
            lib.port_associate, [c_int, c_int, c_size_t, c_int, ctypes.c_void_p]
        )
        self.port_dissociate = _c_function(lib.port_dissociate, [c_int, c_int, c_size_t])
        self.port_getn = _c_function(
            lib.port_getn,
            [c_int, pointer(port_event_t), c_uint, pointer(c_uint), pointer(timespec)],
        )
        self.close = _c_function(lib.close, [c_int])


def _failure(what: str) -> OSError:
    """The ``OSError`` for the errno a port call just left."""
    number = ctypes.get_errno()
    return OSError(number, f"{what}: {os.strerror(number)}")


_ONESHOT = Event.ONESHOT.value
_ETIME = getattr(errno, "ETIME", errno.ETIMEDOUT)
# What port_associate and port_dissociate say for an object that is no open fd: EBADFD on
# illumos (usr/src/uts/common/fs/portfs/port_fd.c).  EBADF, which illumos keeps for a bad
# port, is taken the same way: this object's port is open until close().
_CLOSED_FD = frozenset({errno.EBADF, getattr(errno, "EBADFD", errno.EBADF)})


class EventPortsMechanism(Mechanism):
    """Event ports: O(ready) waits; every association is one-shot, so level watchers are
    re-associated after each report."""

    decode: ClassVar[DecodeTable] = decode_table(
        [
            (POLLIN, Event.READ),
            (POLLOUT, Event.WRITE),
            (POLLERR, Event.ERROR),
            (POLLHUP, Event.HANGUP),
            (POLLPRI, Event.PRIORITY),
        ]
    )
    # Not in the table: a re-association refused with EBADFD, which the Context reports as
    # ERROR once and drops.
    invalid_fd_bit: ClassVar[int] = POLLNVAL
    # add() of an fd that is not open: INVALID, as EBADF is on the other backends.
    errno_codes: ClassVar[dict[int, ErrorCode]] = {code: ErrorCode.INVALID for code in _CLOSED_FD}
    supports_priority: ClassVar[bool] = True
    disarms_reported_oneshots: ClassVar[bool] = True
    # The port library every instance uses; None: libc (LibcPorts), made on first use.
    library: ClassVar[PortLibrary | None] = None

    @classmethod
    def with_library(cls, library: PortLibrary) -> type[EventPortsMechanism]:
        """This mechanism on ``library`` instead of libc: a subclass that changes nothing
        but ``library`` (the Context makes mechanisms by calling their class)."""
        name = f"{cls.__name__}[{type(library).__name__}]"
        subclass: type[EventPortsMechanism] = type(
            name, (cls,), {"library": library, "__module__": cls.__module__}
        )
        return subclass

    def __init__(self) -> None:
        library = type(self).library
        if library is None:
            library = type(self).library = LibcPorts()
        self._lib: PortLibrary = library
        port = library.port_create()
        if port < 0:
            raise _failure("port_create")
        self._port = port
        # Level-triggered fds -> their association mask: re-associated after a report.
        self._level: dict[int, int] = {}
        # fds associated with the port right now, as far as this object knows (the port
        # drops an association as it reports it, or when the fd is closed).
        self._associated: set[int] = set()
        # Level fds reported since the last poll: re-associated before the next port_getn.
        self._rearm: set[int] = set()
        # fds whose re-association failed with EBADFD: reported once as POLLNVAL.
        self._invalid: list[int] = []
        self._events = (port_event_t * 1)()
        self._nget = ctypes.c_uint()
        self._timespec = timespec()

    # -- registrations ----------------------------------------------------------------------

    def _associate(self, fd: int, mask: int) -> None:
        if self._lib.port_associate(self._port, PORT_SOURCE_FD, fd, mask, 0) < 0:
            raise _failure("port_associate")
        self._associated.add(fd)

    def register(self, fd: int, events: int) -> None:
        """Associate ``fd``; a level watcher will be re-associated after each report."""
        mask = association_mask(events)
        self._associate(fd, mask)  # replaces an existing association, and re-arms
        self._rearm.discard(fd)
        if events & _ONESHOT:
            self._level.pop(fd, None)
        else:
            self._level[fd] = mask

    # port_associate() replaces an existing association: that is what modify means, and it
    # re-arms a one-shot the port disarmed.
    modify = register

    def unregister(self, fd: int) -> bool:
        """Dissociate ``fd``.  Always True: closing an fd dissociates it, so the port can
        hold no association that this object cannot reach."""
        self._level.pop(fd, None)
        self._rearm.discard(fd)
        if fd in self._invalid:
            self._invalid.remove(fd)
        self._dissociate(fd)
        return True

    def disarm(self, fd: int) -> None:
        """Dissociate a one-shot ``fd`` the port did not disarm itself (the Context reported
        it from buffered bytes)."""
        self._rearm.discard(fd)
        self._dissociate(fd)

    def _dissociate(self, fd: int) -> None:
        if fd not in self._associated:
            return  # reported and not re-associated, a fired one-shot: nothing to undo
        self._associated.discard(fd)
        if self._lib.port_dissociate(self._port, PORT_SOURCE_FD, fd) < 0:
            number = ctypes.get_errno()
            if number != errno.ENOENT and number not in _CLOSED_FD:  # dropped with the fd
                raise _failure("port_dissociate")

    # -- waiting ----------------------------------------------------------------------------

    def _reassociate(self) -> list[tuple[int, int]]:
        """Re-associate the level fds reported last time; those whose fd is no longer open
        come back as ``POLLNVAL`` reports (once)."""
        for fd in list(self._rearm):
            if self._lib.port_associate(self._port, PORT_SOURCE_FD, fd, self._level[fd], 0) < 0:
                if ctypes.get_errno() not in _CLOSED_FD:
                    raise _failure("port_associate")
                if fd not in self._invalid:  # a handler that raised before the discard below
                    self._invalid.append(fd)
            else:
                self._associated.add(fd)
            self._rearm.discard(fd)
        if not self._invalid:
            return []
        invalid = [(fd, POLLNVAL) for fd in self._invalid]
        self._invalid = []
        return invalid

    def poll(self, timeout: float, max_events: int) -> list[tuple[int, int]]:
        """Re-associate what the last poll reported, then ``port_getn`` for up to
        ``max_events`` fds (-1: every association) for ``timeout`` seconds (-1: forever)."""
        reports = self._reassociate()
        if reports:
            timeout = 0.0  # something to report already: do not block
        wanted = max_events if max_events > 0 else len(self._associated)
        # At least one, even with nothing associated: the wait still lasts its timeout.
        wanted = max(wanted - len(reports), 1)
        while True:
            got = self._getn(min(wanted, PORT_MAX_LIST), timeout)
            reports += got
            wanted -= len(got)
            if wanted <= 0 or len(got) < PORT_MAX_LIST:
                return reports
            timeout = 0.0  # a full batch: fetch the rest that is ready, without waiting

    def _getn(self, batch: int, timeout: float) -> list[tuple[int, int]]:
        """One ``port_getn`` of up to ``batch`` events, EINTR retried with the time left."""
        if len(self._events) < batch:
            self._events = (port_event_t * batch)()
        try:
            return self._getn_once(batch, timeout)
        except BaseException:
            # A signal handler may have raised after port_getn took events this object has
            # not counted: re-associate every level fd rather than lose one for good.
            self._rearm.update(self._level)
            raise

    def _getn_once(self, batch: int, timeout: float) -> list[tuple[int, int]]:
        """``_getn``'s calls: ``port_getn`` until it is not interrupted, then ``_take``."""
        events, nget, spec = self._events, self._nget, self._timespec
        deadline = time.monotonic() + timeout if timeout > 0 else 0.0
        while True:
            if timeout < 0:
                pointer = None
            else:
                spec.tv_sec, spec.tv_nsec = timespec_for(timeout)
                pointer = spec
            nget.value = 1  # return as soon as one event is there
            if self._lib.port_getn(self._port, events, batch, nget, pointer) < 0:
                number = ctypes.get_errno()
                if number == errno.EINTR:
                    # Interrupted while sleeping, so nothing was retrieved.  PEP 475: the
                    # signal handler runs (and may raise) as this loop goes round.
                    if timeout > 0:
                        timeout = max(deadline - time.monotonic(), 0.0)
                    continue
                if number != _ETIME:
                    raise _failure("port_getn")
                # ETIME: the time ran out; nget says how many it retrieved before that.
            return self._take(nget.value)

    def _take(self, count: int) -> list[tuple[int, int]]:
        """The ``(fd, poll bits)`` of the first ``count`` retrieved events; the port no
        longer associates those fds, and the level ones are queued for re-association."""
        events = self._events
        associated, level, rearm = self._associated, self._level, self._rearm
        reports = []
        for index in range(count):
            event = events[index]
            if event.portev_source != PORT_SOURCE_FD:
                continue
            fd = event.portev_object
            associated.discard(fd)
            if fd in level:
                rearm.add(fd)
            reports.append((fd, event.portev_events))
        return reports

    def close(self) -> None:
        """Close the port (every association goes with it)."""
        self._level.clear()
        self._associated.clear()
        self._rearm.clear()
        self._invalid = []
        self._lib.close(self._port)
