"""Edges of ``ProcessHandle`` (SPEC 10) a mutation run found untested.

The raw wait status for every exit code (not only small ones), ``status`` read without any
context, the argument errors of ``ProcessHandle(pid)`` and ``ProcessHandle.from_popen``
(right class, naming the argument, SPEC 1), pidfds given back when a handle is collected,
and the path taken where there are no pidfds (the handle can still be made,
``os.kill(pid, 0)`` checks the pid).  That path is reached on Linux by turning the module's
``PIDFD_AVAILABLE`` off for one test: the OS calls it then makes are the real ones.

Every child is a real ``python -c`` process, killed and waited for by the test that started it.
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from _iopoll_core import process_handles
from iopoll import Backend, Context, Event, ProcessHandle

PIDFD = process_handles.PIDFD_AVAILABLE
PROCESSES = Backend.AUTO.supports_process_handles()
needs_process_handles = pytest.mark.skipif(not PROCESSES, reason="no process handles here")
needs_waitid = pytest.mark.skipif(not hasattr(os, "waitid"), reason="needs os.waitid")

_SLEEP = "import time; time.sleep(60)"


@contextmanager
def child(code: str) -> Iterator[subprocess.Popen[bytes]]:
    """``python -c code``, killed (if still running) and waited for afterwards."""
    process = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.DEVNULL)
    try:
        yield process
    finally:
        if process.returncode is None:
            process.kill()
            process.wait()


def exited(pid: int) -> None:
    """Block until the child ``pid`` has exited, without reaping it."""
    os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)


def watched_to_its_exit(process: subprocess.Popen[bytes]) -> tuple[ProcessHandle, int]:
    """A handle of ``process``, once a context reported its exit, and its ``status``."""
    handle = ProcessHandle.from_popen(process)
    with Context() as ctx:
        watcher = ctx.add(handle, Event.PROCESS)
        assert ctx.wait(30) == [watcher]
    status = handle.status
    assert status is not None
    return handle, status


def open_fds() -> int:
    """How many fds this process has open."""
    return len(os.listdir("/proc/self/fd"))


# -- ProcessHandle: status ----------------------------------------------------------------


@needs_process_handles
def test_an_exit_code_above_127_is_reported_whole() -> None:
    """``status`` holds all 8 bits of the exit code: a child exiting with 200 decodes to
    200, and is the number ``os.waitpid`` gives afterwards."""
    with child("import sys; sys.exit(200)") as process:
        _, status = watched_to_its_exit(process)
        assert os.waitstatus_to_exitcode(status) == 200
        _, raw = os.waitpid(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(raw)
        assert status == raw


@needs_process_handles
@needs_waitid
def test_status_is_known_without_any_context() -> None:
    """``status`` of a child that exited is its wait status even when no context ever
    watched the handle."""
    with child("import sys; sys.exit(9)") as process:
        handle = ProcessHandle.from_popen(process)
        exited(process.pid)
        status = handle.status
        assert status is not None
        assert os.waitstatus_to_exitcode(status) == 9
        assert process.wait(30) == 9


# -- ProcessHandle: arguments -------------------------------------------------------------


def test_init_cannot_be_called_again() -> None:
    """Calling ``__init__`` on a made handle is a TypeError; the handle keeps its pid."""
    with child(_SLEEP) as first, child(_SLEEP) as second:
        handle = ProcessHandle(first.pid)
        with pytest.raises(TypeError, match="twice"):
            handle.__init__(second.pid)  # type: ignore[misc]
        assert handle.pid == first.pid


def test_the_highest_pid_with_no_process_is_not_running() -> None:
    """``ProcessHandle(2**31 - 1)``, in range but with no such process: ValueError saying
    the pid must be the id of a running process (not that it is out of range)."""
    with pytest.raises(ValueError, match="pid must be the id of a running process"):
        ProcessHandle(2**31 - 1)


class _NoPid:
    pid = None
    returncode = None


class _NoReturncode:
    def __init__(self, pid: int) -> None:
        self.pid = pid


def test_from_popen_names_popen_for_an_object_without_a_pid() -> None:
    """``from_popen`` of an object whose ``pid`` is not an int: TypeError naming
    ``popen``, not ``pid``."""
    with pytest.raises(TypeError, match=r"^popen must be a subprocess\.Popen, not _NoPid$"):
        ProcessHandle.from_popen(_NoPid())


def test_from_popen_names_popen_for_an_object_without_returncode() -> None:
    """``from_popen`` of an object with an int ``pid`` but no ``returncode`` (not a Popen):
    TypeError naming ``popen``, not an AttributeError."""
    with (
        child(_SLEEP) as process,
        pytest.raises(TypeError, match=r"^popen must be a subprocess\.Popen"),
    ):
        ProcessHandle.from_popen(_NoReturncode(process.pid))


def test_from_popen_of_a_waited_popen_names_popen() -> None:
    """``from_popen`` of a Popen already waited for: ValueError naming ``popen`` and
    saying it was waited for."""
    with child("pass") as process:
        process.wait(30)
        with pytest.raises(ValueError, match=r"^popen .*it was waited for$"):
            ProcessHandle.from_popen(process)


class _MyProcessHandle(ProcessHandle):
    __slots__ = ()


def test_from_popen_makes_the_class_it_is_called_on() -> None:
    """``Subclass.from_popen(popen)`` returns an instance of the subclass."""
    with child(_SLEEP) as process:
        handle = _MyProcessHandle.from_popen(process)
        assert type(handle) is _MyProcessHandle
        assert handle.pid == process.pid


# -- ProcessHandle: the pidfd -------------------------------------------------------------


@pytest.mark.skipif(
    not (process_handles.PIDFD_AVAILABLE and os.path.isdir("/proc/self/fd")),
    reason="needs pidfds and /proc/self/fd",
)
def test_a_collected_handle_gives_its_pidfd_back() -> None:
    """Each handle opens one pidfd and closes it when collected: 200 handles made and
    dropped leave the number of open fds where it was."""
    with child(_SLEEP) as process:
        gc.collect()
        before = open_fds()
        for _ in range(200):
            handle = ProcessHandle(process.pid)
            assert handle.fileno() >= 0
            del handle
        gc.collect()
        assert open_fds() == before


@needs_process_handles
def test_a_pidfd_numbered_zero_is_watched() -> None:
    """In a process whose fd 0 is closed, the pidfd can be fd 0: ``fileno()`` returns it
    and a context reports the child's exit through it."""
    saved = os.dup(0)
    try:
        with child("import sys; sys.exit(4)") as process:
            os.close(0)
            try:
                handle, status = watched_to_its_exit(process)
                assert handle.fileno() == 0
                assert os.waitstatus_to_exitcode(status) == 4
                del handle  # its pidfd closed before fd 0 is given back
                gc.collect()
            finally:
                os.dup2(saved, 0)
            assert process.wait(30) == 4
    finally:
        os.close(saved)


# -- ProcessHandle without pidfds -----------------------------------------------------------


@pytest.fixture
def no_pidfds(monkeypatch: pytest.MonkeyPatch) -> None:
    """``ProcessHandle`` made as where there are no pidfds (``os.kill(pid, 0)``)."""
    monkeypatch.setattr(process_handles, "PIDFD_AVAILABLE", False)


@pytest.mark.usefixtures("no_pidfds")
def test_without_pidfds_a_running_child_gives_a_handle_with_no_fd() -> None:
    """Without pidfds, a handle is made for a running child; ``fileno()`` is an OSError
    (ENOSYS) and ``status`` None, even once the child exited."""
    with child("pass") as process:
        handle = ProcessHandle.from_popen(process)
        assert handle.pid == process.pid
        with pytest.raises(OSError) as info:
            handle.fileno()
        assert info.value.errno == 38
        process.wait(30)
        assert handle.status is None


@pytest.mark.usefixtures("no_pidfds")
def test_without_pidfds_a_reaped_child_is_not_running() -> None:
    """Without pidfds, the pid of a reaped child is still refused ("must be the id of a
    running process"), through ``os.kill(pid, 0)``."""
    with child("pass") as process:
        process.wait(30)
        with pytest.raises(ValueError, match="pid must be the id of a running process"):
            ProcessHandle(process.pid)


@pytest.mark.parametrize("pidfds", [True, False], ids=["pidfd", "kill"])
def test_pid_zero_is_refused_as_not_greater_than_zero(
    pidfds: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pid 0 (which ``kill`` takes for this process group) is a ValueError saying ``pid``
    must be greater than 0, with pidfds or without."""
    monkeypatch.setattr(process_handles, "PIDFD_AVAILABLE", pidfds and PIDFD)
    with pytest.raises(ValueError, match="pid must be greater than 0, not 0"):
        ProcessHandle(0)


@pytest.mark.usefixtures("no_pidfds")
@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_without_pidfds_a_process_not_ours_to_signal_is_accepted() -> None:
    """Without pidfds, a process that exists but that this one may not signal (``kill``
    says EPERM: pid 1 to an unprivileged user) still gives a handle."""
    if os.getuid() != 0:
        handle = ProcessHandle(1)
        assert handle.pid == 1
        return
    # As root every signal is allowed: a forked child drops to "nobody" and tries there.
    pid = os.fork()
    if pid == 0:  # pragma: no cover (the child)
        code = 1
        try:
            os.setgid(65534)
            os.setuid(65534)
        except OSError:
            os._exit(4)  # cannot drop privileges here
        try:
            code = 0 if ProcessHandle(1).pid == 1 else 1
        except PermissionError:
            code = 2
        except BaseException:
            code = 3
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    if code == 4:
        pytest.skip("cannot become an unprivileged user here")
    assert code == 0  # 2: kill's EPERM came out as PermissionError
