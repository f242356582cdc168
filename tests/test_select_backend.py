"""The SELECT mechanism, as the polyfill and iopoll's native ``Backend.SELECT`` share it.

Rules common to every backend live in the conformance suite; here are the ones that exist
because select() reports only "readable" and "writable" (SPEC 7, and 6.11 for the native
SELECT backend): hang-up and reset found with ``FIONREAD``/``MSG_PEEK``, the ``FD_SETSIZE``
refusal, and never spinning on bytes a watcher did not ask for.  Every test runs against
both implementations, written in the whole-seconds form that both accept.
"""

from __future__ import annotations

import errno
import math
import os
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from types import ModuleType
from typing import Any

import pytest

import iopoll
from fd_limit import raised_fd_limit
from iopoll_conformance.streams import closing_all, drain, fill
from iopoll_conformance.support import reported, socketpair, tcp_pair
from iopoll_polyfill import fallback

# (module, make a SELECT context) for each implementation of the mechanism.
IMPLEMENTATIONS: dict[str, tuple[ModuleType, Callable[[], Any]]] = {
    "polyfill": (fallback, fallback.Context),
    "native": (iopoll, lambda: iopoll.Context(iopoll.Backend.SELECT)),
}


@pytest.fixture(params=sorted(IMPLEMENTATIONS))
def impl(request: pytest.FixtureRequest) -> tuple[ModuleType, Callable[[], Any]]:
    return IMPLEMENTATIONS[request.param]


@pytest.fixture
def api(impl: tuple[ModuleType, Callable[[], Any]]) -> ModuleType:
    return impl[0]


@pytest.fixture
def ctx(impl: tuple[ModuleType, Callable[[], Any]]) -> Iterator[Any]:
    context = impl[1]()
    assert context.backend.name == "SELECT"
    yield context
    context.close()


@pytest.fixture(params=["unix", "tcp"])
def pair(request: pytest.FixtureRequest) -> Iterator[tuple[socket.socket, socket.socket]]:
    """A connected non-blocking pair, AF_UNIX or loopback TCP, closed afterwards."""
    ends = socketpair() if request.param == "unix" else tcp_pair()
    with closing_all(*ends):
        yield ends


def wait_short(ctx: Any) -> dict[Any, Any]:
    return reported(ctx.wait(0, 500_000))


def reset(sock: socket.socket) -> None:
    """Close ``sock`` so that its peer sees a reset: RST on TCP (SO_LINGER 0), and
    ECONNRESET on AF_UNIX (it closes with unread data, sent by ``send_first``)."""
    if sock.family != socket.AF_UNIX:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


# -- hang-up and reset, found by FIONREAD and MSG_PEEK (SPEC 7) ------------------------------


@pytest.mark.parametrize("how", ["shutdown", "close_after_reading"])
def test_half_close_is_hangup_plus_read_if_asked(
    api: ModuleType, impl: Any, pair: tuple[socket.socket, socket.socket], how: str
) -> None:
    """The peer's end of file: HANGUP (READ added when asked), never READ_HANGUP, every wait."""
    local, peer = pair
    E = api.Event
    # One fd per context: the WRITE watcher lives in a second one.
    with impl[1]() as ctx, impl[1]() as other:
        ctx.add(local, E.READ | E.READ_HANGUP, "reader")
        other.add(local, E.WRITE, "writer")
        assert wait_short(ctx) == {}
        if how == "shutdown":
            peer.shutdown(socket.SHUT_WR)
        else:
            local.send(b"read me")
            time.sleep(0.05)
            assert peer.recv(100) == b"read me"
            peer.close()
        for _ in range(2):  # level-triggered: the end of file stays
            assert wait_short(ctx) == {"reader": E.READ | E.HANGUP}
            assert reported(other.wait(0, 500_000)) == {"writer": E.WRITE | E.HANGUP}
        assert local.recv(10) == b""


def test_a_full_socket_whose_peer_shut_down_its_side_is_not_reported_to_a_writer(
    api: ModuleType, impl: Any, pair: tuple[socket.socket, socket.socket]
) -> None:
    """A writer's fd is in select()'s read set only for its hang-up: an end of file there
    that leaves the socket unwritable is the peer's shutdown(SHUT_WR), which poll does not
    report either.  Reported, it woke a writer on a full socket at every wait (an asyncio
    loop on SELECT spun until the peer read)."""
    local, peer = pair
    E = api.Event
    fill(local)
    with impl[1]() as ctx, impl[1]() as other:
        ctx.add(local, E.READ, "reader")
        other.add(local, E.WRITE, "writer")
        peer.shutdown(socket.SHUT_WR)
        time.sleep(0.05)
        for _ in range(2):
            assert wait_short(ctx) == {"reader": E.READ | E.HANGUP}
            assert wait_short(other) == {}
        drain(peer)  # room again: the hang-up comes with WRITE, as in the test above
        time.sleep(0.05)
        assert wait_short(other) == {"writer": E.WRITE | E.HANGUP}


def test_a_full_unix_socket_whose_peer_shut_down_both_sides_is_a_hangup_to_a_writer(
    api: ModuleType, impl: Any
) -> None:
    """The same against an AF_UNIX peer's shutdown(SHUT_RDWR): that is a hang-up (poll's
    POLLHUP; a send fails with EPIPE), reported to a writer even without room to write."""
    local, peer = socketpair()
    with closing_all(local, peer):
        E = api.Event
        fill(local)
        with impl[1]() as ctx:
            ctx.add(local, E.WRITE, "writer")
            peer.shutdown(socket.SHUT_RDWR)
            for _ in range(2):
                assert wait_short(ctx) == {"writer": E.HANGUP}


def test_reset_is_error_hangup_until_the_error_is_read(
    api: ModuleType, impl: Any, pair: tuple[socket.socket, socket.socket]
) -> None:
    """A reset: ERROR|HANGUP on every wait while the socket error is pending, for every
    context (waiting reads no error), then READ|HANGUP once the application has read it.
    READ is added only to the end-of-file report, as select() alone cannot tell."""
    local, peer = pair
    E = api.Event
    with impl[1]() as ctx, impl[1]() as other:
        ctx.add(local, E.READ, "reader")
        other.add(local, E.WRITE, "writer")
        local.send(b"never read")  # AF_UNIX: unread data makes the close a reset
        time.sleep(0.05)
        reset(peer)
        for _ in range(2):
            assert wait_short(ctx) == {"reader": E.ERROR | E.HANGUP}
            assert reported(other.wait(0, 500_000)) == {"writer": E.WRITE | E.ERROR | E.HANGUP}
        with pytest.raises(ConnectionResetError):
            local.recv(100)
        assert wait_short(ctx) == {"reader": E.READ | E.HANGUP}
        assert reported(other.wait(0, 500_000)) == {"writer": E.WRITE | E.HANGUP}


def test_reset_seen_first_by_write_watcher(
    api: ModuleType, ctx: Any, pair: tuple[socket.socket, socket.socket]
) -> None:
    """A WRITE-only watcher sees the reset as WRITE|ERROR|HANGUP, then, once the error is
    read (``SO_ERROR``), WRITE|HANGUP."""
    local, peer = pair
    E = api.Event
    ctx.add(local, E.WRITE, "writer")
    local.send(b"never read")
    time.sleep(0.05)
    reset(peer)
    assert wait_short(ctx) == {"writer": E.WRITE | E.ERROR | E.HANGUP}
    assert local.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == errno.ECONNRESET
    assert wait_short(ctx) == {"writer": E.WRITE | E.HANGUP}


def test_refused_connect_keeps_its_error_for_the_application(api: ModuleType, ctx: Any) -> None:
    """A non-blocking connect() that is refused: WRITE|ERROR|HANGUP, and SO_ERROR still
    says ECONNREFUSED afterwards; a wait that read the error would make the connect look
    successful (asyncio's sock_connect() reads exactly that SO_ERROR)."""
    E = api.Event
    with socket.create_server(("127.0.0.1", 0)) as listener:
        address = listener.getsockname()  # closed now: nothing listens there
    with socket.socket() as sock:
        sock.setblocking(False)
        assert sock.connect_ex(address) == errno.EINPROGRESS
        ctx.add(sock, E.WRITE, "connecting")
        for _ in range(2):
            assert reported(ctx.wait(1)) == {"connecting": E.WRITE | E.ERROR | E.HANGUP}
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == errno.ECONNREFUSED
        assert reported(ctx.wait(1)) == {"connecting": E.WRITE | E.HANGUP}


def test_a_socket_that_never_connected_is_a_hangup_not_an_error(
    api: ModuleType, ctx: Any
) -> None:
    """A TCP socket that was never connected has no peer and no error (SO_ERROR 0): poll(2)
    says POLLHUP, and so does every native backend.  The peek that finds hang-ups fails
    there with ENOTCONN, which is not the reset its other failures are."""
    with socket.socket() as sock:
        ctx.add(sock, api.Event.READ, "unconnected")
        for _ in range(2):
            assert reported(ctx.wait(1)) == {"unconnected": api.Event.HANGUP}
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0


def test_data_before_end_of_file_is_read_until_drained(
    api: ModuleType, ctx: Any, pair: tuple[socket.socket, socket.socket]
) -> None:
    """Bytes left to read come first: READ alone, HANGUP only once they are read."""
    local, peer = pair
    E = api.Event
    ctx.add(local, E.READ, "reader")
    peer.send(b"last words")
    peer.shutdown(socket.SHUT_WR)
    time.sleep(0.05)
    assert wait_short(ctx) == {"reader": E.READ}
    assert local.recv(100) == b"last words"
    assert wait_short(ctx) == {"reader": E.READ | E.HANGUP}


def test_pipe_end_of_file_and_broken_pipe(api: ModuleType, ctx: Any) -> None:
    """A pipe at end of file is HANGUP alone (as poll() says); the write end of a pipe
    whose reader is gone is WRITE|ERROR."""
    E = api.Event
    read_fd, write_fd = os.pipe()
    other_read, other_write = os.pipe()
    try:
        ctx.add(read_fd, E.READ, "reader")
        ctx.add(other_write, E.WRITE, "writer")
        os.write(write_fd, b"abc")
        os.close(write_fd)
        os.close(other_read)
        assert wait_short(ctx) == {"reader": E.READ, "writer": E.WRITE | E.ERROR}
        assert os.read(read_fd, 10) == b"abc"
        for _ in range(2):
            assert wait_short(ctx) == {"reader": E.HANGUP, "writer": E.WRITE | E.ERROR}
    finally:
        ctx.close()
        os.close(read_fd)
        os.close(other_write)


def test_regular_file_is_always_ready(api: ModuleType, ctx: Any, tmp_path: Any) -> None:
    E = api.Event
    path = tmp_path / "plain.txt"
    path.write_bytes(b"")  # even empty: select() says readable, and a read never blocks
    with open(path, "rb") as reader, open(path, "ab") as writer:
        ctx.add(reader, E.READ, "reader")
        ctx.add(writer, E.READ | E.WRITE, "writer")
        for _ in range(3):
            assert reported(ctx.wait(0)) == {"reader": E.READ, "writer": E.READ | E.WRITE}


def test_listening_socket_is_read_never_hangup(api: ModuleType, ctx: Any) -> None:
    """A listener has no end of file: a pending connection is READ, every wait until
    accepted, and nothing at all before."""
    E = api.Event
    with socket.create_server(("127.0.0.1", 0)) as listener:
        listener.setblocking(False)
        ctx.add(listener, E.READ, "listener")
        assert reported(ctx.wait(0)) == {}
        client = socket.create_connection(listener.getsockname())
        try:
            for _ in range(3):
                assert wait_short(ctx) == {"listener": E.READ}
            conn, _ = listener.accept()
            conn.close()
            assert reported(ctx.wait(0)) == {}
        finally:
            client.close()


def test_empty_datagram_is_read_not_hangup(api: ModuleType, ctx: Any) -> None:
    E = api.Event
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    with a, b:
        ctx.add(b, E.READ, "b")
        a.send(b"")
        assert wait_short(ctx) == {"b": E.READ}
        assert b.recv(10) == b""
        assert reported(ctx.wait(0)) == {}


# -- FD_SETSIZE (SPEC 7) --------------------------------------------------------------------


@contextmanager
def fd_at_least(number: int) -> Iterator[tuple[int, socket.socket]]:
    """A socket fd numbered ``number`` (RLIMIT_NOFILE raised within the hard limit), and
    the socket at the other end of it."""
    with raised_fd_limit(number + 16):
        a, b = socket.socketpair()
        try:
            os.dup2(b.fileno(), number)
            try:
                yield number, a
            finally:
                os.close(number)
        finally:
            a.close()
            b.close()


@pytest.mark.parametrize("as_object", [False, True])
def test_fd_at_or_above_fd_setsize_is_refused(api: ModuleType, ctx: Any, as_object: bool) -> None:
    """TOOBIG, naming the limit and pointing to iopoll: never select()'s own ValueError."""
    with fd_at_least(fallback.FD_SETSIZE + 6) as (fd, _):
        handle: Any = socket.socket(fileno=fd) if as_object else fd
        try:
            with pytest.raises(api.FailedHandleAddError) as caught:
                ctx.add(handle, api.Event.READ)
        finally:
            if as_object:
                handle.detach()  # fd_at_least closes the fd
    error = caught.value
    assert error.code == api.ErrorCode.TOOBIG
    assert not isinstance(error, ValueError)
    message = str(error)
    assert "1024" in message and "FD_SETSIZE" in message
    assert "iopoll" in message and "EPOLL" in message
    assert len(ctx) == 0
    assert ctx.wait(0) == []  # nothing half-registered that select() would choke on


def test_highest_fd_below_fd_setsize_works(api: ModuleType, ctx: Any) -> None:
    assert fallback.FD_SETSIZE == 1024
    with fd_at_least(fallback.FD_SETSIZE - 1) as (fd, peer):
        watcher = ctx.add(fd, api.Event.READ, "high")
        assert ctx.wait(0) == []
        peer.send(b"?")
        assert wait_short(ctx) == {"high": api.Event.READ}
        watcher.remove()


def test_native_epoll_takes_the_fd_select_refuses() -> None:
    """The refusal's advice holds: iopoll's own backends watch fds past FD_SETSIZE."""
    native = [b for b in iopoll.Backend.available_backends() if b is not iopoll.Backend.SELECT]
    with fd_at_least(fallback.FD_SETSIZE + 6) as (fd, _):
        for backend in native:
            with iopoll.Context(backend) as ctx:
                ctx.add(fd, iopoll.Event.WRITE, "high")
                assert reported(ctx.wait(1)) == {"high": iopoll.Event.WRITE}


# -- bytes nobody asked for: no spinning (SPEC 7) -------------------------------------------


def cpu_and_wall(action: Callable[[], Any], meanwhile: Callable[[], Any] | None = None) -> Any:
    """``action()``, the CPU and wall-clock seconds it took; ``meanwhile`` (if given) is run
    by another thread 0.3 s into it."""
    helper = threading.Timer(0.3, meanwhile) if meanwhile is not None else None
    if helper is not None:
        helper.start()
    try:
        cpu, wall = time.process_time(), time.monotonic()
        result = action()
        return result, time.process_time() - cpu, time.monotonic() - wall
    finally:
        if helper is not None:
            helper.join()


def watch_writer_with_unread_input(
    api: ModuleType, ctx: Any, pair: tuple[socket.socket, socket.socket], full: bool = True
) -> socket.socket:
    """Watch the local end for WRITE only while it holds input nobody asked for (and, when
    ``full``, while its send buffer is full, so it is not writable either); return the peer."""
    local, peer = pair
    peer.send(b"unread input")
    if full:
        fill(local)
    ctx.add(local, api.Event.WRITE, "writer")
    return peer


def test_write_watcher_with_unread_input_and_full_buffer_does_not_spin(
    api: ModuleType, ctx: Any, pair: tuple[socket.socket, socket.socket]
) -> None:
    """Readable only with bytes it did not ask for, and not writable: wait(1) sleeps."""
    watch_writer_with_unread_input(api, ctx, pair)
    result, cpu, wall = cpu_and_wall(lambda: ctx.wait(1))
    assert result == []
    assert 0.9 <= wall < 3.0
    assert cpu < 0.3, f"wait(1) burnt {cpu:.2f} s of CPU: it spun on the unread input"


def test_write_watcher_with_unread_input_is_returned_at_once_when_writable(
    api: ModuleType, ctx: Any, pair: tuple[socket.socket, socket.socket]
) -> None:
    watch_writer_with_unread_input(api, ctx, pair, full=False)
    result, _, wall = cpu_and_wall(lambda: ctx.wait(1))
    assert reported(result) == {"writer": api.Event.WRITE}
    assert wall < 0.5


def test_write_watcher_with_unread_input_sees_buffer_drained_during_wait(
    api: ModuleType, ctx: Any, pair: tuple[socket.socket, socket.socket]
) -> None:
    """The unwanted bytes take the fd out of the read set, not out of the write set."""
    peer = watch_writer_with_unread_input(api, ctx, pair)
    result, cpu, wall = cpu_and_wall(lambda: ctx.wait(5), meanwhile=lambda: drain(peer))
    assert reported(result) == {"writer": api.Event.WRITE}
    assert 0.2 <= wall < 3.0
    assert cpu < 0.3


def test_unwanted_bytes_do_not_hide_other_watchers(
    api: ModuleType, ctx: Any, pair: tuple[socket.socket, socket.socket]
) -> None:
    """While one fd is parked, another that becomes ready ends the wait at once."""
    watch_writer_with_unread_input(api, ctx, pair)
    a, b = socket.socketpair()
    with a, b:
        ctx.add(b, api.Event.READ, "reader")
        result, cpu, wall = cpu_and_wall(lambda: ctx.wait(5), meanwhile=lambda: a.send(b"wake"))
        assert reported(result) == {"reader": api.Event.READ}
        assert 0.2 <= wall < 3.0
        assert cpu < 0.3


# -- timeouts: the native SELECT backend takes every form of SPEC 4 (SPEC 6.11) -------------


def test_native_select_wait_takes_float_and_timedelta() -> None:
    with iopoll.Context(iopoll.Backend.SELECT) as ctx:
        a, b = socket.socketpair()
        with a, b:
            ctx.add(b, iopoll.Event.READ, "b")
            for timeout in (0.05, timedelta(milliseconds=50)):
                start = time.monotonic()
                assert ctx.wait(timeout) == []
                assert 0.04 <= time.monotonic() - start < 1.0
            a.send(b"x")
            assert reported(ctx.wait(0.5)) == {"b": iopoll.Event.READ}
            assert reported(ctx.wait(math.inf)) == {"b": iopoll.Event.READ}
            for bad in (-0.5, math.nan, timedelta(seconds=-1)):
                with pytest.raises(ValueError):
                    ctx.wait(bad)


def test_polyfill_wait_refuses_what_native_select_takes() -> None:
    with fallback.Context() as ctx:
        for timeout in (0.05, timedelta(milliseconds=50), math.inf):
            with pytest.raises(TypeError, match="whole"):
                ctx.wait(timeout)
