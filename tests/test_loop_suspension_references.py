"""References, errors and close() of the suspension round trip, pinned on every driver.

Suspensions hold greenlets, and greenlets hold frames: a reference the round trip takes and
never gives back keeps a greenlet, a loop greenlet or the whole driver alive for good (the
collector does not look into a suspended greenlet's frames), and it grows with every
suspension.  These tests run many suspensions and then check, through weak references and
reference counts, that what they touched is freed or back where it was.  They also pin that
a main suspension that raised a callback's error can be used again, and what ``close()``
does with the values and the errors of callbacks it ends.  The C round trip
(``iopoll/loop/_suspend.c``) and the pure-Python reference (``_suspension.py``) run the same
tests; with ``IOPOLL_PURE_PYTHON=1`` every driver is pure.
"""

from __future__ import annotations

import gc
import sys
import weakref
from collections.abc import Callable
from typing import Any

import pytest

from every_loop_driver import EVERY_DRIVER
from iopoll.loop import Driver, Suspension, UncaughtError

greenlet = pytest.importorskip("greenlet")

ROUNDS = 60


class Value:
    """A resumed value that a weak reference can follow."""


class Thrown(Exception):
    """A thrown error that a weak reference can follow (a built-in one cannot)."""


class Stop(BaseException):
    """A ``BaseException`` raised from a finally block, which ``close()`` raises."""


def _discard(*results: object) -> None:
    """Callbacks must return None: swallow what a greenlet's switch returned."""


def _close(driver: Driver) -> None:
    driver.close()  # type: ignore[attr-defined]


def _resumer(suspension: Suspension, value: object) -> Callable[[str], None]:
    """A callback that resumes ``suspension`` with ``value``."""

    def resume(callback_id: str) -> None:
        suspension.resume(value)

    return resume


@pytest.mark.parametrize("make", EVERY_DRIVER)
def test_greenlets_suspending_in_turn_are_freed_with_the_driver(
    make: Callable[[], Driver],
) -> None:
    """Two greenlets a callback started, suspending and resumed in turn many times and
    asking for their suspension each time, leave nothing behind: once they have ended and
    the driver is closed and dropped, the driver, both greenlets and every loop greenlet
    they were switched back from are freed."""
    refs: list[weakref.ref[Any]] = []
    results: list[object] = []

    def run_and_close() -> None:
        driver = make()

        def work(tag: str) -> str:
            for n in range(ROUNDS):
                suspension = driver.get_suspension()
                refs.append(weakref.ref(greenlet.getcurrent().parent))
                driver.defer(_resumer(suspension, n))
                results.append((tag, suspension.suspend()))
            return tag

        def start(callback_id: str) -> None:
            for tag in ("a", "b"):
                made = greenlet.greenlet(work)
                refs.append(weakref.ref(made))
                _discard(made.switch(tag))

        driver.defer(start)
        driver.run()
        refs.append(weakref.ref(driver))
        _close(driver)

    run_and_close()
    gc.collect()
    assert results == [(tag, n) for n in range(ROUNDS) for tag in ("a", "b")]
    assert [ref for ref in refs if ref() is not None] == []


@pytest.mark.parametrize("make", EVERY_DRIVER)
def test_a_greenlet_that_ran_the_loop_is_freed_after_its_callbacks_suspended(
    make: Callable[[], Driver],
) -> None:
    """``run()`` called from a greenlet, whose callbacks suspend in the loop greenlet (each
    one hands the loop over to a successor started by that greenlet) and are resumed,
    keeps no reference to it: the greenlet is freed once it has ended and it and the
    closed driver are dropped."""
    log: list[object] = []

    def run_in_a_greenlet() -> weakref.ref[Any]:
        driver = make()

        def suspending(callback_id: str) -> None:
            suspension = driver.get_suspension()
            driver.defer(lambda c: suspension.resume(callback_id))
            log.append(suspension.suspend() == callback_id)

        for _ in range(ROUNDS):
            driver.defer(suspending)
        runner = greenlet.greenlet(driver.run)
        runner.switch()
        assert runner.dead
        _close(driver)  # the dead loop greenlet it kept refers to its parent, that greenlet
        return weakref.ref(runner)

    gone = run_in_a_greenlet()
    gc.collect()
    assert log == [True] * ROUNDS
    assert gone() is None


@pytest.mark.parametrize("make", EVERY_DRIVER)
def test_resumes_leave_the_reference_counts_of_the_loop_as_they_were(
    make: Callable[[], Driver],
) -> None:
    """Many ``resume()`` calls, each queueing the switch back of a callback, and many
    ``get_suspension()`` calls from the same greenlet, take no lasting reference: the
    microtask queue's ``append``, the suspension and the weak reference to its greenlet
    count the same references after as before."""
    driver = make()
    counts: list[tuple[int, int, int]] = []

    def suspending(callback_id: str) -> None:
        suspension = driver.get_suspension()
        queue = suspension._runner.queue
        owner = suspension._greenlet

        def count() -> tuple[int, int, int]:
            return sys.getrefcount(queue), sys.getrefcount(suspension), sys.getrefcount(owner)

        for n in range(ROUNDS):
            assert driver.get_suspension() is suspension
            driver.defer(_resumer(suspension, n))
            assert suspension.suspend() == n
            if n in (0, ROUNDS - 1):  # after the first round trip, and after the last
                counts.append(count())

    driver.defer(suspending)
    driver.run()
    assert len(counts) == 2 and counts[0] == counts[1]
    _close(driver)


@pytest.mark.parametrize("make", EVERY_DRIVER)
def test_a_main_suspension_ended_by_a_callbacks_error_suspends_again(
    make: Callable[[], Driver],
) -> None:
    """A main ``suspend()`` that raised a callback's ``UncaughtError`` no longer waits:
    the same suspension suspends again (it is not refused as still suspended) and returns
    the next ``resume()`` value, and a ``resume()`` before that is refused."""
    driver = make()
    main = driver.get_suspension()
    driver.defer(lambda callback_id: _discard(1 / 0))
    with pytest.raises(UncaughtError):
        main.suspend()
    assert repr(main) == "<Suspension main idle>"
    with pytest.raises(RuntimeError, match="Must call suspend"):
        main.resume("early")
    assert driver.get_suspension() is main
    driver.defer(lambda callback_id: main.resume("again"))
    assert main.suspend() == "again"
    _close(driver)


@pytest.mark.parametrize("make", EVERY_DRIVER)
def test_close_raises_the_first_base_exception_of_the_callbacks_it_ends(
    make: Callable[[], Driver],
) -> None:
    """Two suspended callbacks whose finally blocks raise a ``BaseException`` are both
    ended by ``close()``, which then raises the first of the two, in the order they
    suspended."""
    driver = make()
    unwound: list[str] = []

    def lost(name: str) -> Callable[[str], None]:
        def callback(callback_id: str) -> None:
            try:
                driver.get_suspension().suspend()
            finally:
                unwound.append(name)
                raise Stop(name)

        return callback

    driver.defer(lost("first"))
    driver.defer(lost("second"))
    driver.run()
    with pytest.raises(Stop) as info:
        _close(driver)
    assert sorted(unwound) == ["first", "second"]
    assert str(info.value) == unwound[0]


@pytest.mark.parametrize("make", EVERY_DRIVER)
@pytest.mark.parametrize("how", ["resume", "throw"])
def test_close_lets_go_of_what_a_switch_back_that_never_ran_carried(
    make: Callable[[], Driver], how: str
) -> None:
    """A callback resumed (or thrown into) just before an error ended ``run()`` never gets
    its value or error: ``close()`` ends it, and its suspension, although still referred
    to, no longer holds that value or error."""
    driver = make()
    held: list[Any] = []
    log: list[str] = []
    carried: list[Any] = [Value() if how == "resume" else Thrown("too late")]
    gone = weakref.ref(carried[0])

    def waiting(callback_id: str) -> None:
        held.append(driver.get_suspension())
        try:
            held[0].suspend()
            log.append("switched back in")
        finally:
            log.append("finally")

    def failing(callback_id: str) -> None:
        getattr(held[0], how)(carried.pop())
        raise ValueError("ends run() before the switch back")

    driver.defer(waiting)
    driver.defer(failing)
    with pytest.raises(UncaughtError):
        driver.run()
    _close(driver)
    gc.collect()
    assert log == ["finally"]
    assert repr(held[0]) == "<Suspension greenlet dead>"
    assert gone() is None
