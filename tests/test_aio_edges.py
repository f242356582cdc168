"""``iopoll.aio`` in the corners the other aio tests leave: what asyncio and the stdlib
selectors do and ``IoPollSelector`` must match.

Each case was written against a single-point mutant of ``src/iopoll/aio.py`` that the
other tests, CPython's asyncio suites through ``iopoll.aio`` included, let through (11 of
30 tried; the others were caught, or change nothing a user can see): a cancelled writer
handle, Nagle on IPv6 sockets made with proto 0 (and, since, on MPTCP sockets), bool
timeouts, a fd number reused after POLL or SELECT retired it (given as a bare int), a
change of data alone through an equal int, ``get_map().get()`` of a closed object,
``data_received()`` raising, and a fd no C int holds.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import selectors
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest

from iopoll import Backend
from iopoll.aio import IoPollSelector, Loop

R, W = selectors.EVENT_READ, selectors.EVENT_WRITE

BOTH_DISPATCHES = [
    pytest.param(Loop, id="own selector"),
    pytest.param(lambda: Loop(IoPollSelector()), id="IoPollSelector"),
]


# -- a cancelled writer handle is dropped, as a cancelled reader handle is -----------


@pytest.mark.parametrize("make_loop", BOTH_DISPATCHES)
def test_cancelled_writer_handle_unregisters_its_fd_when_ready(make_loop: Any) -> None:
    """asyncio's _process_events removes the writer whose handle was cancelled; left
    registered, an always-writable socket makes every later select() return at once (the
    loop spins) and the key stays in the selector."""
    loop = make_loop()
    a, b = socket.socketpair()
    called: list[bool] = []
    try:
        handle = loop._add_writer(a.fileno(), called.append, True)
        handle.cancel()  # cancelled without remove_writer(): dropped at the next report
        loop.call_later(0.5, loop.stop)
        loop._run_once()
        assert called == []
        assert a.fileno() not in loop._selector.get_map()
        # And the loop no longer spins on it: a select() with a timeout now waits.
        start = time.monotonic()
        loop._selector.select(0.05)
        assert time.monotonic() - start >= 0.04
    finally:
        a.close()
        b.close()
        loop.close()


# -- Nagle is off on every TCP transport: IPv6 made with proto 0, MPTCP ---------------


def _ipv6_loopback() -> bool:
    if not socket.has_ipv6:
        return False
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            s.bind(("::1", 0))
    except OSError:
        return False
    return True


def _mptcp() -> bool:
    try:
        socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_MPTCP).close()
    except (AttributeError, OSError):  # before 3.10 on Linux, or a kernel without it
        return False
    return True


STREAMS = [
    pytest.param(
        socket.AF_INET6, "::1", 0,
        marks=pytest.mark.skipif(not _ipv6_loopback(), reason="no IPv6 loopback"),
        id="ipv6-proto-0",
    ),
    pytest.param(
        socket.AF_INET, "127.0.0.1", getattr(socket, "IPPROTO_MPTCP", -1),
        marks=pytest.mark.skipif(not _mptcp(), reason="no MPTCP here"),
        id="mptcp",
    ),
]


@pytest.mark.parametrize(("family", "host", "proto"), STREAMS)
def test_every_tcp_transport_has_nagle_off(family: int, host: str, proto: int) -> None:
    """docs/aio.md: "Nagle's algorithm is off on every TCP transport", whatever the
    socket's proto, where asyncio turns it off only for ``IPPROTO_TCP``: an AF_INET6
    listener made as socket(AF_INET6, SOCK_STREAM) has proto 0, and so have the sockets it
    accepts; an MPTCP socket (multipath TCP) has ``IPPROTO_MPTCP``."""

    async def main() -> tuple[int, int]:
        server_nodelay: list[int] = []

        def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            sock = writer.get_extra_info("socket")
            server_nodelay.append(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            writer.close()

        listener = socket.socket(family, socket.SOCK_STREAM, proto)
        listener.bind((host, 0))
        assert listener.proto == proto
        server = await asyncio.start_server(on_connect, sock=listener)
        port = listener.getsockname()[1]
        client = socket.socket(family, socket.SOCK_STREAM, proto)
        # Connected before the loop sees it: sock_connect() would resolve the address with
        # the socket's proto, which getaddrinfo() refuses for MPTCP.  The listener's backlog
        # completes a loopback connect without an accept().
        client.connect((host, port))
        client.setblocking(False)
        reader, writer = await asyncio.open_connection(sock=client)
        client_nodelay = writer.get_extra_info("socket").getsockopt(
            socket.IPPROTO_TCP, socket.TCP_NODELAY
        )
        await reader.read()  # the server closes
        writer.close()
        await writer.wait_closed()
        server.close()
        await server.wait_closed()
        return server_nodelay[0], client_nodelay

    loop = Loop()
    try:
        server_nodelay, client_nodelay = loop.run_until_complete(main())
    finally:
        loop.close()
    assert server_nodelay != 0
    assert client_nodelay != 0


# -- a bool timeout is the number it stands for, as selectors takes it ----------


@pytest.mark.parametrize("backend", Backend.available_backends(), ids=lambda b: b.name)
def test_bool_timeouts_are_one_second_and_zero(backend: Backend) -> None:
    """selectors.SelectSelector().select(True) waits 1 s and select(False) polls (the
    stdlib hands the bool to select.select()); IoPollSelector must do the same on every
    backend: the Context refuses a bool, and a False must not become 1 s either."""
    with IoPollSelector(backend) as sel:
        a, b = socket.socketpair()
        with a, b:
            sel.register(a, R)
            start = time.monotonic()
            assert sel.select(False) == []
            assert time.monotonic() - start < 0.5
            start = time.monotonic()
            assert sel.select(True) == []
            assert 0.9 <= time.monotonic() - start < 3


# -- a change of data alone for an fd the Context retired registers it again ---------


POLL_LIKE = [b for b in Backend.available_backends() if b in (Backend.POLL, Backend.SELECT)]


def _retire_a_closed_fd(loop: Loop, watch: str) -> int:
    """Register a pipe end as a bare number with asyncio, close the pipe, and let the loop
    see the closed fd once (POLLNVAL, EBADF): the Context drops its watcher, the key stays."""
    r, w = os.pipe()
    fd = r if watch == "reader" else w
    woken: list[str] = []
    if watch == "reader":
        loop.add_reader(fd, woken.append, "old")
    else:
        loop.add_writer(fd, woken.append, "old")
    os.close(r)
    os.close(w)
    loop.call_later(0.5, loop.stop)
    loop._run_once()
    assert woken == ["old"]
    return fd


@contextlib.contextmanager
def _pipe_with_end_on(fd: int, watch: str) -> Iterator[tuple[int, int]]:
    """A new pipe whose read end (``watch`` "reader") or write end is the number ``fd``,
    which a closed pipe left: moved there with dup2 when the lowest free number went to
    the other end or elsewhere.  Both ends are closed afterwards."""
    ends = list(os.pipe())
    mine = 0 if watch == "reader" else 1
    if ends[1 - mine] == fd:  # the other end took the number: give it another one
        ends[1 - mine] = os.dup(fd)
    if ends[mine] != fd:
        os.dup2(ends[mine], fd)
        os.close(ends[mine])
        ends[mine] = fd
    try:
        yield ends[0], ends[1]
    finally:
        os.close(ends[0])
        os.close(ends[1])


@pytest.mark.parametrize("backend", POLL_LIKE, ids=lambda b: b.name)
def test_add_reader_on_a_reused_fd_number_given_as_int(backend: Backend) -> None:
    """POLL and SELECT report an fd closed while registered once (POLLNVAL, EBADF) and
    the Context drops it.  add_reader() with the same bare number, now naming a new pipe,
    changes only the data of asyncio's key: the selector must register the fd again, so
    the new pipe's reader is called (and nothing but asyncio's own errors escape)."""
    loop = Loop(IoPollSelector(backend))
    try:
        fd = _retire_a_closed_fd(loop, "reader")
        with _pipe_with_end_on(fd, "reader") as (new_r, new_w):
            woken: list[str] = []
            loop.add_reader(new_r, lambda: woken.append(os.read(new_r, 100).decode()))
            os.write(new_w, b"new")
            loop.call_later(0.5, loop.stop)
            loop._run_once()
            assert woken == ["new"]
            loop.remove_reader(new_r)
    finally:
        loop.close()


# -- "the object registered" includes an equal int: data alone makes no system call ---


@pytest.mark.parametrize("backend", Backend.available_backends(), ids=lambda b: b.name)
def test_a_change_of_data_alone_through_an_equal_int_makes_no_system_call(
    backend: Backend,
) -> None:
    """asyncio hands the selector sock.fileno(), a new int object on every call once the
    fd is above 256.  A change of data alone given such an equal int is the same object's
    (no system call, as every stdlib selector): even with the fd closed meanwhile, it
    neither raises nor drops the key (EpollSelector keeps it too)."""
    import fcntl  # POSIX: a dup at or above a given number
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft <= 300:  # macOS starts at 256
        pytest.skip(f"RLIMIT_NOFILE is {soft}: no fd number above 300")
    r, w = os.pipe()
    high = fcntl.fcntl(r, fcntl.F_DUPFD, 300)  # above CPython's small-int cache
    os.close(r)
    try:
        with IoPollSelector(backend) as sel:
            key = sel.register(high, R, "old")
            os.close(high)
            same_number = int(str(high))
            assert same_number == high and same_number is not key.fileobj
            new = sel.modify(same_number, R, "new")
            assert new.data == "new" and new.fd == high and new.events == R
            assert sel.get_key(high) is new
            sel.unregister(high)
    finally:
        os.close(w)


# -- get_map().get() finds a closed file object by identity, as get_key() does --------


@pytest.mark.parametrize("backend", Backend.available_backends(), ids=lambda b: b.name)
def test_get_map_get_finds_a_closed_file_object(backend: Backend) -> None:
    """The stdlib's mapping get() goes through __getitem__, which finds a closed object
    among the keys by identity; asyncio 3.13 calls get_map().get() on every
    add_reader/remove_reader, with key.fileobj among others."""
    with IoPollSelector(backend) as sel:
        a, b = socket.socketpair()
        with b:
            key = sel.register(a, R)
            a.close()
            mapping = sel.get_map()
            assert mapping[a] is key
            assert mapping.get(a) is key
            assert mapping.get(a, "default") is key
            assert sel.unregister(a) is key
            with pytest.raises(ValueError):  # unknown now, and no fd: the stdlib's too
                mapping.get(a, "default")


# -- the watcher made again for a retired fd watches the key's events, and is the
# -- one unregister() removes ----------------------------------------------------------------

@pytest.mark.parametrize("backend", POLL_LIKE, ids=lambda b: b.name)
def test_add_writer_on_a_reused_fd_number_given_as_int(backend: Backend) -> None:
    """As test_add_reader_on_a_reused_fd_number_given_as_int, for a writer: the fd is
    registered again for the key's events (writable), not only for reading."""
    loop = Loop(IoPollSelector(backend))
    try:
        fd = _retire_a_closed_fd(loop, "writer")
        with _pipe_with_end_on(fd, "writer") as (_, new_w):
            woken: list[str] = []
            loop.add_writer(new_w, woken.append, "new")  # same events: data alone changes
            loop.call_later(0.5, loop.stop)
            loop._run_once()
            assert woken == ["new"]
            loop.remove_writer(new_w)
    finally:
        loop.close()


@pytest.mark.parametrize("backend", POLL_LIKE, ids=lambda b: b.name)
def test_a_fd_registered_again_after_it_was_retired_is_unregistered_by_remove_reader(
    backend: Backend,
) -> None:
    """After the selector registered a retired fd again (a reused number), remove_reader()
    must unregister that new registration: the fd is no longer reported, and add_reader()
    on it works again."""
    loop = Loop(IoPollSelector(backend))
    try:
        fd = _retire_a_closed_fd(loop, "reader")
        with _pipe_with_end_on(fd, "reader") as (new_r, new_w):
            woken: list[str] = []
            loop.add_reader(new_r, woken.append, "first")
            os.write(new_w, b"x")  # stays unread: the fd is readable from now on
            loop.call_later(0.5, loop.stop)
            loop._run_once()
            assert woken == ["first"]
            assert loop.remove_reader(new_r)
            sel = loop._selector
            assert sel.select(0) == []  # nothing registered is ready: new_r is not watched
            loop.add_reader(new_r, woken.append, "second")
            loop.call_later(0.5, loop.stop)
            loop._run_once()
            assert woken == ["first", "second"]
            loop.remove_reader(new_r)
    finally:
        loop.close()


# -- an exception from data_received() is a fatal error of the transport ------------


def test_an_exception_from_data_received_closes_the_transport_with_it() -> None:
    """asyncio's socket transport catches what data_received() raises, calls the
    exception handler with "Fatal error: protocol.data_received() call failed." and closes
    the connection: connection_lost() gets the exception, and the peer sees the end."""

    class Boom(Exception):
        pass

    async def main() -> tuple[Any, bytes, list[dict[str, Any]]]:
        loop = asyncio.get_running_loop()
        contexts: list[dict[str, Any]] = []
        loop.set_exception_handler(lambda _loop, context: contexts.append(context))
        lost: asyncio.Future[Any] = loop.create_future()

        class Failing(asyncio.Protocol):
            def data_received(self, data: bytes) -> None:
                raise Boom(data)

            def connection_lost(self, exc: BaseException | None) -> None:
                lost.set_result(exc)

        server = await loop.create_server(Failing, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"hello")
        exc = await asyncio.wait_for(lost, 5)
        rest = await asyncio.wait_for(reader.read(), 5)  # b"": the server closed it
        writer.close()
        await writer.wait_closed()
        server.close()
        await server.wait_closed()
        return exc, rest, contexts

    loop = Loop()
    try:
        exc, rest, contexts = loop.run_until_complete(main())
    finally:
        loop.close()
    assert isinstance(exc, Boom) and exc.args == (b"hello",)
    assert rest == b""
    assert [c["message"] for c in contexts] == [
        "Fatal error: protocol.data_received() call failed."
    ]


# -- an fd beyond a C int is a bad file object (ValueError) ---------------------------


@pytest.mark.parametrize("backend", Backend.available_backends(), ids=lambda b: b.name)
def test_an_fd_beyond_a_c_int_is_value_error(backend: Backend) -> None:
    """docs/aio.md: a bad file object raises ValueError; a number no OS call can take is
    one (the stdlib's EpollSelector and PollSelector raise OverflowError, a plain OSError
    would match neither)."""
    with IoPollSelector(backend) as sel:
        for fd in (2**31, 2**64):
            with pytest.raises(ValueError):
                sel.register(fd, R)
        assert len(sel.get_map()) == 0
