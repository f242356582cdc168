"""``queue()``: microtasks run after each callback, and their exceptions."""

from __future__ import annotations

import pytest

from iopoll.loop import Driver, UncaughtError

from .callbacks import raising
from .harness import DriverHarness


class MicrotaskRules(DriverHarness):
    """``queue()``: microtasks run after each callback, and their exceptions."""

    def test_microtasks_run_after_each_callback(self, loop: Driver) -> None:
        log: list[int] = []

        def first(cid: str) -> None:
            log.append(1)
            loop.queue(log.append, 2)

            def third() -> None:
                log.append(3)
                loop.queue(log.append, 4)

            loop.queue(third)

        loop.defer(first)
        loop.defer(lambda cid: log.append(5))
        loop.queue(log.append, 0)  # before run(): first thing run() does
        loop.run()
        assert log == [0, 1, 2, 3, 4, 5]

    def test_throwing_microtask_does_not_block_the_next(self, loop: Driver) -> None:
        caught: list[Exception] = []
        loop.set_error_handler(caught.append)
        log: list[str] = []
        error = ValueError("micro")

        def bad() -> None:
            raise error

        def queue_both(cid: str) -> None:
            loop.queue(bad)
            loop.queue(log.append, "next")

        loop.defer(queue_both)
        loop.run()
        assert caught == [error] and log == ["next"]

    def test_microtask_exception_without_handler_ends_run(self, loop: Driver) -> None:
        error = ValueError("micro")

        def bad() -> None:
            raise error

        loop.queue(bad)
        loop.defer(lambda cid: None)
        with pytest.raises(UncaughtError) as info:
            loop.run()
        assert info.value.__cause__ is error

    def test_microtasks_behind_a_raising_one_run_before_run_ends(self, loop: Driver) -> None:
        # Nothing else is scheduled: the error ends run(), but not before the queue is empty,
        # those the microtasks behind it queue included (SPEC 9.1).
        error = ValueError("micro")
        log: list[str] = []

        def behind() -> None:
            log.append("behind")
            loop.queue(log.append, "queued by it")

        loop.queue(raising(error))
        loop.queue(behind)
        with pytest.raises(UncaughtError) as info:
            loop.run()
        assert info.value.__cause__ is error
        assert log == ["behind", "queued by it"]

    def test_first_of_two_raising_microtasks_ends_run(self, loop: Driver) -> None:
        first, second = ValueError("first"), ValueError("second")
        log: list[str] = []

        def from_callback(cid: str) -> None:
            loop.queue(raising(first))
            loop.queue(raising(second))
            loop.queue(log.append, "last")

        loop.defer(from_callback)
        with pytest.raises(UncaughtError) as info:
            loop.run()
        assert info.value.__cause__ is first
        assert log == ["last"]
