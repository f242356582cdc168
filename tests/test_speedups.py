"""``iopoll._speedups``: the C ``wait()`` fast path and ``Watcher.data`` getter.

The C code must be used when it was built, be left out with ``IOPOLL_PURE_PYTHON``, and
behave exactly as the pure-Python reference (``pure_iopoll``), argument handling included.
The readiness behaviour itself is held to the conformance suite and ``test_fast_path.py``,
both of which run on the two versions.
"""

from __future__ import annotations

import functools
import importlib.util
import inspect
import io
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

import iopoll
import iopoll._native
import pure_iopoll
from _iopoll_core.context import Context as EngineContext
from iopoll import Event

BUILT = importlib.util.find_spec("iopoll._speedups") is not None
needs_speedups = pytest.mark.skipif(not BUILT, reason="iopoll._speedups was not built here")


def _python(code: str, **env: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout.strip()


@needs_speedups
def test_the_c_code_is_in_use_when_built() -> None:
    assert iopoll._native.ACCELERATED is (
        os.environ.get("IOPOLL_PURE_PYTHON", "") in ("", "0")
    )
    if iopoll._native.ACCELERATED:
        assert type(iopoll.Context.__dict__["wait"]).__name__ == "method_descriptor"
        assert type(iopoll.Watcher.__dict__["data"]).__name__ == "member_descriptor"


@pytest.mark.parametrize(("value", "accelerated"), [("1", False), ("0", BUILT), ("", BUILT)])
def test_iopoll_pure_python_leaves_the_c_code_out(value: str, accelerated: bool) -> None:
    code = (
        "import iopoll, iopoll._native as b; "
        "print(b.ACCELERATED, 'wait' in iopoll.Context.__dict__, "
        "'data' in iopoll.Watcher.__dict__)"
    )
    expected = f"{accelerated} {accelerated} {accelerated}"
    assert _python(code, IOPOLL_PURE_PYTHON=value) == expected


def test_the_polyfill_never_runs_the_c_code() -> None:
    import iopoll_polyfill.fallback as fallback

    # Its wait() checks whole seconds, then runs the engine's, which is plain Python.
    assert iopoll.Context not in fallback.Context.__mro__
    assert inspect.isfunction(inspect.getattr_static(EngineContext, "wait"))
    assert isinstance(inspect.getattr_static(fallback.Watcher, "data"), property)


@needs_speedups
def test_install_refuses_a_second_call() -> None:
    # In a fresh interpreter with the C code on: under IOPOLL_PURE_PYTHON=1 this process
    # never installed it, and a first install() here would put it on the classes.
    code = (
        "import iopoll\n"
        "from iopoll import _speedups\n"
        "try:\n"
        "    _speedups.install(iopoll.Context, iopoll.Watcher)\n"
        "except RuntimeError as exc:\n"
        "    print('refused', 'already' in str(exc))\n"
    )
    assert _python(code, IOPOLL_PURE_PYTHON="0").split() == ["refused", "True"]


@needs_speedups
def test_install_refuses_classes_without_the_slots_it_reads() -> None:
    """The C code reads __slots__ through their member descriptors: a class missing one,
    or holding it as something else, is refused by name, and nothing is installed."""
    code = (
        "import iopoll\n"
        "from iopoll import _speedups\n"
        "class Lacking(iopoll.Context):\n"
        "    _by_fd = None\n"
        "try:\n"
        "    _speedups.install(Lacking, iopoll.Watcher)\n"
        "except TypeError as exc:\n"
        "    print('refused', '_by_fd' in str(exc), 'wait' in Lacking.__dict__)\n"
    )
    assert _python(code, IOPOLL_PURE_PYTHON="1").split() == ["refused", "True", "False"]


def test_a_failed_install_warns_and_runs_pure_python() -> None:
    """If install() refuses iopoll's own classes (a CPython whose descriptors changed),
    ``import iopoll`` still works: pure Python, with a RuntimeWarning that says so."""
    code = (
        "import sys, types, warnings\n"
        "fake = types.ModuleType('iopoll._speedups')\n"
        "def install(context_type, watcher_type):\n"
        "    raise TypeError('Context._by_fd must be a writable __slots__ attribute')\n"
        "fake.install = install\n"
        "sys.modules['iopoll._speedups'] = fake\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    warnings.simplefilter('always')\n"
        "    import iopoll\n"
        "print(iopoll._native.ACCELERATED, 'wait' in iopoll.Context.__dict__)\n"
        "print([str(w.message) for w in caught if w.category is RuntimeWarning])\n"
    )
    first, second = _python(code, IOPOLL_PURE_PYTHON="0").splitlines()
    assert first == "False False"
    assert "could not be installed" in second and "_by_fd" in second


def test_wait_has_the_same_signature_and_a_docstring() -> None:
    def shape(function: Any) -> list[tuple[str, Any]]:
        return [(p.name, p.default) for p in inspect.signature(function).parameters.values()]

    assert shape(iopoll.Context.wait) == shape(EngineContext.wait)
    assert iopoll.Context.wait.__doc__
    assert iopoll.Watcher.data.__doc__


def _outcome(call: Callable[[], Any]) -> Any:
    try:
        result = call()
    except Exception as exc:
        return (type(exc), str(exc))
    return [w.data for w in result]


CALLS: list[tuple[tuple[Any, ...], dict[str, Any]]] = [
    ((), {}),
    ((0.0,), {}),
    ((0,), {}),
    ((0, 0), {}),
    ((0, 0, None), {}),
    ((0, 0, 1), {}),
    ((), {"timeout": 0.0}),
    ((), {"timeout": 0, "microseconds": 10}),
    ((), {"max_events": 1, "timeout": 0.0}),
    ((timedelta(0),), {}),
    ((float("nan"),), {}),
    ((-1.0,), {}),
    ((True,), {}),
    (("1",), {}),
    ((0.0, 0.0), {}),
    ((0.0, False), {}),
    ((0.0, -1), {}),
    ((None, 5), {}),
    ((0.0, 0, 0), {}),
    ((0.0, 0, True), {}),
    ((0.0, 0, None, 4), {}),
    ((0.0,), {"timeout": 0.0}),
    ((), {"timeuot": 0.0}),
    ((), {"microseconds": 2**70, "timeout": 0}),
    ((1e300,), {"max_events": 0}),
]


@pytest.mark.parametrize(("args", "kwargs"), CALLS, ids=repr)
def test_the_c_wait_answers_every_call_as_the_python_one(
    args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    a, b = socket.socketpair()
    with a, b:
        outcomes = []
        for make in (iopoll.Context, pure_iopoll.Context):
            with make() as ctx:
                ctx.add(a, Event.WRITE, "a")
                outcomes.append(_outcome(functools.partial(ctx.wait, *args, **kwargs)))
        c_outcome, python_outcome = outcomes
        if isinstance(python_outcome, tuple) and python_outcome[0] is TypeError:
            # Argument-binding errors word for word, but for the ". Did you mean ...?" that
            # Python 3.13 adds after a misspelt keyword.
            assert isinstance(c_outcome, tuple) and c_outcome[0] is TypeError, c_outcome
            assert python_outcome[1].startswith(c_outcome[1]), (c_outcome, python_outcome)
        else:
            assert c_outcome == python_outcome


def test_watcher_data_is_read_only_on_both() -> None:
    a, b = socket.socketpair()
    with a, b:
        for make in (iopoll.Context, pure_iopoll.Context):
            with make() as ctx:
                watcher = ctx.add(a, Event.WRITE, "a")
                assert watcher.data == "a"
                with pytest.raises(AttributeError):
                    watcher.data = "b"  # type: ignore[misc]
                watcher.modify_data("b")
                assert watcher.data == "b"


@pytest.mark.parametrize(
    "backend", [b for b in (iopoll.Backend.EPOLL, iopoll.Backend.POLL) if b.is_available()]
)
@pytest.mark.parametrize("module", [iopoll, pure_iopoll], ids=["iopoll", "pure_iopoll"])
def test_a_blocking_wait_lets_other_threads_run(module: Any, backend: iopoll.Backend) -> None:
    """The C wait asks the OS first with the GIL held (nothing blocks then), and releases it
    for the wait that blocks: a thread counting beside a 0.3 s wait on an idle socket gets
    the whole 0.3 s, not only the interpreter's switch intervals (it would get none: a
    thread blocked in the OS with the GIL runs no bytecode that could give it up)."""
    import threading

    a, b = socket.socketpair()
    counted = [0]
    stop = threading.Event()

    def count() -> None:
        while not stop.is_set():
            counted[0] += 1

    thread = threading.Thread(target=count)
    try:
        with module.Context(backend) as ctx:
            ctx.add(b, Event.READ)
            thread.start()
            while counted[0] == 0:  # it runs
                pass
            before = counted[0]
            time.sleep(0.3)  # what the thread counts while this one sleeps
            asleep = counted[0] - before
            before = counted[0]
            assert ctx.wait(0.3) == []
            during = counted[0] - before
            a.send(b"x")
            assert [w.triggered_events for w in ctx.wait(5)] == [Event.READ]  # ready at once
    finally:
        stop.set()
        if thread.is_alive():
            thread.join()
        a.close()
        b.close()
    # Holding the GIL, the wait would leave it a few switch intervals' worth (under 5%).
    assert during > asleep / 3, (during, asleep)


@pytest.mark.parametrize("module", [iopoll, pure_iopoll], ids=["iopoll", "pure_iopoll"])
def test_a_thread_grows_the_poll_set_while_a_wait_blocks(module: Any) -> None:
    """The C wait on POLL polls the mechanism's struct pollfd array itself only while it
    holds the GIL; a call that blocks polls a copy.  Another thread that registers 300
    sockets meanwhile grows the array (the bytearray moves) under the blocked call: the
    call still ends on the watched socket's data, and the next wait sees the new sockets
    once they have some, as on the pure path (the sanitizers' run holds it to touching no
    freed memory)."""
    import threading

    if not iopoll.Backend.POLL.is_available():
        pytest.skip("no POLL here")
    a, b = socket.socketpair()
    pairs = [socket.socketpair() for _ in range(300)]
    with module.Context(iopoll.Backend.POLL) as ctx:

        def grow() -> None:
            time.sleep(0.05)  # the wait below is blocked by now
            for _, other in pairs:
                ctx.add(other, Event.READ, "new")  # nothing to read: never in the first wait
            a.send(b"x")

        ctx.add(b, Event.READ, "watched")
        thread = threading.Thread(target=grow)
        thread.start()
        try:
            first = [w.data for w in ctx.wait(5)]
        finally:
            thread.join()
        for peer, _ in pairs:
            peer.send(b"y")
        second = sorted(w.data for w in ctx.wait(0))
    for one, other in [(a, b), *pairs]:
        one.close()
        other.close()
    assert first == ["watched"]
    assert second == ["new"] * 300 + ["watched"]


@needs_speedups
@pytest.mark.parametrize(
    "backend", [b for b in (iopoll.Backend.EPOLL, iopoll.Backend.POLL) if b.is_available()]
)
def test_a_zero_timeout_wait_keeps_the_gil(backend: iopoll.Backend) -> None:
    """wait(0) never blocks, so the C path makes its one OS call with the GIL held: an event
    loop's tick after a busy one gives up no GIL (CPython's epoll.poll(0) does).  With a
    long switch interval, a counting thread that waits for the GIL gets none of it while
    this thread makes fifty such waits; had one released the GIL, the thread would have
    taken it at once."""
    import threading

    if not iopoll._native.ACCELERATED:
        pytest.skip("IOPOLL_PURE_PYTHON is set")
    a, b = socket.socketpair()
    counted = [0]
    stop = threading.Event()

    def count() -> None:
        while not stop.is_set():
            counted[0] += 1

    thread = threading.Thread(target=count)
    interval = sys.getswitchinterval()
    sys.setswitchinterval(0.25)
    try:
        with iopoll.Context(backend) as ctx:
            ctx.add(b, Event.READ)
            thread.start()
            while counted[0] == 0:  # it ran; this thread has the GIL back, the other waits
                pass
            before = counted[0]
            waits = 0
            while waits < 50 and counted[0] == before:
                assert ctx.wait(0) == []
                waits += 1
            moved = counted[0] - before
    finally:
        sys.setswitchinterval(interval)
        stop.set()
        if thread.is_alive():
            thread.join()
        a.close()
        b.close()
    assert (waits, moved) == (50, 0)


@pytest.mark.parametrize("backend", [iopoll.Backend.EPOLL, iopoll.Backend.POLL], ids=str)
@pytest.mark.parametrize("closed", [False, True], ids=["open", "closed"])
def test_a_file_objects_c_fileno_answers_as_in_python(
    backend: iopoll.Backend, closed: bool
) -> None:
    """The C wait calls a C ``fileno()`` (here ``io.FileIO``'s) through its function: open,
    it reports the file; closed behind the Context's back while a dup keeps the pipe's
    end alive (so the OS still reports it), its ``fileno()`` raises ``ValueError``, and
    both waits forget the watcher without reporting it."""
    if not getattr(backend, "available", True):
        pytest.skip(f"{backend} is not available here")
    outcomes = []
    for make in (iopoll.Context, pure_iopoll.Context):
        read_fd, write_fd = os.pipe()
        reader = io.FileIO(read_fd, "r")
        keeper = os.dup(read_fd)
        try:
            with make(backend) as ctx:
                watcher = ctx.add(reader, Event.READ, "reader")
                os.write(write_fd, b"x")
                if closed:
                    reader.close()
                first = [w.data for w in ctx.wait(0.0)]
                outcomes.append((first, watcher.is_active(), len(ctx)))
        finally:
            reader.close()
            os.close(keeper)
            os.close(write_fd)
    c_outcome, python_outcome = outcomes
    assert c_outcome == python_outcome
    assert c_outcome == (([], False, 0) if closed else (["reader"], True, 1))


class _NeitherEqualNorUnequal(int):
    """An fd number whose ``==`` and ``!=`` both answer False."""

    def __eq__(self, other: object) -> bool:
        return False

    def __ne__(self, other: object) -> bool:
        return False

    __hash__ = int.__hash__


class _AlwaysUnequal(int):
    """An fd number that says it differs from every int, its own value included."""

    def __eq__(self, other: object) -> bool:
        return False

    def __ne__(self, other: object) -> bool:
        return True

    __hash__ = int.__hash__


@pytest.mark.parametrize(
    ("answer", "outcome"),
    [
        pytest.param(_NeitherEqualNorUnequal, (["x"], False, 0), id="neither"),
        pytest.param(_AlwaysUnequal, ([], False, 0), id="unequal"),
    ],
)
@pytest.mark.parametrize("backend", [iopoll.Backend.EPOLL, iopoll.Backend.POLL], ids=str)
def test_the_probe_asks_not_equal_as_python_does(
    backend: iopoll.Backend, answer: type[int], outcome: tuple[list[str], bool, int]
) -> None:
    """Python's fast path asks ``probe() != fd``, and only an exact int may be compared by
    value in C (``PyLong_CheckExact``).  A ``fileno()`` answering an int subclass that is
    neither equal nor unequal is the same stream to the wait, which reports it (and then to
    ``is_active()``, which asks ``==``, a closed one); one that says it is unequal means
    another file there, and the wait retires the watcher: in C as in Python."""
    if not getattr(backend, "available", True):
        pytest.skip(f"{backend} is not available here")

    class Handle:
        odd = False

        def __init__(self, sock: socket.socket) -> None:
            self.sock = sock

        def fileno(self) -> int:
            fd = self.sock.fileno()
            return answer(fd) if self.odd else fd

    outcomes = []
    for make in (iopoll.Context, pure_iopoll.Context):
        a, b = socket.socketpair()
        with a, b, make(backend) as ctx:
            handle = Handle(a)
            watcher = ctx.add(handle, Event.READ, "x")
            handle.odd = True
            b.send(b"1")
            outcomes.append(([w.data for w in ctx.wait(0.1)], watcher.is_active(), len(ctx)))
    assert outcomes[0] == outcomes[1]
    assert outcomes[0] == outcome


def test_microseconds_is_compared_with_zero_before_its_type_is_read() -> None:
    """``wait(t, m)`` with ``m`` an int subclass: Python asks ``m == 0`` first (here it
    raises), and so does C."""

    class Raising(int):
        def __eq__(self, other: object) -> bool:
            raise ValueError("compared")

        __hash__ = int.__hash__

    outcomes = []
    for make in (iopoll.Context, pure_iopoll.Context):
        a, b = socket.socketpair()
        with a, b, make() as ctx:
            ctx.add(a, Event.READ, "x")
            outcomes.append(_outcome(lambda: ctx.wait(0.1, Raising(0))))
    assert outcomes[0] == outcomes[1]
    assert "compared" in repr(outcomes[0])
