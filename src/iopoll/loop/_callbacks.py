"""Callback records, per-fd entries, ids and argument checks shared by every driver."""

from __future__ import annotations

import inspect
import math
import numbers
from collections.abc import Callable
from typing import Any

from ._errors import CallbackType

__all__ = ["Callback", "TimerCallback", "StreamCallback", "SignalCallback", "FdEntry"]

_CO_ASYNC = inspect.CO_COROUTINE | inspect.CO_ITERABLE_COROUTINE | inspect.CO_ASYNC_GENERATOR
_LETTERS = "abcdefghijklmnopqrstuvwxyz"
_SUCCESSOR: dict[str, str] = {chr(c): chr(c + 1) for c in range(ord("a"), ord("z"))}

# Event bits an FdEntry asks its poller for.
READ = 1
WRITE = 2


def next_id(current: str) -> str:
    """The id after ``current`` in the sequence ``a .. z, aa, ab ..`` (PHP's string increment)."""
    successor = _SUCCESSOR.get(current[-1])
    if successor is not None:
        return current[:-1] + successor
    head = current[:-1].rstrip("z")
    tail = "a" * (len(current) - len(head))
    if not head:
        return "a" + tail
    return head[:-1] + _SUCCESSOR[head[-1]] + tail


def check_callback(fn: object, name: str = "callback") -> None:
    """Refuse what cannot be a callback: non-callables and ``async def`` functions."""
    code = getattr(fn, "__code__", None)
    if code is not None:
        if code.co_flags & _CO_ASYNC:
            raise TypeError(
                f"{name} must be a plain function returning None; "
                f"an async def function is not a callback (got {fn!r})"
            )
        return
    if not callable(fn):
        raise TypeError(f"{name} must be callable, not {type(fn).__name__}")
    if inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn):
        raise TypeError(
            f"{name} must be a plain function returning None; "
            f"an async def function is not a callback (got {fn!r})"
        )


def check_seconds(value: object, name: str) -> float:
    """A delay or interval in seconds: a real number >= 0 (``math.inf`` means never)."""
    if type(value) is not float and type(value) is not int:
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise TypeError(f"{name} must be a number of seconds, not {type(value).__name__}")
        try:
            value = float(value)
        except OverflowError:  # an int too big for a float: as good as never
            value = math.inf
    if not value >= 0:
        raise ValueError(f"{name} must be >= 0 seconds and not NaN, not {value!r}")
    try:
        return float(value)
    except OverflowError:
        return math.inf


def stream_fd(stream: object) -> int:
    """The fd of ``stream`` (an object with ``fileno()`` or an int fd); refuses closed streams."""
    if type(stream) is int:
        fd = stream
    elif isinstance(stream, bool) or not hasattr(stream, "fileno"):
        raise TypeError(
            f"stream must have a fileno() method or be an int fd, not {type(stream).__name__}"
        )
    else:
        try:
            fd = stream.fileno()
        except (OSError, ValueError) as exc:
            raise ValueError(f"stream must be open: fileno() failed ({exc})") from exc
    if fd < 0:
        raise ValueError(f"stream must be open (a file descriptor >= 0), not fd {fd}")
    return fd


class Callback:
    """One registered callback: its id, function and state flags.

    ``invokable``: a queued callback runs only while it is set.  A defer is invokable from
    the start (it reaches the run queue only in the next tick); the other kinds become so
    when the tick activates them.
    """

    __slots__ = ("id", "fn", "enabled", "referenced", "invokable", "queued")

    # No __init__: a defer record is filled in by ``new_defer()`` (inlined in ``defer()``),
    # which skips the cost of an __init__ call; the subclasses set every slot in theirs.
    id: str
    fn: Callable[..., Any]
    enabled: bool
    referenced: bool
    invokable: bool
    queued: int  # entries in the driver's enable queue (not used by defers)

    @property
    def type(self) -> CallbackType:
        """What kind of callback this is."""
        return CallbackType.DEFER


def new_defer(callback_id: str, fn: Callable[..., Any]) -> Callback:
    """A defer record: enabled, referenced and invokable."""
    callback = Callback()
    callback.id = callback_id
    callback.fn = fn
    callback.enabled = callback.referenced = callback.invokable = True
    return callback


class TimerCallback(Callback):
    """A delay or repeat: ``expiration`` on the driver clock; ``entry`` is its live heap entry."""

    __slots__ = ("interval", "expiration", "entry", "repeat")

    def __init__(
        self, callback_id: str, fn: Callable[..., Any], interval: float, now: float, repeat: bool
    ) -> None:
        # The base's __init__ inlined: timers are made in bulk.
        self.id = callback_id
        self.fn = fn
        self.enabled = True
        self.referenced = True
        self.invokable = False
        self.queued = 1
        self.interval = interval
        self.expiration = now + interval
        self.entry: tuple[float, int, TimerCallback] | None = None
        self.repeat = repeat

    @property
    def type(self) -> CallbackType:
        """``DELAY`` or ``REPEAT``."""
        return CallbackType.REPEAT if self.repeat else CallbackType.DELAY


class StreamCallback(Callback):
    """A readable or writable callback; ``entry`` is the FdEntry it is active in."""

    __slots__ = ("stream", "fd", "writable", "entry")

    def __init__(
        self, callback_id: str, fn: Callable[..., Any], stream: Any, fd: int, writable: bool
    ) -> None:
        self.id = callback_id
        self.fn = fn
        self.enabled = self.referenced = True
        self.invokable = False
        self.queued = 1
        self.stream = stream
        self.fd = fd
        self.writable = writable
        self.entry: FdEntry | None = None

    @property
    def type(self) -> CallbackType:
        """``READABLE`` or ``WRITABLE``."""
        return CallbackType.WRITABLE if self.writable else CallbackType.READABLE


class SignalCallback(Callback):
    """A signal callback."""

    __slots__ = ("signum",)

    def __init__(self, callback_id: str, fn: Callable[..., Any], signum: int) -> None:
        self.id = callback_id
        self.fn = fn
        self.enabled = self.referenced = True
        self.invokable = False
        self.queued = 1
        self.signum = signum

    @property
    def type(self) -> CallbackType:
        """``SIGNAL``."""
        return CallbackType.SIGNAL


class FdEntry:
    """The active callbacks of one fd, and the backend's registration (``token``) for it."""

    __slots__ = ("fd", "stream", "readers", "writers", "events", "token", "fallback")

    def __init__(self, fd: int, stream: Any) -> None:
        self.fd = fd
        self.stream = stream  # the stream that registered the fd first: probed for liveness
        self.readers: dict[str, StreamCallback] = {}
        self.writers: dict[str, StreamCallback] = {}
        self.events = 0
        self.token: Any = None
        self.fallback = False

    def wanted(self) -> int:
        """The events the enabled callbacks need."""
        return (READ if self.readers else 0) | (WRITE if self.writers else 0)

    def alive(self) -> bool:
        """Whether the stream that registered the fd still owns it (not closed, not reused)."""
        stream = self.stream
        if type(stream) is int:
            return True  # an int fd cannot be watched for closing
        try:
            return bool(stream.fileno() == self.fd)
        except (OSError, ValueError):
            return False

