"""``AbstractDriver``: all of a driver but the calls to its poller, written once.

The callbacks' records, ids, queues and activation are ``CallbackRegistry``'s
(``_registry.py``); the greenlet that runs the loop, and the suspensions, are ``LoopRunner``'s
(``_suspension.py``).  This class holds the rest:

* **The run loop and the tick.**  One tick: activate what was enabled since the last tick,
  queue the enabled deferred callbacks, then poll (blocking only after a tick that ran
  nothing) and queue signal, I/O and due timer callbacks, in that order; then run the queue,
  with the microtasks after each callback.
* **Errors.**  A callback's or a microtask's exception goes to the error handler, or ends
  ``run()`` as ``UncaughtError``.
* **The poller skeleton every backend shares.**  The poller (what ``get_handle()`` returns);
  a second, fallback poller, made on first use, for the streams the first refuses (regular
  files on epoll), where they are always ready; the count of registered fds (with none, a tick
  sleeps instead of making a system call); the signal wakeup socket's registration.
* **Streams closed behind the loop's back** (below).

A backend supplies the poller to ``__init__`` and these hooks, every one abstract (a subclass
missing one cannot be instantiated): ``_add``, ``_modify`` and ``_remove`` (one fd's
registration), ``_refusals`` (what ``_add`` raises for a stream to send to the fallback),
``_new_fallback``, ``_wait`` and ``_queue_ready``.  It may override ``_new_signals`` (how
signals arrive; ``SignalState`` by default) and ``_stream_alive`` (whether an fd entry's
stream is still open; ``FdEntry.alive()`` by default).

Streams closed before their callbacks were cancelled
----------------------------------------------------

Python tells nobody when a socket or file is closed, and epoll forgets a closed fd without a
word: the callbacks of such a stream can never run again, and if they are what keeps the
loop alive, a plain loop sleeps for ever.  SPEC 9.1 asks that this never happens, and that
the loss be reported.  ``_lose_stream(entry)`` is the one place that acts on a loss: it
cancels every callback of the entry (so the loop's liveness stops counting them) and queues,
for each, a microtask that hands ``InvalidCallbackError.stream_closed(id)`` to the error path
(the error handler; without one, ``run()`` ends as ``UncaughtError``, as for any callback's
error).  A loss is found in four ways, none of which costs the busy path anything:

1. **Registration** (``_register``): the stream of a callback being enabled is closed
   already (``_add`` answers ``None``).
2. **Activation** (``CallbackRegistry._activate_stream``): a new stream got the number of
   a registered one that was closed, or the callback being activated (enabled again, or
   new) has a stream that was closed meanwhile, whose number may name another stream now.
3. **The poller says so** (``IoPollDriver``): its Contexts report each watcher they retire
   without ``remove()`` through ``on_watcher_removed`` (a ``wait()`` that saw the fd, a
   ``len(ctx)``, a new registration of the number), at the start of the next ``wait()``.
4. **Nobody says so** (epoll, and the stdlib selectors): the loop checks for itself, but
   only when it has nothing else to do.  While streams are watched, a blocking wait lasts at
   most ``IDLE_SLICE`` (1 s; a longer or absent timer just means more slices; with no
   stream, waits last up to ``MAX_WAIT`` as before), and after a blocking wait that returned
   nothing, at most once per ``IDLE_SLICE``, ``_check_streams`` asks every fd entry whether
   its stream is still open (``_stream_alive``: ``Watcher.is_active()`` on ``IoPollDriver``,
   ``fileno()`` against the registered fd on ``SelectorsDriver``).  That is O(fds), once per
   idle second at most; a busy loop never pays it, and an idle loop wakes once a second.

A stream closed and then cancelled in the same tick is no loss: its entry has no callbacks
left by the time anything notices, and nothing is reported.  What is not covered: a stream
that the poller keeps reporting after it was closed (the selectors' ``PollSelector`` fallback
reports a closed fd with ``POLLNVAL`` on every tick, and a closed fd kept open by a ``dup``
keeps reporting on epoll) runs its callbacks with the closed stream, so their own errors
take the error path; the loop is never idle then, so the idle check does not run.
"""

from __future__ import annotations

import abc
import errno
import heapq
import socket
import time
from collections import deque
from collections.abc import Callable, Coroutine
from typing import Any, ClassVar, Generic, Protocol, TypeVar

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None  # type: ignore[assignment]

from ._callbacks import READ, Callback, FdEntry, RepeatCallback, TimerCallback, check_callback
from ._errors import InvalidCallbackError, UncaughtError
from ._interface import ErrorHandler
from ._registry import CallbackRegistry
from ._signals import SignalSource, SignalState
from ._suspension import LoopRunner, Superseded, Suspension

__all__ = ["AbstractDriver", "MAX_WAIT", "IDLE_SLICE"]

# The longest single wait: a longer (or infinite) timer wakes the loop once a day, so a
# huge delay never overflows a backend's timeout argument.
MAX_WAIT = 86_400.0
# The longest blocking wait while streams are watched, and how often, at most, an idle loop
# checks that they are still open (the module doc's "Nobody says so").
IDLE_SLICE = 1.0


def _heap_first(entry: tuple[float, int, TimerCallback], expiration: float, seq: int) -> bool:
    """Whether a heap entry comes before the FIFO's head, as their (expiration, seq) compare."""
    return entry[0] < expiration or (entry[0] == expiration and entry[1] < seq)


def _names_an_open_file(fd: int) -> bool:
    """Whether ``fd`` is open (POSIX; on Windows an int is a socket handle: assumed open)."""
    if fcntl is None:
        return True
    try:
        fcntl.fcntl(fd, fcntl.F_GETFD)
    except OSError as exc:
        return exc.errno != errno.EBADF
    return True


class _Poller(Protocol):
    def close(self) -> None: ...


P = TypeVar("P", bound=_Poller)


class AbstractDriver(CallbackRegistry, Generic[P]):
    """The run loop, ticks, errors and the poller skeleton, on a poller of type ``P``."""

    __slots__ = (
        "_queue",
        "_microtasks",
        "_idle",
        "_stopped",
        "_interrupt",
        "_error_handler",
        "_runner",
        "_poller",
        "_fallback",
        "_fallback_count",
        "_registered",
        "_wakeup",
        "_next_check",
    )

    _now = staticmethod(time.monotonic)
    # Makes the LoopRunner (a subclass with C methods, for the accelerated drivers).
    _runner_type: ClassVar[type[LoopRunner]] = LoopRunner

    def __init__(self, poller: P) -> None:
        super().__init__()
        self._queue: deque[Callback] = deque()  # what this tick runs, in order
        self._microtasks: deque[tuple[Callable[..., Any], tuple[Any, ...]]] = deque()
        self._idle = False  # the tick ran nothing: the next one may block in its poll
        self._stopped = False
        self._interrupt: Any = None  # an exception for run(), or a resumed main Suspension
        self._error_handler: ErrorHandler | None = None
        self._runner = self._runner_type(
            self._loop, self._interrupt_with, self._microtasks.append
        )
        self._poller = poller
        self._fallback: P | None = None  # for the streams the poller refuses
        self._fallback_count = 0  # fds in the fallback poller: they make every wait a poll
        self._registered = 0  # fds registered in either poller, the wakeup socket included
        self._wakeup: FdEntry | None = None  # the signal wakeup socket's registration
        self._next_check = 0.0  # when an idle loop checks its streams next (_idle_wait)

    # -- the backend's hooks ----------------------------------------------------------------

    @property
    @abc.abstractmethod
    def _refusals(self) -> tuple[type[Exception], ...]:
        """What ``_add`` raises when the poller refuses a stream: it goes to the fallback."""

    @abc.abstractmethod
    def _add(self, poller: P, entry: FdEntry, events: int) -> Any:
        """Register ``entry`` with ``poller`` for ``events``; return the token (``entry.token``).

        ``None``: the stream was closed since it was registered, so it can never fire.
        """

    @abc.abstractmethod
    def _modify(self, entry: FdEntry, events: int) -> None:
        """Make ``entry``'s registration ask for ``events``; a closed stream is ignored."""

    @abc.abstractmethod
    def _remove(self, entry: FdEntry) -> None:
        """Drop ``entry``'s registration; a stream closed behind our back is ignored."""

    @abc.abstractmethod
    def _new_fallback(self) -> P:
        """A poller that accepts every stream the first one refuses."""

    @abc.abstractmethod
    def _wait(self, poller: P, timeout: float | None) -> list[Any]:
        """Wait on ``poller`` up to ``timeout`` seconds (``None``: no limit); what is ready."""

    @abc.abstractmethod
    def _queue_ready(self, ready: list[Any]) -> None:
        """Queue the callbacks ``_wait``'s result wakes; ``_drain_wakeup()`` for the wakeup."""

    # -- the poller skeleton ------------------------------------------------------------------

    def get_handle(self) -> P:
        """The poller this driver waits on."""
        return self._poller

    def _io_update(self, entry: FdEntry, old: int, new: int) -> None:
        if entry.token is None:
            if new:
                self._register(entry, new)
        elif new:
            self._modify(entry, new)
        else:
            self._remove(entry)
            entry.token = None
            self._registered -= 1
            if entry.fallback:
                entry.fallback = False
                self._fallback_count -= 1

    def _register(self, entry: FdEntry, events: int) -> None:
        try:
            if type(entry.stream) is int and not _names_an_open_file(entry.fd):
                # poll() and select() take any number and report it ready (POLLNVAL, EBADF)
                # on every tick; epoll refuses it below.  Lost as a closed stream is.
                token = None
            else:
                token = self._add(self._poller, entry, events)
        except self._refusals as refusal:
            if getattr(refusal, "errno", None) == errno.EBADF:
                # A number that is not open (a stream's fd closed behind its back; a bare int
                # on Windows, which the check above leaves out): lost below as a closed
                # stream is; the fallback's poll() would call it ready.
                token = None
            else:
                token = self._add_to_fallback(entry, events, refusal)
        if token is not None:
            entry.token = token
            self._registered += 1
        elif entry is not self._wakeup:
            self._lose_stream(entry)  # closed before this tick activated its callbacks

    def _add_to_fallback(self, entry: FdEntry, events: int, refusal: Exception) -> Any:
        try:
            if self._fallback is None:
                self._fallback = self._new_fallback()
            token = self._add(self._fallback, entry, events)
        except Exception:
            # No fallback here (no POLL backend), or it refuses too: the first refusal says why.
            raise refusal from None
        if token is not None:
            entry.fallback = True
            self._fallback_count += 1
        return token

    def _watch_wakeup(self, sock: socket.socket | None) -> None:
        if sock is not None:
            self._wakeup = FdEntry(sock.fileno(), sock)
            self._io_update(self._wakeup, 0, READ)
        elif self._wakeup is not None:
            self._io_update(self._wakeup, READ, 0)
            self._wakeup = None

    def _new_signals(self) -> SignalSource:
        return SignalState(self._watch_wakeup)

    def _drain_wakeup(self) -> None:
        """The wakeup socket was ready: empty it (the signals themselves are pending)."""
        if self._signals is not None:
            self._signals.take(self._wakeup)

    def _poll(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds, then queue what is ready."""
        if self._fallback_count:
            # The fallback's streams are always ready: wait on neither poller.
            assert self._fallback is not None
            ready = self._wait(self._poller, 0) + self._wait(self._fallback, 0)
        elif self._registered:
            ready = self._wait(self._poller, timeout)
        else:
            # No fd to wait for: a zero timeout needs no system call at all.
            if timeout:
                time.sleep(timeout)
            return
        if ready:
            self._queue_ready(ready)
            self._idle = False
        elif timeout:
            self._idle_wait()

    # -- streams closed before their callbacks were cancelled (the module doc) ------------------

    def _idle_wait(self) -> None:
        """A blocking wait returned nothing: check the streams, at most once per slice."""
        now = self._now()
        if now >= self._next_check:
            self._next_check = now + IDLE_SLICE
            self._check_streams()

    def _check_streams(self) -> None:
        """Lose every fd entry whose stream was closed: O(fds)."""
        alive = self._stream_alive
        for entry in [entry for entry in self._entries.values() if not alive(entry)]:
            self._lose_stream(entry)

    def _stream_alive(self, entry: FdEntry) -> bool:
        """Whether ``entry``'s stream is still open (for ``_check_streams``)."""
        return entry.alive()

    def _lose_stream(self, entry: FdEntry) -> None:
        callbacks = [*entry.readers.values(), *entry.writers.values()]
        for callback in callbacks:
            self.cancel(callback.id)
            error = InvalidCallbackError.stream_closed(callback.id)
            self._microtasks.append((self._error, (callback.fn, error)))

    def close(self) -> None:
        """Restore signal state and close the pollers.  The driver is unusable after:
        ``run()``, ``on_signal()`` and a main ``suspend()`` raise ``RuntimeError``, every
        suspension is dead; a second ``close()`` does nothing.  While the loop runs (from a
        callback, or another thread) it raises ``RuntimeError``.  A callback still
        suspended (``get_suspension()``) can never be resumed now: its greenlet is ended
        with ``GreenletExit`` (its ``finally`` blocks run, and an error one raises goes to
        the error handler, or out of ``close()`` as the ``UncaughtError`` that ``run()``
        would have raised)."""
        if self._runner.running:
            # A callback, or another thread, while run() or the main suspend() runs: the loop
            # would go on over closed pollers.  asyncio refuses the same.
            raise RuntimeError("Cannot close a running driver: stop() it first")
        self._closed = True  # a run() from a finally block below is refused
        before = self._interrupt
        try:
            self._runner.close(self._error)
        finally:
            super().close()
            self._poller.close()
            if self._fallback is not None:
                self._fallback.close()
        failure = self._interrupt
        if failure is not before and isinstance(failure, BaseException):
            self._interrupt = before  # no run() is left to deliver it
            raise failure

    # -- the run loop and one tick ------------------------------------------------------------

    def _loop(self, fresh: bool) -> None:
        """Run ticks until ``stop()`` or until no callback keeps the loop alive."""
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

    def _tick(self, previous_idle: bool) -> None:
        self._stale_queued = 0  # both queues are emptied below
        enable_queue = self._enable_queue
        if enable_queue:
            # A tick nested in the activation (a stream's fileno() suspended) finds no spare.
            spare, self._enable_spare = self._enable_spare, None
            self._enable_queue = [] if spare is None else spare
            self._activate(enable_queue)
            enable_queue.clear()
            self._enable_spare = enable_queue
        defers = self._defers
        if defers:
            self._defers = []
            self._queue.extend(defers)
            self._idle = False
        # Block only after a tick that ran nothing, and once the deferred callbacks ran.
        timeout = self._blocking_timeout() if previous_idle else 0.0
        mark = len(self._queue)
        self._poll(timeout)
        signals = self._signals
        if signals is not None and signals.pending:
            self._enqueue_signals(signals, mark)
        if self._timers or self._fifo_timers:
            self._enqueue_timers()

    def _drain(self) -> None:
        """Run the microtasks, then each queued callback followed by the microtasks."""
        microtasks = self._microtasks
        queue = self._queue
        callbacks = self._callbacks
        runner = self._runner
        me = runner.loop
        if microtasks:
            self._run_microtasks()
        while queue and self._interrupt is None:
            callback = queue.popleft()
            if not callback.invokable:
                continue
            callback_id = callback.id
            fn = callback.fn
            try:
                if callback.once:
                    # A defer's or a delay's id is dead inside its callback (cancel(), inlined),
                    # and the record, which may wait in _unindexed a while, lets go of fn.
                    callback.enabled = callback.invokable = False
                    del callback.fn
                    if callback.indexed:
                        del callbacks[callback_id]
                    if callback.referenced:
                        self._live -= 1
                elif isinstance(callback, RepeatCallback):
                    # Re-armed from now, active from the next tick: never twice in one tick.
                    callback.invokable = False
                    callback.expiration = self._now() + callback.interval
                    callback.queued += 1
                    self._enable_queue.append(callback)
                arg = callback.arg
                result = fn(callback_id) if arg is None else fn(callback_id, arg)
                if result is not None:
                    self._refuse_result(callback_id, fn, result)
            except Exception as exc:
                self._error(fn, exc)
            if runner.loop is not me:
                raise Superseded  # the callback suspended: another greenlet runs the loop now
            if microtasks:
                self._run_microtasks()
        unindexed = self._unindexed  # the defers and delays that ended (_registry.py)
        if unindexed and (not unindexed[0].enabled or len(unindexed) >= self._unindexed_limit):
            self._tidy_unindexed()

    # -- the parts of a tick ------------------------------------------------------------------

    def _blocking_timeout(self) -> float:
        """The timeout of a poll after an idle tick: 0 if work came up meanwhile, else until
        the next live timer, at most ``IDLE_SLICE`` while streams are watched (also with no
        timer), else at most ``MAX_WAIT``."""
        if self._stopped or self._live <= 0:
            return 0.0
        self._drain()
        if (
            self._enable_queue
            or self._defers
            or self._stopped
            or self._interrupt is not None
            or not self._live
            or (self._signals is not None and self._signals.pending)
        ):
            return 0.0
        first = self._next_expiration()
        # With streams watched, wait in slices (the module doc's "Nobody says so").
        longest = IDLE_SLICE if self._entries else MAX_WAIT
        if first is None:
            return longest
        timeout = first - self._now()
        return 0.0 if timeout < 0 else min(timeout, longest)

    def _enqueue_signals(self, signals: SignalSource, mark: int) -> None:
        ready: list[Callback] = []
        pending = signals.pending
        while pending:
            callbacks = self._signal_callbacks.get(pending.popleft())
            if callbacks:
                ready.extend(callbacks.values())
        if ready:
            # Signals come before the I/O this tick's poll already queued.
            for offset, callback in enumerate(ready):
                self._queue.insert(mark + offset, callback)
            self._idle = False

    def _enqueue_timers(self) -> None:
        timers = self._timers
        now = self._now()
        if self._fifo_timers:
            self._enqueue_fifo(now)
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

    def _enqueue_fifo(self, now: float) -> None:
        """Queue the FIFO's due timers, each after the heap's that come before it.  The heap's
        due timers after the last of them are left to the heap's loop."""
        timers, seqs, fifo = self._timers, self._fifo_seqs, self._fifo_timers
        queue = self._queue
        taken = 0
        for callback in fifo:
            seq = seqs[taken]
            if callback.entry is not seq:  # dead: its expiration may have moved since
                self._dead_timers -= 1
            elif callback.expiration > now:
                break  # every due heap timer comes before it
            else:
                while timers and _heap_first(timers[0], callback.expiration, seq):
                    item = heapq.heappop(timers)  # due: it comes first
                    if item[2].entry is item:
                        item[2].entry = None
                        queue.append(item[2])
                    else:
                        self._dead_timers -= 1
                callback.entry = None
                queue.append(callback)
                self._idle = False
            taken += 1
        del seqs[:taken]  # all of them, unless the clock went back
        del fifo[:taken]

    @staticmethod
    def _refuse_result(callback_id: str, fn: Callable[..., Any], result: object) -> None:
        if isinstance(result, Coroutine):
            result.close()  # no "coroutine was never awaited" warning
        raise InvalidCallbackError.nonnull_return(callback_id, fn, result)

    def _run_microtasks(self) -> None:
        microtasks = self._microtasks
        runner = self._runner
        me = runner.loop
        # A microtask's error ends run() only once the microtasks behind it ran (SPEC 9.1):
        # the queue stops for any other interrupt, not for that one.
        error = None
        while microtasks and self._interrupt is error:
            fn, args = microtasks.popleft()
            try:
                fn(*args)
            except Exception as exc:
                self._error(fn, exc)
                if isinstance(self._interrupt, BaseException):
                    error = self._interrupt
            if runner.loop is not me:
                raise Superseded

    # -- errors and interrupts ------------------------------------------------------------------

    def _error(self, fn: Callable[..., Any], exc: Exception) -> None:
        handler = self._error_handler
        if handler is None:
            self._fail(
                exc if isinstance(exc, UncaughtError) else UncaughtError.from_callback(fn, exc)
            )
            return
        try:
            handler(exc)
        except Exception as failure:
            self._fail(
                failure
                if isinstance(failure, UncaughtError)
                else UncaughtError.from_handler(handler, failure)
            )

    def _fail(self, error: UncaughtError) -> None:
        """End the loop after the current callback with ``error``, unless an error already
        does (a main greenlet's resume not yet delivered gives way)."""
        if not isinstance(self._interrupt, BaseException):
            self._interrupt = error

    def _interrupt_with(self, interrupt: object) -> None:
        """End the loop after the current callback, handing ``interrupt`` to whoever runs it;
        ignored while another interrupt is pending."""
        if self._interrupt is None:
            self._interrupt = interrupt

    def _deliver_interrupt(self) -> None:
        interrupt, self._interrupt = self._interrupt, None
        self._runner.deliver(interrupt)

    # -- the Driver methods this class implements ---------------------------------------------

    def queue(self, fn: Callable[..., None], /, *args: Any) -> None:
        check_callback(fn, "fn")
        self._microtasks.append((fn, args))

    def run(self) -> None:
        self._check_open()
        self._runner.run()

    def stop(self) -> None:
        self._stopped = True

    def is_running(self) -> bool:
        return self._runner.running

    def set_error_handler(self, handler: ErrorHandler | None) -> ErrorHandler | None:
        if handler is not None:
            check_callback(handler, "handler")
        previous, self._error_handler = self._error_handler, handler
        return previous

    def get_error_handler(self) -> ErrorHandler | None:
        return self._error_handler

    def get_suspension(self) -> Suspension:
        return self._runner.suspension()
