"""The polyfill's fused ``wait()`` against the engine's, call by call (issue 13).

``iopoll_polyfill.fallback.Context.wait`` runs select() itself and turns its answer into
watchers in one pass when every report is the common case: a readable fd with bytes waiting
(or of a kind that has no end of file) whose plain, open watcher asked for ``READ``; or only
writable fds.  Anything else is handed, with the same select() answer, to
``SelectMechanism.translate`` and the engine's general path.  ``_UnfusedContext`` is the
same class with the fused pass off: the reference.

* ``PolyfillDifferentialMachine``: the Hypothesis state machine of
  ``test_speedups_differential`` on a fused and an unfused polyfill context.
* Targeted cases, one per hand-back: each is run on both contexts, must give the same
  transcript on both, and asserts that transcript.  The cases reach what random programs
  rarely do (a one-shot writer whose buffer drains, bytes for a watcher that did not ask
  for them while its buffer is full, a listening socket's FIONREAD error, EBADF, an OSError
  from a signal handler).
* The fused pass's own limits, each checked on a wait after the first one (the first
  after an ``add()`` does not take the pass): a whole-second timeout longer than select()
  takes, a due timer reported first and an armed one ending the wait, ``wait(None)``
  blocking until a stream is ready.
"""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

import pytest
from hypothesis.stateful import run_state_machine_as_test

import iopoll_polyfill.fallback as fallback
from test_speedups_differential import DIFFERENTIAL, DifferentialMachine

Event = fallback.Event
READ, WRITE, ONESHOT = Event.READ, Event.WRITE, Event.ONESHOT
MakePair = Callable[[], tuple[socket.socket, socket.socket]]  # conftest's ``pairs`` fixture
Scenario = Callable[[type[fallback.Context], MakePair], list[Any]]


class _UnfusedContext(fallback.Context):
    """The polyfill's Context with its fused select() pass turned off: the reference."""

    __slots__ = ()

    def wait(  # type: ignore[override]
        self, timeout: int | None = None, microseconds: int = 0, max_events: int | None = None
    ) -> list[Any]:
        return self._unfused_wait(timeout, microseconds, max_events)


class PolyfillDifferentialMachine(DifferentialMachine):
    """The fused wait against the unfused one (edge triggering and float timeouts are
    refused alike on both sides)."""

    CONTEXTS = (fallback.Context, _UnfusedContext)


def test_the_fused_wait_agrees_step_by_step() -> None:
    """Random programs on the polyfill with and without its fused pass give the same answers."""
    run_state_machine_as_test(PolyfillDifferentialMachine, settings=DIFFERENTIAL)


def _labels(result: list[Any]) -> list[tuple[Any, int]]:
    return [(w.data, int(w.triggered_events)) for w in result]


def _fill(sock: socket.socket) -> None:
    """Send until ``sock``'s buffer is full: it stops being writable."""
    chunk = b"x" * 65536
    while True:
        try:
            sock.send(chunk)
        except BlockingIOError:
            return


def _drain(sock: socket.socket) -> None:
    while True:
        try:
            if not sock.recv(1 << 20):
                return
        except BlockingIOError:
            return


def _one_shot_writer(context: type[fallback.Context], make: MakePair) -> list[Any]:
    a, b = make()
    _fill(a)
    with context() as ctx:
        once = ctx.add(a, WRITE | ONESHOT, "once")
        transcript = [_labels(ctx.wait(0))]  # full: not writable
        _drain(b)
        transcript.append(_labels(ctx.wait(None)))  # writable: reported once ...
        transcript.append(_labels(ctx.wait(0)))  # ... and disarmed
        transcript.append(once.is_active())
    return transcript


def _end_of_file(context: type[fallback.Context], make: MakePair) -> list[Any]:
    a, b = make()
    with context() as ctx:
        ctx.add(b, READ, "eof")
        transcript = [_labels(ctx.wait(0))]
        a.shutdown(socket.SHUT_WR)
        transcript.append(_labels(ctx.wait(None)))
    return transcript


def _listener(context: type[fallback.Context], make: MakePair) -> list[Any]:
    with socket.create_server(("127.0.0.1", 0)) as server, context() as ctx:
        server.setblocking(False)
        ctx.add(server, READ, "listener")
        transcript = [_labels(ctx.wait(0))]
        clients = []
        for _ in range(2):  # the first FIONREAD fails (EINVAL); the second wait knows
            clients.append(socket.create_connection(server.getsockname()))
            transcript.append(_labels(ctx.wait(None)))
            server.accept()[0].close()
        for client in clients:
            client.close()
    return transcript


def _unwanted_bytes(context: type[fallback.Context], make: MakePair) -> list[Any]:
    a, b = make()
    _fill(b)
    with context() as ctx:
        ctx.add(b, WRITE, "writer")
        transcript = [_labels(ctx.wait(0))]
        a.send(b"unasked")  # readable now, but its watcher wants WRITE only, and it is full
        transcript.append(_labels(ctx.wait(0)))
        transcript.append(_labels(ctx.wait(0, 50_000)))
        _drain(a)
        transcript.append(_labels(ctx.wait(None)))
    return transcript


def _closed_behind_a_dup(context: type[fallback.Context], make: MakePair) -> list[Any]:
    a, b = make()
    with context() as ctx:
        watcher = ctx.add(b, READ, "closed")
        transcript = [_labels(ctx.wait(0))]
        kept = os.dup(b.fileno())
        try:
            b.close()
            a.send(b"x")  # the file is open and readable, its stream closed
            transcript.append(_labels(ctx.wait(0)))
            transcript.append((watcher.is_active(), len(ctx)))
        finally:
            os.close(kept)
    return transcript


def _closed_fd(context: type[fallback.Context], make: MakePair) -> list[Any]:
    _, b = make()
    c, d = make()
    with context() as ctx:
        gone = ctx.add(b, READ, "gone")
        ctx.add(d, READ, "kept")
        transcript = [_labels(ctx.wait(0))]
        os.close(b.detach())  # no fd at all: select() fails with EBADF
        c.send(b"x")
        transcript.append(_labels(ctx.wait(None)))
        transcript.append((gone.is_active(), len(ctx)))
    return transcript


SCENARIOS: dict[str, tuple[Scenario, list[Any]]] = {
    "a one-shot writer whose buffer drains": (
        _one_shot_writer,
        [[], [("once", int(WRITE))], [], True],
    ),
    "end of file": (_end_of_file, [[], [("eof", int(READ | Event.HANGUP))]]),
    "a listening socket": (
        _listener,
        [[], [("listener", int(READ))], [("listener", int(READ))]],
    ),
    "unwanted bytes on a full writer": (
        _unwanted_bytes,
        [[], [], [], [("writer", int(WRITE))]],
    ),
    "a stream closed behind a dup": (_closed_behind_a_dup, [[], [], (False, 0)]),
    "a closed fd (EBADF)": (_closed_fd, [[], [("kept", int(READ))], (False, 1)]),
}


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_each_hand_back_gives_the_unfused_answer(name: str, pairs: MakePair) -> None:
    """The fused and the unfused wait give the same transcript, and it is the right one."""
    scenario, expected = SCENARIOS[name]
    assert scenario(_UnfusedContext, pairs) == expected
    assert scenario(fallback.Context, pairs) == expected


class FromTheHandler(OSError):
    """An OSError a signal handler raises: wait() must let it through unchanged."""


@pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="needs signal.setitimer")
@pytest.mark.parametrize("context", [fallback.Context, _UnfusedContext], ids=["fused", "unfused"])
def test_an_oserror_from_a_signal_handler_leaves_wait_unchanged(
    context: type[fallback.Context], pairs: MakePair
) -> None:
    """PEP 475: a handler's OSError is not select()'s failure, so it is neither wrapped in
    FailedPollWaitError nor taken for EBADF (which would wait again)."""

    def handler(signum: int, frame: FrameType | None) -> None:
        raise FromTheHandler(5, "from the handler")

    _, b = pairs()
    previous = signal.signal(signal.SIGALRM, handler)
    try:
        with context() as ctx:
            ctx.add(b, READ, "never")
            assert ctx.wait(0) == []  # select()'s fd lists are fresh now: the fused pass runs
            signal.setitimer(signal.ITIMER_REAL, 0.05)
            with pytest.raises(FromTheHandler):
                ctx.wait(5)
            assert ctx.wait(0) == []  # the context is unchanged
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@pytest.mark.parametrize("microseconds", [0.0, False], ids=["0.0", "False"])
def test_microseconds_that_are_not_an_int_are_refused_on_the_fused_path_too(
    microseconds: Any, pairs: MakePair
) -> None:
    """``wait(0, 0.0)`` equals ``wait(0, 0)`` but is not an int: both waits refuse it."""
    _, b = pairs()
    for context in (_UnfusedContext, fallback.Context):
        with context() as ctx:
            ctx.add(b, WRITE, "writer")
            assert _labels(ctx.wait(0)) == [("writer", int(WRITE))]  # fd lists fresh now
            with pytest.raises(TypeError, match="microseconds must be an int"):
                ctx.wait(0, microseconds)


def test_a_listening_socket_takes_the_fused_path_once_a_peek_knew_it() -> None:
    """The first report of a listener goes to the translation (its FIONREAD fails; a peek
    finds it has no end of file); from the wait after next on, the fused pass takes it: the
    per-fd answer that pass reads (``SelectMechanism.reading``) followed the peek."""
    with socket.create_server(("127.0.0.1", 0)) as server, fallback.Context() as ctx:
        server.setblocking(False)
        ctx.add(server, READ, "listener")
        mechanism = ctx._usable
        assert mechanism is not None
        translated = []
        translate = mechanism.translate

        def counting(readable: list[int], writable: list[int]) -> Any:
            translated.append(readable)
            return translate(readable, writable)

        mechanism.translate = counting
        with socket.create_connection(server.getsockname()):
            reports = [_labels(ctx.wait(None)) for _ in range(4)]
            server.accept()[0].close()
        assert reports == [[("listener", int(READ))]] * 4
        # The peek's wait, then the one that refreshes the fd lists; then none.
        assert translated == [[server.fileno()]] * 2


# -- the fused pass itself (the first wait() after an add() does not take it) -----------------


def test_polyfill_wait_takes_a_timeout_longer_than_select_does(pairs: MakePair) -> None:
    """The polyfill's ``wait(timeout)`` with a whole-second timeout beyond what select()
    takes returns what is ready, as a shorter one does (no OverflowError)."""
    a, b = pairs()
    b.send(b"x")
    with fallback.Context() as ctx:
        watcher = ctx.add(a, fallback.Event.READ)
        for timeout in (2**40, 2**62):
            assert ctx.wait(timeout) == [watcher]
            assert watcher.triggered_events == fallback.Event.READ


def test_polyfill_wait_reports_a_due_timer_with_a_ready_stream(pairs: MakePair) -> None:
    """A timer that came due and a readable stream: the polyfill's ``wait(0)`` reports both,
    the timer first (SPEC 10), on a wait after the first one too."""
    a, b = pairs()
    b.send(b"x")
    with fallback.Context() as ctx:
        reader = ctx.add(a, fallback.Event.READ)
        timer = ctx.add(fallback.TimerHandle(0.1), fallback.Event.TIMER)
        assert ctx.wait(0) == [reader]
        time.sleep(0.2)
        assert ctx.wait(0) == [timer, reader]
        assert ctx.wait(0) == [reader]


def test_polyfill_wait_ends_at_an_armed_timer(pairs: MakePair) -> None:
    """The polyfill's ``wait(5)`` with an idle stream and a timer armed for 0.2 s returns
    the timer at its deadline, not at the end of the 5 s, on a wait after the first one
    too."""
    a, _ = pairs()
    with fallback.Context() as ctx:
        ctx.add(a, fallback.Event.READ)
        timer = ctx.add(fallback.TimerHandle(0.2), fallback.Event.TIMER)
        assert ctx.wait(0) == []
        started = time.monotonic()
        assert ctx.wait(5) == [timer]
        assert time.monotonic() - started < 2.5


def test_polyfill_wait_none_blocks_until_a_stream_is_ready(pairs: MakePair) -> None:
    """The polyfill's ``wait(None)`` with nothing ready yet blocks until a stream is ready
    (here: bytes sent from another thread after 0.2 s), and reports it, on a wait after
    the first one too."""
    a, b = pairs()
    with fallback.Context() as ctx:
        watcher = ctx.add(a, fallback.Event.READ)
        assert ctx.wait(0) == []
        sender = threading.Timer(0.2, b.send, (b"x",))
        sender.start()
        try:
            assert ctx.wait(None) == [watcher]
        finally:
            sender.join()
        assert watcher.triggered_events == fallback.Event.READ
