"""``iopoll.aio``'s bookkeeping and shutdown paths that the other aio tests leave open.

A second mutation run of ``src/iopoll/aio.py`` (60 slips, after the 30 pinned in
``test_aio_edges.py``) found these let through by every aio test: what a selector holds
on to after ``unregister()`` and ``close()`` (the data of a key stays reachable),
``get_map().get()``'s default, a change of events for a fd number that ``POLL`` or
``SELECT`` retired (the new file must be watched), a failing OS wait that must raise
rather than look like "nothing ready", a fd number at the top of a C int, what escapes
``data_received()``, a transport's server, the error ``run()`` gives when nested, and the
Python 3.10 fallback of ``run()`` (``_run_without_runner``), which no test ran on newer
Pythons: its ``debug=False``, its async generator shutdown and the report of tasks that
raise while cancelled.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import gc
import os
import selectors
import weakref
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from typing import Any

import pytest

import iopoll.aio
from iopoll import Backend
from iopoll.aio import IoPollSelector

R, W = selectors.EVENT_READ, selectors.EVENT_WRITE

BACKENDS = Backend.available_backends()
POLL_LIKE = [b for b in BACKENDS if b in (Backend.POLL, Backend.SELECT)]


class _Data:
    """A key's data whose lifetime a weak reference can follow."""


@contextlib.contextmanager
def _collector_off() -> Iterator[None]:
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


# -- what the selector keeps after unregister() and close() ----------------------------


@pytest.mark.parametrize("backend", BACKENDS, ids=lambda b: b.name)
def test_unregister_lets_go_of_the_keys_data(
    backend: Backend, pairs: Callable[[], Any]
) -> None:
    """After unregister() the selector holds nothing of the key: its data (asyncio's
    handles, and through them transports and protocols) is freed at once, while the
    selector lives on, as with the stdlib selectors."""
    a, _ = pairs()
    with IoPollSelector(backend) as sel, _collector_off():
        data = _Data()
        gone = weakref.ref(data)
        sel.register(a, R, data)
        sel.unregister(a)
        del data
        assert gone() is None
        assert len(sel.get_map()) == 0


@pytest.mark.parametrize("backend", BACKENDS, ids=lambda b: b.name)
def test_close_lets_go_of_every_keys_data(backend: Backend, pairs: Callable[[], Any]) -> None:
    """close() forgets every key (its docstring: "every key is forgotten"): the data of
    keys still registered is freed at close(), not when the selector object goes."""
    a, b = pairs()
    sel = IoPollSelector(backend)
    with _collector_off():
        first, second = _Data(), _Data()
        refs = [weakref.ref(first), weakref.ref(second)]
        sel.register(a, R, first)
        sel.register(b, R | W, second)
        del first, second
        sel.close()
        assert [ref() for ref in refs] == [None, None]
        sel.close()  # idempotent
        assert sel.get_map() is None


# -- get_map().get() ----------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS, ids=lambda b: b.name)
def test_get_map_get_returns_the_default_for_an_unregistered_object(
    backend: Backend, pairs: Callable[[], Any]
) -> None:
    """Mapping.get(obj, default) returns default when obj is not registered, given an
    object or a bare fd, as the stdlib's mapping does."""
    a, b = pairs()
    missing = object()
    with IoPollSelector(backend) as sel:
        key = sel.register(a, R)
        mapping = sel.get_map()
        assert mapping.get(b, missing) is missing
        assert mapping.get(b.fileno(), missing) is missing
        assert mapping.get(a, missing) is key
        assert mapping.get(a.fileno(), missing) is key


# -- a change of events for a fd number the Context retired --------------------------


@pytest.mark.parametrize("backend", POLL_LIKE, ids=lambda b: b.name)
def test_a_change_of_events_for_a_retired_fd_number_watches_the_new_file(
    backend: Backend,
) -> None:
    """POLL and SELECT report a fd closed while registered once and the Context drops
    it; a modify() with new events for that number, now a new pipe's read end, must
    register it again, for the new events: the new pipe's data is reported."""
    with IoPollSelector(backend) as sel:
        r, w = os.pipe()
        sel.register(r, W, "old")  # a read end is never writable: only the close reports
        os.close(r)
        os.close(w)
        assert [(k.data, e) for k, e in sel.select(0)] == [("old", W)]
        new_r, new_w = os.pipe()
        if new_w == r:  # the write end took the number: give it another one
            new_w = os.dup(r)
        if new_r != r:  # move the read end there (dup2 closes what held it)
            os.dup2(new_r, r)
            os.close(new_r)
            new_r = r
        try:
            key = sel.modify(r, R, "new")
            assert (key.fd, key.events, key.data) == (r, R, "new")
            os.write(new_w, b"x")
            assert [(k.data, e) for k, e in sel.select(1)] == [("new", R)]
            assert sel.unregister(r) is key
            assert sel.select(0) == []
        finally:
            os.close(new_r)
            os.close(new_w)


# -- an OS wait that fails is an error, not "nothing ready" --------------------------------


@pytest.mark.skipif(
    Backend.POLL not in BACKENDS, reason="poll() refuses more fds than RLIMIT_NOFILE"
)
def test_a_failing_wait_raises_os_error() -> None:
    """poll() with more fds than RLIMIT_NOFILE fails with EINVAL: select() must raise
    that OSError, as PollSelector does, not return [] (asyncio would spin, none the
    wiser). Only EINTR is taken for an empty wait."""
    from fd_limit import lowered_fd_limit  # POSIX: resource

    pipes = [os.pipe() for _ in range(24)]
    try:
        with IoPollSelector(Backend.POLL) as sel:
            for r, _ in pipes:
                sel.register(r, R)
            with lowered_fd_limit(16), pytest.raises(OSError) as caught:
                sel.select(0)
            assert caught.value.errno == errno.EINVAL
            assert sel.select(0) == []  # and usable again once the limit is back
    finally:
        for r, w in pipes:
            os.close(r)
            os.close(w)


# -- the largest fd number a C int holds is the OS's to refuse ----------------------


@pytest.mark.skipif(Backend.EPOLL not in BACKENDS, reason="needs EPOLL")
def test_the_largest_c_int_fd_is_refused_by_epoll_as_ebadf() -> None:
    """register(2**31 - 1) reaches epoll_ctl(), which says EBADF (OSError), as
    EpollSelector does; only a number beyond a C int is refused up front (ValueError)."""
    with IoPollSelector(Backend.EPOLL) as sel, selectors.EpollSelector() as stdlib:
        for selector in (sel, stdlib):
            with pytest.raises(OSError) as caught:
                selector.register(2**31 - 1, R)
            assert caught.value.errno == errno.EBADF
        assert len(sel.get_map()) == 0


# -- socket transports: what escapes data_received(), and the server they belong to ----


def test_system_exit_from_data_received_escapes_the_loop() -> None:
    """SystemExit and KeyboardInterrupt raised by data_received() end the loop's run, as
    asyncio's transport lets them, rather than becoming a fatal error of the transport
    (which would close the connection and carry on)."""
    lost: list[BaseException | None] = []

    class Exits(asyncio.Protocol):
        def data_received(self, data: bytes) -> None:
            raise SystemExit(data.decode())

        def connection_lost(self, exc: BaseException | None) -> None:
            lost.append(exc)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(Exits, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            writer.write(b"bye")
            await asyncio.sleep(5)
        finally:
            writer.close()
            server.close()
            await server.wait_closed()

    loop = iopoll.aio.Loop()
    try:
        task = loop.create_task(main())
        with pytest.raises(SystemExit) as caught:
            loop.run_until_complete(task)
        assert caught.value.code == "bye"
        assert lost == []  # the connection was not closed for it
        task.cancel()
        loop.run_until_complete(asyncio.gather(task, return_exceptions=True))
    finally:
        loop.close()


def test_server_wait_closed_waits_for_its_connections() -> None:
    """A socket transport is attached to the server that accepted it: wait_closed(),
    awaited before close(), ends only once the last connection is gone."""

    async def main() -> list[str]:
        steps: list[str] = []
        accepted: asyncio.Future[asyncio.StreamWriter] = asyncio.get_running_loop().create_future()

        def on_connect(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            accepted.set_result(writer)

        server = await asyncio.start_server(on_connect, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        _, client = await asyncio.open_connection("127.0.0.1", port)
        server_side = await asyncio.wait_for(accepted, 5)
        waiting = asyncio.ensure_future(server.wait_closed())
        await asyncio.sleep(0)
        server.close()
        await asyncio.sleep(0.05)
        steps.append("done" if waiting.done() else "waiting")
        server_side.close()
        await server_side.wait_closed()
        await asyncio.wait_for(waiting, 5)
        steps.append("done")
        client.close()
        await client.wait_closed()
        return steps

    assert iopoll.aio.run(main()) == ["waiting", "done"]


# -- run() and its Python 3.10 fallback ------------------------------------------------


def test_nested_run_names_iopoll_run_in_its_error() -> None:
    """iopoll.aio.run() inside a running loop raises RuntimeError naming itself (on
    every Python: 3.10's fallback has no check of its own), and starts nothing."""

    async def main() -> None:
        inner = asyncio.sleep(0)
        try:
            with pytest.raises(RuntimeError, match=r"iopoll\.aio\.run\(\) cannot be called"):
                iopoll.aio.run(inner)
        finally:
            inner.close()

    iopoll.aio.run(main())


RUNNERS: list[Any] = [
    pytest.param(iopoll.aio.run, id="run"),
    pytest.param(
        lambda main, debug=None: iopoll.aio._run_without_runner(main, debug),
        id="run_without_runner",
    ),
]


@pytest.mark.parametrize("runner", RUNNERS)
def test_debug_false_turns_off_debug_asked_for_by_the_environment(
    runner: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """debug=False wins over PYTHONASYNCIODEBUG, as in asyncio.run(); debug=None leaves
    the loop's own choice (here on)."""
    monkeypatch.setenv("PYTHONASYNCIODEBUG", "1")

    async def debug_of_the_loop() -> bool:
        return asyncio.get_running_loop().get_debug()

    assert runner(debug_of_the_loop(), debug=False) is False
    assert runner(debug_of_the_loop()) is True


@pytest.mark.parametrize("runner", RUNNERS)
def test_async_generators_left_open_are_finalized_before_run_returns(
    runner: Callable[[Coroutine[Any, Any, Any]], Any],
) -> None:
    """An async generator suspended in a try block when main returns has its finally
    run by the shutdown, before run() returns (and it is still referenced, so no
    collection finalizes it instead)."""
    events: list[str] = []

    async def agen() -> AsyncIterator[int]:
        try:
            yield 1
            yield 2
        finally:
            events.append("finally")

    kept: list[AsyncIterator[int]] = []

    async def main() -> None:
        gen = agen()
        kept.append(gen)
        assert await gen.__anext__() == 1

    runner(main())
    assert events == ["finally"]


def test_the_fallback_reports_only_tasks_that_raise_when_cancelled() -> None:
    """_run_without_runner (Python 3.10's run) cancels leftover tasks and calls the loop's
    exception handler for each that ended with an exception other than the
    cancellation; one that swallows it and returns is not reported."""
    contexts: list[dict[str, Any]] = []

    async def raises_when_cancelled() -> None:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            raise LookupError("from the cancelled task") from None

    async def swallows_cancellation() -> str:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            pass
        return "returned"

    cancelled: list[str] = []

    async def is_cancelled() -> None:
        try:
            await asyncio.sleep(3600)
        finally:
            cancelled.append("finally")

    tasks: list[asyncio.Task[Any]] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(lambda _loop, context: contexts.append(context))
        tasks.append(loop.create_task(raises_when_cancelled()))
        tasks.append(loop.create_task(swallows_cancellation()))
        tasks.append(loop.create_task(is_cancelled()))
        await asyncio.sleep(0)

    assert iopoll.aio._run_without_runner(main(), None) is None
    assert [c["message"] for c in contexts] == [
        "unhandled exception during iopoll.aio.run() shutdown"
    ]
    assert isinstance(contexts[0]["exception"], LookupError)
    assert contexts[0]["task"] is tasks[0]
    assert tasks[1].result() == "returned"
    assert tasks[2].cancelled() and cancelled == ["finally"]
