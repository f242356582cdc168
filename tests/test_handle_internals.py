"""SPEC 10's handles from the inside: what the conformance suite cannot see.

The rules themselves are the suite's (``iopoll_conformance/groups``); here are the engine's
own promises about them: timers cost nothing while none is armed (the fast path stays on),
the timer heap stays bounded under re-arming, the C fast path hands every handle that is
not a stream to the Python path, a signal's block is given back even when a context is only
garbage collected, and what a child process inherits.
"""

from __future__ import annotations

import gc
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable

import pytest

import iopoll
from _iopoll_core.timers import TimerQueue
from iopoll import Backend, Context, Event, NotifyHandle, SignalHandle, TimerHandle
from signal_state import blocked

SIGNALS = Backend.AUTO.supports_signal_handles()
needs_signal_handles = pytest.mark.skipif(not SIGNALS, reason="no signal handles here")
BACKENDS = [backend for backend in Backend.available_backends()]


@pytest.mark.parametrize("backend", BACKENDS, ids=lambda b: b.name)
def test_an_armed_timer_keeps_the_fast_path_and_bounds_its_wait(
    backend: Backend, pairs: Callable[[], tuple[socket.socket, socket.socket]]
) -> None:
    """The fast path stays on with timers armed: it knows the first deadline, cuts its OS
    wait there, and leaves a due timer to the general path (which reports it first)."""
    a, b = pairs()
    with Context(backend) as ctx:
        reader = ctx.add(b, Event.READ, "b")
        assert ctx._fast_poll is not None and ctx._first_timer is None
        timer = ctx.add(TimerHandle(0.05), Event.TIMER, "t")
        assert ctx._fast_poll is not None
        assert ctx._first_timer is not None
        assert ctx._first_timer > time.monotonic()
        assert ctx.wait(0) == []
        assert ctx.wait(None) == [timer]  # wait(None) on the fast path ends at the deadline
        assert ctx._first_timer is None  # fired, and disarmed
        timer.modify_events(Event.TIMER)
        a.send(b"x")
        assert ctx.wait(5) == [reader]  # the fd first: the timer is not due yet
        time.sleep(0.06)
        assert ctx.wait(0) == [timer, reader]  # both ready: the timer first
        timer.remove()
        assert ctx._first_timer is None


def test_re_arming_keeps_the_timer_heap_bounded() -> None:
    """Re-arming leaves the old heap entry behind; the queue rebuilds before they pile up."""
    with Context() as ctx:
        watchers = [ctx.add(TimerHandle(3600), Event.TIMER) for _ in range(10)]
        for _ in range(1_000):
            for watcher in watchers:
                watcher.modify_events(Event.TIMER)
        timers: TimerQueue = ctx._timers
        assert len(timers) == 10
        assert len(timers._heap) <= 2 * 10 + 64 + 1


def test_a_due_timer_is_found_among_ten_thousand_armed() -> None:
    with Context() as ctx:
        for _ in range(10_000):
            ctx.add(TimerHandle(3600), Event.TIMER)
        soon = ctx.add(TimerHandle(0.01), Event.TIMER, "soon")
        assert ctx.wait(5) == [soon]
        assert ctx.wait(0) == []
        assert len(ctx) == 10_001


@pytest.mark.parametrize("backend", BACKENDS, ids=lambda b: b.name)
def test_the_fast_path_hands_a_notify_report_to_the_general_path(backend: Backend) -> None:
    """Only a plain stream watcher's report is decoded by the fast path (Python or C): a
    notify watcher's fd is readable, and it reports NOTIFY, never READ."""
    notify = NotifyHandle()
    with Context(backend) as ctx:
        watcher = ctx.add(notify, Event.NOTIFY)
        assert not watcher._plain
        assert ctx._fast_poll is not None  # nothing armed: wait() starts on the fast path
        notify.notify()
        assert ctx.wait(1) == [watcher]
        assert watcher.triggered_events == Event.NOTIFY
    notify.close()


@needs_signal_handles
def test_a_collected_context_gives_back_its_signal_block() -> None:
    before = blocked()
    assert signal.SIGUSR1 not in before
    ctx = Context()
    watcher = ctx.add(SignalHandle([signal.SIGUSR1]), Event.SIGNAL)
    assert signal.SIGUSR1 in blocked()
    del ctx
    gc.collect()
    assert not watcher.is_active()
    assert blocked() == before


@needs_signal_handles
def test_a_signal_blocked_before_stays_blocked() -> None:
    signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGUSR2])
    try:
        with Context() as ctx:
            ctx.add(SignalHandle([signal.SIGUSR2]), Event.SIGNAL)
        assert signal.SIGUSR2 in blocked()
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGUSR2])


@needs_signal_handles
@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork here")
def test_a_forked_child_gets_the_signals_unblocked() -> None:
    """os.register_at_fork gives a fork() child the mask it would have had without us."""
    reader, writer = os.pipe()
    with Context() as ctx:
        ctx.add(SignalHandle([signal.SIGUSR1]), Event.SIGNAL)
        pid = os.fork()
        if pid == 0:  # the child: report whether SIGUSR1 is blocked, and leave at once
            os.write(writer, b"blocked" if signal.SIGUSR1 in blocked() else b"free")
            os._exit(0)
        os.close(writer)
        answer = os.read(reader, 16)
        os.close(reader)
        os.waitpid(pid, 0)
        assert signal.SIGUSR1 in blocked()  # the parent keeps its block
    assert answer == b"free"


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork here")
def test_a_notify_handle_works_in_a_child_forked_while_a_thread_held_its_lock() -> None:
    """notify() may come from any thread (SPEC 10): a fork while one is in it left the
    child's handle locked for good, so notify(), clear() and close() hung there."""
    handle = NotifyHandle()
    held, release = threading.Event(), threading.Event()

    def notifying() -> None:  # a notify() caught half-way, as it would be by the fork
        with handle._lock:
            held.set()
            release.wait()

    thread = threading.Thread(target=notifying)
    thread.start()
    held.wait()
    try:
        reader, writer = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: a hang ends with SIGALRM's default action
            try:
                signal.signal(signal.SIGALRM, signal.SIG_DFL)
                signal.alarm(5)
                handle.notify()
                handle.clear()
                handle.close()
                os.write(writer, b"done")
            finally:
                os._exit(0)
        os.close(writer)
        answer = os.read(reader, 16)
        os.close(reader)
        _, status = os.waitpid(pid, 0)
    finally:
        release.set()
        thread.join()
        handle.close()
    assert (answer, os.waitstatus_to_exitcode(status)) == (b"done", 0)


_COLLECTED_INSIDE_BLOCK = """
import gc, signal
import iopoll
from iopoll import Context, Event, SignalHandle

def blocked():
    return set(signal.pthread_sigmask(signal.SIG_BLOCK, []))

gc.disable()
cycle = Context()
cycle.add(SignalHandle([signal.SIGUSR1]), Event.SIGNAL, cycle)  # its data: itself, a cycle
del cycle
real = signal.pthread_sigmask

def collecting(how, mask):
    signal.pthread_sigmask = real
    gc.collect()  # frees the cycle, whose finalizer releases its watcher, inside block()
    return real(how, mask)

signal.pthread_sigmask = collecting
with Context() as ctx:
    ctx.add(SignalHandle([signal.SIGUSR2]), Event.SIGNAL)
    assert signal.pthread_sigmask is real, "block() did not block"
    during = blocked() & {signal.SIGUSR1, signal.SIGUSR2}
print(sorted(map(int, during)), sorted(map(int, blocked() & {signal.SIGUSR1, signal.SIGUSR2})))
"""


@needs_signal_handles
def test_a_watcher_collected_inside_block_is_released_after_it() -> None:
    """A Context in a reference cycle, freed by a collection that runs inside another
    watcher's block(): its finalizer's release deadlocked on the block's own lock."""
    done = subprocess.run(
        [sys.executable, "-c", _COLLECTED_INSIDE_BLOCK],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert done.returncode == 0, done.stderr
    usr2 = int(signal.SIGUSR2)
    assert done.stdout.split("\n")[0] == f"[{usr2}] []"  # released then, and all at the end


@needs_signal_handles
@pytest.mark.parametrize("how", ["remove", "close", "collect"])
def test_a_release_from_another_thread_is_settled_by_the_main_thread(how: str) -> None:
    """pthread_sigmask acts on the calling thread: a signal watcher's last release in a
    worker thread leaves the signal blocked in the main thread (a delivery waits, pending),
    which unblocks it at its next block or unblock.  It used to unblock the worker's mask,
    leave the main thread's blocked for good, and count the signal as blocked before the
    next watcher, which then never gave it back."""
    before = blocked()
    assert signal.SIGUSR1 not in before
    holder = [Context()]
    watcher = holder[0].add(SignalHandle([signal.SIGUSR1]), Event.SIGNAL)

    def release() -> None:
        if how == "remove":
            watcher.remove()
        elif how == "close":
            holder[0].close()
        else:
            holder.clear()
            gc.collect()

    worker = threading.Thread(target=release)
    worker.start()
    worker.join()
    assert not watcher.is_active()
    assert signal.SIGUSR1 in blocked()  # deferred to the main thread
    with Context() as ctx:  # the main thread's next block settles it
        other = ctx.add(SignalHandle([signal.SIGUSR2]), Event.SIGNAL)
        assert signal.SIGUSR1 not in blocked()
        other.remove()
        again = ctx.add(SignalHandle([signal.SIGUSR1]), Event.SIGNAL)
        assert signal.SIGUSR1 in blocked()
        again.remove()
    assert blocked() == before


@needs_signal_handles
def test_a_release_from_another_thread_then_a_new_watcher_keeps_the_block() -> None:
    """A new watcher of a signal whose release waits for the main thread blocks on without
    a gap, and gives the block back when it goes."""
    before = blocked()
    with Context() as ctx:
        watcher = ctx.add(SignalHandle([signal.SIGUSR1]), Event.SIGNAL)
        worker = threading.Thread(target=watcher.remove)
        worker.start()
        worker.join()
        handle = SignalHandle([signal.SIGUSR1])
        again = ctx.add(handle, Event.SIGNAL)
        os.kill(os.getpid(), signal.SIGUSR1)
        assert ctx.wait(1) == [again]
        assert handle.delivered() == [signal.SIGUSR1]
        again.remove()
    assert blocked() == before


@needs_signal_handles
@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork here")
@pytest.mark.parametrize("let_go", ["close", "collect"])
def test_a_child_letting_go_of_an_inherited_context_keeps_its_own_block(let_go: str) -> None:
    """The child's blocks start afresh: closing the context it inherited, or the garbage
    collection of it, must not take one from the block of the child's own watcher (the
    inherited contexts' releases are detached in the child)."""
    usr1 = signal.SIGUSR1
    reader, writer = os.pipe()
    holder = [Context()]
    holder[0].add(SignalHandle([usr1]), Event.SIGNAL)
    try:
        pid = os.fork()
        if pid == 0:  # the child: its own watcher, then the inherited context let go
            try:
                mine = Context()
                handle = SignalHandle([usr1])
                own = mine.add(handle, Event.SIGNAL)
                if let_go == "close":
                    holder[0].close()
                else:
                    holder.clear()
                    gc.collect()
                still = usr1 in blocked()
                signal.signal(usr1, signal.SIG_IGN)  # never the default action here
                os.kill(os.getpid(), usr1)
                ok = still and mine.wait(1) == [own] and handle.delivered() == [usr1]
                os.write(writer, b"kept" if ok else b"lost")
            finally:
                os._exit(0)
        os.close(writer)
        answer = os.read(reader, 16)
        os.close(reader)
        os.waitpid(pid, 0)
    finally:
        for ctx in holder:
            ctx.close()
    assert answer == b"kept"


@needs_signal_handles
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_subprocess_child_inherits_the_block_as_documented() -> None:
    """What Python cannot give (README): subprocess's fork runs no Python code, so its
    children start with the watched signals blocked, unless the caller unblocks them."""
    script = "print(open('/proc/self/status').read().split('SigBlk:')[1].split()[0])"
    bit = 1 << (signal.SIGUSR1 - 1)
    with Context() as ctx:
        ctx.add(SignalHandle([signal.SIGUSR1]), Event.SIGNAL)
        inherited = subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, check=True
        )
        unblocked = subprocess.run(
            [sys.executable, "-c", script],
            capture_output=True,
            text=True,
            check=True,
            preexec_fn=lambda: signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGUSR1]),
        )
    assert int(inherited.stdout, 16) & bit
    assert not int(unblocked.stdout, 16) & bit


@needs_signal_handles
def test_a_refused_add_leaves_no_block_behind() -> None:
    """Nothing half-registered (SPEC 1): an add the OS refuses gives the block back."""
    handle = SignalHandle([signal.SIGUSR1])
    before = blocked()
    with Context() as ctx:
        ctx.add(handle, Event.SIGNAL)
        with pytest.raises(iopoll.HandleAlreadyWatchedError):
            ctx.add(handle, Event.SIGNAL)
        assert signal.SIGUSR1 in blocked()
    assert blocked() == before


def test_a_collected_streams_weak_handle_leaves_the_registry() -> None:
    """create() keeps one handle per live stream by id(); the stream's collection removes
    the entry (the handle's own weak reference calls back), before the id can be reused."""
    from iopoll import StreamPollWeakHandle

    a, b = socket.socketpair()
    with b:
        handle = StreamPollWeakHandle.create(a)
        key = id(a)
        assert StreamPollWeakHandle._made[key] is handle
        a.close()
        del a
        gc.collect()
        assert key not in StreamPollWeakHandle._made
        assert handle.stream is None and not handle.is_valid()
