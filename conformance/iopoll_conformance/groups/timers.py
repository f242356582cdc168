"""TimerHandle: deadlines on the monotonic clock, one-off and periodic timers (SPEC 10).

Also ``require()``, which every SPEC 10 group uses to skip where a name is missing.

Timing is loose on purpose (the machine may be busy): a timer must never fire early, so
lower bounds are the timeout less the clock's slack; it must fire soon, so upper bounds are
seconds.  Every wait is in the form the polyfill takes (whole seconds plus microseconds),
since timers run on every backend, the polyfill included.
"""

from __future__ import annotations

import math
import re
import time
from datetime import timedelta
from types import ModuleType
from typing import Any

import pytest

from ..process import alarm
from ..streams import closing_all
from ..support import poll_now, reported, socketpair, timed

# A timer may be reported this much before its deadline (clock granularity), never more.
_EARLY = 0.005
# ... and must be reported within this much of its deadline, however busy the machine is.
_LATE = 5.0
# SPEC 10's message for a timer watched with other events.
_TIMER_ONLY = re.escape("events must be Event.TIMER for a TimerHandle")


def require(api: ModuleType, name: str) -> Any:
    """``api.<name>``, a SPEC 10 class; the calling case is skipped where it is missing."""
    found = getattr(api, name, None)
    if found is None:
        pytest.skip(f"this implementation has no {name} (SPEC 10)")
    return found


def _due_wait(ctx: Any, watcher: Any, since: float, timeout: float) -> None:
    """``wait(None)`` returns ``[watcher]``, not before ``timeout`` after ``since`` (a
    monotonic time taken before the timer was armed), and not long after."""
    result = ctx.wait(None)
    elapsed = time.monotonic() - since
    assert result == [watcher]
    assert timeout - _EARLY <= elapsed < timeout + _LATE, elapsed


class TimerRules:
    """TimerHandle (SPEC 10): validation, deadlines, one-off and periodic timers, ordering."""

    # -- the handle -------------------------------------------------------------------------

    def test_poll_timer_handle_basic_properties(self, api: ModuleType) -> None:
        """B.76, php-src poll_timer_handle_basic.phpt, SPEC 10: ``timeout`` (a timedelta, from
        int, float or timedelta seconds) and ``periodic`` (false unless asked)."""
        timer_handle = require(api, "TimerHandle")
        forms = [
            (2, timedelta(seconds=2)),
            (0.25, timedelta(milliseconds=250)),
            (timedelta(milliseconds=30), timedelta(milliseconds=30)),
            (0, timedelta(0)),
            (365 * 86400, timedelta(days=365)),  # long, but it can be slept
        ]
        for given, expected in forms:
            handle = timer_handle(given)
            assert isinstance(handle.timeout, timedelta), given
            assert handle.timeout == expected, given
            assert not handle.periodic
        assert timer_handle(1, periodic=True).periodic
        assert timer_handle(timedelta(seconds=0.5), True).periodic
        assert timer_handle(0.5, True).timeout == timedelta(milliseconds=500)

    def test_poll_timer_handle_basic_invalid_timeout(self, api: ModuleType) -> None:
        """B.76, php-src poll_timer_handle_basic.phpt, SPEC 10 and 1: negative, NaN, inf or
        too large: ValueError (a negative that rounds to 0 ns too); under a nanosecond with
        periodic=True: ValueError; not int, float or
        timedelta: TypeError.  Each message names ``timeout``."""
        timer_handle = require(api, "TimerHandle")
        too_large = (10**30, 1e300)
        # -1e-10 and -1e-300 round to zero nanoseconds: still negative (as wait() says).
        negative = (-1, -0.001, -1e-10, -1e-300, timedelta(microseconds=-1))
        for bad in (*negative, math.nan, math.inf, -math.inf):
            with pytest.raises(ValueError, match="timeout"):
                timer_handle(bad)
        for bad in too_large:
            with pytest.raises(ValueError, match="timeout"):
                timer_handle(bad)
            with pytest.raises(ValueError, match="timeout"):
                timer_handle(bad, periodic=True)
        for zero in (0, 0.0, timedelta(0), 1e-10):  # 1e-10: less than a nanosecond
            with pytest.raises(ValueError, match="timeout"):
                timer_handle(zero, periodic=True)
        wrong_types: tuple[Any, ...] = ("1", b"1", None, [1], 1j, object())
        for wrong in wrong_types:
            with pytest.raises(TypeError, match="timeout"):
                timer_handle(wrong)

    def test_poll_timer_handle_basic_events(self, api: ModuleType, ctx: Any) -> None:
        """B.77, php-src poll_timer_handle_basic.phpt, SPEC 10 event rules.

        A timer takes TIMER alone, ONESHOT allowed; anything else is a ValueError "events
        must be Event.TIMER for a TimerHandle", by add and by modify; EDGE_TRIGGERED too.
        A refused add leaves nothing, a refused modify changes nothing.
        """
        timer_handle = require(api, "TimerHandle")
        e = api.Event
        handle = timer_handle(600)
        for events in (e.READ, e.TIMER | e.READ, e.NOTIFY, [e.TIMER, e.WRITE], e.TIMER | e.SIGNAL):
            with pytest.raises(ValueError, match=_TIMER_ONLY):
                ctx.add(handle, events)
        with pytest.raises(ValueError, match="events"):
            ctx.add(handle, e.TIMER | e.EDGE_TRIGGERED)
        assert len(ctx) == 0
        watcher = ctx.add(handle, e.TIMER, "timer")
        assert watcher.handle is handle
        assert watcher.watched_events == e.TIMER
        assert watcher.triggered_events == e(0)
        with pytest.raises(ValueError, match=_TIMER_ONLY):
            watcher.modify_events(e.READ)
        with pytest.raises(ValueError, match="events"):
            watcher.modify(e.TIMER | e.EDGE_TRIGGERED, "new")
        assert watcher.watched_events == e.TIMER
        assert watcher.data == "timer"
        oneshot = ctx.add(timer_handle(600), [e.TIMER, e.ONESHOT], "oneshot")
        assert oneshot.watched_events == e.TIMER | e.ONESHOT
        assert len(ctx) == 2

    def test_spec_10_stream_watcher_refuses_handle_events(self, api: ModuleType, ctx: Any) -> None:
        """B.82, SPEC 10 event rules: a stream watcher asking for TIMER, NOTIFY, SIGNAL or
        PROCESS is a ValueError "must not contain Event.TIMER, ...", by add and by modify."""
        e = api.Event
        a, b = socketpair()
        with closing_all(a, b):
            for flag in (e.TIMER, e.NOTIFY, e.SIGNAL, e.PROCESS):
                for events in (e.READ | flag, [flag], [e.WRITE, flag]):
                    with pytest.raises(ValueError, match=re.escape("must not contain Event.TIMER")):
                        ctx.add(a, events)
            assert len(ctx) == 0
            watcher = ctx.add(a, e.WRITE, "a")
            for flag in (e.TIMER, e.NOTIFY, e.SIGNAL, e.PROCESS):
                with pytest.raises(ValueError, match=re.escape("must not contain Event.TIMER")):
                    watcher.modify_events(e.WRITE | flag)
            assert watcher.watched_events == e.WRITE
            assert reported(poll_now(ctx)) == {"a": e.WRITE}

    # -- deadlines --------------------------------------------------------------------------

    def test_poll_timer_handle_basic_not_due(self, api: ModuleType, ctx: Any) -> None:
        """B.78, php-src poll_timer_handle_basic.phpt: before its deadline a timer is not
        reported, by a zero-timeout wait or a short one (which sleeps its timeout)."""
        timer_handle = require(api, "TimerHandle")
        ctx.add(timer_handle(600), api.Event.TIMER, "later")
        ctx.add(timer_handle(600, periodic=True), api.Event.TIMER, "periodic")
        assert poll_now(ctx) == []
        result, elapsed = timed(lambda: ctx.wait(0, 100_000))
        assert result == []
        assert 0.1 - _EARLY <= elapsed < _LATE

    def test_poll_timer_handle_basic_wait_none(self, api: ModuleType, ctx: Any) -> None:
        """B.78, php-src poll_timer_handle_basic.phpt, SPEC 10: wait(None) with only a 30 ms
        timer sleeps until it is due (counted from add) and returns it, reporting TIMER."""
        timer_handle = require(api, "TimerHandle")
        before = time.monotonic()
        watcher = ctx.add(timer_handle(0.03), api.Event.TIMER, "timer")
        _due_wait(ctx, watcher, before, 0.03)
        assert watcher.triggered_events == api.Event.TIMER
        assert watcher.has_triggered(api.Event.TIMER)

    def test_spec_10_timer_bounds_a_longer_wait(self, api: ModuleType, ctx: Any) -> None:
        """SPEC 10: a wait with a timeout longer than the timer's returns when it is due."""
        timer_handle = require(api, "TimerHandle")
        before = time.monotonic()
        watcher = ctx.add(timer_handle(timedelta(milliseconds=50)), api.Event.TIMER, "timer")
        result = ctx.wait(30)
        elapsed = time.monotonic() - before
        assert result == [watcher]
        assert 0.05 - _EARLY <= elapsed < _LATE

    def test_spec_10_zero_timer_due_at_once(self, api: ModuleType, ctx: Any) -> None:
        """SPEC 10: a zero timeout (not periodic) is due at add: the next wait reports it."""
        timer_handle = require(api, "TimerHandle")
        watcher = ctx.add(timer_handle(0), api.Event.TIMER, "now")
        time.sleep(0.002)
        assert reported(poll_now(ctx)) == {"now": api.Event.TIMER}
        assert watcher.is_active()

    def test_poll_timer_handle_basic_fires_once(self, api: ModuleType, ctx: Any) -> None:
        """B.79, php-src poll_timer_handle_basic.phpt, SPEC 10: a non-periodic timer fires
        once, then stays active and disarmed: later waits report nothing."""
        timer_handle = require(api, "TimerHandle")
        before = time.monotonic()
        watcher = ctx.add(timer_handle(0.02), api.Event.TIMER, "once")
        _due_wait(ctx, watcher, before, 0.02)
        assert ctx.wait(0, 100_000) == []
        assert poll_now(ctx) == []
        assert watcher.is_active()
        assert len(ctx) == 1
        assert watcher.watched_events == api.Event.TIMER
        assert watcher.triggered_events == api.Event.TIMER

    def test_poll_timer_handle_with_stream_rearm(self, api: ModuleType, ctx: Any) -> None:
        """B.79, php-src poll_timer_handle_with_stream.phpt, SPEC 10: modify_events(TIMER)
        re-arms a fired timer from that moment (not from its old deadline), once more."""
        timer_handle = require(api, "TimerHandle")
        before = time.monotonic()
        watcher = ctx.add(timer_handle(0.2), api.Event.TIMER, "timer")
        _due_wait(ctx, watcher, before, 0.2)
        time.sleep(0.15)  # re-armed from its old deadline, it would be due 50 ms from now
        rearmed = time.monotonic()
        watcher.modify_events(api.Event.TIMER)
        _due_wait(ctx, watcher, rearmed, 0.2)
        assert ctx.wait(0, 50_000) == []
        assert watcher.is_active()

    def test_poll_timer_handle_basic_remove(self, api: ModuleType, ctx: Any) -> None:
        """B.42, php-src poll_timer_handle_basic.phpt, SPEC 5: a removed timer is never
        reported nor keeps a wait(None) asleep; removing it again: InactiveWatcherError."""
        timer_handle = require(api, "TimerHandle")
        watcher = ctx.add(timer_handle(0.001, periodic=True), api.Event.TIMER, "gone")
        watcher.remove()
        assert not watcher.is_active()
        assert len(ctx) == 0
        time.sleep(0.01)
        assert ctx.wait(0, 50_000) == []
        result, elapsed = timed(lambda: ctx.wait(None))  # no active watcher: at once
        assert result == []
        assert elapsed < _LATE
        with pytest.raises(api.InactiveWatcherError):
            watcher.remove()
        with pytest.raises(api.InactiveWatcherError):
            watcher.modify_events(api.Event.TIMER)

    def test_spec_10_timer_oneshot(self, api: ModuleType, ctx: Any) -> None:
        """SPEC 10 and 6.4: a periodic timer watched with ONESHOT fires once and stays active
        and disarmed; modify_events re-arms it (from that moment), once more."""
        timer_handle = require(api, "TimerHandle")
        e = api.Event
        before = time.monotonic()
        watcher = ctx.add(timer_handle(0.01, periodic=True), [e.TIMER, e.ONESHOT], "shot")
        _due_wait(ctx, watcher, before, 0.01)
        assert watcher.triggered_events == e.TIMER
        time.sleep(0.05)  # several periods: a one-shot reports none of them
        assert poll_now(ctx) == []
        assert ctx.wait(0, 50_000) == []
        assert watcher.is_active()
        rearmed = time.monotonic()
        watcher.modify_events(e.TIMER | e.ONESHOT)
        _due_wait(ctx, watcher, rearmed, 0.01)
        assert ctx.wait(0, 50_000) == []

    # -- periodic timers --------------------------------------------------------------------

    def test_poll_timer_handle_basic_periodic(self, api: ModuleType, ctx: Any) -> None:
        """B.80, php-src poll_timer_handle_basic.phpt, SPEC 10: a periodic timer fires again
        and again, each time no earlier than its next deadline (n periods after add)."""
        timer_handle = require(api, "TimerHandle")
        before = time.monotonic()
        watcher = ctx.add(timer_handle(0.05, periodic=True), api.Event.TIMER, "tick")
        for count in range(1, 5):
            _due_wait(ctx, watcher, before, 0.05 * count)
        assert watcher.triggered_events == api.Event.TIMER
        assert watcher.is_active()

    def test_poll_timer_handle_periodic_lag(self, api: ModuleType, ctx: Any) -> None:
        """B.80, php-src poll_timer_handle_periodic_lag.phpt, SPEC 10: a 1 ms periodic timer
        300 periods behind is reported at most once per wait, the first at once: no result
        holds it twice, whatever the wait."""
        timer_handle = require(api, "TimerHandle")
        watcher = ctx.add(timer_handle(0.001, periodic=True), api.Event.TIMER, "lag")
        time.sleep(0.3)
        results = [poll_now(ctx) for _ in range(20)]
        results += [ctx.wait(0, 5_000) for _ in range(5)]
        results += [ctx.wait(0, 0, 1) for _ in range(5)]
        assert results[0] == [watcher]
        for result in results:
            assert result in ([], [watcher]), result

    def test_poll_timer_handle_periodic_lag_no_burst(self, api: ModuleType, ctx: Any) -> None:
        """B.80, php-src poll_timer_handle_periodic_lag.phpt, SPEC 10: a periodic timer far
        behind skips the periods it missed: after ten missed periods, back-to-back waits
        report it once, plus at most once per deadline passed meanwhile, never a burst."""
        timer_handle = require(api, "TimerHandle")
        period = 0.05
        watcher = ctx.add(timer_handle(period, periodic=True), api.Event.TIMER, "lag")
        time.sleep(10.5 * period)
        start = time.monotonic()
        results = [poll_now(ctx) for _ in range(6)]
        elapsed = time.monotonic() - start
        assert results[0] == [watcher]
        count = sum(result.count(watcher) for result in results)
        # One report now, then one per deadline crossed while waiting (and one more for a
        # deadline that fell just after the first report).
        assert count <= 2 + int(elapsed / period), (count, elapsed)

    # -- timers among other watchers --------------------------------------------------------

    def test_poll_timer_handle_with_stream(self, api: ModuleType, ctx: Any) -> None:
        """B.81, php-src poll_timer_handle_with_stream.phpt, SPEC 10: a ready stream does not
        fire the timer early; once due, the timer comes first in the result."""
        timer_handle = require(api, "TimerHandle")
        e = api.Event
        a, b = socketpair()
        with closing_all(a, b):
            stream = ctx.add(a, e.WRITE, "stream")
            before = time.monotonic()
            timer = ctx.add(timer_handle(0.1), e.TIMER, "timer")
            deadline = before + _LATE
            while True:
                result = ctx.wait(0, 20_000)
                if timer in result:
                    break
                assert result == [stream]
                assert time.monotonic() < deadline, "the timer never fired"
            assert time.monotonic() - before >= 0.1 - _EARLY
            assert result == [timer, stream]
            assert reported(result) == {"timer": e.TIMER, "stream": e.WRITE}
            assert reported(poll_now(ctx)) == {"stream": e.WRITE}

    def test_spec_10_timers_keep_slots_under_max_events(self, api: ModuleType, ctx: Any) -> None:
        """B.81, php-src poll_timer_handle_with_stream.phpt, SPEC 10: due timers get their
        slots before ready fds under max_events; a timer that does not fit stays due and
        comes out on the next wait; with room, timers first, then fds."""
        timer_handle = require(api, "TimerHandle")
        e = api.Event
        pairs = [socketpair() for _ in range(3)]
        with closing_all(*(end for pair in pairs for end in pair)):
            for i, (a, _b) in enumerate(pairs):
                ctx.add(a, e.WRITE, f"s{i}")
            streams = {"s0", "s1", "s2"}
            for i in range(2):
                ctx.add(timer_handle(0.001), e.TIMER, f"t{i}")
            time.sleep(0.01)
            first = ctx.wait(0, 0, 1)
            second = ctx.wait(0, 0, 1)
            assert len(first) == len(second) == 1
            assert {first[0].data, second[0].data} == {"t0", "t1"}
            third = ctx.wait(0, 0, 1)
            assert len(third) == 1 and third[0].data in streams
            # The fired timers stay disarmed; every fd is still ready.
            assert set(reported(poll_now(ctx))) == streams
            for i in range(2):
                ctx.add(timer_handle(0.001), e.TIMER, f"u{i}")
            time.sleep(0.01)
            result = [watcher.data for watcher in ctx.wait(0, 0, 3)]
            assert len(result) == 3
            assert set(result[:2]) == {"u0", "u1"}
            assert result[2] in streams
            assert len(ctx) == 7

    def test_spec_10_timer_context_close(self, api: ModuleType, backend: Any) -> None:
        """B.81, SPEC 4 and 10: timer watchers count in len(ctx); closing the context with
        armed timers deactivates them all."""
        timer_handle = require(api, "TimerHandle")
        e = api.Event
        context = api.Context(backend)
        watchers = [
            context.add(timer_handle(600), e.TIMER, "armed"),
            context.add(timer_handle(0.001, periodic=True), e.TIMER, "periodic"),
            context.add(timer_handle(0), [e.TIMER, e.ONESHOT], "oneshot"),
        ]
        assert len(context) == 3
        context.close()
        assert len(context) == 0
        for watcher in watchers:
            assert not watcher.is_active()
            with pytest.raises(api.InactiveWatcherError):
                watcher.remove()
            with pytest.raises(api.InactiveWatcherError):
                watcher.modify_events(e.TIMER)
        with pytest.raises(api.PollError):
            context.wait(0)

    @pytest.mark.parametrize("max_events", [None, 8], ids=["fast", "limited"])
    def test_spec_10_a_timer_ends_a_wait_none_beside_an_idle_stream(
        self, api: ModuleType, ctx: Any, max_events: int | None
    ) -> None:
        """SPEC 4 and 10: wait(None) lasts until something is ready, a timer included: an
        idle stream watched beside it does not make the wait sleep past its deadline."""
        timer_handle = require(api, "TimerHandle")
        a, b = socketpair()
        with closing_all(a, b):
            ctx.add(b, api.Event.READ, "idle")
            added = time.monotonic()  # the deadline counts from add(), not from the wait
            watcher = ctx.add(timer_handle(0.1), api.Event.TIMER, "timer")

            def stuck(signum: int, frame: object) -> None:
                raise AssertionError("wait(None) slept past the timer's deadline")

            with alarm(stuck, 5.0):
                result, elapsed = timed(lambda: ctx.wait(None, 0, max_events))
            since_add = time.monotonic() - added
        assert result == [watcher]
        assert since_add >= 0.1 - _EARLY and elapsed < _LATE

    def test_spec_10_a_late_periodic_timer_keeps_its_schedule(
        self, api: ModuleType, ctx: Any
    ) -> None:
        """SPEC 10: a periodic timer re-arms from its previous deadline, not from when it
        was reported: one reported half a period late is due again half a period after the
        report (2 s after add), not a whole period after it."""
        timer_handle = require(api, "TimerHandle")
        watcher = ctx.add(timer_handle(1, periodic=True), api.Event.TIMER, "tick")
        time.sleep(1.5)
        assert poll_now(ctx) == [watcher]
        report = time.monotonic()  # 1.5 s after add, or later on a busy machine
        assert ctx.wait(1, 500_000) == [watcher]
        assert time.monotonic() - report < 0.8  # at most 0.5 s, the wait's own delay aside
