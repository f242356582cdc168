"""Edges of the loop's timers (``delay``/``repeat``): their order in the heap and the FIFO
of interval-0 timers, a clock that goes back, and what a timer that ran lets go of.

The C timer code (``iopoll/loop/_timers.c``, ``_timer_heap.c``, ``_schedule.c``) mirrors
the pure-Python reference (``CallbackRegistry._activate``, ``AbstractDriver._enqueue_timers``
and ``_enqueue_fifo``) line for line; these cases pin what the random schedule of
``test_loop_speedups.py`` rarely reaches, because its clock only moves forward and never
reads the same instant twice.  A test clock is put on a driver the way that file does:
a subclass overriding ``_now`` (which the C dispatch calls by name) and ``_poll`` (a
blocking wait moves the clock instead of sleeping).  Every driver runs the same tests; with
``IOPOLL_PURE_PYTHON=1`` every driver is pure.
"""

from __future__ import annotations

import gc
import random
import sys
import tracemalloc
from typing import Any

import pytest

from every_loop_driver import EVERY_DRIVER, bytes_grown_in_run, with_test_clock
from iopoll.loop import Driver, IoPollDriver, SelectorsDriver
from iopoll.loop._abstract_driver import AbstractDriver
from iopoll.loop._iopoll_driver import PyIoPollDriver
from iopoll.loop._selectors_driver import PySelectorsDriver

BASES: list[type[AbstractDriver[Any]]] = [
    IoPollDriver,
    PyIoPollDriver,
    SelectorsDriver,
    PySelectorsDriver,
]


@pytest.mark.parametrize("make", EVERY_DRIVER)
def test_defer_refuses_an_async_generator_function(make: Any) -> None:
    """An ``async def`` function with ``yield`` is no callback either: ``defer`` refuses it
    as it refuses a coroutine function, and registers nothing."""

    async def agen(callback_id: str) -> Any:
        yield callback_id

    made: Driver = make()
    try:
        with pytest.raises(TypeError, match="async def"):
            made.defer(agen)
        assert made.get_identifiers() == []
    finally:
        made.close()  # type: ignore[attr-defined]


@pytest.mark.parametrize("make", EVERY_DRIVER)
def test_a_new_defer_is_referenced_and_keeps_run_going_until_it_ran(make: Any) -> None:
    """A defer is referenced from the start, and ``run()`` returns once it ran."""
    made: Driver = make()
    try:
        seen: list[str] = []
        callback_id = made.defer(seen.append)
        assert made.is_referenced(callback_id)
        made.run()
        assert seen == [callback_id]
    finally:
        made.close()  # type: ignore[attr-defined]


@pytest.fixture(params=BASES, ids=lambda base: base.__name__)
def driver(request: pytest.FixtureRequest) -> Any:
    """A driver of each class on a hand-set clock, closed after the test."""
    made = with_test_clock(request.param, start=100.0)()
    yield made
    made.close()


def test_timers_run_in_expiration_order_whatever_their_registration_order(driver: Any) -> None:
    """Timers registered at one instant in a shuffled order of delays all run, in the order
    of their delays (equal delays in the order of registration), once the clock has passed
    them all."""
    rng = random.Random(1)
    delays = [float(d) for d in range(1, 41)] * 2
    rng.shuffle(delays)
    seen: list[tuple[float, int]] = []
    for index, seconds in enumerate(delays):
        driver.delay(seconds, lambda cid, key=(seconds, index): seen.append(key))
    driver.clock += 1000.0  # every timer is due by the first tick
    driver.run()
    assert seen == sorted(seen)
    assert len(seen) == len(delays)


def test_a_heap_timer_comes_before_a_later_registered_fifo_timer_of_the_same_instant(
    driver: Any,
) -> None:
    """On a clock that reads the same instant, zero delays run in the order they were
    registered: the first (alone, in the heap) before those behind it (in the FIFO)."""
    seen: list[str] = []
    for name in "abcdef":
        driver.delay(0, lambda cid, name=name: seen.append(name))
    driver.run()
    assert seen == list("abcdef")


def test_a_zero_delay_registered_after_the_clock_went_back_runs_when_due(driver: Any) -> None:
    """A zero delay registered after the clock went back is due at that earlier reading: it
    runs in the first tick, before one registered earlier whose instant has not come."""
    seen: list[tuple[str, float]] = []

    def log(name: str) -> Any:
        return lambda cid: seen.append((name, driver.clock))

    driver.delay(1000.0, log("far"))  # keeps the heap from being empty
    driver.delay(0, log("later"))  # expires at 100
    driver.clock = 50.0
    driver.delay(0, log("earlier"))  # expires at 50, behind "later" in registration
    driver.clock = 70.0
    stopper = driver.delay(500.0, lambda cid: driver.stop())
    driver.run()
    assert seen[:2] == [("earlier", 70.0), ("later", 100.0)]
    driver.cancel(stopper)


def test_a_zero_delay_due_at_the_very_instant_of_the_tick_runs_in_it(driver: Any) -> None:
    """A timer whose expiration equals the clock's reading is due: on a clock that never
    moves, zero delays and zero repeats still run."""
    seen: list[str] = []
    driver.delay(0, lambda cid: seen.append("delay"))

    def again(cid: str) -> None:
        seen.append("repeat")
        if seen.count("repeat") == 3:
            driver.cancel(cid)

    driver.repeat(0, again)
    driver.run()
    assert seen == ["delay", "repeat", "repeat", "repeat"]


def test_zero_repeats_beside_a_pending_timer_do_not_grow_memory(driver: Any) -> None:
    """Interval-0 timers that go through the FIFO (a far timer keeps the heap from being
    empty) leave nothing behind as they run: their records and sequence numbers are let go
    as the FIFO is cut."""
    snapshots: list[tracemalloc.Snapshot] = []
    runs = 0

    def tick(cid: str) -> None:
        nonlocal runs
        runs += 1
        driver.clock += 0.001
        if runs in (500, 5_500):
            snapshots.append(tracemalloc.take_snapshot())
        if runs == 5_500:
            driver.cancel(cid)
            driver.cancel(far)

    far = driver.delay(1e9, lambda cid: None)
    driver.repeat(0, tick)
    driver.repeat(0, lambda cid: None if runs < 5_500 else driver.cancel(cid))
    grown = bytes_grown_in_run(driver, snapshots)
    assert grown < 100_000, f"{grown} bytes more after 5,000 runs"


def _one_tick(driver: Any) -> None:
    """Run one tick: a defer stops the loop, which lets that tick finish."""
    driver.defer(lambda cid: driver.stop())
    driver.run()


def test_a_timer_disabled_and_enabled_again_runs_at_its_new_expiration_only(driver: Any) -> None:
    """Enabling a timer again re-arms it from the clock: the entry it left in the heap when
    it was disabled is dead, and its old expiration passing runs nothing."""
    seen: list[float] = []
    timer = driver.delay(10.0, lambda cid: seen.append(driver.clock))  # expires at 110
    _one_tick(driver)  # the timer is in the heap now
    driver.disable(timer)
    driver.clock = 105.0
    driver.enable(timer)  # re-armed: expires at 115
    _one_tick(driver)  # active again, its old entry still in the heap
    driver.clock = 111.0
    _one_tick(driver)  # the old entry comes due: it is dead
    assert seen == []
    driver.clock = 115.0
    driver.run()
    assert seen == [115.0]


def test_a_dead_timer_at_the_heads_front_holds_back_no_due_timer(driver: Any) -> None:
    """A disabled timer's dead entry at the front of the heap is passed over: every due
    timer behind it runs in the same tick."""
    seen: list[str] = []
    first = driver.delay(1.0, lambda cid: seen.append("first"))
    driver.delay(2.0, lambda cid: seen.append("second"))
    driver.delay(3.0, lambda cid: seen.append("third"))
    _one_tick(driver)  # activates them
    driver.disable(first)
    driver.clock = 105.0
    _one_tick(driver)
    assert seen == ["second", "third"]
    driver.cancel(first)


def test_a_dead_heap_timer_holds_back_no_due_heap_timer_before_a_fifo_timer(
    driver: Any,
) -> None:
    """A zero delay in the FIFO runs after every heap timer that expired before it, also
    when a dead entry comes first among those."""
    seen: list[str] = []
    first = driver.delay(1.0, lambda cid: seen.append("first"))
    driver.delay(2.0, lambda cid: seen.append("second"))
    far = driver.delay(1000.0, lambda cid: seen.append("far"))
    _one_tick(driver)  # activates them
    driver.disable(first)
    driver.clock = 105.0
    driver.delay(0, lambda cid: seen.append("zero"))  # to the FIFO: the heap holds timers
    _one_tick(driver)
    assert seen == ["second", "zero"]
    driver.cancel(far)
    driver.cancel(first)


@pytest.mark.parametrize("make", EVERY_DRIVER)
def test_delay_keeps_no_reference_to_its_seconds_once_the_timer_ran(make: Any) -> None:
    """The float a delay was given is let go once its timer ran: a program that calls
    ``delay()`` again and again does not keep one reference per call."""
    made: Driver = make()
    try:
        seconds = float("0.0")  # an object of its own, not a shared constant
        before = sys.getrefcount(seconds)
        for _ in range(100):
            made.delay(seconds, lambda cid: None)
        made.run()
        gc.collect()
        assert sys.getrefcount(seconds) == before
    finally:
        made.close()  # type: ignore[attr-defined]
