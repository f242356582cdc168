"""The real OS objects the Context soak watches, and the I/O it does on them.

A *pair* is two connected ends: ``local``, the end a watcher watches, and ``peer``, the end
the soak drives from outside.  Kinds: ``unix`` (AF_UNIX socketpair), ``tcp`` (loopback TCP),
``pipe-r`` (local is a pipe's read end), ``pipe-w`` (local is its write end) and ``tls`` (TLS
over loopback TCP, so that bytes can sit in the SSL object where the fd no longer shows them).

Everything is non-blocking.  TCP is asynchronous even on loopback, so every TCP operation
*settles*: it waits (on its own ``select.poll``, never on the Context under test) until the
kernel shows what the soak just did (bytes in the receiver's queue, end of file visible, a
drained send queue), which turns the model's counters into facts about the kernel.
"""

from __future__ import annotations

import array
import fcntl
import io
import os
import select
import socket
import ssl
import termios
import time
from dataclasses import dataclass
from typing import Any

from iopoll_conformance.support import TLS_CERT, TLS_KEY

__all__ = [
    "KINDS",
    "PAYLOAD",
    "SETTLE_SECONDS",
    "Pair",
    "Streams",
    "inq",
    "outq",
    "read_some",
    "write_some",
]

KINDS = ("unix", "tcp", "pipe-r", "pipe-w", "tls")
# The byte counts the soak moves come out of this buffer (memoryview slices: no copies).
PAYLOAD = memoryview(b"s" * (1 << 18))
# A settle gives up after this long; the model then treats the fact as unknown.
SETTLE_SECONDS = 2.0
# Small TCP buffers keep a "fill" (write until the kernel refuses) to a few hundred KiB.
TCP_BUFFER = 64 * 1024
# Bytes a TCP or TLS pair may hold unread in one direction (besides a fill): well inside
# the receive window that TCP_BUFFER gives.
TCP_QUEUE = 48 * 1024
TLS_QUEUE = 32 * 1024
TLS_RECORD = 16 * 1024
TLS_RECORD_OVERHEAD = 22
_QUICKACK = getattr(socket, "TCP_QUICKACK", 0)  # Linux

Stream = Any  # socket.socket, ssl.SSLSocket or io.FileIO


def _ioctl_int(fd: int, request: int) -> int:
    buffer = array.array("i", [0])
    fcntl.ioctl(fd, request, buffer)
    return buffer[0]


def inq(stream: Stream) -> int:
    """Bytes waiting in the kernel to be read from ``stream`` (``FIONREAD``)."""
    return _ioctl_int(stream.fileno(), termios.FIONREAD)


def outq(stream: Stream) -> int:
    """What a socket's kernel still holds of what it sent (``TIOCOUTQ``): 0 once the peer
    has it all (TCP: acknowledged; AF_UNIX: read).  Pipes: the bytes in the pipe."""
    if isinstance(stream, socket.socket):
        return _ioctl_int(stream.fileno(), termios.TIOCOUTQ)
    return _ioctl_int(stream.fileno(), termios.FIONREAD)


def write_some(stream: Stream, size: int) -> int:
    """Write up to ``size`` bytes without blocking; how many the kernel took (0: none).

    A TLS write that would block is never left half done: callers keep TLS writes small
    enough for the kernel to take at once (see ``Streams.tls_room``).
    """
    view = PAYLOAD[:size]
    try:
        if isinstance(stream, socket.socket):
            return stream.send(view)
        written = stream.write(view)  # FileIO: None when the pipe is full
        return written or 0
    except (BlockingIOError, ssl.SSLWantWriteError, ssl.SSLWantReadError):
        return 0


def read_some(stream: Stream, size: int) -> int | None:
    """Read up to ``size`` bytes without blocking: how many (0 at end of file), or ``None``
    when nothing is there yet.  A reset reads as end of file (``ConnectionResetError``)."""
    try:
        if isinstance(stream, socket.socket):
            return len(stream.recv(size))
        data = stream.read(size)  # FileIO: None when the pipe is empty
        return None if data is None else len(data)
    except (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
        return None
    except (ConnectionResetError, ssl.SSLError, BrokenPipeError):
        return 0


def wait_fd(stream: Stream, events: int, seconds: float) -> bool:
    """Whether ``stream``'s fd shows ``events`` within ``seconds``, asked of a private
    ``select.poll`` (the soak's own oracle, never the Context under test)."""
    probe = select.poll()
    probe.register(stream.fileno(), events)
    return bool(probe.poll(seconds * 1000.0))


@dataclass
class Pair:
    """Two connected ends: ``local`` is watched, ``peer`` is driven by the soak."""

    kind: str
    local: Stream
    peer: Stream

    def close(self) -> None:
        """Close both ends (closing a closed end is a no-op)."""
        for end in (self.local, self.peer):
            end.close()


class Streams:
    """Makes pairs of every kind; owns the TCP listener and the TLS contexts.

    ``close()`` releases them; pairs are the caller's to close.
    """

    def __init__(self) -> None:
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        # Accepted sockets inherit the listener's buffer sizes.
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, TCP_BUFFER)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, TCP_BUFFER)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        self.address = self.listener.getsockname()
        self.server_tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.server_tls.load_cert_chain(TLS_CERT, TLS_KEY)
        # TLS 1.3 servers send session tickets on their first read after the handshake:
        # bytes on the client's fd that no application wrote.  None here, so that the fd
        # shows only what the soak sent.
        self.server_tls.num_tickets = 0
        self.client_tls = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        self.client_tls.load_verify_locations(TLS_CERT)

    def close(self) -> None:
        """Release the listener."""
        self.listener.close()

    # -- making pairs ------------------------------------------------------------------------

    def make(self, kind: str, flip: bool = False) -> Pair:
        """A new pair of ``kind``; ``flip`` swaps which socket end is local (not for pipes).

        The first fd the pair allocates is the local end's, so that a closed local end's fd
        number, the lowest free one, goes to the new local end.
        """
        if kind == "unix":
            a, b = socket.socketpair()
            a.setblocking(False)
            b.setblocking(False)
            return Pair(kind, b, a) if flip else Pair(kind, a, b)
        if kind in ("pipe-r", "pipe-w"):
            read_fd, write_fd = os.pipe()  # the read end takes the lower number
            os.set_blocking(read_fd, False)
            os.set_blocking(write_fd, False)
            reader = io.FileIO(read_fd, "rb")
            writer = io.FileIO(write_fd, "wb")
            return (
                Pair("pipe-r", reader, writer)
                if kind == "pipe-r"
                else Pair("pipe-w", writer, reader)
            )
        client, server = self._tcp()
        if kind == "tcp":
            return Pair(kind, server, client) if flip else Pair(kind, client, server)
        if kind == "tls":
            tls_client, tls_server = self._tls(client, server)
            ends = (tls_server, tls_client) if flip else (tls_client, tls_server)
            return Pair(kind, *ends)
        raise ValueError(f"unknown stream kind {kind!r}")

    def _tcp(self) -> tuple[socket.socket, socket.socket]:
        client = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, TCP_BUFFER)
        client.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, TCP_BUFFER)
        client.connect(self.address)
        server, _ = self.listener.accept()
        for end in (client, server):
            # No Nagle: a small write goes out at once, not after the last one's (delayed) ACK.
            end.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            end.setblocking(False)
        return client, server

    def _tls(
        self, client: socket.socket, server: socket.socket
    ) -> tuple[ssl.SSLSocket, ssl.SSLSocket]:
        """Both ends' handshakes, driven in this thread, then TLS 1.3's session tickets read
        out so that the fds start quiet."""
        tls_client = self.client_tls.wrap_socket(
            client, server_hostname="localhost", do_handshake_on_connect=False
        )
        tls_server = self.server_tls.wrap_socket(
            server, server_side=True, do_handshake_on_connect=False
        )
        waiting = [tls_client, tls_server]
        deadline = time.monotonic() + SETTLE_SECONDS * 5
        while waiting:
            for end in list(waiting):
                try:
                    end.do_handshake()
                    waiting.remove(end)
                except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
                    pass
            if waiting:
                if time.monotonic() > deadline:
                    raise TimeoutError("TLS handshake over loopback did not finish")
                wait_fd(waiting[0], select.POLLIN, 0.01)
        if tls_client.version() != "TLSv1.3":
            raise RuntimeError(f"the soak's TLS framing is TLS 1.3's, not {tls_client.version()}")
        for end in (tls_client, tls_server):
            self.settle_quiet(end)
        return tls_client, tls_server

    # -- settling ----------------------------------------------------------------------------

    @staticmethod
    def settle_quiet(end: Stream) -> None:
        """Read out whatever a TLS end has that is not application data (what is left of
        the handshake): afterwards its fd shows no bytes and ``pending()`` is 0."""
        deadline = time.monotonic() + SETTLE_SECONDS
        while time.monotonic() < deadline:
            if read_some(end, 1 << 16) is not None:
                raise RuntimeError("application data during the TLS set-up")
            if inq(end) == 0 and end.pending() == 0:
                return
            wait_fd(end, select.POLLIN, 0.01)

    @staticmethod
    def wire_bytes(pair: Pair, sent: int) -> int:
        """What ``sent`` application bytes put in the receiver's kernel: TLS 1.3 frames them
        in records of at most 16 KiB, each 22 bytes longer (header, content type, AEAD tag)."""
        if pair.kind == "tls":
            return sent + TLS_RECORD_OVERHEAD * -(-sent // TLS_RECORD)
        return sent

    @staticmethod
    def settle_landed(pair: Pair, receiver: Stream, expected: int) -> bool:
        """After a write on a TCP or TLS pair: wait until the receiver's kernel holds
        ``expected`` bytes (``FIONREAD``), so that "sent" means "there".  Instant elsewhere."""
        if pair.kind not in ("tcp", "tls"):
            return True
        deadline = time.monotonic() + SETTLE_SECONDS
        while inq(receiver) < expected:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.0002)
        return True

    @staticmethod
    def settle_closed(pair: Pair) -> bool:
        """After the peer closed or shut down writing: wait until the local end shows it."""
        if pair.kind not in ("tcp", "tls"):
            return True
        flags = select.POLLIN | select.POLLHUP | select.POLLERR | getattr(select, "POLLRDHUP", 0)
        return wait_fd(pair.local, flags, SETTLE_SECONDS)

    # -- reading everything -------------------------------------------------------------------

    @staticmethod
    def read_exactly(end: Stream, expected: int) -> tuple[int, bool]:
        """Read until ``expected`` bytes came (waiting for TCP's stragglers), then on until
        the end would block.  Returns ``(bytes read, end of file or reset seen)``.

        A TCP reader acknowledges at once (``TCP_QUICKACK``), so that the writer learns of
        the room without a delayed ACK's 40 ms.
        """
        got = 0
        deadline = time.monotonic() + SETTLE_SECONDS
        quick = _QUICKACK and isinstance(end, socket.socket) and end.family == socket.AF_INET
        while True:
            if quick:
                end.setsockopt(socket.IPPROTO_TCP, _QUICKACK, 1)
            count = read_some(end, len(PAYLOAD))
            if count == 0:
                return got, True
            if count is not None:
                got += count
                continue
            pending = getattr(end, "pending", None)
            if pending is not None and pending():
                continue
            if got >= expected or time.monotonic() > deadline:
                return got, False
            wait_fd(end, select.POLLIN, 0.01)

    @staticmethod
    def settle_acked(pair: Pair) -> bool:
        """After the peer read everything: wait until the local end's send queue is empty
        (all acknowledged), so that its writability no longer depends on timing."""
        if pair.kind not in ("tcp", "tls"):
            return True
        deadline = time.monotonic() + SETTLE_SECONDS
        while outq(pair.local):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.0002)
        return True

    @staticmethod
    def room(pair: Pair, queued: int, size: int) -> int:
        """How much of ``size`` a write may carry with ``queued`` bytes not yet read.

        TCP: no more than the receiver's window takes at once, so that every write settles
        (the bytes reach the other kernel).  TLS: also no write that would block, since one
        must be retried with the same buffer.  Elsewhere anything (a short write is a fill).
        """
        if pair.kind == "tcp":
            return max(0, min(size, TCP_QUEUE - queued))
        if pair.kind == "tls":
            return max(0, min(size, TLS_QUEUE - queued))
        return size
