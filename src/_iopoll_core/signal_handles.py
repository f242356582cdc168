"""``SignalHandle``: signals delivered to a context's ``wait()``, through Linux ``signalfd``.

How it works, and why.  A signal can be read from a signalfd only while it is blocked:
otherwise the kernel runs its disposition (CPython's C-level handler, or the default action)
first.  So while at least one watcher of a ``SignalHandle`` for a signal is active, in any
context, that signal is blocked with ``pthread_sigmask`` (counted per signal, process-wide,
in ``_Blocks``); its deliveries stay pending until a signalfd read takes them, and the
handle records each.  When the last such watcher goes, a delivery still pending is taken
into the handle (``sigtimedwait`` with no wait) before the signal is unblocked, so none
reaches a handler or the default action; a signal that was blocked before the first watcher
stays blocked.

What Python cannot give, and the README says:

- The mask is per thread.  ``add`` is refused outside the main thread, as ``signal.signal``
  is; threads started later inherit the block, threads started earlier do not, and the
  kernel may deliver a process-directed signal to one of those (running its handler or
  default action there).  Block the signals in those threads yourself, or create the
  context first.
- Children inherit the mask.  A child made with ``os.fork`` gets the signals unblocked
  again (``os.register_at_fork``); ``subprocess`` and ``os.posix_spawn`` children, whose
  fork runs no Python code, inherit the block.  Pass ``os.posix_spawn(..., setsigmask=())``
  or unblock in the child (``preexec_fn``) when a child needs those signals.
- Code that unblocks a watched signal (``signal.pthread_sigmask``) defeats the handle: the
  disposition runs again.  PHP's engine can prevent that; Python cannot.

``signalfd`` is reached through ``ctypes`` (the standard library has no binding).  Without
it (not Linux, or no ctypes), ``supports_signal_handles()`` is false and ``add`` is refused
with ``NOSUPPORT``; the handle itself can still be made.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import weakref
from collections.abc import Callable, Iterable

from .events import Event
from .source_handles import SourceHandle

__all__ = ["SignalHandle", "SIGNALFD_AVAILABLE"]

# The signals this system has: not glibc's own 32 and 33, nor numbers below NSIG it lacks.
VALID_SIGNALS = frozenset(signal.valid_signals())
# Signals that cannot be blocked, or that the kernel sends to the faulting thread itself.
_UNBLOCKABLE = frozenset(
    getattr(signal, name)
    for name in ("SIGKILL", "SIGSTOP", "SIGSEGV", "SIGBUS", "SIGFPE", "SIGILL")
    if hasattr(signal, name)
)
# struct signalfd_siginfo: 128 bytes, ssi_signo (uint32) first.
_SIGINFO_SIZE = 128


def _load_signalfd() -> Callable[[Iterable[int]], int] | None:
    """A function making a non-blocking signalfd for a set of signals, or None."""
    if not hasattr(signal, "pthread_sigmask"):
        return None
    try:
        import ctypes
        import ctypes.util
    except ImportError:
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        signalfd = libc.signalfd
        sigemptyset, sigaddset = libc.sigemptyset, libc.sigaddset
    except (OSError, AttributeError):
        return None
    signalfd.restype = ctypes.c_int
    signalfd.argtypes = (ctypes.c_int, ctypes.c_void_p, ctypes.c_int)
    # sigset_t: 1024 bits in glibc and musl; a kernel set is 64 or 128 bits of that.
    sigset_type = ctypes.c_ubyte * 128
    # SFD_NONBLOCK and SFD_CLOEXEC are O_NONBLOCK and O_CLOEXEC on every Linux architecture.
    flags = os.O_NONBLOCK | os.O_CLOEXEC

    def make(signals: Iterable[int]) -> int:
        mask = sigset_type()
        sigemptyset(ctypes.byref(mask))
        for signum in signals:
            sigaddset(ctypes.byref(mask), signum)
        fd = signalfd(-1, ctypes.byref(mask), flags)
        if fd < 0:
            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code))
        return int(fd)

    return make


_signalfd = _load_signalfd()
SIGNALFD_AVAILABLE = _signalfd is not None


class _Blocks:
    """How many active watchers block each signal, process-wide, and what was blocked first.

    The mask that matters is the main thread's (watchers are added there only), and
    ``pthread_sigmask`` changes the calling thread's.  A watcher's last release may come from
    another thread (``remove()``, ``close()``, a collection there): its signals are then
    ``deferred``, still blocked in the main thread, which unblocks them at its next
    ``block()`` or ``unblock()`` (``_settle()``): until then a delivery waits, pending, as
    while the watcher was active, and is not lost.

    A release can also come in the middle of ``block()`` or ``unblock()``, from the thread
    that runs it: the collector frees a Context in a reference cycle at any allocation, and
    its finalizer releases its watchers.  That release is queued, and made as the call it
    interrupted ends (``lock`` is re-entrant so that the finalizer can queue it).
    """

    __slots__ = ("counts", "blocked_before", "deferred", "lock", "busy", "queued")

    def __init__(self) -> None:
        self.counts: dict[int, int] = {}
        self.blocked_before: set[int] = set()
        self.deferred: set[int] = set()  # no watcher left; to unblock in the main thread
        self.lock = threading.RLock()
        self.busy = False  # in block() or unblock(), with the lock
        self.queued: list[tuple[tuple[int, ...], Callable[[int], None]]] = []

    def block(self, signals: tuple[int, ...]) -> None:
        with self.lock:
            self.busy = True
            try:
                self._block(signals)
            finally:
                self.busy = False
                self._unblock_queued()

    def unblock(self, signals: tuple[int, ...], keep: Callable[[int], None]) -> None:
        """One watcher fewer for ``signals``; ``keep(signum)`` takes a delivery still pending
        for a signal whose last watcher this was, before it is unblocked."""
        with self.lock:
            if self.busy:  # a finalizer run inside block() or unblock(): after it
                self.queued.append((signals, keep))
                return
            self.busy = True
            try:
                self._unblock(signals, keep)
            finally:
                self.busy = False
                self._unblock_queued()

    def _unblock_queued(self) -> None:
        while self.queued:
            self.unblock(*self.queued.pop(0))

    def _block(self, signals: tuple[int, ...]) -> None:
        new = [signum for signum in signals if not self.counts.get(signum)]
        # Still blocked by us, waiting for _settle(): blocked on, as they are.
        kept = self.deferred.intersection(new)
        self.deferred.difference_update(kept)
        self._settle()
        new = [signum for signum in new if signum not in kept]
        if new:
            already = signal.pthread_sigmask(signal.SIG_BLOCK, new)
            self.blocked_before.update(signum for signum in new if signum in already)
        for signum in signals:
            self.counts[signum] = self.counts.get(signum, 0) + 1

    def _unblock(self, signals: tuple[int, ...], keep: Callable[[int], None]) -> None:
        last = []
        for signum in signals:
            count = self.counts.get(signum, 0) - 1
            if count > 0:
                self.counts[signum] = count
            else:
                self.counts.pop(signum, None)
                last.append(signum)
        for signum in last:
            while signum in signal.sigpending() and signal.sigtimedwait([signum], 0):
                keep(signum)
        self.deferred.update(last)
        if threading.current_thread() is threading.main_thread():
            self._settle()

    def _settle(self) -> None:
        """In the main thread, with the lock: unblock what ``deferred`` holds, except what was
        blocked before the first watcher."""
        if not self.deferred:
            return
        restore = [signum for signum in self.deferred if signum not in self.blocked_before]
        self.blocked_before.difference_update(self.deferred)
        self.deferred.clear()
        if restore:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, restore)

    def unblock_in_child(self) -> None:
        """After ``os.fork``: the child gets our signals unblocked, except those the main
        thread had blocked before the first watcher.  (A fork from another thread gets the
        same: that thread's own mask before our block is not known here.)"""
        self.lock = threading.RLock()  # the parent's may have been held by another thread
        self.busy = False
        self.queued.clear()
        held = self.deferred.union(self.counts)
        restore = [signum for signum in held if signum not in self.blocked_before]
        self.counts.clear()
        self.blocked_before.clear()
        self.deferred.clear()
        if restore:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, restore)


_blocks = _Blocks()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_blocks.unblock_in_child)


class SignalHandle(SourceHandle):
    """Signals, watched for ``Event.SIGNAL``: ``SignalHandle(signals)``.

    While a watcher of it is active, its signals are blocked in the process and their
    deliveries come to this handle, not to a Python handler or the default action.
    ``delivered()`` returns the signals taken since the last call.  Only where
    ``Backend.supports_signal_handles()``; elsewhere ``add`` raises ``FailedHandleAddError``
    with ``code == ErrorCode.NOSUPPORT``.
    """

    __slots__ = ("_signals", "_delivered", "_fd", "_closing", "_watchers")

    _event = Event.SIGNAL
    _needs = "supports_signal_handles"
    _holds_process_state = True
    _signals: tuple[int, ...]
    _delivered: list[int]
    _fd: int  # the signalfd, opened at the first add; -1 before
    _closing: weakref.finalize[..., object] | None
    _watchers: int  # active watchers of this handle, in every context

    def __init__(self, signals: Iterable[int]) -> None:
        if hasattr(self, "_signals"):
            raise TypeError("SignalHandle.__init__ cannot be called twice")
        if isinstance(signals, (str, bytes)) or not isinstance(signals, Iterable):
            raise TypeError(
                f"signals must be an iterable of signal numbers, not {type(signals).__name__}"
            )
        chosen = set()
        for signum in signals:
            if isinstance(signum, bool) or not isinstance(signum, int):
                raise TypeError(f"signals must contain only ints, not {type(signum).__name__}")
            if not 0 < signum < signal.NSIG:
                raise ValueError(f"signals must be between 1 and {signal.NSIG - 1}, not {signum}")
            if signum not in VALID_SIGNALS:
                # glibc keeps 32 and 33 for its threads: not in valid_signals(), and never
                # blocked, so one delivered would take its default action.
                raise ValueError(
                    f"signals must contain only signals of this system (signal.valid_signals()), "
                    f"not {signum}"
                )
            if signum in _UNBLOCKABLE:
                raise ValueError(
                    f"signals must not contain signal {signum} ({_name(signum)}), "
                    "which cannot be blocked"
                )
            chosen.add(int(signum))
        if not chosen:
            raise ValueError("signals must not be empty")
        self._signals = tuple(sorted(chosen))
        self._delivered = []
        self._fd = -1
        self._closing = None
        self._watchers = 0

    @property
    def signals(self) -> tuple[int, ...]:
        """The signal numbers, ascending, without duplicates."""
        return self._signals

    def delivered(self) -> list[int]:
        """The signals taken since the last call, in the order the OS handed them over.

        A delivery that arrived while the handle is watched counts even if no ``wait()``
        has read it yet.  The record is cleared.
        """
        self._read()
        taken, self._delivered = self._delivered, []
        return taken

    def fileno(self) -> int:
        """The signalfd a context watches (made at the first call)."""
        if self._fd < 0:
            if _signalfd is None:
                raise OSError(38, "signalfd is not available here")  # ENOSYS
            fd = _signalfd(self._signals)
            self._fd = fd
            self._closing = weakref.finalize(self, os.close, fd)
        return self._fd

    def _read(self) -> bool:
        """Move what the signalfd holds into the record; whether there was anything."""
        if self._fd < 0 or not self._watchers:
            return False  # nothing is blocked: nothing can be waiting in the signalfd
        took = False
        while True:
            try:
                data = os.read(self._fd, _SIGINFO_SIZE * 16)
            except (BlockingIOError, InterruptedError):
                return took
            if not data:
                return took
            for offset in range(0, len(data) - _SIGINFO_SIZE + 1, _SIGINFO_SIZE):
                self._delivered.append(int.from_bytes(data[offset : offset + 4], sys.byteorder))
            took = True

    def _take(self) -> bool:
        return self._read()

    def _watch(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            # As signal.signal(): the mask that counts is the main thread's.
            raise ValueError("a SignalHandle can only be added in the main thread")
        _blocks.block(self._signals)
        self._watchers += 1

    def _unwatch(self) -> None:
        self._watchers -= 1
        _blocks.unblock(self._signals, self._delivered.append)

    def __repr__(self) -> str:
        return f"<SignalHandle {', '.join(map(_name, self._signals))}>"


def _name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:  # a real-time signal
        return str(signum)
