"""ONESHOT: fires once, stays active, re-arms (SPEC 6.4)."""

from __future__ import annotations

from typing import Any

import pytest

from ..streams import close_all, drain, recv_exactly, wait_readable
from ..support import Capabilities, poll_now, reported, short_wait, socketpair, tcp_pair, waits
from .extras import skip_unless_spec_6_2_example


class OneShotRules:
    """ONESHOT: fires once, stays active, re-arms (SPEC 6.4)."""

    def test_poll_stream_tcp_read_one_shot(self, api: Any, ctx: Any, tcp: Any) -> None:
        """B.46 and B.31, php-src poll_stream_tcp_read_one_shot.phpt: fires once, stays active."""
        client, server = tcp
        oneshot = api.Event.READ | api.Event.ONESHOT
        watcher = ctx.add(server, oneshot, "server")
        assert watcher.watched_events == oneshot
        client.send(b"first")
        wait_readable(server)
        result = short_wait(ctx)
        assert result == [watcher] and result[0] is watcher
        # Modes are never reported.
        assert watcher.triggered_events == api.Event.READ
        assert not watcher.has_triggered(api.Event.ONESHOT)
        # Data still unread, more arrives: a fired one-shot reports neither.
        client.send(b"second")
        assert waits(ctx, 2) == [{}, {}]
        assert watcher.is_active()
        assert watcher.watched_events == oneshot
        assert watcher.triggered_events == api.Event.READ
        assert len(ctx) == 1
        assert recv_exactly(server, 11) == b"firstsecond"

    def test_poll_stream_oneshot_rearm(self, api: Any, ctx: Any, pair: Any) -> None:
        """B.12, B.46, B.47, php-src poll_stream_oneshot_rearm.phpt.

        A fired one-shot stays registered (adding its fd again is refused); modify_events
        re-arms it and readiness still pending is reported at once, once.
        """
        a, b = pair
        oneshot = [api.Event.READ, api.Event.ONESHOT]
        watcher = ctx.add(b, oneshot, "b")
        a.send(b"x")
        assert short_wait(ctx) == [watcher]
        assert poll_now(ctx) == []
        with pytest.raises(api.HandleAlreadyWatchedError):
            ctx.add(b, api.Event.READ, "again")
        with pytest.raises(api.HandleAlreadyWatchedError):
            ctx.add(api.StreamPollHandle(b), api.Event.READ, "again")
        assert len(ctx) == 1
        watcher.modify_events(oneshot)
        result = poll_now(ctx)  # still readable: reported at once
        assert result == [watcher]
        assert watcher.triggered_events == api.Event.READ
        assert poll_now(ctx) == []
        # Re-armed while idle: the next data is reported, once.
        drain(b)
        watcher.modify_events(oneshot)
        assert poll_now(ctx) == []
        a.send(b"y")
        assert reported(short_wait(ctx)) == {"b": api.Event.READ}
        assert short_wait(ctx) == []

    def test_poll_stream_oneshot_rearm_with_modify(self, api: Any, ctx: Any, pair: Any) -> None:
        """B.47, SPEC 6.4: modify() re-arms too, and the report carries the new data."""
        a, _b = pair
        watcher = ctx.add(a, [api.Event.WRITE, api.Event.ONESHOT], "old")
        assert reported(short_wait(ctx)) == {"old": api.Event.WRITE}
        assert poll_now(ctx) == []
        watcher.modify([api.Event.WRITE, api.Event.ONESHOT], "new")
        assert reported(poll_now(ctx)) == {"new": api.Event.WRITE}
        assert poll_now(ctx) == []
        # Re-armed as level-triggered: reported on every wait from now on.
        watcher.modify_events(api.Event.WRITE)
        assert waits(ctx, 3) == [{"new": api.Event.WRITE}] * 3

    def test_poll_stream_oneshot_rearm_poll_backend(self, api: Any, ctx: Any) -> None:
        """B.48, php-src poll_stream_oneshot_rearm_poll_backend.phpt.

        A disarmed one-shot reports nothing, not even its peer closing; re-armed, the
        hang-up is reported (one event).
        """
        a, b = socketpair()
        try:
            watcher = ctx.add(b, [api.Event.READ, api.Event.ONESHOT], "b")
            a.send(b"x")
            assert short_wait(ctx) == [watcher]
            drain(b)
            a.close()
            assert waits(ctx, 2) == [{}, {}]
            assert watcher.is_active()
            watcher.modify_events([api.Event.READ, api.Event.ONESHOT])
            result = short_wait(ctx)
            assert reported(result) == {"b": api.Event.READ | api.Event.HANGUP}
            assert short_wait(ctx) == []
        finally:
            close_all(a, b)

    def test_poll_stream_tcp_rw_one_shot(self, api: Any, ctx: Any, tcp: Any) -> None:
        """B.49, php-src poll_stream_tcp_rw_one_shot.phpt: [READ, WRITE, ONESHOT] in one entry."""
        client, server = tcp
        events = [api.Event.READ, api.Event.WRITE, api.Event.ONESHOT]
        ctx.add(client, events, "client")
        ctx.add(server, events, "server")
        client.send(b"hello")
        wait_readable(server)
        result = short_wait(ctx)
        assert len(result) == 2
        assert reported(result) == {
            "client": api.Event.WRITE,
            "server": api.Event.READ | api.Event.WRITE,
        }
        client.send(b"more")
        server.send(b"back")
        wait_readable(client)
        assert waits(ctx, 2) == [{}, {}]

    def test_poll_stream_tcp_rw_one_shot_mixed(self, api: Any, ctx: Any, tcp: Any) -> None:
        """B.49, php-src poll_stream_tcp_rw_one_shot_mixed.phpt: one-shot beside level."""
        client, server = tcp
        ctx.add(client, [api.Event.READ, api.Event.WRITE], "level")
        ctx.add(server, [api.Event.READ, api.Event.WRITE, api.Event.ONESHOT], "oneshot")
        client.send(b"hello")
        wait_readable(server)
        assert reported(short_wait(ctx)) == {
            "level": api.Event.WRITE,
            "oneshot": api.Event.READ | api.Event.WRITE,
        }
        server.send(b"reply")
        wait_readable(client)
        level_rw = {"level": api.Event.READ | api.Event.WRITE}
        assert waits(ctx, 2) == [level_rw, level_rw]

    def test_spec_6_4_oneshot_error_hangup_once(
        self,
        api: Any,
        backend: Any,
        caps: Capabilities,
        ctx: Any,
        pair: Any,
        strict_extras_on: bool,
    ) -> None:
        """SPEC 6.2 and 6.4: a one-shot WRITE watcher sees its peer's hang-up once, not again.

        The peer closed after reading (nothing was sent): SPEC 6.2's example 2, WRITE|HANGUP,
        checked where SPEC states it.
        """
        skip_unless_spec_6_2_example(backend, caps, strict_extras_on)
        a, b = pair
        ctx.add(a, [api.Event.WRITE, api.Event.ONESHOT], "a")
        b.close()
        assert reported(short_wait(ctx)) == {"a": api.Event.WRITE | api.Event.HANGUP}
        assert waits(ctx, 2) == [{}, {}]

    def test_poll_stream_closed_many(self, api: Any, ctx: Any) -> None:
        """B.50, php-src poll_stream_closed_many.phpt: churn beside a kept and a fired watcher.

        200 other watchers are added, fired, closed or removed (their fd numbers reused
        over and over); the kept level watcher is still reported, the fired one-shot stays
        disarmed and active; re-armed both report; a new watcher with data makes it 2 again.
        """
        keep_a, keep_b = socketpair()
        once_a, once_b = socketpair()
        extra: tuple[Any, Any] | None = None
        try:
            ctx.add(keep_a, api.Event.WRITE, "kept")
            oneshot = ctx.add(once_b, [api.Event.READ, api.Event.ONESHOT], "oneshot")
            once_a.send(b"x")
            assert reported(short_wait(ctx)) == {"kept": api.Event.WRITE, "oneshot": api.Event.READ}
            kept_only: dict[Any, Any] = {"kept": api.Event.WRITE}
            for index in range(200):
                a, b = socketpair()
                try:
                    watcher = ctx.add(b, api.Event.READ, index)
                    a.send(b"churn")
                    if index % 4 == 0:
                        churned = reported(short_wait(ctx))
                        assert churned == {**kept_only, index: api.Event.READ}
                    if index % 2:
                        watcher.remove()
                        assert not watcher.is_active()
                finally:
                    close_all(a, b)
                if index % 10 == 9:
                    assert reported(poll_now(ctx)) == kept_only
            assert reported(short_wait(ctx)) == kept_only
            assert len(ctx) == 2
            assert oneshot.is_active()
            oneshot.modify_events([api.Event.READ, api.Event.ONESHOT])
            result = short_wait(ctx)
            assert len(result) == 2
            assert reported(result) == {**kept_only, "oneshot": api.Event.READ}
            extra = socketpair()
            ctx.add(extra[1], api.Event.READ, "new")
            extra[0].send(b"fresh")
            assert reported(short_wait(ctx)) == {**kept_only, "new": api.Event.READ}
        finally:
            close_all(keep_a, keep_b, once_a, once_b, *(extra or ()))

    def test_spec_6_4_oneshot_many_fire_each_once(self, api: Any, ctx: Any) -> None:
        """SPEC 6.4: several one-shots ready at once each fire once, in one wait."""
        pairs = [tcp_pair() for _ in range(3)]
        try:
            for index, (client, server) in enumerate(pairs):
                ctx.add(server, [api.Event.READ, api.Event.ONESHOT], index)
                client.send(b"data")
                wait_readable(server)
            assert reported(short_wait(ctx)) == {i: api.Event.READ for i in range(3)}
            assert waits(ctx, 2) == [{}, {}]
            assert len(ctx) == 3
        finally:
            close_all(*(end for p in pairs for end in p))
