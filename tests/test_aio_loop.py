"""Everything asyncio offers, through ``iopoll.aio.run`` (one test per feature)."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import selectors
import signal
import socket
import ssl
import sys
import tempfile
import threading
from collections.abc import AsyncIterator, Coroutine
from pathlib import Path
from typing import Any, TypeVar

import pytest

import iopoll.aio
from iopoll import Backend, Event
from iopoll.aio import IoPollSelector, Loop
from iopoll_conformance.support import TLS_CERT, TLS_KEY

T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T]) -> T:
    return iopoll.aio.run(_on_iopoll(coro))


async def _on_iopoll(coro: Coroutine[Any, Any, T]) -> T:
    loop = asyncio.get_running_loop()
    assert type(loop) is Loop
    assert isinstance(loop._selector, IoPollSelector)  # type: ignore[attr-defined]
    return await coro


async def _echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while data := await reader.read(65536):
        writer.write(data)
        await writer.drain()
    writer.close()
    await writer.wait_closed()


async def _round_trip(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, payload: bytes
) -> bytes:
    writer.write(payload)
    await writer.drain()
    data = await reader.readexactly(len(payload))
    writer.close()
    await writer.wait_closed()
    return data


# -- run() -------------------------------------------------------------------------------


def test_run_returns_and_closes_loop() -> None:
    seen: list[asyncio.AbstractEventLoop] = []

    async def main() -> str:
        seen.append(asyncio.get_running_loop())
        return "done"

    assert run(main()) == "done"
    assert seen[0].is_closed()


def test_run_debug_flag() -> None:
    async def main() -> bool:
        return asyncio.get_running_loop().get_debug()

    assert iopoll.aio.run(main(), debug=True) is True
    assert iopoll.aio.run(main(), debug=False) is False


def test_run_cancels_leftover_tasks_and_finalizes_asyncgens() -> None:
    events: list[str] = []

    async def forever() -> None:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            events.append("cancelled")
            raise

    async def agen() -> AsyncIterator[int]:
        try:
            yield 1
            yield 2
        finally:
            events.append("agen closed")

    async def main() -> None:
        asyncio.get_running_loop().create_task(forever())
        gen = agen()
        assert await gen.__anext__() == 1
        await asyncio.sleep(0)
        main.gen = gen  # type: ignore[attr-defined]  # keep it alive past main()

    run(main())
    assert sorted(events) == ["agen closed", "cancelled"]


def test_run_propagates_exception() -> None:
    async def main() -> None:
        raise LookupError("boom")

    with pytest.raises(LookupError, match="boom"):
        run(main())


def test_run_refuses_non_coroutine_and_nesting() -> None:
    with pytest.raises((ValueError, TypeError)):
        iopoll.aio.run(lambda: None)  # type: ignore[arg-type]

    async def main() -> None:
        inner = asyncio.sleep(0)
        try:
            with pytest.raises(RuntimeError):
                iopoll.aio.run(inner)
        finally:
            inner.close()

    run(main())


@pytest.mark.skipif(sys.version_info < (3, 11), reason="asyncio.Runner is new in 3.11")
def test_asyncio_runner_with_loop_factory() -> None:
    async def main() -> type:
        return type(asyncio.get_running_loop())

    with asyncio.Runner(loop_factory=iopoll.aio.new_event_loop) as runner:  # type: ignore[attr-defined]
        assert runner.run(main()) is Loop


# -- networking --------------------------------------------------------------------------


def _cycle_garbage_of_a_run(loop_factory: Any) -> list[type]:
    """The types of what a loop that served a connection and closed leaves to the collector."""

    async def serve_once() -> None:
        async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            writer.write(await reader.read(10))
            writer.close()

        server = await asyncio.start_server(echo, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"ping")
        assert await reader.read(10) == b"ping"
        writer.close()
        await writer.wait_closed()
        server.close()
        await server.wait_closed()

    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        with asyncio.Runner(loop_factory=loop_factory) as runner:
            runner.run(serve_once())
        gc.collect()
        return [type(thing) for thing in gc.garbage]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()


@pytest.mark.skipif(sys.version_info < (3, 11), reason="asyncio.Runner is new in 3.11")
def test_a_closed_loop_leaves_no_more_cycles_than_asyncio() -> None:
    # tornado's test suite asserts that a run leaves no garbage cycles; the selector and its
    # get_map() view held each other, 14 objects per loop.  (A transport that saw its
    # connection closed is in a cycle on both; ours is a subclass of asyncio's.)
    stock = _cycle_garbage_of_a_run(asyncio.new_event_loop)
    ours = _cycle_garbage_of_a_run(iopoll.aio.new_event_loop)
    assert not [kind for kind in ours if kind.__module__.startswith(("iopoll", "_iopoll"))
                and not issubclass(kind, asyncio.Transport)]
    assert len(ours) <= len(stock)


def test_a_loop_with_no_socket_transport_costs_no_read_buffer() -> None:
    # The 256 KiB buffer socket transports read into is made with the first of them.
    import tracemalloc

    tracemalloc.start()
    try:
        loops = [iopoll.aio.new_event_loop() for _ in range(10)]
        held, _ = tracemalloc.get_traced_memory()
        for loop in loops:
            loop.close()
    finally:
        tracemalloc.stop()
    assert held < 10 * 64 * 1024, f"{held / 10 / 1024:.0f} KiB per idle loop"


def test_tcp_streams_and_server() -> None:
    async def main() -> list[bytes]:
        server = await asyncio.start_server(_echo, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]

        async def client(i: int) -> bytes:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            return await _round_trip(reader, writer, b"x%d" % i * 5000)

        async with server:
            return list(await asyncio.gather(*(client(i) for i in range(20))))

    assert run(main()) == [b"x%d" % i * 5000 for i in range(20)]


def test_unix_streams_and_server(tmp_path: Path) -> None:
    path = str(tmp_path / "echo.sock")

    async def main() -> bytes:
        server = await asyncio.start_unix_server(_echo, path)
        async with server:
            return await _round_trip(*await asyncio.open_unix_connection(path), b"unix" * 100_000)

    assert run(main()) == b"unix" * 100_000


def test_datagrams() -> None:
    class Echo(asyncio.DatagramProtocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            self.transport: Any = transport

        def datagram_received(self, data: bytes, addr: Any) -> None:
            self.transport.sendto(data.upper(), addr)

    class Client(asyncio.DatagramProtocol):
        def __init__(self) -> None:
            self.got: asyncio.Queue[bytes] = asyncio.Queue()

        def datagram_received(self, data: bytes, addr: Any) -> None:
            self.got.put_nowait(data)

    async def main() -> list[bytes]:
        loop = asyncio.get_running_loop()
        server, _ = await loop.create_datagram_endpoint(Echo, local_addr=("127.0.0.1", 0))
        client, proto = await loop.create_datagram_endpoint(
            Client, remote_addr=server.get_extra_info("sockname")
        )
        try:
            for word in (b"one", b"two", b"three"):
                client.sendto(word)
            return [await asyncio.wait_for(proto.got.get(), 5) for _ in range(3)]
        finally:
            client.close()
            server.close()

    assert run(main()) == [b"ONE", b"TWO", b"THREE"]


def test_tls_streams() -> None:
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(TLS_CERT, TLS_KEY)
    client_ctx = ssl.create_default_context(cafile=TLS_CERT)

    async def main() -> tuple[bytes, str]:
        server = await asyncio.start_server(_echo, "127.0.0.1", 0, ssl=server_ctx)
        port = server.sockets[0].getsockname()[1]
        async with server:
            reader, writer = await asyncio.open_connection(
                "127.0.0.1", port, ssl=client_ctx, server_hostname="localhost"
            )
            version = writer.get_extra_info("ssl_object").version()
            return await _round_trip(reader, writer, b"secret" * 50_000), version

    data, version = run(main())
    assert data == b"secret" * 50_000 and version.startswith("TLS")


def test_sock_functions() -> None:
    async def main() -> list[bytes]:
        loop = asyncio.get_running_loop()
        listener = socket.create_server(("127.0.0.1", 0))
        listener.setblocking(False)
        client = socket.socket()
        client.setblocking(False)
        with listener, client:
            accepted = loop.create_task(loop.sock_accept(listener))
            await loop.sock_connect(client, listener.getsockname())
            conn, _ = await accepted
            with conn:
                await loop.sock_sendall(client, b"a" * 300_000)
                got = bytearray()
                buf = bytearray(65536)
                while len(got) < 300_000:
                    n = await loop.sock_recv_into(conn, buf)
                    got += buf[:n]
                await loop.sock_sendall(conn, b"back")
                return [
                    bytes(got[:3]),
                    await loop.sock_recv(client, 10),
                    bytes([len(got) == 300_000]),
                ]

    assert run(main()) == [b"aaa", b"back", b"\x01"]


@pytest.mark.skipif(sys.version_info < (3, 11), reason="sock_sendto/sock_recvfrom are new in 3.11")
def test_sock_datagram_functions() -> None:
    async def main() -> tuple[bytes, Any]:
        loop = asyncio.get_running_loop()
        a = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        b = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        with a, b:
            for s in (a, b):
                s.setblocking(False)
                s.bind(("127.0.0.1", 0))
            receiving = loop.create_task(loop.sock_recvfrom(b, 100))  # type: ignore[attr-defined]
            await asyncio.sleep(0.01)
            await loop.sock_sendto(a, b"dgram", b.getsockname())  # type: ignore[attr-defined]
            data, addr = await asyncio.wait_for(receiving, 5)
            return data, addr == a.getsockname()

    assert run(main()) == (b"dgram", True)


def test_sendfile() -> None:
    payload = os.urandom(1 << 20)

    async def main() -> tuple[int, bytes]:
        received = bytearray()
        done = asyncio.Event()

        async def sink(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            received.extend(await reader.read())
            writer.close()
            done.set()

        server = await asyncio.start_server(sink, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        async with server:
            with tempfile.TemporaryFile() as f:
                f.write(payload)
                f.seek(0)
                _, writer = await asyncio.open_connection("127.0.0.1", port)
                sent = await asyncio.get_running_loop().sendfile(writer.transport, f)
                writer.close()
                await asyncio.wait_for(done.wait(), 10)
        return sent, bytes(received)

    assert run(main()) == (len(payload), payload)


def test_add_reader_and_add_writer() -> None:
    async def main() -> list[str]:
        loop = asyncio.get_running_loop()
        a, b = socket.socketpair()
        a.setblocking(False)
        b.setblocking(False)
        log: list[str] = []
        done = asyncio.Event()
        with a, b:

            def on_writable() -> None:
                log.append("writable")
                loop.remove_writer(a)
                a.send(b"ping")

            def on_readable() -> None:
                log.append(b.recv(10).decode())
                loop.remove_reader(b)
                done.set()

            loop.add_reader(b, on_readable)
            loop.add_writer(a, on_writable)
            await asyncio.wait_for(done.wait(), 5)
            assert not loop.remove_reader(b) and not loop.remove_writer(a)
        return log

    assert run(main()) == ["writable", "ping"]


# -- processes, signals, threads ---------------------------------------------------------


def test_subprocess() -> None:
    async def main() -> tuple[bytes, bytes, int]:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            "import sys; data = sys.stdin.read(); print(data.upper()); "
            "sys.stderr.write('err'); sys.exit(3)",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(proc.communicate(b"hello"), 30)
        return out, err, await proc.wait()

    assert run(main()) == (b"HELLO\n", b"err", 3)


@pytest.mark.skipif(not hasattr(signal, "SIGUSR1"), reason="needs SIGUSR1")
def test_add_signal_handler() -> None:
    async def main() -> list[int]:
        loop = asyncio.get_running_loop()
        got: list[int] = []
        fired = asyncio.Event()

        def handler(signum: int) -> None:
            got.append(signum)
            fired.set()

        loop.add_signal_handler(signal.SIGUSR1, handler, signal.SIGUSR1)
        try:
            # from another thread: the wakeup fd must interrupt a blocking select()
            threading.Timer(0.05, os.kill, (os.getpid(), signal.SIGUSR1)).start()
            await asyncio.wait_for(fired.wait(), 5)
        finally:
            assert loop.remove_signal_handler(signal.SIGUSR1)
        return got

    assert run(main()) == [signal.SIGUSR1]


def test_executors_and_threadsafe_wakeup() -> None:
    async def main() -> tuple[int, str, str]:
        loop = asyncio.get_running_loop()
        total = await loop.run_in_executor(None, sum, range(1000))
        name = await asyncio.to_thread(lambda: threading.current_thread().name)
        future: asyncio.Future[str] = loop.create_future()
        threading.Timer(0.05, loop.call_soon_threadsafe, (future.set_result, "woken")).start()
        return total, name, await asyncio.wait_for(future, 5)

    total, name, woken = run(main())
    assert total == 499500 and name != threading.main_thread().name and woken == "woken"


def test_timers() -> None:
    async def main() -> list[int]:
        loop = asyncio.get_running_loop()
        order: list[int] = []
        start = loop.time()
        for delay, tag in ((0.03, 3), (0.01, 1), (0.02, 2)):
            loop.call_later(delay, order.append, tag)
        await asyncio.sleep(0.05)
        assert loop.time() - start >= 0.05
        return order

    assert run(main()) == [1, 2, 3]


@pytest.mark.parametrize("backend", Backend.available_backends(), ids=lambda b: b.name)
def test_every_backend_runs_streams_and_subprocess(backend: Backend) -> None:
    async def main() -> tuple[bytes, bytes]:
        server = await asyncio.start_server(_echo, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        async with server:
            echoed = await _round_trip(
                *await asyncio.open_connection("127.0.0.1", port), b"z" * 200_000
            )
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", "print('child')", stdout=asyncio.subprocess.PIPE
        )
        out, _ = await proc.communicate()
        return echoed, out

    loop = Loop(IoPollSelector(backend))
    try:
        assert loop.run_until_complete(main()) == (b"z" * 200_000, b"child\n")
        assert loop._selector.backend is backend  # type: ignore[attr-defined]
    finally:
        loop.run_until_complete(loop.shutdown_default_executor())
        loop.close()


# -- Loop's own dispatch of the Context's watchers ----------------------------------------


# Loop() reads the watchers itself; Loop(IoPollSelector()) goes through asyncio's own
# _process_events on (key, events) pairs.  Both must behave the same.
BOTH_DISPATCHES = [
    pytest.param(Loop, id="own selector"),
    pytest.param(lambda: Loop(IoPollSelector()), id="IoPollSelector"),
]


def test_loop_reads_watchers_only_from_its_own_selector() -> None:
    own, given = Loop(), Loop(IoPollSelector())
    try:
        a, b = socket.socketpair()
        with a, b:
            for loop in (own, given):
                loop._selector.register(a, selectors.EVENT_WRITE, (None, None))  # type: ignore[attr-defined]
            (ready,) = own._selector.select(0)  # type: ignore[attr-defined]
            assert ready.data.fd == a.fileno() and ready.triggered_events == Event.WRITE
            ((key, mask),) = given._selector.select(0)  # type: ignore[attr-defined]
            assert key.fd == a.fileno() and mask == selectors.EVENT_WRITE
            for loop in (own, given):
                loop._selector.unregister(a)  # type: ignore[attr-defined]
    finally:
        own.close()
        given.close()


@pytest.mark.parametrize("make_loop", BOTH_DISPATCHES)
def test_error_alone_wakes_a_writer_and_hang_up_alone_a_reader(make_loop: Any) -> None:
    """A full pipe whose reader is gone is ERROR only (no WRITE), and an empty pipe whose
    writer is gone is HANGUP only (no READ): both wake their callbacks, as the stdlib
    selectors do, in the same iteration."""
    loop = make_loop()
    full_read, full_write = os.pipe()
    empty_read, empty_write = os.pipe()
    woken: list[str] = []
    try:
        os.set_blocking(full_write, False)
        with contextlib.suppress(BlockingIOError):
            while True:
                os.write(full_write, b"x" * 65536)
        loop.add_writer(full_write, woken.append, "writer")
        loop.add_reader(empty_read, woken.append, "reader")
        os.close(full_read)
        os.close(empty_write)
        loop.call_later(0.5, loop.stop)
        loop._run_once()
        assert sorted(woken) == ["reader", "writer"]
        loop.remove_writer(full_write)
        loop.remove_reader(empty_read)
    finally:
        os.close(full_write)
        os.close(empty_read)
        loop.close()


@pytest.mark.parametrize("make_loop", BOTH_DISPATCHES)
def test_cancelled_reader_handle_unregisters_its_fd_when_ready(make_loop: Any) -> None:
    loop = make_loop()
    a, b = socket.socketpair()
    called: list[bool] = []
    try:
        handle = loop._add_reader(a.fileno(), called.append, True)
        handle.cancel()  # cancelled without remove_reader(): dropped at the next report
        b.send(b"wake")
        loop.call_later(0.5, loop.stop)
        loop._run_once()
        assert called == []
        assert a.fileno() not in loop._selector.get_map()
    finally:
        a.close()
        b.close()
        loop.close()


@pytest.mark.parametrize("backend", Backend.available_backends(), ids=lambda b: b.name)
def test_add_reader_on_a_reused_fd_number_after_a_close_without_remove_reader(
    backend: Backend,
) -> None:
    """A socket closed without remove_reader() leaves its key; add_reader() on the new
    socket that takes its number modifies that key, and the new socket's reader is called
    (the stdlib's EpollSelector leaves the new socket unwatched)."""
    loop = Loop(IoPollSelector(backend))
    a, b = socket.socketpair()
    try:
        loop.add_reader(a, lambda: None)
        fd = a.fileno()
        a.close()
        b.close()
        c, d = socket.socketpair()
        with c, d:
            new, peer = (c, d) if c.fileno() == fd else (d, c)
            assert new.fileno() == fd
            called: list[bytes] = []
            loop.add_reader(new, lambda: called.append(new.recv(100)))
            peer.send(b"for the new socket")
            loop.call_later(0.5, loop.stop)
            loop._run_once()
            assert called == [b"for the new socket"]
            loop.remove_reader(new)
    finally:
        loop.close()


@pytest.mark.parametrize("backend", Backend.available_backends(), ids=lambda b: b.name)
def test_a_loop_never_closed_is_collected_with_its_fds(backend: Backend) -> None:
    """asyncio's keys lead from the selector's watchers back to the loop: a cycle that the
    collector frees, as it frees a stock loop (a Context finalizer in the global registry
    held it for ever, with its epoll fd and self-pipe)."""
    import gc
    import warnings
    import weakref

    fds = len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else None
    loop = Loop(IoPollSelector(backend))
    loop.run_until_complete(asyncio.sleep(0))
    ref = weakref.ref(loop)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)  # "unclosed event loop": intended
        del loop
        gc.collect()
    assert ref() is None
    if fds is not None:
        assert len(os.listdir("/proc/self/fd")) == fds


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
@pytest.mark.parametrize("backend", Backend.available_backends(), ids=lambda b: b.name)
def test_close_in_a_forked_child_leaves_the_parents_loop(backend: Backend) -> None:
    """The child's loop.close() forgets the keys without touching the OS object it shares
    with the parent (a first version raised the Context's after-fork error from it); the
    parent's loop is still woken by call_soon_threadsafe()."""
    loop = Loop(IoPollSelector(backend))
    try:
        loop.run_until_complete(asyncio.sleep(0))
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover (the child)
            try:
                loop.close()
                os.write(write_end, b"closed" if loop.is_closed() else b"open")
            except BaseException as exc:
                os.write(write_end, type(exc).__name__.encode())
            os._exit(0)
        os.close(write_end)
        _, status = os.waitpid(pid, 0)
        with os.fdopen(read_end, "rb") as child:
            assert child.read() == b"closed"
        assert os.waitstatus_to_exitcode(status) == 0
        woken = loop.create_future()
        threading.Timer(0.05, loop.call_soon_threadsafe, (woken.set_result, "woken")).start()
        assert loop.run_until_complete(asyncio.wait_for(woken, 5)) == "woken"
    finally:
        loop.close()
