"""The C ``wait()`` on KQUEUE against the pure-Python one, over libkqueue (issue 13).

On BSD and macOS ``iopoll._speedups`` calls ``kevent(2)`` itself on the mechanism's kqueue
(``KqueueMechanism.native_kqueue``), makes the plain kevents (a read or write filter ready,
no ``EV_EOF`` or ``EV_ERROR``, for a watcher that asked for it) into reports in C, merged per
fd, and hands any other batch, whole, to ``KqueueMechanism.translate_kevents``.  Linux has no
kqueue, so that code is built here only for the tests: ``tests/test_kqueue_libkqueue.py``
copies the sources, compiles ``_speedups`` with ``IOPOLL_WITH_LIBKQUEUE`` against libkqueue,
and runs, with that build first on the import path and ``-p libkqueue_session``: this
module, ``test_speedups_differential.py`` with ``IOPOLL_TEST_FAST_BACKEND=KQUEUE``, and the
conformance suite.  This module is not collected by itself (no ``test_`` prefix).

What it holds: that this build waits in C at all (the kqueue object's ``control()`` is never
called for a wait), when it hands a batch to ``translate_kevents`` and when it declines to
wait (``native_kqueue`` -1), and that C and Python agree on every scenario, and on random
programs (``DifferentialMachine`` on KQUEUE); last, the edges a mutation run of
``_kqueue_wait.c`` found unpinned (what ``fflags`` carries to ``translate_kevents``, a
batch that fills the kevent array, the timeout's conversion).
"""

from __future__ import annotations

import os
import signal
import socket
import time
from collections.abc import Callable
from types import FrameType, ModuleType
from typing import Any, ClassVar

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import rule, run_state_machine_as_test

import iopoll
import iopoll._native
import pure_iopoll
from iopoll import Backend, Event, TimerHandle
from iopoll_conformance.process import alarm
from test_speedups_differential import (
    DIFF_WAITS,
    DIFFERENTIAL,
    DifferentialMachine,
    MakePair,
)

READ, WRITE, EDGE, ONESHOT = Event.READ, Event.WRITE, Event.EDGE_TRIGGERED, Event.ONESHOT
READ_HANGUP, HANGUP = Event.READ_HANGUP, Event.HANGUP

pytestmark = pytest.mark.skipif(
    not (iopoll._native.ACCELERATED and Backend.KQUEUE.is_available()),
    reason="needs the C build over libkqueue (tests/test_kqueue_libkqueue.py runs this module)",
)


class Calls:
    """Counts the kqueue object's waits (``control()`` asked for events) and the mechanism's
    ``translate_kevents()`` calls, made on one context's own objects."""

    def __init__(self, ctx: Any) -> None:
        self.waits = 0
        self.translated: list[int] = []  # the number of kevents in each batch
        mechanism = ctx._usable
        control = mechanism._kqueue.control
        translate = mechanism.translate_kevents

        def counting_control(changes: Any, max_events: int, timeout: Any = None) -> Any:
            self.waits += max_events > 0
            return control(changes, max_events, timeout)

        def counting_translate(kevents: list[Any]) -> Any:
            self.translated.append(len(kevents))
            return translate(kevents)

        mechanism._kqueue.control = counting_control
        mechanism.translate_kevents = counting_translate


def _reported(result: list[Any]) -> list[tuple[Any, int]]:
    """A wait's result as sorted (data, triggered_events): two kqueues may order alike fds
    differently, so the C and the pure context are compared as sets."""
    return sorted((w.data, int(w.triggered_events)) for w in result)


def _agree(scenario: Callable[[ModuleType], list[Any]]) -> list[Any]:
    """``scenario`` gives the same transcript with C and with pure Python; that transcript."""
    c_transcript = scenario(iopoll)
    assert c_transcript == scenario(pure_iopoll)
    return c_transcript


# -- the C path is the one that waits ------------------------------------------------------


def test_this_build_waits_with_kevent_itself(pairs: MakePair) -> None:
    a, b = pairs()
    c, d = pairs()
    with iopoll.Context(Backend.KQUEUE) as ctx:
        assert ctx._usable.native_kqueue >= 0
        calls = Calls(ctx)
        ctx.add(b, READ, "b")
        ctx.add(d, READ | WRITE, "d")
        a.send(b"x")
        c.send(b"y")
        assert _reported(ctx.wait(0)) == [("b", int(READ)), ("d", int(READ | WRITE))]
        assert _reported(ctx.wait(None)) == [("b", int(READ)), ("d", int(READ | WRITE))]
        b.recv(10)
        assert _reported(ctx.wait(0.01)) == [("d", int(READ | WRITE))]
        assert (calls.waits, calls.translated) == (0, [])


def test_a_batch_with_more_than_plain_kevents_is_translated_whole(pairs: MakePair) -> None:
    def scenario(module: ModuleType) -> list[Any]:
        a, b = pairs()
        _, d = pairs()
        with module.Context(Backend.KQUEUE) as ctx:
            calls = Calls(ctx)
            ctx.add(b, READ, "half-closed")
            ctx.add(d, WRITE, "plain")
            a.shutdown(socket.SHUT_WR)  # EV_EOF on b's read filter
            transcript = [_reported(ctx.wait(0)), _reported(ctx.wait(0))]
            if module is iopoll:
                # Each wait: one kevent() of C's, both kevents to translate_kevents().
                assert (calls.waits, calls.translated) == (0, [2, 2])
            return transcript

    assert _agree(scenario) == [
        [("half-closed", int(READ)), ("plain", int(WRITE))],
    ] * 2


def test_native_kqueue_says_when_the_c_path_may_wait(pairs: MakePair) -> None:
    """-1 while the test binding emulates EV_CLEAR (one fd's two filters in two modes), while
    a READ_HANGUP-only watcher's end of file is reported without the OS, and once closed."""
    a, b = pairs()
    c, d = pairs()
    ctx = iopoll.Context(Backend.KQUEUE)
    mechanism = ctx._usable
    fd = mechanism.native_kqueue
    assert fd >= 0
    mixed = ctx.add(b, READ_HANGUP | WRITE, "mixed")  # read filter EV_CLEAR, write level
    assert mechanism.native_kqueue == -1
    mixed.modify_events(READ | WRITE)
    assert mechanism.native_kqueue == fd
    mixed.remove()
    ctx.add(d, READ_HANGUP, "at eof")
    assert mechanism.native_kqueue == fd
    c.shutdown(socket.SHUT_WR)
    assert _reported(ctx.wait(0)) == [("at eof", int(READ_HANGUP))]
    assert mechanism.native_kqueue == -1  # reported on every wait from now on, as level asks
    assert _reported(ctx.wait(0)) == [("at eof", int(READ_HANGUP))]
    ctx.close()
    assert mechanism.native_kqueue == -1
    a.close()


@pytest.mark.parametrize("count", [10, 40], ids=["merged from the end", "merged in the table"])
@pytest.mark.parametrize("module", [iopoll, pure_iopoll], ids=["iopoll", "pure_iopoll"])
def test_reports_come_in_the_order_their_fds_first_came(
    module: ModuleType, count: int, pairs: MakePair
) -> None:
    """One report per fd, at the place its first kevent came: over libkqueue, readiness
    order (epoll's).  READ watchers made ready in reverse come back in reverse; READ|WRITE
    ones, writable as soon as added, in the order they were added, each fd's later read
    kevent merged into its report (below 32 reports C looks for it from the end, above in a
    hash table)."""
    with module.Context(Backend.KQUEUE) as ctx:
        peers = []
        for i in range(count):
            peer, sock = pairs()
            peers.append(peer)
            ctx.add(sock, READ, i)
        for peer in reversed(peers):
            peer.send(b"x")
        assert [w.data for w in ctx.wait(0)] == list(reversed(range(count)))
    with module.Context(Backend.KQUEUE) as ctx:
        peers = []
        for i in range(count):
            peer, sock = pairs()
            peers.append(peer)
            ctx.add(sock, READ | WRITE, i)
        for peer in reversed(peers):
            peer.send(b"x")
        result = ctx.wait(0)
        assert [w.data for w in result] == list(range(count))
        assert {w.triggered_events for w in result} == {READ | WRITE}


# -- C and Python agree -------------------------------------------------------------------


def _both_filters_of_an_fd(make: MakePair) -> Callable[[ModuleType], list[Any]]:
    def scenario(module: ModuleType) -> list[Any]:
        a, b = make()
        c, d = make()
        with module.Context(Backend.KQUEUE) as ctx:
            level = ctx.add(b, READ | WRITE, "level")
            ctx.add(d, READ | WRITE | EDGE, "edge")
            a.send(b"x")
            c.send(b"y")
            transcript = [_reported(ctx.wait(0)), _reported(ctx.wait(0))]
            level.modify_events(WRITE)
            transcript.append(_reported(ctx.wait(0.01)))
            return transcript

    return scenario


def _many_fds(make: MakePair) -> Callable[[ModuleType], list[Any]]:
    """More kevents than the stack array (the Context's buffer), and more reports than the
    merge looks for from the end (its hash table)."""

    def scenario(module: ModuleType) -> list[Any]:
        with module.Context(Backend.KQUEUE) as ctx:
            peers = []
            for i in range(200):
                peer, sock = make()
                peers.append(peer)
                ctx.add(sock, READ | WRITE if i % 3 else READ, i)
            for peer in peers[::2]:
                peer.send(b"x")
            transcript = [_reported(ctx.wait(0)), _reported(ctx.wait(None))]
            for peer in peers[1::4]:
                peer.send(b"x")
            transcript.append(_reported(ctx.wait(0.01)))
            return transcript

    return scenario


def _read_hangup_only(make: MakePair) -> Callable[[ModuleType], list[Any]]:
    """Bytes for a READ_HANGUP-only watcher: a plain kevent it did not ask for (translated,
    nothing reported); then end of file, which is level from then on."""

    def scenario(module: ModuleType) -> list[Any]:
        a, b = make()
        _, d = make()
        with module.Context(Backend.KQUEUE) as ctx:
            ctx.add(b, READ_HANGUP, "hangup only")
            ctx.add(d, WRITE, "writer")
            a.send(b"bytes")
            transcript = [_reported(ctx.wait(0)), _reported(ctx.wait(0.01))]
            a.shutdown(socket.SHUT_WR)
            transcript += [_reported(ctx.wait(0)), _reported(ctx.wait(None))]
            return transcript

    return scenario


def _one_shots_and_pipes(make: MakePair) -> Callable[[ModuleType], list[Any]]:
    """A one-shot's plain kevent (the Context's general path), and a pipe's end of file."""

    def scenario(module: ModuleType) -> list[Any]:
        a, b = make()
        r, w = os.pipe()
        try:
            with module.Context(Backend.KQUEUE) as ctx:
                once = ctx.add(b, READ | ONESHOT, "once")
                ctx.add(r, READ, "pipe")
                a.send(b"x")
                os.write(w, b"z")
                transcript = [_reported(ctx.wait(0)), _reported(ctx.wait(0))]
                once.modify_events(READ | ONESHOT)
                os.close(w)
                w = -1
                transcript += [_reported(ctx.wait(0)), _reported(ctx.wait(0))]
                os.read(r, 10)
                transcript.append(_reported(ctx.wait(0)))
                return transcript
        finally:
            os.close(r)
            if w >= 0:
                os.close(w)

    return scenario


def _timers_cut_the_wait(make: MakePair) -> Callable[[ModuleType], list[Any]]:
    def scenario(module: ModuleType) -> list[Any]:
        _, b = make()
        with module.Context(Backend.KQUEUE) as ctx:
            ctx.add(b, READ, "idle")
            ctx.add(TimerHandle(0.02), Event.TIMER, "timer")
            return [_reported(ctx.wait(5.0)), _reported(ctx.wait(0))]

    return scenario


SCENARIOS = [
    pytest.param(_both_filters_of_an_fd, id="both filters of an fd"),
    pytest.param(_many_fds, id="many fds"),
    pytest.param(_read_hangup_only, id="READ_HANGUP only"),
    pytest.param(_one_shots_and_pipes, id="one-shots and pipes"),
    pytest.param(_timers_cut_the_wait, id="timers"),
]


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_c_and_python_agree(
    scenario: Callable[[MakePair], Callable[[ModuleType], list[Any]]], pairs: MakePair
) -> None:
    assert _agree(scenario(pairs))


def test_a_handler_that_mixes_the_modes_hands_the_wait_to_python(pairs: MakePair) -> None:
    """EINTR, and the handler made the C path unable to go on (the binding now emulates
    EV_CLEAR on an fd): the rest of the wait is Python's, and it still sees what comes."""
    a, b = pairs()
    c, d = pairs()

    def scenario(module: ModuleType) -> list[Any]:
        with module.Context(Backend.KQUEUE) as ctx:
            ctx.add(b, READ, "data")
            mixing = ctx.add(d, READ, "mixing")

            def handler(signum: int, frame: FrameType | None) -> None:
                if module is iopoll:
                    assert ctx._usable.native_kqueue >= 0
                mixing.modify_events(READ_HANGUP | WRITE)
                if module is iopoll:
                    assert ctx._usable.native_kqueue == -1
                a.send(b"x")

            with alarm(handler, 0.05):
                first = _reported(ctx.wait(5.0))
            b.recv(10)
            return [first, _reported(ctx.wait(0))]

    assert _agree(scenario) == [
        [("data", int(READ)), ("mixing", int(WRITE))],
        [("mixing", int(WRITE))],
    ]
    c.close()


@pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="needs signal.setitimer")
def test_a_handler_that_closes_the_context_ends_the_wait_as_in_python(pairs: MakePair) -> None:
    _, b = pairs()

    def scenario(module: ModuleType) -> list[Any]:
        ctx = module.Context(Backend.KQUEUE)
        ctx.add(b, READ, "idle")
        with alarm(lambda signum, frame: ctx.close(), 0.05):
            try:
                ctx.wait(5.0)
            except iopoll.PollError as exc:
                return [type(exc).__name__, str(exc)]
        return ["returned"]

    # What a kevent() on the closed kqueue gets (EBADF), through _poll_failed: the wait of a
    # closed Context (SPEC 4), as the pure path on BSD's select.kqueue; over the test
    # binding the pure path is no reference here (libkqueue_session.py says why).
    assert scenario(iopoll) == ["PollError", "Context is closed"]


# -- random programs --------------------------------------------------------------------------

# The forms of wait() without max_events: with it, which watchers a wait returns depends on
# the order the kqueue reports them, and two kqueues order alike fds differently.
UNCUT_FORMS = [form for form in DIFF_WAITS if not form.endswith("k)")]


class KqueueDifferential(DifferentialMachine):
    """``DifferentialMachine`` on two KQUEUE contexts, C and pure, over libkqueue: results
    compared as sets, no ``max_events``, and no close without ``remove()`` (libkqueue cannot
    see a close: ``libkqueue_session.py``)."""

    CONTEXTS: ClassVar[tuple[Callable[[], Any], Callable[[], Any]]] = (
        lambda: iopoll.Context(Backend.KQUEUE),
        lambda: pure_iopoll.Context(Backend.KQUEUE),
    )
    ORDERED = False

    # Not rules here (the parent's are replaced by plain methods).
    def close_stream(self, slot: int, keep: bool, dice: int) -> None:  # type: ignore[override]
        raise AssertionError("not a rule on KQUEUE over libkqueue")

    def cut_wait(self, form: str, k: int) -> None:  # type: ignore[override]
        raise AssertionError("not a rule on KQUEUE over libkqueue")

    def wait(self, form: str, k: int) -> None:  # type: ignore[override]
        DifferentialMachine.wait(self, form, k)

    @rule(form=st.sampled_from(UNCUT_FORMS))
    def uncut_wait(self, form: str) -> None:
        """A wait in any form without ``max_events``."""
        self.wait(form, 1)


def test_c_and_pure_kqueue_agree_step_by_step() -> None:
    run_state_machine_as_test(KqueueDifferential, settings=DIFFERENTIAL)


# -- edges, from a mutation run of _kqueue_wait.c ------------------------------------------
# The reset connection and the edge watcher without READ were written against single-point
# slips that left every other test green (2 of 48 tried); the full kevent array and the
# timeout catch in seconds what only the minute-long suites caught before.


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
        ("reader", int(READ | Event.ERROR | HANGUP)),
        ("writer", int(WRITE | Event.ERROR | HANGUP)),
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
            ctx.add(b, READ_HANGUP | WRITE | EDGE, "b")
            if module is iopoll:
                assert ctx._usable.native_kqueue >= 0  # the C path waits: no mode emulated
            return [_reported(ctx.wait(0)), _reported(ctx.wait(0))]

    assert _agree(scenario) == [[("b", int(WRITE))], []]
