"""``Context``: the public API, and ``wait()``'s fast path.

The Context is three classes, each in its own module, so that each reads on its own:

* ``ContextState`` (``context_state.py``) owns every attribute and every change to them:
  the watchers keyed by fd, one-shot state, ``max_events`` leftovers, retiring watchers
  whose stream was closed, rebuilding the OS object, timers, and the errors.  Everything
  that is not "talk to the OS" lives there, once, for every backend.
* ``GeneralWait`` (``general_wait.py``) is ``wait()`` in every form the fast path leaves
  to it: what a poll's reports become, buffered bytes, leftovers, timers.
* ``Context`` (here): argument checks, ``add``, ``close``, fork safety, and the fast path
  of ``wait()``, which iopoll's C accelerator replaces with the same code in C.
"""


from __future__ import annotations

import os
import socket
import time
import weakref
from collections.abc import Callable, Iterable
from datetime import timedelta
from typing import Any, ClassVar

from .arguments import FOREVER
from .backend import BackendBase
from .errors import (
    BackendUnavailableError,
    FailedContextInitializationError,
    FailedHandleAddError,
    HandleAlreadyWatchedError,
    InvalidHandleError,
    Refusal,
    code_for_errno,
    raised_by_backend,
)
from .events import Event, coerce_events, decode_prefix, os_events
from .general_wait import GeneralWait
from .handles import (
    MAX_FD,
    NOT_FDS,
    Handle,
    HasFileno,
    StreamPollHandle,
    WeakHandle,
    fd_probe,
    has_fileno,
)
from .source_handles import SourceHandle, TimerHandle
from .timers import TimerQueue
from .watcher import REMOVED, RETIRED, Watcher

__all__ = ["Context"]

# The handles add() is mostly given, which are never Handles (a bool or an Event is refused
# there).
_PLAIN_STREAMS = frozenset({socket.socket, int})

# The events a stream may be watched for on every backend, with nothing to check: each
# non-empty set of these bits.  The C add() (iopoll/_registration.c) reads the bits.
_PLAIN_STREAM_BITS = int(
    Event.READ | Event.WRITE | Event.ERROR | Event.HANGUP | Event.READ_HANGUP | Event.ONESHOT
)
_PLAIN_STREAM_EVENTS = frozenset(
    Event(bits) for bits in range(1, _PLAIN_STREAM_BITS + 1) if not bits & ~_PLAIN_STREAM_BITS
)


_contexts: weakref.WeakSet[Context] = weakref.WeakSet()


def _forget_contexts_after_fork() -> None:
    # The child shares the parent's epoll/kqueue object: touching it would change the
    # parent's registrations, so every inherited context becomes unusable here.
    for context in list(_contexts):
        context._use(context._mechanism, usable=False)
        # The child's signal blocks start afresh (signal_handles._Blocks.unblock_in_child):
        # an inherited signal watcher's release would take one from the child's own.
        for release in context._releases.values():
            release.detach()
        context._releases.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_contexts_after_fork)


def _deactivate(*tables: dict[Any, Watcher]) -> None:
    """The watchers of a context that closes or is collected become inactive."""
    for table in tables:
        for watcher in table.values():
            # A watcher whose stream was closed first stays retired: its remove() is a no-op.
            watcher._state = REMOVED if watcher._stream_open() else RETIRED


def _package_of(kind: type) -> str:
    """The package a class comes from, as its users import it (``iopoll``, not
    ``iopoll._backend``)."""
    return kind.__module__.partition(".")[0]


class Context(GeneralWait):
    """Watches handles and reports which are ready.

    Use it as a context manager, or call ``close()``, to release the OS object.  Not
    thread-safe: use one context per thread, or your own lock.
    """

    __slots__ = ()

    # Set by each implementation: the Backend enum whose members it accepts.
    _backend_type: ClassVar[type[BackendBase]]

    def __init__(self, backend: BackendBase) -> None:
        if getattr(self, "_self_ref", None) is not None:
            raise TypeError("Context.__init__ cannot be called twice")
        if not isinstance(backend, self._backend_type):
            expected, got = self._backend_type.__qualname__, type(backend).__qualname__
            if got == expected:  # the other package's Backend: say whose each is
                expected += f" of {_package_of(self._backend_type)}"
                got = f"one of {_package_of(type(backend))}"
            raise TypeError(f"backend must be a {expected}, not {got}")
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
        self._native_buffer = None
        self._buffered = {}
        self._stale_fds = set()
        self._leftovers = {}
        self._timers = TimerQueue()
        self._fds_first = False
        self._timers_took_all = False
        self._releases = {}
        self._lost = []
        self._removed = []
        self._on_removed = None
        self._decode = mechanism.decode
        self._decode_low = decode_prefix(mechanism.decode)
        self._max_timeout = mechanism.max_timeout
        self._use(mechanism)
        _contexts.add(self)

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

    def __del__(self) -> None:
        # A context that is collected behaves as closed for its watchers (SPEC 4).  Not a
        # weakref.finalize: its registry, a root, would hold the watcher tables, and a
        # watcher whose data leads back to the context (asyncio's keys do, through the
        # loop) would keep the context, its OS object and everything else alive for ever.
        # A __del__ runs when the collector frees that cycle (PEP 442).
        try:
            tables = (self._watchers, self._timers.watchers)
        except AttributeError:  # __init__ failed before they were made
            return
        _deactivate(*tables)

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
        self._native_buffer = None
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
        mechanism = self._usable
        kind = type(handle)
        if (
            (kind is socket.socket or kind is int)
            and type(events) is Event
            and events in _PLAIN_STREAM_EVENTS
            and mechanism is not None
        ):
            # The usual call.  Its types settle every check below but the fd's: a socket's
            # fileno() is -1 once closed and never raises, and neither has `closed`.
            fd = handle if isinstance(handle, int) else handle.fileno()
            if 0 <= fd <= MAX_FD and fd not in self._watchers and fd not in self._stale_fds:
                stream = StreamPollHandle._of_checked(handle)
                try:
                    mechanism.register(fd, events)  # os_events() of a stream's events
                except (OSError, Refusal) as exc:
                    raise self._failure(FailedHandleAddError, "Failed to add handle", exc) from exc
                try:
                    watcher = self._watcher_type._make(
                        self._self_ref, fd, stream, stream._fileno, events, data
                    )
                    self._remember(watcher)
                except BaseException:  # MemoryError
                    self._unadd(fd, None)
                    raise
                return watcher
        return self._add(handle, events, data)

    def _add(self, handle: Handle | HasFileno | int, events: object, data: Any) -> Watcher:
        """``add()`` for any arguments: every check, in SPEC 1's order."""
        mechanism = self._usable_mechanism(FailedHandleAddError)
        # A socket or an int fd, the usual handles, skip the ABC's isinstance (Python code).
        if type(handle) in _PLAIN_STREAMS or not isinstance(handle, Handle):
            if isinstance(handle, NOT_FDS) or not (isinstance(handle, int) or has_fileno(handle)):
                raise TypeError(
                    "handle must be a Handle, an object with fileno() or an int fd, "
                    f"not {type(handle).__name__}"
                )
            if isinstance(handle, int) and handle < 0:
                raise ValueError(f"handle must be a file descriptor >= 0, not {handle}")
            handle = StreamPollHandle._of_checked(handle)
            source = None
        else:
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
            if source is not None and isinstance(exc, OSError):
                # A signal or notify handle makes its fd at the first fileno(): EMFILE there
                # is the add failing (TOOBIG), not a bad handle.
                raise self._failure(FailedHandleAddError, "Failed to add handle", exc) from exc
            # io.BytesIO's fileno() raises UnsupportedOperation("fileno"): say what failed.
            raise InvalidHandleError(
                f"Invalid handle for polling: its fileno() raised {type(exc).__name__}: {exc}"
            ) from exc
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

        try:
            probe = fd_probe(handle)
            watcher = self._watcher_type._make(self._self_ref, fd, handle, probe, wanted, data)
            self._remember(watcher)
            self._remember_buffering(watcher)
            if source is not None and source._holds_process_state:
                self._releases[fd] = weakref.finalize(self, source._unwatch)
            if type(handle) is not StreamPollHandle and isinstance(handle, WeakHandle):
                handle._watchers.add(watcher)
        except BaseException:  # MemoryError, or the handle's own error
            self._unadd(fd, source)
            raise
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
                    # Capped as _poll caps it: _finish_wait waits out the rest.
                    wait_for = min(left, self._max_timeout)
            try:
                if wait_for >= 0:
                    raw = poll(wait_for, len(watchers))
                else:  # _poll_forever(), inlined (a method call per wait, in pure Python)
                    raw = poll(0, len(watchers)) or (
                        poll(FOREVER, len(watchers)) if self._can_be_woken() else []
                    )
            except OSError as exc:
                usable = self._usable
                # A signal handler made the Context rebuild its OS object, closing the one
                # this poll waited on: the rest of the wait is on the new one.  (`!=`, not
                # `is`: a mechanism's poll may be a new bound method at each reading.)
                if (
                    usable is not None
                    and self._fast_poll != poll
                    and raised_by_backend(exc, type(usable))
                ):
                    return self._finish_wait([], seconds, started)
                self._poll_failed(exc)  # a handler's own exception leaves as it is
            if self._usable is None or (not raw and wait_for is not seconds):
                # A signal handler closed the Context while the poll waited (select() then
                # answers nothing), or forked, and this is the child, whose wait must not
                # report the parent's fds: _finish_wait says which.  Or the deadline cut
                # the wait short.
                return self._finish_wait(raw, seconds, started)
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
                    # Watcher._stream_open(), inlined.  The probe is read, then called:
                    # `watcher._probe()` is a method lookup CPython cannot specialize.
                    probe = watcher._probe
                    try:
                        if probe() != fd:
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
    # path in C; it calls _wait, _poll_failed, _finish_wait, _poll_forever and _can_be_woken
    # for everything else, so their names and signatures are its interface.

