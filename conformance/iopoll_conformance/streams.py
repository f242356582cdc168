"""Streams for the rules to watch, and what the rules do to them.

The connected pairs the fixtures hand out (``socketpair``, ``tcp_pair``, ``tls_pair``) live in
:mod:`iopoll_conformance.support`; this module has the other streams the rules need (several
TCP pairs, a pipe, a pair on a chosen fd number, TLS with bytes left in the SSL object) and the
I/O the rules do on them: read everything, fill the send buffer, read an exact count, ask the
OS what is readable, send from another thread later, close whatever is left.

Nothing here goes through the implementation under test: a rule uses these to make a state and
to check it with the OS (``select.select``), never with the API it is testing.
"""

from __future__ import annotations

import contextlib
import os
import select
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from .support import tcp_pair, tls_pair

__all__ = [
    "close_all",
    "closing_all",
    "drain",
    "fd_idle",
    "fill",
    "nonblocking_pipe",
    "recv_exactly",
    "sending_later",
    "socketpair_on_fd",
    "tcp_pairs",
    "tls_with_pending",
    "wait_readable",
]

# How long the helpers keep trying before giving up on loopback traffic that should be instant.
_PATIENCE = 5.0

# What a non-blocking read raises when there is nothing to read right now: a plain socket's
# BlockingIOError, or SSLWantReadError from an SSLSocket whose next record has not arrived.
_NOTHING_YET = (BlockingIOError, ssl.SSLWantReadError)


# -- more streams ----------------------------------------------------------------------------


def tcp_pairs(count: int) -> list[tuple[socket.socket, socket.socket]]:
    """``count`` connected loopback TCP pairs (client, server), non-blocking."""
    return [tcp_pair() for _ in range(count)]


def nonblocking_pipe() -> tuple[Any, Any]:
    """A pipe as two unbuffered, non-blocking file objects: (read end, write end)."""
    read_fd, write_fd = os.pipe()
    os.set_blocking(read_fd, False)
    os.set_blocking(write_fd, False)
    return open(read_fd, "rb", buffering=0), open(write_fd, "wb", buffering=0)


def socketpair_on_fd(fd: int) -> tuple[socket.socket, socket.socket]:
    """A fresh non-blocking AF_UNIX pair whose first end is moved onto fd number ``fd``.

    ``fd`` must be free (its stream closed); if something else took the number meanwhile
    (the implementation may have opened an fd), the test is skipped rather than clobber it.
    """
    try:
        os.fstat(fd)
    except OSError:
        pass
    else:
        pytest.skip(f"fd {fd} was taken by something else before it could be reused")
    sock, peer = socket.socketpair()
    if peer.fileno() == fd:  # the lowest free number went to the pair itself
        sock, peer = peer, sock
    if sock.fileno() != fd:
        os.dup2(sock.fileno(), fd)
        moved = socket.socket(fileno=fd)
        sock.close()
        sock = moved
    sock.setblocking(False)
    peer.setblocking(False)
    return sock, peer


def tls_with_pending(payload: bytes = b"0123456789") -> tuple[ssl.SSLSocket, ssl.SSLSocket]:
    """A TLS pair (client, server) whose client holds buffered bytes while its fd is idle.

    The server sends ``payload`` as one TLS record; the client reads 1 byte of it, so the
    rest sits decrypted inside the SSL object (``pending()``) and the fd has nothing left.
    """
    client, server = tls_pair()
    server.sendall(payload)
    first = recv_exactly(client, 1)
    assert first == payload[:1]
    assert client.pending() == len(payload) - 1, client.pending()
    assert fd_idle(client.fileno()), "the TLS record should have been read whole"
    return client, server


# -- reading and writing -------------------------------------------------------------------


def drain(sock: Any) -> bytes:
    """Read everything a non-blocking ``sock`` (socket or ``ssl.SSLSocket``) holds right now.

    Stops at end of file or when nothing more is there; any other error (a reset, say) is
    the test's business and propagates.
    """
    chunks = []
    while True:
        try:
            chunk = sock.recv(65536)
        except _NOTHING_YET:
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks)


def fill(sock: socket.socket) -> int:
    """Write to ``sock`` until its send buffer is full; return how many bytes it took."""
    total = 0
    block = b"x" * 65536
    while True:
        try:
            total += sock.send(block)
        except BlockingIOError:
            return total


def recv_exactly(sock: Any, size: int) -> bytes:
    """Read exactly ``size`` bytes from a non-blocking ``sock``, waiting for them to arrive."""
    data = b""
    deadline = time.monotonic() + _PATIENCE
    while len(data) < size:
        try:
            chunk = sock.recv(size - len(data))
        except _NOTHING_YET:
            if time.monotonic() > deadline:
                raise TimeoutError(f"only {len(data)} of {size} bytes arrived") from None
            time.sleep(0.005)
            continue
        if not chunk:
            raise EOFError(f"peer closed after {len(data)} of {size} bytes")
        data += chunk
    return data


@contextlib.contextmanager
def sending_later(sock: socket.socket, delay: float = 0.2, payload: bytes = b"x") -> Iterator[None]:
    """Send ``payload`` on ``sock`` from another thread ``delay`` seconds after entering.

    The thread is cancelled (if it has not fired) and joined on exit.
    """

    def send() -> None:
        with contextlib.suppress(OSError):
            sock.send(payload)

    timer = threading.Timer(delay, send)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
        timer.join()


# -- asking the OS -------------------------------------------------------------------------


def fd_idle(fd: int) -> bool:
    """Whether the OS says ``fd`` has nothing to read (independent of the API under test)."""
    readable, _, _ = select.select([fd], [], [], 0)
    return not readable


def wait_readable(sock: Any) -> None:
    """Block until the OS says ``sock`` is readable (loopback delivery is quick but async)."""
    readable, _, _ = select.select([sock], [], [], _PATIENCE)
    if not readable:
        raise TimeoutError("nothing arrived")


# -- closing -------------------------------------------------------------------------------


def close_all(*objects: Any) -> None:
    """Close every object given (sockets, files), each even if closing another failed.

    Meant for clean-up in ``finally`` blocks: an ``OSError`` from a close (a stream already
    closed behind the object's back, say) is ignored, so it never takes the place of the
    exception that is failing the test.
    """
    for obj in objects:
        with contextlib.suppress(OSError):
            obj.close()


@contextlib.contextmanager
def closing_all(*objects: Any) -> Iterator[None]:
    """Close every object given on leaving the block, however it is left (``close_all``)."""
    try:
        yield
    finally:
        close_all(*objects)
