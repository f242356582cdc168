"""Bad arguments at the edges of what ``add()``, ``wait()``, ``modify*()`` and the handles take.

SPEC 1: a plain argument mistake is Python's own ``TypeError`` or ``ValueError``, and its
message names the argument and what was expected; SPEC 4-5: a failed call leaves nothing
half-done (no watcher registered, the watcher's events and data unchanged).  Each test pins
one boundary that a single-point slip in ``_iopoll_core`` (a comparison turned, a check
dropped, a type test widened) would move without the conformance suite noticing: a mutation
run of ``arguments.py``, ``events.py``, ``errors.py``, ``watcher.py``, ``handles.py`` and
the checks in ``context.py`` found 12 of 49 such slips that every other test let through.
They use real OS objects (socket pairs, pipes) and hold with and without
``IOPOLL_PURE_PYTHON=1``.
"""

from __future__ import annotations

import errno
import math
import os
import pickle
import socket
import time
from collections.abc import Iterator
from datetime import timedelta

import pytest

import iopoll
from iopoll import (
    Backend,
    Context,
    ErrorCode,
    Event,
    FailedHandleAddError,
    FailedWatcherModificationError,
    Handle,
    InvalidHandleError,
    PollError,
    StreamPollHandle,
)
from iopoll_conformance.process import alarm

BACKENDS = Backend.available_backends()


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    """A non-blocking AF_UNIX socket pair, closed after the test."""
    left, right = socket.socketpair()
    left.setblocking(False)
    right.setblocking(False)
    with left, right:
        yield left, right


@pytest.fixture(params=BACKENDS, ids=lambda backend: backend.name)
def ctx(request: pytest.FixtureRequest) -> Iterator[Context]:
    """A context on each backend available here."""
    context = Context(request.param)
    try:
        yield context
    finally:
        context.close()


class FixedFd(Handle):
    """A third-party handle whose ``fileno()`` answers whatever it was given."""

    def __init__(self, answer: object) -> None:
        self.answer = answer

    def fileno(self) -> int:
        return self.answer  # type: ignore[return-value]


class ClosedButNumbered:
    """A stream that says it is closed while its ``fileno()`` still names an open fd
    (a wrapper whose ``close()`` only marks it, say)."""

    closed = True

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def fileno(self) -> int:
        return self.fd


# -- wait(): timeout, microseconds, max_events ------------------------------------------------


def test_wait_takes_the_largest_microseconds(
    ctx: Context, pair: tuple[socket.socket, socket.socket]
) -> None:
    """SPEC 4: ``microseconds`` is 0..999999 inclusive; 999999 is taken, not refused."""
    watcher = ctx.add(pair[0], Event.WRITE)
    assert ctx.wait(0, 999_999) == [watcher]
    with pytest.raises(ValueError, match=r"^microseconds must be between 0 and 999999"):
        ctx.wait(0, 1_000_000)


def test_wait_refuses_a_slightly_negative_timedelta(
    ctx: Context, pair: tuple[socket.socket, socket.socket]
) -> None:
    """SPEC 4: any negative ``timedelta`` timeout is a ``ValueError`` naming ``timeout``,
    however small (one millisecond, one second)."""
    ctx.add(pair[0], Event.WRITE)
    for timeout in (timedelta(milliseconds=-1), timedelta(seconds=-1)):
        with pytest.raises(ValueError, match=r"^timeout must not be negative"):
            ctx.wait(timeout)


def test_wait_refuses_negative_numbers_with_a_ready_watcher(
    ctx: Context, pair: tuple[socket.socket, socket.socket]
) -> None:
    """SPEC 4: a negative timeout is a ``ValueError`` naming ``timeout`` even when a watcher
    is ready (the fast path of ``wait()`` must not take it for "forever")."""
    ctx.add(pair[0], Event.WRITE)
    for timeout in (-1, -2, -0.5, -1.5):
        with pytest.raises(ValueError, match=r"^timeout must not be negative, not -"):
            ctx.wait(timeout)


def test_wait_refuses_a_bool_timeout_with_a_ready_watcher(
    ctx: Context, pair: tuple[socket.socket, socket.socket]
) -> None:
    """SPEC 4: ``True``/``False`` are not seconds: ``TypeError`` naming ``timeout`` and
    ``bool``, also on the fast path (a watcher ready, no other argument)."""
    ctx.add(pair[0], Event.WRITE)
    for timeout in (True, False):
        with pytest.raises(TypeError, match=r"^timeout must be None, a number.*not bool$"):
            ctx.wait(timeout)


def test_wait_takes_a_timeout_too_big_for_a_float(
    ctx: Context, pair: tuple[socket.socket, socket.socket]
) -> None:
    """SPEC 4: huge timeouts never overflow: an ``int`` beyond any float is taken (and a
    ready watcher is returned at once)."""
    watcher = ctx.add(pair[0], Event.WRITE)
    assert ctx.wait(10**400) == [watcher]
    assert ctx.wait(10**400, 5) == [watcher]


class _Late(Exception):
    """Raised by the test's alarm: a ``wait()`` that should have returned at once did not."""


def _raise_late(signum: int, frame: object) -> None:
    raise _Late


def test_wait_inf_on_an_empty_context_returns_at_once(ctx: Context) -> None:
    """SPEC 4: ``math.inf`` is the same as ``None``: with no active watcher, ``wait(math.inf)``
    returns ``[]`` at once (microseconds added or not), it does not sleep for ever."""
    with alarm(_raise_late, 2.0):  # pytest-timeout's timer is put back after
        started = time.monotonic()
        assert ctx.wait(math.inf) == []
        assert ctx.wait(math.inf, 5) == []
        assert time.monotonic() - started < 1.0


def test_wait_max_events_upper_bound(
    ctx: Context, pair: tuple[socket.socket, socket.socket]
) -> None:
    """SPEC 4: ``max_events`` is at most 2**31-1: that is taken, 2**31 is a ``ValueError``
    naming ``max_events`` and the range."""
    watcher = ctx.add(pair[0], Event.WRITE)
    assert ctx.wait(0, max_events=2**31 - 1) == [watcher]
    with pytest.raises(ValueError, match=r"^max_events must be between 1 and 2147483647"):
        ctx.wait(0, max_events=2**31)


# -- add(): events ----------------------------------------------------------------------------


@pytest.mark.parametrize("events", ["", "READ", b"", b"\x01"], ids=repr)
def test_add_refuses_strings_as_events_by_type(
    ctx: Context, pair: tuple[socket.socket, socket.socket], events: object
) -> None:
    """SPEC 4: a ``str`` or ``bytes`` is not an iterable of ``Event``: ``TypeError`` naming
    ``events`` (not "empty", not "contain only"), and nothing is added."""
    with pytest.raises(TypeError, match=r"^events must be an Event or an iterable of Event"):
        ctx.add(pair[0], events)  # type: ignore[arg-type]
    assert len(ctx) == 0


def test_add_refuses_ints_inside_an_iterable_of_events(
    ctx: Context, pair: tuple[socket.socket, socket.socket]
) -> None:
    """SPEC 4: an iterable of events holds ``Event`` values only: ``[1]`` (an int that equals
    ``Event.READ``) is a ``TypeError`` naming ``events`` and ``int``."""
    with pytest.raises(TypeError, match=r"^events must contain only Event values, not int$"):
        ctx.add(pair[0], [Event.WRITE, 1])  # type: ignore[list-item]
    assert len(ctx) == 0


@pytest.mark.parametrize("bit", [1 << 12, 1 << 16, 1 << 20, 1 << 31, 1 << 40], ids=hex)
def test_add_refuses_bits_no_event_has_however_high(
    ctx: Context, pair: tuple[socket.socket, socket.socket], bit: int
) -> None:
    """SPEC 4: events carrying a bit no ``Event`` member has are a ``ValueError`` naming
    ``events`` and the stray bits, whatever their position, and nothing is added."""
    with pytest.raises(ValueError, match=rf"^events must be made of Event flags only.*{bit:#x}"):
        ctx.add(pair[0], Event.READ | Event(bit))
    assert len(ctx) == 0


@pytest.mark.parametrize(
    "extra", [Event.TIMER, Event.NOTIFY, Event.SIGNAL, Event.PROCESS], ids=lambda e: e.name
)
def test_add_refuses_each_non_stream_event_for_a_stream(
    ctx: Context, pair: tuple[socket.socket, socket.socket], extra: Event
) -> None:
    """SPEC 10: each of ``TIMER``, ``NOTIFY``, ``SIGNAL``, ``PROCESS`` is a ``ValueError`` for
    a stream handle, alone or with ``READ``; ``add`` and ``modify`` alike."""
    for events in (extra, Event.READ | extra):
        with pytest.raises(ValueError, match=r"^events must not contain Event\.TIMER"):
            ctx.add(pair[0], events)
    assert len(ctx) == 0
    watcher = ctx.add(pair[0], Event.READ, "kept")
    with pytest.raises(ValueError, match=r"^events must not contain Event\.TIMER"):
        watcher.modify(Event.READ | extra, "changed")
    assert (watcher.watched_events, watcher.data) == (Event.READ, "kept")


def test_a_timer_handle_refuses_edge_triggering(ctx: Context) -> None:
    """SPEC 10: a ``TimerHandle`` is watched for ``Event.TIMER`` (``ONESHOT`` may be added),
    nothing else: ``EDGE_TRIGGERED`` is a ``ValueError`` naming the handle."""
    timer = iopoll.TimerHandle(1.0)
    with pytest.raises(ValueError, match=r"^events must be Event\.TIMER for a TimerHandle"):
        ctx.add(timer, Event.TIMER | Event.EDGE_TRIGGERED)
    assert len(ctx) == 0
    watcher = ctx.add(timer, Event.TIMER | Event.ONESHOT)
    with pytest.raises(ValueError, match=r"^events must be Event\.TIMER for a TimerHandle"):
        watcher.modify_events(Event.TIMER | Event.EDGE_TRIGGERED)
    assert watcher.watched_events == Event.TIMER | Event.ONESHOT


# -- add(): handles ---------------------------------------------------------------------------


def test_add_refuses_an_int_fd_beyond_any_fd(ctx: Context) -> None:
    """SPEC 4: an ``int`` fd no OS call takes (above 2**31-1) is refused as the backend
    refuses a bad fd: ``FailedHandleAddError`` with ``code == INVALID``, never an
    ``OverflowError``; nothing is added."""
    for fd in (2**31, 2**63):
        with pytest.raises(FailedHandleAddError, match=r"beyond any file descriptor") as caught:
            ctx.add(fd, Event.READ)
        assert caught.value.code is ErrorCode.INVALID
    assert len(ctx) == 0


@pytest.mark.parametrize("handle", [Event.WRITE, Event.READ | Event.WRITE, True], ids=repr)
def test_add_refuses_an_event_or_a_bool_for_the_handle(ctx: Context, handle: object) -> None:
    """An ``Event`` where the handle goes (the arguments swapped: ``add(Event.WRITE, s)``)
    is a ``TypeError`` naming ``handle``, as a ``bool`` is, not the fd its value names
    (``Event.WRITE`` is 2, stderr's); ``StreamPollHandle`` refuses it as ``stream``."""
    kind = type(handle).__name__
    with pytest.raises(TypeError, match=rf"^handle must be a Handle, .*, not {kind}$"):
        ctx.add(handle, Event.WRITE)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=rf"^stream must be .*, not {kind}$"):
        StreamPollHandle(handle)  # type: ignore[arg-type]
    assert len(ctx) == 0


@pytest.mark.skipif(Backend.EPOLL not in BACKENDS, reason="EPOLL checks the fd when it is added")
def test_epoll_add_of_a_closed_fd_is_invalid() -> None:
    """SPEC 6.10: EBADF maps to ``ErrorCode.INVALID``: adding an ``int`` fd that is not open
    on ``EPOLL`` is a ``FailedHandleAddError`` with ``code == INVALID`` and the errno kept;
    nothing is added; and the error survives ``pickle`` with its class, code, errno and
    message."""
    with Context(Backend.EPOLL) as ctx:
        read_fd, write_fd = os.pipe()  # made after the epoll fd, which cannot reuse them
        os.close(read_fd)
        os.close(write_fd)
        with pytest.raises(FailedHandleAddError, match=r"Failed to add handle: .*EPOLL") as caught:
            ctx.add(read_fd, Event.READ)
        error = caught.value
        assert (error.code, error.errno) == (ErrorCode.INVALID, errno.EBADF)
        assert len(ctx) == 0
    # It crosses a process boundary (multiprocessing pickles it) whole.
    copied = pickle.loads(pickle.dumps(error))
    assert type(copied) is FailedHandleAddError
    assert (copied.code, copied.errno, copied.strerror) == (error.code, error.errno, error.strerror)
    assert str(copied) == str(error)


def test_add_refuses_a_handle_whose_fileno_is_beyond_any_fd(ctx: Context) -> None:
    """SPEC 4: a third-party ``Handle`` whose ``fileno()`` is 2**31 (one past a C int) is a
    ``FailedHandleAddError`` (``INVALID``), not an ``OverflowError`` from the OS call."""
    with pytest.raises(FailedHandleAddError, match=r"fd 2147483648 is beyond") as caught:
        ctx.add(FixedFd(2**31), Event.READ)
    assert caught.value.code is ErrorCode.INVALID
    assert len(ctx) == 0


@pytest.mark.parametrize("answer", ["3", 3.0, None], ids=repr)
def test_add_refuses_a_handle_whose_fileno_is_not_an_int(
    ctx: Context, pair: tuple[socket.socket, socket.socket], answer: object
) -> None:
    """SPEC 4: a ``Handle`` whose ``fileno()`` answers something other than an ``int`` has no
    usable fd: ``InvalidHandleError`` saying what ``fileno()`` returned."""
    if isinstance(answer, (str, float)):  # an fd number that is open, in another type
        answer = type(answer)(pair[0].fileno())
    with pytest.raises(InvalidHandleError, match=r"fileno\(\) returned"):
        ctx.add(FixedFd(answer), Event.READ)
    assert len(ctx) == 0


def test_add_refuses_a_fileno_raising_value_error(ctx: Context) -> None:
    """SPEC 4: a handle whose ``fileno()`` raises (``ValueError``, as a closed file's does) is
    an ``InvalidHandleError`` naming what ``fileno()`` raised."""

    class Raising(Handle):
        def fileno(self) -> int:
            raise ValueError("I/O operation on closed file")

    with pytest.raises(InvalidHandleError, match=r"fileno\(\) raised ValueError"):
        ctx.add(Raising(), Event.READ)
    assert len(ctx) == 0


def test_add_refuses_a_stream_that_says_it_is_closed(
    ctx: Context, pair: tuple[socket.socket, socket.socket]
) -> None:
    """SPEC 3-4: a stream whose ``closed`` is true is invalid even while its ``fileno()``
    still names an open fd: ``is_valid()`` is false, and ``add`` raises
    ``InvalidHandleError``, for the stream itself, a ``StreamPollHandle`` and a weak handle."""
    stream = ClosedButNumbered(pair[0].fileno())
    assert StreamPollHandle(stream).is_valid() is False
    weak = iopoll.StreamPollWeakHandle.create(stream)
    assert weak.is_valid() is False
    for handle in (stream, StreamPollHandle(stream), weak):
        with pytest.raises(InvalidHandleError, match=r"stream is closed"):
            ctx.add(handle, Event.READ)
    assert len(ctx) == 0


def test_is_valid_is_false_for_a_fileno_that_is_not_an_int(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    """SPEC 3: ``is_valid()`` answers ``False`` (never raises) for a stream whose ``fileno()``
    returns something that is not an ``int``: on a ``StreamPollHandle``, a
    ``StreamPollWeakHandle`` and a third party's ``WeakHandle`` subclass."""

    class StrFileno:
        def fileno(self) -> str:
            return str(pair[0].fileno())

    class WeakStrFileno(iopoll.WeakHandle):
        def fileno(self) -> int:
            stream = self._object()
            assert stream is not None
            return stream.fileno()  # type: ignore[no-any-return]

    stream = StrFileno()
    assert StreamPollHandle(stream).is_valid() is False  # type: ignore[arg-type]
    assert iopoll.StreamPollWeakHandle.create(stream).is_valid() is False  # type: ignore[arg-type]
    assert WeakStrFileno(stream).is_valid() is False


def test_is_valid_is_false_once_a_socket_is_closed() -> None:
    """SPEC 3: a closed socket's ``fileno()`` is -1: its handle is no longer valid."""
    sock, other = socket.socketpair()
    other.close()
    handle = StreamPollHandle(sock)
    weak = iopoll.StreamPollWeakHandle.create(sock)
    sock.close()
    assert (handle.is_valid(), weak.is_valid()) == (False, False)


def test_weak_handle_refuses_an_object_without_fileno() -> None:
    """SPEC 10: ``StreamPollWeakHandle.create`` takes an object with ``fileno()``; a weakly
    referenceable object without one is a ``TypeError`` naming ``stream`` and ``fileno()``."""

    class Plain:
        pass

    with pytest.raises(TypeError, match=r"^stream must be an object with fileno\(\), not Plain$"):
        iopoll.StreamPollWeakHandle.create(Plain())  # type: ignore[arg-type]


def test_stream_poll_handle_init_cannot_rebind() -> None:
    """SPEC 3: a handle's stream cannot change: a second ``__init__`` is a ``TypeError``, and
    the handle keeps its first stream."""
    read_fd, write_fd = os.pipe()
    try:
        handle = StreamPollHandle(read_fd)
        with pytest.raises(TypeError, match=r"cannot be called twice"):
            handle.__init__(write_fd)  # type: ignore[misc]
        assert (handle.stream, handle.fileno()) == (read_fd, read_fd)
    finally:
        os.close(read_fd)
        os.close(write_fd)


# -- Watcher: has_triggered, modify ------------------------------------------------------------


def test_has_triggered_of_no_event_and_of_modes_is_false(
    ctx: Context, pair: tuple[socket.socket, socket.socket]
) -> None:
    """SPEC 5: ``has_triggered`` asks about readiness; ``Event(0)`` and the modes alone
    (``ONESHOT``, ``EDGE_TRIGGERED``), never reported, are never "triggered"."""
    watcher = ctx.add(pair[0], Event.WRITE)
    assert ctx.wait(0) == [watcher]
    assert watcher.has_triggered(Event.WRITE) is True
    for event in (Event(0), Event.ONESHOT, Event.EDGE_TRIGGERED):
        assert watcher.has_triggered(event) is False


def test_has_triggered_ignores_both_modes_alike(
    ctx: Context, pair: tuple[socket.socket, socket.socket]
) -> None:
    """``has_triggered`` ignores the registration modes in what it is asked, ``ONESHOT`` and
    ``EDGE_TRIGGERED`` alike: ``has_triggered(watcher.watched_events)`` answers whether the
    readiness it watches was reported (SPEC 5 says "every flag"; modes are never reported)."""
    watcher = ctx.add(pair[0], Event.WRITE | Event.ONESHOT)
    assert ctx.wait(0) == [watcher]
    assert watcher.has_triggered(Event.WRITE | Event.ONESHOT) is True
    assert watcher.has_triggered(Event.WRITE | Event.EDGE_TRIGGERED) is True
    assert watcher.has_triggered(Event.WRITE | Event.ONESHOT | Event.EDGE_TRIGGERED) is True
    assert watcher.has_triggered(Event.READ | Event.EDGE_TRIGGERED) is False


def test_has_triggered_wants_every_flag(
    ctx: Context, pair: tuple[socket.socket, socket.socket]
) -> None:
    """SPEC 5: ``has_triggered(event)`` is true only when every flag of ``event`` was
    reported: ``WRITE | READ`` is false for a watcher only writable."""
    watcher = ctx.add(pair[0], Event.READ | Event.WRITE)
    assert ctx.wait(0) == [watcher]
    assert watcher.triggered_events == Event.WRITE
    assert watcher.has_triggered(Event.WRITE | Event.READ) is False
    assert watcher.has_triggered(Event.READ) is False


def test_has_triggered_refuses_an_int(
    ctx: Context, pair: tuple[socket.socket, socket.socket]
) -> None:
    """SPEC 1: ``has_triggered`` takes an ``Event``; an ``int`` (or ``bool``) is a
    ``TypeError`` naming ``event``."""
    watcher = ctx.add(pair[0], Event.WRITE)
    ctx.wait(0)
    for value in (2, True):
        with pytest.raises(TypeError, match=r"^event must be an Event, not (int|bool)$"):
            watcher.has_triggered(value)  # type: ignore[arg-type]


def test_modify_data_of_an_inactive_watcher_is_refused(
    ctx: Context, pair: tuple[socket.socket, socket.socket]
) -> None:
    """SPEC 5: ``modify_data`` on a removed watcher raises ``InactiveWatcherError`` (saying
    inactive) and leaves the data as it was."""
    watcher = ctx.add(pair[0], Event.READ, "before")
    watcher.remove()
    with pytest.raises(iopoll.InactiveWatcherError, match=r"inactive"):
        watcher.modify_data("after")
    assert watcher.data == "before"


@pytest.mark.skipif(Backend.POLL not in BACKENDS, reason="needs POLL, which has no edge mode")
def test_modify_refused_by_the_backend_changes_nothing() -> None:
    """SPEC 5: ``modify(events, data)`` whose events the backend refuses (``POLL`` has no
    edge triggering) raises ``FailedWatcherModificationError`` (``NOSUPPORT``) and leaves
    both the watched events and the data unchanged; the watcher still works."""
    read_fd, write_fd = os.pipe()
    try:
        with Context(Backend.POLL) as ctx:
            watcher = ctx.add(read_fd, Event.READ, "kept")
            with pytest.raises(FailedWatcherModificationError, match=r"EDGE_TRIGGERED") as err:
                watcher.modify(Event.READ | Event.EDGE_TRIGGERED, "changed")
            assert err.value.code is ErrorCode.NOSUPPORT
            assert (watcher.watched_events, watcher.data) == (Event.READ, "kept")
            os.write(write_fd, b"x")
            assert ctx.wait(0) == [watcher]
    finally:
        os.close(read_fd)
        os.close(write_fd)


def test_modify_with_bad_events_changes_nothing(
    ctx: Context, pair: tuple[socket.socket, socket.socket]
) -> None:
    """SPEC 5: ``modify`` with events that are not events (empty, wrong type) raises the plain
    error and leaves events and data unchanged."""
    watcher = ctx.add(pair[0], Event.WRITE, "kept")
    with pytest.raises(ValueError, match=r"^events must not be empty$"):
        watcher.modify(Event(0), "changed")
    with pytest.raises(TypeError, match=r"^events must be an Event"):
        watcher.modify(2, "changed")  # type: ignore[arg-type]
    assert (watcher.watched_events, watcher.data) == (Event.WRITE, "kept")


def test_removed_watcher_is_inactive_and_its_fd_free(
    ctx: Context, pair: tuple[socket.socket, socket.socket]
) -> None:
    """SPEC 5: after ``remove()`` the watcher is inactive, a second ``remove()`` raises
    ``InactiveWatcherError``, and the fd can be added again."""
    watcher = ctx.add(pair[0], Event.WRITE)
    watcher.remove()
    assert watcher.is_active() is False
    with pytest.raises(iopoll.InactiveWatcherError, match=r"inactive"):
        watcher.remove()
    assert ctx.add(pair[0], Event.WRITE).is_active() is True


def test_watcher_cannot_be_made_directly() -> None:
    """SPEC 5: ``Watcher(...)`` is a ``TypeError``."""
    with pytest.raises(TypeError, match=r"Context\.add"):
        iopoll.Watcher()


# -- Context(): backend, on_watcher_removed ----------------------------------------------------


def test_context_refuses_the_polyfills_backend() -> None:
    """SPEC 4: ``iopoll.Context`` takes ``iopoll.Backend`` only: the polyfill's (same name,
    other class) is a ``TypeError`` saying whose each is."""
    import iopoll_polyfill.fallback

    with pytest.raises(TypeError, match=r"^backend must be a Backend of iopoll, not one of"):
        Context(iopoll_polyfill.fallback.Backend.SELECT)  # type: ignore[arg-type]


def test_on_watcher_removed_refuses_a_callback_that_cannot_be_called(ctx: Context) -> None:
    """``on_watcher_removed`` takes a callable or ``None``: anything else is a ``TypeError``
    naming ``callback``, raised at once (not at the next ``wait()``)."""
    with pytest.raises(TypeError, match=r"^callback must be callable or None, not int$"):
        ctx.on_watcher_removed(3)  # type: ignore[arg-type]


def test_select_refuses_priority(pair: tuple[socket.socket, socket.socket]) -> None:
    """SPEC 2: ``SELECT`` has no priority: ``Event.PRIORITY`` is refused with
    ``FailedHandleAddError`` (``NOSUPPORT``), naming it, and nothing is added."""
    with Context(Backend.SELECT) as ctx:
        with pytest.raises(FailedHandleAddError, match=r"PRIORITY") as caught:
            ctx.add(pair[0], Event.READ | Event.PRIORITY)
        assert caught.value.code is ErrorCode.NOSUPPORT
        assert len(ctx) == 0


def test_errors_are_poll_errors() -> None:
    """SPEC 1: every iopoll error is a ``PollError``; the refusals of the OS are also
    ``OSError``; the others are not plain-argument errors."""
    assert issubclass(iopoll.FailedPollOperationError, OSError)
    for error in (
        iopoll.BackendUnavailableError,
        iopoll.InactiveWatcherError,
        iopoll.HandleAlreadyWatchedError,
        InvalidHandleError,
    ):
        assert issubclass(error, PollError)
        assert not issubclass(error, (TypeError, ValueError, OSError))
