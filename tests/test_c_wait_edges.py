"""The C ``wait()`` fast path (``_os_wait.c``, ``_speedups.c``) in the corners the other
tests leave.

Each case was written against a single-point mutant of the C wait that every other test
let through (8 of 53 tried; the others were caught, or change nothing a user can see); its
docstring names the code it pins.  The eighth, an ``int`` subclass from ``fileno()``, is a
case of ``test_speedups.py::test_the_probe_asks_not_equal_as_python_does``.  They use real
OS objects (socket pairs, SIGALRM, a second thread) and hold the C path to what the
pure-Python one (``pure_iopoll``) does, or, where the two are meant to differ, to what the
C code promises.  Skipped without the C code (``IOPOLL_PURE_PYTHON=1``, or
``iopoll._speedups`` not built).
"""

from __future__ import annotations

import gc
import signal
import socket
import sys
import threading
import time
import weakref
from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest

import iopoll
import iopoll._native
import pure_iopoll
from iopoll import Backend, Event, PollError
from iopoll_conformance.process import alarm

pytestmark = pytest.mark.skipif(
    not iopoll._native.ACCELERATED, reason="no C fast path: iopoll runs pure Python here"
)

needs_sigalrm = pytest.mark.skipif(
    not hasattr(signal, "setitimer"), reason="needs signal.setitimer"
)

# The backends whose wait() the C code makes itself: epoll_wait(2) and poll(2).
NATIVE_BACKENDS = [
    pytest.param(backend, id=backend.name)
    for backend in (Backend.EPOLL, Backend.POLL)
    if backend.is_available()
]

MODULES = [
    pytest.param(iopoll, id="iopoll"),
    pytest.param(pure_iopoll, id="pure_iopoll"),
]

MakePair = Callable[[], tuple[socket.socket, socket.socket]]  # conftest's ``pairs`` fixture


@needs_sigalrm
@pytest.mark.parametrize("backend", NATIVE_BACKENDS)
@pytest.mark.parametrize("module", MODULES)
def test_a_single_late_eintr_does_not_restart_the_timeout(
    module: ModuleType, backend: Backend, pairs: MakePair
) -> None:
    """PEP 475's retry waits for what is left of the timeout, not for all of it again.

    Pins wait_retrying()'s ``timeout = milliseconds(left)`` after EINTR.  The existing
    EINTR tests send a signal every 20 ms, so a retry that kept the full timeout still
    ended at the first signal after the deadline; with one signal at 0.35 s into a 0.5 s
    wait, such a retry would end at 0.85 s.
    """
    _, b = pairs()
    timeout, signal_at = 0.5, 0.35
    calls: list[float] = []
    with module.Context(backend) as ctx:
        ctx.add(b, Event.READ, "idle")
        started = time.monotonic()
        with alarm(lambda signum, frame: calls.append(time.monotonic()), signal_at):
            result = ctx.wait(timeout)
        elapsed = time.monotonic() - started
    assert result == []
    assert len(calls) == 1 and calls[0] - started < timeout, (calls, started)
    assert elapsed >= timeout - 0.005, elapsed
    assert elapsed < signal_at + timeout - 0.05, elapsed  # restarted: signal_at + timeout


@needs_sigalrm
@pytest.mark.parametrize("backend", NATIVE_BACKENDS)
def test_a_handler_that_closes_the_context_ends_the_c_wait_at_once(
    backend: Backend, pairs: MakePair
) -> None:
    """A signal handler that closes the Context ends the C wait at that EINTR, with the
    error a closed Context's wait raises, instead of waiting out the timeout.

    Pins wait_retrying()'s still_usable() check after the handlers ran.  On EPOLL the
    recheck (the epoll object now closed) also hands the wait back; on POLL nothing else
    does, and poll(2) would go on over the array's copy.  (The pure-Python path cannot do
    this on POLL: select.poll retries EINTR itself and raises only at the timeout.)
    """
    _, b = pairs()
    timeout = 2.0
    with iopoll.Context(backend) as ctx:
        ctx.add(b, Event.READ, "idle")
        started = time.monotonic()
        with alarm(lambda signum, frame: ctx.close(), 0.1), pytest.raises(PollError):
            ctx.wait(timeout)
        elapsed = time.monotonic() - started
    assert elapsed < timeout / 2, elapsed


@pytest.mark.parametrize("backend", NATIVE_BACKENDS)
@pytest.mark.parametrize("module", MODULES)
def test_a_context_closed_by_another_thread_during_the_wait_raises(
    module: ModuleType, backend: Backend, pairs: MakePair
) -> None:
    """A Context that another thread closes while wait() blocks: the wait raises the
    closed Context's error when the OS wait times out, as the Python path does, rather
    than returning an empty list as though it had ended normally.  (A wait woken by a
    report finds the closed Context later on either path; a quiet one only here.)

    Pins the still_usable() check after the OS call that ran without the GIL.
    """
    _, b = pairs()
    with module.Context(backend) as ctx:
        ctx.add(b, Event.READ, "idle")
        closer = threading.Timer(0.05, ctx.close)
        closer.start()
        try:
            with pytest.raises(PollError, match="closed"):
                ctx.wait(1.0)  # the close comes long before the end, even on a busy machine
        finally:
            closer.join(5)


class ProbeInterrupted(BaseException):
    """Raised once by a handle's ``fileno()``: not an Exception, so not a closed file."""


class InterruptedOnce:
    """A stream handle whose ``fileno()`` raises ``ProbeInterrupted`` once when armed."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.armed = False

    def fileno(self) -> int:
        if self.armed:
            self.armed = False
            raise ProbeInterrupted
        return self.sock.fileno()


@pytest.mark.parametrize("backend", NATIVE_BACKENDS)
@pytest.mark.parametrize("module", MODULES)
def test_a_base_exception_from_the_probe_leaves_the_wait(
    module: ModuleType, backend: Backend, pairs: MakePair
) -> None:
    """Only an ``Exception`` from a watcher's ``fileno()`` means a closed stream; a
    ``BaseException`` (``KeyboardInterrupt``, ``SystemExit``) raised there leaves wait(),
    as it does from the Python fast path's ``except Exception``.

    Pins still_open()'s ``PyErr_ExceptionMatches(PyExc_Exception)``: cleared as a "closed"
    answer, the report would go to _collect, whose second probe succeeds, and the wait
    would return the watcher with the interrupt lost.
    """
    a, b = pairs()
    with module.Context(backend) as ctx:
        handle = InterruptedOnce(b)
        watcher = ctx.add(handle, Event.READ, "reader")
        a.send(b"x")
        handle.armed = True
        with pytest.raises(ProbeInterrupted):
            ctx.wait(0.1)
        assert not handle.armed  # the probe ran, and raised
        assert ctx.wait(0.1) == [watcher]  # nothing was lost: the byte is still there


@pytest.mark.parametrize("backend", NATIVE_BACKENDS)
@pytest.mark.parametrize("module", MODULES)
def test_a_wait_handed_back_after_a_taken_watcher_does_not_leak_it(
    module: ModuleType, backend: Backend, pairs: MakePair
) -> None:
    """A report that needs care (here a one-shot's) after one the fast path already took
    hands the whole wait to _finish_wait; the watcher taken first is released, not leaked.

    Pins deliver()'s release of the watchers held so far when it hands back: without it,
    each such wait would leave one more reference to the plain watcher (seen here in
    ``sys.getrefcount``), and a removed watcher, with its data, would never be freed.
    """
    plain_writer, plain_reader = pairs()
    once_writer, once_reader = pairs()
    rounds = 20
    with module.Context(backend) as ctx:
        # Ready first, and first in POLL's array: the fast path takes it before the one-shot.
        plain = ctx.add(plain_reader, Event.READ, "plain")
        plain_writer.send(b"x")
        once = ctx.add(once_reader, Event.READ | Event.ONESHOT, "once")
        once_writer.send(b"x")
        assert {w.data for w in ctx.wait(0.1)} == {"plain", "once"}
        before = sys.getrefcount(plain)
        for _ in range(rounds):
            once.modify_events(Event.READ | Event.ONESHOT)
            result = ctx.wait(0.1)
            assert {w.data for w in result} == {"plain", "once"}
            del result
        after = sys.getrefcount(plain)
    assert after - before < rounds // 2, (before, after)


class _Holder:
    """Anything a program may hang a wait's result on (and that can be weakly referenced)."""

    result: list[Any]


@pytest.mark.parametrize("backend", NATIVE_BACKENDS)
@pytest.mark.parametrize("module", MODULES)
def test_a_result_beyond_the_stack_array_is_seen_by_the_collector(
    module: ModuleType, backend: Backend, pairs: MakePair
) -> None:
    """More ready watchers than the C code holds on its stack (256) come back in a list it
    fills out of the collector's sight; once full, the list is tracked again, so that a
    reference cycle through it is collected like any other.

    Pins deliver()'s ``PyObject_GC_Track(ready)``: left untracked, the list below would
    keep its holder alive for good.
    """
    many = 300
    with module.Context(backend) as ctx:
        for _ in range(many):
            ctx.add(pairs()[1], Event.WRITE)
        result = ctx.wait(0.1)
        assert len(result) == many
        assert gc.is_tracked(result)
        holder = _Holder()
        holder.result = result
        result.append(holder)  # a cycle: list -> holder -> list
        gone = weakref.ref(holder)
        del holder, result
        gc.collect()
        assert gone() is None


@needs_sigalrm
@pytest.mark.skipif(not Backend.POLL.is_available(), reason="needs POLL")
@pytest.mark.parametrize("module", MODULES)
def test_a_signal_during_the_first_look_does_not_end_a_timed_wait(
    module: ModuleType, pairs: MakePair
) -> None:
    """A signal that interrupts the C wait's first, non-blocking call (the look at what is
    ready now) is retried like any other EINTR: a timed wait still lasts its timeout.

    Pins wait_retrying()'s ``timeout > 0 && blocked``: the deadline is read only when the
    wait first blocks, so an EINTR before that must not compute what is left from it (it
    would find nothing left, and return [] at once).  poll(2) over a few thousand idle
    sockets makes that first call long enough for a signal every 0.3 ms (as a sampling
    profiler sends) to land in it in most waits.
    """
    from fd_limit import raised_fd_limit  # POSIX: resource

    idle, waits, timeout = 3000, 30, 0.05
    calls: list[int] = []
    early: list[float] = []
    with raised_fd_limit(2 * idle + 256), module.Context(Backend.POLL) as ctx:
        for _ in range(idle):
            ctx.add(pairs()[1], Event.READ)
        with alarm(lambda signum, frame: calls.append(1), 0.0003, 0.0003):
            for _ in range(waits):
                started = time.monotonic()
                assert ctx.wait(timeout) == []
                elapsed = time.monotonic() - started
                if elapsed < timeout - 0.001:
                    early.append(elapsed)
    assert len(calls) >= waits  # the signals came
    assert early == []
