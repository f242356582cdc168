"""WeakHandle and StreamPollWeakHandle: watching a stream without keeping it alive (SPEC 10).

A stream "collected" here is a socket whose last reference the case dropped: CPython frees
it (and closes its fd) at once; ``gc.collect()`` makes sure.  The ResourceWarning an
unclosed socket gives on the way is expected and silenced.
"""

from __future__ import annotations

import gc
import socket
import warnings
import weakref
from types import ModuleType
from typing import Any

import pytest

from ..streams import closing_all
from ..support import poll_now, reported, short_wait, socketpair
from .timers import require


def _collect() -> None:
    """Collect garbage, without the ResourceWarning of the unclosed sockets it frees."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()


def _listen_removed(ctx: Any) -> list[Any] | None:
    """A list ``ctx.on_watcher_removed`` appends to, or None where there is no such method."""
    if getattr(ctx, "on_watcher_removed", None) is None:
        return None
    removed: list[Any] = []
    ctx.on_watcher_removed(removed.append)
    return removed


class WeakHandleRules:
    """WeakHandle, StreamPollWeakHandle (SPEC 10): one per stream, never keeps it alive."""

    def test_poll_weakhandle_interface(self, api: ModuleType, pair: tuple[Any, Any]) -> None:
        """B.70, php-src poll_weakhandle_interface.phpt, SPEC 10: StreamPollWeakHandle is a
        WeakHandle and a Handle; StreamPollHandle is not a WeakHandle; WeakHandle is an
        abstract Handle."""
        weak_handle = require(api, "WeakHandle")
        stream_poll_weak_handle = require(api, "StreamPollWeakHandle")
        handle = stream_poll_weak_handle.create(pair[0])
        assert isinstance(handle, weak_handle)
        assert isinstance(handle, api.Handle)
        assert issubclass(weak_handle, api.Handle)
        assert issubclass(stream_poll_weak_handle, weak_handle)
        assert not isinstance(api.StreamPollHandle(pair[0]), weak_handle)
        with pytest.raises(TypeError):
            weak_handle()

    def test_poll_weakhandle_exposure(self, api: ModuleType, ctx: Any) -> None:
        """B.69, php-src poll_weakhandle_exposure.phpt, SPEC 10: create(s) is create(s) (one
        object per stream); .stream is s; the watcher's handle is that object; it reports
        as a strong handle would; once closed, is_valid() is false, the watcher inactive,
        and adding it again an InvalidHandleError."""
        weak = require(api, "StreamPollWeakHandle")
        a, b = socketpair()
        with closing_all(a, b):
            handle = weak.create(b)
            assert weak.create(b) is handle
            assert weak.create(a) is not handle
            assert handle.stream is b
            assert handle.is_valid()
            assert handle.fileno() == b.fileno()
            watcher = ctx.add(handle, api.Event.READ, "b")
            assert watcher.handle is handle
            assert poll_now(ctx) == []
            a.send(b"x")
            assert reported(short_wait(ctx)) == {"b": api.Event.READ}
            b.close()
            assert not handle.is_valid()
            assert not watcher.is_active()
            watcher.remove()  # retired with its stream: a no-op (SPEC 5)
            with pytest.raises(api.InvalidHandleError):
                ctx.add(handle, api.Event.READ)
            assert short_wait(ctx) == []
            assert len(ctx) == 0

    def test_spec_10_weak_handle_is_one_per_stream_by_identity(
        self, api: ModuleType, ctx: Any
    ) -> None:
        """SPEC 10: "one object per stream" is per object, not per equal value: two streams
        that compare equal get a handle each, each watching its own fd; a stream that is not
        hashable gets one too."""
        weak = require(api, "StreamPollWeakHandle")

        class Stream:  # equal by name, as a user's wrapper may be
            def __init__(self, sock: socket.socket, name: str) -> None:
                self.sock, self.name = sock, name

            def fileno(self) -> int:
                return self.sock.fileno()

            def __eq__(self, other: object) -> bool:
                return isinstance(other, Stream) and other.name == self.name

            def __hash__(self) -> int:
                return hash(self.name)

        class Unhashable(Stream):
            __hash__ = None  # type: ignore[assignment]

        a, b = socketpair()
        c, d = socketpair()
        with closing_all(a, b, c, d):
            old, new = Stream(b, "same"), Stream(d, "same")
            assert old == new
            handle_old, handle_new = weak.create(old), weak.create(new)
            assert handle_new is not handle_old
            assert handle_new.stream is new and handle_new.fileno() == d.fileno()
            assert weak.create(new) is handle_new
            watcher = ctx.add(handle_new, api.Event.READ, "new")
            c.send(b"x")
            assert reported(short_wait(ctx)) == {"new": api.Event.READ}
            watcher.remove()
            odd = Unhashable(b, "odd")
            assert weak.create(odd) is weak.create(odd)

    def test_poll_weakhandle_getstream_null(self, api: ModuleType) -> None:
        """B.69, php-src poll_weakhandle_getstream_null.phpt, SPEC 10: once the stream is
        collected, .stream is None and is_valid() is false."""
        weak = require(api, "StreamPollWeakHandle")
        a, b = socketpair()
        with closing_all(a):
            handle = weak.create(b)
            stream = weakref.ref(b)
            del b
            _collect()
            assert stream() is None
            assert handle.stream is None
            assert not handle.is_valid()

    def test_poll_weakhandle_stream_gc(self, api: ModuleType, ctx: Any) -> None:
        """B.71, php-src poll_weakhandle_stream_gc.phpt, SPEC 10.

        While the stream lives, the context keeps watcher and handle alive (and reports
        them); the watcher does not keep the stream alive; once it is collected the watcher
        leaves the context at its next wait (inactive, never reported, on_watcher_removed
        told).
        """
        weak = require(api, "StreamPollWeakHandle")
        a, b = socketpair()
        with closing_all(a):
            handle = weak.create(b)
            watcher = ctx.add(handle, api.Event.READ, "weak")
            handle_ref, watcher_ref, stream_ref = (
                weakref.ref(handle),
                weakref.ref(watcher),
                weakref.ref(b),
            )
            del handle, watcher
            gc.collect()
            assert handle_ref() is not None and watcher_ref() is not None
            a.send(b"x")
            assert [w.data for w in short_wait(ctx)] == ["weak"]
            removed = _listen_removed(ctx)
            del b
            _collect()
            assert stream_ref() is None
            assert short_wait(ctx) == []
            assert len(ctx) == 0
            if removed is not None:
                assert [w.data for w in removed] == ["weak"]
                assert not removed[0].is_active()
                assert removed[0].handle.stream is None

    def test_poll_weakhandle_multiple_contexts(self, api: ModuleType, backend: Any) -> None:
        """B.14, B.71, php-src poll_weakhandle_multiple_contexts.phpt, SPEC 10: one weak
        handle in two contexts; once its stream is collected it leaves each of them at
        that context's next wait."""
        weak = require(api, "StreamPollWeakHandle")
        a, b = socketpair()
        with closing_all(a), api.Context(backend) as first, api.Context(backend) as second:
            handle = weak.create(b)
            watchers = [
                first.add(handle, api.Event.WRITE, 1),
                second.add(handle, api.Event.WRITE, 2),
            ]
            removed = [_listen_removed(first), _listen_removed(second)]
            assert reported(short_wait(first)) == {1: api.Event.WRITE}
            assert reported(short_wait(second)) == {2: api.Event.WRITE}
            del b
            _collect()
            assert handle.stream is None
            assert poll_now(first) == []
            assert poll_now(second) == []
            for watcher, heard in zip(watchers, removed, strict=True):
                assert not watcher.is_active()
                if heard is not None:
                    assert heard == [watcher]
            assert len(first) == len(second) == 0

    @pytest.mark.parametrize("how", ["close", "gc"])
    def test_poll_weakhandle_context_destroyed_first(
        self, api: ModuleType, backend: Any, how: str
    ) -> None:
        """B.72, B.43, php-src poll_weakhandle_context_destroyed_first.phpt, SPEC 4 and 10:
        the context goes first (closed or collected): the watcher is inactive (remove():
        InactiveWatcherError); closing the stream later is safe."""
        weak = require(api, "StreamPollWeakHandle")
        a, b = socketpair()
        with closing_all(a, b):
            context = api.Context(backend)
            handle = weak.create(b)
            watcher = context.add(handle, api.Event.READ, "b")
            if how == "close":
                context.close()
            else:
                del context
                gc.collect()
            assert not watcher.is_active()
            b.close()
            assert not handle.is_valid()
            with pytest.raises(api.InactiveWatcherError):
                watcher.remove()
            assert watcher.handle is handle

    def test_poll_weakhandle_readd_after_remove(self, api: ModuleType, ctx: Any) -> None:
        """B.15, php-src poll_weakhandle_readd_after_remove.phpt: a weak handle removed can
        be added again; the new watcher is reported, and goes with its stream."""
        weak = require(api, "StreamPollWeakHandle")
        a, b = socketpair()
        with closing_all(a, b):
            handle = weak.create(b)
            old = ctx.add(handle, api.Event.READ, "old")
            old.remove()
            new = ctx.add(handle, api.Event.READ, "new")
            a.send(b"x")
            assert reported(short_wait(ctx)) == {"new": api.Event.READ}
            assert not old.is_active() and new.is_active()
            b.close()
            assert not new.is_active()
            assert short_wait(ctx) == []

    def test_spec_10_weak_handle_on_socket_object(self, api: ModuleType) -> None:
        """SPEC 10: create() takes a stream and is one object per stream, whatever stream:
        two sockets give two handles, each holding its own stream."""
        weak = require(api, "StreamPollWeakHandle")
        pairs = [socket.socketpair() for _ in range(2)]
        with closing_all(*(end for pair in pairs for end in pair)):
            handles = [weak.create(end) for pair in pairs for end in pair]
            assert len({id(h) for h in handles}) == 4
            assert [h.stream for h in handles] == [end for pair in pairs for end in pair]
            again = [weak.create(end) for pair in pairs for end in pair]
            assert all(x is y for x, y in zip(again, handles, strict=True))
