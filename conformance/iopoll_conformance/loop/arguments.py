"""What callbacks are given (their id, the very stream), and arguments registration refuses."""

from __future__ import annotations

from typing import Any

import pytest

from iopoll.loop import Driver

from .harness import DriverHarness


class CallbackArgumentRules(DriverHarness):
    """What callbacks are given (their id, the very stream), and arguments registration refuses."""

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

    @pytest.mark.parametrize(
        "kind", ["defer", "delay", "repeat", "writable", "readable", "signal"]
    )
    def test_async_def_is_refused_at_registration(self, loop: Driver, kind: str) -> None:
        async def coroutine_function(*args: object) -> None:
            pass

        register = self.registrations(loop)[kind]
        with pytest.raises(TypeError, match="async def"):
            register(loop, coroutine_function)  # type: ignore[arg-type]
        assert loop.get_identifiers() == []
