"""The errors of ``iopoll.loop``."""

from __future__ import annotations

from collections.abc import Callable
from types import FunctionType

__all__ = ["InvalidCallbackError", "UncaughtError", "UnsupportedFeatureError"]

# The attribute TracingDriver's wrapper keeps the callback it wraps in (see describe()).
TRACED = "_iopoll_traced"


def describe(fn: object) -> str:
    """``module.qualname defined in file:line`` for a function, ``repr`` for anything else."""
    if isinstance(fn, FunctionType):
        # TracingDriver's wrapper of a defer or delay callback: the user's callback is meant.
        fn = fn.__dict__.get(TRACED, fn)
    name = getattr(fn, "__qualname__", None) or repr(fn)
    module = getattr(fn, "__module__", None)
    if module:
        name = f"{module}.{name}"
    code = getattr(fn, "__code__", None)
    if code is not None:
        name += f" defined in {code.co_filename}:{code.co_firstlineno}"
    return name


class InvalidCallbackError(Exception):
    """An unknown callback id, a callback that returned something other than ``None``, or
    an I/O callback whose stream was closed before it was cancelled.

    ``callback_id`` is the id concerned; ``code`` is ``NONNULL_RETURN``,
    ``INVALID_IDENTIFIER`` or ``STREAM_CLOSED``.
    """

    NONNULL_RETURN = 1
    INVALID_IDENTIFIER = 2
    STREAM_CLOSED = 3

    def __init__(self, callback_id: str, message: str, code: int = INVALID_IDENTIFIER) -> None:
        super().__init__(message)
        self.callback_id = callback_id
        self.code = code

    @classmethod
    def invalid_identifier(cls, callback_id: str) -> InvalidCallbackError:
        """The error for an id that is unknown or already cancelled."""
        return cls(callback_id, f"Invalid callback identifier {callback_id!r}")

    @classmethod
    def nonnull_return(cls, callback_id: str, fn: object, value: object) -> InvalidCallbackError:
        """The error for a callback that returned ``value`` instead of ``None``."""
        return cls(
            callback_id,
            f"Non-None return value received from callback {describe(fn)}: "
            f"{type(value).__name__} (callbacks must return None; "
            "an async def function is not a callback)",
            cls.NONNULL_RETURN,
        )

    @classmethod
    def stream_closed(cls, callback_id: str) -> InvalidCallbackError:
        """The error for an I/O callback whose stream was closed before it was cancelled
        (the driver has cancelled it: it could never fire again)."""
        return cls(
            callback_id,
            f"The stream of callback {callback_id!r} was closed before the callback was "
            "cancelled; the callback can never run again and was cancelled (cancel I/O "
            "callbacks before closing their stream)",
            cls.STREAM_CLOSED,
        )


class UncaughtError(Exception):
    """Ends ``run()``: a callback, or the error handler, raised; ``__cause__`` is that exception."""

    @classmethod
    def from_callback(cls, fn: Callable[..., object], exc: BaseException) -> UncaughtError:
        """What ``run()`` raises when callback ``fn`` raised ``exc`` and no handler is set."""
        return cls._thrown(
            exc,
            f"callback {describe(fn)}; use set_error_handler() to handle such exceptions",
        )

    @classmethod
    def from_handler(cls, fn: Callable[..., object], exc: BaseException) -> UncaughtError:
        """The error raised by ``run()`` when the error handler ``fn`` itself raised ``exc``."""
        return cls._thrown(exc, f"error handler {describe(fn)}")

    @classmethod
    def _thrown(cls, exc: BaseException, where: str) -> UncaughtError:
        error = cls(f"Uncaught {type(exc).__qualname__} thrown in event loop {where}: {exc}")
        error.__cause__ = exc
        return error


class UnsupportedFeatureError(Exception):
    """A feature this driver, thread or installation cannot offer (signals, suspensions)."""
