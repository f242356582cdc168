"""Closed streams, dup'd and reused fds, fds closed behind the handle's back (SPEC 6.8, 6.9)."""

from __future__ import annotations

import gc
import os
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from typing import Any

import pytest

from ..process import within
from ..streams import closing_all, recv_exactly, socketpair_on_fd
from ..support import Capabilities, poll_now, reported, short_wait, socketpair, timed, waits

# Long enough for any machine; a wait(None) that blocks for good is ended by SIGALRM then.
_HANG = 5.0


@contextmanager
def _dup_of(sock: socket.socket) -> Iterator[int]:
    """A dup of ``sock``'s fd, closed on exit: it keeps the socket open after ``sock`` closes."""
    duplicate = os.dup(sock.fileno())
    try:
        yield duplicate
    finally:
        os.close(duplicate)


def _read_fd(fd: int, size: int) -> bytes:
    """Read from a raw fd (a dup of a socket), waiting briefly for the bytes to arrive."""
    with socket.socket(fileno=os.dup(fd)) as sock:
        sock.setblocking(False)
        return recv_exactly(sock, size)


class ClosedStreamRules:
    """Closed streams, dup'd and reused fds, fds closed behind the handle's back (SPEC 6.8, 6.9)."""

    # -- a closed stream's watcher is retired (6.8) ----------------------------------------

    def test_poll_stream_close_retires_watcher(self, api: Any, ctx: Any) -> None:
        """B.59, php-src poll_stream_close_retires_watcher.phpt: never returned after close.

        Data was pending on it, and another watcher is ready alongside.
        """
        a, b = socketpair()
        other_a, other_b = socketpair()
        with closing_all(a, b, other_a, other_b):
            watcher = ctx.add(b, api.Event.READ, "closed")
            ctx.add(other_a, api.Event.WRITE, "other")
            a.send(b"pending")
            assert reported(short_wait(ctx)) == {"closed": api.Event.READ, "other": api.Event.WRITE}
            b.close()
            assert not watcher.is_active()
            assert len(ctx) == 1
            assert waits(ctx, 2) == [{"other": api.Event.WRITE}] * 2

    def test_poll_stream_closed_watcher_inactive(self, api: Any, ctx: Any, pair: Any) -> None:
        """B.60, php-src poll_stream_closed_watcher_inactive.phpt, SPEC 5 and 6.8.

        remove() is a no-op (twice); modify, modify_events and modify_data raise
        InactiveWatcherError; the getters keep working.
        """
        a, _b = pair
        watcher = ctx.add(a, api.Event.WRITE, "data")
        a.close()
        assert not watcher.is_active()
        watcher.remove()
        watcher.remove()
        with pytest.raises(api.InactiveWatcherError):
            watcher.modify_events(api.Event.READ)
        with pytest.raises(api.InactiveWatcherError):
            watcher.modify(api.Event.READ, "new")
        with pytest.raises(api.InactiveWatcherError):
            watcher.modify_data("new")
        assert watcher.data == "data"
        assert watcher.watched_events == api.Event.WRITE
        assert watcher.handle.stream is a
        assert not watcher.is_active()
        assert short_wait(ctx) == []

    def test_poll_stream_handle_closed_stream(self, api: Any, ctx: Any, pair: Any) -> None:
        """B.61, php-src poll_stream_handle_closed_stream.phpt: the handle after its stream closed.

        is_valid() is false, .stream is still the (closed) object, and adding it again is
        an InvalidHandleError.
        """
        a, _b = pair
        handle = api.StreamPollHandle(a)
        watcher = ctx.add(handle, api.Event.READ, "a")
        assert handle.is_valid()
        a.close()
        assert not handle.is_valid()
        assert handle.stream is a
        assert not watcher.is_active()
        with pytest.raises(api.InvalidHandleError):
            ctx.add(handle, api.Event.READ, "again")
        with pytest.raises(api.InvalidHandleError):
            ctx.add(a, api.Event.READ, "again")
        assert len(ctx) == 0

    def test_spec_6_8_closed_fired_oneshot(self, api: Any, ctx: Any) -> None:
        """SPEC 6.4 and 6.8: a fired one-shot whose stream closes is retired like any other."""
        a, b = socketpair()
        with closing_all(a, b):
            watcher = ctx.add(b, [api.Event.READ, api.Event.ONESHOT], "b")
            a.send(b"x")
            assert short_wait(ctx) == [watcher]
            assert watcher.is_active()
            b.close()
            assert not watcher.is_active()
            watcher.remove()
            with pytest.raises(api.InactiveWatcherError):
                watcher.modify_events([api.Event.READ, api.Event.ONESHOT])
            assert short_wait(ctx) == []

    def test_spec_6_8_closed_leftover_not_returned(self, api: Any, ctx: Any) -> None:
        """SPEC 4 and 6.8: a watcher left out by max_events whose stream closes never comes out."""
        pairs = [socketpair() for _ in range(3)]
        with closing_all(*(end for p in pairs for end in p)):
            for index, (a, _b) in enumerate(pairs):
                ctx.add(a, api.Event.WRITE, index)
            first = ctx.wait(0, 200_000, 1)
            assert len(first) == 1
            left_out = [index for index in range(3) if index != first[0].data]
            pairs[left_out[0]][0].close()
            seen = [reported(ctx.wait(0, 200_000, 1)) for _ in range(4)]
            assert all(len(result) == 1 for result in seen)
            assert all(left_out[0] not in result for result in seen)
            assert {left_out[1], first[0].data} <= {i for r in seen for i in r}

    def test_poll_stream_close_multi_context(self, api: Any, backend: Any, ctx: Any) -> None:
        """B.14 and B.59, php-src poll_stream_close_multi_context.phpt.

        The same stream watched in two contexts retires in both when it is closed.
        """
        a, b = socketpair()
        with closing_all(a, b), api.Context(backend) as second:
            first_watcher = ctx.add(b, api.Event.READ, "first")
            second_watcher = second.add(b, api.Event.READ, "second")
            a.send(b"x")
            assert reported(short_wait(ctx)) == {"first": api.Event.READ}
            assert reported(short_wait(second)) == {"second": api.Event.READ}
            b.close()
            assert short_wait(ctx) == []
            assert short_wait(second) == []
            assert not first_watcher.is_active()
            assert not second_watcher.is_active()
            first_watcher.remove()
            second_watcher.remove()
            assert len(ctx) == len(second) == 0

    @pytest.mark.parametrize("keep_dup", [False, True])
    def test_spec_4_wait_none_once_every_stream_closed(
        self, api: Any, ctx: Any, keep_dup: bool
    ) -> None:
        """SPEC 4 and 6.8: streams closed without remove() leave no active watcher, so
        wait(None) returns [] at once, as with none added.

        epoll forgets a closed fd without a word (or, with a dup open, keeps an entry that
        is never ready): a backend that waits on the OS alone sleeps for good here.
        """
        pairs = [socketpair() for _ in range(3)]
        with closing_all(*(end for pair in pairs for end in pair)):
            kept = _dup_of(pairs[0][0]) if keep_dup else nullcontext()
            with kept:
                watchers = [ctx.add(a, api.Event.READ, index) for index, (a, _) in enumerate(pairs)]
                for a, _ in pairs:
                    a.close()
                result, elapsed = within(_HANG, lambda: timed(lambda: ctx.wait(None)), "wait(None)")
                assert result == [] and elapsed < _HANG
                assert not any(watcher.is_active() for watcher in watchers)
                assert len(ctx) == 0

    def test_spec_6_8_wait_none_waits_for_the_open_stream_behind_closed_ones(
        self, api: Any, ctx: Any
    ) -> None:
        """SPEC 6.8: streams closed without remove() ahead of an open one that is not ready
        yet: wait(None) sleeps until the open one is ready, and reports only it."""
        closed = [socketpair() for _ in range(3)]
        a, b = socketpair()
        with closing_all(a, b, *(end for pair in closed for end in pair)):
            gone = [ctx.add(end, api.Event.READ, "gone") for end, _ in closed]
            live = ctx.add(b, api.Event.READ, "live")
            for end, _ in closed:
                end.close()
            started = time.monotonic()  # before the sender's clock starts (see wait.py)
            sender = threading.Timer(0.2, a.send, (b"x",))
            sender.start()
            try:
                result, _ = within(_HANG, lambda: timed(lambda: ctx.wait(None)), "wait(None)")
                elapsed = time.monotonic() - started
            finally:
                sender.cancel()
                sender.join()
            assert result == [live] and elapsed >= 0.1
            assert not any(watcher.is_active() for watcher in gone)
            assert len(ctx) == 1

    @pytest.mark.parametrize(
        "order", ["stream-watcher-context", "stream-context", "context-stream", "gc"]
    )
    def test_poll_stream_handle_close_then_free(
        self, api: Any, backend: Any, order: str
    ) -> None:
        """B.65, php-src poll_stream_handle_close_then_free.phpt: any closing order is safe."""
        a, b = socketpair()
        with closing_all(a, b):
            context = api.Context(backend)
            watcher = context.add(b, api.Event.READ, "b")
            a.send(b"x")
            if order == "stream-watcher-context":
                b.close()
                assert not watcher.is_active()
                del watcher
                gc.collect()
                assert context.wait(0, 0) == []
                context.close()
            elif order == "stream-context":
                b.close()
                context.close()
                assert not watcher.is_active()
                watcher.remove()  # retired by the close before the context went: a no-op
            elif order == "context-stream":
                context.close()
                b.close()
                assert not watcher.is_active()
                with pytest.raises(api.InactiveWatcherError):
                    watcher.remove()  # removed with its context before the stream closed
                context.close()
            else:
                b.close()
                del context
                gc.collect()
                assert not watcher.is_active()
                watcher.remove()  # retired by the close: a no-op, context or not

    # -- dup'd fds and reused fd numbers (6.8) ----------------------------------------------

    @pytest.mark.parametrize("waited", [False, True])
    def test_spec_6_8_closed_stream_never_returned_with_dup(
        self, api: Any, ctx: Any, waited: bool
    ) -> None:
        """B.62, php-src poll_stream_close_dup_fd.phpt, SPEC 6.8.

        A dup of the fd keeps the socket open after the watched stream is closed; data
        pending on it, before and after the close, never makes wait() return the watcher.
        ``waited``: whether a wait had reported it (so the OS registration is live).
        """
        a, b = socketpair()
        with closing_all(a, b), _dup_of(b) as duplicate:
            watcher = ctx.add(b, api.Event.READ, "b")
            a.send(b"before")
            if waited:
                assert short_wait(ctx) == [watcher]
            b.close()
            assert waits(ctx, 2) == [{}, {}]
            a.send(b"after")
            assert waits(ctx, 2) == [{}, {}]
            assert not watcher.is_active()
            assert _read_fd(duplicate, 11) == b"beforeafter"

    @pytest.mark.parametrize("observed", [False, True])
    def test_poll_stream_closed_fd_reuse(self, api: Any, ctx: Any, observed: bool) -> None:
        """B.63, php-src poll_stream_closed_fd_reuse.phpt, SPEC 6.8.

        A new stream that gets the closed stream's fd number can be added and is reported
        with its own data; the old watcher is inactive and removing it does no harm.
        ``observed``: whether anything looked at the old watcher between close and reuse.
        """
        old, old_peer = socketpair()
        with closing_all(old, old_peer):
            old_watcher = ctx.add(old, api.Event.READ, "old")
            old_peer.send(b"old data")
            assert short_wait(ctx) == [old_watcher]
            number = old.fileno()
            old.close()
            if observed:
                assert short_wait(ctx) == []
            new, new_peer = socketpair_on_fd(number)
            with closing_all(new, new_peer):
                assert new.fileno() == number
                new_watcher = ctx.add(new, api.Event.READ, "new")
                assert not old_watcher.is_active()
                assert new_watcher.is_active()
                assert poll_now(ctx) == []
                new_peer.send(b"new data")
                result = short_wait(ctx)
                assert result == [new_watcher]
                assert new_watcher.triggered_events == api.Event.READ
                old_watcher.remove()
                assert new_watcher.is_active()
                assert len(ctx) == 1
                assert waits(ctx, 2) == [{"new": api.Event.READ}] * 2
                assert recv_exactly(new, 8) == b"new data"
                assert poll_now(ctx) == []

    @pytest.mark.parametrize("observed", [False, True])
    def test_poll_stream_closed_dup_fd(self, api: Any, ctx: Any, observed: bool) -> None:
        """B.62 and B.63, php-src poll_stream_closed_dup_fd.phpt, SPEC 6.8.

        The closed stream's socket lives on in a dup; a new stream reuses the fd number and
        is watched.  Data for the old socket (on the dup) must not be reported for the new
        watcher; the new stream's own data is.
        """
        old, old_peer = socketpair()
        with closing_all(old, old_peer), _dup_of(old) as duplicate:
            old_watcher = ctx.add(old, api.Event.READ, "old")
            old_peer.send(b"x")
            assert reported(short_wait(ctx)) == {"old": api.Event.READ}
            number = old.fileno()
            old.close()
            if observed:  # noticed now; a wait could let a rebuild take the fd number
                assert not old_watcher.is_active()
            new, new_peer = socketpair_on_fd(number)
            with closing_all(new, new_peer):
                new_watcher = ctx.add(new, api.Event.READ, "new")
                assert waits(ctx, 2) == [{}, {}]
                old_peer.send(b"for the dup")
                assert waits(ctx, 2) == [{}, {}]
                new_peer.send(b"own")
                assert short_wait(ctx) == [new_watcher]
                assert new_watcher.triggered_events == api.Event.READ
                assert recv_exactly(new, 3) == b"own"
                assert poll_now(ctx) == []
                assert _read_fd(duplicate, 12) == b"xfor the dup"

    @pytest.mark.parametrize("keep_dup", [False, True])
    def test_poll_stream_closed_fd_reuse_unwatched(
        self, api: Any, ctx: Any, keep_dup: bool
    ) -> None:
        """B.64, php-src poll_stream_closed_fd_reuse_unwatched.phpt, SPEC 6.8.

        An unwatched stream that gets a closed watched stream's fd number is never
        reported, and its data stays readable.
        """
        old, old_peer = socketpair()
        kept_open = _dup_of(old) if keep_dup else nullcontext()
        with closing_all(old, old_peer), kept_open:
            old_watcher = ctx.add(old, [api.Event.READ, api.Event.WRITE], "old")
            assert reported(short_wait(ctx)) == {"old": api.Event.WRITE}
            number = old.fileno()
            old.close()
            new, new_peer = socketpair_on_fd(number)
            with closing_all(new, new_peer):
                new_peer.send(b"unwatched")
                assert waits(ctx, 2) == [{}, {}]
                assert not old_watcher.is_active()
                assert len(ctx) == 0
                assert recv_exactly(new, 9) == b"unwatched"

    def test_spec_6_8_fd_reuse_by_lowest_free_number(self, api: Any, ctx: Any) -> None:
        """SPEC 6.8: the fd number reused the ordinary way (lowest free) by a new socketpair."""
        old, old_peer = socketpair()
        with closing_all(old, old_peer):
            old_watcher = ctx.add(old, api.Event.READ, "old")
            number = old.fileno()
            old.close()
            new, new_peer = socketpair()
            with closing_all(new, new_peer):
                if number not in (new.fileno(), new_peer.fileno()):
                    pytest.skip(f"fd {number} was not reused (got {new.fileno()})")
                reused = new if new.fileno() == number else new_peer
                other = new_peer if reused is new else new
                watcher = ctx.add(reused, api.Event.READ, "reused")
                assert not old_watcher.is_active()
                assert poll_now(ctx) == []
                other.send(b"hi")
                assert short_wait(ctx) == [watcher]
                assert reported([watcher]) == {"reused": api.Event.READ}

    # -- fds closed behind the handle's back (6.9) -------------------------------------------

    def test_poll_backend_poll_nval(self, api: Any, backend: Any, ctx: Any) -> None:
        """B.39, php-src poll_backend_poll_nval.phpt, SPEC 6.9: raw os.close() of a watched fd.

        wait() never raises; the watcher is reported at most once, with ERROR (exactly
        once on POLL and SELECT), and never again; other watchers keep being reported.
        """
        a, b = socketpair()
        other_a, other_b = socketpair()
        fd = a.detach()
        with closing_all(b, other_a, other_b):
            raw = ctx.add(api.StreamPollHandle(fd), api.Event.READ, "raw")
            ctx.add(other_a, api.Event.WRITE, "other")
            b.send(b"x")
            assert reported(short_wait(ctx)) == {"raw": api.Event.READ, "other": api.Event.WRITE}
            os.close(fd)
            results = waits(ctx, 4)
            raw_reports = [r["raw"] for r in results if "raw" in r]
            assert len(raw_reports) <= 1
            assert all(events == api.Event.ERROR for events in raw_reports)
            if backend.name in ("POLL", "SELECT"):
                assert raw_reports == [api.Event.ERROR]
                assert raw.triggered_events == api.Event.ERROR
            # The other watcher is not starved (select may report the bad fd on its own).
            assert all(r.get("other") == api.Event.WRITE for r in results[1:])
            assert results[-1] == {"other": api.Event.WRITE}

    def test_spec_6_9_raw_close_only_watcher(
        self, api: Any, backend: Any, caps: Capabilities, ctx: Any
    ) -> None:
        """SPEC 6.9: the only watcher's fd closed behind its back: waits end, nothing raises.

        A pipe's read end; a socket's fd where only sockets can be watched (SPEC 2).
        """
        if caps.sockets_only:
            reader, writer = socketpair()
            read_fd, write_fd = reader.detach(), writer.detach()
        else:
            read_fd, write_fd = os.pipe()
        try:
            ctx.add(api.StreamPollHandle(read_fd), api.Event.READ, "raw")
            os.write(write_fd, b"x")
            assert reported(short_wait(ctx)) == {"raw": api.Event.READ}
            os.close(read_fd)
            results = waits(ctx, 3)
            raw_reports = [r["raw"] for r in results if r]
            assert len(raw_reports) <= 1
            assert all(events == api.Event.ERROR for events in raw_reports)
            if backend.name in ("POLL", "SELECT"):
                assert raw_reports == [api.Event.ERROR]
        finally:
            os.close(write_fd)

    def test_spec_4_a_closed_streams_report_does_not_stretch_the_wait(
        self, api: Any, ctx: Any
    ) -> None:
        """SPEC 4: a wait lasts its timeout at most.  A report about a stream closed behind
        a dup, which comes half-way through (1 s into a 2 s wait) and is dropped, lets the
        wait go on for the time that is left, not for the whole timeout again (3 s)."""
        a, b = socketpair()
        idle, idle_peer = socketpair()
        keep = os.dup(a.fileno())
        try:
            with closing_all(b, idle, idle_peer):
                ctx.add(a, api.Event.READ, "closed")
                ctx.add(idle, api.Event.READ, "idle")
                a.close()  # its file lives on through `keep`
                timer = threading.Timer(1.0, b.send, (b"x",))
                timer.start()
                try:
                    result, elapsed = timed(lambda: ctx.wait(2))
                finally:
                    timer.cancel()
                    timer.join()
        finally:
            os.close(keep)
        assert result == []
        assert elapsed < 2.6, elapsed
