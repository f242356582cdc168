"""Bad input: exception class and message for every bad-input row of SPEC.

Also: nothing is left half-registered after a failed add or modify.
"""

from __future__ import annotations

import math
from datetime import timedelta
from fractions import Fraction
from types import ModuleType
from typing import Any

import pytest

from ..support import Capabilities, names_argument, poll_now, refuses, reported, short_wait


class _NoFileno:
    """An object without ``fileno``."""


def check_flag_refused(api: ModuleType, ctx: Any, pair: tuple[Any, Any], flag: Any) -> None:
    """``flag`` is refused with NOSUPPORT by add and modify, and the refusals leave nothing.

    Nothing is half-registered by a refused add; a refused modify changes neither the
    watcher's events nor its data, and the watcher stays level-triggered.
    """
    a, b = pair
    e = api.Event
    for events in (e.READ | flag, [e.READ, flag]):
        with pytest.raises(api.FailedHandleAddError) as add_info:
            ctx.add(b, events)
        assert add_info.value.code == api.ErrorCode.NOSUPPORT
    assert len(ctx) == 0
    watcher = ctx.add(b, e.READ, "b")  # the failed adds left nothing behind
    for events in (e.READ | flag, [e.READ, flag]):
        with pytest.raises(api.FailedWatcherModificationError) as modify_info:
            watcher.modify_events(events)
        assert modify_info.value.code == api.ErrorCode.NOSUPPORT
        assert isinstance(modify_info.value, api.FailedPollOperationError)
    with pytest.raises(api.FailedWatcherModificationError):
        watcher.modify(e.READ | flag, "new")
    assert watcher.data == "b"
    assert watcher.watched_events == e.READ
    a.send(b"x")
    assert reported(short_wait(ctx)) == {"b": e.READ}
    assert reported(short_wait(ctx)) == {"b": e.READ}  # still level-triggered


class ErrorRules:
    """Bad input: exception class and message for every bad-input row of SPEC; no half-adds."""

    # -- wait(timeout=...) -------------------------------------------------------------

    def test_spec_4_wait_bool_timeout_is_type_error(self, api: ModuleType, ctx: Any) -> None:
        """SPEC 4: a bool timeout is a TypeError naming timeout."""
        refuses(ctx.wait, (True, False), TypeError, "timeout")

    def test_spec_4_wait_other_timeout_types_are_type_error(
        self, api: ModuleType, ctx: Any
    ) -> None:
        """SPEC 4: a timeout that is not None/int/float/timedelta is a TypeError."""
        refuses(
            ctx.wait,
            ("1", b"1", [1], (1,), 1j, Fraction(1, 2), object()),
            TypeError,
            "timeout",
        )

    def test_spec_4_wait_negative_timeout_is_value_error(self, api: ModuleType, ctx: Any) -> None:
        """B.21, php-src poll_ctx_wait_error.phpt: a negative int timeout is a ValueError."""
        refuses(ctx.wait, (-1, -(2**70)), ValueError, "timeout")

    def test_spec_4_wait_negative_float_timeout_is_value_error(
        self, api: ModuleType, caps: Capabilities, ctx: Any
    ) -> None:
        """B.21, SPEC 4: negative float/timedelta, -inf and NaN timeouts are ValueErrors."""
        if not caps.float_timeouts:
            pytest.skip("this implementation takes whole seconds (SPEC 7)")
        refuses(
            ctx.wait,
            (-0.5, -1e-9, -math.inf, math.nan, timedelta(microseconds=-1)),
            ValueError,
            "timeout",
        )

    def test_spec_7_wait_float_timeout_whole_seconds(
        self, api: ModuleType, caps: Capabilities, ctx: Any
    ) -> None:
        """SPEC 7: where wait takes whole seconds, float/timedelta (NaN, negative too) is a
        TypeError whose message says to pass whole seconds plus microseconds."""
        if caps.float_timeouts:
            pytest.skip("this implementation takes float and timedelta timeouts")
        refuses(
            ctx.wait,
            (0.5, 0.0, -1.0, math.nan, math.inf, timedelta(seconds=1), timedelta(-1)),
            TypeError,
            "timeout",
            "microseconds",
        )

    # -- wait(microseconds=...) ------------------------------------------------------------

    def test_spec_4_wait_microseconds_type(self, api: ModuleType, ctx: Any) -> None:
        """SPEC 4: microseconds must be an int (float, str, None: TypeError)."""
        refuses(lambda bad: ctx.wait(0, bad), (1.0, 0.5, "1", None), TypeError, "microseconds")

    def test_spec_4_wait_microseconds_range(self, api: ModuleType, ctx: Any) -> None:
        """B.21, SPEC 4: microseconds outside 0..999999 is a ValueError."""
        refuses(
            lambda bad: ctx.wait(0, bad),
            (-1, 1_000_000, 2**40, -(2**40)),
            ValueError,
            "microseconds",
        )
        assert ctx.wait(0, 0) == []
        assert ctx.wait(0, 1) == []

    def test_spec_4_wait_none_with_microseconds(self, api: ModuleType, ctx: Any) -> None:
        """SPEC 4: with timeout=None, microseconds must be 0 (ValueError)."""
        refuses(lambda bad: ctx.wait(None, bad), (1, 999_999), ValueError, "microseconds")
        with pytest.raises(ValueError) as info:
            ctx.wait(microseconds=5)
        names_argument(info.value, "microseconds")

    # -- wait(max_events=...) ------------------------------------------------------------------

    def test_poll_ctx_wait_error_max_events_type(self, api: ModuleType, ctx: Any) -> None:
        """SPEC 4: max_events that is not None or an int (bool included) is a TypeError."""
        refuses(
            lambda bad: ctx.wait(0, 0, bad),
            (True, False, 1.0, 4.5, "4", [4]),
            TypeError,
            "max_events",
        )

    def test_poll_ctx_wait_error(self, api: ModuleType, ctx: Any) -> None:
        """B.22, php-src poll_ctx_wait_error.phpt: max_events <= 0 is a ValueError."""
        refuses(lambda bad: ctx.wait(0, 0, bad), (0, -1, -(2**63)), ValueError, "max_events")

    def test_poll_ctx_wait_error_int64(self, api: ModuleType, ctx: Any) -> None:
        """B.22, php-src poll_ctx_wait_error_int64.phpt: max_events > 2**31-1 is a ValueError."""
        refuses(
            lambda bad: ctx.wait(0, max_events=bad),
            (2**31, 2**63, 2**100),
            ValueError,
            "max_events",
        )
        assert ctx.wait(0, max_events=2**31 - 1) == []

    def test_spec_4_wait_bad_arguments_on_empty_context(self, api: ModuleType, ctx: Any) -> None:
        """SPEC 4: arguments are checked even when the context has no watcher."""
        assert len(ctx) == 0
        with pytest.raises(ValueError):
            ctx.wait(-1)
        with pytest.raises(ValueError):
            ctx.wait(0, 0, 0)
        with pytest.raises(TypeError):
            ctx.wait(None, 0, True)

    # -- add(events=...) / modify(events) ----------------------------------------------------

    def test_spec_4_add_empty_events_is_value_error(
        self, api: ModuleType, ctx: Any, pair: tuple[Any, Any]
    ) -> None:
        """SPEC 4: empty events (an empty iterable or Event(0)) is a ValueError naming events."""
        empties: list[Any] = [[], (), set(), api.Event(0)]
        refuses(lambda bad: ctx.add(pair[0], bad), empties, ValueError, "events")
        assert len(ctx) == 0

    def test_spec_4_add_non_event_is_type_error(
        self, api: ModuleType, ctx: Any, pair: tuple[Any, Any]
    ) -> None:
        """SPEC 4: events that are not Event values (an int too) are a TypeError naming events."""
        read = api.Event.READ
        refuses(
            lambda bad: ctx.add(pair[0], bad),
            (1, int(read), "READ", None, 1.0, [1], [read, 2], [None], [read, "WRITE"]),
            TypeError,
            "events",
        )
        assert len(ctx) == 0

    def test_spec_5_modify_bad_events(
        self, api: ModuleType, ctx: Any, pair: tuple[Any, Any]
    ) -> None:
        """SPEC 4-5: modify/modify_events check events like add does."""
        watcher = ctx.add(pair[0], api.Event.WRITE, "w")
        for method in (watcher.modify, watcher.modify_events):
            empties: list[Any] = [[], api.Event(0)]
            refuses(method, empties, ValueError, "events")
            refuses(method, (2, "WRITE", [2], None), TypeError, "events")
        assert watcher.watched_events == api.Event.WRITE
        assert watcher.data == "w"

    # -- add(handle) / StreamPollHandle(stream) / Context(backend) ----------------------------

    def test_spec_4_add_bad_handle_type(self, api: ModuleType, ctx: Any) -> None:
        """SPEC 3-4: a handle without fileno (not an int) is a TypeError naming handle."""
        refuses(
            lambda bad: ctx.add(bad, api.Event.READ),
            (None, "3", 3.5, b"3", _NoFileno(), [3]),
            TypeError,
            "handle",
        )
        assert len(ctx) == 0

    def test_spec_4_add_negative_fd(self, api: ModuleType, ctx: Any) -> None:
        """SPEC 3-4: a negative int handle is a ValueError naming handle."""
        with pytest.raises(ValueError) as info:
            ctx.add(-1, api.Event.READ)
        names_argument(info.value, "handle")

    def test_spec_3_stream_poll_handle_messages(self, api: ModuleType) -> None:
        """SPEC 3: StreamPollHandle's errors name its argument, stream."""
        with pytest.raises(TypeError) as info:
            api.StreamPollHandle(_NoFileno())
        names_argument(info.value, "stream")
        with pytest.raises(ValueError) as value_info:
            api.StreamPollHandle(-5)
        names_argument(value_info.value, "stream")

    def test_spec_4_context_bad_backend(self, api: ModuleType) -> None:
        """SPEC 4: a backend that is not a Backend member is a TypeError naming backend."""
        refuses(
            api.Context,
            ("epoll", "SELECT", 1, None, object()),
            TypeError,
            "backend",
        )

    # -- nothing half-registered -------------------------------------------------------------

    def test_spec_4_failed_add_leaves_nothing(
        self, api: ModuleType, ctx: Any, pair: tuple[Any, Any]
    ) -> None:
        """SPEC 4: after a failed add the fd is not registered: it can be added again."""
        a, b = pair
        failing: list[Any] = [[], "READ"]
        for bad in failing:
            with pytest.raises((TypeError, ValueError)):
                ctx.add(b, bad)
        assert len(ctx) == 0
        assert poll_now(ctx) == []
        watcher = ctx.add(b, api.Event.READ, "b")
        a.send(b"x")
        assert reported(short_wait(ctx)) == {"b": api.Event.READ}
        assert watcher.is_active()

    def test_spec_4_failed_modify_keeps_watcher(
        self, api: ModuleType, ctx: Any, pair: tuple[Any, Any]
    ) -> None:
        """SPEC 5: after a failed modify the watcher keeps its events and reports by them."""
        a, b = pair
        watcher = ctx.add(b, api.Event.READ, "b")
        for bad in ([], "WRITE", [api.Event.WRITE, 3]):
            with pytest.raises((TypeError, ValueError)):
                watcher.modify_events(bad)
        assert watcher.watched_events == api.Event.READ
        assert poll_now(ctx) == []  # not switched to WRITE, which would be ready
        a.send(b"x")
        assert reported(short_wait(ctx)) == {"b": api.Event.READ}

    # -- EDGE_TRIGGERED where unsupported ------------------------------------------------------

    def test_spec_6_5_edge_triggered_unsupported(
        self, api: ModuleType, caps: Capabilities, ctx: Any, pair: tuple[Any, Any]
    ) -> None:
        """B.18, SPEC 6.5: EDGE_TRIGGERED where unsupported: NOSUPPORT; nothing registered."""
        if caps.edge_triggering:
            pytest.skip("EDGE_TRIGGERED is supported here")
        check_flag_refused(api, ctx, pair, api.Event.EDGE_TRIGGERED)
