"""Streams closed before their I/O callbacks were cancelled (SPEC 9.1).

Such a callback can never run again; a loop kept alive by it would sleep for ever (epoll
forgets a closed fd without a word).  The drivers cancel it and report it to the error
path as ``InvalidCallbackError`` (``code == STREAM_CLOSED``, ``callback_id`` its id): to the
error handler, or, without one, as the ``UncaughtError`` that ends ``run()``.  They learn of
it at registration, when the fd number is reused, from the Context (``IoPollDriver``:
``on_watcher_removed``), or by checking their streams after an idle slice of a second.
Every test runs on real sockets and files, under a timeout, with generous time bounds.
"""

from __future__ import annotations

import itertools
import os
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from iopoll import Backend
from iopoll.loop import (
    Driver,
    InvalidCallbackError,
    IoPollDriver,
    SelectorsDriver,
    TracingDriver,
    UncaughtError,
    _abstract_driver,
)

DRIVERS = [
    pytest.param(lambda b=backend: IoPollDriver(b), id=f"iopoll-{backend.name.lower()}")
    for backend in Backend.available_backends()
] + [
    pytest.param(SelectorsDriver, id="selectors"),
    pytest.param(lambda: TracingDriver(IoPollDriver()), id="tracing"),
]

# Generous: a loss found by the idle check takes about one slice.
BOUND = 5.0
# The tests wait in shorter slices than IDLE_SLICE (1 s), to run faster; the ones that ask
# for ``real_slice`` keep it.
SHORT_SLICE = 0.25

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(autouse=True)
def short_slice(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_abstract_driver, "IDLE_SLICE", SHORT_SLICE)


@pytest.fixture
def real_slice(monkeypatch: pytest.MonkeyPatch) -> float:
    monkeypatch.setattr(_abstract_driver, "IDLE_SLICE", 1.0)
    return 1.0


@pytest.fixture(params=DRIVERS)
def loop(request: pytest.FixtureRequest) -> Iterator[Driver]:
    driver: Driver = request.param()
    yield driver
    for callback_id in driver.get_identifiers():
        driver.cancel(callback_id)
    driver.close()  # type: ignore[attr-defined]


def iopoll_only(loop: Driver) -> None:
    if not isinstance(loop, (IoPollDriver, TracingDriver)):
        pytest.skip("what only IoPollDriver's Context can tell")


def nothing(cid: str, stream: Any) -> None:
    pass


def collecting(loop: Driver) -> list[Exception]:
    errors: list[Exception] = []
    loop.set_error_handler(errors.append)
    return errors


def assert_stream_closed(error: BaseException, callback_id: str) -> None:
    assert isinstance(error, InvalidCallbackError), repr(error)
    assert error.callback_id == callback_id
    assert error.code == InvalidCallbackError.STREAM_CLOSED
    assert repr(callback_id) in str(error) and "closed" in str(error)


def run_timed(loop: Driver) -> float:
    started = time.monotonic()
    loop.run()
    return time.monotonic() - started


# -- run() ends instead of sleeping for ever --------------------------------------------------


def test_only_callback_on_a_closed_stream_ends_run_as_uncaught_error(
    loop: Driver, real_slice: float
) -> None:
    reader, writer = socket.socketpair()
    try:
        callback_id = loop.on_readable(reader, nothing)
        loop.delay(0.05, lambda cid: reader.close())  # closed, never cancelled
        started = time.monotonic()
        with pytest.raises(UncaughtError) as caught:
            loop.run()
        assert time.monotonic() - started < BOUND
        assert_stream_closed(caught.value.__cause__, callback_id)  # type: ignore[arg-type]
        assert callback_id not in loop.get_identifiers()
    finally:
        reader.close()
        writer.close()


def test_the_error_handler_gets_invalid_callback_error_and_run_returns(loop: Driver) -> None:
    reader, writer = socket.socketpair()
    try:
        errors = collecting(loop)
        callback_id = loop.on_readable(reader, nothing)
        loop.delay(0.05, lambda cid: reader.close())
        assert run_timed(loop) < BOUND
        assert len(errors) == 1
        assert_stream_closed(errors[0], callback_id)
        assert loop.get_identifiers() == []
    finally:
        reader.close()
        writer.close()


def test_closed_from_another_thread_while_run_blocks(loop: Driver, real_slice: float) -> None:
    reader, writer = socket.socketpair()
    try:
        errors = collecting(loop)
        callback_id = loop.on_readable(reader, nothing)
        timer = threading.Timer(0.2, reader.close)
        timer.start()
        elapsed = run_timed(loop)
        timer.join()
        assert elapsed < BOUND
        assert len(errors) == 1
        assert_stream_closed(errors[0], callback_id)
    finally:
        reader.close()
        writer.close()


def test_every_callback_of_the_stream_is_reported(loop: Driver) -> None:
    reader, writer = socket.socketpair()
    other, peer = socket.socketpair()
    try:
        errors = collecting(loop)
        ids = [loop.on_readable(reader, nothing), loop.on_readable(reader, nothing)]
        kept = loop.on_readable(other, nothing)  # a live stream's callback stays
        loop.delay(0.05, lambda cid: reader.close())

        def check(cid: str) -> None:
            if len(errors) == 2:
                loop.cancel(kept)
                loop.cancel(cid)

        loop.repeat(0.1, check)
        bound = loop.delay(BOUND, lambda cid: loop.stop())  # if nothing is reported
        loop.unreference(bound)
        loop.run()
        assert sorted(error.callback_id for error in errors) == ids  # type: ignore[attr-defined]
        for error in errors:
            assert_stream_closed(error, error.callback_id)  # type: ignore[attr-defined]
        assert kept not in loop.get_identifiers()  # cancelled by check(), not by the driver
    finally:
        for sock in (reader, writer, other, peer):
            sock.close()


def test_a_long_timer_does_not_delay_the_report(loop: Driver) -> None:
    # With a timer an hour away, the wait still comes back once a slice to check.
    reader, writer = socket.socketpair()
    try:
        errors = collecting(loop)
        callback_id = loop.on_readable(reader, nothing)
        far = loop.delay(3600, lambda cid: None)
        loop.delay(0.05, lambda cid: reader.close())
        loop.repeat(0.1, lambda cid: loop.stop() if errors else None)
        started = time.monotonic()
        loop.run()
        assert time.monotonic() - started < BOUND
        assert len(errors) == 1
        assert_stream_closed(errors[0], callback_id)
        assert far in loop.get_identifiers()
    finally:
        reader.close()
        writer.close()


# -- when it is found -----------------------------------------------------------------------


def test_closed_before_the_first_tick(loop: Driver) -> None:
    reader, writer = socket.socketpair()
    errors = collecting(loop)
    callback_id = loop.on_readable(reader, nothing)
    reader.close()  # before the tick that activates it
    try:
        assert run_timed(loop) < 0.5  # found at activation: no idle slice needed
        assert len(errors) == 1
        assert_stream_closed(errors[0], callback_id)
    finally:
        writer.close()


def test_disabled_while_closed_reported_when_enabled(loop: Driver) -> None:
    reader, writer = socket.socketpair()
    try:
        errors = collecting(loop)
        callback_id = loop.disable(loop.on_readable(reader, nothing))
        reader.close()
        loop.delay(0.05, lambda cid: loop.enable(callback_id) and None)
        assert run_timed(loop) < BOUND
        assert len(errors) == 1
        assert_stream_closed(errors[0], callback_id)
    finally:
        writer.close()


def test_fd_number_reused_reports_the_old_callback(loop: Driver) -> None:
    reader, writer = socket.socketpair()
    errors = collecting(loop)
    stale = loop.on_readable(reader, nothing)
    loop.delay(0, lambda cid: loop.stop())
    loop.run()  # registered now
    fd = reader.fileno()
    reader.close()
    new_reader, new_writer = socket.socketpair()
    try:
        if new_reader.fileno() != fd:
            new_reader, new_writer = new_writer, new_reader
        if new_reader.fileno() != fd:
            pytest.skip("the closed stream's fd number went elsewhere")
        got: list[bytes] = []

        def receive(cid: str, stream: socket.socket) -> None:
            got.append(stream.recv(100))
            loop.cancel(cid)

        loop.on_readable(new_reader, receive)
        new_writer.send(b"new")
        assert run_timed(loop) < BOUND
        assert got == [b"new"]
        assert len(errors) == 1
        assert_stream_closed(errors[0], stale)
    finally:
        for sock in (writer, new_reader, new_writer):
            sock.close()


def _pair_on(fd: int) -> tuple[socket.socket, socket.socket]:
    """A socketpair whose first socket has the fd number ``fd`` (skips if neither does)."""
    first, second = socket.socketpair()
    if first.fileno() != fd:
        first, second = second, first
    if first.fileno() != fd:
        first.close()
        second.close()
        pytest.skip("the closed stream's fd number went elsewhere")
    return first, second


def test_a_closed_streams_callback_enabled_again_never_joins_the_new_stream(
    loop: Driver,
) -> None:
    """Disabled, its stream closed, its fd number taken by a stream with a callback of its
    own: enabling it reports it, and it never runs for the new stream (it was added to the
    new stream's registration, and ran with the closed socket at every report)."""
    reader, writer = socket.socketpair()
    errors = collecting(loop)
    calls: list[str] = []
    stale = loop.disable(loop.on_readable(reader, lambda cid, s: calls.append(cid)))
    fd = reader.fileno()
    reader.close()
    new_reader, new_writer = _pair_on(fd)
    try:
        got: list[bytes] = []

        def receive(cid: str, stream: socket.socket) -> None:
            got.append(stream.recv(100))
            if len(got) == 2:
                loop.cancel(cid)
            else:
                new_writer.send(b"again")

        loop.on_readable(new_reader, receive)
        loop.delay(0, lambda cid: loop.stop())
        loop.run()  # the new stream's registration is made
        loop.enable(stale)
        new_writer.send(b"new")
        assert run_timed(loop) < BOUND
        assert got == [b"new", b"again"] and calls == []
        assert len(errors) == 1
        assert_stream_closed(errors[0], stale)
    finally:
        for sock in (writer, new_reader, new_writer):
            sock.close()


def test_closed_before_activation_never_watches_the_streams_successor(loop: Driver) -> None:
    """Registered, then its stream closed before the tick and the fd number taken by a stream
    the loop does not watch: activation reports it instead of registering the number (the
    selectors drivers watched the new stream, and ran the callback with the closed socket
    at every report)."""
    reader, writer = socket.socketpair()
    errors = collecting(loop)
    calls: list[str] = []
    stale = loop.on_readable(reader, lambda cid, s: calls.append(cid))
    fd = reader.fileno()
    reader.close()
    new_reader, new_writer = _pair_on(fd)
    try:
        new_writer.send(b"not yours")
        loop.delay(0.05, lambda cid: None)
        assert run_timed(loop) < BOUND
        assert calls == []
        assert len(errors) == 1
        assert_stream_closed(errors[0], stale)
        assert new_reader.recv(100) == b"not yours"
    finally:
        for sock in (writer, new_reader, new_writer):
            sock.close()


def test_closed_then_cancelled_is_no_error(loop: Driver) -> None:
    reader, writer = socket.socketpair()
    try:
        errors = collecting(loop)
        callback_id = loop.on_readable(reader, nothing)

        def close_and_cancel(cid: str) -> None:
            reader.close()
            loop.cancel(callback_id)

        loop.delay(0.05, close_and_cancel)
        loop.delay(3 * SHORT_SLICE, lambda cid: None)  # past an idle check
        loop.run()
        assert errors == []
    finally:
        reader.close()
        writer.close()


def test_closed_then_disabled_is_no_error_until_enabled(loop: Driver) -> None:
    reader, writer = socket.socketpair()
    try:
        errors = collecting(loop)
        callback_id = loop.on_readable(reader, nothing)

        def close_and_disable(cid: str) -> None:
            reader.close()
            loop.disable(callback_id)

        loop.delay(0.05, close_and_disable)
        loop.delay(3 * SHORT_SLICE, lambda cid: None)
        loop.run()
        assert errors == []
        assert loop.is_enabled(callback_id) is False
    finally:
        reader.close()
        writer.close()


def test_an_unreferenced_callback_is_reported_too(loop: Driver) -> None:
    reader, writer = socket.socketpair()
    try:
        errors = collecting(loop)
        callback_id = loop.unreference(loop.on_readable(reader, nothing))
        loop.delay(0.05, lambda cid: reader.close())
        loop.repeat(0.1, lambda cid: loop.stop() if errors else None)
        loop.delay(BOUND, lambda cid: loop.stop())
        loop.run()
        assert len(errors) == 1
        assert_stream_closed(errors[0], callback_id)
    finally:
        reader.close()
        writer.close()


def test_an_error_handler_that_raises_ends_run(loop: Driver) -> None:
    reader, writer = socket.socketpair()
    try:
        seen: list[Exception] = []

        def handler(error: Exception) -> None:
            seen.append(error)
            raise RuntimeError("handler")

        loop.set_error_handler(handler)
        callback_id = loop.on_readable(reader, nothing)
        loop.delay(0.05, lambda cid: reader.close())
        with pytest.raises(UncaughtError) as caught:
            run_timed(loop)
        assert isinstance(caught.value.__cause__, RuntimeError)
        assert len(seen) == 1
        assert_stream_closed(seen[0], callback_id)
    finally:
        reader.close()
        writer.close()


# -- IoPollDriver: what its Context tells ---------------------------------------------------


def test_context_length_tells_at_once(loop: Driver) -> None:
    # len(ctx) retires the closed stream's watcher; on_watcher_removed reports it at the
    # next wait(), with no idle slice in between.
    iopoll_only(loop)
    reader, writer = socket.socketpair()
    try:
        errors = collecting(loop)
        callback_id = loop.on_readable(reader, nothing)
        marks: list[float] = []

        def close(cid: str) -> None:
            reader.close()
            len(loop.get_handle())
            marks.append(time.monotonic())

        loop.delay(0.05, close)
        loop.run()
        assert time.monotonic() - marks[0] < 0.5
        assert len(errors) == 1
        assert_stream_closed(errors[0], callback_id)
    finally:
        reader.close()
        writer.close()


def test_closed_with_a_dup_kept_open(loop: Driver) -> None:
    # epoll keeps reporting the fd's file through the dup; the Context sees the stream is
    # closed, never reports it, and tells the driver: the callback never runs again.
    iopoll_only(loop)
    reader, writer = socket.socketpair()
    keeper = os.dup(reader.fileno())
    try:
        errors = collecting(loop)
        calls: list[str] = []
        callback_id = loop.on_readable(reader, lambda cid, s: calls.append(cid))

        def close(cid: str) -> None:
            writer.send(b"unread")  # readable through the dup, for ever
            reader.close()

        loop.delay(0.05, close)
        assert run_timed(loop) < BOUND
        assert calls == []
        assert len(errors) == 1
        assert_stream_closed(errors[0], callback_id)
    finally:
        os.close(keeper)
        writer.close()


def test_the_fallback_context_tells_too(tmp_path: Any) -> None:
    # A regular file on epoll goes to the fallback Context(Backend.POLL), always ready.
    if not Backend.EPOLL.is_available():
        pytest.skip("needs epoll (its refusal of regular files)")
    loop = IoPollDriver(Backend.EPOLL)
    path = tmp_path / "file.txt"
    path.write_text("data")
    stream = open(path, "rb")  # noqa: SIM115 (closed by its callback, and below)
    try:
        errors = collecting(loop)
        calls: list[str] = []

        def close_once(cid: str, s: Any) -> None:
            calls.append(cid)
            s.close()  # closed inside its own callback, never cancelled

        callback_id = loop.on_readable(stream, close_once)
        assert run_timed(loop) < BOUND
        assert loop._fallback is not None
        assert calls == [callback_id]
        assert len(errors) == 1
        assert_stream_closed(errors[0], callback_id)
        assert loop._fallback_count == 0 and loop._registered == 0
    finally:
        stream.close()
        loop.close()


def test_idle_check_is_rare(monkeypatch: pytest.MonkeyPatch, real_slice: float) -> None:
    # The O(fds) check runs only after a blocking wait that returned nothing, at most once
    # per slice; a busy loop never runs it.
    loop = IoPollDriver()
    pairs = [socket.socketpair() for _ in range(20)]
    checks: list[float] = []
    original = loop._check_streams

    def counting() -> None:
        checks.append(time.monotonic())
        original()

    monkeypatch.setattr(loop, "_check_streams", counting)
    try:
        for a, _ in pairs:
            loop.on_readable(a, nothing)
        busy = loop.repeat(0, lambda cid: None)
        loop.delay(0.3, lambda cid: loop.cancel(busy))
        loop.delay(2.6, lambda cid: loop.stop())  # idle from 0.3 s on: checks about 1 s apart
        loop.run()
        assert 1 <= len(checks) <= 4
        assert all(b - a >= 0.99 for a, b in itertools.pairwise(checks))
    finally:
        loop.close()
        for a, b in pairs:
            a.close()
            b.close()


def _a_number_not_open() -> int:
    fd = 900
    while True:
        try:
            os.fstat(fd)
        except OSError:
            return fd
        fd += 1


def test_an_fd_number_not_open_is_reported_as_closed(loop: Driver) -> None:
    # A bare int that names no open file: epoll refuses it with EBADF, and it went to the
    # fallback poller; POLL and SELECT took it.  poll() and select() then reported it ready
    # on every tick, and the callback ran with a stream that was never there.
    errors = collecting(loop)
    called: list[object] = []
    callback_id = loop.on_readable(_a_number_not_open(), lambda cid, stream: called.append(stream))
    assert run_timed(loop) < 0.5
    assert called == []
    assert len(errors) == 1
    assert_stream_closed(errors[0], callback_id)
