"""The exception hierarchy and the errno to ``ErrorCode`` mapping."""

from __future__ import annotations

import errno as errno_module
import os
import sys

from .events import ErrorCode

__all__ = [
    "BackendUnavailableError",
    "FailedContextInitializationError",
    "FailedHandleAddError",
    "FailedPollOperationError",
    "FailedPollWaitError",
    "FailedWatcherModificationError",
    "HandleAlreadyWatchedError",
    "InactiveWatcherError",
    "InvalidHandleError",
    "PollError",
    "Refusal",
    "code_for_errno",
    "raised_by_backend",
]


class PollError(Exception):
    """Root of every error raised by iopoll itself."""


class FailedPollOperationError(PollError, OSError):
    """The OS (or a backend's own limit) refused an operation.

    ``code`` is an ``ErrorCode``; ``errno`` is the OS error number, or ``None`` when the
    refusal did not come from a system call.
    """

    code: ErrorCode

    def __init__(self, message: str, code: ErrorCode, errno: int | None = None) -> None:
        if errno is None:
            super().__init__(message)
        else:
            super().__init__(errno, message)
        self.code = code

    def __reduce__(self) -> tuple[object, ...]:
        # OSError's own reduce would call __init__ with (errno, message): keep the order.
        message = self.strerror if self.errno is not None else self.args[0]
        return (type(self), (message, self.code, self.errno))


class FailedContextInitializationError(FailedPollOperationError):
    """The OS refused to create the backend's polling object."""


class FailedHandleAddError(FailedPollOperationError):
    """``Context.add`` was refused by the backend."""


class FailedWatcherModificationError(FailedPollOperationError):
    """``Watcher.modify*`` or ``remove`` was refused by the backend."""


class FailedPollWaitError(FailedPollOperationError):
    """``Context.wait`` failed in the backend."""


class BackendUnavailableError(PollError):
    """The requested ``Backend`` does not exist in this implementation or on this platform."""


class InactiveWatcherError(PollError):
    """The watcher was removed, or its context was closed."""


class HandleAlreadyWatchedError(PollError):
    """The handle's fd is already registered in this context."""


class InvalidHandleError(PollError):
    """The handle has no usable file descriptor (closed stream, in-memory file, ...)."""


class Refusal(Exception):
    """Raised by a backend that refuses an operation without a system call failing.

    The context turns it into the ``FailedPollOperationError`` subclass of the operation.
    """

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


_CODES = {
    "ENOMEM": ErrorCode.NOMEM,
    "EINVAL": ErrorCode.INVALID,
    "EBADF": ErrorCode.INVALID,
    "EEXIST": ErrorCode.EXISTS,
    "ENOENT": ErrorCode.NOTFOUND,
    "ETIME": ErrorCode.TIMEOUT,
    "ETIMEDOUT": ErrorCode.TIMEOUT,
    "EINTR": ErrorCode.INTERRUPTED,
    "EACCES": ErrorCode.PERMISSION,
    "EPERM": ErrorCode.PERMISSION,
    "EMFILE": ErrorCode.TOOBIG,
    "ENFILE": ErrorCode.TOOBIG,
    "EAGAIN": ErrorCode.AGAIN,
    "EWOULDBLOCK": ErrorCode.AGAIN,
    "ENOSYS": ErrorCode.NOSUPPORT,
    "EOPNOTSUPP": ErrorCode.NOSUPPORT,
    "ENOTSUP": ErrorCode.NOSUPPORT,
}
# Names missing on a platform (ETIME on some BSDs) are skipped.
ERRNO_CODES: dict[int, ErrorCode] = {
    getattr(errno_module, name): code
    for name, code in _CODES.items()
    if hasattr(errno_module, name)
}


def code_for_errno(number: int | None) -> ErrorCode:
    """The ``ErrorCode`` for an OS error number (``SYSTEM`` when it has no mapping)."""
    if number is None:
        return ErrorCode.SYSTEM
    return ERRNO_CODES.get(number, ErrorCode.SYSTEM)


_ENGINE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def raised_by_backend(exc: BaseException, mechanism: type | None) -> bool:
    """Whether ``exc`` came from the OS call itself, not from a signal handler run during it.

    PEP 475: a handler's exception leaves ``wait()`` unchanged, so only an error whose
    traceback stays inside the engine and the module of ``mechanism`` (the class of the
    Mechanism that polled) is the backend's to report.  Frames from anywhere else are the
    caller's code.
    """
    module = sys.modules.get(mechanism.__module__) if mechanism is not None else None
    where = getattr(module, "__file__", None)
    dirs = (_ENGINE_DIR,) if where is None else (_ENGINE_DIR, os.path.dirname(where) + os.sep)
    frame = exc.__traceback__
    while frame is not None:
        if not frame.tb_frame.f_code.co_filename.startswith(dirs):
            return False
        frame = frame.tb_next
    return True
