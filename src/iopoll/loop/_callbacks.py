"""The callback kinds: ``CallbackType`` and one record class per kind; per-fd entries, ids and
argument checks shared by every driver.

A record's class attributes say how the tick runs it:

* ``once``: its id is cancelled just before the call (defer, delay);
* ``arg``: the callback's second argument (the stream, the signal number), or ``None`` for
  the kinds called ``fn(id)``;
* ``type``: its ``CallbackType``.

``RepeatCallback``, re-armed just before the call, is the one class the tick tests for.

Where a record becomes active (the timer heap, an fd's entry, a signal's map) is the
registry's business (``_registry.py``); a new kind adds a class here and its activation there.
"""

from __future__ import annotations

import enum
import inspect
import math
import numbers
import types
from collections.abc import Callable
from typing import Any

from _iopoll_core.handles import MAX_FD, has_fileno

__all__ = [
    "CallbackType",
    "Callback",
    "DeferCallback",
    "TimerCallback",
    "DelayCallback",
    "RepeatCallback",
    "StreamCallback",
    "ReadableCallback",
    "WritableCallback",
    "SignalCallback",
    "FdEntry",
]

_CO_ASYNC = inspect.CO_COROUTINE | inspect.CO_ITERABLE_COROUTINE | inspect.CO_ASYNC_GENERATOR
_LETTERS = "abcdefghijklmnopqrstuvwxyz"
_SUCCESSOR: dict[str, str] = {chr(c): chr(c + 1) for c in range(ord("a"), ord("z"))}


class CallbackType(enum.Enum):
    """What kind of event a callback waits for."""

    DEFER = "defer"
    DELAY = "delay"
    REPEAT = "repeat"
    READABLE = "readable"
    WRITABLE = "writable"
    SIGNAL = "signal"


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
    if isinstance(code, types.CodeType):  # a function: the cheap check
        if code.co_flags & _CO_ASYNC:
            raise TypeError(
                f"{name} must be a plain function returning None; "
                f"an async def function is not a callback (got {fn!r})"
            )
        return
    if type(fn) is types.BuiltinFunctionType:  # a C function or bound method: never async
        return
    if not callable(fn):
        raise TypeError(f"{name} must be callable, not {type(fn).__name__}")
    # An object whose class has an async def __call__ is refused as the function would be.
    call = None if isinstance(fn, type) else type(fn).__call__  # callable, so it has one
    if code is None and (
        inspect.iscoroutinefunction(fn)
        or inspect.isasyncgenfunction(fn)
        or inspect.iscoroutinefunction(call)
        or inspect.isasyncgenfunction(call)
    ):
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
        shown = repr(value)
        if len(shown) > 40:  # an int of hundreds of digits: its sign and size say enough
            shown = f"{shown[:20]}... ({len(shown)} characters)"
        raise ValueError(f"{name} must be >= 0 and not NaN, not {shown}")
    try:
        return float(value)
    except OverflowError:
        return math.inf


def stream_fd(stream: object) -> int:
    """The fd of ``stream`` (an object with ``fileno()`` or an int fd); refuses closed streams."""
    if type(stream) is int:
        fd = stream
    elif isinstance(stream, bool) or not has_fileno(stream):
        raise TypeError(
            f"stream must have a fileno() method or be an int fd, not {type(stream).__name__}"
        )
    else:
        try:
            fd = stream.fileno()
        except (OSError, ValueError) as exc:
            raise ValueError(f"stream must be open: fileno() failed ({exc})") from exc
    if type(fd) is not int:
        raise TypeError(f"stream's fileno() must return an int, not {type(fd).__name__}")
    if not 0 <= fd <= MAX_FD:
        raise ValueError(
            f"stream must be open (a file descriptor between 0 and {MAX_FD}), not fd {fd}"
        )
    return fd


def owns_fd(stream: Any, fd: int) -> bool:
    """Whether ``stream`` still has the fd number ``fd`` (not closed, its number not taken
    by another open); an int fd cannot be watched for closing, and always does."""
    if type(stream) is int:
        return True
    try:
        return bool(stream.fileno() == fd)
    except (OSError, ValueError):
        return False


class Callback:
    """One registered callback: its id, function and state flags (the base of every kind).

    ``invokable``: a queued callback runs only while it is set.  A defer is invokable from
    the start (it reaches the run queue only in the next tick); the other kinds become so
    when the tick activates them.  ``indexed``: whether the driver's id map holds it yet (a
    defer or a timer waits in ``_unindexed`` until a call by id needs the map; see
    ``_registry.py``).  A defer or a delay lets go of ``fn`` once its id is dead, just
    before its call.
    """

    __slots__ = ("id", "fn", "enabled", "referenced", "invokable", "queued", "indexed")

    id: str
    fn: Callable[..., Any]
    enabled: bool
    referenced: bool
    invokable: bool
    queued: int  # entries in the driver's enable queue (not used by defers)
    indexed: bool

    type: CallbackType  # what kind of callback this is
    once = False  # the id is cancelled just before the call
    arg: Any = None  # the second argument of the call, if the kind has one

    def _init_queued(self, callback_id: str, fn: Callable[..., Any]) -> None:
        """A new timer, I/O or signal record: enabled, referenced, and in the enable queue
        until the tick that activates it (and makes it invokable)."""
        self.id = callback_id
        self.fn = fn
        self.enabled = self.referenced = True
        self.invokable = False
        self.queued = 1


class DeferCallback(Callback):
    """A ``defer()``: runs once, in the next tick."""

    # No __init__: ``defer()`` fills the record in itself (see ``new_defer()``), which skips
    # the cost of an __init__ call on the defer hot path.
    __slots__ = ()

    type = CallbackType.DEFER
    once = True


def new_defer(callback_id: str, fn: Callable[..., Any]) -> DeferCallback:
    """A defer record: enabled, referenced and invokable, not indexed yet."""
    callback = DeferCallback()
    callback.id = callback_id
    callback.fn = fn
    callback.enabled = callback.referenced = callback.invokable = True
    callback.indexed = False
    return callback


class TimerCallback(Callback):
    """A delay or repeat: ``expiration`` on the driver clock; ``entry``, while it is active,
    is its heap tuple or its seq in the FIFO (see ``_registry.py``)."""

    __slots__ = ("interval", "expiration", "entry")

    def __init__(
        self, callback_id: str, fn: Callable[..., Any], interval: float, now: float
    ) -> None:
        self._init_queued(callback_id, fn)
        self.indexed = False  # it waits in _unindexed (_registry.py)
        self.interval = interval
        self.expiration = now + interval
        self.entry: tuple[float, int, TimerCallback] | int | None = None


class DelayCallback(TimerCallback):
    """A ``delay()``: runs once, when it expires."""

    __slots__ = ()

    type = CallbackType.DELAY
    once = True


class RepeatCallback(TimerCallback):
    """A ``repeat()``: re-armed from the clock each time, just before it runs."""

    __slots__ = ()

    type = CallbackType.REPEAT


class StreamCallback(Callback):
    """An I/O callback, called ``fn(id, stream)``; ``entry`` is the FdEntry it is active in."""

    __slots__ = ("arg", "fd", "entry")

    writable: bool  # which of its FdEntry's maps it sits in

    def __init__(self, callback_id: str, fn: Callable[..., Any], stream: Any, fd: int) -> None:
        self._init_queued(callback_id, fn)
        self.indexed = True  # the registry puts it in the id map at once
        self.arg = stream
        self.fd = fd
        self.entry: FdEntry | None = None

    @property
    def stream(self) -> Any:
        """The stream it was registered with (the callback's second argument)."""
        return self.arg


class ReadableCallback(StreamCallback):
    """An ``on_readable()``: runs in every tick its stream is readable (or closed)."""

    __slots__ = ()

    type = CallbackType.READABLE
    writable = False


class WritableCallback(StreamCallback):
    """An ``on_writable()``: runs in every tick its stream is writable (or closed)."""

    __slots__ = ()

    type = CallbackType.WRITABLE
    writable = True


class SignalCallback(Callback):
    """A signal callback, called ``fn(id, signum)``."""

    __slots__ = ("arg",)

    arg: int
    type = CallbackType.SIGNAL

    def __init__(self, callback_id: str, fn: Callable[..., Any], signum: int) -> None:
        self._init_queued(callback_id, fn)
        self.indexed = True  # the registry puts it in the id map at once
        self.arg = signum

    @property
    def signum(self) -> int:
        """The signal number (the callback's second argument)."""
        return self.arg


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
        return owns_fd(self.stream, self.fd)
