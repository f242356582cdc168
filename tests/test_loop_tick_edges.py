"""Edges of the loop's tick and drain that the driver contract and the random schedule of
``test_loop_speedups.py`` do not reach, pinned on every driver.

Each case was written against a single-point mutant of the C dispatch
(``iopoll/loop/_dispatch.c``, ``_timers.c``, ``_timer_heap.c``, ``_schedule.c``,
``_registry.c``) that left every other test green (4 of 65 tried; the others were caught,
hung the suite until pytest-timeout ended it, or change nothing a user can see).  The
pure-Python drivers (``PyIoPollDriver``, ``PySelectorsDriver``), the reference, run the same
tests, as ``test_loop_drivers.py`` runs the contract on all of them; with
``IOPOLL_PURE_PYTHON=1`` every driver is pure.
"""

from __future__ import annotations

import time
import tracemalloc

import pytest

from every_loop_driver import (
    bytes_grown_in_run,
    every_driver,  # noqa: F401 (the fixture driver)
)
from iopoll.loop import Driver, UncaughtError


def test_an_error_in_the_callback_that_stops_the_loop_ends_that_run(driver: Driver) -> None:
    """A callback that calls ``stop()`` and then raises (no error handler) makes that very
    ``run()`` raise, not a later one: the loop leaves on ``stop()`` and still delivers the
    pending error on its way out."""
    ran: list[str] = []

    def fail(callback_id: str) -> None:
        driver.stop()
        raise ValueError("boom")

    driver.defer(fail)
    driver.defer(lambda callback_id: ran.append("later"))
    with pytest.raises(UncaughtError) as caught:
        driver.run()
    assert isinstance(caught.value.__cause__, ValueError)
    assert ran == []
    driver.run()  # nothing left pending: the second run only runs the other defer
    assert ran == ["later"]


def test_a_repeating_timer_does_not_grow_memory_as_it_runs(driver: Driver) -> None:
    """Each run of a repeat leaves nothing behind: the heap entry a due timer is taken from is
    let go, so that a timer that fires for as long as a program lives does not make it grow
    (a leaked entry would keep a tuple, its record and the record's floats per run)."""
    runs = 0

    def tick(callback_id: str) -> None:
        nonlocal runs
        runs += 1
        if runs in (500, 10_500):
            snapshots.append(tracemalloc.take_snapshot())
        if runs == 10_500:
            driver.cancel(callback_id)

    snapshots: list[tracemalloc.Snapshot] = []
    driver.repeat(0, tick)
    grown = bytes_grown_in_run(driver, snapshots)
    # 10,000 leaked entries would be over a megabyte; the tracing driver keeps no history.
    assert grown < 200_000, f"{grown} bytes more after 10,000 runs"


def test_waiting_for_a_timer_with_no_stream_sleeps(driver: Driver) -> None:
    """With no stream watched, the wait for the next timer is a sleep, not a spin: the
    driver takes a small part of the wait in CPU time."""
    fired: list[float] = []
    started = time.monotonic()  # before delay(): the timer counts from there
    driver.delay(0.3, lambda callback_id: fired.append(time.monotonic()))
    cpu = time.process_time()
    driver.run()
    used = time.process_time() - cpu
    assert fired and fired[0] - started >= 0.29
    assert used < 0.1, f"{used:.3f} s of CPU time for a 0.3 s wait"


def test_a_stop_made_while_the_main_greenlet_was_resumed_ends_the_loop_at_once(
    driver: Driver,
) -> None:
    """The main greenlet, resumed, calls ``stop()`` and suspends again: the loop, handed
    back, checks ``stop()`` before anything else and ends without another tick, so the
    callback deferred meanwhile does not run and the suspension is left unresumed."""
    pytest.importorskip("greenlet")
    suspension = driver.get_suspension()
    ran: list[str] = []
    driver.defer(lambda callback_id: suspension.resume(1))
    assert suspension.suspend() == 1
    driver.stop()
    driver.defer(lambda callback_id: ran.append("deferred"))
    driver.delay(0.2, lambda callback_id: suspension.resume(2))
    with pytest.raises(RuntimeError, match="without resuming the current suspension"):
        suspension.suspend()
    assert ran == []
