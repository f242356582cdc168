"""The ``WSAPOLL`` backend (``src/iopoll/_wsapoll.py``), run here without Windows.

Three ways in, from the narrowest:

* the mechanism's data on both platforms: the entry structures, the flag tables, the
  Winsock error mapping;
* the mechanism in this process, on libc ``poll()`` (``libc()``, what
  ``IOPOLL_WSAPOLL_LIBC=1`` gives) and on ``winsock()`` with a stand-in for ``ws2_32``
  (``FakeWinsock``: Windows' structure and flag values in, the host's ``poll()`` out), put
  into ``Backend.WSAPOLL`` for the test: sockets only, the array rebuild, timeouts, signals,
  errors;
* the whole conformance suite and CPython's selector tests on ``Backend.WSAPOLL`` in a
  subprocess with ``IOPOLL_WSAPOLL_LIBC=1`` (slow).
"""

from __future__ import annotations

import ctypes
import dataclasses
import errno
import os
import re
import select
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import iopoll
from fake_winsock import FakeWinsock
from iopoll import Backend, ErrorCode, Event
from iopoll import _wsapoll as wsapoll
from iopoll._wsapoll import POLLFD, WSAPOLLFD, WsaPollMechanism, libc, winsock
from iopoll_conformance.process import alarm

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="runs Windows' code on POSIX")

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent

# -- the data of both platforms ----------------------------------------------------------


def test_entry_structures() -> None:
    # WSAPOLLFD: a pointer-sized SOCKET then two SHORTs, padded to the SOCKET's alignment.
    pointer = ctypes.sizeof(ctypes.c_void_p)
    assert ctypes.sizeof(WSAPOLLFD) == 2 * pointer
    assert (WSAPOLLFD.events.offset, WSAPOLLFD.revents.offset) == (pointer, pointer + 2)
    # struct pollfd: int fd; short events; short revents.
    assert ctypes.sizeof(POLLFD) == 8
    assert (POLLFD.events.offset, POLLFD.revents.offset) == (4, 6)


def test_windows_flag_values() -> None:
    flags = winsock().flags
    assert (wsapoll.POLLRDNORM, wsapoll.POLLRDBAND, wsapoll.POLLPRI) == (0x100, 0x200, 0x400)
    assert (wsapoll.POLLWRNORM, wsapoll.POLLWRBAND) == (0x10, 0x20)
    assert (flags.read, flags.write) == (0x0300, 0x0010)
    assert (flags.error, flags.hangup, flags.invalid) == (0x1, 0x2, 0x4)


def test_host_flag_values() -> None:
    flags = libc().flags
    assert (flags.read, flags.write) == (select.POLLIN, select.POLLOUT)
    assert (flags.error, flags.hangup, flags.invalid) == (
        select.POLLERR,
        select.POLLHUP,
        select.POLLNVAL,
    )


EVERY_STREAM_EVENT = [
    Event(bits)
    for bits in range(1, 1 << 8)
    if not Event(bits) & (Event.TIMER | Event.NOTIFY | Event.SIGNAL | Event.PROCESS)
]


def test_windows_encoding_never_asks_what_wsapoll_refuses() -> None:
    encode = winsock().flags.encoder()
    assert encode(Event.READ) == wsapoll.POLLIN
    assert encode(Event.WRITE) == wsapoll.POLLOUT
    assert encode(Event.READ | Event.WRITE | Event.ONESHOT) == wsapoll.POLLIN | wsapoll.POLLOUT
    for events in [*EVERY_STREAM_EVENT, Event.PRIORITY | Event.READ_HANGUP]:
        assert not encode(events) & (wsapoll.POLLPRI | wsapoll.POLLWRBAND), events


def test_host_encoding() -> None:
    encode = libc().flags.encoder()
    assert encode(Event.READ | Event.WRITE) == select.POLLIN | select.POLLOUT
    assert encode(Event.READ_HANGUP | Event.PRIORITY | Event.ERROR | Event.HANGUP) == 0


@pytest.mark.parametrize(
    ("revents", "expected"),
    [
        (wsapoll.POLLRDNORM, Event.READ),
        (wsapoll.POLLRDBAND, Event.READ),
        (wsapoll.POLLRDNORM | wsapoll.POLLRDBAND, Event.READ),
        (wsapoll.POLLWRNORM, Event.WRITE),
        (wsapoll.POLLERR, Event.ERROR),
        (wsapoll.POLLHUP, Event.HANGUP),
        (wsapoll.POLLHUP | wsapoll.POLLRDNORM, Event.READ | Event.HANGUP),
        # A failed non-blocking connect() from Windows 10 2004 on.
        (
            wsapoll.POLLHUP | wsapoll.POLLERR | wsapoll.POLLWRNORM,
            Event.HANGUP | Event.ERROR | Event.WRITE,
        ),
    ],
)
def test_windows_decoding(revents: int, expected: Event) -> None:
    mechanism = wsapoll.mechanism_for(winsock())
    assert mechanism.decode[revents] == expected
    assert mechanism.invalid_fd_bit == wsapoll.POLLNVAL
    assert wsapoll.POLLNVAL not in mechanism.decode  # the Context's POLLNVAL path


def test_host_decoding() -> None:
    mechanism = wsapoll.mechanism_for(libc())
    assert mechanism.decode[select.POLLIN | select.POLLHUP] == Event.READ | Event.HANGUP
    assert mechanism.decode[select.POLLOUT | select.POLLERR] == Event.WRITE | Event.ERROR
    assert mechanism.invalid_fd_bit == select.POLLNVAL
    assert not mechanism.supports_edge_triggering
    assert not mechanism.supports_priority
    assert not mechanism.supports_read_hangup
    assert mechanism.errno_codes == {errno.ENOTSOCK: ErrorCode.NOSUPPORT}


# What each Winsock error is: SPEC 6.10's errno table through the Winsock counterpart of each
# errno, and SYSTEM for the rest, as for an errno the table does not list.
WINSOCK_ERRORS = {
    wsapoll.WSAENOBUFS: ErrorCode.NOMEM,
    wsapoll.WSAEINVAL: ErrorCode.INVALID,
    wsapoll.WSAEBADF: ErrorCode.INVALID,
    wsapoll.WSAETIMEDOUT: ErrorCode.TIMEOUT,
    wsapoll.WSAEINTR: ErrorCode.INTERRUPTED,
    wsapoll.WSAEACCES: ErrorCode.PERMISSION,
    wsapoll.WSAEMFILE: ErrorCode.TOOBIG,
    wsapoll.WSAEWOULDBLOCK: ErrorCode.AGAIN,
    wsapoll.WSAEOPNOTSUPP: ErrorCode.NOSUPPORT,
    wsapoll.WSAENOTSOCK: ErrorCode.NOSUPPORT,  # not a socket: the backend's own refusal
    wsapoll.WSAEFAULT: ErrorCode.SYSTEM,
    wsapoll.WSAENETDOWN: ErrorCode.SYSTEM,
    wsapoll.WSANOTINITIALISED: ErrorCode.SYSTEM,
}


@pytest.mark.parametrize(("number", "code"), list(WINSOCK_ERRORS.items()))
def test_winsock_error_codes(number: int, code: ErrorCode) -> None:
    # An unlisted number is left to the generic mapping, which makes it SYSTEM.
    assert wsapoll.mechanism_for(winsock()).errno_codes.get(number, ErrorCode.SYSTEM) is code


# -- the mechanism in this process ----------------------------------------------------------


@pytest.fixture
def fake() -> FakeWinsock:
    return FakeWinsock()


@pytest.fixture(params=["libc", "winsock"])
def platform_name(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


def _on_fake(fake: FakeWinsock) -> type[WsaPollMechanism]:
    """The mechanism on Windows' data, calling ``fake`` instead of ``ws2_32``."""
    calls = fake.calls_object()
    return wsapoll.mechanism_for(dataclasses.replace(winsock(), bind=lambda: calls))


@pytest.fixture
def mechanism_class(platform_name: str, fake: FakeWinsock) -> type[WsaPollMechanism]:
    """The mechanism on libc poll(), or on Windows' data with ``FakeWinsock``."""
    return wsapoll.mechanism_for(libc()) if platform_name == "libc" else _on_fake(fake)


@pytest.fixture
def wsapoll_backend(
    monkeypatch: pytest.MonkeyPatch, mechanism_class: type[WsaPollMechanism]
) -> Backend:
    """``Backend.WSAPOLL``, available in this process on ``mechanism_class``."""
    monkeypatch.setitem(Backend._mechanisms, "WSAPOLL", mechanism_class)
    return Backend.WSAPOLL


@pytest.fixture
def ctx(wsapoll_backend: Backend) -> Iterator[iopoll.Context]:
    context = iopoll.Context(wsapoll_backend)
    yield context
    context.close()


@pytest.fixture
def fake_ctx(monkeypatch: pytest.MonkeyPatch, fake: FakeWinsock) -> Iterator[iopoll.Context]:
    """A Context on ``Backend.WSAPOLL`` with Windows' data and ``FakeWinsock``."""
    monkeypatch.setitem(Backend._mechanisms, "WSAPOLL", _on_fake(fake))
    context = iopoll.Context(Backend.WSAPOLL)
    yield context
    context.close()


@pytest.fixture
def libc_ctx(monkeypatch: pytest.MonkeyPatch) -> Iterator[iopoll.Context]:
    """A Context on ``Backend.WSAPOLL`` over libc poll()."""
    monkeypatch.setitem(Backend._mechanisms, "WSAPOLL", wsapoll.mechanism_for(libc()))
    context = iopoll.Context(Backend.WSAPOLL)
    yield context
    context.close()


def _report(ctx: iopoll.Context, timeout: float = 0.0) -> dict[Any, Event]:
    return {w.data: w.triggered_events for w in ctx.wait(timeout)}


def test_backend_capabilities(wsapoll_backend: Backend) -> None:
    assert wsapoll_backend.is_available()
    assert not wsapoll_backend.supports_edge_triggering()
    assert not wsapoll_backend.supports_priority()
    assert not wsapoll_backend.supports_read_hangup()
    assert Backend.AUTO.resolve() is not Backend.WSAPOLL  # POSIX: AUTO is EPOLL or POLL


def test_readiness_hangup_and_invalid(
    ctx: iopoll.Context, pairs: Callable[[], tuple[socket.socket, socket.socket]]
) -> None:
    a, b = pairs()
    c, d = pairs()
    fd = a.detach()  # an int handle: SPEC 6.9, closed behind its back below
    ctx.add(fd, Event.READ, "a")
    ctx.add(c, Event.READ | Event.WRITE, "c")
    assert _report(ctx) == {"c": Event.WRITE}
    b.send(b"x")
    assert _report(ctx, 1.0) == {"a": Event.READ, "c": Event.WRITE}
    d.close()
    assert _report(ctx) == {"a": Event.READ, "c": Event.READ | Event.WRITE | Event.HANGUP}
    os.close(fd)  # POLLNVAL, reported once as ERROR
    assert _report(ctx)["a"] == Event.ERROR
    assert "a" not in _report(ctx)


@pytest.mark.parametrize("kind", ["pipe read end", "pipe write end", "file", "devnull"])
def test_sockets_only(
    ctx: iopoll.Context,
    pairs: Callable[[], tuple[socket.socket, socket.socket]],
    tmp_path: Path,
    kind: str,
) -> None:
    read_fd, write_fd = os.pipe()
    streams = {
        "pipe read end": os.fdopen(read_fd, "rb", buffering=0),
        "pipe write end": os.fdopen(write_fd, "wb", buffering=0),
        "file": open(tmp_path / "f", "wb"),  # noqa: SIM115 - closed below
        "devnull": open(os.devnull, "rb"),  # noqa: SIM115 - closed below
    }
    try:
        for handle in (streams[kind], streams[kind].fileno()):
            with pytest.raises(iopoll.FailedHandleAddError) as caught:
                ctx.add(handle, Event.READ)
            assert caught.value.code is ErrorCode.NOSUPPORT
            assert caught.value.errno in (errno.ENOTSOCK, wsapoll.WSAENOTSOCK)
            assert "sockets only" in str(caught.value)
        assert len(ctx) == 0
        a, _ = pairs()
        ctx.add(a, Event.WRITE, "socket")
        assert _report(ctx) == {"socket": Event.WRITE}
    finally:
        for stream in streams.values():
            stream.close()


def test_every_socket_kind_is_accepted(ctx: iopoll.Context) -> None:
    kinds = [
        socket.socket(socket.AF_INET, socket.SOCK_STREAM),
        socket.socket(socket.AF_INET, socket.SOCK_DGRAM),
        socket.create_server(("127.0.0.1", 0)),
        *socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM),
    ]
    try:
        for number, sock in enumerate(kinds):
            ctx.add(sock, Event.READ, number)
        assert len(ctx) == len(kinds)
    finally:
        for sock in kinds:
            sock.close()


def test_a_closed_fd_is_invalid(ctx: iopoll.Context) -> None:
    sock = socket.socket()
    fd = sock.detach()
    os.close(fd)
    with pytest.raises(iopoll.FailedHandleAddError) as caught:
        ctx.add(fd, Event.READ)
    assert caught.value.code is ErrorCode.INVALID
    assert caught.value.errno in (errno.EBADF, wsapoll.WSAEBADF)  # libc, FakeWinsock


def _entries(mechanism: WsaPollMechanism) -> dict[int, int]:
    array: Any = mechanism._array
    return {array[i].fd: array[i].events for i in range(len(mechanism._fds))}


def test_array_is_rebuilt_only_when_the_fds_change(
    monkeypatch: pytest.MonkeyPatch,
    mechanism_class: type[WsaPollMechanism],
    pairs: Callable[[], tuple[socket.socket, socket.socket]],
) -> None:
    builds: list[int] = []
    original = WsaPollMechanism._build

    def counting_build(self: WsaPollMechanism) -> None:
        builds.append(len(self._masks))
        original(self)

    monkeypatch.setattr(WsaPollMechanism, "_build", counting_build)
    encode = mechanism_class.platform.flags.encoder()
    mechanism = mechanism_class()
    (a, _), (c, _) = pairs(), pairs()
    mechanism.register(a.fileno(), Event.READ)
    mechanism.register(c.fileno(), Event.WRITE)
    assert mechanism.poll(0.0, -1) == [(c.fileno(), encode(Event.WRITE))]
    assert mechanism.poll(0.0, -1) == [(c.fileno(), encode(Event.WRITE))]
    assert builds == [2]
    # A change of events is written into the entry: no rebuild.
    mechanism.modify(c.fileno(), Event.READ)
    assert _entries(mechanism)[c.fileno()] == encode(Event.READ)
    assert mechanism.poll(0.0, -1) == []
    assert builds == [2]
    # Disarming takes the fd out of the array; re-arming puts it back: one rebuild each.
    mechanism.disarm(a.fileno())
    assert mechanism.poll(0.0, -1) == []
    assert _entries(mechanism) == {c.fileno(): encode(Event.READ)}
    mechanism.modify(a.fileno(), Event.READ | Event.WRITE)
    assert mechanism.poll(0.0, -1) == [(a.fileno(), encode(Event.WRITE))]
    assert _entries(mechanism) == {
        c.fileno(): encode(Event.READ),
        a.fileno(): encode(Event.READ | Event.WRITE),
    }
    assert mechanism.unregister(c.fileno()) is True
    assert mechanism.unregister(c.fileno()) is True  # already gone: nothing to do
    mechanism.poll(0.0, -1)
    assert builds == [2, 1, 2, 1]
    mechanism.close()


def test_an_empty_array_is_never_polled(
    fake_ctx: iopoll.Context,
    fake: FakeWinsock,
    pairs: Callable[[], tuple[socket.socket, socket.socket]],
) -> None:
    a, _ = pairs()
    fake_ctx.add(a, Event.WRITE | Event.ONESHOT, "a")
    assert _report(fake_ctx) == {"a": Event.WRITE}
    calls = len(fake.calls)
    started = time.monotonic()
    assert fake_ctx.wait(0.1) == []  # every watcher a fired one-shot: a sleep, no OS call
    assert time.monotonic() - started >= 0.1
    assert len(fake.calls) == calls


@pytest.mark.parametrize(
    ("seconds", "milliseconds"),
    [
        (0.0, 0),
        (0.0001, 1),  # rounded up: never shorter than asked
        (0.0015, 2),
        (1.5, 1500),
        (-1.0, -1),
        (WsaPollMechanism.max_timeout, 2_147_483_000),
        (1e12, 2**31 - 1),
    ],
)
def test_timeout_in_milliseconds(
    fake: FakeWinsock,
    pairs: Callable[[], tuple[socket.socket, socket.socket]],
    seconds: float,
    milliseconds: int,
) -> None:
    mechanism = _on_fake(fake)()
    a, _ = pairs()
    mechanism.register(a.fileno(), Event.WRITE)  # ready: no call waits
    mechanism.poll(seconds, -1)
    assert fake.calls == [(1, milliseconds)]


class _Stop(Exception):
    pass


def test_wait_forever_on_fired_one_shots_only_blocks_until_a_handler_raises(
    ctx: iopoll.Context, pairs: Callable[[], tuple[socket.socket, socket.socket]]
) -> None:
    """SPEC 6.12: a context holding only fired one-shots blocks in ``wait(None)`` until a
    signal handler raises.  WSAPoll refuses an empty array (WSAEINVAL), so the mechanism
    sleeps instead of calling it, and that sleep must not end by itself."""
    a, _ = pairs()
    ctx.add(a, Event.WRITE | Event.ONESHOT, "a")
    assert [w.data for w in ctx.wait(0)] == ["a"]

    def stop(signum: int, frame: object) -> None:
        raise _Stop

    started = time.monotonic()
    with alarm(stop, 0.3), pytest.raises(_Stop):
        ctx.wait(None)
    assert time.monotonic() - started >= 0.25


def test_huge_timeout_is_cut_to_max_timeout(
    monkeypatch: pytest.MonkeyPatch,
    fake_ctx: iopoll.Context,
    fake: FakeWinsock,
    pairs: Callable[[], tuple[socket.socket, socket.socket]],
) -> None:
    a, _ = pairs()
    fake_ctx.add(a, Event.READ)

    def stop(array: Any, nfds: int, timeout_ms: int) -> int:
        fake.calls.append((nfds, timeout_ms))
        raise _Stop

    monkeypatch.setattr(fake, "poll", stop)
    for timeout in (10**9, 1e300):
        with pytest.raises(_Stop):
            fake_ctx.wait(timeout)
    assert fake.calls == [(1, 2_147_483_000)] * 2


def test_interrupted_call_is_retried_with_the_time_left(
    monkeypatch: pytest.MonkeyPatch,
    fake: FakeWinsock,
    pairs: Callable[[], tuple[socket.socket, socket.socket]],
) -> None:
    mechanism = _on_fake(fake)()
    checked: list[bool] = []
    monkeypatch.setattr(wsapoll, "_check_signals", lambda: checked.append(True))
    a, _ = pairs()
    mechanism.register(a.fileno(), Event.READ)
    fake.script = [wsapoll.WSAEINTR, wsapoll.WSAEINTR]
    started = time.monotonic()
    assert mechanism.poll(0.2, -1) == []
    assert time.monotonic() - started >= 0.2
    assert checked == [True, True]
    assert [nfds for nfds, _ in fake.calls] == [1, 1, 1]
    timeouts = [ms for _, ms in fake.calls]
    assert timeouts[0] == 200 and 0 <= timeouts[2] <= timeouts[1] <= 200


def test_signal_handler_that_returns_or_raises(
    ctx: iopoll.Context, pairs: Callable[[], tuple[socket.socket, socket.socket]]
) -> None:
    a, _ = pairs()
    ctx.add(a, Event.READ)
    seen: list[int] = []
    with alarm(lambda signum, frame: seen.append(signum), 0.05):
        started = time.monotonic()
        assert ctx.wait(0.3) == []
        assert time.monotonic() - started >= 0.3
    assert len(seen) == 1

    def fail(signum: int, frame: object) -> None:
        raise ZeroDivisionError("from the handler")

    with alarm(fail, 0.05), pytest.raises(ZeroDivisionError, match="from the handler"):
        ctx.wait(5.0)


@pytest.mark.parametrize(
    "number",
    [
        wsapoll.WSAENOBUFS,
        wsapoll.WSAEINVAL,
        wsapoll.WSAEFAULT,
        wsapoll.WSAENETDOWN,
        wsapoll.WSANOTINITIALISED,
    ],
)
def test_winsock_errors_through_the_context(
    fake_ctx: iopoll.Context,
    fake: FakeWinsock,
    pairs: Callable[[], tuple[socket.socket, socket.socket]],
    number: int,
) -> None:
    code = WINSOCK_ERRORS[number]
    a, _ = pairs()
    fake_ctx.add(a, Event.WRITE, "a")
    fake.script = [number]
    with pytest.raises(iopoll.FailedPollWaitError) as caught:
        fake_ctx.wait(0)
    assert caught.value.code is code
    assert caught.value.errno == number
    assert f"Winsock error {number}" in str(caught.value)
    assert _report(fake_ctx) == {"a": Event.WRITE}  # the next wait works


def test_an_array_without_one_valid_socket_is_not_a_failed_wait(
    fake_ctx: iopoll.Context,
    fake: FakeWinsock,
    pairs: Callable[[], tuple[socket.socket, socket.socket]],
) -> None:
    # WSAPoll fails the whole call with WSAEINVAL when no socket in the array is valid
    # (FakeWinsock does too), where poll(2) reports each POLLNVAL: SPEC 6.8 and 6.9 still
    # hold.  The only stream closed through its object is dropped quietly...
    _, b = pairs()
    fake_ctx.add(b, Event.READ, "stream")
    b.close()
    assert _report(fake_ctx) == {} and len(fake_ctx) == 0
    # ... an int fd closed behind the Context's back is ERROR once...
    c, d = pairs()
    fd = os.dup(d.fileno())
    fake_ctx.add(fd, Event.READ, "int")
    os.close(fd)
    assert _report(fake_ctx) == {"int": Event.ERROR}
    assert _report(fake_ctx) == {} and len(fake_ctx) == 0
    # ... and WSAEINVAL while a socket is still valid remains a failed wait.
    fake_ctx.add(c, Event.WRITE, "c")

    def refused(*args: object) -> int:
        fake.error = wsapoll.WSAEINVAL
        return -1

    fake.poll = refused  # type: ignore[method-assign]
    with pytest.raises(iopoll.FailedPollWaitError) as caught:
        fake_ctx.wait(0)
    assert caught.value.errno == wsapoll.WSAEINVAL


def test_host_errors_through_the_context(
    monkeypatch: pytest.MonkeyPatch,
    libc_ctx: iopoll.Context,
    pairs: Callable[[], tuple[socket.socket, socket.socket]],
) -> None:
    a, _ = pairs()
    libc_ctx.add(a, Event.WRITE, "a")
    mechanism: Any = libc_ctx._mechanism
    real = mechanism._calls

    def failing_poll(array: Any, nfds: int, timeout_ms: int) -> int:
        ctypes.set_errno(errno.ENOMEM)
        return -1

    monkeypatch.setattr(mechanism, "_calls", dataclasses.replace(real, poll=failing_poll))
    with pytest.raises(iopoll.FailedPollWaitError) as caught:
        libc_ctx.wait(0)
    assert (caught.value.code, caught.value.errno) == (ErrorCode.NOMEM, errno.ENOMEM)
    monkeypatch.setattr(mechanism, "_calls", real)
    assert _report(libc_ctx) == {"a": Event.WRITE}


# -- the switch, and the suites in a subprocess ---------------------------------------------


def _run(args: list[str], switch: str | None = "1", timeout: float = 600) -> str:
    env = dict(os.environ, CI="1")
    env.pop("IOPOLL_WSAPOLL_LIBC", None)
    env.pop("PYTEST_ADDOPTS", None)
    if switch is not None:
        env["IOPOLL_WSAPOLL_LIBC"] = switch
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(TESTS), env.get("PYTHONPATH")]))
    result = subprocess.run(
        [sys.executable, *args],
        cwd=TESTS,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    return output


@pytest.mark.parametrize(("switch", "available"), [("1", True), ("0", False), (None, False)])
def test_switch(switch: str | None, available: bool) -> None:
    code = (
        "import iopoll; B = iopoll.Backend; print(B.WSAPOLL.is_available(), B.AUTO.resolve().name)"
    )
    output = _run(["-c", code], switch).split()
    assert output == [str(available), Backend.AUTO.resolve().name]


@pytest.mark.slow
def test_conformance_suite_on_wsapoll() -> None:
    """The whole suite, strict extras included, on WSAPOLL's code over libc poll() (about
    20 s; the pure-Python wait() on it passes too, with ``pure_iopoll`` for ``iopoll``)."""
    output = _run(
        [
            "-m",
            "iopoll_conformance",
            "iopoll",
            "--backend",
            "WSAPOLL",
            "-q",
            "-p",
            "no:cacheprovider",
            "--strict-extras",
        ]
    )
    verdict = [line for line in output.splitlines() if line.startswith(("PASS:", "FAIL:"))]
    assert len(verdict) == 1 and verdict[0].startswith("PASS: "), output


@pytest.mark.slow
def test_cpython_selector_tests_on_wsapoll() -> None:
    output = _run(
        [
            "-m",
            "pytest",
            str(TESTS / "test_aio_selectors_cpython.py"),
            "-q",
            "-p",
            "no:cacheprovider",
            "-k",
            "Wsapoll",
        ]
    )
    assert " passed" in output and "deselected" in output, output


@pytest.mark.slow
def test_project_backend_tests_on_wsapoll() -> None:
    """The project's tests parametrized on every backend, on WSAPOLL's code: the hidden
    bookkeeping (retire, rebuild), the fast path (C and pure Python), the native internals
    and fd exhaustion."""
    output = _run(
        [
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-k",
            "WSAPOLL",
            # Holds Linux to having no WSAPoll: the switch gives it one.
            "--deselect",
            "tests/test_native_internals.py::test_backends_this_platform_lacks_are_unavailable"
            "[Backend.WSAPOLL]",
            "test_hidden_bookkeeping.py",
            "test_fast_path.py",
            "test_native_internals.py",
            "test_fd_exhaustion.py",
        ]
    )
    passed = re.search(r"(\d+) passed", output)
    assert passed is not None and int(passed.group(1)) >= 60, output
    assert " failed" not in output, output
