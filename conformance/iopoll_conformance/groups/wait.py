"""Context.wait: timeouts, max_events, empty contexts, signals (SPEC 4)."""

from __future__ import annotations

import math
import time
from datetime import timedelta
from types import FrameType, ModuleType
from typing import Any

import pytest

from ..support import Capabilities, poll_now, reported, short_wait, socketpair
from ._helpers_a import alarm, close_all, drain, sending_later, tcp_pairs, timed

# Timing bounds are loose on purpose: the machine may be busy.
_SLACK = 0.05
_PROMPT = 5.0


class _Alarm(Exception):
    """Raised by a test's SIGALRM handler."""


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
        with sending_later(pair[0], 0.2):
            result, elapsed = timed(lambda: ctx.wait(None))
        assert result == [watcher]
        assert 0.2 - _SLACK <= elapsed < _PROMPT

    def test_poll_ctx_wait_zero(self, api: ModuleType, ctx: Any, pair: tuple[Any, Any]) -> None:
        """B.21: timeout 0 polls and returns at once, ready or not."""
        watcher = ctx.add(pair[1], api.Event.READ)
        result, elapsed = timed(lambda: ctx.wait(0))
        assert result == []
        assert elapsed < 0.5
        pair[0].send(b"x")
        assert ctx.wait(0) == [watcher]

    def test_spec_4_wait_microseconds_added(
        self, api: ModuleType, ctx: Any, pair: tuple[Any, Any]
    ) -> None:
        """SPEC 4: microseconds is added to timeout: wait(0, 300000) sleeps ~0.3 s."""
        ctx.add(pair[1], api.Event.READ)
        result, elapsed = timed(lambda: ctx.wait(0, 300_000))
        assert result == []
        assert 0.3 - _SLACK <= elapsed < _PROMPT

    def test_spec_4_wait_int_timeout_returns_when_ready(
        self, api: ModuleType, ctx: Any, pair: tuple[Any, Any]
    ) -> None:
        """SPEC 4: an int timeout is an upper bound: readiness ends the wait early."""
        watcher = ctx.add(pair[1], api.Event.READ)
        with sending_later(pair[0], 0.2):
            result, elapsed = timed(lambda: ctx.wait(5))
        assert result == [watcher]
        assert 0.2 - _SLACK <= elapsed < 4.5

    def test_spec_4_wait_int_timeout_expires(
        self, api: ModuleType, ctx: Any, pair: tuple[Any, Any]
    ) -> None:
        """SPEC 4: wait(1) on an idle fd returns [] after about one second."""
        ctx.add(pair[1], api.Event.READ)
        result, elapsed = timed(lambda: ctx.wait(1))
        assert result == []
        assert 1.0 - _SLACK <= elapsed < _PROMPT

    def test_spec_4_wait_float_timeout(
        self, api: ModuleType, caps: Capabilities, ctx: Any, pair: tuple[Any, Any]
    ) -> None:
        """SPEC 4: a float timeout in seconds (gated on caps.float_timeouts)."""
        if not caps.float_timeouts:
            pytest.skip("this implementation takes whole seconds (SPEC 7)")
        watcher = ctx.add(pair[1], api.Event.READ)
        result, elapsed = timed(lambda: ctx.wait(0.3))
        assert result == []
        assert 0.3 - _SLACK <= elapsed < _PROMPT
        result, elapsed = timed(lambda: ctx.wait(0.25, 50_000))
        assert result == []
        assert 0.3 - _SLACK <= elapsed < _PROMPT
        pair[0].send(b"x")
        assert ctx.wait(0.0) == [watcher]

    def test_spec_4_wait_timedelta_timeout(
        self, api: ModuleType, caps: Capabilities, ctx: Any, pair: tuple[Any, Any]
    ) -> None:
        """SPEC 4: a datetime.timedelta timeout, microseconds added to it."""
        if not caps.float_timeouts:
            pytest.skip("this implementation takes whole seconds (SPEC 7)")
        watcher = ctx.add(pair[1], api.Event.READ)
        result, elapsed = timed(lambda: ctx.wait(timedelta(milliseconds=300)))
        assert result == []
        assert 0.3 - _SLACK <= elapsed < _PROMPT
        result, elapsed = timed(lambda: ctx.wait(timedelta(milliseconds=100), 200_000))
        assert result == []
        assert 0.3 - _SLACK <= elapsed < _PROMPT
        with sending_later(pair[0], 0.2):
            result, elapsed = timed(lambda: ctx.wait(timedelta(seconds=30)))
        assert result == [watcher]
        assert elapsed < _PROMPT
        assert ctx.wait(timedelta(0)) == [watcher]

    def test_spec_4_wait_inf_is_none(
        self, api: ModuleType, caps: Capabilities, ctx: Any, pair: tuple[Any, Any]
    ) -> None:
        """SPEC 4: math.inf is the same as None: waits until ready."""
        if not caps.float_timeouts:
            pytest.skip("this implementation takes whole seconds (SPEC 7)")
        watcher = ctx.add(pair[1], api.Event.READ)
        with sending_later(pair[0], 0.2):
            result, elapsed = timed(lambda: ctx.wait(math.inf))
        assert result == [watcher]
        assert 0.2 - _SLACK <= elapsed < _PROMPT

    @pytest.mark.parametrize("huge", [10**9, 2**31, 2**32 + 1, 2**63, 10**30, 10**400])
    def test_poll_wait_timeout_overflow(
        self, api: ModuleType, ctx: Any, pair: tuple[Any, Any], huge: int
    ) -> None:
        """B.29, php-src poll_wait_timeout_overflow.phpt: huge timeouts never wrap."""
        watcher = ctx.add(pair[1], api.Event.READ)
        with sending_later(pair[0], 0.2):
            result, elapsed = timed(lambda: ctx.wait(huge))
        assert result == [watcher]
        assert 0.2 - _SLACK <= elapsed < _PROMPT

    def test_poll_wait_timeout_overflow_float(
        self, api: ModuleType, caps: Capabilities, ctx: Any, pair: tuple[Any, Any]
    ) -> None:
        """B.29: huge float and timedelta timeouts never wrap either."""
        if not caps.float_timeouts:
            pytest.skip("this implementation takes whole seconds (SPEC 7)")
        watcher = ctx.add(pair[1], api.Event.READ)
        for huge in (158_913_790.0, 1e300, timedelta.max, timedelta(days=10_000)):
            with sending_later(pair[0], 0.2):
                result, elapsed = timed(lambda: ctx.wait(huge))  # noqa: B023
            assert result == [watcher], huge
            assert 0.2 - _SLACK <= elapsed < _PROMPT, huge
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
        try:
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
        finally:
            for client, server in pairs:
                close_all(client, server)

    def test_poll_stream_tcp_read_one_shot_max_events(self, api: ModuleType, ctx: Any) -> None:
        """B.25, php-src poll_stream_tcp_read_one_shot_max_events.phpt: leftovers not consumed."""
        pairs = tcp_pairs(4)
        try:
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
        finally:
            for client, server in pairs:
                close_all(client, server)

    def test_poll_stream_sock_rw_max_events(self, api: ModuleType, ctx: Any) -> None:
        """B.26, php-src poll_stream_sock_rw_max_events.phpt: READ and WRITE are one entry."""
        pairs = [socketpair() for _ in range(4)]
        try:
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
        finally:
            for a, b in pairs:
                close_all(a, b)

    def test_poll_stream_tcp_read_multiple_level(self, api: ModuleType, ctx: Any) -> None:
        """B.27, php-src poll_stream_tcp_read_multiple_level.phpt: 20 ready, one wait."""
        pairs = tcp_pairs(20)
        try:
            for i, (_, server) in enumerate(pairs):
                ctx.add(server, api.Event.READ, i)
            for client, _ in pairs:
                client.send(b"data")
            time.sleep(0.05)
            result = ctx.wait(1)
            assert sorted(w.data for w in result) == list(range(20))
        finally:
            for client, server in pairs:
                close_all(client, server)

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
        result, elapsed = timed(lambda: ctx.wait())
        assert result == []
        assert elapsed < 0.5

    def test_poll_stream_wait_no_add_timeout(self, api: ModuleType, ctx: Any) -> None:
        """B.28, php-src poll_stream_wait_no_add.phpt: no watcher, positive timeout sleeps it."""
        result, elapsed = timed(lambda: ctx.wait(0, 200_000))
        assert result == []
        assert 0.2 - _SLACK <= elapsed < _PROMPT
        result, elapsed = timed(lambda: ctx.wait(0))
        assert result == []
        assert elapsed < 0.5

    def test_poll_stream_wait_no_add_after_remove(
        self, api: ModuleType, ctx: Any, pair: tuple[Any, Any]
    ) -> None:
        """B.28: a context whose watchers were all removed is empty again."""
        ctx.add(pair[0], api.Event.WRITE).remove()
        result, elapsed = timed(lambda: ctx.wait(None))
        assert result == []
        assert elapsed < 0.5

    # -- signals (PEP 475) ----------------------------------------------------------------

    def test_poll_ctx_wait_signal_handler_returns_ready(
        self, api: ModuleType, ctx: Any, pair: tuple[Any, Any]
    ) -> None:
        """B.30, php-src poll_ctx_wait_signal.phpt: a quiet handler runs, the wait goes on."""
        calls: list[int] = []

        def handler(signum: int, frame: FrameType | None) -> None:
            calls.append(signum)

        watcher = ctx.add(pair[1], api.Event.READ)
        with sending_later(pair[0], 0.3), alarm(handler, 0.1):
            result, elapsed = timed(lambda: ctx.wait(5))
        assert calls, "the SIGALRM handler did not run"
        assert result == [watcher]
        assert 0.3 - _SLACK <= elapsed < 4.5

    def test_poll_ctx_wait_signal_handler_keeps_remaining_time(
        self, api: ModuleType, ctx: Any, pair: tuple[Any, Any]
    ) -> None:
        """B.30, SPEC 4: after a quiet handler, the wait times out after the remaining time."""
        calls: list[int] = []

        def handler(signum: int, frame: FrameType | None) -> None:
            calls.append(signum)

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
        calls: list[int] = []

        def handler(signum: int, frame: FrameType | None) -> None:
            calls.append(signum)

        with alarm(handler, 0.1):
            result, elapsed = timed(lambda: ctx.wait(0, 400_000))
        assert calls
        assert result == []
        assert 0.4 - _SLACK <= elapsed < _PROMPT

        def raising(signum: int, frame: FrameType | None) -> None:
            raise _Alarm

        with alarm(raising, 0.1), pytest.raises(_Alarm):
            ctx.wait(5)
