"""SPEC 10's signal, process and notify handles in the corners the other tests leave.

Each case was written against a single-point mutant of ``src/_iopoll_core/`` that every
other test let through (17 of 50 tried; the others were caught, or change nothing a user can
see); its docstring names the bug it pins.  One more, a fork child's collection of the
context it inherited, is a case of ``test_handle_internals.py``'s fork test.  They use real
OS objects only: signals sent to the main thread (``kill_main``), real children, real fds.  A
test that sends a signal installs a recording Python handler for it first (``recorded``), so
that a delivery the implementation fails to take is seen, not fatal, and puts the handler
and the mask back.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType

import pytest

import iopoll
from iopoll import Backend, Context, ErrorCode, Event, NotifyHandle, ProcessHandle, SignalHandle
from signal_state import blocked, kill_main

SIGNALS = Backend.AUTO.supports_signal_handles()
PROCESSES = Backend.AUTO.supports_process_handles()
needs_signal_handles = pytest.mark.skipif(not SIGNALS, reason="no signal handles here")
needs_process_handles = pytest.mark.skipif(not PROCESSES, reason="no process handles here")
needs_fork = pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork here")
SIGNAL_BACKENDS = [b for b in Backend.available_backends() if b.supports_signal_handles()]
PROCESS_BACKENDS = [b for b in Backend.available_backends() if b.supports_process_handles()]


@contextmanager
def recorded(*signums: int) -> Iterator[list[int]]:
    """A Python handler that records ``signums``; the mask and handlers are put back after."""
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    previous = {signum: signal.getsignal(signum) for signum in signums}
    calls: list[int] = []

    def record(signum: int, frame: FrameType | None) -> None:
        calls.append(signum)

    for signum in signums:
        signal.signal(signum, record)
    try:
        yield calls
    finally:
        # Anything still pending for these signals is taken before the handlers go back.
        for signum in signums:
            while signum in signal.sigpending() and signal.sigtimedwait([signum], 0):
                pass
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        for signum, handler in previous.items():
            signal.signal(signum, handler)


# -- SignalHandle: arguments ------------------------------------------------------------------


def test_a_bool_is_not_a_signal_number() -> None:
    """SPEC 10 / 1: ``signals`` holds ints; ``True`` is a bool, a TypeError, not SIGHUP.

    The bug it pins: the ``isinstance(signum, bool)`` guard dropped."""
    with pytest.raises(TypeError, match="signals"):
        SignalHandle([True])


# -- SignalHandle: the block, counted per signal ----------------------------------------------


@needs_signal_handles
@pytest.mark.parametrize("backend", SIGNAL_BACKENDS, ids=lambda b: b.name)
def test_two_watchers_of_a_signal_keep_it_blocked_until_the_last_goes(backend: Backend) -> None:
    """SPEC 10: the block is counted per signal; removing one of two watchers (two handles,
    two contexts) leaves the signal blocked and delivered to the other handle.

    The bug it pins: the count's off-by-one: the signal unblocked with one watcher left."""
    usr1 = signal.SIGUSR1
    with recorded(usr1) as calls, Context(backend) as one, Context(backend) as two:
        first, second = SignalHandle([usr1]), SignalHandle([usr1])
        gone = one.add(first, Event.SIGNAL)
        kept = two.add(second, Event.SIGNAL)
        gone.remove()
        assert usr1 in blocked()
        kill_main(usr1)
        assert two.wait(1) == [kept]
        assert second.delivered() == [usr1]
        assert calls == []
        kept.remove()
        assert usr1 not in blocked()


@needs_signal_handles
def test_delivered_takes_nothing_once_unwatched() -> None:
    """SPEC 10: ``delivered()`` reports what the handle took while watched.  Once its last
    watcher is gone, a signal the caller blocked (and left pending for its own
    ``sigwait``) stays pending: the handle's signalfd must not take it.

    The bug it pins: ``_read`` reads the signalfd whether or not the handle is watched."""
    usr2 = signal.SIGUSR2
    with recorded(usr2):
        signal.pthread_sigmask(signal.SIG_BLOCK, [usr2])
        handle = SignalHandle([usr2])
        with Context() as ctx:
            ctx.add(handle, Event.SIGNAL).remove()  # the signalfd exists now
        kill_main(usr2)
        assert usr2 in signal.sigpending()
        assert handle.delivered() == []
        assert usr2 in signal.sigpending()  # still the caller's
        assert signal.sigtimedwait([usr2], 0) is not None


@needs_signal_handles
@pytest.mark.skipif(not hasattr(signal, "SIGRTMIN"), reason="no real-time signals")
def test_delivered_returns_every_queued_real_time_signal() -> None:
    """SPEC 10: ``delivered()`` returns every delivery taken since the last call.  Real-time
    signals queue: forty of them are forty records, more than one ``read()`` of the
    signalfd takes at a time, all in one call.

    The bug it pins: ``_read`` stops after one ``read()``."""
    rt = signal.SIGRTMIN
    with recorded(rt) as calls, Context() as ctx:
        handle = SignalHandle([rt])
        watcher = ctx.add(handle, Event.SIGNAL)
        for _ in range(40):
            kill_main(rt)
        assert ctx.wait(1) == [watcher]
        assert handle.delivered() == [rt] * 40
        assert ctx.wait(0) == []
        watcher.remove()
        assert calls == []


@needs_signal_handles
@pytest.mark.skipif(not hasattr(signal, "SIGRTMIN"), reason="no real-time signals")
def test_every_queued_delivery_is_kept_when_the_last_watcher_goes() -> None:
    """SPEC 10: when the last watcher goes, deliveries taken while watched are kept in the
    handle.  Three queued real-time deliveries that no ``wait()`` read are all kept; none
    reaches the Python handler once the signal is unblocked.

    The bug it pins: only one pending delivery drained before the unblock."""
    rt = signal.SIGRTMIN
    with recorded(rt) as calls, Context() as ctx:
        handle = SignalHandle([rt])
        watcher = ctx.add(handle, Event.SIGNAL)
        for _ in range(3):
            kill_main(rt)
        watcher.remove()
        assert rt not in blocked()
        assert handle.delivered() == [rt] * 3
        assert calls == []


@needs_signal_handles
def test_a_delivery_pending_during_a_deferred_release_never_reaches_the_handler() -> None:
    """SPEC 10: a release made in another thread leaves the signal blocked in the main
    thread until its next block; a delivery that arrives in between waits, pending.  A new
    watcher added then blocks on without a gap, so its handle takes that delivery; the
    Python handler never runs.

    The bug it pins: ``_block`` unblocks the deferred signal, then blocks it again."""
    usr1 = signal.SIGUSR1
    with recorded(usr1) as calls, Context() as ctx:
        watcher = ctx.add(SignalHandle([usr1]), Event.SIGNAL)
        worker = threading.Thread(target=watcher.remove)
        worker.start()
        worker.join()
        kill_main(usr1)  # pending: blocked in this thread still
        handle = SignalHandle([usr1])
        again = ctx.add(handle, Event.SIGNAL)
        assert calls == []
        assert ctx.wait(1) == [again]
        assert handle.delivered() == [usr1]
        again.remove()
        assert calls == []


@needs_signal_handles
@pytest.mark.skipif(not Backend.EPOLL.is_available(), reason="only epoll rebuilds in add")
def test_an_add_refused_by_the_os_leaves_no_block_behind(
    pairs: Callable[[], tuple[socket.socket, socket.socket]], keepers: list[int]
) -> None:
    """Nothing half-registered: an add that fails after the handle blocked its signals
    (here the epoll rebuild that a reused fd number forces, with no fd left for it) gives
    the block back.

    The bug it pins: the failure path forgets ``_unwatch``."""
    from fd_limit import no_fd_left  # POSIX: resource

    usr1 = signal.SIGUSR1
    before = blocked()
    a, _ = pairs()
    with Context(Backend.EPOLL) as ctx:
        ctx.add(a, Event.READ)
        number = a.fileno()
        keepers.append(os.dup(number))  # the epoll entry outlives the close
        a.close()
        handle = SignalHandle([usr1])
        if handle.fileno() != number:
            pytest.skip("the signalfd did not get the closed socket's fd number")
        with no_fd_left():
            with pytest.raises(iopoll.FailedHandleAddError) as caught:
                ctx.add(handle, Event.SIGNAL)
            assert caught.value.code is ErrorCode.TOOBIG
            assert blocked() == before
        watcher = ctx.add(handle, Event.SIGNAL)  # fds free again: it works
        assert usr1 in blocked()
        watcher.remove()
    assert blocked() == before


@needs_signal_handles
@needs_fork
def test_a_fork_child_gets_a_signal_unblocked_whose_release_waits_for_the_main_thread() -> None:
    """SPEC 10: a ``fork`` child gets the signals unblocked, through ``register_at_fork``.
    That includes a signal whose last watcher was removed in another thread, still blocked
    in the main thread until its next block or unblock, when the fork comes first.

    The bug it pins: the child unblocks only the signals still counted, not those deferred."""
    usr1 = signal.SIGUSR1
    before = blocked()
    reader, writer = os.pipe()
    with Context() as ctx:
        watcher = ctx.add(SignalHandle([usr1]), Event.SIGNAL)
        worker = threading.Thread(target=watcher.remove)
        worker.start()
        worker.join()
        assert usr1 in blocked()  # deferred to the main thread
        pid = os.fork()
        if pid == 0:  # the child: report whether SIGUSR1 is blocked, and leave at once
            try:
                os.write(writer, b"blocked" if usr1 in blocked() else b"free")
            finally:
                os._exit(0)
        os.close(writer)
        answer = os.read(reader, 16)
        os.close(reader)
        os.waitpid(pid, 0)
        ctx.add(SignalHandle([signal.SIGUSR2]), Event.SIGNAL).remove()  # settles SIGUSR1
    assert blocked() == before
    assert answer == b"free"


@needs_signal_handles
def test_the_signalfd_is_not_inherited_across_exec() -> None:
    """A handle's signalfd is close-on-exec, as every fd Python makes (PEP 446), so that a
    child started with ``close_fds=False`` does not get it: its ``FD_CLOEXEC`` flag is set.

    The bug it pins: ``signalfd`` made without ``SFD_CLOEXEC``."""
    fcntl = pytest.importorskip("fcntl")
    handle = SignalHandle([signal.SIGUSR1])
    with Context() as ctx:
        ctx.add(handle, Event.SIGNAL).remove()
    assert fcntl.fcntl(handle.fileno(), fcntl.F_GETFD) & fcntl.FD_CLOEXEC


@needs_signal_handles
@pytest.mark.skipif(not Backend.EPOLL.is_available(), reason="epoll disarms one-shots itself")
def test_a_one_shot_signal_watcher_that_found_nothing_stays_armed() -> None:
    """SPEC 6.4 / 10: a one-shot watcher fires once per report.  When two handles share a
    signal, the OS reports both fds and one takes the delivery; the other reports
    nothing, so it must still be armed for the next delivery (epoll disarmed it).

    The bug it pins: the one-shot watcher not re-armed after an empty ``_take``."""
    usr1 = signal.SIGUSR1
    with recorded(usr1) as calls:
        for plain_first in (True, False):
            with Context(Backend.EPOLL) as ctx:
                plain_handle, oneshot_handle = SignalHandle([usr1]), SignalHandle([usr1])
                if plain_first:
                    plain = ctx.add(plain_handle, Event.SIGNAL)
                    oneshot = ctx.add(oneshot_handle, Event.SIGNAL | Event.ONESHOT)
                else:
                    oneshot = ctx.add(oneshot_handle, Event.SIGNAL | Event.ONESHOT)
                    plain = ctx.add(plain_handle, Event.SIGNAL)
                kill_main(usr1)
                first = ctx.wait(1)
                assert len(first) == 1
                if first != [plain]:
                    continue  # the one-shot watcher took it: this order proves nothing
                plain.remove()
                kill_main(usr1)
                assert ctx.wait(1) == [oneshot]
                assert oneshot_handle.delivered() == [usr1]
                break
        else:
            pytest.skip("the one-shot handle took the delivery in both orders")
        assert calls == []


# -- ProcessHandle ----------------------------------------------------------------------------


def test_a_pid_beyond_a_c_int_is_a_value_error() -> None:
    """SPEC 10 / 1: ``pid`` out of range is a ValueError naming it, not the OverflowError
    the OS call would raise.

    The bug it pins: the upper bound dropped."""
    with pytest.raises(ValueError, match="pid"):
        ProcessHandle(2**31)
    with pytest.raises(ValueError, match="pid"):
        ProcessHandle(2**63)


def test_a_bool_is_not_a_pid() -> None:
    """SPEC 10 / 1: ``pid`` is an int; ``True`` is a TypeError, not process 1 (init).

    The bug it pins: the ``isinstance(pid, bool)`` guard dropped."""
    with pytest.raises(TypeError, match="pid"):
        ProcessHandle(True)


@needs_process_handles
@pytest.mark.parametrize("backend", PROCESS_BACKENDS, ids=lambda b: b.name)
def test_a_reported_process_is_not_reported_again_after_modify(backend: Backend) -> None:
    """SPEC 10: a process is reported once per context; ``modify_events`` of its watcher
    after the report does not make it come out again.

    The bug it pins: ``modify_events`` re-arms a process whose exit was reported."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        with Context(backend) as ctx:
            watcher = ctx.add(ProcessHandle.from_popen(child), Event.PROCESS)
            assert ctx.wait(10) == [watcher]
            watcher.modify_events(Event.PROCESS)
            assert ctx.wait(0) == []
            watcher.modify_events(Event.PROCESS | Event.ONESHOT)
            assert ctx.wait(0) == []
            assert watcher.is_active()
    finally:
        child.wait()


@needs_process_handles
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="core dumps as on Linux")
def test_the_status_of_a_child_that_dumped_core_is_waitpids(tmp_path: Path) -> None:
    """SPEC 10: ``status`` is the raw wait status, the very number ``os.waitpid`` returns
    afterwards, core-dump bit included.

    The bug it pins: ``WCOREDUMP``'s 0x80 lost from ``status``."""
    resource = pytest.importorskip("resource")
    _, hard = resource.getrlimit(resource.RLIMIT_CORE)
    if hard != resource.RLIM_INFINITY:
        pytest.skip("RLIMIT_CORE is capped")
    # The child lifts its own core limit (no preexec_fn: Python code between fork and exec
    # in a process with threads), then aborts.
    code = "import os, resource; resource.setrlimit(resource.RLIMIT_CORE, (-1, -1)); os.abort()"
    child = subprocess.Popen([sys.executable, "-c", code], cwd=tmp_path)
    try:
        handle = ProcessHandle.from_popen(child)
        with Context() as ctx:
            watcher = ctx.add(handle, Event.PROCESS)
            assert ctx.wait(30) == [watcher]
        status = handle.status
        _, raw = os.waitpid(child.pid, 0)
        child.returncode = os.waitstatus_to_exitcode(raw)  # reaped here, not by Popen
    finally:
        if child.returncode is None:
            child.kill()
            child.wait()
    if not os.WCOREDUMP(raw):
        pytest.skip("the kernel wrote no core dump here")
    assert status == raw
    assert os.WIFSIGNALED(raw) and os.WTERMSIG(raw) == signal.SIGABRT


# -- NotifyHandle -----------------------------------------------------------------------------


def test_notify_and_clear_on_a_closed_handle_are_value_errors() -> None:
    """A closed NotifyHandle refuses ``notify()`` and ``clear()`` with ValueError (as a
    closed file's methods do), never an OSError from its freed fd (or another file's).

    The bug it pins: the closed checks dropped."""
    handle = NotifyHandle()
    handle.close()
    with pytest.raises(ValueError, match="closed"):
        handle.notify()
    with pytest.raises(ValueError, match="closed"):
        handle.clear()
