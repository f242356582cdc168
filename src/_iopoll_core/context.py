"""``Context``: the backend-independent bookkeeping around one OS ``Mechanism``.

Everything that is not "talk to the OS" lives here, once, for every backend: the watchers
keyed by fd, one-shot state, ``max_events`` leftovers, retiring watchers whose stream was
closed, TLS-buffered bytes, argument validation and fork safety.

Closed streams.  Python has no hook that runs when a socket or file is closed, so a closed
stream is noticed lazily: when ``wait()`` reports its fd, when its fd number is added again,
or when the watcher itself is asked (``is_active``, ``modify``, ``remove``).  A watcher's
handle is alive while its ``fileno()`` still answers the fd it was added with.  epoll keys
registrations by (fd number, open file), so a closed fd whose file a ``dup`` keeps open
leaves a registration nothing can delete; when one may exist, the OS object is rebuilt from
the watchers (``_rebuild``).  That is O(watchers), and it happens only after a watched
stream was closed without ``remove()``.

The module is longer than most here on purpose: the Context is the one place where the
bookkeeping lives, so that no backend repeats any of it.
"""

from __future__ import annotations

import os
import time
import weakref
from collections.abc import Callable, Iterable
from datetime import timedelta
from typing import Any, ClassVar, NoReturn

from .arguments import FOREVER, MAX_EVENTS_LIMIT, check_max_events, timeout_seconds
from .backend import BackendBase
from .errors import (
    BackendUnavailableError,
    FailedContextInitializationError,
    FailedHandleAddError,
    FailedPollOperationError,
    FailedPollWaitError,
    FailedWatcherModificationError,
    HandleAlreadyWatchedError,
    InactiveWatcherError,
    InvalidHandleError,
    PollError,
    Refusal,
    code_for_errno,
    raised_by_backend,
)
from .events import DecodeTable, ErrorCode, Event, coerce_events, decode_bits, os_events
from .handles import (
    MAX_FD,
    Handle,
    HasFileno,
    StreamPollHandle,
    WeakHandle,
    _Uncopyable,
    fd_probe,
)
from .mechanism import Mechanism
from .source_handles import SourceHandle, TimerHandle
from .timers import TimerQueue
from .watcher import ACTIVE, REMOVED, RETIRED, Watcher

__all__ = ["Context"]


_contexts: weakref.WeakSet[Context] = weakref.WeakSet()


def _forget_contexts_after_fork() -> None:
    # The child shares the parent's epoll/kqueue object: touching it would change the
    # parent's registrations, so every inherited context becomes unusable here.
    for context in list(_contexts):
        context._use(context._mechanism, usable=False)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_contexts_after_fork)


def _deactivate(*tables: dict[Any, Watcher]) -> None:
    """The watchers of a context that closes or is collected become inactive."""
    for table in tables:
        for watcher in table.values():
            # A watcher whose stream was closed first stays retired: its remove() is a no-op.
            watcher._state = REMOVED if watcher._stream_open() else RETIRED


def _no_fd() -> int:
    # A timer watcher's fd probe: it answers the fd it was added with (-1), so the checks
    # of a stream's liveness always find a timer alive.
    return -1


class Context(_Uncopyable):
    """Watches handles and reports which are ready.

    Use it as a context manager, or call ``close()``, to release the OS object.  Not
    thread-safe: use one context per thread, or your own lock.
    """

    __slots__ = (
        "_backend",
        "_mechanism",
        "_usable",
        "_fast_poll",
        "_native_fd",
        "_native_pollfds",
        "_first_timer",
        "_decode",
        "_max_timeout",
        "_closed",
        "_self_ref",
        "_watchers",
        "_by_fd",
        "_buffered",
        "_stale_fds",
        "_leftovers",
        "_timers",
        "_releases",
        "_lost",
        "_removed",
        "_on_removed",
        "__weakref__",
    )

    # Set by each implementation: the Backend enum whose members it accepts.
    _backend_type: ClassVar[type[BackendBase]]
    # The class of the watchers add() makes (iopoll's carries its C accelerator's getter).
    _watcher_type: ClassVar[type[Watcher]] = Watcher

    _backend: BackendBase
    _mechanism: Mechanism | None  # None once closed
    _usable: Mechanism | None  # None once closed, or in a forked child
    # The mechanism's poll while wait() may take its fast path: usable, and no buffered
    # bytes or leftovers to merge.  None sends every wait() down the general path.
    _fast_poll: Callable[[float, int], list[tuple[int, int]]] | None
    # While the fast path is on: the fd of the mechanism's OS object that the C fast path
    # waits on itself (Mechanism.native_fd), else -1.  Pure Python never reads it.
    _native_fd: int
    # The same for POLL: the mechanism's struct pollfd array (Mechanism.native_pollfds).
    _native_pollfds: bytearray | None
    # The first armed timer's deadline (time.monotonic() seconds), None with none armed:
    # the fast path cuts its OS wait there, and leaves a due timer to the general path.
    _first_timer: float | None
    _decode: DecodeTable
    _max_timeout: float
    _watchers: dict[int, Watcher]
    # The same watchers as a list indexed by fd (None where there is none): how the C fast
    # path finds a report's watcher without hashing.  Kept by _remember and _forget.
    _by_fd: list[Watcher | None]
    _buffered: dict[int, Watcher]  # watchers whose stream can hold bytes (pending())
    _stale_fds: set[int]  # fds the OS may still hold registrations for
    _leftovers: dict[int, int]  # fd -> raw bits cut by max_events (0: ask the OS again)
    _timers: TimerQueue  # the timer watchers, and the deadlines of the armed ones
    # fd -> what gives back the process-wide state a watcher holds (a SignalHandle's block);
    # a weakref.finalize, so that it also runs when the context is collected.
    _releases: dict[int, weakref.finalize[..., object]]
    _lost: list[Watcher]  # watchers whose weak handle's object was collected, to retire
    _removed: list[Watcher]  # watchers lost without remove(), for on_watcher_removed
    _on_removed: Callable[[Watcher], object] | None

    def __init__(self, backend: BackendBase) -> None:
        if getattr(self, "_self_ref", None) is not None:
            raise TypeError("Context.__init__ cannot be called twice")
        if not isinstance(backend, self._backend_type):
            raise TypeError(
                f"backend must be a {self._backend_type.__qualname__}, "
                f"not {type(backend).__name__}"
            )
        mechanism_class = backend._mechanism_class()
        if mechanism_class is None:
            raise BackendUnavailableError(f"Backend {backend.name} is not available")
        try:
            mechanism = mechanism_class()
        except OSError as exc:
            raise FailedContextInitializationError(
                f"Failed to initialize polling context: {exc.strerror or exc}",
                code_for_errno(exc.errno),
                exc.errno,
            ) from exc
        self._backend = backend.resolve()
        self._closed = False
        self._self_ref = weakref.ref(self)
        self._watchers = {}
        self._by_fd = []
        self._buffered = {}
        self._stale_fds = set()
        self._leftovers = {}
        self._timers = TimerQueue()
        self._releases = {}
        self._lost = []
        self._removed = []
        self._on_removed = None
        self._decode = mechanism.decode
        self._max_timeout = mechanism.max_timeout
        self._use(mechanism)
        _contexts.add(self)
        # A context that is collected behaves as closed for its watchers (SPEC 4): the
        # finalizer holds the watcher tables, not the context.
        weakref.finalize(self, _deactivate, self._watchers, self._timers.watchers).atexit = False

    # -- public API -------------------------------------------------------------------

    @property
    def backend(self) -> BackendBase:
        """The concrete backend in use (never ``AUTO``)."""
        return self._backend

    def __len__(self) -> int:
        """The number of active watchers (O(watchers): it checks each one's stream, and
        retires the watchers of streams found closed)."""
        streams = sum(1 for watcher in list(self._watchers.values()) if self._check_alive(watcher))
        return streams + len(self._timers.watchers)

    def __enter__(self) -> Context:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"{len(self._watchers)} watchers"
        return f"<{type(self).__name__} backend={self._backend.name} {state}>"

    def close(self) -> None:
        """Deactivate every watcher and release the OS object.  Idempotent."""
        if self._closed:
            return
        self._closed = True
        _deactivate(self._watchers, self._timers.watchers)
        self._watchers.clear()
        self._by_fd.clear()
        self._buffered.clear()
        self._leftovers.clear()
        self._timers.clear()
        for release in self._releases.values():
            release()
        self._releases.clear()
        self._lost.clear()
        self._removed.clear()
        mechanism = self._mechanism
        self._use(None)
        if mechanism is not None:
            mechanism.close()

    def add(
        self,
        handle: Handle | HasFileno | int,
        events: Event | Iterable[Event],
        data: Any = None,
    ) -> Watcher:
        """Watch ``handle`` for ``events`` and return the new ``Watcher``.

        ``handle`` is a ``Handle`` or anything ``StreamPollHandle`` accepts (wrapped for
        you).  Raises ``HandleAlreadyWatchedError`` if its fd is already watched here,
        ``InvalidHandleError`` if it has no usable fd, and ``FailedHandleAddError`` if the
        backend refuses it.
        """
        mechanism = self._usable_mechanism(FailedHandleAddError)
        if not isinstance(handle, Handle):
            if isinstance(handle, bool) or not isinstance(handle, (int, HasFileno)):
                raise TypeError(
                    "handle must be a Handle, an object with fileno() or an int fd, "
                    f"not {type(handle).__name__}"
                )
            if isinstance(handle, int) and handle < 0:
                raise ValueError(f"handle must be a file descriptor >= 0, not {handle}")
            handle = StreamPollHandle(handle)
        source = handle if isinstance(handle, SourceHandle) else None
        if source is not None:
            wanted = coerce_events(events, source._event, type(source).__name__)
            if isinstance(source, TimerHandle):
                return self._add_timer(source, wanted, data)
            self._check_source_supported(mechanism, source)
        else:
            wanted = coerce_events(events)
            self._check_supported(mechanism, wanted, FailedHandleAddError)
        try:
            fd = handle.fileno()
        except (OSError, ValueError) as exc:
            raise InvalidHandleError(f"Invalid handle for polling: {exc}") from exc
        if type(fd) is not int or fd < 0:
            raise InvalidHandleError(f"Invalid handle for polling: fileno() returned {fd!r}")
        if fd > MAX_FD:
            raise self._beyond_any_fd(fd)
        if isinstance(handle, (StreamPollHandle, WeakHandle)) and not handle.is_valid():
            raise InvalidHandleError("Invalid handle for polling: its stream is closed")

        existing = self._watchers.get(fd)
        if existing is not None:
            if existing._stream_open():
                raise HandleAlreadyWatchedError(f"Handle already added (fd {fd})")
            self._retire(existing)
        if source is not None:
            source._watch()  # a SignalHandle blocks its signals (or refuses this thread)
        try:
            if fd in self._stale_fds:
                mechanism = self._rebuild()
            mechanism.register(fd, os_events(wanted))
        except (OSError, Refusal) as exc:
            if source is not None:
                source._unwatch()
            raise self._failure(FailedHandleAddError, "Failed to add handle", exc) from exc

        probe = fd_probe(handle)
        watcher = self._watcher_type._make(self._self_ref, fd, handle, probe, wanted, data)
        self._remember(watcher)
        if source is not None and source._holds_process_state:
            self._releases[fd] = weakref.finalize(self, source._unwatch)
        if isinstance(handle, WeakHandle):
            handle._watchers.add(watcher)
        return watcher

    def on_watcher_removed(self, callback: Callable[[Watcher], object] | None = None) -> None:
        """Call ``callback(watcher)`` for each watcher this context loses without
        ``remove()``: its stream was closed, its weak handle's stream was collected, or its
        fd number was taken by a new registration.

        The calls are made at the start of the next ``wait()``, before it polls, never from
        a close path or the garbage collector.  If the callback raises, ``wait()`` raises
        that exception (having polled nothing) and the watchers still queued stay queued
        for the next ``wait()``.  ``None`` clears the callback and what is queued.
        """
        if callback is not None and not callable(callback):
            raise TypeError(f"callback must be callable or None, not {type(callback).__name__}")
        self._on_removed = callback
        if callback is None:
            self._removed.clear()
        self._refresh_fast_path()

    def wait(
        self,
        timeout: float | timedelta | None = None,
        microseconds: int = 0,
        max_events: int | None = None,
    ) -> list[Watcher]:
        """Wait until watchers are ready and return them, one entry per watcher.

        ``timeout`` is ``None`` (until something is ready), seconds as ``int`` or
        ``float``, or a ``timedelta``; ``microseconds`` is added to it.  At most
        ``max_events`` watchers are returned; the rest stay ready for the next call.

        A context holding only fired one-shot watchers has nothing that can become ready:
        ``wait(None)`` then blocks until a signal handler raises.
        """
        poll = self._fast_poll
        watchers = self._watchers
        if poll is not None and max_events is None and microseconds == 0 and watchers:
            # The hot path of an event loop: no limit, nothing buffered or left over, and
            # either no timeout or a plain float or int one that a single OS call can wait.
            if timeout is None:
                seconds = started = FOREVER
            elif (type(timeout) is float or type(timeout) is int) and (
                0 <= timeout <= self._max_timeout
            ):
                seconds = timeout
                started = time.monotonic() if timeout else 0.0
            else:
                return self._wait(timeout, microseconds, max_events)
            if type(microseconds) is not int:  # 0.0 or False: let _wait() refuse it
                return self._wait(timeout, microseconds, max_events)
            wait_for = seconds
            first = self._first_timer
            if first is not None:
                # A timer is armed: a due one goes to the general path, which reports
                # timers; otherwise the OS wait ends at its deadline at the latest.
                left = first - time.monotonic()
                if left <= 0:
                    return self._wait(timeout, microseconds, max_events)
                if seconds < 0 or left < seconds:
                    wait_for = left
            try:
                raw = poll(wait_for, len(watchers))
            except OSError as exc:
                self._poll_failed(exc)
            if not raw and wait_for is not seconds:
                return self._finish_wait(raw, seconds, started)  # the deadline cut it short
            # Reports that need care (no watcher, closed stream, one-shot, POLLNVAL, which
            # is missing from the decode table) leave this loop for _collect; what it did
            # so far is only setting _triggered, which _collect sets again.
            decode = self._decode
            ready: list[Watcher] = []
            try:
                for fd, bits in raw:
                    watcher = watchers[fd]
                    if not watcher._plain:
                        break
                    try:  # Watcher._stream_open(), inlined
                        if watcher._probe() != fd:
                            break
                    except Exception:  # a closed file's fileno(), or a broken handle's:
                        break  # _collect takes it for closed, as _stream_open() does
                    watcher._triggered = decode[bits]
                    ready.append(watcher)
                else:
                    return ready
            except KeyError:  # no watcher (a stale entry); a bit the table lacks (POLLNVAL)
                pass
            return self._finish_wait(raw, seconds, started)
        return self._wait(timeout, microseconds, max_events)

    # iopoll's C accelerator (iopoll/_speedups.c) replaces wait() above with the same fast
    # path in C; it calls _wait, _poll_failed and _finish_wait for everything else, so their
    # names and signatures are its interface.

    # -- wait() in general ---------------------------------------------------------------

    def _wait(
        self,
        timeout: float | timedelta | None,
        microseconds: int,
        max_events: int | None,
    ) -> list[Watcher]:
        """``wait()`` in general: every timeout form, ``max_events``, buffered bytes."""
        self._usable_mechanism(FailedPollWaitError)
        seconds = timeout_seconds(timeout, microseconds)
        limit = MAX_EVENTS_LIMIT if max_events is None else check_max_events(max_events)
        if self._lost or self._removed:
            self._report_removed()
        return self._wait_for(seconds, limit, None)

    def _finish_wait(
        self, raw: list[tuple[int, int]], seconds: float, started: float
    ) -> list[Watcher]:
        """The fast path's reports, when one needs care: ``_collect`` decodes them all, and
        if none was about a live watcher the wait goes on for what is left of ``seconds``."""
        mechanism = self._usable_mechanism(FailedPollWaitError)
        ready = self._collect_all(mechanism, raw, MAX_EVENTS_LIMIT)
        if not ready and seconds > 0:
            seconds = max(seconds - (time.monotonic() - started), 0.0)
        return self._wait_for(seconds, MAX_EVENTS_LIMIT, ready)

    def _wait_for(self, seconds: float, limit: int, ready: list[Watcher] | None) -> list[Watcher]:
        """Poll until a watcher is ready or ``seconds`` (``FOREVER``: no limit) have passed.

        ``ready`` is what a poll already made of its reports, or None.  A poll whose every
        report was about a retired watcher (a closed stream seen through a dup, a reused fd
        number, select()'s EBADF) is no reason to return early: the loop polls again for
        the time that is left.  It is the one loop over the clock in the Context; a timeout
        longer than one OS call can wait goes round it too.
        """
        deadline = time.monotonic() + seconds if seconds > 0 else 0.0
        while True:
            if ready is None:
                ready = self._poll_once(self._usable_mechanism(FailedPollWaitError), seconds, limit)
            if ready or seconds == 0:
                break
            if seconds > 0:
                seconds = deadline - time.monotonic()
                if seconds <= 0:
                    if not self._timers:
                        break
                    seconds = 0.0  # one last look, for a timer due at the deadline
            elif not self._watchers and not self._timers:
                break  # FOREVER with nothing to wait for
            ready = None
        # Leftovers and buffered watchers come and go above: the fast path may apply again.
        self._refresh_fast_path()
        return ready or []

    def _poll_once(self, mechanism: Mechanism, seconds: float, limit: int) -> list[Watcher]:
        """Due timers, then one poll of the OS for at most ``seconds``, as watchers.

        Due timers come first and take their ``max_events`` slots before any fd (SPEC 10):
        the OS is then asked, without waiting, for what fits in the rest.  With none due,
        the OS wait ends at the first deadline.
        """
        timers = self._timers
        if timers:
            due = timers.take_due(limit)
            if due:
                if len(due) < limit and self._watchers:
                    due += self._poll_watchers(mechanism, 0.0, limit - len(due))
                return due
            first = timers.seconds_to_next()
            if first is not None and (seconds < 0 or first < seconds):
                seconds = first
        if not self._watchers:
            # Nothing else can become ready: PHP returns at once for "no timeout", and sleeps
            # out a finite one (in chunks: time.sleep() overflows on absurd values).
            if seconds > 0:
                time.sleep(min(seconds, mechanism.max_timeout))
            return []
        return self._poll_watchers(mechanism, seconds, limit)

    def _poll_watchers(self, mechanism: Mechanism, seconds: float, limit: int) -> list[Watcher]:
        """One poll of the OS, merged with what is ready without it, as watchers.

        Watchers whose stream holds buffered bytes and reports left over from the last
        ``max_events`` cut are ready already: the OS is then only asked what else is.
        """
        buffered = self._buffered_watchers() if self._buffered else []
        leftovers = self._leftovers
        if buffered or any(leftovers.values()):
            seconds = 0.0
        raw = self._poll(mechanism, seconds)
        if buffered:
            return self._merge_buffered(mechanism, raw, buffered, limit)
        if leftovers:
            raw = self._leftovers_first(raw)
        return self._collect_all(mechanism, raw, limit) if raw else []

    def _poll(self, mechanism: Mechanism, seconds: float) -> list[tuple[int, int]]:
        """Ask the OS once, for every ready fd, for no longer than one call of it can wait.

        Every poll of the OS but the fast path's goes through here.  The batch has room for
        every registration, the stale kernel entries included (they report like the watchers
        they were), so the ``max_events`` cut is always the Context's, never the OS's: the
        Context can only give a left-out watcher its turn (SPEC 4) if it saw it left out.
        epoll's own rotation does not do it: a level fd stays on its ready list until a later
        epoll_wait() scans it, so an fd that was ready once and drained in between keeps its
        place ahead of one a short batch left out, and a batch of ``limit`` can pass over a
        left-out fd altogether.
        """
        # epoll and kqueue allocate their result array per call: ask for no more than can be
        # ready.  (-1 would mean epoll's default of FD_SETSIZE - 1, not "as many as ready".)
        batch = max(len(self._watchers) + len(self._stale_fds), 1)
        try:
            return mechanism.poll(min(seconds, mechanism.max_timeout), batch)
        except OSError as exc:
            self._poll_failed(exc)

    def _poll_failed(self, exc: OSError) -> NoReturn:
        """Raise what ``wait()`` raises for ``exc``, which the mechanism's poll raised."""
        mechanism = self._mechanism
        if not raised_by_backend(exc, None if mechanism is None else type(mechanism)):
            raise exc  # a signal handler's exception leaves wait() unchanged (PEP 475)
        raise self._failure(FailedPollWaitError, "Poll wait failed", exc) from exc

    def _collect_all(
        self, mechanism: Mechanism, raw: list[tuple[int, int]], limit: int
    ) -> list[Watcher]:
        """``_collect``, then as many more polls as reports about no live watcher cost.

        A stale kernel entry or a closed stream's report takes a slot of the batch the OS
        was asked for, and is dropped here: the watchers it crowded out are still ready and
        must come out of this same wait (SPEC 4).  So the OS is asked again, at once, for
        the room that is left.  Each round drops a dead watcher or rebuilds away a stale
        entry, so the loop ends (it stops as soon as a round changed neither); it runs only
        after a stream was closed without remove().
        """
        ready: list[Watcher] = []
        while True:
            watching = len(self._watchers)
            try:
                found = self._collect(mechanism, raw, limit - len(ready))
            except FailedPollWaitError:
                if ready:
                    return ready  # a rebuild was refused: the next wait tries it again
                # Refused, and the batch (the fast path's: one slot per watcher) held only
                # stale reports.  One more poll, with room for them, finds what they hid;
                # with nothing there either, the refusal is the answer.
                return self._collect(mechanism, self._poll(mechanism, 0.0), limit)
            ready += found
            if len(found) == len(raw) or len(ready) >= limit:
                return ready  # nothing was dropped, or there is no room left
            usable = self._usable  # _collect may have rebuilt the OS object
            if usable is None or (usable is mechanism and len(self._watchers) == watching):
                return ready
            mechanism = usable
            reported = {watcher._fd for watcher in ready}
            more = self._poll(mechanism, 0.0)
            if self._leftovers:  # a rebuild kept what the old object held: it goes first
                more = self._leftovers_first(more)
            raw = [pair for pair in more if pair[0] not in reported]
            if not raw:
                return ready

    def _collect(
        self, mechanism: Mechanism, raw: list[tuple[int, int]], limit: int
    ) -> list[Watcher]:
        """Turn the OS's ``(fd, bits)`` pairs into watchers, updating their state.

        Every case is handled here: registrations with no watcher, closed streams, POLLNVAL,
        one-shots and the ``max_events`` cut.  ``wait()`` inlines the common case and falls
        back to this.  It allocates only the list it returns.
        """
        watchers = self._watchers
        decode = mechanism.decode
        invalid_fd_bit = mechanism.invalid_fd_bit
        # The OS was asked for every ready fd (_poll; the fast path has no limit): the
        # max_events cut is made here.
        cut = len(raw) > limit
        ready: list[Watcher] = []
        found_stale = False
        for fd, bits in raw:
            try:
                watcher = watchers[fd]
            except KeyError:
                # No watcher, yet the OS reports it: a registration we could not delete.
                found_stale = True
                continue
            if not watcher._stream_open():
                # Its stream was closed; the report came from a dup or a reused fd number.
                self._retire(watcher)
                found_stale = found_stale or fd in self._stale_fds
                continue
            if cut and len(ready) == limit:
                self._leftovers[fd] = self._kept_bits(mechanism, watcher, bits)
                continue
            if bits & invalid_fd_bit:
                # Closed behind the handle's back (POLLNVAL): report it this once only.
                watcher._triggered = Event.ERROR
                self._retire(watcher)
            else:
                if not watcher._kind:
                    watcher._triggered = decode_bits(decode, bits)
                elif watcher._handle._take():  # type: ignore[attr-defined]
                    # A handle that is not a stream: its own event alone (SPEC 10).
                    watcher._triggered = watcher._kind
                else:
                    # Nothing after all (another handle took the signal first).
                    if watcher._oneshot and mechanism.disarms_reported_oneshots:
                        self._rearm(mechanism, watcher)  # the OS disarmed it for nothing
                    continue
                if watcher._oneshot:
                    watcher._armed = False
                    if not mechanism.disarms_reported_oneshots:
                        mechanism.disarm(fd)
            ready.append(watcher)
        if found_stale:
            try:
                self._rebuild()
            except OSError as exc:  # no fd left for a new epoll object (EMFILE)
                if not ready:
                    raise self._failure(FailedPollWaitError, "Poll wait failed", exc) from exc
                # What is ready goes out now; the stale entry reports again, and the next
                # wait tries the rebuild again.
        return ready

    @staticmethod
    def _rearm(mechanism: Mechanism, watcher: Watcher) -> None:
        try:
            mechanism.modify(watcher._fd, os_events(watcher._events))
        except (OSError, Refusal):
            pass  # it stays disarmed; a modify() by its owner re-arms it

    @staticmethod
    def _kept_bits(mechanism: Mechanism, watcher: Watcher, bits: int) -> int:
        # A level report comes back from the OS by itself; an edge, a one-shot the OS
        # already disarmed, or an invalid fd (reported once) would be lost: keep their bits.
        if (
            watcher._events & Event.EDGE_TRIGGERED
            or bits & mechanism.invalid_fd_bit
            or (watcher._oneshot and mechanism.disarms_reported_oneshots)
        ):
            return bits
        return 0

    def _merge_buffered(
        self, mechanism: Mechanism, raw: list[tuple[int, int]], buffered: list[Watcher], limit: int
    ) -> list[Watcher]:
        """Merge the OS's reports with buffered watchers (READ without the OS).

        One entry per watcher.  Both kinds share the ``max_events`` slots, and what was
        left out last time goes first, in the order it was left out, so nothing starves.
        """
        previous = list(self._leftovers)
        if self._leftovers:
            raw = self._leftovers_first(raw)
        bits_of = dict(raw)
        pending = {watcher._fd: watcher for watcher in buffered}
        order = [fd for fd in previous if fd in bits_of or fd in pending]
        seen = set(order)
        order += [fd for fd, _ in raw if fd not in seen]
        order += [fd for fd in pending if fd not in seen and fd not in bits_of]
        # Reports with no live watcher take no slot: _collect drops them (and rebuilds).
        watchers = self._watchers
        dead = {
            fd
            for fd in bits_of
            if fd not in pending and (fd not in watchers or not watchers[fd]._stream_open())
        }
        if dead:
            order = [fd for fd in order if fd not in dead]
        chosen, cut = order[:limit], order[limit:]
        chosen_raw = [(fd, bits_of[fd]) for fd in chosen if fd in bits_of]
        cut_raw = [(fd, bits_of[fd]) for fd in cut if fd in bits_of]
        dead_raw = [(fd, bits_of[fd]) for fd in dead]
        ready = (
            self._collect(mechanism, dead_raw + chosen_raw + cut_raw, len(chosen_raw))
            if raw
            else []
        )
        kept = self._leftovers
        self._leftovers = {fd: kept.get(fd, 0) for fd in cut if fd in kept or fd in pending}
        read = Event.READ
        for watcher in ready:
            if pending.get(watcher._fd) is watcher:
                watcher._triggered |= read
        for fd in chosen:
            if fd in bits_of:
                continue
            watcher = pending[fd]
            watcher._triggered = read
            if watcher._oneshot:
                watcher._armed = False
                usable = self._usable  # _collect above may have rebuilt the OS object
                if usable is not None:
                    usable.disarm(fd)
            ready.append(watcher)
        return ready

    def _buffered_watchers(self) -> list[Watcher]:
        """Level ``READ`` watchers whose stream holds bytes the fd no longer shows."""
        found = []
        for watcher in list(self._buffered.values()):
            if not watcher._armed or watcher._events & Event.EDGE_TRIGGERED:
                continue
            if not watcher._events & Event.READ:
                continue
            if not watcher._stream_open():
                self._retire(watcher)
                continue
            stream: Any = getattr(watcher._handle, "stream", None)
            try:
                pending = stream.pending()
            except (OSError, ValueError):
                continue
            if pending > 0:
                found.append(watcher)
        return found

    def _leftovers_first(self, raw: list[tuple[int, int]]) -> list[tuple[int, int]]:
        """Put what ``max_events`` cut last time ahead of the rest, so nothing starves."""
        reported = dict(raw)
        ordered = []
        for fd, kept in self._leftovers.items():
            bits = reported.pop(fd, 0) | kept
            if bits:
                ordered.append((fd, bits))
        self._leftovers = {}
        ordered.extend(reported.items())
        return ordered

    # -- watcher bookkeeping ------------------------------------------------------------

    def _refresh_fast_path(self) -> None:
        """Let wait() take its fast path, unless something needs the general one: buffered
        bytes, leftovers, or watchers lost without remove() to report; and tell it the first
        timer's deadline.

        The mutators below (``_use``, ``_remember``, ``_forget``, ``_rebuild``, the timer
        and removal bookkeeping) call it wherever one of those changes, and the general wait
        when it is done: nothing else assigns ``_fast_poll``.
        """
        mechanism = self._usable
        self._first_timer = self._timers.first_deadline() if self._timers else None
        if mechanism is None or self._buffered or self._leftovers or self._lost or self._removed:
            self._fast_poll = None
            self._native_fd = -1
            self._native_pollfds = None
        else:
            self._fast_poll = mechanism.poll
            self._native_fd = mechanism.native_fd
            self._native_pollfds = mechanism.native_pollfds

    def _use(self, mechanism: Mechanism | None, *, usable: bool = True) -> None:
        """Make ``mechanism`` this context's OS object (None: closed), usable or not."""
        self._mechanism = mechanism
        self._usable = mechanism if usable else None
        self._refresh_fast_path()

    def _remember(self, watcher: Watcher) -> None:
        """Record a new watcher under its fd."""
        fd = watcher._fd
        self._watchers[fd] = watcher
        by_fd = self._by_fd
        if fd >= len(by_fd):
            by_fd.extend([None] * (fd + 1 - len(by_fd)))
        by_fd[fd] = watcher
        if callable(getattr(getattr(watcher._handle, "stream", None), "pending", None)):
            self._buffered[fd] = watcher
            self._refresh_fast_path()

    def _forget(self, fd: int) -> None:
        """Drop every record of ``fd``: its watcher, buffered bytes and left-over report."""
        del self._watchers[fd]
        self._by_fd[fd] = None
        self._buffered.pop(fd, None)
        self._leftovers.pop(fd, None)
        release = self._releases.pop(fd, None)
        if release is not None:
            release()  # a SignalHandle's watcher: its signals' block
        self._refresh_fast_path()

    def _check_alive(self, watcher: Watcher) -> bool:
        """Whether the watcher's stream is still open; retires it if not."""
        if watcher._state != ACTIVE:
            return False
        if watcher._stream_open():
            return True
        self._retire(watcher)
        return False

    def _retire(self, watcher: Watcher) -> None:
        """Drop a watcher whose stream was closed (or whose fd became invalid)."""
        self._mark_lost(watcher)
        fd = watcher._fd
        if self._watchers.get(fd) is not watcher:
            return
        self._forget(fd)
        self._unregister(fd)

    def _mark_lost(self, watcher: Watcher) -> None:
        """``watcher`` leaves without remove(): inactive, and queued for on_watcher_removed."""
        watcher._state = RETIRED
        if self._on_removed is not None:
            self._removed.append(watcher)
            self._refresh_fast_path()

    def _lose(self, watcher: Watcher) -> None:
        """The object of ``watcher``'s weak handle was collected: retire it at the next
        ``wait()``.  Called by the garbage collector, so it only takes note."""
        if not self._closed:
            self._lost.append(watcher)
            self._refresh_fast_path()

    def _report_removed(self) -> None:
        """The start of a ``wait()``: retire the watchers whose weak handle's object was
        collected, then call on_watcher_removed for each watcher lost without remove().

        The callback's exception leaves ``wait()`` before it polls; the watchers behind
        the one it was called for stay queued for the next ``wait()``.
        """
        lost, self._lost = self._lost, []
        for watcher in lost:
            if watcher._state == ACTIVE and self._watchers.get(watcher._fd) is watcher:
                self._retire(watcher)
        removed = self._removed
        while removed and self._on_removed is not None:
            self._on_removed(removed.pop(0))
        removed.clear()  # on_watcher_removed(None) from a callback drops the rest
        self._refresh_fast_path()

    def _unregister(self, fd: int) -> None:
        mechanism = self._usable
        if mechanism is not None and not mechanism.unregister(fd):
            self._stale_fds.add(fd)

    def _rebuild(self) -> Mechanism:
        """Replace the OS object with a fresh one holding only the live watchers.

        The caller must not be able to tell (SPEC 4), which takes four steps:

        - epoll reports an edge-triggered fd that is ready when it is registered, an edge
          the watcher may have had reported already.  Edge watchers are registered first
          and those first reports are read from the fresh object and dropped.
        - What the old object has ready is read from it last: the edges it holds but has
          not reported yet (a batch was full), which would be lost with it, and the order
          of its ready list, which is how epoll gives a watcher left out by ``max_events``
          its turn on the next call.  Both become leftovers, behind those already kept.
          An edge that arrives between the two reads reaches both objects and may be
          reported twice; none is lost.
        - A one-shot the old object already fired, whose report a ``max_events`` cut keeps
          in the leftovers, is left out of the fresh object, as a fired one-shot is.
        """
        old = self._usable
        assert old is not None
        registered = len(self._watchers) + len(self._stale_fds)
        fresh = type(old)()
        edges: list[Watcher] = []
        others: list[Watcher] = []
        for fd, watcher in list(self._watchers.items()):
            if not watcher._stream_open():
                self._mark_lost(watcher)
                self._forget(fd)
            elif watcher._oneshot and self._leftovers.get(fd) and old.disarms_reported_oneshots:
                # The old object fired it (its report was cut by max_events and is kept):
                # registered afresh it would fire a second time.  modify() re-registers it.
                continue
            elif watcher._armed:
                plain_edge = watcher._events & Event.EDGE_TRIGGERED and not watcher._oneshot
                (edges if plain_edge else others).append(watcher)
        edge_fds = {watcher._fd for watcher in edges}
        self._register_all(fresh, edges)
        if edges:
            self._drain(fresh, len(edges))
        self._register_all(fresh, others)
        leftovers = self._leftovers
        for fd, bits in self._drain(old, registered + 1):
            live = self._watchers.get(fd)
            if live is None or not live._armed:
                continue  # a stale entry, or a one-shot the old object had disarmed
            # Edge bits are kept; a level or one-shot watcher the fresh object reports.
            leftovers[fd] = leftovers.get(fd, 0) | (bits if fd in edge_fds else 0)
        old.close()
        self._stale_fds.clear()
        self._use(fresh)
        return fresh

    def _register_all(self, mechanism: Mechanism, watchers: list[Watcher]) -> None:
        """Register ``watchers`` with a fresh OS object; retire those it refuses."""
        for watcher in watchers:
            try:
                mechanism.register(watcher._fd, os_events(watcher._events))
            except (OSError, Refusal):
                self._mark_lost(watcher)
                self._forget(watcher._fd)

    @staticmethod
    def _drain(mechanism: Mechanism, batch: int) -> list[tuple[int, int]]:
        """What ``mechanism`` has to report right now (nothing, if it cannot say)."""
        try:
            return mechanism.poll(0.0, batch)
        except OSError:
            return []

    def _check_modifiable(self, watcher: Watcher) -> Mechanism:
        mechanism = self._usable_mechanism(FailedWatcherModificationError)
        if not self._check_alive(watcher):
            raise InactiveWatcherError("Cannot modify inactive watcher")
        return mechanism

    def _modify(self, watcher: Watcher, events: Event | Iterable[Event]) -> None:
        kind = watcher._kind
        handle = watcher._handle
        wanted = coerce_events(events, kind, type(handle).__name__)
        mechanism = self._check_modifiable(watcher)
        if isinstance(handle, TimerHandle):
            watcher._set_events(wanted)
            self._timers.arm(watcher, handle)  # re-armed from now (SPEC 10)
            self._refresh_fast_path()
            return
        if not kind:
            self._check_supported(mechanism, wanted, FailedWatcherModificationError)
        elif kind is Event.PROCESS and not watcher._armed:
            watcher._events = wanted  # its exit was reported: never again in this context
            return
        try:
            mechanism.modify(watcher._fd, os_events(wanted))
        except (OSError, Refusal) as exc:
            raise self._failure(
                FailedWatcherModificationError, "Failed to modify watcher", exc
            ) from exc
        watcher._set_events(wanted)
        # Bits kept from before speak of the old events; the OS reports the new ones.
        if self._leftovers.pop(watcher._fd, None) is not None:
            self._refresh_fast_path()

    def _remove(self, watcher: Watcher) -> None:
        self._usable_mechanism(FailedWatcherModificationError)
        if not self._check_alive(watcher):
            return  # its stream was closed: retired, and remove() of that is a no-op
        watcher._state = REMOVED
        if isinstance(watcher._handle, TimerHandle):
            del self._timers.watchers[watcher._handle]
            self._timers.disarm(watcher)
            self._refresh_fast_path()
            return
        self._forget(watcher._fd)
        self._unregister(watcher._fd)

    # -- handles that are not streams (SPEC 10) ----------------------------------------------

    def _add_timer(self, handle: TimerHandle, events: Event, data: Any) -> Watcher:
        """A timer has no fd: its watcher is kept, and its deadline armed, by ``_timers``."""
        timers = self._timers
        if handle in timers.watchers:
            raise HandleAlreadyWatchedError("Handle already added (this TimerHandle)")
        watcher = self._watcher_type._make(self._self_ref, -1, handle, _no_fd, events, data)
        timers.watchers[handle] = watcher
        timers.arm(watcher, handle)
        self._refresh_fast_path()
        return watcher

    def _check_source_supported(self, mechanism: Mechanism, handle: SourceHandle) -> None:
        needs = handle._needs
        if needs and not getattr(mechanism, needs):
            raise FailedHandleAddError(
                f"Failed to add handle: backend {self._backend.name} has no source for a "
                f"{type(handle).__name__} here",
                ErrorCode.NOSUPPORT,
            )

    # -- errors -----------------------------------------------------------------------------

    def _usable_mechanism(self, error: type[FailedPollOperationError]) -> Mechanism:
        mechanism = self._usable
        if mechanism is None:
            self._raise_unusable(error)
        return mechanism

    def _raise_unusable(self, error: type[FailedPollOperationError]) -> NoReturn:
        if self._closed:
            raise PollError("Context is closed")
        raise error(
            "Context was created in another process (used after fork)",
            ErrorCode.PERMISSION,
        )

    def _check_supported(
        self, mechanism: Mechanism, events: Event, error: type[FailedPollOperationError]
    ) -> None:
        name = self._backend.name
        if events & Event.EDGE_TRIGGERED and not mechanism.supports_edge_triggering:
            raise error(
                f"Backend {name} does not support Event.EDGE_TRIGGERED", ErrorCode.NOSUPPORT
            )
        if events & Event.PRIORITY and not mechanism.supports_priority:
            raise error(f"Backend {name} does not support Event.PRIORITY", ErrorCode.NOSUPPORT)

    @staticmethod
    def _beyond_any_fd(fd: int) -> FailedHandleAddError:
        # No OS call takes it (a C int): refused as the backend would refuse a bad fd.
        return FailedHandleAddError(
            f"Failed to add handle: fd {fd} is beyond any file descriptor (at most {MAX_FD})",
            ErrorCode.INVALID,
        )

    def _failure(
        self, error: type[FailedPollOperationError], what: str, exc: OSError | Refusal
    ) -> FailedPollOperationError:
        if isinstance(exc, Refusal):
            return error(f"{what}: {exc}", exc.code)
        mechanism = self._usable
        code = None if mechanism is None else mechanism.errno_codes.get(exc.errno or 0)
        return error(
            f"{what}: {exc.strerror or exc} (backend {self._backend.name})",
            code or code_for_errno(exc.errno),
            exc.errno,
        )
