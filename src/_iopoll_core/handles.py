"""Handles: what a ``Context`` watches."""

from __future__ import annotations

import abc
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar, NoReturn, Protocol, TypeGuard, runtime_checkable

from .events import NO_EVENTS, Event

if TYPE_CHECKING:
    from .watcher import Watcher

__all__ = [
    "Handle",
    "StreamPollHandle",
    "WeakHandle",
    "StreamPollWeakHandle",
    "HasFileno",
    "has_fileno",
    "MAX_FD",
    "NOT_FDS",
    "fd_probe",
]

# The largest fd number an OS call takes (a C int).
MAX_FD = 2**31 - 1
# ints never taken for an fd: a flag, or an Event given in the handle's place (add(READ, s)).
NOT_FDS = (bool, Event)


@runtime_checkable
class HasFileno(Protocol):
    """Anything with a ``fileno()`` method: sockets, files, pipes, ``ssl.SSLSocket``."""

    def fileno(self) -> int: ...


def has_fileno(stream: object) -> TypeGuard[HasFileno]:
    """Whether ``stream`` has a ``fileno`` to call, answered by one ``getattr``.

    For a protocol whose members are all methods, ``isinstance(stream, HasFileno)`` asks
    whether the attribute is there and not ``None``; on CPython 3.10 and 3.11 it walks the
    protocol's members and the class's MRO to find out, about 10 us, which every ``add()``
    of a socket paid twice.  Two differences: 3.12's ``isinstance()`` looks the attribute up
    statically, so it refuses an object that gets ``fileno`` from ``__getattr__`` (a proxy);
    this takes it, as 3.10 and 3.11 do.  And a ``fileno`` that is not callable (a number)
    is refused here, where the call would fail later with a message naming no argument.
    """
    return callable(getattr(stream, "fileno", None))


class _Uncopyable:
    """Handles, watchers and contexts stand for OS state that a copy cannot share."""

    __slots__ = ()

    def __copy__(self) -> NoReturn:
        raise TypeError(f"cannot copy {type(self).__name__} objects")

    def __deepcopy__(self, memo: object) -> NoReturn:
        raise TypeError(f"cannot copy {type(self).__name__} objects")

    def __reduce_ex__(self, protocol: object) -> NoReturn:
        raise TypeError(f"cannot pickle {type(self).__name__} objects")


class Handle(_Uncopyable, abc.ABC):
    """Something with a file descriptor that a ``Context`` can watch.

    Subclass it and implement ``fileno()`` to watch your own objects.  A ``fileno()`` that
    raises ``OSError`` or ``ValueError``, or returns a negative number, marks the handle
    invalid: ``add`` refuses it, and a watcher whose handle stops answering with the fd it
    was added with is retired.
    """

    __slots__ = ("__weakref__",)

    # The one event a handle that is not a stream reports (SourceHandle's subclasses say
    # which); none for a stream, whose watchers report what they ask for.
    _event: ClassVar[Event] = NO_EVENTS

    @abc.abstractmethod
    def fileno(self) -> int:
        """The file descriptor to watch."""


class StreamPollHandle(Handle):
    """A handle on a stream object (anything with ``fileno()``) or on a raw ``int`` fd.

    It keeps the stream alive.  Closing the stream retires its watchers; a raw ``int`` fd
    cannot be watched for closing, so remove its watcher before you close the fd.
    """

    __slots__ = ("_stream", "_fileno")

    _stream: HasFileno | int
    _fileno: Callable[[], int]

    def __init__(self, stream: HasFileno | int) -> None:
        if hasattr(self, "_stream"):
            # A watcher keeps the fd probe it was added with: the stream cannot change.
            raise TypeError("StreamPollHandle.__init__ cannot be called twice")
        if isinstance(stream, NOT_FDS) or not (isinstance(stream, int) or has_fileno(stream)):
            raise TypeError(
                "stream must be an object with fileno() or an int file descriptor, "
                f"not {type(stream).__name__}"
            )
        if isinstance(stream, int) and stream < 0:
            raise ValueError(f"stream must be a file descriptor >= 0, not {stream}")
        self._hold(stream)

    @classmethod
    def _of_checked(cls, stream: HasFileno | int) -> StreamPollHandle:
        """The handle ``add()`` wraps a stream in once it has made ``__init__``'s checks."""
        handle = cls.__new__(cls)
        handle._hold(stream)
        return handle

    def _hold(self, stream: HasFileno | int) -> None:
        """Keep ``stream`` and the probe its fd is read with: an int's own, or ``fileno``."""
        self._fileno = stream.__index__ if isinstance(stream, int) else stream.fileno
        self._stream = stream

    @property
    def stream(self) -> HasFileno | int:
        """The stream (or ``int`` fd) this handle was made with, closed or not."""
        return self._stream

    def fileno(self) -> int:
        """The stream's current fd (-1 or an exception once it is closed)."""
        return self._fileno()

    def is_valid(self) -> bool:
        """False once the stream is closed."""
        try:
            fd = self._fileno()
        except (OSError, ValueError):
            return False
        if type(fd) is not int:  # a broken fileno(): no usable fd
            return False
        return fd >= 0 and not getattr(self._stream, "closed", False)

    def __repr__(self) -> str:
        return f"<StreamPollHandle stream={self._stream!r}>"


class WeakHandle(Handle):
    """A handle that holds its object weakly: its watchers do not keep the object alive.

    When the object is garbage collected, the handle becomes invalid and its watchers leave
    every context, at that context's next ``wait()`` (which reports them to
    ``Context.on_watcher_removed``).  Subclasses call ``WeakHandle.__init__(self, obj)`` and
    implement ``fileno()``, raising once ``self._object()`` is None.
    """

    __slots__ = ("_object", "_watchers")

    _object: weakref.ReferenceType[Any]
    # Every watcher of this handle, in any context, so that its loss reaches them all.
    _watchers: weakref.WeakSet[Watcher]

    def __init__(self, obj: object) -> None:
        if hasattr(self, "_object"):
            raise TypeError(f"{type(self).__name__}.__init__ cannot be called twice")
        try:
            self._object = weakref.ref(obj, self._collected)
        except TypeError:
            raise TypeError(
                f"a {type(self).__name__} needs an object that can be weakly referenced, "
                f"not {type(obj).__name__}"
            ) from None
        self._watchers = weakref.WeakSet()

    def is_valid(self) -> bool:
        """False once the object was collected, or once ``fileno()`` no longer answers."""
        if self._object() is None:
            return False
        try:
            fd = self.fileno()
        except (OSError, ValueError):
            return False
        return type(fd) is int and fd >= 0

    def _collected(self, ref: object) -> None:
        # Called by the garbage collector: only queue the loss; the contexts act on it
        # at their next wait() (SPEC 10: never a user callback from the collector).
        for watcher in list(self._watchers):
            context = watcher._context()
            if context is not None:
                context._lose(watcher)


class StreamPollWeakHandle(WeakHandle):
    """A weak handle on a stream: ``StreamPollWeakHandle.create(stream)``.

    There is one handle per stream (``create`` returns the same object for the same stream).
    ``stream`` is the stream, or None once it was collected; ``is_valid()`` is false once
    the stream is closed or collected.
    """

    __slots__ = ("_key",)

    # One handle per live stream, by identity (a WeakKeyDictionary would match two equal
    # streams, and refuse an unhashable one): id(stream) -> its handle, whose entry goes
    # when the stream is collected (_collected), before another object can have its id.
    _made: ClassVar[dict[int, StreamPollWeakHandle]] = {}
    _key: int

    def __init__(self, *args: object, **kwargs: object) -> None:
        raise TypeError("StreamPollWeakHandle objects are made by StreamPollWeakHandle.create()")

    @classmethod
    def create(cls, stream: HasFileno) -> StreamPollWeakHandle:
        """The weak handle of ``stream`` (an object with ``fileno()``), made once per stream."""
        if isinstance(stream, (bool, int)) or not has_fileno(stream):
            raise TypeError(
                f"stream must be an object with fileno(), not {type(stream).__name__}"
            )
        key = id(stream)
        handle = cls._made.get(key)
        if handle is not None and handle._object() is stream:
            return handle
        handle = cls.__new__(cls)
        try:
            WeakHandle.__init__(handle, stream)
        except TypeError:
            raise TypeError(
                f"stream must be weakly referenceable, not {type(stream).__name__}"
            ) from None
        handle._key = key
        cls._made[key] = handle
        return handle

    def _collected(self, ref: object) -> None:
        if self._made.get(self._key) is self:
            del self._made[self._key]
        super()._collected(ref)

    @property
    def stream(self) -> HasFileno | None:
        """The stream, or None once it was garbage collected."""
        stream: HasFileno | None = self._object()
        return stream

    def fileno(self) -> int:
        """The stream's current fd; raises ``ValueError`` once the stream was collected."""
        stream = self._object()
        if stream is None:
            raise ValueError("the stream of this weak handle was garbage collected")
        fd: int = stream.fileno()
        return fd

    def is_valid(self) -> bool:
        """False once the stream is closed or collected."""
        stream = self._object()
        if stream is None:
            return False
        try:
            fd = stream.fileno()
        except (OSError, ValueError):
            return False
        return type(fd) is int and fd >= 0 and not getattr(stream, "closed", False)

    def __repr__(self) -> str:
        return f"<StreamPollWeakHandle stream={self._object()!r}>"


def fd_probe(handle: Handle) -> Callable[[], int]:
    """The cheapest callable that returns the handle's current fd (raising once closed).

    ``wait()`` calls it for every watcher it reports, so for a ``StreamPollHandle`` it is
    the stream's own bound ``fileno`` rather than a second layer of Python calls.
    """
    if type(handle) is StreamPollHandle:
        return handle._fileno
    return handle.fileno
