"""Small OS helpers shared by the event, one-shot, edge, buffered, file and closed-stream rules."""

from __future__ import annotations

import os
import select
import socket
import ssl
import time
from typing import Any

import pytest

from ..support import poll_now, reported, short_wait, tls_pair

__all__ = [
    "close_all",
    "drain",
    "fd_idle",
    "fill",
    "nonblocking_pipe",
    "recv_exactly",
    "socketpair_on_fd",
    "tls_with_pending",
    "wait_readable",
    "waits",
]

# How long helpers keep trying before giving up on loopback traffic that should be instant.
_PATIENCE = 5.0


def drain(sock: Any) -> bytes:
    """Read everything ``sock`` has right now (a socket or ``ssl.SSLSocket``)."""
    chunks = []
    while True:
        try:
            chunk = sock.recv(65536)
        except (BlockingIOError, ssl.SSLWantReadError):
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
        except (BlockingIOError, ssl.SSLWantReadError):
            if time.monotonic() > deadline:
                raise TimeoutError(f"only {len(data)} of {size} bytes arrived") from None
            time.sleep(0.005)
            continue
        if not chunk:
            raise EOFError(f"peer closed after {len(data)} of {size} bytes")
        data += chunk
    return data


def fd_idle(fd: int) -> bool:
    """Whether the OS says ``fd`` has nothing to read (independent of the API under test)."""
    readable, _, _ = select.select([fd], [], [], 0)
    return not readable


def wait_readable(sock: Any) -> None:
    """Block until the OS says ``sock`` is readable (loopback delivery is quick but async)."""
    readable, _, _ = select.select([sock], [], [], _PATIENCE)
    if not readable:
        raise TimeoutError("nothing arrived")


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


def waits(ctx: Any, count: int) -> list[dict[Any, Any]]:
    """``reported()`` of ``count`` consecutive waits: one short wait, then zero-timeout ones.

    The first wait gives late readiness its time; level state shows at once after that.
    """
    return [reported(short_wait(ctx) if i == 0 else poll_now(ctx)) for i in range(count)]


def close_all(*objects: Any) -> None:
    """Close every object, ignoring ones already closed."""
    for obj in objects:
        try:
            obj.close()
        except OSError:
            pass
