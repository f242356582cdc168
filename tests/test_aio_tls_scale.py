"""A real application on ``iopoll.aio``: a TLS echo server holding 2,000 connections at once.

2,000 connections need about 4,000 fds in this process, far above select()'s FD_SETSIZE of
1024: the soft RLIMIT_NOFILE is raised within the hard limit for the test and restored.
"""

from __future__ import annotations

import asyncio
import ssl
import time

import pytest

import iopoll.aio
from fd_limit import raised_fd_limit
from iopoll_conformance.support import TLS_CERT, TLS_KEY

CONNECTIONS = 2000
NEEDED_FDS = 2 * CONNECTIONS + 200


@pytest.fixture
def many_fds() -> object:
    with raised_fd_limit(NEEDED_FDS):
        yield


@pytest.mark.timeout(180)
def test_tls_echo_server_with_2000_concurrent_connections(many_fds: object) -> None:
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(TLS_CERT, TLS_KEY)
    client_ctx = ssl.create_default_context(cafile=TLS_CERT)

    async def main() -> tuple[int, int, int]:
        open_now = peak = 0
        all_connected = asyncio.Event()

        async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            nonlocal open_now, peak
            open_now += 1
            peak = max(peak, open_now)
            try:
                while data := await reader.read(4096):
                    writer.write(data)
                    await writer.drain()
            finally:
                open_now -= 1
                writer.close()

        server = await asyncio.start_server(
            echo, "127.0.0.1", 0, ssl=server_ctx, backlog=CONNECTIONS, ssl_handshake_timeout=120
        )
        port = server.sockets[0].getsockname()[1]
        handshakes = asyncio.Semaphore(64)  # pace the handshakes, not the connections
        connected = 0
        highest_fd = 0

        async def client(i: int) -> bool:
            nonlocal connected, highest_fd
            async with handshakes:
                reader, writer = await asyncio.open_connection(
                    "127.0.0.1",
                    port,
                    ssl=client_ctx,
                    server_hostname="localhost",
                    ssl_handshake_timeout=120,
                )
            highest_fd = max(highest_fd, writer.get_extra_info("socket").fileno())
            connected += 1
            if connected == CONNECTIONS:
                all_connected.set()
            await all_connected.wait()  # every connection is open before any talks
            message = b"message %d " % i * 20
            writer.write(message)
            await writer.drain()
            reply = await reader.readexactly(len(message))
            writer.close()
            try:
                await writer.wait_closed()
            except (ConnectionError, ssl.SSLError):
                pass
            return reply == message

        async with server:
            replies = await asyncio.wait_for(
                asyncio.gather(*(client(i) for i in range(CONNECTIONS))), 150
            )
        return sum(replies), peak, highest_fd

    start = time.monotonic()
    correct, peak, highest_fd = iopoll.aio.run(main())
    assert correct == CONNECTIONS
    assert peak == CONNECTIONS  # all were open on the server at the same time
    assert highest_fd > 1024  # beyond what select() could watch
    assert time.monotonic() - start < 150
