"""Edges of one tick and its drain, and of how ``Context.wait()``'s reports become queued I/O
callbacks, pinned on every driver.

The C dispatch (``iopoll/loop/_dispatch.c``, ``_dispatch.h``, ``_iopoll_ready.c``) is held
line for line to the Python methods of ``_abstract_driver.py`` and ``_iopoll_driver.py``.
Each case here was written against a single-point slip of that C code that left the rest of
the loop tests green: where a tick's signals go among its defers and its I/O, what
``sys.exc_info()`` shows to the error handler and to the callbacks after it, when a deferred
function and the objects a callback is given are let go, and which callbacks a hang-up or
an error on a pipe wakes; that a tick running only C callables still runs signal
handlers; that a resumed microtask leaves the rest of the queue to the loop greenlet; and
that a zero delay in the FIFO runs when its tick's activation emptied the timer heap.  The
pure-Python drivers, the reference, run the same tests; with
``IOPOLL_PURE_PYTHON=1`` every driver is pure.
"""

from __future__ import annotations

import functools
import gc
import operator
import os
import pathlib
import signal
import socket
import sys
import time
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from every_loop_driver import (
    EVERY_DRIVER,
    every_driver,  # noqa: F401 (the fixture driver)
)
from iopoll.loop import Driver, InvalidCallbackError
from iopoll.loop._callbacks import FdEntry
from iopoll_conformance.process import alarm


@pytest.fixture
def pipe() -> Iterator[tuple[int, int]]:
    """A non-blocking pipe (read end, write end); whichever end a test left open is closed."""
    read_end, write_end = os.pipe()
    os.set_blocking(read_end, False)
    os.set_blocking(write_end, False)
    ends = [read_end, write_end]
    yield read_end, write_end
    for fd in ends:
        try:
            os.close(fd)
        except OSError:
            pass


class Recorder:
    """A callable that records each call's arguments (an object a weak reference can
    follow, with no cycle through it)."""

    def __init__(self, calls: list[object]) -> None:
        self.calls = calls

    def __call__(self, *args: object) -> None:
        self.calls.append(args)


def test_signals_come_after_the_defers_and_before_the_io_of_their_tick(
    driver: Driver, pairs: Callable[[], tuple[socket.socket, socket.socket]]
) -> None:
    """A signal that came during a tick's callbacks runs in the next tick after that tick's
    deferred callbacks and before the I/O its poll found."""
    a, b = pairs()
    order: list[str] = []

    def start(callback_id: str) -> None:
        b.send(b"x")  # a is readable in the next tick's poll
        driver.defer(lambda defer_id: order.append("defer"))
        os.kill(os.getpid(), signal.SIGUSR1)

    def readable(callback_id: str, stream: object) -> None:
        order.append("io")
        a.recv(16)
        driver.stop()

    def signalled(callback_id: str, signum: int) -> None:
        order.append("signal")

    signal_id = driver.on_signal(signal.SIGUSR1, signalled)
    io_id = driver.on_readable(a, readable)
    driver.defer(start)
    driver.run()
    driver.cancel(signal_id)
    driver.cancel(io_id)
    assert order == ["defer", "signal", "io"]


def test_the_error_handler_runs_with_the_callbacks_exception_as_the_one_handled(
    driver: Driver,
) -> None:
    """The error handler is called inside the ``except`` block that caught the callback's
    error: ``sys.exc_info()`` shows that error, and one the handler raises chains to it."""
    seen: list[object] = []

    def handler(exc: BaseException) -> None:
        seen.append(sys.exc_info()[1] is exc)

    def fail(callback_id: str) -> None:
        raise ValueError("boom")

    driver.set_error_handler(handler)
    driver.defer(fail)
    driver.run()
    assert seen == [True]


def test_a_callback_after_a_handled_error_sees_no_exception_being_handled(
    driver: Driver,
) -> None:
    """Once the error handler returned, the callback's error is no longer the one being
    handled: the next callback, in the same tick, sees ``sys.exc_info()`` empty, and the
    error is not kept alive by the loop."""
    seen: list[object] = []
    handled: list[weakref.ref[BaseException]] = []

    class Boom(Exception):
        """An error a weak reference can follow."""

    def handler(exc: BaseException) -> None:
        handled.append(weakref.ref(exc))

    def fail(callback_id: str) -> None:
        raise Boom("boom")

    def after(callback_id: str) -> None:
        seen.append(sys.exc_info())

    driver.set_error_handler(handler)
    driver.defer(fail)
    driver.defer(after)
    driver.run()
    assert seen == [(None, None, None)]
    assert len(handled) == 1
    assert handled[0]() is None


def test_a_deferred_function_is_let_go_before_the_next_callback_runs(driver: Driver) -> None:
    """A defer's function is dropped as soon as it ran: a callback later in the same tick
    finds it freed (its record, kept a while longer, does not hold it)."""
    calls: list[object] = []
    first = Recorder(calls)
    gone = weakref.ref(first)
    driver.defer(first)
    del first
    alive: list[bool] = []
    driver.defer(lambda callback_id: alive.append(gone() is not None))
    driver.run()
    assert len(calls) == 1
    assert alive == [False]


def test_a_defers_id_is_dead_inside_its_callback(driver: Driver) -> None:
    """Inside its own callback a defer's id names no callback any more: ``is_enabled()``
    raises ``InvalidCallbackError``, and the id is not among ``get_identifiers()``."""
    found: list[object] = []

    def inside(callback_id: str) -> None:
        found.append(callback_id in driver.get_identifiers())
        try:
            driver.is_enabled(callback_id)
        except InvalidCallbackError:
            found.append("invalid")

    driver.defer(inside)
    driver.run()
    assert found == [False, "invalid"]


def test_running_callbacks_and_microtasks_keeps_reference_counts_flat(
    driver: Driver, pairs: Callable[[], tuple[socket.socket, socket.socket]]
) -> None:
    """Each run of a stream callback, a repeat and a microtask lets go of what it was
    given: the stream, the id, the function and the microtask's arguments have the same
    reference count after many runs as after the first few."""
    a, b = pairs()
    b.send(b"x")  # never read: a stays readable
    payload = object()
    counts: dict[str, list[int]] = {"stream": [], "id": [], "repeat_fn": [], "payload": []}
    runs = 0

    def readable(callback_id: str, stream: object) -> None:
        counts["stream"].append(sys.getrefcount(stream))
        counts["id"].append(sys.getrefcount(callback_id))
        driver.queue(noop, payload)

    def noop(value: object) -> None:
        pass

    repeat_calls: list[object] = []
    recorder = Recorder(repeat_calls)

    def on_repeat(callback_id: str) -> None:
        nonlocal runs
        runs += 1
        recorder(callback_id)
        counts["repeat_fn"].append(sys.getrefcount(on_repeat))
        counts["payload"].append(sys.getrefcount(payload))
        if runs == 60:
            driver.stop()

    for _ in range(30):  # ids of more than one letter: not strings shared with the rest
        driver.cancel(driver.defer(noop))
    io_id = driver.on_readable(a, readable)
    repeat_id = driver.repeat(0, on_repeat)
    driver.run()
    driver.cancel(io_id)
    driver.cancel(repeat_id)
    for name, seen in counts.items():
        assert len(seen) >= 50, name
        assert seen[-1] == seen[5], (name, seen[5], seen[-1])


def test_a_microtask_queued_before_run_comes_before_the_first_callback(driver: Driver) -> None:
    """A single microtask queued before ``run()`` runs before the first deferred callback."""
    order: list[str] = []
    driver.defer(lambda callback_id: order.append("defer"))
    driver.queue(order.append, "microtask")
    driver.run()
    assert order == ["microtask", "defer"]


def test_a_hang_up_on_a_pipe_wakes_its_reader(driver: Driver, pipe: tuple[int, int]) -> None:
    """Closing a pipe's write end wakes the callback waiting to read the other end (the
    backend reports a hang-up, not readable data)."""
    read_end, write_end = pipe
    got: list[bytes] = []

    def readable(callback_id: str, stream: object) -> None:
        got.append(os.read(read_end, 16))
        driver.stop()

    reader = driver.on_readable(read_end, readable)
    driver.defer(lambda callback_id: os.close(write_end))
    guard = driver.delay(2, lambda callback_id: driver.stop())  # never woken: fail, not hang
    driver.run()
    driver.cancel(reader)
    driver.cancel(guard)
    assert got == [b""]


def test_an_error_on_a_pipe_wakes_its_writer(driver: Driver, pipe: tuple[int, int]) -> None:
    """Closing a full pipe's read end wakes the callback waiting to write the other end
    (the backend reports an error, not room to write): its write then fails with EPIPE."""
    read_end, write_end = pipe
    try:
        while True:
            os.write(write_end, b"x" * 65536)
    except BlockingIOError:
        pass
    got: list[int] = []

    def writable(callback_id: str, stream: object) -> None:
        try:
            os.write(write_end, b"x")
        except BrokenPipeError:
            got.append(1)
        driver.stop()

    previous = signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    try:
        writer = driver.on_writable(write_end, writable)
        driver.defer(lambda callback_id: os.close(read_end))
        guard = driver.delay(2, lambda callback_id: driver.stop())  # fail, not hang
        driver.run()
        driver.cancel(writer)
        driver.cancel(guard)
    finally:
        signal.signal(signal.SIGPIPE, previous)
    assert got == [1]


def test_a_regular_file_comes_after_the_sockets_ready_in_the_same_tick(
    driver: Driver,
    pairs: Callable[[], tuple[socket.socket, socket.socket]],
    tmp_path: pathlib.Path,
) -> None:
    """A regular file, always ready (on epoll it waits in the driver's second poller), is
    queued after the sockets registered before it that are ready in the same tick."""
    a, b = pairs()
    b.send(b"x")
    order: list[str] = []
    with open(tmp_path / "file", "w+b") as regular:
        socket_id = driver.on_readable(a, lambda callback_id, stream: order.append("socket"))
        file_id = driver.on_readable(regular, lambda callback_id, stream: order.append("file"))
        driver.defer(lambda callback_id: driver.stop())  # one tick: the defer runs first
        driver.run()
        driver.cancel(socket_id)
        driver.cancel(file_id)
    assert order == ["socket", "file"]


@pytest.mark.parametrize("make", EVERY_DRIVER)
def test_drivers_that_watched_signals_and_streams_leave_no_fd_entry_behind(
    make: Callable[[], Driver], pairs: Callable[[], tuple[socket.socket, socket.socket]]
) -> None:
    """A driver that watched a signal and ran stream callbacks leaves none of its fd entries
    (the signal marker or wakeup socket's among them) alive once closed and dropped: making
    many such drivers does not grow the program."""

    def entries() -> int:
        gc.collect()
        return sum(1 for obj in gc.get_objects() if type(obj) is FdEntry)

    def one_driver() -> None:
        driver = make()
        a, b = pairs()
        b.send(b"x")
        signal_id = driver.on_signal(signal.SIGUSR2, lambda callback_id, signum: None)
        runs: list[int] = []

        def readable(callback_id: str, stream: object) -> None:
            runs.append(1)
            if len(runs) == 3:
                driver.stop()

        io_id = driver.on_readable(a, readable)
        driver.run()
        driver.cancel(signal_id)
        driver.cancel(io_id)
        driver.close()  # type: ignore[attr-defined]

    one_driver()
    before = entries()
    for _ in range(5):
        one_driver()
    assert entries() == before


class Interrupted(BaseException):
    """What the test's ``SIGALRM`` handler raises: uncatchable by callbacks' error handling,
    as ``KeyboardInterrupt`` is."""


def _interrupt(signum: int, frame: object) -> None:
    raise Interrupted


@pytest.mark.parametrize("busy", ["a stream left readable", "repeat(0)"])
def test_a_loop_that_runs_only_c_callables_still_runs_signal_handlers(
    driver: Driver, busy: str, pairs: Callable[[], tuple[socket.socket, socket.socket]]
) -> None:
    """A loop that never blocks and whose callbacks are all C callables (here a partial of
    ``operator.setitem``), so that no Python code runs in it, still runs a signal handler
    that comes: its exception ends ``run()`` at once, as Ctrl-C's ``KeyboardInterrupt``
    must, not when the first Python callback comes (a backstop 10 s later)."""
    sink: dict[object, object] = {}
    if busy == "repeat(0)":
        busy_id = driver.repeat(0, functools.partial(operator.setitem, sink, "repeat"))
    else:
        near, far = pairs()
        far.send(b"x")  # never read: ready on every tick
        busy_id = driver.on_readable(near, functools.partial(operator.setitem, sink))
    backstop = driver.delay(10, lambda callback_id: driver.stop())
    started = time.monotonic()
    with alarm(_interrupt, 0.2), pytest.raises(Interrupted):
        driver.run()
    assert time.monotonic() - started < 5
    assert sink  # the callback ran, over and over
    driver.cancel(busy_id)
    driver.cancel(backstop)


def test_a_microtask_queued_by_a_resumed_microtask_runs_in_the_loop_greenlet(
    driver: Driver,
) -> None:
    """A microtask that suspends hands the loop to a successor greenlet; once resumed, it
    finishes in its own greenlet and goes no further. A microtask it queued on its way out
    runs in the loop greenlet after it, as every callback does, not in the resumed one
    (which would then go on draining the queue beside the loop)."""
    greenlet = pytest.importorskip("greenlet")
    seen: list[tuple[str, object]] = []
    suspensions: list[Any] = []

    def suspending() -> None:
        suspension = driver.get_suspension()
        suspensions.append(suspension)
        seen.append(("suspended", greenlet.getcurrent()))
        suspension.suspend()
        seen.append(("resumed", greenlet.getcurrent()))
        driver.queue(lambda: seen.append(("queued on the way out", greenlet.getcurrent())))

    def resuming() -> None:
        seen.append(("resuming", greenlet.getcurrent()))
        suspensions[0].resume()

    driver.queue(suspending)
    driver.defer(lambda callback_id: driver.queue(resuming))
    driver.run()
    assert [step for step, _ in seen] == [
        "suspended",
        "resuming",
        "resumed",
        "queued on the way out",
    ]
    (_, suspended), (_, loop), (_, resumed), (_, queued) = seen
    assert resumed is suspended
    assert loop is not suspended
    assert queued is loop


def test_a_zero_delay_runs_after_the_activation_that_started_its_tick_emptied_the_heap(
    driver: Driver, pairs: Callable[[], tuple[socket.socket, socket.socket]]
) -> None:
    """A zero delay activated while the timer heap held timers waits behind them in the
    FIFO of zero-interval timers. If the rest of that activation empties the heap (a
    stream's ``fileno()``, which activation calls, cancels the heap's timers, and their
    sweep drops every entry), the delay still runs in that tick: the FIFO is read whether
    the heap holds anything or not. (One timer past the dead entries tolerated: the sweep
    comes at the last cancellation, after which nothing is left.)"""
    from iopoll.loop._registry import _SWEEP_DEAD_TIMERS

    near, _far = pairs()
    timers = [driver.delay(100, lambda callback_id: None) for _ in range(_SWEEP_DEAD_TIMERS + 1)]
    driver.defer(lambda callback_id: driver.stop())
    driver.run()  # the timers are in the heap now

    class CancellingStream:
        """``near``, whose ``fileno()`` cancels ``doomed`` (once armed)."""

        def __init__(self) -> None:
            self.doomed: list[str] = []

        def fileno(self) -> int:
            doomed, self.doomed = self.doomed, []
            for callback_id in doomed:
                driver.cancel(callback_id)
            return near.fileno()

    ran: list[str] = []
    zero = driver.delay(0, ran.append)  # activated first: into the FIFO behind the heap
    stream = CancellingStream()
    driver.unreference(driver.on_readable(stream, lambda callback_id, ready: None))
    stream.doomed = timers  # the activation's fileno() call cancels them
    started = time.monotonic()
    with alarm(_interrupt, 5.0):
        driver.run()
    assert ran == [zero]
    assert time.monotonic() - started < 1
    assert not getattr(driver, "_timers", [])  # the heap was emptied, as the test means
