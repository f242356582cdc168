"""Edges of ``on_signal``, ``TracingDriver`` and ``DriverFactory`` (SPEC 9.1) that the rest
of the loop tests do not reach, pinned on every driver.

Each case was written against a single-point mutant of ``iopoll/loop/_signals.py``,
``_tracing.py``, ``_factory.py`` or ``_registry.py`` that left every other loop test green
(13 of 62 tried; the others, the suspensions' among them, were caught, or change nothing a
user can see).  Signals are real (sent to the main thread), and each signal test checks
that the handlers, the wakeup fd and the mask are back as they were.  The pure-Python
drivers run the same tests; with ``IOPOLL_PURE_PYTHON=1`` every driver is pure.
"""

from __future__ import annotations

import re
import signal
import socket
import sys
from collections.abc import Callable, Iterator

import pytest

from every_loop_driver import EVERY_DRIVER
from iopoll.loop import (
    Driver,
    DriverFactory,
    InvalidCallbackError,
    IoPollDriver,
    SelectorsDriver,
    TracingDriver,
)
from iopoll.loop._iopoll_driver import PyIoPollDriver
from iopoll.loop._selectors_driver import PySelectorsDriver
from signal_state import current_wakeup_fd, kept_signal_state, kill_main

POSIX_SIGNALS = hasattr(signal, "SIGUSR1") and hasattr(signal, "pthread_sigmask")
needs_signals = pytest.mark.skipif(not POSIX_SIGNALS, reason="needs POSIX signals")

SIGNALS: tuple[int, ...] = (
    (signal.SIGUSR1, signal.SIGUSR2, signal.SIGRTMIN)
    if POSIX_SIGNALS and hasattr(signal, "SIGRTMIN")
    else (signal.SIGUSR1, signal.SIGUSR2)
    if POSIX_SIGNALS
    else ()
)


@pytest.fixture(params=EVERY_DRIVER)
def driver(request: pytest.FixtureRequest) -> Iterator[Driver]:
    """Each driver in turn, its callbacks cancelled and the driver closed after the test."""
    make: Callable[[], Driver] = request.param
    made = make()
    yield made
    for callback_id in made.get_identifiers():
        made.cancel(callback_id)
    made.close()  # type: ignore[attr-defined]


@pytest.fixture
def signal_state() -> Iterator[None]:
    """The test leaves the handlers, the wakeup fd and the mask as it found them (and a
    signal a broken driver left blocked and pending is ignored, not the process's end)."""
    with kept_signal_state(SIGNALS):
        yield


@pytest.fixture
def recorded(signal_state: None) -> Iterator[list[int]]:
    """A Python handler for the test signals that records what reaches it."""
    got: list[int] = []

    def handler(signum: int, frame: object) -> None:
        got.append(signum)

    previous = {signum: signal.signal(signum, handler) for signum in SIGNALS}
    yield got
    for signum, old in previous.items():
        signal.signal(signum, old)


# -- signals -------------------------------------------------------------------------------------


@needs_signals
def test_the_last_cancel_gives_back_a_previous_wakeup_fd(
    driver: Driver, recorded: list[int]
) -> None:
    """A wakeup fd the application set before the first ``on_signal`` is set again after
    the last callback is cancelled, and the next signal writes its byte there."""
    reader, writer = socket.socketpair()
    reader.setblocking(False)
    writer.setblocking(False)
    try:
        signal.set_wakeup_fd(writer.fileno())
        got: list[int] = []
        callback_id = driver.on_signal(signal.SIGUSR2, lambda cid, signum: got.append(signum))
        driver.delay(0.01, lambda cid: kill_main(signal.SIGUSR2))
        driver.delay(0.1, lambda cid: driver.cancel(callback_id))
        driver.run()
        assert got == [signal.SIGUSR2]
        assert current_wakeup_fd() == writer.fileno()
        assert signal.getsignal(signal.SIGUSR2) is not signal.SIG_DFL  # kill_main() ends no test
        try:
            while reader.recv(4096):  # what the signal wrote while the driver held it, if any
                pass
        except BlockingIOError:
            pass
        kill_main(signal.SIGUSR2)
        assert recorded == [signal.SIGUSR2]
        assert reader.recv(16) == bytes([signal.SIGUSR2])
    finally:
        signal.set_wakeup_fd(-1)
        reader.close()
        writer.close()


@needs_signals
def test_a_given_back_wakeup_fd_still_warns_when_full(
    driver: Driver, recorded: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The application's wakeup fd is given back as it was set, with the warning on a full
    buffer (the default), not with the silence the driver sets for its own fd: a signal
    that finds it full is reported through ``sys.unraisablehook``."""
    reported: list[BaseException | None] = []
    monkeypatch.setattr(sys, "unraisablehook", lambda info: reported.append(info.exc_value))
    reader, writer = socket.socketpair()
    reader.setblocking(False)
    writer.setblocking(False)
    try:
        signal.set_wakeup_fd(writer.fileno())
        callback_id = driver.on_signal(signal.SIGUSR2, lambda cid, signum: None)
        driver.delay(0.01, lambda cid: driver.cancel(callback_id))
        driver.run()
        # (not read back here: current_wakeup_fd() would set it again, with the warning)
        assert signal.getsignal(signal.SIGUSR2) is not signal.SIG_DFL  # kill_main() ends no test
        try:
            while True:
                writer.send(b"x" * 65536)
        except BlockingIOError:
            pass
        kill_main(signal.SIGUSR2)
        assert recorded == [signal.SIGUSR2]
        assert len(reported) == 1 and isinstance(reported[0], BlockingIOError)
    finally:
        signal.set_wakeup_fd(-1)
        reader.close()
        writer.close()


@needs_signals
@pytest.mark.skipif(not hasattr(signal, "SIGRTMIN"), reason="no real-time signals here")
def test_a_real_time_signal_sent_twice_runs_its_callback_twice(
    driver: Driver, signal_state: None
) -> None:
    """Real-time signals queue: sent twice before the loop runs, one is not lost (a
    ``SignalHandle`` hands over every delivery, the handler sees each)."""
    got: list[int] = []
    callback_id = driver.on_signal(signal.SIGRTMIN, lambda cid, signum: got.append(signum))
    kill_main(signal.SIGRTMIN)
    kill_main(signal.SIGRTMIN)
    driver.delay(0.05, lambda cid: driver.cancel(callback_id))
    driver.run()
    assert got == [signal.SIGRTMIN, signal.SIGRTMIN]


@needs_signals
def test_close_gives_back_a_signal_that_several_callbacks_hold(
    driver: Driver, recorded: list[int]
) -> None:
    """``close()`` with several callbacks still registered for one signal restores its
    handler (and the mask and wakeup fd) as the last ``cancel`` would."""
    handler = signal.getsignal(signal.SIGUSR1)
    for _ in range(3):
        driver.on_signal(signal.SIGUSR1, lambda cid, signum: None)
    driver.on_signal(signal.SIGUSR2, lambda cid, signum: None)
    driver.close()  # type: ignore[attr-defined]
    assert signal.getsignal(signal.SIGUSR1) is handler
    kill_main(signal.SIGUSR1)
    assert recorded == [signal.SIGUSR1]


@needs_signals
def test_a_signal_taken_for_a_cancelled_callback_never_reaches_a_later_one(
    driver: Driver, signal_state: None
) -> None:
    """A signal that arrived while a callback was registered, which was cancelled before
    the loop ran, is gone with it: a callback registered for that signal afterwards is not
    called with it."""
    stale: list[int] = []
    later: list[int] = []
    first = driver.on_signal(signal.SIGUSR1, lambda cid, signum: stale.append(signum))
    kill_main(signal.SIGUSR1)
    driver.cancel(first)
    second = driver.on_signal(signal.SIGUSR1, lambda cid, signum: later.append(signum))
    driver.delay(0.05, lambda cid: driver.cancel(second))
    driver.run()
    assert stale == []
    assert later == []


# -- TracingDriver -------------------------------------------------------------------------------


def _inner_makers() -> list[object]:
    """The drivers a ``TracingDriver`` wraps here: every class, on its default backend."""
    return [
        pytest.param(IoPollDriver, id="iopoll"),
        pytest.param(PyIoPollDriver, id="py-iopoll"),
        pytest.param(SelectorsDriver, id="selectors"),
        pytest.param(PySelectorsDriver, id="py-selectors"),
    ]


@pytest.fixture(params=_inner_makers())
def traced(request: pytest.FixtureRequest) -> Iterator[TracingDriver]:
    """A ``TracingDriver`` around each driver in turn, closed after the test."""
    make: Callable[[], Driver] = request.param
    made = TracingDriver(make())
    yield made
    made.close()


def _innermost_line(trace: str | None) -> int:
    """The line of a trace's innermost frame (in this file)."""
    assert trace is not None
    file, line = re.findall(r'^  File "(.*)", line (\d+)', trace, re.MULTILINE)[-1]
    assert file == __file__
    return int(line)


def test_tracing_dump_follows_disable_enable_unreference_reference(
    traced: TracingDriver,
) -> None:
    """``dump()`` lists what keeps ``run()`` going: a disabled or unreferenced callback is
    not listed, and is again once enabled or referenced, as ``run()`` waits for it again."""
    callback_id = traced.delay(10, lambda cid: None)
    assert repr(callback_id) in traced.dump()
    traced.disable(callback_id)
    assert traced.dump() == "No enabled, referenced callbacks keep the loop alive.\n"
    traced.enable(callback_id)
    assert repr(callback_id) in traced.dump()
    traced.unreference(callback_id)
    assert traced.dump() == "No enabled, referenced callbacks keep the loop alive.\n"
    traced.reference(callback_id)
    assert repr(callback_id) in traced.dump()
    traced.cancel(callback_id)
    assert traced.dump() == "No enabled, referenced callbacks keep the loop alive.\n"


def test_tracing_keeps_the_first_cancellation_trace(traced: TracingDriver) -> None:
    """``cancellation_trace()`` is where the id was first cancelled: a second ``cancel``
    of it (allowed, it does nothing) does not replace that line."""
    callback_id = traced.delay(10, lambda cid: None)
    traced.cancel(callback_id)
    first = sys._getframe().f_lineno - 1
    traced.cancel(callback_id)
    assert _innermost_line(traced.cancellation_trace(callback_id)) == first


# -- DriverFactory -------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [":IoPollDriver", "iopoll.loop:", ":", " : "])
def test_factory_refuses_a_value_missing_its_module_or_class(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    """``IOPOLL_LOOP_DRIVER`` with no module or no class before or after the colon is a
    ``ValueError`` that names the variable (not ``importlib``'s "Empty module name")."""
    monkeypatch.setenv("IOPOLL_LOOP_DRIVER", value)
    monkeypatch.delenv("IOPOLL_LOOP_DEBUG_TRACE", raising=False)
    with pytest.raises(ValueError, match=r"IOPOLL_LOOP_DRIVER=.* must have the form"):
        DriverFactory().create()


@pytest.mark.parametrize("kind", ["defer", "delay"])
def test_tracing_says_the_loop_ended_a_callback_that_ran(traced: TracingDriver, kind: str) -> None:
    """A defer or delay callback that ran is cancelled by the loop: its id has a
    cancellation trace saying so, and ``enable()`` of it notes both traces."""
    ran: list[str] = []
    callback_id = traced.defer(ran.append) if kind == "defer" else traced.delay(0, ran.append)
    traced.run()
    assert ran == [callback_id]
    assert traced.cancellation_trace(callback_id) == (
        "cancelled by the loop before it ran the callback"
    )
    with pytest.raises(InvalidCallbackError) as info:
        traced.enable(callback_id)
    notes = "\n".join(getattr(info.value, "__notes__", []))
    assert "Creation trace:" in notes
    assert "Cancellation trace:\ncancelled by the loop before it ran the callback" in notes


@pytest.mark.parametrize("given", [None, object(), IoPollDriver], ids=["None", "object", "class"])
def test_tracing_refuses_what_is_not_a_driver(given: object) -> None:
    """``TracingDriver(driver)`` takes a ``Driver`` instance: anything else (the class
    itself among them) is a ``TypeError`` naming the argument, at construction."""
    with pytest.raises(TypeError, match="driver must be a Driver"):
        TracingDriver(given)  # type: ignore[arg-type]
