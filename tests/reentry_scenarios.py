"""Scenarios in which Python code that the driver calls rebinds or frees what the driver reads.

Each scenario is a function of the driver class that returns one line: what it saw.  They
are run by ``tests/test_loop_speedups_reentry.py``, one child process per scenario and class
(``python -m reentry_scenarios SCENARIO CLASS``), so that a crash of the C code fails one test
and that ``PYTHONMALLOC=debug`` can fill freed memory.  The comment above each scenario names
the C code that used to read a borrowed reference, a stale list index or an unchecked type
across a call into Python; the pure-Python reference (``PyIoPollDriver``) says what the C
dispatch (``IoPollDriver``) must do.  This module is not collected by itself (no ``test_``
prefix).

The lines hold no addresses and no class names of the driver's records (the pure and the C
records live in different modules), only what must match: values, type names, messages.
"""

from __future__ import annotations

import gc
import re
import signal
import sys
from collections.abc import Callable
from typing import Any

from iopoll.loop import IoPollDriver
from iopoll.loop._iopoll_driver import PyIoPollDriver

Driver = type[PyIoPollDriver]

CLASSES: dict[str, Driver] = {"PyIoPollDriver": PyIoPollDriver, "IoPollDriver": IoPollDriver}

SCENARIOS: dict[str, Callable[[Driver], str]] = {}


def scenario(func: Callable[[Driver], str]) -> Callable[[Driver], str]:
    """Register ``func`` under its name."""
    SCENARIOS[func.__name__] = func
    return func


def _names(items: Any) -> list[str]:
    """A list's strings as they are, its other items by type name."""
    return [x if isinstance(x, str) else type(x).__name__ for x in items]


def _error(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"


def _ignore(callback_id: str) -> None:
    pass


def _attempt(seen: list[object], fn: Callable[[], object]) -> None:
    """Call ``fn``; note the exception it raises, if any."""
    try:
        fn()
    except Exception as e:
        seen.append(_error(e))


# -- counters and ids: a number's __add__ rebinds the slot it was read from -----------------------


@scenario
def add_to(cls: Driver) -> str:
    # add_to (_dispatch.h): value = a borrowed peek of the slot goes to PyNumber_Add(value,
    # step); an int subclass whose __add__ rebinds the slot and returns NotImplemented leaves
    # CPython's reflected int addition reading the freed value.
    state: dict[str, Any] = {}

    class L(int):
        def __add__(self, other: int) -> Any:
            d = state.pop("d", None)
            if d is not None:
                d._live = 5  # this L's last reference (but the frame's) goes
                return NotImplemented
            return L(int(self) + other)

    d: Any = cls()
    d._live = L(10**30)  # a big int: not a cached small one
    state["d"] = d
    d.defer(print)
    return f"_live: {d._live}"


@scenario
def id_prefix(cls: Driver) -> str:
    # new_id (_schedule.c): prefix = a borrowed peek of self._id_prefix is passed to
    # PyNumber_Add(prefix, letter).  A str-subclass prefix whose __add__ rebinds _id_prefix
    # and returns NotImplemented: CPython then concatenates the freed prefix (sq_concat).
    state: dict[str, Any] = {}

    class P(str):
        __slots__ = ()

        def __add__(self, other: str) -> Any:
            d = state.pop("d", None)
            if d is not None:
                d._id_prefix = "q"  # the slot's reference to this P goes
            return NotImplemented

    d: Any = cls()
    d._id_prefix = P("pre" * 20)
    state["d"] = d
    try:
        return f"id: {d.defer(print)}"
    except Exception as e:
        return _error(e)


# -- the timers: a clock reading whose comparison or addition runs Python code --------------------


@scenario
def fifo_expiration(cls: Driver) -> str:
    # enqueue_fifo (_timers.c): ordered(expiration, clock, Py_GT) with `expiration` a borrowed
    # peek of the FIFO record's slot.  Its __gt__ rebinds that slot and returns NotImplemented:
    # CPython then hands the freed expiration to the clock's reflected __lt__.
    state: dict[str, Any] = {}

    class F(float):
        __slots__ = ()

        def __add__(self, other: float) -> F:
            return F(float(self) + other)

        def __gt__(self, other: float) -> Any:
            rec = state.pop("rec", None)
            if rec is not None:
                rec.expiration = 0.0  # self's last references (but the frame's) go
                state["d"]._fifo_last = 0.0
                return NotImplemented
            return float(self) > float(other)

        def __lt__(self, other: float) -> bool:
            return float(self) < float(other)

    class D(cls):  # type: ignore[valid-type,misc]
        __slots__ = ()

        def _now(self) -> float:
            return F(100.0)

    d: Any = D()
    d.delay(5, _ignore)
    d.delay(0, _ignore)  # to the FIFO
    d._activate(d._enable_queue)
    d._enable_queue = []
    state["rec"] = d._fifo_timers[0]
    state["d"] = d
    d._enqueue_timers()
    return f"queued: {len(d._queue)}"


@scenario
def fifo_last(cls: Driver) -> str:
    # fits_fifo (_timers.c): ordered(expiration, last, Py_GE) with `last` a borrowed peek of
    # self._fifo_last.  A clock-reading float subclass whose __ge__ rebinds _fifo_last (and the
    # record's expiration) and returns NotImplemented: CPython then reads the freed `last`
    # for the reflected comparison.
    state: dict[str, Any] = {}

    class F(float):
        __slots__ = ()

        def __add__(self, other: float) -> F:
            return F(float(self) + other)

        def __ge__(self, other: float) -> Any:
            if state.get("armed"):
                state["armed"] = False
                d, first = state["d"], state["first"]
                d._fifo_last = 0.0
                first.expiration = 0.0  # `other` had these two references
                return NotImplemented
            return float(self) >= float(other)

    class D(cls):  # type: ignore[valid-type,misc]
        __slots__ = ()

        def _now(self) -> float:
            return F(100.0)

    d: Any = D()
    d.delay(5, _ignore)  # the heap holds a timer, so delay(0)s go to the FIFO
    d.delay(0, _ignore)  # the FIFO's first: _fifo_last = its expiration
    d.delay(0, _ignore)  # compared with _fifo_last
    state.update(armed=True, d=d, first=d._unindexed[1])
    d._activate(d._enable_queue)
    return f"fifo: {len(d._fifo_timers)} heap: {len(d._timers)}"


@scenario
def heap_siftdown(cls: Driver) -> str:
    # sift_down (_timer_heap.c): `item` = heap[pos] is read once; a comparison that runs
    # Python code (a float-subclass clock reading) and replaces heap[pos] (same size) leaves C
    # writing the stale item back: the replacement leaks, the item loses its list reference.
    armed: list[Any] = []

    class F(float):
        def __add__(self, other: float) -> F:
            return F(float(self) + other)

        def __eq__(self, other: object) -> bool:
            if armed:
                d = armed.pop()
                d._timers[1] = (F(0.0), -1, None)  # same size: only heap[1] changes
            return float(self) == float(other)  # type: ignore[arg-type]

        __hash__ = float.__hash__

    class D(cls):  # type: ignore[valid-type,misc]
        __slots__ = ()

        def _now(self) -> float:
            return F(100.0)

    d: Any = D()
    d.delay(6, _ignore)
    d.delay(5, _ignore)  # sifts up past the first: one comparison
    records = list(d._unindexed)
    armed.append(d)
    d._activate(d._enable_queue)
    heap = [(float(e[0]), e[1]) for e in d._timers]
    in_heap = any(e is records[1].entry for e in d._timers)
    refcount = sys.getrefcount(records[1].entry)  # the record's and the call's
    d._timers.clear()  # a stale write-back lost a reference: this frees the entry
    entry = records[1].entry
    after = (float(entry[0]), entry[1], entry[2] is records[1])
    return (
        f"heap: {heap} rec2.entry in heap: {in_heap} refcount: {refcount}"
        f" entry after clear: {after}"
    )


@scenario
def repeat_interval(cls: Driver) -> str:
    # run_callback (_dispatch.c): interval = a borrowed peek of callback.interval is passed to
    # PyNumber_Add(clock, interval).  A float-subclass clock whose __add__ rebinds the interval
    # and returns NotImplemented: CPython then runs float's add on the freed interval.
    state: dict[str, Any] = {}

    class F(float):
        __slots__ = ()

        def __add__(self, other: float) -> Any:
            rec = state.pop("rec", None)
            if rec is not None:
                rec.interval = 0.5  # the old interval's last reference goes
                return NotImplemented
            return F(float(self) + other)

    class D(cls):  # type: ignore[valid-type,misc]
        __slots__ = ()

        def _now(self) -> float:
            return F(100.0)

    d: Any = D()

    def fn(callback_id: str) -> None:
        d.stop()

    d.repeat(0.25, fn)
    d._activate(d._enable_queue)
    d._enable_queue = []
    rec = d._timers[0][2]
    rec.interval = float("0.25")  # a float only the slot holds
    d._timers[0] = (F(0.0), *d._timers[0][1:])
    rec.entry = d._timers[0]
    d._enqueue_timers()  # due now
    state["rec"] = rec
    d._drain()
    return f"expiration: {float(rec.expiration)}"


@scenario
def repeat_rearm(cls: Driver) -> str:
    # run_callback (_dispatch.c): queue = a borrowed peek of self._enable_queue, THEN
    # add_to(callback, queued, 1) (an int subclass's __add__ may run code), then
    # PyList_Append(queue, ...).  Python: `callback.queued += 1;
    # self._enable_queue.append(callback)`.
    state: dict[str, Any] = {}

    class Q(int):
        def __add__(self, other: int) -> Q:
            d = state.pop("d", None)
            if d is not None:
                d._enable_queue = ["new"]  # the old (empty) list's only reference goes
            return Q(int(self) + other)

        __radd__ = __add__

        def __sub__(self, other: int) -> Q:
            return Q(int(self) - other)

    d: Any = cls()

    def fn(callback_id: str) -> None:
        d.stop()

    d.repeat(0, fn)
    d._tick(False)  # activates and queues it (queued is 0 now)
    rec = d._queue[0]
    rec.queued = Q(0)
    state["d"] = d
    d._drain()  # runs it: re-armed
    return f"enable queue: {_names(d._enable_queue)}"


# -- the registry: a record's `enabled`, a signal number, the GC ----------------------------------


@scenario
def gc_defer(cls: Driver) -> str:
    # loop_defer (_schedule.c): _unindexed and _defers are peeked (borrowed) before
    # new_record(), a GC allocation: on 3.11 it may run a collection, and a finalizer that
    # rebinds _defers frees the list C then appends to.
    d: Any = cls()

    class Cycle:
        me: Any

        def __del__(self) -> None:
            d._defers = ["new"]

    gc.collect()
    gc.set_threshold(100000)
    c = Cycle()
    c.me = c
    del c  # garbage, young
    gc.set_threshold(1)  # the next GC allocation collects it
    d.defer(print)
    gc.set_threshold(700, 10, 10)
    return f"defers: {_names(d._defers)}"


@scenario
def signal_activate(cls: Driver) -> str:
    # activate_one, signal branch (_registry.c): callback_id = a borrowed peek of callback.id
    # is read before PyDict_SetDefault(maps, signum, {}) (which hashes signum: an int subclass
    # may run code) and used after.  Python reads callback.id after setdefault().
    state: dict[str, Any] = {}

    class Sig(int):
        def __hash__(self) -> int:
            rec = state.pop("rec", None)
            if rec is not None:
                state["d"]._callbacks.clear()
                rec.id = "renamed"  # the old id's last reference goes
            return int.__hash__(self)

    d: Any = cls()
    d._id_prefix = "xyz" * 10
    d.on_signal(signal.SIGUSR2, print)
    rec = d._enable_queue[0]
    rec.arg = Sig(signal.SIGUSR2)
    state.update(rec=rec, d=d)
    queue, d._enable_queue = d._enable_queue, []
    d._activate(queue)
    ids = list(d._signal_callbacks[signal.SIGUSR2])
    d.close()
    return f"ids in the signal map: {ids}"


@scenario
def sweep_unindexed(cls: Driver) -> str:
    # loop_sweep_unindexed (_registry.c): callback = PyList_GET_ITEM (borrowed), then
    # truth(callback, enabled) -- a non-bool `enabled` runs its __bool__ -- then
    # PyList_Append(kept, callback).  A __bool__ that empties the list frees the record.
    d: Any = cls()

    class Evil:
        def __bool__(self) -> bool:
            d._unindexed.clear()
            d._defers.clear()  # the record's last references
            return True

    d.defer(print)
    d._unindexed[0].enabled = Evil()
    d._sweep_unindexed()
    kept = _names(d._unindexed)
    return f"kept: {kept} its id: {d._unindexed[0].id if kept else None}"


@scenario
def tidy_stale_len(cls: Driver) -> str:
    # loop_tidy_if_due (_registry.c): `length` is read before truth(unindexed[0].enabled) (a
    # non-bool runs __bool__) and compared with the limit after it.  Python reads len() after.
    d: Any = cls()
    d.defer(print)
    d._defers.clear()
    d._live = 0

    class Evil:
        calls = 0

        def __bool__(self) -> bool:
            Evil.calls += 1
            if Evil.calls == 1:
                d._unindexed.extend([d._unindexed[0]] * 2000)
            return True

    d._unindexed[0].enabled = Evil()
    d._drain()
    return f"len: {len(d._unindexed)} limit: {d._unindexed_limit}"


# -- the tick, the poll and the suspensions ------------------------------------------------------


def _tick_queue(cls: Driver, which: str) -> str:
    # loop_tick (_dispatch.c): _enable_queue / _defers are peeked (borrowed), then nonempty()
    # runs their __bool__; one that rebinds the slot frees the object C then uses.
    d: Any = cls()

    class Q(list[Any]):
        def __bool__(self) -> bool:
            setattr(d, which, [])  # the slot's reference to this Q goes
            return True

    setattr(d, which, Q())
    try:
        d._tick(False)
    except Exception as e:
        return _error(e)
    return "ok"


@scenario
def enable_queue_release_order(cls: Driver) -> str:
    # loop_drop_front (_timer_heap.c), the cut that empties the enable queue after its
    # activation: the records it holds last are let go in the order list.clear() lets them
    # go, last first, and so are the streams only they still held (their __del__ runs).
    d: Any = cls()
    released: list[int] = []

    class Stream:
        def __init__(self, number: int, fd: int) -> None:
            self.number, self.fd = number, fd

        def fileno(self) -> int:
            return self.fd

        def __del__(self) -> None:
            released.append(self.number)

    for number in range(4):
        d.cancel(d.on_readable(Stream(number, 0), _ignore))
    gc.collect()
    released.clear()
    d._tick(False)
    return f"released: {released}"


@scenario
def tick_enable_queue(cls: Driver) -> str:
    return _tick_queue(cls, "_enable_queue")


@scenario
def tick_defers(cls: Driver) -> str:
    return _tick_queue(cls, "_defers")


@scenario
def poll_fallback(cls: Driver) -> str:
    # loop_poll (_dispatch.c): `other` = self._fallback is peeked BEFORE the first
    # self._wait() and used after it.  A _wait() that replaces _fallback frees the old one.
    seen: list[str] = []

    class Fallback:
        def __init__(self, name: str) -> None:
            self.name = name

    class D(cls):  # type: ignore[valid-type,misc]
        __slots__ = ()

        def _wait(self, poller: Any, timeout: float | None) -> list[Any]:
            seen.append(getattr(poller, "name", type(poller).__name__))
            if len(seen) == 1:
                driver: Any = self
                driver._fallback = Fallback("new")  # the old fallback's last reference goes
            return []

    d: Any = D()
    d._fallback = Fallback("old")
    d._fallback_count = 1
    d._poll(0.0)
    return f"waited on: {seen[1:]}"


@scenario
def runner_last(cls: Driver) -> str:
    # runner_suspension (_suspend.c): last = a borrowed peek of self._last is kept across
    # is_current(), which calls runner.getcurrent(); then truth(last, _dead) and
    # Py_NewRef(last).
    d: Any = cls()
    runner = d._runner
    d.get_suspension()  # the main suspension: runner._last and _main
    original = runner.getcurrent  # greenlet.getcurrent, now in use

    def getcurrent() -> Any:
        runner._last = runner._main = None  # the suspension's last references go
        return original()

    runner.getcurrent = getcurrent
    return re.sub(r" at 0x[0-9a-fA-F]+", "", repr(d.get_suspension()))


# -- objects of the wrong type where the C code reads a record's or a watcher's slots -----------


@scenario
def runner_last_type(cls: Driver) -> str:
    # runner_suspension (_suspend.c): the slots _greenlet and _dead of runner._last were read
    # by offset whatever its type (Python reads them by name: duck typing, or AttributeError).
    d: Any = cls()
    runner = d._runner
    main = d.get_suspension()  # greenlet now in use
    seen: list[object] = []

    class Stranger:  # not a Suspension, but with what suspension() asks of one
        def _greenlet(self) -> None:
            return None

    runner._last = Stranger()
    seen.append(d.get_suspension() is main)
    runner._last = 3.5
    _attempt(seen, d.get_suspension)
    return repr(seen)


@scenario
def suspension_runner_type(cls: Driver) -> str:
    # suspend, resume (_suspend.c): the slots loop, interrupt and queue of a suspension's
    # _runner were read by offset whatever its type (Python reads them by name).
    import greenlet

    d: Any = cls()
    main = d.get_suspension()
    seen: list[object] = []

    class Stranger:  # not a LoopRunner, but with what a suspension asks of one
        loop = None

        def interrupt(self, suspension: object) -> None:
            seen.append(("interrupt", suspension is main))

        def queue(self, task: tuple[object, ...]) -> None:
            seen.append(("queue", len(task)))

    for runner in (Stranger(), 3.5):
        main._runner = runner
        main._pending = True
        _attempt(seen, lambda: main.resume(7))
        main._main, main._pending = False, True
        _attempt(seen, lambda: main.resume(8))
        main._main = True

    suspensions: list[Any] = []

    def task() -> object:
        suspension = d.get_suspension()
        suspensions.append(suspension)
        suspension._runner = Stranger()
        seen.append(("suspend returned", suspension.suspend()))
        suspension._runner, suspension._pending = 3.5, False  # as if resumed
        _attempt(seen, suspension.suspend)
        return "done"

    child = greenlet.greenlet(task)
    seen.append(child.switch())  # suspend() switched to its parent
    suspensions[0]._pending = False  # as if resumed: a switch back in without is forwarded
    seen.append(child.switch())
    return repr(seen)


@scenario
def driver_runner_type(cls: Driver) -> str:
    # loop_drain, loop_run_microtasks, still_running (_dispatch.c): the loop slot of the
    # driver's _runner was read by offset whatever its type (Python: runner.loop by name).
    d: Any = cls()
    seen: list[object] = []

    class Stranger:  # not a LoopRunner, but with the loop a drain reads
        loop = None

    d._runner = Stranger()
    d.defer(lambda cid: seen.append("deferred"))
    d.queue(lambda: seen.append("microtask"))
    d._tick(False)
    d._drain()
    d._run_microtasks()
    d._runner = 3.5
    d.defer(_ignore)
    d._tick(False)
    _attempt(seen, d._drain)
    _attempt(seen, d._run_microtasks)
    return repr(seen)


@scenario
def drain_type(cls: Driver) -> str:
    # loop_drain / activate_one read record slots by offset from whatever is queued, unchecked.
    d: Any = cls()
    d._queue.append(3.5)
    try:
        d._drain()
    except Exception as e:
        return _error(e)
    return "ok"


@scenario
def queue_ready_type(cls: Driver) -> str:
    # queue_one (_iopoll_ready.c): a peek of a Watcher's w_data slot reads an offset into
    # whatever _wait() returned, with no type check (Python: watcher._data -> AttributeError).
    try:
        cls()._queue_ready([3.5])  # type: ignore[list-item]
    except Exception as e:
        return _error(e)
    return "ok"


def main(argv: list[str]) -> None:
    """Run ``SCENARIO`` on ``CLASS`` (``PyIoPollDriver`` or ``IoPollDriver``) and print its line."""
    name, cls = argv
    line = SCENARIOS[name](CLASSES[cls])
    print(re.sub(r"0x[0-9a-fA-F]+", "0x?", line), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
