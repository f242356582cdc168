"""Bytes buffered in the stream (TLS pending()) (SPEC 6.6)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from ..streams import close_all, fd_idle, recv_exactly, tls_with_pending, wait_readable
from ..support import Capabilities, poll_now, reported, short_wait, socketpair, waits

# PHP's stream read buffer maps to the bytes an ssl.SSLSocket holds decrypted (pending()):
# tls_with_pending() leaves 9 of a 10-byte record there while the fd itself is idle.


@contextmanager
def _pending_tls(count: int = 1) -> Iterator[list[tuple[Any, Any]]]:
    pairs = [tls_with_pending() for _ in range(count)]
    try:
        yield pairs
    finally:
        close_all(*(end for p in pairs for end in p))


@contextmanager
def _two_buffered_one_ready(api: Any, ctx: Any, pair: Any) -> Iterator[None]:
    """READ watchers ``tls0`` and ``tls1`` with buffered bytes, and ``plain``, fd-readable."""
    a, b = pair
    with _pending_tls(2) as pairs:
        for index, (client, _server) in enumerate(pairs):
            ctx.add(client, api.Event.READ, f"tls{index}")
        ctx.add(b, api.Event.READ, "plain")
        a.send(b"x")
        yield


class BufferedRules:
    """Bytes buffered in the stream (TLS pending()) (SPEC 6.6)."""

    def test_poll_stream_buffered_level(self, api: Any, ctx: Any) -> None:
        """B.53, php-src poll_stream_buffered_level.phpt: buffered bytes are READ, level.

        Reported at once though the fd is idle, on every wait while bytes stay buffered,
        and no more once they are consumed.
        """
        with _pending_tls() as [(client, _server)]:
            watcher = ctx.add(client, api.Event.READ, "tls")
            assert poll_now(ctx) == [watcher]
            assert watcher.triggered_events == api.Event.READ
            assert waits(ctx, 3) == [{"tls": api.Event.READ}] * 3
            assert client.recv(4) == b"1234"  # partly consumed: still buffered
            assert reported(poll_now(ctx)) == {"tls": api.Event.READ}
            assert client.recv(100) == b"56789"
            assert client.pending() == 0
            assert poll_now(ctx) == []
            assert short_wait(ctx) == []

    def test_poll_stream_buffered_level_write_only(self, api: Any, ctx: Any) -> None:
        """B.54, php-src poll_stream_buffered_level.phpt: buffered bytes matter only to READ.

        A WRITE watcher sees WRITE without READ; switched back to READ the buffer counts.
        """
        with _pending_tls() as [(client, _server)]:
            watcher = ctx.add(client, api.Event.WRITE, "tls")
            assert waits(ctx, 2) == [{"tls": api.Event.WRITE}] * 2
            watcher.modify_events(api.Event.READ)
            assert reported(poll_now(ctx)) == {"tls": api.Event.READ}
            watcher.modify_events([api.Event.READ, api.Event.WRITE])
            assert reported(poll_now(ctx)) == {"tls": api.Event.READ | api.Event.WRITE}
            assert client.pending() == 9  # polling consumed nothing

    def test_poll_stream_buffered_edge(self, api: Any, caps: Capabilities, ctx: Any) -> None:
        """B.55, php-src poll_stream_buffered_edge.phpt: edge-triggered ignores buffered bytes.

        Buffered bytes are state, not a transition; a new edge on the fd is reported.
        """
        if not caps.edge_triggering:
            pytest.skip("backend does not support EDGE_TRIGGERED")
        with _pending_tls() as [(client, server)]:
            ctx.add(client, [api.Event.READ, api.Event.EDGE_TRIGGERED], "tls")
            assert short_wait(ctx) == []
            assert short_wait(ctx) == []
            server.sendall(b"more")
            wait_readable(client)
            assert reported(short_wait(ctx)) == {"tls": api.Event.READ}
            assert short_wait(ctx) == []
            assert recv_exactly(client, 13) == b"123456789more"

    @pytest.mark.parametrize(("max_events", "count"), [(1, 1), (2, 2), (None, 3), (3, 3)])
    def test_poll_stream_buffered_max_events(
        self, api: Any, ctx: Any, pair: Any, max_events: int | None, count: int
    ) -> None:
        """B.56, php-src poll_stream_buffered_max_events.phpt: buffered reports count.

        Two buffered watchers and one fd-ready one: max_events 1 gives 1, 2 gives 2,
        the default and 3 give 3.
        """
        with _two_buffered_one_ready(api, ctx, pair):
            every = {"tls0": api.Event.READ, "tls1": api.Event.READ, "plain": api.Event.READ}
            for _ in range(2):
                result = ctx.wait(0, 200_000, max_events)
                assert len(result) == count
                assert len(set(map(id, result))) == count
                assert all(every[w.data] == w.triggered_events for w in result)
            assert reported(short_wait(ctx)) == every

    @pytest.mark.parametrize("max_events", [1, 2])
    def test_spec_6_6_buffered_left_out_come_next(
        self, api: Any, ctx: Any, pair: Any, max_events: int
    ) -> None:
        """SPEC 4 and 6.6: what max_events leaves out, buffered or not, comes out next.

        Two buffered watchers and one fd-ready one stay ready: three waits of one, or two
        waits of two, see all three (no watcher starves behind the buffered ones).
        """
        with _two_buffered_one_ready(api, ctx, pair):
            seen: list[str] = []
            for _ in range(3 if max_events == 1 else 2):
                result = reported(ctx.wait(0, 200_000, max_events))
                assert len(result) == max_events
                assert set(result.values()) == {api.Event.READ}
                seen.extend(result)
            assert set(seen) == {"tls0", "tls1", "plain"}
            if max_events == 1:
                assert len(seen) == 3

    def test_poll_stream_buffered_merge(self, api: Any, ctx: Any) -> None:
        """B.57, php-src poll_stream_buffered_merge.phpt: buffer and fd readiness merge.

        The same watcher is returned once with READ once; another watcher alongside.
        """
        other_a, other_b = socketpair()
        try:
            with _pending_tls() as [(client, server)]:
                tls = ctx.add(client, [api.Event.READ, api.Event.WRITE], "tls")
                ctx.add(other_b, api.Event.READ, "other")
                server.sendall(b"second record")
                other_a.send(b"y")
                wait_readable(client)
                assert not fd_idle(client.fileno())
                result = short_wait(ctx)
                assert len(result) == 2
                assert result.count(tls) == 1
                assert reported(result) == {
                    "tls": api.Event.READ | api.Event.WRITE,
                    "other": api.Event.READ,
                }
                assert recv_exactly(client, 22) == b"123456789second record"
                after = {"tls": api.Event.WRITE, "other": api.Event.READ}
                assert reported(short_wait(ctx)) == after
        finally:
            close_all(other_a, other_b)

    def test_poll_stream_buffered_oneshot(self, api: Any, ctx: Any) -> None:
        """B.58, php-src poll_stream_buffered_oneshot.phpt: a one-shot fires once from the buffer.

        Then it is disarmed for both buffer and fd, stays active; a re-arm reports the
        buffer at once (once); drained and re-armed, it waits for the fd.
        """
        with _pending_tls() as [(client, server)]:
            oneshot = [api.Event.READ, api.Event.ONESHOT]
            watcher = ctx.add(client, oneshot, "tls")
            assert poll_now(ctx) == [watcher]
            assert watcher.triggered_events == api.Event.READ
            assert poll_now(ctx) == []
            server.sendall(b"fd data")
            wait_readable(client)
            assert waits(ctx, 2) == [{}, {}]  # disarmed for the fd too
            assert watcher.is_active()
            watcher.modify_events(oneshot)
            assert reported(poll_now(ctx)) == {"tls": api.Event.READ}
            assert poll_now(ctx) == []
            assert recv_exactly(client, 16) == b"123456789fd data"
            watcher.modify_events(oneshot)
            assert short_wait(ctx) == []
            server.sendall(b"new")
            wait_readable(client)
            assert reported(short_wait(ctx)) == {"tls": api.Event.READ}
            assert short_wait(ctx) == []

    def test_spec_6_6_buffered_closed_tls_retired(self, api: Any, ctx: Any) -> None:
        """SPEC 6.6 and 6.8: a closed TLS stream with buffered bytes is never reported."""
        with _pending_tls(2) as [(closed, _s1), (kept, _s2)]:
            watcher = ctx.add(closed, api.Event.READ, "closed")
            ctx.add(kept, api.Event.READ, "kept")
            assert reported(poll_now(ctx)) == {"closed": api.Event.READ, "kept": api.Event.READ}
            closed.close()
            assert not watcher.is_active()
            assert waits(ctx, 2) == [{"kept": api.Event.READ}] * 2
            assert len(ctx) == 1

    def test_spec_6_6_one_buffered_byte_is_readable(self, api: Any, ctx: Any) -> None:
        """SPEC 3 and 6.6: one byte buffered in the stream makes it readable."""
        client, server = tls_with_pending(b"ab")
        try:
            assert client.pending() == 1
            watcher = ctx.add(client, api.Event.READ, "tls")
            assert poll_now(ctx) == [watcher]
        finally:
            close_all(client, server)

    def test_spec_6_4_a_one_shot_rearmed_reports_buffered_bytes_again(
        self, api: Any, ctx: Any
    ) -> None:
        """SPEC 6.4 and 6.6: buffered bytes fire a one-shot once; modify_events re-arms it,
        and the bytes still buffered are reported at once."""
        with _pending_tls() as [(client, _server)]:
            events = api.Event.READ | api.Event.ONESHOT
            watcher = ctx.add(client, events, "tls")
            assert poll_now(ctx) == [watcher]
            assert poll_now(ctx) == []
            watcher.modify_events(events)
            assert poll_now(ctx) == [watcher]
