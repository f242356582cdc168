"""``ProcessHandle``: a process's exit reported by ``wait()``, through a Linux pidfd.

A pidfd (``os.pidfd_open``, Linux 5.3) becomes readable when its process exits, and stays
readable.  The Context watches it one-shot, so each context reports the exit once.  The
status is read with ``waitid(P_PIDFD, ..., WEXITED | WNOHANG | WNOWAIT)``, which leaves the
child a zombie: the handle never reaps, so ``Popen.wait()`` or ``os.waitpid`` still gets the
status afterwards.  A process that is not our child (or that was reaped elsewhere first) is
still reported, with ``status`` None.  Without pidfds, ``supports_process_handles()`` is
false and ``add`` is refused with ``NOSUPPORT``; the handle itself can still be made.
"""

from __future__ import annotations

import errno
import os
import weakref
from typing import Any

from .events import Event
from .source_handles import SourceHandle

__all__ = ["ProcessHandle", "PIDFD_AVAILABLE"]

PIDFD_AVAILABLE = hasattr(os, "pidfd_open") and hasattr(os, "P_PIDFD")
_MAX_PID = 2**31 - 1


def wait_status(code: int, status: int) -> int:
    """The raw wait status (as ``os.waitpid`` gives it) for a ``waitid`` result."""
    if code == os.CLD_EXITED:
        return (status & 0xFF) << 8
    if code == os.CLD_DUMPED:
        return status | 0x80
    return status  # CLD_KILLED: the signal number


class ProcessHandle(SourceHandle):
    """A process, watched for ``Event.PROCESS``: ``ProcessHandle(pid)``.

    Reported once per context when the process exits (at once if it already has).
    ``status`` is its raw wait status once it exited (``os.waitstatus_to_exitcode`` decodes
    it), or None before, or when it was reaped elsewhere first or is not our child.  Only
    where ``Backend.supports_process_handles()``; elsewhere ``add`` raises
    ``FailedHandleAddError`` with ``code == ErrorCode.NOSUPPORT``.
    """

    __slots__ = ("_pid", "_fd", "_status", "_closing")

    _event = Event.PROCESS
    _needs = "supports_process_handles"
    _pid: int
    _fd: int  # the pidfd; -1 where there is none
    _status: int | None
    _closing: weakref.finalize[..., object] | None

    def __init__(self, pid: int) -> None:
        if hasattr(self, "_pid"):
            raise TypeError("ProcessHandle.__init__ cannot be called twice")
        if isinstance(pid, bool) or not isinstance(pid, int):
            raise TypeError(f"pid must be an int, not {type(pid).__name__}")
        if pid <= 0:
            raise ValueError(f"pid must be greater than 0, not {pid}")
        if pid > _MAX_PID:
            raise ValueError(f"pid must be less than or equal to {_MAX_PID}, not {pid}")
        self._fd = -1
        self._closing = None
        self._status = None
        try:
            if PIDFD_AVAILABLE:
                self._fd = os.pidfd_open(pid)
                self._closing = weakref.finalize(self, os.close, self._fd)
            else:
                os.kill(pid, 0)
        except PermissionError:
            pass  # it exists, and is not ours to signal (only from os.kill)
        except OSError as exc:
            # ESRCH: no such process; ENOENT (Linux 6.9+) or EINVAL: a thread's id, not a
            # process's.
            if exc.errno not in (errno.ESRCH, errno.ENOENT, errno.EINVAL):
                raise
            raise ValueError(f"pid must be the id of a running process: {exc.strerror}") from None
        self._pid = pid

    @classmethod
    def from_popen(cls, popen: Any) -> ProcessHandle:
        """The handle of a ``subprocess.Popen`` child that has not been waited for yet."""
        pid = getattr(popen, "pid", None)
        if not isinstance(pid, int) or not hasattr(popen, "returncode"):
            raise TypeError(f"popen must be a subprocess.Popen, not {type(popen).__name__}")
        if popen.returncode is not None:
            raise ValueError("popen must be the id of a running process: it was waited for")
        return cls(pid)

    @property
    def pid(self) -> int:
        """The process id."""
        return self._pid

    @property
    def status(self) -> int | None:
        """The raw wait status once the process exited and was not reaped elsewhere first."""
        if self._status is None:
            self._look()
        return self._status

    def fileno(self) -> int:
        """The pidfd a context watches."""
        if self._fd < 0:
            raise OSError(38, "pidfd_open is not available here")  # ENOSYS
        return self._fd

    def _look(self) -> None:
        """Read the exit status, without reaping, if the process has exited."""
        if self._fd < 0:
            return
        try:
            result = os.waitid(os.P_PIDFD, self._fd, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return  # not our child, or reaped already: exited, status unknown
        except OSError:
            return
        if result is not None and result.si_pid:
            self._status = wait_status(result.si_code, result.si_status)

    def _take(self) -> bool:
        self._look()
        return True

    def __repr__(self) -> str:
        return f"<ProcessHandle pid={self._pid}>"
