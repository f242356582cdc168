"""``CallbackRegistry``: the callbacks of a driver, their ids and life cycle, and activation.

The state every driver keeps about its callbacks (the tick that runs them is
``AbstractDriver``'s, in ``_abstract_driver.py``): the records by id, the queues of what was
deferred or enabled since the last tick, the timers, the per-fd entries, the signal maps.
A callback becomes active (enters the timers, its fd entry or its signal's map) in the
tick after it was enabled, and leaves at once when disabled.  ``defer()`` and ``delay()`` are
hot paths: their helpers are inlined there.

Active timers run in (expiration, seq) order, seq counting activations.  Those of interval 0
(every ``delay(0)``, every ``repeat(0)``) expire at the clock reading of their registration or
re-arming, so they arrive in that order already: they go to the back of a FIFO, two parallel
lists of seqs and records, at O(1) and with no entry object (the clock is checked, not
trusted: one that went back sends the timer to the heap).  Each is due by the timer phase of
the tick that activates it, since that phase reads the clock again, so the tick takes the
whole FIFO and empties it; it keeps the rest only when the clock went back.  The other
timers go to a heap of (expiration, seq, record) tuples, and the tick takes the earlier of
the two heads.  The FIFO is for interval 0 only, not for any timer that happens to come in
order: one long timeout at its back would send every ``delay(0)`` behind it to the heap.  And
it takes timers only while the heap holds one: a lone timer (a ``repeat(0)`` ticking by
itself) costs less as a heap of one, with nothing to sift, than as an entry in two lists.

The id map is filled lazily.  A burst of defers or ``delay(0)`` calls (a server answering
a thousand connections in one tick) puts each record in a dict by a str id made a moment
ago, which hashes it, and its run takes it out again: in C that is about a tenth of a
defer's instructions, and with a hundred thousand pending the dict's memory costs more
than its instructions.  Yet most such ids are never passed back.  So a new defer or timer
goes to the back of ``_unindexed``, a list in the order of registration, with ``indexed``
False; the first call that needs the map (any call by id, ``get_identifiers()``, or a new
stream or signal callback, which goes into the map at once) moves every record of that list
that is still registered into it, in order, so that the map's order stays the order of
registration.  A record leaves the list only so: the only change of state that does not
come through its id is the end of a defer or a delay when it runs, which is also what makes
``enabled`` False outside ``disable()``.  So an unindexed record that is not enabled has
ended, and its run leaves it in the list (a removal would cost what the map costs).  They
let go of their function as they end, so what stays is a small record, and only for a
while: after each run of the queue, the ended records at the front of the list go (defers
and zero delays end in the order they were made, so a burst goes at the end of the run that
ends it), and a list that reached ``_unindexed_limit`` is swept whole, for those that ended
out of order behind a record that lives on.  The limit is twice the length left (at least
``_SWEEP_UNINDEXED``): a list is swept again only once it doubled, so each registration
pays for a constant share of the sweeps, and the ended records held are never many more
than the live ones.  The check is a test or two per run of the queue, not one per record.

A timer leaves at once when disabled, by losing its ``entry`` (its heap tuple, or its seq in
the FIFO); the entry it left behind is dead, skipped when it comes up, and counted, so that
the dead are swept when they are half of all.

It needs five hooks from below, declared abstract here where they are called: ``_now()``
(the clock), ``_io_update(entry, old, new)`` (register, modify or drop the OS registration of
one fd), ``_watch_wakeup(sock)`` (poll the signal wakeup socket, or stop: ``None``),
``_new_signals()`` (how this driver receives signals) and ``_lose_stream(entry)`` (an fd
entry's stream was closed before its callbacks were cancelled).
"""

from __future__ import annotations

import abc
import heapq
import itertools
import operator
import socket
from collections.abc import Callable, Iterable, MutableSet
from types import CodeType
from typing import Any, ClassVar

from ._callbacks import (
    _CO_ASYNC,
    _LETTERS,
    Callback,
    CallbackType,
    DeferCallback,
    DelayCallback,
    FdEntry,
    ReadableCallback,
    RepeatCallback,
    SignalCallback,
    StreamCallback,
    TimerCallback,
    WritableCallback,
    check_callback,
    check_seconds,
    new_defer,
    next_id,
    owns_fd,
    stream_fd,
)
from ._errors import InvalidCallbackError
from ._interface import Driver
from ._signals import SignalSource, SignalState

__all__ = ["CallbackRegistry"]

# The least length of _unindexed at which it is swept of its ended records.
_SWEEP_UNINDEXED = 1024
# The dead timer entries tolerated before the heap and the FIFO are swept of them (and then
# only once they are half of all entries).
_SWEEP_DEAD_TIMERS = 64
_ENABLED = operator.attrgetter("enabled")


class CallbackRegistry(Driver):
    """Ids, records, enable queues, activation and introspection; see the module doc."""

    # Slots, not a __dict__: the C dispatch (``_speedups.c``) reads them by offset.
    __slots__ = (
        "_callbacks",
        "_unindexed",
        "_unindexed_limit",
        "_id_prefix",
        "_id_index",
        "_enable_queue",
        "_enable_spare",
        "_defers",
        "_stale_queued",
        "_live",
        "_timers",
        "_fifo_seqs",
        "_fifo_timers",
        "_fifo_last",
        "_timer_seq",
        "_dead_timers",
        "_entries",
        "_signals",
        "_signal_callbacks",
        "_closed",
    )

    # Where a driver of a class whose records C makes goes when it is made: those records
    # start out untracked by the garbage collector, and the drivers in this set have theirs
    # tracked before each full collection (_native_dispatch.py, _records.c).  None: the
    # records are the Python classes', tracked as any object.
    _record_owners: ClassVar[MutableSet[CallbackRegistry] | None] = None

    def __init__(self) -> None:
        self._callbacks: dict[str, Callback] = {}  # the id map, of the indexed records
        self._unindexed: list[Callback] = []  # defers and timers not in it yet (module doc)
        self._unindexed_limit = _SWEEP_UNINDEXED  # its length that calls for a sweep
        # Ids run a, b, .. z, aa, ab .. (PHP's string increment): prefix + _LETTERS[index].
        self._id_prefix = ""
        self._id_index = 0
        # Callbacks (not defers) to activate in the next tick.  A list, not a dict keyed by id:
        # disable() leaves its entry here (activation skips what is disabled) and enable()
        # appends one more; ``queued`` counts a record's entries, the last one activates it.
        self._enable_queue: list[Callback] = []
        # The list a tick emptied, to be the queue after the next one: a loop busy with
        # repeats and enables makes no list per tick.  None while a tick activates a queue.
        self._enable_spare: list[Callback] | None = []
        # Deferred callbacks for the next tick.  A disabled one stays here, not invokable; an
        # enable() gives a defer a fresh record, so a stale record never runs.
        self._defers: list[Callback] = []
        self._stale_queued = 0  # entries of disabled callbacks in _defers and _enable_queue
        self._live = 0  # enabled and referenced callbacks: run() goes on while > 0
        self._timers: list[tuple[float, int, TimerCallback]] = []  # the heap
        self._fifo_seqs: list[int] = []  # the FIFO, side by side with...
        self._fifo_timers: list[TimerCallback] = []
        self._fifo_last = 0.0  # the last expiration put in the FIFO (read while it is not empty)
        self._timer_seq = itertools.count()
        self._dead_timers = 0  # entries of timers disabled since: skipped when they come up
        self._entries: dict[int, FdEntry] = {}
        self._signals: SignalSource | None = None  # made with the first signal callback
        self._signal_callbacks: dict[int, dict[str, SignalCallback]] = {}
        self._closed = False  # close() was called: run() and on_signal() refuse
        if self._record_owners is not None:
            self._record_owners.add(self)

    # -- hooks ----------------------------------------------------------------------------------

    @abc.abstractmethod
    def _now(self) -> float:
        """The clock timers run on, in seconds."""

    @abc.abstractmethod
    def _io_update(self, entry: FdEntry, old: int, new: int) -> None:
        """Register, modify or drop ``entry``'s OS registration: it wanted ``old``, now ``new``."""

    @abc.abstractmethod
    def _watch_wakeup(self, sock: socket.socket | None) -> None:
        """Poll the signal wakeup socket ``sock`` for reading; ``None``: stop polling it."""

    @abc.abstractmethod
    def _new_signals(self) -> SignalSource:
        """How this driver receives signals (made with the first signal callback)."""

    @abc.abstractmethod
    def _lose_stream(self, entry: FdEntry) -> None:
        """``entry``'s stream was closed before its callbacks were cancelled: they can never
        run again.  Cancel them and report each (``InvalidCallbackError.stream_closed``)."""

    # -- registration -------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("The driver is closed")

    def _new_id(self) -> str:
        index = self._id_index
        if index == 26:
            index = self._carry()
        self._id_index = index + 1
        return self._id_prefix + _LETTERS[index]

    def _carry(self) -> int:
        self._id_prefix = next_id(self._id_prefix) if self._id_prefix else "a"
        return 0

    def defer(self, fn: Callable[[str], None]) -> str:
        try:
            if fn.__code__.co_flags & _CO_ASYNC:
                check_callback(fn)  # raises
        except AttributeError:
            check_callback(fn)  # not a function: the general check
        index = self._id_index  # _new_id(), inlined on the hot paths
        if index == 26:
            index = self._carry()
        self._id_index = index + 1
        callback_id = self._id_prefix + _LETTERS[index]
        # new_defer(), inlined
        callback = DeferCallback()
        callback.id = callback_id
        callback.fn = fn
        callback.enabled = callback.referenced = callback.invokable = True
        callback.indexed = False
        self._unindexed.append(callback)
        self._defers.append(callback)
        self._live += 1
        return callback_id

    def _add_timer(
        self, seconds: float, fn: Callable[[str], None], kind: type[TimerCallback]
    ) -> str:
        index = self._id_index  # _new_id(), inlined on the hot paths
        if index == 26:
            index = self._carry()
        self._id_index = index + 1
        callback_id = self._id_prefix + _LETTERS[index]
        callback = kind(callback_id, fn, seconds, self._now())
        self._unindexed.append(callback)
        self._enable_queue.append(callback)
        self._live += 1
        return callback_id

    def delay(self, seconds: float, fn: Callable[[str], None]) -> str:
        if type(seconds) is not float or not seconds >= 0:
            seconds = check_seconds(seconds, "seconds")
        code = getattr(fn, "__code__", None)
        if type(code) is not CodeType or code.co_flags & _CO_ASYNC:
            check_callback(fn)
        return self._add_timer(seconds, fn, DelayCallback)

    def repeat(self, interval: float, fn: Callable[[str], None]) -> str:
        interval = check_seconds(interval, "interval")
        check_callback(fn)
        return self._add_timer(interval, fn, RepeatCallback)

    def _add_stream(
        self, stream: Any, fn: Callable[[str, Any], None], kind: type[StreamCallback]
    ) -> str:
        fd = stream_fd(stream)
        check_callback(fn)
        index = self._id_index  # _new_id(), inlined on the hot paths
        if index == 26:
            index = self._carry()
        self._id_index = index + 1
        callback_id = self._id_prefix + _LETTERS[index]
        callback = kind(callback_id, fn, stream, fd)
        if self._unindexed:  # _index_one(), inlined: streams come and go on a hot path too
            self._index()
        self._callbacks[callback_id] = callback
        self._enable_queue.append(callback)
        self._live += 1
        return callback_id

    def on_readable(self, stream: Any, fn: Callable[[str, Any], None]) -> str:
        return self._add_stream(stream, fn, ReadableCallback)

    def on_writable(self, stream: Any, fn: Callable[[str, Any], None]) -> str:
        return self._add_stream(stream, fn, WritableCallback)

    def on_signal(self, signum: int, fn: Callable[[str, int], None]) -> str:
        signum = SignalState.check_signum(signum)
        check_callback(fn)
        if self._signals is None:
            self._check_open()  # a closed driver's signal state is gone for good
            self._signals = self._new_signals()
        self._signals.add(signum)
        callback_id = self._new_id()
        callback = SignalCallback(callback_id, fn, signum)
        self._index_one(callback)
        self._enable_queue.append(callback)
        self._live += 1
        return callback_id

    # -- the id map ---------------------------------------------------------------------------

    def _index(self) -> dict[str, Callback]:
        """The id map, with the records of ``_unindexed`` that are still registered put in."""
        callbacks = self._callbacks
        unindexed = self._unindexed
        if unindexed:
            for callback in unindexed:
                if callback.enabled:  # else it ended (the module doc)
                    callback.indexed = True
                    callbacks[callback.id] = callback
            unindexed.clear()
            self._unindexed_limit = _SWEEP_UNINDEXED
        return callbacks

    def _index_one(self, callback: Callback) -> None:
        """Put a new stream or signal record (``indexed`` from the start) in the id map,
        after those made before it."""
        callbacks = self._index() if self._unindexed else self._callbacks
        callbacks[callback.id] = callback

    def _tidy_unindexed(self) -> None:
        """After a run of the queue: drop the ended records at the front of ``_unindexed``,
        then sweep it whole if it reached its limit (the module doc)."""
        unindexed = self._unindexed
        # The index of the first record still enabled, found at C speed.
        ended = next(itertools.compress(itertools.count(), map(_ENABLED, unindexed)), None)
        ended = len(unindexed) if ended is None else ended
        if ended:
            del unindexed[:ended]
            self._unindexed_limit = max(_SWEEP_UNINDEXED, 2 * len(unindexed))
        if len(unindexed) >= self._unindexed_limit:
            self._sweep_unindexed()

    def _sweep_unindexed(self) -> None:
        """Drop every record that ended from ``_unindexed``."""
        unindexed = self._unindexed
        kept = self._unindexed = list(itertools.compress(unindexed, map(_ENABLED, unindexed)))
        self._unindexed_limit = max(_SWEEP_UNINDEXED, 2 * len(kept))

    # -- life cycle of a callback ---------------------------------------------------------------

    def enable(self, callback_id: str) -> str:
        callback = self._get(callback_id)
        if callback.enabled:
            return callback_id
        if callback.referenced:
            self._live += 1
        if isinstance(callback, DeferCallback):
            # A fresh record: the old one may still sit in this tick's queue, not invokable.
            fresh = self._callbacks[callback_id] = new_defer(callback_id, callback.fn)
            fresh.indexed = True
            fresh.referenced = callback.referenced
            self._defers.append(fresh)
        else:
            callback.enabled = True
            if isinstance(callback, TimerCallback):
                callback.expiration = self._now() + callback.interval  # re-armed from now
            callback.queued += 1
            self._enable_queue.append(callback)
        return callback_id

    def disable(self, callback_id: str) -> str:
        callback = self._find(callback_id)
        if callback is None or not callback.enabled:
            return callback_id
        callback.enabled = False
        callback.invokable = False
        if callback.referenced:
            self._live -= 1
        if isinstance(callback, DeferCallback) or callback.queued:
            # Its queue entry stays until the next tick; many registrations disabled before
            # one (a loop not run yet) must not pile up.
            stale = self._stale_queued = self._stale_queued + 1
            if stale > 1024 and stale * 2 > len(self._defers) + len(self._enable_queue):
                self._compact_queues()
        else:
            self._deactivate(callback)  # active: leave the heap, fd entry or signal map
        return callback_id

    def _compact_queues(self) -> None:
        """Drop the entries of disabled callbacks from the defer and enable queues."""
        self._stale_queued = 0
        self._defers = [callback for callback in self._defers if callback.invokable]
        kept = []
        for callback in self._enable_queue:
            if callback.enabled:
                kept.append(callback)
            else:
                callback.queued = 0  # enable() queues it afresh
        self._enable_queue = kept

    def cancel(self, callback_id: str) -> None:
        self.disable(callback_id)  # which indexes
        callback = self._callbacks.pop(callback_id, None)
        if isinstance(callback, SignalCallback) and self._signals is not None:
            self._signals.remove(callback.signum)
        elif isinstance(callback, (TimerCallback, DeferCallback)):
            # Its heap or FIFO entry stays until a sweep (a delay(math.inf) for good, if no
            # sweep comes), a defer's until the next tick: let go of the function now, and of
            # all it holds, as asyncio's TimerHandle.cancel() does.  A stream callback keeps
            # it: a lost stream reports it by its function (_lose_stream).
            del callback.fn

    def reference(self, callback_id: str) -> str:
        callback = self._get(callback_id)
        if not callback.referenced:
            callback.referenced = True
            if callback.enabled:
                self._live += 1
        return callback_id

    def unreference(self, callback_id: str) -> str:
        callback = self._find(callback_id)
        if callback is not None and callback.referenced:
            callback.referenced = False
            if callback.enabled:
                self._live -= 1
        return callback_id

    # -- introspection ------------------------------------------------------------------------

    def _find(self, callback_id: str) -> Callback | None:
        """The record of ``callback_id``, or None when no callback has it."""
        try:
            return (self._index() if self._unindexed else self._callbacks).get(callback_id)
        except TypeError:  # unhashable: no id is that
            raise TypeError(
                f"callback_id must be a str, not {type(callback_id).__name__}"
            ) from None

    def _get(self, callback_id: str) -> Callback:
        callback = self._find(callback_id)
        if callback is None:
            raise InvalidCallbackError.invalid_identifier(callback_id)
        return callback

    def get_identifiers(self) -> list[str]:
        return list(self._index())

    def get_type(self, callback_id: str) -> CallbackType:
        return self._get(callback_id).type

    def is_enabled(self, callback_id: str) -> bool:
        return self._get(callback_id).enabled

    def is_referenced(self, callback_id: str) -> bool:
        return self._get(callback_id).referenced

    # -- activation ------------------------------------------------------------------------------

    def _activate(self, callbacks: Iterable[Callback]) -> None:
        timers, fifo = self._timers, self._fifo_timers
        seq = self._timer_seq
        for callback in callbacks:
            queued = callback.queued = callback.queued - 1
            if queued or not callback.enabled:
                continue  # a later entry activates it, or it was disabled since
            callback.invokable = True
            if isinstance(callback, TimerCallback):
                # The FIFO's back, or the heap (see the module doc).
                if (
                    timers
                    and not callback.interval
                    and (not fifo or callback.expiration >= self._fifo_last)
                ):
                    number = callback.entry = next(seq)
                    self._fifo_seqs.append(number)
                    fifo.append(callback)
                    self._fifo_last = callback.expiration
                else:
                    entry = callback.entry = (callback.expiration, next(seq), callback)
                    heapq.heappush(timers, entry)
            elif isinstance(callback, StreamCallback):
                self._activate_stream(callback)
            elif isinstance(callback, SignalCallback):
                callbacks_for = self._signal_callbacks.setdefault(callback.signum, {})
                callbacks_for[callback.id] = callback

    def _activate_stream(self, callback: StreamCallback) -> None:
        entry = self._entries.get(callback.fd)
        if entry is not None and not entry.alive():
            # The stream that registered this fd was closed and the number reused: its
            # callbacks can never fire again (cancelled and reported); the new stream gets
            # a registration of its own.
            del self._entries[entry.fd]
            self._io_update(entry, entry.events, 0)
            entry.events = 0
            self._lose_stream(entry)
            entry = None
        if not owns_fd(callback.stream, callback.fd):
            # Its own stream was closed while it waited to be activated (enabled again, or
            # registered and closed before the tick): the number now names nothing, or a
            # stream of its own, which this callback must never be run for.
            orphan = FdEntry(callback.fd, callback.stream)
            (orphan.writers if callback.writable else orphan.readers)[callback.id] = callback
            self._lose_stream(orphan)
            return
        if entry is None:
            entry = self._entries[callback.fd] = FdEntry(callback.fd, callback.stream)
        (entry.writers if callback.writable else entry.readers)[callback.id] = callback
        callback.entry = entry
        self._update_entry(entry)

    def _update_entry(self, entry: FdEntry) -> None:
        old, new = entry.events, entry.wanted()
        if old == new:
            return
        entry.events = new
        if self._entries.get(entry.fd) is not entry:
            return  # an orphan (its stream was closed): it holds no OS registration
        if not new:
            del self._entries[entry.fd]
        self._io_update(entry, old, new)

    def _deactivate(self, callback: Callback) -> None:
        if isinstance(callback, TimerCallback):
            if callback.entry is not None:
                callback.entry = None
                self._dead_timers += 1
                if self._dead_timers > _SWEEP_DEAD_TIMERS and self._dead_timers * 2 > (
                    len(self._timers) + len(self._fifo_timers)
                ):
                    self._sweep_timers()
        elif isinstance(callback, StreamCallback):
            entry = callback.entry
            if entry is not None:
                callback.entry = None
                del (entry.writers if callback.writable else entry.readers)[callback.id]
                self._update_entry(entry)
        elif isinstance(callback, SignalCallback):
            callbacks = self._signal_callbacks.get(callback.signum)
            if callbacks is not None:
                callbacks.pop(callback.id, None)

    def _sweep_timers(self) -> None:
        """Drop the dead entries from the heap and the FIFO, in place."""
        timers = self._timers
        timers[:] = [item for item in timers if item[2].entry is item]
        heapq.heapify(timers)
        seqs, fifo = self._fifo_seqs, self._fifo_timers
        live = [i for i, callback in enumerate(fifo) if callback.entry is seqs[i]]
        seqs[:] = [seqs[i] for i in live]
        fifo[:] = [fifo[i] for i in live]
        self._dead_timers = 0

    def _next_expiration(self) -> float | None:
        """When the first live timer expires (``None``: no timer), dropping dead heads."""
        timers = self._timers
        while timers and timers[0][2].entry is not timers[0]:
            heapq.heappop(timers)
            self._dead_timers -= 1
        seqs, fifo = self._fifo_seqs, self._fifo_timers
        dead = 0
        while dead < len(fifo) and fifo[dead].entry is not seqs[dead]:
            dead += 1
        if dead:
            del seqs[:dead]
            del fifo[:dead]
            self._dead_timers -= dead
        if not fifo:
            return timers[0][0] if timers else None
        first = fifo[0].expiration
        return min(first, timers[0][0]) if timers else first

    def close(self) -> None:
        """Restore the signal handlers and wakeup fd this driver installed."""
        self._closed = True
        if self._signals is not None:
            self._signals.close()
            self._signals = None
