"""Handles: what a ``Context`` watches."""

from __future__ import annotations

import abc
from collections.abc import Callable
from typing import NoReturn, Protocol, runtime_checkable

__all__ = ["Handle", "StreamPollHandle", "HasFileno", "MAX_FD", "fd_probe"]

# The largest fd number an OS call takes (a C int).
MAX_FD = 2**31 - 1


@runtime_checkable
class HasFileno(Protocol):
    """Anything with a ``fileno()`` method: sockets, files, pipes, ``ssl.SSLSocket``."""

    def fileno(self) -> int: ...


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
        if isinstance(stream, bool) or not isinstance(stream, (int, HasFileno)):
            raise TypeError(
                "stream must be an object with fileno() or an int file descriptor, "
                f"not {type(stream).__name__}"
            )
        if isinstance(stream, int):
            if stream < 0:
                raise ValueError(f"stream must be a file descriptor >= 0, not {stream}")
            self._fileno = stream.__index__
        else:
            self._fileno = stream.fileno
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


def fd_probe(handle: Handle) -> Callable[[], int]:
    """The cheapest callable that returns the handle's current fd (raising once closed).

    ``wait()`` calls it for every watcher it reports, so for a ``StreamPollHandle`` it is
    the stream's own bound ``fileno`` rather than a second layer of Python calls.
    """
    if type(handle) is StreamPollHandle:
        return handle._fileno
    return handle.fileno
