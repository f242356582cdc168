"""asyncio on an iopoll ``Context``: a ``selectors`` selector, an event loop, and ``run()``.

Used the way uvloop is::

    import iopoll.aio

    iopoll.aio.run(main())
    # or, on Python 3.11+:
    with asyncio.Runner(loop_factory=iopoll.aio.new_event_loop) as runner:
        runner.run(main())

There is deliberately no ``install()`` and no event loop policy: asyncio's policy system is
deprecated from Python 3.14, and a loop factory is all asyncio needs.

``IoPollSelector`` keeps the semantics of the standard library selector of the same
mechanism (``EpollSelector``, ``PollSelector``, ``SelectSelector``), and is held to
CPython's own ``test.test_selectors``.  Every fd is handed to the ``Context`` as a plain
``int``: a selector is keyed by fd number, as the standard library's is, so a registration
outlives the object it was made with until ``unregister()``.
"""

from __future__ import annotations

import asyncio
import errno
import math
import selectors
import socket
import sys
from asyncio import selector_events
from collections.abc import Coroutine, Iterator, Mapping
from selectors import EVENT_READ, EVENT_WRITE, SelectorKey
from typing import Any, TypeVar

from _iopoll_core.errors import (
    FailedPollOperationError,
    InactiveWatcherError,
    PollError,
)
from _iopoll_core.events import ErrorCode, Event
from _iopoll_core.handles import MAX_FD
from _iopoll_core.watcher import Watcher

from ._native import Backend, Context

__all__ = ["IoPollSelector", "Loop", "new_event_loop", "run"]

_T = TypeVar("_T")
_FileObj = Any  # an int fd or an object with fileno(), as selectors takes

_VALID_EVENTS = EVENT_READ | EVENT_WRITE
# selectors' EVENT_READ/EVENT_WRITE have the bit values of Event.READ/Event.WRITE; a tuple
# lookup avoids building an IntFlag on every register/modify.
_TO_EVENT: tuple[Event, ...] = (Event(0), Event.READ, Event.WRITE, Event.READ | Event.WRITE)


def _fold(triggered: int) -> int:
    # What the standard library's poll-like selectors do: any bit but "in" wakes writers,
    # any bit but "out" wakes readers; so error and hang-up wake both directions.
    mask = 0
    if triggered & ~int(Event.READ):
        mask |= EVENT_WRITE
    if triggered & ~int(Event.WRITE):
        mask |= EVENT_READ
    return mask


# Triggered events (READ, WRITE, ERROR, HANGUP, ...) -> selectors mask, before "& key.events".
_FOLD: tuple[int, ...] = tuple(_fold(bits) for bits in range(256))


def _fileobj_to_fd(fileobj: _FileObj) -> int:
    """The fd of ``fileobj`` (an ``int`` or an object with ``fileno()``); ``ValueError`` if none."""
    if isinstance(fileobj, int):
        fd = int(fileobj)  # a bool is the fd it stands for, as selectors takes it
    else:
        try:
            fd = int(fileobj.fileno())
        except (AttributeError, TypeError, ValueError):
            raise ValueError(
                f"fileobj must be a file descriptor or an object with fileno(), not {fileobj!r}"
            ) from None
    if fd < 0:
        raise ValueError(f"fileobj has an invalid file descriptor: {fd}")
    return fd


def _closed(fileobj: _FileObj) -> bool:
    """Whether ``fileobj`` has no fd any more (a closed socket's is -1)."""
    try:
        _fileobj_to_fd(fileobj)
    except ValueError:
        return True
    return False


def _check_events(events: int) -> None:
    if not events or events & ~_VALID_EVENTS:
        raise ValueError(f"events must be EVENT_READ, EVENT_WRITE or both, not {events!r}")


def _as_os_error(exc: FailedPollOperationError) -> OSError | ValueError:
    """The plain ``OSError`` the standard library selector raises for the same failure.

    ``OSError(errno, ...)`` picks the errno's subclass (``PermissionError`` for EPERM).
    """
    if exc.errno is None:
        if exc.code == ErrorCode.TOOBIG:  # SELECT's FD_SETSIZE: select() itself says ValueError
            return ValueError(str(exc))
        return OSError(str(exc))
    return OSError(exc.errno, exc.strerror or str(exc))


def _fd_among(fd_to_key: dict[int, SelectorKey], fileobj: _FileObj) -> int:
    """The fd of ``fileobj``; a closed file object is found among the keys by identity."""
    try:
        return _fileobj_to_fd(fileobj)
    except ValueError:
        for key in fd_to_key.values():
            if key.fileobj is fileobj:
                return key.fd
        raise


class _SelectorMapping(Mapping[_FileObj, SelectorKey]):
    """The live, read-only view that ``get_map()`` returns: file object or fd -> key.

    It holds the selector's table, not the selector: a selector and its mapping holding
    each other would be a cycle, left for the collector when the loop is dropped.
    """

    __slots__ = ("_fd_to_key",)

    def __init__(self, fd_to_key: dict[int, SelectorKey]) -> None:
        self._fd_to_key = fd_to_key

    def __len__(self) -> int:
        return len(self._fd_to_key)

    def __getitem__(self, fileobj: _FileObj) -> SelectorKey:
        key = self._fd_to_key.get(_fd_among(self._fd_to_key, fileobj))
        if key is None:
            raise KeyError(f"{fileobj!r} is not registered")
        return key

    def get(self, fileobj: _FileObj, default: Any = None) -> Any:
        """The key of ``fileobj``, or ``default`` (asyncio calls this on every add_reader)."""
        fd_to_key = self._fd_to_key
        fd = fileobj if type(fileobj) is int else _fd_among(fd_to_key, fileobj)
        return fd_to_key.get(fd, default)

    def __iter__(self) -> Iterator[int]:
        return iter(self._fd_to_key)


class IoPollSelector(selectors.BaseSelector):
    """A ``selectors.BaseSelector`` on an iopoll ``Context``.

    ``IoPollSelector(backend=Backend.AUTO)``.  Errors are those of the standard library
    selector of the same mechanism: ``ValueError`` for a bad file object or events,
    ``KeyError`` for a duplicate or unknown registration, ``OSError`` (``EBADF``) for a
    closed fd on ``EPOLL``, ``PermissionError`` for a regular file on ``EPOLL`` (``POLL``
    and ``SELECT`` accept it, always ready).  Error and hang-up are reported as
    ``EVENT_READ``/``EVENT_WRITE``, masked by what was registered.  ``unregister()`` works
    after the fd was closed, and with its number reused.

    Differences, all on fds closed while registered: such an fd is reported at most once
    (``POLL``'s ``POLLNVAL``, ``SELECT``'s ``EBADF``) instead of on every ``select()``
    (``PollSelector``) or as an ``OSError`` from every ``select()`` (``SelectSelector``).
    On ``SELECT`` a fd at or above ``FD_SETSIZE`` is refused by ``register()`` with
    ``ValueError`` rather than by every later ``select()``, and an AF_UNIX peer's
    ``shutdown(SHUT_RDWR)`` wakes a writer (a hang-up, as ``PollSelector`` has it) where
    ``SelectSelector`` leaves it waiting.
    """

    def __init__(self, backend: Backend = Backend.AUTO) -> None:
        self._context = Context(backend)
        self._fd_to_key: dict[int, SelectorKey] = {}
        self._watchers: dict[int, Watcher] = {}
        self._map = _SelectorMapping(self._fd_to_key)
        self._closed = False
        # epoll, poll and WSAPoll take milliseconds: round up, so the wait lasts at least as
        # asked.
        self._round_up_to_ms = self._context.backend in (
            Backend.EPOLL,
            Backend.POLL,
            Backend.WSAPOLL,
        )

    @property
    def backend(self) -> Backend:
        """The concrete backend of the underlying ``Context`` (never ``AUTO``)."""
        return self._context.backend

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"{len(self._fd_to_key)} registered"
        return f"<{type(self).__name__} backend={self.backend.name} {state}>"

    # -- lookup -------------------------------------------------------------------------

    def _fileobj_lookup(self, fileobj: _FileObj) -> int:
        """The fd of ``fileobj``; a closed file object is found among the keys by identity."""
        return _fd_among(self._fd_to_key, fileobj)

    def _registered_fd(self, fileobj: _FileObj) -> int:
        fd = self._fileobj_lookup(fileobj)
        if fd not in self._fd_to_key:
            raise KeyError(f"{fileobj!r} is not registered")
        return fd

    # -- BaseSelector ------------------------------------------------------------------

    def register(self, fileobj: _FileObj, events: int, data: Any = None) -> SelectorKey:
        """Register ``fileobj`` for ``events`` (``EVENT_READ``, ``EVENT_WRITE`` or both)."""
        _check_events(events)
        # A closed object still registered is found by identity: "already registered"
        # (KeyError), as the stdlib says, rather than its invalid fd's ValueError.
        fd = self._fileobj_lookup(fileobj)
        if fd > MAX_FD:  # beyond a C int: no OS call takes it (the stdlib's OverflowError)
            raise ValueError(f"fileobj has an invalid file descriptor: {fd}")
        if self._closed:
            raise RuntimeError("Selector is closed")
        if fd in self._fd_to_key:
            raise KeyError(f"{fileobj!r} (FD {fd}) is already registered")
        key = SelectorKey(fileobj, fd, events, data)
        try:
            # The key is the watcher's data: select() finds it without a lookup.
            self._watchers[fd] = self._context.add(fd, _TO_EVENT[events], key)
        except FailedPollOperationError as exc:
            raise _as_os_error(exc) from exc
        self._fd_to_key[fd] = key
        return key

    def unregister(self, fileobj: _FileObj) -> SelectorKey:
        """Unregister ``fileobj`` and return its key; works after its fd was closed."""
        fd = self._registered_fd(fileobj)
        key = self._fd_to_key.pop(fd)
        watcher = self._watchers.pop(fd)
        try:
            watcher.remove()
        except InactiveWatcherError:
            pass  # already dropped by the Context (fd closed behind its back)
        except FailedPollOperationError as exc:
            if exc.code is not ErrorCode.PERMISSION:
                raise
            # After fork(), in the child: the OS object is the parent's as well, and the
            # key is forgotten without touching it (loop.close() in a child must not
            # unregister the parent's self-pipe, as the stdlib selectors do).
        return key

    def modify(self, fileobj: _FileObj, events: int, data: Any = None) -> SelectorKey:
        """Change what ``fileobj`` is registered for, and its data.

        A change of data alone, for the object registered, makes no system call; given
        another object with the same fd (a new file reusing the number of a closed one),
        the new file is registered.  If the backend refuses the new events, ``fileobj`` is
        unregistered and the error raised (as the standard library does).
        """
        fd = self._registered_fd(fileobj)
        key = self._fd_to_key[fd]
        # Another object for the key's number may be a new file that reuses it (asyncio's
        # add_reader after a close without remove_reader), which epoll and kqueue dropped
        # with the old one: the system call registers it again.
        same = fileobj is key.fileobj or (type(fileobj) is int and fileobj == key.fileobj)
        if events != key.events or not same:
            _check_events(events)
            if same and not isinstance(fileobj, int) and _closed(fileobj):
                # Closed while registered (asyncio's remove_reader() after close()): the
                # number may name another file now, which the new events must not watch.
                # The key is dropped and ENOENT raised, as the stdlib's EpollSelector does
                # (the kernel dropped the closed file's registration with it).
                self.unregister(fileobj)
                raise FileNotFoundError(
                    errno.ENOENT, f"{fileobj!r} was closed while registered (FD {fd})"
                )
            key = SelectorKey(key.fileobj, fd, events, data)
            try:
                self._watchers[fd].modify(_TO_EVENT[events], key)
            except InactiveWatcherError:
                self._rearm(key)
            except BaseException as exc:
                self.unregister(fileobj)
                if isinstance(exc, FailedPollOperationError):
                    raise _as_os_error(exc) from exc
                raise
        elif data is key.data:
            return key
        else:
            key = key._replace(data=data)
            try:
                self._watchers[fd].modify_data(key)
            except InactiveWatcherError:
                self._rearm(key)
        self._fd_to_key[fd] = key
        return key

    def _rearm(self, key: SelectorKey) -> None:
        # The Context dropped this fd (reported closed); register it afresh, or give up.
        fd = key.fd
        try:
            self._watchers[fd] = self._context.add(fd, _TO_EVENT[key.events], key)
        except FailedPollOperationError as exc:
            del self._fd_to_key[fd], self._watchers[fd]
            raise _as_os_error(exc) from exc

    def select(self, timeout: float | None = None) -> list[tuple[SelectorKey, int]]:
        """Wait for registered file objects to be ready, up to ``timeout`` seconds.

        ``None`` waits until one is; ``0`` or less polls.  Returns ``(key, events)`` pairs.
        A signal whose handler returns is retried with the remaining time (PEP 475).
        """
        ready = self._wait(timeout)
        if not ready:
            return []
        fold = _FOLD
        result: list[tuple[SelectorKey, int]] = []
        append = result.append
        for watcher in ready:
            # The engine's slots rather than the properties: this is asyncio's hot path.
            key: SelectorKey = watcher._data
            append((key, fold[watcher._triggered] & key.events))
        return result

    def _wait(self, timeout: float | None = None) -> list[Watcher]:
        """``select()``'s wait: the Context's ready watchers, each with its key as data."""
        if timeout is not None:
            if timeout <= 0:
                timeout = 0.0
            elif self._round_up_to_ms:
                timeout = math.ceil(timeout * 1e3) * 1e-3
            elif type(timeout) is bool:
                timeout = 1.0  # selectors takes True as 1; the Context refuses a bool
        try:
            return self._context.wait(timeout)
        except InterruptedError:
            return []  # a signal handler's own InterruptedError: the stdlib selectors' rule
        except FailedPollOperationError as exc:
            if exc.errno == errno.EINTR:
                return []
            raise _as_os_error(exc) from exc
        except PollError:
            raise RuntimeError("Selector is closed") from None

    def close(self) -> None:
        """Release the ``Context``; every key is forgotten.  Idempotent."""
        self._closed = True
        self._fd_to_key.clear()
        self._watchers.clear()
        self._context.close()

    def get_key(self, fileobj: _FileObj) -> SelectorKey:
        """The key ``fileobj`` is registered with; ``KeyError`` if it is not."""
        if self._closed:
            raise RuntimeError("Selector is closed")
        return self._map[fileobj]

    def get_map(self) -> Mapping[_FileObj, SelectorKey]:
        """A live, read-only mapping of file objects (or fds) to keys; ``None`` once closed.

        ``None`` is what every standard library selector returns after ``close()``; a
        mapping taken before stays, empty.
        """
        if self._closed:
            return None  # type: ignore[return-value]  # typeshed leaves out the stdlib's None
        return self._map


class _LoopSelector(IoPollSelector):
    """The selector a ``Loop`` makes for itself: ``select()`` returns the ready watchers.

    ``BaseEventLoop._run_once`` hands what ``select()`` returns straight to
    ``_process_events`` and nowhere else, so ``Loop`` reads the watchers itself and skips
    building a ``(key, events)`` pair and a second pass per ready fd.
    """

    select = IoPollSelector._wait  # type: ignore[assignment]


# Why the socket transport reads into a buffer of the loop's.
#
# asyncio's socket transport reads with ``sock.recv(256 KiB)``: a new 256 KiB bytes object
# per read, shrunk to what arrived.  glibc serves a request that size from mmap() or from
# the heap by a threshold it moves as the process frees memory, and a heap block at the
# top of the heap is given back to the kernel on free() by another one.  So, depending on
# what the process happened to allocate before, every read costs nothing extra, or an
# mmap()/munmap() pair and a page fault, or a brk() to grow and one to trim: measured here
# under uvicorn, 11 microseconds a recv() in one server process and 60 in the next, with
# the same code.  uvloop reads into one preallocated buffer and copies out what arrived;
# so does this transport: ``recv_into()`` the loop's buffer, then a bytes object of
# exactly the size read.  Protocols see the same bytes objects as before (a fresh one per
# read: keeping it is safe); buffered protocols and TLS take asyncio's other read path,
# which is unchanged.


# Private to asyncio, and not in typeshed: the class every SelectorEventLoop's sockets get.
_AsyncioSocketTransport: Any = selector_events._SelectorSocketTransport  # type: ignore[attr-defined]


class _SocketTransport(_AsyncioSocketTransport):  # type: ignore[misc]
    """asyncio's socket transport, reading into its loop's buffer (the note above), with
    Nagle's algorithm off on every TCP socket."""

    _loop: Loop

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        # asyncio turns Nagle off (TCP_NODELAY) only where sock.proto is IPPROTO_TCP, and
        # a socket made as socket(AF_INET, SOCK_STREAM) has proto 0 although it is TCP:
        # uvicorn's multi-worker listener is one (uvicorn issue 3149), and every response
        # written in two parts then waits for the client's delayed ACK, ~40 ms.  An MPTCP
        # socket (IPPROTO_MPTCP) is TCP too.  uvloop sets it on every TCP stream; so does
        # this loop.
        sock = self._sock
        if (sock.family in (socket.AF_INET, socket.AF_INET6) and sock.type == socket.SOCK_STREAM
                and sock.proto != socket.IPPROTO_TCP and hasattr(socket, "TCP_NODELAY")):
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass  # not a TCP socket after all, or already shut: asyncio's rule stands

    def _read_ready__data_received(self) -> None:
        # asyncio's method of the same name (identical in 3.10 to 3.13) but for recv_into.
        if self._conn_lost:
            return
        buffer = self._loop._read_buffer
        # Made with the first transport (never None here); the class attribute changed
        # since: asyncio's way.
        if buffer is None or self.max_size != len(buffer):
            super()._read_ready__data_received()
            return
        try:
            size = self._sock.recv_into(buffer)
        except (BlockingIOError, InterruptedError):
            return
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            self._fatal_error(exc, "Fatal read error on socket transport")
            return
        if not size:
            self._read_ready__on_eof()
            return
        try:
            self._protocol.data_received(buffer[:size].tobytes())
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            self._fatal_error(exc, "Fatal error: protocol.data_received() call failed.")


class Loop(asyncio.SelectorEventLoop):
    """An ``asyncio.SelectorEventLoop`` on an ``IoPollSelector`` (the default selector).

    Made without a selector, it makes its own, whose ``select()`` hands over the Context's
    ready watchers; ``_process_events`` dispatches those with asyncio's own checks, without
    a ``(key, events)`` pair per ready fd.  A selector given to it is used as asyncio uses
    any selector.  Its socket transports read into one buffer of the loop's (the note
    above ``_SocketTransport``).
    """

    def __init__(self, selector: selectors.BaseSelector | None = None) -> None:
        super().__init__(_LoopSelector() if selector is None else selector)
        # The read buffer of every socket transport of this loop: one loop, one thread,
        # and each read is copied out before the next can start.  Made with the first
        # transport: a loop that never has one (a thread's, a test's) costs no 256 KiB.
        self._read_buffer: memoryview | None = None

    def _make_socket_transport(
        self,
        sock: Any,
        protocol: asyncio.BaseProtocol,
        waiter: asyncio.Future[Any] | None = None,
        *,
        extra: dict[str, Any] | None = None,
        server: Any = None,
    ) -> asyncio.Transport:
        if sys.version_info >= (3, 12):
            self._ensure_fd_no_transport(sock)  # type: ignore[attr-defined]
        if self._read_buffer is None:
            self._read_buffer = memoryview(bytearray(_SocketTransport.max_size))
        return _SocketTransport(self, sock, protocol, waiter, extra, server)

    def _process_events(self, event_list: list[Any]) -> None:
        # asyncio's own _process_events, on watchers: the same checks in the same order.
        if type(self._selector) is not _LoopSelector:  # type: ignore[attr-defined]
            super()._process_events(event_list)  # type: ignore[misc]
            return
        add_ready = self._ready.append  # type: ignore[attr-defined]
        fold = _FOLD
        for watcher in event_list:
            key: SelectorKey = watcher._data
            mask = fold[watcher._triggered] & key.events
            reader, writer = key.data
            if mask & EVENT_READ and reader is not None:
                if reader._cancelled:
                    self._remove_reader(key.fileobj)  # type: ignore[attr-defined]
                else:
                    add_ready(reader)
            if mask & EVENT_WRITE and writer is not None:
                if writer._cancelled:
                    self._remove_writer(key.fileobj)  # type: ignore[attr-defined]
                else:
                    add_ready(writer)


def new_event_loop() -> Loop:
    """A new ``Loop`` on ``IoPollSelector(Backend.AUTO)``: a ``loop_factory`` for asyncio."""
    return Loop()


def run(main: Coroutine[Any, Any, _T], *, debug: bool | None = None) -> _T:
    """Run coroutine ``main`` on a new ``Loop`` and close it, as ``asyncio.run`` does.

    Tasks still pending when ``main`` returns are cancelled, async generators finalized and
    the default executor shut down.  ``debug`` sets the loop's debug mode.
    """
    if asyncio._get_running_loop() is not None:
        raise RuntimeError("iopoll.aio.run() cannot be called from a running event loop")
    if sys.version_info >= (3, 11):
        with asyncio.Runner(debug=debug, loop_factory=new_event_loop) as runner:
            return runner.run(main)
    return _run_without_runner(main, debug)


def _run_without_runner(main: Coroutine[Any, Any, _T], debug: bool | None) -> _T:
    # Python 3.10: asyncio.run has no loop_factory and asyncio.Runner does not exist yet;
    # this is asyncio.run's own sequence, on a Loop.
    if not asyncio.iscoroutine(main):
        raise ValueError(f"a coroutine was expected, got {main!r}")
    loop = new_event_loop()
    try:
        asyncio.set_event_loop(loop)
        if debug is not None:
            loop.set_debug(debug)
        return loop.run_until_complete(main)
    finally:
        try:
            _cancel_all_tasks(loop)
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.run_until_complete(loop.shutdown_default_executor())
        finally:
            asyncio.set_event_loop(None)
            loop.close()


def _cancel_all_tasks(loop: asyncio.AbstractEventLoop) -> None:
    tasks = asyncio.all_tasks(loop)
    if not tasks:
        return
    for task in tasks:
        task.cancel()
    loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
    for task in tasks:
        if task.cancelled():
            continue
        if task.exception() is not None:
            loop.call_exception_handler(
                {
                    "message": "unhandled exception during iopoll.aio.run() shutdown",
                    "exception": task.exception(),
                    "task": task,
                }
            )
