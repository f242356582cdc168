"""Native-backend behaviour the conformance suite cannot see through the public API alone:
errno mapping, the stale-registration rebuild, fds beyond FD_SETSIZE, the decode cache."""

from __future__ import annotations

import errno
import os
import socket
import time
from typing import Any

import pytest

import iopoll
from _iopoll_core.errors import code_for_errno
from _iopoll_core.events import decode_bits, decode_table
from fd_limit import lowered_fd_limit, raised_fd_limit
from iopoll import Backend, ErrorCode, Event
from iopoll_conformance.process import alarm

NATIVE = [b for b in Backend.available_backends() if b is not Backend.SELECT]


@pytest.mark.parametrize(
    ("number", "code"),
    [
        (errno.ENOMEM, ErrorCode.NOMEM),
        (errno.EINVAL, ErrorCode.INVALID),
        (errno.EBADF, ErrorCode.INVALID),
        (errno.EEXIST, ErrorCode.EXISTS),
        (errno.ENOENT, ErrorCode.NOTFOUND),
        (errno.ETIMEDOUT, ErrorCode.TIMEOUT),
        (errno.EINTR, ErrorCode.INTERRUPTED),
        (errno.EACCES, ErrorCode.PERMISSION),
        (errno.EPERM, ErrorCode.PERMISSION),
        (errno.EMFILE, ErrorCode.TOOBIG),
        (errno.ENFILE, ErrorCode.TOOBIG),
        (errno.EAGAIN, ErrorCode.AGAIN),
        (errno.ENOSYS, ErrorCode.NOSUPPORT),
        (errno.EOPNOTSUPP, ErrorCode.NOSUPPORT),
        (errno.EXDEV, ErrorCode.SYSTEM),
        (None, ErrorCode.SYSTEM),
    ],
)
def test_spec_6_10_errno_mapping(number: int | None, code: ErrorCode) -> None:
    assert code_for_errno(number) is code


@pytest.mark.skipif(not hasattr(errno, "ETIME"), reason="no ETIME here")
def test_spec_6_10_etime_is_timeout() -> None:
    assert code_for_errno(errno.ETIME) is ErrorCode.TIMEOUT


def test_spec_6_10_epoll_eperm_is_nosupport_with_the_errno() -> None:
    with (
        iopoll.Context(Backend.EPOLL) as ctx,
        open(__file__, "rb") as regular,
        pytest.raises(iopoll.FailedHandleAddError) as caught,
    ):
        ctx.add(regular, Event.READ)
    assert caught.value.code is ErrorCode.NOSUPPORT
    assert caught.value.errno == errno.EPERM
    assert isinstance(caught.value, OSError)


def test_decode_table_holds_every_pattern_of_its_bits_and_no_other() -> None:
    table = decode_table([(1, Event.READ), (4, Event.WRITE), (0, Event.PRIORITY)])
    assert table == {
        0: Event(0),
        1: Event.READ,
        4: Event.WRITE,
        5: Event.READ | Event.WRITE,
    }
    assert type(table) is dict  # a plain dict: wait()'s lookup is specialised for it
    # A bit it does not name (POLLNVAL, say) is missing, so wait() leaves its fast path.
    assert 2 not in table and 7 not in table
    # The general path leaves foreign bits out instead of failing.
    assert decode_bits(table, 7) == Event.READ | Event.WRITE
    assert decode_bits(table, 2) == Event(0)


def _cpu_seconds(during: float, action: object) -> float:
    start = time.process_time()
    deadline = time.monotonic() + during
    while time.monotonic() < deadline:
        action()  # type: ignore[operator]
    return time.process_time() - start


def test_stale_epoll_registration_is_rebuilt_away_and_never_spins() -> None:
    """A closed fd kept open by a dup leaves an epoll entry nothing can delete (SPEC 6.8).

    With data pending on the dup, a plain epoll would report it on every wait forever; the
    Context must notice once, rebuild, and then block like an idle context.
    """
    a, b = socket.socketpair()
    keeper = os.dup(b.fileno())
    try:
        with iopoll.Context(Backend.EPOLL) as ctx:
            watcher = ctx.add(b, Event.READ)
            other_a, other_b = socket.socketpair()
            kept = ctx.add(other_b, Event.READ, data="kept")
            b.close()
            a.send(b"pending on the dup")
            assert ctx.wait(0) == []
            assert not watcher.is_active()
            started = time.monotonic()
            assert ctx.wait(0.3) == []
            assert time.monotonic() - started >= 0.25  # it blocked: the stale entry is gone
            other_a.send(b"x")
            assert ctx.wait(1) == [kept]
            other_a.close()
            other_b.close()
    finally:
        os.close(keeper)
        a.close()


def test_reused_fd_number_with_a_stale_dup_reports_only_its_own_data() -> None:
    a, b = socket.socketpair()
    keeper = os.dup(b.fileno())
    number = b.fileno()
    try:
        with iopoll.Context(Backend.EPOLL) as ctx:
            ctx.add(b, Event.READ)
            b.close()
            a.send(b"old data, readable through the dup")
            c, d = socket.socketpair()
            try:
                if number not in (c.fileno(), d.fileno()):
                    pytest.skip("the fd number was not reused")
                fresh = c if c.fileno() == number else d
                peer = d if fresh is c else c
                watcher = ctx.add(fresh, Event.READ, data="fresh")
                assert ctx.wait(0) == []
                peer.send(b"new")
                assert ctx.wait(1) == [watcher]
            finally:
                c.close()
                d.close()
    finally:
        os.close(keeper)
        a.close()


@pytest.fixture
def many_fds() -> object:
    with raised_fd_limit(4096):
        yield


@pytest.mark.parametrize("backend", NATIVE, ids=lambda b: b.name)
@pytest.mark.usefixtures("many_fds")
def test_more_than_fd_setsize_fds(backend: Backend) -> None:
    """No 1024-fd limit on native backends: 1,500 pairs, the last fd well above 1024."""
    pairs = [socket.socketpair() for _ in range(1500)]
    try:
        with iopoll.Context(backend) as ctx:
            watchers = {ctx.add(b, Event.READ, data=i): i for i, (_, b) in enumerate(pairs)}
            assert len(ctx) == 1500
            assert max(b.fileno() for _, b in pairs) > 2048
            for i in (0, 777, 1499):
                pairs[i][0].send(b"!")
            ready = ctx.wait(1)
            assert sorted(w.data for w in ready) == [0, 777, 1499]
            assert all(w in watchers for w in ready)
    finally:
        for a, b in pairs:
            a.close()
            b.close()


@pytest.mark.parametrize("backend", [Backend.KQUEUE, Backend.EVENT_PORTS, Backend.WSAPOLL])
def test_backends_this_platform_lacks_are_unavailable(backend: Backend) -> None:
    import sys

    if sys.platform != "linux":
        pytest.skip("Linux only")
    assert backend not in Backend.available_backends()
    with pytest.raises(iopoll.BackendUnavailableError, match=backend.name):
        iopoll.Context(backend)


def _fallback_context() -> object:
    import iopoll_polyfill.fallback

    return iopoll_polyfill.fallback.Context()


ALL_CONTEXTS = [
    *(pytest.param(lambda b=b: iopoll.Context(b), id=b.name) for b in Backend.available_backends()),
    pytest.param(_fallback_context, id="fallback"),
]


@pytest.mark.parametrize("make_context", ALL_CONTEXTS)
@pytest.mark.parametrize("timeout", [None, 5, 5.0], ids=["none", "int", "float"])
@pytest.mark.parametrize("touches", [False, True], ids=["alone", "after-an-add"])
def test_pep_475_a_handlers_oserror_leaves_wait_unchanged(
    make_context: object, timeout: object, touches: bool
) -> None:
    """An OSError subclass raised by a signal handler is not the backend's failure, nor a
    sign that the Context replaced its OS object: after an add() by the handler (which
    refreshes the fast path's poll), the pure POLL and SELECT paths and the polyfill took it
    for one and swallowed it, sleeping out the timeout."""
    if isinstance(timeout, float) and make_context is _fallback_context:
        pytest.skip("the polyfill takes whole seconds")
    a, b = socket.socketpair()
    timer = iopoll.TimerHandle(60)

    try:
        with make_context() as ctx:  # type: ignore[operator]

            def deadline(signum: int, frame: object) -> None:
                if touches:
                    ctx.add(timer, Event.TIMER)
                raise TimeoutError("deadline from the handler")

            ctx.add(b, Event.READ)
            raised = pytest.raises(TimeoutError, match="deadline from the handler")
            with alarm(deadline, 0.1), raised as caught:
                ctx.wait(timeout)
            assert type(caught.value) is TimeoutError
            assert caught.value.__cause__ is None
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize("make_context", ALL_CONTEXTS)
@pytest.mark.parametrize("max_events", [None, 8])
@pytest.mark.parametrize("change", ["remove", "close"])
def test_a_handler_that_changes_the_context_during_the_wait(
    make_context: object, max_events: int | None, change: str, pairs: Any
) -> None:
    """A signal handler removes a watcher (or closes the Context) while wait() blocks, then
    that fd and another watched one get data.  The wait reports the other, as epoll does
    (or raises the PollError of a closed Context's wait, SPEC 4).  select() retries with
    the fd lists it was given: SELECT and the polyfill raised KeyError, POLL with
    max_events an AssertionError from a rebuild of the closed Context, and SELECT returned
    [] for a closed one."""
    a, b = pairs()
    c, d = pairs()
    with make_context() as ctx:  # type: ignore[operator]
        removed = ctx.add(b, Event.READ, "removed")
        kept = ctx.add(d, Event.READ, "kept")

        def handler(signum: int, frame: object) -> None:
            if change == "remove":
                removed.remove()
            else:
                ctx.close()
            a.send(b"x")
            c.send(b"y")

        with alarm(handler, 0.1):
            if change == "remove":
                assert ctx.wait(2, 0, max_events) == [kept]
            else:
                with pytest.raises(iopoll.PollError, match=r"^Context is closed$") as caught:
                    ctx.wait(2, 0, max_events)
                assert type(caught.value) is iopoll.PollError
        assert not removed.is_active() and kept.is_active() is (change == "remove")


@pytest.mark.parametrize("make_context", ALL_CONTEXTS)
def test_a_context_a_handler_closes_ends_the_wait_with_poll_error(
    make_context: object, pairs: Any
) -> None:
    """A signal handler closes the Context while wait() blocks and nothing gets ready: the
    wait raises the PollError of a closed Context's wait, C and pure alike.  C's POLL went
    on polling its copy of the array and returned [] at the timeout."""
    _, b = pairs()
    with make_context() as ctx:  # type: ignore[operator]
        ctx.add(b, Event.READ)
        # The fast path's float; the polyfill takes whole seconds and microseconds.
        args = (0.5,) if isinstance(ctx, iopoll.Context) else (0, 500_000)
        with (
            alarm(lambda signum, frame: ctx.close(), 0.05),
            pytest.raises(iopoll.PollError, match=r"^Context is closed$") as caught,
        ):
            ctx.wait(*args)
        assert type(caught.value) is iopoll.PollError


@pytest.mark.skipif(
    not hasattr(os, "fork") or Backend.EPOLL not in Backend.available_backends(),
    reason="needs fork and epoll",
)
def test_a_wait_forked_during_whose_os_object_the_child_lacks_is_permission(pairs: Any) -> None:
    """A signal handler forks while wait() blocks, and the child cannot wait on the OS
    object (a BSD kqueue, an illumos port: fork does not pass them on; here the child's
    copy of the epoll fd is closed).  The retry fails with EBADF: still PERMISSION, the
    code of a Context used in a child, where pure Python said INVALID."""
    a, b = pairs()
    reader, writer = os.pipe()
    parent = os.getpid()
    with iopoll.Context(Backend.EPOLL) as ctx:
        ctx.add(a, Event.READ, "parent's")
        epoll_fd = ctx._mechanism._epoll.fileno()  # type: ignore[attr-defined]

        def fork_now(signum: int, frame: object) -> None:
            if os.fork() == 0:
                os.close(epoll_fd)  # not the child's
            else:
                b.send(b"x")

        outcome = "no answer"
        try:
            with alarm(fork_now, 0.05):
                try:
                    outcome = f"returned {[w.data for w in ctx.wait(2)]}"
                except iopoll.FailedPollOperationError as exc:
                    outcome = f"{type(exc).__name__} {exc.code.name}"
        finally:
            if os.getpid() != parent:  # pragma: no cover - the child
                os.write(writer, outcome.encode())
                os._exit(0)
        os.close(writer)
        with os.fdopen(reader, "rb") as told:
            child = told.read().decode()
        os.wait()
    assert outcome == "returned [\"parent's\"]"
    assert child == "FailedPollWaitError PERMISSION"


class _Buffered:
    """A stream with ``pending()``, as an ``ssl.SSLSocket`` has, that never holds bytes;
    its ``pending()`` raises once when ``fail`` is set."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.fail = False

    def fileno(self) -> int:
        return self.sock.fileno()

    def pending(self) -> int:
        if self.fail:
            self.fail = False
            raise RuntimeError("pending() failed once")
        return 0


def _a_stream_and_a_due_timer(ctx: Any, stream: object, timeout: float = 0.01) -> Any:
    """Watch ``stream`` for READ and a timer of ``timeout`` s, then let the timer fall due."""
    ctx.add(stream, Event.READ, "stream")
    timer = ctx.add(iopoll.TimerHandle(timeout), Event.TIMER, "timer")
    time.sleep(timeout + 0.04)
    return timer


@pytest.mark.parametrize("make_context", ALL_CONTEXTS)
def test_due_timers_outlive_a_wait_that_raised_after_taking_them(
    make_context: object, pairs: Any
) -> None:
    """A wait takes the due timers first (SPEC 10), then asks the streams; when that step
    raises (here a stream's pending(); a signal handler's exception alike), the timers are
    due again for the next wait: no ready watcher is missed (SPEC 4).  They were lost."""
    _, b = pairs()
    stream = _Buffered(b)
    with make_context() as ctx:  # type: ignore[operator]
        timer = _a_stream_and_a_due_timer(ctx, stream)
        stream.fail = True
        with pytest.raises(RuntimeError, match="failed once"):
            ctx.wait(0)
        assert ctx.wait(0) == [timer]
        assert ctx.wait(0) == []


class _Interrupting:
    """A stream whose ``fileno()`` (the Context's probe) runs ``then()`` once and raises
    KeyboardInterrupt, as a SIGINT handler would in the middle of a wait."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.then: Any = None

    def fileno(self) -> int:
        then, self.then = self.then, None
        if then is not None:
            then()
            raise KeyboardInterrupt
        return self.sock.fileno()


@pytest.mark.parametrize("make_context", ALL_CONTEXTS)
@pytest.mark.parametrize("meanwhile", ["nothing", "a-retired-buffered-stream", "a-nested-wait"])
def test_a_timer_given_back_is_due_to_the_next_wait(
    make_context: object, meanwhile: str, pairs: Any
) -> None:
    """The wait that took a due timer is interrupted in a probe: the next wait reports
    the timer at once.  Also when the interrupted wait had turned the fast path back on
    (retiring a closed buffered stream) before it raised, which left the fast path blind
    to the timer given back, and when a wait nested in the handler took timers of its
    own, which made the give-back raise ValueError over the handler's exception."""
    a, b = pairs()
    c, _ = pairs()
    stream = _Interrupting(a)
    with make_context() as ctx:  # type: ignore[operator]
        ctx.add(iopoll.TimerHandle(60), Event.TIMER, "later")
        if meanwhile == "a-retired-buffered-stream":
            ctx.add(_Buffered(c), Event.READ, "buffered")
            c.close()
        timer = _a_stream_and_a_due_timer(ctx, stream)
        b.send(b"x")
        if meanwhile == "a-nested-wait":
            stream.then = lambda: ctx.wait(0, max_events=8)
        else:
            stream.then = lambda: None
        with pytest.raises(KeyboardInterrupt):
            ctx.wait(0)
        a.recv(1)
        started = time.monotonic()
        assert ctx.wait(1) == [timer]
        assert time.monotonic() - started < 0.5


@pytest.mark.parametrize("make_context", ALL_CONTEXTS)
def test_a_timer_a_handler_rearms_is_not_given_back_over_it(
    make_context: object, pairs: Any
) -> None:
    """A handler re-arms the due timer the interrupted wait took (from now: SPEC 10) and
    raises: the timer keeps the handler's deadline, not the old one given back."""
    a, b = pairs()
    stream = _Interrupting(a)
    with make_context() as ctx:  # type: ignore[operator]
        timer = _a_stream_and_a_due_timer(ctx, stream, 2)
        b.send(b"x")
        stream.then = lambda: timer.modify_events(Event.TIMER)
        with pytest.raises(KeyboardInterrupt):
            ctx.wait(0)
        a.recv(1)
        assert ctx.wait(0, 0, 8) == []  # due 2 s after the handler's modify()


def test_select_tells_its_own_ebadf_from_a_handlers() -> None:
    """select() fails with EBADF for a closed fd; a handler raising OSError(EBADF) is not that."""
    a, b = socket.socketpair()

    def handler(signum: int, frame: object) -> None:
        raise OSError(errno.EBADF, "the handler's own EBADF")

    try:
        with iopoll.Context(Backend.SELECT) as ctx, alarm(handler, 0.1):
            ctx.add(b, Event.READ)
            with pytest.raises(OSError, match="the handler's own EBADF"):
                ctx.wait(2.0)
    finally:
        a.close()
        b.close()


def test_rebuild_refused_by_the_os_is_a_failed_add_with_toobig() -> None:
    """Re-adding a reused fd number rebuilds the epoll object; EMFILE then is TOOBIG."""
    a, b = socket.socketpair()
    with iopoll.Context(Backend.EPOLL) as ctx:
        ctx.add(a, Event.READ)
        number = a.fileno()
        a.close()  # without remove()
        c, d = socket.socketpair()
        hog: list[int] = []
        try:
            if c.fileno() != number:
                pytest.skip("the fd number was not reused")
            with lowered_fd_limit(max(64, d.fileno() + 1)):
                try:
                    while True:
                        hog.append(os.open(os.devnull, os.O_RDONLY))
                except OSError:
                    pass
                with pytest.raises(iopoll.FailedHandleAddError) as caught:
                    ctx.add(c, Event.READ)
                assert caught.value.code is ErrorCode.TOOBIG
        finally:
            for fd in hog:
                os.close(fd)
            c.close()
            d.close()
            b.close()


@pytest.mark.parametrize("make_context", ALL_CONTEXTS)
def test_a_timeout_too_long_for_a_float_still_sleeps(make_context: object) -> None:
    """SPEC 4: a positive timeout sleeps it, however large (here: longer than a float says)."""
    import signal
    import threading

    def sleep_it_out() -> None:
        # The thread outlives the test, still sleeping: it must never take a signal that
        # a later test sends to the process for its main thread's signalfd (a thread that
        # leaves SIGUSR1 unblocked would take it, and its default action ends the process).
        if hasattr(signal, "pthread_sigmask"):
            signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
        ctx.wait(10**400)
        finished.set()

    with make_context() as ctx:  # type: ignore[operator]
        finished = threading.Event()
        thread = threading.Thread(target=sleep_it_out, daemon=True)
        thread.start()
        assert not finished.wait(0.3)  # still sleeping, as asked


def test_modify_events_forgets_bits_kept_for_the_old_events() -> None:
    """A one-shot left out by max_events (EPOLL disarmed it in the kernel) keeps its READ
    bits for the next wait; once re-armed for WRITE only, READ must not come back."""
    from iopoll_conformance.support import tls_pair

    tls = [tls_pair() for _ in range(2)]
    plain = [socket.socketpair() for _ in range(2)]
    try:
        with iopoll.Context(Backend.EPOLL) as ctx:
            for i, (client, server) in enumerate(tls):
                ctx.add(client, Event.READ, f"tls{i}")
                server.sendall(b"x" * 100)
                time.sleep(0.05)
                client.setblocking(True)
                client.recv(1)  # 99 bytes stay in the SSL object, the fd is idle
                client.setblocking(False)
                assert client.pending() == 99
            oneshots = [
                ctx.add(a, Event.READ | Event.ONESHOT, f"oneshot{i}")
                for i, (a, _) in enumerate(plain)
            ]
            for _, b in plain:
                b.send(b"!")
            seen = ctx.wait(0, 0, 1)  # the other one-shot is left out, its READ bits kept
            late = next(w for w in oneshots if w not in seen)
            late.handle.stream.recv(10)  # type: ignore[attr-defined]
            late.modify_events(Event.WRITE | Event.ONESHOT)
            reports = {w.data: w.triggered_events for w in ctx.wait(0, 0, 4)}
            assert reports[late.data] == Event.WRITE
    finally:
        for client, server in tls:
            client.close()
            server.close()
        for a, b in plain:
            a.close()
            b.close()
