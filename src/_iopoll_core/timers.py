"""``TimerQueue``: a Context's armed timers, a heap of deadlines on the monotonic clock.

Timers are the Context's, not the OS's, so that they work on every backend and in the
polyfill.  The Context bounds each OS wait by the first deadline (its fast path too, which
reads it from ``Context._first_timer``) and, when timers are due, its general path puts them
first in the result with their own ``max_events`` slots (SPEC 10).

A ``wait()`` costs O(log n) per due timer, whatever the number armed: the heap is popped
only for deadlines that have passed.  Disarming (remove, re-arm, close) does not search
the heap: the entry stays, and is skipped when it comes up, because the watcher's current
entry number (``_armed``) no longer names it.  When such dead entries outnumber the live
ones the heap is rebuilt, so it never holds more than about twice the armed timers.
"""

from __future__ import annotations

import heapq
import time
from typing import TYPE_CHECKING

from .events import Event

if TYPE_CHECKING:
    from .source_handles import TimerHandle
    from .watcher import Watcher

__all__ = ["TimerQueue"]


class TimerQueue:
    """The armed timers of one Context, by deadline (nanoseconds of ``time.monotonic_ns``)."""

    __slots__ = ("_heap", "_armed", "_count", "taken", "watchers")

    _heap: list[tuple[int, int, Watcher]]  # (deadline, entry number, watcher)
    _armed: dict[Watcher, tuple[int, int]]  # armed watcher -> its live (deadline, number)
    _count: int  # entry numbers: unique, so the heap never compares two watchers
    # What the last take_due() did to each timer it returned, for give_back(): its deadline,
    # and the entry it left armed (a periodic timer's next one) or None.  A new list each
    # call: hold it, and a take_due() nested in a handler does not change it.
    taken: list[tuple[int, tuple[int, int] | None]]
    # Every active timer watcher, armed or not, by handle (a handle is added once here).
    watchers: dict[TimerHandle, Watcher]

    def __init__(self) -> None:
        self._heap = []
        self._armed = {}
        self._count = 0
        self.taken = []
        self.watchers = {}

    def __len__(self) -> int:
        """The number of armed timers."""
        return len(self._armed)

    def arm(self, watcher: Watcher, handle: TimerHandle) -> None:
        """Arm ``watcher`` to fire ``handle``'s timeout from now (re-arming it if armed)."""
        self._push(watcher, time.monotonic_ns() + handle._timeout_ns)

    def disarm(self, watcher: Watcher) -> None:
        """Forget ``watcher``'s deadline (its heap entry is skipped when it comes up)."""
        if self._armed.pop(watcher, None) is not None:
            self._compact_if_mostly_dead()

    def first_deadline(self) -> float | None:
        """The first deadline in ``time.monotonic()`` seconds, or None if none is armed."""
        deadline = self._first_ns()
        return None if deadline is None else deadline / 1e9

    def seconds_to_next(self) -> float | None:
        """Seconds until the first deadline (0.0 if it has passed), or None if none is armed."""
        deadline = self._first_ns()
        return None if deadline is None else max(deadline - time.monotonic_ns(), 0) / 1e9

    def _first_ns(self) -> int | None:
        heap, armed = self._heap, self._armed
        while heap:
            deadline, number, watcher = heap[0]
            if armed.get(watcher) == (deadline, number):
                return deadline
            heapq.heappop(heap)  # a dead entry
        return None

    def take_due(self, limit: int) -> list[Watcher]:
        """Up to ``limit`` due timers, first deadline first; re-arms the periodic ones.

        A periodic timer re-arms from its previous deadline; one far behind skips the
        periods it missed, so it is reported once per call, never in a burst.  A timer left
        out by ``limit`` stays due.
        """
        heap, armed = self._heap, self._armed
        now = time.monotonic_ns()
        due: list[Watcher] = []
        taken = self.taken = []
        while heap and len(due) < limit:
            deadline, number, watcher = heap[0]
            if deadline > now:
                break
            heapq.heappop(heap)
            if armed.get(watcher) != (deadline, number):
                continue  # a dead entry
            watcher._triggered = Event.TIMER
            due.append(watcher)
            handle: TimerHandle = watcher._handle  # type: ignore[assignment]
            if handle._periodic and not watcher._oneshot:
                period = handle._timeout_ns
                following = deadline + period
                if following <= now:  # far behind: skip to the first deadline still ahead
                    following += period * ((now - following) // period + 1)
                self._push(watcher, following)
                taken.append((deadline, armed[watcher]))
            else:
                del armed[watcher]
                watcher._armed = False
                taken.append((deadline, None))
        return due

    def give_back(
        self, due: list[Watcher], taken: list[tuple[int, tuple[int, int] | None]]
    ) -> None:
        """Arm again, due as they were, the timers ``take_due()`` returned as ``due`` (and
        recorded as ``taken``): the wait that took them raised before it could report
        them (SPEC 4: no ready watcher is missed).  One removed or re-armed since (by a
        signal handler, say) is left as it is now."""
        armed = self._armed
        for watcher, (deadline, left) in zip(due, taken, strict=True):
            if watcher.is_active() and armed.get(watcher) == left:
                self._push(watcher, deadline)
                watcher._armed = True

    def clear(self) -> None:
        """Forget every timer (the context is closing)."""
        self._heap.clear()
        self._armed.clear()
        self.watchers.clear()

    def _push(self, watcher: Watcher, deadline: int) -> None:
        self._count += 1
        entry = (deadline, self._count)
        self._armed[watcher] = entry
        heapq.heappush(self._heap, (deadline, self._count, watcher))
        self._compact_if_mostly_dead()  # re-arming an armed timer left its old entry behind

    def _compact_if_mostly_dead(self) -> None:
        if len(self._heap) > 2 * len(self._armed) + 64:
            self._heap = [(deadline, number, w) for w, (deadline, number) in self._armed.items()]
            heapq.heapify(self._heap)
