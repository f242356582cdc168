"""A keep-alive HTTP/1.1 "hello" server on iopoll.loop, one process per core if asked.

    python examples/http_hello.py [--port 8080] [--workers N] [--driver native|select|selectors]

Needs httptools (the HTTP parser uvicorn uses): ``python -m pip install httptools``.

Scale-out is Workerman's: ``--workers N`` forks N processes, and each opens its own
listening socket on the same port with ``SO_REUSEPORT``, so the kernel spreads incoming
connections over them.  Each worker has its own driver and so its own ``Context``; nothing
is shared between them, and the fork happens before any of them exists (a Context is never
carried across ``fork()``).  The parent only forwards SIGINT/SIGTERM and waits.

``--driver`` picks the loop under the responder: ``native`` is ``IoPollDriver`` on the
best backend here (epoll on Linux, kqueue on macOS/BSD, ...), ``select`` the same driver on
the polyfill's ``select()`` mechanism, ``selectors`` the driver on the standard library's
``selectors``.  ``benchmarks/bench_http.py`` runs this file as its iopoll.loop servers.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import sys
from collections.abc import Callable
from typing import Any

import httptools

from iopoll import Backend
from iopoll.loop import Driver, IoPollDriver, SelectorsDriver

BODY = b"Hello, World!"
RESPONSE = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n%s"
    % (len(BODY), BODY)
)
BAD_REQUEST = b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"

DRIVERS: dict[str, Callable[[], Driver]] = {
    "native": IoPollDriver,
    "select": lambda: IoPollDriver(Backend.SELECT),
    "selectors": SelectorsDriver,
}


class HelloRequests:
    """The HTTP side of one connection: bytes in, the responses they ask for out.

    httptools calls ``on_message_complete`` once per whole request, so a pipelined batch
    is answered in one write.  The body of every request is ignored.
    """

    __slots__ = ("_complete", "keep_alive", "parser")

    def __init__(self) -> None:
        self.parser = httptools.HttpRequestParser(self)
        self.keep_alive = True
        self._complete = 0

    def on_message_complete(self) -> None:
        self._complete += 1
        self.keep_alive = self.parser.should_keep_alive()

    def feed(self, data: bytes | memoryview) -> bytes:
        """The bytes to send back for ``data``; a parse error answers 400 and ends keep-alive."""
        self._complete = 0
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            self.keep_alive = False
            return RESPONSE * self._complete + BAD_REQUEST
        return RESPONSE * self._complete


# The system calls a connection reads and writes with.  On POSIX, read(2) and write(2) on the
# socket's fd through os.read/os.write: the calls uvloop's transports make, and on the
# Python side the cheapest way to make them (their arguments are parsed with less work than
# socket.recv_into's and send's: about 1,000 instructions less per request).  Windows
# cannot read or write a socket as a file, so there the socket's own methods are used.
if os.name == "posix":
    _read: Callable[[Any, int], bytes] = os.read
    _write: Callable[[Any, bytes], int] = os.write
else:
    _read = socket.socket.recv
    _write = socket.socket.send

# How much one read asks for.  A read makes a bytes object of the size asked and shrinks it
# to what came: up to SMALL_READ bytes, that object comes from Python's small-object
# allocator (blocks of up to 512 bytes, less the object's own header); 64 KiB is a malloc
# and a realloc, some 600 instructions more per request.  So a connection asks for
# SMALL_READ, and for READ_SIZE after a read that filled what it asked (more may wait: a
# big body, pipelined requests), until a read comes back short.
SMALL_READ = 512 - sys.getsizeof(b"")
READ_SIZE = 65536


class Connection:
    """One accepted socket on the driver: read, answer, and write what did not fit."""

    __slots__ = (
        "_driver", "_io", "_pending", "_read_size", "_reader", "_requests", "_sock", "_writer",
    )

    def __init__(self, driver: Driver, sock: socket.socket) -> None:
        self._driver = driver
        self._sock = sock
        # What _read and _write take: the fd on POSIX, the socket elsewhere.
        self._io: Any = sock.fileno() if os.name == "posix" else sock
        self._requests = HelloRequests()
        self._pending = b""
        self._read_size = SMALL_READ
        self._writer: str | None = None
        self._reader = driver.on_readable(sock, self._readable)

    def _readable(self, _id: str, _sock: Any) -> None:
        size = self._read_size
        try:
            data = _read(self._io, size)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:  # reset by the peer
            data = b""
        if not data:
            self.close()
            return
        self._read_size = READ_SIZE if len(data) == size else SMALL_READ
        out = self._requests.feed(data)
        if out:  # else no request is whole yet
            self._send(out)

    def _send(self, out: bytes) -> None:
        """Write ``out`` after what waits already; wait for room for the rest (one writer
        callback until all is out); close once all is out if the client asked to."""
        if self._pending:  # still waiting for room: keep the order
            self._pending += out
            return
        try:
            sent = _write(self._io, out)
        except BlockingIOError:
            sent = 0
        except OSError:
            self.close()
            return
        if sent < len(out):
            self._pending = out[sent:]
            if self._writer is None:
                self._writer = self._driver.on_writable(self._sock, self._writable)
            return
        if self._writer is not None:
            self._driver.cancel(self._writer)
            self._writer = None
        if not self._requests.keep_alive:
            self.close()

    def _writable(self, _id: str, _sock: Any) -> None:
        out, self._pending = self._pending, b""
        self._send(out)

    def close(self) -> None:
        """Cancel this connection's callbacks, then close its socket."""
        self._driver.cancel(self._reader)
        if self._writer is not None:
            self._driver.cancel(self._writer)
            self._writer = None
        self._sock.close()


def listener(host: str, port: int) -> socket.socket:
    """A non-blocking listening socket that shares its port with the other workers.

    ``TCP_NODELAY`` on the listener is inherited by every accepted socket (Linux, BSD), so a
    response never waits for Nagle's algorithm.  The socket is made with ``IPPROTO_TCP``
    spelled out: asyncio sets ``TCP_NODELAY`` only on sockets whose ``proto`` says TCP.
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if hasattr(socket, "SO_REUSEPORT"):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind((host, port))
    sock.listen(1024)
    sock.setblocking(False)
    return sock


def serve(sock: socket.socket, driver: Driver) -> None:
    """Answer every connection to ``sock`` on ``driver`` until SIGTERM or SIGINT."""

    def accept(_id: str, _sock: Any) -> None:
        while True:  # take every waiting connection: one readiness report, many accepts
            try:
                conn, _ = sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:  # out of fds, or the peer gave up first: try the next report
                return
            conn.setblocking(False)
            Connection(driver, conn)

    driver.on_readable(sock, accept)
    for signum in (signal.SIGTERM, signal.SIGINT):
        driver.unreference(driver.on_signal(signum, lambda _id, _signum: driver.stop()))
    driver.run()
    sock.close()


def run_workers(workers: int, work: Callable[[], None]) -> None:
    """Run ``work()`` here (one worker) or in ``workers`` forked children, and wait for them.

    SIGTERM and SIGINT to the parent are passed on to every child; the parent returns when
    all have exited.
    """
    if workers == 1:
        work()
        return
    forwarded = (signal.SIGTERM, signal.SIGINT)
    children: list[int] = []

    def forward(signum: int, _frame: object) -> None:
        for pid in children:
            try:
                os.kill(pid, signum)
            except ProcessLookupError:
                pass

    # The signals wait, blocked, until every child is forked and known to forward(): one
    # that came in between would end the parent alone and leave the children serving.
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, forwarded)
    previous = {signum: signal.signal(signum, forward) for signum in forwarded}
    try:
        for _ in range(workers):
            pid = os.fork()
            if pid == 0:  # the child: work, then leave without running the parent's cleanup
                code = 0
                try:
                    for signum, handler in previous.items():
                        signal.signal(signum, signal.SIG_DFL if handler is None else handler)
                    signal.pthread_sigmask(signal.SIG_SETMASK, mask)
                    work()
                except BaseException:
                    code = 1
                    sys.excepthook(*sys.exc_info())
                finally:
                    os._exit(code)
            children.append(pid)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)  # a signal that waited: forwarded
    for pid in children:
        os.waitpid(pid, 0)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--workers", type=int, default=1, help="processes (default 1)")
    parser.add_argument("--driver", choices=sorted(DRIVERS), default="native")
    args = parser.parse_args(argv)
    if args.workers < 1:
        parser.error("--workers must be at least 1")
    if args.workers > 1 and args.port == 0:
        parser.error("--workers above 1 needs a --port: the workers share one port")

    def work() -> None:
        sock = listener(args.host, args.port)  # in the worker: one listener per process
        host, port = sock.getsockname()[:2]
        # One write of the whole line: the workers share the parent's stdout.
        print(f"worker {os.getpid()} serving http://{host}:{port}/ (driver {args.driver})\n",
              end="", flush=True)
        serve(sock, DRIVERS[args.driver]())

    run_workers(args.workers, work)


if __name__ == "__main__":
    main()
