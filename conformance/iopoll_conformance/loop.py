"""The driver contract of ``iopoll.loop`` (Revolt's rules, SPEC 9.1), for any ``Driver``.

Revolt's ``DriverTest`` ported to Python: ``DriverConformance`` is a mixin holding every rule
as a pytest test; subclass it once per driver, with a ``make()`` that returns a fresh driver::

    # test_my_driver.py   (run with: pytest test_my_driver.py)
    from iopoll.loop import Driver
    from iopoll_conformance.loop import DriverConformance

    from mypkg import MyDriver


    class TestMyDriver(DriverConformance):
        def make(self) -> Driver:
            return MyDriver()

The categories: liveness, timers, life cycle, introspection, invalid ids, tick ordering, run
and stop, callback arguments, errors, signals, streams, microtasks and memory.  The signal
rules send ``SIGUSR1`` and ``SIGUSR2`` to the process; the suspension rules are not here
(they need greenlet: see ``tests/test_loop_extras.py``).
"""

from __future__ import annotations

import gc
import itertools
import math
import os
import signal
import socket
import sys
import time
import tracemalloc
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from iopoll.loop import (
    CallbackType,
    Driver,
    InvalidCallbackError,
    UncaughtError,
)

__all__ = ["DriverConformance", "receive_once"]

Registrar = Callable[[Driver, Callable[..., None]], str]


def _nil(*results: object) -> None:
    """Discard what a lambda's calls return: callbacks must return None."""


def _appending(items: list[Any], value: object) -> Callable[..., None]:
    """A callback, whatever its arguments, that appends ``value`` to ``items``."""
    return lambda *args: items.append(value)


def _raising(error: Exception) -> Callable[..., None]:
    """A callback, whatever its arguments, that raises ``error``."""

    def fn(*args: object) -> None:
        raise error

    return fn


def receive_once(driver: Driver, reader: socket.socket) -> list[bytes]:
    """Watch ``reader`` with a callback that receives once, then cancels itself.

    Returns the list that callback appends what it received to.
    """
    got: list[bytes] = []

    def fn(callback_id: str, stream: Any) -> None:
        got.append(stream.recv(10))
        driver.cancel(callback_id)

    driver.on_readable(reader, fn)
    return got


def _pair() -> tuple[socket.socket, socket.socket]:
    a, b = socket.socketpair()
    a.setblocking(False)
    b.setblocking(False)
    return a, b


class DriverConformance:
    """The contract of ``iopoll.loop.Driver``, as pytest tests; subclass it per driver.

    A subclass (named ``Test...`` so that pytest collects it) must define ``make()``:

    * ``make() -> Driver`` returns a new driver, not yet run.  Each test makes its own,
      through the ``loop`` fixture; after the test, the fixture cancels every callback left
      (which restores the signal handlers) and calls the driver's ``close()`` if it has one.
      ``make()`` must change no process-wide state (a rule the suite checks).

    It may also set:

    * ``leaks = False`` for a driver that keeps a record of every callback on purpose (as
      ``TracingDriver`` does): the memory rule is then skipped.

    ``pair()``, ``registrations()``, ``writable_once()`` and ``assert_writable_runs_once()``
    are helpers for the tests, and for tests a subclass adds.
    """

    leaks = True

    def make(self) -> Driver:
        """A new driver to test (a subclass must define it)."""
        raise NotImplementedError(f"{type(self).__name__} must define make() -> Driver")

    @pytest.fixture
    def loop(self) -> Iterator[Driver]:
        """A driver from ``make()``, cleaned up after the test."""
        driver = self.make()
        self._sockets: list[socket.socket] = []
        yield driver
        for sock in self._sockets:
            sock.close()
        for callback_id in driver.get_identifiers():
            driver.cancel(callback_id)  # restores signal handlers
        close = getattr(driver, "close", None)
        if close is not None:
            close()

    def pair(self) -> tuple[socket.socket, socket.socket]:
        """A non-blocking socketpair, closed after the test."""
        a, b = _pair()
        self._sockets += [a, b]
        return a, b

    def registrations(self, loop: Driver) -> dict[str, Registrar]:
        """One registration per callback type (Revolt's provideRegistrationArgs)."""
        reader, writer = self.pair()
        return {
            "defer": lambda d, fn: d.defer(fn),
            "delay": lambda d, fn: d.delay(0.005, fn),
            "repeat": lambda d, fn: d.repeat(0.005, fn),
            "writable": lambda d, fn: d.on_writable(writer, fn),
            "readable": lambda d, fn: d.on_readable(reader, fn),
            "signal": lambda d, fn: d.on_signal(signal.SIGUSR1, fn),
        }

    # -- liveness -------------------------------------------------------------------------

    @pytest.mark.parametrize(
        "kind", ["defer", "delay", "repeat", "writable", "readable", "signal"]
    )
    def test_unreferenced_callback_does_not_keep_loop_alive(self, loop: Driver, kind: str) -> None:
        register = self.registrations(loop)[kind]
        calls: list[str] = []
        callback_id = register(loop, lambda cid, *rest: calls.append(cid))
        loop.unreference(callback_id)
        started = time.monotonic()
        loop.run()
        assert time.monotonic() - started < 0.5
        assert calls == []

    @pytest.mark.parametrize("kind", ["delay", "writable"])
    def test_unreference_then_reference_restores_liveness(self, loop: Driver, kind: str) -> None:
        register = self.registrations(loop)[kind]
        calls: list[str] = []

        def fn(cid: str, *rest: object) -> None:
            calls.append(cid)
            loop.cancel(cid)

        callback_id = register(loop, fn)
        loop.unreference(callback_id)
        loop.reference(callback_id)
        loop.run()
        assert calls == [callback_id]

    def test_unreferenced_defer_runs_while_loop_is_alive(self, loop: Driver) -> None:
        calls: list[str] = []
        deferred = loop.unreference(loop.defer(lambda cid: calls.append("defer")))
        loop.delay(0.01, lambda cid: calls.append("delay"))
        loop.run()
        assert calls == ["defer", "delay"]
        assert deferred not in loop.get_identifiers()

    def test_loop_ends_with_only_unreferenced_callbacks(self, loop: Driver) -> None:
        loop.unreference(loop.repeat(0.001, lambda cid: None))
        loop.unreference(loop.on_writable(self.pair()[0], lambda cid, s: None))
        ran: list[int] = []
        loop.delay(0.02, lambda cid: ran.append(1))
        loop.run()
        assert ran == [1]
        assert len(loop.get_identifiers()) == 2

    def test_run_with_nothing_returns_at_once(self, loop: Driver) -> None:
        started = time.monotonic()
        loop.run()
        assert time.monotonic() - started < 0.1

    # -- timers ---------------------------------------------------------------------------

    def test_delay_counts_from_creation(self, loop: Driver) -> None:
        fired: list[float] = []
        start = time.monotonic()
        loop.delay(0.1, lambda cid: fired.append(time.monotonic()))
        time.sleep(0.06)  # time before run() counts
        loop.run()
        assert 0.095 <= fired[0] - start < 0.2

    def test_delay_created_after_blocking_counts_from_creation(self, loop: Driver) -> None:
        fired: list[float] = []
        marks: list[float] = []

        def block(cid: str) -> None:
            time.sleep(0.05)
            marks.append(time.monotonic())
            loop.delay(0.05, lambda c: fired.append(time.monotonic()))

        loop.defer(block)
        loop.run()
        assert 0.045 <= fired[0] - marks[0] < 0.15

    def test_expired_timer_does_not_block(self, loop: Driver) -> None:
        loop.delay(0.001, lambda cid: None)
        time.sleep(0.01)
        started = time.monotonic()
        loop.run()
        assert time.monotonic() - started < 0.05

    def test_repeat_zero_does_not_starve_other_timers(self, loop: Driver) -> None:
        counts = {"repeat": 0}

        def repeat(cid: str) -> None:
            counts["repeat"] += 1

        repeat_id = loop.repeat(0, repeat)
        loop.delay(0.02, lambda cid: loop.cancel(repeat_id))
        loop.run()
        assert counts["repeat"] > 1

    def test_two_repeat_zero_timers_alternate(self, loop: Driver) -> None:
        order: list[str] = []

        def make(name: str) -> Callable[[str], None]:
            def fn(cid: str) -> None:
                order.append(name)
                if len(order) >= 6:
                    loop.stop()

            return fn

        loop.repeat(0, make("a"))
        loop.repeat(0, make("b"))
        loop.run()
        assert order[:6] == ["a", "b"] * 3

    def test_repeat_runs_at_most_once_per_tick(self, loop: Driver) -> None:
        ticks: list[str] = []
        loop.repeat(0, lambda cid: ticks.append("repeat"))
        loop.delay(0, lambda cid: loop.stop())
        loop.run()
        # tick 1: (nothing for the timer: activated), tick 2 at most once, then stop.
        assert ticks.count("repeat") <= 2

    def test_repeat_rearms_before_its_callback_runs(self, loop: Driver) -> None:
        starts: list[float] = []

        def slow(cid: str) -> None:
            starts.append(time.monotonic())
            time.sleep(0.04)
            if len(starts) == 3:
                loop.cancel(cid)

        loop.repeat(0.06, slow)
        loop.run()
        gaps = [later - earlier for earlier, later in itertools.pairwise(starts)]
        # Re-armed from the clock before the call: 0.06 apart, not 0.06 + 0.04.
        assert all(0.055 <= gap < 0.095 for gap in gaps), gaps

    def test_enable_rearms_a_timer_from_now(self, loop: Driver) -> None:
        fired: list[float] = []
        delay_id = loop.disable(loop.delay(0.05, lambda cid: fired.append(time.monotonic())))
        time.sleep(0.06)  # past its first expiration while disabled
        enabled_at = time.monotonic()
        loop.enable(delay_id)
        loop.run()
        assert fired[0] - enabled_at >= 0.045

    @pytest.mark.parametrize("seconds", [math.inf, 1e300, sys.maxsize, 2**64, 10**400])
    def test_huge_delay_never_fires_nor_overflows(self, loop: Driver, seconds: float) -> None:
        fired: list[str] = []
        delay_id = loop.delay(seconds, fired.append)
        repeat_id = loop.repeat(seconds, fired.append)
        loop.delay(0.01, lambda cid: loop.stop())
        loop.run()
        assert fired == []
        assert loop.is_enabled(delay_id) and loop.is_enabled(repeat_id)

    @pytest.mark.parametrize("bad", [-1, -0.001, math.nan, -math.inf])
    def test_negative_or_nan_delay_is_value_error(self, loop: Driver, bad: float) -> None:
        with pytest.raises(ValueError, match="seconds"):
            loop.delay(bad, lambda cid: None)
        with pytest.raises(ValueError, match="interval"):
            loop.repeat(bad, lambda cid: None)
        assert loop.get_identifiers() == []

    def test_delay_of_wrong_type_is_type_error(self, loop: Driver) -> None:
        with pytest.raises(TypeError, match="seconds"):
            loop.delay("1", lambda cid: None)  # type: ignore[arg-type]

    def test_timers_fire_in_expiration_order(self, loop: Driver) -> None:
        order: list[float] = []
        for seconds in (0.03, 0.01, 0.02, 0.0):
            loop.delay(seconds, _appending(order, seconds))
        loop.run()
        assert order == [0.0, 0.01, 0.02, 0.03]

    # -- life cycle -------------------------------------------------------------------------

    def test_reenabled_defer_runs_in_later_tick(self, loop: Driver) -> None:
        calls: list[str] = []
        deferred = loop.disable(loop.defer(lambda cid: calls.append("defer")))
        loop.defer(lambda cid: _nil(loop.enable(deferred)))
        loop.run()
        assert calls == ["defer"]

    @pytest.mark.parametrize(
        "kind", ["defer", "delay", "repeat", "writable", "readable", "signal"]
    )
    def test_disable_then_cancel(self, loop: Driver, kind: str) -> None:
        calls: list[str] = []
        callback_id = self.registrations(loop)[kind](loop, lambda cid, *r: calls.append(cid))
        loop.disable(callback_id)
        loop.cancel(callback_id)
        loop.run()
        assert calls == [] and loop.get_identifiers() == []

    def test_disable_prevents_and_enable_allows_invocation(self, loop: Driver) -> None:
        calls: list[str] = []
        delay_id = loop.disable(loop.delay(0.001, lambda cid: calls.append("delay")))
        loop.run()
        assert calls == []
        loop.enable(delay_id)
        loop.run()
        assert calls == ["delay"]

    def test_disable_in_same_tick_prevents_later_callback(self, loop: Driver) -> None:
        calls: list[str] = []
        later: list[str] = []

        def first(cid: str) -> None:
            calls.append("first")
            loop.disable(later[0])

        loop.defer(first)
        later.append(loop.defer(lambda cid: calls.append("second")))
        loop.run()
        assert calls == ["first"]

    def test_cancel_removes_pending_timer(self, loop: Driver) -> None:
        calls: list[str] = []
        delay_id = loop.delay(0.01, calls.append)
        loop.cancel(delay_id)
        loop.run()
        assert calls == [] and delay_id not in loop.get_identifiers()

    # -- introspection ------------------------------------------------------------------------

    @pytest.mark.parametrize(
        "kind", ["defer", "delay", "repeat", "writable", "readable", "signal"]
    )
    def test_is_referenced_and_is_enabled(self, loop: Driver, kind: str) -> None:
        callback_id = self.registrations(loop)[kind](loop, lambda cid, *r: None)
        assert loop.is_enabled(callback_id) and loop.is_referenced(callback_id)
        loop.unreference(callback_id)
        assert not loop.is_referenced(callback_id)
        loop.reference(callback_id)
        assert loop.is_referenced(callback_id)
        loop.disable(callback_id)
        assert not loop.is_enabled(callback_id)
        loop.disable(callback_id)  # twice: no side effect
        loop.enable(callback_id)
        loop.enable(callback_id)  # already enabled: no side effect
        assert loop.is_enabled(callback_id)
        assert loop.get_type(callback_id) is {
            "defer": CallbackType.DEFER,
            "delay": CallbackType.DELAY,
            "repeat": CallbackType.REPEAT,
            "writable": CallbackType.WRITABLE,
            "readable": CallbackType.READABLE,
            "signal": CallbackType.SIGNAL,
        }[kind]
        loop.cancel(callback_id)
        with pytest.raises(InvalidCallbackError):
            loop.is_enabled(callback_id)

    def test_get_identifiers(self, loop: Driver) -> None:
        first = loop.defer(lambda cid: None)
        second = loop.disable(loop.delay(1, lambda cid: None))
        assert loop.get_identifiers() == [first, second]
        loop.cancel(first)
        assert loop.get_identifiers() == [second]
        third = loop.defer(lambda cid: None)
        assert loop.get_identifiers() == [second, third]
        assert all(isinstance(cid, str) for cid in loop.get_identifiers())
        assert len({first, second, third}) == 3

    def test_debug_info(self, loop: Driver) -> None:
        callback_id = loop.unreference(loop.delay(1, lambda cid: None))
        assert loop.debug_info() == {
            callback_id: {"type": CallbackType.DELAY, "enabled": True, "referenced": False}
        }

    # -- invalid ids ----------------------------------------------------------------------------

    @pytest.mark.parametrize(
        "method", ["enable", "reference", "get_type", "is_enabled", "is_referenced"]
    )
    def test_unknown_id_raises(self, loop: Driver, method: str) -> None:
        with pytest.raises(InvalidCallbackError, match="nope") as info:
            getattr(loop, method)("nope")
        assert info.value.callback_id == "nope"
        assert info.value.code == InvalidCallbackError.INVALID_IDENTIFIER

    def test_unknown_id_is_ignored(self, loop: Driver) -> None:
        assert loop.disable("nope") == "nope"
        assert loop.unreference("nope") == "nope"
        assert loop.cancel("nope") is None

    @pytest.mark.parametrize("kind", ["defer", "delay"])
    def test_one_shot_id_is_dead_in_its_callback(self, loop: Driver, kind: str) -> None:
        errors: list[InvalidCallbackError] = []

        def fn(cid: str) -> None:
            assert cid not in loop.get_identifiers()
            try:
                loop.enable(cid)
            except InvalidCallbackError as error:
                errors.append(error)

        self.registrations(loop)[kind](loop, fn)
        loop.run()
        assert len(errors) == 1

    # -- tick ordering --------------------------------------------------------------------------

    def test_tick_ordering(self, loop: Driver) -> None:
        log: list[str] = []
        reader, writer = self.pair()
        writer.send(b"x")

        def tick1(cid: str) -> None:
            log.append("defer1")
            loop.defer(lambda c: log.append("defer2-next-tick"))

        loop.delay(0, lambda cid: log.append("timer"))
        loop.defer(tick1)

        def readable(cid: str, stream: Any) -> None:
            log.append("io")
            loop.cancel(cid)

        loop.on_readable(reader, readable)
        loop.run()
        # tick 1: defers, then I/O, then due timers; the defer made in tick 1 runs in tick 2.
        assert log == ["defer1", "io", "timer", "defer2-next-tick"]

    def test_nothing_runs_in_the_tick_it_was_enabled_in(self, loop: Driver) -> None:
        log: list[str] = []
        delay_id = loop.disable(loop.delay(0, lambda cid: log.append("delay")))

        def first(cid: str) -> None:
            loop.enable(delay_id)
            loop.defer(lambda c: log.append("defer2"))

        loop.defer(first)
        loop.run()
        assert log == ["defer2", "delay"] or log == ["delay", "defer2"]
        assert log.count("delay") == 1

    def test_disable_then_enable_is_a_noop(self, loop: Driver) -> None:
        log: list[str] = []
        deferred = loop.defer(lambda cid: log.append("d"))
        loop.disable(deferred)
        loop.enable(deferred)
        loop.run()
        assert log == ["d"]

    def test_enabling_a_defer_takes_effect_next_tick(self, loop: Driver) -> None:
        log: list[str] = []
        deferred = loop.disable(loop.defer(lambda cid: log.append("enabled-defer")))

        def first(cid: str) -> None:
            log.append("first")
            loop.enable(deferred)

        loop.defer(first)
        loop.defer(lambda cid: log.append("sibling"))
        loop.run()
        assert log == ["first", "sibling", "enabled-defer"]

    # -- run and stop ---------------------------------------------------------------------------

    def test_stop_lets_tick_finish_and_skips_later_timers(self, loop: Driver) -> None:
        log: list[str] = []

        def first(cid: str) -> None:
            loop.stop()
            log.append("a")

        loop.defer(first)
        loop.defer(lambda cid: log.append("b"))
        later = loop.delay(0.2, lambda cid: log.append("later"))
        loop.run()
        assert log == ["a", "b"]
        assert later in loop.get_identifiers()
        loop.run()  # run() after stop() resumes pending work
        assert log == ["a", "b", "later"]

    def test_run_returns_when_work_started_from_defer_is_done(self, loop: Driver) -> None:
        log: list[str] = []
        loop.defer(lambda cid: _nil(loop.delay(0.01, lambda c: log.append("delay"))))
        loop.run()
        assert log == ["delay"] and not loop.is_running()

    def test_repeat_until_it_cancels_itself(self, loop: Driver) -> None:
        counter = [0]

        def fn(cid: str) -> None:
            counter[0] += 1
            if counter[0] == 5:
                loop.cancel(cid)

        loop.repeat(0.001, fn)
        loop.run()
        assert counter[0] == 5

    def test_run_while_running_is_runtime_error(self, loop: Driver) -> None:
        loop.defer(lambda cid: loop.run())
        with pytest.raises(UncaughtError) as info:
            loop.run()
        assert isinstance(info.value.__cause__, RuntimeError)
        assert "already running" in str(info.value.__cause__)

    def test_is_running(self, loop: Driver) -> None:
        seen: list[bool] = []
        loop.defer(lambda cid: seen.append(loop.is_running()))
        assert not loop.is_running()
        loop.run()
        assert seen == [True] and not loop.is_running()

    # -- callback arguments ------------------------------------------------------------------------

    @pytest.mark.parametrize("kind", ["defer", "delay", "repeat"])
    def test_timer_callbacks_get_their_id(self, loop: Driver, kind: str) -> None:
        got: list[str] = []

        def fn(cid: str) -> None:
            got.append(cid)
            loop.cancel(cid)

        callback_id = self.registrations(loop)[kind](loop, fn)
        loop.run()
        assert got == [callback_id]

    @pytest.mark.parametrize("writable", [False, True])
    def test_stream_callbacks_get_id_and_same_stream(self, loop: Driver, writable: bool) -> None:
        reader, writer = self.pair()
        writer.send(b"x")
        got: list[tuple[str, Any]] = []

        def fn(cid: str, stream: Any) -> None:
            got.append((cid, stream))
            loop.cancel(cid)

        stream = writer if writable else reader
        register = loop.on_writable if writable else loop.on_readable
        callback_id = register(stream, fn)
        loop.run()
        assert got == [(callback_id, stream)] and got[0][1] is stream

    def test_int_fd_stream_is_passed_back(self, loop: Driver) -> None:
        _reader, writer = self.pair()
        got: list[Any] = []

        def fn(cid: str, stream: Any) -> None:
            got.append(stream)
            loop.cancel(cid)

        loop.on_writable(writer.fileno(), fn)
        loop.run()
        assert got == [writer.fileno()]

    def test_bad_stream_and_callback_arguments(self, loop: Driver) -> None:
        with pytest.raises(TypeError, match="stream"):
            loop.on_readable(object(), lambda cid, s: None)
        with pytest.raises(ValueError, match="stream"):
            loop.on_readable(-1, lambda cid, s: None)
        closed, _ = self.pair()
        closed.close()
        with pytest.raises(ValueError, match="stream"):
            loop.on_writable(closed, lambda cid, s: None)
        with pytest.raises(TypeError, match="callable"):
            loop.defer(42)  # type: ignore[arg-type]
        assert loop.get_identifiers() == []

    def test_async_def_is_refused_at_registration(self, loop: Driver) -> None:
        async def coroutine_function(cid: str) -> None:
            pass

        with pytest.raises(TypeError, match="async def"):
            loop.defer(coroutine_function)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="async def"):
            loop.delay(0, coroutine_function)  # type: ignore[arg-type]
        assert loop.get_identifiers() == []

    # -- errors --------------------------------------------------------------------------------

    @pytest.mark.parametrize(
        "kind", ["defer", "delay", "repeat", "writable", "readable", "signal"]
    )
    def test_exception_ends_run_as_uncaught_error(self, loop: Driver, kind: str) -> None:
        error = ValueError(f"from {kind}")

        def fn(cid: str, *rest: object) -> None:
            raise error

        self.registrations(loop)[kind](loop, fn)
        if kind == "readable":
            self._sockets[-1].send(b"x")  # the writer of the pair
        if kind == "signal":
            loop.defer(lambda cid: os.kill(os.getpid(), signal.SIGUSR1))
        with pytest.raises(UncaughtError) as info:
            loop.run()
        assert info.value.__cause__ is error
        assert "ValueError" in str(info.value) and f"from {kind}" in str(info.value)

    def test_error_handler_receives_exceptions(self, loop: Driver) -> None:
        caught: list[Exception] = []
        assert loop.set_error_handler(caught.append) is None
        assert loop.get_error_handler() == caught.append
        errors = [KeyError("a"), ValueError("b")]
        for error in errors:
            loop.defer(_raising(error))
        loop.run()
        assert caught == errors
        previous = loop.set_error_handler(None)
        assert previous == caught.append and loop.get_error_handler() is None

    def test_error_handler_that_raises_ends_run(self, loop: Driver) -> None:
        handler_error = RuntimeError("handler")

        def handler(exc: Exception) -> None:
            raise handler_error

        loop.set_error_handler(handler)
        later: list[str] = []
        loop.defer(lambda cid: _nil(1 / 0))
        loop.delay(0.05, later.append)
        with pytest.raises(UncaughtError) as info:
            loop.run()
        assert info.value.__cause__ is handler_error
        assert "error handler" in str(info.value)
        assert later == []

    def test_uncaught_error_is_rethrown_unchanged(self, loop: Driver) -> None:
        original = UncaughtError("original")

        def fn(cid: str) -> None:
            raise original

        loop.defer(fn)
        with pytest.raises(UncaughtError) as info:
            loop.run()
        assert info.value is original

    def test_non_none_return_is_invalid_callback_error(self, loop: Driver) -> None:
        callback_id = loop.defer(lambda cid: 42)  # type: ignore[arg-type]
        with pytest.raises(UncaughtError) as info:
            loop.run()
        cause = info.value.__cause__
        assert isinstance(cause, InvalidCallbackError)
        assert cause.callback_id == callback_id
        assert cause.code == InvalidCallbackError.NONNULL_RETURN
        assert "async def" in str(cause)

    def test_returned_coroutine_is_closed_without_warning(self, loop: Driver) -> None:
        import warnings

        async def work() -> None:
            pass

        coroutines: list[Any] = []

        def fn(cid: str) -> Any:
            coroutines.append(work())
            return coroutines[-1]

        loop.defer(fn)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            with pytest.raises(UncaughtError) as info:
                loop.run()
        assert isinstance(info.value.__cause__, InvalidCallbackError)
        assert coroutines[0].cr_frame is None  # closed

    def test_keyboard_interrupt_propagates_unwrapped(self, loop: Driver) -> None:
        def fn(cid: str) -> None:
            raise KeyboardInterrupt

        loop.defer(fn)
        with pytest.raises(KeyboardInterrupt):
            loop.run()
        assert not loop.is_running()

    # -- signals ----------------------------------------------------------------------------------

    def test_signal_callback(self, loop: Driver) -> None:
        got: list[tuple[str, int]] = []

        def on_signal(cid: str, signum: int) -> None:
            got.append((cid, signum))
            loop.cancel(cid)

        callback_id = loop.on_signal(signal.SIGUSR1, on_signal)
        loop.delay(0.01, lambda cid: os.kill(os.getpid(), signal.SIGUSR1))
        loop.run()
        assert got == [(callback_id, signal.SIGUSR1)]

    def test_several_callbacks_per_signal_and_disabled_ones(self, loop: Driver) -> None:
        got: list[str] = []
        ids: list[str] = []
        for name in ("a", "b", "c"):
            ids.append(loop.on_signal(signal.SIGUSR2, _appending(got, name)))
        loop.disable(ids[1])
        loop.cancel(ids[2])

        def finish(cid: str) -> None:
            for callback_id in ids:
                loop.cancel(callback_id)

        loop.delay(0.01, lambda cid: os.kill(os.getpid(), signal.SIGUSR2))
        loop.delay(0.1, finish)
        loop.run()
        assert got == ["a"]

    def test_signal_callback_created_disabled_then_enabled(self, loop: Driver) -> None:
        got: list[int] = []
        callback_id = loop.disable(loop.on_signal(signal.SIGUSR1, lambda cid, s: got.append(s)))
        loop.defer(lambda cid: _nil(loop.enable(callback_id)))
        loop.delay(0.02, lambda cid: os.kill(os.getpid(), signal.SIGUSR1))
        loop.delay(0.1, lambda cid: loop.cancel(callback_id))
        loop.run()
        assert got == [signal.SIGUSR1]

    def test_signal_state_installed_with_first_restored_with_last(self, loop: Driver) -> None:
        def previous(signum: int, frame: object) -> None:
            pass

        old = signal.signal(signal.SIGUSR1, previous)
        try:
            assert signal.set_wakeup_fd(-1) == -1
            first = loop.on_signal(signal.SIGUSR1, lambda cid, s: None)
            second = loop.on_signal(signal.SIGUSR1, lambda cid, s: None)
            assert signal.getsignal(signal.SIGUSR1) is not previous
            wakeup = signal.set_wakeup_fd(-1)
            signal.set_wakeup_fd(wakeup)
            assert wakeup != -1
            loop.cancel(first)
            assert signal.getsignal(signal.SIGUSR1) is not previous
            loop.cancel(second)
            assert signal.getsignal(signal.SIGUSR1) is previous
            assert signal.set_wakeup_fd(-1) == -1
        finally:
            signal.signal(signal.SIGUSR1, old)

    def test_creating_a_driver_changes_no_signal_state(self) -> None:
        before = signal.getsignal(signal.SIGUSR1), signal.getsignal(signal.SIGINT)
        driver = self.make()
        assert (signal.getsignal(signal.SIGUSR1), signal.getsignal(signal.SIGINT)) == before
        assert signal.set_wakeup_fd(-1) == -1
        getattr(driver, "close", lambda: None)()

    def test_signal_outside_main_thread_is_unsupported(self, loop: Driver) -> None:
        import threading

        from iopoll.loop import UnsupportedFeatureError

        errors: list[BaseException] = []

        def worker() -> None:
            try:
                loop.on_signal(signal.SIGUSR1, lambda cid, s: None)
            except BaseException as exc:
                errors.append(exc)

        thread = threading.Thread(target=worker)
        thread.start()
        thread.join()
        assert len(errors) == 1 and isinstance(errors[0], UnsupportedFeatureError)
        assert loop.get_identifiers() == []

    # -- streams ----------------------------------------------------------------------------------

    @staticmethod
    def writable_once(loop: Driver, writer: socket.socket, got: list[str]) -> str:
        """Watch ``writer`` with a callback that appends its id to ``got``, then cancels."""

        def fn(cid: str, stream: Any) -> None:
            got.append(cid)
            loop.cancel(cid)

        return loop.on_writable(writer, fn)

    def assert_writable_runs_once(self, loop: Driver, writer: socket.socket) -> None:
        """Run ``loop`` with ``writable_once()`` on ``writer``: its callback must run once."""
        got: list[str] = []
        self.writable_once(loop, writer, got)
        loop.run()
        assert len(got) == 1

    def test_on_writable_fires(self, loop: Driver) -> None:
        _, writer = self.pair()
        self.assert_writable_runs_once(loop, writer)

    def test_disabled_writable_is_silent_until_enabled(self, loop: Driver) -> None:
        _, writer = self.pair()
        got: list[str] = []
        callback_id = loop.disable(self.writable_once(loop, writer, got))

        def enable(cid: str) -> None:
            got.append("enable")
            loop.enable(callback_id)

        loop.delay(0.02, enable)
        loop.run()
        assert got == ["enable", callback_id]

    def test_several_callbacks_per_fd_toggled_independently(self, loop: Driver) -> None:
        reader, writer = self.pair()
        writer.send(b"x")
        counts = {"r1": 0, "r2": 0, "w1": 0, "w2": 0}

        def count(name: str) -> Callable[[str, Any], None]:
            return lambda cid, s: counts.__setitem__(name, counts[name] + 1)

        r1 = loop.on_readable(reader, count("r1"))
        r2 = loop.on_readable(reader, count("r2"))
        w1 = loop.on_writable(reader, count("w1"))
        w2 = loop.on_writable(reader, count("w2"))
        loop.delay(0, lambda cid: loop.stop())
        loop.run()
        assert counts == {"r1": 1, "r2": 1, "w1": 1, "w2": 1}
        loop.disable(r1)
        loop.disable(w2)
        loop.delay(0, lambda cid: loop.stop())
        loop.run()
        assert counts == {"r1": 1, "r2": 2, "w1": 2, "w2": 1}
        loop.disable(r2)
        loop.disable(w1)
        loop.enable(r1)
        loop.delay(0, lambda cid: loop.stop())
        loop.run()
        assert counts == {"r1": 2, "r2": 2, "w1": 2, "w2": 1}
        reader.recv(10)
        for callback_id in (r1, r2, w1, w2):
            loop.cancel(callback_id)

    def test_refused_connect_reports_writable_once(self, loop: Driver) -> None:
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        port = listener.getsockname()[1]
        listener.close()  # nothing listens there now
        client = socket.socket()
        self._sockets.append(client)
        client.setblocking(False)
        try:
            client.connect(("127.0.0.1", port))
        except (BlockingIOError, ConnectionRefusedError):
            pass
        got: list[int] = []

        def fn(cid: str, sock: Any) -> None:
            got.append(sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR))
            loop.cancel(cid)

        loop.on_writable(client, fn)
        loop.run()
        assert len(got) == 1

    def test_hangup_wakes_readers_and_writers(self, loop: Driver) -> None:
        reader, writer = self.pair()
        writer.send(b"unread")
        got: list[str] = []
        self.writable_once(loop, writer, got)
        reader.close()  # the writer's peer is gone: error and hang-up on the writer
        self._sockets.remove(reader)
        loop.run()
        assert len(got) == 1

    def test_cancel_after_stream_is_closed(self, loop: Driver) -> None:
        reader, writer = self.pair()
        callback_id = loop.on_readable(reader, lambda cid, s: None)
        loop.delay(0, lambda cid: loop.stop())
        loop.run()  # the callback is active in the backend now
        reader.close()
        loop.cancel(callback_id)
        assert callback_id not in loop.get_identifiers()
        self.assert_writable_runs_once(loop, writer)

    def test_stream_closed_and_fd_reused(self, loop: Driver) -> None:
        reader, _writer = self.pair()
        stale = loop.on_readable(reader, lambda cid, s: None)
        loop.delay(0, lambda cid: loop.stop())
        loop.run()
        reader.close()
        new_reader, new_writer = self.pair()
        got = receive_once(loop, new_reader)
        new_writer.send(b"new")
        loop.unreference(stale)
        loop.run()
        assert got == [b"new"]
        loop.cancel(stale)

    # -- microtasks --------------------------------------------------------------------------------

    def test_microtasks_run_after_each_callback(self, loop: Driver) -> None:
        log: list[int] = []

        def first(cid: str) -> None:
            log.append(1)
            loop.queue(log.append, 2)

            def third() -> None:
                log.append(3)
                loop.queue(log.append, 4)

            loop.queue(third)

        loop.defer(first)
        loop.defer(lambda cid: log.append(5))
        loop.queue(log.append, 0)  # before run(): first thing run() does
        loop.run()
        assert log == [0, 1, 2, 3, 4, 5]

    def test_throwing_microtask_does_not_block_the_next(self, loop: Driver) -> None:
        caught: list[Exception] = []
        loop.set_error_handler(caught.append)
        log: list[str] = []
        error = ValueError("micro")

        def bad() -> None:
            raise error

        def queue_both(cid: str) -> None:
            loop.queue(bad)
            loop.queue(log.append, "next")

        loop.defer(queue_both)
        loop.run()
        assert caught == [error] and log == ["next"]

    def test_microtask_exception_without_handler_ends_run(self, loop: Driver) -> None:
        error = ValueError("micro")

        def bad() -> None:
            raise error

        loop.queue(bad)
        loop.defer(lambda cid: None)
        with pytest.raises(UncaughtError) as info:
            loop.run()
        assert info.value.__cause__ is error

    def test_microtasks_behind_a_raising_one_run_before_run_ends(self, loop: Driver) -> None:
        # Nothing else is scheduled: the error ends run(), but not before the queue is empty,
        # those the microtasks behind it queue included (SPEC 9.1).
        error = ValueError("micro")
        log: list[str] = []

        def behind() -> None:
            log.append("behind")
            loop.queue(log.append, "queued by it")

        loop.queue(_raising(error))
        loop.queue(behind)
        with pytest.raises(UncaughtError) as info:
            loop.run()
        assert info.value.__cause__ is error
        assert log == ["behind", "queued by it"]

    def test_first_of_two_raising_microtasks_ends_run(self, loop: Driver) -> None:
        first, second = ValueError("first"), ValueError("second")
        log: list[str] = []

        def from_callback(cid: str) -> None:
            loop.queue(_raising(first))
            loop.queue(_raising(second))
            loop.queue(log.append, "last")

        loop.defer(from_callback)
        with pytest.raises(UncaughtError) as info:
            loop.run()
        assert info.value.__cause__ is first
        assert log == ["last"]

    # -- memory ---------------------------------------------------------------------------------

    @staticmethod
    def _cancelling(loop: Driver, callback_id: str) -> Callable[[str], None]:
        return lambda cid: loop.cancel(callback_id)

    @pytest.mark.parametrize(
        "kind", ["defer", "delay", "repeat", "writable", "readable", "signal"]
    )
    def test_no_memory_leak(self, loop: Driver, kind: str) -> None:
        if not self.leaks:
            pytest.skip("this driver keeps a record of every callback on purpose")
        register = self.registrations(loop)[kind]

        def cycle() -> None:
            for _ in range(2000):
                callback_id = register(loop, lambda cid, *r: None)
                loop.cancel(callback_id)
            for _ in range(200):
                callback_id = register(loop, lambda cid, *r: None)
                loop.defer(self._cancelling(loop, callback_id))
            loop.run()

        tracemalloc.start()
        try:
            cycle()
            gc.collect()  # garbage the collector has not reached yet is no leak
            before = tracemalloc.get_traced_memory()[0]
            cycle()
            cycle()
            gc.collect()
            after = tracemalloc.get_traced_memory()[0]
        finally:
            tracemalloc.stop()
        assert after - before < 32768  # a leak would be >= 4400 callbacks
