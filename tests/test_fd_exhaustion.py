"""Running out of file descriptors (RLIMIT_NOFILE): a clear error, nothing lost, and the
context usable once fds are free again.

Only the epoll rebuild needs a new fd inside iopoll (a fresh epoll object); registering
with epoll, poll or select needs none.  Each test fills the process's fd table up to a
lowered limit with ``/dev/null`` descriptors, then frees them.
"""

from __future__ import annotations

import asyncio
import os
import socket
from typing import Any

import pytest

import iopoll
import iopoll.aio
from fd_limit import no_fd_left
from iopoll import Backend, ErrorCode, Event


@pytest.mark.parametrize("backend", Backend.available_backends(), ids=lambda b: b.name)
def test_add_and_wait_need_no_fd(backend: Backend, pairs: Any) -> None:
    a, b = pairs()
    with iopoll.Context(backend) as ctx, no_fd_left():
        watcher = ctx.add(a, Event.READ, data="a")
        b.send(b"x")
        assert ctx.wait(0) == [watcher]
        watcher.modify_events(Event.WRITE)
        assert ctx.wait(0) == [watcher]
        watcher.remove()
        assert len(ctx) == 0


@pytest.mark.skipif(not Backend.EPOLL.is_available(), reason="only epoll rebuilds")
def test_a_rebuild_refused_during_add_loses_nothing(pairs: Any, keepers: list[int]) -> None:
    """SPEC 4's rebuild on a reused fd number, with no fd for a new epoll object: the add
    fails with TOOBIG, the other watchers are untouched, and it succeeds once fds are free."""
    a, _ = pairs()
    c, _ = pairs()
    with iopoll.Context(Backend.EPOLL) as ctx:
        ready = ctx.add(c, Event.WRITE, data="c")
        old = ctx.add(a, Event.READ)
        number = a.fileno()
        keepers.append(os.dup(number))
        a.close()  # without remove(): its epoll entry outlives it
        e, f = pairs()
        reused, peer = (e, f) if e.fileno() == number else (f, e)
        if reused.fileno() != number:
            pytest.skip("the fd number was not reused")
        with no_fd_left():
            with pytest.raises(iopoll.FailedHandleAddError) as caught:
                ctx.add(reused, Event.READ)
            assert caught.value.code is ErrorCode.TOOBIG
            assert not old.is_active()
            assert ctx.wait(0) == [ready]
            assert len(ctx) == 1
        added = ctx.add(reused, Event.READ)  # fds are free again: it works
        assert set(ctx.wait(0)) == {ready}
        peer.send(b"x")
        assert set(ctx.wait(0)) == {ready, added}


@pytest.mark.skipif(not Backend.EPOLL.is_available(), reason="only epoll rebuilds")
def test_a_rebuild_refused_during_wait_reports_what_is_ready_then_fails_clearly(
    pairs: Any, keepers: list[int]
) -> None:
    """A stale entry's report makes wait() rebuild; without a free fd the ready watchers
    still come out, a wait with nothing else ready is FailedPollWaitError TOOBIG, and the
    context works again once fds are free."""
    a, b = pairs()
    c, d = pairs()
    with iopoll.Context(Backend.EPOLL) as ctx:
        closed = ctx.add(a, Event.READ)
        b.send(b"x")  # the entry stays ready after the close
        keepers.append(os.dup(a.fileno()))
        a.close()
        assert not closed.is_active()  # retired; its kernel entry is stale
        writable = ctx.add(c, Event.WRITE)
        with no_fd_left():
            assert ctx.wait(0) == [writable]
            writable.modify_events(Event.READ)  # nothing ready but the stale entry
            with pytest.raises(iopoll.FailedPollWaitError) as caught:
                ctx.wait(0)
            assert caught.value.code is ErrorCode.TOOBIG
        assert ctx.wait(0) == []  # rebuilt now: the stale entry is gone
        d.send(b"y")
        assert ctx.wait(0) == [writable]
        assert len(ctx) == 1


def test_an_aio_server_accepting_at_the_fd_limit_recovers() -> None:
    """asyncio's own answer to EMFILE in accept() (stop accepting, retry a second later)
    runs through IoPollSelector: the client that waited is served once fds are free."""

    async def main() -> list[bytes]:
        async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            writer.write(await reader.read(100))
            await writer.drain()
            writer.close()

        loop: Any = asyncio.get_running_loop()
        errors: list[dict[str, Any]] = []
        loop.set_exception_handler(lambda _loop, context: errors.append(context))
        server = await asyncio.start_server(echo, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        early = socket.create_connection(("127.0.0.1", port))  # made before the limit
        answers = []
        with no_fd_left():
            early.sendall(b"first")
            await asyncio.sleep(0.3)  # the server's accept() fails with EMFILE here
        early.setblocking(False)
        answers.append(await loop.sock_recv(early, 100))
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"second")
        answers.append(await reader.read(100))
        writer.close()
        early.close()
        server.close()
        await server.wait_closed()
        assert any("accept" in str(e.get("message", "")).lower() for e in errors), errors
        return answers

    assert iopoll.aio.run(main()) == [b"first", b"second"]


@pytest.mark.parametrize(
    "backend",
    [b for b in Backend.available_backends() if b.supports_signal_handles()],
    ids=lambda b: b.name,
)
def test_a_signal_handle_whose_fd_cannot_be_made_is_a_refused_add(backend: Backend) -> None:
    """A SignalHandle makes its signalfd at the first add: EMFILE there is that add failing
    (SPEC 6.10: TOOBIG), not an invalid handle, and nothing is blocked or registered."""
    signal = pytest.importorskip("signal")
    before = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    handle = iopoll.SignalHandle([signal.SIGUSR1])
    with iopoll.Context(backend) as ctx:
        with no_fd_left(), pytest.raises(iopoll.FailedHandleAddError) as info:
            ctx.add(handle, Event.SIGNAL)
        assert info.value.code == ErrorCode.TOOBIG
        assert len(ctx) == 0
        assert signal.pthread_sigmask(signal.SIG_BLOCK, []) == before
        watcher = ctx.add(handle, Event.SIGNAL)  # fds free again: the same handle is added
        assert signal.SIGUSR1 in signal.pthread_sigmask(signal.SIG_BLOCK, [])
        watcher.remove()
    assert signal.pthread_sigmask(signal.SIG_BLOCK, []) == before
