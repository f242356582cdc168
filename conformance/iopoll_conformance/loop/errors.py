"""A callback's exception: ``UncaughtError`` out of ``run()``, the error handler, non-``None``
returns and ``KeyboardInterrupt``.
"""

from __future__ import annotations

import os
import signal
from typing import Any

import pytest

from iopoll.loop import Driver, InvalidCallbackError, UncaughtError

from .callbacks import nil, raising
from .harness import DriverHarness


class ErrorHandlingRules(DriverHarness):
    """A callback's exception: ``UncaughtError`` out of ``run()``, the error handler,
    non-``None`` returns and ``KeyboardInterrupt``.
    """

    @pytest.mark.parametrize("kind", ["defer", "delay", "repeat", "writable", "readable", "signal"])
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
            loop.defer(raising(error))
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
        loop.defer(lambda cid: nil(1 / 0))
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

    @pytest.mark.parametrize("value", [42, 0, False, "", [], 0.0], ids=repr)
    def test_non_none_return_is_invalid_callback_error(self, loop: Driver, value: object) -> None:
        # Anything but None, falsy values too (SPEC 9.1).
        callback_id = loop.defer(lambda cid: value)  # type: ignore[arg-type]
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
