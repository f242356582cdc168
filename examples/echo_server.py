"""An echo server on iopoll, exercised by clients in threads of the same process.

    python examples/echo_server.py [--clients 200] [--messages 50] [--backend EPOLL]

The server is one thread and one ``Context``: a listening socket, and one watcher per
connection whose ``data`` is the bytes still to be sent back.  A watcher asks for ``WRITE``
only while output is pending, so an idle connection costs nothing in ``wait()``.
"""

from __future__ import annotations

import argparse
import socket
import threading
import time

import iopoll
from iopoll import Event


def serve(listener: socket.socket, ctx: iopoll.Context, stop: threading.Event) -> int:
    """Echo everything until ``stop`` is set; return the number of connections served."""
    served = 0
    ctx.add(listener, Event.READ, data=None)
    while not stop.is_set():
        for watcher in ctx.wait(0.1):
            if watcher.data is None:  # the listener: accept what is waiting
                conn, _ = listener.accept()
                conn.setblocking(False)
                ctx.add(conn, Event.READ, data=b"")
                served += 1
                continue
            conn = watcher.handle.stream  # type: ignore[attr-defined]
            pending: bytes = watcher.data
            if watcher.has_triggered(Event.READ):
                try:
                    chunk = conn.recv(65536)
                except ConnectionError:
                    chunk = b""
                if not chunk:  # the client is gone: unwatch first, then close
                    watcher.remove()
                    conn.close()
                    continue
                pending += chunk
            elif watcher.has_triggered(Event.HANGUP):
                watcher.remove()
                conn.close()
                continue
            if pending:
                try:
                    pending = pending[conn.send(pending) :]
                except BlockingIOError:
                    pass
            wanted = Event.READ | Event.WRITE if pending else Event.READ
            if wanted != watcher.watched_events:
                watcher.modify(wanted, pending)
            else:
                watcher.modify_data(pending)
    return served


def client(address: tuple[str, int], messages: int, errors: list[str]) -> None:
    """Send ``messages`` messages and check that each comes back unchanged."""
    with socket.create_connection(address) as sock:
        for i in range(messages):
            payload = f"message {i} from {sock.getsockname()}\n".encode()
            sock.sendall(payload)
            received = b""
            while len(received) < len(payload):
                chunk = sock.recv(len(payload) - len(received))
                if not chunk:
                    errors.append("connection closed early")
                    return
                received += chunk
            if received != payload:
                errors.append(f"bad echo: {received!r}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument("--messages", type=int, default=50)
    parser.add_argument("--backend", default="AUTO", choices=[b.name for b in iopoll.Backend])
    args = parser.parse_args()

    listener = socket.create_server(("127.0.0.1", 0), backlog=args.clients)
    listener.setblocking(False)
    stop = threading.Event()
    with iopoll.Context(iopoll.Backend[args.backend]) as ctx:
        result: list[int] = []
        server = threading.Thread(target=lambda: result.append(serve(listener, ctx, stop)))
        server.start()
        errors: list[str] = []
        started = time.perf_counter()
        clients = [
            threading.Thread(
                target=client, args=(listener.getsockname(), args.messages, errors)
            )
            for _ in range(args.clients)
        ]
        for thread in clients:
            thread.start()
        for thread in clients:
            thread.join()
        elapsed = time.perf_counter() - started
        stop.set()
        server.join()
    listener.close()
    total = args.clients * args.messages
    print(f"backend {ctx.backend.name}: {result[0]} connections, {total} echoes "
          f"in {elapsed:.2f} s ({total / elapsed:,.0f} round trips/s), errors: {len(errors)}")
    if errors:
        raise SystemExit(f"first error: {errors[0]}")


if __name__ == "__main__":
    main()
