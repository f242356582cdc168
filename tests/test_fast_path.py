"""wait()'s fast path must honour every state that needs the general path.

``Context.wait`` skips its general path when it is called the way an event loop calls it:
``timeout`` None or a float, no ``microseconds``, no ``max_events``.  The conformance suite
waits with whole seconds (the form the polyfill takes), which always takes the general path,
so these tests make the same points through the fast forms: a state the fast path ignored
would lose a report, report a closed stream, or touch the parent's epoll after a fork.  Each
runs on ``iopoll.Context`` (the C fast path, when ``iopoll._speedups`` was built) and on
``pure_iopoll.Context`` (the pure-Python one).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from typing import Any

import pytest

import iopoll
import pure_iopoll
from iopoll import Backend, Event
from iopoll_conformance.process import in_child
from iopoll_conformance.support import tls_pair

BACKENDS = Backend.available_backends()
# The forms of wait() the fast path serves (a 50 ms float, zero, no timeout).
FAST_WAITS: list[Any] = [
    pytest.param(lambda ctx: ctx.wait(0.05), id="float"),
    pytest.param(lambda ctx: ctx.wait(0.0), id="zero"),
    pytest.param(lambda ctx: ctx.wait(0, 0), id="int"),
    pytest.param(lambda ctx: ctx.wait(), id="none"),
]
Wait = Callable[[iopoll.Context], list[iopoll.Watcher]]


CONTEXTS = [
    pytest.param(iopoll.Context, id="iopoll"),
    pytest.param(pure_iopoll.Context, id="pure"),
]


@pytest.fixture(params=CONTEXTS)
def context_type(request: pytest.FixtureRequest) -> Any:
    return request.param


@pytest.fixture(params=BACKENDS, ids=lambda b: b.name)
def ctx(request: pytest.FixtureRequest, context_type: Any) -> Any:
    with context_type(request.param) as context:
        yield context


@pytest.fixture
def pair() -> Any:
    """A connected socketpair, closed after the test."""
    a, b = socket.socketpair()
    yield a, b
    a.close()
    b.close()


@pytest.fixture
def readable() -> Any:
    """Three socketpairs whose second socket has a byte to read."""
    pairs = [socket.socketpair() for _ in range(3)]
    for a, _ in pairs:
        a.send(b"x")
    yield [b for _, b in pairs]
    for pair in pairs:
        for sock in pair:
            sock.close()


@pytest.mark.parametrize("fast_wait", FAST_WAITS)
def test_a_one_shot_fires_once_through_fast_waits(
    ctx: iopoll.Context, fast_wait: Wait, pair: Any
) -> None:
    a, b = pair
    watcher = ctx.add(b, Event.READ | Event.ONESHOT, "b")
    a.send(b"x")
    assert fast_wait(ctx) == [watcher]
    assert ctx.wait(0.0) == []  # disarmed, bytes still unread
    assert watcher.is_active()
    watcher.modify_events(Event.READ | Event.ONESHOT)
    assert fast_wait(ctx) == [watcher]  # re-armed: pending readiness at once
    assert ctx.wait(0.0) == []


@pytest.mark.parametrize("fast_wait", FAST_WAITS)
def test_one_shots_left_out_by_max_events_come_out_on_a_fast_wait(
    ctx: iopoll.Context, fast_wait: Wait, readable: list[socket.socket]
) -> None:
    # epoll disarms a reported one-shot itself: the one left out lives only in leftovers.
    watchers = [ctx.add(b, Event.READ | Event.ONESHOT, i) for i, b in enumerate(readable)]
    first = ctx.wait(1, 0, 2)
    assert len(first) == 2
    rest = fast_wait(ctx)
    assert [w.data for w in rest] == [w.data for w in watchers if w not in first]
    assert rest[0].triggered_events == Event.READ
    assert ctx.wait(0.0) == []  # each fired once


@pytest.mark.parametrize("fast_wait", FAST_WAITS)
def test_level_watchers_left_out_by_max_events_come_first_on_a_fast_wait(
    ctx: iopoll.Context, fast_wait: Wait, readable: list[socket.socket]
) -> None:
    # Nothing starves: what max_events cut goes ahead of what was just reported.
    watchers = [ctx.add(b, Event.READ, i) for i, b in enumerate(readable)]
    first = ctx.wait(1, 0, 2)
    assert len(first) == 2
    (left_out,) = (w for w in watchers if w not in first)
    rest = fast_wait(ctx)
    assert len(rest) == 3
    assert rest[0] is left_out


@pytest.mark.parametrize("fast_wait", FAST_WAITS)
def test_edges_left_out_by_max_events_come_out_on_a_fast_wait(
    context_type: Any, fast_wait: Wait, readable: list[socket.socket]
) -> None:
    if not Backend.EPOLL.is_available():
        pytest.skip("needs EPOLL")
    with context_type(Backend.EPOLL) as ctx:
        events = Event.READ | Event.EDGE_TRIGGERED
        watchers = [ctx.add(b, events, i) for i, b in enumerate(readable)]
        first = ctx.wait(1, 0, 1)
        assert len(first) == 1
        # Edges are reported once: the two max_events held back must come out now.
        rest = fast_wait(ctx)
        assert sorted(w.data for w in rest) == sorted(
            w.data for w in watchers if w is not first[0]
        )


@pytest.mark.parametrize("fast_wait", FAST_WAITS[:3])
def test_tls_buffered_bytes_are_seen_by_a_fast_wait(ctx: iopoll.Context, fast_wait: Wait) -> None:
    client, server = tls_pair()
    try:
        watcher = ctx.add(server, Event.READ, "tls")
        client.sendall(b"a" * 1000)
        assert [w.data for w in ctx.wait(2.0)] == ["tls"]
        assert server.recv(10) == b"a" * 10  # the rest sits decrypted in the SSL object
        assert server.pending() > 0
        # The fd is idle now: only the buffered-bytes check can report the watcher.
        assert fast_wait(ctx) == [watcher]
        assert watcher.triggered_events == Event.READ
    finally:
        client.close()
        server.close()


def test_fast_path_returns_after_the_last_buffered_watcher_goes(ctx: iopoll.Context) -> None:
    client, server = tls_pair()
    try:
        watcher = ctx.add(server, Event.READ, "tls")
        assert ctx._fast_poll is None  # a buffered watcher needs the general path
        watcher.remove()
        assert ctx._fast_poll is not None
        retired = ctx.add(server, Event.READ, "tls")
        assert ctx._fast_poll is None
        server.close()
        assert not retired.is_active()  # noticed: retired, and the fast path is back
        assert ctx._fast_poll is not None
    finally:
        client.close()
        server.close()


@pytest.mark.parametrize("fast_wait", FAST_WAITS)
def test_a_fast_wait_never_returns_a_closed_stream(ctx: iopoll.Context, fast_wait: Wait) -> None:
    a, b = socket.socketpair()
    keep = socket.socket(fileno=os.dup(b.fileno()))
    try:
        gone = ctx.add(b, Event.READ, "gone")
        stays = ctx.add(a, Event.WRITE, "stays")
        a.send(b"x")
        b.close()  # the dup keeps the file, and its epoll registration, alive
        result = fast_wait(ctx)
        assert result == [stays]
        assert not gone.is_active()
    finally:
        a.close()
        keep.close()


@pytest.mark.parametrize("fast_wait", FAST_WAITS[:3])
def test_a_fast_wait_in_a_forked_child_is_refused(
    ctx: iopoll.Context, fast_wait: Wait, pair: Any
) -> None:
    ctx.add(pair[0], Event.WRITE)

    def child() -> dict[str, Any]:
        try:
            fast_wait(ctx)
        except iopoll.FailedPollWaitError as exc:
            return {"code": exc.code.name}
        return {"code": None}

    assert in_child(child) == {"code": "PERMISSION"}
    assert len(ctx.wait(0.0)) == 1  # the parent's context is untouched


@pytest.mark.parametrize("fast_wait", FAST_WAITS)
def test_a_fast_wait_on_a_closed_context_raises(
    ctx: iopoll.Context, fast_wait: Wait, pair: Any
) -> None:
    ctx.add(pair[0], Event.WRITE)
    ctx.close()
    with pytest.raises(iopoll.PollError, match="closed"):
        fast_wait(ctx)


@pytest.mark.parametrize("microseconds", [0.0, False])
def test_a_zero_that_is_not_an_int_is_refused_on_the_fast_path(
    ctx: iopoll.Context, microseconds: object, pair: Any
) -> None:
    ctx.add(pair[0], Event.WRITE)
    with pytest.raises(TypeError, match="microseconds"):
        ctx.wait(0.0, microseconds)  # type: ignore[arg-type]


@pytest.mark.parametrize("fast_wait", FAST_WAITS)
def test_a_timer_further_off_than_one_os_wait_leaves_the_wait_to_the_os(
    ctx: iopoll.Context, fast_wait: Wait, pair: Any
) -> None:
    # An armed timer cuts the OS wait at its deadline; 30 days is more than one epoll or
    # poll call takes (Mechanism.max_timeout, some 24.8 days of milliseconds), so the cut
    # must be capped there, as the general path's is (the pure path raised OverflowError).
    a, b = pair
    watcher = ctx.add(b, Event.READ, "b")
    timer = ctx.add(iopoll.TimerHandle(30 * 86400), Event.TIMER, "timer")
    a.send(b"x")
    assert fast_wait(ctx) == [watcher]
    assert timer.is_active()
