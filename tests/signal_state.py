"""What the signal tests read and send: the main thread's mask, the wakeup fd, and a signal
sent to the main thread.  Importable everywhere; the functions are POSIX only, for tests
that skip elsewhere."""

from __future__ import annotations

import signal
import threading

__all__ = ["blocked", "current_wakeup_fd", "kill_main"]


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
