"""``examples/http_hello.py``, the iopoll.loop HTTP responder, as a user runs it.

Each test starts the example as its own process (one worker, or two forked workers sharing
a port through ``SO_REUSEPORT``) on every ``--driver``, and talks HTTP to it over loopback:
keep-alive, pipelining, a reply bigger than the socket buffer (the ``on_writable`` path), a
malformed request, and a clean exit on SIGTERM.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("httptools")
pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="fork and SO_REUSEPORT")

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "http_hello.py"
RESPONSE_END = b"Hello, World!"


class Example:
    """The example running in a child process: its port and its workers' pids."""

    def __init__(self, driver: str, workers: int) -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
        self.process = subprocess.Popen(
            [sys.executable, str(EXAMPLE), "--driver", driver, "--port", str(self.port),
             "--workers", str(workers)],
            env=env, stdout=subprocess.PIPE, text=True,
        )
        assert self.process.stdout is not None
        self.pids = []
        for _ in range(workers):
            line = self.process.stdout.readline()
            assert line.startswith("worker "), line
            self.pids.append(int(line.split()[1]))

    def stop(self) -> int:
        self.process.send_signal(signal.SIGTERM)
        code = self.process.wait(20)
        assert self.process.stdout is not None
        self.process.stdout.close()
        return code


@pytest.fixture(params=["native", "select", "selectors"])
def example(request: pytest.FixtureRequest) -> Iterator[Example]:
    running = Example(request.param, 1)
    try:
        yield running
    finally:
        if running.process.poll() is None:
            running.stop()


def read_responses(sock: socket.socket, count: int) -> bytes:
    received = b""
    while received.count(RESPONSE_END) < count:
        chunk = sock.recv(1 << 16)
        assert chunk, f"closed after {received.count(RESPONSE_END)} of {count} responses"
        received += chunk
    return received


def test_keep_alive_requests_share_one_connection(example: Example) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", example.port, timeout=10)
    try:
        for path in ("/", "/other", "/?q=1"):
            conn.request("GET", path)
            response = conn.getresponse()
            assert (response.status, response.read()) == (200, b"Hello, World!")
            assert response.getheader("Content-Length") == "13"
        conn.request("POST", "/", body=b"x" * 10_000)  # a body is read and ignored
        response = conn.getresponse()
        assert (response.status, response.read()) == (200, b"Hello, World!")
    finally:
        conn.close()
    assert example.stop() == 0


def test_pipelined_requests_bigger_than_the_socket_buffers_all_get_answers(
    example: Example,
) -> None:
    # 20,000 requests sent in one stream while nothing is read for a while: the replies
    # (1.6 MB) overflow the server's send buffer, so it must wait for on_writable and keep
    # the order of what is pending.
    count = 20_000
    with socket.create_connection(("127.0.0.1", example.port), timeout=20) as sock:
        sender = threading.Thread(
            target=sock.sendall, args=(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" * count,)
        )
        sender.start()
        received = read_responses(sock, count)
        sender.join()
    assert received.count(b"HTTP/1.1 200 OK\r\n") == count
    assert received.endswith(RESPONSE_END)


def test_connection_close_and_a_malformed_request_end_the_connection(
    example: Example,
) -> None:
    with socket.create_connection(("127.0.0.1", example.port), timeout=10) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        reply = b""
        while chunk := sock.recv(4096):
            reply += chunk
        assert reply.startswith(b"HTTP/1.1 200 OK") and reply.endswith(RESPONSE_END)
    with socket.create_connection(("127.0.0.1", example.port), timeout=10) as sock:
        sock.sendall(b"NOT HTTP AT ALL\r\n\r\n")
        reply = b""
        while chunk := sock.recv(4096):
            reply += chunk
        assert reply.startswith(b"HTTP/1.1 400 Bad Request")
    # The server is still there for the next client.
    with socket.create_connection(("127.0.0.1", example.port), timeout=10) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        assert read_responses(sock, 1).startswith(b"HTTP/1.1 200 OK")


def test_two_workers_share_the_port_and_both_stop_on_sigterm() -> None:
    running = Example("native", 2)
    try:
        assert len(set(running.pids)) == 2 and running.process.pid not in running.pids
        # Many short connections: the kernel spreads them over both listeners.
        for _ in range(40):
            with socket.create_connection(("127.0.0.1", running.port), timeout=10) as sock:
                sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
                assert read_responses(sock, 1).startswith(b"HTTP/1.1 200 OK")
    finally:
        code = running.stop()
    assert code == 0
    for pid in running.pids:  # reaped by the parent: gone, not zombies left behind
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_workers_above_one_need_a_port() -> None:
    done = subprocess.run(
        [sys.executable, str(EXAMPLE), "--workers", "2", "--port", "0"],
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")}, capture_output=True, text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "--workers above 1 needs a --port" in done.stderr


def test_a_sigterm_while_the_workers_are_forked_stops_them_all(tmp_path: Path) -> None:
    # The parent's SIGTERM came in after its first fork (a service stopped as it starts): it
    # ended the parent alone, and the worker forked kept serving the port.
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    script = f"""
import os, signal, sys
sys.path.insert(0, {str(EXAMPLE.parent)!r})
import http_hello
fork = os.fork
def fork_then_sigterm():
    pid = fork()
    if pid:
        print("forked", pid, flush=True)
        os.kill(os.getpid(), signal.SIGTERM)  # in the parent, between two forks
    return pid
os.fork = fork_then_sigterm
http_hello.main(["--workers", "2", "--port", "{port}"])
"""
    # Files, not pipes: a worker left running would hold a pipe open.
    with open(tmp_path / "out", "w+") as out, open(tmp_path / "err", "w+") as err:
        code = subprocess.run(
            [sys.executable, "-c", script], env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
            stdout=out, stderr=err, timeout=60, check=False,
        ).returncode
        out.seek(0)
        err.seek(0)
        lines, errors = out.read().splitlines(), err.read()
    pids = [int(line.split()[1]) for line in lines if line.startswith("forked ")]
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
        served = True  # a worker outlived the parent
    except OSError:
        served = False
    if served:  # clean up: the parent did not reap them, so the pids are still theirs
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    assert (code, served) == (0, False), errors
    assert len(pids) == 2, lines
