"""Context.add: keying by fd, duplicates, dup, several contexts (SPEC 4, 6.1)."""

from __future__ import annotations

import io
import os
import socket
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from ..support import poll_now, reported, short_wait, socketpair


class AddRules:
    """Context.add: keying by fd, duplicates, dup, several contexts (SPEC 4, 6.1)."""

    def test_poll_stream_sock_add_only(
        self, api: ModuleType, ctx: Any, pair: tuple[Any, Any]
    ) -> None:
        """B.11, php-src poll_stream_sock_add_only.phpt: add returns an active Watcher."""
        watcher = ctx.add(pair[0], api.Event.READ)
        assert isinstance(watcher, api.Watcher)
        assert watcher.is_active() is True
        assert watcher.data is None
        assert watcher.watched_events == api.Event.READ
        assert isinstance(watcher.watched_events, api.Event)
        assert watcher.triggered_events == api.Event(0)
        assert len(ctx) == 1

    def test_spec_4_add_keeps_data(self, api: ModuleType, ctx: Any, pair: tuple[Any, Any]) -> None:
        """B.11: the data given to add() is the very object .data returns."""
        data = object()
        watcher = ctx.add(pair[0], api.Event.WRITE, data)
        assert watcher.data is data
        keyword = ctx.add(pair[1], api.Event.WRITE, data=[1])
        assert keyword.data == [1]

    # -- keyed by fd ---------------------------------------------------------------------

    def test_poll_stream_add_error_duplicate(
        self, api: ModuleType, ctx: Any, pair: tuple[Any, Any]
    ) -> None:
        """B.12, php-src poll_stream_add_error_duplicate.phpt: the same handle twice."""
        handle = api.StreamPollHandle(pair[0])
        first = ctx.add(handle, api.Event.READ)
        with pytest.raises(api.HandleAlreadyWatchedError):
            ctx.add(handle, api.Event.WRITE)
        with pytest.raises(api.HandleAlreadyWatchedError):
            ctx.add(pair[0], api.Event.WRITE)  # the same stream, wrapped again
        assert first.is_active()
        assert first.watched_events == api.Event.READ
        assert len(ctx) == 1

    def test_poll_stream_add_error_duplicate_second_handle(
        self, api: ModuleType, ctx: Any, pair: tuple[Any, Any]
    ) -> None:
        """B.12, php-src poll_stream_add_error_duplicate.phpt: a second handle on the same fd."""
        ctx.add(api.StreamPollHandle(pair[0]), api.Event.READ)
        with pytest.raises(api.HandleAlreadyWatchedError):
            ctx.add(api.StreamPollHandle(pair[0]), api.Event.READ)
        with pytest.raises(api.HandleAlreadyWatchedError):
            ctx.add(api.StreamPollHandle(pair[0].fileno()), api.Event.READ)

    def test_poll_stream_oneshot_rearm_duplicate(
        self, api: ModuleType, ctx: Any, pair: tuple[Any, Any]
    ) -> None:
        """B.12, php-src poll_stream_oneshot_rearm.phpt: a fired one-shot still owns its fd."""
        watcher = ctx.add(pair[0], api.Event.WRITE | api.Event.ONESHOT)
        assert short_wait(ctx) == [watcher]
        assert poll_now(ctx) == []  # fired and disarmed
        assert watcher.is_active()
        with pytest.raises(api.HandleAlreadyWatchedError):
            ctx.add(pair[0], api.Event.WRITE)

    def test_spec_6_1_dup_fd_may_be_added(
        self, api: ModuleType, ctx: Any, pair: tuple[Any, Any]
    ) -> None:
        """B.13, SPEC 6.1: an os.dup() of a watched fd is a different key."""
        original = ctx.add(pair[1], api.Event.READ, "original")
        duplicate = socket.socket(fileno=os.dup(pair[1].fileno()))
        try:
            copy = ctx.add(duplicate, api.Event.READ, "dup")
            assert copy is not original
            assert len(ctx) == 2
            pair[0].send(b"x")
            result = short_wait(ctx)
            assert reported(result) == {"original": api.Event.READ, "dup": api.Event.READ}
            copy.remove()
        finally:
            duplicate.close()

    def test_spec_6_1_one_handle_in_several_contexts(
        self, api: ModuleType, backend: Any, ctx: Any, pair: tuple[Any, Any]
    ) -> None:
        """B.14, SPEC 6.1: one handle in two contexts: a watcher in each, both report."""
        handle = api.StreamPollHandle(pair[1])
        with api.Context(backend) as other:
            mine = ctx.add(handle, api.Event.READ, "mine")
            theirs = other.add(handle, api.Event.READ, "theirs")
            assert mine is not theirs
            assert mine.handle is theirs.handle is handle
            pair[0].send(b"x")
            assert short_wait(ctx) == [mine]
            assert short_wait(other) == [theirs]
            mine.remove()
            assert short_wait(other) == [theirs]
            assert theirs.is_active()

    def test_gh22759(self, api: ModuleType, backend: Any, pair: tuple[Any, Any]) -> None:
        """B.15, php-src gh22759.phpt: re-add after remove; context gone -> watcher inactive."""
        ctx = api.Context(backend)
        first = ctx.add(pair[1], api.Event.READ, "first")
        first.remove()
        again = ctx.add(pair[1], api.Event.READ, "again")
        assert again is not first
        assert again.is_active() and not first.is_active()
        pair[0].send(b"x")
        assert short_wait(ctx) == [again]
        assert again.data == "again"
        ctx.close()
        assert not again.is_active()
        with pytest.raises(api.InactiveWatcherError):
            again.remove()

    # -- bad handles -----------------------------------------------------------------------------

    def test_poll_stream_handle_closed_stream_add(self, api: ModuleType, ctx: Any) -> None:
        """B.16, php-src poll_stream_handle_closed_stream.phpt: a closed socket is invalid."""
        a, b = socketpair()
        handle = api.StreamPollHandle(a)
        a.close()
        b.close()
        with pytest.raises(api.InvalidHandleError):
            ctx.add(handle, api.Event.READ)
        with pytest.raises(api.InvalidHandleError):
            ctx.add(a, api.Event.READ)
        assert len(ctx) == 0

    def test_poll_stream_handle_closed_stream_add_file(
        self, api: ModuleType, ctx: Any, tmp_path: Path
    ) -> None:
        """B.16: a closed file object (fileno() raises ValueError) is an invalid handle."""
        stream = open(tmp_path / "f", "wb")  # noqa: SIM115 - closed on purpose
        stream.close()
        with pytest.raises(api.InvalidHandleError):
            ctx.add(stream, api.Event.WRITE)

    def test_spec_4_add_bytesio_is_invalid_handle(self, api: ModuleType, ctx: Any) -> None:
        """B.16, SPEC 4: io.BytesIO (fileno() fails, like php://memory) is an invalid handle."""
        for stream in (io.BytesIO(b"data"), io.StringIO("data")):
            with pytest.raises(api.InvalidHandleError):
                ctx.add(stream, api.Event.READ)
        assert len(ctx) == 0

    def test_spec_4_add_third_party_handle_failing(self, api: ModuleType, ctx: Any) -> None:
        """SPEC 4: a Handle whose fileno() fails or is negative is an invalid handle."""

        class Broken(api.Handle):  # type: ignore[name-defined,misc]
            def __init__(self, answer: int | None) -> None:
                self.answer = answer

            def fileno(self) -> int:
                if self.answer is None:
                    raise OSError("no fd here")
                return self.answer

        for handle in (Broken(None), Broken(-1)):
            with pytest.raises(api.InvalidHandleError):
                ctx.add(handle, api.Event.READ)
        assert len(ctx) == 0

    # -- events ----------------------------------------------------------------------------------

    @pytest.fixture
    def event_forms(self, api: ModuleType) -> Iterator[list[tuple[Any, Any]]]:
        """(events argument, expected watched_events) pairs."""
        e = api.Event
        yield [
            (e.READ, e.READ),
            (e.READ | e.WRITE, e.READ | e.WRITE),
            ([e.READ, e.WRITE], e.READ | e.WRITE),
            ((e.WRITE,), e.WRITE),
            ({e.READ, e.ONESHOT}, e.READ | e.ONESHOT),
            (frozenset([e.WRITE]), e.WRITE),
            ([e.READ, e.READ, e.READ], e.READ),
            ([e.READ | e.WRITE, e.WRITE], e.READ | e.WRITE),
            ((x for x in (e.READ, e.HANGUP)), e.READ | e.HANGUP),
        ]

    def test_spec_4_events_forms(
        self, api: ModuleType, ctx: Any, event_forms: list[tuple[Any, Any]]
    ) -> None:
        """B.19, SPEC 4: events is an Event or an iterable of them (their union), normalised."""
        for events, expected in event_forms:
            a, b = socketpair()
            try:
                watcher = ctx.add(a, events)
                assert watcher.watched_events == expected, events
                assert type(watcher.watched_events) is api.Event
                watcher.remove()
            finally:
                a.close()
                b.close()

    def test_spec_4_add_int_fd(self, api: ModuleType, ctx: Any, pair: tuple[Any, Any]) -> None:
        """SPEC 4: add() takes an int fd, wrapped in a StreamPollHandle."""
        watcher = ctx.add(pair[1].fileno(), api.Event.READ)
        assert isinstance(watcher.handle, api.StreamPollHandle)
        assert watcher.handle.fileno() == pair[1].fileno()
        pair[0].send(b"x")
        assert short_wait(ctx) == [watcher]
        watcher.remove()

    def test_spec_4_add_many(self, api: ModuleType, ctx: Any) -> None:
        """SPEC 4: many handles in one context, each its own watcher, all reported."""
        pairs = [socketpair() for _ in range(10)]
        try:
            watchers = [ctx.add(b, api.Event.WRITE, i) for i, (_, b) in enumerate(pairs)]
            assert len(ctx) == 10
            result = short_wait(ctx)
            assert sorted(w.data for w in result) == list(range(10))
            assert {id(w) for w in result} == {id(w) for w in watchers}
        finally:
            for a, b in pairs:
                a.close()
                b.close()
