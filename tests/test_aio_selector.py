"""``IoPollSelector`` against the standard library selector of the same mechanism.

Where the two must agree, the stdlib selector is run on the same scenario as the oracle.
"""

from __future__ import annotations

import errno
import gc
import os
import selectors
import signal
import socket
import tempfile
import time
import weakref
from collections.abc import Callable, Iterator

import pytest

from fd_limit import raised_fd_limit
from iopoll import Backend
from iopoll.aio import IoPollSelector
from iopoll_conformance.streams import fill
from iopoll_conformance.support import socketpair, tcp_pair

R, W = selectors.EVENT_READ, selectors.EVENT_WRITE

_STDLIB = {
    Backend.EPOLL: getattr(selectors, "EpollSelector", None),
    Backend.POLL: getattr(selectors, "PollSelector", None),
    Backend.KQUEUE: getattr(selectors, "KqueueSelector", None),
    Backend.SELECT: selectors.SelectSelector,
}
BACKENDS = [b for b in Backend.available_backends() if _STDLIB.get(b) is not None]


@pytest.fixture(params=BACKENDS, ids=lambda b: b.name)
def backend(request: pytest.FixtureRequest) -> Backend:
    return request.param  # type: ignore[no-any-return]


@pytest.fixture
def selector(backend: Backend) -> Iterator[IoPollSelector]:
    with IoPollSelector(backend) as sel:
        yield sel


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    a, b = socket.socketpair()
    yield a, b
    a.close()
    b.close()


def both(backend: Backend) -> list[selectors.BaseSelector]:
    """Ours and the stdlib's selector of the same mechanism."""
    stdlib = _STDLIB[backend]
    assert stdlib is not None
    return [IoPollSelector(backend), stdlib()]


def same_on_both(backend: Backend, scenario: Callable[[selectors.BaseSelector], object]) -> object:
    """Run ``scenario`` on ours and on the stdlib selector; assert equal results; return it."""
    results = []
    for sel in both(backend):
        with sel:
            results.append(scenario(sel))
    assert results[0] == results[1], f"iopoll {results[0]!r} != stdlib {results[1]!r}"
    return results[0]


# -- event mapping ---------------------------------------------------------------------


def test_read_and_write_readiness(backend: Backend) -> None:
    def scenario(sel: selectors.BaseSelector) -> object:
        a, b = socket.socketpair()
        with a, b:
            sel.register(a, R | W, "a")
            first = [(k.data, e) for k, e in sel.select(0)]
            b.send(b"x")
            time.sleep(0.01)
            return first, [(k.data, e) for k, e in sel.select(0)]

    assert same_on_both(backend, scenario) == ([("a", W)], [("a", R | W)])


def test_hangup_is_folded_into_registered_events(backend: Backend) -> None:
    # Peer closed with unread data: a writer sees EVENT_WRITE, a reader EVENT_READ; never
    # a bit that was not registered.
    def scenario(sel: selectors.BaseSelector) -> object:
        a, b = socket.socketpair()
        c, d = socket.socketpair()
        with a, c:
            a.send(b"unread")
            c.send(b"unread")
            b.close()
            d.close()
            sel.register(a, W)
            sel.register(c, R)
            time.sleep(0.01)
            return sorted(events for _, events in sel.select(0))

    assert same_on_both(backend, scenario) == [R, W]


def _full_pair(family: str) -> tuple[socket.socket, socket.socket]:
    """A connected non-blocking pair whose first end cannot take another byte."""
    a, b = socketpair() if family == "unix" else tcp_pair()
    fill(a)
    return a, b


@pytest.mark.parametrize("family", ["unix", "tcp"])
@pytest.mark.parametrize("how", ["SHUT_RD", "SHUT_WR", "SHUT_RDWR", "close"])
def test_a_full_socket_whose_peer_shuts_down_wakes_writers_as_stdlib(
    backend: Backend, family: str, how: str
) -> None:
    # On SELECT the Context reported a peer's end of file as HANGUP (SPEC 7), where
    # SelectSelector wakes a writer only for select()'s write set: folding that HANGUP
    # into EVENT_WRITE woke a writer on a full socket at every select() (asyncio spun).
    # One difference is kept: an AF_UNIX peer's SHUT_RDWR is a hang-up (poll's POLLHUP),
    # which wakes the writer (its next send fails with EPIPE); SelectSelector never does.
    def scenario(sel: selectors.BaseSelector) -> object:
        a, b = _full_pair(family)
        with a, b:
            if how == "close":
                b.close()
            else:
                b.shutdown(getattr(socket, how))
            sel.register(a, W)
            time.sleep(0.01)
            return [events for _, events in sel.select(0)]

    if backend is Backend.SELECT and family == "unix" and how == "SHUT_RDWR":
        with IoPollSelector(backend) as sel:
            assert scenario(sel) == [W]
    else:
        same_on_both(backend, scenario)


def test_pipe_hangup_wakes_reader(backend: Backend) -> None:
    def scenario(sel: selectors.BaseSelector) -> object:
        r, w = os.pipe()
        try:
            sel.register(r, R)
            before = sel.select(0)
            os.close(w)
            return before, [events for _, events in sel.select(0)]
        finally:
            os.close(r)

    assert same_on_both(backend, scenario) == ([], [R])


# -- errors ----------------------------------------------------------------------------


class _NoFileno:
    pass


class _BadFileno:
    def fileno(self) -> int:
        raise ValueError("no fd")


@pytest.mark.parametrize("fileobj", [_NoFileno(), _BadFileno(), -1, "3"], ids=repr)
def test_bad_fileobj_is_value_error(selector: IoPollSelector, fileobj: object) -> None:
    with pytest.raises(ValueError, match="fileobj"):
        selector.register(fileobj, R)
    assert len(selector.get_map()) == 0


def test_closed_socket_is_value_error(selector: IoPollSelector) -> None:
    s = socket.socket()
    s.close()
    with pytest.raises(ValueError, match="fileobj"):
        selector.register(s, R)


@pytest.mark.parametrize("events", [0, 4, -1, R | W | 8])
def test_bad_events_is_value_error(
    selector: IoPollSelector, pair: tuple[socket.socket, socket.socket], events: int
) -> None:
    with pytest.raises(ValueError, match="events"):
        selector.register(pair[0], events)
    selector.register(pair[0], R)
    with pytest.raises(ValueError, match="events"):
        selector.modify(pair[0], events)
    assert selector.get_key(pair[0]).events == R  # a refused modify changes nothing


def test_duplicate_is_key_error(
    selector: IoPollSelector, pair: tuple[socket.socket, socket.socket]
) -> None:
    selector.register(pair[0], R)
    with pytest.raises(KeyError):
        selector.register(pair[0], W)
    with pytest.raises(KeyError):
        selector.register(pair[0].fileno(), W)
    dup = os.dup(pair[0].fileno())  # a dup is another fd: accepted, as by the stdlib
    try:
        selector.register(dup, W)
        assert {key.fd for key in selector.get_map().values()} == {pair[0].fileno(), dup}
        selector.unregister(dup)
    finally:
        os.close(dup)


def test_closed_fd_register(backend: Backend) -> None:
    # EPOLL: OSError(EBADF) and no key left; POLL and SELECT accept it, like theirs.
    def scenario(sel: selectors.BaseSelector) -> object:
        r, w = os.pipe()
        os.close(r)
        os.close(w)
        try:
            sel.register(r, R)
        except OSError as exc:
            return ("refused", exc.errno, r in sel.get_map())
        sel.unregister(r)
        return ("accepted",)

    result = same_on_both(backend, scenario)
    if backend in (Backend.EPOLL, Backend.KQUEUE):
        assert result == ("refused", errno.EBADF, False)
    else:
        assert result == ("accepted",)


def test_regular_file(backend: Backend) -> None:
    # EPOLL refuses it with PermissionError (EPERM); POLL and SELECT report it ready.
    def scenario(sel: selectors.BaseSelector) -> object:
        with tempfile.TemporaryFile() as f:
            try:
                sel.register(f, R | W)
            except OSError as exc:
                return (type(exc).__name__, exc.errno, f in sel.get_map())
            return [events for _, events in sel.select(0)]

    result = same_on_both(backend, scenario)
    if backend is Backend.EPOLL:
        assert result == ("PermissionError", errno.EPERM, False)
    else:
        assert result == [R | W]


def test_failed_modify_unregisters(backend: Backend) -> None:
    # bpo-30014 (stdlib test_modify_unregister): a modify() the OS refuses drops the key.
    if backend is not Backend.EPOLL:
        pytest.skip("only epoll refuses a modify() of a closed fd")

    def scenario(sel: selectors.BaseSelector) -> object:
        a, b = socket.socketpair()
        fd = a.fileno()
        sel.register(fd, R)
        a.close()
        b.close()
        with pytest.raises(OSError) as info:
            sel.modify(fd, W)
        return info.value.errno, len(sel.get_map())

    assert same_on_both(backend, scenario) == (errno.EBADF, 0)


def test_select_above_fd_setsize_is_refused_at_register() -> None:
    fds: list[int] = []
    with raised_fd_limit(1100):
        try:
            while not fds or fds[-1] < 1024:
                fds.append(os.open(os.devnull, os.O_RDONLY))
            with IoPollSelector(Backend.SELECT) as sel:
                with pytest.raises(ValueError, match="FD_SETSIZE"):
                    sel.register(fds[-1], R)
                assert len(sel.get_map()) == 0
        finally:
            for fd in fds:
                os.close(fd)


# -- bookkeeping -----------------------------------------------------------------------


def test_modify_data_only_and_events(
    selector: IoPollSelector, pair: tuple[socket.socket, socket.socket]
) -> None:
    a, b = pair
    d1, d2 = object(), object()
    key = selector.register(a, R, d1)
    assert selector.modify(a, R, d1) is key  # nothing changed: the same key
    key2 = selector.modify(a, R, d2)
    assert (key2.events, key2.data) == (R, d2)
    key3 = selector.modify(a.fileno(), W, d2)  # by fd, as asyncio does
    assert key3.fileobj is a and selector.get_key(a) == key3
    assert selector.select(0) == [(key3, W)]
    b.send(b"x")
    selector.modify(a, R | W, "both")
    assert selector.select(1) == [(selector.get_key(a), R | W)]


def test_get_map_is_live_and_read_only(
    selector: IoPollSelector, pair: tuple[socket.socket, socket.socket]
) -> None:
    mapping = selector.get_map()
    assert len(mapping) == 0
    key = selector.register(pair[0], R)
    assert mapping[pair[0]] is key and mapping[pair[0].fileno()] is key
    assert mapping.get(pair[1]) is None and list(mapping) == [pair[0].fileno()]
    with pytest.raises(TypeError):
        mapping[pair[1]] = key  # type: ignore[index]
    selector.close()
    assert len(mapping) == 0 and mapping.get(pair[0]) is None
    assert selector.get_map() is None  # every stdlib selector's answer once closed


@pytest.mark.parametrize("closed", [True, False])
def test_a_dropped_selector_is_freed_without_the_collector(
    backend: Backend, pair: tuple[socket.socket, socket.socket], closed: bool
) -> None:
    # As the stdlib's: no cycle between the selector and its get_map() view, so the last
    # reference frees it (and its Context) at once, with the collector off.
    sel = IoPollSelector(backend)
    sel.register(pair[0], R, "data")
    assert len(sel.get_map()) == 1
    freed = weakref.ref(sel)
    if closed:
        sel.close()
    enabled = gc.isenabled()
    gc.disable()
    try:
        del sel
        assert freed() is None
    finally:
        if enabled:
            gc.enable()


def test_closed_selector(backend: Backend, pair: tuple[socket.socket, socket.socket]) -> None:
    sel = IoPollSelector(backend)
    sel.close()
    sel.close()  # idempotent
    with pytest.raises(RuntimeError):
        sel.register(pair[0], R)
    with pytest.raises(RuntimeError):
        sel.select(0)
    with pytest.raises(RuntimeError):
        sel.get_key(pair[0])


def test_register_again_after_close_is_key_error(backend: Backend) -> None:
    # The stdlib finds a closed object among the keys by identity, and says it is already
    # registered; an unregistered closed object has no fd: ValueError.
    def scenario(sel: selectors.BaseSelector) -> object:
        a, b = socket.socketpair()
        sel.register(a, R)
        a.close()
        b.close()
        with pytest.raises(KeyError):
            sel.register(a, W)
        c, d = socket.socketpair()
        c.close()
        d.close()
        with pytest.raises(ValueError):
            sel.register(c, R)
        return len(sel.get_map())

    assert same_on_both(backend, scenario) == 1


def test_unregister_after_close_finds_fileobj(selector: IoPollSelector) -> None:
    a, b = socket.socketpair()
    key = selector.register(a, R, "data")
    a.close()
    b.close()
    assert selector.unregister(a) is key  # fileno() is -1 now: found by identity
    with pytest.raises(ValueError):  # not found, and no fd to look up: as the stdlib
        selector.unregister(a)


def test_fd_number_reuse(selector: IoPollSelector) -> None:
    # asyncio's pattern after a socket was closed without remove_reader: the stale key is
    # found by fd, modified for the new socket, and the new socket is the one reported.
    a, b = socket.socketpair()
    fd = a.fileno()
    selector.register(fd, R, "old")
    a.close()
    b.close()
    c, d = socket.socketpair()  # the lowest free numbers: the old ones
    with c, d:
        new, peer = (c, d) if c.fileno() == fd else (d, c)
        assert new.fileno() == fd
        peer.send(b"for the new socket")
        stale = selector.get_map().get(fd)
        assert stale is not None and stale.data == "old"
        selector.modify(fd, R | W, "new")
        ready = selector.select(1)
        assert [(key.data, events) for key, events in ready] == [("new", R | W)]
        assert new.recv(100) == b"for the new socket"
        selector.unregister(fd)
        selector.register(new, R, "again")
        peer.send(b"x")
        assert [(k.data, e) for k, e in selector.select(1)] == [("again", R)]
        selector.unregister(new)


@pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="no setitimer here")
def test_a_signal_handler_raising_interrupted_error_ends_select_empty(backend: Backend) -> None:
    # The stdlib selectors catch InterruptedError around the OS wait and return what they
    # have: a handler that raises it ends select() with nothing, as with them.
    def handler(signum: int, frame: object) -> None:
        raise InterruptedError(errno.EINTR, "from the handler")

    def scenario(sel: selectors.BaseSelector) -> object:
        a, b = socket.socketpair()
        with a, b:
            sel.register(a, R)
            signal.setitimer(signal.ITIMER_REAL, 0.05)
            try:
                return sel.select(5)
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)

    previous = signal.signal(signal.SIGALRM, handler)
    try:
        assert same_on_both(backend, scenario) == []
    finally:
        signal.signal(signal.SIGALRM, previous)


def test_a_new_mask_for_an_object_closed_while_registered_is_refused(backend: Backend) -> None:
    # asyncio's remove_reader(sock) after sock.close(), with a writer still registered: a
    # modify() through the closed object.  Its number names an unrelated socket now, which
    # the remaining events used to be registered for (the writer then ran for that socket);
    # the key is dropped with ENOENT, as the stdlib's EpollSelector does.
    def scenario(sel: selectors.BaseSelector) -> object:
        a, b = socket.socketpair()
        fd = a.fileno()
        sel.register(a, R | W, "old")
        a.close()
        b.close()
        c, d = socket.socketpair()
        with c, d:
            unrelated = c if c.fileno() == fd else d
            assert unrelated.fileno() == fd
            with pytest.raises(FileNotFoundError):
                sel.modify(a, W, "old, write only")
            return len(sel.get_map()), [key.data for key, _ in sel.select(0)]

    if backend is Backend.EPOLL:
        assert same_on_both(backend, scenario) == (0, [])
    else:  # the stdlib's poll and select selectors watch the unrelated socket
        with IoPollSelector(backend) as sel:
            assert scenario(sel) == (0, [])


@pytest.mark.parametrize("given", ["socket", "fd"])
def test_fd_number_reuse_with_the_same_events(selector: IoPollSelector, given: str) -> None:
    # asyncio's add_reader on a new socket whose number a closed one still holds a reader
    # key for: a modify() with the same events and new data.  epoll dropped the old file's
    # registration when it closed; the new file must be watched all the same.
    a, b = socket.socketpair()
    fd = a.fileno()
    selector.register(a, R, "old")
    a.close()
    b.close()
    c, d = socket.socketpair()
    with c, d:
        new, peer = (c, d) if c.fileno() == fd else (d, c)
        assert new.fileno() == fd
        selector.modify(new if given == "socket" else fd, R, "new")
        peer.send(b"for the new socket")
        assert [(key.data, events) for key, events in selector.select(1)] == [("new", R)]
        selector.unregister(new)


def test_a_change_of_data_alone_leaves_the_registration(selector: IoPollSelector) -> None:
    # The same object, new data: the key changes and the fd stays watched as it was.
    a, b = socket.socketpair()
    with a, b:
        first = selector.register(a, R, "first")
        second = selector.modify(a, R, "second")
        assert (second.fileobj, second.events, second.data) == (a, R, "second")
        assert selector.get_key(a) is second and first.data == "first"
        b.send(b"x")
        assert [(key.data, events) for key, events in selector.select(1)] == [("second", R)]


def test_fd_closed_while_registered_is_reported_at_most_once(
    backend: Backend, selector: IoPollSelector
) -> None:
    # stdlib: EpollSelector drops it, PollSelector reports POLLNVAL on every call,
    # SelectSelector raises EBADF on every call.  Here: at most once, never an exception.
    r, w = os.pipe()
    try:
        key = selector.register(r, R)
        os.close(r)
        first = selector.select(0)
        assert first == ([] if backend is Backend.EPOLL else [(key, R)])
        assert selector.select(0) == []
        assert selector.unregister(r) is key
    finally:
        os.close(w)


def test_timeout_rounding(backend: Backend) -> None:
    with IoPollSelector(backend) as sel:
        a, b = socket.socketpair()
        with a, b:
            sel.register(a, R)
            for timeout in (0, -1, -0.5):
                start = time.monotonic()
                assert sel.select(timeout) == []
                assert time.monotonic() - start < 0.05
            start = time.monotonic()
            assert sel.select(0.0004) == []
            # rounded up (epoll/poll to the millisecond), never down to a busy poll
            assert time.monotonic() - start >= 0.0004
            b.send(b"x")
            assert [e for _, e in sel.select(None)] == [R]
