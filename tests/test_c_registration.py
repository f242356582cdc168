"""``add()`` and ``remove()`` in C against the pure-Python methods, call by call.

``iopoll._speedups`` puts a C ``Context.add`` and ``Watcher.remove`` on ``iopoll``'s classes
(src/iopoll/_registration.c).  They run the usual call (a socket or an int fd, watched for a
stream's events) themselves and hand every other call to the Python method.  Each case
below runs the same calls on ``iopoll`` and on ``pure_iopoll`` (the engine's classes, which
the C code never touches) and asserts the outcome; with the C code in use, the transcripts of
the two must also be equal: the watcher's every slot, the context's records, the exception's
class, message, code, errno and cause.
"""

from __future__ import annotations

import os
import re
import socket
import tempfile
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

import pytest

import iopoll
import iopoll._native
import pure_iopoll
from _iopoll_core.errors import Refusal
from _iopoll_core.watcher import Watcher as EngineWatcher
from iopoll import (
    Backend,
    ErrorCode,
    Event,
    FailedHandleAddError,
    HandleAlreadyWatchedError,
    InactiveWatcherError,
    InvalidHandleError,
    PollError,
    StreamPollHandle,
    TimerHandle,
)

ACCELERATED = iopoll._native.ACCELERATED
MODULES = [
    pytest.param(iopoll, id="iopoll"),
    pytest.param(pure_iopoll, id="pure_iopoll"),
]
BACKENDS = [
    pytest.param(backend, id=backend.name)
    for backend in (Backend.EPOLL, Backend.POLL, Backend.KQUEUE, Backend.SELECT)
    if backend.is_available()
]
READ, WRITE, ONESHOT = Event.READ, Event.WRITE, Event.ONESHOT
# Every event set add() takes for a stream on any backend without a check: the C path's.
PLAIN_EVENTS = [Event(bits) for bits in range(1, 64)]

Ctx = Any  # an iopoll.Context or a pure_iopoll.Context
Scenario = Callable[[ModuleType, Backend], list[Any]]


@pytest.fixture
def streams() -> Iterator[Callable[[], socket.socket]]:
    """A maker of connected sockets (their peers kept open), all closed after the test."""
    made: list[socket.socket] = []

    def make() -> socket.socket:
        a, b = socket.socketpair()
        made.extend((a, b))
        return a

    yield make
    for sock in made:
        sock.close()


class FdNames:
    """fd numbers named by the order a transcript first meets them, so that two runs of the
    same calls compare equal even if the OS handed one of them other numbers (another
    thread's file opened in between).  Each run names its sockets as it makes them."""

    def __init__(self) -> None:
        self.names: dict[int, int] = {}

    def __call__(self, fd: int) -> int:
        return self.names.setdefault(fd, len(self.names))

    def made(self, *socks: socket.socket) -> None:
        for sock in socks:
            self(sock.fileno())

    def text(self, message: str) -> str:
        return re.sub(r"\bfd (\d+)", lambda m: f"fd #{self(int(m.group(1)))}", message)


def slots_of(watcher: Any, names: FdNames) -> dict[str, Any]:
    """Every slot of a watcher, comparable across the two modules: the context and handle
    by what they stand for, the probe by what it answers, fds by their names."""
    found: dict[str, Any] = {}
    for cls in type(watcher).__mro__:
        for name in getattr(cls, "__slots__", ()):
            if name.startswith("__") or name in found:
                continue
            value = getattr(watcher, name)
            if name == "_context":
                value = type(value()).__mro__[-3].__name__  # the engine's Context
            elif name == "_handle":
                value = (type(value).__name__, type(value.stream).__name__)
            elif name == "_probe":
                value = value()
            if name in ("_fd", "_probe") and value >= 0:
                value = ("fd", names(value))
            found[name] = (type(value).__name__, value)
    return found


def records(ctx: Ctx, names: FdNames) -> tuple[Any, ...]:
    """What a context keeps per fd, comparable across the two modules (not ``len(ctx)``,
    which retires the watchers of closed streams)."""
    by_fd = sorted((names(fd), names(w._fd)) for fd, w in enumerate(ctx._by_fd) if w is not None)
    return (
        sorted(map(names, ctx._watchers)),
        by_fd,
        sorted(map(names, ctx._stale_fds)),
        sorted(map(names, ctx._buffered)),
        sorted(map(names, ctx._leftovers)),
        sorted((names(fd), w._state) for fd, w in ctx._watchers.items()),
    )


def outcome(call: Callable[[], Any], names: FdNames) -> Any:
    """A call's result (a watcher's slots), or what it raised, as data: the class, the
    message, the code and errno a FailedPollOperationError has, and the cause."""
    try:
        result = call()
    except Exception as exc:
        cause = exc.__cause__
        return (
            type(exc).__name__,
            names.text(str(exc)),
            getattr(exc, "code", None),
            getattr(exc, "errno", None),
            None if cause is None else (type(cause).__name__, str(cause)),
            exc.__suppress_context__,
        )
    if isinstance(result, EngineWatcher):
        return ("returned", slots_of(result, names))
    return ("returned", result)


def both_agree(scenario: Scenario, backend: Backend) -> None:
    """With the C code in use: ``scenario`` gives the same transcript on both modules."""
    if not ACCELERATED:
        pytest.skip("no C code: iopoll runs pure Python here")
    assert scenario(iopoll, backend) == scenario(pure_iopoll, backend)


def test_the_c_methods_are_in_use_when_built() -> None:
    """iopoll's classes carry the C methods; the engine's keep the Python ones."""
    if not ACCELERATED:
        pytest.skip("no C code: iopoll runs pure Python here")
    assert type(iopoll.Context.add).__name__ == "method_descriptor"
    assert type(iopoll.Watcher.remove).__name__ == "method_descriptor"
    assert type(pure_iopoll.Context.add).__name__ == "function"
    assert pure_iopoll.Watcher.remove is EngineWatcher.remove


# -- add() of a socket or an int fd ------------------------------------------------------------


def _added(module: ModuleType, backend: Backend, as_int: bool) -> list[Any]:
    transcript: list[Any] = []
    made: list[socket.socket] = []
    names = FdNames()

    def make() -> socket.socket:
        made.extend(socket.socketpair())
        names.made(*made[-2:])
        return made[-2]

    try:
        with module.Context(backend) as ctx:
            for events in PLAIN_EVENTS:
                sock = make()
                handle = sock.fileno() if as_int else sock
                watcher = ctx.add(handle, events, f"data {int(events)}")
                assert watcher.is_active() and watcher.data == f"data {int(events)}"
                assert watcher.handle.stream is handle and watcher.watched_events is events
                transcript.append(slots_of(watcher, names))
            transcript.append(records(ctx, names))
            watcher = ctx.add(make(), READ)  # data left out
            assert watcher.data is None
            transcript.append(slots_of(watcher, names))
    finally:
        for sock in made:
            sock.close()
    return transcript


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("as_int", [False, True], ids=["socket", "int"])
@pytest.mark.parametrize("module", MODULES)
def test_add_makes_the_watcher_the_python_method_makes(
    module: ModuleType, backend: Backend, as_int: bool
) -> None:
    """Every plain event set, on a socket and on an int fd: the watcher's every slot and the
    Context's records are the Python method's."""
    transcript = _added(module, backend, as_int)
    assert len(transcript) == len(PLAIN_EVENTS) + 2
    # A one-shot is registered one-shot: never a plain report for the fast wait.
    assert transcript[ONESHOT - 1]["_oneshot"] == ("bool", True)
    assert transcript[ONESHOT - 1]["_plain"] == ("bool", False)
    assert transcript[READ - 1]["_plain"] == ("bool", True)
    assert transcript[READ - 1]["_state"] == ("int", 0) == transcript[-1]["_state"]
    assert transcript[0]["_fd"] == transcript[0]["_probe"] == ("tuple", ("fd", 0))
    if ACCELERATED and module is iopoll:
        assert transcript == _added(pure_iopoll, backend, as_int)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("as_int", [False, True], ids=["socket", "int"])
def test_the_python_fast_block_makes_what_the_general_path_makes(
    backend: Backend, as_int: bool
) -> None:
    """The Python add()'s own block for the usual call (which the C code copies) against
    its general path (``_add``), which checks everything: the same watcher, slot for slot,
    and the same records."""
    made: list[socket.socket] = []
    names = FdNames()
    try:
        with pure_iopoll.Context(backend) as fast, pure_iopoll.Context(backend) as general:
            for events in PLAIN_EVENTS:
                a, b = socket.socketpair()
                made.extend((a, b))
                handle = a.fileno() if as_int else a
                one = fast.add(handle, events, "data")
                other = general._add(handle, events, "data")
                assert slots_of(one, names) == slots_of(other, names)
            assert records(fast, names) == records(general, names)
    finally:
        for sock in made:
            sock.close()


@pytest.mark.parametrize("module", MODULES)
def test_a_watcher_added_in_c_is_reported_and_removed(
    module: ModuleType, streams: Callable[[], socket.socket]
) -> None:
    """A watcher the C add() made is reported by wait() and let go by remove(), after which
    its fd can be added again."""
    sock = streams()
    peer_fd = sock.fileno()
    with module.Context(Backend.EPOLL if Backend.EPOLL.is_available() else Backend.POLL) as ctx:
        watcher = ctx.add(sock, WRITE, "w")
        assert ctx.wait(0) == [watcher]
        assert watcher.triggered_events == WRITE
        watcher.remove()
        assert not watcher.is_active() and ctx.wait(0) == [] and len(ctx) == 0
        assert ctx._by_fd[peer_fd] is None
        again = ctx.add(sock, WRITE, "again")  # the fd is free again
        assert ctx.wait(0) == [again]


def _refusals(module: ModuleType, backend: Backend) -> list[Any]:
    """Every add() the C code hands to Python, or that fails: the same answers."""
    transcript: list[Any] = []
    names = FdNames()
    a, b = socket.socketpair()
    pa, pb = socket.socketpair()
    closed, _peer = socket.socketpair()
    names.made(a, b, pa, pb, closed, _peer)
    closed.close()
    with tempfile.TemporaryFile() as regular, module.Context(backend) as ctx:
        kept = ctx.add(a, READ, "kept")
        calls: list[tuple[str, Callable[[], Any]]] = [
            ("twice", lambda: ctx.add(a, WRITE)),
            ("twice by number", lambda: ctx.add(a.fileno(), WRITE)),
            ("closed socket", lambda: ctx.add(closed, READ)),
            ("negative int", lambda: ctx.add(-1, READ)),
            ("beyond any fd", lambda: ctx.add(2**31, READ)),
            ("a bool", lambda: ctx.add(True, READ)),
            ("an int for events", lambda: ctx.add(b, 1)),
            ("no events", lambda: ctx.add(b, Event(0))),
            ("bits no member has", lambda: ctx.add(b, Event(1 << 28))),
            ("a timer's event", lambda: ctx.add(b, Event.TIMER)),
            ("edge-triggered", lambda: ctx.add(b, READ | Event.EDGE_TRIGGERED).data),
            ("priority", lambda: ctx.add(pa, Event.PRIORITY).data),
            ("a regular file", lambda: ctx.add(regular.fileno(), READ)),
            ("keywords", lambda: ctx.add(handle=pb, events=READ, data="kw").data),
            ("too many", lambda: ctx.add(b, READ, None, None)),  # type: ignore[call-arg]
            ("too few", lambda: ctx.add(b)),  # type: ignore[call-arg]
        ]
        for name, call in calls:
            transcript.append((name, outcome(call, names), records(ctx, names)))
        transcript.append(kept.is_active())
    for sock in (a, b, pa, pb, _peer):
        sock.close()
    # Closed: the same PollError, with or without C.
    ctx2 = module.Context(backend)
    ctx2.close()
    c, d = socket.socketpair()
    transcript.append(outcome(lambda: ctx2.add(c, READ), names))
    c.close()
    d.close()
    return transcript


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("module", MODULES)
def test_add_refuses_what_the_python_method_refuses(module: ModuleType, backend: Backend) -> None:
    """Each call the C code hands over, or that fails, gives the Python method's answer and
    leaves the Python method's records."""
    transcript = dict(item[:2] for item in _refusals(module, backend) if isinstance(item, tuple))
    assert transcript["twice"][0] == HandleAlreadyWatchedError.__name__
    assert transcript["closed socket"][0] == InvalidHandleError.__name__
    assert transcript["negative int"][0] == "ValueError"
    assert transcript["beyond any fd"][0] == FailedHandleAddError.__name__
    assert transcript["a bool"][0] == "TypeError"
    assert transcript["an int for events"][0] == "TypeError"
    assert transcript["bits no member has"][0] == "ValueError"
    assert transcript["keywords"] == ("returned", "kw")
    assert transcript["too many"][0] == "TypeError"
    if backend is Backend.EPOLL:  # epoll takes no regular file: EPERM, said as NOSUPPORT
        refused = transcript["a regular file"]
        assert refused[0] == FailedHandleAddError.__name__
        assert refused[2] == ErrorCode.NOSUPPORT and refused[4][0] == "PermissionError"
        assert refused[5] is True  # raised from the OSError
    if ACCELERATED and module is iopoll:
        assert _refusals(iopoll, backend) == _refusals(pure_iopoll, backend)


@pytest.mark.parametrize("module", MODULES)
def test_a_refused_add_leaves_nothing_behind(module: ModuleType) -> None:
    """SPEC 1: nothing half-registered after a failed call.  The backend refuses (here a
    mechanism whose register() says no, as a Refusal and as an OSError) after the C code
    made the handle: no record of the fd is left, and the next add() of it works."""
    a, b = socket.socketpair()
    with module.Context(Backend.POLL) as ctx:
        mechanism = ctx._usable
        for error in (Refusal(ErrorCode.TOOBIG, "full"), OSError(24, "Too many open files")):

            def refuse(fd: int, events: int, error: Exception = error) -> None:
                raise error

            mechanism.register = refuse
            with pytest.raises(FailedHandleAddError) as raised:
                ctx.add(a, READ, "x")
            assert raised.value.__cause__ is error and raised.value.__context__ is error
            try:  # called while another exception is handled: the context is still its own
                raise LookupError("handled")
            except LookupError:
                with pytest.raises(FailedHandleAddError) as raised:
                    ctx.add(a, READ, "x")
            assert raised.value.__context__ is error
            assert raised.value.code == (ErrorCode.TOOBIG if isinstance(error, Refusal) else 9)
            assert ctx._watchers == {} and all(w is None for w in ctx._by_fd)
        # Any other exception passes through as it is.
        mechanism.register = lambda fd, events: (_ for _ in ()).throw(KeyError("odd"))
        with pytest.raises(KeyError, match="odd"):
            ctx.add(a, READ)
        assert ctx._watchers == {}
        del mechanism.register  # the class's own again
        assert ctx.add(a, READ, "y").data == "y"
    a.close()
    b.close()


@pytest.mark.parametrize("module", MODULES)
def test_add_of_a_stale_number_rebuilds(module: ModuleType, keepers: list[int]) -> None:
    """A number whose old file a dup keeps registered: the C code leaves it to the Python
    path, which rebuilds the OS object so that the new stream is watched."""
    if not Backend.EPOLL.is_available():
        pytest.skip("needs EPOLL")
    a, b = socket.socketpair()
    with module.Context(Backend.EPOLL) as ctx:
        old = ctx.add(a, READ)
        fd = a.fileno()
        keepers.append(os.dup(fd))
        a.close()
        old.remove()  # a no-op: retired; the entry stays registered through the dup
        c, d = socket.socketpair()
        try:
            if c.fileno() != fd:
                os.dup2(c.fileno(), fd)
                c.close()
                c = socket.socket(fileno=fd)
            assert ctx._stale_fds == {fd} and fd not in ctx._watchers
            watcher = ctx.add(c, READ, "new")
            assert ctx._stale_fds == set()  # the rebuild left the old file's entry out
            b.send(b"old")  # the old file, which the dup keeps, is readable
            assert ctx.wait(0) == []
            d.send(b"x")
            assert ctx.wait(0) == [watcher]
        finally:
            c.close()
            d.close()
    b.close()


def test_a_subclass_gets_the_python_method(streams: Callable[[], socket.socket]) -> None:
    """A Context subclass may override what add() reads (its watcher class): the C code
    takes only iopoll.Context itself."""

    class Marked(iopoll.Watcher):
        __slots__ = ()

    class Sub(iopoll.Context):
        __slots__ = ()
        _watcher_type = Marked

    with Sub(Backend.POLL) as ctx:
        assert type(ctx.add(streams(), READ)) is Marked
        assert type(ctx.add(streams().fileno(), WRITE)) is Marked


def test_a_watcher_class_set_on_context_is_obeyed(
    monkeypatch: pytest.MonkeyPatch, streams: Callable[[], socket.socket]
) -> None:
    """So is one set on iopoll.Context itself, after import."""

    class Marked(iopoll.Watcher):
        __slots__ = ()

    monkeypatch.setattr(iopoll.Context, "_watcher_type", Marked)
    with iopoll.Context(Backend.POLL) as ctx:
        assert type(ctx.add(streams(), READ)) is Marked


# -- remove() ---------------------------------------------------------------------------------


def _removals(module: ModuleType, backend: Backend) -> list[Any]:
    transcript: list[Any] = []
    pairs = [socket.socketpair() for _ in range(6)]
    (a, _), (b, _), (c, _), (d, _), (e, _), (f, _) = pairs
    names = FdNames()
    for pair in pairs:
        names.made(*pair)
    with module.Context(backend) as ctx:
        plain = ctx.add(a, READ, "plain")
        by_number = ctx.add(b.fileno(), WRITE, "by number")
        one_shot = ctx.add(c, READ | ONESHOT, "one-shot")
        wrapped = ctx.add(StreamPollHandle(d), READ, "wrapped")
        closed = ctx.add(e, READ, "closed")
        left = ctx.add(f, WRITE, "left over")
        timer = ctx.add(TimerHandle(3600), Event.TIMER, "timer")
        ctx.wait(0, max_events=1)  # one of the writers is reported, the other left over

        def close_then_remove() -> None:
            e.close()  # the probe answers -1 now: remove() retires the watcher
            closed.remove()

        steps = [
            ("plain", plain.remove),
            ("plain again", plain.remove),
            ("by number", by_number.remove),
            ("one-shot", one_shot.remove),
            ("wrapped", wrapped.remove),
            ("closed", close_then_remove),
            ("closed again", closed.remove),  # retired: a no-op
            ("left over", left.remove),
            ("timer", timer.remove),
        ]
        for name, step in steps:
            transcript.append((name, outcome(step, names), records(ctx, names)))
        transcript.append([w.is_active() for w in (plain, by_number, one_shot, wrapped, left)])
        watcher = ctx.add(a, READ, "after")
    transcript.append(("context closed", outcome(watcher.remove, names)))
    for x, y in pairs:
        x.close()
        y.close()
    return transcript


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("module", MODULES)
def test_remove_does_what_the_python_method_does(module: ModuleType, backend: Backend) -> None:
    """remove() of each kind of watcher: the same answers, states and records."""
    transcript = _removals(module, backend)
    steps = {item[0]: item[1] for item in transcript if isinstance(item, tuple)}
    assert steps["plain"] == ("returned", None)
    assert steps["plain again"][0] == InactiveWatcherError.__name__
    assert steps["closed"] == ("returned", None) == steps["closed again"]
    assert steps["context closed"][0] == InactiveWatcherError.__name__
    assert transcript[-2] == [False] * 5
    if ACCELERATED and module is iopoll:
        assert transcript == _removals(pure_iopoll, backend)


@pytest.mark.parametrize("module", MODULES)
def test_remove_of_an_fd_closed_behind_its_int_marks_it_stale(module: ModuleType) -> None:
    """An int fd's watcher cannot tell its fd was closed: remove() asks the OS, which no
    longer knows the fd (EBADF), and the number is kept as stale for a later add()."""
    if not Backend.EPOLL.is_available():
        pytest.skip("needs EPOLL")
    a, b = socket.socketpair()
    with module.Context(Backend.EPOLL) as ctx:
        fd = os.dup(a.fileno())
        watcher = ctx.add(fd, READ)
        os.close(fd)
        watcher.remove()
        assert not watcher.is_active()
        assert ctx._stale_fds == {fd} and ctx._watchers == {} and ctx._by_fd[fd] is None
    a.close()
    b.close()


@pytest.mark.parametrize("module", MODULES)
def test_remove_after_fork_in_the_child_is_refused(module: ModuleType) -> None:
    """In a fork child the inherited context is unusable: remove() says so, with or without
    C, and the parent's registration is untouched."""
    if not hasattr(os, "fork"):
        pytest.skip("needs fork")
    from iopoll_conformance.process import in_child

    a, b = socket.socketpair()
    with module.Context(Backend.POLL) as ctx:
        watcher = ctx.add(a, READ)

        def child() -> dict[str, Any]:
            try:
                watcher.remove()
            except PollError as exc:
                return {"raised": type(exc).__name__, "code": int(getattr(exc, "code", -1))}
            return {"raised": None}

        assert in_child(child) == {
            "raised": "FailedWatcherModificationError",
            "code": int(ErrorCode.PERMISSION),
        }
        b.send(b"x")
        assert ctx.wait(0) == [watcher]
    a.close()
    b.close()
