"""The asyncio servers of ``bench_http``: one process (or N workers) per server, on a loop.

    python -m benchmarks.http_servers {protocol,uvicorn} --loop LOOP --port P [--workers N]

``protocol`` is the responder of ``examples/http_hello.py`` (the same ``HelloRequests``,
httptools underneath) as an ``asyncio.Protocol``; ``uvicorn`` is uvicorn with its httptools
parser and a three-line ASGI app.  ``LOOP`` is ``asyncio`` (the stock selector loop),
``iopoll.aio`` or ``uvloop``.  The workers, their ``SO_REUSEPORT`` listeners and the signal
handling are the example's too (``listener()``, ``run_workers()``), so every server in the
benchmark scales out in the same way.  Each worker prints one line, ``worker PID serving
...``, once its listener is open: ``bench_http`` reads them to know the server is up and
whose CPU time to count.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import os
import signal
import socket
from pathlib import Path
from types import ModuleType
from typing import Any

from benchmarks.bench_aio import LOOPS, loop_factory

UVICORN_LOOPS = {"asyncio": "asyncio", "iopoll.aio": "iopoll.aio:new_event_loop",
                 "uvloop": "uvloop"}


def example() -> ModuleType:
    """``examples/http_hello.py``, imported from its file (``examples/`` is not a package)."""
    path = Path(__file__).resolve().parent.parent / "examples" / "http_hello.py"
    spec = importlib.util.spec_from_file_location("http_hello", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def serve_protocol(hello: ModuleType, sock: socket.socket, loop_name: str) -> None:
    """The example's responder as an ``asyncio.Protocol``, until SIGTERM or SIGINT."""

    class HelloProtocol(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            self.transport: Any = transport
            self.requests = hello.HelloRequests()

        def data_received(self, data: bytes) -> None:
            out = self.requests.feed(data)
            if out:
                self.transport.write(out)
            if not self.requests.keep_alive:
                self.transport.close()

    loop = loop_factory(loop_name)()
    try:
        server = loop.run_until_complete(loop.create_server(HelloProtocol, sock=sock))
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, loop.stop)
        loop.run_forever()
        server.close()
        loop.run_until_complete(server.wait_closed())
    finally:
        loop.close()


async def hello_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """The smallest ASGI app: 200, text/plain, the example's body."""
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": b"Hello, World!"})


def serve_uvicorn(sock: socket.socket, loop_name: str) -> None:
    """uvicorn (httptools, no access log, no lifespan) on ``sock`` until SIGTERM/SIGINT."""
    import uvicorn

    config = uvicorn.Config(
        hello_app, loop=UVICORN_LOOPS[loop_name], http="httptools", lifespan="off",
        access_log=False, log_level="warning",
    )
    uvicorn.Server(config).run(sockets=[sock])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kind", choices=("protocol", "uvicorn"))
    parser.add_argument("--loop", choices=LOOPS, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args(argv)
    hello = example()

    def work() -> None:
        sock = hello.listener(args.host, args.port)
        print(f"worker {os.getpid()} serving http://{args.host}:{args.port}/ "
              f"({args.kind} on {args.loop})\n", end="", flush=True)  # one write per line
        if args.kind == "protocol":
            serve_protocol(hello, sock, args.loop)
        else:
            serve_uvicorn(sock, args.loop)

    hello.run_workers(args.workers, work)


if __name__ == "__main__":
    main()
