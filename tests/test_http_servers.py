"""Real HTTP servers on ``iopoll.aio``: uvicorn, aiohttp and hypercorn, on loopback.

``iopoll.aio`` is meant to go wherever asyncio's own loop goes (docs/aio.md).  The loop's
own tests (tests/test_aio_loop.py, CPython's event loop suites) hold it to asyncio's
contract one feature at a time.  This module runs the servers people actually put on
asyncio, through their own start-up and shut-down code:

- uvicorn, given ``loop="iopoll.aio:new_event_loop"`` as its loop factory, with its
  httptools and its h11 protocol;
- aiohttp's ``web.AppRunner`` on a ``web.SockSite``, in ``iopoll.aio.run()``;
- ``hypercorn.asyncio.serve()``, in ``iopoll.aio.run()``.

Each server runs on a thread of its own, on a listening socket the test made (on port 0:
no port to race for), and is stopped and joined before the test ends.  The clients are
``http.client`` and plain sockets.  The same tests run on every server: the app runs on an
``iopoll.aio.Loop``; one keep-alive connection carries several requests; a POST body comes
back whole; a streamed response arrives as chunked encoding, one chunk per body message,
in order; and a client that hangs up in the middle of an endless response is noticed by
the app, and the server goes on serving.

No thread or fd may outlive a test, nor may a server log an error (the ``no_leaks``
fixture).  Waits have generous timeouts, for a loaded machine, and nothing asserts on how
long anything took.  Each library is imported with ``pytest.importorskip``, so its tests
skip where it is missing (the ``test`` extra installs them all).
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pytest

import iopoll.aio

if TYPE_CHECKING:
    from aiohttp import web

TIMEOUT = 10.0  # the longest any one wait may take: generous, never asserted on
LOOP = "iopoll.aio.Loop"  # what the apps report as the type of the loop they run on
CHUNKS = [b"chunk %d\n" % i for i in range(5)]  # the streamed response's body messages
BLOCK = b"x" * 16384  # what the endless response repeats
POST_BODY = bytes(range(256)) * 1200  # 300 KiB: more than one read, and one write

Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


# -- leaks ------------------------------------------------------------------------------


def _open_fds() -> set[str] | None:
    try:
        return set(os.listdir("/proc/self/fd"))
    except FileNotFoundError:  # not Linux: fds are not checked
        return None


@pytest.fixture(autouse=True)
def no_leaks(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    """No thread or fd made during the test outlives it, and no server logged an error."""
    threads = set(threading.enumerate())
    fds = _open_fds()
    yield
    assert set(threading.enumerate()) <= threads
    if fds is not None:
        assert _open_fds() <= fds  # (an import may close an fd of its own)
    records = [*caplog.get_records("setup"), *caplog.get_records("call"), *caplog.records]
    errors = [f"{r.name}: {r.getMessage()}" for r in records if r.levelno >= logging.ERROR]
    assert errors == []


# -- servers on threads ----------------------------------------------------------------


@contextlib.contextmanager
def listening_socket() -> Iterator[socket.socket]:
    """A TCP socket listening on 127.0.0.1, on a port the kernel picked."""
    with socket.create_server(("127.0.0.1", 0)) as sock:
        yield sock


@contextlib.contextmanager
def serving(
    run: Callable[[], object], started: Callable[[], bool], stop: Callable[[], None]
) -> Iterator[None]:
    """Call ``run()`` on a thread and wait until ``started()``; on exit, ``stop()`` and join.

    What ``run()`` raised is raised here, once the thread has ended.
    """
    failures: list[BaseException] = []

    def target() -> None:
        try:
            run()
        except BaseException as exc:  # SystemExit too: uvicorn exits when it cannot start
            failures.append(exc)

    # A daemon, so that a server that never stops fails its test instead of hanging pytest.
    thread = threading.Thread(target=target, name="http-server", daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + TIMEOUT
        while not started():
            if not thread.is_alive():
                raise failures[0] if failures else AssertionError("the server ended at once")
            assert time.monotonic() < deadline, "the server did not start"
            time.sleep(0.01)
        yield
    finally:
        stop()
        thread.join(TIMEOUT)
    assert not thread.is_alive(), "the server did not stop"
    if failures:
        raise failures[0]


@contextlib.contextmanager
def serving_on_iopoll(
    serve: Callable[[threading.Event, asyncio.Event], Awaitable[None]],
) -> Iterator[None]:
    """Run ``serve(started, stopping)`` in ``iopoll.aio.run()`` on a thread.

    ``serve`` sets ``started`` once it accepts connections, and returns once ``stopping``
    is set, which leaving the ``with`` block does.
    """
    started = threading.Event()
    running: list[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = []

    async def main() -> None:
        stopping = asyncio.Event()
        running.append((asyncio.get_running_loop(), stopping))
        await serve(started, stopping)

    def stop() -> None:
        for loop, stopping in running:
            with contextlib.suppress(RuntimeError):  # the loop is closed: it has ended
                loop.call_soon_threadsafe(stopping.set)

    with serving(lambda: iopoll.aio.run(main()), started.is_set, stop):
        yield


# -- what the apps do --------------------------------------------------------------------


def loop_name() -> str:
    loop_type = type(asyncio.get_running_loop())
    return f"{loop_type.__module__}.{loop_type.__qualname__}"


@dataclass
class HangUps:
    """What an app's endless response learnt of its client going away."""

    seen: list[str] = field(default_factory=list)  # how it learnt, once per response
    ended: threading.Event = field(default_factory=threading.Event)  # set when one ended


@dataclass
class Server:
    port: int
    hang_ups: HangUps
    hang_up_seen_as: str  # what hang_ups.seen holds once a client has hung up


class AsgiApp:
    """The ASGI app uvicorn and hypercorn serve.

    ``/loop``: the type of the running loop; ``/client-port``: the client's port;
    ``/echo``: the request body; ``/stream``: ``CHUNKS``, one body message each;
    ``/endless``: ``BLOCK`` over and over until the client hangs up.
    """

    def __init__(self) -> None:
        self.hang_ups = HangUps()

    async def __call__(self, scope: Message, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        assert scope["type"] == "http"
        path = scope["path"]
        if path == "/loop":
            await self._respond(send, loop_name().encode())
        elif path == "/client-port":
            await self._respond(send, str(scope["client"][1]).encode())
        elif path == "/echo":
            await self._respond(send, await self._read_body(receive))
        elif path == "/stream":
            await send({"type": "http.response.start", "status": 200, "headers": []})
            for chunk in CHUNKS:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b""})
        elif path == "/endless":
            await self._endless(receive, send)
        else:
            await self._respond(send, b"not found", status=404)

    @staticmethod
    async def _lifespan(receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return

    @staticmethod
    async def _respond(send: Send, body: bytes, status: int = 200) -> None:
        headers = [(b"content-type", b"text/plain"), (b"content-length", b"%d" % len(body))]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    @staticmethod
    async def _read_body(receive: Receive) -> bytes:
        body = bytearray()
        while True:
            message = await receive()
            assert message["type"] == "http.request", message
            body += message.get("body", b"")
            if not message.get("more_body", False):
                return bytes(body)

    async def _endless(self, receive: Receive, send: Send) -> None:
        async def disconnect() -> str:
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    return "receive: http.disconnect"

        await send({"type": "http.response.start", "status": 200, "headers": []})
        hang_up = asyncio.ensure_future(disconnect())
        try:
            while not hang_up.done():
                await send({"type": "http.response.body", "body": BLOCK, "more_body": True})
                await asyncio.sleep(0)  # a send that returns at once must not starve receive
            self.hang_ups.seen.append(hang_up.result())
        except OSError as exc:
            self.hang_ups.seen.append(f"send: {type(exc).__name__}")
        finally:
            hang_up.cancel()
            self.hang_ups.ended.set()


# -- the servers -----------------------------------------------------------------------


@contextlib.contextmanager
def uvicorn_serving(http: str) -> Iterator[Server]:
    """uvicorn with its ``http`` protocol, on the loop factory ``iopoll.aio:new_event_loop``."""
    uvicorn = pytest.importorskip("uvicorn")
    pytest.importorskip(http)
    app = AsgiApp()
    config = uvicorn.Config(
        app,
        loop="iopoll.aio:new_event_loop",
        http=http,
        log_config=None,  # leave the process's logging configuration alone
        log_level="warning",
        timeout_graceful_shutdown=TIMEOUT / 2,
    )
    server = uvicorn.Server(config)

    def stop() -> None:
        server.should_exit = True  # seen within uvicorn's 0.1 s tick

    with (
        listening_socket() as sock,
        serving(lambda: server.run(sockets=[sock]), lambda: server.started, stop),
    ):
        # uvicorn's send() does nothing once the client has gone; receive() says so.
        yield Server(sock.getsockname()[1], app.hang_ups, "receive: http.disconnect")


@contextlib.contextmanager
def aiohttp_serving() -> Iterator[Server]:
    """aiohttp's ``web.AppRunner`` on a ``web.SockSite``, in ``iopoll.aio.run()``."""
    web = pytest.importorskip("aiohttp.web")
    hang_ups = HangUps()

    async def loop(request: web.Request) -> web.StreamResponse:
        return web.Response(text=loop_name())

    async def client_port(request: web.Request) -> web.StreamResponse:
        assert request.transport is not None
        return web.Response(text=str(request.transport.get_extra_info("peername")[1]))

    async def echo(request: web.Request) -> web.StreamResponse:
        return web.Response(body=await request.read())

    async def stream(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        await response.prepare(request)
        for chunk in CHUNKS:
            await response.write(chunk)
        await response.write_eof()
        return response

    async def endless(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        await response.prepare(request)
        try:
            while True:
                await response.write(BLOCK)
                await asyncio.sleep(0)
        except ConnectionError:  # aiohttp 3.10+: its ClientConnectionResetError
            hang_ups.seen.append("write: ConnectionError")
        except asyncio.CancelledError:  # with handler_cancellation=True (off by default)
            hang_ups.seen.append("cancelled")
            raise
        finally:
            hang_ups.ended.set()
        return response

    app = web.Application()
    app.router.add_get("/loop", loop)
    app.router.add_get("/client-port", client_port)
    app.router.add_post("/echo", echo)
    app.router.add_get("/stream", stream)
    app.router.add_get("/endless", endless)

    with listening_socket() as sock:

        async def serve(started: threading.Event, stopping: asyncio.Event) -> None:
            runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=TIMEOUT / 2)
            await runner.setup()
            try:
                await web.SockSite(runner, sock).start()
                started.set()
                await stopping.wait()
            finally:
                await runner.cleanup()

        with serving_on_iopoll(serve):
            yield Server(sock.getsockname()[1], hang_ups, "write: ConnectionError")


@contextlib.contextmanager
def hypercorn_serving() -> Iterator[Server]:
    """``hypercorn.asyncio.serve()``, in ``iopoll.aio.run()``, on an ``fd://`` bind."""
    hypercorn_asyncio = pytest.importorskip("hypercorn.asyncio")
    hypercorn_config = pytest.importorskip("hypercorn.config")
    app = AsgiApp()

    with listening_socket() as sock:
        config = hypercorn_config.Config()
        # hypercorn adopts the fd of an fd:// bind, and its server closes it when it stops:
        # it gets a duplicate, and listening_socket() closes the original.
        config.bind = [f"fd://{sock.dup().detach()}"]
        config.accesslog = None
        config.errorlog = logging.getLogger("hypercorn.error")  # taken as is: no handler
        config.graceful_timeout = TIMEOUT / 2

        async def serve(started: threading.Event, stopping: asyncio.Event) -> None:
            async def shutdown_trigger() -> None:
                started.set()  # serve() calls this once its servers are listening
                await stopping.wait()

            await hypercorn_asyncio.serve(app, config, shutdown_trigger=shutdown_trigger)

        with serving_on_iopoll(serve):
            # As uvicorn: send() does nothing once the client has gone; receive() says so.
            yield Server(sock.getsockname()[1], app.hang_ups, "receive: http.disconnect")


SERVERS: dict[str, Callable[[], contextlib.AbstractContextManager[Server]]] = {
    "uvicorn-httptools": lambda: uvicorn_serving("httptools"),
    "uvicorn-h11": lambda: uvicorn_serving("h11"),
    "aiohttp": aiohttp_serving,
    "hypercorn": hypercorn_serving,
}


@pytest.fixture(params=list(SERVERS))
def server(request: pytest.FixtureRequest) -> Iterator[Server]:
    with SERVERS[request.param]() as running:
        yield running


# -- clients ---------------------------------------------------------------------------


@contextlib.contextmanager
def connection(port: int) -> Iterator[http.client.HTTPConnection]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=TIMEOUT)
    try:
        yield conn
    finally:
        conn.close()


def fetch(
    conn: http.client.HTTPConnection, method: str, path: str, body: bytes | None = None
) -> tuple[int, dict[str, str], bytes]:
    """Send one request on ``conn``: the status, the headers (lower-cased names), the body."""
    conn.request(method, path, body=body)
    response = conn.getresponse()
    headers = {name.lower(): value for name, value in response.getheaders()}
    return response.status, headers, response.read()


def get(port: int, path: str) -> tuple[int, bytes]:
    """GET ``path`` on a connection of its own: the status and the body."""
    with connection(port) as conn:
        status, _, body = fetch(conn, "GET", path)
    return status, body


def _request(path: str) -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode()


def get_chunks(port: int, path: str) -> tuple[bytes, list[bytes]]:
    """GET ``path`` on a socket: the response head, and the body's chunks as they were framed.

    http.client would join the chunks; this reads the chunked encoding itself.
    """
    chunks: list[bytes] = []
    with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT) as sock:
        sock.sendall(_request(path))
        with sock.makefile("rb") as stream:
            head = b""
            while (line := stream.readline()) not in (b"\r\n", b""):
                head += line
            while size := int(stream.readline(), 16):  # a ValueError at an early end
                chunks.append(stream.read(size))
                assert stream.read(2) == b"\r\n"
            assert stream.readline() == b"\r\n"  # the last chunk, with no trailer
    return head, chunks


def read_then_hang_up(port: int, path: str) -> bytes:
    """GET ``path``, read the head and a little of the body, and close the socket.

    The close leaves response data unread, so the server's end sees a reset.  Returns the
    response head.
    """
    received = b""
    with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT) as sock:
        sock.sendall(_request(path))
        while len(received.partition(b"\r\n\r\n")[2]) < 2 * len(BLOCK):
            data = sock.recv(65536)
            assert data, f"the server ended the response: {received[:200]!r}"
            received += data
    return received.partition(b"\r\n\r\n")[0]


# -- the tests -------------------------------------------------------------------------


def test_runs_app_on_iopoll_loop(server: Server) -> None:
    assert get(server.port, "/loop") == (200, LOOP.encode())


def test_keeps_connection_alive(server: Server) -> None:
    with connection(server.port) as conn:
        replies = [
            fetch(conn, "GET", "/client-port"),
            fetch(conn, "POST", "/echo", b"ping"),
            fetch(conn, "GET", "/stream"),
            fetch(conn, "GET", "/client-port"),
        ]
        port = str(conn.sock.getsockname()[1]).encode()
    assert [(status, body) for status, _, body in replies] == [
        (200, port),
        (200, b"ping"),
        (200, b"".join(CHUNKS)),
        (200, port),
    ]


def test_echoes_post_body(server: Server) -> None:
    with connection(server.port) as conn:
        status, headers, body = fetch(conn, "POST", "/echo", POST_BODY)
    assert (status, headers["content-length"]) == (200, str(len(POST_BODY)))
    assert body == POST_BODY


def test_streams_chunked_response(server: Server) -> None:
    head, chunks = get_chunks(server.port, "/stream")
    assert head.startswith(b"HTTP/1.1 200 ")
    assert b"\r\ntransfer-encoding: chunked\r\n" in head.lower()
    assert chunks == CHUNKS


def test_notices_client_hanging_up(server: Server) -> None:
    head = read_then_hang_up(server.port, "/endless")
    assert head.startswith(b"HTTP/1.1 200 ")
    assert server.hang_ups.ended.wait(TIMEOUT)
    assert server.hang_ups.seen == [server.hang_up_seen_as]
    assert get(server.port, "/loop") == (200, LOOP.encode())


def test_uvicorn_takes_iopoll_loop_factory() -> None:
    uvicorn = pytest.importorskip("uvicorn")
    config = uvicorn.Config(lambda: None, loop="iopoll.aio:new_event_loop")
    assert config.get_loop_factory() is iopoll.aio.new_event_loop


def test_uvicorn_on_a_thread_leaves_signal_handlers_alone() -> None:
    # uvicorn's Server.capture_signals() installs its handlers on the main thread only.
    handled = (signal.SIGINT, signal.SIGTERM)
    before = [signal.getsignal(signum) for signum in handled]
    with uvicorn_serving("h11") as server:
        assert get(server.port, "/loop") == (200, LOOP.encode())
        during = [signal.getsignal(signum) for signum in handled]
    assert during == before
