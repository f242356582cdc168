"""Edges of the C ``wait()`` on KQUEUE (``_kqueue_wait.c``), over libkqueue.

Like ``kqueue_c_wait_cases.py``, whose companion it is: ``tests/test_kqueue_libkqueue.py``
runs it with the C build over libkqueue first on the import path, ``-p libkqueue_session``
and ``IOPOLL_TEST_FAST_BACKEND=KQUEUE``.  On BSD and macOS it runs as collected, on the OS's
kqueue; elsewhere it is skipped.  Each case holds C to
what the pure-Python path does (or to what SPEC says) where the kqueue wait has a detail of
its own: what a translated batch carries to ``translate_kevents``, a batch that fills the
kevent array, and the reports of a wait with more kevents than fit on the stack.

Two cases (the reset connection, the edge watcher without ``READ``) were written against
single-point mutants of ``_kqueue_wait.c`` that left every other test green (2 of 48
tried); the other two catch in seconds what only the minute-long suites caught before (the
kevent array's size, the timeout's conversion).
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest

import iopoll
import iopoll._native
import pure_iopoll
from iopoll import Backend, Event

READ, WRITE = Event.READ, Event.WRITE
ERROR, HANGUP = Event.ERROR, Event.HANGUP

MakePair = Callable[[], tuple[socket.socket, socket.socket]]

pytestmark = pytest.mark.skipif(
    not (iopoll._native.ACCELERATED and Backend.KQUEUE.is_available()),
    reason="needs the C build over libkqueue (tests/test_kqueue_libkqueue.py runs this module)",
)


def _reported(result: list[Any]) -> list[tuple[Any, int]]:
    """A wait's result as sorted (data, triggered_events)."""
    return sorted((w.data, int(w.triggered_events)) for w in result)


def _agree(scenario: Callable[[ModuleType], list[Any]]) -> list[Any]:
    """``scenario`` gives the same transcript with C and with pure Python; that transcript."""
    c_transcript = scenario(iopoll)
    assert c_transcript == scenario(pure_iopoll)
    return c_transcript


def test_a_reset_connection_is_error_and_hangup_on_the_first_wait(pairs: MakePair) -> None:
    """The peer closed with bytes it had not read (a reset): the kevent's ``fflags`` carries
    the socket error, which C hands to ``translate_kevents`` as it came, so the first wait
    says ``ERROR`` (and ``HANGUP``) to a READ watcher and to a WRITE watcher, as in Python.
    (libkqueue reads the error with ``SO_ERROR``, which clears it: later waits lack it.)"""

    def scenario(module: ModuleType) -> list[Any]:
        a, b = pairs()
        c, d = pairs()
        with module.Context(Backend.KQUEUE) as ctx:
            ctx.add(b, READ, "reader")
            ctx.add(d, WRITE, "writer")
            b.send(b"never read")
            d.send(b"never read")
            a.close()
            c.close()
            return _reported(ctx.wait(0.5))

    assert _agree(scenario) == [
        ("reader", int(READ | ERROR | HANGUP)),
        ("writer", int(WRITE | ERROR | HANGUP)),
    ]


@pytest.mark.parametrize("count", [128, 200], ids=["the stack's kevents", "the buffer's kevents"])
def test_every_filter_of_every_fd_ready_at_once(count: int, pairs: MakePair) -> None:
    """``count`` READ|WRITE watchers, every one readable and writable: the wait has room for
    two kevents per watcher and gets all of them (the kevent array full: 256 kevents, all
    the stack holds, or 400, in the Context's buffer with the reports after them), and
    merges each fd's two into one ``READ|WRITE`` report; the next wait gets the same."""

    def scenario(module: ModuleType) -> list[Any]:
        with module.Context(Backend.KQUEUE) as ctx:
            for i in range(count):
                peer, sock = pairs()
                ctx.add(sock, READ | WRITE, i)
                peer.send(b"x")
            return [_reported(ctx.wait(0)), _reported(ctx.wait(None))]

    assert _agree(scenario) == [[(i, int(READ | WRITE)) for i in range(count)]] * 2


@pytest.mark.parametrize("timeout", [0.3, 1.2], ids=["under a second", "over a second"])
def test_a_wait_on_nothing_ready_lasts_its_timeout(timeout: float, pairs: MakePair) -> None:
    """Nothing ready: ``wait(timeout)`` returns nothing after ``timeout`` seconds, no sooner
    and not much later, with no watcher (the kevent array's one slot) as with an idle one
    (the timeout's seconds and nanoseconds both reach kevent)."""
    _, idle = pairs()
    for watched in (False, True):
        with iopoll.Context(Backend.KQUEUE) as ctx:
            if watched:
                ctx.add(idle, READ, "idle")
            started = time.monotonic()
            assert ctx.wait(timeout) == []
            took = time.monotonic() - started
            assert timeout - 0.01 <= took < timeout + 0.5, (watched, took)


def test_unread_bytes_are_not_reported_to_an_edge_watcher_without_read(pairs: MakePair) -> None:
    """An edge-triggered ``READ_HANGUP|WRITE`` watcher has a read filter (for the end of file)
    and a write filter, both ``EV_CLEAR``, so C waits on it itself.  Added with bytes unread
    on a writable socket, both filters fire in one batch: only ``WRITE`` was asked of them,
    and ``READ`` is not reported (SPEC 6.2), as in Python."""

    def scenario(module: ModuleType) -> list[Any]:
        a, b = pairs()
        a.send(b"unread")
        with module.Context(Backend.KQUEUE) as ctx:
            ctx.add(b, Event.READ_HANGUP | WRITE | Event.EDGE_TRIGGERED, "b")
            if module is iopoll:
                assert ctx._usable.native_kqueue >= 0  # the C path waits: no mode emulated
            return [_reported(ctx.wait(0)), _reported(ctx.wait(0))]

    assert _agree(scenario) == [[("b", int(WRITE))], []]
