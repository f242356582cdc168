"""Helpers for the rule groups backends, handles, add, wait, lifecycle and errors.

Real OS objects only: threads that write after a delay, interval timers that raise
``SIGALRM``, forked children that report back through a pipe.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any, TypeVar

import pytest

from ..support import tcp_pair

__all__ = [
    "alarm",
    "close_all",
    "drain",
    "in_child",
    "sending_later",
    "tcp_pairs",
    "timed",
]

_T = TypeVar("_T")

SignalHandler = Callable[[int, "FrameType | None"], Any]


def timed(call: Callable[[], _T]) -> tuple[_T, float]:
    """Run ``call`` and return its result and the seconds it took (monotonic clock)."""
    start = time.monotonic()
    result = call()
    return result, time.monotonic() - start


def drain(sock: socket.socket) -> bytes:
    """Read everything a non-blocking socket holds right now."""
    chunks = []
    while True:
        try:
            chunk = sock.recv(65536)
        except BlockingIOError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks)


def close_all(*socks: socket.socket) -> None:
    """Close every socket given."""
    for sock in socks:
        sock.close()


def tcp_pairs(count: int) -> list[tuple[socket.socket, socket.socket]]:
    """``count`` connected loopback TCP pairs (client, server), non-blocking."""
    return [tcp_pair() for _ in range(count)]


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


@contextlib.contextmanager
def alarm(handler: SignalHandler, delay: float) -> Iterator[None]:
    """Deliver ``SIGALRM`` to this process after ``delay`` seconds, handled by ``handler``.

    Main thread only.  The previous handler and interval timer (pytest-timeout may use
    both) are put back on exit, the timer shortened by the time spent here.
    """
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signal handlers can only be set in the main thread")
    if not hasattr(signal, "setitimer"):
        pytest.skip("signal.setitimer is not available")
    previous_handler = signal.signal(signal.SIGALRM, handler)
    previous_timer = signal.setitimer(signal.ITIMER_REAL, delay)
    start = time.monotonic()
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous_handler)
        remaining, interval = previous_timer
        if remaining > 0:
            left = max(remaining - (time.monotonic() - start), 0.001)
            signal.setitimer(signal.ITIMER_REAL, left, interval)


def in_child(body: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """Run ``body`` in a forked child and return what it returned (a JSON-able dict).

    The child never returns into the caller: it reports through a pipe and ``os._exit``\\ s.
    An exception in the child comes back as ``{"child_error": "..."}``.
    """
    if not hasattr(os, "fork"):
        pytest.skip("os.fork is not available")
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        status = 0
        try:
            os.close(read_end)
            try:
                outcome = body()
            except BaseException as exc:
                outcome = {"child_error": f"{type(exc).__name__}: {exc}"}
            os.write(write_end, json.dumps(outcome).encode())
            os.close(write_end)
        except BaseException:
            status = 1
        finally:
            os._exit(status)
    os.close(write_end)
    chunks = []
    while chunk := os.read(read_end, 65536):
        chunks.append(chunk)
    os.close(read_end)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, "the forked child failed to report"
    report: dict[str, Any] = json.loads(b"".join(chunks))
    return report
