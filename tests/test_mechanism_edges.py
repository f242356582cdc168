"""Edges of the native mechanisms (``_epoll.py``, ``_poll.py``) and the timer queue, on
``iopoll`` and on the pure-Python ``wait()`` (``pure_iopoll``).

Each case was written against a single-point mutant of that code that every other test let
through (5 of 55 tried; the others were caught, or change nothing a user can see): a
re-armed timer's old deadline, a POLLNVAL report cut by ``max_events``, a huge wait with
nothing to watch, and a one-shot fired from buffered bytes that must not hear a hang-up.
(A one-shot signal watcher another handle beat is in ``test_source_handle_edges.py``.)
"""

from __future__ import annotations

import os
import socket
import sys
import time
from types import FrameType, ModuleType

import pytest

import iopoll
import pure_iopoll
from iopoll import Backend, Event
from iopoll_conformance.process import alarm

IMPLEMENTATIONS = [
    pytest.param(iopoll, id="iopoll"),
    pytest.param(pure_iopoll, id="pure"),
]
BACKENDS = [b for b in Backend.available_backends() if b is not Backend.SELECT]


@pytest.mark.parametrize("backend", [*BACKENDS, Backend.SELECT], ids=lambda b: b.name)
@pytest.mark.parametrize("module", IMPLEMENTATIONS)
def test_a_re_armed_timer_does_not_fire_at_its_old_deadline(
    module: ModuleType, backend: Backend
) -> None:
    """``modify_events(Event.TIMER)`` on an armed timer re-arms it from that moment (SPEC 10):
    its first deadline must not fire it.  The old heap entry stays behind an earlier timer's
    (so it is not dropped as the heap's top); pins the timer queue's check that a popped
    entry is the watcher's *current* one, not merely that the watcher is armed."""
    timeout = 0.2
    with module.Context(backend) as ctx:
        early = ctx.add(iopoll.TimerHandle(timeout / 4), Event.TIMER)
        watcher = ctx.add(iopoll.TimerHandle(timeout), Event.TIMER)
        armed_at = time.monotonic()
        time.sleep(timeout * 0.6)
        before_re_arm = time.monotonic()  # the new deadline is at least timeout after this
        watcher.modify_events(Event.TIMER)
        time.sleep(timeout * 0.6)
        # Past the first deadline (and the early timer's), before the new one.
        assert time.monotonic() - armed_at > timeout
        first, second = ctx.wait(0), ctx.wait(0)
        if time.monotonic() - before_re_arm >= timeout:  # the new deadline may have come
            pytest.skip("this machine slept too long to tell the deadlines apart")
        assert first == [early]
        assert second == []
        # The new deadline still fires it, once.
        assert ctx.wait(2.0) == [watcher]
        assert watcher.triggered_events == Event.TIMER
        assert time.monotonic() - before_re_arm >= timeout - 0.001
        assert ctx.wait(0) == []


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX poll() and pipes")
@pytest.mark.parametrize("module", IMPLEMENTATIONS)
def test_a_pollnval_report_cut_by_max_events_is_not_lost_when_the_number_is_reused(
    module: ModuleType,
) -> None:
    """SPEC 6.9 on ``POLL``: an int fd closed behind the Context's back is reported once,
    with ``ERROR``.  When ``max_events`` leaves that POLLNVAL report out and a new file then
    takes the fd number, the next ``wait()`` must still report the watcher with ``ERROR``
    (the kept POLLNVAL bits), not with the new file's readiness, and then drop it."""
    if Backend.POLL not in Backend.available_backends():
        pytest.skip("no POLL backend here")
    a, b = socket.socketpair()
    spare_r, spare_w = os.pipe()
    try:
        with module.Context(Backend.POLL) as ctx:
            ready = ctx.add(a, Event.WRITE)  # first in the poll set: reported first
            victim_fd = os.dup(spare_r)
            victim = ctx.add(victim_fd, Event.READ)
            os.close(victim_fd)  # behind the handle's back: POLLNVAL
            assert ctx.wait(0, max_events=1) == [ready]
            # The number goes to a new, readable file before the next wait.
            new_r, new_w = os.pipe()
            if victim_fd not in (new_r, new_w):  # put the read end there
                os.dup2(new_r, victim_fd)
                os.close(new_r)
                new_r = victim_fd
            try:
                os.write(new_w, b"x")  # readable, whichever end took the number
                got = ctx.wait(0)
                assert victim in got
                assert victim.triggered_events == Event.ERROR
                assert not victim.is_active()
                assert victim not in ctx.wait(0)
            finally:
                os.close(new_r)
                os.close(new_w)
    finally:
        a.close()
        b.close()
        os.close(spare_r)
        os.close(spare_w)


class _Woken(Exception):
    """Raised by the SIGALRM handler to end a wait."""


@pytest.mark.skipif(sys.platform == "win32", reason="SIGALRM and setitimer")
@pytest.mark.parametrize("timeout", [1e10, 1e15], ids=["1e10", "1e15"])
@pytest.mark.parametrize("backend", [*BACKENDS, Backend.SELECT], ids=lambda b: b.name)
@pytest.mark.parametrize("module", IMPLEMENTATIONS)
def test_a_huge_wait_with_no_watcher_sleeps_without_overflowing(
    module: ModuleType, backend: Backend, timeout: float
) -> None:
    """SPEC 4: a positive timeout with no active watcher sleeps it, and huge timeouts never
    overflow.  ``time.sleep()`` refuses more than time_t can hold (OverflowError), so the
    sleep must be cut into pieces one call can take; here a signal handler ends it."""

    def wake(signum: int, frame: FrameType | None) -> None:
        raise _Woken

    with module.Context(backend) as ctx:
        started = time.monotonic()
        with alarm(wake, 0.1), pytest.raises(_Woken):
            ctx.wait(timeout)
        assert time.monotonic() - started >= 0.09


@pytest.mark.parametrize("backend", BACKENDS, ids=lambda b: b.name)
@pytest.mark.parametrize("module", IMPLEMENTATIONS)
def test_a_one_shot_fired_from_buffered_bytes_is_deaf_to_a_hang_up(
    module: ModuleType, backend: Backend
) -> None:
    """SPEC 6.4 and 6.6: a one-shot ``READ`` watcher fired by bytes a TLS stream buffers is
    disarmed for the fd too, so a hang-up (a reset by the peer: ERROR and HANGUP, which the
    OS reports whatever the mask) is not reported until ``modify_events`` re-arms it.
    Pins that the OS registration is dropped, not left with an empty mask."""
    import struct

    from iopoll_conformance.streams import tls_with_pending

    client, server = tls_with_pending()
    try:
        with module.Context(backend) as ctx:
            watcher = ctx.add(client, Event.READ | Event.ONESHOT)
            assert ctx.wait(0) == [watcher]  # from the buffer, the fd idle
            assert watcher.triggered_events == Event.READ
            # The peer goes away abruptly: the client's fd now reports a hang-up.
            server.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            server.close()
            time.sleep(0.05)
            assert ctx.wait(0.1) == []
            assert watcher.is_active()
            watcher.modify_events(Event.READ | Event.ONESHOT)
            assert ctx.wait(1.0) == [watcher]
            assert ctx.wait(0.05) == []
    finally:
        client.close()
        server.close()
