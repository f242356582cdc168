"""What a polyfill ``wait()`` reports, and for how long, where its fused pass meets the
rare cases: closed and reused fd numbers, retired watchers, fired one-shots, signal
handlers that change the watchers mid-wait, select()'s limits, and the probes the select
mechanism makes.

``iopoll_polyfill.fallback.Context.wait`` fuses the engine's fast path and select() into one
pass once a wait has seen the registrations (``tests/test_polyfill_fused_wait.py``).  Each
case here first makes that pass the one that runs (a ``wait(0)`` before, then no
``max_events``, no ``microseconds`` and an int or ``None`` timeout), and each was written
against a single-point change of the polyfill or its select mechanism that the other tests
let through.  The first three held two bugs of the fused pass; they run on native
``iopoll``'s ``SELECT`` too, which shares the mechanism but not the pass.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

import pytest

import iopoll
import iopoll_polyfill.fallback as fallback
from test_polyfill_fused_wait import _fill as fill

pytestmark = pytest.mark.skipif(
    sys.platform == "win32", reason="POSIX: pipes in select(), signals, fd numbers"
)

Event = fallback.Event
READ, WRITE, ERROR, HANGUP = Event.READ, Event.WRITE, Event.ERROR, Event.HANGUP

BOTH = pytest.mark.parametrize(
    "make",
    [fallback.Context, lambda: iopoll.Context(iopoll.Backend.SELECT)],
    ids=["polyfill", "native-select"],
)


class Hung(Exception):
    """A wait() still blocked when the watchdog fired."""


@pytest.fixture
def watchdog() -> Iterator[None]:
    """Ends a wait() that would hang: SIGALRM's handler raises, which leaves wait()."""

    def handler(signum: int, frame: FrameType | None) -> None:
        raise Hung("wait() still blocked after 5 s")

    previous = signal.signal(signal.SIGALRM, handler)
    signal.setitimer(signal.ITIMER_REAL, 5.0)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def reported(watchers: list[fallback.Watcher]) -> dict[object, Event]:
    return {w.data: w.triggered_events for w in watchers}


@pytest.fixture
def taken_over(
    pairs: Callable[[], tuple[socket.socket, socket.socket]],
) -> Iterator[Callable[[int], socket.socket]]:
    """A maker of a new pair one of whose ends is put on the number ``fd`` (which a closed
    stream left); it returns the peer of that end, which can make it readable.  The end on
    ``fd`` is watched by nobody, and closed after the test."""
    made: list[socket.socket] = []

    def take(fd: int) -> socket.socket:
        intruder, feeder = pairs()
        if feeder.fileno() == fd:  # the lowest free number went to the second end
            intruder, feeder = feeder, intruder
        if intruder.fileno() != fd:
            os.dup2(intruder.fileno(), fd)
            made.append(socket.socket(fileno=fd))
        return feeder

    yield take
    for sock in made:
        sock.close()


def later(seconds: float, action: Callable[[], object]) -> threading.Timer:
    timer = threading.Timer(seconds, action)
    timer.start()
    return timer


# -- the two bugs: wait(None) with nothing that can end it; a report nobody asks for now --


@BOTH
def test_wait_none_returns_at_once_when_the_closed_streams_number_is_an_idle_pipes(
    make: Callable[[], Any], watchdog: None
) -> None:
    """SPEC 4 and 6.8: with no active watcher left, ``wait(None)`` returns ``[]`` at once.
    The fused pass called ``select(..., None)`` on the fd lists of the last wait, so a
    writer whose socket was closed, its number now an idle pipe's read end, kept it asleep
    for ever."""
    a, b = socket.socketpair()
    with b, make() as ctx:
        fd = a.fileno()
        ctx.add(a, WRITE, "writer")
        assert len(ctx.wait(0)) == 1
        a.close()
        r, w = os.pipe()
        if r != fd:  # the idle read end takes a's number
            os.dup2(r, fd)
            os.close(r)
        try:
            assert ctx.wait(None) == []
        finally:
            os.close(fd)
            os.close(w)


@BOTH
def test_wait_none_returns_at_once_after_a_fired_one_shots_stream_closed(
    make: Callable[[], Any], watchdog: None
) -> None:
    """The same through a one-shot: fired, then its stream closed.  The fused pass gave
    select() empty fd lists and no timeout, and slept for ever."""
    a, b = socket.socketpair()
    with b, make() as ctx:
        ctx.add(a, READ | Event.ONESHOT, "once")
        b.send(b"x")
        assert len(ctx.wait(0)) == 1
        assert ctx.wait(0) == []
        a.close()
        assert ctx.wait(None) == []


@BOTH
def test_no_read_for_a_watcher_a_signal_handler_switched_to_write(
    make: Callable[[], Any]
) -> None:
    """SPEC 6.2: ``READ`` is reported only when asked for.  A signal handler switches a
    ``READ`` watcher to ``WRITE`` while select() waits (and retries with the fd lists it
    was given, PEP 475); then bytes arrive.  The translation drops what the watcher no
    longer asks for; the fused pass read its stale table and reported ``READ`` to a watcher
    watching ``WRITE``."""
    a, b = socket.socketpair()
    a.setblocking(False)
    with a, b, make() as ctx:
        fill(a)  # a is full: as a writer it has nothing to report
        watcher = ctx.add(a, READ, "switched")
        assert ctx.wait(0) == []

        def handler(signum: int, frame: FrameType | None) -> None:
            watcher.modify_events(WRITE)
            b.send(b"data")

        previous = signal.signal(signal.SIGALRM, handler)
        try:
            signal.setitimer(signal.ITIMER_REAL, 0.05)
            result = ctx.wait(1)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
        assert all(not (w.triggered_events & READ) for w in result), result


# -- a report about a retired watcher does not end the wait early ----------------------------


@pytest.mark.parametrize("timeout", [5, None])
def test_a_retired_watcher_report_does_not_cut_a_fused_timeout_short(
    pairs, taken_over, timeout, watchdog: None
) -> None:
    """SPEC 4 / 6.8: a report about a watcher whose stream was closed (its fd number now
    taken by an unwatched, readable socket) is dropped, and it is no reason to return
    early: the wait goes on for the rest of its timeout (or for ever) and reports the
    watcher that becomes ready meanwhile.  (With the fused wait's start time taken as 0,
    the remaining time came out negative and wait(5) returned [] at once; with None
    handed on as 0, wait(None) did.)"""
    _, b = pairs()
    c, d = pairs()
    with fallback.Context() as ctx:
        ctx.add(b, READ, "closed")
        ctx.add(d, READ, "late")
        assert ctx.wait(0) == []  # fd lists fresh: the next wait is the fused one
        fd = b.fileno()
        b.close()
        feeder = taken_over(fd)
        feeder.send(b"x")  # fd is readable again, for a stream nobody watches
        timer = later(0.3, lambda: c.send(b"y"))
        started = time.monotonic()
        result = reported(ctx.wait(timeout))
        elapsed = time.monotonic() - started
        timer.join()
    assert result == {"late": READ}
    assert 0.2 < elapsed < 4


# -- an int fd with no open file ----------------------------------------------------------------


def test_an_int_fd_with_no_open_file_is_reported_invalid_once() -> None:
    """An int fd that is not open when added (SPEC 3: an int fd cannot be checked for
    closing) is reported once with ERROR and dropped, as a fd closed behind the handle's
    back is (SPEC 6.9).  Linux's select() ignores the bits above its fd table, so a never
    opened fd up there comes back "ready" from every select(): register() must see it (its
    fstat fails) and the next poll report it invalid without asking select().  Without
    that, the watcher was reported READ at every wait, for ever."""
    fd = fallback.FD_SETSIZE - 1
    with pytest.raises(OSError):
        os.fstat(fd)  # not open in this process
    with fallback.Context() as ctx:
        ghost = ctx.add(fd, READ, "ghost")
        assert reported(ctx.wait(0)) == {"ghost": ERROR}
        assert not ghost.is_active()
        assert ctx.wait(0) == []
        assert ctx.wait(0, 100_000) == []


# -- EBADF hides no ready watcher --------------------------------------------------------------


@pytest.mark.parametrize("microseconds", [0, 1], ids=["fused", "unfused"])
def test_a_fd_closed_behind_its_back_does_not_hide_a_ready_watcher(pairs, microseconds) -> None:
    """select() fails with EBADF for the whole call when one watched fd was closed behind
    its handle's back.  That fd is reported once with ERROR (SPEC 6.9), and the other
    watchers that are ready come out of the same wait (SPEC 4: no ready watcher is missed;
    6.3: level-triggered)."""
    c, d = pairs()
    r, w = os.pipe()
    try:
        with fallback.Context() as ctx:
            ctx.add(r, READ, "raw")  # an int fd: its closing cannot be seen (SPEC 3)
            ctx.add(d, READ, "kept")
            assert ctx.wait(0) == []
            c.send(b"y")
            os.close(r)
            assert reported(ctx.wait(0, microseconds)) == {"raw": ERROR, "kept": READ}
            assert reported(ctx.wait(0, microseconds)) == {"kept": READ}
    finally:
        os.close(w)


# -- a pipe's write end -------------------------------------------------------------------------


def test_a_pipe_write_end_whose_reader_left_bytes_is_error_not_read() -> None:
    """The write end of a pipe reads as ready only once its reader is gone: that is ERROR,
    on every wait, even when the reader left bytes in the pipe (FIONREAD on the write end
    counts them; the fused wait must not take them for READ)."""
    r, w = os.pipe()
    try:
        os.write(w, b"left behind")
        with fallback.Context() as ctx:
            ctx.add(w, READ, "writer end")
            assert ctx.wait(0) == []  # the reader is still there
            os.close(r)
            for _ in range(3):  # the first wait is the unfused one, the next fused
                assert reported(ctx.wait(0)) == {"writer end": ERROR}
    finally:
        os.close(w)


# -- a watcher removed by a signal handler mid-wait ---------------------------------------------


@pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="needs signal.setitimer")
def test_a_watcher_removed_by_a_signal_handler_during_the_wait_is_not_news(pairs) -> None:
    """select() retries on EINTR (PEP 475) with the fd lists it was given: a fd whose
    watcher a signal handler removed meanwhile may come back readable.  It is not reported,
    and wait() does not fail (it returns when its timeout ends)."""
    a, b = pairs()
    _, d = pairs()
    with fallback.Context() as ctx:
        gone = ctx.add(b, READ, "gone")
        ctx.add(d, READ, "idle")
        assert ctx.wait(0) == []

        def handler(signum, frame):
            gone.remove()
            a.send(b"x")  # readable now, unwatched

        previous = signal.signal(signal.SIGALRM, handler)
        try:
            signal.setitimer(signal.ITIMER_REAL, 0.05)
            started = time.monotonic()
            assert ctx.wait(0, 400_000) == []
            assert time.monotonic() - started > 0.3
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
        assert len(ctx) == 1


# -- EBADF keeps the caller's timeout ----------------------------------------------------------


@pytest.mark.parametrize("timeout", [None, 5])
def test_a_silently_retired_closed_fd_does_not_end_a_fused_wait_early(
    pairs, timeout, watchdog: None
) -> None:
    """A stream whose fd was closed without remove() makes the fused select() fail with
    EBADF; its watcher is retired without a report (its handle answers -1).  That is no
    reason to return: the wait goes on, with the caller's timeout, until another watcher
    is ready (SPEC 4: what the Context does behind the caller's back changes nothing)."""
    _, b = pairs()
    c, d = pairs()
    with fallback.Context() as ctx:
        gone = ctx.add(b, READ, "gone")
        ctx.add(d, READ, "kept")
        assert ctx.wait(0) == []  # fd lists fresh: the next wait is the fused one
        os.close(b.detach())  # no fd at all now; b.fileno() is -1
        timer = later(0.3, lambda: c.send(b"y"))
        started = time.monotonic()
        result = reported(ctx.wait(timeout))
        elapsed = time.monotonic() - started
        timer.join()
        assert result == {"kept": READ}
        assert 0.2 < elapsed < 4
        assert not gone.is_active()


# -- a stale report mid-wait does not stretch the timeout --------------------------------------


def test_a_stale_report_mid_wait_does_not_stretch_the_timeout(pairs, taken_over) -> None:
    """``wait(2)`` woken at 1 s by a report about a retired watcher (its fd number now an
    unwatched socket's, which becomes readable) waits on for what is left of its 2 s, not
    for another 2 s."""
    _, b = pairs()
    _, d = pairs()
    with fallback.Context() as ctx:
        ctx.add(b, READ, "closed")
        ctx.add(d, READ, "idle")
        assert ctx.wait(0) == []  # fd lists fresh: the next wait is the fused one
        fd = b.fileno()
        b.close()
        feeder = taken_over(fd)
        timer = later(1.0, lambda: feeder.send(b"x"))
        started = time.monotonic()
        result = ctx.wait(2)
        elapsed = time.monotonic() - started
        timer.join()
    assert result == []
    assert 1.9 < elapsed < 2.8  # not the 3 s of a second whole timeout after the report


# -- a closed stream's fd number taken by a stream nobody watches ------------------------------


def test_a_closed_stream_is_not_reported_for_the_bytes_of_its_fds_new_owner(
    pairs, taken_over
) -> None:
    """SPEC 6.8: once its stream is closed a watcher is never returned by wait(); an
    unwatched stream that gets the same fd number is never reported either, even with
    bytes waiting (and on every wait, fused or not)."""
    _, b = pairs()
    with fallback.Context() as ctx:
        old = ctx.add(b, READ, "closed")
        assert ctx.wait(0) == []  # fd lists fresh: the next wait is the fused one
        fd = b.fileno()
        b.close()
        feeder = taken_over(fd)
        feeder.send(b"not yours")
        assert ctx.wait(0) == []
        assert ctx.wait(0) == []
        assert not old.is_active()
        assert len(ctx) == 0


# -- the hang-up probe raises no SIGPIPE --------------------------------------------------------

_SIGPIPE_CHILD = r"""
import signal, socket
import iopoll_polyfill.fallback as fallback
signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # as many command-line programs do
local, peer = socket.socketpair()
local.setblocking(False)
try:
    while True:
        local.send(b"x" * 65536)
except BlockingIOError:
    pass
with fallback.Context() as ctx:
    ctx.add(local, fallback.Event.WRITE, "writer")
    peer.shutdown(socket.SHUT_RDWR)
    for _ in range(2):
        print(sorted((w.data, int(w.triggered_events)) for w in ctx.wait(0, 100_000)))
print("alive")
"""


@pytest.mark.skipif(
    not hasattr(socket, "MSG_NOSIGNAL"),
    reason="no MSG_NOSIGNAL (macOS): the probe can raise SIGPIPE there (README, limitations)",
)
def test_looking_for_a_writers_hang_up_raises_no_sigpipe() -> None:
    """The polyfill probes a full socket at end of file with a zero-length send to tell a
    peer's SHUT_WR from a hang-up.  That probe must not raise SIGPIPE: a program that put
    SIGPIPE back to its default action (common for command-line tools) would be killed by
    a wait() that only reports HANGUP."""
    child = subprocess.run(
        [sys.executable, "-c", _SIGPIPE_CHILD],
        capture_output=True, text=True, timeout=60, env=os.environ.copy(),
    )
    hangup = f"[('writer', {int(HANGUP)})]"
    assert child.returncode == 0, (child.returncode, child.stderr)
    assert child.stdout.splitlines() == [hangup, hangup, "alive"]


# -- FD_SETSIZE itself is refused --------------------------------------------------------------


@pytest.mark.skipif(os.name == "nt", reason="POSIX: the limit is on the fd number")
def test_the_fd_numbered_fd_setsize_itself_is_refused() -> None:
    """SPEC 7: a fd >= FD_SETSIZE cannot be added: FailedHandleAddError, TOOBIG, naming the
    limit.  fd 1024 itself is the boundary (select() cannot take it either: accepted, it
    would make every later wait() fail with select()'s own ValueError)."""
    import resource  # POSIX

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft <= fallback.FD_SETSIZE:
        if hard != resource.RLIM_INFINITY and hard <= fallback.FD_SETSIZE:
            pytest.skip("cannot open fd 1024 here")
        resource.setrlimit(resource.RLIMIT_NOFILE, (fallback.FD_SETSIZE + 8, hard))
    try:
        a, b = socket.socketpair()
        with a, b:
            fd = fallback.FD_SETSIZE
            os.dup2(b.fileno(), fd)
            try:
                with fallback.Context() as ctx:
                    with pytest.raises(fallback.FailedHandleAddError) as caught:
                        ctx.add(fd, READ, "at the limit")
                    assert caught.value.code == fallback.ErrorCode.TOOBIG
                    assert "1024" in str(caught.value)
                    assert len(ctx) == 0
                    assert ctx.wait(0) == []
            finally:
                os.close(fd)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


# -- a negative timeout -------------------------------------------------------------------------


def test_a_negative_timeout_gets_the_same_value_error_on_every_path(pairs) -> None:
    """SPEC 4: a negative timeout is a ValueError naming the argument.  The message is the
    engine's, whether or not the context's fd lists were fresh (the fused wait's select()
    would otherwise answer with its own "timeout must be non-negative")."""
    _, b = pairs()
    with fallback.Context() as ctx:
        ctx.add(b, WRITE, "writer")
        with pytest.raises(ValueError) as before:
            ctx.wait(-1)  # registrations not yet seen by a wait
        assert reported(ctx.wait(0)) == {"writer": WRITE}  # fd lists fresh now
        with pytest.raises(ValueError) as after:
            ctx.wait(-1)
    assert str(after.value) == str(before.value)
    assert "timeout" in str(after.value) and "-1" in str(after.value)


# -- bytes a writer did not ask for do not stretch the timeout ---------------------------------


def test_unwanted_bytes_arriving_mid_wait_do_not_stretch_the_timeout(pairs) -> None:
    """A WRITE-only watcher on a full socket: bytes it did not ask for arrive half-way
    through ``wait(1, 500_000)``.  The fd is taken out of the read set for the rest of that
    wait, which still ends 1.5 s after it began (not 1.5 s after the bytes came)."""
    a, b = pairs()
    fill(b)  # b is not writable: nothing to report
    with fallback.Context() as ctx:
        ctx.add(b, WRITE, "writer")
        assert ctx.wait(0) == []
        timer = later(1.0, lambda: a.send(b"unasked"))
        started = time.monotonic()
        result = ctx.wait(1, 500_000)  # microseconds: the mechanism's own poll() waits
        elapsed = time.monotonic() - started
        timer.join()
    assert result == []
    assert 1.4 < elapsed < 2.2  # not the 2.5 s of a whole timeout after the bytes
