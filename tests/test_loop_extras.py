"""IoPollDriver extras, the factory, the facade and suspensions (see also test_loop_tracing)."""

from __future__ import annotations

import inspect
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from fd_limit import raised_fd_limit
from iopoll import Backend, Context
from iopoll import loop as facade
from iopoll.loop import (
    AbstractDriver,
    Driver,
    DriverFactory,
    InvalidCallbackError,
    IoPollDriver,
    SelectorsDriver,
    TracingDriver,
)
from iopoll.loop._iopoll_driver import PyIoPollDriver
from iopoll.loop._selectors_driver import PySelectorsDriver
from iopoll_conformance.loop import receive_once


def _discard(*results: object) -> None:
    """Callbacks must return None: swallow what a lambda's call returned."""


DRIVERS = [
    pytest.param(lambda: IoPollDriver(), id="iopoll"),
    pytest.param(SelectorsDriver, id="selectors"),
    pytest.param(lambda: TracingDriver(IoPollDriver()), id="tracing"),
]


@pytest.fixture
def driver() -> Iterator[IoPollDriver]:
    d = IoPollDriver()
    yield d
    d.close()


# -- IoPollDriver ---------------------------------------------------------------------------


@pytest.mark.parametrize("backend", Backend.available_backends())
def test_handle_is_the_context(backend: Backend) -> None:
    d = IoPollDriver(backend)
    assert isinstance(d.get_handle(), Context) and d.get_handle().backend is backend
    d.close()


def test_selectors_driver_handle_is_its_selector() -> None:
    import selectors

    assert isinstance(SelectorsDriver().get_handle(), selectors.BaseSelector)


@pytest.mark.parametrize("backend", Backend.available_backends())
def test_more_than_1024_fds(backend: Backend) -> None:
    if backend is Backend.SELECT:
        pytest.skip("select() cannot watch fds >= FD_SETSIZE")
    with raised_fd_limit(2 * 1100 + 64):
        pairs = [socket.socketpair() for _ in range(1100)]
        d = IoPollDriver(backend)
        try:
            for a, _ in pairs:
                d.unreference(d.on_readable(a, lambda cid, s: None))
            reader, writer = pairs[-1]
            assert reader.fileno() > 1024
            got = receive_once(d, reader)
            writer.send(b"high")
            d.run()
            assert got == [b"high"]
        finally:
            d.close()
            for a, b in pairs:
                a.close()
                b.close()


def _file_named(tmp_path: Any, path: str) -> str:
    """``path`` (``os.devnull``), or for "regular" a file of four bytes made for the test."""
    if path != "regular":
        return path
    name = str(tmp_path / "file.txt")
    with open(name, "w") as f:
        f.write("data")
    return name


@pytest.mark.parametrize("path", ["regular", os.devnull])
def test_regular_file_and_devnull_are_always_ready(tmp_path: Any, path: str) -> None:
    d = IoPollDriver()
    with open(_file_named(tmp_path, path), "rb") as stream:
        got: list[str] = []

        def fn(cid: str, s: Any) -> None:
            got.append(cid)
            if len(got) == 3:
                d.cancel(cid)

        d.on_readable(stream, fn)
        d.run()
        assert len(got) == 3
        if d.get_handle().backend is Backend.EPOLL:
            assert d._fallback is not None  # went to the POLL context
        assert d._fallback_count == 0
    d.close()


@pytest.mark.parametrize("make", DRIVERS)
@pytest.mark.parametrize("path", ["regular", os.devnull])
def test_every_driver_takes_a_regular_file_as_always_ready(
    tmp_path: Any, make: Any, path: str
) -> None:
    # SelectorsDriver's fallback for what its selector refuses is a PollSelector: a
    # DefaultSelector there (epoll again) refused the file as the first did.
    d = make()
    with open(_file_named(tmp_path, path), "rb") as stream:
        got: list[str] = []
        d.on_readable(stream, lambda cid, s: _discard(got.append(cid), d.cancel(cid)))
        d.run()
    assert len(got) == 1
    d.close()


@pytest.mark.parametrize("make", DRIVERS)
def test_an_error_alone_wakes_a_writer(make: Any) -> None:
    # docs/loop.md: ERROR and HANGUP wake readers and writers.  A full pipe whose reader is
    # gone is ERROR alone (no WRITE) on Linux poll and epoll.
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    try:
        while True:
            os.write(write_fd, b"x" * 65536)
    except BlockingIOError:
        pass
    os.close(read_fd)
    d = make()
    try:
        got: list[str] = []
        d.on_writable(write_fd, lambda cid, s: _discard(got.append(cid), d.cancel(cid)))
        barked: list[str] = []
        d.unreference(d.delay(2.0, lambda cid: _discard(barked.append(cid), d.stop())))
        d.run()
        assert (len(got), barked) == (1, [])
    finally:
        d.close()
        os.close(write_fd)


def test_stdin_redirected_from_a_file(tmp_path: Any) -> None:
    import subprocess

    data = tmp_path / "in.txt"
    data.write_text("hello\n")
    code = (
        "import sys; from iopoll.loop import IoPollDriver\n"
        "d = IoPollDriver(); out = []\n"
        "def fn(cid, s): out.append(s.readline()); d.cancel(cid)\n"
        "d.on_readable(sys.stdin, fn); d.run(); print(out)\n"
    )
    with open(data) as stdin:
        result = subprocess.run(
            [sys.executable, "-c", code], stdin=stdin, capture_output=True, text=True, timeout=30
        )
    assert result.stdout.strip() == "['hello\\n']", result.stderr


def test_signal_during_blocking_wait_runs_promptly(driver: IoPollDriver) -> None:
    reader, writer = socket.socketpair()
    got: list[float] = []
    read_id = driver.on_readable(reader, lambda cid, s: None)  # blocks: nothing to read

    def on_alarm(cid: str, signum: int) -> None:
        got.append(time.monotonic())
        driver.cancel(cid)
        driver.cancel(read_id)

    driver.on_signal(signal.SIGALRM, on_alarm)
    started = time.monotonic()
    signal.setitimer(signal.ITIMER_REAL, 0.05)
    try:
        driver.run()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        reader.close()
        writer.close()
    assert len(got) == 1 and got[0] - started < 0.5


def test_signal_from_another_thread_wakes_the_wait(driver: IoPollDriver) -> None:
    got: list[int] = []

    def on_signal(cid: str, signum: int) -> None:
        got.append(signum)
        driver.cancel(cid)

    driver.on_signal(signal.SIGUSR1, on_signal)
    timer = threading.Timer(0.05, os.kill, (os.getpid(), signal.SIGUSR1))
    started = time.monotonic()
    timer.start()
    driver.run()
    timer.join()
    assert got == [signal.SIGUSR1] and time.monotonic() - started < 0.5


def test_one_watcher_per_fd_with_recomputed_events(driver: IoPollDriver) -> None:
    from iopoll import Event

    a, b = socket.socketpair()
    r = driver.on_readable(a, lambda cid, s: None)
    w = driver.on_writable(a, lambda cid, s: None)
    driver.delay(0, lambda cid: driver.stop())
    driver.run()
    (watcher,) = driver.get_handle()._watchers.values()
    assert watcher.watched_events == Event.READ | Event.WRITE
    driver.disable(w)
    assert watcher.watched_events == Event.READ
    driver.cancel(r)
    assert not watcher.is_active() and len(driver.get_handle()) == 0
    driver.cancel(w)
    a.close()
    b.close()


@pytest.mark.parametrize("make", DRIVERS)
def test_queued_defer_disabled_and_reenabled_runs_once_next_tick(make: Any) -> None:
    # The defer is already in this tick's queue when it is toggled: the toggle moves it to
    # the next tick (it must neither run now nor run twice).
    d = make()
    log: list[str] = []
    target: list[str] = []

    def first(cid: str) -> None:
        log.append("first")
        d.disable(target[0])
        d.enable(target[0])
        d.defer(lambda c: log.append("later"))

    d.defer(first)
    target.append(d.defer(lambda c: log.append("target")))
    d.defer(lambda c: log.append("sibling"))
    d.run()
    assert log == ["first", "sibling", "target", "later"]
    assert d.get_identifiers() == []


@pytest.mark.parametrize("make", DRIVERS)
def test_timer_toggled_before_activation_runs_once_after_its_sibling(make: Any) -> None:
    # Re-enabling moves a timer behind the timers enabled before it (Revolt's enable queue).
    d = make()
    log: list[str] = []
    first = d.delay(0, lambda c: log.append("first"))
    d.delay(0, lambda c: log.append("second"))
    d.disable(first)
    d.enable(first)
    d.disable(first)
    d.enable(first)
    d.run()
    assert log == ["second", "first"]


@pytest.mark.parametrize("make", DRIVERS)
def test_reenabled_defer_keeps_its_reference_state_and_place(make: Any) -> None:
    d = make()
    log: list[str] = []
    deferred = d.defer(lambda c: log.append("deferred"))
    kept = d.delay(0, lambda c: log.append("delay"))
    d.disable(deferred)
    d.unreference(deferred)
    d.enable(deferred)
    assert d.get_identifiers() == [deferred, kept]
    assert d.is_enabled(deferred) and not d.is_referenced(deferred)
    d.run()  # the delay keeps the loop alive for one tick: the defer runs in it
    assert log == ["deferred", "delay"]
    assert d.get_identifiers() == []


# -- factory and facade ------------------------------------------------------------------


class CustomDriver(IoPollDriver):
    pass


class DriverWithoutHooks(AbstractDriver):
    """Implements no backend hook (``get_handle()`` comes with ``AbstractDriver``)."""

    def get_handle(self) -> None:
        return None


# The hooks a backend implements, each one abstract in AbstractDriver.
BACKEND_HOOKS = [
    "_refusals",
    "_add",
    "_modify",
    "_remove",
    "_new_fallback",
    "_wait",
    "_queue_ready",
]


def test_driver_without_backend_hooks_is_refused_before_it_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert inspect.isabstract(DriverWithoutHooks)
    with pytest.raises(TypeError, match="abstract"):
        DriverWithoutHooks()
    monkeypatch.setenv("IOPOLL_LOOP_DRIVER", f"{__name__}:DriverWithoutHooks")
    with pytest.raises(ValueError, match=r"IOPOLL_LOOP_DRIVER=.* a concrete Driver subclass"):
        DriverFactory().create()


@pytest.mark.parametrize("missing", BACKEND_HOOKS)
def test_backend_missing_one_hook_cannot_be_instantiated(missing: str) -> None:
    # SelectorsDriver's own hooks (its pure parent's), less one, on AbstractDriver.
    namespace = {name: vars(PySelectorsDriver)[name] for name in BACKEND_HOOKS if name != missing}
    namespace["__init__"] = PySelectorsDriver.__init__
    partial = type(f"Without{missing}", (AbstractDriver,), namespace)
    assert inspect.isabstract(partial)
    with pytest.raises(TypeError, match=missing):
        partial()


def test_factory_default_and_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("IOPOLL_LOOP_DRIVER", raising=False)
    monkeypatch.delenv("IOPOLL_LOOP_DEBUG_TRACE", raising=False)
    assert type(DriverFactory().create()) is IoPollDriver
    monkeypatch.setenv("IOPOLL_LOOP_DRIVER", "iopoll.loop:SelectorsDriver")
    assert type(DriverFactory().create()) is SelectorsDriver
    monkeypatch.setenv("IOPOLL_LOOP_DEBUG_TRACE", "1")
    traced = DriverFactory().create()
    assert isinstance(traced, TracingDriver) and type(traced.driver) is SelectorsDriver


@pytest.mark.parametrize(
    "value",
    [
        "iopoll.loop:Nope",
        "no.such.module:X",
        "socket:socket",
        "iopoll.loop",
        "iopoll.loop:Driver",
        "iopoll.loop:TracingDriver",  # a Driver, but it needs the driver it wraps
    ],
)
def test_factory_refuses_what_is_not_a_driver(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("IOPOLL_LOOP_DRIVER", value)
    with pytest.raises(ValueError, match="IOPOLL_LOOP_DRIVER"):
        DriverFactory().create()


class DriverFailingInside(PySelectorsDriver):
    """Takes no arguments, and its constructor fails with a TypeError of its own."""

    __slots__ = ()

    def __init__(self) -> None:
        raise TypeError("a bug inside the constructor")


def test_factory_lets_a_constructors_own_type_error_through(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Only a class that needs arguments is "cannot be made without arguments"; a TypeError
    from inside a constructor that takes none is the class's own error, not masked."""
    monkeypatch.setenv("IOPOLL_LOOP_DRIVER", f"{__name__}:DriverFailingInside")
    with pytest.raises(TypeError, match="a bug inside the constructor"):
        DriverFactory().create()


@pytest.mark.parametrize(
    ("value", "traced"),
    [("", False), ("0", False), ("false", False), (" No ", False), ("OFF", False),
     ("1", True), ("yes", True), (" true ", True)],
)
def test_factory_trace_variable(monkeypatch: pytest.MonkeyPatch, value: str, traced: bool) -> None:
    monkeypatch.setenv("IOPOLL_LOOP_DRIVER", " iopoll.loop:SelectorsDriver ")  # spaces ignored
    monkeypatch.setenv("IOPOLL_LOOP_DEBUG_TRACE", value)
    driver = DriverFactory().create()
    assert isinstance(driver, TracingDriver) is traced
    assert type(driver.driver if traced else driver) is SelectorsDriver  # type: ignore[attr-defined]


def test_facade_one_driver_per_thread() -> None:
    mine = facade.get_driver()
    assert facade.get_driver() is mine
    others: list[Driver] = []
    thread = threading.Thread(target=lambda: others.append(facade.get_driver()))
    thread.start()
    thread.join()
    assert others[0] is not mine
    replacement = SelectorsDriver()
    facade.set_driver(replacement)
    try:
        log: list[str] = []
        deferred = facade.defer(lambda cid: log.append("defer"))
        assert facade.get_type(deferred).name == "DEFER"
        facade.queue(log.append, "micro")
        facade.run()
        assert log == ["micro", "defer"]
        with pytest.raises(InvalidCallbackError):
            facade.enable("unknown")
    finally:
        facade.set_driver(mine)


def test_set_driver_refused_while_running() -> None:
    d = IoPollDriver()
    facade.set_driver(d)
    errors: list[BaseException] = []

    def swap(cid: str) -> None:
        try:
            facade.set_driver(SelectorsDriver())
        except RuntimeError as exc:
            errors.append(exc)

    facade.defer(swap)
    facade.run()
    assert len(errors) == 1


def test_callbacks_cancelled_before_a_tick_do_not_pile_up(driver: IoPollDriver) -> None:
    # Cancelled before any tick, their queue entries are dropped in batches, not kept.
    a, b = socket.socketpair()
    for _ in range(10_000):
        driver.cancel(driver.on_readable(a, lambda cid, s: None))
        driver.cancel(driver.defer(lambda cid: None))
    assert len(driver._enable_queue) + len(driver._defers) <= 2 * 1025
    kept = driver.defer(lambda cid: driver.stop())
    assert driver.get_identifiers() == [kept]
    driver.run()
    assert driver.get_identifiers() == []
    a.close()
    b.close()


# -- a closed driver ----------------------------------------------------------------------------


def _wakeup_fd() -> int:
    """The process's wakeup fd, read by setting it and putting it back."""
    fd = signal.set_wakeup_fd(-1)
    signal.set_wakeup_fd(fd)
    return fd


@pytest.mark.parametrize(
    "make",
    [
        *DRIVERS,
        pytest.param(lambda: IoPollDriver(Backend.SELECT), id="iopoll-select"),
        pytest.param(PyIoPollDriver, id="pure"),
        pytest.param(PySelectorsDriver, id="pure-selectors"),
    ],
)
def test_a_closed_driver_refuses_run_and_signals_and_leaves_the_signal_state(make: Any) -> None:
    # The signal on_signal() would take over, and the wakeup fd, are left as they were: a
    # first version left the process's wakeup fd on a socket the driver then closed.
    handler = signal.getsignal(signal.SIGUSR2)
    wakeup = _wakeup_fd()
    driver = make()
    driver.close()
    with pytest.raises(RuntimeError, match="The driver is closed"):
        driver.on_signal(signal.SIGUSR2, lambda cid, signum: None)
    driver.defer(lambda cid: None)  # taken, and never run
    with pytest.raises(RuntimeError, match="The driver is closed"):
        driver.run()
    assert signal.getsignal(signal.SIGUSR2) is handler
    assert signal.set_wakeup_fd(wakeup) == wakeup
    driver.close()  # a second close() does nothing


def _one_signal(driver: Any, seen: list[str], label: str) -> None:
    """Send SIGUSR2 to the process and run one tick of ``driver``: the signal, taken by its
    handler at once, is that tick's (its callback runs after the deferred stop())."""
    driver.defer(lambda cid: driver.stop())
    # A driver's handler, not the default action (which would end the test process).
    assert callable(signal.getsignal(signal.SIGUSR2))
    os.kill(os.getpid(), signal.SIGUSR2)
    driver.run()
    assert seen[-1:] == [label]


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(SelectorsDriver, id="selectors"),
        pytest.param(lambda: IoPollDriver(Backend.SELECT), id="iopoll-select"),
        pytest.param(PySelectorsDriver, id="pure-selectors"),
    ],
)
@pytest.mark.parametrize("order", ["first-first", "last-first"])
def test_two_drivers_give_a_signal_back_in_any_order(make: Any, order: str) -> None:
    """Drivers that take a signal through the Python handler and the wakeup fd: released
    first-taken-first, the first put back what it had found, removing the second's handler
    and wakeup fd; the second then put back the first's closed handler and wakeup fd (EBADF
    out of cancel(), or a socket that took the number since, written at every signal)."""
    handler = signal.getsignal(signal.SIGUSR2)
    wakeup = _wakeup_fd()
    first, second = make(), make()
    seen: list[str] = []
    try:
        one = first.on_signal(signal.SIGUSR2, lambda cid, signum: seen.append("first"))
        two = second.on_signal(signal.SIGUSR2, lambda cid, signum: seen.append("second"))
        leaving, staying, label = (
            (first, second, "second") if order == "first-first" else (second, first, "first")
        )
        leaving.cancel(one if leaving is first else two)
        # Someone opens a socket meanwhile: it may take the freed wakeup fd's number.
        x, y = socket.socketpair()
        x.setblocking(False)
        y.setblocking(False)
        try:
            _one_signal(staying, seen, label)  # the one left still takes the signal
            staying.cancel(two if staying is second else one)
            assert signal.getsignal(signal.SIGUSR2) is handler
            assert _wakeup_fd() == wakeup
            with pytest.raises(BlockingIOError):
                y.recv(10)  # no signal byte went to the new socket
        finally:
            x.close()
            y.close()
    finally:
        first.close()
        second.close()
        signal.signal(signal.SIGUSR2, handler)
        signal.set_wakeup_fd(wakeup)


class _AsyncCall:
    async def __call__(self, callback_id: str) -> None:
        pass


@pytest.mark.parametrize("make", DRIVERS)
def test_an_object_with_an_async_call_is_refused_at_registration(make: Any) -> None:
    # As an async def function is: its calls would return coroutines, refused only when run.
    driver = make()
    try:
        for register in (driver.defer, lambda fn: driver.delay(0, fn), driver.queue):
            with pytest.raises(TypeError, match="async def"):
                register(_AsyncCall())
        assert driver.get_identifiers() == []
    finally:
        driver.close()


def test_a_huge_negative_delay_is_named_briefly() -> None:
    driver = IoPollDriver()
    try:
        with pytest.raises(ValueError, match=r"seconds must be >= 0 and not NaN, not -1") as caught:
            driver.delay(-(10**400), lambda cid: None)
        assert len(str(caught.value)) < 120
    finally:
        driver.close()
