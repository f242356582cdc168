"""What keeps a driver and its callback records alive, and what frees them.

The C records (``iopoll/loop/_records.c``): ``defer()``, ``delay()`` and ``repeat()`` made in
C leave their record untracked by the collector, and a ``gc.callbacks`` entry tracks every
such record a driver still holds at the start of each full collection.  These tests hold
both halves: a young collection leaves a pending record alone (what makes a burst of defers
cheap), and a full one finds a cycle through a record wherever the driver keeps it: its
unindexed list, id map, defer queue, enable queue, timer heap or run queue.  Each cycle test
runs on the pure drivers too, where the records are tracked as any object: all must collect
the same.

The loop greenlet (``iopoll/loop/_suspension.py``): a suspended greenlet's frames are opaque
to the collector, and the loop greenlet's refer to its driver.  One that ``run()`` left
waiting would keep its driver, and all its callbacks refer to, alive for good: an error
ends it, and ``close()`` ends one a resumed main suspension left.
"""

from __future__ import annotations

import gc
import sys
import weakref
from collections.abc import Callable
from typing import Any

import pytest

from iopoll.loop import IoPollDriver, SelectorsDriver, UncaughtError
from iopoll.loop._iopoll_driver import ACCELERATED, PyIoPollDriver
from iopoll.loop._native_dispatch import RECORD_OWNERS
from iopoll.loop._selectors_driver import PySelectorsDriver

needs_c = pytest.mark.skipif(not ACCELERATED, reason="iopoll.loop._speedups is not in use")

DRIVERS = pytest.mark.parametrize(
    "cls",
    [PyIoPollDriver, IoPollDriver, PySelectorsDriver, SelectorsDriver],
    ids=["pure", "c", "pure-selectors", "c-selectors"],
)


class Owner:
    """What a pending callback refers to, and what refers to its driver: the cycle."""

    driver: Any = None


def _stop_after_one_tick(d: Any) -> None:
    d.defer(lambda cid: d.stop())
    d.run()


def _pending_defer(d: Any, fn: Callable[..., None]) -> None:
    d.defer(fn)  # in _unindexed and _defers


def _indexed_defer(d: Any, fn: Callable[..., None]) -> None:
    d.disable(d.defer(fn))  # indexed by the call: in the id map and _defers


def _cancelled_defer(d: Any, fn: Callable[..., None]) -> None:
    d.cancel(d.defer(fn))  # out of the map, still in _defers until the next tick


def _cancelled_queued_timer(d: Any, fn: Callable[..., None]) -> None:
    d.cancel(d.delay(3600, fn))  # in the enable queue only


def _cancelled_active_timer(d: Any, fn: Callable[..., None]) -> None:
    callback_id = d.delay(3600, fn)
    _stop_after_one_tick(d)  # activated: a heap entry refers to the record
    d.cancel(callback_id)  # the entry stays in the heap, dead, until swept
    assert d._timers


def _pending_repeat(d: Any, fn: Callable[..., None]) -> None:
    d.repeat(3600, fn)
    _stop_after_one_tick(d)
    assert d._timers


def _left_in_the_run_queue(d: Any, fn: Callable[..., None]) -> None:
    def fail(cid: str) -> None:
        raise ValueError(cid)

    d.defer(fail)
    d.defer(fn)
    with pytest.raises(UncaughtError):
        d.run()
    # The error ended run() in the tick; what it had not run yet waits for the next run().
    assert len(d._queue) == 1


PLACES = {
    "pending-defer": _pending_defer,
    "indexed-defer": _indexed_defer,
    "cancelled-defer": _cancelled_defer,
    "cancelled-queued-timer": _cancelled_queued_timer,
    "cancelled-active-timer": _cancelled_active_timer,
    "pending-repeat": _pending_repeat,
    "left-in-the-run-queue": _left_in_the_run_queue,
}


@DRIVERS
@pytest.mark.parametrize("place", PLACES)
def test_a_full_collection_finds_a_cycle_through_a_record(cls: type[Any], place: str) -> None:
    def make() -> weakref.ref[Owner]:
        owner = Owner()
        d = owner.driver = cls()

        def fn(cid: str, owner: Owner = owner) -> None:
            pass

        PLACES[place](d, fn)
        return weakref.ref(owner)

    gone = make()
    gc.collect()
    assert gone() is None


@needs_c
@pytest.mark.parametrize("cls", [IoPollDriver, SelectorsDriver], ids=["c", "c-selectors"])
def test_records_start_untracked_and_a_full_collection_tracks_them(cls: type[Any]) -> None:
    d = cls()
    made = [d.defer(lambda cid: None), d.delay(1, lambda cid: None), d.repeat(1, lambda cid: None)]
    records = [d._index()[callback_id] for callback_id in made]
    assert [gc.is_tracked(record) for record in records] == [False, False, False]
    gc.collect(0)
    gc.collect(1)  # the young collections skip them: what keeps a burst of defers cheap
    assert [gc.is_tracked(record) for record in records] == [False, False, False]
    gc.collect()
    assert [gc.is_tracked(record) for record in records] == [True, True, True]
    callback_id = d.defer(lambda cid: None)
    assert gc.is_tracked(d._index()[callback_id]) is False  # the next is made untracked
    d.close()


@needs_c
def test_drivers_are_owners_while_they_live() -> None:
    gc.collect()
    before = len(RECORD_OWNERS)
    d = IoPollDriver()
    assert d in RECORD_OWNERS and len(RECORD_OWNERS) == before + 1
    pure = PyIoPollDriver()
    assert pure._record_owners is None and pure not in RECORD_OWNERS  # Python records
    gone = weakref.ref(d)
    d.close()
    del d
    gc.collect()
    assert gone() is None and len(RECORD_OWNERS) == before


@needs_c
def test_a_record_ran_before_a_full_collection_is_freed_untracked() -> None:
    """A deferred callback that runs is freed by its reference count, never walked."""
    d = IoPollDriver()
    seen: list[bool] = []

    def fn(cid: str) -> None:
        seen.append(gc.is_tracked(record))

    callback_id = d.defer(fn)
    record = d._index()[callback_id]
    d.run()
    assert seen == [False]
    d.close()


def _fail(cid: str) -> None:
    raise ValueError(cid)


@DRIVERS
@pytest.mark.parametrize("close", [False, True], ids=["dropped", "closed"])
def test_a_driver_whose_run_raised_is_freed(cls: type[Any], close: bool) -> None:
    def make() -> weakref.ref[Any]:
        d = cls()
        d.defer(_fail)
        d.defer(lambda cid: None)  # left in the run queue by the error
        with pytest.raises(UncaughtError):
            d.run()
        if close:
            d.close()
        return weakref.ref(d)

    gone = make()
    gc.collect()
    assert gone() is None


@DRIVERS
def test_the_run_after_an_error_starts_a_fresh_loop_that_runs_what_was_left(
    cls: type[Any],
) -> None:
    pytest.importorskip("greenlet")
    d = cls()
    order: list[str] = []
    d.defer(lambda cid: order.append("first"))
    d.defer(_fail)
    d.defer(lambda cid: order.append("left"))
    d.queue(order.append, "microtask")
    with pytest.raises(UncaughtError):
        d.run()
    ended = d._runner.loop
    assert ended.dead  # not kept waiting for the next run()
    d.defer(lambda cid: order.append("next tick"))
    d.run()
    assert order == ["microtask", "first", "left", "next tick"]
    assert d._runner.loop is not ended
    d.close()


@DRIVERS
def test_close_ends_the_loop_a_resumed_main_suspension_left_waiting(cls: type[Any]) -> None:
    pytest.importorskip("greenlet")

    def make() -> tuple[weakref.ref[Any], Any]:
        d = cls()
        suspension = d.get_suspension()
        d.defer(lambda cid: suspension.resume(7))
        d.delay(3600, lambda cid: None)
        assert suspension.suspend() == 7
        loop = d._runner.loop
        assert loop and not loop.dead  # waits for the next run() or suspend()
        d.close()
        assert loop.dead
        return weakref.ref(d), weakref.ref(loop)

    gone, loop_gone = make()
    gc.collect()
    assert gone() is None and loop_gone() is None


class Held:
    """What a callback's closure holds: freed once nothing keeps the callback."""


@DRIVERS
@pytest.mark.parametrize(
    "schedule",
    [
        lambda d, fn: d.delay(float("inf"), fn),
        lambda d, fn: d.delay(3600, fn),
        lambda d, fn: d.repeat(3600, fn),
        lambda d, fn: d.defer(fn),
        lambda d, fn: d.disable(d.defer(fn)),
    ],
    ids=["delay-inf", "delay", "repeat", "defer", "disabled-defer"],
)
def test_cancel_lets_go_of_the_callback_at_once(
    cls: type[Any], schedule: Callable[[Any, Callable[..., None]], str]
) -> None:
    # A timer's heap or FIFO entry outlives its cancel() until a sweep, and a defer's queue
    # entry until the next tick: the function, and what it holds, must not.
    d = cls()
    held = Held()
    watch = weakref.ref(held)
    d.defer(lambda cid: None)  # a live record besides: no sweep empties everything
    callback_id = schedule(d, lambda cid, held=held: None)
    del held
    d.cancel(callback_id)
    gc.collect()
    assert watch() is None
    assert callback_id not in d.get_identifiers()
    d.close()


@DRIVERS
def test_the_timer_lists_give_their_memory_back_once_a_burst_ran(cls: type[Any]) -> None:
    """Ten thousand timers through the enable queue, the heap and the FIFO: once they ran,
    each list is small again, as ``list.pop()`` and ``del`` leave them.  The C driver keeps
    a small list's memory from one tick to the next (a lone ``repeat(0)`` would otherwise
    give it back and take it again in every tick), never a large one's."""
    d = cls()
    ran: list[str] = []
    for index in range(5_000):
        d.delay(0, ran.append)  # the FIFO, once the heap holds a timer
        d.delay(0.001 + index * 1e-7, ran.append)  # the heap
    d.run()
    assert len(ran) == 10_000
    small = sys.getsizeof([None] * 32)
    for name in ("_enable_queue", "_enable_spare", "_timers", "_fifo_seqs", "_fifo_timers"):
        assert sys.getsizeof(getattr(d, name)) < small, name
    d.close()
