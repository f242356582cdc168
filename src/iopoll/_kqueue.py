"""The ``KQUEUE`` backend (macOS, BSD): translation between kevents and ``Event``.

kqueue watches reading and writing as two filters of one fd, so this module adds and
deletes filters as the watched events change, and merges the two reports of one fd into
one entry.  ``EV_EOF`` on either filter is ``HANGUP``; an error in ``fflags`` with it, or
``EV_ERROR``, is ``ERROR``.  ``EV_CLEAR`` gives edge-triggering.  One-shot is left to the
Context (deleting the filters disarms it), so that a report cut by ``max_events`` is
never lost.

The translation functions take and return plain ints so that they can be unit-tested on
platforms without ``select.kqueue``; the constants fall back to their BSD values there.
"""

from __future__ import annotations

import select
from typing import Any, ClassVar

from _iopoll_core.events import DecodeTable, Event, decode_table
from _iopoll_core.mechanism import Mechanism

__all__ = ["KqueueMechanism", "filter_changes", "readiness", "merge_kevents"]

# Typed loosely: the type checker may run on a platform whose select module lacks kqueue.
_select: Any = select

FILTER_READ = getattr(select, "KQ_FILTER_READ", -1)
FILTER_WRITE = getattr(select, "KQ_FILTER_WRITE", -2)
EV_ADD = getattr(select, "KQ_EV_ADD", 0x0001)
EV_DELETE = getattr(select, "KQ_EV_DELETE", 0x0002)
EV_ENABLE = getattr(select, "KQ_EV_ENABLE", 0x0004)
EV_CLEAR = getattr(select, "KQ_EV_CLEAR", 0x0020)
EV_ERROR = getattr(select, "KQ_EV_ERROR", 0x4000)
EV_EOF = getattr(select, "KQ_EV_EOF", 0x8000)

_READ = Event.READ.value
_WRITE = Event.WRITE.value
_ERROR = Event.ERROR.value
_HANGUP = Event.HANGUP.value


def filter_changes(old_events: int, new_events: int) -> list[tuple[int, int]]:
    """The ``(filter, flags)`` changes that take an fd from ``old_events`` to ``new_events``.

    ``old_events`` is 0 for a new or disarmed fd.
    """
    changes = []
    for event, kfilter in ((_READ, FILTER_READ), (_WRITE, FILTER_WRITE)):
        if new_events & event:
            flags = EV_ADD | EV_ENABLE
            if new_events & Event.EDGE_TRIGGERED:
                flags |= EV_CLEAR
            changes.append((kfilter, flags))
        elif old_events & event:
            changes.append((kfilter, EV_DELETE))
    return changes


def readiness(kfilter: int, flags: int, fflags: int) -> int:
    """The ``Event`` bits one returned kevent stands for."""
    if flags & EV_ERROR:
        return _ERROR
    bits = _READ if kfilter == FILTER_READ else _WRITE if kfilter == FILTER_WRITE else 0
    if flags & EV_EOF:
        bits |= _HANGUP
        if fflags:  # the socket error that ended the connection
            bits |= _ERROR
    return bits


def merge_kevents(kevents: list[tuple[int, int, int, int]]) -> list[tuple[int, int]]:
    """Merge ``(ident, filter, flags, fflags)`` reports into one ``(fd, bits)`` per fd."""
    merged: dict[int, int] = {}
    for ident, kfilter, flags, fflags in kevents:
        merged[ident] = merged.get(ident, 0) | readiness(kfilter, flags, fflags)
    return list(merged.items())


class KqueueMechanism(Mechanism):
    """``select.kqueue``: O(ready) waits and edge-triggering (``EV_CLEAR``)."""

    supports_edge_triggering: ClassVar[bool] = True
    decode: ClassVar[DecodeTable] = decode_table(
        [(bit.value, bit) for bit in (Event.READ, Event.WRITE, Event.ERROR, Event.HANGUP)]
    )

    def __init__(self) -> None:
        self._kqueue = _select.kqueue()
        self._registered: dict[int, int] = {}  # fd -> Event bits its filters stand for

    def _apply(self, fd: int, events: int) -> None:
        changes = filter_changes(self._registered.get(fd, 0), events)
        kevents = [_select.kevent(fd, kfilter, flags) for kfilter, flags in changes]
        self._kqueue.control(kevents, 0, 0)
        self._registered[fd] = events & (_READ | _WRITE | Event.EDGE_TRIGGERED)

    def register(self, fd: int, events: int) -> None:
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
        return True

    def disarm(self, fd: int) -> None:
        self.unregister(fd)

    def poll(self, timeout: float, max_events: int) -> list[tuple[int, int]]:
        batch = 2 * (len(self._registered) if max_events < 0 else max_events)
        kevents = self._kqueue.control(None, max(batch, 1), None if timeout < 0 else timeout)
        return merge_kevents([(k.ident, k.filter, k.flags, k.fflags) for k in kevents])

    def close(self) -> None:
        self._kqueue.close()
