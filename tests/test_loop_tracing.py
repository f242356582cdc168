"""``TracingDriver``: its dump, its notes, and the caller's line each trace ends on."""

from __future__ import annotations

import re
import signal
import socket
import sys
from collections.abc import Callable

import pytest

from iopoll import loop as facade
from iopoll.loop import Driver, InvalidCallbackError, IoPollDriver, TracingDriver


def test_tracing_dump_and_notes() -> None:
    d = TracingDriver(IoPollDriver())
    alive = d.delay(10, lambda cid: None)
    hidden = d.unreference(d.delay(10, lambda cid: None))
    dump = d.dump()
    assert repr(alive) in dump and repr(hidden) not in dump and "test_loop_tracing.py" in dump
    d.cancel(alive)
    d.cancel(hidden)
    with pytest.raises(InvalidCallbackError) as info:
        d.enable(alive)
    notes = "\n".join(getattr(info.value, "__notes__", []))
    assert "Creation trace" in notes and "Cancellation trace" in notes
    assert "test_tracing_dump_and_notes" in notes
    assert "No enabled" in d.dump()


def _innermost(trace: str | None) -> tuple[str, int]:
    """The file and line of a trace's innermost frame."""
    assert trace is not None
    file, line = re.findall(r'^  File "(.*)", line (\d+)', trace, re.MULTILINE)[-1]
    return file, int(line)


def test_tracing_records_the_line_of_a_direct_cancel() -> None:
    d = TracingDriver(IoPollDriver())
    callback_id = d.delay(10, lambda cid: None)
    d.cancel(callback_id)
    line = sys._getframe().f_lineno - 1
    assert _innermost(d.cancellation_trace(callback_id)) == (__file__, line)


def test_tracing_records_the_line_of_a_cancel_through_the_module_function() -> None:
    mine = facade.get_driver()
    d = TracingDriver(IoPollDriver())
    facade.set_driver(d)
    try:
        callback_id = facade.delay(10, lambda cid: None)
        facade.cancel(callback_id)
        line = sys._getframe().f_lineno - 1
    finally:
        facade.set_driver(mine)
    assert _innermost(d.cancellation_trace(callback_id)) == (__file__, line)
    assert _innermost(d.creation_trace(callback_id)) == (__file__, line - 1)


def _registrations(a: socket.socket) -> dict[str, Callable[[Driver], str]]:
    # One per line: the line a creation trace must end on is the lambda's own.
    return {
        "defer": lambda d: d.defer(lambda cid: None),
        "delay": lambda d: d.delay(10, lambda cid: None),
        "repeat": lambda d: d.repeat(10, lambda cid: None),
        "readable": lambda d: d.on_readable(a, lambda cid, s: None),
        "writable": lambda d: d.on_writable(a, lambda cid, s: None),
        "signal": lambda d: d.on_signal(signal.SIGUSR1, lambda cid, s: None),
    }


@pytest.mark.parametrize("kind", ["defer", "delay", "repeat", "readable", "writable", "signal"])
def test_tracing_records_the_line_that_created_each_kind(kind: str) -> None:
    a, b = socket.socketpair()
    d = TracingDriver(IoPollDriver())
    register = _registrations(a)[kind]
    callback_id = register(d)
    assert _innermost(d.creation_trace(callback_id)) == (__file__, register.__code__.co_firstlineno)
    d.cancel(callback_id)
    d.close()
    a.close()
    b.close()


def _boom(callback_id: str) -> None:
    raise ValueError("boom")


def _returns(callback_id: str) -> int:
    return 5


class _CallableObject:
    def __call__(self, callback_id: str) -> None:
        raise ValueError("object")


@pytest.mark.parametrize("register", ["defer", "delay"])
@pytest.mark.parametrize(
    "fn", [_boom, _returns, _CallableObject()], ids=["raises", "returns", "object"]
)
def test_tracing_errors_name_the_callback_as_the_driver_does(register: str, fn: object) -> None:
    # A defer or delay callback runs inside TracingDriver's wrapper: the messages named the
    # wrapper's file and line (_tracing.py), or its name for a callable object.
    from iopoll.loop import UncaughtError

    messages = []
    for driver in (IoPollDriver(), TracingDriver(IoPollDriver())):
        if register == "defer":
            driver.defer(fn)  # type: ignore[arg-type]
        else:
            driver.delay(0, fn)  # type: ignore[arg-type]
        with pytest.raises(UncaughtError) as caught:
            driver.run()
        messages.append(f"{caught.value} / {caught.value.__cause__}")
    assert messages[0] == messages[1]
    assert "loop/_tracing.py" not in messages[1] and "_once" not in messages[1]
