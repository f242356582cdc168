"""``iopoll.aio``'s socket transport: reads into its loop's buffer, Nagle off on all TCP.

The notes in ``_SocketTransport`` (``src/iopoll/aio.py``) say why.  What must hold: a
protocol gets every byte in order, as ``bytes`` objects it may keep (a later read must not
change an earlier chunk); end of file and a reset arrive as with asyncio's transport; a
transport whose ``max_size`` was changed reads as asyncio's does; and every TCP transport
has ``TCP_NODELAY``, its socket made with protocol 0 included (asyncio skips those).
"""

from __future__ import annotations

import asyncio
import os
import socket
import struct
from typing import Any

import pytest

import iopoll.aio


class Keeper(asyncio.Protocol):
    """Keeps every chunk it is given, and how the connection ended."""

    def __init__(self) -> None:
        self.chunks: list[Any] = []
        self.eof = False
        self.lost: asyncio.Future[Exception | None] = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.chunks.append(data)

    def eof_received(self) -> bool:
        self.eof = True
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost.set_result(exc)


async def connected_keeper(peer: socket.socket, ours: socket.socket) -> Keeper:
    loop = asyncio.get_running_loop()
    ours.setblocking(False)
    _, protocol = await loop.connect_accepted_socket(Keeper, ours)
    peer.setblocking(True)
    return protocol


def test_every_byte_arrives_in_order_as_bytes_that_later_reads_leave_alone() -> None:
    payload = os.urandom(3 * 256 * 1024 + 12345)  # more than the buffer, several times

    async def main() -> None:
        peer, ours = socket.socketpair()
        protocol = await connected_keeper(peer, ours)
        assert type(protocol.transport) is iopoll.aio._SocketTransport
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, peer.sendall, payload)
        peer.shutdown(socket.SHUT_WR)
        assert await asyncio.wait_for(protocol.lost, 30) is None
        peer.close()
        assert protocol.eof
        assert all(type(chunk) is bytes for chunk in protocol.chunks)
        # Compared only now, after every read: each kept chunk is still what arrived.
        assert b"".join(protocol.chunks) == payload
        assert max(map(len, protocol.chunks)) <= 256 * 1024

    iopoll.aio.run(main())


def test_a_reset_reaches_connection_lost_with_the_error() -> None:
    async def main() -> None:
        listener = socket.create_server(("127.0.0.1", 0))  # TCP: an AF_UNIX pair has no RST
        client = socket.create_connection(listener.getsockname())
        accepted, _ = listener.accept()
        listener.close()
        protocol = await connected_keeper(client, accepted)
        client.sendall(b"last words")
        # SO_LINGER 0: close() sends RST instead of FIN.
        client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        client.close()
        exc = await asyncio.wait_for(protocol.lost, 30)
        assert isinstance(exc, ConnectionResetError)
        assert b"".join(protocol.chunks) in (b"", b"last words")
        assert not protocol.eof

    iopoll.aio.run(main())


def test_a_changed_max_size_reads_as_asyncio_does() -> None:
    async def main() -> None:
        peer, ours = socket.socketpair()
        protocol = await connected_keeper(peer, ours)
        protocol.transport.max_size = 1000  # type: ignore[attr-defined]
        peer.sendall(b"x" * 50_000)
        peer.close()
        await asyncio.wait_for(protocol.lost, 30)
        assert b"".join(protocol.chunks) == b"x" * 50_000
        assert max(map(len, protocol.chunks)) <= 1000

    iopoll.aio.run(main())


def test_two_transports_of_one_loop_do_not_mix_their_reads() -> None:
    async def main() -> None:
        pairs = [socket.socketpair() for _ in range(2)]
        keepers = [await connected_keeper(peer, ours) for peer, ours in pairs]
        for i, (peer, _) in enumerate(pairs):
            peer.sendall(bytes([65 + i]) * 100_000)
            peer.close()
        for keeper in keepers:
            await asyncio.wait_for(keeper.lost, 30)
        assert [b"".join(k.chunks) for k in keepers] == [b"A" * 100_000, b"B" * 100_000]

    iopoll.aio.run(main())


@pytest.mark.parametrize("make", [iopoll.aio.new_event_loop, iopoll.aio.Loop])
def test_every_loop_has_its_own_buffer(make: Any) -> None:
    first, second = make(), make()
    pairs = [socket.socketpair() for _ in range(2)]
    try:
        for loop, (ours, _) in zip((first, second), pairs, strict=True):
            assert loop._read_buffer is None  # made with the first transport
            transport, _ = loop.run_until_complete(
                loop.create_connection(asyncio.Protocol, sock=ours)
            )
            buffer = loop._read_buffer
            assert buffer is not None and len(buffer) == 256 * 1024
            transport.close()
            loop.run_until_complete(asyncio.sleep(0))
            assert loop._read_buffer is buffer  # kept for the loop's next transports
        assert first._read_buffer is not second._read_buffer
    finally:
        first.close()
        second.close()
        for pair in pairs:
            for end in pair:
                end.close()


@pytest.mark.parametrize("proto", [0, socket.IPPROTO_TCP])
def test_every_tcp_transport_has_nagle_off_whatever_its_socket_proto(proto: int) -> None:
    async def main() -> bool:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM, proto)
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        client = socket.create_connection(listener.getsockname())
        accepted, _ = listener.accept()
        listener.close()
        assert accepted.proto == proto
        assert not accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
        protocol = await connected_keeper(client, accepted)
        nodelay = bool(accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
        protocol.transport.close()
        client.close()
        await asyncio.wait_for(protocol.lost, 30)
        return nodelay

    assert iopoll.aio.run(main())


def test_a_unix_stream_transport_works_without_the_tcp_option() -> None:
    async def main() -> None:
        peer, ours = socket.socketpair()
        protocol = await connected_keeper(peer, ours)
        assert protocol.transport.get_extra_info("socket").family == socket.AF_UNIX
        peer.close()
        await asyncio.wait_for(protocol.lost, 30)

    iopoll.aio.run(main())
