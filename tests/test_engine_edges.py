"""Edges of the Context engine's bookkeeping that a mutation run found unpinned.

Each test here fails on one or more single-point slips in ``context_state.py``,
``general_wait.py`` or ``timers.py`` that the rest of the suite let through, and passes on
the pristine engine.  They run on every available backend, on ``iopoll`` (its C ``wait()``
unless ``IOPOLL_PURE_PYTHON=1``) and on the pure-Python ``Context`` (``pure_iopoll``), with
real OS objects only: socket pairs, ``os.dup`` to keep a closed stream's file open.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import iopoll
import pure_iopoll
from iopoll import Event
from test_hidden_bookkeeping import force_a_rebuild

Pairs = Callable[[], tuple[socket.socket, socket.socket]]

IMPLEMENTATIONS: list[Any] = [
    *(
        pytest.param((iopoll, b), id=f"iopoll-{b.name}")
        for b in iopoll.Backend.available_backends()
    ),
    *(
        pytest.param((pure_iopoll, b), id=f"pure-{b.name}")
        for b in pure_iopoll.Backend.available_backends()
    ),
]


@pytest.fixture(params=IMPLEMENTATIONS)
def ctx(request: pytest.FixtureRequest) -> Iterator[Any]:
    """A Context of each implementation on each available backend, closed after the test."""
    api, backend = request.param
    with api.Context(backend) as context:
        yield context


def needs_edges(ctx: Any) -> None:
    """Skip unless the context's backend takes EDGE_TRIGGERED."""
    if not ctx.backend.supports_edge_triggering():
        pytest.skip("EDGE_TRIGGERED is not supported on this backend")


def test_on_watcher_removed_is_called_in_the_order_the_watchers_were_lost(
    ctx: Any, pairs: Pairs
) -> None:
    """SPEC 10 on_watcher_removed: the queued watchers are called back first lost, first
    called (a later one stays queued behind one whose callback raised)."""
    streams = [pairs()[0] for _ in range(3)]
    watchers = [ctx.add(s, Event.READ) for s in streams]
    called: list[Any] = []
    ctx.on_watcher_removed(called.append)
    for stream, watcher in zip(streams, watchers, strict=True):
        stream.close()
        assert not watcher.is_active()  # noticed now: lost in this order
    assert ctx.wait(0) == []
    assert called == watchers


def test_edges_that_arrived_before_a_rebuild_at_add_are_reported(
    ctx: Any, pairs: Pairs, keepers: list[int]
) -> None:
    """SPEC 4: edges the old epoll object holds, not yet reported, when add() of a reused
    fd number rebuilds it, are all reported by the next wait() (none is dropped with the
    old object), and once only."""
    needs_edges(ctx)
    edges = []
    for _ in range(3):
        a, b = pairs()
        edges.append(ctx.add(a, Event.READ | Event.EDGE_TRIGGERED))
        b.send(b"x")  # the edge arrives; no wait() has seen it yet
    force_a_rebuild(ctx, pairs, keepers)  # add() of the number a closed stream's entry holds
    assert sorted(ctx.wait(0), key=id) == sorted(edges, key=id)
    assert ctx.wait(0) == []


def test_a_rebuild_does_not_watch_an_unwatched_file_on_a_raw_closed_number(
    ctx: Any, pairs: Pairs, keepers: list[int]
) -> None:
    """SPEC 6.8/6.9: an int fd closed behind the Context's back (its file kept open by a
    dup) whose number an unwatched socket then takes: a rebuild must not register that
    number again, and the unwatched socket's data is never reported."""
    if ctx.backend is not iopoll.Backend.EPOLL:
        pytest.skip("only epoll rebuilds (poll and select watch numbers: SPEC 6.9)")
    a, _ = pairs()
    number = a.detach()
    raw = ctx.add(number, Event.READ)
    keepers.append(os.dup(number))
    os.close(number)  # behind the Context's back: an int cannot say it was closed
    c, d = pairs()
    unwatched, peer = (c, d) if c.fileno() == number else (d, c)
    if unwatched.fileno() != number:
        pytest.skip("the fd number was not reused")
    peer.send(b"x")  # the unwatched socket on the number is readable
    force_a_rebuild(ctx, pairs, keepers)
    assert raw not in ctx.wait(0)
    assert raw not in ctx.wait(0.01)


def test_a_timer_due_at_the_end_of_a_timeout_is_reported_by_that_wait(ctx: Any) -> None:
    """SPEC 10 / SPEC 4: a timer due when a finite wait's timeout runs out is reported by
    that wait (its last look), not left to the next one."""
    for _ in range(5):
        timer = ctx.add(iopoll.TimerHandle(0.02), Event.TIMER)
        assert ctx.wait(0.02) == [timer]
        timer.remove()


class _FlakyPending:
    """A stream with pending() (as an ``ssl.SSLSocket`` has) that raises when told to."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.fail = False
        self.before_failing: Callable[[], object] = lambda: None

    def fileno(self) -> int:
        return self.sock.fileno()

    def pending(self) -> int:
        if self.fail:
            self.fail = False
            self.before_failing()
            raise RuntimeError("pending() failed")
        return 0


def _due_timer_beside(ctx: Any, pairs: Pairs) -> tuple[_FlakyPending, Any]:
    """A watched stream whose next pending() fails, and a timer watcher that is due."""
    a, _ = pairs()
    stream = _FlakyPending(a)
    ctx.add(stream, Event.READ)
    timer = ctx.add(iopoll.TimerHandle(0.001), Event.TIMER)
    time.sleep(0.01)
    stream.fail = True
    return stream, timer


def test_a_due_timer_is_not_lost_when_the_wait_that_took_it_raises(ctx: Any, pairs: Pairs) -> None:
    """SPEC 4 / SPEC 10: a wait() that took a due timer, then raised (a stream's pending()
    failed) before reporting it, leaves the timer due: the next wait() reports it."""
    _, timer = _due_timer_beside(ctx, pairs)
    with pytest.raises(RuntimeError):
        ctx.wait(0)
    assert ctx.wait(0) == [timer]
    assert timer.triggered_events == Event.TIMER
    assert ctx.wait(0) == []


def test_a_due_timer_removed_by_the_wait_that_raised_stays_removed(ctx: Any, pairs: Pairs) -> None:
    """SPEC 4 / SPEC 10: a due timer the failing wait() took, and that was removed before
    the wait raised (here by the stream's pending(), as a signal handler could), is not
    armed again: it is never reported after its remove()."""
    stream, timer = _due_timer_beside(ctx, pairs)
    stream.before_failing = timer.remove
    with pytest.raises(RuntimeError):
        ctx.wait(0)
    assert not timer.is_active()
    assert ctx.wait(0) == []
    assert ctx.wait(0.02) == []
