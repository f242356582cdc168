"""A tick's order (defers, I/O, timers), and ``run()``, ``stop()`` and ``is_running()``."""

from __future__ import annotations

from typing import Any

import pytest

from iopoll.loop import Driver, UncaughtError

from .callbacks import nil
from .harness import DriverHarness


class RunRules(DriverHarness):
    """A tick's order (defers, I/O, timers), and ``run()``, ``stop()`` and ``is_running()``."""

    # -- tick ordering --------------------------------------------------------------------------

    def test_tick_ordering(self, loop: Driver) -> None:
        log: list[str] = []
        reader, writer = self.pair()
        writer.send(b"x")

        def tick1(cid: str) -> None:
            log.append("defer1")
            loop.defer(lambda c: log.append("defer2-next-tick"))

        loop.delay(0, lambda cid: log.append("timer"))
        loop.defer(tick1)

        def readable(cid: str, stream: Any) -> None:
            log.append("io")
            loop.cancel(cid)

        loop.on_readable(reader, readable)
        loop.run()
        # tick 1: defers, then I/O, then due timers; the defer made in tick 1 runs in tick 2.
        assert log == ["defer1", "io", "timer", "defer2-next-tick"]

    def test_nothing_runs_in_the_tick_it_was_enabled_in(self, loop: Driver) -> None:
        log: list[str] = []
        delay_id = loop.disable(loop.delay(0, lambda cid: log.append("delay")))

        def first(cid: str) -> None:
            loop.enable(delay_id)
            loop.defer(lambda c: log.append("defer2"))

        loop.defer(first)
        loop.run()
        assert log == ["defer2", "delay"] or log == ["delay", "defer2"]
        assert log.count("delay") == 1

    def test_disable_then_enable_is_a_noop(self, loop: Driver) -> None:
        log: list[str] = []
        deferred = loop.defer(lambda cid: log.append("d"))
        loop.disable(deferred)
        loop.enable(deferred)
        loop.run()
        assert log == ["d"]

    def test_enabling_a_defer_takes_effect_next_tick(self, loop: Driver) -> None:
        log: list[str] = []
        deferred = loop.disable(loop.defer(lambda cid: log.append("enabled-defer")))

        def first(cid: str) -> None:
            log.append("first")
            loop.enable(deferred)

        loop.defer(first)
        loop.defer(lambda cid: log.append("sibling"))
        loop.run()
        assert log == ["first", "sibling", "enabled-defer"]

    # -- run and stop ---------------------------------------------------------------------------

    def test_stop_lets_tick_finish_and_skips_later_timers(self, loop: Driver) -> None:
        log: list[str] = []

        def first(cid: str) -> None:
            loop.stop()
            log.append("a")

        loop.defer(first)
        loop.defer(lambda cid: log.append("b"))
        later = loop.delay(0.2, lambda cid: log.append("later"))
        loop.run()
        assert log == ["a", "b"]
        assert later in loop.get_identifiers()
        loop.run()  # run() after stop() resumes pending work
        assert log == ["a", "b", "later"]

    def test_run_returns_when_work_started_from_defer_is_done(self, loop: Driver) -> None:
        log: list[str] = []
        loop.defer(lambda cid: nil(loop.delay(0.01, lambda c: log.append("delay"))))
        loop.run()
        assert log == ["delay"] and not loop.is_running()

    def test_repeat_until_it_cancels_itself(self, loop: Driver) -> None:
        counter = [0]

        def fn(cid: str) -> None:
            counter[0] += 1
            if counter[0] == 5:
                loop.cancel(cid)

        loop.repeat(0.001, fn)
        loop.run()
        assert counter[0] == 5

    def test_run_while_running_is_runtime_error(self, loop: Driver) -> None:
        loop.defer(lambda cid: loop.run())
        with pytest.raises(UncaughtError) as info:
            loop.run()
        assert isinstance(info.value.__cause__, RuntimeError)
        assert "already running" in str(info.value.__cause__)

    def test_is_running(self, loop: Driver) -> None:
        seen: list[bool] = []
        loop.defer(lambda cid: seen.append(loop.is_running()))
        assert not loop.is_running()
        loop.run()
        assert seen == [True] and not loop.is_running()

    def test_a_defer_made_in_the_tick_stop_ends_waits_for_the_next_run(self, loop: Driver) -> None:
        # SPEC 9.1: defer runs next tick, and stop() lets the current tick finish.
        log: list[str] = []

        def first(cid: str) -> None:
            log.append("a")
            loop.stop()
            loop.defer(lambda c: log.append("b"))

        loop.defer(first)
        loop.run()
        assert log == ["a"]
        loop.run()
        assert log == ["a", "b"]

    def test_disable_then_enable_in_one_tick_runs_next_tick(self, loop: Driver) -> None:
        # SPEC 9.1: enable takes effect next tick, after this tick's I/O.
        _, writer = self.pair()
        log: list[str] = []

        def first(cid: str) -> None:
            log.append("a")
            loop.disable(second)
            loop.enable(second)

        def io(cid: str, stream: Any) -> None:
            log.append("io")
            loop.cancel(cid)

        loop.defer(first)
        second = loop.defer(lambda cid: log.append("b"))
        loop.on_writable(writer, io)
        loop.run()
        assert log == ["a", "io", "b"]
