"""Process-wide helpers: a ``SIGALRM`` delivered during a call (``alarm``), a watchdog on a
call that must return soon (``within``, built on it), and code run in a forked child.

They touch state the whole process shares (a signal handler and interval timer; the process
itself), so each puts things back as it found them.  The suite's rules use them; so may any
test, this project's own included.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any, NoReturn, TypeVar

_T = TypeVar("_T")

__all__ = ["SignalHandler", "alarm", "in_child", "within"]

SignalHandler = Callable[[int, "FrameType | None"], Any]
"""What ``signal.signal`` takes as a handler."""


def _skip(reason: str) -> NoReturn:
    # Imported here: the soak (benchmarks/soak) uses these helpers without pytest installed.
    import pytest

    pytest.skip(reason)


def _fail(reason: str) -> NoReturn:
    import pytest

    pytest.fail(reason)


@contextlib.contextmanager
def alarm(handler: SignalHandler, delay: float, interval: float = 0.0) -> Iterator[None]:
    """Deliver ``SIGALRM`` to this process after ``delay`` seconds (then every ``interval``
    seconds, if given), handled by ``handler``.

    Main thread only (the test is skipped elsewhere, or where ``signal.setitimer`` is
    missing).  The previous handler and interval timer (pytest-timeout may use both) are put
    back on exit, the timer shortened by the time spent here.
    """
    if threading.current_thread() is not threading.main_thread():
        _skip("signal handlers can only be set in the main thread")
    if not hasattr(signal, "setitimer"):
        _skip("signal.setitimer is not available")
    previous_handler = signal.signal(signal.SIGALRM, handler)
    previous_timer = signal.setitimer(signal.ITIMER_REAL, delay, interval)
    start = time.monotonic()
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous_handler)
        remaining, every = previous_timer
        if remaining > 0:
            left = max(remaining - (time.monotonic() - start), 0.001)
            signal.setitimer(signal.ITIMER_REAL, left, every)


class _Overran(Exception):
    """Raised by ``within``'s ``SIGALRM`` handler into the call that overran."""


def within(seconds: float, call: Callable[[], _T], what: str) -> _T:
    """``call()``, failing the test ("``what`` still blocked after ...") if it has not
    returned after ``seconds``: a ``SIGALRM`` interrupts it (a blocked ``wait()`` lets the
    handler's exception out, as SPEC 4 says).

    For a call that should return at once or soon, and would otherwise hang the run:
    pytest-timeout's own failure, raised inside a Hypothesis example, is one more failing
    example, which Hypothesis replays, and which blocks again.  Where no alarm can be set
    (outside the main thread, or without ``signal.setitimer``), ``call()`` runs unguarded,
    so that the rule still runs.
    """
    if threading.current_thread() is not threading.main_thread() or not hasattr(
        signal, "setitimer"
    ):
        return call()

    def overran(signum: int, frame: object) -> None:
        raise _Overran

    try:
        with alarm(overran, seconds):
            return call()
    except _Overran:
        _fail(f"{what} still blocked after {seconds:g} s")


def in_child(body: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """Run ``body`` in a forked child and return what it returned (a JSON-able dict).

    The child never returns into the caller: it reports through a pipe and ``os._exit``\\ s.
    An exception in the child comes back as ``{"child_error": "..."}``.  The test is skipped
    where ``os.fork`` is missing.
    """
    if not hasattr(os, "fork"):
        _skip("os.fork is not available")
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
