"""``delay()`` and ``repeat()``: when timers fire, their order, and the seconds they take."""

from __future__ import annotations

import itertools
import math
import sys
import time
from collections.abc import Callable

import pytest

from iopoll.loop import Driver

from ..process import alarm
from .callbacks import appending
from .harness import DriverHarness


class TimerRules(DriverHarness):
    """``delay()`` and ``repeat()``: when timers fire, their order, and the seconds they take."""

    def test_delay_counts_from_creation(self, loop: Driver) -> None:
        fired: list[float] = []
        start = time.monotonic()
        loop.delay(0.1, lambda cid: fired.append(time.monotonic()))
        time.sleep(0.06)  # time before run() counts
        loop.run()
        assert 0.095 <= fired[0] - start < 0.2

    def test_delay_created_after_blocking_counts_from_creation(self, loop: Driver) -> None:
        fired: list[float] = []
        marks: list[float] = []

        def block(cid: str) -> None:
            time.sleep(0.05)
            marks.append(time.monotonic())
            loop.delay(0.05, lambda c: fired.append(time.monotonic()))

        loop.defer(block)
        loop.run()
        assert 0.045 <= fired[0] - marks[0] < 0.15

    def test_expired_timer_does_not_block(self, loop: Driver) -> None:
        loop.delay(0.001, lambda cid: None)
        time.sleep(0.01)
        started = time.monotonic()
        loop.run()
        assert time.monotonic() - started < 0.05

    def test_repeat_zero_does_not_starve_other_timers(self, loop: Driver) -> None:
        counts = {"repeat": 0, "repeat after the delay": 0}
        delay_fired: list[float] = []
        start = time.monotonic()

        def repeat(cid: str) -> None:
            counts["repeat"] += 1
            if delay_fired:
                counts["repeat after the delay"] += 1
                loop.cancel(cid)
            elif time.monotonic() - start > 5:
                loop.cancel(cid)  # starved: give up, the assertions below say so

        loop.repeat(0, repeat)
        loop.delay(0.02, lambda cid: delay_fired.append(time.monotonic()))
        loop.run()
        # The delay fired while repeat(0) kept the loop busy, and the repeat went on
        # running around it. No count of runs before the delay is asserted: a stall of
        # 20 ms before the first tick (a loaded machine) makes both due in one tick.
        assert delay_fired, "the delay never fired while repeat(0) ran"
        assert delay_fired[0] - start < 5
        assert counts["repeat after the delay"] == 1
        assert counts["repeat"] > 1

    def test_two_repeat_zero_timers_alternate(self, loop: Driver) -> None:
        order: list[str] = []

        def make(name: str) -> Callable[[str], None]:
            def fn(cid: str) -> None:
                order.append(name)
                if len(order) >= 6:
                    loop.stop()

            return fn

        loop.repeat(0, make("a"))
        loop.repeat(0, make("b"))
        loop.run()
        assert order[:6] == ["a", "b"] * 3

    def test_repeat_runs_at_most_once_per_tick(self, loop: Driver) -> None:
        ticks: list[str] = []
        loop.repeat(0, lambda cid: ticks.append("repeat"))
        loop.delay(0, lambda cid: loop.stop())
        loop.run()
        # tick 1: (nothing for the timer: activated), tick 2 at most once, then stop.
        assert ticks.count("repeat") <= 2

    def test_repeat_rearms_before_its_callback_runs(self, loop: Driver) -> None:
        starts: list[float] = []

        def slow(cid: str) -> None:
            starts.append(time.monotonic())
            time.sleep(0.04)
            if len(starts) == 3:
                loop.cancel(cid)

        loop.repeat(0.06, slow)
        loop.run()
        gaps = [later - earlier for earlier, later in itertools.pairwise(starts)]
        # Re-armed from the clock before the call: 0.06 apart, not 0.06 + 0.04.
        assert all(0.055 <= gap < 0.095 for gap in gaps), gaps

    def test_enable_rearms_a_timer_from_now(self, loop: Driver) -> None:
        fired: list[float] = []
        delay_id = loop.disable(loop.delay(0.05, lambda cid: fired.append(time.monotonic())))
        time.sleep(0.06)  # past its first expiration while disabled
        enabled_at = time.monotonic()
        loop.enable(delay_id)
        loop.run()
        assert fired[0] - enabled_at >= 0.045

    @pytest.mark.parametrize("seconds", [math.inf, 1e300, sys.maxsize, 2**64, 10**400])
    def test_huge_delay_never_fires_nor_overflows(self, loop: Driver, seconds: float) -> None:
        fired: list[str] = []
        delay_id = loop.delay(seconds, fired.append)
        repeat_id = loop.repeat(seconds, fired.append)
        loop.delay(0.01, lambda cid: loop.stop())
        loop.run()
        assert fired == []
        assert loop.is_enabled(delay_id) and loop.is_enabled(repeat_id)

    @pytest.mark.parametrize("bad", [-1, -0.001, math.nan, -math.inf])
    def test_negative_or_nan_delay_is_value_error(self, loop: Driver, bad: float) -> None:
        with pytest.raises(ValueError, match="seconds"):
            loop.delay(bad, lambda cid: None)
        with pytest.raises(ValueError, match="interval"):
            loop.repeat(bad, lambda cid: None)
        assert loop.get_identifiers() == []

    def test_delay_of_wrong_type_is_type_error(self, loop: Driver) -> None:
        with pytest.raises(TypeError, match="seconds"):
            loop.delay("1", lambda cid: None)  # type: ignore[arg-type]

    def test_timers_fire_in_expiration_order(self, loop: Driver) -> None:
        order: list[float] = []
        started = time.monotonic()
        for seconds in (0.15, 0.05, 0.1, 0.0):
            loop.delay(seconds, appending(order, seconds))
        # Expirations count from each delay() call: registering took less than the 50 ms
        # between two of them, or the order asked for is not the order of the expirations.
        if time.monotonic() - started >= 0.05:
            pytest.skip("registering four timers took 50 ms or more (a loaded machine)")
        loop.run()
        assert order == [0.0, 0.05, 0.1, 0.15]

    def test_a_stalled_repeat_does_not_catch_up(self, loop: Driver) -> None:
        # SPEC 9.1: repeat re-arms from the clock before it runs, so a tick that came late
        # is not followed by calls made up for the time lost.
        starts: list[float] = []

        def repeat(cid: str) -> None:
            starts.append(time.monotonic())
            if len(starts) == 3:
                loop.cancel(cid)

        loop.repeat(0.05, repeat)
        loop.defer(lambda cid: time.sleep(0.3))  # the loop stalls past several periods
        loop.run()
        gaps = [later - earlier for earlier, later in itertools.pairwise(starts)]
        assert all(gap >= 0.025 for gap in gaps), gaps  # one that caught up: about 0

    def test_an_infinite_delay_alone_sleeps_without_overflow(self, loop: Driver) -> None:
        # With nothing but delay(math.inf), run() sleeps: here until a signal handler
        # raises out of it (PEP 475).
        class Awoken(Exception):
            pass

        def wake(signum: int, frame: object) -> None:
            raise Awoken

        fired: list[str] = []
        loop.delay(math.inf, fired.append)
        with alarm(wake, 0.2), pytest.raises(Awoken):
            loop.run()
        assert fired == []
