"""Bad arguments at the edges of what ``add()``, ``modify*()``, the handles and ``Context``
take, where iopoll decides what SPEC leaves open or words its own messages.

SPEC 1: a plain argument mistake is Python's own ``TypeError`` or ``ValueError``, and its
message names the argument and what was expected; SPEC 4-5: a failed call leaves nothing
half-done (no watcher registered, the watcher's events and data unchanged).  A mutation
run of ``arguments.py``, ``events.py``, ``errors.py``, ``watcher.py``, ``handles.py`` and
the checks in ``context.py`` found 12 of 49 single-point slips (a comparison turned, a
check dropped, a type test widened) that every other test let through.  The cases SPEC
states outright are rules of the conformance suite now (``BoundaryRules``, in
``iopoll_conformance/groups/boundaries.py``), run against every implementation; the cases
here are iopoll's own: fds beyond a C ``int``, a swapped ``add(Event, stream)``, what
``has_triggered`` makes of the modes, exact messages.  They use real OS objects (socket
pairs, pipes) and hold with and without ``IOPOLL_PURE_PYTHON=1``.
"""

from __future__ import annotations

import errno
import os
import pickle
import socket
import tracemalloc
from collections.abc import Iterator

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


# -- add(): events ----------------------------------------------------------------------------


@pytest.mark.parametrize("bit", [1 << 12, 1 << 16, 1 << 20, 1 << 31, 1 << 40], ids=hex)
def test_add_refuses_bits_no_event_has_however_high(
    ctx: Context, pair: tuple[socket.socket, socket.socket], bit: int
) -> None:
    """SPEC 4: events carrying a bit no ``Event`` member has are a ``ValueError`` naming
    ``events`` and the stray bits, whatever their position, and nothing is added."""
    with pytest.raises(ValueError, match=rf"^events must be made of Event flags only.*{bit:#x}"):
        ctx.add(pair[0], Event.READ | Event(bit))
    assert len(ctx) == 0


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


@pytest.mark.skipif(Backend.POLL not in BACKENDS, reason="POLL takes any fd number")
def test_poll_takes_a_high_fd_number_no_file_has_without_memory_to_match() -> None:
    """``POLL`` takes an ``int`` fd as it is, open or not (the wait retires it, SPEC 6.9):
    a high number no open file has costs no memory in proportion to it.  The Context's
    fd-indexed table grew to every number it was given, 8 bytes each: 128 MiB for 2**24,
    16 GiB for 2**31-1.  The next wait reports the watcher, retired."""
    with Context(Backend.POLL) as ctx:
        tracemalloc.start()
        try:
            watcher = ctx.add(2**24, Event.READ)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert peak < 1 << 20
        assert ctx.wait(0) == [watcher]
        assert watcher.is_active() is False
        assert len(ctx) == 0


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
