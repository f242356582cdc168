"""``ContextState``: what a Context knows, and the bookkeeping that keeps it true.

Every attribute of a Context is declared here, and every change to one is made here, for
every backend: ``add`` and ``wait`` (``context.py``, ``general_wait.py``) read the state and
call these methods to change it.

Closed streams.  Python has no hook that runs when a socket or file is closed, so a closed
stream is noticed lazily: when ``wait()`` reports its fd, when its fd number is added again,
or when the watcher itself is asked (``is_active``, ``modify``, ``remove``).  A watcher's
handle is alive while its ``fileno()`` still answers the fd it was added with.  epoll keys
registrations by (fd number, open file), so a closed fd whose file a ``dup`` keeps open
leaves a registration nothing can delete; when one may exist, the OS object is rebuilt from
the watchers (``_rebuild``).  That is O(watchers), and it happens only after a watched
stream was closed without ``remove()``.
"""

from __future__ import annotations

import os
import socket
import weakref
from collections.abc import Callable, Iterable
from typing import Any, ClassVar, NoReturn, cast

from .backend import BackendBase
from .errors import (
    FailedHandleAddError,
    FailedPollOperationError,
    FailedWatcherModificationError,
    HandleAlreadyWatchedError,
    InactiveWatcherError,
    PollError,
    Refusal,
    code_for_errno,
)
from .events import DecodeTable, ErrorCode, Event, coerce_events, needs_modes, os_events
from .handles import MAX_FD, _Uncopyable
from .mechanism import Mechanism
from .source_handles import SourceHandle, TimerHandle
from .timers import TimerQueue
from .watcher import ACTIVE, REMOVED, RETIRED, Watcher

__all__ = ["ContextState"]

# Looked up once: an Event member read from its class costs an enum metaclass lookup, and
# every modify() and remove() asks what kind of watcher it has.
_TIMER = Event.TIMER
_PROCESS = Event.PROCESS


# How far past the end of _by_fd an add() may grow it without asking whether the fd is open:
# 8 KiB of list.  A longer jump is taken only for an open fd, whose number the OS's own
# table of this process's files already covers; a number no open file has (an int fd, which
# POLL takes as it is) stays out of the table, or 2**31-1 would cost 16 GiB of list.
_TABLE_STEP = 1024

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None  # type: ignore[assignment]


def _fd_is_open(fd: int) -> bool:
    """Whether ``fd`` names an open file of this process; on Windows always true: WSAPOLL's
    fds are socket handles, which no cheap call checks, and their numbers stay small."""
    if fcntl is None:
        return True
    try:
        fcntl.fcntl(fd, fcntl.F_GETFD)
    except OSError:
        return False
    return True


def _no_fd() -> int:
    # A timer watcher's fd probe: it answers the fd it was added with (-1), so the checks
    # of a stream's liveness always find a timer alive.
    return -1


def _still_its_file(watcher: Watcher, held: dict[int, set[int]]) -> bool:
    """Whether an armed watcher may be registered again by its number in a rebuild.

    A stream says itself that it was closed (its ``fileno()``), but not that its fd was
    closed behind its back (``os.close``, SPEC 6.9), and a bare ``int`` cannot say either.
    Its file was closed if the old OS object dropped its entry (``held``: number ->
    inodes), and the number names another file if the file there now is not among them;
    either way a registration by number would watch a file nobody asked for.
    """
    inodes = held.get(watcher._fd)
    if inodes is None:
        return False
    try:
        return os.fstat(watcher._fd).st_ino in inodes
    except OSError:
        return False


class ContextState(_Uncopyable):
    """The state a Context owns, and the methods that change it (see the module doc)."""

    __slots__ = (
        "_backend",
        "_mechanism",
        "_usable",
        "_fast_poll",
        "_native_fd",
        "_native_pollfds",
        "_native_buffer",
        "_first_timer",
        "_decode",
        "_decode_low",
        "_max_timeout",
        "_closed",
        "_self_ref",
        "_watchers",
        "_by_fd",
        "_buffered",
        "_stale_fds",
        "_leftovers",
        "_timers",
        "_fds_first",
        "_timers_took_all",
        "_releases",
        "_lost",
        "_removed",
        "_on_removed",
        "__weakref__",
    )

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
    # The C fast path's array for the OS's reports when they may not fit on its stack (more
    # than 256 watchers): grown there, never shrunk until close(), and out of the slot
    # (None) while a wait() uses it, so that a nested one takes its own.  Pure Python never
    # reads it.
    _native_buffer: bytearray | None
    # The first armed timer's deadline (time.monotonic() seconds), None with none armed:
    # the fast path cuts its OS wait there, and leaves a due timer to the general path.
    _first_timer: float | None
    _decode: DecodeTable
    # _decode for the patterns below events.DECODE_PREFIX, by index (events.decode_prefix):
    # how the C fast path decodes a report without an int and a hash.  Pure Python never
    # reads it.
    _decode_low: tuple[Event | None, ...]
    _max_timeout: float
    _closed: bool
    # What each watcher holds of its context: a watcher never keeps a context alive.
    _self_ref: weakref.ref[ContextState]
    _watchers: dict[int, Watcher]
    # The same watchers as a list indexed by fd (None where there is none): how the C fast
    # path finds a report's watcher without hashing.  Kept by _remember and _forget.  It may
    # end before a watched fd (see _TABLE_STEP): the C path leaves such a report to Python,
    # which reads _watchers.
    _by_fd: list[Watcher | None]
    _buffered: dict[int, Watcher]  # watchers whose stream can hold bytes (pending())
    _stale_fds: set[int]  # fds the OS may still hold registrations for
    _leftovers: dict[int, int]  # fd -> raw bits cut by max_events (0: ask the OS again)
    _timers: TimerQueue  # the timer watchers, and the deadlines of the armed ones
    # Due timers took every max_events slot at the last wait, and none was left out, or
    # they took every slot at the two last waits: the next poll of the general path asks
    # the OS first (GeneralWait._poll_once).  A fast path wait does not clear it, so a
    # general wait after one may put fds first once.
    _fds_first: bool
    # Due timers took every slot at the last wait and left some out, which come first at
    # the next: if they take every slot again, fds go first after it.
    _timers_took_all: bool
    # fd -> what gives back the process-wide state a watcher holds (a SignalHandle's block);
    # a weakref.finalize, so that it also runs when the context is collected.
    _releases: dict[int, weakref.finalize[..., object]]
    _lost: list[Watcher]  # watchers whose weak handle's object was collected, to retire
    _removed: list[Watcher]  # watchers lost without remove(), for on_watcher_removed
    _on_removed: Callable[[Watcher], object] | None

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
        """Record a new watcher under its fd: in ``_watchers``, and in ``_by_fd`` unless its
        fd lies too far past the table's end and names no open file; all, or (MemoryError)
        nothing."""
        fd = watcher._fd
        by_fd = self._by_fd
        end = len(by_fd)
        watchers = self._watchers
        if fd >= end and (fd - end < _TABLE_STEP or _fd_is_open(fd)):
            # From _watchers, not None: an fd left out of a shorter table is found there.
            by_fd.extend([watchers.get(number) for number in range(end, fd + 1)])
        watchers[fd] = watcher
        if fd < len(by_fd):
            by_fd[fd] = watcher  # allocates nothing: it cannot fail after the dict took it

    def _remember_buffering(self, watcher: Watcher) -> None:
        """Also record a new watcher whose stream may hold bytes the OS cannot see (an
        ``ssl.SSLSocket``'s ``pending()``): every wait asks it first."""
        stream = getattr(watcher._handle, "stream", None)
        # A plain socket has no pending(), nor an instance dict to be given one: skipping the
        # getattr skips an AttributeError raised and caught, a microsecond of every add().
        if type(stream) is not socket.socket and callable(getattr(stream, "pending", None)):
            self._buffered[watcher._fd] = watcher
            self._refresh_fast_path()

    def _unadd(self, fd: int, source: SourceHandle | None) -> None:
        """Undo an ``add()`` that failed once the OS took ``fd`` (a ``MemoryError``, or a
        handle's own error): no record of it is left, and the OS forgets it (SPEC 1)."""
        if self._watchers.pop(fd, None) is not None and fd < len(self._by_fd):
            self._by_fd[fd] = None
        if self._buffered.pop(fd, None) is not None:
            self._refresh_fast_path()
        release = self._releases.pop(fd, None)
        if release is not None:
            release.detach()
        self._unregister(fd)
        if source is not None:
            source._unwatch()

    def _forget(self, fd: int) -> None:
        """Drop every record of ``fd``: its watcher, buffered bytes and left-over report."""
        del self._watchers[fd]
        if fd < len(self._by_fd):
            self._by_fd[fd] = None
        buffered = self._buffered.pop(fd, None) is not None
        left_over = self._leftovers.pop(fd, None) is not None
        release = self._releases.pop(fd, None)
        if release is not None:
            release()  # a SignalHandle's watcher: its signals' block
        if buffered or left_over:  # what the fast path depends on, of this fd's records
            self._refresh_fast_path()

    def _check_alive(self, watcher: Watcher) -> bool:
        """Whether the watcher's stream is still open; retires it if not."""
        if watcher._state != ACTIVE:
            return False
        if watcher._stream_open():
            return True
        self._retire(watcher)
        return False

    def _can_be_woken(self) -> bool:
        """Whether a wait with no timeout has anything left that can end it.

        Asked just before the OS wait would block for ever.  epoll (like kqueue and event
        ports) drops a closed fd's registration without a word, so a context whose streams
        were all closed without ``remove()`` would sleep there for good, where SPEC 4
        returns ``[]``.  Watchers are retired from the front of the table until one is
        found open: each watcher is retired once in its life, so this is one probe per
        blocking wait, amortized, however many watchers there are.
        """
        watchers = self._watchers
        while watchers:
            watcher = next(iter(watchers.values()))
            if watcher._stream_open():
                return True
            self._retire(watcher)  # forgets it: the loop moves on
        return bool(self._timers)

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
        held = old.registered_files()
        fresh = type(old)()
        edges: list[Watcher] = []
        others: list[Watcher] = []
        for fd, watcher in list(self._watchers.items()):
            # The old object fired it (its report was cut by max_events and is kept):
            # registered afresh it would fire a second time, so it is left out, and
            # modify() registers it again.  Nor can `held` vouch for it: an object made
            # by an earlier rebuild never held it.  (Its fd closed behind its back, its
            # kept bits still come out once: SPEC 6.9's "at most once".)
            fired = watcher._oneshot and self._leftovers.get(fd) and old.disarms_reported_oneshots
            if not watcher._stream_open() or (
                held is not None
                and watcher._armed
                and not fired
                and not _still_its_file(watcher, held)
            ):
                self._mark_lost(watcher)
                self._forget(fd)
            elif fired:
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
        if kind is _TIMER:  # a TimerHandle's watcher: only those have that kind
            watcher._set_events(wanted)
            self._timers.arm(watcher, cast(TimerHandle, handle))  # re-armed from now (SPEC 10)
            self._refresh_fast_path()
            return
        if not kind:
            self._check_supported(mechanism, wanted, FailedWatcherModificationError)
        elif kind is _PROCESS and not watcher._armed:
            watcher._events = wanted  # its exit was reported: never again in this context
            return
        try:
            mechanism.modify(watcher._fd, os_events(wanted))
        except (OSError, Refusal) as exc:
            raise self._failure(
                FailedWatcherModificationError, "Failed to modify watcher", exc
            ) from exc
        watcher._set_events(wanted)
        # Bits kept from before speak of the old events: the OS is asked again (0).  A
        # watcher left out by max_events keeps its place, or a modify at every wait would
        # cost it its turn at every wait (SPEC 4).
        if watcher._fd in self._leftovers:
            self._leftovers[watcher._fd] = 0

    def _remove(self, watcher: Watcher) -> None:
        if self._usable is None:  # _usable_mechanism(), inlined: remove() is hot in a loop
            self._raise_unusable(FailedWatcherModificationError)
        if not self._check_alive(watcher):
            return  # its stream was closed: retired, and remove() of that is a no-op
        watcher._state = REMOVED
        if watcher._kind is _TIMER:  # a TimerHandle's watcher
            del self._timers.watchers[cast(TimerHandle, watcher._handle)]
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

    def _raise_unusable(
        self, error: type[FailedPollOperationError], cause: BaseException | None = None
    ) -> NoReturn:
        if self._closed:
            raise PollError("Context is closed") from cause
        raise error(
            "Context was created in another process (used after fork)",
            ErrorCode.PERMISSION,
        ) from cause

    def _check_supported(
        self, mechanism: Mechanism, events: Event, error: type[FailedPollOperationError]
    ) -> None:
        modes = needs_modes(events)
        if not modes:
            return
        name = self._backend.name
        if modes & Event.EDGE_TRIGGERED and not mechanism.supports_edge_triggering:
            raise error(
                f"Backend {name} does not support Event.EDGE_TRIGGERED", ErrorCode.NOSUPPORT
            )
        if modes & Event.PRIORITY and not mechanism.supports_priority:
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
        # The OS's words for a kind of file the backend cannot watch (epoll's EPERM for a
        # regular file) do not say so: the message does.
        cannot = " cannot watch this kind of file" if code is ErrorCode.NOSUPPORT else ""
        return error(
            f"{what}: {exc.strerror or exc} (backend {self._backend.name}{cannot})",
            code or code_for_errno(exc.errno),
            exc.errno,
        )
