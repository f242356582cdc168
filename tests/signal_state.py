"""What the signal tests read and send: the main thread's mask, the wakeup fd, and a signal
sent to the main thread.  Importable everywhere; the functions are POSIX only, for tests
that skip elsewhere."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

__all__ = ["blocked", "current_wakeup_fd", "kept_signal_state", "kill_main"]


def blocked() -> set[int]:
    """The signals blocked in this (the main) thread."""
    return set(signal.pthread_sigmask(signal.SIG_BLOCK, []))


def current_wakeup_fd() -> int:
    """The wakeup fd, read without changing it."""
    fd = signal.set_wakeup_fd(-1)
    signal.set_wakeup_fd(fd)
    return fd


def kill_main(signum: int) -> None:
    """Send ``signum`` to the main thread, where the tests run.  A signal sent to the process
    goes to any thread that does not block it, and a thread another test left running did
    not inherit a signal handle's block (threads started before it never do)."""
    main = threading.main_thread().ident
    assert main is not None
    signal.pthread_kill(main, signum)


@contextmanager
def kept_signal_state(signums: Iterable[int]) -> Iterator[None]:
    """Check that the block leaves the handlers of ``signums``, the mask and the wakeup fd as
    it found them, and put them back either way: a signal that a broken implementation left
    blocked and pending is ignored while the mask is restored, not the process's end."""
    signums = tuple(signums)
    handlers = {signum: signal.getsignal(signum) for signum in signums}
    mask = blocked()
    wakeup = current_wakeup_fd()
    yield
    try:
        assert {signum: signal.getsignal(signum) for signum in signums} == handlers
        assert blocked() == mask
        assert current_wakeup_fd() == wakeup
    finally:
        for signum in signums:
            signal.signal(signum, signal.SIG_IGN)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        for signum, handler in handlers.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
        signal.set_wakeup_fd(wakeup)
