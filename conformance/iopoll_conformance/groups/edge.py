"""EDGE_TRIGGERED: transitions once, or NOSUPPORT (SPEC 6.5)."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from ..streams import close_all, drain, fill, recv_exactly
from ..support import Capabilities, poll_now, reported, short_wait, socketpair, waits
from .extras import spec_6_2_examples_stated


def _need_edge(caps: Capabilities) -> None:
    if not caps.edge_triggering:
        pytest.skip("backend does not support EDGE_TRIGGERED")


class EdgeRules:
    """EDGE_TRIGGERED: transitions once, or NOSUPPORT (SPEC 6.5)."""

    def test_spec_6_5_edge_refused_without_support(
        self, api: Any, backend: Any, caps: Capabilities, ctx: Any, pair: Any
    ) -> None:
        """B.18, SPEC 6.5: add/modify with EDGE_TRIGGERED raise NOSUPPORT where unsupported."""
        if caps.edge_triggering:
            pytest.skip("backend supports EDGE_TRIGGERED")
        assert not backend.supports_edge_triggering()
        a, _b = pair
        with pytest.raises(api.FailedHandleAddError) as add_error:
            ctx.add(a, [api.Event.READ, api.Event.EDGE_TRIGGERED], "a")
        assert add_error.value.code == api.ErrorCode.NOSUPPORT
        assert len(ctx) == 0
        watcher = ctx.add(a, api.Event.WRITE, "a")  # nothing half-registered
        with pytest.raises(api.FailedWatcherModificationError) as modify_error:
            watcher.modify_events([api.Event.WRITE, api.Event.EDGE_TRIGGERED])
        assert modify_error.value.code == api.ErrorCode.NOSUPPORT
        assert watcher.watched_events == api.Event.WRITE
        # The watcher is unchanged: still level-triggered.
        assert waits(ctx, 2) == [{"a": api.Event.WRITE}] * 2

    def test_poll_stream_sock_rw_single_edge(
        self, api: Any, caps: Capabilities, ctx: Any, pair: Any
    ) -> None:
        """B.51, php-src poll_stream_sock_rw_single_edge.phpt: initial writability once."""
        _need_edge(caps)
        a, _b = pair
        watcher = ctx.add(a, [api.Event.WRITE, api.Event.EDGE_TRIGGERED], "a")
        assert reported(short_wait(ctx)) == {"a": api.Event.WRITE}
        assert not watcher.has_triggered(api.Event.EDGE_TRIGGERED)
        assert waits(ctx, 2) == [{}, {}]
        assert watcher.is_active()

    def test_poll_stream_sock_rw_multi_edge(
        self, api: Any, backend: Any, caps: Capabilities, ctx: Any, strict_extras_on: bool
    ) -> None:
        """B.52 and B.36, php-src poll_stream_sock_rw_multi_edge.phpt.

        Data arrival is one READ edge; undrained data is not reported again; more data is a
        new edge.  On Linux the writer sees a new WRITE edge once the reader consumed data.
        A reader closed after draining gives the writer WRITE|HANGUP (SPEC 6.2 example 2:
        where SPEC states it).
        """
        _need_edge(caps)
        writer, reader = socketpair()
        try:
            et = api.Event.EDGE_TRIGGERED
            ctx.add(writer, [api.Event.WRITE, et], "writer")
            ctx.add(reader, [api.Event.READ, et], "reader")
            assert reported(short_wait(ctx)) == {"writer": api.Event.WRITE}
            assert poll_now(ctx) == []
            writer.send(b"one")
            assert reported(short_wait(ctx)) == {"reader": api.Event.READ}
            assert waits(ctx, 2) == [{}, {}]  # not drained, yet no new edge
            writer.send(b"two")
            assert reported(short_wait(ctx)) == {"reader": api.Event.READ}
            assert short_wait(ctx) == []
            assert recv_exactly(reader, 6) == b"onetwo"
            after_read = reported(short_wait(ctx))
            if sys.platform == "linux":
                # Consuming frees the writer's buffer space: a new WRITE edge.
                assert after_read == {"writer": api.Event.WRITE}
            else:
                assert set(after_read) <= {"writer"}
            assert short_wait(ctx) == []
            if not (spec_6_2_examples_stated(backend, caps) or strict_extras_on):
                return
            reader.close()
            assert reported(short_wait(ctx)) == {"writer": api.Event.WRITE | api.Event.HANGUP}
            assert short_wait(ctx) == []
        finally:
            close_all(writer, reader)

    def test_spec_6_5_edge_write_after_buffer_full(
        self, api: Any, caps: Capabilities, ctx: Any, pair: Any
    ) -> None:
        """SPEC 6.5: a full send buffer that drains is a WRITE transition, reported once."""
        _need_edge(caps)
        a, b = pair
        ctx.add(a, [api.Event.WRITE, api.Event.EDGE_TRIGGERED], "a")
        assert reported(short_wait(ctx)) == {"a": api.Event.WRITE}
        fill(a)
        assert short_wait(ctx) == []
        drain(b)
        assert reported(short_wait(ctx)) == {"a": api.Event.WRITE}
        assert short_wait(ctx) == []

    def test_spec_6_5_edge_modify_to_edge_and_back(
        self, api: Any, caps: Capabilities, ctx: Any, pair: Any
    ) -> None:
        """SPEC 6.3 and 6.5: a level watcher switched to edge mode stops reporting the state
        that has not changed; switched back, it is reported on every wait again.

        Whether the switch itself reports the current state once is not stated (a strict
        extra, ``test_spec_6_5_edge_modify_reports_current_state_once``): at most once.
        """
        _need_edge(caps)
        a, b = pair
        watcher = ctx.add(b, api.Event.READ, "b")
        a.send(b"x")
        assert waits(ctx, 2) == [{"b": api.Event.READ}] * 2
        watcher.modify_events([api.Event.READ, api.Event.EDGE_TRIGGERED])
        assert watcher.watched_events == api.Event.READ | api.Event.EDGE_TRIGGERED
        assert reported(short_wait(ctx)) in ({}, {"b": api.Event.READ})
        assert short_wait(ctx) == []
        # Back to level: reported on every wait again.
        watcher.modify_events(api.Event.READ)
        assert waits(ctx, 2) == [{"b": api.Event.READ}] * 2

    def test_spec_6_5_edge_oneshot(self, api: Any, caps: Capabilities, ctx: Any, pair: Any) -> None:
        """SPEC 6.4 and 6.5: EDGE_TRIGGERED with ONESHOT fires once; a re-arm waits for an edge."""
        _need_edge(caps)
        a, b = pair
        events = [api.Event.READ, api.Event.EDGE_TRIGGERED, api.Event.ONESHOT]
        watcher = ctx.add(b, events, "b")
        a.send(b"x")
        assert reported(short_wait(ctx)) == {"b": api.Event.READ}
        a.send(b"y")
        assert short_wait(ctx) == []  # an edge, but the one-shot is disarmed
        assert watcher.is_active()
        watcher.modify_events(events)
        # Re-registering evaluates the state once (data is there), then edges only.
        assert reported(short_wait(ctx)) == {"b": api.Event.READ}
        assert short_wait(ctx) == []
