"""What every rule group builds on: the SPEC names, ``Capabilities``, the connected pairs the
fixtures hand out, and the helpers that call ``wait()`` and read what it reported.

Other streams, and the I/O the rules do on them, are in :mod:`iopoll_conformance.streams`;
signals and forked children in :mod:`iopoll_conformance.process`.
"""

from __future__ import annotations

import socket
import ssl
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

_T = TypeVar("_T")

# The names every implementation exposes (SPEC section 1).
SPEC_NAMES = (
    "Context",
    "Watcher",
    "Handle",
    "StreamPollHandle",
    "Event",
    "Backend",
    "ErrorCode",
    "PollError",
    "FailedPollOperationError",
    "FailedContextInitializationError",
    "FailedHandleAddError",
    "FailedWatcherModificationError",
    "FailedPollWaitError",
    "BackendUnavailableError",
    "InactiveWatcherError",
    "HandleAlreadyWatchedError",
    "InvalidHandleError",
)


@dataclass(frozen=True)
class Capabilities:
    """What the backend under test can do, discovered through the public API only.

    Rules that need a missing capability are skipped, never failed.
    """

    edge_triggering: bool
    priority: bool
    read_hangup: bool
    # SELECT semantics (SPEC 6.11 and 7): hang-up found by peeking, FD_SETSIZE limit.
    select_semantics: bool
    # Whether wait() takes float and timedelta timeouts (the polyfill takes whole seconds).
    float_timeouts: bool
    # Whether regular files and /dev/null can be added (always ready); EPOLL refuses them.
    regular_files: bool
    # Whether only sockets can be added (SPEC 2: WSAPOLL refuses pipes, files, anything else
    # with NOSUPPORT).  Stated by name, not probed: a probe would excuse any backend.
    sockets_only: bool = False
    # Where SPEC 6.7 is silent (KQUEUE: its read filter on a regular file is kqueue's):
    # whether a regular file read to its end is still READ (POLL, SELECT), or READ only while
    # its offset is before end of file (KQUEUE; WRITE stays always ready).
    files_ready_at_eof: bool = True
    # Whether a device the OS's kqueue cannot watch (/dev/null on FreeBSD) may be refused
    # with FailedHandleAddError, code NOSUPPORT (KQUEUE), rather than be always ready.
    devices_may_be_refused: bool = False

    @classmethod
    def discover(cls, api: ModuleType, backend: Any) -> Capabilities:
        """Probe ``api`` and ``backend`` (a member of ``api.Backend``)."""
        read_hangup = getattr(backend, "supports_read_hangup", None)
        with api.Context(backend) as ctx:
            try:
                ctx.wait(0.0)
                float_timeouts = True
            except TypeError:
                float_timeouts = False
        return cls(
            edge_triggering=backend.supports_edge_triggering(),
            priority=backend.supports_priority(),
            read_hangup=(
                read_hangup()
                if read_hangup is not None
                else backend.name == "EPOLL" or (backend.name == "POLL" and sys.platform == "linux")
            ),
            select_semantics=backend.name == "SELECT",
            float_timeouts=float_timeouts,
            regular_files=backend.name not in ("EPOLL", "WSAPOLL"),
            sockets_only=backend.name == "WSAPOLL",
            files_ready_at_eof=backend.name != "KQUEUE",
            devices_may_be_refused=backend.name == "KQUEUE",
        )


def names_argument(exc: BaseException, argument: str) -> None:
    """The message of ``exc`` names ``argument`` (SPEC 1)."""
    message = str(exc)
    assert argument in message, f"{argument!r} not named in: {message!r}"


def refuses(
    call: Callable[[Any], object],
    bad_values: Iterable[Any],
    error: type[Exception],
    *arguments: str,
) -> None:
    """``call(bad)`` raises ``error`` for each bad value, its message naming ``arguments``."""
    for bad in bad_values:
        try:
            call(bad)
        except error as exc:
            for argument in arguments:
                names_argument(exc, argument)
        else:
            raise AssertionError(f"{bad!r} was accepted: {error.__name__} expected")


def socketpair() -> tuple[socket.socket, socket.socket]:
    """A non-blocking AF_UNIX stream pair."""
    a, b = socket.socketpair()
    a.setblocking(False)
    b.setblocking(False)
    return a, b


def tcp_pair() -> tuple[socket.socket, socket.socket]:
    """A connected, non-blocking loopback TCP pair (client, server side)."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        client = socket.create_connection(listener.getsockname())
        server, _ = listener.accept()
    client.setblocking(False)
    server.setblocking(False)
    return client, server


def short_wait(ctx: Any, max_events: int | None = None) -> list[Any]:
    """A 200 ms wait in the form every implementation accepts (whole seconds + µs)."""
    return list(ctx.wait(0, 200_000, max_events))


def poll_now(ctx: Any, max_events: int | None = None) -> list[Any]:
    """A zero-timeout wait."""
    return list(ctx.wait(0, 0, max_events))


def reported(watchers: Iterable[Any]) -> dict[Any, Any]:
    """``{watcher.data: watcher.triggered_events}`` for a wait's result."""
    return {w.data: w.triggered_events for w in watchers}


def waits(ctx: Any, count: int) -> list[dict[Any, Any]]:
    """``reported()`` of ``count`` consecutive waits: one short wait, then zero-timeout ones.

    The first wait gives late readiness its time; level state shows at once after that.
    """
    return [reported(short_wait(ctx) if i == 0 else poll_now(ctx)) for i in range(count)]


def timed(call: Callable[[], _T]) -> tuple[_T, float]:
    """Run ``call`` and return its result and the seconds it took (monotonic clock)."""
    start = time.monotonic()
    result = call()
    return result, time.monotonic() - start


TLS_CERT = str(Path(__file__).with_name("tls_cert.pem"))
TLS_KEY = str(Path(__file__).with_name("tls_key.pem"))


def tls_pair() -> tuple[ssl.SSLSocket, ssl.SSLSocket]:
    """A connected TLS pair over loopback TCP (client, server), handshake done, non-blocking.

    The certificate is a self-signed one for ``localhost`` shipped with this package.
    """
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(TLS_CERT, TLS_KEY)
    client_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client_ctx.load_verify_locations(TLS_CERT)
    raw_client, raw_server = tcp_pair()
    raw_client.setblocking(True)
    raw_server.setblocking(True)
    client = client_ctx.wrap_socket(
        raw_client, server_hostname="localhost", do_handshake_on_connect=False
    )
    server = server_ctx.wrap_socket(raw_server, server_side=True, do_handshake_on_connect=False)
    done = threading.Thread(target=server.do_handshake)
    done.start()
    client.do_handshake()
    done.join()
    client.setblocking(False)
    server.setblocking(False)
    return client, server
