"""``IoPollDriver.on_signal`` through ``SignalHandle`` watchers (SPEC 9.1 and 10).

Where the backend ``supports_signal_handles()`` (Linux ``EPOLL`` and ``POLL``), the driver
watches one ``SignalHandle`` per signal number in its Context: no Python handler and no
wakeup fd are installed, the signal is blocked while watched and the mask restored with the
last callback.  Elsewhere (``SelectorsDriver``, the ``SELECT`` backend) the handler and the
wakeup fd stay.  Every test sends real signals to the process (``os.kill``), and checks that
the handlers, the wakeup fd and the mask are back as they were.
"""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from iopoll import Backend, Event, SignalHandle
from iopoll.loop import (
    Driver,
    IoPollDriver,
    SelectorsDriver,
    TracingDriver,
)
from iopoll.loop._signals import only_thread
from signal_state import blocked, current_wakeup_fd, kept_signal_state

pytestmark = pytest.mark.skipif(
    not hasattr(signal, "pthread_sigmask"), reason="needs POSIX signals and pthread_sigmask"
)

HANDLE_BACKENDS = [
    backend
    for backend in (Backend.EPOLL, Backend.POLL, Backend.KQUEUE)
    if backend.is_available() and backend.supports_signal_handles()
]

# The drivers that watch signals through SignalHandles: IoPollDriver on each backend that can.
HANDLE_DRIVERS = [
    pytest.param(lambda b=backend: IoPollDriver(b), id=f"iopoll-{backend.name.lower()}")
    for backend in HANDLE_BACKENDS
] + [
    pytest.param(
        lambda: TracingDriver(IoPollDriver(HANDLE_BACKENDS[0])),
        id="tracing",
        marks=pytest.mark.skipif(not HANDLE_BACKENDS, reason="no backend with signal handles"),
    )
]
if not HANDLE_BACKENDS:
    HANDLE_DRIVERS = [pytest.param(None, marks=pytest.mark.skip(reason="no signal handles here"))]

SIGNALS = (signal.SIGUSR1, signal.SIGUSR2) if hasattr(signal, "SIGUSR1") else ()


def kill(signum: int) -> None:
    os.kill(os.getpid(), signum)


@pytest.fixture(autouse=True)
def signal_state() -> Iterator[None]:
    """Each test leaves the handlers, the wakeup fd and the mask as it found them."""
    with kept_signal_state(SIGNALS):
        yield


@pytest.fixture(params=HANDLE_DRIVERS)
def loop(request: pytest.FixtureRequest) -> Iterator[Driver]:
    if not only_thread():
        pytest.skip("another thread runs in this process: the driver takes a handler instead")
    driver: Driver = request.param()
    yield driver
    for callback_id in driver.get_identifiers():
        driver.cancel(callback_id)
    driver.close()  # type: ignore[attr-defined]


@pytest.fixture
def recorded() -> Iterator[list[int]]:
    """A Python handler for SIGUSR1 and SIGUSR2 that records what reaches it."""
    got: list[int] = []

    def handler(signum: int, frame: object) -> None:
        got.append(signum)

    previous = {signum: signal.signal(signum, handler) for signum in SIGNALS}
    yield got
    for signum, old in previous.items():
        signal.signal(signum, old)


def signal_watchers(driver: Driver) -> list[Any]:
    context = driver.get_handle()
    return [w for w in context._watchers.values() if isinstance(w.handle, SignalHandle)]


def stopper(driver: Driver, after: float = 0.2) -> str:
    """A delay that cancels every callback after ``after`` seconds (ends ``run()``)."""

    def finish(cid: str) -> None:
        for callback_id in driver.get_identifiers():
            driver.cancel(callback_id)

    return driver.delay(after, finish)


# -- no process-wide signal state but the mask ---------------------------------------------


def test_no_handler_and_no_wakeup_fd_while_watched(loop: Driver, recorded: list[int]) -> None:
    handler = signal.getsignal(signal.SIGUSR1)
    mask = blocked()
    assert signal.SIGUSR1 not in mask
    got: list[tuple[str, int]] = []
    callback_id = loop.on_signal(signal.SIGUSR1, lambda cid, s: got.append((cid, s)) and None)
    # Installed: the signal is blocked, and nothing else changed.
    assert signal.getsignal(signal.SIGUSR1) is handler
    assert current_wakeup_fd() == -1
    assert blocked() == mask | {signal.SIGUSR1}
    (watcher,) = signal_watchers(loop)
    assert watcher.watched_events == Event.SIGNAL and watcher.handle.signals == (signal.SIGUSR1,)
    loop.delay(0.01, lambda cid: kill(signal.SIGUSR1))
    stopper(loop)
    loop.run()
    assert got == [(callback_id, signal.SIGUSR1)]
    assert recorded == []  # the Python handler never saw it
    assert blocked() == mask  # the last callback went: unblocked again
    assert signal_watchers(loop) == []
    kill(signal.SIGUSR1)  # the handler is back in charge
    assert recorded == [signal.SIGUSR1]


def test_mask_blocked_with_first_callback_restored_with_last(loop: Driver) -> None:
    mask = blocked()
    first = loop.on_signal(signal.SIGUSR2, lambda cid, s: None)
    second = loop.on_signal(signal.SIGUSR2, lambda cid, s: None)
    assert len(signal_watchers(loop)) == 1  # one watcher for the signal, however many callbacks
    assert blocked() == mask | {signal.SIGUSR2}
    loop.cancel(first)
    assert blocked() == mask | {signal.SIGUSR2}
    loop.disable(second)  # a disabled callback keeps the signal watched
    assert blocked() == mask | {signal.SIGUSR2}
    loop.cancel(second)
    assert blocked() == mask
    assert signal_watchers(loop) == []


def test_a_signal_already_blocked_stays_blocked(loop: Driver) -> None:
    signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGUSR1])
    try:
        callback_id = loop.on_signal(signal.SIGUSR1, lambda cid, s: None)
        loop.cancel(callback_id)
        assert signal.SIGUSR1 in blocked()
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGUSR1])


def test_close_restores_the_mask(loop: Driver) -> None:
    mask = blocked()
    loop.on_signal(signal.SIGUSR1, lambda cid, s: None)
    loop.on_signal(signal.SIGUSR2, lambda cid, s: None)
    assert blocked() == mask | {signal.SIGUSR1, signal.SIGUSR2}
    loop.close()  # type: ignore[attr-defined]
    assert blocked() == mask


def test_a_signal_that_cannot_be_blocked_is_refused(loop: Driver) -> None:
    mask = blocked()
    with pytest.raises(ValueError, match="cannot be blocked"):
        loop.on_signal(signal.SIGSEGV, lambda cid, s: None)
    assert loop.get_identifiers() == [] and signal_watchers(loop) == []
    assert blocked() == mask


# -- delivery --------------------------------------------------------------------------------


def test_callbacks_get_id_and_signum(loop: Driver) -> None:
    got: list[tuple[str, int]] = []

    def record(cid: str, signum: int) -> None:
        got.append((cid, signum))

    first = loop.on_signal(signal.SIGUSR1, record)
    second = loop.on_signal(signal.SIGUSR2, record)
    loop.delay(0.01, lambda cid: kill(signal.SIGUSR1))
    loop.delay(0.05, lambda cid: kill(signal.SIGUSR2))
    stopper(loop)
    loop.run()
    assert got == [(first, signal.SIGUSR1), (second, signal.SIGUSR2)]


def test_several_callbacks_per_signal_in_order(loop: Driver) -> None:
    got: list[str] = []
    ids = [
        loop.on_signal(signal.SIGUSR1, lambda cid, s, name=name: got.append(name))
        for name in "abcd"
    ]
    loop.disable(ids[1])
    loop.cancel(ids[3])
    loop.delay(0.01, lambda cid: kill(signal.SIGUSR1))
    stopper(loop)
    loop.run()
    assert got == ["a", "c"]


def test_disabled_then_enabled(loop: Driver) -> None:
    got: list[str] = []
    callback_id = loop.disable(loop.on_signal(signal.SIGUSR1, lambda cid, s: got.append(cid)))
    loop.delay(0.01, lambda cid: kill(signal.SIGUSR1))  # nobody listens: dropped
    loop.delay(0.05, lambda cid: loop.enable(callback_id) and None)
    loop.delay(0.1, lambda cid: kill(signal.SIGUSR1))
    stopper(loop)
    loop.run()
    assert got == [callback_id]


def test_unreferenced_signal_callback_does_not_keep_run_going(loop: Driver) -> None:
    loop.unreference(loop.on_signal(signal.SIGUSR1, lambda cid, s: None))
    started = time.monotonic()
    loop.run()
    assert time.monotonic() - started < 0.5


def test_a_referenced_signal_callback_keeps_run_going(loop: Driver) -> None:
    got: list[int] = []

    def once(cid: str, signum: int) -> None:
        got.append(signum)
        loop.cancel(cid)

    callback_id = loop.unreference(loop.on_signal(signal.SIGUSR2, once))
    loop.reference(callback_id)
    timer = threading.Timer(0.05, kill, (signal.SIGUSR2,))  # started after: inherits the mask
    timer.start()
    loop.run()  # only the signal callback keeps it going
    timer.join()
    assert got == [signal.SIGUSR2]


def test_signal_taken_before_run_is_dispatched_in_the_first_tick(loop: Driver) -> None:
    got: list[int] = []
    callback_id = loop.on_signal(signal.SIGUSR1, lambda cid, s: got.append(s))
    kill(signal.SIGUSR1)  # blocked: pending until the loop's wait reads it
    loop.delay(0, lambda cid: loop.cancel(callback_id))
    loop.run()
    assert got == [signal.SIGUSR1]


@pytest.mark.timeout(30)
def test_signal_wakes_a_blocking_run_at_once(loop: Driver) -> None:
    # No timer at all: run() blocks in the Context's wait (in idle slices of a second);
    # the signalfd wakes it, well before a slice would end.
    sent: list[float] = []
    got: list[float] = []

    def on_signal(cid: str, signum: int) -> None:
        got.append(time.monotonic())
        loop.cancel(cid)

    def send() -> None:
        sent.append(time.monotonic())
        kill(signal.SIGUSR1)

    loop.on_signal(signal.SIGUSR1, on_signal)
    timer = threading.Timer(0.2, send)
    timer.start()
    loop.run()
    timer.join()
    assert len(got) == 1 and got[0] - sent[0] < 0.5


def test_tick_order_defers_signals_io_timers(loop: Driver) -> None:
    a, b = socket.socketpair()
    try:
        order: list[str] = []
        ids: list[str] = []

        def note(name: str) -> Callable[..., None]:
            def fn(cid: str, *args: object) -> None:
                order.append(name)

            return fn

        ids.append(loop.on_readable(a, note("io")))
        ids.append(loop.on_signal(signal.SIGUSR1, note("signal")))
        loop.delay(0, note("timer"))
        loop.defer(note("defer"))
        b.send(b"x")
        kill(signal.SIGUSR1)

        def finish(cid: str) -> None:
            for callback_id in ids:
                loop.cancel(callback_id)

        loop.delay(0.05, finish)
        loop.run()
        assert order[:4] == ["defer", "signal", "io", "timer"]
        assert order.count("signal") == 1
    finally:
        a.close()
        b.close()


def test_register_and_cancel_many_times(loop: Driver) -> None:
    # Each first callback makes a SignalHandle (a signalfd) and each last one drops it.
    mask = blocked()
    fds_before = len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else None
    for _ in range(200):
        loop.cancel(loop.on_signal(signal.SIGUSR1, lambda cid, s: None))
    assert blocked() == mask
    if fds_before is not None:
        import gc

        gc.collect()
        assert len(os.listdir("/proc/self/fd")) <= fds_before + 2


# -- the other drivers keep the handler and the wakeup fd --------------------------------


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(SelectorsDriver, id="selectors"),
        pytest.param(
            lambda: IoPollDriver(Backend.SELECT),
            id="iopoll-select",
            marks=pytest.mark.skipif(not Backend.SELECT.is_available(), reason="no SELECT backend"),
        ),
    ],
)
def test_without_signal_handles_a_handler_and_the_wakeup_fd(make: Callable[[], Any]) -> None:
    driver = make()
    mask = blocked()
    handler = signal.getsignal(signal.SIGUSR1)
    got: list[int] = []
    callback_id = driver.on_signal(signal.SIGUSR1, lambda cid, s: got.append(s))
    assert signal.getsignal(signal.SIGUSR1) is not handler
    assert current_wakeup_fd() != -1
    assert blocked() == mask
    driver.delay(0.01, lambda cid: kill(signal.SIGUSR1))
    driver.delay(0.1, lambda cid: driver.cancel(callback_id))
    driver.run()
    assert got == [signal.SIGUSR1]
    assert signal.getsignal(signal.SIGUSR1) is handler
    assert current_wakeup_fd() == -1
    driver.close()


@pytest.mark.parametrize("backend", HANDLE_BACKENDS or [None], ids=lambda b: str(b))
def test_with_another_thread_running_a_handler_and_the_wakeup_fd(
    backend: Backend | None, recorded: list[int]
) -> None:
    """The other thread does not block SIGUSR1, so the kernel would hand the signal to it and
    a SignalHandle would never see it: the driver takes the handler and the wakeup fd."""
    if backend is None:
        pytest.skip("no backend with signal handles here")
    release = threading.Event()
    other = threading.Thread(target=release.wait)
    other.start()
    try:
        assert not only_thread()
        driver = IoPollDriver(backend)
        mask = blocked()
        got: list[int] = []
        callback_id = driver.on_signal(signal.SIGUSR1, lambda cid, s: got.append(s))
        assert signal_watchers(driver) == [] and current_wakeup_fd() != -1
        assert blocked() == mask
        driver.delay(0.01, lambda cid: kill(signal.SIGUSR1))
        driver.delay(0.2, lambda cid: driver.cancel(callback_id))
        driver.run()
        assert got == [signal.SIGUSR1]
        assert recorded == []  # the previous handler is restored, and never saw it
        driver.close()
    finally:
        release.set()
        other.join()
