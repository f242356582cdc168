"""Context.wait: timeouts, max_events, empty contexts, signals (SPEC 4)."""

from __future__ import annotations

import math
import time
from datetime import timedelta
from types import FrameType, ModuleType
from typing import Any

import pytest

from ..process import SignalHandler, alarm
from ..streams import closing_all, drain, sending_later, tcp_pairs
from ..support import Capabilities, poll_now, reported, short_wait, socketpair, timed

# Timing bounds are loose on purpose: the machine may be busy.
_SLACK = 0.05
_PROMPT = 5.0


class _Alarm(Exception):
    """Raised by a test's SIGALRM handler."""


def _recording_handler() -> tuple[list[int], SignalHandler]:
    """A quiet signal handler, and the list of the signals it was called for."""
    calls: list[int] = []

    def handler(signum: int, frame: FrameType | None) -> None:
        calls.append(signum)

    return calls, handler


def _need_float_timeouts(caps: Capabilities) -> None:
    if not caps.float_timeouts:
        pytest.skip("this implementation takes whole seconds (SPEC 7)")


def _returns_at_once(ctx: Any, *arguments: Any) -> None:
    """``ctx.wait(*arguments)`` returns nothing, and does not sleep."""
    result, elapsed = timed(lambda: ctx.wait(*arguments))
    assert result == [], arguments
    assert elapsed < 0.5, arguments


def _sleeps(ctx: Any, seconds: float, *arguments: Any) -> None:
    """``ctx.wait(*arguments)`` returns nothing, after about ``seconds``."""
    result, elapsed = timed(lambda: ctx.wait(*arguments))
    assert result == [], arguments
    assert seconds - _SLACK <= elapsed < _PROMPT, arguments


def _woken_by_late_send(
    ctx: Any, pair: tuple[Any, Any], watcher: Any, *arguments: Any, within: float = _PROMPT
) -> None:
    """``ctx.wait(*arguments)`` returns ``[watcher]`` when ``pair[0]`` sends, 0.2 s in.

    ``watcher`` watches ``pair[1]`` for READ; the wait must end within ``within`` seconds.
    """
    # The clock is read before the sender's starts: a loaded machine may run this thread
    # late after starting the sender, but never lets the send come before 0.2 s from here.
    start = time.monotonic()
    with sending_later(pair[0], 0.2):
        result = ctx.wait(*arguments)
        elapsed = time.monotonic() - start
    assert result == [watcher], arguments
    assert 0.2 - _SLACK <= elapsed < within, arguments


class WaitRules:
    """Context.wait: timeouts, max_events, empty contexts, signals (SPEC 4)."""

    # -- timeouts ----------------------------------------------------------------------

    def test_poll_ctx_wait_none_returns_ready(
        self, api: ModuleType, ctx: Any, pair: tuple[Any, Any]
    ) -> None:
        """B.21, php-src poll_ctx_wait.phpt: timeout=None returns as soon as one is ready."""
        watcher = ctx.add(pair[0], api.Event.WRITE)
        result, elapsed = timed(lambda: ctx.wait())
        assert result == [watcher]
        assert elapsed < _PROMPT
        assert ctx.wait(None) == [watcher]

    def test_poll_ctx_wait_none_blocks_until_ready(
        self, api: ModuleType, ctx: Any, pair: tuple[Any, Any]
    ) -> None:
        """B.21: timeout=None waits until a thread makes the fd ready (~200 ms later)."""
        watcher = ctx.add(pair[1], api.Event.READ)
        _woken_by_late_send(ctx, pair, watcher, None)

    def test_poll_ctx_wait_zero(self, api: ModuleType, ctx: Any, pair: tuple[Any, Any]) -> None:
        """B.21: timeout 0 polls and returns at once, ready or not."""
        watcher = ctx.add(pair[1], api.Event.READ)
        _returns_at_once(ctx, 0)
        pair[0].send(b"x")
        assert ctx.wait(0) == [watcher]

    def test_spec_4_wait_microseconds_added(
        self, api: ModuleType, ctx: Any, pair: tuple[Any, Any]
    ) -> None:
        """SPEC 4: microseconds is added to timeout: wait(0, 300000) sleeps ~0.3 s."""
        ctx.add(pair[1], api.Event.READ)
        _sleeps(ctx, 0.3, 0, 300_000)

    def test_spec_4_wait_int_timeout_returns_when_ready(
        self, api: ModuleType, ctx: Any, pair: tuple[Any, Any]
    ) -> None:
        """SPEC 4: an int timeout is an upper bound: readiness ends the wait early."""
        watcher = ctx.add(pair[1], api.Event.READ)
        _woken_by_late_send(ctx, pair, watcher, 5, within=4.5)

    def test_spec_4_wait_int_timeout_expires(
        self, api: ModuleType, ctx: Any, pair: tuple[Any, Any]
    ) -> None:
        """SPEC 4: wait(1) on an idle fd returns [] after about one second."""
        ctx.add(pair[1], api.Event.READ)
        _sleeps(ctx, 1.0, 1)

    def test_spec_4_wait_float_timeout(
        self, api: ModuleType, caps: Capabilities, ctx: Any, pair: tuple[Any, Any]
    ) -> None:
        """SPEC 4: a float timeout in seconds (gated on caps.float_timeouts)."""
        _need_float_timeouts(caps)
        watcher = ctx.add(pair[1], api.Event.READ)
        _sleeps(ctx, 0.3, 0.3)
        _sleeps(ctx, 0.3, 0.25, 50_000)
        pair[0].send(b"x")
        assert ctx.wait(0.0) == [watcher]

    def test_spec_4_wait_timedelta_timeout(
        self, api: ModuleType, caps: Capabilities, ctx: Any, pair: tuple[Any, Any]
    ) -> None:
        """SPEC 4: a datetime.timedelta timeout, microseconds added to it."""
        _need_float_timeouts(caps)
        watcher = ctx.add(pair[1], api.Event.READ)
        _sleeps(ctx, 0.3, timedelta(milliseconds=300))
        _sleeps(ctx, 0.3, timedelta(milliseconds=100), 200_000)
        _woken_by_late_send(ctx, pair, watcher, timedelta(seconds=30))
        assert ctx.wait(timedelta(0)) == [watcher]

    def test_spec_4_wait_inf_is_none(
        self, api: ModuleType, caps: Capabilities, ctx: Any, pair: tuple[Any, Any]
    ) -> None:
        """SPEC 4: math.inf is the same as None: waits until ready."""
        _need_float_timeouts(caps)
        watcher = ctx.add(pair[1], api.Event.READ)
        _woken_by_late_send(ctx, pair, watcher, math.inf)

    @pytest.mark.parametrize("huge", [10**9, 2**31, 2**32 + 1, 2**63, 10**30, 10**400])
    def test_poll_wait_timeout_overflow(
        self, api: ModuleType, ctx: Any, pair: tuple[Any, Any], huge: int
    ) -> None:
        """B.29, php-src poll_wait_timeout_overflow.phpt: huge timeouts never wrap."""
        watcher = ctx.add(pair[1], api.Event.READ)
        _woken_by_late_send(ctx, pair, watcher, huge)

    def test_poll_wait_timeout_overflow_float(
        self, api: ModuleType, caps: Capabilities, ctx: Any, pair: tuple[Any, Any]
    ) -> None:
        """B.29: huge float and timedelta timeouts never wrap either."""
        _need_float_timeouts(caps)
        watcher = ctx.add(pair[1], api.Event.READ)
        for huge in (158_913_790.0, 1e300, timedelta.max, timedelta(days=10_000)):
            _woken_by_late_send(ctx, pair, watcher, huge)
            drain(pair[1])

    # -- results -----------------------------------------------------------------------

    def test_spec_4_wait_returns_the_watchers(
        self, api: ModuleType, ctx: Any, pair: tuple[Any, Any]
    ) -> None:
        """B.23, SPEC 4: one entry per watcher, the very object add() returned."""
        watcher = ctx.add(pair[1], api.Event.READ | api.Event.WRITE, "rw")
        pair[0].send(b"x")
        result = short_wait(ctx)
        assert isinstance(result, list)
        assert len(result) == 1
        assert result[0] is watcher
        assert watcher.triggered_events == api.Event.READ | api.Event.WRITE

    def test_poll_stream_tcp_read_max_events(self, api: ModuleType, ctx: Any) -> None:
        """B.24, php-src poll_stream_tcp_read_max_events.phpt: 8 ready, max 4 -> 4 then 4."""
        pairs = tcp_pairs(8)
        with closing_all(*(end for pair in pairs for end in pair)):
            watchers = [ctx.add(server, api.Event.READ, i) for i, (_, server) in enumerate(pairs)]
            for client, _ in pairs:
                client.send(b"data")
            time.sleep(0.05)  # let loopback TCP deliver everywhere
            first = ctx.wait(1, 0, 4)
            second = ctx.wait(1, 0, 4)
            assert len(first) == 4 and len(second) == 4
            seen = {id(w) for w in first + second}
            assert seen == {id(w) for w in watchers}
            assert all(w.triggered_events == api.Event.READ for w in watchers)
            assert len(ctx.wait(1, 0, 100)) == 8  # level-triggered: all still ready

    def test_poll_stream_tcp_read_one_shot_max_events(self, api: ModuleType, ctx: Any) -> None:
        """B.25, php-src poll_stream_tcp_read_one_shot_max_events.phpt: leftovers not consumed."""
        pairs = tcp_pairs(4)
        with closing_all(*(end for pair in pairs for end in pair)):
            events = api.Event.READ | api.Event.ONESHOT
            watchers = [ctx.add(server, events, i) for i, (_, server) in enumerate(pairs)]
            for client, _ in pairs:
                client.send(b"data")
            time.sleep(0.05)
            first = ctx.wait(1, 0, 2)
            second = ctx.wait(1, 0, 2)
            assert len(first) == 2 and len(second) == 2
            assert {id(w) for w in first + second} == {id(w) for w in watchers}
            for client, _ in pairs:
                client.send(b"more")
            assert short_wait(ctx) == []  # each fired exactly once
            assert all(w.is_active() for w in watchers)

    def test_poll_stream_sock_rw_max_events(self, api: ModuleType, ctx: Any) -> None:
        """B.26, php-src poll_stream_sock_rw_max_events.phpt: READ and WRITE are one entry."""
        pairs = [socketpair() for _ in range(4)]
        with closing_all(*(end for pair in pairs for end in pair)):
            e = api.Event
            watchers = [ctx.add(b, e.READ | e.WRITE, i) for i, (_, b) in enumerate(pairs)]
            for a, _ in pairs:
                a.send(b"x")
            result = ctx.wait(1, 0, 8)
            assert len(result) == 4
            assert {id(w) for w in result} == {id(w) for w in watchers}
            assert all(w.triggered_events == e.READ | e.WRITE for w in result)
            for _, b in pairs:
                drain(b)
            result = ctx.wait(1, 0, 8)
            assert reported(result) == {i: e.WRITE for i in range(4)}

    def test_poll_stream_tcp_read_multiple_level(self, api: ModuleType, ctx: Any) -> None:
        """B.27, php-src poll_stream_tcp_read_multiple_level.phpt: 20 ready, one wait."""
        pairs = tcp_pairs(20)
        with closing_all(*(end for pair in pairs for end in pair)):
            for i, (_, server) in enumerate(pairs):
                ctx.add(server, api.Event.READ, i)
            for client, _ in pairs:
                client.send(b"data")
            time.sleep(0.05)
            result = ctx.wait(1)
            assert sorted(w.data for w in result) == list(range(20))

    def test_spec_4_max_events_bounds(
        self, api: ModuleType, ctx: Any, pair: tuple[Any, Any]
    ) -> None:
        """SPEC 4: max_events 1 and 2**31-1 are accepted."""
        watcher = ctx.add(pair[0], api.Event.WRITE)
        assert ctx.wait(0, 0, 1) == [watcher]
        assert ctx.wait(0, 0, 2**31 - 1) == [watcher]
        assert ctx.wait(0, 0, None) == [watcher]
        assert ctx.wait(0, max_events=1) == [watcher]

    # -- empty contexts ---------------------------------------------------------------------

    def test_poll_stream_wait_no_add_none(self, api: ModuleType, ctx: Any) -> None:
        """B.28, php-src poll_stream_wait_no_add.phpt: no watcher, timeout None -> [] at once."""
        _returns_at_once(ctx)

    def test_poll_stream_wait_no_add_timeout(self, api: ModuleType, ctx: Any) -> None:
        """B.28, php-src poll_stream_wait_no_add.phpt: no watcher, positive timeout sleeps it."""
        _sleeps(ctx, 0.2, 0, 200_000)
        _returns_at_once(ctx, 0)

    def test_poll_stream_wait_no_add_after_remove(
        self, api: ModuleType, ctx: Any, pair: tuple[Any, Any]
    ) -> None:
        """B.28: a context whose watchers were all removed is empty again."""
        ctx.add(pair[0], api.Event.WRITE).remove()
        _returns_at_once(ctx, None)

    # -- signals (PEP 475) ----------------------------------------------------------------

    def test_poll_ctx_wait_signal_handler_returns_ready(
        self, api: ModuleType, ctx: Any, pair: tuple[Any, Any]
    ) -> None:
        """B.30, php-src poll_ctx_wait_signal.phpt: a quiet handler runs, the wait goes on."""
        calls, handler = _recording_handler()
        watcher = ctx.add(pair[1], api.Event.READ)
        start = time.monotonic()  # before the sender's clock, as _woken_by_late_send says
        with sending_later(pair[0], 0.3), alarm(handler, 0.1):
            result = ctx.wait(5)
            elapsed = time.monotonic() - start
        assert calls, "the SIGALRM handler did not run"
        assert result == [watcher]
        assert 0.3 - _SLACK <= elapsed < 4.5

    def test_poll_ctx_wait_signal_handler_keeps_remaining_time(
        self, api: ModuleType, ctx: Any, pair: tuple[Any, Any]
    ) -> None:
        """B.30, SPEC 4: after a quiet handler, the wait times out after the remaining time."""
        calls, handler = _recording_handler()
        ctx.add(pair[1], api.Event.READ)
        with alarm(handler, 0.3):
            result, elapsed = timed(lambda: ctx.wait(0, 500_000))
        assert calls, "the SIGALRM handler did not run"
        assert result == []
        # Neither cut short at the signal (0.3 s) nor restarted from zero (0.8 s).
        assert 0.5 - _SLACK <= elapsed < 0.75

    def test_poll_ctx_wait_signal_handler_raises(
        self, api: ModuleType, ctx: Any, pair: tuple[Any, Any]
    ) -> None:
        """B.30, SPEC 4: a handler's exception leaves wait() unchanged; ctx stays usable."""
        raised = _Alarm("from the handler")

        def handler(signum: int, frame: FrameType | None) -> None:
            raise raised

        watcher = ctx.add(pair[1], api.Event.READ)
        with alarm(handler, 0.1), pytest.raises(_Alarm) as info:
            ctx.wait(5)
        assert info.value is raised
        pair[0].send(b"x")
        assert short_wait(ctx) == [watcher]

    def test_poll_ctx_wait_signal_handler_raises_none_timeout(
        self, api: ModuleType, ctx: Any, pair: tuple[Any, Any]
    ) -> None:
        """B.30: a handler's exception also ends an unbounded wait (timeout=None)."""

        def handler(signum: int, frame: FrameType | None) -> None:
            raise _Alarm

        ctx.add(pair[1], api.Event.READ)
        with alarm(handler, 0.1), pytest.raises(_Alarm):
            ctx.wait()
        assert poll_now(ctx) == []

    def test_poll_ctx_wait_signal_empty_context(self, api: ModuleType, ctx: Any) -> None:
        """B.30, SPEC 4: the sleep of an empty context follows PEP 475 too."""
        calls, handler = _recording_handler()
        with alarm(handler, 0.1):
            result, elapsed = timed(lambda: ctx.wait(0, 400_000))
        assert calls
        assert result == []
        assert 0.4 - _SLACK <= elapsed < _PROMPT

        def raising(signum: int, frame: FrameType | None) -> None:
            raise _Alarm

        with alarm(raising, 0.1), pytest.raises(_Alarm):
            ctx.wait(5)

    def test_spec_4_one_ready_watcher_more_than_max_events(self, api: ModuleType, ctx: Any) -> None:
        """SPEC 4: with exactly one ready watcher more than max_events, the wait returns
        max_events of them; the one left out comes next."""
        pairs = [socketpair() for _ in range(3)]
        with closing_all(*(end for pair in pairs for end in pair)):
            watchers = [ctx.add(a, api.Event.WRITE, index) for index, (a, _) in enumerate(pairs)]
            first = poll_now(ctx, 2)
            assert len(first) == 2
            assert next(w for w in watchers if w not in first) in poll_now(ctx, 2)

    def test_spec_4_remove_drops_what_a_max_events_cut_kept(
        self, api: ModuleType, ctx: Any
    ) -> None:
        """SPEC 4 and 6.2: a watcher removed while a max_events cut keeps its report for
        the next wait takes that report with it: its stream added again is reported for
        what the new watcher asks, as it is now."""
        pairs = [socketpair() for _ in range(2)]
        with closing_all(*(end for pair in pairs for end in pair)):
            for _, b in pairs:
                b.send(b"x")
            watchers = {ctx.add(a, api.Event.READ | api.Event.ONESHOT, a): a for a, _ in pairs}
            first = poll_now(ctx, 1)
            assert len(first) == 1
            left = next(w for w in watchers if w not in first)
            stream = watchers[left]
            drain(stream)  # nothing to read any more
            left.remove()
            ctx.add(stream, api.Event.WRITE, "fresh")
            assert {d: e for d, e in reported(poll_now(ctx)).items() if d == "fresh"} == {
                "fresh": api.Event.WRITE
            }

    def test_spec_4_a_sub_millisecond_timeout_is_waited(
        self, api: ModuleType, caps: Capabilities, ctx: Any, pair: tuple[Any, Any]
    ) -> None:
        """SPEC 4: a timeout is a number of seconds, waited as long as asked: 0.9 ms is not
        rounded down to a poll (an event loop with a timer due in under a millisecond would
        spin)."""
        if not caps.float_timeouts:
            pytest.skip("the implementation takes whole seconds and microseconds")
        ctx.add(pair[0], api.Event.READ)
        _, elapsed = timed(lambda: [ctx.wait(0.0009) for _ in range(50)])
        assert elapsed >= 50 * 0.0009
