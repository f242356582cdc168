"""Edges of the loop's ready-stream queueing and of its callback records that the driver
contract and the random schedule of ``test_loop_speedups.py`` do not reach, pinned on every
driver.

Each case was written against a single-point mutant of the C core
(``iopoll/loop/_iopoll_ready.c``, ``_records.c``; 3 of the 67 run there and in
``_speedups.c``), or of the Context's C wait that the loop calls (``wait_each()``), that
left every other test green; the mutant is named in the test's docstring.  The
pure-Python drivers (``PyIoPollDriver``, ``PySelectorsDriver``), the reference, run the
same tests, as ``test_loop_drivers.py`` runs the contract on all of them; with
``IOPOLL_PURE_PYTHON=1`` every driver is pure.
"""

from __future__ import annotations

import gc
import socket
import weakref
from collections.abc import Callable
from typing import Any

import pytest

from every_loop_driver import EVERY_DRIVER
from iopoll.loop import Driver
from iopoll.loop._callbacks import TimerCallback


@pytest.fixture(params=EVERY_DRIVER)
def make_driver(request: pytest.FixtureRequest) -> Callable[[], Driver]:
    """Each driver's factory in turn, for the tests that drop the driver themselves."""
    make: Callable[[], Driver] = request.param
    return make


class Held:
    """Something a callback holds, to see whether it was freed."""


def test_a_stream_callback_that_ran_goes_with_its_driver(
    make_driver: Callable[[], Driver], pairs: Callable[[], tuple[socket.socket, socket.socket]]
) -> None:
    """A readable callback that ran and was never cancelled is freed, with what its
    function holds, once its driver is dropped: queueing a ready stream's callbacks takes
    nothing for good (mutant: the reference to the stream's callback map taken while its
    records are queued is never given back)."""
    near, far = pairs()

    def arm() -> weakref.ref[Held]:
        driver = make_driver()
        held = Held()

        def read(callback_id: str, stream: Any, held: Held = held) -> None:
            stream.recv(1)
            driver.stop()

        driver.on_readable(near, read)
        far.send(b"x")
        driver.run()
        driver.close()  # type: ignore[attr-defined]
        return weakref.ref(held)

    gone = arm()
    gc.collect()
    assert gone() is None


@pytest.mark.parametrize("kind", ["defer", "delay(0)", "repeat(0)"])
def test_a_disabled_callback_holding_its_driver_is_collected(
    make_driver: Callable[[], Driver], kind: str
) -> None:
    """A callback disabled by its id and left so across a tick (it then waits only in the
    id map) whose function refers to its driver is collected with the driver: the cycle
    through it is found by a full collection (mutant: the C records in the id map are not
    made visible to the collector before a full collection)."""

    def arm() -> weakref.ref[Held]:
        driver = make_driver()
        held = Held()

        def fn(callback_id: str, held: Held = held) -> None:
            driver.stop()

        if kind == "defer":
            callback_id = driver.defer(fn)
        elif kind == "delay(0)":
            callback_id = driver.delay(0, fn)
        else:
            callback_id = driver.repeat(0, fn)
        driver.disable(callback_id)
        driver.defer(lambda other_id: driver.stop())
        driver.run()  # one tick: the disabled callback is left in the id map alone
        assert driver.is_enabled(callback_id) is False
        return weakref.ref(held)

    gone = arm()
    gc.collect()
    assert gone() is None


def test_the_armed_timers_of_dropped_drivers_are_freed(make_driver: Callable[[], Driver]) -> None:
    """A driver closed and dropped with a delay and a repeat still armed leaves no timer
    record behind: the cycle of each timer and its heap entry is broken by the collector,
    so that a program that makes drivers for a while does not grow by their timers
    (mutant: a timer record's ``tp_clear`` leaves its heap entry)."""

    def timers() -> int:
        gc.collect()
        return sum(isinstance(obj, TimerCallback) for obj in gc.get_objects())

    def arm() -> None:
        driver = make_driver()
        driver.delay(3600, lambda callback_id: None)
        driver.repeat(3600, lambda callback_id: None)
        driver.defer(lambda callback_id: driver.stop())
        driver.run()  # activated: each timer is in the heap, in a cycle with its entry
        driver.close()  # type: ignore[attr-defined]

    before = timers()
    for _ in range(50):
        arm()
    assert timers() - before == 0


def test_a_stream_serviced_over_many_ticks_is_freed_after(
    make_driver: Callable[[], Driver],
) -> None:
    """A stream left readable for many ticks is freed once its callback is cancelled, the
    driver closed and the stream dropped: the waits that reported it on every tick keep
    no reference to its watcher, nor through it to the stream (mutant: the loop's C wait,
    ``wait_each()``, kept each watcher it handed to the tick)."""
    # Not the ``pairs`` fixture: it keeps its sockets, and this one must be freed.
    near, far = socket.socketpair()

    def service(stream: socket.socket) -> int:
        driver = make_driver()
        ticks = [0]

        def read(callback_id: str, stream: Any) -> None:
            ticks[0] += 1  # the byte stays unread: ready again on the next tick
            if ticks[0] == 50:
                driver.cancel(callback_id)

        driver.on_readable(stream, read)
        driver.run()  # ends once the callback is cancelled: nothing else is referenced
        driver.close()  # type: ignore[attr-defined]
        return ticks[0]

    try:
        freed = weakref.ref(near)
        far.send(b"x")
        assert service(near) == 50
        near.close()
        del near
        gc.collect()
        assert freed() is None
    finally:
        far.close()
