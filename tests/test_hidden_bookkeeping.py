"""SPEC 4: what the Context does behind the caller's back changes nothing a wait() reports.

A stream closed without ``remove()`` leaves work for the Context: retiring its watcher and,
on epoll when a ``dup`` keeps the file open, a kernel entry nothing can delete, which a
reused fd number or a report of the entry makes it rebuild the epoll object.  Each test
here found a bug in that work (the first soak of EPOLL): a stale entry hid a ready watcher
from ``wait(0)``, a rebuild reported an edge again, and a rebuild cost a watcher left out
by ``max_events`` its turn.  They run on every backend, on the C and the pure ``wait()``,
and on the polyfill, where they hold trivially or through the same code.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from typing import Any

import pytest

import iopoll
import pure_iopoll
from iopoll import Event
from iopoll_polyfill import fallback

IMPLEMENTATIONS: list[Any] = [
    *(
        pytest.param((iopoll, b), id=f"iopoll-{b.name}")
        for b in iopoll.Backend.available_backends()
    ),
    *(
        pytest.param((pure_iopoll, b), id=f"pure-{b.name}")
        for b in pure_iopoll.Backend.available_backends()
    ),
    pytest.param((fallback, fallback.Backend.SELECT), id="polyfill"),
]


@pytest.fixture(params=IMPLEMENTATIONS)
def ctx(request: pytest.FixtureRequest) -> Iterator[Any]:
    api, backend = request.param
    with api.Context(backend) as context:
        yield context


def close_behind_a_dup(sock: socket.socket, keepers: list[int]) -> None:
    """Close ``sock`` without remove(), while a dup keeps its file (and epoll entry) alive."""
    keepers.append(os.dup(sock.fileno()))
    sock.close()


def force_a_rebuild(ctx: Any, pairs: Any, keepers: list[int]) -> None:
    """Watch a stream, close it behind a dup, and add a new stream on the same fd number."""
    a, _ = pairs()
    ctx.add(a, Event.READ)
    number = a.fileno()
    close_behind_a_dup(a, keepers)
    c, d = pairs()
    reused = c if c.fileno() == number else d if d.fileno() == number else None
    if reused is None:
        pytest.skip("the fd number was not reused")
    ctx.add(reused, Event.READ)


def test_a_stale_entry_does_not_hide_a_ready_watcher(
    ctx: Any, pairs: Any, keepers: list[int]
) -> None:
    """The closed stream's report took the one slot of a batch sized for the live watchers:
    ``wait(0)`` returned ``[]`` while another watcher was writable."""
    a, b = pairs()
    closed = ctx.add(a, Event.READ)
    b.send(b"x")  # its entry is ready, and ahead of the writable one
    c, _ = pairs()
    writable = ctx.add(c, Event.WRITE)
    close_behind_a_dup(a, keepers)
    assert not closed.is_active()  # retired: one live watcher left, the entry stays
    assert ctx.wait(0) == [writable]
    assert ctx.wait(0) == [writable]


def test_closed_streams_do_not_take_the_slots_of_ready_ones(
    ctx: Any, pairs: Any, keepers: list[int]
) -> None:
    """Several unnoticed closed streams with bytes pending, then ready ones: one wait(0)
    returns every ready watcher, and only those."""
    closed = []
    for _ in range(4):
        a, b = pairs()
        ctx.add(a, Event.READ)
        b.send(b"x")
        closed.append(a)
    ready = {ctx.add(pairs()[0], Event.WRITE, data=i) for i in range(3)}
    for a in closed:
        close_behind_a_dup(a, keepers)
    assert set(ctx.wait(0)) == ready
    assert len(ctx) == 3


def test_a_rebuild_does_not_report_an_edge_again(ctx: Any, pairs: Any, keepers: list[int]) -> None:
    if not ctx.backend.supports_edge_triggering():
        pytest.skip("no edge-triggering here")
    x, y = pairs()
    edge = ctx.add(x, Event.READ | Event.EDGE_TRIGGERED)
    y.send(b"x")
    assert ctx.wait(0) == [edge]
    assert ctx.wait(0) == []  # not drained, but no new edge
    force_a_rebuild(ctx, pairs, keepers)
    assert edge not in ctx.wait(0)
    y.send(b"y")  # a new edge is still reported
    assert edge in ctx.wait(0)


def test_a_rebuild_keeps_an_edge_left_out_by_max_events(
    ctx: Any, pairs: Any, keepers: list[int]
) -> None:
    if not ctx.backend.supports_edge_triggering():
        pytest.skip("no edge-triggering here")
    edges = []
    for i in range(3):
        x, y = pairs()
        edges.append(ctx.add(x, Event.READ | Event.EDGE_TRIGGERED, data=i))
        y.send(b"x")
    first = ctx.wait(0, max_events=1)
    assert len(first) == 1
    force_a_rebuild(ctx, pairs, keepers)
    rest = [w for w in ctx.wait(0) if w in edges]
    assert sorted(w.data for w in first + rest) == [0, 1, 2]  # each edge exactly once
    assert [w for w in ctx.wait(0) if w in edges] == []


def test_a_rebuild_keeps_the_turn_of_a_watcher_left_out_by_max_events(
    ctx: Any, pairs: Any, keepers: list[int]
) -> None:
    watchers = []
    for i in range(3):
        a, b = pairs()
        watchers.append(ctx.add(a, Event.READ, data=i))
        b.send(b"x")
    seen = [w.data for w in ctx.wait(0, max_events=1)]
    force_a_rebuild(ctx, pairs, keepers)
    for _ in range(2):
        seen += [w.data for w in ctx.wait(0, max_events=1) if w in watchers]
    assert sorted(seen) == [0, 1, 2]  # the rotation went on: nobody was served twice


def test_a_stale_entry_does_not_hide_a_due_edge_under_max_events(
    ctx: Any, pairs: Any, keepers: list[int]
) -> None:
    """The stale entry's report took the one slot; the rebuild it caused kept the edge as a
    leftover, which came out one call late: ``wait(0, max_events=1)`` returned ``[]``."""
    if not ctx.backend.supports_edge_triggering():
        pytest.skip("no edge-triggering here")
    a, _ = pairs()
    ctx.add(a, Event.READ | Event.WRITE)
    c, _ = pairs()
    edge = ctx.add(c, Event.WRITE | Event.EDGE_TRIGGERED)
    close_behind_a_dup(a, keepers)
    assert ctx.wait(0, max_events=1) == [edge]


def left_out_one_shot(ctx: Any, pairs: Any) -> tuple[Any, socket.socket, socket.socket]:
    """A ready one-shot watcher that ``wait(0, max_events=1)`` left out (on epoll the kernel
    fired it, and the Context keeps its report), with its stream and the stream's peer."""
    first, first_peer = pairs()
    ctx.add(first, Event.READ, data="first")
    first_peer.send(b"x")  # ready first, and first in every backend's order
    reader, writer = pairs()
    once = ctx.add(reader, Event.READ | Event.ONESHOT, data="once")
    writer.send(b"x")
    assert [w.data for w in ctx.wait(0, max_events=1)] == ["first"]  # "once" is left out
    return once, reader, writer


def test_a_one_shot_cut_by_max_events_before_a_rebuild_fires_once(
    ctx: Any, pairs: Any, keepers: list[int]
) -> None:
    """Found by a ten-minute EPOLL soak: the kernel fired a one-shot whose report a
    ``max_events`` cut kept; a rebuild registered it afresh, armed, so after the Context had
    reported it from the kept bits, new bytes made the fresh object report it again."""
    once, reader, writer = left_out_one_shot(ctx, pairs)
    reader.recv(1)  # not ready any more
    force_a_rebuild(ctx, pairs, keepers)
    fired = [w for w in ctx.wait(0) if w is once]  # from what the cut kept, or not at all
    writer.send(b"y")
    again = [w for w in ctx.wait(0) if w is once]
    assert len(fired) + len(again) <= 1, "a one-shot fired twice without a re-arm (SPEC 6.4)"
    once.modify_events(Event.READ | Event.ONESHOT)  # re-armed: the byte is reported once more
    assert [w for w in ctx.wait(0) if w is once] == [once]


def test_a_one_shot_cut_by_max_events_outlives_two_rebuilds(
    ctx: Any, pairs: Any, keepers: list[int]
) -> None:
    """Found by the ten-minute EPOLL soak (seed 20261201, step 952): a one-shot fired by the
    kernel and kept by a ``max_events`` cut is left out of the fresh object of a rebuild; at
    a second rebuild the check that each armed watcher's file is the one the old object
    held did not find it there, and retired a live watcher that was ready."""
    once, _, _ = left_out_one_shot(ctx, pairs)
    force_a_rebuild(ctx, pairs, keepers)
    force_a_rebuild(ctx, pairs, keepers)
    assert once.is_active()
    assert [w for w in ctx.wait(0) if w is once] == [once]  # its turn, from the kept bits
    assert [w for w in ctx.wait(0) if w is once] == []  # and only once
    once.modify_events(Event.READ | Event.ONESHOT)  # re-armed: the byte is reported again
    assert [w for w in ctx.wait(0) if w is once] == [once]


def test_a_rebuild_does_not_watch_the_file_that_took_a_closed_int_fds_number(
    ctx: Any, pairs: Any, keepers: list[int]
) -> None:
    """A bare int fd closed without remove(): epoll dropped its entry with the file.  An
    unwatched socket that takes the number was watched again by the next rebuild, which
    registers by number, and reported as the old watcher: its data went to the old
    watcher's owner (found with asyncio's add_reader(fd) and a late remove_reader)."""
    if ctx.backend.name != "EPOLL":
        pytest.skip("only epoll rebuilds (poll and select watch numbers: SPEC 6.9)")
    a, _ = pairs()
    number = a.fileno()
    old = ctx.add(number, Event.READ, "old")  # a bare int: no stream to ask
    a.close()
    c, d = pairs()
    if number not in (c.fileno(), d.fileno()):
        pytest.skip("the fd number was not reused")
    peer = d if c.fileno() == number else c
    force_a_rebuild(ctx, pairs, keepers)
    assert not old.is_active()
    peer.send(b"for the unwatched socket")
    assert ctx.wait(0) == []
    assert ctx.wait(0) == []


def test_a_watcher_left_out_by_max_events_keeps_its_turn_through_a_modify(
    ctx: Any, pairs: Any
) -> None:
    """SPEC 4: a watcher left out comes out on the next call.  modify_events() dropped its
    place, so a caller that modified it after every wait never saw it."""
    (a, pa), (b, pb) = pairs(), pairs()
    watchers = {ctx.add(a, Event.READ, "a"), ctx.add(b, Event.READ, "b")}
    pa.send(b"x")
    pb.send(b"x")
    seen = []
    for _ in range(4):
        (first,) = ctx.wait(0, 0, 1)
        seen.append(first.data)
        (left_out,) = watchers - {first}
        left_out.modify_events(Event.READ)  # the same events: nothing else changes
    assert sorted(seen) == ["a", "a", "b", "b"], seen


def test_a_rebuild_does_not_watch_the_file_that_took_a_raw_closed_streams_number(
    ctx: Any, pairs: Any, keepers: list[int]
) -> None:
    """The same for a stream whose fd was closed behind its back (``os.close``, SPEC 6.9):
    the stream still answers the old number, so the rebuild took the watcher for live and
    registered it again, on the pipe that had taken the number; every wait then reported
    the old watcher with the pipe's readiness (SPEC 6.8: an unwatched stream that gets
    the number is never reported)."""
    if ctx.backend.name != "EPOLL":
        pytest.skip("only epoll rebuilds (poll and select watch numbers: SPEC 6.9)")
    a, _ = pairs()
    number = a.fileno()
    old = ctx.add(a, Event.READ, "old")
    os.close(number)  # behind the socket's back: a.fileno() still says `number`
    r, w = os.pipe()
    try:
        if r != number:
            pytest.skip("the fd number was not reused")
        os.write(w, b"for nobody")
        assert ctx.wait(0) == []  # the kernel dropped the entry with the file
        force_a_rebuild(ctx, pairs, keepers)
        for _ in range(2):
            assert old not in ctx.wait(0)
        assert not old.is_active()
    finally:
        a.detach()  # its fd is the pipe's now
        os.close(r)
        os.close(w)


@pytest.mark.skipif(not iopoll.Backend.EPOLL.is_available(), reason="no epoll here")
def test_epoll_lists_the_file_of_each_registered_number(pairs: Any) -> None:
    """What the rebuild reads: each registered number with its file's inode, from the
    kernel's own listing (/proc/self/fdinfo); a closed file's entry is gone."""
    from iopoll._epoll import EpollMechanism

    mechanism = EpollMechanism()
    try:
        a, b = pairs()
        c, _ = pairs()
        for sock in (a, b, c):
            mechanism.register(sock.fileno(), int(Event.READ))
        held = mechanism.registered_files()
        if held is None:
            pytest.skip("/proc/self/fdinfo does not list epoll entries here")
        assert held == {s.fileno(): {os.fstat(s.fileno()).st_ino} for s in (a, b, c)}
        gone = c.fileno()
        c.close()
        assert gone not in (mechanism.registered_files() or {})
    finally:
        mechanism.close()
