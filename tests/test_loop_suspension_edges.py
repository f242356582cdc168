"""Edges of the suspension round trip that the other suspension tests do not reach, pinned on
every driver.

Each case was written against a single-point mutant of the C suspensions
(``iopoll/loop/_suspend.c``: ``suspend()``, ``resume()``, the switch back, the hand-over)
that left every other test green.  The pure-Python drivers, whose ``Suspension`` and
``LoopRunner`` methods are the reference, run the same tests; with ``IOPOLL_PURE_PYTHON=1``
every driver is pure.
"""

from __future__ import annotations

import gc
import threading
import weakref
from collections.abc import Callable
from typing import Any

import pytest

from every_loop_driver import every_driver  # noqa: F401 (the fixture driver)
from iopoll.loop import Driver, UncaughtError

greenlet = pytest.importorskip("greenlet")

DEAD = "Suspension is dead: the event loop ended without resuming it"


class Thrown(Exception):
    """An exception that a weak reference can follow (a built-in one cannot)."""


def test_a_suspended_callback_waits_through_every_greenlet_it_made_ending(
    driver: Driver,
) -> None:
    """A callback that made two greenlets and suspended is switched into by each one's end
    (greenlet sends a greenlet's end to the greenlet that made it): both switches are handed
    on to the callbacks that started them, and its ``suspend()`` returns only the value that
    ``resume()`` gave, not on the second stray switch."""
    log: list[object] = []
    made: list[Any] = []

    def maker(callback_id: str) -> None:
        made.extend(greenlet.greenlet(lambda n=n: f"result {n}") for n in (1, 2))
        suspension = driver.get_suspension()
        driver.delay(0.03, lambda c: suspension.resume("maker resumed"))
        log.append(("maker: suspend() returned", suspension.suspend()))

    def starter(index: int) -> Callable[[str], None]:
        def start(callback_id: str) -> None:
            log.append(("switch() returned", made[index].switch()))

        return start

    driver.defer(maker)
    driver.defer(starter(0))
    driver.defer(starter(1))
    driver.delay(0.01, lambda callback_id: log.append("a later callback"))
    driver.run()
    assert log == [
        ("switch() returned", "result 1"),
        ("switch() returned", "result 2"),
        "a later callback",
        ("maker: suspend() returned", "maker resumed"),
    ]
    assert all(glet.dead for glet in made)


def test_a_thrown_error_is_let_go_once_suspend_has_raised_it(driver: Driver) -> None:
    """``suspend()`` hands the ``throw()`` error on and keeps no reference to it: once the
    callback has let it go, the error (and, through its traceback, the frames it holds) is
    freed, although the suspension itself outlives the loop."""
    refs: list[weakref.ref[Thrown]] = []
    caught: list[str] = []

    def fn(callback_id: str) -> None:
        suspension = driver.get_suspension()
        held = [Thrown("thrown")]
        refs.append(weakref.ref(held[0]))
        driver.defer(lambda c: suspension.throw(held.pop()))
        try:
            suspension.suspend()
        except Thrown as exc:
            caught.append(str(exc))

    driver.defer(fn)
    driver.run()
    gc.collect()
    assert caught == ["thrown"]
    assert refs[0]() is None


def test_a_main_resume_after_a_throw_that_never_arrived_returns_its_value(
    driver: Driver,
) -> None:
    """A callback that throws into the main suspension and then fails ends the main
    ``suspend()`` with its ``UncaughtError``, and the throw is never delivered; a later
    ``resume(value)`` of the same suspension makes the next ``suspend()`` return ``value``,
    not raise the stale error."""
    main = driver.get_suspension()

    def fail(callback_id: str) -> None:
        main.throw(Thrown("never delivered"))
        raise ValueError("fails after the throw")

    driver.defer(fail)
    with pytest.raises(UncaughtError) as info:
        main.suspend()
    assert isinstance(info.value.__cause__, ValueError)
    assert driver.get_suspension() is main
    driver.defer(lambda callback_id: main.resume("resumed"))
    assert main.suspend() == "resumed"


def test_a_resume_of_a_dead_suspension_leaves_it_dead(driver: Driver) -> None:
    """``resume()`` of a dead suspension (the loop ended without resuming it) is ignored:
    it does not mark the suspension as waiting, so its next ``suspend()`` still says it is
    dead rather than that it waits for a ``resume()``."""
    main = driver.get_suspension()
    driver.defer(lambda callback_id: None)
    with pytest.raises(RuntimeError, match="terminated without resuming"):
        main.suspend()
    main.resume("ignored")
    with pytest.raises(RuntimeError) as info:
        main.suspend()
    assert str(info.value) == DEAD
    assert repr(main) == "<Suspension main dead>"


def test_close_leaves_a_greenlet_that_was_resumed_and_waits_elsewhere(driver: Driver) -> None:
    """A greenlet whose suspension was resumed and switched back into, and that then waits in
    a plain greenlet switch (not in a suspension of this driver), is not ended by ``close()``:
    only the greenlets waiting in one of its suspensions, or resumed with the switch back not
    yet run, are; its suspension is dead all the same."""
    log: list[object] = []
    held: list[Any] = []

    def work() -> None:
        suspension = driver.get_suspension()
        held.append(suspension)
        driver.defer(lambda c: suspension.resume())
        suspension.suspend()
        log.append("resumed")
        try:
            greenlet.getcurrent().parent.switch("paused")  # waits outside the driver
            log.append("switched back in")
        finally:
            log.append("finally")

    made = greenlet.greenlet(work)
    driver.defer(lambda callback_id: log.append(("switch() returned", made.switch())))
    driver.run()
    assert log == [("switch() returned", None), "resumed"]
    driver.close()  # type: ignore[attr-defined]
    assert log == [("switch() returned", None), "resumed"]
    assert not made.dead
    assert repr(held[0]) == "<Suspension greenlet dead>"
    made.switch()  # its own code ends it
    assert log[2:] == ["switched back in", "finally"]


def test_a_resumed_greenlet_killed_and_freed_before_its_switch_back_is_skipped(
    driver: Driver,
) -> None:
    """A greenlet resumed and then ended with ``throw()`` before its switch back ran, and
    freed, is skipped by that switch back (its weak reference is gone): the microtask does
    nothing and the loop goes on without an error."""
    log: list[object] = []
    held: list[Any] = []

    def work() -> None:
        suspension = driver.get_suspension()
        held.append((greenlet.getcurrent(), suspension))
        try:
            suspension.suspend()
            log.append("switched back in")
        finally:
            log.append("finally")

    def resume_and_kill(callback_id: str) -> None:
        glet, suspension = held.pop()
        suspension.resume("too late")
        glet.throw()  # GreenletExit: its suspend() raises, it ends quietly
        log.append(("dead", glet.dead))
        del glet, suspension

    driver.defer(lambda callback_id: _discard(greenlet.greenlet(work).switch()))
    driver.defer(resume_and_kill)
    driver.delay(0.01, lambda callback_id: log.append("a later callback"))
    driver.run()
    assert log == ["finally", ("dead", True), "a later callback"]


def test_a_callback_resumed_in_a_run_entered_from_another_greenlet_goes_back_there(
    driver: Driver,
) -> None:
    """A callback left suspended when one ``run()`` ended, and resumed in a later ``run()``
    called from another greenlet, finishes in that run: its end goes back to the loop that
    resumed it, not to the greenlet that entered the first run (here the main one, which
    would take it for the other greenlet's result)."""
    log: list[object] = []
    held: list[Any] = []

    def waiting(callback_id: str) -> None:
        held.append(driver.get_suspension())
        log.append(("waiting: suspend() returned", held[0].suspend()))

    driver.defer(waiting)
    driver.run()  # nothing left to run: returns with the callback still suspended
    assert log == []

    def second_run() -> str:
        driver.defer(lambda callback_id: held[0].resume("late"))
        driver.delay(0.01, lambda callback_id: log.append("a later callback"))
        driver.run()
        log.append("second run() returned")
        return "second run's greenlet ended"

    assert greenlet.greenlet(second_run).switch() == "second run's greenlet ended"
    assert log == [
        ("waiting: suspend() returned", "late"),
        "a later callback",
        "second run() returned",
    ]


def test_resuming_a_greenlet_of_another_thread_fails_on_its_parent(driver: Driver) -> None:
    """The switch back of a suspension whose greenlet belongs to another thread fails where
    it makes the loop's greenlet that greenlet's parent (``ValueError``: greenlet refuses a
    parent on a different thread), and never switches into it: ``run()`` raises that error
    as an ``UncaughtError``, and the other thread's greenlet is still suspended."""
    log: list[object] = []
    held: list[Any] = []
    ready, done = threading.Event(), threading.Event()

    def other_thread() -> None:
        def work() -> None:
            held.append(driver.get_suspension())
            log.append(("suspend() returned", held[0].suspend()))

        log.append(("switch() returned", greenlet.greenlet(work).switch()))
        ready.set()
        done.wait(10)

    thread = threading.Thread(target=other_thread)
    thread.start()
    try:
        assert ready.wait(10)
        driver.defer(lambda callback_id: held[0].resume("from another thread"))
        with pytest.raises(UncaughtError) as info:
            driver.run()
    finally:
        done.set()
        thread.join()
    assert type(info.value.__cause__) is ValueError
    assert "different thread" in str(info.value.__cause__)
    assert log == [("switch() returned", None)]


def _discard(*results: object) -> None:
    """Callbacks must return None: swallow what a greenlet's switch returned."""


def test_a_callback_that_stops_the_loop_and_then_suspends_ends_that_run(
    driver: Driver,
) -> None:
    """``stop()`` followed by a suspension in the same callback ends that ``run()``: the
    successor greenlet that takes the loop over goes on with the loop that was stopped, it
    does not start a new one that would forget the ``stop()``.  The next ``run()`` resumes
    the callback."""
    log: list[object] = []

    def stopping(callback_id: str) -> None:
        driver.stop()
        suspension = driver.get_suspension()
        driver.delay(0.01, lambda c: suspension.resume("resumed"))
        log.append(("suspend() returned", suspension.suspend()))

    driver.defer(stopping)
    driver.delay(0.03, lambda callback_id: log.append("a later callback"))
    driver.run()
    assert log == []
    driver.run()
    assert log == [("suspend() returned", "resumed"), "a later callback"]
