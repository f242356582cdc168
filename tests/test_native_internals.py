"""Native-backend behaviour the conformance suite cannot see through the public API alone:
errno mapping, the stale-registration rebuild, fds beyond FD_SETSIZE, the decode cache."""

from __future__ import annotations

import errno
import os
import resource
import socket
import time

import pytest

import iopoll
from _iopoll_core.errors import code_for_errno
from _iopoll_core.events import DecodeTable
from iopoll import Backend, ErrorCode, Event

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


def test_decode_table_builds_each_pattern_once() -> None:
    table = DecodeTable([(1, Event.READ), (4, Event.WRITE)])
    first = table[5]
    assert first == Event.READ | Event.WRITE
    assert table[5] is first
    assert table[2] == Event(0)


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
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = 4096
    if hard != resource.RLIM_INFINITY and hard < wanted:
        pytest.skip(f"RLIMIT_NOFILE hard limit {hard} is below {wanted}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, wanted), hard))
    yield
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


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
