"""The columns of ``benchmarks.roundtrip``: one waiting layer each, set up over the sockets to
watch, and the loop a program would write on it (wait, then read from each socket reported).

A setup returns the column's drain (one wait, then a read of ``size`` bytes from every
socket reported readable) and the callable that releases its poller, or a string saying why
the cell is n/a here (``select()``'s ``FD_SETSIZE``, no ``ioctl``).
"""

from __future__ import annotations

import functools
import operator
import select
import selectors
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import iopoll
import iopoll_polyfill.fallback as polyfill

try:
    import fcntl
    import termios
except ImportError:  # Windows
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "BARE_EPOLL",
    "BARE_POLL",
    "BARE_SELECT",
    "COLUMNS",
    "EPOLL_PYTHON_FLOOR",
    "EPOLL_SELECTOR",
    "IOPOLL_EPOLL",
    "IOPOLL_POLL",
    "POLYFILL",
    "SELECT_FIONREAD",
    "SELECT_PYTHON_FLOOR",
    "Close",
    "Column",
    "Drain",
    "Setup",
]

FD_SETSIZE = polyfill.FD_SETSIZE

# Wait once, then read ``size`` bytes from every socket reported readable.
Drain = Callable[[int], None]
Close = Callable[[], None]
# A column's setup: given the sockets to watch (A, B, then the idle ones), its drain and the
# callable that releases the poller; or a string: why the cell is n/a.
Setup = Callable[[Sequence[socket.socket]], "tuple[Drain, Close] | str"]


@dataclass(frozen=True)
class Column:
    """One waiting layer of the table."""

    title: str
    setup: Setup


def _needs_fd_set(sockets: Sequence[socket.socket]) -> str | None:
    if max(sock.fileno() for sock in sockets) >= FD_SETSIZE:
        return "n/a (FD_SETSIZE)"
    return None


def _fd_drain(poll: Callable[[], list[tuple[int, int]]], sockets: Sequence[socket.socket]) -> Drain:
    by_fd = {sock.fileno(): sock for sock in sockets}

    def drain(size: int) -> None:
        for fd, _ in poll():
            by_fd[fd].recv(size)

    return drain


def _bare(name: str, flag: str) -> Setup:
    """A column for ``select.<name>()`` used directly, registering each socket for ``flag``."""

    def setup(sockets: Sequence[socket.socket]) -> tuple[Drain, Close] | str:
        if not hasattr(select, name):
            return f"n/a (no {name})"
        poller = getattr(select, name)()
        for sock in sockets:
            poller.register(sock.fileno(), getattr(select, flag))
        return _fd_drain(poller.poll, sockets), getattr(poller, "close", lambda: None)

    return setup


def _bare_select(sockets: Sequence[socket.socket]) -> tuple[Drain, Close] | str:
    refusal = _needs_fd_set(sockets)
    if refusal:
        return refusal
    fds = [sock.fileno() for sock in sockets]
    by_fd = {sock.fileno(): sock for sock in sockets}
    wait = functools.partial(select.select, fds, (), ())

    def drain(size: int) -> None:
        for fd in wait()[0]:
            by_fd[fd].recv(size)

    return drain, lambda: None


def _needs_fionread(sockets: Sequence[socket.socket]) -> str | None:
    """Why the select() columns with FIONREAD cannot run here, or None."""
    return _needs_fd_set(sockets) or ("n/a (no ioctl)" if fcntl is None else None)


def _select_with_fionread(sockets: Sequence[socket.socket]) -> tuple[Drain, Close] | str:
    # The bare select loop plus the one FIONREAD per readable fd that SPEC 7's hang-up rule
    # needs (bytes waiting, or end of file?): the least any conforming polyfill can cost.
    refusal = _needs_fionread(sockets)
    if refusal:
        return refusal
    fds = [sock.fileno() for sock in sockets]
    by_fd = {sock.fileno(): sock for sock in sockets}
    wait = functools.partial(select.select, fds, (), ())
    ioctl, fionread = fcntl.ioctl, termios.FIONREAD
    count = bytearray(4)
    no_bytes = bytes(4)

    def drain(size: int) -> None:
        for fd in wait()[0]:
            ioctl(fd, fionread, count)
            if count == no_bytes:
                raise AssertionError(f"fd {fd} reported readable at end of file")
            by_fd[fd].recv(size)

    return drain, lambda: None


class _Record:
    """The least a watcher can be: what the Python floor columns read and write."""

    __slots__ = ("_data", "_probe", "_oneshot", "_triggered")

    def __init__(self, sock: socket.socket) -> None:
        self._data = sock
        self._probe = sock.fileno
        self._oneshot = False
        self._triggered = 0

    # The cheapest read-only attribute pure Python has (the engine's Watcher.data is this).
    data = property(operator.attrgetter("_data"))


def _epoll_python_floor(sockets: Sequence[socket.socket]) -> tuple[Drain, Close] | str:
    # epoll behind the least a pure-Python Context must do per report (SPEC 6.8's fileno
    # probe, the one-shot check, decoding, one list entry) and per call (a method call):
    # what the 0.90x target leaves room for, measured in the same run.
    if not hasattr(select, "epoll"):
        return "n/a (no epoll)"
    epoll = select.epoll()
    records = {}
    for sock in sockets:
        epoll.register(sock.fileno(), select.EPOLLIN)
        records[sock.fileno()] = _Record(sock)
    decode = {select.EPOLLIN: 1}

    class Floor:
        def wait(self) -> list[_Record]:
            ready = []
            for fd, bits in epoll.poll(-1, len(records)):
                record = records[fd]
                if record._oneshot or record._probe() != fd:
                    raise AssertionError("the floor loop has no general path")
                record._triggered = decode[bits]
                ready.append(record)
            return ready

    return _context_drain(Floor().wait), epoll.close


def _select_python_floor(sockets: Sequence[socket.socket]) -> tuple[Drain, Close] | str:
    # select() and its FIONREAD behind the same least per report as the epoll floor: the
    # least any pure-Python polyfill does per wait, which the polyfill is read against.
    refusal = _needs_fionread(sockets)
    if refusal:
        return refusal
    fds = [sock.fileno() for sock in sockets]
    records = {sock.fileno(): _Record(sock) for sock in sockets}
    ioctl, fionread = fcntl.ioctl, termios.FIONREAD
    count = bytearray(4)
    no_bytes = bytes(4)

    class Floor:
        def wait(self) -> list[_Record]:
            ready = []
            for fd in select.select(fds, (), (), None)[0]:
                ioctl(fd, fionread, count)
                record = records[fd]
                if count == no_bytes or record._oneshot or record._probe() != fd:
                    raise AssertionError("the floor loop has no general path")
                record._triggered = 1
                ready.append(record)
            return ready

    return _context_drain(Floor().wait), lambda: None


def _epoll_selector(sockets: Sequence[socket.socket]) -> tuple[Drain, Close] | str:
    if not hasattr(selectors, "EpollSelector"):
        return "n/a (no epoll)"
    selector = selectors.EpollSelector()
    for sock in sockets:
        selector.register(sock, selectors.EVENT_READ)
    wait = selector.select

    def drain(size: int) -> None:
        for key, _ in wait():
            key.fileobj.recv(size)  # type: ignore[union-attr]

    return drain, selector.close


def _context_drain(wait: Callable[[], Sequence[iopoll.Watcher | _Record]]) -> Drain:
    """Wait, then read from each reported watcher's (or floor record's) socket."""

    def drain(size: int) -> None:
        for watcher in wait():
            watcher.data.recv(size)

    return drain


def _iopoll(backend_name: str) -> Setup:
    def setup(sockets: Sequence[socket.socket]) -> tuple[Drain, Close] | str:
        backend = iopoll.Backend[backend_name]
        if not backend.is_available():
            return "n/a (unavailable)"
        if backend is iopoll.Backend.SELECT:
            refusal = _needs_fd_set(sockets)
            if refusal:
                return refusal
        context = iopoll.Context(backend)
        for sock in sockets:
            context.add(sock, iopoll.Event.READ, data=sock)
        return _context_drain(context.wait), context.close

    return setup


def _polyfill(sockets: Sequence[socket.socket]) -> tuple[Drain, Close] | str:
    refusal = _needs_fd_set(sockets)
    if refusal:
        return refusal
    context = polyfill.Context()
    for sock in sockets:
        context.add(sock, polyfill.Event.READ, data=sock)
    return _context_drain(context.wait), context.close


BARE_EPOLL = "select.epoll"
BARE_SELECT = "select.select"
SELECT_FIONREAD = "select + FIONREAD"
EPOLL_SELECTOR = "selectors.EpollSelector"
BARE_POLL = "select.poll"
IOPOLL_POLL = "iopoll POLL"
IOPOLL_EPOLL = "iopoll EPOLL"
EPOLL_PYTHON_FLOOR = "epoll + Python floor"
SELECT_PYTHON_FLOOR = "select + Python floor"
POLYFILL = "polyfill"

COLUMNS: tuple[Column, ...] = (
    Column(BARE_EPOLL, _bare("epoll", "EPOLLIN")),
    Column(BARE_POLL, _bare("poll", "POLLIN")),
    Column(BARE_SELECT, _bare_select),
    Column(SELECT_FIONREAD, _select_with_fionread),
    Column(SELECT_PYTHON_FLOOR, _select_python_floor),
    Column(EPOLL_SELECTOR, _epoll_selector),
    Column(EPOLL_PYTHON_FLOOR, _epoll_python_floor),
    Column(IOPOLL_EPOLL, _iopoll("EPOLL")),
    Column(IOPOLL_POLL, _iopoll("POLL")),
    Column("iopoll SELECT", _iopoll("SELECT")),
    Column(POLYFILL, _polyfill),
)
