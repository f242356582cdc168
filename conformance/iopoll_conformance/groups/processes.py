"""ProcessHandle: a child's exit, reported once per context, never reaped (SPEC 10).

The children are ``python -c`` processes (``sys.executable``); each case kills and waits for
whatever it started, however it ended.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Any

import pytest

from ..support import poll_now, short_wait
from .timers import require

# Exits with the code read from stdin, once stdin is closed.
EXIT_ON_INPUT = "import sys; sys.exit(int(sys.stdin.read() or 0))"
_SLEEP = "import time; time.sleep(120)"
# How long a wait may take to see a child exit (a busy machine starts Python slowly).
PATIENCE = 60


@contextmanager
def children() -> Iterator[list[subprocess.Popen[bytes]]]:
    """A list to put started children in; on exit each is killed (if still running) and
    waited for, its stdin closed."""
    started: list[subprocess.Popen[bytes]] = []
    try:
        yield started
    finally:
        for child in started:
            if child.stdin is not None:
                child.stdin.close()
            if child.returncode is None:
                try:
                    child.kill()
                except OSError:
                    pass
                child.wait()


def start_child(
    started: list[subprocess.Popen[bytes]], code: str, piped: bool = False
) -> subprocess.Popen[bytes]:
    """Start ``python -c code`` (its stdin a pipe when ``piped``) and add it to ``started``."""
    stdin = subprocess.PIPE if piped else subprocess.DEVNULL
    child = subprocess.Popen([sys.executable, "-c", code], stdin=stdin)
    started.append(child)
    return child


def finish_child(child: subprocess.Popen[bytes], code: int) -> None:
    """Let an ``EXIT_ON_INPUT`` child exit with ``code``."""
    assert child.stdin is not None
    child.stdin.write(str(code).encode())
    child.stdin.close()


def _wait_exited(pid: int) -> None:
    """Block until ``pid`` (a child) has exited, without reaping it."""
    if not hasattr(os, "waitid"):
        pytest.skip("needs os.waitid to wait for a child without reaping it")
    os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)


def process_handles_here(api: ModuleType, ctx: Any) -> Any:
    """``api.ProcessHandle`` where ``ctx``'s backend supports it; else the case is skipped."""
    process_handle = require(api, "ProcessHandle")
    if not ctx.backend.supports_process_handles():
        pytest.skip(
            f"{ctx.backend.name} has no process handles "
            "(test_spec_10_process_handle_unsupported checks its refusal)"
        )
    return process_handle


class ProcessRules:
    """ProcessHandle (SPEC 10): pids, exit reports with the raw status, never reaping."""

    # -- the handle, on every backend -------------------------------------------------------

    def test_poll_process_handle_basic_invalid(self, api: ModuleType) -> None:
        """B.91, php-src poll_process_handle_basic.phpt, SPEC 10 and 1: a pid that is not an
        int > 0: ValueError (TypeError for another type), naming ``pid``; a pid with no
        process (a reaped child): ValueError "must be the id of a running process"."""
        process_handle = require(api, "ProcessHandle")
        for bad in (0, -1, -(2**40)):
            with pytest.raises(ValueError, match="pid"):
                process_handle(bad)
        wrong_types: tuple[Any, ...] = ("1", 1.0, None, [1])
        for wrong in wrong_types:
            with pytest.raises(TypeError, match="pid"):
                process_handle(wrong)
        with children() as started:
            child = start_child(started, "pass")
            child.wait()
            with pytest.raises(ValueError, match=re.escape("must be the id of a running process")):
                process_handle(child.pid)
        if sys.platform == "linux" and hasattr(os, "pidfd_open"):
            # A thread's id is a pid to the kernel, but not a process's: pidfd_open() refuses
            # it with EINVAL, or ENOENT since Linux 6.9.
            ids: list[int] = []
            ready, done = threading.Event(), threading.Event()

            def thread() -> None:
                ids.append(threading.get_native_id())
                ready.set()
                done.wait(10)

            worker = threading.Thread(target=thread)
            worker.start()
            try:
                ready.wait(10)
                with pytest.raises(ValueError, match="must be the id of a running process"):
                    process_handle(ids[0])
            finally:
                done.set()
                worker.join()

    def test_poll_process_handle_basic_from_popen(self, api: ModuleType) -> None:
        """B.91, SPEC 10: from_popen(popen) and ProcessHandle(pid) give the child's pid;
        ``status`` is None while it runs."""
        process_handle = require(api, "ProcessHandle")
        with children() as started:
            child = start_child(started, _SLEEP)
            handle = process_handle.from_popen(child)
            assert isinstance(handle, process_handle)
            assert handle.pid == child.pid
            assert handle.status is None
            assert process_handle(child.pid).pid == child.pid

    def test_spec_10_process_handle_unsupported(self, api: ModuleType, ctx: Any) -> None:
        """SPEC 10 "Where each works": where the backend has no process handles, the handle
        can be made but add is a FailedHandleAddError with code NOSUPPORT."""
        process_handle = require(api, "ProcessHandle")
        if ctx.backend.supports_process_handles():
            pytest.skip(f"{ctx.backend.name} supports process handles")
        with children() as started:
            handle = process_handle.from_popen(start_child(started, _SLEEP))
            with pytest.raises(api.FailedHandleAddError) as info:
                ctx.add(handle, api.Event.PROCESS)
            assert info.value.code == api.ErrorCode.NOSUPPORT
            assert len(ctx) == 0

    # -- where the backend supports them ----------------------------------------------------

    def test_poll_process_handle_basic(self, api: ModuleType, ctx: Any) -> None:
        """B.91, B.92, B.93, php-src poll_process_handle_basic.phpt, SPEC 10.

        PROCESS alone (other events, EDGE_TRIGGERED: ValueError); nothing while the child
        runs; one [PROCESS] report when it exits, with the raw wait status; never again;
        the child was not reaped: Popen.wait() still gets its exit code.
        """
        process_handle = process_handles_here(api, ctx)
        e = api.Event
        with children() as started:
            child = start_child(started, EXIT_ON_INPUT, piped=True)
            handle = process_handle.from_popen(child)
            for events in (e.READ, e.PROCESS | e.READ, e.SIGNAL):
                with pytest.raises(ValueError, match=re.escape("Event.PROCESS")):
                    ctx.add(handle, events)
            with pytest.raises(ValueError, match="events"):
                ctx.add(handle, e.PROCESS | e.EDGE_TRIGGERED)
            watcher = ctx.add(handle, e.PROCESS, "child")
            assert watcher.handle is handle
            assert poll_now(ctx) == []
            assert ctx.wait(0, 50_000) == []
            assert handle.status is None
            finish_child(child, 7)
            assert ctx.wait(PATIENCE) == [watcher]
            assert watcher.triggered_events == e.PROCESS
            assert handle.status is not None
            assert os.waitstatus_to_exitcode(handle.status) == 7
            assert poll_now(ctx) == []
            assert ctx.wait(0, 100_000) == []
            assert child.wait(PATIENCE) == 7

    def test_poll_process_handle_exited(self, api: ModuleType, ctx: Any) -> None:
        """B.92, php-src poll_process_handle_exited.phpt, SPEC 10: a child that exited
        before it was watched is reported at once, once, with its status."""
        process_handle = process_handles_here(api, ctx)
        with children() as started:
            child = start_child(started, "import sys; sys.exit(3)")
            _wait_exited(child.pid)
            handle = process_handle(child.pid)
            watcher = ctx.add(handle, api.Event.PROCESS, "gone")
            assert short_wait(ctx) == [watcher]
            assert handle.status is not None
            assert os.waitstatus_to_exitcode(handle.status) == 3
            assert ctx.wait(0, 100_000) == []
            assert child.wait(PATIENCE) == 3

    def test_poll_process_handle_signaled(self, api: ModuleType, ctx: Any) -> None:
        """B.92, SPEC 10: ``status`` is the raw wait status: a child killed by SIGTERM
        decodes to -SIGTERM, and Popen.wait() says the same."""
        process_handle = process_handles_here(api, ctx)
        with children() as started:
            child = start_child(started, _SLEEP)
            handle = process_handle.from_popen(child)
            watcher = ctx.add(handle, api.Event.PROCESS, "killed")
            assert poll_now(ctx) == []
            child.terminate()
            assert ctx.wait(PATIENCE) == [watcher]
            assert handle.status is not None
            assert os.WIFSIGNALED(handle.status)
            assert os.WTERMSIG(handle.status) == signal.SIGTERM
            assert os.waitstatus_to_exitcode(handle.status) == -signal.SIGTERM
            assert child.wait(PATIENCE) == -signal.SIGTERM

    def test_poll_process_handle_nowait(self, api: ModuleType, backend: Any, ctx: Any) -> None:
        """B.93, php-src poll_process_handle_nowait.phpt, SPEC 10: the handle never reaps.

        Two contexts (one with the handle, one with a second handle on the same pid) each
        report the exit once; afterwards waitpid still reaps the child, with the same
        raw status the handle gives.
        """
        process_handle = process_handles_here(api, ctx)
        with children() as started, api.Context(backend) as second:
            child = start_child(started, EXIT_ON_INPUT, piped=True)
            handle = process_handle.from_popen(child)
            other = process_handle(child.pid)
            first_watcher = ctx.add(handle, api.Event.PROCESS, "first")
            second_watcher = second.add(other, api.Event.PROCESS, "second")
            finish_child(child, 5)
            assert ctx.wait(PATIENCE) == [first_watcher]
            assert poll_now(ctx) == []
            assert second.wait(PATIENCE) == [second_watcher]
            assert poll_now(second) == []
            assert poll_now(ctx) == []
            pid, status = os.waitpid(child.pid, os.WNOHANG)
            assert pid == child.pid
            child.returncode = os.waitstatus_to_exitcode(status)
            assert child.returncode == 5
            assert handle.status == status
            assert other.status == status

    def test_poll_process_handle_collected_elsewhere(self, api: ModuleType, ctx: Any) -> None:
        """B.94, php-src poll_process_handle_collected_elsewhere.phpt, SPEC 10: a child
        reaped elsewhere after it was watched is still reported, once."""
        process_handle = process_handles_here(api, ctx)
        with children() as started:
            child = start_child(started, EXIT_ON_INPUT, piped=True)
            watcher = ctx.add(process_handle.from_popen(child), api.Event.PROCESS, "reaped")
            finish_child(child, 0)
            assert child.wait(PATIENCE) == 0
            assert ctx.wait(PATIENCE) == [watcher]
            assert watcher.triggered_events == api.Event.PROCESS
            assert poll_now(ctx) == []
            assert ctx.wait(0, 100_000) == []
