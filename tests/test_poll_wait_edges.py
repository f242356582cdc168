"""``wait()`` on ``POLL`` in the corners its other tests leave: what the C fast path
(``poll_fast_wait`` and the ``deliver``/``still_open``/``wait_retrying`` it shares with the
other OS waits, in ``_os_wait.c``) must do exactly as the pure-Python reference does.

Pinned here: timeouts below a millisecond are rounded up, never down, and a zero timeout
never blocks; reports come in registration order (the ``struct pollfd`` array's, which is
the poll object's), the last entry included; a hang-up that was not asked for and
``POLLRDHUP`` are both reported; a poll(2) that fails raises ``PollError``; and repeated
waits hold no reference for good (the probe, its fd number, the decode table, the poll set)
and keep no report buffer.  Each case runs on ``iopoll`` (C when built) and ``pure_iopoll``
(the reference), on real socket pairs, pipes and signals; with ``IOPOLL_PURE_PYTHON=1`` both
are pure Python and must pass alike.
"""

from __future__ import annotations

import gc
import os
import select
import signal
import socket
import sys
import time
import tracemalloc
import weakref
from collections.abc import Callable
from types import ModuleType

import pytest

from iopoll import Backend, Event, PollError
from iopoll_conformance.process import alarm, within
from test_c_registration import MODULES  # iopoll (C when built) and the pure reference

pytestmark = pytest.mark.skipif(not Backend.POLL.is_available(), reason="needs POLL")


MakePair = Callable[[], tuple[socket.socket, socket.socket]]  # conftest's ``pairs`` fixture


@pytest.mark.parametrize("module", MODULES)
def test_a_timeout_below_a_millisecond_is_rounded_up(module: ModuleType, pairs: MakePair) -> None:
    """wait(0.0009) with nothing ready lasts at least 0.9 ms: poll(2)'s milliseconds are
    rounded up, as CPython's poll.poll() rounds them, so the wait never ends early."""
    timeout = 0.0009
    with module.Context(Backend.POLL) as ctx:
        ctx.add(pairs()[1], Event.READ)
        for _ in range(20):
            started = time.monotonic()
            assert ctx.wait(timeout) == []
            assert time.monotonic() - started >= timeout


@pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="needs signal.setitimer")
@pytest.mark.parametrize("module", MODULES)
def test_a_zero_timeout_never_blocks(module: ModuleType, pairs: MakePair) -> None:
    """wait(0) and wait(0.0) with nothing ready return [] at once."""
    with module.Context(Backend.POLL) as ctx:
        ctx.add(pairs()[1], Event.READ)
        started = time.monotonic()
        assert within(2.0, lambda: (ctx.wait(0), ctx.wait(0.0)), "wait(0)") == ([], [])
        assert time.monotonic() - started < 1.0


@pytest.mark.parametrize("module", MODULES)
@pytest.mark.parametrize("timeout", [0, 0.5], ids=["now", "timed"])
def test_reports_come_in_registration_order(
    module: ModuleType, timeout: float, pairs: MakePair
) -> None:
    """Ready watchers come back in the order they were added (POLL's array order), the
    last one added included, whether they were ready at once or woke a blocking wait."""
    count = 6
    with module.Context(Backend.POLL) as ctx:
        writers, readers = [], []
        for index in range(count):
            writer, reader = pairs()
            ctx.add(reader, Event.READ, index)
            writers.append(writer)
            readers.append(reader)
        if timeout:
            assert ctx.wait(0) == []  # nothing yet: the next wait blocks first
        for writer in reversed(writers):
            writer.send(b"x")
        assert [w.data for w in ctx.wait(timeout)] == list(range(count))
        for reader in readers[:-1]:
            reader.recv(1)  # only the last entry of the array is left ready
        assert [w.data for w in ctx.wait(timeout)] == [count - 1]


@pytest.mark.parametrize("module", MODULES)
def test_a_hangup_that_was_not_asked_for_is_reported(module: ModuleType) -> None:
    """A READ watcher on a pipe whose writer closed, with nothing left to read, is
    reported: poll(2) gives POLLHUP alone, which no one asks for, and it is HANGUP."""
    read_end, write_end = os.pipe()
    try:
        with module.Context(Backend.POLL) as ctx:
            watcher = ctx.add(read_end, Event.READ, "pipe")
            os.close(write_end)
            write_end = -1
            assert ctx.wait(0.5) == [watcher]
            assert watcher.triggered_events & Event.HANGUP
    finally:
        os.close(read_end)
        if write_end >= 0:
            os.close(write_end)


@pytest.mark.skipif(not hasattr(select, "POLLRDHUP"), reason="needs POLLRDHUP")
@pytest.mark.parametrize("module", MODULES)
def test_a_peer_shutdown_is_reported_as_read_hangup(module: ModuleType, pairs: MakePair) -> None:
    """A peer's shutdown(SHUT_WR) is reported as READ_HANGUP (POLLRDHUP, bit 0x2000) to a
    watcher that asked for it."""
    writer, reader = pairs()
    with module.Context(Backend.POLL) as ctx:
        watcher = ctx.add(reader, Event.READ | Event.READ_HANGUP, "peer")
        assert ctx.wait(0) == []
        writer.shutdown(socket.SHUT_WR)
        assert ctx.wait(0.5) == [watcher]
        assert watcher.triggered_events & Event.READ_HANGUP
        assert watcher.triggered_events & Event.READ


@pytest.mark.parametrize("module", MODULES)
def test_a_poll_the_os_refuses_raises_poll_error(module: ModuleType, pairs: MakePair) -> None:
    """When poll(2) itself fails (more entries than the open-files limit: EINVAL), wait()
    raises PollError rather than returning an empty result."""
    from fd_limit import lowered_fd_limit  # POSIX: resource

    with module.Context(Backend.POLL) as ctx:
        for _ in range(40):
            ctx.add(pairs()[1], Event.READ)
        with lowered_fd_limit(32), pytest.raises(PollError):
            ctx.wait(0)


@pytest.mark.parametrize("module", MODULES)
def test_repeated_waits_keep_no_reference(module: ModuleType) -> None:
    """Waits that report a watcher hold nothing after they return: the refcounts of its
    fd number, the Context's decode table and poll set stay put, and once the watcher is
    removed its socket is freed."""
    rounds = 200
    # Not the ``pairs`` fixture: it keeps its sockets, and this one must be freed.
    writer, reader = socket.socketpair()
    freed = weakref.ref(reader)
    fd = reader.fileno()
    try:
        with module.Context(Backend.POLL) as ctx:
            watcher = ctx.add(reader, Event.READ)
            writer.send(b"x")
            assert ctx.wait(0.5) == [watcher]
            watched = (fd, ctx._decode_low, ctx._native_pollfds)
            before = [sys.getrefcount(item) for item in watched]
            for _ in range(rounds):
                assert ctx.wait(0.5) == [watcher]
            after = [sys.getrefcount(item) for item in watched]
            del watched
            grown = [a - b for a, b in zip(after, before, strict=True)]
            assert all(g < rounds // 4 for g in grown), (before, after)
            watcher.remove()
            del watcher
        reader.close()
        del reader
        gc.collect()
        assert freed() is None
    finally:
        writer.close()


@pytest.mark.parametrize("module", MODULES)
@pytest.mark.parametrize("ready", [True, False], ids=["ready", "idle"])
def test_waits_on_many_fds_do_not_grow_memory(
    module: ModuleType, ready: bool, pairs: MakePair
) -> None:
    """Waits over more fds than the C code's stack arrays hold (256): memory stays flat
    over many waits, whether 300 fds are ready at once or the wait blocks over 300 idle
    ones (each wait takes a report buffer and must give it back)."""
    many, rounds = 300, 60
    with module.Context(Backend.POLL) as ctx:
        for _ in range(many):
            ctx.add(pairs()[1], Event.WRITE if ready else Event.READ)
        timeout = 0 if ready else 0.0005

        def once() -> None:
            assert len(ctx.wait(timeout)) == (many if ready else 0)

        for _ in range(5):
            once()
        tracemalloc.start()
        try:
            first = tracemalloc.get_traced_memory()[0]
            for _ in range(rounds):
                once()
            grown = tracemalloc.get_traced_memory()[0] - first
        finally:
            tracemalloc.stop()
    assert grown < 32 * 1024, grown


@pytest.mark.parametrize("module", MODULES)
def test_one_shot_waits_leave_no_objects_behind(module: ModuleType, pairs: MakePair) -> None:
    """A one-shot watcher fired, re-armed and fired again, many times, beside a plain one:
    each wait hands its reports to the general path, and keeps none of the objects it made
    for that (the collector finds no more objects after the waits than before), nor a
    reference to either watcher."""
    rounds = 300
    plain_writer, plain_reader = pairs()
    once_writer, once_reader = pairs()
    with module.Context(Backend.POLL) as ctx:
        plain = ctx.add(plain_reader, Event.READ, "plain")
        once = ctx.add(once_reader, Event.READ | Event.ONESHOT, "once")
        plain_writer.send(b"x")
        once_writer.send(b"x")

        def once_more() -> None:
            once.modify_events(Event.READ | Event.ONESHOT)
            assert ctx.wait(0.5) == [plain, once]

        once_more()
        gc.collect()
        before = len(gc.get_objects())
        references = sys.getrefcount(plain), sys.getrefcount(once)
        for _ in range(rounds):
            once_more()
        gc.collect()
        grown = len(gc.get_objects()) - before
        assert sys.getrefcount(plain) - references[0] < rounds // 4
        assert sys.getrefcount(once) - references[1] < rounds // 4
    assert grown < rounds // 4, grown


@pytest.mark.skipif(not Backend.EPOLL.is_available(), reason="needs EPOLL")
@pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="needs signal.setitimer")
@pytest.mark.parametrize("module", MODULES)
def test_a_wait_with_no_timeout_and_only_closed_streams_returns(
    module: ModuleType, pairs: MakePair, keepers: list[int]
) -> None:
    """wait(None) on a Context whose only stream was closed without remove() (its file
    kept open by a dup, so epoll goes silent) returns [] instead of blocking for ever."""
    _writer, reader = pairs()
    with module.Context(Backend.EPOLL) as ctx:
        ctx.add(reader, Event.READ)
        keepers.append(os.dup(reader.fileno()))
        reader.close()
        assert within(2.0, lambda: ctx.wait(None), "wait(None)") == []


@pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="needs signal.setitimer")
@pytest.mark.parametrize("module", MODULES)
def test_waits_a_handler_ends_by_closing_the_context_leave_nothing(
    module: ModuleType, pairs: MakePair
) -> None:
    """A signal handler that closes the Context during a blocking wait makes that wait
    raise ``PollError`` (a closed Context's ``wait`` raises it, SPEC 4): the C wait hands
    such a wait back to Python at once, the pure one once its timeout is over (the poll
    goes on after the handler, PEP 475), and many of them leave no object behind."""
    rounds = 100
    _, reader = pairs()

    def once() -> None:
        ctx = module.Context(Backend.POLL)
        ctx.add(reader, Event.READ)
        closing = alarm(lambda signum, frame: ctx.close(), 0.001)
        with closing, pytest.raises(PollError, match="closed"):
            ctx.wait(0.01)

    once()
    gc.collect()
    before = len(gc.get_objects())
    for _ in range(rounds):
        once()
    gc.collect()
    grown = len(gc.get_objects()) - before
    assert grown < rounds // 4, grown
