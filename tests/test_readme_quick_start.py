"""The README's quick start, run as written: an echo server that outlives a reset client."""

from __future__ import annotations

import re
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"
PORT = 8007  # the quick start's


def quick_start(port: int) -> str:
    """The first python block after "## Quick start", listening on ``port``."""
    text = README.read_text(encoding="utf-8")
    section = text[text.index("## Quick start") :]
    found = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert found is not None, "no python block in the quick start"
    code = found.group(1)
    assert f'("127.0.0.1", {PORT})' in code
    return code.replace(f'("127.0.0.1", {PORT})', f'("127.0.0.1", {port})')


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def connect(port: int) -> socket.socket:
    """A connection to the server, once it listens (it is a fresh interpreter)."""
    deadline = time.monotonic() + 20
    while True:
        try:
            return socket.create_connection(("127.0.0.1", port), timeout=10)
        except ConnectionRefusedError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def echoed(sock: socket.socket, payload: bytes) -> bytes:
    sock.sendall(payload)
    received = b""
    while len(received) < len(payload):
        chunk = sock.recv(65536)
        if not chunk:
            break
        received += chunk
    return received


@pytest.fixture
def server() -> Iterator[int]:
    port = free_port()
    process = subprocess.Popen([sys.executable, "-c", quick_start(port)])
    try:
        yield port
        assert process.poll() is None, "the quick start's server exited"
    finally:
        process.kill()
        process.wait()


def test_the_quick_start_echoes_and_outlives_a_reset_client(server: int) -> None:
    payload = b"x" * 300_000  # more than one send() takes: the WRITE branch runs
    with connect(server) as first:
        assert echoed(first, payload) == payload
    # A reset: on epoll it is READ | ERROR | HANGUP, so recv() raises ConnectionResetError.
    reset = connect(server)
    reset.sendall(b"unread by the client")
    time.sleep(0.1)
    reset.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    reset.close()
    time.sleep(0.2)
    with connect(server) as after:
        assert echoed(after, b"still serving") == b"still serving"
