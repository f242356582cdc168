"""``AbstractDriver``: the scheduling logic of every driver, written once.

A backend supplies four small hooks: ``_now()`` (the clock), ``_io_update(entry, old, new)``
(register, modify or drop the OS registration of one fd), ``_poll(timeout)`` (wait, then
queue the ready I/O callbacks) and ``_watch_wakeup(sock)`` (poll the signal wakeup socket).
The callbacks' records, ids, queues and activation live in ``_registry.py``.

One tick: activate what was enabled since the last tick, queue the enabled deferred
callbacks, then poll (blocking only after a tick that ran nothing) and queue signal, I/O and
due timer callbacks, in that order; then run the queue, with the microtasks after each
callback.  With greenlet installed, callbacks run in the loop greenlet; one that suspends
hands the loop over to a successor greenlet (``_suspension.py``).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Coroutine
from typing import Any

from ._callbacks import Callback, SignalCallback, StreamCallback, TimerCallback
from ._errors import InvalidCallbackError, UncaughtError
from ._registry import CallbackRegistry
from ._signals import SignalState
from ._suspension import Suspension, greenlet_module, suspension_for

__all__ = ["AbstractDriver", "MAX_WAIT"]

# The longest single wait: a longer (or infinite) timer wakes the loop once a day, so a
# huge delay never overflows a backend's timeout argument.
MAX_WAIT = 86_400.0


class _Superseded(BaseException):
    """Ends a loop greenlet whose callback suspended and was resumed after a successor took over."""


class AbstractDriver(CallbackRegistry):
    """Ticks, dispatch, running callbacks, microtasks, errors and the run loop."""

    # -- one tick -------------------------------------------------------------------------------

    def _tick(self, previous_idle: bool) -> None:
        self._stale_queued = 0  # both queues are emptied below
        enable_queue = self._enable_queue
        if enable_queue:
            self._enable_queue = []
            self._activate(enable_queue)
        defers = self._defers
        if defers:
            self._defers = []
            self._queue.extend(defers)
            self._idle = False
        timeout: float | None = 0.0
        # Block only after a tick that ran nothing (the deferred callbacks run first).
        if previous_idle and not self._stopped and self._live > 0:
            self._drain()
            if not (
                self._enable_queue
                or self._defers
                or self._stopped
                or self._interrupt is not None
                or not self._live
                or (self._signals is not None and self._signals.pending)
            ):
                timeout = self._wait_time()
        # Dispatch (inlined: one call less per tick on the I/O hot path).
        queue = self._queue
        mark = len(queue)
        self._poll(timeout)
        signals = self._signals
        if signals is not None and signals.pending:
            self._enqueue_signals(signals, mark)
        if self._timers:
            self._enqueue_timers()

    def _wait_time(self) -> float | None:
        """How long a blocking poll may wait: until the next live timer (None: no timer)."""
        timers = self._timers
        while timers and timers[0][2].entry is not timers[0]:
            heapq.heappop(timers)
            self._dead_timers -= 1
        if not timers:
            return None
        timeout = timers[0][0] - self._now()
        return 0.0 if timeout < 0 else min(timeout, MAX_WAIT)

    def _enqueue_signals(self, signals: SignalState, mark: int) -> None:
        ready: list[SignalCallback] = []
        pending = signals.pending
        while pending:
            callbacks = self._signal_callbacks.get(pending.popleft())
            if callbacks:
                ready.extend(callbacks.values())
        if ready:
            # Signals come before the I/O this dispatch already queued.
            for offset, callback in enumerate(ready):
                self._queue.insert(mark + offset, callback)
            self._idle = False

    def _enqueue_timers(self) -> None:
        timers = self._timers
        now = self._now()
        queue = self._queue
        while timers and timers[0][0] <= now:
            item = heapq.heappop(timers)
            callback = item[2]
            if callback.entry is not item:
                self._dead_timers -= 1
                continue
            callback.entry = None
            queue.append(callback)
            self._idle = False

    # -- running callbacks ----------------------------------------------------------------------

    def _drain(self) -> None:
        """Run the microtasks, then each queued callback followed by the microtasks."""
        microtasks = self._microtasks
        queue = self._queue
        callbacks = self._callbacks
        me = self._loop_greenlet
        if microtasks:
            self._run_microtasks()
        while queue and self._interrupt is None:
            callback = queue.popleft()
            if not callback.invokable:
                continue
            callback_id = callback.id
            kind = type(callback)
            try:
                if kind is StreamCallback:
                    result = callback.fn(callback_id, callback.stream)  # type: ignore[attr-defined]
                elif kind is Callback:
                    # Auto-cancel (inlined: the defer benchmark's inner loop).
                    del callbacks[callback_id]
                    callback.enabled = callback.invokable = False
                    if callback.referenced:
                        self._live -= 1
                    result = callback.fn(callback_id)
                elif kind is TimerCallback:
                    if callback.repeat:  # type: ignore[attr-defined]
                        # Re-arm from now, active from the next tick: never twice a tick.
                        callback.invokable = False
                        callback.expiration = self._now() + callback.interval  # type: ignore[attr-defined]
                        callback.queued += 1
                        self._enable_queue.append(callback)
                    else:
                        del callbacks[callback_id]
                        callback.enabled = callback.invokable = False
                        if callback.referenced:
                            self._live -= 1
                    result = callback.fn(callback_id)
                else:
                    result = callback.fn(callback_id, callback.signum)  # type: ignore[attr-defined]
                if result is not None:
                    self._refuse_result(callback, result)
            except Exception as exc:
                self._error(callback.fn, exc)
            if self._loop_greenlet is not me:
                raise _Superseded  # the callback suspended: another greenlet runs the loop now
            if microtasks:
                self._run_microtasks()

    @staticmethod
    def _refuse_result(callback: Callback, result: object) -> None:
        if isinstance(result, Coroutine):
            result.close()  # no "coroutine was never awaited" warning
        raise InvalidCallbackError.nonnull_return(callback.id, callback.fn, result)

    def _run_microtasks(self) -> None:
        microtasks = self._microtasks
        me = self._loop_greenlet
        while microtasks and self._interrupt is None:
            fn, args = microtasks.popleft()
            try:
                fn(*args)
            except Exception as exc:
                self._error(fn, exc)
            if self._loop_greenlet is not me:
                raise _Superseded

    def _error(self, fn: Callable[..., Any], exc: Exception) -> None:
        handler = self._error_handler
        if handler is None:
            self._interrupt = (
                exc if isinstance(exc, UncaughtError) else UncaughtError.from_callback(fn, exc)
            )
            return
        try:
            handler(exc)
        except Exception as failure:
            self._interrupt = (
                failure
                if isinstance(failure, UncaughtError)
                else UncaughtError.from_handler(handler, failure)
            )

    # -- the run loop ------------------------------------------------------------------------------

    # Callbacks run in the loop greenlet itself: no switch per tick.  When one suspends, the
    # suspended greenlet keeps its stack, a successor greenlet takes the loop over
    # (``_hand_over``), and the suspended one, once resumed, finishes its callback and ends
    # (``_Superseded``) instead of running ticks.
    def _loop(self, fresh: bool = True) -> None:
        if fresh:
            self._stopped = False
        self._drain()
        while not self._stopped:
            if self._interrupt is not None:
                self._deliver_interrupt()
                continue
            if not self._live:
                break
            previous_idle, self._idle = self._idle, True
            self._tick(previous_idle)
            self._drain()
        if self._interrupt is not None:
            self._deliver_interrupt()

    def _loop_main(self, fresh: bool) -> None:
        try:
            self._loop(fresh)
        except _Superseded:
            pass  # back to whoever resumed this greenlet's suspended callback

    def _hand_over(self) -> None:
        """The loop greenlet's callback suspends: a successor continues the loop."""
        current = self._loop_greenlet
        successor = type(current)(self._loop_main, current.parent)
        self._loop_greenlet = successor
        successor.switch(False)

    def _deliver_interrupt(self) -> None:
        interrupt, self._interrupt = self._interrupt, None
        if self._loop_greenlet is None:
            raise interrupt
        # Hand it to whoever runs the loop (run() or a main suspend()); resumed by the next.
        self._getcurrent().parent.switch(interrupt)

    def run(self) -> None:
        """Run ticks until ``stop()``, or until no enabled, referenced callback is left."""
        if self._running:
            raise RuntimeError("The event loop is already running")
        if greenlet_module() is None:
            self._running = True
            try:
                self._loop()
            finally:
                self._running = False
            return
        interrupt = self._enter_loop()
        if isinstance(interrupt, BaseException):
            raise interrupt

    def _enter_loop(self) -> object:
        """Switch into the loop greenlet (made afresh if none is pending); return its interrupt."""
        module: Any = greenlet_module()
        self._getcurrent = module.getcurrent
        loop = self._loop_greenlet
        fresh = loop is None or loop.dead
        if fresh:
            loop = self._loop_greenlet = module.greenlet(self._loop_main)
        try:
            loop.parent = module.getcurrent()
        except ValueError:
            raise RuntimeError("Cannot run the loop from inside one of its callbacks") from None
        self._running = True
        try:
            return loop.switch(True) if fresh else loop.switch()
        finally:
            self._running = False

    def get_suspension(self) -> Suspension:
        """The suspension of the current greenlet (needs the ``greenlet`` package)."""
        # The last one handed out, while its greenlet asks again: a callback that suspends
        # in a loop asks once per iteration.
        suspension = self._last_suspension
        if (
            suspension is not None
            and suspension._greenlet() is self._getcurrent()
            and not suspension._dead
        ):
            return suspension
        suspension = self._last_suspension = suspension_for(self)
        return suspension

    def close(self) -> None:
        """Restore signal state and release the backend (the driver is unusable after)."""
        if self._signals is not None:
            self._signals.close()
            self._signals = None
