"""An emulation of illumos event ports on Linux ``poll()``, for ``iopoll._event_ports``.

``EmulatedPorts`` has the interface of the port library ``EventPortsMechanism`` talks to
(``iopoll._event_ports.PortLibrary``: libc's ``port_create``, ``port_associate``,
``port_dissociate``, ``port_getn`` and ``close`` in their C shape, -1 and ctypes' ``errno``
on failure).  What it emulates is what the mechanism's bookkeeping depends on:

* an association is one-shot: ``port_getn`` drops each fd it reports, and the fd stays
  silent until it is associated again;
* ``port_associate`` of an associated fd replaces its events; ``port_dissociate`` of one
  that is not associated is ENOENT; an fd that is not open is EBADFD, as illumos says
  (EBADF is for a port that is not one);
* closing an fd drops its association (seen here at the next call: the fd number no
  longer names the file that was associated);
* ``port_getn`` waits for ``*nget`` events or the timeout, fails with ETIME when the time
  runs out first (``*nget`` then says how many it retrieved), and takes at most
  ``PORT_MAX_LIST`` per call (EINVAL above).

Readiness itself comes from Linux's ``poll()``, whose bits for these events have the same
values as illumos's.  This is not a test of Solaris or illumos: their kernels' readiness
rules (what a socket reports when, PORT_SOURCE_FD's own details) are not reproduced; only
the one-shot association contract the mechanism is written against is.
"""

from __future__ import annotations

import ctypes
import errno
import math
import os
import select
import time
from dataclasses import dataclass, field

from iopoll import _event_ports
from iopoll._event_ports import POLLNVAL, PORT_MAX_LIST, PORT_SOURCE_FD, port_event_t, timespec

# The emulation passes poll(2) bits straight to Linux: they must mean the same there.
for _bit in ("POLLIN", "POLLPRI", "POLLOUT", "POLLERR", "POLLHUP", "POLLNVAL"):
    assert getattr(select, _bit) == getattr(_event_ports, _bit), _bit
del _bit


def _file_of(fd: int) -> tuple[int, int] | None:
    """What ``fd`` names now (device, inode), or None when it is not open."""
    try:
        info = os.fstat(fd)
    except OSError:
        return None
    return info.st_dev, info.st_ino


@dataclass
class _Association:
    events: int
    user: int
    file: tuple[int, int]  # what the fd named when it was associated


@dataclass
class _Port:
    associations: dict[int, _Association] = field(default_factory=dict)


def _fail(number: int) -> int:
    ctypes.set_errno(number)
    return -1


class EmulatedPorts:
    """The port library on ``poll()``: one-shot associations, as illumos has them.

    ``calls`` records every call as ``(name, port, fd or None)`` for the tests of the
    mechanism's bookkeeping; ``interrupt_next`` makes that many next ``port_getn`` calls
    fail with EINTR (as a signal would), after ``interrupt_after`` seconds.
    """

    def __init__(self) -> None:
        self._ports: dict[int, _Port] = {}
        self.calls: list[tuple[str, int, int | None]] = []
        self.interrupt_next = 0
        self.interrupt_after = 0.0

    # -- the calls --------------------------------------------------------------------------

    def port_create(self) -> int:
        """A port is a real fd (of /dev/null), so that fd limits apply as they would."""
        try:
            port = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
        except OSError as exc:
            return _fail(exc.errno or errno.EMFILE)
        self._ports[port] = _Port()
        self.calls.append(("port_create", port, None))
        return port

    def port_associate(self, port: int, source: int, obj: int, events: int, user: int) -> int:
        """Associate ``obj``, replacing an association it has."""
        state = self._called("port_associate", port, obj, source)
        if state is None:
            return -1
        current = _file_of(obj)
        if current is None:
            return _fail(errno.EBADFD)
        state.associations[obj] = _Association(events, user, current)
        return 0

    def port_dissociate(self, port: int, source: int, obj: int) -> int:
        """Remove ``obj``'s association: ENOENT if it has none, EBADFD if it is not open."""
        state = self._called("port_dissociate", port, obj, source)
        if state is None:
            return -1
        self._drop_closed(state)
        current = _file_of(obj)
        if current is None:
            return _fail(errno.EBADFD)
        if state.associations.pop(obj, None) is None:
            return _fail(errno.ENOENT)
        return 0

    def port_getn(
        self,
        port: int,
        events: ctypes.Array[port_event_t],
        max_events: int,
        nget: ctypes.c_uint,
        timeout: timespec | None,
    ) -> int:
        """Wait for ``nget.value`` events (or the timeout) and retrieve up to
        ``max_events``; every fd retrieved is no longer associated."""
        state = self._called("port_getn", port, None)
        if state is None:
            return -1
        if max_events > PORT_MAX_LIST or max_events > len(events):
            return _fail(errno.EINVAL)
        if self.interrupt_next:
            self.interrupt_next -= 1
            time.sleep(self.interrupt_after)
            return _fail(errno.EINTR)
        desired = nget.value
        if timeout is None:
            deadline = math.inf
        else:
            deadline = time.monotonic() + timeout.tv_sec + timeout.tv_nsec / 1e9
        retrieved = 0
        while True:
            left = deadline - time.monotonic()
            milliseconds = -1 if left == math.inf else max(math.ceil(left * 1000), 0)
            for fd, revents in self._ready(state, milliseconds):
                if retrieved == max_events:
                    break
                association = state.associations.pop(fd)  # one-shot by nature
                slot = events[retrieved]
                slot.portev_events = revents
                slot.portev_source = PORT_SOURCE_FD
                slot.portev_pad = 0
                slot.portev_object = fd
                slot.portev_user = association.user or None
                retrieved += 1
            if retrieved >= desired or retrieved == max_events:
                nget.value = retrieved
                return 0
            if time.monotonic() >= deadline:
                nget.value = retrieved
                return _fail(errno.ETIME)

    def close(self, fd: int) -> int:
        """close(2), of a port or of anything else."""
        self.calls.append(("close", fd, None))
        self._ports.pop(fd, None)
        try:
            os.close(fd)
        except OSError as exc:
            return _fail(exc.errno or errno.EBADF)
        return 0

    # -- helpers ----------------------------------------------------------------------------

    def _called(
        self, name: str, port: int, obj: int | None, source: int = PORT_SOURCE_FD
    ) -> _Port | None:
        """Record the call ``name`` in ``calls`` and return ``port``'s state; None, with
        ctypes' ``errno`` set, when ``port`` is no port (EBADF) or ``source`` is not
        ``PORT_SOURCE_FD`` (EINVAL)."""
        self.calls.append((name, port, obj))
        state = self._ports.get(port)
        if state is None:
            _fail(errno.EBADF)
        elif source != PORT_SOURCE_FD:
            _fail(errno.EINVAL)
            return None
        return state

    def associated(self, port: int) -> dict[int, int]:
        """fd -> events of ``port``'s associations now (closed fds dropped first)."""
        state = self._ports[port]
        self._drop_closed(state)
        return {fd: assoc.events for fd, assoc in state.associations.items()}

    @staticmethod
    def _drop_closed(state: _Port) -> None:
        """Closing an fd dissociates it: forget fds that no longer name their file."""
        for fd, association in list(state.associations.items()):
            if _file_of(fd) != association.file:
                del state.associations[fd]

    def _ready(self, state: _Port, milliseconds: int) -> list[tuple[int, int]]:
        """One ``poll()`` of the associated fds."""
        self._drop_closed(state)
        if not state.associations:
            if milliseconds:
                time.sleep(0.05 if milliseconds < 0 else min(milliseconds / 1000, 0.05))
            return []
        poller = select.poll()
        for fd, association in state.associations.items():
            poller.register(fd, association.events)
        # Short slices, so that an association made or dropped meanwhile (another thread)
        # and a closed fd are seen soon, as the kernel would see them at once.
        slice_ms = 50 if milliseconds < 0 else min(milliseconds, 50)
        return [
            (fd, revents)
            for fd, revents in poller.poll(slice_ms)
            if not revents & POLLNVAL and fd in state.associations
        ]
