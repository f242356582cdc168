"""A test-only ``select.kqueue`` look-alike over libkqueue (a userspace kqueue for Linux).

CPython's ``select`` has ``kqueue``/``kevent`` only on BSD and macOS.  libkqueue gives the
same C API on Linux, built on epoll; this module binds it with ctypes and offers the part of
``select``'s interface that ``iopoll._kqueue`` (and ``selectors.KqueueSelector``) use:

- ``kqueue()``: ``control(changelist, max_events, timeout=None)``, ``close()``, ``closed``,
  ``fileno()``;
- ``kevent(ident, filter=KQ_FILTER_READ, flags=KQ_EV_ADD, fflags=0, data=0, udata=0)``, with
  those six attributes;
- the ``KQ_FILTER_*``, ``KQ_EV_*`` and ``KQ_NOTE_*`` constants this project uses.

It is never shipped: ``tests/kqueue_over_libkqueue.py`` installs it as the ``select``
attributes iopoll's KQUEUE mechanism reads.  Where it departs from a plain call of
``kevent(2)``, it does so to behave as ``select.kqueue`` does on BSD:

- ctypes' errno is cleared before each call (libkqueue can fail without setting errno, and a
  stale value would read as a random error);
- ``EINTR`` is retried with the time that is left (PEP 475); a signal handler's exception
  leaves ``control()`` as it is;
- libkqueue returns at most 512 events per call: a longer ``max_events`` is filled by more
  calls with no timeout, until one returns less than a full batch or repeats a report;
- changes are applied one at a time, and a re-``EV_ADD`` of an existing level filter, which
  libkqueue refuses (-1, errno 0) where every BSD accepts it, is retried as ``EV_ENABLE``;
- libkqueue keeps one epoll registration per fd, so ``EV_CLEAR`` on one filter of an fd
  makes its other filter edge-triggered too.  When the two filters of an fd are in
  different modes, both are registered level and ``EV_CLEAR`` is emulated: a report of
  that filter is passed on only when it is new (not in the previous call, or with other
  ``flags``/``data``).
"""

from __future__ import annotations

import ctypes
import errno
import math
import os
import time
from collections.abc import Iterable
from typing import Any

__all__ = ["LibKqueue", "load"]

# <sys/event.h>: the same values on libkqueue, FreeBSD and macOS.
KQ_FILTER_READ = -1
KQ_FILTER_WRITE = -2
KQ_FILTER_AIO = -3
KQ_FILTER_VNODE = -4
KQ_FILTER_PROC = -5
KQ_FILTER_SIGNAL = -6
KQ_FILTER_TIMER = -7
KQ_EV_ADD = 0x0001
KQ_EV_DELETE = 0x0002
KQ_EV_ENABLE = 0x0004
KQ_EV_DISABLE = 0x0008
KQ_EV_ONESHOT = 0x0010
KQ_EV_CLEAR = 0x0020
KQ_EV_SYSFLAGS = 0xF000
KQ_EV_FLAG1 = 0x2000
KQ_EV_ERROR = 0x4000
KQ_EV_EOF = 0x8000
KQ_NOTE_LOWAT = 0x0001

CONSTANTS: dict[str, int] = {
    name: value for name, value in globals().items() if name.startswith("KQ_")
}

# libkqueue's eventlist limit (MAX_KEVENT in src/common/private.h).
_MAX_PER_CALL = 512


class _SilentFailure(OSError):
    """``kevent()`` returned -1 and left errno at 0 (libkqueue does, for a refused re-add)."""


class _KEvent(ctypes.Structure):
    """libkqueue's ``struct kevent`` (32 bytes on x86-64)."""

    _fields_ = [
        ("ident", ctypes.c_size_t),  # uintptr_t
        ("filter", ctypes.c_short),
        ("flags", ctypes.c_ushort),
        ("fflags", ctypes.c_uint),
        ("data", ctypes.c_ssize_t),  # intptr_t
        ("udata", ctypes.c_void_p),
    ]


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class kevent:
    """One kevent, as ``select.kevent``: ``ident``, ``filter``, ``flags``, ``fflags``,
    ``data``, ``udata``.  ``ident`` may be an object with ``fileno()``."""

    __slots__ = ("ident", "filter", "flags", "fflags", "data", "udata")

    def __init__(
        self,
        ident: Any,
        filter: int = KQ_FILTER_READ,
        flags: int = KQ_EV_ADD,
        fflags: int = 0,
        data: int = 0,
        udata: int = 0,
    ) -> None:
        if not isinstance(ident, int):
            ident = ident.fileno()
        self.ident: int = ident
        self.filter: int = filter
        self.flags: int = flags
        self.fflags: int = fflags
        self.data: int = data
        self.udata: int = udata

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, kevent):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def _key(self) -> tuple[int, int, int, int, int, int]:
        return (self.ident, self.filter, self.flags, self.fflags, self.data, self.udata)

    def __repr__(self) -> str:
        return (
            f"<libkqueue.kevent ident={self.ident} filter={self.filter} flags={self.flags:#x} "
            f"fflags={self.fflags:#x} data={self.data:#x} udata={self.udata:#x}>"
        )

    def _to_c(self) -> _KEvent:
        return _KEvent(self.ident, self.filter, self.flags, self.fflags, self.data, self.udata)

    @classmethod
    def _from_c(cls, raw: _KEvent) -> kevent:
        return cls(raw.ident, raw.filter, raw.flags, raw.fflags, raw.data, raw.udata or 0)


class LibKqueue:
    """The loaded library: ``kqueue`` and ``kevent`` classes bound to it, and the constants."""

    def __init__(self, path: str) -> None:
        lib = ctypes.CDLL(path, use_errno=True)
        lib.kqueue.argtypes = []
        lib.kqueue.restype = ctypes.c_int
        lib.kevent.argtypes = [
            ctypes.c_int,
            ctypes.POINTER(_KEvent),
            ctypes.c_int,
            ctypes.POINTER(_KEvent),
            ctypes.c_int,
            ctypes.POINTER(_Timespec),
        ]
        lib.kevent.restype = ctypes.c_int
        self.path = path
        self.kevent = kevent
        self.kqueue = _make_kqueue_class(lib)
        self.constants = dict(CONSTANTS)


def load(path: str) -> LibKqueue:
    """Load libkqueue from ``path`` (``.../lib/libkqueue.so.0``)."""
    return LibKqueue(path)


def _timespec(seconds: float) -> _Timespec:
    whole = math.floor(seconds)
    return _Timespec(int(whole), min(int((seconds - whole) * 1e9), 999_999_999))


def _make_kqueue_class(lib: Any) -> type:
    """A ``select.kqueue`` look-alike class whose calls go to ``lib``."""

    def call(
        owner: Any, changes: list[kevent], nevents: int, timeout: float | None
    ) -> tuple[int, ctypes.Array[_KEvent]]:
        """One ``kevent()`` call on ``owner``'s fd; EINTR retried with the time left, errno
        cleared first.  The fd is read again for each try: a signal handler that closed the
        kqueue gets ``EBADF``, as CPython's retry on a closed ``select.kqueue`` does.

        ctypes' errno is put back as it was on the way out: a signal handler runs as soon as
        the interrupted ``kevent()`` returns, before its caller reads errno, and a handler
        that calls ``kevent()`` itself would otherwise leave its own errno there.
        """
        saved_errno = ctypes.get_errno()
        try:
            return _call(owner, changes, nevents, timeout)
        finally:
            ctypes.set_errno(saved_errno)

    def _call(
        owner: Any, changes: list[kevent], nevents: int, timeout: float | None
    ) -> tuple[int, ctypes.Array[_KEvent]]:
        change_array = (_KEvent * max(len(changes), 1))(*(k._to_c() for k in changes))
        events = (_KEvent * max(nevents, 1))()
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if deadline is None:
                spec = None
            else:
                spec = ctypes.pointer(_timespec(max(deadline - time.monotonic(), 0.0)))
            fd = owner._fd
            if fd < 0:
                raise OSError(errno.EBADF, os.strerror(errno.EBADF))
            ctypes.set_errno(0)
            count = lib.kevent(fd, change_array, len(changes), events, nevents, spec)
            if count >= 0:
                return count, events
            code = ctypes.get_errno()
            if code == errno.EINTR:
                continue  # a handler that raised has already left by now (PEP 475)
            if not code:
                raise _SilentFailure(errno.EINVAL, "kevent() failed without setting errno")
            raise OSError(code, os.strerror(code))

    class kqueue:
        """A kqueue object over libkqueue, as ``select.kqueue``."""

        def __init__(self) -> None:
            ctypes.set_errno(0)
            fd = lib.kqueue()
            if fd < 0:
                code = ctypes.get_errno() or errno.ENOMEM
                raise OSError(code, os.strerror(code))
            self._fd = fd
            # (ident, filter) -> whether its knote was created with EV_CLEAR.
            self._modes: dict[tuple[int, int], bool] = {}
            # Filters whose EV_CLEAR is emulated (see _apply) -> what was last reported.
            self._emulated: dict[tuple[int, int], tuple[int, int] | None] = {}

        @property
        def closed(self) -> bool:
            """Whether ``close()`` was called."""
            return self._fd < 0

        def fileno(self) -> int:
            """The kqueue's fd."""
            self._check_open()
            return self._fd

        def close(self) -> None:
            """Close the kqueue (idempotent); libkqueue frees it when it sees the close."""
            if self._fd >= 0:
                fd, self._fd = self._fd, -1
                os.close(fd)

        def __del__(self) -> None:
            try:
                self.close()
            except (OSError, AttributeError):
                pass

        def _check_open(self) -> None:
            if self._fd < 0:
                raise ValueError("I/O operation on closed kqueue object")

        def raw_wait_fd(self) -> int:
            """The fd on which a caller may wait with libkqueue's own ``kevent()`` (iopoll's
            C fast path does) and see what ``control()`` would return, or -1: not while
            ``EV_CLEAR`` is emulated (``control()`` drops the repeats), nor with more
            filters than one call returns (``control()`` makes several calls)."""
            if self._fd < 0 or self._emulated or len(self._modes) > _MAX_PER_CALL:
                return -1
            return self._fd

        def control(
            self, changelist: Iterable[kevent] | None, max_events: int, timeout: float | None = None
        ) -> list[kevent]:
            """Apply ``changelist``, then wait up to ``timeout`` seconds (None: forever) for
            at most ``max_events`` events, as ``select.kqueue.control``."""
            self._check_open()
            if max_events < 0:
                raise ValueError(f"Length of eventlist must be 0 or positive, got {max_events}")
            if timeout is not None and timeout < 0:
                raise ValueError("timeout must be positive or None")
            for change in list(changelist or ()):
                self._apply(change)
            if max_events == 0:
                return []
            deadline = None if timeout is None else time.monotonic() + timeout
            while True:
                found = self._collect(max_events, timeout)
                if found or not self._emulated:
                    return found
                # Only repeats of emulated EV_CLEAR filters: wait on for a new edge.
                if deadline is not None:
                    timeout = deadline - time.monotonic()
                    if timeout <= 0:
                        return []
                time.sleep(0.001)
                timeout = 0.0 if deadline is None else timeout

        def _collect(self, max_events: int, timeout: float | None) -> list[kevent]:
            found: list[kevent] = []
            seen: set[tuple[int, int]] = set()
            wait = timeout
            while len(found) < max_events:
                batch = min(max_events - len(found), _MAX_PER_CALL)
                count, events = call(self, [], batch, wait)
                repeated = False
                for raw in events[:count]:
                    key = (raw.ident, raw.filter)
                    if key in seen:  # epoll's rotation came round to a level fd again
                        repeated = True
                        continue
                    seen.add(key)
                    found.append(kevent._from_c(raw))
                if count < _MAX_PER_CALL or repeated:
                    break
                wait = 0.0  # the rest of what is ready right now
            return self._edges_only(found, seen)

        def _edges_only(self, found: list[kevent], seen: set[tuple[int, int]]) -> list[kevent]:
            """Drop the reports of emulated ``EV_CLEAR`` filters that are no new edge."""
            emulated = self._emulated
            if not emulated:
                return found
            kept = []
            for event in found:
                key = (event.ident, event.filter)
                if key in emulated:
                    state = (event.flags, event.data)
                    if emulated[key] == state:
                        continue
                    emulated[key] = state
                kept.append(event)
            for key in emulated:
                if key not in seen:
                    emulated[key] = None  # not ready now: the next readiness is an edge
            return kept

        def _apply(self, change: kevent) -> None:
            """Apply one change, working round libkqueue where it departs from BSD."""
            key = (change.ident, change.filter)
            other = (change.ident, KQ_FILTER_WRITE + KQ_FILTER_READ - change.filter)
            modes = self._modes
            if change.flags & KQ_EV_DELETE:
                modes.pop(key, None)
                self._emulated.pop(key, None)
                self._send(change)
                return
            if not change.flags & KQ_EV_ADD or change.filter not in (
                KQ_FILTER_READ,
                KQ_FILTER_WRITE,
            ):
                self._send(change)
                return
            clear = bool(change.flags & KQ_EV_CLEAR)
            if key in modes:
                clear = modes[key]  # BSD keeps a knote's mode from its creation
            if other in modes and modes[other] != clear:
                # libkqueue has one epoll registration per fd: EV_CLEAR on one filter would
                # make the other edge-triggered too.  Both go level; EV_CLEAR is emulated.
                if modes[other] and other not in self._emulated:
                    self._send(kevent(other[0], other[1], KQ_EV_DELETE))
                    self._send(kevent(other[0], other[1], KQ_EV_ADD))
                    self._emulated[other] = None
                if clear:
                    self._emulated.setdefault(key, None)
                self._send(self._with_flags(change, change.flags & ~KQ_EV_CLEAR))
            else:
                self._send(change)
            modes[key] = clear

        @staticmethod
        def _with_flags(change: kevent, flags: int) -> kevent:
            return kevent(
                change.ident, change.filter, flags, change.fflags, change.data, change.udata
            )

        def _send(self, change: kevent) -> None:
            try:
                call(self, [change], 0, 0.0)
            except _SilentFailure:
                # libkqueue refuses EV_ADD on an existing level filter (-1, errno 0); BSD
                # takes it as "enable, keep the flags".
                if not change.flags & KQ_EV_ADD or change.flags & KQ_EV_CLEAR:
                    raise
                retry = self._with_flags(change, (change.flags & ~KQ_EV_ADD) | KQ_EV_ENABLE)
                call(self, [retry], 0, 0.0)

    return kqueue


# -- putting it where iopoll's KQUEUE mechanism looks -------------------------------------

ENVIRONMENT_VARIABLE = "IOPOLL_TEST_LIBKQUEUE"
HOW_TO_GET_IT = (
    f"{ENVIRONMENT_VARIABLE} is not set: it names a libkqueue.so.0 to run the KQUEUE backend "
    "on Linux.  .ci/run builds one from ../shared/vendor/libkqueue-*.tar.gz and sets it; by "
    "hand: tar xzf libkqueue-*.tar.gz && cmake -S libkqueue -B build "
    "-DCMAKE_INSTALL_PREFIX=$PREFIX && cmake --build build -j2 && cmake --install build, then "
    f"{ENVIRONMENT_VARIABLE}=$PREFIX/lib/libkqueue.so.0"
)


def library_path() -> str | None:
    """The libkqueue named by ``IOPOLL_TEST_LIBKQUEUE``, or None when it is unset or empty."""
    return os.environ.get(ENVIRONMENT_VARIABLE) or None


class Installation:
    """``select.kqueue``, ``select.kevent`` and the ``KQ_*`` constants set to a binding, and
    ``iopoll.Backend.KQUEUE`` made available on iopoll's own ``KqueueMechanism``.

    ``undo()`` puts back what was there (nothing, on Linux), so that a test can run KQUEUE
    without the rest of the session seeing it (``AUTO`` resolves to ``KQUEUE`` meanwhile, as
    on BSD).  ``selectors`` and ``asyncio`` are imported first: imported later, with
    ``select.kqueue`` present, their ``DefaultSelector`` would become ``KqueueSelector``.
    """

    _MISSING = object()

    def __init__(self, binding: LibKqueue) -> None:
        import asyncio  # noqa: F401  (before select.kqueue appears: see the docstring)
        import select
        import selectors  # noqa: F401

        import iopoll
        from iopoll._kqueue import KqueueMechanism

        self._select: Any = select
        self._table = iopoll.Backend._mechanisms
        values: dict[str, Any] = {
            **binding.constants,
            "kqueue": binding.kqueue,
            "kevent": binding.kevent,
        }
        self._saved = {name: getattr(select, name, self._MISSING) for name in values}
        self._saved_mechanism = self._table.get("KQUEUE")
        for name, value in values.items():
            setattr(select, name, value)
        self._table["KQUEUE"] = KqueueMechanism

    def undo(self) -> None:
        """Take the binding out again."""
        for name, value in self._saved.items():
            if value is self._MISSING:
                delattr(self._select, name)
            else:
                setattr(self._select, name, value)
        if self._saved_mechanism is None:
            self._table.pop("KQUEUE", None)
        else:
            self._table["KQUEUE"] = self._saved_mechanism
