"""Scenarios that fail one allocation at a time inside the C paths: the Context's C ``wait()``,
``add()`` and ``remove()``, and the loop's C dispatch.

Each scenario makes fresh objects, then runs one operation with CPython's allocator made to
fail its k-th allocation (``_testcapi.set_nomemory(k, k + 1)``), for k = 0, 1, 2 ... until the
operation runs through without meeting the failure ten times running.  Every error path
of the C code that an allocation can take is walked that way: it must raise (a
``MemoryError``, or an error whose chain holds one: the loop's ``UncaughtError`` around a
callback's), never crash, and a Context must answer the next ``wait()`` correctly.

Run by ``tests/test_allocation_failures.py``, one child process per scenario
(``python -m allocation_failure_scenarios NAME``), under ``PYTHONMALLOC=debug``, so that a
crash fails one test and a write to freed memory is found.  The child prints one line: the
scenario's name and how many of its allocations were failed.  Not collected by itself (no
``test_`` prefix).

A loop driver that raised ``MemoryError`` out of ``run()`` is not run again: the failure
can strand callbacks between queues, in the pure-Python reference as in C (docs/loop.md).
"""

from __future__ import annotations

import _testcapi
import gc
import os
import socket
import sys
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

# A scenario makes its objects (in the ExitStack, which closes them), and returns the
# operation to run with an allocation failing, and a check of what is left once it ran
# (given whether the operation raised).
Operation = tuple[Callable[[], object], Callable[[bool], None]]
SCENARIOS: dict[str, Callable[[ExitStack], Operation]] = {}


def scenario(*names: str) -> Callable[[Callable[..., Operation]], Callable[..., Operation]]:
    """Register a scenario function under ``names``; it is given the name's parts."""

    def register(func: Callable[..., Operation]) -> Callable[..., Operation]:
        for name in names:
            SCENARIOS[name] = lambda stack, name=name: func(stack, *name.split("-")[1:])
        return func

    return register


def pairs(stack: ExitStack, count: int) -> list[tuple[socket.socket, socket.socket]]:
    made = [socket.socketpair() for _ in range(count)]
    for a, b in made:
        stack.enter_context(a)
        stack.enter_context(b)
    return made


# -- the Context's C wait() ------------------------------------------------------------------

MODES = ("plain", "many", "oneshot", "closed", "dup", "leftovers", "timer")


@scenario(*(f"wait-{backend}-{mode}" for backend in ("EPOLL", "POLL", "SELECT") for mode in MODES))
def context_wait(stack: ExitStack, backend_name: str, mode: str) -> Operation:
    import iopoll
    from iopoll import Event

    ctx = stack.enter_context(iopoll.Context(iopoll.Backend[backend_name]))
    # "many": more reports than the C wait holds on its stack (STACK_REPORTS, 256).
    made = pairs(stack, 300 if mode == "many" and backend_name != "SELECT" else 3)
    watchers = []
    for i, (a, b) in enumerate(made):
        events = Event.READ | (Event.ONESHOT if mode == "oneshot" else Event(0))
        watchers.append(ctx.add(a, events, i))
        b.send(b"x")
    expected = set(range(len(made)))
    if mode in ("closed", "dup"):
        # A closed stream's report goes to the general path (POLL: POLLNVAL; SELECT:
        # EBADF); epoll drops a closed file, and reports it only while a dup keeps it open.
        if mode == "dup":
            stack.callback(os.close, os.dup(made[0][0].fileno()))
        made[0][0].close()
        expected.discard(0)
    if mode == "timer":
        ctx.add(iopoll.TimerHandle(0), Event.TIMER, "timer")
        expected.add("timer")  # type: ignore[arg-type]
    max_events = 1 if mode == "leftovers" else None

    def check(raised: bool) -> None:
        answered = ctx.wait(0)
        assert isinstance(answered, list), answered
        seen = {watcher.data for watcher in answered}
        assert seen <= expected, (seen, expected)
        if mode in ("plain", "many", "closed", "dup"):
            assert seen == expected, (seen, expected)

    return (lambda: ctx.wait(0, 0, max_events)), check


# -- the Context's C add() and remove() ----------------------------------------------------


@scenario(
    *(
        f"register-{backend}-{kind}"
        for backend in ("EPOLL", "POLL", "SELECT")
        for kind in ("socket", "int", "handle", "remove")
    )
)
def context_register(stack: ExitStack, backend_name: str, kind: str) -> Operation:
    import iopoll
    from iopoll import Event

    ctx = stack.enter_context(iopoll.Context(iopoll.Backend[backend_name]))
    ((a, b),) = pairs(stack, 1)
    b.send(b"x")
    fd = a.fileno()

    def handle() -> object:  # a StreamPollHandle takes add()'s general path
        return {"int": fd, "handle": iopoll.StreamPollHandle(a)}.get(kind, a)

    # Once through first, so that what the path caches (an Event's checks, its encoding) is
    # there: the walk then reaches every allocation of the operation itself.
    ctx.add(handle(), Event.READ, "warm").remove()
    kept = ctx.add(a, Event.READ, "kept") if kind == "remove" else None

    def operation() -> object:
        if kept is not None:
            return kept.remove()
        return ctx.add(handle(), Event.READ, "new")

    def check(raised: bool) -> None:
        # Either the fd is watched, and reported, or it is not watched at all, and a new add()
        # of it works: no record without its registration, nor the other way round.
        watcher = ctx._watchers.get(fd)
        if watcher is not None:
            assert ctx.wait(0) == [watcher] and watcher.data in ("kept", "new")
            watcher.remove()
        assert ctx._watchers == {} and all(entry is None for entry in ctx._by_fd)
        assert ctx.add(a, Event.READ, "again") and ctx.wait(0)[0].data == "again"

    return operation, check


# -- the loop's C dispatch -------------------------------------------------------------------


@scenario("loop-defer", "loop-delay", "loop-repeat", "loop-io", "loop-signal", "loop-register")
def loop_run(stack: ExitStack, kind: str) -> Operation:
    import signal

    from iopoll.loop import IoPollDriver

    driver = IoPollDriver()
    stack.callback(driver.close)
    ran: list[str] = []

    def note(cid: str, *args: Any) -> None:
        ran.append(cid)

    if kind == "defer":
        for _ in range(5):
            driver.defer(note)
        operation: Callable[[], object] = driver.run
    elif kind == "delay":
        for _ in range(5):
            driver.delay(0, note)
        operation = driver.run
    elif kind == "repeat":
        def repeat(cid: str) -> None:
            ran.append(cid)
            if len(ran) == 3:
                driver.cancel(cid)

        driver.repeat(0, repeat)
        operation = driver.run
    elif kind == "io":
        ((a, b),) = pairs(stack, 1)

        def readable(cid: str, stream: socket.socket) -> None:
            stream.recv(10)
            driver.cancel(cid)

        driver.on_readable(a, readable)
        b.send(b"x")
        operation = driver.run
    elif kind == "signal":
        def signalled(cid: str, signum: int) -> None:
            driver.cancel(cid)

        driver.on_signal(signal.SIGUSR1, signalled)

        def operation() -> None:
            signal.raise_signal(signal.SIGUSR1)
            driver.run()
    else:
        ((a, b),) = pairs(stack, 1)

        def operation() -> None:
            first = driver.defer(note)
            later = driver.delay(0.5, note)
            again = driver.repeat(1.0, note)
            driver.disable(first)
            driver.enable(first)
            driver.unreference(later)
            driver.reference(later)
            driver.cancel(again)
            driver.cancel(driver.on_readable(a, note))
            driver.queue(note, "queued")

    def check(raised: bool) -> None:
        driver.get_identifiers()  # the registry still answers

    return operation, check


# -- the walk --------------------------------------------------------------------------------


def holds_memory_error(exc: BaseException | None) -> bool:
    while exc is not None:
        if isinstance(exc, MemoryError):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


@contextmanager
def failing(k: int) -> Iterator[None]:
    _testcapi.set_nomemory(k, k + 1)
    try:
        yield
    finally:
        _testcapi.remove_mem_hooks()


def walk(name: str) -> int:
    """Fail each allocation of the scenario's operation in turn; how many were failed."""
    failed = clean = k = 0
    while clean < 10:
        with ExitStack() as stack:
            operation, check = SCENARIOS[name](stack)
            gc.collect()
            error: BaseException | None = None
            with failing(k):
                try:
                    operation()
                except BaseException as exc:  # checked below, with allocations back
                    error = exc
            if error is not None and not holds_memory_error(error):
                raise AssertionError(f"{name}, allocation {k}: {error!r}") from error
            failed += error is not None
            clean = 0 if error is not None else clean + 1
            check(error is not None)
            del error
        k += 1
        if k > 2000:
            raise AssertionError(f"{name}: still failing after 2000 allocations")
    return failed


if __name__ == "__main__":
    # greenlet is left out: suspensions are not under test, and greenlet 3 itself crashes
    # when its constructor meets a failed allocation (green_new's error path).
    sys.modules["greenlet"] = None  # type: ignore[assignment]
    # One run first, for what a first run imports or caches (the greenlet lookup, the
    # registration's functools caches and the enum.Flag combinations they make): CPython's
    # import machinery does not survive every failed allocation, nor does 3.10's enum
    # (a SystemError either way, CPython's own).
    from iopoll.loop import IoPollDriver

    warm = IoPollDriver()
    warm.defer(lambda cid: None)
    left, right = socket.socketpair()
    warm.on_readable(left, lambda cid, stream: warm.cancel(cid))
    right.send(b"x")
    warm.run()
    warm.close()
    left.close()
    right.close()
    for name in sys.argv[1:]:
        print(f"{name}: {walk(name)} allocations failed")
