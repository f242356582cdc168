"""The waits of a Context walk: ``wait(0)`` in its spellings, ``max_events`` alone and as a
whole rotation, ``wait(None)`` with watchers ready, waits a ``SIGALRM`` handler interrupts
(one that returns, one that raises), and a ``fork`` whose child uses a Context of its own.
Each result is checked against the model (``Walk.checked_wait``).
"""

from __future__ import annotations

import os
import signal
import socket
import time
from datetime import timedelta
from typing import Any

from _iopoll_core.events import ErrorCode, Event
from iopoll_conformance.process import alarm

from .common import Violation
from .model import Expectation
from .walk import Walk

__all__ = ["CHILD_OK", "SoakHang", "SoakSignal", "WaitOps"]

# Exit status of a forked child whose checks all passed.
CHILD_OK = 0


class SoakSignal(Exception):
    """What the raising ``SIGALRM`` handler raises (compared by identity afterwards)."""


class SoakHang(Exception):
    """Raised by the watchdog alarm of a ``wait(None)`` that should have returned at once."""


class WaitOps(Walk):
    """The operations that wait, interrupt a wait, or fork."""

    def op_wait(self) -> None:
        rng = self.rng
        choice = rng.random()
        if choice < 0.5 or not self.native_timeouts:
            self.log.add("wait(0)")
            self.checked_wait("wait(0)", lambda: self.ctx.wait(0))
        elif choice < 0.75:
            self.log.add("wait(0.0)")
            self.checked_wait("wait(0.0)", lambda: self.ctx.wait(0.0))
        else:
            self.log.add("wait(timedelta(0))")
            self.checked_wait("wait(timedelta(0))", lambda: self.ctx.wait(timedelta(0)))

    def op_wait_short(self) -> None:
        self.log.add("wait(0, 2000)")
        self.checked_wait("wait(0, 2000)", lambda: self.ctx.wait(0, 2000))

    def op_wait_k(self) -> None:
        k = self.rng.randint(1, 3)
        self.log.add(f"wait(0, max_events={k})")
        self.checked_wait(
            f"wait(0, max_events={k})",
            lambda: self.ctx.wait(0, 0, k),
            max_events=k,
            require_all=False,
        )

    def op_rotate(self) -> None:
        """ceil(n/k) calls of wait(0, max_events=k) report every ready watcher; a call that
        left out k or more ready ones is followed by one that repeats none it returned."""
        k = self.rng.randint(1, 3)
        self.model.self_check()
        first = self.model.expect()
        calls = self.model.rotation_calls(first, k)
        self.log.add(f"rotation: {calls} x wait(0, max_events={k}), {len(first.must)} ready")
        self.count("rotations")
        union: set[int] = set()
        previous: set[int] = set()
        left_out = 0
        expectation: Expectation | None = first
        for call in range(calls):
            what = f"rotation call {call + 1}/{calls} of wait(0, max_events={k})"
            if expectation is None:
                expectation = self.model.expect()
            must_now = {id(m) for m in expectation.must}
            reported = self.checked_wait(
                what, lambda: self.ctx.wait(0, 0, k), k, False, expectation
            )
            ids = {id(m) for m in reported}
            if left_out >= k and ids & previous:
                raise Violation(
                    f"{what}: {left_out} ready watchers were left out by the call before, "
                    "yet this call repeats one that call returned (left-out watchers come "
                    "out first, SPEC 4)"
                )
            left_out = len(must_now - ids)
            previous = ids
            union |= ids
            expectation = None
        missing = [m for m in first.must if id(m) not in union]
        if missing:
            raise Violation(
                f"a rotation of {calls} x wait(0, max_events={k}) with at most "
                f"{first.competitors} watchers competing never reported "
                + ", ".join(f"{m.name()} ({self.model.why(m)})" for m in missing)
            )

    def op_wait_forever(self) -> None:
        """``wait(None)`` with a watcher ready for sure returns at once, with all of them."""

        def hang(signum: int, frame: Any) -> None:
            raise SoakHang

        self.log.add("wait(None), watchers ready")
        with alarm(hang, 5.0):
            try:
                self.checked_wait("wait(None)", lambda: self.ctx.wait(None))
            except SoakHang:
                raise Violation("wait(None) blocked for 5 s with watchers ready for sure") from None

    # -- signals and fork ----------------------------------------------------------------------

    def op_signal_returns(self) -> None:
        """A ``SIGALRM`` handler that returns: the wait goes on with the remaining time."""
        ran = [0]

        def handler(signum: int, frame: Any) -> None:
            ran[0] += 1

        self.model.self_check()
        expectation = self.model.expect()
        self.log.add(f"wait(0, 30000) with SIGALRM at 5 ms (returns), {len(expectation.may)} may")
        self.count("sigalrm_returns")
        started = time.monotonic()
        with alarm(handler, 0.005):
            self.checked_wait(
                "wait(0, 30000) interrupted by a returning handler",
                lambda: self.ctx.wait(0, 30_000),
                expectation=expectation,
            )
        elapsed = time.monotonic() - started
        if not expectation.may and elapsed < 0.029:
            raise Violation(
                f"a wait(0, 30000) interrupted by a handler that returned took only "
                f"{elapsed * 1000:.1f} ms with nothing ready (PEP 475: the wait goes on)"
            )

    def op_signal_raises(self) -> None:
        """A ``SIGALRM`` handler that raises: the exception leaves ``wait()`` unchanged, and
        the context works afterwards.  Done on the walk's context when nothing there may be
        ready (so the wait is sure to be blocked when the signal comes), else on a context
        that holds only a fired one-shot (SPEC 6.12: ``wait(None)`` blocks)."""
        self.model.self_check()
        expectation = self.model.expect()
        if not expectation.may and self.model.active():
            self.count("sigalrm_raises_here")
            self.log.add("wait(None) with SIGALRM at 5 ms (raises), nothing may be ready")
            self._raising_wait(self.ctx, expectation)
            self.checked_wait("wait(0) after a handler's exception", lambda: self.ctx.wait(0))
            return
        self.count("sigalrm_raises_fresh")
        self.log.add("fresh context holding a fired one-shot: wait(None), SIGALRM raises")
        a, b = socket.socketpair()
        side = self.target.make()
        try:
            watcher = side.add(a, Event.READ | Event.ONESHOT)
            b.send(b"x")
            if side.wait(0) != [watcher]:
                raise Violation("a one-shot with a byte to read was not reported")
            self._raising_wait(side, None)
            watcher.modify_events(Event.READ)  # re-armed: the byte is reported at once
            if side.wait(0) != [watcher]:
                raise Violation(
                    "after a handler's exception, a re-armed watcher with a byte "
                    "to read was not reported"
                )
        finally:
            side.close()
            a.close()
            b.close()

    def _raising_wait(self, ctx: Any, expectation: Expectation | None) -> None:
        token = SoakSignal("raised by the soak's SIGALRM handler")
        armed = [True]
        waiting = [False]

        def handler(signum: int, frame: Any) -> None:
            if not waiting[0]:
                # A loaded machine can take 5 ms to get from setitimer() to the wait: an
                # exception raised there would come out of the soak, not out of wait().
                signal.setitimer(signal.ITIMER_REAL, 0.005)
            elif armed[0]:
                armed[0] = False
                raise token

        result: Any = None
        caught: BaseException | None = None
        try:
            with alarm(handler, 0.005):
                try:
                    waiting[0] = True
                    result = ctx.wait(None)
                except SoakSignal as exc:
                    caught = exc
                armed[0] = False
        except SoakSignal:
            pass  # the handler ran after wait() had returned: result says what it returned
        if caught is None:
            if expectation is not None:
                self.model.check("wait(None)", result, expectation, None, True)
            raise Violation(
                f"wait(None) returned {result!r} instead of blocking until the "
                "signal handler raised"
            )
        if caught is not token:
            raise Violation(f"wait() raised {caught!r}, not the handler's own exception")

    def op_fork(self) -> None:
        """A child makes its own Context, uses it and exits 0; the parent's still works."""
        self.log.add("fork: the child uses a new Context, the parent waits for it")
        self.count("forks")
        pid = os.fork()
        if pid == 0:  # the child: never return into the walk
            status = 99
            try:
                status = self._child()
            finally:
                os._exit(status)
        _, status = os.waitpid(pid, 0)
        code = os.waitstatus_to_exitcode(status)
        if code != CHILD_OK:
            raise Violation(f"the forked child's checks failed: exit status {code} (see _child)")
        self.checked_wait("wait(0) after a fork", lambda: self.ctx.wait(0))

    def _child(self) -> int:
        """What the forked child checks; its exit status names the first failure."""
        api = self.target.api
        try:
            self.ctx.wait(0)
            return 10  # the inherited context must refuse (SPEC 4)
        except api.FailedPollOperationError as exc:
            if exc.code != ErrorCode.PERMISSION:
                return 11
        a, b = socket.socketpair()
        ctx = self.target.make()
        watcher = ctx.add(a, Event.READ, "child")
        if ctx.wait(0) != []:
            return 12
        b.send(b"x")
        if ctx.wait(0, 200_000) != [watcher] or watcher.data != "child":
            return 13
        watcher.modify_events(Event.READ | Event.ONESHOT)
        if ctx.wait(0) != [watcher] or ctx.wait(0) != []:
            return 14
        watcher.remove()
        if len(ctx) != 0:
            return 15
        ctx.close()
        return CHILD_OK
