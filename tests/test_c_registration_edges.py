"""``add()`` and ``remove()`` in C: what a mutation run found the call-by-call tests miss
(``tests/test_c_registration.py``; 59 slips in ``_registration.c`` and ``_speedups.c``'s
registration parts, 13 a user could see let through, 11 of them leaks).

The C ``Context.add`` and ``Watcher.remove`` (src/iopoll/_registration.c) take the usual
call themselves and must leave behind exactly what the Python methods leave: no reference
held on the socket, the context, the mechanism, the fd's int or the error's cause once the
call is over (a server adds and removes a watcher per connection, so one reference a call
is a leak it feels), and the same answers for the calls the Python method refuses.  Each
case runs on ``iopoll`` (the C methods when built) and on ``pure_iopoll`` (the Python
methods, the reference); with ``IOPOLL_PURE_PYTHON=1`` both run the Python methods.
"""

from __future__ import annotations

import gc
import socket
import sys
import tempfile
import weakref
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

import pytest

from iopoll import Backend, Event, FailedHandleAddError, InactiveWatcherError
from test_c_registration import MODULES

READ = Event.READ
Pairs = Callable[[], tuple[socket.socket, socket.socket]]
pytestmark = pytest.mark.skipif(
    not Backend.POLL.is_available(), reason="the cases run on POLL, and on EPOLL where it is"
)
CYCLES = 200  # add()/remove() rounds in a leak check: far above any cache's noise


@pytest.fixture
def high_fd(pairs: Pairs) -> Iterator[int]:
    """An int fd above CPython's small-int cache (a fresh int object, whose references a
    test can count), open on one end of a socket pair; closed after the test."""
    import fcntl  # POSIX, as POLL is
    a, _ = pairs()
    fd = fcntl.fcntl(a.fileno(), fcntl.F_DUPFD, 1000)
    yield fd
    socket.socket(fileno=fd).close()


def _keeps_no_reference(ctx: Any, handle: Any, counted: object) -> None:
    """``CYCLES`` add() and remove() of ``handle`` leave ``counted`` with the references it
    had after the first (which makes whatever a first call makes once)."""
    ctx.add(handle, READ).remove()
    before = sys.getrefcount(counted)
    for _ in range(CYCLES):
        ctx.add(handle, READ).remove()
    assert sys.getrefcount(counted) == before


def _epoll(module: ModuleType) -> Any:
    if not Backend.EPOLL.is_available():
        pytest.skip("needs EPOLL")
    return module.Context(module.Backend.EPOLL)


@pytest.mark.parametrize("module", MODULES)
def test_add_and_remove_keep_no_reference_to_the_socket(module: ModuleType, pairs: Pairs) -> None:
    """Once its watcher is removed and dropped, a socket added is collected with its last
    reference: neither add() nor remove() keeps its handle, its fileno() probe or any other
    record that leads to it."""
    a, _ = pairs()
    sock = socket.socket(fileno=a.detach())
    ref = weakref.ref(sock)
    with module.Context(module.Backend.POLL) as ctx:
        watcher = ctx.add(sock, READ)
        watcher.remove()
        del watcher
        sock.close()
        del sock
        gc.collect()
        assert ref() is None


@pytest.mark.parametrize("module", MODULES)
def test_add_and_remove_keep_no_reference_to_the_context(module: ModuleType, pairs: Pairs) -> None:
    """A context whose watchers were removed is collected once the program drops it, both
    after the usual remove() and after remove() of a watcher whose stream was closed first
    (a no-op that retires it): neither call keeps a reference to it."""
    a, _ = pairs()
    c, _ = pairs()
    ctx = module.Context(module.Backend.POLL)
    ref = weakref.ref(ctx)
    watcher = ctx.add(a, READ)
    closed = ctx.add(c, READ)
    watcher.remove()
    c.close()
    closed.remove()
    assert not closed.is_active()
    del ctx
    gc.collect()
    assert ref() is None


@pytest.mark.parametrize("module", MODULES)
def test_add_and_remove_keep_no_reference_to_the_mechanism(
    module: ModuleType, pairs: Pairs
) -> None:
    """Adding and removing watchers leaves the context's OS object with as many
    references as before: no call keeps one."""
    a, _ = pairs()
    with _epoll(module) as ctx:
        _keeps_no_reference(ctx, a, ctx._mechanism)


@pytest.mark.parametrize("module", MODULES)
def test_add_and_remove_keep_no_reference_to_an_int_fd(module: ModuleType, high_fd: int) -> None:
    """An int fd given to add() is referenced by its watcher while it is watched, and by
    nothing once the watcher is removed and dropped: neither call keeps a reference of its
    own to the int."""
    with _epoll(module) as ctx:
        _keeps_no_reference(ctx, high_fd, high_fd)


@pytest.mark.parametrize("module", MODULES)
def test_add_and_remove_keep_none_balanced(module: ModuleType, pairs: Pairs) -> None:
    """remove() puts None in the fd's place in the context's table with a reference of its
    own: on CPython before 3.12, where None is counted, a server's add() and remove() per
    connection must not wear its count down (at 0 the interpreter aborts)."""
    a, _ = pairs()
    with _epoll(module) as ctx:
        ctx.add(a, READ).remove()
        gc.collect()
        gc.disable()  # no other test's garbage freed (and its Nones dropped) meanwhile
        try:
            before = sys.getrefcount(None)
            for _ in range(CYCLES * 5):
                ctx.add(a, READ).remove()
            after = sys.getrefcount(None)
        finally:
            gc.enable()
        assert abs(after - before) < CYCLES


@pytest.mark.parametrize("module", MODULES)
def test_a_refused_add_keeps_no_reference_to_its_cause(module: ModuleType) -> None:
    """The FailedHandleAddError of a refused add() (epoll and a regular file) is raised
    from the OSError, which is also its context, as `raise ... from exc` in the except
    block that caught it makes it; and nothing else keeps the OSError."""
    with _epoll(module) as ctx, tempfile.TemporaryFile() as file:
        with pytest.raises(FailedHandleAddError) as caught:
            ctx.add(file.fileno(), READ)
        error = caught.value
        cause = error.__cause__
        assert isinstance(cause, OSError)
        assert error.__context__ is cause and error.__suppress_context__
        del caught, error
        # Referenced here and by getrefcount's argument: the error and traceback are gone.
        assert sys.getrefcount(cause) == 2


@pytest.mark.parametrize("module", MODULES)
def test_remove_of_a_removed_watcher_leaves_its_successor(module: ModuleType, pairs: Pairs) -> None:
    """remove() of a watcher already removed is refused even when a new watcher holds its
    fd now, and the new watcher stays registered and is still reported."""
    a, b = pairs()
    with module.Context(module.Backend.POLL) as ctx:
        old = ctx.add(a, READ)
        old.remove()
        new = ctx.add(a, READ)
        with pytest.raises(InactiveWatcherError):
            old.remove()
        assert new.is_active() and ctx._watchers == {a.fileno(): new}
        b.send(b"x")
        assert ctx.wait(0) == [new]


@pytest.mark.parametrize("module", MODULES)
def test_an_undo_that_fails_is_chained_to_the_add_error(
    module: ModuleType, pairs: Pairs, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When add() fails once the OS took the fd (here: the context's weak self-reference is
    missing) and undoing it raises too, the undo's error leaves add() with the first error
    as its context, as Python chains an exception raised in an ``except`` block."""
    a, _ = pairs()
    with module.Context(module.Backend.POLL) as ctx:

        def undo(self: Any, fd: int, source: object) -> None:
            raise RuntimeError("undo failed")

        monkeypatch.setattr(type(ctx), "_unadd", undo)
        self_ref = ctx._self_ref
        del ctx._self_ref
        try:
            with pytest.raises(RuntimeError, match="undo failed") as caught:
                ctx.add(a, READ)
        finally:
            ctx._self_ref = self_ref
        assert type(caught.value.__context__) is AttributeError
