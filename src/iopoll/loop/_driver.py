"""``AbstractDriver``: the scheduling logic of every driver, written once.

A backend supplies four small hooks: ``_now()`` (the clock), ``_io_update(entry, old, new)``
(register, modify or drop the OS registration of one fd), ``_poll(timeout)`` (wait, then
queue the ready I/O callbacks) and ``_watch_wakeup(sock)`` (poll the signal wakeup socket).

One tick: activate what was enabled since the last tick, queue the enabled deferred
callbacks, then poll (blocking only after a tick that ran nothing) and queue signal, I/O and
due timer callbacks, in that order; then run the queue, with the microtasks after each
callback.  With greenlet installed, callbacks run in a callback greenlet and the ticks in a
loop greenlet, so that a callback, or the main greenlet, can suspend (``_suspension.py``).
"""

from __future__ import annotations

import heapq
import itertools
import weakref
from collections import deque
from collections.abc import Callable, Coroutine, Iterable
from typing import TYPE_CHECKING, Any, cast

from ._base import Driver, ErrorHandler
from ._callbacks import (
    _CO_ASYNC,
    _LETTERS,
    Callback,
    FdEntry,
    SignalCallback,
    StreamCallback,
    TimerCallback,
    check_callback,
    check_seconds,
    next_id,
    stream_fd,
)
from ._errors import CallbackType, InvalidCallbackError, UncaughtError
from ._signals import SignalState

if TYPE_CHECKING:
    import socket

    from ._suspension import Suspension

__all__ = ["AbstractDriver", "MAX_WAIT"]

# The longest single wait: a longer (or infinite) timer wakes the loop once a day, so a
# huge delay never overflows a backend's timeout argument.
MAX_WAIT = 86_400.0


class _Superseded(BaseException):
    """Ends a loop greenlet whose callback suspended and was resumed after a successor took over."""


def _no_greenlet() -> Any:
    raise RuntimeError("greenlet is not in use")


class AbstractDriver(Driver):
    """Ids, enable queues, timers, microtasks, errors and the run loop; see the module doc."""

    def __init__(self) -> None:
        self._callbacks: dict[str, Callback] = {}
        # Ids run a, b, .. z, aa, ab .. (PHP's string increment): prefix + _LETTERS[index].
        self._id_prefix = ""
        self._id_index = 0
        self._enable_queue: dict[str, Callback] = {}
        # Deferred callbacks for the next tick.  A disabled one stays here, not invokable; an
        # enable() gives a defer a fresh record, so a stale record never runs.
        self._defers: list[Callback] = []
        self._microtasks: deque[tuple[Callable[..., Any], tuple[Any, ...]]] = deque()
        self._queue: deque[Callback] = deque()
        self._live = 0  # enabled and referenced callbacks: run() goes on while > 0
        self._idle = False
        self._stopped = False
        self._running = False
        self._interrupt: Any = None  # an exception for run(), or a resumed main Suspension
        self._error_handler: ErrorHandler | None = None
        self._timers: list[tuple[float, int, TimerCallback]] = []
        self._timer_seq = itertools.count()
        self._dead_timers = 0
        self._entries: dict[int, FdEntry] = {}
        self._signals: SignalState | None = None
        self._signal_callbacks: dict[int, dict[str, SignalCallback]] = {}
        self._loop_greenlet: Any = None
        self._suspensions: weakref.WeakKeyDictionary[Any, Suspension] | None = None
        self._main_suspension: Suspension | None = None
        self._getcurrent: Callable[[], Any] = _no_greenlet

    # -- backend hooks ----------------------------------------------------------------------

    def _now(self) -> float:
        raise NotImplementedError

    def _io_update(self, entry: FdEntry, old: int, new: int) -> None:
        raise NotImplementedError

    def _poll(self, timeout: float | None) -> None:
        raise NotImplementedError

    def _watch_wakeup(self, sock: socket.socket | None) -> None:
        raise NotImplementedError

    # -- registration -------------------------------------------------------------------------

    def _new_id(self) -> str:
        index = self._id_index
        if index == 26:
            index = self._carry()
        self._id_index = index + 1
        return self._id_prefix + _LETTERS[index]

    def _carry(self) -> int:
        self._id_prefix = next_id(self._id_prefix) if self._id_prefix else "a"
        return 0

    def queue(self, fn: Callable[..., None], /, *args: Any) -> None:
        check_callback(fn, "fn")
        self._microtasks.append((fn, args))

    def defer(self, fn: Callable[[str], None]) -> str:
        code = getattr(fn, "__code__", None)
        if code is None or code.co_flags & _CO_ASYNC:
            check_callback(fn)
        index = self._id_index  # _new_id(), inlined on the hot paths
        if index == 26:
            index = self._carry()
        self._id_index = index + 1
        callback_id = self._id_prefix + _LETTERS[index]
        callback = self._callbacks[callback_id] = Callback(callback_id, fn)
        self._defers.append(callback)
        self._live += 1
        return callback_id

    def _add_timer(self, seconds: float, fn: Callable[[str], None], repeat: bool) -> str:
        index = self._id_index  # _new_id(), inlined on the hot paths
        if index == 26:
            index = self._carry()
        self._id_index = index + 1
        callback_id = self._id_prefix + _LETTERS[index]
        callback = TimerCallback(callback_id, fn, seconds, self._now(), repeat)
        self._callbacks[callback_id] = callback
        self._enable_queue[callback_id] = callback
        self._live += 1
        return callback_id

    def delay(self, seconds: float, fn: Callable[[str], None]) -> str:
        if type(seconds) is not float or not seconds >= 0:
            seconds = check_seconds(seconds, "seconds")
        code = getattr(fn, "__code__", None)
        if code is None or code.co_flags & _CO_ASYNC:
            check_callback(fn)
        return self._add_timer(seconds, fn, False)

    def repeat(self, interval: float, fn: Callable[[str], None]) -> str:
        interval = check_seconds(interval, "interval")
        check_callback(fn)
        return self._add_timer(interval, fn, True)

    def _add_stream(self, stream: Any, fn: Callable[[str, Any], None], writable: bool) -> str:
        fd = stream_fd(stream)
        check_callback(fn)
        index = self._id_index  # _new_id(), inlined on the hot paths
        if index == 26:
            index = self._carry()
        self._id_index = index + 1
        callback_id = self._id_prefix + _LETTERS[index]
        callback = StreamCallback(callback_id, fn, stream, fd, writable)
        self._callbacks[callback_id] = callback
        self._enable_queue[callback_id] = callback
        self._live += 1
        return callback_id

    def on_readable(self, stream: Any, fn: Callable[[str, Any], None]) -> str:
        return self._add_stream(stream, fn, False)

    def on_writable(self, stream: Any, fn: Callable[[str, Any], None]) -> str:
        return self._add_stream(stream, fn, True)

    def on_signal(self, signum: int, fn: Callable[[str, int], None]) -> str:
        signum = SignalState.check_signum(signum)
        check_callback(fn)
        if self._signals is None:
            self._signals = SignalState(self._watch_wakeup)
        self._signals.add(signum)
        callback_id = self._new_id()
        callback = SignalCallback(callback_id, fn, signum)
        self._callbacks[callback_id] = callback
        self._enable_queue[callback_id] = callback
        self._live += 1
        return callback_id

    # -- life cycle of a callback ---------------------------------------------------------------

    def enable(self, callback_id: str) -> str:
        callback = self._callbacks.get(callback_id)
        if callback is None:
            raise InvalidCallbackError.invalid_identifier(callback_id)
        if callback.enabled:
            return callback_id
        if callback.referenced:
            self._live += 1
        if type(callback) is Callback:
            # A fresh record: the old one may still sit in this tick's queue, not invokable.
            fresh = self._callbacks[callback_id] = Callback(callback_id, callback.fn)
            fresh.referenced = callback.referenced
            self._defers.append(fresh)
        else:
            callback.enabled = True
            if type(callback) is TimerCallback:
                callback.expiration = self._now() + callback.interval
            self._enable_queue[callback_id] = callback
        return callback_id

    def disable(self, callback_id: str) -> str:
        callback = self._callbacks.get(callback_id)
        if callback is None or not callback.enabled:
            return callback_id
        callback.enabled = False
        callback.invokable = False
        if callback.referenced:
            self._live -= 1
        if type(callback) is not Callback and self._enable_queue.pop(callback_id, None) is None:
            self._deactivate(callback)
        return callback_id

    def cancel(self, callback_id: str) -> None:
        self.disable(callback_id)
        callback = self._callbacks.pop(callback_id, None)
        if type(callback) is SignalCallback and self._signals is not None:
            self._signals.remove(callback.signum)

    def reference(self, callback_id: str) -> str:
        callback = self._callbacks.get(callback_id)
        if callback is None:
            raise InvalidCallbackError.invalid_identifier(callback_id)
        if not callback.referenced:
            callback.referenced = True
            if callback.enabled:
                self._live += 1
        return callback_id

    def unreference(self, callback_id: str) -> str:
        callback = self._callbacks.get(callback_id)
        if callback is not None and callback.referenced:
            callback.referenced = False
            if callback.enabled:
                self._live -= 1
        return callback_id

    # -- introspection ------------------------------------------------------------------------

    def _get(self, callback_id: str) -> Callback:
        callback = self._callbacks.get(callback_id)
        if callback is None:
            raise InvalidCallbackError.invalid_identifier(callback_id)
        return callback

    def get_identifiers(self) -> list[str]:
        return list(self._callbacks)

    def get_type(self, callback_id: str) -> CallbackType:
        return self._get(callback_id).type

    def is_enabled(self, callback_id: str) -> bool:
        return self._get(callback_id).enabled

    def is_referenced(self, callback_id: str) -> bool:
        return self._get(callback_id).referenced

    def set_error_handler(self, handler: ErrorHandler | None) -> ErrorHandler | None:
        if handler is not None:
            check_callback(handler, "handler")
        previous, self._error_handler = self._error_handler, handler
        return previous

    def get_error_handler(self) -> ErrorHandler | None:
        return self._error_handler

    def is_running(self) -> bool:
        return self._running

    def stop(self) -> None:
        self._stopped = True

    # -- activation ------------------------------------------------------------------------------

    def _activate(self, callbacks: Iterable[Callback]) -> None:
        timers = self._timers
        for callback in callbacks:
            callback.invokable = True
            kind = type(callback)
            if kind is TimerCallback:
                timer = cast(TimerCallback, callback)
                entry = (timer.expiration, next(self._timer_seq), timer)
                timer.entry = entry
                heapq.heappush(timers, entry)
            elif isinstance(callback, StreamCallback):
                self._activate_stream(callback)
            elif isinstance(callback, SignalCallback):
                callbacks_for = self._signal_callbacks.setdefault(callback.signum, {})
                callbacks_for[callback.id] = callback

    def _activate_stream(self, callback: StreamCallback) -> None:
        entry = self._entries.get(callback.fd)
        if entry is not None and not entry.alive():
            # The stream that registered this fd was closed and the number reused: its
            # callbacks can never fire again; the new stream gets a registration of its own.
            del self._entries[entry.fd]
            self._io_update(entry, entry.events, 0)
            entry.events = 0
            entry = None
        if entry is None:
            entry = self._entries[callback.fd] = FdEntry(callback.fd, callback.stream)
        (entry.writers if callback.writable else entry.readers)[callback.id] = callback
        callback.entry = entry
        self._update_entry(entry)

    def _update_entry(self, entry: FdEntry) -> None:
        old, new = entry.events, entry.wanted()
        if old == new:
            return
        entry.events = new
        if self._entries.get(entry.fd) is not entry:
            return  # an orphan (its stream was closed): it holds no OS registration
        if not new:
            del self._entries[entry.fd]
        self._io_update(entry, old, new)

    def _deactivate(self, callback: Callback) -> None:
        kind = type(callback)
        if kind is TimerCallback:
            if callback.entry is not None:  # type: ignore[attr-defined]
                callback.entry = None  # type: ignore[attr-defined]
                self._dead_timers += 1
                if self._dead_timers > 64 and self._dead_timers * 2 > len(self._timers):
                    self._timers = [item for item in self._timers if item[2].entry is item]
                    heapq.heapify(self._timers)
                    self._dead_timers = 0
        elif kind is StreamCallback:
            entry = callback.entry  # type: ignore[attr-defined]
            if entry is not None:
                callback.entry = None  # type: ignore[attr-defined]
                del (entry.writers if callback.writable else entry.readers)[callback.id]  # type: ignore[attr-defined]
                self._update_entry(entry)
        elif kind is SignalCallback:
            callbacks = self._signal_callbacks.get(callback.signum)  # type: ignore[attr-defined]
            if callbacks is not None:
                callbacks.pop(callback.id, None)

    # -- one tick -------------------------------------------------------------------------------

    def _tick(self, previous_idle: bool) -> None:
        enable_queue = self._enable_queue
        if enable_queue:
            self._enable_queue = {}
            self._activate(enable_queue.values())
        defers = self._defers
        if defers:
            self._defers = []
            self._queue.extend(defers)
            self._idle = False
        blocking = previous_idle and not self._stopped and self._live > 0
        if blocking:
            self._drain()
            if (
                self._enable_queue
                or self._defers
                or self._stopped
                or self._interrupt is not None
                or not self._live
            ):
                blocking = False
        self._dispatch(blocking)

    def _dispatch(self, blocking: bool) -> None:
        signals = self._signals
        timeout: float | None = 0.0
        if blocking and not (signals is not None and signals.pending):
            timeout = None
            timers = self._timers
            while timers and timers[0][2].entry is not timers[0]:
                heapq.heappop(timers)
                self._dead_timers -= 1
            if timers:
                timeout = timers[0][0] - self._now()
                timeout = 0.0 if timeout < 0 else min(timeout, MAX_WAIT)
        mark = len(self._queue)
        self._poll(timeout)
        if signals is not None and signals.pending:
            self._enqueue_signals(signals, mark)
        if self._timers:
            self._enqueue_timers()

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
                        self._enable_queue[callback_id] = callback
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
        if self._running:
            raise RuntimeError("The event loop is already running")
        from ._suspension import greenlet_module

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
        from ._suspension import greenlet_module

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
        from ._suspension import suspension_for

        return suspension_for(self)

    def close(self) -> None:
        """Restore signal state and release the backend (the driver is unusable after)."""
        if self._signals is not None:
            self._signals.close()
            self._signals = None
